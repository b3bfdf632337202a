/* RMSNorm: forward, residual-fused forward (every aliasing of sum_out), backward against the
   double reference and against central finite differences, the weight offset of (1 + w)
   norms through the _with forms, and bad inputs. Shapes, aliasings and gradient checks
   are rows of an op case table; rows of zeros, a residual stream over layers, the
   defaults of the options, a robust context and the bad inputs are written out by hand. */
#include "harness.h"
#include "ref_norm.h"

#include <stdlib.h>
#include <string.h>

#define U 0x1p-24   /* unit roundoff of f32 */

/* Relative error bound of the forward output for rows of length d. The kernel adds the
   squares of a row in chains of at most m terms per thread (m <= 32 on the register path;
   4 * ceil(d / 1024) lanes of units on the long path, d / 256 elements on the scalar one),
   then through the radix-16 fold of the segment (two chains of at most 15 adds); the
   relative error of such a sum of non-negative terms is at most (m + 30) u. rsqrt halves it and adds WGSL's 2 ulp; the sum x + residual, the
   division by d, the eps add and the two products add one rounding each. */
static double norm_rtol(size_t d)
{
    double m = 4.0 * (double)((d + 1023) / 1024) + 32;
    return (0.5 * (m + 30) + 10) * U;
}

/* |got - ref| <= tol_scale * scale[i] + 1e-30, element by element, reporting the worst. */
static void compare_scaled(const char *what, const float *got, const double *ref, const double *scale, size_t n,
                           double tol_scale)
{
    size_t bad = 0, worst = 0;
    double worst_ratio = -1;
    for (size_t i = 0; i < n; i++) {
        double tol = tol_scale * scale[i] + 1e-30, err = fabs((double)got[i] - ref[i]);
        double ratio = isnan(err) ? INFINITY : err / tol;
        if (ratio > worst_ratio) { worst_ratio = ratio; worst = i; }
        if (!(err <= tol)) {
            if (bad < 10) fprintf(stderr, "  %s[%zu]: got %.9g, want %.9g (tol %.3g)\n", what, i, got[i], ref[i], tol);
            bad++;
        }
    }
    TH_CHECK(bad == 0, "%s: %zu of %zu elements out of tolerance; worst [%zu] got %.9g want %.9g (%.2f x tol)", what, bad, n,
             worst, n ? (double)got[worst] : 0.0, n ? ref[worst] : 0.0, worst_ratio);
}

/* The weight gradient: a sum over rows in chains of at most grows + segs + groups/16 + 5
   terms (grows <= rows/1024 + 1, segs <= min(rows, 256), groups <= 1024), each term with
   the error of rs plus two products. */
static double dw_tol(size_t rows, size_t d)
{
    return norm_rtol(d) + ((double)rows / 1024 + 1 + (rows < 256 ? (double)rows : 256) + 64 + 5) * U;
}

/* ---- the op case table -------------------------------------------------------------- */

/* A case of the norm family. The tolerance of output o's element i is floor[o] + k[o] * s,
   where s is |ref| or, for gradients, the size of the terms they are the difference or
   sum of, which the reference leaves in scale_of[o]. */
enum { FORWARD, RESIDUAL, BACKWARD, BACKWARD_FD };
typedef struct norm_case {
    int kind;
    int mode;        /* RESIDUAL: which tensors alias (test_residual) */
    size_t rows, d;
    float eps;
    bool with_dw;    /* BACKWARD: grad_weight wanted */
    bool acc;        /* BACKWARD: accumulate into grad_in, which starts as the input c */
    bool null_opts;  /* BACKWARD: wgml_rms_norm_backward_with with NULL options */
    bool with;       /* through wgml_rms_norm_with / wgml_rms_norm_backward_with, weight_offset woff */
    float woff;
    double k[2], floor[2];
} norm_case;

static double *scale_of[2];

static double norm_tol(const th_run *r, int o, size_t i)
{
    const norm_case *p = r->c->params;
    return p->floor[o] + p->k[o] * (scale_of[o] ? scale_of[o][i] : fabs(r->ref[o][i]));
}

/* Writes input i's values into output o from the host: an output that aliases an input. */
static wgml_status load_output(const th_run *r, int o, int i)
{
    return wgml_tensor_write(r->t_out[o], 0, r->in[i], r->n_in[i] * sizeof(float));
}

/* Residual modes: 0 residual(), 1 with(sum NULL), 2 sum separate, 3 sum == x, 4 sum ==
   residual, 5 x == residual, sum separate, 6 x == residual == sum, 7 x == residual, no
   sum. Inputs x, residual, weight (x, weight when x == residual); outputs out and sum. */
static bool mode_same_xr(int mode) { return mode >= 5; }
static bool mode_has_sum(int mode) { return mode >= 2 && mode <= 6; }

static wgml_status residual_call(const th_run *r, const norm_case *p)
{
    int nin = r->c->nin;
    const wgml_tensor *x = r->t_in[0], *res = mode_same_xr(p->mode) ? x : r->t_in[1], *w = r->t_in[nin - 1];
    wgml_tensor *out = r->t_out[0], *sum = mode_has_sum(p->mode) ? r->t_out[1] : NULL;
    wgml_status s = WGML_OK;
    if (p->mode == 3 || p->mode == 6) { s = load_output(r, 1, 0); x = sum; }
    if (p->mode == 4) { s = load_output(r, 1, 1); res = sum; }
    if (p->mode == 6) res = sum;
    if (s != WGML_OK) return s;
    if (p->with) return wgml_rms_norm_with(th_eng, x, res, w, out, sum, &(wgml_rms_norm_options){ p->eps, p->woff });
    if (p->mode == 0 || p->mode == 7) return wgml_rms_norm_residual(th_eng, x, res, w, out);
    return wgml_rms_norm_residual_with(th_eng, x, res, w, out, sum, p->eps);
}

