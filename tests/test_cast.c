/* wgml_cast against the host conversions of tests/ref/ref_quant.c (round to nearest even,
   checked there against an exhaustive search): every pair of f32, f16 and bf16, at awkward
   counts (odd ones leave half of dst's last word), over values of every class: normal,
   subnormal in the target, the rounding ties, overflow to infinity, infinities, NaN and
   signed zeros. Bits must match exactly (a NaN must stay a NaN of the same sign). */
#include "harness.h"
#include "ref_quant.h"

#include <stdlib.h>
#include <string.h>

static const wgml_dtype dts[3] = { WGML_F32, WGML_F16, WGML_BF16 };

static uint32_t bits_of(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

static float float_of(uint32_t b)
{
    float f;
    memcpy(&f, &b, 4);
    return f;
}

/* A value of a random class: a random bit pattern, an f16 boundary or tie, an f16
   subnormal, a bf16 tie, a large magnitude near 65520, a special. */
static float draw(void)
{
    uint32_t r = th_rand_u32();
    switch (th_rand_u32() % 8) {
    case 0: return float_of(r);
    case 1: return ldexpf((float)(r & 0x7FF) + 0.5f, (int)(r >> 28) - 24);               /* f16 ties */
    case 2: return ldexpf((float)(r & 0xFFFFFF) / 16777216.0f, -14 - (int)(r >> 29));   /* f16 subnormals */
    case 3: return float_of((r & 0xFFFF0000u) | 0x8000u);                              /* bf16 ties */
    case 4: return (r & 1 ? -1.0f : 1.0f) * (65504.0f + (float)(r >> 20) / 64.0f);      /* around f16's largest */
    case 5: {
        static const float sp[] = { 0.0f, -0.0f, INFINITY, -INFINITY, NAN, 65520.0f, 65519.996f, 1e-8f, 3e-8f, 6e-8f };
        return sp[r % 10];
    }
    default: return (float)th_uniform(-4, 4);
    }
}

/* The expected element of dtype d from f (as f32 bits for f32, the 16 bits otherwise). */
static uint32_t expect(wgml_dtype d, float f)
{
    if (d == WGML_F16) return ref_f32_to_f16(f);
    if (d == WGML_BF16) return ref_f32_to_bf16(f);
    return bits_of(f);
}

static float widen(wgml_dtype d, uint16_t h)
{
    return d == WGML_F16 ? (float)ref_f16_to_double(h) : (float)ref_bf16_to_double(h);
}

static bool is_nan(wgml_dtype d, uint32_t v)
{
    if (d == WGML_F32) return (v & 0x7FFFFFFFu) > 0x7F800000u;
    if (d == WGML_F16) return (v & 0x7FFFu) > 0x7C00u;
    return (v & 0x7FFFu) > 0x7F80u;
}

/* element i of a host buffer of dtype d */
static uint32_t elem(wgml_dtype d, const void *buf, size_t i)
{
    return d == WGML_F32 ? ((const uint32_t *)buf)[i] : ((const uint16_t *)buf)[i];
}

static void test_pairs(void)
{
    static const size_t counts[] = { 1, 2, 3, 7, 64, 1001, 4097, 70001 };
    for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
        for (int s = 0; s < 3; s++)
            for (int d = 0; d < 3; d++) {
                size_t n = counts[c];
                wgml_dtype from = dts[s], to = dts[d];
                size_t sz_from = wgml_dtype_size(from), sz_to = wgml_dtype_size(to);
                /* the source's values: drawn, then stored in its dtype */
                uint8_t *in = calloc(n, 4);
                float *val = th_alloc_f(n);
                for (size_t i = 0; i < n; i++) {
                    float f = draw();
                    if (from == WGML_F32) {
                        ((float *)in)[i] = f;
                        val[i] = f;
                    } else {
                        uint16_t h = (uint16_t)expect(from, f);
                        ((uint16_t *)in)[i] = h;
                        val[i] = widen(from, h);
                    }
                }
                wgml_tensor *ts = th_tensor(from, in, TH_SHAPE(n));
                wgml_tensor *td = th_poisoned(to, TH_SHAPE(n));
                TH_EXPECT(wgml_cast(th_eng, ts, td), WGML_OK);
                uint8_t *got = malloc(n * sz_to + 4);
                TH_EXPECT(wgml_tensor_read(td, 0, got, n * sz_to), WGML_OK);
                size_t bad = 0;
                for (size_t i = 0; i < n; i++) {
                    uint32_t want = expect(to, val[i]), g = elem(to, got, i);
                    bool ok = is_nan(to, want) ? is_nan(to, g) && (g >> (sz_to * 8 - 1)) == (want >> (sz_to * 8 - 1))
                                               : g == want;
                    if (!ok && bad++ < 5)
                        fprintf(stderr, "  %s -> %s [%zu]: from %.9g got 0x%x want 0x%x\n", wgml_dtype_name(from),
                                wgml_dtype_name(to), i, (double)val[i], g, want);
                }
                TH_CHECK(bad == 0, "%s -> %s, %zu elements: %zu wrong", wgml_dtype_name(from), wgml_dtype_name(to), n, bad);
                /* the source is unchanged */
                uint8_t *back = malloc(n * sz_from + 4);
                TH_EXPECT(wgml_tensor_read(ts, 0, back, n * sz_from), WGML_OK);
                TH_CHECK(memcmp(back, in, n * sz_from) == 0, "%s -> %s: src changed", wgml_dtype_name(from),
                         wgml_dtype_name(to));
                free(back), free(got), free(in), free(val);
                wgml_tensor_release(ts), wgml_tensor_release(td);
            }
}

/* Every f16 bit pattern to f32 and back, and every bf16 one: exact round trips (NaN as NaN). */
static void test_round_trips(void)
{
    for (int d = 1; d < 3; d++) {
        size_t n = 65536;
        uint16_t *h = malloc(n * 2), *back = malloc(n * 2);
        for (size_t i = 0; i < n; i++) h[i] = (uint16_t)i;
        wgml_tensor *t16 = th_tensor(dts[d], h, TH_SHAPE(n)), *t32 = th_poisoned(WGML_F32, TH_SHAPE(n));
        wgml_tensor *t16b = th_poisoned(dts[d], TH_SHAPE(n));
        TH_EXPECT(wgml_cast(th_eng, t16, t32), WGML_OK);
        TH_EXPECT(wgml_cast(th_eng, t32, t16b), WGML_OK);
        float *f = th_read(t32);
        TH_EXPECT(wgml_tensor_read(t16b, 0, back, n * 2), WGML_OK);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) {
            float want = widen(dts[d], h[i]);
            bool nan = isnan(want);
            bool ok = nan ? isnan(f[i]) && is_nan(dts[d], back[i]) : bits_of(f[i]) == bits_of(want) && back[i] == h[i];
            bad += !ok;
        }
        TH_CHECK(bad == 0, "%s -> f32 -> %s: %zu of 65536 patterns wrong", wgml_dtype_name(dts[d]), wgml_dtype_name(dts[d]),
                 bad);
        free(f), free(h), free(back);
        wgml_tensor_release(t16), wgml_tensor_release(t32), wgml_tensor_release(t16b);
    }
}

