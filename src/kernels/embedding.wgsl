// Embedding lookup and its deterministic gradient.
//
// table [V, D] f32, ids u32 [N], out / grad_out [N, D] f32, all row-major.
//
// lookup4 / lookup1: out[i, :] = table[ids[i], :], or zeros when ids[i] >= V. A workgroup
// copies one chunk of WG * U columns (vec4 in lookup4, when D % 4 == 0; floats in lookup1)
// of one row i: the row and chunk come from the workgroup index with one division per
// workgroup (none per element), ids[i] is one uniform load shared by the workgroup, and
// each thread issues its U independent 16-byte loads (stride WG, so every load of the
// workgroup is coalesced) before its U stores, keeping several loads in flight per thread
// behind the one dependent id load. Many rows per dispatch: N * ceil(D / (WG * U))
// workgroups (2-D grid when that exceeds one dimension).
//
// Backward: grad_table[v, :] = sum over i in increasing order of grad_out[i, :] with
// ids[i] == v, written (not accumulated); rows no id names (and ids >= V) give zeros.
// Deterministic without float atomics, through a scratch buffer of V + N u32 (`sorted`):
//   clear_counts, count_ids   many workgroups: zero V counters, then a histogram of the
//              in-range ids (integer atomics: counts do not depend on order).
//   sort_ids   one workgroup, plain loads and stores: a stable counting sort. Exclusive
//              prefix sum over V (each thread a contiguous run of ceil(V / WG) counts,
//              then a tree scan of the WG run totals), then a stable scatter in tiles of
//              WG ids: a thread's place is its id's cursor plus the number of equal ids
//              before it in the tile, and the last of them advances the cursor. The
//              result: sorted[v] = end of row v's segment (its start is sorted[v - 1], 0
//              for v = 0) and sorted[V + k] = the k-th position of the permutation: the
//              positions of each id in increasing order. Cost: ~2 V + N words of memory
//              traffic in one workgroup plus WG shared-memory compares per thread per
//              tile (one workgroup: cheap beside the products for vocabularies of tens
//              of thousands).
//   row_sum4 / row_sum1   one workgroup per (vocabulary row v, chunk of WG * CU columns):
//              each thread sums its CU columns over row v's segment in order (the
//              position is a uniform load), CU * KU = 8 loads issued before the adds (the
//              adds stay in order, so the result is bitwise the sequential f32 sum), and
//              writes the row once.
// Traffic: grad_out read once (N * D * 4 bytes), grad_table written once (V * D * 4), plus
// the sort: the memory-bound minimum. The previous design scanned all N ids in every
// (row block, column chunk) workgroup (V * D * N / 1024 bytes: 2 GB at V 32000, D 4096,
// N 16384). A row whose id repeats r times costs r / KU steps of CU * KU independent loads
// per thread in that row's workgroups: one id on every position (padding) is latency
// bound in its row, ~N / 2 round trips.
//
// The grid may be 2-D when there are more workgroups than one dimension allows; the
// linear workgroup index is wid.x + wid.y * nwg.x.

override WG: u32 = 256u;
const U: u32 = 4u;           // lookups: vec4 (or floats) per thread
const NONE: u32 = 0xffffffffu;

