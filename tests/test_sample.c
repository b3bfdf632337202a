/* The sampler (src/sample.c) against a reference written from wgml.h's list of filters:
   greedy picks exactly; sampled tokens always lie in the reference's kept set, and their
   frequencies over many draws match its probabilities; the same seed gives the same
   tokens; bad settings and inputs are refused. */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define V 12

/* The reference: the probability of each token after the filters (0: filtered out). */
static void reference(const wgml_sampling *c, const float *logits, const uint32_t *hist, size_t n, double *p)
{
    double z[V];
    for (int v = 0; v < V; v++) z[v] = logits[v];
    int count[V] = { 0 };
    for (size_t i = 0; i < n; i++) count[hist[i]]++;
    for (int v = 0; v < V; v++) {
        if (!count[v]) continue;
        if (c->repetition_penalty > 0 && c->repetition_penalty != 1)
            z[v] = z[v] > 0 ? z[v] / c->repetition_penalty : z[v] * c->repetition_penalty;
        z[v] -= c->presence_penalty + c->frequency_penalty * count[v];
    }
    for (int v = 0; v < V; v++) z[v] /= c->temperature;
    /* rank: how many tokens come before v (larger logit, or equal with a lower id) */
    int rank[V];
    for (int v = 0; v < V; v++) {
        rank[v] = 0;
        for (int w = 0; w < V; w++) rank[v] += z[w] > z[v] || (z[w] == z[v] && w < v);
    }
    bool in[V];
    for (int v = 0; v < V; v++) in[v] = !c->top_k || rank[v] < (int)c->top_k;
    double mx = -INFINITY, sum = 0;
    for (int v = 0; v < V; v++) if (in[v]) mx = fmax(mx, z[v]);
    for (int v = 0; v < V; v++) sum += p[v] = in[v] ? exp(z[v] - mx) : 0;
    for (int v = 0; v < V; v++) p[v] /= sum;
    if (c->top_p > 0 && c->top_p < 1)   /* keep v when the mass ranked before it is below top_p */
        for (int v = 0; v < V; v++) {
            double before = 0;
            for (int w = 0; w < V; w++) if (rank[w] < rank[v]) before += p[w];
            if (in[v] && before >= c->top_p) in[v] = false;
        }
    double top = 0;
    for (int v = 0; v < V; v++) if (in[v]) top = fmax(top, p[v]);
    for (int v = 0; v < V; v++) if (in[v] && c->min_p > 0 && p[v] < c->min_p * top) in[v] = false;
    sum = 0;
    for (int v = 0; v < V; v++) sum += p[v] = in[v] ? p[v] : 0;
    for (int v = 0; v < V; v++) p[v] /= sum;
}

/* Draws: every token kept by the reference, frequencies within 5 standard deviations of
   its probabilities (plus 1e-3 for the mass boundary's rounding). */
static void check_distribution(const char *what, const wgml_sampling *c, const float *logits, const uint32_t *hist, size_t n)
{
    double p[V];
    reference(c, logits, hist, n, p);
    wgml_sampler *s = NULL;
    TH_EXPECT(wgml_sampler_create(c, V, th_rand_u32(), &s), WGML_OK);
    if (!s) return;
    enum { DRAWS = 20000 };
    int got[V] = { 0 };
    bool outside = false;
    for (int d = 0; d < DRAWS; d++) {
        uint32_t t = V;
        TH_EXPECT(wgml_sampler_next(s, logits, hist, n, &t), WGML_OK);
        if (t >= V || p[t] == 0) outside = true;
        else got[t]++;
    }
    TH_CHECK(!outside, "%s: a token the filters drop was drawn", what);
    for (int v = 0; v < V; v++) {
        double f = (double)got[v] / DRAWS, sd = sqrt(p[v] * (1 - p[v]) / DRAWS);
        TH_CHECK(fabs(f - p[v]) <= 5 * sd + 1e-3, "%s: token %d drawn %.4f of the time, want %.4f", what, v, f, p[v]);
    }
    wgml_sampler_free(s);
}

