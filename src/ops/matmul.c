/* Matrix products: wgml_matmul (a @ b), wgml_matmul_bt (a @ b^T), wgml_matmul_at (a^T @ b).
   Kernels: src/kernels/matmul.wgsl (its top comment explains the kernels' design).

   Every call is planned in four steps:
     1. validate the shapes (M, N, K come from the tensors' shapes, see wgml.h);
     2. pick a kernel: a matrix-vector kernel when M == 1 or N == 1 (decode), else the
        register-tiled gemm with a tile configuration that fits the adapter's limits
        (for large outputs t128k8xupi: 128 x 128 tiles of 256 threads, 8 x 8 outputs per
        thread, BK 8 in two buffers with the 8 k of a step written out, the lanes paired
        for workgroup-memory reads and the loads of interior tiles at indices computed once
        per tile: fastest in the H200 sweeps, round 18 of bench/notes/matmul.md; then the
        64 x 128 tiles of round 16; 64x64 when 128-tiles would leave the GPU half empty
        and K is too short for split-K to fill it);
     3. for matmul_bt on a GPU with M >= BTT_MIN_M, copy b transposed into the engine's
        scratch and run the product as matmul (round 12 of bench/notes/matmul.md: +5 - 10% with
        the 128-tiles, +14 - 21% with the 64 x 128 tiles of round 16, +6 - 10% with round 18's);
        then, on a GPU, for matmul and matmul_bt with M >= ATT_MIN_M and N >= ATT_MIN_N, copy a
        transposed too and run the product as matmul_at, whose kernel loads neither operand
        along K (round 19); the copies' rows are padded to whole vec4, and so, on a GPU, are
        those of an operand the gemm still reads along M or N when M (N) is not a multiple of
        4 (a padded copy, PAD_MIN_OTHER; round 30), so that the gemm loads them in vec4, in
        tiles past M and N too (EDGE); with K of KREM_MIN or more not whole tile steps and
        N % 4 == 0, the gemm runs K - K % BK and a second pass adds the rest into out;
     4. split K across workgroups (split-K) when the output alone leaves a large GPU idle
        (too few workgroups, or an SM with a workgroup more than most, see split_cost) and
        K is long: slice z writes a partial result into a workspace (the engine's matmul
        scratch) and splitk_reduce adds the slices in a fixed order (deterministic);
        unsplit, when the last round of tiles would leave SMs idle (8192^3: 4 tiles of a
        32nd round on 132 SMs; 4096^3: 100 of an 8th), split only those tiles (plan_tail,
        rounds 27 - 28), also instead of split-K where the model gives that more.

   WGML_MATMUL_VARIANT (private, for benchmarks and tests; read at every call) forces
   choices, as comma-separated tokens:
     t128 t128sb t64 t64k8 t64x128k8xp t128k8xupi
                                             the gemm tile configuration (see TILES below;
                                             bench/notes/matmul.md has the hypothesis of each
                                             and of those removed)
     nogemv                                  use gemm even when M == 1 or N == 1
     btt, nobtt                              matmul_bt through a transposed copy of b whenever
                                             the gemm runs; never (the default: BTT_MIN_M)
     att, noatt                              matmul and matmul_bt through a transposed copy of a
                                             (run as matmul_at) whenever the gemm runs; never
                                             (the default: ATT_MIN_M, ATT_MIN_N)
     pad, nopad                              the operands the gemm reads along M or N (a of
                                             matmul_at, b of matmul and matmul_at) through
                                             copies with rows padded to whole vec4 whenever
                                             M (N) is not a multiple of 4; never (the default:
                                             PAD_MIN_OTHER, PAD_MAX_BYTES, not on a CPU adapter)
     nokpad                                  when both operands are copied, their copies keep
                                             K rows (by default: zero rows up to whole tile
                                             steps of K, so the gemm needs neither KPART nor
                                             the krem pass)
     krem, nokrem                            the last K % BK values of k in a second pass that
                                             adds them into out whenever K is not whole steps
                                             (and K > BK); never (the default: KREM_MIN and
                                             N % 4 == 0)
     gemvc4                                  gemv_cols4 (k in quads, 8 rows in flight) for
                                             the column matrix-vector products (the default)
     gemvc1                                  the one-column gemv_cols kernel instead
     gemvsg, nogemvsg                        gemv_cols4's sum over its k-groups by subgroup
                                             shuffles (gemv_cols4_sg) whenever the adapter's
                                             subgroups allow (else WGML_ERROR_LIMIT); never
                                             (the default: where they allow)
     splitk=<n>                              n K-slices, 1..4096 (1: never split)
     gemvrows=<n>                            rows per gemv_rows workgroup: 1, 2, 4 or 8 (default
                                             on a GPU 1, 4 for K <= 1024 and 8 for K <= 512
                                             where rows / that >= GEMV_ROWS_MIN_WG; 4 on a
                                             CPU adapter)
     gemvcols=<n>                            vec4 columns per gemv_cols workgroup: 1..64, a
                                             power of 2
     gemvq=<n>                               k-quads in flight per gemv_cols4 thread: 1..16
                                             (default GEMV_QUADS, and
                                             GEMV_QUADS_WIDE for the columns that take
                                             GEMV_WG_WIDE by default)
     gemvwg=<n>                              threads per gemv_cols workgroup: 64..1024, a power
                                             of 2 the adapter allows (default GEMV_WG, and
                                             GEMV_WG_WIDE on a GPU for 4096 - 8191 columns)
     groupm=<n>                              tile rows per launch group of the gemm: 1..64
                                             (default GROUP_M)
     fresh                                   make the transposed copies at every call (by
                                             default a copy of an unchanged tensor is reused)
     tail=<n>, tailk=<s>, notail             the last round: its last n tiles (launch order)
                                             in s K-slices, whole 8-steps of K (tail alone:
                                             132 / n slices; tailk alone: the tiles past the
                                             last multiple of 132); never
   An unknown token is WGML_ERROR_INVALID_ARGUMENT, a configuration the adapter cannot hold
   WGML_ERROR_LIMIT (nothing is recorded), so a benchmark never times another kernel than it
   asked for. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

enum { LAYOUT_NN = 0, LAYOUT_NT = 1, LAYOUT_TN = 2 };

/* The uniform block of every kernel of matmul.wgsl (see Params there). */
typedef struct mm_params {
    uint32_t M, N, K, kchunk;
    uint32_t tiles_n, tiles, group_m, out_slice;
    uint32_t tile_base, lda, ldb, kbase;
} mm_params;

/* gemm tile configurations: WG_M x WG_N threads, an 8 x 8 micro-tile each, a (8 WG_M) x
   (8 WG_N) tile, BK values of k per step, the next step's blocks prefetched into registers
   during the products ((blocks of A + blocks of B) = 1 or 2 per thread, or fewer blocks than
   threads: one each for the first ones); db: two tile buffers (one barrier per step); fast:
   interior tiles load without clamps. g2: the gemm2 entry points (BK 8, the 8 k of a step
   written out with the next k's fragments read before this k's products, accumulators in an
   array, vec4 stores of out when N % 4 == 0), with ufetch: an unconditional prefetch; pair:
   the lanes placed so that every fragment read is shared by lane pairs (round 15); inc: the
   loads and stores of interior tiles at indices computed once per tile (round 18). */
typedef struct tile_cfg {
    const char *name;
    uint32_t wg_m, wg_n, bk, db, fast;
    uint32_t g2, ufetch, pair, inc;
} tile_cfg;

enum { T128 = 0, T128SB, T64, T64K8, T64X128K8XP, T128K8XUPI, NTILES };

/* The defaults and their fallbacks (pick_tile); every other configuration measured in
   bench/notes/matmul.md (rounds 1 - 18) lost to these and was removed with its code. */
