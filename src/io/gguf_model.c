/* What a GGUF file of a llama-architecture model says about the model and its tokenizer:
   the configuration from its llama.* and tokenizer.ggml.* metadata, and a byte-level BPE
   tokenizer (tokenizer.ggml.model "gpt2") built from its token, merge and token-type
   arrays, with the pre-tokenizer its tokenizer.ggml.pre names. */
#include "io.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The pair named key: its index and value; false when absent. */
static bool kv(const wgml_gguf *g, const char *key, wgml_gguf_value *v, int64_t *index)
{
    int64_t i = wgml_gguf_kv_find(g, key);
    if (index) *index = i;
    return i >= 0 && wgml_gguf_kv(g, (size_t)i, NULL, v) == WGML_OK;
}

static bool is_int(wgml_gguf_type t)
{
    return t == WGML_GGUF_U8 || t == WGML_GGUF_I8 || t == WGML_GGUF_U16 || t == WGML_GGUF_I16 || t == WGML_GGUF_U32 ||
           t == WGML_GGUF_I32 || t == WGML_GGUF_U64 || t == WGML_GGUF_I64;
}

/* An integer pair in [lo, hi]; absent: *out = dflt, or an error when required. */
static wgml_status get_uint(const wgml_gguf *g, const char *what, const char *key, bool required, uint64_t dflt, uint64_t lo,
                            uint64_t hi, uint64_t *out)
{
    wgml_gguf_value v;
    if (!kv(g, key, &v, NULL)) {
        if (required) return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: metadata %s is missing", what, key);
        *out = dflt;
        return WGML_OK;
    }
    bool is_signed = v.type == WGML_GGUF_I8 || v.type == WGML_GGUF_I16 || v.type == WGML_GGUF_I32 || v.type == WGML_GGUF_I64;
    if (!is_int(v.type) || (is_signed && v.i < 0))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: metadata %s must be a non-negative integer", what, key);
    if (v.u < lo || v.u > hi)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: metadata %s is %llu, outside [%llu, %llu]", what, key,
                          (unsigned long long)v.u, (unsigned long long)lo, (unsigned long long)hi);
    *out = v.u;
    return WGML_OK;
}

static wgml_status get_float(const wgml_gguf *g, const char *what, const char *key, double dflt, double *out)
{
    wgml_gguf_value v;
    if (!kv(g, key, &v, NULL)) {
        *out = dflt;
        return WGML_OK;
    }
    if (v.type != WGML_GGUF_F32 && v.type != WGML_GGUF_F64 && !is_int(v.type))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: metadata %s must be a number", what, key);
    if (!isfinite(v.f)) return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: metadata %s is not finite", what, key);
    *out = v.f;
    return WGML_OK;
}

/* A string pair, quoted into buf for messages; "" when absent. */
static const char *get_string(const wgml_gguf *g, const char *key, char *buf, size_t size, bool *present)
{
    wgml_gguf_value v;
    *present = kv(g, key, &v, NULL) && v.type == WGML_GGUF_STRING;
    buf[0] = 0;
    if (*present && v.len < size && !memchr(v.str, 0, (size_t)v.len)) {
        memcpy(buf, v.str, (size_t)v.len);
        buf[v.len] = 0;
    } else if (*present) {
        wgml__quote(buf, size, v.str, (size_t)(v.len < 4096 ? v.len : 4096));
    }
    return buf;
}

