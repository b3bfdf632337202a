/* The process's address-space limit (ulimit -v, RLIMIT_AS) as a budget. Under such a
   limit the runtime and the CPU driver fail badly when an allocation of theirs is refused
   (Dawn throws std::bad_alloc, lavapipe's threads fault on memory they never got), so wgml
   refuses, with WGML_ERROR_OUT_OF_MEMORY, any large allocation that would take the
   process near the limit, before the runtime sees it. */
#include "internal.h"

#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

/* Room kept free under the limit for what the runtime and driver allocate on their own
   (command buffers, thread stacks, and on a CPU adapter the compiler that builds each
   kernel on first use: lavapipe was seen to fault compiling with 180 MiB left). */
#define HEADROOM_GPU ((uint64_t)256 << 20)
#define HEADROOM_CPU ((uint64_t)512 << 20)
/* What creating a device takes on top of that (lavapipe: about 700 MiB of address space
   for a process that has run nothing yet). */
#define DEVICE_ROOM ((uint64_t)768 << 20)
/* Smaller requests are not checked (each check reads /proc). */
#define CHECK_FROM ((uint64_t)1 << 20)

uint64_t wgml__address_limit(void)
{
    struct rlimit r;
    if (getrlimit(RLIMIT_AS, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return 0;
    return (uint64_t)r.rlim_cur;
}

/* Bytes of address space the process uses now (VmSize); 0 when unknown. */
static uint64_t address_used(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    unsigned long long pages = 0;
    int got = fscanf(f, "%llu", &pages);
    fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    return got == 1 && page > 0 ? pages * (uint64_t)page : 0;
}

wgml_status wgml__host_room(wgml_context *ctx, const char *fn, uint64_t bytes)
{
    if (!ctx->address_limit || bytes < CHECK_FROM) return WGML_OK;
    uint64_t used = address_used(), limit = ctx->address_limit;
    uint64_t headroom = ctx->cpu_adapter ? HEADROOM_CPU : HEADROOM_GPU;
    if (used + bytes + headroom <= limit) return WGML_OK;
    return wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY,
                      "%s: %llu MiB more would take the process past its address-space limit (ulimit -v: %llu MiB, %llu "
                      "MiB in use, %llu MiB kept for the runtime)", fn, (unsigned long long)(bytes >> 20),
                      (unsigned long long)(limit >> 20), (unsigned long long)(used >> 20),
                      (unsigned long long)(headroom >> 20));
}

wgml_status wgml__device_room(uint64_t limit)
{
    if (!limit) return WGML_OK;
    uint64_t used = address_used(), need = DEVICE_ROOM + HEADROOM_CPU;
    if (used + need <= limit) return WGML_OK;
    return wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY,
                      "wgml_context_create: the process's address-space limit (ulimit -v: %llu MiB, %llu MiB in use) leaves "
                      "less than the %llu MiB a WebGPU device and its kernels need", (unsigned long long)(limit >> 20),
                      (unsigned long long)(used >> 20), (unsigned long long)(need >> 20));
}
