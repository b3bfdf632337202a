/* The table of adapter profiles (see src/tuning.h). Figures come from measurements written
   down in bench/notes (the recorder's in overhead.md) or from the vendor's data sheet. */
#include "tuning.h"

#include <stddef.h>
#include <string.h>

/* The recorder's defaults, measured on the H200 and on lavapipe (bench/notes/overhead.md):
   96 dispatches per batch; on a GPU, syncs and reads wait on "work done" and poll for 2 ms
   first; on a CPU adapter they map (a pending work-done wait slowed lavapipe's dependent
   chains) and block at once (the driver needs the cores). */
#define GPU_RECORDER .batch_first = 96, .batch_max = 96, .sync_by_work_done = true, .read_after_work_done = true, \
                     .wait_spin_us = 2000, .timeout_ms = 60000

/* Known adapters: the vendor id and a substring of the name the adapter reports. */
static const struct { uint32_t vendor_id; const char *match; wgml__profile profile; } known[] = {
    /* NVIDIA's data sheet: 132 SMs */
    { 0x10de, "H200", { .name = "NVIDIA H200", .compute_units = 132, GPU_RECORDER } },
};

static const wgml__profile generic_gpu = { .name = "GPU", GPU_RECORDER };

/* CPU adapters: kernels are compiled inside the waits on first use (a cold shader cache
   on a 2-core machine was seen waiting over a minute), hence the long timeout. */
static const wgml__profile generic_cpu = { .name = "CPU", .cpu = true, .batch_first = 96, .batch_max = 96,
                                           .timeout_ms = 600000 };

const wgml__profile *wgml__profile_of(const char *name, uint32_t vendor_id, bool cpu)
{
    if (cpu) return &generic_cpu;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (vendor_id == known[i].vendor_id && name && strstr(name, known[i].match)) return &known[i].profile;
    return &generic_gpu;
}