wgml_status wgml_model_config_from_gguf(const wgml_gguf *g, const char *what, wgml_model_config *out)
{
    if (out) memset(out, 0, sizeof *out);
    if (!g || !out) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_model_config_from_gguf: g and out must not be NULL");
    if (!what) what = "gguf";
    char arch[64], q[WGML__QUOTE_MAX];
    bool present;
    get_string(g, "general.architecture", arch, sizeof arch, &present);
    if (!present) return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: metadata general.architecture is missing", what);
    if (strcmp(arch, "llama") != 0)
        return wgml__fail(NULL, WGML_ERROR_UNSUPPORTED, "%s: general.architecture is '%s'; wgml reads llama-architecture GGUF "
                          "files", what, wgml__quote(q, sizeof q, arch, strlen(arch)));
    wgml_model_config c = { .bos_token_id = -1 };
    snprintf(c.model_type, sizeof c.model_type, "llama");
    snprintf(c.architecture, sizeof c.architecture, "LlamaForCausalLM");
    uint64_t D, F, L, H, Hk, ctx, vocab = 0, key_len, rope_dims;
    wgml_status s;
    if ((s = get_uint(g, what, "llama.embedding_length", true, 0, 1, 65536, &D)) ||
        (s = get_uint(g, what, "llama.feed_forward_length", true, 0, 1, 1u << 20, &F)) ||
        (s = get_uint(g, what, "llama.block_count", true, 0, 1, 1024, &L)) ||
        (s = get_uint(g, what, "llama.attention.head_count", true, 0, 1, 1024, &H)) ||
        (s = get_uint(g, what, "llama.attention.head_count_kv", false, H, 1, 1024, &Hk)) ||
        (s = get_uint(g, what, "llama.context_length", false, 2048, 1, 1u << 24, &ctx)) ||
        (s = get_uint(g, what, "llama.attention.key_length", false, H ? D / H : 0, 2, 1024, &key_len)) ||
        (s = get_uint(g, what, "llama.rope.dimension_count", false, key_len, 2, 1024, &rope_dims)))
        return s;
    uint64_t value_len;
    if ((s = get_uint(g, what, "llama.attention.value_length", false, key_len, 2, 1024, &value_len))) return s;
    if (value_len != key_len || rope_dims != key_len)
        return wgml__fail(NULL, WGML_ERROR_UNSUPPORTED, "%s: heads of %llu key, %llu value and %llu rotary dimensions; wgml "
                          "runs heads whose keys and values have one size, rotated whole", what, (unsigned long long)key_len,
                          (unsigned long long)value_len, (unsigned long long)rope_dims);
    /* the vocabulary: llama.vocab_size, else the embedding's rows, else the token list */
    int64_t emb = wgml_gguf_tensor_find(g, "token_embd.weight");
    wgml_gguf_tensor et;
    if (emb >= 0 && wgml_gguf_tensor_info(g, (size_t)emb, &et) == WGML_OK && et.ndim == 2) vocab = et.shape[1];
    if ((s = get_uint(g, what, "llama.vocab_size", false, vocab, 1, 1u << 24, &vocab))) return s;
    wgml_gguf_value v;
    if (!vocab && kv(g, "tokenizer.ggml.tokens", &v, NULL) && v.type == WGML_GGUF_ARRAY) vocab = v.count;
    c.vocab_size = (uint32_t)vocab;
    c.hidden_size = (uint32_t)D;
    c.intermediate_size = (uint32_t)F;
    c.num_hidden_layers = (uint32_t)L;
    c.num_attention_heads = (uint32_t)H;
    c.num_key_value_heads = (uint32_t)Hk;
    c.head_dim = (uint32_t)key_len;
    c.max_position_embeddings = (uint32_t)ctx;
    if ((s = get_float(g, what, "llama.rope.freq_base", 10000, &c.rope_theta)) ||
        (s = get_float(g, what, "llama.attention.layer_norm_rms_epsilon", 1e-5, &c.rms_norm_eps)))
        return s;
    char scaling[32];
    get_string(g, "llama.rope.scaling.type", scaling, sizeof scaling, &present);
    if (present && strcmp(scaling, "none") != 0) {
        if (strcmp(scaling, "linear") != 0)
            return wgml__fail(NULL, WGML_ERROR_UNSUPPORTED, "%s: llama.rope.scaling.type '%s' (wgml: none, linear, and "
                              "rope_freqs.weight factors)", what, wgml__quote(q, sizeof q, scaling, strlen(scaling)));
        c.rope_scaling.type = WGML_ROPE_SCALING_LINEAR;
        if ((s = get_float(g, what, "llama.rope.scaling.factor", 1, &c.rope_scaling.factor))) return s;
    }
    c.tie_word_embeddings = wgml_gguf_tensor_find(g, "output.weight") < 0;
    uint64_t id;
    if ((s = get_uint(g, what, "tokenizer.ggml.bos_token_id", false, UINT64_MAX, 0, UINT64_MAX, &id))) return s;
    if (id != UINT64_MAX) c.bos_token_id = (int64_t)(id < vocab ? id : UINT32_MAX);
    const char *eos_keys[] = { "tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id" };
    for (int k = 0; k < 2; k++) {
        if ((s = get_uint(g, what, eos_keys[k], false, UINT64_MAX, 0, UINT64_MAX, &id))) return s;
        if (id == UINT64_MAX || (c.num_eos_token_ids && c.eos_token_ids[0] == id)) continue;
        c.eos_token_ids[c.num_eos_token_ids++] = id < vocab ? (uint32_t)id : UINT32_MAX;
    }
    s = wgml_model_config_check(&c);
    if (s) return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s", what, wgml_last_error(NULL));
    *out = c;
    return WGML_OK;
}

