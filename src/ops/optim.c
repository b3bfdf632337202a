/* Optimizer steps: SGD and AdamW, single tensor and many tensors per dispatch.
   Kernels: src/kernels/optim.wgsl. */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define WG 256
#define EU 4   /* vec4 per thread: EU in the kernel */
#define MAX_SLOTS 3   /* adamw_x1 .. adamw_x3 */

typedef struct adam_uniform {
    float decay, beta1, beta2, one_minus_beta1, one_minus_beta2, step_size, bc2_sqrt, eps;
    uint32_t slots[MAX_SLOTS][4];   /* x: cumulative workgroup end, y: vec4 count */
} adam_uniform;

typedef struct sgd_uniform { uint32_t n4; float lr; uint32_t pad[2]; } sgd_uniform;

static const char *const adam_entries[MAX_SLOTS] = { "adamw_x1", "adamw_x2", "adamw_x3" };
static const char *const adam_layouts[MAX_SLOTS] = { "uwrww", "uwrwwwrww", "uwrwwwrwwwrww" };

wgml_status wgml_sgd_update(wgml_engine *e, wgml_tensor *weight, const wgml_tensor *grad, float lr)
{
    const char *fn = "wgml_sgd_update";
    WGML_CHECK(wgml__check_engine(e, fn));
    WGML_CHECK(wgml__check_tensor(e, fn, "weight", weight, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "grad", grad, WGML_F32));
    WGML_CHECK(wgml__check_same_numel(e, fn, "weight", weight, "grad", grad));
    WGML_CHECK(wgml__check_no_alias(e, fn, "weight", weight, "grad", grad));
    WGML_CHECK(wgml__check_u32_numel(e, fn, "weight", weight));
    if (!isfinite(lr)) return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: lr is %g; it must be finite", fn, (double)lr);

    uint64_t n4 = (wgml_tensor_numel(weight) + 3) / 4;
    sgd_uniform p = { .n4 = (uint32_t)n4, .lr = lr };
    uint32_t gx, gy;
    WGML_CHECK(wgml__grid(e->ctx, (n4 + WG * EU - 1) / (WG * EU), &gx, &gy));
    wgml__kernel k = { .file = "optim", .entry = "sgd", .layout = "uwr", .nconst = 1, .constants = { { "WG", WG } } };
    wgml__arg args[2] = { wgml__t(weight), wgml__t(grad) };
    return wgml__dispatch(e, &k, &p, sizeof p, args, 2, gx, gy, 1);
}

/* The hyperparameters as torch.optim.AdamW checks them, then the step constants in double. */
static wgml_status adam_constants(wgml_engine *e, const char *fn, const wgml_adam_params *hp, adam_uniform *u)
{
    wgml_context *ctx = e->ctx;
    if (!hp) return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: params is NULL", fn);
    if (hp->t == 0) return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: params->t is 0; the step is 1-based", fn);
    if (!isfinite(hp->lr) || hp->lr < 0)
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: params->lr is %g; it must be finite and >= 0", fn, (double)hp->lr);
    if (!(hp->beta1 >= 0 && hp->beta1 < 1))
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: params->beta1 is %g; it must be in [0, 1)", fn, (double)hp->beta1);
    if (!(hp->beta2 >= 0 && hp->beta2 < 1))
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: params->beta2 is %g; it must be in [0, 1)", fn, (double)hp->beta2);
    if (!isfinite(hp->eps) || hp->eps < 0)
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: params->eps is %g; it must be finite and >= 0", fn, (double)hp->eps);
    if (!isfinite(hp->weight_decay) || hp->weight_decay < 0)
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: params->weight_decay is %g; it must be finite and >= 0", fn,
                          (double)hp->weight_decay);
    double b1 = hp->beta1, b2 = hp->beta2, lr = hp->lr;
    double bc1 = 1.0 - pow(b1, (double)hp->t), bc2 = 1.0 - pow(b2, (double)hp->t);
    *u = (adam_uniform){
        .decay = (float)(1.0 - lr * (double)hp->weight_decay),
        .beta1 = hp->beta1,
        .beta2 = hp->beta2,
        .one_minus_beta1 = (float)(1.0 - b1),
        .one_minus_beta2 = (float)(1.0 - b2),
        .step_size = (float)(lr / bc1),
        .bc2_sqrt = (float)sqrt(bc2),
        .eps = hp->eps,
    };
    return WGML_OK;
}

