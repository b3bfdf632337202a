/* add, sub, mul and copy_tensor against the double reference, in place and not, and their
   bad inputs. The binary ops' awkward lengths, in-place aliasings and 2-D grid are a table
   of op cases; chains, recycled tensors, fusion and copies are written out by hand. */
#include "harness.h"
#include "ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef wgml_status (*binary_fn)(wgml_engine *, const wgml_tensor *, const wgml_tensor *, wgml_tensor *);
typedef void (*binary_ref)(const float *, const float *, double *, size_t);

static const struct { const char *name; binary_fn fn; binary_ref ref; } ops[] = {
    { "add", wgml_add, ref_add },
    { "sub", wgml_sub, ref_sub },
    { "mul", wgml_mul, ref_mul },
};

/* f32 rounding of one operation: half an ulp relative */
#define RTOL 1e-6
#define ATOL 1e-30

/* ---- the op case table -------------------------------------------------------------- */

/* Where the output of a case lives: a new tensor, or a (b, or both operands) in place.
   An in-place case writes the input's values into its output tensor from the host and runs
   the op on that tensor, so the harness reads and checks the result there. */
enum { OUT_NEW, OUT_IS_A, OUT_IS_B, A_A_IN_PLACE, A_A_NEW };
typedef struct bin_case { int op, where; } bin_case;

static wgml_status load_output(const th_run *r, int i)
{
    return wgml_tensor_write(r->t_out[0], 0, r->in[i], r->n_in[i] * sizeof(float));
}

static wgml_status bin_call(const th_run *r)
{
    const bin_case *p = r->c->params;
    binary_fn fn = ops[p->op].fn;
    wgml_tensor *const *in = r->t_in, *out = r->t_out[0];
    wgml_status s = WGML_OK;
    switch (p->where) {
    case OUT_NEW: return fn(th_eng, in[0], in[1], out);
    case OUT_IS_A: s = load_output(r, 0); return s ? s : fn(th_eng, out, in[1], out);
    case OUT_IS_B: s = load_output(r, 1); return s ? s : fn(th_eng, in[0], out, out);
    case A_A_IN_PLACE: s = load_output(r, 0); return s ? s : fn(th_eng, out, out, out);
    default: return fn(th_eng, in[0], in[0], out);
    }
}

static void bin_reference(const th_run *r)
{
    const bin_case *p = r->c->params;
    bool a_a = p->where == A_A_IN_PLACE || p->where == A_A_NEW;
    ops[p->op].ref(TH_IN(r, 0), TH_IN(r, a_a ? 0 : 1), r->ref[0], r->n_out[0]);
}

static const bin_case bin_cases[3][5] = {
    { { 0, 0 }, { 0, 1 }, { 0, 2 }, { 0, 3 }, { 0, 4 } },
    { { 1, 0 }, { 1, 1 }, { 1, 2 }, { 1, 3 }, { 1, 4 } },
    { { 2, 0 }, { 2, 1 }, { 2, 2 }, { 2, 3 }, { 2, 4 } },
};

/* A case of op o with out at `where`, a of shape a_shape and b of shape b_shape (both n
   elements), inputs in [lo, hi]. */
static void run_bin(size_t o, int where, const size_t *a_shape, const size_t *b_shape, double lo, double hi)
{
    static const char *const where_names[] = { "", " in place (out = a)", " in place (out = b)", " in place (out = a = b)",
                                               " (a = b)" };
    bool a_a = where == A_A_IN_PLACE || where == A_A_NEW;
    th_op_case c = { .nin = a_a ? 1 : 2, .nout = 1, .call = bin_call, .reference = bin_reference, .atol = ATOL, .rtol = RTOL,
                     .params = &bin_cases[o][where] };
    size_t n = 1;
    for (int d = 0; a_shape[d]; d++) n *= a_shape[d];
    c.in[0] = (th_io){ .lo = lo, .hi = hi };
    c.in[1] = (th_io){ .lo = lo, .hi = hi };
    memcpy(c.in[0].shape, a_shape, sizeof c.in[0].shape);
    memcpy(c.in[1].shape, b_shape, sizeof c.in[1].shape);
    memcpy(c.out[0].shape, where == OUT_IS_B ? b_shape : a_shape, sizeof c.out[0].shape);
    snprintf(c.name, sizeof c.name, "%s n=%zu%s", ops[o].name, n, where_names[where]);
    th_run_case(&c);
}

