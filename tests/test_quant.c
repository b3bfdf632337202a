/* wgml_dequantize and wgml_affine_dequantize(_with): bytes of u8 and u32 tensors on awkward
   lengths; MLX affine groups for every width, group size, scale and bias dtype and weight
   dtype, built in the test (f16/bf16 by a checked round-to-nearest-even conversion) and also
   written bit by bit by hand; subnormal f16 scales; and every bad input. The byte lengths
   are rows of an op case table; the affine cases stay written out, since their inputs
   (packed words, f16/bf16 scales of either sign) are not f32 ranges the table can draw. */
#include "harness.h"
#include "ref_quant.h"

#include <stdlib.h>
#include <string.h>

/* ---- the test's own f16/bf16 conversion, checked first -------------------------------- */

static void test_half_conversions(void)
{
    static const struct { float f; uint16_t h, b; } table[] = {
        { 0.0f, 0x0000, 0x0000 },        { -0.0f, 0x8000, 0x8000 },      { 1.0f, 0x3C00, 0x3F80 },
        { -2.0f, 0xC000, 0xC000 },       { 0.5f, 0x3800, 0x3F00 },       { 0.1f, 0x2E66, 0x3DCD },
        { 65504.0f, 0x7BFF, 0x4780 }, { 65519.0f, 0x7BFF, 0x4780 }, { 65520.0f, 0x7C00, 0x4780 },
        { 6.103515625e-05f, 0x0400, 0x3880 }, { 5.9604644775390625e-08f, 0x0001, 0x3380 },
        { 2.98023223876953125e-08f, 0x0000, 0x3300 },   /* half the smallest subnormal: ties to even 0 */
        { 8.940696716308594e-08f, 0x0002, 0x33C0 },     /* 1.5 subnormal units: ties to even 2 */
        { 1.0009765625f, 0x3C01, 0x3F80 },              /* 1 + 2^-10: exact in f16 */
        { 1.00048828125f, 0x3C00, 0x3F80 },             /* 1 + 2^-11: tie, even stays 1 */
        { 1.00146484375f, 0x3C02, 0x3F80 },             /* 1 + 3 * 2^-11: tie, rounds up to even */
        { 1.00390625f, 0x3C04, 0x3F80 },                /* 1 + 2^-8: bf16 tie, even stays 1 */
        { 1.01171875f, 0x3C0C, 0x3F82 },                /* 1 + 3 * 2^-8: bf16 tie, up to even */
        { 3.4028234663852886e+38f, 0x7C00, 0x7F80 },    /* f32 max: infinity in both */
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        uint16_t h = ref_f32_to_f16(table[i].f), b = ref_f32_to_bf16(table[i].f);
        TH_CHECK(h == table[i].h, "f16(%.9g) = 0x%04X, want 0x%04X", (double)table[i].f, h, table[i].h);
        TH_CHECK(b == table[i].b, "bf16(%.9g) = 0x%04X, want 0x%04X", (double)table[i].f, b, table[i].b);
    }
    /* every finite f16 decodes and re-encodes to itself */
    size_t bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7C00) == 0x7C00) continue;
        double v = ref_f16_to_double((uint16_t)h);
        if (ref_f32_to_f16((float)v) != h) bad++;
    }
    TH_CHECK(bad == 0, "%zu f16 values do not survive f16 -> double -> f16", bad);
    TH_CHECK(ref_bf16_to_double(0x3F80) == 1.0 && ref_bf16_to_double(0xC0A0) == -5.0, "bf16 decoding");
}

/* ---- wgml_dequantize: the op case table ---------------------------------------------- */

/* Input: random u32 words; outputs: the first n bytes dequantized from those words, and
   from the same bytes as a u8 tensor of n elements (uploaded by the call). From u32 words
   out may be shorter than the input's byte count (up to 3 bytes). Exact. */
static wgml_status dequantize_call(const th_run *r)
{
    size_t n = r->n_out[0];
    wgml_status s = wgml_dequantize(th_eng, r->t_in[0], r->t_out[0]);
    if (s != WGML_OK) return s;
    wgml_tensor *t8 = th_tensor(WGML_U8, r->in[0], TH_SHAPE(n));
    s = wgml_dequantize(th_eng, t8, r->t_out[1]);
    wgml_tensor_release(t8);
    return s;
}

