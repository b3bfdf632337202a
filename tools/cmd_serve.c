/* wgml serve: an HTTP server (Debian's libmicrohttpd, a thread per connection) speaking
   OpenAI's API: GET /v1/models, POST /v1/completions and /v1/chat/completions (streamed
   as server-sent events with "stream": true), GET /health. Each request becomes a job for
   the engine thread (tools/serve_engine.c), which decodes all running jobs together;
   requests beyond the running ones wait in a bounded queue, and a full queue answers 503.
   Bad JSON or parameters get a 400 with a message; a streaming client that disconnects
   frees its sequence at the next step. Binds to 127.0.0.1 unless --host says otherwise. */
#include "cli.h"
#include "commands.h"
#include "decode.h"
#include "dist.h"
#include "model_files.h"
#include "serve.h"
#include "wgml.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BODY_MAX ((size_t)1 << 20)

typedef struct serve_opts {
    const char *model, *adapter, *host, *chat_template, *dtype, *quantize, *precision, *name;
    int port, slots, queue, context, max_tokens;
    sample_opts sp;
} serve_opts;

static const cli_flag serve_flags[] = {
    { "--model", CLI_STRING, offsetof(serve_opts, model), "model folder (config.json, safetensors, tokenizer.json) or GGUF file" },
    { "--adapter", CLI_STRING, offsetof(serve_opts, adapter), "a LoRA adapter folder (PEFT's files), run unmerged" },
    { "--name", CLI_STRING, offsetof(serve_opts, name), "the model's id in the API (default: the folder's name)" },
    { "--host", CLI_STRING, offsetof(serve_opts, host), "IPv4 address to listen on (0.0.0.0: every interface)" },
    { "--port", CLI_INT, offsetof(serve_opts, port), "TCP port (0: any free one, printed at start)", 0, 65535 },
    { "--slots", CLI_INT, offsetof(serve_opts, slots), "requests decoded together", 1, 64 },
    { "--queue", CLI_INT, offsetof(serve_opts, queue), "requests that may wait for a slot; more get 503", 0, 1 << 16 },
    { "--context", CLI_INT, offsetof(serve_opts, context), "positions per request, prompt and reply (0: "
      "max_position_embeddings, at most 4096)", 0, 1 << 24 },
    { "--max-tokens", CLI_INT, offsetof(serve_opts, max_tokens), "default max_tokens of a request", 1, 1 << 20 },
    { "--chat-template", CLI_STRING, offsetof(serve_opts, chat_template), "chat format for /v1/chat/completions (default: "
      "recognised from the model's template)" },
    { "--dtype", CLI_STRING, offsetof(serve_opts, dtype), MODEL_DTYPE_HELP },
    { "--quantize", CLI_STRING, offsetof(serve_opts, quantize), MODEL_QUANTIZE_HELP },
    { "--precision", CLI_STRING, offsetof(serve_opts, precision), INFER_PRECISION_HELP },
    SAMPLE_FLAGS(serve_opts, sp),
};
#define NFLAGS (sizeof serve_flags / sizeof serve_flags[0])

typedef struct server {
    serve_engine eng;
    const serve_opts *o;
    const char *name;
    const wgml_model_config *cfg;
    wgml_chat_format chat;
    wgml_chat_options chat_opts;
    const uint32_t *prefix;         /* the tokenizer's template before a completion prompt */
    size_t nprefix;
    uint64_t counter;               /* request ids and default seeds, under eng.mu */
} server;

/* One connection's request: its body as it arrives. */
typedef struct request {
    char *body;
    size_t len;
    bool too_big;
} request;

/* ---- responses ------------------------------------------------------------------------- */

static enum MHD_Result send_text(struct MHD_Connection *c, unsigned status, const char *type, char *text)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, cJSON *j)
{
    char *text = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    if (!text) return MHD_NO;
    return send_text(c, status, "application/json", text);
}

/* OpenAI's error object: {"error": {"message", "type", "code"}}. */
static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *type, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    cJSON *j = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(j, "error");
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", type);
    cJSON_AddNumberToObject(e, "code", status);
    return send_json(c, status, j);
}

/* ---- requests -------------------------------------------------------------------------- */