bool wgml__gguf_tensor_name(const char *name, char *out, size_t size)
{
    static const char *const pairs[][2] = {
        { "input_layernorm.weight", "attn_norm.weight" },   { "self_attn.q_proj.weight", "attn_q.weight" },
        { "self_attn.k_proj.weight", "attn_k.weight" },     { "self_attn.v_proj.weight", "attn_v.weight" },
        { "self_attn.o_proj.weight", "attn_output.weight" }, { "post_attention_layernorm.weight", "ffn_norm.weight" },
        { "mlp.gate_proj.weight", "ffn_gate.weight" },      { "mlp.up_proj.weight", "ffn_up.weight" },
        { "mlp.down_proj.weight", "ffn_down.weight" },
    };
    if (!strcmp(name, "model.embed_tokens.weight")) return snprintf(out, size, "token_embd.weight") < (int)size;
    if (!strcmp(name, "model.norm.weight")) return snprintf(out, size, "output_norm.weight") < (int)size;
    if (!strcmp(name, "lm_head.weight")) return snprintf(out, size, "output.weight") < (int)size;
    unsigned layer;
    int used = 0;
    if (sscanf(name, "model.layers.%u.%n", &layer, &used) != 1 || !used) return false;
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        if (!strcmp(name + used, pairs[i][0])) return snprintf(out, size, "blk.%u.%s", layer, pairs[i][1]) < (int)size;
    return false;
}

/* ---- the tokenizer ------------------------------------------------------------------------ */

/* tokenizer.ggml.pre names (llama.cpp's) of the pre-tokenizers wgml implements, as the
   tokenizer.json steps that reproduce them. */
static const char *const gpt2_bytelevel = "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true}";
#define SPLIT(rx) "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"" rx "\"},\"behavior\":" \
                  "\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true," \
                  "\"use_regex\":false}]}"
static const struct { const char *name, *json; bool ignore_merges; } pre_types[] = {
    { "default", NULL, false },
    { "gpt2", NULL, false },
    { "gpt-2", NULL, false },
    { "smollm", "{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Digits\",\"individual_digits\":true},"
                "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,\"use_regex\":true}]}", false },
    { "llama-bpe", SPLIT("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}"
                         "\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+"), true },
    { "qwen2", SPLIT("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}| ?[^\\\\s\\\\p{L}"
                     "\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+"), false },
};

/* Appends s[0..n) to the JSON text as a string literal. */
static bool json_str(char **p, size_t *n, size_t *cap, const char *s, size_t len)
{
    if (*cap - *n < 6 * len + 3) {
        size_t c = (*cap + 6 * len + 3) * 2;
        char *q = realloc(*p, c);
        if (!q) return false;
        *p = q;
        *cap = c;
    }
    char *o = *p + *n;
    *o++ = '"';
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') {
            *o++ = '\\';
            *o++ = (char)ch;
        } else if (ch < 0x20) {
            o += snprintf(o, 7, "\\u%04x", ch);
        } else {
            *o++ = (char)ch;
        }
    }
    *o++ = '"';
    *n = (size_t)(o - *p);
    return true;
}

static bool json_raw(char **p, size_t *n, size_t *cap, const char *s)
{
    size_t len = strlen(s);
    if (*cap - *n < len + 1) {
        size_t c = (*cap + len + 1) * 2;
        char *q = realloc(*p, c);
        if (!q) return false;
        *p = q;
        *cap = c;
    }
    memcpy(*p + *n, s, len + 1);
    *n += len;
    return true;
}

/* tokenizer.ggml.add_bos_token / add_eos_token as the post_processor Hugging Face's file
   would hold, appended to the tokenizer.json text j (the parser checks the ids). */
