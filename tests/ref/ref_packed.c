#include "ref_packed.h"

#include "ref_quant.h"

#include <math.h>
#include <string.h>

static float f16(const uint8_t *p) { return (float)ref_f16_to_double((uint16_t)(p[0] | p[1] << 8)); }
static float bf16(const uint8_t *p) { return (float)ref_bf16_to_double((uint16_t)(p[0] | p[1] << 8)); }

/* value i (i < 32) of a Q8_0 block */
static float q8_0(const uint8_t *b, size_t i) { return (float)(int8_t)b[2 + i] * f16(b); }

/* value i of a Q4_0 block: nibble low for i < 16, high for the rest, of byte i % 16 */
static float q4_0(const uint8_t *b, size_t i)
{
    int q = i < 16 ? b[2 + i] & 15 : b[2 + i - 16] >> 4;
    return (float)(q - 8) * f16(b);
}

/* value i (i < 256) of a Q4_K block */
static float q4_k(const uint8_t *b, size_t i)
{
    const uint8_t *s = b + 4;
    size_t chunk = i / 64, within = i % 64, l = i % 32;
    size_t j = 2 * chunk + (within >= 32);
    int sc, mn;
    if (j < 4) {
        sc = s[j] & 63;
        mn = s[j + 4] & 63;
    } else {
        sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
        mn = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
    uint8_t byte = b[16 + 32 * chunk + l];
    int q = within < 32 ? byte & 15 : byte >> 4;
    return f16(b) * (float)sc * (float)q - f16(b + 2) * (float)mn;
}

/* value i (i < 256) of a Q6_K block */
static float q6_k(const uint8_t *b, size_t i)
{
    size_t h = i / 128, k = (i % 128) / 32, l = i % 32;
    uint8_t ql = b[64 * h + l + 32 * (k % 2)];
    int lo = k < 2 ? ql & 15 : ql >> 4;
    int hi = b[128 + 32 * h + l] >> (2 * k) & 3;
    int8_t sc = (int8_t)b[192 + 8 * h + l / 16 + 2 * k];
    return (f16(b + 208) * (float)sc) * (float)((lo | hi << 4) - 32);
}

static float scale_at(const ref_packed *d, const uint8_t *part, size_t g)
{
    if (d->scale_bytes == 4) {
        float f;
        memcpy(&f, part + 4 * g, 4);
        return f;
    }
    return d->scale_bytes == 2 ? f16(part + 2 * g) : bf16(part + 2 * g);
}

void ref_packed_unpack(const ref_packed *d, const uint8_t *bytes, float *w)
{
    for (size_t r = 0; r < d->rows; r++)
        for (size_t c = 0; c < d->cols; c++) {
            const uint8_t *row = bytes + r * d->row_bytes;
            float v = 0;
            switch (d->format) {
            case REF_F16: v = f16(bytes + 2 * (r * d->cols + c)); break;
            case REF_BF16: v = bf16(bytes + 2 * (r * d->cols + c)); break;
            case REF_Q8_0: v = q8_0(row + c / 32 * 34, c % 32); break;
            case REF_Q4_0: v = q4_0(row + c / 32 * 18, c % 32); break;
            case REF_Q4_K: v = q4_k(row + c / 256 * 144, c % 256); break;
            case REF_Q6_K: v = q6_k(row + c / 256 * 210, c % 256); break;
            case REF_AFFINE: {
                unsigned per = 32 / d->bits;
                const uint8_t *word = row + 4 * (c / per);
                uint32_t x = (uint32_t)word[0] | (uint32_t)word[1] << 8 | (uint32_t)word[2] << 16 | (uint32_t)word[3] << 24;
                uint32_t q = x >> (d->bits * (c % per)) & ((1u << d->bits) - 1);
                size_t groups = (d->cols + d->group_size - 1) / d->group_size, g = r * groups + c / d->group_size;
                float product = (float)q * scale_at(d, bytes + d->scales_offset, g);
                v = d->fused ? fmaf((float)q, scale_at(d, bytes + d->scales_offset, g), scale_at(d, bytes + d->biases_offset, g))
                             : product + scale_at(d, bytes + d->biases_offset, g);
                break;
            }
            }
            w[r * d->cols + c] = v;
        }
}
