/* libFuzzer target: texts through eight built-in tokenizers (the first byte picks which,
   the rest is the text). encode, encode_ordinary and decode must give back exactly the
   text's bytes, never more ids than bytes, ids below the vocab size, and the same ids when
   the output buffer is too small (then WGML_ERROR_SHAPE with the count needed). The two
   SentencePiece-style ones add spaces (no round trip through encode), but the one with
   the Prepend normalizer and byte fallback gives the text back through encode_ordinary
   (its decoder strips the one space it prepends). */
#include "fuzz_check.h"
#include "fuzz_tokenizer.h"

#include <cjson/cJSON.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ---- the built-in tokenizers ---------------------------------------------------------- */

static void spell(const char *raw, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++) {
        unsigned b = (uint8_t)raw[i], c = b, k = 0;
        if (!((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)) {
            for (unsigned x = 0; x < b; x++)
                if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE)) k++;
            c = 256 + k;
        }
        if (c < 0x80) *out++ = (char)c;
        else { *out++ = (char)(0xC0 | (c >> 6)); *out++ = (char)(0x80 | (c & 0x3F)); }
    }
    *out = 0;
}

static const char *const regexes[2] = {
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};

static cJSON *byte_level(bool prefix, bool use_regex)
{
    cJSON *b = cJSON_CreateObject();
    cJSON_AddStringToObject(b, "type", "ByteLevel");
    cJSON_AddBoolToObject(b, "add_prefix_space", prefix);
    cJSON_AddBoolToObject(b, "use_regex", use_regex);
    return b;
}

/* kind 0: GPT-2; 1: Llama 3; 2: Qwen 2; 3: Digits + GPT-2; 4: GPT-2 with ignore_merges;
   5: GPT-2 with add_prefix_space (the text gains spaces: no round trip). */
static wgml_tokenizer *builtin(int kind)
{
    cJSON *root = cJSON_CreateObject(), *pre;
    if (kind == 1 || kind == 2 || kind == 3) {
        pre = cJSON_CreateObject();
        cJSON_AddStringToObject(pre, "type", "Sequence");
        cJSON *list = cJSON_AddArrayToObject(pre, "pretokenizers"), *first = cJSON_CreateObject();
        if (kind == 3) {
            cJSON_AddStringToObject(first, "type", "Digits");
            cJSON_AddTrueToObject(first, "individual_digits");
        } else {
            cJSON_AddStringToObject(first, "type", "Split");
            cJSON_AddStringToObject(cJSON_AddObjectToObject(first, "pattern"), "Regex", regexes[kind - 1]);
            cJSON_AddStringToObject(first, "behavior", "Isolated");
        }
        cJSON_AddItemToArray(list, first);
        cJSON_AddItemToArray(list, byte_level(false, kind == 3));
    } else
        pre = byte_level(kind == 5, true);
    cJSON_AddItemToObject(root, "pre_tokenizer", pre);
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    cJSON *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddBoolToObject(model, "ignore_merges", kind == 4);
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab"), *merges = cJSON_AddArrayToObject(model, "merges");
    char sp[64], sa[32], sb[32];
    int id = 0;
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        spell(&c, 1, sp);
        cJSON_AddNumberToObject(vocab, sp, id++);
    }
    static const char *const pairs[][2] = {
        { "t", "h" }, { "th", "e" }, { " ", "t" }, { "h", "e" }, { " t", "he" }, { "i", "n" }, { "e", "r" }, { "a", "n" },
        { " ", "a" }, { "o", "n" }, { "r", "e" }, { " ", " " }, { "  ", "  " }, { "\xc3", "\xa9" }, { "\xe4", "\xbd" },
        { "\xe4\xbd", "\xa0" }, { "1", "2" }, { "12", "3" }, { "\n", "\n" }, { "in", "g" }, { " a", "n" },
        { "e", "e" }, { "ee", "ee" }, { "'", "s" }, { "\xf0", "\x9f" }, { "an", "d" }, { " an", "d" },
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        char both[16];
        snprintf(both, sizeof both, "%s%s", pairs[i][0], pairs[i][1]);
        spell(both, strlen(both), sp);
        if (!cJSON_GetObjectItemCaseSensitive(vocab, sp)) cJSON_AddNumberToObject(vocab, sp, id++);
        spell(pairs[i][0], strlen(pairs[i][0]), sa);
        spell(pairs[i][1], strlen(pairs[i][1]), sb);
        snprintf(sp, sizeof sp, "%s %s", sa, sb);
        cJSON_AddItemToArray(merges, cJSON_CreateString(sp));
    }
    spell("hello", 5, sp);
    cJSON_AddNumberToObject(vocab, sp, id++);   /* whole-word only (ignore_merges) */
    static const char *const specials[] = { "<|endoftext|>", "<|im_start|>", "<|x|>", "\xc3\xa9t\xc3\xa9" };
    for (int i = 0; i < 4; i++) {
        cJSON *a = cJSON_CreateObject();
        cJSON_AddNumberToObject(a, "id", id++);
        cJSON_AddStringToObject(a, "content", specials[i]);
        cJSON_AddBoolToObject(a, "single_word", i == 2);
        cJSON_AddItemToArray(added, a);
    }
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    wgml_tokenizer *t = NULL;
    if (wgml_tokenizer_parse(text, strlen(text), "builtin", &t) != WGML_OK) {
        fprintf(stderr, "built-in tokenizer %d: %s\n", kind, wgml_last_error(NULL));
        abort();
    }
    cJSON_free(text);
    return t;
}

