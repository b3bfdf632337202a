/* The host's conversions between f32 and the 16-bit floats of model files: every half and
   bfloat16 back and forth exactly, and f32 to them rounded to the nearest (ties to even)
   against a reference that searches the 16-bit values in double precision. Linked
   against the static library. */
#include "harness.h"
#include "io/io.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* The 16-bit value nearest to x (ties to the even code), among the finite codes of one
   sign, given the code's value; codes past max_code are infinity. */
static uint16_t nearest(double x, float (*value)(uint16_t), uint16_t max_code, uint16_t sign)
{
    double a = fabs(x);
    if (a > value(max_code)) {
        /* beyond the largest finite: infinity when at least halfway to the next binade step */
        double top = value(max_code), step = top - value((uint16_t)(max_code - 1));
        return (uint16_t)(sign | (a >= top + step / 2 ? max_code + 1 : max_code));
    }
    uint16_t lo = 0, hi = max_code;   /* the largest code whose value is <= a */
    while (lo < hi) {
        uint16_t mid = (uint16_t)((lo + hi + 1) / 2);
        if (value(mid) <= a) lo = mid;
        else hi = (uint16_t)(mid - 1);
    }
    if (lo == max_code) return (uint16_t)(sign | lo);
    double below = a - value(lo), above = value((uint16_t)(lo + 1)) - a;
    uint16_t pick = below < above ? lo : above < below ? (uint16_t)(lo + 1) : (lo & 1) ? (uint16_t)(lo + 1) : lo;
    return (uint16_t)(sign | pick);
}

static void test_exact_round_trips(void)
{
    int bad_half = 0, bad_bf16 = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = wgml__half_to_float((uint16_t)h);
        uint16_t back = wgml__float_to_half(f);
        bool nan = ((h >> 10) & 31) == 31 && (h & 1023);
        bad_half += nan ? !(isnan(f) && ((back >> 10) & 31) == 31 && (back & 1023)) : back != h;
        float g = wgml__bf16_to_float((uint16_t)h);
        uint16_t gb = wgml__float_to_bf16(g);
        bool gnan = ((h >> 7) & 255) == 255 && (h & 127);
        bad_bf16 += gnan ? !(isnan(g) && ((gb >> 7) & 255) == 255 && (gb & 127)) : gb != h;
    }
    TH_CHECK(bad_half == 0, "%d halves do not survive f32 and back", bad_half);
    TH_CHECK(bad_bf16 == 0, "%d bfloat16 values do not survive f32 and back", bad_bf16);
    TH_CHECK(wgml__half_to_float(0x3C00) == 1.0f && wgml__half_to_float(0x7BFF) == 65504.0f &&
             wgml__half_to_float(0x0001) == ldexpf(1, -24) && wgml__bf16_to_float(0x3F80) == 1.0f, "known values");
}

static float half_value(uint16_t h) { return wgml__half_to_float(h); }
static float bf16_value(uint16_t h) { return wgml__bf16_to_float(h); }

/* f32 values of every kind: random bit patterns, values near 16-bit codes and halfway
   between them (the ties), subnormals, and the edges of the ranges. */
static void test_rounding(void)
{
    uint64_t rng = 12345;
    int bad_half = 0, bad_bf16 = 0, n = 0;
    for (int i = 0; i < 400000; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t r = (uint32_t)(rng >> 32);
        float f;
        switch (i % 4) {
        case 0: memcpy(&f, &r, sizeof f); break;
        case 1: {   /* exactly halfway between two half codes (or bfloat16 codes): the ties */
            uint16_t c = (uint16_t)(r & 0x7BFE);
            double mid = ((double)half_value(c) + half_value((uint16_t)(c + 1))) / 2;
            f = (float)mid;
            if (r & 0x80000000u) f = -f;
            break;
        }
        case 2: f = ldexpf((float)(r & 0xFFFFFF) / 16777216.0f, -14 - (int)(r >> 28)); break;   /* small and subnormal */
        default: f = ldexpf((float)(r & 0xFFFFFF) / 16777216.0f + 1.0f, (int)(r >> 27) - 14); break;
        }
        if (isnan(f)) continue;
        n++;
        uint16_t sign = bits_of(f) >> 31 ? 0x8000 : 0;
        uint16_t want_half = nearest(f, half_value, 0x7BFF, sign), got_half = wgml__float_to_half(f);
        uint16_t want_bf16 = nearest(f, bf16_value, 0x7F7F, sign), got_bf16 = wgml__float_to_bf16(f);
        if (got_half != want_half && bad_half++ < 5) TH_CHECK(false, "half(%.9g) = 0x%04x, want 0x%04x", f, got_half, want_half);
        if (got_bf16 != want_bf16 && bad_bf16++ < 5) TH_CHECK(false, "bf16(%.9g) = 0x%04x, want 0x%04x", f, got_bf16, want_bf16);
    }
    TH_CHECK(bad_half == 0 && bad_bf16 == 0 && n > 300000, "%d halves and %d bfloat16 of %d wrong", bad_half, bad_bf16, n);
    /* edges: the largest half, the tie above it, infinities, the smallest subnormal's half */
    TH_CHECK(wgml__float_to_half(65504.0f) == 0x7BFF && wgml__float_to_half(65519.99f) == 0x7BFF &&
             wgml__float_to_half(65520.0f) == 0x7C00 && wgml__float_to_half(-INFINITY) == 0xFC00 &&
             wgml__float_to_half(ldexpf(1, -25)) == 0 && wgml__float_to_half(ldexpf(1.5f, -25)) == 1, "half edges");
    TH_CHECK(wgml__float_to_bf16(INFINITY) == 0x7F80 && wgml__float_to_bf16(3.4028235e38f) == 0x7F80 &&
             isnan(wgml__bf16_to_float(wgml__float_to_bf16(NAN))), "bfloat16 edges");
}

static const th_case cases[] = {
    { "exact_round_trips", test_exact_round_trips },
    { "rounding", test_rounding },
};
TH_MAIN(cases)
