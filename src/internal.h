/* Private declarations shared by the library's source files. Nothing here is public API. */
#ifndef WGML_INTERNAL_H
#define WGML_INTERNAL_H

#include "wgml.h"
#include "tuning.h"
#include "webgpu_abi.h"

#include <assert.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WGML_ERROR_MAX 1024

/* ---- context ------------------------------------------------------------------------ */

/* Work an op family holds back to record later in one piece (element-wise fusion holds
   consecutive small ops for one dispatch). The family registers these functions on the
   context with its state; the recorder calls flush before anything else is recorded,
   written or submitted, and asks uses() before a tensor's buffer is released or an engine
   destroyed. The core knows no op family: this is its one way in. */
typedef struct wgml__deferred_ops {
    wgml_status (*flush)(wgml_context *ctx);
    /* whether the held work binds t's buffer (t not NULL) or runs on engine e */
    bool (*uses)(const wgml_context *ctx, const struct wgml_tensor *t, const struct wgml_engine *e);
    void (*release)(wgml_context *ctx);   /* frees the state when the context is destroyed */
} wgml__deferred_ops;

#define WGML__MAX_FENCES 64
typedef struct wgml__fence wgml__fence;

struct wgml_context {
    WGPUInstance instance;
    WGPUAdapter adapter;
    WGPUDevice device;
    WGPUQueue queue;
    WGPULimits limits;
    wgml_adapter_info info;
    uint32_t timeout_ms;
    bool submit_every_op;
    wgml_precision matmul_precision;   /* desc.matmul_precision */
    bool cpu_adapter;          /* a CPU adapter (lavapipe): fewer, larger workgroups pay there */
    const wgml__profile *profile;   /* the adapter's constants (src/profile.c) */
    uint64_t address_limit;    /* RLIMIT_AS at creation, 0 when unlimited (src/host_memory.c) */
    /* Fences not yet seen done, oldest first (src/fence.c). */
    struct wgml__fence { uint64_t id; WGPUFuture future; } fences[WGML__MAX_FENCES];
    uint32_t nfences;
    uint64_t fence_issued, fence_done;

    /* Errors raised by the device asynchronously, reported by the next call. */
    wgml_status pending_status;
    bool lost;
    char error[WGML_ERROR_MAX];
    char pending_error[WGML_ERROR_MAX];

    /* The recorder: one encoder and one open compute pass per batch. The ops' parameters
       go to a host copy of one persistent uniform buffer, uploaded by one writeBuffer just
       before the batch is submitted (queue order makes reuse safe), and reach each
       dispatch as a dynamic offset, so bind groups do not change between calls. */
    WGPUCommandEncoder encoder;
    WGPUComputePassEncoder pass;
    WGPUComputePipeline pass_pipeline;   /* the pipeline last set on pass (set again only when it changes) */
    WGPUBuffer uniforms;
    uint8_t *uniforms_host;
    uint32_t uniforms_used;
    uint32_t uniform_stride;   /* minUniformBufferOffsetAlignment, at least 256 */
    uint32_t batch_dispatches;
    /* A batch is submitted at batch_limit dispatches: batch_first right after the device
       was waited for (it is idle, so starting it early pays), batch_max otherwise. */
    uint32_t batch_first, batch_max, batch_limit;
    uint32_t uniform_arena_bytes;
    /* How waits wait (from the profile; tests set them to reach both ways) */
    bool sync_by_work_done;    /* wgml_context_sync waits on onSubmittedWorkDone, not a mapping */
    bool read_after_work_done; /* reads wait on onSubmittedWorkDone before mapping */
    uint32_t wait_spin_us;     /* waits poll for this long before they block */
    bool log_kernels;          /* WGML_LOG_KERNELS=1: a line on stderr for every kernel built */
    bool fuse_off;             /* WGML_FUSE=0: every element-wise op is its own dispatch */
    const wgml__deferred_ops *deferred_ops;   /* the family holding work back, or NULL */
    void *deferred_state;                     /* its state */

    /* Bind groups by (engine, layout, buffers): built once, reused by every later call
       with the same tensors. Entries naming a released tensor or a destroyed engine are
       dropped at that moment, so a recycled buffer handle can never hit a stale entry. */
    struct wgml__bind_cache_entry *bind_cache;
    uint32_t bind_cache_cap;

