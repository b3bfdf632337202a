/* Matrix products: wgml_matmul (a @ b), wgml_matmul_bt (a @ b^T), wgml_matmul_at (a^T @ b).
   Kernels: src/kernels/matmul.wgsl, whose top comment explains them. bench/notes/matmul.md
   holds the measurements behind the rules below and what else was tried.

   A call is validated (M, N, K come from the tensors' shapes, see wgml.h), planned, then
   recorded; a call that fails records nothing. The rules read the adapter's limits and its
   profile (src/profile.c: compute units, and the thresholds and model constants the rules
   were fitted with), and an engine's tuning (src/ops/matmul_tuning.h) may force any choice
   a rule makes on some adapter, so that tests reach every path on any adapter.

   Decode products (M == 1 or N == 1) run a matrix-vector kernel that reads each weight
   once: gemv_rows for a matrix stored along K, its rows per workgroup chosen by K;
   gemv_cols4 for a matrix stored along its columns, its vec4 columns per workgroup chosen by
   width, in wider workgroups on a GPU for mid-sized widths, its sum over k-groups by
   subgroup shuffles where the adapter's subgroups allow.

   Every other product runs the register-tiled gemm: the 128 x 128 tile for large outputs
   or long K, else the 64 x 64 tile, each falling back to a tile with fewer invocations or
   less workgroup memory where the adapter cannot hold it. On a GPU, operands are first
   copied into the engine's scratch where that pays: matmul_bt's b transposed (the product
   then runs as matmul), a transposed (it then runs as matmul_at, whose kernel loads neither
   operand along K), an operand read along M or N whose rows are not whole vec4 with its
   rows padded (the gemm then loads vec4 everywhere). A copy is reused while its source is
   unwritten. When K is not whole tile steps, copies of both operands get zero rows up to
   the next step; otherwise, for long K and N a multiple of 4, a second pass adds the last
   K % BK values of k into out; else the kernel clamps a partial last step (KPART).

   Last, the grid. Where the output leaves the GPU's compute units idle and K is long, K is
   split into slices whose partial products splitk_reduce adds in a fixed order (split-K);
   unsplit, where the last round of tiles would occupy only part of the units, those tiles
   alone run in K-slices after the others (the last round). Both follow a model of how the
   units run workgroups (split_cost, tail_gain). The order of every sum depends only on the
   plan, so the same call on the same adapter gives the same bits. */
#include "internal.h"

#include <string.h>

enum { LAYOUT_NN = 0, LAYOUT_NT = 1, LAYOUT_TN = 2 };

/* The uniform block of every kernel of matmul.wgsl (see Params there). */
typedef struct mm_params {
    uint32_t M, N, K, kchunk;
    uint32_t tiles_n, tiles, group_m, out_slice;
    uint32_t tile_base, lda, ldb, kbase;
} mm_params;

/* gemm tile configurations: WG_M x WG_N threads with 8 x 8 outputs each, a (8 WG_M) x
   (8 WG_N) tile, BK values of k per step in two workgroup-memory buffers (one barrier per
   step), the next step's blocks prefetched into registers during the products. g2: the gemm2
   entry points (BK 8, the 8 k of a step written out with the next k's fragments read first,
   vec4 stores of out when N % 4 == 0), whose interior tiles load without clamps (fast);
   ufetch: the prefetch is unconditional; pair: lane pairs share every fragment read; inc:
   interior tiles load and store at indices computed once per tile. */
typedef struct tile_cfg {
    const char *name;
    uint32_t wg_m, wg_n, bk;
    bool g2, fast, ufetch, pair, inc;
} tile_cfg;

/* Indexed by WGML__MM_TILE_* - 1. */
enum { T128 = 0, T64X128, T64, T64K8, NTILES };

/* The large outputs' tile and its fallback, the small outputs' tile and its fallback
   (pick_tile). Every other configuration measured lost to these (bench/notes/matmul.md). */
static const tile_cfg TILES[NTILES] = {
    /* 256 threads, 16 KiB: the fastest */
    [T128] = { "128 x 128", 16, 16, 8, true, true, true, true, true },
    /* 128 threads, 12 KiB: the 128-tile's fallback */
    [T64X128] = { "64 x 128", 8, 16, 8, true, true, false, true, false },
    /* 64 threads, 16 KiB: outputs too small to fill a GPU with 128-tiles */
    [T64] = { "64 x 64", 8, 8, 16, false, false, false, false, false },
    /* 64 threads, 8 KiB: the fallback of the others */
    [T64K8] = { "64 x 64 in steps of 8", 8, 8, 8, false, false, false, false, false },
};

/* The FLAGS override of matmul.wgsl: FAST, UFETCH, PAIR, INC. */
#define TILE_FLAGS(fast, ufetch, pair, inc) \
    ((uint32_t)(fast) | (uint32_t)(ufetch) << 1 | (uint32_t)(pair) << 2 | (uint32_t)(inc) << 3)

#define GROUP_M 8          /* tile rows per launch group: tiles running together share operand panels in L2 */
#define GEMV_WG 256        /* threads of the matrix-vector and reduction kernels */
#define GEMV_QUADS 4       /* k-quads in flight per gemv_cols4 thread (16 rows) */
#define LONG_K 2048        /* K from which the 128-tile runs on any output: split-K fills the GPU */
#define MAX_SPLIT 64       /* K-slices at most */
/* split-K is taken where the model predicts at most SPLIT_MAX_COST of the unsplit cost, in
   the fewest slices that cost at most SPLIT_NEAR_BEST times the best; the last round is
   split for a predicted gain of TAIL_MIN_GAIN */
#define SPLIT_MAX_COST 0.98
#define SPLIT_NEAR_BEST 1.03
#define TAIL_MIN_GAIN 0.005
static uint32_t units_of(const wgml_context *ctx) { return wgml__units_of(ctx->profile); }

/* A yes-or-no choice: forced by the tuning, else the rule's. */
static bool decide(uint32_t forced, bool rule)
{
    return forced == WGML__MM_RULE ? rule : forced == WGML__MM_ON;
}

/* Refuses a tuning that no product can take (src/ops/matmul_tuning.h). */
static wgml_status check_tuning(wgml_context *ctx, const char *fn, const wgml__matmul_tuning *t)
{
    const struct { const char *name; uint32_t value; bool ok; } fields[] = {
        { "tile", t->tile, t->tile <= WGML__MM_TILE_64K8 },
        { "splitk", t->splitk, t->splitk <= MAX_SPLIT },
        { "tail_tiles", t->tail_tiles, !t->tail_tiles == !t->tail_slices && (!t->tail_tiles || t->splitk <= 1) },
        { "tail_slices", t->tail_slices, t->tail_slices != 1 && t->tail_slices <= MAX_SPLIT },
        { "copy_b", t->copy_b, t->copy_b <= WGML__MM_OFF },
        { "copy_a", t->copy_a, t->copy_a <= WGML__MM_OFF },
        { "pad", t->pad, t->pad <= WGML__MM_OFF },
        { "krem", t->krem, t->krem <= WGML__MM_OFF },
        { "gemv_rows", t->gemv_rows, t->gemv_rows == 0 || t->gemv_rows == 1 || t->gemv_rows == 4 || t->gemv_rows == 8 },
        { "gemv_wide", t->gemv_wide, t->gemv_wide <= WGML__MM_OFF },
        { "gemv_subgroups", t->gemv_subgroups, t->gemv_subgroups <= WGML__MM_OFF },
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (!fields[i].ok)
            return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT,
                              "%s: the engine's matmul tuning forces %s = %u (with tail_tiles %u, tail_slices %u, splitk "
                              "%u), which no product can take",
                              fn, fields[i].name, fields[i].value, t->tail_tiles, t->tail_slices, t->splitk);
    return WGML_OK;
}

