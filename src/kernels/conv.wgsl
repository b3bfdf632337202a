// Depthwise 1-D convolution, kernel 3, padding 1 (the short convolution of LFM2-style
// blocks): out[d, s] = bias[d] + w[d, 0] * x[d, s - 1] + w[d, 1] * x[d, s] + w[d, 2] * x[d, s + 1],
// with x[d, -1] = x[d, seq] = 0.
//
// Layout: x and out are [dim, seq] row-major f32 (element i = d * seq + s), weight [dim, 3],
// bias [dim]. One thread per vec4 of the flat output: a 16-byte load of x and a 16-byte store
// of out, both coalesced, so the kernel streams memory once like an element-wise op. The two
// neighbours a vec4 needs beyond itself (the last lane of the vec4 before, the first of the
// vec4 after) were loaded by the adjacent threads and come from cache; so do the weights,
// shared by the seq consecutive elements of a row. A vec4 may straddle rows (seq need not be
// a multiple of 4): each lane finds its own row and position, and the zero padding applies at
// every row boundary. Lanes past n (the tensor's vec4 padding) are written as 0 without
// touching weight or bias. One integer division per vec4 (not per lane). The grid is 2-D past 65535 workgroups (linear index
// wid.x + wid.y * nwg.x).

struct Params {
    n: u32,       // dim * seq
    seq: u32,
    n4: u32,      // ceil(n / 4)
    _pad: u32,
}

override WG: u32 = 256u;   // like elementwise.wgsl, which streams at the copy peak

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> x: array<vec4f>;
@group(0) @binding(2) var<storage, read> weight: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<vec4f>;

@compute @workgroup_size(WG)
fn conv1d_k3(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
             @builtin(num_workgroups) nwg: vec3u) {
    let j = (wid.x + wid.y * nwg.x) * WG + lid.x;
    if (j >= params.n4) { return; }
    let v = x[j];
    var prev = 0.0;
    var next = 0.0;
    if (j > 0u) { prev = x[j - 1u].w; }
    if (j + 1u < params.n4) { next = x[j + 1u].x; }
    // lanes -1..4 of this vec4: e[l + 1] = x[4j + l]
    var e = array<f32, 6>(prev, v.x, v.y, v.z, v.w, next);
    var r = vec4f(0.0);
    // One division per vec4: the row of lane 0, then each later lane steps over the row
    // boundaries it crosses (at most 4 steps in all, whatever seq is).
    var d = (4u * j) / params.seq;
    var s = 4u * j - d * params.seq;
    for (var l = 0u; l < 4u; l++) {
        let i = 4u * j + l;
        if (i >= params.n) { break; }
        if (l > 0u) {
            s += 1u;
            while (s >= params.seq) { s -= params.seq; d += 1u; }
        }
        let left = select(0.0, e[l], s > 0u);
        let right = select(0.0, e[l + 2u], s + 1u < params.seq);
        r[l] = bias[d] + weight[3u * d] * left + weight[3u * d + 1u] * e[l + 1u] + weight[3u * d + 2u] * right;
    }
    out[j] = r;
}

// ---- LFM2's short-convolution blocks ----------------------------------------------------
//
// The causal depthwise convolution and its backward (public ops):
//   conv_causal           out[b, t, d] = bias[d] + sum_{j<K} w[d, j] * x[b, t - (K-1) + j, d]
//   conv_causal_dx        dx[b, t, d] = sum_{j<K} w[d, j] * g[b, t + (K-1) - j, d]
//   conv_causal_dw        dw[d, j] (+)= sum_{b,t} g[b, t, d] * x[b, t - (K-1) + j, d], and for
//                         j = K the bias: db[d] (+)= sum_{b,t} g[b, t, d]
// x, out, g, dx: [rows, dim] row-major f32, rows = batch * seq (positions outside a
// sequence are zero); w: [dim, K]. One thread per element for the first two (consecutive
// threads take consecutive channels: coalesced rows); one per (j, d) for the weights,
// which walks every row (the sum in row order, the same on every run).
//
// The block's gates around it (internal ops). in_proj gives bcx [rows, 3 dim]: B = columns
// [0, dim), C = [dim, 2 dim), x = [2 dim, 3 dim); the block convolves B * x and gates the
// result with C:
//   gate_in            bx = B * x
//   gate_out           y = C * cv
//   gate_out_backward  dcv = dy * C, and dbcx's C columns = dy * cv
//   gate_in_backward   dbcx's B columns = dbx * x, its x columns = dbx * B
//   conv_rows          out[i, d] = sum_j w[d, j] * hist[rowpos[i] - (K-1) + j, d]: the
//                      convolution of decoding, over a history of convolution inputs (K - 1
//                      zero rows before each sequence's first)
// One thread per element of a [rows, dim] tensor.

struct CausalParams {
    rows: u32,
    dim: u32,
    seq: u32,
    k: u32,
    has_bias: u32,   // conv_causal: bias bound and added; conv_causal_dw: the bias row computed
    accumulate: u32, // conv_causal_dw: add into dw (and db) instead of writing
    groups_x: u32,   // workgroups along x of a 2-D grid
    _pad: u32,
}

