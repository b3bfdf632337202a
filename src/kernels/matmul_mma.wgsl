// Matrix products on the GPU's matrix units (subgroup matrices) for the f16 precisions of
// wgml_precision: out[M, N] = A @ B with A and B f32 (B may be f16) in the three layouts of
// matmul.wgsl (LAYOUT 0: A [M, K], B [K, N]; 1: B stored [N, K]; 2: A stored [K, M]).
// Host: src/ops/matmul_mma.c. The host compiles this file after a header of its own:
//   enable f16; enable subgroups; enable chromium_experimental_subgroup_matrix;
//   const SM: u32 = ...; const SN: u32 = ...; const SK: u32 = ...;
// where SM x SK times SK x SN is the adapter's f16 -> f32 subgroup-matrix shape (queried,
// never assumed: 8 x 8 x 8 on lavapipe, 16 x 16 x 16 on NVIDIA).
//
// The steps (F16: mma_convert, gemm_mma; F16X3: mma_absmax, mma_convert, gemm_mma twice):
//   mma_absmax   the largest magnitude of each row of A and each column of B (over k), as
//                the power of two that brings it into [2^14, 2^15): one workgroup per line.
//   mma_convert  A into an f16 copy [Mp, Kp] and B into [Kp, Np], row-major whatever the
//                layout, zero up to Mp, Kp, Np (whole tiles, so the product needs no bounds);
//                with SPLIT (F16X3) each value first scaled, into a high and a low part
//                laid out so that one product of the copies is the low terms' sum:
//                A [Mp, 2 Kp] = [Ahi | Alo], B [2 Kp, Np] = [Blo ; Bhi]. A transposed
//                operand (read along the copy's columns) goes through mma_convert_t.
//   gemm_mma     a product of the f16 copies: per step of 2 SK values of k, the workgroup
//                copies its blocks of A and B into workgroup memory in 16-byte loads (each
//                step's loaded into registers during the products of the step before; rows
//                padded so that the matrix loads meet no bank conflicts), then
//                each subgroup multiplies 4 x 4 result matrices from there. The results pass
//                through workgroup memory (their layout inside a subgroup is the
//                implementation's) to be unscaled (SPLIT), bounds-checked and stored or added
//                to out (ACC). F16X3 runs it twice: over all 2 Kp columns of the copies
//                (Ahi Blo + Alo Bhi, LOW), then over Ahi and Bhi alone, added to that.
//                A product of few tiles and a long k runs in slices of k (SPLITK, the
//                host's plan_split), each slice's result into partial [splits][M][N];
//   mma_reduce   then sums the slices in order into out (adding out with ACC).
// The steps that brought gemm_mma to its present shape (16-byte staging, the next step's
// loads issued before this step's products, padded rows), each measured, and the variants
// that lost are in bench/notes/matmul.md ("Products on the matrix units").
//
// SPLIT false (wgml_precision F16): each element of A and B is rounded to f16 (beyond f16's
//   range +-inf, as a cast in PyTorch), the products are summed in f32.
// SPLIT true (F16X3): row m of A is scaled by its power of two ra[m], column n of B by
//   rb[n]; each scaled x is split into hi = f16(x) and lo = f16((x - hi) * 2^10) (x - hi is
//   at most one f16 ulp of hi, so lo stays in range), and
//       out = (Ahi Blo + Alo Bhi) / 2^10 / ra[m] / rb[n]  (+ out with ACC), then
//       out += Ahi Bhi / ra[m] / rb[n],
//   dropping Alo Blo (about 2^-21 of each product): each element carried to about 22 bits.

struct Params {
    M: u32, N: u32, K: u32, tiles_n: u32,   // the product (K: the operands'), its tiles
    tiles: u32, Kp: u32, Np: u32, by_row: u32,   // the values of k it sums, B's row stride
    rows: u32, cols: u32, rows_p: u32, cols_p: u32,   // a conversion: the source's rows x cols,
    sr: u32, sc: u32, scale_at: u32, lda: u32,        // the copy's, strides, where its scales go;
    b_at: u32, ld: u32, hi_at: u32, lo_at: u32,       // a product: A's row stride, B's start;
                                                      // a conversion: the copy's row stride, parts' starts
    splits: u32, kchunk: u32, pad0: u32, pad1: u32,   // a product split over k: slices, values of k in each
}

