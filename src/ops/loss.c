/* Losses: MSE and its gradient; cross-entropy of one vector or of [N, V] rows with
   ignore_index, fused forward and backward. Kernels: src/kernels/loss.wgsl. */
#include "internal.h"

#include <string.h>

#define WG 256
/* Elements of a row one workgroup reduces in ce_stats and writes in ce_grad. Rows longer
   than this are split over several workgroups, so a few long rows still fill the GPU.
   A tuning knob: larger chunks mean fewer (row, chunk) pairs to combine. */
#define CE_CHUNK 8192u
#define NO_TARGET 0xFFFFFFFFu   /* the ignore_index of the single-vector ops: never a valid target */

enum { OP_MSE = 0, OP_MSE_BACKWARD = 1 };
#define PAIR_EU 4   /* vec4 per thread in the MSE kernels: PAIR_EU in the kernel */

typedef struct pair_params { uint32_t n4, pad[3]; } pair_params;

/* out = f(pred, target) element-wise, with the entry point that fits how out aliases. */
static wgml_status pair_op(wgml_engine *e, const char *fn, int op, const wgml_tensor *pred, const wgml_tensor *target,
                           wgml_tensor *out, const char *out_name)
{
    WGML_CHECK(wgml__check_engine(e, fn));
    WGML_CHECK(wgml__check_tensor(e, fn, "pred", pred, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "target", target, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, out_name, out, WGML_F32));
    WGML_CHECK(wgml__check_same_numel(e, fn, "pred", pred, "target", target));
    WGML_CHECK(wgml__check_same_numel(e, fn, "pred", pred, out_name, out));
    WGML_CHECK(wgml__check_u32_numel(e, fn, "pred", pred));

    uint64_t n4 = (wgml_tensor_numel(pred) + 3) / 4;
    pair_params p = { .n4 = (uint32_t)n4 };
    uint32_t gx, gy;
    WGML_CHECK(wgml__grid(e->ctx, (n4 + WG * PAIR_EU - 1) / (WG * PAIR_EU), &gx, &gy));
    bool op_ = wgml__same(out, pred), ot = wgml__same(out, target);
    wgml__kernel k = { .file = "loss", .nconst = 3, .constants = { { "WG", WG }, { "OP", op }, { "SWAP", 0 } } };
    wgml__arg args[3];
    uint32_t nargs;
    if (op_ && ot) {
        k.entry = "pair_self";
        k.layout = "uw";
        args[0] = wgml__t(out);
        nargs = 1;
    } else if (op_ || ot) {
        k.entry = "pair_inplace";
        k.layout = "uwr";
        k.constants[2].value = ot;
        args[0] = wgml__t(out);
        args[1] = wgml__t(op_ ? target : pred);
        nargs = 2;
    } else {
        k.entry = "pair";
        k.layout = "urrw";
        args[0] = wgml__t(pred);
        args[1] = wgml__t(target);
        args[2] = wgml__t(out);
        nargs = 3;
    }
    return wgml__dispatch(e, &k, &p, sizeof p, args, nargs, gx, gy, 1);
}

wgml_status wgml_mse_loss(wgml_engine *e, const wgml_tensor *pred, const wgml_tensor *target, wgml_tensor *out)
{
    return pair_op(e, "wgml_mse_loss", OP_MSE, pred, target, out, "out");
}

wgml_status wgml_mse_loss_backward(wgml_engine *e, const wgml_tensor *pred, const wgml_tensor *target, wgml_tensor *grad_in)
{
    return pair_op(e, "wgml_mse_loss_backward", OP_MSE_BACKWARD, pred, target, grad_in, "grad_in");
}

/* ---- cross-entropy ------------------------------------------------------------------ */

typedef struct ce_params {
    uint32_t n, v, chunks, chunk;
    uint32_t ignore, nan_bits, off_xt, off_loss;
    uint32_t off_part, pad[3];
} ce_params;

/* What one cross-entropy call computes, validated. targets is a buffer of n u32. */
typedef struct ce_job {
    const wgml_tensor *logits;
    wgml__arg targets;
    uint32_t n, v, ignore;
    wgml_tensor *losses, *mean_loss, *grad;
} ce_job;

static wgml__kernel ce_kernel(const char *entry, const char *layout)
{
    return (wgml__kernel){ .file = "loss", .entry = entry, .layout = layout, .nconst = 1, .constants = { { "WG", WG } } };
}

