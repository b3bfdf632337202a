/* A Llama-family decoder (with Mistral's window, Qwen2's biases, Qwen3's head norms, LFM2's
   convolution blocks, Gemma 3's norms, GeGLU and local / global layers) on the GPU: its parameters, training (forward, backward, gradient accumulation, clipping,
   AdamW) and generation with a KV cache. Every computation is a
   wgml op; this file allocates tensors and sequences the ops. The CPU reference it is
   tested against is tests/ref/ref_model.c (the same model in double, written to be read).

   Layouts: a micro-batch of B sequences of T tokens is N = B * T rows. Activations are 2-D
   [N, width] for the linear layers (matmul_bt against [out, in] weights) and are reshaped
   (metadata only) to [B, T, heads, head_dim] for RoPE and attention. The residual stream
   is never added on its own: each RMSNorm after the first is wgml_rms_norm_residual_with,
   which adds the block's output to the stream, writes the new stream (kept for the
   backward pass) and normalises it in one pass.

   What is kept for the backward pass, per layer: the stream entering the layer (hin), its
   norm (xn), q and k after RoPE, v, the attention output, the stream after attention
   (h2), its norm (xn2), the gate and up projections and their SwiGLU product. The
   attention probabilities are not kept: the flash-attention backward recomputes them. */
#include "comm.h"
#include "internal.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRY(expr) WGML_CHECK(expr)

/* A layer's parameters by kind. Attention layers (every layer of the Llama-like families)
   have the first nine; LFM2's convolution layers have the norms, the MLP and the three
   P_CONV_* in place of the attention's four projections. */
enum { P_ATTN_NORM, P_WQ, P_WK, P_WV, P_WO, P_FFN_NORM, P_WG, P_WU, P_WD, P_CONV_IN, P_CONV_W, P_CONV_OUT, P_KINDS };
#define P_PER_LAYER 9   /* the kinds of an attention layer */

/* Each family's names of the kinds, and of the final norm. */
static const char *const llama_names[P_KINDS] = {
    "input_layernorm.weight",       "self_attn.q_proj.weight", "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",      "self_attn.o_proj.weight", "post_attention_layernorm.weight",
    "mlp.gate_proj.weight",         "mlp.up_proj.weight",      "mlp.down_proj.weight", NULL, NULL, NULL,
};
static const char *const gemma_names[P_KINDS] = {
    "input_layernorm.weight",       "self_attn.q_proj.weight", "self_attn.k_proj.weight",
    "self_attn.v_proj.weight",      "self_attn.o_proj.weight", "pre_feedforward_layernorm.weight",
    "mlp.gate_proj.weight",         "mlp.up_proj.weight",      "mlp.down_proj.weight", NULL, NULL, NULL,
};
static const char *const lfm2_names[P_KINDS] = {
    "operator_norm.weight",   "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
    "self_attn.out_proj.weight", "ffn_norm.weight",      "feed_forward.w1.weight",  "feed_forward.w3.weight",
    "feed_forward.w2.weight", "conv.in_proj.weight",     "conv.conv.weight",        "conv.out_proj.weight",
};
/* the kinds of a convolution layer, in their order */
static const int conv_kinds[8] = { P_ATTN_NORM, P_CONV_IN, P_CONV_W, P_CONV_OUT, P_FFN_NORM, P_WG, P_WU, P_WD };

/* The families' extra parameters, after the others (the head included), layer by layer in
   this order: Qwen2's q, k, v biases; Qwen3's (and LFM2's attention layers', and Gemma's)
   q and k norms; Gemma's norms of the attention's and the MLP's outputs. */
enum { X_BQ, X_BK, X_BV, X_QNORM, X_KNORM, X_POST_ATTN, X_POST_FFN, X_KINDS };
static const char *const extra_names[X_KINDS] = {
    "self_attn.q_proj.bias",   "self_attn.k_proj.bias",           "self_attn.v_proj.bias",
    "self_attn.q_norm.weight", "self_attn.k_norm.weight",         "post_attention_layernorm.weight",
    "post_feedforward_layernorm.weight",
};
static const char *const lfm2_extra_names[X_KINDS] = { NULL, NULL, NULL, "self_attn.q_layernorm.weight",
                                                       "self_attn.k_layernorm.weight", NULL, NULL };
#define SLOTS (P_KINDS + X_KINDS)   /* a layer's kinds, the extras after the others */

static bool is_lfm2(const wgml_model_config *c) { return c->conv_kernel != 0; }
/* Whether layer l of c is a gated short convolution (LFM2) rather than attention. */
static bool conv_layer(const wgml_model_config *c, uint32_t l)
{
    return c->conv_kernel && (c->conv_layers[l / 32] >> (l % 32) & 1);
}
/* The extra kinds layer l has, as bits. */
static uint32_t extras_of(const wgml_model_config *c, uint32_t l)
{
    if (conv_layer(c, l)) return 0;
    return (c->qkv_bias ? (1u << X_BQ | 1u << X_BK | 1u << X_BV) : 0) | (c->qk_norm ? (1u << X_QNORM | 1u << X_KNORM) : 0) |
           (c->gemma ? (1u << X_POST_ATTN | 1u << X_POST_FFN) : 0);
}

/* One entry of the parameter list: its layer (-1: none) and slot (a P_* kind, P_KINDS + an
   X_* kind, or one of these). */
enum { S_EMBED = -1, S_FINAL_NORM = -2, S_HEAD = -3 };
typedef struct pentry { int layer, slot; } pentry;

/* The parameter list of c, in wgml.h's order: the embedding, each layer's kinds, the
   final norm, the untied head, then each layer's extras. Writes up to cap entries of out
   (out may be NULL) and returns the count. */
static size_t param_list(const wgml_model_config *c, pentry *out, size_t cap)
{
    size_t n = 0;
#define PUT(l, k) do { if (out && n < cap) out[n] = (pentry){ (l), (k) }; n++; } while (0)
    PUT(-1, S_EMBED);
    for (uint32_t l = 0; l < c->num_hidden_layers; l++)
        if (conv_layer(c, l))
            for (int j = 0; j < 8; j++) PUT((int)l, conv_kinds[j]);
        else
            for (int k = 0; k < P_PER_LAYER; k++) PUT((int)l, k);
    PUT(-1, S_FINAL_NORM);
    if (!c->tie_word_embeddings) PUT(-1, S_HEAD);
    for (uint32_t l = 0; l < c->num_hidden_layers; l++)
        for (int x = 0; x < X_KINDS; x++)
            if (extras_of(c, l) >> x & 1) PUT((int)l, P_KINDS + x);
#undef PUT
    return n;
}

struct wgml_model {
    wgml_engine *e;
    wgml_context *ctx;
    wgml_model_config cfg;
    uint32_t V, D, L, H, Hk, hd, F, QD, KD;
    float eps, theta;
    float woff;                   /* the norms' weight offset: 1 for Gemma's (1 + w), else 0 */
    float embed_scale;            /* the embeddings' factor: sqrt(hidden_size) for Gemma, else 1 */
    float attn_scale;             /* attention's score scale, 0: 1/sqrt(head_dim) */
    wgml_tensor *inv_freq;        /* RoPE frequencies when config.json scales them, else NULL */
    size_t nparams;
    wgml_tensor **p;
    char **names;
    pentry *list;                 /* what each parameter is */
    size_t *slot;                 /* [L * SLOTS]: the index of each layer's kinds, SIZE_MAX where absent */
    size_t final_norm, head;      /* their indices (head 0 when tied) */
    wgml_lora *lora;              /* the attached adapter, or NULL */
    uint64_t lora_changes;        /* adapters attached or detached so far */
    wgml_dtype file_dtype;        /* of the weights in the files it was loaded from */
};

static size_t slot_index(const wgml_model *m, uint32_t l, int slot) { return m->slot[(size_t)l * SLOTS + (size_t)slot]; }
static wgml_tensor *P(const wgml_model *m, uint32_t layer, int kind) { return m->p[slot_index(m, layer, kind)]; }
/* The index of extra kind x of layer l, or SIZE_MAX when the layer has none. */
static size_t extra_index(const wgml_model *m, uint32_t l, int x) { return slot_index(m, l, P_KINDS + x); }
static wgml_tensor *X(const wgml_model *m, uint32_t l, int x)
{
    size_t i = extra_index(m, l, x);
    return i == SIZE_MAX ? NULL : m->p[i];
}
static size_t final_norm_index(const wgml_model *m) { return m->final_norm; }
static size_t head_index(const wgml_model *m) { return m->head; }
/* The extra kind of parameter i, or -1 for another parameter. */
static int extra_kind(const wgml_model *m, size_t i) { return m->list[i].slot >= P_KINDS ? m->list[i].slot - P_KINDS : -1; }
/* The norms' weights (RMSNorm gains, the q and k norms included). */
static bool is_norm_index(const wgml_model *m, size_t i)
{
    int k = m->list[i].slot;
    return k == S_FINAL_NORM || k == P_ATTN_NORM || k == P_FFN_NORM || k == P_KINDS + X_QNORM || k == P_KINDS + X_KNORM ||
           k == P_KINDS + X_POST_ATTN || k == P_KINDS + X_POST_FFN;
}
/* Parameters without weight decay: the norms' weights and the biases. */
static bool no_decay_index(const wgml_model *m, size_t i) { return is_norm_index(m, i) || extra_kind(m, i) >= 0; }

/* ---- small helpers -------------------------------------------------------------------- */

static wgml_status mk(wgml_context *ctx, wgml_tensor **out, wgml_dtype dt, uint32_t nd, size_t a, size_t b, size_t c, size_t d)
{
    size_t shape[4] = { a, b, c, d };
    return wgml_tensor_create(ctx, dt, nd, shape, out);
}
static wgml_status mk2(wgml_context *ctx, wgml_tensor **out, size_t a, size_t b) { return mk(ctx, out, WGML_F32, 2, a, b, 0, 0); }

static wgml_status shape2(wgml_tensor *t, size_t a, size_t b) { return wgml_tensor_reshape(t, 2, (size_t[]){ a, b }); }
static wgml_status shape4(wgml_tensor *t, size_t a, size_t b, size_t c, size_t d)
{
    return wgml_tensor_reshape(t, 4, (size_t[]){ a, b, c, d });
}

static void release_all(wgml_tensor **ts, size_t n)
{
    if (!ts) return;
    for (size_t i = 0; i < n; i++) wgml_tensor_release(ts[i]);
}