static wgml_status template_json(const wgml_gguf *g, const char *what, char **j, size_t *n, size_t *cap, bool *ok)
{
    char tmpl[512] = "";
    for (int side = 0; side < 2; side++) {
        wgml_gguf_value flag;
        uint64_t id;
        const char *flag_key = side ? "tokenizer.ggml.add_eos_token" : "tokenizer.ggml.add_bos_token";
        if (!kv(g, flag_key, &flag, NULL) || flag.type != WGML_GGUF_BOOL || !flag.u) continue;
        wgml_status s = get_uint(g, what, side ? "tokenizer.ggml.eos_token_id" : "tokenizer.ggml.bos_token_id", true, 0, 0,
                                 UINT32_MAX, &id);
        if (s) return s;
        size_t l = strlen(tmpl);
        snprintf(tmpl + l, sizeof tmpl - l, "%s\"%s\":{\"id\":\"%s\",\"ids\":[%llu]}", l ? "," : "", side ? "E" : "B",
                 side ? "E" : "B", (unsigned long long)id);
    }
    if (*ok && tmpl[0]) {
        bool bos = strstr(tmpl, "\"B\"") != NULL, eos = strstr(tmpl, "\"E\"") != NULL;
        char post[768];
        snprintf(post, sizeof post, ",\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[%s{\"Sequence\":"
                 "{\"id\":\"A\"}}%s],\"special_tokens\":{%s}}", bos ? "{\"SpecialToken\":{\"id\":\"B\"}}," : "",
                 eos ? ",{\"SpecialToken\":{\"id\":\"E\"}}" : "", tmpl);
        *ok = json_raw(j, n, cap, post);
    }
    return WGML_OK;
}

/* A merge of two vocab tokens, ranked by the merged token's score (SentencePiece BPE merges
   the pair whose result scores highest). */
typedef struct spm_merge { float score; uint32_t merged, left, right; } spm_merge;

static int merge_order(const void *a, const void *b)
{
    const spm_merge *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    if (x->merged != y->merged) return x->merged < y->merged ? -1 : 1;
    if (x->left != y->left) return x->left < y->left ? -1 : 1;
    return x->right < y->right ? -1 : x->right > y->right;
}

/* tokenizer.ggml.model "llama": SentencePiece BPE (Llama 2, Mistral, TinyLlama files). The
   tokens spell spaces U+2581 and carry scores; BPE merges are what Hugging Face's
   conversion derives from them: each pair of tokens that concatenates to a normal token,
   ranked by that token's score. Control and user-defined tokens are added tokens, byte
   tokens (<0xNN>) the fallback, the unknown token unk_token; add_space_prefix (default
   true) prepends the space the decoder strips. */