    uint64_t commands;
    uint64_t submits;

    /* a MapRead buffer reused by reads no larger than it (decode loops read every token) */
    WGPUBuffer readback;
    uint64_t readback_size;

    /* wgml_context_timer_*: a 2-entry timestamp query set, or the host clock */
    bool timing;
    WGPUQuerySet timer_queries;
    WGPUBuffer timer_resolve, timer_readback;
    double timer_host_start;
    long live_tensors;
    long live_engines;
    uint64_t device_bytes;     /* in tensors' buffers (the engines' scratch included) */

    /* Write tracking (wgml_tensor.id / .written): ids of tensors made so far, and a counter of
       recorded writes. */
    uint64_t tensors_made;
    uint64_t writes;
};

/* Records a message for ctx (or the thread's context-less slot when ctx is NULL) and
   returns status, so validation reads `return wgml__fail(ctx, WGML_ERROR_SHAPE, ...)`. */
wgml_status wgml__fail(wgml_context *ctx, wgml_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Returns (and clears) an error the device raised since the last call, or WGML_OK. Every
   public entry point calls this first so asynchronous errors surface promptly. */
wgml_status wgml__check_device(wgml_context *ctx);

/* Waits for a future with the context's timeout. */
wgml_status wgml__wait(wgml_context *ctx, WGPUFuture future, const char *what);

/* Maps buffer (MapRead usage) for reading, after all work submitted before; the caller
   unmaps it. */
wgml_status wgml__map_read(wgml_context *ctx, WGPUBuffer buffer, uint64_t size, const char *what);

/* The recorder (src/context.c). */
WGPUComputePassEncoder wgml__pass(wgml_context *ctx);        /* opens one if needed */
WGPUCommandEncoder wgml__encoder_outside_pass(wgml_context *ctx);
wgml_status wgml__uniform_alloc(wgml_context *ctx, const void *data, uint32_t size,
                                WGPUBuffer *buffer, uint32_t *offset);
wgml_status wgml__after_record(wgml_context *ctx);           /* counts, maybe submits */
wgml_status wgml__submit(wgml_context *ctx);                 /* submits what is recorded */
/* Keeps the first of the errors met where no caller can be told at once (a tensor's
   release, an engine's destroy); the next call on ctx returns it. */
void wgml__defer_error(wgml_context *ctx, wgml_status s);

/* Records the work held back (see wgml__deferred_ops), if any. Everything that records,
   submits or writes calls it first, so order is kept. */
wgml_status wgml__deferred_flush(wgml_context *ctx);
/* Whether the held work binds t's buffer, or runs on engine e. */
bool wgml__deferred_uses(const wgml_context *ctx, const struct wgml_tensor *t, const struct wgml_engine *e);
/* The pending element-wise group of ctx, for tests: ops, distinct buffers, vec4 count and
   engine (all 0 / NULL when none is pending) (src/ops/elementwise.c). */
typedef struct wgml__fusion_view { uint32_t nops, nslots, n4; const struct wgml_engine *engine; } wgml__fusion_view;
wgml__fusion_view wgml__fusion_pending(const wgml_context *ctx);

/* ---- tensors ------------------------------------------------------------------------ */

/* A packed tensor's description and layout (src/packed.c); all zero for a dense one. */
typedef struct wgml__packed {
    wgml_packed_desc desc;
    size_t bytes, row_bytes, scales_offset, biases_offset;
} wgml__packed;

/* Whether d is one of the packed dtypes (wgml_tensor_create_packed makes them). */
static inline bool wgml__dtype_packed(wgml_dtype d) { return d >= WGML_Q8_0 && d <= WGML_AFFINE; }

struct wgml_tensor {
    wgml_context *ctx;
    WGPUBuffer buffer;
    uint64_t capacity;         /* bytes allocated: nbytes rounded up to 16 (vec4 access) */
    wgml_dtype dtype;
    uint32_t ndim;
    size_t shape[WGML_MAX_DIMS];
    /* Unique within the context (a released tensor's address may come back; its id does
       not), and the context's write counter at the last write recorded to the buffer (a
       dispatch binding it read-write, wgml_tensor_write, wgml_tensor_zero): a copy derived
       from the tensor (matmul's transposed copy of a) is current while both are unchanged. */
    uint64_t id;
    uint64_t written;
    wgml__packed packed;       /* bytes 0 unless the dtype is packed */
};

/* wgml_clip_grad_by_global_norm with every gradient also multiplied by pre (a trainer's
   loss unscaling, folded into the clipping's one pass); a negative max_norm: no clipping,
   only pre (when pre is not 1). Errors as wgml_clip_grad_by_global_norm's. */
wgml_status wgml__clip_grads(wgml_engine *e, wgml_tensor *const *grads, size_t count, const wgml_tensor *norm, float max_norm,
                             float pre);
/* Creates the packed tensor p describes (the layout already checked) for fn. */
wgml_status wgml__tensor_create_packed(const char *fn, wgml_context *ctx, const wgml__packed *p, wgml_tensor **out);
/* LFM2's convolution blocks (src/ops/conv.c; shapes are the caller's to get right, as
   model.c's). bcx [rows, 3 dim] = (B, C, x) from in_proj; the others [rows, dim].
   gate_in: bx = B * x. gate_out: y = C * cv. gate_out_backward: dcv = dy * C and dbcx's C
   columns = dy * cv. gate_in_backward: dbcx's B columns = dbx * x and its x columns =
   dbx * B. conv_rows: out[i] = sum_j w[:, j] * hist[rowpos[i] - (K-1) + j], hist [*, dim]
   the convolution inputs so far (K - 1 zero rows before each sequence's), w [dim, K],
   rowpos u32 [rows]. */
wgml_status wgml__conv_gate_in(wgml_engine *e, const wgml_tensor *bcx, wgml_tensor *bx);
wgml_status wgml__conv_gate_out(wgml_engine *e, const wgml_tensor *bcx, const wgml_tensor *cv, wgml_tensor *y);
wgml_status wgml__conv_gate_out_backward(wgml_engine *e, const wgml_tensor *bcx, const wgml_tensor *cv, const wgml_tensor *dy,
                                         wgml_tensor *dcv, wgml_tensor *dbcx);
wgml_status wgml__conv_gate_in_backward(wgml_engine *e, const wgml_tensor *bcx, const wgml_tensor *dbx, wgml_tensor *dbcx);
wgml_status wgml__conv_rows(wgml_engine *e, const wgml_tensor *hist, const wgml_tensor *rowpos, const wgml_tensor *w,
                            wgml_tensor *out);

/* Batched decoding's cache write (src/ops/copy.c): row b of src [blocks, words] (u32 or
   f32 words) into row positions[b] of block b of dst [blocks, rows, words]; the caller
   checked the shapes and that each position is below rows. */
wgml_status wgml__copy_rows_at(wgml_engine *e, const wgml_tensor *src, wgml_tensor *dst, const wgml_tensor *positions,
                               uint32_t blocks, uint32_t rows, uint32_t words);
/* The precision a product runs at: opts' (NULL: the default), else the context's, else F32
   (src/ops/matmul_mma.c). */
wgml_precision wgml__precision_of(const wgml_context *ctx, const wgml_matmul_options *opts);
/* Whether an M x N x K product at precision p with this b runs on the matrix units: an f16
   precision, a device with f16 subgroup matrices, M and N above 1, b f32 or f16, and the
   operands' f16 copies within one storage binding. */
bool wgml__mma_takes(const wgml_context *ctx, wgml_precision p, const wgml_tensor *b, uint32_t M, uint32_t N, uint32_t K);
/* That product (the caller checked the shapes; layout as in src/ops/matmul.c). */
wgml_status wgml__mma_matmul(wgml_engine *e, int layout, uint32_t M, uint32_t N, uint32_t K,
                             const wgml_tensor *a, const wgml_tensor *b, wgml_tensor *out, bool acc, wgml_precision p);
/* Whether t is a weight the packed kernels read: a packed dtype, f16 or bf16. */
bool wgml__is_packed_operand(const wgml_tensor *t);
/* out [M, N] (+)= a [M, K] @ W^T (trans false: W [N, K]) or a @ W (trans: W [K, N]) for
   a packed operand W (src/ops/packed.c); the caller checked the shapes. */
wgml_status wgml__packed_matmul(wgml_engine *e, const char *fn, const wgml_tensor *a, const wgml_tensor *w, wgml_tensor *out,
                                uint32_t M, uint32_t N, uint32_t K, bool trans, bool acc);
/* wgml_embedding from a packed table (the caller checked the shapes). */
wgml_status wgml__packed_embedding(wgml_engine *e, const char *fn, const wgml_tensor *table, const wgml_tensor *ids,
                                   wgml_tensor *out);
/* The layout of desc, or a failure naming fn (ctx may be NULL). */
wgml_status wgml__packed_layout(wgml_context *ctx, const char *fn, const wgml_packed_desc *desc, wgml__packed *out);

/* Records that t's buffer is (about to be) written. */
static inline void wgml__wrote(wgml_tensor *t) { t->written = ++t->ctx->writes; }

/* The bind group cache (src/bind_cache.c). */
typedef struct wgml__bind_key {
    const void *engine;
    WGPUBindGroupLayout layout;
    uint32_t nbuffers;
    WGPUBuffer buffers[16];
    uint64_t sizes[16];
} wgml__bind_key;
WGPUBindGroup wgml__bind_cache_get(wgml_context *ctx, const wgml__bind_key *key, const WGPUBindGroupEntry *entries,
                                   uint32_t nentries);
void wgml__bind_cache_forget_buffer(wgml_context *ctx, WGPUBuffer buffer);
void wgml__bind_cache_forget_engine(wgml_context *ctx, const void *engine);
void wgml__bind_cache_free(wgml_context *ctx);

/* Byte size the tensor's elements occupy (without the vec4 padding). */
size_t wgml__nbytes(const wgml_tensor *t);

/* ---- engine, kernels, dispatch ------------------------------------------------------ */

/* One compiled kernel variant: a WGSL file, an entry point and override constants. */
#define WGML__MAX_CONSTANTS 12  /* pipeline-overridable constants of one kernel variant */
typedef struct wgml__kernel {
    const char *file;            /* name of src/kernels/<file>.wgsl */
    const char *entry;           /* entry point */
    /* One character per binding, in binding order starting at 0:
       'u' uniform (the op's parameters), 'r' read-only storage, 'w' read-write storage. */
    const char *layout;
    uint32_t nconst;
    struct { const char *name; double value; } constants[WGML__MAX_CONSTANTS];
    /* the entry point is in <file>_subgroups.wgsl, compiled as one module with <file>.wgsl
       after `enable subgroups;` (only where the device has the subgroups feature) */
    bool subgroups;
    /* the file uses the adapter's f16 subgroup matrices: compiled after `enable f16;
       enable subgroups; enable chromium_experimental_subgroup_matrix;` and the constants
       SM, SN, SK (wgml_adapter_info.matrix_m/n/k; only where the device has them) */
    bool matrix;
} wgml__kernel;

/* Appends a pipeline-overridable constant to k (at most WGML__MAX_CONSTANTS in all). */
static inline void wgml__add_constant(wgml__kernel *k, const char *name, double value)
{
    assert(k->nconst < WGML__MAX_CONSTANTS);
    k->constants[k->nconst].name = name;
    k->constants[k->nconst++].value = value;
}

/* A storage binding: a tensor's whole buffer, and the tensor (its write record is
   metadata the library keeps even for tensors the caller passed as const). */
typedef struct wgml__arg {
    WGPUBuffer buffer;
    uint64_t size;
    wgml_tensor *tensor;
} wgml__arg;

static inline wgml__arg wgml__t(const wgml_tensor *t) { return (wgml__arg){ t->buffer, t->capacity, (wgml_tensor *)t }; }

typedef struct wgml__pipeline wgml__pipeline;

/* Scratch buffers owned by an engine, one per slot (see wgml__scratch). */
/* TRAIN: loss.c, grad.c; NORM: norm.c, softmax.c; ATTN: attention.c; MATMUL: matmul.c's split-K;
   MATMUL_T: matmul.c's transposed copy of matmul_bt's b (M >= 1024 on GPUs); ATTN_DS:
   attention.c's dS blocks of the backward (up to 1 GiB); SAMPLE_*: sample_gpu.c's row
   settings, adjusted logits and candidates; MMA_*: matmul_mma.c's f16 copies of the operands
   (high and low parts) and their rows' and columns' scales.
   A buffer made per call costs far more than the op on some drivers (H200: a decode step
   spent most of its time creating them), so ops keep their temporaries here. */
/* FUSE_SPARE .. + 2: distinct buffers bound to the fused element-wise kernel's unused slots
   (one buffer may not be bound twice read-write); the kernel has WGML__FUSE_SLOTS. */
#define WGML__FUSE_SLOTS 4
/* ATTN_UNUSED: 16 bytes bound where an attention kernel declares a writable binding that
   the call does not use (the prefill entries' scores output without options.scores).
   Attention's backward at F16 keeps its f16 copies of q, dout, k, v in MMA_AL, MMA_BL,
   MMA_AH, MMA_BH. */
enum { WGML__SCRATCH_SELECT = 0, WGML__SCRATCH_TRAIN, WGML__SCRATCH_NORM, WGML__SCRATCH_ATTN, WGML__SCRATCH_MATMUL,
       WGML__SCRATCH_MATMUL_T, WGML__SCRATCH_ATTN_DS, WGML__SCRATCH_MATMUL_A, WGML__SCRATCH_ATTN_UNUSED,
       WGML__SCRATCH_SAMPLE_META, WGML__SCRATCH_SAMPLE_Z, WGML__SCRATCH_SAMPLE_OUT,
       WGML__SCRATCH_MMA_AH, WGML__SCRATCH_MMA_BH, WGML__SCRATCH_MMA_AL, WGML__SCRATCH_MMA_BL, WGML__SCRATCH_MMA_SCALES,
       WGML__SCRATCH_FUSE_SPARE, WGML__SCRATCH_SLOTS = WGML__SCRATCH_FUSE_SPARE + WGML__FUSE_SLOTS - 1 };

/* What a scratch slot holds when an op may reuse it: a copy of tensor `src` (its id), made
   when src was last written at `written`, in the slot's tensor `slot_id`; with `transposed`
   the copy is [cols, rows] of an src [rows, cols], else src [cols, rows] with padded rows.
   Valid while all three still match. The f16 copies of the matrix units
   (src/ops/matmul_mma.c) also keep the slot's own write count after the copy (valid while
   no other op wrote the slot) and the copy's layout in `form`. */
typedef struct wgml__derived {
    uint64_t src, written, slot_id;
    uint32_t rows, cols;
    bool transposed;
    uint64_t slot_written;
    uint32_t form[6];
} wgml__derived;

struct wgml_engine {
    wgml_context *ctx;
    wgml__pipeline *pipelines;   /* cache, searched linearly (tens of entries) */
    uint32_t npipelines, cap_pipelines;
    WGPUShaderModule *modules;   /* one per WGSL file, compiled on first use; then one per file
                                    with its subgroups part (wgml__kernel.subgroups) */
    wgml_tensor *scratch[WGML__SCRATCH_SLOTS];
    wgml__derived derived[WGML__SCRATCH_SLOTS];
    wgml__tuning tuning;         /* all 0 (the rules decide) unless a test sets a field */
};

/* Embedded WGSL sources (generated at build time from the .wgsl files in src/kernels). */
typedef struct wgml__wgsl_source { const char *name; const char *code; size_t size; } wgml__wgsl_source;
extern const wgml__wgsl_source wgml__wgsl_sources[];
extern const size_t wgml__wgsl_count;

/* Records one dispatch of kernel k over groups[0] x groups[1] x groups[2] workgroups.
   params (params_size bytes, may be 0) becomes the 'u' binding; args fill the storage
   bindings in order. Nothing is recorded when it fails. */
wgml_status wgml__dispatch(wgml_engine *e, const wgml__kernel *k, const void *params,
                           uint32_t params_size, const wgml__arg *args, uint32_t nargs,
                           uint32_t gx, uint32_t gy, uint32_t gz);

/* Splits a 1-D workgroup count into x, y within maxComputeWorkgroupsPerDimension; kernels
   recover the linear index as wid.x + wid.y * num_workgroups.x and skip past the end. */
wgml_status wgml__grid(wgml_context *ctx, uint64_t workgroups, uint32_t *gx, uint32_t *gy);

/* Whether wgml_attention_options.scores can be used for attention with this head_dim and
   seq_q (> 1) on this engine: the 64 x 64 forward and backward kernels are the ones chosen
   (src/ops/attention.c). */
bool wgml__attention_keeps_scores(wgml_engine *e, uint32_t head_dim, uint32_t seq_q);

/* K-slices the split-K model of src/ops/matmul.c gives an M x N x K product on its default
   large tile (for test_internal). */
uint32_t wgml__matmul_model_slices(const wgml_context *ctx, uint32_t M, uint32_t N, uint32_t K);
/* The last round's tiles split along K on that tile (0: none), and their slices. */
uint32_t wgml__matmul_model_tail(const wgml_context *ctx, uint32_t M, uint32_t N, uint32_t K, uint32_t *slices);

/* Scratch memory of an engine for ops that need device memory of their own between their
   dispatches (src/engine.c): slot's buffer of at least bytes bytes. It is zero when first
   created, kept across calls (so an op may rely on what it left there, e.g. counters it
   returns to zero), replaced by a new zeroed buffer when a call needs more, and freed with
   the engine; not counted in live_tensors. An op that relies on its contents between calls
   calls wgml__scratch_discard when recording fails midway. */
wgml_status wgml__scratch(wgml_engine *e, uint32_t slot, uint64_t bytes, wgml__arg *out);
void wgml__scratch_discard(wgml_engine *e, uint32_t slot);

/* Compiles (or finds) the pipeline of k; used by dispatch and warmup. */
wgml_status wgml__pipeline_get(wgml_engine *e, const wgml__kernel *k, WGPUComputePipeline *out,
                               WGPUBindGroupLayout *layout);

/* ---- validation helpers (src/validate.c): each returns WGML_OK or records a message
        naming the argument of function fn. ------------------------------------------- */

wgml_status wgml__check_engine(wgml_engine *e, const char *fn);
/* t is non-NULL, of e's context, of dtype (or any dtype if dtype < 0). */
wgml_status wgml__check_tensor(wgml_engine *e, const char *fn, const char *name,
                               const wgml_tensor *t, int dtype);
/* a and b have the same element count. */
wgml_status wgml__check_same_numel(wgml_engine *e, const char *fn, const char *name_a,
                                   const wgml_tensor *a, const char *name_b,
                                   const wgml_tensor *b);
/* out shares no memory with in. */
wgml_status wgml__check_no_alias(wgml_engine *e, const char *fn, const char *out_name,
                                 const wgml_tensor *out, const char *in_name,
                                 const wgml_tensor *in);
/* numel fits the 32-bit indexing of the kernels */
wgml_status wgml__check_u32_numel(wgml_engine *e, const char *fn, const char *name,
                                  const wgml_tensor *t);

static inline bool wgml__same(const wgml_tensor *a, const wgml_tensor *b) { return a->buffer == b->buffer; }

/* The 32-bit integer finaliser the dropout kernels hash with (attention's and
   wgml_dropout's): the host derives their seed keys with it. */
static inline uint32_t wgml__mix32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}
static inline uint32_t wgml__ceil_div(uint64_t a, uint64_t b) { return (uint32_t)((a + b - 1) / b); }
static inline uint32_t wgml__pow2_at_least(uint32_t n)
{
    uint32_t p = 1;
    while (p < n) p <<= 1;
    return p;
}

