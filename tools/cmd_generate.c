/* wgml generate: loads a checkpoint (one wgml train wrote, or a Hugging Face folder of a
   family wgml runs: config.json, safetensors in f32/f16/bf16 or MLX 4/8-bit, tokenizer.json)
   and optionally a LoRA adapter (run unmerged), runs the prompt through the model in one
   pass, then samples one token at a time with a KV cache, printing each as it comes, and
   reports prefill and decode speeds.

   Sampling: wgml_sampler_next_gpu applies the penalties, temperature, top-k, top-p and
   min-p and draws, all sequences of a step in one call (the GPU does the work per
   vocabulary entry; the host reads back a few candidates per sequence). Defaults the
   command line leaves out come from generation_config.json; --stop ends the text before a
   string, matched across tokens (text that may begin it is held back). When the cache is
   full (a model trained on short contexts), the most recent half of the text is run again
   as a new prompt and generation goes on. */
#include "cli.h"
#include "commands.h"
#include "decode.h"
#include "dist.h"
#include "model_files.h"
#include "wgml.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct gen_opts {
    const char *model, *adapter, *prompt, *prompt_file, *stop, *dtype, *quantize, *precision;
    int tokens, context, bos, ignore_eos, n;
    sample_opts sp;
} gen_opts;

static const gen_opts defaults = { .model = "out", .dtype = "auto", .prompt = "The ", .tokens = 200, .bos = -1, .n = 1,
                                   .precision = "f32", .sp = SAMPLE_DEFAULTS };

static const cli_flag gen_flags[] = {
    { "--model", CLI_STRING, offsetof(gen_opts, model), "checkpoint folder (config.json, *.safetensors, tokenizer.json) or file" },
    { "--adapter", CLI_STRING, offsetof(gen_opts, adapter), "a LoRA adapter folder (PEFT's files, e.g. wgml finetune's --out), "
      "run unmerged (wgml merge folds one in)" },
    { "--dtype", CLI_STRING, offsetof(gen_opts, dtype), MODEL_DTYPE_HELP },
    { "--quantize", CLI_STRING, offsetof(gen_opts, quantize), MODEL_QUANTIZE_HELP },
    { "--precision", CLI_STRING, offsetof(gen_opts, precision), INFER_PRECISION_HELP },
    { "--prompt", CLI_STRING, offsetof(gen_opts, prompt), "text to continue" },
    { "--prompt-file", CLI_STRING, offsetof(gen_opts, prompt_file), "read the text to continue from this file (-: standard "
      "input), at most 16 MiB" },
    { "--tokens", CLI_INT, offsetof(gen_opts, tokens), "tokens to generate", 0, 1e9 },
    { "--n", CLI_INT, offsetof(gen_opts, n), "completions of the prompt, decoded together (each sampled with seed + i; "
      "printed when all are done)", 1, 1024 },
    SAMPLE_FLAGS(gen_opts, sp),
    { "--stop", CLI_STRING, offsetof(gen_opts, stop), "stop before this text (matched across token boundaries)" },
    { "--context", CLI_INT, offsetof(gen_opts, context), "KV cache positions (0: prompt + tokens, at most "
      "max_position_embeddings; more is refused)", 0, 1 << 24 },
    { "--bos", CLI_INT, offsetof(gen_opts, bos), "what starts the prompt: -1 the tokenizer's template (its post_processor, as "
      "Hugging Face encodes a prompt: <s> for Llama 2 and Mistral), 1 config.json's bos_token_id, 0 nothing", -1, 1 },
    { "--ignore-eos", CLI_BOOL, offsetof(gen_opts, ignore_eos), "go on past end-of-sequence tokens" },
};
#define NFLAGS (sizeof gen_flags / sizeof gen_flags[0])

/* --n > 1: n completions of the prompt ids[0..n_ids) decoded together in a wgml_kv_batch
   (each sequence's sampler seeded with seed + i), printed in order when all are done.
   Each stops at an EOS id, its stop string, the token count or the context. */
