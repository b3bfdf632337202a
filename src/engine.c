/* Engine: the pipeline cache and the one dispatch helper every op uses. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct wgml__pipeline {
    const char *file, *entry, *layout;
    bool subgroups, matrix;
    uint32_t nconst;
    const char *const_names[WGML__MAX_CONSTANTS];
    double const_values[WGML__MAX_CONSTANTS];
    WGPUComputePipeline pipeline;
    WGPUBindGroupLayout bgl;
};

wgml_status wgml_engine_create(wgml_context *ctx, wgml_engine **out)
{
    if (out) *out = NULL;
    if (!ctx) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_engine_create: ctx is NULL");
    if (!out) return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "wgml_engine_create: out is NULL");
    WGML_CHECK(wgml__check_device(ctx));
    wgml_engine *e = calloc(1, sizeof *e);
    if (e) e->modules = calloc(wgml__wgsl_count ? 2 * wgml__wgsl_count : 1, sizeof *e->modules);
    if (!e || !e->modules) {
        free(e);
        return wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "wgml_engine_create: out of host memory");
    }
    e->ctx = ctx;
    ctx->live_engines++;
    *out = e;
    return WGML_OK;
}

void wgml_engine_destroy(wgml_engine *e)
{
    if (!e) return;
    if (wgml__deferred_uses(e->ctx, NULL, e)) wgml__defer_error(e->ctx, wgml__deferred_flush(e->ctx));
    wgml__bind_cache_forget_engine(e->ctx, e);
    e->ctx->pass_pipeline = NULL;   /* set the next pipeline again, whatever its handle */
    for (uint32_t i = 0; i < e->npipelines; i++) {
        wgpuComputePipelineRelease(e->pipelines[i].pipeline);
        wgpuBindGroupLayoutRelease(e->pipelines[i].bgl);
    }
    for (size_t i = 0; i < 2 * wgml__wgsl_count; i++)
        if (e->modules[i]) wgpuShaderModuleRelease(e->modules[i]);
    for (uint32_t i = 0; i < WGML__SCRATCH_SLOTS; i++) wgml__scratch_discard(e, i);
    e->ctx->live_engines--;
    free(e->pipelines);
    free(e->modules);
    free(e);
}

/* ---- compilation -------------------------------------------------------------------- */

typedef struct scope_msg { WGPUErrorType type; char text[WGML_ERROR_MAX - 128]; } scope_msg;

static void on_pop(WGPUPopErrorScopeStatus status, WGPUErrorType type, WGPUStringView msg, void *u1, void *u2)
{
    (void)u2;
    scope_msg *m = u1;
    m->type = status == WGPUPopErrorScopeStatus_Success ? type : WGPUErrorType_Unknown;
    size_t n = msg.data ? (msg.length == WGPU_STRLEN ? strlen(msg.data) : msg.length) : 0;
    if (n >= sizeof m->text) n = sizeof m->text - 1;
    if (n) memcpy(m->text, msg.data, n);
    m->text[n] = 0;
}

static wgml_status pop_scope(wgml_context *ctx, const char *what)
{
    scope_msg m = { 0 };
    WGPUFuture f = wgpuDevicePopErrorScope(ctx->device,
        (WGPUPopErrorScopeCallbackInfo){ .mode = WGPUCallbackMode_WaitAnyOnly, .callback = on_pop, .userdata1 = &m });
    WGML_CHECK(wgml__wait(ctx, f, what));
    if (m.type != WGPUErrorType_NoError)
        return wgml__fail(ctx, WGML_ERROR_DEVICE, "%s failed: %s", what, m.text);
    return WGML_OK;
}

static const wgml__wgsl_source *find_wgsl(const char *name, size_t *index)
{
    for (size_t i = 0; i < wgml__wgsl_count; i++)
        if (strcmp(wgml__wgsl_sources[i].name, name) == 0) {
            *index = i;
            return &wgml__wgsl_sources[i];
        }
    return NULL;
}

