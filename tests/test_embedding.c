/* embedding and embedding_backward against the references (tests/ref/ref_embedding.c):
   lookups are exact copies; the backward pass must equal, bit for bit, an f32 sum in
   increasing id order, run after run, with repeated ids and ids past the vocabulary. These
   bitwise checks (and ids with a share past the vocabulary, which the table cannot draw)
   stay written out; the gradient against finite differences is an op case. */
#include "harness.h"
#include "ref_embedding.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ids in [0, v), with a share p_out past the end: v, v + 7 or 0xFFFFFFFF. */
static uint32_t *make_ids(size_t n, size_t v, double p_out)
{
    uint32_t *ids = malloc(n * sizeof *ids);
    for (size_t i = 0; i < n; i++) {
        uint32_t past[3] = { (uint32_t)v, (uint32_t)v + 7, 0xFFFFFFFFu };
        ids[i] = th_uniform(0, 1) < p_out ? past[th_rand_u32() % 3] : th_rand_u32() % (uint32_t)v;
    }
    return ids;
}

static void test_lookup(void)
{
    static const struct { size_t v, d, n; } shapes[] = {
        { 1, 1, 1 }, { 7, 3, 5 }, { 50, 8, 65 }, { 1000, 63, 1000 }, { 300, 576, 4097 }, { 3, 4, 1 }, { 40000, 12, 70000 },
        /* rows wider than one workgroup's 256 threads x 4: two column chunks, the last partial */
        { 5, 4100, 7 }, { 5, 1027, 9 },
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        size_t v = shapes[s].v, d = shapes[s].d, n = shapes[s].n;
        float *table = th_random(v * d, -1, 1), *ref = th_alloc_f(n * d);
        uint32_t *ids = make_ids(n, v, 0.1);
        ref_embedding(table, ids, n, v, d, ref);
        wgml_tensor *tt = th_tensor(WGML_F32, table, TH_SHAPE(v, d)), *ti = th_tensor(WGML_U32, ids, TH_SHAPE(n));
        wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(n, d));
        TH_EXPECT(wgml_embedding(th_eng, tt, ti, out), WGML_OK);
        float *got = th_read(out);
        TH_CHECK(memcmp(got, ref, n * d * 4) == 0, "embedding [V %zu, D %zu] x %zu ids differs from the table rows", v, d, n);
        free(table); free(ref); free(ids); free(got);
        wgml_tensor_release(tt); wgml_tensor_release(ti); wgml_tensor_release(out);
    }
}

/* ids [2, 3] and out [2, 3, D]: any leading shape. */
static void test_lookup_batched_shape(void)
{
    size_t v = 10, d = 6;
    float *table = th_random(v * d, -1, 1), ref[36];
    uint32_t ids[6] = { 9, 0, 10, 3, 3, 0xFFFFFFFFu };
    ref_embedding(table, ids, 6, v, d, ref);
    for (size_t c = 0; c < d; c++) TH_CHECK(ref[2 * d + c] == 0 && ref[5 * d + c] == 0, "reference zero rows");
    wgml_tensor *tt = th_tensor(WGML_F32, table, TH_SHAPE(v, d)), *ti = th_tensor(WGML_U32, ids, TH_SHAPE(2, 3));
    wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(2, 3, 6));
    TH_EXPECT(wgml_embedding(th_eng, tt, ti, out), WGML_OK);
    float got[36];
    th_read_into(out, got);
    TH_CHECK(memcmp(got, ref, sizeof got) == 0, "embedding into [2, 3, 6] differs (ids past V must give zero rows)");
    free(table);
    wgml_tensor_release(tt); wgml_tensor_release(ti); wgml_tensor_release(out);
}

/* How far an f32 sum of grad_table element k (row k / d, column k % d) may be from the
   exact sum: its number of terms times 2^-24 times the sum of their magnitudes (not of the
   possibly cancelling sum). */
static double sum_bound(const float *g, const uint32_t *ids, size_t n, size_t d, size_t k)
{
    double abssum = 0;
    size_t count = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] == k / d) {
            abssum += fabs(g[i * d + k % d]);
            count++;
        }
    return (double)count * 0x1p-24 * abssum;
}

/* The f32 sums differ from the double sums by at most sum_bound; the bitwise comparison
   with the sequential f32 reference is the real check, the double one guards the
   reference itself. */
