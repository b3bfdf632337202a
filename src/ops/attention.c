/* Flash attention: forward, backward and single-query decoding (wgml_flash_attention*).
   Kernels: src/kernels/attention_prelude.wgsl (shared declarations) compiled with
   attention_forward.wgsl, attention_backward.wgsl or attention_decode.wgsl.

   The forward of seq_q > 1 runs `prefill`: blocks of 64 queries x 64 keys, head_dim
   streamed in chunks of 16 floats, online softmax, 24 KiB of workgroup memory
   (`prefill_lse` when the caller keeps the log-sum-exp). A caller that also keeps the
   scores for the backward (options.scores) stores them either way, so that forward runs as
   two register-tiled products instead, `fwd_s_mm` (the scores and each row's max per
   tile) and `fwd_pv_mm` (out and the log-sum-exp from them); with a mask or dropout, or
   head_dim % 4 == 2, `prefill_lse` stores the scores (WRITE_S). seq_q == 1 runs `decode`
   over splits of the keys, then `decode_combine` merges them. At wgml_precision F16 on an
   adapter with f16 subgroup matrices the forward of seq_q > 1 (without kept scores) runs
   `prefill_mma` (src/kernels/attention_mma.wgsl) on f16 copies of k and v instead, and
   the backward's products `mb_dkdv` and `mb_dq` (same file) on f16 copies of q, dout, k
   and v (and of each transposed) after the statistics pass.

   The backward first forms each query row's statistics (log-sum-exp, D = rowsum(dO * O)):
   from the kept log-sum-exp (`bwd_prep`), else by the forward's scores and softmax again
   (`prefill_stats`). Then `bwd_dkdv64` computes dk, dv per 64-key block and stores dS,
   and dq is a product over dS: `bwd_dq_mm` (dS^T dense, head_dim % 4 == 0) or
   `bwd_dq_ds64` (dS in 64 x 64 blocks). dS costs 16 KiB per block pair; the backward
   keeps at most DS_MAX_BYTES of it, in ranges of (batch, kv head) pairs, and where one
   pair alone needs more, `bwd_dq64` recomputes S and dP for dq instead. With kept scores
   `bwd_dkdv64` reads S rather than computing it (READ_S).

   The rules follow the adapter: every 64 x 64 kernel needs 256 invocations per
   workgroup and 24 KiB of workgroup storage, bwd_dkdv64 10 storage buffers. Where they do
   not fit, the tiled kernels (`fwd`, `bwd_dq`, `bwd_dkdv`: whole [rows][head_dim] tiles,
   shaped by the workgroup storage, pick_tiles) replace them, the forward's log-sum-exp
   then coming from `fwd`'s statistics mode and `lse_export`. The backward's head_dim chunk
   is 8 floats up to head_dim 64 and the largest of 32, 16, 8 that fits above (32 consumed
   8 steps at a time). GPUs build the prefill and 64 x 64 kernels per call with only the
   mask and dropout code it uses; CPU adapters build one pipeline with both (feat_of).
   Causal and windowed dispatches run their longest blocks first in groups of heads
   (order_heads). What these rules were measured against: bench/notes/attention.md.

   head_dim above 128 (GEMM_MAX_DIM; up to MAX_DIM 256, Gemma 3's) runs the tiled kernels
   on every adapter, as where the 64 x 64 ones do not fit. Why: those hold 1 or 2 vec4 of
   head_dim per thread in fixed registers (PF_OCV, GOCV) and products of at most 128
   columns (DQN), so a wider row would need new layouts of theirs, while the tiled kernels
   take any row their workgroup storage holds, with up to 8 vec4 of head_dim per lane (at
   256 and 32 KiB: blocks of 16 query rows forward, 8 rows backward). options.scores,
   which only the 64 x 64 kernels keep, is refused there. Decoding runs `decode` as at any
   head_dim (rows of up to 64 vec4, then at most 16 heads per workgroup).

   Nothing here reads the environment: tests reach the rules' other outcomes through the
   engine's tuning (src/ops/attention_tuning.h). */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DIM 256u
/* The 64 x 64 kernels hold at most 2 vec4 of head_dim per thread (PF_OCV, GOCV) or 128
   columns per workgroup (DQN): above this head_dim only the tiled kernels run. */
#define GEMM_MAX_DIM 128u
#define MAX_SEQ (1u << 26)
#define MAX_OFFSET (1u << 28)
#define LOG2E 1.4426950408889634

/* Mirrors struct Params of attention_prelude.wgsl. */
typedef struct attn_params {
    uint32_t batch, seq_q, seq_k, heads;
    uint32_t kv_heads, group, q_blocks, k_blocks;
    uint32_t causal;
    int32_t offset, window;
    uint32_t flags;
    float scale_log2;
    uint32_t drop_threshold;
    float drop_scale;
    uint32_t seed_key;
    uint32_t m_sb, m_sh, m_sq, m_sk;
    uint32_t total_wg;
    int32_t key_lo, key_hi;
    uint32_t splits;
    uint32_t keys_per_split, head_chunks, seed_key2;
    float neg_inf;
    float pos_inf, scale;
    uint32_t dim, d4;
    uint32_t subs, subs_rows;
    uint32_t bk0, order_heads;
} attn_params;
_Static_assert(sizeof(attn_params) == 144, "attn_params must match struct Params");

typedef struct attn_shape { uint32_t batch, seq_q, seq_k, heads, kv_heads, dim; } attn_shape;

/* ---- validation ----------------------------------------------------------------------- */

static bool same_dims(const wgml_tensor *a, const wgml_tensor *b)
{
    if (a->ndim != b->ndim) return false;
    for (uint32_t i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

static void shape_str(const wgml_tensor *t, char *buf, size_t n)
{
    size_t used = (size_t)snprintf(buf, n, "[");
    for (uint32_t i = 0; i < t->ndim && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%zu", i ? ", " : "", t->shape[i]);
    if (used < n) snprintf(buf + used, n - used, "]");
}

/* q [B, Sq, H, D] (or [Sq, D] when single), k [B, Sk, KVH, D] (or [Sk, D]). */
static wgml_status check_qk(wgml_engine *e, const char *fn, bool single, const wgml_tensor *q, const wgml_tensor *k,
                            attn_shape *s)
{
    uint32_t nd = single ? 2 : 4;
    const char *layout_q = single ? "[seq_len, head_dim]" : "[batch, seq_q, num_heads, head_dim]";
    const char *layout_k = single ? "[seq_len, head_dim]" : "[batch, seq_k, num_kv_heads, head_dim]";
    if (q->ndim != nd)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: q must be %u-D %s; it is %u-D", fn, nd, layout_q, q->ndim);
    if (k->ndim != nd)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: k must be %u-D %s; it is %u-D", fn, nd, layout_k, k->ndim);
    size_t sq = q->shape[single ? 0 : 1], sk = k->shape[single ? 0 : 1];
    if (!single) {
        if (k->shape[0] != q->shape[0])
            return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: k has batch %zu, q has batch %zu; they must be equal", fn, k->shape[0],
                              q->shape[0]);
        if (q->shape[2] % k->shape[2])
            return wgml__fail(e->ctx, WGML_ERROR_SHAPE,
                              "%s: q's num_heads (%zu) must be a multiple of k's num_kv_heads (%zu)", fn, q->shape[2],
                              k->shape[2]);
    }
    size_t dq = q->shape[nd - 1], dk = k->shape[nd - 1];
    if (dk != dq)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: k has head_dim %zu, q has head_dim %zu; they must be equal", fn, dk, dq);
    if (dq % 2 || dq > MAX_DIM)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: head_dim is %zu; it must be even and at most %u", fn, dq, MAX_DIM);
    if (sq > MAX_SEQ || sk > MAX_SEQ)
        return wgml__fail(e->ctx, WGML_ERROR_LIMIT, "%s: seq_q (%zu) and seq_k (%zu) must be at most %u", fn, sq, sk, MAX_SEQ);
    WGML_CHECK(wgml__check_u32_numel(e, fn, "q", q));
    WGML_CHECK(wgml__check_u32_numel(e, fn, "k", k));
    if (single) *s = (attn_shape){ 1, (uint32_t)sq, (uint32_t)sk, 1, 1, (uint32_t)dq };
    else
        *s = (attn_shape){ (uint32_t)q->shape[0], (uint32_t)sq, (uint32_t)sk, (uint32_t)q->shape[2], (uint32_t)k->shape[2],
                           (uint32_t)dq };
    return WGML_OK;
}

static wgml_status check_like(wgml_engine *e, const char *fn, const char *name, const wgml_tensor *t, const char *ref_name,
                              const wgml_tensor *ref)
{
    if (same_dims(t, ref)) return WGML_OK;
    char a[96], b[96];
    shape_str(t, a, sizeof a);
    shape_str(ref, b, sizeof b);
    return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: %s has shape %s; it must have %s's shape %s", fn, name, a, ref_name, b);
}

/* mask: 4-D [batch|1, heads|1, seq_q|1, seq_k|1] or 2-D [seq_q|1, seq_k|1]; sets strides. */
static wgml_status check_mask(wgml_engine *e, const char *fn, const wgml_tensor *mask, const attn_shape *s, attn_params *p)
{
    if (!mask) return WGML_OK;
    WGML_CHECK(wgml__check_tensor(e, fn, "mask", mask, WGML_F32));
    size_t full[4] = { s->batch, s->heads, s->seq_q, s->seq_k }, dims[4] = { 1, 1, 1, 1 };
    if (mask->ndim == 4) for (int i = 0; i < 4; i++) dims[i] = mask->shape[i];
    else if (mask->ndim == 2) { dims[2] = mask->shape[0]; dims[3] = mask->shape[1]; }
    else
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE,
                          "%s: mask must be 4-D [batch|1, heads|1, seq_q|1, seq_k|1] or 2-D [seq_q|1, seq_k|1]; it is %u-D", fn,
                          mask->ndim);
    static const char *names[4] = { "batch", "heads", "seq_q", "seq_k" };
    for (int i = 0; i < 4; i++)
        if (dims[i] != 1 && dims[i] != full[i]) {
            char a[96];
            shape_str(mask, a, sizeof a);
            return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: mask has shape %s; its %s dimension must be 1 or %zu", fn, a,
                              names[i], full[i]);
        }
    p->m_sk = dims[3] == 1 ? 0 : 1;
    p->m_sq = dims[2] == 1 ? 0 : (uint32_t)dims[3];
    p->m_sh = dims[1] == 1 ? 0 : (uint32_t)(dims[2] * dims[3]);
    p->m_sb = dims[0] == 1 ? 0 : (uint32_t)(dims[1] * dims[2] * dims[3]);
    p->flags |= 1;
    return WGML_OK;
}

