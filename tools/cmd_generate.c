/* wgml generate: loads a checkpoint (one wgml train wrote, or a Hugging Face folder of a
   family wgml runs: config.json, safetensors in f32/f16/bf16 or MLX 4/8-bit, tokenizer.json) and
   optionally a LoRA adapter (run unmerged), runs
   the prompt through the model in one pass, then samples one token at a time with a KV
   cache, printing each as it comes, and reports prefill and decode speeds.

   Sampling: greedy without penalties takes the GPU's top 1 (one id read back); anything
   else reads the position's logits and lets wgml_sampler_next apply the penalties,
   temperature, top-k, top-p and min-p and draw. Defaults the command line leaves out come
   from generation_config.json; --stop ends the text before a string, matched across
   tokens (text that may begin it is held back). When the cache is full (a model trained on short contexts),
   the most recent half of the text is run again as a new prompt and generation goes on. */
#include "cli.h"
#include "commands.h"
#include "model_files.h"
#include "wgml.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct gen_opts {
    const char *model, *adapter, *prompt, *prompt_file, *stop, *dtype, *quantize;
    int tokens, top_k, context, bos, ignore_eos;
    double temperature, top_p, min_p, repetition_penalty, presence_penalty, frequency_penalty;
    uint64_t seed;
} gen_opts;

static const gen_opts defaults = { .model = "out", .dtype = "auto", .prompt = "The ", .tokens = 200, .top_k = 40, .temperature = 0.8, .seed = 1,
                                   .bos = -1, .top_p = 1, .repetition_penalty = 1 };

static const cli_flag gen_flags[] = {
    { "--model", CLI_STRING, offsetof(gen_opts, model), "checkpoint folder (config.json, *.safetensors, tokenizer.json) or file" },
    { "--adapter", CLI_STRING, offsetof(gen_opts, adapter), "a LoRA adapter folder (PEFT's files, e.g. wgml finetune's --out), "
      "run unmerged (wgml merge folds one in)" },
    { "--dtype", CLI_STRING, offsetof(gen_opts, dtype), MODEL_DTYPE_HELP },
    { "--quantize", CLI_STRING, offsetof(gen_opts, quantize), MODEL_QUANTIZE_HELP },
    { "--prompt", CLI_STRING, offsetof(gen_opts, prompt), "text to continue" },
    { "--prompt-file", CLI_STRING, offsetof(gen_opts, prompt_file), "read the text to continue from this file (-: standard "
      "input), at most 16 MiB" },
    { "--tokens", CLI_INT, offsetof(gen_opts, tokens), "tokens to generate", 0, 1e9 },
    { "--temperature", CLI_DOUBLE, offsetof(gen_opts, temperature), "sampling temperature (0: greedy)", 0, 100 },
    { "--top-k", CLI_INT, offsetof(gen_opts, top_k), "sample among the k most likely tokens (0: all)", 0, 1 << 24 },
    { "--top-p", CLI_DOUBLE, offsetof(gen_opts, top_p), "sample among the most likely tokens whose probabilities sum to p "
      "(1: all)", 1e-6, 1 },
    { "--min-p", CLI_DOUBLE, offsetof(gen_opts, min_p), "drop tokens less likely than min-p times the most likely (0: none)", 0, 1 },
    { "--repetition-penalty", CLI_DOUBLE, offsetof(gen_opts, repetition_penalty), "tokens already in the text: logit / r "
      "where positive, * r otherwise (1: none)", 1e-3, 100 },
    { "--presence-penalty", CLI_DOUBLE, offsetof(gen_opts, presence_penalty), "subtracted from the logit of a token already "
      "in the text", -100, 100 },
    { "--frequency-penalty", CLI_DOUBLE, offsetof(gen_opts, frequency_penalty), "subtracted from a token's logit once per "
      "time it is in the text", -100, 100 },
    { "--stop", CLI_STRING, offsetof(gen_opts, stop), "stop before this text (matched across token boundaries)" },
    { "--seed", CLI_U64, offsetof(gen_opts, seed), "sampling seed", 0, 0 },
    { "--context", CLI_INT, offsetof(gen_opts, context), "KV cache positions (0: prompt + tokens, at most "
      "max_position_embeddings; more is refused)", 0, 1 << 24 },
    { "--bos", CLI_INT, offsetof(gen_opts, bos), "what starts the prompt: -1 the tokenizer's template (its post_processor, as "
      "Hugging Face encodes a prompt: <s> for Llama 2 and Mistral), 1 config.json's bos_token_id, 0 nothing", -1, 1 },
    { "--ignore-eos", CLI_BOOL, offsetof(gen_opts, ignore_eos), "go on past end-of-sequence tokens" },
};
#define NFLAGS (sizeof gen_flags / sizeof gen_flags[0])

