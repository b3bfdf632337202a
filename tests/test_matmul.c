/* wgml_matmul, wgml_matmul_bt and wgml_matmul_at against the double reference
   (tests/ref/ref_matmul.c): awkward and tile-filling shapes, matrix-vector products, long K
   (split-K), leading dimensions, every kernel variant, exact integer products, bad inputs.

   Tolerance. Each output is a sum of K products accumulated in f32. Whatever the order of
   the additions (one thread's running sum, a tree reduction in workgroup memory, split-K
   slices added afterwards), each product passes through at most K - 1 additions that round
   (adding an exact zero does not round) plus its own rounding, so
       |got - exact| <= gamma_(K+1) * sum_k |a_k * b_k|,  gamma_n = n u / (1 - n u), u = 2^-24
   (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., section 3.1). The test
   allows (K + 2) u * sum_k |a_k b_k| per element, computed by the reference, plus 1e-30
   against denormal flushing. Because that bound grows like K^2 relative to one term, at
   large K it could hide a missing term; the exact tests therefore use small integers, whose
   products and partial sums are exact in f32 (|sum| < 2^24), and demand bit-exact results. */
#include "harness.h"
#include "ref_matmul.h"

#include <stdlib.h>
#include <string.h>

typedef wgml_status (*mm_fn)(wgml_engine *, const wgml_tensor *, const wgml_tensor *, wgml_tensor *);
typedef wgml_status (*mm_with_fn)(wgml_engine *, const wgml_tensor *, const wgml_tensor *, wgml_tensor *,
                                  const wgml_matmul_options *);

static const struct {
    const char *name;
    mm_fn fn;
    mm_with_fn with;
    ref_mm_layout layout;
} ops[3] = {
    { "matmul", wgml_matmul, wgml_matmul_with, REF_MM_NN },
    { "matmul_bt", wgml_matmul_bt, wgml_matmul_bt_with, REF_MM_NT },
    { "matmul_at", wgml_matmul_at, wgml_matmul_at_with, REF_MM_TN },
};

#define U32_EPS (1.0 / 16777216.0)   /* u = 2^-24, the unit roundoff of f32 */

/* got vs ref within factor * (K + 2) u * bound[i] + 1e-30 for every element (factor 0:
   bit-exact). Prints the first mismatches and the worst one. */
static bool check_product(const char *what, const float *got, const double *ref, const double *bound, size_t n, size_t K,
                          double factor)
{
    size_t bad = 0, worst = 0;
    double worst_ratio = -1;
    for (size_t i = 0; i < n; i++) {
        double tol = factor * (double)(K + 2) * U32_EPS * bound[i] + (factor > 0 ? 1e-30 : 0);
        double d = fabs((double)got[i] - ref[i]);
        bool ok = d <= tol;   /* false for NaN */
        double ratio = ok ? d / (tol > 0 ? tol : 1) : INFINITY;
        if (ratio > worst_ratio) { worst_ratio = ratio; worst = i; }
        if (!ok) {
            if (bad < 10) fprintf(stderr, "  %s[%zu]: got %.9g, want %.9g (tol %.3g)\n", what, i, (double)got[i], ref[i], tol);
            bad++;
        }
    }
    TH_CHECK(bad == 0, "%s: %zu of %zu elements out of tolerance; worst [%zu] got %.9g want %.9g", what, bad, n, worst,
             n ? (double)got[worst] : 0.0, n ? ref[worst] : 0.0);
    return bad == 0;
}

/* Small integers in [-3, 3]: every product and partial sum is exact in f32. */
static float *random_ints(size_t n)
{
    float *p = th_alloc_f(n);
    for (size_t i = 0; i < n; i++) p[i] = (float)((int)(th_rand_u32() % 7) - 3);
    return p;
}

/* Runs op o on an M x N x K product with the natural shapes (a [M, K] or [K, M], b [K, N]
   or [N, K], out [M, N]) and checks it. ints: integer inputs and an exact comparison.
   acc: through the _with form with accumulate, out starting from random values c (small
   integers with ints): want c + A @ B, within one rounding more, (K + 3) u (bound + |c|). */
static void run_case_acc(int o, size_t M, size_t N, size_t K, bool ints, const char *variant, bool acc)
{
    float *a = ints ? random_ints(M * K) : th_random(M * K, -1, 1);
    float *b = ints ? random_ints(K * N) : th_random(K * N, -1, 1);
    float *c = acc ? (ints ? random_ints(M * N) : th_random(M * N, -4, 4)) : NULL;
    double *ref = th_alloc_d(M * N), *bound = th_alloc_d(M * N);
    ref_matmul(ops[o].layout, a, b, M, N, K, ref, bound);
    for (size_t i = 0; c && i < M * N; i++) {
        ref[i] += c[i];
        bound[i] += fabs(c[i]);
    }
    wgml_tensor *ta = ops[o].layout == REF_MM_TN ? th_tensor(WGML_F32, a, TH_SHAPE(K, M)) : th_tensor(WGML_F32, a, TH_SHAPE(M, K));
    wgml_tensor *tb = ops[o].layout == REF_MM_NT ? th_tensor(WGML_F32, b, TH_SHAPE(N, K)) : th_tensor(WGML_F32, b, TH_SHAPE(K, N));
    wgml_tensor *to = acc ? th_tensor(WGML_F32, c, TH_SHAPE(M, N)) : th_poisoned(WGML_F32, TH_SHAPE(M, N));
    if (acc) TH_EXPECT(ops[o].with(th_eng, ta, tb, to, &(wgml_matmul_options){ .accumulate = true }), WGML_OK);
    else TH_EXPECT(ops[o].fn(th_eng, ta, tb, to), WGML_OK);
    float *got = th_read(to);
    char what[128];
    snprintf(what, sizeof what, "%s %zux%zux%zu%s%s%s%s", ops[o].name, M, N, K, ints ? " ints" : "", acc ? " accumulate" : "",
             variant ? " variant " : "", variant ? variant : "");
    check_product(what, got, ref, bound, M * N, acc ? K + 1 : K, ints ? 0.0 : 1.0);
    free(a); free(b); free(c); free(ref); free(bound); free(got);
    wgml_tensor_release(ta); wgml_tensor_release(tb); wgml_tensor_release(to);
}

static void run_case(int o, size_t M, size_t N, size_t K, bool ints, const char *variant)
{
    run_case_acc(o, M, N, K, ints, variant, false);
}

typedef struct shape { size_t M, N, K; } shape;

/* Awkward sizes, M = 1 and N = 1 (the matrix-vector kernels, vec4 and scalar), K = 1,
   full 64- and 128-tiles, long K (split-K), in all three layouts. */
static void test_shapes(void)
{
    static const shape shapes[] = {
        { 1, 1, 1 }, { 1, 1, 7 }, { 2, 3, 1 }, { 33, 45, 1 }, { 7, 13, 17 }, { 61, 67, 71 }, { 127, 129, 131 },
        { 1, 300, 517 },   /* M = 1, K odd: scalar matrix-vector loads */
        { 1, 1000, 1024 }, /* M = 1, vec4 loads */
        { 1, 4099, 96 },   /* M = 1, N odd and wide */
        { 1, 8192, 40 },   /* M = 1, the widest column blocks */
        { 300, 1, 517 }, { 1000, 1, 1024 }, /* N = 1 */
        { 64, 68, 128 }, { 256, 256, 256 }, { 512, 384, 640 },
    };
    for (int o = 0; o < 3; o++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) run_case(o, shapes[s].M, shapes[s].N, shapes[s].K, false, NULL);
}

