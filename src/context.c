/* Context: adapter choice, device creation, error routing, waiting, and the recorder that
   batches ops into one command encoder per context. */
#include "internal.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static _Thread_local char tls_error[WGML_ERROR_MAX];

/* ---- errors ------------------------------------------------------------------------- */

wgml_status wgml__fail(wgml_context *ctx, wgml_status status, const char *fmt, ...)
{
    char *dst = ctx ? ctx->error : tls_error;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst, WGML_ERROR_MAX, fmt, ap);
    va_end(ap);
    return status;
}

const char *wgml_last_error(const wgml_context *ctx) { return ctx ? ctx->error : tls_error; }

const char *wgml_status_string(wgml_status s)
{
    switch (s) {
    case WGML_OK: return "WGML_OK";
    case WGML_ERROR_INVALID_ARGUMENT: return "WGML_ERROR_INVALID_ARGUMENT";
    case WGML_ERROR_SHAPE: return "WGML_ERROR_SHAPE";
    case WGML_ERROR_DTYPE: return "WGML_ERROR_DTYPE";
    case WGML_ERROR_LIMIT: return "WGML_ERROR_LIMIT";
    case WGML_ERROR_ALIAS: return "WGML_ERROR_ALIAS";
    case WGML_ERROR_CONTEXT: return "WGML_ERROR_CONTEXT";
    case WGML_ERROR_NO_ADAPTER: return "WGML_ERROR_NO_ADAPTER";
    case WGML_ERROR_DEVICE: return "WGML_ERROR_DEVICE";
    case WGML_ERROR_OUT_OF_MEMORY: return "WGML_ERROR_OUT_OF_MEMORY";
    case WGML_ERROR_TIMEOUT: return "WGML_ERROR_TIMEOUT";
    case WGML_ERROR_UNSUPPORTED: return "WGML_ERROR_UNSUPPORTED";
    case WGML_ERROR_FORMAT: return "WGML_ERROR_FORMAT";
    case WGML_ERROR_IO: return "WGML_ERROR_IO";
    }
    return "WGML_ERROR_UNKNOWN";
}

const char *wgml_version(void) { return "0.1.0"; }

static void copy_sv(char *dst, size_t cap, WGPUStringView sv)
{
    size_t n = 0;
    if (sv.data) n = sv.length == WGPU_STRLEN ? strlen(sv.data) : sv.length;
    if (n >= cap) n = cap - 1;
    if (n) memcpy(dst, sv.data, n);
    dst[n] = 0;
}

static void on_uncaptured_error(WGPUDevice const *device, WGPUErrorType type, WGPUStringView msg,
                                void *u1, void *u2)
{
    (void)device; (void)u2;
    wgml_context *ctx = u1;
    if (ctx->pending_status != WGML_OK) return;   /* keep the first error */
    ctx->pending_status = type == WGPUErrorType_OutOfMemory ? WGML_ERROR_OUT_OF_MEMORY : WGML_ERROR_DEVICE;
    char m[WGML_ERROR_MAX - 64];
    copy_sv(m, sizeof m, msg);
    snprintf(ctx->pending_error, sizeof ctx->pending_error, "device error: %s", m);
}

static void on_device_lost(WGPUDevice const *device, WGPUDeviceLostReason reason, WGPUStringView msg,
                           void *u1, void *u2)
{
    (void)device; (void)u2;
    wgml_context *ctx = u1;
    ctx->lost = true;
    if (reason == WGPUDeviceLostReason_CallbackCancelled) return;
    char m[WGML_ERROR_MAX - 64];
    copy_sv(m, sizeof m, msg);
    ctx->pending_status = WGML_ERROR_DEVICE;
    snprintf(ctx->pending_error, sizeof ctx->pending_error, "device lost (reason %d): %s", (int)reason, m);
}

wgml_status wgml__check_device(wgml_context *ctx)
{
    if (ctx->pending_status != WGML_OK) {
        wgml_status s = ctx->pending_status;
        snprintf(ctx->error, sizeof ctx->error, "%s", ctx->pending_error);
        if (!ctx->lost) ctx->pending_status = WGML_OK;   /* loss stays reported */
        return s;
    }
    if (ctx->lost) return wgml__fail(ctx, WGML_ERROR_DEVICE, "the device was lost");
    return WGML_OK;
}

wgml_status wgml__wait(wgml_context *ctx, WGPUFuture future, const char *what)
{
    WGPUFutureWaitInfo info = { .future = future };
    /* Polls without blocking first, for up to wait_spin_us: a blocked thread wakes some time
       after the device finished, a polling one as soon as it looks. */
    if (ctx->wait_spin_us) {
        double t0 = wgml__now();
        do {
            WGPUWaitStatus ps = wgpuInstanceWaitAny(ctx->instance, 1, &info, 0);
            if (ps == WGPUWaitStatus_Success && info.completed) return WGML_OK;
            if (ps != WGPUWaitStatus_Success && ps != WGPUWaitStatus_TimedOut)
                return wgml__fail(ctx, WGML_ERROR_DEVICE, "%s: waiting for the device failed (status %d)", what, (int)ps);
        } while ((wgml__now() - t0) * 1e6 < ctx->wait_spin_us);
    }
    WGPUWaitStatus ws = wgpuInstanceWaitAny(ctx->instance, 1, &info, (uint64_t)ctx->timeout_ms * 1000000ull);
    if (ws == WGPUWaitStatus_TimedOut)
        return wgml__fail(ctx, WGML_ERROR_TIMEOUT, "%s: no answer from the device within %u ms", what, ctx->timeout_ms);
    if (ws != WGPUWaitStatus_Success || !info.completed)
        return wgml__fail(ctx, WGML_ERROR_DEVICE, "%s: waiting for the device failed (status %d)", what, (int)ws);
    return WGML_OK;
}

