/* The sampler (src/sample.c) against a reference written from wgml.h's list of filters:
   greedy picks exactly; sampled tokens always lie in the reference's kept set, and their
   frequencies over many draws match its probabilities; the same seed gives the same
   tokens; bad settings and inputs are refused. Its GPU front end (src/sample_gpu.c)
   against the host sampler with the same seeds on rows of awkward vocabulary sizes, and
   its draws against the reference's probabilities. */
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
enum { DRAWS = 20000, GPU_ROWS = 2000 };

/* DRAWS tokens from the host sampler, or from the GPU's (GPU_ROWS samplers, one per row of
   copies of logits, DRAWS / GPU_ROWS calls). */
static void draw_many(bool gpu, const wgml_sampling *c, const float *logits, const uint32_t *hist, size_t n, uint32_t *out)
{
    if (!gpu) {
        wgml_sampler *s = NULL;
        TH_EXPECT(wgml_sampler_create(c, V, th_rand_u32(), &s), WGML_OK);
        for (int d = 0; d < DRAWS && s; d++) TH_EXPECT(wgml_sampler_next(s, logits, hist, n, &out[d]), WGML_OK);
        wgml_sampler_free(s);
        return;
    }
    static wgml_sampler *smp[GPU_ROWS];
    static const uint32_t *hs[GPU_ROWS];
    static size_t lens[GPU_ROWS];
    float *rows = malloc(sizeof *rows * GPU_ROWS * V);
    for (int r = 0; r < GPU_ROWS; r++) {
        memcpy(rows + r * V, logits, sizeof *rows * V);
        TH_EXPECT(wgml_sampler_create(c, V, th_rand_u32(), &smp[r]), WGML_OK);
        hs[r] = hist;
        lens[r] = n;
    }
    wgml_tensor *t = th_tensor(WGML_F32, rows, TH_SHAPE(GPU_ROWS, V));
    for (int d = 0; d < DRAWS; d += GPU_ROWS) TH_EXPECT(wgml_sampler_next_gpu(th_eng, smp, GPU_ROWS, t, hs, lens, out + d), WGML_OK);
    for (int r = 0; r < GPU_ROWS; r++) wgml_sampler_free(smp[r]);
    wgml_tensor_release(t);
    free(rows);
}

static void check_distribution(const char *what, bool gpu, const wgml_sampling *c, const float *logits, const uint32_t *hist,
                               size_t n)
{
    double p[V];
    reference(c, logits, hist, n, p);
    static uint32_t tok[DRAWS];
    for (int d = 0; d < DRAWS; d++) tok[d] = V;
    draw_many(gpu, c, logits, hist, n, tok);
    int got[V] = { 0 };
    bool outside = false;
    for (int d = 0; d < DRAWS; d++) {
        uint32_t t = tok[d];
        if (t >= V || p[t] == 0) outside = true;
        else got[t]++;
    }
    TH_CHECK(!outside, "%s: a token the filters drop was drawn", what);
    for (int v = 0; v < V; v++) {
        double f = (double)got[v] / DRAWS, sd = sqrt(p[v] * (1 - p[v]) / DRAWS);
        TH_CHECK(fabs(f - p[v]) <= 5 * sd + 1e-3, "%s: token %d drawn %.4f of the time, want %.4f", what, v, f, p[v]);
    }
}

static void filters(bool gpu)
{
    for (int trial = gpu ? 5 : 0; trial < 6; trial++) {
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
            snprintf(what, sizeof what, "%s: trial %d settings %zu", gpu ? "gpu" : "host", trial, k);
            check_distribution(what, gpu, &settings[k], logits, hist, 6);
        }
        free(logits);
    }
}

static void test_filters(void) { filters(false); }
static void test_gpu_filters(void) { filters(true); }

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


/* The GPU front end against the host sampler, same seeds, same logits and histories: rows
   of awkward vocabulary sizes (ties, NaN and -inf among them), every kind of setting, a
   row with no sampler. Where the candidates carry the logits' own bits (greedy, top_k,
   no penalties) and where the row falls back to the host, the tokens are equal; where the
   GPU computes in f32 what the host computes in double (penalties, the whole row's
   normaliser, the draw without filters), a draw within rounding of a boundary may differ:
   there at most 1 in 10 (the rate seen is about 1 in 200 at the largest vocabulary, 0
   below), and a draw without filters only to the next or previous live token (the
   boundary between them; the draw walks the ids in order). */
