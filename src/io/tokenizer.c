/* tokenizer.json: byte-level BPE as GPT-2, SmolLM2, Llama 3 and Qwen use it, and the
   SentencePiece-style BPE of Llama 2, Mistral and TinyLlama.

   Encoding, as Hugging Face tokenizers does it for these files:
   1. added tokens are cut out of the text first (leftmost, then longest; lstrip/rstrip
      swallow the whitespace beside them; single_word needs non-word neighbours);
   2. each stretch between them goes through the pre-tokenizer steps in order, each step
      cutting its pieces smaller: Digits (numbers alone or one by one), Split by any
      regex (PCRE2 with Unicode properties and JIT, src/io/text_engines.c: matches and the
      text between them become pieces, or the matches are dropped with behavior Removed;
      as fast as the hand-written matchers of the GPT-2 / Llama 3 / Qwen 2 patterns it
      replaced, and cutting as Python's regex module does on the tests' corpus),
      ByteLevel last (optional prefix space, optional GPT-2 split); before them a Unicode
      normalizer (NFC, NFD, NFKC, NFKD through utf8proc) rewrites each stretch;
   3. each final piece is BPE-merged over its bytes: pairs of adjacent symbols are merged
      lowest rank first (leftmost on ties) through a hash map (a, b) -> (rank, merged id)
      and a binary heap, O(n log n) per piece; with ignore_merges a piece that is itself a
      vocab token is taken whole.
   The GPT-2 byte-to-unicode alphabet exists only at load time: vocab spellings are turned
   back into raw bytes there, and the encoder works on bytes.

   SentencePiece-style files spell a space as U+2581 ("\u2581the"), and their normalizer
   (Prepend, Replace) or Metaspace pre-tokenizer turns the text's spaces into it. Here the
   vocab's U+2581 become spaces at load time instead, so the text needs no replacing: a
   piece only gets its leading space (Prepend, or Metaspace's prepend_scheme), Metaspace's
   split cuts it before each space, and BPE starts from its characters: each one's vocab
   token, else its bytes' <0xNN> tokens (byte_fallback), else the unknown token (runs of
   them one token with fuse_unk). The decoder's Strip (or Metaspace) removes the leading
   space of a decoded text.

   Everything read from the file is validated when loading (ids, spellings, merges, the
   pre-tokenizer configuration), so encode and decode index nothing unchecked. */
#include "io.h"
#include "unicode_tables.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOK_MAX_BYTES ((size_t)64 << 20)
/* merges as pairs are the densest part of a real tokenizer: ["a","b"], is 3 values in 10
   bytes */
#define TOK_BYTES_PER_VALUE 3
#define TOK_MAX_ID ((1u << 24) - 1)
#define NONE UINT32_MAX
#define MAX_STEPS 8
#define MAX_SPECIALS 8

enum { STEP_DIGITS, STEP_SPLIT, STEP_BYTELEVEL };

typedef struct pre_step {
    uint8_t type;
    bool removed;           /* STEP_SPLIT: behavior Removed (matches dropped) */
    wgml__regex *rx;        /* STEP_SPLIT: the pattern; STEP_BYTELEVEL with use_regex: GPT-2's */
    bool individual;        /* STEP_DIGITS */
    bool add_prefix_space;  /* STEP_BYTELEVEL */
    bool use_regex;         /* STEP_BYTELEVEL: the GPT-2 split */
} pre_step;

typedef struct added_token {
    uint32_t off, len, id;  /* content: bytes[off .. off + len) */
    bool lstrip, rstrip, single_word, special;
} added_token;

/* How a SentencePiece-style tokenizer puts a space before a piece of text. */
enum { PREPEND_NONE, PREPEND_ALWAYS, PREPEND_FIRST };

typedef struct merge_slot {
    uint64_t key;           /* (left id << 32) | right id; UINT64_MAX: empty */
    uint32_t rank, id;
} merge_slot;

struct wgml_tokenizer {
    uint32_t vocab_size;
    uint32_t *tok_off, *tok_len;   /* per id: its bytes; tok_len NONE: no such token */
    char *bytes;                   /* every token's bytes and every added token's content */
    size_t nbytes;
    wgml__strmap vocab;            /* raw bytes -> id, for the vocab's byte-level tokens */
    uint32_t byte_id[256];
    merge_slot *merges;
    size_t merge_cap;              /* a power of two; 0 when there are no merges */
    uint64_t merge_seed;
    added_token *added;            /* sorted by (first byte, length descending) */
    size_t nadded;
    wgml__strmap added_map;        /* content -> id */
    uint32_t added_first[257];     /* added[added_first[b] .. added_first[b+1]) start with b */
    pre_step steps[MAX_STEPS];
    int nsteps;
    bool ignore_merges;
    bool bytes_only;               /* wgml_tokenizer_bytes */
    /* SentencePiece style (see the top): vocab spaces spelled U+2581 in the file */
    bool sp;
    uint8_t prepend;               /* PREPEND_*: a space before each piece, or before the text's first */
    bool prepend_if_missing;       /* Metaspace's: not before a piece that starts with one */
    bool split_words;              /* Metaspace's split: a piece cut before each space */
    bool byte_fallback;            /* byte_id[] are the <0xNN> tokens */
    bool fuse_unk;
    uint32_t unk_id;               /* NONE: characters without a token are dropped, as Hugging Face does */
    bool strip_space;              /* decode removes one leading space */
    uint8_t unorm;                 /* 0, or the normalizer's Unicode form (WGML__NFC ...) */
    /* the post-processor's template: ids put before and after an encoded text */
    uint32_t prefix[MAX_SPECIALS], suffix[MAX_SPECIALS];
    size_t nprefix, nsuffix;
    char *scratch;                 /* loading only */
};

/* ---- characters ---------------------------------------------------------------------- */

enum { C_OTHER, C_LETTER, C_NUMBER, C_SPACE };

static bool in_table(const uint32_t (*t)[2], size_t n, uint32_t cp)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < t[mid][0]) hi = mid;
        else if (cp > t[mid][1]) lo = mid + 1;
        else return true;
    }
    return false;
}

/* Unicode White_Space */
static bool is_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
           c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

static int char_class(uint32_t c)
{
    if (c < 0x80) {
        if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return C_LETTER;
        if (c >= '0' && c <= '9') return C_NUMBER;
        return is_space(c) ? C_SPACE : C_OTHER;
    }
    if (c == NONE) return C_OTHER;   /* a byte that is not valid UTF-8 */
    if (is_space(c)) return C_SPACE;
    if (in_table(wgml__unicode_letters, sizeof wgml__unicode_letters / sizeof wgml__unicode_letters[0], c)) return C_LETTER;
    if (in_table(wgml__unicode_numbers, sizeof wgml__unicode_numbers / sizeof wgml__unicode_numbers[0], c)) return C_NUMBER;
    return C_OTHER;
}

/* The character at s[i] (i < n): its length, and its code point (NONE for a byte that does
   not start valid UTF-8, which then counts as one character of its own). */
static size_t char_at(const uint8_t *s, size_t n, size_t i, uint32_t *cp)
{
    if (s[i] < 0x80) { *cp = s[i]; return 1; }
    size_t l = wgml__utf8_decode(s + i, n - i, cp);
    if (l == 0) { *cp = NONE; return 1; }
    return l;
}

/* End of the run of characters of class cls starting at i (i when there is none). At most
   max characters. */
static size_t run_of(const uint8_t *s, size_t n, size_t i, int cls, size_t max)
{
    size_t k = 0;
    while (i < n && k < max) {
        uint32_t c;
        size_t l = char_at(s, n, i, &c);
        if (char_class(c) != cls) break;
        i += l;
        k++;
    }
    return i;
}

/* GPT-2's pre-tokenizer regex, which ByteLevel's use_regex applies. */
static const char gpt2_regex[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* ---- the GPT-2 byte-to-unicode alphabet ---------------------------------------------- */

/* Bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for themselves; the other 68 bytes, in
   increasing order, for U+0100.. U+0143. u2b[cp] is the byte of code point cp, or -1. */
static void byte_alphabet(uint16_t b2u[256], int16_t u2b[324])
{
    for (int i = 0; i < 324; i++) u2b[i] = -1;
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        bool self = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        b2u[b] = (uint16_t)(self ? b : 256 + extra++);
        u2b[b2u[b]] = (int16_t)b;
    }
}

