/* Matrix products on the GPU's matrix units: the f16 precisions of wgml_precision
   (wgml_matmul_options.precision, wgml_context_desc.matmul_precision) where the device has
   f16 subgroup matrices (wgml_adapter_info.matrix_m); src/kernels/matmul_mma.wgsl holds
   the kernels and the scheme. src/ops/matmul.c validates the call and sends here the
   products this file takes (wgml__mma_takes); every other product runs its f32 kernels.

   A product converts its operands into f16 copies in the engine's scratch, whole tiles
   with zero padding (A [Mp, Kp], B [Kp, Np]; with F16X3 a low part of each too, after the
   rows' and columns' scales are found), then multiplies the copies. */
#include "internal.h"

enum { LAYOUT_NT = 1, LAYOUT_TN = 2 };

/* The uniform block of matmul_mma.wgsl (Params there). */
typedef struct mma_params {
    uint32_t M, N, K, tiles_n;
    uint32_t tiles, Kp, Np, by_row;
    uint32_t rows, cols, rows_p, cols_p;
    uint32_t sr, sc, scale_at, pad;
} mma_params;

wgml_precision wgml__precision_of(const wgml_context *ctx, const wgml_matmul_options *opts)
{
    wgml_precision p = opts ? opts->precision : WGML_PRECISION_DEFAULT;
    if (p == WGML_PRECISION_DEFAULT) p = ctx->matmul_precision;
    return p == WGML_PRECISION_DEFAULT ? WGML_PRECISION_F32 : p;
}

static uint64_t round_up(uint64_t n, uint64_t m) { return (n + m - 1) / m * m; }

/* The tile of each product kernel: 2 x 2 subgroups of 4 x 4 result matrices (gemm_mma), of
   2 x 2 (gemm_mma_split); k in steps of two matrices; and the copies padded to them. */
static uint32_t tile_m(const wgml_adapter_info *in, bool split) { return (split ? 4u : 8u) * in->matrix_m; }
static uint32_t tile_n(const wgml_adapter_info *in, bool split) { return (split ? 4u : 8u) * in->matrix_n; }
static uint32_t step_k(const wgml_adapter_info *in) { return 2u * in->matrix_k; }

/* Bytes of the larger f16 copy (each part): A [Mp, Kp] or B [Kp, Np]. */
static uint64_t copy_bytes(const wgml_adapter_info *in, bool split, uint32_t M, uint32_t N, uint32_t K)
{
    uint64_t kp = round_up(K, step_k(in)), a = round_up(M, tile_m(in, split)) * kp, b = kp * round_up(N, tile_n(in, split));
    return 2u * (a > b ? a : b);
}

/* Workgroup memory of the product kernel: gemm_mma's f16 blocks and one result matrix per
   subgroup; gemm_mma_split's result matrices and their low parts. */
static uint64_t smem_of(const wgml_adapter_info *in, bool split)
{
    uint64_t result = 4u * in->matrix_m * in->matrix_n * 4u;
    return split ? 2u * result : (uint64_t)(tile_m(in, false) + tile_n(in, false)) * step_k(in) * 2u + result;
}

bool wgml__mma_takes(const wgml_context *ctx, wgml_precision p, const wgml_tensor *b, uint32_t M, uint32_t N, uint32_t K)
{
    const wgml_adapter_info *in = &ctx->info;
    bool split = p == WGML_PRECISION_F16X3;
    /* gemm_mma loads 8 f16 at a time: k-steps of a multiple of 8 */
    return p != WGML_PRECISION_F32 && in->matrix_m && M > 1 && N > 1 && (b->dtype == WGML_F32 || b->dtype == WGML_F16) &&
           step_k(in) % 8 == 0 && 4u * in->subgroup_max_size <= in->max_invocations_per_workgroup &&
           4u * in->subgroup_max_size <= in->max_workgroup_size_x && smem_of(in, split) <= in->max_workgroup_storage_size &&
           copy_bytes(in, split, M, N, K) <= ctx->limits.maxStorageBufferBindingSize;
}

/* One operand's f16 copy (and low part) [rows_p, cols_p] from t, element (r, c) at
   r * sr + c * sc; with split its lines' scales first into scales[scale_at ..]. */
