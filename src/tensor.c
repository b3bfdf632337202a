/* Tensors: one GPU buffer, a dtype and a shape; creation, host writes, reads, zeroing. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

size_t wgml_dtype_size(wgml_dtype d)
{
    switch (d) {
    case WGML_F32: case WGML_U32: return 4;
    case WGML_F16: case WGML_BF16: return 2;
    case WGML_U8: return 1;
    case WGML_Q8_0: case WGML_Q4_0: case WGML_Q4_K: case WGML_Q6_K: case WGML_AFFINE: return 0;
    }
    return 0;
}

const char *wgml_dtype_name(wgml_dtype d)
{
    switch (d) {
    case WGML_F32: return "f32";
    case WGML_F16: return "f16";
    case WGML_BF16: return "bf16";
    case WGML_U32: return "u32";
    case WGML_U8: return "u8";
    case WGML_Q8_0: return "q8_0";
    case WGML_Q4_0: return "q4_0";
    case WGML_Q4_K: return "q4_k";
    case WGML_Q6_K: return "q6_k";
    case WGML_AFFINE: return "affine";
    }
    return "?";
}

static size_t numel_of(uint32_t ndim, const size_t *shape, bool *overflow)
{
    size_t n = 1;
    *overflow = false;
    for (uint32_t i = 0; i < ndim; i++) {
        if (shape[i] && n > SIZE_MAX / shape[i]) *overflow = true;
        n *= shape[i];
    }
    return n;
}

static wgml_status check_shape(wgml_context *ctx, const char *fn, uint32_t ndim, const size_t *shape)
{
    if (!shape) return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: shape is NULL", fn);
    if (ndim < 1 || ndim > WGML_MAX_DIMS)
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: ndim is %u; it must be 1..%d", fn, ndim, WGML_MAX_DIMS);
    for (uint32_t i = 0; i < ndim; i++)
        if (shape[i] == 0) return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: shape[%u] is 0; every dimension must be >= 1", fn, i);
    return WGML_OK;
}

size_t wgml__nbytes(const wgml_tensor *t)
{
    if (t->packed.bytes) return t->packed.bytes;
    bool of;
    return numel_of(t->ndim, t->shape, &of) * wgml_dtype_size(t->dtype);
}

typedef struct scope_result { WGPUPopErrorScopeStatus status; WGPUErrorType type; char message[512]; } scope_result;

static void on_pop(WGPUPopErrorScopeStatus status, WGPUErrorType type, WGPUStringView msg, void *u1, void *u2)
{
    (void)u2;
    scope_result *r = u1;
    r->status = status;
    r->type = type;
    size_t n = msg.data ? (msg.length == WGPU_STRLEN ? strlen(msg.data) : msg.length) : 0;
    if (n >= sizeof r->message) n = sizeof r->message - 1;
    if (n) memcpy(r->message, msg.data, n);
    r->message[n] = 0;
}

/* Creates a tensor for the public function fn (named in messages); packed (NULL for a
   dense dtype) gives a packed tensor's layout, its dtype and shape [rows, cols] are
   dtype, ndim and shape. On failure *out is NULL. */
