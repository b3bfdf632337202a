// Products and lookups that read a packed weight W [rows, cols] and unpack it in registers
// (layouts: include/wgml.h, PACKED WEIGHTS; host: src/ops/packed.c). Arithmetic is f32.
//
//   gemv   out[m, n] (+)= sum_k a[m, k] W[n, k]     M <= 8 rows of a: decoding
//   gemm   TRANS 0: out[m, n] (+)= sum_k a[m, k] W[n, k]   (a @ W^T, prefill and training)
//          TRANS 1: out[m, j] (+)= sum_n a[m, n] W[n, j]   (a @ W, the input gradient)
//   rows   out[i, :] = W[ids[i], :] (USE_IDS, 0 for an id >= rows) or W[i, :]: the
//          embedding lookup and the plain unpack
//
// The format is a parameter, not an override: one pipeline per entry serves every dtype
// (the branch is uniform across the dispatch), which keeps the number of pipelines to
// compile at four.
//
// Every reader goes through wvec4(r, c): W[r, c .. c + 3] for c a multiple of 4, 0 past
// the row's end. Four such values always share one block or group (blocks hold 32 or 256
// values, groups 32 to 128), so a call reads one scale (and minimum or bias) and one
// 32-bit word of codes. W is bound as u32 words whatever its dtype, so no shader-f16 is
// needed: f16 through unpack2x16float, bf16 by a shift into an f32's top half; ggml's
// blocks are 34, 18, 144 or 210 bytes and are read at any byte offset (wword joins two
// words).
//
// gemv: one workgroup per output column n: its WG threads walk the row W[n, :] in vec4
// steps (WG * 4 values apart, so a step's loads are contiguous), each keeping up to 8
// partial sums (one per row of a), then add them in workgroup memory in a fixed order.
// The bytes of W are read once per token, which is what bounds decoding.
//
// gemm: 64 x 64 tiles of out, 256 threads of 4 x 4 outputs, K in steps of 16: each step
// unpacks a 64 x 16 tile of W (TRANS 0) or 16 x 64 (TRANS 1) into workgroup memory once,
// so the unpacking cost is shared by the tile's 64 rows of a.
//
// The grid is 2-D past 65535 workgroups (linear index wid.x + wid.y * nwg.x).

