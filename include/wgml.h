/*
 * wgml.h - train and run transformer language models on any GPU through WebGPU.
 *
 * wgml is a compute engine whose kernels are all WGSL, dispatched through the standard
 * webgpu.h C API (Dawn). The same code runs on a discrete GPU through Vulkan, Metal or
 * D3D12, and on a plain CPU through Mesa's lavapipe.
 *
 * STEP BY STEP
 * ============
 * c = a + b on the GPU, for float host_a[1000], host_b[1000], host_c[1000] (this block is
 * compiled and run by the test suite, as it stands here):
 *
 *     wgml_context *ctx;  wgml_engine *eng;  wgml_tensor *a, *b, *c;
 *     if (wgml_context_create(NULL, &ctx) != WGML_OK) {   // best adapter, defaults
 *         puts(wgml_last_error(NULL));
 *         return 1;
 *     }
 *     wgml_engine_create(ctx, &eng);
 *     size_t shape[] = {1000};
 *     wgml_tensor_from_data(ctx, WGML_F32, 1, shape, host_a, &a);
 *     wgml_tensor_from_data(ctx, WGML_F32, 1, shape, host_b, &b);
 *     wgml_tensor_create(ctx, WGML_F32, 1, shape, &c);
 *     if (wgml_add(eng, a, b, c) != WGML_OK) puts(wgml_last_error(ctx));
 *     wgml_tensor_read(c, 0, host_c, sizeof host_c);   // waits for the GPU
 *     wgml_tensor_release(a); wgml_tensor_release(b); wgml_tensor_release(c);
 *     wgml_engine_destroy(eng);
 *     wgml_context_destroy(ctx);
 *
 * EXECUTION MODEL
 * ===============
 * Every op validates its arguments, records its GPU work and returns without waiting.
 * Work is recorded into one command encoder per context and submitted when something
 * needs it: a read, wgml_context_sync(), wgml_context_flush(), a write from the host, or
 * a size threshold (or after every op, with wgml_context_desc.submit_every_op). Order is
 * always kept: an op sees the results of every op called before it on the same context.
 * Reading a tensor waits for all work recorded before the read.
 * wgml_add, wgml_sub and wgml_mul on at most 2^20 elements are fused: consecutive calls
 * (up to 60, of one engine, on tensors of one vec4 count, over at most 4 distinct tensors)
 * are recorded as one dispatch when anything else is recorded, read, written, submitted or
 * released, so a chain of small ops does not pay a GPU launch and barrier per op. Each
 * tensor gets the same values, bit for bit, as with one dispatch per op (a device error
 * met while recording the group is returned by the call that records it, or the next);
 * WGML_FUSE=0 turns fusion off (other values than 0 and 1 make wgml_context_create fail
 * with WGML_ERROR_INVALID_ARGUMENT), as does submit_every_op.
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
 * SUBNORMALS
 * ==========
 * f32 values of magnitude below 2^-126 (subnormals) may be flushed to zero, as an input
 * or a result of any op, on any adapter: WGSL allows it, and drivers differ (lavapipe
 * keeps them; NVIDIA's Vulkan driver may flush). Results then differ from exact ones only
 * where a value falls below 2^-126, by at most 2^-126 in that value; every accuracy
 * stated in this header holds for results above 2^-126 in magnitude.
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
 * WGML_DEVICE=<decimal index> takes the adapter at that index of wgml_adapter_list's
 * order, counted among those WGML_BACKEND and WGML_ADAPTER leave (see
 * wgml_context_desc.device_index); another value makes wgml_context_create fail with
 * WGML_ERROR_INVALID_ARGUMENT. WGML_ROBUST=1 turns Dawn's robustness on, as wgml_context_desc.robust does.
 * WGML_LOG_KERNELS=1 prints a line on stderr for every kernel a context builds (its
 * .wgsl file, entry point and constants), in build order; other values than 0 and 1 make
 * wgml_context_create fail with WGML_ERROR_INVALID_ARGUMENT.
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
/* How a matrix product (wgml_matmul and its forms) rounds its operands.
   F16 and F16X3 run on the GPU's matrix units: f16 subgroup matrices with f32 results,
   where the device has them (wgml_adapter_info.matrix_m is not 0: Dawn's experimental
   subgroup-matrix feature, offered by the Debian unstable runtime, not the npm one), and
   only for products with M > 1 and N > 1 whose b is f32 or f16 (no other packed dtype).
   Every other product, and every product on other devices, runs the f32 kernels of
   MATRIX PRODUCTS instead: at least as accurate, but finite where F16 would overflow.
     F32    f32 FMA kernels; the error bound of MATRIX PRODUCTS.
     F16    each element of a and b rounded to f16 (as PyTorch's autocast does for a
            linear layer), products summed in f32: about 2^-10 of each |A[m,k] B[k,n]|
            per product besides the summation's error (a rounding to f16 may take either
            neighbour on some devices, so 2^-10, not 2^-11). A magnitude of 65520 or more
            becomes +-inf, so the product is inf or NaN.
     F16X3  f32 accuracy from three f16 products: each row of A and column of B scaled by
            a power of two that puts its largest magnitude just under 2^15, each element
            split into an f16 high part and an f16 low part (its rest, times 2^10); the
            sum of hi*lo + lo*hi and that of hi*hi, each in f32 and unscaled, are added
            (with accumulate, out is added to the first). Each element is carried to
            about 22 bits: the error stays within (K + 51) / (K + 2) of the f32 bound
            (tests/test_precision.c derives it); an element so much smaller than its row's
            (column's) largest that its scaled parts are f16 subnormals adds at most 2^-46
            of (the row's largest |A|) x (the column's largest |B|) per product. About 3x
            the F16 work, plus a pass over each operand for its scales.
   Memory: on the matrix units a and b are first converted into f16 copies in the engine's
   scratch (2 bytes per element each, padded with zeros to whole tiles of 8 x 8 subgroup
   matrices, 128 on NVIDIA's 16 x 16 x 16; with F16X3 a low part of each too, and 4 bytes
   per row of a and column of b), kept and reused until the engine is destroyed; at F16 a
   copy stays current until its source is written (by any op of the context,
   wgml_tensor_write or wgml_tensor_zero) or another product or attention call takes its
   place, so that consecutive products of one unchanged tensor in one layout convert it once
   (q, k and v of one x). A product
   whose larger copy would exceed maxStorageBufferBindingSize runs the f32 kernels. A
   product of few output tiles or a part-full last round of them and a long K (a weight
   gradient) may run in slices of K, their
   partial results (4 bytes per element of out per slice, at most 256 MiB) in the engine's
   scratch too, summed in a fixed order.
   Results are deterministic, as the f32 kernels' are.
   DEFAULT in wgml_matmul_options means the context's wgml_context_desc.matmul_precision,
   whose own default is F32. */
typedef enum wgml_precision {
    WGML_PRECISION_DEFAULT = 0,
    WGML_PRECISION_F32,
    WGML_PRECISION_F16,
    WGML_PRECISION_F16X3,
} wgml_precision;

typedef struct wgml_context_desc {
    /* Substring of the adapter's name or description to pick (case-insensitive).
       Default: $WGML_ADAPTER, else the best adapter (discrete > integrated > CPU). */
    const char *adapter;
    /* "vulkan", "metal", "d3d12", "d3d11", "opengl", "opengles". Default: $WGML_BACKEND,
       else any backend. */
    const char *backend;
    /* Dawn's robustness: every buffer and workgroup-array index clamped in the kernels,
       and workgroup memory zeroed before each workgroup runs. wgml runs only its own
       kernels, which stay in bounds (every shape is checked on the host first) and
       initialise what they read; the test suite runs without robustness, as users do,
       and checks the robust mode in tests of its own. It costs 5 - 12% on matrix
       products and 3 - 7% on attention (H200), so it is off unless asked for here or by
       WGML_ROBUST=1: a debugging aid. Default: off. */
    bool robust;
    /* Submit after every op instead of batching. Default: batch (see EXECUTION MODEL). */
    bool submit_every_op;
    /* How long a wait for the device may take before WGML_ERROR_TIMEOUT. Default 60000
       (600000 on a CPU adapter, whose driver compiles kernels inside the waits). */
    uint32_t timeout_ms;
    /* Take the adapter at device_index in wgml_adapter_list's order (0: the first, which
       is the one the rules above pick) instead of choosing by adapter and the rules; an
       index past the list is WGML_ERROR_NO_ADAPTER naming what there is. Default (false):
       $WGML_DEVICE when set (a decimal index), else the choice above. backend and
       adapter, when set too, filter the list first. Under MPI, wgml train and finetune
       set it to the process's node-local rank modulo the list's length. */
    bool use_device_index;
    uint32_t device_index;
    /* The precision of every matrix product, and of attention (both directions), whose options
       leave it at WGML_PRECISION_DEFAULT (see wgml_precision and
       wgml_attention_options.precision). Default (0): WGML_PRECISION_F32. */
    wgml_precision matmul_precision;
} wgml_context_desc;

/* Creates a context on the chosen adapter with the adapter's full limits and the features
   wgml can use when offered (shader-f16, subgroups, timestamp-query).
   desc may be NULL (all defaults). On failure *out is NULL and the message is in
   wgml_last_error(NULL).
   Errors: WGML_ERROR_INVALID_ARGUMENT (out NULL, unknown backend name, a malformed WGML_*
           variable such as a WGML_DEVICE that is not a decimal index),
           WGML_ERROR_NO_ADAPTER (nothing matched, a device index past the list),
           WGML_ERROR_DEVICE, WGML_ERROR_TIMEOUT. */
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
    bool robust;            /* bounds clamping and workgroup zeroing on (desc.robust) */
    /* The subgroup-matrix shape (M x K times K x N) of f16 inputs with f32 results that
       the f16 matrix products run on (see wgml_precision); all 0 where the adapter or the
       WebGPU runtime offers none (the npm runtime never does: README, WebGPU runtimes). */
    uint32_t matrix_m, matrix_n, matrix_k;
} wgml_adapter_info;

/* Fills *info with what the context's device has. */
WGML_API wgml_status wgml_context_info(const wgml_context *ctx, wgml_adapter_info *info);

/* Lists the adapters the runtime offers, in the order of wgml_context_desc.device_index
   (the best by the rules first: discrete, integrated, CPU; Vulkan, Metal and D3D12 before
   D3D11 and OpenGL),
   at most cap of them into out (may be NULL with cap 0), and their count into *count.
   backend (may be NULL) filters as wgml_context_desc.backend does. The fields of each
   entry are those of wgml_adapter_info that need no device: name, vendor, architecture,
   driver, backend, type, vendor and device ids; the rest are zero. The WebGPU C API has
   no enumeration; wgml uses Dawn's own (dawn::native::Instance::EnumerateAdapters, which
   both runtimes export), so two identical GPUs of one machine are two entries, each
   reachable by its index. Were a runtime to lack it, wgml would ask for an adapter with
   each power preference, with and without the fallback adapter, and keep the distinct
   ones (then two identical GPUs appear once).
   On error *count is 0.
   Errors: WGML_ERROR_INVALID_ARGUMENT (count NULL, out NULL with cap > 0, an unknown
           backend), WGML_ERROR_DEVICE (no instance, an adapter request failed),
           WGML_ERROR_TIMEOUT, WGML_ERROR_OUT_OF_MEMORY. */
WGML_API wgml_status wgml_adapter_list(const char *backend, wgml_adapter_info *out, uint32_t cap, uint32_t *count);

/* Fences: how far the device has come, without waiting for all recorded work.
   wgml_context_fence submits the work recorded so far (as wgml_context_flush) and returns
   a ticket for it in *fence (1, 2, 3, ... per context). wgml_context_fence_wait waits up
   to timeout_ms (0: only looks) for the work before that fence to finish, and says in
   *done whether it has; fences finish in order, so a done fence means every earlier one
   is done. Up to 64 fences may be pending; a 65th first waits for the oldest (bounded by
   the context's timeout).
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL; a fence not issued on this context),
           WGML_ERROR_TIMEOUT (the oldest of 64 pending did not finish), device errors. */
WGML_API wgml_status wgml_context_fence(wgml_context *ctx, uint64_t *fence);
WGML_API wgml_status wgml_context_fence_wait(wgml_context *ctx, uint64_t fence, uint32_t timeout_ms, bool *done);

/* Counters of a context, for tests and tuning. */
typedef struct wgml_context_stats {
    uint64_t commands;     /* GPU commands recorded: dispatches, copies, clears; each fused
                              element-wise op counts as one (EXECUTION MODEL) */
    uint64_t submits;      /* command buffers submitted */
    long live_tensors;     /* tensors created and not yet released */
    uint64_t device_bytes; /* bytes of device memory in live tensors now (engines' scratch
                              tensors included; not the small uniform, staging and timer
                              buffers, nor the runtime's own) */
    long live_engines;
} wgml_context_stats;

WGML_API wgml_status wgml_context_stats_get(const wgml_context *ctx, wgml_context_stats *stats);

/* Timing on the GPU's own clock, for benchmarks: everything recorded between
   wgml_context_timer_begin and wgml_context_timer_end is measured from the moment the
   device starts it to the moment it finishes, through timestamp queries where the device
   offers them (wgml_adapter_info.timestamp_query), else by the host clock around a full
   sync at both ends. timer_end waits for the work. Timers do not nest.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL, end without begin, begin twice). */
WGML_API wgml_status wgml_context_timer_begin(wgml_context *ctx);
WGML_API wgml_status wgml_context_timer_end(wgml_context *ctx, double *seconds);

/* ------------------------------------------------------------------------------------ */
/* Tensors                                                                               */
/* ------------------------------------------------------------------------------------ */

typedef struct wgml_tensor wgml_tensor;

typedef enum wgml_dtype {
    WGML_F32 = 0,
    WGML_F16,   /* storage only, except where an op says it reads it */
    WGML_BF16,  /* storage only, except where an op says it reads it */
    WGML_U32,
    WGML_U8,
    /* packed weight matrices (see PACKED WEIGHTS below; wgml_tensor_create_packed) */
    WGML_Q8_0,
    WGML_Q4_0,
    WGML_Q4_K,
    WGML_Q6_K,
    WGML_AFFINE
} wgml_dtype;

#define WGML_MAX_DIMS 4

/* Bytes per element of dtype (1, 2 or 4); 0 for a packed or unknown dtype. */
WGML_API size_t wgml_dtype_size(wgml_dtype dtype);
/* "f32", "f16", "bf16", "u32", "u8", "q8_0", "q4_0", "q4_k", "q6_k", "affine", or "?" */
WGML_API const char *wgml_dtype_name(wgml_dtype dtype);

/* Creates a tensor of the given dtype and shape (ndim 1..4, every dimension >= 1). Its
   contents are undefined until written. On failure *out is NULL (unless out is NULL).
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL, ndim out of range, a zero dimension, unknown
           dtype), WGML_ERROR_LIMIT (byte size over maxStorageBufferBindingSize or
           maxBufferSize, or overflowing size_t), WGML_ERROR_OUT_OF_MEMORY. */
WGML_API wgml_status wgml_tensor_create(wgml_context *ctx, wgml_dtype dtype, uint32_t ndim,
                                        const size_t *shape, wgml_tensor **out);

/* wgml_tensor_create, then wgml_tensor_write of numel * dtype size bytes from data.
   Errors: as wgml_tensor_create, plus WGML_ERROR_INVALID_ARGUMENT (data NULL). */
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

/* PACKED WEIGHTS
   ==============
   A packed tensor is a weight matrix W [rows, cols] (as a linear layer stores it: [out,
   in]) kept in a compressed layout and unpacked inside the kernels that read it; the
   arithmetic stays f32. Its numel is rows * cols, its byte size (wgml_tensor_nbytes) the
   layout's. The ops that read one say so: wgml_matmul_bt (b: out = a @ W^T),
   wgml_matmul (b: out = a @ W, the input gradient through a frozen weight),
   wgml_embedding (table) and wgml_unpack (W to f32). Those ops also read f16 and bf16
   tensors [rows, cols] the same way. A packed tensor cannot be reshaped; any other op
   refuses it with WGML_ERROR_DTYPE. Every value below is little-endian; rows follow each
   other with no padding, so row r starts at byte r * row_bytes.

     WGML_Q8_0  ggml's Q8_0: per 32 values of a row, a 34-byte block: f16 d, then 32 int8
                q; W = q * d. cols a multiple of 32; row_bytes = cols / 32 * 34.
     WGML_Q4_0  ggml's Q4_0: per 32 values an 18-byte block: f16 d, 16 bytes whose low
                nibbles are values 0-15 and high nibbles values 16-31; W = (q - 8) * d.
                cols a multiple of 32; row_bytes = cols / 32 * 18.
     WGML_Q4_K  ggml's Q4_K: per 256 values a 144-byte block: f16 d, f16 dmin, 12 bytes of
                6-bit scales and minimums of 8 sub-blocks of 32, 128 bytes of nibbles (each
                64 values: the low nibbles of 32 bytes, then their high nibbles); with sc, mn
                sub-block j's scale and minimum (j < 4: the low 6 bits of bytes j and j + 4;
                else the nibbles of byte j + 4 with the top 2 bits of bytes j - 4 and j),
                W = (d * sc) * q - dmin * mn. cols a multiple of 256; row_bytes = cols / 256 *
                144.
     WGML_Q6_K  ggml's Q6_K: per 256 values a 210-byte block: 128 bytes ql, 64 bytes qh, 16
                int8 scales, f16 d; in each half h (128 values) value l + 32 k (l < 32, k < 4)
                has the low (k < 2) or high nibble of ql[64 h + l + 32 (k % 2)] and bits 2k,
                2k + 1 of qh[32 h + l] above it; W = (d * sc[8 h + l / 16 + 2 k]) * (q - 32).
                cols a multiple of 256; row_bytes = cols / 256 * 210.
     WGML_AFFINE  MLX's affine scheme, bits 4 or 8 in groups of group_size (32, 64, 128)
                along a row: three parts, each starting at a multiple of 16 bytes:
                codes at byte 0: each row ceil(cols * bits / 32) u32 words, value k in bits
                [bits * (k % (32 / bits)), +bits) of word k / (32 / bits); then scales at
                scales_offset and biases at biases_offset, each rows * ceil(cols /
                group_size) values of scale_dtype (f32, f16 or bf16), row-major;
                W = q * scale + bias. Any cols >= 1 (the last group of a row may be short):
                an MLX checkpoint's weight, scales and biases are these parts exactly.

   Unpacking is exact: the kernels evaluate the formulas above in f32, and every product
   in them is exact in f32 (a code of at most 8 bits times an f16 or bf16 scale, or times
   d * sc of at most 17 bits), so each value is one correctly rounded operation of known
   inputs: the same bits on every adapter, and the same bits as the host's expansion of a
   GGUF model to f32. The one exception is WGML_AFFINE with f32 scales: q * scale is then
   rounded, and a device may fuse it with the addition or not, so a value may differ in
   its last bit between adapters. */
typedef struct wgml_packed_desc {
    wgml_dtype dtype;           /* WGML_Q8_0, WGML_Q4_0, WGML_Q4_K, WGML_Q6_K or WGML_AFFINE */
    uint32_t rows, cols;        /* W [rows, cols], each >= 1 */
    uint32_t bits;              /* WGML_AFFINE only: 4 or 8 */
    uint32_t group_size;        /* WGML_AFFINE only: 32, 64 or 128 */
    wgml_dtype scale_dtype;     /* WGML_AFFINE only: WGML_F32 (0), WGML_F16 or WGML_BF16 */
} wgml_packed_desc;

/* Where each part of a packed tensor lies (byte offsets; the parts that a dtype lacks 0). */
typedef struct wgml_packed_layout {
    size_t bytes;               /* the tensor's byte size */
    size_t row_bytes;           /* bytes of one row of blocks (of codes for WGML_AFFINE) */
    size_t scales_offset;       /* WGML_AFFINE: the scales */
    size_t biases_offset;       /* WGML_AFFINE: the biases */
} wgml_packed_layout;

/* The layout of a packed tensor of desc, computed on the host (no context needed).
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL; a dtype, bits, group_size or scale_dtype
           not listed; a zero dimension), WGML_ERROR_SHAPE (cols not a multiple of the
           block), WGML_ERROR_LIMIT (a size overflowing size_t). */
WGML_API wgml_status wgml_packed_layout_of(const wgml_packed_desc *desc, wgml_packed_layout *out);

