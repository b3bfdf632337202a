// The matrix products' kernels that use subgroup operations. The host compiles this file as
// one module with `enable subgroups;` and matmul.wgsl (whose bindings, overrides and
// functions it uses), and only on a device with the subgroups feature; src/ops/matmul.c.
//
// gemv_cols4_sg: gemv_cols4 (the column matrix-vector product: out[c] = sum_k B[k] A[k, c])
//   with its sum over the G = WGV / C4 groups of k in two steps instead of a tree of
//   log2(G) workgroup barriers:
//   1. inside each subgroup, the lanes that hold one column (lane ^ C4, lane ^ 2 C4, ...)
//      add their sums by shuffles, and the subgroup's first C4 lanes store them;
//   2. after one barrier, the first subgroup adds the WGV / size stored sums of each column
//      (each lane a share, then shuffles again) and stores out.
//   Thread t = sid * size + lane takes the place that gemv_cols4 gives thread lid, where sid
//   numbers the subgroups of the workgroup (below), so lanes of one subgroup are consecutive
//   groups whatever order the device gives local invocations. The numbering follows the
//   order in which subgroups reach a workgroup atomic, which is also the faster one: with
//   sid = lid / size (where subgroups hold consecutive local indices) the subgroups that run
//   first no longer take the first rows, and the H200 ran slower. Needs full subgroups of
//   one size, at least C4 lanes, with WGV a multiple of the size (the host checks the
//   adapter's subgroup sizes); the sums are added in a fixed order, so the result is
//   deterministic.

var<workgroup> sg_count: atomic<u32>;

@compute @workgroup_size(WGV)
fn gemv_cols4_sg(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
                 @builtin(subgroup_invocation_id) lane: u32, @builtin(subgroup_size) size: u32) {
    let wg = wid.x + wid.y * nwg.x;
    if (wg >= p.tiles) {
        return;
    }
    // The subgroup's number: one lane of each counts it in. The counter's start is not known
    // (workgroup memory is not zeroed on every device), but the ns = WGV / size subgroups
    // get ns consecutive values, so their remainders mod ns (a power of 2) are 0 .. ns - 1,
    // each once, and no barrier is needed before the count.
    let ns = WGV / size;
    var got = 0u;
    if (subgroupElect()) {
        got = atomicAdd(&sg_count, 1u);
    }
    let sid = subgroupBroadcastFirst(got) % ns;
    let C4 = p.N;
    let t = sid * size + lane;
    var v = cols4_partial(wg, wid.z, t % C4, t / C4);
    for (var m = C4; m < size; m <<= 1u) {
        v += subgroupShuffleXor(v, m);
    }
    if (lane < C4) {                       // lane = c: the subgroup's sum of column c
        redv[sid * C4 + lane] = v;
    }
    workgroupBarrier();
    var w = vec4f(0.0);
    if (sid == 0u) {
        for (var i = lane / C4; i < ns; i += size / C4) {
            w += redv[i * C4 + lane % C4];   // ns stored sums per column
        }
    }
    for (var m = C4; m < size; m <<= 1u) { // every subgroup, so that the shuffles stay in
        w += subgroupShuffleXor(w, m);     // uniform control flow; only the first one stores
    }
    if (sid == 0u && lane < C4) {
        cols4_put(wg, wid.z, lane, w);
    }
}