/* splitmix64, then Box-Muller: the same stream on every machine */
static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double uniform01(uint64_t *s) { return ((splitmix(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

/* ---- the model -------------------------------------------------------------------------- */

/* The RoPE frequencies of config.json's rope_scaling (linear or Llama 3), as
   transformers' _compute_*_parameters computes them. */
static void scaled_inv_freq(const wgml_model_config *c, uint32_t hd, double theta, float *out)
{
    const double pi = 3.14159265358979323846;
    for (uint32_t i = 0; i < hd / 2; i++) {
        double f = pow(theta, -2.0 * i / hd);
        if (c->rope_scaling.type == WGML_ROPE_SCALING_LINEAR) {
            f /= c->rope_scaling.factor;
        } else if (c->rope_scaling.type == WGML_ROPE_SCALING_LLAMA3) {
            double factor = c->rope_scaling.factor, lo = c->rope_scaling.low_freq_factor,
                   hi = c->rope_scaling.high_freq_factor, old = c->rope_scaling.original_max_position_embeddings;
            double wavelen = 2 * pi / f;
            if (wavelen > old / lo) f /= factor;
            else if (wavelen >= old / hi) {
                double smooth = (old / wavelen - lo) / (hi - lo);
                f = (1 - smooth) * f / factor + smooth * f;
            }
        }
        out[i] = (float)f;
    }
}

/* What a model of configuration c cannot run beyond what wgml_model_config_check
   refuses; *Hk and *hd: the kv heads and head_dim that zero fields stand for. */
static wgml_status check_config(wgml_context *ctx, const char *fn, const wgml_model_config *c, uint32_t *Hk, uint32_t *hd)
{
    if (wgml_model_config_check(c) != WGML_OK)
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: cfg: %s", fn,
                          wgml_last_error(NULL) + strlen("wgml_model_config_check: "));
    *Hk = c->num_key_value_heads ? c->num_key_value_heads : c->num_attention_heads;
    *hd = c->head_dim ? c->head_dim : c->hidden_size / c->num_attention_heads;
    if (*hd > 256) return wgml__fail(ctx, WGML_ERROR_UNSUPPORTED, "%s: cfg head_dim %u is over 256, the attention kernel's limit", fn, *hd);
    if (c->attention_bias || c->mlp_bias)
        return wgml__fail(ctx, WGML_ERROR_UNSUPPORTED, "%s: cfg asks for %s biases, which this model does not have", fn,
                          c->attention_bias ? "attention (o_proj's included)" : "MLP");
    return WGML_OK;
}

wgml_status wgml__model_check_config(wgml_context *ctx, const char *fn, const wgml_model_config *c)
{
    uint32_t Hk, hd;
    return check_config(ctx, fn, c, &Hk, &hd);
}

size_t wgml__model_param_total(const wgml_model_config *c) { return param_list(c, NULL, 0); }

/* The name and shape of entry pe of c's list. */
static void entry_spec(const wgml_model_config *c, pentry pe, char name[WGML__PARAM_NAME_MAX], uint32_t *ndim,
                       uint64_t shape[2])
{
    uint64_t V = c->vocab_size, D = c->hidden_size, F = c->intermediate_size;
    uint64_t H = c->num_attention_heads, Hk = c->num_key_value_heads ? c->num_key_value_heads : H;
    uint64_t hd = c->head_dim ? c->head_dim : D / H, QD = H * hd, KD = Hk * hd;
    bool lfm2 = is_lfm2(c);
    uint64_t rows, cols = D;
    *ndim = 2;
    switch (pe.slot) {
    case S_EMBED: snprintf(name, WGML__PARAM_NAME_MAX, "model.embed_tokens.weight"); rows = V; break;
    case S_FINAL_NORM:
        snprintf(name, WGML__PARAM_NAME_MAX, lfm2 ? "model.embedding_norm.weight" : "model.norm.weight");
        rows = D;
        *ndim = 1;
        break;
    case S_HEAD: snprintf(name, WGML__PARAM_NAME_MAX, "lm_head.weight"); rows = V; break;
    default:
        if (pe.slot >= P_KINDS) {   /* the families' extras */
            int x = pe.slot - P_KINDS;
            snprintf(name, WGML__PARAM_NAME_MAX, "model.layers.%d.%s", pe.layer, (lfm2 ? lfm2_extra_names : extra_names)[x]);
            rows = x == X_BQ ? QD : x == X_BK || x == X_BV ? KD : x == X_POST_ATTN || x == X_POST_FFN ? D : hd;
            *ndim = 1;
            break;
        }
        snprintf(name, WGML__PARAM_NAME_MAX, "model.layers.%d.%s", pe.layer,
                 (lfm2 ? lfm2_names : c->gemma ? gemma_names : llama_names)[pe.slot]);
        switch (pe.slot) {
        case P_ATTN_NORM: case P_FFN_NORM: rows = D; *ndim = 1; break;
        case P_WQ: rows = QD; break;
        case P_WK: case P_WV: rows = KD; break;
        case P_WO: rows = D; cols = QD; break;
        case P_WG: case P_WU: rows = F; break;
        case P_CONV_IN: rows = 3 * D; break;
        case P_CONV_W: rows = D; cols = c->conv_kernel; break;   /* [D, 1, K] in Hugging Face's files */
        case P_CONV_OUT: rows = D; break;
        default: rows = D; cols = F; break;   /* P_WD */
        }
    }
    shape[0] = rows;
    shape[1] = *ndim == 2 ? cols : 0;
}

void wgml__model_param_spec(const wgml_model_config *c, size_t i, char name[WGML__PARAM_NAME_MAX], uint32_t *ndim,
                            uint64_t shape[2])
{
    size_t n = param_list(c, NULL, 0);
    pentry *list = malloc(sizeof *list * n);
    pentry pe = { -1, S_EMBED };
    if (list && i < n) {
        param_list(c, list, n);
        pe = list[i];
    }
    free(list);
    entry_spec(c, pe, name, ndim, shape);
}

wgml_status wgml_model_create(wgml_engine *e, const wgml_model_config *cfg, wgml_model **out)
{
    return wgml__model_create(e, cfg, WGML__PARAMS_ZERO, out);
}

wgml_status wgml__model_create(wgml_engine *e, const wgml_model_config *cfg, wgml__params_mode mode, wgml_model **out)
{
    if (out) *out = NULL;
    TRY(wgml__check_engine(e, "wgml_model_create"));
    wgml_context *ctx = e->ctx;
    if (!cfg || !out) return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_model_create: %s is NULL", cfg ? "out" : "cfg");
    uint32_t Hk = 0, hd = 0;
    TRY(check_config(ctx, "wgml_model_create", cfg, &Hk, &hd));

    wgml_model *m = calloc(1, sizeof *m);
    if (!m) return wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "wgml_model_create: out of host memory");
    m->e = e;
    m->ctx = ctx;
    m->cfg = *cfg;
    m->cfg.num_key_value_heads = Hk;
    m->cfg.head_dim = hd;
    if (!m->cfg.max_position_embeddings) m->cfg.max_position_embeddings = 2048;   /* config.json's default */
    if (!m->cfg.rope_theta) m->cfg.rope_theta = 10000;
    m->V = cfg->vocab_size; m->D = cfg->hidden_size; m->L = cfg->num_hidden_layers;
    m->H = cfg->num_attention_heads; m->Hk = Hk; m->hd = hd; m->F = cfg->intermediate_size;
    m->QD = m->H * hd; m->KD = Hk * hd;
    m->eps = (float)cfg->rms_norm_eps;
    m->theta = (float)m->cfg.rope_theta;
    m->woff = cfg->gemma ? 1.0f : 0.0f;
    m->embed_scale = cfg->gemma ? (float)sqrt((double)m->D) : 1.0f;
    m->attn_scale = cfg->query_pre_attn_scalar > 0 ? (float)(1.0 / sqrt(cfg->query_pre_attn_scalar)) : 0.0f;
    m->nparams = wgml__model_param_total(cfg);
    m->p = calloc(m->nparams, sizeof *m->p);
    m->names = calloc(m->nparams, sizeof *m->names);
    m->list = calloc(m->nparams, sizeof *m->list);
    m->slot = malloc(sizeof *m->slot * (size_t)m->L * SLOTS);
    wgml_status s = WGML_OK;
    if (!m->p || !m->names || !m->list || !m->slot) {
        s = wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "wgml_model_create: out of host memory");
        goto fail;
    }
    param_list(&m->cfg, m->list, m->nparams);
    for (size_t j = 0; j < (size_t)m->L * SLOTS; j++) m->slot[j] = SIZE_MAX;
    for (size_t i = 0; i < m->nparams; i++) {
        pentry pe = m->list[i];
        if (pe.layer >= 0) m->slot[(size_t)pe.layer * SLOTS + (size_t)pe.slot] = i;
        else if (pe.slot == S_FINAL_NORM) m->final_norm = i;
        else if (pe.slot == S_HEAD) m->head = i;
    }

    for (size_t i = 0; i < m->nparams && s == WGML_OK; i++) {
        char name[WGML__PARAM_NAME_MAX];
        uint32_t nd;
        uint64_t shape[2];
        entry_spec(&m->cfg, m->list[i], name, &nd, shape);
        m->names[i] = strdup(name);
        if (!m->names[i]) { s = wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "wgml_model_create: out of host memory"); break; }
        if (nd == 2 && mode == WGML__PARAMS_NO_MATRICES) continue;   /* the loader makes them */
        s = nd == 1 ? mk(ctx, &m->p[i], WGML_F32, 1, shape[0], 0, 0, 0) : mk2(ctx, &m->p[i], shape[0], shape[1]);
        if (s == WGML_OK && mode == WGML__PARAMS_ZERO) s = wgml_tensor_zero(m->p[i]);
    }
    if (s == WGML_OK && cfg->rope_scaling.type != WGML_ROPE_SCALING_NONE) {
        float *f = malloc(sizeof(float) * (hd / 2));
        if (!f) { s = wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "wgml_model_create: out of host memory"); goto fail; }
        scaled_inv_freq(cfg, hd, m->theta, f);
        s = wgml_tensor_from_data(ctx, WGML_F32, 1, (size_t[]){ hd / 2 }, f, &m->inv_freq);
        free(f);
    }
    if (s != WGML_OK) goto fail;
    *out = m;
    return WGML_OK;
fail:
    wgml_model_destroy(m);
    return s;
}

void wgml_model_destroy(wgml_model *m)
{
    if (!m) return;
    wgml_lora_destroy(m->lora);   /* an adapter goes with its model */
    release_all(m->p, m->nparams);
    if (m->names)
        for (size_t i = 0; i < m->nparams; i++) free(m->names[i]);
    wgml_tensor_release(m->inv_freq);
    free(m->p);
    free(m->names);
    free(m->list);
    free(m->slot);
    free(m);
}

const wgml_model_config *wgml_model_get_config(const wgml_model *m) { return m ? &m->cfg : NULL; }
wgml_lora *wgml__model_lora(const wgml_model *m) { return m->lora; }
void wgml__model_set_lora(wgml_model *m, wgml_lora *l)
{
    m->lora = l;
    m->lora_changes++;
}
wgml_engine *wgml__model_engine(const wgml_model *m) { return m->e; }
void wgml__model_set_file_dtype(wgml_model *m, wgml_dtype d) { m->file_dtype = d; }
void wgml__model_set_param(wgml_model *m, size_t i, wgml_tensor *t)
{
    wgml_tensor_release(m->p[i]);
    m->p[i] = t;
}

/* The first parameter that is not f32 (a packed or 16-bit matrix), or SIZE_MAX. */
static size_t first_packed(const wgml_model *m)
{
    for (size_t i = 0; i < m->nparams; i++)
        if (wgml_tensor_dtype(m->p[i]) != WGML_F32) return i;
    return SIZE_MAX;
}

wgml_status wgml__model_refuse_packed(const wgml_model *m, const char *fn, const char *why)
{
    size_t i = first_packed(m);
    if (i == SIZE_MAX) return WGML_OK;
    return wgml__fail(m->ctx, WGML_ERROR_UNSUPPORTED, "%s: %s is %s; %s needs f32 weights (load the model with "
                      "wgml_model_load, or --dtype f32)", fn, m->names[i], wgml_dtype_name(wgml_tensor_dtype(m->p[i])), why);
}

uint64_t wgml_model_weight_bytes(const wgml_model *m)
{
    uint64_t n = 0;
    for (size_t i = 0; m && i < m->nparams; i++) n += wgml_tensor_nbytes(m->p[i]);
    return n;
}

wgml_status wgml__model_set_rope_factors(wgml_model *m, const float *factors)
{
    uint32_t half = m->hd / 2;
    float *f = malloc(sizeof(float) * half);
    if (!f) return wgml__fail(m->ctx, WGML_ERROR_OUT_OF_MEMORY, "wgml_model_load: out of host memory");
    scaled_inv_freq(&m->cfg, m->hd, m->theta, f);
    for (uint32_t i = 0; i < half; i++) f[i] /= factors[i];
    wgml_tensor_release(m->inv_freq);
    m->inv_freq = NULL;
    wgml_status s = wgml_tensor_from_data(m->ctx, WGML_F32, 1, (size_t[]){ half }, f, &m->inv_freq);
    free(f);
    return s;
}
wgml_dtype wgml_model_file_dtype(const wgml_model *m) { return m ? m->file_dtype : WGML_F32; }
size_t wgml_model_param_count(const wgml_model *m) { return m ? m->nparams : 0; }

uint64_t wgml_model_numel(const wgml_model *m)
{
    uint64_t n = 0;
    for (size_t i = 0; m && i < m->nparams; i++) n += wgml_tensor_numel(m->p[i]);
    return n;
}

wgml_tensor *wgml_model_param(const wgml_model *m, size_t i, const char **name)
{
    if (!m || i >= m->nparams) return NULL;
    if (name) *name = m->names[i];
    return m->p[i];
}

