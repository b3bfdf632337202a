/* GGUF: a validating reader (memory-mapped) of llama.cpp's single-file format.

   The reader trusts nothing in the file. Every length and count is checked against the
   bytes left before it is used, and counts against the smallest size their items could
   take before anything is allocated for them; keys and tensor names must be valid UTF-8,
   free of NUL bytes, at most WGML_GGUF_MAX_NAME bytes and unique; values have known types
   (arrays of arrays are refused); general.alignment, when present, is a u32 power of two
   of at most 1 MiB; each tensor has 1 to 4 dimensions of at least 1, a type whose block
   size and byte size wgml knows, a row length that is a whole number of blocks, a byte
   count that fits 64 bits, an aligned offset, and lies inside the data section without
   overlapping another. Only then is any data pointer handed out. */
#include "io.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define GGUF_MAGIC 0x46554747u   /* "GGUF" read as a little-endian u32 */
#define GGUF_DEFAULT_ALIGNMENT 32u
#define GGUF_MAX_ALIGNMENT (1u << 20)

/* Elements per block and bytes per block of the ggml types wgml knows (ggml.h's table). */
static const struct { const char *name; uint32_t block, bytes; } ggml_types[] = {
    [WGML_GGML_F32] = { "F32", 1, 4 },       [WGML_GGML_F16] = { "F16", 1, 2 },
    [WGML_GGML_Q4_0] = { "Q4_0", 32, 18 },   [WGML_GGML_Q4_1] = { "Q4_1", 32, 20 },
    [WGML_GGML_Q5_0] = { "Q5_0", 32, 22 },   [WGML_GGML_Q5_1] = { "Q5_1", 32, 24 },
    [WGML_GGML_Q8_0] = { "Q8_0", 32, 34 },   [WGML_GGML_Q8_1] = { "Q8_1", 32, 36 },
    [WGML_GGML_Q2_K] = { "Q2_K", 256, 84 },  [WGML_GGML_Q3_K] = { "Q3_K", 256, 110 },
    [WGML_GGML_Q4_K] = { "Q4_K", 256, 144 }, [WGML_GGML_Q5_K] = { "Q5_K", 256, 176 },
    [WGML_GGML_Q6_K] = { "Q6_K", 256, 210 }, [WGML_GGML_Q8_K] = { "Q8_K", 256, 292 },
    [WGML_GGML_I8] = { "I8", 1, 1 },         [WGML_GGML_I16] = { "I16", 1, 2 },
    [WGML_GGML_I32] = { "I32", 1, 4 },       [WGML_GGML_I64] = { "I64", 1, 8 },
    [WGML_GGML_F64] = { "F64", 1, 8 },       [WGML_GGML_BF16] = { "BF16", 1, 2 },
};
#define NGGML_TYPES (sizeof ggml_types / sizeof ggml_types[0])

static bool known_type(uint32_t t) { return t < NGGML_TYPES && ggml_types[t].name; }

const char *wgml_ggml_type_name(wgml_ggml_type t) { return known_type((uint32_t)t) ? ggml_types[t].name : "?"; }

bool wgml_ggml_type_block(wgml_ggml_type t, uint32_t *elements, uint32_t *bytes)
{
    if (!known_type((uint32_t)t)) return false;
    if (elements) *elements = ggml_types[t].block;
    if (bytes) *bytes = ggml_types[t].bytes;
    return true;
}

/* Bytes of one value of a fixed-size metadata type; 0 for strings, arrays and unknown types. */
static uint32_t value_size(uint32_t type)
{
    static const uint8_t size[] = { [WGML_GGUF_U8] = 1, [WGML_GGUF_I8] = 1, [WGML_GGUF_U16] = 2, [WGML_GGUF_I16] = 2,
                                    [WGML_GGUF_U32] = 4, [WGML_GGUF_I32] = 4, [WGML_GGUF_F32] = 4, [WGML_GGUF_BOOL] = 1,
                                    [WGML_GGUF_STRING] = 0, [WGML_GGUF_ARRAY] = 0, [WGML_GGUF_U64] = 8,
                                    [WGML_GGUF_I64] = 8, [WGML_GGUF_F64] = 8 };
    return type < sizeof size ? size[type] : 0;
}

static bool known_value_type(uint32_t t) { return t <= WGML_GGUF_F64; }

typedef struct gguf_kv {
    const char *key;            /* NUL-terminated, in the name pool */
    uint32_t type, elem_type;
    uint64_t count;             /* arrays */
    uint64_t at;                /* offset of the value (arrays: of the first item) in the file */
    uint64_t *items;            /* arrays of strings: each item's offset */
} gguf_kv;

