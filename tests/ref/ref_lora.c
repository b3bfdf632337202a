/* The LoRA reference (see ref_lora.h). */
#include "ref_lora.h"

#include <string.h>

/* the model's parameter order per layer: attn_norm, q, k, v, o, ffn_norm, gate, up, down */
static const int kinds[7] = { REF_WQ, REF_WK, REF_WV, REF_WO, REF_WG, REF_WU, REF_WD };

int ref_lora_param(const ref_model_shape *s, int layer, int k) { return ref_model_param(s, layer, kinds[k]); }

void ref_lora_dims(const ref_model_shape *s, int k, int *out, int *in)
{
    int D = s->dim, QD = s->heads * s->head_dim, KD = s->kv_heads * s->head_dim, F = s->ffn;
    static const int rows[7] = { 0, 1, 1, 2, 3, 3, 2 }, cols[7] = { 2, 2, 2, 0, 2, 2, 3 };
    int dims[4] = { QD, KD, D, F };   /* 0: QD, 1: KD, 2: D, 3: F */
    *out = dims[rows[k]];
    *in = k == 3 ? QD : dims[cols[k]];
}

void ref_lora_merge(const ref_model_shape *s, const double *const *params, int rank, double scale,
                    const double *const *a, const double *const *b, double *const *merged)
{
    for (int i = 0; i < ref_model_param_count(s); i++)
        memcpy(merged[i], params[i], ref_model_param_numel(s, i) * sizeof(double));
    for (int l = 0; l < s->layers; l++)
        for (int k = 0; k < 7; k++) {
            const double *A = a[l * 7 + k], *B = b[l * 7 + k];
            if (!A) continue;
            int out, in;
            ref_lora_dims(s, k, &out, &in);
            double *W = merged[ref_lora_param(s, l, k)];
            for (int o = 0; o < out; o++)
                for (int i = 0; i < in; i++) {
                    double sum = 0;
                    for (int r = 0; r < rank; r++) sum += B[(size_t)o * rank + r] * A[(size_t)r * in + i];
                    W[(size_t)o * in + i] += scale * sum;
                }
        }
}

void ref_lora_grads(int out, int in, int rank, double scale, const double *a, const double *b, const double *g, double *da,
                    double *db)
{
    for (int r = 0; r < rank; r++)
        for (int i = 0; i < in; i++) {
            double sum = 0;
            for (int o = 0; o < out; o++) sum += b[(size_t)o * rank + r] * g[(size_t)o * in + i];
            da[(size_t)r * in + i] = scale * sum;
        }
    for (int o = 0; o < out; o++)
        for (int r = 0; r < rank; r++) {
            double sum = 0;
            for (int i = 0; i < in; i++) sum += g[(size_t)o * in + i] * a[(size_t)r * in + i];
            db[(size_t)o * rank + r] = scale * sum;
        }
}
