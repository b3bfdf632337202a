/* wgml_conv1d against the double reference on awkward shapes (rows shorter than a vec4,
   rows that start mid-vec4, one long row, many rows), and its bad inputs; the causal
   convolution and its backward against the double reference (itself checked against
   finite differences), accumulation, values worked by hand and bad inputs. */
#include "harness.h"
#include "ref_conv.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Inputs, weights and bias in [-1, 1]: the sum of three products and a bias rounds in f32 to
   within about 4 * 2^-24 of the sum of the magnitudes (<= 4): atol 1e-6, plus rtol 1e-6. */
#define ATOL 1e-6
#define RTOL 1e-6

static wgml_status conv_call(const th_run *r)
{
    return wgml_conv1d(th_eng, r->t_in[0], r->t_in[1], r->t_in[2], r->t_out[0]);
}

static void conv_reference(const th_run *r)
{
    const th_io *x = &r->c->in[0];
    ref_conv1d(TH_IN(r, 0), TH_IN(r, 1), TH_IN(r, 2), r->ref[0], x->shape[0], x->shape[1]);
}

static void test_awkward_shapes(void)
{
    static const size_t shapes[][2] = {
        { 1, 1 }, { 3, 1 }, { 1, 2 }, { 5, 2 }, { 1, 3 }, { 7, 3 }, { 2, 4 }, { 3, 5 }, { 63, 7 },
        { 5, 63 }, { 3, 65 }, { 4, 1000 }, { 1, 4097 }, { 4097, 1 }, { 1024, 1025 }, { 3, (1u << 20) / 3 + 7 },
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        size_t dim = shapes[i][0], seq = shapes[i][1];
        th_op_case c = { .nin = 3, .nout = 1, .call = conv_call, .reference = conv_reference, .atol = ATOL, .rtol = RTOL,
                         .in = { { .shape = { dim, seq }, .lo = -1, .hi = 1 }, { .shape = { dim, 3 }, .lo = -1, .hi = 1 },
                                 { .shape = { dim }, .lo = -1, .hi = 1 } },
                         .out = { { .shape = { dim, seq } } } };
        snprintf(c.name, sizeof c.name, "conv1d dim=%zu seq=%zu", dim, seq);
        th_run_case(&c);
    }
}

/* Two rows of three worked out by hand: the padding zeroes each row's outer neighbours. */
static void test_known_values(void)
{
    const float x[] = { 1, 2, 3, 4, 5, 6 };                /* [2, 3] */
    const float w[] = { 1, 10, 100, -1, 0.5f, 2 };         /* [2, 3] */
    const float b[] = { 0.25f, -3 };
    const double want[] = { 0.25 + 10 + 200, 0.25 + 1 + 20 + 300, 0.25 + 2 + 30,
                            -3 + 2 + 10, -3 - 4 + 2.5 + 12, -3 - 5 + 3 };
    wgml_tensor *tx = th_tensor(WGML_F32, x, TH_SHAPE(2, 3)), *tw = th_tensor(WGML_F32, w, TH_SHAPE(2, 3));
    wgml_tensor *tb = th_tensor(WGML_F32, b, TH_SHAPE(2)), *out = th_poisoned(WGML_F32, TH_SHAPE(2, 3));
    TH_EXPECT(wgml_conv1d(th_eng, tx, tw, tb, out), WGML_OK);
    float got[6];
    th_read_into(out, got);
    th_compare("conv1d by hand", got, want, 6, 0, 0);
    wgml_tensor_release(tx); wgml_tensor_release(tw); wgml_tensor_release(tb); wgml_tensor_release(out);
}