typedef struct gguf_tensor {
    const char *name;
    uint32_t type, ndim;
    uint64_t shape[4];
    uint64_t numel, nbytes, offset;   /* offset: in the file */
} gguf_tensor;

struct wgml_gguf {
    char *name;                 /* the path, for messages */
    const uint8_t *base;
    size_t size;
    void *map;                  /* when opened from a file */
    uint32_t version, alignment;
    uint64_t data_start;
    gguf_kv *kv;
    size_t nkv;
    gguf_tensor *tensors;
    size_t ntensors;
    char *pool;                 /* every key and tensor name, NUL-terminated */
    size_t pool_used, pool_cap;
    wgml__strmap kv_by_key, tensor_by_name;
};

/* ---- reading ---------------------------------------------------------------------------- */

typedef struct cursor {
    const wgml_gguf *g;
    uint64_t at;
    const char *what;           /* the part being read, for messages (printable) */
    char quoted[WGML__QUOTE_MAX];
} cursor;

/* The part being read is a key or a tensor name from the file: quoted for messages. */
static void reading(cursor *c, const char *name) { c->what = wgml__quote(c->quoted, sizeof c->quoted, name, strlen(name)); }

static wgml_status truncated(const cursor *c, uint64_t need)
{
    return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: truncated: %s needs %llu bytes at offset %llu, the file has %llu left",
                      c->g->name, c->what, (unsigned long long)need, (unsigned long long)c->at,
                      (unsigned long long)(c->g->size - c->at));
}

static uint64_t left(const cursor *c) { return c->g->size - c->at; }

static uint64_t le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static wgml_status read_uint(cursor *c, int n, uint64_t *v)
{
    *v = 0;
    if (left(c) < (uint64_t)n) return truncated(c, (uint64_t)n);
    *v = le(c->g->base + c->at, n);
    c->at += (uint64_t)n;
    return WGML_OK;
}

/* A string: u64 length, then its bytes (at *at, *len). */
static wgml_status read_string(cursor *c, uint64_t *at, uint64_t *len)
{
    *at = 0;
    wgml_status s = read_uint(c, 8, len);
    if (s) return s;
    if (*len > left(c)) return truncated(c, *len);
    *at = c->at;
    c->at += *len;
    return WGML_OK;
}

/* A key or a tensor name: a string, valid UTF-8 without NUL, at most WGML_GGUF_MAX_NAME
   bytes, copied NUL-terminated into the pool. */
static wgml_status read_name(cursor *c, const char **out)
{
    uint64_t at, len;
    wgml_status s = read_string(c, &at, &len);
    if (s) return s;
    wgml_gguf *g = (wgml_gguf *)c->g;
    const char *p = (const char *)g->base + at;
    char q[WGML__QUOTE_MAX];
    if (len == 0 || len > WGML_GGUF_MAX_NAME)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s of %llu bytes at offset %llu: a name has 1 to %u bytes", g->name,
                          c->what, (unsigned long long)len, (unsigned long long)at, WGML_GGUF_MAX_NAME);
    if (memchr(p, 0, (size_t)len) || wgml__utf8_check((const uint8_t *)p, (size_t)len) != len)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s %s at offset %llu is not valid UTF-8 text without NUL bytes", g->name,
                          c->what, wgml__quote(q, sizeof q, p, (size_t)len), (unsigned long long)at);
    if (g->pool_cap - g->pool_used < len + 1)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: internal: name pool exhausted", g->name);
    char *dst = g->pool + g->pool_used;
    memcpy(dst, p, (size_t)len);
    dst[len] = 0;
    g->pool_used += len + 1;
    *out = dst;
    return WGML_OK;
}

/* Skips one value of type t (not an array), checking its bytes are there. */
static wgml_status skip_scalar(cursor *c, uint32_t t)
{
    if (t == WGML_GGUF_STRING) {
        uint64_t at, len;
        return read_string(c, &at, &len);
    }
    uint32_t n = value_size(t);
    if (left(c) < n) return truncated(c, n);
    if (t == WGML_GGUF_BOOL && c->g->base[c->at] > 1)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s: a bool of value %u at offset %llu (0 or 1)", c->g->name, c->what,
                          c->g->base[c->at], (unsigned long long)c->at);
    c->at += n;
    return WGML_OK;
}

