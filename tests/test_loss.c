/* mse_loss, mse_loss_backward, cross_entropy_loss, cross_entropy_backward and
   cross_entropy_batched against the double reference (tests/ref/ref_loss.c) and central
   finite differences, with extreme logits, ignored and invalid rows, V = 1, in place, and
   their bad inputs. */
#include "harness.h"
#include "ref_loss.h"

#include <stdlib.h>
#include <string.h>

#define IGNORE 0xFFFFFF9Cu   /* -100 as u32, PyTorch's default ignore_index */

/* ---- MSE ---------------------------------------------------------------------------- */

/* One subtraction (correctly rounded: 2^-24 relative), a square and a halving: rtol 1e-6;
   atol for squares that underflow f32. */
#define MSE_RTOL 1e-6
#define MSE_ATOL 1e-37

typedef wgml_status (*pair_fn)(wgml_engine *, const wgml_tensor *, const wgml_tensor *, wgml_tensor *);
typedef void (*pair_ref)(const float *, const float *, double *, size_t);
static const struct { const char *name; pair_fn fn; pair_ref ref; } mse_ops[] = {
    { "mse_loss", wgml_mse_loss, ref_mse },
    { "mse_loss_backward", wgml_mse_loss_backward, ref_mse_backward },
};

static void test_mse_awkward_sizes(void)
{
    for (size_t o = 0; o < 2; o++)
        for (size_t s = 0; s < th_awkward_count; s++) {
            size_t n = th_awkward_sizes[s];
            float *p = th_random(n, -10, 10), *t = th_random(n, -10, 10);
            double *ref = th_alloc_d(n);
            mse_ops[o].ref(p, t, ref, n);
            wgml_tensor *tp = th_tensor(WGML_F32, p, TH_SHAPE(n)), *tt = th_tensor(WGML_F32, t, TH_SHAPE(n));
            wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(n));
            TH_EXPECT(mse_ops[o].fn(th_eng, tp, tt, out), WGML_OK);
            float *got = th_read(out);
            char what[64];
            snprintf(what, sizeof what, "%s n=%zu", mse_ops[o].name, n);
            th_compare(what, got, ref, n, MSE_ATOL, MSE_RTOL);
            free(p); free(t); free(ref); free(got);
            wgml_tensor_release(tp); wgml_tensor_release(tt); wgml_tensor_release(out);
        }
}

/* out aliasing pred, target, both; pred == target with a separate out. */
static void test_mse_in_place(void)
{
    size_t n = 1001;
    for (size_t o = 0; o < 2; o++)
        for (int mode = 0; mode < 4; mode++) {
            float *p = th_random(n, -4, 4), *t = th_random(n, -4, 4);
            double *ref = th_alloc_d(n);
            wgml_tensor *tp = th_tensor(WGML_F32, p, TH_SHAPE(n)), *tt = th_tensor(WGML_F32, t, TH_SHAPE(7, 11, 13));
            wgml_tensor *out;
            if (mode == 0) { mse_ops[o].ref(p, t, ref, n); out = tp; TH_EXPECT(mse_ops[o].fn(th_eng, tp, tt, tp), WGML_OK); }
            else if (mode == 1) { mse_ops[o].ref(p, t, ref, n); out = tt; TH_EXPECT(mse_ops[o].fn(th_eng, tp, tt, tt), WGML_OK); }
            else if (mode == 2) { mse_ops[o].ref(p, p, ref, n); out = tp; TH_EXPECT(mse_ops[o].fn(th_eng, tp, tp, tp), WGML_OK); }
            else {
                mse_ops[o].ref(p, p, ref, n);
                out = th_poisoned(WGML_F32, TH_SHAPE(n));
                TH_EXPECT(mse_ops[o].fn(th_eng, tp, tp, out), WGML_OK);
            }
            float *got = th_read(out);
            char what[64];
            snprintf(what, sizeof what, "%s in place, mode %d", mse_ops[o].name, mode);
            th_compare(what, got, ref, n, MSE_ATOL, MSE_RTOL);
            if (mode == 3) wgml_tensor_release(out);
            free(p); free(t); free(ref); free(got);
            wgml_tensor_release(tp); wgml_tensor_release(tt);
        }
}

/* mse_loss_backward is the derivative of sum(mse_loss) w.r.t. pred: central differences of
   the forward in double (exact for a quadratic up to rounding, ~1e-12 here). */
