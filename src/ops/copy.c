/* copy_tensor: raw bytes of one tensor into another at a byte offset.
   Kernel: src/kernels/copy.wgsl. */
#include "internal.h"

#define WG 256

typedef struct copy_params { uint32_t n, dst_offset, pad[2]; } copy_params;

wgml_status wgml_copy_tensor(wgml_engine *e, const wgml_tensor *src, wgml_tensor *dst, size_t dst_offset)
{
    const char *fn = "wgml_copy_tensor";
    WGML_CHECK(wgml__check_engine(e, fn));
    WGML_CHECK(wgml__check_tensor(e, fn, "src", src, -1));
    WGML_CHECK(wgml__check_tensor(e, fn, "dst", dst, -1));
    WGML_CHECK(wgml__check_no_alias(e, fn, "dst", dst, "src", src));
    size_t n = wgml__nbytes(src), cap = wgml__nbytes(dst);
    if (dst_offset > cap || n > cap - dst_offset)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: src's %zu bytes at dst_offset %zu: the copy runs past dst's %zu bytes", fn, n,
                          dst_offset, cap);
    if (dst_offset % 4 || n % 4)
        return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT,
                          "%s: dst_offset (%zu) and src's byte size (%zu) must be multiples of 4", fn, dst_offset, n);
    if (n / 4 > 0xFFFFFFFFu || dst_offset / 4 > 0xFFFFFFFFu)
        return wgml__fail(e->ctx, WGML_ERROR_LIMIT, "%s: copies index 32-bit words", fn);
    bool vec4 = dst_offset % 16 == 0 && n % 16 == 0;
    uint32_t unit = vec4 ? 16 : 4;
    copy_params p = { .n = (uint32_t)(n / unit), .dst_offset = (uint32_t)(dst_offset / unit) };
    uint32_t gx, gy;
    WGML_CHECK(wgml__grid(e->ctx, ((uint64_t)p.n + WG - 1) / WG, &gx, &gy));
    wgml__kernel k = { .file = "copy", .entry = vec4 ? "copy_vec4" : "copy_word", .layout = "urw" };
    wgml__arg args[2] = { wgml__t(src), wgml__t(dst) };
    return wgml__dispatch(e, &k, &p, sizeof p, args, 2, gx, gy, 1);
}

const wgml__kernel wgml__copy_kernels[] = {
    { .file = "copy", .entry = "copy_vec4", .layout = "urw" },
    { .file = "copy", .entry = "copy_word", .layout = "urw" },
};
const size_t wgml__copy_kernel_count = sizeof wgml__copy_kernels / sizeof wgml__copy_kernels[0];
