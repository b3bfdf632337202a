/* Biases of linear layers: added to rows, and their gradient summed over rows.
   Kernels: src/kernels/bias.wgsl. */
#include "internal.h"

#define WG 256

typedef struct bias_params { uint32_t rows, cols, accumulate, pad; } bias_params;

/* x (rows of cols) and a bias of cols elements: the rows through *rows. */
static wgml_status check_rows(wgml_engine *e, const char *fn, const char *xname, const wgml_tensor *x, const char *bname,
                              const wgml_tensor *b, size_t *rows)
{
    size_t cols = wgml_tensor_numel(b);
    size_t last = wgml_tensor_dim(x, wgml_tensor_ndim(x) - 1);
    if (last != cols)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: %s's last dimension is %zu; it must be the %zu elements of %s", fn,
                          xname, last, cols, bname);
    WGML_CHECK(wgml__check_u32_numel(e, fn, xname, x));
    *rows = wgml_tensor_numel(x) / cols;
    return WGML_OK;
}

wgml_status wgml_bias_add(wgml_engine *e, const wgml_tensor *x, const wgml_tensor *bias, wgml_tensor *out)
{
    const char *fn = "wgml_bias_add";
    WGML_CHECK(wgml__check_engine(e, fn));
    WGML_CHECK(wgml__check_tensor(e, fn, "x", x, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "bias", bias, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "out", out, WGML_F32));
    WGML_CHECK(wgml__check_no_alias(e, fn, "out", out, "bias", bias));
    size_t rows = 0;
    WGML_CHECK(check_rows(e, fn, "x", x, "bias", bias, &rows));
    WGML_CHECK(wgml__check_same_numel(e, fn, "x", x, "out", out));
    bias_params p = { .rows = (uint32_t)rows, .cols = (uint32_t)wgml_tensor_numel(bias) };
    uint32_t gx, gy;
    WGML_CHECK(wgml__grid(e->ctx, wgml__ceil_div((uint64_t)rows * p.cols, WG), &gx, &gy));
    bool inplace = wgml__same(x, out);
    wgml__kernel k = { .file = "bias", .entry = inplace ? "bias_add_inplace" : "bias_add", .layout = inplace ? "uwr" : "urrw",
                       .nconst = 1, .constants = { { "WG", WG } } };
    if (inplace) return wgml__dispatch(e, &k, &p, sizeof p, (wgml__arg[]){ wgml__t(out), wgml__t(bias) }, 2, gx, gy, 1);
    return wgml__dispatch(e, &k, &p, sizeof p, (wgml__arg[]){ wgml__t(x), wgml__t(bias), wgml__t(out) }, 3, gx, gy, 1);
}

wgml_status wgml_bias_grad(wgml_engine *e, const wgml_tensor *grad_out, wgml_tensor *grad_bias, bool accumulate)
{
    const char *fn = "wgml_bias_grad";
    WGML_CHECK(wgml__check_engine(e, fn));
    WGML_CHECK(wgml__check_tensor(e, fn, "grad_out", grad_out, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "grad_bias", grad_bias, WGML_F32));
    WGML_CHECK(wgml__check_no_alias(e, fn, "grad_bias", grad_bias, "grad_out", grad_out));
    size_t rows = 0;
    WGML_CHECK(check_rows(e, fn, "grad_out", grad_out, "grad_bias", grad_bias, &rows));
    bias_params p = { .rows = (uint32_t)rows, .cols = (uint32_t)wgml_tensor_numel(grad_bias), .accumulate = accumulate };
    uint32_t gx, gy;
    WGML_CHECK(wgml__grid(e->ctx, wgml__ceil_div(p.cols, WG), &gx, &gy));
    wgml__kernel k = { .file = "bias", .entry = "bias_grad", .layout = "urw", .nconst = 1, .constants = { { "WG", WG } } };
    return wgml__dispatch(e, &k, &p, sizeof p, (wgml__arg[]){ wgml__t(grad_out), wgml__t(grad_bias) }, 2, gx, gy, 1);
}