struct Params {
    m: u32,          // rows of a (and out)
    n: u32,          // columns of out
    k: u32,          // the sum's length
    acc: u32,        // 1: out += the product
    rows: u32,       // W [rows, cols]
    cols: u32,
    row_bytes: u32,  // bytes of a row of blocks (codes for affine)
    groups: u32,     // affine: groups per row
    scales: u32,     // affine: byte offset of the scales
    biases: u32,     // affine: byte offset of the biases
    tiles_n: u32,    // gemm: tiles along n
    fmt: u32,        // 0 f16, 1 bf16, 2 q8_0, 3 q4_0, 4 q4_k, 5 q6_k, 6 affine
    bits: u32,       // affine: 4 or 8
    gs: u32,         // affine group size
    sdt: u32,        // affine scales and biases: 0 f32, 1 f16, 2 bf16
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

override WG: u32 = 64u;    // gemv and rows
override TRANS: u32 = 0u;  // gemm
override USE_IDS: bool = true;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<f32>;      // gemv, gemm
@group(0) @binding(1) var<storage, read> ids: array<u32>;    // rows (W itself without USE_IDS)
@group(0) @binding(2) var<storage, read> w: array<u32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

// ---- reading W ----------------------------------------------------------------------------

fn wbyte(b: u32) -> u32 { return (w[b >> 2u] >> ((b & 3u) * 8u)) & 0xFFu; }
// the 16 bits at an even byte offset
fn whalf_bits(b: u32) -> u32 { return (w[b >> 2u] >> ((b & 2u) * 8u)) & 0xFFFFu; }
fn whalf(b: u32) -> f32 { return unpack2x16float(whalf_bits(b)).x; }
// the 4 bytes at any byte offset, little-endian
fn wword(b: u32) -> u32 {
    let s = (b & 3u) * 8u;
    let lo = w[b >> 2u];
    if (s == 0u) { return lo; }
    return (lo >> s) | (w[(b >> 2u) + 1u] << (32u - s));
}
fn ubytes(x: u32) -> vec4f { return vec4f(vec4u(x & 0xFFu, (x >> 8u) & 0xFFu, (x >> 16u) & 0xFFu, x >> 24u)); }
fn sbytes(x: u32) -> vec4f {
    return vec4f(vec4i(i32(x << 24u) >> 24u, i32(x << 16u) >> 24u, i32(x << 8u) >> 24u, i32(x) >> 24u));
}
fn nib_lo(x: u32) -> vec4u { return vec4u(x & 15u, (x >> 8u) & 15u, (x >> 16u) & 15u, (x >> 24u) & 15u); }
fn nib_hi(x: u32) -> vec4u { return vec4u((x >> 4u) & 15u, (x >> 12u) & 15u, (x >> 20u) & 15u, x >> 28u); }

// a 16-bit float's bits (f16 or bf16) as f32
fn half_value(bits: u32, bf16: bool) -> f32 {
    if (bf16) { return bitcast<f32>(bits << 16u); }
    return unpack2x16float(bits).x;
}

// affine scale or bias g of the part at byte offset base
fn affine_scale(base: u32, g: u32) -> f32 {
    if (p.sdt == 0u) { return bitcast<f32>(w[(base >> 2u) + g]); }
    return half_value(whalf_bits(base + 2u * g), p.sdt == 2u);
}

// Q4_K's 6-bit scale and minimum of sub-block j from the 12 bytes at byte offset s
fn scale_min_k4(s: u32, j: u32) -> vec2f {
    if (j < 4u) { return vec2f(f32(wbyte(s + j) & 63u), f32(wbyte(s + j + 4u) & 63u)); }
    let sc = (wbyte(s + j + 4u) & 15u) | ((wbyte(s + j - 4u) >> 6u) << 4u);
    let mn = (wbyte(s + j + 4u) >> 4u) | ((wbyte(s + j) >> 6u) << 4u);
    return vec2f(f32(sc), f32(mn));
}

fn wvec4(r: u32, c: u32) -> vec4f {
    let in_row = vec4<bool>(c < p.cols, c + 1u < p.cols, c + 2u < p.cols, c + 3u < p.cols);
    switch p.fmt {
        case 0u, 1u: {   // dense 16-bit, rows not necessarily word-aligned
            var v = vec4f(0.0);
            let e0 = r * p.cols + c;
            for (var i = 0u; i < 4u; i++) {
                let e = e0 + i;
                if (in_row[i]) { v[i] = half_value((w[e >> 1u] >> ((e & 1u) * 16u)) & 0xFFFFu, p.fmt == 1u); }
            }
            return v;
        }
        case 2u: {   // q8_0
            let b = r * p.row_bytes + (c / 32u) * 34u;
            return sbytes(wword(b + 2u + c % 32u)) * whalf(b);
        }
        case 3u: {   // q4_0
            let b = r * p.row_bytes + (c / 32u) * 18u;
            let j = c % 32u;
            let x = wword(b + 2u + (j & 15u));
            let q = select(nib_lo(x), nib_hi(x), j >= 16u);
            return (vec4f(q) - 8.0) * whalf(b);
        }
        case 4u: {   // q4_k
            let b = r * p.row_bytes + (c / 256u) * 144u;
            let v = c % 256u;
            let chunk = v / 64u;
            let high = (v % 64u) >= 32u;
            let x = wword(b + 16u + 32u * chunk + v % 32u);
            let q = vec4f(select(nib_lo(x), nib_hi(x), high));
            let sm = scale_min_k4(b + 4u, 2u * chunk + select(0u, 1u, high));
            let d1 = whalf(b) * sm.x;
            let m1 = whalf(b + 2u) * sm.y;
            return d1 * q - m1;   // d1 * q is exact: fused or not, the same bits
        }
        case 5u: {   // q6_k
            let b = r * p.row_bytes + (c / 256u) * 210u;
            let v = c % 256u;
            let h = v / 128u;
            let kq = (v % 128u) / 32u;
            let l = v % 32u;
            let x = wword(b + 64u * h + l + 32u * (kq & 1u));
            let lo = select(nib_lo(x), nib_hi(x), kq >= 2u);
            let qh = wword(b + 128u + 32u * h + l) >> (2u * kq);
            let hi = vec4u(qh & 3u, (qh >> 8u) & 3u, (qh >> 16u) & 3u, (qh >> 24u) & 3u);
            let q = vec4f(vec4i(lo | (hi << vec4u(4u))) - vec4i(32));
            let sc = f32(i32(wbyte(b + 192u + 8u * h + l / 16u + 2u * kq) << 24u) >> 24u);
            return (whalf(b + 208u) * sc) * q;
        }
        default: {   // affine
            var q: vec4f;
            if (p.bits == 8u) {
                q = ubytes(w[((r * p.row_bytes) >> 2u) + c / 4u]);
            } else {
                let x = w[((r * p.row_bytes) >> 2u) + c / 8u] >> ((c % 8u) * 4u);
                q = vec4f(vec4u(x & 15u, (x >> 4u) & 15u, (x >> 8u) & 15u, (x >> 12u) & 15u));
            }
            let g = r * p.groups + c / p.gs;
            // q * scale is exact for 16-bit scales; with f32 ones a fused multiply-add may
            // differ from the unfused one in the last bit
            let v = q * affine_scale(p.scales, g) + affine_scale(p.biases, g);
            return select(vec4f(0.0), v, in_row);
        }
    }
}

fn a4(m: u32, k: u32) -> vec4f {
    var v = vec4f(0.0);
    for (var i = 0u; i < 4u; i++) {
        if (m < p.m && k + i < p.k) { v[i] = a[m * p.k + k + i]; }
    }
    return v;
}

fn put(i: u32, v: f32) {
    if (p.acc != 0u) { out[i] = out[i] + v; } else { out[i] = v; }
}

// ---- gemv ---------------------------------------------------------------------------------

const MAXM: u32 = 8u;
var<workgroup> red: array<f32, 2048>;   // WG * MAXM partial sums (WG <= 256)

@compute @workgroup_size(WG)
fn gemv(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
        @builtin(num_workgroups) nwg: vec3u) {
    let n = wid.x + wid.y * nwg.x;   // uniform: the whole workgroup returns or none does
    if (n >= p.n) { return; }
    let t = lid.x;
    var s: array<f32, MAXM>;
    for (var c = 4u * t; c < p.k; c += 4u * WG) {
        let wv = wvec4(n, c);
        for (var m = 0u; m < MAXM; m++) {
            if (m < p.m) { s[m] += dot(a4(m, c), wv); }
        }
    }
    for (var m = 0u; m < MAXM; m++) { red[m * WG + t] = s[m]; }
    for (var half = WG / 2u; half > 0u; half /= 2u) {
        workgroupBarrier();
        if (t < half) {
            for (var m = 0u; m < MAXM; m++) { red[m * WG + t] += red[m * WG + t + half]; }
        }
    }
    if (t < p.m) { put(t * p.n + n, red[t * WG]); }
}

// ---- gemm ---------------------------------------------------------------------------------

const TS: u32 = 64u;   // tile side
const BK: u32 = 16u;   // k per step
var<workgroup> as_: array<array<f32, TS>, BK>;   // a's tile, k-major
var<workgroup> ws: array<array<f32, TS>, BK>;    // W's tile, k-major

@compute @workgroup_size(256)
fn gemm(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
        @builtin(num_workgroups) nwg: vec3u) {
    let tile = wid.x + wid.y * nwg.x;
    let tm = tile / p.tiles_n;
    if (tm * TS >= p.m) { return; }   // uniform
    let m0 = tm * TS;
    let n0 = (tile % p.tiles_n) * TS;
    let t = lid.x;
    let tx = t % 16u;
    let ty = t / 16u;
    var acc: array<vec4f, 4>;
    for (var k0 = 0u; k0 < p.k; k0 += BK) {
        // a: 64 rows x 16 k, a quad of k per thread
        let ar = t / 4u;
        let ak = (t % 4u) * 4u;
        let av = a4(m0 + ar, k0 + ak);
        for (var i = 0u; i < 4u; i++) { as_[ak + i][ar] = av[i]; }
        if (TRANS == 0u) {   // W rows n0.., columns k0..: 64 x 16
            let wr = t / 4u;
            let wk = (t % 4u) * 4u;
            var wv = vec4f(0.0);
            if (n0 + wr < p.n) { wv = wvec4(n0 + wr, k0 + wk); }
            for (var i = 0u; i < 4u; i++) { ws[wk + i][wr] = wv[i]; }
        } else {             // W rows k0.., columns n0..: 16 x 64
            let wr = t / 16u;
            let wc = (t % 16u) * 4u;
            var wv = vec4f(0.0);
            if (k0 + wr < p.k && n0 + wc < p.n) { wv = wvec4(k0 + wr, n0 + wc); }
            for (var i = 0u; i < 4u; i++) { ws[wr][wc + i] = wv[i]; }
        }
        workgroupBarrier();
        for (var kk = 0u; kk < BK; kk++) {
            let x = vec4f(as_[kk][ty * 4u], as_[kk][ty * 4u + 1u], as_[kk][ty * 4u + 2u], as_[kk][ty * 4u + 3u]);
            let y = vec4f(ws[kk][tx * 4u], ws[kk][tx * 4u + 1u], ws[kk][tx * 4u + 2u], ws[kk][tx * 4u + 3u]);
            for (var i = 0u; i < 4u; i++) { acc[i] = fma(vec4f(x[i]), y, acc[i]); }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i++) {
        let m = m0 + ty * 4u + i;
        for (var j = 0u; j < 4u; j++) {
            let n = n0 + tx * 4u + j;
            if (m < p.m && n < p.n) { put(m * p.n + n, acc[i][j]); }
        }
    }
}

// ---- rows ---------------------------------------------------------------------------------

@compute @workgroup_size(WG)
fn rows(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
        @builtin(num_workgroups) nwg: vec3u) {
    let quads = (p.cols + 3u) / 4u;
    let g = (wid.x + wid.y * nwg.x) * WG + lid.x;
    if (g >= p.m * quads) { return; }
    let i = g / quads;
    let c = (g % quads) * 4u;
    var r = i;
    if (USE_IDS) { r = ids[i]; }
    var v = vec4f(0.0);
    if (r < p.rows) { v = wvec4(r, c); }
    for (var j = 0u; j < 4u; j++) {
        if (c + j < p.cols) { out[i * p.cols + c + j] = v[j]; }
    }
}
