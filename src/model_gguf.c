/* wgml_model_load of a llama-architecture GGUF file: the configuration from its metadata
   (wgml_model_config_from_gguf), every tensor checked against it before any device
   memory is taken, then each weight expanded to f32 on the host (src/io/ggml_dequant.c),
   or with WGML_WEIGHTS_KEEP kept in its blocks where a packed dtype reads them, and
   written to the device.

   llama.cpp's converter stores the rows of attn_q and attn_k permuted for its interleaved
   RoPE: within each head, row 2 j + t holds what Hugging Face's row t * head_dim / 2 + j
   holds. wgml's RoPE rotates halves, as Hugging Face's does, so those rows are put back. */
#include "internal.h"
#include "io/io.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *fn = "wgml_model_load";

/* Whether the weights of a tensor of type t can be expanded to f32. */
static bool weight_type(wgml_ggml_type t)
{
    float x[256];
    static const uint8_t zero[292];
    uint32_t block;
    return wgml_ggml_type_block(t, &block, NULL) && wgml__ggml_to_f32(t, zero, block, x);
}

/* Parameter i's GGUF tensor: present, of the model's shape (GGUF lists dimensions
   innermost first: [in, out] for an [out, in] matrix) and a weight type. */
static wgml_status check_tensor(wgml_context *ctx, const wgml_gguf *g, const char *path, const wgml_model_config *cfg, size_t i,
                                int64_t *index)
{
    char hf[WGML__PARAM_NAME_MAX], name[WGML__PARAM_NAME_MAX + 16];
    uint32_t nd;
    uint64_t shape[2];
    wgml__model_param_spec(cfg, i, hf, &nd, shape);
    if (!wgml__gguf_tensor_name(hf, name, sizeof name))
        return wgml__fail(ctx, WGML_ERROR_FORMAT, "%s: internal: no GGUF name for %s", fn, hf);
    *index = wgml_gguf_tensor_find(g, name);
    wgml_gguf_tensor t;
    if (*index < 0 || wgml_gguf_tensor_info(g, (size_t)*index, &t) != WGML_OK)
        return wgml__fail(ctx, WGML_ERROR_FORMAT, "%s: %s has no tensor '%s'", fn, path, name);
    bool same = nd == 1 ? t.ndim == 1 && t.shape[0] == shape[0]
                        : t.ndim == 2 && t.shape[0] == shape[1] && t.shape[1] == shape[0];
    if (!same)
        return wgml__fail(ctx, WGML_ERROR_FORMAT, "%s: %s: tensor '%s' has %u dimensions [%llu, %llu] (innermost first); the "
                          "metadata implies [%llu%s%llu]", fn, path, name, t.ndim, (unsigned long long)t.shape[0],
                          (unsigned long long)t.shape[1], (unsigned long long)(nd == 1 ? shape[0] : shape[1]),
                          nd == 1 ? "" : ", ", (unsigned long long)(nd == 1 ? 0 : shape[0]));
    if (!weight_type(t.type))
        return wgml__fail(ctx, WGML_ERROR_FORMAT, "%s: %s: tensor '%s' has type %s, not a weight format", fn, path, name,
                          wgml_ggml_type_name(t.type));
    return WGML_OK;
}

/* rows [n_head * hd] of row_size bytes each from GGUF's interleaved order back to halves
   (whole rows move, so packed rows move as they are). */
static void unpermute(const void *in, void *out, uint64_t rows, size_t row_size, uint32_t n_head)
{
    uint64_t hd = rows / n_head, half = hd / 2;
    for (uint64_t h = 0; h < n_head; h++)
        for (uint64_t j = 0; j < half; j++)
            for (uint64_t t = 0; t < 2; t++)
                memcpy((uint8_t *)out + (h * hd + t * half + j) * row_size, (const uint8_t *)in + (h * hd + 2 * j + t) * row_size,
                       row_size);
}