/* The backward: inputs grad_out, x, weight (and c when accumulating), outputs grad_in and
   grad_weight; with (or acc): wgml_rms_norm_backward_with, weight_offset woff. With
   grad_weight, a second run (same offset, not accumulating) must give the same bits; it
   writes grad_weight, it does not accumulate (and, accumulating, leaves grad_in to the
   first). */
static wgml_status backward_call(const th_run *r, const norm_case *p)
{
    const wgml_tensor *g = r->t_in[0], *x = r->t_in[1], *w = r->t_in[2];
    wgml_tensor *gin = r->t_out[0], *gw = p->with_dw ? r->t_out[1] : NULL;
    wgml_status s;
    if (p->acc || p->with) {
        wgml_rms_norm_backward_options o = { .accumulate = p->acc, .weight_offset = p->woff };
        s = p->acc ? load_output(r, 0, 3) : WGML_OK;
        if (s == WGML_OK) s = wgml_rms_norm_backward_with(th_eng, g, x, w, gin, gw, p->eps, &o);
    } else if (p->null_opts) {
        s = wgml_rms_norm_backward_with(th_eng, g, x, w, gin, gw, p->eps, NULL);
    } else {
        s = wgml_rms_norm_backward(th_eng, g, x, w, gin, gw, p->eps);
    }
    if (s != WGML_OK || !gw || p->kind != BACKWARD) return s;
    float *first = th_read(gw);
    wgml_tensor *spare = p->acc ? th_poisoned(WGML_F32, TH_SHAPE(p->rows, p->d)) : gin;
    wgml_rms_norm_backward_options written = { .weight_offset = p->woff };
    TH_EXPECT(wgml_rms_norm_backward_with(th_eng, g, x, w, spare, gw, p->eps, &written), WGML_OK);
    float *again = th_read(gw);
    TH_CHECK(memcmp(again, first, p->d * sizeof *again) == 0, "%s grad_weight: a second run gave other bits", r->c->name);
    free(first); free(again);
    if (spare != gin) wgml_tensor_release(spare);
    return s;
}

static wgml_status norm_call(const th_run *r)
{
    const norm_case *p = r->c->params;
    switch (p->kind) {
    case FORWARD:
        if (p->with)
            return wgml_rms_norm_with(th_eng, r->t_in[0], NULL, r->t_in[1], r->t_out[0], NULL,
                                      &(wgml_rms_norm_options){ p->eps, p->woff });
        if (p->eps == 1e-5f) return wgml_rms_norm(th_eng, r->t_in[0], r->t_in[1], r->t_out[0]);
        return wgml_rms_norm_eps(th_eng, r->t_in[0], r->t_in[1], r->t_out[0], p->eps);
    case RESIDUAL: return residual_call(r, p);
    default: return backward_call(r, p);
    }
}

/* L = sum(g * out) as a function of x (wrt 0) or of the weight (wrt 1), the other fixed. */
typedef struct loss_ctx { const float *g; const double *x, *w; size_t rows, d; double eps; int wrt; double *y; } loss_ctx;

static double norm_loss(const double *v, const void *ctx)
{
    const loss_ctx *l = ctx;
    ref_rms_norm_d(l->wrt ? l->x : v, l->wrt ? v : l->w, l->rows, l->d, l->eps, l->y);
    double s = 0;
    for (size_t k = 0; k < l->rows * l->d; k++) s += l->g[k] * l->y[k];
    return s;
}

/* Richardson's (4 D(h/2) - D(h)) / 3 of central differences D: near x = 0 with d = 1 the
   third derivative is about 3 / eps^1.5, so D(h) alone errs by up to half the tolerance;
   the extrapolation leaves O(h^4). */
static void richardson(loss_ctx *l, double *v, size_t m, double *grad)
{
    double *half = th_alloc_d(m);
    th_finite_diff(norm_loss, l, v, m, 1e-5, grad);
    th_finite_diff(norm_loss, l, v, m, 0.5e-5, half);
    for (size_t i = 0; i < m; i++) grad[i] = (4 * half[i] - grad[i]) / 3;
    free(half);
}

static void norm_reference(const th_run *r)
{
    const norm_case *p = r->c->params;
    size_t rows = p->rows, d = p->d, n = rows * d;
    if (p->kind == FORWARD) {
        ref_rms_norm(TH_IN(r, 0), NULL, TH_IN(r, 1), p->woff, rows, d, p->eps, r->ref[0], NULL);
        return;
    }
    if (p->kind == RESIDUAL) {
        const float *x = TH_IN(r, 0), *res = mode_same_xr(p->mode) ? x : TH_IN(r, 1);
        ref_rms_norm(x, res, TH_IN(r, r->c->nin - 1), p->woff, rows, d, p->eps, r->ref[0],
                     mode_has_sum(p->mode) ? r->ref[1] : NULL);
        return;
    }
    const float *g = TH_IN(r, 0), *x = TH_IN(r, 1), *w = TH_IN(r, 2);
    scale_of[0] = th_alloc_d(n);
    scale_of[1] = p->with_dw ? th_alloc_d(d) : NULL;
    if (p->kind == BACKWARD) {
        ref_rms_norm_backward(g, x, w, p->woff, rows, d, p->eps, r->ref[0], p->with_dw ? r->ref[1] : NULL, scale_of[0],
                              scale_of[1]);
        for (size_t i = 0; p->acc && i < n; i++) {   /* c + the gradient: one rounding more */
            r->ref[0][i] += TH_IN(r, 3)[i];
            scale_of[0][i] += fabs(TH_IN(r, 3)[i]);
        }
        return;
    }
    /* BACKWARD_FD: both gradients by central differences of the double forward, taken in
       w + woff as the kernel reads it (d/dw = d/d(w + woff)) */
    ref_rms_norm_backward(g, x, w, p->woff, rows, d, p->eps, NULL, NULL, scale_of[0], scale_of[1]);
    double *xd = th_alloc_d(n), *wd = th_alloc_d(d);
    th_to_double(x, xd, n);
    for (size_t j = 0; j < d; j++) wd[j] = (float)((double)w[j] + p->woff);
    loss_ctx l = { .g = g, .x = xd, .w = wd, .rows = rows, .d = d, .eps = p->eps, .y = th_alloc_d(n) };
    richardson(&l, xd, n, r->ref[0]);
    l.wrt = 1;
    richardson(&l, wd, d, r->ref[1]);
    free(xd); free(wd); free(l.y);
}

