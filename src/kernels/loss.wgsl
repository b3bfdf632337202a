// Losses: element-wise MSE (and its gradient), and cross-entropy over rows of logits with
// u32 targets, fused forward and backward.
//
// ---- MSE ------------------------------------------------------------------------------
// out = 0.5 * (pred - target)^2 (OP 0) or out = pred - target (OP 1), one vec4 per thread
// (buffers are padded to 16 bytes; lanes past n are padding). Entry points by aliasing, as
// WebGPU forbids one buffer bound read-only and read-write in a dispatch:
//   pair          out = f(a, b)        three distinct buffers (or a == b, read twice)
//   pair_inplace  io = f(io, other), or f(other, io) when SWAP
//   pair_self     io = f(io, io)
//
// ---- cross-entropy ----------------------------------------------------------------------
// logits [N, V] row-major, targets u32 [N]. Row r with target t:
//   t == ignore:  skipped (loss 0, gradient row 0, not counted)
//   t >= V:       invalid: loss NaN, gradient row 0, not counted, and the mean is NaN
//   otherwise:    loss = logsumexp(row) - x[t]  computed as (m - x[t]) + log(s), with
//                 m = max(row), s = sum(exp(x - m)); both differences stay small, so the
//                 loss is exact to f32 rounding for logits of any magnitude (1e4 included)
//                 grad = (exp((x - m) - log s) - onehot(t)) * scale, scale = 1 / counted rows
//
// Bandwidth is what matters ([8192, 131072] logits are 4 GiB): the logits are read at most
// twice and the gradient written once, with vec4 loads and stores when V % 4 == 0.
//   ce_stats  one workgroup per (row, chunk of CHUNK elements): one read of the chunk with
//             an online max / sum of exponentials per thread (rescaled only when the
//             running max grows), combined in workgroup memory in a fixed tree order; the
//             (max, sum) pair goes to scratch. Chunking a row over several workgroups keeps
//             the GPU full when N is small and V large. The chunk holding the target also
//             saves x[t] in scratch (so an in-place gradient can overwrite the logits). One
//             extra workgroup counts the counted and invalid rows (integers: exact).
//   ce_rows   one thread per row: combines the row's chunk pairs in chunk order, stores
//             (m, log s) and the row's loss (and writes losses[] in the _out variant).
//   ce_grad   one workgroup per (row, chunk) again: the second and last read of the logits,
//             one exp per element, one write; ignored rows are written with zeros without
//             reading. The _io variants bind the logits read-write to work in place (each
//             element is read and written by the same thread).
//   ce_mean   one workgroup: the sum of counted row losses in a fixed order (strided per
//             thread, then a tree) / count, or NaN when some row is invalid, or 0 when no
//             row counts. Every sum has a fixed order: results are bitwise reproducible.
// The grid may be 2-D (more workgroups than one dimension allows): the linear workgroup
// index is wid.x + wid.y * nwg.x and workgroups past the end return.
//
// Scratch (u32 words; floats stored as their bits): [0] counted rows, [1] invalid rows,
// [4 + 2r] m and [5 + 2r] log s of row r, [off_xt + r] x[t], [off_loss + r] loss,
// [off_part + 2(r*chunks + c)] chunk max and sum.
//
// Logits are assumed finite (WGSL lets the compiler assume no infinities or NaNs).

override WG: u32 = 256u;

// ---- MSE ----------------------------------------------------------------------------

