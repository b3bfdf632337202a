/* Tensors: creation, dtypes, shapes, host writes at any byte offset, reads, zeroing,
   reshape, limits and bad arguments. */
#include "harness.h"

#include <stdlib.h>
#include <string.h>

static void test_roundtrip_every_dtype(void)
{
    const wgml_dtype dts[] = { WGML_F32, WGML_F16, WGML_BF16, WGML_U32, WGML_U8 };
    const size_t sizes[] = { 1, 2, 3, 5, 17, 1000, 4097 };
    for (size_t d = 0; d < 5; d++)
        for (size_t s = 0; s < 7; s++) {
            size_t n = sizes[s], nb = n * wgml_dtype_size(dts[d]);
            uint8_t *src = malloc(nb), *dst = malloc(nb);
            for (size_t i = 0; i < nb; i++) src[i] = (uint8_t)th_rand_u32();
            wgml_tensor *t = th_tensor(dts[d], src, TH_SHAPE(n));
            TH_CHECK(wgml_tensor_nbytes(t) == nb, "%s nbytes %zu", wgml_dtype_name(dts[d]), wgml_tensor_nbytes(t));
            TH_CHECK(wgml_tensor_dtype(t) == dts[d], "dtype");
            memset(dst, 0, nb);
            TH_EXPECT(wgml_tensor_read(t, 0, dst, nb), WGML_OK);
            TH_CHECK(memcmp(src, dst, nb) == 0, "%s x %zu did not round-trip", wgml_dtype_name(dts[d]), n);
            free(src); free(dst);
            wgml_tensor_release(t);
        }
}

/* Writes and reads at unaligned byte offsets and lengths touch exactly those bytes. */
static void test_unaligned_ranges(void)
{
    enum { N = 37 };
    uint8_t base[N], want[N], got[N], patch[N];
    for (int i = 0; i < N; i++) base[i] = (uint8_t)th_rand_u32();
    wgml_tensor *t = th_tensor(WGML_U8, base, TH_SHAPE(N));
    memcpy(want, base, N);
    for (int trial = 0; trial < 40; trial++) {
        size_t off = th_rand_u32() % N, len = th_rand_u32() % (N - off + 1);
        for (size_t i = 0; i < len; i++) patch[i] = (uint8_t)th_rand_u32();
        TH_EXPECT(wgml_tensor_write(t, off, patch, len), WGML_OK);
        memcpy(want + off, patch, len);
        size_t roff = th_rand_u32() % N, rlen = th_rand_u32() % (N - roff + 1);
        memset(got, 0, N);
        TH_EXPECT(wgml_tensor_read(t, roff, got, rlen), WGML_OK);
        TH_CHECK(memcmp(got, want + roff, rlen) == 0, "read [%zu,+%zu) after write [%zu,+%zu)", roff, rlen, off, len);
    }
    wgml_tensor_release(t);
}

/* A host write lands after the ops called before it (the recorder submits first). */
static void test_write_ordering(void)
{
    float one[3] = { 1, 1, 1 }, ten[3] = { 10, 10, 10 }, got[3];
    wgml_tensor *a = th_tensor(WGML_F32, one, TH_SHAPE(3)), *b = th_tensor(WGML_F32, one, TH_SHAPE(3));
    wgml_tensor *c = th_poisoned(WGML_F32, TH_SHAPE(3));
    TH_EXPECT(wgml_add(th_eng, a, b, c), WGML_OK);   /* recorded, maybe not yet submitted */
    TH_EXPECT(wgml_tensor_write(a, 0, ten, sizeof ten), WGML_OK);
    th_read_into(c, got);
    for (int i = 0; i < 3; i++) TH_CHECK(got[i] == 2, "c[%d] = %g: the write overtook the add", i, got[i]);
    TH_EXPECT(wgml_add(th_eng, a, b, c), WGML_OK);
    th_read_into(c, got);
    for (int i = 0; i < 3; i++) TH_CHECK(got[i] == 11, "c[%d] = %g after the write", i, got[i]);
    wgml_tensor_release(a); wgml_tensor_release(b); wgml_tensor_release(c);
}

static void test_zero_and_reshape(void)
{
    float x[12];
    for (int i = 0; i < 12; i++) x[i] = (float)i + 1;
    wgml_tensor *t = th_tensor(WGML_F32, x, TH_SHAPE(3, 4));
    TH_CHECK(wgml_tensor_ndim(t) == 2 && wgml_tensor_dim(t, 0) == 3 && wgml_tensor_dim(t, 1) == 4 && wgml_tensor_dim(t, 2) == 0,
             "shape");
    TH_EXPECT(wgml_tensor_reshape(t, 3, (size_t[]){ 2, 3, 2 }), WGML_OK);
    TH_CHECK(wgml_tensor_ndim(t) == 3 && wgml_tensor_dim(t, 2) == 2 && wgml_tensor_numel(t) == 12, "reshape");
    TH_EXPECT_ERR(wgml_tensor_reshape(t, 2, (size_t[]){ 5, 2 }), WGML_ERROR_SHAPE, "10 elements");
    TH_EXPECT_ERR(wgml_tensor_reshape(t, 5, (size_t[]){ 1, 1, 1, 1, 12 }), WGML_ERROR_INVALID_ARGUMENT, "ndim");
    TH_EXPECT(wgml_tensor_reshape(NULL, 1, (size_t[]){ 12 }), WGML_ERROR_INVALID_ARGUMENT);
    TH_EXPECT(wgml_tensor_zero(t), WGML_OK);
    float got[12];
    th_read_into(t, got);
    for (int i = 0; i < 12; i++) TH_CHECK(got[i] == 0, "zeroed[%d] = %g", i, got[i]);
    TH_EXPECT(wgml_tensor_zero(NULL), WGML_ERROR_INVALID_ARGUMENT);
    wgml_tensor_release(t);
    wgml_tensor_release(NULL);
}

