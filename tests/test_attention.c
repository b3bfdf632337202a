/* Flash attention (forward, backward, decode) against the double reference of
   tests/ref/ref_attention.c, against central finite differences, and its bad inputs. */
#include "harness.h"
#include "ref_attention.h"

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

typedef struct problem {
    acase c;
    size_t nq, nk, nmask;
    float *q, *k, *v, *mask, *dout;
    double *qd, *kd, *vd, *maskd, *doutd;
    wgml_tensor *tq, *tk, *tv, *tmask, *tdout;
    uint64_t seed;
    ref_attn ref;
    wgml_attention_options opts;
} problem;

static void describe(const acase *c, char *buf, size_t n)
{
    snprintf(buf, n, "b%zu sq%zu sk%zu h%zu/%zu d%zu%s off%u win%u p%.2g mask%d[%zu,%zu,%zu,%zu]%s", c->b, c->sq, c->sk, c->h,
             c->kvh, c->d, c->causal ? " causal" : "", c->offset, c->window, (double)c->p, c->mask_ndim, c->mshape[0],
             c->mshape[1], c->mshape[2], c->mshape[3], c->neg_inf > 0 ? " -inf" : "");
}

static double *to_d(const float *x, size_t n)
{
    double *d = th_alloc_d(n);
    th_to_double(x, d, n);
    return d;
}

/* Random inputs in [-range, range] (q and k), [-1, 1] (v, dout) and [-2, 2] (mask). */
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
    P->qd = to_d(P->q, P->nq);
    P->kd = to_d(P->k, P->nk);
    P->vd = to_d(P->v, P->nk);
    P->doutd = to_d(P->dout, P->nq);
    P->tq = th_tensor(WGML_F32, P->q, TH_SHAPE(c->b, c->sq, c->h, c->d));
    P->tk = th_tensor(WGML_F32, P->k, TH_SHAPE(c->b, c->sk, c->kvh, c->d));
    P->tv = th_tensor(WGML_F32, P->v, TH_SHAPE(c->b, c->sk, c->kvh, c->d));
    P->tdout = th_tensor(WGML_F32, P->dout, TH_SHAPE(c->b, c->sq, c->h, c->d));
    P->seed = ((uint64_t)th_rand_u32() << 32) | th_rand_u32();
    if (c->mask_ndim) {
        const size_t *m = c->mshape;
        P->nmask = m[0] * m[1] * m[2] * m[3];
        P->mask = th_random(P->nmask, -2, 2);
        for (size_t i = 0; i < P->nmask; i++)
            if (th_uniform(0, 1) < c->neg_inf) P->mask[i] = -INFINITY;
        P->maskd = to_d(P->mask, P->nmask);
        P->tmask = c->mask_ndim == 4 ? th_tensor(WGML_F32, P->mask, TH_SHAPE(m[0], m[1], m[2], m[3]))
                                     : th_tensor(WGML_F32, P->mask, TH_SHAPE(m[2], m[3]));
    }
    P->opts = (wgml_attention_options){ .causal = c->causal, .causal_offset = c->offset, .window = c->window,
                                        .dropout_prob = c->p, .seed = P->seed, .scale = c->scale };
    P->ref = (ref_attn){ .batch = c->b, .seq_q = c->sq, .seq_k = c->sk, .heads = c->h, .kv_heads = c->kvh, .dim = c->d,
                         .causal = c->causal, .offset = c->offset, .window = c->window, .dropout = c->p, .seed = P->seed,
                         .scale = c->scale != 0 ? (double)c->scale : 1.0 / sqrt((double)c->d), .mask = P->maskd };
    memcpy(P->ref.mask_shape, c->mshape, sizeof c->mshape);
}

static void problem_free(problem *P)
{
    free(P->q); free(P->k); free(P->v); free(P->dout); free(P->mask);
    free(P->qd); free(P->kd); free(P->vd); free(P->doutd); free(P->maskd);
    wgml_tensor_release(P->tq); wgml_tensor_release(P->tk); wgml_tensor_release(P->tv);
    wgml_tensor_release(P->tdout); wgml_tensor_release(P->tmask);
}

static double max_abs(const double *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        if (fabs(x[i]) > m) m = fabs(x[i]);
    return m;
}

/* Forward tolerance. The output is a (dropout-scaled) convex combination of v rows with
   |v| <= 1. Its f32 error comes from the scores (a dot product of length d: relative error
   <= d * 2^-24, times |s| <= a few units), exp2 (a few ulp), and the sum over seq_k keys
   (<= seq_k * 2^-24 relative); in practice it stays far below 1e-5. */
#define FWD_ATOL 2e-5
#define FWD_RTOL 1e-4

/* Runs the forward on the GPU into a fresh poisoned tensor; returns it. */
static wgml_tensor *gpu_forward(problem *P)
{
    const acase *c = &P->c;
    wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(c->b, c->sq, c->h, c->d));
    TH_EXPECT(wgml_flash_attention_v2_with(th_eng, P->tq, P->tk, P->tv, out, &P->opts, P->tmask), WGML_OK);
    return out;
}

static bool check_forward(problem *P, const char *tag)
{
    const acase *c = &P->c;
    double *ref = th_alloc_d(P->nq);
    ref_attn_forward(&P->ref, P->qd, P->kd, P->vd, ref);
    wgml_tensor *out = gpu_forward(P);
    float *got = th_read(out);
    char what[256], d[200];
    describe(c, d, sizeof d);
    snprintf(what, sizeof what, "%s forward %s", tag, d);
    double scale = c->p > 0 ? 1.0 / (1.0 - c->p) : 1.0;
    bool ok = th_compare(what, got, ref, P->nq, FWD_ATOL * scale, FWD_RTOL);
    free(ref); free(got);
    wgml_tensor_release(out);
    return ok;
}

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

static bool check_backward(problem *P, const char *tag)
{
    const acase *c = &P->c;
    double *rq = th_alloc_d(P->nq), *rk = th_alloc_d(P->nk), *rv = th_alloc_d(P->nk);
    ref_attn_backward(&P->ref, P->qd, P->kd, P->vd, P->doutd, rq, rk, rv);
    wgml_tensor *out = gpu_forward(P);
    wgml_tensor *gq = th_poisoned(WGML_F32, TH_SHAPE(c->b, c->sq, c->h, c->d));
    wgml_tensor *gk = th_poisoned(WGML_F32, TH_SHAPE(c->b, c->sk, c->kvh, c->d));
    wgml_tensor *gv = th_poisoned(WGML_F32, TH_SHAPE(c->b, c->sk, c->kvh, c->d));
    TH_EXPECT(wgml_flash_attention_v2_backward_with(th_eng, P->tq, P->tk, P->tv, out, P->tdout, gq, gk, gv, &P->opts, P->tmask),
              WGML_OK);
    float *fq = th_read(gq), *fk = th_read(gk), *fv = th_read(gv);
    char what[256], d[200];
    describe(c, d, sizeof d);
    bool ok = true;
    snprintf(what, sizeof what, "%s grad_q %s", tag, d);
    ok &= th_compare(what, fq, rq, P->nq, BWD_ATOL * max_abs(rq, P->nq) + BWD_FLOOR, BWD_RTOL);
    snprintf(what, sizeof what, "%s grad_k %s", tag, d);
    ok &= th_compare(what, fk, rk, P->nk, BWD_ATOL * max_abs(rk, P->nk) + BWD_FLOOR, BWD_RTOL);
    snprintf(what, sizeof what, "%s grad_v %s", tag, d);
    ok &= th_compare(what, fv, rv, P->nk, BWD_ATOL * max_abs(rv, P->nk) + BWD_FLOOR, BWD_RTOL);
    free(rq); free(rk); free(rv); free(fq); free(fk); free(fv);
    wgml_tensor_release(out); wgml_tensor_release(gq); wgml_tensor_release(gk); wgml_tensor_release(gv);
    return ok;
}