static void test_bad_inputs(void)
{
    float z[64] = { 0 };
    wgml_context *other;
    TH_EXPECT(wgml_context_create(NULL, &other), WGML_OK);
    wgml_tensor *foreign;
    TH_EXPECT(wgml_tensor_from_data(other, WGML_F32, 2, (size_t[]){ 4, 3 }, z, &foreign), WGML_OK);
    wgml_tensor *x = th_tensor(WGML_F32, z, TH_SHAPE(4, 3)), *w = th_tensor(WGML_F32, z, TH_SHAPE(4, 3));
    wgml_tensor *b = th_tensor(WGML_F32, z, TH_SHAPE(4)), *out = th_poisoned(WGML_F32, TH_SHAPE(4, 3));
    wgml_tensor *u = th_tensor(WGML_U32, z, TH_SHAPE(4, 3)), *flat = th_tensor(WGML_F32, z, TH_SHAPE(12));
    wgml_tensor *out_t = th_poisoned(WGML_F32, TH_SHAPE(3, 4)), *w13 = th_tensor(WGML_F32, z, TH_SHAPE(13));
    wgml_tensor *b5 = th_tensor(WGML_F32, z, TH_SHAPE(5)), *x3d = th_tensor(WGML_F32, z, TH_SHAPE(1, 4, 3));
    uint64_t before = th_commands();
    TH_EXPECT_ERR(wgml_conv1d(NULL, x, w, b, out), WGML_ERROR_INVALID_ARGUMENT, "engine is NULL");
    TH_EXPECT_ERR(wgml_conv1d(th_eng, NULL, w, b, out), WGML_ERROR_INVALID_ARGUMENT, "input is NULL");
    TH_EXPECT_ERR(wgml_conv1d(th_eng, x, NULL, b, out), WGML_ERROR_INVALID_ARGUMENT, "weight is NULL");
    TH_EXPECT_ERR(wgml_conv1d(th_eng, x, w, NULL, out), WGML_ERROR_INVALID_ARGUMENT, "bias is NULL");
    TH_EXPECT_ERR(wgml_conv1d(th_eng, x, w, b, NULL), WGML_ERROR_INVALID_ARGUMENT, "out is NULL");
    TH_EXPECT_ERR(wgml_conv1d(th_eng, u, w, b, out), WGML_ERROR_DTYPE, "input is u32");
    TH_EXPECT_ERR(wgml_conv1d(th_eng, x, u, b, out), WGML_ERROR_DTYPE, "weight is u32");
    TH_EXPECT_ERR(wgml_conv1d(th_eng, x, w, u, out), WGML_ERROR_DTYPE, "bias is u32");
    TH_EXPECT_ERR(wgml_conv1d(th_eng, x, w, b, u), WGML_ERROR_DTYPE, "out is u32");
    TH_EXPECT_ERR(wgml_conv1d(th_eng, foreign, w, b, out), WGML_ERROR_CONTEXT, "input belongs to another context");
    TH_EXPECT_ERR(wgml_conv1d(th_eng, x, w, b, foreign), WGML_ERROR_CONTEXT, "out belongs to another context");
    TH_EXPECT_ERR(wgml_conv1d(th_eng, x, w, b, x), WGML_ERROR_ALIAS, "out must not be the same tensor as input");
    TH_EXPECT_ERR(wgml_conv1d(th_eng, x, w, b, w), WGML_ERROR_ALIAS, "out must not be the same tensor as weight");
    TH_EXPECT_ERR(wgml_conv1d(th_eng, x, w, b, b), WGML_ERROR_ALIAS, "out must not be the same tensor as bias");
    TH_EXPECT_ERR(wgml_conv1d(th_eng, flat, w, b, out), WGML_ERROR_SHAPE, "input has 1 dimensions");
    TH_EXPECT_ERR(wgml_conv1d(th_eng, x3d, w, b, out), WGML_ERROR_SHAPE, "input has 3 dimensions");
    TH_EXPECT_ERR(wgml_conv1d(th_eng, x, w, b, out_t), WGML_ERROR_SHAPE, "out must have input's shape [4, 3]");
    TH_EXPECT_ERR(wgml_conv1d(th_eng, x, w, b, flat), WGML_ERROR_SHAPE, "out must have input's shape");
    TH_EXPECT_ERR(wgml_conv1d(th_eng, x, w13, b, out), WGML_ERROR_SHAPE, "weight has 13 elements; it must have dim * 3 = 12");
    TH_EXPECT_ERR(wgml_conv1d(th_eng, x, w, b5, out), WGML_ERROR_SHAPE, "bias has 5 elements; it must have dim = 4");
    TH_CHECK(th_commands() == before, "rejected calls recorded %llu commands", (unsigned long long)(th_commands() - before));
    uint32_t got[12];
    th_read_into(out, got);
    for (int i = 0; i < 12; i++) TH_CHECK(got[i] == 0xFFFFFFFFu, "out[%d] was written by a rejected call", i);
    /* weight may have any shape with dim * 3 elements */
    TH_EXPECT(wgml_conv1d(th_eng, x, flat, b, out), WGML_OK);
    wgml_tensor *list[] = { x, w, b, out, u, flat, out_t, w13, b5, x3d, foreign };
    for (size_t i = 0; i < sizeof list / sizeof list[0]; i++) wgml_tensor_release(list[i]);
    wgml_context_destroy(other);
}

