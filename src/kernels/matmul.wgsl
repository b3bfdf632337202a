// Matrix products, f32 in and out, f32 accumulation: out[M, N] = A @ B in three layouts
//   LAYOUT 0  matmul     A [M, K]  B [K, N]
//   LAYOUT 1  matmul_bt  A [M, K]  B [N, K]   (B transposed: the usual weight layout)
//   LAYOUT 2  matmul_at  A [K, M]  B [K, N]   (A transposed: the weight gradient)
// All matrices are dense and row-major. Host: src/ops/matmul.c (shapes, variants, split-K).
//
// gemm: the register-tiled kernel for everything that is not a matrix-vector product.
//   * A workgroup of WG_S x WG_S threads owns a BT x BT tile of out (BT = 8 * WG_S: 128 with
//     256 threads by default); each thread owns an 8x8 micro-tile held in 16 vec4 registers,
//     so every k step costs 4 vec4 loads from workgroup memory for 64 FMAs.
//   * The micro-tile is split in two 4-row by two 4-column quads BT/2 apart (rows ty*4.. and
//     BT/2 + ty*4.., same for columns), so a warp's vec4 reads of one k-row are contiguous.
//     Threads are mapped to (tx, ty) in 8 x 4 blocks of 32 lanes: a warp touches 8 column
//     quads and 4 row quads per k (a 32 x 64 warp tile): one shared-memory wavefront per read.
//   * Both operand tiles live in workgroup memory k-major ("transposed" for A): k-row k holds
//     the BT values of that k as T4 = BT/4 vec4 (As[k][m], Bs[k][n]), so the inner product
//     reads are vec4 broadcasts, never strided, and need no padding or swizzle.
//   * Global loads move 4x4 blocks: a thread loads 4 vec4 and stores 4 vec4. For an operand
//     contiguous along M or N (B of matmul, A of matmul_at) a block is 4 k-rows of one vec4
//     column; 32 lanes take 32 consecutive columns (512 coalesced bytes per row) and store
//     them as they are. For an operand contiguous along K (A of matmul, B of matmul_bt) a
//     block is 4 rows x 4 k, loaded as 4 vec4 along k and transposed in registers into 4
//     vec4 along the rows; lanes are arranged 8 row-quads x 4 k-quads, so a warp load covers
//     8 rows x 64 contiguous bytes and the 8 lanes of each 16-byte store phase write 8
//     consecutive vec4 of one k-row: no bank conflicts, no padding. Half the workgroup loads
//     A, the other half B (whole warps, so the branch never diverges).
//   * Double buffering (DB 1): the next tile is loaded from global memory into registers
//     before the current one is multiplied, then stored into the other buffer: one barrier
//     per BK step. DB 0 uses one buffer and two barriers (half the workgroup memory).
//   * Edges: every global load is a clamped, selected load (the index is replaced by 0 when
//     out of range, the value by 0), so no access leaves a buffer even with robustness off,
//     and interior tiles pay a select, not a branch. With VEC / VEC (the operand's
//     contiguous extent is a multiple of 4) loads are vec4; otherwise 4 scalars with their own
//     bounds, so any M, N, K works. Stores to out are bounds-checked scalars.
//   * Launch order: tiles are numbered in groups of group_m tile rows (column-major inside a
//     group) so concurrently running workgroups share A and B panels in L2.
//   * Split-K: workgroup_id.z selects a K range of kchunk; slice z writes its partial tile
//     at out + z * out_slice (a workspace), and splitk_reduce adds the slices in order.
//
// gemv_rows: out[r] = dot(A[r, :], B[0:K]) for rows contiguous along K (matmul_bt with M = 1,
//   matmul with N = 1): GR rows per workgroup, every thread strides over K with vec4 loads
//   (a warp reads 512 contiguous bytes of each row), GR independent loads in flight, then a
//   tree reduction in workgroup memory. Memory bound: reads each weight once.
// gemv_cols: out[c] = sum_k B[k] * A[k, c] for a matrix contiguous along its columns (matmul
//   with M = 1: threads over N, coalesced): C4 vec4 columns per workgroup and WGV / C4 groups
//   of k rows, four rows per iteration in flight, a tree reduction over the groups.
// splitk_reduce: out[i] = sum over z of ws[z * out_slice + i], vec4 at a time.
//
// Bindings: A and B are read as array<vec4f>; a scalar element e is A[e >> 2][e & 3], so the
// same binding serves vec4 loads and scalar loads of any alignment. Tensor buffers are padded
// to 16 bytes.