static void run_cases(const acase *cases, size_t n, bool backward, const char *tag)
{
    for (size_t i = 0; i < n; i++) {
        problem P;
        problem_init(&P, &cases[i], 1.5);
        check_forward(&P, tag);
        if (backward) check_backward(&P, tag);
        problem_free(&P);
    }
}

/* ---- forward ------------------------------------------------------------------------ */

#define M4(a, b, c, d) 4, { a, b, c, d }
#define M2(c, d) 2, { 1, 1, c, d }
#define NOMASK 0, { 0, 0, 0, 0 }

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
    run_cases(cases, sizeof cases / sizeof cases[0], false, "shapes");
}


/* head_dim % 4 == 2: rows start in the middle of a vec4. */
static void test_forward_odd_dims(void)
{
    static const size_t dims[] = { 2, 6, 10, 18, 34, 66, 126 };
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        acase c = { 2, 19, 23, 2, 1, dims[i], i % 2 == 0, 3, 0, 0, 0, NOMASK, 0 };
        run_cases(&c, 1, true, "odd dim");
    }
}

/* Every broadcast shape of a 4-D mask and of a 2-D mask, with some -inf entries. */
static void test_forward_masks(void)
{
    const size_t B = 2, H = 3, SQ = 9, SK = 13;
    for (int bits = 0; bits < 16; bits++) {
        acase c = { B, SQ, SK, H, 1, 8, bits % 3 == 0, 0, 0, 0, 0,
                    M4(bits & 1 ? B : 1, bits & 2 ? H : 1, bits & 4 ? SQ : 1, bits & 8 ? SK : 1), 0.2 };
        run_cases(&c, 1, bits % 4 == 1, "mask4");
    }
    for (int bits = 0; bits < 4; bits++) {
        acase c = { B, SQ, SK, H, 3, 8, bits == 2, 0, 0, 0, 0, M2(bits & 1 ? SQ : 1, bits & 2 ? SK : 1), 0.2 };
        run_cases(&c, 1, bits == 3, "mask2");
    }
}

/* Rows that see no key (window past the keys, every key masked with -inf) give zeros and
   zero gradients, never NaN. */
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
    for (size_t n = 0; n < sizeof cases / sizeof cases[0]; n++) {
        problem P;
        problem_init(&P, &cases[n], 1.5);
        check_forward(&P, "empty rows");
        check_backward(&P, "empty rows");
        /* the reference says which rows are empty; the GPU must give exactly 0 there */
        const acase *c = &cases[n];
        wgml_tensor *out = gpu_forward(&P);
        wgml_tensor *gq = th_poisoned(WGML_F32, TH_SHAPE(c->b, c->sq, c->h, c->d));
        wgml_tensor *gk = th_poisoned(WGML_F32, TH_SHAPE(c->b, c->sk, c->kvh, c->d));
        wgml_tensor *gv = th_poisoned(WGML_F32, TH_SHAPE(c->b, c->sk, c->kvh, c->d));
        TH_EXPECT(wgml_flash_attention_v2_backward_with(th_eng, P.tq, P.tk, P.tv, out, P.tdout, gq, gk, gv, &P.opts, P.tmask),
                  WGML_OK);
        float *o = th_read(out), *g = th_read(gq);
        double *ref = th_alloc_d(P.nq);
        ref_attn_forward(&P.ref, P.qd, P.kd, P.vd, ref);
        size_t empty = 0, bad = 0;
        for (size_t r = 0; r < P.nq / c->d; r++) {
            bool all0 = true;
            for (size_t d = 0; d < c->d; d++) all0 &= ref[r * c->d + d] == 0.0;
            if (!all0) continue;
            empty++;
            for (size_t d = 0; d < c->d; d++) bad += o[r * c->d + d] != 0.0f || g[r * c->d + d] != 0.0f;
        }
        TH_CHECK(empty > 0, "case %zu has no empty row; the test tests nothing", n);
        TH_CHECK(bad == 0, "case %zu: %zu values of empty rows are not exactly 0", n, bad);
        free(o); free(g); free(ref);
        wgml_tensor_release(out); wgml_tensor_release(gq); wgml_tensor_release(gk); wgml_tensor_release(gv);
        problem_free(&P);
    }
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
    run_cases(cases, sizeof cases / sizeof cases[0], true, "decode");
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
    run_cases(cases, sizeof cases / sizeof cases[0], true, "backward");
}

/* loss(q, k, v) = sum(dout * attention(q, k, v)) in double */
static double fd_loss(problem *P, const double *q, const double *k, const double *v, double *scratch)
{
    ref_attn_forward(&P->ref, q, k, v, scratch);
    double l = 0;
    for (size_t i = 0; i < P->nq; i++) l += P->doutd[i] * scratch[i];
    return l;
}

/* Central differences of the double forward: f32 gradients of the GPU against them. The
   step h = 1e-4 leaves a truncation error of order h^2 (1e-8) and a rounding error of
   order 1e-16 / h: the reference is exact to far below the f32 gradients' own error. */
static void fd_check(const acase *c, const char *tag)
{
    problem P;
    problem_init(&P, c, 1.5);
    wgml_tensor *out = gpu_forward(&P);
    wgml_tensor *gq = th_poisoned(WGML_F32, TH_SHAPE(c->b, c->sq, c->h, c->d));
    wgml_tensor *gk = th_poisoned(WGML_F32, TH_SHAPE(c->b, c->sk, c->kvh, c->d));
    wgml_tensor *gv = th_poisoned(WGML_F32, TH_SHAPE(c->b, c->sk, c->kvh, c->d));
    TH_EXPECT(wgml_flash_attention_v2_backward_with(th_eng, P.tq, P.tk, P.tv, out, P.tdout, gq, gk, gv, &P.opts, P.tmask),
              WGML_OK);
    float *got[3] = { th_read(gq), th_read(gk), th_read(gv) };
    double *x[3] = { P.qd, P.kd, P.vd };
    size_t n[3] = { P.nq, P.nk, P.nk };
    static const char *names[3] = { "grad_q", "grad_k", "grad_v" };
    double *scratch = th_alloc_d(P.nq), h = 1e-4;
    for (int t = 0; t < 3; t++) {
        double *fd = th_alloc_d(n[t]);
        for (size_t i = 0; i < n[t]; i++) {
            double x0 = x[t][i];
            x[t][i] = x0 + h;
            double lp = fd_loss(&P, P.qd, P.kd, P.vd, scratch);
            x[t][i] = x0 - h;
            double lm = fd_loss(&P, P.qd, P.kd, P.vd, scratch);
            x[t][i] = x0;
            fd[i] = (lp - lm) / (2 * h);
        }
        char what[256], d[200];
        describe(c, d, sizeof d);
        snprintf(what, sizeof what, "%s %s vs finite differences %s", tag, names[t], d);
        th_compare(what, got[t], fd, n[t], BWD_ATOL * max_abs(fd, n[t]) + BWD_FLOOR, BWD_RTOL);
        free(fd);
    }
    free(scratch);
    for (int t = 0; t < 3; t++) free(got[t]);
    wgml_tensor_release(out); wgml_tensor_release(gq); wgml_tensor_release(gk); wgml_tensor_release(gv);
    problem_free(&P);
}

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
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) fd_check(&cases[i], "fd");
}