/* Creates a packed tensor [rows, cols] of desc, contents undefined until written with
   wgml_tensor_write at the layout's offsets. wgml_tensor_create refuses packed dtypes.
   Errors: wgml_packed_layout_of's, plus wgml_tensor_create's. */
WGML_API wgml_status wgml_tensor_create_packed(wgml_context *ctx, const wgml_packed_desc *desc, wgml_tensor **out);
/* The desc a packed tensor was created with (rows and cols for an f16 or bf16 2-D
   tensor, its dtype for any other; a zeroed desc for NULL). */
WGML_API wgml_packed_desc wgml_tensor_packed_desc(const wgml_tensor *t);

/* ------------------------------------------------------------------------------------ */
/* Engine: compiled kernels and the ops that dispatch them                               */
/* ------------------------------------------------------------------------------------ */

typedef struct wgml_engine wgml_engine;

/* Creates an engine for ctx's device. Each kernel is compiled at most once per engine,
   the first time an op needs it (so an engine costs nothing for kernels it never uses);
   wgml_engine_warmup compiles them all up front. On failure *out is NULL (unless out is NULL).
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

/* out = a + b, element-wise; a, b and out have the same length. Any of them may be the
   same tensor. Small calls are fused with their neighbours (EXECUTION MODEL). */
WGML_API wgml_status wgml_add(wgml_engine *e, const wgml_tensor *a, const wgml_tensor *b,
                              wgml_tensor *out);
/* out = a * b, element-wise. */
WGML_API wgml_status wgml_mul(wgml_engine *e, const wgml_tensor *a, const wgml_tensor *b,
                              wgml_tensor *out);
/* out = a - b, element-wise. */
WGML_API wgml_status wgml_sub(wgml_engine *e, const wgml_tensor *a, const wgml_tensor *b,
                              wgml_tensor *out);

/* ---- biases (src/ops/bias.c) -------------------------------------------------------- */

/* out[r, c] = x[r, c] + bias[c]: x (any shape whose last dimension is numel(bias)) read as
   rows of numel(bias) values; out has x's element count and may be x (in place), not bias.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL), WGML_ERROR_CONTEXT, WGML_ERROR_DTYPE (not
           f32), WGML_ERROR_ALIAS (out is bias), WGML_ERROR_SHAPE (x's last dimension is
           not numel(bias); out's element count is not x's), WGML_ERROR_LIMIT. */
WGML_API wgml_status wgml_bias_add(wgml_engine *e, const wgml_tensor *x, const wgml_tensor *bias, wgml_tensor *out);
/* The gradient of a bias: grad_bias[c] = sum over rows r of grad_out[r, c] (written, or
   added with accumulate), the rows summed in order (the same result on every run).
   Errors: as wgml_bias_add (grad_out for x, grad_bias for bias; grad_bias must not be
           grad_out). */
WGML_API wgml_status wgml_bias_grad(wgml_engine *e, const wgml_tensor *grad_out, wgml_tensor *grad_bias, bool accumulate);

/* Inverted dropout: out[i] = x[i] / (1 - p) where element i is kept, else 0. Element i is
   kept iff mix32(mix32(i ^ k0) + k1) >= floor(p * 2^32) (32-bit unsigned arithmetic), with
   k0 = mix32(lo ^ 0x3c6ef372), k1 = mix32(hi ^ mix32(k0 ^ 0x9e3779b9)) for the low and high
   32 bits of seed, and mix32(x): x ^= x >> 16; x *= 0x7feb352d; x ^= x >> 15; x *=
   0x846ca68b; x ^= x >> 16. A pure function of seed and the element's index, the same on
   every adapter. Its gradient is
   the same call on grad_out with the same p and seed. p = 0 copies x. x and out: f32 of the
   same element count (any shapes, at most 2^32 elements); out may be x (in place).
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL; p outside [0, 1) or NaN), WGML_ERROR_CONTEXT,
           WGML_ERROR_DTYPE, WGML_ERROR_SHAPE (element counts differ), WGML_ERROR_LIMIT. */
WGML_API wgml_status wgml_dropout(wgml_engine *e, const wgml_tensor *x, wgml_tensor *out, float p, uint64_t seed);

/* ---- copies (src/ops/copy.c) -------------------------------------------------------- */

/* Copies all of src (any dtype) into dst (any dtype) starting at byte offset dst_offset:
   bytes [dst_offset, dst_offset + nbytes(src)) of dst become src's bytes, and no other
   byte of dst changes. Any offset and size work (odd-length u8 and f16 tensors too); a
   copy whose offset and size are multiples of 4 runs on whole words (of 16, on vec4),
   others on bytes, up to 4 GiB.
   Errors: WGML_ERROR_SHAPE (the copy would run past the end of dst),
           WGML_ERROR_ALIAS (src and dst are the same tensor), WGML_ERROR_LIMIT. */
WGML_API wgml_status wgml_copy_tensor(wgml_engine *e, const wgml_tensor *src, wgml_tensor *dst,
                                      size_t dst_offset);

/* Converts every element of src into dst, element i to element i: each f32, f16 or bf16
   (any pair, the same dtype too), with the same element count (shapes may differ).
   16-bit to f32 is exact; f32 to f16 or bf16 rounds to nearest, ties to even (as PyTorch's
   .half() and .bfloat16()); a magnitude of 65520 or more becomes +-inf in f16; NaN stays a
   (quiet) NaN, infinities and the sign of zero are kept; f16 <-> bf16 goes through f32
   (one rounding). The same bits on every device: the kernel converts with integer
   arithmetic. For f16 and bf16 weights (wgml_matmul reads them: PACKED WEIGHTS) and the
   f16 precisions' inputs.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL), WGML_ERROR_CONTEXT, WGML_ERROR_DTYPE (src or
           dst not f32, f16 or bf16), WGML_ERROR_SHAPE (element counts differ),
           WGML_ERROR_ALIAS (dst is src), WGML_ERROR_LIMIT (more than 2^32 - 4097
           elements). */
WGML_API wgml_status wgml_cast(wgml_engine *e, const wgml_tensor *src, wgml_tensor *dst);

/* ---- activations and element-wise gradients (src/ops/activation.c) ----------------- */

/* Rules shared by the ops of this section:
   - Every tensor is f32 (else WGML_ERROR_DTYPE) and all have the same element count
     (else WGML_ERROR_SHAPE; shapes may differ); any count >= 1 works.
   - In place: any output may be the same tensor as any input (e.g. wgml_silu(e, x, x),
     wgml_relu_backward(e, g, x, g), wgml_silu_gate_fused(e, up, gate, up),
     wgml_mul_backward(e, g, a, b, a, b)); every element is read before it is written.
   - Ops with two outputs need two different output tensors: grad_a == grad_b (or
     grad_up == grad_gate) is WGML_ERROR_ALIAS.
   - NULL engine or tensor: WGML_ERROR_INVALID_ARGUMENT; a tensor of another context:
     WGML_ERROR_CONTEXT. A rejected call records nothing.
   - SiLU uses sigmoid(x) = 1 / (1 + exp(-x)) evaluated without overflow: any finite x
     gives a finite result (x = -100 gives -3.7e-42, a subnormal, or 0 where subnormals
     are flushed: see SUBNORMALS), and x = 100 gives 100. */

/* Gradients of a + b: grad_a = grad_out and grad_b = grad_out (written, not accumulated). */
WGML_API wgml_status wgml_add_backward(wgml_engine *e, const wgml_tensor *grad_out, wgml_tensor *grad_a,
                                       wgml_tensor *grad_b);
/* Gradients of a - b: grad_a = grad_out, grad_b = -grad_out. */
WGML_API wgml_status wgml_sub_backward(wgml_engine *e, const wgml_tensor *grad_out, wgml_tensor *grad_a,
                                       wgml_tensor *grad_b);
/* Gradients of a * b: grad_a = grad_out * b, grad_b = grad_out * a. */
WGML_API wgml_status wgml_mul_backward(wgml_engine *e, const wgml_tensor *grad_out, const wgml_tensor *a,
                                       const wgml_tensor *b, wgml_tensor *grad_a, wgml_tensor *grad_b);
/* out = x * sigmoid(x), x = input. */
WGML_API wgml_status wgml_silu(wgml_engine *e, const wgml_tensor *input, wgml_tensor *out);
/* grad_in = grad_out * s * (1 + x * (1 - s)), s = sigmoid(x), x = input. */
WGML_API wgml_status wgml_silu_backward(wgml_engine *e, const wgml_tensor *grad_out, const wgml_tensor *input,
                                        wgml_tensor *grad_in);
/* out = x where x > 0, else 0 (NaN stays NaN; -0 gives +0). */
WGML_API wgml_status wgml_relu(wgml_engine *e, const wgml_tensor *input, wgml_tensor *out);
/* grad_in = grad_out where input > 0, else 0 (also 0 where input is NaN). */
WGML_API wgml_status wgml_relu_backward(wgml_engine *e, const wgml_tensor *grad_out, const wgml_tensor *input,
                                        wgml_tensor *grad_in);
/* out = SiLU(up) * gate, in one pass (the SwiGLU product of a gated MLP). */
WGML_API wgml_status wgml_silu_gate_fused(wgml_engine *e, const wgml_tensor *up, const wgml_tensor *gate,
                                          wgml_tensor *out);
/* Gradients of out = SiLU(up) * gate, in one pass: grad_up = grad_out * gate * SiLU'(up),
   grad_gate = grad_out * SiLU(up), SiLU'(x) = s * (1 + x * (1 - s)), s = sigmoid(x). */
WGML_API wgml_status wgml_silu_gate_backward(wgml_engine *e, const wgml_tensor *up, const wgml_tensor *gate,
                                             const wgml_tensor *grad_out, wgml_tensor *grad_up,
                                             wgml_tensor *grad_gate);
/* out = GELU(up) * gate, in one pass (the GeGLU product of Gemma's MLP), GELU in its tanh
   form (PyTorch's approximate="tanh", transformers' gelu_pytorch_tanh):
   GELU(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), evaluated as x * sigmoid(2u)
   without overflow: any finite x gives a finite result (below about x = -10 a subnormal,
   or 0 where subnormals are flushed: see SUBNORMALS). */
WGML_API wgml_status wgml_gelu_tanh_gate_fused(wgml_engine *e, const wgml_tensor *up, const wgml_tensor *gate,
                                               wgml_tensor *out);
/* Gradients of out = GELU(up) * gate (tanh form): grad_up = grad_out * gate * GELU'(up),
   grad_gate = grad_out * GELU(up). */
WGML_API wgml_status wgml_gelu_tanh_gate_backward(wgml_engine *e, const wgml_tensor *up, const wgml_tensor *gate,
                                                  const wgml_tensor *grad_out, wgml_tensor *grad_up,
                                                  wgml_tensor *grad_gate);

/* ---- selection, convolution (src/ops/select.c, src/ops/conv.c) ---------------------- */

/* Writes the indices (u32) of the k largest values of input into out_idx[0..k), largest
   first. input is f32 of any shape, read as one row of n = numel(input) values; out_idx is
   u32 with numel >= k; its elements from k on are left untouched. 1 <= k <= min(n, 1024).
   Order: a larger value first; equal values (-0 equals +0) by lower index; NaN ranks below
   every number, -inf included, so a NaN is chosen only when fewer than k values are not
   NaN, and then the NaNs come last, by index. The result is deterministic: the same input
   always gives the same indices. Runs on the GPU in one dispatch for n <= 1024 and five
   for longer rows (a radix select over all the GPU's cores that stops once the bucket of
   the k-th largest value is small, then one sort of at most 2048 candidates); for
   those the engine keeps a scratch buffer (about 4 bytes per element of the longest row so
   far, at most 2 MiB) until it is destroyed.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL; k == 0; k > n), WGML_ERROR_CONTEXT,
           WGML_ERROR_DTYPE (input not f32, out_idx not u32),
           WGML_ERROR_LIMIT (k > 1024; n over 2^32 - 4097),
           WGML_ERROR_SHAPE (numel(out_idx) < k). */
WGML_API wgml_status wgml_top_k(wgml_engine *e, const wgml_tensor *input, wgml_tensor *out_idx, uint32_t k);
/* Depthwise 1-D convolution, kernel 3, padding 1 (each channel d filtered on its own):
       out[d, s] = bias[d] + sum_{j=0..2} weight[d, j] * input[d, s + j - 1],
   with input[d, -1] = input[d, seq_len] = 0. All tensors f32: input 2-D [dim, seq_len];
   out of the same shape [dim, seq_len]; weight of dim * 3 elements ([dim, 3], row-major);
   bias of dim elements. Any dim, seq_len >= 1.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL), WGML_ERROR_CONTEXT, WGML_ERROR_DTYPE,
           WGML_ERROR_ALIAS (out is the same tensor as input, weight or bias: no in place),
           WGML_ERROR_SHAPE (input not 2-D, out not input's shape, weight or bias of the
           wrong element count), WGML_ERROR_LIMIT (more than 2^32 - 4097 elements). */
WGML_API wgml_status wgml_conv1d(wgml_engine *e, const wgml_tensor *input, const wgml_tensor *weight,
                                 const wgml_tensor *bias, wgml_tensor *out);

/* Causal depthwise 1-D convolution (LFM2's short convolution), over each sequence of
   input [batch, seq, dim] (2-D [seq, dim]: one sequence) on its own:
       out[b, t, d] = bias[d] + sum_{j<K} weight[d, j] * input[b, t - (K - 1) + j, d],
   input zero before each sequence's start (PyTorch's Conv1d with groups = dim and padding
   K - 1, its first seq outputs). weight [dim, K] (any shape of dim * K elements, K in
   1 .. 16; Hugging Face stores it [dim, 1, K]); bias [dim], or NULL for none; out of
   input's shape. All f32.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL e, input, weight or out), WGML_ERROR_CONTEXT,
           WGML_ERROR_DTYPE, WGML_ERROR_ALIAS (out is input, weight or bias),
           WGML_ERROR_SHAPE (input not 2-D or 3-D; weight not dim * K elements with K in
           1 .. 16; bias not dim elements; out not input's shape), WGML_ERROR_LIMIT. */
WGML_API wgml_status wgml_conv1d_causal(wgml_engine *e, const wgml_tensor *input, const wgml_tensor *weight,
                                        const wgml_tensor *bias, wgml_tensor *out);
/* The backward of wgml_conv1d_causal given grad_out (input's shape): writes grad_input
   (input's shape; NULL: not computed); grad_weight (weight's element count) and grad_bias
   ([dim]) written, or added to with accumulate (NULL: not computed; grad_bias only with
   grad_weight: one pass over the rows computes both, each sum in row order, so the same
   inputs give the same bits). Each output distinct from the others and the inputs.
   Errors: as wgml_conv1d_causal, plus WGML_ERROR_INVALID_ARGUMENT (grad_bias without
           grad_weight) and WGML_ERROR_SHAPE for the gradients' shapes. */
WGML_API wgml_status wgml_conv1d_causal_backward(wgml_engine *e, const wgml_tensor *input, const wgml_tensor *weight,
                                                 const wgml_tensor *grad_out, wgml_tensor *grad_input,
                                                 wgml_tensor *grad_weight, wgml_tensor *grad_bias, bool accumulate);

/* ---- quantization (src/ops/quant.c) -------------------------------------------------- */

/* Unpacks bytes to floats, unscaled: out[i] = (float)(byte i of input) for every
   i < numel(out). input is a u32 or u8 tensor read as its little-endian bytes (byte i of a
   u32 tensor is bits [8 (i % 4), 8 (i % 4) + 8) of word i / 4); out is f32 with at most as
   many elements as input has bytes (bytes past numel(out) are ignored).
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL), WGML_ERROR_CONTEXT,
           WGML_ERROR_DTYPE (input not u32/u8, out not f32),
           WGML_ERROR_SHAPE (numel(out) > bytes of input), WGML_ERROR_LIMIT. */
WGML_API wgml_status wgml_dequantize(wgml_engine *e, const wgml_tensor *input, wgml_tensor *out);
/* MLX affine dequantization, 8 bits in groups of 64:
       out[i] = byte(weight, i) * scales[i / 64] + biases[i / 64].
   Exactly wgml_affine_dequantize_with(e, weight, scales, biases, out, 8, 64). */
WGML_API wgml_status wgml_affine_dequantize(wgml_engine *e, const wgml_tensor *weight, const wgml_tensor *scales,
                                            const wgml_tensor *biases, wgml_tensor *out);
/* MLX affine dequantization of bits-bit values in groups of group_size:
       out[i] = q(i) * scales[i / group_size] + biases[i / group_size]   (in f32, as the
                packed WGML_AFFINE weights unpack: see PACKED WEIGHTS),
   where q(i) is element i of weight's packed stream, MLX order: weight is read as
   little-endian u32 words (a u32 tensor as MLX stores it, or the same bytes as u8) and
       bits = 8: q(i) = bits [8j, 8j + 8) of word i / 4, j = i % 4 (byte i),
       bits = 4: q(i) = bits [4j, 4j + 4) of word i / 8, j = i % 8.
   Combinations: bits 4 or 8; group_size 32, 64 or 128; weight u32 or u8; scales and
   biases each f32, f16 or bf16 (independently; 16-bit values are unpacked in the kernel,
   the device needs no shader-f16); out f32. Every combination of these is supported.
   Shapes (by element count): numel(out) = n, a multiple of group_size; numel(scales) =
   numel(biases) = n / group_size; weight holds exactly n * bits / 8 bytes.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL; bits or group_size not listed above),
           WGML_ERROR_CONTEXT, WGML_ERROR_DTYPE (a dtype not listed above),
           WGML_ERROR_ALIAS (out is the same tensor as scales or biases),
           WGML_ERROR_SHAPE (the counts above), WGML_ERROR_LIMIT. */
WGML_API wgml_status wgml_affine_dequantize_with(wgml_engine *e, const wgml_tensor *weight,
                                                 const wgml_tensor *scales, const wgml_tensor *biases,
                                                 wgml_tensor *out, uint32_t bits, uint32_t group_size);
/* Unpacks a packed, f16 or bf16 weight w [rows, cols] (see PACKED WEIGHTS) into f32:
   out (any shape of rows * cols elements) gets W row-major, each value exactly as the
   layout's formula gives it. For anything no op reads packed.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL), WGML_ERROR_CONTEXT, WGML_ERROR_DTYPE (w
           neither packed nor 16-bit, out not f32), WGML_ERROR_SHAPE (w not 2-D; out's
           element count), WGML_ERROR_LIMIT (w over 4 GiB). */
WGML_API wgml_status wgml_unpack(wgml_engine *e, const wgml_tensor *w, wgml_tensor *out);

/* ---- matrix products (src/ops/matmul.c) ---------------------------------------------- */

