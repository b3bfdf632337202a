/* Helpers shared by the parsers of untrusted files: whole-file reads, strict JSON on top of
   cJSON, UTF-8, quoting for messages, and a seeded string hash map (see io.h). */
/* realpath(3) is an X/Open interface */
#define _XOPEN_SOURCE 700
#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- files -------------------------------------------------------------------------- */

static const char *errno_text(int err, char *buf, size_t size)
{
    if (strerror_r(err, buf, size) != 0) snprintf(buf, size, "error %d", err);
    return buf;
}

/* The folder part of path ("." when it has none), in buf. */
static void folder_of(const char *path, char *buf, size_t size)
{
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(buf, size, ".");
    else if (slash == path) snprintf(buf, size, "/");
    else snprintf(buf, size, "%.*s", (int)(slash - path), path);
}

/* Whether the resolved path p lies in the resolved folder r: under r itself, or, when r is
   a Hugging Face cache snapshot (<repo>/snapshots/<revision>, whose files link to
   <repo>/blobs/<hash>), under <repo>/blobs. */
static bool resolves_inside(const char *r, const char *p)
{
    size_t n = strlen(r);
    if (strcmp(r, "/") == 0) return true;
    if (strncmp(p, r, n) == 0 && p[n] == '/') return true;
    const char *rev = strrchr(r, '/');
    if (!rev || rev == r) return false;
    size_t snap_end = (size_t)(rev - r);   /* r[0 .. snap_end) ends in "/snapshots" */
    if (snap_end < 10 || strncmp(r + snap_end - 10, "/snapshots", 10) != 0) return false;
    size_t repo = snap_end - 10;
    return repo > 0 && strncmp(p, r, repo) == 0 && strncmp(p + repo, "/blobs/", 7) == 0;
}

wgml_status wgml__open_file(const char *path, bool in_folder, int *fd_out, uint64_t *size)
{
    char eb[128];
    *fd_out = -1;
    *size = 0;
    const char *open_path = path;
    char *real = NULL;
    if (in_folder) {
        char dir[PATH_MAX], rdir[PATH_MAX];
        folder_of(path, dir, sizeof dir);
        real = realpath(path, NULL);
        if (!real) return wgml__fail(NULL, WGML_ERROR_IO, "%s: cannot open: %s", path, errno_text(errno, eb, sizeof eb));
        if (!realpath(dir, rdir)) {
            int err = errno;
            free(real);
            return wgml__fail(NULL, WGML_ERROR_IO, "%s: cannot resolve its folder: %s", path, errno_text(err, eb, sizeof eb));
        }
        if (!resolves_inside(rdir, real)) {
            free(real);
            return wgml__fail(NULL, WGML_ERROR_IO, "%s: refused: it is a link to a file outside its folder %s", path, dir);
        }
        open_path = real;
    }
    /* O_NONBLOCK: opening a FIFO or a device must not wait for a writer; it is refused
       below (and the flag changes nothing for a regular file). */
    int fd = open(open_path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    int err = errno;
    free(real);
    if (fd < 0) return wgml__fail(NULL, WGML_ERROR_IO, "%s: cannot open: %s", path, errno_text(err, eb, sizeof eb));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        err = errno;
        close(fd);
        return wgml__fail(NULL, WGML_ERROR_IO, "%s: cannot stat: %s", path, errno_text(err, eb, sizeof eb));
    }
    if (!S_ISREG(st.st_mode) || st.st_size < 0) {
        close(fd);
        return wgml__fail(NULL, WGML_ERROR_IO, "%s: not a regular file", path);
    }
    *fd_out = fd;
    *size = (uint64_t)st.st_size;
    return WGML_OK;
}

wgml_status wgml__read_file(const char *path, bool in_folder, size_t max_bytes, char **data, size_t *size)
{
    char eb[128];
    *data = NULL;
    *size = 0;
    int fd;
    uint64_t fsize;
    wgml_status s = wgml__open_file(path, in_folder, &fd, &fsize);
    if (s) return s;
    if (fsize > (uint64_t)max_bytes) {
        close(fd);
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: file is %llu bytes, more than the %zu this kind of file may have",
                          path, (unsigned long long)fsize, max_bytes);
    }
    size_t want = (size_t)fsize, got = 0;
    char *buf = malloc(want + 1);
    if (!buf) {
        close(fd);
        return wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory for %zu bytes", path, want + 1);
    }
    while (got < want) {
        ssize_t r = read(fd, buf + got, want - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int err = errno;
            free(buf);
            close(fd);
            return wgml__fail(NULL, WGML_ERROR_IO, "%s: read failed: %s", path, errno_text(err, eb, sizeof eb));
        }
        if (r == 0) break;   /* the file shrank meanwhile: parse what is there */
        got += (size_t)r;
    }
    close(fd);
    buf[got] = 0;
    *data = buf;
    *size = got;
    return WGML_OK;
}

/* ---- text --------------------------------------------------------------------------- */

