/* Private helpers shared by the parsers of untrusted files in src/io/: whole-file reads,
   strict JSON parsing on top of cJSON, UTF-8 decoding, quoting of untrusted names for
   messages, and a string hash map.

   This header deliberately does not include src/internal.h (which pulls in webgpu.h), so
   the parsers also build alone, with no WebGPU runtime, for the fuzzers in tests/fuzz/.

   Conventions of every parser here:
   - every offset and size read from a file is checked before it is used, with
     overflow-safe arithmetic (no sum or product is formed before it is known to fit);
   - a malformed file returns WGML_ERROR_FORMAT with the message "<file>: <problem>" in
     wgml_last_error(NULL); a file that cannot be read returns WGML_ERROR_IO;
   - strings taken from a file are printed through wgml__quote (bounded, escaped). */
#ifndef WGML_IO_H
#define WGML_IO_H

#include "wgml.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The same function as in src/internal.h (src/context.c defines it): records the message
   for ctx, or for the calling thread when ctx is NULL, and returns status. */
wgml_status wgml__fail(wgml_context *ctx, wgml_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- files -------------------------------------------------------------------------- */

/* Opens path for reading: a regular file only (a FIFO, a device or a folder is refused
   without blocking). With in_folder, path must also resolve, symbolic links followed,
   to a file inside its own folder (or, in a Hugging Face cache snapshot
   <repo>/snapshots/<revision>, inside <repo>/blobs): a model folder cannot hand out a
   file from elsewhere. *size is the file's size. Errors: WGML_ERROR_IO. */
wgml_status wgml__open_file(const char *path, bool in_folder, int *fd, uint64_t *size);

/* Reads the whole file at path (opened as wgml__open_file does) into a malloc'd buffer
   followed by one NUL byte (not counted in *size). A file of more than max_bytes is
   refused with WGML_ERROR_FORMAT before anything is allocated. Errors: WGML_ERROR_IO,
   WGML_ERROR_FORMAT, WGML_ERROR_OUT_OF_MEMORY. */
wgml_status wgml__read_file(const char *path, bool in_folder, size_t max_bytes, char **data, size_t *size);

/* ---- text --------------------------------------------------------------------------- */

/* Decodes one UTF-8 sequence at s[0..n) (n >= 1): returns its length (1..4) and the code
   point, or 0 when the bytes there are not a valid, shortest-form scalar value. */
size_t wgml__utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);

/* Offset of the first byte of s[0..n) that does not start a valid UTF-8 sequence, or n. */
size_t wgml__utf8_check(const uint8_t *s, size_t n);

/* Writes a printable, bounded rendering of untrusted bytes into buf (always terminated):
   printable ASCII as is, other bytes as \xNN, cut with "..." past about 80 characters. */
const char *wgml__quote(char *buf, size_t size, const char *s, size_t len);
#define WGML__QUOTE_MAX 352

/* ---- 16-bit floats (src/io/half.c) -------------------------------------------------- */

/* IEEE half and bfloat16 to f32 (exact), and f32 to them rounded to the nearest, ties to
   even (a finite f32 beyond half's range becomes infinity; NaN stays NaN). */
float wgml__half_to_float(uint16_t h);
uint16_t wgml__float_to_half(float f);
float wgml__bf16_to_float(uint16_t h);
uint16_t wgml__float_to_bf16(float f);

/* ---- PCRE2 and utf8proc (src/io/text_engines.c) ------------------------------------ */

/* A compiled pattern: UTF-8 with Unicode properties (\p{L}, \s as Unicode space); literal:
   the pattern's text matched as it is. NULL with a message in err when it does not compile
   (or out of memory). */
typedef struct wgml__regex wgml__regex;
wgml__regex *wgml__regex_compile(const char *pattern, size_t len, bool literal, char *err, size_t errsize);
void wgml__regex_free(wgml__regex *r);
/* Match scratch for r (one per thread at a time), NULL when out of memory; and its free. */
void *wgml__regex_scratch(const wgml__regex *r);
void wgml__regex_scratch_free(void *scratch);
/* The first match in s[0..n) starting at or after from: 1 with [*start, *end) (it may be
   empty), 0 when there is none, -1 when s is not valid UTF-8 (or another match error).
   s is checked for valid UTF-8 only when from is 0: search a subject from 0 first, and
   later from ends of matches (character boundaries). */
int wgml__regex_next(const wgml__regex *r, void *scratch, const uint8_t *s, size_t n, size_t from, size_t *start,
                     size_t *end);

enum { WGML__NFC = 1, WGML__NFD, WGML__NFKC, WGML__NFKD };
/* s[0..n) in Unicode normalization form `form` (malloc'd, *out_len bytes), or NULL when s
   is not valid UTF-8 or memory ran out. */
