/* RMSNorm: forward, residual-fused forward (every aliasing of sum_out), backward against the
   double reference and against central finite differences, and bad inputs. */
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
        size_t rows = shapes[c].rows, d = shapes[c].d, n = rows * d;
        float *x = th_random(n, -2, 2), *w = th_random(d, -1.5, 1.5);
        double *ref = th_alloc_d(n);
        ref_rms_norm(x, NULL, w, rows, d, 1e-5, ref, NULL);
        wgml_tensor *tx = th_tensor(WGML_F32, x, TH_SHAPE(rows, d)), *tw = th_tensor(WGML_F32, w, TH_SHAPE(d));
        wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(rows, d));
        TH_EXPECT(wgml_rms_norm(th_eng, tx, tw, out), WGML_OK);
        float *got = th_read(out);
        char what[96];
        snprintf(what, sizeof what, "rms_norm %zu x %zu", rows, d);
        th_compare(what, got, ref, n, 1e-30, norm_rtol(d));
        free(x); free(w); free(ref); free(got);
        wgml_tensor_release(tx); wgml_tensor_release(tw); wgml_tensor_release(out);
    }
}

/* More row blocks than one grid dimension holds: 256 rows of one element per workgroup,
   65536 * 256 + 300 rows, so the grid is 2-D and its last row is partly past the end. */
static void test_grid_2d(void)
{
    size_t rows = 65536u * 256u + 300u, d = 1;
    float *x = th_random(rows, -2, 2), w = 0.75f;
    double *ref = th_alloc_d(rows);
    ref_rms_norm(x, NULL, &w, rows, d, 1e-5, ref, NULL);
    wgml_tensor *tx = th_tensor(WGML_F32, x, TH_SHAPE(rows, d)), *tw = th_tensor(WGML_F32, &w, TH_SHAPE(1));
    wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(rows, d));
    TH_EXPECT(wgml_rms_norm(th_eng, tx, tw, out), WGML_OK);
    float *got = th_read(out);
    th_compare("rms_norm over a 2-D grid", got, ref, rows, 1e-30, norm_rtol(d));
    free(x); free(ref); free(got);
    wgml_tensor_release(tx); wgml_tensor_release(tw); wgml_tensor_release(out);
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
        ref_rms_norm(x, NULL, w, rows, d, eps_list[k], ref, NULL);
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
   aliasing residual, with x == residual, and all three the same tensor. */
