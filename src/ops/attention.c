/* Flash attention: forward, backward, single-query decode. Kernels: src/kernels/attention.wgsl.

   Forward (seq_q > 1): one dispatch of `prefill` (the tiled `fwd` where it does not fit).
   Forward (seq_q == 1): `decode` over key splits then `decode_combine`. Backward: a
   statistics pass (log-sum-exp and D = rowsum(dO*O) per query row into a scratch of
   2*batch*heads*seq_q floats: `prefill_stats`, `fwd` in MODE 1, or `bwd_prep` from a given
   log-sum-exp), then dq and dk/dv: by default
   the 64 x 64 GEMM-style entries `bwd_dkdv64` writing dS and `bwd_dq_mm` (head_dim % 4
   == 0: dS^T stored dense, dq as a register-tiled product; WGML_ATTN_DQMM=0 turns it
   off) or `bwd_dq_ds64` (dS in 64 x 64 blocks) reading it (pick_ds; `bwd_dq64`
   recomputes dS instead where the blocks would take over 1 GiB or with WGML_ATTN_DS=0),
   256 threads, 24 or 32 KiB of workgroup memory; or the older tiled `bwd_dq` and
   `bwd_dkdv` where those do not fit.
   Tile shapes come from the device's workgroup storage (see pick_tiles, pick_bwd); the
   environment variables WGML_ATTN_FWD ("BR,TC,KPT,SHARED") and WGML_ATTN_DECODE
   ("THREADS,CK,HG,TARGET_WORKGROUPS") override them for tuning. WGML_ATTN_DQ and
   WGML_ATTN_DKDV choose the backward kernels: "old" (tiled, shape chosen as usual),
   "BR,TC,KPT,SHARED" (tiled, that shape), "new" or "new,8" / "new,16" / "new,32" (64 x 64
   entries, head_dim staged in chunks of 8, 16 or 32; ",s4" / ",s8" / ",s16" after the chunk
   consumes it that many steps at a time, G_SUB), unset (64 x 64 when they fit, the chunk by
   head_dim as in pick_bwd). WGML_ATTN_FEAT=all builds the mask and dropout code into the
   64 x 64 entries even for calls without them, "call" only what the call uses, also on
   CPU adapters (see feat_of). WGML_ATTN_PAIR=0 places the lanes of the 64 x 64 entries
   as before round 13 of bench/notes/attention.md (see unpaired_lanes). WGML_ATTN_ORDER
   sets how many heads' blocks are ordered together, longest first ("head": one, a number
   N: N; unset: see order_heads).

   Forward kernel for seq_q > 1 (A/B switch): `prefill` (256 threads, 64 x 64 blocks,
   head_dim streamed in chunks of BK floats) by default, else the older `fwd` (MODE 0).
   WGML_ATTN_PREFILL picks it:
     unset, "" or "auto"  prefill with BK 16 when it fits the device (faster than 32 on the
                          H200), else fwd; but fwd when WGML_ATTN_FWD is set (its tiles are fwd's)
     "old"                fwd (tiles from WGML_ATTN_FWD or the defaults)
     "bk64", "bk32", "bk16"  prefill with that chunk (refused if it does not fit)
   The backward's statistics pass follows the same choice: `prefill_stats` (prefill's
   scores and softmax without the P v product) with prefill, fwd in MODE 1 otherwise (tiles
   from WGML_ATTN_FWD); with options.lse the forward writes the row log-sum-exp
   (`prefill_lse`, `decode_combine_lse`, or fwd MODE 1 + `lse_export` on the tiled path)
   and the backward replaces the statistics pass by `bwd_prep` (one thread per row: the
   log-sum-exp converted, D = rowsum(dO*O)). With options.scores the forward stores its
   scores for the backward: through `fwd_s_mm` (the scores and each row's max per tile)
   and `fwd_pv_mm` (out and the log-sum-exp from them) where pick_fwd_mm allows (no mask
   or dropout, head_dim % 4 == 0; WGML_ATTN_FWDMM=0 turns it off), else `prefill_lse`
   with WRITE_S. */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DIM 128u
#define MAX_SEQ (1u << 26)
#define MAX_OFFSET (1u << 28)
#define LOG2E 1.4426950408889634

/* Mirrors struct Params of attention.wgsl. */
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

/* ---- tile shapes ---------------------------------------------------------------------- */

enum { K_FWD, K_STATS, K_DQ, K_DKDV };

typedef struct tiles { uint32_t br, tc, kpt, shared; } tiles;

/* Preference order: 4 columns per lane first (phase 1 then does 8 FMAs per workgroup load
   instead of 5.3 with 2: these kernels are bound by workgroup-memory bandwidth more than
   by L2), then more rows per workgroup (fewer re-reads of k/v or q/dout from L2),
   then separate staging regions (fewer barriers, loads overlap) over one shared region. */
static const tiles tile_candidates[] = {
    { 64, 8, 4, 0 }, { 64, 8, 4, 1 }, { 32, 8, 4, 0 }, { 32, 8, 4, 1 }, { 16, 8, 4, 0 }, { 16, 8, 4, 1 },
    { 32, 8, 2, 0 }, { 32, 8, 2, 1 }, { 16, 8, 2, 0 }, { 16, 8, 2, 1 }, { 16, 8, 1, 1 }, { 8, 8, 1, 1 },
    { 4, 8, 1, 1 },
};

/* Workgroup bytes of a kernel with tiles t at head_dim dim (mirrors the WGSL arrays). */
static uint64_t tile_bytes(int kind, uint32_t dim, tiles t)
{
    uint64_t d4 = (dim + 3) / 4, ocv = (d4 + t.tc - 1) / t.tc, rs = ocv * t.tc + 1;
    uint64_t bc = (uint64_t)t.kpt * t.tc, rg = t.br / 4, stage = t.shared ? 1 : 2;
    switch (kind) {
    case K_FWD: return 16 * (t.br * rs + stage * bc * rs + bc * rg + t.tc * rg);
    case K_STATS: return 16 * (t.br * rs + bc * rs + 1 + t.tc * rg);
    case K_DQ: return 16 * (2 * t.br * rs + stage * bc * rs + bc * rg);
    default: return 16 * (2 * t.br * rs + stage * bc * rs + 2 * bc * rg) + 4 * 2 * bc;
    }
}

static bool tiles_fit(wgml_context *ctx, int kind, uint32_t dim, tiles t)
{
    if (t.br < 4 || t.br % 4 || t.tc < 1 || (t.kpt != 1 && t.kpt != 2 && t.kpt != 4) || t.shared > 1) return false;
    uint32_t d4 = (dim + 3) / 4, ocv = (d4 + t.tc - 1) / t.tc;
    uint64_t wg = (uint64_t)(t.br / 4) * t.tc;
    if (ocv > 4 || wg > ctx->limits.maxComputeInvocationsPerWorkgroup || wg > ctx->limits.maxComputeWorkgroupSizeX)
        return false;
    return tile_bytes(kind, dim, t) <= ctx->limits.maxComputeWorkgroupStorageSize;
}