/* The same inputs give bit-identical gradients (no atomics, fixed summation order). */
static void test_backward_deterministic(void)
{
    acase c = { 2, 70, 90, 8, 2, 32, true, 20, 0, 0.2f, 0, M4(1, 1, 70, 90), 0 };
    problem P;
    problem_init(&P, &c, 1.5);
    wgml_tensor *out = gpu_forward(&P);
    float *first[3] = { 0 };
    for (int run = 0; run < 2; run++) {
        wgml_tensor *g[3] = { th_poisoned(WGML_F32, TH_SHAPE(c.b, c.sq, c.h, c.d)), th_poisoned(WGML_F32, TH_SHAPE(c.b, c.sk, c.kvh, c.d)),
                              th_poisoned(WGML_F32, TH_SHAPE(c.b, c.sk, c.kvh, c.d)) };
        TH_EXPECT(wgml_flash_attention_v2_backward_with(th_eng, P.tq, P.tk, P.tv, out, P.tdout, g[0], g[1], g[2], &P.opts,
                                                        P.tmask), WGML_OK);
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

static bool poisoned(wgml_tensor *t);

/* ---- the prefill forward ------------------------------------------------------------ */

/* The forward for seq_q > 1 (`prefill`: 64-query x 64-key blocks, head_dim streamed in
   chunks of 32 or 16 floats, 1 or 2 vec4 of head_dim per thread): lengths around the block
   size, head dims around the chunk and vec4-column boundaries (4, 16, 32, 40, 64, 80, 96,
   128) and with head_dim % 4 == 2 (18, 30, 126), causal offsets, windows (1 and one block
   wide), masks, dropout, GQA, batch and heads > 1. Each case with the default chunk, a few
   also with the other chunks (WGML_ATTN_PREFILL=bk16, ...) and through the old kernel
   ("old"). */
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
    const size_t n = sizeof cases / sizeof cases[0];
    run_cases(cases, n, false, "prefill");
    /* the chunks besides the default, each where the device holds it (prefill_bytes in
       attention.c: 16 * (32 * chunk + 1024) bytes), else refused */
    static const char *const variants[] = { "bk16", "old", "bk32", "bk64" };
    static const unsigned chunk_bytes[] = { 16 * (32 * 16 + 1024), 0, 16 * (32 * 32 + 1024), 16 * (32 * 64 + 1024) };
    wgml_adapter_info info;
    wgml_context_info(th_ctx, &info);
    for (int v = 0; v < 4; v++) {
        setenv("WGML_ATTN_PREFILL", variants[v], 1);
        if (chunk_bytes[v] > info.max_workgroup_storage_size) {
            wgml_tensor *o = th_poisoned(WGML_F32, TH_SHAPE(cases[1].b, cases[1].sq, cases[1].h, cases[1].d));
            problem Q;
            problem_init(&Q, &cases[1], 1);
            uint64_t before = th_commands();
            TH_EXPECT_ERR(wgml_flash_attention_v2_with(th_eng, Q.tq, Q.tk, Q.tv, o, &Q.opts, Q.tmask),
                          WGML_ERROR_INVALID_ARGUMENT, "WGML_ATTN_PREFILL");
            TH_CHECK(th_commands() == before && poisoned(o), "a chunk the device cannot hold recorded or wrote something");
            wgml_tensor_release(o);
            problem_free(&Q);
            continue;
        }
        char tag[64];
        snprintf(tag, sizeof tag, "prefill %s", variants[v]);
        run_cases(&cases[1], 2, false, tag);   /* one head_dim > 64, one head_dim <= 64 */
        run_cases(&cases[6], 1, false, tag);
    }
    /* the backward consumes the prefill output (its statistics pass recomputes the row sums) */
    unsetenv("WGML_ATTN_PREFILL");
    run_cases(&cases[6], 1, true, "prefill+backward");
    /* the lanes of the 64 x 64 kernels placed as before they were paired (WGML_ATTN_PAIR=0),
       forward and backward, one head_dim > 64 and one <= 64 */
    setenv("WGML_ATTN_PAIR", "0", 1);
    run_cases(&cases[1], 2, true, "prefill+backward unpaired lanes");
    unsetenv("WGML_ATTN_PAIR");

    /* a value that is no variant, or one that does not fit, is refused with nothing recorded */
    acase c = { 1, 5, 5, 1, 1, 16, false, 0, 0, 0, 0, NOMASK, 0 };
    problem P;
    problem_init(&P, &c, 1);
    wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(1, 5, 1, 16));
    uint64_t before = th_commands();
    static const char *const bad[] = { "bk8", "fast", "bk32 " };
    for (int i = 0; i < 3; i++) {
        setenv("WGML_ATTN_PREFILL", bad[i], 1);
        TH_EXPECT_ERR(wgml_flash_attention_v2_with(th_eng, P.tq, P.tk, P.tv, out, &P.opts, NULL), WGML_ERROR_INVALID_ARGUMENT,
                      "WGML_ATTN_PREFILL");
    }
    TH_CHECK(th_commands() == before, "refused WGML_ATTN_PREFILL values recorded commands");
    TH_CHECK(poisoned(out), "a refused call wrote the output");
    unsetenv("WGML_ATTN_PREFILL");
    wgml_tensor_release(out);
    problem_free(&P);
}

/* ---- the other entry points --------------------------------------------------------- */

/* wgml_flash_attention and its backward: one head, [seq, head_dim]. */
static void test_single_head(void)
{
    static const size_t shapes[][3] = { { 9, 9, 16 }, { 70, 70, 64 }, { 33, 80, 24 }, { 1, 40, 8 } };
    for (size_t s = 0; s < 4; s++)
        for (int causal = 0; causal < 2; causal++) {
            size_t SQ = shapes[s][0], SK = shapes[s][1], D = shapes[s][2];
            acase c = { 1, SQ, SK, 1, 1, D, causal, 0, 0, 0, 0, NOMASK, 0 };
            problem P;
            problem_init(&P, &c, 1.5);
            wgml_tensor *q = th_tensor(WGML_F32, P.q, TH_SHAPE(SQ, D)), *k = th_tensor(WGML_F32, P.k, TH_SHAPE(SK, D));
            wgml_tensor *v = th_tensor(WGML_F32, P.v, TH_SHAPE(SK, D)), *dout = th_tensor(WGML_F32, P.dout, TH_SHAPE(SQ, D));
            wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(SQ, D));
            wgml_tensor *gq = th_poisoned(WGML_F32, TH_SHAPE(SQ, D));
            wgml_tensor *gk = th_poisoned(WGML_F32, TH_SHAPE(SK, D)), *gv = th_poisoned(WGML_F32, TH_SHAPE(SK, D));
            TH_EXPECT(wgml_flash_attention(th_eng, q, k, v, out, causal), WGML_OK);
            TH_EXPECT(wgml_flash_attention_backward(th_eng, q, k, v, out, dout, gq, gk, gv, causal), WGML_OK);
            double *ro = th_alloc_d(P.nq), *rq = th_alloc_d(P.nq), *rk = th_alloc_d(P.nk), *rv = th_alloc_d(P.nk);
            ref_attn_forward(&P.ref, P.qd, P.kd, P.vd, ro);
            ref_attn_backward(&P.ref, P.qd, P.kd, P.vd, P.doutd, rq, rk, rv);
            float *fo = th_read(out), *fq = th_read(gq), *fk = th_read(gk), *fv = th_read(gv);
            char what[128];
            snprintf(what, sizeof what, "single head sq%zu sk%zu d%zu causal%d", SQ, SK, D, causal);
            th_compare(what, fo, ro, P.nq, FWD_ATOL, FWD_RTOL);
            th_compare(what, fq, rq, P.nq, BWD_ATOL * max_abs(rq, P.nq) + BWD_FLOOR, BWD_RTOL);
            th_compare(what, fk, rk, P.nk, BWD_ATOL * max_abs(rk, P.nk) + BWD_FLOOR, BWD_RTOL);
            th_compare(what, fv, rv, P.nk, BWD_ATOL * max_abs(rv, P.nk) + BWD_FLOOR, BWD_RTOL);
            free(ro); free(rq); free(rk); free(rv); free(fo); free(fq); free(fk); free(fv);
            wgml_tensor *ts[] = { q, k, v, dout, out, gq, gk, gv };
            for (int t = 0; t < 8; t++) wgml_tensor_release(ts[t]);
            problem_free(&P);
        }
}

