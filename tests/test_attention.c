/* Flash attention (forward, backward, decode) against the double reference of
   tests/ref/ref_attention.c and against central finite differences, on the kernels the
   rules of src/ops/attention.c pick on this adapter and, through the engine's tuning
   (src/ops/attention_tuning.h), on the kernels they pick on others; and its bad inputs.

   Most tests are tables of attention problems run as the harness's op cases (random
   inputs, poisoned outputs, one call, comparison against the double reference with the
   tolerances derived below). */
#include "harness.h"
#include "internal.h"
#include "ref_attention.h"

#include <float.h>
#include <stdlib.h>
#include <string.h>

/* One attention problem. mask_ndim 0: no mask; 4: mshape is [b|1, h|1, sq|1, sk|1];
   2: mshape[2..3] is [sq|1, sk|1]. neg_inf is the fraction of mask entries set to -inf. */
typedef struct acase {
    size_t b, sq, sk, h, kvh, d;
    bool causal;
    uint32_t offset, window;
    float p;
    float scale;
    int mask_ndim;
    size_t mshape[4];
    double neg_inf;
} acase;

#define M4(a, b, c, d) 4, { a, b, c, d }
#define M2(c, d) 2, { 1, 1, c, d }
#define NOMASK 0, { 0, 0, 0, 0 }

/* ---- tolerances ----------------------------------------------------------------------- */

/* Forward tolerance. The output is a (dropout-scaled) convex combination of v rows with
   |v| <= 1. Its f32 error comes from the scores (a dot product of length d: relative error
   <= d * 2^-24, times |s| <= a few units), exp2 (a few ulp), and the sum over seq_k keys
   (<= seq_k * 2^-24 relative); in practice it stays far below 1e-5, head_dim 256 included
   (within a tenth of the tolerance below, as at 128, though the scores' bound doubles).
   The absolute part scales with the dropout factor 1 / (1 - p). */
#define FWD_ATOL 2e-5
#define FWD_RTOL 1e-4

/* Backward tolerance, relative to the largest gradient of the tensor: the gradients are
   sums of dS = P (dP - D) over a row or a column, where D = rowsum(dout * out) comes from
   the f32 forward output, so each term carries an absolute error of about
   |P| * 1e-6 * |dout| |v|; a sum of seq terms of either sign keeps that near 1e-5 of the
   largest gradient. */
#define BWD_ATOL 1e-4
#define BWD_RTOL 1e-3
/* Inputs are O(1), so is every term of the gradients: an absolute floor of 2e-6 covers
   gradients that vanish exactly in the reference (dS = P (dP - D) with dP == D, e.g. a
   single visible key) and come out as f32 rounding noise of order 1e-7. */
#define BWD_FLOOR 2e-6

/* The log-sum-exp: a log of a sum of exponentials of f32 scores, within a few ulp of the
   scores' own rounding. */
#define LSE_ATOL 1e-5
#define LSE_RTOL 1e-5

/* ---- attention problems as op cases --------------------------------------------------- */

enum {
    A_GRADS = 1,      /* also the backward: grad_q, grad_k, grad_v */
    A_LSE = 2,        /* the forward writes options.lse (an output), the backward reads it */
    A_SCORES = 4,     /* options.scores kept too (a poisoned scratch tensor of the call) */
    A_EMPTY = 8,      /* rows without a visible key must come out exactly 0 (out, grad_q) */
    A_FD = 16,        /* gradients against central differences of the double forward */
    A_SINGLE = 32,    /* wgml_flash_attention and its backward: one head, [seq, head_dim] */
    A_V2 = 64,        /* wgml_flash_attention_v2 and wgml_flash_attention_v2_backward */
    A_ROBUST = 128,   /* in a context with Dawn's robustness (wgml_context_desc.robust) */
    A_LSE_HALF = 256, /* the backward reads the forward's lse + ln 2: grad_v is halved */
};

/* A case of the table: the problem, what runs, its dropout seed. */
typedef struct attn_op {
    acase c;
    unsigned flags;
    uint64_t seed;
} attn_op;

/* Mask entries are drawn in [lo, 2]; those below MASK_HIDE stand for -inf (both the call
   and the reference map them), a fraction neg_inf of them. */
#define MASK_HIDE -2.0

static bool has_dout(unsigned f) { return (f & (A_GRADS | A_LSE_HALF)) != 0; }
static int in_mask(const attn_op *op) { return has_dout(op->flags) ? 4 : 3; }
static int out_lse(const attn_op *op) { return op->flags & A_LSE ? 1 : -1; }
static int out_grads(const attn_op *op) { return op->flags & A_LSE ? 2 : 1; }   /* dq, dk, dv (dv alone with A_LSE_HALF) */

/* What the reference leaves for the tolerance of the case being run. */
static struct {
    double maxabs[TH_MAX_IO];
    unsigned char *empty;   /* per query row (b, i, h): no visible key */
} cur;

static void describe(const char *tag, const acase *c, char *buf, size_t n)
{
    snprintf(buf, n, "%s b%zu sq%zu sk%zu h%zu/%zu d%zu%s off%u win%u p%.2g mask%d[%zu,%zu,%zu,%zu]%s", tag, c->b, c->sq, c->sk, c->h,
             c->kvh, c->d, c->causal ? " causal" : "", c->offset, c->window, (double)c->p, c->mask_ndim, c->mshape[0],
             c->mshape[1], c->mshape[2], c->mshape[3], c->neg_inf > 0 ? " -inf" : "");
}

static double max_abs(const double *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        if (fabs(x[i]) > m) m = fabs(x[i]);
    return m;
}

static size_t mask_numel(const acase *c)
{
    return c->mask_ndim ? c->mshape[0] * c->mshape[1] * c->mshape[2] * c->mshape[3] : 0;
}

/* The mask as the call and the reference see it: entries below MASK_HIDE are -inf. */
static float *mask_mapped(const float *m, size_t n)
{
    float *x = th_alloc_f(n ? n : 1);
    for (size_t i = 0; i < n; i++) x[i] = m[i] < MASK_HIDE ? -INFINITY : m[i];
    return x;
}

static wgml_tensor *mask_tensor(wgml_context *ctx, const acase *c, const float *mapped)
{
    const size_t *m = c->mshape;
    wgml_tensor *t;
    wgml_status s = c->mask_ndim == 4 ? wgml_tensor_from_data(ctx, WGML_F32, 4, m, mapped, &t)
                                      : wgml_tensor_from_data(ctx, WGML_F32, 2, m + 2, mapped, &t);
    return s == WGML_OK ? t : NULL;
}

static wgml_attention_options options_of(const attn_op *op)
{
    const acase *c = &op->c;
    return (wgml_attention_options){ .causal = c->causal, .causal_offset = c->offset, .window = c->window,
                                     .dropout_prob = c->p, .seed = op->seed, .scale = c->scale };
}

/* Elements of options.scores the forward needs: a 64 x 64 block per block pair. */
static size_t scores_numel(const acase *c)
{
    return c->b * c->h * ((c->sq + 63) / 64) * ((c->sk + 63) / 64) * 4096;
}

/* Replaces -inf by -FLT_MAX in the log-sum-exp written to t: the per-element tolerance of
   the harness compares differences, so an expected -inf (a row without a key) is carried
   as the most negative float on both sides, where any other value still fails. */
static wgml_status lse_comparable(wgml_tensor *t)
{
    size_t n = wgml_tensor_numel(t);
    float *x = th_read(t);
    for (size_t i = 0; i < n; i++)
        if (x[i] == -INFINITY) x[i] = -FLT_MAX;
    wgml_status s = wgml_tensor_write(t, 0, x, n * sizeof *x);
    free(x);
    return s;
}

/* Adds ln 2 to every finite log-sum-exp of t. */
static wgml_status lse_shift(wgml_tensor *t)
{
    size_t n = wgml_tensor_numel(t);
    float *x = th_read(t);
    for (size_t i = 0; i < n; i++)
        if (!isinf(x[i])) x[i] += 0.69314718f;
    wgml_status s = wgml_tensor_write(t, 0, x, n * sizeof *x);
    free(x);
    return s;
}

/* Forward and backward of the case's entry points with tensors of engine e. */
static wgml_status run_attention(wgml_engine *e, const attn_op *op, wgml_tensor *const *in, wgml_tensor *mask,
                                 wgml_tensor *const *out)
{
    const acase *c = &op->c;
    unsigned f = op->flags;
    wgml_context *ctx = e->ctx;
    wgml_attention_options o = options_of(op);
    wgml_tensor *lse = f & A_LSE ? out[1] : NULL, *scores = NULL, *tmp[3] = { 0 };
    wgml_status s = WGML_OK;
    if (f & A_LSE_HALF) {
        size_t shape[3] = { c->b, c->h, c->sq };
        s = wgml_tensor_create(ctx, WGML_F32, 3, shape, &lse);
    }
    if (f & A_SCORES && s == WGML_OK) {
        size_t n = scores_numel(c);
        s = wgml_tensor_create(ctx, WGML_F32, 1, &n, &scores);
        if (s == WGML_OK) {
            float *poison = th_alloc_f(n);
            memset(poison, 0xFF, n * sizeof *poison);
            s = wgml_tensor_write(scores, 0, poison, n * sizeof *poison);
            free(poison);
        }
    }
    o.lse = lse;
    o.scores = scores;
    if (s == WGML_OK) {
        if (f & A_SINGLE) s = wgml_flash_attention(e, in[0], in[1], in[2], out[0], c->causal);
        else if (f & A_V2) s = wgml_flash_attention_v2(e, in[0], in[1], in[2], out[0], c->causal, c->p, op->seed, mask);
        else s = wgml_flash_attention_v2_with(e, in[0], in[1], in[2], out[0], &o, mask);
    }
    wgml_tensor *const *g = out + out_grads(op);
    if (s == WGML_OK && f & A_LSE_HALF) {
        s = lse_shift(lse);
        const size_t *qs = (size_t[]){ c->b, c->sq, c->h, c->d }, *ks = (size_t[]){ c->b, c->sk, c->kvh, c->d };
        if (s == WGML_OK) s = wgml_tensor_create(ctx, WGML_F32, 4, qs, &tmp[0]);
        if (s == WGML_OK) s = wgml_tensor_create(ctx, WGML_F32, 4, ks, &tmp[1]);
        if (s == WGML_OK) s = wgml_flash_attention_v2_backward_with(e, in[0], in[1], in[2], out[0], in[3], tmp[0], tmp[1], g[0], &o, mask);
    } else if (s == WGML_OK && f & A_GRADS) {
        if (f & A_SINGLE) s = wgml_flash_attention_backward(e, in[0], in[1], in[2], out[0], in[3], g[0], g[1], g[2], c->causal);
        else if (f & A_V2) s = wgml_flash_attention_v2_backward(e, in[0], in[1], in[2], out[0], in[3], g[0], g[1], g[2], c->causal);
        else s = wgml_flash_attention_v2_backward_with(e, in[0], in[1], in[2], out[0], in[3], g[0], g[1], g[2], &o, mask);
    }
    if (s == WGML_OK && f & A_LSE) s = lse_comparable(lse);
    if (f & A_LSE_HALF) wgml_tensor_release(lse);
    wgml_tensor_release(scores);
    wgml_tensor_release(tmp[0]);
    wgml_tensor_release(tmp[1]);
    return s;
}

