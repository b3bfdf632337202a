/* wgml train: trains a Llama-style language model from scratch on a text file, on whatever
   adapter the machine has, and writes a checkpoint (Hugging Face layout: config.json +
   model.safetensors) and a loss curve (loss.svg, loss.csv).

   Tokens are bytes (vocabulary 256) unless --tokenizer names a tokenizer.json, so any file
   works and nothing is downloaded; the default file is the GPL-3 text every Debian machine
   carries. The last 10% of the file is held out for the validation loss. The defaults are
   sized to finish in about two minutes on a 2-core machine through lavapipe; bigger flags
   use a big GPU.

   Everything that can be refused is refused before training starts: flags out of range, a
   model configuration the loader would not read back, an --out that cannot be written or
   that holds another run. --save-every writes resumable checkpoints, as does SIGINT or
   SIGTERM; --resume goes on from one exactly. A loss that turns NaN or infinite stops the
   run with an error, and no checkpoint is written after it. */
#include "checkpoint.h"
#include "cli.h"
#include "commands.h"
#include "dist.h"
#include "train_loop.h"
#include "wgml.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct train_opts {
    int dim, layers, heads, kv_heads, ffn, context, batch, steps, warmup, accum, eval_every, save_every, tied, keep_scores, window;
    int overwrite;
    double lr, min_lr_frac, clip, weight_decay, rope_theta, beta1, beta2, eps, loss_scale;
    uint64_t seed;
    const char *data, *out, *tokenizer, *resume, *layer_types, *precision;
} train_opts;

static const train_opts defaults = {
    .dim = 96, .layers = 3, .heads = 4, .kv_heads = 2, .ffn = 256, .context = 64, .batch = 8, .steps = 250,
    .warmup = -1, .accum = 1, .eval_every = 50, .tied = 1, .keep_scores = -1,
    .lr = 3e-3, .min_lr_frac = 0.1, .clip = 1.0, .weight_decay = 0.1, .rope_theta = 10000,
    .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .loss_scale = -1,
    .seed = 1337, .data = "/usr/share/common-licenses/GPL-3", .out = "out", .precision = "f32",
};

static const cli_flag train_flags[] = {
    { "--dim", CLI_INT, offsetof(train_opts, dim), "model width (hidden size)", 2, 65536 },
    { "--layers", CLI_INT, offsetof(train_opts, layers), "transformer blocks", 1, 1024 },
    { "--heads", CLI_INT, offsetof(train_opts, heads), "attention heads (head_dim = dim / heads, even, <= 256)", 1, 1024 },
    { "--kv-heads", CLI_INT, offsetof(train_opts, kv_heads), "key/value heads (grouped-query attention; divides heads)", 1, 1024 },
    { "--ffn", CLI_INT, offsetof(train_opts, ffn), "SwiGLU hidden size", 1, 1 << 20 },
    { "--context", CLI_INT, offsetof(train_opts, context), "tokens per training sequence", 2, 1 << 20 },
    { "--batch", CLI_INT, offsetof(train_opts, batch), "sequences per micro-batch", 1, 1 << 16 },
    { "--accum", CLI_INT, offsetof(train_opts, accum), "micro-batches per optimizer step (gradient accumulation), over all "
      "processes under mpirun (a multiple of their number)", 1, 1 << 16 },
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
    { "--precision", CLI_STRING, offsetof(train_opts, precision), PRECISION_HELP },
    { "--loss-scale", CLI_DOUBLE, offsetof(train_opts, loss_scale), LOSS_SCALE_HELP, -1, 16777216 },
    { "--rope-theta", CLI_DOUBLE, offsetof(train_opts, rope_theta), "RoPE base", 1, 1e15 },
    { "--tied", CLI_INT, offsetof(train_opts, tied), "1: output head shares the embedding; 0: its own matrix", 0, 1 },
    { "--layer-types", CLI_STRING, offsetof(train_opts, layer_types), "another family than Llama, one letter per layer: an "
      "LFM2 model with c a gated short convolution (width 3) and a attention with per-head q and k norms (e.g. ccacca), or "
      "a Gemma 3 model with s a sliding-window and g a global attention layer (e.g. sssssg; --window, default 512)" },
    { "--window", CLI_INT, offsetof(train_opts, window), "sliding-window attention: each query sees this many positions, "
      "itself included (0: all); Gemma 3's sliding layers' window", 0, 1 << 24 },
    { "--keep-scores", CLI_INT, offsetof(train_opts, keep_scores),
      "1: keep attention's scores for the backward (faster; batch*heads*(context/64)^2*16 KiB per layer), 0: recompute "
      "them; -1: 1 on a GPU, 0 on a CPU adapter or where --precision f16 runs attention on the matrix units", -1, 1 },
    { "--seed", CLI_U64, offsetof(train_opts, seed), "seed of the initial weights and of the batch order", 0, 0 },
    { "--eval-every", CLI_INT, offsetof(train_opts, eval_every), "steps between validation losses (0: only at the end)", 0, 1e9 },
    { "--save-every", CLI_INT, offsetof(train_opts, save_every), "steps between resumable checkpoints in --out (0: none; "
      "SIGINT and SIGTERM write one too)", 0, 1e9 },
    { "--data", CLI_STRING, offsetof(train_opts, data), "UTF-8 text file to train on (bytes are the tokens; at most 1 GiB)" },
    { "--tokenizer", CLI_STRING, offsetof(train_opts, tokenizer), "tokenizer.json (byte-level BPE) instead of byte tokens; copied to --out" },
    { "--out", CLI_STRING, offsetof(train_opts, out), "output folder: config.json, model.safetensors, loss.svg, loss.csv, "
      "checkpoint-<step>/" },
    { "--overwrite", CLI_BOOL, offsetof(train_opts, overwrite), "replace a run already in --out" },
    { "--resume", CLI_STRING, offsetof(train_opts, resume), "a checkpoint folder, or an --out holding some, to go on from "
      "(the other options come from it)" },
};
#define NFLAGS (sizeof train_flags / sizeof train_flags[0])
/* what may differ on --resume: where to write, how often to save */
static const char *const may_change[] = { "--out", "--overwrite", "--resume", "--save-every", NULL };