static void test_binary_awkward_sizes(void)
{
    for (size_t o = 0; o < 3; o++)
        for (size_t s = 0; s < th_awkward_count; s++) {
            size_t n = th_awkward_sizes[s];
            run_bin(o, OUT_NEW, (size_t[5]){ n }, (size_t[5]){ n }, -10, 10);
        }
}

/* out aliasing a, b, or both: the op works in place with the same results; a == b with a
   separate out. */
static void test_binary_in_place(void)
{
    for (size_t o = 0; o < 3; o++)
        for (int where = OUT_IS_A; where <= A_A_NEW; where++)
            run_bin(o, where, (size_t[5]){ 1001 }, (size_t[5]){ 7, 11, 13 }, -4, 4);
}

/* A chain of dependent ops sees each result (the batching keeps order). */
static void test_dependent_chain(void)
{
    size_t n = 333;
    float *a = th_random(n, -1, 1), *b = th_random(n, -1, 1);
    double *ref = th_alloc_d(n);
    for (size_t i = 0; i < n; i++) ref[i] = a[i];
    wgml_tensor *acc = th_tensor(WGML_F32, a, TH_SHAPE(n)), *tb = th_tensor(WGML_F32, b, TH_SHAPE(n));
    for (int step = 0; step < 600; step++) {   /* more than one batch */
        TH_EXPECT(wgml_add(th_eng, acc, tb, acc), WGML_OK);
        for (size_t i = 0; i < n; i++) ref[i] = (double)(float)(ref[i] + b[i]);
    }
    float *got = th_read(acc);
    th_compare("600 chained adds", got, ref, n, 1e-6, 1e-6);
    free(a); free(b); free(ref); free(got);
    wgml_tensor_release(acc); wgml_tensor_release(tb);
}

/* More vec4 groups than one dispatch dimension holds (65535 * 256 * 4 elements). */
static void test_large_grid(void)
{
    wgml_adapter_info info;
    wgml_context_info(th_ctx, &info);
    size_t n = (size_t)info.max_workgroups_per_dimension * 256 * 4 + 4 * 1000 + 3;
    if (n * 4 > info.max_storage_buffer_binding_size) n = info.max_storage_buffer_binding_size / 4 - 5;
    run_bin(2, OUT_NEW, (size_t[5]){ n }, (size_t[5]){ n }, -1, 1);
}

