/* mse_loss, mse_loss_backward, cross_entropy_loss, cross_entropy_backward and
   cross_entropy_batched against the double reference (tests/ref/ref_loss.c) and central
   finite differences, with extreme logits, ignored and invalid rows, V = 1, in place, and
   their bad inputs. Shapes, logit ranges, in-place aliasings and gradient checks are rows
   of an op case table; invalid targets (NaN losses), one-element writes, bitwise
   determinism and the bad inputs are written out by hand. */
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

/* Where the output of an MSE case lives: a new tensor, or pred (target, or both) in place.
   In place, the call writes the input's values into the case's output tensor from the host
   and runs the op on that tensor. FD: the backward against finite differences. */
enum { OUT_NEW, OUT_IS_PRED, OUT_IS_TARGET, SAME_IN_PLACE, SAME_NEW, FD };
typedef struct mse_case { int op, where; } mse_case;

static const mse_case mse_cases[2][6] = {
    { { 0, 0 }, { 0, 1 }, { 0, 2 }, { 0, 3 }, { 0, 4 }, { 0, 5 } },
    { { 1, 0 }, { 1, 1 }, { 1, 2 }, { 1, 3 }, { 1, 4 }, { 1, 5 } },
};

static wgml_status load_output(const th_run *r, int o, int i)
{
    return wgml_tensor_write(r->t_out[o], 0, r->in[i], r->n_in[i] * sizeof(float));
}

static wgml_status mse_call(const th_run *r)
{
    const mse_case *p = r->c->params;
    pair_fn fn = mse_ops[p->op].fn;
    wgml_tensor *const *in = r->t_in, *out = r->t_out[0];
    wgml_status s;
    switch (p->where) {
    case OUT_IS_PRED: s = load_output(r, 0, 0); return s ? s : fn(th_eng, out, in[1], out);
    case OUT_IS_TARGET: s = load_output(r, 0, 1); return s ? s : fn(th_eng, in[0], out, out);
    case SAME_IN_PLACE: s = load_output(r, 0, 0); return s ? s : fn(th_eng, out, out, out);
    case SAME_NEW: return fn(th_eng, in[0], in[0], out);
    default: return fn(th_eng, in[0], in[1], out);
    }
}

/* 0.5 (p - t)^2 as a function of p, for th_finite_diff. */
static double mse_of_pred(const double *p, const void *t)
{
    double d = p[0] - *(const double *)t;
    return 0.5 * d * d;
}

static void mse_reference(const th_run *r)
{
    const mse_case *p = r->c->params;
    size_t n = r->n_out[0];
    if (p->where == FD) {   /* element by element: exact for a quadratic up to rounding, ~1e-12 */
        for (size_t i = 0; i < n; i++) {
            double pi = TH_IN(r, 0)[i], ti = TH_IN(r, 1)[i];
            th_finite_diff(mse_of_pred, &ti, &pi, 1, 1e-4, &r->ref[0][i]);
        }
        return;
    }
    bool same = p->where == SAME_IN_PLACE || p->where == SAME_NEW;
    mse_ops[p->op].ref(TH_IN(r, 0), TH_IN(r, same ? 0 : 1), r->ref[0], n);
}

/* pred of shape p_shape and target of t_shape (both n elements) in [lo, hi]. */
static void run_mse(const mse_case *p, const size_t *p_shape, const size_t *t_shape, double lo, double hi, double atol,
                    double rtol, const char *name)
{
    bool same = p->where == SAME_IN_PLACE || p->where == SAME_NEW;
    th_op_case c = { .nin = same ? 1 : 2, .nout = 1, .call = mse_call, .reference = mse_reference, .atol = atol,
                     .rtol = rtol, .params = p };
    c.in[0] = (th_io){ .lo = lo, .hi = hi };
    c.in[1] = (th_io){ .lo = lo, .hi = hi };
    memcpy(c.in[0].shape, p_shape, sizeof c.in[0].shape);
    memcpy(c.in[1].shape, t_shape, sizeof c.in[1].shape);
    memcpy(c.out[0].shape, p->where == OUT_IS_TARGET ? t_shape : p_shape, sizeof c.out[0].shape);
    snprintf(c.name, sizeof c.name, "%s", name);
    th_run_case(&c);
}