struct Pair {
    n4: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

override OP: u32 = 0u;        // 0: 0.5 * (a - b)^2, 1: a - b
override SWAP: bool = false;  // pair_inplace: io is the second operand (target)
const PAIR_EU: u32 = 4u;      // vec4 per thread

@group(0) @binding(0) var<uniform> pair_p: Pair;
@group(0) @binding(1) var<storage, read> pa: array<vec4f>;
@group(0) @binding(2) var<storage, read> pb: array<vec4f>;
@group(0) @binding(3) var<storage, read_write> pout: array<vec4f>;
@group(0) @binding(1) var<storage, read_write> pio: array<vec4f>;
@group(0) @binding(2) var<storage, read> pother: array<vec4f>;

fn pair_op(a: vec4f, b: vec4f) -> vec4f {
    let d = a - b;
    if (OP == 0u) {
        return 0.5 * (d * d);
    }
    return d;
}

fn linear_wg(wid: vec3u, nwg: vec3u) -> u32 {
    return wid.x + wid.y * nwg.x;
}

// PAIR_EU vec4 per thread at stride WG, all loads before any store: several independent
// loads in flight per thread, every access of a workgroup coalesced.
@compute @workgroup_size(WG)
fn pair(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
        @builtin(num_workgroups) nwg: vec3u) {
    let base = linear_wg(wid, nwg) * (WG * PAIR_EU) + lid.x;
    var x: array<vec4f, PAIR_EU>; var y: array<vec4f, PAIR_EU>;
    for (var u = 0u; u < PAIR_EU; u++) {
        let i = base + u * WG;
        if (i < pair_p.n4) { x[u] = pa[i]; y[u] = pb[i]; }
    }
    for (var u = 0u; u < PAIR_EU; u++) {
        let i = base + u * WG;
        if (i < pair_p.n4) { pout[i] = pair_op(x[u], y[u]); }
    }
}

@compute @workgroup_size(WG)
fn pair_inplace(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
        @builtin(num_workgroups) nwg: vec3u) {
    let base = linear_wg(wid, nwg) * (WG * PAIR_EU) + lid.x;
    var x: array<vec4f, PAIR_EU>; var y: array<vec4f, PAIR_EU>;
    for (var u = 0u; u < PAIR_EU; u++) {
        let i = base + u * WG;
        if (i < pair_p.n4) { x[u] = pio[i]; y[u] = pother[i]; }
    }
    for (var u = 0u; u < PAIR_EU; u++) {
        let i = base + u * WG;
        if (i < pair_p.n4) { if (SWAP) { pio[i] = pair_op(y[u], x[u]); } else { pio[i] = pair_op(x[u], y[u]); } }
    }
}

@compute @workgroup_size(WG)
fn pair_self(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
        @builtin(num_workgroups) nwg: vec3u) {
    let base = linear_wg(wid, nwg) * (WG * PAIR_EU) + lid.x;
    var x: array<vec4f, PAIR_EU>; var y: array<vec4f, PAIR_EU>;
    for (var u = 0u; u < PAIR_EU; u++) {
        let i = base + u * WG;
        if (i < pair_p.n4) { x[u] = pio[i]; }
    }
    for (var u = 0u; u < PAIR_EU; u++) {
        let i = base + u * WG;
        if (i < pair_p.n4) { pio[i] = pair_op(x[u], x[u]); }
    }
}

// ---- cross-entropy ------------------------------------------------------------------

struct Ce {
    n: u32,          // rows
    v: u32,          // row length
    chunks: u32,     // chunks per row
    chunk: u32,      // elements per chunk (a multiple of 4 in the vec4 entries)
    ignore: u32,     // ignore_index
    nan_bits: u32,   // 0x7fc00000, from the host so no constant NaN is ever folded
    off_xt: u32,
    off_loss: u32,
    off_part: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

const NEG_BIG: f32 = -3.0e38;   // the running max before any element (finite on purpose)

@group(0) @binding(0) var<uniform> ce: Ce;
@group(0) @binding(1) var<storage, read> targets: array<u32>;
@group(0) @binding(2) var<storage, read_write> scr_w: array<u32>;
@group(0) @binding(2) var<storage, read> scr_r: array<u32>;
@group(0) @binding(3) var<storage, read> logits4: array<vec4f>;
@group(0) @binding(3) var<storage, read> logits1: array<f32>;
@group(0) @binding(3) var<storage, read_write> logits4_io: array<vec4f>;
@group(0) @binding(3) var<storage, read_write> logits1_io: array<f32>;
@group(0) @binding(3) var<storage, read_write> losses_out: array<f32>;
@group(0) @binding(3) var<storage, read_write> mean_out: array<f32>;
@group(0) @binding(4) var<storage, read_write> grad4: array<vec4f>;
@group(0) @binding(4) var<storage, read_write> grad1: array<f32>;

var<workgroup> red_m: array<f32, WG>;
var<workgroup> red_s: array<f32, WG>;
var<workgroup> red_u: array<vec2u, WG>;

// Merges two (max, sum of exp(x - max)) pairs.
fn merge(a: vec2f, b: vec2f) -> vec2f {
    let m = max(a.x, b.x);
    return vec2f(m, a.y * exp(a.x - m) + b.y * exp(b.x - m));
}

// Adds four logits to a running (max, sum) pair.
fn absorb4(acc: vec2f, x: vec4f) -> vec2f {
    var m = acc.x;
    var s = acc.y;
    let mx = max(max(x.x, x.y), max(x.z, x.w));
    if (mx > m) {
        s = s * exp(m - mx);
        m = mx;
    }
    let e = exp(x - vec4f(m));
    return vec2f(m, s + ((e.x + e.y) + (e.z + e.w)));
}

fn absorb1(acc: vec2f, x: f32) -> vec2f {
    var m = acc.x;
    var s = acc.y;
    if (x > m) {
        s = s * exp(m - x);
        m = x;
    }
    return vec2f(m, s + exp(x - m));
}

// Tree reduction of the per-thread pairs in a fixed order; the result is in red_*[0].
fn reduce_pairs(lid: u32, acc: vec2f) {
    red_m[lid] = acc.x;
    red_s[lid] = acc.y;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        if (lid < stride) {
            let r = merge(vec2f(red_m[lid], red_s[lid]), vec2f(red_m[lid + stride], red_s[lid + stride]));
            red_m[lid] = r.x;
            red_s[lid] = r.y;
        }
        workgroupBarrier();
    }
}

fn counted(t: u32) -> bool {
    return t != ce.ignore && t < ce.v;
}

// The extra workgroup of ce_stats: counted and invalid rows.
fn count_rows(lid: u32) {
    var c = vec2u(0u);
    for (var r = lid; r < ce.n; r += WG) {
        let t = targets[r];
        if (t != ce.ignore) {
            if (t < ce.v) { c.x += 1u; } else { c.y += 1u; }
        }
    }
    red_u[lid] = c;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        if (lid < stride) {
            red_u[lid] = red_u[lid] + red_u[lid + stride];
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        scr_w[0] = red_u[0].x;
        scr_w[1] = red_u[0].y;
    }
}

// Stores the chunk's pair, and x[t] when the target lies in this chunk.
fn finish_stats(lid: u32, row: u32, c: u32, begin: u32, end: u32, xt: f32) {
    if (lid == 0u) {
        let at = ce.off_part + 2u * (row * ce.chunks + c);
        scr_w[at] = bitcast<u32>(red_m[0]);
        scr_w[at + 1u] = bitcast<u32>(red_s[0]);
        let t = targets[row];
        if (counted(t) && t >= begin && t < end) {
            scr_w[ce.off_xt + row] = bitcast<u32>(xt);
        }
    }
}

@compute @workgroup_size(WG)
fn ce_stats4(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid3: vec3u,
             @builtin(num_workgroups) nwg: vec3u) {
    let lid = lid3.x;
    let wg = linear_wg(wid, nwg);
    let total = ce.n * ce.chunks;
    if (wg > total) { return; }
    if (wg == total) { count_rows(lid); return; }
    let row = wg / ce.chunks;
    let c = wg % ce.chunks;
    let begin = c * ce.chunk;
    let end = min(begin + ce.chunk, ce.v);
    let base4 = (row * ce.v + begin) / 4u;
    let len4 = (end - begin) / 4u;
    var acc = vec2f(NEG_BIG, 0.0);
    for (var i = lid; i < len4; i += WG) {
        acc = absorb4(acc, logits4[base4 + i]);
    }
    reduce_pairs(lid, acc);
    var xt = 0.0;
    let t = targets[row];
    if (lid == 0u && counted(t) && t >= begin && t < end) {
        let e = row * ce.v + t;
        xt = logits4[e / 4u][e % 4u];
    }
    finish_stats(lid, row, c, begin, end, xt);
}

@compute @workgroup_size(WG)
fn ce_stats1(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid3: vec3u,
             @builtin(num_workgroups) nwg: vec3u) {
    let lid = lid3.x;
    let wg = linear_wg(wid, nwg);
    let total = ce.n * ce.chunks;
    if (wg > total) { return; }
    if (wg == total) { count_rows(lid); return; }
    let row = wg / ce.chunks;
    let c = wg % ce.chunks;
    let begin = c * ce.chunk;
    let end = min(begin + ce.chunk, ce.v);
    let base = row * ce.v;
    var acc = vec2f(NEG_BIG, 0.0);
    for (var i = begin + lid; i < end; i += WG) {
        acc = absorb1(acc, logits1[base + i]);
    }
    reduce_pairs(lid, acc);
    var xt = 0.0;
    let t = targets[row];
    if (lid == 0u && counted(t) && t >= begin && t < end) {
        xt = logits1[base + t];
    }
    finish_stats(lid, row, c, begin, end, xt);
}

// One thread per row: (m, log s) and the loss.
fn row_loss(r: u32) -> f32 {
    var acc = vec2f(NEG_BIG, 0.0);
    let first = ce.off_part + 2u * r * ce.chunks;
    for (var c = 0u; c < ce.chunks; c++) {
        acc = merge(acc, vec2f(bitcast<f32>(scr_w[first + 2u * c]), bitcast<f32>(scr_w[first + 2u * c + 1u])));
    }
    let ls = log(acc.y);
    scr_w[4u + 2u * r] = bitcast<u32>(acc.x);
    scr_w[5u + 2u * r] = bitcast<u32>(ls);
    let t = targets[r];
    var loss = 0.0;
    if (t != ce.ignore) {
        if (t < ce.v) {
            loss = (acc.x - bitcast<f32>(scr_w[ce.off_xt + r])) + ls;
        } else {
            loss = bitcast<f32>(ce.nan_bits);
        }
    }
    scr_w[ce.off_loss + r] = bitcast<u32>(loss);
    return loss;
}

@compute @workgroup_size(WG)
fn ce_rows(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
           @builtin(num_workgroups) nwg: vec3u) {
    let r = linear_wg(wid, nwg) * WG + lid.x;
    if (r >= ce.n) { return; }
    _ = row_loss(r);
}

@compute @workgroup_size(WG)
fn ce_rows_out(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
               @builtin(num_workgroups) nwg: vec3u) {
    let r = linear_wg(wid, nwg) * WG + lid.x;
    if (r >= ce.n) { return; }
    losses_out[r] = row_loss(r);
}

// What ce_grad needs for one (row, chunk): x(j) -> (exp((x - m) - ls) - [j == t]) * scale.
struct GradRow {
    live: bool,      // a counted row (else its gradient is zero)
    m: f32,
    ls: f32,
    scale: f32,
    t: u32,          // target, relative to the chunk start
    base: u32,       // first element of the chunk
    len: u32,        // elements in the chunk
}

fn grad_row(wg: u32) -> GradRow {
    var g: GradRow;
    let row = wg / ce.chunks;
    let c = wg % ce.chunks;
    let begin = c * ce.chunk;
    let t = targets[row];
    g.live = counted(t);
    g.m = bitcast<f32>(scr_r[4u + 2u * row]);
    g.ls = bitcast<f32>(scr_r[5u + 2u * row]);
    g.scale = 1.0 / f32(max(scr_r[0], 1u));
    g.t = t - begin;   // wraps to a huge value when the target lies before the chunk
    g.base = row * ce.v + begin;
    g.len = min(ce.chunk, ce.v - begin);
    return g;
}

fn grad_value4(g: GradRow, x: vec4f, j: u32) -> vec4f {
    let p = exp((x - vec4f(g.m)) - vec4f(g.ls)) * g.scale;
    let hit = (vec4u(j) + vec4u(0u, 1u, 2u, 3u)) == vec4u(g.t);
    return p - select(vec4f(0.0), vec4f(g.scale), hit);
}

fn grad_value1(g: GradRow, x: f32, j: u32) -> f32 {
    let p = exp((x - g.m) - g.ls) * g.scale;
    return p - select(0.0, g.scale, j == g.t);
}

@compute @workgroup_size(WG)
fn ce_grad4(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
            @builtin(num_workgroups) nwg: vec3u) {
    let wg = linear_wg(wid, nwg);
    if (wg >= ce.n * ce.chunks) { return; }
    let g = grad_row(wg);
    let b4 = g.base / 4u;
    for (var i = lid.x; i < g.len / 4u; i += WG) {
        var out = vec4f(0.0);
        if (g.live) { out = grad_value4(g, logits4[b4 + i], 4u * i); }
        grad4[b4 + i] = out;
    }
}

@compute @workgroup_size(WG)
fn ce_grad1(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
            @builtin(num_workgroups) nwg: vec3u) {
    let wg = linear_wg(wid, nwg);
    if (wg >= ce.n * ce.chunks) { return; }
    let g = grad_row(wg);
    for (var i = lid.x; i < g.len; i += WG) {
        var out = 0.0;
        if (g.live) { out = grad_value1(g, logits1[g.base + i], i); }
        grad1[g.base + i] = out;
    }
}

@compute @workgroup_size(WG)
fn ce_grad_io4(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
               @builtin(num_workgroups) nwg: vec3u) {
    let wg = linear_wg(wid, nwg);
    if (wg >= ce.n * ce.chunks) { return; }
    let g = grad_row(wg);
    let b4 = g.base / 4u;
    for (var i = lid.x; i < g.len / 4u; i += WG) {
        var out = vec4f(0.0);
        if (g.live) { out = grad_value4(g, logits4_io[b4 + i], 4u * i); }
        logits4_io[b4 + i] = out;
    }
}

@compute @workgroup_size(WG)
fn ce_grad_io1(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
               @builtin(num_workgroups) nwg: vec3u) {
    let wg = linear_wg(wid, nwg);
    if (wg >= ce.n * ce.chunks) { return; }
    let g = grad_row(wg);
    for (var i = lid.x; i < g.len; i += WG) {
        var out = 0.0;
        if (g.live) { out = grad_value1(g, logits1_io[g.base + i], i); }
        logits1_io[g.base + i] = out;
    }
}

@compute @workgroup_size(WG)
fn ce_mean(@builtin(local_invocation_id) lid3: vec3u) {
    let lid = lid3.x;
    var sum = 0.0;
    for (var r = lid; r < ce.n; r += WG) {
        if (counted(targets[r])) {
            sum += bitcast<f32>(scr_r[ce.off_loss + r]);
        }
    }
    red_m[lid] = sum;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        if (lid < stride) {
            red_m[lid] = red_m[lid] + red_m[lid + stride];
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        let count = scr_r[0];
        var mean = 0.0;
        if (scr_r[1] != 0u) {
            mean = bitcast<f32>(ce.nan_bits);
        } else if (count != 0u) {
            mean = red_m[0] / f32(count);
        }
        mean_out[0] = mean;
    }
}