/* Turns a byte-level spelling (valid UTF-8) into raw bytes in out (room for strlen(s));
   false when a character is not of the alphabet. */
static bool unmap(const int16_t u2b[324], const char *s, size_t n, char *out, size_t *outlen)
{
    size_t i = 0, o = 0;
    while (i < n) {
        uint32_t cp;
        size_t l = wgml__utf8_decode((const uint8_t *)s + i, n - i, &cp);
        if (l == 0 || cp >= 324 || u2b[cp] < 0) return false;
        out[o++] = (char)u2b[cp];
        i += l;
    }
    *outlen = o;
    return true;
}

/* ---- merges: (left, right) -> (rank, merged id) -------------------------------------- */

static inline uint64_t mix64(uint64_t h)
{
    h ^= h >> 33; h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

static const merge_slot *merge_find(const wgml_tokenizer *t, uint32_t a, uint32_t b)
{
    if (!t->merge_cap) return NULL;
    uint64_t key = ((uint64_t)a << 32) | b;
    size_t i = (size_t)mix64(key ^ t->merge_seed) & (t->merge_cap - 1);
    for (;;) {
        const merge_slot *m = &t->merges[i];
        if (m->key == key) return m;
        if (m->key == UINT64_MAX) return NULL;
        i = (i + 1) & (t->merge_cap - 1);
    }
}

/* Inserts unless present (the first, lowest rank, wins). */
static void merge_put(wgml_tokenizer *t, uint32_t a, uint32_t b, uint32_t rank, uint32_t id)
{
    uint64_t key = ((uint64_t)a << 32) | b;
    size_t i = (size_t)mix64(key ^ t->merge_seed) & (t->merge_cap - 1);
    while (t->merges[i].key != UINT64_MAX) {
        if (t->merges[i].key == key) return;
        i = (i + 1) & (t->merge_cap - 1);
    }
    t->merges[i] = (merge_slot){ key, rank, id };
}

/* ---- loading ------------------------------------------------------------------------- */

/* U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's space */
static const char SP_SPACE[] = "\xE2\x96\x81";

/* s[0..n) with each U+2581 turned into a space, into out (at most n bytes). */
static size_t sp_spell(const char *s, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        if (n - i >= 3 && memcmp(s + i, SP_SPACE, 3) == 0) { out[o++] = ' '; i += 3; }
        else out[o++] = s[i++];
    }
    return o;
}

/* The byte of a byte-fallback token's spelling "<0xNN>" (hex digits upper case), or -1. */
static int fallback_byte(const char *s, size_t n)
{
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        if (c >= '0' && c <= '9') v = v * 16 + (c - '0');
        else if (c >= 'A' && c <= 'F') v = v * 16 + (c - 'A' + 10);
        else return -1;
    }
    return v;
}

static const cJSON *get(const cJSON *obj, const char *key)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    return it && !cJSON_IsNull(it) ? it : NULL;
}

static wgml_status oom(const char *what)
{
    return wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", what);
}

static wgml_status get_flag(const char *what, const cJSON *obj, const char *field, const char *key, bool def, bool *out)
{
    const cJSON *it = get(obj, key);
    if (!it) { *out = def; return WGML_OK; }
    if (!cJSON_IsBool(it))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s.%s must be true or false, not %s", what, field, key,
                          wgml__json_type(it));
    *out = cJSON_IsTrue(it);
    return WGML_OK;
}

/* A Split or ByteLevel pattern compiled with PCRE2 into *out (a step's count is already
   taken, so a failure frees nothing the tokenizer does not). */
static wgml_status compile_rx(const char *what, const char *field, const char *pattern, bool literal, wgml__regex **out)
{
    char err[256], q[WGML__QUOTE_MAX];
    *out = wgml__regex_compile(pattern, strlen(pattern), literal, err, sizeof err);
    if (!*out)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s.pattern '%s' does not compile: %s", what, field,
                          wgml__quote(q, sizeof q, pattern, strlen(pattern)), err);
    return WGML_OK;
}

/* The "type" string of a component object, or an error. */
static wgml_status get_type(const char *what, const cJSON *obj, const char *field, const char **type)
{
    if (!cJSON_IsObject(obj))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s must be an object, not %s", what, field, wgml__json_type(obj));
    const cJSON *ty = get(obj, "type");
    if (!cJSON_IsString(ty))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s.type must be a string, not %s", what, field, wgml__json_type(ty));
    *type = ty->valuestring;
    return WGML_OK;
}

static wgml_status parse_pre(wgml_tokenizer *t, const char *what, const cJSON *p, const char *field, int depth)
{
    const char *type;
    wgml_status s = get_type(what, p, field, &type);
    if (s) return s;
    char q[WGML__QUOTE_MAX], sub[96];
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = get(p, "pretokenizers");
        if (!cJSON_IsArray(list))
            return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s.pretokenizers must be an array, not %s", what, field,
                              wgml__json_type(list));
        if (depth >= 3) return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s nests Sequences too deeply", what, field);
        int i = 0;
        for (const cJSON *c = list->child; c; c = c->next, i++) {
            snprintf(sub, sizeof sub, "pre_tokenizer%s[%d]", depth ? "[..]" : ".pretokenizers", i);
            if ((s = parse_pre(t, what, c, sub, depth + 1))) return s;
        }
        return WGML_OK;
    }
    if (t->nsteps == MAX_STEPS) return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: pre_tokenizer has more than %d steps", what, MAX_STEPS);
    pre_step *st = &t->steps[t->nsteps++];   /* counted now: a failure below frees its pattern */
    *st = (pre_step){ 0 };
    if (strcmp(type, "ByteLevel") == 0) {
        st->type = STEP_BYTELEVEL;
        /* Hugging Face's defaults when a flag is absent */
        if ((s = get_flag(what, p, field, "add_prefix_space", true, &st->add_prefix_space))) return s;
        if ((s = get_flag(what, p, field, "use_regex", true, &st->use_regex))) return s;
        if (st->use_regex && (s = compile_rx(what, field, gpt2_regex, false, &st->rx))) return s;
    } else if (strcmp(type, "Digits") == 0) {
        st->type = STEP_DIGITS;
        if ((s = get_flag(what, p, field, "individual_digits", false, &st->individual))) return s;
    } else if (strcmp(type, "Split") == 0) {
        st->type = STEP_SPLIT;
        const cJSON *pat = get(p, "pattern");
        const cJSON *rx = pat && cJSON_IsObject(pat) ? get(pat, "Regex") : NULL;
        const cJSON *lit = pat && cJSON_IsObject(pat) ? get(pat, "String") : NULL;
        if (!cJSON_IsString(rx) && !cJSON_IsString(lit))
            return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s.pattern must be {\"Regex\": \"...\"} or {\"String\": \"...\"}", what,
                              field);
        const char *text = cJSON_IsString(rx) ? rx->valuestring : lit->valuestring;
        if ((s = compile_rx(what, field, text, !cJSON_IsString(rx), &st->rx))) return s;
        const cJSON *beh = get(p, "behavior");
        st->removed = cJSON_IsString(beh) && strcmp(beh->valuestring, "Removed") == 0;
        if (!cJSON_IsString(beh) || (strcmp(beh->valuestring, "Isolated") != 0 && !st->removed))
            return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s.behavior must be \"Isolated\" or \"Removed\"", what, field);
        bool invert = false;
        if ((s = get_flag(what, p, field, "invert", false, &invert))) return s;
        if (invert) return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s.invert true is not supported", what, field);
    } else
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s type '%s' is not supported (ByteLevel, Digits, Split, Sequence)",
                          what, field, wgml__quote(q, sizeof q, type, strlen(type)));
    return WGML_OK;
}

/* Whether obj[key] is the string want. */
static bool string_is(const cJSON *obj, const char *key, const char *want)
{
    const cJSON *it = get(obj, key);
    return cJSON_IsString(it) && strcmp(it->valuestring, want) == 0;
}

/* Whether a Replace component (normalizer or decoder) replaces the string from with to. */
static bool replaces(const cJSON *c, const char *from, const char *to)
{
    const cJSON *pat = get(c, "pattern");
    return pat && cJSON_IsObject(pat) && string_is(pat, "String", from) && string_is(c, "content", to);
}