/* Options into the parameters every kernel shares. */
static wgml_status check_opts(wgml_engine *e, const char *fn, const wgml_attention_options *o, const attn_shape *s,
                              attn_params *p)
{
    wgml_attention_options def = { 0 };
    if (!o) o = &def;
    if (!(o->dropout_prob >= 0.0f && o->dropout_prob < 1.0f))
        return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: dropout_prob is %g; it must be in [0, 1)", fn,
                          (double)o->dropout_prob);
    if (!isfinite(o->scale))
        return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: scale is %g; it must be finite (0 means 1/sqrt(head_dim))", fn,
                          (double)o->scale);
    if ((unsigned)o->precision > WGML_PRECISION_F16X3)
        return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: precision %d is not a wgml_precision", fn, (int)o->precision);
    if (o->causal_offset > MAX_OFFSET)
        return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: causal_offset is %u; it must be at most %u", fn,
                          o->causal_offset, MAX_OFFSET);
    double scale = o->scale != 0.0f ? (double)o->scale : 1.0 / sqrt((double)s->dim);
    /* A window wider than any distance between a position and a key hides nothing. */
    uint64_t window = o->window;
    if (window > (uint64_t)s->seq_q + o->causal_offset + s->seq_k) window = 0;
    p->batch = s->batch;
    p->seq_q = s->seq_q;
    p->seq_k = s->seq_k;
    p->heads = s->heads;
    p->kv_heads = s->kv_heads;
    p->group = s->heads / s->kv_heads;
    p->causal = o->causal ? 1 : 0;
    p->offset = (int32_t)o->causal_offset;
    p->window = (int32_t)window;
    p->scale = (float)scale;
    p->scale_log2 = (float)(scale * LOG2E);
    p->neg_inf = -INFINITY;
    p->pos_inf = INFINITY;
    p->dim = s->dim;
    p->d4 = (s->dim + 3) / 4;
    uint32_t threshold = (uint32_t)floor((double)o->dropout_prob * 4294967296.0);
    if (threshold > 0) {
        p->flags |= 2;
        p->drop_threshold = threshold;
        p->drop_scale = (float)(1.0 / (1.0 - (double)o->dropout_prob));
    }
    p->seed_key = wgml__mix32((uint32_t)o->seed ^ wgml__mix32((uint32_t)(o->seed >> 32) ^ 0x9e3779b9u));
    p->seed_key2 = wgml__mix32(p->seed_key ^ 0x85ebca6bu);
    return WGML_OK;
}

/* ---- the adapter as the rules see it ------------------------------------------------ */

/* Workgroup storage and storage buffers per stage: the adapter's limits, or less where the
   engine's tuning plans for a smaller adapter. */
static uint32_t wg_storage(const wgml_engine *e)
{
    uint32_t lim = e->ctx->limits.maxComputeWorkgroupStorageSize, t = e->tuning.attention.workgroup_storage;
    return t && t < lim ? t : lim;
}

static uint32_t storage_buffers(const wgml_engine *e)
{
    uint32_t lim = e->ctx->limits.maxStorageBuffersPerShaderStage, t = e->tuning.attention.storage_buffers;
    return t && t < lim ? t : lim;
}

/* 256 invocations per workgroup: prefill, fwd_s_mm / fwd_pv_mm and the 64 x 64 backward. */
static bool has_256(const wgml_engine *e)
{
    return e->ctx->limits.maxComputeInvocationsPerWorkgroup >= 256 && e->ctx->limits.maxComputeWorkgroupSizeX >= 256;
}

/* The tuning fields that are not limits take a few values only. */
static wgml_status check_tuning(wgml_engine *e, const char *fn)
{
    const wgml__attention_tuning *t = &e->tuning.attention;
    if (t->backward_sub != 0 && t->backward_sub != 8)
        return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: internal: tuning.attention.backward_sub is %u, not 0 or 8",
                          fn, t->backward_sub);
    if (t->features > WGML__ATTN_FEATURES_ALL)
        return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: internal: tuning.attention.features is %u", fn,
                          t->features);
    return WGML_OK;
}

/* ---- tiled kernels: shapes ---------------------------------------------------------- */

enum { K_FWD, K_STATS, K_DQ, K_DKDV };

/* Rows per workgroup, columns per lane, one staging region (SHARED_STAGE); lanes per row
   group are TC (attention_prelude.wgsl). */
#define TC 8u
typedef struct tiles { uint32_t br, kpt, shared; } tiles;

/* Preference order: 4 columns per lane first (phase 1 then does 8 FMAs per workgroup load
   instead of 5.3 with 2: these kernels are bound by workgroup-memory bandwidth more than
   by L2), then more rows per workgroup (fewer re-reads of k/v or q/dout from L2),
   then separate staging regions (fewer barriers, loads overlap) over one shared region.
   At head_dim 256 and 32 KiB: fwd 16 rows x 1 column per lane, one region (25,984 bytes),
   MODE 1 the same (25,488), bwd_dq and bwd_dkdv 8 rows x 1 (25,216 and 25,536); at 16 KiB
   the forward 4 rows, the backward none (it fits up to head_dim 224, OCV 7). */
static const tiles tile_candidates[] = {
    { 64, 4, 0 }, { 64, 4, 1 }, { 32, 4, 0 }, { 32, 4, 1 }, { 16, 4, 0 }, { 16, 4, 1 }, { 32, 2, 0 },
    { 32, 2, 1 }, { 16, 2, 0 }, { 16, 2, 1 }, { 16, 1, 1 }, { 8, 1, 1 }, { 4, 1, 1 },
};

/* Workgroup bytes of a kernel with tiles t at head_dim dim (mirrors the WGSL arrays). */
static uint64_t tile_bytes(int kind, uint32_t dim, tiles t)
{
    uint64_t d4 = (dim + 3) / 4, ocv = (d4 + TC - 1) / TC, rs = ocv * TC + 1;
    uint64_t bc = (uint64_t)t.kpt * TC, rg = t.br / 4, stage = t.shared ? 1 : 2;
    switch (kind) {
    case K_FWD: return 16 * (t.br * rs + stage * bc * rs + bc * rg + TC * rg);
    case K_STATS: return 16 * (t.br * rs + bc * rs + 1 + TC * rg);
    case K_DQ: return 16 * (2 * t.br * rs + stage * bc * rs + bc * rg);
    default: return 16 * (2 * t.br * rs + stage * bc * rs + 2 * bc * rg) + 4 * 2 * bc;
    }
}

static wgml_status pick_tiles(wgml_engine *e, const char *fn, int kind, uint32_t dim, tiles *out)
{
    for (size_t i = 0; i < sizeof tile_candidates / sizeof tile_candidates[0]; i++) {
        tiles t = tile_candidates[i];
        uint64_t threads = (uint64_t)(t.br / 4) * TC;
        if (threads <= e->ctx->limits.maxComputeInvocationsPerWorkgroup && threads <= e->ctx->limits.maxComputeWorkgroupSizeX &&
            tile_bytes(kind, dim, t) <= wg_storage(e)) {
            *out = t;
            return WGML_OK;
        }
    }
    return wgml__fail(e->ctx, WGML_ERROR_LIMIT, "%s: %u bytes of workgroup storage are too few for head_dim %u", fn,
                      wg_storage(e), dim);
}

/* Pipelines depend on the tiles and on OCV = ceil(ceil(head_dim / 4) / TC) only (1 to 8;
   above 4, head_dim over 128, the kernels add a second accumulator array); head_dim itself
   is a run-time parameter, so head dims of one class share a pipeline. mode: fwd's MODE (0
   output, 1 statistics), -1 for the backward kernels. */
static wgml__kernel tile_kernel(const char *file, const char *entry, const char *layout, uint32_t dim, tiles t, int mode)
{
    uint32_t ocv = ((dim + 3) / 4 + TC - 1) / TC;
    wgml__kernel k = { .file = file, .entry = entry, .layout = layout, .nconst = 4,
                       .constants = { { "OCV", ocv }, { "BR", t.br }, { "KPT", t.kpt }, { "SHARED_STAGE", t.shared } } };
    if (mode >= 0) wgml__add_constant(&k, "MODE", mode);
    return k;
}

/* ---- decoding: shape ---------------------------------------------------------------- */

/* Threads, keys per chunk, query heads per workgroup. */
typedef struct decode_cfg { uint32_t threads, ck, hg; } decode_cfg;

/* Workgroups a decoding dispatch aims at (splitting the keys of each row until then). */
#define DECODE_WORKGROUPS 512u

/* vec4 of a row that decode keeps in workgroup memory: head_dim / 4 rounded up to 8 (8 to
   64) */
static uint32_t decode_dc(uint32_t dim) { return ((dim + 3) / 4 + 7) / 8 * 8; }

static uint64_t decode_bytes(uint32_t dim, decode_cfg c)
{
    uint64_t dc = decode_dc(dim);
    return 16 * (c.hg * dc + c.ck * (dc + 1) + c.ck * dc + c.hg) + 4ull * c.hg * c.ck;
}

