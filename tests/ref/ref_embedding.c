#include "ref_embedding.h"

void ref_embedding(const float *table, const uint32_t *ids, size_t n, size_t v, size_t d, float *out)
{
    for (size_t i = 0; i < n; i++)
        for (size_t c = 0; c < d; c++) out[i * d + c] = ids[i] < v ? table[(size_t)ids[i] * d + c] : 0.0f;
}

void ref_embedding_backward(const float *grad_out, const uint32_t *ids, size_t n, size_t v, size_t d, double *grad_table)
{
    for (size_t k = 0; k < v * d; k++) grad_table[k] = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < v)
            for (size_t c = 0; c < d; c++) grad_table[(size_t)ids[i] * d + c] += grad_out[i * d + c];
}

void ref_embedding_backward_f32_sequential(const float *grad_out, const uint32_t *ids, size_t n, size_t v, size_t d,
                                           float *grad_table)
{
    for (size_t k = 0; k < v * d; k++) grad_table[k] = 0.0f;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < v)
            for (size_t c = 0; c < d; c++) {
                volatile float sum = grad_table[(size_t)ids[i] * d + c] + grad_out[i * d + c];   /* one f32 rounding */
                grad_table[(size_t)ids[i] * d + c] = sum;
            }
}