/* ---- causal ---------------------------------------------------------------------------- */

typedef struct causal_case { size_t batch, seq, dim, k; bool bias; } causal_case;

static wgml_status causal_call(const th_run *r)
{
    const causal_case *p = r->c->params;
    return wgml_conv1d_causal(th_eng, r->t_in[0], r->t_in[1], p->bias ? r->t_in[2] : NULL, r->t_out[0]);
}

static void causal_reference(const th_run *r)
{
    const causal_case *p = r->c->params;
    ref_conv1d_causal(TH_IN(r, 0), TH_IN(r, 1), p->bias ? TH_IN(r, 2) : NULL, r->ref[0], p->batch, p->seq, p->dim, p->k);
}

/* A sum of k + 1 terms of magnitude at most 1, added in f32: within (k + 1)^2 2^-24. */
static double causal_tol(const th_run *r, int o, size_t i)
{
    (void)o; (void)i;
    const causal_case *p = r->c->params;
    return (double)(p->k + 1) * (p->k + 1) * 0x1p-24;
}

static wgml_status causal_bwd_call(const th_run *r)
{
    return wgml_conv1d_causal_backward(th_eng, r->t_in[0], r->t_in[1], r->t_in[2], r->t_out[0], r->t_out[1], r->t_out[2],
                                       false);
}

static void causal_bwd_reference(const th_run *r)
{
    const causal_case *p = r->c->params;
    ref_conv1d_causal_backward(TH_IN(r, 0), TH_IN(r, 1), TH_IN(r, 2), r->ref[0], r->ref[1], r->ref[2], p->batch, p->seq,
                               p->dim, p->k);
}

/* dx: k terms, as the forward. dw and db: a sum over every row in order, within
   rows * 2^-24 * (the sum of the terms' magnitudes) (the bound of recursive summation). */
static double causal_bwd_tol(const th_run *r, int o, size_t i)
{
    const causal_case *p = r->c->params;
    if (o == 0) return (double)(p->k + 1) * (p->k + 1) * 0x1p-24;
    const float *x = TH_IN(r, 0), *g = TH_IN(r, 2);
    size_t d = o == 1 ? i / p->k : i, j = o == 1 ? i % p->k : 0, rows = p->batch * p->seq;
    double mag = 0;
    for (size_t row = 0; row < rows; row++) {
        size_t t = row % p->seq, back = p->k - 1 - j;
        if (o == 2) mag += fabs(g[row * p->dim + d]);
        else if (back <= t) mag += fabs((double)g[row * p->dim + d] * x[(row - back) * p->dim + d]);
    }
    return (double)rows * 0x1p-24 * mag + 0x1p-30;
}

