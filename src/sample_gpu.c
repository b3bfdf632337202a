/* wgml_sampler_next_gpu: the per-vocabulary work of sampling on the GPU
   (src/kernels/sample.wgsl), the candidates' filters and the draw on the host with the
   host sampler's own steps (src/sample.c). */
#include "sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CANDIDATES 256u   /* read back for top_p / min_p without top_k */
#define KMAX 1024u        /* the largest top_k selected on the GPU */
#define ROW_WORDS 8u      /* a Row of sample.wgsl */
#define HEAD 4u           /* output words before a row's candidates */

typedef struct sample_params { uint32_t vocab, stride; } sample_params;

/* Threads per row: 256 for long rows, 32 below 4096 entries (lavapipe runs a workgroup's
   threads one after another: short rows would wait on idle ones). */
#define SHORT_ROW 4096u
#define K_ROWS(wg) { .file = "sample", .entry = "sample_rows", .layout = "urrrww", .nconst = 1, .constants = { { "WG", wg } } }
static const wgml__kernel k_rows_long = K_ROWS(256), k_rows_short = K_ROWS(32);

const wgml__kernel wgml__sample_kernels[] = { K_ROWS(256), K_ROWS(32) };
const size_t wgml__sample_kernel_count = 2;

/* What the host knows of a row before the GPU runs. */
typedef struct row_plan {
    uint32_t k;          /* 0: draw on the GPU */
    bool host;           /* wgml_sampler_next on the row's logits instead */
    uint64_t rng;        /* the generator before the GPU draw took u */
} row_plan;

static uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static int by_id(const void *a, const void *b)
{
    uint32_t x = ((const cand *)a)->v, y = ((const cand *)b)->v;
    return (x > y) - (x < y);
}

/* The row's sampling on the host, from its logits read back. */
static wgml_status host_row(wgml_sampler *s, const wgml_tensor *logits, uint32_t row, const uint32_t *hist, size_t n,
                            uint32_t *token)
{
    float *buf = malloc(sizeof *buf * s->vocab);
    if (!buf) return wgml__fail(logits->ctx, WGML_ERROR_OUT_OF_MEMORY, "wgml_sampler_next_gpu: out of host memory");
    wgml_status st = wgml_tensor_read((wgml_tensor *)logits, (size_t)row * s->vocab * sizeof *buf, buf,
                                      sizeof *buf * s->vocab);
    if (st == WGML_OK) st = wgml_sampler_next(s, buf, hist, n, token);
    free(buf);
    return st;
}

/* Finishes a row from its candidates (out: the row's output words); false when the kept
   set may reach beyond them (the caller then takes the host path). */
static bool finish_row(wgml_sampler *s, const uint32_t *out, uint32_t *token)
{
    const wgml_sampling *c = &s->set;
    uint32_t live = out[2], m = out[3];
    cand *cd = s->c;
    if (c->temperature == 0) {
        *token = out[HEAD + 1];
        return true;
    }
    for (uint32_t j = 0; j < m; j++) cd[j] = (cand){ bits_f32(out[HEAD + 2 * j]) / (double)c->temperature, out[HEAD + 2 * j + 1] };
    if (m == live || c->top_k) {
        /* every live token, or top_k's: as the host path holds them (id order, or best
           first after its top_k) */
        qsort(cd, m, sizeof *cd, m == live ? by_id : wgml__cand_compare);
        wgml__sample_filter_draw(s, cd, m, token);
        return true;
    }
    /* the best CANDIDATES of more: top_p against the whole row's normaliser, min_p against
       the best; either must end inside the candidates */
    qsort(cd, m, sizeof *cd, wgml__cand_compare);
    double mx = cd[0].z, total = bits_f32(out[1]);
    for (uint32_t j = 0; j < m; j++) cd[j].z = exp(cd[j].z - mx);
    bool nucleus = c->top_p > 0 && c->top_p < 1;
    size_t keep = m;
    if (nucleus) {
        double acc = 0;
        size_t j = 0;
        while (j < m && (acc += cd[j].z / total) < c->top_p) j++;
        if (j == m) return false;
        keep = j + 1;
    }
    else if (!(cd[m - 1].z < c->min_p * cd[0].z)) return false;
    double sum = 0;
    size_t w = 0;
    for (size_t j = 0; j < keep; j++)
        if (cd[j].z >= c->min_p * cd[0].z) {
            cd[w++] = cd[j];
            sum += cd[j].z;
        }
    if (!nucleus) qsort(cd, w, sizeof *cd, by_id);   /* the host path draws min_p's survivors in id order */
    *token = wgml__sample_draw(s, cd, w, sum);
    return true;
}

