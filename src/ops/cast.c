/* wgml_cast: conversions between f32, f16 and bf16. Kernel: src/kernels/cast.wgsl. */
#include "internal.h"

#define WG 256

typedef struct cast_params { uint32_t n, words, pad0, pad1; } cast_params;

static int code_of(wgml_dtype d) { return d == WGML_F32 ? 0 : d == WGML_F16 ? 1 : d == WGML_BF16 ? 2 : -1; }

wgml_status wgml_cast(wgml_engine *e, const wgml_tensor *src, wgml_tensor *dst)
{
    const char *fn = "wgml_cast";
    WGML_CHECK(wgml__check_engine(e, fn));
    WGML_CHECK(wgml__check_tensor(e, fn, "src", src, -1));
    WGML_CHECK(wgml__check_tensor(e, fn, "dst", dst, -1));
    int from = code_of(src->dtype), to = code_of(dst->dtype);
    if (from < 0 || to < 0)
        return wgml__fail(e->ctx, WGML_ERROR_DTYPE, "%s: %s is %s; src and dst must each be f32, f16 or bf16", fn,
                          from < 0 ? "src" : "dst", wgml_dtype_name(from < 0 ? src->dtype : dst->dtype));
    WGML_CHECK(wgml__check_same_numel(e, fn, "src", src, "dst", dst));
    WGML_CHECK(wgml__check_no_alias(e, fn, "dst", dst, "src", src));
    WGML_CHECK(wgml__check_u32_numel(e, fn, "src", src));
    uint64_t n = wgml_tensor_numel(src);
    cast_params p = { .n = (uint32_t)n, .words = (uint32_t)(to == 0 ? n : (n + 1) / 2) };
    uint32_t gx, gy;
    WGML_CHECK(wgml__grid(e->ctx, ((uint64_t)p.words + WG - 1) / WG, &gx, &gy));
    wgml__kernel k = { .file = "cast", .entry = "convert", .layout = "urw", .nconst = 2,
                       .constants = { { "SRC", from }, { "DST", to } } };
    wgml__arg args[2] = { wgml__t(src), wgml__t(dst) };
    return wgml__dispatch(e, &k, &p, sizeof p, args, 2, gx, gy, 1);
}
