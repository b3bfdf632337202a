// Matrix products, f32 in and out, f32 accumulation: out[M, N] = A @ B in three layouts
//   LAYOUT 0  matmul     A [M, K]  B [K, N]
//   LAYOUT 1  matmul_bt  A [M, K]  B [N, K]   (B transposed: the usual weight layout)
//   LAYOUT 2  matmul_at  A [K, M]  B [K, N]   (A transposed: the weight gradient)
// All matrices are dense and row-major. Host: src/ops/matmul.c (shapes, plans, split-K);
// bench/notes/matmul.md has the measurements behind the choices below.
//
// gemm: the register-tiled kernel for everything that is not a matrix-vector product.
//   * A workgroup of WG_M x WG_N threads owns a BM x BN tile of out (BM = TM * WG_M, BN =
//     8 * WG_N: the host's tiles are 128 x 128 with 256 threads, 64 x 128 with 128 and
//     64 x 64 with 64); each thread owns an 8 x 8 micro-tile (TM 8: 16 vec4 registers), so
//     every k step costs 4 vec4 loads from workgroup memory for 64 FMAs.
//   * The micro-tile is split in 4-row by 4-column quads BM/2 (BN/2) apart (rows ty*4.. and
//     BM/2 + ty*4.., same for columns), so a warp's vec4 reads of one k-row are contiguous.
//     Threads are mapped to (tx, ty) in 8 x 4 blocks of 32 lanes: a warp touches 8 column
//     quads and 4 row quads per k (a 32 x 64 warp tile): one shared-memory wavefront per read.
//   * Both operand tiles live in workgroup memory k-major ("transposed" for A): k-row k holds
//     the BM (BN) values of that k as T4A = BM/4 (T4B = BN/4) vec4 (As[k][m], Bs[k][n]), so the inner product
//     reads are vec4 broadcasts, never strided, and need no padding or swizzle.
//   * Global loads move 4x4 blocks: a thread loads 4 vec4 and stores 4 vec4. For an operand
//     contiguous along M or N (B of matmul, A of matmul_at) a block is 4 k-rows of one vec4
//     column; 32 lanes take 32 consecutive columns (512 coalesced bytes per row) and store
//     them as they are. For an operand contiguous along K (A of matmul, B of matmul_bt) a
//     block is 4 rows x 4 k, loaded as 4 vec4 along k and transposed in registers into 4
//     vec4 along the rows; lanes are arranged 8 row-quads x 4 k-quads, so a warp load covers
//     8 rows x 64 contiguous bytes and the 8 lanes of each 16-byte store phase write 8
//     consecutive vec4 of one k-row: no bank conflicts, no padding. Whole warps load A,
//     others B (the branch never diverges); with BK 8 a step has fewer blocks than threads
//     and the last warps load none.
//   * Double buffering with register prefetch: the next tile is loaded from global memory
//     into registers before the current one is multiplied, then stored into the other
//     buffer: one barrier per BK step.
//   * FAST: a workgroup whose tile is in range along M and N, and whose K range is whole BK
//     steps, loads without clamps: plain vec4 where the operand's rows are whole vec4 (VEC,
//     VECB), else quads of scalars (a_quad, b_quad); the choice is uniform, one branch per
//     load group. With KPART (set by the host only where a K range ends inside a step) such
//     a tile also loads its full steps without clamps and clamps only the partial last one;
//     with EDGE a tile past M or N counts as in range for an operand read along that side in
//     vec4 (its index held inside the row: see EDGE below).
//   * FLAGS packs FAST and gemm2's options; src/ops/matmul.c's TILES sets them per tile.
//   * Edges: every global load is a clamped, selected load (the index is replaced by 0 when
//     out of range, the value by 0), so no access leaves a buffer even with robustness off,
//     and interior tiles pay a select, not a branch. With VEC / VECB (the operand's row
//     stride lda / ldb is a multiple of 4) loads are vec4; otherwise 4 scalars with their own
//     bounds, so any M, N, K works. Stores to out are bounds-checked scalars. (On a GPU the
//     host gives the gemm copies with padded rows where it can.)
//   * Launch order: tiles are numbered in groups of group_m tile rows (column-major inside a
//     group) so concurrently running workgroups share A and B panels in L2.
//   * Split-K: workgroup_id.z selects a K range of kchunk; slice z writes its partial tile
//     at out + z * out_slice (a workspace), and splitk_reduce adds the slices in order.
//   * The last round (gemm2, gemm2_v4): where the tiles leave the GPU's last round nearly
//     empty, the host dispatches all but the last tiles as usual, then those (from tile
//     tile_base on) in K-slices with COMPACT, each slice's tile as a BM x BN block of a
//     workspace, and splitk_reduce_tiles adds the slices into out.
// gemm2, gemm2_v4: gemm with BK 8 and the 8 k of a step written out with fragment
//   double-buffering, vec4 stores of out (see the comment above gemm2), and INC: the loads
//   and stores of interior tiles at indices computed once per tile.
//
// gemv_rows: out[r] = dot(A[r, :], B[0:K]) for rows contiguous along K (matmul_bt with M = 1,
//   matmul with N = 1): GR rows per workgroup, every thread strides over K with vec4 loads
//   (a warp reads 512 contiguous bytes of each row), GR independent loads in flight, then a
//   tree reduction in workgroup memory. Memory bound: reads each weight once.
// gemv_cols4: out[c] = sum_k B[k] * A[k, c] for a matrix contiguous along its columns
//   (matmul with M = 1: threads over N, coalesced): C4 vec4 columns per workgroup and WGV /
//   C4 groups of k, k in quads: one vec4 of B gives the coefficients of 4 consecutive rows,
//   GQ quads (GQ 4: 16 rows, 256 bytes per thread) in flight with GQ accumulators (a driver
//   keeps loads in flight only as far as there are independent accumulators to take them);
//   then a tree reduction over the groups, or subgroup shuffles (gemv_cols4_sg). WGV threads
//   per workgroup: 256 with GQ 4, or the wide workgroups of the host's profile (on the H200
//   512 with GQ 8).
// splitk_reduce: out[i] = sum over z of ws[z * out_slice + i], vec4 at a time.
// splitk_reduce_tiles: the same for the last round's tiles (COMPACT blocks) into out.
// ACC (every kernel above): the element is added to out instead of written over it
//   (wgml_matmul_options.accumulate): out = out + (the finished sum), one more rounding.
// transpose_nk: B [N, K] -> [K, N], for matmul_bt on large M run as matmul (the host decides);
//   transpose_pad the same for any N and K, each row of the copy padded to a multiple of 4
//   (lda / ldb: the gemm reads it in vec4); pad_rows: a [rows, cols] operand's rows padded so.
//
// Bindings: A and B are read as array<vec4f>; a scalar element e is A[e >> 2][e & 3], so the
// same binding serves vec4 loads and scalar loads of any alignment. Tensor buffers are padded
// to 16 bytes.

