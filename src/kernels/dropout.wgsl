// Inverted dropout over any f32 array: out[i] = x[i] * scale where element i is kept, else 0,
// with scale = 1 / (1 - p). Element i is kept iff
//     mix32(mix32(i ^ key0) + key1) >= threshold   (threshold = floor(p * 2^32)),
// key0 and key1 derived from the 64-bit seed on the host (src/ops/dropout.c): a pure
// function of (seed, i), so the gradient is the same kernel on grad_out, and a double
// reference can reproduce every decision (tests/ref/ref_dropout.c). mix32 is the integer
// finaliser the attention kernels' dropout uses. One thread per element; the grid may be
// 2-D past 65535 workgroups (linear index wid.x + wid.y * nwg.x).

struct Params {
    n: u32,
    threshold: u32,
    key0: u32,
    key1: u32,
    scale: f32,
    _p0: u32,
    _p1: u32,
    _p2: u32,
}

override WG: u32 = 256u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read_write> io: array<f32>;

fn mix32(x0: u32) -> u32 {
    var x = x0;
    x ^= x >> 16u;
    x *= 0x7feb352du;
    x ^= x >> 15u;
    x *= 0x846ca68bu;
    x ^= x >> 16u;
    return x;
}

fn factor(i: u32) -> f32 {
    return select(0.0, p.scale, mix32(mix32(i ^ p.key0) + p.key1) >= p.threshold);
}

fn index(wid: vec3u, nwg: vec3u, lid: vec3u) -> u32 {
    return (wid.x + wid.y * nwg.x) * WG + lid.x;
}

@compute @workgroup_size(WG)
fn dropout(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
           @builtin(num_workgroups) nwg: vec3u) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    out[i] = x[i] * factor(i);
}

// out is x: WebGPU forbids one buffer bound read-only and read-write in a dispatch
@compute @workgroup_size(WG)
fn dropout_inplace(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
                   @builtin(num_workgroups) nwg: vec3u) {
    let i = index(wid, nwg, lid);
    if (i >= p.n) { return; }
    io[i] = io[i] * factor(i);
}