static wgml_status pick_decode(wgml_engine *e, const char *fn, uint32_t dim, uint32_t group, decode_cfg *out)
{
    uint32_t threads = 128;
    if (threads > e->ctx->limits.maxComputeInvocationsPerWorkgroup) threads = e->ctx->limits.maxComputeInvocationsPerWorkgroup;
    if (threads > e->ctx->limits.maxComputeWorkgroupSizeX) threads = e->ctx->limits.maxComputeWorkgroupSizeX;
    /* Heads per workgroup: a few fixed capacities rather than the exact group size, so that
       few pipelines serve every model (unused head slots only idle some threads: decoding
       is bound by reading k and v); at most 8 accumulators per thread (hg * DC <= 8 *
       threads: halved to 16 heads above head_dim 128, never below at 128 threads). */
    uint32_t hg = group <= 4 ? 4 : group <= 8 ? 8 : 32;
    while (hg > 1 && (uint64_t)hg * decode_dc(dim) > 8ull * threads) hg /= 2;
    for (; hg >= 1; hg = hg > 1 ? (hg + 1) / 2 : 0) {
        for (uint32_t ck = 64; ck >= 4; ck /= 2) {
            decode_cfg c = { threads, ck, hg };
            if (decode_bytes(dim, c) <= wg_storage(e)) {
                *out = c;
                return WGML_OK;
            }
        }
        if (hg == 1) break;
    }
    return wgml__fail(e->ctx, WGML_ERROR_LIMIT, "%s: %u bytes of workgroup storage are too few for head_dim %u", fn,
                      wg_storage(e), dim);
}

static wgml__kernel decode_kernel(uint32_t dim, decode_cfg c)
{
    return (wgml__kernel){ .file = "attention_decode", .entry = "decode", .layout = "urrrrw", .nconst = 4,
                           .constants = { { "DC", decode_dc(dim) }, { "DWG", c.threads }, { "CK", c.ck }, { "HG", c.hg } } };
}

/* ---- the 64 x 64 kernels: fit and build --------------------------------------------- */

/* prefill's workgroup bytes: 16 * (PF_BK * 32 + 1024) at PF_BK 16 (attention_forward.wgsl). */
#define PREFILL_BYTES (16u * (16u * 32u + 1024u))

/* Whether prefill (and prefill_stats, fwd_s_mm / fwd_pv_mm) runs at head_dim dim. */
static bool prefill_fits(const wgml_engine *e, uint32_t dim)
{
    return dim <= GEMM_MAX_DIM && has_256(e) && PREFILL_BYTES <= wg_storage(e);
}

/* The backward's 64 x 64 kernels: workgroup bytes with head_dim chunks of bk floats (g_st
   and g_w of attention_backward.wgsl). */
static uint64_t gemm_bytes(uint32_t bk) { return 16ull * (64ull * bk + 1024); }

/* The head_dim chunk of the backward's 64 x 64 kernel of `kind` (K_DQ: bwd_dq64,
   bwd_dq_ds64; K_DKDV: bwd_dkdv64, which binds 10 storage buffers), 0 where it does not
   fit or head_dim is above GEMM_MAX_DIM: 8 up to head_dim 64, above the largest of 32, 16
   and 8 that fits (measured on the H200: bench/notes/attention.md). */
static uint32_t gemm_chunk(const wgml_engine *e, int kind, uint32_t dim)
{
    if (dim > GEMM_MAX_DIM || !has_256(e) || (kind == K_DKDV && storage_buffers(e) < 10)) return 0;
    static const uint32_t small_dims[] = { 8, 0 }, large_dims[] = { 32, 16, 8, 0 };
    for (const uint32_t *bk = dim <= 64 ? small_dims : large_dims; *bk; bk++)
        if (gemm_bytes(*bk) <= wg_storage(e)) return *bk;
    return 0;
}

/* FEAT of the prefill and 64 x 64 entries (attention_prelude.wgsl): on GPUs the call's
   mask and dropout flags, so that a call without them runs a pipeline without their code
   and registers; on CPU adapters every feature (3), where registers do not matter and each
   extra pipeline costs seconds of compilation. */
static uint32_t feat_of(const wgml_engine *e, const attn_params *p)
{
    uint32_t f = e->tuning.attention.features;
    if (f == WGML__ATTN_FEATURES_ALL) return 3;
    if (f == WGML__ATTN_FEATURES_CALL) return p->flags & 3;
    return e->ctx->cpu_adapter ? 3 : p->flags & 3;
}

/* `prefill` (layout "urrrrwrw"), `prefill_lse` ("urrrrwww") or `prefill_stats` ("urrrrwrw":
   dout beside); binding 7 is the scores output of options.scores (WRITE_S), else the
   engine's unused scratch (see unused_arg). FEAT only when it is not the WGSL default (3),
   so that the pipelines of CPU adapters keep the keys of wgml__attention_kernels. */
static wgml__kernel prefill_kernel(const wgml_engine *e, const char *entry, const char *layout, uint32_t dim,
                                   const attn_params *p)
{
    wgml__kernel k = { .file = "attention_forward", .entry = entry, .layout = layout, .nconst = 1,
                       .constants = { { "PF_OCV", dim <= 64 ? 1 : 2 } } };
    uint32_t feat = feat_of(e, p);
    if (feat != 3) wgml__add_constant(&k, "FEAT", feat);
    return k;
}

/* The backward's choice for one kernel: the 64 x 64 entry with chunks of bk floats,
   consumed sub steps at a time (0: whole), or the tiled one with tiles t. */
typedef struct bwd_choice { bool gemm; uint32_t bk, sub; tiles t; } bwd_choice;

static wgml_status pick_bwd(wgml_engine *e, const char *fn, int kind, uint32_t dim, bwd_choice *out)
{
    memset(out, 0, sizeof *out);
    out->bk = gemm_chunk(e, kind, dim);
    if (!out->bk) return pick_tiles(e, fn, kind, dim, &out->t);
    out->gemm = true;
    /* chunks of 32 consumed 8 steps at a time: the whole chunk unrolled costs registers */
    if (out->bk == 32 || (e->tuning.attention.backward_sub == 8 && out->bk > 8)) out->sub = 8;
    return WGML_OK;
}

/* GOCV = vec4 of head_dim per thread in the block products: 1 up to head_dim 64, else 2.
   FEAT (see feat_of) only when it is not the default 3, G_SUB (c.sub) only when set; then
   p->subs and p->subs_rows count its sub-chunks. */
static wgml__kernel gemm_kernel(const wgml_engine *e, const char *entry, const char *layout, uint32_t dim, bwd_choice c,
                                attn_params *p)
{
    uint32_t ocv = ((dim + 3) / 4 + 15) / 16, rows = 4 * c.bk / ocv < 64 ? 4 * c.bk / ocv : 64;
    p->subs = c.sub ? c.bk / c.sub : 0;
    p->subs_rows = c.sub ? rows / c.sub : 0;
    wgml__kernel k = { .file = "attention_backward", .entry = entry, .layout = layout, .nconst = 2,
                       .constants = { { "GBK", c.bk }, { "GOCV", ocv } } };
    uint32_t feat = feat_of(e, p);
    if (feat != 3) wgml__add_constant(&k, "FEAT", feat);
    if (c.sub) wgml__add_constant(&k, "G_SUB", c.sub);
    return k;
}

/* ---- dispatch ----------------------------------------------------------------------- */

static const wgml__kernel combine_kernel = { .file = "attention_decode", .entry = "decode_combine", .layout = "urw" };
static const wgml__kernel combine_lse_kernel = { .file = "attention_decode", .entry = "decode_combine_lse", .layout = "urww" };
/* one thread per query row: the statistics from a given log-sum-exp, and the way back */
static const wgml__kernel prep_kernel = { .file = "attention_backward", .entry = "bwd_prep", .layout = "urrrrwrr" };
static const wgml__kernel export_kernel = { .file = "attention_forward", .entry = "lse_export", .layout = "urrrrwrr" };

static wgml_status dispatch_tiles(wgml_engine *e, const wgml__kernel *k, attn_params p, uint64_t workgroups,
                                  const wgml__arg *args, uint32_t nargs)
{
    uint32_t gx, gy;
    WGML_CHECK(wgml__grid(e->ctx, workgroups, &gx, &gy));
    p.total_wg = (uint32_t)workgroups;
    return wgml__dispatch(e, k, &p, sizeof p, args, nargs, gx, gy, 1);
}

/* One thread per query row (bwd_prep, lse_export: both bind the 7 arguments of the
   "urrrrwrr" layout). */
static wgml_status dispatch_rows(wgml_engine *e, const wgml__kernel *k, attn_params p, const attn_shape *s,
                                 const wgml__arg *args)
{
    uint64_t rows = (uint64_t)s->batch * s->heads * s->seq_q;
    return dispatch_tiles(e, k, p, (rows + 255) / 256, args, 7);
}

/* The writable binding a prefill entry declares for the scores when the call keeps none. */
static wgml_status unused_arg(wgml_engine *e, wgml__arg *out) { return wgml__scratch(e, WGML__SCRATCH_ATTN_UNUSED, 16, out); }

/* floats of the engine's attention scratch (decode partials, backward statistics, the
   forward's row maxima), indexed with 32-bit integers by the kernels */
static wgml_status attn_scratch(wgml_engine *e, uint64_t floats, wgml__arg *out)
{
    if (floats > 0xFFFFFFFFull - 4096)
        return wgml__fail(e->ctx, WGML_ERROR_LIMIT, "attention: a scratch of %llu floats exceeds 32-bit indexing",
                          (unsigned long long)floats);
    return wgml__scratch(e, WGML__SCRATCH_ATTN, 4 * floats, out);
}

/* ---- block order -------------------------------------------------------------------- */

/* The k and v bytes a query head's workgroups re-read (a kv head's, shared by its group). */
static uint64_t query_head_bytes(const attn_shape *s)
{
    return 2ull * 4 * s->seq_k * s->dim / (s->heads / s->kv_heads);
}

