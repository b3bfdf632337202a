/* Softmax over the last dimension and its backward pass.
   Kernels: src/kernels/softmax.wgsl (its top comment explains the layout and the paths). */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define WG 256u
#define NVMAX 8u          /* units per thread held in registers (softmax.wgsl NVMAX) */
#define SPLIT_TARGET 1024u /* long rows: cut rows into chunks until about this many
                              workgroups run (enough to fill a large GPU) */
#define MIN_CHUNK (4u * WG) /* ... but no chunk under 4 units per thread */

typedef struct softmax_params {
    uint32_t rows, d, units, tpr, segs, groups, chunks, chunk;
} softmax_params;

typedef enum { PATH_REGISTERS, PATH_LONG, PATH_SPLIT } softmax_path;

typedef struct softmax_plan {
    softmax_path path;
    bool vec;
    uint32_t nv;
    softmax_params p;
} softmax_plan;


/* Units per thread the register path aims at: for rows of 4096 f32 that is 128 threads
   per row, two rows per workgroup, so each thread has 8 independent 16-byte loads in
   flight and each row reduction is paid over twice the bytes of a 4-unit plan
   (bench/notes/norm.md). */
#define UPT 8u

/* Rows of up to NVMAX * WG units go through registers (about UPT units a thread), several short rows to a workgroup;
   longer rows take a workgroup each, or, when there are too few of them to fill the GPU,
   several workgroups each (the split path). */
static softmax_plan plan(size_t d, uint32_t rows)
{
    softmax_plan pl = { 0 };
    pl.vec = d % 4 == 0;
    uint32_t units = (uint32_t)(pl.vec ? d / 4 : d);
    pl.p.rows = rows;
    pl.p.d = (uint32_t)d;
    pl.p.units = units;
    pl.p.chunks = 1;
    pl.p.chunk = units;
    if (units <= NVMAX * WG) {
        uint32_t tpr = wgml__pow2_at_least((units + UPT - 1) / UPT);
        if (tpr > WG) tpr = WG;
        pl.path = PATH_REGISTERS;
        pl.nv = (units + tpr - 1) / tpr;
        pl.p.tpr = tpr;
        pl.p.segs = WG / tpr;
        pl.p.groups = (uint32_t)(((uint64_t)rows + pl.p.segs - 1) / pl.p.segs);
        return pl;
    }
    pl.nv = 0;
    pl.p.tpr = WG;
    pl.p.segs = 1;
    uint32_t want = (SPLIT_TARGET + rows - 1) / rows, most = (units + MIN_CHUNK - 1) / MIN_CHUNK;
    uint32_t chunks = want < most ? want : most;
    if (chunks <= 1) {
        pl.path = PATH_LONG;
        pl.p.groups = rows;
        return pl;
    }
    pl.path = PATH_SPLIT;
    pl.p.chunk = (units + chunks - 1) / chunks;
    pl.p.chunks = (units + pl.p.chunk - 1) / pl.p.chunk;
    pl.p.groups = rows * pl.p.chunks;   /* < SPLIT_TARGET + chunks */
    return pl;
}

static wgml__kernel softmax_kernel(const char *entry, const char *layout, const softmax_plan *pl)
{
    return (wgml__kernel){ .file = "softmax", .entry = entry, .layout = layout, .nconst = 3,
                           .constants = { { "WG", WG }, { "NV", pl->nv }, { "VEC", pl->vec } } };
}

static wgml_status dispatch(wgml_engine *e, const char *entry, const char *layout, const softmax_plan *pl,
                            const wgml__arg *args, uint32_t nargs)
{
    uint32_t gx, gy;
    WGML_CHECK(wgml__grid(e->ctx, pl->p.groups, &gx, &gy));
    wgml__kernel k = softmax_kernel(entry, layout, pl);
    return wgml__dispatch(e, &k, &pl->p, sizeof pl->p, args, nargs, gx, gy, 1);
}

