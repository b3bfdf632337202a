/* What generate and chat share: sampling options (with generation_config.json's
   defaults), the sampler that picks each token, and the printer that streams decoded text
   up to a stop string. */
#include "decode.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

wgml_status sampler_next(sampler *s, const uint32_t *hist, size_t n, uint32_t *out)
{
    return wgml_sampler_next_gpu(s->e, &s->smp, 1, s->logits, &hist, &n, out);
}

int generation_config(const char *who, const char *model, sample_opts *o, const bool *given, const cli_flag *flags,
                      size_t nflags)
{
    char path[4096];
    struct stat st;
    if (stat(model, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
    snprintf(path, sizeof path, "%s/generation_config.json", model);
    if (stat(path, &st) != 0) return 0;
    size_t len = 0;
    uint8_t *text = cli_read_file(who, path, 1 << 20, &len);
    if (!text) return -1;
    cJSON *root = cJSON_ParseWithLength((const char *)text, len);
    free(text);
    if (!cJSON_IsObject(root)) {
        fprintf(stderr, "%s: %s is not a JSON object\n", who, path);
        cJSON_Delete(root);
        return -1;
    }
    static const struct { const char *key, *flag; size_t off; double lo, hi; } keys[] = {
        { "temperature", "--temperature", offsetof(sample_opts, temperature), 0, 100 },
        { "top_p", "--top-p", offsetof(sample_opts, top_p), 1e-6, 1 },
        { "min_p", "--min-p", offsetof(sample_opts, min_p), 0, 1 },
        { "repetition_penalty", "--repetition-penalty", offsetof(sample_opts, repetition_penalty), 1e-3, 100 },
    };
    int rc = 0;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0] && !rc; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, keys[i].key);
        bool set = false;
        for (size_t f = 0; f < nflags; f++) set |= given[f] && !strcmp(flags[f].name, keys[i].flag);
        if (!v || cJSON_IsNull(v) || set) continue;
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= keys[i].lo && v->valuedouble <= keys[i].hi)) {
            fprintf(stderr, "%s: %s: %s must be a number in [%g, %g]\n", who, path, keys[i].key, keys[i].lo, keys[i].hi);
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
            fprintf(stderr, "%s: %s: top_k must be an integer in [0, 16777216]\n", who, path);
            rc = -1;
        } else
            o->top_k = (int)k->valuedouble;
    }
    if (!rc && ds && !cJSON_IsNull(ds) && !temp_given) {
        if (!cJSON_IsBool(ds)) {
            fprintf(stderr, "%s: %s: do_sample must be true or false\n", who, path);
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


/* The length of the valid UTF-8 sequence at s[0..n) (1 to 4), or 0 when none starts there
   (a stray continuation byte, an overlong form, a surrogate, past U+10FFFF, cut short). */
static size_t utf8_sequence(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    if (c < 0x80) return 1;
    size_t len = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (!len || len > n) return 0;
    unsigned lo = 0x80, hi = 0xBF;   /* the second byte's range */
    if (c == 0xE0) lo = 0xA0;
    else if (c == 0xED) hi = 0x9F;
    else if (c == 0xF0) lo = 0x90;
    else if (c == 0xF4) hi = 0x8F;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return len;
}

char *text_utf8(const char *text, size_t n)
{
    const unsigned char *s = (const unsigned char *)text;
    char *out = malloc(3 * n + 1), *o = out;
    if (!out) return NULL;
    for (size_t i = 0; i < n;) {
        size_t len = utf8_sequence(s + i, n - i);
        if (len && s[i]) {
            memcpy(o, s + i, len);
            o += len;
            i += len;
        } else {
            memcpy(o, "\xEF\xBF\xBD", 3);   /* U+FFFD */
            o += 3;
            i++;
        }
    }
    *o = 0;
    return out;
}

/* The longest suffix of s[0..n) that is a proper prefix of stop. */
static size_t stop_prefix(const unsigned char *s, size_t n, const char *stop, size_t sl)
{
    for (size_t k = sl - 1 < n ? sl - 1 : n; k > 0; k--)
        if (memcmp(s + n - k, stop, k) == 0) return k;
    return 0;
}

static void put(printer *p, const char *text, size_t len)
{
    if (p->write) {
        if (len) p->write(p->user, text, len);
        return;
    }
    if (len) fwrite(text, 1, len, stdout);   /* text may be NULL when empty */
    fflush(stdout);
}

bool printer_emit(printer *p, uint32_t id)
{
    if (p->stop && !p->stop_len) p->stop_len = strlen(p->stop);
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
    put(p, (const char *)p->pending, cut);
    memmove(p->pending, p->pending + cut, p->n - cut);
    p->n -= cut;
    return true;
}


void printer_finish(printer *p)
{
    put(p, (const char *)p->pending, p->n);
    p->n = 0;
}

int sampler_init(const char *who, sampler *s, wgml_context *c, wgml_engine *e, uint32_t vocab, const sample_opts *o)
{
    *s = (sampler){ .e = e, .vocab = vocab };
    wgml_sampling set = { .temperature = (float)o->temperature, .top_k = (uint32_t)o->top_k, .top_p = (float)o->top_p,
                          .min_p = (float)o->min_p, .repetition_penalty = (float)o->repetition_penalty,
                          .presence_penalty = (float)o->presence_penalty, .frequency_penalty = (float)o->frequency_penalty };
    if (wgml_tensor_create(c, WGML_F32, 1, (size_t[]){ vocab }, &s->logits) != WGML_OK) {
        fprintf(stderr, "%s: %s\n", who, wgml_last_error(c));
        sampler_free(s);
        return -1;
    }
    if (wgml_sampler_create(&set, vocab, o->seed, &s->smp) != WGML_OK) {
        fprintf(stderr, "%s: %s\n", who, wgml_last_error(NULL));
        sampler_free(s);
        return -1;
    }
    return 0;
}

void sampler_free(sampler *s)
{
    wgml_sampler_free(s->smp);
    wgml_tensor_release(s->logits);
    *s = (sampler){ 0 };
}

void sample_opts_describe(const sample_opts *o, FILE *f)
{
    fprintf(f, "%s", o->temperature > 0 ? cli_fmt("temperature %g", o->temperature) : "greedy");
    if (o->temperature > 0 && o->top_k) fprintf(f, ", top-k %d", o->top_k);
    if (o->temperature > 0 && o->top_p < 1) fprintf(f, ", top-p %g", o->top_p);
    if (o->temperature > 0 && o->min_p > 0) fprintf(f, ", min-p %g", o->min_p);
    if (o->repetition_penalty != 1) fprintf(f, ", repetition penalty %g", o->repetition_penalty);
    if (o->presence_penalty || o->frequency_penalty)
        fprintf(f, ", presence / frequency penalties %g / %g", o->presence_penalty, o->frequency_penalty);
}