/* The robust context of A_ROBUST (created on first use, destroyed by test_robust_context). */
static wgml_context *robust_ctx;
static wgml_engine *robust_eng;

/* A_ROBUST: the inputs copied into the robust context, the outputs copied back. */
static wgml_status robust_call(const th_run *r, const float *mapped)
{
    const attn_op *op = r->c->params;
    wgml_status s = WGML_OK;
    if (!robust_ctx) {
        s = wgml_context_create(&(wgml_context_desc){ .robust = true }, &robust_ctx);
        if (s == WGML_OK) s = wgml_engine_create(robust_ctx, &robust_eng);
        if (s != WGML_OK) return s;
    }
    const th_op_case *c = r->c;
    wgml_tensor *in[TH_MAX_IO] = { 0 }, *out[TH_MAX_IO] = { 0 }, *mask = NULL;
    int nin = c->nin - (op->c.mask_ndim ? 1 : 0);
    for (int i = 0; i < nin && s == WGML_OK; i++)
        s = wgml_tensor_from_data(robust_ctx, WGML_F32, 4, c->in[i].shape, r->in[i], &in[i]);
    if (s == WGML_OK && op->c.mask_ndim && !(mask = mask_tensor(robust_ctx, &op->c, mapped))) s = WGML_ERROR_OUT_OF_MEMORY;
    for (int o = 0; o < c->nout && s == WGML_OK; o++) s = wgml_tensor_create(robust_ctx, WGML_F32, 4, c->out[o].shape, &out[o]);
    if (s == WGML_OK) s = run_attention(robust_eng, op, in, mask, out);
    for (int o = 0; o < c->nout && s == WGML_OK; o++) {
        float *x = th_alloc_f(r->n_out[o]);
        s = wgml_tensor_read(out[o], 0, x, r->n_out[o] * sizeof *x);
        if (s == WGML_OK) s = wgml_tensor_write(r->t_out[o], 0, x, r->n_out[o] * sizeof *x);
        free(x);
    }
    for (int i = 0; i < TH_MAX_IO; i++) {
        wgml_tensor_release(in[i]);
        wgml_tensor_release(out[i]);
    }
    wgml_tensor_release(mask);
    return s;
}

static wgml_status attn_call(const th_run *r)
{
    const attn_op *op = r->c->params;
    const acase *c = &op->c;
    float *mapped = c->mask_ndim ? mask_mapped(TH_IN(r, in_mask(op)), mask_numel(c)) : NULL;
    wgml_status s;
    if (op->flags & A_ROBUST) {
        s = robust_call(r, mapped);
    } else {
        wgml_tensor *mask = c->mask_ndim ? mask_tensor(th_ctx, c, mapped) : NULL;
        s = c->mask_ndim && !mask ? WGML_ERROR_OUT_OF_MEMORY : run_attention(th_eng, op, r->t_in, mask, r->t_out);
        wgml_tensor_release(mask);
    }
    free(mapped);
    return s;
}

/* sum(dout * attention(q, k, v)) in double; x is the input being varied. */
typedef struct fd_ctx { const ref_attn *a; const double *q, *k, *v, *dout; int which; size_t nq; double *scratch; } fd_ctx;
static double fd_loss(const double *x, const void *ctx)
{
    const fd_ctx *f = ctx;
    ref_attn_forward(f->a, f->which == 0 ? x : f->q, f->which == 1 ? x : f->k, f->which == 2 ? x : f->v, f->scratch);
    double l = 0;
    for (size_t i = 0; i < f->nq; i++) l += f->dout[i] * f->scratch[i];
    return l;
}

static double *to_d(const float *x, size_t n)
{
    double *d = th_alloc_d(n ? n : 1);
    th_to_double(x, d, n);
    return d;
}

static void attn_reference(const th_run *r)
{
    const attn_op *op = r->c->params;
    const acase *c = &op->c;
    unsigned f = op->flags;
    size_t nq = c->b * c->sq * c->h * c->d, nk = c->b * c->sk * c->kvh * c->d, nm = mask_numel(c);
    double *q = to_d(TH_IN(r, 0), nq), *k = to_d(TH_IN(r, 1), nk), *v = to_d(TH_IN(r, 2), nk);
    double *dout = has_dout(f) ? to_d(TH_IN(r, 3), nq) : NULL, *mask = NULL;
    if (nm) {
        float *m = mask_mapped(TH_IN(r, in_mask(op)), nm);
        mask = to_d(m, nm);
        free(m);
    }
    ref_attn a = { .batch = c->b, .seq_q = c->sq, .seq_k = c->sk, .heads = c->h, .kv_heads = c->kvh, .dim = c->d,
                   .causal = c->causal, .offset = c->offset, .window = c->window, .dropout = c->p, .seed = op->seed,
                   .scale = c->scale != 0 ? (double)c->scale : 1.0 / sqrt((double)c->d), .mask = mask };
    memcpy(a.mask_shape, c->mshape, sizeof c->mshape);
    ref_attn_forward(&a, q, k, v, r->ref[0]);
    if (f & A_LSE) {
        double *l = r->ref[out_lse(op)];
        ref_attn_lse(&a, q, k, l);
        for (size_t i = 0; i < r->n_out[out_lse(op)]; i++)
            if (l[i] == -INFINITY) l[i] = -FLT_MAX;
    }
    int g = out_grads(op);
    if (f & A_LSE_HALF) {
        double *rq = th_alloc_d(nq), *rk = th_alloc_d(nk);
        ref_attn_backward(&a, q, k, v, dout, rq, rk, r->ref[g]);
        for (size_t i = 0; i < nk; i++) r->ref[g][i] /= 2;
        free(rq);
        free(rk);
    } else if (f & A_FD) {
        /* the step 1e-4 leaves a truncation error of order 1e-8 and a rounding error of
           order 1e-12: far below the f32 gradients' own error */
        double *x[3] = { q, k, v }, *scratch = th_alloc_d(nq);
        size_t n[3] = { nq, nk, nk };
        for (int t = 0; t < 3; t++) {
            fd_ctx fc = { &a, q, k, v, dout, t, nq, scratch };
            th_finite_diff(fd_loss, &fc, x[t], n[t], 1e-4, r->ref[g + t]);
        }
        free(scratch);
    } else if (f & A_GRADS) {
        ref_attn_backward(&a, q, k, v, dout, r->ref[g], r->ref[g + 1], r->ref[g + 2]);
    }
    for (int o = 0; o < r->c->nout; o++) cur.maxabs[o] = max_abs(r->ref[o], r->n_out[o]);
    free(cur.empty);
    cur.empty = NULL;
    if (f & A_EMPTY) {
        size_t rows = nq / c->d, empty = 0;
        cur.empty = calloc(rows, 1);
        for (size_t i = 0; i < rows; i++) {
            bool all0 = true;
            for (size_t d = 0; d < c->d; d++) all0 &= r->ref[0][i * c->d + d] == 0.0;
            cur.empty[i] = all0;
            empty += all0;
        }
        TH_CHECK(empty > 0, "%s has no empty row; the case tests nothing", r->c->name);
    }
    free(q); free(k); free(v); free(dout); free(mask);
}

static double attn_tol(const th_run *r, int o, size_t i)
{
    const attn_op *op = r->c->params;
    const acase *c = &op->c;
    double ref = fabs(r->ref[o][i]);
    if (cur.empty && (o == 0 || (o == out_grads(op) && (op->flags & A_GRADS))) && cur.empty[i / c->d]) return 0;
    if (o == 0) return FWD_ATOL * (c->p > 0 ? 1.0 / (1.0 - c->p) : 1.0) + FWD_RTOL * ref;
    if (o == out_lse(op)) return LSE_ATOL + LSE_RTOL * ref;
    return BWD_ATOL * cur.maxabs[o] + BWD_FLOOR + BWD_RTOL * ref;
}

/* Runs one problem as an op case: out, then lse and the gradients as the flags ask. */
static bool run_op(const acase *c, unsigned flags, const char *tag)
{
    attn_op op = { .c = *c, .flags = flags, .seed = ((uint64_t)th_rand_u32() << 32) | th_rand_u32() };
    bool single = flags & A_SINGLE;
    th_op_case oc = { .call = attn_call, .reference = attn_reference, .tol = attn_tol, .params = &op };
    describe(tag, c, oc.name, sizeof oc.name);
    const th_io q = { .shape = { c->b, c->sq, c->h, c->d }, .lo = -1.5, .hi = 1.5 },
                k = { .shape = { c->b, c->sk, c->kvh, c->d }, .lo = -1.5, .hi = 1.5 },
                qs = { .shape = { c->sq, c->d }, .lo = -1.5, .hi = 1.5 }, ks = { .shape = { c->sk, c->d }, .lo = -1.5, .hi = 1.5 };
    th_io in_q = single ? qs : q, in_k = single ? ks : k, in_v = in_k, in_do = in_q;
    in_v.lo = in_do.lo = -1;
    in_v.hi = in_do.hi = 1;
    oc.in[oc.nin++] = in_q;
    oc.in[oc.nin++] = in_k;
    oc.in[oc.nin++] = in_v;
    if (has_dout(flags)) oc.in[oc.nin++] = in_do;
    if (c->mask_ndim) {
        th_io m = { .lo = c->neg_inf >= 1 ? -3 : MASK_HIDE - 4 * c->neg_inf / (1 - c->neg_inf), .hi = c->neg_inf >= 1 ? -2.5 : 2 };
        if (c->mask_ndim == 4) memcpy(m.shape, c->mshape, sizeof c->mshape);
        else memcpy(m.shape, c->mshape + 2, 2 * sizeof c->mshape[0]);
        oc.in[oc.nin++] = m;
    }
    oc.out[oc.nout++] = (th_io){ .shape = { c->b, c->sq, c->h, c->d } };
    if (single) oc.out[0] = (th_io){ .shape = { c->sq, c->d } };
    if (flags & A_LSE) oc.out[oc.nout++] = (th_io){ .shape = { c->b, c->h, c->sq } };
    if (flags & A_LSE_HALF) oc.out[oc.nout++] = k;
    if (flags & A_GRADS) {
        oc.out[oc.nout++] = single ? qs : q;
        oc.out[oc.nout++] = single ? ks : k;
        oc.out[oc.nout++] = single ? ks : k;
    }
    bool ok = th_run_case(&oc);
    free(cur.empty);
    cur.empty = NULL;
    return ok;
}

static void run_ops(const acase *cases, size_t n, unsigned flags, const char *tag)
{
    for (size_t i = 0; i < n; i++) run_op(&cases[i], flags, tag);
}

/* The engine's attention tuning: set for a run, then back to the rules. */
static wgml__attention_tuning *tuning(void) { return &th_eng->tuning.attention; }
static void tuning_reset(void) { memset(tuning(), 0, sizeof *tuning()); }

/* Workgroup storage of WebGPU's smallest adapters (its default limit): no 64 x 64 kernel
   fits, the tiled ones run; and the least that holds them (the backward's chunk is 8). */
#define SMALL_ADAPTER (16u << 10)
#define GEMM_ADAPTER (24u << 10)

