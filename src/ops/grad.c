/* Gradient utilities: squares, scaling, accumulation, global norm and clipping by it.
   Kernels: src/kernels/grad.wgsl. */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define WG 256
#define EU 4              /* vec4 per thread in the element-wise entries: EU in the kernel */
#define CHUNK4 2048u      /* vec4 per workgroup in sumsq; keep equal to the WGSL default */
#define MAX_SLOTS 8

typedef struct elem_params { uint32_t n4; float scale; uint32_t pad[2]; } elem_params;

typedef struct multi_params {
    uint32_t base, nparts;
    float max_norm, pre;
    uint32_t slots[MAX_SLOTS][4];
} multi_params;

static wgml__kernel grad_kernel(const char *entry, const char *layout)
{
    return (wgml__kernel){ .file = "grad", .entry = entry, .layout = layout, .nconst = 1, .constants = { { "WG", WG } } };
}

/* One element-wise dispatch over t's vec4s. */
static wgml_status elementwise(wgml_engine *e, const char *entry, const char *layout, const wgml_tensor *t, float scale,
                               const wgml__arg *args, uint32_t nargs)
{
    uint64_t n4 = (wgml_tensor_numel(t) + 3) / 4;
    elem_params p = { .n4 = (uint32_t)n4, .scale = scale };
    uint32_t gx, gy;
    WGML_CHECK(wgml__grid(e->ctx, (n4 + WG * EU - 1) / (WG * EU), &gx, &gy));
    wgml__kernel k = grad_kernel(entry, layout);
    return wgml__dispatch(e, &k, &p, sizeof p, args, nargs, gx, gy, 1);
}

wgml_status wgml_gradient_norm_squared(wgml_engine *e, const wgml_tensor *input, wgml_tensor *out)
{
    const char *fn = "wgml_gradient_norm_squared";
    WGML_CHECK(wgml__check_engine(e, fn));
    WGML_CHECK(wgml__check_tensor(e, fn, "input", input, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "out", out, WGML_F32));
    WGML_CHECK(wgml__check_same_numel(e, fn, "input", input, "out", out));
    WGML_CHECK(wgml__check_u32_numel(e, fn, "input", input));
    if (wgml__same(input, out)) return elementwise(e, "square_inplace", "uw", out, 0, (wgml__arg[]){ wgml__t(out) }, 1);
    return elementwise(e, "square", "urw", out, 0, (wgml__arg[]){ wgml__t(input), wgml__t(out) }, 2);
}

static wgml_status scale_op(wgml_engine *e, const char *fn, wgml_tensor *grad, float scale)
{
    WGML_CHECK(wgml__check_engine(e, fn));
    WGML_CHECK(wgml__check_tensor(e, fn, "grad", grad, WGML_F32));
    WGML_CHECK(wgml__check_u32_numel(e, fn, "grad", grad));
    if (!isfinite(scale)) return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: scale is %g; it must be finite", fn, (double)scale);
    return elementwise(e, "scale_inplace", "uw", grad, scale, (wgml__arg[]){ wgml__t(grad) }, 1);
}

wgml_status wgml_clip_grad_by_norm(wgml_engine *e, wgml_tensor *grad, float scale)
{
    return scale_op(e, "wgml_clip_grad_by_norm", grad, scale);
}

wgml_status wgml_gradient_scale(wgml_engine *e, wgml_tensor *grad, float scale)
{
    return scale_op(e, "wgml_gradient_scale", grad, scale);
}

wgml_status wgml_gradient_accumulate(wgml_engine *e, wgml_tensor *accum_grad, const wgml_tensor *new_grad)
{
    const char *fn = "wgml_gradient_accumulate";
    WGML_CHECK(wgml__check_engine(e, fn));
    WGML_CHECK(wgml__check_tensor(e, fn, "accum_grad", accum_grad, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "new_grad", new_grad, WGML_F32));
    WGML_CHECK(wgml__check_same_numel(e, fn, "accum_grad", accum_grad, "new_grad", new_grad));
    WGML_CHECK(wgml__check_u32_numel(e, fn, "accum_grad", accum_grad));
    if (wgml__same(accum_grad, new_grad))
        return elementwise(e, "accumulate_self", "uw", accum_grad, 0, (wgml__arg[]){ wgml__t(accum_grad) }, 1);
    return elementwise(e, "accumulate", "uwr", accum_grad, 0, (wgml__arg[]){ wgml__t(accum_grad), wgml__t(new_grad) }, 2);
}

/* ---- global norm and clipping ------------------------------------------------------- */

/* Checks a list of tensors: non-NULL array, count >= 1, each an f32 tensor of e's context. */
static wgml_status check_list(wgml_engine *e, const char *fn, const char *name, const wgml_tensor *const *list, size_t count)
{
    if (!list) return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", fn, name);
    if (count == 0) return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: count is 0", fn);
    for (size_t i = 0; i < count; i++) {
        char what[48];
        snprintf(what, sizeof what, "%s[%zu]", name, i);
        WGML_CHECK(wgml__check_tensor(e, fn, what, list[i], WGML_F32));
        WGML_CHECK(wgml__check_u32_numel(e, fn, what, list[i]));
    }
    return WGML_OK;
}

