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
#include "dist.h"
#include "model_files.h"
#include "wgml.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct logits_opts { const char *model, *adapter, *text, *out, *dtype, *quantize, *precision; } logits_opts;

static const cli_flag logits_flags[] = {
    { "--model", CLI_STRING, offsetof(logits_opts, model), "checkpoint folder (config.json, *.safetensors, tokenizer.json)" },
    { "--adapter", CLI_STRING, offsetof(logits_opts, adapter), "a LoRA adapter folder (PEFT's files), run unmerged" },
    { "--dtype", CLI_STRING, offsetof(logits_opts, dtype), MODEL_DTYPE_HELP },
    { "--quantize", CLI_STRING, offsetof(logits_opts, quantize), MODEL_QUANTIZE_HELP },
    { "--precision", CLI_STRING, offsetof(logits_opts, precision), INFER_PRECISION_HELP },
    { "--text", CLI_STRING, offsetof(logits_opts, text), "text to run (encoded with the folder's tokenizer.json and the special "
      "tokens its template puts around a text, as Hugging Face's encode; else as bytes for a 256-token model)" },
    { "--out", CLI_STRING, offsetof(logits_opts, out), "output file: u32 n, u32 vocab, n u32 ids, n x vocab f32 logits" },
};

int cmd_logits(int argc, char **argv)
{
    logits_opts o = { .model = "out", .text = "Hello", .out = "logits.bin", .dtype = "auto", .precision = "f32" };
    int pr = cli_parse(argc, argv, logits_flags, sizeof logits_flags / sizeof logits_flags[0], &o, "wgml logits [options]",
                       "Writes the token ids and every position's logits of a text, for comparisons.");
    if (pr <= 0) return -pr;
    if (!o.text[0]) {
        fprintf(stderr, "wgml logits: --text is empty: there is nothing to run\n");
        return 2;
    }
    wgml_context *ctx = NULL;
    wgml_engine *eng = NULL;
    wgml_model *m = NULL;
    wgml_lora *lora = NULL;
    wgml_tokenizer *tok = NULL;
    wgml_kv_cache *cache = NULL;
    wgml_tensor *logits = NULL;
    uint32_t *ids = NULL;
    float *host = NULL;
    int rc = 1;
    size_t len = strlen(o.text), n = 0;
    wgml_weights weights;
    if (model_weights("wgml logits", o.dtype, o.quantize, &weights) != 0 ||
        cli_check_precision("wgml logits", o.precision, -1) != 0)
        return 2;
    if (model_device("wgml logits", o.precision, &ctx, &eng) != 0) goto done;
    if (model_open("wgml logits", ctx, eng, o.model, weights, o.adapter, false, &m, &lora) != 0) goto done;
    if (model_tokenizer("wgml logits", o.model, wgml_model_get_config(m), &tok) != 0) goto done;
    /* as Hugging Face's encode(text): the tokenizer's template around the text */
    const uint32_t *prefix, *suffix;
    size_t npre, nsuf;
    wgml_tokenizer_specials(tok, &prefix, &npre, &suffix, &nsuf);
    ids = malloc(sizeof *ids * (2 * len + 2 + npre + nsuf));
    if (!ids) {
        fprintf(stderr, "wgml logits: out of host memory\n");
        goto done;
    }
    memcpy(ids, prefix, npre * sizeof *ids);
    if (wgml_tokenizer_encode(tok, o.text, len, ids + npre, 2 * len + 2, &n) != WGML_OK) {
        fprintf(stderr, "wgml logits: cannot encode the text: %s\n", wgml_last_error(NULL));
        goto done;
    }
    memcpy(ids + npre + n, suffix, nsuf * sizeof *ids);
    n += npre + nsuf;
    if (n == 0) {
        fprintf(stderr, "wgml logits: the text encodes to no tokens\n");
        goto done;
    }
    if (n > wgml_model_get_config(m)->max_position_embeddings) {
        fprintf(stderr, "wgml logits: the text is %zu tokens, more than the model's %u positions (max_position_embeddings)\n",
                n, wgml_model_get_config(m)->max_position_embeddings);
        goto done;
    }
    uint32_t vocab = wgml_model_get_config(m)->vocab_size;
    size_t shape[2] = { n, vocab };
    host = malloc(sizeof *host * n * vocab);
    if (!host) {
        fprintf(stderr, "wgml logits: out of host memory for %zu x %u logits\n", n, vocab);
        goto done;
    }
    if (wgml_kv_cache_create(m, (uint32_t)n, &cache) != WGML_OK ||
        wgml_tensor_create(ctx, WGML_F32, 2, shape, &logits) != WGML_OK ||
        wgml_model_decode(cache, ids, (uint32_t)n, logits) != WGML_OK ||
        wgml_tensor_read(logits, 0, host, sizeof *host * n * vocab) != WGML_OK) {
        fprintf(stderr, "wgml logits: %s\n", wgml_last_error(ctx));
        goto done;
    }
    char tmp[4200];
    FILE *f = cli_atomic_open("wgml logits", o.out, tmp, sizeof tmp);
    if (!f) goto done;
    uint32_t hdr[2] = { (uint32_t)n, vocab };
    fwrite(hdr, 4, 2, f);
    fwrite(ids, 4, n, f);
    fwrite(host, 4, n * vocab, f);
    if (cli_atomic_commit("wgml logits", f, tmp, o.out) != 0) goto done;
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
