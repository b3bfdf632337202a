#include "ref_conv.h"

void ref_conv1d(const float *x, const float *weight, const float *bias, double *out, size_t dim, size_t seq)
{
    for (size_t d = 0; d < dim; d++)
        for (size_t s = 0; s < seq; s++) {
            double acc = bias[d];
            for (size_t j = 0; j < 3; j++) {
                long t = (long)s + (long)j - 1;
                if (t >= 0 && t < (long)seq) acc += (double)weight[d * 3 + j] * x[d * seq + (size_t)t];
            }
            out[d * seq + s] = acc;
        }
}

void ref_conv1d_causal(const float *x, const float *weight, const float *bias, double *out, size_t batch, size_t seq,
                       size_t dim, size_t k)
{
    for (size_t b = 0; b < batch; b++)
        for (size_t t = 0; t < seq; t++)
            for (size_t d = 0; d < dim; d++) {
                double acc = bias ? bias[d] : 0;
                for (size_t j = 0; j < k; j++) {
                    long s = (long)t - (long)(k - 1) + (long)j;
                    if (s >= 0) acc += (double)weight[d * k + j] * x[(b * seq + (size_t)s) * dim + d];
                }
                out[(b * seq + t) * dim + d] = acc;
            }
}

void ref_conv1d_causal_backward(const float *x, const float *weight, const float *g, double *dx, double *dw, double *db,
                                size_t batch, size_t seq, size_t dim, size_t k)
{
    for (size_t i = 0; i < batch * seq * dim; i++) dx[i] = 0;
    for (size_t i = 0; i < dim * k; i++) dw[i] = 0;
    for (size_t d = 0; d < dim; d++) db[d] = 0;
    for (size_t b = 0; b < batch; b++)
        for (size_t t = 0; t < seq; t++)
            for (size_t d = 0; d < dim; d++) {
                double gv = g[(b * seq + t) * dim + d];
                db[d] += gv;
                for (size_t j = 0; j < k; j++) {
                    long s = (long)t - (long)(k - 1) + (long)j;
                    if (s < 0) continue;
                    size_t at = (b * seq + (size_t)s) * dim + d;
                    dx[at] += (double)weight[d * k + j] * gv;
                    dw[d * k + j] += gv * x[at];
                }
            }
}