/* Runs one case: nin inputs and nout outputs as given. */
static void run_norm(const norm_case *p, int nin, const th_io *in, int nout, const th_io *out, const char *name)
{
    th_op_case c = { .nin = nin, .nout = nout, .call = norm_call, .reference = norm_reference, .tol = norm_tol,
                     .params = p };
    memcpy(c.in, in, (size_t)nin * sizeof *in);
    memcpy(c.out, out, (size_t)nout * sizeof *out);
    snprintf(c.name, sizeof c.name, "%s", name);
    th_run_case(&c);
    for (int o = 0; o < 2; o++) {
        free(scale_of[o]);
        scale_of[o] = NULL;
    }
}

/* rms_norm of x [rows, d] in [-2, 2] with a weight in [w_lo, w_hi]. */
static void forward_case(size_t rows, size_t d, double w_lo, double w_hi, const char *name)
{
    norm_case p = { .kind = FORWARD, .rows = rows, .d = d, .eps = 1e-5f, .k = { norm_rtol(d) }, .floor = { 1e-30 } };
    th_io in[2] = { { .shape = { rows, d }, .lo = -2, .hi = 2 }, { .shape = { d }, .lo = w_lo, .hi = w_hi } };
    th_io out[1] = { { .shape = { rows, d } } };
    run_norm(&p, 2, in, 1, out, name);
}

/* Shapes: (rows, d), chosen to reach every path of the planner: rows of one element, odd
   lengths (scalar units), several rows per workgroup, register rows of 1..8 units per
   thread, long rows (scalar and vec4), a vocabulary-sized row, and a 2-D grid of rows. */
static const struct { size_t rows, d; } shapes[] = {
    { 1, 1 }, { 3, 3 }, { 65, 7 }, { 3, 63 }, { 65, 65 }, { 7, 1000 }, { 3, 4097 }, { 2, 4096 },
    { 2, 8192 }, { 2, 8196 }, { 1, 262144 }, { 300, 64 }, { 1, 2049 }, { 70000, 4 },
};

static void test_forward_shapes(void)
{
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        char name[96];
        snprintf(name, sizeof name, "rms_norm %zu x %zu", shapes[c].rows, shapes[c].d);
        forward_case(shapes[c].rows, shapes[c].d, -1.5, 1.5, name);
    }
}

/* More row blocks than one grid dimension holds: 256 rows of one element per workgroup,
   65536 * 256 + 300 rows, so the grid is 2-D and its last row is partly past the end. */
static void test_grid_2d(void)
{
    forward_case(65536u * 256u + 300u, 1, 0.75, 0.75, "rms_norm over a 2-D grid");
}

/* Any rank: the norm runs over the last dimension; rows of zeros give zeros; eps is used. */
static void test_forward_rank_zeros_eps(void)
{
    size_t d = 24, rows = 2 * 3 * 5, n = rows * d;
    float *x = th_random(n, -0.05, 0.05), *w = th_random(d, -2, 2);
    memset(x + 4 * d, 0, d * sizeof *x);               /* two rows of zeros */
    memset(x + (rows - 1) * d, 0, d * sizeof *x);
    const float eps_list[] = { 1e-5f, 0.25f, 0.0f };
    for (int k = 0; k < 3; k++) {
        double *ref = th_alloc_d(n);
        ref_rms_norm(x, NULL, w, 0, rows, d, eps_list[k], ref, NULL);
        wgml_tensor *tx = th_tensor(WGML_F32, x, TH_SHAPE(2, 3, 5, d)), *tw = th_tensor(WGML_F32, w, TH_SHAPE(d));
        wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(rows * d));
        if (k == 0) TH_EXPECT(wgml_rms_norm(th_eng, tx, tw, out), WGML_OK);
        else TH_EXPECT(wgml_rms_norm_eps(th_eng, tx, tw, out, eps_list[k]), WGML_OK);
        float *got = th_read(out);
        char what[64];
        snprintf(what, sizeof what, "rms_norm 4-D, eps %g", (double)eps_list[k]);
        if (k < 2) {
            th_compare(what, got, ref, n, 1e-30, norm_rtol(d));
            for (size_t j = 0; j < d; j++)
                TH_CHECK(got[4 * d + j] == 0.0f && got[(rows - 1) * d + j] == 0.0f, "%s: a zero row gave %g", what,
                         (double)got[4 * d + j]);
        } else {
            /* eps 0: the rows of zeros are 0/0 (documented); every other row is exact */
            for (size_t r = 0; r < rows; r++) {
                if (r == 4 || r == rows - 1) continue;
                char w2[80];
                snprintf(w2, sizeof w2, "%s row %zu", what, r);
                th_compare(w2, got + r * d, ref + r * d, d, 1e-30, norm_rtol(d));
            }
        }
        free(ref); free(got);
        wgml_tensor_release(tx); wgml_tensor_release(tw); wgml_tensor_release(out);
    }
    free(x); free(w);
}

/* rms_norm_residual and rms_norm_residual_with, sum_out NULL, separate, aliasing x,
   aliasing residual, with x == residual, and all three the same tensor. out is within
   norm_rtol of the reference, sum_out within one rounding of x + residual; the inputs
   that are not sum_out stay unchanged. */