static void test_mse_awkward_sizes(void)
{
    for (size_t o = 0; o < 2; o++)
        for (size_t s = 0; s < th_awkward_count; s++) {
            size_t n = th_awkward_sizes[s];
            char name[64];
            snprintf(name, sizeof name, "%s n=%zu", mse_ops[o].name, n);
            run_mse(&mse_cases[o][OUT_NEW], (size_t[5]){ n }, (size_t[5]){ n }, -10, 10, MSE_ATOL, MSE_RTOL, name);
        }
}

/* out aliasing pred, target, both; pred == target with a separate out. */
static void test_mse_in_place(void)
{
    static const char *const where_names[] = { "", "out = pred", "out = target", "out = pred = target", "pred = target" };
    for (size_t o = 0; o < 2; o++)
        for (int where = OUT_IS_PRED; where <= SAME_NEW; where++) {
            char name[64];
            snprintf(name, sizeof name, "%s in place, %s", mse_ops[o].name, where_names[where]);
            run_mse(&mse_cases[o][where], (size_t[5]){ 1001 }, (size_t[5]){ 7, 11, 13 }, -4, 4, MSE_ATOL, MSE_RTOL, name);
        }
}

/* mse_loss_backward is the derivative of sum(mse_loss) w.r.t. pred: central differences of
   the forward in double. */