uint8_t *wgml__unicode_normalize(const uint8_t *s, size_t n, int form, size_t *out_len);

/* ---- ggml's block formats (src/io/ggml_dequant.c) ----------------------------------- */

/* n values (a whole number of blocks) of type t at src to f32; false for a type that is
   not a float or block format (integers, F64, Q8_K). */
bool wgml__ggml_to_f32(wgml_ggml_type t, const void *src, uint64_t n, float *dst);

/* The GGUF name of a model parameter named as Hugging Face names it ("model.layers.3.
   self_attn.q_proj.weight" -> "blk.3.attn_q.weight"); false for another name. */
bool wgml__gguf_tensor_name(const char *name, char *out, size_t size);

/* ---- JSON --------------------------------------------------------------------------- */

/* Parses text[0..len) (need not be NUL-terminated) as exactly one JSON value: the text
   must be valid UTF-8 and only JSON whitespace may follow the value. what names the file
   in messages. A text of more than len / min_bytes_per_value + 64 values is refused
   before parsing (0: no limit), which bounds the parse's memory (about 80 bytes per
   value) by the text's size. Free *out with cJSON_Delete. Errors: WGML_ERROR_FORMAT,
   WGML_ERROR_OUT_OF_MEMORY. */
wgml_status wgml__json_parse(const char *what, const char *text, size_t len, size_t min_bytes_per_value, cJSON **out);

/* 2^53 - 1: every integer up to it is exactly a double, and a JSON integer above it
   rounds to 2^53 or more, so it cannot pass for a smaller one. */
#define WGML__JSON_INT_MAX 9007199254740991ull

/* True, with *out, when item is a JSON number holding an integer in [0, max] (max <= 2^53-1):
   the quiet check for loops, which format a field name only for wgml__json_uint's message
   once this fails. */
bool wgml__json_uint_ok(const cJSON *item, uint64_t max, uint64_t *out);

/* *out = the integer value of a JSON number item, which must be integral and within
   [0, max] (max <= 2^53). field names the item in messages ("shape[2] of tensor 'w'"). */
wgml_status wgml__json_uint(const char *what, const char *field, const cJSON *item, uint64_t max,
                            uint64_t *out);

/* Fails with WGML_ERROR_FORMAT when two members of the object obj have the same key.
   field names the object in messages. */
wgml_status wgml__json_unique_keys(const char *what, const char *field, const cJSON *obj);

/* The name of the JSON type of item, for messages: "a string", "an object", ... */
const char *wgml__json_type(const cJSON *item);

/* ---- a hash map from byte strings to uint32 ----------------------------------------- */

/* Keys are not copied: they must outlive the map. The hash is seeded per map (from the
   address of its table), so a file cannot be crafted to make every key collide. */
typedef struct wgml__strmap_slot {
    const char *key;      /* NULL: empty slot */
    uint32_t len;
    uint32_t value;
    uint64_t hash;
} wgml__strmap_slot;

typedef struct wgml__strmap {
    wgml__strmap_slot *slots;
    size_t cap;           /* a power of two */
    size_t count;
    uint64_t seed;
} wgml__strmap;

/* Prepares an empty map sized for about expected keys. Returns false when out of memory. */
bool wgml__strmap_init(wgml__strmap *m, size_t expected);
/* Looks key up: true and *value when present. */
bool wgml__strmap_get(const wgml__strmap *m, const char *key, size_t len, uint32_t *value);
/* Inserts key -> value. Returns 1 when inserted, 0 when the key was already there (its
   value is then in *existing when existing is not NULL, and the map is unchanged), -1 when
   out of memory or the key is 4 GiB or longer. */
int wgml__strmap_put(wgml__strmap *m, const char *key, size_t len, uint32_t value, uint32_t *existing);
void wgml__strmap_free(wgml__strmap *m);

/* ---- model.safetensors.index.json (src/io/safetensors.c) ----------------------------- */

typedef struct wgml__st_index {
    cJSON *root;             /* the strings below point into it */
    const char **names;      /* weight_map keys, in the file's order */
    uint32_t *shard_of;      /* for each name, its shard's index in shards */
    size_t nnames;
    const char **shards;     /* the distinct shard file names, sorted; all plain file names */
    size_t nshards;
} wgml__st_index;

/* Parses and validates an index; free *ix with wgml__st_index_free even on failure. */
wgml_status wgml__st_index_parse(const char *what, const char *json, size_t len, wgml__st_index *ix);
void wgml__st_index_free(wgml__st_index *ix);

#endif