static void test_gpu_agrees(void)
{
    enum { ROWS = 6, STEPS = 12, HMAX = 9 };
    static const uint32_t vocabs[] = { 1, 7, 300, 4099, 32003 };
    const struct { wgml_sampling set; bool exact; } settings[] = {
        { { .temperature = 0 }, true },
        { { .temperature = 1 }, false },
        { { .temperature = 0.7f, .top_k = 40 }, true },
        { { .temperature = 1.3f, .top_k = 1024, .top_p = 0.6f }, true },
        { { .temperature = 1, .top_k = 1500 }, true },   /* over 1024: the host path */
        { { .temperature = 0.8f, .top_p = 0.9f }, false },
        { { .temperature = 1, .min_p = 0.3f }, true },
        { { .temperature = 0.9f, .top_k = 50, .top_p = 0.9f, .min_p = 0.05f }, true },
        { { .temperature = 0, .repetition_penalty = 1.3f, .frequency_penalty = 0.2f }, false },
        { { .temperature = 1, .presence_penalty = 0.5f, .frequency_penalty = 0.3f, .top_k = 8 }, false },
        { { .temperature = 1, .repetition_penalty = 0.8f, .presence_penalty = -0.4f, .top_p = 0.5f }, false },
    };
    for (size_t vi = 0; vi < sizeof vocabs / sizeof vocabs[0]; vi++) {
        uint32_t nv = vocabs[vi];
        float *logits = th_random((size_t)ROWS * nv, -4, 4);
        for (uint32_t r = 0; r < ROWS && nv > 8; r++) {
            float *row = logits + (size_t)r * nv;
            row[nv - 1] = row[3];   /* a tie */
            if (r == 2) { row[5] = NAN; row[6] = -INFINITY; }
            if (r == 3) for (uint32_t v = 0; v < nv; v++) row[v] = 0.25f * (float)(v % 3);   /* flat: fallbacks */
        }
        wgml_tensor *t = th_tensor(WGML_F32, logits, TH_SHAPE(ROWS, nv));
        for (size_t k = 0; k < sizeof settings / sizeof settings[0]; k++) {
            wgml_sampler *gs[ROWS] = { 0 }, *hs[ROWS] = { 0 };
            for (uint32_t r = 0; r < ROWS; r++) {
                if (r == 4) continue;   /* no sampler: the row is skipped */
                TH_EXPECT(wgml_sampler_create(&settings[k].set, nv, 100 + r, &gs[r]), WGML_OK);
                TH_EXPECT(wgml_sampler_create(&settings[k].set, nv, 100 + r, &hs[r]), WGML_OK);
            }
            int draws = 0, differ = 0;
            for (int step = 0; step < STEPS; step++) {
                uint32_t hist[ROWS][HMAX];
                const uint32_t *hp[ROWS];
                size_t lens[ROWS];
                uint32_t got[ROWS], want[ROWS];
                for (uint32_t r = 0; r < ROWS; r++) {
                    lens[r] = th_rand_u32() % (HMAX + 1);
                    for (size_t j = 0; j < lens[r]; j++) hist[r][j] = th_rand_u32() % (j & 1 && nv > 4 ? 4 : nv);   /* repeats */
                    hp[r] = hist[r];
                    got[r] = 0xDEADBEEF;
                }
                TH_EXPECT(wgml_sampler_next_gpu(th_eng, gs, ROWS, t, hp, lens, got), WGML_OK);
                for (uint32_t r = 0; r < ROWS; r++) {
                    if (!hs[r]) {
                        TH_CHECK(got[r] == 0xDEADBEEF, "V %u: row %u without a sampler got token %u", nv, r, got[r]);
                        continue;
                    }
                    TH_EXPECT(wgml_sampler_next(hs[r], logits + (size_t)r * nv, hist[r], lens[r], &want[r]), WGML_OK);
                    draws++;
                    differ += got[r] != want[r];
                    if (got[r] != want[r] && got[r] < nv && k == 1) {   /* the draw without filters */
                        const float *row = logits + (size_t)r * nv;
                        uint32_t lo = got[r] < want[r] ? got[r] : want[r], hi = got[r] ^ want[r] ^ lo, between = 0;
                        for (uint32_t v = lo + 1; v < hi; v++) between += row[v] == row[v] && row[v] > -INFINITY;
                        TH_CHECK(!between, "V %u row %u: drew %u, the host %u, %u live tokens apart", nv, r, got[r], want[r],
                                 between);
                    }
                    TH_CHECK(got[r] < nv, "V %u settings %zu row %u: token %u", nv, k, r, got[r]);
                }
            }
            if (settings[k].exact) TH_CHECK(!differ, "V %u settings %zu: %d of %d tokens differ from the host's", nv, k, differ, draws);
            else TH_CHECK(differ * 10 <= draws, "V %u settings %zu: %d of %d tokens differ from the host's", nv, k, differ, draws);
            for (uint32_t r = 0; r < ROWS; r++) {
                wgml_sampler_free(gs[r]);
                wgml_sampler_free(hs[r]);
            }
        }
        wgml_tensor_release(t);
        free(logits);
    }
}

