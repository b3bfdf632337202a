// Optimizer steps: SGD and AdamW (as torch.optim.AdamW computes it), updated in place.
//
// Layout: every tensor is a flat f32 array viewed as vec4 (buffers are padded to 16
// bytes, so the last partial vec4 is in bounds; lanes past numel are padding, which these
// kernels may update: nothing reads it). EU (4) vec4 per thread: 16-byte loads and
// stores are what reach full bandwidth, and every element is read once and written once.
//
// AdamW is memory-bound: per parameter it reads w, g, m, v (16 bytes) and writes w, m, v
// (12 bytes), exactly the traffic of PyTorch's fused AdamW, so the kernel is a single pass
// with no reductions. The host computes every step-dependent constant in double (the bias
// corrections 1 - beta^t, step_size = lr / (1 - beta1^t), sqrt(1 - beta2^t), the decay
// 1 - lr * weight_decay) and passes them as f32, so the kernel is a handful of FMAs, a
// sqrt and a division per element:
//     w = w * decay
//     m = beta1 * m + (1 - beta1) * g
//     v = beta2 * v + (1 - beta2) * g * g
//     w = w - step_size * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
//
// Many small tensors (a model's parameter list): per-dispatch overhead dominates, so the
// adamw_xK entry points update K tensors in one dispatch. The workgroups of a dispatch are
// split between the K slots by the cumulative workgroup counts wg_end[k] in the uniform;
// a workgroup finds its slot with K-1 uniform comparisons. K is limited by the device's
// maxStorageBuffersPerShaderStage (4 buffers per slot: 10 on lavapipe allows K = 2).
// Every slot runs the same adam() function, so the single-tensor op (adamw_x1) and the
// multi-tensor op give bitwise the same results.
//
// The grid may be 2-D when there are more workgroups than one dimension allows; the
// linear workgroup index is wid.x + wid.y * nwg.x.

struct Adam {
    decay: f32,        // 1 - lr * weight_decay
    beta1: f32,
    beta2: f32,
    one_minus_beta1: f32,
    one_minus_beta2: f32,
    step_size: f32,    // lr / (1 - beta1^t)
    bc2_sqrt: f32,     // sqrt(1 - beta2^t)
    eps: f32,
    slots: array<vec4u, 3>,   // per slot: x = cumulative workgroup end, y = vec4 count
}

struct Sgd {
    n4: u32,
    lr: f32,
    _pad0: u32,
    _pad1: u32,
}

override WG: u32 = 256u;
// vec4 per thread (stride WG, so each workgroup access stays coalesced). A thread issues
// all its loads before any store: EU times the bytes in flight per thread of the one-vec4
// form, which left the in-place updates at less than half the H200's bandwidth.
const EU: u32 = 4u;

@group(0) @binding(0) var<uniform> adam_p: Adam;
@group(0) @binding(1) var<storage, read_write> w0: array<vec4f>;
@group(0) @binding(2) var<storage, read> g0: array<vec4f>;
@group(0) @binding(3) var<storage, read_write> m0: array<vec4f>;
@group(0) @binding(4) var<storage, read_write> v0: array<vec4f>;
@group(0) @binding(5) var<storage, read_write> w1: array<vec4f>;
@group(0) @binding(6) var<storage, read> g1: array<vec4f>;
@group(0) @binding(7) var<storage, read_write> m1: array<vec4f>;
@group(0) @binding(8) var<storage, read_write> v1: array<vec4f>;
@group(0) @binding(9) var<storage, read_write> w2: array<vec4f>;
@group(0) @binding(10) var<storage, read> g2: array<vec4f>;
@group(0) @binding(11) var<storage, read_write> m2: array<vec4f>;
@group(0) @binding(12) var<storage, read_write> v2: array<vec4f>;

@group(0) @binding(0) var<uniform> sgd_p: Sgd;
@group(0) @binding(1) var<storage, read_write> sgd_w: array<vec4f>;
@group(0) @binding(2) var<storage, read> sgd_g: array<vec4f>;

struct State {
    w: vec4f,
    m: vec4f,
    v: vec4f,
}

fn adam(w_in: vec4f, g: vec4f, m_in: vec4f, v_in: vec4f) -> State {
    var s: State;
    let w = w_in * adam_p.decay;
    s.m = adam_p.beta1 * m_in + adam_p.one_minus_beta1 * g;
    s.v = adam_p.beta2 * v_in + adam_p.one_minus_beta2 * (g * g);
    let denom = sqrt(s.v) / adam_p.bc2_sqrt + adam_p.eps;
    s.w = w - adam_p.step_size * s.m / denom;
    return s;
}

