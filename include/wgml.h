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

/* ---- activations and element-wise gradients (src/ops/activation.c) ----------------- */

/* Gradients of a + b: grad_a = grad_b = grad_out. */
WGML_API wgml_status wgml_add_backward(wgml_engine *e, const wgml_tensor *grad_out, wgml_tensor *grad_a,
                                       wgml_tensor *grad_b);
/* Gradients of a - b: grad_a = grad_out, grad_b = -grad_out. */
WGML_API wgml_status wgml_sub_backward(wgml_engine *e, const wgml_tensor *grad_out, wgml_tensor *grad_a,
                                       wgml_tensor *grad_b);
/* Gradients of a * b: grad_a = grad_out * b, grad_b = grad_out * a. */
WGML_API wgml_status wgml_mul_backward(wgml_engine *e, const wgml_tensor *grad_out, const wgml_tensor *a,
                                       const wgml_tensor *b, wgml_tensor *grad_a, wgml_tensor *grad_b);
/* out = x * sigmoid(x). */
WGML_API wgml_status wgml_silu(wgml_engine *e, const wgml_tensor *input, wgml_tensor *out);
/* grad_in = grad_out * s * (1 + x * (1 - s)), s = sigmoid(input). */
WGML_API wgml_status wgml_silu_backward(wgml_engine *e, const wgml_tensor *grad_out, const wgml_tensor *input,
                                        wgml_tensor *grad_in);
/* out = max(x, 0). */
WGML_API wgml_status wgml_relu(wgml_engine *e, const wgml_tensor *input, wgml_tensor *out);
/* grad_in = grad_out where input > 0, else 0. */
WGML_API wgml_status wgml_relu_backward(wgml_engine *e, const wgml_tensor *grad_out, const wgml_tensor *input,
                                        wgml_tensor *grad_in);
/* out = SiLU(up) * gate. */
WGML_API wgml_status wgml_silu_gate_fused(wgml_engine *e, const wgml_tensor *up, const wgml_tensor *gate,
                                          wgml_tensor *out);
/* Gradients of out = SiLU(up) * gate: grad_up = grad_out * gate * SiLU'(up),
   grad_gate = grad_out * SiLU(up). */
WGML_API wgml_status wgml_silu_gate_backward(wgml_engine *e, const wgml_tensor *up, const wgml_tensor *gate,
                                             const wgml_tensor *grad_out, wgml_tensor *grad_up,
                                             wgml_tensor *grad_gate);

/* ---- selection, convolution (src/ops/select.c, src/ops/conv.c) ---------------------- */

/* Writes the indices (u32) of the k largest values of input (f32, numel n) into out_idx
   (u32, numel >= k), largest first. */
WGML_API wgml_status wgml_top_k(wgml_engine *e, const wgml_tensor *input, wgml_tensor *out_idx, uint32_t k);
/* Depthwise conv, kernel 3, padding 1: out[d, s] = bias[d] + sum_j weight[d, j] * input[d, s + j - 1];
   input/out [dim, seq_len], weight [dim, 3], bias [dim]. */
WGML_API wgml_status wgml_conv1d(wgml_engine *e, const wgml_tensor *input, const wgml_tensor *weight,
                                 const wgml_tensor *bias, wgml_tensor *out);

/* ---- quantization (src/ops/quant.c) -------------------------------------------------- */

/* out[i] = (float)byte i of input (u32 or u8 tensor, bytes in little-endian order). */
WGML_API wgml_status wgml_dequantize(wgml_engine *e, const wgml_tensor *input, wgml_tensor *out);
/* 8-bit affine, groups of 64 (MLX layout): out[i] = byte(weight, i) * scales[i/64] + biases[i/64]. */
WGML_API wgml_status wgml_affine_dequantize(wgml_engine *e, const wgml_tensor *weight, const wgml_tensor *scales,
                                            const wgml_tensor *biases, wgml_tensor *out);
/* As wgml_affine_dequantize with bits 4 or 8 and group_size 32, 64 or 128. */
WGML_API wgml_status wgml_affine_dequantize_with(wgml_engine *e, const wgml_tensor *weight,
                                                 const wgml_tensor *scales, const wgml_tensor *biases,
                                                 wgml_tensor *out, uint32_t bits, uint32_t group_size);

/* ---- matrix products (src/ops/matmul.c) ---------------------------------------------- */

