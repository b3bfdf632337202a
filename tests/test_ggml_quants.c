/* ggml's block formats expanded to f32 (src/io/ggml_dequant.c) against a decoder written
   here value by value from each format's layout: random blocks (every bit pattern of the
   packed values and sub-block scales), with scales that are powers of two so that every
   product is exact and the comparison can be bit for bit. Linked against the static
   library. */
#include "harness.h"
#include "io/io.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint8_t rnd8(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint8_t)(rng >> 24);
}

/* a half of value +-2^e (e in [-10, 2]) at p */
static void put_pow2(uint8_t *p, double *value)
{
    int e = (int)(rnd8() % 13) - 10;
    bool neg = rnd8() & 1;
    uint16_t hbits = (uint16_t)((neg ? 0x8000 : 0) | (uint16_t)(e + 15) << 10);
    p[0] = (uint8_t)hbits;
    p[1] = (uint8_t)(hbits >> 8);
    *value = neg ? -ldexp(1, e) : ldexp(1, e);
}

static int nib(const uint8_t *b, int byte, bool high) { return high ? b[byte] >> 4 : b[byte] & 15; }

/* Value v of one block, from the layouts in include/wgml.h's list (ggml's block structs). */
static double decode(wgml_ggml_type t, const uint8_t *b, int v, const double *d, const double *dmin)
{
    switch (t) {
    case WGML_GGML_Q4_0: return (nib(b + 2, v % 16, v >= 16) - 8) * d[0];
    case WGML_GGML_Q4_1: return nib(b + 4, v % 16, v >= 16) * d[0] + dmin[0];
    case WGML_GGML_Q5_0:
    case WGML_GGML_Q5_1: {
        bool m = t == WGML_GGML_Q5_1;
        const uint8_t *qh = b + (m ? 4 : 2), *qs = qh + 4;
        int bit = qh[v / 8] >> (v % 8) & 1;   /* fifth bits: bit v of the u32 */
        int q = nib(qs, v % 16, v >= 16) | bit << 4;
        return m ? q * d[0] + dmin[0] : (q - 16) * d[0];
    }
    case WGML_GGML_Q8_0: return (int8_t)b[2 + v] * d[0];
    case WGML_GGML_Q8_1: return (int8_t)b[4 + v] * d[0];
    case WGML_GGML_Q4_K:
    case WGML_GGML_Q5_K: {
        int sb = v / 32, w = v % 32;
        const uint8_t *S = b + 4;
        int sc, mn;
        if (sb < 4) {
            sc = S[sb] & 63;
            mn = S[sb + 4] & 63;
        } else {
            sc = (S[sb + 4] & 15) | (S[sb - 4] >> 6) << 4;
            mn = (S[sb + 4] >> 4) | (S[sb] >> 6) << 4;
        }
        bool five = t == WGML_GGML_Q5_K;
        const uint8_t *qs = b + (five ? 48 : 16), *qh = b + 16;
        int q = nib(qs, 32 * (sb / 2) + w, sb % 2) + (five ? (qh[w] >> sb & 1) * 16 : 0);
        return d[0] * sc * q - dmin[0] * mn;
    }
    case WGML_GGML_Q6_K: {
        int half = v / 128, r = v % 128, k = r / 32, l = r % 32;
        int lo = nib(b, half * 64 + l + (k & 1) * 32, k >= 2);
        int hi = b[128 + half * 32 + l] >> (2 * k) & 3;
        int sc = (int8_t)b[192 + half * 8 + l / 16 + 2 * k];
        return d[0] * sc * ((lo | hi << 4) - 32);
    }
    case WGML_GGML_Q2_K: {
        /* each half of 128 values: 4 passes over 32 bytes (shift 2 per pass), 16 values per 16 bytes */
        int half = v / 128, r = v % 128, pass = r / 32, part = (r % 32) / 16, l = r % 16;
        int s = b[half * 8 + pass * 2 + part];
        int q = b[16 + half * 32 + part * 16 + l] >> (2 * pass) & 3;
        return d[0] * (s & 15) * q - dmin[0] * (s >> 4);
    }
    case WGML_GGML_Q3_K: {
        int half = v / 128, r = v % 128, pass = r / 32, part = (r % 32) / 16, l = r % 16;
        int is = half * 8 + pass * 2 + part;
        const uint8_t *s = b + 96;
        int low = is < 8 ? s[is] & 15 : s[is - 8] >> 4, high = s[8 + is % 4] >> (2 * (is / 4)) & 3;
        int k = part * 16 + l;
        int q = (b[32 + half * 32 + k] >> (2 * pass) & 3) - ((b[k] >> (half * 4 + pass) & 1) ? 0 : 4);
        return d[0] * ((low | high << 4) - 32) * q;
    }
    default: return NAN;
    }
}

