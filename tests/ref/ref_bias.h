/* Double-precision reference of the bias ops (src/ops/bias.c). */
#ifndef WGML_REF_BIAS_H
#define WGML_REF_BIAS_H

#include <stddef.h>

/* out[r, c] = x[r, c] + bias[c] over rows of cols. */
void ref_bias_add(const float *x, const float *bias, double *out, size_t rows, size_t cols);
/* grad_bias[c] = sum over r of grad_out[r, c] (+ start[c] when start is not NULL). */
void ref_bias_grad(const float *grad_out, const float *start, double *grad_bias, size_t rows, size_t cols);

#endif
