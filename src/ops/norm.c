/* RMSNorm over the last dimension: forward, residual-fused forward and backward.
   Kernels: src/kernels/norm.wgsl (its top comment explains the layout and the paths). */
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define WG 256u
#define NVMAX 8u       /* units per thread held in registers (norm.wgsl NVMAX) */
#define PMAX 1024u     /* bwd with grad_weight: at most this many workgroups, each writing one
                          partial row of the weight gradient */
#define DEFAULT_EPS 1e-5f

typedef struct norm_params {
    uint32_t rows, d, units, tpr, segs, groups, grows;
    float eps, woff;   /* woff: added to each weight as read ((1 + w) norms) */
    uint32_t pad[3];
} norm_params;
_Static_assert(sizeof(norm_params) == 48, "norm_params must match struct Params of norm.wgsl");

/* How rows of length d map onto threads (see norm.wgsl). */
typedef struct row_plan {
    bool vec;           /* d % 4 == 0: a unit is an aligned vec4 */
    uint32_t units;     /* units per row */
    uint32_t tpr;       /* threads per row, a power of two <= WG */
    uint32_t nv;        /* units per thread in registers; 0: long-row loop */
    uint32_t segs;      /* rows per workgroup */
} row_plan;


/* Units per thread the forward pass aims at: for rows of 4096 f32 that is 128 threads per
   row, two rows per workgroup, so each thread has 8 independent 16-byte loads in flight
   and each row reduction is paid over twice the bytes of a 4-unit plan
   (bench/notes/norm.md). */
#define FORWARD_UPT 8u

/* Rows of up to NVMAX * WG units are cached in registers, spread so that each thread holds
   about `upt` units (4 or 8; a whole workgroup when the row has more than upt * WG / 2
   units); longer rows loop. upt 4 keeps nv <= 4 whenever segs > 1 (bwd_dw relies on it). */
static row_plan plan_rows(size_t d, uint32_t upt)
{
    row_plan pl;
    pl.vec = d % 4 == 0;
    pl.units = (uint32_t)(pl.vec ? d / 4 : d);
    if (pl.units <= NVMAX * WG) {
        pl.tpr = wgml__pow2_at_least((pl.units + upt - 1) / upt);
        if (pl.tpr > WG) pl.tpr = WG;
        pl.nv = (pl.units + pl.tpr - 1) / pl.tpr;
    } else {
        pl.tpr = WG;
        pl.nv = 0;
    }
    pl.segs = WG / pl.tpr;
    return pl;
}

static wgml__kernel norm_kernel(const char *entry, const char *layout, const row_plan *pl, bool has_res, bool self)
{
    return (wgml__kernel){ .file = "norm", .entry = entry, .layout = layout, .nconst = 5,
                           .constants = { { "WG", WG }, { "NV", pl->nv }, { "VEC", pl->vec }, { "HAS_RES", has_res },
                                          { "SELF", self } } };
}

/* ---- validation ------------------------------------------------------------------------ */

static wgml_status check_eps(wgml_engine *e, const char *fn, float eps)
{
    if (!(eps >= 0.0f) || isinf(eps))
        return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: eps (%g) must be finite and >= 0", fn, (double)eps);
    return WGML_OK;
}

/* weight has as many elements as the last dimension of t. */
static wgml_status check_weight(wgml_engine *e, const char *fn, const char *t_name, const wgml_tensor *t,
                                const char *w_name, const wgml_tensor *w)
{
    size_t d = t->shape[t->ndim - 1];
    if (wgml_tensor_numel(w) != d)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: %s has %zu elements; it must have %zu, the last dimension of %s", fn,
                          w_name, wgml_tensor_numel(w), d, t_name);
    return WGML_OK;
}

/* ---- forward --------------------------------------------------------------------------- */

/* Records the forward pass once everything is validated. res may be NULL (plain RMSNorm);
   sum may be NULL, distinct from x and res, or the same tensor as x or res. */
