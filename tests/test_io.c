/* The parsers of untrusted files (src/io/): safetensors reader and writer, checkpoints of
   several shards, config.json, tokenizer.json byte-level BPE.

   Every malformed input must come back as WGML_ERROR_FORMAT with a message that starts
   with the file's name and names the problem. The tokenizer is checked three ways: ids
   worked out by hand for a tiny vocabulary; pre-tokenizer cuts (through PCRE2) against
   the reference cuts of Python's `regex` module (tests/ref/ref_io_pretok.h); other Split
   patterns and the Unicode normalizers on cuts worked out from their definitions; and
   BPE merging against a naive reference (merge the leftmost lowest-rank pair, repeat) on
   random merge tables. */
#include "harness.h"
#include "ref_io_pretok.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------------------- */

static char tmpdir[256];

static void remove_tmpdir(void) { rmdir(tmpdir); }

/* A private folder for the files of this run, made on first use, removed at exit (each
   case removes the files it made). */
static void make_tmpdir(void)
{
    if (tmpdir[0]) return;
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/wgml_test_io_XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        exit(2);
    }
    atexit(remove_tmpdir);
}

static const char *tmp_path(const char *name)
{
    static char buf[4][512];
    static int k;
    make_tmpdir();
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n) {
        perror(path);
        exit(2);
    }
    fclose(f);
}

/* Expects status FORMAT and a message starting with "<name>: " that contains needle. */
#define EXPECT_FORMAT(call, name, needle) expect_format_impl((call), (name), (needle), #call, __FILE__, __LINE__)
static void expect_format_impl(wgml_status got, const char *name, const char *needle, const char *expr, const char *file,
                               int line)
{
    const char *m = wgml_last_error(NULL);
    size_t nl = strlen(name);
    bool ok = got == WGML_ERROR_FORMAT && strncmp(m, name, nl) == 0 && m[nl] == ':' && strstr(m, needle);
    for (const char *p = m; *p; p++) ok &= *p >= 0x20 && *p < 0x7F;   /* names from files come quoted */
    th_check_impl(ok, file, line, "%s returned %s with \"%s\"; expected WGML_ERROR_FORMAT, \"%s: ...%s...\"", expr,
                  wgml_status_string(got), m, name, needle);
}

/* JSON written with ' for " to keep the tables readable. */
static char *dq(const char *s)
{
    char *r = strdup(s);
    for (char *p = r; *p; p++)
        if (*p == '\'') *p = '"';
    return r;
}

/* A safetensors file in memory: the header (with ' for ") and data_size bytes of data. */
static uint8_t *st_blob(const char *header, size_t data_size, size_t *size)
{
    char *h = dq(header);
    size_t n = strlen(h);
    *size = 8 + n + data_size;
    uint8_t *b = malloc(*size);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)n >> (8 * i));
    memcpy(b + 8, h, n);
    for (size_t i = 0; i < data_size; i++) b[8 + n + i] = (uint8_t)(i * 7 + 1);
    free(h);
    return b;
}

/* ---- safetensors: write, then read back ---------------------------------------------- */

static void test_safetensors_roundtrip(void)
{
    float f32[12];
    uint16_t bf16[5], f16[1];
    uint8_t u8[7], f4[3], bools[3];
    int64_t i64[4] = { -1, 2, INT64_MAX, INT64_MIN };
    double f64[1] = { 3.25 };
    for (int i = 0; i < 12; i++) f32[i] = (float)th_uniform(-1, 1);
    for (int i = 0; i < 5; i++) bf16[i] = (uint16_t)th_rand_u32();
    for (int i = 0; i < 7; i++) u8[i] = (uint8_t)th_rand_u32();
    for (int i = 0; i < 3; i++) f4[i] = (uint8_t)th_rand_u32();
    bools[0] = 1; bools[1] = 0; bools[2] = 1;
    f16[0] = 0x3C00;
    float scalar = 42;
    const wgml_safetensors_entry e[] = {
        { "model.embed_tokens.weight", WGML_ST_F32, 2, { 3, 4 }, f32 },
        { "u8", WGML_ST_U8, 1, { 7 }, u8 },
        { "norm.bf16", WGML_ST_BF16, 1, { 5 }, bf16 },
        { "i64", WGML_ST_I64, 2, { 2, 2 }, i64 },
        { "scalar", WGML_ST_F32, 0, { 0 }, &scalar },
        { "empty", WGML_ST_F16, 2, { 0, 3 }, NULL },
        { "packed4", WGML_ST_F4, 1, { 6 }, f4 },
        { "one_f16", WGML_ST_F16, 3, { 1, 1, 1 }, f16 },
        { "bools", WGML_ST_BOOL, 1, { 3 }, bools },
        { "f64", WGML_ST_F64, 1, { 1 }, f64 },
        { "quote\"and\\back\nslash \xc3\xa9", WGML_ST_U8, 1, { 2 }, u8 },
    };
    const size_t n = sizeof e / sizeof e[0];
    const char *path = tmp_path("rt.safetensors");
    TH_EXPECT(wgml_safetensors_write(path, e, n, "{\"format\":\"pt\",\"note\":\"a \\\"b\\\" \\u00e9\"}"), WGML_OK);

    /* the file and the same bytes in memory read back the same */
    FILE *fp = fopen(path, "rb");
    fseek(fp, 0, SEEK_END);
    size_t fsize = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *blob = malloc(fsize);
    TH_CHECK(fread(blob, 1, fsize, fp) == fsize, "read back");
    fclose(fp);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | blob[i];
    TH_CHECK((8 + hlen) % 8 == 0, "header padded to 8: %llu", (unsigned long long)hlen);

    for (int mode = 0; mode < 2; mode++) {
        wgml_safetensors *st = NULL;
        if (mode == 0) TH_EXPECT(wgml_safetensors_open(path, &st), WGML_OK);
        else TH_EXPECT(wgml_safetensors_open_memory(blob, fsize, "mem", &st), WGML_OK);
        if (!st) continue;
        TH_CHECK(wgml_safetensors_count(st) == n, "count %zu", wgml_safetensors_count(st));
        for (size_t i = 0; i < n; i++) {
            int64_t k = wgml_safetensors_find(st, e[i].name);
            TH_CHECK(k >= 0, "find %s", e[i].name);
            if (k < 0) continue;
            wgml_file_tensor info;
            TH_EXPECT(wgml_safetensors_info(st, (size_t)k, &info), WGML_OK);
            TH_CHECK(strcmp(info.name, e[i].name) == 0 && info.dtype == e[i].dtype && info.ndim == e[i].ndim, "info %s", e[i].name);
            uint64_t numel = 1;
            for (uint32_t d = 0; d < e[i].ndim; d++) {
                TH_CHECK(info.shape[d] == e[i].shape[d], "%s shape[%u]", e[i].name, d);
                numel *= e[i].shape[d];
            }
            uint64_t nbytes = numel * wgml_safetensors_dtype_bits(e[i].dtype) / 8;
            TH_CHECK(info.numel == numel && info.nbytes == nbytes, "%s numel %llu nbytes %llu", e[i].name,
                     (unsigned long long)info.numel, (unsigned long long)info.nbytes);
            uint32_t esize = wgml_safetensors_dtype_bits(e[i].dtype) / 8;
            if (esize) TH_CHECK(info.offset % esize == 0, "%s offset %llu aligned to %u", e[i].name, (unsigned long long)info.offset, esize);
            const void *d = wgml_safetensors_data(st, (size_t)k);
            TH_CHECK(d && (nbytes == 0 || memcmp(d, e[i].data, nbytes) == 0), "%s data", e[i].name);
            if (mode == 1) TH_CHECK((const uint8_t *)d == blob + info.offset, "%s offset points at the data", e[i].name);
        }
        TH_CHECK(wgml_safetensors_find(st, "nope") == -1 && wgml_safetensors_find(st, "__metadata__") == -1, "find absent");
        TH_CHECK(wgml_safetensors_metadata_count(st) == 2, "metadata count");
        const char *v = wgml_safetensors_metadata(st, "note");
        TH_CHECK(v && strcmp(v, "a \"b\" \xc3\xa9") == 0, "metadata note '%s'", v ? v : "(null)");
        TH_CHECK(wgml_safetensors_metadata(st, "format") && !wgml_safetensors_metadata(st, "x"), "metadata format");
        const char *key, *val;
        TH_EXPECT(wgml_safetensors_metadata_item(st, 0, &key, &val), WGML_OK);
        TH_CHECK(strcmp(key, "format") == 0 && strcmp(val, "pt") == 0, "metadata item 0");
        TH_EXPECT_ERR(wgml_safetensors_metadata_item(st, 2, &key, &val), WGML_ERROR_INVALID_ARGUMENT, "not below");
        wgml_file_tensor info;
        TH_EXPECT_ERR(wgml_safetensors_info(st, n, &info), WGML_ERROR_INVALID_ARGUMENT, "not below the 11 tensors");
        TH_CHECK(wgml_safetensors_data(st, n) == NULL, "data out of range");
        wgml_safetensors_close(st);
    }
    /* larger elements come first, so every tensor is aligned to its element size */
    wgml_safetensors *st;
    TH_EXPECT(wgml_safetensors_open(path, &st), WGML_OK);
    wgml_file_tensor first;
    wgml_safetensors_info(st, 0, &first);
    TH_CHECK(first.dtype == WGML_ST_I64 || first.dtype == WGML_ST_F64, "first tensor is 8-byte: %s",
             wgml_safetensors_dtype_name(first.dtype));
    wgml_safetensors_close(st);

    /* no tensors, no metadata: the smallest valid file */
    TH_EXPECT(wgml_safetensors_write(path, NULL, 0, NULL), WGML_OK);
    TH_EXPECT(wgml_safetensors_open(path, &st), WGML_OK);
    TH_CHECK(st && wgml_safetensors_count(st) == 0 && wgml_safetensors_metadata_count(st) == 0, "empty file");
    wgml_safetensors_close(st);
    free(blob);
    unlink(path);
}

static void test_safetensors_write_rejects(void)
{
    float x[2] = { 1, 2 };
    const char *path = tmp_path("bad.safetensors");
    wgml_safetensors_entry dup[2] = { { "w", WGML_ST_F32, 1, { 2 }, x }, { "w", WGML_ST_F32, 1, { 2 }, x } };
    TH_EXPECT_ERR(wgml_safetensors_write(path, dup, 2, NULL), WGML_ERROR_INVALID_ARGUMENT, "entries[1].name 'w' appears twice");
    wgml_safetensors_entry e = { NULL, WGML_ST_F32, 1, { 2 }, x };
    TH_EXPECT_ERR(wgml_safetensors_write(path, &e, 1, NULL), WGML_ERROR_INVALID_ARGUMENT, "entries[0].name is NULL");
    e.name = "__metadata__";
    TH_EXPECT_ERR(wgml_safetensors_write(path, &e, 1, NULL), WGML_ERROR_INVALID_ARGUMENT, "__metadata__");
    e.name = "bad\xff";
    TH_EXPECT_ERR(wgml_safetensors_write(path, &e, 1, NULL), WGML_ERROR_INVALID_ARGUMENT, "not valid UTF-8");
    e.name = "w";
    e.dtype = WGML_ST_DTYPE_COUNT;
    TH_EXPECT_ERR(wgml_safetensors_write(path, &e, 1, NULL), WGML_ERROR_INVALID_ARGUMENT, "entries[0].dtype");
    e.dtype = WGML_ST_F32;
    e.ndim = 9;
    TH_EXPECT_ERR(wgml_safetensors_write(path, &e, 1, NULL), WGML_ERROR_INVALID_ARGUMENT, "entries[0].ndim 9");
    e.ndim = 1;
    e.data = NULL;
    TH_EXPECT_ERR(wgml_safetensors_write(path, &e, 1, NULL), WGML_ERROR_INVALID_ARGUMENT, "entries[0].data is NULL");
    e.data = x;
    e.dtype = WGML_ST_F4;
    e.shape[0] = 3;
    TH_EXPECT_ERR(wgml_safetensors_write(path, &e, 1, NULL), WGML_ERROR_INVALID_ARGUMENT, "not a whole number of bytes");
    e.dtype = WGML_ST_F32;
    e.shape[0] = 2;
    TH_EXPECT_ERR(wgml_safetensors_write(path, &e, 1, "[1]"), WGML_ERROR_INVALID_ARGUMENT, "must be a JSON object");
    TH_EXPECT_ERR(wgml_safetensors_write(path, &e, 1, "{\"a\":1}"), WGML_ERROR_INVALID_ARGUMENT, "values must be strings");
    TH_EXPECT_ERR(wgml_safetensors_write(path, &e, 1, "{\"a\":"), WGML_ERROR_INVALID_ARGUMENT, "invalid JSON");
    TH_EXPECT_ERR(wgml_safetensors_write(NULL, &e, 1, NULL), WGML_ERROR_INVALID_ARGUMENT, "path must not be NULL");
    TH_EXPECT_ERR(wgml_safetensors_write(path, NULL, 1, NULL), WGML_ERROR_INVALID_ARGUMENT, "entries");
    struct stat sb;
    TH_CHECK(stat(path, &sb) != 0, "a rejected write leaves no file");
    TH_EXPECT_ERR(wgml_safetensors_write(tmp_path("no/such/dir.safetensors"), &e, 1, NULL), WGML_ERROR_IO, "cannot write");
}