static const tile_cfg TILES[NTILES] = {
    [T128] = { "t128", 16, 16, 16, 1, 0 },        /* 256 threads, 32 KiB, two buffers           */
    [T128SB] = { "t128sb", 16, 16, 16, 0, 0 },    /* one buffer, two barriers per step, 16 KiB  */
    [T64] = { "t64", 8, 8, 16, 1, 0 },            /* 64 threads: 4x the workgroups, 16 KiB      */
    [T64K8] = { "t64k8", 8, 8, 8, 1, 0 },         /* 8 KiB: adapters with little workgroup memory */
    /* gemm2, BK 8, the 8 k of a step written out (round 14), lanes paired for workgroup-memory
       reads (round 15): round 16's half tile of 128 threads (four workgroups per SM where two
       128-tiles fit, barriers across 4 warps instead of 8, finer waves), the default until
       round 18 and the first fallback since */
    [T64X128K8XP] = { "t64x128k8xp", 8, 16, 8, 1, 1, 1, 0, 1, 0 },
    /* the 128-tile with an unconditional prefetch (round 14) and the loads and stores of
       interior tiles at indices computed once per tile (inc, round 18): the default */
    [T128K8XUPI] = { "t128k8xupi", 16, 16, 8, 1, 1, 1, 1, 1, 1 },
};

/* The FLAGS override of matmul.wgsl: DB, FAST, UFETCH, PAIR, INC. */
#define TILE_FLAGS(db, fast, ufetch, pair, inc) \
    ((uint32_t)(db) | (uint32_t)(fast) << 1 | (uint32_t)(ufetch) << 2 | (uint32_t)(pair) << 3 | (uint32_t)(inc) << 4)

#define GROUP_M 8            /* tile rows per launch group (L2 reuse) */
#define GEMV_WG 256          /* threads of the matrix-vector and reduce kernels */
#define GEMV_WG_WIDE 512     /* threads of a gemv_cols workgroup on a GPU for 4096 - 8191 columns ... */
#define GEMV_QUADS_WIDE 8    /* ... with 8 k-quads in flight per thread (H200, round 39: 1x4096x4096 19.8 -> 19.3 us
                                against 1024 x 4; 1024 x 8 is held to 64 registers a thread and spills) */
#define GEMV_ROWS 1          /* rows per workgroup of gemv_rows (H200: 1x4096x4096 20.2 -> 18.7 us against 4) ... */
#define GEMV_ROWS_SHORT 4    /* ... but for rows of K <= 1024 (one vec4 or less per thread) */
#define GEMV_ROWS_SHORTER 8  /* ... and K <= 512, where that leaves GEMV_ROWS_MIN_WG workgroups (H200, round 41:
                                1x4096x1024 9.3 -> 8.3 us, 1x4096x512 7.5 -> 5.4, 1x2048x768 5.4 -> 4.8) */
#define GEMV_ROWS_MIN_WG 512 /* fewer workgroups lost: 1x768x768 3.8 -> 4.2 us with 4 rows (192 workgroups) */
#define GEMV_ROWS_CPU 4      /* rows per gemv_rows workgroup on a CPU adapter (lavapipe: the end-to-end decode 7.2 -> 18
                                tokens/s against 1) */
#define GEMV_QUADS 4         /* k-quads in flight per gemv_cols4 thread (16 rows; H200, round 21: matmul
                                1x4096x4096 20.2 us with 4 or 1, 26.1 with 2) */
/* matmul_bt through a transposed copy of b (round 12): the copy moves 8 N K bytes, about
   44 / M of the product's time on the H200 (3.3 TB/s against 36 TFLOP/s), so against the
   measured gain of 5 - 10% (128-tiles) it pays from M of about 550; BTT_MIN_M keeps a margin
   (with the 64 x 128 tiles of round 16 the gain was 14 - 21%, with round 18's 128-tiles
   6 - 10%, measured at M = 2048 - 8192). CPU
   adapters keep the direct kernel (lavapipe: no gain), and so does a b above BTT_MAX_BYTES
   (the copy stays allocated in the engine). */
#define BTT_MIN_M 1024
#define BTT_MAX_BYTES (256ull << 20)
/* matmul and matmul_bt (after b's copy) through a transposed copy of a, run as matmul_at
   (round 19): the matmul_at kernel loads neither operand along K, and on the H200 ran
   12% faster than the matmul kernel (4096^3: 2960 against 3353 us). The copy moves 8 M K
   bytes, about 50 / N of the product's time there, so it pays from N of about 400;
   ATT_MIN_N keeps a margin, ATT_MIN_M the one of BTT_MIN_M. CPU adapters and an a above
   ATT_MAX_BYTES keep the direct kernel. */
#define ATT_MIN_M 1024
#define ATT_MIN_N 512
#define ATT_MAX_BYTES (256ull << 20)
/* An operand the gemm reads along M or N (a of matmul_at, b of matmul and matmul_at) whose
   rows are not whole vec4 (M or N not a multiple of 4) is read in scalars; a copy with its
   rows padded (pad_rows) lets the gemm read it in vec4 (round 30: matmul_at 4095^3 ran at
   0.60 of PyTorch against 0.91 at 4096^3). The copy moves 8 bytes per element, about 50 / n
   of the product's time on the H200 for the other side n of the output, so PAD_MIN_OTHER
   keeps a margin as ATT_MIN_N does; the same byte cap as the transposed copies. */
#define PAD_MIN_OTHER 512
#define PAD_MAX_BYTES (256ull << 20)
/* K not a multiple of the tile's step BK: the gemm runs the first K - K % BK values of k
   without a partial step, then a second pass over all tiles adds the last K % BK into out
   (round 30: on the H200 the partial step inside the loop made matmul_at 4096 x 4096 x 4095
   8% slower than 4096^3, after the loop 18%; the pass costs about a read and a write of out,
   8 M N bytes, against 2 M N K multiply-adds: below 3% from K of about KREM_MIN). Only with
   N % 4 == 0, where the pass adds vec4 at a time: at 4095^3 its scalar additions cost 240 us,
   more than the partial step they replace. */
#define KREM_MIN 1024
#define FILL_THREADS 65536   /* below this many threads, long-K problems split K */
#define MAX_SPLIT 64
/* The split-K cost model of the tiles with 8 x 8 outputs per thread (plan_split): the SMs
   of the GPU it was fitted on (H200: 132), and what one byte of workspace traffic costs in
   multiply-adds there (about 15 T FMA/s against 3 TB/s). A GPU with other numbers gets a
   split that is still sound, only tuned less closely. */
#define MODEL_SMS 132
#define FMA_PER_BYTE 5
/* The last round's model (plan_tail, round 28): a workgroup alone on an SM runs at ALONE_RATE
   of the rate the SM gives two (round 22); a K-slice of a last-round tile costs PIECE_OVH_K
   values of K more than its length (its start, its block of the workspace written and read
   back); a split is made for a predicted gain of TAIL_MIN_GAIN. Fitted on the H200's 4096^3
   forced splits (3 - 16 slices: within 0.5% on all eight) and 8192^3. */
#define ALONE_RATE 0.94
#define PIECE_OVH_K 41
#define TAIL_MIN_GAIN 0.005

typedef struct variant {
    int tile;          /* index into TILES, or -1: automatic */
    bool nogemv;
    bool gemv_c4;      /* gemv_cols4 instead of gemv_cols */
    uint32_t splitk;   /* 0: automatic */
    uint32_t gemv_rows; /* 0: automatic */
    uint32_t gemv_cols; /* 0: automatic */
    uint32_t gemv_q;    /* 0: GEMV_QUADS */
    uint32_t gemv_wg;   /* 0: GEMV_WG */
    int gemv_sg;        /* gemv_cols4's sum over its k-groups by subgroup shuffles: 0 by rule, 1 always, -1 never */
    uint32_t group_m;   /* 0: GROUP_M */
    int btt;           /* matmul_bt as matmul on a transposed copy of b: 0 by rule, 1 always, -1 never */
    int att;           /* matmul and matmul_bt as matmul_at on a transposed copy of a: the same */
    int pad;           /* operands read along M or N whose rows are not whole vec4, through copies
                          with padded rows: the same */
    int kpad;          /* both operands copied: zero rows up to whole tile steps of K (0 by rule, -1 never) */
    int krem;          /* the last K % BK values of k in a second pass: the same */
    bool fresh;        /* never reuse a transposed copy */
    uint32_t tail;     /* last-round tiles split along K: 0 by rule */
    uint32_t tailk;    /* their slices: 0 by rule */
    bool notail;
} variant;

