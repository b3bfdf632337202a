/* Double-precision reference of attention (forward and backward), the specification of
   src/kernels/attention_forward.wgsl: scores materialised row by row, no tiling, no online softmax.

   Layout: q, out, dout, dq [batch, seq_q, heads, dim]; k, v, dk, dv [batch, seq_k,
   kv_heads, dim]; query head h reads kv head h / (heads / kv_heads).
   Key j is visible to query i when (not causal or j <= i + offset) and (window == 0 or
   |i + offset - j| < window). The logit is scale * q.k + mask[b, h, i, j] (size-1 mask
   dimensions broadcast). Keys that are not visible, or whose mask entry is -inf, get
   probability 0; a row where every key is hidden has all probabilities 0 (output 0).
   Dropout keeps P[i][j] when ref_attn_keep(...) and scales it by 1 / (1 - p). */
#ifndef WGML_REF_ATTENTION_H
#define WGML_REF_ATTENTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ref_attn {
    size_t batch, seq_q, seq_k, heads, kv_heads, dim;
    bool causal;
    uint32_t offset, window;
    float dropout;            /* p in [0, 1) */
    uint64_t seed;
    double scale;             /* resolved: never 0 here */
    const double *mask;       /* NULL: no mask */
    size_t mask_shape[4];     /* [batch|1, heads|1, seq_q|1, seq_k|1] */
} ref_attn;

/* The 32-bit mixing function of the dropout hash ("lowbias32"). */
uint32_t ref_attn_mix32(uint32_t x);
/* The dropout decision for (batch * heads + head, query i, key j): true keeps it. */
bool ref_attn_keep(uint64_t seed, float p, uint32_t bh, uint32_t i, uint32_t j);

void ref_attn_forward(const ref_attn *a, const double *q, const double *k, const double *v, double *out);
/* lse [batch, heads, seq_q]: ln(sum_j exp(score_ij)) over the visible keys (scores after
   scale and mask), -inf for a row whose scores are all -inf or hidden. */
void ref_attn_lse(const ref_attn *a, const double *q, const double *k, double *lse);
/* Gradients of sum(dout * out) with respect to q, k, v (written, not accumulated). */
void ref_attn_backward(const ref_attn *a, const double *q, const double *k, const double *v, const double *dout,
                       double *dq, double *dk, double *dv);

#endif