static int generate_batch(const gen_opts *o, wgml_context *ctx, wgml_engine *eng, wgml_model *m,
                          const wgml_tokenizer *tok, const uint32_t *ids, size_t n_ids, uint32_t cap)
{
    const char *who = "wgml generate";
    const wgml_model_config *cfg = wgml_model_get_config(m);
    uint32_t ns = (uint32_t)o->n, V = cfg->vocab_size;
    int rc = 1;
    wgml_kv_batch *b = NULL;
    wgml_tensor *logits = NULL, *last = NULL;
    wgml_sampler **smp = calloc(ns, sizeof *smp);
    uint32_t *hist = malloc(sizeof *hist * (size_t)ns * cap), *next = calloc(ns, sizeof *next);
    size_t *len = calloc(ns, sizeof *len);
    bool *done = calloc(ns, sizeof *done);
    wgml_sampler **live = calloc(ns, sizeof *live);   /* smp[i], NULL once sequence i is done */
    const uint32_t **hp = calloc(ns, sizeof *hp);
    char *text = NULL;
    if (!smp || !hist || !next || !len || !done || !live || !hp) {
        fprintf(stderr, "%s: out of host memory\n", who);
        goto out;
    }
    wgml_sampling set = { .temperature = (float)o->sp.temperature, .top_k = (uint32_t)o->sp.top_k, .top_p = (float)o->sp.top_p,
                          .min_p = (float)o->sp.min_p, .repetition_penalty = (float)o->sp.repetition_penalty,
                          .presence_penalty = (float)o->sp.presence_penalty, .frequency_penalty = (float)o->sp.frequency_penalty };
    for (uint32_t i = 0; i < ns; i++)
        if (wgml_sampler_create(&set, V, o->sp.seed + i, &smp[i]) != WGML_OK) {
            fprintf(stderr, "%s: %s\n", who, wgml_last_error(NULL));
            goto out;
        }
    wgml_status s = wgml_kv_batch_create(m, cap, ns, &b);
    if (s == WGML_OK) s = wgml_tensor_create(ctx, WGML_F32, 2, (size_t[]){ ns, V }, &logits);
    if (s == WGML_OK) s = wgml_tensor_create(ctx, WGML_F32, 1, (size_t[]){ V }, &last);
    /* the prompt into every sequence; each samples its first token from it */
    double t0 = cli_now();
    for (uint32_t i = 0; i < ns && s == WGML_OK; i++) {
        memcpy(hist + (size_t)i * cap, ids, n_ids * sizeof *ids);
        len[i] = n_ids;
        hp[i] = hist + (size_t)i * cap;
        s = wgml_kv_batch_prefill(b, i, ids, (uint32_t)n_ids, last);
        if (s == WGML_OK) s = wgml_sampler_next_gpu(eng, &smp[i], 1, last, &hp[i], &len[i], &next[i]);
    }
    double t_prefill = cli_now() - t0;
    fprintf(stderr, "%u completions decoded together, context %u each; sampling: ", ns, cap);
    sample_opts_describe(&o->sp, stderr);
    fprintf(stderr, " (seeds %llu..%llu)\n", (unsigned long long)o->sp.seed, (unsigned long long)(o->sp.seed + ns - 1));
    t0 = cli_now();
    int steps = 0;
    for (int t = 0; s == WGML_OK && t < o->tokens; t++) {
        bool any = false;
        for (uint32_t i = 0; i < ns; i++) {
            if (done[i]) continue;
            bool eos = false;
            for (uint32_t e = 0; e < cfg->num_eos_token_ids; e++) eos |= next[i] == cfg->eos_token_ids[e];
            if ((eos && !o->ignore_eos) || len[i] == cap) { done[i] = true; continue; }
            hist[(size_t)i * cap + len[i]++] = next[i];
            if (t + 1 == o->tokens || len[i] == cap) done[i] = true;
            any |= !done[i];
        }
        if (!any) break;
        /* a finished sequence takes its last token again: its row is not read */
        for (uint32_t i = 0; i < ns; i++) next[i] = hist[(size_t)i * cap + len[i] - 1];
        s = wgml_model_decode_batch(b, next, logits);
        for (uint32_t i = 0; i < ns; i++) live[i] = done[i] ? NULL : smp[i];
        if (s == WGML_OK) s = wgml_sampler_next_gpu(eng, live, ns, logits, hp, len, next);
        steps++;
    }
    if (s != WGML_OK) {
        fprintf(stderr, "%s: %s\n", who, wgml_last_error(ctx));
        goto out;
    }
    double t_decode = cli_now() - t0;
    size_t room = 0, total = 0;
    for (uint32_t i = 0; i < ns; i++) {
        total += len[i] - n_ids;
        size_t need = 0;
        wgml_status ds = wgml_tokenizer_decode(tok, hist + (size_t)i * cap + n_ids, len[i] - n_ids, text, room, &need);
        if (ds == WGML_ERROR_SHAPE) {
            free(text);
            room = need + 1;
            text = malloc(room);
            if (!text) {
                fprintf(stderr, "%s: out of host memory\n", who);
                goto out;
            }
            ds = wgml_tokenizer_decode(tok, hist + (size_t)i * cap + n_ids, len[i] - n_ids, text, room, &need);
        }
        if (ds != WGML_OK) {
            fprintf(stderr, "%s: %s\n", who, wgml_last_error(NULL));
            goto out;
        }
        if (o->stop && o->stop[0]) {   /* the text ends before its stop string */
            for (size_t k = 0; k + strlen(o->stop) <= need; k++)
                if (!memcmp(text + k, o->stop, strlen(o->stop))) { need = k; break; }
        }
        printf("---- %u\n%s", i + 1, o->prompt);
        fwrite(text, 1, need, stdout);
        printf("\n");
    }
    fflush(stdout);
    fprintf(stderr, "----\nprefill: %u x %zu tokens in %.3f s; decode: %d steps of %u sequences in %.3f s (%.1f tokens/s)\n", ns,
            n_ids, t_prefill, steps, ns, t_decode, t_decode > 0 ? total / t_decode : 0.0);
    rc = 0;
out:
    for (uint32_t i = 0; smp && i < ns; i++) wgml_sampler_free(smp[i]);
    free(smp); free(hist); free(next); free(len); free(done); free(live); free(hp); free(text);
    wgml_tensor_release(logits);
    wgml_tensor_release(last);
    wgml_kv_batch_destroy(b);
    return rc;
}

