/* wgml generate: loads a checkpoint (one wgml train wrote, or a Hugging Face Llama-family
   folder: config.json, safetensors in f32/f16/bf16 or MLX 4/8-bit, tokenizer.json) and
   optionally a LoRA adapter (run unmerged), runs
   the prompt through the model in one pass, then samples one token at a time with a KV
   cache, printing each as it comes, and reports prefill and decode speeds.

   Sampling: wgml_top_k picks the k most likely tokens on the GPU; they and the logits come
   back in one read, and one is drawn from softmax(logit / temperature) over the k on the
   host.
   Temperature 0 is greedy. When the cache is full (a model trained on short contexts),
   the most recent half of the text is run again as a new prompt and generation goes on. */
#include "cli.h"
#include "commands.h"
#include "model_files.h"
#include "wgml.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct gen_opts {
    const char *model, *adapter, *prompt;
    int tokens, top_k, context, bos, ignore_eos;
    double temperature;
    uint64_t seed;
} gen_opts;

static const gen_opts defaults = { .model = "out", .prompt = "The ", .tokens = 200, .top_k = 40, .temperature = 0.8, .seed = 1, .bos = -1 };

static const cli_flag gen_flags[] = {
    { "--model", CLI_STRING, offsetof(gen_opts, model), "checkpoint folder (config.json, *.safetensors, tokenizer.json) or file" },
    { "--adapter", CLI_STRING, offsetof(gen_opts, adapter), "a LoRA adapter folder (PEFT's files, e.g. wgml finetune's --out), "
      "run unmerged (wgml merge folds one in)" },
    { "--prompt", CLI_STRING, offsetof(gen_opts, prompt), "text to continue" },
    { "--tokens", CLI_INT, offsetof(gen_opts, tokens), "tokens to generate", 0, 1e9 },
    { "--temperature", CLI_DOUBLE, offsetof(gen_opts, temperature), "sampling temperature (0: greedy)", 0, 100 },
    { "--top-k", CLI_INT, offsetof(gen_opts, top_k), "sample among the k most likely tokens", 1, 1024 },
    { "--seed", CLI_U64, offsetof(gen_opts, seed), "sampling seed", 0, 0 },
    { "--context", CLI_INT, offsetof(gen_opts, context), "KV cache positions (0: prompt + tokens, at most "
      "max_position_embeddings; more is refused)", 0, 1 << 24 },
    { "--bos", CLI_INT, offsetof(gen_opts, bos), "what starts the prompt: -1 the tokenizer's template (its post_processor, as "
      "Hugging Face encodes a prompt: <s> for Llama 2 and Mistral), 1 config.json's bos_token_id, 0 nothing", -1, 1 },
    { "--ignore-eos", CLI_BOOL, offsetof(gen_opts, ignore_eos), "go on past end-of-sequence tokens" },
};
#define NFLAGS (sizeof gen_flags / sizeof gen_flags[0])

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

typedef struct sampler {
    wgml_engine *e;
    wgml_tensor *logits, *idx, *readback;   /* readback: the k indices, then the logits */
    uint32_t vocab, k;
    double temperature;
    uint64_t rng;
    uint32_t *host;                          /* k + vocab words */
    double *p;
} sampler;

/* One read from the device per token: the candidates and the logits are copied into one
   buffer on the GPU first. */
static wgml_status sample(sampler *s, uint32_t *out)
{
    uint32_t k = s->temperature > 0 ? s->k : 1;
    wgml_status st = wgml_top_k(s->e, s->logits, s->idx, k);
    if (k == 1) {
        if (st == WGML_OK) st = wgml_tensor_read(s->idx, 0, out, sizeof *out);
        return st;
    }
    if (st == WGML_OK) st = wgml_copy_tensor(s->e, s->idx, s->readback, 0);
    if (st == WGML_OK) st = wgml_copy_tensor(s->e, s->logits, s->readback, (size_t)s->k * sizeof(uint32_t));
    if (st == WGML_OK) st = wgml_tensor_read(s->readback, 0, s->host, ((size_t)s->k + s->vocab) * sizeof(uint32_t));
    if (st != WGML_OK) return st;
    const uint32_t *cand = s->host;
    float *logits = (float *)(s->host + s->k);
    double mx = -INFINITY, sum = 0;
    for (uint32_t i = 0; i < k; i++) mx = fmax(mx, logits[cand[i]] / s->temperature);
    for (uint32_t i = 0; i < k; i++) sum += s->p[i] = exp(logits[cand[i]] / s->temperature - mx);
    double u = (rng_next(&s->rng) >> 11) * (1.0 / 9007199254740992.0) * sum;
    uint32_t pick = k - 1;
    for (uint32_t i = 0; i < k; i++) {
        if (u < s->p[i]) { pick = i; break; }
        u -= s->p[i];
    }
    *out = cand[pick];
    return WGML_OK;
}

/* Length of the longest prefix of s[0..n) that does not end inside a UTF-8 sequence. */
static size_t complete_utf8(const unsigned char *s, size_t n)
{
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        unsigned char c = s[n - back];
        if ((c & 0xC0) == 0x80) continue;
        size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        return need > back ? n - back : n;
    }
    return n;
}

typedef struct printer { const wgml_tokenizer *tok; unsigned char pending[64]; size_t n; } printer;

static void emit(printer *p, uint32_t id)
{
    char buf[256];
    size_t len = 0;
    if (wgml_tokenizer_decode_continuation(p->tok, &id, 1, buf, sizeof buf, &len) != WGML_OK) return;
    for (size_t i = 0; i < len; i++) {
        if (p->n == sizeof p->pending) { fwrite(p->pending, 1, p->n, stdout); p->n = 0; }
        p->pending[p->n++] = (unsigned char)buf[i];
    }
    size_t cut = complete_utf8(p->pending, p->n);
    fwrite(p->pending, 1, cut, stdout);
    memmove(p->pending, p->pending + cut, p->n - cut);
    p->n -= cut;
    fflush(stdout);
}

