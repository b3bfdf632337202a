/* The matrix products' precisions (wgml_precision): F16 and F16X3 against the double
   reference (tests/ref/ref_matmul.c) in every layout, at awkward shapes, with accumulate,
   with b an f16 tensor, per call and as a context's default; their refusals (attention at
   F16: tests/test_precision_attention.c).

   Where the device has f16 subgroup matrices (wgml_adapter_info.matrix_m) these products
   run on them (src/kernels/matmul_mma.wgsl); elsewhere on the f32 kernels, and the same
   tolerances hold (they are looser than the f32 bound). Which path ran is checked by the
   one behaviour that tells them apart: an f16 overflow (a value of 65520 or more) is inf on
   the matrix units and finite on the f32 kernels.

   Tolerances, per element, with S = sum_k |a_k b_k| and u = 2^-24:
   F16: a rounding of a or b to f16 may take either neighbour (WGSL does not fix the
     rounding), so each is off by at most 2^-10 relative and each product by
     2^-9 + 2^-20 relative; products of f16 values are exact in f32 and their f32 sum
     errs by at most (K + 1) u times its magnitudes (test_matmul's bound), so
         tol = (2^-9 + 2^-20 + (K + 2) u (1 + 2^-8)) S.
   F16X3: each scaled element x = hi + lo 2^-10 + r: |x - hi| <= 2^-10 |hi| and lo's own
     rounding leaves |r| <= 2^-20 |hi|; the dropped lo*lo term is at most 2^-20 |ab|, so each
     product errs by at most 3 * 2^-20 |ab| (48 u); the two f32 sums add (K + 1) u S
     (the high one; the low terms' sum is 2^-9 smaller), and combining and unscaling 2 u more:
         tol = (K + 51) u (1 + 2^-8) S + K 2^-46 max_k|a| max_k|b|,
     the last term for elements so much smaller than their row's largest that their scaled
     parts are f16 subnormals (an absolute error of 2^-34 in scaled units each). Within a
     factor (K + 51) / (K + 2) of the f32 bound: under 2 from K = 49 on. */
#include "harness.h"
#include "ref_matmul.h"
#include "ref_quant.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define U (1.0 / 16777216.0)

typedef wgml_status (*mm_with_fn)(wgml_engine *, const wgml_tensor *, const wgml_tensor *, wgml_tensor *,
                                  const wgml_matmul_options *);
static const struct {
    const char *name;
    mm_with_fn with;
    ref_mm_layout layout;
} ops[3] = {
    { "matmul", wgml_matmul_with, REF_MM_NN },
    { "matmul_bt", wgml_matmul_bt_with, REF_MM_NT },
    { "matmul_at", wgml_matmul_at_with, REF_MM_TN },
};

static bool has_matrices(void)
{
    wgml_adapter_info in;
    wgml_context_info(th_ctx, &in);
    return in.matrix_m != 0;
}

/* a's and b's shapes in layout o for an M x N x K product */
static void shapes_of(int o, size_t M, size_t N, size_t K, size_t sa[3], size_t sb[3])
{
    sa[0] = o == 2 ? K : M, sa[1] = o == 2 ? M : K, sa[2] = 0;
    sb[0] = o == 1 ? N : K, sb[1] = o == 1 ? K : N, sb[2] = 0;
}

/* The largest |A(m, k)| over k and |B(k, n)| over k. */
static void maxima(ref_mm_layout l, const float *a, const float *b, size_t M, size_t N, size_t K, double *ma, double *mb)
{
    for (size_t m = 0; m < M; m++) ma[m] = 0;
    for (size_t n = 0; n < N; n++) mb[n] = 0;
    for (size_t k = 0; k < K; k++) {
        for (size_t m = 0; m < M; m++) ma[m] = fmax(ma[m], fabs(a[l == REF_MM_TN ? k * M + m : m * K + k]));
        for (size_t n = 0; n < N; n++) mb[n] = fmax(mb[n], fabs(b[l == REF_MM_NT ? n * K + k : k * N + n]));
    }
}

/* The F16 bound of an element whose |a_k b_k| sum to s over K values of k (above). */
static double f16_tol(size_t K, double s) { return (ldexp(1, -9) + ldexp(1, -20) + (double)(K + 2) * U * (1 + ldexp(1, -8))) * s; }

