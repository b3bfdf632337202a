/* config.json of the model families wgml runs (LlamaConfig's keys, and Mistral's, Qwen's,
   LFM2's and Gemma 3's additions), validated field by field.

   Every field is checked for its JSON type and range before it is stored, and the fields
   are checked against each other (heads divide evenly, token ids below vocab_size), so a
   model built from a config that parsed never meets a zero, a non-divisible head count or
   an absurd size. null counts as absent, as it does for Hugging Face's from_dict. */
#include "io.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* real configs are a few KiB; the cap bounds the parse to tens of MiB of memory */
#define CONFIG_MAX_BYTES ((size_t)1 << 20)

static const cJSON *get(const cJSON *obj, const char *key)
{
    const cJSON *it = obj ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    return it && !cJSON_IsNull(it) ? it : NULL;
}

/* An integer in [min, max]; absent: def, or an error when required. */
static wgml_status get_uint(const char *what, const cJSON *obj, const char *prefix, const char *key, bool required,
                            uint64_t def, uint64_t min, uint64_t max, uint64_t *out)
{
    const cJSON *it = get(obj, key);
    if (!it) {
        if (required) return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s%s is required", what, prefix, key);
        *out = def;
        return WGML_OK;
    }
    if (!cJSON_IsNumber(it))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s%s must be an integer, not %s", what, prefix, key,
                          wgml__json_type(it));
    double d = it->valuedouble;
    if (!(d >= (double)min && d <= (double)max) || (double)(uint64_t)d != d)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s%s must be an integer in [%llu, %llu], not %.17g", what, prefix,
                          key, (unsigned long long)min, (unsigned long long)max, d);
    *out = (uint64_t)d;
    return WGML_OK;
}

static wgml_status get_u32(const char *what, const cJSON *obj, const char *key, bool required, uint32_t def,
                           uint32_t min, uint32_t max, uint32_t *out)
{
    uint64_t v;
    wgml_status s = get_uint(what, obj, "", key, required, def, min, max, &v);
    if (!s) *out = (uint32_t)v;
    return s;
}

/* A finite number in the open or closed range; absent: def, or an error when required. */
static wgml_status get_real(const char *what, const cJSON *obj, const char *prefix, const char *key, bool required,
                            double def, double lo, bool lo_open, double hi, double *out)
{
    const cJSON *it = get(obj, key);
    if (!it) {
        if (required) return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s%s is required", what, prefix, key);
        *out = def;
        return WGML_OK;
    }
    if (!cJSON_IsNumber(it))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s%s must be a number, not %s", what, prefix, key,
                          wgml__json_type(it));
    double d = it->valuedouble;
    if (!isfinite(d) || (lo_open ? !(d > lo) : !(d >= lo)) || !(d <= hi))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s%s must be in %c%g, %g], not %.17g", what, prefix, key,
                          lo_open ? '(' : '[', lo, hi, d);
    *out = d;
    return WGML_OK;
}

static wgml_status get_bool(const char *what, const cJSON *obj, const char *key, bool def, bool *out)
{
    const cJSON *it = get(obj, key);
    if (!it) { *out = def; return WGML_OK; }
    if (!cJSON_IsBool(it))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s must be true or false, not %s", what, key, wgml__json_type(it));
    *out = cJSON_IsTrue(it);
    return WGML_OK;
}

/* A string of less than size bytes into buf; absent: "". *found tells whether it was there. */
static wgml_status get_string(const char *what, const cJSON *obj, const char *prefix, const char *key, char *buf,
                              size_t size, bool *found)
{
    const cJSON *it = get(obj, key);
    buf[0] = 0;
    if (found) *found = it != NULL;
    if (!it) return WGML_OK;
    if (!cJSON_IsString(it))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s%s must be a string, not %s", what, prefix, key,
                          wgml__json_type(it));
    size_t n = strlen(it->valuestring);
    if (n >= size) {
        char q[WGML__QUOTE_MAX];
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s%s '%s' is longer than %zu bytes", what, prefix, key,
                          wgml__quote(q, sizeof q, it->valuestring, n), size - 1);
    }
    memcpy(buf, it->valuestring, n + 1);
    return WGML_OK;
}