/* Each malformed header, its problem named in the message. Data bytes follow as given. */
static const struct { const char *header; size_t data; const char *needle; } bad_headers[] = {
    { "[1]", 0, "does not start with '{'" },
    { " {}", 0, "does not start with '{'" },
    { "{'a':", 0, "invalid JSON" },
    { "{} x", 0, "unexpected text after the JSON value" },
    { "{'a':{'dtype':'F32','shape':[1],'data_offsets':[0,4]}}", 0, "run past the end of the data (0 bytes)" },
    { "{'a':{'dtype':'F32','shape':[1],'data_offsets':[0,400]}}", 16, "data_offsets [0, 400] of tensor 'a' run past the end" },
    { "{'a':{'dtype':'F32','shape':[1],'data_offsets':[8,4]}}", 16, "data_offsets [8, 4] of tensor 'a' are reversed" },
    { "{'a':{'dtype':'F32','shape':[2,2],'data_offsets':[0,12]}}", 12, "= 16 bytes, but data_offsets [0, 12] hold 12" },
    { "{'a':{'dtype':'F32','shape':[4294967296,4294967296,16],'data_offsets':[0,4]}}", 4, "more than 2^64 elements" },
    { "{'a':{'dtype':'F64','shape':[9007199254740991,4096],'data_offsets':[0,4]}}", 4, "more than 2^64 elements" },
    { "{'a':{'dtype':'F64','shape':[4503599627370496,1024],'data_offsets':[0,4]}}", 4, "tensor 'a' has more than 2^64 bits" },
    { "{'a':{'dtype':'F32','shape':[1.5],'data_offsets':[0,4]}}", 4, "shape[0] of tensor 'a' must be an integer in" },
    { "{'a':{'dtype':'F32','shape':[-1],'data_offsets':[0,4]}}", 4, "shape[0] of tensor 'a' must be an integer in" },
    { "{'a':{'dtype':'F32','shape':['1'],'data_offsets':[0,4]}}", 4, "shape[0] of tensor 'a' must be an integer, not a string" },
    { "{'a':{'dtype':'F32','shape':[1,1,1,1,1,1,1,1,1],'data_offsets':[0,4]}}", 4, "more than 8 dimensions" },
    { "{'a':{'dtype':'F32','shape':[9007199254740993],'data_offsets':[0,4]}}", 4, "must be an integer in [0, 9007199254740991]" },
    { "{'a':{'shape':[1],'data_offsets':[0,4]}}", 4, "tensor 'a' has no dtype" },
    { "{'a':{'dtype':'F32','data_offsets':[0,4]}}", 4, "tensor 'a' has no shape" },
    { "{'a':{'dtype':'F32','shape':[1]}}", 4, "tensor 'a' has no data_offsets" },
    { "{'a':{'dtype':5,'shape':[1],'data_offsets':[0,4]}}", 4, "dtype of tensor 'a' must be a string, not a number" },
    { "{'a':{'dtype':'F128','shape':[1],'data_offsets':[0,4]}}", 4, "tensor 'a' has the unknown dtype 'F128'" },
    { "{'a':{'dtype':'F32','shape':{},'data_offsets':[0,4]}}", 4, "shape of tensor 'a' must be an array, not an object" },
    { "{'a':{'dtype':'F32','shape':[1],'data_offsets':[4]}}", 4, "data_offsets of tensor 'a' must hold 2 integers" },
    { "{'a':{'dtype':'F32','shape':[1],'data_offsets':[0,4,8]}}", 4, "must hold 2 integers" },
    { "{'a':{'dtype':'F32','shape':[1],'data_offsets':'0-4'}}", 4, "must be an array, not a string" },
    { "{'a':5}", 0, "tensor 'a' must be an object, not a number" },
    { "{'a':{'dtype':'F32','shape':[1],'data_offsets':[0,4]},'a':{'dtype':'F32','shape':[1],'data_offsets':[4,8]}}", 8,
      "'a' appears twice in the header" },
    { "{'a':{'dtype':'F32','dtype':'F16','shape':[1],'data_offsets':[0,4]}}", 4, "tensor 'a' has the key 'dtype' twice" },
    { "{'a':{'dtype':'F32','shape':[2],'data_offsets':[0,8]},'b':{'dtype':'F32','shape':[2],'data_offsets':[4,12]}}", 12,
      "tensors 'a' and 'b' overlap" },
    { "{'a':{'dtype':'F32','shape':[1],'data_offsets':[0,4]},'b':{'dtype':'F32','shape':[1],'data_offsets':[8,12]}}", 12,
      "data bytes [4, 8) belong to no tensor" },
    { "{'a':{'dtype':'F32','shape':[1],'data_offsets':[0,4]}}", 8, "data bytes [4, 8) at the end belong to no tensor" },
    { "{'a':{'dtype':'F32','shape':[1],'data_offsets':[4,8]}}", 8, "data bytes [0, 4) belong to no tensor" },
    { "{'__metadata__':{'k':1}}", 0, "__metadata__ value of 'k' must be a string, not a number" },
    { "{'__metadata__':'x'}", 0, "__metadata__ must be an object, not a string" },
    { "{'__metadata__':{'k':'v','k':'w'}}", 0, "__metadata__ has the key 'k' twice" },
    { "{'a':{'dtype':'F4','shape':[3],'data_offsets':[0,1]}}", 1, "is not a whole number of bytes" },
    { "{'a\\u0001\\n':5}", 0, "tensor 'a\\x01\\x0a' must be an object" },
    { "{'\xe9t\xe9':1}", 0, "invalid UTF-8 at byte 2" },
};

static void test_safetensors_malformed(void)
{
    for (size_t i = 0; i < sizeof bad_headers / sizeof bad_headers[0]; i++) {
        size_t size;
        uint8_t *b = st_blob(bad_headers[i].header, bad_headers[i].data, &size);
        wgml_safetensors *st = (wgml_safetensors *)&size;   /* must come back NULL */
        EXPECT_FORMAT(wgml_safetensors_open_memory(b, size, "bad.safetensors", &st), "bad.safetensors", bad_headers[i].needle);
        TH_CHECK(st == NULL, "case %zu: out not NULL on failure", i);
        free(b);
    }
    /* the header length itself */
    uint8_t small[8] = { 2, 0, 0, 0, 0, 0, 0, 0 };
    wgml_safetensors *st;
    EXPECT_FORMAT(wgml_safetensors_open_memory(small, 5, "t.safetensors", &st), "t.safetensors", "too short for the 8-byte header length");
    EXPECT_FORMAT(wgml_safetensors_open_memory(small, 8, "t.safetensors", &st), "t.safetensors",
                  "not a safetensors file (its header length runs past the end of the file, 8 bytes)");
    uint8_t huge[16] = { 0, 0, 0, 0, 0, 0, 0, 0x80, '{', '}' };
    EXPECT_FORMAT(wgml_safetensors_open_memory(huge, 16, "t.safetensors", &st), "t.safetensors",
                  "not a safetensors file (its header length is over the limit of 16777216 bytes)");
    TH_CHECK(!strstr(wgml_last_error(NULL), "9223372036854775808"), "the file's first bytes are quoted: %s", wgml_last_error(NULL));
    uint8_t cap[16] = { 0x01, 0x00, 0x00, 0x01, 0, 0, 0, 0, '{', '}' };   /* 16 MiB + 1 */
    EXPECT_FORMAT(wgml_safetensors_open_memory(cap, 16, "t.safetensors", &st), "t.safetensors", "is over the limit");
    uint8_t zero[8] = { 0 };
    EXPECT_FORMAT(wgml_safetensors_open_memory(zero, 8, "t.safetensors", &st), "t.safetensors", "does not start with '{'");

    /* valid edge cases: a scalar, empty tensors at the same offset, padding spaces */
    size_t size;
    uint8_t *b = st_blob("{'s':{'dtype':'F32','shape':[],'data_offsets':[0,4]},'e':{'dtype':'F16','shape':[0],'data_offsets':[4,4]},"
                         "'f':{'dtype':'U8','shape':[2,0,9007199254740991],'data_offsets':[4,4]},'u':{'dtype':'U8','shape':[1],"
                         "'data_offsets':[4,5]}}    ",
                         5, &size);
    TH_EXPECT(wgml_safetensors_open_memory(b, size, "ok.safetensors", &st), WGML_OK);
    if (st) {
        wgml_file_tensor info;
        wgml_safetensors_info(st, 0, &info);
        TH_CHECK(info.ndim == 0 && info.numel == 1 && info.nbytes == 4, "scalar");
        wgml_safetensors_info(st, 2, &info);
        TH_CHECK(info.numel == 0 && info.nbytes == 0 && info.shape[2] == 9007199254740991ull, "empty with a huge dimension");
        wgml_safetensors_close(st);
    }
    free(b);

    /* files */
    EXPECT_FORMAT(wgml_safetensors_open_memory("", 0, "z.safetensors", &st), "z.safetensors", "too short");
    const char *p = tmp_path("trunc.safetensors");
    b = st_blob("{'a':{'dtype':'F32','shape':[4],'data_offsets':[0,16]}}", 16, &size);
    write_file(p, b, size - 3);   /* truncated data */
    EXPECT_FORMAT(wgml_safetensors_open(p, &st), p, "run past the end of the data (13 bytes)");
    write_file(p, b, 6);   /* truncated header length */
    EXPECT_FORMAT(wgml_safetensors_open(p, &st), p, "too short");
    write_file(p, b, 0);
    EXPECT_FORMAT(wgml_safetensors_open(p, &st), p, "the file is 0 bytes");
    free(b);
    unlink(p);
    TH_EXPECT_ERR(wgml_safetensors_open(tmp_path("missing.safetensors"), &st), WGML_ERROR_IO, "cannot open");
    TH_EXPECT_ERR(wgml_safetensors_open(tmp_path("."), &st), WGML_ERROR_IO, "not a regular file");
    TH_EXPECT_ERR(wgml_safetensors_open(NULL, &st), WGML_ERROR_INVALID_ARGUMENT, "must not be NULL");
    TH_EXPECT_ERR(wgml_safetensors_open_memory(NULL, 3, "x", &st), WGML_ERROR_INVALID_ARGUMENT, "must not be NULL");
    TH_CHECK(wgml_safetensors_count(NULL) == 0 && wgml_safetensors_find(NULL, "a") == -1, "NULL object");
    wgml_safetensors_close(NULL);
}

static void test_safetensors_dtypes(void)
{
    TH_CHECK(strcmp(wgml_safetensors_dtype_name(WGML_ST_BF16), "BF16") == 0, "BF16 name");
    TH_CHECK(strcmp(wgml_safetensors_dtype_name(WGML_ST_DTYPE_COUNT), "?") == 0, "bad name");
    TH_CHECK(wgml_safetensors_dtype_bits(WGML_ST_F6_E3M2) == 6 && wgml_safetensors_dtype_bits(WGML_ST_C64) == 64 &&
             wgml_safetensors_dtype_bits(WGML_ST_DTYPE_COUNT) == 0, "bits");
    wgml_dtype d;
    TH_CHECK(wgml_safetensors_dtype_to_wgml(WGML_ST_BF16, &d) && d == WGML_BF16, "BF16 -> wgml");
    TH_CHECK(!wgml_safetensors_dtype_to_wgml(WGML_ST_I32, &d), "I32 has no wgml dtype");
    TH_CHECK(wgml_safetensors_dtype_from_wgml(WGML_U32) == WGML_ST_U32, "wgml U32");
    /* every dtype name parses back to itself */
    for (int i = 0; i < WGML_ST_DTYPE_COUNT; i++) {
        char h[160];
        uint32_t bits = wgml_safetensors_dtype_bits((wgml_safetensors_dtype)i);
        snprintf(h, sizeof h, "{'t':{'dtype':'%s','shape':[8],'data_offsets':[0,%u]}}", wgml_safetensors_dtype_name((wgml_safetensors_dtype)i), bits);
        size_t size;
        uint8_t *b = st_blob(h, bits, &size);
        wgml_safetensors *st;
        TH_EXPECT(wgml_safetensors_open_memory(b, size, "d", &st), WGML_OK);
        wgml_file_tensor info = { 0 };
        if (st) wgml_safetensors_info(st, 0, &info);
        TH_CHECK((int)info.dtype == i && info.nbytes == bits, "dtype %d round trip", i);
        wgml_safetensors_close(st);
        free(b);
    }
}

/* ---- checkpoints ---------------------------------------------------------------------- */