static uint32_t tile_m(const tile_cfg *c) { return c->wg_m * 8; }
static uint32_t tile_n(const tile_cfg *c) { return c->wg_n * 8; }
static uint32_t threads_of(const tile_cfg *c) { return c->wg_m * c->wg_n; }

/* Two buffers of BK k-rows of both operands' tiles. */
static uint32_t smem_bytes(const tile_cfg *c)
{
    return 2 * c->bk * (tile_m(c) + tile_n(c)) * 4;
}

static bool tile_fits(const wgml_context *ctx, const tile_cfg *c)
{
    uint32_t nt = threads_of(c);
    return smem_bytes(c) <= ctx->limits.maxComputeWorkgroupStorageSize && nt <= ctx->limits.maxComputeInvocationsPerWorkgroup &&
           nt <= ctx->limits.maxComputeWorkgroupSizeX;
}

static uint64_t tiles_of(uint32_t M, uint32_t N, uint32_t side)
{
    return (uint64_t)wgml__ceil_div(M, side) * wgml__ceil_div(N, side);
}

/* The tile for an M x N output with K-long products: the 128-tile where its tiles about
   fill the GPU's units (the profile's large_min_tiles) or K is long enough for split-K to
   fill them anyway, else the 64-tile; each falls back to the tiles with fewer invocations
   and less workgroup memory where the adapter cannot hold it. Forced by the tuning, a tile
   the adapter cannot hold is WGML_ERROR_LIMIT. */
static wgml_status pick_tile(wgml_context *ctx, const char *fn, const wgml__matmul_tuning *t, uint32_t M, uint32_t N,
                             uint32_t K, const tile_cfg **out)
{
    const tile_cfg *c = t->tile ? &TILES[t->tile - 1] : NULL;
    if (c && !tile_fits(ctx, c))
        return wgml__fail(ctx, WGML_ERROR_LIMIT,
                          "%s: the engine's tuning forces the %s tile, which needs %u bytes of workgroup memory and %u "
                          "invocations; the adapter has %u and %u",
                          fn, c->name, smem_bytes(c), threads_of(c), ctx->limits.maxComputeWorkgroupStorageSize,
                          ctx->limits.maxComputeInvocationsPerWorkgroup);
    static const int big[] = { T128, T64X128, T64, T64K8 };
    static const int small[] = { T64, T64K8 };
    bool large = tiles_of(M, N, 128) >= ctx->profile->matmul.large_min_tiles || K >= LONG_K;
    const int *order = large ? big : small;
    size_t n = large ? sizeof big / sizeof big[0] : sizeof small / sizeof small[0];
    for (size_t i = 0; !c && i < n; i++)
        if (tile_fits(ctx, &TILES[order[i]])) c = &TILES[order[i]];
    if (!c)
        return wgml__fail(ctx, WGML_ERROR_LIMIT, "%s: the adapter's %u bytes of workgroup memory hold no matmul tile", fn,
                          ctx->limits.maxComputeWorkgroupStorageSize);
    *out = c;
    return WGML_OK;
}

/* One planned product. */
typedef struct mm_plan {
    wgml__kernel kernel;
    mm_params prm;
    wgml__arg x, y;             /* the A and B bindings */
    uint64_t workgroups;        /* along x * y, before split-K */
    uint32_t threads;           /* per workgroup */
    uint32_t min_chunk;         /* smallest K range worth a slice */
    uint32_t tile_fmas;         /* multiply-adds per unit of K of one workgroup's tile; 0: no wave model */
    uint32_t tile_elems;        /* gemm: outputs of one tile (BM x BN) */
    uint32_t bk;                /* gemm: k per tile step (0: another kernel) */
    bool g2;                    /* gemm: a gemm2 tile (the last round can be split) */
    uint32_t tile_wg_m, tile_wg_n;   /* gemm: the tile's threads along M and N */
} mm_plan;

/* Elements between stored rows of A and of B in a layout (no padding). */
static uint32_t natural_lda(int layout, uint32_t M, uint32_t K) { return layout == LAYOUT_TN ? M : K; }
static uint32_t natural_ldb(int layout, uint32_t N, uint32_t K) { return layout == LAYOUT_NT ? K : N; }

/* The gemm of a tile configuration on operands stored with rows lda and ldb elements apart
   (natural_lda / natural_ldb, or a padded copy's); the caller binds them (pl->x, pl->y). */
static void plan_gemm(mm_plan *pl, const tile_cfg *c, int layout, uint32_t M, uint32_t N, uint32_t K, uint32_t lda,
                      uint32_t ldb)
{
    /* vec4 loads of an operand whose stored rows are whole vec4; scalar loads of the other
       (VECB is set only where it differs from VEC: the usual pipelines keep their keys) */
    bool vec = lda % 4 == 0, vecb = ldb % 4 == 0;
    uint32_t flags = TILE_FLAGS(c->fast, c->ufetch, c->pair, c->inc);
    /* gemm2_v4 binds out as vec4: every row of out starts on a vec4 when N % 4 == 0 (and the
       split-K workspace slices are multiples of 4 elements apart) */
    const char *entry = !c->g2 ? "gemm" : N % 4 == 0 ? "gemm2_v4" : "gemm2";
    pl->kernel = (wgml__kernel){ .file = "matmul", .entry = entry, .layout = "urrw", .nconst = 5,
                                 .constants = { { "LAYOUT", layout }, { "VEC", vec }, { "WG_M", c->wg_m }, { "WG_N", c->wg_n },
                                                { "BK", c->bk } } };
    wgml__add_constant(&pl->kernel, "FLAGS", flags);
    if (vecb != vec) wgml__add_constant(&pl->kernel, "VECB", vecb);
    uint32_t tn = wgml__ceil_div(N, tile_n(c));
    pl->prm = (mm_params){ .M = M, .N = N, .K = K, .kchunk = K, .tiles_n = tn,
                           .tiles = wgml__ceil_div(M, tile_m(c)) * tn, .group_m = GROUP_M, .lda = lda, .ldb = ldb };
    pl->workgroups = pl->prm.tiles;
    pl->threads = threads_of(c);
    pl->min_chunk = 256;
    /* the wave model knows the tiles with 8 x 8 outputs per thread and at least 128 threads
       (about 128 registers each: two 256-thread workgroups per unit) */
    bool modelled = pl->threads >= 128;
    pl->tile_fmas = modelled ? tile_m(c) * tile_n(c) : 0;
    pl->tile_elems = tile_m(c) * tile_n(c);
    pl->bk = c->bk;
    pl->g2 = c->g2;
    pl->tile_wg_m = c->wg_m;
    pl->tile_wg_n = c->wg_n;
}