@group(0) @binding(0) var<uniform> u: Params;

override SG: u32 = 32u;
override SRC16: bool = false;   // the source of mma_absmax / mma_convert(_t) is f16
override SPLIT: bool = false;   // mma_convert: high and low parts; gemm_mma: unscaled by ra, rb
override LOW: bool = false;     // and by 2^10 (the low terms)
override ACC: bool = false;
override SPLITK: bool = false;  // gemm_mma: each slice of k writes its own partial result (mma_reduce sums them)

// ---- mma_absmax, mma_convert ------------------------------------------------------------

@group(0) @binding(1) var<storage, read> src: array<u32>;   // f32 bits, or two f16 per word (SRC16)

const LO: f32 = 1024.0;   // 2^10: the low part's scale
const F16_MAX: f32 = 65504.0;
const F16_OVERFLOW: f32 = 65520.0;   // the smallest magnitude that rounds past F16_MAX

// Element (r, c) of the source: src[r * sr + c * sc] (0 outside rows x cols).
fn src_at(r: u32, c: u32) -> f32 {
    if (r >= u.rows || c >= u.cols) { return 0.0; }
    let i = r * u.sr + c * u.sc;
    if (SRC16) { return unpack2x16float(src[i >> 1u])[i & 1u]; }
    return bitcast<f32>(src[i]);
}

// x rounded to f16, +-inf beyond its range (a conversion out of range is undefined in WGSL)
fn to_f16(x: f32) -> f16 {
    if (abs(x) >= F16_OVERFLOW) { return f16(sign(x) * F16_MAX) * 2.0h; }
    return f16(x);
}

// The power of two that brings magnitude mx into [2^14, 2^15) (1 for 0 and non-finite mx).
fn scale_of(mx: f32) -> f32 {
    if (!(mx > 0.0) || mx > 3.4e38) { return 1.0; }
    return ldexp(1.0, clamp(15 - frexp(mx).exp, -126, 127));
}

const AW = 64u;
var<workgroup> part: array<f32, AW>;
@group(0) @binding(2) var<storage, read_write> scales: array<f32>;

// scales[scale_at + line] for line = workgroup (a row r when by_row, else a column c): the
// scale of the line's largest magnitude over the other index.
@compute @workgroup_size(AW)
fn mma_absmax(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
              @builtin(local_invocation_index) lid: u32) {
    let line = wid.x + wid.y * nwg.x;
    let n = select(u.rows, u.cols, u.by_row != 0u);
    let lines = select(u.cols, u.rows, u.by_row != 0u);
    if (line >= lines) { return; }
    var mx = 0.0;
    for (var j = lid; j < n; j += AW) {
        mx = max(mx, abs(select(src_at(j, line), src_at(line, j), u.by_row != 0u)));
    }
    part[lid] = mx;
    for (var s = AW / 2u; s > 0u; s >>= 1u) {
        workgroupBarrier();
        if (lid < s) { part[lid] = max(part[lid], part[lid + s]); }
    }
    if (lid == 0u) { scales[u.scale_at + line] = scale_of(part[0]); }
}

@group(0) @binding(2) var<storage, read_write> hi: array<vec4<u32>>;   // 8 f16 per element
@group(0) @binding(3) var<storage, read> line_scale: array<f32>;   // ra [M], then rb [N]

// x rounded to f16 (to_f16), as 4 f16 in two words.
fn pack4(x: vec4f) -> vec2<u32> {
    return vec2<u32>(bitcast<u32>(vec2<f16>(to_f16(x.x), to_f16(x.y))), bitcast<u32>(vec2<f16>(to_f16(x.z), to_f16(x.w))));
}

// x, the source's elements (r, c .. c + 3), times their lines' scales: row r's (by_row),
// else those of columns c .. c + 3.
fn scaled4(r: u32, c: u32, x: vec4f) -> vec4f {
    if (u.by_row != 0u) { return x * line_scale[u.scale_at + r]; }
    let s = u.scale_at + c;
    return x * vec4f(line_scale[s], line_scale[s + 1u], line_scale[s + 2u], line_scale[s + 3u]);
}