/* The address-space limit of the process (RLIMIT_AS; 0 when unlimited), read when a
   context is created, and the check that an allocation of bytes of host address space
   leaves room under it (src/host_memory.c). GPU buffers count on CPU adapters, whose
   device memory is the host's; uploads and read-backs count everywhere (their staging is
   host memory). Errors: WGML_ERROR_OUT_OF_MEMORY. */
uint64_t wgml__address_limit(void);
wgml_status wgml__host_room(wgml_context *ctx, const char *fn, uint64_t bytes);
/* Before a device is created: room under the limit (0: none) for the device itself. */
wgml_status wgml__device_room(uint64_t limit);

/* Host monotonic clock in seconds (src/timer.c). */
double wgml__now(void);

/* ---- models (src/model.c) ------------------------------------------------------------ */

/* wgml_model_create with the parameters zeroed (zero) or left unwritten, recording nothing
   (for wgml_model_load, which checks the whole file before it writes every parameter). */
/* What wgml__model_create does with the parameters: zeroes them, leaves them undefined, or
   leaves the matrices (2-D parameters) NULL for a loader to set (wgml__model_set_param). */
typedef enum wgml__params_mode { WGML__PARAMS_ZERO, WGML__PARAMS_UNDEFINED, WGML__PARAMS_NO_MATRICES } wgml__params_mode;
wgml_status wgml__model_create(wgml_engine *e, const wgml_model_config *cfg, wgml__params_mode mode, wgml_model **out);
/* Parameter i (a matrix [rows, cols], named name) from host f32 values: f32, or for
   WGML_WEIGHTS_Q8 / Q4 quantised (src/model_weights.c). */