/* Heads per group of the block order (block_of in attention_prelude.wgsl). Where the
   blocks differ in length (causal, window): as many heads as keep the rows each head's
   workgroups re-read (head_bytes) within `budget` bytes, so that the workgroups in flight
   share them in the L2 cache; else 1 (one head at a time: longest first buys nothing
   there, and groups of heads ran slower without a mask on the H200). The budgets are
   those measured fastest on the H200 (bench/notes/attention.md). The engine's tuning may
   fix the group instead. */
#define FWD_ORDER_BYTES (16u << 20)
#define BWD_ORDER_BYTES (8u << 20)
static uint32_t order_heads(const wgml_engine *e, const attn_params *p, uint64_t head_bytes, uint64_t budget)
{
    if (e->tuning.attention.order_heads) return e->tuning.attention.order_heads;
    if (!p->causal && p->window <= 0) return 1;
    uint64_t n = head_bytes ? budget / head_bytes : 1;
    return n < 1 ? 1 : n > 65536 ? 65536 : (uint32_t)n;
}

/* Dispatches whose tiles share no rows (fwd_pv_mm, bwd_dq_mm) order all their heads'
   tiles longest first, unless the tuning fixes the group. */
static uint32_t order_all(const wgml_engine *e)
{
    return e->tuning.attention.order_heads ? e->tuning.attention.order_heads : UINT32_MAX;
}

/* ---- forward ------------------------------------------------------------------------ */

/* Visible keys [lo, hi) of the single query row at position offset (decode). */
static void decode_range(const attn_params *p, int64_t *lo, int64_t *hi)
{
    int64_t pos = p->offset, l = 0, h = p->seq_k;
    if (p->causal && h > pos + 1) h = pos + 1;
    if (p->window > 0) {
        if (l < pos - p->window + 1) l = pos - p->window + 1;
        if (h > pos + p->window) h = pos + p->window;
    }
    if (h < l) h = l;
    *lo = l;
    *hi = h;
}

/* The forward with its scores kept, as two products: fwd_s_mm stores the scores in tiles of
   128 x 128 and each query's max per key tile (in the attention scratch), fwd_pv_mm reads
   them back for out and lse. */
static wgml_status forward_mm(wgml_engine *e, const wgml_tensor *q, const wgml_tensor *k, const wgml_tensor *v,
                              wgml_tensor *out, const attn_shape *s, attn_params p, wgml_tensor *lse, wgml_tensor *scores)
{
    uint64_t heads = (uint64_t)s->batch * s->heads, m_tiles = wgml__ceil_div(s->seq_q, 128),
             k_tiles = wgml__ceil_div(s->seq_k, 128);
    p.q_blocks = wgml__ceil_div(s->seq_q, 64);
    p.k_blocks = wgml__ceil_div(s->seq_k, 64);
    wgml__arg rm;
    WGML_CHECK(attn_scratch(e, heads * k_tiles * m_tiles * 128, &rm));
    static const wgml__kernel ks = { .file = "attention_forward", .entry = "fwd_s_mm", .layout = "urrrrwrw" };
    wgml__arg sargs[] = { wgml__t(q), wgml__t(k), wgml__t(v), wgml__t(q), rm, wgml__t(q), wgml__t(scores) };
    WGML_CHECK(dispatch_tiles(e, &ks, p, heads * m_tiles * k_tiles, sargs, 7));
    wgml__kernel kp = { .file = "attention_forward", .entry = "fwd_pv_mm", .layout = "urrrrww", .nconst = 1,
                        .constants = { { "DQN", s->dim <= 64 ? 64 : 128 } } };
    p.order_heads = order_all(e);
    wgml__arg pargs[] = { rm, wgml__t(k), wgml__t(v), wgml__t(scores), wgml__t(out), wgml__t(lse) };
    return dispatch_tiles(e, &kp, p, heads * m_tiles, pargs, 6);
}

/* ---- the forward on the matrix units (wgml_precision F16) ---------------------------- */

/* prefill_mma's shape (attention_mma.wgsl): 4 subgroups of the adapter's largest size,
   SM query rows each, blocks of 4 SN keys, head_dim padded to MA_DP; v first copied into
   f16 [batch * kv_heads][key blocks * 4 SN][MA_DP] by ma_convert, k transposed. */
#define MMA_MAX_OC 16u

static uint32_t mma_dp(const wgml_adapter_info *in, uint32_t dim)
{
    uint32_t step = in->matrix_k > in->matrix_n ? in->matrix_k : in->matrix_n;
    if (step < 8) step = 8;   /* whole 16-byte words of f16 (prefill_mma stages them) */
    return (dim + step - 1) / step * step;
}

/* Bytes of one f16 copy (k or v). */
static uint64_t mma_copy_bytes(const wgml_adapter_info *in, const attn_shape *s)
{
    uint64_t bc = 4ull * in->matrix_n;
    return 2ull * s->batch * s->kv_heads * wgml__ceil_div(s->seq_k, bc) * bc * mma_dp(in, s->dim);
}

/* Bytes of ma_kv, the staged blocks of every matrix-unit attention kernel: f16 rows of
   head_dim up to GEMM_MAX_DIM padded by 8, or k^T's block of 4 SN keys (padded by 8) per row
   of head_dim. */
static uint64_t mma_stage_bytes(const wgml_adapter_info *in)
{
    uint64_t br = 4ull * in->matrix_m, bc = 4ull * in->matrix_n, rows = br > bc ? br : bc;
    uint64_t kt = GEMM_MAX_DIM * (bc + 8), qv = rows * (GEMM_MAX_DIM + 8);
    return 2 * (kt > qv ? kt : qv);
}

/* Whether `words` 16-byte words of a staged block fit MMA_PF_WORDS registers per invocation
   of a matrix-unit workgroup (4 subgroups of the adapter's largest size): MA_PFW in
   attention_mma.wgsl. */
#define MMA_PF_WORDS 8u
static bool mma_prefetch_fits(const wgml_adapter_info *in, uint64_t words)
{
    return words <= (uint64_t)MMA_PF_WORDS * 4 * in->subgroup_max_size;
}

/* The workgroup of the matrix-unit kernels (4 subgroups of the adapter's largest size, at
   most 64 of its smallest) with `bytes` of workgroup memory fits this adapter. */
static bool mma_workgroup_fits(const wgml_engine *e, uint64_t bytes)
{
    const wgml_adapter_info *in = &e->ctx->info;
    uint32_t wg = 4 * in->subgroup_max_size, min_sg = in->subgroup_min_size ? in->subgroup_min_size : in->subgroup_max_size;
    return wg <= in->max_invocations_per_workgroup && wg <= in->max_workgroup_size_x && bytes <= wg_storage(e) &&
           wg / min_sg <= 64;
}

/* f16 copy `out` of `src` by ma_convert (rows of seq_k keys of kv_heads heads in p; scale:
   times scale log2 e), or by ma_convert_t (transpose: [MA_DP][rows], the rows in blocks of
   32), `bytes` long (a multiple of 16: MA_DP is whole 16-byte words). */
static wgml_status mma_convert(wgml_engine *e, attn_params p, uint32_t dp, bool scale, bool transpose, const wgml_tensor *q,
                               const wgml_tensor *src, wgml__arg out, uint64_t bytes)
{
    enum { CT = 32 };   /* ma_convert_t's block (MA_CT) */
    wgml__kernel kc = { .file = "attention_mma", .entry = transpose ? "ma_convert_t" : "ma_convert", .layout = "urrw",
                        .matrix = true, .nconst = 1, .constants = { { "MA_DP", dp } } };
    if (scale) wgml__add_constant(&kc, "MA_SCALE", 1);
    uint64_t keys = (uint64_t)p.k_blocks * 4 * e->ctx->info.matrix_n;
    uint64_t groups = transpose ? (uint64_t)p.batch * p.kv_heads * wgml__ceil_div(keys, CT) * wgml__ceil_div(dp, CT)
                                : wgml__ceil_div(bytes / 16, 256);   /* 8 values per invocation */
    wgml__arg args[] = { wgml__t(q), wgml__t(src), out };
    return dispatch_tiles(e, &kc, p, groups, args, 3);
}

/* Whether prefill_mma runs this call on this adapter: f16 subgroup matrices, at most
   MMA_MAX_OC result matrices of out and of q per subgroup, a softmax of whole rows of
   threads, blocks of whole 16-byte words of keys, at most 64 subgroups per workgroup, its
   workgroup memory (q, then the blocks of k^T and v, in f16 with padded rows of at most
   GEMM_MAX_DIM, S in f32 and f16 with padded rows, the partial sums, the rows' factors and
   the rescale flags) and copies of k and v that one binding holds. */
static bool mma_fits(const wgml_engine *e, const attn_shape *s)
{
    const wgml_adapter_info *in = &e->ctx->info;
    if (!in->matrix_m || s->dim > GEMM_MAX_DIM) return false;
    uint32_t dp = mma_dp(in, s->dim), br = 4 * in->matrix_m, bc = 4 * in->matrix_n, wg = 4 * in->subgroup_max_size;
    if (dp % in->matrix_n || dp / in->matrix_n > MMA_MAX_OC || dp % in->matrix_k || dp / in->matrix_k > MMA_MAX_OC ||
        bc % in->matrix_k || wg % br || (bc / 4) % (wg / br) || bc % 8)
        return false;
    uint64_t bytes = mma_stage_bytes(in) + 4ull * br * (bc + 4) + 2ull * br * (bc + 8) + 4ull * wg + 8ull * br + 256 + 16;
    return mma_workgroup_fits(e, bytes) && mma_copy_bytes(in, s) <= e->ctx->limits.maxStorageBufferBindingSize;
}

/* The forward at F16: k and v into f16 copies (ma_convert, in the engine's matrix-product
   scratch), then prefill_mma, one workgroup per 4 SM queries of a (batch, head), one pass
   over the keys with an online softmax. */