/* ---- a problem outside the op cases (refusals, bit-exact repeats, command counts) ------- */

typedef struct problem {
    acase c;
    size_t nq, nk;
    float *q, *k, *v, *dout;
    wgml_tensor *tq, *tk, *tv, *tdout;
    wgml_attention_options opts;
} problem;

static void problem_init(problem *P, const acase *c, double range)
{
    memset(P, 0, sizeof *P);
    P->c = *c;
    P->nq = c->b * c->sq * c->h * c->d;
    P->nk = c->b * c->sk * c->kvh * c->d;
    P->q = th_random(P->nq, -range, range);
    P->k = th_random(P->nk, -range, range);
    P->v = th_random(P->nk, -1, 1);
    P->dout = th_random(P->nq, -1, 1);
    P->tq = th_tensor(WGML_F32, P->q, TH_SHAPE(c->b, c->sq, c->h, c->d));
    P->tk = th_tensor(WGML_F32, P->k, TH_SHAPE(c->b, c->sk, c->kvh, c->d));
    P->tv = th_tensor(WGML_F32, P->v, TH_SHAPE(c->b, c->sk, c->kvh, c->d));
    P->tdout = th_tensor(WGML_F32, P->dout, TH_SHAPE(c->b, c->sq, c->h, c->d));
    P->opts = (wgml_attention_options){ .causal = c->causal, .causal_offset = c->offset, .window = c->window,
                                        .dropout_prob = c->p, .seed = ((uint64_t)th_rand_u32() << 32) | th_rand_u32(),
                                        .scale = c->scale };
}

static void problem_free(problem *P)
{
    free(P->q); free(P->k); free(P->v); free(P->dout);
    wgml_tensor_release(P->tq); wgml_tensor_release(P->tk); wgml_tensor_release(P->tv); wgml_tensor_release(P->tdout);
}

static wgml_tensor *gpu_forward(problem *P)
{
    const acase *c = &P->c;
    wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(c->b, c->sq, c->h, c->d));
    TH_EXPECT(wgml_flash_attention_v2_with(th_eng, P->tq, P->tk, P->tv, out, &P->opts, NULL), WGML_OK);
    return out;
}

static bool poisoned(wgml_tensor *t)
{
    uint32_t *x = (uint32_t *)th_read(t);
    bool ok = true;
    for (size_t i = 0; i < wgml_tensor_numel(t); i++) ok &= x[i] == 0xFFFFFFFFu;
    free(x);
    return ok;
}

/* ---- forward ------------------------------------------------------------------------ */

static void test_forward_shapes(void)
{
    static const acase cases[] = {
        /* b sq sk h kvh d causal off win p scale mask */
        { 1, 7, 7, 1, 1, 16, false, 0, 0, 0, 0, NOMASK, 0 },
        { 1, 64, 64, 2, 2, 64, true, 0, 0, 0, 0, NOMASK, 0 },
        { 2, 65, 65, 4, 2, 64, true, 0, 0, 0, 0, NOMASK, 0 },
        { 1, 65, 300, 8, 1, 16, false, 0, 0, 0, 0, NOMASK, 0 },
        { 3, 7, 65, 2, 1, 80, true, 58, 0, 0, 0, NOMASK, 0 },
        { 1, 300, 65, 4, 4, 128, true, 0, 0, 0, 0, NOMASK, 0 },
        { 2, 64, 300, 3, 1, 96, false, 0, 0, 0, 0.3f, NOMASK, 0 },
        { 1, 300, 300, 2, 1, 128, true, 0, 0, 0, 0, NOMASK, 0 },
        { 1, 65, 65, 2, 2, 64, false, 0, 9, 0, 0, NOMASK, 0 },
        { 1, 65, 65, 2, 1, 64, true, 0, 1, 0, 0, NOMASK, 0 },
        { 2, 33, 100, 4, 2, 32, true, 67, 20, 0, 0, NOMASK, 0 },
        { 1, 64, 64, 2, 1, 64, false, 0, 0, 0, 0, M4(1, 2, 64, 64), 0 },
    };
    run_ops(cases, sizeof cases / sizeof cases[0], 0, "shapes");
}

/* head_dim % 4 == 2: rows start in the middle of a vec4. */
static void test_forward_odd_dims(void)
{
    static const size_t dims[] = { 2, 6, 10, 18, 34, 66, 126 };
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        acase c = { 2, 19, 23, 2, 1, dims[i], i % 2 == 0, 3, 0, 0, 0, NOMASK, 0 };
        run_op(&c, A_GRADS, "odd dim");
    }
}

/* Every broadcast shape of a 4-D mask and of a 2-D mask, with some -inf entries. */
static void test_forward_masks(void)
{
    const size_t B = 2, H = 3, SQ = 9, SK = 13;
    for (int bits = 0; bits < 16; bits++) {
        acase c = { B, SQ, SK, H, 1, 8, bits % 3 == 0, 0, 0, 0, 0,
                    M4(bits & 1 ? B : 1, bits & 2 ? H : 1, bits & 4 ? SQ : 1, bits & 8 ? SK : 1), 0.2 };
        run_op(&c, bits % 4 == 1 ? A_GRADS : 0, "mask4");
    }
    for (int bits = 0; bits < 4; bits++) {
        acase c = { B, SQ, SK, H, 3, 8, bits == 2, 0, 0, 0, 0, M2(bits & 1 ? SQ : 1, bits & 2 ? SK : 1), 0.2 };
        run_op(&c, bits == 3 ? A_GRADS : 0, "mask2");
    }
}

/* Rows that see no key (window past the keys, every key masked with -inf, decoding past
   the window) give exactly 0 and zero gradients, never NaN. */
static void test_empty_rows(void)
{
    static const acase cases[] = {
        /* non-causal window: queries 14..19 are 5 or more positions past the last key */
        { 1, 20, 10, 2, 1, 16, false, 0, 5, 0, 0, NOMASK, 0 },
        /* causal, offset and window: every query is past the window of every key */
        { 2, 7, 9, 2, 2, 32, true, 40, 3, 0, 0, NOMASK, 0 },
        /* all keys -inf for a whole mask */
        { 1, 5, 6, 1, 1, 8, false, 0, 0, 0, 0, M4(1, 1, 5, 6), 1.0 },
        /* decode with nothing visible */
        { 2, 1, 30, 4, 2, 16, false, 100, 10, 0, 0, NOMASK, 0 },
    };
    run_ops(cases, sizeof cases / sizeof cases[0], A_GRADS | A_EMPTY, "empty rows");
}

/* seq_q == 1 takes the split-key decode path. */
static void test_decode(void)
{
    static const acase cases[] = {
        { 1, 1, 1, 1, 1, 16, false, 0, 0, 0, 0, NOMASK, 0 },
        { 2, 1, 300, 8, 2, 64, false, 0, 0, 0, 0, NOMASK, 0 },
        { 1, 1, 2000, 32, 8, 128, true, 1500, 0, 0, 0, NOMASK, 0 },
        { 1, 1, 777, 8, 1, 80, true, 776, 0, 0, 0, NOMASK, 0 },
        { 3, 1, 500, 4, 4, 32, true, 10000, 64, 0, 0, NOMASK, 0 },
        { 1, 1, 500, 6, 3, 16, false, 200, 1, 0, 0, NOMASK, 0 },
        { 2, 1, 65, 4, 2, 64, false, 0, 0, 0, 0, M4(2, 4, 1, 65), 0.1 },
        { 2, 1, 65, 4, 2, 64, true, 40, 0, 0, 0, M2(1, 65), 0 },
        { 1, 1, 100, 64, 1, 128, false, 0, 0, 0, 0, NOMASK, 0 },
        { 1, 1, 129, 5, 5, 6, false, 0, 0, 0.3f, 0, NOMASK, 0 },
    };
    run_ops(cases, sizeof cases / sizeof cases[0], A_GRADS, "decode");
}

/* ---- backward ----------------------------------------------------------------------- */

static void test_backward_ref(void)
{
    static const acase cases[] = {
        { 1, 7, 7, 1, 1, 16, false, 0, 0, 0, 0, NOMASK, 0 },
        { 1, 64, 64, 2, 2, 64, true, 0, 0, 0, 0, NOMASK, 0 },
        { 2, 65, 65, 4, 2, 64, true, 0, 0, 0, 0, NOMASK, 0 },
        { 1, 65, 300, 8, 1, 16, false, 0, 0, 0, 0, NOMASK, 0 },
        { 3, 7, 65, 2, 1, 80, true, 58, 0, 0, 0, NOMASK, 0 },
        { 1, 300, 65, 4, 4, 128, true, 0, 0, 0, 0, NOMASK, 0 },
        { 1, 64, 300, 3, 1, 96, false, 0, 0, 0, 0.3f, NOMASK, 0 },
        { 1, 100, 100, 2, 1, 128, true, 0, 0, 0, 0, NOMASK, 0 },
        { 1, 65, 65, 2, 2, 64, false, 0, 9, 0, 0, NOMASK, 0 },
        { 1, 65, 65, 2, 1, 64, true, 0, 1, 0, 0, NOMASK, 0 },
        { 2, 33, 100, 4, 2, 32, true, 67, 20, 0, 0, NOMASK, 0 },
        { 1, 64, 64, 2, 1, 64, false, 0, 0, 0, 0, M4(1, 2, 64, 64), 0.05 },
        { 2, 40, 50, 4, 2, 32, true, 10, 0, 0.1f, 0, M4(2, 1, 40, 50), 0 },
        { 1, 64, 64, 8, 2, 64, false, 0, 0, 0.5f, 0, NOMASK, 0 },
        { 2, 1, 300, 8, 2, 64, true, 200, 0, 0, 0, NOMASK, 0 },
    };
    run_ops(cases, sizeof cases / sizeof cases[0], A_GRADS, "backward");
}

/* The f32 gradients against central differences of the double forward (th_finite_diff). */
static void test_backward_finite_differences(void)
{
    static const acase cases[] = {
        { 1, 5, 7, 2, 1, 8, false, 0, 0, 0, 0, NOMASK, 0 },
        { 2, 6, 6, 2, 2, 6, true, 0, 0, 0, 0, NOMASK, 0 },
        { 1, 9, 5, 4, 2, 8, true, 2, 3, 0, 0, NOMASK, 0 },
        { 1, 4, 9, 3, 1, 4, false, 0, 0, 0, 0.7f, M4(1, 3, 4, 1), 0.2 },
        { 2, 5, 8, 2, 1, 8, true, 3, 0, 0.3f, 0, M2(5, 8), 0 },
        { 1, 1, 12, 4, 2, 8, false, 0, 0, 0.5f, 0, NOMASK, 0 },
        { 1, 33, 35, 1, 1, 4, true, 0, 7, 0.2f, 0, NOMASK, 0 },
    };
    run_ops(cases, sizeof cases / sizeof cases[0], A_GRADS | A_FD, "fd");
}

