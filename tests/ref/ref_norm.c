#include "ref_norm.h"

#include <math.h>

/* The weight as the kernels read it: w + woff rounded to f32 (exact when woff is 0). */
static double weight_of(const float *w, float woff, size_t j) { return (float)((double)w[j] + woff); }

void ref_rms_norm(const float *x, const float *res, const float *w, float woff, size_t rows, size_t d, double eps,
                  double *out, double *sum)
{
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * d;
        double ss = 0;
        for (size_t j = 0; j < d; j++) {
            double s = (double)xr[j] + (res ? (double)res[r * d + j] : 0.0);
            ss += s * s;
        }
        double rs = 1.0 / sqrt(ss / (double)d + eps);
        for (size_t j = 0; j < d; j++) {
            double s = (double)xr[j] + (res ? (double)res[r * d + j] : 0.0);
            out[r * d + j] = s * rs * weight_of(w, woff, j);
            if (sum) sum[r * d + j] = s;
        }
    }
}

void ref_rms_norm_d(const double *x, const double *w, size_t rows, size_t d, double eps, double *out)
{
    for (size_t r = 0; r < rows; r++) {
        double ss = 0;
        for (size_t j = 0; j < d; j++) ss += x[r * d + j] * x[r * d + j];
        double rs = 1.0 / sqrt(ss / (double)d + eps);
        for (size_t j = 0; j < d; j++) out[r * d + j] = x[r * d + j] * rs * w[j];
    }
}

void ref_rms_norm_backward(const float *g, const float *x, const float *w, float woff, size_t rows, size_t d,
                           double eps, double *gin, double *gw, double *gin_scale, double *gw_scale)
{
    for (size_t j = 0; j < d; j++) {
        if (gw) gw[j] = 0;
        if (gw_scale) gw_scale[j] = 0;
    }
    for (size_t r = 0; r < rows; r++) {
        const float *xr = x + r * d, *gr = g + r * d;
        double ss = 0, dot = 0, dot_abs = 0;
        for (size_t j = 0; j < d; j++) {
            ss += (double)xr[j] * xr[j];
            dot += (double)gr[j] * weight_of(w, woff, j) * xr[j];
            dot_abs += fabs((double)gr[j] * weight_of(w, woff, j) * xr[j]);
        }
        double rs = 1.0 / sqrt(ss / (double)d + eps);
        double c = rs * rs * rs * dot / (double)d;
        for (size_t j = 0; j < d; j++) {
            double a = rs * gr[j] * weight_of(w, woff, j), b = xr[j] * c;
            if (gin) gin[r * d + j] = a - b;
            if (gin_scale) gin_scale[r * d + j] = fabs(a) + fabs(xr[j]) * rs * rs * rs * dot_abs / (double)d;
            double t = (double)gr[j] * xr[j] * rs;
            if (gw) gw[j] += t;
            if (gw_scale) gw_scale[j] += fabs(t);
        }
    }
}