static wgml_status forward_mma(wgml_engine *e, const wgml_tensor *q, const wgml_tensor *k, const wgml_tensor *v,
                               wgml_tensor *out, const attn_shape *s, attn_params p, wgml__arg m, wgml_tensor *lse)
{
    const wgml_adapter_info *in = &e->ctx->info;
    uint32_t dp = mma_dp(in, s->dim);
    p.q_blocks = wgml__ceil_div(s->seq_q, 4 * in->matrix_m);
    p.k_blocks = wgml__ceil_div(s->seq_k, 4 * in->matrix_n);
    uint64_t bytes = mma_copy_bytes(in, s);
    wgml__arg k16, v16;
    WGML_CHECK(wgml__scratch(e, WGML__SCRATCH_MMA_AH, bytes, &k16));
    WGML_CHECK(wgml__scratch(e, WGML__SCRATCH_MMA_BH, bytes, &v16));
    WGML_CHECK(mma_convert(e, p, dp, false, true, q, k, k16, bytes));
    WGML_CHECK(mma_convert(e, p, dp, false, false, q, v, v16, bytes));

    wgml__kernel kk = { .file = "attention_mma", .entry = "prefill_mma", .layout = "urrrrwwrr", .matrix = true, .nconst = 3,
                        .constants = { { "MA_SG", in->subgroup_max_size }, { "MA_DP", dp }, { "LSE", lse != NULL } } };
    uint32_t feat = feat_of(e, &p);
    if (feat != 3) wgml__add_constant(&kk, "FEAT", feat);
    /* a block's 16-byte words loaded a step ahead, in 8 registers per invocation (MA_PF),
       where they cover it (bench/notes/attention.md measures both) */
    if (mma_prefetch_fits(in, (uint64_t)dp * 4 * in->matrix_n / 8)) wgml__add_constant(&kk, "MA_PF", 1);
    wgml__arg l;
    if (lse) l = wgml__t(lse);
    else WGML_CHECK(unused_arg(e, &l));
    wgml__arg args[] = { wgml__t(q), wgml__t(k), wgml__t(v), m, wgml__t(out), l, k16, v16 };
    return dispatch_tiles(e, &kk, p, (uint64_t)s->batch * s->heads * p.q_blocks, args, 8);
}

/* ---- the backward on the matrix units (wgml_precision F16) ---------------------------- */

/* mb_dkdv and mb_dq (attention_mma.wgsl): 4 subgroups of SM rows per workgroup, blocks of
   2 SN columns, at most MB_MAX_OC result matrices of each output per subgroup, on f16
   copies of q, dout, k and v whose rows are padded to whole workgroups. */
#define MB_MAX_OC 8u

/* Rows of a (batch, head)'s copy: seq rounded up to whole workgroups of 4 SM. */
static uint64_t mb_rows(const wgml_adapter_info *in, uint32_t seq)
{
    uint64_t br = 4ull * in->matrix_m;
    return wgml__ceil_div(seq, br) * br;
}

/* Whether the backward's products run on the matrix units for this call on this adapter:
   f16 subgroup matrices, head_dim at most 128 in at most MB_MAX_OC result matrices and
   MB_MAX_OC left matrices (held in registers: k's and v's, q's and dout's), rows
   of whole blocks of columns and of ma_convert's blocks, at most 64 subgroups per
   workgroup, a block's two staged row blocks in 8 16-byte words per invocation, the
   workgroup memory (the staged blocks, S and dP in f32, Z P and dS in f16, rows padded,
   three arrays of the rows' statistics), 8 storage buffers and copies that one binding
   holds. */
static bool mb_fits(const wgml_engine *e, const attn_shape *s)
{
    const wgml_adapter_info *in = &e->ctx->info;
    if (!in->matrix_m || s->dim > GEMM_MAX_DIM) return false;
    uint32_t dp = mma_dp(in, s->dim), br = 4 * in->matrix_m, bc = 2 * in->matrix_n;
    if (dp % in->matrix_n || dp / in->matrix_n > MB_MAX_OC || dp % in->matrix_k || dp / in->matrix_k > MB_MAX_OC ||
        bc % in->matrix_k || br % (4 * in->matrix_n))
        return false;
    if (!mma_prefetch_fits(in, 2ull * bc * dp / 8)) return false;   /* the block's two staged row blocks */
    uint64_t bytes = mma_stage_bytes(in) + 2ull * 4 * br * (bc + 4) + 2ull * 2 * br * (bc + 8) + 3ull * 4 * br;
    uint64_t q_rows = (uint64_t)s->batch * s->heads * mb_rows(in, s->seq_q),
             k_rows = (uint64_t)s->batch * s->kv_heads * mb_rows(in, s->seq_k);
    uint64_t copy = 2ull * dp * (q_rows > k_rows ? q_rows : k_rows);
    return mma_workgroup_fits(e, bytes) && storage_buffers(e) >= 8 && copy <= e->ctx->limits.maxStorageBufferBindingSize;
}

/* The backward's products at F16, after the statistics pass (st): q (times scale log2 e),
   dout, k and v into f16 copies (ma_convert, into the engine's four matrix-product scratch
   slots), then mb_dkdv per 4 SM keys of a (batch, kv head) and mb_dq per 4 SM queries of a
   (batch, head). */
static wgml_status backward_mma(wgml_engine *e, const wgml_tensor *q, const wgml_tensor *k, const wgml_tensor *v,
                                const wgml_tensor *dout, wgml_tensor *dq, wgml_tensor *dk, wgml_tensor *dv,
                                const attn_shape *s, attn_params p, wgml__arg m, wgml__arg st)
{
    const wgml_adapter_info *in = &e->ctx->info;
    uint32_t dp = mma_dp(in, s->dim), br = 4 * in->matrix_m;
    p.q_blocks = wgml__ceil_div(s->seq_q, br);
    p.k_blocks = wgml__ceil_div(s->seq_k, br);
    /* c16: q, dout, k, v */
    const wgml_tensor *src[4] = { q, dout, k, v };
    static const int slot[4] = { WGML__SCRATCH_MMA_AL, WGML__SCRATCH_MMA_BL, WGML__SCRATCH_MMA_AH, WGML__SCRATCH_MMA_BH };
    wgml__arg c16[4];
    for (int x = 0; x < 4; x++) {
        /* ma_convert reads rows of seq_k keys of kv_heads heads: q and dout pass as such */
        attn_params pc = p;
        bool qs = x < 2;
        uint64_t rows = qs ? mb_rows(in, s->seq_q) : mb_rows(in, s->seq_k);
        if (qs) pc.seq_k = s->seq_q, pc.kv_heads = s->heads;
        pc.k_blocks = (uint32_t)(rows / (4 * in->matrix_n));
        uint64_t bytes = 2ull * s->batch * pc.kv_heads * rows * dp;
        WGML_CHECK(wgml__scratch(e, slot[x], bytes, &c16[x]));
        WGML_CHECK(mma_convert(e, pc, dp, x == 0, false, q, src[x], c16[x], bytes));
    }
    uint32_t feat = feat_of(e, &p);
    wgml__kernel kk = { .file = "attention_mma", .entry = "mb_dkdv", .layout = "urrrrwrrw", .matrix = true, .nconst = 2,
                        .constants = { { "MA_SG", in->subgroup_max_size }, { "MA_DP", dp } } };
    if (feat != 3) wgml__add_constant(&kk, "FEAT", feat);
    wgml__kernel kq = kk;   /* mb_dq binds dv's place too (its output code is mb_dkdv's) */
    kq.entry = "mb_dq";
    attn_params pk = p;
    /* a kv head's workgroups re-read the q and dout rows of its query heads */
    pk.order_heads = order_heads(e, &p, 2ull * 2 * s->seq_q * dp * (s->heads / s->kv_heads), BWD_ORDER_BYTES);
    wgml__arg kargs[] = { c16[0], c16[2], c16[3], m, wgml__t(dk), c16[1], st, wgml__t(dv) };
    WGML_CHECK(dispatch_tiles(e, &kk, pk, (uint64_t)s->batch * s->kv_heads * p.k_blocks, kargs, 8));
    wgml__arg un;
    WGML_CHECK(unused_arg(e, &un));
    wgml__arg qargs[] = { c16[0], c16[2], c16[3], m, wgml__t(dq), c16[1], st, un };
    return dispatch_tiles(e, &kq, p, (uint64_t)s->batch * s->heads * p.q_blocks, qargs, 8);
}

/* The tiled forward: fwd in MODE 0; with lse, fwd in MODE 1 for the statistics (its D
   column, from out twice, unused) and lse_export for the public log-sum-exp. */
static wgml_status forward_tiled(wgml_engine *e, const char *fn, const wgml_tensor *q, const wgml_tensor *k,
                                 const wgml_tensor *v, wgml_tensor *out, const attn_shape *s, attn_params p, wgml__arg m,
                                 wgml_tensor *lse)
{
    tiles t = { 0 }, ts = { 0 };
    WGML_CHECK(pick_tiles(e, fn, K_FWD, s->dim, &t));
    if (lse) WGML_CHECK(pick_tiles(e, fn, K_STATS, s->dim, &ts));
    attn_params pf = p;
    pf.q_blocks = wgml__ceil_div(s->seq_q, t.br);
    wgml__kernel kf = tile_kernel("attention_forward", "fwd", "urrrrwr", s->dim, t, 0);
    wgml__arg args[] = { wgml__t(q), wgml__t(k), wgml__t(v), m, wgml__t(out), wgml__t(q) };
    wgml_status r = dispatch_tiles(e, &kf, pf, (uint64_t)s->batch * s->heads * pf.q_blocks, args, 6);
    if (r != WGML_OK || !lse) return r;
    wgml__arg st;
    WGML_CHECK(attn_scratch(e, 2ull * s->batch * s->heads * s->seq_q, &st));
    attn_params ps = p;
    ps.q_blocks = wgml__ceil_div(s->seq_q, ts.br);
    wgml__kernel kst = tile_kernel("attention_forward", "fwd", "urrrrwr", s->dim, ts, 1);
    wgml__arg sargs[] = { wgml__t(q), wgml__t(k), wgml__t(out), m, st, wgml__t(out) };
    r = dispatch_tiles(e, &kst, ps, (uint64_t)s->batch * s->heads * ps.q_blocks, sargs, 6);
    wgml__arg xargs[] = { wgml__t(q), wgml__t(k), wgml__t(v), m, wgml__t(lse), wgml__t(q), st };
    if (r == WGML_OK) r = dispatch_rows(e, &export_kernel, p, s, xargs);
    return r;
}

