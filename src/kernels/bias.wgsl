// Biases of linear layers over rows of activations [rows, cols] (row-major f32):
//   bias_add          out[r, c] = x[r, c] + bias[c]
//   bias_add_inplace  io[r, c] += bias[c]   (WebGPU forbids one buffer bound read-only and
//                                             read-write in a dispatch)
//   bias_grad         dbias[c] = sum over r of dy[r, c], or += with accumulate
// The adds take one thread per element, so cols need not be a multiple of 4. The gradient
// takes one thread per column and sums the rows in order: the same order on every adapter
// (deterministic), each step of the loop a coalesced read of consecutive columns of one
// row. The grid may be 2-D past 65535 workgroups (linear index wid.x + wid.y * nwg.x).

struct Params {
    rows: u32,
    cols: u32,
    accumulate: u32,   // bias_grad: 1 adds into dbias
    _pad: u32,
}

override WG: u32 = 256u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> bias: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(1) var<storage, read_write> io: array<f32>;
@group(0) @binding(1) var<storage, read> dy: array<f32>;
@group(0) @binding(2) var<storage, read_write> dbias: array<f32>;

fn index(wid: vec3u, nwg: vec3u, lid: vec3u) -> u32 {
    return (wid.x + wid.y * nwg.x) * WG + lid.x;
}

@compute @workgroup_size(WG)
fn bias_add(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
            @builtin(num_workgroups) nwg: vec3u) {
    let i = index(wid, nwg, lid);
    if (i >= p.rows * p.cols) { return; }
    out[i] = x[i] + bias[i % p.cols];
}

@compute @workgroup_size(WG)
fn bias_add_inplace(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
                    @builtin(num_workgroups) nwg: vec3u) {
    let i = index(wid, nwg, lid);
    if (i >= p.rows * p.cols) { return; }
    io[i] = io[i] + bias[i % p.cols];
}

@compute @workgroup_size(WG)
fn bias_grad(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
             @builtin(num_workgroups) nwg: vec3u) {
    let c = index(wid, nwg, lid);
    if (c >= p.cols) { return; }
    var s = 0.0;
    for (var r = 0u; r < p.rows; r++) {
        s += dy[r * p.cols + c];
    }
    if (p.accumulate != 0u) { s += dbias[c]; }
    dbias[c] = s;
}