/* ---- adapter choice ----------------------------------------------------------------- */

typedef struct adapter_slot {
    WGPUAdapter adapter;
    WGPUStatus status;
} adapter_slot;

static void on_adapter(WGPURequestAdapterStatus status, WGPUAdapter adapter, WGPUStringView msg,
                       void *u1, void *u2)
{
    (void)msg; (void)u2;
    adapter_slot *slot = u1;
    slot->adapter = status == WGPURequestAdapterStatus_Success ? adapter : NULL;
}

static const struct { const char *name; WGPUBackendType type; } backend_names[] = {
    { "vulkan", WGPUBackendType_Vulkan }, { "metal", WGPUBackendType_Metal },
    { "d3d12", WGPUBackendType_D3D12 },   { "d3d11", WGPUBackendType_D3D11 },
    { "opengl", WGPUBackendType_OpenGL }, { "opengles", WGPUBackendType_OpenGLES },
    { "null", WGPUBackendType_Null },
};

static const char *backend_name(WGPUBackendType t)
{
    for (size_t i = 0; i < sizeof backend_names / sizeof backend_names[0]; i++)
        if (backend_names[i].type == t) return backend_names[i].name;
    return "unknown";
}

static const char *adapter_type_name(WGPUAdapterType t)
{
    switch (t) {
    case WGPUAdapterType_DiscreteGPU: return "discrete GPU";
    case WGPUAdapterType_IntegratedGPU: return "integrated GPU";
    case WGPUAdapterType_CPU: return "CPU";
    default: return "unknown";
    }
}

static int type_rank(WGPUAdapterType t)
{
    switch (t) {
    case WGPUAdapterType_DiscreteGPU: return 0;
    case WGPUAdapterType_IntegratedGPU: return 1;
    case WGPUAdapterType_CPU: return 2;
    default: return 3;
    }
}

static int backend_rank(WGPUBackendType t)
{
    return (t == WGPUBackendType_Vulkan || t == WGPUBackendType_Metal || t == WGPUBackendType_D3D12) ? 0 : 1;
}

static bool contains_icase(const char *hay, const char *needle)
{
    size_t n = strlen(needle);
    if (n == 0) return true;
    for (; *hay; hay++)
        if (strncasecmp(hay, needle, n) == 0) return true;
    return false;
}

#define MAX_CANDIDATES 8

/* What to do when the runtime finds no adapter at all: wgml's own build fetches Mesa's
   lavapipe CPU driver, which deps/env.sh makes visible. */
#define NO_DRIVER_HINT "no GPU driver (Vulkan, Metal or D3D12) is visible to the WebGPU runtime. Install the " \
    "GPU's Vulkan driver, or run on the CPU through Mesa's lavapipe: in a wgml build tree, `. deps/env.sh` " \
    "first (`make run` and `make test` do); elsewhere install Debian's mesa-vulkan-drivers"

typedef struct candidate {
    WGPUAdapter adapter;
    char name[256];
    char description[256];
    char vendor[128];
    char architecture[128];
    WGPUAdapterType type;
    WGPUBackendType backend;
    uint32_t vendor_id, device_id;
} candidate;

static bool ranks_before(const candidate *a, const candidate *b)
{
    int ta = type_rank(a->type), tb = type_rank(b->type);
    return ta < tb || (ta == tb && backend_rank(a->backend) < backend_rank(b->backend));
}

/* Adds adapter to the candidates unless it is Dawn's Null backend not asked for by name, or
   (dedup) one already there by vendor, device, backend and name; releases it when not kept. */
static void add_candidate(candidate *c, int *count, WGPUAdapter adapter, WGPUBackendType backend, bool dedup)
{
    WGPUAdapterInfo ai = { 0 };
    if (wgpuAdapterGetInfo(adapter, &ai) != WGPUStatus_Success) {
        wgpuAdapterRelease(adapter);
        return;
    }
    /* Dawn's Null backend computes nothing (every op "succeeds" with zeros): it is taken
       only when asked for by name. */
    if (ai.backendType == WGPUBackendType_Null && backend != WGPUBackendType_Null) {
        wgpuAdapterInfoFreeMembers(ai);
        wgpuAdapterRelease(adapter);
        return;
    }
    candidate cand = { .adapter = adapter, .type = ai.adapterType, .backend = ai.backendType, .vendor_id = ai.vendorID,
                       .device_id = ai.deviceID };
    copy_sv(cand.name, sizeof cand.name, ai.device);
    copy_sv(cand.description, sizeof cand.description, ai.description);
    copy_sv(cand.vendor, sizeof cand.vendor, ai.vendor);
    copy_sv(cand.architecture, sizeof cand.architecture, ai.architecture);
    wgpuAdapterInfoFreeMembers(ai);
    bool dup = false;
    for (int i = 0; dedup && i < *count; i++)
        if (c[i].vendor_id == cand.vendor_id && c[i].device_id == cand.device_id && c[i].backend == cand.backend &&
            strcmp(c[i].name, cand.name) == 0)
            dup = true;
    if (dup || *count == MAX_CANDIDATES) {
        wgpuAdapterRelease(adapter);
        return;
    }
    c[(*count)++] = cand;
}

