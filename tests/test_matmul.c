/* wgml_matmul, wgml_matmul_bt and wgml_matmul_at against the double reference
   (tests/ref/ref_matmul.c): awkward and tile-filling shapes, matrix-vector products, long K
   (split-K), leading dimensions, exact integer products, bad inputs, and every path a rule
   of src/ops/matmul.c takes on some adapter, forced through the engine's tuning
   (src/ops/matmul_tuning.h) so that any adapter runs it; a GPU's rules also run on the H200's
   profile.

   Each numeric test is a table of op cases (tests/harness.h) generated in loops over shapes
   and forced choices: random inputs, a poisoned output (an element never written fails), the
   call, the reference, the tolerance below, inputs unchanged; a case may also require the
   number of commands (dispatches) the call records, which shows that a forced copy, split
   or last round did run.

   Tolerance. Each output is a sum of K products accumulated in f32. Whatever the order of
   the additions (one thread's running sum, a tree reduction in workgroup memory, split-K
   slices added afterwards), each product passes through at most K - 1 additions that round
   (adding an exact zero does not round) plus its own rounding, so
       |got - exact| <= gamma_(K+1) * sum_k |a_k * b_k|,  gamma_n = n u / (1 - n u), u = 2^-24
   (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., section 3.1). The test
   allows (K + 2) u * sum_k |a_k b_k| per element, computed by the reference, plus 1e-30
   against denormal flushing. Because that bound grows like K^2 relative to one term, at
   large K it could hide a missing term; the exact cases therefore use small integers, whose
   products and partial sums are exact in f32 (|sum| < 2^24), and demand bit-exact results. */
#include "harness.h"
#include "internal.h"
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

typedef wgml__matmul_tuning tuning;

/* got vs ref within (K + 2) u * bound[i] + 1e-30 for every element, for the tests that are
   sequences of calls rather than one case. */