/* The same inputs give bit-identical gradients (no atomics, fixed summation order). */
static void test_backward_deterministic(void)
{
    acase c = { 2, 70, 90, 8, 2, 32, true, 20, 0, 0.2f, 0, NOMASK, 0 };
    problem P;
    problem_init(&P, &c, 1.5);
    float *mdata = th_random(70 * 90, -2, 2);
    wgml_tensor *mask = th_tensor(WGML_F32, mdata, TH_SHAPE(1, 1, 70, 90));
    wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(c.b, c.sq, c.h, c.d));
    TH_EXPECT(wgml_flash_attention_v2_with(th_eng, P.tq, P.tk, P.tv, out, &P.opts, mask), WGML_OK);
    float *first[3] = { 0 };
    for (int run = 0; run < 2; run++) {
        wgml_tensor *g[3] = { th_poisoned(WGML_F32, TH_SHAPE(c.b, c.sq, c.h, c.d)), th_poisoned(WGML_F32, TH_SHAPE(c.b, c.sk, c.kvh, c.d)),
                              th_poisoned(WGML_F32, TH_SHAPE(c.b, c.sk, c.kvh, c.d)) };
        TH_EXPECT(wgml_flash_attention_v2_backward_with(th_eng, P.tq, P.tk, P.tv, out, P.tdout, g[0], g[1], g[2], &P.opts, mask),
                  WGML_OK);
        for (int t = 0; t < 3; t++) {
            float *x = th_read(g[t]);
            if (run == 0) first[t] = x;
            else {
                TH_CHECK(memcmp(first[t], x, wgml_tensor_nbytes(g[t])) == 0, "gradient %d differs between two runs", t);
                free(x);
                free(first[t]);
            }
            wgml_tensor_release(g[t]);
        }
    }
    wgml_tensor_release(out);
    wgml_tensor_release(mask);
    free(mdata);
    problem_free(&P);
}

/* ---- dropout ------------------------------------------------------------------------ */

/* q = 0 and v one-hot over d = seq_k keys: out[b, i, h, j] = Z(b, h, i, j) / seq_k exactly
   (Z = 1 / (1 - p) kept, 0 dropped), which exposes every decision of the kernel. Checks
   them against the reference hash, and the kept fraction against the binomial bounds. */
static void dropout_pattern(size_t B, size_t SQ, size_t H, size_t KVH, float p, uint64_t seed, double *frac)
{
    const size_t SK = 64, D = 64;
    size_t nq = B * SQ * H * D, nk = B * SK * KVH * D;
    float *q = th_alloc_f(nq), *v = th_alloc_f(nk);
    memset(q, 0, nq * sizeof *q);
    for (size_t i = 0; i < nk; i++) v[i] = (i / (KVH * D)) % SK == i % D ? 1.0f : 0.0f;
    wgml_tensor *tq = th_tensor(WGML_F32, q, TH_SHAPE(B, SQ, H, D)), *tv = th_tensor(WGML_F32, v, TH_SHAPE(B, SK, KVH, D));
    wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(B, SQ, H, D));
    TH_EXPECT(wgml_flash_attention_v2(th_eng, tq, tv, tv, out, false, p, seed, NULL), WGML_OK);
    float *got = th_read(out);
    size_t kept = 0, wrong = 0, badval = 0;
    double want_kept = 1.0 / ((1.0 - (double)p) * SK);
    for (size_t b = 0; b < B; b++)
        for (size_t i = 0; i < SQ; i++)
            for (size_t h = 0; h < H; h++)
                for (size_t j = 0; j < SK; j++) {
                    float x = got[((b * SQ + i) * H + h) * D + j];
                    bool k = x > 0.5 * want_kept;
                    kept += k;
                    wrong += k != ref_attn_keep(seed, p, (uint32_t)(b * H + h), (uint32_t)i, (uint32_t)j);
                    badval += k ? fabs(x - want_kept) > 1e-6 * want_kept : x != 0.0f;
                }
    size_t n = B * SQ * H * SK;
    TH_CHECK(wrong == 0, "dropout p=%g seq_q=%zu: %zu of %zu decisions differ from the reference hash", (double)p, SQ, wrong, n);
    TH_CHECK(badval == 0, "dropout p=%g seq_q=%zu: %zu values are neither 0 nor 1/((1-p)*seq_k)", (double)p, SQ, badval);
    *frac = (double)kept / n;
    free(q); free(v); free(got);
    wgml_tensor_release(tq); wgml_tensor_release(tv); wgml_tensor_release(out);
}

static void test_dropout_decisions(void)
{
    static const float ps[] = { 0.1f, 0.5f };
    for (int t = 0; t < 2; t++) {
        double frac;
        uint64_t seed = ((uint64_t)th_rand_u32() << 32) | th_rand_u32();
        dropout_pattern(2, 128, 4, 2, ps[t], seed, &frac);
        /* 65536 Bernoulli(1 - p) decisions: 6 standard deviations */
        double n = 2.0 * 128 * 4 * 64, sd = sqrt(ps[t] * (1 - ps[t]) / n);
        TH_CHECK(fabs(frac - (1 - ps[t])) < 6 * sd, "p=%g: kept fraction %.5f, expected %.5f +- %.5f", (double)ps[t], frac,
                 1 - ps[t], 6 * sd);
        dropout_pattern(3, 1, 8, 2, ps[t], seed, &frac);   /* the decode path */
    }
}

/* The same seed gives the same output bit for bit; another seed another one. */
static void test_dropout_reproducible(void)
{
    acase c = { 2, 50, 60, 4, 2, 32, true, 0, 0, 0.3f, 0, NOMASK, 0 };
    problem P;
    problem_init(&P, &c, 1.5);
    float *runs[3];
    for (int r = 0; r < 3; r++) {
        if (r == 2) P.opts.seed ^= 1;
        wgml_tensor *out = gpu_forward(&P);
        runs[r] = th_read(out);
        wgml_tensor_release(out);
    }
    TH_CHECK(memcmp(runs[0], runs[1], P.nq * sizeof(float)) == 0, "two runs with one seed differ");
    TH_CHECK(memcmp(runs[0], runs[2], P.nq * sizeof(float)) != 0, "seeds differing in one bit give the same output");
    for (int r = 0; r < 3; r++) free(runs[r]);
    problem_free(&P);
}

/* ---- the prefill forward ------------------------------------------------------------ */

/* The forward for seq_q > 1 (`prefill`: 64-query x 64-key blocks, head_dim streamed in
   chunks of 16 floats, 1 or 2 vec4 of head_dim per thread): lengths around the block
   size, head dims around the chunk and vec4-column boundaries (4, 16, 32, 40, 64, 80, 96,
   128) and with head_dim % 4 == 2 (18, 30, 126), causal offsets, windows (1 and one block
   wide), masks, dropout, GQA, batch and heads > 1. A few also through the tiled forward
   (an adapter without room for prefill), and one with the backward, whose statistics
   pass repeats prefill's scores and softmax. */
static void test_prefill_edges(void)
{
    static const acase cases[] = {
        /* b sq sk h kvh d causal off win p scale mask */
        { 1, 63, 63, 2, 1, 64, true, 0, 0, 0, 0, NOMASK, 0 },
        { 2, 65, 130, 4, 2, 80, true, 65, 0, 0, 0, NOMASK, 0 },
        { 1, 130, 65, 2, 2, 96, false, 0, 0, 0, 0, M2(130, 65), 0.1 },
        { 1, 300, 300, 1, 1, 126, true, 0, 0, 0.2f, 0, NOMASK, 0 },
        { 2, 2, 1, 2, 1, 16, false, 0, 0, 0, 0, NOMASK, 0 },
        { 1, 129, 129, 2, 1, 128, true, 0, 1, 0, 0, NOMASK, 0 },
        { 1, 100, 200, 3, 3, 18, true, 100, 17, 0.3f, 0, M4(1, 3, 1, 200), 0.2 },
        { 3, 64, 64, 4, 1, 64, false, 0, 64, 0, 0, NOMASK, 0 },
        { 1, 77, 33, 2, 1, 128, false, 0, 0, 0, 0.7f, M4(1, 2, 77, 33), 0 },
        { 1, 65, 70, 2, 1, 40, true, 5, 0, 0, 0, NOMASK, 0 },
        { 2, 3, 300, 2, 2, 128, true, 297, 0, 0.1f, 0, M4(2, 1, 3, 300), 0 },
        /* narrow heads: one vec4 (4: most threads hold no output column), two chunks of
           16 (32), a partial vec4 at the end (30) */
        { 2, 130, 131, 4, 2, 32, true, 1, 0, 0.1f, 0, NOMASK, 0 },
        { 1, 200, 77, 2, 1, 30, false, 0, 0, 0, 0, M2(200, 77), 0.4 },
        { 1, 129, 129, 3, 1, 4, true, 0, 70, 0, 0, NOMASK, 0 },
    };
    run_ops(cases, sizeof cases / sizeof cases[0], 0, "prefill");
    tuning()->workgroup_storage = SMALL_ADAPTER;
    run_ops(&cases[1], 2, 0, "prefill, tiled forward");   /* one head_dim > 64, one <= 64 */
    run_op(&cases[6], 0, "prefill, tiled forward");
    tuning_reset();
    run_op(&cases[6], A_GRADS, "prefill+backward");
}

/* ---- the other entry points --------------------------------------------------------- */

/* wgml_flash_attention and its backward: one head, [seq, head_dim]. */
static void test_single_head(void)
{
    static const size_t shapes[][3] = { { 9, 9, 16 }, { 70, 70, 64 }, { 33, 80, 24 }, { 1, 40, 8 } };
    for (size_t s = 0; s < 4; s++)
        for (int causal = 0; causal < 2; causal++) {
            acase c = { 1, shapes[s][0], shapes[s][1], 1, 1, shapes[s][2], causal, 0, 0, 0, 0, NOMASK, 0 };
            run_op(&c, A_GRADS | A_SINGLE, "single head");
        }
}

/* wgml_flash_attention_v2 (mask, dropout) and wgml_flash_attention_v2_backward (causal only). */
static void test_v2_entry_points(void)
{
    static const acase fwd = { 2, 20, 30, 4, 2, 16, true, 0, 0, 0.25f, 0, M4(2, 1, 20, 30), 0.1 },
                       bwd = { 2, 20, 30, 4, 2, 16, true, 0, 0, 0, 0, NOMASK, 0 };
    run_op(&fwd, A_V2, "wgml_flash_attention_v2");
    run_op(&bwd, A_V2 | A_GRADS, "wgml_flash_attention_v2_backward");
}

/* A custom scale, and keys up to 131072 (forward, decode and backward). */
static void test_scale_and_long_keys(void)
{
    static const acase cases[] = {
        { 1, 20, 40, 2, 1, 32, true, 0, 0, 0, 0.05f, NOMASK, 0 },
        { 1, 1, 40, 2, 1, 32, false, 0, 0, 0, -0.2f, NOMASK, 0 },
        { 1, 3, 131072, 2, 1, 16, false, 0, 0, 0, 0, M4(1, 1, 3, 131072), 0 },
        { 1, 1, 131072, 4, 1, 16, true, 131000, 0, 0.1f, 0, NOMASK, 0 },
        { 1, 2, 131072, 1, 1, 8, true, 131070, 50000, 0, 0, NOMASK, 0 },
    };
    run_ops(cases, sizeof cases / sizeof cases[0], A_GRADS, "scale/long");
}

/* More workgroups than one grid dimension holds (65536 (batch, head) pairs): the forward
   takes its 2-D grid path (the other kernels share its indexing; lavapipe needs about 10 s
   per kernel at this count, so only this one runs). */
