/* The shared test harness (see harness.h). */
#include "harness.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

wgml_context *th_ctx;
wgml_engine *th_eng;

static int passed, failed;
static const char *current_case = "";
static uint64_t rng_state, seed_used;

const size_t th_awkward_sizes[] = { 1, 3, 7, 63, 65, 1000, 4097, (1u << 20) + 3 };
const size_t th_awkward_count = sizeof th_awkward_sizes / sizeof th_awkward_sizes[0];

void th_check_impl(bool ok, const char *file, int line, const char *fmt, ...)
{
    if (ok) { passed++; return; }
    failed++;
    fprintf(stderr, "FAIL [%s] %s:%d: ", current_case, file, line);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

void th_expect_impl(wgml_status got, wgml_status want, const char *expr, const char *file, int line)
{
    th_check_impl(got == want, file, line, "%s returned %s, expected %s (%s)", expr, wgml_status_string(got),
                  wgml_status_string(want), wgml_last_error(th_ctx));
}

void th_expect_err_impl(wgml_status got, wgml_status want, const char *needle, const char *expr, const char *file, int line)
{
    /* Calls without a usable context (a NULL engine) report through wgml_last_error(NULL). */
    const char *msg = wgml_last_error(th_ctx);
    if (!strstr(msg, needle) && strstr(wgml_last_error(NULL), needle)) msg = wgml_last_error(NULL);
    th_check_impl(got == want && strstr(msg, needle) != NULL, file, line,
                  "%s returned %s with message \"%s\"; expected %s naming \"%s\"", expr, wgml_status_string(got), msg,
                  wgml_status_string(want), needle);
}

bool th_compare(const char *what, const float *got, const double *ref, size_t n, double atol, double rtol)
{
    size_t bad = 0, worst = 0;
    double worst_excess = -1;
    for (size_t i = 0; i < n; i++) {
        double g = got[i], r = ref[i];
        double tol = atol + rtol * fabs(r);
        bool ok;
        double excess;
        if (isnan(r)) { ok = isnan(g); excess = ok ? 0 : INFINITY; }
        else if (isinf(r)) { ok = g == r; excess = ok ? 0 : INFINITY; }
        else { double d = fabs(g - r); ok = d <= tol; excess = isnan(d) ? INFINITY : d / (tol > 0 ? tol : 1e-300); }
        if (excess > worst_excess) { worst_excess = excess; worst = i; }
        if (!ok) {
            if (bad < 10) fprintf(stderr, "  %s[%zu]: got %.9g, want %.9g (tol %.3g)\n", what, i, g, r, tol);
            bad++;
        }
    }
    th_check_impl(bad == 0, __FILE__, __LINE__, "%s: %zu of %zu elements out of tolerance (atol %.3g, rtol %.3g); worst [%zu] got %.9g want %.9g",
                  what, bad, n, atol, rtol, worst, n ? (double)got[worst] : 0.0, n ? ref[worst] : 0.0);
    return bad == 0;
}

bool th_compare_u32(const char *what, const uint32_t *got, const uint32_t *ref, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (got[i] != ref[i]) {
            if (bad < 10) fprintf(stderr, "  %s[%zu]: got %u, want %u\n", what, i, got[i], ref[i]);
            bad++;
        }
    th_check_impl(bad == 0, __FILE__, __LINE__, "%s: %zu of %zu elements differ", what, bad, n);
    return bad == 0;
}

/* splitmix64: small, good enough for test data, reproducible from one seed */
static uint64_t next_u64(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t th_seed(void) { return seed_used; }
uint32_t th_rand_u32(void) { return (uint32_t)(next_u64() >> 32); }
double th_uniform(double lo, double hi) { return lo + (hi - lo) * ((next_u64() >> 11) * (1.0 / 9007199254740992.0)); }

float *th_random(size_t n, double lo, double hi)
{
    float *p = th_alloc_f(n);
    for (size_t i = 0; i < n; i++) p[i] = (float)th_uniform(lo, hi);
    return p;
}

double *th_alloc_d(size_t n)
{
    double *p = malloc((n ? n : 1) * sizeof *p);
    if (!p) { fprintf(stderr, "out of host memory\n"); exit(2); }
    return p;
}

float *th_alloc_f(size_t n)
{
    float *p = malloc((n ? n : 1) * sizeof *p);
    if (!p) { fprintf(stderr, "out of host memory\n"); exit(2); }
    return p;
}

void th_to_double(const float *src, double *dst, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = src[i];
}

static uint32_t shape_ndim(const size_t *shape)
{
    uint32_t n = 0;
    while (shape[n]) n++;
    return n;
}

static void die(const char *what)
{
    fprintf(stderr, "FATAL [%s]: %s: %s\n", current_case, what, wgml_last_error(th_ctx));
    exit(2);
}

wgml_tensor *th_tensor(wgml_dtype dtype, const void *data, const size_t *shape)
{
    wgml_tensor *t;
    if (wgml_tensor_from_data(th_ctx, dtype, shape_ndim(shape), shape, data, &t) != WGML_OK) die("wgml_tensor_from_data");
    return t;
}

wgml_tensor *th_poisoned(wgml_dtype dtype, const size_t *shape)
{
    wgml_tensor *t;
    if (wgml_tensor_create(th_ctx, dtype, shape_ndim(shape), shape, &t) != WGML_OK) die("wgml_tensor_create");
    size_t nb = wgml_tensor_nbytes(t);
    void *p = malloc(nb);
    if (!p) die("malloc");
    memset(p, 0xFF, nb);
    if (wgml_tensor_write(t, 0, p, nb) != WGML_OK) die("wgml_tensor_write");
    free(p);
    return t;
}

void th_read_into(wgml_tensor *t, void *dst)
{
    if (wgml_tensor_read(t, 0, dst, wgml_tensor_nbytes(t)) != WGML_OK) die("wgml_tensor_read");
}

float *th_read(wgml_tensor *t)
{
    float *p = malloc(wgml_tensor_nbytes(t) + 4);
    if (!p) die("malloc");
    th_read_into(t, p);
    return p;
}

uint64_t th_commands(void)
{
    wgml_context_stats s;
    wgml_context_stats_get(th_ctx, &s);
    return s.commands;
}

/* ---- op cases ----------------------------------------------------------------------- */

static size_t io_numel(const th_io *io)
{
    size_t n = 1;
    for (uint32_t d = 0; io->shape[d]; d++) n *= io->shape[d];
    return n;
}

static void *random_input(const th_io *io, size_t n)
{
    if (io->dtype == WGML_U32) {
        uint32_t *p = malloc((n ? n : 1) * sizeof *p);
        if (!p) die("malloc");
        double span = io->hi - io->lo + 1;
        for (size_t i = 0; i < n; i++) p[i] = (uint32_t)(io->lo + floor(th_uniform(0, span)));
        return p;
    }
    return th_random(n, io->lo, io->hi);
}

/* Output o of a case against its reference, with the case's tolerance. */
static void compare_output(const th_run *r, int o, const float *got)
{
    const th_op_case *c = r->c;
    char what[160];
    snprintf(what, sizeof what, "%s out[%d]", c->name, o);
    if (!c->tol) {
        th_compare(what, got, r->ref[o], r->n_out[o], c->atol, c->rtol);
        return;
    }
    size_t bad = 0, worst = 0;
    double worst_ratio = -1;
    for (size_t i = 0; i < r->n_out[o]; i++) {
        double tol = c->tol(r, o, i), err = fabs((double)got[i] - r->ref[o][i]);
        double ratio = isnan(err) ? INFINITY : err / (tol > 0 ? tol : 1e-300);
        if (ratio > worst_ratio) { worst_ratio = ratio; worst = i; }
        if (!(err <= tol)) {
            if (bad < 10) fprintf(stderr, "  %s[%zu]: got %.9g, want %.9g (tol %.3g)\n", what, i, got[i], r->ref[o][i], tol);
            bad++;
        }
    }
    th_check_impl(bad == 0, __FILE__, __LINE__, "%s: %zu of %zu elements out of tolerance; worst [%zu] (%.2f x tol)", what,
                  bad, r->n_out[o], worst, worst_ratio);
}

bool th_run_case(const th_op_case *c)
{
    int f0 = failed;
    th_run r = { .c = c };
    for (int i = 0; i < c->nin; i++) {
        r.n_in[i] = io_numel(&c->in[i]);
        r.in[i] = random_input(&c->in[i], r.n_in[i]);
        r.t_in[i] = th_tensor(c->in[i].dtype, r.in[i], c->in[i].shape);
    }
    for (int o = 0; o < c->nout; o++) {
        r.n_out[o] = io_numel(&c->out[o]);
        r.t_out[o] = th_poisoned(c->out[o].dtype, c->out[o].shape);
        r.ref[o] = th_alloc_d(r.n_out[o]);
    }
    c->reference(&r);
    wgml_status s = c->call(&r);
    th_check_impl(s == WGML_OK, __FILE__, __LINE__, "%s returned %s (%s)", c->name, wgml_status_string(s),
                  wgml_last_error(th_ctx));
    for (int o = 0; o < c->nout && s == WGML_OK; o++) {
        float *got = th_read(r.t_out[o]);
        compare_output(&r, o, got);
        free(got);
    }
    for (int i = 0; i < c->nin && s == WGML_OK; i++) {
        if (c->aliased == i + 1) continue;
        size_t nb = r.n_in[i] * 4;
        void *after = malloc(nb ? nb : 1);
        if (!after) die("malloc");
        if (wgml_tensor_read(r.t_in[i], 0, after, nb) != WGML_OK) die("wgml_tensor_read");
        th_check_impl(memcmp(after, r.in[i], nb) == 0, __FILE__, __LINE__, "%s changed its input %d", c->name, i);
        free(after);
    }
    for (int i = 0; i < c->nin; i++) {
        free((void *)r.in[i]);
        wgml_tensor_release(r.t_in[i]);
    }
    for (int o = 0; o < c->nout; o++) {
        free(r.ref[o]);
        wgml_tensor_release(r.t_out[o]);
    }
    return failed == f0;
}

void th_run_cases(const th_op_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) th_run_case(&cases[i]);
}

void th_finite_diff(double (*f)(const double *x, const void *ctx), const void *ctx, double *x, size_t n, double h,
                    double *grad)
{
    for (size_t i = 0; i < n; i++) {
        double x0 = x[i], hi = h * (fabs(x0) > 1 ? fabs(x0) : 1);
        x[i] = x0 + hi;
        double fp = f(x, ctx);
        x[i] = x0 - hi;
        double fm = f(x, ctx);
        x[i] = x0;
        grad[i] = (fp - fm) / (2 * hi);
    }
}

/* Whether name contains one of the '|'-separated parts of filter ("" matches every name). */
static bool name_matches(const char *name, const char *filter)
{
    for (;;) {
        const char *bar = strchr(filter, '|');
        size_t len = bar ? (size_t)(bar - filter) : strlen(filter);
        for (const char *at = name; ; at++) {
            if (!strncmp(at, filter, len)) return true;
            if (!*at) break;
        }
        if (!bar) return false;
        filter = bar + 1;
    }
}

int th_main(const th_case *cases, size_t n, int argc, char **argv)
{
    const char *env = getenv("WGML_TEST_SEED");
    seed_used = env ? strtoull(env, NULL, 0) : ((uint64_t)time(NULL) * 2654435761u) ^ (uint64_t)clock();
    rng_state = seed_used;
    /* sanitized builds wait longer for the device: their runtime runs several times slower
       (a CPU adapter's default is 600000 ms) */
    wgml_context_desc desc = { .timeout_ms = WGML_TEST_TIMEOUT_SCALE > 1 ? 600000u * WGML_TEST_TIMEOUT_SCALE : 0 };
    if (wgml_context_create(&desc, &th_ctx) != WGML_OK) {
        fprintf(stderr, "cannot create a context: %s\n", wgml_last_error(NULL));
        return 2;
    }
    if (wgml_engine_create(th_ctx, &th_eng) != WGML_OK) die("wgml_engine_create");
    wgml_adapter_info info;
    wgml_context_info(th_ctx, &info);
    printf("%s: adapter \"%s\" (%s), seed %llu (WGML_TEST_SEED reproduces it)\n", argv[0], info.name, info.backend,
           (unsigned long long)seed_used);
    /* argv[1]: run the cases whose name contains it, or one of its '|'-separated parts;
       "!text": those whose name contains none */
    const char *filter = argc > 1 ? argv[1] : "";
    bool exclude = filter[0] == '!';
    if (exclude) filter++;
    for (size_t i = 0; i < n; i++) {
        if (name_matches(cases[i].name, filter) == exclude) continue;
        current_case = cases[i].name;
        int f0 = failed, p0 = passed;
        clock_t t0 = clock();
        cases[i].fn();
        if (wgml_context_sync(th_ctx) != WGML_OK) th_check_impl(false, __FILE__, __LINE__, "sync after case: %s", wgml_last_error(th_ctx));
        printf("  %-40s %s (%d checks, %.2f s cpu)\n", cases[i].name, failed == f0 ? "ok" : "FAILED", passed + failed - p0 - f0,
               (double)(clock() - t0) / CLOCKS_PER_SEC);
    }
    current_case = "teardown";
    wgml_context_stats s;
    wgml_context_stats_get(th_ctx, &s);
    th_check_impl(s.live_tensors == 0, __FILE__, __LINE__, "%ld tensors were not released", s.live_tensors);
    wgml_engine_destroy(th_eng);
    wgml_context_destroy(th_ctx);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