/* out[M, N] = a[M, K] @ b[K, N]. */
WGML_API wgml_status wgml_matmul(wgml_engine *e, const wgml_tensor *a, const wgml_tensor *b, wgml_tensor *out);
/* out[M, N] = a[M, K] @ b[N, K]^T. */
WGML_API wgml_status wgml_matmul_bt(wgml_engine *e, const wgml_tensor *a, const wgml_tensor *b, wgml_tensor *out);
/* out[M, N] = a[K, M]^T @ b[K, N]. */
WGML_API wgml_status wgml_matmul_at(wgml_engine *e, const wgml_tensor *a, const wgml_tensor *b, wgml_tensor *out);

/* ---- normalisation and softmax (src/ops/norm.c, src/ops/softmax.c) ------------------- */

/* out = x / sqrt(mean(x^2) + 1e-5) * weight over the last dimension. */
WGML_API wgml_status wgml_rms_norm(wgml_engine *e, const wgml_tensor *input, const wgml_tensor *weight,
                                   wgml_tensor *out);
WGML_API wgml_status wgml_rms_norm_eps(wgml_engine *e, const wgml_tensor *input, const wgml_tensor *weight,
                                       wgml_tensor *out, float eps);
/* out = RMSNorm(x + residual) * weight (eps 1e-5). */
WGML_API wgml_status wgml_rms_norm_residual(wgml_engine *e, const wgml_tensor *x, const wgml_tensor *residual,
                                            const wgml_tensor *weight, wgml_tensor *out);
/* As wgml_rms_norm_residual with a caller's eps; also writes x + residual into sum_out
   when sum_out is not NULL. */
WGML_API wgml_status wgml_rms_norm_residual_with(wgml_engine *e, const wgml_tensor *x,
                                                 const wgml_tensor *residual, const wgml_tensor *weight,
                                                 wgml_tensor *out, wgml_tensor *sum_out, float eps);
/* Gradients of out = RMSNorm(input) * weight: grad_in (shape of input) and grad_weight
   (shape of weight, summed over rows, written not accumulated; may be NULL). */
WGML_API wgml_status wgml_rms_norm_backward(wgml_engine *e, const wgml_tensor *grad_out, const wgml_tensor *input,
                                            const wgml_tensor *weight, wgml_tensor *grad_in,
                                            wgml_tensor *grad_weight, float eps);
/* Softmax over the last dimension. */
WGML_API wgml_status wgml_softmax(wgml_engine *e, const wgml_tensor *input, wgml_tensor *out);
/* grad_in = s * (grad_out - sum(grad_out * s)), s = final_out. */
WGML_API wgml_status wgml_softmax_backward(wgml_engine *e, const wgml_tensor *grad_out, const wgml_tensor *final_out,
                                           wgml_tensor *grad_in);

/* ---- rotary embeddings (src/ops/rope.c) ---------------------------------------------- */

/* Rotate-half RoPE, theta 10000, in place. tensor is [batch, seq, ...], [seq, hidden] or
   [hidden]; every head vector of token s gets position pos + s. */
WGML_API wgml_status wgml_rope(wgml_engine *e, wgml_tensor *tensor, uint32_t head_dim, uint32_t pos);
WGML_API wgml_status wgml_rope_theta(wgml_engine *e, wgml_tensor *tensor, uint32_t head_dim, uint32_t pos,
                                     float theta);

typedef enum wgml_rope_pairing {
    WGML_ROPE_ROTATE_HALF = 0,  /* pairs (i, i + head_dim/2): Llama, NeoX */
    WGML_ROPE_INTERLEAVED = 1   /* pairs (2i, 2i + 1): GPT-J */
} wgml_rope_pairing;

typedef struct wgml_rope_options {
    uint32_t head_dim;            /* required: even, 2..256 */
    uint32_t pos;                 /* position of the first token */
    float theta;                  /* 0 means 10000 */
    wgml_rope_pairing pairing;
    const wgml_tensor *inv_freq;  /* optional f32 [head_dim/2]; replaces theta^(-2i/head_dim) */
    bool inverse;                 /* rotate by -angle: the gradient of rope */
} wgml_rope_options;

WGML_API wgml_status wgml_rope_with(wgml_engine *e, wgml_tensor *tensor, const wgml_rope_options *opts);
/* The gradient of wgml_rope_theta: the inverse rotation of grad, in place. */
WGML_API wgml_status wgml_rope_backward(wgml_engine *e, wgml_tensor *grad, uint32_t head_dim, uint32_t pos,
                                        float theta);

