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
//     quads and 4 row quads per k (a 32 x 64 warp tile), one shared-memory wavefront each.
//   * Both operand tiles live in workgroup memory k-major ("transposed" for A): row k holds
//     the BT values of that k as BT/4 vec4 (As[k][m], Bs[k][n]), so the inner product reads
//     are vec4 broadcasts, never strided.
//   * Global loads: an operand that is contiguous along M or N (B of matmul, A of matmul_at)
//     is read as vec4 rows of the tile (coalesced 512-byte rows) and stored as is. An operand
//     contiguous along K (A of matmul, B of matmul_bt) is read as 4 scalars from 4
//     consecutive rows at one k (32 lanes cover 16 k x 2 row groups: 64-byte segments) and
//     stored as one vec4: the transpose happens in registers, so every workgroup store is a
//     full vec4 and no alignment of K is needed.
//   * Bank conflicts: 8 lanes of a 16-byte store hold 8 consecutive k of one row group; with
//     SMEM 2 the vec4 column of k-row k is XOR-swizzled by k & 7 (free in memory), with SMEM
//     1 each k-row is padded by one vec4; either spreads them over all 32 banks.
//   * Double buffering (DB 1): the next tile is loaded from global memory into registers
//     before the current one is multiplied, then stored into the other buffer: one barrier
//     per BK step. DB 0 uses one buffer and two barriers (half the workgroup memory).
//   * Edges: every global load is a clamped, selected load (the index is replaced by 0 when
//     out of range, the value by 0), so no access ever leaves a buffer even with robustness
//     off, and interior tiles pay a select, not a branch. Stores are bounds-checked scalars.
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
// same binding serves vec4 loads (VEC: the contiguous extent is a multiple of 4) and scalar
// loads of any alignment. Tensor buffers are padded to 16 bytes.