/* One product at precision p: op o, M x N x K, inputs uniform in [-1, 1] times 2^e with e
   uniform in [-spread, spread] per element; b stored as f16 when b16 (its values rounded
   first, so the reference sees what the device reads); with acc, out starts random and
   the want is out + A @ B (one more rounding: 1 u of |out| + S; F16X3 adds out to its low
   terms' sum, then the high terms' sum to that, so 1 u of |out| more). */
static void check_one(int o, size_t M, size_t N, size_t K, wgml_precision p, bool b16, bool acc, int spread)
{
    size_t sa[3], sb[3];
    shapes_of(o, M, N, K, sa, sb);
    float *a = th_random(M * K, -1, 1), *b = th_random(K * N, -1, 1), *c0 = th_random(M * N, -1, 1);
    for (size_t i = 0; spread && i < M * K; i++) a[i] = ldexpf(a[i], (int)(th_rand_u32() % (2u * spread + 1)) - spread);
    for (size_t i = 0; spread && i < K * N; i++) b[i] = ldexpf(b[i], (int)(th_rand_u32() % (2u * spread + 1)) - spread);
    uint16_t *bh = NULL;
    if (b16) {
        bh = malloc(K * N * sizeof *bh);
        for (size_t i = 0; i < K * N; i++) {
            bh[i] = ref_f32_to_f16(b[i]);
            b[i] = (float)ref_f16_to_double(bh[i]);
        }
    }
    wgml_tensor *ta = th_tensor(WGML_F32, a, sa), *tb = b16 ? th_tensor(WGML_F16, bh, sb) : th_tensor(WGML_F32, b, sb);
    wgml_tensor *tc = acc ? th_tensor(WGML_F32, c0, TH_SHAPE(M, N)) : th_poisoned(WGML_F32, TH_SHAPE(M, N));
    wgml_matmul_options opt = { .accumulate = acc, .precision = p };
    char what[160];
    snprintf(what, sizeof what, "%s %s %zux%zux%zu%s%s spread %d", ops[o].name, p == WGML_PRECISION_F16 ? "f16" : "f16x3", M,
             N, K, b16 ? " b16" : "", acc ? " acc" : "", spread);
    TH_EXPECT(ops[o].with(th_eng, ta, tb, tc, &opt), WGML_OK);
    float *got = th_read(tc);
    double *want = th_alloc_d(M * N), *bound = th_alloc_d(M * N), *ma = th_alloc_d(M), *mb = th_alloc_d(N);
    ref_matmul(ops[o].layout, a, b, M, N, K, want, bound);
    maxima(ops[o].layout, a, b, M, N, K, ma, mb);
    size_t bad = 0, worst = 0;
    double worst_ratio = -1;
    for (size_t i = 0; i < M * N; i++) {
        double s = bound[i], tol;
        if (p == WGML_PRECISION_F16) tol = f16_tol(K, s);
        else tol = (double)(K + 51) * U * (1 + ldexp(1, -8)) * s + (double)K * ldexp(1, -46) * ma[i / N] * mb[i % N];
        if (acc) {
            want[i] += c0[i];
            tol += U * ((p == WGML_PRECISION_F16X3 ? 2 : 1) * fabs(c0[i]) + s);
        }
        tol += 1e-30;
        double d = fabs((double)got[i] - want[i]);
        double r = d <= tol ? d / tol : INFINITY;
        if (r > worst_ratio) worst_ratio = r, worst = i;
        if (!(d <= tol)) bad++;
    }
    TH_CHECK(bad == 0, "%s: %zu of %zu elements out of tolerance; worst [%zu] got %.9g want %.9g", what, bad, M * N, worst,
             (double)got[worst], want[worst]);
    /* the inputs are unchanged */
    float *ra = th_read(ta);
    TH_CHECK(memcmp(ra, a, M * K * sizeof *a) == 0, "%s: a changed", what);
    free(ra);
    free(got), free(want), free(bound), free(ma), free(mb), free(a), free(b), free(c0), free(bh);
    wgml_tensor_release(ta), wgml_tensor_release(tb), wgml_tensor_release(tc);
}

/* Awkward shapes, from a single matrix fragment to several tiles with ragged edges, in
   every layout, at both f16 precisions. */