static void check_backward(size_t v, size_t d, size_t n, const uint32_t *ids, const char *label)
{
    float *g = th_random(n * d, -1, 1), *seq = th_alloc_f(v * d);
    double *ref = th_alloc_d(v * d);
    ref_embedding_backward(g, ids, n, v, d, ref);
    ref_embedding_backward_f32_sequential(g, ids, n, v, d, seq);
    wgml_tensor *tg = th_tensor(WGML_F32, g, TH_SHAPE(n, d)), *ti = th_tensor(WGML_U32, ids, TH_SHAPE(n));
    wgml_tensor *gt = th_poisoned(WGML_F32, TH_SHAPE(v, d));
    TH_EXPECT(wgml_embedding_backward(th_eng, tg, ti, gt), WGML_OK);
    float *got = th_read(gt);
    char what[128];
    snprintf(what, sizeof what, "%s: vs double", label);
    size_t bad = 0;
    for (size_t k = 0; k < v * d; k++) bad += !(fabs(got[k] - ref[k]) <= sum_bound(g, ids, n, d, k));
    TH_CHECK(bad == 0, "%s: %zu of %zu sums farther from the double sum than count * 2^-24 * sum |g|", what, bad, v * d);
    size_t diff = 0;
    for (size_t k = 0; k < v * d; k++) diff += memcmp(&got[k], &seq[k], 4) != 0;
    TH_CHECK(diff == 0, "%s: %zu of %zu sums differ from the sequential f32 sum", label, diff, v * d);
    /* a second run (grad_table poisoned again) gives the same bits */
    wgml_tensor *gt2 = th_poisoned(WGML_F32, TH_SHAPE(v, d));
    TH_EXPECT(wgml_embedding_backward(th_eng, tg, ti, gt2), WGML_OK);
    float *got2 = th_read(gt2);
    TH_CHECK(memcmp(got, got2, v * d * 4) == 0, "%s: two runs differ", label);
    free(g); free(seq); free(ref); free(got); free(got2);
    wgml_tensor_release(tg); wgml_tensor_release(ti); wgml_tensor_release(gt); wgml_tensor_release(gt2);
}

static void test_backward(void)
{
    static const struct { size_t v, d, n; } shapes[] = {
        { 1, 1, 1 },         /* the smallest */
        { 5, 3, 100 },       /* every id repeated ~20 times */
        { 70, 64, 1000 },    /* two vocabulary blocks */
        { 200, 130, 3000 },  /* three column chunks, three id tiles */
        { 1000, 4, 5000 },
        { 130, 576, 2500 },
        { 64, 1, 1025 },     /* a tile boundary */
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        size_t v = shapes[s].v, d = shapes[s].d, n = shapes[s].n;
        uint32_t *ids = make_ids(n, v, 0.05);
        char label[96];
        snprintf(label, sizeof label, "embedding_backward V %zu D %zu N %zu", v, d, n);
        check_backward(v, d, n, ids, label);
        free(ids);
    }
}

/* One id everywhere (one row sums all N, the others are zero), and every id past V (the
   whole grad_table is zero). */
static void test_backward_extremes(void)
{
    size_t v = 9, d = 5, n = 3000;
    uint32_t *ids = malloc(n * sizeof *ids);
    for (size_t i = 0; i < n; i++) ids[i] = 4;
    check_backward(v, d, n, ids, "all ids equal");
    for (size_t i = 0; i < n; i++) ids[i] = (uint32_t)(v + i);
    check_backward(v, d, n, ids, "all ids past V");
    free(ids);
}

/* The sorted backward pass (a stable counting sort of the ids, then one row sum per id in
   order): heavy repetition, one id everywhere on the vec4 path, a vocabulary of one row,
   a vocabulary larger than the sort's workgroup (several counters per scan thread), and
   segments of every length around the 8-wide unrolled sum. */
static void test_backward_sorted(void)
{
    size_t n = 5000;
    uint32_t *ids = malloc(n * sizeof *ids);

    /* half the positions name row 3 (a padding token), the rest are spread, some past V */
    uint32_t *mix = make_ids(n, 50, 0.05);
    for (size_t i = 0; i < n; i++) ids[i] = (i % 2 == 0) ? 3u : mix[i];
    check_backward(50, 8, n, ids, "half the ids equal, D % 4 == 0");
    check_backward(50, 7, n, ids, "half the ids equal, D % 4 != 0");
    free(mix);

    for (size_t i = 0; i < n; i++) ids[i] = 0;
    check_backward(1, 12, n, ids, "V = 1, every id 0");
    check_backward(2, 12, n, ids, "V = 2, every id 0 (row 1 zero)");
    for (size_t i = 0; i < n; i++) ids[i] = (i % 3 == 0) ? 1u : 0u;
    check_backward(1, 3, n, ids, "V = 1, a third of the ids past V");

    /* segment lengths 1 .. 40 (row k appears k + 1 times), shuffled */
    size_t m = 0;
    for (uint32_t k = 0; k < 40 && m < n; k++)
        for (uint32_t r = 0; r <= k && m < n; r++) ids[m++] = k;
    for (size_t i = m; i-- > 1;) {
        size_t j = th_rand_u32() % (i + 1);
        uint32_t t = ids[i]; ids[i] = ids[j]; ids[j] = t;
    }
    check_backward(41, 20, m, ids, "segment lengths 1 to 40, row 40 empty");
    free(ids);

    /* rows wider than one row-sum workgroup (64 threads x 4 columns): several column
       chunks, the last one partial, on the vec4 path (D 2056: 514 vec4) and the scalar
       path (D 1030) */
    ids = make_ids(300, 20, 0.05);
    check_backward(20, 2056, 300, ids, "V 20 D 2056 N 300 (3 column chunks of vec4)");
    check_backward(20, 1030, 300, ids, "V 20 D 1030 N 300 (5 column chunks)");
    free(ids);

    /* more rows than the sort workgroup has threads, many empty */
    ids = make_ids(20000, 40000, 0.02);
    check_backward(40000, 4, 20000, ids, "V 40000 D 4 N 20000");
    free(ids);
}

