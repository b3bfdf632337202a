/* wgml chat: an interactive conversation with a model through its chat template (the
   template code finetune uses: wgml_chat_render, the format recognised from the folder's
   tokenizer_config.json or named by --chat-template). Each line of standard input is a
   user turn; the reply streams to standard output as it is sampled. /reset forgets the
   conversation, /exit (or the end of input) ends it.

   The KV cache is kept across turns: each turn renders the whole conversation, keeps the
   cached positions its tokens share with what the cache holds (wgml_kv_cache_truncate)
   and runs only the rest. A conversation that outgrows the context loses its oldest turns
   (the system prompt stays). */
#include "cli.h"
#include "commands.h"
#include "decode.h"
#include "dist.h"
#include "model_files.h"
#include "wgml.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct chat_opts {
    const char *model, *adapter, *system, *chat_template, *dtype, *quantize, *precision;
    int max_tokens, context;
    sample_opts sp;
} chat_opts;

static const cli_flag chat_flags[] = {
    { "--model", CLI_STRING, offsetof(chat_opts, model), "model folder (config.json, safetensors, tokenizer.json) or GGUF file" },
    { "--adapter", CLI_STRING, offsetof(chat_opts, adapter), "a LoRA adapter folder (PEFT's files), run unmerged" },
    { "--system", CLI_STRING, offsetof(chat_opts, system), "the system prompt" },
    { "--chat-template", CLI_STRING, offsetof(chat_opts, chat_template), "chat format: chatml, smollm2, qwen2, llama3, "
      "llama3.1 or zephyr (default: recognised from the model's template)" },
    { "--max-tokens", CLI_INT, offsetof(chat_opts, max_tokens), "tokens per reply at most", 1, 1 << 20 },
    { "--context", CLI_INT, offsetof(chat_opts, context), "KV cache positions (0: max_position_embeddings, at most 4096)", 0,
      1 << 24 },
    { "--dtype", CLI_STRING, offsetof(chat_opts, dtype), MODEL_DTYPE_HELP },
    { "--quantize", CLI_STRING, offsetof(chat_opts, quantize), MODEL_QUANTIZE_HELP },
    { "--precision", CLI_STRING, offsetof(chat_opts, precision), INFER_PRECISION_HELP },
    SAMPLE_FLAGS(chat_opts, sp),
};
#define NFLAGS (sizeof chat_flags / sizeof chat_flags[0])

/* The conversation: messages[0] the system prompt when there is one. */
typedef struct conversation {
    wgml_chat_message *msg;
    size_t n, cap, first_turn;   /* first_turn: 1 with a system prompt, else 0 */
} conversation;

static bool add_message(conversation *c, const char *role, const char *text, size_t len)
{
    if (c->n == c->cap) {
        size_t cap = 2 * c->cap + 8;
        wgml_chat_message *m = realloc(c->msg, cap * sizeof *m);
        if (!m) return false;
        c->msg = m;
        c->cap = cap;
    }
    char *copy = malloc(len + 1);
    if (!copy) return false;
    memcpy(copy, text, len);
    copy[len] = 0;
    c->msg[c->n++] = (wgml_chat_message){ .role = role, .content = copy };
    return true;
}

/* Drops messages [from, from + k). */
static void drop_messages(conversation *c, size_t from, size_t k)
{
    for (size_t i = from; i < from + k; i++) free((char *)c->msg[i].content);
    memmove(c->msg + from, c->msg + from + k, (c->n - from - k) * sizeof *c->msg);
    c->n -= k;
}

/* The token ids of the conversation rendered with an assistant header at the end:
   *ids (grown as needed), *n. 0, or -1 after a message. */
static int render(const char *who, wgml_chat_format f, const wgml_chat_options *copt, const conversation *c,
                  const wgml_tokenizer *tok, uint32_t vocab, uint32_t **ids, size_t *cap, size_t *n)
{
    wgml_chat *text = NULL;
    if (wgml_chat_render(f, c->msg, c->n, copt, &text) != WGML_OK) {
        fprintf(stderr, "%s: %s\n", who, wgml_last_error(NULL));
        return -1;
    }
    size_t len = 0;
    const char *t = wgml_chat_text(text, &len);
    if (2 * len + 2 > *cap) {
        uint32_t *more = realloc(*ids, (2 * len + 2) * sizeof *more);
        if (!more) {
            wgml_chat_free(text);
            fprintf(stderr, "%s: out of host memory\n", who);
            return -1;
        }
        *ids = more;
        *cap = 2 * len + 2;
    }
    wgml_status s = wgml_tokenizer_encode(tok, t, len, *ids, *cap, n);
    wgml_chat_free(text);
    if (s != WGML_OK) {
        fprintf(stderr, "%s: cannot encode the conversation: %s\n", who, wgml_last_error(NULL));
        return -1;
    }
    for (size_t i = 0; i < *n; i++)
        if ((*ids)[i] >= vocab) {
            fprintf(stderr, "%s: the tokenizer gives id %u, beyond the model's vocabulary of %u\n", who, (*ids)[i], vocab);
            return -1;
        }
    return 0;
}

