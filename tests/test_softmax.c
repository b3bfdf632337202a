/* Softmax and its backward pass against the double reference on every path (register rows,
   long rows, split rows; vec4 and scalar units), logits of magnitude 1e4, -inf entries,
   fully masked rows, a spike at every kind of position, central finite differences, and
   bad inputs. Random logits on every shape are rows of an op case table; constructed
   logits (constant, masked, spikes), the backward pass (whose input is a softmax output)
   and a robust context are written out by hand. */
#include "harness.h"
#include "ref_softmax.h"

#include <stdlib.h>
#include <string.h>

#define U 0x1p-24   /* unit roundoff of f32 */

/* Upper bounds of how the kernel sums a row, mirroring the plan in src/ops/softmax.c:
   units per thread (mu) and chunks per row (K). A unit is 4 lanes when d % 4 == 0. */
static void summation_shape(size_t rows, size_t d, double *mu, double *K)
{
    size_t units = d % 4 == 0 ? d / 4 : d;
    *K = 1;
    if (units <= 2048) { *mu = 8; return; }
    size_t want = (1024 + rows - 1) / rows, most = (units + 1023) / 1024, k = want < most ? want : most;
    if (k <= 1) { *mu = (double)((units + 255) / 256); return; }
    size_t chunk = (units + k - 1) / k;
    *K = (double)((units + chunk - 1) / chunk);
    *mu = (double)((chunk + 255) / 256);
}

/* Per-element tolerance of softmax, from WGSL's accuracy rules. exp(t) is within
   (3 + 2|t|) ulp = (6 + 4|t|) u, and t = x - max carries |t| u from the subtraction. An
   output is exp(t_i) / S, where exp(t_i) may be a product of up to L exps (the register
   path's e * exp(m - max), online rescales, chunk combines) whose arguments add up to t_i
   because the running maxima only grow: (6 L + 5 |t_i|) u. S is a sum of such terms, so
   its relative error is their weighted mean plus the summation's: (4 mu + 30 + K) u for
   chains of 4 mu lanes per thread, the radix-16 fold of a segment (two chains of at most
   15 adds) and K chunks. Three more roundings
   (division, product). Near zero, a flush of subnormals: 2e-38 absolute. */
static void softmax_tol(const float *x, const double *ref, size_t rows, size_t d, double *tol)
{
    double mu, K;
    summation_shape(rows, d, &mu, &K);
    double L = mu + 8 + K + 2;
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * d;
        double m = -INFINITY;
        for (size_t j = 0; j < d; j++)
            if (xr[j] > m) m = xr[j];
        double num = 0, den = 0;
        for (size_t j = 0; j < d; j++) {
            if (xr[j] == -INFINITY) continue;
            double t = fabs((double)xr[j] - m), e = exp(-t);
            num += (6 * L + 5 * t) * e;
            den += e;
        }
        double rel_s = (den > 0 ? num / den : 0) * U + (4 * mu + 30 + K) * U;
        for (size_t j = 0; j < d; j++) {
            double t = xr[j] == -INFINITY ? 0 : fabs((double)xr[j] - m);
            tol[r * d + j] = fabs(ref[r * d + j]) * ((6 * L + 5 * t) * U + rel_s + 3 * U) + 2e-38;
        }
    }
}

/* |got - ref| <= tol[i], element by element, reporting the worst. */
static void compare_tol(const char *what, const float *got, const double *ref, const double *tol, size_t n)
{
    size_t bad = 0, worst = 0;
    double worst_ratio = -1;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - ref[i]);
        double ratio = isnan(err) ? INFINITY : err / tol[i];
        if (ratio > worst_ratio) { worst_ratio = ratio; worst = i; }
        if (!(err <= tol[i])) {
            if (bad < 10) fprintf(stderr, "  %s[%zu]: got %.9g, want %.9g (tol %.3g)\n", what, i, got[i], ref[i], tol[i]);
            bad++;
        }
    }
    TH_CHECK(bad == 0, "%s: %zu of %zu elements out of tolerance; worst [%zu] got %.9g want %.9g (%.2f x tol)", what, bad, n,
             worst, n ? (double)got[worst] : 0.0, n ? ref[worst] : 0.0, worst_ratio);
}