/* Records ce_stats, ce_rows, then ce_mean and ce_grad as asked (see loss.wgsl). */
static wgml_status ce_record(wgml_engine *e, const ce_job *j)
{
    wgml_context *ctx = e->ctx;
    bool vec4 = j->v % 4 == 0;
    uint32_t chunk = j->v < CE_CHUNK ? j->v : CE_CHUNK;
    uint32_t chunks = (uint32_t)(((uint64_t)j->v + chunk - 1) / chunk);
    uint64_t n = j->n, pairs = n * chunks;
    ce_params p = { .n = j->n, .v = j->v, .chunks = chunks, .chunk = chunk, .ignore = j->ignore, .nan_bits = 0x7FC00000u };
    uint64_t off_xt = 4 + 2 * n, off_loss = off_xt + n, off_part = off_loss + n, words = off_part + 2 * pairs;
    if (words > 0xFFFFFFFFull)
        return wgml__fail(ctx, WGML_ERROR_LIMIT, "cross-entropy over %u rows needs %llu scratch words", j->n,
                          (unsigned long long)words);
    p.off_xt = (uint32_t)off_xt;
    p.off_loss = (uint32_t)off_loss;
    p.off_part = (uint32_t)off_part;
    uint32_t sx, sy, rx, ry;
    WGML_CHECK(wgml__grid(ctx, pairs + 1, &sx, &sy));
    WGML_CHECK(wgml__grid(ctx, (n + WG - 1) / WG, &rx, &ry));
    wgml__arg scratch;
    WGML_CHECK(wgml__scratch(e, WGML__SCRATCH_TRAIN, words * 4, &scratch));

    wgml__arg logits = wgml__t(j->logits);
    wgml__kernel k = ce_kernel(vec4 ? "ce_stats4" : "ce_stats1", "urwr");
    WGML_CHECK(wgml__dispatch(e, &k, &p, sizeof p, (wgml__arg[]){ j->targets, scratch, logits }, 3, sx, sy, 1));
    if (j->losses) {
        k = ce_kernel("ce_rows_out", "urww");
        WGML_CHECK(wgml__dispatch(e, &k, &p, sizeof p, (wgml__arg[]){ j->targets, scratch, wgml__t(j->losses) }, 3, rx, ry, 1));
    } else {
        k = ce_kernel("ce_rows", "urw");
        WGML_CHECK(wgml__dispatch(e, &k, &p, sizeof p, (wgml__arg[]){ j->targets, scratch }, 2, rx, ry, 1));
    }
    if (j->mean_loss) {
        k = ce_kernel("ce_mean", "urrw");
        WGML_CHECK(wgml__dispatch(e, &k, &p, sizeof p, (wgml__arg[]){ j->targets, scratch, wgml__t(j->mean_loss) }, 3, 1, 1, 1));
    }
    if (j->grad) {
        if (wgml__same(j->grad, j->logits)) {
            k = ce_kernel(vec4 ? "ce_grad_io4" : "ce_grad_io1", "urrw");
            WGML_CHECK(wgml__dispatch(e, &k, &p, sizeof p, (wgml__arg[]){ j->targets, scratch, logits }, 3, sx, sy, 1));
        } else {
            k = ce_kernel(vec4 ? "ce_grad4" : "ce_grad1", "urrrw");
            WGML_CHECK(wgml__dispatch(e, &k, &p, sizeof p, (wgml__arg[]){ j->targets, scratch, logits, wgml__t(j->grad) }, 4,
                                      sx, sy, 1));
        }
    }
    return WGML_OK;
}

/* The single-vector ops: logits is one vector of V = numel elements and target a host
   value, uploaded in a small buffer of its own (mapped at creation: nothing waits). */
static wgml_status ce_single(wgml_engine *e, const wgml_tensor *logits, uint32_t target, wgml_tensor *loss_out,
                             wgml_tensor *grad_out)
{
    wgml_context *ctx = e->ctx;
    WGPUBuffer tb = wgpuDeviceCreateBuffer(ctx->device, &(WGPUBufferDescriptor){
        .label = { "wgml cross-entropy target", WGPU_STRLEN }, .usage = WGPUBufferUsage_Storage, .size = 16,
        .mappedAtCreation = 1 });
    uint32_t *mapped = tb ? wgpuBufferGetMappedRange(tb, 0, 16) : NULL;
    if (!mapped) {
        if (tb) wgpuBufferRelease(tb);
        return wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "could not create the target buffer of the cross-entropy");
    }
    uint32_t words[4] = { target, 0, 0, 0 };
    memcpy(mapped, words, sizeof words);
    wgpuBufferUnmap(tb);
    ce_job j = { .logits = logits, .targets = { tb, 16 }, .n = 1, .v = (uint32_t)wgml_tensor_numel(logits),
                 .ignore = NO_TARGET, .losses = loss_out, .grad = grad_out };
    wgml_status s = ce_record(e, &j);
    wgml__bind_cache_forget_buffer(ctx, tb);
    wgpuBufferRelease(tb);   /* recorded work keeps it alive */
    return s;
}

static wgml_status check_target(wgml_engine *e, const char *fn, const wgml_tensor *logits, uint32_t target)
{
    size_t v = wgml_tensor_numel(logits);
    if (target >= v)
        return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: target is %u; it must be < %zu, the length of logits", fn,
                          target, v);
    return WGML_OK;
}

wgml_status wgml_cross_entropy_loss(wgml_engine *e, const wgml_tensor *logits, uint32_t target, wgml_tensor *loss_out)
{
    const char *fn = "wgml_cross_entropy_loss";
    WGML_CHECK(wgml__check_engine(e, fn));
    WGML_CHECK(wgml__check_tensor(e, fn, "logits", logits, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "loss_out", loss_out, WGML_F32));
    WGML_CHECK(wgml__check_u32_numel(e, fn, "logits", logits));
    WGML_CHECK(wgml__check_no_alias(e, fn, "loss_out", loss_out, "logits", logits));
    WGML_CHECK(check_target(e, fn, logits, target));
    return ce_single(e, logits, target, loss_out, NULL);
}