/* K much larger than M * N: split-K with the gemm and with both matrix-vector kernels. */
static void test_long_k(void)
{
    static const shape shapes[] = {
        { 5, 7, 8192 }, { 64, 64, 8192 }, { 1, 64, 8192 }, { 48, 1, 8192 }, { 1, 1, 32771 }, { 3, 5, 40000 },
    };
    for (int o = 0; o < 3; o++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) run_case(o, shapes[s].M, shapes[s].N, shapes[s].K, false, NULL);
}

/* Integer inputs: the result is exact in any summation order, so any lost, repeated or
   misplaced product shows, even at K where the rounding bound is wide. */
static void test_exact_integers(void)
{
    static const shape shapes[] = {
        { 1, 1, 32771 }, { 1, 257, 8195 }, { 259, 1, 8192 }, { 9, 11, 8197 }, { 130, 131, 200 }, { 64, 96, 4100 },
        /* M = 1 with K - g = 3 * G for some group g: the four-row loop of gemv_cols ends exactly */
        { 1, 77, 400 }, { 1, 2053, 200 },
    };
    for (int o = 0; o < 3; o++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) run_case(o, shapes[s].M, shapes[s].N, shapes[s].K, true, NULL);
}

static void test_random_shapes(void)
{
    for (int i = 0; i < 18; i++) {
        size_t M = 1 + th_rand_u32() % 150, N = 1 + th_rand_u32() % 150, K = 1 + th_rand_u32() % 300;
        run_case(i % 3, M, N, K, false, NULL);
    }
}

/* Every tile configuration that WGML_MATMUL_VARIANT can force (each is also a choice or a
   fallback of pick_tile), so each is correct when a benchmark picks it. A configuration the
   adapter cannot hold is refused (WGML_ERROR_LIMIT), as is an unknown token, with nothing
   recorded. `all`: tested in every layout; t128sb in one, rotating: it differs from t128
   only in its buffering, which no layout changes. */
static const struct { const char *name; unsigned smem_bytes, threads; bool all; } forced_tiles[] = {
    { "t128", 32768, 256, true }, { "t128sb", 16384, 256 }, { "t64", 16384, 64, true }, { "t64k8", 8192, 64, true },
    /* gemm2 (the 8 k of a step written out, vec4 stores of out), each with its scalar and
       vec4 pipelines and split-K (see test_variants): they take lavapipe's LLVM 3 - 6 s per
       pipeline */
    { "t64x128k8xp", 12288, 128, true },   /* the first fallback */
    { "t128k8xupi", 16384, 256, true },    /* the default */
};
#define FIRST_G2 4   /* index of t64x128k8xp */

static bool tile_refused(wgml_adapter_info *info, size_t v)
{
    return forced_tiles[v].smem_bytes > info->max_workgroup_storage_size ||
           forced_tiles[v].threads > info->max_invocations_per_workgroup || forced_tiles[v].threads > info->max_workgroup_size_x;
}

static void test_variants(void)
{
    wgml_adapter_info info;
    wgml_context_info(th_ctx, &info);
    const shape sh = { 130, 67, 45 };   /* N odd, K not a multiple of 4: scalar loads and stores */
    /* one shape (scalar loads) per layout */
    for (size_t v = 0; v < sizeof forced_tiles / sizeof forced_tiles[0]; v++) {
        setenv("WGML_MATMUL_VARIANT", forced_tiles[v].name, 1);
        if (tile_refused(&info, v)) {
            float z[4] = { 0 };
            wgml_tensor *a = th_tensor(WGML_F32, z, TH_SHAPE(2, 2)), *o = th_poisoned(WGML_F32, TH_SHAPE(2, 2));
            uint64_t before = th_commands();
            for (int op = 0; op < 3; op++)
                TH_EXPECT_ERR(ops[op].fn(th_eng, a, a, o), WGML_ERROR_LIMIT, "WGML_MATMUL_VARIANT asks for");
            TH_CHECK(th_commands() == before, "a refused variant recorded commands");
            wgml_tensor_release(a); wgml_tensor_release(o);
            continue;
        }
        /* every layout for the gemm tiles marked all; the gemm2 tiles here in matmul_bt (scalar
           loads of both operands, N odd: gemm2's scalar stores), in the other layouts with
           scalar loads in test_fast_tiles (pipelines compile slowly on lavapipe) */
        bool all = v < FIRST_G2 && forced_tiles[v].all;
        int o0 = all ? 0 : v >= FIRST_G2 ? 1 : (int)(v % 3);
        for (int o = o0; o < (all ? 3 : o0 + 1); o++)
            run_case(o, sh.M, sh.N, sh.K, false, forced_tiles[v].name);
        if (v >= FIRST_G2) {   /* the same pipeline: exact, split-K slices of 24 and 21 */
            run_case(1, sh.M, sh.N, sh.K, true, forced_tiles[v].name);
            char name[64];
            snprintf(name, sizeof name, "%s,splitk=2", forced_tiles[v].name);
            setenv("WGML_MATMUL_VARIANT", name, 1);
            run_case(1, sh.M, sh.N, sh.K, false, name);
        }
    }
    unsetenv("WGML_MATMUL_VARIANT");
}

/* Every tile configuration with vec4 loads, edge tiles on both sides; K = 96 (a multiple
   of every BK) gives the interior tiles of the fast variants their unclamped path, and
   split-K slices of 48 give it to BK 16 but not to BK 32. (Apart from test_variants: the
   two together came close to the per-test timeout on lavapipe with an empty shader cache.) */
static void test_variants_vec4(void)
{
    wgml_adapter_info info;
    wgml_context_info(th_ctx, &info);
    for (size_t v = 0; v < sizeof forced_tiles / sizeof forced_tiles[0]; v++) {
        if (tile_refused(&info, v)) continue;
        char name[64];
        snprintf(name, sizeof name, "%s", forced_tiles[v].name);
        setenv("WGML_MATMUL_VARIANT", name, 1);
        /* the vec4 pipeline of one layout, rotating, for the gemm tiles; every layout for the
           gemm2 tiles, where K = 76 ends on a half step of BK 8 and N = 260 takes gemm2's vec4
           stores (N % 4 == 0) with an edge tile of 4 columns */
        bool r3 = v >= FIRST_G2, all = r3 && forced_tiles[v].all;
        int o0 = (int)((v + 1) % 3);
        for (int o = all ? 0 : o0; o < (all ? 3 : o0 + 1); o++) {
            setenv("WGML_MATMUL_VARIANT", forced_tiles[v].name, 1);
            run_case(o, 200, 260, r3 ? 76 : 72, false, name);
            run_case(o, 200, 260, 96, true, name);
            snprintf(name, sizeof name, "%s,splitk=2", forced_tiles[v].name);
            setenv("WGML_MATMUL_VARIANT", name, 1);
            run_case(o, 136, 132, 96, false, name);
            snprintf(name, sizeof name, "%s", forced_tiles[v].name);
        }
    }
    unsetenv("WGML_MATMUL_VARIANT");
}

/* Interior tiles (in range along M and N) of operands whose rows are not whole vec4 load
   without clamps through scalar quads, and every full step of K does so while a partial last
   step takes the clamped loads: M, N odd with K a multiple of 8 (all three layouts: scalar
   quads of one or both operands, vec4 of the other), K = 203 and 100 (a partial last step,
   with scalar and with vec4 loads), split-K, on the default tile (indices computed once per
   tile, an unconditional prefetch), the 64 x 128 tile (without either) and the gemm entry;
   exact on integers where the rounding bound would hide a repeated or lost k. Then
   with the copies that pad the rows (pad, att: every layout runs as matmul_at on vec4
   rows), where tiles past M and N load without clamps too (EDGE) and the copies carry zero
   rows up to whole steps of K (K = 203, 5), or with nokpad keep K rows while the default
   tile does a partial step (KPART). Last, the last K % BK values of k in a pass of their own
   that adds into out (krem): alone, after split-K, after the last round's slices, after the
   padded copies (nokpad), on the 64-tile (BK 16), with accumulate, nokrem. */
