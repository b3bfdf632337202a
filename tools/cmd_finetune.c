/* wgml finetune: adapts a pretrained model folder (anything wgml generate loads) to a
   text or JSONL file, with a LoRA adapter over the frozen base (the default) or every
   weight (--full), and writes the adapter in PEFT's format (or a whole model folder),
   the loss curve, and resumable checkpoints.

   Data: a text file (every token learned, packed into windows), or JSONL of {"text"},
   {"prompt", "completion"} (the completion learned) or {"messages"} (rendered with the
   model's chat template; the assistant's turns learned), one example per sequence, padded
   or cut to --context. A part of the data (--val-fraction) or --val-data gives the
   validation loss. The run shares wgml train's loop: progress at least once a second, a
   stop on a non-finite loss, checkpoints every --save-every steps and on SIGINT / SIGTERM,
   --resume. */
#include "checkpoint.h"
#include "cli.h"
#include "commands.h"
#include "model_files.h"
#include "dist.h"
#include "train_loop.h"
#include "wgml.h"

#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct ft_opts {
    const char *model, *data, *val_data, *out, *resume, *targets, *chat_template, *init_adapter, *dtype, *quantize;
    const char *precision;
    int rank, full, rslora, steps, batch, accum, context, warmup, eval_every, save_every, packing, keep_scores, overwrite;
    int loss_on_prompt;
    double alpha, dropout, lr, min_lr_frac, clip, weight_decay, beta1, beta2, eps, val_fraction, loss_scale;
    uint64_t seed;
} ft_opts;

static const ft_opts defaults = {
    .out = "finetune-out", .dtype = "auto", .targets = "all", .rank = 8, .alpha = 16, .steps = 100, .batch = 4, .accum = 1,
    .warmup = -1, .eval_every = 0, .packing = -1, .keep_scores = -1, .lr = -1, .min_lr_frac = 0.1, .clip = 1,
    .weight_decay = 0, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .val_fraction = 0.05, .seed = 42,
    .precision = "f32", .loss_scale = -1,
};

