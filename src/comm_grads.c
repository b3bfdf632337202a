/* The sum of a trainer's gradients over the processes of a job (DATA PARALLELISM in
   wgml.h; the interface in src/comm.h).

   The host buffer holds the gradients in the exchange's order, cut into buckets: bucket j
   is floats [j * bucket_floats, (j + 1) * bucket_floats) of it, the same on every process
   whenever each stages what. Staging a gradient records device copies of its floats into
   the staging buffer of each bucket they fall in (a large tensor spans several); the
   bucket whose last float is recorded is closed: the batch is submitted and the staging
   buffer's mapping requested. Then, strictly in bucket order (every process must start
   the same all-reduces in the same order), each mapped bucket is copied to the host
   buffer, unmapped and its all-reduce started; at the end every all-reduce is waited for
   and the sums written back.

   There are STAGING_SLOTS staging buffers, bucket j in slot j % STAGING_SLOTS, so bucket j
   is filled only once bucket j - STAGING_SLOTS was started: the one wait while staging,
   for a bucket the device reaches before the work recorded after it. A transport moves
   the data of a non-blocking all-reduce only while it is called, so every look at the
   mappings (between layers, and in the waits) also tests the all-reduces in flight. */
#include "comm.h"
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define STAGING_SLOTS 4u
/* One look at a mapping while all-reduces are in flight: short beside a bucket's transfer,
   so that the transport is called often enough to keep it moving, long enough that the
   host does not spin. */
#define LOOK_NS 100000u

typedef struct bucket {
    WGPUFuture map;                 /* the staging buffer's mapping, requested when the bucket closed */
    WGPUMapAsyncStatus map_status;  /* written by on_map */
    bool mapping;                   /* map not yet seen completed */
    wgml__comm_req *req;            /* its all-reduce, from its start until it is waited for */
} bucket;

struct wgml__exchange {
    wgml_comm *c;
    wgml_context *ctx;
    wgml_tensor *const *grads;
    const size_t *order;
    size_t n;
    size_t *offset;                 /* gradient i's floats are host[offset[i] ...] */
    float *host;
    size_t total, bucket_floats, nbuckets;
    uint32_t slots;
    WGPUBuffer staging[STAGING_SLOTS];
    bucket *b;
    /* the exchange under way: order[0 .. staged) recorded; buckets [0, closed) submitted
       with their mapping requested, [0, started) all-reduces started, [0, tested) seen
       finished */
    size_t staged, closed, started, tested;
};

static void on_map(WGPUMapAsyncStatus status, WGPUStringView msg, void *u1, void *u2)
{
    (void)msg; (void)u2;
    *(WGPUMapAsyncStatus *)u1 = status;
}

/* The host float after bucket j's last. */
static size_t bucket_end(const wgml__exchange *x, size_t j)
{
    size_t end = (j + 1) * x->bucket_floats;
    return end < x->total ? end : x->total;
}

/* The transport's failure (its message is the thread's) recorded on the trainer's context. */
static wgml_status on_context(const wgml__exchange *x, const char *fn, wgml_status s)
{
    return wgml__fail(x->ctx, s, "%s: %s", fn, wgml_last_error(NULL));
}

wgml_status wgml__exchange_create(wgml_comm *c, wgml_tensor *const *grads, const size_t *order, size_t n, const char *fn,
                                  wgml__exchange **out)
{
    *out = NULL;
    if (!c || c->size <= 1 || !n) return WGML_OK;
    wgml_context *ctx = grads[0]->ctx;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) total += wgml_tensor_numel(grads[i]);
    size_t bucket_floats = c->bucket_bytes / sizeof(float);
    if (bucket_floats > total) bucket_floats = total;
    if (bucket_floats == 0) bucket_floats = 1;
    size_t nbuckets = (total + bucket_floats - 1) / bucket_floats;
    uint32_t slots = nbuckets < STAGING_SLOTS ? (uint32_t)nbuckets : STAGING_SLOTS;
    WGML_CHECK(wgml__host_room(ctx, fn, (total + (size_t)slots * bucket_floats) * sizeof(float)));
    wgml__exchange *x = calloc(1, sizeof *x);
    if (x) {
        x->offset = malloc(n * sizeof *x->offset);
        x->host = malloc(total * sizeof *x->host);
        x->b = calloc(nbuckets, sizeof *x->b);
    }
    if (!x || !x->offset || !x->host || !x->b) {
        wgml__exchange_destroy(x);
        return wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory for the gradients' sum (%zu floats)", fn, total);
    }
    *x = (wgml__exchange){ .c = c, .ctx = ctx, .grads = grads, .order = order, .n = n, .offset = x->offset, .host = x->host,
                           .total = total, .bucket_floats = bucket_floats, .nbuckets = nbuckets, .slots = slots, .b = x->b };
    for (size_t k = 0, at = 0; k < n; k++) {
        x->offset[order[k]] = at;
        at += wgml_tensor_numel(grads[order[k]]);
    }
    for (uint32_t i = 0; i < slots; i++) {
        x->staging[i] = wgpuDeviceCreateBuffer(ctx->device, &(WGPUBufferDescriptor){
            .label = { "wgml gradient staging", WGPU_STRLEN }, .usage = WGPUBufferUsage_MapRead | WGPUBufferUsage_CopyDst,
            .size = bucket_floats * sizeof(float) });
        if (!x->staging[i]) {
            wgml__exchange_destroy(x);
            return wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "%s: no staging buffer of %zu bytes for the gradients' sum", fn,
                              bucket_floats * sizeof(float));
        }
    }
    *out = x;
    return WGML_OK;
}