static bool check_product(const char *what, const float *got, const double *ref, const double *bound, size_t n, size_t K)
{
    size_t bad = 0, worst = 0;
    double worst_ratio = -1;
    for (size_t i = 0; i < n; i++) {
        double tol = (double)(K + 2) * U32_EPS * bound[i] + 1e-30;
        double d = fabs((double)got[i] - ref[i]);
        bool ok = d <= tol;   /* false for NaN */
        double ratio = ok ? d / tol : INFINITY;
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

/* ---- the op case of a product ------------------------------------------------------------ */

/* One product: op o on an M x N x K product, a [M, K] (matmul_at: [K, M]), b [K, N]
   (matmul_bt: [N, K]) and out [M, N] unless shapes are given (each 0-terminated, with the
   same numbers of elements). ints: integer inputs in [-3, 3] and an exact comparison; acc:
   through the _with form with accumulate, out starting from random values c (integers with
   ints), want c + A @ B within one rounding more, (K + 3) u (bound + |c|); same: a and b are
   one tensor (a square product). commands: the dispatches the call must record (0: any). */
typedef struct mm_case {
    int op;
    size_t M, N, K;
    bool ints, acc, same;
    tuning forced;
    uint64_t commands;
    size_t a_shape[5], b_shape[5], out_shape[5];
} mm_case;

/* The reference's sum of |products| of each element of the case being run (cases run one
   at a time), which its tolerance scales. */
static double *case_bound;

/* Input i of a case as the op sees it (malloc'd): the harness's f32 values, or for integer
   cases its u32 draws in [0, 6] as the integers -3 .. 3. */
static float *operand(const th_run *r, int i)
{
    float *v = th_alloc_f(r->n_in[i]);
    for (size_t j = 0; j < r->n_in[i]; j++)
        v[j] = r->c->in[i].dtype == WGML_U32 ? (float)TH_IN_U32(r, i)[j] - 3.0f : TH_IN(r, i)[j];
    return v;
}

static void mm_reference(const th_run *r)
{
    const mm_case *mc = r->c->params;
    size_t n = mc->M * mc->N;
    float *a = operand(r, 0), *b = mc->same ? a : operand(r, 1);
    free(case_bound);
    case_bound = th_alloc_d(n);
    ref_matmul(ops[mc->op].layout, a, b, mc->M, mc->N, mc->K, r->ref[0], case_bound);
    if (mc->acc) {
        float *c = operand(r, 2);
        for (size_t i = 0; i < n; i++) {
            r->ref[0][i] += c[i];
            case_bound[i] += fabs(c[i]);
        }
        free(c);
    }
    if (b != a) free(b);
    free(a);
}

static double mm_tol(const th_run *r, int o, size_t i)
{
    const mm_case *mc = r->c->params;
    (void)o;
    if (mc->ints) return 0.0;
    return (double)((mc->acc ? mc->K + 1 : mc->K) + 2) * U32_EPS * case_bound[i] + 1e-30;
}

/* The harness's input i, or for integer cases an f32 tensor of its values (*made set). */
static wgml_tensor *input_tensor(const th_run *r, int i, bool *made)
{
    *made = r->c->in[i].dtype == WGML_U32;
    if (!*made) return r->t_in[i];
    float *v = operand(r, i);
    wgml_tensor *t = th_tensor(WGML_F32, v, r->c->in[i].shape);
    free(v);
    return t;
}

/* Runs the product with the case's tuning on the test's engine (reset after), out first
   set to c for accumulate, and checks the commands it recorded. */
static wgml_status mm_call(const th_run *r)
{
    const mm_case *mc = r->c->params;
    int nin = r->c->nin;
    wgml_tensor *t[3];
    bool made[3];
    for (int i = 0; i < nin; i++) t[i] = input_tensor(r, i, &made[i]);
    if (mc->acc) {
        float *c = operand(r, nin - 1);
        TH_EXPECT(wgml_tensor_write(r->t_out[0], 0, c, r->n_out[0] * sizeof *c), WGML_OK);
        free(c);
    }
    th_eng->tuning.matmul = mc->forced;
    uint64_t before = th_commands();
    wgml_tensor *b = t[mc->same ? 0 : 1];
    wgml_status s = mc->acc ? ops[mc->op].with(th_eng, t[0], b, r->t_out[0], &(wgml_matmul_options){ .accumulate = true })
                            : ops[mc->op].fn(th_eng, t[0], b, r->t_out[0]);
    uint64_t n = th_commands() - before;
    th_eng->tuning.matmul = (tuning){ 0 };
    if (s == WGML_OK && mc->commands)
        TH_CHECK(n == mc->commands, "%s: %llu commands, want %llu", r->c->name, (unsigned long long)n,
                 (unsigned long long)mc->commands);
    for (int i = 0; i < nin; i++)
        if (made[i]) wgml_tensor_release(t[i]);
    return s;
}

/* The forced fields of a tuning, for case names. */
static void describe(const tuning *t, char *buf, size_t size)
{
    const struct { const char *name; uint32_t v; } f[] = {
        { "tile", t->tile }, { "splitk", t->splitk }, { "tail_tiles", t->tail_tiles }, { "tail_slices", t->tail_slices },
        { "copy_b", t->copy_b }, { "copy_a", t->copy_a }, { "pad", t->pad }, { "krem", t->krem },
        { "gemv_rows", t->gemv_rows }, { "gemv_wide", t->gemv_wide }, { "gemv_subgroups", t->gemv_subgroups },
    };
    size_t used = 0;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof f / sizeof f[0] && used < size; i++)
        if (f[i].v) used += (size_t)snprintf(buf + used, size - used, " %s=%u", f[i].name, f[i].v);
}

static void copy_shape(size_t *dst, const size_t *given, size_t d0, size_t d1)
{
    if (given[0]) {
        memcpy(dst, given, 5 * sizeof *dst);
        return;
    }
    dst[0] = d0;
    dst[1] = d1;
    dst[2] = 0;
}

/* Runs one product as an op case. */
static void run_mm(mm_case mc)
{
    th_op_case c = { .nin = (mc.same ? 1 : 2) + mc.acc, .nout = 1, .call = mm_call, .reference = mm_reference,
                     .tol = mm_tol, .params = &mc };
    wgml_dtype dt = mc.ints ? WGML_U32 : WGML_F32;
    double lo = mc.ints ? 0 : -1, hi = mc.ints ? 6 : 1;
    bool at = mc.op == 2, bt = mc.op == 1;
    c.in[0] = (th_io){ .dtype = dt, .lo = lo, .hi = hi };
    copy_shape(c.in[0].shape, mc.a_shape, at ? mc.K : mc.M, at ? mc.M : mc.K);
    if (!mc.same) {
        c.in[1] = (th_io){ .dtype = dt, .lo = lo, .hi = hi };
        copy_shape(c.in[1].shape, mc.b_shape, bt ? mc.N : mc.K, bt ? mc.K : mc.N);
    }
    if (mc.acc) c.in[c.nin - 1] = (th_io){ .dtype = dt, .lo = mc.ints ? 0 : -4, .hi = mc.ints ? 6 : 4 };
    c.out[0] = (th_io){ .dtype = WGML_F32 };
    copy_shape(c.out[0].shape, mc.out_shape, mc.M, mc.N);
    if (mc.acc) memcpy(c.in[c.nin - 1].shape, c.out[0].shape, sizeof c.out[0].shape);
    char forced[200];
    describe(&mc.forced, forced, sizeof forced);
    int k = snprintf(c.name, sizeof c.name, "%s %zux%zux%zu%s%s%s", ops[mc.op].name, mc.M, mc.N, mc.K, mc.ints ? " ints" : "",
                     mc.acc ? " accumulate" : "", mc.same ? " a = b" : "");
    if (k > 0 && (size_t)k + 1 < sizeof c.name)   /* the forced choices, cut to what fits */
        snprintf(c.name + k, sizeof c.name - (size_t)k, "%.*s", (int)(sizeof c.name - (size_t)k - 1), forced);
    th_run_case(&c);
}

/* Op o on an M x N x K product with forced choices t (NULL: the rules). */
static void product(int o, size_t M, size_t N, size_t K, bool ints, const tuning *t)
{
    run_mm((mm_case){ .op = o, .M = M, .N = N, .K = K, .ints = ints, .forced = t ? *t : (tuning){ 0 } });
}

typedef struct shape { size_t M, N, K; } shape;
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* A call with tuning t on zero inputs (a [M, K] or [K, M], b [K, N] or [N, K]) is refused
   with status and a message naming needle, records nothing and leaves out as it was. */
static void expect_refused(const tuning *t, int o, size_t M, size_t N, size_t K, wgml_status status, const char *needle)
{
    float *z = th_alloc_f(M * K > K * N ? M * K : K * N);
    memset(z, 0, (M * K > K * N ? M * K : K * N) * sizeof *z);
    wgml_tensor *a = th_tensor(WGML_F32, z, o == 2 ? TH_SHAPE(K, M) : TH_SHAPE(M, K));
    wgml_tensor *b = th_tensor(WGML_F32, z, o == 1 ? TH_SHAPE(N, K) : TH_SHAPE(K, N));
    wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(M, N));
    th_eng->tuning.matmul = *t;
    uint64_t before = th_commands();
    TH_EXPECT_ERR(ops[o].with(th_eng, a, b, out, NULL), status, needle);
    TH_CHECK(th_commands() == before, "%s: a refused tuning recorded commands", ops[o].name);
    th_eng->tuning.matmul = (tuning){ 0 };
    uint32_t *got = (uint32_t *)th_read(out);
    size_t written = 0;
    for (size_t i = 0; i < M * N; i++) written += got[i] != 0xFFFFFFFFu;
    TH_CHECK(written == 0, "%s: a refused call wrote %zu elements of out", ops[o].name, written);
    free(got); free(z);
    wgml_tensor_release(a); wgml_tensor_release(b); wgml_tensor_release(out);
}