/* A SentencePiece-style normalizer: Prepend("\u2581") and Replace(" " -> "\u2581"), alone
   or in a Sequence. *replace tells whether the Replace was there. */
static wgml_status parse_norm(wgml_tokenizer *t, const char *what, const cJSON *n, const char *field, int depth,
                              bool *replace)
{
    const char *type;
    wgml_status s = get_type(what, n, field, &type);
    if (s) return s;
    char q[WGML__QUOTE_MAX];
    if (strcmp(type, "Sequence") == 0 && depth < 3) {
        const cJSON *list = get(n, "normalizers");
        if (!cJSON_IsArray(list))
            return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s.normalizers must be an array, not %s", what, field,
                              wgml__json_type(list));
        for (const cJSON *c = list->child; c; c = c->next)
            if ((s = parse_norm(t, what, c, "normalizer.normalizers[..]", depth + 1, replace))) return s;
        return WGML_OK;
    }
    static const char *const forms[] = { "NFC", "NFD", "NFKC", "NFKD" };
    for (int f = 0; f < 4; f++)
        if (strcmp(type, forms[f]) == 0) {
            if (t->unorm && t->unorm != WGML__NFC + f)
                return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s: two Unicode normalizers", what, field);
            t->unorm = (uint8_t)(WGML__NFC + f);
            return WGML_OK;
        }
    if (strcmp(type, "Prepend") == 0 && string_is(n, "prepend", SP_SPACE) && t->prepend == PREPEND_NONE) {
        t->prepend = PREPEND_ALWAYS;
        return WGML_OK;
    }
    if (strcmp(type, "Replace") == 0 && replaces(n, " ", SP_SPACE)) {
        *replace = true;
        return WGML_OK;
    }
    return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s '%s' is not supported (NFC, NFD, NFKC, NFKD, Prepend \"\\u2581\", "
                      "Replace \" \" with \"\\u2581\", in a Sequence or alone)", what, field,
                      wgml__quote(q, sizeof q, type, strlen(type)));
}

/* The Metaspace pre-tokenizer: replacement "\u2581", prepend_scheme (or the older
   add_prefix_space), split. */
static wgml_status parse_metaspace(const char *what, const cJSON *p, const char *field, uint8_t *prepend, bool *split)
{
    if (!string_is(p, "replacement", SP_SPACE))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s.replacement must be \"\\u2581\"", what, field);
    const cJSON *scheme = get(p, "prepend_scheme");
    if (scheme) {
        if (string_is(p, "prepend_scheme", "always")) *prepend = PREPEND_ALWAYS;
        else if (string_is(p, "prepend_scheme", "first")) *prepend = PREPEND_FIRST;
        else if (string_is(p, "prepend_scheme", "never")) *prepend = PREPEND_NONE;
        else return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s.prepend_scheme must be \"always\", \"first\" or \"never\"",
                               what, field);
    } else {
        bool add = true;
        wgml_status s = get_flag(what, p, field, "add_prefix_space", true, &add);
        if (s) return s;
        *prepend = add ? PREPEND_ALWAYS : PREPEND_NONE;
    }
    return split ? get_flag(what, p, field, "split", true, split) : WGML_OK;
}

/* A SentencePiece-style decoder: Metaspace, or a Sequence of Replace("\u2581" -> " "),
   ByteFallback, Fuse and Strip(" ", start 0 or 1, stop 0). Sets strip_space. */
static wgml_status parse_sp_decoder(wgml_tokenizer *t, const char *what, const cJSON *d)
{
    const char *type;
    wgml_status s = get_type(what, d, "decoder", &type);
    if (s) return s;
    char q[WGML__QUOTE_MAX];
    if (strcmp(type, "Metaspace") == 0) {
        uint8_t prepend;
        if ((s = parse_metaspace(what, d, "decoder", &prepend, NULL))) return s;
        t->strip_space = prepend != PREPEND_NONE;
        return WGML_OK;
    }
    const cJSON *list = strcmp(type, "Sequence") == 0 ? get(d, "decoders") : NULL;
    if (!cJSON_IsArray(list))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: decoder type '%s' is not supported with a SentencePiece-style vocab "
                          "(Metaspace, or a Sequence of Replace, ByteFallback, Fuse, Strip)", what,
                          wgml__quote(q, sizeof q, type, strlen(type)));
    bool replace = false;
    int i = 0;
    for (const cJSON *c = list->child; c; c = c->next, i++) {
        char field[48];
        snprintf(field, sizeof field, "decoder.decoders[%d]", i);
        const char *ct;
        if ((s = get_type(what, c, field, &ct))) return s;
        if (strcmp(ct, "Replace") == 0 && replaces(c, SP_SPACE, " ")) replace = true;
        else if (strcmp(ct, "ByteFallback") == 0 || strcmp(ct, "Fuse") == 0) {}
        else if (strcmp(ct, "Strip") == 0 && string_is(c, "content", " ")) {
            uint64_t start, stop;
            if ((s = wgml__json_uint(what, field, get(c, "start"), 1, &start)) ||
                (s = wgml__json_uint(what, field, get(c, "stop"), 0, &stop)))
                return s;
            t->strip_space = start == 1;
        } else
            return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s '%s' is not supported (Replace \"\\u2581\" with \" \", "
                              "ByteFallback, Fuse, Strip \" \" at the start)", what, field,
                              wgml__quote(q, sizeof q, ct, strlen(ct)));
    }
    if (!replace)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: decoder does not replace \"\\u2581\" with \" \"", what);
    return WGML_OK;
}

/* The ids of special token name in TemplateProcessing's special_tokens, appended to
   list[*n]. */
static wgml_status template_ids(const wgml_tokenizer *t, const char *what, const cJSON *specials, const char *name,
                                uint32_t *list, size_t *n)
{
    char q[WGML__QUOTE_MAX];
    const cJSON *sp = specials ? cJSON_GetObjectItemCaseSensitive(specials, name) : NULL, *ids = sp ? get(sp, "ids") : NULL;
    if (!cJSON_IsArray(ids))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: post_processor.special_tokens has no ids for '%s'", what,
                          wgml__quote(q, sizeof q, name, strlen(name)));
    for (const cJSON *c = ids->child; c; c = c->next) {
        uint64_t id;
        if (!wgml__json_uint_ok(c, TOK_MAX_ID, &id) || id >= t->vocab_size || t->tok_len[id] == NONE)
            return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: post_processor.special_tokens['%s'] has an id that is no token",
                              what, wgml__quote(q, sizeof q, name, strlen(name)));
        if (*n == MAX_SPECIALS)
            return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: post_processor's template has more than %d special tokens on a side",
                              what, MAX_SPECIALS);
        list[(*n)++] = (uint32_t)id;
    }
    return WGML_OK;
}

/* The post-processor: TemplateProcessing's single template (special tokens around the one
   sequence $A: wgml_tokenizer_specials' prefix and suffix), ByteLevel (offsets only:
   nothing to do), or a Sequence of them. */
static wgml_status parse_post(wgml_tokenizer *t, const char *what, const cJSON *p, const char *field, int depth)
{
    if (!p) return WGML_OK;
    const char *type;
    wgml_status s = get_type(what, p, field, &type);
    if (s) return s;
    char q[WGML__QUOTE_MAX];
    if (strcmp(type, "ByteLevel") == 0) return WGML_OK;
    if (strcmp(type, "Sequence") == 0 && depth < 3) {
        const cJSON *list = get(p, "processors");
        if (!cJSON_IsArray(list))
            return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s.processors must be an array, not %s", what, field,
                              wgml__json_type(list));
        for (const cJSON *c = list->child; c; c = c->next)
            if ((s = parse_post(t, what, c, "post_processor.processors[..]", depth + 1))) return s;
        return WGML_OK;
    }
    if (strcmp(type, "TemplateProcessing") != 0)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s '%s' is not supported (TemplateProcessing, ByteLevel, Sequence)", what,
                          field, wgml__quote(q, sizeof q, type, strlen(type)));
    if (t->nprefix || t->nsuffix)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: post_processor has two TemplateProcessing steps", what);
    const cJSON *single = get(p, "single"), *specials = get(p, "special_tokens");
    if (!cJSON_IsArray(single))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s.single must be an array, not %s", what, field, wgml__json_type(single));
    int sequences = 0;
    for (const cJSON *c = single->child; c; c = c->next) {
        const cJSON *tok = cJSON_IsObject(c) ? get(c, "SpecialToken") : NULL, *seq = cJSON_IsObject(c) ? get(c, "Sequence") : NULL;
        const cJSON *id = tok ? get(tok, "id") : seq ? get(seq, "id") : NULL;
        if (!cJSON_IsString(id))
            return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s.single holds an item that is neither {\"SpecialToken\": {\"id\"}} "
                              "nor {\"Sequence\": {\"id\"}}", what, field);
        if (seq) {
            if (strcmp(id->valuestring, "A") != 0)
                return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s.single names sequence '%s' (only $A)", what, field,
                                  wgml__quote(q, sizeof q, id->valuestring, strlen(id->valuestring)));
            if (sequences++)
                return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s.single holds $A twice", what, field);
        } else if ((s = template_ids(t, what, specials, id->valuestring, sequences ? t->suffix : t->prefix,
                                     sequences ? &t->nsuffix : &t->nprefix)))
            return s;
    }
    if (sequences != 1) return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s.single has no $A", what, field);
    return WGML_OK;
}