/* The packed (or 16-bit) dtype a GGUF type is kept in, or WGML_F32 when it has none. */
static wgml_dtype kept_dtype(wgml_ggml_type t)
{
    switch (t) {
    case WGML_GGML_F16: return WGML_F16;
    case WGML_GGML_BF16: return WGML_BF16;
    case WGML_GGML_Q8_0: return WGML_Q8_0;
    case WGML_GGML_Q4_0: return WGML_Q4_0;
    case WGML_GGML_Q4_K: return WGML_Q4_K;
    case WGML_GGML_Q6_K: return WGML_Q6_K;
    default: return WGML_F32;
    }
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

wgml_status wgml__model_load_gguf(wgml_engine *e, const char *path, wgml_weights weights, wgml_model **out)
{
    wgml_context *ctx = e->ctx;
    wgml_gguf *g = NULL;
    wgml_status s = wgml_gguf_open(path, &g);
    if (s) return wgml__fail(ctx, s, "%s: %s", fn, wgml_last_error(NULL));
    wgml_model_config cfg;
    s = wgml_model_config_from_gguf(g, path, &cfg);
    if (s) s = wgml__fail(ctx, s, "%s: %s", fn, wgml_last_error(NULL));
    if (!s) s = wgml__model_check_config(ctx, fn, &cfg);

    /* every tensor checked first; each of the file used (rope_freqs.weight: RoPE factors) */
    size_t n = s ? 0 : wgml__model_param_total(&cfg), used = 0;
    int64_t *index = calloc(n ? n : 1, sizeof *index);
    if (!s && !index) s = wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    for (size_t i = 0; !s && i < n; i++) s = check_tensor(ctx, g, path, &cfg, i, &index[i]);
    uint32_t hd = cfg.head_dim ? cfg.head_dim : (cfg.num_attention_heads ? cfg.hidden_size / cfg.num_attention_heads : 0);
    int64_t rf = s ? -1 : wgml_gguf_tensor_find(g, "rope_freqs.weight");
    wgml_gguf_tensor rt;
    if (rf >= 0 && (wgml_gguf_tensor_info(g, (size_t)rf, &rt) != WGML_OK || rt.type != WGML_GGML_F32 || rt.ndim != 1 ||
                    rt.shape[0] != hd / 2))
        s = wgml__fail(ctx, WGML_ERROR_FORMAT, "%s: %s: rope_freqs.weight must be F32 [%u]", fn, path, hd / 2);
    if (rf >= 0 && !s && cfg.rope_scaling.type != WGML_ROPE_SCALING_NONE)
        s = wgml__fail(ctx, WGML_ERROR_UNSUPPORTED, "%s: %s has both rope_freqs.weight and llama.rope.scaling", fn, path);
    used = n + (rf >= 0);
    if (!s && wgml_gguf_tensor_count(g) != used) {
        for (size_t i = 0; i < wgml_gguf_tensor_count(g) && !s; i++) {
            wgml_gguf_tensor t;
            wgml_gguf_tensor_info(g, i, &t);
            bool known = (int64_t)i == rf;
            for (size_t k = 0; k < n && !known; k++) known = index[k] == (int64_t)i;
            char q[WGML__QUOTE_MAX];
            if (!known)
                s = wgml__fail(ctx, WGML_ERROR_UNSUPPORTED, "%s: %s has tensor '%s', which a llama model of its metadata does "
                               "not have", fn, path, wgml__quote(q, sizeof q, t.name, strlen(t.name)));
        }
    }
    const float *factors = rf >= 0 && !s ? wgml_gguf_tensor_data(g, (size_t)rf) : NULL;
    for (uint32_t i = 0; factors && i < hd / 2 && !s; i++) {
        float f;
        memcpy(&f, (const uint8_t *)factors + 4 * i, sizeof f);
        if (!(f > 0) || !isfinite(f)) s = wgml__fail(ctx, WGML_ERROR_FORMAT, "%s: %s: rope_freqs.weight[%u] = %g", fn, path, i, f);
    }

    wgml_model *m = NULL;
    if (!s) {
        s = wgml__model_create(e, &cfg, WGML__PARAMS_NO_MATRICES, &m);
        if (s) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", wgml_last_error(ctx));
            s = wgml__fail(ctx, s, "%s: %s", fn, msg);
        }
    }
    float *buf = NULL, *tmp = NULL;
    size_t cap = 0;
    for (size_t i = 0; !s && i < n; i++) {
        const char *name;
        wgml_tensor *p = wgml_model_param(m, i, &name);
        wgml_gguf_tensor t;
        wgml_gguf_tensor_info(g, (size_t)index[i], &t);
        if (t.numel > cap) {
            free(buf);
            free(tmp);
            cap = (size_t)t.numel;
            buf = malloc(cap * sizeof *buf);
            tmp = malloc(cap * sizeof *tmp);
            if (!buf || !tmp) {
                s = wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", fn);
                break;
            }
        }
        const void *data = wgml_gguf_tensor_data(g, (size_t)index[i]);
        bool q = ends_with(name, "q_proj.weight"), k = ends_with(name, "k_proj.weight");
        uint32_t heads = q ? cfg.num_attention_heads : (cfg.num_key_value_heads ? cfg.num_key_value_heads : cfg.num_attention_heads);
        uint32_t rows = t.ndim == 2 ? (uint32_t)t.shape[1] : 1, cols = (uint32_t)t.shape[0];
        wgml_dtype kept = kept_dtype(t.type);
        bool keep = t.ndim == 2 && kept != WGML_F32 &&
                    (weights == WGML_WEIGHTS_KEEP || (weights != WGML_WEIGHTS_F32 && wgml__dtype_packed(kept)));
        if (keep) {   /* the blocks as the file has them (tmp has room: a block is smaller than its floats) */
            uint32_t block, bytes;
            wgml_ggml_type_block(t.type, &block, &bytes);
            size_t row_size = (size_t)cols / block * bytes;
            if (q || k) {
                unpermute(data, tmp, rows, row_size, heads);
                data = tmp;
            }
            wgml_packed_desc d = { .dtype = kept, .rows = rows, .cols = cols };
            s = wgml__model_put_packed(m, i, &d, (const void *const[3]){ data, NULL, NULL },
                                       (const size_t[3]){ row_size * rows, 0, 0 });
            continue;
        }
        wgml__ggml_to_f32(t.type, data, t.numel, buf);
        const float *src = buf;
        if (q || k) {
            unpermute(buf, tmp, rows, (size_t)cols * sizeof(float), heads);
            src = tmp;
        }
        if (t.ndim == 2) s = wgml__model_put_f32(m, i, name, src, rows, cols, weights);
        else s = wgml_tensor_write(p, 0, src, (size_t)t.numel * sizeof(float));
    }
    free(buf);
    free(tmp);
    if (!s && factors) {
        float *f = malloc(sizeof(float) * (hd / 2));
        if (!f) s = wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", fn);
        else {
            memcpy(f, factors, sizeof(float) * (hd / 2));
            s = wgml__model_set_rope_factors(m, f);
            free(f);
        }
    }
    if (!s) {
        wgml_gguf_tensor t;
        wgml_gguf_tensor_info(g, (size_t)index[0], &t);
        wgml__model_set_file_dtype(m, t.type == WGML_GGML_F32 ? WGML_F32 : t.type == WGML_GGML_BF16 ? WGML_BF16 : WGML_F16);
        s = wgml_context_flush(ctx);
    }
    free(index);
    wgml_gguf_close(g);
    if (s) {
        wgml_model_destroy(m);
        return s;
    }
    *out = m;
    return WGML_OK;
}