/* Decoding: decode over splits of the visible keys, enough of them for about
   DECODE_WORKGROUPS workgroups, then decode_combine(_lse). */
static wgml_status forward_decode(wgml_engine *e, const char *fn, const wgml_tensor *q, const wgml_tensor *k,
                                  const wgml_tensor *v, wgml_tensor *out, const attn_shape *s, attn_params p, wgml__arg m,
                                  wgml_tensor *lse)
{
    decode_cfg c = { 0 };
    WGML_CHECK(pick_decode(e, fn, s->dim, p.group, &c));
    int64_t lo, hi;
    decode_range(&p, &lo, &hi);
    uint64_t range = (uint64_t)(hi - lo);
    p.head_chunks = wgml__ceil_div(p.group, c.hg);
    uint64_t rows = (uint64_t)s->batch * s->kv_heads * p.head_chunks;
    uint64_t want = (DECODE_WORKGROUPS + rows - 1) / rows, max_splits = range ? (range + c.ck - 1) / c.ck : 1;
    if (want > max_splits) want = max_splits;
    if (want < 1) want = 1;
    uint64_t kps = range ? (range + want - 1) / want : 0;
    kps = (kps + c.ck - 1) / c.ck * c.ck;
    p.splits = kps ? (uint32_t)((range + kps - 1) / kps) : 1;
    p.keys_per_split = (uint32_t)kps;
    p.key_lo = (int32_t)lo;
    p.key_hi = (int32_t)hi;
    uint32_t d4 = (s->dim + 3) / 4;
    wgml__arg part;
    WGML_CHECK(attn_scratch(e, (uint64_t)s->batch * s->heads * p.splits * (d4 + 1) * 4, &part));
    wgml__kernel kd = decode_kernel(s->dim, c);
    wgml__arg args[] = { wgml__t(q), wgml__t(k), wgml__t(v), m, part };
    wgml_status st = dispatch_tiles(e, &kd, p, rows * p.splits, args, 5);
    if (st == WGML_OK) {
        wgml__arg cargs[] = { part, wgml__t(out), wgml__t(lse ? lse : out) };
        st = dispatch_tiles(e, lse ? &combine_lse_kernel : &combine_kernel, p, (uint64_t)s->batch * s->heads, cargs, lse ? 3 : 2);
    }
    return st;
}

/* lse (may be NULL): also write each query row's log-sum-exp there (wgml.h); scores (may be
   NULL, then lse is set): also the scores of every visited block (forward_mm, or
   prefill_lse with WRITE_S). */
static wgml_status forward(wgml_engine *e, const char *fn, const wgml_tensor *q, const wgml_tensor *k, const wgml_tensor *v,
                           wgml_tensor *out, const attn_shape *s, attn_params p, const wgml_tensor *mask, wgml_tensor *lse,
                           wgml_tensor *scores, wgml_precision precision)
{
    WGML_CHECK(check_tuning(e, fn));
    wgml__arg m = wgml__t(mask ? mask : q);
    p.order_heads = order_heads(e, &p, query_head_bytes(s), FWD_ORDER_BYTES);
    if (s->seq_q == 1 && !scores) return forward_decode(e, fn, q, k, v, out, s, p, m, lse);
    if (precision == WGML_PRECISION_F16 && !scores && mma_fits(e, s)) return forward_mma(e, q, k, v, out, s, p, m, lse);
    if (s->seq_q == 1 || !prefill_fits(e, s->dim)) {
        if (scores)
            return wgml__fail(e->ctx, WGML_ERROR_LIMIT, "%s: options.scores needs the forward's 64 x 64 kernel (prefill), which "
                              "this call does not use (seq_q 1, or an adapter without 24 KiB of workgroup storage and 256 "
                              "invocations per workgroup)", fn);
        return forward_tiled(e, fn, q, k, v, out, s, p, m, lse);
    }
    /* scores without a mask or dropout, rows of whole vec4: the two products */
    if (scores && s->dim % 4 == 0 && !(p.flags & 3)) return forward_mm(e, q, k, v, out, s, p, lse, scores);
    p.q_blocks = wgml__ceil_div(s->seq_q, 64);
    p.k_blocks = wgml__ceil_div(s->seq_k, 64);
    wgml__kernel kp = lse ? prefill_kernel(e, "prefill_lse", "urrrrwww", s->dim, &p)
                          : prefill_kernel(e, "prefill", "urrrrwrw", s->dim, &p);
    if (scores) wgml__add_constant(&kp, "WRITE_S", 1);
    wgml__arg sc;
    if (scores) sc = wgml__t(scores);
    else WGML_CHECK(unused_arg(e, &sc));
    wgml__arg args[] = { wgml__t(q), wgml__t(k), wgml__t(v), m, wgml__t(out), wgml__t(lse ? lse : q), sc };
    return dispatch_tiles(e, &kp, p, (uint64_t)s->batch * s->heads * p.q_blocks, args, 7);
}

/* ---- backward ----------------------------------------------------------------------- */

/* The dS blocks (WRITE_DS) the backward keeps at a time: at most DS_MAX_BYTES (400 MB at
   batch 8, 12 heads, seq 1024 fit in one range) and one storage binding. */
#define DS_MAX_BYTES (1ull << 30)

/* (batch, kv head) pairs per range of dS: 0 where one pair's blocks (pair_bytes: 16 KiB
   per block pair of its query heads) exceed the cap or a half of the backward does not
   run its 64 x 64 kernel (then dq recomputes dS in bwd_dq64), else as many as fit. */
static uint32_t ds_pairs(const wgml_engine *e, bwd_choice cq, bwd_choice ck, const attn_shape *s, uint64_t *pair_bytes)
{
    uint64_t limit = e->ctx->limits.maxStorageBufferBindingSize;
    uint64_t cap = e->tuning.attention.ds_bytes ? e->tuning.attention.ds_bytes : DS_MAX_BYTES;
    if (cap > limit) cap = limit;
    uint64_t pair = 16384ull * (s->heads / s->kv_heads) * wgml__ceil_div(s->seq_q, 64) * wgml__ceil_div(s->seq_k, 64);
    uint32_t pairs = s->batch * s->kv_heads;
    *pair_bytes = pair;
    if (!cq.gemm || !ck.gemm || pair > cap) return 0;
    return cap / pair < pairs ? (uint32_t)(cap / pair) : pairs;
}

/* dq by bwd_dq64 (S, dP and dS recomputed) or the tiled bwd_dq. */
static wgml_status backward_dq(wgml_engine *e, const wgml_tensor *q, const wgml_tensor *k, const wgml_tensor *v,
                               const wgml_tensor *dout, wgml_tensor *dq, const attn_shape *s, attn_params p, wgml__arg m,
                               wgml__arg st, bwd_choice cq)
{
    p.q_blocks = wgml__ceil_div(s->seq_q, cq.gemm ? 64 : cq.t.br);
    wgml__kernel kq = cq.gemm ? gemm_kernel(e, "bwd_dq64", "urrrrwrr", s->dim, cq, &p)
                              : tile_kernel("attention_backward", "bwd_dq", "urrrrwrr", s->dim, cq.t, -1);
    wgml__arg qargs[] = { wgml__t(q), wgml__t(k), wgml__t(v), m, wgml__t(dq), wgml__t(dout), st };
    return dispatch_tiles(e, &kq, p, (uint64_t)s->batch * s->heads * p.q_blocks, qargs, 7);
}

/* The backward's statistics (lse and D per query row, into st): from the given log-sum-exp
   (bwd_prep), else prefill_stats (prefill's scores and softmax, no P v) where prefill fits,
   else fwd in MODE 1. */
static wgml_status backward_stats(wgml_engine *e, const char *fn, const wgml_tensor *q, const wgml_tensor *k,
                                  const wgml_tensor *out, const wgml_tensor *dout, const attn_shape *s, attn_params p,
                                  wgml__arg m, const wgml_tensor *lse, wgml__arg *st)
{
    WGML_CHECK(attn_scratch(e, 2ull * s->batch * s->heads * s->seq_q, st));
    if (lse) {
        wgml__arg pargs[] = { wgml__t(q), wgml__t(k), wgml__t(out), m, *st, wgml__t(dout), wgml__t(lse) };
        return dispatch_rows(e, &prep_kernel, p, s, pargs);
    }
    tiles ts = { 0 };
    bool tiled = !prefill_fits(e, s->dim);
    if (tiled) WGML_CHECK(pick_tiles(e, fn, K_STATS, s->dim, &ts));
    attn_params ps = p;
    ps.q_blocks = wgml__ceil_div(s->seq_q, tiled ? ts.br : 64);
    wgml__kernel kst = tiled ? tile_kernel("attention_forward", "fwd", "urrrrwr", s->dim, ts, 1)
                             : prefill_kernel(e, "prefill_stats", "urrrrwrw", s->dim, &ps);
    wgml__arg un = { 0 };
    if (!tiled) WGML_CHECK(unused_arg(e, &un));
    wgml__arg sargs[] = { wgml__t(q), wgml__t(k), wgml__t(out), m, *st, wgml__t(dout), un };
    return dispatch_tiles(e, &kst, ps, (uint64_t)s->batch * s->heads * ps.q_blocks, sargs, tiled ? 6 : 7);
}