static void test_checkpoint_shards(void)
{
    float a[3] = { 1, 2, 3 }, b[2] = { 4, 5 }, c[1] = { 6 };
    const wgml_safetensors_entry s1[] = { { "a", WGML_ST_F32, 1, { 3 }, a }, { "b", WGML_ST_F32, 1, { 2 }, b } };
    const wgml_safetensors_entry s2[] = { { "c", WGML_ST_F32, 1, { 1 }, c } };
    char *dir = strdup(tmp_path("ck"));
    mkdir(dir, 0700);
    char p1[600], p2[600], ix[600];
    snprintf(p1, sizeof p1, "%s/model-00001-of-00002.safetensors", dir);
    snprintf(p2, sizeof p2, "%s/model-00002-of-00002.safetensors", dir);
    snprintf(ix, sizeof ix, "%s/model.safetensors.index.json", dir);
    TH_EXPECT(wgml_safetensors_write(p1, s1, 2, "{\"format\":\"pt\"}"), WGML_OK);
    TH_EXPECT(wgml_safetensors_write(p2, s2, 1, NULL), WGML_OK);
    const char *index = "{\"metadata\":{\"total_size\":24},\"weight_map\":{\"c\":\"model-00002-of-00002.safetensors\","
                        "\"a\":\"model-00001-of-00002.safetensors\",\"b\":\"model-00001-of-00002.safetensors\"}}";
    write_file(ix, index, strlen(index));

    const char *paths[2] = { dir, ix };
    for (int k = 0; k < 2; k++) {
        wgml_checkpoint *ck = NULL;
        TH_EXPECT(wgml_checkpoint_open(paths[k], &ck), WGML_OK);
        if (!ck) continue;
        TH_CHECK(wgml_checkpoint_count(ck) == 3 && wgml_checkpoint_shard_count(ck) == 2, "counts");
        const char *names[3] = { "a", "b", "c" };
        const float *want[3] = { a, b, c };
        for (int i = 0; i < 3; i++) {
            int64_t j = wgml_checkpoint_find(ck, names[i]);
            TH_CHECK(j >= 0, "find %s", names[i]);
            if (j < 0) continue;
            wgml_file_tensor info;
            TH_EXPECT(wgml_checkpoint_info(ck, (size_t)j, &info), WGML_OK);
            TH_CHECK(strcmp(info.name, names[i]) == 0 && info.shard == (i == 2), "%s in shard %u", names[i], info.shard);
            TH_CHECK(memcmp(wgml_checkpoint_data(ck, (size_t)j), want[i], info.nbytes) == 0, "%s data", names[i]);
        }
        TH_CHECK(wgml_checkpoint_find(ck, "d") == -1 && wgml_checkpoint_data(ck, 3) == NULL, "absent");
        const char *fmt = wgml_safetensors_metadata(wgml_checkpoint_shard(ck, 0), "format");
        TH_CHECK(fmt && strcmp(fmt, "pt") == 0 && wgml_checkpoint_shard(ck, 2) == NULL, "shard metadata");
        wgml_checkpoint_close(ck);
    }
    /* one file, directly or as the folder's model.safetensors */
    wgml_checkpoint *ck;
    TH_EXPECT(wgml_checkpoint_open(p2, &ck), WGML_OK);
    TH_CHECK(ck && wgml_checkpoint_count(ck) == 1 && wgml_checkpoint_find(ck, "c") == 0, "single file");
    wgml_checkpoint_close(ck);

    /* bad indexes */
    static const struct { const char *json; const char *needle; } bad[] = {
        { "{\"weight_map\":{\"a\":\"../model-00001-of-00002.safetensors\"}}", "is not a plain file name" },
        { "{\"weight_map\":{\"a\":\"/etc/passwd\"}}", "is not a plain file name" },
        { "{\"weight_map\":{\"a\":\"..\"}}", "is not a plain file name" },
        { "{\"weight_map\":{\"a\":\"\"}}", "is not a plain file name" },
        { "{\"weight_map\":{\"a\":\"x\\u001b[31m.safetensors\"}}", "sends 'a' to 'x\\x1b[31m.safetensors', which is not a plain" },
        { "{\"weight_map\":{\"c\":\"model-00001-of-00002.safetensors\",\"a\":\"model-00002-of-00002.safetensors\"}}",
          "weight_map puts tensor 'c' in" },
        { "{\"weight_map\":{\"a\":1}}", "weight_map value of 'a' must be a string, not a number" },
        { "{\"weight_map\":[]}", "weight_map must be an object, not an array" },
        { "{\"metadata\":{}}", "no weight_map" },
        { "{\"weight_map\":{},\"weight_map\":{}}", "has the key 'weight_map' twice" },
        { "{\"weight_map\":{\"a\":\"x\",\"a\":\"y\"}}", "weight_map has the key 'a' twice" },
        { "{\"weight_map\":", "invalid JSON" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_file(ix, bad[i].json, strlen(bad[i].json));
        EXPECT_FORMAT(wgml_checkpoint_open(dir, &ck), ix, bad[i].needle);
        TH_CHECK(ck == NULL, "index case %zu: out NULL", i);
    }
    const char *missing = "{\"weight_map\":{\"a\":\"model-00003-of-00002.safetensors\"}}";
    write_file(ix, missing, strlen(missing));
    TH_EXPECT_ERR(wgml_checkpoint_open(dir, &ck), WGML_ERROR_IO, "cannot open");
    /* a tensor in two shards */
    TH_EXPECT(wgml_safetensors_write(p2, s1, 1, NULL), WGML_OK);
    write_file(ix, index, strlen(index));
    EXPECT_FORMAT(wgml_checkpoint_open(dir, &ck), ix, "tensor 'a' is in both");
    /* no index, no model.safetensors */
    unlink(ix); unlink(p1); unlink(p2);
    TH_EXPECT_ERR(wgml_checkpoint_open(dir, &ck), WGML_ERROR_IO, "holds neither");
    rmdir(dir);
    free(dir);
}

/* ---- config.json ---------------------------------------------------------------------- */

static const char *smollm2_config =
    "{\"architectures\":[\"LlamaForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,\"bos_token_id\":0,"
    "\"eos_token_id\":0,\"hidden_act\":\"silu\",\"hidden_size\":576,\"initializer_range\":0.041666666666666664,"
    "\"intermediate_size\":1536,\"is_llama_config\":true,\"max_position_embeddings\":8192,\"model_type\":\"llama\","
    "\"num_attention_heads\":9,\"num_hidden_layers\":30,\"num_key_value_heads\":3,\"pretraining_tp\":1,"
    "\"rms_norm_eps\":1e-05,\"rope_interleaved\":false,\"rope_scaling\":null,\"rope_theta\":100000,"
    "\"tie_word_embeddings\":true,\"torch_dtype\":\"bfloat16\",\"transformers_version\":\"4.40.1\",\"use_cache\":true,"
    "\"vocab_size\":49152}";

static void test_config(void)
{
    wgml_model_config c;
    TH_EXPECT(wgml_model_config_parse(smollm2_config, strlen(smollm2_config), "config.json", &c), WGML_OK);
    TH_CHECK(strcmp(c.model_type, "llama") == 0 && strcmp(c.torch_dtype, "bfloat16") == 0, "strings");
    TH_CHECK(c.vocab_size == 49152 && c.hidden_size == 576 && c.intermediate_size == 1536 && c.num_hidden_layers == 30,
             "sizes");
    TH_CHECK(c.num_attention_heads == 9 && c.num_key_value_heads == 3 && c.head_dim == 64, "heads %u/%u/%u",
             c.num_attention_heads, c.num_key_value_heads, c.head_dim);
    TH_CHECK(c.max_position_embeddings == 8192 && c.rms_norm_eps == 1e-5 && c.rope_theta == 100000, "numbers");
    TH_CHECK(c.tie_word_embeddings && !c.attention_bias && c.rope_scaling.type == WGML_ROPE_SCALING_NONE, "flags");
    TH_CHECK(c.bos_token_id == 0 && c.num_eos_token_ids == 1 && c.eos_token_ids[0] == 0 && c.quantization.bits == 0, "ids");

    /* defaults */
    const char *minimal = "{\"vocab_size\":256,\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":2,"
                          "\"num_attention_heads\":4,\"head_dim\":null}";
    TH_EXPECT(wgml_model_config_parse(minimal, strlen(minimal), NULL, &c), WGML_OK);
    TH_CHECK(c.num_key_value_heads == 4 && c.head_dim == 16 && c.max_position_embeddings == 2048 && c.rms_norm_eps == 1e-6 &&
                 c.rope_theta == 10000 && !c.tie_word_embeddings && c.bos_token_id == -1 && c.num_eos_token_ids == 0 &&
                 c.model_type[0] == 0,
             "defaults");

    /* Llama 3.1 style: llama3 RoPE scaling, several eos ids, explicit head_dim */
    const char *llama31 =
        "{\"vocab_size\":128256,\"hidden_size\":4096,\"intermediate_size\":14336,\"num_hidden_layers\":32,"
        "\"num_attention_heads\":32,\"num_key_value_heads\":8,\"head_dim\":128,\"rope_theta\":500000.0,"
        "\"rope_scaling\":{\"factor\":8.0,\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
        "\"original_max_position_embeddings\":8192,\"rope_type\":\"llama3\"},\"bos_token_id\":128000,"
        "\"eos_token_id\":[128001,128008,128009],\"max_position_embeddings\":131072,\"mlp_bias\":false}";
    TH_EXPECT(wgml_model_config_parse(llama31, strlen(llama31), "l.json", &c), WGML_OK);
    TH_CHECK(c.rope_scaling.type == WGML_ROPE_SCALING_LLAMA3 && c.rope_scaling.factor == 8 && c.rope_scaling.low_freq_factor == 1 &&
                 c.rope_scaling.high_freq_factor == 4 && c.rope_scaling.original_max_position_embeddings == 8192,
             "llama3 rope");
    TH_CHECK(c.num_eos_token_ids == 3 && c.eos_token_ids[2] == 128009 && c.bos_token_id == 128000 && c.rope_theta == 500000,
             "llama3 ids");
    /* MLX quantization, linear scaling, rope_parameters */
    const char *mlx = "{\"vocab_size\":100,\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":1,"
                      "\"num_attention_heads\":2,\"quantization\":{\"group_size\":64,\"bits\":4,\"model.embed\":{\"bits\":8}},"
                      "\"rope_parameters\":{\"rope_type\":\"linear\",\"factor\":2,\"rope_theta\":1000}}";
    TH_EXPECT(wgml_model_config_parse(mlx, strlen(mlx), "m.json", &c), WGML_OK);
    TH_CHECK(c.quantization.bits == 4 && c.quantization.group_size == 64 && c.rope_scaling.type == WGML_ROPE_SCALING_LINEAR &&
                 c.rope_scaling.factor == 2 && c.rope_theta == 1000,
             "mlx");

    /* the families: Mistral's window (null: none), Qwen2's biases, Qwen3's norms, Qwen's
       window only with use_sliding_window (Qwen2.5 files carry sliding_window with it off) */
#define DIMS "\"vocab_size\":100,\"hidden_size\":64,\"intermediate_size\":128,\"num_hidden_layers\":2,\"num_attention_heads\":4"
    static const struct { const char *json; uint32_t window; bool qkv_bias, qk_norm; } fam[] = {
        { "{\"model_type\":\"mistral\"," DIMS ",\"sliding_window\":4096}", 4096, false, false },
        { "{\"model_type\":\"mistral\"," DIMS ",\"sliding_window\":null}", 0, false, false },
        { "{\"model_type\":\"qwen2\"," DIMS ",\"use_sliding_window\":false,\"sliding_window\":32768,"
          "\"max_window_layers\":21}", 0, true, false },
        { "{\"model_type\":\"qwen2\"," DIMS ",\"use_sliding_window\":true,\"sliding_window\":64,\"max_window_layers\":0}",
          64, true, false },
        { "{\"model_type\":\"qwen3\"," DIMS ",\"head_dim\":32,\"sliding_window\":null,\"attention_bias\":false}", 0, false,
          true },
        { "{\"model_type\":\"llama\"," DIMS "}", 0, false, false },
    };
    for (size_t i = 0; i < sizeof fam / sizeof fam[0]; i++) {
        TH_EXPECT(wgml_model_config_parse(fam[i].json, strlen(fam[i].json), "f.json", &c), WGML_OK);
        TH_CHECK(c.sliding_window == fam[i].window && c.qkv_bias == fam[i].qkv_bias && c.qk_norm == fam[i].qk_norm,
                 "family case %zu: window %u, qkv_bias %d, qk_norm %d", i, c.sliding_window, c.qkv_bias, c.qk_norm);
    }

    /* LFM2 as its released files write it (LFM2-350M's fields): block_ff_dim 6656 becomes
       256 * ceil(int(2 * 6656 / 3) / 256) = 4608; layer_types; norm_eps; theta; tied */
    const char *lfm2 = "{\"architectures\":[\"Lfm2ForCausalLM\"],\"model_type\":\"lfm2\",\"vocab_size\":65536,"
                       "\"hidden_size\":1024,\"intermediate_size\":6656,\"block_ff_dim\":6656,\"block_auto_adjust_ff_dim\":true,"
                       "\"block_ffn_dim_multiplier\":1.0,\"block_multiple_of\":256,\"num_hidden_layers\":4,"
                       "\"num_attention_heads\":16,\"num_key_value_heads\":8,\"norm_eps\":1e-05,\"conv_L_cache\":3,"
                       "\"conv_bias\":false,\"theta\":1000000.0,\"tie_embedding\":true,\"max_position_embeddings\":128000,"
                       "\"layer_types\":[\"conv\",\"conv\",\"full_attention\",\"conv\"]}";
    TH_EXPECT(wgml_model_config_parse(lfm2, strlen(lfm2), "lfm2.json", &c), WGML_OK);
    TH_CHECK(c.intermediate_size == 4608 && c.conv_kernel == 3 && c.conv_layers[0] == 0xB && c.qk_norm && !c.qkv_bias &&
                 c.rms_norm_eps == 1e-5 && c.rope_theta == 1e6 && c.tie_word_embeddings && c.head_dim == 64,
             "lfm2: ffn %u, kernel %u, layers 0x%x, eps %g, theta %g", c.intermediate_size, c.conv_kernel, c.conv_layers[0],
             c.rms_norm_eps, c.rope_theta);
    /* the older full_attn_idxs; no multiplier (null): 2/3 only; defaults (tied, theta 1e6) */
    const char *lfm2b = "{\"model_type\":\"lfm2\"," DIMS ",\"block_ffn_dim_multiplier\":null,\"full_attn_idxs\":[1]}";
    TH_EXPECT(wgml_model_config_parse(lfm2b, strlen(lfm2b), "lfm2b.json", &c), WGML_OK);
    TH_CHECK(c.intermediate_size == 85 && c.conv_layers[0] == 0x1 && c.tie_word_embeddings && c.rope_theta == 1e6 &&
                 c.rms_norm_eps == 1e-5,
             "lfm2 full_attn_idxs: ffn %u, layers 0x%x", c.intermediate_size, c.conv_layers[0]);

    /* Gemma 3 1B as its released config.json writes it: every sixth layer global
       (sliding_window_pattern), the two RoPE bases, GELU's tanh form, tied by default */
    const char *gemma = "{\"architectures\":[\"Gemma3ForCausalLM\"],\"attention_bias\":false,\"attention_dropout\":0.0,"
                        "\"attn_logit_softcapping\":null,\"bos_token_id\":2,\"cache_implementation\":\"hybrid\","
                        "\"eos_token_id\":[1,106],\"final_logit_softcapping\":null,\"head_dim\":256,"
                        "\"hidden_activation\":\"gelu_pytorch_tanh\",\"hidden_size\":1152,\"initializer_range\":0.02,"
                        "\"intermediate_size\":6912,\"max_position_embeddings\":32768,\"model_type\":\"gemma3_text\","
                        "\"num_attention_heads\":4,\"num_hidden_layers\":26,\"num_key_value_heads\":1,\"pad_token_id\":0,"
                        "\"query_pre_attn_scalar\":256,\"rms_norm_eps\":1e-06,\"rope_local_base_freq\":10000,"
                        "\"rope_scaling\":null,\"rope_theta\":1000000,\"sliding_window\":512,\"sliding_window_pattern\":6,"
                        "\"torch_dtype\":\"bfloat16\",\"use_cache\":true,\"vocab_size\":262144}";
    TH_EXPECT(wgml_model_config_parse(gemma, strlen(gemma), "gemma.json", &c), WGML_OK);
    TH_CHECK(c.gemma && c.qk_norm && c.hidden_act == WGML_HIDDEN_ACT_GELU_TANH && c.head_dim == 256 &&
                 c.sliding_window == 512 && c.full_attention_layers[0] == 0x820820 && c.rope_theta == 1e6 &&
                 c.rope_local_theta == 1e4 && c.query_pre_attn_scalar == 256 && c.tie_word_embeddings &&
                 c.num_eos_token_ids == 2 && c.rope_scaling.type == WGML_ROPE_SCALING_NONE,
             "gemma3: act %d, window %u, global 0x%x, theta %g / %g, scalar %g", (int)c.hidden_act, c.sliding_window,
             c.full_attention_layers[0], c.rope_theta, c.rope_local_theta, c.query_pre_attn_scalar);
    /* transformers 5's form: layer_types, rope_parameters by layer type (the global layers'
       scaled); the defaults of absent fields */
    const char *gemma5 = "{\"model_type\":\"gemma3_text\"," DIMS ",\"layer_types\":[\"full_attention\",\"sliding_attention\"],"
                         "\"rope_parameters\":{\"full_attention\":{\"rope_type\":\"linear\",\"factor\":8.0,\"rope_theta\":"
                         "1000000.0},\"sliding_attention\":{\"rope_type\":\"default\",\"rope_theta\":10000.0}}}";
    TH_EXPECT(wgml_model_config_parse(gemma5, strlen(gemma5), "gemma5.json", &c), WGML_OK);
    TH_CHECK(c.full_attention_layers[0] == 0x1 && c.rope_theta == 1e6 && c.rope_local_theta == 1e4 &&
                 c.rope_scaling.type == WGML_ROPE_SCALING_LINEAR && c.rope_scaling.factor == 8 && c.sliding_window == 4096 &&
                 c.query_pre_attn_scalar == 256 && c.hidden_act == WGML_HIDDEN_ACT_GELU_TANH && c.tie_word_embeddings,
             "gemma3 (rope_parameters): global 0x%x, theta %g / %g, scaling %d, window %u", c.full_attention_layers[0],
             c.rope_theta, c.rope_local_theta, (int)c.rope_scaling.type, c.sliding_window);

    static const struct { const char *json; const char *needle; } bad[] = {
        { "{\"model_type\":\"gemma3\"," DIMS "}", "model_type gemma3 (Gemma3ForConditionalGeneration" },
        { "{\"model_type\":\"gemma3_text\"," DIMS ",\"final_logit_softcapping\":30.0}", "final_logit_softcapping is not supported" },
        { "{\"model_type\":\"gemma3_text\"," DIMS ",\"attn_logit_softcapping\":50.0}", "attn_logit_softcapping is not supported" },
        { "{\"model_type\":\"gemma3_text\"," DIMS ",\"use_bidirectional_attention\":true}", "use_bidirectional_attention" },
        { "{\"model_type\":\"gemma3_text\"," DIMS ",\"layer_types\":[\"full_attention\",\"conv\"]}", "layer_types[1] must be" },
        { "{\"model_type\":\"gemma3_text\"," DIMS ",\"sliding_window_pattern\":0}", "sliding_window_pattern must be" },
        { "{\"model_type\":\"gemma3_text\"," DIMS ",\"query_pre_attn_scalar\":0}", "query_pre_attn_scalar must be in (0," },
        { "{\"model_type\":\"gemma3_text\"," DIMS ",\"rope_parameters\":{\"sliding_attention\":{\"rope_type\":\"linear\","
          "\"factor\":2}}}", "rope_parameters.sliding_attention.rope_type must be default" },
        { "{\"model_type\":\"gemma3_text\"," DIMS ",\"rope_local_base_freq\":10000,\"rope_parameters\":{\"full_attention\":"
          "{\"rope_theta\":1e6}}}", "give one form" },
        { "{\"model_type\":\"gemma3_text\"," DIMS ",\"hidden_activation\":\"relu\"}", "hidden_activation 'relu' is not supported" },
        { "{\"model_type\":\"qwen2\"," DIMS ",\"use_sliding_window\":true,\"sliding_window\":64,\"max_window_layers\":1}",
          "use_sliding_window with max_window_layers 1" },
        { "{\"model_type\":\"lfm2\"," DIMS ",\"conv_bias\":true}", "conv_bias true is not supported" },
        { "{\"model_type\":\"lfm2\"," DIMS ",\"conv_L_cache\":17}", "conv_L_cache must be an integer in [1, 16]" },
        { "{\"model_type\":\"lfm2\"," DIMS ",\"layer_types\":[\"conv\"]}", "layer_types must be a list of num_hidden_layers (2)" },
        { "{\"model_type\":\"lfm2\"," DIMS ",\"layer_types\":[\"conv\",\"mamba\"]}", "layer_types[1] must be" },
        { "{\"model_type\":\"lfm2\"," DIMS ",\"full_attn_idxs\":[2]}", "full_attn_idxs must hold layer indices below 2" },
        { "{\"model_type\":\"lfm2\"," DIMS ",\"block_multiple_of\":0}", "block_multiple_of must be an integer in [1," },
        { "{\"model_type\":\"mistral\"," DIMS ",\"sliding_window\":0}", "sliding_window must be an integer in [1, 16777216]" },
        { "{\"model_type\":\"mistral\"," DIMS ",\"sliding_window\":\"4096\"}", "sliding_window must be an integer" },
#undef DIMS
        { "{\"hidden_size\":64}", "vocab_size is required" },
        { "{\"vocab_size\":100,\"hidden_size\":\"64\"}", "hidden_size must be an integer, not a string" },
        { "{\"vocab_size\":0}", "vocab_size must be an integer in [1, 16777216], not 0" },
        { "{\"vocab_size\":1e12}", "vocab_size must be an integer in [1, 16777216]" },
        { "{\"vocab_size\":10.5}", "vocab_size must be an integer in" },
        { "{\"vocab_size\":10,\"hidden_size\":64,\"intermediate_size\":8,\"num_hidden_layers\":1,\"num_attention_heads\":6}",
          "hidden_size 64 is not a multiple of num_attention_heads 6" },
        { "{\"vocab_size\":10,\"hidden_size\":64,\"intermediate_size\":8,\"num_hidden_layers\":1,\"num_attention_heads\":8,"
          "\"num_key_value_heads\":3}", "num_attention_heads 8 is not a multiple of num_key_value_heads 3" },
        { "{\"vocab_size\":10,\"hidden_size\":64,\"intermediate_size\":8,\"num_hidden_layers\":1,\"num_attention_heads\":8,"
          "\"num_key_value_heads\":16}", "num_key_value_heads must be an integer in [1, 8]" },
        { "{\"vocab_size\":10,\"hidden_size\":64,\"intermediate_size\":8,\"num_hidden_layers\":1,\"num_attention_heads\":8,"
          "\"head_dim\":7}", "head_dim 7 is odd" },
        { "{\"vocab_size\":10,\"hidden_size\":64,\"intermediate_size\":8,\"num_hidden_layers\":1,\"num_attention_heads\":8,"
          "\"rms_norm_eps\":0}", "rms_norm_eps must be in (0, 0.5], not 0" },
        { "{\"vocab_size\":10,\"hidden_size\":64,\"intermediate_size\":8,\"num_hidden_layers\":1,\"num_attention_heads\":8,"
          "\"tie_word_embeddings\":1}", "tie_word_embeddings must be true or false, not a number" },
        { "{\"vocab_size\":10,\"hidden_size\":64,\"intermediate_size\":8,\"num_hidden_layers\":1,\"num_attention_heads\":8,"
          "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4}}", "rope_scaling.rope_type 'yarn' is not supported" },
        { "{\"vocab_size\":10,\"hidden_size\":64,\"intermediate_size\":8,\"num_hidden_layers\":1,\"num_attention_heads\":8,"
          "\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8,\"low_freq_factor\":4,\"high_freq_factor\":1,"
          "\"original_max_position_embeddings\":8192}}", "high_freq_factor 1 must be greater than low_freq_factor 4" },
        { "{\"vocab_size\":10,\"hidden_size\":64,\"intermediate_size\":8,\"num_hidden_layers\":1,\"num_attention_heads\":8,"
          "\"rope_scaling\":{\"type\":\"llama3\",\"factor\":8}}", "rope_scaling.low_freq_factor is required" },
        { "{\"vocab_size\":10,\"hidden_size\":64,\"intermediate_size\":8,\"num_hidden_layers\":1,\"num_attention_heads\":8,"
          "\"eos_token_id\":10}", "eos_token_id must be an integer in [0, 9], not 10" },
        { "{\"vocab_size\":10,\"hidden_size\":64,\"intermediate_size\":8,\"num_hidden_layers\":1,\"num_attention_heads\":8,"
          "\"eos_token_id\":[1,\"2\"]}", "eos_token_id[1] must be an integer, not a string" },
        { "{\"vocab_size\":10,\"hidden_size\":64,\"intermediate_size\":8,\"num_hidden_layers\":1,\"num_attention_heads\":8,"
          "\"eos_token_id\":[1,2,3,4,5,6,7,8,9]}", "eos_token_id lists more than 8 ids" },
        { "{\"vocab_size\":10,\"hidden_size\":64,\"intermediate_size\":8,\"num_hidden_layers\":1,\"num_attention_heads\":8,"
          "\"hidden_act\":\"gelu\"}", "hidden_act 'gelu' is not supported (silu or gelu_pytorch_tanh)" },
        { "{\"vocab_size\":10,\"hidden_size\":64,\"intermediate_size\":8,\"num_hidden_layers\":1,\"num_attention_heads\":8,"
          "\"quantization\":{\"group_size\":64,\"bits\":7}}", "quantization.bits must be 2, 3, 4, 5, 6 or 8" },
        { "{\"vocab_size\":10,\"hidden_size\":64,\"intermediate_size\":8,\"num_hidden_layers\":1,\"num_attention_heads\":8,"
          "\"quantization\":{\"group_size\":48,\"bits\":4}}", "quantization.group_size 48 is not a power of two" },
        { "{\"vocab_size\":10,\"hidden_size\":64,\"intermediate_size\":8,\"num_hidden_layers\":1,\"num_attention_heads\":8,"
          "\"quantization_config\":{\"quant_method\":\"gptq\",\"bits\":4,\"group_size\":128}}",
          "quantization_config.quant_method 'gptq' is not supported" },
        { "{\"vocab_size\":10,\"vocab_size\":11}", "the config has the key 'vocab_size' twice" },
        { "{\"vocab_size\":10,", "invalid JSON" },
        { "[]", "must be a JSON object, not an array" },
        { "", "invalid JSON" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&c, 0x5A, sizeof c);
        EXPECT_FORMAT(wgml_model_config_parse(bad[i].json, strlen(bad[i].json), "cfg.json", &c), "cfg.json", bad[i].needle);
        TH_CHECK(c.vocab_size == 0, "case %zu: the output is cleared on failure", i);
    }
    /* not NUL-terminated: only len bytes are read */
    char buf[64];
    memcpy(buf, "{\"vocab_size\":1}XXXX", 20);
    EXPECT_FORMAT(wgml_model_config_parse(buf, 16, "n.json", &c), "n.json", "hidden_size is required");
    /* files */
    const char *p = tmp_path("config.json");
    write_file(p, smollm2_config, strlen(smollm2_config));
    TH_EXPECT(wgml_model_config_load(p, &c), WGML_OK);
    TH_CHECK(c.vocab_size == 49152, "loaded");
    unlink(p);
    TH_EXPECT_ERR(wgml_model_config_load(p, &c), WGML_ERROR_IO, "cannot open");
    TH_EXPECT_ERR(wgml_model_config_parse(NULL, 3, "x", &c), WGML_ERROR_INVALID_ARGUMENT, "must not be NULL");
}

/* ---- tokenizer.json builder ------------------------------------------------------------ */

/* The GPT-2 byte alphabet, written here independently of the library: the printable bytes
   stand for themselves, the others for U+0100 + their rank among them. */
static uint32_t byte_char(uint8_t b)
{
    if ((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE)) return b;
    uint32_t n = 0;
    for (int x = 0; x < b; x++)
        if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE))) n++;
    return 256 + n;
}