size_t wgml__utf8_decode(const uint8_t *s, size_t n, uint32_t *cp)
{
    uint8_t b = s[0];
    if (b < 0x80) { *cp = b; return 1; }
    size_t len;
    uint32_t c, min;
    if (b >= 0xC2 && b <= 0xDF) { len = 2; c = b & 0x1Fu; min = 0x80; }
    else if (b >= 0xE0 && b <= 0xEF) { len = 3; c = b & 0x0Fu; min = 0x800; }
    else if (b >= 0xF0 && b <= 0xF4) { len = 4; c = b & 0x07u; min = 0x10000; }
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        c = (c << 6) | (s[i] & 0x3Fu);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
    *cp = c;
    return len;
}

size_t wgml__utf8_check(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) { i++; continue; }
        uint32_t cp;
        size_t l = wgml__utf8_decode(s + i, n - i, &cp);
        if (l == 0) return i;
        i += l;
    }
    return n;
}

const char *wgml__quote(char *buf, size_t size, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    if (size < 16) {
        if (size) buf[0] = 0;
        return buf;
    }
    for (size_t i = 0; i < len; i++) {
        if (i >= 80 || o + 8 >= size) {   /* room for "\xNN" or "..." and the NUL */
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        uint8_t c = (uint8_t)s[i];
        if (c >= 0x20 && c < 0x7F) buf[o++] = (char)c;
        else {
            buf[o++] = '\\'; buf[o++] = 'x';
            buf[o++] = hex[c >> 4]; buf[o++] = hex[c & 15];
        }
    }
    buf[o] = 0;
    return buf;
}

/* ---- JSON --------------------------------------------------------------------------- */

/* At least the number of JSON values in text[0..len): every value after the first follows
   a ',' or an opening bracket outside strings. */
static size_t count_values(const char *text, size_t len)
{
    size_t n = 1;
    bool in_string = false;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (in_string) {
            if (c == '\\') i++;
            else if (c == '"') in_string = false;
        } else if (c == '"') in_string = true;
        else if (c == ',' || c == '[' || c == '{') n++;
    }
    return n;
}

wgml_status wgml__json_parse(const char *what, const char *text, size_t len, size_t min_bytes_per_value, cJSON **out)
{
    *out = NULL;
    size_t bad = wgml__utf8_check((const uint8_t *)text, len);
    if (bad < len) return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: invalid UTF-8 at byte %zu", what, bad);
    const char *nul = memchr(text, 0, len);
    if (nul) return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: NUL byte at byte %zu", what, (size_t)(nul - text));
    /* cJSON takes about 80 bytes of memory per value: a budget of values per byte bounds the
       memory a parse may take to a multiple of the text's size */
    if (min_bytes_per_value) {
        size_t values = count_values(text, len), budget = len / min_bytes_per_value + 64;
        if (values > budget)
            return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %zu JSON values in %zu bytes, more than this kind of file has "
                              "(at most one per %zu bytes)", what, values, len, min_bytes_per_value);
    }
    if (len > SIZE_MAX - 16) return wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "%s: too large", what);
    /* cJSON gets a private copy followed by zero padding, so no reading near the end of
       the text, right or wrong, can leave the allocation. */
    char *copy = malloc(len + 16);
    if (!copy) return wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory for %zu bytes", what, len + 16);
    memcpy(copy, text, len);
    memset(copy + len, 0, 16);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(copy, len, &end, 0);
    if (!root) {
        size_t at = end && end >= copy && end <= copy + len ? (size_t)(end - copy) : 0;
        free(copy);
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: invalid JSON near byte %zu", what, at);
    }
    size_t i = end && end >= copy && end <= copy + len ? (size_t)(end - copy) : len;
    for (; i < len; i++)
        if (copy[i] != ' ' && copy[i] != '\t' && copy[i] != '\n' && copy[i] != '\r') {
            free(copy);
            cJSON_Delete(root);
            return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: unexpected text after the JSON value at byte %zu", what, i);
        }
    free(copy);
    *out = root;
    return WGML_OK;
}

const char *wgml__json_type(const cJSON *item)
{
    if (!item) return "missing";
    if (cJSON_IsNull(item)) return "null";
    if (cJSON_IsBool(item)) return "a boolean";
    if (cJSON_IsNumber(item)) return "a number";
    if (cJSON_IsString(item)) return "a string";
    if (cJSON_IsArray(item)) return "an array";
    if (cJSON_IsObject(item)) return "an object";
    return "an unknown JSON value";
}

bool wgml__json_uint_ok(const cJSON *item, uint64_t max, uint64_t *out)
{
    if (max > WGML__JSON_INT_MAX) max = WGML__JSON_INT_MAX;
    if (!cJSON_IsNumber(item)) return false;
    double d = item->valuedouble;
    /* In range first (this also rejects NaN), so the conversion is defined. */
    if (!(d >= 0 && d <= (double)max) || (double)(uint64_t)d != d) return false;
    *out = (uint64_t)d;
    return true;
}