/* Checks one parameter's four tensors; idx < 0 for the single-tensor op (names without [i]). */
static wgml_status check_param(wgml_engine *e, const char *fn, long idx, const wgml_tensor *w, const wgml_tensor *g,
                               const wgml_tensor *m, const wgml_tensor *v)
{
    char nw[40], ng[40], nm[40], nv[40];
    if (idx < 0) {
        snprintf(nw, sizeof nw, "weight"); snprintf(ng, sizeof ng, "grad");
        snprintf(nm, sizeof nm, "m"); snprintf(nv, sizeof nv, "v");
    } else {
        snprintf(nw, sizeof nw, "weights[%ld]", idx); snprintf(ng, sizeof ng, "grads[%ld]", idx);
        snprintf(nm, sizeof nm, "m[%ld]", idx); snprintf(nv, sizeof nv, "v[%ld]", idx);
    }
    WGML_CHECK(wgml__check_tensor(e, fn, nw, w, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, ng, g, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, nm, m, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, nv, v, WGML_F32));
    WGML_CHECK(wgml__check_same_numel(e, fn, nw, w, ng, g));
    WGML_CHECK(wgml__check_same_numel(e, fn, nw, w, nm, m));
    WGML_CHECK(wgml__check_same_numel(e, fn, nw, w, nv, v));
    WGML_CHECK(wgml__check_u32_numel(e, fn, nw, w));
    return WGML_OK;
}

/* A buffer and what it is, for finding a tensor passed twice among many. */
typedef struct use { WGPUBuffer buffer; int role; size_t idx; } use;   /* role 0 weights, 1 grads, 2 m, 3 v */