/* Every adapter of the runtime: through Dawn's enumeration, one per physical device (two
   identical GPUs are two), where the runtime offers it (src/webgpu_enum.c); else by asking
   for an adapter with every power preference, with and without the fallback (CPU) adapter,
   and keeping the distinct ones. They come back in the one order of device indices:
   discrete, integrated, CPU, then Vulkan, Metal and D3D12 before other backends; ties keep
   the order they were found in, so the order is the same on every call. */
static wgml_status collect_adapters(wgml_context *ctx, WGPUBackendType backend, candidate *c, int *count)
{
    *count = 0;
    WGPURequestAdapterOptions all = { .nextInChain = (WGPUChainedStruct *)wgml__adapter_toggles(),
                                      .featureLevel = WGPUFeatureLevel_Core, .backendType = backend };
    WGPUAdapter listed[MAX_CANDIDATES];
    int n = wgml__enumerate_adapters(ctx->instance, &all, listed, MAX_CANDIDATES);
    for (int i = 0; i < n; i++) add_candidate(c, count, listed[i], backend, false);
    const WGPUPowerPreference prefs[] = { WGPUPowerPreference_HighPerformance, WGPUPowerPreference_LowPower };
    bool enumerated = *count > 0;
    for (int fb = 0; fb < 2 && !enumerated; fb++) {
        for (size_t p = 0; p < 2; p++) {
            adapter_slot slot = { 0 };
            WGPURequestAdapterOptions opt = all;
            opt.powerPreference = prefs[p];
            opt.forceFallbackAdapter = fb;
            WGPUFuture f = wgpuInstanceRequestAdapter(ctx->instance, &opt,
                (WGPURequestAdapterCallbackInfo){ .mode = WGPUCallbackMode_WaitAnyOnly, .callback = on_adapter, .userdata1 = &slot });
            wgml_status s = wgml__wait(ctx, f, "requesting an adapter");
            if (s != WGML_OK) {
                for (int i = 0; i < *count; i++) wgpuAdapterRelease(c[i].adapter);
                *count = 0;
                return s;
            }
            if (slot.adapter) add_candidate(c, count, slot.adapter, backend, true);
        }
    }
    for (int i = 1; i < *count; i++) {   /* a stable insertion sort */
        candidate t = c[i];
        int j = i;
        for (; j > 0 && ranks_before(&t, &c[j - 1]); j--) c[j] = c[j - 1];
        c[j] = t;
    }
    return WGML_OK;
}

/* The backend named by want (NULL or "" is any), or an error naming who called. */
static wgml_status parse_backend(const char *who, const char *want, WGPUBackendType *backend)
{
    *backend = WGPUBackendType_Undefined;
    if (!want || !*want) return WGML_OK;
    for (size_t i = 0; i < sizeof backend_names / sizeof backend_names[0]; i++)
        if (strcasecmp(want, backend_names[i].name) == 0) { *backend = backend_names[i].type; return WGML_OK; }
    return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT,
                      "%s: backend \"%s\" is not one of vulkan, metal, d3d12, d3d11, opengl, opengles, null", who, want);
}

/* "\"name\" (backend, type), ..." in the candidates' order, or "none": what a failed
   choice tells the user there is. */
static const char *describe_candidates(char *buf, size_t cap, const candidate *c, int n)
{
    buf[0] = 0;
    for (int i = 0; i < n; i++) {
        size_t used = strlen(buf);
        snprintf(buf + used, cap - used, "%s\"%s\" (%s, %s)", i ? ", " : "", c[i].name, backend_name(c[i].backend),
                 adapter_type_name(c[i].type));
    }
    return n ? buf : "none";
}

/* Takes the first candidate that matches want_name (a substring of its name or
   description), or with index set the one at *index among those that match. index_from
   names where an index came from, for the message. */
static wgml_status choose_adapter(wgml_context *ctx, const char *want_name, const char *want_backend,
                                  const uint32_t *index, const char *index_from)
{
    WGPUBackendType backend;
    WGML_CHECK(parse_backend("wgml_context_create", want_backend, &backend));
    candidate c[MAX_CANDIDATES];
    int n = 0;
    wgml_status s = collect_adapters(ctx, backend, c, &n);
    if (s != WGML_OK) { snprintf(tls_error, sizeof tls_error, "%s", ctx->error); return s; }

    bool by_name = want_name && *want_name;
    int pick = -1;
    uint32_t matched = 0;
    for (int i = 0; i < n && pick < 0; i++) {
        if (by_name && !contains_icase(c[i].name, want_name) && !contains_icase(c[i].description, want_name))
            continue;
        if (!index || matched == *index) pick = i;
        matched++;
    }
    if (pick < 0) {
        char seen[WGML_ERROR_MAX / 2];
        const char *found = describe_candidates(seen, sizeof seen, c, n);
        for (int i = 0; i < n; i++) wgpuAdapterRelease(c[i].adapter);
        if (n == 0 && backend == WGPUBackendType_Undefined)
            return wgml__fail(NULL, WGML_ERROR_NO_ADAPTER, "wgml_context_create: no WebGPU adapter: %s", NO_DRIVER_HINT);
        if (index)
            return wgml__fail(NULL, WGML_ERROR_NO_ADAPTER,
                              "wgml_context_create: device index %u%s%s%s is out of range (%u adapter%s%s%s%s%s, indices from 0); "
                              "adapters found: %s",
                              *index, index_from ? " (from " : "", index_from ? index_from : "", index_from ? ")" : "",
                              matched, matched == 1 ? "" : "s", by_name ? " matching adapter \"" : "", by_name ? want_name : "",
                              by_name ? "\"" : "", backend != WGPUBackendType_Undefined ? " on that backend" : "", found);
        return wgml__fail(NULL, WGML_ERROR_NO_ADAPTER, "wgml_context_create: no WebGPU adapter%s%s%s%s; adapters found: %s",
                          by_name ? " matching adapter \"" : "", by_name ? want_name : "", by_name ? "\"" : "",
                          backend != WGPUBackendType_Undefined ? " on that backend" : "", found);
    }
    for (int i = 0; i < n; i++)
        if (i != pick) wgpuAdapterRelease(c[i].adapter);
    ctx->adapter = c[pick].adapter;
    return WGML_OK;
}

