/* Chat templates: the conversation formats of the model families wgml fine-tunes and runs,
   rendered in C exactly as Hugging Face's apply_chat_template renders their Jinja templates
   (trim_blocks and lstrip_blocks on), and recognised from the template text of
   tokenizer_config.json. Jinja itself is not interpreted: a template is matched to one of
   the formats below, and anything else is refused by name rather than rendered wrongly.

   A rendering is a list of segments, each marked as part of an assistant's turn (its
   content and its end-of-turn marker, what assistant-only training puts the loss on) or
   not (headers, other roles, separators). */
#include "io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct segment { size_t start, len; bool assistant; } segment;

struct wgml_chat {
    char *text;
    size_t len, cap;
    segment *seg;
    size_t nseg, segcap;
    bool oom;
};

static const struct { const char *name; wgml_chat_format format; } names[] = {
    { "chatml", WGML_CHAT_CHATML }, { "smollm2", WGML_CHAT_SMOLLM2 }, { "qwen2", WGML_CHAT_QWEN2 },
    { "llama3", WGML_CHAT_LLAMA3 }, { "llama3.1", WGML_CHAT_LLAMA31 }, { "zephyr", WGML_CHAT_ZEPHYR },
};
#define NNAMES (sizeof names / sizeof names[0])

/* The default system messages of the ChatML families that have one. */
#define SMOLLM2_SYSTEM "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
#define QWEN2_SYSTEM "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

const char *wgml_chat_format_name(wgml_chat_format f)
{
    for (size_t i = 0; i < NNAMES; i++)
        if (names[i].format == f) return names[i].name;
    return "unknown";
}

wgml_status wgml_chat_format_from_name(const char *name, wgml_chat_format *out)
{
    if (!name || !out) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_chat_format_from_name: name and out must not be NULL");
    for (size_t i = 0; i < NNAMES; i++)
        if (strcmp(names[i].name, name) == 0) {
            *out = names[i].format;
            return WGML_OK;
        }
    char q[WGML__QUOTE_MAX];
    return wgml__fail(NULL, WGML_ERROR_UNSUPPORTED, "wgml_chat_format_from_name: no chat format '%s' (wgml renders chatml, "
                      "smollm2, qwen2, llama3, llama3.1 and zephyr)", wgml__quote(q, sizeof q, name, strlen(name)));
}

wgml_status wgml_chat_format_detect(const char *template_text, wgml_chat_format *out)
{
    if (!template_text || !out)
        return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_chat_format_detect: template_text and out must not be NULL");
    *out = WGML_CHAT_UNKNOWN;
    const char *t = template_text;
    if (strstr(t, "<|im_start|>")) {
        /* reasoning templates (Qwen3) rewrite assistant turns: not plain ChatML */
        if (strstr(t, "<think>"))
            return wgml__fail(NULL, WGML_ERROR_UNSUPPORTED, "wgml_chat_format_detect: a ChatML template with <think> blocks "
                              "(a reasoning model's) is not supported; force a format with its name if plain ChatML fits");
        *out = strstr(t, "named SmolLM") ? WGML_CHAT_SMOLLM2 : strstr(t, "You are Qwen, created by Alibaba Cloud")
                                                                ? WGML_CHAT_QWEN2 : WGML_CHAT_CHATML;
        return WGML_OK;
    }
    if (strstr(t, "<|start_header_id|>") && strstr(t, "<|eot_id|>")) {
        *out = strstr(t, "Cutting Knowledge Date") ? WGML_CHAT_LLAMA31 : WGML_CHAT_LLAMA3;
        return WGML_OK;
    }
    if (strstr(t, "<|user|>") && strstr(t, "<|assistant|>")) {
        *out = WGML_CHAT_ZEPHYR;
        return WGML_OK;
    }
    return wgml__fail(NULL, WGML_ERROR_UNSUPPORTED, "wgml_chat_format_detect: the chat template is none of the formats wgml "
                      "renders (chatml, smollm2, qwen2, llama3, llama3.1, zephyr); name one to force it");
}

/* ---- building a rendering ------------------------------------------------------------ */

