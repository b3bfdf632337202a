/* Context creation, adapter choice, info, flush/sync, counters, and error routing. */
#include "harness.h"
#include "internal.h"
#include "webgpu_abi.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_info(void)
{
    wgml_adapter_info in;
    TH_EXPECT(wgml_context_info(th_ctx, &in), WGML_OK);
    TH_CHECK(in.name[0] != 0, "adapter name is empty");
    TH_CHECK(in.backend && strcmp(in.backend, "unknown") != 0, "backend unknown");
    TH_CHECK(in.max_storage_buffer_binding_size >= 128u << 20, "binding size %llu below WebGPU's minimum",
             (unsigned long long)in.max_storage_buffer_binding_size);
    TH_CHECK(in.max_workgroups_per_dimension >= 65535, "grid limit %u", in.max_workgroups_per_dimension);
    if (in.subgroups)
        TH_CHECK(in.subgroup_min_size >= 4 && in.subgroup_max_size <= 128 && in.subgroup_min_size <= in.subgroup_max_size,
                 "subgroup sizes %u..%u", in.subgroup_min_size, in.subgroup_max_size);
    TH_EXPECT_ERR(wgml_context_info(th_ctx, NULL), WGML_ERROR_INVALID_ARGUMENT, "info is NULL");
    TH_EXPECT(wgml_context_info(NULL, &in), WGML_ERROR_INVALID_ARGUMENT);
}

static void test_create_bad_arguments(void)
{
    TH_EXPECT(wgml_context_create(NULL, NULL), WGML_ERROR_INVALID_ARGUMENT);
    TH_CHECK(strstr(wgml_last_error(NULL), "out is NULL") != NULL, "message: %s", wgml_last_error(NULL));
    wgml_context *c = (wgml_context *)&c;
    TH_EXPECT(wgml_context_create(&(wgml_context_desc){ .backend = "glide" }, &c), WGML_ERROR_INVALID_ARGUMENT);
    TH_CHECK(c == NULL, "out not cleared on failure");
    TH_CHECK(strstr(wgml_last_error(NULL), "glide") != NULL, "message: %s", wgml_last_error(NULL));
    TH_EXPECT(wgml_context_create(&(wgml_context_desc){ .adapter = "no such adapter 3dfx" }, &c), WGML_ERROR_NO_ADAPTER);
    TH_CHECK(strstr(wgml_last_error(NULL), "adapters found") != NULL, "message: %s", wgml_last_error(NULL));
}

static void test_choose_by_name(void)
{
    wgml_adapter_info in;
    wgml_context_info(th_ctx, &in);
    char part[8] = { 0 };
    memcpy(part, in.name, strlen(in.name) < 5 ? strlen(in.name) : 5);
    wgml_context *c;
    TH_EXPECT(wgml_context_create(&(wgml_context_desc){ .adapter = part, .backend = in.backend }, &c), WGML_OK);
    wgml_adapter_info in2;
    wgml_context_info(c, &in2);
    TH_CHECK(strstr(in2.name, part) != NULL, "asked for \"%s\", got \"%s\"", part, in2.name);
    wgml_context_destroy(c);
}

static void test_env_override(void)
{
    setenv("WGML_ADAPTER", "no such adapter 3dfx", 1);
    wgml_context *c;
    TH_EXPECT(wgml_context_create(NULL, &c), WGML_ERROR_NO_ADAPTER);
    wgml_adapter_info in;
    wgml_context_info(th_ctx, &in);
    /* the descriptor wins over the environment */
    TH_EXPECT(wgml_context_create(&(wgml_context_desc){ .adapter = in.name }, &c), WGML_OK);
    wgml_context_destroy(c);
    unsetenv("WGML_ADAPTER");
}

static bool contains_icase(const char *hay, const char *needle)
{
    for (; *hay; hay++) {
        size_t i = 0;
        while (needle[i] && tolower((unsigned char)hay[i]) == tolower((unsigned char)needle[i])) i++;
        if (!needle[i]) return true;
    }
    return !*needle;
}