struct Params {
    M: u32,          // gemm: rows of out; gemv: rows (gemv_rows) or columns (gemv_cols4) of A
    N: u32,          // gemm: columns of out; gemv_cols4: vec4 columns per workgroup (C4)
    K: u32,          // reduction length; splitk_reduce: number of slices
    kchunk: u32,     // K range of one split-K slice (workgroup_id.z); >= K when not split
    tiles_n: u32,    // gemm: column tiles
    tiles: u32,      // gemm: tiles; gemv: workgroups; splitk_reduce: vec4 of out
    group_m: u32,    // gemm: tile rows per launch group
    out_slice: u32,  // elements between split-K slices of the output (0: not split);
                     // splitk_reduce_tiles: the tiles it adds up
    tile_base: u32,  // gemm2: the first tile of this dispatch (COMPACT: of the last round)
    lda: u32,        // gemm: elements between rows of A as stored (K, or M for LAYOUT 2; more
    ldb: u32,        // when a copy pads its rows to a multiple of 4); B's likewise (N, or K)
    kbase: u32,      // gemm: where the K ranges start (the host's pass over the last K % BK
                     // values of k: K - K % BK; else 0)
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> A: array<vec4f>;
@group(0) @binding(2) var<storage, read> B: array<vec4f>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<storage, read_write> sum_out: array<vec4f>;   // splitk_reduce

override LAYOUT: u32 = 0u;   // 0 matmul, 1 matmul_bt, 2 matmul_at
override WG_M: u32 = 16u;    // gemm: threads along M (a multiple of 4)
override WG_N: u32 = 16u;    // gemm: threads along N (a multiple of 8)
override BK: u32 = 16u;      // gemm: k per tile step (8 or 16)
override FLAGS: u32 = 0u;    // gemm: bit 0 FAST, bits 1 - 3 UFETCH (gemm2), PAIR, INC
override VEC: bool = true;   // the rows of A as stored are whole vec4 (gemm: lda % 4 == 0, so
                             // K for matmul and matmul_bt, M or its padding for matmul_at;
                             // gemv: the row length of A): vec4 loads
override VECB: bool = VEC;   // gemm: the same for B (ldb % 4 == 0)
override KPART: bool = false; // gemm: some K range (K, a split-K slice) is not whole BK steps:
                             // its tiles in range along M and N still load their full steps
                             // without clamps (false: such a tile clamps every step; the host
                             // sets it only where needed, so the loop of the other pipelines
                             // stays as it was measured)
override EDGE: bool = false; // gemm: tiles past M (N) still load without clamps the operand read
                             // along M (N) in vec4 (A of LAYOUT 2 with VEC, B of LAYOUT 0 and 2
                             // with VECB): its column index is kept inside the row (at most
                             // ld - 4), and a column past M (N) only reaches outputs that are
                             // never stored (the host sets it only for shapes with such tiles)
override WGV: u32 = 256u;    // gemv, splitk_reduce: threads per workgroup
override GR: u32 = 1u;       // gemv_rows: rows per workgroup (<= 8)
override GQ: u32 = 4u;       // gemv_cols4: k-quads in flight per thread (at most 16)
override COMPACT: bool = false;  // gemm2: slice z of the dispatch's tile j goes to out as a BM x BN
                                 // block at (z * tiles of the dispatch + j) * BM * BN
override ACC: bool = false;  // out += the product (out read first) instead of out = the product;
                             // the host sets it only on the kernel that writes out (with split-K:
                             // splitk_reduce, the slices go to the workspace as they are)

override FAST: bool = (FLAGS & 1u) == 1u;  // interior tiles load without clamps
const TM: u32 = 8u;                      // micro-tile rows (two quads)
override NT: u32 = WG_M * WG_N;          // threads
override BM: u32 = WG_M * TM;            // tile rows
override BN: u32 = WG_N * 8u;            // tile columns
override T4A: u32 = BM / 4u;             // vec4 per k-row of A's tile
override T4B: u32 = BN / 4u;             // vec4 per k-row of B's tile
override QN: u32 = BK / 4u;              // k-quads per tile
override NBA: u32 = T4A * QN;            // 4x4 blocks of A's tile
override NBB: u32 = T4B * QN;            // 4x4 blocks of B's tile
override BPT: u32 = (NBA + NBB) / NT;    // blocks each thread moves per step (1 or 2;
                                         // 0: only threads lid < NBA + NBB move one)
override BUFA: u32 = BK * T4A;           // vec4 per buffer of A
override BUFB: u32 = BK * T4B;
override SZA: u32 = 2u * BUFA;           // two buffers
override SZB: u32 = 2u * BUFB;
override RED_N: u32 = GR * WGV;

var<workgroup> As: array<vec4f, SZA>;
var<workgroup> Bs: array<vec4f, SZB>;
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
    if (VECB) {
        return select(vec4f(0.0), B[select(0u, e >> 2u, ok)], ok);
    }
    return vec4f(b_at(e, ok), b_at(e + 1u, ok && n > 1u), b_at(e + 2u, ok && n > 2u), b_at(e + 3u, ok && n > 3u));
}

// Four consecutive elements e.. of A (B) as four scalar loads, unclamped: the fast tiles of
// an operand whose rows are not whole vec4.
fn a_quad(e: u32) -> vec4f {
    return vec4f(A[e >> 2u][e & 3u], A[(e + 1u) >> 2u][(e + 1u) & 3u], A[(e + 2u) >> 2u][(e + 2u) & 3u],
                 A[(e + 3u) >> 2u][(e + 3u) & 3u]);
}

fn b_quad(e: u32) -> vec4f {
    return vec4f(B[e >> 2u][e & 3u], B[(e + 1u) >> 2u][(e + 1u) & 3u], B[(e + 2u) >> 2u][(e + 2u) & 3u],
                 B[(e + 3u) >> 2u][(e + 3u) & 3u]);
}

// ---- gemm tile movement ---------------------------------------------------------------
// Block b of an operand's tile (t4 vec4 per k-row) maps to a vec4 column g (0 .. t4-1) and a
// k-quad q (0 .. QN-1):
//   contiguous along K:    g = b % 8 + 8 * (b / (8 QN)), q = (b / 8) % QN   (t4 % 8 == 0)
//   contiguous along M/N:  g = b % t4, q = b / t4

fn block_gq(b: u32, k_contiguous: bool, t4: u32) -> vec2u {
    if (k_contiguous) {
        return vec2u(b % 8u + 8u * (b / (8u * QN)), (b / 8u) % QN);
    }
    return vec2u(b % t4, b / t4);
}

fn transposed(v0: vec4f, v1: vec4f, v2: vec4f, v3: vec4f) -> array<vec4f, 4> {
    return array<vec4f, 4>(vec4f(v0.x, v1.x, v2.x, v3.x), vec4f(v0.y, v1.y, v2.y, v3.y),
                           vec4f(v0.z, v1.z, v2.z, v3.z), vec4f(v0.w, v1.w, v2.w, v3.w));
}