static void test_large_grid(void)
{
    static const acase c = { 256, 2, 2, 256, 128, 2, true, 0, 0, 0, 0, NOMASK, 0 };
    run_op(&c, 0, "large grid");
}

/* The backward keeps dS for at most min(1 GiB, one storage binding) at a time and runs
   over ranges of (batch, kv head) pairs otherwise. Seq 4096 takes 64 MiB of dS per head:
   three heads take two ranges (2 + 1) on lavapipe (128 MiB bindings) and one on a GPU with
   larger bindings. Checked against the reference, then the backward's commands are counted:
   the statistics pass, then bwd_dkdv64 and bwd_dq_mm per range (head_dim 4 keeps the
   reference cheap; the kernels pad it to their chunks). */
static void test_backward_ds_ranges(void)
{
    static const acase c = { 1, 4096, 4096, 3, 3, 4, true, 0, 0, 0, 0, NOMASK, 0 };
    run_op(&c, A_GRADS, "dS ranges");
    problem P;
    problem_init(&P, &c, 1.5);
    wgml_adapter_info info;
    wgml_context_info(th_ctx, &info);
    uint64_t pair = 16384ull * 64 * 64, cap = 1ull << 30, pairs = 3;
    if (info.max_storage_buffer_binding_size < cap) cap = info.max_storage_buffer_binding_size;
    uint64_t chunk = cap / pair < pairs ? cap / pair : pairs, ranges = (pairs + chunk - 1) / chunk;
    wgml_tensor *out = gpu_forward(&P), *g[3];
    for (int t = 0; t < 3; t++) g[t] = th_poisoned(WGML_F32, TH_SHAPE(1, 4096, 3, 4));
    uint64_t before = th_commands();
    TH_EXPECT(wgml_flash_attention_v2_backward_with(th_eng, P.tq, P.tk, P.tv, out, P.tdout, g[0], g[1], g[2], &P.opts, NULL),
              WGML_OK);
    uint64_t n = th_commands() - before;
    TH_CHECK(n == 1 + 2 * ranges, "the backward recorded %llu commands, expected %llu (%llu ranges of dS)",
             (unsigned long long)n, (unsigned long long)(1 + 2 * ranges), (unsigned long long)ranges);
    for (int t = 0; t < 3; t++) wgml_tensor_release(g[t]);
    wgml_tensor_release(out);
    problem_free(&P);
}

/* The blocks of a dispatch run in groups of heads, longest first within a group
   (block_of in attention_prelude.wgsl; the group size from the rows a head re-reads, or
   the tuning). Group sizes that do not divide the heads leave a smaller last group: 12
   query heads in groups of 5 (5, 5, 2) and of 4, 6 (batch x kv head) pairs in groups of 5
   (5, 1) and 4 (4, 2), one head at a time, and the rule; causal, a window, GQA; forward
   and backward against the reference; the tiled forward in groups of 5. */
static void test_block_order(void)
{
    static const acase cases[] = {
        /* b sq sk h kvh d causal off win p scale mask */
        { 2, 150, 150, 6, 3, 18, true, 0, 0, 0, 0, NOMASK, 0 },
        { 2, 100, 170, 6, 3, 18, true, 70, 40, 0, 0, NOMASK, 0 },
    };
    static const uint32_t orders[] = { 5, 4, 1, 0 };
    for (int o = 0; o < 4; o++) {
        tuning()->order_heads = orders[o];
        char tag[64];
        snprintf(tag, sizeof tag, "block order %u", orders[o]);
        run_ops(cases, 2, A_GRADS, tag);
    }
    tuning()->order_heads = 5;
    tuning()->workgroup_storage = SMALL_ADAPTER;
    run_ops(cases, 2, 0, "block order 5, tiled forward");
    tuning_reset();
}

/* The kernels of smaller adapters, as the rules pick them from the tuning's limits:
   - WebGPU's smallest workgroup storage (16 KiB): the tiled forward (its statistics mode
     and lse_export for the log-sum-exp), the tiled backward with the statistics of fwd
     in MODE 1, and decoding in shorter chunks; head dims of the four OCV classes, whose
     tiles there have 4, 2 and 1 columns per lane, one and two staging regions, row
     blocks of 8 to 64; partial blocks, seq_q != seq_k both ways, masks with -inf
     entries, dropout, causal offsets, a window, GQA;
   - 24 KiB: the 64 x 64 backward with head_dim chunks of 8 above head_dim 64;
   - 32 KiB (lavapipe's own) where this adapter has more: chunks of 16 there;
   - fewer than 10 storage buffers per stage: dq by bwd_dq64 (dS recomputed) beside the
     tiled dk, dv.
   Then a workgroup storage too small for any tile is refused, with nothing recorded. */
static void test_small_adapters(void)
{
    static const acase tiled[] = {
        /* b sq sk h kvh d causal off win p scale mask */
        { 2, 37, 41, 4, 2, 32, true, 2, 0, 0.2f, 0, M4(1, 4, 37, 1), 0.1 },
        { 1, 300, 130, 2, 1, 34, false, 0, 0, 0, 0, M4(1, 2, 300, 130), 0.1 },
        { 2, 65, 130, 4, 2, 80, true, 65, 0, 0, 0, NOMASK, 0 },
        { 2, 33, 65, 2, 2, 128, true, 40, 0, 0, 0, M2(33, 65), 0 },
        { 1, 70, 50, 4, 1, 64, false, 0, 9, 0, 0, NOMASK, 0 },
        { 2, 1, 70, 8, 2, 128, true, 50, 0, 0.2f, 0, M4(2, 1, 1, 70), 0 },
    };
    static const acase gemm = { 1, 70, 90, 4, 2, 80, true, 10, 0, 0, 0, NOMASK, 0 };
    tuning()->workgroup_storage = SMALL_ADAPTER;
    run_ops(tiled, 4, A_GRADS, "16 KiB");
    run_op(&tiled[4], A_GRADS | A_LSE, "16 KiB lse");
    run_op(&tiled[5], 0, "16 KiB");   /* decoding in shorter chunks */
    tuning()->workgroup_storage = GEMM_ADAPTER;
    run_op(&gemm, A_GRADS, "24 KiB");
    if (th_ctx->limits.maxComputeWorkgroupStorageSize > (32u << 10)) {
        tuning()->workgroup_storage = 32u << 10;
        run_op(&gemm, A_GRADS, "32 KiB");
    }
    tuning_reset();
    tuning()->storage_buffers = 8;
    run_op(&tiled[0], A_GRADS, "8 storage buffers");

    tuning()->storage_buffers = 0;
    tuning()->workgroup_storage = 1024;
    acase c = { 1, 5, 5, 1, 1, 128, false, 0, 0, 0, 0, NOMASK, 0 };
    problem P;
    problem_init(&P, &c, 1);
    wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(1, 5, 1, 128));
    wgml_tensor *g[3] = { th_poisoned(WGML_F32, TH_SHAPE(1, 5, 1, 128)), th_poisoned(WGML_F32, TH_SHAPE(1, 5, 1, 128)),
                          th_poisoned(WGML_F32, TH_SHAPE(1, 5, 1, 128)) };
    uint64_t before = th_commands();
    TH_EXPECT_ERR(wgml_flash_attention_v2_with(th_eng, P.tq, P.tk, P.tv, out, &P.opts, NULL), WGML_ERROR_LIMIT,
                  "workgroup storage");
    TH_EXPECT_ERR(wgml_flash_attention_v2_backward_with(th_eng, P.tq, P.tk, P.tv, P.tq, P.tdout, g[0], g[1], g[2], &P.opts, NULL),
                  WGML_ERROR_LIMIT, "workgroup storage");
    wgml_tensor *q1 = th_tensor(WGML_F32, P.q, TH_SHAPE(1, 1, 1, 128)), *o1 = th_poisoned(WGML_F32, TH_SHAPE(1, 1, 1, 128));
    TH_EXPECT_ERR(wgml_flash_attention_v2_with(th_eng, q1, P.tk, P.tv, o1, &P.opts, NULL), WGML_ERROR_LIMIT, "workgroup storage");
    TH_CHECK(th_commands() == before, "refused calls recorded commands");
    TH_CHECK(poisoned(out) && poisoned(o1) && poisoned(g[0]) && poisoned(g[1]) && poisoned(g[2]), "a refused call wrote an output");
    tuning_reset();
    wgml_tensor *all[] = { out, g[0], g[1], g[2], q1, o1 };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) wgml_tensor_release(all[i]);
    problem_free(&P);
}

/* head_dim above 128 (up to 256): the tiled kernels on every adapter (the 64 x 64 ones
   stop at 128), their lanes holding 8 vec4 of head_dim (both accumulator arrays), and
   decode with rows of 64 vec4. Forward and backward at 256: causal with an offset and
   GQA, a window with a mask holding -inf entries; at 254 (head_dim % 4 == 2, the same
   pipelines) with dropout; decoding at 256 and 254 with a causal offset, a 2-D mask, and
   20 query heads per kv head (16 to a workgroup there: two head chunks); the log-sum-exp
   written and read back, by the tiled forward and by decoding. On a 16 KiB adapter the
   forward at 198 (7 vec4 per lane: the second array partly used; rows of 8) and the
   backward at 256 refused (no tile fits); every pipeline costs lavapipe seconds on a
   cold shader cache, hence one forward there. options.scores refused (only the 64 x 64
   kernels keep scores), with nothing recorded. */