/* A number field in [lo, hi] into *out (absent: unchanged). false after setting err. */
static bool number_field(const cJSON *root, const char *key, double lo, double hi, double *out, char *err, size_t size)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return true;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi)) {
        snprintf(err, size, "%s must be a number in [%g, %g]", key, lo, hi);
        return false;
    }
    *out = v->valuedouble;
    return true;
}

/* The sampling fields, max_tokens, seed, stop and n of a request into job j; the
   server's flags (and generation_config.json) give the defaults. */
static bool read_sampling(server *sv, const cJSON *root, serve_job *j, char *err, size_t size)
{
    const sample_opts *d = &sv->o->sp;
    double t = d->temperature, tp = d->top_p, tk = d->top_k, mp = d->min_p, rp = d->repetition_penalty,
           pp = d->presence_penalty, fp = d->frequency_penalty, mt = sv->o->max_tokens, n = 1, seed = -1;
    if (!number_field(root, "temperature", 0, 100, &t, err, size) || !number_field(root, "top_p", 1e-6, 1, &tp, err, size) ||
        !number_field(root, "top_k", 0, 1 << 24, &tk, err, size) || !number_field(root, "min_p", 0, 1, &mp, err, size) ||
        !number_field(root, "repetition_penalty", 1e-3, 100, &rp, err, size) ||
        !number_field(root, "presence_penalty", -100, 100, &pp, err, size) ||
        !number_field(root, "frequency_penalty", -100, 100, &fp, err, size) ||
        !number_field(root, "max_tokens", 1, 1 << 20, &mt, err, size) ||
        !number_field(root, "max_completion_tokens", 1, 1 << 20, &mt, err, size) ||
        !number_field(root, "n", 1, 1, &n, err, size) || !number_field(root, "seed", 0, 9007199254740991.0, &seed, err, size))
        return false;
    if (tk != (int)tk || mt != (int)mt) {
        snprintf(err, size, "top_k and max_tokens must be integers");
        return false;
    }
    j->sampling = (wgml_sampling){ .temperature = (float)t, .top_k = (uint32_t)tk, .top_p = (float)tp, .min_p = (float)mp,
                                   .repetition_penalty = (float)rp, .presence_penalty = (float)pp,
                                   .frequency_penalty = (float)fp };
    j->max_tokens = (uint32_t)mt;
    j->seed = seed >= 0 ? (uint64_t)seed : d->seed + sv->counter;
    const cJSON *stop = cJSON_GetObjectItemCaseSensitive(root, "stop");
    if (stop && !cJSON_IsNull(stop)) {
        const cJSON *one = cJSON_IsString(stop) ? stop : NULL;
        int count = one ? 1 : cJSON_IsArray(stop) ? cJSON_GetArraySize(stop) : -1;
        if (count < 0 || count > SERVE_MAX_STOPS) {
            snprintf(err, size, "stop must be a string or an array of at most %d strings", SERVE_MAX_STOPS);
            return false;
        }
        for (int k = 0; k < count; k++) {
            const cJSON *s = one ? one : cJSON_GetArrayItem(stop, k);
            if (!cJSON_IsString(s) || !s->valuestring[0]) {
                snprintf(err, size, "stop strings must be non-empty strings");
                return false;
            }
            j->stop[j->nstop] = strdup(s->valuestring);
            if (!j->stop[j->nstop++]) return false;
        }
    }
    return true;
}

/* The prompt's token ids into j: a completion's text after the tokenizer's template, or
   the chat rendered with the model's template. Under the engine's lock (the tokenizer is
   shared with the engine thread). */