/* ---- attention (src/ops/attention.c) -------------------------------------------------- */

typedef struct wgml_attention_options {
    bool causal;              /* key j visible to query i only when j <= i + causal_offset */
    uint32_t causal_offset;   /* absolute position of query 0 (e.g. tokens already cached) */
    uint32_t window;          /* 0: unlimited; else |i + causal_offset - j| < window */
    float dropout_prob;       /* 0: no dropout */
    uint64_t seed;            /* dropout decisions are a pure function of this and the indices */
    float scale;              /* 0 means 1/sqrt(head_dim) */
} wgml_attention_options;

/* Single head: q, k, v, out [seq_len, head_dim]. */
WGML_API wgml_status wgml_flash_attention(wgml_engine *e, const wgml_tensor *q, const wgml_tensor *k,
                                          const wgml_tensor *v, wgml_tensor *out, bool causal);
/* q, out [batch, seq_q, num_heads, head_dim]; k, v [batch, seq_k, num_kv_heads, head_dim];
   mask (may be NULL) additive [batch|1, heads|1, seq_q|1, seq_k]. */
WGML_API wgml_status wgml_flash_attention_v2(wgml_engine *e, const wgml_tensor *q, const wgml_tensor *k,
                                             const wgml_tensor *v, wgml_tensor *out, bool causal,
                                             float dropout_prob, uint64_t seed, const wgml_tensor *mask);
WGML_API wgml_status wgml_flash_attention_v2_with(wgml_engine *e, const wgml_tensor *q, const wgml_tensor *k,
                                                  const wgml_tensor *v, wgml_tensor *out,
                                                  const wgml_attention_options *opts, const wgml_tensor *mask);
WGML_API wgml_status wgml_flash_attention_backward(wgml_engine *e, const wgml_tensor *q, const wgml_tensor *k,
                                                   const wgml_tensor *v, const wgml_tensor *out,
                                                   const wgml_tensor *grad_out, wgml_tensor *grad_q,
                                                   wgml_tensor *grad_k, wgml_tensor *grad_v, bool causal);
WGML_API wgml_status wgml_flash_attention_v2_backward(wgml_engine *e, const wgml_tensor *q, const wgml_tensor *k,
                                                      const wgml_tensor *v, const wgml_tensor *out,
                                                      const wgml_tensor *grad_out, wgml_tensor *grad_q,
                                                      wgml_tensor *grad_k, wgml_tensor *grad_v, bool causal);
WGML_API wgml_status wgml_flash_attention_v2_backward_with(wgml_engine *e, const wgml_tensor *q,
                                                           const wgml_tensor *k, const wgml_tensor *v,
                                                           const wgml_tensor *out, const wgml_tensor *grad_out,
                                                           wgml_tensor *grad_q, wgml_tensor *grad_k,
                                                           wgml_tensor *grad_v,
                                                           const wgml_attention_options *opts,
                                                           const wgml_tensor *mask);

/* ---- optimizers, losses, gradient utilities (src/ops/optim.c, loss.c, grad.c) -------- */

typedef struct wgml_adam_params {
    float lr, beta1, beta2, eps, weight_decay;
    uint32_t t;               /* 1-based step; 0 is an error */
} wgml_adam_params;

/* weight -= lr * grad. */
WGML_API wgml_status wgml_sgd_update(wgml_engine *e, wgml_tensor *weight, const wgml_tensor *grad, float lr);
/* AdamW as torch.optim.AdamW: weight, m, v updated in place. */
WGML_API wgml_status wgml_adamw_update(wgml_engine *e, wgml_tensor *weight, const wgml_tensor *grad, wgml_tensor *m,
                                       wgml_tensor *v, const wgml_adam_params *params);
/* AdamW over count parameter tensors in few dispatches. */
WGML_API wgml_status wgml_adamw_update_multi(wgml_engine *e, wgml_tensor *const *weights,
                                             const wgml_tensor *const *grads, wgml_tensor *const *m,
                                             wgml_tensor *const *v, size_t count,
                                             const wgml_adam_params *params);