static const char *tile_env(int kind)
{
    return kind == K_DQ ? "WGML_ATTN_DQ" : kind == K_DKDV ? "WGML_ATTN_DKDV" : "WGML_ATTN_FWD";
}

static wgml_status pick_tiles(wgml_context *ctx, const char *fn, int kind, uint32_t dim, tiles *out)
{
    const char *name = tile_env(kind), *env = getenv(name);
    if (env && *env) {
        tiles t = { 0 };
        if (sscanf(env, "%u,%u,%u,%u", &t.br, &t.tc, &t.kpt, &t.shared) != 4 || !tiles_fit(ctx, kind, dim, t))
            return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT,
                              "%s: %s=\"%s\" is not BR,TC,KPT,SHARED tiles that fit this device at head_dim %u", fn, name,
                              env, dim);
        *out = t;
        return WGML_OK;
    }
    for (size_t i = 0; i < sizeof tile_candidates / sizeof tile_candidates[0]; i++)
        if (tiles_fit(ctx, kind, dim, tile_candidates[i])) {
            *out = tile_candidates[i];
            return WGML_OK;
        }
    return wgml__fail(ctx, WGML_ERROR_LIMIT, "%s: the device's %u bytes of workgroup storage are too few for head_dim %u", fn,
                      ctx->limits.maxComputeWorkgroupStorageSize, dim);
}

typedef struct decode_cfg { uint32_t threads, ck, hg, target; } decode_cfg;

static uint32_t decode_dc(uint32_t dim);

static uint64_t decode_bytes(uint32_t dim, decode_cfg c)
{
    uint64_t dc = decode_dc(dim);
    return 16 * (c.hg * dc + c.ck * (dc + 1) + c.ck * dc + c.hg) + 4ull * c.hg * c.ck;
}

static bool decode_fits(wgml_context *ctx, uint32_t dim, decode_cfg c)
{
    uint64_t dc = decode_dc(dim);
    if (c.threads < 1 || c.ck < 1 || c.hg < 1 || c.target < 1) return false;
    if (c.threads > ctx->limits.maxComputeInvocationsPerWorkgroup || c.threads > ctx->limits.maxComputeWorkgroupSizeX) return false;
    if (c.hg * dc > 8ull * c.threads) return false;   /* 8 accumulators per thread */
    return decode_bytes(dim, c) <= ctx->limits.maxComputeWorkgroupStorageSize;
}

static wgml_status pick_decode(wgml_context *ctx, const char *fn, uint32_t dim, uint32_t group, decode_cfg *out)
{
    const char *env = getenv("WGML_ATTN_DECODE");
    if (env && *env) {
        decode_cfg c = { 0 };
        if (sscanf(env, "%u,%u,%u,%u", &c.threads, &c.ck, &c.hg, &c.target) != 4 || !decode_fits(ctx, dim, c))
            return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT,
                              "%s: WGML_ATTN_DECODE=\"%s\" is not THREADS,CK,HG,TARGET that fit this device at head_dim %u", fn,
                              env, dim);
        *out = c;
        return WGML_OK;
    }
    uint32_t threads = 128;
    if (threads > ctx->limits.maxComputeInvocationsPerWorkgroup) threads = ctx->limits.maxComputeInvocationsPerWorkgroup;
    /* Heads per workgroup: a few fixed capacities rather than the exact group size, so that
       few pipelines serve every model (unused head slots only idle some threads: decoding
       is bound by reading k and v). */
    uint32_t hg = group <= 4 ? 4 : group <= 8 ? 8 : 32;
    if (hg > 8 * threads / decode_dc(dim)) hg = 8 * threads / decode_dc(dim);
    for (; hg >= 1; hg = hg > 1 ? (hg + 1) / 2 : 0) {
        for (uint32_t ck = 64; ck >= 4; ck /= 2) {
            decode_cfg c = { threads, ck, hg, 512 };
            if (decode_fits(ctx, dim, c)) {
                *out = c;
                return WGML_OK;
            }
        }
        if (hg == 1) break;
    }
    return wgml__fail(ctx, WGML_ERROR_LIMIT, "%s: the device's %u bytes of workgroup storage are too few for head_dim %u", fn,
                      ctx->limits.maxComputeWorkgroupStorageSize, dim);
}

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

static uint32_t mix32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
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
    p->seed_key = mix32((uint32_t)o->seed ^ mix32((uint32_t)(o->seed >> 32) ^ 0x9e3779b9u));
    p->seed_key2 = mix32(p->seed_key ^ 0x85ebca6bu);
    return WGML_OK;
}

/* ---- dispatch ------------------------------------------------------------------------- */

/* Pipelines depend on the tiles and on OCV = ceil(ceil(head_dim / 4) / TC) only; head_dim
   itself is a run-time parameter, so head dims of one class share a pipeline. */
static wgml__kernel tile_kernel(const char *entry, const char *layout, uint32_t dim, tiles t, int mode)
{
    uint32_t ocv = ((dim + 3) / 4 + t.tc - 1) / t.tc;
    wgml__kernel k = { .file = "attention", .entry = entry, .layout = layout, .nconst = 5,
                       .constants = { { "OCV", ocv }, { "BR", t.br }, { "TC", t.tc }, { "KPT", t.kpt }, { "SHARED_STAGE", t.shared } } };
    if (mode >= 0) {
        k.constants[5].name = "MODE";
        k.constants[5].value = mode;
        k.nconst = 6;
    }
    return k;
}

/* vec4 of a row that decode keeps in workgroup memory: head_dim / 4 rounded up to 8 */
static uint32_t decode_dc(uint32_t dim) { return ((dim + 3) / 4 + 7) / 8 * 8; }

static wgml__kernel decode_kernel(uint32_t dim, decode_cfg c)
{
    return (wgml__kernel){ .file = "attention", .entry = "decode", .layout = "urrrrw", .nconst = 4,
                           .constants = { { "DC", decode_dc(dim) }, { "DWG", c.threads }, { "CK", c.ck }, { "HG", c.hg } } };
}

static const wgml__kernel combine_kernel = { .file = "attention", .entry = "decode_combine", .layout = "urw" };
static const wgml__kernel combine_lse_kernel = { .file = "attention", .entry = "decode_combine_lse", .layout = "urww" };
/* one thread per query row: the statistics from a given log-sum-exp, and the way back */
static const wgml__kernel prep_kernel = { .file = "attention", .entry = "bwd_prep", .layout = "urrrrwrr" };
static const wgml__kernel export_kernel = { .file = "attention", .entry = "lse_export", .layout = "urrrrwrr" };