static void test_fast_tiles(void)
{
    static const shape shapes[] = { { 261, 259, 136 }, { 260, 259, 136 }, { 260, 264, 203 }, { 260, 264, 100 } };
    static const char *tiles[] = { "t128k8xupi", "t128k8xupi,splitk=2", "t64x128k8xp", "t128" };
    for (size_t v = 0; v < sizeof tiles / sizeof tiles[0]; v++) {
        setenv("WGML_MATMUL_VARIANT", tiles[v], 1);
        for (int o = 0; o < 3; o++)
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
                /* the other tiles: one shape per layout, a partial last step where A is
                   contiguous along K (a load past the step's end reads the next row) */
                if (v > 1 && s != (size_t)(o + 2) % 4) continue;
                run_case(o, shapes[s].M, shapes[s].N, shapes[s].K, s % 2 == 0, tiles[v]);
            }
    }
    static const shape padded[] = { { 261, 259, 203 }, { 263, 390, 136 }, { 261, 259, 5 } };
    static const char *pads[] = { "t128k8xupi,pad,att", "t128k8xupi,pad,att,splitk=2", "t128k8xupi,pad,att,nokpad",
                                  "t64x128k8xp,pad,att", "t128,pad,att" };
    for (size_t v = 0; v < sizeof pads / sizeof pads[0]; v++) {
        setenv("WGML_MATMUL_VARIANT", pads[v], 1);
        for (int o = 0; o < 3; o++)
            for (size_t s = 0; s < sizeof padded / sizeof padded[0]; s++) {
                /* the other variants: one shape per layout (nokpad: K = 203 in each) */
                if (v > 1 && s != (v == 2 ? 0 : (size_t)o)) continue;
                run_case(o, padded[s].M, padded[s].N, padded[s].K, s != 1, pads[v]);
            }
    }
    static const shape rems[] = { { 261, 259, 203 }, { 263, 390, 1030 } };
    static const char *krems[] = { "t128k8xupi,krem", "t128k8xupi,krem,splitk=3", "t128k8xupi,krem,tail=2,tailk=3",
                                   "t128k8xupi,krem,pad,att,nokpad", "t64,krem", "t128k8xupi,nokrem" };
    for (size_t v = 0; v < sizeof krems / sizeof krems[0]; v++) {
        setenv("WGML_MATMUL_VARIANT", krems[v], 1);
        for (int o = 0; o < 3; o++) {
            size_t s = (v + (size_t)o) % 2;
            run_case_acc(o, rems[s].M, rems[s].N, rems[s].K, s == 0, krems[v], o == 1);
        }
    }
    unsetenv("WGML_MATMUL_VARIANT");
}

static wgml_tensor *random_matrix(size_t rows, size_t cols);

/* The other choices WGML_MATMUL_VARIANT can force: matrix-vector kernels, split-K, the
   transposed copy of matmul_bt; unknown tokens. (Its own case: with test_variants in one
   ctest entry, the pipelines lavapipe compiles came close to the per-test timeout.) */
