/* Training data: a text file, or JSONL records of {"text"}, {"prompt", "completion"} or
   {"messages": [...]}, tokenised into one stream of examples in which every token says
   whether predicting it counts in the loss; and the batcher that cuts that stream into
   training sequences, packed or padded, reproducibly from a seed and a position that a
   checkpoint can save. */
#include "io.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DATA_MAX_BYTES ((size_t)1 << 30)
#define LINE_MAX_BYTES ((size_t)16 << 20)

typedef struct example { size_t off, len; } example;

struct wgml_dataset {
    wgml_data_kind kind;
    uint32_t *ids;
    uint8_t *train;
    size_t n, cap;
    example *ex;
    size_t nex, excap;
    size_t trained;
};

static bool grow(wgml_dataset *d, size_t more)
{
    if (d->n + more <= d->cap) return true;
    size_t cap = d->cap ? d->cap : 4096;
    while (cap < d->n + more) {
        if (cap > SIZE_MAX / 8) return false;
        cap *= 2;
    }
    uint32_t *ids = realloc(d->ids, cap * sizeof *ids);
    if (!ids) return false;
    d->ids = ids;
    uint8_t *tr = realloc(d->train, cap);
    if (!tr) return false;
    d->train = tr;
    d->cap = cap;
    return true;
}

/* Appends the tokens of text[0..len) with the given loss flag. ordinary: added tokens in
   the text are plain text (free text must not smuggle special tokens in). */
static wgml_status append_text(wgml_dataset *d, const wgml_tokenizer *tok, const char *what, const char *text, size_t len,
                               bool train, bool ordinary)
{
    if (!len) return WGML_OK;
    /* at most one id per byte, except add_prefix_space: the encoder says what it needs */
    size_t cap = len + 1, n = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        if (!grow(d, cap)) return wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", what);
        wgml_status s = ordinary ? wgml_tokenizer_encode_ordinary(tok, text, len, d->ids + d->n, cap, &n)
                                 : wgml_tokenizer_encode(tok, text, len, d->ids + d->n, cap, &n);
        if (s == WGML_OK) break;
        if (s != WGML_ERROR_SHAPE || attempt) return wgml__fail(NULL, s, "%s: %s", what, wgml_last_error(NULL));
        cap = n;
    }
    memset(d->train + d->n, train, n);
    d->n += n;
    if (train) d->trained += n;
    return WGML_OK;
}

static wgml_status append_id(wgml_dataset *d, const char *what, uint32_t id, bool train)
{
    if (!grow(d, 1)) return wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", what);
    d->ids[d->n] = id;
    d->train[d->n++] = train;
    d->trained += train;
    return WGML_OK;
}

/* The tokenizer's template prefix (Llama 2's and Mistral's <s>), not learned: free text
   starts with it as Hugging Face's encode(text) starts it. */
static wgml_status append_prefix(wgml_dataset *d, const wgml_tokenizer *tok, const char *what)
{
    const uint32_t *pre;
    size_t n;
    wgml_tokenizer_specials(tok, &pre, &n, NULL, NULL);
    for (size_t i = 0; i < n; i++) {
        wgml_status s = append_id(d, what, pre[i], false);
        if (s) return s;
    }
    return WGML_OK;
}

static wgml_status end_example(wgml_dataset *d, const char *what, size_t start, const wgml_dataset_options *o,
                               wgml_data_kind k)
{
    if (o->append_eos && k != WGML_DATA_MESSAGES) {
        /* the end of a document is learned where its text was */
        bool any = false;
        for (size_t i = start; i < d->n && !any; i++) any = d->train[i];
        wgml_status s = append_id(d, what, o->eos_id, any);
        if (s) return s;
    }
    if (d->n == start) return WGML_OK;   /* an empty record adds nothing */
    if (d->nex == d->excap) {
        size_t cap = d->excap ? 2 * d->excap : 256;
        example *p = realloc(d->ex, cap * sizeof *p);
        if (!p) return wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", what);
        d->ex = p;
        d->excap = cap;
    }
    d->ex[d->nex++] = (example){ start, d->n - start };
    return WGML_OK;
}

