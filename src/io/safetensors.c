/* safetensors: a validating reader (memory-mapped), an atomic writer, and checkpoints of
   several shards joined by model.safetensors.index.json.

   The reader trusts nothing in the file. In order: the file holds the 8-byte length; the
   length is within the 16 MiB cap and within the file; the header starts with '{', is
   valid UTF-8 and one JSON object with unique keys followed only by whitespace; each
   tensor has a known dtype, at most 8 dimensions of integers below 2^53, a shape whose
   element and byte counts fit 64 bits, and data_offsets [begin, end] with begin <= end <=
   data size and end - begin equal to the byte count; finally the ranges, sorted, tile the
   data exactly from 0 to its end (the format forbids holes, which would allow polyglot
   files, and overlaps). Only then is any tensor data pointer handed out. */
#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct { const char *name; uint32_t bits; } dtypes[WGML_ST_DTYPE_COUNT] = {
    [WGML_ST_BOOL] = { "BOOL", 8 },         [WGML_ST_U8] = { "U8", 8 },
    [WGML_ST_I8] = { "I8", 8 },             [WGML_ST_F8_E5M2] = { "F8_E5M2", 8 },
    [WGML_ST_F8_E4M3] = { "F8_E4M3", 8 },   [WGML_ST_F8_E8M0] = { "F8_E8M0", 8 },
    [WGML_ST_F8_E4M3FNUZ] = { "F8_E4M3FNUZ", 8 }, [WGML_ST_F8_E5M2FNUZ] = { "F8_E5M2FNUZ", 8 },
    [WGML_ST_I16] = { "I16", 16 },          [WGML_ST_U16] = { "U16", 16 },
    [WGML_ST_F16] = { "F16", 16 },          [WGML_ST_BF16] = { "BF16", 16 },
    [WGML_ST_I32] = { "I32", 32 },          [WGML_ST_U32] = { "U32", 32 },
    [WGML_ST_F32] = { "F32", 32 },          [WGML_ST_I64] = { "I64", 64 },
    [WGML_ST_U64] = { "U64", 64 },          [WGML_ST_F64] = { "F64", 64 },
    [WGML_ST_C64] = { "C64", 64 },          [WGML_ST_F4] = { "F4", 4 },
    [WGML_ST_F6_E2M3] = { "F6_E2M3", 6 },   [WGML_ST_F6_E3M2] = { "F6_E3M2", 6 },
};

const char *wgml_safetensors_dtype_name(wgml_safetensors_dtype d)
{
    return (unsigned)d < WGML_ST_DTYPE_COUNT ? dtypes[d].name : "?";
}

uint32_t wgml_safetensors_dtype_bits(wgml_safetensors_dtype d)
{
    return (unsigned)d < WGML_ST_DTYPE_COUNT ? dtypes[d].bits : 0;
}

static const struct { wgml_safetensors_dtype st; wgml_dtype w; } dtype_pairs[] = {
    { WGML_ST_F32, WGML_F32 }, { WGML_ST_F16, WGML_F16 }, { WGML_ST_BF16, WGML_BF16 },
    { WGML_ST_U32, WGML_U32 }, { WGML_ST_U8, WGML_U8 },
};

bool wgml_safetensors_dtype_to_wgml(wgml_safetensors_dtype d, wgml_dtype *out)
{
    for (size_t i = 0; i < sizeof dtype_pairs / sizeof dtype_pairs[0]; i++)
        if (dtype_pairs[i].st == d) {
            if (out) *out = dtype_pairs[i].w;
            return true;
        }
    return false;
}

wgml_safetensors_dtype wgml_safetensors_dtype_from_wgml(wgml_dtype d)
{
    for (size_t i = 0; i < sizeof dtype_pairs / sizeof dtype_pairs[0]; i++)
        if (dtype_pairs[i].w == d) return dtype_pairs[i].st;
    return WGML_ST_DTYPE_COUNT;
}

/* ---- the reader --------------------------------------------------------------------- */

typedef struct st_tensor {
    const char *name;          /* a key of the header's cJSON tree */
    wgml_safetensors_dtype dtype;
    uint32_t ndim;
    uint64_t shape[WGML_SAFETENSORS_MAX_DIMS];
    uint64_t numel, nbytes;
    uint64_t begin, end;       /* relative to the data section */
} st_tensor;

struct wgml_safetensors {
    char *name;                /* for messages */
    const uint8_t *base;       /* the whole file */
    size_t size;
    void *map;                 /* munmap'd at close; NULL for borrowed memory */
    uint64_t data_start;       /* 8 + header length */
    cJSON *header;
    st_tensor *tensors;
    size_t count;
    const char **meta_keys, **meta_values;
    size_t nmeta;
    wgml__strmap by_name;      /* tensor name -> index; "__metadata__" -> UINT32_MAX */
};

#define NO_TENSOR UINT32_MAX
/* A tensor entry is at most 14 values (the object, dtype, shape and 8 dimensions,
   data_offsets and 2 offsets) in at least 66 bytes: a header of more values per byte is
   hostile, and refusing it keeps its parse within about 20 times its size in memory. */
#define HEADER_BYTES_PER_VALUE 4

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static wgml_status oom(const char *what)
{
    return wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", what);
}

