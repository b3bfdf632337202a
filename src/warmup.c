/* wgml_engine_warmup: compiles the default kernel variants of every op family up front.
   Each family lists its variants next to its ops (src/ops/<family>.c) as
   wgml__<family>_kernels and wgml__<family>_kernel_count. The declarations are weak so a
   family without a list (or not built) is skipped rather than breaking the link. */
#include "internal.h"

#define FAMILIES(X) \
    X(elementwise) X(copy) X(activation) X(select) X(conv) X(quant) X(matmul) X(norm) X(softmax) \
    X(rope) X(attention) X(optim) X(loss) X(grad) X(embedding) X(sample)

#define DECLARE(name)                                                          \
    extern const wgml__kernel wgml__##name##_kernels[] __attribute__((weak));  \
    extern const size_t wgml__##name##_kernel_count __attribute__((weak));
FAMILIES(DECLARE)
#undef DECLARE

#define ENTRY(name) { wgml__##name##_kernels, &wgml__##name##_kernel_count },
static const struct { const wgml__kernel *list; const size_t *count; } families[] = { FAMILIES(ENTRY) };
#undef ENTRY

wgml_status wgml_engine_warmup(wgml_engine *e)
{
    WGML_CHECK(wgml__check_engine(e, "wgml_engine_warmup"));
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++) {
        if (!families[f].list || !families[f].count) continue;
        for (size_t i = 0; i < *families[f].count; i++) {
            if (families[f].list[i].subgroups && !e->ctx->info.subgroups) continue;   /* never chosen there */
            WGPUComputePipeline p;
            WGPUBindGroupLayout l;
            WGML_CHECK(wgml__pipeline_get(e, &families[f].list[i], &p, &l));
        }
    }
    return WGML_OK;
}