int cmd_generate(int argc, char **argv)
{
    gen_opts o = defaults;
    bool given[NFLAGS] = { false };
    int pr = cli_parse_given(argc, argv, gen_flags, NFLAGS, &o, "wgml generate [options]",
                             "Generates text from a checkpoint with a KV cache: the prompt in one pass, then token by token. "
                             "Sampling settings the command line leaves out come from the folder's generation_config.json.",
                             given);
    if (pr <= 0) return -pr;
    if (generation_config("wgml generate", o.model, &o.sp, given, gen_flags, NFLAGS) != 0) return 1;
    if (o.stop && !o.stop[0]) {
        fprintf(stderr, "wgml generate: --stop is empty\n");
        return 2;
    }
    char *prompt_text = NULL;   /* --prompt-file's */
    if (o.prompt_file) {
        for (size_t f = 0; f < NFLAGS; f++)
            if (given[f] && !strcmp(gen_flags[f].name, "--prompt")) {
                fprintf(stderr, "wgml generate: give --prompt or --prompt-file, not both\n");
                return 2;
            }
        size_t len = 0;
        const char *path = strcmp(o.prompt_file, "-") == 0 ? "/dev/stdin" : o.prompt_file;
        prompt_text = (char *)cli_read_file("wgml generate", path, (size_t)16 << 20, &len);
        if (!prompt_text) return 1;
        if (strlen(prompt_text) != len) {
            fprintf(stderr, "wgml generate: %s holds a NUL byte\n", o.prompt_file);
            free(prompt_text);
            return 1;
        }
        o.prompt = prompt_text;
    }

    wgml_weights weights;
    if (model_weights("wgml generate", o.dtype, o.quantize, &weights) != 0 ||
        cli_check_precision("wgml generate", o.precision, -1) != 0) {
        free(prompt_text);
        return 2;
    }
    wgml_context *ctx = NULL;
    wgml_engine *eng = NULL;
    if (model_device("wgml generate", o.precision, &ctx, &eng) != 0) {
        free(prompt_text);
        return 1;
    }
    wgml_adapter_info info;
    wgml_context_info(ctx, &info);

    int rc = 1;
    wgml_model *m = NULL;
    wgml_tokenizer *tok = NULL;
    wgml_kv_cache *cache = NULL;
    uint32_t *ids = NULL, *hist = NULL;
    sampler sm = { 0 };
    printer pt = { 0 };

    wgml_context_stats st0, st1, st2;
    wgml_context_stats_get(ctx, &st0);
    double t0 = cli_now();
    if (model_open("wgml generate", ctx, eng, o.model, weights, o.adapter, false, &m, NULL) != 0) goto done;
    double t_load = cli_now() - t0;
    wgml_context_stats_get(ctx, &st1);
    const wgml_model_config *cfg = wgml_model_get_config(m);

    if (model_tokenizer("wgml generate", o.model, cfg, &tok) != 0) goto done;
    wgml_status s;

    size_t plen = strlen(o.prompt), n = 0;
    ids = malloc(sizeof *ids * (2 * plen + 2));   /* ByteLevel's add_prefix_space can double */
    if (!ids) {
        fprintf(stderr, "wgml generate: out of host memory for the prompt\n");
        goto done;
    }
    size_t at = 0;
    const uint32_t *prefix;
    size_t nprefix;
    wgml_tokenizer_specials(tok, &prefix, &nprefix, NULL, NULL);
    if (o.bos == 1) {
        if (cfg->bos_token_id < 0) {
            fprintf(stderr, "wgml generate: --bos 1: config.json has no bos_token_id\n");
            goto done;
        }
        ids[at++] = (uint32_t)cfg->bos_token_id;
    } else if (o.bos < 0 && nprefix) {
        uint32_t *more = realloc(ids, sizeof *ids * (2 * plen + 2 + nprefix));
        if (!more) {
            fprintf(stderr, "wgml generate: out of host memory for the prompt\n");
            goto done;
        }
        ids = more;
        memcpy(ids, prefix, nprefix * sizeof *ids);
        at = nprefix;
    }
    if (wgml_tokenizer_encode(tok, o.prompt, plen, ids + at, 2 * plen + 1, &n) != WGML_OK) {
        fprintf(stderr, "wgml generate: cannot encode the prompt: %s\n", wgml_last_error(NULL));
        goto done;
    }
    n += at;
    if (n == 0) {
        fprintf(stderr, "wgml generate: the prompt is empty (give --prompt, or --bos)\n");
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= cfg->vocab_size) {
            fprintf(stderr, "wgml generate: the tokenizer gives id %u, beyond the model's vocabulary of %u\n", ids[i], cfg->vocab_size);
            goto done;
        }

    if ((uint32_t)o.context > cfg->max_position_embeddings) {
        fprintf(stderr, "wgml generate: --context %d is beyond the %u positions the model was trained for "
                "(max_position_embeddings in config.json)\n", o.context, cfg->max_position_embeddings);
        goto done;
    }
    uint32_t cap = (uint32_t)o.context;
    if (!cap) {
        uint64_t want = n + (uint64_t)o.tokens;
        cap = (uint32_t)(want < cfg->max_position_embeddings ? want : cfg->max_position_embeddings);
    }
    if (cap < 2) cap = 2;
    if (n > cap) {   /* keep the end of a long prompt */
        size_t keep = cap - cap / 4;
        fprintf(stderr, "wgml generate: the prompt has %zu tokens; keeping its last %zu (context %u)\n", n, keep, cap);
        memmove(ids, ids + (n - keep), keep * sizeof *ids);
        n = keep;
    }
    hist = malloc(sizeof *hist * cap);
    if (!hist) {
        fprintf(stderr, "wgml generate: out of host memory\n");
        goto done;
    }
    memcpy(hist, ids, n * sizeof *ids);
    size_t nhist = n;
    if (o.n > 1) {
        rc = generate_batch(&o, ctx, eng, m, tok, ids, n, cap);
        goto done;
    }

    s = wgml_kv_cache_create(m, cap, &cache);
    wgml_context_stats_get(ctx, &st2);
    if (s != WGML_OK) {
        fprintf(stderr, "wgml generate: %s\n", wgml_last_error(ctx));
        goto done;
    }
    if (sampler_init("wgml generate", &sm, ctx, eng, cfg->vocab_size, &o.sp) != 0) goto done;
    wgml_tensor *logits = sm.logits;

    fprintf(stderr, "model: %s%s%s: %llu parameters, %u layers, vocab %u, loaded in %.2f s on %s (%s)\n", o.model,
            o.adapter ? " with the adapter " : "", o.adapter ? o.adapter : "", (unsigned long long)wgml_model_numel(m),
            cfg->num_hidden_layers, cfg->vocab_size, t_load, info.name, info.backend);
    char wname[128];
    fprintf(stderr, "memory: %.2f MiB of weights%s (%s) and %.2f MiB of KV cache on the GPU\n",
            (double)(st1.device_bytes - st0.device_bytes) / 1048576.0, o.adapter ? " and adapter" : "",
            model_weights_name(m, wname, sizeof wname), (double)(st2.device_bytes - st1.device_bytes) / 1048576.0);
    fprintf(stderr, "sampling: ");
    sample_opts_describe(&o.sp, stderr);
    fprintf(stderr, "; %d tokens, context %u\n", o.tokens, cap);
    fprintf(stderr, "----\n");
    fputs(o.prompt, stdout);
    fflush(stdout);

    pt = (printer){ .tok = tok, .stop = o.stop, .stop_len = o.stop ? strlen(o.stop) : 0 };
    uint32_t next = 0;
    double t1 = cli_now();
    s = wgml_model_decode(cache, ids, (uint32_t)n, logits);
    if (s == WGML_OK && o.tokens > 0) s = sampler_next(&sm, hist, nhist, &next);
    double t_prefill = cli_now() - t1, t_first = 0, t_decode = 0, t_shift = 0;
    int generated = 0, decoded = 0, shifts = 0;
    while (s == WGML_OK && generated < o.tokens) {
        bool eos = false;
        for (uint32_t e = 0; e < cfg->num_eos_token_ids; e++) eos |= next == cfg->eos_token_ids[e];
        if (eos && !o.ignore_eos) break;
        if (!printer_emit(&pt, next)) {
            fprintf(stderr, "wgml generate: out of host memory\n");
            goto done;
        }
        if (pt.stopped || ++generated == o.tokens) break;
        double t2 = cli_now();
        if (nhist == cap) {   /* full: run the most recent half again as a fresh prompt */
            size_t keep = cap / 2;
            memmove(hist, hist + (nhist - keep), keep * sizeof *hist);
            nhist = keep;
            wgml_kv_cache_reset(cache);
            s = wgml_model_decode(cache, hist, (uint32_t)nhist, logits);
            if (s == WGML_OK) s = wgml_context_sync(ctx);
            shifts++;
            t_shift += cli_now() - t2;
            t2 = cli_now();
        }
        hist[nhist++] = next;
        if (s == WGML_OK) s = wgml_model_decode(cache, &next, 1, logits);
        if (s == WGML_OK) s = sampler_next(&sm, hist, nhist, &next);
        if (decoded++ == 0) t_first = cli_now() - t2;   /* compiles the single-token kernels */
        else t_decode += cli_now() - t2;
    }
    printer_finish(&pt);
    printf("\n");
    fflush(stdout);
    if (s != WGML_OK) {
        fprintf(stderr, "wgml generate: %s\n", wgml_last_error(ctx));
        goto done;
    }
    /* the decode rate leaves out the first single-token step, which compiles its kernels
       (shown apart); the prefill time includes compiling the prompt's kernels */
    fprintf(stderr, "----\nprefill: %zu tokens in %.3f s (%.1f tokens/s); decode: first token %.1f ms, then %d tokens in %.3f s "
            "(%.1f tokens/s)", n, t_prefill, n / t_prefill, t_first * 1e3, decoded > 1 ? decoded - 1 : 0, t_decode,
            decoded > 1 ? (decoded - 1) / t_decode : 0.0);
    if (shifts) fprintf(stderr, "; %d context shift%s (%.3f s)", shifts, shifts > 1 ? "s" : "", t_shift);
    fprintf(stderr, "\n");
    rc = 0;

done:
    free(prompt_text);
    sampler_free(&sm);
    free(pt.pending);
    free(ids);
    free(hist);
    wgml_kv_cache_destroy(cache);
    wgml_tokenizer_free(tok);
    wgml_model_destroy(m);
    wgml_engine_destroy(eng);
    wgml_context_destroy(ctx);
    return rc;
}