// The 4 vec4 of block b of A's tile at (m0, k0), as 4 k-rows of 4 tile columns. fast: the
// whole tile step is in range and VEC holds (FAST only): plain vec4 loads, no clamps.
fn load_a(b: u32, m0: u32, k0: u32, kend: u32, fast: bool) -> array<vec4f, 4> {
    let kc = LAYOUT != 2u;
    let gq = block_gq(b, kc, T4A);
    let m = m0 + 4u * gq.x;
    let k = k0 + 4u * gq.y;
    let ld = p.lda;
    if (kc) {                                     // A [M, K]: 4 rows x 4 k, transposed
        let e = m * ld + k;
        if (FAST && fast && !VEC) {
            return transposed(a_quad(e), a_quad(e + ld), a_quad(e + 2u * ld), a_quad(e + 3u * ld));
        }
        if (FAST && fast) {
            let i = e >> 2u;
            let s = ld >> 2u;
            return transposed(A[i], A[i + s], A[i + 2u * s], A[i + 3u * s]);
        }
        let ok = k < kend;
        let nk = kend - min(k, kend);
        return transposed(a_vec(e, ok && m < p.M, nk), a_vec(e + ld, ok && m + 1u < p.M, nk),
                          a_vec(e + 2u * ld, ok && m + 2u < p.M, nk),
                          a_vec(e + 3u * ld, ok && m + 3u < p.M, nk));
    }
    if (FAST && fast && VEC && EDGE) {            // A [K, M] read past M: kept in the row
        let i = (k * ld + min(m, ld - 4u)) >> 2u;
        let s = ld >> 2u;
        return array<vec4f, 4>(A[i], A[i + s], A[i + 2u * s], A[i + 3u * s]);
    }
    let e = k * ld + m;                           // A [K, M]: 4 k-rows of one vec4
    if (FAST && fast && !VEC) {
        return array<vec4f, 4>(a_quad(e), a_quad(e + ld), a_quad(e + 2u * ld), a_quad(e + 3u * ld));
    }
    if (FAST && fast) {
        let i = e >> 2u;
        let s = ld >> 2u;
        return array<vec4f, 4>(A[i], A[i + s], A[i + 2u * s], A[i + 3u * s]);
    }
    let ok = m < p.M;
    let n = p.M - min(m, p.M);
    return array<vec4f, 4>(a_vec(e, ok && k < kend, n), a_vec(e + ld, ok && k + 1u < kend, n),
                           a_vec(e + 2u * ld, ok && k + 2u < kend, n),
                           a_vec(e + 3u * ld, ok && k + 3u < kend, n));
}

// The same for B's tile at (n0, k0).
fn load_b(b: u32, n0: u32, k0: u32, kend: u32, fast: bool) -> array<vec4f, 4> {
    let kc = LAYOUT == 1u;
    let gq = block_gq(b, kc, T4B);
    let n = n0 + 4u * gq.x;
    let k = k0 + 4u * gq.y;
    let ld = p.ldb;
    if (kc) {                                     // B [N, K]
        let e = n * ld + k;
        if (FAST && fast && !VECB) {
            return transposed(b_quad(e), b_quad(e + ld), b_quad(e + 2u * ld), b_quad(e + 3u * ld));
        }
        if (FAST && fast) {
            let i = e >> 2u;
            let s = ld >> 2u;
            return transposed(B[i], B[i + s], B[i + 2u * s], B[i + 3u * s]);
        }
        let ok = k < kend;
        let nk = kend - min(k, kend);
        return transposed(b_vec(e, ok && n < p.N, nk), b_vec(e + ld, ok && n + 1u < p.N, nk),
                          b_vec(e + 2u * ld, ok && n + 2u < p.N, nk),
                          b_vec(e + 3u * ld, ok && n + 3u < p.N, nk));
    }
    if (FAST && fast && VECB && EDGE) {           // B [K, N] read past N: kept in the row
        let i = (k * ld + min(n, ld - 4u)) >> 2u;
        let s = ld >> 2u;
        return array<vec4f, 4>(B[i], B[i + s], B[i + 2u * s], B[i + 3u * s]);
    }
    let e = k * ld + n;                           // B [K, N]
    if (FAST && fast && !VECB) {
        return array<vec4f, 4>(b_quad(e), b_quad(e + ld), b_quad(e + 2u * ld), b_quad(e + 3u * ld));
    }
    if (FAST && fast) {
        let i = e >> 2u;
        let s = ld >> 2u;
        return array<vec4f, 4>(B[i], B[i + s], B[i + 2u * s], B[i + 3u * s]);
    }
    let ok = n < p.N;
    let c = p.N - min(n, p.N);
    return array<vec4f, 4>(b_vec(e, ok && k < kend, c), b_vec(e + ld, ok && k + 1u < kend, c),
                           b_vec(e + 2u * ld, ok && k + 2u < kend, c),
                           b_vec(e + 3u * ld, ok && k + 3u < kend, c));
}

fn put_a(base: u32, b: u32, w: array<vec4f, 4>) {
    let gq = block_gq(b, LAYOUT != 2u, T4A);
    let i = base + 4u * gq.y * T4A + gq.x;
    As[i] = w[0]; As[i + T4A] = w[1]; As[i + 2u * T4A] = w[2]; As[i + 3u * T4A] = w[3];
}

fn put_b(base: u32, b: u32, w: array<vec4f, 4>) {
    let gq = block_gq(b, LAYOUT == 1u, T4B);
    let i = base + 4u * gq.y * T4B + gq.x;
    Bs[i] = w[0]; Bs[i + T4B] = w[1]; Bs[i + 2u * T4B] = w[2]; Bs[i + 3u * T4B] = w[3];
}

// Block j of a step: A's blocks first (j < NBA), then B's. NBA is a multiple of 32, so the
// choice is uniform across a warp.
// fast: the tile is in range (TileAt.fast); with KPART the step's loads go unclamped only when
// its BK values of k are in range too (all steps but a partial last one).
fn load_blk(j: u32, m0: u32, n0: u32, k0: u32, kend: u32, fast: bool) -> array<vec4f, 4> {
    let full = fast && (!KPART || k0 + BK <= kend);
    if (j < NBA) {
        return load_a(j, m0, k0, kend, full);
    }
    return load_b(j - NBA, n0, k0, kend, full);
}

fn put_blk(buf: u32, j: u32, w: array<vec4f, 4>) {
    if (j < NBA) {
        put_a(buf * BUFA, j, w);
    } else {
        put_b(buf * BUFB, j - NBA, w);
    }
}

// What one thread moves per step (prefetched into registers during the products of the
// step before), blocks lid and lid + NT (BPT == 2).
struct Blocks {
    r0: array<vec4f, 4>,
    r1: array<vec4f, 4>,
}

fn fetch(lid: u32, m0: u32, n0: u32, k0: u32, kend: u32, fast: bool) -> Blocks {
    var r: Blocks;
    if (BPT == 0u) {              // fewer blocks than threads (BK 8 at 128x128): whole warps
        if (lid < NBA + NBB) {    // lid < NBA + NBB move one block, the others none
            r.r0 = load_blk(lid, m0, n0, k0, kend, fast);
        }
        return r;
    }
    r.r0 = load_blk(lid, m0, n0, k0, kend, fast);
    if (BPT == 2u) {
        r.r1 = load_blk(lid + NT, m0, n0, k0, kend, fast);
    }
    return r;
}

