/* Top-k selection. Kernels and the algorithm: src/kernels/select.wgsl. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define KMAX 1024          /* largest k (the final sort holds up to 2048 candidates) */
#define SMALL_MAX 1024     /* rows up to this length are sorted whole by one workgroup */
#define BLOCK 2048         /* elements per block of the histogram passes */
#define GMAX 256           /* most workgroups per pass: longer rows get longer chunks */
#define SLICES 9228u       /* scratch words before the per-workgroup slices (select.wgsl) */
#define NB3 1024u
#define WGS 256            /* threads of the sorting workgroup */

typedef struct select_params { uint32_t n, k, chunk, groups; } select_params;

#define HIST(pass) { .file = "select", .entry = "hist", .layout = "urw", .nconst = 1, .constants = { { "PASS", pass } } }
static const wgml__kernel k_hist[3] = { HIST(1), HIST(2), HIST(3) };
static const wgml__kernel k_collect = { .file = "select", .entry = "collect", .layout = "urw" };
static const wgml__kernel k_sort_input = { .file = "select", .entry = "sort_input", .layout = "urw", .nconst = 1,
                                           .constants = { { "WGS", WGS } } };
static const wgml__kernel k_sort_candidates = { .file = "select", .entry = "sort_candidates", .layout = "uww",
                                                .nconst = 1, .constants = { { "WGS", WGS } } };

wgml_status wgml_top_k(wgml_engine *e, const wgml_tensor *input, wgml_tensor *out_idx, uint32_t k)
{
    const char *fn = "wgml_top_k";
    WGML_CHECK(wgml__check_engine(e, fn));
    WGML_CHECK(wgml__check_tensor(e, fn, "input", input, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "out_idx", out_idx, WGML_U32));
    size_t n = wgml_tensor_numel(input);
    if (k == 0) return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: k is 0; it must be at least 1", fn);
    if (k > n)
        return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: k is %u, more than input's %zu elements", fn, k, n);
    if (k > KMAX) return wgml__fail(e->ctx, WGML_ERROR_LIMIT, "%s: k is %u; at most %d is supported", fn, k, KMAX);
    if (wgml_tensor_numel(out_idx) < k)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: out_idx has %zu elements, fewer than k = %u", fn,
                          wgml_tensor_numel(out_idx), k);
    WGML_CHECK(wgml__check_u32_numel(e, fn, "input", input));

    select_params p = { .n = (uint32_t)n, .k = k };
    if (n <= SMALL_MAX) {
        wgml__arg args[2] = { wgml__t(input), wgml__t(out_idx) };
        return wgml__dispatch(e, &k_sort_input, &p, sizeof p, args, 2, 1, 1, 1);
    }
    uint64_t blocks = (n + BLOCK - 1) / BLOCK, per = (blocks + GMAX - 1) / GMAX;
    p.chunk = (uint32_t)(per * BLOCK);
    p.groups = wgml__ceil_div(n, p.chunk);
    wgml__arg scratch;
    WGML_CHECK(wgml__scratch(e, WGML__SCRATCH_SELECT, 4ull * (SLICES + (uint64_t)p.groups * NB3), &scratch));
    wgml__arg args[2] = { wgml__t(input), scratch };
    wgml__arg sort_args[2] = { scratch, wgml__t(out_idx) };
    wgml_status s = WGML_OK;
    for (int pass = 0; pass < 3 && s == WGML_OK; pass++) s = wgml__dispatch(e, &k_hist[pass], &p, sizeof p, args, 2, p.groups, 1, 1);
    if (s == WGML_OK) s = wgml__dispatch(e, &k_collect, &p, sizeof p, args, 2, p.groups, 1, 1);
    if (s == WGML_OK) s = wgml__dispatch(e, &k_sort_candidates, &p, sizeof p, sort_args, 2, 1, 1, 1);
    /* the kernels leave the scratch counters at zero for the next call only when all ran */
    if (s != WGML_OK) wgml__scratch_discard(e, WGML__SCRATCH_SELECT);
    return s;
}

const wgml__kernel wgml__select_kernels[] = {
    HIST(1), HIST(2), HIST(3),
    { .file = "select", .entry = "collect", .layout = "urw" },
    { .file = "select", .entry = "sort_input", .layout = "urw", .nconst = 1, .constants = { { "WGS", WGS } } },
    { .file = "select", .entry = "sort_candidates", .layout = "uww", .nconst = 1, .constants = { { "WGS", WGS } } },
};
const size_t wgml__select_kernel_count = sizeof wgml__select_kernels / sizeof wgml__select_kernels[0];