/* MATRIX PRODUCTS
   All three compute out[M, N] = A @ B with f32 inputs, f32 accumulation and an f32 output;
   they differ in how A and B are stored (all row-major):

     wgml_matmul     a [..., K] is A [M, K]     b [K, N] is B          out = a @ b
     wgml_matmul_bt  a [..., K] is A [M, K]     b [N, K] is B^T        out = a @ b^T
     wgml_matmul_at  a [..., M] is A^T [K, M]   b [..., N] is B        out = a^T @ b

   Packed weights. b of wgml_matmul and wgml_matmul_bt (and their _with forms) may also be
   a packed, f16 or bf16 weight W [rows, cols] (see PACKED WEIGHTS): wgml_matmul_bt(a, W)
   is a @ W^T (a linear layer's forward), wgml_matmul(a, W) is a @ W (its input gradient).
   The kernels unpack W in registers, f32 arithmetic: for M <= 8 (decoding) a
   matrix-vector kernel that streams the packed bytes once, else 64 x 64 tiles that unpack
   W's tile into workgroup memory once for 64 rows of a; the result matches the f32
   product of the unpacked W (wgml_unpack) within the rounding bound below. A W over 4 GiB
   is WGML_ERROR_LIMIT.

   Shapes. b of wgml_matmul and wgml_matmul_bt must be 2-D; the leading dimensions of a
   flatten into M (M = numel(a) / K), so a [batch, seq, K] or a 1-D vector [K] (M = 1) work.
   For wgml_matmul_at, M is a's last dimension and N is b's; the leading dimensions of both
   flatten into K, which must be the same (K = numel(a) / M = numel(b) / N): the weight
   gradient dW = x^T @ dy of x [batch, seq, in] and dy [batch, seq, out] is
   wgml_matmul_at(x, dy, dW [in, out]). out may have any shape with M * N elements and last
   dimension N ([M, N], [batch, seq, N], or [N] when M = 1). Any M, N, K >= 1 works.

   Written: every element of out (its previous contents are never read), or with the
   _with forms and accumulate set, out += A @ B (see wgml_matmul_options). Results are
   deterministic (no floating-point atomics, sums in a fixed order; the same call on the
   same device gives the same bits) but may differ in the last bits between adapters and
   kernel variants: each element is a sum of K products whose error is at most about
   K * 2^-24 * sum_k |A[m,k] * B[k,n]|.

   Kernels: M == 1 or N == 1 (decode) use matrix-vector kernels that read each weight once
   with vec4 loads (where the device offers subgroups, the one for b as [K, N] adds its
   threads' partial sums with subgroup shuffles); other shapes use a register-tiled kernel
   with tiles sized from the adapter's workgroup-memory limit; small outputs with a long K
   are split along K into several workgroups and a reduction, through a scratch buffer of
   (slices * M * N) floats that the engine keeps and grows to the largest need; where the
   tiles would leave a last round of work for only part of the GPU's cores (8192^3, 4096^3),
   those last tiles alone are split along K when a model of the GPU's schedule predicts a
   gain (a scratch of their outputs once per slice, within one storage binding). On a GPU
   (the thresholds are the adapter profile's; a GPU wgml does not know gets the H200's, a
   CPU adapter makes no copies), wgml_matmul_bt with M >= 1024 and b of at most 256 MiB copies b
   transposed into another engine scratch of K * N4 floats (N4: N rounded up to a multiple of
   4) and runs as wgml_matmul (6 - 10% faster on the H200), and wgml_matmul (or
   wgml_matmul_bt after that copy) with M >= 1024, N >= 512 and a of at most 256 MiB copies a
   transposed into a third scratch of K * M4 floats and runs as wgml_matmul_at (4 - 18%
   faster on the H200). On a GPU, an operand the kernel then reads along M or N (a of
   wgml_matmul_at, b of wgml_matmul and wgml_matmul_at) whose M (N) is not a multiple of 4 is
   copied with its rows padded to one (into the same scratches, when the other side of out is
   512 or more and the copy at most 256 MiB). When K is not a multiple of the tile's step and
   both operands are copies, the copies get zero rows up to the next step (Ks rows, K rounded
   up to the step of 8 - 32: the scratches above hold Ks * N4 and Ks * M4 floats) and the
   kernel runs whole steps; otherwise, when K is 1024 or more and N a multiple of 4, the last
   few values of k are added into out by a second pass (one more rounding). A copy stays
   current until its source is written (by any op of the context, wgml_tensor_write or
   wgml_tensor_zero): consecutive products of one unchanged tensor copy it once (q, k and v
   of one x). Sizes that are multiples of 4 (and K of 8) take the fastest path; with these
   copies 4095^3 runs within 3% of 4096^3 on the H200, but an operand too large for its
   padded copy is read in scalars (a vocabulary of 50,257: about 15% slower in the weight
   gradient; pad such a dimension to a multiple of 4).

   Aliasing: out must not be the same tensor as a or b (WGML_ERROR_ALIAS); a and b may be
   the same tensor (e.g. wgml_matmul_bt(x, x, gram)).

   Errors (nothing is recorded, out is untouched):
     WGML_ERROR_INVALID_ARGUMENT  engine, a, b or out is NULL
     WGML_ERROR_CONTEXT           a tensor belongs to another context than the engine
     WGML_ERROR_DTYPE             a, b or out is not f32
     WGML_ERROR_ALIAS             out is the same tensor as a or b
     WGML_ERROR_SHAPE             b is not 2-D (matmul, matmul_bt); a's last dimension is not
                                  K (matmul: b's first, matmul_bt: b's second dimension); the
                                  K of a and b differ (matmul_at); out does not have M * N
                                  elements with last dimension N
     WGML_ERROR_LIMIT             a tensor over 2^32 elements (32-bit indexing); a matrix
                                  larger than one storage binding cannot exist as a tensor
                                  (wgml_tensor_create refuses it); the adapter's workgroup
                                  memory holds no tile of the tiled kernel
     WGML_ERROR_OUT_OF_MEMORY     the split-K buffer or a copy could not be allocated */

/* out[M, N] = a[M, K] @ b[K, N]. */
WGML_API wgml_status wgml_matmul(wgml_engine *e, const wgml_tensor *a, const wgml_tensor *b, wgml_tensor *out);
/* out[M, N] = a[M, K] @ b[N, K]^T: the linear layer y = x @ W^T with PyTorch's weight layout
   W [out, in]. Its gradients: dx = wgml_matmul(dy, W), dW = wgml_matmul_at(dy, x). */
WGML_API wgml_status wgml_matmul_bt(wgml_engine *e, const wgml_tensor *a, const wgml_tensor *b, wgml_tensor *out);
/* out[M, N] = a[K, M]^T @ b[K, N]: the weight gradient of a linear layer. */
WGML_API wgml_status wgml_matmul_at(wgml_engine *e, const wgml_tensor *a, const wgml_tensor *b, wgml_tensor *out);

/* Options of the _with forms; zero-initialised (or a NULL pointer) they are the plain functions. */
typedef struct wgml_matmul_options {
    /* out += A @ B (BLAS's beta = 1) instead of out = A @ B: out is read, and each element
       becomes out + (its finished sum of K products), one rounding more than the product
       alone. For sums of products into one tensor without a separate add: the input
       gradient of an x that feeds several linear layers (dx = dq Wq + dk Wk + dv Wv), weight
       gradients summed over micro-batches. Every kernel and variant supports it, at the
       speed of the plain product plus one read of out. */
    bool accumulate;
    /* The product's precision (wgml_precision; DEFAULT: the context's). A value outside
       the enum is WGML_ERROR_INVALID_ARGUMENT. */
    wgml_precision precision;
} wgml_matmul_options;

/* wgml_matmul, wgml_matmul_bt and wgml_matmul_at with options (opts may be NULL: the
   defaults). Shapes, aliasing, kernels and errors as above; a rejected call leaves out
   untouched in both modes. */
WGML_API wgml_status wgml_matmul_with(wgml_engine *e, const wgml_tensor *a, const wgml_tensor *b, wgml_tensor *out,
                                      const wgml_matmul_options *opts);
WGML_API wgml_status wgml_matmul_bt_with(wgml_engine *e, const wgml_tensor *a, const wgml_tensor *b, wgml_tensor *out,
                                         const wgml_matmul_options *opts);
WGML_API wgml_status wgml_matmul_at_with(wgml_engine *e, const wgml_tensor *a, const wgml_tensor *b, wgml_tensor *out,
                                         const wgml_matmul_options *opts);

/* ---- normalisation and softmax (src/ops/norm.c, src/ops/softmax.c) ------------------- */

/* RMSNorm over the last dimension, for tensors of any rank: a tensor of numel n and last
   dimension d is n/d rows of d values, each normalised on its own:
       out = x / sqrt(mean(x^2) + eps) * weight          (eps = 1e-5)
   input, out: f32, the same element count (out may have another shape).
   weight: f32 with exactly d elements (any shape), applied to every row.
   out is written in full. A row of zeros gives zeros (for eps > 0).
   Aliasing: out must not be input or weight (WGML_ERROR_ALIAS).
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL), WGML_ERROR_CONTEXT, WGML_ERROR_DTYPE,
           WGML_ERROR_SHAPE (weight's length is not d; out's element count differs),
           WGML_ERROR_ALIAS, WGML_ERROR_LIMIT (more than 2^32 - 4097 elements). */
WGML_API wgml_status wgml_rms_norm(wgml_engine *e, const wgml_tensor *input, const wgml_tensor *weight,
                                   wgml_tensor *out);
/* wgml_rms_norm with a caller's eps: finite and >= 0, else WGML_ERROR_INVALID_ARGUMENT.
   With eps = 0 a row of zeros gives NaN (0/0). */
WGML_API wgml_status wgml_rms_norm_eps(wgml_engine *e, const wgml_tensor *input, const wgml_tensor *weight,
                                       wgml_tensor *out, float eps);
/* out = RMSNorm(x + residual) * weight (eps 1e-5): the sum s = x + residual (rounded to
   f32, as if computed first) is normalised over the last dimension as in wgml_rms_norm.
   x, residual, out: f32 with the same element count; weight: f32 of the last dimension of x.
   x and residual may be the same tensor.
   Aliasing: out must not be x, residual or weight (WGML_ERROR_ALIAS).
   Errors: as wgml_rms_norm (residual's element count differing from x's: WGML_ERROR_SHAPE). */
WGML_API wgml_status wgml_rms_norm_residual(wgml_engine *e, const wgml_tensor *x, const wgml_tensor *residual,
                                            const wgml_tensor *weight, wgml_tensor *out);
/* wgml_rms_norm_residual with a caller's eps (finite, >= 0), which also writes the sum
   s = x + residual into sum_out when sum_out is not NULL, in the same pass: a transformer
   block keeps its residual stream with one read of each input.
   sum_out (f32, the element count of x) may be a separate tensor, or x itself, or
   residual itself (the in-place residual stream: h = h + delta, out = RMSNorm(h) * weight
   is wgml_rms_norm_residual_with(e, delta, h, weight, out, h, eps)); it may even be x when
   x and residual are the same tensor. Each element of the sum is read before it is
   overwritten, so in-place use gives exactly the results of a separate sum_out.
   Aliasing: out must not be x, residual, weight or sum_out; sum_out must not be weight
   (WGML_ERROR_ALIAS).
   Errors: as wgml_rms_norm_residual, plus eps out of range (WGML_ERROR_INVALID_ARGUMENT),
           sum_out of another dtype, context or element count. */
WGML_API wgml_status wgml_rms_norm_residual_with(wgml_engine *e, const wgml_tensor *x,
                                                 const wgml_tensor *residual, const wgml_tensor *weight,
                                                 wgml_tensor *out, wgml_tensor *sum_out, float eps);
/* Options of wgml_rms_norm_with. */
typedef struct wgml_rms_norm_options {
    float eps;              /* used as given: finite and >= 0 (0 lets a row of zeros give NaN) */
    float weight_offset;    /* out = RMSNorm(x) * (weight + weight_offset), the sum rounded to f32
                               as each weight is read: 1 for norms whose weights are stored as
                               w of (1 + w) (Gemma's); finite. 0: the plain norm */
} wgml_rms_norm_options;

/* The RMSNorm forward in one call with every choice: out = RMSNorm(x [+ residual]) *
   (weight + opts->weight_offset), and the sum into sum_out, as wgml_rms_norm_residual_with
   does. residual may be NULL (a plain norm of x; sum_out must then be NULL too); opts NULL
   means eps 1e-5 and no offset. Shapes, aliasing and errors as wgml_rms_norm_residual_with,
   plus a weight_offset that is not finite (WGML_ERROR_INVALID_ARGUMENT). */
WGML_API wgml_status wgml_rms_norm_with(wgml_engine *e, const wgml_tensor *x, const wgml_tensor *residual,
                                        const wgml_tensor *weight, wgml_tensor *out, wgml_tensor *sum_out,
                                        const wgml_rms_norm_options *opts);
/* Gradients of out = RMSNorm(input) * weight (the eps of the forward pass), with
   r = 1 / sqrt(mean(x^2) + eps) per row of d values:
       grad_in  = r * grad_out * weight - x * r^3 * sum(grad_out * weight * x) / d
       grad_weight[j] = sum over rows of grad_out[j] * x[j] * r
   grad_out, input, grad_in: f32, the same element count; weight, grad_weight: f32 with d
   elements. grad_in is written in full. grad_weight may be NULL (not computed); otherwise
   it is written, not accumulated, and deterministic: the rows are summed in a fixed order
   that depends only on the shape (partial sums over fixed blocks of rows, then a fixed
   reduction), so the same inputs give the same bits on every run. The partial sums use
   the engine's scratch buffer (groups * d floats, at most 1024 * d).
   Aliasing: grad_in and grad_weight must not be any input, nor each other (WGML_ERROR_ALIAS).
   Errors: as wgml_rms_norm, for every tensor; eps out of range: WGML_ERROR_INVALID_ARGUMENT. */
WGML_API wgml_status wgml_rms_norm_backward(wgml_engine *e, const wgml_tensor *grad_out, const wgml_tensor *input,
                                            const wgml_tensor *weight, wgml_tensor *grad_in,
                                            wgml_tensor *grad_weight, float eps);

/* Options of wgml_rms_norm_backward_with; zero-initialised (or a NULL pointer) they are
   wgml_rms_norm_backward. */
typedef struct wgml_rms_norm_backward_options {
    /* grad_in += the input gradient instead of grad_in = it (grad_in is read; one rounding
       more): the residual stream's gradient in a pre-norm block (dh += RMSNorm's backward of
       the branch) without a separate add. grad_weight, when given, is still written. */
    bool accumulate;
    /* The forward's weight_offset (wgml_rms_norm_options): weight is read as weight +
       weight_offset in grad_in; grad_weight is unchanged by it (d(w + c)/dw = 1). */
    float weight_offset;
} wgml_rms_norm_backward_options;

/* wgml_rms_norm_backward with options (opts may be NULL). Shapes, aliasing and errors as
   wgml_rms_norm_backward, plus a weight_offset that is not finite (WGML_ERROR_INVALID_ARGUMENT). */
WGML_API wgml_status wgml_rms_norm_backward_with(wgml_engine *e, const wgml_tensor *grad_out, const wgml_tensor *input,
                                                 const wgml_tensor *weight, wgml_tensor *grad_in,
                                                 wgml_tensor *grad_weight, float eps,
                                                 const wgml_rms_norm_backward_options *opts);
/* Softmax over the last dimension, for tensors of any rank and rows of any length (1 to
   the device's buffer limit; a 262,144-entry vocabulary row is fine):
       out = exp(x - max(x)) / sum(exp(x - max(x)))   per row
   Stable for logits of any magnitude up to about 1e30 (exp only sees x - max <= 0).
   Masking: -inf entries take no part; their output is exactly 0. A row of only -inf
   entries (fully masked) gives zeros, not NaN. +inf or NaN entries give unspecified values
   in their row.
   input, out: f32, the same element count. out is written in full. Few very long rows are
   split over several workgroups; their partial statistics use the engine's scratch buffer.
   Aliasing: out must not be input (WGML_ERROR_ALIAS).
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL), WGML_ERROR_CONTEXT, WGML_ERROR_DTYPE,
           WGML_ERROR_SHAPE (element counts differ), WGML_ERROR_ALIAS, WGML_ERROR_LIMIT. */
WGML_API wgml_status wgml_softmax(wgml_engine *e, const wgml_tensor *input, wgml_tensor *out);
/* Gradient of softmax over the last dimension, given its output s = final_out:
       grad_in = s * (grad_out - sum(grad_out * s))   per row
   grad_out, final_out, grad_in: f32, the same element count (rows are the last dimension of
   final_out). Entries where s is 0 (masked) get 0.
   Aliasing: grad_in must not be grad_out or final_out (WGML_ERROR_ALIAS).
   Errors: as wgml_softmax. */
WGML_API wgml_status wgml_softmax_backward(wgml_engine *e, const wgml_tensor *grad_out, const wgml_tensor *final_out,
                                           wgml_tensor *grad_in);

/* ---- rotary embeddings (src/ops/rope.c) ---------------------------------------------- */

/* Rotary position embeddings, in place on an f32 tensor of one of these layouts:
       [hidden]                   one token (seq = 1)
       [seq, hidden]
       [batch, seq, rest...]      hidden = the product of rest, e.g. [batch, seq, heads, head_dim]
   hidden is a whole number of head vectors of head_dim values. Every head vector of token s
   (of each batch entry) is rotated for position pos + s: its pairs, (i, i + head_dim/2)
   for rotate-half, are turned by the angle (pos + s) * f_i, f_i = theta^(-2i/head_dim):
       x' = x cos - y sin,   y' = y cos + x sin.
   wgml_rope: rotate-half, theta 10000.
   Accuracy: the angle is reduced in integer turns (the phase to 2^-32 turn), never as a
   float product, so every result is within about 5e-7 * (|x| + |y|) of the exact rotation
   at any position: 0 and 1e6 alike. (Frequencies from theta are computed in long double;
   where that is 80-bit, as on x86-64, this holds up to position 2^32; where long double is
   double, up to about 1e8. inv_freq values are used exactly.)
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL; head_dim odd, 0 or over 256; pos + seq - 1
           beyond 2^32 - 1), WGML_ERROR_SHAPE (hidden not a multiple of head_dim),
           WGML_ERROR_DTYPE, WGML_ERROR_CONTEXT, WGML_ERROR_LIMIT. */
WGML_API wgml_status wgml_rope(wgml_engine *e, wgml_tensor *tensor, uint32_t head_dim, uint32_t pos);
/* wgml_rope with base frequency theta (the rope_theta of a Hugging Face config, e.g. 100000
   for SmolLM2): finite and >= 1, else WGML_ERROR_INVALID_ARGUMENT (0 included). */
WGML_API wgml_status wgml_rope_theta(wgml_engine *e, wgml_tensor *tensor, uint32_t head_dim, uint32_t pos,
                                     float theta);

typedef enum wgml_rope_pairing {
    WGML_ROPE_ROTATE_HALF = 0,  /* pairs (i, i + head_dim/2): Llama, NeoX */
    WGML_ROPE_INTERLEAVED = 1   /* pairs (2i, 2i + 1): GPT-J */
} wgml_rope_pairing;

/* Zero-initialise, then set head_dim; the default configuration is rotate-half, theta
   10000, position 0, frequencies theta^(-2i/head_dim), forward rotation. */
typedef struct wgml_rope_options {
    uint32_t head_dim;            /* required: even, 2..256 */
    uint32_t pos;                 /* position of the first token */
    float theta;                  /* 0 means 10000; else finite and >= 1 (unused with inv_freq) */
    wgml_rope_pairing pairing;
    /* Optional f32 tensor of head_dim/2 elements (any shape) that replaces
       theta^(-2i/head_dim), so scaled schemes such as Llama 3's can be expressed. Values
       are used exactly as stored (any finite value of magnitude below 2^63, negative
       included; the angle is reduced exactly from the f32 bits). */
    const wgml_tensor *inv_freq;
    bool inverse;                 /* rotate by -angle: the gradient of rope */
    /* Optional u32 tensor of one element per sequence (the batch dimension: 1 for a 1-D
       or 2-D tensor) giving each sequence its own first position: token t of sequence b
       is at positions[b] + t (pos must then be 0). For sequences decoded together, each at
       its own length. */
    const wgml_tensor *positions;
} wgml_rope_options;

/* Rotary embeddings as configured by opts (see wgml_rope for the layouts and accuracy).
   Errors: as wgml_rope, plus WGML_ERROR_INVALID_ARGUMENT (opts NULL, pairing not a
           wgml_rope_pairing, theta out of range), and for inv_freq WGML_ERROR_SHAPE
           (not head_dim/2 elements), WGML_ERROR_DTYPE, WGML_ERROR_CONTEXT; for positions
           WGML_ERROR_SHAPE (not one per sequence), WGML_ERROR_DTYPE (not u32),
           WGML_ERROR_INVALID_ARGUMENT (pos not 0). inv_freq can never be the rotated
           tensor (its length rules that out). */
WGML_API wgml_status wgml_rope_with(wgml_engine *e, wgml_tensor *tensor, const wgml_rope_options *opts);
/* The gradient of wgml_rope_theta: the inverse rotation of grad, in place (rotate-half;
   for other options use wgml_rope_with with inverse = true). theta: finite and >= 1.
   Errors: as wgml_rope_theta. */
WGML_API wgml_status wgml_rope_backward(wgml_engine *e, wgml_tensor *grad, uint32_t head_dim, uint32_t pos,
                                        float theta);

/* ---- attention (src/ops/attention.c) -------------------------------------------------- */