/* Validates one tensor entry c of the header into *t (offsets not yet cross-checked). */
static wgml_status parse_tensor(const char *what, const cJSON *c, uint64_t data_size, st_tensor *t)
{
    char q[WGML__QUOTE_MAX], field[WGML__QUOTE_MAX + 64];
    const char *name = c->string ? c->string : "";
    wgml__quote(q, sizeof q, name, strlen(name));
    if (!cJSON_IsObject(c))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: tensor '%s' must be an object, not %s", what, q, wgml__json_type(c));
    snprintf(field, sizeof field, "tensor '%s'", q);
    wgml_status s = wgml__json_unique_keys(what, field, c);
    if (s) return s;
    t->name = name;

    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(c, "dtype");
    if (!dt) return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: tensor '%s' has no dtype", what, q);
    if (!cJSON_IsString(dt))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: dtype of tensor '%s' must be a string, not %s", what, q,
                          wgml__json_type(dt));
    t->dtype = WGML_ST_DTYPE_COUNT;
    for (int d = 0; d < WGML_ST_DTYPE_COUNT; d++)
        if (strcmp(dt->valuestring, dtypes[d].name) == 0) t->dtype = (wgml_safetensors_dtype)d;
    if (t->dtype == WGML_ST_DTYPE_COUNT) {
        char qd[WGML__QUOTE_MAX];
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: tensor '%s' has the unknown dtype '%s'", what, q,
                          wgml__quote(qd, sizeof qd, dt->valuestring, strlen(dt->valuestring)));
    }

    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(c, "shape");
    if (!sh) return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: tensor '%s' has no shape", what, q);
    if (!cJSON_IsArray(sh))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: shape of tensor '%s' must be an array, not %s", what, q,
                          wgml__json_type(sh));
    t->ndim = 0;
    bool zero = false;
    for (const cJSON *d = sh->child; d; d = d->next) {
        if (t->ndim == WGML_SAFETENSORS_MAX_DIMS)
            return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: tensor '%s' has more than %d dimensions", what, q,
                              WGML_SAFETENSORS_MAX_DIMS);
        if (!wgml__json_uint_ok(d, WGML__JSON_INT_MAX, &t->shape[t->ndim])) {
            snprintf(field, sizeof field, "shape[%u] of tensor '%s'", t->ndim, q);
            return wgml__json_uint(what, field, d, WGML__JSON_INT_MAX, &t->shape[t->ndim]);
        }
        zero |= t->shape[t->ndim] == 0;
        t->ndim++;
    }
    /* numel; a zero dimension makes it 0 whatever the others are, so no overflow then */
    t->numel = 1;
    if (zero) t->numel = 0;
    else
        for (uint32_t i = 0; i < t->ndim; i++) {
            if (t->numel > UINT64_MAX / t->shape[i])
                return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: the shape of tensor '%s' has more than 2^64 elements", what, q);
            t->numel *= t->shape[i];
        }
    uint32_t bits = dtypes[t->dtype].bits;
    if (t->numel > UINT64_MAX / bits)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: tensor '%s' has more than 2^64 bits", what, q);
    if (t->numel * bits % 8 != 0)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: tensor '%s' (%llu elements of %s) is not a whole number of bytes",
                          what, q, (unsigned long long)t->numel, dtypes[t->dtype].name);
    t->nbytes = t->numel * bits / 8;

    const cJSON *off = cJSON_GetObjectItemCaseSensitive(c, "data_offsets");
    if (!off) return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: tensor '%s' has no data_offsets", what, q);
    if (!cJSON_IsArray(off))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: data_offsets of tensor '%s' must be an array, not %s", what, q,
                          wgml__json_type(off));
    const cJSON *b = off->child, *e = b ? b->next : NULL;
    if (!b || !e || e->next)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: data_offsets of tensor '%s' must hold 2 integers", what, q);
    for (int k = 0; k < 2; k++)
        if (!wgml__json_uint_ok(k ? e : b, WGML__JSON_INT_MAX, k ? &t->end : &t->begin)) {
            snprintf(field, sizeof field, "data_offsets[%d] of tensor '%s'", k, q);
            return wgml__json_uint(what, field, k ? e : b, WGML__JSON_INT_MAX, k ? &t->end : &t->begin);
        }
    if (t->end < t->begin)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: data_offsets [%llu, %llu] of tensor '%s' are reversed", what,
                          (unsigned long long)t->begin, (unsigned long long)t->end, q);
    if (t->end > data_size)
        return wgml__fail(NULL, WGML_ERROR_FORMAT,
                          "%s: data_offsets [%llu, %llu] of tensor '%s' run past the end of the data (%llu bytes)", what,
                          (unsigned long long)t->begin, (unsigned long long)t->end, q, (unsigned long long)data_size);
    if (t->end - t->begin != t->nbytes)
        return wgml__fail(NULL, WGML_ERROR_FORMAT,
                          "%s: tensor '%s' has %llu elements of %s = %llu bytes, but data_offsets [%llu, %llu] hold %llu",
                          what, q, (unsigned long long)t->numel, dtypes[t->dtype].name, (unsigned long long)t->nbytes,
                          (unsigned long long)t->begin, (unsigned long long)t->end,
                          (unsigned long long)(t->end - t->begin));
    return WGML_OK;
}

