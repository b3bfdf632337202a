/* Writes a GGUF file of a wgml model folder for the CLI tests: the configuration as
   llama.* metadata, matrices quantised to Q8_0 (d = max |x| / 127 per block of 32, codes
   rounded to the nearest), attn_q / attn_k rows permuted as llama.cpp's converter does,
   the rest F32, and a byte-level vocabulary of the 256 bytes (a model of wgml train).
       make_gguf MODEL_FOLDER OUT.gguf */
#include "gguf_writer.h"
#include "wgml.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint16_t to_half(float f)   /* normal values of moderate size only: the scales */
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t e = (u >> 23) & 255, m = u & 0x7FFFFF;
    if (e < 113) return 0;
    uint32_t h = ((e - 112) << 10) | (m >> 13), rem = m & 0x1FFF;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return (uint16_t)((u >> 16 & 0x8000) | h);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: make_gguf MODEL_FOLDER OUT.gguf\n");
        return 2;
    }
    wgml_context *ctx = NULL;
    wgml_engine *e = NULL;
    wgml_model *m = NULL;
    if (wgml_context_create(NULL, &ctx) || wgml_engine_create(ctx, &e) || wgml_model_load(e, argv[1], &m)) {
        fprintf(stderr, "make_gguf: %s\n", wgml_last_error(ctx));
        return 1;
    }
    const wgml_model_config *c = wgml_model_get_config(m);
    uint32_t H = c->num_attention_heads, Hk = c->num_key_value_heads ? c->num_key_value_heads : H;
    gguf_writer *w = gw_new();
    gw_str(w, "general.architecture", "llama");
    gw_u32(w, "llama.embedding_length", c->hidden_size);
    gw_u32(w, "llama.feed_forward_length", c->intermediate_size);
    gw_u32(w, "llama.block_count", c->num_hidden_layers);
    gw_u32(w, "llama.attention.head_count", H);
    gw_u32(w, "llama.attention.head_count_kv", Hk);
    gw_u32(w, "llama.context_length", c->max_position_embeddings);
    gw_f32(w, "llama.rope.freq_base", (float)c->rope_theta);
    gw_f32(w, "llama.attention.layer_norm_rms_epsilon", (float)c->rms_norm_eps);
    gw_str(w, "tokenizer.ggml.model", "gpt2");
    const char *tokens[256];
    char sym[256][4];
    for (int b = 0; b < 256; b++) {   /* GPT-2's bytes_to_unicode */
        int cp = b;
        if (!((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF))) {
            int n = 0;
            for (int x = 0; x < b; x++) n += !((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF));
            cp = 256 + n;
        }
        if (cp < 0x80) sym[b][0] = (char)cp, sym[b][1] = 0;
        else sym[b][0] = (char)(0xC0 | cp >> 6), sym[b][1] = (char)(0x80 | (cp & 63)), sym[b][2] = 0;
        tokens[b] = sym[b];
    }
    gw_str_array(w, "tokenizer.ggml.tokens", tokens, 256);
    gw_str_array(w, "tokenizer.ggml.merges", NULL, 0);
    int rc = 0;
    for (size_t i = 0; i < wgml_model_param_count(m) && !rc; i++) {
        const char *hf;
        wgml_tensor *t = wgml_model_param(m, i, &hf);
        size_t rows = wgml_tensor_dim(t, 0), cols = wgml_tensor_ndim(t) == 2 ? wgml_tensor_dim(t, 1) : 1, n = rows * cols;
        float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
        wgml_tensor_read(t, 0, x, n * sizeof *x);
        bool q = strstr(hf, "q_proj") != NULL, k = strstr(hf, "k_proj") != NULL;
        memcpy(y, x, n * sizeof *x);
        if (q || k) {   /* file row 2 j + t of a head <- HF row t * hd / 2 + j */
            size_t heads = q ? H : Hk, hd = rows / heads;
            for (size_t h = 0; h < heads; h++)
                for (size_t j = 0; j < hd / 2; j++)
                    for (size_t s = 0; s < 2; s++)
                        memcpy(y + (h * hd + 2 * j + s) * cols, x + (h * hd + s * hd / 2 + j) * cols, cols * sizeof *x);
        }
        char name[96];
        gw_tensor_name(hf, name, sizeof name);
        uint64_t shape[2] = { cols, rows };
        if (cols > 1 && cols % 32 == 0) {
            uint8_t *b = malloc(n / 32 * 34);
            for (size_t blk = 0; blk < n / 32; blk++) {
                float amax = 0;
                for (int v = 0; v < 32; v++) amax = fmaxf(amax, fabsf(y[blk * 32 + v]));
                uint16_t hd16 = to_half(amax / 127);
                float d = amax / 127;
                b[blk * 34] = (uint8_t)hd16, b[blk * 34 + 1] = (uint8_t)(hd16 >> 8);
                for (int v = 0; v < 32; v++) b[blk * 34 + 2 + v] = (uint8_t)(int8_t)(d > 0 ? lrintf(y[blk * 32 + v] / d) : 0);
            }
            gw_tensor(w, name, WGML_GGML_Q8_0, 2, shape, b, n / 32 * 34);
            free(b);
        } else {
            gw_tensor(w, name, WGML_GGML_F32, cols > 1 ? 2 : 1, cols > 1 ? shape : shape + 1, y, n * sizeof *y);
        }
        free(x);
        free(y);
    }
    if (!gw_write(w, argv[2], 32)) {
        fprintf(stderr, "make_gguf: cannot write %s\n", argv[2]);
        rc = 1;
    }
    gw_free(w);
    wgml_model_destroy(m);
    wgml_engine_destroy(e);
    wgml_context_destroy(ctx);
    return rc;
}