static int added_cmp(const void *a, const void *b, const char *bytes)
{
    const added_token *x = a, *y = b;
    uint8_t fx = (uint8_t)bytes[x->off], fy = (uint8_t)bytes[y->off];
    if (fx != fy) return fx < fy ? -1 : 1;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;   /* longest first */
    return x->id < y->id ? -1 : x->id > y->id;
}

/* qsort has no context argument: insertion sort is fine for the few added tokens real
   files have, and a merge sort keeps huge lists O(n log n). */
static void sort_added(added_token *a, size_t n, const char *bytes, added_token *tmp)
{
    if (n < 16) {
        for (size_t i = 1; i < n; i++) {
            added_token x = a[i];
            size_t j = i;
            while (j > 0 && added_cmp(&a[j - 1], &x, bytes) > 0) { a[j] = a[j - 1]; j--; }
            a[j] = x;
        }
        return;
    }
    size_t h = n / 2;
    sort_added(a, h, bytes, tmp);
    sort_added(a + h, n - h, bytes, tmp);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) tmp[k++] = added_cmp(&a[j], &a[i], bytes) < 0 ? a[j++] : a[i++];
    while (i < h) tmp[k++] = a[i++];
    while (j < n) tmp[k++] = a[j++];
    memcpy(a, tmp, n * sizeof *a);
}