fn wg_linear(wid: vec3u, nwg: vec3u) -> u32 {
    return wid.x + wid.y * nwg.x;
}

// The slot of workgroup wg and the vec4 index inside that slot's tensor (or a slot past
// the last when the workgroup is beyond the end of the grid).
fn locate(wg: u32, lid: u32, nslots: u32) -> vec2u {
    var start = 0u;
    for (var k = 0u; k < nslots; k++) {
        let end = adam_p.slots[k].x;
        if (wg < end) {
            return vec2u(k, (wg - start) * (WG * EU) + lid);
        }
        start = end;
    }
    return vec2u(nslots, 0u);
}

fn slot0(base: u32) {
    let n4 = adam_p.slots[0].y;
    var w: array<vec4f, EU>; var g: array<vec4f, EU>; var m: array<vec4f, EU>; var v: array<vec4f, EU>;
    for (var u = 0u; u < EU; u++) {
        let i = base + u * WG;
        if (i < n4) { w[u] = w0[i]; g[u] = g0[i]; m[u] = m0[i]; v[u] = v0[i]; }
    }
    for (var u = 0u; u < EU; u++) {
        let i = base + u * WG;
        if (i < n4) {
            let s = adam(w[u], g[u], m[u], v[u]);
            w0[i] = s.w; m0[i] = s.m; v0[i] = s.v;
        }
    }
}

fn slot1(base: u32) {
    let n4 = adam_p.slots[1].y;
    var w: array<vec4f, EU>; var g: array<vec4f, EU>; var m: array<vec4f, EU>; var v: array<vec4f, EU>;
    for (var u = 0u; u < EU; u++) {
        let i = base + u * WG;
        if (i < n4) { w[u] = w1[i]; g[u] = g1[i]; m[u] = m1[i]; v[u] = v1[i]; }
    }
    for (var u = 0u; u < EU; u++) {
        let i = base + u * WG;
        if (i < n4) {
            let s = adam(w[u], g[u], m[u], v[u]);
            w1[i] = s.w; m1[i] = s.m; v1[i] = s.v;
        }
    }
}

fn slot2(base: u32) {
    let n4 = adam_p.slots[2].y;
    var w: array<vec4f, EU>; var g: array<vec4f, EU>; var m: array<vec4f, EU>; var v: array<vec4f, EU>;
    for (var u = 0u; u < EU; u++) {
        let i = base + u * WG;
        if (i < n4) { w[u] = w2[i]; g[u] = g2[i]; m[u] = m2[i]; v[u] = v2[i]; }
    }
    for (var u = 0u; u < EU; u++) {
        let i = base + u * WG;
        if (i < n4) {
            let s = adam(w[u], g[u], m[u], v[u]);
            w2[i] = s.w; m2[i] = s.m; v2[i] = s.v;
        }
    }
}

@compute @workgroup_size(WG)
fn adamw_x1(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
            @builtin(num_workgroups) nwg: vec3u) {
    let at = locate(wg_linear(wid, nwg), lid.x, 1u);
    if (at.x == 0u) { slot0(at.y); }
}

@compute @workgroup_size(WG)
fn adamw_x2(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
            @builtin(num_workgroups) nwg: vec3u) {
    let at = locate(wg_linear(wid, nwg), lid.x, 2u);
    if (at.x == 0u) { slot0(at.y); } else if (at.x == 1u) { slot1(at.y); }
}

@compute @workgroup_size(WG)
fn adamw_x3(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
            @builtin(num_workgroups) nwg: vec3u) {
    let at = locate(wg_linear(wid, nwg), lid.x, 3u);
    if (at.x == 0u) { slot0(at.y); } else if (at.x == 1u) { slot1(at.y); } else if (at.x == 2u) { slot2(at.y); }
}

// weight -= lr * grad, EU vec4 per thread.
@compute @workgroup_size(WG)
fn sgd(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
       @builtin(num_workgroups) nwg: vec3u) {
    let base = wg_linear(wid, nwg) * (WG * EU) + lid.x;
    var w: array<vec4f, EU>; var g: array<vec4f, EU>;
    for (var u = 0u; u < EU; u++) {
        let i = base + u * WG;
        if (i < sgd_p.n4) { w[u] = sgd_w[i]; g[u] = sgd_g[i]; }
    }
    for (var u = 0u; u < EU; u++) {
        let i = base + u * WG;
        if (i < sgd_p.n4) { sgd_w[i] = w[u] - sgd_p.lr * g[u]; }
    }
}
