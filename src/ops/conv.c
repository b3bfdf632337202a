/* Depthwise 1-D convolutions: kernel 3 with padding 1, and causal with any kernel up to 16
   (LFM2's short convolution) with its backward. Kernels: src/kernels/conv.wgsl. */
#include "internal.h"

#define WG 256

typedef struct conv_params { uint32_t n, seq, n4, pad; } conv_params;

static const wgml__kernel conv_kernel = { .file = "conv", .entry = "conv1d_k3", .layout = "urrrw" };

wgml_status wgml_conv1d(wgml_engine *e, const wgml_tensor *input, const wgml_tensor *weight, const wgml_tensor *bias,
                        wgml_tensor *out)
{
    const char *fn = "wgml_conv1d";
    WGML_CHECK(wgml__check_engine(e, fn));
    WGML_CHECK(wgml__check_tensor(e, fn, "input", input, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "weight", weight, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "bias", bias, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "out", out, WGML_F32));
    WGML_CHECK(wgml__check_no_alias(e, fn, "out", out, "input", input));
    WGML_CHECK(wgml__check_no_alias(e, fn, "out", out, "weight", weight));
    WGML_CHECK(wgml__check_no_alias(e, fn, "out", out, "bias", bias));
    if (input->ndim != 2)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: input has %u dimensions; it must be 2-D [dim, seq_len]", fn,
                          input->ndim);
    size_t dim = input->shape[0], seq = input->shape[1];
    if (out->ndim != 2 || out->shape[0] != dim || out->shape[1] != seq)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: out must have input's shape [%zu, %zu]", fn, dim, seq);
    if (wgml_tensor_numel(weight) != dim * 3)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: weight has %zu elements; it must have dim * 3 = %zu", fn,
                          wgml_tensor_numel(weight), dim * 3);
    if (wgml_tensor_numel(bias) != dim)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: bias has %zu elements; it must have dim = %zu", fn,
                          wgml_tensor_numel(bias), dim);
    WGML_CHECK(wgml__check_u32_numel(e, fn, "input", input));
    WGML_CHECK(wgml__check_u32_numel(e, fn, "weight", weight));

    uint64_t n = (uint64_t)dim * seq, n4 = (n + 3) / 4;
    conv_params p = { .n = (uint32_t)n, .seq = (uint32_t)seq, .n4 = (uint32_t)n4 };
    uint32_t gx, gy;
    WGML_CHECK(wgml__grid(e->ctx, (n4 + WG - 1) / WG, &gx, &gy));
    wgml__arg args[4] = { wgml__t(input), wgml__t(weight), wgml__t(bias), wgml__t(out) };
    return wgml__dispatch(e, &conv_kernel, &p, sizeof p, args, 4, gx, gy, 1);
}

/* ---- causal -------------------------------------------------------------------------- */

#define KMAX 16

typedef struct causal_params { uint32_t rows, dim, seq, k, has_bias, accumulate, groups_x, pad; } causal_params;

#define CAUSAL(e, l) { .file = "conv", .entry = e, .layout = l }
static const wgml__kernel k_causal = CAUSAL("conv_causal", "urrrw"), k_causal_dx = CAUSAL("conv_causal_dx", "urrrw"),
                          k_causal_dw = CAUSAL("conv_causal_dw", "urrww");

/* The shape of a causal convolution: input [batch, seq, dim] or [seq, dim], weight [dim, K]
   by element count, bias [dim]; fills p's rows, dim, seq and k. */
static wgml_status causal_shape(wgml_engine *e, const char *fn, const wgml_tensor *input, const wgml_tensor *weight,
                                const wgml_tensor *bias, const char *bias_name, causal_params *p)
{
    if (input->ndim != 2 && input->ndim != 3)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: input has %u dimensions; it must be [batch, seq, dim] or [seq, dim]",
                          fn, input->ndim);
    size_t dim = input->shape[input->ndim - 1], seq = input->shape[input->ndim - 2], rows = wgml_tensor_numel(input) / dim;
    size_t nw = wgml_tensor_numel(weight);
    if (nw % dim || nw / dim < 1 || nw / dim > KMAX)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: weight has %zu elements; it must be [dim, K] with dim = %zu and K in "
                          "1 .. %d", fn, nw, dim, KMAX);
    if (bias && wgml_tensor_numel(bias) != dim)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: %s has %zu elements; it must have dim = %zu", fn, bias_name,
                          wgml_tensor_numel(bias), dim);
    WGML_CHECK(wgml__check_u32_numel(e, fn, "input", input));
    *p = (causal_params){ .rows = (uint32_t)rows, .dim = (uint32_t)dim, .seq = (uint32_t)seq, .k = (uint32_t)(nw / dim) };
    return WGML_OK;
}