/* wgml_adapter_list: the order of device indices, whose first entry (among those
   $WGML_ADAPTER leaves) is the adapter a default context gets; cap bounds what is
   written, never the count; a backend filter keeps a subset. */
static void test_adapter_list(void)
{
    wgml_adapter_info in;
    wgml_context_info(th_ctx, &in);
    uint32_t n = 0, n_cap0 = 0, n_all = 0;
    wgml_adapter_info list[8];
    const char *env_backend = getenv("WGML_BACKEND"), *env_adapter = getenv("WGML_ADAPTER");
    TH_EXPECT(wgml_adapter_list(NULL, NULL, 0, &n_all), WGML_OK);
    TH_EXPECT(wgml_adapter_list(env_backend, NULL, 0, &n_cap0), WGML_OK);
    TH_EXPECT(wgml_adapter_list(env_backend, list, 8, &n), WGML_OK);
    TH_CHECK(n >= 1 && n <= 8 && n == n_cap0, "%u adapters, %u with cap 0", n, n_cap0);
    uint32_t first = n;
    for (uint32_t i = 0; i < n && i < 8; i++) {
        TH_CHECK(list[i].name[0] && list[i].backend && list[i].type, "entry %u: name \"%s\"", i, list[i].name);
        TH_CHECK(list[i].max_buffer_size == 0 && list[i].subgroup_max_size == 0 && !list[i].shader_f16,
                 "entry %u has device fields set", i);
        if (first == n && (!env_adapter || contains_icase(list[i].name, env_adapter) || contains_icase(list[i].driver, env_adapter)))
            first = i;
    }
    TH_CHECK(first < n && strcmp(list[first].name, in.name) == 0 && strcmp(list[first].backend, in.backend) == 0,
             "the default context has \"%s\" (%s), the list's first is \"%s\"", in.name, in.backend,
             first < n ? list[first].name : "(none)");
    /* cap below the count: the count stays whole, nothing past cap is written */
    memset(list, 0x5a, sizeof list);
    uint32_t m = 0;
    TH_EXPECT(wgml_adapter_list(env_backend, list, n - 1, &m), WGML_OK);
    TH_CHECK(m == n, "cap %u: count %u, want %u", n - 1, m, n);
    TH_CHECK(list[n - 1].name[0] == 0x5a && list[n - 1].name[1] == 0x5a, "entry %u written past cap %u", n - 1, n - 1);
    if (n >= 2) TH_CHECK(list[0].name[0] && list[0].name[0] != 0x5a, "entry 0 not written with cap %u", n - 1);
    /* the default adapter's backend keeps it */
    TH_EXPECT(wgml_adapter_list(in.backend, list, 8, &m), WGML_OK);
    TH_CHECK(m >= 1 && m <= n_all, "%u adapters on %s, %u on all backends", m, in.backend, n_all);
    bool seen = false;
    for (uint32_t i = 0; i < m && i < 8; i++) {
        TH_CHECK(strcmp(list[i].backend, in.backend) == 0, "backend filter %s let %s through", in.backend, list[i].backend);
        seen = seen || strcmp(list[i].name, in.name) == 0;
    }
    TH_CHECK(seen, "\"%s\" missing from the %s list", in.name, in.backend);
    /* misuse */
    m = 77;
    TH_EXPECT_ERR(wgml_adapter_list(NULL, list, 1, NULL), WGML_ERROR_INVALID_ARGUMENT, "count is NULL");
    TH_EXPECT_ERR(wgml_adapter_list(NULL, NULL, 1, &m), WGML_ERROR_INVALID_ARGUMENT, "out is NULL");
    TH_EXPECT_ERR(wgml_adapter_list("glide", list, 8, &m), WGML_ERROR_INVALID_ARGUMENT, "glide");
    TH_CHECK(m == 0, "count %u after an error", m);
}