/* wgml_flash_attention_v2 (mask, dropout) and wgml_flash_attention_v2_backward (causal only). */
static void test_v2_entry_points(void)
{
    acase c = { 2, 20, 30, 4, 2, 16, true, 0, 0, 0.25f, 0, M4(2, 1, 20, 30), 0.1 };
    problem P;
    problem_init(&P, &c, 1.5);
    double *ref = th_alloc_d(P.nq);
    ref_attn_forward(&P.ref, P.qd, P.kd, P.vd, ref);
    wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(c.b, c.sq, c.h, c.d));
    TH_EXPECT(wgml_flash_attention_v2(th_eng, P.tq, P.tk, P.tv, out, true, 0.25f, P.seed, P.tmask), WGML_OK);
    float *got = th_read(out);
    th_compare("wgml_flash_attention_v2", got, ref, P.nq, FWD_ATOL / 0.75, FWD_RTOL);
    free(got);
    free(ref);
    wgml_tensor_release(out);
    problem_free(&P);

    acase c2 = { 2, 20, 30, 4, 2, 16, true, 0, 0, 0, 0, NOMASK, 0 };
    problem_init(&P, &c2, 1.5);
    out = gpu_forward(&P);
    wgml_tensor *g[3] = { th_poisoned(WGML_F32, TH_SHAPE(2, 20, 4, 16)), th_poisoned(WGML_F32, TH_SHAPE(2, 30, 2, 16)),
                          th_poisoned(WGML_F32, TH_SHAPE(2, 30, 2, 16)) };
    TH_EXPECT(wgml_flash_attention_v2_backward(th_eng, P.tq, P.tk, P.tv, out, P.tdout, g[0], g[1], g[2], true), WGML_OK);
    double *r[3] = { th_alloc_d(P.nq), th_alloc_d(P.nk), th_alloc_d(P.nk) };
    ref_attn_backward(&P.ref, P.qd, P.kd, P.vd, P.doutd, r[0], r[1], r[2]);
    size_t n[3] = { P.nq, P.nk, P.nk };
    for (int t = 0; t < 3; t++) {
        float *x = th_read(g[t]);
        th_compare("wgml_flash_attention_v2_backward", x, r[t], n[t], BWD_ATOL * max_abs(r[t], n[t]) + BWD_FLOOR, BWD_RTOL);
        free(x);
        free(r[t]);
        wgml_tensor_release(g[t]);
    }
    wgml_tensor_release(out);
    problem_free(&P);
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
    run_cases(cases, sizeof cases / sizeof cases[0], true, "scale/long");
}

/* More workgroups than one grid dimension holds (65536 (batch, head) pairs): the forward
   takes its 2-D grid path (the other kernels share its indexing; lavapipe needs about 10 s
   per kernel at this count, so only this one runs). */
static void test_large_grid(void)
{
    static const acase c = { 256, 2, 2, 256, 128, 2, true, 0, 0, 0, 0, NOMASK, 0 };
    run_cases(&c, 1, false, "large grid");
}

/* The backward keeps dS for at most min(1 GiB, one storage binding) at a time and runs
   over ranges of (batch, kv head) pairs otherwise. Seq 4096 takes 64 MiB of dS per head:
   three heads take two ranges (2 + 1) on lavapipe (128 MiB bindings) and one on a GPU with
   larger bindings. Checked against the reference, then the backward's commands are counted:
   the statistics pass, then bwd_dkdv64 and bwd_dq_ds64 per range (head_dim 4 keeps the
   reference cheap; the kernels pad it to their chunks). */