static void test_residual(void)
{
    static const struct { size_t rows, d; } rs[] = { { 3, 7 }, { 65, 64 }, { 5, 1000 }, { 2, 4097 }, { 1, 262144 } };
    for (size_t c = 0; c < sizeof rs / sizeof rs[0]; c++) {
        size_t rows = rs[c].rows, d = rs[c].d, n = rows * d;
        for (int mode = 0; mode < 8; mode++) {
            float eps = mode == 0 || mode == 7 ? 1e-5f : 1e-3f;
            norm_case p = { .kind = RESIDUAL, .mode = mode, .rows = rows, .d = d, .eps = eps, .k = { norm_rtol(d), U },
                            .floor = { 1e-30, 0 } };
            th_io x = { .shape = { rows, d }, .lo = -2, .hi = 2 }, res = { .shape = { n }, .lo = -2, .hi = 2 };
            th_io w = { .shape = { d }, .lo = -1.5, .hi = 1.5 };
            th_io in[3] = { x, res, w };
            if (mode_same_xr(mode)) in[1] = w;
            /* sum_out has the shape of the tensor it is (x or residual), else [rows, d] */
            th_io out[2] = { { .shape = { n } }, { .shape = { rows, d } } };
            if (mode == 4) out[1] = (th_io){ .shape = { n } };
            char name[96];
            snprintf(name, sizeof name, "residual %zu x %zu mode %d", rows, d, mode);
            run_norm(&p, mode_same_xr(mode) ? 2 : 3, in, mode_has_sum(mode) ? 2 : 1, out, name);
        }
    }
}

/* A transformer block's residual stream kept in place over several layers. */
static void test_residual_stream(void)
{
    size_t rows = 17, d = 96, n = rows * d;
    float *h = th_random(n, -1, 1), *w = th_random(d, 0.5, 1.5);
    double *hd = th_alloc_d(n), *ref = th_alloc_d(n);
    th_to_double(h, hd, n);
    wgml_tensor *th = th_tensor(WGML_F32, h, TH_SHAPE(rows, d)), *tw = th_tensor(WGML_F32, w, TH_SHAPE(d));
    wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(rows, d));
    float *hf = th_alloc_f(n);
    for (int layer = 0; layer < 4; layer++) {
        float *delta = th_random(n, -1, 1);
        wgml_tensor *td = th_tensor(WGML_F32, delta, TH_SHAPE(rows, d));
        TH_EXPECT(wgml_rms_norm_residual_with(th_eng, td, th, tw, out, th, 1e-5f), WGML_OK);
        for (size_t i = 0; i < n; i++) hf[i] = (float)((double)h[i] + delta[i]);   /* the stream in f32 */
        ref_rms_norm(h, delta, w, 0, rows, d, 1e-5, ref, NULL);
        memcpy(h, hf, n * sizeof *h);
        float *got = th_read(out);
        char what[64];
        snprintf(what, sizeof what, "residual stream layer %d", layer);
        th_compare(what, got, ref, n, 1e-30, norm_rtol(d));
        free(got); free(delta);
        wgml_tensor_release(td);
    }
    float *gh = th_read(th);
    for (size_t i = 0; i < n; i++) hd[i] = h[i];
    th_compare("residual stream after 4 layers", gh, hd, n, 0, 0);
    free(gh); free(h); free(w); free(hd); free(ref); free(hf);
    wgml_tensor_release(th); wgml_tensor_release(tw); wgml_tensor_release(out);
}

/* wgml_rms_norm_with and a weight offset, out = RMSNorm(x [+ residual]) * (weight + offset)
   (Gemma's norms take 1): without a residual, and with one and sum_out NULL, separate, or
   the residual itself (in place), on scalar and vec4 rows, in registers and long. The
   reference adds the offset to the weight in f32, as the kernel reads it, so the
   tolerances are those of the plain norm. */
static void test_weight_offset(void)
{
    static const struct { size_t rows, d; } ws[] = { { 3, 7 }, { 65, 64 }, { 2, 4097 }, { 2, 8196 } };
    static const float offsets[] = { 1.0f, -0.5f };
    static const int modes[] = { -1, 1, 2, 4 };   /* -1: no residual, else as test_residual */
    for (size_t c = 0; c < sizeof ws / sizeof ws[0]; c++)
        for (int o = 0; o < 2; o++)
            for (int m = 0; m < 4; m++) {
                size_t rows = ws[c].rows, d = ws[c].d, n = rows * d;
                int mode = modes[m];
                norm_case p = { .kind = mode < 0 ? FORWARD : RESIDUAL, .mode = mode, .rows = rows, .d = d,
                                .eps = mode < 0 ? 1e-5f : 1e-3f, .with = true, .woff = offsets[o],
                                .k = { norm_rtol(d), U }, .floor = { 1e-30, 0 } };
                th_io x = { .shape = { rows, d }, .lo = -2, .hi = 2 }, res = { .shape = { n }, .lo = -2, .hi = 2 };
                th_io w = { .shape = { d }, .lo = -1.5, .hi = 1.5 };
                th_io in[3] = { x, res, w }, out[2] = { { .shape = { n } }, { .shape = { rows, d } } };
                if (mode < 0) in[1] = w;
                if (mode == 4) out[1] = (th_io){ .shape = { n } };
                char name[96];
                snprintf(name, sizeof name, "rms_norm_with offset %g %zu x %zu mode %d", (double)offsets[o], rows, d, mode);
                run_norm(&p, mode < 0 ? 2 : 3, in, mode_has_sum(mode) ? 2 : 1, out, name);
            }
}

/* wgml_rms_norm_with with NULL options is eps 1e-5 and no offset: the bits of
   wgml_rms_norm (and of options { .eps = 1e-5 }), and with a residual those of
   wgml_rms_norm_residual_with. Inputs of mean square ~3e-5, where another eps would
   change the bits. */