static void dequantize_reference(const th_run *r)
{
    ref_dequantize((const uint8_t *)TH_IN_U32(r, 0), r->ref[0], r->n_out[0]);
    ref_dequantize((const uint8_t *)TH_IN_U32(r, 0), r->ref[1], r->n_out[1]);
}

static void test_dequantize_sizes(void)
{
    for (size_t s = 0; s < th_awkward_count; s++) {
        size_t n = th_awkward_sizes[s], nw = (n + 3) / 4;
        th_op_case c = { .nin = 1, .nout = 2, .call = dequantize_call, .reference = dequantize_reference,
                         .in = { { .dtype = WGML_U32, .shape = { nw }, .lo = 0, .hi = UINT32_MAX } },
                         .out = { { .shape = { n } }, { .shape = { n } } } };
        snprintf(c.name, sizeof c.name, "dequantize n=%zu (out[0] from u32, out[1] from u8)", n);
        th_run_case(&c);
    }
}

/* Byte order within a word, written out by hand, and an out much shorter than the input. */
static void test_dequantize_by_hand(void)
{
    const uint32_t words[3] = { 0x04030201u, 0xFF80007Fu, 0xDEADBEEFu };
    wgml_tensor *t = th_tensor(WGML_U32, words, TH_SHAPE(3)), *out = th_poisoned(WGML_F32, TH_SHAPE(6));
    TH_EXPECT(wgml_dequantize(th_eng, t, out), WGML_OK);
    float got[8];
    th_read_into(out, got);
    const double want[6] = { 1, 2, 3, 4, 127, 0 };
    th_compare("dequantize by hand", got, want, 6, 0, 0);
    wgml_tensor_release(out);
    out = th_poisoned(WGML_F32, TH_SHAPE(12));   /* exactly the input's 12 bytes */
    TH_EXPECT(wgml_dequantize(th_eng, t, out), WGML_OK);
    float all[12];
    th_read_into(out, all);
    const double want_all[12] = { 1, 2, 3, 4, 127, 0, 128, 255, 0xEF, 0xBE, 0xAD, 0xDE };
    th_compare("dequantize all 12 bytes", all, want_all, 12, 0, 0);
    wgml_tensor_release(out);
    wgml_tensor_release(t);
}

/* ---- affine --------------------------------------------------------------------------- */

static const wgml_dtype float_dtypes[3] = { WGML_F32, WGML_F16, WGML_BF16 };

/* values in dtype: data holds the encoded tensor, dec the decoded doubles */
static void encode(wgml_dtype dt, const float *v, size_t n, void *data, double *dec)
{
    for (size_t i = 0; i < n; i++) {
        if (dt == WGML_F32) { ((float *)data)[i] = v[i]; dec[i] = v[i]; }
        else if (dt == WGML_F16) { uint16_t h = ref_f32_to_f16(v[i]); ((uint16_t *)data)[i] = h; dec[i] = ref_f16_to_double(h); }
        else { uint16_t h = ref_f32_to_bf16(v[i]); ((uint16_t *)data)[i] = h; dec[i] = ref_bf16_to_double(h); }
    }
}

/* One affine case with random quantized values and MLX-like scales (either sign, 1e-3..0.1)
   and biases (-1..1). Tolerance: q * s + b rounds twice in f32 (once if fused), each within
   2^-24 of its magnitude, so atol = 2^-23 * max(|q s| + |b|) covers every element. */