struct Params {
    M: u32,          // gemm: rows of out; gemv: rows (gemv_rows) or columns (gemv_cols) of A
    N: u32,          // gemm: columns of out
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
override VEC: bool = true;   // vec4 loads of the operands contiguous along M or N
override WG_S: u32 = 16u;    // gemm: threads per side (8 or 16); BT = 8 * WG_S
override BK: u32 = 16u;      // gemm: k per tile step (8 or 16)
override DB: u32 = 1u;       // gemm: 1 double-buffered, 0 single buffer
override SMEM: u32 = 2u;     // gemm: 0 plain, 1 padded k-rows, 2 XOR-swizzled k-rows
override WGV: u32 = 256u;    // gemv, splitk_reduce: threads per workgroup
override GR: u32 = 4u;       // gemv_rows: rows per workgroup (<= 8)
override C4: u32 = 4u;       // gemv_cols: vec4 columns per workgroup (divides WGV)

override NT: u32 = WG_S * WG_S;            // threads
override BT: u32 = WG_S * 8u;              // tile side
override T4: u32 = WG_S * 2u;              // vec4 per tile k-row
override RS: u32 = T4 + u32(SMEM == 1u);   // vec4 stride between k-rows
override BUF: u32 = BK * RS;               // vec4 per buffer
override GL: u32 = T4 * BK / NT;           // vec4 each thread loads per operand and step (<= 4)
override TILE_VEC4: u32 = (DB + 1u) * BUF; // workgroup memory per operand
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

// Four consecutive elements e.. of a row whose valid extent ends n elements after e.
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

// Global tile loads. u numbers the vec4 a thread moves (0 .. T4 * BK - 1); the tile of the
// operand is BT rows (of M or N) by BK values of k starting at (r0, k0).
//   contiguous along M/N: k = u / T4, row group g = u % T4: one vec4 of a k-row of the matrix
//   contiguous along K:   k = u % BK, g = u / BK: 4 scalars of rows 4g .. 4g+3 at one k
fn load_a(u: u32, r0: u32, k0: u32, kend: u32) -> vec4f {
    if (LAYOUT == 2u) {               // A [K, M]
        let k = k0 + u / T4;
        let m = r0 + (u % T4) * 4u;
        return a_vec(k * p.M + m, k < kend && m < p.M, p.M - min(m, p.M));
    }
    let k = k0 + u % BK;              // A [M, K]
    let m = r0 + (u / BK) * 4u;
    let e = m * p.K + k;
    let ok = k < kend;
    return vec4f(a_at(e, ok && m < p.M), a_at(e + p.K, ok && m + 1u < p.M),
                 a_at(e + 2u * p.K, ok && m + 2u < p.M), a_at(e + 3u * p.K, ok && m + 3u < p.M));
}

fn load_b(u: u32, c0: u32, k0: u32, kend: u32) -> vec4f {
    if (LAYOUT == 1u) {               // B [N, K]
        let k = k0 + u % BK;
        let n = c0 + (u / BK) * 4u;
        let e = n * p.K + k;
        let ok = k < kend;
        return vec4f(b_at(e, ok && n < p.N), b_at(e + p.K, ok && n + 1u < p.N),
                     b_at(e + 2u * p.K, ok && n + 2u < p.N), b_at(e + 3u * p.K, ok && n + 3u < p.N));
    }
    let k = k0 + u / T4;              // B [K, N]
    let n = c0 + (u % T4) * 4u;
    return b_vec(k * p.N + n, k < kend && n < p.N, p.N - min(n, p.N));
}

// Position of vec4 column g of k-row k inside one buffer.
fn slot(k: u32, g: u32) -> u32 {
    if (SMEM == 2u) {
        return k * RS + (g ^ (k & 7u));
    }
    return k * RS + g;
}

fn store_a(base: u32, u: u32, v: vec4f) {
    if (LAYOUT == 2u) {
        As[base + slot(u / T4, u % T4)] = v;
    } else {
        As[base + slot(u % BK, u / BK)] = v;
    }
}

fn store_b(base: u32, u: u32, v: vec4f) {
    if (LAYOUT == 1u) {
        Bs[base + slot(u % BK, u / BK)] = v;
    } else {
        Bs[base + slot(u / T4, u % T4)] = v;
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

    var ra: array<vec4f, 4>;
    var rb: array<vec4f, 4>;
    for (var i = 0u; i < GL; i++) {
        ra[i] = load_a(lid + i * NT, m0, kbeg, kend);
        rb[i] = load_b(lid + i * NT, n0, kbeg, kend);
    }
    for (var i = 0u; i < GL; i++) {
        store_a(0u, lid + i * NT, ra[i]);
        store_b(0u, lid + i * NT, rb[i]);
    }
    workgroupBarrier();

    var c00 = vec4f(0.0); var c01 = vec4f(0.0); var c10 = vec4f(0.0); var c11 = vec4f(0.0);
    var c20 = vec4f(0.0); var c21 = vec4f(0.0); var c30 = vec4f(0.0); var c31 = vec4f(0.0);
    var c40 = vec4f(0.0); var c41 = vec4f(0.0); var c50 = vec4f(0.0); var c51 = vec4f(0.0);
    var c60 = vec4f(0.0); var c61 = vec4f(0.0); var c70 = vec4f(0.0); var c71 = vec4f(0.0);

    for (var t = 0u; t < nsteps; t++) {
        let more = t + 1u < nsteps;
        if (more) {
            let k1 = kbeg + (t + 1u) * BK;
            for (var i = 0u; i < GL; i++) {
                ra[i] = load_a(lid + i * NT, m0, k1, kend);
                rb[i] = load_b(lid + i * NT, n0, k1, kend);
            }
        }
        let cur = (t & DB) * BUF;
        for (var k = 0u; k < BK; k++) {
            var sw = 0u;
            if (SMEM == 2u) {
                sw = k & 7u;
            }
            let row = cur + k * RS;
            let ia = row + (ty ^ sw);
            let ib = row + (tx ^ sw);
            let a0 = As[ia];
            let a1 = As[ia + WG_S];
            let b0 = Bs[ib];
            let b1 = Bs[ib + WG_S];
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
            let nxt = ((t + 1u) & DB) * BUF;
            for (var i = 0u; i < GL; i++) {
                store_a(nxt, lid + i * NT, ra[i]);
                store_b(nxt, lid + i * NT, rb[i]);
            }
        }
        workgroupBarrier();
    }

    let ob = wid.z * p.out_slice;
    let r0 = m0 + ty * 4u;
    let r1 = r0 + WG_S * 4u;
    let q0 = n0 + tx * 4u;
    let q1 = q0 + WG_S * 4u;
    put(ob, r0, q0, c00); put(ob, r0, q1, c01);
    put(ob, r0 + 1u, q0, c10); put(ob, r0 + 1u, q1, c11);
    put(ob, r0 + 2u, q0, c20); put(ob, r0 + 2u, q1, c21);
    put(ob, r0 + 3u, q0, c30); put(ob, r0 + 3u, q1, c31);
    put(ob, r1, q0, c40); put(ob, r1, q1, c41);
    put(ob, r1 + 1u, q0, c50); put(ob, r1 + 1u, q1, c51);
    put(ob, r1 + 2u, q0, c60); put(ob, r1 + 2u, q1, c61);
    put(ob, r1 + 3u, q0, c70); put(ob, r1 + 3u, q1, c71);
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
        for (var i = kbeg / 4u + lid; i < kend / 4u; i += WGV) {
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