static void test_shapes(void)
{
    static const size_t shapes[][3] = { { 2, 2, 1 }, { 7, 9, 13 }, { 33, 17, 40 }, { 65, 70, 129 }, { 128, 64, 96 },
                                        { 3, 130, 17 }, { 1, 40, 33 }, { 50, 1, 20 } };
    for (int o = 0; o < 3; o++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            for (int p = WGML_PRECISION_F16; p <= WGML_PRECISION_F16X3; p++)
                check_one(o, shapes[s][0], shapes[s][1], shapes[s][2], (wgml_precision)p, false, false, 0);
}

/* F16X3 over inputs whose magnitudes span 2^-40 .. 2^40 (the scaling keeps them in f16's
   range; F16 would overflow), and a long K. */
static void test_split_range(void)
{
    for (int o = 0; o < 3; o++) {
        check_one(o, 37, 29, 75, WGML_PRECISION_F16X3, false, false, 40);
        check_one(o, 20, 24, 1030, WGML_PRECISION_F16X3, false, false, 3);
    }
}

/* Products of few tiles and a long K, which run split over k (slices of at least 512
   values, each slice's partial result summed into out afterwards): every layout at both
   precisions, with and without accumulate, an uneven last slice in the second shape. */
static void test_split_k(void)
{
    for (int p = WGML_PRECISION_F16; p <= WGML_PRECISION_F16X3; p++)
        for (int o = 0; o < 3; o++) {
            check_one(o, 40, 24, 2100, (wgml_precision)p, false, o == 1, 0);
            check_one(o, 130, 70, 1700, (wgml_precision)p, false, o != 1, 0);
        }
}

/* out += A @ B, and b as an f16 tensor (a weight kept in f16), at both precisions. */
static void test_accumulate_and_f16_b(void)
{
    for (int p = WGML_PRECISION_F16; p <= WGML_PRECISION_F16X3; p++) {
        for (int o = 0; o < 3; o++) check_one(o, 45, 38, 70, (wgml_precision)p, false, true, 0);
        for (int o = 0; o < 2; o++) {
            check_one(o, 45, 38, 70, (wgml_precision)p, true, false, 0);
            check_one(o, 19, 66, 31, (wgml_precision)p, true, true, 0);
        }
    }
}

/* The path: an f16 overflow is inf on the matrix units, finite (and exact for these small
   integers) on the f32 kernels; F16X3 stays finite and exact on both. Also the context's
   default precision (wgml_context_desc.matmul_precision) and a call's own overriding it. */
static void test_overflow_and_defaults(void)
{
    size_t M = 9, N = 10, K = 11;
    float *a = th_alloc_f(M * K), *b = th_alloc_f(K * N);
    for (size_t i = 0; i < M * K; i++) a[i] = (float)((int)(i % 5) - 2);
    for (size_t i = 0; i < K * N; i++) b[i] = (float)((int)(i % 3) - 1);
    a[3 * K + 4] = 70000.0f;   /* row 3, k 4: beyond f16's range */
    double *want = th_alloc_d(M * N);
    ref_matmul(REF_MM_NN, a, b, M, N, K, want, NULL);
    bool mma = has_matrices();
    for (int pass = 0; pass < 2; pass++) {
        /* pass 0: a context whose default is F16; pass 1: the harness's (F32) with the
           precision per call */
        wgml_context *ctx = th_ctx;
        wgml_engine *e = th_eng;
        if (pass == 0) {
            TH_EXPECT(wgml_context_create(&(wgml_context_desc){ .matmul_precision = WGML_PRECISION_F16 }, &ctx), WGML_OK);
            TH_EXPECT(wgml_engine_create(ctx, &e), WGML_OK);
        }
        wgml_tensor *ta, *tb, *tc;
        TH_EXPECT(wgml_tensor_from_data(ctx, WGML_F32, 2, TH_SHAPE(M, K), a, &ta), WGML_OK);
        TH_EXPECT(wgml_tensor_from_data(ctx, WGML_F32, 2, TH_SHAPE(K, N), b, &tb), WGML_OK);
        TH_EXPECT(wgml_tensor_create(ctx, WGML_F32, 2, TH_SHAPE(M, N), &tc), WGML_OK);
        float *got = th_alloc_f(M * N);
        const wgml_precision ps[3] = { pass == 0 ? WGML_PRECISION_DEFAULT : WGML_PRECISION_F16, WGML_PRECISION_F32,
                                       WGML_PRECISION_F16X3 };
        for (int q = 0; q < 3; q++) {
            wgml_matmul_options opt = { .precision = ps[q] };
            TH_EXPECT(wgml_matmul_with(e, ta, tb, tc, &opt), WGML_OK);
            TH_EXPECT(wgml_tensor_read(tc, 0, got, M * N * sizeof *got), WGML_OK);
            bool f16 = q == 0;
            size_t bad = 0;
            for (size_t m = 0; m < M; m++)
                for (size_t n = 0; n < N; n++) {
                    double g = got[m * N + n], w = want[m * N + n];
                    bool hit = m == 3;   /* its row: inf, or NaN where inf meets a 0 of b */
                    bool ok = f16 && mma && hit ? isinf(g) || isnan(g) : g == w;
                    bad += !ok;
                }
            TH_CHECK(bad == 0, "pass %d precision %d (matrices %s): %zu outputs wrong", pass, (int)ps[q], mma ? "yes" : "no",
                     bad);
        }
        free(got);
        wgml_tensor_release(ta), wgml_tensor_release(tb), wgml_tensor_release(tc);
        if (pass == 0) {
            wgml_engine_destroy(e);
            wgml_context_destroy(ctx);
        }
    }
    free(a), free(b), free(want);
}

/* out = op o of (ta, tb) at F16 into a poisoned tensor, against the reference of a and b
   (the values the tensors hold). */
static void f16_product_ok(int o, wgml_tensor *ta, const float *a, wgml_tensor *tb, const float *b, size_t M, size_t N,
                           size_t K, const char *what)
{
    wgml_tensor *tc = th_poisoned(WGML_F32, TH_SHAPE(M, N));
    TH_EXPECT(ops[o].with(th_eng, ta, tb, tc, &(wgml_matmul_options){ .precision = WGML_PRECISION_F16 }), WGML_OK);
    float *got = th_read(tc);
    double *want = th_alloc_d(M * N), *bound = th_alloc_d(M * N);
    ref_matmul(ops[o].layout, a, b, M, N, K, want, bound);
    size_t bad = 0;
    for (size_t i = 0; i < M * N; i++) bad += !(fabs((double)got[i] - want[i]) <= f16_tol(K, bound[i]) + 1e-30);
    TH_CHECK(bad == 0, "%s: %zu of %zu elements out of tolerance", what, bad, M * N);
    free(got), free(want), free(bound);
    wgml_tensor_release(tc);
}

/* An operand's f16 copy serves the next product of the same tensor in the same layout
   (q, k and v of one x) and is made anew when the tensor was written in between (by
   wgml_tensor_write, by an op in place), when another tensor's copy took its place, when
   the layout differs, and when another op (attention's backward at F16) wrote the copy's
   scratch. */
static void test_copy_reuse(void)
{
    const size_t M = 37, N = 45, K = 37, S = 16, D = 8;   /* a square: its transposed reading has its shape */
    float *a = th_random(M * K, -1, 1), *a2 = th_random(M * K, -1, 1), *c = th_random(M * K, -1, 1);
    float *b1 = th_random(K * N, -1, 1), *b2 = th_random(K * N, -1, 1), *b3 = th_random(M * N, -1, 1);
    wgml_tensor *ta = th_tensor(WGML_F32, a, TH_SHAPE(M, K)), *tc = th_tensor(WGML_F32, c, TH_SHAPE(M, K));
    wgml_tensor *tb1 = th_tensor(WGML_F32, b1, TH_SHAPE(K, N)), *tb2 = th_tensor(WGML_F32, b2, TH_SHAPE(K, N));
    wgml_tensor *tb3 = th_tensor(WGML_F32, b3, TH_SHAPE(M, N));
    uint64_t c0 = th_commands();
    f16_product_ok(0, ta, a, tb1, b1, M, N, K, "a b1");
    uint64_t c1 = th_commands();
    f16_product_ok(0, ta, a, tb2, b2, M, N, K, "a b2 (a's copy again)");
    uint64_t c2 = th_commands();
    /* on the matrix units the second product converts b2 only */
    TH_CHECK(!has_matrices() || c2 - c1 == c1 - c0 - 1, "a b2 recorded %llu commands, a b1 %llu: a's copy was made again",
             (unsigned long long)(c2 - c1), (unsigned long long)(c1 - c0));
    f16_product_ok(0, tc, c, tb2, b2, M, N, K, "c b2 (b2's copy again)");
    f16_product_ok(0, ta, a, tb2, b2, M, N, K, "a b2 after c took a's place");
    TH_EXPECT(wgml_tensor_write(ta, 0, a2, M * K * sizeof *a2), WGML_OK);
    f16_product_ok(0, ta, a2, tb2, b2, M, N, K, "a b2 after a was written");
    TH_EXPECT(wgml_add(th_eng, ta, ta, ta), WGML_OK);
    for (size_t i = 0; i < M * K; i++) a2[i] *= 2;
    f16_product_ok(0, ta, a2, tb2, b2, M, N, K, "a b2 after a += a in place");
    /* attention's backward at F16 converts k and v into the same scratch as a's and b's */
    float *qkv = th_random(S * D, -1, 1);
    wgml_tensor *tq = th_tensor(WGML_F32, qkv, TH_SHAPE(1, S, 1, D)), *tg = th_poisoned(WGML_F32, TH_SHAPE(1, S, 1, D));
    wgml_tensor *tgk = th_poisoned(WGML_F32, TH_SHAPE(1, S, 1, D)), *tgv = th_poisoned(WGML_F32, TH_SHAPE(1, S, 1, D));
    TH_EXPECT(wgml_flash_attention_v2_backward_with(th_eng, tq, tq, tq, tq, tq, tg, tgk, tgv,
                                                    &(wgml_attention_options){ .precision = WGML_PRECISION_F16 }, NULL),
              WGML_OK);
    f16_product_ok(0, ta, a2, tb2, b2, M, N, K, "a b2 after attention's backward");
    /* a read as [K', M'] = [M, K]: another layout of the same tensor */
    f16_product_ok(2, ta, a2, tb3, b3, K, N, M, "a^T b3 (a in another layout)");
    f16_product_ok(0, ta, a2, tb1, b1, M, N, K, "a b1 after a^T");
    free(a), free(a2), free(c), free(b1), free(b2), free(b3), free(qkv);
    wgml_tensor_release(ta), wgml_tensor_release(tc), wgml_tensor_release(tb1), wgml_tensor_release(tb2);
    wgml_tensor_release(tb3), wgml_tensor_release(tq), wgml_tensor_release(tg), wgml_tensor_release(tgk);
    wgml_tensor_release(tgv);
}

/* A precision outside the enum, per call or per context, is refused; nothing is written. */
static void test_refusals(void)
{
    wgml_tensor *ta = th_poisoned(WGML_F32, TH_SHAPE(4, 5)), *tb = th_poisoned(WGML_F32, TH_SHAPE(5, 6));
    float ones[24];
    for (int i = 0; i < 24; i++) ones[i] = 1;
    wgml_tensor *tc = th_tensor(WGML_F32, ones, TH_SHAPE(4, 6));
    uint64_t before = th_commands();
    TH_EXPECT_ERR(wgml_matmul_with(th_eng, ta, tb, tc, &(wgml_matmul_options){ .precision = (wgml_precision)4 }),
                  WGML_ERROR_INVALID_ARGUMENT, "precision");
    TH_CHECK(th_commands() == before, "a refused call recorded commands");
    float *got = th_read(tc);
    TH_CHECK(memcmp(got, ones, sizeof ones) == 0, "a refused call wrote out");
    free(got);
    wgml_context *ctx = (wgml_context *)1;
    TH_EXPECT_ERR(wgml_context_create(&(wgml_context_desc){ .matmul_precision = (wgml_precision)-1 }, &ctx),
                  WGML_ERROR_INVALID_ARGUMENT, "matmul_precision");
    TH_CHECK(ctx == NULL, "a refused context left *out set");
    wgml_tensor_release(ta), wgml_tensor_release(tb), wgml_tensor_release(tc);
}

static const th_case cases[] = {
    { "shapes", test_shapes },
    { "split k", test_split_k },
    { "split_range", test_split_range },
    { "accumulate_and_f16_b", test_accumulate_and_f16_b },
    { "overflow_and_defaults", test_overflow_and_defaults },
    { "copy_reuse", test_copy_reuse },
    { "refusals", test_refusals },
};
TH_MAIN(cases)