wgml_status wgml_sampler_next_gpu(wgml_engine *e, wgml_sampler *const *samplers, uint32_t n, const wgml_tensor *logits,
                                  const uint32_t *const *histories, const size_t *lengths, uint32_t *tokens)
{
    const char *fn = "wgml_sampler_next_gpu";
    WGML_CHECK(wgml__check_engine(e, fn));
    WGML_CHECK(wgml__check_tensor(e, fn, "logits", logits, WGML_F32));
    wgml_context *ctx = e->ctx;
    if (!samplers || !tokens || !n)
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: samplers and tokens must not be NULL, n not 0", fn);
    size_t numel = wgml_tensor_numel(logits);
    uint32_t V = 0, active = 0;
    for (uint32_t i = 0; i < n; i++) {
        const wgml_sampler *s = samplers[i];
        if (!s) continue;
        if (V && s->vocab != V)
            return wgml__fail(ctx, WGML_ERROR_SHAPE, "%s: samplers[%u] has a vocabulary of %u, another %u", fn, i, s->vocab, V);
        V = s->vocab;
        active++;
        size_t len = lengths ? lengths[i] : 0;
        const uint32_t *h = histories ? histories[i] : NULL;
        if (len && !h) return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: histories[%u] is NULL, its length %zu", fn, i, len);
        for (size_t j = 0; j < len; j++)
            if (h[j] >= V)
                return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: histories[%u][%zu] = %u is not below the vocabulary of %u",
                                  fn, i, j, h[j], V);
    }
    if (!active) return WGML_OK;
    if (numel != (size_t)n * V)
        return wgml__fail(ctx, WGML_ERROR_SHAPE, "%s: logits has %zu elements, not n * vocab = %u * %u", fn, numel, n, V);
    if ((uint64_t)n * V > UINT32_MAX)
        return wgml__fail(ctx, WGML_ERROR_LIMIT, "%s: n * vocab = %u * %u is over 2^32 - 1", fn, n, V);

    row_plan *plan = calloc(n, sizeof *plan);
    uint32_t *meta = NULL, *out = NULL;
    size_t npen = 0;
    for (uint32_t i = 0; i < n && plan; i++)
        if (samplers[i] && lengths) npen += lengths[i];
    /* the rows (8 words each), then the penalty pairs */
    if (plan) meta = malloc(sizeof *meta * ((size_t)ROW_WORDS * active + 2 * npen + 2));
    if (!plan || !meta) {
        free(plan);
        free(meta);
        return wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    }
    uint32_t rows = 0, kmax = 1, pens = 0;
    for (uint32_t i = 0; i < n; i++) {
        wgml_sampler *s = samplers[i];
        if (!s) continue;
        const wgml_sampling *c = &s->set;
        bool greedy = c->temperature == 0, nucleus = c->top_p > 0 && c->top_p < 1;
        if (!greedy && c->top_k > KMAX) {
            plan[i].host = true;
            continue;
        }
        uint32_t k = greedy ? 1 : c->top_k ? c->top_k : nucleus || c->min_p > 0 ? CANDIDATES : 0;
        uint32_t *r = meta + (size_t)ROW_WORDS * rows++;
        plan[i] = (row_plan){ .k = k, .rng = s->rng };
        float u = 0;
        if (!k) {
            /* the GPU compares in f32: a u that rounds up to 1 is kept below it */
            u = (float)wgml__sample_uniform(s);
            if (u >= 1) u = nextafterf(1, 0);
        }
        bool rep = c->repetition_penalty > 0 && c->repetition_penalty != 1;
        bool pen = rep || c->presence_penalty != 0 || c->frequency_penalty != 0;
        uint32_t first = pens;
        size_t len = pen && lengths ? lengths[i] : 0;
        const uint32_t *h = len ? histories[i] : NULL;
        for (size_t j = 0; j < len; j++) s->count[h[j]]++;
        for (size_t j = 0; j < len; j++) {
            uint32_t v = h[j];
            if (!s->count[v]) continue;
            uint32_t *pp = meta + (size_t)ROW_WORDS * active + 2 * pens++;
            pp[0] = v;
            pp[1] = f32_bits((float)(c->presence_penalty + (double)c->frequency_penalty * s->count[v]));
            s->count[v] = 0;
        }
        r[0] = i;
        r[1] = k;
        r[2] = first + ROW_WORDS / 2 * active;   /* in pairs from the buffer's start */
        r[3] = pens - first;
        r[4] = f32_bits(greedy ? 1.0f : c->temperature);
        r[5] = f32_bits(u);
        r[6] = f32_bits(rep ? c->repetition_penalty : 1.0f);
        r[7] = 0;
        if (k > kmax) kmax = k;
    }
    sample_params p = { .vocab = V, .stride = HEAD + 2 * kmax };
    wgml_status st = WGML_OK;
    if (rows) {
        wgml__arg a_meta, a_z, a_out;
        size_t meta_bytes = sizeof *meta * ((size_t)ROW_WORDS * active + 2 * (size_t)pens + 2);
        size_t out_bytes = sizeof *out * (size_t)rows * p.stride;
        st = wgml__scratch(e, WGML__SCRATCH_SAMPLE_META, meta_bytes, &a_meta);
        if (st == WGML_OK) st = wgml__scratch(e, WGML__SCRATCH_SAMPLE_Z, 4ull * rows * V, &a_z);
        if (st == WGML_OK) st = wgml__scratch(e, WGML__SCRATCH_SAMPLE_OUT, out_bytes, &a_out);
        if (st == WGML_OK) st = wgml_tensor_write(a_meta.tensor, 0, meta, meta_bytes);
        if (st == WGML_OK) {
            wgml__arg args[5] = { wgml__t(logits), a_meta, a_meta, a_z, a_out };
            st = wgml__dispatch(e, V < SHORT_ROW ? &k_rows_short : &k_rows_long, &p, sizeof p, args, 5, rows, 1, 1);
        }
        if (st == WGML_OK && !(out = malloc(out_bytes))) st = wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", fn);
        if (st == WGML_OK) st = wgml_tensor_read(a_out.tensor, 0, out, out_bytes);
    }
    uint32_t row = 0;
    for (uint32_t i = 0; i < n && st == WGML_OK; i++) {
        wgml_sampler *s = samplers[i];
        if (!s) continue;
        const uint32_t *h = histories ? histories[i] : NULL;
        size_t len = lengths ? lengths[i] : 0;
        if (plan[i].host) {
            st = host_row(s, logits, i, h, len, &tokens[i]);
            continue;
        }
        const uint32_t *o = out + (size_t)p.stride * row++;
        if (!o[2]) {
            st = wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: row %u has no logit that is a number above -inf", fn, i);
            break;
        }
        bool done = false;
        if (!isinf(bits_f32(o[0]))) {
            if (!plan[i].k) {
                tokens[i] = o[3];
                done = true;
            }
            else done = finish_row(s, o, &tokens[i]);
        }
        if (!done) {
            s->rng = plan[i].rng;   /* as if the GPU had not drawn */
            st = host_row(s, logits, i, h, len, &tokens[i]);
        }
    }
    free(plan);
    free(meta);
    free(out);
    return st;
}
