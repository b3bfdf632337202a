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
