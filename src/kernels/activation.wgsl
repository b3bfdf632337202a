// Activations and element-wise gradients: SiLU, ReLU, the fused SiLU and GELU gates, their backward
// passes, and the backward passes of add, sub and mul. Every op maps up to three inputs
// (p, q, r) to one or two outputs (o0, o1), element by element:
//
//   OP  name              inputs (p, q, r)        outputs
//   0   silu              x                       o0 = x * sigmoid(x)
//   1   relu              x                       o0 = x > 0 ? x : 0 (NaN stays NaN)
//   2   silu_backward     grad, x                 o0 = grad * silu'(x)
//   3   relu_backward     grad, x                 o0 = x > 0 ? grad : 0
//   4   silu_gate         up, gate                o0 = silu(up) * gate
//   5   add_backward      grad                    o0 = grad, o1 = grad
//   6   sub_backward      grad                    o0 = grad, o1 = -grad
//   7   mul_backward      grad, a, b              o0 = grad * b, o1 = grad * a
//   8   silu_gate_backward up, gate, grad         o0 = grad * gate * silu'(up), o1 = grad * silu(up)
//   9   gelu_gate         up, gate                o0 = gelu(up) * gate          (GELU, tanh form)
//   10  gelu_gate_backward up, gate, grad         o0 = grad * gate * gelu'(up), o1 = grad * gelu(up)
//
// Layout: every tensor is a flat f32 array viewed as vec4 (tensor buffers are padded to 16
// bytes, so the last partial vec4 is in bounds and its extra lanes are padding). Each
// thread handles EU (4) vec4 at stride WG and issues all its loads before any store, so
// several independent loads per thread are in flight (one vec4 per thread left a single-
// input op with one outstanding load per thread, too little to cover DRAM latency): 16-byte loads and stores, coalesced, one pass over memory, which is what a
// memory-bound op needs to run near the bandwidth limit. Workgroups of 256 threads, like
// elementwise.wgsl, which streams at the copy peak on the H200 (with 64-thread groups
// silu/relu ran ~20% below it there; NVIDIA also caps resident workgroups per SM, so
// small groups can leave thread slots empty); the grid is 2-D when the
// vec4 count needs more than 65535 workgroups, with linear index wid.x + wid.y * nwg.x.
//
// In place. WebGPU forbids binding one buffer both read-only and read_write in a dispatch,
// so the outputs come first (bindings 1 and 2, read_write) and only the inputs that share
// no buffer with an output get read-only bindings after them. The host deduplicates the
// buffers and tells each logical input where to read it with SRC_P/Q/R:
//   0 = o0, 1 = o1, 2 = first read-only binding, 3 = second, 4 = third.
// Entry points differ only in how many outputs and read-only bindings they have:
//   one_rN: one output (binding 1), N read-only bindings from 2
//   two_rN: two outputs (bindings 1, 2), N read-only bindings from 3
// A thread loads every input of its vec4s before it stores any output, so an output that is
// also an input (silu(x, x), relu_backward(g, x, g), mul_backward(g, a, b, a, b), ...) is
// read before it is overwritten; no two threads touch the same element.
//
// SiLU without overflow: sigmoid is built from e = exp(-|x|), which lies in (0, 1] and
// never overflows (WGSL leaves inf/NaN from overflow indeterminate), with
//   sigmoid(x) = 1 / (1 + e) for x >= 0,  e / (1 + e) for x < 0,
// and 1 - sigmoid(x) taken from the other branch rather than by cancellation, so
// silu'(x) = s * (1 + x * (1 - s)) keeps its relative precision for large |x|.

