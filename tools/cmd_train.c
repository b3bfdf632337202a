/* wgml train: trains a Llama-style language model from scratch on a text file, on whatever
   adapter the machine has, and writes a checkpoint (Hugging Face layout: config.json +
   model.safetensors) and a loss curve (loss.svg, loss.csv).

   Tokens are bytes (vocabulary 256) unless --tokenizer names a tokenizer.json, so any file
   works and nothing is downloaded; the default file is the GPL-3 text every Debian machine
   carries. The last 10% of the file is held out for the validation loss. The defaults are
   sized to finish in about two minutes on a 2-core machine through lavapipe; bigger flags
   use a big GPU.

   Everything that can be refused is refused before training starts: flags out of range, a
   model configuration the loader would not read back, an --out that cannot be written. A
   loss that turns NaN or infinite stops the run with an error, and nothing is written. */
#include "commands.h"
#include "cli.h"
#include "plot.h"
#include "wgml.h"

#include <errno.h>
#include <stdbool.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The text is held in memory whole (as bytes, or as 4-byte BPE ids). */
#define DATA_MAX_BYTES ((size_t)1 << 30)
/* How long one training step may take before the run gives up on the device. */
#define STEP_WAIT_MS 3600000

typedef struct train_opts {
    int dim, layers, heads, kv_heads, ffn, context, batch, steps, warmup, accum, eval_every, tied, keep_scores;
    double lr, min_lr_frac, clip, weight_decay, rope_theta, beta1, beta2, eps;
    uint64_t seed;
    const char *data, *out, *tokenizer;
} train_opts;

static const train_opts defaults = {
    .dim = 96, .layers = 3, .heads = 4, .kv_heads = 2, .ffn = 256, .context = 64, .batch = 8, .steps = 250,
    .warmup = -1, .accum = 1, .eval_every = 50, .tied = 1, .keep_scores = -1,
    .lr = 3e-3, .min_lr_frac = 0.1, .clip = 1.0, .weight_decay = 0.1, .rope_theta = 10000,
    .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
    .seed = 1337, .data = "/usr/share/common-licenses/GPL-3", .out = "out",
};

static const cli_flag train_flags[] = {
    { "--dim", CLI_INT, offsetof(train_opts, dim), "model width (hidden size)", 2, 65536 },
    { "--layers", CLI_INT, offsetof(train_opts, layers), "transformer blocks", 1, 1024 },
    { "--heads", CLI_INT, offsetof(train_opts, heads), "attention heads (head_dim = dim / heads, even, <= 128)", 1, 1024 },
    { "--kv-heads", CLI_INT, offsetof(train_opts, kv_heads), "key/value heads (grouped-query attention; divides heads)", 1, 1024 },
    { "--ffn", CLI_INT, offsetof(train_opts, ffn), "SwiGLU hidden size", 1, 1 << 20 },
    { "--context", CLI_INT, offsetof(train_opts, context), "tokens per training sequence", 2, 1 << 20 },
    { "--batch", CLI_INT, offsetof(train_opts, batch), "sequences per micro-batch", 1, 1 << 16 },
    { "--accum", CLI_INT, offsetof(train_opts, accum), "micro-batches per optimizer step (gradient accumulation)", 1, 1 << 16 },
    { "--steps", CLI_INT, offsetof(train_opts, steps), "optimizer steps", 1, 1e9 },
    { "--lr", CLI_DOUBLE, offsetof(train_opts, lr), "peak learning rate (AdamW)", 1e-12, 10 },
    { "--min-lr", CLI_DOUBLE, offsetof(train_opts, min_lr_frac), "final learning rate as a fraction of --lr (cosine decay)", 0, 1 },
    { "--warmup", CLI_INT, offsetof(train_opts, warmup), "linear warm-up steps, below --steps (-1: 30, or steps/10 when "
      "steps <= 30)", -1, 1e9 },
    { "--beta1", CLI_DOUBLE, offsetof(train_opts, beta1), "AdamW's first-moment decay", 1e-6, 0.999999 },
    { "--beta2", CLI_DOUBLE, offsetof(train_opts, beta2), "AdamW's second-moment decay", 1e-6, 0.999999 },
    { "--eps", CLI_DOUBLE, offsetof(train_opts, eps), "AdamW's epsilon", 1e-30, 1 },
    { "--clip", CLI_DOUBLE, offsetof(train_opts, clip), "global gradient-norm clip (0: none)", 0, 1e6 },
    { "--weight-decay", CLI_DOUBLE, offsetof(train_opts, weight_decay), "AdamW weight decay (matrices and embeddings)", 0, 10 },
    { "--rope-theta", CLI_DOUBLE, offsetof(train_opts, rope_theta), "RoPE base", 1, 1e15 },
    { "--tied", CLI_INT, offsetof(train_opts, tied), "1: output head shares the embedding; 0: its own matrix", 0, 1 },
    { "--keep-scores", CLI_INT, offsetof(train_opts, keep_scores),
      "1: keep attention's scores for the backward (faster; batch*heads*(context/64)^2*16 KiB per layer), 0: recompute "
      "them; -1: 1 on a GPU, 0 on a CPU adapter", -1, 1 },
    { "--seed", CLI_U64, offsetof(train_opts, seed), "seed of the initial weights and of the batch order", 0, 0 },
    { "--eval-every", CLI_INT, offsetof(train_opts, eval_every), "steps between validation losses (0: only at the end)", 0, 1e9 },
    { "--data", CLI_STRING, offsetof(train_opts, data), "UTF-8 text file to train on (bytes are the tokens; at most 1 GiB)" },
    { "--tokenizer", CLI_STRING, offsetof(train_opts, tokenizer), "tokenizer.json (byte-level BPE) instead of byte tokens; copied to --out" },
    { "--out", CLI_STRING, offsetof(train_opts, out), "output folder: config.json, model.safetensors, loss.svg, loss.csv" },
};
#define NFLAGS (sizeof train_flags / sizeof train_flags[0])