/* A row holding +inf logits goes to the host path (they share the draws there). */
static void test_gpu_infinite(void)
{
    float logits[2 * V];
    for (int v = 0; v < 2 * V; v++) logits[v] = (float)(v % 5);
    logits[V + 1] = INFINITY;
    logits[V + 4] = INFINITY;
    wgml_tensor *t = th_tensor(WGML_F32, logits, TH_SHAPE(2, V));
    wgml_sampler *s[2] = { 0 };
    wgml_sampling set = { .temperature = 1 };
    TH_EXPECT(wgml_sampler_create(&set, V, 5, &s[0]), WGML_OK);
    TH_EXPECT(wgml_sampler_create(&set, V, 6, &s[1]), WGML_OK);
    int seen[V] = { 0 };
    for (int i = 0; i < 100; i++) {
        uint32_t tok[2] = { V, V };
        TH_EXPECT(wgml_sampler_next_gpu(th_eng, s, 2, t, NULL, NULL, tok), WGML_OK);
        TH_CHECK(tok[0] < V, "row 0: token %u", tok[0]);
        if (tok[1] < V) seen[tok[1]]++;
    }
    TH_CHECK(seen[1] + seen[4] == 100 && seen[1] > 20 && seen[4] > 20, "+inf logits: %d and %d of 100", seen[1], seen[4]);
    wgml_sampler_free(s[0]);
    wgml_sampler_free(s[1]);
    wgml_tensor_release(t);
}

static void test_gpu_bad_arguments(void)
{
    float logits[2 * V] = { 0 };
    wgml_tensor *t = th_tensor(WGML_F32, logits, TH_SHAPE(2, V));
    wgml_tensor *u = th_tensor(WGML_U32, logits, TH_SHAPE(2, V));
    wgml_sampler *s[2] = { 0 }, *other = NULL;
    TH_EXPECT(wgml_sampler_create(NULL, V, 1, &s[0]), WGML_OK);
    TH_EXPECT(wgml_sampler_create(NULL, V, 2, &s[1]), WGML_OK);
    TH_EXPECT(wgml_sampler_create(NULL, V + 1, 2, &other), WGML_OK);
    uint32_t tok[2], hist[2] = { 1, V };
    const uint32_t *hp[2] = { hist, NULL };
    size_t lens[2] = { 2, 0 };
    TH_EXPECT_ERR(wgml_sampler_next_gpu(th_eng, s, 2, t, hp, lens, tok), WGML_ERROR_INVALID_ARGUMENT, "histories[0][1]");
    lens[0] = 0;
    lens[1] = 1;
    TH_EXPECT_ERR(wgml_sampler_next_gpu(th_eng, s, 2, t, hp, lens, tok), WGML_ERROR_INVALID_ARGUMENT, "histories[1]");
    TH_EXPECT_ERR(wgml_sampler_next_gpu(th_eng, s, 2, u, NULL, NULL, tok), WGML_ERROR_DTYPE, "logits");
    TH_EXPECT_ERR(wgml_sampler_next_gpu(th_eng, s, 1, t, NULL, NULL, tok), WGML_ERROR_SHAPE, "n * vocab");
    TH_EXPECT_ERR(wgml_sampler_next_gpu(th_eng, (wgml_sampler *[]){ s[0], other }, 2, t, NULL, NULL, tok), WGML_ERROR_SHAPE,
                  "vocabulary");
    TH_EXPECT_ERR(wgml_sampler_next_gpu(th_eng, NULL, 2, t, NULL, NULL, tok), WGML_ERROR_INVALID_ARGUMENT, "samplers");
    TH_EXPECT_ERR(wgml_sampler_next_gpu(th_eng, s, 2, t, NULL, NULL, NULL), WGML_ERROR_INVALID_ARGUMENT, "tokens");
    TH_EXPECT_ERR(wgml_sampler_next_gpu(th_eng, s, 0, t, NULL, NULL, tok), WGML_ERROR_INVALID_ARGUMENT, "n");
    TH_EXPECT_ERR(wgml_sampler_next_gpu(NULL, s, 2, t, NULL, NULL, tok), WGML_ERROR_INVALID_ARGUMENT, "engine");
    for (int v = 0; v < 2 * V; v++) logits[v] = v >= V ? -INFINITY : 1;
    logits[V + 2] = NAN;
    TH_EXPECT(wgml_tensor_write(t, 0, logits, sizeof logits), WGML_OK);
    TH_EXPECT_ERR(wgml_sampler_next_gpu(th_eng, s, 2, t, NULL, NULL, tok), WGML_ERROR_INVALID_ARGUMENT, "row 1");
    wgml_sampler_free(s[0]);
    wgml_sampler_free(s[1]);
    wgml_sampler_free(other);
    wgml_tensor_release(t);
    wgml_tensor_release(u);
}

static const th_case cases[] = {
    { "filters", test_filters },
    { "greedy", test_greedy },
    { "seed and edges", test_seed_and_edges },
    { "bad arguments", test_bad_arguments },
    { "gpu: filters", test_gpu_filters },
    { "gpu: agrees with the host", test_gpu_agrees },
    { "gpu: +inf logits", test_gpu_infinite },
    { "gpu: bad arguments", test_gpu_bad_arguments },
};

TH_MAIN(cases)
