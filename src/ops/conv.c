/* Depthwise 1-D convolution, kernel 3, padding 1. Kernel: src/kernels/conv.wgsl. */
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

const wgml__kernel wgml__conv_kernels[] = { { .file = "conv", .entry = "conv1d_k3", .layout = "urrrw" } };
const size_t wgml__conv_kernel_count = 1;
