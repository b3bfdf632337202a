/* Sampling the next token from host logits: the penalties and filters of transformers'
   generate and OpenAI's API, in the order wgml.h lists them, then a seeded draw. */
#include "sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

uint64_t wgml__sample_rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static wgml_status bad(const char *what, double v, const char *range)
{
    return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_sampler_create: %s (%g) must be %s", what, v, range);
}

wgml_status wgml_sampler_create(const wgml_sampling *settings, uint32_t vocab, uint64_t seed, wgml_sampler **out)
{
    if (out) *out = NULL;
    if (!out) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_sampler_create: out is NULL");
    if (!vocab) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_sampler_create: vocab must be at least 1");
    wgml_sampling c = settings ? *settings : (wgml_sampling){ 0 };
    if (!(c.temperature >= 0) || !isfinite(c.temperature)) return bad("temperature", c.temperature, ">= 0 and finite");
    if (!(c.top_p >= 0 && c.top_p <= 1)) return bad("top_p", c.top_p, "in [0, 1]");
    if (!(c.min_p >= 0 && c.min_p <= 1)) return bad("min_p", c.min_p, "in [0, 1]");
    if (!(c.repetition_penalty >= 0) || !isfinite(c.repetition_penalty))
        return bad("repetition_penalty", c.repetition_penalty, "> 0 and finite (0: off)");
    if (!isfinite(c.presence_penalty)) return bad("presence_penalty", c.presence_penalty, "finite");
    if (!isfinite(c.frequency_penalty)) return bad("frequency_penalty", c.frequency_penalty, "finite");
    wgml_sampler *s = calloc(1, sizeof *s);
    if (s) {
        s->z = malloc(sizeof *s->z * vocab);
        s->c = malloc(sizeof *s->c * vocab);
        s->count = calloc(vocab, sizeof *s->count);
    }
    if (!s || !s->z || !s->c || !s->count) {
        wgml_sampler_free(s);
        return wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "wgml_sampler_create: out of host memory (vocab %u)", vocab);
    }
    s->set = c;
    s->vocab = vocab;
    s->rng = seed;
    *out = s;
    return WGML_OK;
}

void wgml_sampler_free(wgml_sampler *s)
{
    if (!s) return;
    free(s->z);
    free(s->c);
    free(s->count);
    free(s);
}

static bool before(const cand *a, const cand *b) { return wgml__cand_before(a, b); }
int wgml__cand_compare(const void *a, const void *b) { return before(a, b) ? -1 : before(b, a) ? 1 : 0; }

static void swap(cand *a, cand *b) { cand t = *a; *a = *b; *b = t; }

/* Puts the k best of c[0..n) first, in order: a three-way quickselect (expected O(n)),
   then a sort of those k. */
void wgml__sample_best_first(cand *c, size_t n, size_t k)
{
    size_t lo = 0, hi = n;
    while (k < n && hi - lo > 1) {
        cand pivot = c[lo + (hi - lo) / 2];
        size_t i = lo, lt = lo, gt = hi;   /* [lo, lt) before the pivot, [gt, hi) after */
        while (i < gt) {
            if (before(&c[i], &pivot)) swap(&c[i++], &c[lt++]);
            else if (before(&pivot, &c[i])) swap(&c[i], &c[--gt]);
            else i++;
        }
        if (k <= lt) hi = lt;
        else if (k >= gt) lo = gt;
        else break;   /* the boundary falls on the pivot itself */
    }
    qsort(c, k, sizeof *c, wgml__cand_compare);
}

