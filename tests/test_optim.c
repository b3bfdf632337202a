/* sgd_update, adamw_update and adamw_update_multi against the double reference of
   torch.optim.AdamW's rule (tests/ref/ref_optim.c), over many steps, and their bad inputs.
   SGD on awkward lengths is a table of op cases; the AdamW runs stay written out, as they
   carry state from step to step and draw gradients of spread magnitudes, not a range. */
#include "harness.h"
#include "ref_optim.h"

#include <stdlib.h>
#include <string.h>

/* |got - ref| <= rtol * scale[i] for every element, where scale is the magnitude of the
   terms that produced the value: the honest bound for results that may cancel. */
static bool compare_scaled(const char *what, const float *got, const double *ref, const double *scale, size_t n, double rtol)
{
    size_t bad = 0, worst = 0;
    double worst_ratio = -1;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - ref[i]), tol = rtol * scale[i] + 1e-38;
        double ratio = isnan(d) ? INFINITY : d / tol;
        if (ratio > worst_ratio) { worst_ratio = ratio; worst = i; }
        if (!(d <= tol)) {
            if (bad < 10) fprintf(stderr, "  %s[%zu]: got %.9g, want %.9g (tol %.3g)\n", what, i, (double)got[i], ref[i], tol);
            bad++;
        }
    }
    TH_CHECK(bad == 0, "%s: %zu of %zu elements out of tolerance; worst [%zu] at %.3g of the tolerance", what, bad, n, worst,
             worst_ratio);
    return bad == 0;
}

static void to_double_f(const float *src, double *dst, size_t n) { th_to_double(src, dst, n); }

/* ---- SGD: the op case table --------------------------------------------------------- */

/* w - lr*g in f32: the product is exact or rounded at |lr*g| * 2^-24 <= 6e-9 (|lr*g| <= 0.1),
   the difference is rounded at 2^-24 of the result: atol 1e-8, rtol 1e-6 cover both. The
   update works in place: the call writes w into the case's output tensor and updates it. */
static const float sgd_lr = 0.1f;

static wgml_status sgd_call(const th_run *r)
{
    wgml_status s = wgml_tensor_write(r->t_out[0], 0, r->in[0], r->n_in[0] * sizeof(float));
    return s != WGML_OK ? s : wgml_sgd_update(th_eng, r->t_out[0], r->t_in[1], sgd_lr);
}

static void sgd_reference(const th_run *r)
{
    to_double_f(TH_IN(r, 0), r->ref[0], r->n_in[0]);
    ref_sgd_step(r->ref[0], TH_IN(r, 1), r->n_in[0], sgd_lr);
}

static void test_sgd_awkward_sizes(void)
{
    for (size_t s = 0; s < th_awkward_count; s++) {
        size_t n = th_awkward_sizes[s];
        th_op_case c = { .nin = 2, .nout = 1, .call = sgd_call, .reference = sgd_reference, .atol = 1e-8, .rtol = 1e-6,
                         .in = { { .shape = { n }, .lo = -1, .hi = 1 }, { .shape = { n }, .lo = -1, .hi = 1 } },
                         .out = { { .shape = { n } } } };
        snprintf(c.name, sizeof c.name, "sgd n=%zu", n);
        th_run_case(&c);
    }
}

/* ---- AdamW -------------------------------------------------------------------------- */

typedef struct adam_state {
    size_t n;
    wgml_tensor *w, *g, *m, *v;
} adam_state;

/* Gradients with a spread of magnitudes (1e-4 .. 1) and signs, as real gradients have. */
static float *random_grad(size_t n)
{
    float *g = th_alloc_f(n);
    for (size_t i = 0; i < n; i++) g[i] = (float)(th_uniform(-1, 1) * pow(10.0, -th_uniform(0, 4)));
    return g;
}