static const causal_case causal_shapes[] = {
    { 1, 1, 1, 1, true }, { 1, 1, 3, 3, true }, { 2, 5, 3, 3, true }, { 3, 7, 65, 4, false }, { 1, 300, 17, 2, true },
    { 4, 33, 1, 16, true }, { 2, 64, 130, 3, false }, { 5, 2, 7, 3, true }, { 1, 1000, 5, 5, true },
};

static void test_causal(void)
{
    for (size_t i = 0; i < sizeof causal_shapes / sizeof causal_shapes[0]; i++) {
        const causal_case *p = &causal_shapes[i];
        th_op_case c = { .nin = p->bias ? 3 : 2, .nout = 1, .call = causal_call, .reference = causal_reference,
                         .tol = causal_tol, .params = p,
                         .in = { { .shape = { p->batch, p->seq, p->dim }, .lo = -1, .hi = 1 },
                                 { .shape = { p->dim, p->k }, .lo = -1, .hi = 1 }, { .shape = { p->dim }, .lo = -1, .hi = 1 } },
                         .out = { { .shape = { p->batch, p->seq, p->dim } } } };
        snprintf(c.name, sizeof c.name, "conv1d_causal batch=%zu seq=%zu dim=%zu k=%zu%s", p->batch, p->seq, p->dim, p->k,
                 p->bias ? " bias" : "");
        th_run_case(&c);
        th_op_case b = { .nin = 3, .nout = 3, .call = causal_bwd_call, .reference = causal_bwd_reference,
                         .tol = causal_bwd_tol, .params = p,
                         .in = { { .shape = { p->batch, p->seq, p->dim }, .lo = -1, .hi = 1 },
                                 { .shape = { p->dim, p->k }, .lo = -1, .hi = 1 },
                                 { .shape = { p->batch, p->seq, p->dim }, .lo = -1, .hi = 1 } },
                         .out = { { .shape = { p->batch, p->seq, p->dim } }, { .shape = { p->dim, p->k } },
                                  { .shape = { p->dim } } } };
        snprintf(b.name, sizeof b.name, "conv1d_causal_backward batch=%zu seq=%zu dim=%zu k=%zu", p->batch, p->seq, p->dim,
                 p->k);
        th_run_case(&b);
    }
}

/* The reference backward against central differences of the reference forward, for the
   loss sum(g * out): over x, weight and bias at once. */
typedef struct fd_ctx { const float *g; size_t batch, seq, dim, k; } fd_ctx;

static double causal_loss(const double *v, const void *ctxp)
{
    const fd_ctx *c = ctxp;
    size_t nx = c->batch * c->seq * c->dim, nw = c->dim * c->k;
    float *f = malloc(sizeof *f * (nx + nw + c->dim));
    double *out = malloc(sizeof *out * nx);
    for (size_t i = 0; i < nx + nw + c->dim; i++) f[i] = (float)v[i];
    ref_conv1d_causal(f, f + nx, f + nx + nw, out, c->batch, c->seq, c->dim, c->k);
    double l = 0;
    for (size_t i = 0; i < nx; i++) l += (double)c->g[i] * out[i];
    free(f);
    free(out);
    return l;
}

static void test_causal_reference_gradients(void)
{
    fd_ctx c = { .batch = 2, .seq = 5, .dim = 3, .k = 3 };
    size_t nx = c.batch * c.seq * c.dim, nw = c.dim * c.k, n = nx + nw + c.dim;
    float *x = th_random(n, -1, 1), *g = th_random(nx, -1, 1);
    /* values exact in f32, so the loss is linear in them with no rounding of the inputs */
    for (size_t i = 0; i < n; i++) x[i] = (float)(round(x[i] * 64) / 64);
    c.g = g;
    double *v = th_alloc_d(n), *fd = th_alloc_d(n), *ref = th_alloc_d(n);
    for (size_t i = 0; i < n; i++) v[i] = x[i];
    th_finite_diff(causal_loss, &c, v, n, 1.0 / 64, fd);
    ref_conv1d_causal_backward(x, x + nx, g, ref, ref + nx, ref + nx + nw, c.batch, c.seq, c.dim, c.k);
    float *got = th_alloc_f(n);
    for (size_t i = 0; i < n; i++) got[i] = (float)fd[i];
    th_compare("causal reference backward vs finite differences", got, ref, n, 1e-5, 1e-5);
    free(x); free(g); free(v); free(fd); free(ref); free(got);
}

