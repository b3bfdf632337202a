/* wgml_engine_warmup: compiles the default kernel variants of every op family up front.
   Each family lists its variants next to its ops (src/ops/<family>.c) as
   wgml__<family>_kernels; add a family's list here when it gains one. */
#include "internal.h"

#define FAMILY(name)                                      \
    extern const wgml__kernel wgml__##name##_kernels[];   \
    extern const size_t wgml__##name##_kernel_count;
FAMILY(elementwise)
#undef FAMILY

static const struct { const wgml__kernel *list; const size_t *count; } families[] = {
    { wgml__elementwise_kernels, &wgml__elementwise_kernel_count },
};

wgml_status wgml_engine_warmup(wgml_engine *e)
{
    WGML_CHECK(wgml__check_engine(e, "wgml_engine_warmup"));
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
        for (size_t i = 0; i < *families[f].count; i++) {
            WGPUComputePipeline p;
            WGPUBindGroupLayout l;
            WGML_CHECK(wgml__pipeline_get(e, &families[f].list[i], &p, &l));
        }
    return WGML_OK;
}