static uint32_t tile_m(const tile_cfg *c) { return c->wg_m * 8; }
static uint32_t tile_n(const tile_cfg *c) { return c->wg_n * 8; }
static uint32_t threads_of(const tile_cfg *c) { return c->wg_m * c->wg_n; }

static uint32_t smem_bytes(const tile_cfg *c)
{
    return (c->db + 1) * c->bk * (tile_m(c) + tile_n(c)) * 4;
}

static bool tile_fits(const wgml_context *ctx, const tile_cfg *c)
{
    uint32_t nt = threads_of(c);
    return smem_bytes(c) <= ctx->limits.maxComputeWorkgroupStorageSize && nt <= ctx->limits.maxComputeInvocationsPerWorkgroup &&
           nt <= ctx->limits.maxComputeWorkgroupSizeX;
}

/* Parses $WGML_MATMUL_VARIANT. A token it does not know, or a tile configuration the adapter
   cannot hold, is an error: a benchmark must never time another kernel than it asked for. */
static wgml_status read_variant(wgml_context *ctx, const char *fn, variant *v)
{
    *v = (variant){ .tile = -1, .gemv_c4 = true };   /* gemv_cols4: measured faster on the H200 */
    const char *s = getenv("WGML_MATMUL_VARIANT");
    while (s && *s) {
        size_t n = strcspn(s, ",");
        bool known = false;
        for (int i = 0; i < NTILES; i++)
            if (strlen(TILES[i].name) == n && strncmp(s, TILES[i].name, n) == 0) {
                if (!tile_fits(ctx, &TILES[i]))
                    return wgml__fail(ctx, WGML_ERROR_LIMIT,
                                      "%s: WGML_MATMUL_VARIANT asks for %s, which needs %u bytes of workgroup memory and %u "
                                      "invocations; the adapter has %u and %u",
                                      fn, TILES[i].name, smem_bytes(&TILES[i]), threads_of(&TILES[i]),
                                      ctx->limits.maxComputeWorkgroupStorageSize, ctx->limits.maxComputeInvocationsPerWorkgroup);
                v->tile = i;
                known = true;
            }
        if (n == 6 && strncmp(s, "nogemv", 6) == 0) {
            v->nogemv = true;
            known = true;
        }
        if (n == 6 && strncmp(s, "gemvc4", 6) == 0) {
            v->gemv_c4 = true;
            known = true;
        }
        if ((n == 6 && strncmp(s, "gemvsg", 6) == 0) || (n == 8 && strncmp(s, "nogemvsg", 8) == 0)) {
            v->gemv_sg = n == 6 ? 1 : -1;
            known = true;
        }
        if (n == 6 && strncmp(s, "gemvc1", 6) == 0) {   /* the one-column gemv_cols kernel */
            v->gemv_c4 = false;
            known = true;
        }
        if ((n == 3 && strncmp(s, "btt", 3) == 0) || (n == 5 && strncmp(s, "nobtt", 5) == 0)) {
            v->btt = n == 3 ? 1 : -1;
            known = true;
        }
        if (n == 5 && strncmp(s, "fresh", 5) == 0) {
            v->fresh = true;
            known = true;
        }
        if (n == 6 && strncmp(s, "notail", 6) == 0) {
            v->notail = true;
            known = true;
        }
        if ((n == 3 && strncmp(s, "att", 3) == 0) || (n == 5 && strncmp(s, "noatt", 5) == 0)) {
            v->att = n == 3 ? 1 : -1;
            known = true;
        }
        if ((n == 3 && strncmp(s, "pad", 3) == 0) || (n == 5 && strncmp(s, "nopad", 5) == 0)) {
            v->pad = n == 3 ? 1 : -1;
            known = true;
        }
        if (n == 6 && strncmp(s, "nokpad", 6) == 0) {
            v->kpad = -1;
            known = true;
        }
        if ((n == 4 && strncmp(s, "krem", 4) == 0) || (n == 6 && strncmp(s, "nokrem", 6) == 0)) {
            v->krem = n == 4 ? 1 : -1;
            known = true;
        }
        /* name=value tokens */
        const struct { const char *name; uint32_t lo, hi; bool pow2; uint32_t *dst; } nums[] = {
            { "splitk", 1, 4096, false, &v->splitk },
            { "gemvrows", 1, 8, true, &v->gemv_rows },
            { "gemvcols", 1, 64, true, &v->gemv_cols },
            { "gemvq", 1, 16, false, &v->gemv_q },
            { "gemvwg", 64, 1024, true, &v->gemv_wg },
            { "groupm", 1, 64, false, &v->group_m },
            { "tail", 1, 4096, false, &v->tail },
            { "tailk", 2, 4096, false, &v->tailk },
        };
        const char *eq = memchr(s, '=', n);
        for (size_t i = 0; eq && i < sizeof nums / sizeof nums[0]; i++) {
            size_t len = (size_t)(eq - s), vlen = n - len - 1;
            if (len != strlen(nums[i].name) || strncmp(s, nums[i].name, len) != 0 || vlen == 0 || vlen > 8) continue;
            char num[16];
            memcpy(num, eq + 1, vlen);
            num[vlen] = 0;
            char *end;
            unsigned long x = strtoul(num, &end, 10);
            if (*end == 0 && x >= nums[i].lo && x <= nums[i].hi && (!nums[i].pow2 || (x & (x - 1)) == 0)) {
                *nums[i].dst = (uint32_t)x;
                known = true;
            }
        }
        if (!known && n > 0)
            return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: WGML_MATMUL_VARIANT has an unknown token \"%.*s\"", fn,
                              (int)n, s);
        s += n;
        if (*s == ',') s++;
    }
    if (v->gemv_wg && (v->gemv_wg > ctx->limits.maxComputeInvocationsPerWorkgroup || v->gemv_wg > ctx->limits.maxComputeWorkgroupSizeX))
        return wgml__fail(ctx, WGML_ERROR_LIMIT, "%s: WGML_MATMUL_VARIANT asks for gemv_cols workgroups of %u invocations; the adapter has %u",
                          fn, v->gemv_wg, ctx->limits.maxComputeInvocationsPerWorkgroup);
    return WGML_OK;
}

static uint64_t tiles_of(uint32_t M, uint32_t N, uint32_t side)
{
    return (uint64_t)wgml__ceil_div(M, side) * wgml__ceil_div(N, side);
}

/* The tile configuration for an M x N output with K-long products: 128-tiles when they
   give at least 128 workgroups (about one per SM of a large GPU) or when K is long enough
   for split-K to fill the GPU anyway (H200, weight gradients 768 x 768 x 8192: 384 us
   against 513 us with 64-tiles), else 64-tiles; each falls back to the configurations
   with less workgroup memory when the adapter cannot hold it. */
#define LONG_K 2048
static const tile_cfg *pick_tile(const wgml_context *ctx, const variant *v, uint32_t M, uint32_t N, uint32_t K)
{
    if (v->tile >= 0) return &TILES[v->tile];   /* checked by read_variant */
    /* t128k8xupi first: measured fastest of the tile variants on the H200 (round 18 of
       bench/notes/matmul.md), then round 16's 64 x 128 tile (12 KiB), then t128sb (round 2's winner) */
    static const int big[] = { T128K8XUPI, T64X128K8XP, T128SB, T128, T64, T64K8 };
    static const int small[] = { T64, T64K8, T128, T128SB };
    bool large = tiles_of(M, N, 128) >= 128 || K >= LONG_K;
    const int *order = large ? big : small;
    size_t n = large ? sizeof big / sizeof big[0] : sizeof small / sizeof small[0];
    for (size_t i = 0; i < n; i++)
        if (tile_fits(ctx, &TILES[order[i]])) return &TILES[order[i]];
    return NULL;
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
} mm_plan;