static const char *kind_name(wgml_data_kind k)
{
    return k == WGML_DATA_TEXT ? "{\"text\"}" : k == WGML_DATA_PROMPT_COMPLETION ? "{\"prompt\", \"completion\"}" : "{\"messages\"}";
}

/* One JSONL record (line number `line` of the file `path`). */
static wgml_status record(wgml_dataset *d, const wgml_tokenizer *tok, const wgml_dataset_options *o, const char *path,
                          size_t line, const char *text, size_t len)
{
    char what[512];
    snprintf(what, sizeof what, "%s:%zu", path, line);
    cJSON *root = NULL;
    /* a record's values are strings, a few per message */
    wgml_status s = wgml__json_parse(what, text, len, 2, &root);
    if (s) return s;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "text");
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt"), *c = cJSON_GetObjectItemCaseSensitive(root, "completion");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "messages");
    wgml_data_kind k = !cJSON_IsObject(root) ? 0 : t ? WGML_DATA_TEXT : (p || c) ? WGML_DATA_PROMPT_COMPLETION : m ? WGML_DATA_MESSAGES : 0;
    if (!k)
        s = wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: a record must be an object with \"text\", \"prompt\" and \"completion\", or "
                       "\"messages\"", what);
    else if (d->kind && d->kind != k)
        s = wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: a %s record in a file of %s records", what, kind_name(k), kind_name(d->kind));
    size_t start = d->n;
    if (!s && k == WGML_DATA_TEXT) {
        if (!cJSON_IsString(t)) s = wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: \"text\" must be a string", what);
        else if (t->valuestring[0] && !(s = append_prefix(d, tok, what)))
            s = append_text(d, tok, what, t->valuestring, strlen(t->valuestring), true, true);
    } else if (!s && k == WGML_DATA_PROMPT_COMPLETION) {
        if (!cJSON_IsString(p) || !cJSON_IsString(c))
            s = wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: \"prompt\" and \"completion\" must both be strings", what);
        if (!s && (p->valuestring[0] || c->valuestring[0])) s = append_prefix(d, tok, what);
        if (!s) s = append_text(d, tok, what, p->valuestring, strlen(p->valuestring), o->loss_on_prompt, true);
        if (!s) s = append_text(d, tok, what, c->valuestring, strlen(c->valuestring), true, true);
    } else if (!s && k == WGML_DATA_MESSAGES) {
        size_t n = 0;
        for (const cJSON *e = cJSON_IsArray(m) ? m->child : NULL; e; e = e->next) n++;
        wgml_chat_message *msgs = cJSON_IsArray(m) && n ? calloc(n, sizeof *msgs) : NULL;
        if (!cJSON_IsArray(m) || !n) s = wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: \"messages\" must be a non-empty array", what);
        else if (!msgs) s = wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", what);
        else if (o->chat_format == WGML_CHAT_UNKNOWN)
            s = wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: a messages record, but opts chat_format is WGML_CHAT_UNKNOWN: "
                           "name one of chatml, smollm2, qwen2, llama3, llama3.1, zephyr (wgml finetune: --chat-template; "
                           "it is recognised from a model's own template when wgml knows it)", what);
        size_t i = 0;
        for (const cJSON *e = !s ? m->child : NULL; e && !s; e = e->next, i++) {
            const cJSON *r = cJSON_GetObjectItemCaseSensitive(e, "role"), *ct = cJSON_GetObjectItemCaseSensitive(e, "content");
            if (!cJSON_IsString(r) || !cJSON_IsString(ct))
                s = wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: messages[%zu] must have string \"role\" and \"content\"", what, i);
            else msgs[i] = (wgml_chat_message){ r->valuestring, ct->valuestring };
        }
        wgml_chat *chat = NULL;
        if (!s && wgml_chat_render(o->chat_format, msgs, n, &o->chat, &chat) != WGML_OK)
            s = wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s", what, wgml_last_error(NULL));
        /* each segment alone: its special tokens (<|im_start|>, ...) are the template's */
        for (size_t g = 0; !s && g < wgml_chat_segment_count(chat); g++) {
            size_t sl;
            bool a;
            const char *seg = wgml_chat_segment(chat, g, &sl, &a);
            s = append_text(d, tok, what, seg, sl, a || o->loss_on_prompt, false);
        }
        wgml_chat_free(chat);
        free(msgs);
    }
    if (!s) s = end_example(d, what, start, o, k);
    if (!s) d->kind = k;
    cJSON_Delete(root);
    return s;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