/* Runs softmax on x [rows, d] and checks it; masked entries must come out exactly 0. */
static void check_softmax(const char *label, const float *x, size_t rows, size_t d)
{
    size_t n = rows * d;
    double *ref = th_alloc_d(n), *tol = th_alloc_d(n);
    ref_softmax(x, rows, d, ref);
    softmax_tol(x, ref, rows, d, tol);
    wgml_tensor *tx = th_tensor(WGML_F32, x, TH_SHAPE(rows, d)), *out = th_poisoned(WGML_F32, TH_SHAPE(rows, d));
    TH_EXPECT(wgml_softmax(th_eng, tx, out), WGML_OK);
    float *got = th_read(out);
    char what[128];
    snprintf(what, sizeof what, "softmax %s %zu x %zu", label, rows, d);
    compare_tol(what, got, ref, tol, n);
    size_t masked_bad = 0;
    for (size_t i = 0; i < n; i++)
        if (x[i] == -INFINITY && got[i] != 0.0f) masked_bad++;
    TH_CHECK(masked_bad == 0, "%s: %zu masked entries are not exactly 0", what, masked_bad);
    free(ref); free(tol); free(got);
    wgml_tensor_release(tx); wgml_tensor_release(out);
}

/* ---- the op case table: softmax of random logits ------------------------------------ */

/* The reference leaves the per-element tolerance (softmax_tol) here for case_tol. */
static double *case_tol_buf;

static wgml_status case_call(const th_run *r) { return wgml_softmax(th_eng, r->t_in[0], r->t_out[0]); }

static void case_reference(const th_run *r)
{
    const size_t *rd = r->c->params;   /* rows, d */
    case_tol_buf = th_alloc_d(r->n_in[0]);
    ref_softmax(TH_IN(r, 0), rd[0], rd[1], r->ref[0]);
    softmax_tol(TH_IN(r, 0), r->ref[0], rd[0], rd[1], case_tol_buf);
}

static double case_tol(const th_run *r, int o, size_t i)
{
    (void)r; (void)o;
    return case_tol_buf[i];
}

/* Softmax of x [rows, d] (in shape x_shape, out flat when flat_out) drawn from [lo, hi]. */
static void run_softmax(size_t rows, size_t d, double lo, double hi, const size_t *x_shape, bool flat_out)
{
    const size_t rd[2] = { rows, d };
    th_op_case c = { .nin = 1, .nout = 1, .call = case_call, .reference = case_reference, .tol = case_tol, .params = rd,
                     .in = { { .shape = { rows, d }, .lo = lo, .hi = hi } }, .out = { { .shape = { rows, d } } } };
    if (x_shape) memcpy(c.in[0].shape, x_shape, sizeof c.in[0].shape);
    if (flat_out) c.out[0] = (th_io){ .shape = { rows * d } };
    snprintf(c.name, sizeof c.name, "softmax uniform(%g,%g) %zu x %zu", lo, hi, rows, d);
    th_run_case(&c);
    free(case_tol_buf);
    case_tol_buf = NULL;
}

/* (rows, d): register rows with 1..8 units per thread and several rows per workgroup,
   scalar units (d % 4 != 0), long rows (>= 1024 of them, vec4 and scalar), split rows
   (few long rows: 262,144 entries, scalar 262,143), and rows past one grid dimension. */
static const struct { size_t rows, d; } shapes[] = {
    { 1, 1 }, { 3, 3 }, { 65, 7 }, { 3, 63 }, { 65, 65 }, { 7, 1000 }, { 2, 4096 }, { 2, 8192 },
    { 3, 4097 }, { 1, 262144 }, { 2, 262143 }, { 1030, 2049 }, { 1024, 8196 }, { 300, 64 }, { 70000, 4 },
};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

static void test_shapes(void)
{
    for (size_t c = 0; c < NSHAPES; c++) run_softmax(shapes[c].rows, shapes[c].d, -10, 10, NULL, false);
}

/* Logits of magnitude 1e4: exp() only ever sees x - max <= 0. Also large values with small
   differences, and rows of one repeated large value (exactly uniform output). */
static void test_large_logits(void)
{
    for (size_t c = 0; c < NSHAPES; c++) {
        size_t rows = shapes[c].rows, d = shapes[c].d, n = rows * d;
        if (n > 3000000) continue;
        run_softmax(rows, d, -1e4, 1e4, NULL, false);
        run_softmax(rows, d, 1e4 - 8, 1e4 + 8, NULL, false);
        float *x = th_alloc_f(n);
        for (size_t i = 0; i < n; i++) x[i] = (i / d) % 2 ? -1e4f : 1e4f;
        check_softmax("constant +-1e4", x, rows, d);
        free(x);
    }
}