/* ---- the rules' own choices ------------------------------------------------------------- */

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
        for (size_t s = 0; s < COUNT(shapes); s++) product(o, shapes[s].M, shapes[s].N, shapes[s].K, false, NULL);
}

/* K much larger than M * N: split-K with the gemm and with both matrix-vector kernels. */
static void test_long_k(void)
{
    static const shape shapes[] = {
        { 5, 7, 8192 }, { 64, 64, 8192 }, { 1, 64, 8192 }, { 48, 1, 8192 }, { 1, 1, 32771 }, { 3, 5, 40000 },
    };
    for (int o = 0; o < 3; o++)
        for (size_t s = 0; s < COUNT(shapes); s++) product(o, shapes[s].M, shapes[s].N, shapes[s].K, false, NULL);
}

/* Integer inputs: the result is exact in any summation order, so any lost, repeated or
   misplaced product shows, even at K where the rounding bound is wide. */
static void test_exact_integers(void)
{
    static const shape shapes[] = {
        { 1, 1, 32771 }, { 1, 257, 8195 }, { 259, 1, 8192 }, { 9, 11, 8197 }, { 130, 131, 200 }, { 64, 96, 4100 },
        { 1, 77, 400 }, { 1, 2053, 200 },
    };
    for (int o = 0; o < 3; o++)
        for (size_t s = 0; s < COUNT(shapes); s++) product(o, shapes[s].M, shapes[s].N, shapes[s].K, true, NULL);
}

static void test_random_shapes(void)
{
    for (int i = 0; i < 18; i++) {
        size_t M = 1 + th_rand_u32() % 150, N = 1 + th_rand_u32() % 150, K = 1 + th_rand_u32() % 300;
        product(i % 3, M, N, K, false, NULL);
    }
}

/* A GPU's rules, on the H200's profile (the rules read nothing else of the adapter but its
   limits and subgroups): b's transposed copy from M = 1024 (both copy paths: N or K not a
   multiple of 4, and both), a's too from N = 512, padded rows of b where M is 512 or more;
   gemv_rows with 8 rows per workgroup for K <= 512 and 4 for K <= 1024 where that leaves
   512 workgroups, else 1; gemv_cols4 in the wide workgroups for 4096 - 8191 columns. The
   commands show the copies. */
static void test_gpu_rules(void)
{
    const wgml__profile *own = th_ctx->profile;
    th_ctx->profile = wgml__profile_of("NVIDIA H200", 0x10de, false);
    TH_CHECK(th_ctx->profile->compute_units == 132, "the H200's profile: %u compute units", th_ctx->profile->compute_units);
    static const struct { int op; shape s; bool ints; uint64_t commands; } cases[] = {
        { 1, { 1031, 67, 45 }, false, 2 }, { 1, { 1024, 132, 36 }, true, 2 },   /* b's copy, gemm */
        { 0, { 1030, 515, 37 }, false, 3 },                                     /* a's copy, b padded, gemm */
        { 1, { 1030, 515, 37 }, false, 3 },                                     /* b's and a's copies, gemm */
        { 0, { 600, 515, 40 }, false, 2 },                                      /* b padded, gemm */
        { 0, { 300, 515, 40 }, false, 1 }, { 1, { 1000, 132, 36 }, false, 1 },  /* below the thresholds */
        { 1, { 1, 4099, 510 }, false, 1 }, { 1, { 1, 2050, 768 }, false, 1 },   /* gemv_rows: 8 and 4 rows */
        { 1, { 1, 2040, 1024 }, false, 1 }, { 0, { 4101, 1, 333 }, false, 1 },  /* 1 row (2040 / 4 < 512), 8 rows */
        { 0, { 1, 4099, 2100 }, true, 1 }, { 2, { 1, 8191, 96 }, false, 1 },    /* wide gemv_cols4 */
        { 0, { 1, 8192, 96 }, false, 1 },                                       /* past the wide range */
    };
    for (size_t i = 0; i < COUNT(cases); i++)
        run_mm((mm_case){ .op = cases[i].op, .M = cases[i].s.M, .N = cases[i].s.N, .K = cases[i].s.K, .ints = cases[i].ints,
                          .commands = cases[i].commands });
    th_ctx->profile = own;
}

/* ---- forced tiles ----------------------------------------------------------------------- */

/* Every tile configuration (each is a choice or a fallback of pick_tile), so that each is
   correct wherever an adapter's limits or a shape make it the choice. A tile the adapter
   cannot hold is refused (WGML_ERROR_LIMIT) with nothing recorded. */
static const struct { uint32_t tile; unsigned smem_bytes, threads; bool g2; } forced_tiles[] = {
    { WGML__MM_TILE_128, 16384, 256, true },   /* the large outputs' tile */
    { WGML__MM_TILE_64X128, 12288, 128, true }, /* its fallback */
    { WGML__MM_TILE_64, 16384, 64, false },    /* the small outputs' tile */
    { WGML__MM_TILE_64K8, 8192, 64, false },   /* the fallback of both */
};

static bool tile_refused(size_t v)
{
    wgml_adapter_info info;
    wgml_context_info(th_ctx, &info);
    return forced_tiles[v].smem_bytes > info.max_workgroup_storage_size ||
           forced_tiles[v].threads > info.max_invocations_per_workgroup || forced_tiles[v].threads > info.max_workgroup_size_x;
}

/* Each tile with scalar loads and stores (N odd, K not a multiple of 4): the gemm entry's
   tiles in every layout; the gemm2 tiles in matmul_bt (scalar loads of both operands, N odd:
   gemm2's scalar stores; their other layouts with scalar loads are in test_fast_tiles),
   also exact and in split-K slices of 32 and 13. */