/* Compiles code (n bytes) as the module of file into *slot; what names it in errors. */
static wgml_status compile(wgml_engine *e, const char *label, const char *code, size_t n, const char *what,
                           WGPUShaderModule *slot)
{
    WGPUShaderSourceWGSL wgsl = { .chain = { .sType = WGPUSType_ShaderSourceWGSL }, .code = { code, n } };
    wgpuDevicePushErrorScope(e->ctx->device, WGPUErrorFilter_Validation);
    WGPUShaderModule m = wgpuDeviceCreateShaderModule(e->ctx->device, &(WGPUShaderModuleDescriptor){
        .nextInChain = &wgsl.chain, .label = { label, WGPU_STRLEN } });
    wgml_status s = pop_scope(e->ctx, what);
    if (s != WGML_OK) {
        if (m) wgpuShaderModuleRelease(m);
        return s;
    }
    *slot = m;
    return WGML_OK;
}

/* The family prelude of file (see get_module), or NULL. */
static const wgml__wgsl_source *prelude_of(const char *file, char *name, size_t n)
{
    size_t k;
    const char *us = strchr(file, '_');
    snprintf(name, n, "%.*s_prelude", us ? (int)(us - file) : 0, file);
    return us && strcmp(file, name) ? find_wgsl(name, &k) : NULL;
}

/* The module of a matrix-unit file (wgml__kernel.matrix): its enables and the adapter's
   subgroup-matrix shape as constants, then its family prelude where it has one (as
   get_module), then the file. */
static wgml_status get_matrix_module(wgml_engine *e, const char *file, WGPUShaderModule *out)
{
    size_t i;
    char pre[96];
    const wgml__wgsl_source *src = find_wgsl(file, &i), *prelude = prelude_of(file, pre, sizeof pre);
    const wgml_adapter_info *in = &e->ctx->info;
    if (!src) return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "internal: no kernel file %s.wgsl", file);
    if (!in->matrix_m)
        return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "internal: %s.wgsl needs subgroup matrices, which the device lacks",
                          file);
    WGPUShaderModule *slot = &e->modules[i];
    if (!*slot) {
        char head[256];
        int h = snprintf(head, sizeof head,
                         "enable f16;\nenable subgroups;\nenable chromium_experimental_subgroup_matrix;\n"
                         "const SM: u32 = %uu;\nconst SN: u32 = %uu;\nconst SK: u32 = %uu;\n",
                         in->matrix_m, in->matrix_n, in->matrix_k);
        size_t np = prelude ? prelude->size + 1 : 0, n = (size_t)h + np + src->size;
        char *code = malloc(n);
        if (!code) return wgml__fail(e->ctx, WGML_ERROR_OUT_OF_MEMORY, "out of host memory");
        memcpy(code, head, (size_t)h);
        if (prelude) {
            memcpy(code + h, prelude->code, prelude->size);
            code[h + prelude->size] = '\n';
        }
        memcpy(code + h + np, src->code, src->size);
        char what[200];
        snprintf(what, sizeof what, "compiling %s%s%ssrc/kernels/%s.wgsl", prelude ? "src/kernels/" : "", prelude ? pre : "",
                 prelude ? ".wgsl + " : "", file);
        wgml_status s = compile(e, file, code, n, what, slot);
        free(code);
        WGML_CHECK(s);
    }
    *out = *slot;
    return WGML_OK;
}

/* The module of src/kernels/<file>.wgsl, or with subgroups the module of
   `enable subgroups;`, that file and <file>_subgroups.wgsl (whose entry points use the
   first file's functions and subgroup built-ins, which WGSL allows only after the enable).

   Preludes: a family of kernel files named <family>_<job>.wgsl (attention_forward,
   attention_backward, ...) shares its declarations (parameter struct, bindings, helpers)
   through <family>_prelude.wgsl when that file exists: the module of each job file is
   then compiled from the prelude followed by the file, so that every job compiles only
   its own entry points and each file reads on its own. <family> is the file name up to
   its first '_'; a file without a prelude is compiled alone. */