/* The byte-level spelling of raw bytes (malloc'd). */
static char *spell(const char *raw, size_t n)
{
    char *s = malloc(2 * n + 1), *o = s;
    for (size_t i = 0; i < n; i++) {
        uint32_t c = byte_char((uint8_t)raw[i]);
        if (c < 0x80) *o++ = (char)c;
        else { *o++ = (char)(0xC0 | (c >> 6)); *o++ = (char)(0x80 | (c & 0x3F)); }
    }
    *o = 0;
    return s;
}

enum { PRE_GPT2, PRE_LLAMA3, PRE_QWEN2, PRE_DIGITS_GPT2, PRE_WHOLE };

static const char *const llama3_rx =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char *const qwen2_rx =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static cJSON *byte_level(bool use_regex)
{
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", "ByteLevel");
    cJSON_AddFalseToObject(b, "add_prefix_space");
    cJSON_AddTrueToObject(b, "trim_offsets");
    cJSON_AddBoolToObject(b, "use_regex", use_regex);
    return b;
}

static cJSON *pre_tokenizer(int kind)
{
    if (kind == PRE_GPT2) return byte_level(true);
    if (kind == PRE_WHOLE) return byte_level(false);
    cJSON *seq = cJSON_CreateObject(), *list = cJSON_CreateArray();
    cJSON_AddStringToObject(seq, "type", "Sequence");
    cJSON_AddItemToObject(seq, "pretokenizers", list);
    cJSON *first = cJSON_CreateObject();
    if (kind == PRE_DIGITS_GPT2) {
        cJSON_AddStringToObject(first, "type", "Digits");
        cJSON_AddTrueToObject(first, "individual_digits");
    } else {
        cJSON_AddStringToObject(first, "type", "Split");
        cJSON *pat = cJSON_CreateObject();
        cJSON_AddStringToObject(pat, "Regex", kind == PRE_LLAMA3 ? llama3_rx : qwen2_rx);
        cJSON_AddItemToObject(first, "pattern", pat);
        cJSON_AddStringToObject(first, "behavior", "Isolated");
        cJSON_AddFalseToObject(first, "invert");
    }
    cJSON_AddItemToArray(list, first);
    cJSON_AddItemToArray(list, byte_level(kind == PRE_DIGITS_GPT2));
    return seq;
}

typedef struct tj { cJSON *root, *model, *vocab, *merges, *added; int next_id; } tj;

/* A tokenizer.json with the 256 byte tokens as ids 0..255 (id = byte value). */
static void tj_init(tj *j, int pre)
{
    j->root = cJSON_CreateObject();
    cJSON_AddStringToObject(j->root, "version", "1.0");
    cJSON_AddNullToObject(j->root, "truncation");
    cJSON_AddNullToObject(j->root, "padding");
    j->added = cJSON_AddArrayToObject(j->root, "added_tokens");
    cJSON_AddNullToObject(j->root, "normalizer");
    cJSON_AddItemToObject(j->root, "pre_tokenizer", pre_tokenizer(pre));
    cJSON_AddNullToObject(j->root, "post_processor");
    cJSON_AddItemToObject(j->root, "decoder", byte_level(true));
    j->model = cJSON_AddObjectToObject(j->root, "model");
    cJSON_AddStringToObject(j->model, "type", "BPE");
    cJSON_AddNullToObject(j->model, "dropout");
    cJSON_AddNullToObject(j->model, "unk_token");
    cJSON_AddNullToObject(j->model, "continuing_subword_prefix");
    cJSON_AddNullToObject(j->model, "end_of_word_suffix");
    cJSON_AddFalseToObject(j->model, "fuse_unk");
    cJSON_AddFalseToObject(j->model, "byte_fallback");
    cJSON_AddFalseToObject(j->model, "ignore_merges");
    j->vocab = cJSON_AddObjectToObject(j->model, "vocab");
    j->merges = cJSON_AddArrayToObject(j->model, "merges");
    for (int b = 0; b < 256; b++) {
        char raw = (char)b, *s = spell(&raw, 1);
        cJSON_AddNumberToObject(j->vocab, s, b);
        free(s);
    }
    j->next_id = 256;
}