/*
 * ATTENTION
 * =========
 * For every batch b, query head h and query row i:
 *     P[j] = softmax over the keys j visible to i of  scale * q[b,i,h,:] . k[b,j,h/g,:] + mask[b,h,i,j]
 *     out[b,i,h,:] = sum_j dropout(P[j]) * v[b,j,h/g,:]
 * where g = num_heads / num_kv_heads (grouped-query attention; num_kv_heads == 1 is MQA).
 *
 * Layout: q, out, grad_out, grad_q are [batch, seq_q, num_heads, head_dim]; k, v, grad_k,
 * grad_v are [batch, seq_k, num_kv_heads, head_dim]; every tensor f32, dense, row-major.
 * seq_q and seq_k may differ. head_dim must be even and at most 256 (any even value: 64,
 * 80, 96, 128, 256, ...); odd head dims and head dims over 256 are refused. Above 128
 * (Gemma 3's 256) the tiled kernels run, slower than the 64 x 64 ones below it, and
 * options.scores is refused there (WGML_ERROR_LIMIT). seq_q and seq_k may
 * be up to 2^26 (131072 keys and more work while the buffers fit the device).
 *
 * Visibility: query i sits at absolute position i + causal_offset (e.g. the number of
 * tokens already in a KV cache). Key j is visible when
 *     (!causal || j <= i + causal_offset) && (window == 0 || |i + causal_offset - j| < window).
 * Work follows the visible band: key blocks no query of a block can see are skipped.
 *
 * Mask (optional, NULL for none): an additive f32 tensor, 4-D [batch|1, num_heads|1,
 * seq_q|1, seq_k|1] or 2-D [seq_q|1, seq_k|1]; a dimension of size 1 broadcasts. 3-D
 * masks are refused (ambiguous). An entry of -inf hides its key. The kernels work in base
 * 2: they form (score * scale + mask) * log2(e) in f32, so a finite entry that takes that
 * sum below -FLT_MAX (for a mask entry alone: below -FLT_MAX / log2(e) = -2.3587e38)
 * overflows to -inf and hides its key exactly as -inf does. To hide a key use -inf (or
 * -FLT_MAX); to bias it, use values above -1e38, which never overflow.
 *
 * Rows without a key: a query row with no visible key, or whose every visible key is
 * masked with -inf, yields out = 0 and grad_q = 0 (never NaN) and adds nothing to grad_k
 * and grad_v.
 *
 * Dropout (dropout_prob p in [0, 1), 0 = off): each probability P[b,h,i,j] is kept with
 * probability 1 - p and scaled by 1/(1 - p), or set to 0. The decision is a pure function
 * of (seed, b * num_heads + h, i, j), i being the row of q (not its position):
 *     mix32(x): x ^= x >> 16; x *= 0x7feb352d; x ^= x >> 15; x *= 0x846ca68b; x ^= x >> 16
 *     seed_key  = mix32(seed_lo ^ mix32(seed_hi ^ 0x9e3779b9)),  seed_key2 = mix32(seed_key ^ 0x85ebca6b)
 *     keep iff mix32(mix32(mix32(seed_key ^ (b * num_heads + h)) + i) ^ mix32(seed_key2 ^ j))
 *              >= floor(p * 2^32)
 * so one seed gives identical results run after run, and the backward regenerates the
 * forward's decisions exactly.
 *
 * Determinism and memory: no atomics; results are bitwise reproducible. The forward
 * stores nothing of size seq_q x seq_k unless the caller keeps the scores
 * (options.scores; it then also keeps each query row's max per 128 keys in a scratch of
 * batch * num_heads * ceil(seq_q / 128) * ceil(seq_k / 128) * 128 floats). The backward keeps 2 floats per query row (a
 * scratch of 2 * batch * num_heads * seq_q floats) and, where the 64 x 64 kernels run,
 * the gradient of the scores dS (16 KiB per block of 64 queries and 64 keys, per batch
 * and head: 400 MB at batch 8, 12 heads, seq 1024), so that dq costs one product instead
 * of three (with head_dim % 4 == 0 stored as one dense matrix per head and multiplied by
 * a register-tiled product kernel, else in 64 x 64 blocks); at most 1 GiB of them at a time (then the backward runs over
 * ranges of batches and kv heads), none where one batch and kv head alone would need
 * more (seq above about 16,000 at group 1); decoding (seq_q == 1) keeps a
 * partial result per key split. These live in scratch buffers the engine keeps and grows
 * to the largest need (wgml_engine_destroy frees them).
 * With seq_q == 1 the forward splits the keys across workgroups (flash-decoding) and
 * merges the partials in a second pass.
 *
 * Aliasing: no output may share memory with an input or with another output
 * (WGML_ERROR_ALIAS); inputs may alias each other (k == v, q == k, ...).
 *
 * Kernels: the forward with seq_q > 1 runs blocks of 64 queries x 64 keys (head_dim in
 * chunks of 16 floats) and the backward 64 x 64 blocks (head_dim in chunks of 8 floats up
 * to head_dim 64, above of 32 where the device holds them, else 16, else 8) with dq from
 * the stored dS (above); on GPUs each is built for the call's mask and dropout options.
 * They need 256 invocations per workgroup and 24 KiB of workgroup storage (the backward's
 * dk, dv also 10 storage buffers per stage); where the device has less, and at head_dim
 * above 128 on every device, older tiled kernels shaped by its workgroup storage run
 * instead, with the same results to rounding (their backward at head_dim 256 needs
 * 16,960 bytes of workgroup storage: a 16 KiB device runs head_dim 225 - 256 forward and
 * decoding only). The choice follows the device's limits and head_dim alone: no
 * environment variable changes it.
 *
 * Errors of every attention call (nothing is recorded when one is returned):
 *   WGML_ERROR_INVALID_ARGUMENT  engine or a tensor NULL; dropout_prob outside [0, 1) or
 *                                NaN; scale not finite; causal_offset over 2^28;
 *                                options.scores without options.lse or with a window
 *   WGML_ERROR_CONTEXT           a tensor of another context than the engine
 *   WGML_ERROR_DTYPE             a tensor that is not f32 (options.lse and .scores included)
 *   WGML_ERROR_SHAPE             q/k not 4-D (2-D for the single-head calls); batch of k
 *                                differs from q; num_heads not a multiple of num_kv_heads;
 *                                head_dim of k differs from q, is odd or over 256; v not
 *                                shaped like k; out, grad_out, grad_q not shaped like q;
 *                                grad_k, grad_v not shaped like k; a mask shape that does
 *                                not broadcast; options.lse not [batch, num_heads, seq_q];
 *                                options.scores with too few elements
 *   WGML_ERROR_ALIAS             an output sharing memory with an input or another output
 *                                (options.scores: with any other tensor of the call)
 *   WGML_ERROR_LIMIT             seq_q or seq_k over 2^26, a tensor of 2^32 elements or
 *                                more, or a device without enough workgroup storage;
 *                                options.scores where the call does not run the 64 x 64
 *                                kernels (head_dim above 128 included)
 *   WGML_ERROR_OUT_OF_MEMORY     the scratch of the backward or of decoding
 */

/* Zero-initialise: every zero field is the default. NULL options mean all defaults. */
typedef struct wgml_attention_options {
    bool causal;              /* key j visible to query i only when j <= i + causal_offset */
    uint32_t causal_offset;   /* absolute position of query 0 (e.g. tokens already cached); <= 2^28 */
    uint32_t window;          /* 0: unlimited; else key j visible only when |i + causal_offset - j| < window */
    float dropout_prob;       /* in [0, 1); 0: no dropout */
    uint64_t seed;            /* dropout decisions are a pure function of this and the indices */
    float scale;              /* 0 means 1/sqrt(head_dim); otherwise any finite value */
    /* NULL, or f32 [batch, num_heads, seq_q]: the log-sum-exp of each query row,
       ln(sum_j exp(score_ij)) over its visible keys (scores after scale and mask, before
       dropout; -inf for a row with no visible key). The forward (_v2_with) also writes it;
       the backward (_v2_backward_with) reads it instead of recomputing it, which saves a
       pass over q k^T: it must hold the forward's values for the same inputs and options
       (other values give wrong gradients, unchecked). */
    wgml_tensor *lse;
    /* NULL, or f32 with at least batch * num_heads * ceil(seq_q / 64) * ceil(seq_k / 64) *
       4096 elements (any shape): the scores q k^T * scale of every block of 64 queries x 64
       keys the forward visits, before the mask, in the library's own layout. The forward
       (_v2_with) writes them, the backward (_v2_backward_with) reads them instead of
       computing that product again (B8 H12 S1024 D64 causal on the H200: the backward about
       20% faster), so both must get the same tensor for the same inputs and options
       (other values give wrong gradients, unchecked). Needs lse set and window 0; the 64 x
       64 kernels must be the ones the call runs (seq_q > 1, head_dim <= 128, an adapter
       with 24 KiB of workgroup storage, 256 invocations per workgroup and 10 storage
       buffers per stage), else WGML_ERROR_LIMIT. Costs 16 KiB per block pair (402 MB at
       B8 H12 S1024). Without a
       mask or dropout and with head_dim % 4 == 0 the forward that keeps them runs as two
       matrix products instead of an online softmax: the scores, stored with each row's
       max, then out = softmax(scores) v from the stored scores (the same results to
       rounding; B8 H12 S1024 D64 causal on the H200: the forward about 20% faster). */
    wgml_tensor *scores;
    /* The precision of attention's products (wgml_precision; DEFAULT: the context's
       wgml_context_desc.matmul_precision). F16 runs the forward of seq_q > 1 on the matrix
       units where the adapter has them (wgml_adapter_info.matrix_m) and head_dim is at most
       128 (prefill_mma): q * scale, k, v and the softmax's probabilities rounded to f16
       (beyond its range +-inf), every sum in f32, the log-sum-exp (lse) from those scores.
       The backward at F16 runs its four products there too (mb_dkdv, mb_dq) where head_dim
       fills at most 8 of the adapter's result matrices (128 with 16 x 16 matrices, 64 with
       8 x 8): q * scale, k, v, dout, the kept probabilities and dS rounded to f16, the
       probabilities, dP and every sum in f32; its statistics pass (lse given, or
       recomputed) is f32. Memory: f16 copies of k and v (forward; k transposed), and of q,
       dout, k and v (backward), padded to whole blocks, in the
       engine's scratch, kept and reused until the engine is destroyed; a call whose copies
       would exceed maxStorageBufferBindingSize runs the f32 kernels. Elsewhere, with
       options.scores, and at F32 or F16X3 the f32 kernels run. A value outside the enum is
       WGML_ERROR_INVALID_ARGUMENT. */
    wgml_precision precision;
} wgml_attention_options;

/* Single head: q, out [seq_q, head_dim]; k, v [seq_k, head_dim] (seq_q may differ from
   seq_k). Runs the v2 kernels on [1, seq, 1, head_dim] views: no mask, no dropout. */
WGML_API wgml_status wgml_flash_attention(wgml_engine *e, const wgml_tensor *q, const wgml_tensor *k,
                                          const wgml_tensor *v, wgml_tensor *out, bool causal);
/* q, out [batch, seq_q, num_heads, head_dim]; k, v [batch, seq_k, num_kv_heads, head_dim];
   mask (may be NULL) additive [batch|1, heads|1, seq_q|1, seq_k|1] or [seq_q|1, seq_k|1].
   Writes every element of out. wgml_flash_attention_v2_with for offsets and windows. */
WGML_API wgml_status wgml_flash_attention_v2(wgml_engine *e, const wgml_tensor *q, const wgml_tensor *k,
                                             const wgml_tensor *v, wgml_tensor *out, bool causal,
                                             float dropout_prob, uint64_t seed, const wgml_tensor *mask);
/* wgml_flash_attention_v2 with every option (opts may be NULL: the defaults). */
WGML_API wgml_status wgml_flash_attention_v2_with(wgml_engine *e, const wgml_tensor *q, const wgml_tensor *k,
                                                  const wgml_tensor *v, wgml_tensor *out,
                                                  const wgml_attention_options *opts, const wgml_tensor *mask);
/* Backward of wgml_flash_attention: q, out, grad_out, grad_q [seq_q, head_dim]; k, v,
   grad_k, grad_v [seq_k, head_dim]. out is the forward output. Writes (does not
   accumulate into) grad_q, grad_k, grad_v. */
WGML_API wgml_status wgml_flash_attention_backward(wgml_engine *e, const wgml_tensor *q, const wgml_tensor *k,
                                                   const wgml_tensor *v, const wgml_tensor *out,
                                                   const wgml_tensor *grad_out, wgml_tensor *grad_q,
                                                   wgml_tensor *grad_k, wgml_tensor *grad_v, bool causal);
/* Backward of wgml_flash_attention_v2 without mask or dropout (the seed API's form). The
   backward of a wgml_flash_attention_v2 call with a mask or dropout is
   wgml_flash_attention_v2_backward_with with the forward's arguments as options:
       wgml_flash_attention_v2_backward_with(e, q, k, v, out, grad_out, grad_q, grad_k, grad_v,
           &(wgml_attention_options){ .causal = causal, .dropout_prob = p, .seed = seed }, mask); */
WGML_API wgml_status wgml_flash_attention_v2_backward(wgml_engine *e, const wgml_tensor *q, const wgml_tensor *k,
                                                      const wgml_tensor *v, const wgml_tensor *out,
                                                      const wgml_tensor *grad_out, wgml_tensor *grad_q,
                                                      wgml_tensor *grad_k, wgml_tensor *grad_v, bool causal);
/* Backward of wgml_flash_attention_v2_with. out is the forward output for the same inputs,
   opts and mask must be those of the forward (dropout decisions are regenerated from
   opts->seed). grad_out, grad_q like q; grad_k, grad_v like k; all written, not
   accumulated; the mask gets no gradient. The log-sum-exp of each row is read from
   opts->lse when set (as the forward wrote it), else recomputed, and D =
   rowsum(grad_out * out) is taken from out: an `out` (or lse) from other inputs gives
   wrong gradients. With GQA, grad_k and grad_v sum over the
   query heads sharing a kv head, in a fixed order. */
WGML_API wgml_status wgml_flash_attention_v2_backward_with(wgml_engine *e, const wgml_tensor *q,
                                                           const wgml_tensor *k, const wgml_tensor *v,
                                                           const wgml_tensor *out, const wgml_tensor *grad_out,
                                                           wgml_tensor *grad_q, wgml_tensor *grad_k,
                                                           wgml_tensor *grad_v,
                                                           const wgml_attention_options *opts,
                                                           const wgml_tensor *mask);

/* ---- optimizers, losses, gradient utilities (src/ops/optim.c, loss.c, grad.c) -------- */

/* Every op of this section and the next also returns WGML_ERROR_LIMIT for a tensor of more
   than 2^32 - 4096 elements (the kernels index with 32 bits). */

/* AdamW hyperparameters, with torch.optim.AdamW's meaning and its ranges:
   lr >= 0, 0 <= beta1 < 1, 0 <= beta2 < 1, eps >= 0, weight_decay >= 0, all finite
   (typical: lr 1e-3, beta1 0.9, beta2 0.999, eps 1e-8, weight_decay 0.01). */
typedef struct wgml_adam_params {
    float lr, beta1, beta2, eps, weight_decay;
    uint32_t t;               /* 1-based step; 0 is an error */
} wgml_adam_params;

/* In-place SGD step: weight -= lr * grad, element-wise.
   weight and grad: f32, the same element count, different tensors.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL, lr not finite), WGML_ERROR_DTYPE,
           WGML_ERROR_SHAPE (element counts differ), WGML_ERROR_ALIAS (grad is weight),
           WGML_ERROR_CONTEXT. */
WGML_API wgml_status wgml_sgd_update(wgml_engine *e, wgml_tensor *weight, const wgml_tensor *grad, float lr);

/* In-place AdamW step exactly as torch.optim.AdamW computes it, for step t = params->t:
       weight *= 1 - lr * weight_decay
       m = beta1 * m + (1 - beta1) * grad
       v = beta2 * v + (1 - beta2) * grad^2
       weight -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
   The bias corrections are computed on the host in double. Start with m and v zeroed
   (wgml_tensor_zero) and count t from 1.
   weight, grad, m, v: f32, the same element count, four different tensors; weight, m and
   v are written. One pass: 16 bytes read and 12 written per parameter.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL tensor or params, t == 0, a hyperparameter
           out of the ranges above, NaN included), WGML_ERROR_DTYPE, WGML_ERROR_SHAPE,
           WGML_ERROR_ALIAS (two of the four are the same tensor), WGML_ERROR_CONTEXT. */
WGML_API wgml_status wgml_adamw_update(wgml_engine *e, wgml_tensor *weight, const wgml_tensor *grad, wgml_tensor *m,
                                       wgml_tensor *v, const wgml_adam_params *params);

/* wgml_adamw_update on count parameters (weights[i], grads[i], m[i], v[i]) with the same
   params, bitwise the same results, in ceil(count / K) dispatches: K = 2 or 3 parameters
   per dispatch, as many as the device's maxStorageBuffersPerShaderStage allows at 4
   buffers each (10 on lavapipe: K = 2). For a model's many small tensors, where the cost
   of a dispatch dominates. Every weights[i], m[i] and v[i] must be a tensor that appears
   nowhere else in the four arrays; a gradient may be shared by several parameters.
   Validation covers every parameter before anything is recorded.
   Errors: as wgml_adamw_update (messages name the index, e.g. "grads[3]"), plus
           WGML_ERROR_INVALID_ARGUMENT for a NULL array or count == 0. */
WGML_API wgml_status wgml_adamw_update_multi(wgml_engine *e, wgml_tensor *const *weights,
                                             const wgml_tensor *const *grads, wgml_tensor *const *m,
                                             wgml_tensor *const *v, size_t count,
                                             const wgml_adam_params *params);

/* Per-element squared error, not reduced: out = 0.5 * (pred - target)^2.
   pred, target, out: f32, the same element count; out may be pred and/or target.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL), WGML_ERROR_DTYPE, WGML_ERROR_SHAPE,
           WGML_ERROR_CONTEXT. */
WGML_API wgml_status wgml_mse_loss(wgml_engine *e, const wgml_tensor *pred, const wgml_tensor *target,
                                   wgml_tensor *out);
/* Gradient of wgml_mse_loss (summed) w.r.t. pred: grad_in = pred - target. Shapes,
   aliasing and errors as wgml_mse_loss. */
WGML_API wgml_status wgml_mse_loss_backward(wgml_engine *e, const wgml_tensor *pred, const wgml_tensor *target,
                                            wgml_tensor *grad_in);

/* Cross-entropy of one logits vector: loss_out[0] = -log(softmax(logits)[target]),
   computed stably as (max - logits[target]) + log(sum(exp(logits - max))).
   logits: f32, any shape, read as one vector of V = numel elements (finite values).
   target < V. loss_out: f32, at least 1 element; only element 0 is written; not logits.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL, target >= V), WGML_ERROR_DTYPE,
           WGML_ERROR_ALIAS (loss_out is logits), WGML_ERROR_CONTEXT. */
WGML_API wgml_status wgml_cross_entropy_loss(wgml_engine *e, const wgml_tensor *logits, uint32_t target,
                                             wgml_tensor *loss_out);
/* Gradient of wgml_cross_entropy_loss: grad_out = softmax(logits) - one_hot(target).
   grad_out: f32 with the element count of logits; it may be logits itself (in place).
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL, target >= V), WGML_ERROR_DTYPE,
           WGML_ERROR_SHAPE, WGML_ERROR_CONTEXT. */
WGML_API wgml_status wgml_cross_entropy_backward(wgml_engine *e, const wgml_tensor *logits, uint32_t target,
                                                 wgml_tensor *grad_out);

/* Batched cross-entropy with response masking, forward and backward fused.
   logits: f32 [..., V], rows of V = the last dimension (N = numel / V rows), finite values;
   targets: u32 with N elements. Row r with t = targets[r] is
     - ignored when t == ignore_index: losses[r] = 0, its gradient row is 0, not counted;
     - invalid when t >= V and t != ignore_index (the host cannot check device data):
       losses[r] = NaN, *mean_loss = NaN (so the bad target cannot go unnoticed), its
       gradient row is 0 and it is not counted (the other rows' gradients are exactly
       those of the valid rows alone);
     - counted otherwise: losses[r] = logsumexp(row) - logits[r, t].
   Writes (each may be NULL, not all three):
     losses       f32, N elements;
     mean_loss    f32, at least 1 element; element 0 = sum of counted losses / count
                  (0 when no row counts);
     grad_logits  f32, numel of logits: d mean_loss / d logits =
                  (softmax(row) - one_hot(t)) / count on counted rows, 0 elsewhere; it may
                  be the logits tensor itself (in place).
   Stable for logits of any magnitude (differences from the row max are exact); every
   reduction has a fixed order, so results are bitwise reproducible. The logits are read
   once for the loss and once more for the gradient, which is written once.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL logits/targets, all outputs NULL),
           WGML_ERROR_DTYPE, WGML_ERROR_SHAPE (targets or losses not N elements,
           grad_logits not numel of logits), WGML_ERROR_ALIAS (losses or mean_loss shared
           with logits, grad_logits or each other), WGML_ERROR_CONTEXT. */