/* Dawn's enumeration (src/webgpu_enum.c), which makes two identical GPUs two entries of
   the adapter list: live on this runtime (not the fallback), the context's adapter among
   what it returns, one reference per adapter returned (released here without a fault),
   cap respected. */
static void test_enumeration(void)
{
    wgml_adapter_info in;
    wgml_context_info(th_ctx, &in);
    WGPURequestAdapterOptions all = { .featureLevel = WGPUFeatureLevel_Core };
    WGPUAdapter got[8];
    int n = wgml__enumerate_adapters(th_ctx->instance, &all, got, 8);
    TH_CHECK(n >= 1, "the runtime's enumeration returned %d adapters", n);
    bool found = false;
    for (int i = 0; i < n; i++) {
        WGPUAdapterInfo ai = { 0 };
        TH_CHECK(wgpuAdapterGetInfo(got[i], &ai) == WGPUStatus_Success, "adapter %d has no info", i);
        found = found || (ai.device.data && strlen(in.name) == ai.device.length &&
                          memcmp(in.name, ai.device.data, ai.device.length) == 0);
        wgpuAdapterInfoFreeMembers(ai);
        wgpuAdapterRelease(got[i]);
    }
    TH_CHECK(found, "the context's adapter \"%s\" is not among the %d enumerated", in.name, n);
    WGPUAdapter one[1];
    int m = wgml__enumerate_adapters(th_ctx->instance, &all, one, 1);
    TH_CHECK(m == 1, "with room for 1 the enumeration kept %d", m);
    if (m == 1) wgpuAdapterRelease(one[0]);
    TH_CHECK(wgml__enumerate_adapters(NULL, &all, one, 1) == -1, "a NULL instance was enumerated");
}

/* device_index picks from the list: 0 is the default, one past the end names what there
   is; $WGML_DEVICE does the same unless the descriptor asks, and must be a decimal index. */
static void test_device_index(void)
{
    wgml_adapter_info in, in2;
    wgml_context_info(th_ctx, &in);
    uint32_t n = 0;
    TH_EXPECT(wgml_adapter_list(NULL, NULL, 0, &n), WGML_OK);
    char *saved = getenv("WGML_DEVICE") ? strdup(getenv("WGML_DEVICE")) : NULL;
    unsetenv("WGML_DEVICE");
    wgml_context *c = NULL;
    TH_EXPECT(wgml_context_create(&(wgml_context_desc){ .use_device_index = true, .device_index = 0 }, &c), WGML_OK);
    if (c) {
        wgml_context_info(c, &in2);
        TH_CHECK(strcmp(in.name, in2.name) == 0 && strcmp(in.backend, in2.backend) == 0,
                 "device index 0 gave \"%s\" (%s), the default \"%s\" (%s)", in2.name, in2.backend, in.name, in.backend);
    }
    wgml_context_destroy(c);
    c = (wgml_context *)&c;
    TH_EXPECT_ERR(wgml_context_create(&(wgml_context_desc){ .use_device_index = true, .device_index = n }, &c),
                  WGML_ERROR_NO_ADAPTER, "adapters found: \"");
    TH_CHECK(c == NULL, "*out not NULL");
    char want[32];
    snprintf(want, sizeof want, "device index %u", n);
    TH_CHECK(strstr(wgml_last_error(NULL), want) && strstr(wgml_last_error(NULL), in.name), "message: %s", wgml_last_error(NULL));

    setenv("WGML_DEVICE", "0", 1);
    c = NULL;
    TH_EXPECT(wgml_context_create(NULL, &c), WGML_OK);
    if (c) {
        wgml_context_info(c, &in2);
        TH_CHECK(strcmp(in.name, in2.name) == 0, "WGML_DEVICE=0 gave \"%s\", the default \"%s\"", in2.name, in.name);
    }
    wgml_context_destroy(c);
    setenv("WGML_DEVICE", "99", 1);
    TH_EXPECT_ERR(wgml_context_create(NULL, &c), WGML_ERROR_NO_ADAPTER, "device index 99 (from WGML_DEVICE)");
    c = NULL;
    TH_EXPECT(wgml_context_create(&(wgml_context_desc){ .use_device_index = true }, &c), WGML_OK);   /* the descriptor wins */
    wgml_context_destroy(c);
    const char *bad[] = { "x", "-1", "", "1x", " 0", "+0", "4294967296" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("WGML_DEVICE", bad[i], 1);
        c = (wgml_context *)&c;
        TH_EXPECT_ERR(wgml_context_create(NULL, &c), WGML_ERROR_INVALID_ARGUMENT, "WGML_DEVICE");
        TH_CHECK(c == NULL, "WGML_DEVICE=\"%s\": *out not NULL", bad[i]);
    }
    if (saved) setenv("WGML_DEVICE", saved, 1);
    else unsetenv("WGML_DEVICE");
    free(saved);
}

