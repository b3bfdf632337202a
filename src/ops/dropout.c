/* Inverted dropout with decisions that are a pure function of (seed, element index).
   Kernel: src/kernels/dropout.wgsl. */
#include "internal.h"

#include <math.h>

#define WG 256

typedef struct dropout_params {
    uint32_t n, threshold, key0, key1;
    float scale;
    uint32_t pad[3];
} dropout_params;

/* The kernel's keys of a 64-bit seed (the rule is spelled in wgml.h's wgml_dropout). */
static void dropout_keys(uint64_t seed, uint32_t *key0, uint32_t *key1)
{
    *key0 = wgml__mix32((uint32_t)seed ^ 0x3c6ef372u);
    *key1 = wgml__mix32((uint32_t)(seed >> 32) ^ wgml__mix32(*key0 ^ 0x9e3779b9u));
}

static uint32_t dropout_threshold(float p)
{
    double t = floor((double)p * 4294967296.0);
    return t >= 4294967295.0 ? 4294967295u : (uint32_t)t;
}

wgml_status wgml_dropout(wgml_engine *e, const wgml_tensor *x, wgml_tensor *out, float p, uint64_t seed)
{
    const char *fn = "wgml_dropout";
    WGML_CHECK(wgml__check_engine(e, fn));
    WGML_CHECK(wgml__check_tensor(e, fn, "x", x, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "out", out, WGML_F32));
    if (!(p >= 0 && p < 1)) return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: p (%g) must be in [0, 1)", fn, p);
    WGML_CHECK(wgml__check_same_numel(e, fn, "x", x, "out", out));
    WGML_CHECK(wgml__check_u32_numel(e, fn, "x", x));
    dropout_params pr = { .n = (uint32_t)wgml_tensor_numel(x), .threshold = dropout_threshold(p),
                          .scale = (float)(1.0 / (1.0 - (double)p)) };
    dropout_keys(seed, &pr.key0, &pr.key1);
    if (pr.n == 0) return WGML_OK;
    uint32_t gx, gy;
    WGML_CHECK(wgml__grid(e->ctx, wgml__ceil_div(pr.n, WG), &gx, &gy));
    bool inplace = wgml__same(x, out);
    wgml__kernel k = { .file = "dropout", .entry = inplace ? "dropout_inplace" : "dropout", .layout = inplace ? "uw" : "urw",
                       .nconst = 1, .constants = { { "WG", WG } } };
    if (inplace) return wgml__dispatch(e, &k, &pr, sizeof pr, (wgml__arg[]){ wgml__t(out) }, 1, gx, gy, 1);
    return wgml__dispatch(e, &k, &pr, sizeof pr, (wgml__arg[]){ wgml__t(x), wgml__t(out) }, 2, gx, gy, 1);
}
