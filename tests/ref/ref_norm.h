/* Double-precision references of RMSNorm (src/ops/norm.c): the readable specification.
   A tensor is `rows` rows of `d` contiguous values; the norm runs over each row. */
#ifndef WGML_REF_NORM_H
#define WGML_REF_NORM_H

#include <stddef.h>

/* s = x + res (res may be NULL: s = x); out = s / sqrt(mean(s^2) + eps) * (w + woff), the
   weight_offset woff added to each weight in f32 (rounded once, as the kernels read it; 0
   for the plain norm). sum (may be NULL) receives s. */
void ref_rms_norm(const float *x, const float *res, const float *w, float woff, size_t rows, size_t d, double eps,
                  double *out, double *sum);

/* The same forward on double inputs (for finite differences). */
void ref_rms_norm_d(const double *x, const double *w, size_t rows, size_t d, double eps, double *out);

/* Gradients of out = RMSNorm(x) * w given grad_out g, with r = 1/sqrt(mean(x^2) + eps):
     gin[i] = r * g[i] * w[i] - x[i] * r^3 * sum_j(g[j] * w[j] * x[j]) / d
     gw[j]  = sum over rows of g[j] * x[j] * r
   where w is the weight plus woff as in ref_rms_norm (gw does not depend on it).
   gin_scale[i] (may be NULL) = |r g w[i]| + |x[i]| r^3 sum_j(|g w x|) / d, the size of the
   two terms whose difference gin is (the second as the size of the sum's terms, since the
   sum may cancel); gw_scale[j] (may be NULL) = sum over rows of |g x r|. Float
   results are compared against a tolerance proportional to these. */
void ref_rms_norm_backward(const float *g, const float *x, const float *w, float woff, size_t rows, size_t d,
                           double eps, double *gin, double *gw, double *gin_scale, double *gw_scale);

#endif
