/*
 * wgml.h - train and run transformer language models on any GPU through WebGPU.
 *
 * wgml is a compute engine whose kernels are all WGSL, dispatched through the standard
 * webgpu.h C API (Dawn). The same code runs on a discrete GPU through Vulkan, Metal or
 * D3D12, and on a plain CPU through Mesa's lavapipe.
 *
 * STEP BY STEP
 * ============
 *     wgml_context *ctx;  wgml_engine *eng;  wgml_tensor *a, *b, *c;
 *     wgml_context_create(NULL, &ctx);                 // best adapter, defaults
 *     wgml_engine_create(ctx, &eng);
 *     size_t shape[] = {1000};
 *     wgml_tensor_from_data(ctx, WGML_F32, 1, shape, host_a, &a);
 *     wgml_tensor_from_data(ctx, WGML_F32, 1, shape, host_b, &b);
 *     wgml_tensor_create(ctx, WGML_F32, 1, shape, &c);
 *     if (wgml_add(eng, a, b, c) != WGML_OK) puts(wgml_last_error(ctx));
 *     wgml_tensor_read(c, host_c, sizeof host_c);      // waits for the GPU
 *     wgml_tensor_release(a); ... wgml_engine_destroy(eng); wgml_context_destroy(ctx);
 *
 * EXECUTION MODEL
 * ===============
 * Every op validates its arguments, records its GPU work and returns without waiting.
 * Work is recorded into one command encoder per context and submitted when something
 * needs it: a read, wgml_context_sync(), wgml_context_flush(), a write from the host, or
 * a size threshold (or after every op, with wgml_context_desc.submit_every_op). Order is
 * always kept: an op sees the results of every op called before it on the same context.
 * Reading a tensor waits for all work recorded before the read.
 *
 * ERROR REPORTING
 * ===============
 * Every fallible call returns a wgml_status. On failure a message naming the argument
 * and the rule is available from wgml_last_error(ctx) until the next failing call on that
 * context. An op that fails validation records and dispatches nothing. Errors raised later
 * by the WebGPU device (out of memory, device lost, internal errors) are returned by the
 * call that meets them or the next call on that context, as WGML_ERROR_DEVICE or
 * WGML_ERROR_OUT_OF_MEMORY, with the driver's message; device loss is permanent, and
 * the context can then only be destroyed.
 *
 * TENSORS
 * =======
 * A tensor is one GPU buffer plus a dtype and a shape of 1 to 4 dimensions, dense and
 * row-major (the last dimension is contiguous). "numel" is the product of the shape.
 * Unless an op says otherwise, its tensors are f32. Shapes are checked by element count
 * where the seed API only asks for "the same length", and by dimension where an op needs
 * a layout (matrices, attention). wgml_tensor_reshape changes the shape metadata only.
 *
 * THREADS
 * =======
 * A context and everything created from it (engines, tensors) may be used by one thread
 * at a time; different contexts may be used by different threads concurrently. The
 * library keeps no global mutable state except the thread-local message of
 * wgml_last_error(NULL).
 *
 * ADAPTER CHOICE
 * ==============
 * Discrete GPU first, then integrated, then CPU (lavapipe). The environment variables
 * WGML_ADAPTER=<substring of the adapter's name or description> and
 * WGML_BACKEND=vulkan|metal|d3d12|d3d11|opengl|opengles override the choice, as do the
 * matching fields of wgml_context_desc (the descriptor wins over the environment).
 */
#ifndef WGML_H
#define WGML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(WGML_BUILDING) && defined(__GNUC__)
#define WGML_API __attribute__((visibility("default")))
#else
#define WGML_API
#endif

#define WGML_VERSION_MAJOR 0
#define WGML_VERSION_MINOR 1
#define WGML_VERSION_PATCH 0

/* ------------------------------------------------------------------------------------ */
/* Status codes                                                                          */
/* ------------------------------------------------------------------------------------ */

