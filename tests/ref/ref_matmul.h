/* Double-precision references of the matrix products (src/ops/matmul.c). */
#ifndef WGML_REF_MATMUL_H
#define WGML_REF_MATMUL_H

#include <stddef.h>

/* Layouts of the operands, as the three ops read them. */
typedef enum ref_mm_layout {
    REF_MM_NN = 0,   /* wgml_matmul:    a [M, K], b [K, N] */
    REF_MM_NT = 1,   /* wgml_matmul_bt: a [M, K], b [N, K] */
    REF_MM_TN = 2    /* wgml_matmul_at: a [K, M], b [K, N] */
} ref_mm_layout;

/* out[m, n] = sum_k A(m, k) * B(k, n) in double, and bound[m, n] = sum_k |A(m, k) * B(k, n)|
   (may be NULL): the scale of the rounding error an f32 accumulation can make. */
void ref_matmul(ref_mm_layout layout, const float *a, const float *b, size_t M, size_t N, size_t K, double *out,
                double *bound);

#endif