fn stash(buf: u32, lid: u32, r: Blocks) {
    if (BPT == 0u) {
        if (lid < NBA + NBB) {
            put_blk(buf, lid, r.r0);
        }
        return;
    }
    put_blk(buf, lid, r.r0);
    if (BPT == 2u) {
        put_blk(buf, lid + NT, r.r1);
    }
}

// Row r, columns q .. q+3 of the output (or of split-K slice at offset ob).
fn put(ob: u32, r: u32, q: u32, v: vec4f) {
    if (r >= p.M) {
        return;
    }
    let e = out_index(ob, r, q);
    if (q < p.N) { put1(e, v.x); }
    if (q + 1u < p.N) { put1(e + 1u, v.y); }
    if (q + 2u < p.N) { put1(e + 2u, v.z); }
    if (q + 3u < p.N) { put1(e + 3u, v.w); }
}

// The element of out at row r, column q: in a BM x BN block at ob with COMPACT (r and q
// are in a tile that starts at multiples of BM and BN).
fn out_index(ob: u32, r: u32, q: u32) -> u32 {
    if (COMPACT) {
        return ob + (r % BM) * BN + q % BN;
    }
    return ob + r * p.N + q;
}

// out[e] = x, or out[e] += x with ACC (every kernel's store of one output element).
fn put1(e: u32, x: f32) {
    if (ACC) { out[e] += x; } else { out[e] = x; }
}

// Where workgroup `id` (slice wz of split-K) works, shared by gemm and gemm2. Uniform
// across the workgroup (the loops and barriers depend on it), so the lane's place is a
// separate helper.
struct TileAt { m0: u32, n0: u32, kbeg: u32, kend: u32, nsteps: u32, fast: bool }
fn tile_at(id: u32, wz: u32) -> TileAt {
    // Grouped launch order: group_m tile rows at a time, walking down the rows first.
    let tiles_m = p.tiles / p.tiles_n;
    let per_group = p.group_m * p.tiles_n;
    let first_m = (id / per_group) * p.group_m;
    let gsize = min(tiles_m - first_m, p.group_m);
    let local = id % per_group;
    let m0 = (first_m + local % gsize) * BM;
    let n0 = (local / gsize) * BN;
    let kbeg = p.kbase + wz * p.kchunk;
    let kend = min(p.K, kbeg + p.kchunk);
    let nsteps = (kend - kbeg + BK - 1u) / BK;
    // the tile in range along M and N (or read past them within the rows, EDGE), and (without
    // KPART) every step's k: the clamps can go (uniform across the workgroup)
    let in_m = m0 + BM <= p.M || (EDGE && LAYOUT == 2u && VEC);
    let in_n = n0 + BN <= p.N || (EDGE && LAYOUT != 1u && VECB);
    let fast = in_m && in_n && (KPART || (kend - kbeg) % BK == 0u);
    return TileAt(m0, n0, kbeg, kend, nsteps, fast);
}
// The thread's column (x) and row (y) group: 32-lane blocks of 8 x 4 threads.
// PAIR: the lane bits shared so that lanes n and n^1 have the same row group (their A
// fragment reads one address) and lanes n and n^2 the same column group (B): x from lane
// bits 0, 2, 3 and y from bits 1, 4. A 16-byte workgroup read returns 128 bytes per
// cycle, so a warp's read costs 4 cycles, but 2 where such lane pairs share its addresses
// (NVIDIA); without PAIR (x from bits 0 - 2) only the A reads qualify.
override PAIR: bool = ((FLAGS >> 2u) & 1u) == 1u;
fn lane_xy(lid: u32) -> vec2u {
    let lane = lid % 32u;
    let w = lid / 32u;
    let wx = WG_N / 8u;
    var lx = lane % 8u;
    var ly = lane / 8u;
    if (PAIR) {
        lx = (lane & 1u) | ((lane >> 1u) & 6u);
        ly = ((lane >> 1u) & 1u) | ((lane >> 3u) & 2u);
    }
    return vec2u((w % wx) * 8u + lx, (w / wx) * 4u + ly);
}

// The tile loop of gemm and gemm2, around their products:
// tile_head before the first step (step 0's blocks into buffer 0); step_head before the
// products of step t (step t + 1's blocks into registers r); step_tail after them (r into
// the other buffer).
fn tile_head(lid: u32, at: TileAt, r: ptr<function, Blocks>) {
    *r = fetch(lid, at.m0, at.n0, at.kbeg, at.kend, at.fast);
    stash(0u, lid, *r);
    workgroupBarrier();
}

fn step_head(t: u32, lid: u32, at: TileAt, r: ptr<function, Blocks>) {
    if (UFETCH) {
        *r = fetch(lid, at.m0, at.n0, at.kbeg + min(t + 1u, at.nsteps - 1u) * BK, at.kend, at.fast);
    } else if (t + 1u < at.nsteps) {
        *r = fetch(lid, at.m0, at.n0, at.kbeg + (t + 1u) * BK, at.kend, at.fast);
    }
}

fn step_tail(t: u32, lid: u32, at: TileAt, r: Blocks) {
    if (t + 1u < at.nsteps) {
        stash((t + 1u) & 1u, lid, r);
    }
    workgroupBarrier();
}

@compute @workgroup_size(NT)
fn gemm(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
        @builtin(local_invocation_index) lid: u32) {
    let id = wid.x + wid.y * nwg.x;
    if (id >= p.tiles) {
        return;
    }
    let at = tile_at(id, wid.z);
    let xy = lane_xy(lid);
    let tx = xy.x;
    let ty = xy.y;

    var r: Blocks;
    tile_head(lid, at, &r);

    var c00 = vec4f(0.0); var c01 = vec4f(0.0); var c10 = vec4f(0.0); var c11 = vec4f(0.0);
    var c20 = vec4f(0.0); var c21 = vec4f(0.0); var c30 = vec4f(0.0); var c31 = vec4f(0.0);
    var c40 = vec4f(0.0); var c41 = vec4f(0.0); var c50 = vec4f(0.0); var c51 = vec4f(0.0);
    var c60 = vec4f(0.0); var c61 = vec4f(0.0); var c70 = vec4f(0.0); var c71 = vec4f(0.0);

    for (var t = 0u; t < at.nsteps; t++) {
        step_head(t, lid, at, &r);
        let ca = (t & 1u) * BUFA;
        let cbb = (t & 1u) * BUFB;
        for (var k = 0u; k < BK; k++) {
            let ra = ca + k * T4A;
            let rb = cbb + k * T4B;
            let a0 = As[ra + ty];
            let b0 = Bs[rb + tx];
            let b1 = Bs[rb + tx + WG_N];
            c00 = fma(vec4f(a0.x), b0, c00); c01 = fma(vec4f(a0.x), b1, c01);
            c10 = fma(vec4f(a0.y), b0, c10); c11 = fma(vec4f(a0.y), b1, c11);
            c20 = fma(vec4f(a0.z), b0, c20); c21 = fma(vec4f(a0.z), b1, c21);
            c30 = fma(vec4f(a0.w), b0, c30); c31 = fma(vec4f(a0.w), b1, c31);
            let a1 = As[ra + ty + WG_M];
            c40 = fma(vec4f(a1.x), b0, c40); c41 = fma(vec4f(a1.x), b1, c41);
            c50 = fma(vec4f(a1.y), b0, c50); c51 = fma(vec4f(a1.y), b1, c51);
            c60 = fma(vec4f(a1.z), b0, c60); c61 = fma(vec4f(a1.z), b1, c61);
            c70 = fma(vec4f(a1.w), b0, c70); c71 = fma(vec4f(a1.w), b1, c71);
        }
        step_tail(t, lid, at, r);
    }

    let ob = wid.z * p.out_slice;
    let rr0 = at.m0 + ty * 4u;
    let q0 = at.n0 + tx * 4u;
    let q1 = q0 + WG_N * 4u;
    put(ob, rr0, q0, c00); put(ob, rr0, q1, c01);
    put(ob, rr0 + 1u, q0, c10); put(ob, rr0 + 1u, q1, c11);
    put(ob, rr0 + 2u, q0, c20); put(ob, rr0 + 2u, q1, c21);
    put(ob, rr0 + 3u, q0, c30); put(ob, rr0 + 3u, q1, c31);
    let rr1 = rr0 + WG_M * 4u;
    put(ob, rr1, q0, c40); put(ob, rr1, q1, c41);
    put(ob, rr1 + 1u, q0, c50); put(ob, rr1 + 1u, q1, c51);
    put(ob, rr1 + 2u, q0, c60); put(ob, rr1 + 2u, q1, c61);
    put(ob, rr1 + 3u, q0, c70); put(ob, rr1 + 3u, q1, c71);
}

