/* wgml info: the adapter wgml picks, its limits and features, and a one-second self-check
   (element-wise adds verified against the CPU); with --all, every adapter first, numbered
   as device indices. */
#include "cli.h"
#include "commands.h"
#include "wgml.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int self_check(wgml_context *ctx)
{
    wgml_engine *eng = NULL;
    wgml_tensor *a = NULL, *b = NULL, *c = NULL;
    enum { N = 1 << 16 };
    float *ha = malloc(N * sizeof *ha), *hb = malloc(N * sizeof *hb), *hc = malloc(N * sizeof *hc);
    int ok = 0;
    if (!ha || !hb || !hc) goto done;
    for (int i = 0; i < N; i++) {
        ha[i] = (float)(((unsigned)i * 7919u) % 1000u) * 0.001f - 0.5f;
        hb[i] = (float)(((unsigned)i * 104729u) % 997u) * 0.01f;
    }
    size_t shape[] = { N };
    if (wgml_engine_create(ctx, &eng) || wgml_tensor_from_data(ctx, WGML_F32, 1, shape, ha, &a) ||
        wgml_tensor_from_data(ctx, WGML_F32, 1, shape, hb, &b) || wgml_tensor_create(ctx, WGML_F32, 1, shape, &c))
        goto done;
    double t0 = now_s();
    int rounds = 0;
    while (now_s() - t0 < 1.0) {
        if (wgml_add(eng, a, b, c) != WGML_OK || wgml_tensor_read(c, 0, hc, N * sizeof *hc) != WGML_OK) goto done;
        for (int i = 0; i < N; i++)
            if (fabsf(hc[i] - (ha[i] + hb[i])) > 1e-6f * fabsf(ha[i] + hb[i])) {
                printf("self-check: FAILED at element %d: %g + %g gave %g\n", i, ha[i], hb[i], hc[i]);
                goto done;
            }
        rounds++;
    }
    printf("self-check: ok (%d adds of %d floats verified against the CPU in %.2f s)\n", rounds, N, now_s() - t0);
    ok = 1;
done:
    if (!ok && wgml_last_error(ctx)[0]) printf("self-check: FAILED: %s\n", wgml_last_error(ctx));
    wgml_tensor_release(a);
    wgml_tensor_release(b);
    wgml_tensor_release(c);
    wgml_engine_destroy(eng);
    free(ha); free(hb); free(hc);
    return ok;
}

/* One line per adapter, numbered as wgml_context_desc.device_index and WGML_DEVICE count. */
static int list_adapters(void)
{
    wgml_adapter_info list[16];
    uint32_t n = 0;
    if (wgml_adapter_list(NULL, list, 16, &n) != WGML_OK) {
        fprintf(stderr, "wgml info: %s\n", wgml_last_error(NULL));
        return 0;
    }
    if (n == 0) printf("adapters:     none\n");
    else printf("adapters:     %u, numbered by device index (WGML_DEVICE=<index> picks one)\n", n);
    for (uint32_t i = 0; i < n && i < 16; i++)
        printf("%u: %s (%s, %s), vendor %s (0x%04x), device 0x%04x, driver %s\n", i, list[i].name, list[i].backend,
               list[i].type, list[i].vendor, list[i].vendor_id, list[i].device_id, list[i].driver);
    if (n > 16) printf("... and %u more\n", n - 16);
    printf("\n");
    return 1;
}

typedef struct info_opts {
    int all;
} info_opts;

static const cli_flag info_flags[] = {
    { "--all", CLI_BOOL, offsetof(info_opts, all), "list every adapter with its device index first" },
};

int cmd_info(int argc, char **argv)
{
    info_opts o = { 0 };
    int pr = cli_parse(argc, argv, info_flags, sizeof info_flags / sizeof info_flags[0], &o, "wgml info [--all]",
                       "Shows the adapter wgml picks (WGML_ADAPTER, WGML_BACKEND, WGML_DEVICE choose another), its limits "
                       "and features, and runs a one-second self-check. --all lists every adapter first, numbered by "
                       "device index in the order wgml prefers them (discrete, integrated, CPU); WGML_DEVICE=<index> "
                       "picks one (counted among those WGML_BACKEND and WGML_ADAPTER leave, when set).");
    if (pr <= 0) return -pr;
    if (o.all && !list_adapters()) return 1;
    wgml_context *ctx;
    if (wgml_context_create(NULL, &ctx) != WGML_OK) {
        fprintf(stderr, "wgml info: %s\n", wgml_last_error(NULL));
        return 1;
    }
    wgml_adapter_info in;
    wgml_context_info(ctx, &in);
    printf("wgml %s\n", wgml_version());
    printf("adapter:      %s\n", in.name);
    printf("type:         %s\n", in.type);
    printf("backend:      %s\n", in.backend);
    printf("vendor:       %s (0x%04x), architecture \"%s\", device 0x%04x\n", in.vendor, in.vendor_id, in.architecture, in.device_id);
    printf("driver:       %s\n", in.driver);
    printf("subgroups:    %s, size %u..%u\n", in.subgroups ? "yes" : "no", in.subgroup_min_size, in.subgroup_max_size);
    printf("shader-f16:   %s\n", in.shader_f16 ? "yes" : "no");
    printf("timestamps:   %s\n", in.timestamp_query ? "yes" : "no");
    if (in.matrix_m)
        printf("matrices:     f16 x f16 -> f32 subgroup matrices, %u x %u x %u (M x N x K)\n", in.matrix_m, in.matrix_n,
               in.matrix_k);
    else
        printf("matrices:     none (f16 products run on FMA kernels)\n");
    printf("limits:       maxBufferSize %llu, maxStorageBufferBindingSize %llu\n", (unsigned long long)in.max_buffer_size,
           (unsigned long long)in.max_storage_buffer_binding_size);
    printf("              workgroup storage %u B, %u invocations per workgroup, %u workgroups per dimension, %u storage buffers per stage\n",
           in.max_workgroup_storage_size, in.max_invocations_per_workgroup, in.max_workgroups_per_dimension,
           in.max_storage_buffers_per_stage);
    int ok = self_check(ctx);
    wgml_context_destroy(ctx);
    return ok ? 0 : 1;
}