wgml_status wgml__json_uint(const char *what, const char *field, const cJSON *item, uint64_t max, uint64_t *out)
{
    if (wgml__json_uint_ok(item, max, out)) return WGML_OK;
    if (max > WGML__JSON_INT_MAX) max = WGML__JSON_INT_MAX;
    if (!cJSON_IsNumber(item))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s must be an integer, not %s", what, field, wgml__json_type(item));
    return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s must be an integer in [0, %llu], not %.17g", what, field,
                      (unsigned long long)max, item->valuedouble);
}

wgml_status wgml__json_unique_keys(const char *what, const char *field, const cJSON *obj)
{
    size_t n = 0;
    for (const cJSON *c = obj->child; c; c = c->next) n++;
    if (n < 2) return WGML_OK;
    if (n <= 8) {   /* small objects: pairwise, no table */
        for (const cJSON *a = obj->child; a; a = a->next)
            for (const cJSON *b = a->next; b; b = b->next) {
                const char *ka = a->string ? a->string : "", *kb = b->string ? b->string : "";
                if (strcmp(ka, kb) == 0) {
                    char q[WGML__QUOTE_MAX];
                    return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s has the key '%s' twice", what, field,
                                      wgml__quote(q, sizeof q, ka, strlen(ka)));
                }
            }
        return WGML_OK;
    }
    wgml__strmap m;
    if (!wgml__strmap_init(&m, n)) return wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", what);
    wgml_status st = WGML_OK;
    for (const cJSON *c = obj->child; c; c = c->next) {
        const char *k = c->string ? c->string : "";
        int r = wgml__strmap_put(&m, k, strlen(k), 0, NULL);
        if (r < 0) { st = wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", what); break; }
        if (r == 0) {
            char q[WGML__QUOTE_MAX];
            st = wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s has the key '%s' twice", what, field,
                            wgml__quote(q, sizeof q, k, strlen(k)));
            break;
        }
    }
    wgml__strmap_free(&m);
    return st;
}

/* ---- string hash map ---------------------------------------------------------------- */

static inline uint64_t fmix64(uint64_t h)
{
    h ^= h >> 33; h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

static uint64_t hash_bytes(const char *s, size_t n, uint64_t seed)
{
    uint64_t h = seed ^ ((uint64_t)n * 0x9E3779B97F4A7C15ull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ fmix64(w + 0x9E3779B97F4A7C15ull)) * 0xbf58476d1ce4e5b9ull;
        h = (h << 31) | (h >> 33);
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ fmix64(w ^ ((uint64_t)n << 56))) * 0x94d049bb133111ebull;
    return fmix64(h);
}

bool wgml__strmap_init(wgml__strmap *m, size_t expected)
{
    size_t cap = 16;
    while (cap / 2 < expected && cap < ((size_t)1 << 40)) cap *= 2;
    m->slots = calloc(cap, sizeof *m->slots);
    m->cap = m->slots ? cap : 0;
    m->count = 0;
    /* A per-map seed from the table's address: varies from run to run under ASLR. */
    m->seed = fmix64((uint64_t)(uintptr_t)m->slots ^ 0x243F6A8885A308D3ull);
    return m->slots != NULL;
}

static wgml__strmap_slot *find_slot(wgml__strmap_slot *slots, size_t cap, const char *key, size_t len, uint64_t h)
{
    size_t i = (size_t)h & (cap - 1);
    for (;;) {
        wgml__strmap_slot *s = &slots[i];
        if (!s->key || (s->hash == h && s->len == len && memcmp(s->key, key, len) == 0)) return s;
        i = (i + 1) & (cap - 1);
    }
}

bool wgml__strmap_get(const wgml__strmap *m, const char *key, size_t len, uint32_t *value)
{
    if (!m->slots || len > UINT32_MAX) return false;
    const wgml__strmap_slot *s = find_slot(m->slots, m->cap, key, len, hash_bytes(key, len, m->seed));
    if (!s->key) return false;
    if (value) *value = s->value;
    return true;
}

int wgml__strmap_put(wgml__strmap *m, const char *key, size_t len, uint32_t value, uint32_t *existing)
{
    if (!m->slots || len > UINT32_MAX) return -1;
    if ((m->count + 1) * 2 > m->cap) {   /* keep the load at most 1/2 */
        size_t cap = m->cap * 2;
        wgml__strmap_slot *slots = calloc(cap, sizeof *slots);
        if (!slots) return -1;
        for (size_t i = 0; i < m->cap; i++)
            if (m->slots[i].key) *find_slot(slots, cap, m->slots[i].key, m->slots[i].len, m->slots[i].hash) = m->slots[i];
        free(m->slots);
        m->slots = slots;
        m->cap = cap;
    }
    uint64_t h = hash_bytes(key, len, m->seed);
    wgml__strmap_slot *s = find_slot(m->slots, m->cap, key, len, h);
    if (s->key) {
        if (existing) *existing = s->value;
        return 0;
    }
    /* An empty key still needs a non-NULL pointer to mark the slot used. */
    *s = (wgml__strmap_slot){ .key = len ? key : "", .len = (uint32_t)len, .value = value, .hash = h };
    m->count++;
    return 1;
}

void wgml__strmap_free(wgml__strmap *m)
{
    free(m->slots);
    m->slots = NULL;
    m->cap = m->count = 0;
}