static void test_binary_bad_inputs(void)
{
    float x[8] = { 0 };
    wgml_tensor *a = th_tensor(WGML_F32, x, TH_SHAPE(8)), *b7 = th_tensor(WGML_F32, x, TH_SHAPE(7));
    wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(8)), *u = th_tensor(WGML_U32, x, TH_SHAPE(8));
    wgml_context *other;
    TH_EXPECT(wgml_context_create(NULL, &other), WGML_OK);
    wgml_tensor *foreign;
    TH_EXPECT(wgml_tensor_from_data(other, WGML_F32, 1, (size_t[]){ 8 }, x, &foreign), WGML_OK);
    uint64_t before = th_commands();
    for (size_t o = 0; o < 3; o++) {
        TH_EXPECT_ERR(ops[o].fn(NULL, a, a, out), WGML_ERROR_INVALID_ARGUMENT, "engine");
        TH_EXPECT_ERR(ops[o].fn(th_eng, NULL, a, out), WGML_ERROR_INVALID_ARGUMENT, "a is NULL");
        TH_EXPECT_ERR(ops[o].fn(th_eng, a, NULL, out), WGML_ERROR_INVALID_ARGUMENT, "b is NULL");
        TH_EXPECT_ERR(ops[o].fn(th_eng, a, a, NULL), WGML_ERROR_INVALID_ARGUMENT, "out is NULL");
        TH_EXPECT_ERR(ops[o].fn(th_eng, a, b7, out), WGML_ERROR_SHAPE, "b has 7 elements");
        TH_EXPECT_ERR(ops[o].fn(th_eng, a, a, b7), WGML_ERROR_SHAPE, "out has 7 elements");
        TH_EXPECT_ERR(ops[o].fn(th_eng, u, a, out), WGML_ERROR_DTYPE, "a is u32");
        TH_EXPECT_ERR(ops[o].fn(th_eng, a, a, u), WGML_ERROR_DTYPE, "out is u32");
        TH_EXPECT_ERR(ops[o].fn(th_eng, a, foreign, out), WGML_ERROR_CONTEXT, "b belongs to another context");
    }
    TH_CHECK(th_commands() == before, "rejected calls recorded %llu commands", (unsigned long long)(th_commands() - before));
    uint32_t got[8];
    th_read_into(out, got);
    for (int i = 0; i < 8; i++) TH_CHECK(got[i] == 0xFFFFFFFFu, "out[%d] was written by a rejected call", i);
    wgml_tensor_release(foreign);
    wgml_context_destroy(other);
    wgml_tensor_release(a); wgml_tensor_release(b7); wgml_tensor_release(out); wgml_tensor_release(u);
}

static void test_copy_tensor(void)
{
    uint8_t src[12], dst_init[40];
    for (int i = 0; i < 12; i++) src[i] = (uint8_t)th_rand_u32();
    for (int i = 0; i < 40; i++) dst_init[i] = (uint8_t)th_rand_u32();
    wgml_tensor *s = th_tensor(WGML_U8, src, TH_SHAPE(12));
    wgml_tensor *d = th_tensor(WGML_F32, dst_init, TH_SHAPE(10));
    TH_EXPECT(wgml_copy_tensor(th_eng, s, d, 24), WGML_OK);
    uint8_t got[40], want[40];
    memcpy(want, dst_init, 40);
    memcpy(want + 24, src, 12);
    th_read_into(d, got);
    TH_CHECK(memcmp(got, want, 40) == 0, "copy_tensor to offset 24 changed the wrong bytes");
    TH_EXPECT(wgml_copy_tensor(th_eng, s, d, 28), WGML_OK);   /* ends exactly at the end */
    memcpy(want + 28, src, 12);
    th_read_into(d, got);
    TH_CHECK(memcmp(got, want, 40) == 0, "copy_tensor to the very end changed the wrong bytes");

    uint64_t before = th_commands();
    TH_EXPECT_ERR(wgml_copy_tensor(th_eng, s, d, 32), WGML_ERROR_SHAPE, "runs past");
    TH_EXPECT_ERR(wgml_copy_tensor(th_eng, s, d, (size_t)-4), WGML_ERROR_SHAPE, "runs past");
    TH_EXPECT_ERR(wgml_copy_tensor(th_eng, d, d, 0), WGML_ERROR_ALIAS, "same tensor");
    TH_EXPECT_ERR(wgml_copy_tensor(th_eng, NULL, d, 0), WGML_ERROR_INVALID_ARGUMENT, "src is NULL");
    TH_EXPECT_ERR(wgml_copy_tensor(th_eng, s, NULL, 0), WGML_ERROR_INVALID_ARGUMENT, "dst is NULL");
    TH_CHECK(th_commands() == before, "rejected copies recorded commands");
    th_read_into(d, got);
    TH_CHECK(memcmp(got, want, 40) == 0, "a rejected copy changed dst");
    wgml_tensor_release(s); wgml_tensor_release(d);
}