/* Elements between stored rows of A and of B in a layout (no padding). */
static uint32_t natural_lda(int layout, uint32_t M, uint32_t K) { return layout == LAYOUT_TN ? M : K; }
static uint32_t natural_ldb(int layout, uint32_t N, uint32_t K) { return layout == LAYOUT_NT ? K : N; }

/* The gemm of a tile configuration on operands stored with rows lda and ldb elements apart
   (natural_lda / natural_ldb, or a padded copy's); the caller binds them (pl->x, pl->y). */
static void plan_gemm(mm_plan *pl, const tile_cfg *c, const variant *v, int layout, uint32_t M, uint32_t N, uint32_t K,
                      uint32_t lda, uint32_t ldb)
{
    /* vec4 loads of an operand whose stored rows are whole vec4; scalar loads of the other
       (VECB is set only where it differs from VEC: the usual pipelines keep their keys) */
    bool vec = lda % 4 == 0, vecb = ldb % 4 == 0;
    uint32_t flags = TILE_FLAGS(c->db, c->fast, c->ufetch, c->pair, c->inc);
    /* gemm2_v4 binds out as vec4: every row of out starts on a vec4 when N % 4 == 0 (and the
       split-K workspace slices are multiples of 4 elements apart) */
    const char *entry = !c->g2 ? "gemm" : N % 4 == 0 ? "gemm2_v4" : "gemm2";
    pl->kernel = (wgml__kernel){ .file = "matmul", .entry = entry, .layout = "urrw", .nconst = 6,
                                 .constants = { { "LAYOUT", layout }, { "VEC", vec }, { "WG_M", c->wg_m }, { "WG_N", c->wg_n },
                                                { "BK", c->bk }, { "FLAGS", flags } } };
    if (vecb != vec) wgml__add_constant(&pl->kernel, "VECB", vecb);
    uint32_t tn = wgml__ceil_div(N, tile_n(c));
    pl->prm = (mm_params){ .M = M, .N = N, .K = K, .kchunk = K, .tiles_n = tn,
                           .tiles = wgml__ceil_div(M, tile_m(c)) * tn,
                           .group_m = v->group_m ? v->group_m : GROUP_M, .lda = lda, .ldb = ldb };
    pl->workgroups = pl->prm.tiles;
    pl->threads = threads_of(c);
    pl->min_chunk = 256;
    /* the wave model knows the tiles with 8 x 8 outputs per thread and at least 128 threads
       (about 128 registers: 512 threads per SM of the H200) */
    bool modelled = pl->threads >= 128;
    pl->tile_fmas = modelled ? tile_m(c) * tile_n(c) : 0;
    pl->tile_elems = tile_m(c) * tile_n(c);
    pl->bk = c->bk;
}