static void test_filters(void)
{
    for (int trial = 0; trial < 6; trial++) {
        float *logits = th_random(V, -3, 3);
        if (trial == 5) logits[3] = logits[7];   /* a tie */
        uint32_t hist[6];
        for (int i = 0; i < 6; i++) hist[i] = th_rand_u32() % V;
        const wgml_sampling settings[] = {
            { .temperature = 1 },
            { .temperature = 0.7f, .top_k = 4 },
            { .temperature = 1.3f, .top_p = 0.8f },
            { .temperature = 1, .min_p = 0.2f },
            { .temperature = 0.9f, .top_k = 6, .top_p = 0.9f, .min_p = 0.05f },
            { .temperature = 1, .repetition_penalty = 1.5f },
            { .temperature = 1, .presence_penalty = 0.5f, .frequency_penalty = 0.3f, .top_k = 8 },
            { .temperature = 1, .repetition_penalty = 0.8f, .presence_penalty = -0.4f, .top_p = 0.5f },
        };
        for (size_t k = 0; k < sizeof settings / sizeof settings[0]; k++) {
            char what[96];
            snprintf(what, sizeof what, "trial %d settings %zu", trial, k);
            check_distribution(what, &settings[k], logits, hist, 6);
        }
        free(logits);
    }
}

/* Greedy: the largest adjusted logit, the lower id among equals; penalties apply first. */
static void test_greedy(void)
{
    float logits[V] = { 0, 1, 5, 5, -2, 4, 0, 0, 0, 0, 0, 0 };
    wgml_sampler *s = NULL;
    uint32_t t = 99;
    TH_EXPECT(wgml_sampler_create(NULL, V, 1, &s), WGML_OK);
    TH_EXPECT(wgml_sampler_next(s, logits, NULL, 0, &t), WGML_OK);
    TH_CHECK(t == 2, "greedy picked %u, want 2 (the lower of two equal)", t);
    wgml_sampler_free(s);
    /* token 2 seen twice: 5 / 1.25 = 4 ties with token 5 (4): the lower id, 2, wins; with a
       frequency penalty 2 drops below and 3 wins */
    uint32_t hist[3] = { 2, 2, 3 };
    TH_EXPECT(wgml_sampler_create(&(wgml_sampling){ .repetition_penalty = 1.25f }, V, 1, &s), WGML_OK);
    TH_EXPECT(wgml_sampler_next(s, logits, hist, 2, &t), WGML_OK);
    TH_CHECK(t == 3, "repetition penalty: picked %u, want 3", t);
    TH_EXPECT(wgml_sampler_next(s, logits, hist, 3, &t), WGML_OK);
    TH_CHECK(t == 2, "repetition penalty on 2 and 3: picked %u, want 2 (4 against 4, lower id)", t);
    wgml_sampler_free(s);
    TH_EXPECT(wgml_sampler_create(&(wgml_sampling){ .frequency_penalty = 0.6f }, V, 1, &s), WGML_OK);
    TH_EXPECT(wgml_sampler_next(s, logits, hist, 3, &t), WGML_OK);
    TH_CHECK(t == 3, "frequency penalty: picked %u, want 3 (2: 3.8, 3: 4.4, 5: 4)", t);
    wgml_sampler_free(s);
}

/* The same seed gives the same tokens, another seed other ones; +inf logits share the
   draws; NaN and -inf are never drawn. */