/* The backward of L(table) = sum(embedding(table, ids) * G) by central differences of the
   forward in double, as an op case: input G, output grad_table; the fixed ids come with
   the case (uploaded by the call). L is linear in table, so any step is exact up to
   rounding; a step of 1 keeps that rounding (about 1e-16 of sum |table * g|) far under the
   1e-12 floor below, where a small step would divide it by the step. The kernel adds the
   rows of g in f32: |got - fd| <= sum_bound (+ the finite difference's own rounding). */
typedef struct fd_case { size_t v, d, n; const uint32_t *ids; const float *g; } fd_case;

static double embedding_loss(const double *table, const void *ctx)
{
    const fd_case *p = ctx;
    double l = 0;
    for (size_t i = 0; i < p->n; i++)
        for (size_t c = 0; c < p->d; c++) l += (p->ids[i] < p->v ? table[p->ids[i] * p->d + c] : 0.0) * p->g[i * p->d + c];
    return l;
}

static wgml_status fd_call(const th_run *r)
{
    const fd_case *p = r->c->params;
    wgml_tensor *ti = th_tensor(WGML_U32, p->ids, TH_SHAPE(p->n));
    wgml_status s = wgml_embedding_backward(th_eng, r->t_in[0], ti, r->t_out[0]);
    wgml_tensor_release(ti);
    return s;
}

static void fd_reference(const th_run *r)
{
    fd_case p = *(const fd_case *)r->c->params;
    p.g = TH_IN(r, 0);
    double *table = th_alloc_d(p.v * p.d);
    for (size_t k = 0; k < p.v * p.d; k++) table[k] = th_uniform(-1, 1);
    th_finite_diff(embedding_loss, &p, table, p.v * p.d, 1, r->ref[0]);
    free(table);
}

static double fd_tol(const th_run *r, int o, size_t k)
{
    (void)o;
    const fd_case *p = r->c->params;
    return sum_bound(TH_IN(r, 0), p->ids, p->n, p->d, k) + 1e-12;
}

static void test_backward_finite_differences(void)
{
    static const uint32_t ids[11] = { 0, 5, 2, 2, 7, 0, 0, 3, 5, 2, 1 };
    const fd_case p = { .v = 6, .d = 3, .n = 11, .ids = ids };
    th_op_case c = { .name = "embedding_backward vs finite differences", .nin = 1, .nout = 1, .call = fd_call,
                     .reference = fd_reference, .tol = fd_tol, .params = &p,
                     .in = { { .shape = { p.n, p.d }, .lo = -1, .hi = 1 } }, .out = { { .shape = { p.v, p.d } } } };
    th_run_case(&c);
}