static wgml_status get_module(wgml_engine *e, const char *file, bool subgroups, bool matrix, WGPUShaderModule *out)
{
    if (matrix) return get_matrix_module(e, file, out);
    static const char enable[] = "enable subgroups;\n";
    size_t i, j;
    char part[96], pre[96];
    snprintf(part, sizeof part, "%s_subgroups", file);
    const wgml__wgsl_source *src = find_wgsl(file, &i), *sub = subgroups ? find_wgsl(part, &j) : NULL;
    const wgml__wgsl_source *prelude = prelude_of(file, pre, sizeof pre);
    if (!src || (subgroups && !sub))
        return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "internal: no kernel file %s.wgsl", src ? part : file);
    WGPUShaderModule *slot = &e->modules[i + (subgroups ? wgml__wgsl_count : 0)];
    if (!*slot) {
        /* the parts in order: the enable line, then the files with a newline between two */
        wgml__wgsl_source parts[3];
        size_t nparts = 0, n = subgroups ? sizeof enable - 1 : 0;
        if (prelude) parts[nparts++] = *prelude;
        parts[nparts++] = *src;
        if (subgroups) parts[nparts++] = *sub;
        char *joined = NULL;
        WGPUStringView code = { src->code, src->size };
        if (nparts > 1) {   /* with subgroups always */
            for (size_t x = 0; x < nparts; x++) n += parts[x].size + (x > 0);
            joined = malloc(n);
            if (!joined) return wgml__fail(e->ctx, WGML_ERROR_OUT_OF_MEMORY, "out of host memory");
            n = 0;
            if (subgroups) {
                memcpy(joined, enable, sizeof enable - 1);
                n = sizeof enable - 1;
            }
            for (size_t x = 0; x < nparts; x++) {
                if (x > 0) joined[n++] = '\n';
                memcpy(joined + n, parts[x].code, parts[x].size);
                n += parts[x].size;
            }
            code = (WGPUStringView){ joined, n };
        }
        char what[300];
        snprintf(what, sizeof what, "compiling %s%s%ssrc/kernels/%s.wgsl%s%s%s", prelude ? "src/kernels/" : "",
                 prelude ? pre : "", prelude ? ".wgsl + " : "", file, subgroups ? " with " : "", subgroups ? part : "",
                 subgroups ? ".wgsl" : "");
        wgml_status s = compile(e, subgroups ? part : file, code.data, code.length, what, slot);
        free(joined);
        WGML_CHECK(s);
    }
    *out = *slot;
    return WGML_OK;
}

static bool same_kernel(const wgml__pipeline *p, const wgml__kernel *k)
{
    if (strcmp(p->file, k->file) || strcmp(p->entry, k->entry) || strcmp(p->layout, k->layout) || p->nconst != k->nconst ||
        p->subgroups != k->subgroups || p->matrix != k->matrix)
        return false;
    for (uint32_t i = 0; i < k->nconst; i++)
        if (strcmp(p->const_names[i], k->constants[i].name) || p->const_values[i] != k->constants[i].value) return false;
    return true;
}

static WGPUBindGroupLayout make_layout(wgml_context *ctx, const char *layout)
{
    WGPUBindGroupLayoutEntry entries[16];
    size_t n = strlen(layout);
    for (size_t i = 0; i < n; i++) {
        WGPUBufferBindingType type = layout[i] == 'u' ? WGPUBufferBindingType_Uniform
                                   : layout[i] == 'r' ? WGPUBufferBindingType_ReadOnlyStorage
                                                      : WGPUBufferBindingType_Storage;
        entries[i] = (WGPUBindGroupLayoutEntry){ .binding = (uint32_t)i, .visibility = WGPUShaderStage_Compute,
                                                 .buffer = { .type = type, .hasDynamicOffset = layout[i] == 'u' } };
    }
    return wgpuDeviceCreateBindGroupLayout(ctx->device, &(WGPUBindGroupLayoutDescriptor){ .entryCount = n, .entries = entries });
}

