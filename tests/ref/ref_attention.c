#include "ref_attention.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

uint32_t ref_attn_mix32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

/* keep iff mix32(row_key ^ key_hash) >= floor(p * 2^32), where
     seed_key  = mix32(seed_lo ^ mix32(seed_hi ^ 0x9e3779b9))
     seed_key2 = mix32(seed_key ^ 0x85ebca6b)
     row_key   = mix32(mix32(seed_key ^ bh) + i)
     key_hash  = mix32(seed_key2 ^ j) */
bool ref_attn_keep(uint64_t seed, float p, uint32_t bh, uint32_t i, uint32_t j)
{
    uint32_t threshold = (uint32_t)floor((double)p * 4294967296.0);
    uint32_t seed_key = ref_attn_mix32((uint32_t)seed ^ ref_attn_mix32((uint32_t)(seed >> 32) ^ 0x9e3779b9u));
    uint32_t seed_key2 = ref_attn_mix32(seed_key ^ 0x85ebca6bu);
    uint32_t row_key = ref_attn_mix32(ref_attn_mix32(seed_key ^ bh) + i);
    uint32_t key_hash = ref_attn_mix32(seed_key2 ^ j);
    return ref_attn_mix32(row_key ^ key_hash) >= threshold;
}

static bool visible(const ref_attn *a, size_t i, size_t j)
{
    long long pos = (long long)i + a->offset, jj = (long long)j;
    if (a->causal && jj > pos) return false;
    if (a->window > 0 && llabs(pos - jj) >= (long long)a->window) return false;
    return true;
}

static double mask_at(const ref_attn *a, size_t b, size_t h, size_t i, size_t j)
{
    if (!a->mask) return 0.0;
    const size_t *s = a->mask_shape;
    size_t ib = s[0] == 1 ? 0 : b, ih = s[1] == 1 ? 0 : h, iq = s[2] == 1 ? 0 : i, ik = s[3] == 1 ? 0 : j;
    return a->mask[((ib * s[1] + ih) * s[2] + iq) * s[3] + ik];
}

static double dot(const double *x, const double *y, size_t n)
{
    double s = 0;
    for (size_t d = 0; d < n; d++) s += x[d] * y[d];
    return s;
}

/* One query row: fills P (softmax probabilities, 0 for hidden keys) and the dropout
   factors Z (keep / (1 - p), or 0) for every key. */
static void row_probs(const ref_attn *a, const double *q, const double *k, size_t b, size_t h, size_t i, double *P,
                      double *Z)
{
    size_t D = a->dim, group = a->heads / a->kv_heads, kvh = h / group;
    double mx = -INFINITY;
    for (size_t j = 0; j < a->seq_k; j++) {
        double s = -INFINITY;
        if (visible(a, i, j)) {
            const double *qi = q + ((b * a->seq_q + i) * a->heads + h) * D;
            const double *kj = k + ((b * a->seq_k + j) * a->kv_heads + kvh) * D;
            s = a->scale * dot(qi, kj, D) + mask_at(a, b, h, i, j);
        }
        P[j] = s;
        if (s > mx) mx = s;
    }
    double sum = 0;
    for (size_t j = 0; j < a->seq_k; j++) {
        P[j] = mx == -INFINITY ? 0.0 : exp(P[j] - mx);
        sum += P[j];
    }
    for (size_t j = 0; j < a->seq_k; j++) {
        P[j] = sum > 0 ? P[j] / sum : 0.0;
        bool keep = a->dropout <= 0 || ref_attn_keep(a->seed, a->dropout, (uint32_t)(b * a->heads + h), (uint32_t)i, (uint32_t)j);
        Z[j] = keep ? 1.0 / (1.0 - (double)a->dropout) : 0.0;
    }
}