/* Greedy decoding without penalties reads one id (the GPU's top 1); anything else reads
   the logits and leaves the choice to wgml_sampler_next. */
typedef struct sampler {
    wgml_engine *e;
    wgml_tensor *logits, *idx;
    uint32_t vocab;
    bool gpu_greedy;
    wgml_sampler *smp;
    float *host;                             /* vocab logits */
} sampler;

static wgml_status sample(sampler *s, const uint32_t *hist, size_t n, uint32_t *out)
{
    if (s->gpu_greedy) {
        wgml_status st = wgml_top_k(s->e, s->logits, s->idx, 1);
        return st ? st : wgml_tensor_read(s->idx, 0, out, sizeof *out);
    }
    wgml_status st = wgml_tensor_read(s->logits, 0, s->host, (size_t)s->vocab * sizeof(float));
    return st ? st : wgml_sampler_next(s->smp, s->host, hist, n, out);
}

/* Sampling defaults from the folder's generation_config.json, where the command line did
   not set them: do_sample false means greedy; temperature, top_k, top_p, min_p and
   repetition_penalty as transformers reads them. A missing file changes nothing; a
   malformed one is an error. */
static int generation_config(const char *model, gen_opts *o, const bool *given, const cli_flag *flags, size_t nflags)
{
    char path[4096];
    struct stat st;
    if (stat(model, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
    snprintf(path, sizeof path, "%s/generation_config.json", model);
    if (stat(path, &st) != 0) return 0;
    size_t len = 0;
    uint8_t *text = cli_read_file("wgml generate", path, 1 << 20, &len);
    if (!text) return -1;
    cJSON *root = cJSON_ParseWithLength((const char *)text, len);
    free(text);
    if (!cJSON_IsObject(root)) {
        fprintf(stderr, "wgml generate: %s is not a JSON object\n", path);
        cJSON_Delete(root);
        return -1;
    }
    static const struct { const char *key, *flag; size_t off; double lo, hi; } keys[] = {
        { "temperature", "--temperature", offsetof(gen_opts, temperature), 0, 100 },
        { "top_p", "--top-p", offsetof(gen_opts, top_p), 1e-6, 1 },
        { "min_p", "--min-p", offsetof(gen_opts, min_p), 0, 1 },
        { "repetition_penalty", "--repetition-penalty", offsetof(gen_opts, repetition_penalty), 1e-3, 100 },
    };
    int rc = 0;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0] && !rc; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, keys[i].key);
        bool set = false;
        for (size_t f = 0; f < nflags; f++) set |= given[f] && !strcmp(flags[f].name, keys[i].flag);
        if (!v || cJSON_IsNull(v) || set) continue;
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= keys[i].lo && v->valuedouble <= keys[i].hi)) {
            fprintf(stderr, "wgml generate: %s: %s must be a number in [%g, %g]\n", path, keys[i].key, keys[i].lo, keys[i].hi);
            rc = -1;
        } else
            *(double *)((char *)o + keys[i].off) = v->valuedouble;
    }
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(root, "top_k"), *ds = cJSON_GetObjectItemCaseSensitive(root, "do_sample");
    bool top_k_given = false, temp_given = false;
    for (size_t f = 0; f < nflags; f++) {
        top_k_given |= given[f] && !strcmp(flags[f].name, "--top-k");
        temp_given |= given[f] && !strcmp(flags[f].name, "--temperature");
    }
    if (!rc && k && !cJSON_IsNull(k) && !top_k_given) {
        if (!cJSON_IsNumber(k) || k->valuedouble < 0 || k->valuedouble > (1 << 24) || k->valuedouble != (int)k->valuedouble) {
            fprintf(stderr, "wgml generate: %s: top_k must be an integer in [0, 16777216]\n", path);
            rc = -1;
        } else
            o->top_k = (int)k->valuedouble;
    }
    if (!rc && ds && !cJSON_IsNull(ds) && !temp_given) {
        if (!cJSON_IsBool(ds)) {
            fprintf(stderr, "wgml generate: %s: do_sample must be true or false\n", path);
            rc = -1;
        } else if (cJSON_IsFalse(ds))
            o->temperature = 0;
    }
    cJSON_Delete(root);
    return rc;
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