/* out[r] = dot(x[r, :], y) for `rows` rows of length K, x rows contiguous. */
static void plan_gemv_rows(const wgml_context *ctx, mm_plan *pl, const wgml__matmul_tuning *t, uint32_t rows, uint32_t K,
                           const wgml_tensor *x, const wgml_tensor *y)
{
    /* rows per workgroup (the profile's): on a GPU one, so that each row's reads stream
       through its own workgroup, except for short rows, where a workgroup of one row has
       too little to read beside its reduction, as long as the workgroups still fill the GPU */
    const struct wgml__matmul_profile *pm = &ctx->profile->matmul;
    uint32_t gr = t->gemv_rows;
    if (!gr) {
        gr = K <= 512 ? pm->gemv_rows_k512 : K <= 1024 ? pm->gemv_rows_k1024 : pm->gemv_rows;
        if (rows / gr < pm->gemv_rows_min_workgroups) gr = pm->gemv_rows;
    }
    pl->kernel = (wgml__kernel){ .file = "matmul", .entry = "gemv_rows", .layout = "urrw", .nconst = 3,
                                 .constants = { { "VEC", K % 4 == 0 }, { "WGV", GEMV_WG }, { "GR", gr } } };
    pl->prm = (mm_params){ .M = rows, .K = K, .kchunk = K, .tiles = wgml__ceil_div(rows, gr) };
    pl->x = wgml__t(x);
    pl->y = wgml__t(y);
    pl->workgroups = pl->prm.tiles;
    pl->threads = GEMV_WG;
    pl->min_chunk = 1024;
}

/* out[c] = sum_k y[k] * x[k, c] for `cols` columns, x [K, cols] contiguous along columns. */
static wgml_status plan_gemv_cols(wgml_context *ctx, const char *fn, mm_plan *pl, const wgml__matmul_tuning *t, uint32_t cols,
                                  uint32_t K, const wgml_tensor *x, const wgml_tensor *y)
{
    /* vec4 columns per workgroup: enough workgroups to fill the GPU while each warp still
       reads 64-byte row segments; for the profile's wide range of columns, 8 in the
       profile's wide workgroups (fewer, larger workgroups with more k-quads in flight) */
    const struct wgml__matmul_profile *pm = &ctx->profile->matmul;
    uint32_t wide_wg = pm->gemv_wide_threads;
    bool wide_fits = wide_wg && ctx->limits.maxComputeInvocationsPerWorkgroup >= wide_wg &&
                     ctx->limits.maxComputeWorkgroupSizeX >= wide_wg;
    if (t->gemv_wide == WGML__MM_ON && !wide_fits)
        return wgml__fail(ctx, WGML_ERROR_LIMIT, "%s: the engine's tuning forces gemv_wide, workgroups of %u invocations; the "
                          "adapter has %u", fn, wide_wg, ctx->limits.maxComputeInvocationsPerWorkgroup);
    bool wide = decide(t->gemv_wide, wide_fits && cols >= pm->gemv_wide_cols_min && cols < pm->gemv_wide_cols_end);
    uint32_t c4 = cols >= 8192 || wide ? 8 : cols >= 2048 ? 4 : 2;
    uint32_t wg = wide ? wide_wg : GEMV_WG;
    /* the sum over the k-groups by subgroup shuffles and one barrier instead of a tree of
       barriers: where every subgroup size the adapter may use is full in a workgroup and
       holds C4 columns */
    const wgml_adapter_info *in = &ctx->info;
    bool sg_fits = in->subgroups && in->subgroup_min_size >= c4 && in->subgroup_max_size && wg % in->subgroup_max_size == 0;
    if (t->gemv_subgroups == WGML__MM_ON && !sg_fits)
        return wgml__fail(ctx, WGML_ERROR_LIMIT, "%s: the engine's tuning forces gemv_subgroups; the adapter's subgroups (%s, "
                          "%u..%u invocations) do not hold %u vec4 columns in workgroups of %u", fn,
                          in->subgroups ? "offered" : "none", in->subgroup_min_size, in->subgroup_max_size, c4, wg);
    bool sg = decide(t->gemv_subgroups, sg_fits);
    uint32_t gq = wide ? pm->gemv_wide_quads : GEMV_QUADS;
    pl->kernel = (wgml__kernel){ .file = "matmul", .entry = sg ? "gemv_cols4_sg" : "gemv_cols4", .layout = "urrw", .nconst = 3,
                                 .subgroups = sg,
                                 .constants = { { "VEC", cols % 4 == 0 }, { "WGV", wg }, { "GQ", gq } } };
    pl->prm = (mm_params){ .M = cols, .N = c4, .K = K, .kchunk = K, .tiles = wgml__ceil_div(cols, 4 * c4) };
    pl->x = wgml__t(x);
    pl->y = wgml__t(y);
    pl->workgroups = pl->prm.tiles;
    pl->threads = wg;
    pl->min_chunk = 1024;
    return WGML_OK;
}

/* ---- copies of the operands ----------------------------------------------------------- */

/* A copy of an operand into an engine scratch, [kc, copy_ld(rows)]: of src [rows, K]
   transposed, or of src [K, rows] with its rows padded (kc >= K: rows past K zero). */
typedef struct copy_plan {
    bool on;
    bool transpose;
    const char *field, *what;   /* the tuning field that can force it, and the operand, for messages */
    const wgml_tensor *src;
    uint32_t rows;
    uint32_t slot;
    wgml__arg copy;
} copy_plan;

/* The row length of a copy of an operand with n rows (transposed) or n columns (padded):
   whole vec4, so that the product reads the copy in vec4 whatever n is. */
static uint32_t copy_ld(uint32_t n) { return (uint32_t)(((uint64_t)n + 3) / 4 * 4); }

/* A copy of 4 * copy_ld(rows) * k bytes fits one storage binding and u32 indices. */
static bool copy_fits(const wgml_context *ctx, uint32_t rows, uint32_t k)
{
    uint64_t bytes = 4ull * copy_ld(rows) * k;
    return bytes <= ctx->limits.maxStorageBufferBindingSize && bytes / 4 <= UINT32_MAX;
}

/* Which operands the gemm reads through copies (copies[0]: b, copies[1]: a) and the layout
   its kernel then runs (*kl), by the profile's thresholds (none on a CPU adapter): matmul_bt
   as matmul on b transposed, where M makes the copy (8 N K bytes moved) cheap beside the
   product; matmul (and matmul_bt with b's copy) as matmul_at on a transposed, the same
   with M and N; then the operands the kernel reads along M or N with rows not whole vec4
   (a of matmul_at, b of matmul and matmul_at), padded where the other side of out makes it
   cheap. */
static wgml_status plan_copies(wgml_context *ctx, const char *fn, const wgml__matmul_tuning *t, int layout, uint32_t M,
                               uint32_t N, uint32_t K, const wgml_tensor *a, const wgml_tensor *b, copy_plan copies[2], int *kl)
{
    const struct wgml__matmul_profile *pm = &ctx->profile->matmul;
    uint64_t bind = ctx->limits.maxStorageBufferBindingSize;
    uint64_t bbytes = 4ull * copy_ld(N) * K, abytes = 4ull * copy_ld(M) * K;
    bool bcheap = bbytes <= pm->copy_max_bytes && bbytes <= bind, acheap = abytes <= pm->copy_max_bytes && abytes <= bind;
    bool btt = layout == LAYOUT_NT && decide(t->copy_b, M >= pm->copy_b_min_m && bcheap);
    /* a's copy needs b as [K, N]: matmul's b, or matmul_bt's b copied */
    bool att = layout != LAYOUT_TN &&
               decide(t->copy_a, (layout == LAYOUT_NN || btt) && M >= pm->copy_a_min_m && N >= pm->copy_a_min_n && acheap);
    if (att && layout == LAYOUT_NT && !btt) {
        if (t->copy_b == WGML__MM_OFF)
            return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: the engine's tuning forces copy_a on and copy_b off; "
                              "matmul_bt runs through a's copy only with b's", fn);
        btt = true;
    }
    *kl = att ? LAYOUT_TN : btt ? LAYOUT_NN : layout;
    bool pada = *kl == LAYOUT_TN && !att && M % 4 && decide(t->pad, N >= pm->pad_min_other && acheap);
    bool padb = *kl != LAYOUT_NT && !btt && N % 4 && decide(t->pad, M >= pm->pad_min_other && bcheap);
    copies[0] = (copy_plan){ btt || padb, btt, btt ? "copy_b" : "pad", "b", b, N, WGML__SCRATCH_MATMUL_T };
    copies[1] = (copy_plan){ att || pada, att, att ? "copy_a" : "pad", "a", a, M, WGML__SCRATCH_MATMUL_A };
    return WGML_OK;
}