static void test_variants_scalar(void)
{
    const shape sh = { 130, 67, 45 };
    for (size_t v = 0; v < COUNT(forced_tiles); v++) {
        tuning t = { .tile = forced_tiles[v].tile };
        if (tile_refused(v)) {
            for (int o = 0; o < 3; o++) expect_refused(&t, o, 2, 2, 2, WGML_ERROR_LIMIT, "the engine's tuning forces the");
            continue;
        }
        bool g2 = forced_tiles[v].g2;
        for (int o = g2 ? 1 : 0; o < (g2 ? 2 : 3); o++) product(o, sh.M, sh.N, sh.K, false, &t);
        if (!g2) continue;
        product(1, sh.M, sh.N, sh.K, true, &t);
        t.splitk = 2;
        run_mm((mm_case){ .op = 1, .M = sh.M, .N = sh.N, .K = sh.K, .forced = t, .commands = 2 });
    }
}

/* Each tile with vec4 loads, edge tiles on both sides: K = 96 (a multiple of every BK) gives
   the interior tiles of the gemm2 tiles their unclamped path, split-K slices of 48 too. The
   gemm entry's tiles in one layout each (rotating: their loads are gemm2's without the
   unclamped path); the gemm2 tiles in every layout, where K = 76 ends on a half step of BK 8
   and N = 260 takes gemm2's vec4 stores (N % 4 == 0) with an edge tile of 4 columns. */
static void test_variants_vec4(void)
{
    for (size_t v = 0; v < COUNT(forced_tiles); v++) {
        if (tile_refused(v)) continue;
        tuning t = { .tile = forced_tiles[v].tile }, split = { .tile = forced_tiles[v].tile, .splitk = 2 };
        bool g2 = forced_tiles[v].g2;
        int o0 = (int)((v + 1) % 3);
        for (int o = g2 ? 0 : o0; o < (g2 ? 3 : o0 + 1); o++) {
            product(o, 200, 260, g2 ? 76 : 72, false, &t);
            product(o, 200, 260, 96, true, &t);
            run_mm((mm_case){ .op = o, .M = 136, .N = 132, .K = 96, .forced = split, .commands = 2 });
        }
    }
}

/* Interior tiles (in range along M and N) of operands whose rows are not whole vec4 load
   without clamps through scalar quads, and every full step of K does so while a partial last
   step takes the clamped loads: M, N odd with K a multiple of 8 (all three layouts: scalar
   quads of one or both operands, vec4 of the other), K = 203 and 100 (a partial last step,
   with scalar and with vec4 loads), split-K, on the 128-tile (indices computed once per
   tile, an unconditional prefetch), the 64 x 128 tile (without either) and the 64-tile (the
   gemm entry); exact on integers where the rounding bound would hide a repeated or lost k.
   Then with the copies that pad the rows (pad, copy_a: every layout runs as matmul_at on
   vec4 rows), where tiles past M and N load without clamps too (EDGE) and the copies carry
   zero rows up to whole steps of K (K = 203 and 5: no KPART). Last, the last K % BK values
   of k in a pass of their own that adds into out (krem): alone, after split-K, after the
   last round's slices, after a padded copy of b, on the 64-tile (BK 16), with accumulate,
   and forced off. */
static void test_fast_tiles(void)
{
    static const shape shapes[] = { { 261, 259, 136 }, { 260, 259, 136 }, { 260, 264, 203 }, { 260, 264, 100 } };
    static const tuning tiles[] = { { .tile = WGML__MM_TILE_128 }, { .tile = WGML__MM_TILE_128, .splitk = 2 },
                                    { .tile = WGML__MM_TILE_64X128 }, { .tile = WGML__MM_TILE_64 } };
    for (size_t v = 0; v < COUNT(tiles); v++)
        for (int o = 0; o < 3; o++)
            for (size_t s = 0; s < COUNT(shapes); s++) {
                /* the other tiles: one shape per layout, a partial last step where A is
                   contiguous along K (a load past the step's end reads the next row) */
                if (v > 1 && s != (size_t)(o + 2) % 4) continue;
                product(o, shapes[s].M, shapes[s].N, shapes[s].K, s % 2 == 0, &tiles[v]);
            }
    static const shape padded[] = { { 261, 259, 203 }, { 263, 390, 136 }, { 261, 259, 5 } };
    static const tuning pads[] = {
        { .tile = WGML__MM_TILE_128, .pad = WGML__MM_ON, .copy_a = WGML__MM_ON },
        { .tile = WGML__MM_TILE_128, .pad = WGML__MM_ON, .copy_a = WGML__MM_ON, .splitk = 2 },
        { .tile = WGML__MM_TILE_64X128, .pad = WGML__MM_ON, .copy_a = WGML__MM_ON },
        { .tile = WGML__MM_TILE_64, .pad = WGML__MM_ON, .copy_a = WGML__MM_ON },
    };
    for (size_t v = 0; v < COUNT(pads); v++)
        for (int o = 0; o < 3; o++)
            for (size_t s = 0; s < COUNT(padded); s++) {
                if (v > 1 && s != (size_t)o) continue;   /* the other tiles: one shape per layout */
                product(o, padded[s].M, padded[s].N, padded[s].K, s != 1, &pads[v]);
            }
    static const shape rems[] = { { 261, 259, 203 }, { 263, 390, 1030 } };
    static const tuning krems[] = {   /* unsplit unless split here (the rules split K = 1030) */
        { .tile = WGML__MM_TILE_128, .krem = WGML__MM_ON, .splitk = 1 },
        { .tile = WGML__MM_TILE_128, .krem = WGML__MM_ON, .splitk = 3 },
        { .tile = WGML__MM_TILE_128, .krem = WGML__MM_ON, .tail_tiles = 2, .tail_slices = 3 },
        { .tile = WGML__MM_TILE_128, .krem = WGML__MM_ON, .pad = WGML__MM_ON, .splitk = 1 },
        { .tile = WGML__MM_TILE_64, .krem = WGML__MM_ON, .splitk = 1 },
        { .tile = WGML__MM_TILE_128, .krem = WGML__MM_OFF, .splitk = 1 },
    };
    /* commands: the gemm, its split-K sum or last round (2), a copy of b for matmul, the pass */
    static const uint64_t krem_commands[] = { 2, 3, 4, 2, 2, 1 };
    for (size_t v = 0; v < COUNT(krems); v++)
        for (int o = 0; o < 3; o++) {
            size_t s = (v + (size_t)o) % 2;
            /* matmul's b (N not a multiple of 4) copied, matmul_at's a and b copied with zero
               rows to whole steps instead of the pass */
            uint64_t n = krem_commands[v] + (v == 3 && o == 0) + (v == 3 && o == 2 ? 1 : 0);
            run_mm((mm_case){ .op = o, .M = rems[s].M, .N = rems[s].N, .K = rems[s].K, .ints = s == 0, .acc = o == 1,
                              .forced = krems[v], .commands = n });
        }
}