/* -inf entries: a random quarter of the entries, rows with one live entry (output exactly
   1 there), fully masked rows (zeros, not NaN), and masked entries next to huge values. */
static void test_masked(void)
{
    for (size_t c = 0; c < NSHAPES; c++) {
        size_t rows = shapes[c].rows, d = shapes[c].d, n = rows * d;
        if (n > 3000000) continue;
        float *x = th_random(n, -30, 30);
        for (size_t i = 0; i < n; i++)
            if (th_rand_u32() % 4 == 0) x[i] = -INFINITY;
        for (size_t r = 0; r < rows; r++) {
            float *row = x + r * d;
            if (r % 3 == 1)
                for (size_t j = 0; j < d; j++) row[j] = -INFINITY;   /* fully masked */
            if (r % 3 == 2) {                                        /* one live entry */
                for (size_t j = 0; j < d; j++) row[j] = -INFINITY;
                row[th_rand_u32() % d] = (float)th_uniform(-1e4, 1e4);
            }
        }
        check_softmax("masked", x, rows, d);
        float *y;
        wgml_tensor *tx = th_tensor(WGML_F32, x, TH_SHAPE(rows, d)), *out = th_poisoned(WGML_F32, TH_SHAPE(n));
        TH_EXPECT(wgml_softmax(th_eng, tx, out), WGML_OK);
        y = th_read(out);
        size_t nan = 0, not_one = 0;
        for (size_t i = 0; i < n; i++) nan += isnan(y[i]);
        for (size_t r = 2; r < rows; r += 3)
            for (size_t j = 0; j < d; j++)
                if (x[r * d + j] != -INFINITY && y[r * d + j] != 1.0f) not_one++;
        TH_CHECK(nan == 0, "masked %zu x %zu: %zu NaN outputs", rows, d, nan);
        TH_CHECK(not_one == 0, "masked %zu x %zu: %zu rows with one live entry did not give exactly 1", rows, d, not_one);
        free(x); free(y);
        wgml_tensor_release(tx); wgml_tensor_release(out);
    }
}

/* A single large entry among zeros at the first, last and chunk-boundary positions: a
   kernel that skipped or double-counted any unit would move the spike's probability. */
static void test_spike_positions(void)
{
    static const struct { size_t rows, d; } ss[] = { { 1, 262144 }, { 2, 262143 }, { 3, 4097 }, { 1030, 2049 }, { 2, 8192 } };
    for (size_t c = 0; c < sizeof ss / sizeof ss[0]; c++) {
        size_t rows = ss[c].rows, d = ss[c].d, n = rows * d;
        size_t pos[] = { 0, d - 1, d / 2, d / 3, (d / 4) * 3 + 1, th_rand_u32() % d };
        float *x = th_alloc_f(n);
        for (size_t k = 0; k < sizeof pos / sizeof pos[0]; k++) {
            memset(x, 0, n * sizeof *x);
            for (size_t r = 0; r < rows; r++) x[r * d + (pos[k] + r) % d] = 12.0f;
            char label[64];
            snprintf(label, sizeof label, "spike at %zu", pos[k]);
            check_softmax(label, x, rows, d);
        }
        free(x);
    }
}

/* More row blocks than one grid dimension holds: 256 one-element rows per workgroup,
   65536 * 256 + 300 rows (a 2-D grid whose last row is partly past the end). Every output
   is 1, or 0 where the entry is -inf. */
static void test_grid_2d(void)
{
    size_t rows = 65536u * 256u + 300u;
    float *x = th_random(rows, -1e4, 1e4);
    for (size_t i = 0; i < rows; i += 5) x[i] = -INFINITY;
    double *ref = th_alloc_d(rows);
    ref_softmax(x, rows, 1, ref);
    wgml_tensor *tx = th_tensor(WGML_F32, x, TH_SHAPE(rows, 1)), *out = th_poisoned(WGML_F32, TH_SHAPE(rows, 1));
    TH_EXPECT(wgml_softmax(th_eng, tx, out), WGML_OK);
    float *got = th_read(out);
    th_compare("softmax over a 2-D grid", got, ref, rows, 0, 0);
    free(x); free(ref); free(got);
    wgml_tensor_release(tx); wgml_tensor_release(out);
}