typedef enum wgml_status {
    WGML_OK = 0,
    WGML_ERROR_INVALID_ARGUMENT, /* a NULL pointer, a value out of its documented range */
    WGML_ERROR_SHAPE,            /* shapes or lengths that do not fit together           */
    WGML_ERROR_DTYPE,            /* a tensor of the wrong dtype                          */
    WGML_ERROR_LIMIT,            /* beyond a limit of the device (the message names it)  */
    WGML_ERROR_ALIAS,            /* an output shares memory with an input where unsafe   */
    WGML_ERROR_CONTEXT,          /* objects from different contexts mixed in one call    */
    WGML_ERROR_NO_ADAPTER,       /* no WebGPU adapter matched                            */
    WGML_ERROR_DEVICE,           /* the device reported an error, or was lost            */
    WGML_ERROR_OUT_OF_MEMORY,    /* the device could not allocate                        */
    WGML_ERROR_TIMEOUT,          /* the device did not answer within the timeout         */
    WGML_ERROR_UNSUPPORTED,      /* the adapter lacks a feature this call needs          */
    WGML_ERROR_FORMAT,           /* a malformed file or document                         */
    WGML_ERROR_IO                /* a file could not be read or written                  */
} wgml_status;

/* A short constant name for a status, e.g. "WGML_ERROR_SHAPE". Never NULL. */
WGML_API const char *wgml_status_string(wgml_status status);

/* "major.minor.patch" of the library. */
WGML_API const char *wgml_version(void);

/* ------------------------------------------------------------------------------------ */
/* Context: adapter, device, queue, errors                                              */
/* ------------------------------------------------------------------------------------ */

typedef struct wgml_context wgml_context;

/* Zero-initialise, then set what you need; every zero field means its default. */
typedef struct wgml_context_desc {
    /* Substring of the adapter's name or description to pick (case-insensitive).
       Default: $WGML_ADAPTER, else the best adapter (discrete > integrated > CPU). */
    const char *adapter;
    /* "vulkan", "metal", "d3d12", "d3d11", "opengl", "opengles". Default: $WGML_BACKEND,
       else any backend. */
    const char *backend;
    /* Opt-in speed: Dawn's "disable_robustness" (no bounds clamping of buffer accesses;
       wgml's kernels stay in bounds) and "disable_workgroup_init" (no zeroing of
       workgroup memory; wgml's kernels initialise what they read). Default: off. */
    bool fast_unsafe;
    /* Submit after every op instead of batching. Default: batch (see EXECUTION MODEL). */
    bool submit_every_op;
    /* How long a wait for the device may take before WGML_ERROR_TIMEOUT. Default 60000. */
    uint32_t timeout_ms;
} wgml_context_desc;

/* Creates a context on the chosen adapter with the adapter's full limits and the features
   wgml can use when offered (shader-f16, subgroups, timestamp-query).
   desc may be NULL (all defaults). On failure *out is NULL and the message is in
   wgml_last_error(NULL).
   Errors: WGML_ERROR_INVALID_ARGUMENT (out NULL, unknown backend name),
           WGML_ERROR_NO_ADAPTER (nothing matched), WGML_ERROR_DEVICE, WGML_ERROR_TIMEOUT. */
WGML_API wgml_status wgml_context_create(const wgml_context_desc *desc, wgml_context **out);

/* Waits for submitted work (bounded by the timeout), then frees the context. Engines and
   tensors of the context must be released first. NULL is a no-op. */
WGML_API void wgml_context_destroy(wgml_context *ctx);

/* The message of the last failing call on ctx ("" if none). With ctx NULL, the message of
   the last failing call of this thread that had no context (e.g. wgml_context_create). */
WGML_API const char *wgml_last_error(const wgml_context *ctx);

/* Submits all recorded work without waiting. */
WGML_API wgml_status wgml_context_flush(wgml_context *ctx);

/* Submits all recorded work and waits until the device has finished it.
   Errors: WGML_ERROR_TIMEOUT, WGML_ERROR_DEVICE, WGML_ERROR_OUT_OF_MEMORY. */
WGML_API wgml_status wgml_context_sync(wgml_context *ctx);