/* SentencePiece style: kind 6 the Prepend / Replace normalizer with byte fallback; 7
   Metaspace (prepend_scheme first, split) with the unknown token, fused. */
static wgml_tokenizer *sp_builtin(int kind)
{
#define SPC "\xE2\x96\x81"   /* U+2581 */
    static const char *const pieces[] = {
        SPC, "t", "h", "e", "a", "n", "d", "i", "\xC3\xA9", "\xE4\xBD\xA0", "1", "2", "th", "he", "the", SPC "t", SPC "the",
        "an", SPC "a", SPC "an", "and", SPC "and", (SPC SPC), "12", ("e" SPC),
    };
    static const char *const merges[] = {
        "t h", "h e", "th e", SPC " t", SPC "t he", "a n", SPC " a", SPC "a n", "an d", SPC "an d", SPC " " SPC, "1 2",
        ("e " SPC),
    };
#undef SPC
    static char text[16384];   /* 256 byte tokens of about 14 characters, and the rest */
    int o = snprintf(text, sizeof text, "{\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"special\":true},"
                     "{\"id\":1,\"content\":\"<s>\",\"special\":true}],");
    if (kind == 6)
        o += snprintf(text + o, sizeof text - (size_t)o,
                      "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"\\u2581\"},"
                      "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\\u2581\"}]},\"pre_tokenizer\":null,"
                      "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"\\u2581\"},"
                      "\"content\":\" \"},{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \","
                      "\"start\":1,\"stop\":0}]},");
    else
        o += snprintf(text + o, sizeof text - (size_t)o,
                      "\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\","
                      "\"prepend_scheme\":\"first\",\"split\":true},\"decoder\":{\"type\":\"Metaspace\",\"replacement\":"
                      "\"\\u2581\",\"prepend_scheme\":\"first\"},");
    o += snprintf(text + o, sizeof text - (size_t)o, "\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"fuse_unk\":true,"
                  "\"byte_fallback\":%s,\"vocab\":{\"<unk>\":0,\"<s>\":1", kind == 6 ? "true" : "false");
    int id = 2;
    for (int b = 0; kind == 6 && b < 256; b++) o += snprintf(text + o, sizeof text - (size_t)o, ",\"<0x%02X>\":%d", b, id++);
    for (size_t i = 0; i < sizeof pieces / sizeof pieces[0]; i++)
        o += snprintf(text + o, sizeof text - (size_t)o, ",\"%s\":%d", pieces[i], id++);
    o += snprintf(text + o, sizeof text - (size_t)o, "},\"merges\":[");
    for (size_t i = 0; i < sizeof merges / sizeof merges[0]; i++)
        o += snprintf(text + o, sizeof text - (size_t)o, "%s\"%s\"", i ? "," : "", merges[i]);
    o += snprintf(text + o, sizeof text - (size_t)o, "]}}");
    wgml_tokenizer *t = NULL;
    if ((size_t)o >= sizeof text || wgml_tokenizer_parse(text, (size_t)o, "builtin", &t) != WGML_OK) {
        fprintf(stderr, "built-in tokenizer %d: %s\n", kind, wgml_last_error(NULL));
        abort();
    }
    return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static wgml_tokenizer *tokenizers[8];
    if (size < 1) return 0;
    int kind = data[0] % 8;
    if (!tokenizers[kind]) tokenizers[kind] = kind < 6 ? builtin(kind) : sp_builtin(kind);
    const wgml_tokenizer *t = tokenizers[kind];
    const uint8_t *text = data + 1;
    size_t len = size - 1;
    fuzz_check_text(t, text, len, kind < 5);
    if (kind == 6) {   /* the prepended space comes off again */
        size_t cap = len + 1, n = 0, bl = 0;
        uint32_t *ids = malloc(cap * sizeof *ids);
        char *back = malloc(len + 2);
        FUZZ_CHECK(wgml_tokenizer_encode_ordinary(t, (const char *)text, len, ids, cap, &n) == WGML_OK);
        FUZZ_CHECK(wgml_tokenizer_decode(t, ids, n, back, len + 2, &bl) == WGML_OK && bl == len && memcmp(back, text, len) == 0);
        free(ids);
        free(back);
    }
    return 0;
}