/* ---- forced choices of split-K and the matrix-vector kernels ------------------------------- */

/* Split-K and the matrix-vector kernels' choices, forced, on products and on vectors; the
   tile of the split-K products forced too (the 64-tiles: the fill rule's kernels). */
static void test_forced_choices(void)
{
    static const shape shapes[] = { { 130, 67, 45 }, { 96, 132, 76 } };
    static const shape vectors[] = { { 1, 77, 50 }, { 65, 1, 36 } };
    static const tuning choices[] = {
        { .splitk = 3 }, { .splitk = 1 }, { .tile = WGML__MM_TILE_64, .splitk = 2 }, { .tile = WGML__MM_TILE_64K8, .splitk = 5 },
        { .gemv_rows = 1 }, { .gemv_rows = 8, .splitk = 2 }, { .gemv_wide = WGML__MM_ON },
        { .gemv_wide = WGML__MM_ON, .splitk = 2 }, { .gemv_subgroups = WGML__MM_OFF },
        { .gemv_subgroups = WGML__MM_OFF, .gemv_wide = WGML__MM_ON, .splitk = 3 },
    };
    for (size_t v = 0; v < COUNT(choices); v++)
        for (int o = 0; o < 3; o++) {
            for (size_t s = 0; s < 2; s++) product(o, shapes[s].M, shapes[s].N, shapes[s].K, false, &choices[v]);
            for (size_t s = 0; s < 2; s++) product(o, vectors[s].M, vectors[s].N, vectors[s].K, false, &choices[v]);
        }
    /* gemv_cols4 (matmul and matmul_at with M = 1): the slices of 400 and of 416 and 371
       must end the loops exactly at the slice's end (reading past it would add the next
       slice's first rows twice); K = 1203 and 1202 end on a partial quad */
    tuning split3 = { .splitk = 3 };
    for (int o = 0; o < 3; o += 2) {
        run_mm((mm_case){ .op = o, .M = 1, .N = 77, .K = 1200, .ints = true, .forced = split3, .commands = 2 });
        run_mm((mm_case){ .op = o, .M = 1, .N = 77, .K = 1203, .ints = true, .forced = split3, .commands = 2 });
        product(o, 1, 1000, 1202, false, &split3);
    }
    run_mm((mm_case){ .op = 1, .M = 1, .N = 77, .K = 1200, .ints = true, .forced = split3, .commands = 2 });   /* gemv_rows */
    /* gemv_cols4's configurations, each with whole rounds of GQ quads per group, then single
       quads, then a partial quad: 2 vec4 columns per workgroup (rounds of 2048 values of k),
       4 (1024), 8 (512), the wide workgroups (2048), each with the tree sum and with subgroup
       shuffles (where the adapter's subgroups hold the columns: the rule's choice) */
    static const struct { size_t N, K; } widths[] = { { 77, 6163 }, { 2050, 2071 }, { 8195, 1203 } };
    static const tuning sums[] = { { 0 }, { .gemv_subgroups = WGML__MM_OFF }, { .gemv_wide = WGML__MM_ON },
                                   { .gemv_wide = WGML__MM_ON, .gemv_subgroups = WGML__MM_OFF } };
    for (size_t v = 0; v < COUNT(sums); v++)
        for (size_t w = 0; w < COUNT(widths); w++) {
            if (sums[v].gemv_wide && w > 0) continue;   /* the wide workgroups: the same for any width */
            for (int o = 0; o < 3; o += 2) product(o, 1, widths[w].N, widths[w].K, true, &sums[v]);
        }
    /* subgroup sums forced: where the adapter's subgroups hold the columns, or refused with
       nothing recorded; refused on an adapter without subgroups (the test hides them) */
    wgml_adapter_info info;
    wgml_context_info(th_ctx, &info);
    tuning sg = { .gemv_subgroups = WGML__MM_ON }, sg_wide = { .gemv_subgroups = WGML__MM_ON, .gemv_wide = WGML__MM_ON };
    bool fits = info.subgroups && info.subgroup_min_size >= 8 && info.subgroup_max_size && 256 % info.subgroup_max_size == 0;
    if (fits) {
        for (int o = 0; o < 3; o += 2) product(o, 1, 8195, 1203, true, &sg);
        for (int o = 0; o < 3; o += 2) product(o, 1, 77, 1203, true, &sg_wide);
    } else {
        expect_refused(&sg, 0, 1, 8195, 8, WGML_ERROR_LIMIT, "forces gemv_subgroups");
    }
    bool had = th_ctx->info.subgroups;
    th_ctx->info.subgroups = false;
    expect_refused(&sg, 0, 1, 77, 8, WGML_ERROR_LIMIT, "forces gemv_subgroups; the adapter's subgroups (none");
    th_ctx->info.subgroups = had;
    /* the wide workgroups where the adapter holds fewer invocations (the test lowers its limit) */
    uint32_t limit = th_ctx->limits.maxComputeInvocationsPerWorkgroup;
    th_ctx->limits.maxComputeInvocationsPerWorkgroup = 256;
    expect_refused(&(tuning){ .gemv_wide = WGML__MM_ON }, 0, 1, 77, 8, WGML_ERROR_LIMIT, "forces gemv_wide");
    th_ctx->limits.maxComputeInvocationsPerWorkgroup = limit;
}