static adam_state adam_make(size_t n, const float *w, const float *m, const float *v)
{
    adam_state s = { .n = n };
    s.w = th_tensor(WGML_F32, w, TH_SHAPE(n));
    s.g = th_poisoned(WGML_F32, TH_SHAPE(n));
    s.m = th_tensor(WGML_F32, m, TH_SHAPE(n));
    s.v = th_tensor(WGML_F32, v, TH_SHAPE(n));
    return s;
}

static void adam_free(adam_state *s)
{
    wgml_tensor_release(s->w); wgml_tensor_release(s->g); wgml_tensor_release(s->m); wgml_tensor_release(s->v);
}

/* The tolerance scales of m and v: the magnitudes of the two terms of each update. */
static void moment_scales(const double *m_prev, const double *v_prev, const float *g, size_t n, double b1, double b2,
                          double *sm, double *sv)
{
    for (size_t i = 0; i < n; i++) {
        sm[i] = b1 * fabs(m_prev[i]) + (1 - b1) * fabs((double)g[i]);
        sv[i] = b2 * v_prev[i] + (1 - b2) * (double)g[i] * g[i];
    }
}

/* Runs steps t0 .. t0+steps-1 on the GPU. After each, the GPU's w, m, v must equal one
   step of the double reference applied to the GPU's own previous state, within 1e-6 of the
   magnitude of the terms (f32 evaluation of the step rounds a few times at 2^-24 each; one
   step has nothing else to go wrong). Returns the double reference run independently from
   the initial state (traj_w) and the sum over the steps of the magnitudes of its terms
   (traj_scale), for the caller to compare trajectories. */
static void adam_run(adam_state *s, const wgml_adam_params *hp, uint32_t t0, int steps, const char *label, double *traj_w,
                     double *traj_scale)
{
    size_t n = s->n;
    double *w = th_alloc_d(n), *m = th_alloc_d(n), *v = th_alloc_d(n), *sw = th_alloc_d(n), *sm = th_alloc_d(n),
           *sv = th_alloc_d(n);
    double *tm = th_alloc_d(n), *tv = th_alloc_d(n), *ts = th_alloc_d(n);
    for (size_t i = 0; i < n; i++) traj_scale[i] = 0;
    float *gw = th_read(s->w), *gm = th_read(s->m), *gv = th_read(s->v);
    to_double_f(gw, traj_w, n); to_double_f(gm, tm, n); to_double_f(gv, tv, n);
    for (int k = 0; k < steps; k++) {
        uint32_t t = t0 + (uint32_t)k;
        float *g = random_grad(n);
        TH_EXPECT(wgml_tensor_write(s->g, 0, g, n * sizeof(float)), WGML_OK);
        to_double_f(gw, w, n); to_double_f(gm, m, n); to_double_f(gv, v, n);
        moment_scales(m, v, g, n, hp->beta1, hp->beta2, sm, sv);
        ref_adamw_step(w, m, v, g, n, hp->lr, hp->beta1, hp->beta2, hp->eps, hp->weight_decay, t, sw);
        ref_adamw_step(traj_w, tm, tv, g, n, hp->lr, hp->beta1, hp->beta2, hp->eps, hp->weight_decay, t, ts);
        for (size_t i = 0; i < n; i++) traj_scale[i] += ts[i];
        wgml_adam_params p = *hp;
        p.t = t;
        TH_EXPECT(wgml_adamw_update(th_eng, s->w, s->g, s->m, s->v, &p), WGML_OK);
        free(gw); free(gm); free(gv);
        gw = th_read(s->w); gm = th_read(s->m); gv = th_read(s->v);
        char what[96];
        bool ok = true;
        snprintf(what, sizeof what, "%s: w after step %u", label, t);
        ok &= compare_scaled(what, gw, w, sw, n, 1e-6);
        snprintf(what, sizeof what, "%s: m after step %u", label, t);
        ok &= compare_scaled(what, gm, m, sm, n, 1e-6);
        snprintf(what, sizeof what, "%s: v after step %u", label, t);
        ok &= compare_scaled(what, gv, v, sv, n, 1e-6);
        free(g);
        if (!ok) break;
    }
    free(gw); free(gm); free(gv);
    free(w); free(m); free(v); free(sw); free(sm); free(sv); free(tm); free(tv); free(ts);
}