struct Params {
    n: u32,        // ids
    v: u32,        // vocabulary rows
    d: u32,        // columns (vec4 in lookup4 / row_sum4, floats otherwise)
    chunks: u32,   // workgroups per row
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read> table4: array<vec4f>;
@group(0) @binding(2) var<storage, read> table1: array<f32>;
@group(0) @binding(3) var<storage, read_write> out4: array<vec4f>;
@group(0) @binding(3) var<storage, read_write> out1: array<f32>;

// clear_counts / count_ids, then sort_ids
@group(0) @binding(2) var<storage, read_write> sort_rw: array<atomic<u32>>;
@group(0) @binding(2) var<storage, read_write> sort_plain: array<u32>;
// row_sum4 / row_sum1
@group(0) @binding(1) var<storage, read> sorted: array<u32>;
@group(0) @binding(2) var<storage, read> grad_out4: array<vec4f>;
@group(0) @binding(2) var<storage, read> grad_out1: array<f32>;
@group(0) @binding(3) var<storage, read_write> grad_table4: array<vec4f>;
@group(0) @binding(3) var<storage, read_write> grad_table1: array<f32>;

fn linear_wg(wid: vec3u, nwg: vec3u) -> u32 {
    return wid.x + wid.y * nwg.x;
}

@compute @workgroup_size(WG)
fn lookup4(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
           @builtin(num_workgroups) nwg: vec3u) {
    let wg = linear_wg(wid, nwg);
    if (wg >= p.n * p.chunks) { return; }
    let i = wg / p.chunks;
    let c0 = (wg - i * p.chunks) * (WG * U) + lid.x;
    let id = ids[i];
    var x: array<vec4f, U>;
    for (var u = 0u; u < U; u++) {
        let c = c0 + u * WG;
        x[u] = vec4f(0.0);
        if (id < p.v && c < p.d) { x[u] = table4[id * p.d + c]; }
    }
    for (var u = 0u; u < U; u++) {
        let c = c0 + u * WG;
        if (c < p.d) { out4[i * p.d + c] = x[u]; }
    }
}

@compute @workgroup_size(WG)
fn lookup1(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
           @builtin(num_workgroups) nwg: vec3u) {
    let wg = linear_wg(wid, nwg);
    if (wg >= p.n * p.chunks) { return; }
    let i = wg / p.chunks;
    let c0 = (wg - i * p.chunks) * (WG * U) + lid.x;
    let id = ids[i];
    var x: array<f32, U>;
    for (var u = 0u; u < U; u++) {
        let c = c0 + u * WG;
        x[u] = 0.0;
        if (id < p.v && c < p.d) { x[u] = table1[id * p.d + c]; }
    }
    for (var u = 0u; u < U; u++) {
        let c = c0 + u * WG;
        if (c < p.d) { out1[i * p.d + c] = x[u]; }
    }
}

var<workgroup> tile_ids: array<u32, WG>;
var<workgroup> scan: array<u32, WG>;

// Counting: clear_counts zeroes the V counters, count_ids adds one per in-range id
// (integer atomics: the counts do not depend on order); both spread over many
// workgroups. sort_ids then runs in one workgroup on plain loads and stores.
@compute @workgroup_size(WG)
fn clear_counts(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
                @builtin(num_workgroups) nwg: vec3u) {
    let v = linear_wg(wid, nwg) * WG + lid.x;
    if (v < p.v) { atomicStore(&sort_rw[v], 0u); }
}

@compute @workgroup_size(WG)
fn count_ids(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
             @builtin(num_workgroups) nwg: vec3u) {
    let i = linear_wg(wid, nwg) * WG + lid.x;
    if (i >= p.n) { return; }
    let id = ids[i];
    if (id < p.v) { atomicAdd(&sort_rw[id], 1u); }
}

@compute @workgroup_size(WG)
fn sort_ids(@builtin(local_invocation_id) lid3: vec3u) {
    let l = lid3.x;
    // 1. exclusive prefix sum: the counts become the segment starts
    let per = (p.v + WG - 1u) / WG;
    let b = min(l * per, p.v);
    let e = min(b + per, p.v);
    var total = 0u;
    for (var v = b; v < e; v++) {
        total += sort_plain[v];
    }
    scan[l] = total;
    workgroupBarrier();
    for (var off = 1u; off < WG; off *= 2u) {
        var t = 0u;
        if (l >= off) { t = scan[l - off]; }
        workgroupBarrier();
        scan[l] += t;
        workgroupBarrier();
    }
    var run = scan[l] - total;
    for (var v = b; v < e; v++) {
        let c = sort_plain[v];
        sort_plain[v] = run;
        run += c;
    }
    storageBarrier();
    // 2. stable scatter, WG ids at a time; afterwards sort_plain[v] is the end of segment v
    for (var t = 0u; t < p.n; t += WG) {
        let i = t + l;
        var id = NONE;
        if (i < p.n) {
            id = ids[i];
            if (id >= p.v) { id = NONE; }
        }
        tile_ids[l] = id;
        workgroupBarrier();
        var rank = 0u;
        var last = true;
        if (id != NONE) {
            for (var j = 0u; j < WG; j++) {
                if (tile_ids[j] == id) {
                    if (j < l) { rank++; } else if (j > l) { last = false; }
                }
            }
        }
        var pos = 0u;
        if (id != NONE) { pos = sort_plain[id] + rank; }
        storageBarrier();   // every cursor read before any is advanced
        if (id != NONE) {
            sort_plain[p.v + pos] = i;
            if (last) { sort_plain[id] = pos + 1u; }
        }
        storageBarrier();
        workgroupBarrier();   // tile_ids reused by the next tile
    }
}

fn segment(v: u32) -> vec2u {
    var s = 0u;
    if (v > 0u) { s = sorted[v - 1u]; }
    return vec2u(s, sorted[v]);
}

// Each thread owns CU columns at stride WG (coalesced) and walks the segment KU positions
// at a time, issuing its CU * KU loads before the adds; every column's adds stay in
// increasing position order.
const CU: u32 = 4u;
const KU: u32 = 2u;

@compute @workgroup_size(WG)
fn row_sum4(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
            @builtin(num_workgroups) nwg: vec3u) {
    let wg = linear_wg(wid, nwg);
    if (wg >= p.v * p.chunks) { return; }
    let v = wg / p.chunks;
    let c0 = (wg - v * p.chunks) * (WG * CU) + lid.x;
    if (c0 >= p.d) { return; }
    let seg = segment(v);
    let base = p.v;
    var acc: array<vec4f, CU>;
    for (var u = 0u; u < CU; u++) { acc[u] = vec4f(0.0); }
    var k = seg.x;
    for (; k + KU <= seg.y; k += KU) {
        var x: array<vec4f, CU * KU>;
        for (var q = 0u; q < KU; q++) {
            let row = sorted[base + k + q] * p.d;
            for (var u = 0u; u < CU; u++) {
                let c = c0 + u * WG;
                if (c < p.d) { x[q * CU + u] = grad_out4[row + c]; }
            }
        }
        for (var q = 0u; q < KU; q++) {
            for (var u = 0u; u < CU; u++) { acc[u] += x[q * CU + u]; }
        }
    }
    for (; k < seg.y; k++) {
        let row = sorted[base + k] * p.d;
        for (var u = 0u; u < CU; u++) {
            let c = c0 + u * WG;
            if (c < p.d) { acc[u] += grad_out4[row + c]; }
        }
    }
    for (var u = 0u; u < CU; u++) {
        let c = c0 + u * WG;
        if (c < p.d) { grad_table4[v * p.d + c] = acc[u]; }
    }
}

@compute @workgroup_size(WG)
fn row_sum1(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
            @builtin(num_workgroups) nwg: vec3u) {
    let wg = linear_wg(wid, nwg);
    if (wg >= p.v * p.chunks) { return; }
    let v = wg / p.chunks;
    let c0 = (wg - v * p.chunks) * (WG * CU) + lid.x;
    if (c0 >= p.d) { return; }
    let seg = segment(v);
    let base = p.v;
    var acc: array<f32, CU>;
    for (var u = 0u; u < CU; u++) { acc[u] = 0.0; }
    var k = seg.x;
    for (; k + KU <= seg.y; k += KU) {
        var x: array<f32, CU * KU>;
        for (var q = 0u; q < KU; q++) {
            let row = sorted[base + k + q] * p.d;
            for (var u = 0u; u < CU; u++) {
                let c = c0 + u * WG;
                if (c < p.d) { x[q * CU + u] = grad_out1[row + c]; }
            }
        }
        for (var q = 0u; q < KU; q++) {
            for (var u = 0u; u < CU; u++) { acc[u] += x[q * CU + u]; }
        }
    }
    for (; k < seg.y; k++) {
        let row = sorted[base + k] * p.d;
        for (var u = 0u; u < CU; u++) {
            let c = c0 + u * WG;
            if (c < p.d) { acc[u] += grad_out1[row + c]; }
        }
    }
    for (var u = 0u; u < CU; u++) {
        let c = c0 + u * WG;
        if (c < p.d) { grad_table1[v * p.d + c] = acc[u]; }
    }
}