static wgml_status spm_tokenizer(const wgml_gguf *g, const char *what, wgml_tokenizer **out)
{
    wgml_gguf_value tv, sv, ty;
    int64_t ti, si, yi;
    if (!kv(g, "tokenizer.ggml.tokens", &tv, &ti) || tv.type != WGML_GGUF_ARRAY || tv.elem_type != WGML_GGUF_STRING)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: tokenizer.ggml.tokens must be an array of strings", what);
    if (!kv(g, "tokenizer.ggml.scores", &sv, &si) || sv.type != WGML_GGUF_ARRAY || sv.elem_type != WGML_GGUF_F32 ||
        sv.count != tv.count)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: tokenizer.ggml.scores must be an array of f32, one per token", what);
    if (!kv(g, "tokenizer.ggml.token_type", &ty, &yi) || ty.type != WGML_GGUF_ARRAY || !is_int(ty.elem_type) ||
        ty.count != tv.count)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: tokenizer.ggml.token_type must be an array of integers, one per token",
                          what);
    if (tv.count > (1u << 24)) return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: more than 2^24 tokens", what);
    size_t V = (size_t)tv.count;
    wgml_gguf_value flag;
    bool prefix = !(kv(g, "tokenizer.ggml.add_space_prefix", &flag, NULL) && flag.type == WGML_GGUF_BOOL && !flag.u);
    wgml__strmap map;
    int32_t *type = malloc(sizeof *type * (V ? V : 1));
    if (!type || !wgml__strmap_init(&map, V)) {
        free(type);
        return wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", what);
    }
    bool bytes = false;
    int64_t unk = -1;
    for (size_t i = 0; i < V; i++) {
        wgml_gguf_value t, y;
        wgml_gguf_array_item(g, (size_t)ti, i, &t);
        wgml_gguf_array_item(g, (size_t)yi, i, &y);
        type[i] = (int32_t)y.i;
        bytes |= y.i == 6;
        if (y.i == 2 && unk < 0) unk = (int64_t)i;
        if (y.i != 3 && y.i != 4 && wgml__strmap_put(&map, t.str, (size_t)t.len, (uint32_t)i, NULL) < 0) {
            wgml__strmap_free(&map);
            free(type);
            return wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", what);
        }
    }
    /* the merges: every split of a normal token into two vocab tokens */
    size_t nm = 0, mcap = 1024;
    spm_merge *merges = malloc(sizeof *merges * mcap);
    bool ok = merges != NULL;
    for (size_t i = 0; i < V && ok; i++) {
        if (type[i] != 1) continue;
        wgml_gguf_value t, sc;
        wgml_gguf_array_item(g, (size_t)ti, i, &t);
        wgml_gguf_array_item(g, (size_t)si, i, &sc);
        for (size_t cut = 1; cut < t.len && ok; cut++) {
            if (((unsigned char)t.str[cut] & 0xC0) == 0x80) continue;   /* inside a character */
            uint32_t l, r;
            if (!wgml__strmap_get(&map, t.str, cut, &l) || !wgml__strmap_get(&map, t.str + cut, (size_t)t.len - cut, &r)) continue;
            if (type[l] != 1 || type[r] != 1) continue;   /* pieces of normal tokens only */
            if (nm == mcap) {
                spm_merge *m2 = realloc(merges, sizeof *merges * (mcap *= 2));
                if (!m2) { ok = false; break; }
                merges = m2;
            }
            merges[nm++] = (spm_merge){ (float)sc.f, (uint32_t)i, l, r };
        }
    }
    if (ok) qsort(merges, nm, sizeof *merges, merge_order);
    /* tokenizer.json text */
    size_t n = 0, cap = 1 << 16;
    char *j = ok ? malloc(cap) : NULL;
    ok = j && json_raw(&j, &n, &cap, "{\"added_tokens\":[");
    bool first = true;
    for (size_t i = 0; i < V && ok; i++) {
        if (type[i] != 3 && type[i] != 4) continue;
        wgml_gguf_value t;
        wgml_gguf_array_item(g, (size_t)ti, i, &t);
        char num[64];
        snprintf(num, sizeof num, "%s{\"id\":%zu,\"content\":", first ? "" : ",", i);
        first = false;
        ok = json_raw(&j, &n, &cap, num) && json_str(&j, &n, &cap, t.str, (size_t)t.len) &&
             json_raw(&j, &n, &cap, type[i] == 3 ? ",\"special\":true}" : ",\"special\":false}");
    }
    char head[256];
    snprintf(head, sizeof head, "],\"model\":{\"type\":\"BPE\",\"byte_fallback\":%s,\"fuse_unk\":true,\"unk_token\":",
             bytes ? "true" : "false");
    ok = ok && json_raw(&j, &n, &cap, head);
    if (ok && unk >= 0) {
        wgml_gguf_value t;
        wgml_gguf_array_item(g, (size_t)ti, (uint64_t)unk, &t);
        ok = json_str(&j, &n, &cap, t.str, (size_t)t.len);
    } else if (ok)
        ok = json_raw(&j, &n, &cap, "null");
    ok = ok && json_raw(&j, &n, &cap, ",\"vocab\":{");
    first = true;
    for (size_t i = 0; i < V && ok; i++) {
        if (type[i] == 3 || type[i] == 4) continue;
        wgml_gguf_value t;
        wgml_gguf_array_item(g, (size_t)ti, i, &t);
        char num[32];
        snprintf(num, sizeof num, ":%zu", i);
        ok = (first || json_raw(&j, &n, &cap, ",")) && json_str(&j, &n, &cap, t.str, (size_t)t.len) && json_raw(&j, &n, &cap, num);
        first = false;
    }
    ok = ok && json_raw(&j, &n, &cap, "},\"merges\":[");
    for (size_t k = 0; k < nm && ok; k++) {
        wgml_gguf_value a, b;
        wgml_gguf_array_item(g, (size_t)ti, merges[k].left, &a);
        wgml_gguf_array_item(g, (size_t)ti, merges[k].right, &b);
        ok = json_raw(&j, &n, &cap, k ? ",[" : "[") && json_str(&j, &n, &cap, a.str, (size_t)a.len) && json_raw(&j, &n, &cap, ",") &&
             json_str(&j, &n, &cap, b.str, (size_t)b.len) && json_raw(&j, &n, &cap, "]");
    }
    ok = ok && json_raw(&j, &n, &cap, "]},\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[") &&
         json_raw(&j, &n, &cap, prefix ? "{\"type\":\"Prepend\",\"prepend\":\"\\u2581\"}," : "") &&
         json_raw(&j, &n, &cap, "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\\u2581\"}]},"
                  "\"pre_tokenizer\":null,\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\","
                  "\"pattern\":{\"String\":\"\\u2581\"},\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"}") &&
         json_raw(&j, &n, &cap, prefix ? ",{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]}" : "]}");
    free(merges);
    free(type);
    wgml__strmap_free(&map);
    wgml_status s = ok ? template_json(g, what, &j, &n, &cap, &ok) : WGML_OK;
    ok = ok && json_raw(&j, &n, &cap, "}");
    if (s || !ok) {
        free(j);
        return s ? s : wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", what);
    }
    char name[300];
    snprintf(name, sizeof name, "%s (tokenizer.ggml.*)", what);
    s = wgml_tokenizer_parse(j, n, name, out);
    free(j);
    return s;
}