struct Params {
    M: u32,          // gemm: rows of out; gemv: rows (gemv_rows) or columns (gemv_cols) of A
    N: u32,          // gemm: columns of out; gemv_cols: vec4 columns per workgroup (C4)
    K: u32,          // reduction length; splitk_reduce: number of slices
    kchunk: u32,     // K range of one split-K slice (workgroup_id.z); >= K when not split
    tiles_n: u32,    // gemm: column tiles
    tiles: u32,      // gemm: tiles; gemv: workgroups; splitk_reduce: vec4 of out
    group_m: u32,    // gemm: tile rows per launch group
    out_slice: u32,  // elements between split-K slices of the output (0: not split)
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> A: array<vec4f>;
@group(0) @binding(2) var<storage, read> B: array<vec4f>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<storage, read_write> sum_out: array<vec4f>;   // splitk_reduce

override LAYOUT: u32 = 0u;   // 0 matmul, 1 matmul_bt, 2 matmul_at
override WG_S: u32 = 16u;    // gemm: threads per side (8 or 16); BT = 8 * WG_S
override BK: u32 = 16u;      // gemm: k per tile step (8 or 16)
override DB: u32 = 1u;       // gemm: 1 double-buffered, 0 single buffer
override VEC: bool = true;   // the contiguous extents of A and B are multiples of 4 (gemm:
                             // K and N for matmul, K for matmul_bt, M and N for matmul_at;
                             // gemv: the row length of A): vec4 loads
override WGV: u32 = 256u;    // gemv, splitk_reduce: threads per workgroup
override GR: u32 = 4u;       // gemv_rows: rows per workgroup (<= 8)

override NT: u32 = WG_S * WG_S;          // threads
override BT: u32 = WG_S * 8u;            // tile side
override T4: u32 = WG_S * 2u;            // vec4 per tile k-row
override QN: u32 = BK / 4u;              // k-quads per tile
override NB: u32 = T4 * QN;              // 4x4 blocks per operand tile
override BPT: u32 = 2u * NB / NT;        // blocks each thread moves per step (1 or 2)
override BUF: u32 = BK * T4;             // vec4 per buffer
override TILE_VEC4: u32 = (DB + 1u) * BUF;
override RED_N: u32 = GR * WGV;

var<workgroup> As: array<vec4f, TILE_VEC4>;
var<workgroup> Bs: array<vec4f, TILE_VEC4>;
var<workgroup> red: array<f32, RED_N>;
var<workgroup> redv: array<vec4f, WGV>;

// ---- operand access: element e, or 0 when !ok (the index is clamped first) ------------

fn a_at(e: u32, ok: bool) -> f32 {
    return select(0.0, A[select(0u, e >> 2u, ok)][e & 3u], ok);
}

fn b_at(e: u32, ok: bool) -> f32 {
    return select(0.0, B[select(0u, e >> 2u, ok)][e & 3u], ok);
}

// Four consecutive elements e.. of a row whose valid extent ends n elements after e; vec4
// loads need e % 4 == 0 and the whole vec4 valid when ok.
fn a_vec(e: u32, ok: bool, n: u32) -> vec4f {
    if (VEC) {
        return select(vec4f(0.0), A[select(0u, e >> 2u, ok)], ok);
    }
    return vec4f(a_at(e, ok), a_at(e + 1u, ok && n > 1u), a_at(e + 2u, ok && n > 2u), a_at(e + 3u, ok && n > 3u));
}

fn b_vec(e: u32, ok: bool, n: u32) -> vec4f {
    if (VEC) {
        return select(vec4f(0.0), B[select(0u, e >> 2u, ok)], ok);
    }
    return vec4f(b_at(e, ok), b_at(e + 1u, ok && n > 1u), b_at(e + 2u, ok && n > 2u), b_at(e + 3u, ok && n > 3u));
}

// ---- gemm tile movement ---------------------------------------------------------------
// Block b of an operand's tile maps to a vec4 column g (0 .. T4-1) and a k-quad q (0 .. QN-1):
//   contiguous along K:    g = b % 8 + 8 * (b / (8 QN)), q = (b / 8) % QN
//   contiguous along M/N:  g = b % T4, q = b / T4

fn block_gq(b: u32, k_contiguous: bool) -> vec2u {
    if (k_contiguous) {
        return vec2u(b % 8u + 8u * (b / (8u * QN)), (b / 8u) % QN);
    }
    return vec2u(b % T4, b / T4);
}

fn transposed(v0: vec4f, v1: vec4f, v2: vec4f, v3: vec4f) -> array<vec4f, 4> {
    return array<vec4f, 4>(vec4f(v0.x, v1.x, v2.x, v3.x), vec4f(v0.y, v1.y, v2.y, v3.y),
                           vec4f(v0.z, v1.z, v2.z, v3.z), vec4f(v0.w, v1.w, v2.w, v3.w));
}

// The 4 vec4 of block b of A's tile at (m0, k0), as 4 k-rows of 4 tile columns.
fn load_a(b: u32, m0: u32, k0: u32, kend: u32) -> array<vec4f, 4> {
    let kc = LAYOUT != 2u;
    let gq = block_gq(b, kc);
    let m = m0 + 4u * gq.x;
    let k = k0 + 4u * gq.y;
    if (kc) {                                     // A [M, K]: 4 rows x 4 k, transposed
        let ok = k < kend;
        let nk = kend - min(k, kend);
        let e = m * p.K + k;
        return transposed(a_vec(e, ok && m < p.M, nk), a_vec(e + p.K, ok && m + 1u < p.M, nk),
                          a_vec(e + 2u * p.K, ok && m + 2u < p.M, nk),
                          a_vec(e + 3u * p.K, ok && m + 3u < p.M, nk));
    }
    let ok = m < p.M;                             // A [K, M]: 4 k-rows of one vec4
    let n = p.M - min(m, p.M);
    let e = k * p.M + m;
    return array<vec4f, 4>(a_vec(e, ok && k < kend, n), a_vec(e + p.M, ok && k + 1u < kend, n),
                           a_vec(e + 2u * p.M, ok && k + 2u < kend, n),
                           a_vec(e + 3u * p.M, ok && k + 3u < kend, n));
}

// The same for B's tile at (n0, k0).
fn load_b(b: u32, n0: u32, k0: u32, kend: u32) -> array<vec4f, 4> {
    let kc = LAYOUT == 1u;
    let gq = block_gq(b, kc);
    let n = n0 + 4u * gq.x;
    let k = k0 + 4u * gq.y;
    if (kc) {                                     // B [N, K]
        let ok = k < kend;
        let nk = kend - min(k, kend);
        let e = n * p.K + k;
        return transposed(b_vec(e, ok && n < p.N, nk), b_vec(e + p.K, ok && n + 1u < p.N, nk),
                          b_vec(e + 2u * p.K, ok && n + 2u < p.N, nk),
                          b_vec(e + 3u * p.K, ok && n + 3u < p.N, nk));
    }
    let ok = n < p.N;                             // B [K, N]
    let c = p.N - min(n, p.N);
    let e = k * p.N + n;
    return array<vec4f, 4>(b_vec(e, ok && k < kend, c), b_vec(e + p.N, ok && k + 1u < kend, c),
                           b_vec(e + 2u * p.N, ok && k + 2u < kend, c),
                           b_vec(e + 3u * p.N, ok && k + 3u < kend, c));
}

// What one thread moves per step: with BPT 2 (NB == NT) A's block lid and B's block lid;
// with BPT 1 (NB == NT / 2) A's block lid for the first half of the threads, else B's
// block lid - NB (whole warps either way).
struct Blocks {
    r0: array<vec4f, 4>,
    r1: array<vec4f, 4>,
}

fn fetch(lid: u32, m0: u32, n0: u32, k0: u32, kend: u32) -> Blocks {
    var r: Blocks;
    if (BPT == 2u) {
        r.r0 = load_a(lid, m0, k0, kend);
        r.r1 = load_b(lid, n0, k0, kend);
    } else if (lid < NB) {
        r.r0 = load_a(lid, m0, k0, kend);
    } else {
        r.r0 = load_b(lid - NB, n0, k0, kend);
    }
    return r;
}

fn put_a(base: u32, b: u32, w: array<vec4f, 4>) {
    let gq = block_gq(b, LAYOUT != 2u);
    let i = base + 4u * gq.y * T4 + gq.x;
    As[i] = w[0]; As[i + T4] = w[1]; As[i + 2u * T4] = w[2]; As[i + 3u * T4] = w[3];
}

fn put_b(base: u32, b: u32, w: array<vec4f, 4>) {
    let gq = block_gq(b, LAYOUT == 1u);
    let i = base + 4u * gq.y * T4 + gq.x;
    Bs[i] = w[0]; Bs[i + T4] = w[1]; Bs[i + 2u * T4] = w[2]; Bs[i + 3u * T4] = w[3];
}

fn stash(base: u32, lid: u32, r: Blocks) {
    if (BPT == 2u) {
        put_a(base, lid, r.r0);
        put_b(base, lid, r.r1);
    } else if (lid < NB) {
        put_a(base, lid, r.r0);
    } else {
        put_b(base, lid - NB, r.r0);
    }
}

// Row r, columns q .. q+3 of the output (or of split-K slice at offset ob).
fn put(ob: u32, r: u32, q: u32, v: vec4f) {
    if (r >= p.M) {
        return;
    }
    let e = ob + r * p.N + q;
    if (q < p.N) { out[e] = v.x; }
    if (q + 1u < p.N) { out[e + 1u] = v.y; }
    if (q + 2u < p.N) { out[e + 2u] = v.z; }
    if (q + 3u < p.N) { out[e + 3u] = v.w; }
}

@compute @workgroup_size(NT)
fn gemm(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
        @builtin(local_invocation_index) lid: u32) {
    let id = wid.x + wid.y * nwg.x;
    if (id >= p.tiles) {
        return;
    }
    // Grouped launch order: group_m tile rows at a time, walking down the rows first.
    let tiles_m = p.tiles / p.tiles_n;
    let per_group = p.group_m * p.tiles_n;
    let first_m = (id / per_group) * p.group_m;
    let gsize = min(tiles_m - first_m, p.group_m);
    let local = id % per_group;
    let m0 = (first_m + local % gsize) * BT;
    let n0 = (local / gsize) * BT;

    let kbeg = wid.z * p.kchunk;
    let kend = min(p.K, kbeg + p.kchunk);
    let nsteps = (kend - kbeg + BK - 1u) / BK;

    // 32-lane blocks of 8 x 4 threads.
    let lane = lid % 32u;
    let w = lid / 32u;
    let wx = WG_S / 8u;
    let tx = (w % wx) * 8u + lane % 8u;
    let ty = (w / wx) * 4u + lane / 8u;

    var r = fetch(lid, m0, n0, kbeg, kend);
    stash(0u, lid, r);
    workgroupBarrier();

    var c00 = vec4f(0.0); var c01 = vec4f(0.0); var c10 = vec4f(0.0); var c11 = vec4f(0.0);
    var c20 = vec4f(0.0); var c21 = vec4f(0.0); var c30 = vec4f(0.0); var c31 = vec4f(0.0);
    var c40 = vec4f(0.0); var c41 = vec4f(0.0); var c50 = vec4f(0.0); var c51 = vec4f(0.0);
    var c60 = vec4f(0.0); var c61 = vec4f(0.0); var c70 = vec4f(0.0); var c71 = vec4f(0.0);

    for (var t = 0u; t < nsteps; t++) {
        let more = t + 1u < nsteps;
        if (more) {
            r = fetch(lid, m0, n0, kbeg + (t + 1u) * BK, kend);
        }
        let cur = (t & DB) * BUF;
        for (var k = 0u; k < BK; k++) {
            let row = cur + k * T4;
            let a0 = As[row + ty];
            let a1 = As[row + ty + WG_S];
            let b0 = Bs[row + tx];
            let b1 = Bs[row + tx + WG_S];
            c00 = fma(vec4f(a0.x), b0, c00); c01 = fma(vec4f(a0.x), b1, c01);
            c10 = fma(vec4f(a0.y), b0, c10); c11 = fma(vec4f(a0.y), b1, c11);
            c20 = fma(vec4f(a0.z), b0, c20); c21 = fma(vec4f(a0.z), b1, c21);
            c30 = fma(vec4f(a0.w), b0, c30); c31 = fma(vec4f(a0.w), b1, c31);
            c40 = fma(vec4f(a1.x), b0, c40); c41 = fma(vec4f(a1.x), b1, c41);
            c50 = fma(vec4f(a1.y), b0, c50); c51 = fma(vec4f(a1.y), b1, c51);
            c60 = fma(vec4f(a1.z), b0, c60); c61 = fma(vec4f(a1.z), b1, c61);
            c70 = fma(vec4f(a1.w), b0, c70); c71 = fma(vec4f(a1.w), b1, c71);
        }
        if (DB == 0u) {
            workgroupBarrier();
        }
        if (more) {
            stash(((t + 1u) & DB) * BUF, lid, r);
        }
        workgroupBarrier();
    }

    let ob = wid.z * p.out_slice;
    let rr0 = m0 + ty * 4u;
    let rr1 = rr0 + WG_S * 4u;
    let q0 = n0 + tx * 4u;
    let q1 = q0 + WG_S * 4u;
    put(ob, rr0, q0, c00); put(ob, rr0, q1, c01);
    put(ob, rr0 + 1u, q0, c10); put(ob, rr0 + 1u, q1, c11);
    put(ob, rr0 + 2u, q0, c20); put(ob, rr0 + 2u, q1, c21);
    put(ob, rr0 + 3u, q0, c30); put(ob, rr0 + 3u, q1, c31);
    put(ob, rr1, q0, c40); put(ob, rr1, q1, c41);
    put(ob, rr1 + 1u, q0, c50); put(ob, rr1 + 1u, q1, c51);
    put(ob, rr1 + 2u, q0, c60); put(ob, rr1 + 2u, q1, c61);
    put(ob, rr1 + 3u, q0, c70); put(ob, rr1 + 3u, q1, c71);
}

// ---- matrix-vector products ---------------------------------------------------------

// out[r] = dot(A[r, kbeg:kend], B[kbeg:kend]) for GR rows r per workgroup; A is [M, K].
@compute @workgroup_size(WGV)
fn gemv_rows(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
             @builtin(local_invocation_index) lid: u32) {
    let wg = wid.x + wid.y * nwg.x;
    if (wg >= p.tiles) {
        return;
    }
    let r0 = wg * GR;
    let kbeg = wid.z * p.kchunk;
    let kend = min(p.K, kbeg + p.kchunk);
    var acc: array<f32, 8>;
    var rows: array<u32, 8>;
    for (var r = 0u; r < GR; r++) {
        rows[r] = min(r0 + r, p.M - 1u);   // rows past M repeat the last one; not written
    }
    if (VEC) {                             // K % 4 == 0: kbeg, kend and row starts are vec4
        let k4 = p.K / 4u;
        let iend = kend / 4u;
        var i = kbeg / 4u + lid;
        for (; i + WGV < iend; i += 2u * WGV) { // two vec4 of each row in flight
            let v0 = B[i];
            let v1 = B[i + WGV];
            for (var r = 0u; r < GR; r++) {
                let x0 = A[rows[r] * k4 + i];
                let x1 = A[rows[r] * k4 + i + WGV];
                acc[r] += dot(x0, v0) + dot(x1, v1);
            }
        }
        if (i < iend) {
            let v = B[i];
            for (var r = 0u; r < GR; r++) {
                acc[r] += dot(A[rows[r] * k4 + i], v);
            }
        }
    } else {
        for (var k = kbeg + lid; k < kend; k += WGV) {
            let v = B[k >> 2u][k & 3u];
            for (var r = 0u; r < GR; r++) {
                let e = rows[r] * p.K + k;
                acc[r] = fma(A[e >> 2u][e & 3u], v, acc[r]);
            }
        }
    }
    for (var r = 0u; r < GR; r++) {
        red[r * WGV + lid] = acc[r];
    }
    workgroupBarrier();
    for (var s = WGV / 2u; s > 0u; s >>= 1u) {
        if (lid < s) {
            for (var r = 0u; r < GR; r++) {
                red[r * WGV + lid] += red[r * WGV + lid + s];
            }
        }
        workgroupBarrier();
    }
    if (lid < GR && r0 + lid < p.M) {
        out[wid.z * p.out_slice + r0 + lid] = red[lid * WGV];
    }
}

// out[c] = sum_k B[k] * A[k, c] over k in [kbeg, kend) for 4 * C4 columns c per workgroup;
// A is [K, M] (M columns).
@compute @workgroup_size(WGV)
fn gemv_cols(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
             @builtin(local_invocation_index) lid: u32) {
    let wg = wid.x + wid.y * nwg.x;
    if (wg >= p.tiles) {
        return;
    }
    let kbeg = wid.z * p.kchunk;
    let kend = min(p.K, kbeg + p.kchunk);
    let C4 = p.N;                          // vec4 columns per workgroup, a power of 2
    let G = WGV / C4;                      // groups of k rows
    let c = lid % C4;
    let g = lid / C4;
    let col = (wg * C4 + c) * 4u;          // first of this thread's 4 columns
    let ok = col < p.M;
    let n = p.M - min(col, p.M);
    var acc = vec4f(0.0);
    var k = kbeg + g;
    loop {                                 // four rows in flight
        if (k + 3u * G >= kend) {
            break;
        }
        let x0 = a_vec(k * p.M + col, ok, n);
        let x1 = a_vec((k + G) * p.M + col, ok, n);
        let x2 = a_vec((k + 2u * G) * p.M + col, ok, n);
        let x3 = a_vec((k + 3u * G) * p.M + col, ok, n);
        acc = fma(vec4f(B[k >> 2u][k & 3u]), x0, acc);
        let k1 = k + G;
        acc = fma(vec4f(B[k1 >> 2u][k1 & 3u]), x1, acc);
        let k2 = k + 2u * G;
        acc = fma(vec4f(B[k2 >> 2u][k2 & 3u]), x2, acc);
        let k3 = k + 3u * G;
        acc = fma(vec4f(B[k3 >> 2u][k3 & 3u]), x3, acc);
        k += 4u * G;
    }
    for (; k < kend; k += G) {
        acc = fma(vec4f(B[k >> 2u][k & 3u]), a_vec(k * p.M + col, ok, n), acc);
    }
    redv[lid] = acc;
    workgroupBarrier();
    for (var s = G / 2u; s > 0u; s >>= 1u) {
        if (g < s) {
            redv[lid] += redv[lid + s * C4];
        }
        workgroupBarrier();
    }
    if (g == 0u && ok) {
        let v = redv[c];
        let e = wid.z * p.out_slice + col;
        out[e] = v.x;
        if (n > 1u) { out[e + 1u] = v.y; }
        if (n > 2u) { out[e + 2u] = v.z; }
        if (n > 3u) { out[e + 3u] = v.w; }
    }
}

// ---- split-K ------------------------------------------------------------------------

// sum_out[i] = sum over z < K of A[z * out_slice / 4 + i] for vec4 i < tiles.
@compute @workgroup_size(WGV)
fn splitk_reduce(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
                 @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WGV + lid;
    if (i >= p.tiles) {
        return;
    }
    let stride = p.out_slice / 4u;
    var s = A[i];
    for (var z = 1u; z < p.K; z++) {
        s += A[z * stride + i];
    }
    sum_out[i] = s;
}