/* Lets the transport move the data of the all-reduces in flight (it does only when it is
   called), testing the oldest unfinished ones. */
static wgml_status test_in_flight(wgml__exchange *x, const char *fn)
{
    while (x->tested < x->started) {
        bool done = false;
        wgml_status s = wgml__comm_allreduce_test(x->c, x->b[x->tested].req, &done);
        if (s != WGML_OK) return on_context(x, fn, s);
        if (!done) break;
        x->tested++;
    }
    return WGML_OK;
}

/* Starts bucket x->started (closed) once its mapping is done: copies it to the host
   buffer, unmaps it and starts its all-reduce. Without block it only looks (*started
   tells); with block it waits for the mapping up to the context's timeout, in looks of
   LOOK_NS while all-reduces are in flight, testing them between looks. */
static wgml_status start_next(wgml__exchange *x, const char *fn, bool block, bool *started)
{
    *started = false;
    bucket *b = &x->b[x->started];
    double deadline = wgml__now() + x->ctx->timeout_ms * 1e-3;
    for (;;) {
        uint64_t ns = !block ? 0 : x->tested < x->started ? LOOK_NS : (uint64_t)x->ctx->timeout_ms * 1000000u;
        WGPUFutureWaitInfo info = { .future = b->map };
        WGPUWaitStatus ws = wgpuInstanceWaitAny(x->ctx->instance, 1, &info, ns);
        if (ws == WGPUWaitStatus_Success && info.completed) break;
        if (ws != WGPUWaitStatus_Success && ws != WGPUWaitStatus_TimedOut)
            return wgml__fail(x->ctx, WGML_ERROR_DEVICE, "%s: waiting for the device failed (status %d)", fn, (int)ws);
        if (!block) return WGML_OK;
        if (wgml__now() > deadline)
            return wgml__fail(x->ctx, WGML_ERROR_TIMEOUT, "%s: no answer from the device within %u ms", fn, x->ctx->timeout_ms);
        WGML_CHECK(test_in_flight(x, fn));
    }
    b->mapping = false;
    if (b->map_status != WGPUMapAsyncStatus_Success) {
        WGML_CHECK(wgml__check_device(x->ctx));
        return wgml__fail(x->ctx, WGML_ERROR_DEVICE, "%s: mapping a gradient bucket failed (status %d)", fn, (int)b->map_status);
    }
    WGPUBuffer buf = x->staging[x->started % x->slots];
    size_t at = x->started * x->bucket_floats, k = bucket_end(x, x->started) - at;
    const float *p = wgpuBufferGetConstMappedRange(buf, 0, k * sizeof(float));
    if (p) memcpy(x->host + at, p, k * sizeof(float));
    wgpuBufferUnmap(buf);
    if (!p) return wgml__fail(x->ctx, WGML_ERROR_DEVICE, "%s: the mapped range of a gradient bucket is unavailable", fn);
    wgml_status s = wgml__comm_allreduce_start(x->c, x->host + at, k, &b->req);
    if (s != WGML_OK) return on_context(x, fn, s);
    x->started++;
    *started = true;
    return WGML_OK;
}

/* Submits what is recorded (bucket x->closed's copies last) and requests the bucket's
   mapping. */
static wgml_status close_bucket(wgml__exchange *x)
{
    WGML_CHECK(wgml__submit(x->ctx));
    bucket *b = &x->b[x->closed];
    size_t k = bucket_end(x, x->closed) - x->closed * x->bucket_floats;
    b->map_status = WGPUMapAsyncStatus_Error;
    b->map = wgpuBufferMapAsync(x->staging[x->closed % x->slots], WGPUMapMode_Read, 0, k * sizeof(float),
        (WGPUBufferMapCallbackInfo){ .mode = WGPUCallbackMode_WaitAnyOnly, .callback = on_map, .userdata1 = &b->map_status });
    b->mapping = true;
    x->closed++;
    return WGML_OK;
}