// ---- gemm2: gemm with the options that won on the H200 (bench/notes/matmul.md) -------
// The same tile, thread layout, tile movement and edges as gemm, BK 8 only, FAST,
// with 16 accumulators in an array, plus:
//   The 8 k of a step written out with fragment double-buffering (mac8): the fragments of
//     k-row k + 1 are read from workgroup memory before the 64 FMAs of k-row k (4 more vec4
//     live); no trip counter, every workgroup-memory read at a constant offset from two
//     registers, so the driver need not unroll anything to schedule the reads ahead.
//   gemm2_v4: out bound as array<vec4f> (N % 4 == 0, chosen by the host): each row quad of
//     the micro-tile is one vec4 store; the 8 lanes along N of a warp write 128 contiguous
//     bytes of one row per store (4 full rows per instruction) instead of 4 scalar stores.
//   UFETCH (FLAGS bit 1): step t + 1's prefetch is unconditional (the last step fetches its
//     own tile again, never stored), so the prefetch registers are not merged with their
//     old values at a branch (the driver copied them at every step).
override UFETCH: bool = ((FLAGS >> 1u) & 1u) == 1u;

@group(0) @binding(3) var<storage, read_write> out4: array<vec4f>;   // gemm2_v4

// A thread's operands of one k-row: rows 4ty.. and BM/2 + 4ty.. of A, columns 4tx.. and
// BN/2 + 4tx.. of B; ra and rb index the k-row's vec4 of this thread.
struct Frag {
    a0: vec4f,
    a1: vec4f,
    b0: vec4f,
    b1: vec4f,
}

fn frag(ra: u32, rb: u32) -> Frag {
    return Frag(As[ra], As[ra + WG_M], Bs[rb], Bs[rb + WG_N]);
}

// c[2 i + h]: micro-tile row i (0..3: a0, 4..7: a1), column quad h (b0, b1).
fn mac(c: ptr<function, array<vec4f, 16>>, f: Frag) {
    (*c)[0] = fma(vec4f(f.a0.x), f.b0, (*c)[0]); (*c)[1] = fma(vec4f(f.a0.x), f.b1, (*c)[1]);
    (*c)[2] = fma(vec4f(f.a0.y), f.b0, (*c)[2]); (*c)[3] = fma(vec4f(f.a0.y), f.b1, (*c)[3]);
    (*c)[4] = fma(vec4f(f.a0.z), f.b0, (*c)[4]); (*c)[5] = fma(vec4f(f.a0.z), f.b1, (*c)[5]);
    (*c)[6] = fma(vec4f(f.a0.w), f.b0, (*c)[6]); (*c)[7] = fma(vec4f(f.a0.w), f.b1, (*c)[7]);
    (*c)[8] = fma(vec4f(f.a1.x), f.b0, (*c)[8]); (*c)[9] = fma(vec4f(f.a1.x), f.b1, (*c)[9]);
    (*c)[10] = fma(vec4f(f.a1.y), f.b0, (*c)[10]); (*c)[11] = fma(vec4f(f.a1.y), f.b1, (*c)[11]);
    (*c)[12] = fma(vec4f(f.a1.z), f.b0, (*c)[12]); (*c)[13] = fma(vec4f(f.a1.z), f.b1, (*c)[13]);
    (*c)[14] = fma(vec4f(f.a1.w), f.b0, (*c)[14]); (*c)[15] = fma(vec4f(f.a1.w), f.b1, (*c)[15]);
}

// The products of the 8 k-rows of a step (BK 8), each fragment read one k-row ahead; ra, rb:
// this thread's vec4 of the step's first k-row.
fn mac8(c: ptr<function, array<vec4f, 16>>, ra: u32, rb: u32) {
    let f0 = frag(ra, rb);
    let f1 = frag(ra + T4A, rb + T4B);
    mac(c, f0);
    let f2 = frag(ra + 2u * T4A, rb + 2u * T4B);
    mac(c, f1);
    let f3 = frag(ra + 3u * T4A, rb + 3u * T4B);
    mac(c, f2);
    let f4 = frag(ra + 4u * T4A, rb + 4u * T4B);
    mac(c, f3);
    let f5 = frag(ra + 5u * T4A, rb + 5u * T4B);
    mac(c, f4);
    let f6 = frag(ra + 6u * T4A, rb + 6u * T4B);
    mac(c, f5);
    let f7 = frag(ra + 7u * T4A, rb + 7u * T4B);
    mac(c, f6);
    mac(c, f7);
}