static void affine_case(unsigned bits, unsigned gs, wgml_dtype sdt, wgml_dtype bdt, wgml_dtype wdt, size_t groups,
                        bool default_entry)
{
    size_t n = gs * groups, nwords = n * bits / 32;
    uint32_t *words = calloc(nwords, 4);
    for (size_t i = 0; i < n; i++) {
        uint32_t q = th_rand_u32() >> (32 - bits);
        words[i / (32 / bits)] |= q << (bits * (i % (32 / bits)));
    }
    float *sv = th_alloc_f(groups), *bv = th_alloc_f(groups);
    for (size_t g = 0; g < groups; g++) {
        sv[g] = (float)(th_uniform(1e-3, 0.1) * (th_rand_u32() & 1 ? -1 : 1));
        bv[g] = (float)th_uniform(-1, 1);
    }
    void *sdata = malloc(groups * 4), *bdata = malloc(groups * 4);
    double *sdec = th_alloc_d(groups), *bdec = th_alloc_d(groups), *ref = th_alloc_d(n);
    encode(sdt, sv, groups, sdata, sdec);
    encode(bdt, bv, groups, bdata, bdec);
    ref_affine_dequantize(words, sdec, bdec, ref, n, bits, gs);
    double mag = 0;
    for (size_t i = 0; i < n; i++) {
        double m = fabs(ref[i] - bdec[i / gs]) + fabs(bdec[i / gs]);
        if (m > mag) mag = m;
    }
    wgml_tensor *tw = wdt == WGML_U32 ? th_tensor(WGML_U32, words, TH_SHAPE(nwords)) : th_tensor(WGML_U8, words, TH_SHAPE(nwords * 4));
    wgml_tensor *ts = th_tensor(sdt, sdata, TH_SHAPE(groups)), *tb = th_tensor(bdt, bdata, TH_SHAPE(groups));
    wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(groups, gs));
    if (default_entry) TH_EXPECT(wgml_affine_dequantize(th_eng, tw, ts, tb, out), WGML_OK);
    else TH_EXPECT(wgml_affine_dequantize_with(th_eng, tw, ts, tb, out, bits, gs), WGML_OK);
    float *got = th_read(out);
    char what[128];
    snprintf(what, sizeof what, "affine %u-bit group %u scales %s biases %s weight %s, %zu groups", bits, gs,
             wgml_dtype_name(sdt), wgml_dtype_name(bdt), wgml_dtype_name(wdt), groups);
    th_compare(what, got, ref, n, 0x1p-23 * mag, 0);
    free(words); free(sv); free(bv); free(sdata); free(bdata); free(sdec); free(bdec); free(ref); free(got);
    wgml_tensor_release(tw); wgml_tensor_release(ts); wgml_tensor_release(tb); wgml_tensor_release(out);
}

static void test_affine_every_combination(void)
{
    static const unsigned group_sizes[3] = { 32, 64, 128 };
    static const size_t group_counts[3] = { 1, 3, 67 };
    for (unsigned bits = 4; bits <= 8; bits += 4)
        for (int g = 0; g < 3; g++)
            for (int d = 0; d < 3; d++)
                for (int w = 0; w < 2; w++)
                    for (int c = 0; c < 3; c++)
                        affine_case(bits, group_sizes[g], float_dtypes[d], float_dtypes[d], w ? WGML_U8 : WGML_U32,
                                    group_counts[c], false);
    /* scales and biases of different dtypes */
    affine_case(4, 64, WGML_F16, WGML_BF16, WGML_U32, 5, false);
    affine_case(8, 32, WGML_BF16, WGML_F32, WGML_U8, 5, false);
    affine_case(4, 128, WGML_F32, WGML_F16, WGML_U32, 5, false);
}

/* Past a million elements, and through the default entry point (8 bits, groups of 64). */
static void test_affine_large(void)
{
    affine_case(8, 64, WGML_F32, WGML_F32, WGML_U32, (1u << 14) + 3, true);
    affine_case(8, 64, WGML_F16, WGML_F16, WGML_U8, 1000, true);
    affine_case(4, 64, WGML_BF16, WGML_BF16, WGML_U32, (1u << 14) + 5, false);
    affine_case(4, 128, WGML_F16, WGML_F16, WGML_U32, (1u << 13) + 1, false);
}

/* MLX order written out bit by bit: element j of a word sits at bits [4j, 4j + 4) (4-bit) or
   [8j, 8j + 8) (8-bit); f16 and bf16 scale/bias bits chosen by hand. */
