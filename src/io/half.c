/* Conversions between f32 and the 16-bit floats of model files (IEEE half and bfloat16),
   on the host: reading f16 / bf16 weights and writing them. f32 to 16 bits rounds to the
   nearest, ties to even, as torch's .to(torch.float16) and .to(torch.bfloat16) do. */
#include "io.h"

#include <string.h>

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float float_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float wgml__half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 31, man = h & 1023u;
    if (exp == 31) return float_of(sign | 0x7F800000u | (man << 13));        /* inf, NaN */
    if (exp) return float_of(sign | ((exp + 112) << 23) | (man << 13));     /* normal */
    if (!man) return float_of(sign);                                         /* zero */
    int e = -1;                                                              /* subnormal */
    do {
        man <<= 1;
        e++;
    } while (!(man & 1024));
    return float_of(sign | ((uint32_t)(112 - e) << 23) | ((man & 1023u) << 13));
}

uint16_t wgml__float_to_half(float f)
{
    uint32_t u = bits_of(f), sign = (u >> 16) & 0x8000u, abs = u & 0x7FFFFFFFu;
    if (abs >= 0x7F800000u) return (uint16_t)(sign | 0x7C00u | (abs > 0x7F800000u ? 0x200u | ((abs >> 13) & 0x3FFu) : 0));
    if (abs >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u);   /* rounds past 65504: inf */
    int exp = (int)(abs >> 23) - 127;
    uint32_t man = (abs & 0x7FFFFFu) | 0x800000u;   /* 24 bits with the hidden one */
    int shift;                                       /* bits dropped from man */
    uint32_t hexp;
    if (exp >= -14) {
        shift = 13;
        hexp = (uint32_t)(exp + 15);
    } else {
        if (exp < -25) return (uint16_t)sign;        /* below half the smallest subnormal */
        shift = 13 + (-14 - exp);
        hexp = 0;
    }
    uint32_t kept = man >> shift, rest = man & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (kept & 1))) kept++;
    /* normal: kept holds the hidden one at bit 10; a carry into bit 11 moves the exponent
       up, which adding the fields as numbers does */
    uint32_t h = hexp ? (hexp << 10) + (kept - 0x400u) : kept;
    return (uint16_t)(sign | h);
}

float wgml__bf16_to_float(uint16_t h) { return float_of((uint32_t)h << 16); }

uint16_t wgml__float_to_bf16(float f)
{
    uint32_t u = bits_of(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40u);   /* NaN stays NaN (quiet) */
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
