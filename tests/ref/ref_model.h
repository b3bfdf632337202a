/* A plain CPU reference of the Llama-style decoder that src/model.c runs on the GPU: the
   forward pass, the mean cross-entropy loss and every parameter's gradient, in double.
   It is the specification of the model, written to be read (in the manner of llm.c's
   train_gpt2.c): one function per layer kind, forward and backward side by side.

   The model, for tokens ids[B, T]:
       h      = embed[ids]                                   [N = B*T, D]
       for each layer:
         xn   = RMSNorm(h) * attn_norm
         q    = rope(xn @ Wq^T), k = rope(xn @ Wk^T), v = xn @ Wv^T
                (Qwen2, qkv_bias: + bq, bk, bv after the products;
                 Qwen3, qk_norm: each head of q and k RMSNorm(.) * q_norm / k_norm
                 [head_dim] before rope)
         att  = causal grouped-query softmax(q k^T / sqrt(hd)) v
                (window w > 0, Mistral: query i sees keys j with i - w < j <= i)
         h    = h + att @ Wo^T
         xn2  = RMSNorm(h) * ffn_norm
         h    = h + (silu(xn2 @ Wg^T) * (xn2 @ Wu^T)) @ Wd^T
       LFM2's convolution layers (conv[l]) replace the attention step by
         bcx  = xn @ Win^T = (B, C, x) [N, 3D]; bx = B * x
         cv   = causal convolution of bx along each sequence: cv[t] = sum_j w[:, j] * bx[t - (K-1) + j]
         h    = h + (C * cv) @ Wout_conv^T
       Gemma (gemma): every RMSNorm multiplies by (1 + its weight); h starts as
         embed[ids] * sqrt(D); the attention's and the MLP's outputs are RMS-normalised
         (post_attn, post_ffn) before they are added to h; the sliding layers rotate by
         rope_local_theta; full[l] layers attend globally when the others slide; scores
         are scaled by attn_scale (0: 1/sqrt(hd)). gelu: the gate is GELU's tanh form,
         0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))), instead of silu.
       logits = (RMSNorm(h) * final_norm) @ Wout^T           [N, V]; Wout = embed when tied
       loss   = mean over rows of -log softmax(logits)[target]

   RoPE rotates the pairs (i, i + hd/2) of every head vector of the token at position t
   (0-based within its sequence) by t * theta^(-2i/hd). Query head h reads key/value head
   h / (H / Hk).

   Parameters come as one float array each, in the order of ref_model_param(): the
   embedding, then per layer attn_norm, Wq, Wk, Wv, Wo, ffn_norm, Wg, Wu, Wd, then the final
   norm, then Wout when untied, then per layer the families' extras: bq [H*hd], bk, bv
   [Hk*hd] (qkv_bias), q_norm, k_norm [hd] (qk_norm), post_attn, post_ffn [D] (gemma). A convolution layer has attn_norm,
   Win [3D, D], w [D, K], Wout_conv [D, D], ffn_norm, Wg, Wu, Wd instead, and no extras.
   Matrices are [out, in] row-major as Hugging Face stores them. */
#ifndef WGML_REF_MODEL_H
#define WGML_REF_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ref_model_shape {
    int vocab, dim, layers, heads, kv_heads, head_dim, ffn;
    double rope_theta, eps;
    bool tied;
    int window;       /* 0: none */
    bool qkv_bias, qk_norm;
    int conv_kernel;          /* LFM2: the convolutions' width (0: no convolution layers) */
    const bool *conv;         /* [layers]: layer l convolves (with conv_kernel) */
    bool gemma, gelu;         /* Gemma's conventions; the GELU gate (see above) */
    const bool *full;         /* [layers] or NULL: with window, layer l does not slide */
    double rope_local_theta;  /* > 0: the sliding layers' RoPE base */
    double attn_scale;        /* 0: 1/sqrt(head_dim) */
} ref_model_shape;

enum {
    REF_ATTN_NORM, REF_WQ, REF_WK, REF_WV, REF_WO, REF_FFN_NORM, REF_WG, REF_WU, REF_WD,
    REF_PER_LAYER, REF_CONV_IN = REF_PER_LAYER, REF_CONV_W, REF_CONV_OUT
};
/* The families' extra kinds (ref_model_extra). */
enum { REF_BQ, REF_BK, REF_BV, REF_QNORM, REF_KNORM, REF_POST_ATTN, REF_POST_FFN };

/* Number of parameter tensors: 1 + 9 per attention layer and 8 per convolution layer + 1
   (+ 1 untied) (+ the extras). */
int ref_model_param_count(const ref_model_shape *s);
/* Index of a layer's parameter (kind REF_*; -1 when the layer has none); the embedding is 0, the final norm
   ref_model_final_norm(), the untied head ref_model_head(). */
int ref_model_param(const ref_model_shape *s, int layer, int kind);
int ref_model_final_norm(const ref_model_shape *s);
int ref_model_head(const ref_model_shape *s);   /* -1 when tied */
/* Index of a layer's extra of kind REF_BQ ... REF_POST_FFN, or -1 when the shape has none. */
int ref_model_extra(const ref_model_shape *s, int layer, int kind);
/* Element count of parameter i. */
size_t ref_model_param_numel(const ref_model_shape *s, int i);

/* Runs the model over ids[B*T] and returns the mean loss against targets[B*T]. Writes the
   logits [B*T, vocab] when logits is not NULL, and each parameter's gradient of the mean
   loss into grads[i] (ref_model_param_numel(i) doubles, overwritten) when grads is not
   NULL. */
double ref_model_run(const ref_model_shape *s, const float *const *params, const uint32_t *ids,
                     const uint32_t *targets, int B, int T, double *logits, double *const *grads);
/* The same with the parameters in double (for finite differences of exact values). */
double ref_model_run_d(const ref_model_shape *s, const double *const *params, const uint32_t *ids,
                       const uint32_t *targets, int B, int T, double *logits, double *const *grads);

/* LoRA adapters the merged weights cannot express (their inputs dropped): target k (0..6:
   q, k, v, o, gate, up, down, of an attention layer) of layer l, where a[l * 8 + k] is not
   NULL, adds
   scale * dropout(x) A^T B^T to its projection of x [N, in] (A [rank, in], B [out, rank]),
   dropout keeping element j of x as wgml_dropout does with probability p and seed
   seeds[l * 8 + k] (p 0: none). With grads, the adapter's gradients are added into da and
   db (same slots; may be NULL) besides the model's into grads. */
typedef struct ref_model_lora {
    int rank;
    double scale, p;
    const double *const *a, *const *b;
    const uint64_t *seeds;
    double *const *da, *const *db;
} ref_model_lora;
double ref_model_run_lora(const ref_model_shape *s, const double *const *params, const ref_model_lora *lora,
                          const uint32_t *ids, const uint32_t *targets, int B, int T, double *logits, double *const *grads);

#endif