static void test_affine_by_hand(void)
{
    /* 4 bits, group 32: nibbles 0..15 twice; scale f16 0.5 (0x3800), bias f16 -1 (0xBC00) */
    const uint32_t w4[4] = { 0x76543210u, 0xFEDCBA98u, 0x76543210u, 0xFEDCBA98u };
    const uint16_t s16[2] = { 0x3800, 0 }, b16[2] = { 0xBC00, 0 };
    wgml_tensor *tw = th_tensor(WGML_U32, w4, TH_SHAPE(4)), *ts = th_tensor(WGML_F16, s16, TH_SHAPE(1));
    wgml_tensor *tb = th_tensor(WGML_F16, b16, TH_SHAPE(1)), *out = th_poisoned(WGML_F32, TH_SHAPE(32));
    TH_EXPECT(wgml_affine_dequantize_with(th_eng, tw, ts, tb, out, 4, 32), WGML_OK);
    float got[32];
    double want[32];
    th_read_into(out, got);
    for (int i = 0; i < 32; i++) want[i] = (i % 16) * 0.5 - 1;
    th_compare("4-bit nibble order by hand", got, want, 32, 0, 0);
    wgml_tensor_release(tw); wgml_tensor_release(ts); wgml_tensor_release(tb); wgml_tensor_release(out);

    /* 8 bits, group 32, two groups: byte i = i; group 0 bf16 scale 2 (0x4000) bias 0.25
       (0x3E80); group 1 scale -1 (0xBF80) bias 3 (0x4040). Scales packed two per word. */
    uint8_t w8[64];
    for (int i = 0; i < 64; i++) w8[i] = (uint8_t)i;
    const uint16_t sb[2] = { 0x4000, 0xBF80 }, bb[2] = { 0x3E80, 0x4040 };
    tw = th_tensor(WGML_U8, w8, TH_SHAPE(64));
    ts = th_tensor(WGML_BF16, sb, TH_SHAPE(2));
    tb = th_tensor(WGML_BF16, bb, TH_SHAPE(2));
    out = th_poisoned(WGML_F32, TH_SHAPE(64));
    TH_EXPECT(wgml_affine_dequantize_with(th_eng, tw, ts, tb, out, 8, 32), WGML_OK);
    float got8[64];
    double want8[64];
    th_read_into(out, got8);
    for (int i = 0; i < 64; i++) want8[i] = i < 32 ? 2.0 * i + 0.25 : -i + 3.0;
    th_compare("8-bit byte order and bf16 groups by hand", got8, want8, 64, 0, 0);
    wgml_tensor_release(tw); wgml_tensor_release(ts); wgml_tensor_release(tb); wgml_tensor_release(out);
}

/* f16 subnormal scales (2^-24 .. 1023 * 2^-24) decode exactly: q * s is then exact in f32. */
static void test_affine_subnormal_f16_scales(void)
{
    const size_t groups = 4, n = 32 * groups;
    const uint16_t s16[4] = { 0x0001, 0x03FF, 0x8200, 0x0400 }, b16[4] = { 0, 0, 0, 0x8001 };
    uint32_t w[32];
    for (int i = 0; i < 32; i++) w[i] = th_rand_u32();
    double sdec[4], bdec[4], *ref = th_alloc_d(n);
    for (int g = 0; g < 4; g++) { sdec[g] = ref_f16_to_double(s16[g]); bdec[g] = ref_f16_to_double(b16[g]); }
    ref_affine_dequantize(w, sdec, bdec, ref, n, 8, 32);
    wgml_tensor *tw = th_tensor(WGML_U32, w, TH_SHAPE(32)), *ts = th_tensor(WGML_F16, s16, TH_SHAPE(4));
    wgml_tensor *tb = th_tensor(WGML_F16, b16, TH_SHAPE(4)), *out = th_poisoned(WGML_F32, TH_SHAPE(n));
    TH_EXPECT(wgml_affine_dequantize_with(th_eng, tw, ts, tb, out, 8, 32), WGML_OK);
    float *got = th_read(out);
    th_compare("affine with subnormal f16 scales", got, ref, n, 0, 0);
    free(got); free(ref);
    wgml_tensor_release(tw); wgml_tensor_release(ts); wgml_tensor_release(tb); wgml_tensor_release(out);
}