static wgml_status tensor_create(const char *fn, wgml_context *ctx, wgml_dtype dtype, uint32_t ndim, const size_t *shape,
                                 const wgml__packed *packed, wgml_tensor **out)
{
    if (out) *out = NULL;
    if (!ctx) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: ctx is NULL", fn);
    if (!out) return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: out is NULL", fn);
    WGML_CHECK(wgml__check_device(ctx));
    if (!packed && wgml__dtype_packed(dtype))
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: dtype %s is packed; create it with wgml_tensor_create_packed",
                          fn, wgml_dtype_name(dtype));
    if (!packed && wgml_dtype_size(dtype) == 0)
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: dtype %d is not a wgml_dtype", fn, (int)dtype);
    WGML_CHECK(check_shape(ctx, fn, ndim, shape));
    bool overflow;
    size_t n = numel_of(ndim, shape, &overflow);
    size_t es = packed ? 1 : wgml_dtype_size(dtype);
    if (packed) n = packed->bytes;
    if (overflow || n > (SIZE_MAX - 16) / es)
        return wgml__fail(ctx, WGML_ERROR_LIMIT, "%s: the element count overflows size_t", fn);
    uint64_t bytes = (uint64_t)n * es;
    uint64_t cap = (bytes + 15) & ~(uint64_t)15;
    if (cap > ctx->limits.maxStorageBufferBindingSize)
        return wgml__fail(ctx, WGML_ERROR_LIMIT,
                          "%s: %llu bytes exceed the device's maxStorageBufferBindingSize of %llu bytes", fn,
                          (unsigned long long)bytes, (unsigned long long)ctx->limits.maxStorageBufferBindingSize);
    if (cap > ctx->limits.maxBufferSize)
        return wgml__fail(ctx, WGML_ERROR_LIMIT, "%s: %llu bytes exceed the device's maxBufferSize of %llu bytes", fn,
                          (unsigned long long)bytes, (unsigned long long)ctx->limits.maxBufferSize);

    if (ctx->cpu_adapter) WGML_CHECK(wgml__host_room(ctx, fn, cap));
    wgml_tensor *t = calloc(1, sizeof *t);
    if (!t) return wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    wgpuDevicePushErrorScope(ctx->device, WGPUErrorFilter_OutOfMemory);
    wgpuDevicePushErrorScope(ctx->device, WGPUErrorFilter_Validation);
    t->buffer = wgpuDeviceCreateBuffer(ctx->device, &(WGPUBufferDescriptor){
        .label = { "wgml tensor", WGPU_STRLEN },
        .usage = WGPUBufferUsage_Storage | WGPUBufferUsage_CopySrc | WGPUBufferUsage_CopyDst,
        .size = cap });
    scope_result r[2] = { 0 };
    for (int i = 0; i < 2; i++) {
        WGPUFuture f = wgpuDevicePopErrorScope(ctx->device,
            (WGPUPopErrorScopeCallbackInfo){ .mode = WGPUCallbackMode_WaitAnyOnly, .callback = on_pop, .userdata1 = &r[i] });
        wgml_status s = wgml__wait(ctx, f, fn);
        if (s != WGML_OK) { if (t->buffer) wgpuBufferRelease(t->buffer); free(t); return s; }
    }
    for (int i = 0; i < 2; i++) {
        if (r[i].status == WGPUPopErrorScopeStatus_Success && r[i].type != WGPUErrorType_NoError) {
            wgpuBufferRelease(t->buffer);
            free(t);
            return wgml__fail(ctx, r[i].type == WGPUErrorType_OutOfMemory ? WGML_ERROR_OUT_OF_MEMORY : WGML_ERROR_DEVICE,
                              "%s: the device could not allocate %llu bytes: %s", fn, (unsigned long long)cap, r[i].message);
        }
    }
    t->ctx = ctx;
    t->id = ++ctx->tensors_made;
    t->capacity = cap;
    t->dtype = dtype;
    t->ndim = ndim;
    memcpy(t->shape, shape, ndim * sizeof *shape);
    if (packed) t->packed = *packed;
    ctx->live_tensors++;
    ctx->device_bytes += cap;
    *out = t;
    return WGML_OK;
}

wgml_status wgml_tensor_create(wgml_context *ctx, wgml_dtype dtype, uint32_t ndim, const size_t *shape, wgml_tensor **out)
{
    return tensor_create("wgml_tensor_create", ctx, dtype, ndim, shape, NULL, out);
}

wgml_status wgml_tensor_from_data(wgml_context *ctx, wgml_dtype dtype, uint32_t ndim, const size_t *shape, const void *data,
                                  wgml_tensor **out)
{
    if (!data) {
        if (out) *out = NULL;
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_tensor_from_data: data is NULL");
    }
    WGML_CHECK(tensor_create("wgml_tensor_from_data", ctx, dtype, ndim, shape, NULL, out));
    wgml_status s = wgml_tensor_write(*out, 0, data, wgml__nbytes(*out));
    if (s != WGML_OK) {
        wgml_tensor_release(*out);
        *out = NULL;
    }
    return s;
}