wgml_status wgml_cross_entropy_backward(wgml_engine *e, const wgml_tensor *logits, uint32_t target, wgml_tensor *grad_out)
{
    const char *fn = "wgml_cross_entropy_backward";
    WGML_CHECK(wgml__check_engine(e, fn));
    WGML_CHECK(wgml__check_tensor(e, fn, "logits", logits, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "grad_out", grad_out, WGML_F32));
    WGML_CHECK(wgml__check_same_numel(e, fn, "logits", logits, "grad_out", grad_out));
    WGML_CHECK(wgml__check_u32_numel(e, fn, "logits", logits));
    WGML_CHECK(check_target(e, fn, logits, target));
    return ce_single(e, logits, target, NULL, grad_out);
}

wgml_status wgml_cross_entropy_batched(wgml_engine *e, const wgml_tensor *logits, const wgml_tensor *targets,
                                       uint32_t ignore_index, wgml_tensor *losses, wgml_tensor *mean_loss,
                                       wgml_tensor *grad_logits)
{
    const char *fn = "wgml_cross_entropy_batched";
    WGML_CHECK(wgml__check_engine(e, fn));
    WGML_CHECK(wgml__check_tensor(e, fn, "logits", logits, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "targets", targets, WGML_U32));
    if (!losses && !mean_loss && !grad_logits)
        return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: losses, mean_loss and grad_logits are all NULL", fn);
    if (losses) WGML_CHECK(wgml__check_tensor(e, fn, "losses", losses, WGML_F32));
    if (mean_loss) WGML_CHECK(wgml__check_tensor(e, fn, "mean_loss", mean_loss, WGML_F32));
    if (grad_logits) WGML_CHECK(wgml__check_tensor(e, fn, "grad_logits", grad_logits, WGML_F32));
    WGML_CHECK(wgml__check_u32_numel(e, fn, "logits", logits));
    size_t v = wgml_tensor_dim(logits, wgml_tensor_ndim(logits) - 1), n = wgml_tensor_numel(logits) / v;
    if (wgml_tensor_numel(targets) != n)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: targets has %zu elements; logits has %zu rows of %zu", fn,
                          wgml_tensor_numel(targets), n, v);
    if (losses && wgml_tensor_numel(losses) != n)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: losses has %zu elements; logits has %zu rows", fn,
                          wgml_tensor_numel(losses), n);
    if (grad_logits) WGML_CHECK(wgml__check_same_numel(e, fn, "logits", logits, "grad_logits", grad_logits));
    WGML_CHECK(wgml__check_no_alias(e, fn, "losses", losses, "logits", logits));
    WGML_CHECK(wgml__check_no_alias(e, fn, "losses", losses, "grad_logits", grad_logits));
    WGML_CHECK(wgml__check_no_alias(e, fn, "mean_loss", mean_loss, "logits", logits));
    WGML_CHECK(wgml__check_no_alias(e, fn, "mean_loss", mean_loss, "grad_logits", grad_logits));
    WGML_CHECK(wgml__check_no_alias(e, fn, "mean_loss", mean_loss, "losses", losses));
    ce_job j = { .logits = logits, .targets = wgml__t(targets), .n = (uint32_t)n, .v = (uint32_t)v, .ignore = ignore_index,
                 .losses = losses, .mean_loss = mean_loss, .grad = grad_logits };
    return ce_record(e, &j);
}

const wgml__kernel wgml__loss_kernels[] = {
    { .file = "loss", .entry = "pair", .layout = "urrw", .nconst = 3, .constants = { { "WG", WG }, { "OP", OP_MSE }, { "SWAP", 0 } } },
    { .file = "loss", .entry = "pair", .layout = "urrw", .nconst = 3,
      .constants = { { "WG", WG }, { "OP", OP_MSE_BACKWARD }, { "SWAP", 0 } } },
    { .file = "loss", .entry = "ce_stats4", .layout = "urwr", .nconst = 1, .constants = { { "WG", WG } } },
    { .file = "loss", .entry = "ce_stats1", .layout = "urwr", .nconst = 1, .constants = { { "WG", WG } } },
    { .file = "loss", .entry = "ce_rows", .layout = "urw", .nconst = 1, .constants = { { "WG", WG } } },
    { .file = "loss", .entry = "ce_rows_out", .layout = "urww", .nconst = 1, .constants = { { "WG", WG } } },
    { .file = "loss", .entry = "ce_mean", .layout = "urrw", .nconst = 1, .constants = { { "WG", WG } } },
    { .file = "loss", .entry = "ce_grad4", .layout = "urrrw", .nconst = 1, .constants = { { "WG", WG } } },
    { .file = "loss", .entry = "ce_grad_io4", .layout = "urrw", .nconst = 1, .constants = { { "WG", WG } } },
};
const size_t wgml__loss_kernel_count = sizeof wgml__loss_kernels / sizeof wgml__loss_kernels[0];