wgml_status wgml_model_init_random(wgml_model *m, uint64_t seed, float std)
{
    if (!m) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_model_init_random: m is NULL");
    if (!(std >= 0) || !isfinite(std))
        return wgml__fail(m->ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_model_init_random: std must be finite and >= 0");
    if (std == 0) std = 0.02f;
    TRY(wgml__model_refuse_packed(m, "wgml_model_init_random", "a random initialisation"));
    uint64_t state = seed;
    size_t maxn = 0;
    for (size_t i = 0; i < m->nparams; i++)
        if (wgml_tensor_numel(m->p[i]) > maxn) maxn = wgml_tensor_numel(m->p[i]);
    float *buf = malloc(sizeof(float) * maxn);
    if (!buf) return wgml__fail(m->ctx, WGML_ERROR_OUT_OF_MEMORY, "wgml_model_init_random: out of host memory");
    wgml_status s = WGML_OK;
    for (size_t i = 0; i < m->nparams && s == WGML_OK; i++) {
        size_t n = wgml_tensor_numel(m->p[i]);
        if (is_norm_index(m, i) || extra_kind(m, i) >= 0) {   /* norms 1 (Gemma's 1 + 0), biases 0 */
            float v = is_norm_index(m, i) ? 1.0f - m->woff : 0.0f;
            for (size_t j = 0; j < n; j++) buf[j] = v;
        } else {
            double sd = std;
            int k = m->list[i].slot;
            if (k == P_WO || k == P_WD || k == P_CONV_OUT) sd /= sqrt(2.0 * m->L);
            for (size_t j = 0; j < n; j += 2) {
                double u1 = uniform01(&state), u2 = uniform01(&state), r = sqrt(-2 * log(u1));
                buf[j] = (float)(sd * r * cos(2 * 3.14159265358979323846 * u2));
                if (j + 1 < n) buf[j + 1] = (float)(sd * r * sin(2 * 3.14159265358979323846 * u2));
            }
        }
        s = wgml_tensor_write(m->p[i], 0, buf, n * sizeof(float));
    }
    free(buf);
    return s;
}

/* Whether attention layer l slides (sliding_window, unless full_attention_layers names it),
   and its window (0: none). */
static bool slides(const wgml_model *m, uint32_t l)
{
    return m->cfg.sliding_window && !(m->cfg.full_attention_layers[l / 32] >> (l % 32) & 1);
}
static uint32_t window_of(const wgml_model *m, uint32_t l) { return slides(m, l) ? m->cfg.sliding_window : 0; }

/* Layer l's RoPE options: rope_theta and its scaling, or a sliding layer's own base
   (rope_local_theta) unscaled. */
static wgml_rope_options rope_of(const wgml_model *m, uint32_t l)
{
    if (m->cfg.rope_local_theta > 0 && slides(m, l))
        return (wgml_rope_options){ .head_dim = m->hd, .theta = (float)m->cfg.rope_local_theta,
                                    .pairing = WGML_ROPE_ROTATE_HALF };
    return (wgml_rope_options){ .head_dim = m->hd, .theta = m->theta, .pairing = WGML_ROPE_ROTATE_HALF,
                                .inv_freq = m->inv_freq };
}

/* RoPE of layer l on a [B, T, heads, head_dim] tensor at position pos; inverse for the
   gradient. */
static wgml_status rope(const wgml_model *m, uint32_t l, wgml_tensor *t, uint32_t pos, bool inverse)
{
    wgml_rope_options o = rope_of(m, l);
    o.pos = pos;
    o.inverse = inverse;
    return wgml_rope_with(m->e, t, &o);
}

/* Layer l's attention options: causal from offset, its window, the model's scale. */
static wgml_attention_options attention_of(const wgml_model *m, uint32_t l, uint32_t offset)
{
    return (wgml_attention_options){ .causal = true, .causal_offset = offset, .window = window_of(m, l),
                                     .scale = m->attn_scale };
}

/* out = RMSNorm(x [+ res]) * (weight + the model's offset), eps rms_norm_eps; sum (may be
   NULL) receives x + res. */
static wgml_status norm(const wgml_model *m, const wgml_tensor *x, const wgml_tensor *res, const wgml_tensor *weight,
                        wgml_tensor *out, wgml_tensor *sum)
{
    const wgml_rms_norm_options o = { .eps = m->eps, .weight_offset = m->woff };
    return wgml_rms_norm_with(m->e, x, res, weight, out, sum, &o);
}

/* The backward of norm without a residual: dx written (or added with accumulate), the
   weight's gradient written into gw (may be NULL). */
static wgml_status norm_backward(const wgml_model *m, const wgml_tensor *dy, const wgml_tensor *x, const wgml_tensor *weight,
                                 wgml_tensor *dx, wgml_tensor *gw, bool accumulate)
{
    const wgml_rms_norm_backward_options o = { .accumulate = accumulate, .weight_offset = m->woff };
    return wgml_rms_norm_backward_with(m->e, dy, x, weight, dx, gw, m->eps, &o);
}

/* The MLP's gate: a = act(g) * u (SiLU or GELU's tanh form), and its backward. */
static wgml_status gate(const wgml_model *m, const wgml_tensor *g, const wgml_tensor *u, wgml_tensor *a)
{
    if (m->cfg.hidden_act == WGML_HIDDEN_ACT_GELU_TANH) return wgml_gelu_tanh_gate_fused(m->e, g, u, a);
    return wgml_silu_gate_fused(m->e, g, u, a);
}
static wgml_status gate_backward(const wgml_model *m, const wgml_tensor *g, const wgml_tensor *u, const wgml_tensor *da,
                                 wgml_tensor *dg, wgml_tensor *du)
{
    if (m->cfg.hidden_act == WGML_HIDDEN_ACT_GELU_TANH) return wgml_gelu_tanh_gate_backward(m->e, g, u, da, dg, du);
    return wgml_silu_gate_backward(m->e, g, u, da, dg, du);
}

/* The adapter's target of projection kind (P_WQ ...), or -1 when the kind is no
   projection an adapter can target. */
static int lora_kind(int kind)
{
    switch (kind) {
    case P_WQ: return 0;
    case P_WK: return 1;
    case P_WV: return 2;
    case P_WO: case P_CONV_OUT: return 3;
    case P_WG: return 4;
    case P_WU: return 5;
    case P_WD: return 6;
    case P_CONV_IN: return 7;
    default: return -1;
    }
}

size_t wgml__model_lora_weight(const wgml_model *m, uint32_t l, int k)
{
    static const int attn[WGML__LORA_KINDS] = { P_WQ, P_WK, P_WV, P_WO, P_WG, P_WU, P_WD, -1 },
                     conv[WGML__LORA_KINDS] = { -1, -1, -1, P_CONV_OUT, P_WG, P_WU, P_WD, P_CONV_IN };
    int kind = (conv_layer(&m->cfg, l) ? conv : attn)[k];
    return kind < 0 ? SIZE_MAX : slot_index(m, l, kind);
}

/* The adapter's A and B on projection kind of layer l (false when it has none there). */
static bool lora_of(const wgml_model *m, uint32_t l, int kind, wgml_tensor **a, wgml_tensor **b)
{
    int lk = lora_kind(kind);
    if (!m->lora || lk < 0 || !m->lora->a[(size_t)l * WGML__LORA_KINDS + (size_t)lk]) return false;
    *a = m->lora->a[(size_t)l * WGML__LORA_KINDS + (size_t)lk];
    *b = m->lora->b[(size_t)l * WGML__LORA_KINDS + (size_t)lk];
    return true;
}

static wgml_status lora_input(const wgml_trainer *t, uint32_t l, int kind, const wgml_tensor *x, const wgml_tensor **xin);

/* y = x W^T for projection kind of layer l, plus scale (x' A^T) B^T where the adapter
   targets it, x' the adapter's input: x, or in a trainer's forward with LoRA dropout
   dropout(x) (t NULL: no dropout); xas [rows, rank] then keeps scale x' A^T (the backward
   reads it). */
static wgml_status proj(const wgml_model *m, const wgml_trainer *t, uint32_t l, int kind, const wgml_tensor *x, wgml_tensor *y,
                        wgml_tensor *xas)
{
    TRY(wgml_matmul_bt(m->e, x, P(m, l, kind), y));
    wgml_tensor *a, *b;
    if (!lora_of(m, l, kind, &a, &b)) return WGML_OK;
    const wgml_matmul_options acc = { .accumulate = true };
    const wgml_tensor *xin = x;
    if (t) TRY(lora_input(t, l, kind, x, &xin));
    TRY(wgml_matmul_bt(m->e, xin, a, xas));
    TRY(wgml_gradient_scale(m->e, xas, m->lora->scale));
    return wgml_matmul_bt_with(m->e, xas, b, y, &acc);
}

/* out = RMSNorm(x) * weight over each head's head_dim values: x and out [rows, heads *
   head_dim], normalised as [rows * heads, head_dim] (Qwen3's q_norm, k_norm). */
static wgml_status head_norm(const wgml_model *m, wgml_tensor *x, const wgml_tensor *weight, wgml_tensor *out, size_t rows,
                             uint32_t heads)
{
    TRY(shape2(x, rows * heads, m->hd));
    TRY(shape2(out, rows * heads, m->hd));
    wgml_status s = norm(m, x, NULL, weight, out, NULL);
    TRY(shape2(x, rows, (size_t)heads * m->hd));
    TRY(shape2(out, rows, (size_t)heads * m->hd));
    return s;
}

/* Attention's inputs of layer l from x [rows, hidden], before RoPE: q, k, v = x's
   projections, plus their biases (qkv_bias); with qk_norm the projections of q and k go
   to qr, kr and each head of them is RMS-normalised into q, k. xas: each projection's
   adapter scratch; t: see proj. */
static wgml_status qkv(const wgml_model *m, const wgml_trainer *t, uint32_t l, const wgml_tensor *x, size_t rows,
                       wgml_tensor *q, wgml_tensor *k, wgml_tensor *v, wgml_tensor *qr, wgml_tensor *kr,
                       wgml_tensor *const xas[3])
{
    wgml_tensor *pq = m->cfg.qk_norm ? qr : q, *pk = m->cfg.qk_norm ? kr : k;
    TRY(proj(m, t, l, P_WQ, x, pq, xas[0]));
    TRY(proj(m, t, l, P_WK, x, pk, xas[1]));
    TRY(proj(m, t, l, P_WV, x, v, xas[2]));
    if (m->cfg.qkv_bias) {
        TRY(wgml_bias_add(m->e, pq, X(m, l, X_BQ), pq));
        TRY(wgml_bias_add(m->e, pk, X(m, l, X_BK), pk));
        TRY(wgml_bias_add(m->e, v, X(m, l, X_BV), v));
    }
    if (m->cfg.qk_norm) {
        TRY(head_norm(m, qr, X(m, l, X_QNORM), q, rows, m->H));
        TRY(head_norm(m, kr, X(m, l, X_KNORM), k, rows, m->Hk));
    }
    return WGML_OK;
}

static wgml_status shape3(wgml_tensor *t, size_t a, size_t b, size_t c) { return wgml_tensor_reshape(t, 3, (size_t[]){ a, b, c }); }

/* A convolution block of layer l (LFM2) over B sequences of T rows of x [B * T, hidden]:
   bcx = in_proj(x) = (B, C, x'), bx = B * x', cv = the causal convolution of bx along each
   sequence, y = C * cv, out = out_proj(y). t: see proj. */
static wgml_status conv_block(const wgml_model *m, const wgml_trainer *t, uint32_t l, const wgml_tensor *x, wgml_tensor *bcx,
                              wgml_tensor *bx, wgml_tensor *cv, wgml_tensor *y, wgml_tensor *out, wgml_tensor *const *xas,
                              uint32_t B, uint32_t T)
{
    TRY(proj(m, t, l, P_CONV_IN, x, bcx, xas[7]));
    TRY(wgml__conv_gate_in(m->e, bcx, bx));
    TRY(shape3(bx, B, T, m->D));
    TRY(shape3(cv, B, T, m->D));
    wgml_status s = wgml_conv1d_causal(m->e, bx, P(m, l, P_CONV_W), NULL, cv);
    TRY(shape2(bx, (size_t)B * T, m->D));
    TRY(shape2(cv, (size_t)B * T, m->D));
    TRY(s);
    TRY(wgml__conv_gate_out(m->e, bcx, cv, y));
    return proj(m, t, l, P_CONV_OUT, y, out, xas[3]);
}

/* ---- training ------------------------------------------------------------------------- */

typedef struct layer_acts {
    wgml_tensor *hin, *xn, *q, *k, *v, *att, *h2, *xn2, *g, *u, *a;
    wgml_tensor *bcx, *bx, *cv, *y;   /* a convolution layer's (LFM2): in_proj's output, B * x, its
                                         convolution, the gated result; NULL for attention layers
                                         (whose q, k, v, att, lse are NULL in a convolution layer) */
    wgml_tensor *qr, *kr;   /* q and k before their heads' norms (qk_norm), else NULL */
    wgml_tensor *ao, *fo;   /* the attention's and the MLP's outputs before their norms (gemma), else NULL */
    wgml_tensor *lse;   /* [B, H, T]: attention's row log-sum-exp, kept for its backward */
    wgml_tensor *scores; /* attention's scores, kept for its backward (keep_attention_scores), or NULL */
    wgml_tensor *xas[WGML__LORA_KINDS];   /* scale x A^T of each adapter target [N, rank], or NULL */
} layer_acts;
#define LAYER_ACTS (sizeof(layer_acts) / sizeof(wgml_tensor *))

/* What a trainer trains: every parameter of the model, or its adapter's alone. For each
   trained tensor its gradient, two AdamW moments, and whether weight decay applies. */
struct wgml_trainer {
    wgml_model *m;
    wgml_trainer_desc d;
    wgml_lora *lora;            /* the adapter trained alone, or NULL: the whole model */
    uint64_t lora_changes;      /* the model's, when the trainer was made: its activations fit that adapter */
    uint32_t B, T, N;
    layer_acts *la;
    wgml_tensor *ids, *targets, *o, *f, *hf, *xf, *logits, *loss;
    /* backward scratch: dres is the gradient of the residual stream */
    wgml_tensor *dres, *dxn, *datt, *dq, *dk, *dv, *da, *dg, *du, *demb;
    wgml_tensor *dxa;           /* [N, rank]: scale dy B of an adapter target */
    wgml_tensor *dqr, *dkr;     /* the gradients of q and k before their heads' norms (qk_norm) */
    wgml_tensor *dbcx, *dbx, *dcv, *dy;   /* a convolution layer's gradients (LFM2) */
    wgml_tensor *dpost;         /* the gradient of an output before its norm (gemma) */
    float drop_p;               /* LoRA dropout of the adapter trained, or 0 */
    wgml_tensor *xdrop[3];      /* its scratch [N, in] per input width: hidden, intermediate, heads * head_dim */
    wgml_tensor *dnorm;         /* [D]: where a frozen norm's weight gradient goes */
    size_t nt;                  /* trained tensors */
    wgml_tensor **tp, **grad, **gscratch, **m1, **m2, *norm;
    /* AdamW groups: with weight decay (matrices, embeddings, adapters) and without (norms,
       biases) */
    wgml_tensor **w_dec, **g_dec, **m_dec, **v_dec, **w_nod, **g_nod, **m_nod, **v_nod;
    size_t n_dec, n_nod;
    uint32_t micro, steps;
    /* desc.loss_scale: the scale the next step uses (0: none), finite steps in a row,
       steps skipped */
    float scale;
    uint32_t scale_good, skipped;
    uint32_t *host_ids;
    /* The trained tensors in the order the backward pass finishes their gradients
       (backward_order): final_head of them before the first layer's backward,
       final_after[l] after layer l's; final_done of them are final in the micro-batch
       under way. The sum over desc.comm's processes stages them in this order (NULL x:
       this process alone). */
    size_t *order, *final_after, final_head, final_done;
    wgml__exchange *x;
    /* wgml_trainer_mark_last: the next accumulate is the step's last (MARK_PENDING); it
       ran (MARK_RAN) or failed after its arguments were accepted (MARK_FAILED, its status
       and message kept for the step to return) */
    enum { MARK_NONE, MARK_PENDING, MARK_RAN, MARK_FAILED } mark;
    wgml_status mark_status;
    char mark_error[WGML_ERROR_MAX];
};

void wgml_trainer_destroy(wgml_trainer *t)
{
    if (!t) return;
    wgml__exchange_destroy(t->x);   /* first: what it has in flight reads the gradients */
    if (t->la)
        for (uint32_t l = 0; l < t->m->L; l++) release_all((wgml_tensor **)&t->la[l], LAYER_ACTS);
    wgml_tensor *single[] = { t->ids, t->targets, t->o, t->f, t->hf, t->xf, t->logits, t->loss, t->dres,
                              t->dxn, t->datt, t->dq, t->dk, t->dv, t->da, t->dg, t->du, t->demb, t->norm,
                              t->dxa, t->dnorm, t->dqr, t->dkr, t->xdrop[0], t->xdrop[1], t->xdrop[2],
                              t->dbcx, t->dbx, t->dcv, t->dy, t->dpost };
    release_all(single, sizeof single / sizeof single[0]);
    release_all(t->grad, t->nt); release_all(t->gscratch, t->nt); release_all(t->m1, t->nt); release_all(t->m2, t->nt);
    free(t->la); free(t->tp); free(t->grad); free(t->gscratch); free(t->m1); free(t->m2);
    free(t->w_dec); free(t->g_dec); free(t->m_dec); free(t->v_dec);
    free(t->w_nod); free(t->g_nod); free(t->m_nod); free(t->v_nod);
    free(t->host_ids);
    free(t->order);
    free(t->final_after);
    free(t);
}

/* Gradients whose op writes rather than adds (the norms' weights, an untied embedding) go
   through scratch tensors on a step's later micro-batches and are added at the end; the
   products add into the gradients themselves (wgml_matmul_at_with, accumulate). An
   adapter's gradients all come from products. */
static bool grad_via_scratch(const wgml_trainer *t, size_t i)
{
    const wgml_model *m = t->m;
    return !t->lora && (is_norm_index(m, i) || (i == 0 && !m->cfg.tie_word_embeddings));
}

/* a zeroed tensor shaped like p */
static wgml_status like(wgml_context *ctx, const wgml_tensor *p, wgml_tensor **out)
{
    size_t shape[4];
    for (uint32_t d = 0; d < wgml_tensor_ndim(p); d++) shape[d] = wgml_tensor_dim(p, d);
    TRY(wgml_tensor_create(ctx, WGML_F32, wgml_tensor_ndim(p), shape, out));
    return wgml_tensor_zero(*out);
}

/* The gradient of model parameter i (NULL when it is frozen), and of adapter target lk of
   layer l's A and B (NULL when the adapter is not trained or has no such target). */
static wgml_tensor *grad_of(const wgml_trainer *t, size_t i) { return t->lora ? NULL : t->grad[i]; }
static wgml_tensor *scratch_of(const wgml_trainer *t, size_t i) { return t->lora ? NULL : t->gscratch[i]; }
/* Where a written (not added) gradient of parameter i goes: the gradient itself on a
   step's first micro-batch, its scratch after, a throwaway when the parameter is frozen. */
static wgml_tensor *written_grad(const wgml_trainer *t, size_t i, bool fresh)
{
    return t->lora ? t->dnorm : fresh ? grad_of(t, i) : scratch_of(t, i);
}

/* The position of a's and b's gradients in the trained list (lora mode). */
static size_t lora_index(const wgml_trainer *t, const wgml_tensor *param)
{
    for (size_t i = 0; i < t->nt; i++)
        if (t->tp[i] == param) return i;
    return SIZE_MAX;
}

/* t->order, final_head and final_after (see wgml_trainer): the final norm's and an untied
   head's gradients are final before the layers' backward, each layer's (its adapter's in
   lora mode) after it, from the last layer to the first; the embedding's last (tied, it
   gets the head's gradient first and its own at the end). */
static wgml_status backward_order(wgml_trainer *t)
{
    const wgml_model *m = t->m;
    size_t L = m->L, nt = t->nt;
    /* key 0: before the layers; L - l: after layer l; L + 1: at the end */
    size_t *key = malloc((nt ? nt : 1) * sizeof *key);
    t->order = malloc((nt ? nt : 1) * sizeof *t->order);
    t->final_after = malloc(L * sizeof *t->final_after);
    if (!key || !t->order || !t->final_after) {
        free(key);
        return wgml__fail(m->ctx, WGML_ERROR_OUT_OF_MEMORY, "wgml_trainer_create: out of host memory");
    }
    for (size_t i = 0; i < nt; i++) key[i] = L + 1;
    if (t->lora) {
        for (size_t l = 0; l < L; l++)
            for (size_t k = 0; k < WGML__LORA_KINDS; k++) {
                const wgml_tensor *a = t->lora->a[l * WGML__LORA_KINDS + k], *b = t->lora->b[l * WGML__LORA_KINDS + k];
                if (a) key[lora_index(t, a)] = key[lora_index(t, b)] = L - l;
            }
    } else {
        for (size_t i = 0; i < nt; i++)
            key[i] = m->list[i].layer >= 0 ? L - (size_t)m->list[i].layer : m->list[i].slot == S_EMBED ? L + 1 : 0;
    }
    size_t n = 0;
    for (size_t k = 0; k <= L + 1; k++) {
        for (size_t i = 0; i < nt; i++)
            if (key[i] == k) t->order[n++] = i;
        if (k == 0) t->final_head = n;
        else if (k <= L) t->final_after[L - k] = n;
    }
    free(key);
    return WGML_OK;
}

#define SCALE_MIN (1.0f / 16777216.0f)   /* 2^-24 .. 2^24: the loss scale's range */
#define SCALE_MAX 16777216.0f

/* A loss scale: a power of two in [2^-24, 2^24]. */
static bool scale_ok(float s)
{
    int e;
    return s >= SCALE_MIN && s <= SCALE_MAX && frexpf(s, &e) == 0.5f;
}

wgml_status wgml_trainer_create(wgml_model *m, const wgml_trainer_desc *desc, wgml_trainer **out)
{
    if (out) *out = NULL;
    if (!m) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_trainer_create: m is NULL");
    wgml_context *ctx = m->ctx;
    if (!desc || !out) return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_trainer_create: %s is NULL", desc ? "out" : "desc");
    if (!desc->batch || !desc->seq_len)
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_trainer_create: desc batch (%u) and seq_len (%u) must be at least 1",
                          desc->batch, desc->seq_len);
    if ((uint64_t)desc->batch * desc->seq_len > UINT32_MAX / 4)
        return wgml__fail(ctx, WGML_ERROR_LIMIT, "wgml_trainer_create: desc batch * seq_len is too large");
    /* AdamW's and clipping's ranges (0 stands for the default): what torch.optim.AdamW
       accepts, finite */
    if (!(desc->beta1 >= 0 && desc->beta1 < 1) || !(desc->beta2 >= 0 && desc->beta2 < 1))
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_trainer_create: desc beta1 (%g) and beta2 (%g) must be in "
                          "[0, 1)", desc->beta1, desc->beta2);
    if (!(desc->eps >= 0 && desc->eps <= 1))
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_trainer_create: desc eps (%g) must be in (0, 1] (0: the "
                          "default)", desc->eps);
    if (!isfinite(desc->weight_decay) || !isfinite(desc->clip_norm))
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_trainer_create: desc weight_decay (%g) and clip_norm (%g) "
                          "must be finite", desc->weight_decay, desc->clip_norm);
    if (desc->loss_scale != 0 && !scale_ok(desc->loss_scale))
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_trainer_create: desc loss_scale (%g) must be 0 (none) or a "
                          "power of two in [2^-24, 2^24]", desc->loss_scale);
    if (desc->lora && desc->lora != m->lora)
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_trainer_create: desc lora is not the model's adapter");
    if (!desc->lora && !desc->eval_only) TRY(wgml__model_refuse_packed(m, "wgml_trainer_create", "training every weight"));
    wgml_trainer *t = calloc(1, sizeof *t);
    if (!t) return wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "wgml_trainer_create: out of host memory");
    t->m = m;
    t->d = *desc;
    t->lora = desc->lora;
    t->lora_changes = m->lora_changes;
    if (t->d.beta1 == 0) t->d.beta1 = 0.9f;
    if (t->d.beta2 == 0) t->d.beta2 = 0.95f;
    if (t->d.eps == 0) t->d.eps = 1e-8f;
    if (t->d.weight_decay == 0) t->d.weight_decay = 0.1f;
    else if (t->d.weight_decay < 0) t->d.weight_decay = 0;
    if (t->d.clip_norm == 0) t->d.clip_norm = 1.0f;
    if (t->d.loss_scale_interval == 0) t->d.loss_scale_interval = 2000;
    t->scale = desc->eval_only ? 0 : desc->loss_scale;
    t->B = desc->batch; t->T = desc->seq_len; t->N = t->B * t->T;
    size_t N = t->N;
    t->nt = desc->eval_only ? 0 : t->lora ? t->lora->nparams : m->nparams;
    size_t nt = t->nt;
    wgml_status s = WGML_OK;
    t->la = calloc(m->L, sizeof *t->la);
    t->tp = calloc(nt, sizeof *t->tp);
    t->grad = calloc(nt, sizeof *t->grad); t->gscratch = calloc(nt, sizeof *t->gscratch);
    t->m1 = calloc(nt, sizeof *t->m1); t->m2 = calloc(nt, sizeof *t->m2);
    void **groups[8] = { (void **)&t->w_dec, (void **)&t->g_dec, (void **)&t->m_dec, (void **)&t->v_dec,
                         (void **)&t->w_nod, (void **)&t->g_nod, (void **)&t->m_nod, (void **)&t->v_nod };
    bool ok = t->la && t->tp && t->grad && t->gscratch && t->m1 && t->m2;
    for (int g = 0; g < 8; g++) ok = ok && (*groups[g] = calloc(nt, sizeof(wgml_tensor *)));
    t->host_ids = malloc(sizeof(uint32_t) * N);
    if (!ok || !t->host_ids) { s = wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "wgml_trainer_create: out of host memory"); goto fail; }

    /* attention's scores per layer (wgml_attention_options.scores), where the kernels keep
       them and one layer's fit a binding */
    uint64_t blocks = (t->T + 63) / 64, score_floats = (uint64_t)t->B * m->H * blocks * blocks * 4096;
    bool keep = t->d.keep_attention_scores && !desc->eval_only && !m->cfg.sliding_window &&
                wgml__attention_keeps_scores(m->e, m->hd, t->T) &&
                score_floats <= 0xFFFFFFFFu && score_floats * 4 <= ctx->limits.maxStorageBufferBindingSize;
