/* libFuzzer target: config.json text. A parsed config satisfies every documented range. */
#include "fuzz_check.h"

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    wgml_model_config c;
    wgml_status s = wgml_model_config_parse((const char *)data, size, "fuzz", &c);
    if (s != WGML_OK) {
        fuzz_check_failure(s, "fuzz");
        FUZZ_CHECK(c.vocab_size == 0);
        return 0;
    }
    FUZZ_CHECK(c.vocab_size >= 1 && c.vocab_size <= (1u << 24));
    FUZZ_CHECK(c.hidden_size >= 1 && c.intermediate_size >= 1 && c.num_hidden_layers >= 1);
    FUZZ_CHECK(c.num_attention_heads >= 1 && c.num_key_value_heads >= 1);
    FUZZ_CHECK(c.num_attention_heads % c.num_key_value_heads == 0);
    FUZZ_CHECK(c.head_dim >= 2 && c.head_dim <= 1024 && c.head_dim % 2 == 0);
    FUZZ_CHECK(c.rms_norm_eps > 0 && c.rms_norm_eps <= 0.5 && c.rope_theta > 0);
    FUZZ_CHECK(c.max_position_embeddings >= 1);
    FUZZ_CHECK(c.bos_token_id >= -1 && c.bos_token_id < (int64_t)c.vocab_size);
    FUZZ_CHECK(c.num_eos_token_ids <= WGML_MODEL_CONFIG_MAX_EOS);
    for (uint32_t i = 0; i < c.num_eos_token_ids; i++) FUZZ_CHECK(c.eos_token_ids[i] < c.vocab_size);
    FUZZ_CHECK(memchr(c.model_type, 0, sizeof c.model_type) && memchr(c.torch_dtype, 0, sizeof c.torch_dtype));
    if (c.rope_scaling.type == WGML_ROPE_SCALING_LLAMA3)
        FUZZ_CHECK(c.rope_scaling.factor >= 1 && c.rope_scaling.high_freq_factor > c.rope_scaling.low_freq_factor &&
                   c.rope_scaling.original_max_position_embeddings >= 1);
    if (c.quantization.bits)
        FUZZ_CHECK(c.quantization.bits != 7 && c.quantization.bits <= 8 &&
                   (c.quantization.group_size & (c.quantization.group_size - 1)) == 0);
    return 0;
}