static bool read_prompt(server *sv, const cJSON *root, bool chat, serve_job *j, char *err, size_t size)
{
    char *text = NULL;
    size_t len = 0;
    wgml_chat *rendered = NULL;
    if (chat) {
        const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
        int n = cJSON_IsArray(msgs) ? cJSON_GetArraySize(msgs) : 0;
        if (n < 1) {
            snprintf(err, size, "messages must be a non-empty array");
            return false;
        }
        if (sv->chat == WGML_CHAT_UNKNOWN) {
            snprintf(err, size, "the model has no chat template wgml recognises; start the server with --chat-template");
            return false;
        }
        wgml_chat_message *m = calloc((size_t)n, sizeof *m);
        if (!m) return false;
        for (int i = 0; i < n; i++) {
            const cJSON *it = cJSON_GetArrayItem(msgs, i);
            const cJSON *role = cJSON_GetObjectItemCaseSensitive(it, "role"), *content = cJSON_GetObjectItemCaseSensitive(it, "content");
            if (!cJSON_IsString(role) || !cJSON_IsString(content)) {
                snprintf(err, size, "messages[%d] needs a string role and a string content", i);
                free(m);
                return false;
            }
            m[i] = (wgml_chat_message){ .role = role->valuestring, .content = content->valuestring };
        }
        wgml_chat_options copt = sv->chat_opts;
        copt.add_generation_prompt = true;
        wgml_status s = wgml_chat_render(sv->chat, m, (size_t)n, &copt, &rendered);
        free(m);
        if (s != WGML_OK) {
            snprintf(err, size, "%s", wgml_last_error(NULL));
            return false;
        }
        text = (char *)wgml_chat_text(rendered, &len);
    } else {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
        if (!cJSON_IsString(p)) {
            snprintf(err, size, "prompt must be a string");
            return false;
        }
        text = p->valuestring;
        len = strlen(text);
    }
    size_t extra = chat ? 0 : sv->nprefix, cap = 2 * len + 2 + extra;
    j->ids = malloc(cap * sizeof *j->ids);
    bool ok = j->ids != NULL;
    if (ok) {
        memcpy(j->ids, sv->prefix, extra * sizeof *j->ids);
        size_t n = 0;
        pthread_mutex_lock(&sv->eng.mu);
        wgml_status s = wgml_tokenizer_encode(sv->eng.tok, text, len, j->ids + extra, cap - extra, &n);
        pthread_mutex_unlock(&sv->eng.mu);
        j->n_ids = n + extra;
        if (s != WGML_OK) {
            snprintf(err, size, "cannot encode the prompt: %s", wgml_last_error(NULL));
            ok = false;
        } else if (!j->n_ids) {
            snprintf(err, size, "the prompt is empty");
            ok = false;
        } else if (j->n_ids + 1 > sv->eng.context) {
            snprintf(err, size, "the prompt has %zu tokens; the context of a request is %u", j->n_ids, sv->eng.context);
            ok = false;
        }
        for (size_t i = 0; ok && i < j->n_ids; i++)
            if (j->ids[i] >= sv->cfg->vocab_size) {
                snprintf(err, size, "the tokenizer gives id %u, beyond the model's vocabulary", j->ids[i]);
                ok = false;
            }
    }
    wgml_chat_free(rendered);
    return ok;
}