// What each entry binds (1 to 5):
//   conv_causal        x, w, bias, out            conv_causal_dx     g, w, (w), dx
//   conv_causal_dw     x, g, db (rw), dw          gate_in            bcx, (bcx), (bcx), bx
//   gate_out           bcx, cv, (cv), y           gate_out_backward  bcx, cv, dy, dcv, dbcx
//   gate_in_backward   bcx, dbx, (dbx), dbcx      conv_rows          hist, w, rowpos, out
@group(0) @binding(0) var<uniform> cp: CausalParams;
@group(0) @binding(1) var<storage, read> in0: array<f32>;
@group(0) @binding(2) var<storage, read> in1: array<f32>;
@group(0) @binding(3) var<storage, read> in2: array<f32>;
@group(0) @binding(3) var<storage, read> rowpos: array<u32>;
@group(0) @binding(3) var<storage, read_write> cdb: array<f32>;
@group(0) @binding(4) var<storage, read_write> out0: array<f32>;
@group(0) @binding(5) var<storage, read_write> out1: array<f32>;

fn causal_index(wid: vec3u, lid: vec3u) -> u32 { return (wid.x + wid.y * cp.groups_x) * WG + lid.x; }

// The thread's element of a [rows, dim] tensor: (index, row, channel); index NONE past the end.
const NONE: u32 = 0xFFFFFFFFu;
fn element(wid: vec3u, lid: vec3u) -> vec3u {
    let i = causal_index(wid, lid);
    if (i >= cp.rows * cp.dim) { return vec3u(NONE, 0u, 0u); }
    let row = i / cp.dim;
    return vec3u(i, row, i - row * cp.dim);
}

@compute @workgroup_size(WG)
fn conv_causal(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u) {
    let el = element(wid, lid);
    if (el.x == NONE) { return; }
    let t = el.y % cp.seq;
    var acc = 0.0;
    if (cp.has_bias != 0u) { acc = in2[el.z]; }
    for (var j = 0u; j < cp.k; j++) {
        let back = cp.k - 1u - j;   // x[t - back]
        if (back <= t) { acc += in1[el.z * cp.k + j] * in0[el.x - back * cp.dim]; }
    }
    out0[el.x] = acc;
}

@compute @workgroup_size(WG)
fn conv_causal_dx(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u) {
    let el = element(wid, lid);
    if (el.x == NONE) { return; }
    let t = el.y % cp.seq;
    var acc = 0.0;
    for (var j = 0u; j < cp.k; j++) {
        let ahead = cp.k - 1u - j;   // g[t + ahead]
        if (t + ahead < cp.seq) { acc += in1[el.z * cp.k + j] * in0[el.x + ahead * cp.dim]; }
    }
    out0[el.x] = acc;
}

// one thread per (j, d), j = K the bias
@compute @workgroup_size(WG)
fn conv_causal_dw(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u) {
    let i = causal_index(wid, lid);
    let j = i / cp.dim;
    let d = i - j * cp.dim;
    if (j > cp.k || (j == cp.k && cp.has_bias == 0u)) { return; }
    var acc = 0.0;
    if (j == cp.k) {
        for (var row = 0u; row < cp.rows; row++) { acc += in1[row * cp.dim + d]; }
        if (cp.accumulate != 0u) { acc += cdb[d]; }
        cdb[d] = acc;
        return;
    }
    let back = cp.k - 1u - j;
    for (var row = 0u; row < cp.rows; row++) {
        if (back <= row % cp.seq) { acc += in1[row * cp.dim + d] * in0[(row - back) * cp.dim + d]; }
    }
    if (cp.accumulate != 0u) { acc += out0[d * cp.k + j]; }
    out0[d * cp.k + j] = acc;
}

// The column of B (c = 0), C (1) or x (2) of element el's row in bcx.
fn bcx_at(el: vec3u, c: u32) -> u32 { return el.y * 3u * cp.dim + c * cp.dim + el.z; }

@compute @workgroup_size(WG)
fn gate_in(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u) {
    let el = element(wid, lid);
    if (el.x == NONE) { return; }
    out0[el.x] = in0[bcx_at(el, 0u)] * in0[bcx_at(el, 2u)];
}

@compute @workgroup_size(WG)
fn gate_out(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u) {
    let el = element(wid, lid);
    if (el.x == NONE) { return; }
    out0[el.x] = in0[bcx_at(el, 1u)] * in1[el.x];
}

@compute @workgroup_size(WG)
fn gate_out_backward(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u) {
    let el = element(wid, lid);
    if (el.x == NONE) { return; }
    out0[el.x] = in2[el.x] * in0[bcx_at(el, 1u)];
    out1[bcx_at(el, 1u)] = in2[el.x] * in1[el.x];
}

@compute @workgroup_size(WG)
fn gate_in_backward(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u) {
    let el = element(wid, lid);
    if (el.x == NONE) { return; }
    out0[bcx_at(el, 0u)] = in1[el.x] * in0[bcx_at(el, 2u)];
    out0[bcx_at(el, 2u)] = in1[el.x] * in0[bcx_at(el, 0u)];
}

@compute @workgroup_size(WG)
fn conv_rows(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u) {
    let el = element(wid, lid);
    if (el.x == NONE) { return; }
    let first = rowpos[el.y] + 1u - cp.k;
    var acc = 0.0;
    for (var j = 0u; j < cp.k; j++) { acc += in1[el.z * cp.k + j] * in0[(first + j) * cp.dim + el.z]; }
    out0[el.x] = acc;
}
