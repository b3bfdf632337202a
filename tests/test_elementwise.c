/* add, sub, mul and copy_tensor against the double reference, in place and not, and their
   bad inputs. */
#include "harness.h"
#include "ref.h"

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

static void test_binary_awkward_sizes(void)
{
    for (size_t o = 0; o < 3; o++)
        for (size_t s = 0; s < th_awkward_count; s++) {
            size_t n = th_awkward_sizes[s];
            float *a = th_random(n, -10, 10), *b = th_random(n, -10, 10);
            double *ref = th_alloc_d(n);
            ops[o].ref(a, b, ref, n);
            wgml_tensor *ta = th_tensor(WGML_F32, a, TH_SHAPE(n)), *tb = th_tensor(WGML_F32, b, TH_SHAPE(n));
            wgml_tensor *tout = th_poisoned(WGML_F32, TH_SHAPE(n));
            TH_EXPECT(ops[o].fn(th_eng, ta, tb, tout), WGML_OK);
            float *got = th_read(tout);
            char what[64];
            snprintf(what, sizeof what, "%s n=%zu", ops[o].name, n);
            th_compare(what, got, ref, n, ATOL, RTOL);
            free(a); free(b); free(ref); free(got);
            wgml_tensor_release(ta); wgml_tensor_release(tb); wgml_tensor_release(tout);
        }
}

/* out aliasing a, b, or both: the op works in place with the same results. */
static void test_binary_in_place(void)
{
    size_t n = 1001;
    for (size_t o = 0; o < 3; o++)
        for (int mode = 0; mode < 4; mode++) {
            float *a = th_random(n, -4, 4), *b = th_random(n, -4, 4);
            double *ref = th_alloc_d(n);
            wgml_tensor *ta = th_tensor(WGML_F32, a, TH_SHAPE(n)), *tb = th_tensor(WGML_F32, b, TH_SHAPE(7, 11, 13));
            wgml_tensor *out;
            if (mode == 0) { ops[o].ref(a, b, ref, n); out = ta; TH_EXPECT(ops[o].fn(th_eng, ta, tb, ta), WGML_OK); }
            else if (mode == 1) { ops[o].ref(a, b, ref, n); out = tb; TH_EXPECT(ops[o].fn(th_eng, ta, tb, tb), WGML_OK); }
            else if (mode == 2) { ops[o].ref(a, a, ref, n); out = ta; TH_EXPECT(ops[o].fn(th_eng, ta, ta, ta), WGML_OK); }
            else {
                ops[o].ref(a, a, ref, n);
                out = th_poisoned(WGML_F32, TH_SHAPE(n));
                TH_EXPECT(ops[o].fn(th_eng, ta, ta, out), WGML_OK);
            }
            float *got = th_read(out);
            char what[64];
            snprintf(what, sizeof what, "%s in place, mode %d", ops[o].name, mode);
            th_compare(what, got, ref, n, ATOL, RTOL);
            if (mode == 3) wgml_tensor_release(out);
            free(a); free(b); free(ref); free(got);
            wgml_tensor_release(ta); wgml_tensor_release(tb);
        }
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
    float *a = th_random(n, -1, 1), *b = th_random(n, -1, 1);
    double *ref = th_alloc_d(n);
    ref_mul(a, b, ref, n);
    wgml_tensor *ta = th_tensor(WGML_F32, a, TH_SHAPE(n)), *tb = th_tensor(WGML_F32, b, TH_SHAPE(n));
    wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(n));
    TH_EXPECT(wgml_mul(th_eng, ta, tb, out), WGML_OK);
    float *got = th_read(out);
    th_compare("mul over a 2-D grid", got, ref, n, ATOL, RTOL);
    free(a); free(b); free(ref); free(got);
    wgml_tensor_release(ta); wgml_tensor_release(tb); wgml_tensor_release(out);
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
    TH_EXPECT_ERR(wgml_copy_tensor(th_eng, s, d, 2), WGML_ERROR_INVALID_ARGUMENT, "multiples of 4");
    TH_EXPECT_ERR(wgml_copy_tensor(th_eng, d, d, 0), WGML_ERROR_ALIAS, "same tensor");
    TH_EXPECT_ERR(wgml_copy_tensor(th_eng, NULL, d, 0), WGML_ERROR_INVALID_ARGUMENT, "src is NULL");
    TH_EXPECT_ERR(wgml_copy_tensor(th_eng, s, NULL, 0), WGML_ERROR_INVALID_ARGUMENT, "dst is NULL");
    wgml_tensor *odd = th_tensor(WGML_U8, src, TH_SHAPE(5));
    TH_EXPECT_ERR(wgml_copy_tensor(th_eng, odd, d, 0), WGML_ERROR_INVALID_ARGUMENT, "multiples of 4");
    TH_CHECK(th_commands() == before, "rejected copies recorded commands");
    th_read_into(d, got);
    TH_CHECK(memcmp(got, want, 40) == 0, "a rejected copy changed dst");
    wgml_tensor_release(odd); wgml_tensor_release(s); wgml_tensor_release(d);
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

static const th_case cases[] = {
    { "recycled_tensors", test_recycled_tensors },
    { "copy_tensor_large", test_copy_tensor_large },
    { "binary_awkward_sizes", test_binary_awkward_sizes },
    { "binary_in_place", test_binary_in_place },
    { "dependent_chain", test_dependent_chain },
    { "large_grid", test_large_grid },
    { "binary_bad_inputs", test_binary_bad_inputs },
    { "copy_tensor", test_copy_tensor },
};
TH_MAIN(cases)