#define MK(expr) do { if ((s = (expr)) != WGML_OK) goto fail; } while (0)
    bool any_conv = false;
    for (uint32_t l = 0; l < m->L; l++) {
        layer_acts *A = &t->la[l];
        MK(mk2(ctx, &A->hin, N, m->D)); MK(mk2(ctx, &A->xn, N, m->D));
        MK(mk2(ctx, &A->h2, N, m->D)); MK(mk2(ctx, &A->xn2, N, m->D));
        MK(mk2(ctx, &A->g, N, m->F)); MK(mk2(ctx, &A->u, N, m->F)); MK(mk2(ctx, &A->a, N, m->F));
        if (m->cfg.gemma) { MK(mk2(ctx, &A->ao, N, m->D)); MK(mk2(ctx, &A->fo, N, m->D)); }
        for (int k = 0; m->lora && k < WGML__LORA_KINDS; k++)
            if (m->lora->a[(size_t)l * WGML__LORA_KINDS + (size_t)k]) MK(mk2(ctx, &A->xas[k], N, m->lora->d.rank));
        if (conv_layer(&m->cfg, l)) {
            any_conv = true;
            MK(mk2(ctx, &A->bcx, N, 3 * (size_t)m->D)); MK(mk2(ctx, &A->bx, N, m->D));
            MK(mk2(ctx, &A->cv, N, m->D)); MK(mk2(ctx, &A->y, N, m->D));
            continue;
        }
        MK(mk2(ctx, &A->q, N, m->QD)); MK(mk2(ctx, &A->k, N, m->KD)); MK(mk2(ctx, &A->v, N, m->KD));
        MK(mk2(ctx, &A->att, N, m->QD));
        MK(mk(ctx, &A->lse, WGML_F32, 3, t->B, m->H, t->T, 0));
        if (m->cfg.qk_norm) { MK(mk2(ctx, &A->qr, N, m->QD)); MK(mk2(ctx, &A->kr, N, m->KD)); }
    }
    MK(mk(ctx, &t->ids, WGML_U32, 1, N, 0, 0, 0)); MK(mk(ctx, &t->targets, WGML_U32, 1, N, 0, 0, 0));
    MK(mk2(ctx, &t->o, N, m->D)); MK(mk2(ctx, &t->f, N, m->D)); MK(mk2(ctx, &t->hf, N, m->D));
    MK(mk2(ctx, &t->xf, N, m->D)); MK(mk2(ctx, &t->logits, N, m->V));
    MK(mk(ctx, &t->loss, WGML_F32, 1, 1, 0, 0, 0));
    if (desc->eval_only) goto scratch_done;
    MK(mk(ctx, &t->norm, WGML_F32, 1, 1, 0, 0, 0));
    MK(mk2(ctx, &t->dres, N, m->D)); MK(mk2(ctx, &t->dxn, N, m->D));
    MK(mk2(ctx, &t->datt, N, m->QD)); MK(mk2(ctx, &t->dq, N, m->QD));
    MK(mk2(ctx, &t->dk, N, m->KD)); MK(mk2(ctx, &t->dv, N, m->KD));
    MK(mk2(ctx, &t->da, N, m->F)); MK(mk2(ctx, &t->dg, N, m->F)); MK(mk2(ctx, &t->du, N, m->F));
    if (m->cfg.tie_word_embeddings && !t->lora) MK(mk2(ctx, &t->demb, m->V, m->D));
    if (m->lora) MK(mk2(ctx, &t->dxa, N, m->lora->d.rank));
    if (m->cfg.qk_norm) { MK(mk2(ctx, &t->dqr, N, m->QD)); MK(mk2(ctx, &t->dkr, N, m->KD)); }
    if (m->cfg.gemma) MK(mk2(ctx, &t->dpost, N, m->D));
    if (any_conv) {
        MK(mk2(ctx, &t->dbcx, N, 3 * (size_t)m->D)); MK(mk2(ctx, &t->dbx, N, m->D));
        MK(mk2(ctx, &t->dcv, N, m->D)); MK(mk2(ctx, &t->dy, N, m->D));
    }
    if (t->lora && t->lora->d.dropout > 0) {   /* a scratch per input width the adapter's targets have */
        t->drop_p = t->lora->d.dropout;
        const size_t width[3] = { m->D, m->F, m->QD };
        for (int w = 0; w < 3; w++)
            for (uint32_t l = 0; l < m->L && !t->xdrop[w]; l++)
                for (int kind = 0; kind < P_KINDS && !t->xdrop[w]; kind++) {
                    wgml_tensor *a, *b;
                    if (lora_of(m, l, kind, &a, &b) && wgml_tensor_dim(a, 1) == width[w]) MK(mk2(ctx, &t->xdrop[w], N, width[w]));
                }
    }
    if (t->lora) MK(mk(ctx, &t->dnorm, WGML_F32, 1, m->D, 0, 0, 0));
    for (size_t i = 0; i < nt; i++) {
        t->tp[i] = t->lora ? t->lora->params[i] : m->p[i];
        MK(like(ctx, t->tp[i], &t->grad[i])); MK(like(ctx, t->tp[i], &t->m1[i])); MK(like(ctx, t->tp[i], &t->m2[i]));
        if (!t->lora && no_decay_index(m, i)) {
            t->w_nod[t->n_nod] = t->tp[i]; t->g_nod[t->n_nod] = t->grad[i];
            t->m_nod[t->n_nod] = t->m1[i]; t->v_nod[t->n_nod++] = t->m2[i];
        } else {
            t->w_dec[t->n_dec] = t->tp[i]; t->g_dec[t->n_dec] = t->grad[i];
            t->m_dec[t->n_dec] = t->m1[i]; t->v_dec[t->n_dec++] = t->m2[i];
        }
    }
    MK(backward_order(t));
    MK(wgml__exchange_create(desc->comm, t->grad, t->order, nt, "wgml_trainer_create", &t->x));
scratch_done:
    /* last, and only where the device can hold them beside the rest: a device that cannot
       gets a trainer that recomputes them instead of an error */
    for (uint32_t l = 0; keep && l < m->L; l++) {
        if (conv_layer(&m->cfg, l)) continue;
        if (mk(ctx, &t->la[l].scores, WGML_F32, 1, (size_t)score_floats, 0, 0, 0) == WGML_OK) continue;
        for (uint32_t j = 0; j < l; j++) {
            wgml_tensor_release(t->la[j].scores);
            t->la[j].scores = NULL;
        }
        keep = false;
    }
#undef MK
    *out = t;
    return WGML_OK;
fail:
    wgml_trainer_destroy(t);
    return s;
}

wgml_tensor *wgml_trainer_logits(const wgml_trainer *t) { return t ? t->logits : NULL; }
wgml_tensor *wgml_trainer_grad(const wgml_trainer *t, size_t i) { return t && !t->lora && i < t->nt ? t->grad[i] : NULL; }
wgml_tensor *wgml_trainer_lora_grad(const wgml_trainer *t, size_t i) { return t && t->lora && i < t->nt ? t->grad[i] : NULL; }
uint32_t wgml_trainer_steps(const wgml_trainer *t) { return t ? t->steps : 0; }

static wgml_status check_ids(wgml_context *ctx, const char *fn, const char *what, const uint32_t *ids, size_t n,
                             uint32_t vocab, bool allow_ignore)
{
    if (!ids) return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", fn, what);
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= vocab && !(allow_ignore && ids[i] == UINT32_MAX))
            return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: %s[%zu] = %u is not below vocab_size %u", fn, what, i, ids[i], vocab);
    return WGML_OK;
}

/* The forward pass and the loss; with backward, the CE kernel writes the gradient of the
   mean loss over the logits. */