static wgml_status tok_parse(wgml_tokenizer *t, const char *what, const cJSON *root)
{
    char q[WGML__QUOTE_MAX], q2[WGML__QUOTE_MAX], field[WGML__QUOTE_MAX + 64];
    wgml_status s;
    if (!cJSON_IsObject(root))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: must be a JSON object, not %s", what, wgml__json_type(root));
    if ((s = wgml__json_unique_keys(what, "the tokenizer", root))) return s;

    /* ---- the pipeline around the model: byte-level, or SentencePiece style (a normalizer
       that prepends and replaces spaces, or the Metaspace pre-tokenizer) */
    const cJSON *norm = get(root, "normalizer"), *pre = get(root, "pre_tokenizer"), *dec = get(root, "decoder");
    const char *pre_type = NULL;
    if (pre && (s = get_type(what, pre, "pre_tokenizer", &pre_type))) return s;
    bool metaspace = pre_type && strcmp(pre_type, "Metaspace") == 0, replace = false;
    if (norm && (s = parse_norm(t, what, norm, "normalizer", 0, &replace))) return s;
    /* SentencePiece style: a normalizer that turns spaces into U+2581, or Metaspace; a
       Unicode normalizer alone goes with either kind */
    t->sp = replace || metaspace || t->prepend != PREPEND_NONE;
    if (t->prepend != PREPEND_NONE && !replace)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: normalizer does not replace \" \" with \"\\u2581\"", what);
    if (replace && pre)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: a normalizer with a pre_tokenizer (%s) is not supported", what,
                          wgml__quote(q, sizeof q, pre_type, strlen(pre_type)));
    if (metaspace) {
        if ((s = parse_metaspace(what, pre, "pre_tokenizer", &t->prepend, &t->split_words))) return s;
        t->prepend_if_missing = true;
    }
    if (t->sp) {
        if (!dec) return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: a SentencePiece-style tokenizer needs its decoder", what);
        if ((s = parse_sp_decoder(t, what, dec))) return s;
        dec = NULL;
    } else {
        if (!pre) return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: pre_tokenizer and normalizer are null: neither byte-level nor "
                                    "SentencePiece-style BPE", what);
        if ((s = parse_pre(t, what, pre, "pre_tokenizer", 0))) return s;
        int nbl = 0;
        for (int i = 0; i < t->nsteps; i++) nbl += t->steps[i].type == STEP_BYTELEVEL;
        if (nbl != 1 || t->steps[t->nsteps - 1].type != STEP_BYTELEVEL)
            return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: pre_tokenizer must end with its only ByteLevel step", what);
    }
    if (dec) {
        const char *type;
        if ((s = get_type(what, dec, "decoder", &type))) return s;
        if (strcmp(type, "ByteLevel") != 0)
            return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: decoder type '%s' is not supported (ByteLevel only)", what,
                              wgml__quote(q, sizeof q, type, strlen(type)));
    }

    /* ---- the model */
    const cJSON *model = get(root, "model");
    if (!model) return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: model is missing", what);
    if (!cJSON_IsObject(model))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: model must be an object, not %s", what, wgml__json_type(model));
    if ((s = wgml__json_unique_keys(what, "model", model))) return s;
    const cJSON *mt = get(model, "type");
    if (mt && (!cJSON_IsString(mt) || strcmp(mt->valuestring, "BPE") != 0)) {
        const char *tn = cJSON_IsString(mt) ? mt->valuestring : wgml__json_type(mt);
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: model.type '%s' is not supported (BPE only)", what,
                          wgml__quote(q, sizeof q, tn, strlen(tn)));
    }
    if ((s = get_flag(what, model, "model", "byte_fallback", false, &t->byte_fallback))) return s;
    if (t->byte_fallback && !t->sp)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: model.byte_fallback with a byte-level pre_tokenizer is not supported", what);
    if ((s = get_flag(what, model, "model", "fuse_unk", false, &t->fuse_unk))) return s;
    const cJSON *unk = get(model, "unk_token");
    if (unk && !cJSON_IsString(unk))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: model.unk_token must be a string, not %s", what, wgml__json_type(unk));
    static const char *const affixes[] = { "continuing_subword_prefix", "end_of_word_suffix" };
    for (int i = 0; i < 2; i++) {
        const cJSON *a = get(model, affixes[i]);
        if (a && (!cJSON_IsString(a) || a->valuestring[0]))
            return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: model.%s is not supported (null or \"\" only)", what, affixes[i]);
    }
    if ((s = get_flag(what, model, "model", "ignore_merges", false, &t->ignore_merges))) return s;
    const cJSON *vocab = get(model, "vocab");
    if (!cJSON_IsObject(vocab))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: model.vocab must be an object, not %s", what, wgml__json_type(vocab));
    if ((s = wgml__json_unique_keys(what, "model.vocab", vocab))) return s;
    const cJSON *merges = get(model, "merges");
    if (merges && !cJSON_IsArray(merges))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: model.merges must be an array, not %s", what, wgml__json_type(merges));
    const cJSON *added = get(root, "added_tokens");
    if (added && !cJSON_IsArray(added))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: added_tokens must be an array, not %s", what, wgml__json_type(added));

    /* ---- sizes and ids, checked before anything is allocated from them */
    size_t nvocab = 0, nadded = 0, arena = 0, longest = 0;
    uint64_t max_id = 0;
    for (const cJSON *c = vocab->child; c; c = c->next) {
        const char *k = c->string ? c->string : "";
        size_t kl = strlen(k);
        uint64_t id;
        if (!wgml__json_uint_ok(c, TOK_MAX_ID, &id)) {
            snprintf(field, sizeof field, "model.vocab['%s']", wgml__quote(q, sizeof q, k, kl));
            return wgml__json_uint(what, field, c, TOK_MAX_ID, &id);
        }
        if (kl == 0) return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: model.vocab has an empty token (id %llu)", what,
                                       (unsigned long long)id);
        if (id > max_id) max_id = id;
        arena += kl;
        if (kl > longest) longest = kl;
        nvocab++;
    }
    if (added) {
        size_t i = 0;
        for (const cJSON *c = added->child; c; c = c->next, i++) {
            if (!cJSON_IsObject(c))
                return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: added_tokens[%zu] must be an object, not %s", what, i,
                                  wgml__json_type(c));
            uint64_t id;
            snprintf(field, sizeof field, "added_tokens[%zu].id", i);
            if ((s = wgml__json_uint(what, field, get(c, "id"), TOK_MAX_ID, &id))) return s;
            const cJSON *content = get(c, "content");
            if (!cJSON_IsString(content))
                return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: added_tokens[%zu].content must be a string, not %s", what, i,
                                  wgml__json_type(content));
            if (!content->valuestring[0])
                return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: added_tokens[%zu].content is empty", what, i);
            if (id > max_id) max_id = id;
            arena += strlen(content->valuestring);
            nadded++;
        }
    }
    if (nvocab == 0) return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: model.vocab is empty", what);
    /* ids must be dense: a tiny file must not be able to ask for a huge id table */
    if (max_id + 1 > 2 * (uint64_t)(nvocab + nadded) + 1024)
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: token id %llu is far beyond the %zu tokens (ids must be dense)", what,
                          (unsigned long long)max_id, nvocab + nadded);
    t->vocab_size = (uint32_t)max_id + 1;
    t->tok_off = malloc(t->vocab_size * sizeof *t->tok_off);
    t->tok_len = malloc(t->vocab_size * sizeof *t->tok_len);
    t->bytes = malloc(arena + 1);
    t->added = calloc(nadded + 1, sizeof *t->added);
    char *scratch = t->scratch = malloc(2 * longest + 2);
    if (!t->tok_off || !t->tok_len || !t->bytes || !t->added || !scratch || !wgml__strmap_init(&t->vocab, nvocab) ||
        !wgml__strmap_init(&t->added_map, nadded))
        return oom(what);
    for (uint32_t i = 0; i < t->vocab_size; i++) t->tok_len[i] = NONE;

    uint16_t b2u[256];
    int16_t u2b[324];
    byte_alphabet(b2u, u2b);

    for (int b = 0; b < 256; b++) t->byte_id[b] = NONE;

    /* ---- vocab: spellings back to bytes */
    for (const cJSON *c = vocab->child; c; c = c->next) {
        const char *k = c->string;
        size_t kl = strlen(k), rl;
        uint32_t id = (uint32_t)c->valuedouble;   /* checked above */
        if (t->tok_len[id] != NONE) {
            const char *other = t->bytes + t->tok_off[id];
            return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: model.vocab gives id %u to both '%s' and '%s'",
                                             what, id, wgml__quote(q, sizeof q, other, t->tok_len[id]),
                                             wgml__quote(q2, sizeof q2, k, kl));
        }
        char *dst = t->bytes + t->nbytes;
        int fb = t->byte_fallback ? fallback_byte(k, kl) : -1;
        bool mapped;
        if (fb >= 0) {   /* <0xNN>: decodes to its byte, produced only by the fallback */
            dst[0] = (char)fb;
            rl = 1;
            mapped = false;
            t->byte_id[fb] = id;
        } else if (t->sp) {
            rl = sp_spell(k, kl, dst);
            mapped = true;
        } else {
            mapped = unmap(u2b, k, kl, dst, &rl);
            if (!mapped) {   /* not byte-level: decodes to its own UTF-8, never produced by BPE */
                memcpy(dst, k, kl);
                rl = kl;
            }
        }
        t->tok_off[id] = (uint32_t)t->nbytes;
        t->tok_len[id] = (uint32_t)rl;
        t->nbytes += rl;
        int r = mapped ? wgml__strmap_put(&t->vocab, dst, rl, id, NULL) : 1;
        if (r < 0) return oom(what);
        if (r == 0)   /* "\u2581a" and " a" */
            return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: model.vocab spells '%s' twice (a space and \"\\u2581\" are the "
                              "same character here)", what, wgml__quote(q, sizeof q, k, kl));
    }
    t->unk_id = NONE;   /* Hugging Face reads an unk_token outside the vocab as none */
    size_t unk_len = unk && t->sp ? strlen(unk->valuestring) : 0;
    if (unk_len && unk_len <= longest && !wgml__strmap_get(&t->vocab, scratch, sp_spell(unk->valuestring, unk_len, scratch),
                                                           &t->unk_id))
        t->unk_id = NONE;
    for (int b = 0; t->byte_fallback && b < 256; b++)
        if (t->byte_id[b] == NONE)
            return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: model.byte_fallback without the token <0x%02X>: it needs all 256",
                              what, b);
    for (int b = 0; !t->sp && b < 256; b++) {
        char one = (char)b;
        if (!wgml__strmap_get(&t->vocab, &one, 1, &t->byte_id[b]))
            return wgml__fail(NULL, WGML_ERROR_FORMAT,
                              "%s: model.vocab lacks the token of byte 0x%02x (spelled U+%04X): byte-level BPE needs all 256",
                              what, b, b2u[b]);
    }

    /* ---- added tokens */
    if (added) {
        size_t i = 0;
        for (const cJSON *c = added->child; c; c = c->next, i++) {
            added_token *a = &t->added[t->nadded];
            const char *content = get(c, "content")->valuestring;
            size_t cl = strlen(content);
            a->id = (uint32_t)get(c, "id")->valuedouble;   /* checked above */
            snprintf(field, sizeof field, "added_tokens[%zu]", i);
            if ((s = get_flag(what, c, field, "lstrip", false, &a->lstrip)) ||
                (s = get_flag(what, c, field, "rstrip", false, &a->rstrip)) ||
                (s = get_flag(what, c, field, "single_word", false, &a->single_word)) ||
                (s = get_flag(what, c, field, "special", false, &a->special)))
                return s;
            memcpy(t->bytes + t->nbytes, content, cl);
            a->off = (uint32_t)t->nbytes;
            a->len = (uint32_t)cl;
            t->nbytes += cl;
            uint32_t prev;
            int r = wgml__strmap_put(&t->added_map, t->bytes + a->off, cl, a->id, &prev);
            if (r < 0) return oom(what);
            if (r == 0)
                return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: added_tokens[%zu] repeats '%s'", what, i,
                                                 wgml__quote(q, sizeof q, content, cl));
            /* An added token decodes to its content as written. (Hugging Face passes it
               through the byte-level decoder, which garbles a content made of non-ASCII
               characters of the byte alphabet, e.g. "\u00e9" -> byte 0xE9.) */
            t->tok_off[a->id] = a->off;
            t->tok_len[a->id] = (uint32_t)cl;
            t->nadded++;
        }
        /* one id per added token */
        uint8_t *seen = calloc(t->vocab_size, 1);
        if (!seen) return oom(what);
        for (size_t j = 0; j < t->nadded; j++) {
            if (seen[t->added[j].id]) {
                free(seen);
                return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: added_tokens give id %u to two tokens", what,
                                                 t->added[j].id);
            }
            seen[t->added[j].id] = 1;
        }
        free(seen);
        added_token *tmp = malloc((t->nadded + 1) * sizeof *tmp);
        if (!tmp) return oom(what);
        sort_added(t->added, t->nadded, t->bytes, tmp);
        free(tmp);
    }
    for (int b = 0, j = 0; b <= 256; b++) {
        while ((size_t)j < t->nadded && (uint8_t)t->bytes[t->added[j].off] < b) j++;
        t->added_first[b] = (uint32_t)j;
    }

    /* ---- merges */
    size_t nmerges = 0;
    for (const cJSON *c = merges ? merges->child : NULL; c; c = c->next) nmerges++;
    if (nmerges > TOK_MAX_ID) return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: more than 2^24 merges", what);
    if (nmerges) {
        size_t cap = 16;
        while (cap < 2 * nmerges) cap *= 2;
        t->merges = malloc(cap * sizeof *t->merges);
        if (!t->merges) return oom(what);
        for (size_t i = 0; i < cap; i++) t->merges[i].key = UINT64_MAX;
        t->merge_cap = cap;
        t->merge_seed = mix64((uint64_t)(uintptr_t)t->merges ^ 0x13198A2E03707344ull);
    }
    size_t rank = 0;
    for (const cJSON *c = merges ? merges->child : NULL; c; c = c->next, rank++) {
        const char *part[2];
        size_t plen[2];
        if (cJSON_IsString(c)) {   /* "a b": exactly one space, as Hugging Face splits it */
            const char *v = c->valuestring, *sp = strchr(v, ' ');
            if (!sp || strchr(sp + 1, ' ') || sp == v || !sp[1])
                return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: merges[%zu] '%s' is not two tokens split by a space",
                                                 what, rank, wgml__quote(q, sizeof q, v, strlen(v)));
            part[0] = v; plen[0] = (size_t)(sp - v);
            part[1] = sp + 1; plen[1] = strlen(sp + 1);
        } else if (cJSON_IsArray(c) && c->child && c->child->next && !c->child->next->next &&
                   cJSON_IsString(c->child) && cJSON_IsString(c->child->next) && c->child->valuestring[0] &&
                   c->child->next->valuestring[0]) {   /* ["a", "b"] */
            part[0] = c->child->valuestring; plen[0] = strlen(part[0]);
            part[1] = c->child->next->valuestring; plen[1] = strlen(part[1]);
        } else
            return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: merges[%zu] must be \"a b\" or [\"a\", \"b\"], not %s",
                                             what, rank, wgml__json_type(c));
        uint32_t id[2], merged;
        size_t rl[2];
        for (int k = 0; k < 2; k++) {
            /* the spellings of vocab tokens are never longer than the longest key */
            char *dst = scratch + (k ? rl[0] : 0);
            bool spelled = plen[k] <= longest;
            if (spelled && t->sp) rl[k] = sp_spell(part[k], plen[k], dst);
            else if (spelled) spelled = unmap(u2b, part[k], plen[k], dst, &rl[k]);
            bool ok = spelled &&
                      wgml__strmap_get(&t->vocab, scratch + (k ? rl[0] : 0), rl[k], &id[k]);
            if (!ok)
                return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: merges[%zu]: '%s' is not a %stoken of the vocab",
                                                 what, rank, wgml__quote(q, sizeof q, part[k], plen[k]), t->sp ? "" : "byte-level ");
        }
        if (!wgml__strmap_get(&t->vocab, scratch, rl[0] + rl[1], &merged)) {
            char both[2 * WGML__QUOTE_MAX];
            snprintf(both, sizeof both, "%s%s", wgml__quote(q, sizeof q, part[0], plen[0]), wgml__quote(q2, sizeof q2, part[1], plen[1]));
            return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: merges[%zu] '%s %s': '%s' is not in the vocab", what,
                                             rank, q, q2, both);
        }
        merge_put(t, id[0], id[1], (uint32_t)rank, merged);
    }
    return parse_post(t, what, get(root, "post_processor"), "post_processor", 0);
}

