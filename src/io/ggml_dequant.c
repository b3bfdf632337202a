/* ggml's block formats to f32 on the host, as ggml's reference dequantisers define them:
   each block holds a run of consecutive values of a row, its scales in f16 (and, in the
   K-quants, 6- or 8-bit sub-block scales), and the quantised values packed low bits
   first. Used when a GGUF model is loaded into f32 weights. */
#include "io.h"

#include <string.h>

static float h(const uint8_t *p) { return wgml__half_to_float((uint16_t)(p[0] | p[1] << 8)); }

/* Q4_0: f16 d, then 16 bytes: value j (j < 16) in the low nibble of byte j, value j + 16
   in its high nibble; x = (q - 8) d. */
static void q4_0(const uint8_t *b, float *y)
{
    float d = h(b);
    for (int j = 0; j < 16; j++) {
        y[j] = (float)((b[2 + j] & 15) - 8) * d;
        y[j + 16] = (float)((b[2 + j] >> 4) - 8) * d;
    }
}

/* Q4_1: f16 d, f16 m, 16 bytes of nibbles as Q4_0; x = q d + m. */
static void q4_1(const uint8_t *b, float *y)
{
    float d = h(b), m = h(b + 2);
    for (int j = 0; j < 16; j++) {
        y[j] = (float)(b[4 + j] & 15) * d + m;
        y[j + 16] = (float)(b[4 + j] >> 4) * d + m;
    }
}

/* Q5_0 / Q5_1: f16 d (and f16 m), a u32 of fifth bits (bit j for value j), 16 bytes of
   nibbles as Q4_0; x = (q - 16) d, or q d + m. */
static void q5(const uint8_t *b, float *y, bool with_min)
{
    float d = h(b), m = with_min ? h(b + 2) : 0;
    const uint8_t *p = b + (with_min ? 4 : 2);
    uint32_t qh = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    const uint8_t *qs = p + 4;
    int off = with_min ? 0 : 16;
    for (int j = 0; j < 16; j++) {
        int lo = (qs[j] & 15) | (int)((qh >> j) & 1) << 4, hi = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
        y[j] = (float)(lo - off) * d + m;
        y[j + 16] = (float)(hi - off) * d + m;
    }
}

/* Q8_0 (Q8_1): f16 d (and an f16 sum, unused), 32 signed bytes; x = q d. */
static void q8(const uint8_t *b, float *y, int skip)
{
    float d = h(b);
    for (int j = 0; j < 32; j++) y[j] = (float)(int8_t)b[2 + skip + j] * d;
}

/* The 6-bit scale and minimum of sub-block j (of 8) of Q4_K / Q5_K, packed in 12 bytes:
   sub-blocks 0-3 in the low 6 bits of bytes j and j + 4; 4-7 in the nibbles of bytes
   j + 4 with their top 2 bits in the top bits of bytes j - 4 and j. */
static void scale_min_k4(int j, const uint8_t *q, int *sc, int *mn)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 15) | (q[j - 4] >> 6) << 4;
        *mn = (q[j + 4] >> 4) | (q[j] >> 6) << 4;
    }
}

/* Q4_K: f16 d, f16 dmin, 12 bytes of scales and minimums, 128 bytes of nibbles; each 64
   values are two sub-blocks of 32 (the low, then the high nibbles of 32 bytes):
   x = d sc q - dmin mn. Q5_K adds 32 bytes of fifth bits before the nibbles (bit 2i of
   byte l for sub-block 2i's value l, bit 2i + 1 for sub-block 2i + 1's). */
static void qk45(const uint8_t *b, float *y, bool five)
{
    float d = h(b), dmin = h(b + 2);
    const uint8_t *scales = b + 4, *qh = b + 16, *q = b + (five ? 48 : 16);
    for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32) {
        int sc1, m1, sc2, m2;
        scale_min_k4(is, scales, &sc1, &m1);
        scale_min_k4(is + 1, scales, &sc2, &m2);
        float d1 = d * (float)sc1, n1 = dmin * (float)m1, d2 = d * (float)sc2, n2 = dmin * (float)m2;
        for (int l = 0; l < 32; l++) {
            int hi1 = five ? (qh[l] >> is & 1) << 4 : 0, hi2 = five ? (qh[l] >> (is + 1) & 1) << 4 : 0;
            y[j + l] = d1 * (float)((q[l] & 15) + hi1) - n1;
            y[j + 32 + l] = d2 * (float)((q[l] >> 4) + hi2) - n2;
        }
    }
}

/* Q6_K: 128 bytes of low nibbles, 64 bytes of high 2-bit pairs, 16 signed 8-bit scales
   (one per 16 values), f16 d; x = d sc (q - 32). Each half of 128 values takes 64 bytes
   of ql, 32 of qh and 8 scales: value l + 32 k (k < 4) of the half has the low nibble of
   ql[l] (k = 0), ql[l + 32] (k = 1), their high nibbles (k = 2, 3), and bits 2k, 2k + 1
   of qh[l]. */