WGML_API wgml_status wgml_cross_entropy_batched(wgml_engine *e, const wgml_tensor *logits,
                                                const wgml_tensor *targets, uint32_t ignore_index,
                                                wgml_tensor *losses, wgml_tensor *mean_loss,
                                                wgml_tensor *grad_logits);

/* Squares of the elements (for gradient norms): out = input^2, element-wise.
   input, out: f32, the same element count; out may be input.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL), WGML_ERROR_DTYPE, WGML_ERROR_SHAPE,
           WGML_ERROR_CONTEXT. */
WGML_API wgml_status wgml_gradient_norm_squared(wgml_engine *e, const wgml_tensor *input, wgml_tensor *out);
/* Clipping by a factor the caller computed: grad *= scale, in place (e.g. scale =
   min(1, max_norm / norm)). See wgml_clip_grad_by_global_norm to keep the norm on the GPU.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL, scale not finite), WGML_ERROR_DTYPE,
           WGML_ERROR_CONTEXT. */
WGML_API wgml_status wgml_clip_grad_by_norm(wgml_engine *e, wgml_tensor *grad, float scale);
/* Gradient accumulation over micro-batches: accum_grad += new_grad, in place; f32, the
   same element count; new_grad may be accum_grad (which doubles it).
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL), WGML_ERROR_DTYPE, WGML_ERROR_SHAPE,
           WGML_ERROR_CONTEXT. */
WGML_API wgml_status wgml_gradient_accumulate(wgml_engine *e, wgml_tensor *accum_grad, const wgml_tensor *new_grad);
/* grad *= scale, in place (e.g. 1 / micro-batches after accumulation). Errors as
   wgml_clip_grad_by_norm. */
WGML_API wgml_status wgml_gradient_scale(wgml_engine *e, wgml_tensor *grad, float scale);

/* norm_out[0] = sqrt(sum of the squares of every element of tensors[0 .. count)),
   reduced on the GPU: per-chunk partial sums in a fixed order, then one fixed-order final
   sum (no atomics), so the result is bitwise reproducible. A tensor listed twice counts
   twice. Costs ceil(count / K) + 1 dispatches, K = 8 tensors per dispatch (4 on devices
   with fewer than 9 storage buffers per stage).
   tensors[i]: f32, any shape. norm_out: f32, at least 1 element, element 0 written, not
   one of the tensors.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL array or element, count == 0),
           WGML_ERROR_DTYPE, WGML_ERROR_ALIAS (norm_out in the list), WGML_ERROR_CONTEXT. */
WGML_API wgml_status wgml_global_norm(wgml_engine *e, const wgml_tensor *const *tensors, size_t count,
                                      wgml_tensor *norm_out);
/* Scales every grads[i] in place by min(1, max_norm / (norm[0] + 1e-6)), as
   torch.nn.utils.clip_grad_norm_ does, reading norm[0] on the GPU: pair it with
   wgml_global_norm and nothing waits for the host. max_norm 0 zeroes the gradients.
   grads[i]: f32, each tensor at most once. norm: f32, at least 1 element, not one of the
   grads. A NaN or infinite norm gives an unspecified factor.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL array, element or norm, count == 0, max_norm
           negative or not finite), WGML_ERROR_DTYPE, WGML_ERROR_ALIAS (a gradient listed
           twice, norm among the grads), WGML_ERROR_CONTEXT. */
WGML_API wgml_status wgml_clip_grad_by_global_norm(wgml_engine *e, wgml_tensor *const *grads, size_t count,
                                                   const wgml_tensor *norm, float max_norm);

/* ---- embeddings (src/ops/embedding.c) ------------------------------------------------ */

/* Lookup: out[i, :] = table[ids[i], :], and a row of zeros where ids[i] >= V.
   table: f32 [V, D] (exactly 2 dimensions), or a packed, f16 or bf16 weight [V, D]
   (PACKED WEIGHTS: each row unpacked exactly). ids: u32, any shape, N elements.
   out: f32 with N * D elements and last dimension D (e.g. [N, D] or [B, T, D]); not table.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL), WGML_ERROR_DTYPE, WGML_ERROR_SHAPE (table
           not 2-D, out not N x D), WGML_ERROR_ALIAS (out is table), WGML_ERROR_CONTEXT. */
WGML_API wgml_status wgml_embedding(wgml_engine *e, const wgml_tensor *table, const wgml_tensor *ids,
                                    wgml_tensor *out);
/* Gradient of wgml_embedding: grad_table[v, :] = sum of grad_out[i, :] over i with
   ids[i] == v, added in increasing i; rows no id names are 0; ids >= V contribute
   nothing. grad_table is written, not accumulated. Deterministic: bitwise the same every
   run, and equal to a sequential f32 sum in increasing i (no float atomics: a stable
   counting sort of the ids, then one in-order sum per row). grad_table: f32 [V, D];
   grad_out: f32 with N * D elements and last dimension D; ids: u32, N elements. Reads
   grad_out once and writes grad_table once; the sort runs in one workgroup (its time
   grows with N + V) and uses engine scratch of 4 * (V + N) bytes. An id repeated r times
   costs r / 2 sequential steps in its row (one id on every position: N / 2 round trips).
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL), WGML_ERROR_DTYPE, WGML_ERROR_SHAPE,
           WGML_ERROR_ALIAS (grad_table is grad_out), WGML_ERROR_CONTEXT. */
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
   most 16 MiB (the format allows 100,000,000 bytes; real headers, a few hundred bytes per
   tensor, stay far below, and the cap bounds the memory a hostile header can take while
   it is parsed to about 300 MiB); end - begin == numel * bits / 8; and the tensors' byte ranges
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
#define WGML_SAFETENSORS_MAX_HEADER 16777216u   /* bytes: 16 MiB (see above) */

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
   index file (a name ending in ".json"), or one safetensors file. Every file it reads
   must be a regular file (a FIFO or device is refused without waiting on it) that, once
   symbolic links are resolved, lies inside the folder (the folder named, or the one of
   the file named): a link to a file elsewhere is refused. One exception keeps Hugging
   Face's cache usable: in a snapshot folder <repo>/snapshots/<revision>, files may link
   into <repo>/blobs/.
   Errors: as wgml_safetensors_open, for the index and for every shard (WGML_ERROR_IO for
           a file outside the folder). */
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

/* ---- GGUF (src/io/gguf.c) ---------------------------------------------------------------

   llama.cpp's single-file format, versions 2 and 3 (version 1, with 32-bit counts, is
   WGML_ERROR_UNSUPPORTED), little-endian throughout:
       u32 magic "GGUF", u32 version, u64 tensor count, u64 metadata count;
       metadata pairs: a key (a string), a u32 value type, the value;
       tensor infos: a name (a string), u32 dimension count (1 to 4), u64 dimensions
         innermost first (shape[0] is the length of a row), u32 ggml type, u64 offset
         relative to the data section;
       padding to the alignment (metadata general.alignment, a u32 power of two; 32 when
         absent), then the data section.
   A string is a u64 byte count and its bytes (no NUL). A value is one of the types of
   wgml_gguf_type: an array is a u32 element type, a u64 count and the items. wgml checks
   what it reads as it does safetensors: every length and count lies within the file; keys
   and tensor names are valid UTF-8 without NUL, 1 to WGML_GGUF_MAX_NAME bytes and unique;
   bools are 0 or 1; arrays of arrays are refused; a tensor's type is one of
   wgml_ggml_type (another is WGML_ERROR_UNSUPPORTED), its rows are whole blocks of that
   type, its offset a multiple of the alignment, and it lies inside the data section
   without overlapping another. The file is memory-mapped read-only, as safetensors. */

#define WGML_GGUF_MAX_NAME 65535u

typedef enum wgml_gguf_type {
    WGML_GGUF_U8 = 0, WGML_GGUF_I8, WGML_GGUF_U16, WGML_GGUF_I16, WGML_GGUF_U32, WGML_GGUF_I32,
    WGML_GGUF_F32, WGML_GGUF_BOOL, WGML_GGUF_STRING, WGML_GGUF_ARRAY, WGML_GGUF_U64, WGML_GGUF_I64,
    WGML_GGUF_F64
} wgml_gguf_type;

/* ggml's tensor types that wgml knows the layout of (the numbers are ggml's). A block of
   a quantised type holds `elements` consecutive values of a row in `bytes` bytes
   (wgml_ggml_type_block): Q4_0 32 in 18, Q4_1 32 in 20, Q5_0 32 in 22, Q5_1 32 in 24, Q8_0
   32 in 34, Q8_1 32 in 36, Q2_K 256 in 84, Q3_K 256 in 110, Q4_K 256 in 144, Q5_K 256 in
   176, Q6_K 256 in 210, Q8_K 256 in 292; the others one value each. */
typedef enum wgml_ggml_type {
    WGML_GGML_F32 = 0, WGML_GGML_F16 = 1, WGML_GGML_Q4_0 = 2, WGML_GGML_Q4_1 = 3, WGML_GGML_Q5_0 = 6,
    WGML_GGML_Q5_1 = 7, WGML_GGML_Q8_0 = 8, WGML_GGML_Q8_1 = 9, WGML_GGML_Q2_K = 10, WGML_GGML_Q3_K = 11,
    WGML_GGML_Q4_K = 12, WGML_GGML_Q5_K = 13, WGML_GGML_Q6_K = 14, WGML_GGML_Q8_K = 15, WGML_GGML_I8 = 24,
    WGML_GGML_I16 = 25, WGML_GGML_I32 = 26, WGML_GGML_I64 = 27, WGML_GGML_F64 = 28, WGML_GGML_BF16 = 30
} wgml_ggml_type;

/* "Q4_K", ...; "?" for a type wgml does not know. */
WGML_API const char *wgml_ggml_type_name(wgml_ggml_type t);
/* Values per block and bytes per block; false (nothing written) for an unknown type. */
WGML_API bool wgml_ggml_type_block(wgml_ggml_type t, uint32_t *elements, uint32_t *bytes);

/* A metadata value. Unsigned integers and bools in u (and i, f when they fit), signed
   integers in i (and f; u when not negative), floats in f; a string in str and len (not
   NUL-terminated, valid until the file is closed); an array's element type and count
   (its items through wgml_gguf_array_item). */
typedef struct wgml_gguf_value {
    wgml_gguf_type type;
    wgml_gguf_type elem_type;   /* arrays */
    uint64_t count;             /* arrays */
    uint64_t u;
    int64_t i;
    double f;
    const char *str;
    uint64_t len;
} wgml_gguf_value;

typedef struct wgml_gguf_tensor {
    const char *name;           /* NUL-terminated; valid until the file is closed */
    wgml_ggml_type type;
    uint32_t ndim;              /* 1 to 4 */
    uint64_t shape[4];          /* innermost first: shape[0] values per row; 0 past ndim */
    uint64_t numel, nbytes;
    uint64_t offset;            /* of its data in the file */
} wgml_gguf_tensor;

typedef struct wgml_gguf wgml_gguf;

/* Opens and validates a GGUF file (or size bytes in memory, which must stay valid and
   unchanged until close; name is used in messages, NULL: "memory").
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL), WGML_ERROR_IO (as safetensors),
           WGML_ERROR_FORMAT (the message names the part and its offset),
           WGML_ERROR_UNSUPPORTED (version 1; a tensor of a type wgml does not know),
           WGML_ERROR_OUT_OF_MEMORY. */
WGML_API wgml_status wgml_gguf_open(const char *path, wgml_gguf **out);
WGML_API wgml_status wgml_gguf_open_memory(const void *data, size_t size, const char *name, wgml_gguf **out);
/* NULL is a no-op. */
WGML_API void wgml_gguf_close(wgml_gguf *g);
/* The version (2 or 3) and the alignment of the data; 0 for NULL. */
WGML_API uint32_t wgml_gguf_version(const wgml_gguf *g);
WGML_API uint32_t wgml_gguf_alignment(const wgml_gguf *g);
/* Metadata: the pairs in the file's order; the index of a key, or -1. */
WGML_API size_t wgml_gguf_kv_count(const wgml_gguf *g);
WGML_API int64_t wgml_gguf_kv_find(const wgml_gguf *g, const char *key);
/* Pair i's key (NUL-terminated, valid until close) and value.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL g or v, i out of range). */
WGML_API wgml_status wgml_gguf_kv(const wgml_gguf *g, size_t i, const char **key, wgml_gguf_value *v);
/* Item j of array pair i.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL, i out of range or not an array, j >= count). */
WGML_API wgml_status wgml_gguf_array_item(const wgml_gguf *g, size_t i, uint64_t j, wgml_gguf_value *v);
/* Tensors in the file's order; the index of a name, or -1; tensor i's info and data
   (nbytes bytes, NULL when i is out of range).
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL, i out of range). */
WGML_API size_t wgml_gguf_tensor_count(const wgml_gguf *g);
WGML_API int64_t wgml_gguf_tensor_find(const wgml_gguf *g, const char *name);
WGML_API wgml_status wgml_gguf_tensor_info(const wgml_gguf *g, size_t i, wgml_gguf_tensor *info);
WGML_API const void *wgml_gguf_tensor_data(const wgml_gguf *g, size_t i);


/* ---- config.json of the model families (Llama, Mistral, Qwen2, Qwen3) ---------------- */

/* The MLP's gate activation (config.json's hidden_act or hidden_activation). */
typedef enum wgml_hidden_act {
    WGML_HIDDEN_ACT_SILU = 0,       /* "silu": silu(gate) * up */
    WGML_HIDDEN_ACT_GELU_TANH       /* "gelu_pytorch_tanh": GELU's tanh form (gate) * up */
} wgml_hidden_act;

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
    char architecture[64];          /* architectures[0], e.g. "LlamaForCausalLM"; "" when absent */
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
    /* The families beside Llama (model_type "mistral", "qwen2", "qwen3"): */
    uint32_t sliding_window;        /* 0: attention to every earlier position; else query i
                                       sees keys j with i - j < sliding_window (Mistral's
                                       sliding_window; Qwen's with use_sliding_window, which
                                       wgml takes only when every layer slides) */
    bool qkv_bias;                  /* q, k and v projections add biases (model_type "qwen2") */
    bool qk_norm;                   /* each head's q and k RMS-normalised, with weights of
                                       head_dim, before RoPE (model_type "qwen3", and LFM2's
                                       attention layers); not with qkv_bias
                                       (wgml_model_config_check) */
    /* LFM2 (model_type "lfm2"): blocks of gated short convolutions among the attention
       blocks. Set conv_kernel for an LFM2 model (its names and layer kinds; every layer
       may still be attention); the bits of conv_layers say which layers convolve. */
    uint32_t conv_kernel;           /* conv_L_cache: the convolutions' width, 1 .. 16; 0: not LFM2 */
    uint32_t conv_layers[32];       /* bit l % 32 of word l / 32: layer l is a convolution
                                       block (only with conv_kernel) */
    /* Gemma 3 (model_type "gemma3_text"), and choices any family may make: */
    wgml_hidden_act hidden_act;     /* the MLP's gate: SiLU (SwiGLU, 0) or GELU's tanh form (GeGLU) */
    bool gemma;                     /* Gemma's conventions: every RMSNorm (q_norm and k_norm
                                       included) scales by (1 + weight); the embeddings are
                                       multiplied by sqrt(hidden_size) (the tied head reads
                                       them unscaled); the attention's and the MLP's outputs
                                       are RMS-normalised (post_attention_layernorm,
                                       post_feedforward_layernorm) before they join the
                                       residual stream, and the MLP's input norm is named
                                       pre_feedforward_layernorm */
    uint32_t full_attention_layers[32]; /* with sliding_window: bit l % 32 of word l / 32: layer
                                       l attends to every earlier position (Gemma 3's global
                                       layers); the other layers slide. All zero: every layer
                                       slides (Mistral) */
    double rope_local_theta;        /* 0: every layer rotates by rope_theta (and rope_scaling);
                                       else the sliding layers rotate by this base, unscaled
                                       (Gemma 3's rope_local_base_freq); in [0, 1e15] */
    double query_pre_attn_scalar;   /* 0: attention scales scores by 1/sqrt(head_dim); else by
                                       1/sqrt(query_pre_attn_scalar) (Gemma); in [0, 1e9] */
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

/* Parses len bytes (at most 1 MiB) of config.json text, not necessarily NUL-terminated,
   into *out (zeroed on failure); name is used in messages. Checks types ("hidden_size must
   be an integer, not a string"), ranges, hidden_act or hidden_activation (silu,
   gelu_pytorch_tanh), rope_scaling types (none, linear, llama3), the families' own fields
   (LFM2's, Gemma 3's: see wgml_model_config), and that every token id is below
   vocab_size; what it accepts, wgml_model_config_check accepts. Unknown keys are ignored
   (the architecture is checked by wgml_model_load, not here).
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL), WGML_ERROR_FORMAT, WGML_ERROR_OUT_OF_MEMORY. */
WGML_API wgml_status wgml_model_config_parse(const char *json, size_t len, const char *name,
                                             wgml_model_config *out);
/* Reads the file (at most 1 MiB; a regular file that, symbolic links resolved, lies in
   its own folder: see wgml_checkpoint_open) and parses it.
   Errors: as parse, plus WGML_ERROR_IO. */
WGML_API wgml_status wgml_model_config_load(const char *path, wgml_model_config *out);
/* Checks a configuration built in C against the ranges above (zero num_key_value_heads,
   head_dim, max_position_embeddings and rope_theta stand for their defaults; the strings
   must be NUL-terminated; rope_scaling and quantization fields as documented). What
   wgml_model_create, wgml_model_save and wgml_model_load need is what this accepts, so
   a model that could be created can be saved and loaded again.
   Errors: WGML_ERROR_INVALID_ARGUMENT (the message names the field and its range). */
WGML_API wgml_status wgml_model_config_check(const wgml_model_config *cfg);
/* The configuration of a llama-architecture GGUF model (general.architecture "llama"):
   hidden_size, intermediate_size, num_hidden_layers, num_attention_heads from
   llama.embedding_length, feed_forward_length, block_count, attention.head_count (all
   required); num_key_value_heads (attention.head_count_kv), head_dim
   (attention.key_length, which must equal value_length and rope.dimension_count),
   max_position_embeddings (context_length, default 2048), rope_theta (rope.freq_base,
   default 10000), rms_norm_eps (attention.layer_norm_rms_epsilon, default 1e-5), linear
   RoPE scaling (rope.scaling.type / factor); vocab_size from llama.vocab_size, else the
   rows of token_embd.weight; tie_word_embeddings when there is no output.weight; BOS and
   EOS (and end-of-turn) ids from tokenizer.ggml.*. what names the file in messages.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL), WGML_ERROR_FORMAT (a key missing, of the
           wrong type or out of range; whatever wgml_model_config_check refuses),
           WGML_ERROR_UNSUPPORTED (another architecture, partial rotary heads, a RoPE
           scaling other than linear). */
WGML_API wgml_status wgml_model_config_from_gguf(const wgml_gguf *g, const char *what, wgml_model_config *out);

/* ---- tokenizer.json: byte-level BPE (GPT-2, SmolLM2, Llama 3, Qwen) and SentencePiece-style
   BPE (Llama 2, Mistral, TinyLlama) ------------------------------------------------------

   Supported: model BPE over the GPT-2 byte-to-unicode alphabet with all 256 byte tokens,
   merges as "a b" strings or ["a", "b"] pairs, ignore_merges; added_tokens (matched in the
   text before anything else, longest first, with lstrip, rstrip and single_word); the
   pre-tokenizers ByteLevel (add_prefix_space, use_regex: the GPT-2 split), Digits
   (individual_digits or not) and Split with the GPT-2, Llama 3 or Qwen 2 regex (behavior
   Isolated), alone or in a Sequence; normalizer null; decoder ByteLevel or null. An added
   token decodes to its content as written (Hugging Face's byte-level decoder would turn a
   content such as "\u00e9t\u00e9" into the bytes E9 74 E9).
   SentencePiece style: a vocab that spells spaces "\u2581", with the normalizer Prepend
   ("\u2581") and Replace (" " -> "\u2581") (in a Sequence or alone; each piece of text
   between added tokens gets its leading space) or the Metaspace pre-tokenizer
   (prepend_scheme always / first / never or add_prefix_space, split); BPE over characters
   with byte_fallback (a character without a token becomes the <0xNN> tokens of its bytes;
   all 256 must exist), unk_token and fuse_unk; the decoder Metaspace or a Sequence of
   Replace ("\u2581" -> " "), ByteFallback, Fuse and Strip (" ", start 0 or 1, stop 0).
   A vocab may not hold both " x" and "\u2581x" (they are one token here).
   Anything else (another model type, another normalizer (NFC, NFKC, Lowercase), another
   regex, byte_fallback with a byte-level pre-tokenizer, a continuing_subword_prefix) is
   refused with WGML_ERROR_FORMAT rather than encoded
   differently from Hugging Face tokenizers. The regex classes \p{L}, \p{N} and \s follow
   Unicode 14 general categories and White_Space. post_processor: TemplateProcessing's
   single template (special tokens around $A; wgml_tokenizer_specials gives them: encode
   adds none), ByteLevel (offsets only), or a Sequence of them; other processors are
   refused. Ignored: truncation, padding, BPE dropout. */