static void test_robust_and_submit_every_op(void)
{
    wgml_context *c;
    wgml_adapter_info in;
    TH_EXPECT(wgml_context_create(NULL, &c), WGML_OK);   /* robustness is off by default */
    wgml_context_info(c, &in);
    TH_CHECK(!in.robust, "a default context reports robust");
    wgml_context_destroy(c);
    setenv("WGML_ROBUST", "1", 1);                       /* ... and on through the environment */
    TH_EXPECT(wgml_context_create(NULL, &c), WGML_OK);
    wgml_context_info(c, &in);
    TH_CHECK(in.robust, "WGML_ROBUST=1 not reported");
    wgml_context_destroy(c);
    unsetenv("WGML_ROBUST");
    TH_EXPECT(wgml_context_create(&(wgml_context_desc){ .robust = true, .submit_every_op = true }, &c), WGML_OK);
    wgml_context_info(c, &in);
    TH_CHECK(in.robust, "robust not reported");
    wgml_engine *e;
    TH_EXPECT(wgml_engine_create(c, &e), WGML_OK);
    float x[5] = { 1, 2, 3, 4, 5 }, y[5];
    wgml_tensor *t;
    TH_EXPECT(wgml_tensor_from_data(c, WGML_F32, 1, (size_t[]){ 5 }, x, &t), WGML_OK);
    wgml_context_stats s0, s1;
    wgml_context_stats_get(c, &s0);
    TH_EXPECT(wgml_add(e, t, t, t), WGML_OK);
    TH_EXPECT(wgml_add(e, t, t, t), WGML_OK);
    wgml_context_stats_get(c, &s1);
    TH_CHECK(s1.submits - s0.submits == 2, "submit_every_op: %llu submits for 2 ops", (unsigned long long)(s1.submits - s0.submits));
    TH_EXPECT(wgml_tensor_read(t, 0, y, sizeof y), WGML_OK);
    for (int i = 0; i < 5; i++) TH_CHECK(y[i] == 4 * x[i], "y[%d] = %g", i, y[i]);
    wgml_tensor_release(t);
    wgml_engine_destroy(e);
    wgml_context_destroy(c);
}

static void test_batching_and_sync(void)
{
    float x[4] = { 1, 2, 3, 4 };
    wgml_tensor *t = th_tensor(WGML_F32, x, TH_SHAPE(4));
    TH_EXPECT(wgml_context_sync(th_ctx), WGML_OK);
    wgml_context_stats s0, s1;
    wgml_context_stats_get(th_ctx, &s0);
    for (int i = 0; i < 10; i++) TH_EXPECT(wgml_add(th_eng, t, t, t), WGML_OK);
    wgml_context_stats_get(th_ctx, &s1);
    TH_CHECK(s1.commands - s0.commands == 10, "10 ops recorded %llu commands", (unsigned long long)(s1.commands - s0.commands));
    TH_CHECK(s1.submits == s0.submits, "batched ops submitted early");
    TH_EXPECT(wgml_context_flush(th_ctx), WGML_OK);
    wgml_context_stats_get(th_ctx, &s1);
    TH_CHECK(s1.submits == s0.submits + 1, "flush did not submit once");
    TH_EXPECT(wgml_context_sync(th_ctx), WGML_OK);
    TH_EXPECT(wgml_context_flush(NULL), WGML_ERROR_INVALID_ARGUMENT);
    TH_EXPECT(wgml_context_sync(NULL), WGML_ERROR_INVALID_ARGUMENT);
    float y[4];
    TH_EXPECT(wgml_tensor_read(t, 0, y, sizeof y), WGML_OK);
    for (int i = 0; i < 4; i++) TH_CHECK(y[i] == x[i] * 1024, "y[%d] = %g", i, y[i]);
    wgml_tensor_release(t);
}