static void test_mse_backward_finite_differences(void)
{
    size_t n = 65;
    float *p = th_random(n, -3, 3), *t = th_random(n, -3, 3);
    double *fd = th_alloc_d(n);
    for (size_t i = 0; i < n; i++) {
        double h = 1e-4, hi = (double)p[i] + h, lo = (double)p[i] - h;
        fd[i] = (0.5 * (hi - t[i]) * (hi - t[i]) - 0.5 * (lo - t[i]) * (lo - t[i])) / (2 * h);
    }
    wgml_tensor *tp = th_tensor(WGML_F32, p, TH_SHAPE(n)), *tt = th_tensor(WGML_F32, t, TH_SHAPE(n));
    wgml_tensor *g = th_poisoned(WGML_F32, TH_SHAPE(n));
    TH_EXPECT(wgml_mse_loss_backward(th_eng, tp, tt, g), WGML_OK);
    float *got = th_read(g);
    th_compare("mse_loss_backward vs finite differences", got, fd, n, 1e-9, 1e-6);
    free(p); free(t); free(fd); free(got);
    wgml_tensor_release(tp); wgml_tensor_release(tt); wgml_tensor_release(g);
}

/* ---- cross-entropy: shared pieces ----------------------------------------------------- */

/* Tolerances, for f32 on the GPU against double:
   - loss = (m - x[t]) + log(s): m - x[t] is exact or one rounding of a value <= 2e4
     (2^-24 relative); log(s) carries the relative error of s, a sum of up to 2^18 terms
     in a fixed tree of depth ~20 plus a serial run of <= 64 per thread, each term an exp
     accurate to a few ulp: < 1e-5 absolute. So atol 1e-5, rtol 1e-5.
   - gradient = (p - onehot) / count: p = exp((x - m) - log s) inherits the 1e-5 absolute
     error of log s as relative error, and the one-hot subtraction cancels at the target:
     atol 1e-5 / count, rtol 1e-5. */
#define CE_ATOL 1e-5
#define CE_RTOL 1e-5

static double *promote(const float *x, size_t n)
{
    double *d = th_alloc_d(n);
    th_to_double(x, d, n);
    return d;
}

/* Logit generators. */
enum { LOGITS_NORMAL, LOGITS_HUGE, LOGITS_NEAR_1E4 };
static float *make_logits(size_t n, int kind)
{
    switch (kind) {
    case LOGITS_HUGE: return th_random(n, -1e4, 1e4);            /* softmax one-hot, losses up to 2e4 */
    case LOGITS_NEAR_1E4: {                                      /* all ~1e4: precision test */
        float *x = th_alloc_f(n);
        for (size_t i = 0; i < n; i++) x[i] = (float)(1e4 + th_uniform(-3, 3));
        return x;
    }
    default: return th_random(n, -8, 8);
    }
}

static uint32_t *make_targets(size_t n, size_t v, double p_ignore)
{
    uint32_t *t = malloc(n * sizeof *t);
    for (size_t r = 0; r < n; r++) t[r] = th_uniform(0, 1) < p_ignore ? IGNORE : th_rand_u32() % (uint32_t)v;
    if (n >= 2) { t[0] = 0; t[n - 1] = (uint32_t)v - 1; }   /* both ends of the row */
    return t;
}

/* Runs the batched op with every output and checks losses, mean and gradient. */
static void check_batched(size_t n, size_t v, const float *x, const uint32_t *tg, const char *label, bool in_place)
{
    double *xd = promote(x, n * v), *ref_l = th_alloc_d(n), *ref_g = th_alloc_d(n * v), ref_mean;
    ref_cross_entropy(xd, tg, n, v, IGNORE, ref_l, &ref_mean, ref_g);
    size_t count = 0;
    for (size_t r = 0; r < n; r++) count += tg[r] != IGNORE && tg[r] < v;
    double scale = count ? 1.0 / (double)count : 1.0;

    wgml_tensor *tx = th_tensor(WGML_F32, x, TH_SHAPE(n, v)), *tt = th_tensor(WGML_U32, tg, TH_SHAPE(n));
    wgml_tensor *tl = th_poisoned(WGML_F32, TH_SHAPE(n)), *tm = th_poisoned(WGML_F32, TH_SHAPE(1));
    wgml_tensor *tgr = in_place ? tx : th_poisoned(WGML_F32, TH_SHAPE(n, v));
    TH_EXPECT(wgml_cross_entropy_batched(th_eng, tx, tt, IGNORE, tl, tm, tgr), WGML_OK);
    float *gl = th_read(tl), *gm = th_read(tm), *gg = th_read(tgr);
    char what[128];
    snprintf(what, sizeof what, "%s: losses", label);
    th_compare(what, gl, ref_l, n, CE_ATOL, CE_RTOL);
    snprintf(what, sizeof what, "%s: mean", label);
    th_compare(what, gm, &ref_mean, 1, CE_ATOL, CE_RTOL);
    snprintf(what, sizeof what, "%s: grad%s", label, in_place ? " (in place)" : "");
    th_compare(what, gg, ref_g, n * v, CE_ATOL * scale, CE_RTOL);
    free(xd); free(ref_l); free(ref_g); free(gl); free(gm); free(gg);
    wgml_tensor_release(tx); wgml_tensor_release(tt); wgml_tensor_release(tl); wgml_tensor_release(tm);
    if (!in_place) wgml_tensor_release(tgr);
}