/* The widest multi-tensor entry that fits the device beside one other binding. */
static uint32_t slots_per_dispatch(wgml_engine *e)
{
    uint32_t room = e->ctx->limits.maxStorageBuffersPerShaderStage - 1;
    return room >= 8 ? 8 : room >= 4 ? 4 : 1;
}

static const char *const sumsq_entries[9] = { NULL, "sumsq_x1", NULL, NULL, "sumsq_x4", NULL, NULL, NULL, "sumsq_x8" };
static const char *const sumsq_layouts[9] = { NULL, "uwr", NULL, NULL, "uwrrrr", NULL, NULL, NULL, "uwrrrrrrrr" };
static const char *const clip_entries[9] = { NULL, "clip_x1", "clip_x2", NULL, "clip_x4", NULL, NULL, NULL, "clip_x8" };
static const char *const clip_layouts[9] = { NULL, "urw", "urww", NULL, "urwwww", NULL, NULL, NULL, "urwwwwwwww" };

static int cmp_buffer(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)*(const WGPUBuffer *)a, y = (uintptr_t)*(const WGPUBuffer *)b;
    return x < y ? -1 : x > y;
}

/* Records the norm of tensors[0, count) into norm_out: sumsq dispatches of up to K tensors,
   then sumsq_final. Slots beyond the tensors given repeat the last tensor with no
   workgroups (read-only bindings of one buffer may repeat). */
static wgml_status record_norm(wgml_engine *e, const wgml_tensor *const *tensors, size_t count, wgml_tensor *norm_out)
{
    wgml_context *ctx = e->ctx;
    uint32_t kmax = slots_per_dispatch(e);
    uint64_t nparts = 0;
    for (size_t i = 0; i < count; i++) {
        uint64_t n4 = (wgml_tensor_numel(tensors[i]) + 3) / 4;
        nparts += (n4 + CHUNK4 - 1) / CHUNK4;
    }
    if (nparts > 0xFFFFFFFFull) return wgml__fail(ctx, WGML_ERROR_LIMIT, "wgml_global_norm: too many partial sums");
    wgml__arg scratch;
    WGML_CHECK(wgml__scratch(e, WGML__SCRATCH_TRAIN, nparts * 4, &scratch));
    uint64_t max_wg = (uint64_t)ctx->limits.maxComputeWorkgroupsPerDimension * ctx->limits.maxComputeWorkgroupsPerDimension;
    uint64_t base = 0;
    for (size_t first = 0; first < count;) {
        multi_params p = { .base = (uint32_t)base };
        wgml__arg args[1 + MAX_SLOTS];
        args[0] = scratch;
        uint64_t total = 0;
        uint32_t k = 0;
        while (k < kmax && first + k < count) {
            const wgml_tensor *t = tensors[first + k];
            uint64_t n4 = (wgml_tensor_numel(t) + 3) / 4, groups = (n4 + CHUNK4 - 1) / CHUNK4;
            if (k > 0 && total + groups > max_wg) break;
            total += groups;
            p.slots[k][0] = (uint32_t)total;
            p.slots[k][1] = (uint32_t)wgml_tensor_numel(t);
            args[1 + k] = wgml__t(t);
            k++;
        }
        uint32_t width = k == 1 ? 1 : k <= 4 ? 4 : 8;
        for (uint32_t s = k; s < width; s++) {
            p.slots[s][0] = (uint32_t)total;
            args[1 + s] = args[k];
        }
        uint32_t gx, gy;
        WGML_CHECK(wgml__grid(ctx, total, &gx, &gy));
        wgml__kernel kern = grad_kernel(sumsq_entries[width], sumsq_layouts[width]);
        kern.nconst = 2;
        kern.constants[1].name = "CHUNK4";
        kern.constants[1].value = CHUNK4;
        WGML_CHECK(wgml__dispatch(e, &kern, &p, sizeof p, args, 1 + width, gx, gy, 1));
        base += total;
        first += k;
    }
    multi_params p = { .nparts = (uint32_t)nparts };
    wgml__kernel kern = grad_kernel("sumsq_final", "urw");
    return wgml__dispatch(e, &kern, &p, sizeof p, (wgml__arg[]){ scratch, wgml__t(norm_out) }, 2, 1, 1, 1);
}

wgml_status wgml_global_norm(wgml_engine *e, const wgml_tensor *const *tensors, size_t count, wgml_tensor *norm_out)
{
    const char *fn = "wgml_global_norm";
    WGML_CHECK(wgml__check_engine(e, fn));
    WGML_CHECK(check_list(e, fn, "tensors", tensors, count));
    WGML_CHECK(wgml__check_tensor(e, fn, "norm_out", norm_out, WGML_F32));
    for (size_t i = 0; i < count; i++)
        if (wgml__same(norm_out, tensors[i]))
            return wgml__fail(e->ctx, WGML_ERROR_ALIAS, "%s: norm_out must not be the same tensor as tensors[%zu]", fn, i);
    return record_norm(e, tensors, count, norm_out);
}