static const cli_flag ft_flags[] = {
    { "--model", CLI_STRING, offsetof(ft_opts, model), "the base: a model folder (config.json, safetensors, tokenizer.json)" },
    { "--data", CLI_STRING, offsetof(ft_opts, data), "training data: a text file, or .jsonl of {\"text\"}, {\"prompt\", "
      "\"completion\"} or {\"messages\"} records" },
    { "--out", CLI_STRING, offsetof(ft_opts, out), "output folder: the adapter (PEFT's files) or model, loss.csv, loss.svg, "
      "checkpoint-<step>/" },
    { "--lora-rank", CLI_INT, offsetof(ft_opts, rank), "LoRA rank r", 1, 4096 },
    { "--lora-alpha", CLI_DOUBLE, offsetof(ft_opts, alpha), "LoRA alpha (scale alpha / r)", 1e-6, 1e6 },
    { "--lora-dropout", CLI_DOUBLE, offsetof(ft_opts, dropout), "LoRA dropout: each target's input dropped with this "
      "probability while training", 0, 0.999 },
    { "--lora-targets", CLI_STRING, offsetof(ft_opts, targets), "projections with an adapter: all (every one the model has), or any of q,k,v,o,gate,up,down, "
      "and in (LFM2's convolution in_proj; o is LFM2's out_proj, gate/up/down its w1/w3/w2)" },
    { "--init-adapter", CLI_STRING, offsetof(ft_opts, init_adapter), "start from this LoRA adapter (PEFT's files: its rank, "
      "alpha, dropout and targets) instead of a new one" },
    { "--rslora", CLI_BOOL, offsetof(ft_opts, rslora), "scale alpha / sqrt(r) (rank-stabilised LoRA)" },
    { "--full", CLI_BOOL, offsetof(ft_opts, full), "train every weight instead of an adapter (loads f32 weights)" },
    { "--dtype", CLI_STRING, offsetof(ft_opts, dtype), MODEL_DTYPE_HELP " (the adapter trains over them frozen)" },
    { "--quantize", CLI_STRING, offsetof(ft_opts, quantize), MODEL_QUANTIZE_HELP " (QLoRA)" },
    { "--steps", CLI_INT, offsetof(ft_opts, steps), "optimizer steps", 1, 1e9 },
    { "--batch", CLI_INT, offsetof(ft_opts, batch), "sequences per micro-batch", 1, 1 << 16 },
    { "--accum", CLI_INT, offsetof(ft_opts, accum), "micro-batches per optimizer step, over all processes under mpirun (a "
      "multiple of their number)", 1, 1 << 16 },
    { "--context", CLI_INT, offsetof(ft_opts, context), "tokens per sequence (0: the model's max_position_embeddings, at most "
      "1024)", 0, 1 << 24 },
    { "--lr", CLI_DOUBLE, offsetof(ft_opts, lr), "peak learning rate (-1: 2e-4 for an adapter, 2e-5 with --full)", -1, 10 },
    { "--min-lr", CLI_DOUBLE, offsetof(ft_opts, min_lr_frac), "final learning rate as a fraction of --lr (cosine decay)", 0, 1 },
    { "--warmup", CLI_INT, offsetof(ft_opts, warmup), "linear warm-up steps, below --steps (-1: a tenth of them)", -1, 1e9 },
    { "--beta1", CLI_DOUBLE, offsetof(ft_opts, beta1), "AdamW's first-moment decay", 1e-6, 0.999999 },
    { "--beta2", CLI_DOUBLE, offsetof(ft_opts, beta2), "AdamW's second-moment decay", 1e-6, 0.999999 },
    { "--eps", CLI_DOUBLE, offsetof(ft_opts, eps), "AdamW's epsilon", 1e-30, 1 },
    { "--clip", CLI_DOUBLE, offsetof(ft_opts, clip), "global gradient-norm clip (0: none)", 0, 1e6 },
    { "--precision", CLI_STRING, offsetof(ft_opts, precision), PRECISION_HELP },
    { "--loss-scale", CLI_DOUBLE, offsetof(ft_opts, loss_scale), LOSS_SCALE_HELP, -1, 16777216 },
    { "--weight-decay", CLI_DOUBLE, offsetof(ft_opts, weight_decay), "AdamW weight decay", 0, 10 },
    { "--seed", CLI_U64, offsetof(ft_opts, seed), "seed of the adapter's initial values and of the batch order", 0, 0 },
    { "--chat-template", CLI_STRING, offsetof(ft_opts, chat_template), "chat format of messages records: chatml, smollm2, qwen2, "
      "llama3, llama3.1, zephyr (default: recognised from the model's template)" },
    { "--loss-on-prompt", CLI_BOOL, offsetof(ft_opts, loss_on_prompt), "learn prompts and every turn, not only completions and "
      "the assistant's turns" },
    { "--packing", CLI_INT, offsetof(ft_opts, packing), "1: pack the tokens into windows; 0: one example per sequence, padded; "
      "-1: 1 for a text file, 0 for JSONL", -1, 1 },
    { "--val-data", CLI_STRING, offsetof(ft_opts, val_data), "validation data (else the last --val-fraction of --data)" },
    { "--val-fraction", CLI_DOUBLE, offsetof(ft_opts, val_fraction), "the part of --data held out for validation (0: none)", 0, 0.5 },
    { "--eval-every", CLI_INT, offsetof(ft_opts, eval_every), "steps between validation losses (0: only at the end)", 0, 1e9 },
    { "--save-every", CLI_INT, offsetof(ft_opts, save_every), "steps between resumable checkpoints (0: none; SIGINT and SIGTERM "
      "write one too)", 0, 1e9 },
    { "--keep-scores", CLI_INT, offsetof(ft_opts, keep_scores), "keep attention's scores for the backward (-1: on a GPU, unless --precision f16 runs attention on the "
      "matrix units)", -1, 1 },
    { "--overwrite", CLI_BOOL, offsetof(ft_opts, overwrite), "replace a run already in --out" },
    { "--resume", CLI_STRING, offsetof(ft_opts, resume), "a checkpoint folder, or an --out holding some, to go on from" },
};
#define NFLAGS (sizeof ft_flags / sizeof ft_flags[0])
static const char *const may_change[] = { "--out", "--overwrite", "--resume", "--save-every", NULL };