/* ---- cross-entropy: single vector ----------------------------------------------------- */

static void test_ce_single(void)
{
    static const size_t sizes[] = { 1, 3, 7, 63, 65, 1000, 4097, 8192, 8193, 20001, 262144 };
    for (int kind = 0; kind < 3; kind++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            size_t v = sizes[s];
            float *x = make_logits(v, kind);
            uint32_t target = th_rand_u32() % (uint32_t)v;
            double *xd = promote(x, v), *ref_g = th_alloc_d(v), ref_loss;
            ref_cross_entropy(xd, &target, 1, v, IGNORE, &ref_loss, NULL, ref_g);
            wgml_tensor *tx = th_tensor(WGML_F32, x, TH_SHAPE(v)), *tl = th_poisoned(WGML_F32, TH_SHAPE(1));
            wgml_tensor *tg = th_poisoned(WGML_F32, TH_SHAPE(v));
            TH_EXPECT(wgml_cross_entropy_loss(th_eng, tx, target, tl), WGML_OK);
            TH_EXPECT(wgml_cross_entropy_backward(th_eng, tx, target, tg), WGML_OK);
            float *gl = th_read(tl), *gg = th_read(tg);
            char what[96];
            snprintf(what, sizeof what, "cross_entropy_loss V=%zu logits kind %d", v, kind);
            th_compare(what, gl, &ref_loss, 1, CE_ATOL, CE_RTOL);
            snprintf(what, sizeof what, "cross_entropy_backward V=%zu logits kind %d", v, kind);
            th_compare(what, gg, ref_g, v, CE_ATOL, CE_RTOL);
            /* in place: the gradient overwrites the logits */
            TH_EXPECT(wgml_cross_entropy_backward(th_eng, tx, target, tx), WGML_OK);
            float *gi = th_read(tx);
            snprintf(what, sizeof what, "cross_entropy_backward in place V=%zu kind %d", v, kind);
            th_compare(what, gi, ref_g, v, CE_ATOL, CE_RTOL);
            free(x); free(xd); free(ref_g); free(gl); free(gg); free(gi);
            wgml_tensor_release(tx); wgml_tensor_release(tl); wgml_tensor_release(tg);
        }
}

/* A loss_out longer than 1: element 0 is written, the rest untouched. */
static void test_ce_single_writes_element_0(void)
{
    float x[5] = { 1, 2, 3, 4, 5 };
    wgml_tensor *tx = th_tensor(WGML_F32, x, TH_SHAPE(5)), *tl = th_poisoned(WGML_F32, TH_SHAPE(3));
    TH_EXPECT(wgml_cross_entropy_loss(th_eng, tx, 2, tl), WGML_OK);
    uint32_t got[3];
    th_read_into(tl, got);
    float l0;
    memcpy(&l0, &got[0], 4);
    double xd[5] = { 1, 2, 3, 4, 5 }, ref;
    uint32_t t = 2;
    ref_cross_entropy(xd, &t, 1, 5, IGNORE, &ref, NULL, NULL);
    th_compare("loss_out[0]", &l0, &ref, 1, CE_ATOL, CE_RTOL);
    TH_CHECK(got[1] == 0xFFFFFFFFu && got[2] == 0xFFFFFFFFu, "loss_out[1..2] were written");
    wgml_tensor_release(tx); wgml_tensor_release(tl);
}

/* ---- cross-entropy: batched ----------------------------------------------------------- */

static void test_ce_batched_shapes(void)
{
    static const struct { size_t n, v; } shapes[] = {
        { 1, 1 }, { 3, 7 }, { 5, 8 }, { 17, 1000 }, { 64, 4097 }, { 4, 16388 }, { 3, 20001 }, { 300, 65 }, { 1, 262144 },
        { 1000, 3 },
    };
    for (int kind = 0; kind < 3; kind++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            size_t n = shapes[s].n, v = shapes[s].v;
            float *x = make_logits(n * v, kind);
            uint32_t *tg = make_targets(n, v, 0.2);
            char label[96];
            snprintf(label, sizeof label, "batched [%zu, %zu] kind %d", n, v, kind);
            check_batched(n, v, x, tg, label, false);
            snprintf(label, sizeof label, "batched [%zu, %zu] kind %d", n, v, kind);
            check_batched(n, v, x, tg, label, true);
            free(x); free(tg);
        }
}

/* More (row, chunk) workgroups than one grid dimension holds: a 2-D grid. */
static void test_ce_batched_2d_grid(void)
{
    size_t n = 66000, v = 2;
    float *x = make_logits(n * v, LOGITS_NORMAL);
    uint32_t *tg = make_targets(n, v, 0.1);
    check_batched(n, v, x, tg, "batched [66000, 2]", false);
    free(x); free(tg);
}