/* Any rank: softmax runs over the last dimension. */
static void test_rank(void)
{
    run_softmax(2 * 3 * 4, 33, -5, 5, (const size_t[5]){ 2, 3, 4, 33 }, true);
}

/* gin = y (g - sum(g y)): the sum has the chain of the forward's (4 mu + 8 + K) terms over
   sum |g y|, the difference and the product one rounding each; gin_scale = |y| (|g| +
   sum |g y|) bounds the size of what is rounded. */
static void backward_case(size_t rows, size_t d, bool masked)
{
    size_t n = rows * d;
    float *x = th_random(n, -6, 6), *g = th_random(n, -1, 1), *y = th_alloc_f(n);
    if (masked)
        for (size_t i = 0; i < n; i++)
            if (th_rand_u32() % 3 == 0) x[i] = -INFINITY;
    double *yd = th_alloc_d(n), *gin = th_alloc_d(n), *scale = th_alloc_d(n);
    ref_softmax(x, rows, d, yd);
    for (size_t i = 0; i < n; i++) y[i] = (float)yd[i];
    ref_softmax_backward(g, y, rows, d, gin, scale);
    double mu, K;
    summation_shape(rows, d, &mu, &K);
    for (size_t i = 0; i < n; i++) scale[i] = scale[i] * (4 * mu + 30 + K + 3) * U + 1e-38;
    wgml_tensor *tg = th_tensor(WGML_F32, g, TH_SHAPE(rows, d)), *ty = th_tensor(WGML_F32, y, TH_SHAPE(rows, d));
    wgml_tensor *tgin = th_poisoned(WGML_F32, TH_SHAPE(rows, d));
    TH_EXPECT(wgml_softmax_backward(th_eng, tg, ty, tgin), WGML_OK);
    float *got = th_read(tgin);
    char what[96];
    snprintf(what, sizeof what, "softmax_backward%s %zu x %zu", masked ? " masked" : "", rows, d);
    compare_tol(what, got, gin, scale, n);
    free(x); free(g); free(y); free(yd); free(gin); free(scale); free(got);
    wgml_tensor_release(tg); wgml_tensor_release(ty); wgml_tensor_release(tgin);
}

static void test_backward(void)
{
    for (size_t c = 0; c < NSHAPES; c++) {
        backward_case(shapes[c].rows, shapes[c].d, false);
        if (shapes[c].rows * shapes[c].d < 3000000) backward_case(shapes[c].rows, shapes[c].d, true);
    }
}

/* L = sum(g * softmax(x)) in double, for th_finite_diff. */
typedef struct sm_loss { const float *g; size_t rows, d; double *y; } sm_loss;

static double softmax_loss(const double *x, const void *ctx)
{
    const sm_loss *l = ctx;
    ref_softmax_d(x, l->rows, l->d, l->y);
    double s = 0;
    for (size_t k = 0; k < l->rows * l->d; k++) s += l->g[k] * l->y[k];
    return s;
}

/* The backward pass of y = softmax(x) against central differences of L = sum(g * y) in
   double. The kernel sees y rounded to f32 (u relative), hence 2u more. The differences'
   steps, 1e-5 max(1, |x|) <= 4e-5, leave h^2 |L'''| / 6 < 3e-10 of truncation and about
   1e-16 |L| / h < 1e-10 of rounding: under the 1e-9 floor. */
static void test_backward_finite_differences(void)
{
    static const struct { size_t rows, d; } fs[] = { { 1, 1 }, { 3, 7 }, { 2, 65 }, { 4, 8 } };
    for (size_t c = 0; c < sizeof fs / sizeof fs[0]; c++) {
        size_t rows = fs[c].rows, d = fs[c].d, n = rows * d;
        float *x = th_random(n, -4, 4), *g = th_random(n, -1, 1), *y = th_alloc_f(n);
        double *xd = th_alloc_d(n), *yd = th_alloc_d(n), *fd = th_alloc_d(n), *scale = th_alloc_d(n);
        th_to_double(x, xd, n);
        ref_softmax_d(xd, rows, d, yd);
        for (size_t i = 0; i < n; i++) y[i] = (float)yd[i];
        sm_loss l = { g, rows, d, yd };
        th_finite_diff(softmax_loss, &l, xd, n, 1e-5, fd);
        ref_softmax_backward(g, y, rows, d, NULL, scale);
        for (size_t i = 0; i < n; i++) scale[i] = scale[i] * (8 + 8 + 1 + 3 + 2) * U + 1e-9;
        wgml_tensor *tg = th_tensor(WGML_F32, g, TH_SHAPE(rows, d)), *ty = th_tensor(WGML_F32, y, TH_SHAPE(rows, d));
        wgml_tensor *tgin = th_poisoned(WGML_F32, TH_SHAPE(rows, d));
        TH_EXPECT(wgml_softmax_backward(th_eng, tg, ty, tgin), WGML_OK);
        float *got = th_read(tgin);
        char what[80];
        snprintf(what, sizeof what, "softmax_backward vs finite differences %zu x %zu", rows, d);
        compare_tol(what, got, fd, scale, n);
        free(x); free(g); free(y); free(xd); free(yd); free(fd); free(scale); free(got);
        wgml_tensor_release(tg); wgml_tensor_release(ty); wgml_tensor_release(tgin);
    }
}

