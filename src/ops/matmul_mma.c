/* Matrix products on the GPU's matrix units: the f16 precisions of wgml_precision
   (wgml_matmul_options.precision, wgml_context_desc.matmul_precision) where the device has
   f16 subgroup matrices (wgml_adapter_info.matrix_m); src/kernels/matmul_mma.wgsl holds
   the kernels and the scheme. src/ops/matmul.c validates the call and sends here the
   products this file takes (wgml__mma_takes); every other product runs its f32 kernels.

   A product converts its operands into f16 copies in the engine's scratch, whole tiles
   with zero padding (A [Mp, Kp], B [Kp, Np]; with F16X3 a low part of each beside it,
   after the rows' and columns' scales are found), then multiplies the copies: once for
   F16, twice for F16X3 (the low terms, then the high ones). An F16 operand whose copy is
   still in its slot from an earlier product (copy_current) is not converted again. */
#include "internal.h"

#include <string.h>

enum { LAYOUT_NT = 1, LAYOUT_TN = 2 };

/* The uniform block of matmul_mma.wgsl (Params there). */
typedef struct mma_params {
    uint32_t M, N, K, tiles_n;
    uint32_t tiles, Kp, Np, by_row;
    uint32_t rows, cols, rows_p, cols_p;
    uint32_t sr, sc, scale_at, lda;
    uint32_t b_at, ld, hi_at, lo_at;
    uint32_t splits, kchunk, pad0, pad1;
} mma_params;

wgml_precision wgml__precision_of(const wgml_context *ctx, const wgml_matmul_options *opts)
{
    wgml_precision p = opts ? opts->precision : WGML_PRECISION_DEFAULT;
    if (p == WGML_PRECISION_DEFAULT) p = ctx->matmul_precision;
    return p == WGML_PRECISION_DEFAULT ? WGML_PRECISION_F32 : p;
}

static uint64_t round_up(uint64_t n, uint64_t m) { return (n + m - 1) / m * m; }

/* gemm_mma's tile: 2 x 2 subgroups of 4 x 4 result matrices; k in steps of two matrices;
   and the copies padded to them. */
static uint32_t tile_m(const wgml_adapter_info *in) { return 8u * in->matrix_m; }
static uint32_t tile_n(const wgml_adapter_info *in) { return 8u * in->matrix_n; }
static uint32_t step_k(const wgml_adapter_info *in) { return 2u * in->matrix_k; }

/* Bytes of the larger f16 copy: A [Mp, Kp] or B [Kp, Np], twice that with F16X3 (the low
   parts beside the high ones). */
static uint64_t copy_bytes(const wgml_adapter_info *in, bool split, uint32_t M, uint32_t N, uint32_t K)
{
    uint64_t kp = round_up(K, step_k(in)), a = round_up(M, tile_m(in)) * kp, b = kp * round_up(N, tile_n(in));
    return (split ? 4u : 2u) * (a > b ? a : b);
}

/* Workgroup memory of gemm_mma: its f16 blocks (rows padded by 8 f16) and one result
   matrix per subgroup. */
static uint64_t smem_of(const wgml_adapter_info *in)
{
    return ((uint64_t)tile_m(in) * (step_k(in) + 8u) + (uint64_t)step_k(in) * (tile_n(in) + 8u)) * 2u +
           4u * in->matrix_m * in->matrix_n * 4u;
}

bool wgml__mma_takes(const wgml_context *ctx, wgml_precision p, const wgml_tensor *b, uint32_t M, uint32_t N, uint32_t K)
{
    const wgml_adapter_info *in = &ctx->info;
    bool split = p == WGML_PRECISION_F16X3;
    /* gemm_mma loads 8 f16 at a time (a word): k-steps of a multiple of 8; each of its
       4 x subgroup_max_size invocations stages at most 4 words of each block (A's tile_m x
       step_k, B's step_k x tile_n) */
    uint64_t words = (uint64_t)tile_m(in) * step_k(in) / 8, words_b = (uint64_t)step_k(in) * tile_n(in) / 8;
    return p != WGML_PRECISION_F32 && in->matrix_m && M > 1 && N > 1 && (b->dtype == WGML_F32 || b->dtype == WGML_F16) &&
           step_k(in) % 8 == 0 && words <= 16u * in->subgroup_max_size && words_b <= 16u * in->subgroup_max_size &&
           4u * in->subgroup_max_size <= in->max_invocations_per_workgroup &&
           4u * in->subgroup_max_size <= in->max_workgroup_size_x && smem_of(in) <= in->max_workgroup_storage_size &&
           copy_bytes(in, split, M, N, K) <= ctx->limits.maxStorageBufferBindingSize;
}