static wgml_status parse_metadata(wgml_safetensors *st, const char *what, const cJSON *m)
{
    if (!cJSON_IsObject(m))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: __metadata__ must be an object, not %s", what, wgml__json_type(m));
    wgml_status s = wgml__json_unique_keys(what, "__metadata__", m);
    if (s) return s;
    size_t n = 0;
    for (const cJSON *c = m->child; c; c = c->next) n++;
    st->meta_keys = calloc(n + 1, sizeof *st->meta_keys);
    st->meta_values = calloc(n + 1, sizeof *st->meta_values);
    if (!st->meta_keys || !st->meta_values) return oom(what);
    for (const cJSON *c = m->child; c; c = c->next) {
        const char *k = c->string ? c->string : "";
        if (!cJSON_IsString(c)) {
            char q[WGML__QUOTE_MAX];
            return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: __metadata__ value of '%s' must be a string, not %s", what,
                              wgml__quote(q, sizeof q, k, strlen(k)), wgml__json_type(c));
        }
        st->meta_keys[st->nmeta] = k;
        st->meta_values[st->nmeta] = c->valuestring;
        st->nmeta++;
    }
    return WGML_OK;
}

typedef struct range { uint64_t begin, end; size_t index; } range;

static int range_cmp(const void *a, const void *b)
{
    const range *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* The tensors' ranges must tile [0, data_size) exactly. */
static wgml_status check_coverage(wgml_safetensors *st, const char *what, uint64_t data_size)
{
    range *r = malloc((st->count ? st->count : 1) * sizeof *r);
    if (!r) return oom(what);
    for (size_t i = 0; i < st->count; i++) r[i] = (range){ st->tensors[i].begin, st->tensors[i].end, i };
    qsort(r, st->count, sizeof *r, range_cmp);
    uint64_t pos = 0;
    wgml_status s = WGML_OK;
    char q1[WGML__QUOTE_MAX], q2[WGML__QUOTE_MAX];
    for (size_t i = 0; i < st->count && !s; i++) {
        if (r[i].begin < pos) {
            const char *a = st->tensors[r[i - 1].index].name, *b = st->tensors[r[i].index].name;
            s = wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: tensors '%s' and '%s' overlap (data_offsets [%llu, %llu] and [%llu, %llu])",
                           what, wgml__quote(q1, sizeof q1, a, strlen(a)), wgml__quote(q2, sizeof q2, b, strlen(b)),
                           (unsigned long long)r[i - 1].begin, (unsigned long long)r[i - 1].end,
                           (unsigned long long)r[i].begin, (unsigned long long)r[i].end);
        } else if (r[i].begin > pos) {
            s = wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: data bytes [%llu, %llu) belong to no tensor (the data must have no holes)",
                           what, (unsigned long long)pos, (unsigned long long)r[i].begin);
        }
        pos = r[i].end;
    }
    if (!s && pos != data_size)
        s = wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: data bytes [%llu, %llu) at the end belong to no tensor", what,
                       (unsigned long long)pos, (unsigned long long)data_size);
    free(r);
    return s;
}

static wgml_status st_parse(wgml_safetensors *st)
{
    const char *what = st->name;
    if (st->size < 8)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: the file is %zu bytes, too short for the 8-byte header length", what,
                          st->size);
    uint64_t n = le64(st->base);
    /* The length is not quoted: for a file that is not safetensors at all, these are just
       its first 8 bytes. */
    if (n > WGML_SAFETENSORS_MAX_HEADER)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: not a safetensors file (its header length is over the limit of %u "
                          "bytes)", what, WGML_SAFETENSORS_MAX_HEADER);
    if (n > st->size - 8)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: not a safetensors file (its header length runs past the end of the "
                          "file, %zu bytes)", what, st->size);
    if (n == 0 || st->base[8] != '{')
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: the header does not start with '{'", what);
    st->data_start = 8 + n;
    uint64_t data_size = st->size - st->data_start;

    char hwhat[WGML__QUOTE_MAX + 16];
    snprintf(hwhat, sizeof hwhat, "%s: header", what);
    wgml_status s = wgml__json_parse(hwhat, (const char *)st->base + 8, (size_t)n, HEADER_BYTES_PER_VALUE, &st->header);
    if (s) return s;
    const cJSON *root = st->header;
    if (!cJSON_IsObject(root))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: the header must be a JSON object, not %s", what, wgml__json_type(root));

    size_t n_items = 0;
    for (const cJSON *c = root->child; c; c = c->next) n_items++;
    if (!wgml__strmap_init(&st->by_name, n_items)) return oom(what);
    st->tensors = calloc(n_items ? n_items : 1, sizeof *st->tensors);
    if (!st->tensors) return oom(what);

    for (const cJSON *c = root->child; c; c = c->next) {
        const char *key = c->string ? c->string : "";
        bool meta = strcmp(key, "__metadata__") == 0;
        int r = wgml__strmap_put(&st->by_name, key, strlen(key), meta ? NO_TENSOR : (uint32_t)st->count, NULL);
        if (r < 0) return oom(what);
        if (r == 0) {
            char q[WGML__QUOTE_MAX];
            return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: '%s' appears twice in the header", what,
                              wgml__quote(q, sizeof q, key, strlen(key)));
        }
        if (meta) s = parse_metadata(st, what, c);
        else if (st->count >= NO_TENSOR) s = wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: too many tensors", what);
        else s = parse_tensor(what, c, data_size, &st->tensors[st->count++]);
        if (s) return s;
    }
    return check_coverage(st, what, data_size);
}