void wgml_tokenizer_free(wgml_tokenizer *t)
{
    if (!t) return;
    free(t->tok_off);
    free(t->tok_len);
    free(t->bytes);
    wgml__strmap_free(&t->vocab);
    wgml__strmap_free(&t->added_map);
    free(t->merges);
    free(t->added);
    free(t->scratch);
    for (int i = 0; i < t->nsteps; i++) wgml__regex_free(t->steps[i].rx);
    free(t);
}

wgml_status wgml_tokenizer_parse(const char *json, size_t len, const char *name, wgml_tokenizer **out)
{
    if (out) *out = NULL;
    if (!out || (!json && len))
        return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_tokenizer_parse: json and out must not be NULL");
    const char *what = name ? name : "tokenizer.json";
    if (len > TOK_MAX_BYTES)   /* token offsets are 32-bit */
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %zu bytes, more than the %zu a tokenizer may have", what, len,
                          TOK_MAX_BYTES);
    cJSON *root;
    wgml_status s = wgml__json_parse(what, json ? json : "", len, TOK_BYTES_PER_VALUE, &root);
    if (s) return s;
    wgml_tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        cJSON_Delete(root);
        return oom(what);
    }
    s = tok_parse(t, what, root);
    cJSON_Delete(root);
    free(t->scratch);
    t->scratch = NULL;
    if (s) {
        wgml_tokenizer_free(t);
        return s;
    }
    *out = t;
    return WGML_OK;
}

wgml_status wgml_tokenizer_load(const char *path, wgml_tokenizer **out)
{
    if (out) *out = NULL;
    if (!path || !out) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_tokenizer_load: path and out must not be NULL");
    char *json;
    size_t len;
    wgml_status s = wgml__read_file(path, true, TOK_MAX_BYTES, &json, &len);
    if (s) return s;
    s = wgml_tokenizer_parse(json, len, path, out);
    free(json);
    return s;
}

wgml_status wgml_tokenizer_bytes(wgml_tokenizer **out)
{
    if (!out) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_tokenizer_bytes: out must not be NULL");
    *out = NULL;
    wgml_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return oom("wgml_tokenizer_bytes");
    t->vocab_size = 256;
    t->bytes_only = true;
    t->tok_off = malloc(256 * sizeof *t->tok_off);
    t->tok_len = malloc(256 * sizeof *t->tok_len);
    t->bytes = malloc(256);
    if (!t->tok_off || !t->tok_len || !t->bytes || !wgml__strmap_init(&t->vocab, 256) || !wgml__strmap_init(&t->added_map, 0)) {
        wgml_tokenizer_free(t);
        return oom("wgml_tokenizer_bytes");
    }
    for (int b = 0; b < 256; b++) {
        t->bytes[b] = (char)b;
        t->tok_off[b] = (uint32_t)b;
        t->tok_len[b] = 1;
        t->byte_id[b] = (uint32_t)b;
        wgml__strmap_put(&t->vocab, t->bytes + b, 1, (uint32_t)b, NULL);
    }
    t->nbytes = 256;
    *out = t;
    return WGML_OK;
}

uint32_t wgml_tokenizer_vocab_size(const wgml_tokenizer *t) { return t ? t->vocab_size : 0; }

int64_t wgml_tokenizer_token_id(const wgml_tokenizer *t, const char *token)
{
    if (!t || !token) return -1;
    size_t n = strlen(token), rl;
    uint32_t id;
    if (wgml__strmap_get(&t->added_map, token, n, &id)) return id;
    int fb = t->byte_fallback ? fallback_byte(token, n) : -1;
    if (fb >= 0) return t->byte_id[fb];
    uint16_t b2u[256];
    int16_t u2b[324];
    byte_alphabet(b2u, u2b);
    char small[256];
    char *raw = n <= sizeof small ? small : malloc(n);
    if (!raw) return -1;
    int64_t r = -1;
    bool spelled = true;
    if (t->sp) rl = sp_spell(token, n, raw);
    else spelled = unmap(u2b, token, n, raw, &rl);
    if (spelled && wgml__strmap_get(&t->vocab, raw, rl, &id)) r = id;
    if (raw != small) free(raw);
    return r;
}

/* ---- encoding ------------------------------------------------------------------------ */

typedef struct sym { uint32_t id, prev, next; } sym;

/* A direct-mapped cache of short pieces and their ids, for long texts: natural text repeats
   its words, and a hit skips the merging. Per encode call, so encoding stays thread-safe. */
#define CACHE_SLOTS 4096
#define CACHE_BYTES 22
#define CACHE_IDS 6
typedef struct cache_slot {
    uint64_t hash;      /* 0: empty */
    uint8_t len, nids;
    char bytes[CACHE_BYTES];
    uint32_t ids[CACHE_IDS];
} cache_slot;

typedef struct enc {
    const wgml_tokenizer *t;
    cache_slot *cache;  /* NULL for short texts */
    uint32_t *ids;
    size_t cap, n;
    sym *syms;          /* BPE scratch, sized for the longest piece so far */
    uint64_t *heap;
    size_t scap;
    uint8_t *pfx;       /* a piece with the ByteLevel prefix space */
    size_t pcap;
    bool oom;
} enc;

static inline void emit(enc *E, uint32_t id)
{
    if (E->n < E->cap) E->ids[E->n] = id;
    E->n++;
}