static wgml_status dispatch_tiles(wgml_engine *e, const wgml__kernel *k, attn_params p, uint64_t workgroups,
                                  const wgml__arg *args, uint32_t nargs)
{
    uint32_t gx, gy;
    WGML_CHECK(wgml__grid(e->ctx, workgroups, &gx, &gy));
    p.total_wg = (uint32_t)workgroups;
    return wgml__dispatch(e, k, &p, sizeof p, args, nargs, gx, gy, 1);
}

/* ---- prefill (forward, seq_q > 1) ------------------------------------------------------ */

/* Workgroup bytes of prefill with chunks of bk floats (mirrors pf_s and pf_p). */
static uint64_t prefill_bytes(uint32_t bk) { return 16ull * (bk * 32 + 1024); }

static bool prefill_fits(wgml_context *ctx, uint32_t bk)
{
    return ctx->limits.maxComputeInvocationsPerWorkgroup >= 256 && ctx->limits.maxComputeWorkgroupSizeX >= 256 &&
           prefill_bytes(bk) <= ctx->limits.maxComputeWorkgroupStorageSize;
}

/* The chunk of prefill per WGML_ATTN_PREFILL (see the top of this file); 0: use fwd. */
static wgml_status pick_prefill(wgml_context *ctx, const char *fn, uint32_t *bk)
{
    const char *env = getenv("WGML_ATTN_PREFILL"), *old_tiles = getenv("WGML_ATTN_FWD");
    *bk = 0;
    if (!env || !*env || !strcmp(env, "auto")) {
        if (old_tiles && *old_tiles) return WGML_OK;
        *bk = prefill_fits(ctx, 16) ? 16 : 0;   /* 16: 35 ms against 45 ms for 32 on the H200 (B4 H32 S4096 D128 causal) */
        return WGML_OK;
    }
    if (!strcmp(env, "old")) return WGML_OK;
    uint32_t want = !strcmp(env, "bk64") ? 64 : !strcmp(env, "bk32") ? 32 : !strcmp(env, "bk16") ? 16 : 0;
    if (!want || !prefill_fits(ctx, want))
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT,
                          "%s: WGML_ATTN_PREFILL=\"%s\" is not auto, old, bk64, bk32 or bk16 that fits this device", fn, env);
    *bk = want;
    return WGML_OK;
}

/* FEAT of the 64 x 64 entries (attention.wgsl): on GPUs the call's mask and dropout flags,
   so that a call without them runs a pipeline without their code and registers; on CPU
   adapters every feature (3), where registers do not matter and each extra pipeline costs
   seconds of compilation. WGML_ATTN_FEAT=all builds every feature in everywhere (the A/B
   of round 10 in bench/notes/attention.md), "call" builds for the call everywhere (tests). */
static uint32_t feat_of(const wgml_context *ctx, const attn_params *p)
{
    const char *env = getenv("WGML_ATTN_FEAT");
    if (env && !strcmp(env, "all")) return 3;
    if (env && !strcmp(env, "call")) return p->flags & 3;
    return ctx->cpu_adapter ? 3 : p->flags & 3;
}

/* Appends an override constant to k (the optional ones of the attention kernels). */
/* WGML_ATTN_PAIR=0: the 64 x 64 entries with their lanes placed as before round 13 of
   bench/notes/attention.md, not paired for workgroup-memory reads (PAIR in attention.wgsl). */
static bool unpaired_lanes(void)
{
    const char *env = getenv("WGML_ATTN_PAIR");
    return env && !strcmp(env, "0");
}

/* The k and v bytes a query head's workgroups re-read (a kv head's, shared by its group). */
static uint64_t query_head_bytes(const attn_shape *s)
{
    return 2ull * 4 * s->seq_k * s->dim / (s->heads / s->kv_heads);
}

/* WGML_ATTN_ORDER as *fixed: 0 when unset or "" (the rule of order_heads), else the heads
   per group it asks for; anything else is refused. */
static wgml_status pick_order(wgml_context *ctx, const char *fn, uint32_t *fixed)
{
    const char *env = getenv("WGML_ATTN_ORDER");
    *fixed = 0;
    if (!env || !*env) return WGML_OK;
    if (!strcmp(env, "head")) {
        *fixed = 1;
        return WGML_OK;
    }
    char *end = NULL;
    unsigned long n = env[0] >= '0' && env[0] <= '9' ? strtoul(env, &end, 10) : 0;
    if (!end || *end || n < 1 || n > 65536)
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT,
                          "%s: WGML_ATTN_ORDER=\"%s\" is not head or a number of heads from 1 to 65536", fn, env);
    *fixed = (uint32_t)n;
    return WGML_OK;
}

/* Heads per group of the block order (block_of in attention.wgsl). Where the blocks differ
   in length (causal, window): as many heads as keep the rows each head's workgroups re-read
   (head_bytes) within `budget` bytes, so that the workgroups in flight share them in the L2
   cache; else 1 (one head at a time: longest first buys nothing there, and the H200 ran
   B4 H32 S4096 D128 without a mask 10% slower in groups of two heads). fixed (from
   WGML_ATTN_ORDER, see pick_order): that many heads; "head" is 1, the order before round
   18 of bench/notes/attention.md. The budgets are the H200's (round 18): the forward was
   fastest in groups of 32 heads at B8 H12 S1024 D64 (16 MiB) and equal in 2 - 8 at
   B4 H32 S4096 D128; the backward was fastest at 8 MiB on both. */
#define FWD_ORDER_BYTES (16u << 20)
#define BWD_ORDER_BYTES (8u << 20)
static uint32_t order_heads(const attn_params *p, uint32_t fixed, uint64_t head_bytes, uint64_t budget)
{
    if (fixed) return fixed;
    if (!p->causal && p->window <= 0) return 1;
    uint64_t n = head_bytes ? budget / head_bytes : 1;
    return n < 1 ? 1 : n > 65536 ? 65536 : (uint32_t)n;
}

/* `prefill` (layout "urrrrwrw"), `prefill_lse` ("urrrrwww") or `prefill_stats` ("urrrrwrw":
   dout beside) for this head_dim; binding 7 is the scores output of options.scores (WRITE_S),
   else the engine's unused scratch (see unused_arg).
   FEAT only when it is not the WGSL default (3), so that the pipelines of CPU adapters keep
   the keys of wgml__attention_kernels. */
