/* Double-precision references of the losses (src/ops/loss.c). */
#ifndef WGML_REF_LOSS_H
#define WGML_REF_LOSS_H

#include <stddef.h>
#include <stdint.h>

/* out[i] = 0.5 * (pred[i] - target[i])^2 */
void ref_mse(const float *pred, const float *target, double *out, size_t n);
/* grad[i] = pred[i] - target[i] */
void ref_mse_backward(const float *pred, const float *target, double *grad, size_t n);

/* Cross-entropy of n rows of v logits (double inputs, so finite differences can nudge
   them). Row r with target t = targets[r]:
     t == ignore:  losses[r] = 0, gradient row 0, not counted
     t >= v:       losses[r] = NaN, gradient row 0, not counted, *mean = NaN
     otherwise:    losses[r] = logsumexp(row) - x[t], counted
   *mean = sum of counted losses / count (0 when none count);
   grad = d(*mean)/d(logits) = (softmax(row) - onehot(t)) / count on counted rows.
   Any output may be NULL. */
void ref_cross_entropy(const double *logits, const uint32_t *targets, size_t n, size_t v, uint32_t ignore,
                       double *losses, double *mean, double *grad);

#endif