/* out = 0.5 * (pred - target)^2, element-wise. */
WGML_API wgml_status wgml_mse_loss(wgml_engine *e, const wgml_tensor *pred, const wgml_tensor *target,
                                   wgml_tensor *out);
/* grad_in = pred - target. */
WGML_API wgml_status wgml_mse_loss_backward(wgml_engine *e, const wgml_tensor *pred, const wgml_tensor *target,
                                            wgml_tensor *grad_in);
/* loss_out[0] = -log(softmax(logits)[target]) for one logits vector. */
WGML_API wgml_status wgml_cross_entropy_loss(wgml_engine *e, const wgml_tensor *logits, uint32_t target,
                                             wgml_tensor *loss_out);
/* grad_out = softmax(logits) - one_hot(target). */
WGML_API wgml_status wgml_cross_entropy_backward(wgml_engine *e, const wgml_tensor *logits, uint32_t target,
                                                 wgml_tensor *grad_out);
/* Batched, fused cross-entropy: logits [N, V], targets u32 [N]; rows whose target equals
   ignore_index are skipped. Writes (each may be NULL): losses [N] (0 for ignored rows),
   mean_loss [1] (mean over counted rows; 0 if none), grad_logits [N, V] = d mean_loss /
   d logits (may be the logits tensor itself). */
WGML_API wgml_status wgml_cross_entropy_batched(wgml_engine *e, const wgml_tensor *logits,
                                                const wgml_tensor *targets, uint32_t ignore_index,
                                                wgml_tensor *losses, wgml_tensor *mean_loss,
                                                wgml_tensor *grad_logits);
/* out = input^2, element-wise. */
WGML_API wgml_status wgml_gradient_norm_squared(wgml_engine *e, const wgml_tensor *input, wgml_tensor *out);
/* grad *= scale. */
WGML_API wgml_status wgml_clip_grad_by_norm(wgml_engine *e, wgml_tensor *grad, float scale);
/* accum += new_grad. */
WGML_API wgml_status wgml_gradient_accumulate(wgml_engine *e, wgml_tensor *accum_grad, const wgml_tensor *new_grad);
/* grad *= scale. */
WGML_API wgml_status wgml_gradient_scale(wgml_engine *e, wgml_tensor *grad, float scale);
/* norm_out[0] = sqrt(sum of squares of every element of the count tensors), on the GPU. */
WGML_API wgml_status wgml_global_norm(wgml_engine *e, const wgml_tensor *const *tensors, size_t count,
                                      wgml_tensor *norm_out);
/* Scales every grads[i] by min(1, max_norm / (norm[0] + 1e-6)), reading norm on the GPU. */
WGML_API wgml_status wgml_clip_grad_by_global_norm(wgml_engine *e, wgml_tensor *const *grads, size_t count,
                                                   const wgml_tensor *norm, float max_norm);

/* ---- embeddings (src/ops/embedding.c) ------------------------------------------------ */

/* out[i, :] = table[ids[i], :]; table [V, D], ids u32 [N], out [N, D]. */
WGML_API wgml_status wgml_embedding(wgml_engine *e, const wgml_tensor *table, const wgml_tensor *ids,
                                    wgml_tensor *out);
/* grad_table[v, :] = sum of grad_out[i, :] over i with ids[i] == v (written, deterministic). */
WGML_API wgml_status wgml_embedding_backward(wgml_engine *e, const wgml_tensor *grad_out, const wgml_tensor *ids,
                                             wgml_tensor *grad_table);

/* ---- files: safetensors, JSON configs, tokenizers (src/io/) ---- */

/* FILES
   =====
   Readers of the files a Hugging Face checkpoint comes as: safetensors weights (one file
   or sharded with model.safetensors.index.json), config.json, tokenizer.json; and a
   safetensors writer for checkpoints. These are host-side and need no context.

   Every file is treated as hostile: each offset, size and count is checked before it is
   used, with overflow-safe arithmetic, and every parser is fuzzed (tests/fuzz/). A
   malformed file returns WGML_ERROR_FORMAT and wgml_last_error(NULL) reads
   "<file>: <problem>", e.g. "model.safetensors: data_offsets [10, 8] of tensor 'w' are
   reversed" (names taken from a file are printed escaped and shortened). A file that
   cannot be opened or read returns WGML_ERROR_IO; host memory exhaustion
   WGML_ERROR_OUT_OF_MEMORY; NULL arguments WGML_ERROR_INVALID_ARGUMENT. On failure *out
   is set to NULL.

   Objects returned here are immutable once opened: any number of threads may read the
   same one at once (the tokenizer's encode and decode included). */

