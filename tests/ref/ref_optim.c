#include "ref_optim.h"

#include <math.h>

void ref_sgd_step(double *w, const float *g, size_t n, double lr)
{
    for (size_t i = 0; i < n; i++) w[i] -= lr * (double)g[i];
}

void ref_adamw_step(double *w, double *m, double *v, const float *g, size_t n, double lr, double beta1, double beta2,
                    double eps, double weight_decay, uint32_t t, double *scale)
{
    double bc1 = 1.0 - pow(beta1, (double)t), bc2 = 1.0 - pow(beta2, (double)t);
    for (size_t i = 0; i < n; i++) {
        double gi = g[i];
        double decayed = w[i] * (1.0 - lr * weight_decay);
        double m_terms = fabs(beta1 * m[i]) + fabs((1.0 - beta1) * gi);   /* m may cancel: its rounding scale */
        m[i] = beta1 * m[i] + (1.0 - beta1) * gi;
        v[i] = beta2 * v[i] + (1.0 - beta2) * gi * gi;
        double denom = sqrt(v[i] / bc2) + eps;
        double update = lr * (m[i] / bc1) / denom;
        w[i] = decayed - update;
        if (scale) scale[i] = fabs(decayed) + lr * (m_terms / bc1) / denom;
    }
}