/* lse (may be NULL): the forward's log-sum-exp, read instead of the statistics pass;
   scores (may be NULL, then lse is set): the forward's scores, read by bwd_dkdv64 (READ_S)
   instead of its product S = k q^T. At F16 without scores, where mb_fits, the products run
   on the matrix units (backward_mma). */
static wgml_status backward(wgml_engine *e, const char *fn, const wgml_tensor *q, const wgml_tensor *k, const wgml_tensor *v,
                            const wgml_tensor *out, const wgml_tensor *dout, wgml_tensor *dq, wgml_tensor *dk, wgml_tensor *dv,
                            const attn_shape *s, attn_params p, const wgml_tensor *mask, const wgml_tensor *lse,
                            const wgml_tensor *scores, wgml_precision precision)
{
    WGML_CHECK(check_tuning(e, fn));
    wgml__arg m = wgml__t(mask ? mask : q), st;
    p.order_heads = order_heads(e, &p, query_head_bytes(s), BWD_ORDER_BYTES);
    if (precision == WGML_PRECISION_F16 && !scores && mb_fits(e, s)) {
        WGML_CHECK(backward_stats(e, fn, q, k, out, dout, s, p, m, lse, &st));
        return backward_mma(e, q, k, v, dout, dq, dk, dv, s, p, m, st);
    }
    uint32_t dim = s->dim;
    bwd_choice cq, ck;
    WGML_CHECK(pick_bwd(e, fn, K_DQ, dim, &cq));
    WGML_CHECK(pick_bwd(e, fn, K_DKDV, dim, &ck));
    if (scores && !ck.gemm)
        return wgml__fail(e->ctx, WGML_ERROR_LIMIT, "%s: options.scores needs the backward's 64 x 64 kernel (bwd_dkdv64), which "
                          "this call does not use (an adapter with fewer than 10 storage buffers per stage, 256 invocations "
                          "per workgroup or 24 KiB of workgroup storage)", fn);
    uint32_t group = s->heads / s->kv_heads;
    uint64_t pair_bytes = 0;
    uint32_t chunk = ds_pairs(e, cq, ck, s, &pair_bytes);
    bool dq_mm = chunk && dim % 4 == 0;   /* dS^T dense and bwd_dq_mm: rows of whole vec4 */
    wgml__arg ds = { 0 };
    /* bwd_dkdv64 binds a dS output either way (unwritten without WRITE_DS) */
    if (ck.gemm) WGML_CHECK(wgml__scratch(e, WGML__SCRATCH_ATTN_DS, chunk ? chunk * pair_bytes : 16, &ds));
    wgml_status r = backward_stats(e, fn, q, k, out, dout, s, p, m, lse, &st);

    /* without dS: dq first, then dk, dv; with dS, per range of (batch, kv head) pairs:
       dk, dv first (they write its dS), then dq */
    if (r == WGML_OK && !chunk) r = backward_dq(e, q, k, v, dout, dq, s, p, m, st, cq);
    attn_params pk = p, pq = p;
    /* a kv head's workgroups re-read the q and dout rows of its query heads */
    pk.order_heads = order_heads(e, &p, 2ull * 4 * s->seq_q * dim * group, BWD_ORDER_BYTES);
    pk.q_blocks = pq.q_blocks = wgml__ceil_div(s->seq_q, 64);
    pk.k_blocks = pq.k_blocks = wgml__ceil_div(s->seq_k, ck.gemm ? 64 : ck.t.br);
    wgml__kernel kk = ck.gemm ? gemm_kernel(e, "bwd_dkdv64", "urrrrwrrwwr", dim, ck, &pk)
                              : tile_kernel("attention_backward", "bwd_dkdv", "urrrrwrrw", dim, ck.t, -1);
    if (chunk) wgml__add_constant(&kk, "WRITE_DS", 1);
    if (dq_mm) wgml__add_constant(&kk, "DS_DENSE", 1);
    if (scores) wgml__add_constant(&kk, "READ_S", 1);
    wgml__kernel kq = { 0 };
    /* bwd_dq_mm: tiles of 128 queries, all heads of a range longest first (its tiles share
       no rows) */
    uint32_t q_tiles = dq_mm ? wgml__ceil_div(s->seq_q, 128) : pq.q_blocks;
    if (dq_mm) {
        kq = (wgml__kernel){ .file = "attention_backward", .entry = "bwd_dq_mm", .layout = "urrrrwrr", .nconst = 1,
                             .constants = { { "DQN", dim <= 64 ? 64 : 128 } } };
        pq.order_heads = order_all(e);
    } else if (chunk) {
        kq = gemm_kernel(e, "bwd_dq_ds64", "urrrrwrr", dim, cq, &pq);
    }
    wgml__arg kargs[] = { wgml__t(q), wgml__t(k), wgml__t(v), m, wgml__t(dk), wgml__t(dout), st, wgml__t(dv), ds,
                          wgml__t(scores ? scores : q) };
    wgml__arg qargs[] = { wgml__t(q), wgml__t(k), wgml__t(v), m, wgml__t(dq), wgml__t(dout), ds };
    uint32_t pairs = s->batch * s->kv_heads, step = chunk ? chunk : pairs;
    for (uint32_t b0 = 0; b0 < pairs && r == WGML_OK; b0 += step) {
        uint32_t n = pairs - b0 < step ? pairs - b0 : step;
        pk.bk0 = pq.bk0 = b0;
        r = dispatch_tiles(e, &kk, pk, (uint64_t)n * pk.k_blocks, kargs, ck.gemm ? 10 : 8);
        if (r == WGML_OK && chunk) r = dispatch_tiles(e, &kq, pq, (uint64_t)n * group * q_tiles, qargs, 7);
    }
    return r;
}

bool wgml__attention_keeps_scores(wgml_engine *e, uint32_t head_dim, uint32_t seq_q)
{
    return seq_q > 1 && prefill_fits(e, head_dim) && gemm_chunk(e, K_DKDV, head_dim) != 0;
}

/* ---- public entry points -------------------------------------------------------------- */

/* opts->lse, when set: f32 [batch, heads, seq_q]. Being 3-D, it cannot be another tensor
   of the call (all 4-D but a 2-D mask), so it aliases none. */
static wgml_status check_lse(wgml_engine *e, const char *fn, const wgml_attention_options *opts, const attn_shape *s)
{
    if (!opts || !opts->lse) return WGML_OK;
    const wgml_tensor *lse = opts->lse;
    WGML_CHECK(wgml__check_tensor(e, fn, "lse", lse, WGML_F32));
    if (lse->ndim != 3 || lse->shape[0] != s->batch || lse->shape[1] != s->heads || lse->shape[2] != s->seq_q) {
        char a[96];
        shape_str(lse, a, sizeof a);
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: lse has shape %s; it must be [batch, num_heads, seq_q] = [%u, %u, %u]",
                          fn, a, s->batch, s->heads, s->seq_q);
    }
    return WGML_OK;
}

/* opts->scores, when set: f32 with at least batch * heads * ceil(seq_q / 64) * ceil(seq_k /
   64) * 4096 elements (a 64 x 64 block of scores per pair of query and key blocks), the
   log-sum-exp set too, no window; no other tensor of the call (others[], and lse); head_dim
   at most GEMM_MAX_DIM (only the 64 x 64 kernels keep scores). */
static wgml_status check_scores(wgml_engine *e, const char *fn, const wgml_attention_options *opts, const attn_shape *s,
                                const wgml_tensor *const *others, const char *const *names, int n)
{
    if (!opts || !opts->scores) return WGML_OK;
    const wgml_tensor *sc = opts->scores;
    WGML_CHECK(wgml__check_tensor(e, fn, "scores", sc, WGML_F32));
    WGML_CHECK(wgml__check_u32_numel(e, fn, "scores", sc));
    if (!opts->lse)
        return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: options.scores needs options.lse (the backward reads both)", fn);
    if (opts->window)
        return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: options.scores cannot be kept with a window (window is %u)", fn,
                          opts->window);
    uint64_t need = (uint64_t)s->batch * s->heads * wgml__ceil_div(s->seq_q, 64) * wgml__ceil_div(s->seq_k, 64) * 4096;
    if (wgml_tensor_numel(sc) < need)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: scores has %llu elements; it needs at least batch * num_heads * "
                          "ceil(seq_q / 64) * ceil(seq_k / 64) * 4096 = %llu", fn, (unsigned long long)wgml_tensor_numel(sc),
                          (unsigned long long)need);
    for (int i = 0; i < n; i++) WGML_CHECK(wgml__check_no_alias(e, fn, "scores", sc, names[i], others[i]));
    WGML_CHECK(wgml__check_no_alias(e, fn, "scores", sc, "lse", opts->lse));
    if (s->dim > GEMM_MAX_DIM)
        return wgml__fail(e->ctx, WGML_ERROR_LIMIT, "%s: options.scores needs head_dim at most %u (only the 64 x 64 kernels "
                          "keep scores); head_dim is %u", fn, GEMM_MAX_DIM, s->dim);
    return WGML_OK;
}