static wgml_status record_forward(wgml_engine *e, uint32_t upt, const wgml_tensor *x, const wgml_tensor *res,
                                  const wgml_tensor *weight, wgml_tensor *out, wgml_tensor *sum, float eps, float woff)
{
    size_t d = x->shape[x->ndim - 1];
    uint32_t rows = (uint32_t)(wgml_tensor_numel(x) / d);
    row_plan pl = plan_rows(d, upt);
    uint64_t groups = ((uint64_t)rows + pl.segs - 1) / pl.segs;
    norm_params p = { .rows = rows, .d = (uint32_t)d, .units = pl.units, .tpr = pl.tpr, .segs = pl.segs,
                      .groups = (uint32_t)groups, .grows = 1, .eps = eps, .woff = woff };
    uint32_t gx, gy;
    WGML_CHECK(wgml__grid(e->ctx, groups, &gx, &gy));

    wgml__kernel k;
    wgml__arg args[5];
    uint32_t nargs;
    if (!sum) {
        k = norm_kernel("fwd", "urrrw", &pl, res != NULL, false);
        args[0] = wgml__t(x);
        args[1] = wgml__t(res ? res : x);   /* unread without a residual */
        args[2] = wgml__t(weight);
        args[3] = wgml__t(out);
        nargs = 4;
    } else if (!wgml__same(sum, x) && !wgml__same(sum, res)) {
        k = norm_kernel("fwd_sum", "urrrww", &pl, true, false);
        args[0] = wgml__t(x);
        args[1] = wgml__t(res);
        args[2] = wgml__t(weight);
        args[3] = wgml__t(out);
        args[4] = wgml__t(sum);
        nargs = 5;
    } else {
        /* sum is x or residual: that buffer is bound once, read-write, and receives the sum. */
        bool self = wgml__same(x, res);
        const wgml_tensor *other = wgml__same(sum, x) ? res : x;
        k = norm_kernel("fwd_sum_inplace", "uwrrw", &pl, true, self);
        args[0] = wgml__t(sum);
        args[1] = wgml__t(self ? weight : other);   /* unread when x, residual and sum are one */
        args[2] = wgml__t(weight);
        args[3] = wgml__t(out);
        nargs = 4;
    }
    return wgml__dispatch(e, &k, &p, sizeof p, args, nargs, gx, gy, 1);
}

/* in_name: what the caller's documentation calls input ("input", or "x") */
static wgml_status rms_norm_plain(wgml_engine *e, const char *fn, const char *in_name, const wgml_tensor *input,
                                  const wgml_tensor *weight, wgml_tensor *out, float eps, float woff)
{
    WGML_CHECK(wgml__check_engine(e, fn));
    WGML_CHECK(wgml__check_tensor(e, fn, in_name, input, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "weight", weight, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "out", out, WGML_F32));
    WGML_CHECK(wgml__check_u32_numel(e, fn, in_name, input));
    WGML_CHECK(check_weight(e, fn, in_name, input, "weight", weight));
    WGML_CHECK(wgml__check_same_numel(e, fn, in_name, input, "out", out));
    WGML_CHECK(wgml__check_no_alias(e, fn, "out", out, in_name, input));
    WGML_CHECK(wgml__check_no_alias(e, fn, "out", out, "weight", weight));
    WGML_CHECK(check_eps(e, fn, eps));
    if (!isfinite(woff))
        return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: weight_offset (%g) must be finite", fn, (double)woff);
    return record_forward(e, FORWARD_UPT, input, NULL, weight, out, NULL, eps, woff);
}

wgml_status wgml_rms_norm(wgml_engine *e, const wgml_tensor *input, const wgml_tensor *weight, wgml_tensor *out)
{
    return rms_norm_plain(e, "wgml_rms_norm", "input", input, weight, out, DEFAULT_EPS, 0);
}

wgml_status wgml_rms_norm_eps(wgml_engine *e, const wgml_tensor *input, const wgml_tensor *weight, wgml_tensor *out,
                              float eps)
{
    return rms_norm_plain(e, "wgml_rms_norm_eps", "input", input, weight, out, eps, 0);
}

/* residual may be NULL (then sum_out is NULL too): a plain RMSNorm of x. */
static wgml_status rms_norm_residual(wgml_engine *e, const char *fn, const wgml_tensor *x, const wgml_tensor *residual,
                                     const wgml_tensor *weight, wgml_tensor *out, wgml_tensor *sum_out, float eps, float woff)
{
    WGML_CHECK(wgml__check_engine(e, fn));
    WGML_CHECK(wgml__check_tensor(e, fn, "x", x, WGML_F32));
    if (!residual) {
        if (sum_out)
            return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: sum_out is given without a residual", fn);
        return rms_norm_plain(e, fn, "x", x, weight, out, eps, woff);
    }
    WGML_CHECK(wgml__check_tensor(e, fn, "residual", residual, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "weight", weight, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "out", out, WGML_F32));
    if (sum_out) WGML_CHECK(wgml__check_tensor(e, fn, "sum_out", sum_out, WGML_F32));
    WGML_CHECK(wgml__check_u32_numel(e, fn, "x", x));
    WGML_CHECK(wgml__check_same_numel(e, fn, "x", x, "residual", residual));
    WGML_CHECK(check_weight(e, fn, "x", x, "weight", weight));
    WGML_CHECK(wgml__check_same_numel(e, fn, "x", x, "out", out));
    if (sum_out) WGML_CHECK(wgml__check_same_numel(e, fn, "x", x, "sum_out", sum_out));
    WGML_CHECK(wgml__check_no_alias(e, fn, "out", out, "x", x));
    WGML_CHECK(wgml__check_no_alias(e, fn, "out", out, "residual", residual));
    WGML_CHECK(wgml__check_no_alias(e, fn, "out", out, "weight", weight));
    WGML_CHECK(wgml__check_no_alias(e, fn, "out", out, "sum_out", sum_out));
    WGML_CHECK(wgml__check_no_alias(e, fn, "sum_out", sum_out, "weight", weight));
    WGML_CHECK(check_eps(e, fn, eps));
    if (!isfinite(woff))
        return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: weight_offset (%g) must be finite", fn, (double)woff);
    return record_forward(e, FORWARD_UPT, x, residual, weight, out, sum_out, eps, woff);
}

