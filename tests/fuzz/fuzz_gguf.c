/* libFuzzer target: a GGUF file in memory. Whatever the bytes, opening either fails with a
   well-formed message or yields metadata and tensors whose every byte lies inside the
   input, each findable by its name. */
#include "fuzz_check.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    wgml_gguf *g = NULL;
    wgml_status s = wgml_gguf_open_memory(data, size, "fuzz", &g);
    if (s != WGML_OK) {
        FUZZ_CHECK(g == NULL);
        if (s == WGML_ERROR_UNSUPPORTED) s = WGML_ERROR_FORMAT;   /* an unknown version or type: named like a format error */
        fuzz_check_failure(s, "fuzz");
        return 0;
    }
    volatile uint8_t sink = 0;
    const uint8_t *end = data + size;
    for (size_t i = 0; i < wgml_gguf_kv_count(g); i++) {
        const char *key;
        wgml_gguf_value v;
        FUZZ_CHECK(wgml_gguf_kv(g, i, &key, &v) == WGML_OK);
        FUZZ_CHECK(wgml_gguf_kv_find(g, key) == (int64_t)i);
        if (v.type == WGML_GGUF_STRING) FUZZ_CHECK((const uint8_t *)v.str >= data && v.len <= (uint64_t)(end - (const uint8_t *)v.str));
        for (uint64_t j = 0; v.type == WGML_GGUF_ARRAY && j < v.count && j < 1000; j++) {
            wgml_gguf_value item;
            FUZZ_CHECK(wgml_gguf_array_item(g, i, j, &item) == WGML_OK && item.type == v.elem_type);
            if (item.type == WGML_GGUF_STRING) {
                FUZZ_CHECK((const uint8_t *)item.str >= data && item.len <= (uint64_t)(end - (const uint8_t *)item.str));
                if (item.len) sink ^= (uint8_t)(item.str[0] ^ item.str[item.len - 1]);
            }
        }
    }
    uint64_t total = 0;
    for (size_t i = 0; i < wgml_gguf_tensor_count(g); i++) {
        wgml_gguf_tensor t;
        FUZZ_CHECK(wgml_gguf_tensor_info(g, i, &t) == WGML_OK);
        FUZZ_CHECK(t.ndim >= 1 && t.ndim <= 4 && t.name != NULL && wgml_gguf_tensor_find(g, t.name) == (int64_t)i);
        uint32_t el, by;
        FUZZ_CHECK(wgml_ggml_type_block(t.type, &el, &by) && t.shape[0] % el == 0 && t.nbytes == t.numel / el * by);
        FUZZ_CHECK(t.offset % wgml_gguf_alignment(g) == 0 && t.offset <= size && t.nbytes <= size - t.offset);
        const uint8_t *p = wgml_gguf_tensor_data(g, i);
        FUZZ_CHECK(p == data + t.offset);
        if (t.nbytes) sink ^= p[0] ^ p[t.nbytes - 1];   /* in bounds, or ASan says so */
        total += t.nbytes;
    }
    FUZZ_CHECK(total <= size);   /* no overlap */
    FUZZ_CHECK(wgml_gguf_tensor_data(g, wgml_gguf_tensor_count(g)) == NULL);
    (void)sink;
    /* the tokenizer built from the metadata (byte-level or SentencePiece): a tokenizer or an
       error, never a crash; what it builds encodes */
    wgml_tokenizer *tok = NULL;
    if (wgml_tokenizer_from_gguf(g, "fuzz", &tok) == WGML_OK) {
        uint32_t ids[64];
        size_t n = 0;
        const char *text = "Hello, world 12 \xC3\xA9";
        wgml_status es = wgml_tokenizer_encode(tok, text, strlen(text), ids, 64, &n);
        FUZZ_CHECK(es == WGML_OK || es == WGML_ERROR_SHAPE);
        for (size_t i = 0; es == WGML_OK && i < n; i++) FUZZ_CHECK(ids[i] < wgml_tokenizer_vocab_size(tok));
        wgml_tokenizer_free(tok);
    } else
        FUZZ_CHECK(tok == NULL);
    wgml_gguf_close(g);
    return 0;
}