typedef struct train_run {
    train_opts *o;
    wgml_model *model;
    wgml_trainer *tr;
    wgml_batcher *batches;
    uint64_t data_bytes, data_hash;
} train_run;

/* A checkpoint: the model, the optimizer, the run's state, the tokenizer. */
static int write_checkpoint(void *user, const char *dir)
{
    train_loop *L = user;
    train_run *r = L->user;
    char path[PATH_MAX];
    if (wgml_model_save(r->model, dir) != WGML_OK || wgml_trainer_save_state(r->tr, cli_fmt_path(path, sizeof path, dir,
                                                                                                 "optimizer.safetensors")) != WGML_OK) {
        fprintf(stderr, "wgml train: %s\n", wgml_last_error(L->ctx));
        return -1;
    }
    if (r->o->tokenizer && cli_copy_file("wgml train", r->o->tokenizer, cli_fmt_path(path, sizeof path, dir, "tokenizer.json")) != 0)
        return -1;
    run_state st = { .command = "train", .step = L->step, .data_bytes = r->data_bytes, .data_hash = r->data_hash,
                     .losses = L->losses, .val_losses = L->val_loss };
    wgml_batcher_get_state(r->batches, &st.batcher);
    return ckpt_state_write("wgml train", dir, &st, train_flags, NFLAGS, r->o);
}

static int save(train_loop *L, int step)
{
    train_run *r = L->user;
    return ckpt_write("wgml train", r->o->out, step, 2, write_checkpoint, L);
}

/* The fewest tokens a text needs: context + 2 for training after the 10% held out, and
   at least 2 held out. */
static size_t min_tokens(int context)
{
    size_t n = 20;
    while (n - n / 10 < (size_t)context + 2) n++;
    return n;
}