/* ---- safetensors -------------------------------------------------------------------

   The format: an 8-byte little-endian header length N; N bytes of UTF-8 JSON starting with
   '{', an object mapping each tensor name to {"dtype", "shape", "data_offsets": [begin,
   end]} plus an optional "__metadata__" object of string values, padded with trailing
   spaces; then the data, row-major and little-endian. Offsets are relative to the start
   of the data. wgml enforces what the format specifies: keys are unique; the header is at
   most 100,000,000 bytes; end - begin == numel * bits / 8; and the tensors' byte ranges
   cover the data exactly, with no gap, overlap or trailing byte (empty tensors and scalars,
   shape [], are allowed). */

typedef enum wgml_safetensors_dtype {
    WGML_ST_BOOL = 0, WGML_ST_U8, WGML_ST_I8,
    WGML_ST_F8_E5M2, WGML_ST_F8_E4M3, WGML_ST_F8_E8M0, WGML_ST_F8_E4M3FNUZ, WGML_ST_F8_E5M2FNUZ,
    WGML_ST_I16, WGML_ST_U16, WGML_ST_F16, WGML_ST_BF16,
    WGML_ST_I32, WGML_ST_U32, WGML_ST_F32,
    WGML_ST_I64, WGML_ST_U64, WGML_ST_F64, WGML_ST_C64,
    WGML_ST_F4, WGML_ST_F6_E2M3, WGML_ST_F6_E3M2,   /* sub-byte: 4 and 6 bits, packed */
    WGML_ST_DTYPE_COUNT
} wgml_safetensors_dtype;

/* The file's spelling, e.g. "F32", "BF16"; "?" for a value out of range. */
WGML_API const char *wgml_safetensors_dtype_name(wgml_safetensors_dtype dtype);
/* Bits per element (4, 6, 8, 16, 32 or 64); 0 for a value out of range. */
WGML_API uint32_t wgml_safetensors_dtype_bits(wgml_safetensors_dtype dtype);
/* The wgml dtype with the same element layout (F32, F16, BF16, U32, U8 map to WGML_F32,
   WGML_F16, WGML_BF16, WGML_U32, WGML_U8): true and *out, or false for any other. */
WGML_API bool wgml_safetensors_dtype_to_wgml(wgml_safetensors_dtype dtype, wgml_dtype *out);
/* The reverse; WGML_ST_DTYPE_COUNT for an unknown wgml dtype. */
WGML_API wgml_safetensors_dtype wgml_safetensors_dtype_from_wgml(wgml_dtype dtype);

#define WGML_SAFETENSORS_MAX_DIMS 8             /* more dimensions: WGML_ERROR_FORMAT */
#define WGML_SAFETENSORS_MAX_HEADER 100000000u  /* bytes, as the format's reference reader */

/* One tensor of a file (or of a checkpoint). */
typedef struct wgml_file_tensor {
    const char *name;          /* NUL-terminated; valid until the file is closed */
    wgml_safetensors_dtype dtype;
    uint32_t ndim;             /* 0 (a scalar) to WGML_SAFETENSORS_MAX_DIMS */
    uint64_t shape[WGML_SAFETENSORS_MAX_DIMS];   /* 0 past ndim */
    uint64_t numel;            /* product of the shape: 1 for a scalar, 0 when a dimension is 0 */
    uint64_t nbytes;           /* numel * bits / 8 */
    uint64_t offset;           /* byte offset of the tensor's data in its file */
    uint32_t shard;            /* index of its file in a checkpoint; 0 for a lone file */
} wgml_file_tensor;

typedef struct wgml_safetensors wgml_safetensors;

/* Opens and validates a safetensors file. The file is memory-mapped read-only: tensor data
   is read from disk on first touch, and the file must not be truncated while open (that
   raises SIGBUS on access, as with any mapping).
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL), WGML_ERROR_IO, WGML_ERROR_FORMAT,
           WGML_ERROR_OUT_OF_MEMORY. */
WGML_API wgml_status wgml_safetensors_open(const char *path, wgml_safetensors **out);
/* As wgml_safetensors_open on size bytes in memory, which must stay valid and unchanged
   until the object is closed (nothing is copied). name is used in messages (NULL: "memory"). */