/* Fences: numbered in order, each submits what was recorded, and the device finishes
   them in order; more than the 64 that may be pending still work (the oldest is waited
   for). A fence is done only once the work before it is: the values read after waiting
   on it without a sync are the finished ones. */
static void test_fences(void)
{
    float x[4] = { 1, 2, 3, 4 };
    wgml_tensor *t = th_tensor(WGML_F32, x, TH_SHAPE(4));
    uint64_t f0 = 0, f1 = 0, f2 = 0;
    bool done = false;
    TH_EXPECT(wgml_context_fence(th_ctx, &f0), WGML_OK);
    wgml_context_stats s0, s1;
    wgml_context_stats_get(th_ctx, &s0);
    for (int i = 0; i < 10; i++) TH_EXPECT(wgml_add(th_eng, t, t, t), WGML_OK);
    TH_EXPECT(wgml_context_fence(th_ctx, &f1), WGML_OK);
    wgml_context_stats_get(th_ctx, &s1);
    TH_CHECK(s1.submits == s0.submits + 1, "a fence submitted %llu times", (unsigned long long)(s1.submits - s0.submits));
    TH_EXPECT(wgml_context_fence(th_ctx, &f2), WGML_OK);
    TH_CHECK(f1 == f0 + 1 && f2 == f1 + 1, "fences %llu %llu %llu are not consecutive", (unsigned long long)f0,
             (unsigned long long)f1, (unsigned long long)f2);
    TH_EXPECT(wgml_context_fence_wait(th_ctx, f2, 60000, &done), WGML_OK);
    TH_CHECK(done, "the last fence did not finish within a minute");
    done = false;
    TH_EXPECT(wgml_context_fence_wait(th_ctx, f1, 0, &done), WGML_OK);
    TH_CHECK(done, "an earlier fence is not done after a later one");
    float y[4];
    TH_EXPECT(wgml_tensor_read(t, 0, y, sizeof y), WGML_OK);
    for (int i = 0; i < 4; i++) TH_CHECK(y[i] == x[i] * 1024, "y[%d] = %g", i, y[i]);
    uint64_t last = f2, f = 0;
    for (int i = 0; i < 70; i++) {
        TH_EXPECT(wgml_add(th_eng, t, t, t), WGML_OK);
        TH_EXPECT(wgml_context_fence(th_ctx, &f), WGML_OK);
        TH_CHECK(f == last + 1, "fence %llu after %llu", (unsigned long long)f, (unsigned long long)last);
        last = f;
    }
    done = false;
    TH_EXPECT(wgml_context_fence_wait(th_ctx, f2 + 1, 0, &done), WGML_OK);
    TH_CHECK(done, "the oldest of 70 fences is not done after the 65th was issued");
    TH_EXPECT(wgml_context_fence_wait(th_ctx, last, 60000, &done), WGML_OK);
    TH_CHECK(done, "the 70th fence did not finish within a minute");
    TH_EXPECT_ERR(wgml_context_fence_wait(th_ctx, last + 1, 0, &done), WGML_ERROR_INVALID_ARGUMENT, "not issued");
    wgml_tensor_release(t);
}