static void test_adamw_100_steps(void)
{
    static const size_t sizes[] = { 1, 7, 65, 4097 };
    wgml_adam_params hp = { .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f };
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        size_t n = sizes[si];
        float *w = th_random(n, -1, 1), *zero = calloc(n, sizeof(float));
        adam_state s = adam_make(n, w, zero, zero);
        double *traj = th_alloc_d(n), *traj_scale = th_alloc_d(n);
        char label[64];
        snprintf(label, sizeof label, "adamw n=%zu", n);
        adam_run(&s, &hp, 1, 100, label, traj, traj_scale);
        /* The whole trajectory against the reference run in double from the same start. The
           GPU rounds each step's w three times (decay, update, difference) at 2^-24 of the
           terms, and those errors add up without damping: at most 3 * 2^-24 = 1.8e-7 of the
           terms' magnitudes summed over the steps. Rounding in m and v moves each update by
           about 1e-6 of lr at most: 100 * 1e-6 * lr over the run. */
        float *got = th_read(s.w);
        snprintf(label, sizeof label, "adamw n=%zu, 100-step trajectory", n);
        for (size_t i = 0; i < n; i++) traj_scale[i] = traj_scale[i] + 100 * 1e-6 * hp.lr / 1.8e-7;
        compare_scaled(label, got, traj, traj_scale, n, 1.8e-7);
        free(got); free(traj); free(traj_scale); free(w); free(zero);
        adam_free(&s);
    }
}

/* lr = 0 leaves w bitwise unchanged (and still updates m, v); weight_decay = 0; t = 1
   (bias corrections make the first update lr * g / (|g| + eps)); a large t (corrections
   ~1); beta1 = 0 (no momentum). Each for 3 steps from random moments. */
static void test_adamw_edge_params(void)
{
    static const struct { const char *name; wgml_adam_params p; } cases[] = {
        { "lr=0", { .lr = 0, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f, .t = 5 } },
        { "weight_decay=0", { .lr = 3e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-6f, .weight_decay = 0, .t = 10 } },
        { "t=1", { .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f, .t = 1 } },
        { "t=1e6", { .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f, .t = 1000000 } },
        { "beta1=0", { .lr = 1e-3f, .beta1 = 0, .beta2 = 0.99f, .eps = 1e-3f, .weight_decay = 0.5f, .t = 2 } },
    };
    size_t n = 1000;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        float *w = th_random(n, -2, 2), *m = th_random(n, -0.1, 0.1), *v = th_random(n, 0, 0.01);
        if (cases[c].p.t == 1) { memset(m, 0, n * sizeof(float)); memset(v, 0, n * sizeof(float)); }
        adam_state s = adam_make(n, w, m, v);
        double *traj = th_alloc_d(n), *traj_scale = th_alloc_d(n);
        adam_run(&s, &cases[c].p, cases[c].p.t, 3, cases[c].name, traj, traj_scale);
        if (cases[c].p.lr == 0) {
            float *got = th_read(s.w);
            TH_CHECK(memcmp(got, w, n * sizeof(float)) == 0, "lr = 0 changed w");
            free(got);
        }
        free(traj); free(traj_scale); free(w); free(m); free(v);
        adam_free(&s);
    }
}

/* The update over 2^20 + 3 elements (many workgroups, a partial last vec4), one step. */
static void test_adamw_large(void)
{
    size_t n = (1u << 20) + 3;
    float *w = th_random(n, -1, 1), *m = th_random(n, -0.1, 0.1), *v = th_random(n, 0, 0.01);
    adam_state s = adam_make(n, w, m, v);
    double *traj = th_alloc_d(n), *traj_scale = th_alloc_d(n);
    wgml_adam_params hp = { .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f, .t = 7 };
    adam_run(&s, &hp, 7, 1, "adamw n=2^20+3", traj, traj_scale);
    free(traj); free(traj_scale); free(w); free(m); free(v);
    adam_free(&s);
}

