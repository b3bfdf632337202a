/* wgml_bias_add and wgml_bias_grad against the double reference on awkward shapes (one
   column, one row, columns that are not a multiple of 4, a long column sum), in place and
   accumulating, and their bad inputs. */
#include "harness.h"
#include "ref_bias.h"

#include <stdlib.h>
#include <string.h>

typedef struct shape { size_t rows, cols; } shape;

static wgml_status add_call(const th_run *r) { return wgml_bias_add(th_eng, r->t_in[0], r->t_in[1], r->t_out[0]); }
static wgml_status add_inplace_call(const th_run *r)
{
    /* the output is the input: copy x into it first, then add in place */
    wgml_status s = wgml_copy_tensor(th_eng, r->t_in[0], r->t_out[0], 0);
    return s ? s : wgml_bias_add(th_eng, r->t_out[0], r->t_in[1], r->t_out[0]);
}
static void add_reference(const th_run *r)
{
    const shape *s = r->c->params;
    ref_bias_add(TH_IN(r, 0), TH_IN(r, 1), r->ref[0], s->rows, s->cols);
}

static wgml_status grad_call(const th_run *r) { return wgml_bias_grad(th_eng, r->t_in[0], r->t_out[0], false); }
static wgml_status grad_accumulate_call(const th_run *r)
{
    wgml_status s = wgml_copy_tensor(th_eng, r->t_in[1], r->t_out[0], 0);   /* the running sum */
    return s ? s : wgml_bias_grad(th_eng, r->t_in[0], r->t_out[0], true);
}
static void grad_reference(const th_run *r)
{
    const shape *s = r->c->params;
    ref_bias_grad(TH_IN(r, 0), r->c->nin > 1 ? TH_IN(r, 1) : NULL, r->ref[0], s->rows, s->cols);
}
/* An f32 sum of rows values in [-1, 1] in order: its rounding errors grow about as
   2^-24 rows / sqrt(6) for random signs; 4e-7 rows is ten times that (a row left out or
   counted twice moves the sum by about 0.5). */
static double grad_tol(const th_run *r, int o, size_t i)
{
    (void)o, (void)i;
    return 1e-6 + 4e-7 * (double)((const shape *)r->c->params)->rows;
}

static void test_awkward_shapes(void)
{
    static const shape shapes[] = { { 1, 1 }, { 1, 3 }, { 3, 1 }, { 7, 5 }, { 2, 63 }, { 65, 7 }, { 4, 1000 }, { 4097, 3 },
                                    { 1000, 65 }, { 3, (1u << 20) / 3 + 5 } };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const shape *s = &shapes[i];
        for (int inplace = 0; inplace < 2; inplace++) {
            th_op_case c = { .nin = 2, .nout = 1, .call = inplace ? add_inplace_call : add_call, .reference = add_reference,
                             .atol = 1e-6, .rtol = 1e-7, .params = s,
                             .in = { { .shape = { s->rows, s->cols }, .lo = -1, .hi = 1 }, { .shape = { s->cols }, .lo = -1, .hi = 1 } },
                             .out = { { .shape = { s->rows, s->cols } } } };
            snprintf(c.name, sizeof c.name, "bias_add%s rows=%zu cols=%zu", inplace ? " in place" : "", s->rows, s->cols);
            th_run_case(&c);
        }
        for (int acc = 0; acc < 2; acc++) {
            th_op_case c = { .nin = acc ? 2 : 1, .nout = 1, .call = acc ? grad_accumulate_call : grad_call,
                             .reference = grad_reference, .tol = grad_tol, .params = s,
                             .in = { { .shape = { s->rows, s->cols }, .lo = -1, .hi = 1 }, { .shape = { s->cols }, .lo = -3, .hi = 3 } },
                             .out = { { .shape = { s->cols } } } };
            snprintf(c.name, sizeof c.name, "bias_grad%s rows=%zu cols=%zu", acc ? " accumulate" : "", s->rows, s->cols);
            th_run_case(&c);
        }
    }
}

