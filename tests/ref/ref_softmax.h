/* Double-precision references of softmax (src/ops/softmax.c): the readable specification.
   A tensor is `rows` rows of `d` contiguous values; softmax runs over each row. */
#ifndef WGML_REF_SOFTMAX_H
#define WGML_REF_SOFTMAX_H

#include <stddef.h>

/* out = exp(x - max) / sum(exp(x - max)) over each row, where -inf entries take no part
   (their output is 0) and a row of only -inf entries gives zeros. */
void ref_softmax(const float *x, size_t rows, size_t d, double *out);
void ref_softmax_d(const double *x, size_t rows, size_t d, double *out);

/* gin = y * (g - sum(g * y)) over each row. gin_scale (may be NULL) = |y| * (|g| +
   sum(|g * y|)): the size of the terms gin is made of, for error bounds. */
void ref_softmax_backward(const float *g, const float *y, size_t rows, size_t d, double *gin, double *gin_scale);

#endif