static wgml_status parse_rope_scaling(const char *what, const cJSON *rs, const char *prefix, wgml_model_config *c)
{
    if (!cJSON_IsObject(rs))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %.*s must be an object, not %s", what, (int)strlen(prefix) - 1, prefix,
                          wgml__json_type(rs));
    wgml_status s = wgml__json_unique_keys(what, prefix, rs);
    if (s) return s;
    char type[32];
    bool found;
    if ((s = get_string(what, rs, prefix, "rope_type", type, sizeof type, &found))) return s;
    if (!found && (s = get_string(what, rs, prefix, "type", type, sizeof type, &found))) return s;
    if (!found || strcmp(type, "default") == 0) {
        c->rope_scaling.type = WGML_ROPE_SCALING_NONE;
        return WGML_OK;
    }
    double f;
    if (strcmp(type, "linear") == 0) {
        c->rope_scaling.type = WGML_ROPE_SCALING_LINEAR;
        if ((s = get_real(what, rs, prefix, "factor", true, 1, 1, false, 1e6, &f))) return s;
        c->rope_scaling.factor = f;
        return WGML_OK;
    }
    if (strcmp(type, "llama3") == 0) {
        c->rope_scaling.type = WGML_ROPE_SCALING_LLAMA3;
        double lo, hi;
        uint64_t orig;
        if ((s = get_real(what, rs, prefix, "factor", true, 1, 1, false, 1e6, &f))) return s;
        if ((s = get_real(what, rs, prefix, "low_freq_factor", true, 1, 0, true, 1e6, &lo))) return s;
        if ((s = get_real(what, rs, prefix, "high_freq_factor", true, 1, 0, true, 1e6, &hi))) return s;
        if (!(hi > lo))
            return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %shigh_freq_factor %g must be greater than low_freq_factor %g", what,
                              prefix, hi, lo);
        if ((s = get_uint(what, rs, prefix, "original_max_position_embeddings", true, 0, 1, 1u << 24, &orig))) return s;
        c->rope_scaling.factor = f;
        c->rope_scaling.low_freq_factor = lo;
        c->rope_scaling.high_freq_factor = hi;
        c->rope_scaling.original_max_position_embeddings = (uint32_t)orig;
        return WGML_OK;
    }
    char q[WGML__QUOTE_MAX];
    return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %srope_type '%s' is not supported (default, linear, llama3)", what, prefix,
                      wgml__quote(q, sizeof q, type, strlen(type)));
}

static wgml_status parse_quantization(const char *what, const cJSON *q, const char *prefix, wgml_model_config *c)
{
    if (!cJSON_IsObject(q))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %.*s must be an object, not %s", what, (int)strlen(prefix) - 1, prefix,
                          wgml__json_type(q));
    wgml_status s = wgml__json_unique_keys(what, prefix, q);
    if (s) return s;
    char method[32], mode[32];
    bool found;
    if ((s = get_string(what, q, prefix, "quant_method", method, sizeof method, &found))) return s;
    if (found) {
        char qq[WGML__QUOTE_MAX];
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %squant_method '%s' is not supported (MLX affine only)", what, prefix,
                          wgml__quote(qq, sizeof qq, method, strlen(method)));
    }
    if ((s = get_string(what, q, prefix, "mode", mode, sizeof mode, &found))) return s;
    if (found && strcmp(mode, "affine") != 0) {
        char qq[WGML__QUOTE_MAX];
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %smode '%s' is not supported (affine only)", what, prefix,
                          wgml__quote(qq, sizeof qq, mode, strlen(mode)));
    }
    uint64_t bits, gs;
    if ((s = get_uint(what, q, prefix, "bits", true, 0, 2, 8, &bits))) return s;
    if (bits == 7)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %sbits must be 2, 3, 4, 5, 6 or 8, not 7", what, prefix);
    if ((s = get_uint(what, q, prefix, "group_size", true, 0, 8, 1024, &gs))) return s;
    if (gs & (gs - 1))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %sgroup_size %llu is not a power of two", what, prefix,
                          (unsigned long long)gs);
    c->quantization.bits = (uint32_t)bits;
    c->quantization.group_size = (uint32_t)gs;
    return WGML_OK;
}

/* layer_types: a list of L strings, each `marked` (its layer's bit set in bits) or `other`. */
static wgml_status parse_layer_types(const char *what, const cJSON *types, uint32_t L, const char *marked, const char *other,
                                     uint32_t bits[32])
{
    if (!cJSON_IsArray(types) || (uint32_t)cJSON_GetArraySize(types) != L)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: layer_types must be a list of num_hidden_layers (%u) strings", what, L);
    uint32_t l = 0;
    for (const cJSON *t = types->child; t; t = t->next, l++) {
        bool mark = cJSON_IsString(t) && !strcmp(t->valuestring, marked);
        if (!mark && !(cJSON_IsString(t) && !strcmp(t->valuestring, other)))
            return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: layer_types[%u] must be \"%s\" or \"%s\"", what, l, marked, other);
        if (mark) bits[l / 32] |= 1u << (l % 32);
    }
    return WGML_OK;
}