static void test_bad_inputs(void)
{
    uint8_t z[1024] = { 0 };
    wgml_context *other;
    TH_EXPECT(wgml_context_create(NULL, &other), WGML_OK);
    wgml_tensor *foreign;
    TH_EXPECT(wgml_tensor_from_data(other, WGML_U32, 1, (size_t[]){ 16 }, z, &foreign), WGML_OK);
    /* a valid 8-bit, group-64 set: 128 elements, 2 groups */
    wgml_tensor *w = th_tensor(WGML_U32, z, TH_SHAPE(32)), *s = th_tensor(WGML_F32, z, TH_SHAPE(2));
    wgml_tensor *b = th_tensor(WGML_F32, z, TH_SHAPE(2)), *out = th_poisoned(WGML_F32, TH_SHAPE(128));
    wgml_tensor *wf = th_tensor(WGML_F32, z, TH_SHAPE(32)), *su = th_tensor(WGML_U32, z, TH_SHAPE(2));
    wgml_tensor *b8 = th_tensor(WGML_U8, z, TH_SHAPE(2)), *o16 = th_poisoned(WGML_F16, TH_SHAPE(128));
    wgml_tensor *out100 = th_poisoned(WGML_F32, TH_SHAPE(100)), *s3 = th_tensor(WGML_F32, z, TH_SHAPE(3));
    wgml_tensor *w31 = th_tensor(WGML_U32, z, TH_SHAPE(31)), *w8_127 = th_tensor(WGML_U8, z, TH_SHAPE(127));
    wgml_tensor *out129 = th_poisoned(WGML_F32, TH_SHAPE(129)), *ou = th_poisoned(WGML_U32, TH_SHAPE(4));
    wgml_tensor *s128 = th_tensor(WGML_F32, z, TH_SHAPE(128));
    uint64_t before = th_commands();

    TH_EXPECT_ERR(wgml_dequantize(NULL, w, out), WGML_ERROR_INVALID_ARGUMENT, "engine is NULL");
    TH_EXPECT_ERR(wgml_dequantize(th_eng, NULL, out), WGML_ERROR_INVALID_ARGUMENT, "input is NULL");
    TH_EXPECT_ERR(wgml_dequantize(th_eng, w, NULL), WGML_ERROR_INVALID_ARGUMENT, "out is NULL");
    TH_EXPECT_ERR(wgml_dequantize(th_eng, wf, out), WGML_ERROR_DTYPE, "input is f32; it must be u32 or u8");
    TH_EXPECT_ERR(wgml_dequantize(th_eng, w, ou), WGML_ERROR_DTYPE, "out is u32");
    TH_EXPECT_ERR(wgml_dequantize(th_eng, foreign, out), WGML_ERROR_CONTEXT, "input belongs to another context");
    TH_EXPECT_ERR(wgml_dequantize(th_eng, w8_127, out), WGML_ERROR_SHAPE, "out has 128 elements, more than input's 127 bytes");
    TH_EXPECT_ERR(wgml_dequantize(th_eng, w31, out129), WGML_ERROR_SHAPE, "more than input's 124 bytes");

    TH_EXPECT_ERR(wgml_affine_dequantize(NULL, w, s, b, out), WGML_ERROR_INVALID_ARGUMENT, "engine is NULL");
    TH_EXPECT_ERR(wgml_affine_dequantize(th_eng, NULL, s, b, out), WGML_ERROR_INVALID_ARGUMENT, "weight is NULL");
    TH_EXPECT_ERR(wgml_affine_dequantize(th_eng, w, NULL, b, out), WGML_ERROR_INVALID_ARGUMENT, "scales is NULL");
    TH_EXPECT_ERR(wgml_affine_dequantize(th_eng, w, s, NULL, out), WGML_ERROR_INVALID_ARGUMENT, "biases is NULL");
    TH_EXPECT_ERR(wgml_affine_dequantize(th_eng, w, s, b, NULL), WGML_ERROR_INVALID_ARGUMENT, "out is NULL");
    TH_EXPECT_ERR(wgml_affine_dequantize(th_eng, wf, s, b, out), WGML_ERROR_DTYPE, "weight is f32; it must be u32 or u8");
    TH_EXPECT_ERR(wgml_affine_dequantize(th_eng, w, su, b, out), WGML_ERROR_DTYPE, "scales is u32; it must be f32, f16 or bf16");
    TH_EXPECT_ERR(wgml_affine_dequantize(th_eng, w, s, b8, out), WGML_ERROR_DTYPE, "biases is u8; it must be f32, f16 or bf16");
    TH_EXPECT_ERR(wgml_affine_dequantize(th_eng, w, s, b, o16), WGML_ERROR_DTYPE, "out is f16");
    TH_EXPECT_ERR(wgml_affine_dequantize(th_eng, w, s, foreign, out), WGML_ERROR_CONTEXT, "biases belongs to another context");
    TH_EXPECT_ERR(wgml_affine_dequantize(th_eng, w, s, b, s), WGML_ERROR_ALIAS, "out must not be the same tensor as scales");
    TH_EXPECT_ERR(wgml_affine_dequantize(th_eng, w, s128, b, s128), WGML_ERROR_ALIAS, "out must not be the same tensor as scales");
    TH_EXPECT_ERR(wgml_affine_dequantize(th_eng, w, s, b, b), WGML_ERROR_ALIAS, "out must not be the same tensor as biases");
    TH_EXPECT_ERR(wgml_affine_dequantize(th_eng, w, s, b, out100), WGML_ERROR_SHAPE, "out has 100 elements, not a multiple of group_size 64");
    TH_EXPECT_ERR(wgml_affine_dequantize(th_eng, w, s3, b, out), WGML_ERROR_SHAPE, "scales has 3 elements; it must have one per group: 2");
    TH_EXPECT_ERR(wgml_affine_dequantize(th_eng, w, s, s3, out), WGML_ERROR_SHAPE, "biases has 3 elements; it must have one per group: 2");
    TH_EXPECT_ERR(wgml_affine_dequantize(th_eng, w31, s, b, out), WGML_ERROR_SHAPE, "weight has 124 bytes; 128 elements of 8 bits need 128");
    TH_EXPECT_ERR(wgml_affine_dequantize(th_eng, w8_127, s, b, out), WGML_ERROR_SHAPE, "weight has 127 bytes");
    /* 4 bits need half the bytes: the 8-bit weight is twice too long */
    TH_EXPECT_ERR(wgml_affine_dequantize_with(th_eng, w, s, b, out, 4, 64), WGML_ERROR_SHAPE, "128 elements of 4 bits need 64");
    TH_EXPECT_ERR(wgml_affine_dequantize_with(th_eng, w, s, b, out, 3, 64), WGML_ERROR_INVALID_ARGUMENT, "bits is 3; it must be 4 or 8");
    TH_EXPECT_ERR(wgml_affine_dequantize_with(th_eng, w, s, b, out, 16, 64), WGML_ERROR_INVALID_ARGUMENT, "bits is 16");
    TH_EXPECT_ERR(wgml_affine_dequantize_with(th_eng, w, s, b, out, 8, 16), WGML_ERROR_INVALID_ARGUMENT, "group_size is 16; it must be 32, 64 or 128");
    TH_EXPECT_ERR(wgml_affine_dequantize_with(th_eng, w, s, b, out, 8, 0), WGML_ERROR_INVALID_ARGUMENT, "group_size is 0");
    TH_EXPECT_ERR(wgml_affine_dequantize_with(th_eng, w, s, b, out, 8, 256), WGML_ERROR_INVALID_ARGUMENT, "group_size is 256");
    TH_EXPECT_ERR(wgml_affine_dequantize_with(NULL, w, s, b, out, 8, 64), WGML_ERROR_INVALID_ARGUMENT, "wgml_affine_dequantize_with: engine is NULL");
    TH_CHECK(th_commands() == before, "rejected calls recorded %llu commands", (unsigned long long)(th_commands() - before));
    uint32_t got[128];
    th_read_into(out, got);
    size_t written = 0;
    for (int i = 0; i < 128; i++) written += got[i] != 0xFFFFFFFFu;
    TH_CHECK(written == 0, "%zu elements of out were written by rejected calls", written);
    /* and the valid set works */
    TH_EXPECT(wgml_affine_dequantize(th_eng, w, s, b, out), WGML_OK);
    wgml_tensor *list[] = { w, s, b, out, wf, su, b8, o16, out100, s3, w31, w8_127, out129, ou, s128, foreign };
    for (size_t i = 0; i < sizeof list / sizeof list[0]; i++) wgml_tensor_release(list[i]);
    wgml_context_destroy(other);
}

static const th_case cases[] = {
    { "half_conversions", test_half_conversions },
    { "dequantize_sizes", test_dequantize_sizes },
    { "dequantize_by_hand", test_dequantize_by_hand },
    { "affine_every_combination", test_affine_every_combination },
    { "affine_large", test_affine_large },
    { "affine_by_hand", test_affine_by_hand },
    { "affine_subnormal_f16_scales", test_affine_subnormal_f16_scales },
    { "bad_inputs", test_bad_inputs },
};
TH_MAIN(cases)