static int cmp_use(const void *a, const void *b)
{
    const use *x = a, *y = b;
    if (x->buffer != y->buffer) return (uintptr_t)x->buffer < (uintptr_t)y->buffer ? -1 : 1;
    if (x->role != y->role) return x->role < y->role ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static const char *const role_names[4] = { "weights", "grads", "m", "v" };

/* Every weight, m and v tensor is updated in place, so each must appear once among all
   4 * count tensors; a gradient may be shared by several parameters (it is only read) but
   must not be one of the updated tensors. */
static wgml_status check_distinct(wgml_engine *e, const char *fn, wgml_tensor *const *w, const wgml_tensor *const *g,
                                  wgml_tensor *const *m, wgml_tensor *const *v, size_t count)
{
    use *u = malloc(4 * count * sizeof *u);
    if (!u) return wgml__fail(e->ctx, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    for (size_t i = 0; i < count; i++) {
        u[4 * i + 0] = (use){ w[i]->buffer, 0, i };
        u[4 * i + 1] = (use){ g[i]->buffer, 1, i };
        u[4 * i + 2] = (use){ m[i]->buffer, 2, i };
        u[4 * i + 3] = (use){ v[i]->buffer, 3, i };
    }
    qsort(u, 4 * count, sizeof *u, cmp_use);
    for (size_t i = 1; i < 4 * count; i++) {
        const use *a = &u[i - 1], *b = &u[i];
        if (a->buffer != b->buffer || (a->role == 1 && b->role == 1)) continue;
        wgml_status s = wgml__fail(e->ctx, WGML_ERROR_ALIAS, "%s: %s[%zu] must not be the same tensor as %s[%zu]", fn,
                                   role_names[b->role], b->idx, role_names[a->role], a->idx);
        free(u);
        return s;
    }
    free(u);
    return WGML_OK;
}

/* How many parameters one dispatch can update: 4 storage buffers each. */
static uint32_t max_slots(wgml_engine *e)
{
    uint32_t k = e->ctx->limits.maxStorageBuffersPerShaderStage / 4;
    if (k > MAX_SLOTS) k = MAX_SLOTS;
    return k ? k : 1;
}

/* Records the updates of parameters [0, count) in dispatches of up to max_slots() each. */
static wgml_status record(wgml_engine *e, adam_uniform *u, wgml_tensor *const *w, const wgml_tensor *const *g,
                          wgml_tensor *const *m, wgml_tensor *const *v, size_t count)
{
    uint32_t kmax = max_slots(e);
    uint64_t max_wg = (uint64_t)e->ctx->limits.maxComputeWorkgroupsPerDimension * e->ctx->limits.maxComputeWorkgroupsPerDimension;
    for (size_t first = 0; first < count;) {
        uint32_t k = 0;
        uint64_t total = 0;
        wgml__arg args[4 * MAX_SLOTS];
        while (k < kmax && first + k < count) {
            size_t i = first + k;
            uint64_t n4 = (wgml_tensor_numel(w[i]) + 3) / 4, groups = (n4 + WG * EU - 1) / (WG * EU);
            if (k > 0 && total + groups > max_wg) break;   /* the grid is full: next dispatch */
            total += groups;
            u->slots[k][0] = (uint32_t)total;
            u->slots[k][1] = (uint32_t)n4;
            args[4 * k + 0] = wgml__t(w[i]);
            args[4 * k + 1] = wgml__t(g[i]);
            args[4 * k + 2] = wgml__t(m[i]);
            args[4 * k + 3] = wgml__t(v[i]);
            k++;
        }
        uint32_t gx, gy;
        WGML_CHECK(wgml__grid(e->ctx, total, &gx, &gy));
        wgml__kernel kern = { .file = "optim", .entry = adam_entries[k - 1], .layout = adam_layouts[k - 1], .nconst = 1,
                              .constants = { { "WG", WG } } };
        WGML_CHECK(wgml__dispatch(e, &kern, u, sizeof *u, args, 4 * k, gx, gy, 1));
        first += k;
    }
    return WGML_OK;
}

wgml_status wgml_adamw_update(wgml_engine *e, wgml_tensor *weight, const wgml_tensor *grad, wgml_tensor *m, wgml_tensor *v,
                              const wgml_adam_params *params)
{
    const char *fn = "wgml_adamw_update";
    WGML_CHECK(wgml__check_engine(e, fn));
    WGML_CHECK(check_param(e, fn, -1, weight, grad, m, v));
    WGML_CHECK(wgml__check_no_alias(e, fn, "weight", weight, "grad", grad));
    WGML_CHECK(wgml__check_no_alias(e, fn, "m", m, "weight", weight));
    WGML_CHECK(wgml__check_no_alias(e, fn, "m", m, "grad", grad));
    WGML_CHECK(wgml__check_no_alias(e, fn, "v", v, "weight", weight));
    WGML_CHECK(wgml__check_no_alias(e, fn, "v", v, "grad", grad));
    WGML_CHECK(wgml__check_no_alias(e, fn, "v", v, "m", m));
    adam_uniform u;
    WGML_CHECK(adam_constants(e, fn, params, &u));
    return record(e, &u, &weight, &grad, &m, &v, 1);
}

wgml_status wgml_adamw_update_multi(wgml_engine *e, wgml_tensor *const *weights, const wgml_tensor *const *grads,
                                    wgml_tensor *const *m, wgml_tensor *const *v, size_t count,
                                    const wgml_adam_params *params)
{
    const char *fn = "wgml_adamw_update_multi";
    WGML_CHECK(wgml__check_engine(e, fn));
    if (!weights) return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: weights is NULL", fn);
    if (!grads) return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: grads is NULL", fn);
    if (!m) return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: m is NULL", fn);
    if (!v) return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: v is NULL", fn);
    if (count == 0) return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: count is 0", fn);
    for (size_t i = 0; i < count; i++) WGML_CHECK(check_param(e, fn, (long)i, weights[i], grads[i], m[i], v[i]));
    WGML_CHECK(check_distinct(e, fn, weights, grads, m, v, count));
    adam_uniform u;
    WGML_CHECK(adam_constants(e, fn, params, &u));
    return record(e, &u, weights, grads, m, v, count);
}

const wgml__kernel wgml__optim_kernels[] = {
    { .file = "optim", .entry = "sgd", .layout = "uwr", .nconst = 1, .constants = { { "WG", WG } } },
    { .file = "optim", .entry = "adamw_x1", .layout = "uwrww", .nconst = 1, .constants = { { "WG", WG } } },
    { .file = "optim", .entry = "adamw_x2", .layout = "uwrwwwrww", .nconst = 1, .constants = { { "WG", WG } } },
};
const size_t wgml__optim_kernel_count = sizeof wgml__optim_kernels / sizeof wgml__optim_kernels[0];