// Elements (r, c .. c + 7) of the copy (c a multiple of 8, as cols_p, ld, hi_at and lo_at),
// from the source's x and y (c .. c + 3, c + 4 .. c + 7): rounded to f16 into hi at hi_at,
// row stride ld; SPLIT: scaled by line_scale[scale_at + r] (by_row) or [scale_at + c ..]
// first, the high part at hi_at, the low part at lo_at.
fn put_copy8(r: u32, c: u32, x: vec4f, y: vec4f) {
    let at = (r * u.ld + c) / 8u;
    if (!SPLIT) {
        hi[u.hi_at / 8u + at] = vec4<u32>(pack4(x), pack4(y));
        return;
    }
    let xs = scaled4(r, c, x);
    let ys = scaled4(r, c + 4u, y);
    var xh: vec4f;
    var yh: vec4f;
    for (var e = 0u; e < 4u; e++) {
        xh[e] = f32(to_f16(xs[e]));
        yh[e] = f32(to_f16(ys[e]));
    }
    hi[u.hi_at / 8u + at] = vec4<u32>(pack4(xh), pack4(yh));
    hi[u.lo_at / 8u + at] = vec4<u32>(pack4((xs - xh) * LO), pack4((ys - yh) * LO));
}

// The source's elements (r, c .. c + 3).
fn src4(r: u32, c: u32) -> vec4f { return vec4f(src_at(r, c), src_at(r, c + 1u), src_at(r, c + 2u), src_at(r, c + 3u)); }

// The copy [rows_p, cols_p] of a source whose elements follow each other along c (sc = 1):
// 8 neighbouring elements of a row per invocation (one 16-byte store).
@compute @workgroup_size(256)
fn mma_convert(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
    let i = gid.x + gid.y * nwg.x * 256u;
    let eights = u.cols_p / 8u;
    if (i >= u.rows_p * eights) { return; }
    let r = i / eights;
    let c = 8u * (i % eights);
    put_copy8(r, c, src4(r, c), src4(r, c + 4u));
}

// The same for a source whose elements follow each other along r (a transposed operand):
// one workgroup per TT x TT block, read along r into workgroup memory and written along c,
// 8 elements per invocation, so that both the reads and the writes of neighbouring
// invocations are neighbours.
const TT = 32u;
var<workgroup> block: array<f32, TT * (TT + 1u)>;   // [c][r], rows padded against bank conflicts

@compute @workgroup_size(256)
fn mma_convert_t(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
                 @builtin(local_invocation_index) lid: u32) {
    let t = wid.x + wid.y * nwg.x;
    let blocks_c = (u.cols_p + TT - 1u) / TT;
    if (t >= blocks_c * ((u.rows_p + TT - 1u) / TT)) { return; }
    let r0 = (t / blocks_c) * TT;
    let c0 = (t % blocks_c) * TT;
    let x = lid % TT;
    for (var y = lid / TT; y < TT; y += 256u / TT) {
        block[y * (TT + 1u) + x] = src_at(r0 + x, c0 + y);
    }
    workgroupBarrier();
    // TT x TT / 8 = 128 runs of 8 along c: the first 128 invocations write one each
    let r = r0 + lid / (TT / 8u);
    let q = 8u * (lid % (TT / 8u));
    let c = c0 + q;
    if (lid < TT * TT / 8u && r < u.rows_p && c < u.cols_p) {
        let b = q * (TT + 1u) + r - r0;
        let w = TT + 1u;
        put_copy8(r, c, vec4f(block[b], block[b + w], block[b + 2u * w], block[b + 3u * w]),
                  vec4f(block[b + 4u * w], block[b + 5u * w], block[b + 6u * w], block[b + 7u * w]));
    }
}

// ---- the products ---------------------------------------------------------------------------

@group(0) @binding(1) var<storage, read> Av: array<vec4<u32>>;   // [Mp, lda] as 8 f16 per vec4
@group(0) @binding(2) var<storage, read> Bv: array<vec4<u32>>;   // [Kp, Np] from b_at
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
@group(0) @binding(5) var<storage, read_write> partial: array<f32>;   // SPLITK: [splits][M][N]

alias LM = subgroup_matrix_left<f16, SK, SM>;
alias RMB = subgroup_matrix_right<f16, SN, SK>;
alias RM = subgroup_matrix_result<f32, SN, SM>;