static wgml_status read_raw(wgml_tensor *t, size_t lo, size_t hi, uint8_t *dst, size_t skip, size_t bytes);

static wgml_status check_range(const char *fn, const wgml_tensor *t, size_t offset, const void *data, size_t bytes)
{
    if (!t) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: tensor is NULL", fn);
    if (!data && bytes) return wgml__fail(t->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: data is NULL", fn);
    size_t nb = wgml__nbytes(t);
    if (offset > nb || bytes > nb - offset)
        return wgml__fail(t->ctx, WGML_ERROR_SHAPE, "%s: bytes [%zu, %zu) run past the tensor's %zu bytes", fn, offset,
                          offset + bytes, nb);
    return wgml__check_device(t->ctx);
}

wgml_status wgml_tensor_write(wgml_tensor *t, size_t offset, const void *data, size_t bytes)
{
    WGML_CHECK(check_range("wgml_tensor_write", t, offset, data, bytes));
    if (bytes == 0) return WGML_OK;
    wgml_context *ctx = t->ctx;
    WGML_CHECK(wgml__host_room(ctx, "wgml_tensor_write", bytes));   /* the runtime stages a copy */
    /* Queue writes run before anything still being recorded: submit that first. */
    WGML_CHECK(wgml__submit(ctx));
    wgml__wrote(t);
    /* writeBuffer wants 4-byte aligned offsets and sizes: widen to whole words, keeping the
       bytes outside the range as they are. */
    size_t lo = offset & ~(size_t)3, hi = (offset + bytes + 3) & ~(size_t)3;
    if (lo == offset && hi == offset + bytes) {
        wgpuQueueWriteBuffer(ctx->queue, t->buffer, offset, data, bytes);
    } else {
        uint8_t *tmp = malloc(hi - lo);
        if (!tmp) return wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "wgml_tensor_write: out of host memory");
        wgml_status s = read_raw(t, lo, hi, tmp, 0, hi - lo);   /* the words being patched */
        if (s != WGML_OK) { free(tmp); return s; }
        memcpy(tmp + (offset - lo), data, bytes);
        wgpuQueueWriteBuffer(ctx->queue, t->buffer, lo, tmp, hi - lo);
        free(tmp);
    }
    return wgml__check_device(ctx);
}

/* Copies bytes [lo, hi) of t's buffer (4-byte aligned, within its capacity) to dst,
   waiting for everything recorded before. */
static wgml_status read_raw(wgml_tensor *t, size_t lo, size_t hi, uint8_t *dst, size_t skip, size_t bytes)
{
    wgml_context *ctx = t->ctx;
    uint64_t size = hi - lo;
    /* Small reads reuse the context's staging buffer; large ones get their own, so a big
       read-back does not pin its size of host-visible memory for the context's lifetime. */
    enum { KEEP_MAX = 1 << 20 };
    WGPUBuffer staging = NULL;
    bool own = size > KEEP_MAX;
    if (!own && ctx->readback_size >= size) {
        staging = ctx->readback;
    } else {
        uint64_t cap = own ? size : (size < 4096 ? 4096 : size);
        WGML_CHECK(wgml__host_room(ctx, "wgml_tensor_read", cap));
        staging = wgpuDeviceCreateBuffer(ctx->device, &(WGPUBufferDescriptor){
            .label = { "wgml read-back", WGPU_STRLEN }, .usage = WGPUBufferUsage_MapRead | WGPUBufferUsage_CopyDst, .size = cap });
        if (!staging) return wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "wgml_tensor_read: no staging buffer of %llu bytes",
                                        (unsigned long long)size);
        if (!own) {
            if (ctx->readback) wgpuBufferRelease(ctx->readback);
            ctx->readback = staging;
            ctx->readback_size = cap;
        }
    }
    WGPUCommandEncoder enc = wgml__encoder_outside_pass(ctx);
    wgpuCommandEncoderCopyBufferToBuffer(enc, t->buffer, lo, staging, 0, size);
    wgml_status s = wgml__submit(ctx);
    if (s == WGML_OK) s = wgml__map_read(ctx, staging, size, "wgml_tensor_read");
    if (s == WGML_OK) {
        const uint8_t *p = wgpuBufferGetConstMappedRange(staging, 0, size);
        if (p) memcpy(dst, p + skip, bytes);
        else s = wgml__fail(ctx, WGML_ERROR_DEVICE, "wgml_tensor_read: the mapped range is unavailable");
        wgpuBufferUnmap(staging);
    }
    if (own) wgpuBufferRelease(staging);
    return s;
}