static void test_bad_arguments(void)
{
    wgml_tensor *t = (wgml_tensor *)&t;
    size_t shape[] = { 4, 4 };
    float x[16] = { 0 };
    TH_EXPECT(wgml_tensor_create(NULL, WGML_F32, 2, shape, &t), WGML_ERROR_INVALID_ARGUMENT);
    TH_EXPECT_ERR(wgml_tensor_create(th_ctx, WGML_F32, 2, shape, NULL), WGML_ERROR_INVALID_ARGUMENT, "out is NULL");
    TH_EXPECT_ERR(wgml_tensor_create(th_ctx, WGML_F32, 2, NULL, &t), WGML_ERROR_INVALID_ARGUMENT, "shape is NULL");
    TH_CHECK(t == NULL, "out not cleared on failure");
    TH_EXPECT_ERR(wgml_tensor_create(th_ctx, WGML_F32, 0, shape, &t), WGML_ERROR_INVALID_ARGUMENT, "ndim is 0");
    TH_EXPECT_ERR(wgml_tensor_create(th_ctx, WGML_F32, 5, (size_t[]){ 1, 1, 1, 1, 1 }, &t), WGML_ERROR_INVALID_ARGUMENT, "ndim is 5");
    TH_EXPECT_ERR(wgml_tensor_create(th_ctx, WGML_F32, 2, (size_t[]){ 4, 0 }, &t), WGML_ERROR_INVALID_ARGUMENT, "shape[1] is 0");
    TH_EXPECT_ERR(wgml_tensor_create(th_ctx, (wgml_dtype)77, 2, shape, &t), WGML_ERROR_INVALID_ARGUMENT, "dtype 77");
    TH_EXPECT_ERR(wgml_tensor_create(th_ctx, WGML_F32, 2, (size_t[]){ SIZE_MAX / 2, 4 }, &t), WGML_ERROR_LIMIT, "overflow");
    TH_EXPECT_ERR(wgml_tensor_create(th_ctx, WGML_F32, 1, (size_t[]){ (size_t)1 << 40 }, &t), WGML_ERROR_LIMIT,
                  "maxStorageBufferBindingSize");
    TH_EXPECT_ERR(wgml_tensor_from_data(th_ctx, WGML_F32, 2, shape, NULL, &t), WGML_ERROR_INVALID_ARGUMENT, "data is NULL");

    wgml_tensor *ok = th_tensor(WGML_F32, x, TH_SHAPE(16));
    TH_EXPECT_ERR(wgml_tensor_write(ok, 60, x, 8), WGML_ERROR_SHAPE, "run past");
    TH_EXPECT_ERR(wgml_tensor_write(ok, SIZE_MAX, x, 8), WGML_ERROR_SHAPE, "run past");
    TH_EXPECT_ERR(wgml_tensor_read(ok, 0, x, 65), WGML_ERROR_SHAPE, "run past");
    TH_EXPECT_ERR(wgml_tensor_read(ok, 0, NULL, 4), WGML_ERROR_INVALID_ARGUMENT, "data is NULL");
    TH_EXPECT(wgml_tensor_write(NULL, 0, x, 4), WGML_ERROR_INVALID_ARGUMENT);
    TH_EXPECT(wgml_tensor_read(ok, 64, x, 0), WGML_OK);
    wgml_tensor_release(ok);
}

static void test_accessors_on_null(void)
{
    TH_CHECK(wgml_tensor_numel(NULL) == 0 && wgml_tensor_nbytes(NULL) == 0 && wgml_tensor_ndim(NULL) == 0 &&
             wgml_tensor_context(NULL) == NULL, "accessors on NULL");
    TH_CHECK(wgml_dtype_size(WGML_BF16) == 2 && wgml_dtype_size((wgml_dtype)9) == 0, "dtype sizes");
    TH_CHECK(strcmp(wgml_dtype_name(WGML_U8), "u8") == 0 && strcmp(wgml_dtype_name(WGML_Q4_K), "q4_k") == 0 &&
             strcmp(wgml_dtype_name(WGML_AFFINE), "affine") == 0 && strcmp(wgml_dtype_name((wgml_dtype)(WGML_AFFINE + 1)), "?") == 0,
             "dtype names");
    TH_CHECK(wgml_dtype_size(WGML_Q8_0) == 0 && wgml_dtype_size(WGML_AFFINE) == 0, "packed dtypes have no element size");
}

static void test_create_release_loop(void)
{
    wgml_context_stats s0, s1;
    wgml_context_stats_get(th_ctx, &s0);
    for (int i = 0; i < 200; i++) {
        wgml_tensor *t;
        TH_EXPECT(wgml_tensor_create(th_ctx, WGML_F32, 1, (size_t[]){ (size_t)(1 + i * 37) }, &t), WGML_OK);
        wgml_tensor_release(t);
    }
    wgml_context_stats_get(th_ctx, &s1);
    TH_CHECK(s1.live_tensors == s0.live_tensors, "live tensors %ld -> %ld", s0.live_tensors, s1.live_tensors);
}

static const th_case cases[] = {
    { "roundtrip_every_dtype", test_roundtrip_every_dtype },
    { "unaligned_ranges", test_unaligned_ranges },
    { "write_ordering", test_write_ordering },
    { "zero_and_reshape", test_zero_and_reshape },
    { "bad_arguments", test_bad_arguments },
    { "accessors_on_null", test_accessors_on_null },
    { "create_release_loop", test_create_release_loop },
};
TH_MAIN(cases)