/* Adds a vocab token of raw bytes; returns its id. */
static int tj_token(tj *j, const char *raw)
{
    char *s = spell(raw, strlen(raw));
    cJSON_AddNumberToObject(j->vocab, s, j->next_id);
    free(s);
    return j->next_id++;
}

/* Adds the merge of two raw-byte tokens, as "a b" or as ["a", "b"]. */
static void tj_merge(tj *j, const char *a, const char *b, bool pair)
{
    char *sa = spell(a, strlen(a)), *sb = spell(b, strlen(b));
    if (pair) {
        cJSON *m = cJSON_CreateArray();
        cJSON_AddItemToArray(m, cJSON_CreateString(sa));
        cJSON_AddItemToArray(m, cJSON_CreateString(sb));
        cJSON_AddItemToArray(j->merges, m);
    } else {
        char *both = malloc(strlen(sa) + strlen(sb) + 2);
        sprintf(both, "%s %s", sa, sb);
        cJSON_AddItemToArray(j->merges, cJSON_CreateString(both));
        free(both);
    }
    free(sa);
    free(sb);
}

static int tj_added(tj *j, const char *content, bool lstrip, bool rstrip, bool single_word)
{
    cJSON *a = cJSON_CreateObject();
    cJSON_AddNumberToObject(a, "id", j->next_id);
    cJSON_AddStringToObject(a, "content", content);
    cJSON_AddBoolToObject(a, "single_word", single_word);
    cJSON_AddBoolToObject(a, "lstrip", lstrip);
    cJSON_AddBoolToObject(a, "rstrip", rstrip);
    cJSON_AddFalseToObject(a, "normalized");
    cJSON_AddTrueToObject(a, "special");
    cJSON_AddItemToArray(j->added, a);
    return j->next_id++;
}

static char *tj_text(tj *j)
{
    char *s = cJSON_PrintUnformatted(j->root);
    cJSON_Delete(j->root);
    j->root = NULL;
    return s;
}

static wgml_tokenizer *tj_build(tj *j)
{
    char *s = tj_text(j);
    wgml_tokenizer *t = NULL;
    TH_EXPECT(wgml_tokenizer_parse(s, strlen(s), "tiny.json", &t), WGML_OK);
    free(s);
    return t;
}

/* Encodes s (with added tokens) into ids; returns the count. */
static size_t enc(const wgml_tokenizer *t, const char *s, size_t len, uint32_t *ids, size_t cap)
{
    size_t n = 0;
    wgml_status st = wgml_tokenizer_encode(t, s, len, ids, cap, &n);
    TH_CHECK(st == WGML_OK, "encode: %s", wgml_last_error(NULL));
    return n;
}

static void check_ids_rt(const wgml_tokenizer *t, const char *text, const uint32_t *want, size_t nwant, bool roundtrip)
{
    uint32_t got[256];
    size_t n = enc(t, text, strlen(text), got, 256);
    bool ok = n == nwant && (n == 0 || memcmp(got, want, n * sizeof *got) == 0);
    if (!ok) {
        fprintf(stderr, "  \"%s\": got", text);
        for (size_t i = 0; i < n; i++) fprintf(stderr, " %u", got[i]);
        fprintf(stderr, ", want");
        for (size_t i = 0; i < nwant; i++) fprintf(stderr, " %u", want[i]);
        fprintf(stderr, "\n");
    }
    TH_CHECK(ok, "ids of \"%s\"", text);
    if (!roundtrip) return;
    /* and back */
    char out[1024];
    size_t len = 0;
    TH_EXPECT(wgml_tokenizer_decode(t, got, n, out, sizeof out, &len), WGML_OK);
    TH_CHECK(len == strlen(text) && memcmp(out, text, len) == 0 && out[len] == 0, "decode of \"%s\"", text);
}

static void check_ids(const wgml_tokenizer *t, const char *text, const uint32_t *want, size_t nwant)
{
    check_ids_rt(t, text, want, nwant, true);
}

#define IDS(...) ((const uint32_t[]){ __VA_ARGS__ }), (sizeof((const uint32_t[]){ __VA_ARGS__ }) / sizeof(uint32_t))

/* ---- tokenizer: ids worked out by hand -------------------------------------------------- */

static void test_tokenizer_tiny(void)
{
    for (int form = 0; form < 2; form++) {   /* merges as "a b" and as ["a", "b"] */
        tj j;
        tj_init(&j, PRE_GPT2);
        const char *toks[][2] = { { "h", "e" }, { "l", "l" }, { "he", "ll" }, { "hell", "o" }, { " ", "w" }, { "o", "r" },
                                  { " w", "or" }, { "l", "d" }, { " wor", "ld" }, { " ", " " }, { "\xc3", "\xa9" } };
        for (int i = 0; i < 11; i++) {
            char m[16];
            snprintf(m, sizeof m, "%s%s", toks[i][0], toks[i][1]);
            tj_token(&j, m);   /* ids 256 + i */
            tj_merge(&j, toks[i][0], toks[i][1], form == 1);
        }
        int eot = tj_added(&j, "<|endoftext|>", false, false, false);   /* 267 */
        int lst = tj_added(&j, "<mask>", true, false, false);            /* 268 */
        int rst = tj_added(&j, "<r>", false, true, false);               /* 269 */
        int sw = tj_added(&j, "sw", false, false, true);                 /* 270 */
        int ete = tj_added(&j, "\xc3\xa9t\xc3\xa9", false, false, false);   /* 271 */
        wgml_tokenizer *t = tj_build(&j);
        if (!t) return;
        TH_CHECK(eot == 267 && wgml_tokenizer_vocab_size(t) == 272, "vocab size %u", wgml_tokenizer_vocab_size(t));
        /* merges: he(0) ll(1) hell(2) hello(3) Ġw(4) or(5) Ġwor(6) ld(7) Ġworld(8) ĠĠ(9) é(10) */
        check_ids(t, "hello world", IDS(259, 264));
        check_ids(t, "hello  world", IDS(259, 32, 264));          /* "  world" -> " " + " world" */
        check_ids(t, "h\xc3\xa9llo", IDS(104, 266, 257, 111));     /* ll (rank 1) before é (rank 10) */
        check_ids(t, "   ", IDS(265, 32));                          /* a trailing run stays whole: "ĠĠ" + "Ġ" */
        check_ids(t, "a<|endoftext|>b", IDS(97, 267, 98));
        check_ids(t, "<|endoftext|><|endoftext|>", IDS(267, 267));
        /* lstrip swallows the space before, rstrip the spaces after (so no round trip) */
        check_ids_rt(t, "a <mask> b", IDS(97, (uint32_t)lst, 32, 98), false);
        check_ids_rt(t, "a\t\n<mask>", IDS(97, (uint32_t)lst), false);
        check_ids_rt(t, "a<r>  b", IDS(97, (uint32_t)rst, 98), false);
        check_ids(t, "sw a_sw sw1 (sw)", IDS((uint32_t)sw, 32, 97, 95, 115, 119, 32, 115, 119, 49, 32, 40, (uint32_t)sw, 41));
        check_ids(t, "", (const uint32_t[1]){ 0 }, 0);
        check_ids(t, "x\xc3\xa9t\xc3\xa9", IDS(120, (uint32_t)ete));   /* decodes to its UTF-8 content */
        /* encode_ordinary: "<|endoftext|>" is text, cut as GPT-2 cuts it */
        uint32_t ids[64];
        size_t n = 0;
        TH_EXPECT(wgml_tokenizer_encode_ordinary(t, "a<|endoftext|>", 14, ids, 64, &n), WGML_OK);
        const uint32_t want[] = { 97, 60, 124, 101, 110, 100, 111, 102, 116, 101, 120, 116, 124, 62 };
        TH_CHECK(n == 14 && memcmp(ids, want, sizeof want) == 0, "ordinary encode (%zu ids)", n);
        /* token ids by name */
        TH_CHECK(wgml_tokenizer_token_id(t, "<|endoftext|>") == 267 && wgml_tokenizer_token_id(t, "\xc4\xa0world") == 264 &&
                     wgml_tokenizer_token_id(t, "hello") == 259 && wgml_tokenizer_token_id(t, "\xc3\xa9") == 0xE9 &&
                     wgml_tokenizer_token_id(t, "\xc3\x83\xc2\xa9") == 266 && wgml_tokenizer_token_id(t, "nope") == -1 &&
                     wgml_tokenizer_token_id(t, " ") == -1,
                 "token_id");
        /* capacities */
        n = 0;
        TH_EXPECT_ERR(wgml_tokenizer_encode(t, "hello world", 11, ids, 1, &n), WGML_ERROR_SHAPE, "2 tokens, more than cap = 1");
        TH_CHECK(n == 2 && ids[0] == 259, "needed count and first id");
        TH_EXPECT(wgml_tokenizer_encode(t, "hello world", 11, NULL, 0, &n), WGML_ERROR_SHAPE);
        TH_CHECK(n == 2, "count only");
        char out[8];
        size_t len = 0;
        const uint32_t hw[2] = { 259, 264 };
        TH_EXPECT_ERR(wgml_tokenizer_decode(t, hw, 2, out, 5, &len), WGML_ERROR_SHAPE, "11 bytes, more than cap = 5");
        TH_CHECK(len == 11 && memcmp(out, "hello", 5) == 0, "decode needed %zu", len);
        const uint32_t badid[2] = { 259, 272 };
        TH_EXPECT_ERR(wgml_tokenizer_decode(t, badid, 2, out, 8, &len), WGML_ERROR_INVALID_ARGUMENT, "ids[1] = 272 is not a token");
        TH_EXPECT_ERR(wgml_tokenizer_encode(NULL, "a", 1, ids, 4, &n), WGML_ERROR_INVALID_ARGUMENT, "must not be NULL");
        TH_EXPECT_ERR(wgml_tokenizer_encode(t, NULL, 1, ids, 4, &n), WGML_ERROR_INVALID_ARGUMENT, "must not be NULL");
        TH_EXPECT_ERR(wgml_tokenizer_decode(t, NULL, 1, out, 8, &len), WGML_ERROR_INVALID_ARGUMENT, "must not be NULL");
        wgml_tokenizer_free(t);
    }
}

/* ignore_merges: a piece that is a vocab token is taken whole, even when the merges would
   never build it; otherwise BPE as usual. */
static void test_tokenizer_ignore_merges(void)
{
    for (int ignore = 0; ignore < 2; ignore++) {
        tj j;
        tj_init(&j, PRE_GPT2);
        cJSON_ReplaceItemInObject(j.model, "ignore_merges", cJSON_CreateBool(ignore));
        int ab = tj_token(&j, "ab"), abc = tj_token(&j, "abc");
        tj_merge(&j, "a", "b", false);
        wgml_tokenizer *t = tj_build(&j);
        if (!t) return;
        if (ignore) check_ids(t, "abc", IDS((uint32_t)abc));
        else check_ids(t, "abc", IDS((uint32_t)ab, 99));
        check_ids(t, "abd", IDS((uint32_t)ab, 100));
        wgml_tokenizer_free(t);
    }
}

/* Pre-tokenizer cuts against Python's regex module: a vocab holding exactly the expected
   pieces (ignore_merges, no merges) gives one id per piece only if the cut is right. */
static void test_tokenizer_pretokenizers(void)
{
    static const int kinds[4] = { PRE_GPT2, PRE_LLAMA3, PRE_QWEN2, PRE_DIGITS_GPT2 };
    static const char *names[4] = { "gpt2", "llama3", "qwen2", "digits+gpt2" };
    size_t ncases = sizeof ref_pretok_cases / sizeof ref_pretok_cases[0], bad = 0;
    for (size_t c = 0; c < ncases; c++) {
        tj j;
        tj_init(&j, kinds[ref_pretok_cases[c].kind]);
        cJSON_ReplaceItemInObject(j.model, "ignore_merges", cJSON_CreateTrue());
        uint32_t want[256];
        size_t nwant = 0;
        const char *p = ref_pretok_cases[c].pieces;
        /* pieces: each followed by \001; each new multi-byte piece joins the vocab once */
        const char *known[256];
        size_t klen[256];
        uint32_t kid[256];
        size_t nknown = 0;
        while (*p) {
            const char *e = strchr(p, '\001');
            size_t l = (size_t)(e - p), k;
            if (l == 1) want[nwant++] = (uint8_t)p[0];
            else {
                for (k = 0; k < nknown && !(klen[k] == l && memcmp(known[k], p, l) == 0); k++) {}
                if (k == nknown) {
                    char piece[256];
                    memcpy(piece, p, l);
                    piece[l] = 0;
                    known[k] = p;
                    klen[k] = l;
                    kid[k] = (uint32_t)tj_token(&j, piece);
                    nknown++;
                }
                want[nwant++] = kid[k];
            }
            p = e + 1;
        }
        char *json = tj_text(&j);
        wgml_tokenizer *t = NULL;
        wgml_status st = wgml_tokenizer_parse(json, strlen(json), "pre.json", &t);
        free(json);
        if (st != WGML_OK) {
            TH_CHECK(false, "case %zu: %s", c, wgml_last_error(NULL));
            continue;
        }
        uint32_t got[256];
        const char *text = ref_pretok_cases[c].text;
        size_t n = 0;
        TH_EXPECT(wgml_tokenizer_encode(t, text, strlen(text), got, 256, &n), WGML_OK);
        bool ok = n == nwant && memcmp(got, want, n * sizeof *got) == 0;
        if (!ok && bad++ < 10) {
            fprintf(stderr, "  %s cut of case %zu differs: got", names[ref_pretok_cases[c].kind], c);
            for (size_t i = 0; i < n; i++) fprintf(stderr, " %u", got[i]);
            fprintf(stderr, "; want");
            for (size_t i = 0; i < nwant; i++) fprintf(stderr, " %u", want[i]);
            fprintf(stderr, "\n");
        }
        TH_CHECK(ok, "%s cut of case %zu", names[ref_pretok_cases[c].kind], c);
        wgml_tokenizer_free(t);
    }
}

/* Split patterns beyond the three known ones (a digits regex, a literal string removed),
   and the Unicode normalizers, on cuts worked out from their definitions (a byte vocab
   plus one token per expected piece). */