static void test_forced_choices(void)
{
    static const shape shapes[] = { { 130, 67, 45 }, { 96, 132, 76 } };
    static const shape vectors[] = { { 1, 77, 50 }, { 65, 1, 36 } };
    /* forced matrix-vector and split-K choices, on products and on vectors */
    static const char *choices[] = { "nogemv", "splitk=3", "nogemv,splitk=5", "t128,splitk=2", "t64,nogemv", "splitk=1",
                                     "gemvrows=1,gemvcols=1", "gemvc1", "gemvc1,gemvcols=64,splitk=2", "gemvrows=8,gemvcols=64,splitk=2", "gemvc4",
                                     "gemvc4,gemvcols=1,splitk=2", "gemvc4,gemvcols=16", "gemvq=1", "gemvq=4,gemvcols=8",
                                     "gemvwg=1024,gemvq=2", "gemvwg=64,gemvcols=64", "gemvwg=512,gemvc1,splitk=2",
                                     "groupm=1", "groupm=3,splitk=2", "groupm=2,t64", "groupm=64,t64" };
    for (size_t v = 0; v < sizeof choices / sizeof choices[0]; v++) {
        setenv("WGML_MATMUL_VARIANT", choices[v], 1);
        for (int o = 0; o < 3; o++) {
            for (size_t s = 0; s < 2; s++) run_case(o, shapes[s].M, shapes[s].N, shapes[s].K, false, choices[v]);
            for (size_t s = 0; s < 2; s++) run_case(o, vectors[s].M, vectors[s].N, vectors[s].K, false, choices[v]);
        }
    }
    /* slices of 400 = 3 * 128 + 16 rows: the four-row loop of gemv_cols must stop exactly at the
       end of a slice (reading past it would add the next slice's first row twice) */
    setenv("WGML_MATMUL_VARIANT", "splitk=3", 1);
    for (int op = 0; op < 3; op++) run_case(op, 1, 77, 1200, true, "splitk=3");
    /* the same for gemv_cols4's loop of GQ quads; K = 1203 (slices of 404 and 395) and 1202 end
       on a partial quad */
    static const char *c4[] = { "gemvc4,splitk=3", "gemvc4", "gemvc4,gemvcols=2,splitk=2",
                                /* 16 groups of k: GQ quads per step run several steps, then
                                   the single quads and the partial quad */
                                "gemvq=4,gemvcols=16", "gemvq=1,gemvcols=16,splitk=3", "gemvq=4,gemvcols=32,splitk=2",
                                "gemvq=4,gemvwg=64,gemvcols=4", "gemvq=2,gemvwg=1024,gemvcols=64",
                                "gemvq=8,gemvcols=16", "gemvq=8,gemvwg=64,gemvcols=4,splitk=2", "gemvq=16,gemvcols=16",
                                "gemvq=3,gemvcols=16", "gemvq=12,gemvwg=512,gemvcols=8",
                                "gemvwg=512,gemvcols=8,gemvq=8" /* a GPU's default for 4096 - 8191 columns */,
                                /* the sum over the k-groups by subgroup shuffles (where the
                                   subgroups hold the columns: above by default) and by the tree */
                                "nogemvsg", "nogemvsg,gemvwg=1024,gemvcols=8", "nogemvsg,gemvcols=2,splitk=3" };
    for (size_t v = 0; v < sizeof c4 / sizeof c4[0]; v++) {
        setenv("WGML_MATMUL_VARIANT", c4[v], 1);
        for (int op = 0; op < 3; op += 2) {
            run_case(op, 1, 77, 1200, true, c4[v]);
            run_case(op, 1, 77, 1203, true, c4[v]);
            run_case(op, 1, 1000, 1202, false, c4[v]);
        }
    }
    /* a GPU's default for 4096 - 8191 columns runs whole rounds of 8 x 64 quads only from
       K = 2048: three rounds, then single quads and a partial one */
    setenv("WGML_MATMUL_VARIANT", "gemvwg=512,gemvcols=8,gemvq=8", 1);
    for (int op = 0; op < 3; op += 2) run_case(op, 1, 77, 6163, true, "gemvwg=512,gemvcols=8,gemvq=8");
    /* gemvsg where the adapter's subgroups hold the columns (or refused with nothing recorded):
       the smallest and largest workgroups, 1 and 2 vec4 columns, split-K; gemv_cols (gemvc1)
       has no subgroup form: refused everywhere */
    {
        wgml_adapter_info info;
        wgml_context_info(th_ctx, &info);
        static const struct { const char *name; unsigned c4, wg; } sgs[] = {
            { "gemvsg,gemvwg=64,gemvcols=1", 1, 64 }, { "gemvsg,gemvwg=1024,gemvcols=2,splitk=2", 2, 1024 },
            { "gemvsg,gemvcols=16", 16, 256 }, { "gemvsg,gemvc1", 0, 256 } };
        for (size_t v = 0; v < sizeof sgs / sizeof sgs[0]; v++) {
            setenv("WGML_MATMUL_VARIANT", sgs[v].name, 1);
            bool fits = sgs[v].c4 && info.subgroups && info.subgroup_min_size >= sgs[v].c4 &&
                        sgs[v].wg % info.subgroup_max_size == 0 && sgs[v].wg <= info.max_invocations_per_workgroup;
            if (fits) {
                for (int op = 0; op < 3; op += 2) run_case(op, 1, 77, 1203, true, sgs[v].name);
                continue;
            }
            wgml_tensor *a = random_matrix(5, 8), *x = random_matrix(1, 5), *o = th_poisoned(WGML_F32, TH_SHAPE(1, 8));
            uint64_t before = th_commands();
            TH_EXPECT_ERR(wgml_matmul(th_eng, x, a, o), WGML_ERROR_LIMIT, "asks for gemvsg");
            TH_CHECK(th_commands() == before, "a refused gemvsg recorded commands");
            wgml_tensor_release(a); wgml_tensor_release(x); wgml_tensor_release(o);
        }
    }
    /* matmul_bt through a transposed copy of b (btt): the copy's scalar path (N or K not a multiple of 4) and its vec4 path with partial 64 x 64
       blocks, with split-K and the 64-tile, exact on integers; M = 1 keeps the
       matrix-vector kernel; nobtt */
    static const char *btts[] = { "btt", "btt,splitk=2", "btt,t64", "nobtt" };
    static const shape bshapes[] = { { 130, 67, 45 }, { 200, 260, 76 }, { 96, 132, 300 }, { 70, 129, 132 }, { 1, 96, 40 } };
    for (size_t v = 0; v < sizeof btts / sizeof btts[0]; v++) {
        setenv("WGML_MATMUL_VARIANT", btts[v], 1);
        for (size_t s = 0; s < sizeof bshapes / sizeof bshapes[0]; s++)
            run_case(1, bshapes[s].M, bshapes[s].N, bshapes[s].K, s == 1, btts[v]);
    }
    /* matmul and matmul_bt through a transposed copy of a run as matmul_at (att), alone and
       after b's copy: the same shapes (a's copy takes its scalar path where M or K is not a
       multiple of 4), with split-K and the 64-tile; M = 1 keeps the matrix-vector kernel; noatt */
    static const char *atts[] = { "att", "att,btt", "att,splitk=2", "att,t64", "noatt", "noatt,btt" };
    for (size_t v = 0; v < sizeof atts / sizeof atts[0]; v++) {
        setenv("WGML_MATMUL_VARIANT", atts[v], 1);
        for (int op = 0; op < 2; op++)
            for (size_t s = 0; s < sizeof bshapes / sizeof bshapes[0]; s++)
                run_case(op, bshapes[s].M, bshapes[s].N, bshapes[s].K, s == 1, atts[v]);
    }
    /* att with nobtt cannot run matmul_bt (its kernel needs b as [K, N]): refused, nothing recorded */
    {
        float z[4] = { 0 };
        wgml_tensor *a = th_tensor(WGML_F32, z, TH_SHAPE(2, 2)), *o = th_poisoned(WGML_F32, TH_SHAPE(2, 2));
        uint64_t before = th_commands();
        setenv("WGML_MATMUL_VARIANT", "att,nobtt", 1);
        TH_EXPECT_ERR(wgml_matmul_bt(th_eng, a, a, o), WGML_ERROR_INVALID_ARGUMENT, "asks for att and nobtt");
        TH_CHECK(th_commands() == before, "a refused att,nobtt recorded commands");
        TH_EXPECT(wgml_matmul(th_eng, a, a, o), WGML_OK);   /* matmul needs no copy of b */
        wgml_tensor_release(a); wgml_tensor_release(o);
    }
    /* the default rules: M >= 1024 takes b's copy on a GPU (both copy paths), and with
       N >= 512 a's copy too; the direct kernels on a CPU adapter */
    unsetenv("WGML_MATMUL_VARIANT");
    run_case(1, 1031, 67, 45, false, "default, M >= 1024");
    run_case(1, 1024, 132, 36, true, "default, M >= 1024");
    for (int op = 0; op < 2; op++) run_case(op, 1030, 515, 37, false, "default, M >= 1024, N >= 512");
    /* gemv_rows' rule: on a GPU 8 rows per workgroup for K <= 512 and 4 for K <= 1024 where
       that leaves 512 workgroups, else 1 (on a CPU adapter 4 everywhere): rows not a multiple
       of 8, K not of 4, and a [M, K] . b with N = 1 */
    run_case(1, 1, 4099, 510, false, "default, short rows");
    run_case(1, 1, 2050, 768, false, "default, short rows");
    run_case(1, 1, 2040, 1024, false, "default, short rows");   /* 2040 / 4 < 512 workgroups: 1 row each */
    run_case(0, 4101, 1, 333, false, "default, short rows");
    /* unknown tokens */
    static const char *bad[] = { "t129", "splitk=", "splitk=0", "splitk=x", "t128,fast", "t128pad", "gemvrows=3",
                                 "gemvcols=128", "splitk=3x", "=4", "bttx", "btt=1", "attx", "noat", "groupm=0", "groupm=65",
                                 "gemvq=17", "gemvq=32", "gemvq=0", "gemvacc=1", "gemvlast",
                                 "gemvwg=32", "gemvwg=2048", "gemvwg=384", "freshx", "fresh=1", "gemvsgx", "nogemvsg=1" };
    float z[4] = { 0 };
    wgml_tensor *a = th_tensor(WGML_F32, z, TH_SHAPE(2, 2)), *o = th_poisoned(WGML_F32, TH_SHAPE(2, 2));
    uint64_t before = th_commands();
    for (size_t v = 0; v < sizeof bad / sizeof bad[0]; v++) {
        setenv("WGML_MATMUL_VARIANT", bad[v], 1);
        TH_EXPECT_ERR(wgml_matmul(th_eng, a, a, o), WGML_ERROR_INVALID_ARGUMENT, "WGML_MATMUL_VARIANT has an unknown token");
    }
    TH_CHECK(th_commands() == before, "a refused variant recorded commands");
    wgml_tensor_release(a); wgml_tensor_release(o);
    unsetenv("WGML_MATMUL_VARIANT");
}

/* The last round split along K (round 27 of bench/notes/matmul.md), forced on small
   products: the last n tiles in launch order (edge tiles among them) computed in s slices
   into blocks of a workspace and added into out by splitk_reduce_tiles, for all three
   layouts, N a multiple of 4 (vec4 stores) and not, with accumulate, exact on integers; the
   64-tiles (not gemm2) ignore it; impossible requests are refused with nothing recorded. */