/* LFM2's own fields (model_type "lfm2"), as transformers' Lfm2Config reads them: the MLP's
   size (block_ff_dim or intermediate_size, then block_auto_adjust_ff_dim's 2/3,
   block_ffn_dim_multiplier and rounding up to block_multiple_of), norm_eps, tie_embedding,
   conv_L_cache, conv_bias (refused when true), and which layers convolve (layer_types, or
   the attention layers' indices full_attn_idxs; neither: all attention). Its attention
   layers normalise each head's q and k. Runs after the common fields. */
static wgml_status parse_lfm2(const char *what, const cJSON *root, wgml_model_config *c)
{
    wgml_status s;
    bool adjust = true;
    if (get(root, "block_ff_dim") &&
        (s = get_u32(what, root, "block_ff_dim", true, 0, 1, 1u << 20, &c->intermediate_size)))
        return s;
    if ((s = get_bool(what, root, "block_auto_adjust_ff_dim", true, &adjust))) return s;
    if (adjust) {
        uint64_t ff = (uint64_t)(2.0 * c->intermediate_size / 3);
        /* null (not absent: get() reads null as absent) skips the multiplier and the rounding */
        const cJSON *mult = cJSON_GetObjectItemCaseSensitive(root, "block_ffn_dim_multiplier");
        if (!mult || !cJSON_IsNull(mult)) {
            double k;
            uint32_t of;
            if ((s = get_real(what, root, "", "block_ffn_dim_multiplier", false, 1.0, 0, true, 64, &k))) return s;
            if ((s = get_u32(what, root, "block_multiple_of", false, 256, 1, 1u << 20, &of))) return s;
            ff = (uint64_t)(k * (double)ff);
            ff = (ff + of - 1) / of * of;
        }
        if (ff < 1 || ff > (1u << 20))
            return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: the MLP's size after block_auto_adjust_ff_dim is %llu, not in [1, "
                              "1048576]", what, (unsigned long long)ff);
        c->intermediate_size = (uint32_t)ff;
    }
    if ((s = get_real(what, root, "", "norm_eps", false, 1e-5, 0, true, 0.5, &c->rms_norm_eps))) return s;
    if (get(root, "tie_embedding") && (s = get_bool(what, root, "tie_embedding", true, &c->tie_word_embeddings))) return s;
    if (!get(root, "tie_embedding") && !get(root, "tie_word_embeddings")) c->tie_word_embeddings = true;
    if (!get(root, "rope_theta") && get(root, "theta") &&
        (s = get_real(what, root, "", "theta", true, 0, 0, true, 1e15, &c->rope_theta)))
        return s;
    if ((s = get_u32(what, root, "conv_L_cache", false, 3, 1, 16, &c->conv_kernel))) return s;
    bool bias = false;
    if ((s = get_bool(what, root, "conv_bias", false, &bias))) return s;
    if (bias) return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: conv_bias true is not supported (LFM2's convolutions without "
                                "biases only)", what);
    c->qk_norm = true;
    uint32_t L = c->num_hidden_layers;
    const cJSON *types = get(root, "layer_types"), *idx = get(root, "full_attn_idxs");
    if (types) {
        if ((s = parse_layer_types(what, types, L, "conv", "full_attention", c->conv_layers))) return s;
    } else if (idx) {
        if (!cJSON_IsArray(idx))
            return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: full_attn_idxs must be a list of layer indices", what);
        for (uint32_t l = 0; l < L; l++) c->conv_layers[l / 32] |= 1u << (l % 32);
        for (const cJSON *t = idx->child; t; t = t->next) {
            if (!cJSON_IsNumber(t) || !(t->valuedouble >= 0 && t->valuedouble < L) || t->valuedouble != (uint32_t)t->valuedouble)
                return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: full_attn_idxs must hold layer indices below %u", what, L);
            uint32_t l = (uint32_t)t->valuedouble;
            c->conv_layers[l / 32] &= ~(1u << (l % 32));
        }
    }
    return WGML_OK;
}

/* A rope_parameters entry of Gemma 3's per-layer-type form (transformers 5), prefix
   "rope_parameters.<type>.": its rope_theta into *theta (absent: def); rope_type and its
   factors into c->rope_scaling (full_attention), or (sliding_attention, scaling NULL)
   refused unless default. */