/* What a slot holds after convert made the F16 copy of t that prm describes into `copy`
   (the slot's write count included: read right after the conversion). */
static wgml__derived copy_record(const wgml_tensor *t, const mma_params *prm, wgml__arg copy)
{
    return (wgml__derived){ .src = t->id, .written = t->written, .slot_id = copy.tensor->id,
                            .slot_written = copy.tensor->written, .rows = prm->rows, .cols = prm->cols,
                            .form = { prm->rows_p, prm->cols_p, prm->sr, prm->sc, prm->ld, prm->hi_at } };
}

/* The slot holds that copy already (neither t nor the slot written since): the products
   of one input with several weights (q, k and v of x; a gate and an up projection) and
   the weight gradients of such products convert it once. */
static bool copy_current(const wgml__derived *d, const wgml__derived *want)
{
    return d->src == want->src && d->written == want->written && d->slot_id == want->slot_id &&
           d->slot_written == want->slot_written && d->rows == want->rows && d->cols == want->cols &&
           !memcmp(d->form, want->form, sizeof d->form);
}

/* One operand's f16 copy [rows_p, cols_p] from t, element (r, c) at r * sr + c * sc, into
   copy at prm.hi_at with row stride prm.ld; with split its lines' scales first into
   scales[scale_at ..], and its low part at prm.lo_at. A source read along r (sc != 1)
   goes through blocks of TT x TT (mma_convert_t), so that its reads are neighbours. */
static wgml_status convert(wgml_engine *e, const wgml_tensor *t, mma_params prm, bool split, wgml__arg copy, wgml__arg scales)
{
    enum { TT = 32 };
    wgml_context *ctx = e->ctx;
    double src16 = t->dtype == WGML_F16;
    uint32_t gx, gy;
    if (split) {
        wgml__kernel k = { .file = "matmul_mma", .entry = "mma_absmax", .layout = "urw", .matrix = true, .nconst = 1,
                           .constants = { { "SRC16", src16 } } };
        WGML_CHECK(wgml__grid(ctx, prm.by_row ? prm.rows : prm.cols, &gx, &gy));
        wgml__arg args[2] = { wgml__t(t), scales };
        WGML_CHECK(wgml__dispatch(e, &k, &prm, sizeof prm, args, 2, gx, gy, 1));
    }
    bool across = prm.sc != 1;
    wgml__kernel k = { .file = "matmul_mma", .entry = across ? "mma_convert_t" : "mma_convert", .layout = "urwr", .matrix = true,
                       .nconst = 2, .constants = { { "SRC16", src16 }, { "SPLIT", split } } };
    uint64_t groups = across ? wgml__ceil_div(prm.rows_p, TT) * wgml__ceil_div(prm.cols_p, TT)
                             : wgml__ceil_div((uint64_t)prm.rows_p * prm.cols_p / 8, 256);   /* 8 per invocation */
    WGML_CHECK(wgml__grid(ctx, groups, &gx, &gy));
    wgml__arg args[3] = { wgml__t(t), copy, scales };
    return wgml__dispatch(e, &k, &prm, sizeof prm, args, 3, gx, gy, 1);
}