typedef struct wgml_tokenizer wgml_tokenizer;

/* Reads tokenizer.json (at most 64 MiB; a regular file that, symbolic links resolved, lies
   in its own folder, as wgml_checkpoint_open requires) and builds the tokenizer.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL), WGML_ERROR_IO, WGML_ERROR_FORMAT (the
           message names the field: "tokenizer.json: merges[17] 'a b': 'ab' is not in the
           vocab"), WGML_ERROR_OUT_OF_MEMORY. */
WGML_API wgml_status wgml_tokenizer_load(const char *path, wgml_tokenizer **out);
/* The tokenizer of a GGUF file: tokenizer.ggml.model "gpt2" (byte-level BPE:
   tokenizer.ggml.tokens, merges, token_type, whose control and user-defined tokens become
   added tokens) with the pre-tokenizer tokenizer.ggml.pre names: default / gpt2 (the GPT-2
   split), smollm (single digits, then the GPT-2 split), llama-bpe (Llama 3's), qwen2;
   or "llama" (SentencePiece BPE of Llama 2, Mistral, TinyLlama: tokens spelled with
   U+2581, tokenizer.ggml.scores ranking the merges Hugging Face's conversion derives (each
   split of a normal token into two normal tokens, by that token's score), byte tokens
   (type 6) as the fallback, the first unknown token (type 2) as unk,
   tokenizer.ggml.add_space_prefix (default true) as the Prepend normalizer and Strip
   decoder). tokenizer.ggml.add_bos_token / add_eos_token become the template
   (wgml_tokenizer_specials). Validated as wgml_tokenizer_load validates tokenizer.json.
   what names the file.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL), WGML_ERROR_FORMAT, WGML_ERROR_UNSUPPORTED
           (other tokenizer models and pre-tokenizers), WGML_ERROR_OUT_OF_MEMORY. */
WGML_API wgml_status wgml_tokenizer_from_gguf(const wgml_gguf *g, const char *what, wgml_tokenizer **out);
/* As wgml_tokenizer_load on len bytes of JSON text (at most 64 MiB); name is used in
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
   ByteLevel step has add_prefix_space or a SentencePiece-style tokenizer prepends, which
   adds a space to each piece). Texts of 16 KiB
   or more use a per-call cache of short pieces (natural text repeats its words).
   len must be below 2^31: encode longer texts in parts.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL tok or n; NULL text with len > 0; NULL ids
           with cap > 0), WGML_ERROR_SHAPE (more ids than cap: *n is then the number
           needed and ids holds the first cap), WGML_ERROR_OUT_OF_MEMORY. */
WGML_API wgml_status wgml_tokenizer_encode(const wgml_tokenizer *tok, const char *text, size_t len,
                                           uint32_t *ids, size_t cap, size_t *n);
/* The ids the tokenizer's post-processor (TemplateProcessing's single template) puts
   before (*prefix, e.g. Llama 2's and Mistral's <s>, Llama 3's <|begin_of_text|>) and after
   (*suffix) an encoded text: Hugging Face's encode(text) with add_special_tokens=True is
   prefix + wgml_tokenizer_encode(text) + suffix. Counts are 0 when the file has no
   template (and for a NULL tok). The arrays live as long as tok; any pointer may be NULL. */
WGML_API void wgml_tokenizer_specials(const wgml_tokenizer *tok, const uint32_t **prefix, size_t *nprefix,
                                      const uint32_t **suffix, size_t *nsuffix);
/* As wgml_tokenizer_encode, but added tokens in the text are plain text (for training on
   untrusted text in which "<|endoftext|>" must not become the special token). */
WGML_API wgml_status wgml_tokenizer_encode_ordinary(const wgml_tokenizer *tok, const char *text, size_t len,
                                                    uint32_t *ids, size_t cap, size_t *n);
/* Decodes n ids to the bytes they stand for, written to out[0 .. *len), followed by a NUL
   when cap > *len. The bytes are exactly what was encoded: a token may end inside a UTF-8
   sequence (streaming callers keep the incomplete tail for the next call). A
   SentencePiece-style decoder with Strip (or Metaspace) removes the space that encoding
   put at the start of the text, as Hugging Face's decode does.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL; an id >= vocab_size or with no token: the
           message names ids[i]), WGML_ERROR_SHAPE (more bytes than cap: *len is then the
           number needed and out holds the first cap bytes). */
WGML_API wgml_status wgml_tokenizer_decode(const wgml_tokenizer *tok, const uint32_t *ids, size_t n,
                                           char *out, size_t cap, size_t *len);
/* As wgml_tokenizer_decode for ids that continue a text already decoded (streamed
   generation, one token at a time): no leading space is removed. */
WGML_API wgml_status wgml_tokenizer_decode_continuation(const wgml_tokenizer *tok, const uint32_t *ids, size_t n,
                                                        char *out, size_t cap, size_t *len);

/* ---- tokenizer_config.json and chat templates ------------------------------------------

   A chat model's folder says in tokenizer_config.json (or chat_template.jinja beside it)
   how a conversation becomes text: a Jinja template. wgml does not interpret Jinja: it
   recognises the formats of the families it runs and renders them in C, byte for byte as
   Hugging Face's apply_chat_template renders their templates:
     chatml    <|im_start|>{role}\n{content}<|im_end|>\n per message; generation prompt
               <|im_start|>assistant\n
     smollm2   chatml, with SmolLM2's default system message when the first message is not
               a system message ("You are a helpful AI assistant named SmolLM, trained by
               Hugging Face")
     qwen2     chatml, with Qwen2 / 2.5's default system message ("You are Qwen, created by
               Alibaba Cloud. You are a helpful assistant.")
     llama3    bos_token, then <|start_header_id|>{role}<|end_header_id|>\n\n{content,
               trimmed}<|eot_id|> per message; generation prompt
               <|start_header_id|>assistant<|end_header_id|>\n\n
     llama3.1  llama3 with Llama 3.1 / 3.2's system header first: "Cutting Knowledge Date:
               December 2023\nToday Date: {date}\n\n{system message, trimmed}" (date:
               options.date_string, default "26 Jul 2024", the templates' own default)
     zephyr    <|{role}|>\n{content}{eos_token}\n per message (Zephyr, TinyLlama); generation
               prompt <|assistant|>\n after the last message
   Roles are system, user and assistant. A rendering is a list of segments, each marked as
   the assistant's (its content and end-of-turn marker: what assistant-only training puts
   the loss on) or not. */

typedef struct wgml_tokenizer_config {
    char *chat_template;       /* the template text; NULL when the folder has none */
    char *bos_token;           /* NULL when absent */
    char *eos_token;
} wgml_tokenizer_config;

/* Reads a model folder's tokenizer_config.json (chat_template a string, or a list of
   {"name", "template"} of which "default" is taken; bos_token and eos_token strings or
   {"content": ...} objects), and chat_template.jinja when the folder has one (it wins, as
   in transformers). A folder with neither file gives an all-NULL config. Free with
   wgml_tokenizer_config_clear. Files as wgml_checkpoint_open requires them (regular,
   inside the folder), tokenizer_config.json at most 16 MiB.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL), WGML_ERROR_IO, WGML_ERROR_FORMAT,
           WGML_ERROR_OUT_OF_MEMORY. */
WGML_API wgml_status wgml_tokenizer_config_load(const char *folder, wgml_tokenizer_config *out);
/* The same fields from a GGUF file: tokenizer.chat_template, and the texts of the tokens
   tokenizer.ggml.bos_token_id and eos_token_id name. what names the file in messages.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL), WGML_ERROR_FORMAT (a NUL byte in one of
           them), WGML_ERROR_OUT_OF_MEMORY. */
WGML_API wgml_status wgml_tokenizer_config_from_gguf(const wgml_gguf *g, const char *what, wgml_tokenizer_config *out);
WGML_API void wgml_tokenizer_config_clear(wgml_tokenizer_config *c);

typedef enum wgml_chat_format {
    WGML_CHAT_UNKNOWN = 0,
    WGML_CHAT_CHATML,
    WGML_CHAT_SMOLLM2,
    WGML_CHAT_QWEN2,
    WGML_CHAT_LLAMA3,
    WGML_CHAT_LLAMA31,
    WGML_CHAT_ZEPHYR
} wgml_chat_format;

/* The format a template's text is written in, recognised by its markers.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL), WGML_ERROR_UNSUPPORTED (none of the formats
           above, or a reasoning template with <think> blocks: the message says so). */
WGML_API wgml_status wgml_chat_format_detect(const char *template_text, wgml_chat_format *out);
/* A format by its name above ("chatml", "llama3.1", ...); WGML_ERROR_UNSUPPORTED for
   another name. */
WGML_API wgml_status wgml_chat_format_from_name(const char *name, wgml_chat_format *out);
/* The name of a format ("unknown" for WGML_CHAT_UNKNOWN and other values). */
WGML_API const char *wgml_chat_format_name(wgml_chat_format f);

typedef struct wgml_chat_message {
    const char *role;          /* "system", "user" or "assistant" */
    const char *content;       /* UTF-8 */
} wgml_chat_message;

/* Zero-initialise; zero fields take the defaults shown. */
typedef struct wgml_chat_options {
    bool add_generation_prompt;   /* end with the header of an assistant turn (for generation) */
    const char *bos_token;        /* the tokenizer's BOS text (llama3 formats need it) */
    const char *eos_token;        /* the tokenizer's EOS text (zephyr needs it) */
    const char *date_string;      /* llama3.1's "Today Date"; default "26 Jul 2024" */
} wgml_chat_options;

typedef struct wgml_chat wgml_chat;

/* Renders n messages in format f into *out (free with wgml_chat_free).
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL; a role other than system, user, assistant;
           a system message after the first in llama3.1; a missing bos_token or
           eos_token the format needs), WGML_ERROR_OUT_OF_MEMORY. */
WGML_API wgml_status wgml_chat_render(wgml_chat_format f, const wgml_chat_message *messages, size_t n,
                                      const wgml_chat_options *opts, wgml_chat **out);
/* The whole text (NUL-terminated; *len its length when len is not NULL). */
WGML_API const char *wgml_chat_text(const wgml_chat *c, size_t *len);
/* Its segments in order: segment i's text (not NUL-terminated), length, and whether it is
   an assistant's. Consecutive segments differ in that flag. NULL past the last. */
WGML_API size_t wgml_chat_segment_count(const wgml_chat *c);
WGML_API const char *wgml_chat_segment(const wgml_chat *c, size_t i, size_t *len, bool *assistant);
/* NULL is a no-op. */
WGML_API void wgml_chat_free(wgml_chat *c);

/* ---- training data -------------------------------------------------------------------

   A dataset is the tokens of a training file, example after example, each token marked
   as learned (predicting it counts in the loss) or not:
   - a text file (any name not ending in .jsonl): one example, every token learned;
   - JSONL (*.jsonl), one record per line, all of one kind (blank lines are skipped):
       {"text": "..."}                           every token learned
       {"prompt": "...", "completion": "..."}    the completion's tokens learned, not the
                                                 prompt's (unless loss_on_prompt)
       {"messages": [{"role", "content"}, ...]}  rendered with a chat format
                                                 (wgml_chat_render); the assistant's
                                                 segments learned (all with loss_on_prompt)
     A bad line is WGML_ERROR_FORMAT naming "<file>:<line>". Free text ("text", "prompt",
     "completion") is encoded with wgml_tokenizer_encode_ordinary (a special token written
     in the data is text), a chat rendering's segments with wgml_tokenizer_encode (the
     template's markers are its special tokens); each segment is encoded alone.
   Free text (a text file, a "text" record, a prompt and completion) starts with the
   tokenizer's template prefix (wgml_tokenizer_specials: Llama 2's and Mistral's <s>), not
   learned, as Hugging Face's encode(text) starts it; its suffix is not added (append_eos
   ends an example). A chat rendering carries its template's own BOS text, if any.
   With append_eos, eos_id follows every example of text or prompt and completion
   (learned when the example has a learned token); a chat rendering ends with the
   template's own end-of-turn marker instead. Files of at most 1 GiB, JSONL lines of at most 16 MiB. */

typedef enum wgml_data_kind {
    WGML_DATA_TEXT = 1,
    WGML_DATA_PROMPT_COMPLETION,
    WGML_DATA_MESSAGES
} wgml_data_kind;

typedef struct wgml_dataset_options {
    wgml_chat_format chat_format;   /* for messages records (UNKNOWN: they are an error) */
    wgml_chat_options chat;         /* its bos and eos texts; add_generation_prompt unused */
    bool loss_on_prompt;            /* learn prompts and every turn too */
    bool append_eos;
    uint32_t eos_id;
    bool allow_bytes;               /* a text file need not be UTF-8 (byte tokenizers) */
} wgml_dataset_options;

typedef struct wgml_dataset wgml_dataset;

/* Reads and tokenises path with tok. opts may be NULL (text and text records only).
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL; eos_id not below the vocabulary),
           WGML_ERROR_IO, WGML_ERROR_FORMAT (the message names the line), WGML_ERROR_OUT_OF_MEMORY. */
WGML_API wgml_status wgml_dataset_load(const char *path, const wgml_tokenizer *tok, const wgml_dataset_options *opts,
                                       wgml_dataset **out);
WGML_API void wgml_dataset_free(wgml_dataset *d);
WGML_API wgml_data_kind wgml_dataset_kind(const wgml_dataset *d);
/* Examples, tokens in all, and learned tokens. */
WGML_API size_t wgml_dataset_examples(const wgml_dataset *d);
WGML_API size_t wgml_dataset_tokens(const wgml_dataset *d);
WGML_API size_t wgml_dataset_trained_tokens(const wgml_dataset *d);
/* Example i: its ids and, in *train, one byte per token (1: learned); NULL past the end. */
WGML_API const uint32_t *wgml_dataset_example(const wgml_dataset *d, size_t i, const uint8_t **train, size_t *len);

/* A batcher cuts a dataset into micro-batches of batch sequences of seq_len tokens: ids,
   and targets (the next token, or UINT32_MAX where it is not learned: the trainer
   ignores it), row after row.
   - packed: each sequence is a window of seq_len + 1 consecutive tokens at a random
     offset of the part (examples run into each other, separated by their EOS);
   - padded (not packed): each sequence is one example, in an order shuffled anew every
     epoch; a longer one is cut, a shorter one padded with ignored targets.
   part_begin .. part_end (fractions of the tokens when packed, of the examples when
   padded, each rounded to the nearest token or example; 0, 0 = all) selects a part, e.g. [0, 0.9) for training and [0.9, 1) for
   validation. sequential (for evaluation) reads the part once, in order: packed, windows
   one after another (the last one's missing targets ignored); padded, the examples in
   file order; once the part is read, state.epoch becomes 1 and further rows have every
   target ignored. Everything follows from seed and the state, which
   wgml_batcher_get_state / _set_state save and restore: a batcher set to a saved state
   gives the same batches as the one it was saved from. */
typedef struct wgml_batcher_options {
    uint32_t batch, seq_len;        /* required */
    bool packed;
    bool sequential;
    uint64_t seed;
    double part_begin, part_end;
} wgml_batcher_options;

typedef struct wgml_batcher_state {
    uint64_t rng;                   /* packed: the offsets' generator */
    uint64_t epoch, position;       /* padded: the epoch and the next example in its order;
                                       packed: position counts sequences */
} wgml_batcher_state;

typedef struct wgml_batcher wgml_batcher;

/* The dataset must outlive the batcher.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL, batch or seq_len 0, a part outside [0, 1]),
           WGML_ERROR_SHAPE (packed, not sequential: fewer than seq_len + 1 tokens in the
           part; padded: no
           example; either: no learned target in the part, e.g. every example's learned
           tokens lie past seq_len + 1), WGML_ERROR_OUT_OF_MEMORY. */
WGML_API wgml_status wgml_batcher_create(const wgml_dataset *d, const wgml_batcher_options *opts, wgml_batcher **out);
WGML_API void wgml_batcher_free(wgml_batcher *b);
/* Fills batch * seq_len ids and targets. Errors: WGML_ERROR_INVALID_ARGUMENT (NULL). */
WGML_API wgml_status wgml_batcher_next(wgml_batcher *b, uint32_t *ids, uint32_t *targets);
WGML_API wgml_status wgml_batcher_get_state(const wgml_batcher *b, wgml_batcher_state *st);
/* Errors: WGML_ERROR_INVALID_ARGUMENT (NULL; padded: a position past an epoch). */
WGML_API wgml_status wgml_batcher_set_state(wgml_batcher *b, const wgml_batcher_state *st);
/* What a batcher reads of its part, as its rows hold it. */
typedef struct wgml_batcher_stats {
    size_t items;       /* the part's tokens (packed) or examples (padded) */
    size_t learned;     /* its learned targets (padded: those within each example's first
                           seq_len + 1 tokens) */
    size_t cut;         /* padded: examples longer than seq_len + 1 tokens */
    size_t cut_empty;   /* padded: of those, the ones with every learned target past the cut */
} wgml_batcher_stats;
/* Errors: WGML_ERROR_INVALID_ARGUMENT (NULL). */
WGML_API wgml_status wgml_batcher_get_stats(const wgml_batcher *b, wgml_batcher_stats *st);

/* ------------------------------------------------------------------------------------ */
/* Models: Llama, Mistral, Qwen2, Qwen3, LFM2, Gemma 3 decoders, trained and run on the GPU (src/model.c) */
/* ------------------------------------------------------------------------------------ */