/* The tokens of the text: bytes as they are (1 byte each), or BPE ids. */
typedef struct tokens {
    const uint8_t *bytes;
    const uint32_t *ids;
    size_t n;
} tokens;

static uint32_t tok_at(const tokens *t, size_t i) { return t->ids ? t->ids[i] : t->bytes[i]; }

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

/* The fewest tokens a text needs: context + 2 for training after the 10% held out, and
   at least 2 held out. */
static size_t min_tokens(int context)
{
    size_t n = 20;
    while (n - n / 10 < (size_t)context + 2) n++;
    return n;
}

/* The whole validation split in windows of context tokens; the last window's missing
   targets are ignored (UINT32_MAX), so every validation token counts exactly once. */
static wgml_status evaluate(wgml_trainer *t, wgml_tensor *loss, const tokens *val, size_t N, double *out)
{
    uint32_t *ids = malloc(N * sizeof *ids), *tg = malloc(N * sizeof *tg);
    wgml_status s = ids && tg ? WGML_OK : WGML_ERROR_OUT_OF_MEMORY;
    double sum = 0;
    size_t count = 0, pos = 0;
    while (s == WGML_OK && pos + 1 < val->n) {
        size_t counted = 0;
        for (size_t r = 0; r < N; r++) {
            size_t i = pos + r;
            ids[r] = i < val->n ? tok_at(val, i) : 0;
            tg[r] = i + 1 < val->n ? tok_at(val, i + 1) : UINT32_MAX;
            counted += tg[r] != UINT32_MAX;
        }
        float l;
        s = wgml_trainer_eval(t, ids, tg, loss);
        if (s == WGML_OK) s = wgml_tensor_read(loss, 0, &l, sizeof l);
        sum += (double)l * counted;
        count += counted;
        pos += N;
    }
    free(ids);
    free(tg);
    *out = count ? sum / count : NAN;
    return s;
}