/* Byte copies: every odd source length (u8 and f16 tensors of odd length) to every byte
   offset of a destination whose other bytes must survive, against memcpy. */
static void test_copy_tensor_bytes(void)
{
    enum { DST = 45 };
    uint8_t src[23], init[DST], want[DST], got[DST + 3];
    for (int i = 0; i < 23; i++) src[i] = (uint8_t)th_rand_u32();
    size_t bad = 0, cases = 0;
    for (size_t len = 1; len <= 23; len++) {
        wgml_tensor *s = len % 2 ? th_tensor(WGML_U8, src, TH_SHAPE(len))
                                 : th_tensor(WGML_F16, src, TH_SHAPE(len / 2));
        for (size_t off = 0; off + len <= DST; off++) {
            for (int i = 0; i < DST; i++) init[i] = (uint8_t)th_rand_u32();
            wgml_tensor *d = th_tensor(WGML_U8, init, TH_SHAPE(DST));
            TH_EXPECT(wgml_copy_tensor(th_eng, s, d, off), WGML_OK);
            memcpy(want, init, DST);
            memcpy(want + off, src, len);
            th_read_into(d, got);
            bad += memcmp(got, want, DST) != 0;
            cases++;
            wgml_tensor_release(d);
        }
        wgml_tensor_release(s);
    }
    TH_CHECK(bad == 0, "%zu of %zu byte copies changed the wrong bytes", bad, cases);
}

/* The 16-byte path (offset and size multiples of 16) over a large tensor, and the word
   path over an odd word count, both leaving the bytes outside the range alone. */
static void test_copy_tensor_large(void)
{
    const size_t n_src[] = { (1u << 20) + 4, 4097 };
    const size_t offsets[] = { 64, 12 };
    for (int c = 0; c < 2; c++) {
        size_t n = n_src[c], off = offsets[c], m = n + off / 4 + 5;
        float *s = th_random(n, -1, 1), *d0 = th_random(m, -1, 1);
        wgml_tensor *ts = th_tensor(WGML_F32, s, TH_SHAPE(n)), *td = th_tensor(WGML_F32, d0, TH_SHAPE(m));
        TH_EXPECT(wgml_copy_tensor(th_eng, ts, td, off), WGML_OK);
        float *got = th_read(td);
        size_t bad = 0;
        for (size_t i = 0; i < m; i++) {
            float want = (i >= off / 4 && i < off / 4 + n) ? s[i - off / 4] : d0[i];
            if (memcmp(&got[i], &want, 4)) bad++;
        }
        TH_CHECK(bad == 0, "copy of %zu floats to byte %zu: %zu words wrong", n, off, bad);
        free(s); free(d0); free(got);
        wgml_tensor_release(ts); wgml_tensor_release(td);
    }
}

/* Tensors released and created again (buffer handles get recycled) are bound afresh:
   the bind group cache never hands a new tensor an old buffer. */
static void test_recycled_tensors(void)
{
    for (int round = 0; round < 60; round++) {
        size_t n = 5 + (size_t)round % 7;
        float *a = th_random(n, -1, 1), *b = th_random(n, -1, 1);
        double *ref = th_alloc_d(n);
        ref_add(a, b, ref, n);
        wgml_tensor *ta = th_tensor(WGML_F32, a, TH_SHAPE(n)), *tb = th_tensor(WGML_F32, b, TH_SHAPE(n));
        wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(n));
        TH_EXPECT(wgml_add(th_eng, ta, tb, out), WGML_OK);
        if (round % 3 == 0) TH_EXPECT(wgml_add(th_eng, ta, tb, out), WGML_OK);   /* a cache hit */
        float *got = th_read(out);
        th_compare("add on recycled tensors", got, ref, n, ATOL, RTOL);
        free(a); free(b); free(ref); free(got);
        wgml_tensor_release(round % 2 ? ta : tb);
        wgml_tensor_release(out);
        wgml_tensor_release(round % 2 ? tb : ta);
    }
}