/* out[r] = dot(x[r, :], y) for `rows` rows of length K, x rows contiguous. */
static void plan_gemv_rows(const wgml_context *ctx, mm_plan *pl, const variant *v, uint32_t rows, uint32_t K,
                           const wgml_tensor *x, const wgml_tensor *y)
{
    /* rows per workgroup: on a GPU one, so that each row's reads stream through its own
       workgroup, except for short rows, where a workgroup of one row has too little to read
       beside its reduction, as long as the workgroups still fill the GPU */
    uint32_t gr = v->gemv_rows;
    if (!gr) {
        gr = ctx->cpu_adapter ? GEMV_ROWS_CPU : K <= 512 ? GEMV_ROWS_SHORTER : K <= 1024 ? GEMV_ROWS_SHORT : GEMV_ROWS;
        if (!ctx->cpu_adapter && rows / gr < GEMV_ROWS_MIN_WG) gr = GEMV_ROWS;
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
static wgml_status plan_gemv_cols(wgml_context *ctx, const char *fn, mm_plan *pl, const variant *v, uint32_t cols, uint32_t K,
                                  const wgml_tensor *x, const wgml_tensor *y)
{
    /* vec4 columns per workgroup: enough workgroups (N / 16 >= 256 from N = 4096) while each
       warp still reads 64-byte row segments; on a GPU from N = 4096 to 8191, workgroups of 8
       (128 - 255 of them, one per SM by registers) in 512 threads of 8 quads each (H200,
       rounds 22 and 39 of bench/notes/matmul.md: 1x4096x4096 20.2 -> 19.7 us with 1024
       threads of 4 quads, -> 19.3 with 512 of 8) */
    bool wide = !ctx->cpu_adapter && cols >= 4096 && cols < 8192 && ctx->limits.maxComputeInvocationsPerWorkgroup >= GEMV_WG_WIDE &&
                ctx->limits.maxComputeWorkgroupSizeX >= GEMV_WG_WIDE;
    uint32_t c4 = v->gemv_cols ? v->gemv_cols : cols >= 8192 || wide ? 8 : cols >= 2048 ? 4 : 2;
    uint32_t wg = v->gemv_wg ? v->gemv_wg : wide ? GEMV_WG_WIDE : GEMV_WG;
    /* the sum over the k-groups by subgroup shuffles and one barrier (H200, round 35 of
       bench/notes/matmul.md: a tree of 7 barriers cost 0.9 us at 1 x 4096 x 4096): where every
       subgroup size the adapter may use is full in a workgroup and holds C4 columns */
    const wgml_adapter_info *in = &ctx->info;
    bool sg_fits = in->subgroups && in->subgroup_min_size >= c4 && in->subgroup_max_size && wg % in->subgroup_max_size == 0;
    if (v->gemv_sg > 0 && (!v->gemv_c4 || !sg_fits))
        return wgml__fail(ctx, WGML_ERROR_LIMIT, "%s: WGML_MATMUL_VARIANT asks for gemvsg; the adapter's subgroups (%s, %u..%u "
                          "invocations) do not hold %u vec4 columns in workgroups of %u", fn, in->subgroups ? "offered" : "none",
                          in->subgroup_min_size, in->subgroup_max_size, c4, wg);
    bool sg = v->gemv_c4 && sg_fits && v->gemv_sg >= 0;
    uint32_t gq = v->gemv_q ? v->gemv_q : wide ? GEMV_QUADS_WIDE : GEMV_QUADS;
    pl->kernel = (wgml__kernel){ .file = "matmul", .entry = sg ? "gemv_cols4_sg" : v->gemv_c4 ? "gemv_cols4" : "gemv_cols",
                                 .layout = "urrw", .nconst = v->gemv_c4 ? 3 : 2, .subgroups = sg,
                                 .constants = { { "VEC", cols % 4 == 0 }, { "WGV", wg },
                                                { "GQ", gq } } };
    pl->prm = (mm_params){ .M = cols, .N = c4, .K = K, .kchunk = K, .tiles = wgml__ceil_div(cols, 4 * c4) };
    pl->x = wgml__t(x);
    pl->y = wgml__t(y);
    pl->workgroups = pl->prm.tiles;
    pl->threads = wg;
    pl->min_chunk = 1024;
    return WGML_OK;
}

/* matmul_bt as matmul on b transposed (round 12 of bench/notes/matmul.md: on the H200
   matmul_bt 4096^3 ran 9% slower than matmul; through the copy it runs at matmul's speed,
   4171 -> 3820 us, and the training step's bt products gain 5 - 8%). The copy's kernel:
   4 x 4 blocks of vec4 when N and K are multiples of 4, else 32 x 32 blocks of scalars
   through workgroup memory (transpose_pad: any sizes, rows padded, and zero rows after the
   K of b's when the copy has kc > K rows). */
static wgml__kernel transpose_kernel(uint32_t N, uint32_t K, uint32_t kc)
{
    return (wgml__kernel){ .file = "matmul", .entry = N % 4 == 0 && K % 4 == 0 && kc == K ? "transpose_nk" : "transpose_pad",
                           .layout = "urw" };
}

/* The row length of a transposed copy of an operand with n rows: padded to whole vec4, so
   that the product reads the copy in vec4 whatever n is. */
static uint32_t copy_ld(uint32_t n) { return (uint32_t)(((uint64_t)n + 3) / 4 * 4); }

/* A copy of 4 * copy_ld(rows) * k bytes fits one storage binding and u32 indices. */
static bool copy_fits(const wgml_context *ctx, uint32_t rows, uint32_t k)
{
    uint64_t bytes = 4ull * copy_ld(rows) * k;
    return bytes <= ctx->limits.maxStorageBufferBindingSize && bytes / 4 <= UINT32_MAX;
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

static const wgml__kernel reduce_kernel = { .file = "matmul", .entry = "splitk_reduce", .layout = "urw", .nconst = 1,
                                            .constants = { { "WGV", GEMV_WG } } };

/* Time, in tile times of one SM, of n workgroups of w tile times each started in launch order
   on MODEL_SMS SMs of two workgroup slots (round 28 of bench/notes/matmul.md): waves of two per
   SM take 2 w; a last wave of at most one per SM takes w / ALONE_RATE, a fuller one 2 w. */
static double slot_time(uint64_t n, double w)
{
    uint64_t q = n / (2 * MODEL_SMS), rem = n % (2 * MODEL_SMS);
    double t = 2.0 * w * (double)q;
    if (rem) t += rem <= MODEL_SMS ? w / ALONE_RATE : 2.0 * w;
    return t;
}

/* The rule's split of the last round: the r = T mod MODEL_SMS tiles after T - r whole ones, in
   the number of K-slices (at least min_chunk long, whole multiples of 16) that the slot model
   times fastest, the slices after the whole tiles (a second dispatch: Dawn's barrier before it
   lets no slice start before the last whole tile ends). Returns the predicted gain over the
   unsplit product (0: below TAIL_MIN_GAIN) and sets the tiles, slices and chunk; only for the
   modelled tiles with at least 4 full rounds (where the model was fitted), and slices whose
   workspace fits one binding of the adapter. */
static double tail_gain(const wgml_context *ctx, const mm_plan *pl, uint32_t *tail, uint32_t *slices, uint32_t *chunk)
{
    uint32_t T = pl->prm.tiles, K = pl->prm.K, r = T % MODEL_SMS;
    double best = 0.0;
    if (!pl->tile_fmas || T < 4 * MODEL_SMS || r == 0) return 0.0;
    double whole = slot_time(T, 1.0), rest = slot_time(T - r, 1.0);
    for (uint32_t S = 2; S <= K / pl->min_chunk && S <= MAX_SPLIT; S++) {
        uint32_t c = (wgml__ceil_div(K, S) + 15) / 16 * 16, s = wgml__ceil_div(K, c);
        if (s < 2 || 4ull * r * s * pl->tile_elems > ctx->limits.maxStorageBufferBindingSize) continue;
        double gain = 1.0 - (rest + slot_time((uint64_t)r * s, (double)(c + PIECE_OVH_K) / K)) / whole;
        if (gain > best) {
            best = gain;
            *tail = r;
            *slices = s;
            *chunk = c;
        }
    }
    return best >= TAIL_MIN_GAIN ? best : 0.0;
}

/* Modelled cost of S K-slices of a tiled product, in multiply-add slots: the SM with the most
   workgroups sets the time, each workgroup as long as its slice, plus the workspace written
   and read back by splitk_reduce. Quantized per SM, not per workgroup slot: a workgroup alone
   on an SM runs nearly as fast as the SM does with its two (H200, round 21 of
   bench/notes/matmul.md: 768 x 768 x 8192 unsplit, 36 workgroups, 0.33 TFLOP/s each against
   0.35 per SM at full load), so a 384-tile output takes 3 workgroup times unsplit and 6 half
   ones in 2 slices: no gain (measured 242 against 260 us at 8192 x 768 x 768). */
static double split_cost(const mm_plan *pl, uint64_t mn, uint32_t S)
{
    uint64_t w = MODEL_SMS;
    uint64_t waves = (pl->workgroups * S + w - 1) / w;
    double compute = (double)waves * w * pl->tile_fmas * wgml__ceil_div(pl->prm.K, S);
    return compute + (S > 1 ? (double)FMA_PER_BYTE * 8.0 * S * mn : 0.0);
}

/* Number of K-slices: forced by the variant; for the modelled tiles the cheapest by split_cost
   (H200, round 21 of bench/notes/matmul.md: 768 x 768 x 8192 takes 7 slices, 820 -> 225 us
   measured; 8192 x 768 x 768 none); otherwise enough to reach FILL_THREADS when the output gives
   fewer. Every slice is at least min_chunk long; S is limited by the largest workspace the
   adapter can bind. Sets kchunk. */
static uint32_t plan_split(const wgml_context *ctx, mm_plan *pl, const variant *v, uint64_t mn)
{
    uint32_t K = pl->prm.K, S = 1, gran = 16;
    if (v->splitk) {
        S = v->splitk;
        gran = 4;
    } else if (pl->tile_fmas) {
        /* split for a predicted gain of 2% or more (round 22: 2048 x 11008 x 4096 in 2 slices,
           predicted 2.7%, measured 2.9%), into the fewest slices within 3% of the best that
           still gain 2% */
        uint32_t most = K / pl->min_chunk;
        if (most > MAX_SPLIT) most = MAX_SPLIT;
        double whole = split_cost(pl, mn, 1), best = whole;
        for (uint32_t n = 2; n <= most; n++) {
            double c = split_cost(pl, mn, n);
            if (c < best) best = c;
        }
        if (best <= 0.98 * whole)
            for (S = 2; S < most; S++) {
                double c = split_cost(pl, mn, S);
                if (c <= 1.03 * best && c <= 0.98 * whole) break;
            }
        /* the last round split instead, where that is predicted to gain more (round 28:
           2048 x 11008 x 4096) */
        uint32_t t, ts, tc;
        if (S > 1 && !v->notail && tail_gain(ctx, pl, &t, &ts, &tc) > 1.0 - split_cost(pl, mn, S) / whole) S = 1;
    } else if (pl->workgroups * pl->threads < FILL_THREADS && K >= 2 * pl->min_chunk) {
        uint64_t want = (FILL_THREADS + pl->workgroups * pl->threads - 1) / (pl->workgroups * pl->threads);
        uint64_t most = K / pl->min_chunk;
        S = (uint32_t)(want < most ? want : most);
        if (S > MAX_SPLIT) S = MAX_SPLIT;
    }
    uint64_t mnp = (mn + 3) & ~(uint64_t)3;
    uint64_t room = ctx->limits.maxStorageBufferBindingSize / (mnp * 4);
    if (room > 0xFFFFFFF0u / mnp) room = 0xFFFFFFF0u / mnp;   /* 32-bit indexing of the workspace */
    if (S > room) S = (uint32_t)room;
    if (S <= 1) {
        pl->prm.kchunk = K;
        return 1;
    }
    uint32_t chunk = (wgml__ceil_div(K, S) + gran - 1) / gran * gran;
    pl->prm.kchunk = chunk;
    return wgml__ceil_div(K, chunk);
}

/* The last round (rounds 27 - 28 of bench/notes/matmul.md). Unsplit, T tiles run in rounds of
   one tile per SM; where the last round is only partly full (8192^3: 4 tiles on 132 SMs;
   4096^3: 100) the other SMs wait for it. Those tiles run instead after the others, in
   K-slices over the whole GPU, and splitk_reduce_tiles adds the slices into out (H200: 8192^3
   -2.8%, 4096^3 -1.3%). For the gemm2 kernels: by tail_gain's rule, or as the variant forces.
   Returns the number of tail tiles (0: none) and their slices and K range per slice. */
static uint32_t plan_tail(const wgml_context *ctx, const mm_plan *pl, const variant *v, uint32_t *slices, uint32_t *chunk)
{
    uint32_t T = pl->prm.tiles, K = pl->prm.K, tail = v->tail;
    if (v->notail || strncmp(pl->kernel.entry, "gemm2", 5) != 0) return 0;
    if (!tail && !v->tailk) {
        uint32_t t = 0;
        return tail_gain(ctx, pl, &t, slices, chunk) > 0.0 ? t : 0;
    }
    if (!tail) {   /* tailk alone: the last round's tiles, or the last tile */
        uint32_t r = T % MODEL_SMS;
        tail = r && r < T ? r : 1;
    }
    uint32_t S = v->tailk ? v->tailk : MODEL_SMS / tail;
    if (!v->tailk && S > K / pl->min_chunk) S = K / pl->min_chunk;
    if (S < 2) return 0;
    uint32_t c = (wgml__ceil_div(K, S) + 7) / 8 * 8;   /* whole 8-steps of the tile: its fast path */
    *chunk = c;
    *slices = wgml__ceil_div(K, c);
    return *slices >= 2 ? tail : 0;
}

/* K-slices of an M x N x K product on the default large tile (t128k8xupi) with no variant:
   the split-K model's choice, for test_internal (the model's documented choices). */
uint32_t wgml__matmul_model_slices(const wgml_context *ctx, uint32_t M, uint32_t N, uint32_t K)
{
    variant v = { .tile = -1 };
    mm_plan pl = { 0 };
    plan_gemm(&pl, &TILES[T128K8XUPI], &v, LAYOUT_TN, M, N, K, M, N);
    return plan_split(ctx, &pl, &v, (uint64_t)M * N);
}

/* The last round's tiles and their slices (plan_tail) for the same, for test_internal. */
uint32_t wgml__matmul_model_tail(const wgml_context *ctx, uint32_t M, uint32_t N, uint32_t K, uint32_t *slices)
{
    variant v = { .tile = -1 };
    mm_plan pl = { 0 };
    uint32_t chunk = 0;
    *slices = 0;
    plan_gemm(&pl, &TILES[T128K8XUPI], &v, LAYOUT_TN, M, N, K, M, N);
    if (plan_split(ctx, &pl, &v, (uint64_t)M * N) > 1) return 0;
    return plan_tail(ctx, &pl, &v, slices, &chunk);
}

/* A copy of an operand into an engine scratch, [kc, copy_ld(rows)]: of src [rows, K]
   transposed, or of src [K, rows] with its rows padded (kc >= K: rows past K zero). */
typedef struct copy_plan {
    bool on;
    bool transpose;
    const char *token, *what;   /* its WGML_MATMUL_VARIANT token and operand, for messages */
    const wgml_tensor *src;
    uint32_t rows;
    uint32_t slot;
    wgml__arg copy;
} copy_plan;

/* The copy of src is in its slot already: the products of one input with several weights
   (q, k and v of x) copy it once. */
static bool copy_current(const wgml_engine *e, const copy_plan *c, uint32_t kc)
{
    const wgml__derived *d = &e->derived[c->slot];
    return d->src == c->src->id && d->written == c->src->written && d->slot_id == c->copy.tensor->id && d->rows == c->rows &&
           d->cols == kc && d->transposed == c->transpose;
}

static wgml_status run(wgml_engine *e, const char *fn, int layout, uint32_t M, uint32_t N, uint32_t K, const wgml_tensor *a,
                       const wgml_tensor *b, wgml_tensor *out, bool acc)
{
    wgml_context *ctx = e->ctx;
    variant v;
    WGML_CHECK(read_variant(ctx, fn, &v));
    bool btt = false, att = false;
    copy_plan copies[2] = { 0 };   /* b's and a's transposed copies */
    mm_plan pl = { 0 };
    uint32_t krem = 0;   /* values of k left to the second pass */
    uint32_t kc = K;     /* rows of the copies */
    if (!v.nogemv && M == 1 && N == 1) {
        plan_gemv_rows(ctx, &pl, &v, 1, K, a, b);                 /* a dot product in every layout */
    } else if (!v.nogemv && N == 1 && layout != LAYOUT_TN) {
        plan_gemv_rows(ctx, &pl, &v, M, K, a, b);                 /* a [M, K] . b */
    } else if (!v.nogemv && M == 1 && layout == LAYOUT_NT) {
        plan_gemv_rows(ctx, &pl, &v, N, K, b, a);                 /* b [N, K] . a */
    } else if (!v.nogemv && M == 1) {
        WGML_CHECK(plan_gemv_cols(ctx, fn, &pl, &v, N, K, b, a));   /* a . b [K, N] */
    } else if (!v.nogemv && N == 1) {
        WGML_CHECK(plan_gemv_cols(ctx, fn, &pl, &v, M, K, a, b));   /* b . a [K, M] */
    } else {
        const tile_cfg *c = pick_tile(ctx, &v, M, N, K);
        if (!c)
            return wgml__fail(ctx, WGML_ERROR_LIMIT, "%s: the adapter's %u bytes of workgroup memory hold no matmul tile", fn,
                              ctx->limits.maxComputeWorkgroupStorageSize);
        uint64_t bytes = 4ull * copy_ld(N) * K, abytes = 4ull * copy_ld(M) * K;   /* the copies of b and a */
        if (layout == LAYOUT_NT && v.btt == 0)
            btt = !ctx->cpu_adapter && M >= BTT_MIN_M && bytes <= BTT_MAX_BYTES &&
                  bytes <= ctx->limits.maxStorageBufferBindingSize;
        else
            btt = layout == LAYOUT_NT && v.btt > 0;
        /* a's copy needs b as [K, N]: matmul's b, or matmul_bt's b copied */
        if (layout != LAYOUT_TN && v.att == 0)
            att = (layout == LAYOUT_NN || btt) && !ctx->cpu_adapter && M >= ATT_MIN_M && N >= ATT_MIN_N &&
                  abytes <= ATT_MAX_BYTES && abytes <= ctx->limits.maxStorageBufferBindingSize;
        else
            att = layout != LAYOUT_TN && v.att > 0;
        if (att && layout == LAYOUT_NT && !btt) {
            if (v.btt < 0)
                return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: WGML_MATMUL_VARIANT asks for att and nobtt; "
                                  "matmul_bt runs through a's copy only with b's", fn);
            btt = true;
        }
        /* a copied: matmul_at's kernel (b [K, N] as given to matmul, or b's copy) */
        int kl = att ? LAYOUT_TN : btt ? LAYOUT_NN : layout;
        /* then the operands read along M or N with rows not whole vec4, padded */
        bool rule = v.pad == 0 && !ctx->cpu_adapter;   /* forced: v.pad > 0; never: v.pad < 0 */
        uint64_t bind = ctx->limits.maxStorageBufferBindingSize;
        bool pada = kl == LAYOUT_TN && !att && M % 4 &&
                    (v.pad > 0 || (rule && N >= PAD_MIN_OTHER && abytes <= PAD_MAX_BYTES && abytes <= bind));
        bool padb = kl != LAYOUT_NT && !btt && N % 4 &&
                    (v.pad > 0 || (rule && M >= PAD_MIN_OTHER && bytes <= PAD_MAX_BYTES && bytes <= bind));
        copies[0] = (copy_plan){ btt || padb, btt, btt ? "btt" : "pad", "b", b, N, WGML__SCRATCH_MATMUL_T };
        copies[1] = (copy_plan){ att || pada, att, att ? "att" : "pad", "a", a, M, WGML__SCRATCH_MATMUL_A };
        /* both operands copied and K not whole tile steps: the copies carry zero rows up to the
           next step, and the gemm runs whole steps (round 33: no KPART, no second pass) */
        if (copies[0].on && copies[1].on && K % c->bk && v.kpad >= 0) {
            uint32_t ks = K + (c->bk - K % c->bk);
            if (copy_fits(ctx, M, ks) && copy_fits(ctx, N, ks)) kc = ks;
        }
        for (int i = 0; i < 2; i++) {
            if (!copies[i].on) continue;
            uint64_t cb = 4ull * copy_ld(copies[i].rows) * kc;
            if (!copy_fits(ctx, copies[i].rows, kc))
                return wgml__fail(ctx, WGML_ERROR_LIMIT, "%s: WGML_MATMUL_VARIANT asks for %s; the copy of %s (%llu bytes) "
                                  "exceeds the adapter's storage binding of %llu bytes or 2^32 elements", fn, copies[i].token,
                                  copies[i].what, (unsigned long long)cb,
                                  (unsigned long long)ctx->limits.maxStorageBufferBindingSize);
            WGML_CHECK(wgml__scratch(e, copies[i].slot, cb, &copies[i].copy));
        }
        /* the copies' rows are padded to whole vec4 */
        uint32_t lda = copies[1].on ? copy_ld(M) : natural_lda(kl, M, K), ldb = copies[0].on ? copy_ld(N) : natural_ldb(kl, N, K);
        plan_gemm(&pl, c, &v, kl, M, N, kc, lda, ldb);
        /* tiles past M (N) load an operand read along M (N) in vec4 without clamps (EDGE in
           matmul.wgsl): only where there are such tiles, so other pipelines stay as measured */
        bool edge_m = M % tile_m(c) && kl == LAYOUT_TN && lda % 4 == 0;
        bool edge_n = N % tile_n(c) && kl != LAYOUT_NT && ldb % 4 == 0;
        if (c->fast && (edge_m || edge_n)) wgml__add_constant(&pl.kernel, "EDGE", 1);
        /* the last K % BK values of k in a pass of their own (KREM_MIN) */
        if (kc % c->bk && K > c->bk && (v.krem > 0 || (v.krem == 0 && K >= KREM_MIN && N % 4 == 0))) {
            krem = K % c->bk;
            pl.prm.K = pl.prm.kchunk = K - krem;
        }
        pl.x = copies[1].on ? copies[1].copy : wgml__t(a);
        pl.y = copies[0].on ? copies[0].copy : wgml__t(b);
    }
    uint64_t mn = (uint64_t)M * N;
    uint32_t S = plan_split(ctx, &pl, &v, mn);
    uint32_t tail_slices = 0, tail_chunk = 0;
    uint32_t tail = S == 1 ? plan_tail(ctx, &pl, &v, &tail_slices, &tail_chunk) : 0;
    if (tail && tail >= pl.workgroups)
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: WGML_MATMUL_VARIANT asks for a last round of %u tiles; the "
                          "product has %llu", fn, tail, (unsigned long long)pl.workgroups);
    wgml__kernel rem_k = pl.kernel;   /* the pass over the last krem values of k: adds to out */
    wgml__add_constant(&rem_k, "ACC", 1);
    /* KPART where a K range (the whole, a slice, a last-round piece) ends inside a tile step:
       only those pipelines carry the per-step check (see matmul.wgsl) */
    bool kpart = pl.bk && (pl.prm.K % pl.bk || pl.prm.kchunk % pl.bk);
    if (kpart) wgml__add_constant(&pl.kernel, "KPART", 1);
    wgml__kernel reduce = reduce_kernel, tail_k = pl.kernel, tail_red = { 0 };
    if (tail && !kpart && tail_chunk % pl.bk) wgml__add_constant(&tail_k, "KPART", 1);
    if (tail) {
        /* the tail's slices as plain partial sums in blocks; their sum goes to out (with ACC) */
        wgml__add_constant(&tail_k, "COMPACT", 1);
        tail_red = (wgml__kernel){ .file = "matmul", .entry = "splitk_reduce_tiles", .layout = "urw" };
        for (uint32_t i = 0; i < pl.kernel.nconst; i++)
            wgml__add_constant(&tail_red, pl.kernel.constants[i].name, pl.kernel.constants[i].value);
        wgml__add_constant(&tail_red, "WGV", GEMV_WG);
        if (acc) wgml__add_constant(&tail_red, "ACC", 1);
    }
    /* ACC: out += the product, on the kernel that writes out (split-K: the slices stay plain partial sums) */
    if (acc) wgml__add_constant(S > 1 ? &reduce : &pl.kernel, "ACC", 1);
    WGPUComputePipeline pipe;
    WGPUBindGroupLayout bgl;
    uint32_t gx, gy, kx = 0, ky = 0;
    WGML_CHECK(wgml__grid(ctx, pl.workgroups - tail, &gx, &gy));
    if (krem) {
        WGML_CHECK(wgml__grid(ctx, pl.workgroups, &kx, &ky));
        WGML_CHECK(wgml__pipeline_get(e, &rem_k, &pipe, &bgl));
    }

    /* Compile and allocate what will be recorded first, so a failure records nothing (the
       transposed copies of b and a, recorded first, only write the engine's scratch). */
    WGML_CHECK(wgml__pipeline_get(e, &pl.kernel, &pipe, &bgl));
    for (int i = 0; i < 2; i++) {
        if (!copies[i].on) continue;
        wgml__kernel tk = copies[i].transpose ? transpose_kernel(copies[i].rows, K, kc) : pad_kernel;
        WGML_CHECK(wgml__pipeline_get(e, &tk, &pipe, &bgl));
    }
    uint64_t mnp = (mn + 3) & ~(uint64_t)3;
    uint32_t rx = 0, ry = 0;
    wgml__arg ws = wgml__t(out);   /* split-K: the slices' workspace */
    if (S > 1) {
        WGML_CHECK(wgml__pipeline_get(e, &reduce, &pipe, &bgl));
        WGML_CHECK(wgml__grid(ctx, wgml__ceil_div(mnp / 4, GEMV_WG), &rx, &ry));
        WGML_CHECK(wgml__scratch(e, WGML__SCRATCH_MATMUL, 4 * S * mnp, &ws));
        pl.prm.out_slice = (uint32_t)mnp;
    }
    uint64_t tail_vec4 = (uint64_t)tail * pl.tile_elems / 4;
    if (tail) {
        uint64_t bytes = 16 * tail_vec4 * tail_slices;
        if (bytes > ctx->limits.maxStorageBufferBindingSize)
            return wgml__fail(ctx, WGML_ERROR_LIMIT, "%s: WGML_MATMUL_VARIANT asks for a last round whose slices need %llu "
                              "bytes; the adapter binds %llu", fn, (unsigned long long)bytes,
                              (unsigned long long)ctx->limits.maxStorageBufferBindingSize);
        WGML_CHECK(wgml__pipeline_get(e, &tail_k, &pipe, &bgl));
        WGML_CHECK(wgml__pipeline_get(e, &tail_red, &pipe, &bgl));
        WGML_CHECK(wgml__grid(ctx, wgml__ceil_div(tail_vec4, GEMV_WG), &rx, &ry));
        WGML_CHECK(wgml__scratch(e, WGML__SCRATCH_MATMUL, bytes, &ws));
    }
    for (int i = 0; i < 2; i++) {
        if (!copies[i].on || (!v.fresh && copy_current(e, &copies[i], kc))) continue;
        if (copies[i].transpose)
            WGML_CHECK(record_transpose(e, copies[i].src, copies[i].rows, K, kc, copies[i].copy));
        else
            WGML_CHECK(record_pad(e, copies[i].src, copies[i].rows, K, kc, copies[i].copy));
        e->derived[copies[i].slot] = (wgml__derived){ copies[i].src->id, copies[i].src->written, copies[i].copy.tensor->id,
                                                      copies[i].rows, kc, copies[i].transpose };
    }
    wgml__arg args[3] = { pl.x, pl.y, S > 1 ? ws : wgml__t(out) };
    WGML_CHECK(wgml__dispatch(e, &pl.kernel, &pl.prm, sizeof pl.prm, args, 3, gx, gy, S));
    if (tail) {
        mm_params tp = pl.prm;
        tp.tile_base = (uint32_t)(pl.workgroups - tail);
        tp.kchunk = tail_chunk;
        wgml__arg targs[3] = { pl.x, pl.y, ws };
        WGML_CHECK(wgml__dispatch(e, &tail_k, &tp, sizeof tp, targs, 3, tail, 1, tail_slices));
        tp.K = tail_slices;
        tp.out_slice = tail;
        wgml__arg rargs[2] = { ws, wgml__t(out) };
        WGML_CHECK(wgml__dispatch(e, &tail_red, &tp, sizeof tp, rargs, 2, rx, ry, 1));
    } else if (S > 1) {
        mm_params rp = { .K = S, .tiles = (uint32_t)(mnp / 4), .out_slice = (uint32_t)mnp };
        wgml__arg rargs[2] = { ws, wgml__t(out) };
        WGML_CHECK(wgml__dispatch(e, &reduce, &rp, sizeof rp, rargs, 2, rx, ry, 1));
    }
    if (!krem) return WGML_OK;
    /* out += the product over the last krem values of k: every tile, one partial step */
    mm_params kp = pl.prm;
    kp.K = K;
    kp.kbase = K - krem;
    kp.kchunk = krem;
    kp.out_slice = 0;
    kp.tile_base = 0;
    wgml__arg kargs[3] = { pl.x, pl.y, wgml__t(out) };
    return wgml__dispatch(e, &rem_k, &kp, sizeof kp, kargs, 3, kx, ky, 1);
}

/* ---- validation ---------------------------------------------------------------------- */

static size_t last_dim(const wgml_tensor *t) { return t->shape[t->ndim - 1]; }

static wgml_status check_common(wgml_engine *e, const char *fn, const wgml_tensor *a, const wgml_tensor *b, const wgml_tensor *out)
{
    WGML_CHECK(wgml__check_engine(e, fn));
    WGML_CHECK(wgml__check_tensor(e, fn, "a", a, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "b", b, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "out", out, WGML_F32));
    WGML_CHECK(wgml__check_no_alias(e, fn, "out", out, "a", a));
    WGML_CHECK(wgml__check_no_alias(e, fn, "out", out, "b", b));
    WGML_CHECK(wgml__check_u32_numel(e, fn, "a", a));
    WGML_CHECK(wgml__check_u32_numel(e, fn, "b", b));
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

static wgml_status nn_product(wgml_engine *e, const char *fn, const wgml_tensor *a, const wgml_tensor *b,
                              wgml_tensor *out, bool acc)
{
    WGML_CHECK(check_common(e, fn, a, b, out));
    if (b->ndim != 2)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: b must be 2-D [K, N]; it has %u dimensions", fn, b->ndim);
    size_t K = b->shape[0], N = b->shape[1];
    if (last_dim(a) != K)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: a's last dimension is %zu; it must equal K = %zu, b's first dimension",
                          fn, last_dim(a), K);
    size_t M = wgml_tensor_numel(a) / K;
    WGML_CHECK(check_out(e, fn, out, M, N));
    return run(e, fn, LAYOUT_NN, (uint32_t)M, (uint32_t)N, (uint32_t)K, a, b, out, acc);
}

static wgml_status nt_product(wgml_engine *e, const char *fn, const wgml_tensor *a, const wgml_tensor *b,
                              wgml_tensor *out, bool acc)
{
    WGML_CHECK(check_common(e, fn, a, b, out));
    if (b->ndim != 2)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: b must be 2-D [N, K]; it has %u dimensions", fn, b->ndim);
    size_t N = b->shape[0], K = b->shape[1];
    if (last_dim(a) != K)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: a's last dimension is %zu; it must equal K = %zu, b's second dimension",
                          fn, last_dim(a), K);
    size_t M = wgml_tensor_numel(a) / K;
    WGML_CHECK(check_out(e, fn, out, M, N));
    return run(e, fn, LAYOUT_NT, (uint32_t)M, (uint32_t)N, (uint32_t)K, a, b, out, acc);
}