static wgml_status st_new(const char *name, wgml_safetensors **out)
{
    wgml_safetensors *st = calloc(1, sizeof *st);
    if (!st || !(st->name = strdup(name))) {
        free(st);
        return wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", name);
    }
    *out = st;
    return WGML_OK;
}

void wgml_safetensors_close(wgml_safetensors *st)
{
    if (!st) return;
    if (st->map) munmap(st->map, st->size);
    cJSON_Delete(st->header);
    wgml__strmap_free(&st->by_name);
    free(st->tensors);
    free(st->meta_keys);
    free(st->meta_values);
    free(st->name);
    free(st);
}

wgml_status wgml_safetensors_open_memory(const void *data, size_t size, const char *name, wgml_safetensors **out)
{
    if (out) *out = NULL;
    if (!out || (!data && size))
        return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_safetensors_open_memory: out and data must not be NULL");
    wgml_safetensors *st = NULL;
    wgml_status s = st_new(name ? name : "memory", &st);
    if (s) return s;
    st->base = data;
    st->size = size;
    if ((s = st_parse(st))) {
        wgml_safetensors_close(st);
        return s;
    }
    *out = st;
    return WGML_OK;
}

/* wgml_safetensors_open; in_folder as for wgml__open_file (a checkpoint's files must
   resolve inside its folder). */
static wgml_status st_open(const char *path, bool in_folder, wgml_safetensors **out)
{
    if (out) *out = NULL;
    if (!path || !out)
        return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_safetensors_open: path and out must not be NULL");
    char eb[128];
    int fd;
    uint64_t fsize;
    wgml_status s = wgml__open_file(path, in_folder, &fd, &fsize);
    if (s) return s;
    if (fsize > SIZE_MAX) {
        close(fd);
        return wgml__fail(NULL, WGML_ERROR_IO, "%s: too large to map", path);
    }
    wgml_safetensors *st = NULL;
    s = st_new(path, &st);
    if (s) {
        close(fd);
        return s;
    }
    st->size = (size_t)fsize;
    if (st->size > 0) {
        void *m = mmap(NULL, st->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int err = errno;
            close(fd);
            wgml_safetensors_close(st);
            if (strerror_r(err, eb, sizeof eb)) snprintf(eb, sizeof eb, "error %d", err);
            return wgml__fail(NULL, WGML_ERROR_IO, "%s: cannot map: %s", path, eb);
        }
        st->map = m;
        st->base = m;
    }
    close(fd);
    if ((s = st_parse(st))) {
        wgml_safetensors_close(st);
        return s;
    }
    *out = st;
    return WGML_OK;
}

wgml_status wgml_safetensors_open(const char *path, wgml_safetensors **out) { return st_open(path, false, out); }

size_t wgml_safetensors_count(const wgml_safetensors *st) { return st ? st->count : 0; }

static void fill_info(const wgml_safetensors *st, size_t i, uint32_t shard, wgml_file_tensor *info)
{
    const st_tensor *t = &st->tensors[i];
    *info = (wgml_file_tensor){ .name = t->name, .dtype = t->dtype, .ndim = t->ndim, .numel = t->numel,
                                .nbytes = t->nbytes, .offset = st->data_start + t->begin, .shard = shard };
    memcpy(info->shape, t->shape, sizeof info->shape);
}

wgml_status wgml_safetensors_info(const wgml_safetensors *st, size_t i, wgml_file_tensor *info)
{
    if (!st || !info) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_safetensors_info: st and info must not be NULL");
    if (i >= st->count)
        return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_safetensors_info: i = %zu is not below the %zu tensors", i,
                          st->count);
    fill_info(st, i, 0, info);
    return WGML_OK;
}

int64_t wgml_safetensors_find(const wgml_safetensors *st, const char *name)
{
    uint32_t v;
    if (!st || !name || !wgml__strmap_get(&st->by_name, name, strlen(name), &v) || v == NO_TENSOR) return -1;
    return v;
}

const void *wgml_safetensors_data(const wgml_safetensors *st, size_t i)
{
    if (!st || i >= st->count) return NULL;
    return st->base + st->data_start + st->tensors[i].begin;
}

size_t wgml_safetensors_metadata_count(const wgml_safetensors *st) { return st ? st->nmeta : 0; }

wgml_status wgml_safetensors_metadata_item(const wgml_safetensors *st, size_t i, const char **key, const char **value)
{
    if (!st || !key || !value)
        return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_safetensors_metadata_item: st, key and value must not be NULL");
    if (i >= st->nmeta)
        return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_safetensors_metadata_item: i = %zu is not below the %zu entries",
                          i, st->nmeta);
    *key = st->meta_keys[i];
    *value = st->meta_values[i];
    return WGML_OK;
}