/* adamw_update_multi over parameters of awkward sizes gives bitwise what adamw_update
   gives tensor by tensor, in ceil(count / K) dispatches where K = the parameters one
   dispatch can bind (4 storage buffers each, at most 3). */
static void test_adamw_multi_equals_single(void)
{
    enum { P = 7 };
    static const size_t sizes[P] = { 1, 3, 7, 63, 65, 1000, 4097 };
    wgml_tensor *w[2][P], *g[P], *m[2][P], *v[2][P];
    float *host_w[P];
    for (size_t i = 0; i < P; i++) {
        size_t n = sizes[i];
        host_w[i] = th_random(n, -1, 1);
        float *hm = th_random(n, -0.1, 0.1), *hv = th_random(n, 0, 0.01), *hg = random_grad(n);
        for (int c = 0; c < 2; c++) {
            w[c][i] = th_tensor(WGML_F32, host_w[i], TH_SHAPE(n));
            m[c][i] = th_tensor(WGML_F32, hm, TH_SHAPE(n));
            v[c][i] = th_tensor(WGML_F32, hv, TH_SHAPE(n));
        }
        g[i] = th_tensor(WGML_F32, hg, TH_SHAPE(n));
        free(hm); free(hv); free(hg);
    }
    wgml_adapter_info info;
    wgml_context_info(th_ctx, &info);
    uint32_t k = info.max_storage_buffers_per_stage / 4;
    if (k > 3) k = 3;
    wgml_adam_params hp = { .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f };
    for (uint32_t t = 1; t <= 3; t++) {
        hp.t = t;
        uint64_t before = th_commands();
        TH_EXPECT(wgml_adamw_update_multi(th_eng, w[0], (const wgml_tensor *const *)g, m[0], v[0], P, &hp), WGML_OK);
        uint64_t used = th_commands() - before;
        TH_CHECK(used == (P + k - 1) / k, "adamw_update_multi over %d tensors used %llu dispatches, expected %u", P,
                 (unsigned long long)used, (P + k - 1) / k);
        for (size_t i = 0; i < P; i++) TH_EXPECT(wgml_adamw_update(th_eng, w[1][i], g[i], m[1][i], v[1][i], &hp), WGML_OK);
    }
    for (size_t i = 0; i < P; i++) {
        wgml_tensor *pairs[3][2] = { { w[0][i], w[1][i] }, { m[0][i], m[1][i] }, { v[0][i], v[1][i] } };
        for (int q = 0; q < 3; q++) {
            float *a = th_read(pairs[q][0]), *b = th_read(pairs[q][1]);
            TH_CHECK(memcmp(a, b, sizes[i] * sizeof(float)) == 0, "multi and single differ in %s of parameter %zu (n=%zu)",
                     q == 0 ? "w" : q == 1 ? "m" : "v", i, sizes[i]);
            free(a); free(b);
        }
        float *a = th_read(w[0][i]);
        TH_CHECK(memcmp(a, host_w[i], sizes[i] * sizeof(float)) != 0 || sizes[i] == 0, "parameter %zu was not updated", i);
        free(a);
    }
    for (size_t i = 0; i < P; i++) {
        for (int c = 0; c < 2; c++) { wgml_tensor_release(w[c][i]); wgml_tensor_release(m[c][i]); wgml_tensor_release(v[c][i]); }
        wgml_tensor_release(g[i]);
        free(host_w[i]);
    }
}

