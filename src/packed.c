/* Packed weight tensors: the layout of each packed dtype (wgml.h, PACKED WEIGHTS) and
   their creation. The kernels that read them are in src/ops/packed.c. */
#include "internal.h"

#include <string.h>

/* Values per block and bytes per block of ggml's block formats. */
static bool block_of(wgml_dtype d, uint32_t *values, uint32_t *bytes)
{
    switch (d) {
    case WGML_Q8_0: *values = 32; *bytes = 34; return true;
    case WGML_Q4_0: *values = 32; *bytes = 18; return true;
    case WGML_Q4_K: *values = 256; *bytes = 144; return true;
    case WGML_Q6_K: *values = 256; *bytes = 210; return true;
    default: return false;
    }
}

static size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

wgml_status wgml__packed_layout(wgml_context *ctx, const char *fn, const wgml_packed_desc *d, wgml__packed *out)
{
    if (!d || !out) return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", fn, d ? "out" : "desc");
    memset(out, 0, sizeof *out);
    if (!wgml__dtype_packed(d->dtype))
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: desc.dtype is %s; it must be q8_0, q4_0, q4_k, q6_k or affine",
                          fn, wgml_dtype_name(d->dtype));
    if (!d->rows || !d->cols)
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: desc.rows and desc.cols must be >= 1 (%u x %u)", fn, d->rows,
                          d->cols);
    const size_t limit = SIZE_MAX / 4;   /* every size below stays far from overflow */
    uint32_t values, bytes;
    out->desc = *d;
    if (block_of(d->dtype, &values, &bytes)) {
        if (d->cols % values)
            return wgml__fail(ctx, WGML_ERROR_SHAPE, "%s: desc.cols is %u; a %s row is whole blocks of %u values", fn, d->cols,
                              wgml_dtype_name(d->dtype), values);
        out->desc.bits = out->desc.group_size = 0;
        out->desc.scale_dtype = WGML_F32;
        out->row_bytes = (size_t)d->cols / values * bytes;
        if (out->row_bytes > limit / d->rows)
            return wgml__fail(ctx, WGML_ERROR_LIMIT, "%s: the size overflows size_t", fn);
        out->bytes = out->row_bytes * d->rows;
        return WGML_OK;
    }
    if (d->bits != 4 && d->bits != 8)
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: desc.bits is %u; affine codes are 4 or 8 bits", fn, d->bits);
    if (d->group_size != 32 && d->group_size != 64 && d->group_size != 128)
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: desc.group_size is %u; it must be 32, 64 or 128", fn,
                          d->group_size);
    if (d->scale_dtype != WGML_F32 && d->scale_dtype != WGML_F16 && d->scale_dtype != WGML_BF16)
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: desc.scale_dtype is %s; it must be f32, f16 or bf16", fn,
                          wgml_dtype_name(d->scale_dtype));
    size_t words = ((size_t)d->cols * d->bits + 31) / 32, groups = ((size_t)d->cols + d->group_size - 1) / d->group_size;
    out->row_bytes = words * 4;
    size_t part = groups * wgml_dtype_size(d->scale_dtype);
    if (out->row_bytes > limit / 2 / d->rows || part > limit / 2 / d->rows)
        return wgml__fail(ctx, WGML_ERROR_LIMIT, "%s: the size overflows size_t", fn);
    out->scales_offset = round16(out->row_bytes * d->rows);
    out->biases_offset = out->scales_offset + round16(part * d->rows);
    out->bytes = out->biases_offset + part * d->rows;
    return WGML_OK;
}

wgml_status wgml_packed_layout_of(const wgml_packed_desc *desc, wgml_packed_layout *out)
{
    if (!out) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_packed_layout_of: out is NULL");
    wgml__packed p;
    WGML_CHECK(wgml__packed_layout(NULL, "wgml_packed_layout_of", desc, &p));
    *out = (wgml_packed_layout){ .bytes = p.bytes, .row_bytes = p.row_bytes, .scales_offset = p.scales_offset,
                                 .biases_offset = p.biases_offset };
    return WGML_OK;
}

wgml_status wgml_tensor_create_packed(wgml_context *ctx, const wgml_packed_desc *desc, wgml_tensor **out)
{
    const char *fn = "wgml_tensor_create_packed";
    if (out) *out = NULL;
    if (!ctx) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: ctx is NULL", fn);
    wgml__packed p;
    WGML_CHECK(wgml__packed_layout(ctx, fn, desc, &p));
    return wgml__tensor_create_packed(fn, ctx, &p, out);
}

wgml_packed_desc wgml_tensor_packed_desc(const wgml_tensor *t)
{
    if (!t) return (wgml_packed_desc){ 0 };
    if (t->packed.bytes) return t->packed.desc;
    wgml_packed_desc d = { .dtype = t->dtype };
    if (t->ndim == 2 && (t->dtype == WGML_F16 || t->dtype == WGML_BF16)) {
        d.rows = (uint32_t)t->shape[0];
        d.cols = (uint32_t)t->shape[1];
    }
    return d;
}