// INC (FLAGS bit 3; at most one block per thread): interior tiles (at.fast) load the next
// step's block from a vec4 index computed once per tile and advanced by a constant per step,
// and store it at a place computed once, instead of deriving both from the block's row and
// k at every step (tens of instructions per step of every loading warp in the driver's
// code).
override INC: bool = ((FLAGS >> 3u) & 1u) == 1u && BPT <= 1u;
// The thread's block: its first vec4 at step 0 (i), row stride (s) and step (d) in the
// operand (in elements for an operand whose rows are not whole vec4), and its place in buffer
// 0 of the operand's tile (w).
struct Feed { i: u32, s: u32, d: u32, w: u32 }
fn feed_of(lid: u32, at: TileAt) -> Feed {
    if (lid < NBA) {
        let gq = block_gq(lid, LAYOUT != 2u, T4A);
        let m = at.m0 + 4u * gq.x;
        let k = at.kbeg + 4u * gq.y;
        let w = 4u * gq.y * T4A + gq.x;
        if (!VEC) {   // in elements
            if (LAYOUT != 2u) {
                return Feed(m * p.lda + k, p.lda, BK, w);
            }
            return Feed(k * p.lda + m, p.lda, BK * p.lda, w);
        }
        if (LAYOUT != 2u) {
            return Feed((m * p.lda + k) >> 2u, p.lda >> 2u, BK / 4u, w);
        }
        let mc = select(m, min(m, p.lda - 4u), EDGE);   // EDGE: kept in the row
        return Feed((k * p.lda + mc) >> 2u, p.lda >> 2u, BK * (p.lda >> 2u), w);
    }
    let gq = block_gq(min(lid - NBA, NBB - 1u), LAYOUT == 1u, T4B);
    let n = at.n0 + 4u * gq.x;
    let k = at.kbeg + 4u * gq.y;
    let w = 4u * gq.y * T4B + gq.x;
    if (!VECB) {
        if (LAYOUT == 1u) {
            return Feed(n * p.ldb + k, p.ldb, BK, w);
        }
        return Feed(k * p.ldb + n, p.ldb, BK * p.ldb, w);
    }
    if (LAYOUT == 1u) {
        return Feed((n * p.ldb + k) >> 2u, p.ldb >> 2u, BK / 4u, w);
    }
    let nc = select(n, min(n, p.ldb - 4u), EDGE);
    return Feed((k * p.ldb + nc) >> 2u, p.ldb >> 2u, BK * (p.ldb >> 2u), w);
}

// r into buffer buf at the thread's place (fast tiles only).
fn stash_inc(buf: u32, lid: u32, f: Feed, r: Blocks) {
    if (lid < NBA) {
        let i = buf * BUFA + f.w;
        As[i] = r.r0[0]; As[i + T4A] = r.r0[1]; As[i + 2u * T4A] = r.r0[2]; As[i + 3u * T4A] = r.r0[3];
    } else if (lid < NBA + NBB) {
        let i = buf * BUFB + f.w;
        Bs[i] = r.r0[0]; Bs[i + T4B] = r.r0[1]; Bs[i + 2u * T4B] = r.r0[2]; Bs[i + 3u * T4B] = r.r0[3];
    }
}

// Step t's block of this thread (fast tiles only; lid < NBA + NBB moves one).
fn fetch_inc(lid: u32, f: Feed, t: u32) -> Blocks {
    var r: Blocks;
    let i = f.i + t * f.d;
    if (lid < NBA) {
        if (!VEC && LAYOUT != 2u) {
            r.r0 = transposed(a_quad(i), a_quad(i + f.s), a_quad(i + 2u * f.s), a_quad(i + 3u * f.s));
        } else if (!VEC) {
            r.r0 = array<vec4f, 4>(a_quad(i), a_quad(i + f.s), a_quad(i + 2u * f.s), a_quad(i + 3u * f.s));
        } else if (LAYOUT != 2u) {
            r.r0 = transposed(A[i], A[i + f.s], A[i + 2u * f.s], A[i + 3u * f.s]);
        } else {
            r.r0 = array<vec4f, 4>(A[i], A[i + f.s], A[i + 2u * f.s], A[i + 3u * f.s]);
        }
    } else if (lid < NBA + NBB) {
        if (!VECB && LAYOUT == 1u) {
            r.r0 = transposed(b_quad(i), b_quad(i + f.s), b_quad(i + 2u * f.s), b_quad(i + 3u * f.s));
        } else if (!VECB) {
            r.r0 = array<vec4f, 4>(b_quad(i), b_quad(i + f.s), b_quad(i + 2u * f.s), b_quad(i + 3u * f.s));
        } else if (LAYOUT == 1u) {
            r.r0 = transposed(B[i], B[i + f.s], B[i + 2u * f.s], B[i + 3u * f.s]);
        } else {
            r.r0 = array<vec4f, 4>(B[i], B[i + f.s], B[i + 2u * f.s], B[i + 3u * f.s]);
        }
    }
    return r;
}

// Where a gemm2 thread's micro-tile goes: rows r0.. and r0 + BM/2.., columns q0.. and
// q0 + BN/2..; ok false: the workgroup is past the last tile.
struct Where {
    ob: u32,
    r0: u32,
    q0: u32,
    ok: bool,
}

// gemm's tile loop with the gemm2 options, accumulating into c.
fn gemm2_tile(wid: vec3u, nwg: vec3u, lid: u32, c: ptr<function, array<vec4f, 16>>) -> Where {
    let id = wid.x + wid.y * nwg.x + p.tile_base;
    if (id >= p.tiles) {
        return Where(0u, 0u, 0u, false);
    }
    let at = tile_at(id, wid.z);
    let xy = lane_xy(lid);
    let tx = xy.x;
    let ty = xy.y;

    var r: Blocks;
    tile_head(lid, at, &r);
    var feed: Feed;
    if (INC) {   // only then: the unused computation changed the driver's code of the other tiles
        feed = feed_of(lid, at);
    }
    let by_feed = INC && at.fast;   // uniform across the workgroup
    // KPART: the steps with all BK values of k in range load by the feed, a partial last one
    // clamped (a partial step after the loop instead was measured slower)
    let nfull = (at.kend - at.kbeg) / BK;
    for (var t = 0u; t < at.nsteps; t++) {
        if (by_feed && KPART) {
            let u = select(t + 1u, min(t + 1u, at.nsteps - 1u), UFETCH);   // the step to fetch
            if (u < nfull && (UFETCH || t + 1u < at.nsteps)) {
                r = fetch_inc(lid, feed, u);
            } else if (u < at.nsteps && (UFETCH || t + 1u < at.nsteps)) {
                r = fetch(lid, at.m0, at.n0, at.kbeg + u * BK, at.kend, false);   // a partial last step
            }
        } else if (by_feed) {
            if (UFETCH) {
                r = fetch_inc(lid, feed, min(t + 1u, at.nsteps - 1u));
            } else if (t + 1u < at.nsteps) {
                r = fetch_inc(lid, feed, t + 1u);
            }
        } else {
            step_head(t, lid, at, &r);
        }
        let ra = (t & 1u) * BUFA + ty;
        let rb = (t & 1u) * BUFB + tx;
        mac8(c, ra, rb);
        if (by_feed) {
            if (t + 1u < at.nsteps) {
                stash_inc((t + 1u) & 1u, lid, feed, r);
            }
            workgroupBarrier();
        } else {
            step_tail(t, lid, at, r);
        }
    }
    var ob = wid.z * p.out_slice;
    if (COMPACT) {   // the last round: its tiles fit one row of workgroups
        ob = (wid.z * nwg.x + wid.x) * BM * BN;
    }
    return Where(ob, at.m0 + ty * 4u, at.n0 + tx * 4u, true);
}