typedef struct wgml_adapter_info {
    char name[256];         /* e.g. "NVIDIA H200", "llvmpipe (LLVM 15.0.6, 256 bits)" */
    char vendor[128];
    char architecture[128];
    char driver[256];       /* the adapter's description: driver name and version */
    const char *backend;    /* "vulkan", "metal", ... */
    const char *type;       /* "discrete GPU", "integrated GPU", "CPU", "unknown" */
    uint32_t vendor_id, device_id;
    uint32_t subgroup_min_size, subgroup_max_size;
    uint64_t max_buffer_size;
    uint64_t max_storage_buffer_binding_size;
    uint32_t max_storage_buffers_per_stage;
    uint32_t max_workgroup_storage_size;
    uint32_t max_invocations_per_workgroup;
    uint32_t max_workgroup_size_x;
    uint32_t max_workgroups_per_dimension;
    bool shader_f16;        /* features enabled on the device */
    bool subgroups;
    bool timestamp_query;
    bool fast_unsafe;       /* robustness and workgroup zeroing turned off */
} wgml_adapter_info;

/* Fills *info with what the context's device has. */
WGML_API wgml_status wgml_context_info(const wgml_context *ctx, wgml_adapter_info *info);

/* Counters of a context, for tests and tuning. */
typedef struct wgml_context_stats {
    uint64_t commands;     /* GPU commands recorded: dispatches, copies, clears */
    uint64_t submits;      /* command buffers submitted */
    long live_tensors;     /* tensors created and not yet released */
    long live_engines;
} wgml_context_stats;

WGML_API wgml_status wgml_context_stats_get(const wgml_context *ctx, wgml_context_stats *stats);

/* ------------------------------------------------------------------------------------ */
/* Tensors                                                                               */
/* ------------------------------------------------------------------------------------ */

typedef struct wgml_tensor wgml_tensor;

typedef enum wgml_dtype {
    WGML_F32 = 0,
    WGML_F16,   /* storage only, except where an op says it reads it */
    WGML_BF16,  /* storage only, except where an op says it reads it */
    WGML_U32,
    WGML_U8
} wgml_dtype;

#define WGML_MAX_DIMS 4

/* Bytes per element of dtype (1, 2 or 4); 0 for an unknown dtype. */
WGML_API size_t wgml_dtype_size(wgml_dtype dtype);
/* "f32", "f16", "bf16", "u32", "u8", or "?" */
WGML_API const char *wgml_dtype_name(wgml_dtype dtype);

/* Creates a tensor of the given dtype and shape (ndim 1..4, every dimension >= 1). Its
   contents are undefined until written.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL, ndim out of range, a zero dimension, unknown
           dtype), WGML_ERROR_LIMIT (byte size over maxStorageBufferBindingSize or
           maxBufferSize, or overflowing size_t), WGML_ERROR_OUT_OF_MEMORY. */
WGML_API wgml_status wgml_tensor_create(wgml_context *ctx, wgml_dtype dtype, uint32_t ndim,
                                        const size_t *shape, wgml_tensor **out);

/* wgml_tensor_create, then wgml_tensor_write of numel * dtype size bytes from data. */
WGML_API wgml_status wgml_tensor_from_data(wgml_context *ctx, wgml_dtype dtype, uint32_t ndim,
                                           const size_t *shape, const void *data,
                                           wgml_tensor **out);

/* Copies bytes from host memory into the tensor starting at byte offset. Recorded work is
   submitted first, so the write lands after every op called before it.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL), WGML_ERROR_SHAPE (offset + bytes beyond the
           tensor's byte size). */
WGML_API wgml_status wgml_tensor_write(wgml_tensor *t, size_t offset, const void *data,
                                       size_t bytes);

/* Copies bytes of the tensor starting at byte offset into host memory; waits for every
   op called before it.
   Errors: as wgml_tensor_write, plus WGML_ERROR_TIMEOUT and device errors. */
WGML_API wgml_status wgml_tensor_read(wgml_tensor *t, size_t offset, void *data, size_t bytes);