WGML_API wgml_status wgml_safetensors_open_memory(const void *data, size_t size, const char *name,
                                                  wgml_safetensors **out);
/* Unmaps and frees. NULL is a no-op. */
WGML_API void wgml_safetensors_close(wgml_safetensors *st);

/* Number of tensors (the header's order; "__metadata__" is not a tensor). */
WGML_API size_t wgml_safetensors_count(const wgml_safetensors *st);
/* Fills *info for tensor i. Errors: WGML_ERROR_INVALID_ARGUMENT (NULL, i >= count). */
WGML_API wgml_status wgml_safetensors_info(const wgml_safetensors *st, size_t i, wgml_file_tensor *info);
/* Index of the tensor named name, or -1. */
WGML_API int64_t wgml_safetensors_find(const wgml_safetensors *st, const char *name);
/* Pointer to tensor i's nbytes bytes (read-only, little-endian, possibly unaligned: files
   from wgml_safetensors_write align every tensor whose element is at most 8 bytes to its
   element size relative to the file start); NULL when i >= count. */
WGML_API const void *wgml_safetensors_data(const wgml_safetensors *st, size_t i);
/* The "__metadata__" object: its number of entries, and entry i's key and value
   (NUL-terminated, valid until close). Errors: WGML_ERROR_INVALID_ARGUMENT. */
WGML_API size_t wgml_safetensors_metadata_count(const wgml_safetensors *st);
WGML_API wgml_status wgml_safetensors_metadata_item(const wgml_safetensors *st, size_t i, const char **key,
                                                    const char **value);
/* The metadata value of key, or NULL. */
WGML_API const char *wgml_safetensors_metadata(const wgml_safetensors *st, const char *key);

/* One tensor to write. Zero-initialise, then set the fields. */
typedef struct wgml_safetensors_entry {
    const char *name;          /* unique, valid UTF-8, not "__metadata__" */
    wgml_safetensors_dtype dtype;
    uint32_t ndim;             /* 0 (a scalar) to WGML_SAFETENSORS_MAX_DIMS */
    uint64_t shape[WGML_SAFETENSORS_MAX_DIMS];
    const void *data;          /* numel * bits / 8 bytes; may be NULL when that is 0 */
} wgml_safetensors_entry;

/* Writes n tensors to path as a safetensors file, atomically: into "<path>.tmp.<pid>",
   flushed to disk, then renamed over path (an existing file is replaced only on success).
   metadata_json, when not NULL, is a JSON object of string values stored as
   "__metadata__" (e.g. "{\"format\":\"pt\"}"). Tensors are laid out by decreasing element
   size (ties keep the order of entries) after a header padded to a multiple of 8 bytes, so
   every tensor is aligned to its element size.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL path, NULL entries with n > 0, a bad entry
           or metadata_json: the message names entries[i] and the rule), WGML_ERROR_IO. */
WGML_API wgml_status wgml_safetensors_write(const char *path, const wgml_safetensors_entry *entries, size_t n,
                                            const char *metadata_json);

/* ---- checkpoints: one or more safetensors files ---------------------------------------

   A Hugging Face checkpoint is either one model.safetensors or shards listed by
   model.safetensors.index.json: {"metadata": {...}, "weight_map": {"<tensor>": "<file>"}}.
   Shard names must be plain file names in the index's folder (no '/', no "..": an index
   cannot reach files elsewhere). Every tensor the weight_map lists must be in the shard it
   names, and no tensor may be in two shards. */

typedef struct wgml_checkpoint wgml_checkpoint;

/* path: a folder (holding model.safetensors.index.json, else model.safetensors), an
   index file (a name ending in ".json"), or one safetensors file.
   Errors: as wgml_safetensors_open, for the index and for every shard. */
WGML_API wgml_status wgml_checkpoint_open(const char *path, wgml_checkpoint **out);
WGML_API void wgml_checkpoint_close(wgml_checkpoint *ck);
/* Every tensor of every shard: shards in file-name order, each in its header's order. */
WGML_API size_t wgml_checkpoint_count(const wgml_checkpoint *ck);
WGML_API wgml_status wgml_checkpoint_info(const wgml_checkpoint *ck, size_t i, wgml_file_tensor *info);
WGML_API int64_t wgml_checkpoint_find(const wgml_checkpoint *ck, const char *name);
WGML_API const void *wgml_checkpoint_data(const wgml_checkpoint *ck, size_t i);
/* The shard files (e.g. for their metadata); NULL when i is out of range. */
WGML_API size_t wgml_checkpoint_shard_count(const wgml_checkpoint *ck);
WGML_API const wgml_safetensors *wgml_checkpoint_shard(const wgml_checkpoint *ck, size_t i);