static wgml_status read_kv(cursor *c, gguf_kv *kv)
{
    c->what = "a metadata key";
    wgml_status s = read_name(c, &kv->key);
    if (s) return s;
    reading(c, kv->key);
    uint64_t t;
    if ((s = read_uint(c, 4, &t))) return s;
    kv->type = (uint32_t)t;
    const wgml_gguf *g = c->g;
    char q[WGML__QUOTE_MAX];
    if (!known_value_type(kv->type))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: metadata %s has value type %llu (known: 0 to 12)", g->name,
                          wgml__quote(q, sizeof q, kv->key, strlen(kv->key)), (unsigned long long)t);
    if (kv->type != WGML_GGUF_ARRAY) {
        kv->at = c->at;
        return skip_scalar(c, kv->type);
    }
    uint64_t et;
    if ((s = read_uint(c, 4, &et)) || (s = read_uint(c, 8, &kv->count))) return s;
    kv->elem_type = (uint32_t)et;
    if (!known_value_type(kv->elem_type) || kv->elem_type == WGML_GGUF_ARRAY)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: metadata %s is an array of type %llu (arrays of arrays are not read)",
                          g->name, wgml__quote(q, sizeof q, kv->key, strlen(kv->key)), (unsigned long long)et);
    kv->at = c->at;
    uint32_t n = value_size(kv->elem_type);
    if (n) {
        if (kv->count > left(c) / n) return truncated(c, kv->count <= UINT64_MAX / n ? kv->count * n : UINT64_MAX);
        for (uint64_t j = 0; kv->elem_type == WGML_GGUF_BOOL && j < kv->count; j++)
            if ((s = skip_scalar(c, WGML_GGUF_BOOL))) return s;
        if (kv->elem_type != WGML_GGUF_BOOL) c->at += kv->count * n;
        return WGML_OK;
    }
    /* strings: at least 8 bytes each; their offsets kept for wgml_gguf_array_item */
    if (kv->count > left(c) / 8) return truncated(c, kv->count <= UINT64_MAX / 8 ? kv->count * 8 : UINT64_MAX);
    kv->items = malloc((size_t)(kv->count ? kv->count : 1) * sizeof *kv->items);
    if (!kv->items) return wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", g->name);
    for (uint64_t j = 0; j < kv->count; j++) {
        kv->items[j] = c->at;
        uint64_t at, len;
        if ((s = read_string(c, &at, &len))) return s;
    }
    return WGML_OK;
}

static wgml_status read_tensor(cursor *c, gguf_tensor *t)
{
    const wgml_gguf *g = c->g;
    c->what = "a tensor name";
    wgml_status s = read_name(c, &t->name);
    if (s) return s;
    reading(c, t->name);
    char q[WGML__QUOTE_MAX];
    const char *name = wgml__quote(q, sizeof q, t->name, strlen(t->name));
    uint64_t v;
    if ((s = read_uint(c, 4, &v))) return s;
    if (v < 1 || v > 4)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: tensor %s has %llu dimensions (1 to 4)", g->name, name,
                          (unsigned long long)v);
    t->ndim = (uint32_t)v;
    t->numel = 1;
    for (uint32_t d = 0; d < t->ndim; d++) {
        if ((s = read_uint(c, 8, &t->shape[d]))) return s;
        if (t->shape[d] == 0 || t->shape[d] > (UINT64_MAX >> 1) / t->numel)
            return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: tensor %s: dimension %u is %llu (at least 1, and the product must "
                              "fit 63 bits)", g->name, name, d, (unsigned long long)t->shape[d]);
        t->numel *= t->shape[d];
    }
    if ((s = read_uint(c, 4, &v))) return s;
    if (!known_type((uint32_t)v))
        return wgml__fail(NULL, WGML_ERROR_UNSUPPORTED, "%s: tensor %s has ggml type %llu, which wgml does not know", g->name,
                          name, (unsigned long long)v);
    t->type = (uint32_t)v;
    uint32_t block = ggml_types[t->type].block, bytes = ggml_types[t->type].bytes;
    if (t->shape[0] % block)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: tensor %s: rows of %llu elements are not whole %s blocks of %u", g->name,
                          name, (unsigned long long)t->shape[0], ggml_types[t->type].name, block);
    if (t->numel / block > UINT64_MAX / bytes)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: tensor %s is too large", g->name, name);
    t->nbytes = t->numel / block * bytes;
    return read_uint(c, 8, &t->offset);   /* relative to the data section until checked */
}

