/* The wgml_model_config of a reference model's shape (tests/ref/ref_model.h), shared by
   the tests that build a model on the GPU and run the reference beside it. */
#ifndef WGML_TEST_MODEL_CONFIG_H
#define WGML_TEST_MODEL_CONFIG_H

#include "ref_model.h"
#include "wgml.h"

#include <string.h>

/* The family whose files a model of shape s has: config.json's model_type. */
static inline const char *ref_family_name(const ref_model_shape *s)
{
    return s->gemma ? "gemma3_text" : s->conv_kernel ? "lfm2" : s->qk_norm ? "qwen3" : s->qkv_bias ? "qwen2"
           : s->window ? "mistral" : "llama";
}

/* Every field the shape sets; max_position_embeddings 64, no bos token. */
static inline wgml_model_config ref_config_of(const ref_model_shape *s)
{
    wgml_model_config c;
    memset(&c, 0, sizeof c);
    strcpy(c.model_type, ref_family_name(s));
    c.vocab_size = (uint32_t)s->vocab;
    c.hidden_size = (uint32_t)s->dim;
    c.intermediate_size = (uint32_t)s->ffn;
    c.num_hidden_layers = (uint32_t)s->layers;
    c.num_attention_heads = (uint32_t)s->heads;
    c.num_key_value_heads = (uint32_t)s->kv_heads;
    c.head_dim = (uint32_t)s->head_dim;
    c.max_position_embeddings = 64;
    c.rms_norm_eps = s->eps;
    c.rope_theta = s->rope_theta;
    c.tie_word_embeddings = s->tied;
    c.bos_token_id = -1;
    c.sliding_window = (uint32_t)s->window;
    c.qkv_bias = s->qkv_bias;
    c.qk_norm = s->qk_norm;
    c.conv_kernel = (uint32_t)s->conv_kernel;
    for (int l = 0; l < s->layers && s->conv_kernel; l++)
        if (s->conv[l]) c.conv_layers[l / 32] |= 1u << (l % 32);
    c.gemma = s->gemma;
    c.hidden_act = s->gelu ? WGML_HIDDEN_ACT_GELU_TANH : WGML_HIDDEN_ACT_SILU;
    for (int l = 0; l < s->layers && s->full; l++)
        if (s->full[l]) c.full_attention_layers[l / 32] |= 1u << (l % 32);
    c.rope_local_theta = s->rope_local_theta;
    c.query_pre_attn_scalar = s->attn_scale > 0 ? 1.0 / (s->attn_scale * s->attn_scale) : 0;
    return c;
}

#endif