static void test_bad_inputs(void)
{
    float x[24] = { 0 };
    uint32_t id4[4] = { 0, 1, 2, 3 };
    wgml_tensor *table = th_tensor(WGML_F32, x, TH_SHAPE(4, 6)), *ids = th_tensor(WGML_U32, id4, TH_SHAPE(4));
    wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(4, 6)), *out_flat = th_poisoned(WGML_F32, TH_SHAPE(24));
    wgml_tensor *out5 = th_poisoned(WGML_F32, TH_SHAPE(5, 6)), *table1 = th_tensor(WGML_F32, x, TH_SHAPE(24));
    wgml_tensor *idsf = th_tensor(WGML_F32, x, TH_SHAPE(4)), *tableu = th_tensor(WGML_U32, x, TH_SHAPE(4, 6));
    wgml_tensor *ids24 = th_tensor(WGML_U32, x, TH_SHAPE(24));
    wgml_context *other;
    TH_EXPECT(wgml_context_create(NULL, &other), WGML_OK);
    wgml_tensor *foreign;
    TH_EXPECT(wgml_tensor_from_data(other, WGML_U32, 1, (size_t[]){ 4 }, id4, &foreign), WGML_OK);
    uint64_t before = th_commands();

    TH_EXPECT_ERR(wgml_embedding(NULL, table, ids, out), WGML_ERROR_INVALID_ARGUMENT, "engine is NULL");
    TH_EXPECT_ERR(wgml_embedding(th_eng, NULL, ids, out), WGML_ERROR_INVALID_ARGUMENT, "table is NULL");
    TH_EXPECT_ERR(wgml_embedding(th_eng, table, NULL, out), WGML_ERROR_INVALID_ARGUMENT, "ids is NULL");
    TH_EXPECT_ERR(wgml_embedding(th_eng, table, ids, NULL), WGML_ERROR_INVALID_ARGUMENT, "out is NULL");
    TH_EXPECT_ERR(wgml_embedding(th_eng, tableu, ids, out), WGML_ERROR_DTYPE, "table is u32");
    TH_EXPECT_ERR(wgml_embedding(th_eng, table, idsf, out), WGML_ERROR_DTYPE, "ids is f32");
    TH_EXPECT_ERR(wgml_embedding(th_eng, table, ids, ids24), WGML_ERROR_DTYPE, "out is u32");
    TH_EXPECT_ERR(wgml_embedding(th_eng, table1, ids, out), WGML_ERROR_SHAPE, "table has 1 dimensions");
    TH_EXPECT_ERR(wgml_embedding(th_eng, table, ids, out5), WGML_ERROR_SHAPE, "out has 30 elements");
    TH_EXPECT_ERR(wgml_embedding(th_eng, table, ids, out_flat), WGML_ERROR_SHAPE, "last dimension 24");
    TH_EXPECT_ERR(wgml_embedding(th_eng, table, foreign, out), WGML_ERROR_CONTEXT, "ids belongs to another context");
    TH_EXPECT_ERR(wgml_embedding(th_eng, table, ids, table), WGML_ERROR_ALIAS, "out must not be the same tensor as table");

    TH_EXPECT_ERR(wgml_embedding_backward(NULL, out, ids, table), WGML_ERROR_INVALID_ARGUMENT, "engine is NULL");
    TH_EXPECT_ERR(wgml_embedding_backward(th_eng, NULL, ids, out), WGML_ERROR_INVALID_ARGUMENT, "grad_out is NULL");
    TH_EXPECT_ERR(wgml_embedding_backward(th_eng, out, NULL, out5), WGML_ERROR_INVALID_ARGUMENT, "ids is NULL");
    TH_EXPECT_ERR(wgml_embedding_backward(th_eng, out, ids, NULL), WGML_ERROR_INVALID_ARGUMENT, "grad_table is NULL");
    TH_EXPECT_ERR(wgml_embedding_backward(th_eng, out, idsf, out5), WGML_ERROR_DTYPE, "ids is f32");
    TH_EXPECT_ERR(wgml_embedding_backward(th_eng, out, ids, tableu), WGML_ERROR_DTYPE, "grad_table is u32");
    TH_EXPECT_ERR(wgml_embedding_backward(th_eng, out, ids, out_flat), WGML_ERROR_SHAPE, "grad_table has 1 dimensions");
    TH_EXPECT_ERR(wgml_embedding_backward(th_eng, out5, ids, out), WGML_ERROR_SHAPE, "grad_out has 30 elements");
    TH_EXPECT_ERR(wgml_embedding_backward(th_eng, out, ids, out), WGML_ERROR_ALIAS,
                  "grad_table must not be the same tensor as grad_out");
    TH_EXPECT_ERR(wgml_embedding_backward(th_eng, out, foreign, out5), WGML_ERROR_CONTEXT, "ids belongs to another context");
    TH_CHECK(th_commands() == before, "rejected calls recorded %llu commands", (unsigned long long)(th_commands() - before));
    wgml_tensor *outs[3] = { out, out_flat, out5 };
    for (int o = 0; o < 3; o++) {
        float *got = th_read(outs[o]);
        bool poisoned = true;
        for (size_t k = 0; k < wgml_tensor_numel(outs[o]); k++) {
            uint32_t bits;
            memcpy(&bits, &got[k], 4);
            poisoned &= bits == 0xFFFFFFFFu;
        }
        TH_CHECK(poisoned, "output %d was written by a rejected call", o);
        free(got);
    }
    wgml_tensor_release(foreign);
    wgml_context_destroy(other);
    wgml_tensor *all[] = { table, ids, out, out_flat, out5, table1, idsf, tableu, ids24 };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) wgml_tensor_release(all[i]);
}

static const th_case cases[] = {
    { "lookup", test_lookup },
    { "lookup_batched_shape", test_lookup_batched_shape },
    { "backward", test_backward },
    { "backward_extremes", test_backward_extremes },
    { "backward_sorted", test_backward_sorted },
    { "backward_finite_differences", test_backward_finite_differences },
    { "bad_inputs", test_bad_inputs },
};
TH_MAIN(cases)
