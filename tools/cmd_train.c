/* wgml train: trains a Llama-style language model from scratch on a text file, on whatever
   adapter the machine has, and writes a checkpoint (Hugging Face layout: config.json +
   model.safetensors) and a loss curve (loss.svg, loss.csv).

   Tokens are bytes (vocabulary 256) unless --tokenizer names a tokenizer.json, so any file
   works and nothing is downloaded; the default file is the GPL-3 text every Debian machine
   carries. The last 10% of the file
   is held out for the validation loss. The defaults are sized to finish in about two
   minutes on a 2-core machine through lavapipe; bigger flags use a big GPU. */
#include "commands.h"
#include "cli.h"
#include "plot.h"
#include "wgml.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct train_opts {
    int dim, layers, heads, kv_heads, ffn, context, batch, steps, warmup, accum, eval_every, tied, keep_scores;
    double lr, min_lr_frac, clip, weight_decay, rope_theta;
    uint64_t seed;
    const char *data, *out, *tokenizer;
} train_opts;

static const train_opts defaults = {
    .dim = 96, .layers = 3, .heads = 4, .kv_heads = 2, .ffn = 256, .context = 64, .batch = 8, .steps = 250,
    .warmup = 30, .accum = 1, .eval_every = 50, .tied = 1, .keep_scores = -1,
    .lr = 3e-3, .min_lr_frac = 0.1, .clip = 1.0, .weight_decay = 0.1, .rope_theta = 10000,
    .seed = 1337, .data = "/usr/share/common-licenses/GPL-3", .out = "out",
};

static const cli_flag train_flags[] = {
    { "--dim", CLI_INT, offsetof(train_opts, dim), "model width (hidden size)" },
    { "--layers", CLI_INT, offsetof(train_opts, layers), "transformer blocks" },
    { "--heads", CLI_INT, offsetof(train_opts, heads), "attention heads (head_dim = dim / heads, even, <= 128)" },
    { "--kv-heads", CLI_INT, offsetof(train_opts, kv_heads), "key/value heads (grouped-query attention; divides heads)" },
    { "--ffn", CLI_INT, offsetof(train_opts, ffn), "SwiGLU hidden size" },
    { "--context", CLI_INT, offsetof(train_opts, context), "tokens per training sequence" },
    { "--batch", CLI_INT, offsetof(train_opts, batch), "sequences per micro-batch" },
    { "--accum", CLI_INT, offsetof(train_opts, accum), "micro-batches per optimizer step (gradient accumulation)" },
    { "--steps", CLI_INT, offsetof(train_opts, steps), "optimizer steps" },
    { "--lr", CLI_DOUBLE, offsetof(train_opts, lr), "peak learning rate (AdamW)" },
    { "--min-lr", CLI_DOUBLE, offsetof(train_opts, min_lr_frac), "final learning rate as a fraction of --lr (cosine decay)" },
    { "--warmup", CLI_INT, offsetof(train_opts, warmup), "linear warm-up steps" },
    { "--clip", CLI_DOUBLE, offsetof(train_opts, clip), "global gradient-norm clip (<= 0: none)" },
    { "--weight-decay", CLI_DOUBLE, offsetof(train_opts, weight_decay), "AdamW weight decay (matrices and embeddings)" },
    { "--rope-theta", CLI_DOUBLE, offsetof(train_opts, rope_theta), "RoPE base" },
    { "--tied", CLI_INT, offsetof(train_opts, tied), "1: output head shares the embedding; 0: its own matrix" },
    { "--keep-scores", CLI_INT, offsetof(train_opts, keep_scores),
      "1: keep attention's scores for the backward (faster; batch*heads*(context/64)^2*16 KiB per layer), 0: recompute "
      "them; default 1 on a GPU, 0 on a CPU adapter" },
    { "--seed", CLI_U64, offsetof(train_opts, seed), "seed of the initial weights and of the batch order" },
    { "--eval-every", CLI_INT, offsetof(train_opts, eval_every), "steps between validation losses (0: only at the end)" },
    { "--data", CLI_STRING, offsetof(train_opts, data), "UTF-8 text file to train on (bytes are the tokens)" },
    { "--tokenizer", CLI_STRING, offsetof(train_opts, tokenizer), "tokenizer.json (byte-level BPE) instead of byte tokens; copied to --out" },
    { "--out", CLI_STRING, offsetof(train_opts, out), "output folder: config.json, model.safetensors, loss.svg, loss.csv" },
};
#define NFLAGS (sizeof train_flags / sizeof train_flags[0])

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* warm-up from 0 to lr, then cosine decay to min_lr_frac * lr at the last step */
static double lr_at(const train_opts *o, int step)
{
    if (step < o->warmup) return o->lr * (step + 1) / o->warmup;
    double span = o->steps - o->warmup;
    double p = span > 1 ? (step - o->warmup) / (span - 1) : 1;
    double min = o->lr * o->min_lr_frac;
    return min + 0.5 * (o->lr - min) * (1 + cos(3.14159265358979323846 * p));
}