static void test_residual(void)
{
    static const struct { size_t rows, d; } rs[] = { { 3, 7 }, { 65, 64 }, { 5, 1000 }, { 2, 4097 }, { 1, 262144 } };
    for (size_t c = 0; c < sizeof rs / sizeof rs[0]; c++) {
        size_t rows = rs[c].rows, d = rs[c].d, n = rows * d;
        for (int mode = 0; mode < 8; mode++) {
            /* 0 residual(), 1 with(sum NULL), 2 sum separate, 3 sum == x, 4 sum == residual,
               5 x == residual, sum separate, 6 x == residual == sum, 7 x == residual, no sum */
            float *x = th_random(n, -2, 2), *res = th_random(n, -2, 2), *w = th_random(d, -1.5, 1.5);
            bool same_xr = mode >= 5;
            const float *rr = same_xr ? x : res;
            double *ref = th_alloc_d(n), *ref_sum = th_alloc_d(n);
            float eps = mode == 0 || mode == 7 ? 1e-5f : 1e-3f;
            ref_rms_norm(x, rr, w, rows, d, eps, ref, ref_sum);
            wgml_tensor *tx = th_tensor(WGML_F32, x, TH_SHAPE(rows, d)), *tr = th_tensor(WGML_F32, res, TH_SHAPE(n));
            wgml_tensor *tw = th_tensor(WGML_F32, w, TH_SHAPE(d)), *out = th_poisoned(WGML_F32, TH_SHAPE(n));
            wgml_tensor *sum = NULL, *rin = same_xr ? tx : tr;
            if (mode == 2 || mode == 5) sum = th_poisoned(WGML_F32, TH_SHAPE(rows, d));
            if (mode == 3 || mode == 6) sum = tx;
            if (mode == 4) sum = tr;
            if (mode == 0 || mode == 7) TH_EXPECT(wgml_rms_norm_residual(th_eng, tx, rin, tw, out), WGML_OK);
            else TH_EXPECT(wgml_rms_norm_residual_with(th_eng, tx, rin, tw, out, sum, eps), WGML_OK);
            float *got = th_read(out);
            char what[96];
            snprintf(what, sizeof what, "residual %zu x %zu mode %d out", rows, d, mode);
            th_compare(what, got, ref, n, 1e-30, norm_rtol(d));
            if (sum) {
                float *gs = th_read(sum);
                snprintf(what, sizeof what, "residual %zu x %zu mode %d sum_out", rows, d, mode);
                th_compare(what, gs, ref_sum, n, 0, U);   /* one rounding of x + residual */
                free(gs);
            }
            if (mode != 3 && mode != 6) {   /* x untouched unless it is sum_out */
                float *gx = th_read(tx);
                TH_CHECK(memcmp(gx, x, n * sizeof *x) == 0, "mode %d changed x", mode);
                free(gx);
            }
            if (mode != 4 && !same_xr) {
                float *gr = th_read(tr);
                TH_CHECK(memcmp(gr, res, n * sizeof *res) == 0, "mode %d changed residual", mode);
                free(gr);
            }
            if (mode == 2 || mode == 5) wgml_tensor_release(sum);
            free(x); free(res); free(w); free(ref); free(ref_sum); free(got);
            wgml_tensor_release(tx); wgml_tensor_release(tr); wgml_tensor_release(tw); wgml_tensor_release(out);
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
        ref_rms_norm(h, delta, w, rows, d, 1e-5, ref, NULL);
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

/* The weight gradient: a sum over rows in chains of at most grows + segs + groups/16 + 5
   terms (grows <= rows/1024 + 1, segs <= min(rows, 256), groups <= 1024), each term with
   the error of rs plus two products. */
static double dw_tol(size_t rows, size_t d)
{
    return norm_rtol(d) + ((double)rows / 1024 + 1 + (rows < 256 ? (double)rows : 256) + 64 + 5) * U;
}

/* acc: wgml_rms_norm_backward_with with accumulate, grad_in starting from random c, which
   must become c + the gradient (one rounding more: the tolerance's scale grows by |c|);
   grad_weight is still written. */
static void backward_case_acc(size_t rows, size_t d, bool with_dw, float eps, bool acc)
{
    size_t n = rows * d;
    float *x = th_random(n, -2, 2), *g = th_random(n, -1, 1), *w = th_random(d, -1.5, 1.5);
    float *c = acc ? th_random(n, -3, 3) : NULL;
    double *gin = th_alloc_d(n), *gin_s = th_alloc_d(n), *gw = th_alloc_d(d), *gw_s = th_alloc_d(d);
    ref_rms_norm_backward(g, x, w, rows, d, eps, gin, gw, gin_s, gw_s);
    for (size_t i = 0; c && i < n; i++) {
        gin[i] += c[i];
        gin_s[i] += fabs(c[i]);
    }
    wgml_tensor *tx = th_tensor(WGML_F32, x, TH_SHAPE(rows, d)), *tg = th_tensor(WGML_F32, g, TH_SHAPE(rows, d));
    wgml_tensor *tw = th_tensor(WGML_F32, w, TH_SHAPE(d));
    wgml_tensor *tgin = acc ? th_tensor(WGML_F32, c, TH_SHAPE(rows, d)) : th_poisoned(WGML_F32, TH_SHAPE(rows, d));
    wgml_tensor *tgw = with_dw ? th_poisoned(WGML_F32, TH_SHAPE(d)) : NULL;
    if (acc) {
        wgml_rms_norm_backward_options o = { .accumulate = true };
        TH_EXPECT(wgml_rms_norm_backward_with(th_eng, tg, tx, tw, tgin, tgw, eps, &o), WGML_OK);
    } else {
        TH_EXPECT(wgml_rms_norm_backward(th_eng, tg, tx, tw, tgin, tgw, eps), WGML_OK);
    }
    float *got = th_read(tgin);
    char what[96];
    /* gin is a difference of two terms: its error is relative to their sizes (gin_scale),
       each carrying up to three times the error of rs plus the dot product's. */
    snprintf(what, sizeof what, "rms_norm_backward%s %zu x %zu grad_in", acc ? "_with accumulate" : "", rows, d);
    compare_scaled(what, got, gin, gin_s, n, 4 * norm_rtol(d));
    if (with_dw) {
        float *gotw = th_read(tgw);
        snprintf(what, sizeof what, "rms_norm_backward%s %zu x %zu grad_weight", acc ? "_with accumulate" : "", rows, d);
        compare_scaled(what, gotw, gw, gw_s, d, dw_tol(rows, d));
        /* deterministic: a second run gives the same bits; written, not accumulated */
        TH_EXPECT(wgml_rms_norm_backward(th_eng, tg, tx, tw, tgin, tgw, eps), WGML_OK);
        float *again = th_read(tgw);
        TH_CHECK(memcmp(again, gotw, d * sizeof *again) == 0, "%s: a second run gave other bits", what);
        free(gotw); free(again);
        wgml_tensor_release(tgw);
    }
    free(x); free(g); free(w); free(c); free(gin); free(gin_s); free(gw); free(gw_s); free(got);
    wgml_tensor_release(tx); wgml_tensor_release(tg); wgml_tensor_release(tw); wgml_tensor_release(tgin);
}

static void backward_case(size_t rows, size_t d, bool with_dw, float eps) { backward_case_acc(rows, d, with_dw, eps, false); }

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

/* wgml_rms_norm_backward_with, accumulate (backward_case_acc): scalar and vec4 rows, the
   register and long-row paths, with and without grad_weight; NULL options are the plain
   function; a rejected call names the _with form and leaves grad_in untouched. */
static void test_backward_accumulate(void)
{
    static const struct { size_t rows, d; bool dw; } cases_[] = {
        { 7, 33, true }, { 64, 768, true }, { 64, 768, false }, { 5, 2049, false }, { 3, 8196, true },
    };
    for (size_t c = 0; c < sizeof cases_ / sizeof cases_[0]; c++) backward_case_acc(cases_[c].rows, cases_[c].d, cases_[c].dw, 1e-5f, true);
    /* NULL options: written, not accumulated (poisoned grad_in) */
    size_t rows = 9, d = 20, n = rows * d;
    float *x = th_random(n, -2, 2), *g = th_random(n, -1, 1), *w = th_random(d, -1.5, 1.5);
    double *gin = th_alloc_d(n), *gin_s = th_alloc_d(n), *gw = th_alloc_d(d), *gw_s = th_alloc_d(d);
    ref_rms_norm_backward(g, x, w, rows, d, 1e-5f, gin, gw, gin_s, gw_s);
    wgml_tensor *tx = th_tensor(WGML_F32, x, TH_SHAPE(rows, d)), *tg = th_tensor(WGML_F32, g, TH_SHAPE(rows, d));
    wgml_tensor *tw = th_tensor(WGML_F32, w, TH_SHAPE(d)), *tgin = th_poisoned(WGML_F32, TH_SHAPE(rows, d));
    TH_EXPECT(wgml_rms_norm_backward_with(th_eng, tg, tx, tw, tgin, NULL, 1e-5f, NULL), WGML_OK);
    float *got = th_read(tgin);
    compare_scaled("rms_norm_backward_with NULL options", got, gin, gin_s, n, 4 * norm_rtol(d));
    free(got);
    /* rejected: the _with form's name, nothing recorded, grad_in untouched */
    wgml_tensor *fresh = th_poisoned(WGML_F32, TH_SHAPE(rows, d));
    uint64_t before = th_commands();
    wgml_rms_norm_backward_options o = { .accumulate = true };
    TH_EXPECT_ERR(wgml_rms_norm_backward_with(th_eng, tg, tx, tw, fresh, NULL, -1.0f, &o), WGML_ERROR_INVALID_ARGUMENT,
                  "wgml_rms_norm_backward_with: eps");
    TH_EXPECT_ERR(wgml_rms_norm_backward_with(th_eng, tg, tx, tw, tg, NULL, 1e-5f, &o), WGML_ERROR_ALIAS,
                  "grad_in must not be the same tensor as grad_out");
    TH_CHECK(th_commands() == before, "rejected calls recorded commands");
    uint32_t *raw = (uint32_t *)th_read(fresh);
    for (size_t i = 0; i < n; i++) TH_CHECK(raw[i] == 0xFFFFFFFFu, "grad_in[%zu] written by a rejected call", i);
    free(raw); free(x); free(g); free(w); free(gin); free(gin_s); free(gw); free(gw_s);
    wgml_tensor_release(tx); wgml_tensor_release(tg); wgml_tensor_release(tw); wgml_tensor_release(tgin);
    wgml_tensor_release(fresh);
}

/* Both gradients against central differences of the double forward, L = sum(g * out). */
static void test_backward_finite_differences(void)
{
    static const struct { size_t rows, d; } fs[] = { { 1, 1 }, { 3, 7 }, { 2, 65 }, { 5, 4 } };
    for (size_t c = 0; c < sizeof fs / sizeof fs[0]; c++) {
        size_t rows = fs[c].rows, d = fs[c].d, n = rows * d;
        double eps = 1e-5;
        float *x = th_random(n, -2, 2), *g = th_random(n, -1, 1), *w = th_random(d, -1.5, 1.5);
        double *xd = th_alloc_d(n), *wd = th_alloc_d(d), *y = th_alloc_d(n), *fd = th_alloc_d(n), *fdw = th_alloc_d(d);
        double *gin_s = th_alloc_d(n), *gw_s = th_alloc_d(d);
        ref_rms_norm_backward(g, x, w, rows, d, eps, NULL, NULL, gin_s, gw_s);
        th_to_double(x, xd, n);
        th_to_double(w, wd, d);
        for (int pass = 0; pass < 2; pass++) {
            double *v = pass ? wd : xd, *dst = pass ? fdw : fd;
            size_t m = pass ? d : n;
            for (size_t i = 0; i < m; i++) {
                /* Richardson's (4 D(h/2) - D(h)) / 3 of central differences D: near x = 0
                   with d = 1 the third derivative is about 3 / eps^1.5, so D(h) alone errs
                   by up to half the tolerance; the extrapolation leaves O(h^4) */
                double keep = v[i], h = 1e-5 * (fabs(keep) > 1 ? fabs(keep) : 1), dh[2];
                for (int r = 0; r < 2; r++) {
                    double step = r ? h / 2 : h, l[2];
                    for (int s = 0; s < 2; s++) {
                        v[i] = keep + (s ? -step : step);
                        ref_rms_norm_d(xd, wd, rows, d, eps, y);
                        l[s] = 0;
                        for (size_t k = 0; k < n; k++) l[s] += g[k] * y[k];
                    }
                    dh[r] = (l[0] - l[1]) / (2 * step);
                }
                v[i] = keep;
                dst[i] = (4 * dh[1] - dh[0]) / 3;
            }
        }
        wgml_tensor *tx = th_tensor(WGML_F32, x, TH_SHAPE(rows, d)), *tg = th_tensor(WGML_F32, g, TH_SHAPE(rows, d));
        wgml_tensor *tw = th_tensor(WGML_F32, w, TH_SHAPE(d)), *tgin = th_poisoned(WGML_F32, TH_SHAPE(rows, d));
        wgml_tensor *tgw = th_poisoned(WGML_F32, TH_SHAPE(d));
        TH_EXPECT(wgml_rms_norm_backward(th_eng, tg, tx, tw, tgin, tgw, (float)eps), WGML_OK);
        float *got = th_read(tgin), *gotw = th_read(tgw);
        char what[80];
        /* the tolerance of the reference comparison plus the differences' own error (O(h^4)
           truncation and rounding, well under 1e-7 of the terms here) */
        snprintf(what, sizeof what, "grad_in vs finite differences %zu x %zu", rows, d);
        compare_scaled(what, got, fd, gin_s, n, 4 * norm_rtol(d) + 1e-7);
        snprintf(what, sizeof what, "grad_weight vs finite differences %zu x %zu", rows, d);
        compare_scaled(what, gotw, fdw, gw_s, d, dw_tol(rows, d) + 1e-7);
        free(x); free(g); free(w); free(xd); free(wd); free(y); free(fd); free(fdw); free(gin_s); free(gw_s);
        free(got); free(gotw);
        wgml_tensor_release(tx); wgml_tensor_release(tg); wgml_tensor_release(tw); wgml_tensor_release(tgin);
        wgml_tensor_release(tgw);
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
        ref_rms_norm(x, NULL, w, rows, d, 1e-5, ref, NULL);
        ref_rms_norm_backward(g, x, w, rows, d, 1e-5, gin, gw, gin_s, gw_s);
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
    { "backward", test_backward },
    { "backward_finite_differences", test_backward_finite_differences },
    { "backward_accumulate", test_backward_accumulate },
    { "robust", test_robust },
    { "bad_inputs", test_bad_inputs },
};
TH_MAIN(cases)