static void test_create_destroy_loop(void)
{
    for (int i = 0; i < 3; i++) {
        wgml_context *c;
        wgml_engine *e;
        TH_EXPECT(wgml_context_create(NULL, &c), WGML_OK);
        TH_EXPECT(wgml_engine_create(c, &e), WGML_OK);
        TH_EXPECT(wgml_engine_warmup(e), WGML_OK);
        wgml_engine_destroy(e);
        wgml_context_destroy(c);
    }
    wgml_context_destroy(NULL);
    wgml_engine_destroy(NULL);
    TH_EXPECT(wgml_engine_create(NULL, NULL), WGML_ERROR_INVALID_ARGUMENT);
    TH_EXPECT_ERR(wgml_engine_create(th_ctx, NULL), WGML_ERROR_INVALID_ARGUMENT, "out is NULL");
    TH_EXPECT(wgml_engine_warmup(NULL), WGML_ERROR_INVALID_ARGUMENT);
}

static void test_status_strings(void)
{
    TH_CHECK(strcmp(wgml_status_string(WGML_ERROR_SHAPE), "WGML_ERROR_SHAPE") == 0, "status string");
    TH_CHECK(strcmp(wgml_status_string((wgml_status)999), "WGML_ERROR_UNKNOWN") == 0, "unknown status string");
    TH_CHECK(strcmp(wgml_version(), "0.1.0") == 0, "version %s", wgml_version());
}

/* The timer measures the work between begin and end (a positive span, no longer than the
   host waited for it), and misuse is refused. No speed is asserted: timings stay out of
   tests. */
static void test_timer(void)
{
    size_t n = 1 << 20;
    float *x = th_random(n, -1, 1);
    wgml_tensor *t = th_tensor(WGML_F32, x, TH_SHAPE(n));
    double one = 0, many = 0;
    TH_EXPECT(wgml_context_timer_begin(th_ctx), WGML_OK);
    TH_EXPECT_ERR(wgml_context_timer_begin(th_ctx), WGML_ERROR_INVALID_ARGUMENT, "already running");
    TH_EXPECT(wgml_add(th_eng, t, t, t), WGML_OK);
    TH_EXPECT(wgml_context_timer_end(th_ctx, &one), WGML_OK);
    TH_EXPECT(wgml_context_timer_begin(th_ctx), WGML_OK);
    for (int i = 0; i < 20; i++) TH_EXPECT(wgml_mul(th_eng, t, t, t), WGML_OK);
    TH_EXPECT(wgml_context_timer_end(th_ctx, &many), WGML_OK);
    TH_CHECK(one > 0 && many > 0, "timer gave %g and %g seconds", one, many);
    TH_CHECK(one < 60 && many < 60, "timer gave %g and %g seconds", one, many);
    TH_EXPECT_ERR(wgml_context_timer_end(th_ctx, &one), WGML_ERROR_INVALID_ARGUMENT, "no timer is running");
    TH_EXPECT(wgml_context_timer_begin(NULL), WGML_ERROR_INVALID_ARGUMENT);
    TH_EXPECT(wgml_context_timer_end(th_ctx, NULL), WGML_ERROR_INVALID_ARGUMENT);
    free(x);
    wgml_tensor_release(t);
}

/* The recorder's private switches (WGML_BATCH, WGML_SYNC, WGML_READ, WGML_SKIP_VALIDATION,
   WGML_PROFILE_SUBMIT, WGML_WAIT_SPIN_US) change when batches are submitted and how a sync or a read waits,
   never results: 20 dependent adds with batches of 1 then 3 dispatches (WGML_FUSE=0: one
   dispatch per add), and a work-done sync, give the exact doubled values, as do a map sync and read without Dawn's
   validation (with WGML_LOG_KERNELS=1 naming the add's kernel on stderr, and waits that
   poll for 500 us before they block, WGML_WAIT_SPIN_US); a malformed
   value of any of them is refused when the context is made. */
/* The recorder's settings from the adapter profile, set directly (a batch of 1 after a
   wait, then 3; syncs and reads that wait by mapping and by "work done", with and without
   polling first), the one user-facing switch of fusion, and the user-facing switches'
   bad values. */