/* Sets every byte of the tensor to zero (recorded like an op). */
WGML_API wgml_status wgml_tensor_zero(wgml_tensor *t);

/* Gives the tensor a new shape with the same element count (metadata only).
   Errors: WGML_ERROR_INVALID_ARGUMENT, WGML_ERROR_SHAPE (another element count). */
WGML_API wgml_status wgml_tensor_reshape(wgml_tensor *t, uint32_t ndim, const size_t *shape);

/* Frees the tensor; work already recorded that uses it still completes. NULL is a no-op. */
WGML_API void wgml_tensor_release(wgml_tensor *t);

WGML_API wgml_dtype wgml_tensor_dtype(const wgml_tensor *t);
WGML_API uint32_t wgml_tensor_ndim(const wgml_tensor *t);
/* Dimension i (0-based); 0 when i >= ndim. */
WGML_API size_t wgml_tensor_dim(const wgml_tensor *t, uint32_t i);
WGML_API size_t wgml_tensor_numel(const wgml_tensor *t);
WGML_API size_t wgml_tensor_nbytes(const wgml_tensor *t);
WGML_API wgml_context *wgml_tensor_context(const wgml_tensor *t);

/* ------------------------------------------------------------------------------------ */
/* Engine: compiled kernels and the ops that dispatch them                               */
/* ------------------------------------------------------------------------------------ */

typedef struct wgml_engine wgml_engine;

/* Creates an engine for ctx's device. Each kernel is compiled at most once per engine,
   the first time an op needs it (so an engine costs nothing for kernels it never uses);
   wgml_engine_warmup compiles them all up front.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL). */
WGML_API wgml_status wgml_engine_create(wgml_context *ctx, wgml_engine **out);

/* Compiles every kernel variant the ops use by default, so later calls never pause to
   compile. Errors: WGML_ERROR_DEVICE (a kernel failed to compile: a bug, please report). */
WGML_API wgml_status wgml_engine_warmup(wgml_engine *engine);

/* Frees the engine's pipelines. Work already recorded completes. NULL is a no-op. */
WGML_API void wgml_engine_destroy(wgml_engine *engine);

/* Common rules for every op below:
   - NULL engine or tensor arguments: WGML_ERROR_INVALID_ARGUMENT.
   - Tensors of another context than the engine's: WGML_ERROR_CONTEXT.
   - f32 tensors unless stated; another dtype: WGML_ERROR_DTYPE.
   - Element-wise ops accept any length >= 1 and compare lengths by element count
     (WGML_ERROR_SHAPE when they differ).
   - Aliasing: element-wise ops allow out to be the same tensor as one or more inputs (the
     op then works in place); ops that say "no aliasing" return WGML_ERROR_ALIAS. */

/* ---- element-wise arithmetic (src/ops/elementwise.c) -------------------------------- */

/* out = a + b, element-wise; a, b and out have the same length. */
WGML_API wgml_status wgml_add(wgml_engine *e, const wgml_tensor *a, const wgml_tensor *b,
                              wgml_tensor *out);
/* out = a * b, element-wise. */
WGML_API wgml_status wgml_mul(wgml_engine *e, const wgml_tensor *a, const wgml_tensor *b,
                              wgml_tensor *out);
/* out = a - b, element-wise. */
WGML_API wgml_status wgml_sub(wgml_engine *e, const wgml_tensor *a, const wgml_tensor *b,
                              wgml_tensor *out);

/* Copies all of src (any dtype) into dst (any dtype) starting at byte offset dst_offset:
   bytes [dst_offset, dst_offset + nbytes(src)) of dst become src's bytes.
   Errors: WGML_ERROR_SHAPE (the copy would run past the end of dst),
           WGML_ERROR_INVALID_ARGUMENT (dst_offset or nbytes(src) not a multiple of 4),
           WGML_ERROR_ALIAS (src and dst are the same tensor). */
WGML_API wgml_status wgml_copy_tensor(wgml_engine *e, const wgml_tensor *src, wgml_tensor *dst,
                                      size_t dst_offset);

#ifdef __cplusplus
}
#endif
#endif /* WGML_H */