/* MODELS
   ======
   A wgml_model is a Llama-style decoder-only transformer (Mistral's, Qwen's, LFM2's and
   Gemma 3's variants below) whose every parameter is an f32 tensor on the GPU, named as Hugging Face's
   LlamaForCausalLM names it:

       model.embed_tokens.weight                    [vocab, hidden]
       model.layers.<i>.input_layernorm.weight      [hidden]
       model.layers.<i>.self_attn.q_proj.weight     [heads * head_dim, hidden]
       model.layers.<i>.self_attn.k_proj.weight     [kv_heads * head_dim, hidden]
       model.layers.<i>.self_attn.v_proj.weight     [kv_heads * head_dim, hidden]
       model.layers.<i>.self_attn.o_proj.weight     [hidden, heads * head_dim]
       model.layers.<i>.post_attention_layernorm.weight [hidden]
       model.layers.<i>.mlp.gate_proj.weight        [intermediate, hidden]
       model.layers.<i>.mlp.up_proj.weight          [intermediate, hidden]
       model.layers.<i>.mlp.down_proj.weight        [hidden, intermediate]
       model.norm.weight                            [hidden]
       lm_head.weight                               [vocab, hidden] (absent when tied)
   and then, layer by layer, the families' extras:
       model.layers.<i>.self_attn.q_proj.bias       [heads * head_dim]     (qkv_bias)
       model.layers.<i>.self_attn.k_proj.bias       [kv_heads * head_dim]  (qkv_bias)
       model.layers.<i>.self_attn.v_proj.bias       [kv_heads * head_dim]  (qkv_bias)
       model.layers.<i>.self_attn.q_norm.weight     [head_dim]             (qk_norm)
       model.layers.<i>.self_attn.k_norm.weight     [head_dim]             (qk_norm)
       model.layers.<i>.post_attention_layernorm.weight [hidden]           (gemma)
       model.layers.<i>.post_feedforward_layernorm.weight [hidden]         (gemma)

   Gemma 3 (gemma) names the MLP's input norm pre_feedforward_layernorm (its
   post_attention_layernorm is the extra above, the norm of the attention's output) and
   stores every norm's weight as w of (1 + w), as its files do.

   LFM2 (conv_kernel set) names them as Lfm2ForCausalLM does: operator_norm, self_attn.
   {q,k,v,out}_proj, ffn_norm, feed_forward.w1 (gate), w3 (up), w2 (down), the extras
   self_attn.q_layernorm and k_layernorm, and model.embedding_norm for the final norm; a
   convolution layer holds, in this order, operator_norm, conv.in_proj.weight
   [3 * hidden, hidden], conv.conv.weight [hidden, conv_kernel] ([hidden, 1, conv_kernel]
   in the files), conv.out_proj.weight [hidden, hidden], ffn_norm, w1, w3, w2, and no
   extras.

   (wgml_model_param lists them in this order.) For tokens x the model computes
       h = embed[x]; per layer: h += Wo attn(rope(Wq n1(h)), rope(Wk n1(h)), Wv n1(h));
       h += Wd (silu(Wg n2(h)) * Wu n2(h)); logits = Wout nf(h)
   with RMSNorms n1, n2, nf (eps rms_norm_eps), rotate-half RoPE (rope_theta), causal
   grouped-query attention scaled by 1/sqrt(head_dim), and Wout = embed when
   tie_word_embeddings. The families add to it: qkv_bias (Qwen2) adds the biases to the
   q, k, v projections; qk_norm (Qwen3) RMS-normalises each head of q and k (its own
   weights, eps rms_norm_eps) before RoPE; sliding_window (Mistral, Qwen with
   use_sliding_window) lets query i see keys j with i - j < sliding_window only. An LFM2
   convolution layer replaces the attention term by Wout_c (C * conv(B * X)), where
   (B, C, X) = Win n1(h) split in three along the features and conv is the causal
   depthwise convolution of width conv_kernel along each sequence (wgml_conv1d_causal);
   its generation cache holds the convolution's inputs, as the attention layers' hold
   keys and values. hidden_act GELU (tanh form) replaces silu in the gate. Gemma 3
   (gemma) computes
       h = embed[x] * sqrt(hidden); per layer: h += npa(Wo attn(...)); h += npf(Wd (...))
   with every norm n(x) = RMSNorm(x) * (1 + w), npa and npf the extras
   post_attention_layernorm and post_feedforward_layernorm, its sliding layers (all but
   full_attention_layers) windowed and rotated by rope_local_theta, the others by
   rope_theta and rope_scaling, and scores scaled by 1/sqrt(query_pre_attn_scalar). The
   configuration is the wgml_model_config of config.json, RoPE scaling (linear, Llama 3)
   included; o_proj or MLP biases (attention_bias, mlp_bias) are refused with
   WGML_ERROR_UNSUPPORTED. head_dim must be even and at most 256 (the attention kernels'
   limit; above 128 they run their tiled form, slower than the 64 x 64 one). AdamW leaves
   the norms' weights and the biases without weight decay.

   Three objects share the model's parameters:
   - wgml_trainer: activations for a [batch, seq_len] micro-batch, gradients and AdamW
     moments; forward, backward, gradient accumulation, global-norm clipping, AdamW.
   - wgml_kv_cache: keys and values of up to max_tokens positions for generation; a
     prompt runs in one pass, then one token per call.
   - files: wgml_model_load reads a Hugging Face folder (config.json and one or sharded
     safetensors files of f32, f16 or bf16, or MLX affine-quantised weights, which are
     dequantised to f32 on the GPU) or a GGUF file, and wgml_model_save writes the same
     layout (f32, or f16 / bf16 through wgml_model_save_with). wgml_model_load_with keeps
     the matrices packed or 16-bit instead (PACKED WEIGHTS), or quantises them at load.

   A model, trainer or cache belongs to the engine (and context) it was created with and
   follows the THREADS rules of its context. Destroy caches and trainers before their
   model, and the model before its engine. */

typedef struct wgml_model wgml_model;

/* Creates a model of configuration cfg on e's device with every parameter zero (see
   wgml_model_init_random and wgml_model_load). cfg is copied, with num_key_value_heads and
   head_dim filled in when they were 0 (num_attention_heads; hidden_size / heads).
   max_position_embeddings 0 becomes 2048 and rope_theta 0 becomes 10000 (config.json's
   defaults). cfg.quantization is ignored (it describes files: the model itself is f32).
   Other fields of cfg not named here (model_type, bos and eos ids) are kept for
   wgml_model_save.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL; anything wgml_model_config_check refuses:
           the message names the field; hidden_size != heads * head_dim is allowed),
           WGML_ERROR_UNSUPPORTED (head_dim > 256, o_proj or MLP biases), WGML_ERROR_LIMIT and
           WGML_ERROR_OUT_OF_MEMORY (a tensor too large for the device). */
WGML_API wgml_status wgml_model_create(wgml_engine *e, const wgml_model_config *cfg, wgml_model **out);

/* Fills the parameters from a seeded generator: norms 1 (Gemma's stored w of 1 + w: 0),
   biases 0, every matrix normal with
   standard deviation std (0 means 0.02), o_proj and down_proj divided by sqrt(2 * layers)
   (GPT-2's scaling of residual projections). The same seed gives the same model on every
   adapter (the numbers are drawn on the host).
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL m; std negative or not finite),
           WGML_ERROR_UNSUPPORTED (packed or 16-bit weights: wgml_model_load_with). */
WGML_API wgml_status wgml_model_init_random(wgml_model *m, uint64_t seed, float std);

/* Loads a model from path: a folder with config.json and model.safetensors (or
   model.safetensors.index.json and its shards), or a safetensors file or index file whose
   folder holds config.json. config.json must describe a model of a family wgml runs:
   model_type "llama" (or absent), "mistral", "qwen2", "qwen3", "lfm2" or "gemma3_text",
   with architectures[0] absent or that family's (LlamaForCausalLM, MistralForCausalLM,
   Qwen2ForCausalLM, Qwen3ForCausalLM, Lfm2ForCausalLM, Gemma3ForCausalLM). Every tensor's presence,
   shape and dtype is checked against config.json before any device memory is allocated:
   a failed load allocates and records nothing on the GPU and leaves no model (*out is
   NULL). A tensor the model would not use is refused (a q_norm beside a Llama config, say),
   except the rotary inv_freq buffers old checkpoints carry and lm_head.weight beside a
   tied embedding, which are skipped. Every file read must be a regular file inside the
   folder (see wgml_checkpoint_open).
   Errors: WGML_ERROR_IO (a file missing, unreadable, not a regular file or outside the
           folder), WGML_ERROR_FORMAT (a malformed file; a missing tensor; a shape that does
           not match config.json; a dtype other than F32, F16, BF16, or U32 with scales and
           biases for quantised weights: the message names the tensor),
           WGML_ERROR_UNSUPPORTED (another architecture, a tensor it would not use), plus
           wgml_model_create's. */
WGML_API wgml_status wgml_model_load(wgml_engine *e, const char *path, wgml_model **out);

/* How wgml_model_load_with stores the matrices (the embedding, every projection and
   lm_head; norms and biases are always f32). */
typedef enum wgml_weights {
    WGML_WEIGHTS_F32 = 0,   /* every weight expanded to f32 (what wgml_model_load does) */
    WGML_WEIGHTS_KEEP,      /* each matrix in the file's dtype (see PACKED WEIGHTS): f16 and
                               bf16 as they are; MLX affine weights (U32 with scales and
                               biases) as WGML_AFFINE; GGUF Q8_0, Q4_0, Q4_K and Q6_K as those
                               dtypes; f32 and the GGUF types without a packed dtype (Q4_1,
                               Q5_0, Q5_1, Q8_1, Q2_K, Q3_K, Q5_K) expanded to f32 */
    WGML_WEIGHTS_Q8,        /* every matrix not already packed quantised at load to MLX's
                               affine scheme, 8 bits in groups of 64 with f16 scales and
                               biases (per group: bias = min, scale = (max - min) / 255, codes
                               rounded to the nearest against the rounded scale and bias) */
    WGML_WEIGHTS_Q4         /* the same with 4 bits (scale = (max - min) / 15) */
} wgml_weights;

typedef struct wgml_model_load_options {
    wgml_weights weights;   /* default WGML_WEIGHTS_F32 */
} wgml_model_load_options;

/* wgml_model_load with options (NULL: the defaults). A model whose matrices are packed or
   16-bit (wgml_model_weight_bytes shows the memory) runs forward (wgml_model_decode,
   wgml_trainer_eval) and trains LoRA adapters over its frozen weights; what needs f32
   matrices refuses it with WGML_ERROR_UNSUPPORTED naming the weight: training every
   weight (wgml_trainer_create without lora), wgml_model_init_random, wgml_lora_merge.
   wgml_model_save unpacks each matrix to f32 first (then rounds to opts->dtype).
   Errors: wgml_model_load's, plus WGML_ERROR_INVALID_ARGUMENT (weights not listed) and
           WGML_ERROR_UNSUPPORTED (quantising a value beyond f16's range: the message names
           the tensor). */
WGML_API wgml_status wgml_model_load_with(wgml_engine *e, const char *path, const wgml_model_load_options *opts,
                                          wgml_model **out);
/* Device bytes of the model's parameters (packed sizes for packed matrices); 0 for NULL. */
WGML_API uint64_t wgml_model_weight_bytes(const wgml_model *m);

/* Writes dir/model.safetensors (every parameter, the names above) and dir/config.json
   (the family's model_type and architecture: qwen3 with qk_norm, qwen2 with qkv_bias,
   else the model_type's, mistral for a window without one, llama otherwise; the window;
   torch_dtype of the weights), creating dir when
   missing; each file is written whole under a temporary name and renamed into place.
   Reads the parameters back from the GPU (waits for recorded work). wgml_model_save
   writes F32; wgml_model_save_with writes opts->dtype (NULL: F32), F16 or BF16 rounded to
   the nearest (ties to even).
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL m or dir; a dtype other than those three;
           F16 and a finite weight beyond its range, +-65504: the message names the
           tensor, and nothing is written), WGML_ERROR_IO, device errors. */
typedef struct wgml_model_save_options {
    wgml_dtype dtype;   /* WGML_F32 (0), WGML_F16 or WGML_BF16 */
} wgml_model_save_options;
WGML_API wgml_status wgml_model_save(wgml_model *m, const char *dir);
WGML_API wgml_status wgml_model_save_with(wgml_model *m, const char *dir, const wgml_model_save_options *opts);
/* The dtype of the weights in the files the model was loaded from: WGML_F32, WGML_F16 or
   WGML_BF16 (its embedding's; for quantised weights, their scales'); WGML_F32 for a model
   made by wgml_model_create or NULL. */
WGML_API wgml_dtype wgml_model_file_dtype(const wgml_model *m);

/* Frees the parameters. NULL is a no-op. */
WGML_API void wgml_model_destroy(wgml_model *m);

/* The model's configuration (never NULL for a model). */
WGML_API const wgml_model_config *wgml_model_get_config(const wgml_model *m);
/* Number of parameter tensors, and the total number of parameters (elements). */
WGML_API size_t wgml_model_param_count(const wgml_model *m);
WGML_API uint64_t wgml_model_numel(const wgml_model *m);
/* Parameter tensor i (in the order listed above) and, when name is not NULL, its name;
   NULL when i is out of range. The tensor may be written (e.g. wgml_tensor_write) but not
   reshaped or released. */
WGML_API wgml_tensor *wgml_model_param(const wgml_model *m, size_t i, const char **name);

/* ---- training ---------------------------------------------------------------------- */

typedef struct wgml_trainer wgml_trainer;
typedef struct wgml_lora wgml_lora;   /* LoRA adapters: see below */

/* Zero-initialise, then set what you need; zero fields take the defaults shown. */
typedef struct wgml_comm wgml_comm;   /* DATA PARALLELISM below */

typedef struct wgml_trainer_desc {
    uint32_t batch;            /* required: sequences per micro-batch */
    uint32_t seq_len;          /* required: tokens per sequence */
    float beta1;               /* AdamW, default 0.9 */
    float beta2;               /* default 0.95 */
    float eps;                 /* default 1e-8 */
    float weight_decay;        /* default 0.1, on matrices and embeddings, not on norms;
                                  a negative value means 0 */
    float clip_norm;           /* global gradient norm clipped to this; default 1.0,
                                  a negative value means no clipping */
    wgml_lora *lora;           /* train this adapter of the model alone (the base frozen);
                                  NULL: every parameter of the model */
    bool keep_attention_scores; /* keep each layer's attention scores from the forward for
                                  the backward (wgml_attention_options.scores): batch * heads *
                                  ceil(seq_len / 64)^2 * 16 KiB more per layer for a faster
                                  backward. Where this adapter's attention kernels cannot keep
                                  them, one layer's would exceed a storage binding, or the
                                  device cannot allocate them after everything else, the
                                  backward recomputes them as without it. */
    bool eval_only;            /* the forward pass and the loss alone (wgml_trainer_eval):
                                  no gradients, optimizer moments or backward scratch are
                                  allocated; the training and state calls are refused */
    uint64_t seed;             /* LoRA dropout (wgml_lora_desc.dropout p > 0): the input x of
                                  target k (wgml_lora_target's bit index: q 0 ... down 6) of
                                  layer l becomes wgml_dropout(x, p, z) with
                                  z = f(f(f(seed ^ 0x6a09e667f3bcc908) ^ (s << 32 | m)) ^
                                  (l << 8 | k)) for step s (steps taken before it, which
                                  wgml_trainer_load_state restores) and micro-batch m within
                                  it, f splitmix64's finaliser (z ^= z >> 30; z *=
                                  0xbf58476d1ce4e5b9; z ^= z >> 27; z *= 0x94d049bb133111eb;
                                  z ^= z >> 31). Costs one [batch * seq_len, in] scratch per
                                  input width of the targets. */
    /* Dynamic loss scaling (PyTorch's GradScaler), for mixed-precision training: the
       model's products at f16 (wgml_context_desc.matmul_precision WGML_PRECISION_F16),
       weights, gradients and AdamW moments f32. The loss's gradient is multiplied by the
       scale S, so that small gradients stay inside f16's range in the backward products;
       each step divides the gradients (and the norm it reports) by S first. A step whose
       gradients are not all finite is skipped: nothing applied, its gradients dropped,
       the step count (wgml_trainer_steps, AdamW's t) not advanced, S halved (not below
       2^-24). After loss_scale_interval finite steps in a row S doubles (not above 2^24).
       loss_scale: the initial S, a power of two in [2^-24, 2^24] (PyTorch's default is
       65536); 0: no scaling. With it each step reads the gradients' norm back (one wait
       for the device). loss_scale_interval: 0 means 2000 (PyTorch's default). */
    float loss_scale;
    uint32_t loss_scale_interval;
    wgml_comm *comm;           /* data parallelism (DATA PARALLELISM below): each step first
                                  sums the trained gradients over comm's processes; NULL or
                                  one process: this process alone. It must outlive the
                                  trainer. */
} wgml_trainer_desc;

/* Allocates activations for batch * seq_len tokens and, unless eval_only, a gradient and
   two AdamW moments per trained parameter (zero).
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL, batch or seq_len 0; beta1 or beta2 outside
           [0, 1); eps outside [0, 1]; weight_decay or clip_norm not finite; NaN anywhere;
           loss_scale neither 0 nor a power of two in [2^-24, 2^24]),
           WGML_ERROR_UNSUPPORTED (training every weight of a model whose matrices are
           packed or 16-bit: train a LoRA adapter, or load f32 weights),
           WGML_ERROR_LIMIT, WGML_ERROR_OUT_OF_MEMORY. */
WGML_API wgml_status wgml_trainer_create(wgml_model *m, const wgml_trainer_desc *desc, wgml_trainer **out);
WGML_API void wgml_trainer_destroy(wgml_trainer *t);

/* Forward pass over ids (batch * seq_len token ids, host memory, sequence-major) and the
   mean cross-entropy against targets (same layout; an id of UINT32_MAX is ignored, it
   counts in no mean). Writes mean_loss[0] (an f32 tensor of at least 1 element; may be
   NULL). The logits stay readable through wgml_trainer_logits until the next call.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL ids or targets, an id >= vocab_size: the
           message names ids[i] or targets[i]), tensor errors of mean_loss. */
WGML_API wgml_status wgml_trainer_eval(wgml_trainer *t, const uint32_t *ids, const uint32_t *targets,
                                       wgml_tensor *mean_loss);

/* wgml_trainer_eval, then the backward pass: adds grad_scale times the gradient of the
   mean loss to every parameter's accumulated gradient (grad_scale 1/n averages n
   micro-batches). The logits then hold their gradient, not the logits.
   Errors: as wgml_trainer_eval; WGML_ERROR_INVALID_ARGUMENT for an eval_only trainer and
           after the step's last micro-batch (wgml_trainer_mark_last) until the step. */
WGML_API wgml_status wgml_trainer_accumulate(wgml_trainer *t, const uint32_t *ids, const uint32_t *targets,
                                             float grad_scale, wgml_tensor *mean_loss);

/* Marks the next wgml_trainer_accumulate as the step's last micro-batch: with desc.comm of
   several processes, its backward pass starts summing the gradients over the processes
   as soon as each layer's are final, while the rest of the backward runs (DATA
   PARALLELISM), and wgml_trainer_step finishes the sum; unmarked, the whole sum runs in
   wgml_trainer_step. The result is the same bit for bit. Alone (comm NULL or one process)
   it changes nothing but the calls allowed: after the marked accumulate, no other
   accumulate until the step (eval, the logits and the gradients stay readable). An
   accumulate that refuses its arguments leaves the mark in place; one that fails after
   them makes the next wgml_trainer_step return its error and apply nothing. A step
   clears a mark not yet used.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL, an eval_only trainer, the next accumulate
           already marked, the marked one already run and the step not yet taken). */
WGML_API wgml_status wgml_trainer_mark_last(wgml_trainer *t);

/* One optimizer step on the accumulated gradients: with desc.comm of several processes,
   first their sum over the processes (DATA PARALLELISM); their global L2 norm (written to
   grad_norm[0] before clipping when grad_norm is not NULL), clipping to clip_norm, AdamW
   with learning rate lr and the trainer's step count (1-based), then the gradients are
   cleared for the next accumulation. All on the GPU, nothing read back, except the
   gradients' round trip through host memory for the sum and, with desc.loss_scale, the
   norm (the unscaled one goes to grad_norm; a skipped step writes the non-finite norm
   and returns WGML_OK: compare wgml_trainer_steps). When the sum fails, or failed
   in the marked last micro-batch (wgml_trainer_mark_last), nothing is applied and the
   step's gradients are dropped (the next accumulate starts a new step).
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL, lr negative or not finite, no gradient
           accumulated since the last step, an eval_only trainer), the communicator's
           (WGML_ERROR_TIMEOUT, WGML_ERROR_DEVICE), the marked last micro-batch's failure. */
WGML_API wgml_status wgml_trainer_step(wgml_trainer *t, float lr, wgml_tensor *grad_norm);

/* The logits [batch * seq_len, vocab] of the last eval or accumulate (their gradient
   after accumulate). Owned by the trainer. */
WGML_API wgml_tensor *wgml_trainer_logits(const wgml_trainer *t);
/* The accumulated gradient of parameter i (shape of wgml_model_param(i)); NULL when i is
   out of range or the trainer is eval_only. Owned by the trainer; undefined right after a step. */
WGML_API wgml_tensor *wgml_trainer_grad(const wgml_trainer *t, size_t i);
/* The accumulated gradient of adapter parameter i (wgml_lora_param's order) of a trainer
   created with desc.lora; NULL otherwise or out of range. wgml_trainer_grad is NULL for
   every parameter of the frozen model in that case. */
WGML_API wgml_tensor *wgml_trainer_lora_grad(const wgml_trainer *t, size_t i);
/* Optimizer steps taken (steps skipped by loss scaling not counted). */
WGML_API uint32_t wgml_trainer_steps(const wgml_trainer *t);
/* The loss scale the next step uses (desc.loss_scale), 0 without loss scaling or for NULL;
   and the steps skipped so far because their gradients were not finite (0 for NULL). */
WGML_API float wgml_trainer_loss_scale(const wgml_trainer *t);
WGML_API uint32_t wgml_trainer_skipped_steps(const wgml_trainer *t);