@compute @workgroup_size(NT)
fn gemm2(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
         @builtin(local_invocation_index) lid: u32) {
    var c: array<vec4f, 16>;
    let at = gemm2_tile(wid, nwg, lid, &c);
    if (!at.ok) {
        return;
    }
    let q1 = at.q0 + WG_N * 4u;
    let r1 = at.r0 + WG_M * 4u;   // constant indices only: c stays in registers
    put(at.ob, at.r0 + 0u, at.q0, c[0]); put(at.ob, at.r0 + 0u, q1, c[1]);
    put(at.ob, at.r0 + 1u, at.q0, c[2]); put(at.ob, at.r0 + 1u, q1, c[3]);
    put(at.ob, at.r0 + 2u, at.q0, c[4]); put(at.ob, at.r0 + 2u, q1, c[5]);
    put(at.ob, at.r0 + 3u, at.q0, c[6]); put(at.ob, at.r0 + 3u, q1, c[7]);
    put(at.ob, r1 + 0u, at.q0, c[8]); put(at.ob, r1 + 0u, q1, c[9]);
    put(at.ob, r1 + 1u, at.q0, c[10]); put(at.ob, r1 + 1u, q1, c[11]);
    put(at.ob, r1 + 2u, at.q0, c[12]); put(at.ob, r1 + 2u, q1, c[13]);
    put(at.ob, r1 + 3u, at.q0, c[14]); put(at.ob, r1 + 3u, q1, c[15]);
}

// Row r, columns q .. q+3 as one vec4 (N % 4 == 0: q < N means the whole vec4 is in range).
fn put4(ob: u32, r: u32, q: u32, v: vec4f) {
    if (r < p.M && q < p.N) {
        let i = out_index(ob, r, q) >> 2u;
        if (ACC) { out4[i] += v; } else { out4[i] = v; }
    }
}

@compute @workgroup_size(NT)
fn gemm2_v4(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
            @builtin(local_invocation_index) lid: u32) {
    var c: array<vec4f, 16>;
    let at = gemm2_tile(wid, nwg, lid, &c);
    if (!at.ok) {
        return;
    }
    let q1 = at.q0 + WG_N * 4u;
    let r1 = at.r0 + WG_M * 4u;   // constant indices only: c stays in registers
    put4(at.ob, at.r0 + 0u, at.q0, c[0]); put4(at.ob, at.r0 + 0u, q1, c[1]);
    put4(at.ob, at.r0 + 1u, at.q0, c[2]); put4(at.ob, at.r0 + 1u, q1, c[3]);
    put4(at.ob, at.r0 + 2u, at.q0, c[4]); put4(at.ob, at.r0 + 2u, q1, c[5]);
    put4(at.ob, at.r0 + 3u, at.q0, c[6]); put4(at.ob, at.r0 + 3u, q1, c[7]);
    put4(at.ob, r1 + 0u, at.q0, c[8]); put4(at.ob, r1 + 0u, q1, c[9]);
    put4(at.ob, r1 + 1u, at.q0, c[10]); put4(at.ob, r1 + 1u, q1, c[11]);
    put4(at.ob, r1 + 2u, at.q0, c[12]); put4(at.ob, r1 + 2u, q1, c[13]);
    put4(at.ob, r1 + 3u, at.q0, c[14]); put4(at.ob, r1 + 3u, q1, c[15]);
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
        put1(wid.z * p.out_slice + r0 + lid, red[lid * WGV]);
    }
}

// out[c] = sum_k B[k] * A[k, c] over k in [kbeg, kend) for 4 * C4 columns c per workgroup,
// A [K, M] (M columns), k in quads: the range runs in rounds of GQ G quads, in which group g
// takes the GQ consecutive quads from r0 + g GQ (all of them in flight, one accumulator
// each); the quads after the last whole round one by one (group g: r0 + g, r0 + g + G, ...).
// A quad's 4 coefficients are one vec4 of B, its rows 4 rows of A. So the groups numbered
// first read a round's first rows (faster on the H200 than quads G apart). kbeg is a
// multiple of 4 (split-K chunks are); a last partial quad of the range is done row by row. The sum over the G groups: a tree in
// workgroup memory here, or subgroup shuffles and one barrier in gemv_cols4_sg
// (matmul_subgroups.wgsl), which shares cols4_partial and cols4_put.
@compute @workgroup_size(WGV)
fn gemv_cols4(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
              @builtin(local_invocation_index) lid: u32) {
    let wg = wid.x + wid.y * nwg.x;
    if (wg >= p.tiles) {
        return;
    }
    let C4 = p.N;
    let G = WGV / C4;
    let c = lid % C4;
    let g = lid / C4;
    redv[lid] = cols4_partial(wg, wid.z, c, g);
    workgroupBarrier();
    for (var h = G / 2u; h > 0u; h >>= 1u) {
        if (g < h) {
            redv[lid] += redv[lid + h * C4];
        }
        workgroupBarrier();
    }
    if (g == 0u) {
        cols4_put(wg, wid.z, c, redv[c]);
    }
}

// Thread (c, g)'s share of gemv_cols4: the sum over its k-quads of vec4 column c of
// workgroup wg's block, in K-slice z.
fn cols4_partial(wg: u32, z: u32, c: u32, g: u32) -> vec4f {
    let kbeg = z * p.kchunk;
    let kend = min(p.K, kbeg + p.kchunk);
    let G = WGV / p.N;
    let col = (wg * p.N + c) * 4u;
    let ok = col < p.M;
    let n = p.M - min(col, p.M);
    let s = p.M;
    var acc: array<vec4f, 16>;             // GQ of them in use
    let qend = kend / 4u;                  // quads wholly inside the range end here
    var r0 = kbeg / 4u;                    // the round's first quad
    loop {
        if (r0 + GQ * G > qend) {
            break;
        }
        var w: array<vec4f, 16>;
        var x: array<vec4f, 64>;
        for (var j = 0u; j < GQ; j++) {    // every load first: GQ quads in flight
            let qj = r0 + g * GQ + j;
            w[j] = B[qj];
            let e = 4u * qj * s + col;
            x[4u * j] = a_vec(e, ok, n);
            x[4u * j + 1u] = a_vec(e + s, ok, n);
            x[4u * j + 2u] = a_vec(e + 2u * s, ok, n);
            x[4u * j + 3u] = a_vec(e + 3u * s, ok, n);
        }
        for (var j = 0u; j < GQ; j++) {
            acc[j] = fma(vec4f(w[j].x), x[4u * j], acc[j]);
            acc[j] = fma(vec4f(w[j].y), x[4u * j + 1u], acc[j]);
            acc[j] = fma(vec4f(w[j].z), x[4u * j + 2u], acc[j]);
            acc[j] = fma(vec4f(w[j].w), x[4u * j + 3u], acc[j]);
        }
        r0 += GQ * G;
    }
    for (var q = r0 + g; q < qend; q += G) {   // less than a whole round left
        let w0 = B[q];
        let e0 = 4u * q * s + col;
        acc[0] = fma(vec4f(w0.x), a_vec(e0, ok, n), acc[0]);
        acc[0] = fma(vec4f(w0.y), a_vec(e0 + s, ok, n), acc[0]);
        acc[0] = fma(vec4f(w0.z), a_vec(e0 + 2u * s, ok, n), acc[0]);
        acc[0] = fma(vec4f(w0.w), a_vec(e0 + 3u * s, ok, n), acc[0]);
    }
    var sum = acc[0];
    for (var j = 1u; j < GQ; j++) {
        sum += acc[j];
    }
    for (var k = max(4u * qend, kbeg) + g; k < kend; k += G) {   // the partial quad
        sum = fma(vec4f(B[k >> 2u][k & 3u]), a_vec(k * s + col, ok, n), sum);
    }
    return sum;
}