static wgml__kernel prefill_kernel(const wgml_context *ctx, const char *entry, const char *layout, uint32_t dim, uint32_t bk,
                                   const attn_params *p)
{
    wgml__kernel k = { .file = "attention", .entry = entry, .layout = layout, .nconst = 2,
                       .constants = { { "PF_BK", bk }, { "PF_OCV", dim <= 64 ? 1 : 2 } } };
    uint32_t feat = feat_of(ctx, p);
    if (feat != 3) wgml__add_constant(&k, "FEAT", feat);
    if (unpaired_lanes()) wgml__add_constant(&k, "PAIR", 0);
    return k;
}

/* The writable binding a prefill entry declares for the scores when the call keeps none. */
static wgml_status unused_arg(wgml_engine *e, wgml__arg *out) { return wgml__scratch(e, WGML__SCRATCH_ATTN_UNUSED, 16, out); }

/* floats of the engine's attention scratch (decode partials, backward statistics),
   indexed with 32-bit integers by the kernels */
static wgml_status attn_scratch(wgml_engine *e, uint64_t floats, wgml__arg *out)
{
    if (floats > 0xFFFFFFFFull - 4096)
        return wgml__fail(e->ctx, WGML_ERROR_LIMIT, "attention: a scratch of %llu floats exceeds 32-bit indexing",
                          (unsigned long long)floats);
    return wgml__scratch(e, WGML__SCRATCH_ATTN, 4 * floats, out);
}

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

/* One thread per query row (bwd_prep, lse_export: both bind the 7 arguments of the
   "urrrrwrr" layout). */
static wgml_status dispatch_rows(wgml_engine *e, const wgml__kernel *k, attn_params p, const attn_shape *s,
                                 const wgml__arg *args)
{
    uint64_t rows = (uint64_t)s->batch * s->heads * s->seq_q;
    return dispatch_tiles(e, k, p, (rows + 255) / 256, args, 7);
}

/* Whether the forward that keeps its scores runs as fwd_s_mm + fwd_pv_mm (attention.wgsl)
   rather than prefill_lse with WRITE_S: no mask, no dropout, head_dim % 4 == 0 and <= 128,
   256 invocations per workgroup; WGML_ATTN_FWDMM "0" keeps prefill_lse ("1" or unset: the
   rule; anything else is refused). Measured on the H200 in round 25 of
   bench/notes/attention.md. */
/* A switch variable: *off when it is "0"; "1", "" or unset leave it on; anything else is refused. */
static wgml_status env_switch(wgml_context *ctx, const char *fn, const char *name, bool *off)
{
    const char *env = getenv(name);
    if (env && *env && strcmp(env, "0") && strcmp(env, "1"))
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: %s=\"%s\" is not 0 or 1", fn, name, env);
    *off = env && !strcmp(env, "0");
    return WGML_OK;
}

static wgml_status pick_fwd_mm(wgml_context *ctx, const char *fn, uint32_t dim, const attn_params *p, bool *use,
                               bool *mu_in_registers)
{
    bool off = false;
    WGML_CHECK(env_switch(ctx, fn, "WGML_ATTN_FWDMM", &off));
    /* WGML_ATTN_PVMU=0: fwd_pv_mm holds its row maxima in registers (the form before round
       26 of bench/notes/attention.md) */
    WGML_CHECK(env_switch(ctx, fn, "WGML_ATTN_PVMU", mu_in_registers));
    *use = !off && dim % 4 == 0 && dim <= 128 && !(p->flags & 3) &&
           ctx->limits.maxComputeInvocationsPerWorkgroup >= 256 && ctx->limits.maxComputeWorkgroupSizeX >= 256;
    return WGML_OK;
}

/* The forward with its scores kept, as two products: fwd_s_mm stores the scores in tiles of
   128 x 128 and each query's max per key tile (in the attention scratch), fwd_pv_mm reads
   them back for out and lse. Its tiles run longest first over all heads (they share no
   rows) unless WGML_ATTN_ORDER fixes the group. */
static wgml_status forward_mm(wgml_engine *e, const wgml_tensor *q, const wgml_tensor *k, const wgml_tensor *v,
                              wgml_tensor *out, const attn_shape *s, attn_params p, wgml_tensor *lse, wgml_tensor *scores,
                              uint32_t fixed, bool mu_in_registers)
{
    uint64_t heads = (uint64_t)s->batch * s->heads, m_tiles = wgml__ceil_div(s->seq_q, 128),
             k_tiles = wgml__ceil_div(s->seq_k, 128);
    p.q_blocks = wgml__ceil_div(s->seq_q, 64);
    p.k_blocks = wgml__ceil_div(s->seq_k, 64);
    wgml__arg rm;
    WGML_CHECK(attn_scratch(e, heads * k_tiles * m_tiles * 128, &rm));
    static const wgml__kernel ks = { .file = "attention", .entry = "fwd_s_mm", .layout = "urrrrwrw" };
    wgml__arg sargs[] = { wgml__t(q), wgml__t(k), wgml__t(v), wgml__t(q), rm, wgml__t(q), wgml__t(scores) };
    WGML_CHECK(dispatch_tiles(e, &ks, p, heads * m_tiles * k_tiles, sargs, 7));
    wgml__kernel kp = { .file = "attention", .entry = "fwd_pv_mm", .layout = "urrrrww", .nconst = 2,
                        .constants = { { "DQN", s->dim <= 64 ? 64 : 128 }, { "PV_MU", mu_in_registers ? 0 : 1 } } };
    if (!fixed) p.order_heads = UINT32_MAX;
    wgml__arg pargs[] = { rm, wgml__t(k), wgml__t(v), wgml__t(scores), wgml__t(out), wgml__t(lse) };
    return dispatch_tiles(e, &kp, p, heads * m_tiles, pargs, 6);
}

/* lse (may be NULL): also write each query row's log-sum-exp there (wgml.h); scores (may be
   NULL, then lse is set): also the scores of every visited block (WRITE_S, or forward_mm). */