static void test_last_round(void)
{
    static const shape shapes[] = { { 300, 260, 517 }, { 300, 261, 203 }, { 129, 385, 64 }, { 257, 131, 1000 } };
    static const char *forced[] = { "t128k8xupi,tail=3,tailk=4", "t128k8xupi,tail=1,tailk=7", "t128k8xupi,tail=2",
                                    "t128k8xupi,tailk=2", "t128k8xupi,tail=5,tailk=3,groupm=2", "t64,tail=2,tailk=3",
                                    "t128k8xupi,notail" };
    for (size_t v = 0; v < sizeof forced / sizeof forced[0]; v++) {
        setenv("WGML_MATMUL_VARIANT", forced[v], 1);
        for (int o = 0; o < 3; o++)
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
                run_case_acc(o, shapes[s].M, shapes[s].N, shapes[s].K, s % 2 == 1, forced[v], false);
                if (s < 2) run_case_acc(o, shapes[s].M, shapes[s].N, shapes[s].K, s % 2 == 1, forced[v], true);
            }
    }
    /* as many tail tiles as the product has, or none left to split: refused */
    float z[32] = { 0 };
    wgml_tensor *a = th_tensor(WGML_F32, z, TH_SHAPE(2, 16)), *b = th_tensor(WGML_F32, z, TH_SHAPE(16, 2));
    wgml_tensor *o = th_poisoned(WGML_F32, TH_SHAPE(2, 2));
    uint64_t before = th_commands();
    setenv("WGML_MATMUL_VARIANT", "t128k8xupi,tail=1,tailk=2", 1);
    TH_EXPECT_ERR(wgml_matmul(th_eng, a, b, o), WGML_ERROR_INVALID_ARGUMENT, "last round of 1 tiles; the product has 1");
    static const char *bad[] = { "tail=0", "tailk=1", "tail=x", "notail=1", "tailk=5000" };
    for (size_t v = 0; v < sizeof bad / sizeof bad[0]; v++) {
        setenv("WGML_MATMUL_VARIANT", bad[v], 1);
        TH_EXPECT_ERR(wgml_matmul(th_eng, a, b, o), WGML_ERROR_INVALID_ARGUMENT, "unknown token");
    }
    TH_CHECK(th_commands() == before, "refused last-round variants recorded commands");
    wgml_tensor_release(a); wgml_tensor_release(b); wgml_tensor_release(o);
    unsetenv("WGML_MATMUL_VARIANT");
}

/* out += A @ B (wgml_matmul_options.accumulate) through every kernel that writes out: the
   gemm's scalar stores (64-tiles) and vec4 stores, both matrix-vector kernels, the split-K
   reduction (the slices themselves stay plain), the transposed copies; exact on integers.
   The _with forms with NULL or zeroed options equal the plain functions (poisoned out). */
static void test_accumulate(void)
{
    /* the matrix-vector kernels in every layout (gemv_cols4, gemv_rows) */
    static const shape vectors[] = { { 1, 300, 517 }, { 1, 1000, 1024 }, { 300, 1, 517 }, { 1, 1, 7 } };
    for (int o = 0; o < 3; o++)
        for (size_t s = 0; s < sizeof vectors / sizeof vectors[0]; s++)
            run_case_acc(o, vectors[s].M, vectors[s].N, vectors[s].K, false, NULL, true);
    /* the store is the same code in every layout from here on (one layout each: lavapipe
       compiles each pipeline for seconds) */
    run_case_acc(0, 61, 67, 71, false, NULL, true);      /* gemm, small tile, scalar stores */
    run_case_acc(2, 64, 64, 8192, true, NULL, true);     /* split-K: splitk_reduce adds to out */
    run_case_acc(0, 1, 257, 8195, true, NULL, true);     /* split-K of gemv_cols4 */
    /* the large tile unsplit (gemm2 with N odd, gemm2_v4), the one-column gemv, the copies */
    static const struct { const char *variant; int op; shape s; bool ints; } forced[] = {
        { "splitk=1", 2, { 130, 67, 2053 }, false }, { "splitk=1", 0, { 96, 132, 2048 }, true },
        { "gemvc1", 0, { 1, 77, 50 }, false }, { "gemvc1", 2, { 65, 1, 36 }, false },
        { "att,btt", 1, { 200, 260, 76 }, true }, { "att", 0, { 130, 67, 45 }, false },
    };
    for (size_t v = 0; v < sizeof forced / sizeof forced[0]; v++) {
        setenv("WGML_MATMUL_VARIANT", forced[v].variant, 1);
        run_case_acc(forced[v].op, forced[v].s.M, forced[v].s.N, forced[v].s.K, forced[v].ints, forced[v].variant, true);
    }
    unsetenv("WGML_MATMUL_VARIANT");
    /* NULL and zeroed options: the plain product, out written in full */
    size_t M = 33, N = 20, K = 45;
    float *a = th_random(M * K, -1, 1), *b = th_random(K * N, -1, 1);
    double *ref = th_alloc_d(M * N), *bound = th_alloc_d(M * N);
    ref_matmul(REF_MM_NN, a, b, M, N, K, ref, bound);
    wgml_tensor *ta = th_tensor(WGML_F32, a, TH_SHAPE(M, K)), *tb = th_tensor(WGML_F32, b, TH_SHAPE(K, N));
    for (int z = 0; z < 2; z++) {
        wgml_tensor *to = th_poisoned(WGML_F32, TH_SHAPE(M, N));
        TH_EXPECT(wgml_matmul_with(th_eng, ta, tb, to, z ? &(wgml_matmul_options){ 0 } : NULL), WGML_OK);
        float *got = th_read(to);
        check_product(z ? "matmul_with zeroed options" : "matmul_with NULL options", got, ref, bound, M * N, K, 1.0);
        free(got);
        wgml_tensor_release(to);
    }
    /* the _with forms validate as the plain ones, under their own names; nothing recorded,
       out untouched */
    wgml_tensor *bad = th_poisoned(WGML_F32, TH_SHAPE(N, M));
    uint64_t before = th_commands();
    wgml_matmul_options acc = { .accumulate = true };
    TH_EXPECT_ERR(wgml_matmul_with(th_eng, ta, tb, bad, &acc), WGML_ERROR_SHAPE, "wgml_matmul_with: out has 660 elements");
    TH_EXPECT_ERR(wgml_matmul_bt_with(th_eng, ta, tb, bad, &acc), WGML_ERROR_SHAPE, "wgml_matmul_bt_with: a's last dimension");
    TH_EXPECT_ERR(wgml_matmul_at_with(th_eng, ta, tb, bad, &acc), WGML_ERROR_SHAPE, "wgml_matmul_at_with: a is [K, M]");
    TH_EXPECT_ERR(wgml_matmul_with(th_eng, ta, tb, (wgml_tensor *)ta, &acc), WGML_ERROR_ALIAS, "wgml_matmul_with");
    TH_EXPECT_ERR(wgml_matmul_with(th_eng, NULL, tb, bad, &acc), WGML_ERROR_INVALID_ARGUMENT, "a is NULL");
    TH_CHECK(th_commands() == before, "rejected accumulate calls recorded commands");
    uint32_t *untouched = (uint32_t *)th_read(bad);
    for (size_t i = 0; i < M * N; i++) TH_CHECK(untouched[i] == 0xFFFFFFFFu, "out element %zu written by a rejected call", i);
    free(untouched); free(a); free(b); free(ref); free(bound);
    wgml_tensor_release(ta); wgml_tensor_release(tb); wgml_tensor_release(bad);
}

static wgml_tensor *random_matrix(size_t rows, size_t cols)
{
    float *v = th_random(rows * cols, -1, 1);
    wgml_tensor *t = th_tensor(WGML_F32, v, TH_SHAPE(rows, cols));
    free(v);
    return t;
}

/* matmul_bt(x, w, o) with the transposed copies forced (att,btt): checked against the
   reference on x's and w's current contents; returns the commands it recorded. */