static void test_bad_inputs(void)
{
    float z[64] = { 0 };
    wgml_tensor *x = th_tensor(WGML_F32, z, TH_SHAPE(4, 8)), *x31 = th_tensor(WGML_F32, z, TH_SHAPE(31));
    wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(32)), *g = th_tensor(WGML_F32, z, TH_SHAPE(32));
    wgml_tensor *u = th_tensor(WGML_U32, z, TH_SHAPE(32));
    wgml_context *other;
    TH_EXPECT(wgml_context_create(NULL, &other), WGML_OK);
    wgml_tensor *foreign;
    TH_EXPECT(wgml_tensor_from_data(other, WGML_F32, 1, (size_t[]){ 32 }, z, &foreign), WGML_OK);
    uint64_t before = th_commands();
    TH_EXPECT_ERR(wgml_softmax(NULL, x, out), WGML_ERROR_INVALID_ARGUMENT, "engine");
    TH_EXPECT_ERR(wgml_softmax(th_eng, NULL, out), WGML_ERROR_INVALID_ARGUMENT, "input is NULL");
    TH_EXPECT_ERR(wgml_softmax(th_eng, x, NULL), WGML_ERROR_INVALID_ARGUMENT, "out is NULL");
    TH_EXPECT_ERR(wgml_softmax(th_eng, u, out), WGML_ERROR_DTYPE, "input is u32");
    TH_EXPECT_ERR(wgml_softmax(th_eng, x, u), WGML_ERROR_DTYPE, "out is u32");
    TH_EXPECT_ERR(wgml_softmax(th_eng, x, x31), WGML_ERROR_SHAPE, "out has 31 elements");
    TH_EXPECT_ERR(wgml_softmax(th_eng, foreign, out), WGML_ERROR_CONTEXT, "input belongs to another context");
    TH_EXPECT_ERR(wgml_softmax(th_eng, x, x), WGML_ERROR_ALIAS, "out must not be the same tensor as input");
    TH_EXPECT_ERR(wgml_softmax_backward(NULL, g, x, out), WGML_ERROR_INVALID_ARGUMENT, "engine");
    TH_EXPECT_ERR(wgml_softmax_backward(th_eng, NULL, x, out), WGML_ERROR_INVALID_ARGUMENT, "grad_out is NULL");
    TH_EXPECT_ERR(wgml_softmax_backward(th_eng, g, NULL, out), WGML_ERROR_INVALID_ARGUMENT, "final_out is NULL");
    TH_EXPECT_ERR(wgml_softmax_backward(th_eng, g, x, NULL), WGML_ERROR_INVALID_ARGUMENT, "grad_in is NULL");
    TH_EXPECT_ERR(wgml_softmax_backward(th_eng, u, x, out), WGML_ERROR_DTYPE, "grad_out is u32");
    TH_EXPECT_ERR(wgml_softmax_backward(th_eng, g, x, u), WGML_ERROR_DTYPE, "grad_in is u32");
    TH_EXPECT_ERR(wgml_softmax_backward(th_eng, x31, x, out), WGML_ERROR_SHAPE, "grad_out has 31 elements");
    TH_EXPECT_ERR(wgml_softmax_backward(th_eng, g, x, x31), WGML_ERROR_SHAPE, "grad_in has 31 elements");
    TH_EXPECT_ERR(wgml_softmax_backward(th_eng, g, foreign, out), WGML_ERROR_CONTEXT, "final_out belongs to another context");
    TH_EXPECT_ERR(wgml_softmax_backward(th_eng, g, x, g), WGML_ERROR_ALIAS, "grad_in must not be the same tensor as grad_out");
    TH_EXPECT_ERR(wgml_softmax_backward(th_eng, g, x, x), WGML_ERROR_ALIAS, "grad_in must not be the same tensor as final_out");
    TH_CHECK(th_commands() == before, "rejected calls recorded %llu commands", (unsigned long long)(th_commands() - before));
    uint32_t got[32];
    th_read_into(out, got);
    for (int i = 0; i < 32; i++) TH_CHECK(got[i] == 0xFFFFFFFFu, "out[%d] was written by a rejected call", i);
    wgml_tensor_release(foreign);
    wgml_context_destroy(other);
    wgml_tensor_release(x); wgml_tensor_release(x31); wgml_tensor_release(out); wgml_tensor_release(g);
    wgml_tensor_release(u);
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
    static const struct { size_t rows, d; } fs[] = { { 65, 7 }, { 5, 4096 }, { 1, 262144 } };
    for (size_t c = 0; c < sizeof fs / sizeof fs[0]; c++) {
        size_t rows = fs[c].rows, d = fs[c].d, n = rows * d;
        float *x = th_random(n, -10, 10), *g = th_random(n, -1, 1);
        for (size_t i = 0; i < n; i += 7) x[i] = -INFINITY;
        double *ref = th_alloc_d(n), *tol = th_alloc_d(n), *gin = th_alloc_d(n), *scale = th_alloc_d(n);
        ref_softmax(x, rows, d, ref);
        softmax_tol(x, ref, rows, d, tol);
        float *y = th_alloc_f(n), *got = th_alloc_f(n), *gotin = th_alloc_f(n);
        for (size_t i = 0; i < n; i++) y[i] = (float)ref[i];
        ref_softmax_backward(g, y, rows, d, gin, scale);
        double mu, K;
        summation_shape(rows, d, &mu, &K);
        for (size_t i = 0; i < n; i++) scale[i] = scale[i] * (4 * mu + 30 + K + 3) * U + 1e-38;
        wgml_tensor *tx, *tg, *ty, *out, *tgin;
        size_t shape[2] = { rows, d };
        TH_EXPECT(wgml_tensor_from_data(ctx, WGML_F32, 2, shape, x, &tx), WGML_OK);
        TH_EXPECT(wgml_tensor_from_data(ctx, WGML_F32, 2, shape, g, &tg), WGML_OK);
        TH_EXPECT(wgml_tensor_from_data(ctx, WGML_F32, 2, shape, y, &ty), WGML_OK);
        TH_EXPECT(wgml_tensor_create(ctx, WGML_F32, 2, shape, &out), WGML_OK);
        TH_EXPECT(wgml_tensor_create(ctx, WGML_F32, 2, shape, &tgin), WGML_OK);
        TH_EXPECT(wgml_softmax(eng, tx, out), WGML_OK);
        TH_EXPECT(wgml_softmax_backward(eng, tg, ty, tgin), WGML_OK);
        TH_EXPECT(wgml_tensor_read(out, 0, got, n * 4), WGML_OK);
        TH_EXPECT(wgml_tensor_read(tgin, 0, gotin, n * 4), WGML_OK);
        char what[80];
        snprintf(what, sizeof what, "robust softmax %zu x %zu", rows, d);
        compare_tol(what, got, ref, tol, n);
        snprintf(what, sizeof what, "robust softmax_backward %zu x %zu", rows, d);
        compare_tol(what, gotin, gin, scale, n);
        free(x); free(g); free(y); free(ref); free(tol); free(gin); free(scale); free(got); free(gotin);
        wgml_tensor_release(tx); wgml_tensor_release(tg); wgml_tensor_release(ty); wgml_tensor_release(out);
        wgml_tensor_release(tgin);
    }
    wgml_engine_destroy(eng);
    wgml_context_destroy(ctx);
}

static const th_case cases[] = {
    { "shapes", test_shapes },
    { "large_logits", test_large_logits },
    { "masked", test_masked },
    { "spike_positions", test_spike_positions },
    { "rank", test_rank },
    { "grid_2d", test_grid_2d },
    { "backward", test_backward },
    { "backward_finite_differences", test_backward_finite_differences },
    { "robust", test_robust },
    { "bad_inputs", test_bad_inputs },
};
TH_MAIN(cases)
