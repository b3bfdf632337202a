/* libFuzzer target: tokenizer.json text. Loading either fails with a well-formed message or
   gives a tokenizer that encodes and decodes a few texts within its documented bounds. */
#include "fuzz_check.h"
#include "fuzz_tokenizer.h"

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    wgml_tokenizer *t = NULL;
    wgml_status s = wgml_tokenizer_parse((const char *)data, size, "fuzz", &t);
    if (s != WGML_OK) {
        FUZZ_CHECK(t == NULL);
        fuzz_check_failure(s, "fuzz");
        return 0;
    }
    static const char *const texts[] = { "Hello world, it's 2024!\n\n  <|endoftext|> caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd",
                                         "", " ", "\xff\xfe\xc3", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        fuzz_check_text(t, (const uint8_t *)texts[i], strlen(texts[i]), false);
    FUZZ_CHECK(wgml_tokenizer_token_id(t, "<|endoftext|>") < (int64_t)wgml_tokenizer_vocab_size(t));
    wgml_tokenizer_free(t);
    return 0;
}