wgml_status wgml_clip_grad_by_global_norm(wgml_engine *e, wgml_tensor *const *grads, size_t count, const wgml_tensor *norm,
                                          float max_norm)
{
    return wgml__clip_grads(e, grads, count, norm, max_norm, 1.0f);
}

wgml_status wgml__clip_grads(wgml_engine *e, wgml_tensor *const *grads, size_t count, const wgml_tensor *norm, float max_norm,
                             float pre)
{
    const char *fn = "wgml_clip_grad_by_global_norm";
    wgml_context *ctx;
    WGML_CHECK(wgml__check_engine(e, fn));
    ctx = e->ctx;
    WGML_CHECK(check_list(e, fn, "grads", (const wgml_tensor *const *)grads, count));
    WGML_CHECK(wgml__check_tensor(e, fn, "norm", norm, WGML_F32));
    if (!isfinite(max_norm) || (max_norm < 0 && pre == 1.0f))
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: max_norm is %g; it must be finite and >= 0", fn, (double)max_norm);
    for (size_t i = 0; i < count; i++)
        if (wgml__same(norm, grads[i]))
            return wgml__fail(ctx, WGML_ERROR_ALIAS, "%s: norm must not be the same tensor as grads[%zu]", fn, i);
    /* each gradient is scaled in place once: no tensor may appear twice */
    WGPUBuffer *sorted = malloc(count * sizeof *sorted);
    if (!sorted) return wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    for (size_t i = 0; i < count; i++) sorted[i] = grads[i]->buffer;
    qsort(sorted, count, sizeof *sorted, cmp_buffer);
    for (size_t i = 1; i < count; i++)
        if (sorted[i] == sorted[i - 1]) {
            free(sorted);
            for (size_t a = 0; a < count; a++)
                for (size_t b = a + 1; b < count; b++)
                    if (wgml__same(grads[a], grads[b]))
                        return wgml__fail(ctx, WGML_ERROR_ALIAS, "%s: grads[%zu] must not be the same tensor as grads[%zu]", fn, b, a);
        }
    free(sorted);

    uint32_t kmax = slots_per_dispatch(e);
    uint64_t max_wg = (uint64_t)ctx->limits.maxComputeWorkgroupsPerDimension * ctx->limits.maxComputeWorkgroupsPerDimension;
    for (size_t first = 0; first < count;) {
        multi_params p = { .max_norm = max_norm, .pre = pre };
        wgml__arg args[1 + MAX_SLOTS];
        args[0] = wgml__t(norm);
        uint64_t total = 0;
        uint32_t k = 0;
        while (k < kmax && first + k < count) {
            const wgml_tensor *t = grads[first + k];
            uint64_t n4 = (wgml_tensor_numel(t) + 3) / 4, groups = (n4 + WG - 1) / WG;
            if (k > 0 && total + groups > max_wg) break;
            total += groups;
            p.slots[k][0] = (uint32_t)total;
            p.slots[k][1] = (uint32_t)n4;
            args[1 + k] = wgml__t(t);
            k++;
        }
        /* read-write bindings may not repeat a buffer: the widest entry the tensors fill */
        uint32_t width = k >= 8 ? 8 : k >= 4 ? 4 : k >= 2 ? 2 : 1;
        k = width;
        total = p.slots[k - 1][0];
        uint32_t gx, gy;
        WGML_CHECK(wgml__grid(ctx, total, &gx, &gy));
        wgml__kernel kern = grad_kernel(clip_entries[width], clip_layouts[width]);
        WGML_CHECK(wgml__dispatch(e, &kern, &p, sizeof p, args, 1 + width, gx, gy, 1));
        first += k;
    }
    return WGML_OK;
}

const wgml__kernel wgml__grad_kernels[] = {
    { .file = "grad", .entry = "square", .layout = "urw", .nconst = 1, .constants = { { "WG", WG } } },
    { .file = "grad", .entry = "scale_inplace", .layout = "uw", .nconst = 1, .constants = { { "WG", WG } } },
    { .file = "grad", .entry = "accumulate", .layout = "uwr", .nconst = 1, .constants = { { "WG", WG } } },
    { .file = "grad", .entry = "sumsq_x1", .layout = "uwr", .nconst = 2, .constants = { { "WG", WG }, { "CHUNK4", CHUNK4 } } },
    { .file = "grad", .entry = "sumsq_x4", .layout = "uwrrrr", .nconst = 2, .constants = { { "WG", WG }, { "CHUNK4", CHUNK4 } } },
    { .file = "grad", .entry = "sumsq_final", .layout = "urw", .nconst = 1, .constants = { { "WG", WG } } },
    { .file = "grad", .entry = "clip_x1", .layout = "urw", .nconst = 1, .constants = { { "WG", WG } } },
    { .file = "grad", .entry = "clip_x4", .layout = "urwwww", .nconst = 1, .constants = { { "WG", WG } } },
};
const size_t wgml__grad_kernel_count = sizeof wgml__grad_kernels / sizeof wgml__grad_kernels[0];