static void test_mse_backward_finite_differences(void)
{
    run_mse(&mse_cases[1][FD], (size_t[5]){ 65 }, (size_t[5]){ 65 }, -3, 3, 1e-9, 1e-6,
            "mse_loss_backward vs finite differences");
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

/* Logit kinds: the range a case draws its logits from. */
enum { LOGITS_NORMAL, LOGITS_HUGE, LOGITS_NEAR_1E4 };
static const struct { double lo, hi; } logit_range[3] = {
    [LOGITS_NORMAL] = { -8, 8 },
    [LOGITS_HUGE] = { -1e4, 1e4 },                  /* softmax one-hot, losses up to 2e4 */
    [LOGITS_NEAR_1E4] = { 1e4 - 3, 1e4 + 3 },       /* all ~1e4: precision test */
};
static float *make_logits(size_t n, int kind) { return th_random(n, logit_range[kind].lo, logit_range[kind].hi); }

static uint32_t *make_targets(size_t n, size_t v, double p_ignore)
{
    uint32_t *t = malloc(n * sizeof *t);
    for (size_t r = 0; r < n; r++) t[r] = th_uniform(0, 1) < p_ignore ? IGNORE : th_rand_u32() % (uint32_t)v;
    if (n >= 2) { t[0] = 0; t[n - 1] = (uint32_t)v - 1; }   /* both ends of the row */
    return t;
}

/* ---- cross-entropy: the op case table ------------------------------------------------ */

/* A cross-entropy case: logits [n, v] drawn by the table (any shape with those elements);
   the targets, built with their share of ignored rows, come with the case and the call
   uploads them. SINGLE (n = 1): cross_entropy_loss, cross_entropy_backward, and the
   backward again in place (the gradient overwrites the logits); BATCHED: the outputs
   named by `outputs` (losses, mean_loss, grad_logits; the gradient in place on the
   logits when in_place); FD: the batched gradient (and for n = 1 the single-vector one)
   against central differences of the mean. In place, the call writes the logits into the
   case's gradient tensor from the host and runs there. */
enum { SINGLE, BATCHED, CE_FD };
enum { OUT_LOSSES = 1, OUT_MEAN = 2, OUT_GRAD = 4 };
typedef struct ce_case {
    int what;
    size_t n, v;
    const uint32_t *targets;
    size_t t_shape[5];
    uint32_t ignore;
    int outputs;
    bool in_place;
    bool exact_ignored;   /* an ignored row's loss must be exactly 0 */
    double grad_atol;     /* CE_ATOL / count */
} ce_case;

static int out_index(const ce_case *p, int which)
{
    int k = 0;
    for (int b = OUT_LOSSES; b < which; b <<= 1) k += (p->outputs & b) != 0;
    return k;
}

static wgml_status ce_call(const th_run *r)
{
    const ce_case *p = r->c->params;
    if (p->what == SINGLE) {
        wgml_status s = wgml_cross_entropy_loss(th_eng, r->t_in[0], p->targets[0], r->t_out[0]);
        if (s == WGML_OK) s = wgml_cross_entropy_backward(th_eng, r->t_in[0], p->targets[0], r->t_out[1]);
        if (s == WGML_OK) s = load_output(r, 2, 0);
        return s == WGML_OK ? wgml_cross_entropy_backward(th_eng, r->t_out[2], p->targets[0], r->t_out[2]) : s;
    }
    wgml_tensor *tt = th_tensor(WGML_U32, p->targets, p->t_shape);
    wgml_tensor *losses = p->outputs & OUT_LOSSES ? r->t_out[out_index(p, OUT_LOSSES)] : NULL;
    wgml_tensor *mean = p->outputs & OUT_MEAN ? r->t_out[out_index(p, OUT_MEAN)] : NULL;
    wgml_tensor *grad = p->outputs & OUT_GRAD ? r->t_out[out_index(p, OUT_GRAD)] : NULL;
    const wgml_tensor *x = r->t_in[0];
    wgml_status s = WGML_OK;
    if (p->in_place) { s = load_output(r, out_index(p, OUT_GRAD), 0); x = grad; }
    if (s == WGML_OK) s = wgml_cross_entropy_batched(th_eng, x, tt, p->ignore, losses, mean, grad);
    if (s == WGML_OK && p->what == CE_FD && p->n == 1)
        s = wgml_cross_entropy_backward(th_eng, x, p->targets[0], r->t_out[1]);
    wgml_tensor_release(tt);
    return s;
}

/* The mean loss as a function of the logits, for th_finite_diff. */
static double ce_mean(const double *x, const void *ctx)
{
    const ce_case *p = ctx;
    double mean;
    ref_cross_entropy(x, p->targets, p->n, p->v, p->ignore, NULL, &mean, NULL);
    return mean;
}

static void ce_reference(const th_run *r)
{
    const ce_case *p = r->c->params;
    double *xd = promote(TH_IN(r, 0), p->n * p->v);
    if (p->what == SINGLE) {
        ref_cross_entropy(xd, p->targets, 1, p->v, IGNORE, r->ref[0], NULL, r->ref[1]);
        memcpy(r->ref[2], r->ref[1], p->v * sizeof(double));
    } else if (p->what == BATCHED) {
        double *losses = p->outputs & OUT_LOSSES ? r->ref[out_index(p, OUT_LOSSES)] : NULL;
        double *mean = p->outputs & OUT_MEAN ? r->ref[out_index(p, OUT_MEAN)] : NULL;
        double *grad = p->outputs & OUT_GRAD ? r->ref[out_index(p, OUT_GRAD)] : NULL;
        ref_cross_entropy(xd, p->targets, p->n, p->v, p->ignore, losses, mean, grad);
    } else {
        /* steps of 1e-4 max(1, |x|) <= 8e-4 leave a truncation error ~1e-8 and a rounding
           error ~1e-12 for these logits */
        th_finite_diff(ce_mean, p, xd, p->n * p->v, 1e-4, r->ref[0]);
        if (p->n == 1) memcpy(r->ref[1], r->ref[0], p->v * sizeof(double));
    }
    free(xd);
}

static double ce_tol(const th_run *r, int o, size_t i)
{
    const ce_case *p = r->c->params;
    double ref = fabs(r->ref[o][i]);
    if (p->what == BATCHED && (p->outputs & OUT_GRAD) && o == out_index(p, OUT_GRAD)) return p->grad_atol + CE_RTOL * ref;
    if (p->exact_ignored && o == out_index(p, OUT_LOSSES) && p->targets[i] == p->ignore) return 0;
    return CE_ATOL + CE_RTOL * ref;
}

/* Runs p on logits of kind `kind` shaped x_shape ([n, v] when NULL). */
static void run_ce(ce_case *p, int kind, const size_t *x_shape, const char *name)
{
    th_op_case c = { .nin = 1, .nout = 0, .call = ce_call, .reference = ce_reference, .tol = ce_tol, .params = p };
    c.in[0] = (th_io){ .shape = { p->n, p->v }, .lo = logit_range[kind].lo, .hi = logit_range[kind].hi };
    if (x_shape) memcpy(c.in[0].shape, x_shape, sizeof c.in[0].shape);
    if (!p->t_shape[0]) p->t_shape[0] = p->n;
    size_t count = 0;
    for (size_t row = 0; row < p->n; row++) count += p->targets[row] != p->ignore && p->targets[row] < p->v;
    p->grad_atol = CE_ATOL / (count ? (double)count : 1.0);
    if (p->what == SINGLE) {
        c.in[0] = (th_io){ .shape = { p->v }, .lo = logit_range[kind].lo, .hi = logit_range[kind].hi };
        c.nout = 3;
        c.out[0] = (th_io){ .shape = { 1 } };
        c.out[1] = (th_io){ .shape = { p->v } };
        c.out[2] = (th_io){ .shape = { p->v } };
    } else if (p->what == CE_FD) {
        c.nout = p->n == 1 ? 2 : 1;
        c.out[0] = (th_io){ .shape = { p->n, p->v } };
        c.out[1] = (th_io){ .shape = { p->v } };
        p->outputs = OUT_GRAD;
    } else {
        if (p->outputs & OUT_LOSSES) memcpy(c.out[c.nout++].shape, p->t_shape, sizeof p->t_shape);
        if (p->outputs & OUT_MEAN) c.out[c.nout++] = (th_io){ .shape = { 1 } };
        if (p->outputs & OUT_GRAD) c.out[c.nout++] = (th_io){ .shape = { p->n, p->v } };
    }
    snprintf(c.name, sizeof c.name, "%s", name);
    th_run_case(&c);
}

/* ---- cross-entropy: single vector ----------------------------------------------------- */

static void test_ce_single(void)
{
    static const size_t sizes[] = { 1, 3, 7, 63, 65, 1000, 4097, 8192, 8193, 20001, 262144 };
    for (int kind = 0; kind < 3; kind++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            size_t v = sizes[s];
            uint32_t target = th_rand_u32() % (uint32_t)v;
            ce_case p = { .what = SINGLE, .n = 1, .v = v, .targets = &target, .ignore = IGNORE };
            char name[96];
            snprintf(name, sizeof name, "cross_entropy_loss, _backward (out[1]), in place (out[2]) V=%zu logits kind %d", v,
                     kind);
            run_ce(&p, kind, NULL, name);
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

/* The batched op with every output, the gradient in a new tensor or in place. */
static void run_batched(size_t n, size_t v, int kind, const uint32_t *tg, uint32_t ignore, bool in_place, bool exact_ignored,
                        const char *label)
{
    ce_case p = { .what = BATCHED, .n = n, .v = v, .targets = tg, .ignore = ignore,
                  .outputs = OUT_LOSSES | OUT_MEAN | OUT_GRAD, .in_place = in_place, .exact_ignored = exact_ignored };
    char name[128];
    snprintf(name, sizeof name, "%s: losses, mean, grad%s", label, in_place ? " (in place)" : "");
    run_ce(&p, kind, NULL, name);
}

static void test_ce_batched_shapes(void)
{
    static const struct { size_t n, v; } shapes[] = {
        { 1, 1 }, { 3, 7 }, { 5, 8 }, { 17, 1000 }, { 64, 4097 }, { 4, 16388 }, { 3, 20001 }, { 300, 65 }, { 1, 262144 },
        { 1000, 3 },
    };
    for (int kind = 0; kind < 3; kind++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            size_t n = shapes[s].n, v = shapes[s].v;
            uint32_t *tg = make_targets(n, v, 0.2);
            char label[96];
            snprintf(label, sizeof label, "batched [%zu, %zu] kind %d", n, v, kind);
            run_batched(n, v, kind, tg, IGNORE, false, false, label);
            run_batched(n, v, kind, tg, IGNORE, true, false, label);
            free(tg);
        }
}

/* More (row, chunk) workgroups than one grid dimension holds: a 2-D grid. */
static void test_ce_batched_2d_grid(void)
{
    size_t n = 66000, v = 2;
    uint32_t *tg = make_targets(n, v, 0.1);
    run_batched(n, v, LOGITS_NORMAL, tg, IGNORE, false, false, "batched [66000, 2]");
    free(tg);
}

/* Logits [2, 3, 12]: rows are the last dimension. */
static void test_ce_batched_3d(void)
{
    size_t n = 6, v = 12;
    uint32_t *tg = make_targets(n, v, 0);
    ce_case p = { .what = BATCHED, .n = n, .v = v, .targets = tg, .t_shape = { 2, 3 }, .ignore = IGNORE,
                  .outputs = OUT_LOSSES };
    run_ce(&p, LOGITS_NORMAL, (const size_t[5]){ 2, 3, 12 }, "batched [2, 3, 12] losses");
    free(tg);
}

/* The gradient is d mean / d logits: central differences of the double forward. */
static void test_ce_finite_differences(void)
{
    static const struct { size_t n, v; } shapes[] = { { 1, 1 }, { 4, 7 }, { 3, 16 }, { 2, 33 } };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        size_t n = shapes[s].n, v = shapes[s].v;
        uint32_t *tg = make_targets(n, v, 0);
        if (n > 2) tg[1] = IGNORE;   /* an ignored row: its gradient is 0, the count is n - 1 */
        ce_case p = { .what = CE_FD, .n = n, .v = v, .targets = tg, .ignore = IGNORE };
        char name[128];
        snprintf(name, sizeof name, "batched grad [%zu, %zu]%s vs finite differences", n, v,
                 n == 1 ? " (and cross_entropy_backward, out[1])" : "");
        run_ce(&p, LOGITS_NORMAL, NULL, name);
        free(tg);
    }
}

/* Every row ignored: losses 0, mean 0, gradient 0. An ignore_index inside [0, V) ignores
   rows whose target is that class (PyTorch's rule); their losses are exactly 0. */
static void test_ce_ignored_rows(void)
{
    size_t n = 9, v = 40;
    uint32_t tg[9];
    for (size_t r = 0; r < n; r++) tg[r] = IGNORE;
    run_batched(n, v, LOGITS_NORMAL, tg, IGNORE, false, false, "all rows ignored");
    for (size_t r = 0; r < n; r++) tg[r] = (uint32_t)(r % 3);   /* class 0 is ignore_index below */
    run_batched(n, v, LOGITS_NORMAL, tg, 0, false, true, "ignore_index 0");
}

/* A target >= V that is not ignore_index (the host cannot see device data): that row's
   loss is NaN, mean_loss is NaN, its gradient row is zero and it is not counted, so the
   other rows' gradients are exactly those of the valid rows alone. (Written out: the
   table's per-element tolerance cannot expect NaN.) */
static void test_ce_invalid_target(void)
{
    size_t n = 6, v = 33;
    float *x = make_logits(n * v, LOGITS_NORMAL);
    uint32_t tg[6] = { 3, 40, 0, IGNORE, 32, 33 };   /* rows 1 and 5 are invalid */
    double *xd = promote(x, n * v), *ref_l = th_alloc_d(n), *ref_g = th_alloc_d(n * v), ref_mean;
    ref_cross_entropy(xd, tg, n, v, IGNORE, ref_l, &ref_mean, ref_g);
    wgml_tensor *tx = th_tensor(WGML_F32, x, TH_SHAPE(n, v)), *tt = th_tensor(WGML_U32, tg, TH_SHAPE(n));
    wgml_tensor *tl = th_poisoned(WGML_F32, TH_SHAPE(n)), *tm = th_poisoned(WGML_F32, TH_SHAPE(1));
    wgml_tensor *tgr = th_poisoned(WGML_F32, TH_SHAPE(n, v));
    TH_EXPECT(wgml_cross_entropy_batched(th_eng, tx, tt, IGNORE, tl, tm, tgr), WGML_OK);
    float *gl = th_read(tl), *gm = th_read(tm), *gg = th_read(tgr);
    /* rows 0, 2 and 4 count: the gradient's atol is CE_ATOL / 3 */
    th_compare("invalid targets: losses", gl, ref_l, n, CE_ATOL, CE_RTOL);
    th_compare("invalid targets: mean", gm, &ref_mean, 1, CE_ATOL, CE_RTOL);
    th_compare("invalid targets: grad", gg, ref_g, n * v, CE_ATOL / 3, CE_RTOL);
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
    free(x); free(xd); free(ref_l); free(ref_g); free(gl); free(gm); free(gg); free(xd3); free(ref_g3);
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