static wgml_status parse_layer_rope(const char *what, const cJSON *rp, const char *type, double def, double *theta,
                                    wgml_model_config *scaling)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "rope_parameters.%s.", type);
    const cJSON *it = get(rp, type);
    if (!it) { *theta = def; return WGML_OK; }
    if (!cJSON_IsObject(it))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %.*s must be an object, not %s", what, (int)strlen(prefix) - 1, prefix,
                          wgml__json_type(it));
    wgml_status s = get_real(what, it, prefix, "rope_theta", false, def, 0, true, 1e15, theta);
    if (s) return s;
    wgml_model_config local = { 0 };
    if ((s = parse_rope_scaling(what, it, prefix, scaling ? scaling : &local))) return s;
    if (!scaling && local.rope_scaling.type != WGML_ROPE_SCALING_NONE)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %srope_type must be default (wgml rotates the sliding layers "
                          "unscaled)", what, prefix);
    return WGML_OK;
}

/* Gemma 3's own fields (model_type "gemma3_text"), as transformers' Gemma3TextConfig reads
   them: query_pre_attn_scalar, which layers slide (layer_types, or sliding_window_pattern:
   every pattern-th layer attends globally), the sliding layers' RoPE base
   (rope_local_base_freq, or rope_parameters keyed by layer type), its defaults (tied
   embeddings, GELU's tanh form, a window of 4096, rope_theta 1e6); soft-capping and
   bidirectional attention are refused by name. Its attention normalises each head's q and
   k. Runs after the common fields. */
static wgml_status parse_gemma3(const char *what, const cJSON *root, wgml_model_config *c)
{
    wgml_status s;
    c->gemma = true;
    c->qk_norm = true;
    if (!get(root, "hidden_act") && !get(root, "hidden_activation")) c->hidden_act = WGML_HIDDEN_ACT_GELU_TANH;
    if (!get(root, "tie_word_embeddings")) c->tie_word_embeddings = true;
    static const char *const refused[] = { "attn_logit_softcapping", "final_logit_softcapping" };
    for (int i = 0; i < 2; i++)
        if (get(root, refused[i]))
            return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s is not supported (Gemma 3 models have it null)", what,
                              refused[i]);
    bool bidi = false;
    if ((s = get_bool(what, root, "use_bidirectional_attention", false, &bidi))) return s;
    if (bidi) return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: use_bidirectional_attention true is not supported (causal "
                                "attention only)", what);
    if ((s = get_real(what, root, "", "query_pre_attn_scalar", false, 256, 0, true, 1e9, &c->query_pre_attn_scalar))) return s;
    if (!get(root, "sliding_window") &&
        (s = get_u32(what, root, "sliding_window", false, 4096, 1, 1u << 24, &c->sliding_window)))
        return s;
    if (!c->sliding_window)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: sliding_window must be set for gemma3_text", what);
    uint32_t L = c->num_hidden_layers;
    const cJSON *types = get(root, "layer_types");
    if (types) {
        if ((s = parse_layer_types(what, types, L, "full_attention", "sliding_attention", c->full_attention_layers))) return s;
    } else {
        uint32_t pattern;
        if ((s = get_u32(what, root, "sliding_window_pattern", false, 6, 1, 1024, &pattern))) return s;
        for (uint32_t l = 0; l < L; l++)
            if ((l + 1) % pattern == 0) c->full_attention_layers[l / 32] |= 1u << (l % 32);
    }
    /* RoPE: rope_theta (the common code's, default 1e6 here) and rope_scaling for the
       global layers, rope_local_base_freq for the sliding ones; or rope_parameters keyed
       by layer type */
    const cJSON *rp = get(root, "rope_parameters");
    if (rp && (get(rp, "full_attention") || get(rp, "sliding_attention"))) {
        if (get(root, "rope_theta") || get(root, "rope_scaling") || get(root, "rope_local_base_freq"))
            return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: rope_parameters by layer type beside rope_theta, rope_scaling or "
                              "rope_local_base_freq: give one form", what);
        c->rope_scaling.type = WGML_ROPE_SCALING_NONE;
        if ((s = parse_layer_rope(what, rp, "full_attention", 1e6, &c->rope_theta, c))) return s;
        if ((s = parse_layer_rope(what, rp, "sliding_attention", 10000, &c->rope_local_theta, NULL))) return s;
        return WGML_OK;
    }
    return get_real(what, root, "", "rope_local_base_freq", false, 10000, 0, true, 1e15, &c->rope_local_theta);
}

