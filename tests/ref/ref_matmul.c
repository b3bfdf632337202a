#include "ref_matmul.h"

#include <math.h>

void ref_matmul(ref_mm_layout layout, const float *a, const float *b, size_t M, size_t N, size_t K, double *out,
                double *bound)
{
    for (size_t m = 0; m < M; m++)
        for (size_t n = 0; n < N; n++) {
            double s = 0, abs_sum = 0;
            for (size_t k = 0; k < K; k++) {
                double x = layout == REF_MM_TN ? a[k * M + m] : a[m * K + k];
                double y = layout == REF_MM_NT ? b[n * K + k] : b[k * N + n];
                s += x * y;
                abs_sum += fabs(x * y);
            }
            out[m * N + n] = s;
            if (bound) bound[m * N + n] = abs_sum;
        }
}