/* Whether one of the flags in names (NULL-terminated) was on the command line. */
static bool given_any(const bool *given, const char *const *names)
{
    for (size_t k = 0; k < NFLAGS; k++)
        for (const char *const *n = names; given[k] && *n; n++)
            if (!strcmp(ft_flags[k].name, *n)) return true;
    return false;
}

typedef struct ft_run {
    ft_opts *o;
    const char *model_dir;
    wgml_model *model;
    wgml_lora *lora;
    wgml_trainer *tr;
    wgml_batcher *batches;
    uint64_t data_bytes, data_hash;
} ft_run;

/* The files of a tokenizer that go with a whole model folder. */
static const char *const tokenizer_files[] = { "tokenizer.json", "tokenizer_config.json", "chat_template.jinja" };

/* The weights (adapter or model, with the base's tokenizer files for a model) into dir. */
static int write_weights(ft_run *r, wgml_context *ctx, const char *dir)
{
    wgml_status s = r->lora ? wgml_lora_save(r->lora, dir, r->model_dir) : wgml_model_save(r->model, dir);
    if (s != WGML_OK) {
        fprintf(stderr, "wgml finetune: %s\n", wgml_last_error(ctx));
        return -1;
    }
    for (size_t i = 0; !r->lora && i < sizeof tokenizer_files / sizeof tokenizer_files[0]; i++) {
        char from[PATH_MAX], to[PATH_MAX];
        struct stat st;
        cli_fmt_path(from, sizeof from, r->model_dir, tokenizer_files[i]);
        if (stat(from, &st) != 0) continue;
        if (cli_copy_file("wgml finetune", from, cli_fmt_path(to, sizeof to, dir, tokenizer_files[i])) != 0) return -1;
    }
    return 0;
}

static int write_checkpoint(void *user, const char *dir)
{
    train_loop *L = user;
    ft_run *r = L->user;
    char path[PATH_MAX];
    if (write_weights(r, L->ctx, dir) != 0) return -1;
    if (wgml_trainer_save_state(r->tr, cli_fmt_path(path, sizeof path, dir, "optimizer.safetensors")) != WGML_OK) {
        fprintf(stderr, "wgml finetune: %s\n", wgml_last_error(L->ctx));
        return -1;
    }
    run_state st = { .command = "finetune", .step = L->step, .data_bytes = r->data_bytes, .data_hash = r->data_hash,
                     .losses = L->losses, .val_losses = L->val_loss };
    wgml_batcher_get_state(r->batches, &st.batcher);
    return ckpt_state_write("wgml finetune", dir, &st, ft_flags, NFLAGS, r->o);
}

static int save(train_loop *L, int step)
{
    ft_run *r = L->user;
    return ckpt_write("wgml finetune", r->o->out, step, 2, write_checkpoint, L);
}

/* The targets by wgml_lora_target bit: q, k, v, o (LFM2: out_proj), gate, up, down (LFM2:
   w1, w3, w2), in (LFM2's convolution in_proj). */
static const char *const target_names[8] = { "q", "k", "v", "o", "gate", "up", "down", "in" };

/* --lora-targets as wgml_lora_target bits ("all": WGML_LORA_ALL, every projection the
   model has); 0 after a message when a name is unknown. */
