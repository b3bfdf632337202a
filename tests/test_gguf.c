/* The GGUF reader: files built here (every metadata type, arrays of numbers and strings,
   tensors of several ggml types at their alignment) read back exactly; every hostile
   variant (each truncation, bad magic or version, duplicate names, bad UTF-8, unknown
   types, misaligned, overlapping or outlying tensors, counts too large for the file) is
   refused with the documented status and a message naming the problem. */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- a small GGUF writer ---------------------------------------------------------------- */

typedef struct buf { uint8_t *p; size_t n, cap; } buf;

static void put(buf *b, const void *data, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}
static void u32(buf *b, uint32_t v) { uint8_t x[4] = { (uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24) }; put(b, x, 4); }
static void u64(buf *b, uint64_t v) { u32(b, (uint32_t)v); u32(b, (uint32_t)(v >> 32)); }
static void str(buf *b, const char *s) { u64(b, strlen(s)); put(b, s, strlen(s)); }
static void pad_to(buf *b, size_t a) { while (b->n % a) put(b, "", 1); }

typedef struct tensor_spec { const char *name; uint32_t type, ndim; uint64_t shape[4]; } tensor_spec;

/* A file: header, the key / value pairs given as raw bytes (kvs, nkv of them), the
   tensors' infos with offsets packed at the alignment, padding, the data (each tensor's
   bytes filled with its index + its byte's index). */
static buf build(uint32_t version, const buf *kvs, uint64_t nkv, const tensor_spec *t, size_t nt, size_t align)
{
    buf b = { 0 };
    put(&b, "GGUF", 4);
    u32(&b, version);
    u64(&b, nt);
    u64(&b, nkv);
    if (kvs->n) put(&b, kvs->p, kvs->n);
    uint64_t off = 0, sizes[8];
    for (size_t i = 0; i < nt; i++) {
        uint32_t el = 1, by = 4;
        wgml_ggml_type_block((wgml_ggml_type)t[i].type, &el, &by);
        uint64_t numel = 1;
        for (uint32_t d = 0; d < t[i].ndim; d++) numel *= t[i].shape[d];
        sizes[i] = numel / el * by;
        str(&b, t[i].name);
        u32(&b, t[i].ndim);
        for (uint32_t d = 0; d < t[i].ndim; d++) u64(&b, t[i].shape[d]);
        u32(&b, t[i].type);
        u64(&b, off);
        off += (sizes[i] + align - 1) / align * align;
    }
    pad_to(&b, align);
    for (size_t i = 0; i < nt; i++) {
        for (uint64_t j = 0; j < sizes[i]; j++) put(&b, &(uint8_t){ (uint8_t)(i * 16 + j) }, 1);
        pad_to(&b, align);
    }
    return b;
}

/* Key / value pairs of every type. */
static buf all_kinds(uint64_t *nkv)
{
    buf k = { 0 };
    str(&k, "general.architecture"); u32(&k, WGML_GGUF_STRING); str(&k, "llama");
    str(&k, "u8"); u32(&k, WGML_GGUF_U8); put(&k, &(uint8_t){ 200 }, 1);
    str(&k, "i8"); u32(&k, WGML_GGUF_I8); put(&k, &(uint8_t){ 0xF6 }, 1);          /* -10 */
    str(&k, "u16"); u32(&k, WGML_GGUF_U16); put(&k, (uint8_t[]){ 0x34, 0x12 }, 2);
    str(&k, "i16"); u32(&k, WGML_GGUF_I16); put(&k, (uint8_t[]){ 0x00, 0x80 }, 2); /* -32768 */
    str(&k, "u32"); u32(&k, WGML_GGUF_U32); u32(&k, 4000000000u);
    str(&k, "i32"); u32(&k, WGML_GGUF_I32); u32(&k, (uint32_t)-7);
    str(&k, "f32"); u32(&k, WGML_GGUF_F32); u32(&k, 0x3FC00000u);                    /* 1.5 */
    str(&k, "bool"); u32(&k, WGML_GGUF_BOOL); put(&k, &(uint8_t){ 1 }, 1);
    str(&k, "u64"); u32(&k, WGML_GGUF_U64); u64(&k, 0xFFFFFFFFFFFFFFFFull);
    str(&k, "i64"); u32(&k, WGML_GGUF_I64); u64(&k, (uint64_t)-123456789012ll);
    str(&k, "f64"); u32(&k, WGML_GGUF_F64); u64(&k, 0xC009000000000000ull);          /* -3.125 */
    str(&k, "ints"); u32(&k, WGML_GGUF_ARRAY); u32(&k, WGML_GGUF_I32); u64(&k, 3);
    u32(&k, 5); u32(&k, (uint32_t)-6); u32(&k, 7);
    str(&k, "words"); u32(&k, WGML_GGUF_ARRAY); u32(&k, WGML_GGUF_STRING); u64(&k, 3);
    str(&k, "a"); str(&k, ""); str(&k, "\xc3\xa9t\xc3\xa9");
    str(&k, "general.alignment"); u32(&k, WGML_GGUF_U32); u32(&k, 64);
    *nkv = 15;
    return k;
}