static void test_refusals(void)
{
    wgml_tensor *a = th_poisoned(WGML_F32, TH_SHAPE(5)), *b = th_poisoned(WGML_F16, TH_SHAPE(6));
    wgml_tensor *u = th_poisoned(WGML_U32, TH_SHAPE(5));
    uint64_t before = th_commands();
    TH_EXPECT_ERR(wgml_cast(th_eng, a, b), WGML_ERROR_SHAPE, "element");
    TH_EXPECT_ERR(wgml_cast(th_eng, a, u), WGML_ERROR_DTYPE, "dst");
    TH_EXPECT_ERR(wgml_cast(th_eng, u, a), WGML_ERROR_DTYPE, "src");
    TH_EXPECT_ERR(wgml_cast(th_eng, a, a), WGML_ERROR_ALIAS, "dst");
    TH_EXPECT(wgml_cast(NULL, a, a), WGML_ERROR_INVALID_ARGUMENT);
    TH_EXPECT(wgml_cast(th_eng, NULL, a), WGML_ERROR_INVALID_ARGUMENT);
    TH_CHECK(th_commands() == before, "a refused call recorded commands");
    wgml_tensor_release(a), wgml_tensor_release(b), wgml_tensor_release(u);
}

static const th_case cases[] = {
    { "pairs", test_pairs },
    { "round_trips", test_round_trips },
    { "refusals", test_refusals },
};
TH_MAIN(cases)