const char *wgml_safetensors_metadata(const wgml_safetensors *st, const char *key)
{
    if (!st || !key) return NULL;
    for (size_t i = 0; i < st->nmeta; i++)
        if (strcmp(st->meta_keys[i], key) == 0) return st->meta_values[i];
    return NULL;
}

/* ---- the writer --------------------------------------------------------------------- */

typedef struct strbuf { char *p; size_t len, cap; bool oom; } strbuf;

static void sb_add(strbuf *b, const char *s, size_t n)
{
    if (b->oom) return;
    if (n > SIZE_MAX / 2 - b->len) { b->oom = true; return; }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = true; return; }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void sb_str(strbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

static void sb_u64(strbuf *b, uint64_t v)
{
    char t[24];
    snprintf(t, sizeof t, "%llu", (unsigned long long)v);
    sb_str(b, t);
}

/* A JSON string literal of valid UTF-8 s. */
static void sb_json_string(strbuf *b, const char *s)
{
    sb_add(b, "\"", 1);
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"') sb_add(b, "\\\"", 2);
        else if (c == '\\') sb_add(b, "\\\\", 2);
        else if (c < 0x20) {
            char t[8];
            snprintf(t, sizeof t, "\\u%04x", c);
            sb_add(b, t, 6);
        } else sb_add(b, p, 1);
    }
    sb_add(b, "\"", 1);
}

static const char *WFN = "wgml_safetensors_write";

static bool write_all(int fd, const void *data, uint64_t n)
{
    const uint8_t *p = data;
    while (n > 0) {
        size_t chunk = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : (size_t)n;
        ssize_t w = write(fd, p, chunk);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w;
        n -= (uint64_t)w;
    }
    return true;
}

typedef struct w_item { size_t index; uint32_t bits; uint64_t nbytes; } w_item;

static int w_item_cmp(const void *a, const void *b)
{
    const w_item *x = a, *y = b;
    if (x->bits != y->bits) return x->bits > y->bits ? -1 : 1;   /* larger elements first */
    return x->index < y->index ? -1 : x->index > y->index;
}

/* The metadata as a JSON object text re-serialised from metadata_json (validated). */
static wgml_status build_metadata(const char *metadata_json, strbuf *out)
{
    cJSON *m;
    char what[64];
    snprintf(what, sizeof what, "%s: metadata_json", WFN);
    wgml_status s = wgml__json_parse(what, metadata_json, strlen(metadata_json), 0, &m);
    if (s == WGML_ERROR_FORMAT) return WGML_ERROR_INVALID_ARGUMENT;   /* the message stands */
    if (s) return s;
    if (!cJSON_IsObject(m)) {
        cJSON_Delete(m);
        return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: metadata_json must be a JSON object", WFN);
    }
    if ((s = wgml__json_unique_keys(what, "the object", m))) {
        cJSON_Delete(m);
        return s == WGML_ERROR_FORMAT ? WGML_ERROR_INVALID_ARGUMENT : s;
    }
    sb_str(out, "{");
    for (const cJSON *c = m->child; c; c = c->next) {
        if (!cJSON_IsString(c)) {
            cJSON_Delete(m);
            return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: metadata_json values must be strings", WFN);
        }
        if (c != m->child) sb_str(out, ",");
        sb_json_string(out, c->string ? c->string : "");
        sb_str(out, ":");
        sb_json_string(out, c->valuestring);
    }
    sb_str(out, "}");
    cJSON_Delete(m);
    return WGML_OK;
}