/* The rows of the copies (*kc: K, or where both operands are copied and K is not whole
   tile steps, K rounded up to the next step: zero rows let the gemm run whole steps, with
   neither KPART nor the second pass) and their scratch. A forced copy over one storage
   binding is WGML_ERROR_LIMIT. */
static wgml_status place_copies(wgml_engine *e, const char *fn, copy_plan copies[2], uint32_t K, uint32_t bk, uint32_t *kc)
{
    wgml_context *ctx = e->ctx;
    *kc = K;
    if (copies[0].on && copies[1].on && K % bk) {
        uint32_t ks = K + (bk - K % bk);
        if (copy_fits(ctx, copies[0].rows, ks) && copy_fits(ctx, copies[1].rows, ks)) *kc = ks;
    }
    for (int i = 0; i < 2; i++) {
        if (!copies[i].on) continue;
        uint64_t cb = 4ull * copy_ld(copies[i].rows) * *kc;
        if (!copy_fits(ctx, copies[i].rows, *kc))
            return wgml__fail(ctx, WGML_ERROR_LIMIT, "%s: the engine's tuning forces %s; the copy of %s (%llu bytes) exceeds the "
                              "adapter's storage binding of %llu bytes or 2^32 elements", fn, copies[i].field, copies[i].what,
                              (unsigned long long)cb, (unsigned long long)ctx->limits.maxStorageBufferBindingSize);
        WGML_CHECK(wgml__scratch(e, copies[i].slot, cb, &copies[i].copy));
    }
    return WGML_OK;
}

/* The copy of src is in its slot already: the products of one input with several weights
   (q, k and v of x) copy it once. */
static bool copy_current(const wgml_engine *e, const copy_plan *c, uint32_t kc)
{
    const wgml__derived *d = &e->derived[c->slot];
    return d->src == c->src->id && d->written == c->src->written && d->slot_id == c->copy.tensor->id && d->rows == c->rows &&
           d->cols == kc && d->transposed == c->transpose;
}

/* The transposed copy's kernel: 4 x 4 blocks of vec4 when N and K are multiples of 4 and
   the copy has no rows past K, else 32 x 32 blocks of scalars through workgroup memory
   (transpose_pad: any sizes, rows padded, zero rows after b's K when kc > K). */
static wgml__kernel transpose_kernel(uint32_t N, uint32_t K, uint32_t kc)
{
    return (wgml__kernel){ .file = "matmul", .entry = N % 4 == 0 && K % 4 == 0 && kc == K ? "transpose_nk" : "transpose_pad",
                           .layout = "urw" };
}

/* Records t [kc, copy_ld(N)] = b [N, K] transposed into the engine's copy scratch (padding
   columns and the rows past K zero; kc >= K). */
static wgml_status record_transpose(wgml_engine *e, const wgml_tensor *b, uint32_t N, uint32_t K, uint32_t kc, wgml__arg t)
{
    wgml__kernel k = transpose_kernel(N, K, kc);
    bool vec = N % 4 == 0 && K % 4 == 0 && kc == K;   /* transpose_nk: 64 x 64 blocks; transpose_pad: 32 x 32 */
    uint32_t tk = wgml__ceil_div(kc, vec ? 64 : 32);
    uint64_t wgs = (uint64_t)wgml__ceil_div(N, vec ? 64 : 32) * tk;
    mm_params prm = { .M = N, .N = kc, .K = K, .tiles_n = tk, .tiles = (uint32_t)wgs, .ldb = copy_ld(N) };
    uint32_t gx, gy;
    WGML_CHECK(wgml__grid(e->ctx, wgs, &gx, &gy));
    wgml__arg args[2] = { wgml__t(b), t };
    return wgml__dispatch(e, &k, &prm, sizeof prm, args, 2, gx, gy, 1);
}

static const wgml__kernel pad_kernel = { .file = "matmul", .entry = "pad_rows", .layout = "urw" };

/* Records t [kc, copy_ld(N)] = b [K, N] with each row padded with zeros and the rows past K
   zero (kc >= K; the caller checked that the copy's elements fit a u32 index). */
static wgml_status record_pad(wgml_engine *e, const wgml_tensor *b, uint32_t N, uint32_t K, uint32_t kc, wgml__arg t)
{
    uint64_t vec4s = (uint64_t)kc * copy_ld(N) / 4;   /* one per invocation */
    mm_params prm = { .M = K, .N = kc, .K = N, .ldb = copy_ld(N) };
    uint32_t gx, gy;
    WGML_CHECK(wgml__grid(e->ctx, (vec4s + 255) / 256, &gx, &gy));
    wgml__arg args[2] = { wgml__t(b), t };
    return wgml__dispatch(e, &pad_kernel, &prm, sizeof prm, args, 2, gx, gy, 1);
}

/* Records the copies not current in their slots, and marks them current. */
static wgml_status record_copies(wgml_engine *e, const copy_plan copies[2], uint32_t K, uint32_t kc)
{
    for (int i = 0; i < 2; i++) {
        const copy_plan *c = &copies[i];
        if (!c->on || copy_current(e, c, kc)) continue;
        if (c->transpose)
            WGML_CHECK(record_transpose(e, c->src, c->rows, K, kc, c->copy));
        else
            WGML_CHECK(record_pad(e, c->src, c->rows, K, kc, c->copy));
        e->derived[c->slot] = (wgml__derived){ c->src->id, c->src->written, c->copy.tensor->id, c->rows, kc, c->transpose };
    }
    return WGML_OK;
}

/* ---- the gemm's plan ------------------------------------------------------------------- */

/* The gemm of an M x N x K product: its tile, the copies of its operands (placed in the
   engine's scratch, *kc rows) and the kernel's layout on them, EDGE, and the values of k
   left to the second pass (*krem: the last K % BK where K is long and N a multiple of 4). */