wgml_status wgml_adapter_list(const char *backend, wgml_adapter_info *out, uint32_t cap, uint32_t *count)
{
    if (!count) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_adapter_list: count is NULL");
    *count = 0;
    if (!out && cap > 0) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_adapter_list: out is NULL with cap %u", cap);
    WGPUBackendType want;
    WGML_CHECK(parse_backend("wgml_adapter_list", backend, &want));
    /* a context without a device: the waits for the adapters need its instance and timeout */
    wgml_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "wgml_adapter_list: out of host memory");
    ctx->timeout_ms = wgml__profile_of(NULL, 0, false)->timeout_ms;
    ctx->instance = wgml__create_instance();
    if (!ctx->instance) {
        free(ctx);
        return wgml__fail(NULL, WGML_ERROR_DEVICE, "wgml_adapter_list: the WebGPU runtime could not create an instance");
    }
    candidate c[MAX_CANDIDATES];
    int n = 0;
    wgml_status s = collect_adapters(ctx, want, c, &n);
    if (s != WGML_OK) wgml__fail(NULL, s, "wgml_adapter_list: %s", ctx->error);
    for (int i = 0; i < n; i++) {
        if ((uint32_t)i < cap) {
            wgml_adapter_info *in = &out[i];
            *in = (wgml_adapter_info){ .backend = backend_name(c[i].backend), .type = adapter_type_name(c[i].type),
                                       .vendor_id = c[i].vendor_id, .device_id = c[i].device_id };
            snprintf(in->name, sizeof in->name, "%s", c[i].name);
            snprintf(in->vendor, sizeof in->vendor, "%s", c[i].vendor);
            snprintf(in->architecture, sizeof in->architecture, "%s", c[i].architecture);
            snprintf(in->driver, sizeof in->driver, "%s", c[i].description);
        }
        wgpuAdapterRelease(c[i].adapter);
    }
    *count = (uint32_t)n;
    wgpuInstanceProcessEvents(ctx->instance);
    wgpuInstanceRelease(ctx->instance);
    free(ctx);
    return s;
}

/* ---- device ------------------------------------------------------------------------- */

typedef struct device_slot {
    WGPUDevice device;
    char message[512];
} device_slot;

static void on_device(WGPURequestDeviceStatus status, WGPUDevice device, WGPUStringView msg, void *u1, void *u2)
{
    (void)u2;
    device_slot *slot = u1;
    slot->device = status == WGPURequestDeviceStatus_Success ? device : NULL;
    copy_sv(slot->message, sizeof slot->message, msg);
}

/* The adapter's subgroup-matrix shape for f16 inputs with f32 results, the first such
   configuration it lists (the preferred one): mma = { M, N, K }. False where the runtime or
   the adapter has none. */
static bool matrix_config(WGPUAdapter adapter, uint32_t mma[3])
{
#if WGML_HAS_SUBGROUP_MATRIX
    if (!wgpuAdapterHasFeature(adapter, WGML_FEATURE_SUBGROUP_MATRIX)) return false;
    WGPUAdapterPropertiesSubgroupMatrixConfigs cfgs = { .chain = { .sType = WGPUSType_AdapterPropertiesSubgroupMatrixConfigs } };
    WGPUAdapterInfo ai = { .nextInChain = &cfgs.chain };
    if (wgpuAdapterGetInfo(adapter, &ai) != WGPUStatus_Success) return false;
    bool found = false;
    for (size_t i = 0; i < cfgs.configCount && !found; i++) {
        const WGPUSubgroupMatrixConfig *c = &cfgs.configs[i];
        if (c->componentType == WGPUSubgroupMatrixComponentType_F16 &&
            c->resultComponentType == WGPUSubgroupMatrixComponentType_F32 && c->M && c->N && c->K &&
            c->M <= 64 && c->N <= 64 && c->K <= 64) {
            mma[0] = c->M;
            mma[1] = c->N;
            mma[2] = c->K;
            found = true;
        }
    }
    wgpuAdapterPropertiesSubgroupMatrixConfigsFreeMembers(cfgs);
    wgpuAdapterInfoFreeMembers(ai);
    return found;
#else
    (void)adapter;
    (void)mma;
    return false;
#endif
}

static bool device_has_matrix(WGPUDevice device)
{
#if WGML_HAS_SUBGROUP_MATRIX
    return wgpuDeviceHasFeature(device, WGML_FEATURE_SUBGROUP_MATRIX);
#else
    (void)device;
    return false;
#endif
}

