/* Element-wise arithmetic: add, sub, mul. Kernels: src/kernels/elementwise.wgsl. */
#include "internal.h"

#define WG 256

enum { OP_ADD = 0, OP_SUB = 1, OP_MUL = 2 };

typedef struct binary_params { uint32_t n4, pad[3]; } binary_params;

/* Picks the entry point that matches how out aliases a and b, and dispatches it. */
static wgml_status binary(wgml_engine *e, const char *fn, int op, const wgml_tensor *a, const wgml_tensor *b, wgml_tensor *out)
{
    WGML_CHECK(wgml__check_engine(e, fn));
    WGML_CHECK(wgml__check_tensor(e, fn, "a", a, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "b", b, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "out", out, WGML_F32));
    WGML_CHECK(wgml__check_same_numel(e, fn, "a", a, "b", b));
    WGML_CHECK(wgml__check_same_numel(e, fn, "a", a, "out", out));

    uint64_t n4 = (wgml_tensor_numel(a) + 3) / 4;
    binary_params p = { .n4 = (uint32_t)n4 };
    uint32_t gx, gy;
    WGML_CHECK(wgml__grid(e->ctx, (n4 + WG - 1) / WG, &gx, &gy));

    bool oa = wgml__same(out, a), ob = wgml__same(out, b);
    wgml__kernel k = { .file = "elementwise", .nconst = 2,
                       .constants = { { "OP", op }, { "SWAP", 0 } } };
    wgml__arg args[3];
    uint32_t nargs;
    if (oa && ob) {
        k.entry = "binary_self";
        k.layout = "uw";
        args[0] = wgml__t(out);
        nargs = 1;
    } else if (oa || ob) {
        k.entry = "binary_inplace";
        k.layout = "uwr";
        k.constants[1].value = ob;
        args[0] = wgml__t(out);
        args[1] = wgml__t(oa ? b : a);
        nargs = 2;
    } else {
        k.entry = "binary";
        k.layout = "urrw";
        args[0] = wgml__t(a);
        args[1] = wgml__t(b);
        args[2] = wgml__t(out);
        nargs = 3;
    }
    return wgml__dispatch(e, &k, &p, sizeof p, args, nargs, gx, gy, 1);
}

wgml_status wgml_add(wgml_engine *e, const wgml_tensor *a, const wgml_tensor *b, wgml_tensor *out)
{
    return binary(e, "wgml_add", OP_ADD, a, b, out);
}

wgml_status wgml_sub(wgml_engine *e, const wgml_tensor *a, const wgml_tensor *b, wgml_tensor *out)
{
    return binary(e, "wgml_sub", OP_SUB, a, b, out);
}

wgml_status wgml_mul(wgml_engine *e, const wgml_tensor *a, const wgml_tensor *b, wgml_tensor *out)
{
    return binary(e, "wgml_mul", OP_MUL, a, b, out);
}

const wgml__kernel wgml__elementwise_kernels[] = {
    { .file = "elementwise", .entry = "binary", .layout = "urrw", .nconst = 2, .constants = { { "OP", OP_ADD }, { "SWAP", 0 } } },
    { .file = "elementwise", .entry = "binary", .layout = "urrw", .nconst = 2, .constants = { { "OP", OP_SUB }, { "SWAP", 0 } } },
    { .file = "elementwise", .entry = "binary", .layout = "urrw", .nconst = 2, .constants = { { "OP", OP_MUL }, { "SWAP", 0 } } },
};
const size_t wgml__elementwise_kernel_count = sizeof wgml__elementwise_kernels / sizeof wgml__elementwise_kernels[0];
