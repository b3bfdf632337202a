/* wgml_dropout against the reference (tests/ref/ref_dropout.c, written from the rule in
   include/wgml.h) on awkward sizes, several p and seeds, in place and not; the kept
   fraction; p = 0 as a copy; the same seed giving the same decisions (the gradient is the
   same call) and another seed other ones. */
#include "harness.h"
#include "ref_dropout.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct drop_case { float p; uint64_t seed; } drop_case;

static wgml_status drop_call(const th_run *r)
{
    const drop_case *d = r->c->params;
    return wgml_dropout(th_eng, r->t_in[0], r->t_out[0], d->p, d->seed);
}
static wgml_status drop_inplace_call(const th_run *r)
{
    const drop_case *d = r->c->params;
    wgml_status s = wgml_copy_tensor(th_eng, r->t_in[0], r->t_out[0], 0);
    return s ? s : wgml_dropout(th_eng, r->t_out[0], r->t_out[0], d->p, d->seed);
}
static void drop_reference(const th_run *r)
{
    const drop_case *d = r->c->params;
    ref_dropout(TH_IN(r, 0), r->ref[0], r->n_in[0], d->p, d->seed);
}

/* Every element: exact zeros where dropped, x / (1 - p) rounded once where kept (the
   scale is rounded to f32 first: two roundings, within 2^-23 relative). A wrong decision
   is off by the whole value. */
static void test_against_reference(void)
{
    static const drop_case params[] = { { 0.0f, 1 }, { 0.1f, 7 }, { 0.5f, 0x123456789abcdefull }, { 0.9f, 42 },
                                        { 0.999f, 0xffffffffffffffffull } };
    for (size_t k = 0; k < th_awkward_count; k++)
        for (size_t q = 0; q < sizeof params / sizeof params[0]; q++)
            for (int inplace = 0; inplace < 2; inplace++) {
                size_t n = th_awkward_sizes[k];
                th_op_case c = { .nin = 1, .nout = 1, .call = inplace ? drop_inplace_call : drop_call,
                                 .reference = drop_reference, .atol = 0, .rtol = 2.4e-7, .params = &params[q],
                                 .in = { { .shape = { n }, .lo = -2, .hi = 2 } }, .out = { { .shape = { n } } } };
                snprintf(c.name, sizeof c.name, "dropout%s n=%zu p=%g seed=%llx", inplace ? " in place" : "", n,
                         params[q].p, (unsigned long long)params[q].seed);
                th_run_case(&c);
            }
}

/* The kept fraction of 2^20 elements is 1 - p within 6 standard deviations, for several
   seeds; p = 0 is a bitwise copy. */
static void test_statistics_and_copy(void)
{
    size_t n = (size_t)1 << 20;
    float *ones = th_alloc_f(n);
    for (size_t i = 0; i < n; i++) ones[i] = 1.0f;
    wgml_tensor *x = th_tensor(WGML_F32, ones, TH_SHAPE(n)), *out = th_poisoned(WGML_F32, TH_SHAPE(n));
    const float ps[] = { 0.05f, 0.3f, 0.5f, 0.8f };
    for (size_t q = 0; q < 4; q++)
        for (uint64_t seed = 1; seed <= 3; seed++) {
            TH_EXPECT(wgml_dropout(th_eng, x, out, ps[q], seed * 0x9e3779b97f4a7c15ull), WGML_OK);
            float *got = th_read(out);
            size_t kept = 0;
            for (size_t i = 0; i < n; i++) kept += got[i] != 0.0f;
            double want = (1.0 - ps[q]) * (double)n, sd = sqrt((double)n * ps[q] * (1.0 - ps[q]));
            TH_CHECK(fabs((double)kept - want) <= 6 * sd, "p %g seed %llu: %zu of %zu kept, want %.0f +- %.0f", ps[q],
                     (unsigned long long)seed, kept, n, want, 6 * sd);
            free(got);
        }
    float *r = th_random(n, -1e30, 1e30);
    wgml_tensor *xr = th_tensor(WGML_F32, r, TH_SHAPE(n));
    TH_EXPECT(wgml_dropout(th_eng, xr, out, 0.0f, 5), WGML_OK);
    float *got = th_read(out);
    TH_CHECK(memcmp(got, r, n * sizeof(float)) == 0, "p = 0 is not a copy");
    free(got);
    free(r);
    free(ones);
    wgml_tensor_release(x);
    wgml_tensor_release(xr);
    wgml_tensor_release(out);
}

/* The same seed drops the same elements of any tensor of the same size (so dropout of
   the gradient matches the forward's), another seed other ones. */
static void test_seed(void)
{
    size_t n = 4097;
    float *a = th_random(n, 0.5, 1), *b = th_random(n, -3, -1);
    wgml_tensor *ta = th_tensor(WGML_F32, a, TH_SHAPE(n)), *tb = th_tensor(WGML_F32, b, TH_SHAPE(17, 241));
    wgml_tensor *oa = th_poisoned(WGML_F32, TH_SHAPE(n)), *ob = th_poisoned(WGML_F32, TH_SHAPE(n));
    TH_EXPECT(wgml_dropout(th_eng, ta, oa, 0.4f, 99), WGML_OK);
    TH_EXPECT(wgml_dropout(th_eng, tb, ob, 0.4f, 99), WGML_OK);
    float *ga = th_read(oa), *gb = th_read(ob);
    size_t same = 0;
    for (size_t i = 0; i < n; i++) same += (ga[i] == 0) == (gb[i] == 0);
    TH_CHECK(same == n, "one seed dropped different elements of two tensors (%zu of %zu agree)", same, n);
    TH_EXPECT(wgml_dropout(th_eng, ta, ob, 0.4f, 100), WGML_OK);
    free(gb);
    gb = th_read(ob);
    same = 0;
    for (size_t i = 0; i < n; i++) same += (ga[i] == 0) == (gb[i] == 0);
    TH_CHECK(same < n - n / 8, "seeds 99 and 100 dropped nearly the same elements (%zu of %zu agree)", same, n);
    free(ga); free(gb); free(a); free(b);
    wgml_tensor_release(ta); wgml_tensor_release(tb); wgml_tensor_release(oa); wgml_tensor_release(ob);
}

static const th_case cases[] = {
    { "against reference", test_against_reference },
    { "statistics and copy", test_statistics_and_copy },
    { "seed", test_seed },
};

TH_MAIN(cases)