wgml_status wgml_tokenizer_from_gguf(const wgml_gguf *g, const char *what, wgml_tokenizer **out)
{
    if (out) *out = NULL;
    if (!g || !out) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_tokenizer_from_gguf: g and out must not be NULL");
    if (!what) what = "gguf";
    char model[32], pre[64], q[WGML__QUOTE_MAX];
    bool present;
    get_string(g, "tokenizer.ggml.model", model, sizeof model, &present);
    if (!present) return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: metadata tokenizer.ggml.model is missing: no tokenizer", what);
    bool spm = strcmp(model, "llama") == 0;
    if (strcmp(model, "gpt2") != 0 && !spm)
        return wgml__fail(NULL, WGML_ERROR_UNSUPPORTED, "%s: tokenizer.ggml.model '%s'; wgml reads byte-level BPE (\"gpt2\") "
                          "and SentencePiece BPE (\"llama\") tokenizers", what, wgml__quote(q, sizeof q, model, strlen(model)));
    if (spm) return spm_tokenizer(g, what, out);
    get_string(g, "tokenizer.ggml.pre", pre, sizeof pre, &present);
    int kind = -1;
    for (size_t i = 0; i < sizeof pre_types / sizeof pre_types[0]; i++)
        if (!strcmp(present ? pre : "default", pre_types[i].name)) kind = (int)i;
    if (kind < 0)
        return wgml__fail(NULL, WGML_ERROR_UNSUPPORTED, "%s: tokenizer.ggml.pre '%s' (wgml: default, gpt2, smollm, llama-bpe, "
                          "qwen2)", what, wgml__quote(q, sizeof q, pre, strlen(pre)));
    wgml_gguf_value tv, mv, ty;
    int64_t ti, mi, yi;
    if (!kv(g, "tokenizer.ggml.tokens", &tv, &ti) || tv.type != WGML_GGUF_ARRAY || tv.elem_type != WGML_GGUF_STRING)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: tokenizer.ggml.tokens must be an array of strings", what);
    if (!kv(g, "tokenizer.ggml.merges", &mv, &mi) || mv.type != WGML_GGUF_ARRAY || mv.elem_type != WGML_GGUF_STRING)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: tokenizer.ggml.merges must be an array of strings", what);
    bool types = kv(g, "tokenizer.ggml.token_type", &ty, &yi);
    if (types && (ty.type != WGML_GGUF_ARRAY || !is_int(ty.elem_type) || ty.count != tv.count))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: tokenizer.ggml.token_type must be an array of integers, one per token",
                          what);
    /* tokenizer.json text: control and user-defined tokens (types 3, 4) are added tokens,
       the rest the BPE vocab; the parser validates the whole of it */
    size_t n = 0, cap = 1 << 16;
    char *j = malloc(cap);
    bool ok = j && json_raw(&j, &n, &cap, "{\"added_tokens\":[");
    bool first = true;
    for (int pass = 0; pass < 2 && ok; pass++) {
        if (pass == 1) ok = json_raw(&j, &n, &cap, "],\"model\":{\"type\":\"BPE\",\"vocab\":{");
        first = true;
        for (uint64_t i = 0; i < tv.count && ok; i++) {
            wgml_gguf_value t, y = { 0 };
            wgml_gguf_array_item(g, (size_t)ti, i, &t);
            if (types) wgml_gguf_array_item(g, (size_t)yi, i, &y);
            bool added = y.i == 3 || y.i == 4;
            if (added != (pass == 0)) continue;
            char num[64];
            if (!first) ok = json_raw(&j, &n, &cap, ",");
            first = false;
            if (pass == 0) {
                snprintf(num, sizeof num, "{\"id\":%llu,\"content\":", (unsigned long long)i);
                ok = ok && json_raw(&j, &n, &cap, num) && json_str(&j, &n, &cap, t.str, (size_t)t.len) &&
                     json_raw(&j, &n, &cap, y.i == 3 ? ",\"special\":true}" : ",\"special\":false}");
            } else {
                snprintf(num, sizeof num, ":%llu", (unsigned long long)i);
                ok = ok && json_str(&j, &n, &cap, t.str, (size_t)t.len) && json_raw(&j, &n, &cap, num);
            }
        }
    }
    ok = ok && json_raw(&j, &n, &cap, "},\"merges\":[");
    for (uint64_t i = 0; i < mv.count && ok; i++) {
        wgml_gguf_value m;
        wgml_gguf_array_item(g, (size_t)mi, i, &m);
        ok = (i == 0 || json_raw(&j, &n, &cap, ",")) && json_str(&j, &n, &cap, m.str, (size_t)m.len);
    }
    ok = ok && json_raw(&j, &n, &cap, pre_types[kind].ignore_merges ? "],\"ignore_merges\":true},\"pre_tokenizer\":"
                                                                    : "]},\"pre_tokenizer\":") &&
         json_raw(&j, &n, &cap, pre_types[kind].json ? pre_types[kind].json : gpt2_bytelevel) &&
         json_raw(&j, &n, &cap, ",\"decoder\":{\"type\":\"ByteLevel\"}");
    wgml_status ts = ok ? template_json(g, what, &j, &n, &cap, &ok) : WGML_OK;
    if (ts) {
        free(j);
        return ts;
    }
    ok = ok && json_raw(&j, &n, &cap, "}");
    if (!ok) {
        free(j);
        return wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", what);
    }
    char name[300];
    snprintf(name, sizeof name, "%s (tokenizer.ggml.*)", what);
    wgml_status s = wgml_tokenizer_parse(j, n, name, out);
    free(j);
    return s;
}