static void put(wgml_chat *c, const char *s, size_t n, bool assistant)
{
    if (c->oom || n == 0) return;
    if (n > SIZE_MAX / 2 - c->len) { c->oom = true; return; }
    if (c->len + n + 1 > c->cap) {
        size_t cap = c->cap ? c->cap : 256;
        while (cap < c->len + n + 1) cap *= 2;
        char *p = realloc(c->text, cap);
        if (!p) { c->oom = true; return; }
        c->text = p;
        c->cap = cap;
    }
    memcpy(c->text + c->len, s, n);
    if (c->nseg && c->seg[c->nseg - 1].assistant == assistant) {
        c->seg[c->nseg - 1].len += n;
    } else {
        if (c->nseg == c->segcap) {
            size_t cap = c->segcap ? 2 * c->segcap : 16;
            segment *p = realloc(c->seg, cap * sizeof *p);
            if (!p) { c->oom = true; return; }
            c->seg = p;
            c->segcap = cap;
        }
        c->seg[c->nseg++] = (segment){ c->len, n, assistant };
    }
    c->len += n;
    c->text[c->len] = 0;
}

static void puts_(wgml_chat *c, const char *s, bool assistant) { put(c, s, strlen(s), assistant); }

/* Length of the UTF-8 whitespace character at s (Python's str.isspace, which Jinja's trim
   strips), or 0. */
static size_t space_at(const char *s, size_t n)
{
    unsigned char b = (unsigned char)s[0];
    if (b == ' ' || (b >= 0x09 && b <= 0x0D) || (b >= 0x1C && b <= 0x1F)) return 1;
    uint32_t cp;
    size_t l = wgml__utf8_decode((const uint8_t *)s, n, &cp);
    if (!l) return 0;
    bool ws = cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
              cp == 0x202F || cp == 0x205F || cp == 0x3000;
    return ws ? l : 0;
}