static void test_tokenizer_split_and_normalizers(void)
{
    /* a Split by {"Regex": "\\d+"} (Isolated): digits runs and the text between them are
       pieces; then {"String": "-"} Removed drops each "-" */
    tj j;
    tj_init(&j, PRE_WHOLE);
    cJSON_ReplaceItemInObject(j.model, "ignore_merges", cJSON_CreateTrue());
    cJSON *seq = cJSON_CreateObject(), *list = cJSON_AddArrayToObject(seq, "pretokenizers");
    cJSON_AddStringToObject(seq, "type", "Sequence");
    cJSON *sp = cJSON_CreateObject(), *pat = cJSON_AddObjectToObject(sp, "pattern");
    cJSON_AddStringToObject(sp, "type", "Split");
    cJSON_AddStringToObject(pat, "Regex", "\\d+");
    cJSON_AddStringToObject(sp, "behavior", "Isolated");
    cJSON_AddFalseToObject(sp, "invert");
    cJSON_AddItemToArray(list, sp);
    cJSON *dash = cJSON_Duplicate(sp, true);
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(dash, "pattern"), "Regex", cJSON_CreateString("x"));
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(dash, "pattern"), "Regex");
    cJSON_AddStringToObject(cJSON_GetObjectItem(dash, "pattern"), "String", "-");
    cJSON_ReplaceItemInObject(dash, "behavior", cJSON_CreateString("Removed"));
    cJSON_AddItemToArray(list, dash);
    cJSON_AddItemToArray(list, cJSON_DetachItemFromObject(j.root, "pre_tokenizer"));
    cJSON_AddItemToObject(j.root, "pre_tokenizer", seq);
    int ab = tj_token(&j, "ab"), n12 = tj_token(&j, "12"), cd = tj_token(&j, "cd"), n345 = tj_token(&j, "345");
    tj_token(&j, "ab12");
    tj_token(&j, "b-c");
    wgml_tokenizer *t = tj_build(&j);
    if (t) {
        check_ids_rt(t, "ab12cd-345", IDS((uint32_t)ab, (uint32_t)n12, (uint32_t)cd, (uint32_t)n345), false);
        check_ids_rt(t, "-ab-", IDS((uint32_t)ab), false);
        wgml_tokenizer_free(t);
    }
    /* the normalizers, before a GPT-2 split over bytes: the ids are the normalized text's
       bytes */
    static const struct { const char *form, *text, *want; } norms[] = {
        { "NFC", "e\xcc\x81", "\xc3\xa9" },                  /* e + combining acute -> U+00E9 */
        { "NFD", "\xc3\xa9", "e\xcc\x81" },
        { "NFKC", "\xef\xac\x81 \xe2\x91\xa0", "fi 1" },     /* U+FB01 ligature, U+2460 circled one */
        { "NFKD", "\xe2\x84\xab", "A\xcc\x8a" },             /* U+212B Angstrom sign -> A + ring */
        { "NFC", "\xe2\x84\xab", "\xc3\x85" },               /* -> U+00C5 */
    };
    for (size_t c = 0; c < sizeof norms / sizeof norms[0]; c++) {
        tj k;
        tj_init(&k, PRE_GPT2);
        cJSON *n = cJSON_CreateObject();
        cJSON_AddStringToObject(n, "type", norms[c].form);
        cJSON_ReplaceItemInObject(k.root, "normalizer", n);
        wgml_tokenizer *nt = tj_build(&k);
        if (!nt) continue;
        uint32_t want[64];
        size_t nwant = strlen(norms[c].want);
        for (size_t i = 0; i < nwant; i++) want[i] = (uint8_t)norms[c].want[i];
        uint32_t got[64];
        size_t ng = enc(nt, norms[c].text, strlen(norms[c].text), got, 64);
        TH_CHECK(ng == nwant && memcmp(got, want, ng * sizeof *got) == 0, "%s of case %zu: %zu ids", norms[c].form, c, ng);
        wgml_tokenizer_free(nt);
    }
}

/* The reference merge: repeatedly the leftmost adjacent pair of lowest rank, one at a time
   (the order Hugging Face's BPE merges in, also for merge tables whose ranks are not in
   creation order). O(n^2 * merges): tiny inputs only. */
static size_t ref_bpe(const uint32_t *in, size_t n, const uint32_t (*m)[3], size_t nm, uint32_t *w)
{
    memcpy(w, in, n * sizeof *w);
    for (;;) {
        size_t best = nm, pos = 0;
        for (size_t i = 0; i + 1 < n; i++)
            for (size_t r = 0; r < best; r++)
                if (m[r][0] == w[i] && m[r][1] == w[i + 1]) {
                    best = r;
                    pos = i;
                    break;
                }
        if (best == nm) return n;
        w[pos] = m[best][2];
        memmove(w + pos + 1, w + pos + 2, (n - pos - 2) * sizeof *w);
        n--;
    }
}

static void test_tokenizer_bpe_vs_reference(void)
{
    enum { MAXTOK = 96, TEXT = 160 };
    const char alphabet[] = "abc d";
    for (int trial = 0; trial < 40; trial++) {
        tj j;
        tj_init(&j, PRE_WHOLE);   /* no pre-tokenizer cuts: one piece, long merge chains */
        char toks[MAXTOK][48];
        int ntok = 0;
        for (size_t i = 0; i < sizeof alphabet - 1; i++) {
            toks[ntok][0] = alphabet[i];
            toks[ntok++][1] = 0;
        }
        uint32_t merges[200][3];
        char mpair[200][2][48];
        size_t nm = 0;
        int target = 20 + (int)(th_rand_u32() % 40);
        for (int tries = 0; tries < 400 && (int)nm < target; tries++) {
            int a = (int)(th_rand_u32() % (uint32_t)ntok), b = (int)(th_rand_u32() % (uint32_t)ntok);
            if (strlen(toks[a]) + strlen(toks[b]) >= 48) continue;
            char m[48];
            memcpy(m, toks[a], strlen(toks[a]));
            strcpy(m + strlen(toks[a]), toks[b]);
            bool dup_pair = false;
            for (size_t k = 0; k < nm; k++) dup_pair |= strcmp(mpair[k][0], toks[a]) == 0 && strcmp(mpair[k][1], toks[b]) == 0;
            if (dup_pair) continue;
            int id = -1;
            for (int k = 0; k < ntok; k++)
                if (strcmp(toks[k], m) == 0) id = k;
            if (id < 0) {   /* a new token */
                if (ntok == MAXTOK) continue;
                strcpy(toks[ntok], m);
                id = ntok++;
                tj_token(&j, m);
            }
            strcpy(mpair[nm][0], toks[a]);
            strcpy(mpair[nm][1], toks[b]);
            nm++;
        }
        /* ids: single bytes are their value; the rest 256 + order of creation */
        int ids_of[MAXTOK];
        for (int k = 0; k < ntok; k++) ids_of[k] = k < 5 ? (uint8_t)toks[k][0] : 256 + (k - 5);
        /* half the trials: ranks shuffled, so merges can outrank the merges that build their parts */
        if (trial % 2)
            for (size_t k = nm - 1; k > 0; k--) {
                size_t r = th_rand_u32() % (k + 1);
                char tmp[2][48];
                memcpy(tmp, mpair[k], sizeof tmp);
                memmove(mpair[k], mpair[r], sizeof tmp);
                memcpy(mpair[r], tmp, sizeof tmp);
            }
        for (size_t k = 0; k < nm; k++) {
            char m[96];
            strcpy(m, mpair[k][0]);
            strcat(m, mpair[k][1]);
            for (int x = 0; x < ntok; x++) {
                if (strcmp(toks[x], mpair[k][0]) == 0) merges[k][0] = (uint32_t)ids_of[x];
                if (strcmp(toks[x], mpair[k][1]) == 0) merges[k][1] = (uint32_t)ids_of[x];
                if (strcmp(toks[x], m) == 0) merges[k][2] = (uint32_t)ids_of[x];
            }
            tj_merge(&j, mpair[k][0], mpair[k][1], k % 2);
        }
        wgml_tokenizer *t = tj_build(&j);
        if (!t) return;
        for (int s = 0; s < 25; s++) {
            char text[TEXT];
            size_t len = 1 + th_rand_u32() % (TEXT - 1);
            uint32_t in[TEXT], want[TEXT], got[TEXT];
            for (size_t i = 0; i < len; i++) {
                text[i] = alphabet[th_rand_u32() % (sizeof alphabet - 1)];
                in[i] = (uint8_t)text[i];
            }
            size_t nw = ref_bpe(in, len, (const uint32_t(*)[3])merges, nm, want);
            size_t ng = enc(t, text, len, got, TEXT);
            TH_CHECK(ng == nw && memcmp(got, want, ng * sizeof *got) == 0, "trial %d text %d (%zu bytes): %zu ids, reference %zu",
                     trial, s, len, ng, nw);
            char back[TEXT + 1];
            size_t bl;
            TH_EXPECT(wgml_tokenizer_decode(t, got, ng, back, sizeof back, &bl), WGML_OK);
            TH_CHECK(bl == len && memcmp(back, text, len) == 0, "round trip");
        }
        wgml_tokenizer_free(t);
    }
}

/* Any bytes, valid UTF-8 in every length or not, decode back to exactly themselves. */
static void test_tokenizer_utf8_roundtrip(void)
{
    const int kinds[3] = { PRE_GPT2, PRE_LLAMA3, PRE_DIGITS_GPT2 };
    for (int k = 0; k < 3; k++) {
        tj j;
        tj_init(&j, kinds[k]);
        tj_token(&j, "\xc3\xa9");
        tj_merge(&j, "\xc3", "\xa9", false);
        tj_token(&j, "\xe4\xbd");
        tj_merge(&j, "\xe4", "\xbd", false);
        tj_token(&j, "\xe4\xbd\xa0");
        tj_merge(&j, "\xe4\xbd", "\xa0", false);
        tj_token(&j, " 1");
        tj_merge(&j, " ", "1", false);
        tj_added(&j, "<|x|>", false, false, false);
        wgml_tokenizer *t = tj_build(&j);
        if (!t) return;
        TH_CHECK(wgml_tokenizer_token_id(t, "\xc3\x83\xc2\xa9") == 256, "é spelled as bytes");
        check_ids(t, "caf\xc3\xa9", IDS(99, 97, 102, 256));
        check_ids(t, "\xe4\xbd\xa0\xe5\xa5\xbd", IDS(258, 229, 165, 189));
        for (int trial = 0; trial < 200; trial++) {
            char text[400];
            size_t len = 0;
            int nch = (int)(th_rand_u32() % 60);
            for (int c = 0; c < nch && len < 380; c++) {
                uint32_t r = th_rand_u32() % 10, cp;
                if (trial % 4 == 3 && r == 0) { text[len++] = (char)th_rand_u32(); continue; }   /* any byte */
                if (r < 3) cp = " \t\n\r'1a!"[th_rand_u32() % 8];
                else if (r < 5) cp = 0x80 + th_rand_u32() % 0x780;
                else if (r < 8) cp = 0x800 + th_rand_u32() % 0xF800;
                else cp = 0x10000 + th_rand_u32() % 0x100000;
                if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0x4F60;
                if (cp < 0x80) text[len++] = (char)cp;
                else if (cp < 0x800) { text[len++] = (char)(0xC0 | (cp >> 6)); text[len++] = (char)(0x80 | (cp & 63)); }
                else if (cp < 0x10000) {
                    text[len++] = (char)(0xE0 | (cp >> 12)); text[len++] = (char)(0x80 | ((cp >> 6) & 63));
                    text[len++] = (char)(0x80 | (cp & 63));
                } else {
                    text[len++] = (char)(0xF0 | (cp >> 18)); text[len++] = (char)(0x80 | ((cp >> 12) & 63));
                    text[len++] = (char)(0x80 | ((cp >> 6) & 63)); text[len++] = (char)(0x80 | (cp & 63));
                }
            }
            if (trial % 7 == 0 && len < 380) { memcpy(text + len, "<|x|>", 5); len += 5; }
            uint32_t ids[400];
            size_t n = enc(t, text, len, ids, 400);
            TH_CHECK(n <= len, "no more ids than bytes");
            char back[401];
            size_t bl = 0;
            TH_EXPECT(wgml_tokenizer_decode(t, ids, n, back, sizeof back, &bl), WGML_OK);
            TH_CHECK(bl == len && memcmp(back, text, len) == 0, "%s round trip of %zu bytes", k ? "llama3" : "gpt2", len);
        }
        wgml_tokenizer_free(t);
    }
}

static void test_tokenizer_bytes(void)
{
    wgml_tokenizer *t;
    TH_EXPECT(wgml_tokenizer_bytes(&t), WGML_OK);
    TH_CHECK(wgml_tokenizer_vocab_size(t) == 256 && wgml_tokenizer_token_id(t, "a") == 97 &&
                 wgml_tokenizer_token_id(t, "\xc4\xa0") == 32 && wgml_tokenizer_token_id(t, "ab") == -1,
             "byte vocabulary");
    check_ids(t, "h\xc3\xa9 <|endoftext|>", IDS(104, 0xC3, 0xA9, 32, 60, 124, 101, 110, 100, 111, 102, 116, 101, 120, 116, 124, 62));
    uint32_t all[256];
    char raw[256], back[257];
    for (int i = 0; i < 256; i++) raw[i] = (char)i;
    size_t n = enc(t, raw, 256, all, 256), bl;
    bool same = n == 256;
    for (int i = 0; i < 256 && same; i++) same = all[i] == (uint32_t)i;
    TH_CHECK(same, "every byte is its own id");
    TH_EXPECT(wgml_tokenizer_decode(t, all, 256, back, 257, &bl), WGML_OK);
    TH_CHECK(bl == 256 && memcmp(back, raw, 256) == 0, "bytes round trip");
    wgml_tokenizer_free(t);
    TH_EXPECT_ERR(wgml_tokenizer_bytes(NULL), WGML_ERROR_INVALID_ARGUMENT, "must not be NULL");
    wgml_tokenizer_free(NULL);
    TH_CHECK(wgml_tokenizer_vocab_size(NULL) == 0 && wgml_tokenizer_token_id(NULL, "a") == -1, "NULL tokenizer");
}