static void test_backward_ds_ranges(void)
{
    static const acase c = { 1, 4096, 4096, 3, 3, 4, true, 0, 0, 0, 0, NOMASK, 0 };
    problem P;
    problem_init(&P, &c, 1.5);
    check_backward(&P, "dS ranges");
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
   (block_of in attention.wgsl; the group size from the rows a head re-reads, or
   WGML_ATTN_ORDER). Group sizes that do not divide the heads leave a smaller last group:
   12 query heads in groups of 5 (5, 5, 2) and of 4, 6 (batch x kv head) pairs in groups
   of 5 (5, 1) and 4 (4, 2), one head at a time, and the default; causal, a window, GQA;
   forward and backward against the reference; the old tiled forward in groups of 5;
   malformed values refused. */
static void test_block_order(void)
{
    static const acase cases[] = {
        /* b sq sk h kvh d causal off win p scale mask */
        { 2, 150, 150, 6, 3, 18, true, 0, 0, 0, 0, NOMASK, 0 },
        { 2, 100, 170, 6, 3, 18, true, 70, 40, 0, 0, NOMASK, 0 },
    };
    static const char *const orders[] = { "5", "4", "head", "" };
    for (int o = 0; o < 4; o++) {
        setenv("WGML_ATTN_ORDER", orders[o], 1);
        char tag[64];
        snprintf(tag, sizeof tag, "block order \"%s\"", orders[o]);
        run_cases(cases, 2, true, tag);
    }
    setenv("WGML_ATTN_ORDER", "5", 1);
    setenv("WGML_ATTN_PREFILL", "old", 1);
    run_cases(cases, 2, false, "block order \"5\", old forward");
    unsetenv("WGML_ATTN_PREFILL");

    /* a value that is neither "head" nor a number of heads is refused by the forward and
       the backward, with nothing recorded or written */
    problem P;
    problem_init(&P, &cases[0], 1);
    const acase *c = &cases[0];
    wgml_tensor *out = gpu_forward(&P);
    wgml_tensor *o = th_poisoned(WGML_F32, TH_SHAPE(c->b, c->sq, c->h, c->d));
    wgml_tensor *gq = th_poisoned(WGML_F32, TH_SHAPE(c->b, c->sq, c->h, c->d));
    wgml_tensor *gk = th_poisoned(WGML_F32, TH_SHAPE(c->b, c->sk, c->kvh, c->d));
    wgml_tensor *gv = th_poisoned(WGML_F32, TH_SHAPE(c->b, c->sk, c->kvh, c->d));
    static const char *const bad[] = { "0", "x", "3x", "-1", " 3", "65537", "Head" };
    uint64_t before = th_commands();
    for (int i = 0; i < 7; i++) {
        setenv("WGML_ATTN_ORDER", bad[i], 1);
        TH_EXPECT_ERR(wgml_flash_attention_v2_with(th_eng, P.tq, P.tk, P.tv, o, &P.opts, P.tmask),
                      WGML_ERROR_INVALID_ARGUMENT, "WGML_ATTN_ORDER");
        TH_EXPECT_ERR(wgml_flash_attention_v2_backward_with(th_eng, P.tq, P.tk, P.tv, out, P.tdout, gq, gk, gv, &P.opts,
                                                            P.tmask),
                      WGML_ERROR_INVALID_ARGUMENT, "WGML_ATTN_ORDER");
    }
    TH_CHECK(th_commands() == before, "refused WGML_ATTN_ORDER values recorded commands");
    TH_CHECK(poisoned(o) && poisoned(gq) && poisoned(gk) && poisoned(gv), "a refused call wrote an output");
    unsetenv("WGML_ATTN_ORDER");
    wgml_tensor_release(out); wgml_tensor_release(o);
    wgml_tensor_release(gq); wgml_tensor_release(gk); wgml_tensor_release(gv);
    problem_free(&P);
}

/* Other tile shapes through the tuning variables, for the code paths the default shapes of
   lavapipe leave out (the defaults cover one and two staging regions, 2 and 4 columns per
   lane, 8 lanes per row group, row blocks of 16 to 64): 16 lanes per row group (fwd), 4
   lanes and two staging regions (dq), 1 column per lane and row blocks of 8 (dkdv),
   decoding with 32 threads, one head per workgroup and chunks of 4 keys. */
static void test_forced_tiles(void)
{
    static const struct { const char *fwd, *dq, *dkdv, *decode; } cfgs[] = {
        { "16,16,2,0", "32,4,4,0", "8,8,1,1", "32,4,1,3" },
    };
    static const acase cases[] = {
        { 2, 37, 41, 4, 2, 32, true, 2, 0, 0.2f, 0, M4(1, 4, 37, 1), 0.1 },
        { 2, 1, 70, 8, 2, 32, true, 50, 0, 0.2f, 0, M4(2, 1, 1, 70), 0 },
    };
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        setenv("WGML_ATTN_FWD", cfgs[i].fwd, 1);
        setenv("WGML_ATTN_DQ", cfgs[i].dq, 1);
        setenv("WGML_ATTN_DKDV", cfgs[i].dkdv, 1);
        setenv("WGML_ATTN_DECODE", cfgs[i].decode, 1);
        char tag[128];
        snprintf(tag, sizeof tag, "tiles fwd %s dq %s dkdv %s decode %s", cfgs[i].fwd, cfgs[i].dq, cfgs[i].dkdv, cfgs[i].decode);
        run_cases(cases, sizeof cases / sizeof cases[0], true, tag);
    }
    /* a shape that does not fit is refused, naming the variable, with nothing recorded */
    setenv("WGML_ATTN_FWD", "64,8,4,0", 1);
    acase c = { 1, 5, 5, 1, 1, 128, false, 0, 0, 0, 0, NOMASK, 0 };
    problem P;
    problem_init(&P, &c, 1);
    wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(1, 5, 1, 128));
    uint64_t before = th_commands();
    TH_EXPECT_ERR(wgml_flash_attention_v2_with(th_eng, P.tq, P.tk, P.tv, out, &P.opts, NULL), WGML_ERROR_INVALID_ARGUMENT,
                  "WGML_ATTN_FWD");
    setenv("WGML_ATTN_FWD", "5,8,4,0", 1);
    TH_EXPECT_ERR(wgml_flash_attention_v2_with(th_eng, P.tq, P.tk, P.tv, out, &P.opts, NULL), WGML_ERROR_INVALID_ARGUMENT,
                  "WGML_ATTN_FWD");
    TH_CHECK(th_commands() == before, "refused tile shapes recorded commands");
    unsetenv("WGML_ATTN_FWD");
    unsetenv("WGML_ATTN_DQ");
    unsetenv("WGML_ATTN_DKDV");
    unsetenv("WGML_ATTN_DECODE");
    wgml_tensor_release(out);
    problem_free(&P);
}

/* A context with Dawn's robustness (bounds clamping, workgroup zeroing:
   wgml_context_desc.robust), the opt-in debugging mode, against the reference. The rest
   of this file runs without it (the default), where no kernel may read past a buffer or
   read workgroup memory it did not write (head_dim 18 leaves padding). */
static void test_robust_context(void)
{
    wgml_context *ctx;
    wgml_engine *eng;
    TH_EXPECT(wgml_context_create(&(wgml_context_desc){ .robust = true }, &ctx), WGML_OK);
    TH_EXPECT(wgml_engine_create(ctx, &eng), WGML_OK);
    static const acase cases[] = {
        { 2, 37, 45, 4, 2, 18, true, 3, 0, 0.2f, 0, M4(2, 1, 37, 45), 0.1 },
        { 2, 1, 45, 4, 2, 18, true, 30, 0, 0, 0, M2(1, 45), 0 },
    };
    for (size_t n = 0; n < 2; n++) {
        const acase *c = &cases[n];
        problem P;
        problem_init(&P, c, 1.5);
        wgml_tensor *t[9];
        const float *src[5] = { P.q, P.k, P.v, P.dout, P.mask };
        const size_t *shapes[5] = { (size_t[]){ c->b, c->sq, c->h, c->d }, (size_t[]){ c->b, c->sk, c->kvh, c->d },
                                    (size_t[]){ c->b, c->sk, c->kvh, c->d }, (size_t[]){ c->b, c->sq, c->h, c->d },
                                    c->mask_ndim == 4 ? c->mshape : c->mshape + 2 };
        for (int i = 0; i < 5; i++)
            TH_EXPECT(wgml_tensor_from_data(ctx, WGML_F32, i == 4 ? (uint32_t)c->mask_ndim : 4, shapes[i], src[i], &t[i]), WGML_OK);
        for (int i = 5; i < 9; i++) TH_EXPECT(wgml_tensor_create(ctx, WGML_F32, 4, shapes[i < 7 ? 0 : 1], &t[i]), WGML_OK);
        TH_EXPECT(wgml_flash_attention_v2_with(eng, t[0], t[1], t[2], t[5], &P.opts, t[4]), WGML_OK);
        TH_EXPECT(wgml_flash_attention_v2_backward_with(eng, t[0], t[1], t[2], t[5], t[3], t[6], t[7], t[8], &P.opts, t[4]),
                  WGML_OK);
        double *ro = th_alloc_d(P.nq), *rq = th_alloc_d(P.nq), *rk = th_alloc_d(P.nk), *rv = th_alloc_d(P.nk);
        ref_attn_forward(&P.ref, P.qd, P.kd, P.vd, ro);
        ref_attn_backward(&P.ref, P.qd, P.kd, P.vd, P.doutd, rq, rk, rv);
        float *fo = th_alloc_f(P.nq), *fq = th_alloc_f(P.nq), *fk = th_alloc_f(P.nk), *fv = th_alloc_f(P.nk);
        TH_EXPECT(wgml_tensor_read(t[5], 0, fo, P.nq * 4), WGML_OK);
        TH_EXPECT(wgml_tensor_read(t[6], 0, fq, P.nq * 4), WGML_OK);
        TH_EXPECT(wgml_tensor_read(t[7], 0, fk, P.nk * 4), WGML_OK);
        TH_EXPECT(wgml_tensor_read(t[8], 0, fv, P.nk * 4), WGML_OK);
        th_compare("robust out", fo, ro, P.nq, FWD_ATOL / (1 - c->p), FWD_RTOL);
        th_compare("robust grad_q", fq, rq, P.nq, BWD_ATOL * max_abs(rq, P.nq) + BWD_FLOOR, BWD_RTOL);
        th_compare("robust grad_k", fk, rk, P.nk, BWD_ATOL * max_abs(rk, P.nk) + BWD_FLOOR, BWD_RTOL);
        th_compare("robust grad_v", fv, rv, P.nk, BWD_ATOL * max_abs(rv, P.nk) + BWD_FLOOR, BWD_RTOL);
        free(ro); free(rq); free(rk); free(rv); free(fo); free(fq); free(fk); free(fv);
        for (int i = 0; i < 9; i++) wgml_tensor_release(t[i]);
        problem_free(&P);
    }
    wgml_engine_destroy(eng);
    wgml_context_destroy(ctx);
}

