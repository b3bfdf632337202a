/* Fences: a ticket for the work recorded so far, so that a caller can see how far the
   device has come without waiting for all of it (a progress bar, a bound on how far the
   host runs ahead). Each fence submits the batch and registers the queue's
   "submitted work done" future; the queue finishes work in order, so fence n done means
   every fence before it is done too. */
#include "internal.h"

static void on_done(WGPUQueueWorkDoneStatus status, WGPUStringView msg, void *u1, void *u2)
{
    (void)status; (void)msg; (void)u1; (void)u2;   /* completion is what the wait sees */
}

/* Waits for ring entry i (timeout_ns 0: looks only); on success drops it and every older
   entry, and moves fence_done. */
static wgml_status wait_entry(wgml_context *ctx, uint32_t i, uint64_t timeout_ns, bool *done)
{
    WGPUFutureWaitInfo info = { .future = ctx->fences[i].future };
    WGPUWaitStatus ws = wgpuInstanceWaitAny(ctx->instance, 1, &info, timeout_ns);
    *done = ws == WGPUWaitStatus_Success && info.completed;
    if (ws != WGPUWaitStatus_Success && ws != WGPUWaitStatus_TimedOut)
        return wgml__fail(ctx, WGML_ERROR_DEVICE, "wgml_context_fence_wait: waiting for the device failed (status %d)", (int)ws);
    if (*done) {
        ctx->fence_done = ctx->fences[i].id;
        /* the entries up to i are done: keep the ones after it */
        uint32_t keep = ctx->nfences - (i + 1);
        for (uint32_t k = 0; k < keep; k++) ctx->fences[k] = ctx->fences[i + 1 + k];
        ctx->nfences = keep;
    }
    return WGML_OK;
}

wgml_status wgml_context_fence(wgml_context *ctx, uint64_t *fence)
{
    if (!ctx || !fence) return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_context_fence: %s is NULL", ctx ? "fence" : "ctx");
    WGML_CHECK(wgml__check_device(ctx));
    WGML_CHECK(wgml__submit(ctx));
    if (ctx->nfences == WGML__MAX_FENCES) {   /* full: the oldest is waited for */
        bool done = false;
        WGML_CHECK(wait_entry(ctx, 0, (uint64_t)ctx->timeout_ms * 1000000u, &done));
        if (!done)
            return wgml__fail(ctx, WGML_ERROR_TIMEOUT, "wgml_context_fence: no answer from the device within %u ms",
                              ctx->timeout_ms);
    }
    WGPUFuture f = wgpuQueueOnSubmittedWorkDone(ctx->queue,
        (WGPUQueueWorkDoneCallbackInfo){ .mode = WGPUCallbackMode_WaitAnyOnly, .callback = on_done });
    ctx->fences[ctx->nfences++] = (wgml__fence){ .id = ++ctx->fence_issued, .future = f };
    *fence = ctx->fence_issued;
    return WGML_OK;
}

wgml_status wgml_context_fence_wait(wgml_context *ctx, uint64_t fence, uint32_t timeout_ms, bool *done)
{
    if (!ctx || !done)
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_context_fence_wait: %s is NULL", ctx ? "done" : "ctx");
    *done = false;
    if (fence == 0 || fence > ctx->fence_issued)
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_context_fence_wait: fence %llu was not issued by "
                          "wgml_context_fence on this context", (unsigned long long)fence);
    WGML_CHECK(wgml__check_device(ctx));
    if (fence <= ctx->fence_done) {
        *done = true;
        return WGML_OK;
    }
    uint32_t i = 0;
    while (ctx->fences[i].id < fence) i++;   /* present: issued, not yet seen done */
    WGML_CHECK(wait_entry(ctx, i, (uint64_t)timeout_ms * 1000000u, done));
    return wgml__check_device(ctx);
}