static wgml_status tn_product(wgml_engine *e, const char *fn, const wgml_tensor *a, const wgml_tensor *b,
                              wgml_tensor *out, bool acc)
{
    WGML_CHECK(check_common(e, fn, a, b, out));
    size_t M = last_dim(a), N = last_dim(b);
    size_t Ka = wgml_tensor_numel(a) / M, Kb = wgml_tensor_numel(b) / N;
    if (Ka != Kb)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE,
                          "%s: a is [K, M] with K = %zu rows (M = %zu, its last dimension), b is [K, N] with K = %zu rows "
                          "(N = %zu); the K must be equal",
                          fn, Ka, M, Kb, N);
    WGML_CHECK(check_out(e, fn, out, M, N));
    return run(e, fn, LAYOUT_TN, (uint32_t)M, (uint32_t)N, (uint32_t)Ka, a, b, out, acc);
}

wgml_status wgml_matmul(wgml_engine *e, const wgml_tensor *a, const wgml_tensor *b, wgml_tensor *out)
{
    return nn_product(e, "wgml_matmul", a, b, out, false);
}

wgml_status wgml_matmul_with(wgml_engine *e, const wgml_tensor *a, const wgml_tensor *b, wgml_tensor *out,
                             const wgml_matmul_options *opts)
{
    return nn_product(e, "wgml_matmul_with", a, b, out, opts && opts->accumulate);
}