/* ---- config.json of Llama-family models ----------------------------------------------- */

typedef enum wgml_rope_scaling_type {
    WGML_ROPE_SCALING_NONE = 0,   /* absent, null, or rope_type "default" */
    WGML_ROPE_SCALING_LINEAR,     /* positions divided by factor */
    WGML_ROPE_SCALING_LLAMA3      /* Llama 3.1 frequency-dependent scaling */
} wgml_rope_scaling_type;

#define WGML_MODEL_CONFIG_MAX_EOS 8

/* A Hugging Face config.json as LlamaForCausalLM reads it. Fields marked "required" must be
   in the file; the others take the defaults shown when absent or null. */
typedef struct wgml_model_config {
    char model_type[32];            /* e.g. "llama"; "" when absent */
    char torch_dtype[16];           /* e.g. "bfloat16"; "" when absent */
    uint32_t vocab_size;            /* required, 1 .. 2^24 */
    uint32_t hidden_size;           /* required, 1 .. 65536 */
    uint32_t intermediate_size;     /* required, 1 .. 2^20 */
    uint32_t num_hidden_layers;     /* required, 1 .. 1024 */
    uint32_t num_attention_heads;   /* required, 1 .. 1024 */
    uint32_t num_key_value_heads;   /* default num_attention_heads; must divide it */
    uint32_t head_dim;              /* default hidden_size / num_attention_heads (which must
                                       then divide exactly); even, 2 .. 1024 */
    uint32_t max_position_embeddings;   /* default 2048; 1 .. 2^24 */
    double rms_norm_eps;            /* default 1e-6; in (0, 0.5] */
    double rope_theta;              /* default 10000; in (0, 1e15] */
    bool tie_word_embeddings;       /* default false */
    bool attention_bias;            /* default false */
    bool mlp_bias;                  /* default false */
    struct {
        wgml_rope_scaling_type type;
        double factor;              /* linear, llama3: >= 1 */
        double low_freq_factor;     /* llama3: > 0 */
        double high_freq_factor;    /* llama3: > low_freq_factor */
        uint32_t original_max_position_embeddings;  /* llama3: >= 1 */
    } rope_scaling;
    int64_t bos_token_id;           /* -1 when absent */
    uint32_t num_eos_token_ids;     /* eos_token_id: one id or a list of up to 8 */
    uint32_t eos_token_ids[WGML_MODEL_CONFIG_MAX_EOS];
    struct {
        uint32_t bits;              /* 0: not quantized; else 2, 3, 4, 5, 6 or 8 */
        uint32_t group_size;        /* a power of two, 8 .. 1024 */
    } quantization;                 /* MLX affine: "quantization" or "quantization_config" */
} wgml_model_config;

/* Parses len bytes (at most 16 MiB) of config.json text, not necessarily NUL-terminated,
   into *out (zeroed on failure); name is
   used in messages. Checks types ("hidden_size must be an integer, not a string"), ranges,
   hidden_act (silu only), rope_scaling types (none, linear, llama3), and that every token
   id is below vocab_size. Unknown keys are ignored.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL), WGML_ERROR_FORMAT, WGML_ERROR_OUT_OF_MEMORY. */
WGML_API wgml_status wgml_model_config_parse(const char *json, size_t len, const char *name,
                                             wgml_model_config *out);
/* Reads the file (at most 16 MiB) and parses it. Errors: as parse, plus WGML_ERROR_IO. */
WGML_API wgml_status wgml_model_config_load(const char *path, wgml_model_config *out);