static uint64_t bt_checked(const char *what, wgml_engine *e, wgml_tensor *x, wgml_tensor *w, size_t M, size_t N, size_t K)
{
    float *a = th_read(x), *b = th_read(w);
    double *ref = th_alloc_d(M * N), *bound = th_alloc_d(M * N);
    ref_matmul(REF_MM_NT, a, b, M, N, K, ref, bound);
    wgml_tensor *o = th_poisoned(WGML_F32, TH_SHAPE(M, N));
    uint64_t before = th_commands();
    TH_EXPECT(wgml_matmul_bt(e, x, w, o), WGML_OK);
    uint64_t n = th_commands() - before;
    float *got = th_read(o);
    check_product(what, got, ref, bound, M * N, K, 1.0);
    free(a); free(b); free(ref); free(bound); free(got);
    wgml_tensor_release(o);
    return n;
}

/* The transposed copy of a is made once for consecutive products of one unchanged a (q, k
   and v of x), and again after any write to a: an op writing it (on this engine or another
   of the context), wgml_tensor_write, wgml_tensor_zero, a new tensor in a released one's
   place, a reshape to another K. */
static void test_copy_reuse(void)
{
    setenv("WGML_MATMUL_VARIANT", "att,btt", 1);
    size_t M = 70, N = 36, K = 44;
    float *xs = th_random(M * K, -1, 1);
    wgml_tensor *x = th_tensor(WGML_F32, xs, TH_SHAPE(M, K));
    wgml_tensor *w1 = random_matrix(N, K);
    wgml_tensor *w2 = random_matrix(N, K);
    uint64_t first = bt_checked("first product of x", th_eng, x, w1, M, N, K);
    uint64_t second = bt_checked("second product of x (a's copy reused)", th_eng, x, w2, M, N, K);
    TH_CHECK(first == 3 && second == 2, "commands: %llu for the first product (b's copy, a's copy, gemm), %llu for the second "
             "(b's copy, gemm)", (unsigned long long)first, (unsigned long long)second);
    TH_CHECK(bt_checked("the same product again (both copies reused)", th_eng, x, w2, M, N, K) == 1, "both copies current");
    TH_EXPECT(wgml_gradient_scale(th_eng, x, -2.0f), WGML_OK);
    TH_CHECK(bt_checked("after an op wrote x", th_eng, x, w1, M, N, K) == 3, "x written by an op: its copy must be made again");
    wgml_engine *e2;
    TH_EXPECT(wgml_engine_create(th_ctx, &e2), WGML_OK);
    TH_EXPECT(wgml_gradient_scale(e2, x, 0.5f), WGML_OK);
    uint64_t n2 = bt_checked("after another engine wrote x", th_eng, x, w2, M, N, K);
    TH_CHECK(n2 == 3, "x written on another engine: %llu commands", (unsigned long long)n2);
    wgml_engine_destroy(e2);
    for (size_t i = 0; i < M * K; i++) xs[i] = (float)i / (float)(M * K) - 0.5f;
    TH_EXPECT(wgml_tensor_write(x, 0, xs, M * K * sizeof *xs), WGML_OK);
    bt_checked("after wgml_tensor_write", th_eng, x, w1, M, N, K);
    TH_EXPECT(wgml_tensor_write(x, 4 * sizeof *xs, xs, 3), WGML_OK);   /* 3 bytes of one element */
    bt_checked("after a partial wgml_tensor_write", th_eng, x, w1, M, N, K);
    TH_EXPECT(wgml_tensor_zero(x), WGML_OK);
    bt_checked("after wgml_tensor_zero", th_eng, x, w2, M, N, K);
    for (int round = 0; round < 4; round++) {   /* a new tensor, perhaps at the released one's address */
        wgml_tensor_release(x);
        x = random_matrix(M, K);
        bt_checked("a new x in a released one's place", th_eng, x, w1, M, N, K);
    }
    setenv("WGML_MATMUL_VARIANT", "att,btt,fresh", 1);   /* the benchmarks' switch: no reuse */
    TH_CHECK(bt_checked("fresh copies", th_eng, x, w1, M, N, K) == 3 && bt_checked("fresh copies again", th_eng, x, w1, M, N, K) == 3,
             "fresh: both copies made at every call");
    setenv("WGML_MATMUL_VARIANT", "att,btt", 1);
    TH_EXPECT(wgml_tensor_reshape(x, 2, (size_t[]){ M * K / 22, 22 }), WGML_OK);   /* same bytes, K 22 */
    wgml_tensor *w3 = random_matrix(N, 22);
    bt_checked("x reshaped to K 22", th_eng, x, w3, M * K / 22, N, 22);
    unsetenv("WGML_MATMUL_VARIANT");
    free(xs);
    wgml_tensor_release(x); wgml_tensor_release(w1); wgml_tensor_release(w2); wgml_tensor_release(w3);
}

/* Operands read along M or N whose rows are not whole vec4, through copies with padded
   rows (pad): a of matmul_at (M odd), b of matmul and matmul_at (N odd), each alone and both,
   with a's transposed copy (matmul), split-K, the 64-tile and the gemm entry (full tiles
   and edges); matmul_bt, whose operands are not read along M or N, unchanged; nopad. Then
   a square x [n, n] with n odd, first padded (matmul_at's a), then transposed (matmul's a)
   into the same scratch: the second must not reuse the first's copy. */
static void test_pad_copies(void)
{
    static const shape shapes[] = { { 261, 264, 40 }, { 260, 259, 36 }, { 263, 131, 203 }, { 70, 129, 45 } };
    static const char *pads[] = { "pad", "pad,att", "pad,splitk=2", "pad,t64", "pad,t128", "nopad" };
    for (size_t v = 0; v < sizeof pads / sizeof pads[0]; v++) {
        setenv("WGML_MATMUL_VARIANT", pads[v], 1);
        for (int o = 0; o < 3; o++)
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
                if (v > 1 && v < 5 && s != (size_t)o) continue;   /* the other variants: one shape per layout */
                run_case(o, shapes[s].M, shapes[s].N, shapes[s].K, s % 2 == 0, pads[v]);
            }
    }
    size_t n = 67, N = 68;
    wgml_tensor *x = random_matrix(n, n), *w = random_matrix(n, N);
    float *xs = th_read(x), *ws = th_read(w);
    for (int o = 2; o >= 0; o -= 2) {   /* matmul_at (a padded), then matmul (a transposed) */
        setenv("WGML_MATMUL_VARIANT", o == 2 ? "pad" : "att", 1);
        double *ref = th_alloc_d(n * N), *bound = th_alloc_d(n * N);
        ref_matmul(ops[o].layout, xs, ws, n, N, n, ref, bound);
        wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(n, N));
        uint64_t before = th_commands();
        TH_EXPECT(ops[o].fn(th_eng, x, w, out), WGML_OK);
        TH_CHECK(th_commands() - before == 2, "%s of x: %llu commands, want a's copy and the gemm", ops[o].name,
                 (unsigned long long)(th_commands() - before));
        float *got = th_read(out);
        check_product(o == 2 ? "matmul_at of a square x, x padded" : "matmul of the same x, x transposed", got, ref, bound,
                      n * N, n, 1.0);
        free(got); free(ref); free(bound);
        wgml_tensor_release(out);
    }
    free(xs); free(ws);
    wgml_tensor_release(x); wgml_tensor_release(w);

    /* One a copied for a product with K rows (b aligned: only a padded), then for a product
       where both operands are copied, whose copies carry zero rows up to whole tile steps of
       K: the second must not take the first copy as current, or it reads the rows past K from
       whatever the scratch held, NaN here (a copy of a poisoned tensor made before). */
    setenv("WGML_MATMUL_VARIANT", "pad", 1);
    size_t K = 45, M = 70;
    wgml_tensor *nan_a = th_poisoned(WGML_F32, TH_SHAPE(300, 301)), *nan_b = random_matrix(300, 299);
    wgml_tensor *nan_o = th_poisoned(WGML_F32, TH_SHAPE(301, 299));
    TH_EXPECT(wgml_matmul_at(th_eng, nan_a, nan_b, nan_o), WGML_OK);
    wgml_tensor *a = random_matrix(K, M);
    float *as = th_read(a);
    for (size_t cols = 68; cols >= 67; cols--) {   /* b whole vec4 rows, then not */
        wgml_tensor *b = random_matrix(K, cols), *o = th_poisoned(WGML_F32, TH_SHAPE(M, cols));
        float *bs = th_read(b);
        double *ref = th_alloc_d(M * cols), *bound = th_alloc_d(M * cols);
        ref_matmul(REF_MM_TN, as, bs, M, cols, K, ref, bound);
        TH_EXPECT(wgml_matmul_at(th_eng, a, b, o), WGML_OK);
        float *got = th_read(o);
        check_product(cols == 68 ? "matmul_at, a padded" : "matmul_at, the same a and b padded, zero rows past K", got, ref,
                      bound, M * cols, K, 1.0);
        free(got); free(bs); free(ref); free(bound);
        wgml_tensor_release(b); wgml_tensor_release(o);
    }
    unsetenv("WGML_MATMUL_VARIANT");
    free(as);
    wgml_tensor_release(a); wgml_tensor_release(nan_a); wgml_tensor_release(nan_b); wgml_tensor_release(nan_o);
}