static int by_offset(const void *a, const void *b)
{
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* The data section and each tensor's place in it. */
static wgml_status place_tensors(wgml_gguf *g, uint64_t header_end)
{
    uint64_t a = g->alignment;
    g->data_start = (header_end + a - 1) / a * a;
    if (g->ntensors && g->data_start > g->size)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: truncated: the data section would start at %llu, past the end (%zu)",
                          g->name, (unsigned long long)g->data_start, g->size);
    uint64_t data_size = g->ntensors ? g->size - g->data_start : 0;
    gguf_tensor **order = malloc((g->ntensors ? g->ntensors : 1) * sizeof *order);
    if (!order) return wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", g->name);
    char q[WGML__QUOTE_MAX];
    wgml_status s = WGML_OK;
    for (size_t i = 0; i < g->ntensors && !s; i++) {
        gguf_tensor *t = &g->tensors[i];
        order[i] = t;
        if (t->offset % a)
            s = wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: tensor %s: offset %llu is not a multiple of the alignment %u", g->name,
                           wgml__quote(q, sizeof q, t->name, strlen(t->name)), (unsigned long long)t->offset, g->alignment);
        else if (t->offset > data_size || t->nbytes > data_size - t->offset)
            s = wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: tensor %s: %llu bytes at offset %llu lie past the data section's %llu",
                           g->name, wgml__quote(q, sizeof q, t->name, strlen(t->name)), (unsigned long long)t->nbytes,
                           (unsigned long long)t->offset, (unsigned long long)data_size);
    }
    if (!s) qsort(order, g->ntensors, sizeof *order, by_offset);
    char q2[WGML__QUOTE_MAX];
    for (size_t i = 1; i < g->ntensors && !s; i++)
        if (order[i - 1]->offset + order[i - 1]->nbytes > order[i]->offset)
            s = wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: tensors %s and %s overlap", g->name,
                           wgml__quote(q, sizeof q, order[i - 1]->name, strlen(order[i - 1]->name)),
                           wgml__quote(q2, sizeof q2, order[i]->name, strlen(order[i]->name)));
    free(order);
    for (size_t i = 0; i < g->ntensors && !s; i++) g->tensors[i].offset += g->data_start;
    return s;
}

static wgml_status gguf_parse(wgml_gguf *g)
{
    cursor c = { .g = g, .what = "the header" };
    uint64_t magic, version, ntensors, nkv;
    wgml_status s = read_uint(&c, 4, &magic);
    if (s) return s;
    if (magic != GGUF_MAGIC) return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: not a GGUF file (no \"GGUF\" magic)", g->name);
    if ((s = read_uint(&c, 4, &version))) return s;
    if (version != 2 && version != 3)
        return wgml__fail(NULL, version == 1 ? WGML_ERROR_UNSUPPORTED : WGML_ERROR_FORMAT, "%s: GGUF version %llu (wgml reads "
                          "versions 2 and 3)", g->name, (unsigned long long)version);
    g->version = (uint32_t)version;
    if ((s = read_uint(&c, 8, &ntensors)) || (s = read_uint(&c, 8, &nkv))) return s;
    /* the smallest a key / value pair can be: a 1-byte key (8 + 1), its type (4), a u8 (1);
       a tensor info: a 1-byte name (9), 1 dimension (4 + 8), its type (4), its offset (8) */
    if (nkv > left(&c) / 14 || ntensors > left(&c) / 33)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %llu metadata pairs and %llu tensors cannot fit in %llu bytes", g->name,
                          (unsigned long long)nkv, (unsigned long long)ntensors, (unsigned long long)left(&c));
    g->nkv = (size_t)nkv;
    g->ntensors = (size_t)ntensors;
    g->pool_cap = g->size;   /* the names, copied, take no more than the file */
    g->pool = malloc(g->pool_cap ? g->pool_cap : 1);
    g->kv = calloc(g->nkv ? g->nkv : 1, sizeof *g->kv);
    g->tensors = calloc(g->ntensors ? g->ntensors : 1, sizeof *g->tensors);
    if (!g->pool || !g->kv || !g->tensors || !wgml__strmap_init(&g->kv_by_key, g->nkv) ||
        !wgml__strmap_init(&g->tensor_by_name, g->ntensors))
        return wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", g->name);
    char q[WGML__QUOTE_MAX];
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    for (size_t i = 0; i < g->nkv; i++) {
        gguf_kv *kv = &g->kv[i];
        if ((s = read_kv(&c, kv))) return s;
        int r = wgml__strmap_put(&g->kv_by_key, kv->key, strlen(kv->key), (uint32_t)i, NULL);
        if (r < 0) return wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", g->name);
        if (r == 0)
            return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: metadata key %s appears twice", g->name,
                              wgml__quote(q, sizeof q, kv->key, strlen(kv->key)));
        if (strcmp(kv->key, "general.alignment") == 0) {
            uint32_t a = kv->type == WGML_GGUF_U32 ? (uint32_t)le(g->base + kv->at, 4) : 0;
            if (!a || (a & (a - 1)) || a > GGUF_MAX_ALIGNMENT)
                return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: general.alignment must be a u32 power of two of at most %u",
                                  g->name, GGUF_MAX_ALIGNMENT);
            g->alignment = a;
        }
    }
    for (size_t i = 0; i < g->ntensors; i++) {
        gguf_tensor *t = &g->tensors[i];
        if ((s = read_tensor(&c, t))) return s;
        int r = wgml__strmap_put(&g->tensor_by_name, t->name, strlen(t->name), (uint32_t)i, NULL);
        if (r < 0) return wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", g->name);
        if (r == 0)
            return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: tensor %s appears twice", g->name,
                              wgml__quote(q, sizeof q, t->name, strlen(t->name)));
    }
    return place_tensors(g, c.at);
}