wgml_status wgml_safetensors_write(const char *path, const wgml_safetensors_entry *entries, size_t n,
                                   const char *metadata_json)
{
    if (!path || (!entries && n))
        return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: path must not be NULL, nor entries when n > 0", WFN);
    if (n >= NO_TENSOR) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: n = %zu tensors is too many", WFN, n);

    wgml_status s = WGML_OK;
    w_item *items = malloc((n ? n : 1) * sizeof *items);
    strbuf h = { 0 };
    wgml__strmap names = { 0 };
    char *tmp = NULL;
    int fd = -1;
    if (!items || !wgml__strmap_init(&names, n)) {
        s = wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", WFN);
        goto done;
    }

    /* validate every entry before touching the file system */
    for (size_t i = 0; i < n && !s; i++) {
        const wgml_safetensors_entry *e = &entries[i];
        if (!e->name) { s = wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: entries[%zu].name is NULL", WFN, i); break; }
        size_t len = strlen(e->name);
        char q[WGML__QUOTE_MAX];
        wgml__quote(q, sizeof q, e->name, len);
        if (wgml__utf8_check((const uint8_t *)e->name, len) != len)
            s = wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: entries[%zu].name '%s' is not valid UTF-8", WFN, i, q);
        else if (strcmp(e->name, "__metadata__") == 0)
            s = wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: entries[%zu].name may not be __metadata__", WFN, i);
        else if ((unsigned)e->dtype >= WGML_ST_DTYPE_COUNT)
            s = wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: entries[%zu].dtype %d is not a safetensors dtype", WFN, i,
                           (int)e->dtype);
        else if (e->ndim > WGML_SAFETENSORS_MAX_DIMS)
            s = wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: entries[%zu].ndim %u is over %d", WFN, i, e->ndim,
                           WGML_SAFETENSORS_MAX_DIMS);
        if (s) break;
        int r = wgml__strmap_put(&names, e->name, len, (uint32_t)i, NULL);
        if (r < 0) { s = wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", WFN); break; }
        if (r == 0) { s = wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: entries[%zu].name '%s' appears twice", WFN, i, q); break; }
        uint64_t numel = 1;
        bool zero = false;
        for (uint32_t d = 0; d < e->ndim; d++) {
            if (e->shape[d] > WGML__JSON_INT_MAX) {
                s = wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: entries[%zu].shape[%u] is over 2^53", WFN, i, d);
                break;
            }
            zero |= e->shape[d] == 0;
        }
        if (s) break;
        if (zero) numel = 0;
        else
            for (uint32_t d = 0; d < e->ndim; d++) {
                if (numel > UINT64_MAX / e->shape[d]) {
                    s = wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: entries[%zu] has more than 2^64 elements", WFN, i);
                    break;
                }
                numel *= e->shape[d];
            }
        if (s) break;
        uint32_t bits = dtypes[e->dtype].bits;
        if (numel > UINT64_MAX / bits || numel * bits % 8 != 0) {
            s = wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: entries[%zu] (%llu elements of %s) is not a whole number of bytes",
                           WFN, i, (unsigned long long)numel, dtypes[e->dtype].name);
            break;
        }
        items[i] = (w_item){ i, bits, numel * bits / 8 };
        if (items[i].nbytes && !e->data)
            s = wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: entries[%zu].data is NULL", WFN, i);
    }
    if (s) goto done;
    qsort(items, n, sizeof *items, w_item_cmp);

    /* the header */
    sb_str(&h, "{");
    if (metadata_json) {
        sb_str(&h, "\"__metadata__\":");
        if ((s = build_metadata(metadata_json, &h))) goto done;
    }
    uint64_t offset = 0;
    for (size_t k = 0; k < n; k++) {
        const wgml_safetensors_entry *e = &entries[items[k].index];
        if (h.len > 1) sb_str(&h, ",");
        sb_json_string(&h, e->name);
        sb_str(&h, ":{\"dtype\":\"");
        sb_str(&h, dtypes[e->dtype].name);
        sb_str(&h, "\",\"shape\":[");
        for (uint32_t d = 0; d < e->ndim; d++) {
            if (d) sb_str(&h, ",");
            sb_u64(&h, e->shape[d]);
        }
        sb_str(&h, "],\"data_offsets\":[");
        sb_u64(&h, offset);
        sb_str(&h, ",");
        if (items[k].nbytes > WGML__JSON_INT_MAX - offset) {
            s = wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: the tensors hold more than 2^53 bytes", WFN);
            goto done;
        }
        offset += items[k].nbytes;
        sb_u64(&h, offset);
        sb_str(&h, "]}");
    }
    sb_str(&h, "}");
    while (!h.oom && (8 + h.len) % 8 != 0) sb_str(&h, " ");
    if (h.oom) { s = wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", WFN); goto done; }
    if (h.len > WGML_SAFETENSORS_MAX_HEADER) {
        s = wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: the header would be %zu bytes, over the limit of %u", WFN,
                       h.len, WGML_SAFETENSORS_MAX_HEADER);
        goto done;
    }

    /* the file: written beside path, then renamed over it */
    size_t tlen = strlen(path) + 32;
    tmp = malloc(tlen);
    if (!tmp) { s = wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", WFN); goto done; }
    snprintf(tmp, tlen, "%s.tmp.%ld", path, (long)getpid());
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0666);
    bool ok = fd >= 0;
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)h.len >> (8 * i));
    ok = ok && write_all(fd, len8, 8) && write_all(fd, h.p, h.len);
    for (size_t k = 0; k < n && ok; k++) ok = write_all(fd, entries[items[k].index].data, items[k].nbytes);
    ok = ok && fsync(fd) == 0;
    if (fd >= 0 && close(fd) != 0) ok = false;
    fd = -1;
    ok = ok && rename(tmp, path) == 0;
    if (!ok) {
        int err = errno;
        char eb[128];
        if (strerror_r(err, eb, sizeof eb)) snprintf(eb, sizeof eb, "error %d", err);
        unlink(tmp);
        s = wgml__fail(NULL, WGML_ERROR_IO, "%s: cannot write: %s", path, eb);
    }

done:
    if (fd >= 0) close(fd);
    free(tmp);
    free(h.p);
    free(items);
    wgml__strmap_free(&names);
    return s;
}

/* ---- checkpoints -------------------------------------------------------------------- */

#define INDEX_NAME "model.safetensors.index.json"
#define SINGLE_NAME "model.safetensors"
#define INDEX_MAX_BYTES ((size_t)64 << 20)
/* an entry "<tensor>": "<file>" is one value of at least 6 bytes */
#define INDEX_BYTES_PER_VALUE 6

/* Shard names: plain file names only, so an index cannot point outside its folder, and
   without control characters (they end up in messages). */
static bool plain_file_name(const char *s)
{
    size_t n = strlen(s);
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7F) return false;
    return n > 0 && n <= 255 && !strchr(s, '/') && !strchr(s, '\\') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