/* One multi step against the reference: every slot of every dispatch is the right tensor. */
static void test_adamw_multi_reference(void)
{
    enum { P = 5 };
    static const size_t sizes[P] = { 4097, 1, 333, 8, 70000 };
    wgml_tensor *w[P], *g[P], *m[P], *v[P];
    double *rw[P], *rm[P], *rv[P], *sw[P], *sm[P], *sv[P];
    wgml_adam_params hp = { .lr = 5e-3f, .beta1 = 0.8f, .beta2 = 0.99f, .eps = 1e-7f, .weight_decay = 0.2f, .t = 4 };
    for (size_t i = 0; i < P; i++) {
        size_t n = sizes[i];
        float *hw = th_random(n, -1, 1), *hm = th_random(n, -0.1, 0.1), *hv = th_random(n, 0, 0.01), *hg = random_grad(n);
        w[i] = th_tensor(WGML_F32, hw, TH_SHAPE(n)); m[i] = th_tensor(WGML_F32, hm, TH_SHAPE(n));
        v[i] = th_tensor(WGML_F32, hv, TH_SHAPE(n)); g[i] = th_tensor(WGML_F32, hg, TH_SHAPE(n));
        rw[i] = th_alloc_d(n); rm[i] = th_alloc_d(n); rv[i] = th_alloc_d(n); sw[i] = th_alloc_d(n);
        sm[i] = th_alloc_d(n); sv[i] = th_alloc_d(n);
        to_double_f(hw, rw[i], n); to_double_f(hm, rm[i], n); to_double_f(hv, rv[i], n);
        moment_scales(rm[i], rv[i], hg, n, hp.beta1, hp.beta2, sm[i], sv[i]);
        ref_adamw_step(rw[i], rm[i], rv[i], hg, n, hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay, hp.t, sw[i]);
        free(hw); free(hm); free(hv); free(hg);
    }
    TH_EXPECT(wgml_adamw_update_multi(th_eng, w, (const wgml_tensor *const *)g, m, v, P, &hp), WGML_OK);
    for (size_t i = 0; i < P; i++) {
        float *got = th_read(w[i]), *gm = th_read(m[i]), *gv = th_read(v[i]);
        char what[64];
        snprintf(what, sizeof what, "multi w[%zu] (n=%zu)", i, sizes[i]);
        compare_scaled(what, got, rw[i], sw[i], sizes[i], 1e-6);
        /* m and v within 1e-6 of the magnitudes of their two terms (m's can cancel) */
        snprintf(what, sizeof what, "multi m[%zu]", i);
        compare_scaled(what, gm, rm[i], sm[i], sizes[i], 1e-6);
        snprintf(what, sizeof what, "multi v[%zu]", i);
        compare_scaled(what, gv, rv[i], sv[i], sizes[i], 1e-6);
        free(got); free(gm); free(gv);
        free(rw[i]); free(rm[i]); free(rv[i]); free(sw[i]); free(sm[i]); free(sv[i]);
        wgml_tensor_release(w[i]); wgml_tensor_release(g[i]); wgml_tensor_release(m[i]); wgml_tensor_release(v[i]);
    }
}

/* ---- bad inputs --------------------------------------------------------------------- */