wgml_status wgml_sampler_next(wgml_sampler *s, const float *logits, const uint32_t *history, size_t n, uint32_t *token)
{
    const char *fn = "wgml_sampler_next";
    if (!s || !logits || !token || (!history && n))
        return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: s, logits and token must not be NULL, nor history when n > 0", fn);
    const wgml_sampling *c = &s->set;
    uint32_t V = s->vocab;
    for (size_t i = 0; i < n; i++)
        if (history[i] >= V) {
            for (size_t j = 0; j < i; j++) s->count[history[j]] = 0;
            return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: history[%zu] = %u is not below the vocabulary of %u", fn, i,
                              history[i], V);
        }
        else s->count[history[i]]++;
    double *z = s->z;
    for (uint32_t v = 0; v < V; v++) z[v] = logits[v];
    /* 1, 2: penalties over the tokens of the history (each once) */
    bool rep = c->repetition_penalty > 0 && c->repetition_penalty != 1;
    for (size_t i = 0; i < n; i++) {
        uint32_t v = history[i];
        if (!s->count[v]) continue;   /* done: counts are cleared as they are used */
        if (rep) z[v] = z[v] > 0 ? z[v] / c->repetition_penalty : z[v] * c->repetition_penalty;
        z[v] -= c->presence_penalty + c->frequency_penalty * s->count[v];
        s->count[v] = 0;
    }
    /* 3: greedy, or temperature */
    cand *cd = s->c;
    size_t m = 0;
    for (uint32_t v = 0; v < V; v++)
        if (z[v] == z[v] && z[v] > -INFINITY) cd[m++] = (cand){ z[v], v };   /* numbers above -inf */
    if (!m) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: no logit is a number above -inf", fn);
    if (c->temperature == 0) {
        cand best = cd[0];
        for (size_t i = 1; i < m; i++)
            if (before(&cd[i], &best)) best = cd[i];
        *token = best.v;
        return WGML_OK;
    }
    for (size_t i = 0; i < m; i++) cd[i].z /= c->temperature;
    wgml__sample_filter_draw(s, cd, m, token);
    return WGML_OK;
}

void wgml__sample_filter_draw(wgml_sampler *s, cand *cd, size_t m, uint32_t *token)
{
    const wgml_sampling *c = &s->set;
    /* 4: top_k (5 needs the order too) */
    bool nucleus = c->top_p > 0 && c->top_p < 1;
    size_t k = c->top_k && c->top_k < m ? c->top_k : m;
    if (k < m || nucleus) wgml__sample_best_first(cd, m, k);
    m = k;
    /* probabilities over what remains (+inf logits share the mass) */
    double mx = -INFINITY, sum = 0;
    for (size_t i = 0; i < m; i++) mx = fmax(mx, cd[i].z);
    for (size_t i = 0; i < m; i++) cd[i].z = isinf(mx) ? (isinf(cd[i].z) ? 1.0 : 0.0) : exp(cd[i].z - mx);
    for (size_t i = 0; i < m; i++) sum += cd[i].z;
    /* 5: the smallest prefix of the sorted candidates with mass >= top_p */
    if (nucleus) {
        double acc = 0;
        size_t keep = m;
        for (size_t i = 0; i < m; i++) {
            acc += cd[i].z / sum;
            if (acc >= c->top_p) { keep = i + 1; break; }
        }
        m = keep;
        sum = 0;
        for (size_t i = 0; i < m; i++) sum += cd[i].z;
    }
    /* 6: min_p against the largest remaining probability */
    if (c->min_p > 0) {
        double top = 0;
        for (size_t i = 0; i < m; i++) top = fmax(top, cd[i].z);
        size_t w = 0;
        sum = 0;
        for (size_t i = 0; i < m; i++)
            if (cd[i].z >= c->min_p * top) {
                cd[w++] = cd[i];
                sum += cd[i].z;
            }
        m = w;
    }
    *token = wgml__sample_draw(s, cd, m, sum);
}

uint32_t wgml__sample_draw(wgml_sampler *s, const cand *cd, size_t m, double sum)
{
    double u = wgml__sample_uniform(s) * sum;
    for (size_t i = 0; i < m; i++) {
        if (u < cd[i].z) return cd[i].v;
        u -= cd[i].z;
    }
    return cd[m - 1].v;
}

double wgml__sample_uniform(wgml_sampler *s)
{
    return (double)(wgml__sample_rng(&s->rng) >> 11) * (1.0 / 9007199254740992.0);
}