static const tensor_spec good_tensors[] = {
    { "token_embd.weight", WGML_GGML_F32, 2, { 8, 3 } },
    { "blk.0.attn_q.weight", WGML_GGML_Q8_0, 2, { 64, 2 } },
    { "blk.0.ffn_down.weight", WGML_GGML_Q4_K, 2, { 256, 1 } },
    { "output_norm.weight", WGML_GGML_BF16, 1, { 5 } },
};
#define NGOOD (sizeof good_tensors / sizeof good_tensors[0])

static void test_reads_back(void)
{
    uint64_t nkv;
    buf k = all_kinds(&nkv);
    buf f = build(3, &k, nkv, good_tensors, NGOOD, 64);
    wgml_gguf *g = NULL;
    TH_EXPECT(wgml_gguf_open_memory(f.p, f.n, "good.gguf", &g), WGML_OK);
    if (!g) return;
    TH_CHECK(wgml_gguf_version(g) == 3 && wgml_gguf_alignment(g) == 64 && wgml_gguf_kv_count(g) == nkv &&
             wgml_gguf_tensor_count(g) == NGOOD, "version %u, alignment %u, %zu pairs, %zu tensors", wgml_gguf_version(g),
             wgml_gguf_alignment(g), wgml_gguf_kv_count(g), wgml_gguf_tensor_count(g));
    wgml_gguf_value v;
    const char *key;
#define KV(name) (wgml_gguf_kv(g, (size_t)wgml_gguf_kv_find(g, name), &key, &v) == WGML_OK && !strcmp(key, name))
    TH_CHECK(KV("general.architecture") && v.type == WGML_GGUF_STRING && v.len == 5 && !memcmp(v.str, "llama", 5), "string");
    TH_CHECK(KV("u8") && v.u == 200, "u8 %llu", (unsigned long long)v.u);
    TH_CHECK(KV("i8") && v.i == -10 && v.f == -10, "i8 %lld", (long long)v.i);
    TH_CHECK(KV("u16") && v.u == 0x1234, "u16");
    TH_CHECK(KV("i16") && v.i == -32768, "i16 %lld", (long long)v.i);
    TH_CHECK(KV("u32") && v.u == 4000000000u && v.i == 4000000000ll, "u32");
    TH_CHECK(KV("i32") && v.i == -7 && v.u == 0, "i32");
    TH_CHECK(KV("f32") && v.f == 1.5, "f32 %g", v.f);
    TH_CHECK(KV("bool") && v.type == WGML_GGUF_BOOL && v.u == 1, "bool");
    TH_CHECK(KV("u64") && v.u == UINT64_MAX && v.i == INT64_MAX, "u64");
    TH_CHECK(KV("i64") && v.i == -123456789012ll, "i64");
    TH_CHECK(KV("f64") && v.f == -3.125, "f64 %g", v.f);
    int64_t ints = wgml_gguf_kv_find(g, "ints"), words = wgml_gguf_kv_find(g, "words");
    TH_CHECK(KV("ints") && v.type == WGML_GGUF_ARRAY && v.elem_type == WGML_GGUF_I32 && v.count == 3, "ints array");
    const int64_t want_ints[] = { 5, -6, 7 };
    for (uint64_t j = 0; j < 3; j++)
        TH_CHECK(wgml_gguf_array_item(g, (size_t)ints, j, &v) == WGML_OK && v.i == want_ints[j], "ints[%llu]", (unsigned long long)j);
    const char *want_words[] = { "a", "", "\xc3\xa9t\xc3\xa9" };
    for (uint64_t j = 0; j < 3; j++)
        TH_CHECK(wgml_gguf_array_item(g, (size_t)words, j, &v) == WGML_OK && v.len == strlen(want_words[j]) &&
                 !memcmp(v.str, want_words[j], v.len), "words[%llu]", (unsigned long long)j);
    TH_EXPECT_ERR(wgml_gguf_array_item(g, (size_t)words, 3, &v), WGML_ERROR_INVALID_ARGUMENT, "fewer");
    TH_EXPECT_ERR(wgml_gguf_array_item(g, 0, 0, &v), WGML_ERROR_INVALID_ARGUMENT, "not an array");
    TH_CHECK(wgml_gguf_kv_find(g, "missing") == -1, "a missing key found");
#undef KV
    for (size_t i = 0; i < NGOOD; i++) {
        wgml_gguf_tensor t;
        TH_EXPECT(wgml_gguf_tensor_info(g, i, &t), WGML_OK);
        uint32_t el, by;
        wgml_ggml_type_block((wgml_ggml_type)good_tensors[i].type, &el, &by);
        uint64_t numel = good_tensors[i].shape[0] * (good_tensors[i].ndim > 1 ? good_tensors[i].shape[1] : 1);
        TH_CHECK(!strcmp(t.name, good_tensors[i].name) && t.type == (wgml_ggml_type)good_tensors[i].type &&
                 t.ndim == good_tensors[i].ndim && t.shape[0] == good_tensors[i].shape[0] && t.numel == numel &&
                 t.nbytes == numel / el * by && t.offset % 64 == 0, "tensor %zu: %s, %s, %llu bytes at %llu", i, t.name,
                 wgml_ggml_type_name(t.type), (unsigned long long)t.nbytes, (unsigned long long)t.offset);
        const uint8_t *d = wgml_gguf_tensor_data(g, i);
        bool same = d == f.p + t.offset;
        for (uint64_t j = 0; same && j < t.nbytes; j++) same = d[j] == (uint8_t)(i * 16 + j);
        TH_CHECK(same, "tensor %zu's bytes", i);
        TH_CHECK(wgml_gguf_tensor_find(g, t.name) == (int64_t)i, "find %s", t.name);
    }
    TH_CHECK(wgml_gguf_tensor_data(g, NGOOD) == NULL && wgml_gguf_tensor_find(g, "nope") == -1, "past the tensors");
    size_t end = 0;   /* of the last tensor's bytes: the padding after it is not required */
    for (size_t i = 0; i < NGOOD; i++) {
        wgml_gguf_tensor t;
        wgml_gguf_tensor_info(g, i, &t);
        if (t.offset + t.nbytes > end) end = (size_t)(t.offset + t.nbytes);
    }
    wgml_gguf_close(g);
    /* version 2, the default alignment, no tensors, no metadata; and from a file */
    buf none = { 0 };
    buf f2 = build(2, &none, 0, good_tensors, 1, 32);
    TH_EXPECT(wgml_gguf_open_memory(f2.p, f2.n, NULL, &g), WGML_OK);
    TH_CHECK(g && wgml_gguf_version(g) == 2 && wgml_gguf_alignment(g) == 32, "version 2 file");
    wgml_gguf_close(g);
    char path[] = "/tmp/wgml_test_gguf_XXXXXX";
    int fd = mkstemp(path);
    TH_CHECK(fd >= 0 && write(fd, f.p, f.n) == (ssize_t)f.n, "writing %s", path);
    if (fd >= 0) close(fd);
    TH_EXPECT(wgml_gguf_open(path, &g), WGML_OK);
    TH_CHECK(g && wgml_gguf_tensor_count(g) == NGOOD, "the file reads as the memory did");
    wgml_gguf_close(g);
    unlink(path);
    /* every prefix of a good file is refused, and says it is truncated */
    int wrong = 0;
    for (size_t n = 0; n < end; n++) {
        wgml_gguf *t = (wgml_gguf *)&t;
        wgml_status s = wgml_gguf_open_memory(f.p, n, "cut.gguf", &t);
        bool ok = s == WGML_ERROR_FORMAT && t == NULL && strstr(wgml_last_error(NULL), n < 4 ? "truncated" : "") != NULL;
        if (!ok && wrong++ < 3) TH_CHECK(false, "a prefix of %zu bytes: status %d, %s", n, s, wgml_last_error(NULL));
    }
    TH_CHECK(wrong == 0 && end > 200, "%d of %zu prefixes not refused as truncated", wrong, end);
    free(k.p);
    free(f.p);
    free(f2.p);
}