/* matmul_bt through a transposed copy of b (copy_b): the copy's scalar path (N or K not a
   multiple of 4) and its vec4 path with partial 64 x 64 blocks, with split-K and the 64-tile,
   exact on integers; M = 1 keeps the matrix-vector kernel; forced off. Then matmul and
   matmul_bt through a transposed copy of a run as matmul_at (copy_a), alone and after b's
   copy, on the same shapes (a's copy takes its scalar path where M or K is not a multiple
   of 4); forced off; copy_a with copy_b off refused for matmul_bt. The commands show the
   copies. */
static void test_forced_copies(void)
{
    static const shape shapes[] = { { 130, 67, 45 }, { 200, 260, 76 }, { 96, 132, 300 }, { 70, 129, 132 }, { 1, 96, 40 } };
    static const struct { tuning t; bool bt_only; int copies_bt, copies_mm; } forced[] = {
        { { .copy_b = WGML__MM_ON }, true, 1, 0 },
        { { .copy_b = WGML__MM_ON, .splitk = 2 }, true, 1, 0 },
        { { .copy_b = WGML__MM_ON, .tile = WGML__MM_TILE_64 }, true, 1, 0 },
        { { .copy_b = WGML__MM_OFF }, true, 0, 0 },
        { { .copy_a = WGML__MM_ON }, false, 2, 1 },
        { { .copy_a = WGML__MM_ON, .copy_b = WGML__MM_ON }, false, 2, 1 },
        { { .copy_a = WGML__MM_ON, .splitk = 2 }, false, 2, 1 },
        { { .copy_a = WGML__MM_ON, .tile = WGML__MM_TILE_64 }, false, 2, 1 },
        { { .copy_a = WGML__MM_OFF }, false, 0, 0 },
        { { .copy_a = WGML__MM_OFF, .copy_b = WGML__MM_ON }, false, 1, 0 },
    };
    for (size_t v = 0; v < COUNT(forced); v++)
        for (int o = forced[v].bt_only ? 1 : 0; o < 2; o++)
            for (size_t s = 0; s < COUNT(shapes); s++) {
                bool vector = shapes[s].M == 1;
                uint64_t n = 1 + (uint64_t)(vector ? 0 : o == 1 ? forced[v].copies_bt : forced[v].copies_mm) +
                             (forced[v].t.splitk > 1);
                run_mm((mm_case){ .op = o, .M = shapes[s].M, .N = shapes[s].N, .K = shapes[s].K, .ints = s == 1,
                                  .forced = forced[v].t, .commands = n });
            }
    tuning bad = { .copy_a = WGML__MM_ON, .copy_b = WGML__MM_OFF };
    expect_refused(&bad, 1, 2, 2, 2, WGML_ERROR_INVALID_ARGUMENT, "forces copy_a on and copy_b off");
    product(0, 2, 2, 2, false, &bad);   /* matmul needs no copy of b */
}

/* Tunings no product can take: refused with WGML_ERROR_INVALID_ARGUMENT, nothing recorded. */
static void test_bad_tuning(void)
{
    static const tuning bad[] = {
        { .tile = 5 }, { .splitk = 65 }, { .tail_tiles = 2 }, { .tail_slices = 3 }, { .tail_tiles = 1, .tail_slices = 1 },
        { .tail_tiles = 1, .tail_slices = 65 }, { .tail_tiles = 2, .tail_slices = 3, .splitk = 2 }, { .copy_b = 3 },
        { .copy_a = 3 }, { .pad = 3 }, { .krem = 7 }, { .gemv_rows = 2 }, { .gemv_rows = 3 }, { .gemv_rows = 16 },
        { .gemv_wide = 3 }, { .gemv_subgroups = 3 },
    };
    for (size_t v = 0; v < COUNT(bad); v++) expect_refused(&bad[v], (int)(v % 3), 2, 2, 2, WGML_ERROR_INVALID_ARGUMENT,
                                                            "which no product can take");
}

/* ---- the last round ------------------------------------------------------------------------ */

/* The last round split along K, forced on small products: the last n tiles in launch order
   (edge tiles among them) computed in s slices into blocks of a workspace and added into out
   by splitk_reduce_tiles (three commands), with accumulate, exact on integers; impossible
   requests are refused with nothing recorded. The last round's own code is its tile order
   and its stores into the blocks (vec4 where N is a multiple of 4, else scalar), the same in
   every layout: the first shape (vec4 stores, a partial last step of K) runs in all three
   layouts, each other shape (scalar stores; K a multiple of BK or not) in one, in turn, and
   accumulate in the first layout, so that each kernel variant is built once (the loads'
   variants are test_fast_tiles'). */
