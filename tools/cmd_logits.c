/* wgml logits: runs a text through a checkpoint in one pass and writes the token ids and
   every position's logits, for comparing wgml with another implementation
   (bench/hf_compare.py does it against Hugging Face transformers, bench/torch_model.py
   against the same model in PyTorch). The text is encoded with the folder's
   tokenizer.json, or as bytes when there is none and the vocabulary is 256 (a checkpoint of
   wgml train without --tokenizer).

   Output (--out): a little-endian binary file: u32 n, u32 vocab, n u32 ids, then n * vocab
   f32 logits, row by row. */
#include "cli.h"
#include "commands.h"
#include "wgml.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct logits_opts { const char *model, *text, *out; } logits_opts;

static const cli_flag logits_flags[] = {
    { "--model", CLI_STRING, offsetof(logits_opts, model), "checkpoint folder (config.json, *.safetensors, tokenizer.json)" },
    { "--text", CLI_STRING, offsetof(logits_opts, text), "text to run (encoded with the folder's tokenizer.json, else as bytes for a 256-token model)" },
    { "--out", CLI_STRING, offsetof(logits_opts, out), "output file: u32 n, u32 vocab, n u32 ids, n x vocab f32 logits" },
};

int cmd_logits(int argc, char **argv)
{
    logits_opts o = { .model = "out", .text = "Hello", .out = "logits.bin" };
    int pr = cli_parse(argc, argv, logits_flags, sizeof logits_flags / sizeof logits_flags[0], &o, "wgml logits [options]",
                       "Writes the token ids and every position's logits of a text, for comparisons.");
    if (pr <= 0) return -pr;
    wgml_context *ctx = NULL;
    wgml_engine *eng = NULL;
    wgml_model *m = NULL;
    wgml_tokenizer *tok = NULL;
    wgml_kv_cache *cache = NULL;
    wgml_tensor *logits = NULL;
    uint32_t *ids = NULL;
    float *host = NULL;
    int rc = 1;
    char tpath[4200];
    size_t len = strlen(o.text), n = 0;
    if (wgml_context_create(NULL, &ctx) != WGML_OK || wgml_engine_create(ctx, &eng) != WGML_OK) {
        fprintf(stderr, "wgml logits: %s\n", wgml_last_error(ctx));
        goto done;
    }
    if (wgml_model_load(eng, o.model, &m) != WGML_OK) {
        fprintf(stderr, "wgml logits: %s\n", wgml_last_error(ctx));
        goto done;
    }
    /* tokenizer.json in the folder, else bytes for a 256-token model (as wgml generate) */
    struct stat st;
    cli_fmt_path(tpath, sizeof tpath, o.model, "tokenizer.json");
    wgml_status ts = stat(tpath, &st) != 0 && wgml_model_get_config(m)->vocab_size == 256 ? wgml_tokenizer_bytes(&tok)
                                                                                          : wgml_tokenizer_load(tpath, &tok);
    if (ts != WGML_OK) {
        fprintf(stderr, "wgml logits: %s\n", wgml_last_error(NULL));
        goto done;
    }
    ids = malloc(sizeof *ids * (2 * len + 2));
    if (!ids || wgml_tokenizer_encode(tok, o.text, len, ids, 2 * len + 2, &n) != WGML_OK || n == 0) {
        fprintf(stderr, "wgml logits: cannot encode the text: %s\n", wgml_last_error(NULL));
        goto done;
    }
    uint32_t vocab = wgml_model_get_config(m)->vocab_size;
    size_t shape[2] = { n, vocab };
    host = malloc(sizeof *host * n * vocab);
    if (!host || wgml_kv_cache_create(m, (uint32_t)n, &cache) != WGML_OK ||
        wgml_tensor_create(ctx, WGML_F32, 2, shape, &logits) != WGML_OK ||
        wgml_model_decode(cache, ids, (uint32_t)n, logits) != WGML_OK ||
        wgml_tensor_read(logits, 0, host, sizeof *host * n * vocab) != WGML_OK) {
        fprintf(stderr, "wgml logits: %s\n", wgml_last_error(ctx));
        goto done;
    }
    FILE *f = fopen(o.out, "wb");
    uint32_t hdr[2] = { (uint32_t)n, vocab };
    if (!f || fwrite(hdr, 4, 2, f) != 2 || fwrite(ids, 4, n, f) != n || fwrite(host, 4, n * vocab, f) != n * vocab) {
        fprintf(stderr, "wgml logits: cannot write %s\n", o.out);
        if (f) fclose(f);
        goto done;
    }
    fclose(f);
    printf("wgml logits: %zu tokens x %u logits written to %s\n", n, vocab, o.out);
    rc = 0;
done:
    free(ids);
    free(host);
    wgml_tensor_release(logits);
    wgml_kv_cache_destroy(cache);
    wgml_tokenizer_free(tok);
    wgml_model_destroy(m);
    wgml_engine_destroy(eng);
    wgml_context_destroy(ctx);
    return rc;
}