void wgml_dataset_free(wgml_dataset *d)
{
    if (!d) return;
    free(d->ids);
    free(d->train);
    free(d->ex);
    free(d);
}

wgml_status wgml_dataset_load(const char *path, const wgml_tokenizer *tok, const wgml_dataset_options *opts, wgml_dataset **out)
{
    const char *fn = "wgml_dataset_load";
    if (out) *out = NULL;
    if (!path || !tok || !out) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: path, tok and out must not be NULL", fn);
    wgml_dataset_options o = opts ? *opts : (wgml_dataset_options){ 0 };
    if (o.append_eos && o.eos_id >= wgml_tokenizer_vocab_size(tok))
        return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: eos_id %u is not below the tokenizer's vocabulary of %u", fn,
                          o.eos_id, wgml_tokenizer_vocab_size(tok));
    char *text = NULL;
    size_t len = 0;
    wgml_status s = wgml__read_file(path, false, DATA_MAX_BYTES, &text, &len);
    if (s) return s;
    wgml_dataset *d = calloc(1, sizeof *d);
    if (!d) s = wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    if (!s && ends_with(path, ".jsonl")) {
        size_t line = 0, records = 0;
        for (size_t at = 0; at < len && !s;) {
            const char *nl = memchr(text + at, '\n', len - at);
            size_t end = nl ? (size_t)(nl - text) : len;
            line++;
            size_t b = at, e = end;
            while (b < e && (text[b] == ' ' || text[b] == '\t' || text[b] == '\r')) b++;
            while (e > b && (text[e - 1] == ' ' || text[e - 1] == '\t' || text[e - 1] == '\r')) e--;
            if (e - b > LINE_MAX_BYTES)
                s = wgml__fail(NULL, WGML_ERROR_FORMAT, "%s:%zu: a line of %zu bytes, more than the %zu a record may have", path,
                               line, e - b, LINE_MAX_BYTES);
            else if (e > b) {
                s = record(d, tok, &o, path, line, text + b, e - b);
                records++;
            }
            at = end + 1;
        }
        if (!s && !records) s = wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: no records", path);
    } else if (!s) {
        /* plain text: one document, all of it learned (as wgml train) */
        if (wgml__utf8_check((const uint8_t *)text, len) != len && !o.allow_bytes)
            s = wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: not UTF-8 text (invalid at byte %zu)", path,
                           wgml__utf8_check((const uint8_t *)text, len));
        if (!s && len) s = append_prefix(d, tok, path);
        if (!s) s = append_text(d, tok, path, text, len, true, true);
        if (!s) s = end_example(d, path, 0, &o, WGML_DATA_TEXT);
        if (!s) d->kind = WGML_DATA_TEXT;
    }
    free(text);
    if (!s && !d->nex) s = wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: no tokens", path);
    if (!s && !d->trained) s = wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: no token carries the loss", path);
    if (s) {
        wgml_dataset_free(d);
        return s;
    }
    *out = d;
    return WGML_OK;
}

wgml_data_kind wgml_dataset_kind(const wgml_dataset *d) { return d ? d->kind : 0; }
size_t wgml_dataset_examples(const wgml_dataset *d) { return d ? d->nex : 0; }
size_t wgml_dataset_tokens(const wgml_dataset *d) { return d ? d->n : 0; }
size_t wgml_dataset_trained_tokens(const wgml_dataset *d) { return d ? d->trained : 0; }

const uint32_t *wgml_dataset_example(const wgml_dataset *d, size_t i, const uint8_t **train, size_t *len)
{
    if (!d || i >= d->nex) {
        if (len) *len = 0;
        if (train) *train = NULL;
        return NULL;
    }
    if (len) *len = d->ex[i].len;
    if (train) *train = d->train + d->ex[i].off;
    return d->ids + d->ex[i].off;
}

/* ---- the batcher ---------------------------------------------------------------------- */