static void test_bad_inputs(void)
{
    float x[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    wgml_tensor *w = th_tensor(WGML_F32, x, TH_SHAPE(8)), *g = th_tensor(WGML_F32, x, TH_SHAPE(8));
    wgml_tensor *m = th_tensor(WGML_F32, x, TH_SHAPE(8)), *v = th_tensor(WGML_F32, x, TH_SHAPE(8));
    wgml_tensor *g7 = th_tensor(WGML_F32, x, TH_SHAPE(7)), *u = th_tensor(WGML_U32, x, TH_SHAPE(8));
    wgml_context *other;
    TH_EXPECT(wgml_context_create(NULL, &other), WGML_OK);
    wgml_tensor *foreign;
    TH_EXPECT(wgml_tensor_from_data(other, WGML_F32, 1, (size_t[]){ 8 }, x, &foreign), WGML_OK);
    const wgml_adam_params ok = { .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f, .t = 1 };
    wgml_adam_params p;
    uint64_t before = th_commands();

    TH_EXPECT_ERR(wgml_sgd_update(NULL, w, g, 0.1f), WGML_ERROR_INVALID_ARGUMENT, "engine is NULL");
    TH_EXPECT_ERR(wgml_sgd_update(th_eng, NULL, g, 0.1f), WGML_ERROR_INVALID_ARGUMENT, "weight is NULL");
    TH_EXPECT_ERR(wgml_sgd_update(th_eng, w, NULL, 0.1f), WGML_ERROR_INVALID_ARGUMENT, "grad is NULL");
    TH_EXPECT_ERR(wgml_sgd_update(th_eng, w, g7, 0.1f), WGML_ERROR_SHAPE, "grad has 7 elements");
    TH_EXPECT_ERR(wgml_sgd_update(th_eng, u, g, 0.1f), WGML_ERROR_DTYPE, "weight is u32");
    TH_EXPECT_ERR(wgml_sgd_update(th_eng, w, u, 0.1f), WGML_ERROR_DTYPE, "grad is u32");
    TH_EXPECT_ERR(wgml_sgd_update(th_eng, w, w, 0.1f), WGML_ERROR_ALIAS, "weight must not be the same tensor as grad");
    TH_EXPECT_ERR(wgml_sgd_update(th_eng, w, foreign, 0.1f), WGML_ERROR_CONTEXT, "grad belongs to another context");
    TH_EXPECT_ERR(wgml_sgd_update(th_eng, w, g, NAN), WGML_ERROR_INVALID_ARGUMENT, "lr is nan");
    TH_EXPECT_ERR(wgml_sgd_update(th_eng, w, g, INFINITY), WGML_ERROR_INVALID_ARGUMENT, "lr is inf");

    TH_EXPECT_ERR(wgml_adamw_update(NULL, w, g, m, v, &ok), WGML_ERROR_INVALID_ARGUMENT, "engine is NULL");
    TH_EXPECT_ERR(wgml_adamw_update(th_eng, NULL, g, m, v, &ok), WGML_ERROR_INVALID_ARGUMENT, "weight is NULL");
    TH_EXPECT_ERR(wgml_adamw_update(th_eng, w, NULL, m, v, &ok), WGML_ERROR_INVALID_ARGUMENT, "grad is NULL");
    TH_EXPECT_ERR(wgml_adamw_update(th_eng, w, g, NULL, v, &ok), WGML_ERROR_INVALID_ARGUMENT, "m is NULL");
    TH_EXPECT_ERR(wgml_adamw_update(th_eng, w, g, m, NULL, &ok), WGML_ERROR_INVALID_ARGUMENT, "v is NULL");
    TH_EXPECT_ERR(wgml_adamw_update(th_eng, w, g, m, v, NULL), WGML_ERROR_INVALID_ARGUMENT, "params is NULL");
    TH_EXPECT_ERR(wgml_adamw_update(th_eng, w, g7, m, v, &ok), WGML_ERROR_SHAPE, "grad has 7 elements");
    TH_EXPECT_ERR(wgml_adamw_update(th_eng, w, g, g7, v, &ok), WGML_ERROR_SHAPE, "m has 7 elements");
    TH_EXPECT_ERR(wgml_adamw_update(th_eng, w, g, m, g7, &ok), WGML_ERROR_SHAPE, "v has 7 elements");
    TH_EXPECT_ERR(wgml_adamw_update(th_eng, w, u, m, v, &ok), WGML_ERROR_DTYPE, "grad is u32");
    TH_EXPECT_ERR(wgml_adamw_update(th_eng, w, g, m, u, &ok), WGML_ERROR_DTYPE, "v is u32");
    TH_EXPECT_ERR(wgml_adamw_update(th_eng, w, g, foreign, v, &ok), WGML_ERROR_CONTEXT, "m belongs to another context");
    TH_EXPECT_ERR(wgml_adamw_update(th_eng, w, g, m, m, &ok), WGML_ERROR_ALIAS, "v must not be the same tensor as m");
    TH_EXPECT_ERR(wgml_adamw_update(th_eng, w, g, w, v, &ok), WGML_ERROR_ALIAS, "m must not be the same tensor as weight");
    TH_EXPECT_ERR(wgml_adamw_update(th_eng, w, w, m, v, &ok), WGML_ERROR_ALIAS, "weight must not be the same tensor as grad");
    TH_EXPECT_ERR(wgml_adamw_update(th_eng, w, g, m, g, &ok), WGML_ERROR_ALIAS, "v must not be the same tensor as grad");
    p = ok; p.t = 0;
    TH_EXPECT_ERR(wgml_adamw_update(th_eng, w, g, m, v, &p), WGML_ERROR_INVALID_ARGUMENT, "params->t is 0");
    p = ok; p.lr = NAN;
    TH_EXPECT_ERR(wgml_adamw_update(th_eng, w, g, m, v, &p), WGML_ERROR_INVALID_ARGUMENT, "params->lr is nan");
    p = ok; p.lr = -1e-3f;
    TH_EXPECT_ERR(wgml_adamw_update(th_eng, w, g, m, v, &p), WGML_ERROR_INVALID_ARGUMENT, "params->lr is -0.001");
    p = ok; p.beta1 = 1;
    TH_EXPECT_ERR(wgml_adamw_update(th_eng, w, g, m, v, &p), WGML_ERROR_INVALID_ARGUMENT, "params->beta1 is 1");
    p = ok; p.beta2 = NAN;
    TH_EXPECT_ERR(wgml_adamw_update(th_eng, w, g, m, v, &p), WGML_ERROR_INVALID_ARGUMENT, "params->beta2 is nan");
    p = ok; p.eps = -1;
    TH_EXPECT_ERR(wgml_adamw_update(th_eng, w, g, m, v, &p), WGML_ERROR_INVALID_ARGUMENT, "params->eps is -1");
    p = ok; p.weight_decay = INFINITY;
    TH_EXPECT_ERR(wgml_adamw_update(th_eng, w, g, m, v, &p), WGML_ERROR_INVALID_ARGUMENT, "params->weight_decay is inf");

    wgml_tensor *ws[2] = { w, m }, *ms[2] = { v, g7 }, *vs[2] = { g, u };
    const wgml_tensor *gs[2] = { g7, w };
    wgml_tensor *w1[1] = { w }, *m1[1] = { m }, *v1[1] = { v }, *null1[1] = { NULL };
    const wgml_tensor *g1[1] = { g };
    TH_EXPECT_ERR(wgml_adamw_update_multi(NULL, w1, g1, m1, v1, 1, &ok), WGML_ERROR_INVALID_ARGUMENT, "engine is NULL");
    TH_EXPECT_ERR(wgml_adamw_update_multi(th_eng, NULL, g1, m1, v1, 1, &ok), WGML_ERROR_INVALID_ARGUMENT, "weights is NULL");
    TH_EXPECT_ERR(wgml_adamw_update_multi(th_eng, w1, NULL, m1, v1, 1, &ok), WGML_ERROR_INVALID_ARGUMENT, "grads is NULL");
    TH_EXPECT_ERR(wgml_adamw_update_multi(th_eng, w1, g1, NULL, v1, 1, &ok), WGML_ERROR_INVALID_ARGUMENT, "m is NULL");
    TH_EXPECT_ERR(wgml_adamw_update_multi(th_eng, w1, g1, m1, NULL, 1, &ok), WGML_ERROR_INVALID_ARGUMENT, "v is NULL");
    TH_EXPECT_ERR(wgml_adamw_update_multi(th_eng, w1, g1, m1, v1, 0, &ok), WGML_ERROR_INVALID_ARGUMENT, "count is 0");
    TH_EXPECT_ERR(wgml_adamw_update_multi(th_eng, w1, g1, m1, v1, 1, NULL), WGML_ERROR_INVALID_ARGUMENT, "params is NULL");
    TH_EXPECT_ERR(wgml_adamw_update_multi(th_eng, null1, g1, m1, v1, 1, &ok), WGML_ERROR_INVALID_ARGUMENT, "weights[0] is NULL");
    TH_EXPECT_ERR(wgml_adamw_update_multi(th_eng, w1, g1, m1, null1, 1, &ok), WGML_ERROR_INVALID_ARGUMENT, "v[0] is NULL");
    TH_EXPECT_ERR(wgml_adamw_update_multi(th_eng, ws, gs, ms, vs, 2, &ok), WGML_ERROR_SHAPE, "grads[0] has 7 elements");
    p = ok; p.t = 0;
    TH_EXPECT_ERR(wgml_adamw_update_multi(th_eng, w1, g1, m1, v1, 1, &p), WGML_ERROR_INVALID_ARGUMENT, "params->t is 0");
    p = ok; p.lr = NAN;
    TH_EXPECT_ERR(wgml_adamw_update_multi(th_eng, w1, g1, m1, v1, 1, &p), WGML_ERROR_INVALID_ARGUMENT, "params->lr is nan");
    {
        /* the second parameter's m is the first parameter's weight; a shared grad is fine
           elsewhere, but a grad that is also an updated tensor is not */
        wgml_tensor *w8 = th_tensor(WGML_F32, x, TH_SHAPE(8)), *m8 = th_tensor(WGML_F32, x, TH_SHAPE(8));
        wgml_tensor *v8 = th_tensor(WGML_F32, x, TH_SHAPE(8));
        wgml_tensor *a_w[2] = { w, w8 }, *a_m[2] = { m, w }, *a_v[2] = { v, v8 };
        const wgml_tensor *a_g[2] = { g, g };
        TH_EXPECT_ERR(wgml_adamw_update_multi(th_eng, a_w, a_g, a_m, a_v, 2, &ok), WGML_ERROR_ALIAS,
                      "m[1] must not be the same tensor as weights[0]");
        wgml_tensor *b_m[2] = { m, m8 }, *b_v[2] = { v, v };
        TH_EXPECT_ERR(wgml_adamw_update_multi(th_eng, a_w, a_g, b_m, b_v, 2, &ok), WGML_ERROR_ALIAS,
                      "v[1] must not be the same tensor as v[0]");
        const wgml_tensor *c_g[2] = { g, v8 };
        TH_EXPECT_ERR(wgml_adamw_update_multi(th_eng, a_w, c_g, b_m, a_v, 2, &ok), WGML_ERROR_ALIAS,
                      "must not be the same tensor as");
        TH_EXPECT_ERR(wgml_adamw_update_multi(th_eng, w1, (const wgml_tensor *const *)v1, m1, v1, 1, &ok), WGML_ERROR_ALIAS,
                      "must not be the same tensor as");
        TH_CHECK(th_commands() == before, "rejected calls recorded %llu commands", (unsigned long long)(th_commands() - before));
        wgml_tensor *untouched[5] = { w, m, v, w8, m8 };
        for (int i = 0; i < 5; i++) {
            float got[8];
            th_read_into(untouched[i], got);
            TH_CHECK(memcmp(got, x, sizeof x) == 0, "a rejected call changed tensor %d", i);
        }
        /* a gradient shared by two parameters is allowed (it is only read) */
        TH_EXPECT(wgml_adamw_update_multi(th_eng, a_w, a_g, b_m, a_v, 2, &ok), WGML_OK);
        wgml_tensor_release(w8); wgml_tensor_release(m8); wgml_tensor_release(v8);
    }
    wgml_tensor_release(foreign);
    wgml_context_destroy(other);
    wgml_tensor_release(w); wgml_tensor_release(g); wgml_tensor_release(m); wgml_tensor_release(v);
    wgml_tensor_release(g7); wgml_tensor_release(u);
}

static const th_case cases[] = {
    { "sgd_awkward_sizes", test_sgd_awkward_sizes },
    { "adamw_100_steps", test_adamw_100_steps },
    { "adamw_edge_params", test_adamw_edge_params },
    { "adamw_large", test_adamw_large },
    { "adamw_multi_equals_single", test_adamw_multi_equals_single },
    { "adamw_multi_reference", test_adamw_multi_reference },
    { "bad_inputs", test_bad_inputs },
};
TH_MAIN(cases)
