/* The LoRA reference (see ref_lora.h). */
#include "ref_lora.h"

#include <string.h>

/* each target's kind in an attention layer and in a convolution layer (-1: none) */
static const int attn_kinds[REF_LORA_KINDS] = { REF_WQ, REF_WK, REF_WV, REF_WO, REF_WG, REF_WU, REF_WD, -1 };
static const int conv_kinds[REF_LORA_KINDS] = { -1, -1, -1, REF_CONV_OUT, REF_WG, REF_WU, REF_WD, REF_CONV_IN };

static int kind_of(const ref_model_shape *s, int layer, int k)
{
    return (s->conv_kernel && s->conv[layer] ? conv_kinds : attn_kinds)[k];
}

int ref_lora_param(const ref_model_shape *s, int layer, int k)
{
    int kind = kind_of(s, layer, k);
    return kind < 0 ? -1 : ref_model_param(s, layer, kind);
}

void ref_lora_dims(const ref_model_shape *s, int layer, int k, int *out, int *in)
{
    int D = s->dim, QD = s->heads * s->head_dim, KD = s->kv_heads * s->head_dim, F = s->ffn;
    switch (kind_of(s, layer, k)) {
    case REF_WQ: *out = QD; *in = D; break;
    case REF_WK: case REF_WV: *out = KD; *in = D; break;
    case REF_WO: *out = D; *in = QD; break;
    case REF_WG: case REF_WU: *out = F; *in = D; break;
    case REF_WD: *out = D; *in = F; break;
    case REF_CONV_IN: *out = 3 * D; *in = D; break;
    case REF_CONV_OUT: *out = D; *in = D; break;
    default: *out = *in = 0;
    }
}

void ref_lora_merge(const ref_model_shape *s, const double *const *params, int rank, double scale,
                    const double *const *a, const double *const *b, double *const *merged)
{
    for (int i = 0; i < ref_model_param_count(s); i++)
        memcpy(merged[i], params[i], ref_model_param_numel(s, i) * sizeof(double));
    for (int l = 0; l < s->layers; l++)
        for (int k = 0; k < REF_LORA_KINDS; k++) {
            const double *A = a[l * REF_LORA_KINDS + k], *B = b[l * REF_LORA_KINDS + k];
            if (!A) continue;
            int out, in;
            ref_lora_dims(s, l, k, &out, &in);
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
