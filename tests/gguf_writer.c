/* See gguf_writer.h. */
#include "gguf_writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bytes { uint8_t *p; size_t n, cap; } bytes;

static void put(bytes *b, const void *data, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 256;
        b->p = realloc(b->p, b->cap);
    }
    if (n) memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void le(bytes *b, uint64_t v, int n)
{
    uint8_t x[8];
    for (int i = 0; i < n; i++) x[i] = (uint8_t)(v >> (8 * i));
    put(b, x, (size_t)n);
}

static void str(bytes *b, const char *s)
{
    le(b, strlen(s), 8);
    put(b, s, strlen(s));
}

typedef struct tensor { char *name; uint32_t type, ndim; uint64_t shape[4]; bytes data; } tensor;

struct gguf_writer {
    bytes kv;
    uint64_t nkv;
    tensor *t;
    size_t nt;
};

gguf_writer *gw_new(void) { return calloc(1, sizeof(gguf_writer)); }

void gw_free(gguf_writer *w)
{
    if (!w) return;
    for (size_t i = 0; i < w->nt; i++) {
        free(w->t[i].name);
        free(w->t[i].data.p);
    }
    free(w->t);
    free(w->kv.p);
    free(w);
}

static void key(gguf_writer *w, const char *k, uint32_t type)
{
    str(&w->kv, k);
    le(&w->kv, type, 4);
    w->nkv++;
}

void gw_str(gguf_writer *w, const char *k, const char *value) { key(w, k, WGML_GGUF_STRING); str(&w->kv, value); }
void gw_u32(gguf_writer *w, const char *k, uint32_t value) { key(w, k, WGML_GGUF_U32); le(&w->kv, value, 4); }
void gw_bool(gguf_writer *w, const char *k, bool value) { key(w, k, WGML_GGUF_BOOL); le(&w->kv, value ? 1 : 0, 1); }

void gw_f32(gguf_writer *w, const char *k, float value)
{
    uint32_t u;
    memcpy(&u, &value, 4);
    key(w, k, WGML_GGUF_F32);
    le(&w->kv, u, 4);
}

void gw_str_array(gguf_writer *w, const char *k, const char *const *items, size_t n)
{
    key(w, k, WGML_GGUF_ARRAY);
    le(&w->kv, WGML_GGUF_STRING, 4);
    le(&w->kv, n, 8);
    for (size_t i = 0; i < n; i++) str(&w->kv, items[i]);
}

void gw_i32_array(gguf_writer *w, const char *k, const int32_t *items, size_t n)
{
    key(w, k, WGML_GGUF_ARRAY);
    le(&w->kv, WGML_GGUF_I32, 4);
    le(&w->kv, n, 8);
    for (size_t i = 0; i < n; i++) le(&w->kv, (uint32_t)items[i], 4);
}

void gw_f32_array(gguf_writer *w, const char *k, const float *items, size_t n)
{
    key(w, k, WGML_GGUF_ARRAY);
    le(&w->kv, WGML_GGUF_F32, 4);
    le(&w->kv, n, 8);
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &items[i], 4);
        le(&w->kv, bits, 4);
    }
}

void gw_tensor(gguf_writer *w, const char *name, wgml_ggml_type type, uint32_t ndim, const uint64_t *shape, const void *data,
               size_t nbytes)
{
    w->t = realloc(w->t, (w->nt + 1) * sizeof *w->t);
    tensor *t = &w->t[w->nt++];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    t->type = (uint32_t)type;
    t->ndim = ndim;
    memcpy(t->shape, shape, ndim * sizeof *shape);
    put(&t->data, data, nbytes);
}

uint8_t *gw_bytes(const gguf_writer *w, uint32_t alignment, size_t *size)
{
    bytes b = { 0 };
    put(&b, "GGUF", 4);
    le(&b, 3, 4);
    le(&b, w->nt, 8);
    le(&b, w->nkv, 8);
    put(&b, w->kv.p, w->kv.n);
    uint64_t off = 0;
    for (size_t i = 0; i < w->nt; i++) {
        const tensor *t = &w->t[i];
        str(&b, t->name);
        le(&b, t->ndim, 4);
        for (uint32_t d = 0; d < t->ndim; d++) le(&b, t->shape[d], 8);
        le(&b, t->type, 4);
        le(&b, off, 8);
        off += (t->data.n + alignment - 1) / alignment * alignment;
    }
    static const uint8_t zeros[64];
    while (b.n % alignment) put(&b, zeros, 1);
    for (size_t i = 0; i < w->nt; i++) {
        put(&b, w->t[i].data.p, w->t[i].data.n);
        while (b.n % alignment) put(&b, zeros, 1);
    }
    *size = b.n;
    return b.p;
}

bool gw_write(const gguf_writer *w, const char *path, uint32_t alignment)
{
    size_t n;
    uint8_t *p = gw_bytes(w, alignment, &n);
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(p, 1, n, f) == n;
    if (f) ok = fclose(f) == 0 && ok;
    free(p);
    return ok;
}

const char *gw_tensor_name(const char *hf, char *out, size_t size)
{
    static const char *const pairs[][2] = {
        { "input_layernorm.weight", "attn_norm.weight" }, { "self_attn.q_proj.weight", "attn_q.weight" },
        { "self_attn.k_proj.weight", "attn_k.weight" }, { "self_attn.v_proj.weight", "attn_v.weight" },
        { "self_attn.o_proj.weight", "attn_output.weight" }, { "post_attention_layernorm.weight", "ffn_norm.weight" },
        { "mlp.gate_proj.weight", "ffn_gate.weight" }, { "mlp.up_proj.weight", "ffn_up.weight" },
        { "mlp.down_proj.weight", "ffn_down.weight" } };
    if (!strcmp(hf, "model.embed_tokens.weight")) snprintf(out, size, "token_embd.weight");
    else if (!strcmp(hf, "model.norm.weight")) snprintf(out, size, "output_norm.weight");
    else if (!strcmp(hf, "lm_head.weight")) snprintf(out, size, "output.weight");
    else {
        unsigned l;
        int at = 0;
        sscanf(hf, "model.layers.%u.%n", &l, &at);
        for (size_t i = 0; i < 9; i++)
            if (!strcmp(hf + at, pairs[i][0])) snprintf(out, size, "blk.%u.%s", l, pairs[i][1]);
    }
    return out;
}
