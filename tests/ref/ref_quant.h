/* Double-precision references of the quantization family (src/ops/quant.c), and the
   float <-> f16 / bf16 conversions the tests build their inputs with. */
#ifndef WGML_REF_QUANT_H
#define WGML_REF_QUANT_H

#include <stddef.h>
#include <stdint.h>

/* IEEE binary16 and bfloat16 from f32, rounding to nearest, ties to even (overflow to
   infinity, subnormals kept, NaN stays NaN), and back (exact). */
uint16_t ref_f32_to_f16(float f);
uint16_t ref_f32_to_bf16(float f);
double ref_f16_to_double(uint16_t h);
double ref_bf16_to_double(uint16_t h);

/* out[i] = bytes[i] */
void ref_dequantize(const uint8_t *bytes, double *out, size_t n);

/* MLX affine: out[i] = q(i) * scales[i / group_size] + biases[i / group_size], with q(i)
   element i of the packed little-endian stream of u32 words: bits = 8: byte i; bits = 4:
   bits [4j, 4j + 4) of word i / 8, j = i % 8. scales and biases are given as doubles
   (already decoded from their dtype). */
void ref_affine_dequantize(const uint32_t *words, const double *scales, const double *biases, double *out, size_t n,
                           unsigned bits, unsigned group_size);

#endif