/* a's leading dimensions flatten into M (matmul, matmul_bt) or K (matmul_at); out may have
   any shape with M*N elements and last dimension N; 1-D vectors work. */
static void test_leading_dims(void)
{
    size_t B = 2, T = 3, K = 37, N = 29;
    float *a = th_random(B * T * K, -1, 1), *b = th_random(K * N, -1, 1), *bt = th_random(N * K, -1, 1);
    double *ref = th_alloc_d(B * T * N), *bound = th_alloc_d(B * T * N);
    wgml_tensor *ta = th_tensor(WGML_F32, a, TH_SHAPE(B, T, K));
    wgml_tensor *tb = th_tensor(WGML_F32, b, TH_SHAPE(K, N)), *tbt = th_tensor(WGML_F32, bt, TH_SHAPE(N, K));
    wgml_tensor *to = th_poisoned(WGML_F32, TH_SHAPE(B, T, N));
    TH_EXPECT(wgml_matmul(th_eng, ta, tb, to), WGML_OK);
    ref_matmul(REF_MM_NN, a, b, B * T, N, K, ref, bound);
    float *got = th_read(to);
    check_product("matmul [2,3,37] @ [37,29]", got, ref, bound, B * T * N, K, 1);
    free(got);
    wgml_tensor *to2 = th_poisoned(WGML_F32, TH_SHAPE(B * T * N / N, N));
    TH_EXPECT(wgml_matmul_bt(th_eng, ta, tbt, to2), WGML_OK);
    ref_matmul(REF_MM_NT, a, bt, B * T, N, K, ref, bound);
    got = th_read(to2);
    check_product("matmul_bt [2,3,37] @ [29,37]^T", got, ref, bound, B * T * N, K, 1);
    free(got);

    /* weight gradient: x [2, 3, 37] (K = 6, M = 37), dy [6, 29] -> [37, 29] */
    float *dy = th_random(B * T * N, -1, 1);
    double *refw = th_alloc_d(K * N), *boundw = th_alloc_d(K * N);
    wgml_tensor *tdy = th_tensor(WGML_F32, dy, TH_SHAPE(B, T, N));
    wgml_tensor *tw = th_poisoned(WGML_F32, TH_SHAPE(K, N));
    TH_EXPECT(wgml_matmul_at(th_eng, ta, tdy, tw), WGML_OK);
    ref_matmul(REF_MM_TN, a, dy, K, N, B * T, refw, boundw);
    got = th_read(tw);
    check_product("matmul_at [2,3,37]^T @ [2,3,29]", got, refw, boundw, K * N, B * T, 1);
    free(got);

    /* decode: x [K] @ W^T [N, K] -> [N] */
    wgml_tensor *tx = th_tensor(WGML_F32, a, TH_SHAPE(K)), *ty = th_poisoned(WGML_F32, TH_SHAPE(N));
    TH_EXPECT(wgml_matmul_bt(th_eng, tx, tbt, ty), WGML_OK);
    ref_matmul(REF_MM_NT, a, bt, 1, N, K, ref, bound);
    got = th_read(ty);
    check_product("matmul_bt [37] @ [29,37]^T", got, ref, bound, N, K, 1);
    free(got);

    free(a); free(b); free(bt); free(dy); free(ref); free(bound); free(refw); free(boundw);
    wgml_tensor_release(ta); wgml_tensor_release(tb); wgml_tensor_release(tbt); wgml_tensor_release(to);
    wgml_tensor_release(to2); wgml_tensor_release(tdy); wgml_tensor_release(tw); wgml_tensor_release(tx);
    wgml_tensor_release(ty);
}

/* a and b may be the same tensor: the Gram matrix x x^T, x^T x, and x x for a square x. */
static void test_shared_input(void)
{
    size_t M = 70, K = 70;
    float *x = th_random(M * K, -1, 1);
    double *ref = th_alloc_d(M * M), *bound = th_alloc_d(M * M);
    wgml_tensor *tx = th_tensor(WGML_F32, x, TH_SHAPE(M, K)), *to = th_poisoned(WGML_F32, TH_SHAPE(M, M));
    for (int o = 0; o < 3; o++) {
        TH_EXPECT(ops[o].fn(th_eng, tx, tx, to), WGML_OK);
        ref_matmul(ops[o].layout, x, x, M, M, K, ref, bound);
        float *got = th_read(to);
        char what[64];
        snprintf(what, sizeof what, "%s(x, x)", ops[o].name);
        check_product(what, got, ref, bound, M * M, K, 1);
        free(got);
    }
    free(x); free(ref); free(bound);
    wgml_tensor_release(tx); wgml_tensor_release(to);
}

/* More workgroups than one grid dimension holds: a matrix-vector product over 2.2 million
   columns (68750 workgroups of 32 columns). */
static void test_large_grid(void)
{
    size_t K = 2, N = 2200000;
    float *a = th_random(K, -1, 1), *b = th_random(K * N, -1, 1);
    double *ref = th_alloc_d(N), *bound = th_alloc_d(N);
    ref_matmul(REF_MM_NN, a, b, 1, N, K, ref, bound);
    wgml_tensor *ta = th_tensor(WGML_F32, a, TH_SHAPE(1, K)), *tb = th_tensor(WGML_F32, b, TH_SHAPE(K, N));
    wgml_tensor *to = th_poisoned(WGML_F32, TH_SHAPE(1, N));
    TH_EXPECT(wgml_matmul(th_eng, ta, tb, to), WGML_OK);
    float *got = th_read(to);
    check_product("matmul 1x2200000x2", got, ref, bound, N, K, 1);
    free(a); free(b); free(ref); free(bound); free(got);
    wgml_tensor_release(ta); wgml_tensor_release(tb); wgml_tensor_release(to);
}