// A workgroup of 2 x 2 subgroups of SG lanes (SG: the adapter's largest subgroup size, which
// a workgroup using subgroup matrices must be a multiple of) owns a tile of out, each
// subgroup 4 x 4 result matrices (a BM x BN tile). A device whose subgroups are smaller
// than SG runs more subgroups than 4; the extra ones only load and wait at the barriers.
// Kp and lda are multiples of BK, Np of BN, Mp of BM.
const BM = 8u * SM;
const BN = 8u * SN;
const BK = 2u * SK;
override WG: u32 = 4u * SG;
// The blocks' rows are padded by 16 bytes: a matrix load reads 16 bytes of each of 8 rows at
// once, which fall into different banks only when the row stride is an odd multiple of 16
// bytes (unpadded, A's rows of 64 bytes put 4 of the 8 into one bank, B's of 256 all 8).
const SA = BK + 8u;   // row strides of the blocks in f16
const SB = BN + 8u;
var<workgroup> As: array<f16, BM * SA>;        // gemm_mma's blocks: [BM][BK] (row stride SA)
var<workgroup> Bs: array<f16, BK * SB>;        // [BK][BN] (row stride SB)
var<workgroup> Cs: array<f32, 4u * SM * SN>;   // one result matrix per subgroup

// The 8 f16 of w into As (or Bs) from index at.
fn put8(into_a: bool, at: u32, w: vec4<u32>) {
    for (var j = 0u; j < 4u; j++) {
        let h = bitcast<vec2<f16>>(w[j]);
        if (into_a) {
            As[at + 2u * j] = h.x;
            As[at + 2u * j + 1u] = h.y;
        } else {
            Bs[at + 2u * j] = h.x;
            Bs[at + 2u * j + 1u] = h.y;
        }
    }
}

// Staging: the blocks of a step are BM * BK / 8 and BK * BN / 8 words of 16 bytes, word
// lid + j WG (j < 4) of each the invocation's (the host checks that 4 WG cover them). The
// next step's words are loaded into registers before this step's products and stored after
// them, so that the loads' latency overlaps the products.

// Word j of the invocation in A's block of step k0 (zero from k end on, or past the block).
fn word_a(k0: u32, kend: u32, m0: u32, j: u32, lid: u32) -> vec4<u32> {
    let c = lid + j * WG;
    if (c >= BM * BK / 8u || k0 >= kend) { return vec4<u32>(); }
    return Av[((m0 + c / (BK / 8u)) * u.lda + k0) / 8u + c % (BK / 8u)];
}

fn word_b(k0: u32, kend: u32, n0: u32, j: u32, lid: u32) -> vec4<u32> {
    let c = lid + j * WG;
    if (c >= BK * BN / 8u || k0 >= kend) { return vec4<u32>(); }
    return Bv[(u.b_at + (k0 + c / (BN / 8u)) * u.Np + n0) / 8u + c % (BN / 8u)];
}

// Word j of the invocation into As (Bs): row c / (BK / 8), f16 (c % (BK / 8)) * 8 on.
fn stage_a(j: u32, lid: u32, w: vec4<u32>) {
    let c = lid + j * WG;
    if (c < BM * BK / 8u) { put8(true, (c / (BK / 8u)) * SA + (c % (BK / 8u)) * 8u, w); }
}

fn stage_b(j: u32, lid: u32, w: vec4<u32>) {
    let c = lid + j * WG;
    if (c < BK * BN / 8u) { put8(false, (c / (BN / 8u)) * SB + (c % (BN / 8u)) * 8u, w); }
}