wgml_status wgml_matmul_bt(wgml_engine *e, const wgml_tensor *a, const wgml_tensor *b, wgml_tensor *out)
{
    return nt_product(e, "wgml_matmul_bt", a, b, out, false);
}

wgml_status wgml_matmul_bt_with(wgml_engine *e, const wgml_tensor *a, const wgml_tensor *b, wgml_tensor *out,
                                const wgml_matmul_options *opts)
{
    return nt_product(e, "wgml_matmul_bt_with", a, b, out, opts && opts->accumulate);
}

wgml_status wgml_matmul_at(wgml_engine *e, const wgml_tensor *a, const wgml_tensor *b, wgml_tensor *out)
{
    return tn_product(e, "wgml_matmul_at", a, b, out, false);
}

wgml_status wgml_matmul_at_with(wgml_engine *e, const wgml_tensor *a, const wgml_tensor *b, wgml_tensor *out,
                                const wgml_matmul_options *opts)
{
    return tn_product(e, "wgml_matmul_at_with", a, b, out, opts && opts->accumulate);
}

/* The default variants, compiled by wgml_engine_warmup: the large-output gemm (t128k8xupi,
   see TILES) of each layout for sizes that are multiples of 4, the matrix-vector kernels of
   decode (gemv_cols4_sg only where the device has subgroups), the split-K reduction and the
   transposed copy. (gemv_cols4 in GEMV_WG_WIDE threads
   compiles at its first use: an adapter with fewer invocations per workgroup never builds it.) */
