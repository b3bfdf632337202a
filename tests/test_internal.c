/* Internals that the public API cannot reach on every adapter: the 2-D grid split used
   when an op needs more workgroups than one dimension allows, and device loss. Linked
   against the static library. */
#include "harness.h"
#include "internal.h"

#include <stdlib.h>
#include <string.h>

static void test_grid_split(void)
{
    uint32_t max = th_ctx->limits.maxComputeWorkgroupsPerDimension;
    const uint64_t counts[] = { 0, 1, 2, max - 1, max, (uint64_t)max + 1, 2ull * max, 2ull * max + 1, 1000ull * max + 7,
                                (uint64_t)max * max };
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        uint32_t gx, gy;
        TH_EXPECT(wgml__grid(th_ctx, counts[i], &gx, &gy), WGML_OK);
        uint64_t want = counts[i] ? counts[i] : 1;
        TH_CHECK(gx <= max && gy <= max && gx >= 1 && gy >= 1, "grid %ux%u for %llu beyond %u", gx, gy, (unsigned long long)counts[i], max);
        TH_CHECK((uint64_t)gx * gy >= want && (uint64_t)gx * (gy - 1) < want, "grid %ux%u does not cover %llu tightly", gx, gy,
                 (unsigned long long)want);
    }
    uint32_t gx, gy;
    TH_EXPECT(wgml__grid(th_ctx, (uint64_t)max * max + 1, &gx, &gy), WGML_ERROR_LIMIT);
}

/* Every workgroup of a 2-D grid runs exactly once: an element-wise op over more vec4s than
   one dimension's workgroups could cover if the kernel ran with WG 256, emulated by a grid
   forced through the kernel with a smaller WG. */
static void test_two_d_grid_dispatch(void)
{
    size_t n = 4u * 64u * 3000u + 5;   /* 3000+ workgroups of 64 */
    float *a = th_random(n, -1, 1), *b = th_random(n, -1, 1);
    wgml_tensor *ta = th_tensor(WGML_F32, a, TH_SHAPE(n)), *tb = th_tensor(WGML_F32, b, TH_SHAPE(n));
    wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(n));
    struct { uint32_t n4, pad[3]; } p = { (uint32_t)((n + 3) / 4), { 0 } };
    wgml__kernel k = { .file = "elementwise", .entry = "binary", .layout = "urrw", .nconst = 3,
                       .constants = { { "OP", 0 }, { "SWAP", 0 }, { "WG", 64 } } };
    wgml__arg args[3] = { wgml__t(ta), wgml__t(tb), wgml__t(out) };
    uint32_t groups = (p.n4 + 63) / 64;
    /* 2-D: 7 columns of rows, the last row partly past the end */
    TH_EXPECT(wgml__dispatch(th_eng, &k, &p, sizeof p, args, 3, 7, (groups + 6) / 7, 1), WGML_OK);
    float *got = th_read(out);
    double *ref = th_alloc_d(n);
    for (size_t i = 0; i < n; i++) ref[i] = (double)a[i] + b[i];
    th_compare("add over a 7-wide 2-D grid", got, ref, n, 0, 1e-6);
    free(a); free(b); free(got); free(ref);
    wgml_tensor_release(ta); wgml_tensor_release(tb); wgml_tensor_release(out);
}

/* A device destroyed under the library: calls report WGML_ERROR_DEVICE with the driver's
   message, and the context still destroys cleanly. */
static void test_device_loss(void)
{
    wgml_context *c;
    wgml_engine *e;
    TH_EXPECT(wgml_context_create(NULL, &c), WGML_OK);
    TH_EXPECT(wgml_engine_create(c, &e), WGML_OK);
    float x[4] = { 1, 2, 3, 4 };
    wgml_tensor *t;
    TH_EXPECT(wgml_tensor_from_data(c, WGML_F32, 1, (size_t[]){ 4 }, x, &t), WGML_OK);
    wgpuDeviceDestroy(c->device);
    wgpuInstanceProcessEvents(c->instance);
    wgml_status s = wgml_add(e, t, t, t);
    TH_CHECK(s == WGML_ERROR_DEVICE, "op after device loss returned %s", wgml_status_string(s));
    TH_CHECK(strstr(wgml_last_error(c), "lost") != NULL, "message: %s", wgml_last_error(c));
    s = wgml_tensor_read(t, 0, x, sizeof x);
    TH_CHECK(s == WGML_ERROR_DEVICE, "read after device loss returned %s", wgml_status_string(s));
    wgml_tensor *t2;
    s = wgml_tensor_create(c, WGML_F32, 1, (size_t[]){ 4 }, &t2);
    TH_CHECK(s == WGML_ERROR_DEVICE && t2 == NULL, "create after device loss returned %s", wgml_status_string(s));
    TH_EXPECT(wgml_context_sync(c), WGML_ERROR_DEVICE);
    wgml_tensor_release(t);
    wgml_engine_destroy(e);
    wgml_context_destroy(c);
}

/* Asking for more memory than the device has is WGML_ERROR_OUT_OF_MEMORY or LIMIT, never
   a crash. */
static void test_out_of_memory(void)
{
    wgml_adapter_info in;
    wgml_context_info(th_ctx, &in);
    wgml_tensor *t;
    size_t n = (size_t)(in.max_storage_buffer_binding_size / 4) + 16;
    wgml_status s = wgml_tensor_create(th_ctx, WGML_F32, 1, &n, &t);
    TH_CHECK(s == WGML_ERROR_LIMIT, "over the binding limit: %s", wgml_status_string(s));
    TH_CHECK(strstr(wgml_last_error(th_ctx), "maxStorageBufferBindingSize") != NULL, "message: %s", wgml_last_error(th_ctx));
}

/* The split-K model's choices on the products it was fitted on (H200, rounds 21 - 22 of
   bench/notes/matmul.md): the 384-tile outputs of the training step unsplit, the 768 x 768
   weight gradient in 7 slices, the larger ones in 4, the LLM shape 2048 x 11008 x 4096 in
   2 where its workspace (2 x 90 MB) fits one binding of the device, else 1. */
static void test_matmul_split_model(void)
{
    uint64_t binding = th_ctx->limits.maxStorageBufferBindingSize;
    static const struct { uint32_t M, N, K, slices; } products[] = {
        { 8192, 768, 768, 1 }, { 8192, 768, 2048, 1 }, { 8192, 2048, 768, 1 }, { 768, 768, 8192, 7 },
        { 768, 2048, 8192, 4 }, { 2048, 768, 8192, 4 }, { 4096, 4096, 4096, 1 }, { 2048, 4096, 11008, 1 },
        { 4096, 11008, 2048, 1 }, { 2048, 11008, 4096, 2 },
    };
    for (size_t i = 0; i < sizeof products / sizeof products[0]; i++) {
        uint64_t ws = 4ull * products[i].slices * products[i].M * products[i].N;
        uint32_t want = ws <= binding ? products[i].slices : 1;
        uint32_t got = wgml__matmul_model_slices(th_ctx, products[i].M, products[i].N, products[i].K);
        TH_CHECK(got == want, "%u x %u x %u: %u K-slices, want %u", products[i].M, products[i].N, products[i].K, got, want);
    }
}

static const th_case cases[] = {
    { "grid_split", test_grid_split },
    { "matmul_split_model", test_matmul_split_model },
    { "two_d_grid_dispatch", test_two_d_grid_dispatch },
    { "device_loss", test_device_loss },
    { "out_of_memory", test_out_of_memory },
};
TH_MAIN(cases)