static wgml_status train_forward(wgml_trainer *t, const char *fn, const uint32_t *ids, const uint32_t *targets,
                                 bool backward, wgml_tensor *mean_loss)
{
    wgml_model *m = t->m;
    wgml_engine *e = m->e;
    size_t N = t->N;
    TRY(check_ids(m->ctx, fn, "ids", ids, N, m->V, false));
    TRY(check_ids(m->ctx, fn, "targets", targets, N, m->V, true));
    if (mean_loss) TRY(wgml__check_tensor(e, fn, "mean_loss", mean_loss, WGML_F32));
    if (m->lora_changes != t->lora_changes)
        return wgml__fail(m->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: the model's adapter changed after the trainer was "
                          "created; create the trainer again", fn);
    TRY(wgml_tensor_write(t->ids, 0, ids, N * sizeof(uint32_t)));
    TRY(wgml_tensor_write(t->targets, 0, targets, N * sizeof(uint32_t)));
    memcpy(t->host_ids, ids, N * sizeof(uint32_t));

    const wgml_trainer *drop = backward && t->drop_p > 0 ? t : NULL;   /* LoRA dropout trains only */
    TRY(wgml_embedding(e, m->p[0], t->ids, t->la[0].hin));
    if (m->cfg.gemma) TRY(wgml_gradient_scale(e, t->la[0].hin, m->embed_scale));
    for (uint32_t l = 0; l < m->L; l++) {
        layer_acts *A = &t->la[l];
        /* the blocks' outputs: t->o and t->f, or (gemma) A->ao and A->fo normalised into them */
        wgml_tensor *o = m->cfg.gemma ? A->ao : t->o, *f = m->cfg.gemma ? A->fo : t->f;
        TRY(norm(m, l ? t->f : A->hin, l ? t->la[l - 1].h2 : NULL, P(m, l, P_ATTN_NORM), A->xn, l ? A->hin : NULL));
        if (conv_layer(&m->cfg, l)) {
            TRY(conv_block(m, drop, l, A->xn, A->bcx, A->bx, A->cv, A->y, o, A->xas, t->B, t->T));
        } else {
        TRY(qkv(m, drop, l, A->xn, N, A->q, A->k, A->v, A->qr, A->kr, A->xas));
        TRY(shape4(A->q, t->B, t->T, m->H, m->hd)); TRY(shape4(A->k, t->B, t->T, m->Hk, m->hd));
        TRY(shape4(A->v, t->B, t->T, m->Hk, m->hd)); TRY(shape4(A->att, t->B, t->T, m->H, m->hd));
        TRY(rope(m, l, A->q, 0, false));
        TRY(rope(m, l, A->k, 0, false));
        wgml_attention_options ao = attention_of(m, l, 0);
        ao.lse = A->lse;   /* the backward reads it instead of recomputing it */
        ao.scores = A->scores;
        wgml_status s = wgml_flash_attention_v2_with(e, A->q, A->k, A->v, A->att, &ao, NULL);
        TRY(shape2(A->q, N, m->QD)); TRY(shape2(A->k, N, m->KD)); TRY(shape2(A->v, N, m->KD)); TRY(shape2(A->att, N, m->QD));
        TRY(s);
        TRY(proj(m, drop, l, P_WO, A->att, o, A->xas[3]));
        }
        if (m->cfg.gemma) TRY(norm(m, A->ao, NULL, X(m, l, X_POST_ATTN), t->o, NULL));
        TRY(norm(m, t->o, A->hin, P(m, l, P_FFN_NORM), A->xn2, A->h2));
        TRY(proj(m, drop, l, P_WG, A->xn2, A->g, A->xas[4]));
        TRY(proj(m, drop, l, P_WU, A->xn2, A->u, A->xas[5]));
        TRY(gate(m, A->g, A->u, A->a));
        TRY(proj(m, drop, l, P_WD, A->a, f, A->xas[6]));
        if (m->cfg.gemma) TRY(norm(m, A->fo, NULL, X(m, l, X_POST_FFN), t->f, NULL));
    }
    TRY(norm(m, t->f, t->la[m->L - 1].h2, m->p[final_norm_index(m)], t->xf, t->hf));
    TRY(wgml_matmul_bt(e, t->xf, m->p[head_index(m)], t->logits));
    TRY(wgml_cross_entropy_batched(e, t->logits, t->targets, UINT32_MAX, NULL, t->loss, backward ? t->logits : NULL));
    if (mean_loss) TRY(wgml_copy_tensor(e, t->loss, mean_loss, 0));
    return WGML_OK;
}

/* An eval_only trainer has nothing to train: the training calls refuse it. */
static wgml_status refuse_eval_only(const wgml_trainer *t, const char *fn)
{
    if (!t->d.eval_only) return WGML_OK;
    return wgml__fail(t->m->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: the trainer was created with eval_only: it has no gradients "
                      "or optimizer state", fn);
}

wgml_status wgml_trainer_eval(wgml_trainer *t, const uint32_t *ids, const uint32_t *targets, wgml_tensor *mean_loss)
{
    if (!t) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_trainer_eval: t is NULL");
    return train_forward(t, "wgml_trainer_eval", ids, targets, false, mean_loss);
}

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* LoRA dropout's scratch for an input of x's width, and its seed for projection kind of
   layer l in the trainer's current micro-batch (the formula in wgml_trainer_desc.seed's
   comment): a resumed run drops what the uninterrupted one did. */
static wgml_tensor *drop_scratch(const wgml_trainer *t, const wgml_tensor *x)
{
    size_t in = wgml_tensor_dim(x, 1);
    for (int w = 0; w < 3; w++)
        if (t->xdrop[w] && wgml_tensor_dim(t->xdrop[w], 1) == in) return t->xdrop[w];
    return NULL;
}
static uint64_t drop_seed(const wgml_trainer *t, uint32_t l, int kind)
{
    return mix64(mix64(mix64(t->d.seed ^ 0x6a09e667f3bcc908ull) ^ ((uint64_t)t->steps << 32 | t->micro)) ^
                 ((uint64_t)l << 8 | (uint64_t)lora_kind(kind)));
}

/* The adapter's input for target kind of layer l: dropout(x) in the scratch where the
   trainer drops, else x. */
static wgml_status lora_input(const wgml_trainer *t, uint32_t l, int kind, const wgml_tensor *x, const wgml_tensor **xin)
{
    *xin = x;
    if (t->drop_p <= 0) return WGML_OK;
    wgml_tensor *xd = drop_scratch(t, x);
    TRY(wgml_dropout(t->m->e, x, xd, t->drop_p, drop_seed(t, l, kind)));
    *xin = xd;
    return WGML_OK;
}

/* The backward of projection kind of layer l, y = x W^T (+ scale (x A^T) B^T), given dy:
   dx = dy W (written, or added with accumulate), plus (scale dy B) A where the adapter
   targets it; W's gradient (when W trains) and the adapter's (when it trains) added in or
   written (wa). */
static wgml_status proj_backward(wgml_trainer *t, uint32_t l, int kind, const wgml_tensor *x, const wgml_tensor *dy,
                                 wgml_tensor *dx, bool accumulate, const wgml_matmul_options *wa)
{
    wgml_model *m = t->m;
    wgml_engine *e = m->e;
    const wgml_matmul_options acc = { .accumulate = true };
    wgml_tensor *gw = grad_of(t, slot_index(m, l, kind));
    if (gw) TRY(wgml_matmul_at_with(e, dy, x, gw, wa));
    if (dx) TRY(wgml_matmul_with(e, dy, P(m, l, kind), dx, accumulate ? &acc : NULL));
    wgml_tensor *a, *b;
    if (!lora_of(m, l, kind, &a, &b)) return WGML_OK;
    int lk = lora_kind(kind);
    if (t->lora) {
        /* dB = dy^T (scale x A^T) */
        TRY(wgml_matmul_at_with(e, dy, t->la[l].xas[lk], t->grad[lora_index(t, b)], wa));
    }
    /* dxa = scale dy B; dA = dxa^T x'; dx += dxa A, or with dropout (x' = dropout(x))
       dx += dropout(dxa A) with the forward's decisions */
    TRY(wgml_matmul(e, dy, b, t->dxa));
    TRY(wgml_gradient_scale(e, t->dxa, m->lora->scale));
    const wgml_tensor *xin = x;
    if (t->lora) TRY(lora_input(t, l, kind, x, &xin));
    if (t->lora) TRY(wgml_matmul_at_with(e, t->dxa, xin, t->grad[lora_index(t, a)], wa));
    if (!dx) return WGML_OK;
    if (t->drop_p <= 0) return wgml_matmul_with(e, t->dxa, a, dx, &acc);
    wgml_tensor *tmp = drop_scratch(t, x);   /* x' is no longer needed */
    TRY(wgml_matmul(e, t->dxa, a, tmp));
    TRY(wgml_dropout(e, tmp, tmp, t->drop_p, drop_seed(t, l, kind)));
    return wgml_add(e, dx, tmp, dx);
}

/* The backward of head_norm for norm kind x (X_QNORM, X_KNORM) of layer l: dx from dy
   and the normalised input x (each [N, heads * head_dim]); the weight's gradient written
   on a step's first micro-batch, into its scratch after (added at the end), and not
   computed when the model is frozen. */
static wgml_status head_norm_backward(wgml_trainer *t, uint32_t l, int x_kind, wgml_tensor *dy, wgml_tensor *x,
                                      wgml_tensor *dx, uint32_t heads, bool fresh)
{
    wgml_model *m = t->m;
    size_t i = extra_index(m, l, x_kind), N = t->N;
    wgml_tensor *gw = t->lora ? NULL : fresh ? t->grad[i] : t->gscratch[i];
    wgml_tensor *three[] = { dy, x, dx };
    for (int j = 0; j < 3; j++) TRY(shape2(three[j], N * heads, m->hd));
    wgml_status s = norm_backward(m, dy, x, m->p[i], dx, gw, false);
    for (int j = 0; j < 3; j++) TRY(shape2(three[j], N, (size_t)heads * m->hd));
    return s;
}

/* The backward of conv_block for layer l: from the residual stream's gradient t->dres to
   t->dxn, the gradient of the block's input; the weights' gradients written on a step's
   first micro-batch (fresh), added after. */
static wgml_status conv_block_backward(wgml_trainer *t, uint32_t l, bool fresh, const wgml_matmul_options *wa)
{
    wgml_model *m = t->m;
    wgml_engine *e = m->e;
    layer_acts *A = &t->la[l];
    TRY(proj_backward(t, l, P_CONV_OUT, A->y, t->dres, t->dy, false, wa));
    TRY(wgml__conv_gate_out_backward(e, A->bcx, A->cv, t->dy, t->dcv, t->dbcx));
    wgml_tensor *three[] = { A->bx, t->dcv, t->dbx };
    for (int i = 0; i < 3; i++) TRY(shape3(three[i], t->B, t->T, m->D));
    wgml_status s = wgml_conv1d_causal_backward(e, A->bx, P(m, l, P_CONV_W), t->dcv, t->dbx,
                                                grad_of(t, slot_index(m, l, P_CONV_W)), NULL, !fresh);
    for (int i = 0; i < 3; i++) TRY(shape2(three[i], t->N, m->D));
    TRY(s);
    TRY(wgml__conv_gate_in_backward(e, A->bcx, t->dbx, t->dbcx));
    return proj_backward(t, l, P_CONV_IN, A->xn, t->dbcx, t->dxn, false, wa);
}

/* The gradient of layer l's block output before its Gemma norm (extra kind x, whose input
   was in) from the stream's, t->dres, into t->dpost (*out), the norm's weight gradient
   written as the other norms' are (fresh: the gradient itself, else its scratch; a frozen
   model: a throwaway); without Gemma's norms *out is t->dres itself. */
static wgml_status post_norm_grad(wgml_trainer *t, uint32_t l, int x, const wgml_tensor *in, bool fresh,
                                  const wgml_tensor **out)
{
    wgml_model *m = t->m;
    *out = t->dres;
    if (!m->cfg.gemma) return WGML_OK;
    size_t i = extra_index(m, l, x);
    *out = t->dpost;
    return norm_backward(m, t->dres, in, m->p[i], t->dpost, written_grad(t, i, fresh), false);
}

/* The backward of layer l: from the gradient of its output in t->dres to that of its
   input, there too; its parameters' gradients written (fresh) or added. */
static wgml_status layer_backward(wgml_trainer *t, uint32_t l, bool fresh, const wgml_matmul_options *wa)
{
    wgml_model *m = t->m;
    wgml_engine *e = m->e;
    size_t N = t->N;
    layer_acts *A = &t->la[l];

    /* h_out = h2 + (act(g) * u) @ Wd^T, or (gemma) h2 + RMSNorm of it (A->fo) */
    const wgml_tensor *df;
    TRY(post_norm_grad(t, l, X_POST_FFN, A->fo, fresh, &df));
    TRY(proj_backward(t, l, P_WD, A->a, df, t->da, false, wa));
    TRY(gate_backward(m, A->g, A->u, t->da, t->dg, t->du));
    TRY(proj_backward(t, l, P_WG, A->xn2, t->dg, t->dxn, false, wa));
    TRY(proj_backward(t, l, P_WU, A->xn2, t->du, t->dxn, true, wa));
    /* the residual stream's gradient: += each norm's input gradient */
    TRY(norm_backward(m, t->dxn, A->h2, P(m, l, P_FFN_NORM), t->dres, written_grad(t, slot_index(m, l, P_FFN_NORM), fresh),
                      true));
    if (conv_layer(&m->cfg, l)) {
        TRY(conv_block_backward(t, l, fresh, wa));
        return norm_backward(m, t->dxn, A->hin, P(m, l, P_ATTN_NORM), t->dres,
                             written_grad(t, slot_index(m, l, P_ATTN_NORM), fresh), true);
    }
    /* h2 = hin + att @ Wo^T, or (gemma) hin + RMSNorm of it (A->ao) */
    const wgml_tensor *dao;
    TRY(post_norm_grad(t, l, X_POST_ATTN, A->ao, fresh, &dao));
    TRY(proj_backward(t, l, P_WO, A->att, dao, t->datt, false, wa));
    wgml_tensor *four[] = { A->q, A->att, t->datt, t->dq }, *four_kv[] = { A->k, A->v, t->dk, t->dv };
    for (int i = 0; i < 4; i++) TRY(shape4(four[i], t->B, t->T, m->H, m->hd));
    for (int i = 0; i < 4; i++) TRY(shape4(four_kv[i], t->B, t->T, m->Hk, m->hd));
    wgml_attention_options ao = attention_of(m, l, 0);
    ao.lse = A->lse;
    ao.scores = A->scores;
    wgml_status s = wgml_flash_attention_v2_backward_with(e, A->q, A->k, A->v, A->att, t->datt, t->dq, t->dk, t->dv, &ao, NULL);
    if (s == WGML_OK) s = rope(m, l, t->dq, 0, true);
    if (s == WGML_OK) s = rope(m, l, t->dk, 0, true);
    for (int i = 0; i < 4; i++) TRY(shape2(four[i], N, m->QD));
    for (int i = 0; i < 4; i++) TRY(shape2(four_kv[i], N, m->KD));
    TRY(s);
    wgml_tensor *dq = t->dq, *dk = t->dk;   /* the gradients of q's and k's projections */
    if (m->cfg.qk_norm) {
        TRY(head_norm_backward(t, l, X_QNORM, dq, A->qr, t->dqr, m->H, fresh));
        TRY(head_norm_backward(t, l, X_KNORM, dk, A->kr, t->dkr, m->Hk, fresh));
        dq = t->dqr;
        dk = t->dkr;
    }
    if (m->cfg.qkv_bias && !t->lora) {   /* the biases' gradients are sums: added in after a step's first */
        TRY(wgml_bias_grad(e, dq, t->grad[extra_index(m, l, X_BQ)], !fresh));
        TRY(wgml_bias_grad(e, dk, t->grad[extra_index(m, l, X_BK)], !fresh));
        TRY(wgml_bias_grad(e, t->dv, t->grad[extra_index(m, l, X_BV)], !fresh));
    }
    TRY(proj_backward(t, l, P_WQ, A->xn, dq, t->dxn, false, wa));
    TRY(proj_backward(t, l, P_WK, A->xn, dk, t->dxn, true, wa));
    TRY(proj_backward(t, l, P_WV, A->xn, t->dv, t->dxn, true, wa));
    return norm_backward(m, t->dxn, A->hin, P(m, l, P_ATTN_NORM), t->dres, written_grad(t, slot_index(m, l, P_ATTN_NORM), fresh),
                         true);
}

/* The gradients order[final_done .. upto) are final in this micro-batch: after a step's
   first, the scratch of each written one is added in; on the step's marked last
   micro-batch their sum over the processes begins (wgml__exchange_stage). */