static void test_with_defaults(void)
{
    static const size_t ds[] = { 64, 7 };
    for (int k = 0; k < 2; k++) {
        size_t rows = 5, d = ds[k], n = rows * d;
        float *x = th_random(n, -0.01, 0.01), *res = th_random(n, -0.01, 0.01), *w = th_random(d, -1.5, 1.5);
        wgml_tensor *tx = th_tensor(WGML_F32, x, TH_SHAPE(rows, d)), *tr = th_tensor(WGML_F32, res, TH_SHAPE(rows, d));
        wgml_tensor *tw = th_tensor(WGML_F32, w, TH_SHAPE(d)), *t[6];
        for (int i = 0; i < 6; i++) t[i] = th_poisoned(WGML_F32, TH_SHAPE(rows, d));
        const wgml_rms_norm_options zero_but_eps = { .eps = 1e-5f };
        TH_EXPECT(wgml_rms_norm(th_eng, tx, tw, t[0]), WGML_OK);
        TH_EXPECT(wgml_rms_norm_with(th_eng, tx, NULL, tw, t[1], NULL, NULL), WGML_OK);
        TH_EXPECT(wgml_rms_norm_with(th_eng, tx, NULL, tw, t[2], NULL, &zero_but_eps), WGML_OK);
        TH_EXPECT(wgml_rms_norm_residual_with(th_eng, tx, tr, tw, t[3], t[4], 1e-5f), WGML_OK);
        TH_EXPECT(wgml_rms_norm_with(th_eng, tx, tr, tw, t[5], tr, NULL), WGML_OK);   /* the sum in place */
        float *got[6];
        for (int i = 0; i < 6; i++) got[i] = th_read(t[i]);
        float *sum = th_read(tr);
        size_t nb = n * sizeof(float);
        TH_CHECK(memcmp(got[1], got[0], nb) == 0, "d=%zu: rms_norm_with(NULL options) differs from rms_norm", d);
        TH_CHECK(memcmp(got[2], got[0], nb) == 0, "d=%zu: rms_norm_with({ eps 1e-5 }) differs from rms_norm", d);
        TH_CHECK(memcmp(got[5], got[3], nb) == 0, "d=%zu: rms_norm_with(residual, NULL options) out differs", d);
        TH_CHECK(memcmp(sum, got[4], nb) == 0, "d=%zu: rms_norm_with(residual, NULL options) sum differs", d);
        for (int i = 0; i < 6; i++) { free(got[i]); wgml_tensor_release(t[i]); }
        free(sum); free(x); free(res); free(w);
        wgml_tensor_release(tx); wgml_tensor_release(tr); wgml_tensor_release(tw);
    }
}

/* One backward case: grad_out in [-1, 1], x in [-2, 2], weight in [-1.5, 1.5]. grad_in is
   a difference of two terms: its error is relative to their sizes (gin_scale), each
   carrying up to three times the error of rs plus the dot product's. acc: grad_in starts
   from random c in [-3, 3] and must become c + the gradient (one rounding more: the
   scale grows by |c|); grad_weight is still written. woff: a weight offset (not 0: through
   wgml_rms_norm_backward_with), in the reference's weight as in the forward. */
static void backward_case_with(size_t rows, size_t d, bool with_dw, float eps, bool acc, bool null_opts, float woff)
{
    norm_case p = { .kind = BACKWARD, .rows = rows, .d = d, .eps = eps, .with_dw = with_dw, .acc = acc,
                    .null_opts = null_opts, .with = woff != 0, .woff = woff, .k = { 4 * norm_rtol(d), dw_tol(rows, d) },
                    .floor = { 1e-30, 1e-30 } };
    th_io in[4] = { { .shape = { rows, d }, .lo = -1, .hi = 1 }, { .shape = { rows, d }, .lo = -2, .hi = 2 },
                    { .shape = { d }, .lo = -1.5, .hi = 1.5 }, { .shape = { rows, d }, .lo = -3, .hi = 3 } };
    th_io out[2] = { { .shape = { rows, d } }, { .shape = { d } } };
    char name[128], off[32] = "";
    if (woff != 0) snprintf(off, sizeof off, " offset %g", (double)woff);
    snprintf(name, sizeof name, "rms_norm_backward%s%s %zu x %zu%s",
             acc ? "_with accumulate" : null_opts ? "_with NULL options" : woff != 0 ? "_with" : "", off, rows, d,
             with_dw ? "" : " (no grad_weight)");
    run_norm(&p, acc ? 4 : 3, in, with_dw ? 2 : 1, out, name);
}

static void backward_case(size_t rows, size_t d, bool with_dw, float eps)
{
    backward_case_with(rows, d, with_dw, eps, false, false, 0);
}

/* Shapes reaching: several rows per workgroup with several row blocks per workgroup
   (600000 x 4, 300000 x 1), long rows with several rows per workgroup (1030 x 2049), the
   register path with 1..8 units, and long vec4 rows. */
static void test_backward(void)
{
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        if (shapes[c].rows * shapes[c].d > 300000) continue;
        backward_case(shapes[c].rows, shapes[c].d, true, 1e-5f);
        backward_case(shapes[c].rows, shapes[c].d, false, 1e-5f);
    }
    backward_case(1, 262144, true, 1e-5f);
    backward_case(600000, 4, true, 1e-5f);
    backward_case(300000, 1, true, 1e-3f);
    backward_case(1030, 2049, true, 1e-5f);
    backward_case(2, 8196, true, 0.5f);
}

/* wgml_rms_norm_backward_with, accumulate: scalar and vec4 rows, the register and
   long-row paths, with and without grad_weight; NULL options are the plain function
   (written, not accumulated: grad_in poisoned); a rejected call names the _with form and
   leaves grad_in untouched. */