static void test_seed_and_edges(void)
{
    float *logits = th_random(V, -1, 1);
    uint32_t a[64], b[64], c[64];
    wgml_sampling set = { .temperature = 1 };
    for (int run = 0; run < 3; run++) {
        wgml_sampler *s = NULL;
        TH_EXPECT(wgml_sampler_create(&set, V, run == 2 ? 8 : 7, &s), WGML_OK);
        for (int i = 0; i < 64; i++) TH_EXPECT(wgml_sampler_next(s, logits, NULL, 0, run == 0 ? &a[i] : run == 1 ? &b[i] : &c[i]), WGML_OK);
        wgml_sampler_free(s);
    }
    TH_CHECK(!memcmp(a, b, sizeof a), "seed 7 twice gave different tokens");
    TH_CHECK(memcmp(a, c, sizeof a) != 0, "seeds 7 and 8 gave the same 64 tokens");
    logits[1] = INFINITY;
    logits[4] = INFINITY;
    logits[6] = NAN;
    logits[9] = -INFINITY;
    wgml_sampler *s = NULL;
    TH_EXPECT(wgml_sampler_create(&set, V, 3, &s), WGML_OK);
    int seen[V] = { 0 };
    for (int i = 0; i < 200; i++) {
        uint32_t t = V;
        TH_EXPECT(wgml_sampler_next(s, logits, NULL, 0, &t), WGML_OK);
        if (t < V) seen[t]++;
    }
    TH_CHECK(seen[1] + seen[4] == 200 && seen[1] > 50 && seen[4] > 50, "+inf logits: %d and %d of 200", seen[1], seen[4]);
    for (int v = 0; v < V; v++) logits[v] = -INFINITY;
    logits[6] = NAN;
    uint32_t t = 77;
    TH_EXPECT_ERR(wgml_sampler_next(s, logits, NULL, 0, &t), WGML_ERROR_INVALID_ARGUMENT, "no logit");
    wgml_sampler_free(s);
    free(logits);
}

static void test_bad_arguments(void)
{
    wgml_sampler *s = (wgml_sampler *)&s;
    static const struct { wgml_sampling set; const char *needle; } bad[] = {
        { { .temperature = -1 }, "temperature" }, { { .temperature = INFINITY }, "temperature" },
        { { .temperature = NAN }, "temperature" }, { { .top_p = 1.5f }, "top_p" }, { { .top_p = -0.1f }, "top_p" },
        { { .min_p = 2 }, "min_p" }, { { .repetition_penalty = -1 }, "repetition_penalty" },
        { { .presence_penalty = NAN }, "presence_penalty" }, { { .frequency_penalty = INFINITY }, "frequency_penalty" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        TH_EXPECT_ERR(wgml_sampler_create(&bad[i].set, V, 1, &s), WGML_ERROR_INVALID_ARGUMENT, bad[i].needle);
        TH_CHECK(s == NULL, "case %zu: *out not NULL after a failure", i);
    }
    TH_EXPECT_ERR(wgml_sampler_create(NULL, 0, 1, &s), WGML_ERROR_INVALID_ARGUMENT, "vocab");
    TH_EXPECT_ERR(wgml_sampler_create(NULL, V, 1, NULL), WGML_ERROR_INVALID_ARGUMENT, "out");
    TH_EXPECT(wgml_sampler_create(NULL, V, 1, &s), WGML_OK);
    float logits[V] = { 0 };
    uint32_t t = 0, hist[2] = { 1, V };
    TH_EXPECT_ERR(wgml_sampler_next(s, logits, hist, 2, &t), WGML_ERROR_INVALID_ARGUMENT, "history[1]");
    TH_EXPECT_ERR(wgml_sampler_next(s, NULL, NULL, 0, &t), WGML_ERROR_INVALID_ARGUMENT, "logits");
    TH_EXPECT_ERR(wgml_sampler_next(s, logits, NULL, 1, &t), WGML_ERROR_INVALID_ARGUMENT, "history");
    TH_EXPECT_ERR(wgml_sampler_next(NULL, logits, NULL, 0, &t), WGML_ERROR_INVALID_ARGUMENT, "s");
    /* a refused history leaves no counts behind: greedy still picks the plain argmax */
    logits[1] = 1;
    TH_EXPECT(wgml_sampler_next(s, logits, NULL, 0, &t), WGML_OK);
    TH_CHECK(t == 1, "after a refused call: picked %u, want 1", t);
    wgml_sampler_free(s);
    wgml_sampler_free(NULL);
}

static const th_case cases[] = {
    { "filters", test_filters },
    { "greedy", test_greedy },
    { "seed and edges", test_seed_and_edges },
    { "bad arguments", test_bad_arguments },
};

TH_MAIN(cases)