wgml_status wgml_rms_norm_residual(wgml_engine *e, const wgml_tensor *x, const wgml_tensor *residual,
                                   const wgml_tensor *weight, wgml_tensor *out)
{
    if (!residual) return wgml__fail(e ? e->ctx : NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_rms_norm_residual: residual is NULL");
    return rms_norm_residual(e, "wgml_rms_norm_residual", x, residual, weight, out, NULL, DEFAULT_EPS, 0);
}

wgml_status wgml_rms_norm_residual_with(wgml_engine *e, const wgml_tensor *x, const wgml_tensor *residual,
                                        const wgml_tensor *weight, wgml_tensor *out, wgml_tensor *sum_out, float eps)
{
    if (!residual)
        return wgml__fail(e ? e->ctx : NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_rms_norm_residual_with: residual is NULL");
    return rms_norm_residual(e, "wgml_rms_norm_residual_with", x, residual, weight, out, sum_out, eps, 0);
}

wgml_status wgml_rms_norm_with(wgml_engine *e, const wgml_tensor *x, const wgml_tensor *residual, const wgml_tensor *weight,
                               wgml_tensor *out, wgml_tensor *sum_out, const wgml_rms_norm_options *opts)
{
    return rms_norm_residual(e, "wgml_rms_norm_with", x, residual, weight, out, sum_out, opts ? opts->eps : DEFAULT_EPS,
                             opts ? opts->weight_offset : 0);
}

/* ---- backward -------------------------------------------------------------------------- */

static wgml_status rms_norm_backward(wgml_engine *e, const char *fn, const wgml_tensor *grad_out, const wgml_tensor *input,
                                     const wgml_tensor *weight, wgml_tensor *grad_in, wgml_tensor *grad_weight, float eps,
                                     bool acc, float woff)
{
    WGML_CHECK(wgml__check_engine(e, fn));
    WGML_CHECK(wgml__check_tensor(e, fn, "grad_out", grad_out, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "input", input, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "weight", weight, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "grad_in", grad_in, WGML_F32));
    if (grad_weight) WGML_CHECK(wgml__check_tensor(e, fn, "grad_weight", grad_weight, WGML_F32));
    WGML_CHECK(wgml__check_u32_numel(e, fn, "input", input));
    WGML_CHECK(wgml__check_same_numel(e, fn, "input", input, "grad_out", grad_out));
    WGML_CHECK(check_weight(e, fn, "input", input, "weight", weight));
    WGML_CHECK(wgml__check_same_numel(e, fn, "input", input, "grad_in", grad_in));
    if (grad_weight) WGML_CHECK(check_weight(e, fn, "input", input, "grad_weight", grad_weight));
    const wgml_tensor *ins[3] = { grad_out, input, weight };
    const char *in_names[3] = { "grad_out", "input", "weight" };
    for (int i = 0; i < 3; i++) {
        WGML_CHECK(wgml__check_no_alias(e, fn, "grad_in", grad_in, in_names[i], ins[i]));
        WGML_CHECK(wgml__check_no_alias(e, fn, "grad_weight", grad_weight, in_names[i], ins[i]));
    }
    WGML_CHECK(wgml__check_no_alias(e, fn, "grad_weight", grad_weight, "grad_in", grad_in));
    WGML_CHECK(check_eps(e, fn, eps));
    if (!isfinite(woff))
        return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: weight_offset (%g) must be finite", fn, (double)woff);

    size_t d = input->shape[input->ndim - 1];
    uint32_t rows = (uint32_t)(wgml_tensor_numel(input) / d);
    row_plan pl = plan_rows(d, 4);   /* bwd_dw sums segments through accs: nv <= 4 when segs > 1 */
    uint32_t blocks = (rows + pl.segs - 1) / pl.segs;   /* row blocks of segs rows */
    /* Without grad_weight every workgroup takes one block; with it, each takes `grows`
       consecutive blocks so that at most PMAX partial rows are written. */
    uint32_t grows = grad_weight ? (blocks + PMAX - 1) / PMAX : 1;
    uint32_t groups = (blocks + grows - 1) / grows;
    norm_params p = { .rows = rows, .d = (uint32_t)d, .units = pl.units, .tpr = pl.tpr, .segs = pl.segs,
                      .groups = groups, .grows = grows, .eps = eps, .woff = woff };
    uint32_t gx, gy;
    WGML_CHECK(wgml__grid(e->ctx, groups, &gx, &gy));
    if (!grad_weight) {
        wgml__kernel k = norm_kernel("bwd", "urrrw", &pl, false, false);
        if (acc) wgml__add_constant(&k, "ACC", 1);   /* grad_in += the gradient */
        wgml__arg args[4] = { wgml__t(input), wgml__t(grad_out), wgml__t(weight), wgml__t(grad_in) };
        return wgml__dispatch(e, &k, &p, sizeof p, args, 4, gx, gy, 1);
    }

    wgml__arg part;   /* [groups, units] vec4 partial sums of the weight gradient */
    WGML_CHECK(wgml__scratch(e, WGML__SCRATCH_NORM, (uint64_t)groups * pl.units * 16, &part));
    wgml__kernel k = norm_kernel("bwd_dw", "urrrww", &pl, false, false);
    if (acc) wgml__add_constant(&k, "ACC", 1);   /* grad_in += the gradient */
    wgml__arg args[5] = { wgml__t(input), wgml__t(grad_out), wgml__t(weight), wgml__t(grad_in), part };
    WGML_CHECK(wgml__dispatch(e, &k, &p, sizeof p, args, 5, gx, gy, 1));
    {
        norm_params q = { .rows = groups, .d = (uint32_t)d, .units = pl.units, .tpr = 1, .segs = 1,
                          .groups = (pl.units + 15) / 16, .grows = 1, .eps = 0 };
        row_plan rp = pl;
        rp.nv = 0;   /* dw_reduce depends on VEC only */
        wgml__kernel kr = norm_kernel("dw_reduce", "urw", &rp, false, false);
        wgml__arg rargs[2] = { part, wgml__t(grad_weight) };
        WGML_CHECK(wgml__grid(e->ctx, q.groups, &gx, &gy));
        return wgml__dispatch(e, &kr, &q, sizeof q, rargs, 2, gx, gy, 1);
    }
}

wgml_status wgml_rms_norm_backward(wgml_engine *e, const wgml_tensor *grad_out, const wgml_tensor *input,
                                   const wgml_tensor *weight, wgml_tensor *grad_in, wgml_tensor *grad_weight, float eps)
{
    return rms_norm_backward(e, "wgml_rms_norm_backward", grad_out, input, weight, grad_in, grad_weight, eps, false, 0);
}

wgml_status wgml_rms_norm_backward_with(wgml_engine *e, const wgml_tensor *grad_out, const wgml_tensor *input,
                                        const wgml_tensor *weight, wgml_tensor *grad_in, wgml_tensor *grad_weight, float eps,
                                        const wgml_rms_norm_backward_options *opts)
{
    return rms_norm_backward(e, "wgml_rms_norm_backward_with", grad_out, input, weight, grad_in, grad_weight, eps,
                             opts && opts->accumulate, opts ? opts->weight_offset : 0);
}

/* Default variants for wgml_engine_warmup: forward rows of 4096 and 2048 elements (NV 8:
   128 and 64 threads a row), backward rows of 4096 (NV 4). */
#define KV(ENTRY, LAYOUT, NV_, RES, SELF)                                                                       \
    { .file = "norm", .entry = ENTRY, .layout = LAYOUT, .nconst = 5,                                           \
      .constants = { { "WG", WG }, { "NV", NV_ }, { "VEC", 1 }, { "HAS_RES", RES }, { "SELF", SELF } } }
const wgml__kernel wgml__norm_kernels[] = {
    KV("fwd", "urrrw", 8, 0, 0),
    KV("fwd", "urrrw", 8, 1, 0),          KV("fwd_sum", "urrrww", 8, 1, 0),
    KV("fwd_sum_inplace", "uwrrw", 8, 1, 0),
    KV("bwd_dw", "urrrww", 4, 0, 0),      KV("bwd", "urrrw", 4, 0, 0),
    KV("dw_reduce", "urw", 0, 0, 0),
};
#undef KV
const size_t wgml__norm_kernel_count = sizeof wgml__norm_kernels / sizeof wgml__norm_kernels[0];
