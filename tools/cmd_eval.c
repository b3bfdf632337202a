/* wgml eval: how well a model (with a LoRA adapter, unmerged) predicts a text or JSONL
   file: the mean cross-entropy over the learned tokens (as wgml finetune counts them: all
   of a text, the completions, the assistant's turns), the perplexity, bits per token and
   bits per byte (of the learned tokens' text, which compares models with different
   tokenizers).

   A text file is read in windows of --context tokens one after another (each token
   predicted once, from the tokens before it in its window); a JSONL file one example per
   sequence, cut to --context. A trainer made with eval_only runs them: activations for
   one micro-batch, no gradients or optimizer state. */
#include "cli.h"
#include "commands.h"
#include "dist.h"
#include "model_files.h"
#include "wgml.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct eval_opts {
    const char *model, *adapter, *data, *chat_template, *dtype, *quantize, *precision;
    int context, batch, packing, loss_on_prompt;
} eval_opts;

static const cli_flag eval_flags[] = {
    { "--model", CLI_STRING, offsetof(eval_opts, model), "model folder (config.json, safetensors, tokenizer.json)" },
    { "--adapter", CLI_STRING, offsetof(eval_opts, adapter), "a LoRA adapter folder (PEFT's files), run unmerged" },
    { "--dtype", CLI_STRING, offsetof(eval_opts, dtype), MODEL_DTYPE_HELP },
    { "--quantize", CLI_STRING, offsetof(eval_opts, quantize), MODEL_QUANTIZE_HELP },
    { "--precision", CLI_STRING, offsetof(eval_opts, precision), INFER_PRECISION_HELP },
    { "--data", CLI_STRING, offsetof(eval_opts, data), "a text file, or .jsonl of {\"text\"}, {\"prompt\", \"completion\"} or "
      "{\"messages\"} records" },
    { "--context", CLI_INT, offsetof(eval_opts, context), "tokens per sequence (0: the model's max_position_embeddings, at most "
      "1024)", 0, 1 << 24 },
    { "--batch", CLI_INT, offsetof(eval_opts, batch), "sequences per pass", 1, 1 << 16 },
    { "--chat-template", CLI_STRING, offsetof(eval_opts, chat_template), "chat format of messages records (default: "
      "recognised from the model's template)" },
    { "--loss-on-prompt", CLI_BOOL, offsetof(eval_opts, loss_on_prompt), "count prompts and every turn too" },
    { "--packing", CLI_INT, offsetof(eval_opts, packing), "1: windows of the token stream; 0: one example per sequence; -1: 1 "
      "for a text file, 0 for JSONL", -1, 1 },
};

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* The bytes of each token's text, for bits per byte. */
static uint32_t *token_bytes(const wgml_tokenizer *tok, uint32_t vocab)
{
    uint32_t *n = calloc(vocab, sizeof *n);
    char buf[1024];
    for (uint32_t id = 0; n && id < vocab; id++) {
        size_t len = 0;
        if (wgml_tokenizer_decode_continuation(tok, &id, 1, buf, sizeof buf, &len) == WGML_OK) n[id] = (uint32_t)len;
    }
    return n;
}