/* Logits [2, 3, 12]: rows are the last dimension. */
static void test_ce_batched_3d(void)
{
    size_t n = 6, v = 12;
    float *x = make_logits(n * v, LOGITS_NORMAL);
    uint32_t *tg = make_targets(n, v, 0);
    double *xd = promote(x, n * v), *ref_l = th_alloc_d(n), ref_mean;
    ref_cross_entropy(xd, tg, n, v, IGNORE, ref_l, &ref_mean, NULL);
    wgml_tensor *tx = th_tensor(WGML_F32, x, TH_SHAPE(2, 3, 12)), *tt = th_tensor(WGML_U32, tg, TH_SHAPE(2, 3));
    wgml_tensor *tl = th_poisoned(WGML_F32, TH_SHAPE(2, 3));
    TH_EXPECT(wgml_cross_entropy_batched(th_eng, tx, tt, IGNORE, tl, NULL, NULL), WGML_OK);
    float *gl = th_read(tl);
    th_compare("batched [2, 3, 12] losses", gl, ref_l, n, CE_ATOL, CE_RTOL);
    free(x); free(tg); free(xd); free(ref_l); free(gl);
    wgml_tensor_release(tx); wgml_tensor_release(tt); wgml_tensor_release(tl);
}

/* The gradient is d mean / d logits: central differences of the double forward (h = 1e-4
   gives truncation error ~1e-9 and rounding error ~1e-12 for these logits). */
static void test_ce_finite_differences(void)
{
    static const struct { size_t n, v; } shapes[] = { { 1, 1 }, { 4, 7 }, { 3, 16 }, { 2, 33 } };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        size_t n = shapes[s].n, v = shapes[s].v, nv = n * v;
        float *x = make_logits(nv, LOGITS_NORMAL);
        uint32_t *tg = make_targets(n, v, 0);
        if (n > 2) tg[1] = IGNORE;   /* an ignored row: its gradient is 0, the count is n - 1 */
        double *xd = promote(x, nv), *fd = th_alloc_d(nv);
        for (size_t i = 0; i < nv; i++) {
            double keep = xd[i], hi, lo, h = 1e-4;
            xd[i] = keep + h;
            ref_cross_entropy(xd, tg, n, v, IGNORE, NULL, &hi, NULL);
            xd[i] = keep - h;
            ref_cross_entropy(xd, tg, n, v, IGNORE, NULL, &lo, NULL);
            xd[i] = keep;
            fd[i] = (hi - lo) / (2 * h);
        }
        wgml_tensor *tx = th_tensor(WGML_F32, x, TH_SHAPE(n, v)), *tt = th_tensor(WGML_U32, tg, TH_SHAPE(n));
        wgml_tensor *tgr = th_poisoned(WGML_F32, TH_SHAPE(n, v));
        TH_EXPECT(wgml_cross_entropy_batched(th_eng, tx, tt, IGNORE, NULL, NULL, tgr), WGML_OK);
        float *gg = th_read(tgr);
        char what[96];
        snprintf(what, sizeof what, "batched grad [%zu, %zu] vs finite differences", n, v);
        th_compare(what, gg, fd, nv, CE_ATOL, CE_RTOL);
        if (n == 1) {   /* the single-vector backward too */
            wgml_tensor *g1 = th_poisoned(WGML_F32, TH_SHAPE(v));
            TH_EXPECT(wgml_cross_entropy_backward(th_eng, tx, tg[0], g1), WGML_OK);
            float *g1h = th_read(g1);
            th_compare("cross_entropy_backward vs finite differences", g1h, fd, v, CE_ATOL, CE_RTOL);
            free(g1h);
            wgml_tensor_release(g1);
        }
        free(x); free(tg); free(xd); free(fd); free(gg);
        wgml_tensor_release(tx); wgml_tensor_release(tt); wgml_tensor_release(tgr);
    }
}

/* Every row ignored: losses 0, mean 0, gradient 0. An ignore_index inside [0, V) ignores
   rows whose target is that class (PyTorch's rule). */