static void test_last_round(void)
{
    static const shape shapes[] = { { 300, 260, 517 }, { 300, 261, 203 }, { 129, 385, 64 }, { 257, 131, 1000 } };
    static const tuning forced[] = {
        { .tile = WGML__MM_TILE_128, .tail_tiles = 3, .tail_slices = 4 },
        { .tile = WGML__MM_TILE_128, .tail_tiles = 1, .tail_slices = 7 },
        { .tile = WGML__MM_TILE_128, .tail_tiles = 2, .tail_slices = 2 },
        { .tile = WGML__MM_TILE_128, .tail_tiles = 5, .tail_slices = 3, .splitk = 1 },
    };
    for (size_t v = 0; v < COUNT(forced); v++)
        for (size_t s = 0; s < COUNT(shapes); s++)
            for (int o = s == 0 ? 0 : (int)s % 3; o < (s == 0 ? 3 : (int)s % 3 + 1); o++)
                for (int acc = 0; acc < (o == 0 ? 2 : 1); acc++)
                    run_mm((mm_case){ .op = o, .M = shapes[s].M, .N = shapes[s].N, .K = shapes[s].K, .ints = s % 2 == 1,
                                      .acc = acc, .forced = forced[v], .commands = 3 });
    /* as many tail tiles as the product has, or K too short for two slices: refused */
    tuning one = { .tile = WGML__MM_TILE_128, .tail_tiles = 1, .tail_slices = 2 };
    expect_refused(&one, 0, 2, 2, 16, WGML_ERROR_INVALID_ARGUMENT, "last round of 1 tiles in 2 slices; the product has 1");
    expect_refused(&one, 0, 200, 2, 8, WGML_ERROR_INVALID_ARGUMENT, "last round of 1 tiles in 1 slices");
}

/* ---- accumulate ---------------------------------------------------------------------------- */

/* out += A @ B (wgml_matmul_options.accumulate) through every kernel that writes out: the
   gemm's scalar stores (64-tiles) and vec4 stores, both matrix-vector kernels, the split-K
   reduction (the slices themselves stay plain), the transposed copies; exact on integers.
   (The last round and the second pass: test_last_round, test_fast_tiles.) The _with forms
   with NULL or zeroed options equal the plain functions (poisoned out). */
static void test_accumulate(void)
{
    static const shape vectors[] = { { 1, 300, 517 }, { 1, 1000, 1024 }, { 300, 1, 517 }, { 1, 1, 7 } };
    for (int o = 0; o < 3; o++)
        for (size_t s = 0; s < COUNT(vectors); s++)
            run_mm((mm_case){ .op = o, .M = vectors[s].M, .N = vectors[s].N, .K = vectors[s].K, .acc = true });
    /* the store is the same code in every layout from here on (one layout each) */
    static const struct { int op; shape s; bool ints; tuning t; } forced[] = {
        { 0, { 61, 67, 71 }, false, { 0 } },                                     /* gemm, small tile, scalar stores */
        { 2, { 64, 64, 8192 }, true, { 0 } },                                    /* split-K: splitk_reduce adds */
        { 0, { 1, 257, 8195 }, true, { 0 } },                                    /* split-K of gemv_cols4 */
        { 2, { 130, 67, 2053 }, false, { .splitk = 1 } },                        /* the 128-tile unsplit, N odd */
        { 0, { 96, 132, 2048 }, true, { .splitk = 1 } },                         /* and gemm2_v4 */
        { 0, { 65, 1, 36 }, false, { .gemv_rows = 1 } },                         /* gemv_rows, one row */
        { 0, { 1, 77, 50 }, false, { .gemv_wide = WGML__MM_ON } },                /* gemv_cols4, wide */
        { 2, { 1, 77, 50 }, false, { .gemv_subgroups = WGML__MM_OFF } },          /* gemv_cols4, tree sum */
        { 1, { 200, 260, 76 }, true, { .copy_a = WGML__MM_ON, .copy_b = WGML__MM_ON } },
        { 0, { 130, 67, 45 }, false, { .copy_a = WGML__MM_ON } },
    };
    for (size_t v = 0; v < COUNT(forced); v++)
        run_mm((mm_case){ .op = forced[v].op, .M = forced[v].s.M, .N = forced[v].s.N, .K = forced[v].s.K,
                          .ints = forced[v].ints, .acc = true, .forced = forced[v].t });
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
        check_product(z ? "matmul_with zeroed options" : "matmul_with NULL options", got, ref, bound, M * N, K);
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

/* ---- copies kept between calls ------------------------------------------------------------- */

static wgml_tensor *random_matrix(size_t rows, size_t cols)
{
    float *v = th_random(rows * cols, -1, 1);
    wgml_tensor *t = th_tensor(WGML_F32, v, TH_SHAPE(rows, cols));
    free(v);
    return t;
}

/* matmul_bt(x, w, o) with the tuning the caller set: checked against the reference on x's
   and w's current contents; returns the commands it recorded. */
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
    check_product(what, got, ref, bound, M * N, K);
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
    th_eng->tuning.matmul = (tuning){ .copy_a = WGML__MM_ON, .copy_b = WGML__MM_ON };
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
    TH_EXPECT(wgml_tensor_reshape(x, 2, (size_t[]){ M * K / 22, 22 }), WGML_OK);   /* same bytes, K 22 */
    wgml_tensor *w3 = random_matrix(N, 22);
    bt_checked("x reshaped to K 22", th_eng, x, w3, M * K / 22, N, 22);
    th_eng->tuning.matmul = (tuning){ 0 };
    free(xs);
    wgml_tensor_release(x); wgml_tensor_release(w1); wgml_tensor_release(w2); wgml_tensor_release(w3);
}

/* Operands read along M or N whose rows are not whole vec4, through copies with padded
   rows (pad): a of matmul_at (M odd), b of matmul and matmul_at (N odd), each alone and both,
   with a's transposed copy (matmul), split-K, the 64-tiles (full tiles and edges); matmul_bt,
   whose operands are not read along M or N, unchanged; forced off. Then a square x [n, n]
   with n odd, first padded (matmul_at's a), then transposed (matmul's a) into the same
   scratch: the second must not reuse the first's copy. */