/* content with leading and trailing whitespace removed, as Jinja's trim */
static void put_trimmed(wgml_chat *c, const char *s, bool assistant)
{
    size_t n = strlen(s), a = 0, b = n;
    for (size_t l; a < n && (l = space_at(s + a, n - a)); a += l) {}
    while (b > a) {
        size_t k = b - 1;   /* the start of the last character */
        while (k > a && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
        size_t l = space_at(s + k, b - k);
        if (l != b - k) break;
        b = k;
    }
    put(c, s + a, b - a, assistant);
}

static bool is_role(const char *r, const char *want) { return strcmp(r, want) == 0; }

static void chatml(wgml_chat *c, const wgml_chat_message *m, size_t n, const char *default_system, bool qwen)
{
    /* Qwen2's template writes its default system message even for no messages; SmolLM2's
       inside the loop, before the first message */
    bool sys_first = n && is_role(m[0].role, "system");
    if (default_system && !sys_first && (qwen || n)) {
        puts_(c, "<|im_start|>system\n", false);
        puts_(c, default_system, false);
        puts_(c, "<|im_end|>\n", false);
    }
    for (size_t i = 0; i < n; i++) {
        bool a = is_role(m[i].role, "assistant");
        puts_(c, "<|im_start|>", false);
        puts_(c, m[i].role, false);
        puts_(c, "\n", false);
        puts_(c, m[i].content, a);
        puts_(c, "<|im_end|>", a);
        puts_(c, "\n", false);
    }
}

static void llama3(wgml_chat *c, const wgml_chat_message *m, size_t n, const wgml_chat_options *o, bool v31)
{
    size_t first = 0;
    if (v31) {
        puts_(c, o->bos_token, false);
        puts_(c, "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: ", false);
        puts_(c, o->date_string ? o->date_string : "26 Jul 2024", false);
        puts_(c, "\n\n", false);
        if (n && is_role(m[0].role, "system")) {
            put_trimmed(c, m[0].content, false);
            first = 1;
        }
        puts_(c, "<|eot_id|>", false);
    }
    for (size_t i = first; i < n; i++) {
        bool a = is_role(m[i].role, "assistant");
        if (i == 0 && !v31) puts_(c, o->bos_token, false);   /* llama3.1 wrote it before its header */
        puts_(c, "<|start_header_id|>", false);
        puts_(c, m[i].role, false);
        puts_(c, "<|end_header_id|>\n\n", false);
        put_trimmed(c, m[i].content, a);
        puts_(c, "<|eot_id|>", a);
    }
}

static void zephyr(wgml_chat *c, const wgml_chat_message *m, size_t n, const wgml_chat_options *o)
{
    for (size_t i = 0; i < n; i++) {
        bool a = is_role(m[i].role, "assistant");
        puts_(c, "<|", false);
        puts_(c, m[i].role, false);
        puts_(c, "|>\n", false);
        puts_(c, m[i].content, a);
        puts_(c, o->eos_token, a);
        puts_(c, "\n", false);
        /* the template writes the generation prompt inside its loop: none for no messages */
        if (i == n - 1 && o->add_generation_prompt) puts_(c, "<|assistant|>\n", false);
    }
}

wgml_status wgml_chat_render(wgml_chat_format f, const wgml_chat_message *messages, size_t n, const wgml_chat_options *opts,
                             wgml_chat **out)
{
    const char *fn = "wgml_chat_render";
    if (out) *out = NULL;
    if (!out || (!messages && n)) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: out and messages must not be NULL", fn);
    wgml_chat_options o = opts ? *opts : (wgml_chat_options){ 0 };
    if (!o.bos_token) o.bos_token = "";
    if (!o.eos_token) o.eos_token = "";
    if (f == WGML_CHAT_ZEPHYR && !o.eos_token[0])
        return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: the zephyr format needs opts->eos_token", fn);
    if ((f == WGML_CHAT_LLAMA3 || f == WGML_CHAT_LLAMA31) && !o.bos_token[0])
        return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: the llama3 formats need opts->bos_token", fn);
    for (size_t i = 0; i < n; i++) {
        const char *r = messages[i].role;
        if (!r || !messages[i].content)
            return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: messages[%zu] has a NULL role or content", fn, i);
        if (!is_role(r, "system") && !is_role(r, "user") && !is_role(r, "assistant")) {
            char q[WGML__QUOTE_MAX];
            return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: messages[%zu] has the role '%s'; the chat formats know "
                              "system, user and assistant", fn, i, wgml__quote(q, sizeof q, r, strlen(r)));
        }
        if (is_role(r, "system") && i > 0 && (f == WGML_CHAT_LLAMA31))
            return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: messages[%zu]: the llama3.1 format takes a system "
                              "message first only", fn, i);
    }
    wgml_chat *c = calloc(1, sizeof *c);
    if (!c) return wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    switch (f) {
    case WGML_CHAT_CHATML: chatml(c, messages, n, NULL, false); break;
    case WGML_CHAT_SMOLLM2: chatml(c, messages, n, SMOLLM2_SYSTEM, false); break;
    case WGML_CHAT_QWEN2: chatml(c, messages, n, QWEN2_SYSTEM, true); break;
    case WGML_CHAT_LLAMA3: llama3(c, messages, n, &o, false); break;
    case WGML_CHAT_LLAMA31: llama3(c, messages, n, &o, true); break;
    case WGML_CHAT_ZEPHYR: zephyr(c, messages, n, &o); break;
    default:
        free(c);
        return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: f (%d) is not a wgml_chat_format", fn, (int)f);
    }
    if (o.add_generation_prompt) {
        if (f == WGML_CHAT_CHATML || f == WGML_CHAT_SMOLLM2 || f == WGML_CHAT_QWEN2) puts_(c, "<|im_start|>assistant\n", false);
        else if (f == WGML_CHAT_LLAMA3 || f == WGML_CHAT_LLAMA31) puts_(c, "<|start_header_id|>assistant<|end_header_id|>\n\n", false);
    }
    if (c->oom) {
        wgml_chat_free(c);
        return wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    }
    *out = c;
    return WGML_OK;
}

const char *wgml_chat_text(const wgml_chat *c, size_t *len)
{
    if (len) *len = c ? c->len : 0;
    return c && c->text ? c->text : "";
}

size_t wgml_chat_segment_count(const wgml_chat *c) { return c ? c->nseg : 0; }

const char *wgml_chat_segment(const wgml_chat *c, size_t i, size_t *len, bool *assistant)
{
    if (!c || i >= c->nseg) {
        if (len) *len = 0;
        if (assistant) *assistant = false;
        return NULL;
    }
    if (len) *len = c->seg[i].len;
    if (assistant) *assistant = c->seg[i].assistant;
    return c->text + c->seg[i].start;
}

void wgml_chat_free(wgml_chat *c)
{
    if (!c) return;
    free(c->text);
    free(c->seg);
    free(c);
}
