/* The text engines the tokenizer borrows from Debian: PCRE2 for Split pre-tokenizer
   patterns (any regex a tokenizer.json writes, with Unicode properties and case folding)
   and utf8proc for the NFC / NFD / NFKC / NFKD normalizers. */
#include "io.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

struct wgml__regex {
    pcre2_code *code;
};

wgml__regex *wgml__regex_compile(const char *pattern, size_t len, bool literal, char *err, size_t errsize)
{
    int code;
    PCRE2_SIZE at;
    uint32_t flags = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);   /* UCP is not allowed with LITERAL */
    pcre2_code *c = pcre2_compile((PCRE2_SPTR)pattern, len, flags, &code, &at, NULL);
    if (!c) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof msg);
        snprintf(err, errsize, "%s at offset %zu", (const char *)msg, (size_t)at);
        return NULL;
    }
    pcre2_jit_compile(c, PCRE2_JIT_COMPLETE);   /* faster where the JIT exists; the interpreter otherwise */
    wgml__regex *r = malloc(sizeof *r);
    if (!r) {
        pcre2_code_free(c);
        snprintf(err, errsize, "out of host memory");
        return NULL;
    }
    r->code = c;
    return r;
}

void wgml__regex_free(wgml__regex *r)
{
    if (!r) return;
    pcre2_code_free(r->code);
    free(r);
}

void *wgml__regex_scratch(const wgml__regex *r) { return pcre2_match_data_create_from_pattern(r->code, NULL); }
void wgml__regex_scratch_free(void *scratch) { pcre2_match_data_free(scratch); }

int wgml__regex_next(const wgml__regex *r, void *scratch, const uint8_t *s, size_t n, size_t from, size_t *start,
                     size_t *end)
{
    pcre2_match_data *md = scratch;
    /* the subject's UTF-8 is checked once, at the first search of it (a check per search
       would make a text's cutting quadratic) */
    int rc = pcre2_match(r->code, s, n, from, from ? PCRE2_NO_UTF_CHECK : 0, md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0) return -1;
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    *start = ov[0];
    *end = ov[1];
    return 1;
}

uint8_t *wgml__unicode_normalize(const uint8_t *s, size_t n, int form, size_t *out_len)
{
    int opts = UTF8PROC_STABLE;
    switch (form) {
    case WGML__NFC: opts |= UTF8PROC_COMPOSE; break;
    case WGML__NFD: opts |= UTF8PROC_DECOMPOSE; break;
    case WGML__NFKC: opts |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    default: opts |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
    }
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t len = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst, (utf8proc_option_t)opts);
    if (len < 0) {
        free(dst);
        return NULL;
    }
    *out_len = (size_t)len;
    return dst;
}