static wgml_status forward(wgml_engine *e, const char *fn, const wgml_tensor *q, const wgml_tensor *k, const wgml_tensor *v,
                           wgml_tensor *out, const attn_shape *s, attn_params p, const wgml_tensor *mask, wgml_tensor *lse,
                           wgml_tensor *scores)
{
    wgml_context *ctx = e->ctx;
    uint32_t dim = s->dim;
    wgml__arg m = wgml__t(mask ? mask : q);
    uint32_t fixed;
    WGML_CHECK(pick_order(ctx, fn, &fixed));
    p.order_heads = order_heads(&p, fixed, query_head_bytes(s), FWD_ORDER_BYTES);
    uint32_t bk = 0;
    if (s->seq_q > 1) WGML_CHECK(pick_prefill(ctx, fn, &bk));
    if (scores && !bk)
        return wgml__fail(ctx, WGML_ERROR_LIMIT, "%s: options.scores needs the forward's 64 x 64 kernel (prefill), which this "
                          "call does not use (seq_q 1, head_dim over 128, WGML_ATTN_PREFILL or WGML_ATTN_FWD)", fn);
    bool fwd_mm = false, mu_in_registers = false;
    if (scores) WGML_CHECK(pick_fwd_mm(ctx, fn, dim, &p, &fwd_mm, &mu_in_registers));
    if (fwd_mm) return forward_mm(e, q, k, v, out, s, p, lse, scores, fixed, mu_in_registers);
    if (bk) {
        p.q_blocks = wgml__ceil_div(s->seq_q, 64);
        p.k_blocks = wgml__ceil_div(s->seq_k, 64);
        wgml__kernel kp = lse ? prefill_kernel(ctx, "prefill_lse", "urrrrwww", dim, bk, &p)
                              : prefill_kernel(ctx, "prefill", "urrrrwrw", dim, bk, &p);
        if (scores) wgml__add_constant(&kp, "WRITE_S", 1);
        wgml__arg sc;
        if (scores) sc = wgml__t(scores);
        else WGML_CHECK(unused_arg(e, &sc));
        wgml__arg args[] = { wgml__t(q), wgml__t(k), wgml__t(v), m, wgml__t(out), wgml__t(lse ? lse : q), sc };
        return dispatch_tiles(e, &kp, p, (uint64_t)s->batch * s->heads * p.q_blocks, args, 7);
    }
    if (s->seq_q > 1) {
        tiles t = { 0 }, ts = { 0 };
        WGML_CHECK(pick_tiles(ctx, fn, K_FWD, dim, &t));
        if (lse) WGML_CHECK(pick_tiles(ctx, fn, K_STATS, dim, &ts));
        attn_params pf = p;
        pf.q_blocks = wgml__ceil_div(s->seq_q, t.br);
        wgml__kernel kf = tile_kernel("fwd", "urrrrwr", dim, t, 0);
        wgml__arg args[] = { wgml__t(q), wgml__t(k), wgml__t(v), m, wgml__t(out), wgml__t(q) };
        wgml_status r = dispatch_tiles(e, &kf, pf, (uint64_t)s->batch * s->heads * pf.q_blocks, args, 6);
        if (r != WGML_OK || !lse) return r;
        /* the log-sum-exp through the statistics pass (its D column, from out twice, unused) */
        wgml__arg st;
        WGML_CHECK(attn_scratch(e, 2ull * s->batch * s->heads * s->seq_q, &st));
        attn_params ps = p;
        ps.q_blocks = wgml__ceil_div(s->seq_q, ts.br);
        wgml__kernel kst = tile_kernel("fwd", "urrrrwr", dim, ts, 1);
        wgml__arg sargs[] = { wgml__t(q), wgml__t(k), wgml__t(out), m, st, wgml__t(out) };
        r = dispatch_tiles(e, &kst, ps, (uint64_t)s->batch * s->heads * ps.q_blocks, sargs, 6);
        wgml__arg xargs[] = { wgml__t(q), wgml__t(k), wgml__t(v), m, wgml__t(lse), wgml__t(q), st };
        if (r == WGML_OK) r = dispatch_rows(e, &export_kernel, p, s, xargs);
        return r;
    }

    decode_cfg c = { 0 };
    WGML_CHECK(pick_decode(ctx, fn, dim, p.group, &c));
    int64_t lo, hi;
    decode_range(&p, &lo, &hi);
    uint64_t range = (uint64_t)(hi - lo);
    p.head_chunks = wgml__ceil_div(p.group, c.hg);
    uint64_t rows = (uint64_t)s->batch * s->kv_heads * p.head_chunks;
    uint64_t want = (c.target + rows - 1) / rows, max_splits = range ? (range + c.ck - 1) / c.ck : 1;
    if (want > max_splits) want = max_splits;
    if (want < 1) want = 1;
    uint64_t kps = range ? (range + want - 1) / want : 0;
    kps = (kps + c.ck - 1) / c.ck * c.ck;
    p.splits = kps ? (uint32_t)((range + kps - 1) / kps) : 1;
    p.keys_per_split = (uint32_t)kps;
    p.key_lo = (int32_t)lo;
    p.key_hi = (int32_t)hi;
    uint32_t d4 = (dim + 3) / 4;
    wgml__arg part;
    WGML_CHECK(attn_scratch(e, (uint64_t)s->batch * s->heads * p.splits * (d4 + 1) * 4, &part));
    wgml__kernel kd = decode_kernel(dim, c);
    wgml__arg args[] = { wgml__t(q), wgml__t(k), wgml__t(v), m, part };
    wgml_status st = dispatch_tiles(e, &kd, p, rows * p.splits, args, 5);
    if (st == WGML_OK) {
        wgml__arg cargs[] = { part, wgml__t(out), wgml__t(lse ? lse : out) };
        st = dispatch_tiles(e, lse ? &combine_lse_kernel : &combine_kernel, p, (uint64_t)s->batch * s->heads, cargs, lse ? 3 : 2);
    }
    return st;
}

/* ---- backward kernel choice ----------------------------------------------------------- */

/* The 64 x 64 GEMM-style entries bwd_dq64 / bwd_dkdv64 (see attention.wgsl): 256 threads,
   workgroup memory 16 * (64 * GBK + 1024) bytes (24 KiB at GBK 8, 32 KiB at GBK 16). */
typedef struct bwd_choice { bool gemm; uint32_t bk, sub; tiles t; } bwd_choice;

static uint64_t gemm_bytes(uint32_t bk) { return 16ull * (64ull * bk + 1024); }

/* The default G_SUB of a chunk: chunks of 32 consumed 8 steps at a time (forward + backward
   144.0 ms against 150.0, B4 H32 S4096 D128 causal, lse; round 10 of
   bench/notes/attention.md), shorter chunks whole. */
static uint32_t default_sub(uint32_t bk) { return bk == 32 ? 8 : 0; }

/* bwd_dkdv64 binds 10 storage buffers (its dS output, WRITE_DS, and the forward's scores,
   READ_S, included), bwd_dq64 7. */
static bool gemm_fits(wgml_context *ctx, int kind, uint32_t bk)
{
    if (bk != 8 && bk != 16 && bk != 32) return false;
    if (ctx->limits.maxComputeInvocationsPerWorkgroup < 256 || ctx->limits.maxComputeWorkgroupSizeX < 256) return false;
    if (kind == K_DKDV && ctx->limits.maxStorageBuffersPerShaderStage < 10) return false;
    return gemm_bytes(bk) <= ctx->limits.maxComputeWorkgroupStorageSize;
}