/* Where each format keeps its f16 scale d and minimum dmin (-1: none). */
static void scale_places(wgml_ggml_type t, int *d_at, int *m_at)
{
    *m_at = -1;
    switch (t) {
    case WGML_GGML_Q4_1: case WGML_GGML_Q5_1: *d_at = 0; *m_at = 2; break;
    case WGML_GGML_Q8_1: *d_at = 0; *m_at = 2; break;   /* its second half is the block sum, unused */
    case WGML_GGML_Q4_K: case WGML_GGML_Q5_K: *d_at = 0; *m_at = 2; break;
    case WGML_GGML_Q6_K: *d_at = 208; break;
    case WGML_GGML_Q2_K: *d_at = 80; *m_at = 82; break;
    case WGML_GGML_Q3_K: *d_at = 108; break;
    default: *d_at = 0; break;
    }
}

static void test_formats(void)
{
    const wgml_ggml_type types[] = { WGML_GGML_Q4_0, WGML_GGML_Q4_1, WGML_GGML_Q5_0, WGML_GGML_Q5_1, WGML_GGML_Q8_0,
                                     WGML_GGML_Q8_1, WGML_GGML_Q2_K, WGML_GGML_Q3_K, WGML_GGML_Q4_K, WGML_GGML_Q5_K,
                                     WGML_GGML_Q6_K };
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        wgml_ggml_type t = types[k];
        uint32_t el, by;
        TH_CHECK(wgml_ggml_type_block(t, &el, &by), "%s has no block size", wgml_ggml_type_name(t));
        enum { BLOCKS = 40 };
        uint8_t *blocks = malloc((size_t)by * BLOCKS);
        double *d = malloc(sizeof(double) * BLOCKS), *m = malloc(sizeof(double) * BLOCKS);
        float *got = malloc(sizeof(float) * el * BLOCKS);
        for (size_t i = 0; i < (size_t)by * BLOCKS; i++) blocks[i] = rnd8();
        int d_at, m_at;
        scale_places(t, &d_at, &m_at);
        for (int i = 0; i < BLOCKS; i++) {
            put_pow2(blocks + (size_t)i * by + d_at, &d[i]);
            m[i] = 0;
            if (m_at >= 0) put_pow2(blocks + (size_t)i * by + m_at, &m[i]);
        }
        for (size_t i = 0; i < (size_t)el * BLOCKS; i++) got[i] = NAN;
        TH_CHECK(wgml__ggml_to_f32(t, blocks, (uint64_t)el * BLOCKS, got), "%s: refused", wgml_ggml_type_name(t));
        int wrong = 0;
        for (int i = 0; i < BLOCKS; i++)
            for (uint32_t v = 0; v < el; v++) {
                double want = decode(t, blocks + (size_t)i * by, (int)v, &d[i], &m[i]);
                float g = got[(size_t)i * el + v];
                if (g != (float)want && wrong++ < 3)
                    TH_CHECK(false, "%s block %d value %u: %.9g, want %.9g", wgml_ggml_type_name(t), i, v, g, want);
            }
        TH_CHECK(wrong == 0, "%s: %d values differ", wgml_ggml_type_name(t), wrong);
        free(blocks);
        free(d);
        free(m);
        free(got);
    }
    /* the float types, and what is refused */
    const uint8_t f16[4] = { 0x00, 0x3C, 0x00, 0xC0 }, bf16[4] = { 0x80, 0x3F, 0x40, 0xC0 };
    float out[4];
    TH_CHECK(wgml__ggml_to_f32(WGML_GGML_F16, f16, 2, out) && out[0] == 1.0f && out[1] == -2.0f, "F16");
    TH_CHECK(wgml__ggml_to_f32(WGML_GGML_BF16, bf16, 2, out) && out[0] == 1.0f && out[1] == -3.0f, "BF16");
    TH_CHECK(!wgml__ggml_to_f32(WGML_GGML_Q4_0, f16, 16, out), "a partial block accepted");
    TH_CHECK(!wgml__ggml_to_f32(WGML_GGML_I32, f16, 1, out) && !wgml__ggml_to_f32(WGML_GGML_Q8_K, f16, 256, out) &&
             !wgml__ggml_to_f32((wgml_ggml_type)99, f16, 1, out), "a type that is not a weight format accepted");
}

static const th_case cases[] = {
    { "formats", test_formats },
};
TH_MAIN(cases)
