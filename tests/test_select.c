/* wgml_top_k against a full sort (tests/ref/ref_select.c) on rows of every path length
   (one-workgroup sort, radix select with one and with several blocks per workgroup), with
   random values, heavy ties, all-equal rows, NaNs of every kind, infinities, -0 and +0,
   rows masked to -inf, sorted rows, values a few ulps apart, and ties at the threshold spread
   over many workgroups; k from 1 to n (or 1024); and every bad input. */
#include "harness.h"
#include "ref_select.h"

#include <stdlib.h>
#include <string.h>

enum {
    D_UNIFORM,      /* random in [-10, 10] */
    D_TIES,         /* small integers: most values tied */
    D_EQUAL,        /* one value everywhere */
    D_NAN,          /* random with NaNs (quiet, negative, signalling), +-inf */
    D_MASKED,       /* -inf except about 1% of the row (k may exceed the finite count) */
    D_ALL_NAN,
    D_ZEROS,        /* +0, -0 and a few negatives: -0 ties with +0 */
    D_ASCENDING,
    D_DESCENDING,
    D_CLOSE,        /* 1 + a few ulps: keys differ only in their lowest bits */
    D_SPARSE_TIES,  /* negatives, a few positives, and a 0 every 100th index */
    D_KINDS
};
static const char *const kind_names[D_KINDS] = { "uniform", "ties", "equal", "nan", "masked", "all-nan",
                                                  "zeros", "ascending", "descending", "close", "sparse-ties" };

static float bits_float(uint32_t b)
{
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static float *make_row(int kind, size_t n)
{
    float *x = th_random(n, -10, 10);
    static const uint32_t nans[] = { 0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFFFFFFFFu, 0x7FFFFFFFu };
    for (size_t i = 0; i < n; i++) {
        uint32_t r = th_rand_u32();
        switch (kind) {
        case D_TIES: x[i] = (float)(r % 8); break;
        case D_EQUAL: x[i] = 1.5f; break;
        case D_NAN:
            if (r % 10 == 0) x[i] = bits_float(nans[(r >> 8) % 5]);
            else if (r % 37 == 1) x[i] = -INFINITY;
            else if (r % 101 == 2) x[i] = INFINITY;
            break;
        case D_MASKED: if (r % 100 != 0) x[i] = -INFINITY; break;
        case D_ALL_NAN: x[i] = bits_float(nans[r % 5]); break;
        case D_ZEROS: x[i] = r % 3 == 0 ? 0.0f : r % 3 == 1 ? -0.0f : -(float)(r % 1000) - 1; break;
        case D_ASCENDING: x[i] = (float)i; break;
        case D_DESCENDING: x[i] = -(float)i; break;
        case D_CLOSE: x[i] = bits_float(0x3F800000u + r % 600); break;
        case D_SPARSE_TIES: x[i] = i % 100 == 0 ? 0.0f : r % 997 == 0 ? 1.0f + (float)(r % 10) : -1.0f - (float)(r % 7); break;
        default: break;
        }
    }
    return x;
}

/* Checks wgml_top_k on the row x (freed here) against the reference. */
static void run_row(float *x, size_t n, uint32_t k, const char *what)
{
    uint32_t *want = malloc(k * sizeof *want);
    ref_top_k(x, n, want, k);
    const size_t extra = 3;
    wgml_tensor *in = th_tensor(WGML_F32, x, TH_SHAPE(n)), *out = th_poisoned(WGML_U32, TH_SHAPE(k + extra));
    TH_EXPECT(wgml_top_k(th_eng, in, out, k), WGML_OK);
    uint32_t *got = malloc((k + extra + 4) * sizeof *got);
    th_read_into(out, got);
    th_compare_u32(what, got, want, k);
    bool untouched = true;
    for (size_t i = k; i < k + extra; i++) untouched &= got[i] == 0xFFFFFFFFu;
    TH_CHECK(untouched, "%s wrote past out_idx[k - 1]", what);
    free(x); free(want); free(got);
    wgml_tensor_release(in); wgml_tensor_release(out);
}

static void run_case(int kind, size_t n, uint32_t k)
{
    char what[96];
    snprintf(what, sizeof what, "top_k %s n=%zu k=%u", kind_names[kind], n, k);
    run_row(make_row(kind, n), n, k, what);
}

static uint32_t min_u32(size_t a, uint32_t b) { return a < b ? (uint32_t)a : b; }

/* Every kind of row at lengths around the path boundaries (1024: the one-workgroup sort;
   2048: one block) and k = 1, 2, 50, 1024 or n. */
static void test_small_and_medium_rows(void)
{
    static const size_t sizes[] = { 1, 2, 3, 7, 63, 65, 1000, 1024, 1025, 2047, 2049, 4097, 65541 };
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t n = sizes[s];
        uint32_t ks[] = { 1, min_u32(n, 2), min_u32(n, 50), min_u32(n, 1024), min_u32(n, 1 + th_rand_u32() % 1024) };
        for (int kind = 0; kind < D_KINDS; kind++)
            for (size_t j = 0; j < sizeof ks / sizeof ks[0]; j++) {
                if (j > 0 && ks[j] == ks[j - 1]) continue;
                run_case(kind, n, ks[j]);
            }
    }
}