/* ---- fusion: random programs of add, sub and mul, with everything else in between ---- */

/* Small element-wise ops wait in a group recorded as one dispatch (src/ops/elementwise.c).
   A program is run three ways: on the host, one f32 rounding per op; on the test context
   (fusion on, the default); and on a context made with WGML_FUSE=0 (one dispatch per op).
   All three must agree exactly. The
   steps between the ops make the group flush at every point the library promises: another
   kernel reading and writing its tensors (relu), a read, a write from the host, a clear, an
   explicit flush, and the release of a tensor the group binds (made again from new data). */
enum { P_TENSORS = 6, P_STEPS = 240 };
enum { S_OP, S_READ, S_WRITE, S_RELU, S_ZERO, S_FLUSH, S_REMAKE };
typedef struct step { int kind, op, a, b, out; float *data; } step;
typedef struct prog_run { float *t[P_TENSORS]; float *reads[P_STEPS]; } prog_run;

static float host_apply(int op, float x, float y) { return op == 0 ? x + y : op == 1 ? x - y : x * y; }

/* Runs prog on c/e (or on the host when c is NULL) from init; fills r. */
static void run_program(wgml_context *c, wgml_engine *e, const step *prog, size_t n, float *const init[P_TENSORS], prog_run *r)
{
    wgml_tensor *t[P_TENSORS] = { 0 };
    for (int k = 0; k < P_TENSORS; k++) {
        r->t[k] = th_alloc_f(n);
        memcpy(r->t[k], init[k], n * sizeof(float));
        if (c) TH_EXPECT(wgml_tensor_from_data(c, WGML_F32, 1, &n, init[k], &t[k]), WGML_OK);
    }
    for (int s = 0; s < P_STEPS; s++) {
        const step *p = &prog[s];
        r->reads[s] = NULL;
        if (!c) {
            float *o = r->t[p->out], *a = r->t[p->a], *b = r->t[p->b];
            switch (p->kind) {
            case S_OP: for (size_t i = 0; i < n; i++) o[i] = host_apply(p->op, a[i], b[i]); break;
            case S_READ: r->reads[s] = th_alloc_f(n); memcpy(r->reads[s], o, n * sizeof(float)); break;
            case S_WRITE: case S_REMAKE: memcpy(o, p->data, n * sizeof(float)); break;
            case S_RELU: for (size_t i = 0; i < n; i++) o[i] = o[i] > 0 ? o[i] : 0.0f; break;
            case S_ZERO: memset(o, 0, n * sizeof(float)); break;
            default: break;
            }
            continue;
        }
        switch (p->kind) {
        case S_OP: {
            wgml_status (*fn[3])(wgml_engine *, const wgml_tensor *, const wgml_tensor *, wgml_tensor *) = { wgml_add, wgml_sub, wgml_mul };
            TH_EXPECT(fn[p->op](e, t[p->a], t[p->b], t[p->out]), WGML_OK);
            break;
        }
        case S_READ: r->reads[s] = th_alloc_f(n); TH_EXPECT(wgml_tensor_read(t[p->out], 0, r->reads[s], n * sizeof(float)), WGML_OK); break;
        case S_WRITE: TH_EXPECT(wgml_tensor_write(t[p->out], 0, p->data, n * sizeof(float)), WGML_OK); break;
        case S_RELU: TH_EXPECT(wgml_relu(e, t[p->out], t[p->out]), WGML_OK); break;
        case S_ZERO: TH_EXPECT(wgml_tensor_zero(t[p->out]), WGML_OK); break;
        case S_FLUSH: TH_EXPECT(wgml_context_flush(c), WGML_OK); break;
        case S_REMAKE:
            wgml_tensor_release(t[p->out]);
            TH_EXPECT(wgml_tensor_from_data(c, WGML_F32, 1, &n, p->data, &t[p->out]), WGML_OK);
            break;
        }
    }
    for (int k = 0; k < P_TENSORS; k++) {
        if (c) TH_EXPECT(wgml_tensor_read(t[k], 0, r->t[k], n * sizeof(float)), WGML_OK);
        wgml_tensor_release(t[k]);
    }
}

