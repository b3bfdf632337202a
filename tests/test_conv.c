/* wgml_conv1d against the double reference on awkward shapes (rows shorter than a vec4,
   rows that start mid-vec4, one long row, many rows), and its bad inputs. */
#include "harness.h"
#include "ref_conv.h"

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

static const th_case cases[] = {
    { "awkward_shapes", test_awkward_shapes },
    { "known_values", test_known_values },
    { "bad_inputs", test_bad_inputs },
};
TH_MAIN(cases)