/* ---- opening ------------------------------------------------------------------------------ */

static wgml_status gguf_new(const char *name, wgml_gguf **out)
{
    wgml_gguf *g = calloc(1, sizeof *g);
    if (!g || !(g->name = strdup(name))) {
        free(g);
        return wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", name);
    }
    *out = g;
    return WGML_OK;
}

void wgml_gguf_close(wgml_gguf *g)
{
    if (!g) return;
    if (g->map) munmap(g->map, g->size);
    for (size_t i = 0; g->kv && i < g->nkv; i++) free(g->kv[i].items);
    free(g->kv);
    free(g->tensors);
    free(g->pool);
    wgml__strmap_free(&g->kv_by_key);
    wgml__strmap_free(&g->tensor_by_name);
    free(g->name);
    free(g);
}

static wgml_status finish_open(wgml_gguf *g, wgml_gguf **out)
{
    wgml_status s = gguf_parse(g);
    if (s) {
        wgml_gguf_close(g);
        return s;
    }
    *out = g;
    return WGML_OK;
}

wgml_status wgml_gguf_open_memory(const void *data, size_t size, const char *name, wgml_gguf **out)
{
    if (out) *out = NULL;
    if (!out || (!data && size))
        return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_gguf_open_memory: out and data must not be NULL");
    wgml_gguf *g = NULL;
    wgml_status s = gguf_new(name ? name : "memory", &g);
    if (s) return s;
    g->base = data;
    g->size = size;
    return finish_open(g, out);
}

wgml_status wgml_gguf_open(const char *path, wgml_gguf **out)
{
    if (out) *out = NULL;
    if (!path || !out) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_gguf_open: path and out must not be NULL");
    int fd;
    uint64_t fsize;
    wgml_status s = wgml__open_file(path, false, &fd, &fsize);
    if (s) return s;
    if (fsize > SIZE_MAX) {
        close(fd);
        return wgml__fail(NULL, WGML_ERROR_IO, "%s: too large to map", path);
    }
    wgml_gguf *g = NULL;
    if ((s = gguf_new(path, &g))) {
        close(fd);
        return s;
    }
    g->size = (size_t)fsize;
    if (g->size > 0) {
        void *m = mmap(NULL, g->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int err = errno;
            char eb[128];
            close(fd);
            wgml_gguf_close(g);
            if (strerror_r(err, eb, sizeof eb)) snprintf(eb, sizeof eb, "error %d", err);
            return wgml__fail(NULL, WGML_ERROR_IO, "%s: cannot map: %s", path, eb);
        }
        g->map = m;
        g->base = m;
    }
    close(fd);
    return finish_open(g, out);
}

/* ---- metadata ------------------------------------------------------------------------------ */

uint32_t wgml_gguf_version(const wgml_gguf *g) { return g ? g->version : 0; }
uint32_t wgml_gguf_alignment(const wgml_gguf *g) { return g ? g->alignment : 0; }
size_t wgml_gguf_kv_count(const wgml_gguf *g) { return g ? g->nkv : 0; }

int64_t wgml_gguf_kv_find(const wgml_gguf *g, const char *key)
{
    uint32_t i;
    if (!g || !key || !wgml__strmap_get(&g->kv_by_key, key, strlen(key), &i)) return -1;
    return (int64_t)i;
}

