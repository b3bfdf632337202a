#include "ref_loss.h"

#include <math.h>
#include <stdbool.h>

void ref_mse(const float *pred, const float *target, double *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double d = (double)pred[i] - (double)target[i];
        out[i] = 0.5 * d * d;
    }
}

void ref_mse_backward(const float *pred, const float *target, double *grad, size_t n)
{
    for (size_t i = 0; i < n; i++) grad[i] = (double)pred[i] - (double)target[i];
}

void ref_cross_entropy(const double *logits, const uint32_t *targets, size_t n, size_t v, uint32_t ignore,
                       double *losses, double *mean, double *grad)
{
    size_t count = 0, invalid = 0;
    for (size_t r = 0; r < n; r++) {
        uint32_t t = targets[r];
        if (t != ignore && t < v) count++;
        if (t != ignore && t >= v) invalid++;
    }
    double sum = 0;
    for (size_t r = 0; r < n; r++) {
        const double *x = logits + r * v;
        uint32_t t = targets[r];
        bool live = t != ignore && t < v;
        double m = x[0];
        for (size_t i = 1; i < v; i++) m = x[i] > m ? x[i] : m;
        double s = 0;
        for (size_t i = 0; i < v; i++) s += exp(x[i] - m);
        double loss = t == ignore ? 0.0 : t >= v ? NAN : (m - x[t]) + log(s);
        if (live) sum += loss;
        if (losses) losses[r] = loss;
        if (grad)
            for (size_t i = 0; i < v; i++)
                grad[r * v + i] = live ? (exp(x[i] - m) / s - (i == t ? 1.0 : 0.0)) / (double)count : 0.0;
    }
    if (mean) *mean = invalid ? NAN : count ? sum / (double)count : 0.0;
}
