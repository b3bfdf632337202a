/* Shared by fuzz_tokenizer.c and fuzz_encode.c: the checks on encoding one text. */
#ifndef WGML_FUZZ_TOKENIZER_H
#define WGML_FUZZ_TOKENIZER_H

#include "fuzz_check.h"

#include <stdbool.h>
#include <stdint.h>

static inline void fuzz_check_text(const wgml_tokenizer *t, const uint8_t *text, size_t len, bool roundtrip)
{
    /* without a round trip (prefix spaces) a piece may gain one id per byte */
    size_t cap = 2 * len + 2;
    uint32_t *ids = malloc(cap * sizeof *ids);
    for (int ordinary = 0; ordinary < 2; ordinary++) {
        size_t n = 0, bl = 0, bl2 = 0;
        wgml_status s = ordinary ? wgml_tokenizer_encode_ordinary(t, (const char *)text, len, ids, cap, &n)
                                 : wgml_tokenizer_encode(t, (const char *)text, len, ids, cap, &n);
        FUZZ_CHECK(s == WGML_OK);
        FUZZ_CHECK(roundtrip ? n <= len : n < cap);
        for (size_t i = 0; i < n; i++) FUZZ_CHECK(ids[i] < wgml_tokenizer_vocab_size(t));
        if (n > 0) {   /* too small a buffer: the count needed, the ids that fit */
            uint32_t *few = malloc(n * sizeof *few);
            size_t m = 0;
            s = ordinary ? wgml_tokenizer_encode_ordinary(t, (const char *)text, len, few, n - 1, &m)
                         : wgml_tokenizer_encode(t, (const char *)text, len, few, n - 1, &m);
            FUZZ_CHECK(s == WGML_ERROR_SHAPE && m == n && (n == 1 || memcmp(few, ids, (n - 1) * sizeof *few) == 0));
            free(few);
        }
        s = wgml_tokenizer_decode(t, ids, n, NULL, 0, &bl);   /* the size first */
        FUZZ_CHECK(s == (bl ? WGML_ERROR_SHAPE : WGML_OK));
        char *back = malloc(bl + 1);
        FUZZ_CHECK(wgml_tokenizer_decode(t, ids, n, back, bl + 1, &bl2) == WGML_OK && bl2 == bl && back[bl] == 0);
        if (roundtrip) FUZZ_CHECK(bl == len && memcmp(back, text, len) == 0);
        free(back);
    }
    free(ids);
}


#endif