static void test_recorder_settings(void)
{
    setenv("WGML_FUSE", "0", 1);
    wgml_context *c = NULL;
    TH_EXPECT(wgml_context_create(NULL, &c), WGML_OK);
    unsetenv("WGML_FUSE");
    wgml_engine *e = NULL;
    if (c) TH_EXPECT(wgml_engine_create(c, &e), WGML_OK);
    TH_CHECK(!c || c->fuse_off, "WGML_FUSE=0 did not turn fusion off");
    TH_CHECK(!c || (c->profile && c->profile->cpu == c->cpu_adapter), "the profile does not match the adapter's type");
    for (int way = 0; c && e && way < 4; way++) {
        c->batch_first = 1;
        c->batch_max = 3;
        c->sync_by_work_done = way & 1;
        c->read_after_work_done = way & 2;
        c->wait_spin_us = way == 3 ? 500 : 0;
        float x[6] = { 1, -2, 3, -4, 5, 0.5f }, y[6];
        wgml_tensor *t = NULL;
        TH_EXPECT(wgml_tensor_from_data(c, WGML_F32, 1, (size_t[]){ 6 }, x, &t), WGML_OK);
        TH_EXPECT(wgml_context_sync(c), WGML_OK);
        wgml_context_stats s0, s1;
        wgml_context_stats_get(c, &s0);
        TH_EXPECT(wgml_add(e, t, t, t), WGML_OK);   /* first batch after a wait: 1 dispatch */
        wgml_context_stats_get(c, &s1);
        TH_CHECK(s1.submits == s0.submits + 1, "batches of 1, 3: the first op after a sync was not submitted at once");
        for (int i = 1; i < 20; i++) TH_EXPECT(wgml_add(e, t, t, t), WGML_OK);
        wgml_context_stats_get(c, &s1);
        TH_CHECK(s1.submits == s0.submits + 1 + 19 / 3, "batches of 1, 3: %llu submits for 20 ops",
                 (unsigned long long)(s1.submits - s0.submits));
        TH_EXPECT(wgml_context_sync(c), WGML_OK);
        TH_EXPECT(wgml_tensor_read(t, 0, y, sizeof y), WGML_OK);
        for (int i = 0; i < 6; i++)
            TH_CHECK(y[i] == x[i] * 1048576.0f, "wait way %d: y[%d] = %g, want %g", way, i, y[i], x[i] * 1048576.0);
        wgml_tensor_release(t);
    }
    wgml_engine_destroy(e);
    wgml_context_destroy(c);
    const struct { const char *var, *value; } bad[] = {
        { "WGML_ROBUST", "on" }, { "WGML_LOG_KERNELS", "yes" }, { "WGML_FUSE", "on" }, { "WGML_FUSE", "" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv(bad[i].var, bad[i].value, 1);
        c = (wgml_context *)&c;
        TH_EXPECT_ERR(wgml_context_create(NULL, &c), WGML_ERROR_INVALID_ARGUMENT, bad[i].var);
        TH_CHECK(c == NULL, "%s=%s: *out not NULL", bad[i].var, bad[i].value);
        unsetenv(bad[i].var);
    }
    /* WGML_LOG_KERNELS=1: a line on stderr for every kernel built */
    setenv("WGML_LOG_KERNELS", "1", 1);
    c = NULL;
    TH_EXPECT(wgml_context_create(NULL, &c), WGML_OK);
    unsetenv("WGML_LOG_KERNELS");
    wgml_engine *e2 = NULL;
    if (c) TH_EXPECT(wgml_engine_create(c, &e2), WGML_OK);
    if (c && e2) {
        float x[3] = { 1, 2, 3 }, y[3];
        wgml_tensor *t = NULL;
        TH_EXPECT(wgml_tensor_from_data(c, WGML_F32, 1, (size_t[]){ 3 }, x, &t), WGML_OK);
        /* the add's kernel is built now (a new engine): its line goes to stderr */
        char log[4096] = { 0 };
        FILE *tmp = tmpfile();
        int saved = dup(fileno(stderr));
        TH_CHECK(tmp && saved >= 0, "no temporary file for stderr");
        if (tmp && saved >= 0) {
            fflush(stderr);
            dup2(fileno(tmp), fileno(stderr));
            TH_EXPECT(wgml_add(e2, t, t, t), WGML_OK);
            TH_EXPECT(wgml_context_flush(c), WGML_OK);   /* records the add, pending until then */
            fflush(stderr);
            dup2(saved, fileno(stderr));
            rewind(tmp);
            size_t n = fread(log, 1, sizeof log - 1, tmp);
            log[n] = 0;
        }
        if (saved >= 0) close(saved);
        if (tmp) fclose(tmp);
        TH_CHECK(strstr(log, "wgml: kernel elementwise.wgsl:") != NULL, "WGML_LOG_KERNELS=1: no line for the add's kernel in \"%s\"", log);
        TH_EXPECT(wgml_tensor_read(t, 0, y, sizeof y), WGML_OK);
        for (int i = 0; i < 3; i++) TH_CHECK(y[i] == 2 * x[i], "y[%d] = %g", i, y[i]);
        wgml_tensor_release(t);
    }
    wgml_engine_destroy(e2);
    wgml_context_destroy(c);
}

/* Data parallelism outside a job (mpi_test.sh runs a job of two): no communicator, the
   single process's answers, and the bad arguments. */
static void test_comm_alone(void)
{
    const char *vars[] = { "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE" };
    for (int i = 0; i < 3; i++) TH_CHECK(!getenv(vars[i]), "%s is set: this test runs outside an MPI job", vars[i]);
    wgml_comm *c = (wgml_comm *)&c;   /* poisoned */
    TH_EXPECT(wgml_comm_create(0, &c), WGML_OK);
    TH_CHECK(c == NULL, "a communicator outside a job");
    setenv("OMPI_COMM_WORLD_SIZE", "1", 1);   /* a job of one process is this process alone */
    TH_EXPECT(wgml_comm_create(1000, &c), WGML_OK);
    TH_CHECK(c == NULL, "a communicator for a job of one process");
    unsetenv("OMPI_COMM_WORLD_SIZE");
    TH_CHECK(wgml_comm_rank(NULL) == 0 && wgml_comm_size(NULL) == 1 && wgml_comm_local_rank(NULL) == 0,
             "rank %u, size %u, local rank %u alone", wgml_comm_rank(NULL), wgml_comm_size(NULL), wgml_comm_local_rank(NULL));
    double v[2] = { 1.5, -2 };
    TH_EXPECT(wgml_comm_allreduce_sum(NULL, v, 2), WGML_OK);
    TH_CHECK(v[0] == 1.5 && v[1] == -2, "a sum over one process changed the values");
    TH_EXPECT_ERR(wgml_comm_allreduce_sum(NULL, NULL, 2), WGML_ERROR_INVALID_ARGUMENT, "buf");
    TH_EXPECT_ERR(wgml_comm_create(0, NULL), WGML_ERROR_INVALID_ARGUMENT, "out");
    wgml_comm_abort(NULL, 3);   /* returns */
    wgml_comm_destroy(NULL);
}

static const th_case cases[] = {
    { "timer", test_timer },
    { "info", test_info },
    { "create_bad_arguments", test_create_bad_arguments },
    { "choose_by_name", test_choose_by_name },
    { "env_override", test_env_override },
    { "adapter_list", test_adapter_list },
    { "enumeration", test_enumeration },
    { "device_index", test_device_index },
    { "robust_and_submit_every_op", test_robust_and_submit_every_op },
    { "batching_and_sync", test_batching_and_sync },
    { "fences", test_fences },
    { "recorder_settings", test_recorder_settings },
    { "create_destroy_loop", test_create_destroy_loop },
    { "status_strings", test_status_strings },
    { "comm_alone", test_comm_alone },
};
TH_MAIN(cases)