static void test_wide_heads(void)
{
    static const acase cases[] = {
        /* b sq sk h kvh d causal off win p scale mask */
        { 1, 37, 41, 4, 2, 256, true, 4, 0, 0, 0, NOMASK, 0 },
        { 2, 20, 33, 2, 1, 256, false, 0, 6, 0, 0, M4(2, 1, 20, 33), 0.1 },
        { 1, 23, 19, 3, 3, 254, true, 0, 0, 0.2f, 0, NOMASK, 0 },
        { 1, 1, 70, 8, 2, 256, true, 60, 0, 0, 0, NOMASK, 0 },
        { 2, 1, 45, 4, 1, 254, false, 0, 0, 0, 0, M2(1, 45), 0.1 },
        { 1, 1, 40, 20, 1, 256, true, 30, 0, 0, 0, NOMASK, 0 },
    };
    static const acase ocv7 = { 2, 23, 29, 4, 2, 198, true, 3, 5, 0, 0, M4(1, 4, 23, 29), 0.1 };
    run_ops(cases, sizeof cases / sizeof cases[0], A_GRADS, "head_dim > 128");
    run_op(&cases[0], A_LSE | A_GRADS, "head_dim > 128, lse");
    run_op(&cases[3], A_LSE | A_GRADS, "head_dim > 128, lse");
    tuning()->workgroup_storage = SMALL_ADAPTER;
    run_op(&ocv7, 0, "head_dim > 128, 16 KiB");

    acase c = { 1, 20, 20, 2, 1, 256, true, 0, 0, 0, 0, NOMASK, 0 };
    problem P;
    problem_init(&P, &c, 1);
    wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(1, 20, 2, 256)), *lse = th_poisoned(WGML_F32, TH_SHAPE(1, 2, 20));
    wgml_tensor *g[3] = { th_poisoned(WGML_F32, TH_SHAPE(1, 20, 2, 256)), th_poisoned(WGML_F32, TH_SHAPE(1, 20, 1, 256)),
                          th_poisoned(WGML_F32, TH_SHAPE(1, 20, 1, 256)) };
    wgml_tensor *sc = th_poisoned(WGML_F32, TH_SHAPE(2 * 4096));
    uint64_t before = th_commands();
    TH_EXPECT_ERR(wgml_flash_attention_v2_backward_with(th_eng, P.tq, P.tk, P.tv, P.tq, P.tdout, g[0], g[1], g[2], &P.opts, NULL),
                  WGML_ERROR_LIMIT, "workgroup storage");
    tuning_reset();
    P.opts.lse = lse;
    P.opts.scores = sc;
    TH_EXPECT_ERR(wgml_flash_attention_v2_with(th_eng, P.tq, P.tk, P.tv, out, &P.opts, NULL), WGML_ERROR_LIMIT,
                  "options.scores needs head_dim at most 128");
    TH_EXPECT_ERR(wgml_flash_attention_v2_backward_with(th_eng, P.tq, P.tk, P.tv, P.tq, P.tdout, g[0], g[1], g[2], &P.opts, NULL),
                  WGML_ERROR_LIMIT, "options.scores needs head_dim at most 128");
    TH_CHECK(!wgml__attention_keeps_scores(th_eng, 256, 70) && !wgml__attention_keeps_scores(th_eng, 130, 70),
             "the tiled kernels of head_dim > 128 keep scores");
    TH_CHECK(th_commands() == before, "refused calls recorded commands");
    TH_CHECK(poisoned(out) && poisoned(lse) && poisoned(sc), "a refused call wrote a tensor");
    for (int t = 0; t < 3; t++) TH_CHECK(poisoned(g[t]), "a refused backward wrote gradient %d", t);
    wgml_tensor *all[] = { out, lse, g[0], g[1], g[2], sc };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) wgml_tensor_release(all[i]);
    problem_free(&P);
}

/* A context with Dawn's robustness (bounds clamping, workgroup zeroing:
   wgml_context_desc.robust), the opt-in debugging mode, against the reference. The rest
   of this file runs without it (the default), where no kernel may read past a buffer or
   read workgroup memory it did not write (head_dim 18 leaves padding). */
static void test_robust_context(void)
{
    static const acase cases[] = {
        { 2, 37, 45, 4, 2, 18, true, 3, 0, 0.2f, 0, M4(2, 1, 37, 45), 0.1 },
        { 2, 1, 45, 4, 2, 18, true, 30, 0, 0, 0, M2(1, 45), 0 },
    };
    run_ops(cases, 2, A_GRADS | A_ROBUST, "robust");
    wgml_engine_destroy(robust_eng);
    wgml_context_destroy(robust_ctx);
    robust_eng = NULL;
    robust_ctx = NULL;
}

/* ---- the 64 x 64 backward ------------------------------------------------------------- */

/* The backward's 64 x 64 kernels at the edges of their blocks: sequences of 1, 63, 65,
   130, 300 (partial blocks, several blocks, seq_q != seq_k both ways), head_dim 16, 32, 34
   (% 4 == 2), 64, 80, 126, 128 (one or two vec4 per thread, partial head_dim chunks),
   causal with offsets, windows (1 included), masks with -inf entries, dropout, GQA groups
   1, 2, 4, rows past the keys (empty), batch and heads > 1. The default computes dq from
   the dS that bwd_dkdv64 writes: stored dense and multiplied by bwd_dq_mm where head_dim
   % 4 == 0, in 64 x 64 blocks by bwd_dq_ds64 otherwise (head_dim 34, 126). Then, on
   subsets of both head_dim classes, what other adapters or shapes get:
   - the other build of the mask and dropout code (GPUs build each call's pipeline with
     only the features it uses, CPU adapters one with all: the one this adapter does not
     use), without and with both features;
   - chunks consumed 8 steps at a time (G_SUB: the rule at chunks of 32, forced here at
     the chunk of 16 a 32 KiB adapter holds, above head_dim 64);
   - dS recomputed by bwd_dq64, as where one (batch, kv head) pair's dS exceeds the cap;
   - dS in ranges of 2 (batch, kv head) pairs (4 pairs: 2 + 2; 9: 2 x 4 + 1), as where
     all of them exceed it.
   (The tiled backward of adapters without room for the 64 x 64 kernels: small_adapters.)
   These runs are kept small: on a cold shader cache every pipeline they add costs
   lavapipe seconds. */
static void test_backward_blocks64(void)
{
    static const acase cases[] = {
        /* b sq sk h kvh d causal off win p scale mask */
        { 1, 1, 1, 1, 1, 16, false, 0, 0, 0, 0, NOMASK, 0 },
        { 1, 63, 63, 2, 2, 64, true, 0, 0, 0, 0, NOMASK, 0 },
        { 2, 65, 130, 4, 2, 80, true, 65, 0, 0, 0, NOMASK, 0 },
        { 1, 130, 65, 4, 1, 128, false, 0, 0, 0.2f, 0, NOMASK, 0 },
        { 1, 300, 300, 1, 1, 128, true, 0, 0, 0, 0, NOMASK, 0 },
        { 1, 300, 130, 2, 1, 34, false, 0, 0, 0, 0, M4(1, 2, 300, 130), 0.1 },
        { 2, 130, 300, 2, 2, 16, true, 200, 1, 0, 0, NOMASK, 0 },
        { 1, 65, 65, 8, 2, 64, true, 0, 40, 0.3f, 0, M2(65, 65), 0 },
        { 3, 63, 65, 3, 3, 126, false, 0, 0, 0, 0.2f, NOMASK, 0 },
        { 1, 130, 70, 2, 1, 32, false, 0, 5, 0, 0, NOMASK, 0 },
    };
    run_ops(cases, sizeof cases / sizeof cases[0], A_GRADS, "blocks64");

    static const size_t subset_feat[] = { 1, 7 }, subset_nods[] = { 2, 7, 9 }, subset_ranges[] = { 2, 7, 8 };
    tuning()->features = th_ctx->cpu_adapter ? WGML__ATTN_FEATURES_CALL : WGML__ATTN_FEATURES_ALL;
    for (size_t i = 0; i < 2; i++) run_op(&cases[subset_feat[i]], A_GRADS, "blocks64, the other feature build");
    tuning_reset();
    tuning()->backward_sub = 8;
    run_op(&cases[2], A_GRADS, "blocks64, chunks 8 steps at a time");   /* head_dim 80 */
    tuning_reset();
    tuning()->ds_bytes = 1;   /* below one pair's blocks */
    for (size_t i = 0; i < 3; i++) run_op(&cases[subset_nods[i]], A_GRADS, "blocks64, dS recomputed");
    tuning_reset();
    for (size_t i = 0; i < 3; i++) {
        const acase *c = &cases[subset_ranges[i]];
        tuning()->ds_bytes = 2 * 16384ull * (c->h / c->kvh) * ((c->sq + 63) / 64) * ((c->sk + 63) / 64);
        run_op(c, A_GRADS, "blocks64, dS in ranges of 2");
    }
    tuning_reset();
}

/* options.lse: the forward writes each row's log-sum-exp on every forward path (prefill,
   the tiled forward, decoding), -inf for rows with no visible key; the backward reads it
   instead of its statistics pass and gives the reference gradients; a shifted lse changes
   them exactly as the math says (proof that it is read); bad lse tensors are refused. */
static void test_lse(void)
{
    static const acase cases[] = {
        /* b sq sk h kvh d causal off win p scale mask */
        { 2, 65, 130, 4, 2, 64, true, 65, 0, 0, 0, NOMASK, 0 },
        { 1, 70, 70, 2, 1, 80, false, 0, 0, 0.2f, 0, M4(1, 2, 70, 70), 0.3 },
        { 1, 30, 20, 2, 1, 32, true, 15, 4, 0, 0, NOMASK, 0 },              /* rows 8.. see no key */
        { 1, 64, 64, 3, 3, 128, false, 0, 0, 0, 0.3f, M2(64, 64), 0 },
        { 2, 1, 300, 4, 2, 128, true, 299, 0, 0, 0, NOMASK, 0 },            /* decoding */
        { 1, 1, 50, 2, 1, 64, true, 100, 10, 0, 0, NOMASK, 0 },             /* decoding, no key */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_op(&cases[i], A_LSE | A_GRADS, "lse");
        /* lse + ln 2 halves every probability the backward rebuilds: without dropout
           grad_v = P^T dout halves exactly */
        if (cases[i].p == 0) run_op(&cases[i], A_LSE_HALF, "grad_v from lse + ln 2");
    }
    tuning()->workgroup_storage = SMALL_ADAPTER;   /* the tiled forward: lse from its statistics mode */
    run_op(&cases[0], A_LSE | A_GRADS, "lse, tiled");
    run_op(&cases[2], A_LSE, "lse, tiled");
    tuning_reset();

    acase c = { 2, 5, 7, 2, 1, 16, true, 0, 0, 0, 0, NOMASK, 0 };
    problem P;
    problem_init(&P, &c, 1);
    wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(2, 5, 2, 16));
    wgml_tensor *g[3] = { th_poisoned(WGML_F32, TH_SHAPE(2, 5, 2, 16)), th_poisoned(WGML_F32, TH_SHAPE(2, 7, 1, 16)),
                          th_poisoned(WGML_F32, TH_SHAPE(2, 7, 1, 16)) };
    wgml_tensor *bad[] = { th_poisoned(WGML_F32, TH_SHAPE(2, 2, 6)), th_poisoned(WGML_F32, TH_SHAPE(2, 5, 2)),
                           th_poisoned(WGML_F32, TH_SHAPE(20)), th_poisoned(WGML_F16, TH_SHAPE(2, 2, 5)) };
    uint64_t before = th_commands();
    for (int i = 0; i < 4; i++) {
        P.opts.lse = bad[i];
        wgml_status want = i == 3 ? WGML_ERROR_DTYPE : WGML_ERROR_SHAPE;
        TH_EXPECT_ERR(wgml_flash_attention_v2_with(th_eng, P.tq, P.tk, P.tv, out, &P.opts, NULL), want, "lse");
        TH_EXPECT_ERR(wgml_flash_attention_v2_backward_with(th_eng, P.tq, P.tk, P.tv, P.tq, P.tdout, g[0], g[1], g[2], &P.opts,
                                                            NULL),
                      want, "lse");
    }
    TH_CHECK(th_commands() == before, "refused lse tensors recorded commands");
    TH_CHECK(poisoned(out), "a refused forward wrote out");
    for (int i = 0; i < 4; i++) {
        if (i < 3) TH_CHECK(poisoned(bad[i]), "a refused call wrote lse %d", i);   /* f32 ones */
        wgml_tensor_release(bad[i]);
    }
    for (int t = 0; t < 3; t++) {
        TH_CHECK(poisoned(g[t]), "a refused backward wrote gradient %d", t);
        wgml_tensor_release(g[t]);
    }
    wgml_tensor_release(out);
    problem_free(&P);
}