/* The value of type t at file offset at. */
static void scalar_at(const wgml_gguf *g, uint32_t t, uint64_t at, wgml_gguf_value *v)
{
    const uint8_t *p = g->base + at;
    memset(v, 0, sizeof *v);
    v->type = (wgml_gguf_type)t;
    switch (t) {
    case WGML_GGUF_U8: case WGML_GGUF_U16: case WGML_GGUF_U32: case WGML_GGUF_U64: case WGML_GGUF_BOOL:
        v->u = le(p, (int)value_size(t));
        v->i = v->u <= INT64_MAX ? (int64_t)v->u : INT64_MAX;
        v->f = (double)v->u;
        break;
    case WGML_GGUF_I8: case WGML_GGUF_I16: case WGML_GGUF_I32: case WGML_GGUF_I64: {
        int bits = 8 * (int)value_size(t);
        uint64_t u = le(p, bits / 8);
        v->i = bits == 64 ? (int64_t)u : (int64_t)(u ^ (1ull << (bits - 1))) - (int64_t)(1ull << (bits - 1));
        v->u = v->i >= 0 ? (uint64_t)v->i : 0;
        v->f = (double)v->i;
        break;
    }
    case WGML_GGUF_F32: {
        uint32_t u = (uint32_t)le(p, 4);
        float f;
        memcpy(&f, &u, sizeof f);
        v->f = f;
        break;
    }
    case WGML_GGUF_F64: {
        uint64_t u = le(p, 8);
        memcpy(&v->f, &u, sizeof v->f);
        break;
    }
    case WGML_GGUF_STRING:
        v->len = le(p, 8);
        v->str = (const char *)p + 8;
        break;
    default: break;
    }
}

wgml_status wgml_gguf_kv(const wgml_gguf *g, size_t i, const char **key, wgml_gguf_value *v)
{
    if (!g || !v || i >= g->nkv)
        return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_gguf_kv: %s", !g || !v ? "g and v must not be NULL" :
                          "i is past the last pair");
    const gguf_kv *kv = &g->kv[i];
    if (key) *key = kv->key;
    if (kv->type == WGML_GGUF_ARRAY) {
        memset(v, 0, sizeof *v);
        v->type = WGML_GGUF_ARRAY;
        v->elem_type = (wgml_gguf_type)kv->elem_type;
        v->count = kv->count;
    } else {
        scalar_at(g, kv->type, kv->at, v);
    }
    return WGML_OK;
}

wgml_status wgml_gguf_array_item(const wgml_gguf *g, size_t i, uint64_t j, wgml_gguf_value *v)
{
    const char *fn = "wgml_gguf_array_item";
    if (!g || !v || i >= g->nkv) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: g and v must not be NULL, i below "
                                                   "the pair count", fn);
    const gguf_kv *kv = &g->kv[i];
    if (kv->type != WGML_GGUF_ARRAY || j >= kv->count)
        return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: pair %zu is %s", fn, i,
                          kv->type != WGML_GGUF_ARRAY ? "not an array" : "an array with fewer items");
    scalar_at(g, kv->elem_type, kv->items ? kv->items[j] : kv->at + j * value_size(kv->elem_type), v);
    return WGML_OK;
}

/* ---- tensors ------------------------------------------------------------------------------- */

size_t wgml_gguf_tensor_count(const wgml_gguf *g) { return g ? g->ntensors : 0; }

wgml_status wgml_gguf_tensor_info(const wgml_gguf *g, size_t i, wgml_gguf_tensor *info)
{
    if (!g || !info || i >= g->ntensors)
        return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_gguf_tensor_info: %s", !g || !info ?
                          "g and info must not be NULL" : "i is past the last tensor");
    const gguf_tensor *t = &g->tensors[i];
    *info = (wgml_gguf_tensor){ .name = t->name, .type = (wgml_ggml_type)t->type, .ndim = t->ndim, .numel = t->numel,
                                .nbytes = t->nbytes, .offset = t->offset };
    memcpy(info->shape, t->shape, sizeof info->shape);
    return WGML_OK;
}

int64_t wgml_gguf_tensor_find(const wgml_gguf *g, const char *name)
{
    uint32_t i;
    if (!g || !name || !wgml__strmap_get(&g->tensor_by_name, name, strlen(name), &i)) return -1;
    return (int64_t)i;
}

const void *wgml_gguf_tensor_data(const wgml_gguf *g, size_t i)
{
    if (!g || i >= g->ntensors) return NULL;
    return g->base + g->tensors[i].offset;
}