static wgml_status plan_tiled(wgml_engine *e, const char *fn, const wgml__matmul_tuning *t, int layout, uint32_t M, uint32_t N,
                              uint32_t K, const wgml_tensor *a, const wgml_tensor *b, mm_plan *pl, copy_plan copies[2],
                              uint32_t *kc, uint32_t *krem)
{
    wgml_context *ctx = e->ctx;
    const tile_cfg *c = NULL;
    int kl = layout;
    WGML_CHECK(pick_tile(ctx, fn, t, M, N, K, &c));
    WGML_CHECK(plan_copies(ctx, fn, t, layout, M, N, K, a, b, copies, &kl));
    WGML_CHECK(place_copies(e, fn, copies, K, c->bk, kc));
    uint32_t lda = copies[1].on ? copy_ld(M) : natural_lda(kl, M, K), ldb = copies[0].on ? copy_ld(N) : natural_ldb(kl, N, K);
    plan_gemm(pl, c, kl, M, N, *kc, lda, ldb);
    /* tiles past M (N) load an operand read along M (N) in vec4 without clamps (EDGE in
       matmul.wgsl): only where there are such tiles, so other pipelines keep their code */
    bool edge_m = M % tile_m(c) && kl == LAYOUT_TN && lda % 4 == 0;
    bool edge_n = N % tile_n(c) && kl != LAYOUT_NT && ldb % 4 == 0;
    if (c->fast && (edge_m || edge_n)) wgml__add_constant(&pl->kernel, "EDGE", 1);
    /* the second pass adds its vec4 at a time: only for N % 4 == 0, and from K where it
       costs little beside the product (the profile's krem_min_k) */
    if (*kc % c->bk && K > c->bk && decide(t->krem, K >= ctx->profile->matmul.krem_min_k && N % 4 == 0)) {
        *krem = K % c->bk;
        pl->prm.K = pl->prm.kchunk = K - *krem;
    }
    pl->x = copies[1].on ? copies[1].copy : wgml__t(a);
    pl->y = copies[0].on ? copies[0].copy : wgml__t(b);
    return WGML_OK;
}

/* ---- split-K and the last round ----------------------------------------------------------- */

/* Time, in tile times of one unit, of n workgroups of w tile times each started in launch
   order on `units` units of two workgroup slots: waves of two per unit take 2 w; a last
   wave of at most one per unit takes w / alone_rate, a fuller one 2 w. */
static double slot_time(const wgml_context *ctx, uint64_t n, double w)
{
    uint64_t units = units_of(ctx), q = n / (2 * units), rem = n % (2 * units);
    double t = 2.0 * w * (double)q;
    if (rem) t += rem <= units ? w / ctx->profile->matmul.alone_rate : 2.0 * w;
    return t;
}

/* The rule's split of the last round: the r = T mod units tiles after T - r whole ones, in
   the number of K-slices (at least min_chunk long, whole multiples of 16) that the slot model
   times fastest, the slices after the whole tiles (a second dispatch: the barrier before it
   lets no slice start before the last whole tile ends). Returns the predicted gain over the
   unsplit product (0: below TAIL_MIN_GAIN) and sets the tiles, slices and chunk; only for the
   modelled tiles with at least 4 full rounds (where the model was fitted), and slices whose
   workspace fits one binding of the adapter. */
static double tail_gain(const wgml_context *ctx, const mm_plan *pl, uint32_t *tail, uint32_t *slices, uint32_t *chunk)
{
    uint32_t T = pl->prm.tiles, K = pl->prm.K, units = units_of(ctx), r = T % units;
    double best = 0.0;
    if (!pl->tile_fmas || T < 4 * units || r == 0) return 0.0;
    double whole = slot_time(ctx, T, 1.0), rest = slot_time(ctx, T - r, 1.0);
    for (uint32_t S = 2; S <= K / pl->min_chunk && S <= MAX_SPLIT; S++) {
        uint32_t c = (wgml__ceil_div(K, S) + 15) / 16 * 16, s = wgml__ceil_div(K, c);
        if (s < 2 || 4ull * r * s * pl->tile_elems > ctx->limits.maxStorageBufferBindingSize) continue;
        double over = ctx->profile->matmul.slice_overhead_k;
        double gain = 1.0 - (rest + slot_time(ctx, (uint64_t)r * s, ((double)c + over) / K)) / whole;
        if (gain > best) {
            best = gain;
            *tail = r;
            *slices = s;
            *chunk = c;
        }
    }
    return best >= TAIL_MIN_GAIN ? best : 0.0;
}

/* Modelled cost of S K-slices of a tiled product, in multiply-add slots: the unit with the
   most workgroups sets the time, each workgroup as long as its slice, plus the workspace
   written and read back by splitk_reduce. Quantized per unit, not per workgroup slot: a
   workgroup alone on a unit runs nearly as fast as the unit does with two, so an output of
   about three units' tiles takes 3 workgroup times unsplit and 6 half ones in 2 slices: no
   gain. */
static double split_cost(const wgml_context *ctx, const mm_plan *pl, uint64_t mn, uint32_t S)
{
    uint64_t w = units_of(ctx);
    uint64_t waves = (pl->workgroups * S + w - 1) / w;
    double compute = (double)waves * w * pl->tile_fmas * wgml__ceil_div(pl->prm.K, S);
    return compute + (S > 1 ? (double)ctx->profile->matmul.fma_per_byte * 8.0 * S * mn : 0.0);
}

/* The split_cost model's slices: where some split costs at most SPLIT_MAX_COST of the
   whole, the fewest within SPLIT_NEAR_BEST of the best; none where splitting the last round
   instead is predicted to gain more. */
static uint32_t model_split(const wgml_context *ctx, const mm_plan *pl, uint64_t mn)
{
    uint32_t most = pl->prm.K / pl->min_chunk, S = 1;
    if (most > MAX_SPLIT) most = MAX_SPLIT;
    double whole = split_cost(ctx, pl, mn, 1), best = whole;
    for (uint32_t n = 2; n <= most; n++) {
        double c = split_cost(ctx, pl, mn, n);
        if (c < best) best = c;
    }
    if (best <= SPLIT_MAX_COST * whole)
        for (S = 2; S < most; S++) {
            double c = split_cost(ctx, pl, mn, S);
            if (c <= SPLIT_NEAR_BEST * best && c <= SPLIT_MAX_COST * whole) break;
        }
    uint32_t t, ts, tc;
    if (S > 1 && tail_gain(ctx, pl, &t, &ts, &tc) > 1.0 - split_cost(ctx, pl, mn, S) / whole) S = 1;
    return S;
}

/* Slices for the kernels without a model (the 64-tiles, the matrix-vector kernels): enough
   to reach the profile's fill_threads when the output gives fewer, each at least min_chunk
   long. */
static uint32_t fill_split(const wgml_context *ctx, const mm_plan *pl)
{
    uint64_t have = pl->workgroups * pl->threads, fill = ctx->profile->matmul.fill_threads;
    if (have >= fill || pl->prm.K < 2 * pl->min_chunk) return 1;
    uint64_t want = (fill + have - 1) / have, most = pl->prm.K / pl->min_chunk;
    uint64_t S = want < most ? want : most;
    return (uint32_t)(S > MAX_SPLIT ? MAX_SPLIT : S);
}

/* Number of K-slices (forced, none where the tuning forces a last round, else by
   model_split or fill_split), at most what the largest workspace the adapter binds holds;
   sets kchunk (whole multiples of 16). */
static uint32_t plan_split(const wgml_context *ctx, mm_plan *pl, const wgml__matmul_tuning *t, uint64_t mn)
{
    uint32_t K = pl->prm.K, S;
    if (t->splitk) S = t->splitk;
    else if (t->tail_tiles && pl->g2) S = 1;
    else S = pl->tile_fmas ? model_split(ctx, pl, mn) : fill_split(ctx, pl);
    uint64_t mnp = (mn + 3) & ~(uint64_t)3;
    uint64_t room = ctx->limits.maxStorageBufferBindingSize / (mnp * 4);
    if (room > 0xFFFFFFF0u / mnp) room = 0xFFFFFFF0u / mnp;   /* 32-bit indexing of the workspace */
    if (S > room) S = (uint32_t)room;
    if (S <= 1) {
        pl->prm.kchunk = K;
        return 1;
    }
    uint32_t chunk = (wgml__ceil_div(K, S) + 15) / 16 * 16;
    pl->prm.kchunk = chunk;
    return wgml__ceil_div(K, chunk);
}