/* options.scores: the forward keeps its scores (poisoned before it: a block it does not
   write makes NaN in the backward) and bwd_dkdv64 reads them instead of computing S, over
   block edges, GQA, causal offsets, masks, dropout and both head_dim classes; out, lse and
   every gradient against the reference. Calls without a mask or dropout and head_dim % 4
   == 0 run the forward as two products (fwd_s_mm, fwd_pv_mm: tiles of 128 against blocks
   of 64, so odd block counts, seq_q != seq_k, tiny and partial head_dim chunks), the rest
   prefill_lse with WRITE_S. Then the refusals, with nothing recorded. (In the blocks64
   ctest entry: the other one is near its time limit on lavapipe with an empty shader
   cache.) */
static void test_backward_blocks64_scores(void)
{
    static const acase products[] = {
        /* b sq sk h kvh d causal off win p scale mask */
        { 2, 65, 130, 4, 2, 64, true, 65, 0, 0, 0, NOMASK, 0 },
        { 1, 130, 65, 4, 1, 128, false, 0, 0, 0, 0, NOMASK, 0 },
        { 2, 200, 300, 2, 1, 64, true, 0, 0, 0, 0.3f, NOMASK, 0 },
        { 1, 300, 129, 3, 3, 96, true, 40, 0, 0, 0, NOMASK, 0 },
        { 1, 257, 257, 2, 2, 124, true, 0, 0, 0, 0, NOMASK, 0 },
        { 1, 65, 70, 2, 1, 4, true, 0, 0, 0, 0, NOMASK, 0 },
        { 1, 2, 2, 1, 1, 8, true, 0, 0, 0, 0, NOMASK, 0 },
    };
    static const acase others[] = {
        { 1, 130, 65, 4, 1, 128, false, 0, 0, 0.2f, 0, NOMASK, 0 },
        { 1, 70, 70, 2, 1, 80, true, 0, 0, 0, 0, M4(1, 2, 70, 70), 0.3 },
        { 1, 64, 64, 8, 2, 32, true, 0, 0, 0.3f, 0, M2(64, 64), 0 },
        { 3, 63, 65, 3, 3, 126, false, 0, 0, 0, 0.2f, NOMASK, 0 },
    };
    run_ops(products, sizeof products / sizeof products[0], A_LSE | A_SCORES | A_GRADS, "scores");
    run_ops(others, sizeof others / sizeof others[0], A_LSE | A_SCORES | A_GRADS, "scores");

    acase c = { 1, 70, 70, 2, 1, 16, true, 0, 0, 0, 0, NOMASK, 0 };
    problem P;
    problem_init(&P, &c, 1);
    size_t need = 2 * 2 * 2 * 4096;
    wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(1, 70, 2, 16)), *lse = th_poisoned(WGML_F32, TH_SHAPE(1, 2, 70));
    wgml_tensor *g[3] = { th_poisoned(WGML_F32, TH_SHAPE(1, 70, 2, 16)), th_poisoned(WGML_F32, TH_SHAPE(1, 70, 1, 16)),
                          th_poisoned(WGML_F32, TH_SHAPE(1, 70, 1, 16)) };
    wgml_tensor *sc = th_poisoned(WGML_F32, TH_SHAPE(need)), *small = th_poisoned(WGML_F32, TH_SHAPE(need - 1));
    wgml_tensor *half = th_poisoned(WGML_F16, TH_SHAPE(need));
    uint64_t before = th_commands();
    /* fwd, bwd: whether the forward and the backward refuse it; the tuning limits plan for an
       adapter without room for prefill (the forward's concern; the backward reads the kept
       lse) or with too few storage buffers for bwd_dkdv64 (the backward's) */
    struct { wgml_tensor *scores, *lse; uint32_t window, wg_storage, buffers; wgml_status st; const char *needle; bool fwd, bwd; } bad[] = {
        { sc, NULL, 0, 0, 0, WGML_ERROR_INVALID_ARGUMENT, "needs options.lse", true, true },
        { sc, lse, 8, 0, 0, WGML_ERROR_INVALID_ARGUMENT, "window", true, true },
        { small, lse, 0, 0, 0, WGML_ERROR_SHAPE, "it needs at least", true, true },
        { half, lse, 0, 0, 0, WGML_ERROR_DTYPE, "scores", true, true },
        { sc, lse, 0, SMALL_ADAPTER, 0, WGML_ERROR_LIMIT, "prefill", true, false },
        { sc, lse, 0, 0, 8, WGML_ERROR_LIMIT, "bwd_dkdv64", false, true },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        wgml_attention_options o = P.opts;
        o.scores = bad[i].scores;
        o.lse = bad[i].lse;
        o.window = bad[i].window;
        tuning()->workgroup_storage = bad[i].wg_storage;
        tuning()->storage_buffers = bad[i].buffers;
        if (bad[i].fwd) TH_EXPECT_ERR(wgml_flash_attention_v2_with(th_eng, P.tq, P.tk, P.tv, out, &o, NULL), bad[i].st, bad[i].needle);
        if (bad[i].bwd)
            TH_EXPECT_ERR(wgml_flash_attention_v2_backward_with(th_eng, P.tq, P.tk, P.tv, P.tq, P.tdout, g[0], g[1], g[2], &o, NULL),
                          bad[i].st, bad[i].needle);
        tuning_reset();
    }
    /* what the trainer asks before it keeps scores: no where the kernels are not the 64 x 64 ones */
    TH_CHECK(wgml__attention_keeps_scores(th_eng, 64, 70), "the 64 x 64 kernels keep no scores at head_dim 64");
    TH_CHECK(!wgml__attention_keeps_scores(th_eng, 64, 1), "decoding keeps scores");
    tuning()->workgroup_storage = SMALL_ADAPTER;
    TH_CHECK(!wgml__attention_keeps_scores(th_eng, 64, 70), "a 16 KiB adapter keeps scores");
    tuning_reset();
    tuning()->storage_buffers = 8;
    TH_CHECK(!wgml__attention_keeps_scores(th_eng, 64, 70), "an adapter with 8 storage buffers keeps scores");
    tuning_reset();
    TH_CHECK(th_commands() == before, "refused scores recorded commands");
    TH_CHECK(poisoned(out) && poisoned(sc) && poisoned(small) && poisoned(lse), "a refused call wrote a tensor");
    for (int t = 0; t < 3; t++) TH_CHECK(poisoned(g[t]), "a refused backward wrote gradient %d", t);
    wgml_tensor *all[] = { out, lse, g[0], g[1], g[2], sc, small, half };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) wgml_tensor_release(all[i]);
    problem_free(&P);
}

/* ---- bad inputs --------------------------------------------------------------------- */

static void test_bad_inputs(void)
{
    const size_t B = 2, SQ = 4, SK = 5, H = 4, KVH = 2, D = 8;
    float *data = th_random(B * 8 * H * 16, -1, 1);
    wgml_tensor *q = th_tensor(WGML_F32, data, TH_SHAPE(B, SQ, H, D));
    wgml_tensor *k = th_tensor(WGML_F32, data, TH_SHAPE(B, SK, KVH, D));
    wgml_tensor *v = th_tensor(WGML_F32, data, TH_SHAPE(B, SK, KVH, D));
    wgml_tensor *dout = th_tensor(WGML_F32, data, TH_SHAPE(B, SQ, H, D));
    wgml_tensor *fwd_out = th_tensor(WGML_F32, data, TH_SHAPE(B, SQ, H, D));
    wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(B, SQ, H, D));
    wgml_tensor *gq = th_poisoned(WGML_F32, TH_SHAPE(B, SQ, H, D));
    wgml_tensor *gk = th_poisoned(WGML_F32, TH_SHAPE(B, SK, KVH, D));
    wgml_tensor *gv = th_poisoned(WGML_F32, TH_SHAPE(B, SK, KVH, D));
    wgml_tensor *u32 = th_tensor(WGML_U32, data, TH_SHAPE(B, SQ, H, D));
    wgml_tensor *q3 = th_tensor(WGML_F32, data, TH_SHAPE(B * SQ, H, D));
    wgml_tensor *k_b1 = th_tensor(WGML_F32, data, TH_SHAPE(1, SK, KVH, D));
    wgml_tensor *k_h3 = th_tensor(WGML_F32, data, TH_SHAPE(B, SK, 3, D));
    wgml_tensor *k_d6 = th_tensor(WGML_F32, data, TH_SHAPE(B, SK, KVH, 6));
    wgml_tensor *q_d7 = th_tensor(WGML_F32, data, TH_SHAPE(B, SQ, H, 7)), *k_d7 = th_tensor(WGML_F32, data, TH_SHAPE(B, SK, KVH, 7));
    wgml_tensor *v_sk6 = th_tensor(WGML_F32, data, TH_SHAPE(B, 6, KVH, D));
    wgml_tensor *out_sq5 = th_poisoned(WGML_F32, TH_SHAPE(B, 5, H, D));
    wgml_tensor *mask_ok = th_tensor(WGML_F32, data, TH_SHAPE(1, H, SQ, SK));
    wgml_tensor *mask_badq = th_tensor(WGML_F32, data, TH_SHAPE(1, H, 3, SK));
    wgml_tensor *mask_badk = th_tensor(WGML_F32, data, TH_SHAPE(SQ, 4));
    wgml_tensor *mask_3d = th_tensor(WGML_F32, data, TH_SHAPE(H, SQ, SK));
    wgml_tensor *mask_u32 = th_tensor(WGML_U32, data, TH_SHAPE(1, 1, SQ, SK));
    wgml_tensor *q2 = th_tensor(WGML_F32, data, TH_SHAPE(SQ, D));
    float *big = th_alloc_f(258 * 4);
    memset(big, 0, 258 * 4 * sizeof *big);
    wgml_tensor *q_d258 = th_tensor(WGML_F32, big, TH_SHAPE(1, 2, 1, 258)), *k_d258 = th_tensor(WGML_F32, big, TH_SHAPE(1, 2, 1, 258));
    wgml_tensor *out_d258 = th_poisoned(WGML_F32, TH_SHAPE(1, 2, 1, 258));
    wgml_context *other;
    TH_EXPECT(wgml_context_create(NULL, &other), WGML_OK);
    wgml_tensor *foreign;
    TH_EXPECT(wgml_tensor_from_data(other, WGML_F32, 4, (size_t[]){ B, SK, KVH, D }, data, &foreign), WGML_OK);

    wgml_attention_options o = { .causal = true };
    uint64_t before = th_commands();
