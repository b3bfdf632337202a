#include "ref_softmax.h"

#include <math.h>

static void softmax_row(const double *x, size_t d, double *out)
{
    double m = -INFINITY;
    for (size_t j = 0; j < d; j++)
        if (x[j] > m) m = x[j];
    if (m == -INFINITY) {   /* fully masked */
        for (size_t j = 0; j < d; j++) out[j] = 0;
        return;
    }
    double s = 0;
    for (size_t j = 0; j < d; j++) s += x[j] == -INFINITY ? 0.0 : exp(x[j] - m);
    for (size_t j = 0; j < d; j++) out[j] = x[j] == -INFINITY ? 0.0 : exp(x[j] - m) / s;
}

void ref_softmax_d(const double *x, size_t rows, size_t d, double *out)
{
    for (size_t r = 0; r < rows; r++) softmax_row(x + r * d, d, out + r * d);
}

void ref_softmax(const float *x, size_t rows, size_t d, double *out)
{
    for (size_t i = 0; i < rows * d; i++) out[i] = x[i];
    for (size_t r = 0; r < rows; r++) softmax_row(out + r * d, d, out + r * d);   /* in place */
}

void ref_softmax_backward(const float *g, const float *y, size_t rows, size_t d, double *gin, double *gin_scale)
{
    for (size_t r = 0; r < rows; r++) {
        const float *gr = g + r * d, *yr = y + r * d;
        double dot = 0, dot_abs = 0;
        for (size_t j = 0; j < d; j++) {
            dot += (double)gr[j] * yr[j];
            dot_abs += fabs((double)gr[j] * yr[j]);
        }
        for (size_t j = 0; j < d; j++) {
            if (gin) gin[r * d + j] = (double)yr[j] * ((double)gr[j] - dot);
            if (gin_scale) gin_scale[r * d + j] = fabs((double)yr[j]) * (fabs((double)gr[j]) + dot_abs);
        }
    }
}
