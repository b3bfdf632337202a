/* Double-precision reference of the convolution family (src/ops/conv.c). */
#ifndef WGML_REF_CONV_H
#define WGML_REF_CONV_H

#include <stddef.h>

/* Depthwise, kernel 3, padding 1: out[d, s] = bias[d] + sum_j weight[d, j] * x[d, s + j - 1]
   with x zero outside [0, seq); x and out [dim, seq], weight [dim, 3], bias [dim]. */
void ref_conv1d(const float *x, const float *weight, const float *bias, double *out, size_t dim, size_t seq);

/* Causal depthwise, kernel k: out[b, t, d] = bias[d] + sum_j weight[d, j] * x[b, t - (k-1) + j, d]
   with x zero before each sequence; x and out [batch, seq, dim], weight [dim, k], bias [dim]
   or NULL. */
void ref_conv1d_causal(const float *x, const float *weight, const float *bias, double *out, size_t batch, size_t seq,
                       size_t dim, size_t k);
/* Its gradients from g = d loss / d out: dx, dw [dim, k] and db [dim], each written. */
void ref_conv1d_causal_backward(const float *x, const float *weight, const float *g, double *dx, double *dw, double *db,
                                size_t batch, size_t seq, size_t dim, size_t k);

#endif