// Vec4 column c of workgroup wg's block, summed over K (slice z of split-K), into out.
fn cols4_put(wg: u32, z: u32, c: u32, v: vec4f) {
    let col = (wg * p.N + c) * 4u;
    if (col >= p.M) {
        return;
    }
    let n = p.M - col;
    let e = z * p.out_slice + col;
    put1(e, v.x);
    if (n > 1u) { put1(e + 1u, v.y); }
    if (n > 2u) { put1(e + 2u, v.z); }
    if (n > 3u) { put1(e + 3u, v.w); }
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
    if (ACC) { s += sum_out[i]; }   // after the slices, as one product added to out
    sum_out[i] = s;
}

// The last round's tiles: vec4 i of the COMPACT blocks (p.out_slice tiles from p.tile_base,
// p.K slices) = the sum of its slices in order, into out at the tile's place (tile_at with
// the gemm's WG_M and WG_N: only the tile's shape and the launch order place it). N need not
// be a multiple of 4: scalar stores.
@group(0) @binding(2) var<storage, read_write> tile_out: array<f32>;
fn tile_put(e: u32, x: f32) {
    if (ACC) { tile_out[e] += x; } else { tile_out[e] = x; }
}
@compute @workgroup_size(WGV)
fn splitk_reduce_tiles(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
                       @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * WGV + lid;
    let per_tile = BM * BN / 4u;
    if (i >= p.out_slice * per_tile) {
        return;
    }
    var s = A[i];
    for (var z = 1u; z < p.K; z++) {
        s += A[z * p.out_slice * per_tile + i];
    }
    let at = tile_at(p.tile_base + i / per_tile, 0u);
    let l = i % per_tile;
    let r = at.m0 + l / (BN / 4u);
    let q = at.n0 + (l % (BN / 4u)) * 4u;
    if (r >= p.M) {
        return;
    }
    let e = r * p.N + q;
    if (q < p.N) { tile_put(e, s.x); }
    if (q + 1u < p.N) { tile_put(e + 1u, s.y); }
    if (q + 2u < p.N) { tile_put(e + 2u, s.z); }
    if (q + 3u < p.N) { tile_put(e + 3u, s.w); }
}

// ---- matmul_bt through a transposed copy of B ----------------------------------------

// t_out [K, N] = A [N, K] transposed (p.M = N rows of A, p.K = K), so that matmul_bt can run
// as matmul, whose loads of B are contiguous along N.
// N and K multiples of 4 (the host picks transpose_pad otherwise): a workgroup moves a 64 x 64
// block as 16 x 16 blocks of 4 x 4, one per thread: 4 vec4 loads along K, transposed in
// registers, 4 vec4 stores along N; a warp takes 8 k-quads x 4 row-quads, so its loads cover
// 128 contiguous bytes of 4 rows and its stores 64 contiguous bytes of 8 rows (full 32-byte
// sectors both ways).
@compute @workgroup_size(256)
fn transpose_nk(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
                @builtin(local_invocation_index) lid: u32) {
    let id = wid.x + wid.y * nwg.x;
    if (id >= p.tiles) {
        return;
    }
    let rows = p.M;
    let cols = p.K;
    let lane = lid % 32u;
    let w = lid / 32u;
    let kq = (id % p.tiles_n) * 16u + (w % 2u) * 8u + lane % 8u;    // k-quad
    let nq = (id / p.tiles_n) * 16u + (w / 2u) * 4u + lane / 8u;    // row quad
    let c4 = cols / 4u;
    let r4 = rows / 4u;
    if (kq >= c4 || nq >= r4) {
        return;
    }
    let i = 4u * nq * c4 + kq;
    let v = transposed(A[i], A[i + c4], A[i + 2u * c4], A[i + 3u * c4]);
    let o = 4u * kq * r4 + nq;
    sum_out[o] = v[0];
    sum_out[o + r4] = v[1];
    sum_out[o + 2u * r4] = v[2];
    sum_out[o + 3u * r4] = v[3];
}

// Any N and K: t_out [p.N, ldb] = A [N, K] transposed, each row of the copy padded with zeros
// from N to p.ldb (a multiple of 4), so that the product reads the copy in vec4 (a padded
// column only reaches rows of out that are never stored), and rows K .. p.N - 1 zero (p.N >=
// K: the host rounds K up to whole tile steps when both operands are copies). A
// workgroup moves a 32 x 32 block through workgroup memory: coalesced scalar reads along K,
// coalesced writes along N.
var<workgroup> blk: array<f32, 1056>;   // 32 x 33: a column of the block spans all banks
@compute @workgroup_size(256)
fn transpose_pad(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
                 @builtin(local_invocation_index) lid: u32) {
    let id = wid.x + wid.y * nwg.x;
    if (id >= p.tiles) {
        return;
    }
    let rows = p.M;
    let cols = p.K;
    let r0 = (id / p.tiles_n) * 32u;
    let c0 = (id % p.tiles_n) * 32u;
    let x = lid % 32u;
    let y = lid / 32u;
    for (var j = 0u; j < 32u; j += 8u) {
        let r = r0 + y + j;
        let c = c0 + x;
        let ok = r < rows && c < cols;
        let e = select(0u, r * cols + c, ok);
        blk[(y + j) * 33u + x] = select(0.0, A[e >> 2u][e & 3u], ok);
    }
    workgroupBarrier();
    for (var j = 0u; j < 32u; j += 8u) {
        let c = c0 + y + j;                  // a row of the copy
        let r = r0 + x;                      // its column
        if (c < p.N && r < p.ldb) {
            tile_out[c * p.ldb + r] = blk[x * 33u + y + j];
        }
    }
}

// t_out [p.N, ldb] = A [rows, cols] with each row padded with zeros from cols to p.ldb (a
// multiple of 4) and rows rows .. p.N - 1 zero (as transpose_pad's): an operand of
// matmul_at's kernel whose rows are not whole vec4 (p.M = rows, p.K = cols). One vec4 of the
// copy per invocation, written through sum_out (the same binding), its four elements read as
// coalesced scalars: a quarter of the invocations and index divisions of one element each.
@compute @workgroup_size(256)
fn pad_rows(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
            @builtin(local_invocation_index) lid: u32) {
    let i = (wid.x + wid.y * nwg.x) * 256u + lid;
    let w = p.ldb / 4u;
    if (i >= p.N * w) {
        return;
    }
    let c = (i % w) * 4u;                  // < cols: p.ldb is cols rounded up to 4
    let r = i / w;
    let ok = r < p.M;
    let e = select(0u, r * p.K + c, ok);
    let n = select(0u, p.K - c, ok);
    sum_out[i] = vec4f(a_at(e, ok), a_at(e + 1u, n > 1u), a_at(e + 2u, n > 2u), a_at(e + 3u, n > 3u));
}