/* The whole validation split in windows of context tokens; the last window's missing
   targets are ignored (UINT32_MAX), so every validation token counts exactly once. */
static int evaluate(wgml_trainer *t, wgml_tensor *loss, const uint32_t *val, size_t nval, int B, int T, double *out)
{
    size_t N = (size_t)B * T;
    uint32_t *ids = malloc(N * sizeof *ids), *tg = malloc(N * sizeof *tg);
    double sum = 0;
    size_t count = 0;
    size_t pos = 0;
    int rc = 0;
    while (pos + 1 < nval) {
        size_t counted = 0;
        for (size_t r = 0; r < N; r++) {
            size_t i = pos + r;
            ids[r] = i < nval ? val[i] : 0;
            tg[r] = i + 1 < nval ? val[i + 1] : UINT32_MAX;
            counted += tg[r] != UINT32_MAX;
        }
        float l;
        if (wgml_trainer_eval(t, ids, tg, loss) != WGML_OK || wgml_tensor_read(loss, 0, &l, sizeof l) != WGML_OK) { rc = -1; break; }
        sum += (double)l * counted;
        count += counted;
        pos += N;
    }
    free(ids);
    free(tg);
    *out = count ? sum / count : NAN;
    return rc;
}

int cmd_train(int argc, char **argv)
{
    train_opts o = defaults;
    int pr = cli_parse(argc, argv, train_flags, NFLAGS, &o, "wgml train [options]",
                      "Trains a Llama-style model on a text file (byte tokens) and writes a checkpoint and a loss curve.");
    if (pr <= 0) return -pr;
    if (o.dim < 2 || o.layers < 1 || o.heads < 1 || o.kv_heads < 1 || o.ffn < 1 || o.context < 2 || o.batch < 1 ||
        o.steps < 1 || o.accum < 1 || o.warmup < 0 || !(o.lr > 0) || o.eval_every < 0) {
        fprintf(stderr, "wgml train: sizes, --steps, --accum and --lr must be positive (see --help)\n");
        return 2;
    }
    if (o.dim % o.heads || (o.dim / o.heads) % 2 || o.heads % o.kv_heads) {
        fprintf(stderr, "wgml train: --dim must be a multiple of --heads with an even quotient, and --heads a multiple of --kv-heads\n");
        return 2;
    }
    if (o.warmup >= o.steps) o.warmup = o.steps / 10;

    /* ---- data: bytes, or the ids of a tokenizer.json ---- */
    size_t size = 0;
    uint8_t *text = cli_read_file("wgml train", o.data, &size);
    if (!text) return 1;
    uint32_t vocab = 256;
    uint32_t *data = malloc(sizeof *data * (2 * size + 1));   /* add_prefix_space can double */
    size_t ntok = 0;
    wgml_tokenizer *tok = NULL;
    if (o.tokenizer) {
        size_t n = 0;
        if (wgml_tokenizer_load(o.tokenizer, &tok) != WGML_OK ||
            wgml_tokenizer_encode_ordinary(tok, (const char *)text, size, data, 2 * size + 1, &n) != WGML_OK) {
            fprintf(stderr, "wgml train: %s\n", wgml_last_error(NULL));
            wgml_tokenizer_free(tok);
            free(text);
            free(data);
            return 1;
        }
        ntok = n;
        vocab = wgml_tokenizer_vocab_size(tok);
    } else {
        for (size_t i = 0; i < size; i++) data[i] = text[i];
        ntok = size;
    }
    free(text);
    size_t nval = ntok / 10, ntrain = ntok - nval;
    if (ntrain < (size_t)o.context + 2 || nval < 2) {
        fprintf(stderr, "wgml train: %s has %zu tokens: too few for --context %d (needs %d for training plus 10%% held out)\n",
                o.data, ntok, o.context, (o.context + 2) * 10 / 9 + 2);
        wgml_tokenizer_free(tok);
        free(data);
        return 1;
    }
    const uint32_t *train = data, *val = data + ntrain;
    double *counts = calloc(vocab, sizeof *counts), h = 0;
    for (size_t i = 0; i < ntrain; i++) counts[train[i]]++;
    int distinct = 0;
    for (uint32_t c = 0; c < vocab; c++)
        if (counts[c]) { double p = counts[c] / ntrain; h -= p * log(p); distinct++; }
    free(counts);

    /* ---- device, model, trainer ---- */
    wgml_context *ctx = NULL;
    wgml_engine *eng = NULL;
    if (wgml_context_create(NULL, &ctx) != WGML_OK) {
        fprintf(stderr, "wgml train: no WebGPU adapter: %s\n", wgml_last_error(NULL));
        wgml_tokenizer_free(tok);
        free(data);
        return 1;
    }
    wgml_adapter_info info;
    wgml_context_info(ctx, &info);
    wgml_engine_create(ctx, &eng);

    wgml_model_config cfg;
    memset(&cfg, 0, sizeof cfg);
    strcpy(cfg.model_type, "llama");
    cfg.vocab_size = vocab;
    cfg.hidden_size = (uint32_t)o.dim;
    cfg.intermediate_size = (uint32_t)o.ffn;
    cfg.num_hidden_layers = (uint32_t)o.layers;
    cfg.num_attention_heads = (uint32_t)o.heads;
    cfg.num_key_value_heads = (uint32_t)o.kv_heads;
    cfg.head_dim = (uint32_t)(o.dim / o.heads);
    cfg.max_position_embeddings = (uint32_t)o.context;
    cfg.rms_norm_eps = 1e-5;
    cfg.rope_theta = o.rope_theta;
    cfg.tie_word_embeddings = o.tied != 0;
    cfg.bos_token_id = -1;

    wgml_model *model = NULL;
    wgml_trainer *tr = NULL;
    wgml_tensor *loss = NULL, *hist = NULL;
    float *losses = NULL;
    double *val_loss = NULL;
    int rc = 1;
    wgml_status s = wgml_model_create(eng, &cfg, &model);
    if (s == WGML_OK) s = wgml_model_init_random(model, o.seed, 0.02f);
    bool gpu = !info.type || strcmp(info.type, "CPU") != 0;
    wgml_trainer_desc td = { .batch = (uint32_t)o.batch, .seq_len = (uint32_t)o.context, .clip_norm = o.clip > 0 ? (float)o.clip : -1.0f,
                             .weight_decay = o.weight_decay > 0 ? (float)o.weight_decay : -1.0f,
                             .keep_attention_scores = o.keep_scores < 0 ? gpu : o.keep_scores != 0 };
    if (s == WGML_OK) s = wgml_trainer_create(model, &td, &tr);
    size_t nmicro = (size_t)o.steps * o.accum;
    if (s == WGML_OK) s = wgml_tensor_create(ctx, WGML_F32, 1, (size_t[]){ 1 }, &loss);
    if (s == WGML_OK) s = wgml_tensor_create(ctx, WGML_F32, 1, (size_t[]){ nmicro }, &hist);
    if (s != WGML_OK) {
        fprintf(stderr, "wgml train: %s\n", wgml_last_error(ctx));
        goto done;
    }
    losses = calloc((size_t)o.steps, sizeof *losses);
    val_loss = malloc(sizeof *val_loss * (size_t)(o.steps + 1));
    for (int i = 0; i <= o.steps; i++) val_loss[i] = NAN;

    uint64_t nparams = wgml_model_numel(model);
    int N = o.batch * o.context;
    printf("adapter:  %s (%s, %s)\n", info.name, info.type, info.backend);
    printf("data:     %s: %zu bytes, %zu %s tokens (%d distinct); %zu for training, %zu held out for validation\n", o.data,
           size, ntok, tok ? "BPE" : "byte", distinct, ntrain, nval);
    printf("unigram entropy of the training tokens: %.3f bits = %.3f nats per token (the loss of a model that knows only token "
           "frequencies; uniform would be %.3f nats)\n", h / log(2), h, log((double)vocab));
    printf("model:    %llu parameters: dim %d, %d layers, %d heads (%d kv), head_dim %d, ffn %d, vocab %u, %s head\n",
           (unsigned long long)nparams, o.dim, o.layers, o.heads, o.kv_heads, o.dim / o.heads, o.ffn, vocab, o.tied ? "tied" : "untied");
    printf("training: %d steps x %d micro-batch%s x %d sequences x %d tokens, AdamW lr %g (warm-up %d, cosine to %g), clip %g, "
           "weight decay %g, seed %llu%s\n", o.steps, o.accum, o.accum > 1 ? "es" : "", o.batch, o.context, o.lr, o.warmup,
           o.lr * o.min_lr_frac, o.clip, o.weight_decay, (unsigned long long)o.seed,
           td.keep_attention_scores ? ", keep_attention_scores on" : "");
    fflush(stdout);

    /* ---- the loop ---- */
    uint64_t rng = o.seed ^ 0xD1B54A32D192ED03ull;
    uint32_t *ids = malloc(sizeof *ids * (size_t)N), *tg = malloc(sizeof *tg * (size_t)N);
    double t0 = cli_now(), t_first = 0, t_eval = 0, last_print = 0;
    int read_upto = 0;   /* micro-batches whose losses have been read back */
    double vloss = NAN;
    bool tty = isatty(STDOUT_FILENO);
    /* the validation loss of the initial model, for the curve */
    if (evaluate(tr, loss, val, nval, o.batch, o.context, &val_loss[0]) != 0) s = WGML_ERROR_DEVICE;
    for (int step = 0; step < o.steps && s == WGML_OK; step++) {
        for (int a = 0; a < o.accum && s == WGML_OK; a++) {
            for (int b = 0; b < o.batch; b++) {
                size_t off = rng_next(&rng) % (ntrain - (size_t)o.context);
                for (int i = 0; i < o.context; i++) {
                    ids[b * o.context + i] = train[off + (size_t)i];
                    tg[b * o.context + i] = train[off + (size_t)i + 1];
                }
            }
            s = wgml_trainer_accumulate(tr, ids, tg, 1.0f / (float)o.accum, loss);
            if (s == WGML_OK) s = wgml_copy_tensor(eng, loss, hist, ((size_t)step * o.accum + (size_t)a) * sizeof(float));
        }
        if (s == WGML_OK) s = wgml_trainer_step(tr, (float)lr_at(&o, step), NULL);
        if (s != WGML_OK) break;
        bool eval_now = step == o.steps - 1 || (o.eval_every > 0 && (step + 1) % o.eval_every == 0);
        double now = cli_now();
        /* Read the losses back (a wait for the device) at most ~8 times a second, and at
           every evaluation; between reads the device runs ahead of the host. */
        if (step == 0 || eval_now || now - last_print > 0.125) {
            int upto = (step + 1) * o.accum;
            float *buf = malloc(sizeof(float) * (size_t)(upto - read_upto));
            s = wgml_tensor_read(hist, (size_t)read_upto * sizeof(float), buf, sizeof(float) * (size_t)(upto - read_upto));
            if (s == WGML_OK)
                for (int i = read_upto; i < upto; i++) losses[i / o.accum] += buf[i - read_upto] / (float)o.accum;
            free(buf);
            read_upto = upto;
            now = cli_now();
            if (step == 0) t_first = now;
            if (eval_now && s == WGML_OK) {
                if (evaluate(tr, loss, val, nval, o.batch, o.context, &vloss) != 0) { s = WGML_ERROR_DEVICE; break; }
                val_loss[step + 1] = vloss;
                t_eval += cli_now() - now;
                now = cli_now();
            }
            /* training throughput after the first step (which compiles the kernels),
               evaluation time excluded */
            double train_time = now - t_first - t_eval;
            double rate = step > 0 ? (double)step * o.accum * N / train_time : 0;
            double left = step > 0 ? train_time / step * (o.steps - 1 - step) : 0;
            char bar[24];
            int fill = (int)(20.0 * (step + 1) / o.steps);
            for (int i = 0; i < 20; i++) bar[i] = i < fill ? '#' : '.';
            bar[20] = 0;
            printf("\rstep %*d/%d [%s] loss %.4f  val %s  lr %.2e  %7.0f tok/s  %s left   ", cli_digits(o.steps), step + 1,
                   o.steps, bar, losses[step], isnan(vloss) ? "  -   " : cli_fmt("%.4f", vloss), lr_at(&o, step), rate,
                   cli_duration(left));
            if (eval_now || !tty) putchar('\n');
            fflush(stdout);
            last_print = now;
        }
    }
    free(ids);
    free(tg);
    if (s != WGML_OK) {
        fprintf(stderr, "\nwgml train: %s\n", wgml_last_error(ctx));
        goto done;
    }
    double elapsed = cli_now() - t0;

    /* ---- results ---- */
    int tail = o.steps < 20 ? o.steps : 20;
    double train_tail = 0;
    for (int i = o.steps - tail; i < o.steps; i++) train_tail += losses[i];
    train_tail /= tail;
    printf("done in %s: %.0f tokens/s overall. Final loss: train %.4f (mean of the last %d steps), validation %.4f nats/token "
           "= %.3f bits/token, against a unigram entropy of %.4f nats (%.3f bits)\n", cli_duration(elapsed),
           (double)o.steps * o.accum * N / elapsed, train_tail, tail, vloss, vloss / log(2), h, h / log(2));
    s = wgml_model_save(model, o.out);
    if (s != WGML_OK) {
        fprintf(stderr, "wgml train: %s\n", wgml_last_error(ctx));
        goto done;
    }
    char path[4096];
    if (tok && cli_copy_file("wgml train", o.tokenizer, cli_fmt_path(path, sizeof path, o.out, "tokenizer.json")) != 0) goto done;
    snprintf(path, sizeof path, "%s/loss.csv", o.out);
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "step,train_loss,val_loss,lr\n");
        for (int i = 0; i < o.steps; i++) {
            fprintf(f, "%d,%.6f,", i + 1, losses[i]);
            if (!isnan(val_loss[i + 1])) fprintf(f, "%.6f", val_loss[i + 1]);
            fprintf(f, ",%.6g\n", lr_at(&o, i));
        }
        fclose(f);
    }
    snprintf(path, sizeof path, "%s/loss.svg", o.out);
    char title[512];
    const char *base = strrchr(o.data, '/');
    snprintf(title, sizeof title, "wgml train on %s: %llu parameters (dim %d, %d layers, context %d), %s", base ? base + 1 : o.data,
             (unsigned long long)nparams, o.dim, o.layers, o.context, info.name);
    if (plot_loss_svg(path, title, losses, val_loss, o.steps, h) != 0) fprintf(stderr, "wgml train: could not write %s\n", path);
    printf("wrote %s/config.json, %s/model.safetensors, %s/loss.svg, %s/loss.csv\n", o.out, o.out, o.out, o.out);
    rc = 0;

done:
    free(losses);
    free(val_loss);
    wgml_tensor_release(loss);
    wgml_tensor_release(hist);
    wgml_trainer_destroy(tr);
    wgml_model_destroy(model);
    wgml_engine_destroy(eng);
    wgml_context_destroy(ctx);
    wgml_tokenizer_free(tok);
    free(data);
    return rc;
}