static void test_backward_accumulate(void)
{
    static const struct { size_t rows, d; bool dw; } cases_[] = {
        { 7, 33, true }, { 64, 768, true }, { 64, 768, false }, { 5, 2049, false }, { 3, 8196, true },
    };
    for (size_t c = 0; c < sizeof cases_ / sizeof cases_[0]; c++)
        backward_case_with(cases_[c].rows, cases_[c].d, cases_[c].dw, 1e-5f, true, false, 0);
    size_t rows = 9, d = 20, n = rows * d;
    backward_case_with(rows, d, false, 1e-5f, false, true, 0);
    /* rejected: the _with form's name, nothing recorded, grad_in untouched */
    float *x = th_random(n, -2, 2), *g = th_random(n, -1, 1), *w = th_random(d, -1.5, 1.5);
    wgml_tensor *tx = th_tensor(WGML_F32, x, TH_SHAPE(rows, d)), *tg = th_tensor(WGML_F32, g, TH_SHAPE(rows, d));
    wgml_tensor *tw = th_tensor(WGML_F32, w, TH_SHAPE(d)), *fresh = th_poisoned(WGML_F32, TH_SHAPE(rows, d));
    uint64_t before = th_commands();
    wgml_rms_norm_backward_options o = { .accumulate = true };
    TH_EXPECT_ERR(wgml_rms_norm_backward_with(th_eng, tg, tx, tw, fresh, NULL, -1.0f, &o), WGML_ERROR_INVALID_ARGUMENT,
                  "wgml_rms_norm_backward_with: eps");
    TH_EXPECT_ERR(wgml_rms_norm_backward_with(th_eng, tg, tx, tw, tg, NULL, 1e-5f, &o), WGML_ERROR_ALIAS,
                  "grad_in must not be the same tensor as grad_out");
    TH_CHECK(th_commands() == before, "rejected calls recorded commands");
    uint32_t *raw = (uint32_t *)th_read(fresh);
    for (size_t i = 0; i < n; i++) TH_CHECK(raw[i] == 0xFFFFFFFFu, "grad_in[%zu] written by a rejected call", i);
    free(raw); free(x); free(g); free(w);
    wgml_tensor_release(tx); wgml_tensor_release(tg); wgml_tensor_release(tw); wgml_tensor_release(fresh);
}

/* The backward with weight_offset (wgml_rms_norm_backward_with): grad_in reads weight +
   offset, grad_weight does not depend on it; scalar and vec4 rows, in registers and long,
   with and without grad_weight, one accumulating, and an offset of -0.5. */
static void test_backward_weight_offset(void)
{
    static const struct { size_t rows, d; bool dw; } bs[] = { { 7, 33, true }, { 64, 768, true }, { 5, 2049, true },
                                                              { 3, 8196, true }, { 9, 20, false } };
    for (size_t c = 0; c < sizeof bs / sizeof bs[0]; c++)
        backward_case_with(bs[c].rows, bs[c].d, bs[c].dw, 1e-5f, false, false, 1.0f);
    backward_case_with(7, 33, true, 1e-5f, true, false, 1.0f);
    backward_case_with(64, 768, true, 1e-5f, false, false, -0.5f);
}

/* Both gradients against central differences of the double forward, L = sum(g * out): the
   tolerance of the reference comparison plus the differences' own error (O(h^4)
   truncation and rounding, well under 1e-7 of the terms here). */
static void test_backward_finite_differences(void)
{
    static const struct { size_t rows, d; float woff; } fs[] = { { 1, 1, 0 }, { 3, 7, 0 }, { 2, 65, 0 }, { 5, 4, 0 },
                                                                 { 3, 7, 1 }, { 5, 4, 1 } };
    for (size_t c = 0; c < sizeof fs / sizeof fs[0]; c++) {
        size_t rows = fs[c].rows, d = fs[c].d;
        norm_case p = { .kind = BACKWARD_FD, .rows = rows, .d = d, .eps = 1e-5f, .with_dw = true,
                        .with = fs[c].woff != 0, .woff = fs[c].woff,
                        .k = { 4 * norm_rtol(d) + 1e-7, dw_tol(rows, d) + 1e-7 }, .floor = { 1e-30, 1e-30 } };
        th_io in[3] = { { .shape = { rows, d }, .lo = -1, .hi = 1 }, { .shape = { rows, d }, .lo = -2, .hi = 2 },
                        { .shape = { d }, .lo = -1.5, .hi = 1.5 } };
        th_io out[2] = { { .shape = { rows, d } }, { .shape = { d } } };
        char name[80];
        snprintf(name, sizeof name, "rms_norm_backward vs finite differences %zu x %zu offset %g", rows, d,
                 (double)fs[c].woff);
        run_norm(&p, 3, in, 2, out, name);
    }
}