static uint32_t parse_targets(const char *list)
{
    if (!strcmp(list, "all")) return WGML_LORA_ALL;
    uint32_t bits = 0;
    const char *p = list;
    while (*p) {
        size_t n = strcspn(p, ",");
        int found = -1;
        for (int k = 0; k < 8; k++)
            if (strlen(target_names[k]) == n && strncmp(p, target_names[k], n) == 0) found = k;
        if (found < 0) {
            fprintf(stderr, "wgml finetune: --lora-targets: '%.*s' is not all or one of q, k, v, o, gate, up, down, in\n",
                    (int)n, p);
            return 0;
        }
        bits |= 1u << found;
        p += n + (p[n] == ',');
    }
    if (!bits) fprintf(stderr, "wgml finetune: --lora-targets names no projection\n");
    return bits;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

int cmd_finetune(int argc, char **argv)
{
    const char *who = "wgml finetune";
    ft_opts o = defaults;
    bool given[NFLAGS];
    int pr = cli_parse_given(argc, argv, ft_flags, NFLAGS, &o, "wgml finetune --model DIR --data FILE [options]",
                             "Fine-tunes a pretrained model with a LoRA adapter (or every weight with --full) and writes the "
                             "adapter in PEFT's format.", given);
    if (pr <= 0) return -pr;
    run_state resumed = { 0 };
    float *losses0 = NULL;
    double *val0 = NULL;
    char ckdir[PATH_MAX] = "";
    if (o.resume) {
        if (ckpt_find(who, o.resume, ckdir, sizeof ckdir) != 0) return 1;
        if (ckpt_state_read(who, ckdir, "finetune", &resumed, &losses0, &val0, ft_flags, NFLAGS, &o, given, may_change) != 0)
            return 2;
    }
    int rc = 2;
    uint32_t targets = o.full ? 0 : parse_targets(o.targets);
    if (!o.model || !o.data) {
        fprintf(stderr, "%s: --model and --data are required (see --help)\n", who);
        goto early;
    }
    if (!o.full && !targets) goto early;
    if (cli_check_precision(who, o.precision, o.loss_scale) != 0) goto early;
    if (o.init_adapter && (o.full || given_any(given, (const char *const[]){ "--lora-rank", "--lora-alpha", "--lora-targets", "--rslora", NULL }))) {
        fprintf(stderr, "%s: --init-adapter brings its own rank, alpha and targets (and is not for --full)\n", who);
        goto early;
    }
    wgml_weights weights;
    if (model_weights(who, o.dtype, o.quantize, &weights) != 0) goto early;
    if (o.full && o.quantize && o.quantize[0]) {
        fprintf(stderr, "%s: --full trains every weight in f32; --quantize is for LoRA\n", who);
        goto early;
    }
    if (o.full) weights = WGML_WEIGHTS_F32;
    if (o.lr < 0) o.lr = o.full ? 2e-5 : 2e-4;
    if (o.warmup < 0) o.warmup = o.steps / 10;
    else if (o.warmup >= o.steps) {
        fprintf(stderr, "%s: --warmup %d must be below --steps %d\n", who, o.warmup, o.steps);
        goto early;
    }
    if (o.resume && resumed.step >= o.steps) {
        fprintf(stderr, "%s: %s is at step %d of %d: nothing left to train\n", who, ckdir, resumed.step, o.steps);
        goto early;
    }
    rc = 1;
    /* under mpirun: the job (each process a share of every step; rank 0 writes) */
    cli_dist dist;
    if (cli_dist_join(who, &dist) != 0) goto early;
    if (o.accum % (int)dist.size) {
        fprintf(stderr, "%s: --accum %d is not a multiple of the %u processes\n", who, o.accum, dist.size);
        rc = 2;
        cli_dist_leave(&dist);
        goto early;
    }

    bool made_out = false;
    wgml_context *ctx = NULL;
    wgml_engine *eng = NULL;
    wgml_model *model = NULL;
    wgml_lora *lora = NULL;
    wgml_trainer *tr = NULL;
    wgml_tokenizer *tok = NULL;
    wgml_tokenizer_config tcfg = { 0 };
    wgml_dataset *data = NULL, *vdata = NULL;
    wgml_batcher *batches = NULL, *val = NULL;
    train_loop L = { .who = who };
    ft_run run = { .o = &o, .model_dir = o.model };
    out_options oo = { .overwrite = o.overwrite, .resuming = o.resume != NULL, .resumable = true, .input = o.model };
    if (cli_dist_writes(&dist) && ckpt_prepare_out(who, o.out, &oo, &made_out) != 0) goto done;

    if (cli_dist_context(who, &dist, o.precision, &ctx) != 0) goto done;
    wgml_adapter_info info;
    wgml_context_info(ctx, &info);
    /* a resumed --full run goes on from its checkpoint's weights; an adapter's base is --model */
    wgml_status s = wgml_engine_create(ctx, &eng);
    if (s == WGML_OK)
        s = wgml_model_load_with(eng, o.resume && o.full ? ckdir : o.model, &(wgml_model_load_options){ .weights = weights }, &model);
    if (s != WGML_OK) {
        fprintf(stderr, "%s: %s\n", who, wgml_last_error(ctx));
        goto done;
    }
    const wgml_model_config *cfg = wgml_model_get_config(model);
    if (model_tokenizer(who, o.model, cfg, &tok) != 0) goto done;
    wgml_dataset_options dopt;
    if (model_data_options(who, o.model, cfg, tok, o.chat_template, o.loss_on_prompt, &tcfg, &dopt) != 0) goto done;
    s = wgml_dataset_load(o.data, tok, &dopt, &data);
    if (s == WGML_OK && o.val_data) s = wgml_dataset_load(o.val_data, tok, &dopt, &vdata);
    if (s != WGML_OK) {
        fprintf(stderr, "%s: %s\n", who, wgml_last_error(NULL));
        goto done;
    }
    if (ckpt_fingerprint(who, o.data, &run.data_bytes, &run.data_hash) != 0) goto done;
    if (o.resume && (run.data_bytes != resumed.data_bytes || run.data_hash != resumed.data_hash)) {
        fprintf(stderr, "%s: %s is not the file the checkpoint was trained on (its size or contents differ)\n", who, o.data);
        goto done;
    }
    bool packed = o.packing >= 0 ? o.packing : !ends_with(o.data, ".jsonl");
    uint32_t T = o.context ? (uint32_t)o.context : (cfg->max_position_embeddings < 1024 ? cfg->max_position_embeddings : 1024);
    if (T > cfg->max_position_embeddings) {
        fprintf(stderr, "%s: --context %u is beyond the model's %u positions (max_position_embeddings)\n", who, T,
                cfg->max_position_embeddings);
        goto done;
    }
    double split = o.val_data ? 1.0 : 1.0 - o.val_fraction;
    wgml_batcher_options bo = { .batch = (uint32_t)o.batch, .seq_len = T, .packed = packed, .seed = o.seed, .part_end = split };
    const char *part = o.data;
    s = wgml_batcher_create(data, &bo, &batches);
    if (s == WGML_OK && (o.val_data || o.val_fraction > 0)) {
        wgml_batcher_options vo = { .batch = (uint32_t)o.batch, .seq_len = T, .packed = packed, .sequential = true,
                                    .part_begin = o.val_data ? 0 : split, .part_end = 1 };
        part = o.val_data ? o.val_data : "the validation part (--val-fraction)";
        s = wgml_batcher_create(vdata ? vdata : data, &vo, &val);
    }
    if (s == WGML_OK && o.resume) s = wgml_batcher_set_state(batches, &resumed.batcher);
    if (s != WGML_OK) {
        fprintf(stderr, "%s: %s: %s\n", who, part, wgml_last_error(NULL));
        goto done;
    }
    wgml_batcher_stats bst;
    wgml_batcher_get_stats(batches, &bst);

    /* the adapter (new, or the checkpoint's), and the trainer */
    char path[PATH_MAX];
    if (!o.full && (o.resume || o.init_adapter)) s = wgml_lora_load(model, o.resume ? ckdir : o.init_adapter, &lora);
    else if (!o.full)
        s = wgml_lora_create(model, &(wgml_lora_desc){ .rank = (uint32_t)o.rank, .alpha = (float)o.alpha, .dropout = (float)o.dropout,
                                                        .targets = targets, .rslora = o.rslora != 0 }, o.seed, &lora);
    wgml_trainer_desc td = { .batch = (uint32_t)o.batch, .seq_len = T, .beta1 = (float)o.beta1, .beta2 = (float)o.beta2,
                             .eps = (float)o.eps, .clip_norm = o.clip > 0 ? (float)o.clip : -1.0f,
                             .weight_decay = o.weight_decay > 0 ? (float)o.weight_decay : -1.0f, .lora = lora,
                             .keep_attention_scores = cli_keep_scores(o.keep_scores, o.precision, &info), .seed = o.seed,
                             .comm = dist.comm, .loss_scale = cli_loss_scale(o.precision, o.loss_scale) };
    if (s == WGML_OK) s = wgml_trainer_create(model, &td, &tr);
    if (s == WGML_OK && o.resume) s = wgml_trainer_load_state(tr, cli_fmt_path(path, sizeof path, ckdir, "optimizer.safetensors"));
    if (s != WGML_OK) {
        fprintf(stderr, "%s: %s\n", who, wgml_last_error(ctx));
        goto done;
    }
    run.model = model;
    run.lora = lora;
    run.tr = tr;
    run.batches = batches;
    wgml_context_stats cs;
    wgml_context_stats_get(ctx, &cs);
    uint64_t total = wgml_model_numel(model) + wgml_lora_numel(lora), trained = lora ? wgml_lora_numel(lora) : total;

    static const char *const kinds[] = { "", "text", "prompt and completion", "chat" };
    printf("adapter:  %s (%s, %s)\n", info.name, info.type, info.backend);
    printf("model:    %s: %llu parameters, %u layers, vocab %u\n", o.model, (unsigned long long)wgml_model_numel(model),
           cfg->num_hidden_layers, cfg->vocab_size);
    char chat[64] = "";
    if (wgml_dataset_kind(data) == WGML_DATA_MESSAGES)
        snprintf(chat, sizeof chat, " in the %s chat format", wgml_chat_format_name(dopt.chat_format));
    printf("data:     %s: %zu %s example%s%s, %zu tokens (%zu learned); %s, %u tokens per sequence%s%s%s\n", o.data,
           wgml_dataset_examples(data), kinds[wgml_dataset_kind(data)], wgml_dataset_examples(data) == 1 ? "" : "s", chat, wgml_dataset_tokens(data),
           wgml_dataset_trained_tokens(data), packed ? "packed" : "one example per sequence", T,
           bst.cut ? cli_fmt(" (%.0f examples cut to fit", (double)bst.cut) : "",
           bst.cut_empty ? cli_fmt(", %.0f of them with nothing left to learn", (double)bst.cut_empty) : "", bst.cut ? ")" : "");
    if (val) printf("validation: %s\n", o.val_data ? o.val_data : cli_fmt("the last %.3g of the data", o.val_fraction));
    char on[64] = "";
    for (int k = 0; lora && k < 8; k++)
        if (wgml_lora_get_desc(lora)->targets & (1u << k))
            snprintf(on + strlen(on), sizeof on - strlen(on), "%s%s", on[0] ? "," : "", target_names[k]);
    char wname[128];
    if (lora)
        printf("training: LoRA rank %u, alpha %g (scale %g), on %s%s over frozen %s weights (%.1f MiB): %llu trainable "
               "parameters of %llu (%.2f%%)\n", wgml_lora_get_desc(lora)->rank, wgml_lora_get_desc(lora)->alpha,
               wgml_lora_scale(lora), on, o.init_adapter ? " (from --init-adapter)" : "", model_weights_name(model, wname, sizeof wname),
               wgml_model_weight_bytes(model) / 1048576.0, (unsigned long long)trained, (unsigned long long)total,
               100.0 * trained / total);
    else printf("training: every weight: %llu trainable parameters\n", (unsigned long long)trained);
    printf("          %d steps x %d micro-batch%s x %d sequences, AdamW lr %g (betas %g, %g, eps %g; warm-up %d, cosine to %g), "
           "clip %g, weight decay %g, seed %llu; %.1f MiB of GPU memory in tensors\n", o.steps, o.accum, o.accum > 1 ? "es" : "",
           o.batch, o.lr, o.beta1, o.beta2, o.eps, o.warmup, o.lr * o.min_lr_frac, o.clip, o.weight_decay,
           (unsigned long long)o.seed, cs.device_bytes / 1048576.0);
    cli_print_precision(o.precision, &info, tr);
    if (o.resume) printf("resuming: %s, at step %d\n", ckdir, resumed.step);
    if (dist.comm) printf("processes: %u (mpirun), each %d of a step's %d micro-batches\n", dist.size, o.accum / (int)dist.size, o.accum);
    fflush(stdout);

    L = (train_loop){ .who = who, .ctx = ctx, .eng = eng, .tr = tr, .train = batches, .val = val, .batch = (uint32_t)o.batch,
                      .seq_len = T, .sched = { .steps = o.steps, .warmup = o.warmup, .lr = o.lr, .min_lr_frac = o.min_lr_frac },
                      .accum = o.accum, .eval_every = o.eval_every, .save_every = o.save_every, .save = save, .user = &run,
                      .out = o.out, .dist = dist.comm ? &dist : NULL };
    if (train_loop_init(&L, resumed.step, losses0, val0) != 0) goto done;
    int lr_rc = train_loop_run(&L);
    cli_print_skipped(tr);
    if (lr_rc != 0) {
        rc = lr_rc;
        goto done;
    }
    int tail = o.steps < 20 ? o.steps : 20;
    double train_tail = 0;
    for (int i = o.steps - tail; i < o.steps; i++) train_tail += L.losses[i];
    train_tail /= tail;
    printf("done in %s: %.0f tokens/s. Final loss: train %.4f (mean of the last %d steps)%s\n", cli_duration(L.elapsed),
           (double)(o.steps - resumed.step) * o.accum * o.batch * T / L.elapsed, train_tail, tail,
           val ? cli_fmt(", validation %.4f", L.last_val) : "");
    size_t nt = lora ? wgml_lora_param_count(lora) : wgml_model_param_count(model);
    wgml_tensor **trained_t = malloc(sizeof *trained_t * (nt ? nt : 1));
    for (size_t i = 0; trained_t && i < nt; i++)
        trained_t[i] = lora ? wgml_lora_param(lora, i, NULL) : wgml_model_param(model, i, NULL);
    int same = trained_t ? cli_dist_check_same(who, &dist, trained_t, nt) : -1;
    free(trained_t);
    if (same != 0) goto done;
    if (!cli_dist_writes(&dist)) {   /* rank 0 writes the job's files */
        rc = 0;
        goto done;
    }
    if (write_weights(&run, ctx, o.out) != 0) goto done;
    char title[512];
    snprintf(title, sizeof title, "wgml finetune of %s on %s, %s", o.model, o.data, lora ? "LoRA" : "every weight");
    if (train_loop_write_curves(&L, NAN, title) != 0) goto done;
    if (lora) printf("wrote %s/adapter_config.json, %s/adapter_model.safetensors (PEFT), %s/loss.svg, %s/loss.csv\n", o.out, o.out,
                     o.out, o.out);
    else printf("wrote %s/config.json, %s/model.safetensors, the tokenizer, %s/loss.svg, %s/loss.csv\n", o.out, o.out, o.out, o.out);
    rc = 0;
done:
    if (rc != 0 && made_out) rmdir(o.out);
    train_loop_free(&L);
    wgml_trainer_destroy(tr);
    wgml_lora_destroy(lora);
    wgml_model_destroy(model);
    wgml_engine_destroy(eng);
    wgml_context_destroy(ctx);
    wgml_batcher_free(batches);
    wgml_batcher_free(val);
    wgml_dataset_free(data);
    wgml_dataset_free(vdata);
    wgml_tokenizer_config_clear(&tcfg);
    wgml_tokenizer_free(tok);
    if (rc != 0) cli_dist_fail(&dist, rc);   /* the others would wait for this process */
    cli_dist_leave(&dist);
early:
    free(losses0);
    free(val0);
    ckpt_state_free(&resumed);
    return rc;
}