/* Split-K: a product whose tiles leave compute units idle or a last round of them part
   full runs its k in slices of at least SPLIT_MIN_K values, at most SPLIT_MAX of them, each
   slice's partial result in the engine's split-K scratch (at most SPLIT_MAX_BYTES), summed
   by mma_reduce. The weight gradients of a model's linear layers (M and N its widths, K
   the tokens) are such products: 2048 x 768 x 8192 has 96 tiles of 128 x 128, for 132 SMs.
   plan_split picks the number of slices by a model of the time, in steps of one value of k
   of a workgroup alone on a unit: the rounds of one workgroup per unit times a slice's
   values of k (a unit runs two of gemm_mma's workgroups at about the rate of one), plus,
   when sliced, the reduction's dispatch (SPLIT_FIXED_K) and each slice's partial result
   written and read back (SPLIT_BYTES_PER_K bytes costing one step). Fitted on the H100:
   bench/notes/matmul.md. */
#define SPLIT_MIN_K 512
#define SPLIT_MAX 16
#define SPLIT_MAX_BYTES (256ull << 20)
#define SPLIT_BYTES_PER_K 80000.0
#define SPLIT_FIXED_K 128.0

/* The slices of k (prm->splits, prm->kchunk values each) of a product of prm->tiles tiles
   over kp values of k. */
static void plan_split(const wgml_context *ctx, mma_params *prm, uint32_t kp)
{
    uint32_t units = wgml__units_of(ctx->profile), bk = step_k(&ctx->info);
    uint64_t best = 1;
    uint64_t limit = ctx->limits.maxStorageBufferBindingSize < SPLIT_MAX_BYTES ? ctx->limits.maxStorageBufferBindingSize
                                                                               : SPLIT_MAX_BYTES;
    double best_cost = 0, partial_k = 2.0 * 4.0 * prm->M * prm->N / SPLIT_BYTES_PER_K;
    for (uint64_t s = 1; s <= SPLIT_MAX && (s == 1 || s <= kp / SPLIT_MIN_K); s++) {
        if (s > 1 && 4ull * s * prm->M * prm->N > limit) break;
        uint64_t kchunk = round_up(wgml__ceil_div(kp, s), bk), rounds = wgml__ceil_div((uint64_t)prm->tiles * s, units);
        double cost = (double)rounds * (double)kchunk + (s > 1 ? SPLIT_FIXED_K + (double)s * partial_k : 0.0);
        if (s == 1 || cost < best_cost) best = s, best_cost = cost;
    }
    prm->kchunk = (uint32_t)round_up(wgml__ceil_div(kp, best), bk);
    prm->splits = (uint32_t)wgml__ceil_div(kp, prm->kchunk);
}

/* One gemm_mma over the copies: the first kp values of k of A's rows (row stride lda) and
   of B's rows from b_at; split: unscaled, low: the low terms (also divided by 2^10). Split
   over k (plan_split), the slices' partial results are then summed into out. */
static wgml_status product(wgml_engine *e, mma_params prm, uint32_t kp, uint32_t lda, uint32_t b_at, bool split, bool low,
                           bool acc, wgml__arg a, wgml__arg b, wgml__arg scales, const wgml_tensor *out)
{
    const wgml_adapter_info *in = &e->ctx->info;
    prm.Kp = kp, prm.lda = lda, prm.b_at = b_at;
    plan_split(e->ctx, &prm, kp);
    bool sliced = prm.splits > 1;
    wgml__arg part;
    WGML_CHECK(wgml__scratch(e, WGML__SCRATCH_MATMUL, sliced ? 4ull * prm.splits * prm.M * prm.N : 16, &part));
    wgml__kernel k = { .file = "matmul_mma", .entry = "gemm_mma", .layout = "urrrww", .matrix = true, .nconst = 5,
                       .constants = { { "SG", in->subgroup_max_size }, { "SPLIT", split }, { "LOW", low },
                                      { "ACC", acc && !sliced }, { "SPLITK", sliced } } };
    uint32_t gx, gy;
    WGML_CHECK(wgml__grid(e->ctx, (uint64_t)prm.tiles * prm.splits, &gx, &gy));
    wgml__arg args[5] = { a, b, scales, wgml__t(out), part };
    WGML_CHECK(wgml__dispatch(e, &k, &prm, sizeof prm, args, 5, gx, gy, 1));
    if (!sliced) return WGML_OK;
    wgml__kernel r = { .file = "matmul_mma", .entry = "mma_reduce", .layout = "urw", .matrix = true, .nconst = 1,
                       .constants = { { "ACC", acc } } };
    WGML_CHECK(wgml__grid(e->ctx, wgml__ceil_div((uint64_t)prm.M * prm.N, 256), &gx, &gy));
    wgml__arg rargs[2] = { part, wgml__t(out) };
    return wgml__dispatch(e, &r, &prm, sizeof prm, rargs, 2, gx, gy, 1);
}