static wgml_status create_device(wgml_context *ctx, bool robust)
{
    WGPULimits limits = { 0 };
    if (wgpuAdapterGetLimits(ctx->adapter, &limits) != WGPUStatus_Success)
        return wgml__fail(NULL, WGML_ERROR_DEVICE, "wgml_context_create: the adapter did not report its limits");

    WGPUFeatureName want[] = { WGML_FEATURE_SHADER_F16, WGML_FEATURE_SUBGROUPS, WGML_FEATURE_TIMESTAMP_QUERY };
    WGPUFeatureName feats[4];
    size_t nfeat = 0;
    for (size_t i = 0; i < 3; i++)
        if (wgpuAdapterHasFeature(ctx->adapter, want[i])) feats[nfeat++] = want[i];
    uint32_t mma[3] = { 0, 0, 0 };
    if (wgpuAdapterHasFeature(ctx->adapter, WGML_FEATURE_SHADER_F16) && wgpuAdapterHasFeature(ctx->adapter, WGML_FEATURE_SUBGROUPS) &&
        matrix_config(ctx->adapter, mma)) {
#if WGML_HAS_SUBGROUP_MATRIX
        feats[nfeat++] = WGML_FEATURE_SUBGROUP_MATRIX;
#endif
    }

    /* Unless robust: no bounds clamping in shaders, no zeroing of workgroup memory (wgml's
       kernels stay in bounds and initialise what they read; bench/notes/overhead.md has
       what robustness costs). */
    const char *enabled[2] = { "disable_robustness", "disable_workgroup_init" };
    const char *disabled[1] = { "timestamp_quantization" };
    WGPUDawnTogglesDescriptor toggles = {
        .chain = { .sType = WGPUSType_DawnTogglesDescriptor },
        .enabledToggleCount = robust ? 0 : 2,
        .enabledToggles = enabled,
        .disabledToggleCount = 1,
        .disabledToggles = disabled,
    };
    WGPUDeviceDescriptor dd = {
        .nextInChain = &toggles.chain,
        .label = { "wgml", WGPU_STRLEN },
        .requiredFeatureCount = nfeat,
        .requiredFeatures = feats,
        .requiredLimits = &limits,
        .deviceLostCallbackInfo = { .mode = WGPUCallbackMode_AllowSpontaneous, .callback = on_device_lost, .userdata1 = ctx },
        .uncapturedErrorCallbackInfo = { .callback = on_uncaptured_error, .userdata1 = ctx },
    };
    device_slot slot = { 0 };
    WGPUFuture f = wgpuAdapterRequestDevice(ctx->adapter, &dd,
        (WGPURequestDeviceCallbackInfo){ .mode = WGPUCallbackMode_WaitAnyOnly, .callback = on_device, .userdata1 = &slot });
    wgml_status s = wgml__wait(ctx, f, "requesting a device");
    if (s != WGML_OK) { snprintf(tls_error, sizeof tls_error, "%s", ctx->error); return s; }
    if (!slot.device)
        return wgml__fail(NULL, WGML_ERROR_DEVICE, "wgml_context_create: the adapter refused to create a device: %s", slot.message);
    ctx->device = slot.device;
    ctx->queue = wgpuDeviceGetQueue(ctx->device);
    if (wgpuDeviceGetLimits(ctx->device, &ctx->limits) != WGPUStatus_Success) ctx->limits = limits;

    wgml_adapter_info *in = &ctx->info;
    WGPUAdapterInfo ai = { 0 };
    if (wgpuAdapterGetInfo(ctx->adapter, &ai) == WGPUStatus_Success) {
        copy_sv(in->name, sizeof in->name, ai.device);
        copy_sv(in->vendor, sizeof in->vendor, ai.vendor);
        copy_sv(in->architecture, sizeof in->architecture, ai.architecture);
        copy_sv(in->driver, sizeof in->driver, ai.description);
        in->backend = backend_name(ai.backendType);
        in->type = adapter_type_name(ai.adapterType);
        in->vendor_id = ai.vendorID;
        in->device_id = ai.deviceID;
        in->subgroup_min_size = ai.subgroupMinSize;
        in->subgroup_max_size = ai.subgroupMaxSize;
        wgpuAdapterInfoFreeMembers(ai);
    }
    in->max_buffer_size = ctx->limits.maxBufferSize;
    in->max_storage_buffer_binding_size = ctx->limits.maxStorageBufferBindingSize;
    in->max_storage_buffers_per_stage = ctx->limits.maxStorageBuffersPerShaderStage;
    in->max_workgroup_storage_size = ctx->limits.maxComputeWorkgroupStorageSize;
    in->max_invocations_per_workgroup = ctx->limits.maxComputeInvocationsPerWorkgroup;
    in->max_workgroup_size_x = ctx->limits.maxComputeWorkgroupSizeX;
    in->max_workgroups_per_dimension = ctx->limits.maxComputeWorkgroupsPerDimension;
    in->shader_f16 = wgpuDeviceHasFeature(ctx->device, WGML_FEATURE_SHADER_F16);
    in->subgroups = wgpuDeviceHasFeature(ctx->device, WGML_FEATURE_SUBGROUPS);
    in->timestamp_query = wgpuDeviceHasFeature(ctx->device, WGML_FEATURE_TIMESTAMP_QUERY);
    in->robust = robust;
    if (mma[0] && device_has_matrix(ctx->device)) {
        in->matrix_m = mma[0];
        in->matrix_n = mma[1];
        in->matrix_k = mma[2];
    }

    /* A runtime whose structs drifted from the header shows up here first: subgroup sizes
       are powers of two between 1 and 128 on every adapter that reports them. */
    uint32_t lo = in->subgroup_min_size, hi = in->subgroup_max_size;
    if (in->subgroups && (lo == 0 || hi > 128 || lo > hi || (lo & (lo - 1)) || (hi & (hi - 1))))
        return wgml__fail(NULL, WGML_ERROR_DEVICE,
                          "wgml_context_create: the runtime reports subgroup sizes %u..%u; its WGPUAdapterInfo "
                          "layout does not match webgpu.h (see src/webgpu_abi.h)", lo, hi);
    return WGML_OK;
}