static void test_ce_ignored_rows(void)
{
    size_t n = 9, v = 40;
    float *x = make_logits(n * v, LOGITS_NORMAL);
    uint32_t tg[9];
    for (size_t r = 0; r < n; r++) tg[r] = IGNORE;
    check_batched(n, v, x, tg, "all rows ignored", false);

    for (size_t r = 0; r < n; r++) tg[r] = (uint32_t)(r % 3);   /* class 0 is ignore_index below */
    double *xd = promote(x, n * v), *ref_l = th_alloc_d(n), *ref_g = th_alloc_d(n * v), ref_mean;
    ref_cross_entropy(xd, tg, n, v, 0, ref_l, &ref_mean, ref_g);
    wgml_tensor *tx = th_tensor(WGML_F32, x, TH_SHAPE(n, v)), *tt = th_tensor(WGML_U32, tg, TH_SHAPE(n));
    wgml_tensor *tl = th_poisoned(WGML_F32, TH_SHAPE(n)), *tm = th_poisoned(WGML_F32, TH_SHAPE(1));
    wgml_tensor *tgr = th_poisoned(WGML_F32, TH_SHAPE(n, v));
    TH_EXPECT(wgml_cross_entropy_batched(th_eng, tx, tt, 0, tl, tm, tgr), WGML_OK);
    float *gl = th_read(tl), *gm = th_read(tm), *gg = th_read(tgr);
    th_compare("ignore_index 0: losses", gl, ref_l, n, CE_ATOL, CE_RTOL);
    th_compare("ignore_index 0: mean", gm, &ref_mean, 1, CE_ATOL, CE_RTOL);
    th_compare("ignore_index 0: grad", gg, ref_g, n * v, CE_ATOL / 6, CE_RTOL);
    for (size_t r = 0; r < n; r += 3) TH_CHECK(gl[r] == 0.0f, "ignored row %zu has loss %g", r, (double)gl[r]);
    free(x); free(xd); free(ref_l); free(ref_g); free(gl); free(gm); free(gg);
    wgml_tensor_release(tx); wgml_tensor_release(tt); wgml_tensor_release(tl); wgml_tensor_release(tm);
    wgml_tensor_release(tgr);
}

/* A target >= V that is not ignore_index (the host cannot see device data): that row's
   loss is NaN, mean_loss is NaN, its gradient row is zero and it is not counted, so the
   other rows' gradients are exactly those of the valid rows alone. */
static void test_ce_invalid_target(void)
{
    size_t n = 6, v = 33;
    float *x = make_logits(n * v, LOGITS_NORMAL);
    uint32_t tg[6] = { 3, 40, 0, IGNORE, 32, 33 };   /* rows 1 and 5 are invalid */
    check_batched(n, v, x, tg, "invalid targets", false);
    wgml_tensor *tx = th_tensor(WGML_F32, x, TH_SHAPE(n, v)), *tt = th_tensor(WGML_U32, tg, TH_SHAPE(n));
    wgml_tensor *tl = th_poisoned(WGML_F32, TH_SHAPE(n)), *tm = th_poisoned(WGML_F32, TH_SHAPE(1));
    wgml_tensor *tgr = th_poisoned(WGML_F32, TH_SHAPE(n, v));
    TH_EXPECT(wgml_cross_entropy_batched(th_eng, tx, tt, IGNORE, tl, tm, tgr), WGML_OK);
    float *gl = th_read(tl), *gm = th_read(tm), *gg = th_read(tgr);
    TH_CHECK(isnan(gl[1]) && isnan(gl[5]), "invalid rows' losses are %g, %g; expected NaN", (double)gl[1], (double)gl[5]);
    TH_CHECK(isfinite(gl[0]) && isfinite(gl[2]) && gl[3] == 0.0f && isfinite(gl[4]), "valid rows' losses are not finite");
    TH_CHECK(isnan(gm[0]), "mean_loss is %g with invalid rows; expected NaN", (double)gm[0]);
    bool zero = true;
    for (size_t i = 0; i < v; i++) zero &= gg[1 * v + i] == 0.0f && gg[5 * v + i] == 0.0f;
    TH_CHECK(zero, "invalid rows have a nonzero gradient");
    /* the valid rows' gradients equal those of a batch without the invalid rows */
    float x3[3 * 33];
    uint32_t t3[3] = { 3, 0, 32 };
    memcpy(x3, x, 33 * 4); memcpy(x3 + 33, x + 2 * 33, 33 * 4); memcpy(x3 + 66, x + 4 * 33, 33 * 4);
    double *xd3 = promote(x3, 99), *ref_g3 = th_alloc_d(99);
    ref_cross_entropy(xd3, t3, 3, v, IGNORE, NULL, NULL, ref_g3);
    float got3[99];
    memcpy(got3, gg, 33 * 4); memcpy(got3 + 33, gg + 2 * 33, 33 * 4); memcpy(got3 + 66, gg + 4 * 33, 33 * 4);
    th_compare("valid rows' gradient next to invalid rows", got3, ref_g3, 99, CE_ATOL / 3, CE_RTOL);
    free(x); free(gl); free(gm); free(gg); free(xd3); free(ref_g3);
    wgml_tensor_release(tx); wgml_tensor_release(tt); wgml_tensor_release(tl); wgml_tensor_release(tm);
    wgml_tensor_release(tgr);
}