/* The last round. Unsplit, T tiles run in rounds of one tile per unit; where the last round
   is only partly full, the other units wait for it. Those tiles run instead after the
   others, in K-slices over the whole GPU, and splitk_reduce_tiles adds the slices into out.
   For the gemm2 tiles: by tail_gain's rule, or as the tuning forces (slices of whole 8-steps
   of K, the tile's unclamped path). Returns the number of tail tiles (0: none) and sets
   their slices and K range per slice. */
static uint32_t plan_tail(const wgml_context *ctx, const mm_plan *pl, const wgml__matmul_tuning *t, uint32_t *slices,
                          uint32_t *chunk)
{
    if (!pl->g2) return 0;
    if (!t->tail_tiles) {
        uint32_t n = 0;
        return tail_gain(ctx, pl, &n, slices, chunk) > 0.0 ? n : 0;
    }
    *chunk = (wgml__ceil_div(pl->prm.K, t->tail_slices) + 7) / 8 * 8;
    *slices = wgml__ceil_div(pl->prm.K, *chunk);
    return t->tail_tiles;
}

/* K-slices of an M x N x K product on the default large tile, as the rules choose them
   (for test_internal). */
uint32_t wgml__matmul_model_slices(const wgml_context *ctx, uint32_t M, uint32_t N, uint32_t K)
{
    const wgml__matmul_tuning t = { 0 };
    mm_plan pl = { 0 };
    plan_gemm(&pl, &TILES[T128], LAYOUT_TN, M, N, K, M, N);
    return plan_split(ctx, &pl, &t, (uint64_t)M * N);
}

/* The last round's tiles and their slices (plan_tail) for the same, for test_internal. */
uint32_t wgml__matmul_model_tail(const wgml_context *ctx, uint32_t M, uint32_t N, uint32_t K, uint32_t *slices)
{
    const wgml__matmul_tuning t = { 0 };
    mm_plan pl = { 0 };
    uint32_t chunk = 0;
    *slices = 0;
    plan_gemm(&pl, &TILES[T128], LAYOUT_TN, M, N, K, M, N);
    if (plan_split(ctx, &pl, &t, (uint64_t)M * N) > 1) return 0;
    return plan_tail(ctx, &pl, &t, slices, &chunk);
}

/* A forced last round the product cannot take: as many tiles as it has or more, K too short
   for two slices, or slices whose workspace exceeds one binding. */
static wgml_status check_tail(wgml_context *ctx, const char *fn, const mm_plan *pl, uint32_t tail, uint32_t slices)
{
    uint64_t bytes = 4ull * tail * pl->tile_elems * slices;
    if (tail >= pl->workgroups || slices < 2)
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: the engine's tuning forces a last round of %u tiles in %u "
                          "slices; the product has %llu tiles and K = %u", fn, tail, slices,
                          (unsigned long long)pl->workgroups, pl->prm.K);
    if (bytes > ctx->limits.maxStorageBufferBindingSize)
        return wgml__fail(ctx, WGML_ERROR_LIMIT, "%s: the engine's tuning forces a last round whose slices need %llu bytes; "
                          "the adapter binds %llu", fn, (unsigned long long)bytes,
                          (unsigned long long)ctx->limits.maxStorageBufferBindingSize);
    return WGML_OK;
}

/* ---- recording ----------------------------------------------------------------------- */

/* A planned call: the product, the copies it reads, K-slices (split), the last round's
   tiles and slices, the values of k left to the second pass, and whether out accumulates. */
typedef struct mm_call {
    mm_plan pl;
    copy_plan copies[2];
    uint64_t mn;                /* M * N */
    uint32_t K, kc, krem;
    uint32_t split;
    uint32_t tail, tail_slices, tail_chunk;
    bool acc;
} mm_call;

static const wgml__kernel reduce_kernel = { .file = "matmul", .entry = "splitk_reduce", .layout = "urw", .nconst = 1,
                                            .constants = { { "WGV", GEMV_WG } } };

/* The kernels of a call besides the copies: the product (main), the last round's slices and
   their sum (tail, tail_red), the split-K sum (reduce) and the second pass (rem). ACC goes
   on the kernel that writes out; KPART where a K range ends inside a tile step (only those
   pipelines carry its per-step check). */
typedef struct mm_kernels { wgml__kernel main, tail, tail_red, reduce, rem; } mm_kernels;

static void call_kernels(const mm_call *c, mm_kernels *k)
{
    const mm_plan *pl = &c->pl;
    k->main = pl->kernel;
    k->rem = pl->kernel;   /* adds the product over the last krem values of k to out */
    wgml__add_constant(&k->rem, "ACC", 1);
    bool kpart = pl->bk && (pl->prm.K % pl->bk || pl->prm.kchunk % pl->bk);
    if (kpart) wgml__add_constant(&k->main, "KPART", 1);
    k->reduce = reduce_kernel;
    k->tail = k->main;
    k->tail_red = (wgml__kernel){ 0 };
    if (c->tail) {
        /* the tail's slices as plain partial sums in blocks; their sum goes to out */
        if (!kpart && c->tail_chunk % pl->bk) wgml__add_constant(&k->tail, "KPART", 1);
        wgml__add_constant(&k->tail, "COMPACT", 1);
        /* the sum places the tiles as the gemm's launch order does, which depends on the
           tile's shape only */
        k->tail_red = (wgml__kernel){ .file = "matmul", .entry = "splitk_reduce_tiles", .layout = "urw", .nconst = 3,
                                      .constants = { { "WG_M", pl->tile_wg_m }, { "WG_N", pl->tile_wg_n }, { "WGV", GEMV_WG } } };
        if (c->acc) wgml__add_constant(&k->tail_red, "ACC", 1);
    }
    /* split-K: the slices stay plain partial sums, their sum adds to out */
    if (c->acc) wgml__add_constant(c->split > 1 ? &k->reduce : &k->main, "ACC", 1);
}

/* Records a planned call. Everything that can fail (pipelines, scratch, grids) comes first,
   so that a failure records nothing; the copies, recorded first, write only the engine's
   scratch. */