struct Params {
    n4: u32,      // number of vec4 to process: ceil(n / 4)
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

override OP: u32 = 0u;
override NIN: u32 = 1u;    // how many of p, q, r the op reads
override SRC_P: u32 = 2u;
override SRC_Q: u32 = 2u;
override SRC_R: u32 = 2u;
override WG: u32 = 256u;
const EU: u32 = 4u;        // vec4 per thread, at stride WG

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> o0: array<vec4f>;
// one-output entry points
@group(0) @binding(2) var<storage, read> one_in0: array<vec4f>;
@group(0) @binding(3) var<storage, read> one_in1: array<vec4f>;
// two-output entry points
@group(0) @binding(2) var<storage, read_write> o1: array<vec4f>;
@group(0) @binding(3) var<storage, read> two_in0: array<vec4f>;
@group(0) @binding(4) var<storage, read> two_in1: array<vec4f>;
@group(0) @binding(5) var<storage, read> two_in2: array<vec4f>;

struct Result {
    a: vec4f,
    b: vec4f,
}

struct Sig {
    s: vec4f,   // sigmoid(x)
    c: vec4f,   // 1 - sigmoid(x)
}

fn sigmoid2(x: vec4f) -> Sig {
    let e = exp(-abs(x));
    let big = 1.0 / (1.0 + e);      // sigmoid(|x|)
    let small = e * big;            // sigmoid(-|x|)
    let pos = x >= vec4f(0.0);
    return Sig(select(small, big, pos), select(big, small, pos));
}

fn silu(x: vec4f) -> vec4f {
    return x * sigmoid2(x).s;
}

fn dsilu(x: vec4f) -> vec4f {
    let g = sigmoid2(x);
    return g.s * (1.0 + x * g.c);
}

// GELU in its tanh form, 0.5 x (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715 x^3), written
// as x * sigmoid(2u) so that it shares sigmoid2's overflow-free evaluation (tanh(u) =
// 2 sigmoid(2u) - 1). x is clamped to +-15 inside u only: there |2u| > 260 and sigmoid(2u)
// is exactly 0 or 1 in f32 already, and x^3 cannot overflow (nor 0 * inf appear in the
// derivative).
const GELU_K: f32 = 1.5957691216057308;    // 2 sqrt(2/pi)
fn gelu_sig(x: vec4f) -> Sig {
    let c = clamp(x, vec4f(-15.0), vec4f(15.0));
    return sigmoid2(GELU_K * (c + 0.044715 * c * c * c));
}

fn gelu(x: vec4f) -> vec4f {
    return x * gelu_sig(x).s;
}

// d/dx x sigmoid(2u) = s + x s (1 - s) 2u'(x), 2u' = GELU_K (1 + 3 * 0.044715 x^2)
fn dgelu(x: vec4f) -> vec4f {
    let g = gelu_sig(x);
    let c = clamp(x, vec4f(-15.0), vec4f(15.0));
    return g.s + x * g.s * g.c * (GELU_K * (1.0 + 0.134145 * c * c));
}

// max(x, 0) decided on the bits: WGSL lets compilers assume there are no NaNs, and the
// H200's driver then folds a float comparison so that relu(NaN) became 0. Zero when the
// sign bit is set or the value is +0, except for NaNs, which pass through.
fn relu(x: vec4f) -> vec4f {
    let b = bitcast<vec4u>(x);
    let nan = (b & vec4u(0x7fffffffu)) > vec4u(0x7f800000u);
    let non_positive = ((b & vec4u(0x80000000u)) != vec4u(0u)) | (b == vec4u(0u));
    return select(x, vec4f(0.0), non_positive & !nan);
}

fn apply(p: vec4f, q: vec4f, r: vec4f) -> Result {
    let z = vec4f(0.0);
    switch OP {
        case 0u: { return Result(silu(p), z); }
        case 1u: { return Result(relu(p), z); }
        case 2u: { return Result(p * dsilu(q), z); }
        case 3u: { return Result(select(z, p, q > z), z); }
        case 4u: { return Result(silu(p) * q, z); }
        case 5u: { return Result(p, p); }
        case 6u: { return Result(p, -p); }
        case 7u: { return Result(p * r, p * q); }
        case 8u: { return Result(r * q * dsilu(p), r * silu(p)); }
        case 9u: { return Result(gelu(p) * q, z); }
        default: { return Result(r * q * dgelu(p), r * gelu(p)); }
    }
}

// First vec4 of this thread; its others follow at stride WG.
fn linear_index(wid: vec3u, lid: vec3u, nwg: vec3u) -> u32 {
    return (wid.x + wid.y * nwg.x) * (WG * EU) + lid.x;
}

// Loaders, one per binding set: each names only the bindings its entry points have.
fn ld_one0(s: u32, i: u32) -> vec4f {
    return o0[i];
}
fn ld_one1(s: u32, i: u32) -> vec4f {
    if (s == 2u) { return one_in0[i]; }
    return o0[i];
}
fn ld_one2(s: u32, i: u32) -> vec4f {
    if (s == 2u) { return one_in0[i]; }
    if (s == 3u) { return one_in1[i]; }
    return o0[i];
}
fn ld_two0(s: u32, i: u32) -> vec4f {
    if (s == 1u) { return o1[i]; }
    return o0[i];
}
fn ld_two1(s: u32, i: u32) -> vec4f {
    if (s == 2u) { return two_in0[i]; }
    if (s == 1u) { return o1[i]; }
    return o0[i];
}
fn ld_two2(s: u32, i: u32) -> vec4f {
    if (s == 2u) { return two_in0[i]; }
    if (s == 3u) { return two_in1[i]; }
    if (s == 1u) { return o1[i]; }
    return o0[i];
}
fn ld_two3(s: u32, i: u32) -> vec4f {
    if (s == 2u) { return two_in0[i]; }
    if (s == 3u) { return two_in1[i]; }
    if (s == 4u) { return two_in2[i]; }
    if (s == 1u) { return o1[i]; }
    return o0[i];
}

@compute @workgroup_size(WG)
fn one_r0(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
          @builtin(num_workgroups) nwg: vec3u) {
    let base = linear_index(wid, lid, nwg);
    var p: array<vec4f, EU>; var q: array<vec4f, EU>; var r: array<vec4f, EU>;
    for (var u = 0u; u < EU; u++) {
        let i = base + u * WG;
        if (i < params.n4) {
            p[u] = ld_one0(SRC_P, i);
            if (NIN > 1u) { q[u] = ld_one0(SRC_Q, i); }
        }
    }
    for (var u = 0u; u < EU; u++) {
        let i = base + u * WG;
        if (i < params.n4) {
            let res = apply(p[u], q[u], r[u]);
            o0[i] = res.a;
        }
    }
}

@compute @workgroup_size(WG)
fn one_r1(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
          @builtin(num_workgroups) nwg: vec3u) {
    let base = linear_index(wid, lid, nwg);
    var p: array<vec4f, EU>; var q: array<vec4f, EU>; var r: array<vec4f, EU>;
    for (var u = 0u; u < EU; u++) {
        let i = base + u * WG;
        if (i < params.n4) {
            p[u] = ld_one1(SRC_P, i);
            if (NIN > 1u) { q[u] = ld_one1(SRC_Q, i); }
        }
    }
    for (var u = 0u; u < EU; u++) {
        let i = base + u * WG;
        if (i < params.n4) {
            let res = apply(p[u], q[u], r[u]);
            o0[i] = res.a;
        }
    }
}

@compute @workgroup_size(WG)
fn one_r2(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
          @builtin(num_workgroups) nwg: vec3u) {
    let base = linear_index(wid, lid, nwg);
    var p: array<vec4f, EU>; var q: array<vec4f, EU>; var r: array<vec4f, EU>;
    for (var u = 0u; u < EU; u++) {
        let i = base + u * WG;
        if (i < params.n4) {
            p[u] = ld_one2(SRC_P, i);
            if (NIN > 1u) { q[u] = ld_one2(SRC_Q, i); }
        }
    }
    for (var u = 0u; u < EU; u++) {
        let i = base + u * WG;
        if (i < params.n4) {
            let res = apply(p[u], q[u], r[u]);
            o0[i] = res.a;
        }
    }
}

@compute @workgroup_size(WG)
fn two_r0(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
          @builtin(num_workgroups) nwg: vec3u) {
    let base = linear_index(wid, lid, nwg);
    var p: array<vec4f, EU>; var q: array<vec4f, EU>; var r: array<vec4f, EU>;
    for (var u = 0u; u < EU; u++) {
        let i = base + u * WG;
        if (i < params.n4) {
            p[u] = ld_two0(SRC_P, i);
            if (NIN > 1u) { q[u] = ld_two0(SRC_Q, i); }
            if (NIN > 2u) { r[u] = ld_two0(SRC_R, i); }
        }
    }
    for (var u = 0u; u < EU; u++) {
        let i = base + u * WG;
        if (i < params.n4) {
            let res = apply(p[u], q[u], r[u]);
            o0[i] = res.a;
            o1[i] = res.b;
        }
    }
}

@compute @workgroup_size(WG)
fn two_r1(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
          @builtin(num_workgroups) nwg: vec3u) {
    let base = linear_index(wid, lid, nwg);
    var p: array<vec4f, EU>; var q: array<vec4f, EU>; var r: array<vec4f, EU>;
    for (var u = 0u; u < EU; u++) {
        let i = base + u * WG;
        if (i < params.n4) {
            p[u] = ld_two1(SRC_P, i);
            if (NIN > 1u) { q[u] = ld_two1(SRC_Q, i); }
            if (NIN > 2u) { r[u] = ld_two1(SRC_R, i); }
        }
    }
    for (var u = 0u; u < EU; u++) {
        let i = base + u * WG;
        if (i < params.n4) {
            let res = apply(p[u], q[u], r[u]);
            o0[i] = res.a;
            o1[i] = res.b;
        }
    }
}

@compute @workgroup_size(WG)
fn two_r2(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
          @builtin(num_workgroups) nwg: vec3u) {
    let base = linear_index(wid, lid, nwg);
    var p: array<vec4f, EU>; var q: array<vec4f, EU>; var r: array<vec4f, EU>;
    for (var u = 0u; u < EU; u++) {
        let i = base + u * WG;
        if (i < params.n4) {
            p[u] = ld_two2(SRC_P, i);
            if (NIN > 1u) { q[u] = ld_two2(SRC_Q, i); }
            if (NIN > 2u) { r[u] = ld_two2(SRC_R, i); }
        }
    }
    for (var u = 0u; u < EU; u++) {
        let i = base + u * WG;
        if (i < params.n4) {
            let res = apply(p[u], q[u], r[u]);
            o0[i] = res.a;
            o1[i] = res.b;
        }
    }
}

@compute @workgroup_size(WG)
fn two_r3(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
          @builtin(num_workgroups) nwg: vec3u) {
    let base = linear_index(wid, lid, nwg);
    var p: array<vec4f, EU>; var q: array<vec4f, EU>; var r: array<vec4f, EU>;
    for (var u = 0u; u < EU; u++) {
        let i = base + u * WG;
        if (i < params.n4) {
            p[u] = ld_two3(SRC_P, i);
            if (NIN > 1u) { q[u] = ld_two3(SRC_Q, i); }
            if (NIN > 2u) { r[u] = ld_two3(SRC_R, i); }
        }
    }
    for (var u = 0u; u < EU; u++) {
        let i = base + u * WG;
        if (i < params.n4) {
            let res = apply(p[u], q[u], r[u]);
            o0[i] = res.a;
            o1[i] = res.b;
        }
    }
}