/* Streams decoded text. With a stop string, the text that could still begin it is held
   back until the next token decides; the output ends before the stop string. */
typedef struct printer {
    const wgml_tokenizer *tok;
    const char *stop;
    size_t stop_len;
    unsigned char *pending;   /* not yet printed */
    size_t n, cap;
    bool stopped;
} printer;

/* The longest suffix of s[0..n) that is a proper prefix of stop. */
static size_t stop_prefix(const unsigned char *s, size_t n, const char *stop, size_t sl)
{
    for (size_t k = sl - 1 < n ? sl - 1 : n; k > 0; k--)
        if (memcmp(s + n - k, stop, k) == 0) return k;
    return 0;
}

/* Prints what is decided; false when out of memory. */
static bool emit(printer *p, uint32_t id)
{
    char buf[256];
    size_t len = 0;
    if (wgml_tokenizer_decode_continuation(p->tok, &id, 1, buf, sizeof buf, &len) != WGML_OK) return true;
    if (p->n + len > p->cap) {
        size_t cap = 2 * (p->n + len) + 64;
        unsigned char *b = realloc(p->pending, cap);
        if (!b) return false;
        p->pending = b;
        p->cap = cap;
    }
    memcpy(p->pending + p->n, buf, len);
    p->n += len;
    size_t keep = 0;
    if (p->stop_len) {
        unsigned char *at = NULL;
        for (size_t i = 0; !at && i + p->stop_len <= p->n; i++)
            if (memcmp(p->pending + i, p->stop, p->stop_len) == 0) at = p->pending + i;
        if (at) {
            p->n = (size_t)(at - p->pending);
            p->stopped = true;
        } else
            keep = stop_prefix(p->pending, p->n, p->stop, p->stop_len);
    }
    size_t cut = p->stopped ? p->n : complete_utf8(p->pending, p->n - keep);
    fwrite(p->pending, 1, cut, stdout);
    memmove(p->pending, p->pending + cut, p->n - cut);
    p->n -= cut;
    fflush(stdout);
    return true;
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
    if (generation_config(o.model, &o, given, gen_flags, NFLAGS) != 0) return 1;
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
    if (model_weights("wgml generate", o.dtype, o.quantize, &weights) != 0) {
        free(prompt_text);
        return 2;
    }
    wgml_context *ctx = NULL;
    wgml_engine *eng = NULL;
    if (model_device("wgml generate", &ctx, &eng) != 0) {
        free(prompt_text);
        return 1;
    }
    wgml_adapter_info info;
    wgml_context_info(ctx, &info);

    int rc = 1;
    wgml_model *m = NULL;
    wgml_tokenizer *tok = NULL;
    wgml_kv_cache *cache = NULL;
    wgml_tensor *logits = NULL, *idx = NULL;
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

    s = wgml_kv_cache_create(m, cap, &cache);
    wgml_context_stats_get(ctx, &st2);
    if (s == WGML_OK) s = wgml_tensor_create(ctx, WGML_F32, 1, (size_t[]){ cfg->vocab_size }, &logits);
    if (s == WGML_OK) s = wgml_tensor_create(ctx, WGML_U32, 1, (size_t[]){ 1 }, &idx);
    if (s != WGML_OK) {
        fprintf(stderr, "wgml generate: %s\n", wgml_last_error(ctx));
        goto done;
    }
    wgml_sampling set = { .temperature = (float)o.temperature, .top_k = (uint32_t)o.top_k, .top_p = (float)o.top_p,
                          .min_p = (float)o.min_p, .repetition_penalty = (float)o.repetition_penalty,
                          .presence_penalty = (float)o.presence_penalty, .frequency_penalty = (float)o.frequency_penalty };
    sm = (sampler){ .e = eng, .logits = logits, .idx = idx, .vocab = cfg->vocab_size,
                    .gpu_greedy = o.temperature == 0 && o.repetition_penalty == 1 && o.presence_penalty == 0 &&
                                  o.frequency_penalty == 0,
                    .host = malloc(sizeof(float) * cfg->vocab_size) };
    if (wgml_sampler_create(&set, cfg->vocab_size, o.seed, &sm.smp) != WGML_OK) {
        fprintf(stderr, "wgml generate: %s\n", wgml_last_error(NULL));
        goto done;
    }
    if (!sm.host) {
        fprintf(stderr, "wgml generate: out of host memory\n");
        goto done;
    }

    fprintf(stderr, "model: %s%s%s: %llu parameters, %u layers, vocab %u, loaded in %.2f s on %s (%s)\n", o.model,
            o.adapter ? " with the adapter " : "", o.adapter ? o.adapter : "", (unsigned long long)wgml_model_numel(m),
            cfg->num_hidden_layers, cfg->vocab_size, t_load, info.name, info.backend);
    char wname[128];
    fprintf(stderr, "memory: %.2f MiB of weights%s (%s) and %.2f MiB of KV cache on the GPU\n",
            (double)(st1.device_bytes - st0.device_bytes) / 1048576.0, o.adapter ? " and adapter" : "",
            model_weights_name(m, wname, sizeof wname), (double)(st2.device_bytes - st1.device_bytes) / 1048576.0);
    fprintf(stderr, "sampling: %s", o.temperature > 0 ? cli_fmt("temperature %g", o.temperature) : "greedy");
    if (o.temperature > 0 && o.top_k) fprintf(stderr, ", top-k %d", o.top_k);
    if (o.temperature > 0 && o.top_p < 1) fprintf(stderr, ", top-p %g", o.top_p);
    if (o.temperature > 0 && o.min_p > 0) fprintf(stderr, ", min-p %g", o.min_p);
    if (o.repetition_penalty != 1) fprintf(stderr, ", repetition penalty %g", o.repetition_penalty);
    if (o.presence_penalty || o.frequency_penalty)
        fprintf(stderr, ", presence / frequency penalties %g / %g", o.presence_penalty, o.frequency_penalty);
    fprintf(stderr, "; %d tokens, context %u\n", o.tokens, cap);
    fprintf(stderr, "----\n");
    fputs(o.prompt, stdout);
    fflush(stdout);

    pt = (printer){ .tok = tok, .stop = o.stop, .stop_len = o.stop ? strlen(o.stop) : 0 };
    uint32_t next = 0;
    double t1 = cli_now();
    s = wgml_model_decode(cache, ids, (uint32_t)n, logits);
    if (s == WGML_OK && o.tokens > 0) s = sample(&sm, hist, nhist, &next);
    double t_prefill = cli_now() - t1, t_first = 0, t_decode = 0, t_shift = 0;
    int generated = 0, decoded = 0, shifts = 0;
    while (s == WGML_OK && generated < o.tokens) {
        bool eos = false;
        for (uint32_t e = 0; e < cfg->num_eos_token_ids; e++) eos |= next == cfg->eos_token_ids[e];
        if (eos && !o.ignore_eos) break;
        if (!emit(&pt, next)) {
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
        if (s == WGML_OK) s = sample(&sm, hist, nhist, &next);
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
    free(prompt_text);
    wgml_sampler_free(sm.smp);
    free(pt.pending);
    free(ids);
    free(hist);
    wgml_tensor_release(logits);
    wgml_tensor_release(idx);
    wgml_kv_cache_destroy(cache);
    wgml_tokenizer_free(tok);
    wgml_model_destroy(m);
    wgml_engine_destroy(eng);
    wgml_context_destroy(ctx);
    return rc;
}