wgml_status wgml_softmax(wgml_engine *e, const wgml_tensor *input, wgml_tensor *out)
{
    const char *fn = "wgml_softmax";
    WGML_CHECK(wgml__check_engine(e, fn));
    WGML_CHECK(wgml__check_tensor(e, fn, "input", input, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "out", out, WGML_F32));
    WGML_CHECK(wgml__check_u32_numel(e, fn, "input", input));
    WGML_CHECK(wgml__check_same_numel(e, fn, "input", input, "out", out));
    WGML_CHECK(wgml__check_no_alias(e, fn, "out", out, "input", input));

    size_t d = input->shape[input->ndim - 1];
    softmax_plan pl = plan(d, (uint32_t)(wgml_tensor_numel(input) / d));
    if (pl.path != PATH_SPLIT) {
        wgml__arg args[2] = { wgml__t(input), wgml__t(out) };
        return dispatch(e, "softmax", "urw", &pl, args, 2);
    }
    wgml__arg part;   /* one (max, sum) pair per chunk */
    WGML_CHECK(wgml__scratch(e, WGML__SCRATCH_NORM, (uint64_t)pl.p.groups * 8, &part));
    wgml__arg a1[2] = { wgml__t(input), part };
    WGML_CHECK(dispatch(e, "softmax_stats", "urw", &pl, a1, 2));
    wgml__arg a2[3] = { wgml__t(input), wgml__t(out), part };
    return dispatch(e, "softmax_split", "urwr", &pl, a2, 3);
}

wgml_status wgml_softmax_backward(wgml_engine *e, const wgml_tensor *grad_out, const wgml_tensor *final_out,
                                  wgml_tensor *grad_in)
{
    const char *fn = "wgml_softmax_backward";
    WGML_CHECK(wgml__check_engine(e, fn));
    WGML_CHECK(wgml__check_tensor(e, fn, "grad_out", grad_out, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "final_out", final_out, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "grad_in", grad_in, WGML_F32));
    WGML_CHECK(wgml__check_u32_numel(e, fn, "final_out", final_out));
    WGML_CHECK(wgml__check_same_numel(e, fn, "final_out", final_out, "grad_out", grad_out));
    WGML_CHECK(wgml__check_same_numel(e, fn, "final_out", final_out, "grad_in", grad_in));
    WGML_CHECK(wgml__check_no_alias(e, fn, "grad_in", grad_in, "grad_out", grad_out));
    WGML_CHECK(wgml__check_no_alias(e, fn, "grad_in", grad_in, "final_out", final_out));

    size_t d = final_out->shape[final_out->ndim - 1];
    softmax_plan pl = plan(d, (uint32_t)(wgml_tensor_numel(final_out) / d));
    if (pl.path != PATH_SPLIT) {
        wgml__arg args[3] = { wgml__t(final_out), wgml__t(grad_out), wgml__t(grad_in) };
        return dispatch(e, "softmax_bwd", "urrw", &pl, args, 3);
    }
    wgml__arg part;   /* one partial sum(g * y) per chunk (vec2, .x used) */
    WGML_CHECK(wgml__scratch(e, WGML__SCRATCH_NORM, (uint64_t)pl.p.groups * 8, &part));
    wgml__arg a1[3] = { wgml__t(final_out), wgml__t(grad_out), part };
    WGML_CHECK(dispatch(e, "softmax_bwd_stats", "urrw", &pl, a1, 3));
    wgml__arg a2[4] = { wgml__t(final_out), wgml__t(grad_out), wgml__t(grad_in), part };
    return dispatch(e, "softmax_bwd_split", "urrwr", &pl, a2, 4);
}

/* Default variants for wgml_engine_warmup: rows of 4096 elements (NV 8) and the long-row
   and split paths of vocabulary-sized rows. */
#define KV(ENTRY, LAYOUT, NV_) \
    { .file = "softmax", .entry = ENTRY, .layout = LAYOUT, .nconst = 3, .constants = { { "WG", WG }, { "NV", NV_ }, { "VEC", 1 } } }
const wgml__kernel wgml__softmax_kernels[] = {
    KV("softmax", "urw", 8),          KV("softmax", "urw", 0),
    KV("softmax_stats", "urw", 0),    KV("softmax_split", "urwr", 0),
    KV("softmax_bwd", "urrw", 8),     KV("softmax_bwd", "urrw", 0),
    KV("softmax_bwd_stats", "urrw", 0), KV("softmax_bwd_split", "urrwr", 0),
};
#undef KV
const size_t wgml__softmax_kernel_count = sizeof wgml__softmax_kernels / sizeof wgml__softmax_kernels[0];
