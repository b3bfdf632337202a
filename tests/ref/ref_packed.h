/* The packed weight layouts of wgml.h (PACKED WEIGHTS) unpacked on the host, written from
   the layouts' specification (ggml's Q8_0, Q4_0, Q4_K, Q6_K; MLX's affine scheme) for the
   tests of src/ops/packed.c: the same f32 formulas, so the kernels must match bit for bit
   (affine weights with f32 scales: one of the fused and the unfused result). C11 compiles
   a * b + c as two roundings (no contraction in ISO mode). */
#ifndef WGML_REF_PACKED_H
#define WGML_REF_PACKED_H

#include <stddef.h>
#include <stdint.h>

typedef enum ref_packed_format { REF_F16, REF_BF16, REF_Q8_0, REF_Q4_0, REF_Q4_K, REF_Q6_K, REF_AFFINE } ref_packed_format;

typedef struct ref_packed {
    ref_packed_format format;
    size_t rows, cols;
    unsigned bits, group_size;   /* REF_AFFINE */
    int scale_bytes;             /* REF_AFFINE: 4 (f32), 2 (f16) or -2 (bf16) */
    int fused;                   /* REF_AFFINE: q * scale + bias as one fma (differs from
                                    the two roundings only for f32 scales) */
    size_t row_bytes;            /* block formats and affine codes */
    size_t scales_offset, biases_offset;   /* REF_AFFINE */
} ref_packed;

/* W [rows, cols] from the tensor's bytes. */
void ref_packed_unpack(const ref_packed *d, const uint8_t *bytes, float *w);

#endif