/* The OpenAI object of a finished (or, for a chunk, running) job. */
static cJSON *result_json(const server *sv, bool chat, bool chunk, bool first, uint64_t id, const char *text, size_t len,
                          const char *finish, const serve_job *j)
{
    cJSON *r = cJSON_CreateObject();
    char idbuf[64];
    snprintf(idbuf, sizeof idbuf, "%s-%llu", chat ? "chatcmpl" : "cmpl", (unsigned long long)id);
    cJSON_AddStringToObject(r, "id", idbuf);
    cJSON_AddStringToObject(r, "object", chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion");
    cJSON_AddNumberToObject(r, "created", (double)time(NULL));
    cJSON_AddStringToObject(r, "model", sv->name);
    cJSON *choices = cJSON_AddArrayToObject(r, "choices"), *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", 0);
    char *t = text_utf8(text ? text : "", len);
    if (chat) {
        cJSON *m = cJSON_AddObjectToObject(c, chunk ? "delta" : "message");
        if (!chunk || first) cJSON_AddStringToObject(m, "role", "assistant");
        if (t && (len || !chunk)) cJSON_AddStringToObject(m, "content", t);
    } else {
        cJSON_AddStringToObject(c, "text", t ? t : "");
        cJSON_AddNullToObject(c, "logprobs");
    }
    free(t);
    if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
    else cJSON_AddNullToObject(c, "finish_reason");
    if (!chunk || finish) {
        cJSON *u = cJSON_AddObjectToObject(r, "usage");
        cJSON_AddNumberToObject(u, "prompt_tokens", (double)j->n_ids);
        cJSON_AddNumberToObject(u, "completion_tokens", j->tokens);
        cJSON_AddNumberToObject(u, "total_tokens", (double)(j->n_ids + j->tokens));
    }
    return r;
}

/* ---- streaming --------------------------------------------------------------------------- */

typedef struct stream {
    server *sv;
    serve_job *job;
    uint64_t id;
    bool chat;
    size_t sent;        /* bytes of the job's text sent */
    bool started;       /* a chunk went out (the first carries the role) */
    int stage;          /* 0 running, 1 the final chunk sent, 2 [DONE] sent */
    char *pending;      /* a formatted event not yet handed out whole */
    size_t plen, pat;
} stream;

/* Formats the next event into st->pending, waiting for the engine when nothing is new.
   false at the end of the stream. */
static bool next_event(stream *st)
{
    server *sv = st->sv;
    serve_job *j = st->job;
    if (st->stage == 2) return false;
    if (st->stage == 1) {
        st->pending = strdup("data: [DONE]\n\n");
        st->plen = st->pending ? strlen(st->pending) : 0;
        st->stage = 2;
        return st->pending != NULL;
    }
    pthread_mutex_lock(&sv->eng.mu);
    while (!j->done && j->len == st->sent) pthread_cond_wait(&j->changed, &sv->eng.mu);
    size_t from = st->sent, len = j->len - from;
    char *text = malloc(len + 1);
    if (text) memcpy(text, j->text ? j->text + from : "", len);
    st->sent = j->len;
    bool done = j->done && st->sent == j->len;
    const char *finish = done ? (j->error[0] ? "error" : j->finish) : NULL;
    cJSON *ev = result_json(sv, st->chat, true, from == 0 && !st->started, st->id, text, len, finish, j);
    st->started = true;
    pthread_mutex_unlock(&sv->eng.mu);
    free(text);
    char *json = cJSON_PrintUnformatted(ev);
    cJSON_Delete(ev);
    if (!json) return false;
    size_t n = strlen(json);
    st->pending = malloc(n + 9);
    if (st->pending) snprintf(st->pending, n + 9, "data: %s\n\n", json);
    free(json);
    st->plen = st->pending ? strlen(st->pending) : 0;
    if (done) st->stage = 1;
    return st->pending != NULL;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    stream *st = cls;
    if (!st->pending || st->pat == st->plen) {
        free(st->pending);
        st->pending = NULL;
        st->pat = 0;
        if (!next_event(st)) return MHD_CONTENT_READER_END_OF_STREAM;
    }
    size_t n = st->plen - st->pat < max ? st->plen - st->pat : max;
    memcpy(buf, st->pending + st->pat, n);
    st->pat += n;
    return (ssize_t)n;
}

/* The connection is gone (or the stream ended): a running job is cancelled. */
static void stream_free(void *cls)
{
    stream *st = cls;
    pthread_mutex_lock(&st->sv->eng.mu);
    if (!st->job->done) {
        st->job->cancelled = true;
        pthread_cond_signal(&st->sv->eng.work);
    }
    pthread_mutex_unlock(&st->sv->eng.mu);
    serve_job_release(&st->sv->eng, st->job);
    free(st->pending);
    free(st);
}

/* ---- routes ------------------------------------------------------------------------------ */

static enum MHD_Result generate(server *sv, struct MHD_Connection *c, const request *rq, bool chat)
{
    if (rq->too_big) return send_error(c, 413, "invalid_request_error", "the body is over %zu bytes", BODY_MAX);
    cJSON *root = cJSON_ParseWithLength(rq->body ? rq->body : "", rq->len);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return send_error(c, 400, "invalid_request_error", "the body is not a JSON object");
    }
    char err[512] = "out of host memory";
    serve_job *j = serve_job_new();
    pthread_mutex_lock(&sv->eng.mu);
    uint64_t id = ++sv->counter;
    pthread_mutex_unlock(&sv->eng.mu);
    const cJSON *stream_flag = cJSON_GetObjectItemCaseSensitive(root, "stream");
    bool streaming = cJSON_IsTrue(stream_flag);
    bool ok = j && (!stream_flag || cJSON_IsBool(stream_flag) || cJSON_IsNull(stream_flag));
    if (j && !ok) snprintf(err, sizeof err, "stream must be true or false");
    if (ok) ok = read_sampling(sv, root, j, err, sizeof err) && read_prompt(sv, root, chat, j, err, sizeof err);
    cJSON_Delete(root);
    if (!ok) {
        if (j) serve_job_release(&sv->eng, j);
        return send_error(c, 400, "invalid_request_error", "%s", err);
    }
    if (!serve_submit(&sv->eng, j)) {
        serve_job_release(&sv->eng, j);
        return send_error(c, 503, "server_busy", "every slot is busy and the queue is full; try again later");
    }
    if (streaming) {
        stream *st = calloc(1, sizeof *st);
        struct MHD_Response *r = st ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, st, stream_free)
                                    : NULL;
        if (!r) {
            free(st);
            pthread_mutex_lock(&sv->eng.mu);
            j->cancelled = true;
            pthread_mutex_unlock(&sv->eng.mu);
            serve_job_release(&sv->eng, j);
            return MHD_NO;
        }
        *st = (stream){ .sv = sv, .job = j, .id = id, .chat = chat };
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        enum MHD_Result res = MHD_queue_response(c, 200, r);
        MHD_destroy_response(r);
        return res;
    }
    pthread_mutex_lock(&sv->eng.mu);
    while (!j->done) pthread_cond_wait(&j->changed, &sv->eng.mu);
    cJSON *res = j->error[0] ? NULL : result_json(sv, chat, false, true, id, j->text, j->len, j->finish, j);
    char why[256];
    snprintf(why, sizeof why, "%s", j->error);
    pthread_mutex_unlock(&sv->eng.mu);
    serve_job_release(&sv->eng, j);
    if (!res) return send_error(c, 500, "server_error", "%s", why);
    return send_json(c, 200, res);
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *c, const char *url, const char *method, const char *version,
                              const char *upload, size_t *upload_size, void **con_cls)
{
    (void)version;
    server *sv = cls;
    request *rq = *con_cls;
    if (!rq) {   /* the headers: the body comes in the next calls */
        rq = calloc(1, sizeof *rq);
        if (!rq) return MHD_NO;
        *con_cls = rq;
        return MHD_YES;
    }
    if (*upload_size) {
        if (rq->len + *upload_size > BODY_MAX) rq->too_big = true;
        else {
            char *b = realloc(rq->body, rq->len + *upload_size + 1);
            if (!b) return MHD_NO;
            memcpy(b + rq->len, upload, *upload_size);
            rq->body = b;
            rq->len += *upload_size;
            rq->body[rq->len] = 0;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (!strcmp(url, "/health") && get) return send_text(c, 200, "application/json", strdup("{\"status\":\"ok\"}"));
    if (!strcmp(url, "/v1/models") && get) {
        cJSON *j = cJSON_CreateObject(), *list = cJSON_AddArrayToObject(j, "data"), *m = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "object", "list");
        cJSON_AddStringToObject(m, "id", sv->name);
        cJSON_AddStringToObject(m, "object", "model");
        cJSON_AddNumberToObject(m, "created", 0);
        cJSON_AddStringToObject(m, "owned_by", "wgml");
        cJSON_AddItemToArray(list, m);
        return send_json(c, 200, j);
    }
    if (!strcmp(url, "/v1/completions") && post) return generate(sv, c, rq, false);
    if (!strcmp(url, "/v1/chat/completions") && post) return generate(sv, c, rq, true);
    bool known = !strcmp(url, "/health") || !strcmp(url, "/v1/models") || !strcmp(url, "/v1/completions") ||
                 !strcmp(url, "/v1/chat/completions");
    if (known) return send_error(c, 405, "invalid_request_error", "%s does not take %s", url, method);
    return send_error(c, 404, "invalid_request_error", "no route %s", url);
}

static void request_done(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode why)
{
    (void)cls;
    (void)c;
    (void)why;
    request *rq = *con_cls;
    if (rq) free(rq->body);
    free(rq);
    *con_cls = NULL;
}

static volatile sig_atomic_t quit;
static void on_signal(int sig) { (void)sig; quit = 1; }

int cmd_serve(int argc, char **argv)
{
    const char *who = "wgml serve";
    serve_opts o = { .model = "out", .host = "127.0.0.1", .port = 8080, .slots = 4, .queue = 64, .max_tokens = 256,
                     .dtype = "auto", .precision = "f32", .sp = SAMPLE_DEFAULTS };
    bool given[NFLAGS] = { false };
    int pr = cli_parse_given(argc, argv, serve_flags, NFLAGS, &o, "wgml serve --model DIR [options]",
                             "Serves a model over HTTP with OpenAI's API (/v1/models, /v1/completions, /v1/chat/completions, "
                             "streaming as server-sent events); the requests running at once are decoded together. The "
                             "sampling flags and generation_config.json give a request's defaults.", given);
    if (pr <= 0) return -pr;
    if (generation_config(who, o.model, &o.sp, given, serve_flags, NFLAGS) != 0) return 1;
    wgml_weights weights;
    if (model_weights(who, o.dtype, o.quantize, &weights) != 0 || cli_check_precision(who, o.precision, -1) != 0) return 2;
    struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons((uint16_t)o.port) };
    if (inet_pton(AF_INET, o.host, &addr.sin_addr) != 1) {
        fprintf(stderr, "%s: --host %s is not an IPv4 address\n", who, o.host);
        return 2;
    }

    int rc = 1;
    struct MHD_Daemon *d = NULL;
    server sv = { .o = &o };
    model_chat mc;
    if (model_chat_open(who, o.model, o.precision, weights, o.adapter, o.chat_template, &mc) != 0) return 1;
    wgml_model *m = mc.m;
    sv.cfg = wgml_model_get_config(m);
    sv.chat = mc.chat;
    sv.chat_opts = mc.chat_opts;
    wgml_tokenizer_specials(mc.tok, &sv.prefix, &sv.nprefix, NULL, NULL);
    const char *slash = strrchr(o.model, '/');
    sv.name = o.name ? o.name : slash && slash[1] ? slash + 1 : o.model;
    uint32_t cap;
    if (model_context(who, sv.cfg, o.context, &cap) != 0) goto done;
    sv.eng = (serve_engine){ .ctx = mc.ctx, .eng = mc.eng, .model = m, .tok = mc.tok, .slots = (uint32_t)o.slots,
                             .context = cap, .queue_max = (uint32_t)o.queue };
    if (serve_engine_start(&sv.eng) != 0) goto done;

    d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL,
                         answer, &sv, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr, MHD_OPTION_NOTIFY_COMPLETED, request_done,
                         NULL, MHD_OPTION_CONNECTION_LIMIT, (unsigned)(o.slots + o.queue + 16), MHD_OPTION_END);
    if (!d) {
        fprintf(stderr, "%s: cannot listen on %s:%d (in use, or not this machine's address)\n", who, o.host, o.port);
        goto done;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    char wname[128];
    fprintf(stderr, "%s: model %s (%s weights, chat format %s), %d slots of %u positions, queue %d; sampling defaults: ", who,
            sv.name, model_weights_name(m, wname, sizeof wname), wgml_chat_format_name(sv.chat), o.slots, cap, o.queue);
    sample_opts_describe(&o.sp, stderr);
    fprintf(stderr, "\n%s: listening on http://%s:%u\n", who, o.host, info ? info->port : (unsigned)o.port);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGPIPE, SIG_IGN);
    while (!quit) {
        struct timespec ts = { 0, 100 * 1000 * 1000 };
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&sv.eng.mu);
        bool failed = sv.eng.stop;
        pthread_mutex_unlock(&sv.eng.mu);
        if (failed) {
            fprintf(stderr, "%s: the engine stopped: %s\n", who, sv.eng.error);
            break;
        }
    }
    rc = quit ? 0 : 1;
    fprintf(stderr, "%s: stopping\n", who);

done:
    /* the engine first (every waiting handler wakes with its job cancelled), then the
       connections, then what they shared */
    serve_engine_stop(&sv.eng);
    if (d) MHD_stop_daemon(d);
    serve_engine_free(&sv.eng);
    model_chat_close(&mc);
    return rc;
}