/* A vocabulary-sized row (2^18, one block per workgroup) and a row with two blocks per
   workgroup (more than 256 * 2048 elements). */
static void test_large_rows(void)
{
    const size_t n = 262144;
    static const int kinds[] = { D_UNIFORM, D_TIES, D_NAN, D_MASKED, D_CLOSE, D_SPARSE_TIES, D_ZEROS, D_EQUAL };
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        run_case(kinds[i], n, 1024);
        run_case(kinds[i], n, 1);
    }
    run_case(D_UNIFORM, n, 50);
    run_case(D_ASCENDING, n, 1000);
    run_case(D_UNIFORM, 256 * 2048 + 4097, 1000);
    run_case(D_SPARSE_TIES, 256 * 2048 + 4097, 1024);
}

/* The two ways the longer rows finish. When the elements above the k-th largest value's
   22-bit bucket plus that whole bucket number at most 2048, they all go to the final sort
   (fast); otherwise a third histogram pass and a ranking of the ties pick exactly k (slow).
   Rows built to land on each side of that bound: `above` distinct values over the threshold,
   then `bucket` elements in the threshold's bucket, either all equal (ties, taken by lowest
   index) or differing only in their low 10 key bits, scattered over the whole row; the rest
   negative (the 11-bit bucket of 1.125 holds only those: a one-pass finish) or, with
   `close`, in [1, 1.1), the same 11-bit bucket as 1.125 but lower 22-bit ones (a two-pass
   finish). The finish is checked on both sides of the bound at both depths. */
static void run_bucket_case(size_t n, uint32_t k, uint32_t above, uint32_t bucket, bool equal, bool close)
{
    float *x = th_random(n, -10, -1);
    if (close)
        for (size_t i = 0; i < n; i++) x[i] = 1.0f + (x[i] + 10.0f) / 90.0f;   /* [1, 1.1) */
    uint32_t stride = (uint32_t)(n / (above + bucket));
    for (uint32_t j = 0; j < above + bucket; j++) {
        size_t i = (size_t)j * stride + (size_t)(j * 2654435761u) % stride;   /* one per window */
        x[i] = j < above ? 100.0f + (float)j : equal ? 1.125f : bits_float(0x3F900000u + th_rand_u32() % 1024);
    }
    char what[128];
    snprintf(what, sizeof what, "top_k bucket n=%zu k=%u above=%u bucket=%u %s%s", n, k, above, bucket,
             equal ? "equal" : "low-bits", close ? " close" : "");
    run_row(x, n, k, what);
}

static void test_fast_and_slow_finish(void)
{
    const size_t n = 262144;
    /* above + bucket = 2048 fits the sort; 2049 does not */
    for (int close = 0; close < 2; close++) {
        run_bucket_case(n, 1024, 600, 1448, true, close);
        run_bucket_case(n, 1024, 600, 1449, true, close);
        run_bucket_case(n, 1024, 600, 1448, false, close);
        run_bucket_case(n, 1024, 600, 1449, false, close);
        run_bucket_case(n, 1024, 1023, 1025, true, close);
        run_bucket_case(n, 1024, 1023, 1026, true, close);
        run_bucket_case(n, 1024, 0, 2048, false, close);
        run_bucket_case(n, 1024, 0, 2049, false, close);
        run_bucket_case(n, 50, 49, 1999, true, close);
        run_bucket_case(n, 50, 10, 5000, true, close);
        run_bucket_case(100003, 1, 0, 3000, true, close);
        run_bucket_case(5000, 700, 300, 1748, false, close);
    }
}

/* k = n: the whole row sorted, up to the largest k. */
static void test_k_equals_n(void)
{
    static const size_t sizes[] = { 1, 5, 64, 777, 1024 };
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int kind = 0; kind < D_KINDS; kind++) run_case(kind, sizes[s], (uint32_t)sizes[s]);
}

/* Calls of different lengths back to back, without reading between them: each must find
   the engine's scratch as it needs it (counters returned to zero by the previous call). */