static wgml_status convert(wgml_engine *e, const wgml_tensor *t, mma_params prm, bool split, wgml__arg hi, wgml__arg lo,
                           wgml__arg scales)
{
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
    if (!split) {
        wgml__kernel k = { .file = "matmul_mma", .entry = "mma_convert", .layout = "urw", .matrix = true, .nconst = 1,
                           .constants = { { "SRC16", src16 } } };
        WGML_CHECK(wgml__grid(ctx, wgml__ceil_div((uint64_t)prm.rows_p * prm.cols_p, 256), &gx, &gy));
        wgml__arg args[2] = { wgml__t(t), hi };
        return wgml__dispatch(e, &k, &prm, sizeof prm, args, 2, gx, gy, 1);
    }
    wgml__kernel k = { .file = "matmul_mma", .entry = "mma_split", .layout = "urwwr", .matrix = true, .nconst = 1,
                       .constants = { { "SRC16", src16 } } };
    WGML_CHECK(wgml__grid(ctx, wgml__ceil_div((uint64_t)prm.rows_p * prm.cols_p, 256), &gx, &gy));
    wgml__arg args[4] = { wgml__t(t), hi, lo, scales };
    return wgml__dispatch(e, &k, &prm, sizeof prm, args, 4, gx, gy, 1);
}

wgml_status wgml__mma_matmul(wgml_engine *e, int layout, uint32_t M, uint32_t N, uint32_t K, const wgml_tensor *a,
                             const wgml_tensor *b, wgml_tensor *out, bool acc, wgml_precision p)
{
    wgml_context *ctx = e->ctx;
    const wgml_adapter_info *in = &ctx->info;
    bool split = p == WGML_PRECISION_F16X3;
    uint32_t bm = tile_m(in, split), bn = tile_n(in, split);
    uint32_t Mp = (uint32_t)round_up(M, bm), Np = (uint32_t)round_up(N, bn), Kp = (uint32_t)round_up(K, step_k(in));
    uint32_t lda = layout == LAYOUT_TN ? M : K, ldb = layout == LAYOUT_NT ? K : N;
    wgml__arg ah, bh, al, bl, scales;
    WGML_CHECK(wgml__scratch(e, WGML__SCRATCH_MMA_AH, 2ull * Mp * Kp, &ah));
    WGML_CHECK(wgml__scratch(e, WGML__SCRATCH_MMA_BH, 2ull * Kp * Np, &bh));
    WGML_CHECK(wgml__scratch(e, WGML__SCRATCH_MMA_SCALES, 4ull * (M + N), &scales));
    if (split) {
        WGML_CHECK(wgml__scratch(e, WGML__SCRATCH_MMA_AL, 2ull * Mp * Kp, &al));
        WGML_CHECK(wgml__scratch(e, WGML__SCRATCH_MMA_BL, 2ull * Kp * Np, &bl));
    } else {
        al = ah;   /* bound read-only beside the high parts, never read */
        bl = bh;
    }
    /* A [Mp, Kp]: row m, column k; B [Kp, Np]: row k, column n (scaled per column) */
    mma_params pa = { .rows = M, .cols = K, .rows_p = Mp, .cols_p = Kp, .sr = layout == LAYOUT_TN ? 1 : lda,
                      .sc = layout == LAYOUT_TN ? lda : 1, .scale_at = 0, .by_row = 1 };
    mma_params pb = { .rows = K, .cols = N, .rows_p = Kp, .cols_p = Np, .sr = layout == LAYOUT_NT ? 1 : ldb,
                      .sc = layout == LAYOUT_NT ? ldb : 1, .scale_at = M, .by_row = 0 };
    WGML_CHECK(convert(e, a, pa, split, ah, al, scales));
    WGML_CHECK(convert(e, b, pb, split, bh, bl, scales));

    uint32_t tn = Np / bn;
    uint64_t tiles = (uint64_t)(Mp / bm) * tn;
    mma_params prm = { .M = M, .N = N, .K = K, .tiles_n = tn, .tiles = (uint32_t)tiles, .Kp = Kp, .Np = Np };
    wgml__kernel k = { .file = "matmul_mma", .entry = split ? "gemm_mma_split" : "gemm_mma", .layout = "urrrrrw", .matrix = true,
                       .nconst = 3,
                       .constants = { { "SG", in->subgroup_max_size }, { "SPLIT", split }, { "ACC", acc } } };
    uint32_t gx, gy;
    WGML_CHECK(wgml__grid(ctx, tiles, &gx, &gy));
    wgml__arg args[6] = { ah, bh, al, bl, scales, wgml__t(out) };
    return wgml__dispatch(e, &k, &prm, sizeof prm, args, 6, gx, gy, 1);
}