/* The text as tokens: its bytes, or the ids of a tokenizer.json (*tok). */
static int load_tokens(const train_opts *o, uint8_t **text, size_t *text_bytes, uint32_t **ids, tokens *all, uint32_t *vocab,
                       wgml_tokenizer **tok)
{
    size_t size = 0;
    *text = cli_read_file("wgml train", o->data, DATA_MAX_BYTES, &size);
    *text_bytes = size;
    if (!*text) return -1;
    *vocab = 256;
    if (!o->tokenizer) {
        *all = (tokens){ .bytes = *text, .n = size };
        return 0;
    }
    if (wgml_tokenizer_load(o->tokenizer, tok) != WGML_OK) {
        fprintf(stderr, "wgml train: %s\n", wgml_last_error(NULL));
        return -1;
    }
    /* at most one id per byte, except that add_prefix_space may add one per piece: the
       encoder says how many it needs when the first guess is short */
    size_t cap = size + 1, n = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        free(*ids);
        *ids = malloc(sizeof **ids * (cap ? cap : 1));
        if (!*ids) {
            fprintf(stderr, "wgml train: out of memory for the %zu token ids of %s\n", cap, o->data);
            return -1;
        }
        wgml_status s = wgml_tokenizer_encode_ordinary(*tok, (const char *)*text, size, *ids, cap, &n);
        if (s == WGML_OK) break;
        if (s != WGML_ERROR_SHAPE || attempt == 1) {
            fprintf(stderr, "wgml train: %s\n", wgml_last_error(NULL));
            return -1;
        }
        cap = n;
    }
    free(*text);
    *text = NULL;
    *all = (tokens){ .ids = *ids, .n = n };
    *vocab = wgml_tokenizer_vocab_size(*tok);
    return 0;
}

/* --out must be a folder this process can write (made when missing: *made says so),
   checked before any work so that a typo does not cost a training run. */
static int check_out(const char *out, bool *made)
{
    struct stat st;
    *made = false;
    if (stat(out, &st) == 0 && !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "wgml train: --out %s exists and is not a folder\n", out);
        return -1;
    }
    if (mkdir(out, 0777) == 0) *made = true;
    else if (errno != EEXIST) {
        fprintf(stderr, "wgml train: cannot create --out %s: %s\n", out, strerror(errno));
        return -1;
    }
    if (access(out, W_OK | X_OK) != 0) {
        fprintf(stderr, "wgml train: cannot write into --out %s: %s\n", out, strerror(errno));
        return -1;
    }
    return 0;
}

/* loss.csv and loss.svg, each written atomically; 0, or -1 after a message. */
static int write_curves(const train_opts *o, const float *losses, const double *val_loss, double unigram, const char *title)
{
    char path[4096], tmp[4200];
    cli_fmt_path(path, sizeof path, o->out, "loss.csv");
    FILE *f = cli_atomic_open("wgml train", path, tmp, sizeof tmp);
    if (!f) return -1;
    fprintf(f, "step,train_loss,val_loss,lr\n");
    for (int i = 0; i < o->steps; i++) {
        fprintf(f, "%d,%.6f,", i + 1, losses[i]);
        if (!isnan(val_loss[i + 1])) fprintf(f, "%.6f", val_loss[i + 1]);
        fprintf(f, ",%.6g\n", lr_at(o, i));
    }
    if (cli_atomic_commit("wgml train", f, tmp, path) != 0) return -1;
    cli_fmt_path(path, sizeof path, o->out, "loss.svg");
    f = cli_atomic_open("wgml train", path, tmp, sizeof tmp);
    if (!f) return -1;
    plot_loss_svg(f, title, losses, val_loss, o->steps, unigram);
    return cli_atomic_commit("wgml train", f, tmp, path);
}