/* Malformed tokenizer.json: each edit of a valid document, and the problem it must name. */
static void test_tokenizer_malformed(void)
{
    static const struct { int edit; const char *needle; } cases[] = {
        { 0, "model.type 'WordPiece' is not supported (BPE only)" },
        { 1, "normalizer 'Lowercase' is not supported" },
        { 2, "model.vocab lacks the token of byte 0x41 (spelled U+0041)" },
        { 3, "merges[1]: 'zz' is not a byte-level token of the vocab" },
        { 4, "merges[1] 'a c': 'ac' is not in the vocab" },
        { 5, "merges[1] 'a b c' is not two tokens split by a space" },
        { 6, "model.vocab gives id 256 to both" },
        { 7, "added_tokens[1] repeats '<|x|>'" },
        { 8, "token id 9000000 is far beyond the" },
        { 9, "pattern '(\\w+' does not compile: missing closing parenthesis" },
        { 10, "behavior must be \"Isolated\"" },
        { 11, "pre_tokenizer.replacement must be" },
        { 12, "decoder type 'WordPiece' is not supported" },
        { 13, "model.byte_fallback with a byte-level pre_tokenizer is not supported" },
        { 14, "model.continuing_subword_prefix is not supported" },
        { 15, "pre_tokenizer and normalizer are null" },
        { 16, "pre_tokenizer must end with its only ByteLevel step" },
        { 17, "model.vocab['xyz'] must be an integer in [0, 16777215], not -1" },
        { 18, "added_tokens[1].content is empty" },
        { 19, "model.vocab has the key 'a' twice" },
        { 20, "merges[1] must be \"a b\" or [\"a\", \"b\"], not a number" },
        { 21, "added_tokens give id 257 to two tokens" },
        { 22, "model.vocab must be an object, not an array" },
        { 23, "invalid JSON" },
        { 24, "model.vocab['xyz'] must be an integer, not a string" },
        { 25, "added_tokens[0].lstrip must be true or false, not a string" },
        { 26, "model.vocab lacks the token of byte 0xb1 (spelled U+00B1)" },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        tj j;
        tj_init(&j, PRE_GPT2);
        tj_token(&j, "ab");
        tj_merge(&j, "a", "b", false);
        tj_added(&j, "<|x|>", false, false, false);
        cJSON *m;
        switch (cases[c].edit) {
        case 0: cJSON_ReplaceItemInObject(j.model, "type", cJSON_CreateString("WordPiece")); break;
        case 1: m = cJSON_CreateObject(); cJSON_AddStringToObject(m, "type", "Lowercase");
                cJSON_ReplaceItemInObject(j.root, "normalizer", m); break;
        case 2: cJSON_DeleteItemFromObject(j.vocab, "A"); break;
        case 3: cJSON_AddItemToArray(j.merges, cJSON_CreateString("zz b")); break;
        case 4: cJSON_AddItemToArray(j.merges, cJSON_CreateString("a c")); break;
        case 5: cJSON_AddItemToArray(j.merges, cJSON_CreateString("a b c")); break;
        case 6: cJSON_AddNumberToObject(j.vocab, "xy", 256); break;
        case 7: tj_added(&j, "<|x|>", false, false, false); break;
        case 8: cJSON_AddNumberToObject(j.vocab, "xy", 9000000); break;
        case 9: m = cJSON_GetObjectItem(j.root, "pre_tokenizer");
                cJSON_ReplaceItemInObject(j.root, "pre_tokenizer", pre_tokenizer(PRE_LLAMA3));
                m = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(j.root, "pre_tokenizer"), "pretokenizers"), 0);
                cJSON_ReplaceItemInObject(cJSON_GetObjectItem(m, "pattern"), "Regex", cJSON_CreateString("(\\w+")); break;
        case 10: cJSON_ReplaceItemInObject(j.root, "pre_tokenizer", pre_tokenizer(PRE_LLAMA3));
                m = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(j.root, "pre_tokenizer"), "pretokenizers"), 0);
                cJSON_ReplaceItemInObject(m, "behavior", cJSON_CreateString("MergedWithPrevious")); break;
        case 11: m = cJSON_CreateObject(); cJSON_AddStringToObject(m, "type", "Metaspace");
                cJSON_ReplaceItemInObject(j.root, "pre_tokenizer", m); break;
        case 12: m = cJSON_CreateObject(); cJSON_AddStringToObject(m, "type", "WordPiece");
                cJSON_ReplaceItemInObject(j.root, "decoder", m); break;
        case 13: cJSON_ReplaceItemInObject(j.model, "byte_fallback", cJSON_CreateTrue()); break;
        case 14: cJSON_ReplaceItemInObject(j.model, "continuing_subword_prefix", cJSON_CreateString("##")); break;
        case 15: cJSON_ReplaceItemInObject(j.root, "pre_tokenizer", cJSON_CreateNull()); break;
        case 16: m = cJSON_GetObjectItem(j.root, "pre_tokenizer");
                cJSON_ReplaceItemInObject(j.root, "pre_tokenizer", pre_tokenizer(PRE_DIGITS_GPT2));
                m = cJSON_GetObjectItem(cJSON_GetObjectItem(j.root, "pre_tokenizer"), "pretokenizers");
                cJSON_AddItemToArray(m, cJSON_Duplicate(cJSON_GetArrayItem(m, 0), true)); break;
        case 17: cJSON_AddNumberToObject(j.vocab, "xyz", -1); break;
        case 18: m = cJSON_CreateObject(); cJSON_AddNumberToObject(m, "id", 300); cJSON_AddStringToObject(m, "content", "");
                cJSON_AddItemToArray(j.added, m); break;
        case 19: cJSON_AddNumberToObject(j.vocab, "a", 300); break;
        case 20: cJSON_AddItemToArray(j.merges, cJSON_CreateNumber(3)); break;
        case 21: m = cJSON_CreateObject(); cJSON_AddNumberToObject(m, "id", 257); cJSON_AddStringToObject(m, "content", "<y>");
                cJSON_AddItemToArray(j.added, m); break;
        case 22: cJSON_ReplaceItemInObject(j.model, "vocab", cJSON_CreateArray()); break;
        case 23: break;   /* truncated below */
        case 24: cJSON_AddStringToObject(j.vocab, "xyz", "5"); break;
        case 25: cJSON_ReplaceItemInObject(cJSON_GetArrayItem(j.added, 0), "lstrip", cJSON_CreateString("no")); break;
        case 26: cJSON_DeleteItemFromObject(j.vocab, "\xc2\xb1"); break;
        }
        char *s = tj_text(&j);
        size_t len = strlen(s);
        if (cases[c].edit == 23) len /= 2;
        wgml_tokenizer *t = (wgml_tokenizer *)&len;
        EXPECT_FORMAT(wgml_tokenizer_parse(s, len, "tok.json", &t), "tok.json", cases[c].needle);
        TH_CHECK(t == NULL, "case %zu: out NULL", c);
        free(s);
    }
    /* files */
    wgml_tokenizer *t;
    TH_EXPECT_ERR(wgml_tokenizer_load(tmp_path("none.json"), &t), WGML_ERROR_IO, "cannot open");
    tj j;
    tj_init(&j, PRE_LLAMA3);
    char *s = tj_text(&j);
    const char *p = tmp_path("tokenizer.json");
    write_file(p, s, strlen(s));
    free(s);
    TH_EXPECT(wgml_tokenizer_load(p, &t), WGML_OK);
    check_ids(t, "Hi 1234", IDS(72, 105, 32, 49, 50, 51, 52));
    wgml_tokenizer_free(t);
    unlink(p);
}

/* ---- SentencePiece-style tokenizers ------------------------------------------------------ */

#define SPC "\xE2\x96\x81"   /* U+2581, SentencePiece's space */

enum { SP_NORMALIZER, SP_METASPACE, SP_UNK_FUSED, SP_UNK };

/* The vocab of the SentencePiece-style cases: <unk> <s> </s>, the byte tokens <0x00> ..
   <0xFF> (ids 3 .. 258), then 259 "_" (U+2581), 260 a, 261 b, 262 c, 263 "_a", 264 ab,
   265 "_ab", 266 e-acute, 267 "c_"; merges by rank: a b, _ ab, _ a, c _. Kinds: the
   normalizer (Prepend, Replace) with a decoder Sequence ending in Strip; Metaspace
   (prepend_scheme first, split) with the Metaspace decoder; no byte fallback, with the
   unknown token fused or not. */
static cJSON *sp_json(int kind)
{
    cJSON *root = cJSON_CreateObject(), *m;
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    const char *specials[3] = { "<unk>", "<s>", "</s>" };
    for (int i = 0; i < 3; i++) {
        m = cJSON_CreateObject();
        cJSON_AddNumberToObject(m, "id", i);
        cJSON_AddStringToObject(m, "content", specials[i]);
        cJSON_AddTrueToObject(m, "special");
        cJSON_AddItemToArray(added, m);
    }
    if (kind == SP_METASPACE) {
        cJSON_AddNullToObject(root, "normalizer");
        m = cJSON_AddObjectToObject(root, "pre_tokenizer");
        cJSON_AddStringToObject(m, "type", "Metaspace");
        cJSON_AddStringToObject(m, "replacement", SPC);
        cJSON_AddStringToObject(m, "prepend_scheme", "first");
        cJSON_AddTrueToObject(m, "split");
        m = cJSON_AddObjectToObject(root, "decoder");
        cJSON_AddStringToObject(m, "type", "Metaspace");
        cJSON_AddStringToObject(m, "replacement", SPC);
        cJSON_AddStringToObject(m, "prepend_scheme", "first");
        cJSON_AddTrueToObject(m, "split");
    } else {
        cJSON *norm = cJSON_AddObjectToObject(root, "normalizer"), *list;
        cJSON_AddStringToObject(norm, "type", "Sequence");
        list = cJSON_AddArrayToObject(norm, "normalizers");
        m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "type", "Prepend");
        cJSON_AddStringToObject(m, "prepend", SPC);
        cJSON_AddItemToArray(list, m);
        m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "type", "Replace");
        cJSON_AddStringToObject(cJSON_AddObjectToObject(m, "pattern"), "String", " ");
        cJSON_AddStringToObject(m, "content", SPC);
        cJSON_AddItemToArray(list, m);
        cJSON_AddNullToObject(root, "pre_tokenizer");
        cJSON *dec = cJSON_AddObjectToObject(root, "decoder");
        cJSON_AddStringToObject(dec, "type", "Sequence");
        list = cJSON_AddArrayToObject(dec, "decoders");
        m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "type", "Replace");
        cJSON_AddStringToObject(cJSON_AddObjectToObject(m, "pattern"), "String", SPC);
        cJSON_AddStringToObject(m, "content", " ");
        cJSON_AddItemToArray(list, m);
        const char *plain[2] = { "ByteFallback", "Fuse" };
        for (int i = 0; i < 2; i++) {
            m = cJSON_CreateObject();
            cJSON_AddStringToObject(m, "type", plain[i]);
            cJSON_AddItemToArray(list, m);
        }
        m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "type", "Strip");
        cJSON_AddStringToObject(m, "content", " ");
        cJSON_AddNumberToObject(m, "start", 1);
        cJSON_AddNumberToObject(m, "stop", 0);
        cJSON_AddItemToArray(list, m);
    }
    cJSON *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddStringToObject(model, "unk_token", "<unk>");
    cJSON_AddBoolToObject(model, "fuse_unk", kind != SP_UNK);
    cJSON_AddBoolToObject(model, "byte_fallback", kind == SP_NORMALIZER || kind == SP_METASPACE);
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    for (int i = 0; i < 3; i++) cJSON_AddNumberToObject(vocab, specials[i], i);
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        cJSON_AddNumberToObject(vocab, name, 3 + b);
    }
    const char *pieces[] = { SPC, "a", "b", "c", SPC "a", "ab", SPC "ab", "\xC3\xA9", "c" SPC };
    for (int i = 0; i < 9; i++) cJSON_AddNumberToObject(vocab, pieces[i], 259 + i);
    cJSON *merges = cJSON_AddArrayToObject(model, "merges");
    const char *ms[] = { "a b", SPC " ab", SPC " a", "c " SPC };
    for (int i = 0; i < 4; i++) cJSON_AddItemToArray(merges, cJSON_CreateString(ms[i]));
    return root;
}

static wgml_tokenizer *sp_build(cJSON *root)
{
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    wgml_tokenizer *t = NULL;
    TH_EXPECT(wgml_tokenizer_parse(s, strlen(s), "sp.json", &t), WGML_OK);
    free(s);
    return t;
}

static void check_decode(const wgml_tokenizer *t, const uint32_t *ids, size_t n, bool continuation, const char *want)
{
    char out[256];
    size_t len = 0;
    TH_EXPECT(continuation ? wgml_tokenizer_decode_continuation(t, ids, n, out, sizeof out, &len)
                           : wgml_tokenizer_decode(t, ids, n, out, sizeof out, &len), WGML_OK);
    TH_CHECK(len == strlen(want) && memcmp(out, want, len) == 0, "%s of %zu ids: '%.*s', want '%s'",
             continuation ? "decode_continuation" : "decode", n, (int)len, out, want);
}

/* Ids worked out by hand from the definitions (see sp_json), and decoding back. */
static void test_tokenizer_sentencepiece(void)
{
    /* the normalizer: "_ab_abc_e-acute-euro" is one word; a b, then _ ab, then c _; the
       euro sign has no token: its bytes E2 82 AC become <0xE2> <0x82> <0xAC> */
    wgml_tokenizer *t = sp_build(sp_json(SP_NORMALIZER));
    check_ids(t, "ab abc \xC3\xA9\xE2\x82\xAC", IDS(265, 265, 267, 266, 3 + 0xE2, 3 + 0x82, 3 + 0xAC));
    check_ids(t, "b", IDS(259, 261));
    /* each piece between added tokens gets its space; decoding keeps the one after <s> */
    check_ids_rt(t, "<s>ab", IDS(1, 265), false);
    check_decode(t, IDS(1, 265), false, "<s> ab");
    /* a continuation keeps its leading space; a lone space strips to nothing */
    check_decode(t, IDS(265), true, " ab");
    check_decode(t, IDS(265), false, "ab");
    check_decode(t, IDS(259), false, "");
    TH_CHECK(wgml_tokenizer_token_id(t, SPC "ab") == 265 && wgml_tokenizer_token_id(t, "<0x41>") == 3 + 0x41 &&
                 wgml_tokenizer_token_id(t, "<unk>") == 0 && wgml_tokenizer_token_id(t, "abc") == -1,
             "token ids by spelling");
    wgml_tokenizer_free(t);

    /* Metaspace: prepended only at the text's start, and words cut before each space, so
       that c and _ do not merge */
    t = sp_build(sp_json(SP_METASPACE));
    check_ids(t, "ab abc \xC3\xA9\xE2\x82\xAC", IDS(265, 265, 262, 259, 266, 3 + 0xE2, 3 + 0x82, 3 + 0xAC));
    check_ids(t, "<s>ab", IDS(1, 264));
    check_ids_rt(t, " ab", IDS(265), false);   /* prepend_scheme's space only where there is none */
    check_decode(t, IDS(265), false, "ab");
    check_ids(t, "a  b", IDS(263, 259, 259, 261));
    wgml_tokenizer_free(t);

    /* no byte fallback: a character without a token is <unk>, a run of them one <unk> with
       fuse_unk */
    t = sp_build(sp_json(SP_UNK_FUSED));
    check_ids_rt(t, "a\xE2\x82\xAC\xE2\x82\xAC" "b", IDS(263, 0, 261), false);
    wgml_tokenizer_free(t);
    t = sp_build(sp_json(SP_UNK));
    check_ids_rt(t, "a\xE2\x82\xAC\xE2\x82\xAC" "b", IDS(263, 0, 0, 261), false);
    wgml_tokenizer_free(t);

    /* byte tokens carry raw bytes: every UTF-8 text and invalid bytes round-trip */
    t = sp_build(sp_json(SP_NORMALIZER));
    const char *texts[] = { "caf\xC3\xA9 \xF0\x9F\x98\x80 \xFF\xFE x", "\n\ta  b ", "abababab" };
    for (int i = 0; i < 3; i++) {
        uint32_t ids[128];
        size_t n = enc(t, texts[i], strlen(texts[i]), ids, 128);
        check_decode(t, ids, n, false, texts[i]);
    }
    wgml_tokenizer_free(t);
}

