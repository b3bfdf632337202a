// Softmax over the last dimension and its backward pass.
//
//   softmax            out = exp(x - max) / sum(exp(x - max)) per row
//   softmax_stats      split rows, pass 1: (max, sum of exp(x - max)) of one chunk of a row
//   softmax_split      split rows, pass 2: combines its row's chunk statistics, writes a chunk
//   softmax_bwd        gin = y * (g - sum(g * y)) per row (y = the forward output)
//   softmax_bwd_stats  split rows, pass 1: sum(g * y) over one chunk
//   softmax_bwd_split  split rows, pass 2: adds its row's chunk sums, writes a chunk
//
// Layout and units as in norm.wgsl: rows of `d` contiguous f32, every buffer bound as
// array<vec4f>; a unit is an aligned vec4 when d % 4 == 0 (VEC), else one element held in
// lane x of a vec4 whose other lanes are dead.
//
// -inf entries (masks) are recognised by their bits, not by float arithmetic on infinities
// (which WGSL leaves indeterminate): a -inf lane is "dead", contributes nothing to the
// maximum or the sum, and its output is exactly 0. A row with no live entry (fully masked)
// gives zeros. Live values enter exp() only as (x - max) <= 0, so logits of any magnitude up
// to ~1e30 are stable. +inf and NaN entries give unspecified results.
//
// Why it is shaped so (memory-bound: one read and one write at full bandwidth):
//   - Rows are split over segments of `tpr` threads exactly as in norm.wgsl: about `upt`
//     units per thread (8 by default: 4096 f32 are 128 threads x 8 vec4, two rows per
//     workgroup; the host can plan 4), several short rows per workgroup, a whole
//     workgroup for rows of more than upt * WG / 2 units; thread j of a segment takes
//     units j, j+tpr, ..., so every warp access is a coalesced run of 16-byte loads.
//   - Register path (NV = 1..8 units per thread, rows up to 8 * WG units): each thread
//     keeps its units, finds its local max m, replaces them by e = exp(x - m) and sums them;
//     one radix-16 fold in workgroup memory (two barriers) combines the (max, sum) pairs
//     of the segment; the output
//     is e * exp(m - max) / sum. One exp per element, one read, one write.
//   - Long path (NV = 0): an online (max, sum) pass over the row (the sum is rescaled only
//     when the running max grows), the same fold, then a second pass writes exp(x - max) /
//     sum; the second read mostly hits L2.
//   - Split path, for few very long rows (a 262,144-entry vocabulary row and a handful of
//     rows would otherwise run on a handful of SMs): each row is cut into `chunks` chunks, a
//     workgroup each; pass 1 writes one (max, sum) pair per chunk to a scratch buffer, pass 2
//     folds its row's pairs (strided over the threads, then the fold: an order fixed by the
//     chunk count, so every workgroup of a row gets the same bits) and writes its chunk.
//   - The backward pass has the same three shapes with sum(g * y) in place of (max, sum).
// The grid may be 2-D: the linear workgroup index is wid.x + wid.y * nwg.x and workgroups
// past `groups` return at once.

struct Params {
    rows: u32,    // rows of the tensor
    d: u32,       // row length in elements
    units: u32,   // units per row: d / 4 (VEC) or d
    tpr: u32,     // threads per row segment, a power of two <= WG
    segs: u32,    // segments (rows) per workgroup: WG / tpr
    groups: u32,  // workgroups dispatched (linear count)
    chunks: u32,  // split path: chunks per row
    chunk: u32,   // split path: units per chunk
}

override WG: u32 = 256u;
override NV: u32 = 4u;       // units per thread held in registers; 0: long-row path
override VEC: bool = true;   // d % 4 == 0: a unit is an aligned vec4

const NVMAX: u32 = 8u;
const NEG: f32 = -0x1.fffffep+127f;   // the most negative finite f32
const NEG_INF_BITS: u32 = 0xff800000u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4f>;         // input, or y in backward
@group(0) @binding(2) var<storage, read_write> out: array<vec4f>; // softmax, softmax_split
@group(0) @binding(2) var<storage, read_write> part: array<vec2f>;  // softmax_stats
@group(0) @binding(2) var<storage, read> g: array<vec4f>;         // backward: grad_out
@group(0) @binding(3) var<storage, read> part_in: array<vec2f>;   // softmax_split
@group(0) @binding(3) var<storage, read_write> gin: array<vec4f>; // softmax_bwd(_split)
@group(0) @binding(3) var<storage, read_write> bpart: array<vec2f>;    // softmax_bwd_stats
@group(0) @binding(4) var<storage, read> bpart_in: array<vec2f>;  // softmax_bwd_split