static void test_bad_inputs(void)
{
    float z[64] = { 0 };
    wgml_tensor *x = th_tensor(WGML_F32, z, TH_SHAPE(4, 8)), *w = th_tensor(WGML_F32, z, TH_SHAPE(8));
    wgml_tensor *w7 = th_tensor(WGML_F32, z, TH_SHAPE(7)), *x31 = th_tensor(WGML_F32, z, TH_SHAPE(31));
    wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(32)), *sum = th_poisoned(WGML_F32, TH_SHAPE(32));
    wgml_tensor *u = th_tensor(WGML_U32, z, TH_SHAPE(4, 8)), *gw = th_poisoned(WGML_F32, TH_SHAPE(8));
    wgml_context *other;
    TH_EXPECT(wgml_context_create(NULL, &other), WGML_OK);
    wgml_tensor *foreign;
    TH_EXPECT(wgml_tensor_from_data(other, WGML_F32, 1, (size_t[]){ 8 }, z, &foreign), WGML_OK);
    uint64_t before = th_commands();

    TH_EXPECT_ERR(wgml_rms_norm(NULL, x, w, out), WGML_ERROR_INVALID_ARGUMENT, "engine");
    TH_EXPECT_ERR(wgml_rms_norm(th_eng, NULL, w, out), WGML_ERROR_INVALID_ARGUMENT, "input is NULL");
    TH_EXPECT_ERR(wgml_rms_norm(th_eng, x, NULL, out), WGML_ERROR_INVALID_ARGUMENT, "weight is NULL");
    TH_EXPECT_ERR(wgml_rms_norm(th_eng, x, w, NULL), WGML_ERROR_INVALID_ARGUMENT, "out is NULL");
    TH_EXPECT_ERR(wgml_rms_norm(th_eng, u, w, out), WGML_ERROR_DTYPE, "input is u32");
    TH_EXPECT_ERR(wgml_rms_norm(th_eng, x, w, u), WGML_ERROR_DTYPE, "out is u32");
    TH_EXPECT_ERR(wgml_rms_norm(th_eng, x, w7, out), WGML_ERROR_SHAPE, "weight has 7 elements");
    TH_EXPECT_ERR(wgml_rms_norm(th_eng, x, w, x31), WGML_ERROR_SHAPE, "out has 31 elements");
    TH_EXPECT_ERR(wgml_rms_norm(th_eng, x, foreign, out), WGML_ERROR_CONTEXT, "weight belongs to another context");
    TH_EXPECT_ERR(wgml_rms_norm(th_eng, x, w, x), WGML_ERROR_ALIAS, "out must not be the same tensor as input");
    TH_EXPECT_ERR(wgml_rms_norm_eps(th_eng, x, w, out, -1e-5f), WGML_ERROR_INVALID_ARGUMENT, "eps");
    TH_EXPECT_ERR(wgml_rms_norm_eps(th_eng, x, w, out, NAN), WGML_ERROR_INVALID_ARGUMENT, "eps");
    TH_EXPECT_ERR(wgml_rms_norm_eps(th_eng, x, w, out, INFINITY), WGML_ERROR_INVALID_ARGUMENT, "eps");

    TH_EXPECT_ERR(wgml_rms_norm_residual(th_eng, x, NULL, w, out), WGML_ERROR_INVALID_ARGUMENT, "residual is NULL");
    TH_EXPECT_ERR(wgml_rms_norm_residual(th_eng, x, x31, w, out), WGML_ERROR_SHAPE, "residual has 31 elements");
    TH_EXPECT_ERR(wgml_rms_norm_residual(th_eng, x, sum, w7, out), WGML_ERROR_SHAPE, "weight has 7 elements");
    TH_EXPECT_ERR(wgml_rms_norm_residual(th_eng, x, sum, w, x), WGML_ERROR_ALIAS, "out must not be the same tensor as x");
    TH_EXPECT_ERR(wgml_rms_norm_residual(th_eng, x, sum, w, sum), WGML_ERROR_ALIAS, "out must not be the same tensor as residual");
    TH_EXPECT_ERR(wgml_rms_norm_residual_with(th_eng, x, x, w, out, out, 1e-5f), WGML_ERROR_ALIAS, "out must not be the same tensor as sum_out");
    TH_EXPECT_ERR(wgml_rms_norm_residual_with(th_eng, w, w, w, gw, w, 1e-5f), WGML_ERROR_ALIAS, "sum_out must not be the same tensor as weight");
    TH_EXPECT_ERR(wgml_rms_norm_residual_with(th_eng, x, x, w, out, x31, 1e-5f), WGML_ERROR_SHAPE, "sum_out has 31 elements");
    TH_EXPECT_ERR(wgml_rms_norm_residual_with(th_eng, x, x, w, out, u, 1e-5f), WGML_ERROR_DTYPE, "sum_out is u32");
    TH_EXPECT_ERR(wgml_rms_norm_residual_with(th_eng, x, x, w, out, sum, -1.0f), WGML_ERROR_INVALID_ARGUMENT, "eps");

    TH_EXPECT_ERR(wgml_rms_norm_backward(th_eng, NULL, x, w, out, gw, 1e-5f), WGML_ERROR_INVALID_ARGUMENT, "grad_out is NULL");
    TH_EXPECT_ERR(wgml_rms_norm_backward(th_eng, sum, x, w, NULL, gw, 1e-5f), WGML_ERROR_INVALID_ARGUMENT, "grad_in is NULL");
    TH_EXPECT_ERR(wgml_rms_norm_backward(th_eng, x31, x, w, out, gw, 1e-5f), WGML_ERROR_SHAPE, "grad_out has 31 elements");
    TH_EXPECT_ERR(wgml_rms_norm_backward(th_eng, sum, x, w, out, w7, 1e-5f), WGML_ERROR_SHAPE, "grad_weight has 7 elements");
    TH_EXPECT_ERR(wgml_rms_norm_backward(th_eng, sum, x, w, sum, gw, 1e-5f), WGML_ERROR_ALIAS, "grad_in must not be the same tensor as grad_out");
    TH_EXPECT_ERR(wgml_rms_norm_backward(th_eng, sum, x, w, out, w, 1e-5f), WGML_ERROR_ALIAS, "grad_weight must not be the same tensor as weight");
    TH_EXPECT_ERR(wgml_rms_norm_backward(th_eng, sum, x, w, out, gw, NAN), WGML_ERROR_INVALID_ARGUMENT, "eps");
    TH_EXPECT_ERR(wgml_rms_norm_backward(th_eng, sum, x, w, out, u, 1e-5f), WGML_ERROR_DTYPE, "grad_weight is u32");
    TH_EXPECT_ERR(wgml_rms_norm_backward(th_eng, sum, x, foreign, out, gw, 1e-5f), WGML_ERROR_CONTEXT, "weight belongs to another context");

    /* the weight offset must be finite; sum_out needs a residual */
    const float bad_off[] = { NAN, INFINITY, -INFINITY };
    for (int k = 0; k < 3; k++) {
        wgml_rms_norm_options o = { .eps = 1e-5f, .weight_offset = bad_off[k] };
        wgml_rms_norm_backward_options bo = { .weight_offset = bad_off[k] };
        TH_EXPECT_ERR(wgml_rms_norm_with(th_eng, x, NULL, w, out, NULL, &o), WGML_ERROR_INVALID_ARGUMENT,
                      "wgml_rms_norm_with: weight_offset");
        TH_EXPECT_ERR(wgml_rms_norm_with(th_eng, x, x, w, out, sum, &o), WGML_ERROR_INVALID_ARGUMENT, "weight_offset");
        TH_EXPECT_ERR(wgml_rms_norm_backward_with(th_eng, x, x, w, out, gw, 1e-5f, &bo), WGML_ERROR_INVALID_ARGUMENT,
                      "wgml_rms_norm_backward_with: weight_offset");
    }
    TH_EXPECT_ERR(wgml_rms_norm_with(th_eng, x, NULL, w, out, sum, NULL), WGML_ERROR_INVALID_ARGUMENT, "residual");
    TH_EXPECT_ERR(wgml_rms_norm_with(th_eng, x, NULL, w, out, NULL, &(wgml_rms_norm_options){ .eps = -1 }),
                  WGML_ERROR_INVALID_ARGUMENT, "eps");

    TH_CHECK(th_commands() == before, "rejected calls recorded %llu commands", (unsigned long long)(th_commands() - before));
    uint32_t got[32];
    th_read_into(out, got);
    for (int i = 0; i < 32; i++) TH_CHECK(got[i] == 0xFFFFFFFFu, "out[%d] was written by a rejected call", i);
    th_read_into(sum, got);
    for (int i = 0; i < 32; i++) TH_CHECK(got[i] == 0xFFFFFFFFu, "sum[%d] was written by a rejected call", i);
    th_read_into(gw, got);
    for (int i = 0; i < 8; i++) TH_CHECK(got[i] == 0xFFFFFFFFu, "grad_weight[%d] was written by a rejected call", i);
    wgml_tensor_release(foreign);
    wgml_context_destroy(other);
    wgml_tensor_release(x); wgml_tensor_release(w); wgml_tensor_release(w7); wgml_tensor_release(x31);
    wgml_tensor_release(out); wgml_tensor_release(sum); wgml_tensor_release(u); wgml_tensor_release(gw);
}