void ref_attn_forward(const ref_attn *a, const double *q, const double *k, const double *v, double *out)
{
    size_t D = a->dim, group = a->heads / a->kv_heads;
    double *P = malloc((a->seq_k + 1) * sizeof *P), *Z = malloc((a->seq_k + 1) * sizeof *Z);
    for (size_t b = 0; b < a->batch; b++)
        for (size_t h = 0; h < a->heads; h++)
            for (size_t i = 0; i < a->seq_q; i++) {
                row_probs(a, q, k, b, h, i, P, Z);
                double *o = out + ((b * a->seq_q + i) * a->heads + h) * D;
                memset(o, 0, D * sizeof *o);
                for (size_t j = 0; j < a->seq_k; j++) {
                    double w = P[j] * Z[j];
                    if (w == 0) continue;
                    const double *vj = v + ((b * a->seq_k + j) * a->kv_heads + h / group) * D;
                    for (size_t d = 0; d < D; d++) o[d] += w * vj[d];
                }
            }
    free(P);
    free(Z);
}

void ref_attn_lse(const ref_attn *a, const double *q, const double *k, double *lse)
{
    size_t D = a->dim, group = a->heads / a->kv_heads;
    double *S = malloc((a->seq_k + 1) * sizeof *S);
    for (size_t b = 0; b < a->batch; b++)
        for (size_t h = 0; h < a->heads; h++)
            for (size_t i = 0; i < a->seq_q; i++) {
                double mx = -INFINITY;
                for (size_t j = 0; j < a->seq_k; j++) {
                    S[j] = -INFINITY;
                    if (visible(a, i, j)) {
                        const double *qi = q + ((b * a->seq_q + i) * a->heads + h) * D;
                        const double *kj = k + ((b * a->seq_k + j) * a->kv_heads + h / group) * D;
                        S[j] = a->scale * dot(qi, kj, D) + mask_at(a, b, h, i, j);
                    }
                    if (S[j] > mx) mx = S[j];
                }
                double sum = 0;
                if (mx != -INFINITY)
                    for (size_t j = 0; j < a->seq_k; j++) sum += exp(S[j] - mx);
                lse[(b * a->heads + h) * a->seq_q + i] = mx == -INFINITY ? -INFINITY : mx + log(sum);
            }
    free(S);
}

void ref_attn_backward(const ref_attn *a, const double *q, const double *k, const double *v, const double *dout,
                       double *dq, double *dk, double *dv)
{
    size_t D = a->dim, group = a->heads / a->kv_heads;
    memset(dq, 0, a->batch * a->seq_q * a->heads * D * sizeof *dq);
    memset(dk, 0, a->batch * a->seq_k * a->kv_heads * D * sizeof *dk);
    memset(dv, 0, a->batch * a->seq_k * a->kv_heads * D * sizeof *dv);
    double *P = malloc((a->seq_k + 1) * sizeof *P), *Z = malloc((a->seq_k + 1) * sizeof *Z);
    double *dP = malloc((a->seq_k + 1) * sizeof *dP);
    for (size_t b = 0; b < a->batch; b++)
        for (size_t h = 0; h < a->heads; h++)
            for (size_t i = 0; i < a->seq_q; i++) {
                row_probs(a, q, k, b, h, i, P, Z);
                size_t qo = ((b * a->seq_q + i) * a->heads + h) * D;
                const double *go = dout + qo;
                /* out = sum_j P_j Z_j v_j, so d/dP_j = Z_j (go . v_j), dv_j += P_j Z_j go */
                double pdp = 0;
                for (size_t j = 0; j < a->seq_k; j++) {
                    size_t ko = ((b * a->seq_k + j) * a->kv_heads + h / group) * D;
                    dP[j] = Z[j] * dot(go, v + ko, D);
                    pdp += P[j] * dP[j];
                    for (size_t d = 0; d < D; d++) dv[ko + d] += P[j] * Z[j] * go[d];
                }
                /* softmax backward: dS_j = P_j (dP_j - sum_k P_k dP_k); s_j = scale q.k_j + mask */
                for (size_t j = 0; j < a->seq_k; j++) {
                    double ds = P[j] * (dP[j] - pdp);
                    if (ds == 0) continue;
                    size_t ko = ((b * a->seq_k + j) * a->kv_heads + h / group) * D;
                    for (size_t d = 0; d < D; d++) {
                        dq[qo + d] += a->scale * ds * k[ko + d];
                        dk[ko + d] += a->scale * ds * q[qo + d];
                    }
                }
            }
    free(P);
    free(Z);
    free(dP);
}