static bool reserve(enc *E, size_t n)
{
    if (n <= E->scap) return true;
    size_t cap = E->scap ? E->scap : 64;
    while (cap < n) cap *= 2;
    sym *s = realloc(E->syms, cap * sizeof *s);
    if (s) E->syms = s;
    uint64_t *h = realloc(E->heap, 3 * cap * sizeof *h);
    if (h) E->heap = h;
    if (!s || !h) return false;
    E->scap = cap;
    return true;
}

static void heap_push(uint64_t *h, size_t *n, uint64_t v)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p] <= v) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n)
{
    uint64_t top = h[0], v = h[--*n];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && h[c + 1] < h[c]) c++;
        if (v <= h[c]) break;
        h[i] = h[c];
        i = c;
    }
    if (m) h[i] = v;
    return top;
}

/* Merges the bytes of one piece and emits its tokens (bpe() looks in the cache first). Heap entries are (rank << 32 | left
   position): lowest rank first, leftmost on ties. An entry is stale when its left symbol
   was merged away or its pair changed since; the rank check catches both. */
static void bpe_merge(enc *E, const uint8_t *s, size_t n);

static void bpe(enc *E, const uint8_t *s, size_t n)
{
    if (!E->cache || n < 2 || n > CACHE_BYTES) {
        bpe_merge(E, s, n);
        return;
    }
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    h |= 1;
    cache_slot *c = &E->cache[(h ^ (h >> 29)) & (CACHE_SLOTS - 1)];
    if (c->hash == h && c->len == n && memcmp(c->bytes, s, n) == 0) {
        for (uint8_t i = 0; i < c->nids; i++) emit(E, c->ids[i]);
        return;
    }
    size_t first = E->n;
    bpe_merge(E, s, n);
    size_t k = E->n - first;
    if (k <= CACHE_IDS && E->n <= E->cap && !E->oom) {   /* the ids are all in E->ids */
        c->hash = h;
        c->len = (uint8_t)n;
        c->nids = (uint8_t)k;
        memcpy(c->bytes, s, n);
        memcpy(c->ids, E->ids + first, k * sizeof *c->ids);
    }
}

/* The first symbols of a SentencePiece-style piece, into y: each character's token, else
   its bytes' tokens (byte_fallback), else the unknown token (one for a run with
   fuse_unk), else nothing. Returns how many. */
static size_t sp_symbols(const wgml_tokenizer *t, const uint8_t *s, size_t n, sym *y)
{
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t c, id;
        size_t l = char_at(s, n, i, &c);
        if (wgml__strmap_get(&t->vocab, (const char *)s + i, l, &id)) y[k++].id = id;
        else if (t->byte_fallback)
            for (size_t b = 0; b < l; b++) y[k++].id = t->byte_id[s[i + b]];
        else if (t->unk_id != NONE && !(t->fuse_unk && k && y[k - 1].id == t->unk_id)) y[k++].id = t->unk_id;
        i += l;
    }
    return k;
}

static void bpe_merge(enc *E, const uint8_t *s, size_t n)
{
    const wgml_tokenizer *t = E->t;
    uint32_t whole;
    if (n > 1 && t->ignore_merges && wgml__strmap_get(&t->vocab, (const char *)s, n, &whole)) {
        emit(E, whole);
        return;
    }
    if (!t->sp && (n == 1 || !t->merge_cap)) {
        for (size_t i = 0; i < n; i++) emit(E, t->byte_id[s[i]]);
        return;
    }
    if (!reserve(E, n)) { E->oom = true; return; }
    sym *y = E->syms;
    uint64_t *h = E->heap;
    size_t hn = 0;
    if (t->sp) n = sp_symbols(t, s, n, y);   /* never more symbols than bytes */
    else
        for (size_t i = 0; i < n; i++) y[i].id = t->byte_id[s[i]];
    if (n == 0) return;
    for (size_t i = 0; i < n; i++) { y[i].prev = i ? (uint32_t)i - 1 : NONE; y[i].next = i + 1 < n ? (uint32_t)i + 1 : NONE; }
    for (size_t i = 0; t->merge_cap && i + 1 < n; i++) {
        const merge_slot *m = merge_find(t, y[i].id, y[i + 1].id);
        if (m) heap_push(h, &hn, ((uint64_t)m->rank << 32) | i);
    }
    while (hn) {
        uint64_t top = heap_pop(h, &hn);
        uint32_t rank = (uint32_t)(top >> 32), i = (uint32_t)top;
        if (y[i].id == NONE || y[i].next == NONE) continue;
        uint32_t j = y[i].next;
        const merge_slot *m = merge_find(t, y[i].id, y[j].id);
        if (!m || m->rank != rank) continue;
        y[i].id = m->id;
        y[j].id = NONE;
        y[i].next = y[j].next;
        if (y[j].next != NONE) y[y[j].next].prev = i;
        if (y[i].prev != NONE && (m = merge_find(t, y[y[i].prev].id, y[i].id)))
            heap_push(h, &hn, ((uint64_t)m->rank << 32) | y[i].prev);
        if (y[i].next != NONE && (m = merge_find(t, y[i].id, y[y[i].next].id)))
            heap_push(h, &hn, ((uint64_t)m->rank << 32) | i);
    }
    for (uint32_t i = 0; i != NONE; i = y[i].next) emit(E, y[i].id);
}

/* *s[0..*n) with a space before it, in the encoder's prefix buffer: *s and *n point to
   the copy. false (and E->oom) when out of memory. */
static bool with_space(enc *E, const uint8_t **s, size_t *n)
{
    if (*n + 1 > E->pcap) {
        uint8_t *b = realloc(E->pfx, *n + 1);
        if (!b) { E->oom = true; return false; }
        E->pfx = b;
        E->pcap = *n + 1;
    }
    E->pfx[0] = ' ';
    memcpy(E->pfx + 1, *s, *n);
    *s = E->pfx;
    (*n)++;
    return true;
}

/* Runs pre-tokenizer steps [step, nsteps) on s[0..n), then BPE on each final piece. */
static void pretokenize(enc *E, const uint8_t *s, size_t n, int step);

/* A Split step through its pattern: each match, and the text between matches, becomes a
   piece for the next step (step -1: BPE directly, the ByteLevel split); with Removed the
   matches are dropped. Empty matches cut nothing. Text PCRE2 refuses as UTF-8 goes on as
   one piece (Hugging Face's tokenizers only take valid UTF-8). */
static void split_rx(enc *E, const pre_step *p, const uint8_t *s, size_t n, int step)
{
    void *scratch = wgml__regex_scratch(p->rx);
    if (!scratch) { E->oom = true; return; }
#define NEXT(a, b) (step < 0 ? bpe(E, a, b) : pretokenize(E, a, b, step + 1))
    size_t done = 0, from = 0;
    while (from < n && !E->oom) {
        size_t ms, me;
        int r = wgml__regex_next(p->rx, scratch, s, n, from, &ms, &me);
        if (r <= 0) break;
        if (me == ms) {   /* past the character at ms */
            from = ms + 1;
            while (from < n && (s[from] & 0xC0) == 0x80) from++;
            continue;
        }
        if (ms > done) NEXT(s + done, ms - done);
        if (!p->removed) NEXT(s + ms, me - ms);
        done = from = me;
    }
    if (done < n) NEXT(s + done, n - done);
#undef NEXT
    wgml__regex_scratch_free(scratch);
}

static void pretokenize(enc *E, const uint8_t *s, size_t n, int step)
{
    const wgml_tokenizer *t = E->t;
    if (n == 0 || E->oom) return;
    if (step == t->nsteps) { bpe(E, s, n); return; }
    const pre_step *p = &t->steps[step];
    switch (p->type) {
    case STEP_DIGITS: {
        size_t i = 0, start = 0;
        while (i < n) {
            uint32_t c;
            size_t l = char_at(s, n, i, &c);
            if (char_class(c) != C_NUMBER) { i += l; continue; }
            pretokenize(E, s + start, i - start, step + 1);   /* the text before */
            size_t e = p->individual ? i + l : run_of(s, n, i, C_NUMBER, SIZE_MAX);
            pretokenize(E, s + i, e - i, step + 1);
            i = start = e;
        }
        pretokenize(E, s + start, n - start, step + 1);
        return;
    }
    case STEP_SPLIT:
        split_rx(E, p, s, n, step);
        return;
    default: /* STEP_BYTELEVEL, always the last step */
        if (p->add_prefix_space && s[0] != ' ' && !with_space(E, &s, &n)) return;
        if (!p->use_regex) { bpe(E, s, n); return; }
        split_rx(E, p, s, n, -1);
        return;
    }
}