/* WGML_ATTN_DQ / WGML_ATTN_DKDV: unset or "" picks the GEMM entries when they fit (GBK 8 at
   head_dim <= 64; 32 consumed 8 at a time, else 16, else 8 above), the old tiles otherwise; "old" forces the old tiles (chosen as usual);
   "BR,TC,KPT,SHARED" forces the old tiles with that shape; "new" or "new,GBK" forces the
   GEMM entries (GBK 8, 16 or 32; "new,GBK,sS": G_SUB = S), refused when they do not fit. */
static wgml_status pick_bwd(wgml_context *ctx, const char *fn, int kind, uint32_t dim, bwd_choice *out)
{
    const char *name = tile_env(kind), *env = getenv(name);
    bool force_old = env && !strcmp(env, "old");
    memset(out, 0, sizeof *out);
    /* chunks measured on the H200 (round 4 of bench/notes/attention.md): 8 floats at
       head_dim <= 64 (forward + backward 5.15 ms against 5.71 with 16, B8 H12 S1024), 32
       above (backward 143 ms against 154 with 16, B4 H32 S4096 D128); else the largest
       that fits */
    static const uint32_t small_dims[] = { 8 }, large_dims[] = { 32, 16, 8 };
    const uint32_t *order = dim <= 64 ? small_dims : large_dims;
    size_t norder = dim <= 64 ? 1 : 3;
    uint32_t auto_bk = 0;
    for (size_t i = 0; i < norder && !auto_bk; i++)
        if (gemm_fits(ctx, kind, order[i])) auto_bk = order[i];
    if (env && !strncmp(env, "new", 3)) {
        unsigned bk = 0, sub = 0;
        int used = 0, rest = 0;
        if (!strcmp(env, "new")) { bk = auto_bk; sub = default_sub(auto_bk); }
        else if (sscanf(env, "new,%u%n", &bk, &used) != 1) bk = 0;
        else if (env[used] && (sscanf(env + used, ",s%u%n", &sub, &rest) != 1 || env[used + rest] ||
                               (sub != 4 && sub != 8 && sub != 16) || sub >= bk))
            bk = 0;
        if (!gemm_fits(ctx, kind, bk))
            return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT,
                              "%s: %s=\"%s\" asks for the 64x64 kernels with a head_dim chunk (8, 16 or 32, optionally "
                              "followed by ,s4 / ,s8 / ,s16 below it) that does not fit this device", fn, name, env);
        out->gemm = true;
        out->bk = bk;
        out->sub = sub;
        return WGML_OK;
    }
    if (env && *env && !force_old) return pick_tiles(ctx, fn, kind, dim, &out->t);
    if (!force_old && auto_bk) {
        out->gemm = true;
        out->bk = auto_bk;
        out->sub = default_sub(auto_bk);
        return WGML_OK;
    }
    for (size_t i = 0; i < sizeof tile_candidates / sizeof tile_candidates[0]; i++)
        if (tiles_fit(ctx, kind, dim, tile_candidates[i])) {
            out->t = tile_candidates[i];
            return WGML_OK;
        }
    return wgml__fail(ctx, WGML_ERROR_LIMIT, "%s: the device's %u bytes of workgroup storage are too few for head_dim %u", fn,
                      ctx->limits.maxComputeWorkgroupStorageSize, dim);
}

/* GOCV = vec4 of head_dim per thread in the block products: 1 up to head_dim 64, else 2.
   FEAT (see feat_of) only when it is not the default 3, G_SUB (c.sub) only when set; then
   p->subs and p->subs_rows count its sub-chunks. */
static wgml__kernel gemm_kernel(const wgml_context *ctx, const char *entry, const char *layout, uint32_t dim, bwd_choice c,
                                attn_params *p)
{
    uint32_t ocv = ((dim + 3) / 4 + 15) / 16, rows = 4 * c.bk / ocv < 64 ? 4 * c.bk / ocv : 64;
    p->subs = c.sub ? c.bk / c.sub : 0;
    p->subs_rows = c.sub ? rows / c.sub : 0;
    wgml__kernel k = { .file = "attention", .entry = entry, .layout = layout, .nconst = 2,
                       .constants = { { "GBK", c.bk }, { "GOCV", ocv } } };
    uint32_t feat = feat_of(ctx, p);
    if (feat != 3) wgml__add_constant(&k, "FEAT", feat);
    if (c.sub) wgml__add_constant(&k, "G_SUB", c.sub);
    if (unpaired_lanes()) wgml__add_constant(&k, "PAIR", 0);
    return k;
}

/* The dq half through dS (WRITE_DS and bwd_dq_ds64, see attention.wgsl): bwd_dkdv64 also
   stores dS, 16 KiB per (batch, head, query block, key block), and bwd_dq_ds64 multiplies
   it by k, one block product where bwd_dq64 recomputes S and dP for three. The blocks go
   to a scratch of at most DS_MAX_BYTES (400 MB at batch 8, 12 heads, seq 1024): where all
   of them do not fit, both kernels run over ranges of (batch, kv head) pairs whose blocks
   do (`chunk` pairs per range, 0: not this path; `pair_bytes` the blocks of one pair). By
   default when both halves run the 64 x 64 entries and the blocks of one pair fit
   DS_MAX_BYTES. WGML_ATTN_DS: "0" never, "1" whenever those of one pair fit one storage
   binding (refused otherwise; ranges of up to the binding size), "1,N" the same in ranges
   of at most N pairs, unset or "" the rule. */
#define DS_MAX_BYTES (1ull << 30)

static wgml_status pick_ds(wgml_context *ctx, const char *fn, bwd_choice cq, bwd_choice ck, const attn_shape *s,
                           uint32_t *chunk, uint64_t *pair_bytes)
{
    const char *env = getenv("WGML_ATTN_DS");
    uint64_t limit = ctx->limits.maxStorageBufferBindingSize;
    uint64_t pair = 16384ull * (s->heads / s->kv_heads) * wgml__ceil_div(s->seq_q, 64) * wgml__ceil_div(s->seq_k, 64);
    *pair_bytes = pair;
    uint32_t pairs = s->batch * s->kv_heads;
    unsigned most = 0;
    int used = 0;
    bool forced = env && (!strcmp(env, "1") || (sscanf(env, "1,%u%n", &most, &used) == 1 && !env[used] && most > 0 &&
                                                 env[2] >= '0' && env[2] <= '9'));
    if (env && *env && strcmp(env, "0") && !forced)
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: WGML_ATTN_DS=\"%s\" is not 0, 1 or 1,N (N > 0)", fn,
                          env);
    if (forced && !(cq.gemm && ck.gemm && pair <= limit))
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT,
                          "%s: WGML_ATTN_DS=1 needs the 64 x 64 backward entries and the %llu bytes of dS of one (batch, "
                          "kv head) pair in one storage binding (%llu on this device)", fn, (unsigned long long)pair,
                          (unsigned long long)limit);
    uint64_t cap = forced ? limit : DS_MAX_BYTES < limit ? DS_MAX_BYTES : limit;
    *chunk = 0;
    if ((env && !strcmp(env, "0")) || !cq.gemm || !ck.gemm || pair > cap) return WGML_OK;
    *chunk = cap / pair < pairs ? (uint32_t)(cap / pair) : pairs;
    if (most && most < *chunk) *chunk = most;
    return WGML_OK;
}