#define FWD(q_, k_, v_, out_, opts_, mask_) wgml_flash_attention_v2_with(th_eng, q_, k_, v_, out_, opts_, mask_)
    TH_EXPECT_ERR(wgml_flash_attention_v2_with(NULL, q, k, v, out, &o, NULL), WGML_ERROR_INVALID_ARGUMENT, "engine is NULL");
    TH_EXPECT_ERR(FWD(NULL, k, v, out, &o, NULL), WGML_ERROR_INVALID_ARGUMENT, "q is NULL");
    TH_EXPECT_ERR(FWD(q, NULL, v, out, &o, NULL), WGML_ERROR_INVALID_ARGUMENT, "k is NULL");
    TH_EXPECT_ERR(FWD(q, k, NULL, out, &o, NULL), WGML_ERROR_INVALID_ARGUMENT, "v is NULL");
    TH_EXPECT_ERR(FWD(q, k, v, NULL, &o, NULL), WGML_ERROR_INVALID_ARGUMENT, "out is NULL");
    TH_EXPECT_ERR(FWD(u32, k, v, out, &o, NULL), WGML_ERROR_DTYPE, "q is u32");
    TH_EXPECT_ERR(FWD(q, k, v, out, &o, mask_u32), WGML_ERROR_DTYPE, "mask is u32");
    TH_EXPECT_ERR(FWD(q, foreign, v, out, &o, NULL), WGML_ERROR_CONTEXT, "k belongs to another context");
    TH_EXPECT_ERR(FWD(q3, k, v, out, &o, NULL), WGML_ERROR_SHAPE, "q must be 4-D");
    TH_EXPECT_ERR(FWD(q, k_b1, k_b1, out, &o, NULL), WGML_ERROR_SHAPE, "k has batch 1");
    TH_EXPECT_ERR(FWD(q, k_h3, k_h3, out, &o, NULL), WGML_ERROR_SHAPE, "multiple of k's num_kv_heads (3)");
    TH_EXPECT_ERR(FWD(q, k_d6, k_d6, out, &o, NULL), WGML_ERROR_SHAPE, "k has head_dim 6, q has head_dim 8");
    TH_EXPECT_ERR(FWD(q_d7, k_d7, k_d7, out, &o, NULL), WGML_ERROR_SHAPE, "head_dim is 7");
    TH_EXPECT_ERR(FWD(q_d258, k_d258, k_d258, out_d258, &o, NULL), WGML_ERROR_SHAPE, "head_dim is 258; it must be even and at most 256");
    TH_EXPECT_ERR(FWD(q, k, v_sk6, out, &o, NULL), WGML_ERROR_SHAPE, "v has shape [2, 6, 2, 8]");
    TH_EXPECT_ERR(FWD(q, k, v, out_sq5, &o, NULL), WGML_ERROR_SHAPE, "out has shape");
    TH_EXPECT_ERR(FWD(q, k, v, out, &o, mask_badq), WGML_ERROR_SHAPE, "its seq_q dimension must be 1 or 4");
    TH_EXPECT_ERR(FWD(q, k, v, out, &o, mask_badk), WGML_ERROR_SHAPE, "its seq_k dimension must be 1 or 5");
    TH_EXPECT_ERR(FWD(q, k, v, out, &o, mask_3d), WGML_ERROR_SHAPE, "mask must be 4-D");
    TH_EXPECT_ERR(FWD(q, k, v, q, &o, NULL), WGML_ERROR_ALIAS, "out must not be the same tensor as q");
    TH_EXPECT_ERR(FWD(q, k, v, v, &o, NULL), WGML_ERROR_SHAPE, "out has shape");
    TH_EXPECT_ERR(FWD(q, k, v, dout, &o, dout), WGML_ERROR_SHAPE, "mask has shape");
    wgml_tensor *mask_full = th_tensor(WGML_F32, data, TH_SHAPE(B, H, SQ, D));   /* D = 8 != SK */
    TH_EXPECT_ERR(FWD(q, k, v, out, &o, mask_full), WGML_ERROR_SHAPE, "its seq_k dimension");
    const float bad_p[] = { 1.0f, -0.1f, NAN, 2.0f };
    for (int i = 0; i < 4; i++) {
        wgml_attention_options ob = { .dropout_prob = bad_p[i] };
        TH_EXPECT_ERR(FWD(q, k, v, out, &ob, NULL), WGML_ERROR_INVALID_ARGUMENT, "dropout_prob");
        TH_EXPECT_ERR(wgml_flash_attention_v2(th_eng, q, k, v, out, false, bad_p[i], 1, NULL), WGML_ERROR_INVALID_ARGUMENT,
                      "dropout_prob");
    }
    wgml_attention_options os = { .scale = INFINITY };
    TH_EXPECT_ERR(FWD(q, k, v, out, &os, NULL), WGML_ERROR_INVALID_ARGUMENT, "scale");
    wgml_attention_options oo = { .causal = true, .causal_offset = (1u << 28) + 1 };
    TH_EXPECT_ERR(FWD(q, k, v, out, &oo, NULL), WGML_ERROR_INVALID_ARGUMENT, "causal_offset");
    TH_EXPECT_ERR(wgml_flash_attention(th_eng, q, k, v, out, true), WGML_ERROR_SHAPE, "q must be 2-D");
    TH_EXPECT_ERR(wgml_flash_attention(th_eng, q2, q2, q2, q2, true), WGML_ERROR_ALIAS, "out must not be the same tensor as q");

    /* backward */
#define BWD(q_, k_, v_, o_, do_, gq_, gk_, gv_) \
    wgml_flash_attention_v2_backward_with(th_eng, q_, k_, v_, o_, do_, gq_, gk_, gv_, &o, NULL)
    TH_EXPECT_ERR(BWD(q, k, v, fwd_out, NULL, gq, gk, gv), WGML_ERROR_INVALID_ARGUMENT, "grad_out is NULL");
    TH_EXPECT_ERR(BWD(q, k, v, NULL, dout, gq, gk, gv), WGML_ERROR_INVALID_ARGUMENT, "out is NULL");
    TH_EXPECT_ERR(BWD(q, k, v, fwd_out, dout, NULL, gk, gv), WGML_ERROR_INVALID_ARGUMENT, "grad_q is NULL");
    TH_EXPECT_ERR(BWD(q, k, v, fwd_out, dout, gq, gk, u32), WGML_ERROR_DTYPE, "grad_v is u32");
    TH_EXPECT_ERR(BWD(q, k, v, fwd_out, dout, gq, gq, gv), WGML_ERROR_SHAPE, "grad_k has shape");
    TH_EXPECT_ERR(BWD(q, k, v, out_sq5, dout, gq, gk, gv), WGML_ERROR_SHAPE, "out has shape");
    TH_EXPECT_ERR(BWD(q, k, v, fwd_out, out_sq5, gq, gk, gv), WGML_ERROR_SHAPE, "grad_out has shape");
    TH_EXPECT_ERR(BWD(q, k, v, fwd_out, dout, q, gk, gv), WGML_ERROR_ALIAS, "grad_q must not be the same tensor as q");
    TH_EXPECT_ERR(BWD(q, k, v, fwd_out, dout, fwd_out, gk, gv), WGML_ERROR_ALIAS, "grad_q must not be the same tensor as out");
    TH_EXPECT_ERR(BWD(q, k, v, fwd_out, dout, gq, v, gv), WGML_ERROR_ALIAS, "grad_k must not be the same tensor as v");
    TH_EXPECT_ERR(BWD(q, k, v, fwd_out, dout, gq, gk, gk), WGML_ERROR_ALIAS, "grad_v must not be the same tensor as grad_k");
    TH_EXPECT_ERR(BWD(q, k_h3, k_h3, fwd_out, dout, gq, gk, gv), WGML_ERROR_SHAPE, "multiple of");
    TH_EXPECT_ERR(BWD(q_d258, k_d258, k_d258, q_d258, q_d258, out_d258, out_d258, out_d258), WGML_ERROR_SHAPE, "at most 256");
    wgml_attention_options ob = { .dropout_prob = 1.0f };
    TH_EXPECT_ERR(wgml_flash_attention_v2_backward_with(th_eng, q, k, v, fwd_out, dout, gq, gk, gv, &ob, NULL),
                  WGML_ERROR_INVALID_ARGUMENT, "dropout_prob");
    TH_EXPECT_ERR(wgml_flash_attention_v2_backward_with(th_eng, q, k, v, fwd_out, dout, gq, gk, gv, &o, mask_badq),
                  WGML_ERROR_SHAPE, "mask has shape");
    TH_EXPECT_ERR(wgml_flash_attention_v2_backward_with(th_eng, q, k, v, fwd_out, dout, gq, gk, gv, &o, gq), WGML_ERROR_SHAPE,
                  "mask");
    TH_EXPECT_ERR(wgml_flash_attention_v2_backward(th_eng, q, k, v, fwd_out, dout, gq, gk, gk, true),
                  WGML_ERROR_ALIAS, "grad_v must not be the same tensor as grad_k");
    TH_EXPECT_ERR(wgml_flash_attention_backward(th_eng, q, k, v, fwd_out, dout, gq, gk, gv, true), WGML_ERROR_SHAPE,
                  "q must be 2-D");
    /* tuning values no rule has */
    tuning()->backward_sub = 4;
    TH_EXPECT_ERR(FWD(q, k, v, out, &o, NULL), WGML_ERROR_INVALID_ARGUMENT, "backward_sub");
    TH_EXPECT_ERR(BWD(q, k, v, fwd_out, dout, gq, gk, gv), WGML_ERROR_INVALID_ARGUMENT, "backward_sub");
    tuning_reset();
    tuning()->features = 3;
    TH_EXPECT_ERR(BWD(q, k, v, fwd_out, dout, gq, gk, gv), WGML_ERROR_INVALID_ARGUMENT, "features");
    tuning_reset();
    TH_CHECK(th_commands() == before, "rejected calls recorded %llu commands", (unsigned long long)(th_commands() - before));
    TH_CHECK(poisoned(out) && poisoned(gq) && poisoned(gk) && poisoned(gv) && poisoned(out_sq5),
             "a rejected call wrote an output");

    /* NULL options mean the defaults; a valid call still works after the refusals */
    TH_EXPECT(FWD(q, k, v, out, NULL, NULL), WGML_OK);
    TH_EXPECT(FWD(q, k, v, out, &o, mask_ok), WGML_OK);

    wgml_tensor *all[] = { q, k, v, dout, fwd_out, out, gq, gk, gv, u32, q3, k_b1, k_h3, k_d6, q_d7, k_d7, v_sk6, out_sq5,
                           mask_ok, mask_badq, mask_badk, mask_3d, mask_u32, q2, q_d258, k_d258, out_d258, mask_full };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) wgml_tensor_release(all[i]);
    wgml_tensor_release(foreign);
    wgml_context_destroy(other);
    free(data);
    free(big);
#undef FWD
#undef BWD
}

static const th_case cases[] = {
    { "forward_shapes", test_forward_shapes },
    { "forward_odd_dims", test_forward_odd_dims },
    { "forward_masks", test_forward_masks },
    { "empty_rows", test_empty_rows },
    { "decode", test_decode },
    { "backward_ref", test_backward_ref },
    { "backward_finite_differences", test_backward_finite_differences },
    { "backward_deterministic", test_backward_deterministic },
    { "dropout_decisions", test_dropout_decisions },
    { "dropout_reproducible", test_dropout_reproducible },
    { "single_head", test_single_head },
    { "prefill_edges", test_prefill_edges },
    { "v2_entry_points", test_v2_entry_points },
    { "scale_and_long_keys", test_scale_and_long_keys },
    { "large_grid", test_large_grid },
    { "backward_ds_ranges", test_backward_ds_ranges },
    { "block_order", test_block_order },
    { "small_adapters", test_small_adapters },
    { "wide_heads", test_wide_heads },
    { "robust_context", test_robust_context },
    { "backward_blocks64", test_backward_blocks64 },
    { "backward_blocks64_scores", test_backward_blocks64_scores },
    { "lse", test_lse },
    { "bad_inputs", test_bad_inputs },
};
TH_MAIN(cases)