/* The optimizer's state, for resumable checkpoints: every trained tensor's two AdamW
   moments (safetensors, "<name>.exp_avg" and "<name>.exp_avg_sq", F32, <name> the
   parameter's name or the adapter's key) and the step count (metadata "step"), with loss
   scaling also its scale, finite steps in a row and skipped steps ("loss_scale",
   "loss_scale_good", "skipped_steps"), written atomically to path. Save after a step (no
   gradient pending); load into a trainer of the same model or adapter: with the weights
   saved at the same step, training goes on as if it had not stopped, bit for bit on the
   same adapter. A trainer with loss scaling that loads a state without it keeps its
   initial scale; one without ignores a saved scale.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL; save with gradients pending; an eval_only
           trainer), WGML_ERROR_IO,
           WGML_ERROR_FORMAT (load: a tensor missing or of another shape, no step count),
           device errors. */
WGML_API wgml_status wgml_trainer_save_state(const wgml_trainer *t, const char *path);
WGML_API wgml_status wgml_trainer_load_state(wgml_trainer *t, const char *path);

/* ---- data parallelism (src/comm.c, src/transport/mpi.c) --------------------------------

   DATA PARALLELISM
   ================
   Several processes (mpirun -np N) train one model together: each holds the whole model,
   runs the forward and backward passes of its share of every step's micro-batches, and
   wgml_trainer_step sums the trained gradients over the processes before clipping and
   AdamW. Each process accumulates its micro-batches with grad_scale 1 / (micro-batches of
   the step over all processes), so the sum is the gradient of the global batch's mean
   loss, and every process takes the same step: the weights stay bit-identical. The
   gradients travel through host memory in buckets of about 8 MiB, in the order the
   backward pass finishes them (the last layer's first): a bucket's gradients are copied
   on the device into a mappable staging buffer, and once it is mapped, copied to host
   memory and its all-reduce started (non-blocking); the sums are written back in
   wgml_trainer_step once all are done. Marked with wgml_trainer_mark_last, the step's last
   micro-batch stages each layer's gradients as soon as its backward has made them final
   and starts the all-reduces of the buckets mapped so far between the later layers', so
   that the sum overlaps the rest of the backward pass; unmarked, everything is staged in
   wgml_trainer_step. Either way each element is the same sum of the same floats.

   The transport is MPI, present when the build found Open MPI (wgml_comm_available);
   a build without it refuses to run inside an MPI job rather than train N copies alone. A
   collective that does not finish within the timeout (a process died or hangs) fails
   with WGML_ERROR_TIMEOUT, and wgml_comm_destroy then aborts every process of the job;
   so does a trainer that gives up a sum it began (its step failed, or it was destroyed
   between the marked accumulate and the step), as the others would wait for it. */

/* Whether this build has a transport (MPI). */
WGML_API bool wgml_comm_available(void);

/* Joins the job this process was started in: when the environment names an MPI job of
   more than one process (mpirun sets OMPI_COMM_WORLD_SIZE, or PMI_SIZE / PMIX_RANK),
   initialises MPI and writes a communicator to *out; outside a job, *out is NULL and the
   call succeeds (NULL is the communicator of one process for every call below).
   timeout_ms bounds every collective (0: 600000).
   Errors: WGML_ERROR_INVALID_ARGUMENT (out NULL), WGML_ERROR_UNSUPPORTED (inside an MPI job
           of several processes in a build without MPI), WGML_ERROR_DEVICE (MPI failed to
           start), WGML_ERROR_OUT_OF_MEMORY. */
WGML_API wgml_status wgml_comm_create(uint32_t timeout_ms, wgml_comm **out);

/* This process's rank in the job (0 for NULL), the job's size (1 for NULL), and its rank
   among the processes of its machine (0 for NULL): under MPI, each process's default
   device (wgml_context_desc.device_index). */
WGML_API uint32_t wgml_comm_rank(const wgml_comm *c);
WGML_API uint32_t wgml_comm_size(const wgml_comm *c);
WGML_API uint32_t wgml_comm_local_rank(const wgml_comm *c);

/* Sums n doubles of buf over the processes, in place (every process calls it with the same
   n, in the same order of calls); NULL c: nothing to do. The same result on every process.
   Errors: WGML_ERROR_INVALID_ARGUMENT (buf NULL with n > 0), WGML_ERROR_TIMEOUT,
           WGML_ERROR_DEVICE (the transport failed). */
WGML_API wgml_status wgml_comm_allreduce_sum(wgml_comm *c, double *buf, size_t n);

/* Leaves the job (MPI_Finalize), or after a failed collective aborts every process of it
   (MPI_Abort), so that none waits forever. NULL is a no-op. */
WGML_API void wgml_comm_destroy(wgml_comm *c);
/* Ends every process of the job at once with exit status code (MPI_Abort): for a process
   that cannot go on while the others would wait for it in their next collective. Does
   not return when c has several processes; NULL (or one process): returns. */
WGML_API void wgml_comm_abort(wgml_comm *c, int code);

/* ---- LoRA adapters (src/lora.c) -------------------------------------------------------

   LoRA as PEFT defines it (Hu et al. 2021): a projection y = x W^T of the blocks gets
   y = x W^T + scale * (x A^T) B^T with A [rank, in] and B [out, rank], scale = alpha /
   rank (alpha / sqrt(rank) with rslora). A starts Kaiming-uniform with a = sqrt(5) (each
   element uniform in +-1/sqrt(in), as torch's kaiming_uniform_ gives), B at zero, so a
   new adapter leaves the model's outputs unchanged. An adapter is attached to its model
   when created or loaded: wgml_model_decode and a trainer use it (unmerged) until it is
   destroyed or merged. A trainer created with desc.lora trains the adapter alone: the
   base stays frozen (no gradient and no AdamW state for it, its values bit for bit
   unchanged).

   Files are PEFT's: adapter_config.json ("peft_type": "LORA", r, lora_alpha,
   lora_dropout, use_rslora, target_modules, bias "none", task_type "CAUSAL_LM", ...) and
   adapter_model.safetensors with PEFT's keys,
       base_model.model.model.layers.<i>.self_attn.q_proj.lora_A.weight   [rank, in]
       base_model.model.model.layers.<i>.self_attn.q_proj.lora_B.weight   [out, rank]
   (k_proj, v_proj, o_proj under self_attn; gate_proj, up_proj, down_proj under mlp; an
   LFM2 model's as its weights are named: self_attn.out_proj, feed_forward.w1 / w3 / w2,
   and in its convolution layers conv.in_proj and conv.out_proj, PEFT's out_proj naming
   both output projections), so
   PeftModel.from_pretrained(base, dir) loads what wgml writes and wgml loads what PEFT
   writes (f32, f16 or bf16; what PEFT can write but wgml cannot run, DoRA, biases,
   per-module ranks, modules_to_save, is refused by name). */

typedef enum wgml_lora_target {
    WGML_LORA_Q = 1 << 0, WGML_LORA_K = 1 << 1, WGML_LORA_V = 1 << 2,
    WGML_LORA_O = 1 << 3,      /* o_proj; LFM2's out_proj of both attention and convolution */
    WGML_LORA_GATE = 1 << 4, WGML_LORA_UP = 1 << 5, WGML_LORA_DOWN = 1 << 6,
    WGML_LORA_IN = 1 << 7,     /* LFM2's convolution in_proj */
    WGML_LORA_ALL = 0xFF       /* every projection the model has */
} wgml_lora_target;

/* Zero-initialise; zero fields take the defaults shown (PEFT's and the CLI's). */
typedef struct wgml_lora_desc {
    uint32_t rank;             /* default 8; at most 4096 and the smaller side of a target */
    float alpha;               /* default 16 */
    float dropout;             /* in [0, 1): a trainer of the adapter applies inverted dropout
                                  (wgml_dropout) to each target's input before A, as PEFT's
                                  lora_dropout does; running the adapter (eval, decoding)
                                  never drops. Default 0 */
    uint32_t targets;          /* wgml_lora_target bits; default WGML_LORA_ALL: every
                                  projection the model has (wgml_lora_get_desc lists them);
                                  a projection the model lacks is refused */
    bool rslora;               /* scale = alpha / sqrt(rank) */
} wgml_lora_desc;

typedef struct wgml_lora wgml_lora;

/* A new adapter for m (A drawn from seed on the host: the same seed gives the same
   adapter on every adapter), attached to m. A model has at most one adapter.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL; rank 0 after defaults, over 4096 or over a
           target's smaller side; alpha not finite and positive; targets outside
           WGML_LORA_ALL or naming a projection m lacks; dropout outside [0, 1); m already
           has an adapter), device errors. */
WGML_API wgml_status wgml_lora_create(wgml_model *m, const wgml_lora_desc *desc, uint64_t seed, wgml_lora **out);
/* Detaches and frees the adapter. NULL is a no-op. */
WGML_API void wgml_lora_destroy(wgml_lora *l);
/* The adapter's description (defaults filled in) and scale. */
WGML_API const wgml_lora_desc *wgml_lora_get_desc(const wgml_lora *l);
WGML_API float wgml_lora_scale(const wgml_lora *l);
/* Its parameters: lora_A then lora_B of each target of each layer, in layer order, with
   PEFT's key as name. */
WGML_API size_t wgml_lora_param_count(const wgml_lora *l);
WGML_API wgml_tensor *wgml_lora_param(const wgml_lora *l, size_t i, const char **name);
WGML_API uint64_t wgml_lora_numel(const wgml_lora *l);

/* Writes dir/adapter_config.json and dir/adapter_model.safetensors (f32), creating dir
   when missing; each file written atomically. base_model names the base in the config
   (base_model_name_or_path; may be NULL).
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL), WGML_ERROR_IO, device errors. */
WGML_API wgml_status wgml_lora_save(const wgml_lora *l, const char *dir, const char *base_model);
/* Reads a PEFT LoRA adapter folder for m and attaches it. Every tensor is checked (its
   key, and its shape against m and the config's rank) before any device memory is taken;
   files as wgml_checkpoint_open requires them.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL; m already has an adapter), WGML_ERROR_IO,
           WGML_ERROR_FORMAT (a malformed file, a missing tensor, a shape that does not
           fit), WGML_ERROR_UNSUPPORTED (another peft_type, DoRA, biases, per-module ranks
           or alphas, modules_to_save, fan_in_fan_out, a target wgml does not have). */
WGML_API wgml_status wgml_lora_load(wgml_model *m, const char *dir, wgml_lora **out);
/* Adds scale * B A into each target's base weight (the adapter's effect kept, without
   its cost), then detaches and frees the adapter.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL), WGML_ERROR_UNSUPPORTED (the model's weights
   are packed or 16-bit: nothing merged), device errors (the adapter then stays
   attached, and some base weights may hold their merge already: load the model again). */
WGML_API wgml_status wgml_lora_merge(wgml_lora *l);

/* ---- generation with a KV cache ------------------------------------------------------ */

typedef struct wgml_kv_cache wgml_kv_cache;

/* Keys and values of up to max_tokens positions of one sequence, for every layer (2 *
   layers * max_tokens * kv_heads * head_dim floats), empty.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL, max_tokens 0), WGML_ERROR_LIMIT,
           WGML_ERROR_OUT_OF_MEMORY. */
WGML_API wgml_status wgml_kv_cache_create(wgml_model *m, uint32_t max_tokens, wgml_kv_cache **out);
WGML_API void wgml_kv_cache_destroy(wgml_kv_cache *c);
/* Positions filled, and capacity. */
WGML_API uint32_t wgml_kv_cache_length(const wgml_kv_cache *c);
WGML_API uint32_t wgml_kv_cache_capacity(const wgml_kv_cache *c);
/* Empties the cache (the next token is at position 0). */
WGML_API void wgml_kv_cache_reset(wgml_kv_cache *c);
/* Keeps the first n positions and forgets the rest: the next token goes to position n
   (a chat whose new prompt shares its first n tokens with what the cache holds goes on
   from there instead of running them again). Nothing on the GPU changes.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL), WGML_ERROR_SHAPE (n beyond the positions
           filled). */
WGML_API wgml_status wgml_kv_cache_truncate(wgml_kv_cache *c, uint32_t n);

/* Runs n tokens (host ids) at positions length .. length + n - 1 of the cache in one pass,
   appends their keys and values, and writes logits: a tensor of vocab_size elements gets
   the last token's logits, one of n * vocab_size elements every token's ([n, vocab]).
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL, n 0, an id >= vocab_size),
           WGML_ERROR_SHAPE (length + n > capacity: nothing is run; logits of another
           size), WGML_ERROR_DTYPE, WGML_ERROR_CONTEXT. */
WGML_API wgml_status wgml_model_decode(wgml_kv_cache *c, const uint32_t *ids, uint32_t n, wgml_tensor *logits);

/* SEQUENCES DECODED TOGETHER
   A wgml_kv_batch holds the caches of n_seq sequences (each up to max_tokens positions,
   each at its own length) that advance one token each per wgml_model_decode_batch: every
   layer's projections are one product over the n_seq rows, each sequence attends to its
   own keys. A prompt enters an empty sequence through wgml_kv_batch_prefill; a finished
   sequence is emptied with wgml_kv_batch_reset and may take a new prompt (continuous
   batching). Greedy decoding gives each sequence the tokens it gets alone with a
   wgml_kv_cache, up to f32 rounding of the different products.
   Memory: 2 * layers * n_seq * max_tokens * kv_heads * head_dim floats of keys and values,
   a cache of max_tokens positions for prompts, and an n_seq x max_tokens mask. */
typedef struct wgml_kv_batch wgml_kv_batch;
/* Errors: WGML_ERROR_INVALID_ARGUMENT (NULL; max_tokens or n_seq 0), WGML_ERROR_LIMIT (a
   layer's keys beyond one device buffer), WGML_ERROR_OUT_OF_MEMORY. */
WGML_API wgml_status wgml_kv_batch_create(wgml_model *m, uint32_t max_tokens, uint32_t n_seq, wgml_kv_batch **out);
WGML_API void wgml_kv_batch_destroy(wgml_kv_batch *b);
/* Positions sequence seq holds (0 for NULL or seq out of range). */
WGML_API uint32_t wgml_kv_batch_length(const wgml_kv_batch *b, uint32_t seq);
/* Empties sequence seq (no-op for NULL or seq out of range). */
WGML_API void wgml_kv_batch_reset(wgml_kv_batch *b, uint32_t seq);
/* Runs the n tokens of a prompt into empty sequence seq, as wgml_model_decode does into an
   empty cache (logits of the last token, or of every token: its shapes and errors), then
   places them in the sequence's block.
   Errors: wgml_model_decode's, plus WGML_ERROR_INVALID_ARGUMENT (seq out of range; a
           sequence that is not empty). */
WGML_API wgml_status wgml_kv_batch_prefill(wgml_kv_batch *b, uint32_t seq, const uint32_t *ids, uint32_t n,
                                           wgml_tensor *logits);
/* One token for every sequence: ids[i] goes to sequence i at position
   wgml_kv_batch_length(b, i) (an empty sequence starts with it); logits [n_seq, vocab]
   (any shape of that many elements): row i is sequence i's. Every length grows by one;
   give a sequence with nothing to decode any token and reset it before its next prompt.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL; an id >= vocab_size), WGML_ERROR_DTYPE,
           WGML_ERROR_SHAPE (logits' size; a sequence already at max_tokens: nothing is
           decoded). */
WGML_API wgml_status wgml_model_decode_batch(wgml_kv_batch *b, const uint32_t *ids, wgml_tensor *logits);

/* ---- sampling: the next token from a position's logits (src/sample.c, src/sample_gpu.c) ---

   The filters of transformers' generate and OpenAI's API, applied to one position's
   logits in host memory, in this order:
     1. repetition_penalty r (transformers): each token of the history, once, gets
        logit / r where its logit is positive, logit * r otherwise;
     2. presence_penalty a and frequency_penalty f (OpenAI): logit -= a (when the token
        occurs in the history) + f * (its count in the history);
     3. temperature t: logit / t; t = 0 is greedy: the largest logit (the lowest id among
        equals) and nothing below applies;
     4. top_k: the k largest logits (ties to the lower id);
     5. top_p: the smallest set of the most probable remaining tokens whose probabilities
        (softmax over what remains) sum to at least top_p;
     6. min_p: tokens whose probability is below min_p times the largest are dropped;
   then one token is drawn from the softmax of what remains with the sampler's own
   generator (splitmix64 of seed: the same seed and inputs give the same tokens).
   Costs O(vocab log vocab) per call with top_p (a sort), O(vocab) otherwise; memory: a few
   words per vocabulary entry, allocated once. The work is on the host: a caller reads the
   logits back (wgml_tensor_read) first; wgml_sampler_next_gpu below keeps the work per
   vocabulary entry on the GPU. */

/* Zero-initialise: every zero field is its "off" value (temperature 0: greedy). */
typedef struct wgml_sampling {
    float temperature;          /* >= 0, finite; 0: greedy */
    uint32_t top_k;             /* 0: off */
    float top_p;                /* in (0, 1]; 0 or 1: off */
    float min_p;                /* in [0, 1]; 0: off */
    float repetition_penalty;   /* > 0, finite; 0 or 1: off */
    float presence_penalty;     /* finite; 0: off */
    float frequency_penalty;    /* finite; 0: off */
} wgml_sampling;

typedef struct wgml_sampler wgml_sampler;

/* A sampler for a vocabulary of vocab entries with the given settings (copied) and seed.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL out; vocab 0; a setting outside its range: the
           message names it), WGML_ERROR_OUT_OF_MEMORY. */
WGML_API wgml_status wgml_sampler_create(const wgml_sampling *settings, uint32_t vocab, uint64_t seed, wgml_sampler **out);
/* Picks the next token: logits[vocab] (host, f32; read, not written), history[n] the
   tokens so far (for the penalties; may be NULL when n is 0). Writes *token.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL s, logits or token; a history id >= vocab; no
           finite logit among those the filters keep: NaN or all -inf). */
WGML_API wgml_status wgml_sampler_next(wgml_sampler *s, const float *logits, const uint32_t *history, size_t n,
                                       uint32_t *token);
/* The same choice for n rows of logits that live on the GPU (a batch's last positions),
   with the work per vocabulary entry done there: row i of logits (f32, numel n * vocab,
   read only) is drawn with samplers[i] (distinct samplers) and its history histories[i]
   [0..lengths[i]) (histories and lengths may be NULL: no history); a NULL samplers[i]
   skips row i (tokens[i] untouched). One workgroup per row applies the penalties, finds
   the row's maximum and softmax normaliser at the temperature, then either draws the
   token itself (no top_k, top_p or min_p) or selects candidates: top_k's, the best
   (temperature 0), or the 256 best when top_p or min_p filter without top_k. The host
   reads back 16 bytes per row and 8 per candidate and applies top_p, min_p and the draw
   with the steps above (top_p weighs the candidates against the whole row's normaliser).
   A row whose kept tokens may reach past its 256 candidates (a flat distribution), whose
   top_k is over 1024 or that holds a +inf logit is read back whole and given to
   wgml_sampler_next. The same seeds and inputs give the same tokens. Against
   wgml_sampler_next on the same logits: the adjusted logits and the normaliser are f32
   here (double there), so a draw within rounding of the boundary between two tokens may
   pick the other; greedy choices and the candidate sets agree exactly where penalties
   are off (they are computed in f32 here).
   Memory: the engine keeps scratch for the adjusted rows (4 * vocab bytes per row) and the
   candidates until it is destroyed.
   Errors: WGML_ERROR_INVALID_ARGUMENT (NULL e, samplers, logits or tokens; n 0; a history
           NULL with a nonzero length; an id >= vocab; a row with no logit that is a number
           above -inf), WGML_ERROR_CONTEXT, WGML_ERROR_DTYPE (logits not f32),
           WGML_ERROR_SHAPE (samplers of different vocabularies; numel(logits) not n * vocab),
           WGML_ERROR_LIMIT (n * vocab over 2^32 - 1). Tokens of rows before a failing one
           may have been written. */
WGML_API wgml_status wgml_sampler_next_gpu(wgml_engine *e, wgml_sampler *const *samplers, uint32_t n,
                                           const wgml_tensor *logits, const uint32_t *const *histories,
                                           const size_t *lengths, uint32_t *tokens);
/* NULL is a no-op. */
WGML_API void wgml_sampler_free(wgml_sampler *s);

#ifdef __cplusplus
}
#endif
#endif /* WGML_H */