static wgml_status record_call(wgml_engine *e, mm_call *c, wgml_tensor *out)
{
    wgml_context *ctx = e->ctx;
    mm_plan *pl = &c->pl;
    mm_kernels k;
    call_kernels(c, &k);
    WGPUComputePipeline pipe;
    WGPUBindGroupLayout bgl;
    uint32_t gx, gy, kx = 0, ky = 0, rx = 0, ry = 0;
    WGML_CHECK(wgml__grid(ctx, pl->workgroups - c->tail, &gx, &gy));
    if (c->krem) {
        WGML_CHECK(wgml__grid(ctx, pl->workgroups, &kx, &ky));
        WGML_CHECK(wgml__pipeline_get(e, &k.rem, &pipe, &bgl));
    }
    WGML_CHECK(wgml__pipeline_get(e, &k.main, &pipe, &bgl));
    for (int i = 0; i < 2; i++) {
        if (!c->copies[i].on) continue;
        wgml__kernel tk = c->copies[i].transpose ? transpose_kernel(c->copies[i].rows, c->K, c->kc) : pad_kernel;
        WGML_CHECK(wgml__pipeline_get(e, &tk, &pipe, &bgl));
    }
    uint64_t mnp = (c->mn + 3) & ~(uint64_t)3;
    wgml__arg ws = wgml__t(out);   /* split-K and the last round: the slices' workspace */
    if (c->split > 1) {
        WGML_CHECK(wgml__pipeline_get(e, &k.reduce, &pipe, &bgl));
        WGML_CHECK(wgml__grid(ctx, wgml__ceil_div(mnp / 4, GEMV_WG), &rx, &ry));
        WGML_CHECK(wgml__scratch(e, WGML__SCRATCH_MATMUL, 4 * c->split * mnp, &ws));
        pl->prm.out_slice = (uint32_t)mnp;
    }
    uint64_t tail_vec4 = (uint64_t)c->tail * pl->tile_elems / 4;
    if (c->tail) {
        WGML_CHECK(wgml__pipeline_get(e, &k.tail, &pipe, &bgl));
        WGML_CHECK(wgml__pipeline_get(e, &k.tail_red, &pipe, &bgl));
        WGML_CHECK(wgml__grid(ctx, wgml__ceil_div(tail_vec4, GEMV_WG), &rx, &ry));
        WGML_CHECK(wgml__scratch(e, WGML__SCRATCH_MATMUL, 16 * tail_vec4 * c->tail_slices, &ws));
    }
    WGML_CHECK(record_copies(e, c->copies, c->K, c->kc));
    wgml__arg args[3] = { pl->x, pl->y, c->split > 1 ? ws : wgml__t(out) };
    WGML_CHECK(wgml__dispatch(e, &k.main, &pl->prm, sizeof pl->prm, args, 3, gx, gy, c->split));
    if (c->tail) {
        mm_params tp = pl->prm;
        tp.tile_base = (uint32_t)(pl->workgroups - c->tail);
        tp.kchunk = c->tail_chunk;
        wgml__arg targs[3] = { pl->x, pl->y, ws };
        WGML_CHECK(wgml__dispatch(e, &k.tail, &tp, sizeof tp, targs, 3, c->tail, 1, c->tail_slices));
        tp.K = c->tail_slices;
        tp.out_slice = c->tail;
        wgml__arg rargs[2] = { ws, wgml__t(out) };
        WGML_CHECK(wgml__dispatch(e, &k.tail_red, &tp, sizeof tp, rargs, 2, rx, ry, 1));
    } else if (c->split > 1) {
        mm_params rp = { .K = c->split, .tiles = (uint32_t)(mnp / 4), .out_slice = (uint32_t)mnp };
        wgml__arg rargs[2] = { ws, wgml__t(out) };
        WGML_CHECK(wgml__dispatch(e, &k.reduce, &rp, sizeof rp, rargs, 2, rx, ry, 1));
    }
    if (!c->krem) return WGML_OK;
    /* out += the product over the last krem values of k: every tile, one partial step */
    mm_params kp = pl->prm;
    kp.K = c->K;
    kp.kbase = c->K - c->krem;
    kp.kchunk = c->krem;
    kp.out_slice = 0;
    kp.tile_base = 0;
    wgml__arg kargs[3] = { pl->x, pl->y, wgml__t(out) };
    return wgml__dispatch(e, &k.rem, &kp, sizeof kp, kargs, 3, kx, ky, 1);
}

/* Plans and records an M x N x K product of a layout (validated by the caller). */
static wgml_status run(wgml_engine *e, const char *fn, int layout, uint32_t M, uint32_t N, uint32_t K, const wgml_tensor *a,
                       const wgml_tensor *b, wgml_tensor *out, bool acc)
{
    wgml_context *ctx = e->ctx;
    const wgml__matmul_tuning *t = &e->tuning.matmul;
    WGML_CHECK(check_tuning(ctx, fn, t));
    mm_call c = { .mn = (uint64_t)M * N, .K = K, .kc = K, .acc = acc };
    mm_plan *pl = &c.pl;
    if (M == 1 && N == 1)
        plan_gemv_rows(ctx, pl, t, 1, K, a, b);                      /* a dot product in every layout */
    else if (N == 1 && layout != LAYOUT_TN)
        plan_gemv_rows(ctx, pl, t, M, K, a, b);                      /* a [M, K] . b */
    else if (M == 1 && layout == LAYOUT_NT)
        plan_gemv_rows(ctx, pl, t, N, K, b, a);                      /* b [N, K] . a */
    else if (M == 1)
        WGML_CHECK(plan_gemv_cols(ctx, fn, pl, t, N, K, b, a));      /* a . b [K, N] */
    else if (N == 1)
        WGML_CHECK(plan_gemv_cols(ctx, fn, pl, t, M, K, a, b));      /* b . a [K, M] */
    else
        WGML_CHECK(plan_tiled(e, fn, t, layout, M, N, K, a, b, pl, c.copies, &c.kc, &c.krem));
    c.split = plan_split(ctx, pl, t, c.mn);
    c.tail = c.split == 1 ? plan_tail(ctx, pl, t, &c.tail_slices, &c.tail_chunk) : 0;
    if (t->tail_tiles && c.tail) WGML_CHECK(check_tail(ctx, fn, pl, c.tail, c.tail_slices));
    return record_call(e, &c, out);
}

/* ---- validation ---------------------------------------------------------------------- */

static size_t last_dim(const wgml_tensor *t) { return t->shape[t->ndim - 1]; }

/* packed_b: b may be a packed, f16 or bf16 weight (wgml_matmul, wgml_matmul_bt). */
static wgml_status check_common(wgml_engine *e, const char *fn, const wgml_tensor *a, const wgml_tensor *b, const wgml_tensor *out,
                                bool packed_b)
{
    WGML_CHECK(wgml__check_engine(e, fn));
    WGML_CHECK(wgml__check_tensor(e, fn, "a", a, WGML_F32));
    bool packed = packed_b && wgml__is_packed_operand(b);
    WGML_CHECK(wgml__check_tensor(e, fn, "b", b, packed ? -1 : WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "out", out, WGML_F32));
    WGML_CHECK(wgml__check_no_alias(e, fn, "out", out, "a", a));
    WGML_CHECK(wgml__check_no_alias(e, fn, "out", out, "b", b));
    WGML_CHECK(wgml__check_u32_numel(e, fn, "a", a));
    if (!packed) WGML_CHECK(wgml__check_u32_numel(e, fn, "b", b));
    WGML_CHECK(wgml__check_u32_numel(e, fn, "out", out));
    return WGML_OK;
}

static wgml_status check_out(wgml_engine *e, const char *fn, const wgml_tensor *out, size_t M, size_t N)
{
    if (last_dim(out) != N || wgml_tensor_numel(out) != (uint64_t)M * N)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE,
                          "%s: out has %zu elements with last dimension %zu; it must have M*N = %zu*%zu elements with last "
                          "dimension N = %zu",
                          fn, wgml_tensor_numel(out), last_dim(out), M, N, N);
    return WGML_OK;
}

/* A validated product: on the matrix units (an f16 precision where they run it), through the
   packed kernels (b packed, f16 or bf16), or planned here. */