const RAD: u32 = 16u;   // seg_reduce radix; WG <= RAD * RAD (the host uses 256)

var<workgroup> red: array<vec2f, WG>;
var<workgroup> red2: array<vec2f, WG / RAD>;

// ---- units ------------------------------------------------------------------------------

fn ld_x(r: u32, j: u32) -> vec4f {
    if (VEC) { return x[r * p.units + j]; }
    let e = r * p.d + j;
    return vec4f(x[e >> 2u][e & 3u], 0.0, 0.0, 0.0);
}
fn ld_g(r: u32, j: u32) -> vec4f {
    if (VEC) { return g[r * p.units + j]; }
    let e = r * p.d + j;
    return vec4f(g[e >> 2u][e & 3u], 0.0, 0.0, 0.0);
}
fn st_out(r: u32, j: u32, v: vec4f) {
    if (VEC) { out[r * p.units + j] = v; return; }
    let e = r * p.d + j;
    out[e >> 2u][e & 3u] = v.x;
}
fn st_gin(r: u32, j: u32, v: vec4f) {
    if (VEC) { gin[r * p.units + j] = v; return; }
    let e = r * p.d + j;
    gin[e >> 2u][e & 3u] = v.x;
}

// The live lanes of a unit: real elements that are not -inf.
fn live(v: vec4f) -> vec4<bool> {
    let b = bitcast<vec4u>(v) != vec4u(NEG_INF_BITS);
    if (VEC) { return b; }
    return vec4<bool>(b.x, false, false, false);
}

fn max4(v: vec4f) -> f32 {
    return max(max(v.x, v.y), max(v.z, v.w));
}

// ---- reductions -------------------------------------------------------------------------

// (max, sum) pairs: sums of exp(x - max) over two sets, combined. A set with no live
// element is (NEG, 0) and leaves the other unchanged.
fn combine(a: vec2f, b: vec2f) -> vec2f {
    let m = max(a.x, b.x);
    return vec2f(m, a.y * exp(a.x - m) + b.y * exp(b.x - m));
}

// n consecutive entries of `red` from b combined: sums of .x, or (max, sum) pairs when ms,
// folded as one max then one sum of rescaled terms (independent exps, not a chain of
// pairwise combines). Fixed order.
fn fold_red(b: u32, n: u32, ms: bool) -> vec2f {
    if (!ms) {
        var t = red[b];
        for (var i = 1u; i < n; i++) { t += red[b + i]; }
        return t;
    }
    var m = red[b].x;
    for (var i = 1u; i < n; i++) { m = max(m, red[b + i].x); }
    var s = 0.0;
    for (var i = 0u; i < n; i++) { let q = red[b + i]; s += q.y * exp(q.x - m); }
    return vec2f(m, s);
}

fn fold_red2(b: u32, n: u32, ms: bool) -> vec2f {
    if (!ms) {
        var t = red2[b];
        for (var i = 1u; i < n; i++) { t += red2[b + i]; }
        return t;
    }
    var m = red2[b].x;
    for (var i = 1u; i < n; i++) { m = max(m, red2[b + i].x); }
    var s = 0.0;
    for (var i = 0u; i < n; i++) { let q = red2[b + i]; s += q.y * exp(q.x - m); }
    return vec2f(m, s);
}