/* The ids that end a reply: config.json's EOS ids, the tokenizer's EOS token and the
   format's end of turn. */
static size_t stop_ids(const wgml_model_config *cfg, const wgml_tokenizer *tok, const wgml_chat_options *copt,
                       wgml_chat_format f, uint32_t *out, size_t max)
{
    size_t n = 0;
    for (uint32_t e = 0; e < cfg->num_eos_token_ids && n < max; e++) out[n++] = cfg->eos_token_ids[e];
    const char *names[2] = { copt->eos_token, f == WGML_CHAT_LLAMA3 || f == WGML_CHAT_LLAMA31 ? "<|eot_id|>"
                                              : f == WGML_CHAT_ZEPHYR ? NULL : "<|im_end|>" };
    for (int k = 0; k < 2 && n < max; k++) {
        int64_t id = names[k] ? wgml_tokenizer_token_id(tok, names[k]) : -1;
        if (id >= 0) out[n++] = (uint32_t)id;
    }
    return n;
}

int cmd_chat(int argc, char **argv)
{
    const char *who = "wgml chat";
    chat_opts o = { .model = "out", .dtype = "auto", .precision = "f32", .max_tokens = 512, .sp = SAMPLE_DEFAULTS };
    bool given[NFLAGS] = { false };
    int pr = cli_parse_given(argc, argv, chat_flags, NFLAGS, &o, "wgml chat --model DIR [options]",
                             "Talks with a model through its chat template: each line of standard input is a turn, the reply "
                             "streams out; /reset forgets the conversation, /exit ends it. Sampling settings the command line "
                             "leaves out come from the folder's generation_config.json.", given);
    if (pr <= 0) return -pr;
    if (generation_config(who, o.model, &o.sp, given, chat_flags, NFLAGS) != 0) return 1;
    wgml_weights weights;
    if (model_weights(who, o.dtype, o.quantize, &weights) != 0 || cli_check_precision(who, o.precision, -1) != 0) return 2;

    int rc = 1;
    model_chat mc;
    wgml_kv_cache *cache = NULL;
    sampler sm = { 0 };
    printer pt = { 0 };
    conversation conv = { 0 };
    uint32_t *ids = NULL, *hist = NULL, *reply = NULL;
    size_t ids_cap = 0, nhist = 0;
    char *line = NULL, *text = NULL;
    size_t line_cap = 0;
    if (model_chat_open(who, o.model, o.precision, weights, o.adapter, o.chat_template, &mc) != 0) return 1;
    wgml_context *ctx = mc.ctx;
    wgml_engine *eng = mc.eng;
    wgml_model *m = mc.m;
    const wgml_tokenizer *tok = mc.tok;
    const wgml_model_config *cfg = wgml_model_get_config(m);
    wgml_chat_format f = mc.chat;
    if (f == WGML_CHAT_UNKNOWN) {
        fprintf(stderr, "%s: %s has no chat template wgml recognises; name its format with --chat-template (chatml, smollm2, "
                "qwen2, llama3, llama3.1, zephyr)\n", who, o.model);
        goto done;
    }
    wgml_chat_options copt = mc.chat_opts;
    copt.add_generation_prompt = true;
    uint32_t cap;
    if (model_context(who, cfg, o.context, &cap) != 0) goto done;
    uint32_t max_tokens = (uint32_t)o.max_tokens < cap / 2 ? (uint32_t)o.max_tokens : cap / 2;
    hist = malloc(sizeof *hist * cap);
    reply = malloc(sizeof *reply * (max_tokens + 1));
    if (!hist || !reply) {
        fprintf(stderr, "%s: out of host memory\n", who);
        goto done;
    }
    if (wgml_kv_cache_create(m, cap, &cache) != WGML_OK) {
        fprintf(stderr, "%s: %s\n", who, wgml_last_error(ctx));
        goto done;
    }
    if (sampler_init(who, &sm, ctx, eng, cfg->vocab_size, &o.sp) != 0) goto done;
    uint32_t stops[8];
    size_t nstops = stop_ids(cfg, tok, &copt, f, stops, 8);
    if (o.system && !add_message(&conv, "system", o.system, strlen(o.system))) goto oom;
    conv.first_turn = conv.n;

    char wname[128];
    fprintf(stderr, "model: %s%s%s (%s weights), chat format %s, context %u; sampling: ", o.model,
            o.adapter ? " with the adapter " : "", o.adapter ? o.adapter : "", model_weights_name(m, wname, sizeof wname),
            wgml_chat_format_name(f), cap);
    sample_opts_describe(&o.sp, stderr);
    fprintf(stderr, "\n/reset forgets the conversation, /exit ends it\n");
    bool tty = isatty(0);
    int turn = 0;
    for (;;) {
        if (tty) fprintf(stderr, "> ");
        ssize_t got = getline(&line, &line_cap, stdin);
        if (got < 0) break;
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = 0;
        if (!got) continue;
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
        if (!strcmp(line, "/reset")) {
            drop_messages(&conv, conv.first_turn, conv.n - conv.first_turn);
            fprintf(stderr, "(the conversation is forgotten)\n");
            continue;
        }
        if (!add_message(&conv, "user", line, (size_t)got)) goto oom;
        /* the conversation, its oldest turns dropped until the reply has room */
        size_t n = 0;
        for (;;) {
            if (render(who, f, &copt, &conv, tok, cfg->vocab_size, &ids, &ids_cap, &n) != 0) goto done;
            if (n + max_tokens <= cap) break;
            if (conv.n - conv.first_turn <= 1) break;
            drop_messages(&conv, conv.first_turn, conv.n - conv.first_turn >= 3 ? 2 : 1);
        }
        if (n + max_tokens > cap) {
            fprintf(stderr, "%s: the message takes %zu tokens; with a reply of up to %u it does not fit the context of %u\n",
                    who, n, max_tokens, cap);
            drop_messages(&conv, conv.n - 1, 1);
            continue;
        }
        /* what the cache already holds of it is not run again */
        size_t keep = 0;
        while (keep < nhist && keep + 1 < n && hist[keep] == ids[keep]) keep++;
        wgml_status s = wgml_kv_cache_truncate(cache, (uint32_t)keep);
        memcpy(hist, ids, n * sizeof *ids);
        nhist = n;
        double t0 = cli_now();
        if (s == WGML_OK) s = wgml_model_decode(cache, ids + keep, (uint32_t)(n - keep), sm.logits);
        uint32_t next = 0, generated = 0;
        if (s == WGML_OK) s = sampler_next(&sm, hist, nhist, &next);
        pt = (printer){ .tok = tok, .pending = pt.pending, .cap = pt.cap };
        while (s == WGML_OK) {
            bool end = false;
            for (size_t k = 0; k < nstops; k++) end |= next == stops[k];
            if (end) break;
            if (!printer_emit(&pt, next)) goto oom;
            reply[generated++] = next;
            if (generated == max_tokens || nhist == cap) break;
            hist[nhist++] = next;
            s = wgml_model_decode(cache, &next, 1, sm.logits);
            if (s == WGML_OK) s = sampler_next(&sm, hist, nhist, &next);
        }
        printer_finish(&pt);
        printf("\n");
        fflush(stdout);
        if (s != WGML_OK) {
            fprintf(stderr, "%s: %s\n", who, wgml_last_error(ctx));
            goto done;
        }
        /* the reply joins the conversation as its text */
        size_t len = 0, room = (size_t)generated * 16 + 1;
        for (int tries = 0; tries < 2; tries++) {   /* a second time with the size the first one asked for */
            free(text);
            text = malloc(room);
            if (!text) goto oom;
            s = wgml_tokenizer_decode(tok, reply, generated, text, room, &len);
            if (s != WGML_ERROR_SHAPE) break;
            room = len + 1;
        }
        if (s != WGML_OK) {
            fprintf(stderr, "%s: %s\n", who, wgml_last_error(NULL));
            goto done;
        }
        if (!add_message(&conv, "assistant", text, len)) goto oom;
        double dt = cli_now() - t0;
        fprintf(stderr, "(turn %d: %zu prompt tokens, %zu of them from the cache; %u tokens in %.2f s)\n", ++turn, n, keep,
                generated, dt);
    }
    rc = 0;
    goto done;
oom:
    fprintf(stderr, "%s: out of host memory\n", who);
done:
    for (size_t i = 0; i < conv.n; i++) free((char *)conv.msg[i].content);
    free(conv.msg);
    free(line);
    free(text);
    free(ids);
    free(hist);
    free(reply);
    free(pt.pending);
    sampler_free(&sm);
    wgml_kv_cache_destroy(cache);
    model_chat_close(&mc);
    return rc;
}