/* SentencePiece-style files that wgml would encode differently from Hugging Face, or that
   are broken: refused, naming the field. */
static void test_tokenizer_sentencepiece_malformed(void)
{
    static const struct { int edit; const char *needle; } cases[] = {
        { 0, "model.byte_fallback without the token <0x41>" },
        { 1, "model.vocab spells ' ab' twice" },
        { 2, "normalizer does not replace" },
        { 3, "normalizer.normalizers[..] 'Prepend' is not supported" },
        { 4, "needs its decoder" },
        { 5, "decoder does not replace" },
        { 6, "must be an integer in [0, 1]" },
        { 7, "a normalizer with a pre_tokenizer" },
        { 8, "prepend_scheme must be" },
        { 9, "normalizer.normalizers[..] 'Lowercase' is not supported" },
        { 10, "merges[4]: 'zz' is not a token of the vocab" },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int e = cases[c].edit;
        cJSON *root = sp_json(e == 8 ? SP_METASPACE : SP_NORMALIZER), *m;
        cJSON *model = cJSON_GetObjectItem(root, "model"), *vocab = cJSON_GetObjectItem(model, "vocab");
        cJSON *norms = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "normalizer"), "normalizers");
        cJSON *decs = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "decoder"), "decoders");
        switch (e) {
        case 0: cJSON_DeleteItemFromObject(vocab, "<0x41>"); break;
        case 1: cJSON_AddNumberToObject(vocab, " ab", 268); break;
        case 2: cJSON_DeleteItemFromArray(norms, 1); break;
        case 3: cJSON_ReplaceItemInObject(cJSON_GetArrayItem(norms, 0), "prepend", cJSON_CreateString("_")); break;
        case 4: cJSON_ReplaceItemInObject(root, "decoder", cJSON_CreateNull()); break;
        case 5: cJSON_DeleteItemFromArray(decs, 0); break;
        case 6: cJSON_ReplaceItemInObject(cJSON_GetArrayItem(decs, 3), "start", cJSON_CreateNumber(2)); break;
        case 7: m = cJSON_CreateObject(); cJSON_AddStringToObject(m, "type", "Metaspace");
                cJSON_ReplaceItemInObject(root, "pre_tokenizer", m); break;
        case 8: cJSON_ReplaceItemInObject(cJSON_GetObjectItem(root, "pre_tokenizer"), "prepend_scheme",
                                          cJSON_CreateString("sometimes")); break;
        case 9: m = cJSON_CreateObject(); cJSON_AddStringToObject(m, "type", "Lowercase"); cJSON_AddItemToArray(norms, m); break;
        case 10: cJSON_AddItemToArray(cJSON_GetObjectItem(model, "merges"), cJSON_CreateString("zz a")); break;
        }
        char *s = cJSON_PrintUnformatted(root);
        cJSON_Delete(root);
        wgml_tokenizer *t = NULL;
        EXPECT_FORMAT(wgml_tokenizer_parse(s, strlen(s), "sp.json", &t), "sp.json", cases[c].needle);
        TH_CHECK(t == NULL, "case %zu: out NULL", c);
        free(s);
    }
}

/* TemplateProcessing: the special tokens its single template puts around $A, alone or in
   a Sequence after ByteLevel (Llama 3's form); what it cannot express is refused. */
static cJSON *template_post(const char *single_json)
{
    char text[1024];
    snprintf(text, sizeof text, "{\"type\":\"TemplateProcessing\",\"single\":%s,\"pair\":[],\"special_tokens\":"
             "{\"<s>\":{\"id\":\"<s>\",\"ids\":[1],\"tokens\":[\"<s>\"]},\"</s>\":{\"id\":\"</s>\",\"ids\":[2],"
             "\"tokens\":[\"</s>\"]},\"bad\":{\"id\":\"bad\",\"ids\":[100000],\"tokens\":[\"bad\"]}}}", single_json);
    return cJSON_Parse(text);
}

#define TP_S "{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}}"
#define TP_E "{\"SpecialToken\":{\"id\":\"</s>\",\"type_id\":0}}"
#define TP_A "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}"

static void test_tokenizer_post_processor(void)
{
    /* <s> $A </s>, and in a Sequence after ByteLevel: <s> $A */
    for (int form = 0; form < 2; form++) {
        cJSON *root = sp_json(SP_NORMALIZER);
        cJSON *post = template_post(form == 0 ? "[" TP_S "," TP_A "," TP_E "]" : "[" TP_S "," TP_A "]");
        if (form == 1) {
            cJSON *seq = cJSON_CreateObject(), *list = cJSON_AddArrayToObject(seq, "processors"), *bl = cJSON_CreateObject();
            cJSON_AddStringToObject(seq, "type", "Sequence");
            cJSON_AddStringToObject(bl, "type", "ByteLevel");
            cJSON_AddItemToArray(list, bl);
            cJSON_AddItemToArray(list, post);
            post = seq;
        }
        cJSON_AddItemToObject(root, "post_processor", post);
        wgml_tokenizer *t = sp_build(root);
        const uint32_t *pre = NULL, *suf = NULL;
        size_t np = 9, ns = 9;
        wgml_tokenizer_specials(t, &pre, &np, &suf, &ns);
        TH_CHECK(np == 1 && pre[0] == 1 && ns == (form == 0 ? 1u : 0u) && (form == 1 || suf[0] == 2),
                 "form %d: %zu prefix ids (%u), %zu suffix ids", form, np, np ? pre[0] : 0, ns);
        check_ids(t, "ab", IDS(265));   /* encode itself adds none */
        wgml_tokenizer_free(t);
    }
    /* no template: none; a NULL tokenizer: none */
    wgml_tokenizer *t = sp_build(sp_json(SP_NORMALIZER));
    size_t np = 9, ns = 9;
    wgml_tokenizer_specials(t, NULL, &np, NULL, &ns);
    TH_CHECK(np == 0 && ns == 0, "a tokenizer without a template has %zu + %zu special ids", np, ns);
    wgml_tokenizer_free(t);
    wgml_tokenizer_specials(NULL, NULL, &np, NULL, &ns);
    TH_CHECK(np == 0 && ns == 0, "NULL tokenizer: %zu + %zu", np, ns);

    static const struct { const char *single, *type, *needle; } bad[] = {
        { "[" TP_S "," TP_A "]", "RobertaProcessing", "'RobertaProcessing' is not supported" },
        { "[{\"SpecialToken\":{\"id\":\"<x>\"}}," TP_A "]", NULL, "no ids for '<x>'" },
        { "[{\"SpecialToken\":{\"id\":\"bad\"}}," TP_A "]", NULL, "an id that is no token" },
        { "[" TP_S ",{\"Sequence\":{\"id\":\"B\"}}]", NULL, "only $A" },
        { "[" TP_S "]", NULL, "has no $A" },
        { "[" TP_A "," TP_S "," TP_A "]", NULL, "holds $A twice" },
        { "[3," TP_A "]", NULL, "neither" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cJSON *root = sp_json(SP_NORMALIZER), *post = template_post(bad[i].single);
        TH_CHECK(post != NULL, "case %zu: the test's JSON does not parse", i);
        if (!post) { cJSON_Delete(root); continue; }
        if (bad[i].type) cJSON_ReplaceItemInObject(post, "type", cJSON_CreateString(bad[i].type));
        cJSON_AddItemToObject(root, "post_processor", post);
        char *text = cJSON_PrintUnformatted(root);
        cJSON_Delete(root);
        wgml_tokenizer *r = NULL;
        EXPECT_FORMAT(wgml_tokenizer_parse(text, strlen(text), "pp.json", &r), "pp.json", bad[i].needle);
        TH_CHECK(r == NULL, "case %zu: out NULL", i);
        free(text);
    }
}

/* Long inputs stay fast: a long run of one letter (one piece, merges all the way). */
static void test_tokenizer_long_piece(void)
{
    tj j;
    tj_init(&j, PRE_GPT2);
    tj_token(&j, "aa");
    tj_merge(&j, "a", "a", false);
    tj_token(&j, "aaaa");
    tj_merge(&j, "aa", "aa", false);
    wgml_tokenizer *t = tj_build(&j);
    if (!t) return;
    size_t len = 1 << 20;
    char *text = malloc(len + 1);
    memset(text, 'a', len);
    text[len - 1] = 'b';
    uint32_t *ids = malloc(len * sizeof *ids);
    size_t n = enc(t, text, len, ids, len);
    bool ok = n == (len - 1) / 4 + 3;   /* 262143 "aaaa", then "aa" "a", then "b" */
    for (size_t i = 0; ok && i + 3 < n; i++) ok = ids[i] == 257;
    TH_CHECK(ok && ids[n - 3] == 256 && ids[n - 2] == 'a' && ids[n - 1] == 'b', "long piece: %zu ids", n);
    free(text);
    free(ids);
    wgml_tokenizer_free(t);
}

/* Long texts go through a cache of pieces: the ids of a text of many sentences are the ids
   of each sentence encoded alone (short: no cache), also when the output is cut short. */
static void test_tokenizer_long_text(void)
{
    tj j;
    tj_init(&j, PRE_GPT2);
    const char *m[][2] = { { "h", "e" }, { "l", "l" }, { "he", "ll" }, { "hell", "o" }, { " ", "w" }, { "o", "r" },
                           { " w", "or" }, { "l", "d" }, { " wor", "ld" }, { " ", "t" }, { "t", "h" }, { " t", "he" },
                           { "\xc3", "\xa9" } };
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
        char both[16];
        snprintf(both, sizeof both, "%s%s", m[i][0], m[i][1]);
        tj_token(&j, both);
        tj_merge(&j, m[i][0], m[i][1], false);
    }
    tj_added(&j, "<|endoftext|>", false, false, false);
    wgml_tokenizer *t = tj_build(&j);
    if (!t) return;
    static const char *const words[] = { "hello", "world", "the", "caf\xc3\xa9", "hellohello", "worlds", "12",
                                         "theworld", "x", "'s", "!!", "<|endoftext|>" };
    size_t cap = 1 << 18, len = 0, nwant = 0;
    char *text = malloc(cap + 64);
    uint32_t *want = malloc(cap * sizeof *want), *got = malloc(cap * sizeof *got), part[64];
    while (len < cap - 64) {   /* sentences of random words, each ending in a newline */
        char sent[64];
        size_t sl = 0;
        int nw = 1 + (int)(th_rand_u32() % 4);
        for (int w = 0; w < nw; w++) sl += (size_t)snprintf(sent + sl, sizeof sent - sl, "%s%s", w ? " " : "", words[th_rand_u32() % 12]);
        sent[sl++] = '\n';
        size_t np = enc(t, sent, sl, part, 64);
        memcpy(want + nwant, part, np * sizeof *part);
        nwant += np;
        memcpy(text + len, sent, sl);
        len += sl;
    }
    size_t n = enc(t, text, len, got, cap);
    TH_CHECK(n == nwant && memcmp(got, want, n * sizeof *got) == 0, "%zu bytes: %zu ids, sentence by sentence %zu", len, n, nwant);
    size_t short_cap = nwant / 3;
    memset(got, 0xFF, cap * sizeof *got);
    TH_EXPECT(wgml_tokenizer_encode(t, text, len, got, short_cap, &n), WGML_ERROR_SHAPE);
    TH_CHECK(n == nwant && memcmp(got, want, short_cap * sizeof *got) == 0 && got[short_cap] == 0xFFFFFFFFu,
             "cut short: the first ids, nothing past cap");
    free(text);
    free(want);
    free(got);
    wgml_tokenizer_free(t);
}

static const th_case cases[] = {
    { "safetensors_roundtrip", test_safetensors_roundtrip },
    { "safetensors_write_rejects", test_safetensors_write_rejects },
    { "safetensors_malformed", test_safetensors_malformed },
    { "safetensors_dtypes", test_safetensors_dtypes },
    { "checkpoint_shards", test_checkpoint_shards },
    { "config", test_config },
    { "tokenizer_tiny", test_tokenizer_tiny },
    { "tokenizer_ignore_merges", test_tokenizer_ignore_merges },
    { "tokenizer_pretokenizers", test_tokenizer_pretokenizers },
    { "tokenizer_split_and_normalizers", test_tokenizer_split_and_normalizers },
    { "tokenizer_bpe_vs_reference", test_tokenizer_bpe_vs_reference },
    { "tokenizer_utf8_roundtrip", test_tokenizer_utf8_roundtrip },
    { "tokenizer_bytes", test_tokenizer_bytes },
    { "tokenizer_malformed", test_tokenizer_malformed },
    { "tokenizer_sentencepiece", test_tokenizer_sentencepiece },
    { "tokenizer_sentencepiece_malformed", test_tokenizer_sentencepiece_malformed },
    { "tokenizer_post_processor", test_tokenizer_post_processor },
    { "tokenizer_long_piece", test_tokenizer_long_piece },
    { "tokenizer_long_text", test_tokenizer_long_text },
};

TH_MAIN(cases)