#define GEMM_DEFAULT(lay)                                                                                            \
    { .file = "matmul", .entry = "gemm2_v4", .layout = "urrw", .nconst = 6,                                             \
      .constants = { { "LAYOUT", lay }, { "VEC", 1 }, { "WG_M", 16 }, { "WG_N", 16 }, { "BK", 8 },                      \
                     { "FLAGS", TILE_FLAGS(1, 1, 1, 1, 1) } } }
const wgml__kernel wgml__matmul_kernels[] = {
    GEMM_DEFAULT(LAYOUT_NN),
    GEMM_DEFAULT(LAYOUT_NT),
    GEMM_DEFAULT(LAYOUT_TN),
    { .file = "matmul", .entry = "gemv_rows", .layout = "urrw", .nconst = 3,
      .constants = { { "VEC", 1 }, { "WGV", GEMV_WG }, { "GR", GEMV_ROWS } } },
    { .file = "matmul", .entry = "gemv_rows", .layout = "urrw", .nconst = 3,
      .constants = { { "VEC", 1 }, { "WGV", GEMV_WG }, { "GR", GEMV_ROWS_CPU } } },
    { .file = "matmul", .entry = "gemv_cols4", .layout = "urrw", .nconst = 3,
      .constants = { { "VEC", 1 }, { "WGV", GEMV_WG }, { "GQ", GEMV_QUADS } } },
    { .file = "matmul", .entry = "gemv_cols4_sg", .layout = "urrw", .nconst = 3, .subgroups = true,
      .constants = { { "VEC", 1 }, { "WGV", GEMV_WG }, { "GQ", GEMV_QUADS } } },
    { .file = "matmul", .entry = "splitk_reduce", .layout = "urw", .nconst = 1, .constants = { { "WGV", GEMV_WG } } },
    { .file = "matmul", .entry = "transpose_nk", .layout = "urw", .nconst = 1, .constants = { { "VEC", 1 } } },
};
const size_t wgml__matmul_kernel_count = sizeof wgml__matmul_kernels / sizeof wgml__matmul_kernels[0];