static int cstr_cmp(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

wgml_status wgml__st_index_parse(const char *what, const char *json, size_t len, wgml__st_index *ix)
{
    memset(ix, 0, sizeof *ix);
    wgml_status s = wgml__json_parse(what, json, len, INDEX_BYTES_PER_VALUE, &ix->root);
    if (s) return s;
    const cJSON *root = ix->root;
    if (!cJSON_IsObject(root))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: must be a JSON object, not %s", what, wgml__json_type(root));
    if ((s = wgml__json_unique_keys(what, "the index", root))) return s;
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "metadata");
    if (meta && !cJSON_IsObject(meta) && !cJSON_IsNull(meta))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: metadata must be an object, not %s", what, wgml__json_type(meta));
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!wm) return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: no weight_map", what);
    if (!cJSON_IsObject(wm))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: weight_map must be an object, not %s", what, wgml__json_type(wm));
    if ((s = wgml__json_unique_keys(what, "weight_map", wm))) return s;
    size_t n = 0;
    for (const cJSON *c = wm->child; c; c = c->next) n++;
    if (n >= UINT32_MAX) return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: too many tensors", what);
    ix->names = calloc(n + 1, sizeof *ix->names);
    ix->shard_of = calloc(n + 1, sizeof *ix->shard_of);
    const char **files = calloc(n + 1, sizeof *files);
    ix->shards = calloc(n + 1, sizeof *ix->shards);
    if (!ix->names || !ix->shard_of || !files || !ix->shards) {
        free(files);
        return oom(what);
    }
    for (const cJSON *c = wm->child; c; c = c->next) {
        const char *k = c->string ? c->string : "";
        char q[WGML__QUOTE_MAX], qf[WGML__QUOTE_MAX];
        wgml__quote(q, sizeof q, k, strlen(k));
        if (!cJSON_IsString(c)) {
            free(files);
            return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: weight_map value of '%s' must be a string, not %s", what, q,
                              wgml__json_type(c));
        }
        if (!plain_file_name(c->valuestring)) {
            free(files);
            return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: weight_map sends '%s' to '%s', which is not a plain file name", what,
                              q, wgml__quote(qf, sizeof qf, c->valuestring, strlen(c->valuestring)));
        }
        ix->names[ix->nnames] = k;
        files[ix->nnames] = c->valuestring;
        ix->nnames++;
    }
    /* the distinct shard names, sorted */
    memcpy(ix->shards, files, n * sizeof *files);
    qsort(ix->shards, n, sizeof *ix->shards, cstr_cmp);
    for (size_t i = 0; i < n; i++)
        if (ix->nshards == 0 || strcmp(ix->shards[ix->nshards - 1], ix->shards[i]) != 0) ix->shards[ix->nshards++] = ix->shards[i];
    for (size_t i = 0; i < n; i++) {
        const char **hit = bsearch(&files[i], ix->shards, ix->nshards, sizeof *ix->shards, cstr_cmp);
        ix->shard_of[i] = (uint32_t)(hit - ix->shards);
    }
    free(files);
    return WGML_OK;
}

void wgml__st_index_free(wgml__st_index *ix)
{
    cJSON_Delete(ix->root);
    free(ix->names);
    free(ix->shard_of);
    free(ix->shards);
    memset(ix, 0, sizeof *ix);
}

typedef struct ck_item { uint32_t shard, index; } ck_item;

struct wgml_checkpoint {
    wgml_safetensors **shards;
    size_t nshards;
    ck_item *items;
    size_t count;
    wgml__strmap by_name;   /* name -> position in items */
};

void wgml_checkpoint_close(wgml_checkpoint *ck)
{
    if (!ck) return;
    for (size_t i = 0; i < ck->nshards; i++) wgml_safetensors_close(ck->shards[i]);
    free(ck->shards);
    free(ck->items);
    wgml__strmap_free(&ck->by_name);
    free(ck);
}

/* Joins dir and name with a '/' (dir "" means the current folder). */
static char *join_path(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    size_t o = a;
    if (a && dir[a - 1] != '/') p[o++] = '/';
    memcpy(p + o, name, b + 1);
    return p;
}

/* Indexes every tensor of every shard by name; names must be unique across shards. */
static wgml_status ck_index(wgml_checkpoint *ck, const char *what)
{
    size_t total = 0;
    for (size_t i = 0; i < ck->nshards; i++) total += ck->shards[i]->count;
    ck->items = malloc((total ? total : 1) * sizeof *ck->items);
    if (!ck->items || !wgml__strmap_init(&ck->by_name, total)) return oom(what);
    for (size_t sh = 0; sh < ck->nshards; sh++)
        for (size_t t = 0; t < ck->shards[sh]->count; t++) {
            const char *name = ck->shards[sh]->tensors[t].name;
            uint32_t prev;
            int r = wgml__strmap_put(&ck->by_name, name, strlen(name), (uint32_t)ck->count, &prev);
            if (r < 0) return oom(what);
            if (r == 0) {
                char q[WGML__QUOTE_MAX];
                return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: tensor '%s' is in both %s and %s", what,
                                  wgml__quote(q, sizeof q, name, strlen(name)), ck->shards[ck->items[prev].shard]->name,
                                  ck->shards[sh]->name);
            }
            ck->items[ck->count++] = (ck_item){ (uint32_t)sh, (uint32_t)t };
        }
    return WGML_OK;
}