int cmd_train(int argc, char **argv)
{
    train_opts o = defaults;
    int pr = cli_parse(argc, argv, train_flags, NFLAGS, &o, "wgml train [options]",
                      "Trains a Llama-style model on a text file (byte tokens) and writes a checkpoint and a loss curve.");
    if (pr <= 0) return -pr;
    if (o.dim % o.heads || (o.dim / o.heads) % 2 || o.heads % o.kv_heads) {
        fprintf(stderr, "wgml train: --dim must be a multiple of --heads with an even quotient, and --heads a multiple of --kv-heads\n");
        return 2;
    }
    if (o.warmup < 0) o.warmup = o.steps > 30 ? 30 : o.steps / 10;
    else if (o.warmup >= o.steps) {
        fprintf(stderr, "wgml train: --warmup %d must be below --steps %d\n", o.warmup, o.steps);
        return 2;
    }
    if ((uint64_t)o.batch * (uint64_t)o.context > (1u << 30)) {
        fprintf(stderr, "wgml train: --batch x --context = %llu tokens per micro-batch, more than 2^30\n",
                (unsigned long long)o.batch * (unsigned long long)o.context);
        return 2;
    }

    /* the model's configuration, checked as the loader checks a config.json, so that
       what train writes, generate reads (the vocabulary is known after the data) */
    wgml_model_config cfg;
    memset(&cfg, 0, sizeof cfg);
    strcpy(cfg.model_type, "llama");
    strcpy(cfg.architecture, "LlamaForCausalLM");
    cfg.vocab_size = 256;
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
    if (wgml_model_config_check(&cfg) != WGML_OK) {
        fprintf(stderr, "wgml train: %s\n", wgml_last_error(NULL));
        return 2;
    }
    if (cfg.head_dim > 128) {
        fprintf(stderr, "wgml train: head_dim = --dim / --heads = %u is over 128, the attention kernel's limit\n", cfg.head_dim);
        return 2;
    }
    bool made_out = false;
    if (check_out(o.out, &made_out) != 0) return 1;

    /* ---- data: bytes, or the ids of a tokenizer.json ---- */
    uint8_t *text = NULL;
    uint32_t *idbuf = NULL;
    wgml_tokenizer *tok = NULL;
    tokens all;
    uint32_t vocab = 256;
    size_t text_bytes = 0;
    if (load_tokens(&o, &text, &text_bytes, &idbuf, &all, &vocab, &tok) != 0) {
        free(text);
        free(idbuf);
        wgml_tokenizer_free(tok);
        if (made_out) rmdir(o.out);
        return 1;
    }
    size_t nval = all.n / 10, ntrain = all.n - nval;
    if (ntrain < (size_t)o.context + 2 || nval < 2) {
        fprintf(stderr, "wgml train: %s has %zu tokens: too few for --context %d (needs at least %zu: %d for a training "
                "sequence plus 10%% held out)\n", o.data, all.n, o.context, min_tokens(o.context), o.context + 2);
        free(text);
        free(idbuf);
        wgml_tokenizer_free(tok);
        if (made_out) rmdir(o.out);
        return 1;
    }
    tokens train = all, val = all;
    train.n = ntrain;
    if (val.ids) val.ids += ntrain;
    else val.bytes += ntrain;
    val.n = nval;
    double *counts = calloc(vocab, sizeof *counts), h = 0;
    int distinct = 0;
    if (counts) {
        for (size_t i = 0; i < ntrain; i++) counts[tok_at(&train, i)]++;
        for (uint32_t c = 0; c < vocab; c++)
            if (counts[c]) { double p = counts[c] / ntrain; h -= p * log(p); distinct++; }
        free(counts);
    }
    cfg.vocab_size = vocab;

    /* ---- device, model, trainer ---- */
    wgml_context *ctx = NULL;
    wgml_engine *eng = NULL;
    wgml_model *model = NULL;
    wgml_trainer *tr = NULL;
    wgml_tensor *loss = NULL, *hist = NULL;
    float *losses = NULL, *buf = NULL;
    double *val_loss = NULL;
    uint32_t *ids = NULL, *tg = NULL;
    uint64_t *fences = NULL;
    int rc = 1;
    if (wgml_context_create(NULL, &ctx) != WGML_OK) {
        fprintf(stderr, "wgml train: %s\n", wgml_last_error(NULL));
        goto done;
    }
    wgml_adapter_info info;
    wgml_context_info(ctx, &info);
    wgml_status s = wgml_engine_create(ctx, &eng);
    if (s == WGML_OK) s = wgml_model_create(eng, &cfg, &model);
    if (s == WGML_OK) s = wgml_model_init_random(model, o.seed, 0.02f);
    bool gpu = !info.type || strcmp(info.type, "CPU") != 0;
    wgml_trainer_desc td = { .batch = (uint32_t)o.batch, .seq_len = (uint32_t)o.context,
                             .beta1 = (float)o.beta1, .beta2 = (float)o.beta2, .eps = (float)o.eps,
                             .clip_norm = o.clip > 0 ? (float)o.clip : -1.0f,
                             .weight_decay = o.weight_decay > 0 ? (float)o.weight_decay : -1.0f,
                             .keep_attention_scores = o.keep_scores < 0 ? gpu : o.keep_scores != 0 };
    if (s == WGML_OK) s = wgml_trainer_create(model, &td, &tr);
    size_t nmicro = (size_t)o.steps * (size_t)o.accum, N = (size_t)o.batch * (size_t)o.context;
    if (s == WGML_OK) s = wgml_tensor_create(ctx, WGML_F32, 1, (size_t[]){ 1 }, &loss);
    if (s == WGML_OK) s = wgml_tensor_create(ctx, WGML_F32, 1, (size_t[]){ nmicro }, &hist);
    if (s != WGML_OK) {
        fprintf(stderr, "wgml train: %s\n", wgml_last_error(ctx));
        goto done;
    }
    losses = calloc((size_t)o.steps, sizeof *losses);
    buf = malloc(sizeof *buf * nmicro);
    val_loss = malloc(sizeof *val_loss * ((size_t)o.steps + 1));
    ids = malloc(sizeof *ids * N);
    tg = malloc(sizeof *tg * N);
    fences = calloc((size_t)o.steps, sizeof *fences);
    if (!losses || !buf || !val_loss || !ids || !tg || !fences) {
        fprintf(stderr, "wgml train: out of host memory\n");
        goto done;
    }
    for (int i = 0; i <= o.steps; i++) val_loss[i] = NAN;

    uint64_t nparams = wgml_model_numel(model);
    printf("adapter:  %s (%s, %s)\n", info.name, info.type, info.backend);
    printf("data:     %s: %zu bytes, %zu %s tokens (%d distinct); %zu for training, %zu held out for validation\n", o.data,
           text_bytes, all.n, tok ? "BPE" : "byte", distinct, ntrain, nval);
    printf("unigram entropy of the training tokens: %.3f bits = %.3f nats per token (the loss of a model that knows only token "
           "frequencies; uniform would be %.3f nats)\n", h / log(2), h, log((double)vocab));
    printf("model:    %llu parameters: dim %d, %d layers, %d heads (%d kv), head_dim %d, ffn %d, vocab %u, %s head\n",
           (unsigned long long)nparams, o.dim, o.layers, o.heads, o.kv_heads, o.dim / o.heads, o.ffn, vocab, o.tied ? "tied" : "untied");
    printf("training: %d steps x %d micro-batch%s x %d sequences x %d tokens, AdamW lr %g (betas %g, %g, eps %g; warm-up %d, "
           "cosine to %g), clip %g, weight decay %g, seed %llu%s\n", o.steps, o.accum, o.accum > 1 ? "es" : "", o.batch,
           o.context, o.lr, o.beta1, o.beta2, o.eps, o.warmup, o.lr * o.min_lr_frac, o.clip, o.weight_decay,
           (unsigned long long)o.seed, td.keep_attention_scores ? ", keep_attention_scores on" : "");
    fflush(stdout);

    /* ---- the loop ----
       The host records steps ahead of the device, at most two: each step ends with a
       fence, and step s waits for step s - 2's. The bar shows the steps the device has
       finished, at least once a second; losses are read back (a wait for everything
       recorded) at most once a second and at each evaluation, and a non-finite one stops
       the run. */
    uint64_t rng = o.seed ^ 0xD1B54A32D192ED03ull;
    double t0 = cli_now(), t_first = 0, t_eval = 0, last_print = -1, last_read = t0;
    int read_upto = 0;   /* micro-batches whose losses have been read back */
    int done_steps = 0;  /* steps the device has finished */
    double vloss = NAN;
    bool tty = isatty(STDOUT_FILENO);
    s = evaluate(tr, loss, &val, N, &val_loss[0]);   /* the initial model, for the curve */
    for (int step = 0; step < o.steps && s == WGML_OK; step++) {
        for (int a = 0; a < o.accum && s == WGML_OK; a++) {
            for (int b = 0; b < o.batch; b++) {
                size_t off = rng_next(&rng) % (ntrain - (size_t)o.context);
                for (size_t i = 0; i < (size_t)o.context; i++) {
                    ids[(size_t)b * o.context + i] = tok_at(&train, off + i);
                    tg[(size_t)b * o.context + i] = tok_at(&train, off + i + 1);
                }
            }
            s = wgml_trainer_accumulate(tr, ids, tg, 1.0f / (float)o.accum, loss);
            if (s == WGML_OK) s = wgml_copy_tensor(eng, loss, hist, ((size_t)step * o.accum + (size_t)a) * sizeof(float));
        }
        if (s == WGML_OK) s = wgml_trainer_step(tr, (float)lr_at(&o, step), NULL);
        if (s == WGML_OK) s = wgml_context_fence(ctx, &fences[step]);
        bool done = false;
        if (s == WGML_OK && step >= 2) {
            s = wgml_context_fence_wait(ctx, fences[step - 2], STEP_WAIT_MS, &done);
            if (s == WGML_OK && !done) {
                fprintf(stderr, "\nwgml train: step %d did not finish within %d minutes\n", step - 1, STEP_WAIT_MS / 60000);
                goto done;
            }
            if (s == WGML_OK) done_steps = step - 1;
        }
        if (s == WGML_OK && step >= 1 && wgml_context_fence_wait(ctx, fences[step - 1], 0, &done) == WGML_OK && done)
            done_steps = step;
        if (s != WGML_OK) break;
        if (step == 0) t_first = cli_now();
        bool last = step == o.steps - 1;
        bool eval_now = last || (o.eval_every > 0 && (step + 1) % o.eval_every == 0);
        double now = cli_now();
        if (step == 0 || eval_now || now - last_read >= 1.0) {
            int upto = (step + 1) * o.accum;
            s = wgml_tensor_read(hist, (size_t)read_upto * sizeof(float), buf + read_upto, sizeof(float) * (size_t)(upto - read_upto));
            if (s != WGML_OK) break;
            for (int i = read_upto; i < upto; i++) {
                if (!isfinite(buf[i])) {
                    fprintf(stderr, "\nwgml train: the loss became %s at step %d (is --lr %g too high?); stopping, nothing "
                            "written to %s\n", isnan(buf[i]) ? "NaN" : "infinite", i / o.accum + 1, o.lr, o.out);
                    goto done;
                }
                losses[i / o.accum] += buf[i] / (float)o.accum;
            }
            read_upto = upto;
            done_steps = step + 1;
            last_read = now = cli_now();
            if (eval_now) {
                s = evaluate(tr, loss, &val, N, &vloss);
                if (s != WGML_OK) break;
                if (!isfinite(vloss)) {
                    fprintf(stderr, "\nwgml train: the validation loss became %s after step %d; stopping, nothing written "
                            "to %s\n", isnan(vloss) ? "NaN" : "infinite", step + 1, o.out);
                    goto done;
                }
                val_loss[step + 1] = vloss;
                t_eval += cli_now() - now;
                now = cli_now();
            }
        }
        if (eval_now || now - last_print >= 0.25) {
            /* throughput after the first step (which compiles the kernels), evaluation
               time excluded */
            int k = done_steps > 0 ? done_steps : 1;
            double train_time = now - t_first - t_eval;
            double rate = k > 1 ? (double)(k - 1) * o.accum * N / train_time : 0;
            double left = k > 1 ? train_time / (k - 1) * (o.steps - k) : 0;
            char bar[24];
            int fill = (int)(20.0 * k / o.steps);
            for (int i = 0; i < 20; i++) bar[i] = i < fill ? '#' : '.';
            bar[20] = 0;
            int shown = read_upto / o.accum;   /* the last step whose loss was read */
            printf("\rstep %*d/%d [%s] loss %.4f  val %s  lr %.2e  %7.0f tok/s  %s left   ", cli_digits(o.steps), k,
                   o.steps, bar, shown ? losses[shown - 1] : NAN, isnan(vloss) ? "  -   " : cli_fmt("%.4f", vloss),
                   lr_at(&o, k - 1), rate, cli_duration(left));
            if (eval_now || !tty) putchar('\n');
            fflush(stdout);
            last_print = now;
        }
    }
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
    char title[512];
    const char *base = strrchr(o.data, '/');
    snprintf(title, sizeof title, "wgml train on %s: %llu parameters (dim %d, %d layers, context %d), %s", base ? base + 1 : o.data,
             (unsigned long long)nparams, o.dim, o.layers, o.context, info.name);
    if (write_curves(&o, losses, val_loss, h, title) != 0) goto done;
    printf("wrote %s/config.json, %s/model.safetensors, %s/loss.svg, %s/loss.csv%s\n", o.out, o.out, o.out, o.out,
           tok ? ", tokenizer.json" : "");
    rc = 0;

done:
    if (rc != 0 && made_out) rmdir(o.out);   /* a folder this run made, if it stayed empty */
    free(losses);
    free(buf);
    free(val_loss);
    free(ids);
    free(tg);
    free(fences);
    wgml_tensor_release(loss);
    wgml_tensor_release(hist);
    wgml_trainer_destroy(tr);
    wgml_model_destroy(model);
    wgml_engine_destroy(eng);
    wgml_context_destroy(ctx);
    wgml_tokenizer_free(tok);
    free(text);
    free(idbuf);
    return rc;
}
