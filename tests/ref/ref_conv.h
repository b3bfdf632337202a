/* Double-precision reference of the convolution family (src/ops/conv.c). */
#ifndef WGML_REF_CONV_H
#define WGML_REF_CONV_H

#include <stddef.h>

/* Depthwise, kernel 3, padding 1: out[d, s] = bias[d] + sum_j weight[d, j] * x[d, s + j - 1]
   with x zero outside [0, seq); x and out [dim, seq], weight [dim, 3], bias [dim]. */
void ref_conv1d(const float *x, const float *weight, const float *bias, double *out, size_t dim, size_t seq);

#endif