int cmd_train(int argc, char **argv)
{
    train_opts o = defaults;
    bool given[NFLAGS];
    int pr = cli_parse_given(argc, argv, train_flags, NFLAGS, &o, "wgml train [options]",
                             "Trains a Llama-style model on a text file (byte tokens) and writes a checkpoint and a loss curve.",
                             given);
    if (pr <= 0) return -pr;

    /* --resume: the options, the data's fingerprint and the history come from the checkpoint */
    run_state resumed = { 0 };
    float *losses0 = NULL;
    double *val0 = NULL;
    char ckdir[PATH_MAX] = "";
    if (o.resume) {
        if (ckpt_find("wgml train", o.resume, ckdir, sizeof ckdir) != 0) return 1;
        if (ckpt_state_read("wgml train", ckdir, "train", &resumed, &losses0, &val0, train_flags, NFLAGS, &o, given, may_change) != 0)
            return 2;
    }
    if (cli_check_precision("wgml train", o.precision, o.loss_scale) != 0) return 2;
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
    if (o.resume && resumed.step >= o.steps) {
        fprintf(stderr, "wgml train: %s is at step %d of %d: nothing left to train\n", ckdir, resumed.step, o.steps);
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
    cfg.sliding_window = (uint32_t)o.window;
    if (o.window) {
        strcpy(cfg.model_type, "mistral");
        strcpy(cfg.architecture, "MistralForCausalLM");
    }
    bool gemma = o.layer_types && strspn(o.layer_types, "sg") == strlen(o.layer_types);
    if (o.layer_types && (strlen(o.layer_types) != (size_t)o.layers ||
                          (!gemma && strspn(o.layer_types, "ca") != (size_t)o.layers))) {
        fprintf(stderr, "wgml train: --layer-types '%s' must have one letter for each of the %d layers, c or a (LFM2), "
                "or s or g (Gemma 3)\n", o.layer_types, o.layers);
        return 2;
    }
    if (o.window && o.layer_types && !gemma) {
        fprintf(stderr, "wgml train: --window does not go with LFM2's --layer-types\n");
        return 2;
    }
    if (gemma) {   /* Gemma 3's conventions, its sliding layers rotating by their own base */
        strcpy(cfg.model_type, "gemma3_text");
        strcpy(cfg.architecture, "Gemma3ForCausalLM");
        cfg.gemma = true;
        cfg.qk_norm = true;
        cfg.hidden_act = WGML_HIDDEN_ACT_GELU_TANH;
        cfg.sliding_window = o.window ? (uint32_t)o.window : 512;
        cfg.rope_local_theta = 10000;
        cfg.query_pre_attn_scalar = cfg.head_dim;
        for (int l = 0; l < o.layers; l++)
            if (o.layer_types[l] == 'g') cfg.full_attention_layers[l / 32] |= 1u << (l % 32);
    } else if (o.layer_types) {
        strcpy(cfg.model_type, "lfm2");
        strcpy(cfg.architecture, "Lfm2ForCausalLM");
        cfg.conv_kernel = 3;
        cfg.qk_norm = true;
        for (int l = 0; l < o.layers; l++)
            if (o.layer_types[l] == 'c') cfg.conv_layers[l / 32] |= 1u << (l % 32);
    }
    if (wgml_model_config_check(&cfg) != WGML_OK) {
        fprintf(stderr, "wgml train: %s\n", wgml_last_error(NULL));
        return 2;
    }
    if (cfg.head_dim > 256) {
        fprintf(stderr, "wgml train: head_dim = --dim / --heads = %u is over 256, the attention kernel's limit\n", cfg.head_dim);
        return 2;
    }
    /* under mpirun: the job (each process a share of every step; rank 0 writes) */
    cli_dist dist;
    if (cli_dist_join("wgml train", &dist) != 0) return 1;
    if (o.accum % (int)dist.size) {
        fprintf(stderr, "wgml train: --accum %d is not a multiple of the %u processes\n", o.accum, dist.size);
        cli_dist_leave(&dist);
        return 2;
    }
    bool made_out = false;
    int rc = 1;
    wgml_tokenizer *tok = NULL;
    wgml_dataset *data = NULL;
    wgml_context *ctx = NULL;
    wgml_engine *eng = NULL;
    wgml_model *model = NULL;
    wgml_trainer *tr = NULL;
    wgml_batcher *batches = NULL, *val = NULL;
    train_loop L = { .who = "wgml train" };
    train_run run = { .o = &o };
    out_options oo = { .overwrite = o.overwrite, .resuming = o.resume != NULL, .resumable = true };
    if (cli_dist_writes(&dist) && ckpt_prepare_out("wgml train", o.out, &oo, &made_out) != 0) goto done;

    /* ---- data: bytes, or the ids of a tokenizer.json ---- */
    wgml_status s = o.tokenizer ? wgml_tokenizer_load(o.tokenizer, &tok) : wgml_tokenizer_bytes(&tok);
    if (s == WGML_OK) s = wgml_dataset_load(o.data, tok, &(wgml_dataset_options){ .allow_bytes = true }, &data);
    if (s != WGML_OK) {
        fprintf(stderr, "wgml train: %s\n", wgml_last_error(NULL));
        goto done;
    }
    if (ckpt_fingerprint("wgml train", o.data, &run.data_bytes, &run.data_hash) != 0) goto done;
    if (o.resume && (run.data_bytes != resumed.data_bytes || run.data_hash != resumed.data_hash)) {
        fprintf(stderr, "wgml train: %s is not the file the checkpoint was trained on (its size or contents differ)\n", o.data);
        goto done;
    }
    uint32_t vocab = wgml_tokenizer_vocab_size(tok);
    size_t len = 0, ntok = wgml_dataset_tokens(data);
    const uint32_t *all = wgml_dataset_example(data, 0, NULL, &len);
    size_t nval = ntok / 10, ntrain = ntok - nval;
    if (ntrain < (size_t)o.context + 2 || nval < 2) {
        fprintf(stderr, "wgml train: %s has %zu tokens: too few for --context %d (needs at least %zu: %d for a training "
                "sequence plus 10%% held out)\n", o.data, ntok, o.context, min_tokens(o.context), o.context + 2);
        goto done;
    }
    double *counts = calloc(vocab, sizeof *counts), h = 0;
    int distinct = 0;
    if (counts) {
        for (size_t i = 0; i < ntrain; i++) counts[all[i]]++;
        for (uint32_t c = 0; c < vocab; c++)
            if (counts[c]) { double p = counts[c] / ntrain; h -= p * log(p); distinct++; }
        free(counts);
    }
    cfg.vocab_size = vocab;
    double split = (double)ntrain / (double)ntok;
    s = wgml_batcher_create(data, &(wgml_batcher_options){ .batch = (uint32_t)o.batch, .seq_len = (uint32_t)o.context, .packed = true,
                                                            .seed = o.seed, .part_begin = 0, .part_end = split }, &batches);
    if (s == WGML_OK)
        s = wgml_batcher_create(data, &(wgml_batcher_options){ .batch = (uint32_t)o.batch, .seq_len = (uint32_t)o.context,
                                                               .packed = true, .sequential = true, .part_begin = split,
                                                               .part_end = 1 }, &val);
    if (s == WGML_OK && o.resume) s = wgml_batcher_set_state(batches, &resumed.batcher);
    if (s != WGML_OK) {
        fprintf(stderr, "wgml train: %s\n", wgml_last_error(NULL));
        goto done;
    }

    /* ---- device, model, trainer ---- */
    if (cli_dist_context("wgml train", &dist, o.precision, &ctx) != 0) goto done;
    wgml_adapter_info info;
    wgml_context_info(ctx, &info);
    s = wgml_engine_create(ctx, &eng);
    if (s == WGML_OK && o.resume) s = wgml_model_load(eng, ckdir, &model);
    else if (s == WGML_OK) s = wgml_model_create(eng, &cfg, &model);
    if (s == WGML_OK && !o.resume) s = wgml_model_init_random(model, o.seed, 0.02f);
    wgml_trainer_desc td = { .batch = (uint32_t)o.batch, .seq_len = (uint32_t)o.context,
                             .beta1 = (float)o.beta1, .beta2 = (float)o.beta2, .eps = (float)o.eps,
                             .clip_norm = o.clip > 0 ? (float)o.clip : -1.0f,
                             .weight_decay = o.weight_decay > 0 ? (float)o.weight_decay : -1.0f,
                             .keep_attention_scores = cli_keep_scores(o.keep_scores, o.precision, &info), .comm = dist.comm,
                             .loss_scale = cli_loss_scale(o.precision, o.loss_scale) };
    if (s == WGML_OK) s = wgml_trainer_create(model, &td, &tr);
    char path[PATH_MAX];
    if (s == WGML_OK && o.resume) s = wgml_trainer_load_state(tr, cli_fmt_path(path, sizeof path, ckdir, "optimizer.safetensors"));
    if (s != WGML_OK) {
        fprintf(stderr, "wgml train: %s\n", wgml_last_error(ctx));
        goto done;
    }
    run.model = model;
    run.tr = tr;
    run.batches = batches;

    uint64_t nparams = wgml_model_numel(model);
    printf("adapter:  %s (%s, %s)\n", info.name, info.type, info.backend);
    printf("data:     %s: %llu bytes, %zu %s tokens (%d distinct); %zu for training, %zu held out for validation\n", o.data,
           (unsigned long long)run.data_bytes, ntok, o.tokenizer ? "BPE" : "byte", distinct, ntrain, nval);
    printf("unigram entropy of the training tokens: %.3f bits = %.3f nats per token (the loss of a model that knows only token "
           "frequencies; uniform would be %.3f nats)\n", h / log(2), h, log((double)vocab));
    printf("model:    %llu parameters: dim %d, %d layers, %d heads (%d kv), head_dim %d, ffn %d, vocab %u, %s head\n",
           (unsigned long long)nparams, o.dim, o.layers, o.heads, o.kv_heads, o.dim / o.heads, o.ffn, vocab, o.tied ? "tied" : "untied");
    printf("training: %d steps x %d micro-batch%s x %d sequences x %d tokens, AdamW lr %g (betas %g, %g, eps %g; warm-up %d, "
           "cosine to %g), clip %g, weight decay %g, seed %llu%s\n", o.steps, o.accum, o.accum > 1 ? "es" : "", o.batch,
           o.context, o.lr, o.beta1, o.beta2, o.eps, o.warmup, o.lr * o.min_lr_frac, o.clip, o.weight_decay,
           (unsigned long long)o.seed, td.keep_attention_scores ? ", keep_attention_scores on" : "");
    cli_print_precision(o.precision, &info, tr);
    if (o.resume) printf("resuming: %s, at step %d\n", ckdir, resumed.step);
    if (dist.comm) printf("processes: %u (mpirun), each %d of a step's %d micro-batches\n", dist.size, o.accum / (int)dist.size, o.accum);
    fflush(stdout);

    L = (train_loop){ .who = "wgml train", .ctx = ctx, .eng = eng, .tr = tr, .train = batches, .val = val,
                      .batch = (uint32_t)o.batch, .seq_len = (uint32_t)o.context,
                      .sched = { .steps = o.steps, .warmup = o.warmup, .lr = o.lr, .min_lr_frac = o.min_lr_frac },
                      .accum = o.accum, .eval_every = o.eval_every, .save_every = o.save_every, .save = save, .user = &run,
                      .out = o.out, .dist = dist.comm ? &dist : NULL };
    if (train_loop_init(&L, resumed.step, losses0, val0) != 0) goto done;
    int lr_rc = train_loop_run(&L);
    cli_print_skipped(tr);
    if (lr_rc != 0) {
        rc = lr_rc;
        goto done;
    }

    /* ---- results ---- */
    int tail = o.steps < 20 ? o.steps : 20;
    double train_tail = 0;
    for (int i = o.steps - tail; i < o.steps; i++) train_tail += L.losses[i];
    train_tail /= tail;
    int ran = o.steps - resumed.step;
    printf("done in %s: %.0f tokens/s overall. Final loss: train %.4f (mean of the last %d steps), validation %.4f nats/token "
           "= %.3f bits/token, against a unigram entropy of %.4f nats (%.3f bits)\n", cli_duration(L.elapsed),
           (double)ran * o.accum * o.batch * o.context / L.elapsed, train_tail, tail, L.last_val, L.last_val / log(2), h,
           h / log(2));
    wgml_tensor **params = malloc(sizeof *params * wgml_model_param_count(model));
    for (size_t i = 0; params && i < wgml_model_param_count(model); i++) params[i] = wgml_model_param(model, i, NULL);
    int same = params ? cli_dist_check_same("wgml train", &dist, params, wgml_model_param_count(model)) : -1;
    free(params);
    if (same != 0) goto done;
    if (!cli_dist_writes(&dist)) {   /* rank 0 writes the job's files */
        rc = 0;
        goto done;
    }
    s = wgml_model_save(model, o.out);
    if (s != WGML_OK) {
        fprintf(stderr, "wgml train: %s\n", wgml_last_error(ctx));
        goto done;
    }
    if (o.tokenizer && cli_copy_file("wgml train", o.tokenizer, cli_fmt_path(path, sizeof path, o.out, "tokenizer.json")) != 0) goto done;
    char title[512];
    const char *base = strrchr(o.data, '/');
    snprintf(title, sizeof title, "wgml train on %s: %llu parameters (dim %d, %d layers, context %d), %s", base ? base + 1 : o.data,
             (unsigned long long)nparams, o.dim, o.layers, o.context, info.name);
    if (train_loop_write_curves(&L, h, title) != 0) goto done;
    printf("wrote %s/config.json, %s/model.safetensors, %s/loss.svg, %s/loss.csv%s\n", o.out, o.out, o.out, o.out,
           o.tokenizer ? ", tokenizer.json" : "");
    rc = 0;

done:
    if (rc != 0 && made_out) rmdir(o.out);   /* a folder this run made, if it stayed empty */
    train_loop_free(&L);
    free(losses0);
    free(val0);
    wgml_trainer_destroy(tr);
    wgml_model_destroy(model);
    wgml_engine_destroy(eng);
    wgml_context_destroy(ctx);
    wgml_batcher_free(batches);
    wgml_batcher_free(val);
    wgml_dataset_free(data);
    wgml_tokenizer_free(tok);
    ckpt_state_free(&resumed);
    if (rc != 0) cli_dist_fail(&dist, rc);   /* the others would wait for this process */
    cli_dist_leave(&dist);
    return rc;
}