static bool same_shape(const wgml_tensor *a, const wgml_tensor *b)
{
    if (a->ndim != b->ndim) return false;
    for (uint32_t i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

static wgml_status causal_dispatch(wgml_engine *e, const wgml__kernel *k, causal_params *p, uint64_t threads,
                                   const wgml__arg *args)
{
    uint32_t gx, gy;
    WGML_CHECK(wgml__grid(e->ctx, (threads + WG - 1) / WG, &gx, &gy));
    p->groups_x = gx;
    return wgml__dispatch(e, k, p, sizeof *p, args, 4, gx, gy, 1);
}

wgml_status wgml_conv1d_causal(wgml_engine *e, const wgml_tensor *input, const wgml_tensor *weight, const wgml_tensor *bias,
                               wgml_tensor *out)
{
    const char *fn = "wgml_conv1d_causal";
    WGML_CHECK(wgml__check_engine(e, fn));
    WGML_CHECK(wgml__check_tensor(e, fn, "input", input, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "weight", weight, WGML_F32));
    if (bias) WGML_CHECK(wgml__check_tensor(e, fn, "bias", bias, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "out", out, WGML_F32));
    WGML_CHECK(wgml__check_no_alias(e, fn, "out", out, "input", input));
    WGML_CHECK(wgml__check_no_alias(e, fn, "out", out, "weight", weight));
    if (bias) WGML_CHECK(wgml__check_no_alias(e, fn, "out", out, "bias", bias));
    causal_params p;
    WGML_CHECK(causal_shape(e, fn, input, weight, bias, "bias", &p));
    if (!same_shape(out, input)) return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: out must have input's shape", fn);
    p.has_bias = bias != NULL;
    wgml__arg args[4] = { wgml__t(input), wgml__t(weight), wgml__t(bias ? bias : weight), wgml__t(out) };
    return causal_dispatch(e, &k_causal, &p, (uint64_t)p.rows * p.dim, args);
}

wgml_status wgml_conv1d_causal_backward(wgml_engine *e, const wgml_tensor *input, const wgml_tensor *weight,
                                        const wgml_tensor *grad_out, wgml_tensor *grad_input, wgml_tensor *grad_weight,
                                        wgml_tensor *grad_bias, bool accumulate)
{
    const char *fn = "wgml_conv1d_causal_backward";
    WGML_CHECK(wgml__check_engine(e, fn));
    WGML_CHECK(wgml__check_tensor(e, fn, "input", input, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "weight", weight, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "grad_out", grad_out, WGML_F32));
    wgml_tensor *outs[3] = { grad_input, grad_weight, grad_bias };
    const char *names[3] = { "grad_input", "grad_weight", "grad_bias" };
    const wgml_tensor *ins[3] = { input, weight, grad_out };
    const char *in_names[3] = { "input", "weight", "grad_out" };
    for (int o = 0; o < 3; o++) {
        if (!outs[o]) continue;
        WGML_CHECK(wgml__check_tensor(e, fn, names[o], outs[o], WGML_F32));
        for (int i = 0; i < 3; i++) WGML_CHECK(wgml__check_no_alias(e, fn, names[o], outs[o], in_names[i], ins[i]));
        for (int q = 0; q < o; q++)
            if (outs[q]) WGML_CHECK(wgml__check_no_alias(e, fn, names[o], outs[o], names[q], outs[q]));
    }
    if (grad_bias && !grad_weight)
        return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: grad_bias needs grad_weight (one pass computes both)", fn);
    causal_params p;
    WGML_CHECK(causal_shape(e, fn, input, weight, grad_bias, "grad_bias", &p));
    if (!same_shape(grad_out, input)) return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: grad_out must have input's shape", fn);
    if (grad_input && !same_shape(grad_input, input))
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: grad_input must have input's shape", fn);
    if (grad_weight && wgml_tensor_numel(grad_weight) != wgml_tensor_numel(weight))
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: grad_weight must have weight's %zu elements", fn,
                          wgml_tensor_numel(weight));
    if (grad_input) {
        wgml__arg args[4] = { wgml__t(grad_out), wgml__t(weight), wgml__t(weight), wgml__t(grad_input) };
        WGML_CHECK(causal_dispatch(e, &k_causal_dx, &p, (uint64_t)p.rows * p.dim, args));
    }
    if (!grad_weight) return WGML_OK;
    p.accumulate = accumulate;
    p.has_bias = grad_bias != NULL;
    wgml__arg db;   /* without a bias gradient, the binding takes the engine's unused one */
    if (grad_bias) db = wgml__t(grad_bias);
    else WGML_CHECK(wgml__scratch(e, WGML__SCRATCH_ATTN_UNUSED, 16, &db));
    wgml__arg args[4] = { wgml__t(input), wgml__t(grad_out), db, wgml__t(grad_weight) };
    return causal_dispatch(e, &k_causal_dw, &p, (uint64_t)p.dim * (p.k + 1), args);
}

/* ---- LFM2's gates, and the convolution of decoding (internal.h) --------------------------- */

static const wgml__kernel k_gate_in = CAUSAL("gate_in", "urrrw"), k_gate_out = CAUSAL("gate_out", "urrrw"),
                          k_gate_out_bwd = CAUSAL("gate_out_backward", "urrrww"),
                          k_gate_in_bwd = CAUSAL("gate_in_backward", "urrrw"), k_conv_rows = CAUSAL("conv_rows", "urrrw");

/* Runs gate kernel k over the [rows, dim] elements of `shape` (dim its last dimension),
   its bindings from 1 on the n tensors ts; w_k: conv_rows' width. */
static wgml_status gate_run(wgml_engine *e, const wgml__kernel *k, const wgml_tensor *shape, const wgml_tensor *const *ts,
                            uint32_t n, uint32_t w_k)
{
    uint32_t dim = (uint32_t)wgml_tensor_dim(shape, wgml_tensor_ndim(shape) - 1), rows = (uint32_t)(wgml_tensor_numel(shape) / dim);
    uint32_t gx, gy;
    WGML_CHECK(wgml__grid(e->ctx, ((uint64_t)rows * dim + WG - 1) / WG, &gx, &gy));
    causal_params p = { .rows = rows, .dim = dim, .k = w_k, .groups_x = gx };
    wgml__arg args[5];
    for (uint32_t i = 0; i < n; i++) args[i] = wgml__t(ts[i]);
    return wgml__dispatch(e, k, &p, sizeof p, args, n, gx, gy, 1);
}

wgml_status wgml__conv_gate_in(wgml_engine *e, const wgml_tensor *bcx, wgml_tensor *bx)
{
    return gate_run(e, &k_gate_in, bx, (const wgml_tensor *[]){ bcx, bcx, bcx, bx }, 4, 0);
}

wgml_status wgml__conv_gate_out(wgml_engine *e, const wgml_tensor *bcx, const wgml_tensor *cv, wgml_tensor *y)
{
    return gate_run(e, &k_gate_out, y, (const wgml_tensor *[]){ bcx, cv, cv, y }, 4, 0);
}

wgml_status wgml__conv_gate_out_backward(wgml_engine *e, const wgml_tensor *bcx, const wgml_tensor *cv, const wgml_tensor *dy,
                                         wgml_tensor *dcv, wgml_tensor *dbcx)
{
    return gate_run(e, &k_gate_out_bwd, dy, (const wgml_tensor *[]){ bcx, cv, dy, dcv, dbcx }, 5, 0);
}

wgml_status wgml__conv_gate_in_backward(wgml_engine *e, const wgml_tensor *bcx, const wgml_tensor *dbx, wgml_tensor *dbcx)
{
    return gate_run(e, &k_gate_in_bwd, dbx, (const wgml_tensor *[]){ bcx, dbx, dbx, dbcx }, 4, 0);
}

wgml_status wgml__conv_rows(wgml_engine *e, const wgml_tensor *hist, const wgml_tensor *rowpos, const wgml_tensor *w,
                            wgml_tensor *out)
{
    uint32_t dim = (uint32_t)wgml_tensor_dim(out, wgml_tensor_ndim(out) - 1);
    return gate_run(e, &k_conv_rows, out, (const wgml_tensor *[]){ hist, w, rowpos, out }, 4,
                    (uint32_t)(wgml_tensor_numel(w) / dim));
}

const wgml__kernel wgml__conv_kernels[] = {
    { .file = "conv", .entry = "conv1d_k3", .layout = "urrrw" },
    CAUSAL("conv_causal", "urrrw"), CAUSAL("conv_causal_dx", "urrrw"), CAUSAL("conv_causal_dw", "urrww"),
    CAUSAL("gate_in", "urrrw"), CAUSAL("gate_out", "urrrw"), CAUSAL("gate_out_backward", "urrrww"),
    CAUSAL("gate_in_backward", "urrrw"), CAUSAL("conv_rows", "urrrw"),
};
const size_t wgml__conv_kernel_count = sizeof wgml__conv_kernels / sizeof wgml__conv_kernels[0];