static wgml_status dispatch_product(wgml_engine *e, const char *fn, int layout, uint32_t M, uint32_t N, uint32_t K,
                                    const wgml_tensor *a, const wgml_tensor *b, wgml_tensor *out,
                                    const wgml_matmul_options *opts)
{
    bool acc = opts && opts->accumulate;
    if (opts && (unsigned)opts->precision > WGML_PRECISION_F16X3)
        return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: opts->precision %d is not a wgml_precision", fn,
                          (int)opts->precision);
    wgml_precision p = wgml__precision_of(e->ctx, opts);
    if (wgml__mma_takes(e->ctx, p, b, M, N, K)) return wgml__mma_matmul(e, layout, M, N, K, a, b, out, acc, p);
    if (wgml__is_packed_operand(b)) return wgml__packed_matmul(e, fn, a, b, out, M, N, K, layout == LAYOUT_NN, acc);
    return run(e, fn, layout, M, N, K, a, b, out, acc);
}

static wgml_status nn_product(wgml_engine *e, const char *fn, const wgml_tensor *a, const wgml_tensor *b,
                              wgml_tensor *out, const wgml_matmul_options *opts)
{
    WGML_CHECK(check_common(e, fn, a, b, out, true));
    if (b->ndim != 2)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: b must be 2-D [K, N]; it has %u dimensions", fn, b->ndim);
    size_t K = b->shape[0], N = b->shape[1];
    if (last_dim(a) != K)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: a's last dimension is %zu; it must equal K = %zu, b's first dimension",
                          fn, last_dim(a), K);
    size_t M = wgml_tensor_numel(a) / K;
    WGML_CHECK(check_out(e, fn, out, M, N));
    return dispatch_product(e, fn, LAYOUT_NN, (uint32_t)M, (uint32_t)N, (uint32_t)K, a, b, out, opts);
}

static wgml_status nt_product(wgml_engine *e, const char *fn, const wgml_tensor *a, const wgml_tensor *b,
                              wgml_tensor *out, const wgml_matmul_options *opts)
{
    WGML_CHECK(check_common(e, fn, a, b, out, true));
    if (b->ndim != 2)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: b must be 2-D [N, K]; it has %u dimensions", fn, b->ndim);
    size_t N = b->shape[0], K = b->shape[1];
    if (last_dim(a) != K)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: a's last dimension is %zu; it must equal K = %zu, b's second dimension",
                          fn, last_dim(a), K);
    size_t M = wgml_tensor_numel(a) / K;
    WGML_CHECK(check_out(e, fn, out, M, N));
    return dispatch_product(e, fn, LAYOUT_NT, (uint32_t)M, (uint32_t)N, (uint32_t)K, a, b, out, opts);
}

static wgml_status tn_product(wgml_engine *e, const char *fn, const wgml_tensor *a, const wgml_tensor *b,
                              wgml_tensor *out, const wgml_matmul_options *opts)
{
    WGML_CHECK(check_common(e, fn, a, b, out, false));
    size_t M = last_dim(a), N = last_dim(b);
    size_t Ka = wgml_tensor_numel(a) / M, Kb = wgml_tensor_numel(b) / N;
    if (Ka != Kb)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE,
                          "%s: a is [K, M] with K = %zu rows (M = %zu, its last dimension), b is [K, N] with K = %zu rows "
                          "(N = %zu); the K must be equal",
                          fn, Ka, M, Kb, N);
    WGML_CHECK(check_out(e, fn, out, M, N));
    return dispatch_product(e, fn, LAYOUT_TN, (uint32_t)M, (uint32_t)N, (uint32_t)Ka, a, b, out, opts);
}

wgml_status wgml_matmul(wgml_engine *e, const wgml_tensor *a, const wgml_tensor *b, wgml_tensor *out)
{
    return nn_product(e, "wgml_matmul", a, b, out, NULL);
}

wgml_status wgml_matmul_with(wgml_engine *e, const wgml_tensor *a, const wgml_tensor *b, wgml_tensor *out,
                             const wgml_matmul_options *opts)
{
    return nn_product(e, "wgml_matmul_with", a, b, out, opts);
}

wgml_status wgml_matmul_bt(wgml_engine *e, const wgml_tensor *a, const wgml_tensor *b, wgml_tensor *out)
{
    return nt_product(e, "wgml_matmul_bt", a, b, out, NULL);
}

wgml_status wgml_matmul_bt_with(wgml_engine *e, const wgml_tensor *a, const wgml_tensor *b, wgml_tensor *out,
                                const wgml_matmul_options *opts)
{
    return nt_product(e, "wgml_matmul_bt_with", a, b, out, opts);
}

wgml_status wgml_matmul_at(wgml_engine *e, const wgml_tensor *a, const wgml_tensor *b, wgml_tensor *out)
{
    return tn_product(e, "wgml_matmul_at", a, b, out, NULL);
}

wgml_status wgml_matmul_at_with(wgml_engine *e, const wgml_tensor *a, const wgml_tensor *b, wgml_tensor *out,
                                const wgml_matmul_options *opts)
{
    return tn_product(e, "wgml_matmul_at_with", a, b, out, opts);
}

/* The default kernels, compiled by wgml_engine_warmup: the 128-tile's gemm of each layout
   for sizes that are multiples of 4, gemv_rows with 1 row per workgroup (a GPU's long rows)
   and 4 (a CPU adapter's rows, a GPU's of at most 1024), gemv_cols4 with its tree sum and
   with subgroup shuffles (only where the device has subgroups), the split-K reduction and
   the transposed copy. (gemv_cols4 in the profile's wide workgroups compiles at its first
   use: an adapter with fewer invocations per workgroup never builds it.) */
#define GEMM_DEFAULT(lay)                                                                                            \
    { .file = "matmul", .entry = "gemm2_v4", .layout = "urrw", .nconst = 6,                                             \
      .constants = { { "LAYOUT", lay }, { "VEC", 1 }, { "WG_M", 16 }, { "WG_N", 16 }, { "BK", 8 },                      \
                     { "FLAGS", TILE_FLAGS(1, 1, 1, 1) } } }
const wgml__kernel wgml__matmul_kernels[] = {
    GEMM_DEFAULT(LAYOUT_NN),
    GEMM_DEFAULT(LAYOUT_NT),
    GEMM_DEFAULT(LAYOUT_TN),
    { .file = "matmul", .entry = "gemv_rows", .layout = "urrw", .nconst = 3,
      .constants = { { "VEC", 1 }, { "WGV", GEMV_WG }, { "GR", 1 } } },
    { .file = "matmul", .entry = "gemv_rows", .layout = "urrw", .nconst = 3,
      .constants = { { "VEC", 1 }, { "WGV", GEMV_WG }, { "GR", 4 } } },
    { .file = "matmul", .entry = "gemv_cols4", .layout = "urrw", .nconst = 3,
      .constants = { { "VEC", 1 }, { "WGV", GEMV_WG }, { "GQ", GEMV_QUADS } } },
    { .file = "matmul", .entry = "gemv_cols4_sg", .layout = "urrw", .nconst = 3, .subgroups = true,
      .constants = { { "VEC", 1 }, { "WGV", GEMV_WG }, { "GQ", GEMV_QUADS } } },
    { .file = "matmul", .entry = "splitk_reduce", .layout = "urw", .nconst = 1, .constants = { { "WGV", GEMV_WG } } },
    { .file = "matmul", .entry = "transpose_nk", .layout = "urw" },
};
const size_t wgml__matmul_kernel_count = sizeof wgml__matmul_kernels / sizeof wgml__matmul_kernels[0];