/* Values of got that differ from want's (the programs keep every value normal, so each op
   is one correctly rounded f32 operation everywhere: the comparison is exact). */
static size_t mismatches(const float *got, const float *want, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += got[i] != want[i];
    return bad;
}

static void free_run(prog_run *r)
{
    for (int k = 0; k < P_TENSORS; k++) free(r->t[k]);
    for (int s = 0; s < P_STEPS; s++) free(r->reads[s]);
}

/* A random program whose values stay normal and finite: WGSL lets a compiler assume no
   infinities or NaNs (lavapipe folds x - x to 0 even for x = inf), so an op that would take
   a value beyond 1e4 in magnitude, or a nonzero one below 1e-20, is drawn again. */
static void generate_program(step *prog, size_t n, float *const init[P_TENSORS])
{
    float *v[P_TENSORS], *tmp = th_alloc_f(n);
    for (int k = 0; k < P_TENSORS; k++) {
        v[k] = th_alloc_f(n);
        memcpy(v[k], init[k], n * sizeof(float));
    }
    for (int s = 0; s < P_STEPS; s++) {
        step *p = &prog[s];
        for (;;) {
            uint32_t u = th_rand_u32() % 100;
            *p = (step){ .kind = u < 86 ? S_OP : u < 89 ? S_READ : u < 91 ? S_WRITE : u < 93 ? S_RELU : u < 95 ? S_ZERO
                                        : u < 97 ? S_FLUSH : S_REMAKE,
                         .op = (int)(th_rand_u32() % 3), .a = (int)(th_rand_u32() % P_TENSORS),
                         .b = (int)(th_rand_u32() % P_TENSORS), .out = (int)(th_rand_u32() % P_TENSORS) };
            if (p->kind != S_OP) break;
            bool ok = true;
            for (size_t i = 0; i < n && ok; i++) {
                tmp[i] = host_apply(p->op, v[p->a][i], v[p->b][i]);
                float m = fabsf(tmp[i]);
                ok = m <= 1e4f && (m == 0 || m >= 1e-20f);
            }
            if (!ok) continue;
            memcpy(v[p->out], tmp, n * sizeof(float));
            break;
        }
        if (p->kind == S_WRITE || p->kind == S_REMAKE) {
            p->data = th_random(n, -2, 2);
            memcpy(v[p->out], p->data, n * sizeof(float));
        } else if (p->kind == S_RELU) {
            for (size_t i = 0; i < n; i++) v[p->out][i] = v[p->out][i] > 0 ? v[p->out][i] : 0.0f;
        } else if (p->kind == S_ZERO) {
            memset(v[p->out], 0, n * sizeof(float));
        }
    }
    for (int k = 0; k < P_TENSORS; k++) free(v[k]);
    free(tmp);
}