/* The environment variables meant for users (README, and ADAPTER CHOICE in wgml.h), read
   in this one place, when a context is created. */
typedef struct user_env {
    const char *adapter, *backend;
    bool robust, log_kernels, fuse_off;
    bool use_device_index;   /* WGML_DEVICE is set: device_index holds it */
    uint32_t device_index;
} user_env;

static wgml_status read_user_env(user_env *u)
{
    enum { ADAPTER, BACKEND, DEVICE, ROBUST, LOG_KERNELS, FUSE, COUNT };
    static const char *const names[COUNT] = { "WGML_ADAPTER", "WGML_BACKEND", "WGML_DEVICE", "WGML_ROBUST", "WGML_LOG_KERNELS",
                                              "WGML_FUSE" };
    const char *v[COUNT];
    for (int i = 0; i < COUNT; i++) v[i] = getenv(names[i]);
    /* a device index is decimal digits only, below 2^32: no sign, no spaces, not empty */
    uint64_t device = 0;
    if (v[DEVICE]) {
        const char *p = v[DEVICE];
        for (; *p >= '0' && *p <= '9' && device <= UINT32_MAX; p++) device = device * 10 + (uint64_t)(*p - '0');
        if (p == v[DEVICE] || *p || device > UINT32_MAX)
            return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_context_create: %s=\"%s\" is not a decimal device index",
                              names[DEVICE], v[DEVICE]);
    }
    /* the three switches take 0 or 1 only, so a typo is an error rather than the default */
    bool on[COUNT] = { [FUSE] = true };
    for (int i = ROBUST; i < COUNT; i++) {
        if (!v[i]) continue;
        if (strcmp(v[i], "0") != 0 && strcmp(v[i], "1") != 0)
            return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_context_create: %s=\"%s\" is not 0 or 1", names[i], v[i]);
        on[i] = v[i][0] == '1';
    }
    *u = (user_env){ .adapter = v[ADAPTER], .backend = v[BACKEND], .robust = on[ROBUST], .log_kernels = on[LOG_KERNELS],
                     .fuse_off = !on[FUSE], .use_device_index = v[DEVICE] != NULL, .device_index = (uint32_t)device };
    return WGML_OK;
}

wgml_status wgml_context_create(const wgml_context_desc *desc, wgml_context **out)
{
    if (!out) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_context_create: out is NULL");
    *out = NULL;
    user_env env = { 0 };
    WGML_CHECK(read_user_env(&env));
    wgml_context_desc d = desc ? *desc : (wgml_context_desc){ 0 };
    if (!d.adapter) d.adapter = env.adapter;
    if (!d.backend) d.backend = env.backend;
    const char *index_from = NULL;
    if (!d.use_device_index && env.use_device_index) {
        d.use_device_index = true;
        d.device_index = env.device_index;
        index_from = "WGML_DEVICE";
    }

    if ((unsigned)d.matmul_precision > WGML_PRECISION_F16X3)
        return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_context_create: matmul_precision %d is not a wgml_precision",
                          (int)d.matmul_precision);
    wgml_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "wgml_context_create: out of host memory");
    ctx->matmul_precision = d.matmul_precision;
    ctx->timeout_ms = d.timeout_ms ? d.timeout_ms : wgml__profile_of(NULL, 0, false)->timeout_ms;
    ctx->submit_every_op = d.submit_every_op;
    ctx->instance = wgml__create_instance();
    if (!ctx->instance) {
        free(ctx);
        return wgml__fail(NULL, WGML_ERROR_DEVICE, "wgml_context_create: the WebGPU runtime could not create an instance");
    }
    wgml_status s = choose_adapter(ctx, d.adapter, d.backend, d.use_device_index ? &d.device_index : NULL, index_from);
    if (s == WGML_OK) s = wgml__device_room(wgml__address_limit());
    if (s == WGML_OK) s = create_device(ctx, d.robust || env.robust);
    if (s != WGML_OK) {
        wgml_context_destroy(ctx);
        return s;
    }
    ctx->cpu_adapter = ctx->info.type && strcmp(ctx->info.type, "CPU") == 0;
    const wgml__profile *pr = wgml__profile_of(ctx->info.name, ctx->info.vendor_id, ctx->cpu_adapter);
    ctx->profile = pr;
    uint32_t align = ctx->limits.minUniformBufferOffsetAlignment;
    ctx->uniform_stride = align > 256 ? align : 256;
    ctx->batch_first = pr->batch_first;
    ctx->batch_max = pr->batch_max;
    ctx->batch_limit = ctx->batch_first;
    ctx->uniform_arena_bytes = ctx->batch_max * ctx->uniform_stride;
    ctx->log_kernels = env.log_kernels;
    ctx->fuse_off = env.fuse_off;
    ctx->address_limit = wgml__address_limit();
    if (!d.timeout_ms) ctx->timeout_ms = pr->timeout_ms;
    ctx->sync_by_work_done = pr->sync_by_work_done;
    ctx->read_after_work_done = pr->read_after_work_done;
    ctx->wait_spin_us = pr->wait_spin_us;
    *out = ctx;
    return WGML_OK;
}