static bool word_char_before(const uint8_t *s, size_t i)
{
    if (i == 0) return false;
    size_t k = i - 1;
    while (k > 0 && (s[k] & 0xC0) == 0x80 && i - k < 4) k--;
    uint32_t c;
    char_at(s, i, k, &c);
    int cls = char_class(c);
    return cls == C_LETTER || cls == C_NUMBER || c == '_';
}

static bool word_char_at(const uint8_t *s, size_t n, size_t i)
{
    if (i >= n) return false;
    uint32_t c;
    char_at(s, n, i, &c);
    int cls = char_class(c);
    return cls == C_LETTER || cls == C_NUMBER || c == '_';
}

/* An added token starting at i (longest first): its index, or -1. */
static long added_at(const wgml_tokenizer *t, const uint8_t *s, size_t n, size_t i)
{
    uint8_t b = s[i];
    for (uint32_t k = t->added_first[b]; k < t->added_first[b + 1]; k++) {
        const added_token *a = &t->added[k];
        if (a->len > n - i || memcmp(s + i, t->bytes + a->off, a->len) != 0) continue;
        if (a->single_word && (word_char_before(s, i) || word_char_at(s, n, i + a->len))) continue;
        return (long)k;
    }
    return -1;
}

/* A SentencePiece-style piece of text (between added tokens; first: it starts the text):
   its leading space, Metaspace's cut before each space, then BPE on each word. */
static void sp_piece(enc *E, const uint8_t *s, size_t n, bool first)
{
    const wgml_tokenizer *t = E->t;
    if (n == 0 || E->oom) return;
    bool prepend = t->prepend == PREPEND_ALWAYS || (t->prepend == PREPEND_FIRST && first);
    if (prepend && !(t->prepend_if_missing && s[0] == ' ') && !with_space(E, &s, &n)) return;
    if (!t->split_words) { bpe(E, s, n); return; }
    for (size_t i = 0; i < n;) {   /* words: a space and what follows up to the next space */
        size_t e = i + 1;
        while (e < n && s[e] != ' ') e++;
        bpe(E, s + i, e - i);
        i = e;
    }
}

/* Encodes one piece of text between added tokens, as the tokenizer's kind does, after
   its Unicode normalizer (text that is not valid UTF-8 goes on as it is). */
static void piece(enc *E, const uint8_t *s, size_t n, bool first)
{
    uint8_t *norm = NULL;
    if (E->t->unorm && n) {
        size_t len = 0;
        norm = wgml__unicode_normalize(s, n, E->t->unorm, &len);
        if (norm) {
            s = norm;
            n = len;
        }
    }
    if (E->t->sp) sp_piece(E, s, n, first);
    else pretokenize(E, s, n, 0);
    free(norm);
}


static wgml_status encode(const wgml_tokenizer *t, const char *text, size_t len, uint32_t *ids, size_t cap, size_t *n,
                          bool specials, const char *fn)
{
    if (!t || !n || (!text && len) || (!ids && cap))
        return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: tok and n must not be NULL, nor text when len > 0, nor ids when cap > 0", fn);
    if (len >= ((size_t)1 << 31))
        return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: len %zu is 2 GiB or more: encode the text in parts", fn, len);
    const uint8_t *s = (const uint8_t *)text;
    enc E = { .t = t, .ids = ids, .cap = cap };
    if (len >= ((size_t)16 << 10) && !t->bytes_only) E.cache = calloc(CACHE_SLOTS, sizeof *E.cache);   /* NULL: no cache */
    if (t->bytes_only) {
        for (size_t i = 0; i < len; i++) emit(&E, s[i]);
    } else {
        size_t seg = 0;
        if (specials && t->nadded) {
            for (size_t i = 0; i < len && !E.oom;) {
                long k = added_at(t, s, len, i);
                if (k < 0) { i++; continue; }
                const added_token *a = &t->added[k];
                size_t start = i, end = i + a->len;
                if (a->lstrip)
                    while (start > seg) {
                        size_t p = start - 1;
                        while (p > seg && (s[p] & 0xC0) == 0x80 && start - p < 4) p--;
                        uint32_t c;
                        if (char_at(s, start, p, &c) != start - p || !is_space(c)) break;
                        start = p;
                    }
                if (a->rstrip)
                    while (end < len) {
                        uint32_t c;
                        size_t l = char_at(s, len, end, &c);
                        if (!is_space(c)) break;
                        end += l;
                    }
                piece(&E, s + seg, start - seg, seg == 0);
                emit(&E, a->id);
                i = seg = end;
            }
        }
        piece(&E, s + seg, len - seg, seg == 0);
    }
    free(E.cache);
    free(E.syms);
    free(E.heap);
    free(E.pfx);
    if (E.oom) return wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    *n = E.n;
    if (E.n > cap)
        return wgml__fail(NULL, WGML_ERROR_SHAPE, "%s: the text is %zu tokens, more than cap = %zu", fn, E.n, cap);
    return WGML_OK;
}

void wgml_tokenizer_specials(const wgml_tokenizer *t, const uint32_t **prefix, size_t *nprefix, const uint32_t **suffix,
                             size_t *nsuffix)
{
    if (prefix) *prefix = t ? t->prefix : NULL;
    if (nprefix) *nprefix = t ? t->nprefix : 0;
    if (suffix) *suffix = t ? t->suffix : NULL;
    if (nsuffix) *nsuffix = t ? t->nsuffix : 0;
}

wgml_status wgml_tokenizer_encode(const wgml_tokenizer *t, const char *text, size_t len, uint32_t *ids, size_t cap, size_t *n)
{
    return encode(t, text, len, ids, cap, n, true, "wgml_tokenizer_encode");
}

wgml_status wgml_tokenizer_encode_ordinary(const wgml_tokenizer *t, const char *text, size_t len, uint32_t *ids, size_t cap,
                                           size_t *n)
{
    return encode(t, text, len, ids, cap, n, false, "wgml_tokenizer_encode_ordinary");
}

/* Decodes ids; at_start: they begin a text, whose leading space a SentencePiece-style
   decoder removes. */
static wgml_status decode(const wgml_tokenizer *t, const uint32_t *ids, size_t n, char *out, size_t cap, size_t *len,
                          bool at_start, const char *fn)
{
    if (!t || !len || (!ids && n) || (!out && cap))
        return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: tok and len must not be NULL, nor ids when n > 0, nor out when cap > 0", fn);
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t id = ids[i];
        if (id >= t->vocab_size || t->tok_len[id] == NONE)
            return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: ids[%zu] = %u is not a token (vocab size %u)", fn, i, id,
                              t->vocab_size);
        if (t->tok_len[id] > SIZE_MAX - total) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: output too large", fn);
        total += t->tok_len[id];
    }
    /* the first token's leading space, when the decoder strips it (a token of one space
       strips to nothing, as Hugging Face's Strip does to the whole text) */
    size_t skip = at_start && t->strip_space && n && t->tok_len[ids[0]] && t->bytes[t->tok_off[ids[0]]] == ' ';
    total -= skip;
    size_t o = 0;
    for (size_t i = 0; i < n && o < cap; i++) {
        size_t l = t->tok_len[ids[i]], from = i == 0 ? skip : 0;
        l -= from;
        if (l > cap - o) l = cap - o;
        memcpy(out + o, t->bytes + t->tok_off[ids[i]] + from, l);
        o += l;
    }
    *len = total;
    if (total < cap) out[total] = 0;
    if (total > cap)
        return wgml__fail(NULL, WGML_ERROR_SHAPE, "%s: the text is %zu bytes, more than cap = %zu", fn, total, cap);
    return WGML_OK;
}

wgml_status wgml_tokenizer_decode(const wgml_tokenizer *t, const uint32_t *ids, size_t n, char *out, size_t cap, size_t *len)
{
    return decode(t, ids, n, out, cap, len, true, "wgml_tokenizer_decode");
}

wgml_status wgml_tokenizer_decode_continuation(const wgml_tokenizer *t, const uint32_t *ids, size_t n, char *out, size_t cap,
                                               size_t *len)
{
    return decode(t, ids, n, out, cap, len, false, "wgml_tokenizer_decode_continuation");
}