static wgml_status grads_final(wgml_trainer *t, size_t upto, bool fresh, bool last)
{
    for (; t->final_done < upto; t->final_done++) {
        size_t i = t->order[t->final_done];
        if (!fresh && grad_via_scratch(t, i)) TRY(wgml_gradient_accumulate(t->m->e, t->grad[i], t->gscratch[i]));
    }
    return last ? wgml__exchange_stage(t->x, upto, "wgml_trainer_accumulate") : WGML_OK;
}

/* wgml_trainer_accumulate after its arguments were checked: the forward and backward
   passes (last: the step's marked last micro-batch). */
static wgml_status accumulate(wgml_trainer *t, const uint32_t *ids, const uint32_t *targets, float grad_scale,
                              wgml_tensor *mean_loss, bool last)
{
    const char *fn = "wgml_trainer_accumulate";
    wgml_model *m = t->m;
    wgml_engine *e = m->e;
    /* The first micro-batch after a step writes the gradients; later ones add into them,
       the products directly, the rest through scratch tensors (allocated on first need,
       see grad_via_scratch). */
    bool fresh = t->micro == 0;
    if (!fresh && !t->lora && !t->gscratch[final_norm_index(m)])
        for (size_t i = 0; i < m->nparams; i++)
            if (grad_via_scratch(t, i)) TRY(like(m->ctx, m->p[i], &t->gscratch[i]));
    TRY(train_forward(t, fn, ids, targets, true, mean_loss));
    const wgml_matmul_options add_grad = { .accumulate = true }, *wa = fresh ? NULL : &add_grad;
    wgml_tensor *dlogits = t->logits;
    if (grad_scale != 1.0f) TRY(wgml_gradient_scale(e, dlogits, grad_scale));
    /* the loss scale apart, so that grad_scale times it cannot overflow the factor (the
       product is exact either way: a power of two) */
    if (t->scale) TRY(wgml_gradient_scale(e, dlogits, t->scale));
    t->final_done = 0;

    /* logits = xf @ Wout^T */
    wgml_tensor *wout = m->p[head_index(m)];
    if (grad_of(t, head_index(m))) TRY(wgml_matmul_at_with(e, dlogits, t->xf, grad_of(t, head_index(m)), wa));
    TRY(wgml_matmul(e, dlogits, wout, t->dxn));
    TRY(norm_backward(m, t->dxn, t->hf, m->p[final_norm_index(m)], t->dres, written_grad(t, final_norm_index(m), fresh), false));
    TRY(grads_final(t, t->final_head, fresh, last));
    for (uint32_t l = m->L; l-- > 0;) {
        TRY(layer_backward(t, l, fresh, wa));
        TRY(grads_final(t, t->final_after[l], fresh, last));
    }
    /* h0 = embed[ids] (times embed_scale); with tied weights the head's gradient is already
       in grad[0] */
    if (!t->lora) {
        if (m->cfg.gemma) TRY(wgml_gradient_scale(e, t->dres, m->embed_scale));
        if (m->cfg.tie_word_embeddings) {
            TRY(wgml_embedding_backward(e, t->dres, t->ids, t->demb));
            TRY(wgml_add(e, t->grad[0], t->demb, t->grad[0]));
        } else {
            TRY(wgml_embedding_backward(e, t->dres, t->ids, fresh ? t->grad[0] : t->gscratch[0]));
        }
    }
    TRY(grads_final(t, t->nt, fresh, last));
    t->micro++;
    return WGML_OK;
}

/* The refusal of a training call between the step's marked last micro-batch and the step. */
static wgml_status refuse_after_last(const wgml_trainer *t, const char *fn)
{
    if (t->mark != MARK_RAN && t->mark != MARK_FAILED) return WGML_OK;
    return wgml__fail(t->m->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: the step's last micro-batch (wgml_trainer_mark_last) was "
                      "accumulated; wgml_trainer_step comes next", fn);
}

wgml_status wgml_trainer_mark_last(wgml_trainer *t)
{
    const char *fn = "wgml_trainer_mark_last";
    if (!t) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: t is NULL", fn);
    TRY(refuse_eval_only(t, fn));
    TRY(refuse_after_last(t, fn));
    if (t->mark == MARK_PENDING)
        return wgml__fail(t->m->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: the next wgml_trainer_accumulate is already marked as "
                          "the step's last", fn);
    t->mark = MARK_PENDING;
    return WGML_OK;
}

wgml_status wgml_trainer_accumulate(wgml_trainer *t, const uint32_t *ids, const uint32_t *targets, float grad_scale,
                                    wgml_tensor *mean_loss)
{
    const char *fn = "wgml_trainer_accumulate";
    if (!t) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: t is NULL", fn);
    TRY(refuse_eval_only(t, fn));
    TRY(refuse_after_last(t, fn));
    wgml_model *m = t->m;
    wgml_context *ctx = m->ctx;
    if (!isfinite(grad_scale)) return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: grad_scale must be finite", fn);
    /* checked before the scratch gradients are allocated: a rejected call records nothing */
    TRY(check_ids(ctx, fn, "ids", ids, t->N, m->V, false));
    TRY(check_ids(ctx, fn, "targets", targets, t->N, m->V, true));
    if (mean_loss) TRY(wgml__check_tensor(m->e, fn, "mean_loss", mean_loss, WGML_F32));
    bool last = t->mark == MARK_PENDING;
    wgml_status s = accumulate(t, ids, targets, grad_scale, mean_loss, last);
    if (!last) return s;
    t->mark = s == WGML_OK ? MARK_RAN : MARK_FAILED;
    if (s != WGML_OK) {   /* kept for the step, which then applies nothing */
        t->mark_status = s;
        snprintf(t->mark_error, sizeof t->mark_error, "%s", wgml_last_error(ctx));
        wgml__exchange_abandon(t->x);
    }
    return s;
}

/* Loss scaling at a step, after the norm of the scaled gradients: a norm that is not
   finite skips the step and halves the scale; else the norm is divided by the scale
   (exactly: a power of two), which doubles after loss_scale_interval such steps in a row,
   and *pre is 1 / scale, by which the step's clipping pass divides the gradients. */
static wgml_status unscale(wgml_trainer *t, bool *skip, float *pre)
{
    wgml_engine *e = t->m->e;
    float norm;
    TRY(wgml_tensor_read(t->norm, 0, &norm, sizeof norm));
    *skip = !isfinite(norm);
    if (*skip) {
        if (t->scale > SCALE_MIN) t->scale *= 0.5f;
        t->scale_good = 0;
        t->skipped++;
        return WGML_OK;
    }
    *pre = 1.0f / t->scale;
    TRY(wgml_gradient_scale(e, t->norm, *pre));
    if (++t->scale_good >= t->d.loss_scale_interval) {
        t->scale_good = 0;
        if (t->scale < SCALE_MAX) t->scale *= 2.0f;
    }
    return WGML_OK;
}

float wgml_trainer_loss_scale(const wgml_trainer *t) { return t ? t->scale : 0; }
uint32_t wgml_trainer_skipped_steps(const wgml_trainer *t) { return t ? t->skipped : 0; }