@compute @workgroup_size(WG)
fn gemm_mma(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
            @builtin(local_invocation_index) lid: u32, @builtin(subgroup_id) sgid: u32,
            @builtin(subgroup_invocation_id) lane: u32, @builtin(subgroup_size) sgsize: u32) {
    let t = wid.x + wid.y * nwg.x;
    if (t >= u.tiles * u.splits) { return; }
    let tile = t % u.tiles;
    let slice = t / u.tiles;   // k from slice * kchunk, at most kchunk of it
    let kbeg = slice * u.kchunk;
    let kend = min(kbeg + u.kchunk, u.Kp);
    let m0 = (tile / u.tiles_n) * BM;
    let n0 = (tile % u.tiles_n) * BN;
    let busy = sgid < 4u;
    let sm = sgid % 2u;
    let sn = sgid / 2u % 2u;
    // the 4 x 4 results (and the staged words) in named variables: an array of matrices
    // indexed in a loop is kept in local memory by some compilers
    var c00: RM; var c01: RM; var c02: RM; var c03: RM;
    var c10: RM; var c11: RM; var c12: RM; var c13: RM;
    var c20: RM; var c21: RM; var c22: RM; var c23: RM;
    var c30: RM; var c31: RM; var c32: RM; var c33: RM;
    var a0 = word_a(kbeg, kend, m0, 0u, lid); var a1 = word_a(kbeg, kend, m0, 1u, lid);
    var a2 = word_a(kbeg, kend, m0, 2u, lid); var a3 = word_a(kbeg, kend, m0, 3u, lid);
    var b0 = word_b(kbeg, kend, n0, 0u, lid); var b1 = word_b(kbeg, kend, n0, 1u, lid);
    var b2 = word_b(kbeg, kend, n0, 2u, lid); var b3 = word_b(kbeg, kend, n0, 3u, lid);
    for (var k0 = kbeg; k0 < kend; k0 += BK) {
        stage_a(0u, lid, a0); stage_a(1u, lid, a1); stage_a(2u, lid, a2); stage_a(3u, lid, a3);
        stage_b(0u, lid, b0); stage_b(1u, lid, b1); stage_b(2u, lid, b2); stage_b(3u, lid, b3);
        workgroupBarrier();
        let kn = k0 + BK;
        a0 = word_a(kn, kend, m0, 0u, lid); a1 = word_a(kn, kend, m0, 1u, lid);
        a2 = word_a(kn, kend, m0, 2u, lid); a3 = word_a(kn, kend, m0, 3u, lid);
        b0 = word_b(kn, kend, n0, 0u, lid); b1 = word_b(kn, kend, n0, 1u, lid);
        b2 = word_b(kn, kend, n0, 2u, lid); b3 = word_b(kn, kend, n0, 3u, lid);
        if (busy) {
            for (var ks = 0u; ks < BK; ks += SK) {
                let ao = sm * 4u * SM * SA + ks;
                let bo = ks * SB + sn * 4u * SN;
                let x0 = subgroupMatrixLoad<LM>(&As, ao + 0u * SM * SA, false, SA);
                let x1 = subgroupMatrixLoad<LM>(&As, ao + 1u * SM * SA, false, SA);
                let x2 = subgroupMatrixLoad<LM>(&As, ao + 2u * SM * SA, false, SA);
                let x3 = subgroupMatrixLoad<LM>(&As, ao + 3u * SM * SA, false, SA);
                let y0 = subgroupMatrixLoad<RMB>(&Bs, bo + 0u * SN, false, SB);
                let y1 = subgroupMatrixLoad<RMB>(&Bs, bo + 1u * SN, false, SB);
                let y2 = subgroupMatrixLoad<RMB>(&Bs, bo + 2u * SN, false, SB);
                let y3 = subgroupMatrixLoad<RMB>(&Bs, bo + 3u * SN, false, SB);
                c00 = subgroupMatrixMultiplyAccumulate(x0, y0, c00);
                c01 = subgroupMatrixMultiplyAccumulate(x0, y1, c01);
                c02 = subgroupMatrixMultiplyAccumulate(x0, y2, c02);
                c03 = subgroupMatrixMultiplyAccumulate(x0, y3, c03);
                c10 = subgroupMatrixMultiplyAccumulate(x1, y0, c10);
                c11 = subgroupMatrixMultiplyAccumulate(x1, y1, c11);
                c12 = subgroupMatrixMultiplyAccumulate(x1, y2, c12);
                c13 = subgroupMatrixMultiplyAccumulate(x1, y3, c13);
                c20 = subgroupMatrixMultiplyAccumulate(x2, y0, c20);
                c21 = subgroupMatrixMultiplyAccumulate(x2, y1, c21);
                c22 = subgroupMatrixMultiplyAccumulate(x2, y2, c22);
                c23 = subgroupMatrixMultiplyAccumulate(x2, y3, c23);
                c30 = subgroupMatrixMultiplyAccumulate(x3, y0, c30);
                c31 = subgroupMatrixMultiplyAccumulate(x3, y1, c31);
                c32 = subgroupMatrixMultiplyAccumulate(x3, y2, c32);
                c33 = subgroupMatrixMultiplyAccumulate(x3, y3, c33);
            }
        }
        workgroupBarrier();
    }
    let cb = min(sgid, 3u) * SM * SN;
    let mb = m0 + sm * 4u * SM;
    let nb = n0 + sn * 4u * SN;
    emit(busy, slice, cb, mb + 0u * SM, nb + 0u * SN, lane, sgsize, c00);
    emit(busy, slice, cb, mb + 0u * SM, nb + 1u * SN, lane, sgsize, c01);
    emit(busy, slice, cb, mb + 0u * SM, nb + 2u * SN, lane, sgsize, c02);
    emit(busy, slice, cb, mb + 0u * SM, nb + 3u * SN, lane, sgsize, c03);
    emit(busy, slice, cb, mb + 1u * SM, nb + 0u * SN, lane, sgsize, c10);
    emit(busy, slice, cb, mb + 1u * SM, nb + 1u * SN, lane, sgsize, c11);
    emit(busy, slice, cb, mb + 1u * SM, nb + 2u * SN, lane, sgsize, c12);
    emit(busy, slice, cb, mb + 1u * SM, nb + 3u * SN, lane, sgsize, c13);
    emit(busy, slice, cb, mb + 2u * SM, nb + 0u * SN, lane, sgsize, c20);
    emit(busy, slice, cb, mb + 2u * SM, nb + 1u * SN, lane, sgsize, c21);
    emit(busy, slice, cb, mb + 2u * SM, nb + 2u * SN, lane, sgsize, c22);
    emit(busy, slice, cb, mb + 2u * SM, nb + 3u * SN, lane, sgsize, c23);
    emit(busy, slice, cb, mb + 3u * SM, nb + 0u * SN, lane, sgsize, c30);
    emit(busy, slice, cb, mb + 3u * SM, nb + 1u * SN, lane, sgsize, c31);
    emit(busy, slice, cb, mb + 3u * SM, nb + 2u * SN, lane, sgsize, c32);
    emit(busy, slice, cb, mb + 3u * SM, nb + 3u * SN, lane, sgsize, c33);
}