static void q6_k(const uint8_t *b, float *y)
{
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    float d = h(b + 208);
    for (int half = 0; half < 2; half++, ql += 64, qh += 32, sc += 8, y += 128)
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = ((ql[l] & 15) | (qh[l] & 3) << 4) - 32, q2 = ((ql[l + 32] & 15) | (qh[l] >> 2 & 3) << 4) - 32;
            int q3 = ((ql[l] >> 4) | (qh[l] >> 4 & 3) << 4) - 32, q4 = ((ql[l + 32] >> 4) | (qh[l] >> 6 & 3) << 4) - 32;
            y[l] = d * (float)sc[is] * (float)q1;
            y[l + 32] = d * (float)sc[is + 2] * (float)q2;
            y[l + 64] = d * (float)sc[is + 4] * (float)q3;
            y[l + 96] = d * (float)sc[is + 6] * (float)q4;
        }
}

/* Q2_K: 16 bytes of 4-bit scale and minimum pairs (one per 16 values), 64 bytes of 2-bit
   values, f16 d, f16 dmin; x = d sc q - dmin mn. Each half of 128 values reads 32 bytes of
   qs four times, shifting by 2, 16 values from each 16 bytes. */
static void q2_k(const uint8_t *b, float *y)
{
    const uint8_t *scales = b, *q = b + 16;
    float d = h(b + 80), dmin = h(b + 82);
    int is = 0;
    for (int half = 0; half < 2; half++, q += 32)
        for (int shift = 0; shift < 8; shift += 2)
            for (int part = 0; part < 2; part++) {
                int s = scales[is++];
                float dl = d * (float)(s & 15), ml = dmin * (float)(s >> 4);
                for (int l = 0; l < 16; l++) *y++ = dl * (float)(q[l + 16 * part] >> shift & 3) - ml;
            }
}

/* Q3_K: 32 bytes of high bits (hmask), 64 bytes of 2-bit values, 12 bytes of 6-bit scales
   (biased by 32), f16 d; x = d (sc - 32) (q - 4 when the value's high bit is clear). The
   16 scales: the low nibbles of bytes 0-7 then their high nibbles, with 2 more bits each
   from bytes 8-11. */
static void q3_k(const uint8_t *b, float *y)
{
    const uint8_t *hm = b, *q = b + 32, *s = b + 96;
    float d = h(b + 108);
    int sc[16];
    for (int i = 0; i < 16; i++) {
        int low = i < 8 ? s[i] & 15 : s[i - 8] >> 4;
        int high = s[8 + i % 4] >> (2 * (i / 4)) & 3;
        sc[i] = (low | high << 4) - 32;
    }
    int is = 0;
    uint8_t m = 1;
    for (int half = 0; half < 2; half++, q += 32)
        for (int shift = 0; shift < 8; shift += 2, m = (uint8_t)(m << 1))
            for (int part = 0; part < 2; part++) {
                float dl = d * (float)sc[is++];
                for (int l = 0; l < 16; l++) {
                    int k = l + 16 * part;
                    *y++ = dl * (float)((q[k] >> shift & 3) - ((hm[k] & m) ? 0 : 4));
                }
            }
}

bool wgml__ggml_to_f32(wgml_ggml_type t, const void *src, uint64_t n, float *dst)
{
    uint32_t block, bytes;
    if (!wgml_ggml_type_block(t, &block, &bytes) || n % block) return false;
    const uint8_t *b = src;
    uint64_t blocks = n / block;
    for (uint64_t i = 0; i < blocks; i++, b += bytes, dst += block) {
        switch (t) {
        case WGML_GGML_F32: memcpy(dst, b, 4); break;
        case WGML_GGML_F16: dst[0] = h(b); break;
        case WGML_GGML_BF16: dst[0] = wgml__bf16_to_float((uint16_t)(b[0] | b[1] << 8)); break;
        case WGML_GGML_Q4_0: q4_0(b, dst); break;
        case WGML_GGML_Q4_1: q4_1(b, dst); break;
        case WGML_GGML_Q5_0: q5(b, dst, false); break;
        case WGML_GGML_Q5_1: q5(b, dst, true); break;
        case WGML_GGML_Q8_0: q8(b, dst, 0); break;
        case WGML_GGML_Q8_1: q8(b, dst, 2); break;
        case WGML_GGML_Q2_K: q2_k(b, dst); break;
        case WGML_GGML_Q3_K: q3_k(b, dst); break;
        case WGML_GGML_Q4_K: qk45(b, dst, false); break;
        case WGML_GGML_Q5_K: qk45(b, dst, true); break;
        case WGML_GGML_Q6_K: q6_k(b, dst); break;
        default: return false;   /* integers, f64 and Q8_K are not weights */
        }
    }
    return true;
}