// Combines v over the segment of p.tpr threads that lid belongs to (pairs when ms, sums of
// .x otherwise) and returns the result to all of them. Whole workgroup, uniform flow.
// Radix-RAD in workgroup memory, as in norm.wgsl: one barrier for segments of up to RAD
// threads, two for longer ones (a binary tree took log2(tpr) + 2 barriers per row, with
// no loads in flight meanwhile). The order depends only on tpr: every thread of a row
// gets the same bits, run after run.
fn seg_reduce(lid: u32, v: vec2f, ms: bool) -> vec2f {
    red[lid] = v;
    workgroupBarrier();
    let j = lid & (p.tpr - 1u);
    let base = lid - j;
    if (p.tpr <= RAD) {
        let t = fold_red(base, p.tpr, ms);
        workgroupBarrier();   // red is rewritten by the next call
        return t;
    }
    let n2 = p.tpr / RAD;   // <= RAD while WG <= RAD * RAD
    if (j < n2) { red2[base / RAD + j] = fold_red(base + j * RAD, RAD, ms); }
    workgroupBarrier();
    // No barrier after: the next call rewrites red2 only after its own first barrier.
    return fold_red2(base / RAD, n2, ms);
}

fn group_index(wid: vec3u, nwg: vec3u) -> u32 {
    return wid.x + wid.y * nwg.x;
}

// Online (max, sum) over units [lo, hi) of row r, strided by p.tpr from lo + j0.
fn stream_stats(r: u32, lo: u32, hi: u32, j0: u32) -> vec2f {
    var m = NEG;
    var s = 0.0;
    for (var j = lo + j0; j < hi; j += p.tpr) {
        let a = ld_x(r, j);
        let lv = live(a);
        let v = select(vec4f(NEG), a, lv);
        let vm = max4(v);
        if (vm > m) {
            s *= exp(m - vm);
            m = vm;
        }
        s += dot(select(vec4f(0.0), exp(v - m), lv), vec4f(1.0));
    }
    return vec2f(m, s);
}

// exp(x - max) / sum over units [lo, hi) of row r (stats = (max, sum) of the whole row).
fn stream_write(r: u32, lo: u32, hi: u32, j0: u32, stats: vec2f) {
    let inv = select(0.0, 1.0 / stats.y, stats.y > 0.0);
    for (var j = lo + j0; j < hi; j += p.tpr) {
        let a = ld_x(r, j);
        let lv = live(a);
        let v = select(vec4f(NEG), a, lv);
        st_out(r, j, select(vec4f(0.0), exp(v - stats.x) * inv, lv));
    }
}

// ---- forward ----------------------------------------------------------------------------

@compute @workgroup_size(WG)
fn softmax(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
           @builtin(local_invocation_index) lid: u32) {
    let gi = group_index(wid, nwg);
    if (gi >= p.groups) { return; }
    let j0 = lid & (p.tpr - 1u);
    let r = gi * p.segs + lid / p.tpr;
    let ok = r < p.rows;
    if (NV == 0u) {
        var st = vec2f(NEG, 0.0);
        if (ok) { st = stream_stats(r, 0u, p.units, j0); }
        let tot = seg_reduce(lid, st, true);
        if (ok) { stream_write(r, 0u, p.units, j0, tot); }
        return;
    }
    var e: array<vec4f, NVMAX>;
    var lv: array<vec4<bool>, NVMAX>;
    var m = NEG;
    for (var k = 0u; k < NV; k++) {
        let j = j0 + k * p.tpr;
        var a = vec4f(NEG);
        var l = vec4<bool>(false);
        if (ok && j < p.units) {
            let v = ld_x(r, j);
            l = live(v);
            a = select(vec4f(NEG), v, l);
        }
        e[k] = a;
        lv[k] = l;
        m = max(m, max4(a));
    }
    var s = 0.0;
    for (var k = 0u; k < NV; k++) {
        e[k] = select(vec4f(0.0), exp(e[k] - m), lv[k]);
        s += dot(e[k], vec4f(1.0));
    }
    let tot = seg_reduce(lid, vec2f(m, s), true);
    let f = select(0.0, exp(m - tot.x) / tot.y, tot.y > 0.0);
    for (var k = 0u; k < NV; k++) {
        let j = j0 + k * p.tpr;
        if (ok && j < p.units) { st_out(r, j, e[k] * f); }
    }
}

// Chunk c of a row covers units [c * chunk, min(units, (c + 1) * chunk)).
fn chunk_hi(c: u32) -> u32 {
    return min(p.units, (c + 1u) * p.chunk);
}