/* One hostile file: a header, pairs and tensors as given, refused with want naming needle. */
static void refused(const char *what, buf f, wgml_status want, const char *needle)
{
    wgml_gguf *g = (wgml_gguf *)&g;
    wgml_status s = wgml_gguf_open_memory(f.p, f.n, "bad.gguf", &g);
    TH_CHECK(s == want && g == NULL && strstr(wgml_last_error(NULL), needle) && strstr(wgml_last_error(NULL), "bad.gguf"),
             "%s: status %d (want %d), message \"%s\" (want \"%s\")", what, s, want, wgml_last_error(NULL), needle);
    free(f.p);
}

static buf one_kv(const char *key, uint32_t type, const void *value, size_t n)
{
    buf k = { 0 };
    u64(&k, strlen(key));
    put(&k, key, strlen(key));
    u32(&k, type);
    put(&k, value, n);
    return k;
}

static void test_hostile(void)
{
    buf none = { 0 };
    buf f = build(3, &none, 0, good_tensors, NGOOD, 32);
    memcpy(f.p, "GGUG", 4);
    refused("bad magic", f, WGML_ERROR_FORMAT, "magic");
    refused("version 1", build(1, &none, 0, NULL, 0, 32), WGML_ERROR_UNSUPPORTED, "version 1");
    refused("version 4", build(4, &none, 0, NULL, 0, 32), WGML_ERROR_FORMAT, "version 4");
    /* counts that cannot fit */
    f = build(3, &none, 0, NULL, 0, 32);
    f.p[16] = 0xFF, f.p[23] = 0x7F;   /* metadata count 2^62 + ... */
    refused("a metadata count past the file", f, WGML_ERROR_FORMAT, "cannot fit");
    f = build(3, &none, 0, NULL, 0, 32);
    f.p[8] = 5;
    refused("a tensor count past the file", f, WGML_ERROR_FORMAT, "cannot fit");
    /* metadata */
    buf k = { 0 };
    str(&k, "x"); u32(&k, WGML_GGUF_U8); put(&k, "\1", 1);
    str(&k, "x"); u32(&k, WGML_GGUF_U8); put(&k, "\2", 1);
    refused("a duplicate key", build(3, &k, 2, NULL, 0, 32), WGML_ERROR_FORMAT, "twice");
    free(k.p);
    buf b = one_kv("b", WGML_GGUF_BOOL, "\2", 1);
    refused("a bool of 2", build(3, &b, 1, NULL, 0, 32), WGML_ERROR_FORMAT, "bool");
    free(b.p);
    b = one_kv("t", 13, "\0\0\0\0", 4);
    refused("an unknown value type", build(3, &b, 1, NULL, 0, 32), WGML_ERROR_FORMAT, "value type 13");
    free(b.p);
    b = one_kv("aa", WGML_GGUF_ARRAY, (uint8_t[]){ WGML_GGUF_ARRAY, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }, 12);
    refused("an array of arrays", build(3, &b, 1, NULL, 0, 32), WGML_ERROR_FORMAT, "arrays of arrays");
    free(b.p);
    b = one_kv("big", WGML_GGUF_ARRAY, (uint8_t[]){ WGML_GGUF_U64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10 }, 12);
    refused("an array longer than the file", build(3, &b, 1, NULL, 0, 32), WGML_ERROR_FORMAT, "truncated");
    free(b.p);
    b = one_kv("s", WGML_GGUF_STRING, (uint8_t[]){ 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF }, 8);
    refused("a string longer than the file", build(3, &b, 1, NULL, 0, 32), WGML_ERROR_FORMAT, "truncated");
    free(b.p);
    b = one_kv("k\xff", WGML_GGUF_U8, "\1", 1);
    refused("a key that is not UTF-8", build(3, &b, 1, NULL, 0, 32), WGML_ERROR_FORMAT, "UTF-8");
    free(b.p);
    b = (buf){ 0 };
    u64(&b, 3); put(&b, "a\0b", 3); u32(&b, WGML_GGUF_U8); put(&b, "\1", 1);
    refused("a key with a NUL", build(3, &b, 1, NULL, 0, 32), WGML_ERROR_FORMAT, "NUL");
    free(b.p);
    b = one_kv("", WGML_GGUF_U8, "\1", 1);
    refused("an empty key", build(3, &b, 1, NULL, 0, 32), WGML_ERROR_FORMAT, "1 to 65535");
    free(b.p);
    b = one_kv("general.alignment", WGML_GGUF_U32, (uint8_t[]){ 48, 0, 0, 0 }, 4);
    refused("an alignment of 48", build(3, &b, 1, NULL, 0, 32), WGML_ERROR_FORMAT, "power of two");
    free(b.p);
    b = one_kv("general.alignment", WGML_GGUF_U64, (uint8_t[]){ 32, 0, 0, 0, 0, 0, 0, 0 }, 8);
    refused("an alignment that is not a u32", build(3, &b, 1, NULL, 0, 32), WGML_ERROR_FORMAT, "u32");
    free(b.p);
    /* tensors */
    tensor_spec t[2] = { { "w", WGML_GGML_F32, 2, { 4, 2 } }, { "w", WGML_GGML_F32, 1, { 4 } } };
    refused("a duplicate tensor", build(3, &none, 0, t, 2, 32), WGML_ERROR_FORMAT, "twice");
    t[0] = (tensor_spec){ "w", 18, 1, { 4 } };
    refused("an unknown ggml type", build(3, &none, 0, t, 1, 32), WGML_ERROR_UNSUPPORTED, "ggml type 18");
    t[0] = (tensor_spec){ "w", WGML_GGML_Q4_0, 2, { 48, 2 } };
    refused("a row that is not whole blocks", build(3, &none, 0, t, 1, 32), WGML_ERROR_FORMAT, "whole Q4_0 blocks of 32");
    t[0] = (tensor_spec){ "w", WGML_GGML_F32, 2, { 4, 0 } };
    refused("a zero dimension", build(3, &none, 0, t, 1, 32), WGML_ERROR_FORMAT, "dimension 1 is 0");
    t[0] = (tensor_spec){ "w", WGML_GGML_F32, 2, { 1ull << 40, 1ull << 30 } };
    refused("a tensor of 2^70 values", build(3, &none, 0, t, 1, 32), WGML_ERROR_FORMAT, "63 bits");
    /* five dimensions, a misaligned offset, an offset past the data, overlapping tensors:
       written by hand into a good file's infos */
    t[0] = (tensor_spec){ "w", WGML_GGML_F32, 1, { 8 } };
    t[1] = (tensor_spec){ "v", WGML_GGML_F32, 1, { 8 } };
    size_t info0 = 24 + 8 + 1;   /* the first tensor's dimension count */
    f = build(3, &none, 0, t, 2, 32);
    f.p[info0] = 5;
    refused("five dimensions", f, WGML_ERROR_FORMAT, "5 dimensions");
    size_t off0 = info0 + 4 + 8 + 4, off1 = off0 + 8 + 8 + 1 + 4 + 8 + 4;
    f = build(3, &none, 0, t, 2, 32);
    f.p[off1] = 4;
    refused("a misaligned offset", f, WGML_ERROR_FORMAT, "not a multiple of the alignment");
    f = build(3, &none, 0, t, 2, 32);
    f.p[off1] = 64;
    refused("a tensor past the data", f, WGML_ERROR_FORMAT, "past the data section");
    f = build(3, &none, 0, t, 2, 32);
    f.p[off1] = 0;
    refused("overlapping tensors", f, WGML_ERROR_FORMAT, "overlap");
    f = build(3, &none, 0, t, 2, 32);
    f.p[off0] = 0xFF;
    f.p[off0 + 7] = 0xFF;
    refused("an offset near 2^64", f, WGML_ERROR_FORMAT, "not a multiple");
    /* arguments */
    wgml_gguf *g = (wgml_gguf *)&g;
    TH_EXPECT_ERR(wgml_gguf_open_memory(NULL, 4, "x", &g), WGML_ERROR_INVALID_ARGUMENT, "NULL");
    TH_EXPECT_ERR(wgml_gguf_open(NULL, &g), WGML_ERROR_INVALID_ARGUMENT, "NULL");
    TH_EXPECT_ERR(wgml_gguf_open("/nonexistent.gguf", &g), WGML_ERROR_IO, "nonexistent");
    TH_CHECK(g == NULL, "*out not NULL after a failure");
}

static const th_case cases[] = {
    { "reads back", test_reads_back },
    { "hostile files", test_hostile },
};
TH_MAIN(cases)
