// Embedding lookup and its deterministic gradient.
//
// table [V, D] f32, ids u32 [N], out / grad_out [N, D] f32, all row-major.
//
// lookup4 / lookup1: out[i, :] = table[ids[i], :], or zeros when ids[i] >= V. One thread
// per vec4 of out (lookup4, when D % 4 == 0) or per element: the reads of a table row and
// the writes of an out row are contiguous, so both coalesce; ids[i] is read by the D/4
// threads of row i from cache.
//
// backward: grad_table[v, :] = sum over i in increasing order of grad_out[i, :] with
// ids[i] == v, written (not accumulated); rows no id names are written as zeros.
// Deterministic without sorting and without float atomics: one workgroup per (block of R
// vocabulary rows, chunk of WG columns). Its WG threads own one column each and keep R
// accumulators (one per row of the block) in workgroup memory. The workgroup scans all N
// ids in tiles of TILE: each thread tests TILE / WG ids against the block and sets a bit
// in a TILE-bit mask for every hit (atomicOr on u32 words: the mask is the same whatever
// the order); after a barrier every thread walks the set bits in increasing position and
// adds grad_out[i, its column] to the accumulator of row ids[i]. Each sum therefore runs
// over i in increasing order, in one thread: bitwise the same every run, and equal to a
// sequential f32 sum on the CPU.
// Cost: every workgroup reads all N ids (from L2: ceil(V/R) * ceil(D/WG) * N * 4 bytes),
// each grad_out element is read once, and grad_table is written once (V * D * 4 bytes,
// which any method must write). With R * WG = 4032 accumulators (16 KB) the id traffic
// is about V * D * N / 1024 bytes: ~0.5 GB for V = 49152, D = 576, N = 16384, far less
// for smaller N. Past a few hundred thousand ids a stable sort of the ids (then one
// segment per row) would be the better plan.
//
// The grid may be 2-D when there are more workgroups than one dimension allows; the
// linear workgroup index is wid.x + wid.y * nwg.x.

override WG: u32 = 64u;     // threads per workgroup = columns per chunk (backward)
override R: u32 = 63u;      // vocabulary rows per block (backward): R * WG floats + the mask <= 16 KiB
const TILE: u32 = 1024u;    // ids per mask

struct Params {
    n: u32,        // ids
    v: u32,        // vocabulary rows
    d: u32,        // columns (elements; vec4 in lookup4)
    chunks: u32,   // backward: column chunks of WG
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> ids: array<u32>;
@group(0) @binding(2) var<storage, read> table4: array<vec4f>;
@group(0) @binding(2) var<storage, read> table1: array<f32>;
@group(0) @binding(3) var<storage, read_write> out4: array<vec4f>;
@group(0) @binding(3) var<storage, read_write> out1: array<f32>;
@group(0) @binding(2) var<storage, read> grad_out: array<f32>;
@group(0) @binding(3) var<storage, read_write> grad_table: array<f32>;

fn linear_wg(wid: vec3u, nwg: vec3u) -> u32 {
    return wid.x + wid.y * nwg.x;
}

@compute @workgroup_size(WG)
fn lookup4(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
           @builtin(num_workgroups) nwg: vec3u) {
    let idx = linear_wg(wid, nwg) * WG + lid.x;
    if (idx >= p.n * p.d) { return; }
    let i = idx / p.d;
    let c = idx % p.d;
    let id = ids[i];
    var x = vec4f(0.0);
    if (id < p.v) { x = table4[id * p.d + c]; }
    out4[idx] = x;
}

@compute @workgroup_size(WG)
fn lookup1(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
           @builtin(num_workgroups) nwg: vec3u) {
    let idx = linear_wg(wid, nwg) * WG + lid.x;
    if (idx >= p.n * p.d) { return; }
    let i = idx / p.d;
    let c = idx % p.d;
    let id = ids[i];
    var x = 0.0;
    if (id < p.v) { x = table1[id * p.d + c]; }
    out1[idx] = x;
}

var<workgroup> acc: array<f32, R * WG>;
var<workgroup> mask: array<atomic<u32>, TILE / 32u>;

@compute @workgroup_size(WG)
fn backward(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid3: vec3u,
            @builtin(num_workgroups) nwg: vec3u) {
    let lid = lid3.x;
    let wg = linear_wg(wid, nwg);
    let blocks = (p.v + R - 1u) / R;
    if (wg >= blocks * p.chunks) { return; }
    let v0 = (wg / p.chunks) * R;
    let rows = min(R, p.v - v0);
    let col = (wg % p.chunks) * WG + lid;
    for (var r = 0u; r < R; r++) {
        acc[r * WG + lid] = 0.0;
    }
    for (var tile = 0u; tile < p.n; tile += TILE) {
        for (var w = lid; w < TILE / 32u; w += WG) {
            atomicStore(&mask[w], 0u);
        }
        workgroupBarrier();
        for (var k = lid; k < TILE; k += WG) {
            let j = tile + k;
            if (j < p.n && ids[j] - v0 < rows) {
                atomicOr(&mask[k / 32u], 1u << (k % 32u));
            }
        }
        workgroupBarrier();
        if (col < p.d) {
            for (var w = 0u; w < TILE / 32u; w++) {
                var bits = atomicLoad(&mask[w]);
                while (bits != 0u) {
                    let j = tile + w * 32u + firstTrailingBit(bits);
                    let r = ids[j] - v0;
                    acc[r * WG + lid] += grad_out[j * p.d + col];
                    bits &= bits - 1u;
                }
            }
        }
        workgroupBarrier();
    }
    if (col < p.d) {
        for (var r = 0u; r < rows; r++) {
            grad_table[(v0 + r) * p.d + col] = acc[r * WG + lid];
        }
    }
}