void wgml_context_destroy(wgml_context *ctx)
{
    if (!ctx) return;
    if (ctx->device && !ctx->lost) {
        wgml__submit(ctx);
        wgml_context_sync(ctx);
    }
    if (ctx->deferred_ops) ctx->deferred_ops->release(ctx);
    if (ctx->pass) wgpuComputePassEncoderRelease(ctx->pass);
    if (ctx->encoder) wgpuCommandEncoderRelease(ctx->encoder);
    wgml__bind_cache_free(ctx);
    if (ctx->uniforms) wgpuBufferRelease(ctx->uniforms);
    free(ctx->uniforms_host);
    if (ctx->readback) wgpuBufferRelease(ctx->readback);
    if (ctx->timer_queries) wgpuQuerySetRelease(ctx->timer_queries);
    if (ctx->timer_resolve) wgpuBufferRelease(ctx->timer_resolve);
    if (ctx->timer_readback) wgpuBufferRelease(ctx->timer_readback);
    if (ctx->queue) wgpuQueueRelease(ctx->queue);
    if (ctx->device) {
        wgpuDeviceDestroy(ctx->device);   /* fires the lost callback while ctx is alive */
        wgpuDeviceRelease(ctx->device);
    }
    if (ctx->adapter) wgpuAdapterRelease(ctx->adapter);
    if (ctx->instance) {
        wgpuInstanceProcessEvents(ctx->instance);
        wgpuInstanceRelease(ctx->instance);
    }
    free(ctx);
}

wgml_status wgml_context_info(const wgml_context *ctx, wgml_adapter_info *info)
{
    if (!ctx || !info) return wgml__fail((wgml_context *)ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_context_info: %s is NULL", ctx ? "info" : "ctx");
    *info = ctx->info;
    return WGML_OK;
}

wgml_status wgml_context_stats_get(const wgml_context *ctx, wgml_context_stats *stats)
{
    if (!ctx || !stats)
        return wgml__fail((wgml_context *)ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_context_stats_get: %s is NULL", ctx ? "stats" : "ctx");
    *stats = (wgml_context_stats){ .commands = ctx->commands, .submits = ctx->submits,
                                   .live_tensors = ctx->live_tensors, .live_engines = ctx->live_engines,
                                   .device_bytes = ctx->device_bytes };
    return WGML_OK;
}

/* ---- the recorder ------------------------------------------------------------------- */

static void ensure_encoder(wgml_context *ctx)
{
    if (!ctx->encoder)
        ctx->encoder = wgpuDeviceCreateCommandEncoder(ctx->device, &(WGPUCommandEncoderDescriptor){ .label = { "wgml batch", WGPU_STRLEN } });
}

WGPUComputePassEncoder wgml__pass(wgml_context *ctx)
{
    ensure_encoder(ctx);
    if (!ctx->pass) {
        ctx->pass = wgpuCommandEncoderBeginComputePass(ctx->encoder, &(WGPUComputePassDescriptor){ 0 });
        ctx->pass_pipeline = NULL;
    }
    return ctx->pass;
}

WGPUCommandEncoder wgml__encoder_outside_pass(wgml_context *ctx)
{
    wgml__defer_error(ctx, wgml__deferred_flush(ctx));   /* before what the caller records */
    if (ctx->pass) {
        wgpuComputePassEncoderEnd(ctx->pass);
        wgpuComputePassEncoderRelease(ctx->pass);
        ctx->pass = NULL;
    }
    ensure_encoder(ctx);
    return ctx->encoder;
}

wgml_status wgml__submit(wgml_context *ctx)
{
    WGML_CHECK(wgml__deferred_flush(ctx));
    if (!ctx->encoder) return WGML_OK;
    wgml__encoder_outside_pass(ctx);
    /* The batch's parameters land just before its commands, after every earlier batch. */
    if (ctx->uniforms_used) wgpuQueueWriteBuffer(ctx->queue, ctx->uniforms, 0, ctx->uniforms_host, ctx->uniforms_used);
    WGPUCommandBuffer cb = wgpuCommandEncoderFinish(ctx->encoder, NULL);
    wgpuQueueSubmit(ctx->queue, 1, &cb);
    /* Lets Dawn retire finished work: resources released by the caller are only freed
       when the device ticks, and nothing else ticks it while ops keep coming. */
    wgpuInstanceProcessEvents(ctx->instance);
    ctx->submits++;
    wgpuCommandBufferRelease(cb);
    wgpuCommandEncoderRelease(ctx->encoder);
    ctx->encoder = NULL;
    ctx->uniforms_used = 0;
    ctx->batch_dispatches = 0;
    ctx->batch_limit = ctx->batch_max;
    return wgml__check_device(ctx);
}

wgml_status wgml__deferred_flush(wgml_context *ctx)
{
    return ctx->deferred_ops ? ctx->deferred_ops->flush(ctx) : WGML_OK;
}

bool wgml__deferred_uses(const wgml_context *ctx, const wgml_tensor *t, const wgml_engine *e)
{
    return ctx->deferred_ops && ctx->deferred_ops->uses(ctx, t, e);
}

void wgml__defer_error(wgml_context *ctx, wgml_status s)
{
    if (s == WGML_OK || ctx->pending_status != WGML_OK) return;
    ctx->pending_status = s;
    snprintf(ctx->pending_error, sizeof ctx->pending_error, "%s", ctx->error);
}

wgml_status wgml__uniform_alloc(wgml_context *ctx, const void *data, uint32_t size, WGPUBuffer *buffer, uint32_t *offset)
{
    if (size > ctx->uniform_stride) return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "internal: uniform block of %u bytes", size);
    if (!ctx->uniforms) {
        ctx->uniforms = wgpuDeviceCreateBuffer(ctx->device, &(WGPUBufferDescriptor){
            .label = { "wgml uniforms", WGPU_STRLEN }, .usage = WGPUBufferUsage_Uniform | WGPUBufferUsage_CopyDst,
            .size = ctx->uniform_arena_bytes });
        ctx->uniforms_host = calloc(1, ctx->uniform_arena_bytes);
        if (!ctx->uniforms || !ctx->uniforms_host) return wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "no memory for the uniform arena");
    }
    if (ctx->uniforms_used + ctx->uniform_stride > ctx->uniform_arena_bytes) WGML_CHECK(wgml__submit(ctx));
    memcpy(ctx->uniforms_host + ctx->uniforms_used, data, size);
    *buffer = ctx->uniforms;
    *offset = ctx->uniforms_used;
    ctx->uniforms_used += ctx->uniform_stride;
    return WGML_OK;
}

