/* Dequantization: bytes to floats, and MLX affine groups (4 or 8 bits, groups of 32, 64 or
   128; scales and biases f32, f16 or bf16). Kernels: src/kernels/quant.wgsl. */
#include "internal.h"

#define WG 64

typedef struct quant_params { uint32_t nwords, pad[3]; } quant_params;

static int float_code(wgml_dtype d) { return d == WGML_F32 ? 0 : d == WGML_F16 ? 1 : d == WGML_BF16 ? 2 : -1; }

/* The packed input: a u32 or u8 tensor. */
static wgml_status check_packed(wgml_engine *e, const char *fn, const char *name, const wgml_tensor *t)
{
    WGML_CHECK(wgml__check_tensor(e, fn, name, t, -1));
    if (t->dtype != WGML_U32 && t->dtype != WGML_U8)
        return wgml__fail(e->ctx, WGML_ERROR_DTYPE, "%s: %s is %s; it must be u32 or u8", fn, name, wgml_dtype_name(t->dtype));
    return WGML_OK;
}

wgml_status wgml_dequantize(wgml_engine *e, const wgml_tensor *input, wgml_tensor *out)
{
    const char *fn = "wgml_dequantize";
    WGML_CHECK(wgml__check_engine(e, fn));
    WGML_CHECK(check_packed(e, fn, "input", input));
    WGML_CHECK(wgml__check_tensor(e, fn, "out", out, WGML_F32));
    size_t n = wgml_tensor_numel(out), nbytes = wgml__nbytes(input);
    if (n > nbytes)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: out has %zu elements, more than input's %zu bytes", fn, n, nbytes);
    WGML_CHECK(wgml__check_u32_numel(e, fn, "out", out));
    uint64_t nwords = (n + 3) / 4;
    quant_params p = { .nwords = (uint32_t)nwords };
    uint32_t gx, gy;
    WGML_CHECK(wgml__grid(e->ctx, (nwords + WG - 1) / WG, &gx, &gy));
    wgml__kernel k = { .file = "quant", .entry = "dequantize_bytes", .layout = "urw" };
    wgml__arg args[2] = { wgml__t(input), wgml__t(out) };
    return wgml__dispatch(e, &k, &p, sizeof p, args, 2, gx, gy, 1);
}

static wgml_status affine(wgml_engine *e, const char *fn, const wgml_tensor *weight, const wgml_tensor *scales,
                          const wgml_tensor *biases, wgml_tensor *out, uint32_t bits, uint32_t group_size)
{
    WGML_CHECK(wgml__check_engine(e, fn));
    WGML_CHECK(check_packed(e, fn, "weight", weight));
    WGML_CHECK(wgml__check_tensor(e, fn, "scales", scales, -1));
    WGML_CHECK(wgml__check_tensor(e, fn, "biases", biases, -1));
    WGML_CHECK(wgml__check_tensor(e, fn, "out", out, WGML_F32));
    if (float_code(scales->dtype) < 0)
        return wgml__fail(e->ctx, WGML_ERROR_DTYPE, "%s: scales is %s; it must be f32, f16 or bf16", fn,
                          wgml_dtype_name(scales->dtype));
    if (float_code(biases->dtype) < 0)
        return wgml__fail(e->ctx, WGML_ERROR_DTYPE, "%s: biases is %s; it must be f32, f16 or bf16", fn,
                          wgml_dtype_name(biases->dtype));
    if (bits != 4 && bits != 8)
        return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: bits is %u; it must be 4 or 8", fn, bits);
    if (group_size != 32 && group_size != 64 && group_size != 128)
        return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: group_size is %u; it must be 32, 64 or 128", fn,
                          group_size);
    WGML_CHECK(wgml__check_no_alias(e, fn, "out", out, "scales", scales));
    WGML_CHECK(wgml__check_no_alias(e, fn, "out", out, "biases", biases));
    size_t n = wgml_tensor_numel(out);
    if (n % group_size)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: out has %zu elements, not a multiple of group_size %u", fn, n,
                          group_size);
    size_t groups = n / group_size;
    if (wgml_tensor_numel(scales) != groups)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE,
                          "%s: scales has %zu elements; it must have one per group: %zu (out's %zu elements / group_size %u)", fn,
                          wgml_tensor_numel(scales), groups, n, group_size);
    if (wgml_tensor_numel(biases) != groups)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE,
                          "%s: biases has %zu elements; it must have one per group: %zu (out's %zu elements / group_size %u)", fn,
                          wgml_tensor_numel(biases), groups, n, group_size);
    if (wgml__nbytes(weight) != n / 8 * bits)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: weight has %zu bytes; %zu elements of %u bits need %zu", fn,
                          wgml__nbytes(weight), n, bits, n / 8 * bits);
    WGML_CHECK(wgml__check_u32_numel(e, fn, "out", out));

    uint64_t nwords = (uint64_t)n * bits / 32;
    quant_params p = { .nwords = (uint32_t)nwords };
    uint32_t gx, gy;
    WGML_CHECK(wgml__grid(e->ctx, (nwords + WG - 1) / WG, &gx, &gy));
    wgml__kernel k = { .file = "quant", .entry = "affine", .layout = "urrrw", .nconst = 4,
                       .constants = { { "BITS", bits }, { "GS", group_size }, { "SDT", float_code(scales->dtype) },
                                      { "BDT", float_code(biases->dtype) } } };
    wgml__arg args[4] = { wgml__t(weight), wgml__t(scales), wgml__t(biases), wgml__t(out) };
    return wgml__dispatch(e, &k, &p, sizeof p, args, 4, gx, gy, 1);
}

wgml_status wgml_affine_dequantize_with(wgml_engine *e, const wgml_tensor *weight, const wgml_tensor *scales,
                                        const wgml_tensor *biases, wgml_tensor *out, uint32_t bits, uint32_t group_size)
{
    return affine(e, "wgml_affine_dequantize_with", weight, scales, biases, out, bits, group_size);
}

wgml_status wgml_affine_dequantize(wgml_engine *e, const wgml_tensor *weight, const wgml_tensor *scales,
                                   const wgml_tensor *biases, wgml_tensor *out)
{
    return affine(e, "wgml_affine_dequantize", weight, scales, biases, out, 8, 64);
}

/* bytes; 8-bit and 4-bit groups of 64 with f32, f16 and bf16 scales (MLX's usual) */
#define AFF(bits, sdt) { .file = "quant", .entry = "affine", .layout = "urrrw", .nconst = 4, \
    .constants = { { "BITS", bits }, { "GS", 64 }, { "SDT", sdt }, { "BDT", sdt } } }
const wgml__kernel wgml__quant_kernels[] = {
    { .file = "quant", .entry = "dequantize_bytes", .layout = "urw" },
    AFF(8, 0), AFF(8, 1), AFF(8, 2), AFF(4, 0), AFF(4, 1), AFF(4, 2),
};
const size_t wgml__quant_kernel_count = sizeof wgml__quant_kernels / sizeof wgml__quant_kernels[0];