/* ---- tokenizer_config.json's fields -------------------------------------------------------- */

/* A copy of a string value, NUL-terminated; NULL when absent. false when out of memory or
   when the text holds a NUL. */
static bool dup_value(const wgml_gguf_value *v, char **out)
{
    *out = NULL;
    if (memchr(v->str, 0, (size_t)v->len)) return false;
    *out = malloc((size_t)v->len + 1);
    if (!*out) return false;
    memcpy(*out, v->str, (size_t)v->len);
    (*out)[v->len] = 0;
    return true;
}

wgml_status wgml_tokenizer_config_from_gguf(const wgml_gguf *g, const char *what, wgml_tokenizer_config *out)
{
    if (out) memset(out, 0, sizeof *out);
    if (!g || !out)
        return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_tokenizer_config_from_gguf: g and out must not be NULL");
    if (!what) what = "gguf";
    wgml_gguf_value v, tokens;
    int64_t ti;
    bool ok = true;
    if (kv(g, "tokenizer.chat_template", &v, NULL) && v.type == WGML_GGUF_STRING) ok = dup_value(&v, &out->chat_template);
    bool have_tokens = kv(g, "tokenizer.ggml.tokens", &tokens, &ti) && tokens.type == WGML_GGUF_ARRAY &&
                       tokens.elem_type == WGML_GGUF_STRING;
    const char *ids[2] = { "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id" };
    char **texts[2] = { &out->bos_token, &out->eos_token };
    for (int k = 0; k < 2 && ok && have_tokens; k++) {
        wgml_gguf_value id, t;
        if (!kv(g, ids[k], &id, NULL) || !is_int(id.type) || id.u >= tokens.count) continue;
        wgml_gguf_array_item(g, (size_t)ti, id.u, &t);
        ok = dup_value(&t, texts[k]);
    }
    if (!ok) {
        wgml_tokenizer_config_clear(out);
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: a chat template or special token holds a NUL byte (or the host is out "
                          "of memory)", what);
    }
    return WGML_OK;
}