/* Products issued back to back see each other's results (chained layers). */
static void test_chain(void)
{
    size_t n = 40;
    float *x = th_random(n * n, -1, 1), *w = th_random(n * n, -1, 1);
    double *h = th_alloc_d(n * n), *h2 = th_alloc_d(n * n), *bound = th_alloc_d(n * n);
    wgml_tensor *tx = th_tensor(WGML_F32, x, TH_SHAPE(n, n)), *tw = th_tensor(WGML_F32, w, TH_SHAPE(n, n));
    wgml_tensor *t1 = th_poisoned(WGML_F32, TH_SHAPE(n, n)), *t2 = th_poisoned(WGML_F32, TH_SHAPE(n, n));
    TH_EXPECT(wgml_matmul(th_eng, tx, tw, t1), WGML_OK);
    TH_EXPECT(wgml_matmul_bt(th_eng, t1, tw, t2), WGML_OK);
    float *g1 = th_read(t1), *g2 = th_read(t2);
    ref_matmul(REF_MM_NN, x, w, n, n, n, h, bound);
    check_product("chain step 1", g1, h, bound, n * n, n, 1);
    /* step 2 from the GPU's own step-1 values: its inputs are what the kernel read */
    ref_matmul(REF_MM_NT, g1, w, n, n, n, h2, bound);
    check_product("chain step 2", g2, h2, bound, n * n, n, 1);
    free(x); free(w); free(h); free(h2); free(bound); free(g1); free(g2);
    wgml_tensor_release(tx); wgml_tensor_release(tw); wgml_tensor_release(t1); wgml_tensor_release(t2);
}

static void test_bad_inputs(void)
{
    float z[64] = { 0 };
    wgml_tensor *a = th_tensor(WGML_F32, z, TH_SHAPE(4, 3));    /* M 4, K 3 */
    wgml_tensor *b = th_tensor(WGML_F32, z, TH_SHAPE(3, 5));    /* K 3, N 5 (matmul, matmul_at needs K 4) */
    wgml_tensor *bt = th_tensor(WGML_F32, z, TH_SHAPE(5, 3));   /* N 5, K 3 */
    wgml_tensor *b3 = th_tensor(WGML_F32, z, TH_SHAPE(1, 3, 5));
    wgml_tensor *b4 = th_tensor(WGML_F32, z, TH_SHAPE(4, 5));   /* K 4 */
    wgml_tensor *sq = th_tensor(WGML_F32, z, TH_SHAPE(4, 4));
    wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(4, 5));
    wgml_tensor *out_t = th_poisoned(WGML_F32, TH_SHAPE(5, 4));   /* 20 elements, last dimension 4 */
    wgml_tensor *out_small = th_poisoned(WGML_F32, TH_SHAPE(3, 5));
    wgml_tensor *out_at = th_poisoned(WGML_F32, TH_SHAPE(3, 5));  /* matmul_at of a [4,3], b4 [4,5] */
    wgml_tensor *out_at_t = th_poisoned(WGML_F32, TH_SHAPE(5, 3));
    wgml_tensor *u = th_tensor(WGML_U32, z, TH_SHAPE(4, 3));
    wgml_tensor *h = th_tensor(WGML_F16, z, TH_SHAPE(3, 5));
    wgml_context *other;
    TH_EXPECT(wgml_context_create(NULL, &other), WGML_OK);
    wgml_tensor *foreign;
    TH_EXPECT(wgml_tensor_from_data(other, WGML_F32, 2, (size_t[]){ 3, 5 }, z, &foreign), WGML_OK);

    uint64_t before = th_commands();
    for (int o = 0; o < 3; o++) {
        mm_fn f = ops[o].fn;
        const wgml_tensor *B = o == 0 ? b : o == 1 ? bt : b4;
        wgml_tensor *O = o == 2 ? out_at : out;
        TH_EXPECT_ERR(f(NULL, a, B, O), WGML_ERROR_INVALID_ARGUMENT, "engine is NULL");
        TH_EXPECT_ERR(f(th_eng, NULL, B, O), WGML_ERROR_INVALID_ARGUMENT, "a is NULL");
        TH_EXPECT_ERR(f(th_eng, a, NULL, O), WGML_ERROR_INVALID_ARGUMENT, "b is NULL");
        TH_EXPECT_ERR(f(th_eng, a, B, NULL), WGML_ERROR_INVALID_ARGUMENT, "out is NULL");
        TH_EXPECT_ERR(f(th_eng, u, B, O), WGML_ERROR_DTYPE, "a is u32");
        TH_EXPECT_ERR(f(th_eng, a, h, O), WGML_ERROR_DTYPE, "b is f16");
        TH_EXPECT_ERR(f(th_eng, a, B, u), WGML_ERROR_DTYPE, "out is u32");
        TH_EXPECT_ERR(f(th_eng, a, foreign, O), WGML_ERROR_CONTEXT, "b belongs to another context");
        TH_EXPECT_ERR(f(th_eng, sq, sq, sq), WGML_ERROR_ALIAS, "out must not be the same tensor as a");
        TH_EXPECT_ERR(f(th_eng, a, sq, sq), WGML_ERROR_ALIAS, "out must not be the same tensor as b");
        TH_EXPECT_ERR(f(th_eng, a, B, o == 2 ? out : out_small), WGML_ERROR_SHAPE, o == 2 ? "out has 20 elements" : "out has 15 elements");
        TH_EXPECT_ERR(f(th_eng, a, B, o == 2 ? out_at_t : out_t), WGML_ERROR_SHAPE, "with last dimension");
    }
    TH_EXPECT_ERR(wgml_matmul(th_eng, a, b4, out), WGML_ERROR_SHAPE, "a's last dimension is 3; it must equal K = 4");
    TH_EXPECT_ERR(wgml_matmul(th_eng, a, b3, out), WGML_ERROR_SHAPE, "b must be 2-D");
    TH_EXPECT_ERR(wgml_matmul_bt(th_eng, a, b, out), WGML_ERROR_SHAPE, "a's last dimension is 3; it must equal K = 5");
    TH_EXPECT_ERR(wgml_matmul_bt(th_eng, a, b3, out), WGML_ERROR_SHAPE, "b must be 2-D");
    TH_EXPECT_ERR(wgml_matmul_at(th_eng, a, b, out_at), WGML_ERROR_SHAPE, "the K must be equal");
    TH_CHECK(th_commands() == before, "rejected calls recorded %llu commands", (unsigned long long)(th_commands() - before));
    wgml_tensor *outs[] = { out, out_t, out_small, out_at, out_at_t };
    for (size_t i = 0; i < 5; i++) {
        uint32_t got[20];
        th_read_into(outs[i], got);
        for (size_t j = 0; j < wgml_tensor_numel(outs[i]); j++)
            TH_CHECK(got[j] == 0xFFFFFFFFu, "output %zu element %zu was written by a rejected call", i, j);
    }
    /* the valid forms of the same tensors pass */
    TH_EXPECT(wgml_matmul(th_eng, a, b, out), WGML_OK);
    TH_EXPECT(wgml_matmul_bt(th_eng, a, bt, out), WGML_OK);
    TH_EXPECT(wgml_matmul_at(th_eng, a, b4, out_at), WGML_OK);
    TH_EXPECT(wgml_matmul(th_eng, sq, sq, out_t), WGML_ERROR_SHAPE);   /* out 5x4 vs 4x4 */

    wgml_tensor_release(foreign);
    wgml_context_destroy(other);
    wgml_tensor *all[] = { a, b, bt, b3, b4, sq, out, out_t, out_small, out_at, out_at_t, u, h };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) wgml_tensor_release(all[i]);
}

static const th_case cases[] = {
    { "shapes", test_shapes },
    { "long_k", test_long_k },
    { "exact_integers", test_exact_integers },
    { "random_shapes", test_random_shapes },
    { "variants_scalar", test_variants },
    { "variants_vec4", test_variants_vec4 },
    { "fast_tiles", test_fast_tiles },
    { "forced_choices", test_forced_choices },
    { "accumulate", test_accumulate },
    { "last_round", test_last_round },
    { "copy_reuse", test_copy_reuse },
    { "pad_copies", test_pad_copies },
    { "leading_dims", test_leading_dims },
    { "shared_input", test_shared_input },
    { "large_grid", test_large_grid },
    { "chain", test_chain },
    { "bad_inputs", test_bad_inputs },
};
TH_MAIN(cases)