static void test_pad_copies(void)
{
    static const shape shapes[] = { { 261, 264, 40 }, { 260, 259, 36 }, { 263, 131, 203 }, { 70, 129, 45 } };
    static const tuning pads[] = {
        { .pad = WGML__MM_ON }, { .pad = WGML__MM_ON, .copy_a = WGML__MM_ON }, { .pad = WGML__MM_ON, .splitk = 2 },
        { .pad = WGML__MM_ON, .tile = WGML__MM_TILE_64 }, { .pad = WGML__MM_ON, .tile = WGML__MM_TILE_64K8 },
        { .pad = WGML__MM_OFF },
    };
    for (size_t v = 0; v < COUNT(pads); v++)
        for (int o = 0; o < 3; o++)
            for (size_t s = 0; s < COUNT(shapes); s++) {
                if (v > 1 && v < 5 && s != (size_t)o) continue;   /* the other tunings: one shape per layout */
                product(o, shapes[s].M, shapes[s].N, shapes[s].K, s % 2 == 0, &pads[v]);
            }
    size_t n = 67, N = 68;
    wgml_tensor *x = random_matrix(n, n), *w = random_matrix(n, N);
    float *xs = th_read(x), *ws = th_read(w);
    for (int o = 2; o >= 0; o -= 2) {   /* matmul_at (a padded), then matmul (a transposed) */
        th_eng->tuning.matmul = o == 2 ? (tuning){ .pad = WGML__MM_ON } : (tuning){ .copy_a = WGML__MM_ON };
        double *ref = th_alloc_d(n * N), *bound = th_alloc_d(n * N);
        ref_matmul(ops[o].layout, xs, ws, n, N, n, ref, bound);
        wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(n, N));
        uint64_t before = th_commands();
        TH_EXPECT(ops[o].with(th_eng, x, w, out, NULL), WGML_OK);
        TH_CHECK(th_commands() - before == 2, "%s of x: %llu commands, want a's copy and the gemm", ops[o].name,
                 (unsigned long long)(th_commands() - before));
        float *got = th_read(out);
        check_product(o == 2 ? "matmul_at of a square x, x padded" : "matmul of the same x, x transposed", got, ref, bound,
                      n * N, n);
        free(got); free(ref); free(bound);
        wgml_tensor_release(out);
    }
    free(xs); free(ws);
    wgml_tensor_release(x); wgml_tensor_release(w);

    /* One a copied for a product with K rows (b aligned: only a padded), then for a product
       where both operands are copied, whose copies carry zero rows up to whole tile steps of
       K: the second must not take the first copy as current, or it reads the rows past K from
       whatever the scratch held, NaN here (a copy of a poisoned tensor made before). */
    th_eng->tuning.matmul = (tuning){ .pad = WGML__MM_ON };
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
                      bound, M * cols, K);
        free(got); free(bs); free(ref); free(bound);
        wgml_tensor_release(b); wgml_tensor_release(o);
    }
    th_eng->tuning.matmul = (tuning){ 0 };
    free(as);
    wgml_tensor_release(a); wgml_tensor_release(nan_a); wgml_tensor_release(nan_b); wgml_tensor_release(nan_o);
}

/* ---- shapes of the tensors ------------------------------------------------------------------ */

/* a's leading dimensions flatten into M (matmul, matmul_bt) or K (matmul_at); out may have
   any shape with M*N elements and last dimension N; 1-D vectors work. */
static void test_leading_dims(void)
{
    /* x [2, 3, 37] @ [37, 29] -> [2, 3, 29]; @ [29, 37]^T -> [6, 29]; the weight gradient
       x [2, 3, 37]^T @ dy [2, 3, 29] -> [37, 29]; decode x [37] @ W^T [29, 37] -> [29] */
    run_mm((mm_case){ .op = 0, .M = 6, .N = 29, .K = 37, .a_shape = { 2, 3, 37 }, .out_shape = { 2, 3, 29 } });
    run_mm((mm_case){ .op = 1, .M = 6, .N = 29, .K = 37, .a_shape = { 2, 3, 37 } });
    run_mm((mm_case){ .op = 2, .M = 37, .N = 29, .K = 6, .a_shape = { 2, 3, 37 }, .b_shape = { 2, 3, 29 } });
    run_mm((mm_case){ .op = 1, .M = 1, .N = 29, .K = 37, .a_shape = { 37 }, .out_shape = { 29 } });
}

/* a and b may be the same tensor: the Gram matrix x x^T, x^T x, and x x for a square x. */
static void test_shared_input(void)
{
    for (int o = 0; o < 3; o++) run_mm((mm_case){ .op = o, .M = 70, .N = 70, .K = 70, .same = true });
}

/* More workgroups than one grid dimension holds: a matrix-vector product over 2.2 million
   columns (68750 workgroups of 32 columns). */
static void test_large_grid(void)
{
    product(0, 1, 2200000, 2, false, NULL);
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
    check_product("chain step 1", g1, h, bound, n * n, n);
    /* step 2 from the GPU's own step-1 values: its inputs are what the kernel read */
    ref_matmul(REF_MM_NT, g1, w, n, n, n, h2, bound);
    check_product("chain step 2", g2, h2, bound, n * n, n);
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
        /* a 16-bit b is a packed weight for matmul and matmul_bt (test_packed.c) */
        TH_EXPECT_ERR(f(th_eng, a, o == 2 ? h : u, O), WGML_ERROR_DTYPE, o == 2 ? "b is f16" : "b is u32");
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
    { "gpu_rules", test_gpu_rules },
    { "variants_scalar", test_variants_scalar },
    { "variants_vec4", test_variants_vec4 },
    { "fast_tiles", test_fast_tiles },
    { "forced_choices", test_forced_choices },
    { "forced_copies", test_forced_copies },
    { "bad_tuning", test_bad_tuning },
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