/* Each output alone, and two runs bitwise equal (every reduction has a fixed order). */
static void test_ce_outputs_and_determinism(void)
{
    size_t n = 37, v = 9000;
    float *x = make_logits(n * v, LOGITS_NORMAL);
    uint32_t *tg = make_targets(n, v, 0.3);
    double *xd = promote(x, n * v), *ref_l = th_alloc_d(n), *ref_g = th_alloc_d(n * v), ref_mean;
    ref_cross_entropy(xd, tg, n, v, IGNORE, ref_l, &ref_mean, ref_g);
    size_t count = 0;
    for (size_t r = 0; r < n; r++) count += tg[r] != IGNORE;
    wgml_tensor *tx = th_tensor(WGML_F32, x, TH_SHAPE(n, v)), *tt = th_tensor(WGML_U32, tg, TH_SHAPE(n));
    wgml_tensor *tl = th_poisoned(WGML_F32, TH_SHAPE(n)), *tm = th_poisoned(WGML_F32, TH_SHAPE(1));
    wgml_tensor *tgr = th_poisoned(WGML_F32, TH_SHAPE(n, v));
    TH_EXPECT(wgml_cross_entropy_batched(th_eng, tx, tt, IGNORE, tl, NULL, NULL), WGML_OK);
    TH_EXPECT(wgml_cross_entropy_batched(th_eng, tx, tt, IGNORE, NULL, tm, NULL), WGML_OK);
    TH_EXPECT(wgml_cross_entropy_batched(th_eng, tx, tt, IGNORE, NULL, NULL, tgr), WGML_OK);
    float *l1 = th_read(tl), *m1 = th_read(tm), *g1 = th_read(tgr);
    th_compare("losses alone", l1, ref_l, n, CE_ATOL, CE_RTOL);
    th_compare("mean alone", m1, &ref_mean, 1, CE_ATOL, CE_RTOL);
    th_compare("grad alone", g1, ref_g, n * v, CE_ATOL / (double)count, CE_RTOL);
    TH_EXPECT(wgml_cross_entropy_batched(th_eng, tx, tt, IGNORE, tl, tm, tgr), WGML_OK);
    float *l2 = th_read(tl), *m2 = th_read(tm), *g2 = th_read(tgr);
    TH_CHECK(memcmp(l1, l2, n * 4) == 0 && memcmp(m1, m2, 4) == 0 && memcmp(g1, g2, n * v * 4) == 0,
             "two runs of the batched cross-entropy differ");
    free(x); free(tg); free(xd); free(ref_l); free(ref_g); free(l1); free(m1); free(g1); free(l2); free(m2); free(g2);
    wgml_tensor_release(tx); wgml_tensor_release(tt); wgml_tensor_release(tl); wgml_tensor_release(tm);
    wgml_tensor_release(tgr);
}

/* ---- bad inputs --------------------------------------------------------------------- */