wgml_status wgml__pipeline_get(wgml_engine *e, const wgml__kernel *k, WGPUComputePipeline *out, WGPUBindGroupLayout *bgl_out)
{
    for (uint32_t i = 0; i < e->npipelines; i++)
        if (same_kernel(&e->pipelines[i], k)) {
            *out = e->pipelines[i].pipeline;
            *bgl_out = e->pipelines[i].bgl;
            return WGML_OK;
        }
    wgml_context *ctx = e->ctx;
    size_t nb = strlen(k->layout);
    if (nb == 0 || nb > 16 || k->nconst > WGML__MAX_CONSTANTS) return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "internal: kernel %s has a bad layout", k->entry);
    WGPUShaderModule module = NULL;
    if (k->subgroups && !ctx->info.subgroups)
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "internal: kernel %s needs subgroups, which the device lacks", k->entry);
    WGML_CHECK(get_module(e, k->file, k->subgroups, k->matrix, &module));

    wgpuDevicePushErrorScope(ctx->device, WGPUErrorFilter_Validation);
    WGPUBindGroupLayout bgl = make_layout(ctx, k->layout);
    WGPUPipelineLayout pl = wgpuDeviceCreatePipelineLayout(ctx->device, &(WGPUPipelineLayoutDescriptor){
        .bindGroupLayoutCount = 1, .bindGroupLayouts = &bgl });
    WGPUConstantEntry consts[WGML__MAX_CONSTANTS];
    for (uint32_t i = 0; i < k->nconst; i++)
        consts[i] = (WGPUConstantEntry){ .key = { k->constants[i].name, WGPU_STRLEN }, .value = k->constants[i].value };
    if (ctx->log_kernels) {
        fprintf(stderr, "wgml: kernel %s.wgsl:%s", k->file, k->entry);
        for (uint32_t i = 0; i < k->nconst; i++) fprintf(stderr, " %s=%g", k->constants[i].name, k->constants[i].value);
        fprintf(stderr, "\n");
    }
    WGPUComputePipeline p = wgpuDeviceCreateComputePipeline(ctx->device, &(WGPUComputePipelineDescriptor){
        .label = { k->entry, WGPU_STRLEN },
        .layout = pl,
        .compute = { .module = module, .entryPoint = { k->entry, WGPU_STRLEN }, .constantCount = k->nconst, .constants = consts } });
    wgpuPipelineLayoutRelease(pl);
    char what[200];
    snprintf(what, sizeof what, "building kernel %s of src/kernels/%s.wgsl", k->entry, k->file);
    wgml_status s = pop_scope(ctx, what);
    if (s != WGML_OK) {
        if (p) wgpuComputePipelineRelease(p);
        if (bgl) wgpuBindGroupLayoutRelease(bgl);
        return s;
    }
    if (e->npipelines == e->cap_pipelines) {
        uint32_t cap = e->cap_pipelines ? 2 * e->cap_pipelines : 32;
        wgml__pipeline *np = realloc(e->pipelines, cap * sizeof *np);
        if (!np) {
            wgpuComputePipelineRelease(p);
            wgpuBindGroupLayoutRelease(bgl);
            return wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "out of host memory");
        }
        e->pipelines = np;
        e->cap_pipelines = cap;
    }
    wgml__pipeline *slot = &e->pipelines[e->npipelines++];
    *slot = (wgml__pipeline){ .file = k->file, .entry = k->entry, .layout = k->layout, .subgroups = k->subgroups,
                              .matrix = k->matrix,
                              .nconst = k->nconst, .pipeline = p, .bgl = bgl };
    for (uint32_t i = 0; i < k->nconst; i++) {
        slot->const_names[i] = k->constants[i].name;
        slot->const_values[i] = k->constants[i].value;
    }
    *out = p;
    *bgl_out = bgl;
    return WGML_OK;
}

/* ---- scratch ------------------------------------------------------------------------ */

wgml_status wgml__scratch(wgml_engine *e, uint32_t slot, uint64_t bytes, wgml__arg *out)
{
    wgml_tensor *t = e->scratch[slot];
    if (!t || t->capacity < bytes) {
        /* a power of two, so that a slot grown step by step is reallocated a few times only;
           the exact size (in vec4) where the power of two would exceed the binding limit */
        uint64_t words = 1024, limit = e->ctx->limits.maxStorageBufferBindingSize;
        while (words * 4 < bytes) words *= 2;
        if (words * 4 > limit && bytes <= limit) words = (bytes + 15) / 16 * 4;
        wgml_tensor *nt;
        WGML_CHECK(wgml_tensor_create(e->ctx, WGML_U32, 1, (size_t[]){ (size_t)words }, &nt));
        e->ctx->live_tensors--;   /* the engine's, not the caller's */
        wgml__scratch_discard(e, slot);
        e->scratch[slot] = t = nt;
    }
    *out = wgml__t(t);
    return WGML_OK;
}