/* A 3-D x reads as rows of its last dimension. */
static void test_known_values(void)
{
    const float x[] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 };   /* [2, 2, 3] */
    const float b[] = { 0.5f, -1, 100 };
    wgml_tensor *tx = th_tensor(WGML_F32, x, TH_SHAPE(2, 2, 3)), *tb = th_tensor(WGML_F32, b, TH_SHAPE(3));
    wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(4, 3)), *g = th_poisoned(WGML_F32, TH_SHAPE(3));
    TH_EXPECT(wgml_bias_add(th_eng, tx, tb, out), WGML_OK);
    TH_EXPECT(wgml_bias_grad(th_eng, tx, g, false), WGML_OK);
    float got[12], gg[3];
    th_read_into(out, got);
    th_read_into(g, gg);
    const double want[12] = { 1.5, 1, 103, 4.5, 4, 106, 7.5, 7, 109, 10.5, 10, 112 }, wg[3] = { 22, 26, 30 };
    th_compare("bias_add by hand", got, want, 12, 0, 0);
    th_compare("bias_grad by hand", gg, wg, 3, 0, 0);
    wgml_tensor_release(tx); wgml_tensor_release(tb); wgml_tensor_release(out); wgml_tensor_release(g);
}

static void test_bad_inputs(void)
{
    float z[64] = { 0 };
    wgml_tensor *x = th_tensor(WGML_F32, z, TH_SHAPE(4, 3)), *b = th_tensor(WGML_F32, z, TH_SHAPE(3));
    wgml_tensor *b4 = th_tensor(WGML_F32, z, TH_SHAPE(4)), *out = th_poisoned(WGML_F32, TH_SHAPE(4, 3));
    wgml_tensor *out11 = th_poisoned(WGML_F32, TH_SHAPE(11)), *u = th_tensor(WGML_U32, z, TH_SHAPE(3));
    uint64_t before = th_commands();
    TH_EXPECT_ERR(wgml_bias_add(NULL, x, b, out), WGML_ERROR_INVALID_ARGUMENT, "engine");
    TH_EXPECT_ERR(wgml_bias_add(th_eng, NULL, b, out), WGML_ERROR_INVALID_ARGUMENT, "x");
    TH_EXPECT_ERR(wgml_bias_add(th_eng, x, NULL, out), WGML_ERROR_INVALID_ARGUMENT, "bias");
    TH_EXPECT_ERR(wgml_bias_add(th_eng, x, b, NULL), WGML_ERROR_INVALID_ARGUMENT, "out");
    TH_EXPECT_ERR(wgml_bias_add(th_eng, x, u, out), WGML_ERROR_DTYPE, "bias");
    TH_EXPECT_ERR(wgml_bias_add(th_eng, x, b4, out), WGML_ERROR_SHAPE, "last dimension");
    TH_EXPECT_ERR(wgml_bias_add(th_eng, x, b, out11), WGML_ERROR_SHAPE, "out");
    TH_EXPECT_ERR(wgml_bias_add(th_eng, x, b, b), WGML_ERROR_ALIAS, "bias");
    TH_EXPECT_ERR(wgml_bias_grad(NULL, x, b, false), WGML_ERROR_INVALID_ARGUMENT, "engine");
    TH_EXPECT_ERR(wgml_bias_grad(th_eng, NULL, b, false), WGML_ERROR_INVALID_ARGUMENT, "grad_out");
    TH_EXPECT_ERR(wgml_bias_grad(th_eng, x, NULL, false), WGML_ERROR_INVALID_ARGUMENT, "grad_bias");
    TH_EXPECT_ERR(wgml_bias_grad(th_eng, x, b4, false), WGML_ERROR_SHAPE, "last dimension");
    TH_EXPECT_ERR(wgml_bias_grad(th_eng, x, u, false), WGML_ERROR_DTYPE, "grad_bias");
    TH_EXPECT_ERR(wgml_bias_grad(th_eng, out11, out11, false), WGML_ERROR_ALIAS, "grad_bias");
    TH_CHECK(th_commands() == before, "rejected calls recorded %llu commands", (unsigned long long)(th_commands() - before));
    wgml_tensor_release(x); wgml_tensor_release(b); wgml_tensor_release(b4); wgml_tensor_release(out);
    wgml_tensor_release(out11); wgml_tensor_release(u);
}

static const th_case cases[] = {
    { "awkward shapes", test_awkward_shapes },
    { "known values", test_known_values },
    { "bad inputs", test_bad_inputs },
};
TH_MAIN(cases)