@compute @workgroup_size(WG)
fn softmax_stats(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
                 @builtin(local_invocation_index) lid: u32) {
    let gi = group_index(wid, nwg);
    if (gi >= p.groups) { return; }
    let r = gi / p.chunks;
    let c = gi % p.chunks;
    let st = stream_stats(r, c * p.chunk, chunk_hi(c), lid);
    let tot = seg_reduce(lid, st, true);
    if (lid == 0u) { part[gi] = tot; }
}

@compute @workgroup_size(WG)
fn softmax_split(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
                 @builtin(local_invocation_index) lid: u32) {
    let gi = group_index(wid, nwg);
    if (gi >= p.groups) { return; }
    let r = gi / p.chunks;
    let c = gi % p.chunks;
    // Fold the row's chunk pairs: strided per thread, then seg_reduce. The order depends only
    // on the chunk count, so every workgroup of the row gets the same bits.
    var st = vec2f(NEG, 0.0);
    for (var k = lid; k < p.chunks; k += WG) { st = combine(st, part_in[r * p.chunks + k]); }
    st = seg_reduce(lid, st, true);
    stream_write(r, c * p.chunk, chunk_hi(c), lid, st);
}

// ---- backward ---------------------------------------------------------------------------

fn stream_dot(r: u32, lo: u32, hi: u32, j0: u32) -> f32 {
    var s = 0.0;
    for (var j = lo + j0; j < hi; j += p.tpr) { s += dot(ld_x(r, j), ld_g(r, j)); }
    return s;
}

fn stream_bwd_write(r: u32, lo: u32, hi: u32, j0: u32, dy: f32) {
    for (var j = lo + j0; j < hi; j += p.tpr) {
        let y = ld_x(r, j);
        st_gin(r, j, y * (ld_g(r, j) - dy));
    }
}

@compute @workgroup_size(WG)
fn softmax_bwd(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
               @builtin(local_invocation_index) lid: u32) {
    let gi = group_index(wid, nwg);
    if (gi >= p.groups) { return; }
    let j0 = lid & (p.tpr - 1u);
    let r = gi * p.segs + lid / p.tpr;
    let ok = r < p.rows;
    if (NV == 0u) {
        var s = 0.0;
        if (ok) { s = stream_dot(r, 0u, p.units, j0); }
        let dy = seg_reduce(lid, vec2f(s, 0.0), false).x;
        if (ok) { stream_bwd_write(r, 0u, p.units, j0, dy); }
        return;
    }
    var yv: array<vec4f, NVMAX>;
    var gv: array<vec4f, NVMAX>;
    var s = 0.0;
    for (var k = 0u; k < NV; k++) {
        let j = j0 + k * p.tpr;
        var a = vec4f(0.0);
        var b = vec4f(0.0);
        if (ok && j < p.units) { a = ld_x(r, j); b = ld_g(r, j); }
        yv[k] = a;
        gv[k] = b;
        s += dot(a, b);
    }
    let dy = seg_reduce(lid, vec2f(s, 0.0), false).x;
    for (var k = 0u; k < NV; k++) {
        let j = j0 + k * p.tpr;
        if (ok && j < p.units) { st_gin(r, j, yv[k] * (gv[k] - dy)); }
    }
}

@compute @workgroup_size(WG)
fn softmax_bwd_stats(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
                     @builtin(local_invocation_index) lid: u32) {
    let gi = group_index(wid, nwg);
    if (gi >= p.groups) { return; }
    let r = gi / p.chunks;
    let c = gi % p.chunks;
    let s = stream_dot(r, c * p.chunk, chunk_hi(c), lid);
    let tot = seg_reduce(lid, vec2f(s, 0.0), false);
    if (lid == 0u) { bpart[gi] = tot; }
}

@compute @workgroup_size(WG)
fn softmax_bwd_split(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
                     @builtin(local_invocation_index) lid: u32) {
    let gi = group_index(wid, nwg);
    if (gi >= p.groups) { return; }
    let r = gi / p.chunks;
    let c = gi % p.chunks;
    var dy = 0.0;
    for (var k = lid; k < p.chunks; k += WG) { dy += bpart_in[r * p.chunks + k].x; }
    dy = seg_reduce(lid, vec2f(dy, 0.0), false).x;
    stream_bwd_write(r, c * p.chunk, chunk_hi(c), lid, dy);
}