// The result matrix c of rows mb.., columns nb.. through workgroup memory at cb into out:
// unscaled (SPLIT, LOW), bounds-checked, added to out (ACC). Every invocation calls it; busy
// (the subgroup owns results) is uniform in each subgroup.
fn emit(busy: bool, slice: u32, cb: u32, mb: u32, nb: u32, lane: u32, sgsize: u32, c: RM) {
    if (busy) { subgroupMatrixStore(&Cs, cb, c, false, SN); }
    workgroupBarrier();
    if (busy) {
        for (var e = lane; e < SM * SN; e += sgsize) {
            let m = mb + e / SN;
            let n = nb + e % SN;
            if (m < u.M && n < u.N) {
                var v = Cs[cb + e];
                if (LOW) { v /= LO; }
                if (SPLIT) { v = v / line_scale[m] / line_scale[u.M + n]; }
                let o = m * u.N + n;
                if (SPLITK) {
                    partial[slice * u.M * u.N + o] = v;
                } else {
                    if (ACC) { v += out[o]; }
                    out[o] = v;
                }
            }
        }
    }
    workgroupBarrier();
}

// out[i] = the sum of the slices' partial results for element i (+ out[i] with ACC), in
// slice order: gemm_mma's partial is bound at binding 1 (read as src), out at binding 2.
@group(0) @binding(2) var<storage, read_write> sum_out: array<f32>;

@compute @workgroup_size(256)
fn mma_reduce(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
    let i = gid.x + gid.y * nwg.x * 256u;
    let n = u.M * u.N;
    if (i >= n) { return; }
    var v = bitcast<f32>(src[i]);
    for (var s = 1u; s < u.splits; s++) { v += bitcast<f32>(src[s * n + i]); }
    if (ACC) { v += sum_out[i]; }
    sum_out[i] = v;
}