static wgml_status forward_api(wgml_engine *e, const char *fn, bool single, const wgml_tensor *q, const wgml_tensor *k,
                               const wgml_tensor *v, wgml_tensor *out, const wgml_attention_options *opts,
                               const wgml_tensor *mask)
{
    WGML_CHECK(wgml__check_engine(e, fn));
    WGML_CHECK(wgml__check_tensor(e, fn, "q", q, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "k", k, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "v", v, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "out", out, WGML_F32));
    attn_shape s;
    attn_params p = { 0 };
    WGML_CHECK(check_qk(e, fn, single, q, k, &s));
    WGML_CHECK(check_like(e, fn, "v", v, "k", k));
    WGML_CHECK(check_like(e, fn, "out", out, "q", q));
    WGML_CHECK(check_mask(e, fn, mask, &s, &p));
    WGML_CHECK(wgml__check_no_alias(e, fn, "out", out, "q", q));
    WGML_CHECK(wgml__check_no_alias(e, fn, "out", out, "k", k));
    WGML_CHECK(wgml__check_no_alias(e, fn, "out", out, "v", v));
    WGML_CHECK(wgml__check_no_alias(e, fn, "out", out, "mask", mask));
    WGML_CHECK(check_opts(e, fn, opts, &s, &p));
    WGML_CHECK(check_lse(e, fn, opts, &s));
    const wgml_tensor *ins[] = { q, k, v, out, mask };
    const char *names[] = { "q", "k", "v", "out", "mask" };
    WGML_CHECK(check_scores(e, fn, opts, &s, ins, names, 5));
    wgml_precision pr = opts && opts->precision ? opts->precision : e->ctx->matmul_precision;
    return forward(e, fn, q, k, v, out, &s, p, mask, opts ? opts->lse : NULL, opts ? opts->scores : NULL, pr);
}

static wgml_status backward_api(wgml_engine *e, const char *fn, bool single, const wgml_tensor *q, const wgml_tensor *k,
                                const wgml_tensor *v, const wgml_tensor *out, const wgml_tensor *dout, wgml_tensor *dq,
                                wgml_tensor *dk, wgml_tensor *dv, const wgml_attention_options *opts, const wgml_tensor *mask)
{
    WGML_CHECK(wgml__check_engine(e, fn));
    WGML_CHECK(wgml__check_tensor(e, fn, "q", q, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "k", k, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "v", v, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "out", out, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "grad_out", dout, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "grad_q", dq, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "grad_k", dk, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "grad_v", dv, WGML_F32));
    attn_shape s;
    attn_params p = { 0 };
    WGML_CHECK(check_qk(e, fn, single, q, k, &s));
    WGML_CHECK(check_like(e, fn, "v", v, "k", k));
    WGML_CHECK(check_like(e, fn, "out", out, "q", q));
    WGML_CHECK(check_like(e, fn, "grad_out", dout, "q", q));
    WGML_CHECK(check_like(e, fn, "grad_q", dq, "q", q));
    WGML_CHECK(check_like(e, fn, "grad_k", dk, "k", k));
    WGML_CHECK(check_like(e, fn, "grad_v", dv, "k", k));
    WGML_CHECK(check_mask(e, fn, mask, &s, &p));
    const char *in_names[] = { "q", "k", "v", "out", "grad_out", "mask" };
    const wgml_tensor *ins[] = { q, k, v, out, dout, mask };
    const char *out_names[] = { "grad_q", "grad_k", "grad_v" };
    wgml_tensor *outs[] = { dq, dk, dv };
    for (int o = 0; o < 3; o++) {
        for (int i = 0; i < 6; i++) WGML_CHECK(wgml__check_no_alias(e, fn, out_names[o], outs[o], in_names[i], ins[i]));
        for (int o2 = 0; o2 < o; o2++) WGML_CHECK(wgml__check_no_alias(e, fn, out_names[o], outs[o], out_names[o2], outs[o2]));
    }
    WGML_CHECK(check_opts(e, fn, opts, &s, &p));
    WGML_CHECK(check_lse(e, fn, opts, &s));
    const wgml_tensor *all[] = { q, k, v, out, dout, mask, dq, dk, dv };
    const char *all_names[] = { "q", "k", "v", "out", "grad_out", "mask", "grad_q", "grad_k", "grad_v" };
    WGML_CHECK(check_scores(e, fn, opts, &s, all, all_names, 9));
    wgml_precision pr = opts && opts->precision ? opts->precision : e->ctx->matmul_precision;
    return backward(e, fn, q, k, v, out, dout, dq, dk, dv, &s, p, mask, opts ? opts->lse : NULL, opts ? opts->scores : NULL, pr);
}

wgml_status wgml_flash_attention(wgml_engine *e, const wgml_tensor *q, const wgml_tensor *k, const wgml_tensor *v,
                                 wgml_tensor *out, bool causal)
{
    wgml_attention_options o = { .causal = causal };
    return forward_api(e, "wgml_flash_attention", true, q, k, v, out, &o, NULL);
}

wgml_status wgml_flash_attention_v2(wgml_engine *e, const wgml_tensor *q, const wgml_tensor *k, const wgml_tensor *v,
                                    wgml_tensor *out, bool causal, float dropout_prob, uint64_t seed, const wgml_tensor *mask)
{
    wgml_attention_options o = { .causal = causal, .dropout_prob = dropout_prob, .seed = seed };
    return forward_api(e, "wgml_flash_attention_v2", false, q, k, v, out, &o, mask);
}

wgml_status wgml_flash_attention_v2_with(wgml_engine *e, const wgml_tensor *q, const wgml_tensor *k, const wgml_tensor *v,
                                         wgml_tensor *out, const wgml_attention_options *opts, const wgml_tensor *mask)
{
    return forward_api(e, "wgml_flash_attention_v2_with", false, q, k, v, out, opts, mask);
}

wgml_status wgml_flash_attention_backward(wgml_engine *e, const wgml_tensor *q, const wgml_tensor *k, const wgml_tensor *v,
                                          const wgml_tensor *out, const wgml_tensor *grad_out, wgml_tensor *grad_q,
                                          wgml_tensor *grad_k, wgml_tensor *grad_v, bool causal)
{
    wgml_attention_options o = { .causal = causal };
    return backward_api(e, "wgml_flash_attention_backward", true, q, k, v, out, grad_out, grad_q, grad_k, grad_v, &o, NULL);
}

wgml_status wgml_flash_attention_v2_backward(wgml_engine *e, const wgml_tensor *q, const wgml_tensor *k, const wgml_tensor *v,
                                             const wgml_tensor *out, const wgml_tensor *grad_out, wgml_tensor *grad_q,
                                             wgml_tensor *grad_k, wgml_tensor *grad_v, bool causal)
{
    wgml_attention_options o = { .causal = causal };
    return backward_api(e, "wgml_flash_attention_v2_backward", false, q, k, v, out, grad_out, grad_q, grad_k, grad_v, &o, NULL);
}

wgml_status wgml_flash_attention_v2_backward_with(wgml_engine *e, const wgml_tensor *q, const wgml_tensor *k,
                                                  const wgml_tensor *v, const wgml_tensor *out, const wgml_tensor *grad_out,
                                                  wgml_tensor *grad_q, wgml_tensor *grad_k, wgml_tensor *grad_v,
                                                  const wgml_attention_options *opts, const wgml_tensor *mask)
{
    return backward_api(e, "wgml_flash_attention_v2_backward_with", false, q, k, v, out, grad_out, grad_q, grad_k, grad_v, opts,
                        mask);
}

/* Variants for wgml_engine_warmup: the pipelines a 32 KiB CPU adapter (lavapipe) builds for
   the common calls. The merge pass of decoding, prefill with and without the log-sum-exp,
   the backward's statistics (from a given log-sum-exp, and prefill_stats), the 64 x 64
   backward at its chunk there (8 up to head_dim 64, 16 above) with dS stored dense, and
   the forward that keeps its scores; every feature built in (FEAT 3), as CPU adapters
   build them. Anything else (a GPU's per-call features, the 48 KiB chunk of 32, the tiled
   kernels, decoding, whose shapes depend on the adapter) compiles on first use. */
const wgml__kernel wgml__attention_kernels[] = {
    { .file = "attention_decode", .entry = "decode_combine", .layout = "urw" },
    { .file = "attention_forward", .entry = "prefill", .layout = "urrrrwrw", .nconst = 1, .constants = { { "PF_OCV", 1 } } },
    { .file = "attention_forward", .entry = "prefill", .layout = "urrrrwrw", .nconst = 1, .constants = { { "PF_OCV", 2 } } },
    { .file = "attention_forward", .entry = "prefill_lse", .layout = "urrrrwww", .nconst = 1, .constants = { { "PF_OCV", 1 } } },
    { .file = "attention_forward", .entry = "prefill_lse", .layout = "urrrrwww", .nconst = 1, .constants = { { "PF_OCV", 2 } } },
    { .file = "attention_backward", .entry = "bwd_prep", .layout = "urrrrwrr" },
    { .file = "attention_forward", .entry = "prefill_stats", .layout = "urrrrwrw", .nconst = 1, .constants = { { "PF_OCV", 1 } } },
    { .file = "attention_forward", .entry = "prefill_stats", .layout = "urrrrwrw", .nconst = 1, .constants = { { "PF_OCV", 2 } } },
    { .file = "attention_backward", .entry = "bwd_dkdv64", .layout = "urrrrwrrwwr", .nconst = 4, .constants = { { "GBK", 8 }, { "GOCV", 1 }, { "WRITE_DS", 1 }, { "DS_DENSE", 1 } } },
    { .file = "attention_backward", .entry = "bwd_dkdv64", .layout = "urrrrwrrwwr", .nconst = 4, .constants = { { "GBK", 16 }, { "GOCV", 2 }, { "WRITE_DS", 1 }, { "DS_DENSE", 1 } } },
    { .file = "attention_backward", .entry = "bwd_dq_mm", .layout = "urrrrwrr", .nconst = 1, .constants = { { "DQN", 64 } } },
    { .file = "attention_backward", .entry = "bwd_dq_mm", .layout = "urrrrwrr", .nconst = 1, .constants = { { "DQN", 128 } } },
    { .file = "attention_forward", .entry = "fwd_s_mm", .layout = "urrrrwrw" },
    { .file = "attention_forward", .entry = "fwd_pv_mm", .layout = "urrrrww", .nconst = 1, .constants = { { "DQN", 64 } } },
    { .file = "attention_forward", .entry = "fwd_pv_mm", .layout = "urrrrww", .nconst = 1, .constants = { { "DQN", 128 } } },
};
const size_t wgml__attention_kernel_count = sizeof wgml__attention_kernels / sizeof wgml__attention_kernels[0];
