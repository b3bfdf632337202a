#include "ref.h"

void ref_add(const float *a, const float *b, double *out, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = (double)a[i] + (double)b[i];
}

void ref_sub(const float *a, const float *b, double *out, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = (double)a[i] - (double)b[i];
}

void ref_mul(const float *a, const float *b, double *out, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = (double)a[i] * (double)b[i];
}