static void test_back_to_back(void)
{
    static const size_t sizes[] = { 5000, 262144, 3000, 100000, 5000 };
    const int ncalls = 5;
    float *rows[5];
    wgml_tensor *in[5], *out[5];
    uint32_t k = 700;
    for (int c = 0; c < ncalls; c++) {
        rows[c] = make_row(c % 2 ? D_UNIFORM : D_SPARSE_TIES, sizes[c]);
        in[c] = th_tensor(WGML_F32, rows[c], TH_SHAPE(sizes[c]));
        out[c] = th_poisoned(WGML_U32, TH_SHAPE(k));
    }
    for (int c = 0; c < ncalls; c++) TH_EXPECT(wgml_top_k(th_eng, in[c], out[c], k), WGML_OK);
    uint32_t *want = malloc(k * sizeof *want), *got = malloc(k * sizeof *got);
    for (int c = 0; c < ncalls; c++) {
        ref_top_k(rows[c], sizes[c], want, k);
        th_read_into(out[c], got);
        char what[64];
        snprintf(what, sizeof what, "back-to-back call %d (n=%zu)", c, sizes[c]);
        th_compare_u32(what, got, want, k);
        free(rows[c]);
        wgml_tensor_release(in[c]);
        wgml_tensor_release(out[c]);
    }
    free(want); free(got);
}

static void test_bad_inputs(void)
{
    float z[2048] = { 0 };
    wgml_context *other;
    TH_EXPECT(wgml_context_create(NULL, &other), WGML_OK);
    wgml_tensor *foreign;
    TH_EXPECT(wgml_tensor_from_data(other, WGML_F32, 1, (size_t[]){ 8 }, z, &foreign), WGML_OK);
    wgml_tensor *x = th_tensor(WGML_F32, z, TH_SHAPE(8)), *big = th_tensor(WGML_F32, z, TH_SHAPE(2048));
    wgml_tensor *out = th_poisoned(WGML_U32, TH_SHAPE(8)), *outf = th_poisoned(WGML_F32, TH_SHAPE(8));
    wgml_tensor *xu = th_tensor(WGML_U32, z, TH_SHAPE(8)), *out_big = th_poisoned(WGML_U32, TH_SHAPE(2048));
    uint64_t before = th_commands();
    TH_EXPECT_ERR(wgml_top_k(NULL, x, out, 1), WGML_ERROR_INVALID_ARGUMENT, "engine is NULL");
    TH_EXPECT_ERR(wgml_top_k(th_eng, NULL, out, 1), WGML_ERROR_INVALID_ARGUMENT, "input is NULL");
    TH_EXPECT_ERR(wgml_top_k(th_eng, x, NULL, 1), WGML_ERROR_INVALID_ARGUMENT, "out_idx is NULL");
    TH_EXPECT_ERR(wgml_top_k(th_eng, xu, out, 1), WGML_ERROR_DTYPE, "input is u32; it must be f32");
    TH_EXPECT_ERR(wgml_top_k(th_eng, x, outf, 1), WGML_ERROR_DTYPE, "out_idx is f32; it must be u32");
    TH_EXPECT_ERR(wgml_top_k(th_eng, foreign, out, 1), WGML_ERROR_CONTEXT, "input belongs to another context");
    TH_EXPECT_ERR(wgml_top_k(th_eng, x, out, 0), WGML_ERROR_INVALID_ARGUMENT, "k is 0");
    TH_EXPECT_ERR(wgml_top_k(th_eng, x, out, 9), WGML_ERROR_INVALID_ARGUMENT, "k is 9, more than input's 8 elements");
    TH_EXPECT_ERR(wgml_top_k(th_eng, x, out, UINT32_MAX), WGML_ERROR_INVALID_ARGUMENT, "more than input's 8");
    TH_EXPECT_ERR(wgml_top_k(th_eng, big, out_big, 1025), WGML_ERROR_LIMIT, "k is 1025; at most 1024");
    TH_EXPECT_ERR(wgml_top_k(th_eng, big, out, 9), WGML_ERROR_SHAPE, "out_idx has 8 elements, fewer than k = 9");
    TH_CHECK(th_commands() == before, "rejected calls recorded %llu commands", (unsigned long long)(th_commands() - before));
    uint32_t got[8];
    th_read_into(out, got);
    for (int i = 0; i < 8; i++) TH_CHECK(got[i] == 0xFFFFFFFFu, "out_idx[%d] was written by a rejected call", i);
    wgml_tensor *list[] = { x, big, out, outf, xu, out_big, foreign };
    for (size_t i = 0; i < sizeof list / sizeof list[0]; i++) wgml_tensor_release(list[i]);
    wgml_context_destroy(other);
}

static const th_case cases[] = {
    { "small_and_medium_rows", test_small_and_medium_rows },
    { "large_rows", test_large_rows },
    { "fast_and_slow_finish", test_fast_and_slow_finish },
    { "k_equals_n", test_k_equals_n },
    { "back_to_back", test_back_to_back },
    { "bad_inputs", test_bad_inputs },
};
TH_MAIN(cases)