struct wgml_batcher {
    const wgml_dataset *d;
    wgml_batcher_options o;
    size_t first, count;       /* packed: tokens [first, first + count); padded: those examples */
    size_t *order;             /* padded: this epoch's order of the examples */
    wgml_batcher_stats stats;
    wgml_batcher_state st;
};

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The order of an epoch: a Fisher-Yates shuffle seeded by the seed and the epoch only, so
   a batcher set to a saved state finds it again; file order when sequential. */
static void shuffle(wgml_batcher *b)
{
    if (b->o.sequential) {
        for (size_t i = 0; i < b->count; i++) b->order[i] = b->first + i;
        return;
    }
    uint64_t r = b->o.seed ^ (0xA24BAED4963EE407ull * (b->st.epoch + 1));
    for (size_t i = 0; i < b->count; i++) b->order[i] = b->first + i;
    for (size_t i = b->count; i > 1; i--) {
        size_t j = (size_t)(splitmix(&r) % i);
        size_t t = b->order[i - 1];
        b->order[i - 1] = b->order[j];
        b->order[j] = t;
    }
}

/* The part's stats: its learned targets as the rows will hold them, and the cuts. */
static void count_part(wgml_batcher *b)
{
    const wgml_dataset *d = b->d;
    wgml_batcher_stats *st = &b->stats;
    st->items = b->count;
    if (b->o.packed) {
        for (size_t i = b->first + 1; i < b->first + b->count; i++) st->learned += d->train[i];
        return;
    }
    size_t keep = (size_t)b->o.seq_len + 1;
    for (size_t e = b->first; e < b->first + b->count; e++) {
        const uint8_t *tr = d->train + d->ex[e].off;
        size_t len = d->ex[e].len, in = 0, past = 0;
        for (size_t i = 1; i < len; i++) {
            if (i < keep) in += tr[i];
            else past += tr[i];
        }
        st->learned += in;
        st->cut += len > keep;
        st->cut_empty += len > keep && !in && past;
    }
}

wgml_status wgml_batcher_create(const wgml_dataset *d, const wgml_batcher_options *opts, wgml_batcher **out)
{
    const char *fn = "wgml_batcher_create";
    if (out) *out = NULL;
    if (!d || !opts || !out) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: d, opts and out must not be NULL", fn);
    wgml_batcher_options o = *opts;
    if (!o.batch || !o.seq_len) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: opts batch and seq_len must be at least 1", fn);
    if (!(o.part_begin >= 0 && o.part_begin < o.part_end && o.part_end <= 1) && !(o.part_begin == 0 && o.part_end == 0))
        return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: opts part [%g, %g) must lie in [0, 1]", fn, o.part_begin, o.part_end);
    if (o.part_end == 0) o.part_end = 1;
    wgml_batcher *b = calloc(1, sizeof *b);
    if (!b) return wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    b->d = d;
    b->o = o;
    size_t total = o.packed ? d->n : d->nex;
    /* to the nearest: a part given as count / total comes out as that count */
    b->first = (size_t)floor(o.part_begin * (double)total + 0.5);
    size_t end = (size_t)floor(o.part_end * (double)total + 0.5);
    b->count = end > b->first ? end - b->first : 0;
    wgml_status s = WGML_OK;
    if (o.packed && !o.sequential && b->count < (size_t)o.seq_len + 1)
        s = wgml__fail(NULL, WGML_ERROR_SHAPE, "%s: this part of the data has %zu tokens, fewer than one sequence of seq_len + 1 "
                       "= %u", fn, b->count, o.seq_len + 1);
    if (!o.packed && !b->count) s = wgml__fail(NULL, WGML_ERROR_SHAPE, "%s: this part of the data holds no example", fn);
    if (!s) {
        count_part(b);
        if (!b->stats.learned)
            s = wgml__fail(NULL, WGML_ERROR_SHAPE, "%s: this part of the data has no learned target%s", fn,
                           b->stats.cut_empty ? " within seq_len + 1 tokens of an example's start: a longer seq_len "
                                                "would reach them" : "");
    }
    if (!s && !o.packed) {
        b->order = malloc(b->count * sizeof *b->order);
        if (!b->order) s = wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    }
    if (s) {
        wgml_batcher_free(b);
        return s;
    }
    b->st = (wgml_batcher_state){ .rng = o.seed ^ 0xD1B54A32D192ED03ull };
    if (!o.packed && !o.sequential) shuffle(b);
    if (!o.packed && o.sequential)
        for (size_t i = 0; i < b->count; i++) b->order[i] = b->first + i;
    *out = b;
    return WGML_OK;
}