wgml_status wgml__model_put_f32(wgml_model *m, size_t i, const char *name, const float *w, uint32_t rows, uint32_t cols,
                                wgml_weights weights);
/* Parameter i from a file's packed bytes: d's dtype (f16, bf16 or packed) with its parts:
   the data (codes), then for WGML_AFFINE the scales and biases (sizes in bytes). */
wgml_status wgml__model_put_packed(wgml_model *m, size_t i, const wgml_packed_desc *d, const void *const parts[3],
                                   const size_t sizes[3]);
/* Puts t in parameter i's place (releasing what was there); the model owns t. */
void wgml__model_set_param(wgml_model *m, size_t i, wgml_tensor *t);
/* WGML_ERROR_UNSUPPORTED naming fn and the first packed weight, when the model has one:
   what (why) needs f32 weights. */
wgml_status wgml__model_refuse_packed(const wgml_model *m, const char *fn, const char *why);

/* What wgml_model_create checks of a configuration, alone; and the parameters of a
   model of configuration c (one these checks accepted),
   without creating it: their number, and parameter i's name and shape (shape[1] is 0 for
   a vector), in wgml_model_param's order. wgml_model_load checks a file against them
   before it allocates anything. */
wgml_status wgml__model_check_config(wgml_context *ctx, const char *fn, const wgml_model_config *c);
#define WGML__PARAM_NAME_MAX 96
size_t wgml__model_param_total(const wgml_model_config *c);
void wgml__model_param_spec(const wgml_model_config *c, size_t i, char name[WGML__PARAM_NAME_MAX], uint32_t *ndim,
                            uint64_t shape[2]);