/* ---- tokenizer.json: byte-level BPE (GPT-2, SmolLM2, Llama 3) -------------------------

   Supported: model BPE over the GPT-2 byte-to-unicode alphabet with all 256 byte tokens,
   merges as "a b" strings or ["a", "b"] pairs, ignore_merges; added_tokens (matched in the
   text before anything else, longest first, with lstrip, rstrip and single_word); the
   pre-tokenizers ByteLevel (add_prefix_space, use_regex: the GPT-2 split), Digits
   (individual_digits or not) and Split with the GPT-2, Llama 3 or Qwen 2 regex (behavior
   Isolated), alone or in a Sequence; normalizer null; decoder ByteLevel or null. An added
   token decodes to its content as written (Hugging Face's byte-level decoder would turn a
   content such as "\u00e9t\u00e9" into the bytes E9 74 E9).
   Anything else (another model type, a normalizer, another regex, byte_fallback, a
   continuing_subword_prefix) is refused with WGML_ERROR_FORMAT rather than encoded
   differently from Hugging Face tokenizers. The regex classes \p{L}, \p{N} and \s follow
   Unicode 14 general categories and White_Space. Ignored: post_processor (encode adds no
   BOS: prepend it yourself), truncation, padding, BPE dropout. */

typedef struct wgml_tokenizer wgml_tokenizer;

/* Reads tokenizer.json (at most 256 MiB) and builds the tokenizer.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL), WGML_ERROR_IO, WGML_ERROR_FORMAT (the
           message names the field: "tokenizer.json: merges[17] 'a b': 'ab' is not in the
           vocab"), WGML_ERROR_OUT_OF_MEMORY. */
WGML_API wgml_status wgml_tokenizer_load(const char *path, wgml_tokenizer **out);
/* As wgml_tokenizer_load on len bytes of JSON text (at most 256 MiB); name is used in
   messages. */
WGML_API wgml_status wgml_tokenizer_parse(const char *json, size_t len, const char *name,
                                          wgml_tokenizer **out);
/* The byte tokenizer: vocabulary 256, token id = byte value, no merges, no added tokens. */
WGML_API wgml_status wgml_tokenizer_bytes(wgml_tokenizer **out);
/* NULL is a no-op. */
WGML_API void wgml_tokenizer_free(wgml_tokenizer *tok);

/* 1 + the largest token id (vocab and added tokens); 0 for NULL. */
WGML_API uint32_t wgml_tokenizer_vocab_size(const wgml_tokenizer *tok);
/* The id of an added token by its content (e.g. "<|endoftext|>"), else of a vocab token by
   its spelling in tokenizer.json (byte-level form, e.g. "Ġthe"); -1 when there is none. */
WGML_API int64_t wgml_tokenizer_token_id(const wgml_tokenizer *tok, const char *token);

/* Encodes len bytes of text (UTF-8; invalid bytes are encoded as themselves, each its own
   pre-token character) into token ids, as Hugging Face's encode(text,
   add_special_tokens=False): added tokens found in the text become their ids. Writes the
   ids to ids[0 .. *n). Never more ids than bytes, so cap = len suffices (2 * len when the
   ByteLevel step has add_prefix_space, which adds a space to each piece). Texts of 16 KiB
   or more use a per-call cache of short pieces (natural text repeats its words).
   len must be below 2^31: encode longer texts in parts.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL tok or n; NULL text with len > 0; NULL ids
           with cap > 0), WGML_ERROR_SHAPE (more ids than cap: *n is then the number
           needed and ids holds the first cap), WGML_ERROR_OUT_OF_MEMORY. */
WGML_API wgml_status wgml_tokenizer_encode(const wgml_tokenizer *tok, const char *text, size_t len,
                                           uint32_t *ids, size_t cap, size_t *n);
/* As wgml_tokenizer_encode, but added tokens in the text are plain text (for training on
   untrusted text in which "<|endoftext|>" must not become the special token). */
WGML_API wgml_status wgml_tokenizer_encode_ordinary(const wgml_tokenizer *tok, const char *text, size_t len,
                                                    uint32_t *ids, size_t cap, size_t *n);
/* Decodes n ids to the bytes they stand for, written to out[0 .. *len), followed by a NUL
   when cap > *len. The bytes are exactly what was encoded: a token may end inside a UTF-8
   sequence (streaming callers keep the incomplete tail for the next call).
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL; an id >= vocab_size or with no token: the
           message names ids[i]), WGML_ERROR_SHAPE (more bytes than cap: *len is then the
           number needed and out holds the first cap bytes). */
WGML_API wgml_status wgml_tokenizer_decode(const wgml_tokenizer *tok, const uint32_t *ids, size_t n,
                                           char *out, size_t cap, size_t *len);

#ifdef __cplusplus
}
#endif
#endif /* WGML_H */
