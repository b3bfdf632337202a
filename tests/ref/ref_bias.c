/* See ref_bias.h. */
#include "ref_bias.h"

void ref_bias_add(const float *x, const float *bias, double *out, size_t rows, size_t cols)
{
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) out[r * cols + c] = (double)x[r * cols + c] + (double)bias[c];
}

void ref_bias_grad(const float *grad_out, const float *start, double *grad_bias, size_t rows, size_t cols)
{
    for (size_t c = 0; c < cols; c++) {
        double s = start ? start[c] : 0;
        for (size_t r = 0; r < rows; r++) s += grad_out[r * cols + c];
        grad_bias[c] = s;
    }
}