wgml_status wgml__after_record(wgml_context *ctx)
{
    ctx->commands++;
    ctx->batch_dispatches++;
    if (ctx->submit_every_op || ctx->batch_dispatches >= ctx->batch_limit) return wgml__submit(ctx);
    return WGML_OK;
}

wgml_status wgml_context_flush(wgml_context *ctx)
{
    if (!ctx) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_context_flush: ctx is NULL");
    WGML_CHECK(wgml__check_device(ctx));
    return wgml__submit(ctx);
}

static void on_map(WGPUMapAsyncStatus status, WGPUStringView msg, void *u1, void *u2)
{
    (void)msg; (void)u2;
    *(WGPUMapAsyncStatus *)u1 = status;
}

/* Maps buffer for reading, waiting for all work submitted before. */
static void on_work_done(WGPUQueueWorkDoneStatus status, WGPUStringView msg, void *u1, void *u2);

wgml_status wgml__map_read(wgml_context *ctx, WGPUBuffer buffer, uint64_t size, const char *what)
{
    if (ctx->read_after_work_done) {
        WGPUFuture f = wgpuQueueOnSubmittedWorkDone(ctx->queue,
            (WGPUQueueWorkDoneCallbackInfo){ .mode = WGPUCallbackMode_WaitAnyOnly, .callback = on_work_done });
        WGML_CHECK(wgml__wait(ctx, f, what));
    }
    WGPUMapAsyncStatus ms = 0;
    WGPUFuture f = wgpuBufferMapAsync(buffer, WGPUMapMode_Read, 0, size,
        (WGPUBufferMapCallbackInfo){ .mode = WGPUCallbackMode_WaitAnyOnly, .callback = on_map, .userdata1 = &ms });
    WGML_CHECK(wgml__wait(ctx, f, what));
    ctx->batch_limit = ctx->batch_first;   /* the device is idle now */
    if (ms != WGPUMapAsyncStatus_Success) {
        WGML_CHECK(wgml__check_device(ctx));
        return wgml__fail(ctx, WGML_ERROR_DEVICE, "%s: mapping the read-back buffer failed (status %d)", what, (int)ms);
    }
    return WGML_OK;
}

/* Nothing to do: completion is what wgml__wait sees (the callback's other arguments are
   not read, so their layout cannot matter). */
static void on_work_done(WGPUQueueWorkDoneStatus status, WGPUStringView msg, void *u1, void *u2)
{
    (void)status; (void)msg; (void)u1; (void)u2;
}

wgml_status wgml_context_sync(wgml_context *ctx)
{
    if (!ctx) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_context_sync: ctx is NULL");
    WGML_CHECK(wgml__check_device(ctx));
    WGML_CHECK(wgml__submit(ctx));
    if (ctx->sync_by_work_done) {
        WGPUFuture f = wgpuQueueOnSubmittedWorkDone(ctx->queue,
            (WGPUQueueWorkDoneCallbackInfo){ .mode = WGPUCallbackMode_WaitAnyOnly, .callback = on_work_done });
        WGML_CHECK(wgml__wait(ctx, f, "wgml_context_sync"));
        ctx->batch_limit = ctx->batch_first;
        return wgml__check_device(ctx);
    }
    /* A mapping completes only after everything submitted before it. */
    WGPUBuffer b = wgpuDeviceCreateBuffer(ctx->device, &(WGPUBufferDescriptor){
        .label = { "wgml sync", WGPU_STRLEN }, .usage = WGPUBufferUsage_MapRead | WGPUBufferUsage_CopyDst, .size = 4 });
    WGPUCommandEncoder enc = wgpuDeviceCreateCommandEncoder(ctx->device, NULL);
    WGPUCommandBuffer cb = wgpuCommandEncoderFinish(enc, NULL);
    wgpuQueueSubmit(ctx->queue, 1, &cb);
    wgpuCommandBufferRelease(cb);
    wgpuCommandEncoderRelease(enc);
    wgml_status s = wgml__map_read(ctx, b, 4, "wgml_context_sync");
    if (s == WGML_OK) wgpuBufferUnmap(b);
    wgpuBufferRelease(b);
    if (s != WGML_OK) return s;
    return wgml__check_device(ctx);
}