/* ---- bad inputs --------------------------------------------------------------------- */

static bool poisoned(wgml_tensor *t)
{
    uint32_t *x = (uint32_t *)th_read(t);
    bool ok = true;
    for (size_t i = 0; i < wgml_tensor_numel(t); i++) ok &= x[i] == 0xFFFFFFFFu;
    free(x);
    return ok;
}

/* The backward's 64 x 64 kernels (bwd_dq64 / bwd_dkdv64) at the edges of their blocks:
   sequences of 1, 63, 65, 130, 300 (partial blocks, several blocks, seq_q != seq_k both
   ways), head_dim 16, 34 (% 4 == 2), 64, 80, 126, 128 (one or two vec4 per thread, partial
   head_dim chunks), causal with offsets, windows (1 included), masks with -inf entries,
   dropout, GQA groups 1, 2, 4, rows past the keys (empty), batch and heads > 1. Run with
   the default choice of head_dim chunk, the other chunks forced (32 only where the device
   holds it; refused elsewhere), chunks consumed in sub-chunks (G_SUB), the other build of
   the mask and dropout code (GPUs build each call's pipeline with only the features it
   uses and CPU adapters with all of them; WGML_ATTN_FEAT picks the other one here: "all"
   on a GPU, "call" on a CPU adapter, without and with both features), and the old tiles
   for an A/B of the same inputs. The default computes dq from the dS that bwd_dkdv64
   writes: stored dense and multiplied by bwd_dq_mm where head_dim % 4 == 0, in 64 x 64
   blocks by bwd_dq_ds64 otherwise (head_dim 34, 126; and one run with WGML_ATTN_DQMM=0
   on cases of both head_dim classes, causal and windowed); one run recomputes them in bwd_dq64 (WGML_ATTN_DS=0),
   one runs both over ranges of 2 (batch, kv head) pairs (WGML_ATTN_DS=1,2: 4 pairs, 2,
   and 9 with a last range of 1), as the backward does where all blocks exceed 1 GiB.
   The sub-chunk and feature runs are kept small: on a cold shader cache every pipeline
   they add costs lavapipe seconds. */
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
    /* the default chunk is 8 up to head_dim 64 and 16 (32 KiB devices) or 32 (48 KiB)
       above: force the others on a subset with both head_dim classes */
    static const size_t subset8[] = { 1, 2, 5, 7 }, subset16[] = { 1, 5, 9, 3 }, subset32[] = { 1, 2, 4, 8 },
                        subset_sub[] = { 1, 4 }, subset_feat[] = { 1, 7 }, subset_old[] = { 2, 5 },
                        subset_nods[] = { 2, 7, 9 }, subset_ranges[] = { 2, 7, 8 }, subset_blocks[] = { 2, 4, 6 };
    static const struct { const char *env; const size_t *which; size_t n; bool all_features; const char *ds; bool blocks; } runs[] = {
        { NULL, NULL, 0, false, NULL, false },
        { "new,8", subset8, 4, false, NULL, false },
        { "new,16", subset16, 4, false, NULL, false },
        { "new,32", subset32, 4, false, NULL, false },
        { "new,16,s8", subset_sub, 2, false, NULL, false },
        { "new,32,s16", subset_sub, 2, false, NULL, false },
        { NULL, subset_feat, 2, true, NULL, false },
        { "old", subset_old, 2, false, NULL, false },
        { NULL, subset_nods, 3, false, "0", false },
        { NULL, subset_ranges, 3, false, "1,2", false },
        { NULL, subset_blocks, 3, false, NULL, true },
    };
    wgml_adapter_info info;
    wgml_context_info(th_ctx, &info);
    bool fits32 = 16u * (64u * 32u + 1024u) <= info.max_workgroup_storage_size;   /* g_st + g_w at GBK 32 */
    /* on a CPU adapter the sub-chunk run takes its head_dim 64 case only (the head_dim 128
       pipelines are the ones lavapipe compiles slowest; a GPU's default runs G_SUB there) */
    bool cpu = info.type && !strcmp(info.type, "CPU");
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        if (runs[r].env && !strncmp(runs[r].env, "new,32", 6) && !fits32) {
            /* a chunk the device cannot hold is refused, naming the variable */
            setenv("WGML_ATTN_DQ", runs[r].env, 1);
            problem P;
            problem_init(&P, &cases[1], 1);
            wgml_tensor *g[3];
            for (int t = 0; t < 3; t++) g[t] = th_poisoned(WGML_F32, TH_SHAPE(1, 63, 2, 64));   /* cases[1] */
            uint64_t before = th_commands();
            TH_EXPECT_ERR(wgml_flash_attention_v2_backward_with(th_eng, P.tq, P.tk, P.tv, P.tq, P.tdout, g[0], g[1], g[2],
                                                                &P.opts, NULL),
                          WGML_ERROR_INVALID_ARGUMENT, "WGML_ATTN_DQ");
            TH_CHECK(th_commands() == before, "a refused chunk of 32 recorded commands");
            for (int t = 0; t < 3; t++) {
                TH_CHECK(poisoned(g[t]), "a refused chunk of 32 wrote gradient %d", t);
                wgml_tensor_release(g[t]);
            }
            problem_free(&P);
            unsetenv("WGML_ATTN_DQ");
            continue;
        }
        if (runs[r].env) {
            setenv("WGML_ATTN_DQ", runs[r].env, 1);
            setenv("WGML_ATTN_DKDV", runs[r].env, 1);
        }
        if (runs[r].all_features) setenv("WGML_ATTN_FEAT", cpu ? "call" : "all", 1);
        if (runs[r].ds) setenv("WGML_ATTN_DS", runs[r].ds, 1);
        if (runs[r].blocks) setenv("WGML_ATTN_DQMM", "0", 1);
        char tag[96];
        snprintf(tag, sizeof tag, "blocks64 %s%s%s%s", runs[r].env ? runs[r].env : "default",
                 runs[r].all_features ? " other feature build" : "",
                 !runs[r].ds ? "" : !strcmp(runs[r].ds, "0") ? " dS recomputed" : " dS in ranges of 2",
                 runs[r].blocks ? " dS in blocks" : "");
        size_t n = runs[r].which ? runs[r].n : sizeof cases / sizeof cases[0];
        if (cpu && runs[r].which == subset_sub) n = 1;
        for (size_t i = 0; i < n; i++) {
            problem P;
            problem_init(&P, &cases[runs[r].which ? runs[r].which[i] : i], 1.5);
            check_backward(&P, tag);
            problem_free(&P);
        }
        unsetenv("WGML_ATTN_DQ");
        unsetenv("WGML_ATTN_DKDV");
        unsetenv("WGML_ATTN_FEAT");
        unsetenv("WGML_ATTN_DS");
        unsetenv("WGML_ATTN_DQMM");
    }
    /* a chunk that is not 8, 16 or 32, or a sub-chunk that is not 4, 8 or 16 below it, is
       refused, naming the variable, with nothing recorded */
    setenv("WGML_ATTN_DQ", "new,12", 1);
    setenv("WGML_ATTN_DKDV", "new", 1);
    acase c = { 1, 5, 5, 1, 1, 16, false, 0, 0, 0, 0, NOMASK, 0 };
    problem P;
    problem_init(&P, &c, 1);
    wgml_tensor *g[3];
    for (int t = 0; t < 3; t++) g[t] = th_poisoned(WGML_F32, TH_SHAPE(1, 5, 1, 16));
    uint64_t before = th_commands();
    TH_EXPECT_ERR(wgml_flash_attention_v2_backward_with(th_eng, P.tq, P.tk, P.tv, P.tq, P.tdout, g[0], g[1], g[2], &P.opts, NULL),
                  WGML_ERROR_INVALID_ARGUMENT, "WGML_ATTN_DQ");
    setenv("WGML_ATTN_DQ", "new", 1);
    setenv("WGML_ATTN_DKDV", "new,0", 1);
    TH_EXPECT_ERR(wgml_flash_attention_v2_backward_with(th_eng, P.tq, P.tk, P.tv, P.tq, P.tdout, g[0], g[1], g[2], &P.opts, NULL),
                  WGML_ERROR_INVALID_ARGUMENT, "WGML_ATTN_DKDV");
    /* a sub-chunk that does not fit its chunk (WGML_ATTN_DQ, with WGML_ATTN_DKDV=new), a
       WGML_ATTN_DS other than 0, 1 or 1,N, a WGML_ATTN_DQMM other than 0 or 1: refused */
    static const char *const bad_sub[] = { "new,16,s3", "new,16,s16", "new,8,s8", "new,16,x8", "new,16,s8x", "new,16,", "new,16s8", NULL },
                             *const bad_ds[] = { "2", "yes", "1 ", "01", "1,0", "1,", "1,x", "1,-3", "1,2x", "1, 2", "0,2", NULL },
                             *const bad_dqmm[] = { "2", "yes", "1 ", "01", NULL };
    static const struct { const char *var; const char *const *bad; } bad_vars[] = {
        { "WGML_ATTN_DQ", bad_sub }, { "WGML_ATTN_DS", bad_ds }, { "WGML_ATTN_DQMM", bad_dqmm } };
    for (size_t v = 0; v < sizeof bad_vars / sizeof bad_vars[0]; v++) {
        if (v == 0) setenv("WGML_ATTN_DKDV", "new", 1);
        for (const char *const *b = bad_vars[v].bad; *b; b++) {
            setenv(bad_vars[v].var, *b, 1);
            TH_EXPECT_ERR(wgml_flash_attention_v2_backward_with(th_eng, P.tq, P.tk, P.tv, P.tq, P.tdout, g[0], g[1], g[2],
                                                                &P.opts, NULL),
                          WGML_ERROR_INVALID_ARGUMENT, bad_vars[v].var);
        }
        unsetenv(bad_vars[v].var);
        unsetenv("WGML_ATTN_DKDV");
    }
    setenv("WGML_ATTN_DS", "1", 1);
    setenv("WGML_ATTN_DQ", "old", 1);
    TH_EXPECT_ERR(wgml_flash_attention_v2_backward_with(th_eng, P.tq, P.tk, P.tv, P.tq, P.tdout, g[0], g[1], g[2], &P.opts, NULL),
                  WGML_ERROR_INVALID_ARGUMENT, "WGML_ATTN_DS");
    unsetenv("WGML_ATTN_DS");
    TH_CHECK(th_commands() == before, "refused backward kernels recorded commands");
    for (int t = 0; t < 3; t++) {
        TH_CHECK(poisoned(g[t]), "refused backward wrote gradient %d", t);
        wgml_tensor_release(g[t]);
    }
    unsetenv("WGML_ATTN_DQ");
    unsetenv("WGML_ATTN_DKDV");
    problem_free(&P);
}