wgml_status wgml__mma_matmul(wgml_engine *e, int layout, uint32_t M, uint32_t N, uint32_t K, const wgml_tensor *a,
                             const wgml_tensor *b, wgml_tensor *out, bool acc, wgml_precision p)
{
    const wgml_adapter_info *in = &e->ctx->info;
    bool split = p == WGML_PRECISION_F16X3;
    uint32_t bm = tile_m(in), bn = tile_n(in);
    uint32_t Mp = (uint32_t)round_up(M, bm), Np = (uint32_t)round_up(N, bn), Kp = (uint32_t)round_up(K, step_k(in));
    uint32_t lda = layout == LAYOUT_TN ? M : K, ldb = layout == LAYOUT_NT ? K : N;
    /* F16X3: A [Mp, 2 Kp] = [Ahi | Alo] and B [2 Kp, Np] = [Blo ; Bhi] */
    uint32_t parts = split ? 2 : 1;
    wgml__arg ah, bh, scales;
    WGML_CHECK(wgml__scratch(e, WGML__SCRATCH_MMA_AH, 2ull * parts * Mp * Kp, &ah));
    WGML_CHECK(wgml__scratch(e, WGML__SCRATCH_MMA_BH, 2ull * parts * Kp * Np, &bh));
    WGML_CHECK(wgml__scratch(e, WGML__SCRATCH_MMA_SCALES, 4ull * (M + N), &scales));
    /* A: row m, column k (scaled per row); B: row k, column n (scaled per column) */
    mma_params pa = { .rows = M, .cols = K, .rows_p = Mp, .cols_p = Kp, .sr = layout == LAYOUT_TN ? 1 : lda,
                      .sc = layout == LAYOUT_TN ? lda : 1, .scale_at = 0, .by_row = 1, .ld = parts * Kp, .hi_at = 0,
                      .lo_at = Kp };
    mma_params pb = { .rows = K, .cols = N, .rows_p = Kp, .cols_p = Np, .sr = layout == LAYOUT_NT ? 1 : ldb,
                      .sc = layout == LAYOUT_NT ? ldb : 1, .scale_at = M, .by_row = 0, .ld = Np,
                      .hi_at = split ? Kp * Np : 0, .lo_at = 0 };
    /* F16X3's copies depend on both operands' scales: made anew each time */
    wgml__derived *da = &e->derived[WGML__SCRATCH_MMA_AH], *db = &e->derived[WGML__SCRATCH_MMA_BH];
    wgml__derived want_a = copy_record(a, &pa, ah), want_b = copy_record(b, &pb, bh);
    if (split || !copy_current(da, &want_a)) {
        WGML_CHECK(convert(e, a, pa, split, ah, scales));
        *da = split ? (wgml__derived){ 0 } : copy_record(a, &pa, ah);
    }
    if (split || !copy_current(db, &want_b)) {
        WGML_CHECK(convert(e, b, pb, split, bh, scales));
        *db = split ? (wgml__derived){ 0 } : copy_record(b, &pb, bh);
    }

    mma_params prm = { .M = M, .N = N, .K = K, .tiles_n = Np / bn, .tiles = (Mp / bm) * (Np / bn), .Np = Np };
    if (!split) return product(e, prm, Kp, Kp, 0, false, false, acc, ah, bh, scales, out);
    WGML_CHECK(product(e, prm, 2 * Kp, 2 * Kp, 0, true, true, acc, ah, bh, scales, out));
    return product(e, prm, Kp, 2 * Kp, Kp * Np, true, false, true, ah, bh, scales, out);
}
