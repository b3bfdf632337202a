#include "ref_grad.h"

#include <math.h>

void ref_square(const float *x, double *out, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = (double)x[i] * (double)x[i];
}

void ref_scale(const float *x, double s, double *out, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = (double)x[i] * s;
}

void ref_accumulate(const float *a, const float *b, double *out, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = (double)a[i] + (double)b[i];
}

double ref_global_norm(const float *const *tensors, const size_t *ns, size_t count)
{
    double sum = 0;
    for (size_t t = 0; t < count; t++)
        for (size_t i = 0; i < ns[t]; i++) sum += (double)tensors[t][i] * (double)tensors[t][i];
    return sqrt(sum);
}

double ref_clip_factor(double norm, double max_norm)
{
    double f = max_norm / (norm + 1e-6);
    return f < 1 ? f : 1;
}