/* options.lse: the forward writes each row's log-sum-exp on every forward path (prefill,
   the tiled fallback, decoding), -inf for rows with no visible key; the backward reads it
   instead of its statistics pass and gives the reference gradients; a shifted lse changes
   them exactly as the math says (proof that it is read); bad lse tensors are refused. */
#define LSE_ATOL 1e-5
#define LSE_RTOL 1e-5
/* The log-sum-exp a forward wrote to lse against the reference; returns what it read
   (the caller frees it). */
static float *check_lse_written(problem *P, wgml_tensor *lse, const char *tag)
{
    const acase *c = &P->c;
    size_t nl = c->b * c->h * c->sq;
    double *ref = th_alloc_d(nl);
    ref_attn_lse(&P->ref, P->qd, P->kd, ref);
    float *got = th_read(lse);
    char what[256], d[200];
    describe(c, d, sizeof d);
    snprintf(what, sizeof what, "%s lse %s", tag, d);
    th_compare(what, got, ref, nl, LSE_ATOL, LSE_RTOL);
    free(ref);
    return got;
}

static void check_lse_case(const acase *c, const char *tag, bool backward)
{
    problem P;
    problem_init(&P, c, 1.5);
    char what[256], d[200];
    describe(c, d, sizeof d);
    size_t nl = c->b * c->h * c->sq;
    wgml_tensor *lse = th_poisoned(WGML_F32, TH_SHAPE(c->b, c->h, c->sq));
    P.opts.lse = lse;
    check_forward(&P, tag);   /* out against the reference, with lse written beside it */
    float *got = check_lse_written(&P, lse, tag);
    if (backward) {
        check_backward(&P, tag);   /* forward writing lse, backward reading it */
        /* lse + ln 2 halves every probability the backward rebuilds: without dropout or a
           mask grad_v = P^T dout halves exactly */
        if (c->p == 0) {
            for (size_t i = 0; i < nl; i++) got[i] = isinf(got[i]) ? got[i] : got[i] + 0.69314718f;   /* ln 2 */
            TH_EXPECT(wgml_tensor_write(lse, 0, got, nl * sizeof(float)), WGML_OK);
            wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(c->b, c->sq, c->h, c->d));
            wgml_attention_options plain = P.opts;
            plain.lse = NULL;
            TH_EXPECT(wgml_flash_attention_v2_with(th_eng, P.tq, P.tk, P.tv, out, &plain, P.tmask), WGML_OK);
            wgml_tensor *g[3];
            for (int t = 0; t < 3; t++)
                g[t] = th_poisoned(WGML_F32, t ? TH_SHAPE(c->b, c->sk, c->kvh, c->d) : TH_SHAPE(c->b, c->sq, c->h, c->d));
            TH_EXPECT(wgml_flash_attention_v2_backward_with(th_eng, P.tq, P.tk, P.tv, out, P.tdout, g[0], g[1], g[2], &P.opts,
                                                            P.tmask),
                      WGML_OK);
            double *rq = th_alloc_d(P.nq), *rk = th_alloc_d(P.nk), *rv = th_alloc_d(P.nk);
            ref_attn_backward(&P.ref, P.qd, P.kd, P.vd, P.doutd, rq, rk, rv);
            for (size_t i = 0; i < P.nk; i++) rv[i] /= 2;
            float *fv = th_read(g[2]);
            snprintf(what, sizeof what, "%s grad_v from lse + ln 2 %s", tag, d);
            th_compare(what, fv, rv, P.nk, BWD_ATOL * max_abs(rv, P.nk) + BWD_FLOOR, BWD_RTOL);
            free(rq); free(rk); free(rv); free(fv);
            for (int t = 0; t < 3; t++) wgml_tensor_release(g[t]);
            wgml_tensor_release(out);
        }
    }
    free(got);
    wgml_tensor_release(lse);
    problem_free(&P);
}

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
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_lse_case(&cases[i], "lse", true);
    setenv("WGML_ATTN_PREFILL", "old", 1);   /* the tiled forward: lse from its statistics pass */
    check_lse_case(&cases[0], "lse old", true);
    check_lse_case(&cases[2], "lse old", false);
    unsetenv("WGML_ATTN_PREFILL");

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

