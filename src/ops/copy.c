/* copy_tensor: raw bytes of one tensor into another at a byte offset.
   Kernel: src/kernels/copy.wgsl. */
#include "internal.h"

#define WG 256

/* copy_vec4 and copy_word: n and dst_offset in vec4 or words; copy_bytes: in bytes, with
   the destination's words [first_word, first_word + words) that the range touches. */
typedef struct copy_params { uint32_t n, dst_offset, first_word, words; } copy_params;

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
    if (n == 0) return WGML_OK;
    wgml__arg args[2] = { wgml__t(src), wgml__t(dst) };
    uint32_t gx, gy;
    if (dst_offset % 4 || n % 4) {
        /* byte-granular: one thread per destination word the range touches, which merges
           the copied bytes into the word's others */
        if (n + dst_offset > 0xFFFFFFFFu)
            return wgml__fail(e->ctx, WGML_ERROR_LIMIT, "%s: copies of whole bytes (offset or size not a multiple of 4) "
                              "stop at 4 GiB", fn);
        uint32_t first = (uint32_t)(dst_offset / 4), end = (uint32_t)((dst_offset + n + 3) / 4);
        copy_params p = { .n = (uint32_t)n, .dst_offset = (uint32_t)dst_offset, .first_word = first, .words = end - first };
        WGML_CHECK(wgml__grid(e->ctx, ((uint64_t)p.words + WG - 1) / WG, &gx, &gy));
        wgml__kernel k = { .file = "copy", .entry = "copy_bytes", .layout = "urw" };
        return wgml__dispatch(e, &k, &p, sizeof p, args, 2, gx, gy, 1);
    }
    if (n / 4 > 0xFFFFFFFFu || dst_offset / 4 > 0xFFFFFFFFu)
        return wgml__fail(e->ctx, WGML_ERROR_LIMIT, "%s: copies index 32-bit words", fn);
    bool vec4 = dst_offset % 16 == 0 && n % 16 == 0;
    uint32_t unit = vec4 ? 16 : 4;
    copy_params p = { .n = (uint32_t)(n / unit), .dst_offset = (uint32_t)(dst_offset / unit) };
    WGML_CHECK(wgml__grid(e->ctx, ((uint64_t)p.n + WG - 1) / WG, &gx, &gy));
    wgml__kernel k = { .file = "copy", .entry = vec4 ? "copy_vec4" : "copy_word", .layout = "urw" };
    return wgml__dispatch(e, &k, &p, sizeof p, args, 2, gx, gy, 1);
}

wgml_status wgml__copy_rows_at(wgml_engine *e, const wgml_tensor *src, wgml_tensor *dst, const wgml_tensor *positions,
                               uint32_t blocks, uint32_t rows, uint32_t words)
{
    uint64_t total = (uint64_t)blocks * words;
    if (total > 0xFFFFFFFFu || (uint64_t)blocks * rows * words > 0xFFFFFFFFu)
        return wgml__fail(e->ctx, WGML_ERROR_LIMIT, "copy_rows_at: more than 2^32 words");
    copy_params p = { .n = words, .dst_offset = rows, .first_word = blocks, .words = (uint32_t)total };
    uint32_t gx, gy;
    WGML_CHECK(wgml__grid(e->ctx, (total + WG - 1) / WG, &gx, &gy));
    wgml__kernel k = { .file = "copy", .entry = "copy_rows_at", .layout = "urwr" };
    wgml__arg args[3] = { wgml__t(src), wgml__t(dst), wgml__t(positions) };
    return wgml__dispatch(e, &k, &p, sizeof p, args, 3, gx, gy, 1);
}

const wgml__kernel wgml__copy_kernels[] = {
    { .file = "copy", .entry = "copy_vec4", .layout = "urw" },
    { .file = "copy", .entry = "copy_word", .layout = "urw" },
    { .file = "copy", .entry = "copy_bytes", .layout = "urw" },
};
const size_t wgml__copy_kernel_count = sizeof wgml__copy_kernels / sizeof wgml__copy_kernels[0];