int cmd_eval(int argc, char **argv)
{
    const char *who = "wgml eval";
    eval_opts o = { .batch = 4, .packing = -1, .dtype = "auto", .precision = "f32" };
    int pr = cli_parse(argc, argv, eval_flags, sizeof eval_flags / sizeof eval_flags[0], &o,
                       "wgml eval --model DIR --data FILE [options]",
                       "The loss, perplexity and bits per byte of a model (and adapter) on a file.");
    if (pr <= 0) return -pr;
    if (!o.model || !o.data) {
        fprintf(stderr, "%s: --model and --data are required (see --help)\n", who);
        return 2;
    }
    int rc = 1;
    wgml_context *ctx = NULL;
    wgml_engine *eng = NULL;
    wgml_model *m = NULL;
    wgml_tokenizer *tok = NULL;
    wgml_tokenizer_config tcfg = { 0 };
    wgml_dataset *data = NULL;
    wgml_batcher *b = NULL;
    wgml_trainer *tr = NULL;
    wgml_tensor *loss = NULL;
    uint32_t *ids = NULL, *tg = NULL, *bytes = NULL;
    wgml_weights weights;
    if (model_weights(who, o.dtype, o.quantize, &weights) != 0 || cli_check_precision(who, o.precision, -1) != 0) return 2;
    if (model_device(who, o.precision, &ctx, &eng) != 0) return 1;
    wgml_context_stats st0, st1, st2;
    wgml_context_stats_get(ctx, &st0);
    if (model_open(who, ctx, eng, o.model, weights, o.adapter, false, &m, NULL) != 0) goto done;
    wgml_context_stats_get(ctx, &st1);
    const wgml_model_config *cfg = wgml_model_get_config(m);
    if (model_tokenizer(who, o.model, cfg, &tok) != 0) goto done;
    wgml_dataset_options dopt;
    if (model_data_options(who, o.model, cfg, tok, o.chat_template, o.loss_on_prompt, &tcfg, &dopt) != 0) goto done;
    if (wgml_dataset_load(o.data, tok, &dopt, &data) != WGML_OK) {
        fprintf(stderr, "%s: %s\n", who, wgml_last_error(NULL));
        goto done;
    }
    uint32_t T = o.context ? (uint32_t)o.context : (cfg->max_position_embeddings < 1024 ? cfg->max_position_embeddings : 1024);
    if (T > cfg->max_position_embeddings) {
        fprintf(stderr, "%s: --context %u is beyond the model's %u positions (max_position_embeddings)\n", who, T,
                cfg->max_position_embeddings);
        goto done;
    }
    bool packed = o.packing >= 0 ? o.packing : !ends_with(o.data, ".jsonl");
    wgml_batcher_options bo = { .batch = (uint32_t)o.batch, .seq_len = T, .packed = packed, .sequential = true };
    wgml_batcher_stats bst;
    if (wgml_batcher_create(data, &bo, &b) != WGML_OK) {
        fprintf(stderr, "%s: %s: %s\n", who, o.data, wgml_last_error(NULL));
        goto done;
    }
    wgml_batcher_get_stats(b, &bst);
    size_t N = (size_t)o.batch * T;
    ids = malloc(N * sizeof *ids);
    tg = malloc(N * sizeof *tg);
    bytes = token_bytes(tok, cfg->vocab_size);
    if (!ids || !tg || !bytes) {
        fprintf(stderr, "%s: out of host memory\n", who);
        goto done;
    }
    wgml_status s = wgml_trainer_create(m, &(wgml_trainer_desc){ .batch = (uint32_t)o.batch, .seq_len = T, .eval_only = true },
                                        &tr);
    if (s == WGML_OK) s = wgml_tensor_create(ctx, WGML_F32, 1, (size_t[]){ 1 }, &loss);
    if (s != WGML_OK) {
        fprintf(stderr, "%s: %s\n", who, wgml_last_error(ctx));
        goto done;
    }
    wgml_context_stats_get(ctx, &st2);
    wgml_adapter_info info;
    wgml_context_info(ctx, &info);
    printf("model:    %s%s%s: %llu parameters, on %s (%s)\n", o.model, o.adapter ? " with the adapter " : "",
           o.adapter ? o.adapter : "", (unsigned long long)wgml_model_numel(m), info.name, info.backend);
    char wname[128];
    printf("memory:   %.2f MiB of weights%s (%s) and %.2f MiB of activations on the GPU\n",
           (double)(st1.device_bytes - st0.device_bytes) / 1048576.0, o.adapter ? " and adapter" : "",
           model_weights_name(m, wname, sizeof wname), (double)(st2.device_bytes - st1.device_bytes) / 1048576.0);
    printf("data:     %s: %zu example%s, %zu tokens; %zu predictions counted, %s of %u tokens%s\n", o.data,
           wgml_dataset_examples(data), wgml_dataset_examples(data) == 1 ? "" : "s", wgml_dataset_tokens(data), bst.learned,
           packed ? "windows" : "one example per sequence", T,
           bst.cut ? cli_fmt(" (%.0f examples cut to fit)", (double)bst.cut) : "");
    fflush(stdout);
    /* one pass over the part; progress on stderr at most every second */
    double sum = 0, t0 = cli_now(), shown = t0;
    size_t counted = 0, nbytes = 0;
    bool tty = isatty(fileno(stderr));
    for (;;) {
        wgml_batcher_state st;
        wgml_batcher_get_state(b, &st);
        if (st.epoch) break;
        wgml_batcher_next(b, ids, tg);
        size_t c = 0;
        for (size_t i = 0; i < N; i++)
            if (tg[i] != UINT32_MAX) {
                c++;
                nbytes += bytes[tg[i]];
            }
        if (!c) continue;
        float l = 0;
        s = wgml_trainer_eval(tr, ids, tg, loss);
        if (s == WGML_OK) s = wgml_tensor_read(loss, 0, &l, sizeof l);
        if (s != WGML_OK) {
            fprintf(stderr, "%s: %s\n", who, wgml_last_error(ctx));
            goto done;
        }
        sum += (double)l * (double)c;   /* the batch's mean over its counted targets */
        counted += c;
        double now = cli_now();
        if (tty && now - shown >= 1) {
            shown = now;
            fprintf(stderr, "\r%zu of %zu predictions (%.0f%%), %.0f per second, mean loss so far %.4f   ", counted, bst.learned,
                    100.0 * counted / bst.learned, counted / (now - t0), sum / counted);
        }
    }
    if (tty && shown > t0) fprintf(stderr, "\r%*s\r", 80, "");
    double mean = sum / counted;
    if (!isfinite(mean)) {
        fprintf(stderr, "%s: the loss is %s: the model's outputs are not finite numbers\n", who, isnan(mean) ? "NaN" : "infinite");
        goto done;
    }
    double bits = sum / log(2.0);
    printf("eval:     loss %.4f nats/token, perplexity %.3f, %.4f bits/token, %.4f bits/byte (%zu tokens, %zu bytes) in %s\n",
           mean, exp(mean), mean / log(2.0), nbytes ? bits / (double)nbytes : NAN, counted, nbytes,
           cli_duration(cli_now() - t0));
    rc = 0;
done:
    free(ids);
    free(tg);
    free(bytes);
    wgml_tensor_release(loss);
    wgml_trainer_destroy(tr);
    wgml_batcher_free(b);
    wgml_dataset_free(data);
    wgml_tokenizer_config_clear(&tcfg);
    wgml_tokenizer_free(tok);
    wgml_model_destroy(m);
    wgml_engine_destroy(eng);
    wgml_context_destroy(ctx);
    return rc;
}