/* Records the copies of gradient i (the next in order) into the buckets its floats fall
   in, closing each one it completes. */
static wgml_status stage_tensor(wgml__exchange *x, size_t i, const char *fn)
{
    size_t at = x->offset[i], end = at + wgml_tensor_numel(x->grads[i]);
    while (at < end) {
        size_t j = at / x->bucket_floats;
        while (j >= x->slots && x->started <= j - x->slots) {   /* the slot's previous bucket first */
            bool started;
            WGML_CHECK(start_next(x, fn, true, &started));
        }
        size_t upto = bucket_end(x, j) < end ? bucket_end(x, j) : end;
        wgpuCommandEncoderCopyBufferToBuffer(wgml__encoder_outside_pass(x->ctx), x->grads[i]->buffer,
                                             (at - x->offset[i]) * sizeof(float), x->staging[j % x->slots],
                                             (at - j * x->bucket_floats) * sizeof(float), (upto - at) * sizeof(float));
        at = upto;
        if (at == bucket_end(x, j)) WGML_CHECK(close_bucket(x));
    }
    return WGML_OK;
}

/* Starts every bucket mapped by now, in order, and tests those in flight. */
static wgml_status poll(wgml__exchange *x, const char *fn)
{
    bool started = true;
    while (started && x->started < x->closed) WGML_CHECK(start_next(x, fn, false, &started));
    return test_in_flight(x, fn);
}

wgml_status wgml__exchange_stage(wgml__exchange *x, size_t upto, const char *fn)
{
    if (!x) return WGML_OK;
    for (; x->staged < upto; x->staged++) WGML_CHECK(stage_tensor(x, x->order[x->staged], fn));
    return poll(x, fn);
}

wgml_status wgml__exchange_finish(wgml__exchange *x, const char *fn)
{
    if (!x) return WGML_OK;
    wgml_status s = wgml__exchange_stage(x, x->n, fn);
    bool started;
    while (s == WGML_OK && x->started < x->nbuckets) s = start_next(x, fn, true, &started);
    for (size_t j = 0; s == WGML_OK && j < x->nbuckets; j++) {
        s = wgml__comm_allreduce_wait(x->c, x->b[j].req);
        x->b[j].req = NULL;   /* waited for (the transport freed it), even when it failed */
        if (s != WGML_OK) s = on_context(x, fn, s);
    }
    for (size_t i = 0; s == WGML_OK && i < x->n; i++)
        s = wgml_tensor_write(x->grads[i], 0, x->host + x->offset[i], wgml_tensor_numel(x->grads[i]) * sizeof(float));
    if (s != WGML_OK) {
        wgml__exchange_abandon(x);
        return s;
    }
    x->staged = x->closed = x->started = x->tested = 0;
    return WGML_OK;
}

void wgml__exchange_abandon(wgml__exchange *x)
{
    if (!x) return;
    /* the failure's message stays the context's: what is cleaned up here may fail too */
    char keep[WGML_ERROR_MAX];
    memcpy(keep, x->ctx->error, sizeof keep);
    for (size_t j = x->started; j < x->closed; j++) {
        if (!x->b[j].mapping) continue;
        wgpuBufferUnmap(x->staging[j % x->slots]);   /* cancels the mapping (or undoes it) */
        if (wgml__wait(x->ctx, x->b[j].map, "the gradients' sum") == WGML_OK) x->b[j].mapping = false;
    }
    /* the other processes start the same all-reduces: those started here finish, unless a
       collective failed already (the job is then ended when the communicator is destroyed,
       and what is in flight is left to that) */
    for (size_t j = 0; j < x->started; j++) {
        if (x->b[j].req && !x->c->failed) (void)wgml__comm_allreduce_wait(x->c, x->b[j].req);
        x->b[j].req = NULL;
    }
    if (x->started < x->nbuckets) x->c->failed = true;   /* the others would wait for the rest */
    x->staged = x->closed = x->started = x->tested = 0;
    memcpy(x->ctx->error, keep, sizeof keep);
}

void wgml__exchange_destroy(wgml__exchange *x)
{
    if (!x) return;
    if (x->staged || x->closed) wgml__exchange_abandon(x);
    for (uint32_t i = 0; i < STAGING_SLOTS; i++)
        if (x->staging[i]) wgpuBufferRelease(x->staging[i]);
    free(x->offset);
    free(x->host);
    free(x->b);
    free(x);
}