int cmd_generate(int argc, char **argv)
{
    gen_opts o = defaults;
    int pr = cli_parse(argc, argv, gen_flags, NFLAGS, &o, "wgml generate [options]",
                       "Generates text from a checkpoint with a KV cache: the prompt in one pass, then token by token.");
    if (pr <= 0) return -pr;

    wgml_context *ctx = NULL;
    wgml_engine *eng = NULL;
    if (wgml_context_create(NULL, &ctx) != WGML_OK) {
        fprintf(stderr, "wgml generate: %s\n", wgml_last_error(NULL));
        return 1;
    }
    if (wgml_engine_create(ctx, &eng) != WGML_OK) {
        fprintf(stderr, "wgml generate: %s\n", wgml_last_error(ctx));
        wgml_context_destroy(ctx);
        return 1;
    }
    wgml_adapter_info info;
    wgml_context_info(ctx, &info);

    int rc = 1;
    wgml_model *m = NULL;
    wgml_tokenizer *tok = NULL;
    wgml_kv_cache *cache = NULL;
    wgml_tensor *logits = NULL, *idx = NULL, *readback = NULL;
    uint32_t *ids = NULL, *hist = NULL;
    sampler sm = { 0 };

    wgml_context_stats st0, st1, st2;
    wgml_context_stats_get(ctx, &st0);
    double t0 = cli_now();
    if (model_open("wgml generate", ctx, eng, o.model, o.adapter, false, &m, NULL) != 0) goto done;
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

    uint32_t k = (uint32_t)o.top_k < cfg->vocab_size ? (uint32_t)o.top_k : cfg->vocab_size;
    if (k > 1024) k = 1024;   /* wgml_top_k's limit */
    s = wgml_kv_cache_create(m, cap, &cache);
    wgml_context_stats_get(ctx, &st2);
    if (s == WGML_OK) s = wgml_tensor_create(ctx, WGML_F32, 1, (size_t[]){ cfg->vocab_size }, &logits);
    if (s == WGML_OK) s = wgml_tensor_create(ctx, WGML_U32, 1, (size_t[]){ k }, &idx);
    if (s == WGML_OK) s = wgml_tensor_create(ctx, WGML_U32, 1, (size_t[]){ (size_t)k + cfg->vocab_size }, &readback);
    if (s != WGML_OK) {
        fprintf(stderr, "wgml generate: %s\n", wgml_last_error(ctx));
        goto done;
    }
    sm = (sampler){ .e = eng, .logits = logits, .idx = idx, .readback = readback, .vocab = cfg->vocab_size, .k = k,
                    .temperature = o.temperature, .rng = o.seed, .host = malloc(sizeof(uint32_t) * ((size_t)k + cfg->vocab_size)),
                    .p = malloc(sizeof(double) * k) };
    if (!sm.host || !sm.p) {
        fprintf(stderr, "wgml generate: out of host memory\n");
        goto done;
    }

    fprintf(stderr, "model: %s%s%s: %llu parameters, %u layers, vocab %u, loaded in %.2f s on %s (%s)\n", o.model,
            o.adapter ? " with the adapter " : "", o.adapter ? o.adapter : "", (unsigned long long)wgml_model_numel(m),
            cfg->num_hidden_layers, cfg->vocab_size, t_load, info.name, info.backend);
    fprintf(stderr, "memory: %.1f MiB of weights%s (f32) and %.1f MiB of KV cache on the GPU\n",
            (double)(st1.device_bytes - st0.device_bytes) / 1048576.0, o.adapter ? " and adapter" : "",
            (double)(st2.device_bytes - st1.device_bytes) / 1048576.0);
    fprintf(stderr, "sampling: %s, %d tokens, context %u\n",
            o.temperature > 0 ? cli_fmt("temperature %g", o.temperature) : "greedy", o.tokens, cap);
    fprintf(stderr, "----\n");
    fputs(o.prompt, stdout);
    fflush(stdout);

    printer pt = { .tok = tok };
    uint32_t next = 0;
    double t1 = cli_now();
    s = wgml_model_decode(cache, ids, (uint32_t)n, logits);
    if (s == WGML_OK && o.tokens > 0) s = sample(&sm, &next);
    double t_prefill = cli_now() - t1, t_first = 0, t_decode = 0, t_shift = 0;
    int generated = 0, decoded = 0, shifts = 0;
    while (s == WGML_OK && generated < o.tokens) {
        bool eos = false;
        for (uint32_t e = 0; e < cfg->num_eos_token_ids; e++) eos |= next == cfg->eos_token_ids[e];
        if (eos && !o.ignore_eos) break;
        emit(&pt, next);
        if (++generated == o.tokens) break;
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
        if (s == WGML_OK) s = sample(&sm, &next);
        if (decoded++ == 0) t_first = cli_now() - t2;   /* compiles the single-token kernels */
        else t_decode += cli_now() - t2;
    }
    if (pt.n) fwrite(pt.pending, 1, pt.n, stdout);
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
    free(sm.host);
    free(sm.p);
    free(ids);
    free(hist);
    wgml_tensor_release(logits);
    wgml_tensor_release(idx);
    wgml_tensor_release(readback);
    wgml_kv_cache_destroy(cache);
    wgml_tokenizer_free(tok);
    wgml_model_destroy(m);
    wgml_engine_destroy(eng);
    wgml_context_destroy(ctx);
    return rc;
}