/* ---- LoRA adapters (src/lora.c; run by src/model.c) ---------------------------------- */

/* The projections an adapter may target, in wgml_lora_target bit order: q, k, v, o, gate,
   up, down. */
#define WGML__LORA_KINDS 8
struct wgml_lora {
    wgml_model *m;                /* attached to it while m's adapter is this one */
    wgml_lora_desc d;             /* defaults filled in */
    float scale;                  /* alpha / rank, or alpha / sqrt(rank) */
    uint32_t layers;
    wgml_tensor **a, **b;         /* [layers * WGML__LORA_KINDS]: A [rank, in], B [out, rank]; NULL where not targeted */
    size_t nparams;
    wgml_tensor **params;         /* A then B of each target, layer after layer */
    char **names;                 /* PEFT's keys */
};
/* The base weight a target of the adapter sits on. */
/* The parameter index of LoRA target k (wgml_lora_target's bit index) of layer l, or
   SIZE_MAX where the layer has no such projection (src/model.c). */
size_t wgml__model_lora_weight(const wgml_model *m, uint32_t l, int k);
wgml_tensor *wgml__lora_base_weight(const wgml_lora *l, uint32_t layer, int kind);
/* The model's adapter (NULL: none), attaching (or, with NULL, detaching) one, and the
   engine the model runs on (src/model.c). */
wgml_lora *wgml__model_lora(const wgml_model *m);
void wgml__model_set_lora(wgml_model *m, wgml_lora *l);
wgml_engine *wgml__model_engine(const wgml_model *m);
void wgml__model_set_file_dtype(wgml_model *m, wgml_dtype d);
/* RoPE frequencies divided by per-pair factors (head_dim / 2 positive values), as GGUF's
   rope_freqs.weight gives them. */
wgml_status wgml__model_set_rope_factors(wgml_model *m, const float *factors);
/* wgml_model_load of a .gguf file (src/model_gguf.c). */
wgml_status wgml__model_load_gguf(wgml_engine *e, const char *path, wgml_weights weights, wgml_model **out);

/* Shared spelling of the entry check of every op: engine valid, no pending device error. */
#define WGML_CHECK(expr)                  \
    do {                                  \
        wgml_status wgml__s_ = (expr);    \
        if (wgml__s_ != WGML_OK)          \
            return wgml__s_;              \
    } while (0)

#endif