static void test_bad_inputs(void)
{
    float x[24] = { 0 };
    uint32_t t4[4] = { 0, 1, 2, 3 };
    wgml_tensor *lg = th_tensor(WGML_F32, x, TH_SHAPE(4, 6)), *tg = th_tensor(WGML_U32, t4, TH_SHAPE(4));
    wgml_tensor *t3 = th_tensor(WGML_U32, t4, TH_SHAPE(3)), *tf = th_tensor(WGML_F32, x, TH_SHAPE(4));
    wgml_tensor *loss = th_poisoned(WGML_F32, TH_SHAPE(4)), *loss5 = th_poisoned(WGML_F32, TH_SHAPE(5));
    wgml_tensor *mean = th_poisoned(WGML_F32, TH_SHAPE(1)), *grad = th_poisoned(WGML_F32, TH_SHAPE(4, 6));
    wgml_tensor *grad23 = th_poisoned(WGML_F32, TH_SHAPE(23)), *lu = th_tensor(WGML_U32, x, TH_SHAPE(4, 6));
    wgml_tensor *v6 = th_tensor(WGML_F32, x, TH_SHAPE(6)), *g5 = th_poisoned(WGML_F32, TH_SHAPE(5));
    wgml_context *other;
    TH_EXPECT(wgml_context_create(NULL, &other), WGML_OK);
    wgml_tensor *foreign;
    TH_EXPECT(wgml_tensor_from_data(other, WGML_U32, 1, (size_t[]){ 4 }, t4, &foreign), WGML_OK);
    uint64_t before = th_commands();

    TH_EXPECT_ERR(wgml_mse_loss(NULL, v6, v6, g5), WGML_ERROR_INVALID_ARGUMENT, "engine is NULL");
    TH_EXPECT_ERR(wgml_mse_loss(th_eng, NULL, v6, v6), WGML_ERROR_INVALID_ARGUMENT, "pred is NULL");
    TH_EXPECT_ERR(wgml_mse_loss(th_eng, v6, NULL, v6), WGML_ERROR_INVALID_ARGUMENT, "target is NULL");
    TH_EXPECT_ERR(wgml_mse_loss(th_eng, v6, v6, NULL), WGML_ERROR_INVALID_ARGUMENT, "out is NULL");
    TH_EXPECT_ERR(wgml_mse_loss(th_eng, v6, v6, g5), WGML_ERROR_SHAPE, "out has 5 elements");
    TH_EXPECT_ERR(wgml_mse_loss(th_eng, v6, g5, v6), WGML_ERROR_SHAPE, "target has 5 elements");
    TH_EXPECT_ERR(wgml_mse_loss(th_eng, tg, tg, loss), WGML_ERROR_DTYPE, "pred is u32");
    TH_EXPECT_ERR(wgml_mse_loss_backward(th_eng, v6, v6, g5), WGML_ERROR_SHAPE, "grad_in has 5 elements");
    TH_EXPECT_ERR(wgml_mse_loss_backward(th_eng, v6, v6, NULL), WGML_ERROR_INVALID_ARGUMENT, "grad_in is NULL");
    TH_EXPECT_ERR(wgml_mse_loss_backward(th_eng, loss, tf, foreign), WGML_ERROR_CONTEXT, "grad_in belongs to another context");

    TH_EXPECT_ERR(wgml_cross_entropy_loss(NULL, v6, 0, mean), WGML_ERROR_INVALID_ARGUMENT, "engine is NULL");
    TH_EXPECT_ERR(wgml_cross_entropy_loss(th_eng, NULL, 0, mean), WGML_ERROR_INVALID_ARGUMENT, "logits is NULL");
    TH_EXPECT_ERR(wgml_cross_entropy_loss(th_eng, v6, 0, NULL), WGML_ERROR_INVALID_ARGUMENT, "loss_out is NULL");
    TH_EXPECT_ERR(wgml_cross_entropy_loss(th_eng, v6, 6, mean), WGML_ERROR_INVALID_ARGUMENT, "target is 6; it must be < 6");
    TH_EXPECT_ERR(wgml_cross_entropy_loss(th_eng, v6, 0xFFFFFFFFu, mean), WGML_ERROR_INVALID_ARGUMENT, "target is 4294967295");
    TH_EXPECT_ERR(wgml_cross_entropy_loss(th_eng, tg, 0, mean), WGML_ERROR_DTYPE, "logits is u32");
    TH_EXPECT_ERR(wgml_cross_entropy_loss(th_eng, v6, 0, tg), WGML_ERROR_DTYPE, "loss_out is u32");
    TH_EXPECT_ERR(wgml_cross_entropy_loss(th_eng, v6, 0, v6), WGML_ERROR_ALIAS, "loss_out must not be the same tensor as logits");
    TH_EXPECT_ERR(wgml_cross_entropy_backward(th_eng, v6, 6, v6), WGML_ERROR_INVALID_ARGUMENT, "target is 6");
    TH_EXPECT_ERR(wgml_cross_entropy_backward(th_eng, v6, 0, g5), WGML_ERROR_SHAPE, "grad_out has 5 elements");
    TH_EXPECT_ERR(wgml_cross_entropy_backward(th_eng, v6, 0, NULL), WGML_ERROR_INVALID_ARGUMENT, "grad_out is NULL");

    TH_EXPECT_ERR(wgml_cross_entropy_batched(NULL, lg, tg, 99, loss, mean, grad), WGML_ERROR_INVALID_ARGUMENT, "engine is NULL");
    TH_EXPECT_ERR(wgml_cross_entropy_batched(th_eng, NULL, tg, 99, loss, mean, grad), WGML_ERROR_INVALID_ARGUMENT,
                  "logits is NULL");
    TH_EXPECT_ERR(wgml_cross_entropy_batched(th_eng, lg, NULL, 99, loss, mean, grad), WGML_ERROR_INVALID_ARGUMENT,
                  "targets is NULL");
    TH_EXPECT_ERR(wgml_cross_entropy_batched(th_eng, lg, tg, 99, NULL, NULL, NULL), WGML_ERROR_INVALID_ARGUMENT, "all NULL");
    TH_EXPECT_ERR(wgml_cross_entropy_batched(th_eng, lg, tf, 99, loss, mean, grad), WGML_ERROR_DTYPE, "targets is f32");
    TH_EXPECT_ERR(wgml_cross_entropy_batched(th_eng, lu, tg, 99, loss, mean, grad), WGML_ERROR_DTYPE, "logits is u32");
    TH_EXPECT_ERR(wgml_cross_entropy_batched(th_eng, lg, tg, 99, tg, mean, grad), WGML_ERROR_DTYPE, "losses is u32");
    TH_EXPECT_ERR(wgml_cross_entropy_batched(th_eng, lg, tg, 99, loss, tg, grad), WGML_ERROR_DTYPE, "mean_loss is u32");
    TH_EXPECT_ERR(wgml_cross_entropy_batched(th_eng, lg, tg, 99, loss, mean, lu), WGML_ERROR_DTYPE, "grad_logits is u32");
    TH_EXPECT_ERR(wgml_cross_entropy_batched(th_eng, lg, t3, 99, loss, mean, grad), WGML_ERROR_SHAPE, "targets has 3 elements");
    TH_EXPECT_ERR(wgml_cross_entropy_batched(th_eng, lg, tg, 99, loss5, mean, grad), WGML_ERROR_SHAPE, "losses has 5 elements");
    TH_EXPECT_ERR(wgml_cross_entropy_batched(th_eng, lg, tg, 99, loss, mean, grad23), WGML_ERROR_SHAPE,
                  "grad_logits has 23 elements");
    TH_EXPECT_ERR(wgml_cross_entropy_batched(th_eng, lg, foreign, 99, loss, mean, grad), WGML_ERROR_CONTEXT,
                  "targets belongs to another context");
    TH_EXPECT_ERR(wgml_cross_entropy_batched(th_eng, lg, tg, 99, loss, loss, grad), WGML_ERROR_ALIAS,
                  "mean_loss must not be the same tensor as losses");
    TH_EXPECT_ERR(wgml_cross_entropy_batched(th_eng, lg, tg, 99, loss, mean, mean), WGML_ERROR_SHAPE, "grad_logits has 1");
    {
        wgml_tensor *l24 = th_poisoned(WGML_F32, TH_SHAPE(24)), *lrow = th_poisoned(WGML_F32, TH_SHAPE(1, 4));
        wgml_tensor *lg14 = th_tensor(WGML_F32, x, TH_SHAPE(4, 1));
        TH_EXPECT_ERR(wgml_cross_entropy_batched(th_eng, lg14, tg, 99, lrow, lrow, NULL), WGML_ERROR_ALIAS,
                      "mean_loss must not be the same tensor as losses");
        TH_EXPECT_ERR(wgml_cross_entropy_batched(th_eng, lg14, tg, 99, lg14, NULL, NULL), WGML_ERROR_ALIAS,
                      "losses must not be the same tensor as logits");
        TH_EXPECT_ERR(wgml_cross_entropy_batched(th_eng, lg, tg, 99, NULL, lg, NULL), WGML_ERROR_ALIAS,
                      "mean_loss must not be the same tensor as logits");
        TH_EXPECT_ERR(wgml_cross_entropy_batched(th_eng, lg, tg, 99, NULL, l24, l24), WGML_ERROR_ALIAS,
                      "mean_loss must not be the same tensor as grad_logits");
        TH_CHECK(th_commands() == before, "rejected calls recorded %llu commands", (unsigned long long)(th_commands() - before));
        wgml_tensor *outs[] = { loss, loss5, mean, grad, grad23, g5, l24, lrow };
        for (size_t i = 0; i < sizeof outs / sizeof outs[0]; i++) {
            float *got = th_read(outs[i]);
            bool poisoned = true;
            for (size_t k = 0; k < wgml_tensor_numel(outs[i]); k++) {
                uint32_t bits;
                memcpy(&bits, &got[k], 4);
                poisoned &= bits == 0xFFFFFFFFu;
            }
            TH_CHECK(poisoned, "output %zu was written by a rejected call", i);
            free(got);
        }
        wgml_tensor_release(l24); wgml_tensor_release(lrow); wgml_tensor_release(lg14);
    }
    wgml_tensor_release(foreign);
    wgml_context_destroy(other);
    wgml_tensor *all[] = { lg, tg, t3, tf, loss, loss5, mean, grad, grad23, lu, v6, g5 };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) wgml_tensor_release(all[i]);
}

static const th_case cases[] = {
    { "mse_awkward_sizes", test_mse_awkward_sizes },
    { "mse_in_place", test_mse_in_place },
    { "mse_backward_finite_differences", test_mse_backward_finite_differences },
    { "ce_single", test_ce_single },
    { "ce_single_writes_element_0", test_ce_single_writes_element_0 },
    { "ce_batched_shapes", test_ce_batched_shapes },
    { "ce_batched_2d_grid", test_ce_batched_2d_grid },
    { "ce_batched_3d", test_ce_batched_3d },
    { "ce_finite_differences", test_ce_finite_differences },
    { "ce_ignored_rows", test_ce_ignored_rows },
    { "ce_invalid_target", test_ce_invalid_target },
    { "ce_outputs_and_determinism", test_ce_outputs_and_determinism },
    { "bad_inputs", test_bad_inputs },
};
TH_MAIN(cases)