void wgml_batcher_free(wgml_batcher *b)
{
    if (!b) return;
    free(b->order);
    free(b);
}

wgml_status wgml_batcher_next(wgml_batcher *b, uint32_t *ids, uint32_t *targets)
{
    if (!b || !ids || !targets) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_batcher_next: b, ids and targets must not be NULL");
    const wgml_dataset *d = b->d;
    size_t T = b->o.seq_len;
    for (uint32_t r = 0; r < b->o.batch; r++) {
        uint32_t *in = ids + (size_t)r * T, *tg = targets + (size_t)r * T;
        if (b->o.sequential && b->st.epoch) {   /* read once already: rows that count for nothing */
            for (size_t i = 0; i < T; i++) {
                in[i] = d->ids[b->first];
                tg[i] = UINT32_MAX;
            }
            continue;
        }
        if (b->o.packed && b->o.sequential) {
            /* the next window: T inputs from where the last one ended, their targets up to
               the part's end */
            size_t off = b->first + (size_t)b->st.position;
            for (size_t i = 0; i < T; i++) {
                size_t at = off + i;
                bool real = at < b->first + b->count;
                in[i] = d->ids[real ? at : b->first + b->count - 1];
                tg[i] = real && at + 1 < b->first + b->count && d->train[at + 1] ? d->ids[at + 1] : UINT32_MAX;
            }
            b->st.position += T;
            if (b->st.position + 1 >= b->count) b->st.epoch = 1;
            continue;
        }
        if (b->o.packed) {
            /* a window of T + 1 tokens at a random offset (documents run into each other,
               separated by their EOS) */
            size_t off = b->first + (size_t)(splitmix(&b->st.rng) % (b->count - T));
            for (size_t i = 0; i < T; i++) {
                in[i] = d->ids[off + i];
                tg[i] = d->train[off + i + 1] ? d->ids[off + i + 1] : UINT32_MAX;
            }
            b->st.position++;
        } else {
            /* the next example of the epoch, cut to T + 1 tokens or padded with ignored
               targets (the pad id is the example's last token: never learned) */
            if (b->st.position == b->count) {
                b->st.epoch++;
                b->st.position = 0;
                shuffle(b);
            }
            if (b->o.sequential && b->st.position + 1 == b->count) b->st.epoch = 1;   /* the last one */
            size_t e = b->order[b->st.position++];
            size_t len = d->ex[e].len, off = d->ex[e].off;
            for (size_t i = 0; i < T; i++) {
                bool real = i < len;
                in[i] = real ? d->ids[off + i] : d->ids[off + len - 1];
                tg[i] = i + 1 < len && d->train[off + i + 1] ? d->ids[off + i + 1] : UINT32_MAX;
            }
        }
    }
    return WGML_OK;
}

wgml_status wgml_batcher_get_state(const wgml_batcher *b, wgml_batcher_state *st)
{
    if (!b || !st) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_batcher_get_state: b and st must not be NULL");
    *st = b->st;
    return WGML_OK;
}

wgml_status wgml_batcher_set_state(wgml_batcher *b, const wgml_batcher_state *st)
{
    if (!b || !st) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_batcher_set_state: b and st must not be NULL");
    if (!b->o.packed && st->position > b->count)
        return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_batcher_set_state: position %llu is past the %zu examples "
                          "of an epoch", (unsigned long long)st->position, b->count);
    b->st = *st;
    if (!b->o.packed) shuffle(b);
    return WGML_OK;
}

wgml_status wgml_batcher_get_stats(const wgml_batcher *b, wgml_batcher_stats *st)
{
    if (!b || !st) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_batcher_get_stats: b and st must not be NULL");
    *st = b->stats;
    return WGML_OK;
}