/* Whether dq from dS runs as bwd_dq_mm (dS^T dense, see attention.wgsl) rather than
   bwd_dq_ds64: head_dim % 4 == 0 (vec4 rows), 256 invocations per workgroup above head_dim
   64, unless WGML_ATTN_DQMM is "0" ("1" or unset: the rule; anything else is refused).
   Measured on the H200 in round 24 of bench/notes/attention.md. */
static wgml_status pick_dq_mm(wgml_context *ctx, const char *fn, uint32_t dim, bool *use)
{
    bool off = false;
    WGML_CHECK(env_switch(ctx, fn, "WGML_ATTN_DQMM", &off));
    uint32_t threads = dim <= 64 ? 128 : 256;
    *use = !off && dim % 4 == 0 && threads <= ctx->limits.maxComputeInvocationsPerWorkgroup &&
           threads <= ctx->limits.maxComputeWorkgroupSizeX;
    return WGML_OK;
}

/* dq by bwd_dq64 (S, dP and dS recomputed) or the tiled bwd_dq. */
static wgml_status backward_dq(wgml_engine *e, const wgml_tensor *q, const wgml_tensor *k, const wgml_tensor *v,
                               const wgml_tensor *dout, wgml_tensor *dq, const attn_shape *s, attn_params p, wgml__arg m,
                               wgml__arg st, bwd_choice cq)
{
    p.q_blocks = wgml__ceil_div(s->seq_q, cq.gemm ? 64 : cq.t.br);
    wgml__kernel kq = cq.gemm ? gemm_kernel(e->ctx, "bwd_dq64", "urrrrwrr", s->dim, cq, &p)
                              : tile_kernel("bwd_dq", "urrrrwrr", s->dim, cq.t, -1);
    wgml__arg qargs[] = { wgml__t(q), wgml__t(k), wgml__t(v), m, wgml__t(dq), wgml__t(dout), st };
    return dispatch_tiles(e, &kq, p, (uint64_t)s->batch * s->heads * p.q_blocks, qargs, 7);
}

/* lse (may be NULL): the forward's log-sum-exp, read instead of the statistics pass;
   scores (may be NULL, then lse is set): the forward's scores, read by bwd_dkdv64 (READ_S)
   instead of its product S = k q^T. */