/* One sequence of three worked out by hand, and accumulation into gradients already there. */
static void test_causal_known_values(void)
{
    const float x[] = { 1, 2, 3 }, w[] = { 1, 10, 100 }, b[] = { 0.5f }, g[] = { 1, -1, 2 };
    wgml_tensor *tx = th_tensor(WGML_F32, x, TH_SHAPE(3, 1)), *tw = th_tensor(WGML_F32, w, TH_SHAPE(1, 3));
    wgml_tensor *tb = th_tensor(WGML_F32, b, TH_SHAPE(1)), *tg = th_tensor(WGML_F32, g, TH_SHAPE(3, 1));
    wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(3, 1)), *dx = th_poisoned(WGML_F32, TH_SHAPE(3, 1));
    const float dw0[] = { 1, 1, 1 }, db0[] = { 3 };
    wgml_tensor *dw = th_tensor(WGML_F32, dw0, TH_SHAPE(1, 3)), *db = th_tensor(WGML_F32, db0, TH_SHAPE(1));
    TH_EXPECT(wgml_conv1d_causal(th_eng, tx, tw, tb, out), WGML_OK);
    float got[3];
    th_read_into(out, got);
    th_compare("conv1d_causal by hand", got, (const double[]){ 100.5, 210.5, 321.5 }, 3, 0, 0);
    TH_EXPECT(wgml_conv1d_causal_backward(th_eng, tx, tw, tg, dx, dw, db, true), WGML_OK);
    th_read_into(dx, got);
    /* dx[s] = sum over t >= s of w[2 - (t - s)] g[t] */
    th_compare("conv1d_causal dx by hand", got, (const double[]){ 100 - 10 + 2, -100 + 20, 200 }, 3, 0, 0);
    th_read_into(dw, got);
    /* dw[j] = sum_t g[t] x[t - 2 + j], plus the 1 already there */
    th_compare("conv1d_causal dw accumulated", got, (const double[]){ 1 + 2 * 1, 1 + (-1 * 1 + 2 * 2), 1 + (1 - 2 + 6) }, 3,
               0, 0);
    float gb;
    th_read_into(db, &gb);
    th_compare("conv1d_causal db accumulated", &gb, (const double[]){ 3 + 2 }, 1, 0, 0);
    wgml_tensor *ts[] = { tx, tw, tb, tg, out, dx, dw, db };
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) wgml_tensor_release(ts[i]);
}