static wgml_status ck_open_index(wgml_checkpoint *ck, const char *index_path)
{
    char *json;
    size_t len;
    wgml_status s = wgml__read_file(index_path, true, INDEX_MAX_BYTES, &json, &len);
    if (s) return s;
    wgml__st_index ix;
    s = wgml__st_index_parse(index_path, json, len, &ix);
    free(json);
    if (s) {
        wgml__st_index_free(&ix);
        return s;
    }
    /* the folder of the index */
    char *dir = strdup(index_path);
    if (!dir) {
        wgml__st_index_free(&ix);
        return oom(index_path);
    }
    char *slash = strrchr(dir, '/');
    if (slash) slash[1] = 0;
    else dir[0] = 0;
    ck->shards = calloc(ix.nshards ? ix.nshards : 1, sizeof *ck->shards);
    if (!ck->shards) s = oom(index_path);
    for (size_t i = 0; i < ix.nshards && !s; i++) {
        char *p = join_path(dir, ix.shards[i]);
        if (!p) { s = oom(index_path); break; }
        s = st_open(p, true, &ck->shards[i]);
        free(p);
        if (!s) ck->nshards++;
    }
    free(dir);
    if (!s) s = ck_index(ck, index_path);
    /* every tensor the weight_map lists is in the shard it names */
    for (size_t i = 0; i < ix.nnames && !s; i++) {
        const wgml_safetensors *sh = ck->shards[ix.shard_of[i]];
        if (wgml_safetensors_find(sh, ix.names[i]) < 0) {
            char q[WGML__QUOTE_MAX];
            s = wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: weight_map puts tensor '%s' in %s, which does not hold it", index_path,
                           wgml__quote(q, sizeof q, ix.names[i], strlen(ix.names[i])), sh->name);
        }
    }
    wgml__st_index_free(&ix);
    return s;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* Whether the folder has an entry of that name, of any kind: a FIFO or a dangling link is
   then opened, and refused for what it is, rather than passed over in silence. */
static bool has_entry(const char *p)
{
    struct stat sb;
    return lstat(p, &sb) == 0;
}

wgml_status wgml_checkpoint_open(const char *path, wgml_checkpoint **out)
{
    if (out) *out = NULL;
    if (!path || !out) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_checkpoint_open: path and out must not be NULL");
    wgml_checkpoint *ck = calloc(1, sizeof *ck);
    if (!ck) return oom(path);
    wgml_status s;
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        char *ip = join_path(path, INDEX_NAME), *sp = join_path(path, SINGLE_NAME);
        if (!ip || !sp) s = oom(path);
        else if (has_entry(ip)) s = ck_open_index(ck, ip);
        else if (has_entry(sp)) {
            ck->shards = calloc(1, sizeof *ck->shards);
            s = ck->shards ? st_open(sp, true, &ck->shards[0]) : oom(path);
            if (!s) ck->nshards = 1;
            if (!s) s = ck_index(ck, sp);
        } else
            s = wgml__fail(NULL, WGML_ERROR_IO, "%s: holds neither %s nor %s", path, INDEX_NAME, SINGLE_NAME);
        free(ip);
        free(sp);
    } else if (ends_with(path, ".json")) {
        s = ck_open_index(ck, path);
    } else {
        ck->shards = calloc(1, sizeof *ck->shards);
        s = ck->shards ? st_open(path, true, &ck->shards[0]) : oom(path);
        if (!s) ck->nshards = 1;
        if (!s) s = ck_index(ck, path);
    }
    if (s) {
        wgml_checkpoint_close(ck);
        return s;
    }
    *out = ck;
    return WGML_OK;
}

size_t wgml_checkpoint_count(const wgml_checkpoint *ck) { return ck ? ck->count : 0; }
size_t wgml_checkpoint_shard_count(const wgml_checkpoint *ck) { return ck ? ck->nshards : 0; }

const wgml_safetensors *wgml_checkpoint_shard(const wgml_checkpoint *ck, size_t i)
{
    return ck && i < ck->nshards ? ck->shards[i] : NULL;
}

wgml_status wgml_checkpoint_info(const wgml_checkpoint *ck, size_t i, wgml_file_tensor *info)
{
    if (!ck || !info) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_checkpoint_info: ck and info must not be NULL");
    if (i >= ck->count)
        return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_checkpoint_info: i = %zu is not below the %zu tensors", i,
                          ck->count);
    fill_info(ck->shards[ck->items[i].shard], ck->items[i].index, ck->items[i].shard, info);
    return WGML_OK;
}

int64_t wgml_checkpoint_find(const wgml_checkpoint *ck, const char *name)
{
    uint32_t v;
    if (!ck || !name || !wgml__strmap_get(&ck->by_name, name, strlen(name), &v)) return -1;
    return v;
}

const void *wgml_checkpoint_data(const wgml_checkpoint *ck, size_t i)
{
    if (!ck || i >= ck->count) return NULL;
    return wgml_safetensors_data(ck->shards[ck->items[i].shard], ck->items[i].index);
}