wgml_status wgml_tensor_read(wgml_tensor *t, size_t offset, void *data, size_t bytes)
{
    WGML_CHECK(check_range("wgml_tensor_read", t, offset, data, bytes));
    if (bytes == 0) return WGML_OK;
    size_t lo = offset & ~(size_t)3, hi = (offset + bytes + 3) & ~(size_t)3;   /* within capacity */
    return read_raw(t, lo, hi, data, offset - lo, bytes);
}

wgml_status wgml_tensor_zero(wgml_tensor *t)
{
    if (!t) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_tensor_zero: tensor is NULL");
    WGML_CHECK(wgml__check_device(t->ctx));
    wgml__wrote(t);
    wgpuCommandEncoderClearBuffer(wgml__encoder_outside_pass(t->ctx), t->buffer, 0, t->capacity);
    return wgml__after_record(t->ctx);
}

wgml_status wgml_tensor_reshape(wgml_tensor *t, uint32_t ndim, const size_t *shape)
{
    if (!t) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_tensor_reshape: tensor is NULL");
    WGML_CHECK(check_shape(t->ctx, "wgml_tensor_reshape", ndim, shape));
    if (t->packed.bytes)
        return wgml__fail(t->ctx, WGML_ERROR_DTYPE, "wgml_tensor_reshape: the tensor is packed (%s); its shape is fixed",
                          wgml_dtype_name(t->dtype));
    bool of;
    size_t n = numel_of(ndim, shape, &of);
    if (of || n != wgml_tensor_numel(t))
        return wgml__fail(t->ctx, WGML_ERROR_SHAPE, "wgml_tensor_reshape: the new shape has %zu elements, the tensor %zu", n,
                          wgml_tensor_numel(t));
    t->ndim = ndim;
    memset(t->shape, 0, sizeof t->shape);
    memcpy(t->shape, shape, ndim * sizeof *shape);
    return WGML_OK;
}

void wgml_tensor_release(wgml_tensor *t)
{
    if (!t) return;
    if (wgml__deferred_uses(t->ctx, t, NULL)) wgml__defer_error(t->ctx, wgml__deferred_flush(t->ctx));
    wgml__bind_cache_forget_buffer(t->ctx, t->buffer);
    wgpuBufferRelease(t->buffer);
    t->ctx->live_tensors--;
    t->ctx->device_bytes -= t->capacity;
    free(t);
}

wgml_dtype wgml_tensor_dtype(const wgml_tensor *t) { return t ? t->dtype : WGML_F32; }
uint32_t wgml_tensor_ndim(const wgml_tensor *t) { return t ? t->ndim : 0; }
size_t wgml_tensor_dim(const wgml_tensor *t, uint32_t i) { return t && i < t->ndim ? t->shape[i] : 0; }
size_t wgml_tensor_numel(const wgml_tensor *t)
{
    if (!t) return 0;
    bool of;
    return numel_of(t->ndim, t->shape, &of);
}
size_t wgml_tensor_nbytes(const wgml_tensor *t) { return t ? wgml__nbytes(t) : 0; }
wgml_context *wgml_tensor_context(const wgml_tensor *t) { return t ? t->ctx : NULL; }

wgml_status wgml__tensor_create_packed(const char *fn, wgml_context *ctx, const wgml__packed *p, wgml_tensor **out)
{
    return tensor_create(fn, ctx, p->desc.dtype, 2, (size_t[]){ p->desc.rows, p->desc.cols }, p, out);
}