static void test_causal_bad_inputs(void)
{
    float z[128] = { 0 };   /* the largest tensor below, [4, 17] */
    wgml_tensor *x = th_tensor(WGML_F32, z, TH_SHAPE(2, 3, 4)), *w = th_tensor(WGML_F32, z, TH_SHAPE(4, 3));
    wgml_tensor *b = th_tensor(WGML_F32, z, TH_SHAPE(4)), *out = th_poisoned(WGML_F32, TH_SHAPE(2, 3, 4));
    wgml_tensor *w17 = th_tensor(WGML_F32, z, TH_SHAPE(4, 17)), *w7 = th_tensor(WGML_F32, z, TH_SHAPE(7));
    wgml_tensor *b5 = th_tensor(WGML_F32, z, TH_SHAPE(5)), *x1 = th_tensor(WGML_F32, z, TH_SHAPE(24));
    wgml_tensor *out_t = th_poisoned(WGML_F32, TH_SHAPE(3, 2, 4)), *u = th_tensor(WGML_U32, z, TH_SHAPE(2, 3, 4));
    wgml_tensor *dw = th_poisoned(WGML_F32, TH_SHAPE(4, 3)), *dw5 = th_poisoned(WGML_F32, TH_SHAPE(5, 3));
    uint64_t before = th_commands();
    TH_EXPECT_ERR(wgml_conv1d_causal(NULL, x, w, b, out), WGML_ERROR_INVALID_ARGUMENT, "engine is NULL");
    TH_EXPECT_ERR(wgml_conv1d_causal(th_eng, NULL, w, b, out), WGML_ERROR_INVALID_ARGUMENT, "input is NULL");
    TH_EXPECT_ERR(wgml_conv1d_causal(th_eng, x, NULL, b, out), WGML_ERROR_INVALID_ARGUMENT, "weight is NULL");
    TH_EXPECT_ERR(wgml_conv1d_causal(th_eng, x, w, b, NULL), WGML_ERROR_INVALID_ARGUMENT, "out is NULL");
    TH_EXPECT_ERR(wgml_conv1d_causal(th_eng, u, w, b, out), WGML_ERROR_DTYPE, "input is u32");
    TH_EXPECT_ERR(wgml_conv1d_causal(th_eng, x, w17, b, out), WGML_ERROR_SHAPE, "K in 1 .. 16");
    TH_EXPECT_ERR(wgml_conv1d_causal(th_eng, x, w7, b, out), WGML_ERROR_SHAPE, "weight has 7 elements");
    TH_EXPECT_ERR(wgml_conv1d_causal(th_eng, x, w, b5, out), WGML_ERROR_SHAPE, "bias has 5");
    TH_EXPECT_ERR(wgml_conv1d_causal(th_eng, x1, w, b, out), WGML_ERROR_SHAPE, "1 dimensions");
    TH_EXPECT_ERR(wgml_conv1d_causal(th_eng, x, w, b, out_t), WGML_ERROR_SHAPE, "input's shape");
    TH_EXPECT_ERR(wgml_conv1d_causal(th_eng, x, w, b, x), WGML_ERROR_ALIAS, "out");
    TH_EXPECT_ERR(wgml_conv1d_causal_backward(th_eng, x, w, out, NULL, NULL, b, false), WGML_ERROR_INVALID_ARGUMENT,
                  "grad_bias needs grad_weight");
    TH_EXPECT_ERR(wgml_conv1d_causal_backward(th_eng, x, w, out, NULL, dw5, NULL, false), WGML_ERROR_SHAPE, "grad_weight");
    TH_EXPECT_ERR(wgml_conv1d_causal_backward(th_eng, x, w, out_t, NULL, dw, NULL, false), WGML_ERROR_SHAPE, "grad_out");
    TH_EXPECT_ERR(wgml_conv1d_causal_backward(th_eng, x, w, out, x, dw, NULL, false), WGML_ERROR_ALIAS, "grad_input");
    TH_EXPECT_ERR(wgml_conv1d_causal_backward(th_eng, x, w, out, out_t, dw, NULL, false), WGML_ERROR_SHAPE, "grad_input");
    TH_CHECK(th_commands() == before, "a rejected call recorded %llu commands", (unsigned long long)(th_commands() - before));
    wgml_tensor *ts[] = { x, w, b, out, w17, w7, b5, x1, out_t, u, dw, dw5 };
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) wgml_tensor_release(ts[i]);
}

static const th_case cases[] = {
    { "awkward_shapes", test_awkward_shapes },
    { "known_values", test_known_values },
    { "bad_inputs", test_bad_inputs },
    { "causal", test_causal },
    { "causal reference gradients", test_causal_reference_gradients },
    { "causal known values", test_causal_known_values },
    { "causal bad inputs", test_causal_bad_inputs },
};
TH_MAIN(cases)
