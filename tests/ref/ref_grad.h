/* Double-precision references of the gradient utilities (src/ops/grad.c). */
#ifndef WGML_REF_GRAD_H
#define WGML_REF_GRAD_H

#include <stddef.h>

/* out[i] = x[i]^2 */
void ref_square(const float *x, double *out, size_t n);
/* out[i] = x[i] * s */
void ref_scale(const float *x, double s, double *out, size_t n);
/* out[i] = a[i] + b[i] */
void ref_accumulate(const float *a, const float *b, double *out, size_t n);
/* sqrt of the sum of squares of every element of count tensors (tensors[i] has ns[i]) */
double ref_global_norm(const float *const *tensors, const size_t *ns, size_t count);
/* the factor clip_grad_by_global_norm applies: min(1, max_norm / (norm + 1e-6)) */
double ref_clip_factor(double norm, double max_norm);

#endif