wgml_status wgml_trainer_step(wgml_trainer *t, float lr, wgml_tensor *grad_norm)
{
    const char *fn = "wgml_trainer_step";
    if (!t) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: t is NULL", fn);
    TRY(refuse_eval_only(t, fn));
    wgml_model *m = t->m;
    wgml_engine *e = m->e;
    if (!(lr >= 0) || !isfinite(lr)) return wgml__fail(m->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: lr must be finite and >= 0", fn);
    if (grad_norm) TRY(wgml__check_tensor(e, fn, "grad_norm", grad_norm, WGML_F32));
    /* a failure of the sum, now or in the marked last micro-batch, drops the step's
       gradients: nothing is applied */
    if (t->mark == MARK_FAILED) {
        t->mark = MARK_NONE;
        t->micro = 0;
        return wgml__fail(m->ctx, t->mark_status, "%s: the step's last micro-batch failed; nothing applied: %s", fn, t->mark_error);
    }
    if (t->micro == 0)
        return wgml__fail(m->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: no gradient accumulated since the last step", fn);
    t->mark = MARK_NONE;
    wgml_status s = wgml__exchange_finish(t->x, fn);
    if (s != WGML_OK) {
        t->micro = 0;
        return s;
    }
    TRY(wgml_global_norm(e, (const wgml_tensor *const *)t->grad, t->nt, t->norm));
    float pre = 1.0f;
    if (t->scale) {
        bool skip;
        TRY(unscale(t, &skip, &pre));
        if (skip) {
            if (grad_norm) TRY(wgml_copy_tensor(e, t->norm, grad_norm, 0));
            t->micro = 0;
            return WGML_OK;
        }
    }
    if (grad_norm) TRY(wgml_copy_tensor(e, t->norm, grad_norm, 0));
    if (t->d.clip_norm > 0 || pre != 1.0f)
        TRY(wgml__clip_grads(e, t->grad, t->nt, t->norm, t->d.clip_norm > 0 ? t->d.clip_norm : -1.0f, pre));
    wgml_adam_params ap = { .lr = lr, .beta1 = t->d.beta1, .beta2 = t->d.beta2, .eps = t->d.eps,
                            .weight_decay = t->d.weight_decay, .t = t->steps + 1 };
    TRY(wgml_adamw_update_multi(e, t->w_dec, (const wgml_tensor *const *)t->g_dec, t->m_dec, t->v_dec, t->n_dec, &ap));
    ap.weight_decay = 0;
    if (t->n_nod) TRY(wgml_adamw_update_multi(e, t->w_nod, (const wgml_tensor *const *)t->g_nod, t->m_nod, t->v_nod, t->n_nod, &ap));
    t->steps++;
    t->micro = 0;
    return WGML_OK;
}

/* ---- the optimizer's state, for checkpoints ------------------------------------------ */

/* The name of trained tensor i: the model's parameter name, or the adapter's PEFT key. */
static const char *trained_name(const wgml_trainer *t, size_t i) { return t->lora ? t->lora->names[i] : t->m->names[i]; }

wgml_status wgml_trainer_save_state(const wgml_trainer *t, const char *path)
{
    const char *fn = "wgml_trainer_save_state";
    if (!t || !path) return wgml__fail(t ? t->m->ctx : NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", fn, t ? "path" : "t");
    wgml_context *ctx = t->m->ctx;
    TRY(refuse_eval_only(t, fn));
    if (t->micro)
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: gradients of %u micro-batches are pending: save after a step", fn,
                          t->micro);
    size_t n = 2 * t->nt;
    wgml_safetensors_entry *e = calloc(n, sizeof *e);
    char **names = calloc(n, sizeof *names);
    wgml_status s = e && names ? WGML_OK : wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    for (size_t i = 0; i < t->nt && !s; i++)
        for (int k = 0; k < 2 && !s; k++) {
            wgml_tensor *mt = k ? t->m2[i] : t->m1[i];
            size_t j = 2 * i + (size_t)k, len = strlen(trained_name(t, i)) + 16;
            void *buf = malloc(wgml_tensor_nbytes(mt));
            names[j] = malloc(len);
            if (!buf || !names[j]) {
                free(buf);
                s = wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", fn);
                break;
            }
            snprintf(names[j], len, "%s.%s", trained_name(t, i), k ? "exp_avg_sq" : "exp_avg");
            e[j] = (wgml_safetensors_entry){ .name = names[j], .dtype = WGML_ST_F32, .ndim = wgml_tensor_ndim(mt), .data = buf };
            for (uint32_t d = 0; d < e[j].ndim; d++) e[j].shape[d] = wgml_tensor_dim(mt, d);
            s = wgml_tensor_read(mt, 0, buf, wgml_tensor_nbytes(mt));
        }
    if (!s) {
        char meta[160];
        if (t->scale)
            snprintf(meta, sizeof meta, "{\"step\":\"%u\",\"loss_scale\":\"%.9g\",\"loss_scale_good\":\"%u\","
                     "\"skipped_steps\":\"%u\"}", t->steps, (double)t->scale, t->scale_good, t->skipped);
        else
            snprintf(meta, sizeof meta, "{\"step\":\"%u\"}", t->steps);
        s = wgml_safetensors_write(path, e, n, meta);
        if (s) s = wgml__fail(ctx, s, "%s: %s", fn, wgml_last_error(NULL));
    }
    for (size_t j = 0; e && names && j < n; j++) {
        free((void *)e[j].data);
        free(names[j]);
    }
    free(e);
    free(names);
    return s;
}

/* A state's loss scaling (metadata of wgml_trainer_save_state): false when malformed. */
static bool read_scale_state(const wgml_safetensors *st, float *scale, unsigned long *good, unsigned long *skipped)
{
    const char *v = wgml_safetensors_metadata(st, "loss_scale"), *g = wgml_safetensors_metadata(st, "loss_scale_good"),
               *k = wgml_safetensors_metadata(st, "skipped_steps");
    if (!v || !g || !k || !*v || !*g || !*k) return false;
    char *end;
    *scale = strtof(v, &end);
    if (*end || !scale_ok(*scale)) return false;
    *good = strtoul(g, &end, 10);
    if (*end || *good > UINT32_MAX || g[0] == '-') return false;
    *skipped = strtoul(k, &end, 10);
    return !*end && *skipped <= UINT32_MAX && k[0] != '-';
}

wgml_status wgml_trainer_load_state(wgml_trainer *t, const char *path)
{
    const char *fn = "wgml_trainer_load_state";
    if (!t || !path) return wgml__fail(t ? t->m->ctx : NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", fn, t ? "path" : "t");
    wgml_context *ctx = t->m->ctx;
    TRY(refuse_eval_only(t, fn));
    wgml_safetensors *st = NULL;
    wgml_status s = wgml_safetensors_open(path, &st);
    if (s) return wgml__fail(ctx, s, "%s: %s", fn, wgml_last_error(NULL));
    const char *step = wgml_safetensors_metadata(st, "step");
    char *end = NULL;
    unsigned long steps = step ? strtoul(step, &end, 10) : 0;
    if (!step || !*step || *end || steps > UINT32_MAX)
        s = wgml__fail(ctx, WGML_ERROR_FORMAT, "%s: %s has no step count in its metadata", fn, path);
    if (!s && wgml_safetensors_count(st) != 2 * t->nt)
        s = wgml__fail(ctx, WGML_ERROR_FORMAT, "%s: %s holds %zu tensors; this trainer trains %zu (2 moments each): another "
                       "model or adapter?", fn, path, wgml_safetensors_count(st), t->nt);
    /* every moment present, of its tensor's shape, F32: checked before any is written */
    for (int pass = 0; pass < 2 && !s; pass++)
        for (size_t i = 0; i < t->nt && !s; i++)
            for (int k = 0; k < 2 && !s; k++) {
                char name[256];
                snprintf(name, sizeof name, "%s.%s", trained_name(t, i), k ? "exp_avg_sq" : "exp_avg");
                wgml_tensor *mt = k ? t->m2[i] : t->m1[i];
                int64_t idx = wgml_safetensors_find(st, name);
                wgml_file_tensor info;
                if (idx < 0) {
                    s = wgml__fail(ctx, WGML_ERROR_FORMAT, "%s: %s has no tensor '%s'", fn, path, name);
                    break;
                }
                wgml_safetensors_info(st, (size_t)idx, &info);
                if (info.dtype != WGML_ST_F32 || info.numel != wgml_tensor_numel(mt))
                    s = wgml__fail(ctx, WGML_ERROR_FORMAT, "%s: tensor '%s' of %s is not F32 of %zu elements", fn, name, path,
                                   wgml_tensor_numel(mt));
                else if (pass == 1)
                    s = wgml_tensor_write(mt, 0, wgml_safetensors_data(st, (size_t)idx), wgml_tensor_nbytes(mt));
            }
    float scale = 0;
    unsigned long good = 0, skipped = 0;
    if (!s && t->scale && wgml_safetensors_metadata(st, "loss_scale"))
        s = read_scale_state(st, &scale, &good, &skipped) ? WGML_OK
            : wgml__fail(ctx, WGML_ERROR_FORMAT, "%s: %s has a malformed loss_scale, loss_scale_good or skipped_steps", fn, path);
    if (!s) {
        t->steps = (uint32_t)steps;
        t->micro = 0;
        if (scale) {
            t->scale = scale;
            t->scale_good = (uint32_t)good;
            t->skipped = (uint32_t)skipped;
        }
    }
    wgml_safetensors_close(st);
    return s;
}

/* ---- generation ----------------------------------------------------------------------- */

/* Buffers for a pass over n tokens; the layers share them (nothing is kept for a
   backward pass). */
typedef struct decode_ws {
    uint32_t n;
    wgml_tensor *ids, *h, *h2, *xn, *q, *k, *v, *att, *o, *g, *u, *a, *f, *xf, *last, *xlast;
    wgml_tensor *qr, *kr;   /* q and k before their heads' norms (qk_norm), else NULL */
    wgml_tensor *bcx, *bx, *cv, *y, *rowpos;   /* convolution layers' (LFM2), else NULL */
    wgml_tensor *xas;   /* [n, rank]: scale x A^T of an adapter target, made when first needed */
} decode_ws;
#define WS_TENSORS ((offsetof(decode_ws, xas) - offsetof(decode_ws, ids)) / sizeof(wgml_tensor *) + 1)

struct wgml_kv_cache {
    wgml_model *m;
    uint32_t cap, len;
    wgml_tensor **k, **v;   /* per attention layer [1, cap, Hk, hd] (NULL for a convolution layer) */
    wgml_tensor **conv;     /* per convolution layer [K - 1 + cap, hidden]: K - 1 zero rows, then the
                               convolution's input at each position (NULL for attention) */
    decode_ws ws[2];   /* [0] for single tokens, [1] for the last prompt length */
};

static void ws_free(decode_ws *w)
{
    release_all(&w->ids, WS_TENSORS);
    memset(w, 0, sizeof *w);
}

static wgml_status ws_make(wgml_model *m, decode_ws *w, uint32_t n)
{
    wgml_context *ctx = m->ctx;
    wgml_status s;
#define MK(expr) do { if ((s = (expr)) != WGML_OK) { ws_free(w); return s; } } while (0)
    MK(mk(ctx, &w->ids, WGML_U32, 1, n, 0, 0, 0));
    MK(mk2(ctx, &w->h, n, m->D)); MK(mk2(ctx, &w->h2, n, m->D)); MK(mk2(ctx, &w->xn, n, m->D));
    MK(mk2(ctx, &w->q, n, m->QD)); MK(mk2(ctx, &w->k, n, m->KD)); MK(mk2(ctx, &w->v, n, m->KD));
    MK(mk2(ctx, &w->att, n, m->QD)); MK(mk2(ctx, &w->o, n, m->D));
    MK(mk2(ctx, &w->g, n, m->F)); MK(mk2(ctx, &w->u, n, m->F)); MK(mk2(ctx, &w->a, n, m->F));
    MK(mk2(ctx, &w->f, n, m->D)); MK(mk2(ctx, &w->xf, n, m->D));
    MK(mk(ctx, &w->last, WGML_U32, 1, 1, 0, 0, 0)); MK(mk2(ctx, &w->xlast, 1, m->D));
    if (m->cfg.qk_norm) { MK(mk2(ctx, &w->qr, n, m->QD)); MK(mk2(ctx, &w->kr, n, m->KD)); }
    if (m->cfg.conv_kernel) {
        MK(mk2(ctx, &w->bcx, n, 3 * (size_t)m->D)); MK(mk2(ctx, &w->bx, n, m->D)); MK(mk2(ctx, &w->cv, n, m->D));
        MK(mk2(ctx, &w->y, n, m->D)); MK(mk(ctx, &w->rowpos, WGML_U32, 1, n, 0, 0, 0));
    }
#undef MK
    uint32_t last = n - 1;
    s = wgml_tensor_write(w->last, 0, &last, sizeof last);
    if (s != WGML_OK) { ws_free(w); return s; }
    w->n = n;
    return WGML_OK;
}

wgml_status wgml_kv_cache_create(wgml_model *m, uint32_t max_tokens, wgml_kv_cache **out)
{
    if (out) *out = NULL;
    if (!m) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_kv_cache_create: m is NULL");
    if (!out) return wgml__fail(m->ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_kv_cache_create: out is NULL");
    if (!max_tokens) return wgml__fail(m->ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_kv_cache_create: max_tokens must be at least 1");
    uint64_t layer_bytes = 4ull * max_tokens * m->Hk * m->hd;
    if (layer_bytes > m->ctx->limits.maxStorageBufferBindingSize || layer_bytes > m->ctx->limits.maxBufferSize)
        return wgml__fail(m->ctx, WGML_ERROR_LIMIT, "wgml_kv_cache_create: max_tokens %u needs %llu bytes of keys per layer, "
                          "more than one buffer of the device holds", max_tokens, (unsigned long long)layer_bytes);
    wgml_kv_cache *c = calloc(1, sizeof *c);
    if (c) { c->k = calloc(m->L, sizeof *c->k); c->v = calloc(m->L, sizeof *c->v); c->conv = calloc(m->L, sizeof *c->conv); }
    if (!c || !c->k || !c->v || !c->conv) {
        wgml_kv_cache_destroy(c);
        return wgml__fail(m->ctx, WGML_ERROR_OUT_OF_MEMORY, "wgml_kv_cache_create: out of host memory");
    }
    c->m = m;
    c->cap = max_tokens;
    for (uint32_t l = 0; l < m->L; l++) {
        if (conv_layer(&m->cfg, l)) {   /* zeroed: the rows before the first position */
            wgml_status s = mk2(m->ctx, &c->conv[l], (size_t)m->cfg.conv_kernel - 1 + max_tokens, m->D);
            if (s == WGML_OK) s = wgml_tensor_zero(c->conv[l]);
            if (s != WGML_OK) { wgml_kv_cache_destroy(c); return s; }
            continue;
        }
        /* zeroed: positions past the cached ones are masked, and must not be NaN */
        wgml_status s = mk(m->ctx, &c->k[l], WGML_F32, 4, 1, max_tokens, m->Hk, m->hd);
        if (s == WGML_OK) s = wgml_tensor_zero(c->k[l]);
        if (s == WGML_OK) s = mk(m->ctx, &c->v[l], WGML_F32, 4, 1, max_tokens, m->Hk, m->hd);
        if (s == WGML_OK) s = wgml_tensor_zero(c->v[l]);
        if (s != WGML_OK) { wgml_kv_cache_destroy(c); return s; }
    }
    *out = c;
    return WGML_OK;
}

void wgml_kv_cache_destroy(wgml_kv_cache *c)
{
    if (!c) return;
    if (c->m) { release_all(c->k, c->m->L); release_all(c->v, c->m->L); release_all(c->conv, c->m->L); }
    ws_free(&c->ws[0]);
    ws_free(&c->ws[1]);
    free(c->k);
    free(c->v);
    free(c->conv);
    free(c);
}

uint32_t wgml_kv_cache_length(const wgml_kv_cache *c) { return c ? c->len : 0; }
uint32_t wgml_kv_cache_capacity(const wgml_kv_cache *c) { return c ? c->cap : 0; }
void wgml_kv_cache_reset(wgml_kv_cache *c) { if (c) c->len = 0; }

wgml_status wgml_kv_cache_truncate(wgml_kv_cache *c, uint32_t n)
{
    if (!c) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_kv_cache_truncate: c is NULL");
    if (n > c->len)
        return wgml__fail(c->m->ctx, WGML_ERROR_SHAPE, "wgml_kv_cache_truncate: n is %u; the cache holds %u positions", n, c->len);
    c->len = n;
    return WGML_OK;
}

/* The steps of a forward pass over n tokens that read and write the cache, for layer l:
   attend (q, k, v of the new tokens in w; writes w->att) and, in a convolution layer,
   convolve (the new rows' convolution inputs in w->bx; writes w->cv). A single cache or
   a batch of them (below). */
typedef wgml_status (*step_fn)(void *u, uint32_t l, decode_ws *w);
typedef struct cache_steps { step_fn attend, convolve; } cache_steps;

/* A forward pass of w->n tokens (ids already in w->ids) through the layers, the cache by
   steps; logits of every row (all) or of the last. */
static wgml_status forward_pass(wgml_model *m, decode_ws *w, const cache_steps *steps, void *u, bool all, wgml_tensor *logits)
{
    wgml_engine *e = m->e;
    uint32_t n = w->n;
    TRY(wgml_embedding(e, m->p[0], w->ids, w->h));
    if (m->cfg.gemma) TRY(wgml_gradient_scale(e, w->h, m->embed_scale));
    /* the blocks' outputs: w->o and w->f, or (gemma) w->xf before their norms into them */
    wgml_tensor *o = m->cfg.gemma ? w->xf : w->o, *f = m->cfg.gemma ? w->xf : w->f;
    for (uint32_t l = 0; l < m->L; l++) {
        TRY(norm(m, l ? w->f : w->h, l ? w->h2 : NULL, P(m, l, P_ATTN_NORM), w->xn, l ? w->h : NULL));
        if (conv_layer(&m->cfg, l)) {
            TRY(proj(m, NULL, l, P_CONV_IN, w->xn, w->bcx, w->xas));
            TRY(wgml__conv_gate_in(e, w->bcx, w->bx));
            TRY(steps->convolve(u, l, w));
            TRY(wgml__conv_gate_out(e, w->bcx, w->cv, w->y));
            TRY(proj(m, NULL, l, P_CONV_OUT, w->y, o, w->xas));
        } else {
            TRY(qkv(m, NULL, l, w->xn, n, w->q, w->k, w->v, w->qr, w->kr, (wgml_tensor *const[3]){ w->xas, w->xas, w->xas }));
            TRY(steps->attend(u, l, w));
            TRY(proj(m, NULL, l, P_WO, w->att, o, w->xas));
        }
        if (m->cfg.gemma) TRY(norm(m, o, NULL, X(m, l, X_POST_ATTN), w->o, NULL));
        TRY(norm(m, w->o, w->h, P(m, l, P_FFN_NORM), w->xn, w->h2));
        TRY(proj(m, NULL, l, P_WG, w->xn, w->g, w->xas));
        TRY(proj(m, NULL, l, P_WU, w->xn, w->u, w->xas));
        TRY(gate(m, w->g, w->u, w->a));
        TRY(proj(m, NULL, l, P_WD, w->a, f, w->xas));
        if (m->cfg.gemma) TRY(norm(m, f, NULL, X(m, l, X_POST_FFN), w->f, NULL));
    }
    TRY(norm(m, w->f, w->h2, m->p[final_norm_index(m)], w->xf, w->h));
    /* logits of every row, or of the last only (gathered with the embedding op) */
    wgml_tensor *x = w->xf;
    size_t rows = all ? n : 1;
    if (!all && n > 1) {
        TRY(wgml_embedding(e, w->xf, w->last, w->xlast));
        x = w->xlast;
    }
    uint32_t nd = wgml_tensor_ndim(logits);
    size_t shape[4];
    for (uint32_t d = 0; d < nd; d++) shape[d] = wgml_tensor_dim(logits, d);
    TRY(shape2(logits, rows, m->V));
    wgml_status s = wgml_matmul_bt(e, x, m->p[head_index(m)], logits);
    TRY(wgml_tensor_reshape(logits, nd, shape));
    return s;
}

/* The workspace for n rows (remade when n changed), with the adapter's scratch. */
static wgml_status ws_ready(wgml_model *m, decode_ws *w, uint32_t n)
{
    if (w->n != n) {
        ws_free(w);
        TRY(ws_make(m, w, n));
    }
    if (m->lora && (!w->xas || wgml_tensor_dim(w->xas, 1) != m->lora->d.rank)) {
        wgml_tensor_release(w->xas);
        w->xas = NULL;
        TRY(mk2(m->ctx, &w->xas, n, m->lora->d.rank));
    }
    return WGML_OK;
}

/* One cache: the new tokens at positions pos.., their keys and values one contiguous
   range of the cache [1, cap, Hk, hd], causal attention from position pos. */
typedef struct attend_one { wgml_kv_cache *c; uint32_t pos; } attend_one;

static wgml_status attend_single(void *u, uint32_t l, decode_ws *w)
{
    attend_one *a = u;
    wgml_model *m = a->c->m;
    wgml_engine *e = m->e;
    uint32_t n = w->n;
    wgml_attention_options ao = attention_of(m, l, a->pos);
    TRY(shape4(w->q, 1, n, m->H, m->hd)); TRY(shape4(w->k, 1, n, m->Hk, m->hd));
    TRY(shape4(w->att, 1, n, m->H, m->hd));
    wgml_status s = rope(m, l, w->q, a->pos, false);
    if (s == WGML_OK) s = rope(m, l, w->k, a->pos, false);
    size_t at = (size_t)a->pos * m->KD * sizeof(float);
    if (s == WGML_OK) s = wgml_copy_tensor(e, w->k, a->c->k[l], at);
    if (s == WGML_OK) s = wgml_copy_tensor(e, w->v, a->c->v[l], at);
    if (s == WGML_OK) s = wgml_flash_attention_v2_with(e, w->q, a->c->k[l], a->c->v[l], w->att, &ao, NULL);
    TRY(shape2(w->q, n, m->QD)); TRY(shape2(w->k, n, m->KD)); TRY(shape2(w->att, n, m->QD));
    return s;
}

/* One cache: the new rows' convolution inputs into the history at positions pos.., each
   row's convolution over its last K. */
static wgml_status convolve_single(void *u, uint32_t l, decode_ws *w)
{
    attend_one *a = u;
    wgml_model *m = a->c->m;
    uint32_t K = m->cfg.conv_kernel;
    TRY(wgml_copy_tensor(m->e, w->bx, a->c->conv[l], ((size_t)K - 1 + a->pos) * m->D * sizeof(float)));
    return wgml__conv_rows(m->e, a->c->conv[l], w->rowpos, P(m, l, P_CONV_W), w->cv);
}

wgml_status wgml_model_decode(wgml_kv_cache *c, const uint32_t *ids, uint32_t n, wgml_tensor *logits)
{
    const char *fn = "wgml_model_decode";
    if (!c) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: c is NULL", fn);
    wgml_model *m = c->m;
    wgml_engine *e = m->e;
    wgml_context *ctx = m->ctx;
    if (!n) return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: n must be at least 1", fn);
    TRY(check_ids(ctx, fn, "ids", ids, n, m->V, false));
    TRY(wgml__check_tensor(e, fn, "logits", logits, WGML_F32));
    size_t numel = wgml_tensor_numel(logits);
    bool all = numel == (size_t)n * m->V && n > 1;
    if (numel != m->V && !all)
        return wgml__fail(ctx, WGML_ERROR_SHAPE, "%s: logits has %zu elements; it must have vocab_size (%u) or n * vocab_size (%zu)",
                          fn, numel, m->V, (size_t)n * m->V);
    if ((uint64_t)c->len + n > c->cap)
        return wgml__fail(ctx, WGML_ERROR_SHAPE, "%s: %u cached + %u new tokens exceed the cache's capacity %u", fn, c->len, n, c->cap);
    decode_ws *w = &c->ws[n == 1 ? 0 : 1];
    TRY(ws_ready(m, w, n));
    TRY(wgml_tensor_write(w->ids, 0, ids, n * sizeof(uint32_t)));
    attend_one a = { .c = c, .pos = c->len };
    if (w->rowpos) {   /* the history rows of the new positions */
        uint32_t *rp = malloc(sizeof *rp * n);
        if (!rp) return wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", fn);
        for (uint32_t i = 0; i < n; i++) rp[i] = m->cfg.conv_kernel - 1 + c->len + i;
        wgml_status s = wgml_tensor_write(w->rowpos, 0, rp, n * sizeof *rp);
        free(rp);
        TRY(s);
    }
    const cache_steps steps = { attend_single, convolve_single };
    TRY(forward_pass(m, w, &steps, &a, all, logits));
    c->len += n;
    return WGML_OK;
}

/* ---- sequences decoded together --------------------------------------------------------- */

struct wgml_kv_batch {
    wgml_model *m;
    uint32_t cap, nseq;
    uint32_t *len;              /* positions each sequence holds */
    wgml_tensor **k, **v;       /* per attention layer [nseq, cap, Hk, hd] */
    wgml_tensor **conv;         /* per convolution layer [nseq, K - 1 + cap, hidden]: each sequence's
                                   history as wgml_kv_cache's */
    wgml_tensor *conv_at, *conv_row;   /* u32 [nseq]: each new row's place in its block, and overall */
    uint32_t *host_conv;
    wgml_tensor *positions;     /* u32 [nseq]: each sequence's position in this step */
    wgml_tensor *mask;          /* f32 [nseq, 1, 1, cap]: the keys each sequence sees */
    wgml_tensor *mask_full;     /* the same for the layers that do not slide where others do
                                   (Gemma 3's global layers), else NULL */
    uint32_t *host_pos;
    float *host_mask;
    wgml_kv_cache *one;         /* a prompt's pass, then copied into its sequence's block */
    decode_ws ws;
};

wgml_status wgml_kv_batch_create(wgml_model *m, uint32_t max_tokens, uint32_t n_seq, wgml_kv_batch **out)
{
    const char *fn = "wgml_kv_batch_create";
    if (out) *out = NULL;
    if (!m) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: m is NULL", fn);
    if (!out) return wgml__fail(m->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: out is NULL", fn);
    if (!max_tokens || !n_seq)
        return wgml__fail(m->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: max_tokens (%u) and n_seq (%u) must be at least 1", fn,
                          max_tokens, n_seq);
    uint64_t layer_bytes = 4ull * n_seq * max_tokens * m->Hk * m->hd;
    if (layer_bytes > m->ctx->limits.maxStorageBufferBindingSize || layer_bytes > m->ctx->limits.maxBufferSize ||
        (uint64_t)n_seq * max_tokens * m->KD > 0xFFFFFFFFu)
        return wgml__fail(m->ctx, WGML_ERROR_LIMIT, "%s: %u sequences of %u positions need %llu bytes of keys per layer, more "
                          "than one buffer of the device holds", fn, n_seq, max_tokens, (unsigned long long)layer_bytes);
    wgml_kv_batch *b = calloc(1, sizeof *b);
    if (b) {
        b->m = m;
        b->k = calloc(m->L, sizeof *b->k);
        b->v = calloc(m->L, sizeof *b->v);
        b->conv = calloc(m->L, sizeof *b->conv);
        b->host_conv = calloc(2 * (size_t)n_seq, sizeof *b->host_conv);
        b->len = calloc(n_seq, sizeof *b->len);
        b->host_pos = calloc(n_seq, sizeof *b->host_pos);
        b->host_mask = malloc(sizeof(float) * n_seq * (size_t)max_tokens);
    }
    if (!b || !b->k || !b->v || !b->conv || !b->host_conv || !b->len || !b->host_pos || !b->host_mask) {
        wgml_kv_batch_destroy(b);
        return wgml__fail(m->ctx, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    }
    b->cap = max_tokens;
    b->nseq = n_seq;
    wgml_status s = WGML_OK;
    for (uint32_t l = 0; l < m->L && s == WGML_OK; l++) {
        if (conv_layer(&m->cfg, l)) {
            s = mk(m->ctx, &b->conv[l], WGML_F32, 3, n_seq, (size_t)m->cfg.conv_kernel - 1 + max_tokens, m->D, 0);
            if (s == WGML_OK) s = wgml_tensor_zero(b->conv[l]);
            continue;
        }
        s = mk(m->ctx, &b->k[l], WGML_F32, 4, n_seq, max_tokens, m->Hk, m->hd);
        if (s == WGML_OK) s = wgml_tensor_zero(b->k[l]);   /* masked positions must not be NaN */
        if (s == WGML_OK) s = mk(m->ctx, &b->v[l], WGML_F32, 4, n_seq, max_tokens, m->Hk, m->hd);
        if (s == WGML_OK) s = wgml_tensor_zero(b->v[l]);
    }
    if (s == WGML_OK) s = mk(m->ctx, &b->positions, WGML_U32, 1, n_seq, 0, 0, 0);
    if (s == WGML_OK && m->cfg.conv_kernel) s = mk(m->ctx, &b->conv_at, WGML_U32, 1, n_seq, 0, 0, 0);
    if (s == WGML_OK && m->cfg.conv_kernel) s = mk(m->ctx, &b->conv_row, WGML_U32, 1, n_seq, 0, 0, 0);
    if (s == WGML_OK) s = mk(m->ctx, &b->mask, WGML_F32, 4, n_seq, 1, 1, max_tokens);
    bool mixed = false;
    for (uint32_t w = 0; w < 32; w++) mixed = mixed || (m->cfg.sliding_window && m->cfg.full_attention_layers[w]);
    if (s == WGML_OK && mixed) s = mk(m->ctx, &b->mask_full, WGML_F32, 4, n_seq, 1, 1, max_tokens);
    if (s == WGML_OK) s = wgml_kv_cache_create(m, max_tokens, &b->one);
    if (s != WGML_OK) {
        wgml_kv_batch_destroy(b);
        return s;
    }
    *out = b;
    return WGML_OK;
}

void wgml_kv_batch_destroy(wgml_kv_batch *b)
{
    if (!b) return;
    if (b->k) release_all(b->k, b->m->L);
    if (b->v) release_all(b->v, b->m->L);
    if (b->conv) release_all(b->conv, b->m->L);
    wgml_tensor_release(b->conv_at);
    wgml_tensor_release(b->conv_row);
    wgml_tensor_release(b->positions);
    wgml_tensor_release(b->mask);
    wgml_tensor_release(b->mask_full);
    wgml_kv_cache_destroy(b->one);
    ws_free(&b->ws);
    free(b->k);
    free(b->v);
    free(b->conv);
    free(b->host_conv);
    free(b->len);
    free(b->host_pos);
    free(b->host_mask);
    free(b);
}

uint32_t wgml_kv_batch_length(const wgml_kv_batch *b, uint32_t seq) { return b && seq < b->nseq ? b->len[seq] : 0; }

void wgml_kv_batch_reset(wgml_kv_batch *b, uint32_t seq)
{
    if (b && seq < b->nseq) b->len[seq] = 0;
}

wgml_status wgml_kv_batch_prefill(wgml_kv_batch *b, uint32_t seq, const uint32_t *ids, uint32_t n, wgml_tensor *logits)
{
    const char *fn = "wgml_kv_batch_prefill";
    if (!b) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: b is NULL", fn);
    wgml_model *m = b->m;
    if (seq >= b->nseq)
        return wgml__fail(m->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: seq is %u; the batch has %u sequences", fn, seq, b->nseq);
    if (b->len[seq])
        return wgml__fail(m->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: sequence %u holds %u positions; a prompt starts an empty "
                          "sequence (wgml_kv_batch_reset)", fn, seq, b->len[seq]);
    wgml_kv_cache_reset(b->one);
    wgml_status s = wgml_model_decode(b->one, ids, n, logits);
    if (s != WGML_OK) {   /* its checks and messages are this function's */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", wgml_last_error(m->ctx));
        const char *tail = strncmp(msg, "wgml_model_decode: ", 19) == 0 ? msg + 19 : msg;
        return wgml__fail(m->ctx, s, "%s: %s", fn, tail);
    }
    size_t at = (size_t)seq * b->cap * m->KD * sizeof(float);
    size_t conv_at = (size_t)seq * (m->cfg.conv_kernel - 1 + (size_t)b->cap) * m->D * sizeof(float);
    for (uint32_t l = 0; l < m->L; l++) {
        if (conv_layer(&m->cfg, l)) {
            TRY(wgml_copy_tensor(m->e, b->one->conv[l], b->conv[l], conv_at));
            continue;
        }
        TRY(wgml_copy_tensor(m->e, b->one->k[l], b->k[l], at));
        TRY(wgml_copy_tensor(m->e, b->one->v[l], b->v[l], at));
    }
    b->len[seq] = n;
    return WGML_OK;
}

/* Each sequence's new token at its own position: rotated there, written into its block of
   the cache, attending to its own keys (the mask hides the others and those past it). */
static wgml_status attend_batch(void *u, uint32_t l, decode_ws *w)
{
    wgml_kv_batch *b = u;
    wgml_model *m = b->m;
    wgml_engine *e = m->e;
    uint32_t n = w->n;
    TRY(shape4(w->q, n, 1, m->H, m->hd)); TRY(shape4(w->k, n, 1, m->Hk, m->hd));
    TRY(shape4(w->att, n, 1, m->H, m->hd));
    wgml_rope_options ro = rope_of(m, l);
    ro.positions = b->positions;
    wgml_attention_options ao = { .scale = m->attn_scale };
    wgml_status s = wgml_rope_with(e, w->q, &ro);
    if (s == WGML_OK) s = wgml_rope_with(e, w->k, &ro);
    if (s == WGML_OK) s = wgml__copy_rows_at(e, w->k, b->k[l], b->positions, n, b->cap, m->KD);
    if (s == WGML_OK) s = wgml__copy_rows_at(e, w->v, b->v[l], b->positions, n, b->cap, m->KD);
    if (s == WGML_OK) s = wgml_flash_attention_v2_with(e, w->q, b->k[l], b->v[l], w->att, &ao, slides(m, l) || !b->mask_full ? b->mask : b->mask_full);
    TRY(shape2(w->q, n, m->QD)); TRY(shape2(w->k, n, m->KD)); TRY(shape2(w->att, n, m->QD));
    return s;
}

/* Each sequence's new convolution input into its history, its convolution over its last K. */
static wgml_status convolve_batch(void *u, uint32_t l, decode_ws *w)
{
    wgml_kv_batch *b = u;
    wgml_model *m = b->m;
    uint32_t rows = m->cfg.conv_kernel - 1 + b->cap;
    TRY(wgml__copy_rows_at(m->e, w->bx, b->conv[l], b->conv_at, w->n, rows, m->D));
    return wgml__conv_rows(m->e, b->conv[l], b->conv_row, P(m, l, P_CONV_W), w->cv);
}

/* The keys each sequence sees in this step: its own, up to and including the new one,
   within the window win (0: all of them). */
static wgml_status write_batch_mask(wgml_kv_batch *b, wgml_tensor *mask, uint32_t win)
{
    for (uint32_t i = 0; i < b->nseq; i++) {
        uint32_t at = b->len[i];
        float *row = b->host_mask + (size_t)i * b->cap;
        for (uint32_t j = 0; j < b->cap; j++) row[j] = j <= at && (!win || at - j < win) ? 0.0f : -INFINITY;
    }
    return wgml_tensor_write(mask, 0, b->host_mask, (size_t)b->nseq * b->cap * sizeof(float));
}

wgml_status wgml_model_decode_batch(wgml_kv_batch *b, const uint32_t *ids, wgml_tensor *logits)
{
    const char *fn = "wgml_model_decode_batch";
    if (!b) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: b is NULL", fn);
    wgml_model *m = b->m;
    wgml_context *ctx = m->ctx;
    uint32_t n = b->nseq;
    TRY(check_ids(ctx, fn, "ids", ids, n, m->V, false));
    TRY(wgml__check_tensor(m->e, fn, "logits", logits, WGML_F32));
    if (wgml_tensor_numel(logits) != (size_t)n * m->V)
        return wgml__fail(ctx, WGML_ERROR_SHAPE, "%s: logits has %zu elements; it must have n_seq * vocab_size = %u * %u", fn,
                          wgml_tensor_numel(logits), n, m->V);
    for (uint32_t i = 0; i < n; i++)
        if (b->len[i] >= b->cap)
            return wgml__fail(ctx, WGML_ERROR_SHAPE, "%s: sequence %u fills its %u positions", fn, i, b->cap);
    for (uint32_t i = 0; i < n; i++) b->host_pos[i] = b->len[i];
    TRY(wgml_tensor_write(b->positions, 0, b->host_pos, n * sizeof(uint32_t)));
    TRY(write_batch_mask(b, b->mask, m->cfg.sliding_window));
    if (b->mask_full) TRY(write_batch_mask(b, b->mask_full, 0));
    if (m->cfg.conv_kernel) {
        uint32_t K = m->cfg.conv_kernel, *at = b->host_conv, *row = b->host_conv + n;
        for (uint32_t i = 0; i < n; i++) {
            at[i] = K - 1 + b->len[i];
            row[i] = i * (K - 1 + b->cap) + at[i];
        }
        TRY(wgml_tensor_write(b->conv_at, 0, at, n * sizeof(uint32_t)));
        TRY(wgml_tensor_write(b->conv_row, 0, row, n * sizeof(uint32_t)));
    }
    TRY(ws_ready(m, &b->ws, n));
    TRY(wgml_tensor_write(b->ws.ids, 0, ids, n * sizeof(uint32_t)));
    const cache_steps steps = { attend_batch, convolve_batch };
    TRY(forward_pass(m, &b->ws, &steps, b, true, logits));
    for (uint32_t i = 0; i < n; i++) b->len[i]++;
    return WGML_OK;
}