/* The same kernels on a context with Dawn's robustness (bounds clamping, workgroup
   zeroing: wgml_context_desc.robust), the opt-in debugging mode; the rest of this file
   runs without it, the default. */
static void test_robust(void)
{
    wgml_context *ctx;
    wgml_engine *eng;
    TH_EXPECT(wgml_context_create(&(wgml_context_desc){ .robust = true }, &ctx), WGML_OK);
    TH_EXPECT(wgml_engine_create(ctx, &eng), WGML_OK);
    static const struct { size_t rows, d; } fs[] = { { 65, 7 }, { 300, 64 }, { 3, 4097 }, { 5, 4096 } };
    for (size_t c = 0; c < sizeof fs / sizeof fs[0]; c++) {
        size_t rows = fs[c].rows, d = fs[c].d, n = rows * d;
        float *x = th_random(n, -2, 2), *g = th_random(n, -1, 1), *w = th_random(d, -1.5, 1.5);
        double *ref = th_alloc_d(n), *gin = th_alloc_d(n), *gin_s = th_alloc_d(n), *gw = th_alloc_d(d), *gw_s = th_alloc_d(d);
        ref_rms_norm(x, NULL, w, 0, rows, d, 1e-5, ref, NULL);
        ref_rms_norm_backward(g, x, w, 0, rows, d, 1e-5, gin, gw, gin_s, gw_s);
        wgml_tensor *tx, *tg, *tw, *out, *tgin, *tgw;
        size_t shape[2] = { rows, d };
        TH_EXPECT(wgml_tensor_from_data(ctx, WGML_F32, 2, shape, x, &tx), WGML_OK);
        TH_EXPECT(wgml_tensor_from_data(ctx, WGML_F32, 2, shape, g, &tg), WGML_OK);
        TH_EXPECT(wgml_tensor_from_data(ctx, WGML_F32, 1, &d, w, &tw), WGML_OK);
        TH_EXPECT(wgml_tensor_create(ctx, WGML_F32, 2, shape, &out), WGML_OK);
        TH_EXPECT(wgml_tensor_create(ctx, WGML_F32, 2, shape, &tgin), WGML_OK);
        TH_EXPECT(wgml_tensor_create(ctx, WGML_F32, 1, &d, &tgw), WGML_OK);
        TH_EXPECT(wgml_rms_norm(eng, tx, tw, out), WGML_OK);
        TH_EXPECT(wgml_rms_norm_backward(eng, tg, tx, tw, tgin, tgw, 1e-5f), WGML_OK);
        float *got = th_alloc_f(n), *gotin = th_alloc_f(n), *gotw = th_alloc_f(d);
        TH_EXPECT(wgml_tensor_read(out, 0, got, n * 4), WGML_OK);
        TH_EXPECT(wgml_tensor_read(tgin, 0, gotin, n * 4), WGML_OK);
        TH_EXPECT(wgml_tensor_read(tgw, 0, gotw, d * 4), WGML_OK);
        char what[80];
        snprintf(what, sizeof what, "robust rms_norm %zu x %zu", rows, d);
        th_compare(what, got, ref, n, 1e-30, norm_rtol(d));
        snprintf(what, sizeof what, "robust rms_norm_backward %zu x %zu grad_in", rows, d);
        compare_scaled(what, gotin, gin, gin_s, n, 4 * norm_rtol(d));
        snprintf(what, sizeof what, "robust rms_norm_backward %zu x %zu grad_weight", rows, d);
        compare_scaled(what, gotw, gw, gw_s, d, dw_tol(rows, d));
        free(x); free(g); free(w); free(ref); free(gin); free(gin_s); free(gw); free(gw_s); free(got); free(gotin); free(gotw);
        wgml_tensor_release(tx); wgml_tensor_release(tg); wgml_tensor_release(tw); wgml_tensor_release(out);
        wgml_tensor_release(tgin); wgml_tensor_release(tgw);
    }
    wgml_engine_destroy(eng);
    wgml_context_destroy(ctx);
}

static const th_case cases[] = {
    { "forward_shapes", test_forward_shapes },
    { "forward_rank_zeros_eps", test_forward_rank_zeros_eps },
    { "grid_2d", test_grid_2d },
    { "residual", test_residual },
    { "residual_stream", test_residual_stream },
    { "weight_offset", test_weight_offset },
    { "with_defaults", test_with_defaults },
    { "backward", test_backward },
    { "backward_weight_offset", test_backward_weight_offset },
    { "backward_finite_differences", test_backward_finite_differences },
    { "backward_accumulate", test_backward_accumulate },
    { "robust", test_robust },
    { "bad_inputs", test_bad_inputs },
};
TH_MAIN(cases)
