/* wgml_context_timer_begin/end: GPU-clock timing of everything recorded in between.
   With timestamp queries, two empty compute passes carry the timestamps (the one at the
   start writes the beginning, the one at the end writes the end), so every dispatch,
   copy and barrier in between is inside the measured span, across any number of submits. */
#include "internal.h"

#include <time.h>

double wgml__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void stamp(wgml_context *ctx, bool begin)
{
    WGPUCommandEncoder enc = wgml__encoder_outside_pass(ctx);
    WGPUPassTimestampWrites tw = {
        .querySet = ctx->timer_queries,
        .beginningOfPassWriteIndex = begin ? 0 : WGPU_QUERY_SET_INDEX_UNDEFINED,
        .endOfPassWriteIndex = begin ? WGPU_QUERY_SET_INDEX_UNDEFINED : 1,
    };
    WGPUComputePassEncoder pass = wgpuCommandEncoderBeginComputePass(enc, &(WGPUComputePassDescriptor){ .timestampWrites = &tw });
    wgpuComputePassEncoderEnd(pass);
    wgpuComputePassEncoderRelease(pass);
}

wgml_status wgml_context_timer_begin(wgml_context *ctx)
{
    if (!ctx) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_context_timer_begin: ctx is NULL");
    WGML_CHECK(wgml__check_device(ctx));
    if (ctx->timing) return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_context_timer_begin: a timer is already running");
    if (!ctx->info.timestamp_query) {
        WGML_CHECK(wgml_context_sync(ctx));
        ctx->timer_host_start = wgml__now();
        ctx->timing = true;
        return WGML_OK;
    }
    if (!ctx->timer_queries) {
        ctx->timer_queries = wgpuDeviceCreateQuerySet(ctx->device, &(WGPUQuerySetDescriptor){
            .label = { "wgml timer", WGPU_STRLEN }, .type = WGPUQueryType_Timestamp, .count = 2 });
        ctx->timer_resolve = wgpuDeviceCreateBuffer(ctx->device, &(WGPUBufferDescriptor){
            .usage = WGPUBufferUsage_QueryResolve | WGPUBufferUsage_CopySrc, .size = 16 });
        ctx->timer_readback = wgpuDeviceCreateBuffer(ctx->device, &(WGPUBufferDescriptor){
            .usage = WGPUBufferUsage_MapRead | WGPUBufferUsage_CopyDst, .size = 16 });
    }
    stamp(ctx, true);
    ctx->timing = true;
    return WGML_OK;
}

wgml_status wgml_context_timer_end(wgml_context *ctx, double *seconds)
{
    if (!ctx) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_context_timer_end: ctx is NULL");
    if (!seconds) return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_context_timer_end: seconds is NULL");
    if (!ctx->timing) return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_context_timer_end: no timer is running");
    ctx->timing = false;
    WGML_CHECK(wgml__check_device(ctx));
    if (!ctx->info.timestamp_query) {
        WGML_CHECK(wgml_context_sync(ctx));
        *seconds = wgml__now() - ctx->timer_host_start;
        return WGML_OK;
    }
    stamp(ctx, false);
    WGPUCommandEncoder enc = wgml__encoder_outside_pass(ctx);
    wgpuCommandEncoderResolveQuerySet(enc, ctx->timer_queries, 0, 2, ctx->timer_resolve, 0);
    wgpuCommandEncoderCopyBufferToBuffer(enc, ctx->timer_resolve, 0, ctx->timer_readback, 0, 16);
    WGML_CHECK(wgml__submit(ctx));
    WGML_CHECK(wgml__map_read(ctx, ctx->timer_readback, 16, "wgml_context_timer_end"));
    const uint64_t *t = wgpuBufferGetConstMappedRange(ctx->timer_readback, 0, 16);
    wgml_status s = WGML_OK;
    if (!t) s = wgml__fail(ctx, WGML_ERROR_DEVICE, "wgml_context_timer_end: timestamps unavailable");
    else *seconds = t[1] >= t[0] ? (double)(t[1] - t[0]) * 1e-9 : 0.0;   /* WebGPU timestamps are nanoseconds */
    wgpuBufferUnmap(ctx->timer_readback);
    return s;
}
