#include "ref_quant.h"

#include <math.h>
#include <string.h>

uint16_t ref_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t a = x & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return sign | 0x7E00u;     /* NaN */
    if (a >= 0x477FF000u) return sign | 0x7C00u;    /* 65520 and above round to infinity */
    if (a < 0x38800000u) {                          /* below 2^-14: a multiple of 2^-24 */
        float m;
        memcpy(&m, &a, 4);
        return sign | (uint16_t)nearbyint((double)m * 16777216.0);   /* 1024 is the smallest normal */
    }
    uint32_t r = a - 0x38000000u;                   /* exponent bias 127 -> 15 */
    r += 0xFFFu + ((r >> 13) & 1u);                 /* round the 13 dropped bits, ties to even */
    return sign | (uint16_t)(r >> 13);
}

uint16_t ref_f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7FFFu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

double ref_f16_to_double(uint16_t h)
{
    int e = (h >> 10) & 0x1F, m = h & 0x3FF;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return (h & 0x8000) ? -v : v;
}

double ref_bf16_to_double(uint16_t h)
{
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

void ref_dequantize(const uint8_t *bytes, double *out, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = bytes[i];
}

void ref_affine_dequantize(const uint32_t *words, const double *scales, const double *biases, double *out, size_t n,
                           unsigned bits, unsigned group_size)
{
    unsigned per_word = 32 / bits;
    for (size_t i = 0; i < n; i++) {
        uint32_t q = (words[i / per_word] >> (bits * (i % per_word))) & ((1u << bits) - 1);
        out[i] = q * scales[i / group_size] + biases[i / group_size];
    }
}