static void test_fused_programs(void)
{
    setenv("WGML_FUSE", "0", 1);
    wgml_context *plain = NULL;
    wgml_engine *plain_eng = NULL;
    TH_EXPECT(wgml_context_create(NULL, &plain), WGML_OK);
    unsetenv("WGML_FUSE");
    if (plain) TH_EXPECT(wgml_engine_create(plain, &plain_eng), WGML_OK);
    if (!plain_eng) { wgml_context_destroy(plain); return; }
    /* 2^20 is the largest count fused (2^18 vec4), 2^20 + 1 the smallest recorded at once */
    const size_t sizes[] = { 1, 6, 1001, 4099, 1u << 20, (1u << 20) + 1 };
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
        size_t n = sizes[z];
        float *init[P_TENSORS];
        for (int k = 0; k < P_TENSORS; k++) init[k] = th_random(n, -2, 2);
        step prog[P_STEPS];
        generate_program(prog, n, init);
        prog_run host, fused, unfused;
        run_program(NULL, NULL, prog, n, init, &host);
        run_program(th_ctx, th_eng, prog, n, init, &fused);
        run_program(plain, plain_eng, prog, n, init, &unfused);
        for (int k = 0; k < P_TENSORS; k++) {
            TH_CHECK(mismatches(fused.t[k], unfused.t[k], n) == 0, "n=%zu: tensor %d: %zu values differ between fused and "
                     "unfused", n, k, mismatches(fused.t[k], unfused.t[k], n));
            TH_CHECK(mismatches(fused.t[k], host.t[k], n) == 0, "n=%zu: tensor %d: %zu values differ from the host", n, k,
                     mismatches(fused.t[k], host.t[k], n));
        }
        for (int s = 0; s < P_STEPS; s++) {
            if (!host.reads[s]) continue;
            TH_CHECK(mismatches(fused.reads[s], unfused.reads[s], n) == 0 && mismatches(fused.reads[s], host.reads[s], n) == 0,
                     "n=%zu: the read at step %d differs", n, s);
        }
        free_run(&host); free_run(&fused); free_run(&unfused);
        for (int k = 0; k < P_TENSORS; k++) free(init[k]);
        for (int s = 0; s < P_STEPS; s++) free(prog[s].data);
    }
    wgml_engine_destroy(plain_eng);
    wgml_context_destroy(plain);
}

/* A group still pending when its engine is destroyed is recorded first: the results reach
   the tensors, read through another engine; nothing leaks. */
static void test_fused_engine_destroyed(void)
{
    size_t n = 77;
    float *a = th_random(n, -1, 1), *b = th_random(n, -1, 1);
    double *ref = th_alloc_d(n);
    for (size_t i = 0; i < n; i++) ref[i] = (double)((a[i] + b[i]) * b[i] - a[i]);
    wgml_context_stats s0, s1;
    wgml_context_stats_get(th_ctx, &s0);
    wgml_engine *e;
    TH_EXPECT(wgml_engine_create(th_ctx, &e), WGML_OK);
    wgml_tensor *ta = th_tensor(WGML_F32, a, TH_SHAPE(n)), *tb = th_tensor(WGML_F32, b, TH_SHAPE(n));
    wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(n));
    TH_EXPECT(wgml_add(e, ta, tb, out), WGML_OK);
    TH_EXPECT(wgml_mul(e, out, tb, out), WGML_OK);
    TH_EXPECT(wgml_sub(e, out, ta, out), WGML_OK);
    wgml_engine_destroy(e);
    float *got = th_read(out);
    th_compare("a group pending when its engine was destroyed", got, ref, n, ATOL, RTOL);
    free(a); free(b); free(ref); free(got);
    wgml_tensor_release(ta); wgml_tensor_release(tb); wgml_tensor_release(out);
    wgml_context_stats_get(th_ctx, &s1);
    TH_CHECK(s1.live_tensors == s0.live_tensors && s1.live_engines == s0.live_engines, "%+ld tensors, %+ld engines after",
             s1.live_tensors - s0.live_tensors, s1.live_engines - s0.live_engines);
}

static const th_case cases[] = {
    { "fused_programs", test_fused_programs },
    { "fused_engine_destroyed", test_fused_engine_destroyed },
    { "recycled_tensors", test_recycled_tensors },
    { "copy_tensor_large", test_copy_tensor_large },
    { "binary_awkward_sizes", test_binary_awkward_sizes },
    { "binary_in_place", test_binary_in_place },
    { "dependent_chain", test_dependent_chain },
    { "large_grid", test_large_grid },
    { "binary_bad_inputs", test_binary_bad_inputs },
    { "copy_tensor", test_copy_tensor },
    { "copy_tensor_bytes", test_copy_tensor_bytes },
};
TH_MAIN(cases)
