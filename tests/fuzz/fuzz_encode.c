/* libFuzzer target: texts through six built-in tokenizers (the first byte picks which, the
   rest is the text). encode, encode_ordinary and decode must give back exactly the text's
   bytes, never more ids than bytes, ids below the vocab size, and the same ids when the
   output buffer is too small (then WGML_ERROR_SHAPE with the count needed). */
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static wgml_tokenizer *tokenizers[6];
    if (size < 1) return 0;
    int kind = data[0] % 6;
    if (!tokenizers[kind]) tokenizers[kind] = builtin(kind);
    fuzz_check_text(tokenizers[kind], data + 1, size - 1, kind != 5);
    return 0;
}