/* One case of options.scores: the forward's output and log-sum-exp against the reference
   with the scores kept (they start poisoned), then every gradient (check_backward runs the
   forward and the backward with the same options; a block the forward did not write makes
   NaN there). */
static void check_scores_case(const acase *c, const char *tag)
{
    problem P;
    problem_init(&P, c, 1.5);
    size_t need = c->b * c->h * ((c->sq + 63) / 64) * ((c->sk + 63) / 64) * 4096;
    wgml_tensor *lse = th_poisoned(WGML_F32, TH_SHAPE(c->b, c->h, c->sq)), *sc = th_poisoned(WGML_F32, TH_SHAPE(need));
    P.opts.lse = lse;
    P.opts.scores = sc;
    check_forward(&P, tag);
    free(check_lse_written(&P, lse, tag));
    check_backward(&P, tag);
    wgml_tensor_release(lse); wgml_tensor_release(sc);
    problem_free(&P);
}

/* options.scores: the forward keeps its scores and bwd_dkdv64 reads them instead of
   computing S, over block edges, GQA, causal offsets, masks, dropout and both head_dim
   classes. Calls without a mask or dropout and head_dim % 4 == 0 run the forward as two
   products (fwd_s_mm, fwd_pv_mm: tiles of 128 against blocks of 64, so odd block counts,
   seq_q != seq_k, tiny and partial head_dim chunks), the rest prefill_lse with WRITE_S;
   the first again with WGML_ATTN_FWDMM=0, and the products' first three with
   WGML_ATTN_PVMU=0 (fwd_pv_mm's row maxima in registers). Then the refusals, with nothing
   recorded. (In
   the blocks64 ctest entry: the other one is near its time limit on lavapipe with an
   empty shader cache.) */
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
    for (size_t i = 0; i < sizeof products / sizeof products[0]; i++) check_scores_case(&products[i], "scores");
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) check_scores_case(&others[i], "scores");
    setenv("WGML_ATTN_FWDMM", "0", 1);
    for (size_t i = 0; i < 4; i++) check_scores_case(&products[i], "scores, prefill_lse");
    unsetenv("WGML_ATTN_FWDMM");
    setenv("WGML_ATTN_PVMU", "0", 1);
    for (size_t i = 0; i < 3; i++) check_scores_case(&products[i], "scores, maxima in registers");
    unsetenv("WGML_ATTN_PVMU");

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
    /* fwd, bwd: whether the forward and the backward refuse it (WGML_ATTN_DKDV concerns the
       backward only; WGML_ATTN_PREFILL and WGML_ATTN_FWDMM the forward, and the statistics
       pass, unused with lse) */
    struct { wgml_tensor *scores, *lse; uint32_t window; const char *env, *val; wgml_status st; const char *needle; bool fwd, bwd; } bad[] = {
        { sc, NULL, 0, NULL, NULL, WGML_ERROR_INVALID_ARGUMENT, "needs options.lse", true, true },
        { sc, lse, 8, NULL, NULL, WGML_ERROR_INVALID_ARGUMENT, "window", true, true },
        { small, lse, 0, NULL, NULL, WGML_ERROR_SHAPE, "it needs at least", true, true },
        { half, lse, 0, NULL, NULL, WGML_ERROR_DTYPE, "scores", true, true },
        { sc, lse, 0, "WGML_ATTN_PREFILL", "old", WGML_ERROR_LIMIT, "prefill", true, false },
        { sc, lse, 0, "WGML_ATTN_FWDMM", "2", WGML_ERROR_INVALID_ARGUMENT, "WGML_ATTN_FWDMM", true, false },
        { sc, lse, 0, "WGML_ATTN_FWDMM", "yes", WGML_ERROR_INVALID_ARGUMENT, "is not 0 or 1", true, false },
        { sc, lse, 0, "WGML_ATTN_PVMU", "on", WGML_ERROR_INVALID_ARGUMENT, "WGML_ATTN_PVMU", true, false },
        { sc, lse, 0, "WGML_ATTN_DKDV", "old", WGML_ERROR_LIMIT, "bwd_dkdv64", false, true },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        wgml_attention_options o = P.opts;
        o.scores = bad[i].scores;
        o.lse = bad[i].lse;
        o.window = bad[i].window;
        if (bad[i].env) setenv(bad[i].env, bad[i].val, 1);
        if (bad[i].fwd) TH_EXPECT_ERR(wgml_flash_attention_v2_with(th_eng, P.tq, P.tk, P.tv, out, &o, NULL), bad[i].st, bad[i].needle);
        if (bad[i].bwd)
            TH_EXPECT_ERR(wgml_flash_attention_v2_backward_with(th_eng, P.tq, P.tk, P.tv, P.tq, P.tdout, g[0], g[1], g[2], &o, NULL),
                          bad[i].st, bad[i].needle);
        if (bad[i].env) unsetenv(bad[i].env);
    }
    TH_CHECK(th_commands() == before, "refused scores recorded commands");
    TH_CHECK(poisoned(out) && poisoned(sc) && poisoned(small) && poisoned(lse), "a refused call wrote a tensor");
    for (int t = 0; t < 3; t++) TH_CHECK(poisoned(g[t]), "a refused backward wrote gradient %d", t);
    wgml_tensor *all[] = { out, lse, g[0], g[1], g[2], sc, small, half };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) wgml_tensor_release(all[i]);
    problem_free(&P);
}

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
    float *big = th_alloc_f(130 * 4);
    memset(big, 0, 130 * 4 * sizeof *big);
    wgml_tensor *q_d130 = th_tensor(WGML_F32, big, TH_SHAPE(1, 2, 1, 130)), *k_d130 = th_tensor(WGML_F32, big, TH_SHAPE(1, 2, 1, 130));
    wgml_tensor *out_d130 = th_poisoned(WGML_F32, TH_SHAPE(1, 2, 1, 130));
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
    TH_EXPECT_ERR(FWD(q_d130, k_d130, k_d130, out_d130, &o, NULL), WGML_ERROR_SHAPE, "head_dim is 130");
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
    TH_CHECK(th_commands() == before, "rejected calls recorded %llu commands", (unsigned long long)(th_commands() - before));
    TH_CHECK(poisoned(out) && poisoned(gq) && poisoned(gk) && poisoned(gv) && poisoned(out_sq5),
             "a rejected call wrote an output");

    /* NULL options mean the defaults; a valid call still works after the refusals */
    TH_EXPECT(FWD(q, k, v, out, NULL, NULL), WGML_OK);
    TH_EXPECT(FWD(q, k, v, out, &o, mask_ok), WGML_OK);

    wgml_tensor *all[] = { q, k, v, dout, fwd_out, out, gq, gk, gv, u32, q3, k_b1, k_h3, k_d6, q_d7, k_d7, v_sk6, out_sq5,
                           mask_ok, mask_badq, mask_badk, mask_3d, mask_u32, q2, q_d130, k_d130, out_d130, mask_full };
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
    { "forced_tiles", test_forced_tiles },
    { "robust_context", test_robust_context },
    { "backward_blocks64", test_backward_blocks64 },
    { "backward_blocks64_scores", test_backward_blocks64_scores },
    { "lse", test_lse },
    { "bad_inputs", test_bad_inputs },
};
TH_MAIN(cases)
