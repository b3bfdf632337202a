/* Double-precision references of the optimizer steps (src/ops/optim.c). */
#ifndef WGML_REF_OPTIM_H
#define WGML_REF_OPTIM_H

#include <stddef.h>
#include <stdint.h>

/* w[i] -= lr * g[i] */
void ref_sgd_step(double *w, const float *g, size_t n, double lr);

/* One AdamW step as torch.optim.AdamW defines it, for the 1-based step t:
     w  = w * (1 - lr * weight_decay)
     m  = beta1 * m + (1 - beta1) * g
     v  = beta2 * v + (1 - beta2) * g^2
     w -= lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
   When scale is not NULL it receives, per element, the magnitude of the terms that make
   up the new w, the natural scale of its rounding error: |w * decay| plus the update
   computed with the magnitude of m's two terms in place of m (m = beta1 m + (1 - beta1) g
   can cancel, and its rounding error then reaches the update at lr / (sqrt(v) + eps)
   times that magnitude; |update| alone once failed at 10x the tolerance, for a new m
   of 3e-5 from terms of 0.07). */
void ref_adamw_step(double *w, double *m, double *v, const float *g, size_t n, double lr, double beta1, double beta2,
                    double eps, double weight_decay, uint32_t t, double *scale);

#endif