static wgml_status parse_config(const char *what, const cJSON *root, wgml_model_config *c)
{
    if (!cJSON_IsObject(root))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: must be a JSON object, not %s", what, wgml__json_type(root));
    wgml_status s = wgml__json_unique_keys(what, "the config", root);
    if (s) return s;
    bool found;
    if ((s = get_string(what, root, "", "model_type", c->model_type, sizeof c->model_type, NULL))) return s;
    const cJSON *arch = get(root, "architectures");
    if (arch) {
        const cJSON *first = cJSON_IsArray(arch) ? arch->child : NULL;
        if (!cJSON_IsArray(arch) || (first && !cJSON_IsString(first)))
            return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: architectures must be an array of strings", what);
        if (first) {
            size_t n = strlen(first->valuestring);
            if (n >= sizeof c->architecture) {
                char q[WGML__QUOTE_MAX];
                return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: architectures[0] '%s' is longer than %zu bytes", what,
                                  wgml__quote(q, sizeof q, first->valuestring, n), sizeof c->architecture - 1);
            }
            memcpy(c->architecture, first->valuestring, n + 1);
        }
    }
    if ((s = get_string(what, root, "", "torch_dtype", c->torch_dtype, sizeof c->torch_dtype, &found))) return s;
    if (!found && (s = get_string(what, root, "", "dtype", c->torch_dtype, sizeof c->torch_dtype, NULL))) return s;
    if (!strcmp(c->model_type, "gemma3"))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: model_type gemma3 (Gemma3ForConditionalGeneration, a text model "
                          "inside a vision-language one) is not supported; its text-only form, gemma3_text "
                          "(Gemma3ForCausalLM), is", what);
    /* the MLP's activation: hidden_activation (Gemma's key) or hidden_act */
    char act[32];
    const char *act_key = get(root, "hidden_activation") ? "hidden_activation" : "hidden_act";
    if ((s = get_string(what, root, "", act_key, act, sizeof act, &found))) return s;
    if (found && !strcmp(act, "gelu_pytorch_tanh")) c->hidden_act = WGML_HIDDEN_ACT_GELU_TANH;
    else if (found && strcmp(act, "silu") != 0) {
        char q[WGML__QUOTE_MAX];
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s '%s' is not supported (silu or gelu_pytorch_tanh)", what, act_key,
                          wgml__quote(q, sizeof q, act, strlen(act)));
    }

    if ((s = get_u32(what, root, "vocab_size", true, 0, 1, 1u << 24, &c->vocab_size))) return s;
    if ((s = get_u32(what, root, "hidden_size", true, 0, 1, 65536, &c->hidden_size))) return s;
    bool lfm2 = !strcmp(c->model_type, "lfm2");
    if ((s = get_u32(what, root, "intermediate_size", !(lfm2 && get(root, "block_ff_dim")), 0, 1, 1u << 20,
                     &c->intermediate_size)))
        return s;
    if ((s = get_u32(what, root, "num_hidden_layers", true, 0, 1, 1024, &c->num_hidden_layers))) return s;
    if ((s = get_u32(what, root, "num_attention_heads", true, 0, 1, 1024, &c->num_attention_heads))) return s;
    uint32_t heads = c->num_attention_heads;
    if ((s = get_u32(what, root, "num_key_value_heads", false, heads, 1, heads, &c->num_key_value_heads))) return s;
    if (heads % c->num_key_value_heads != 0)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: num_attention_heads %u is not a multiple of num_key_value_heads %u",
                          what, heads, c->num_key_value_heads);
    if (get(root, "head_dim")) {
        if ((s = get_u32(what, root, "head_dim", true, 0, 2, 1024, &c->head_dim))) return s;
    } else {
        if (c->hidden_size % heads != 0)
            return wgml__fail(NULL, WGML_ERROR_FORMAT,
                              "%s: hidden_size %u is not a multiple of num_attention_heads %u (and head_dim is not given)",
                              what, c->hidden_size, heads);
        c->head_dim = c->hidden_size / heads;
        if (c->head_dim < 2 || c->head_dim > 1024)
            return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: head_dim = hidden_size / num_attention_heads = %u is not in [2, 1024]",
                              what, c->head_dim);
    }
    if (c->head_dim % 2 != 0)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: head_dim %u is odd (rotary embeddings need it even)", what, c->head_dim);
    if ((s = get_u32(what, root, "max_position_embeddings", false, 2048, 1, 1u << 24, &c->max_position_embeddings))) return s;
    if ((s = get_real(what, root, "", "rms_norm_eps", false, 1e-6, 0, true, 0.5, &c->rms_norm_eps))) return s;
    if ((s = get_bool(what, root, "tie_word_embeddings", false, &c->tie_word_embeddings))) return s;
    if ((s = get_bool(what, root, "attention_bias", false, &c->attention_bias))) return s;
    if ((s = get_bool(what, root, "mlp_bias", false, &c->mlp_bias))) return s;

    /* the families beside Llama: Qwen2's q, k and v biases, Qwen3's per-head q and k norms,
       and sliding-window attention (Mistral's sliding_window, null for none; Qwen's only
       with use_sliding_window, on every layer) */
    bool qwen = !strcmp(c->model_type, "qwen2") || !strcmp(c->model_type, "qwen3");
    c->qkv_bias = !strcmp(c->model_type, "qwen2");
    c->qk_norm = !strcmp(c->model_type, "qwen3");
    bool sliding = !qwen;
    if (qwen && (s = get_bool(what, root, "use_sliding_window", false, &sliding))) return s;
    const cJSON *sw = get(root, "sliding_window");
    if (sliding && sw && !cJSON_IsNull(sw) &&
        (s = get_u32(what, root, "sliding_window", true, 0, 1, 1u << 24, &c->sliding_window)))
        return s;
    if (qwen && sliding) {
        uint32_t below;   /* Qwen slides the layers from max_window_layers on */
        if ((s = get_u32(what, root, "max_window_layers", false, 0, 0, 1024, &below))) return s;
        if (below != 0)
            return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: use_sliding_window with max_window_layers %u: wgml slides every "
                              "layer's attention or none", what, below);
    }

    /* RoPE: rope_theta and rope_scaling at the top level, or (newer files) both inside
       rope_parameters; the top level wins. */
    const cJSON *rp = get(root, "rope_parameters");
    if (rp && !cJSON_IsObject(rp))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: rope_parameters must be an object, not %s", what, wgml__json_type(rp));
    bool gemma = !strcmp(c->model_type, "gemma3_text");
    double theta = lfm2 || gemma ? 1e6 : 10000;   /* the family's default */
    if (get(root, "rope_theta") || !rp) {
        if ((s = get_real(what, root, "", "rope_theta", false, theta, 0, true, 1e15, &c->rope_theta))) return s;
    } else if ((s = get_real(what, rp, "rope_parameters.", "rope_theta", false, theta, 0, true, 1e15, &c->rope_theta)))
        return s;
    const cJSON *rs = get(root, "rope_scaling");
    if (rs) {
        if ((s = parse_rope_scaling(what, rs, "rope_scaling.", c))) return s;
    } else if (rp) {
        if ((s = parse_rope_scaling(what, rp, "rope_parameters.", c))) return s;
    }

    /* token ids */
    uint64_t v;
    c->bos_token_id = -1;
    if (get(root, "bos_token_id")) {
        if ((s = get_uint(what, root, "", "bos_token_id", true, 0, 0, c->vocab_size - 1, &v))) return s;
        c->bos_token_id = (int64_t)v;
    }
    const cJSON *eos = get(root, "eos_token_id");
    if (eos && cJSON_IsArray(eos)) {
        char field[48];
        uint32_t i = 0;
        for (const cJSON *e = eos->child; e; e = e->next, i++) {
            if (i == WGML_MODEL_CONFIG_MAX_EOS)
                return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: eos_token_id lists more than %d ids", what,
                                  WGML_MODEL_CONFIG_MAX_EOS);
            snprintf(field, sizeof field, "eos_token_id[%u]", i);
            if (!cJSON_IsNumber(e))
                return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s must be an integer, not %s", what, field, wgml__json_type(e));
            double d = e->valuedouble;
            if (!(d >= 0 && d <= (double)(c->vocab_size - 1)) || (double)(uint64_t)d != d)
                return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s must be an integer in [0, %u], not %.17g", what, field,
                                  c->vocab_size - 1, d);
            c->eos_token_ids[i] = (uint32_t)d;
        }
        c->num_eos_token_ids = i;
    } else if (eos) {
        if ((s = get_uint(what, root, "", "eos_token_id", true, 0, 0, c->vocab_size - 1, &v))) return s;
        c->eos_token_ids[0] = (uint32_t)v;
        c->num_eos_token_ids = 1;
    }

    if (lfm2 && (s = parse_lfm2(what, root, c))) return s;
    if (gemma && (s = parse_gemma3(what, root, c))) return s;

    /* MLX quantization */
    const cJSON *q = get(root, "quantization");
    if (q) s = parse_quantization(what, q, "quantization.", c);
    else if ((q = get(root, "quantization_config"))) s = parse_quantization(what, q, "quantization_config.", c);
    if (s) return s;
    /* what every field was checked for above, once more on the whole: the parser and
       wgml_model_config_check can never disagree */
    if ((s = wgml_model_config_check(c))) return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s", what, wgml_last_error(NULL));
    return WGML_OK;
}