static wgml_status backward(wgml_engine *e, const char *fn, const wgml_tensor *q, const wgml_tensor *k, const wgml_tensor *v,
                            const wgml_tensor *out, const wgml_tensor *dout, wgml_tensor *dq, wgml_tensor *dk, wgml_tensor *dv,
                            const attn_shape *s, attn_params p, const wgml_tensor *mask, const wgml_tensor *lse,
                            const wgml_tensor *scores)
{
    wgml_context *ctx = e->ctx;
    uint32_t dim = s->dim;
    tiles ts = { 0 };
    bwd_choice cq, ck;
    WGML_CHECK(pick_tiles(ctx, fn, K_STATS, dim, &ts));
    WGML_CHECK(pick_bwd(ctx, fn, K_DQ, dim, &cq));
    WGML_CHECK(pick_bwd(ctx, fn, K_DKDV, dim, &ck));
    if (scores && !ck.gemm)
        return wgml__fail(ctx, WGML_ERROR_LIMIT, "%s: options.scores needs the backward's 64 x 64 kernel (bwd_dkdv64), which "
                          "this call does not use (head_dim over 128, an adapter with fewer than 10 storage buffers per stage "
                          "or 256 invocations, or WGML_ATTN_DKDV)", fn);
    uint32_t fixed;
    WGML_CHECK(pick_order(ctx, fn, &fixed));
    uint32_t chunk = 0, group = s->heads / s->kv_heads;
    uint64_t pair_bytes = 0;
    WGML_CHECK(pick_ds(ctx, fn, cq, ck, s, &chunk, &pair_bytes));
    bool dq_mm = false;
    WGML_CHECK(pick_dq_mm(ctx, fn, dim, &dq_mm));
    dq_mm = dq_mm && chunk;
    wgml__arg st, ds = { 0 };
    WGML_CHECK(attn_scratch(e, 2ull * s->batch * s->heads * s->seq_q, &st));
    /* bwd_dkdv64 binds a dS output either way (unwritten without WRITE_DS) */
    if (ck.gemm) WGML_CHECK(wgml__scratch(e, WGML__SCRATCH_ATTN_DS, chunk ? chunk * pair_bytes : 16, &ds));
    wgml__arg m = wgml__t(mask ? mask : q);
    p.order_heads = order_heads(&p, fixed, query_head_bytes(s), BWD_ORDER_BYTES);

    /* statistics: from the given log-sum-exp (bwd_prep), else prefill_stats (prefill's
       scores and softmax, no P v) where prefill is the forward, else fwd in MODE 1 (the
       choice is made either way, so a malformed tuning variable is refused either way) */
    attn_params ps = p;
    uint32_t bk;
    WGML_CHECK(pick_prefill(ctx, fn, &bk));
    ps.q_blocks = wgml__ceil_div(s->seq_q, bk ? 64 : ts.br);
    wgml__kernel kst = bk ? prefill_kernel(ctx, "prefill_stats", "urrrrwrw", dim, bk, &ps) : tile_kernel("fwd", "urrrrwr", dim, ts, 1);
    wgml_status r;
    if (lse) {
        wgml__arg pargs[] = { wgml__t(q), wgml__t(k), wgml__t(out), m, st, wgml__t(dout), wgml__t(lse) };
        r = dispatch_rows(e, &prep_kernel, p, s, pargs);
    } else {
        wgml__arg un = { 0 };
        r = bk ? unused_arg(e, &un) : WGML_OK;
        wgml__arg sargs[] = { wgml__t(q), wgml__t(k), wgml__t(out), m, st, wgml__t(dout), un };
        if (r == WGML_OK) r = dispatch_tiles(e, &kst, ps, (uint64_t)s->batch * s->heads * ps.q_blocks, sargs, bk ? 7 : 6);
    }

    /* dq before dk, dv; with dS, per range of (batch, kv head) pairs: dk, dv first (they
       write its dS), then dq */
    if (r == WGML_OK && !chunk) r = backward_dq(e, q, k, v, dout, dq, s, p, m, st, cq);
    attn_params pk = p, pq = p;
    /* a kv head's workgroups re-read the q and dout rows of its query heads */
    pk.order_heads = order_heads(&p, fixed, 2ull * 4 * s->seq_q * dim * group, BWD_ORDER_BYTES);
    pk.q_blocks = pq.q_blocks = wgml__ceil_div(s->seq_q, 64);
    pk.k_blocks = pq.k_blocks = wgml__ceil_div(s->seq_k, ck.gemm ? 64 : ck.t.br);
    wgml__kernel kk = ck.gemm ? gemm_kernel(ctx, "bwd_dkdv64", "urrrrwrrwwr", dim, ck, &pk)
                              : tile_kernel("bwd_dkdv", "urrrrwrrw", dim, ck.t, -1);
    if (chunk) wgml__add_constant(&kk, "WRITE_DS", 1);
    if (dq_mm) wgml__add_constant(&kk, "DS_DENSE", 1);
    if (scores) wgml__add_constant(&kk, "READ_S", 1);
    wgml__kernel kq = { 0 };
    /* bwd_dq_mm: tiles of 128 queries, all heads of a range longest first (its tiles
       share no rows) unless WGML_ATTN_ORDER fixes the group */
    uint32_t q_tiles = dq_mm ? wgml__ceil_div(s->seq_q, 128) : pq.q_blocks;
    if (dq_mm) {
        kq = (wgml__kernel){ .file = "attention", .entry = "bwd_dq_mm", .layout = "urrrrwrr", .nconst = 1,
                             .constants = { { "DQN", dim <= 64 ? 64 : 128 } } };
        if (!fixed) pq.order_heads = UINT32_MAX;
    } else if (chunk) {
        kq = gemm_kernel(ctx, "bwd_dq_ds64", "urrrrwrr", dim, cq, &pq);
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
    uint32_t bk = 0;
    bwd_choice ck;
    char saved[WGML_ERROR_MAX];   /* a refused tuning variable answers no, without a new last error */
    memcpy(saved, e->ctx->error, sizeof saved);
    bool ok = seq_q > 1 && pick_prefill(e->ctx, "attention", &bk) == WGML_OK && bk &&
              pick_bwd(e->ctx, "attention", K_DKDV, head_dim, &ck) == WGML_OK && ck.gemm;
    memcpy(e->ctx->error, saved, sizeof saved);
    return ok;
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
   log-sum-exp set too, no window; no other tensor of the call (others[], and lse). */
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
    return wgml__check_no_alias(e, fn, "scores", sc, "lse", opts->lse);
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
    return forward(e, fn, q, k, v, out, &s, p, mask, opts ? opts->lse : NULL, opts ? opts->scores : NULL);
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
    return backward(e, fn, q, k, v, out, dout, dq, dk, dv, &s, p, mask, opts ? opts->lse : NULL, opts ? opts->scores : NULL);
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

/* Variants for wgml_engine_warmup. The tiled kernels' variants depend on the device's
   workgroup storage (pick_tiles), which a static list cannot know, so only the merge pass
   of decoding, the forward `prefill` at its default chunk (24 KiB) with and without the
   log-sum-exp output, the backward's statistics from a given log-sum-exp, and the backward's
   64 x 64 entries as picked on a device with 32 KiB of workgroup storage (lavapipe): GBK 8
   up to head_dim 64, 16 above (a 48 KiB device such as the H200 picks 32 there and
   compiles it on first use); the rest compile on first use (one pipeline per tile shape
   and head_dim class, see tile_kernel). The 64 x 64 entries are listed as CPU adapters
   build them (every feature, FEAT 3); a GPU builds its call-specific ones on first use. */
const wgml__kernel wgml__attention_kernels[] = {
    { .file = "attention", .entry = "decode_combine", .layout = "urw" },
    { .file = "attention", .entry = "prefill", .layout = "urrrrwrw", .nconst = 2, .constants = { { "PF_BK", 16 }, { "PF_OCV", 1 } } },
    { .file = "attention", .entry = "prefill", .layout = "urrrrwrw", .nconst = 2, .constants = { { "PF_BK", 16 }, { "PF_OCV", 2 } } },
    { .file = "attention", .entry = "prefill_lse", .layout = "urrrrwww", .nconst = 2, .constants = { { "PF_BK", 16 }, { "PF_OCV", 1 } } },
    { .file = "attention", .entry = "prefill_lse", .layout = "urrrrwww", .nconst = 2, .constants = { { "PF_BK", 16 }, { "PF_OCV", 2 } } },
    { .file = "attention", .entry = "bwd_prep", .layout = "urrrrwrr" },
    { .file = "attention", .entry = "prefill_stats", .layout = "urrrrwrw", .nconst = 2, .constants = { { "PF_BK", 16 }, { "PF_OCV", 1 } } },
    { .file = "attention", .entry = "prefill_stats", .layout = "urrrrwrw", .nconst = 2, .constants = { { "PF_BK", 16 }, { "PF_OCV", 2 } } },
    { .file = "attention", .entry = "bwd_dkdv64", .layout = "urrrrwrrwwr", .nconst = 4, .constants = { { "GBK", 8 }, { "GOCV", 1 }, { "WRITE_DS", 1 }, { "DS_DENSE", 1 } } },
    { .file = "attention", .entry = "bwd_dkdv64", .layout = "urrrrwrrwwr", .nconst = 4, .constants = { { "GBK", 16 }, { "GOCV", 2 }, { "WRITE_DS", 1 }, { "DS_DENSE", 1 } } },
    { .file = "attention", .entry = "bwd_dq_mm", .layout = "urrrrwrr", .nconst = 1, .constants = { { "DQN", 64 } } },
    { .file = "attention", .entry = "bwd_dq_mm", .layout = "urrrrwrr", .nconst = 1, .constants = { { "DQN", 128 } } },
    { .file = "attention", .entry = "fwd_s_mm", .layout = "urrrrwrw" },
    { .file = "attention", .entry = "fwd_pv_mm", .layout = "urrrrww", .nconst = 2, .constants = { { "DQN", 64 }, { "PV_MU", 1 } } },
    { .file = "attention", .entry = "fwd_pv_mm", .layout = "urrrrww", .nconst = 2, .constants = { { "DQN", 128 }, { "PV_MU", 1 } } },
};
const size_t wgml__attention_kernel_count = sizeof wgml__attention_kernels / sizeof wgml__attention_kernels[0];