void wgml__scratch_discard(wgml_engine *e, uint32_t slot)
{
    if (!e->scratch[slot]) return;
    e->ctx->live_tensors++;
    wgml_tensor_release(e->scratch[slot]);   /* work already recorded keeps its buffer alive */
    e->scratch[slot] = NULL;
}

/* ---- dispatch ----------------------------------------------------------------------- */

wgml_status wgml__grid(wgml_context *ctx, uint64_t workgroups, uint32_t *gx, uint32_t *gy)
{
    uint64_t max = ctx->limits.maxComputeWorkgroupsPerDimension;
    if (workgroups == 0) workgroups = 1;
    if (workgroups <= max) {
        *gx = (uint32_t)workgroups;
        *gy = 1;
        return WGML_OK;
    }
    uint64_t y = (workgroups + max - 1) / max;
    if (y > max) return wgml__fail(ctx, WGML_ERROR_LIMIT, "%llu workgroups exceed the device's grid", (unsigned long long)workgroups);
    *gy = (uint32_t)y;
    *gx = (uint32_t)((workgroups + y - 1) / y);
    return WGML_OK;
}

wgml_status wgml__dispatch(wgml_engine *e, const wgml__kernel *k, const void *params, uint32_t params_size,
                           const wgml__arg *args, uint32_t nargs, uint32_t gx, uint32_t gy, uint32_t gz)
{
    wgml_context *ctx = e->ctx;
    WGML_CHECK(wgml__deferred_flush(ctx));   /* the ops called before this one go first */
    WGPUComputePipeline pipeline;
    WGPUBindGroupLayout bgl;
    WGML_CHECK(wgml__pipeline_get(e, k, &pipeline, &bgl));
    size_t nb = strlen(k->layout);
    WGPUBindGroupEntry entries[16];
    wgml__bind_key key = { .engine = e, .layout = bgl, .nbuffers = (uint32_t)nb };
    uint32_t dyn_offset = 0, ndyn = 0, a = 0;
    for (size_t i = 0; i < nb; i++) {
        if (k->layout[i] == 'u') {
            WGPUBuffer ub;
            WGML_CHECK(wgml__uniform_alloc(ctx, params, params_size, &ub, &dyn_offset));
            ndyn = 1;
            entries[i] = (WGPUBindGroupEntry){ .binding = (uint32_t)i, .buffer = ub, .offset = 0, .size = ctx->uniform_stride };
        } else {
            if (a >= nargs) return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "internal: kernel %s needs more arguments", k->entry);
            entries[i] = (WGPUBindGroupEntry){ .binding = (uint32_t)i, .buffer = args[a].buffer, .offset = 0, .size = args[a].size };
            a++;
        }
        key.buffers[i] = entries[i].buffer;
        key.sizes[i] = entries[i].size;
    }
    if (gx == 0 || gy == 0 || gz == 0) return WGML_OK;   /* nothing to do */
    WGPUBindGroup bg = wgml__bind_cache_get(ctx, &key, entries, (uint32_t)nb);
    if (!bg) return wgml__fail(ctx, WGML_ERROR_DEVICE, "could not create a bind group for kernel %s", k->entry);
    for (size_t i = 0, j = 0; i < nb; i++) {   /* before the dispatch is recorded: never too late */
        if (k->layout[i] == 'u') continue;
        if (k->layout[i] == 'w' && args[j].tensor) wgml__wrote(args[j].tensor);
        j++;
    }
    WGPUComputePassEncoder pass = wgml__pass(ctx);
    if (ctx->pass_pipeline != pipeline) {   /* a chain of one op sets it once per pass */
        wgpuComputePassEncoderSetPipeline(pass, pipeline);
        ctx->pass_pipeline = pipeline;
    }
    wgpuComputePassEncoderSetBindGroup(pass, 0, bg, ndyn, &dyn_offset);
    wgpuComputePassEncoderDispatchWorkgroups(pass, gx, gy, gz);
    return wgml__after_record(ctx);
}