/* ---- the same rules on a struct --------------------------------------------------------- */

/* The bits of word w of a layer set (conv_layers, full_attention_layers) that name layers
   below L. */
static uint32_t layer_bits(uint32_t L, uint32_t w)
{
    return L >= 32 * (w + 1) ? 0xFFFFFFFFu : L > 32 * w ? (1u << (L - 32 * w)) - 1 : 0;
}

#define CHECK_RANGE(cond, ...) \
    do { if (!(cond)) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_model_config_check: " __VA_ARGS__); } while (0)

wgml_status wgml_model_config_check(const wgml_model_config *c)
{
    if (!c) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_model_config_check: cfg is NULL");
    CHECK_RANGE(memchr(c->model_type, 0, sizeof c->model_type) && memchr(c->torch_dtype, 0, sizeof c->torch_dtype) &&
                memchr(c->architecture, 0, sizeof c->architecture), "model_type, torch_dtype and architecture must be "
                "NUL-terminated");
    CHECK_RANGE(c->vocab_size >= 1 && c->vocab_size <= (1u << 24), "vocab_size must be in [1, 16777216], not %u", c->vocab_size);
    CHECK_RANGE(c->hidden_size >= 1 && c->hidden_size <= 65536, "hidden_size must be in [1, 65536], not %u", c->hidden_size);
    CHECK_RANGE(c->intermediate_size >= 1 && c->intermediate_size <= (1u << 20),
                "intermediate_size must be in [1, 1048576], not %u", c->intermediate_size);
    CHECK_RANGE(c->num_hidden_layers >= 1 && c->num_hidden_layers <= 1024, "num_hidden_layers must be in [1, 1024], not %u",
                c->num_hidden_layers);
    uint32_t heads = c->num_attention_heads, kv = c->num_key_value_heads ? c->num_key_value_heads : heads;
    CHECK_RANGE(heads >= 1 && heads <= 1024, "num_attention_heads must be in [1, 1024], not %u", heads);
    CHECK_RANGE(kv <= heads && heads % kv == 0, "num_attention_heads %u must be a multiple of num_key_value_heads %u", heads,
                kv);
    uint32_t hd = c->head_dim;
    if (!hd) {
        CHECK_RANGE(c->hidden_size % heads == 0, "hidden_size %u must be a multiple of num_attention_heads %u when head_dim "
                    "is 0", c->hidden_size, heads);
        hd = c->hidden_size / heads;
    }
    CHECK_RANGE(hd >= 2 && hd <= 1024 && hd % 2 == 0, "head_dim must be even and in [2, 1024], not %u", hd);
    CHECK_RANGE(c->max_position_embeddings <= (1u << 24), "max_position_embeddings must be in [1, 16777216] (0: the "
                "default), not %u", c->max_position_embeddings);
    CHECK_RANGE(c->sliding_window <= (1u << 24), "sliding_window must be in [0, 16777216], not %u", c->sliding_window);
    CHECK_RANGE(!(c->qkv_bias && c->qk_norm), "qkv_bias (Qwen2) and qk_norm (Qwen3) do not go together");
    CHECK_RANGE(c->conv_kernel <= 16, "conv_kernel must be in [0, 16], not %u", c->conv_kernel);
    for (uint32_t w = 0; w < 32; w++) {
        uint32_t below = layer_bits(c->num_hidden_layers, w);
        CHECK_RANGE(!(c->conv_layers[w] & ~below) && (c->conv_kernel || !c->conv_layers[w]),
                    "conv_layers may name only layers below num_hidden_layers, and only with conv_kernel");
    }
    CHECK_RANGE(c->hidden_act == WGML_HIDDEN_ACT_SILU || c->hidden_act == WGML_HIDDEN_ACT_GELU_TANH,
                "hidden_act %d is not a wgml_hidden_act", (int)c->hidden_act);
    CHECK_RANGE(!(c->gemma && c->conv_kernel), "gemma and conv_kernel (LFM2) do not go together");
    for (uint32_t w = 0; w < 32; w++) {
        uint32_t below = layer_bits(c->num_hidden_layers, w);
        CHECK_RANGE(!(c->full_attention_layers[w] & ~below) && ((c->gemma && c->sliding_window) || !c->full_attention_layers[w]),
                    "full_attention_layers may name only layers below num_hidden_layers, and only with gemma and "
                    "sliding_window");
    }
    CHECK_RANGE(isfinite(c->rope_local_theta) && c->rope_local_theta >= 0 && c->rope_local_theta <= 1e15 &&
                (c->gemma || c->rope_local_theta == 0), "rope_local_theta must be in [0, 1e15], and 0 without gemma, not %g",
                c->rope_local_theta);
    CHECK_RANGE(isfinite(c->query_pre_attn_scalar) && c->query_pre_attn_scalar >= 0 && c->query_pre_attn_scalar <= 1e9 &&
                (c->gemma || c->query_pre_attn_scalar == 0),
                "query_pre_attn_scalar must be in [0, 1e9], and 0 without gemma, not %g", c->query_pre_attn_scalar);
    CHECK_RANGE(isfinite(c->rms_norm_eps) && c->rms_norm_eps > 0 && c->rms_norm_eps <= 0.5,
                "rms_norm_eps must be in (0, 0.5], not %g", c->rms_norm_eps);
    CHECK_RANGE(isfinite(c->rope_theta) && c->rope_theta >= 0 && c->rope_theta <= 1e15,
                "rope_theta must be in (0, 1e15] (0: the default), not %g", c->rope_theta);
    switch (c->rope_scaling.type) {
    case WGML_ROPE_SCALING_NONE: break;
    case WGML_ROPE_SCALING_LLAMA3:
        CHECK_RANGE(isfinite(c->rope_scaling.low_freq_factor) && c->rope_scaling.low_freq_factor > 0 &&
                    isfinite(c->rope_scaling.high_freq_factor) && c->rope_scaling.high_freq_factor <= 1e6 &&
                    c->rope_scaling.high_freq_factor > c->rope_scaling.low_freq_factor,
                    "rope_scaling: low_freq_factor must be > 0 and high_freq_factor above it, at most 1e6");
        CHECK_RANGE(c->rope_scaling.original_max_position_embeddings >= 1 &&
                    c->rope_scaling.original_max_position_embeddings <= (1u << 24),
                    "rope_scaling.original_max_position_embeddings must be in [1, 16777216], not %u",
                    c->rope_scaling.original_max_position_embeddings);
        /* fall through */
    case WGML_ROPE_SCALING_LINEAR:
        CHECK_RANGE(isfinite(c->rope_scaling.factor) && c->rope_scaling.factor >= 1 && c->rope_scaling.factor <= 1e6,
                    "rope_scaling.factor must be in [1, 1e6], not %g", c->rope_scaling.factor);
        break;
    default: CHECK_RANGE(false, "rope_scaling.type %d is not a wgml_rope_scaling_type", (int)c->rope_scaling.type);
    }
    CHECK_RANGE(c->bos_token_id >= -1 && c->bos_token_id < (int64_t)c->vocab_size,
                "bos_token_id must be -1 (none) or below vocab_size %u, not %lld", c->vocab_size, (long long)c->bos_token_id);
    CHECK_RANGE(c->num_eos_token_ids <= WGML_MODEL_CONFIG_MAX_EOS, "num_eos_token_ids must be at most %d, not %u",
                WGML_MODEL_CONFIG_MAX_EOS, c->num_eos_token_ids);
    for (uint32_t i = 0; i < c->num_eos_token_ids; i++)
        CHECK_RANGE(c->eos_token_ids[i] < c->vocab_size, "eos_token_ids[%u] = %u is not below vocab_size %u", i,
                    c->eos_token_ids[i], c->vocab_size);
    uint32_t bits = c->quantization.bits, gs = c->quantization.group_size;
    CHECK_RANGE(bits == 0 || ((bits >= 2 && bits <= 8 && bits != 7) && gs >= 8 && gs <= 1024 && (gs & (gs - 1)) == 0),
                "quantization: bits must be 0 (none), 2 - 6 or 8, with group_size a power of two in [8, 1024]");
    return WGML_OK;
}

wgml_status wgml_model_config_parse(const char *json, size_t len, const char *name, wgml_model_config *out)
{
    if (!out || (!json && len))
        return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_model_config_parse: json and out must not be NULL");
    memset(out, 0, sizeof *out);
    const char *what = name ? name : "config.json";
    if (len > CONFIG_MAX_BYTES)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %zu bytes, more than the %zu a config may have", what, len,
                          CONFIG_MAX_BYTES);
    cJSON *root;
    wgml_status s = wgml__json_parse(what, json ? json : "", len, 0, &root);
    if (s) return s;
    s = parse_config(what, root, out);
    cJSON_Delete(root);
    if (s) memset(out, 0, sizeof *out);
    return s;
}

wgml_status wgml_model_config_load(const char *path, wgml_model_config *out)
{
    if (!path || !out)
        return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_model_config_load: path and out must not be NULL");
    char *json;
    size_t len;
    wgml_status s = wgml__read_file(path, true, CONFIG_MAX_BYTES, &json, &len);
    if (s) {
        memset(out, 0, sizeof *out);
        return s;
    }
    s = wgml_model_config_parse(json, len, path, out);
    free(json);
    return s;
}
