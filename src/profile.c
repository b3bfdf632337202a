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

/* The matrix products' models and thresholds as fitted on the H200 (bench/notes/matmul.md):
   about 15 T FMA/s of the tile against 3 TB/s; a workgroup alone on an SM at 0.94 of its
   rate beside another, a last-round slice 41 values of K dearer than its length; the
   copies' and the second pass's thresholds where what they move costs a few percent of the
   product; gemv_rows with one row per workgroup, 4 for rows of at most 1024 and 8 for at
   most 512 where 512 workgroups remain; gemv_cols4 in 512 threads of 8 k-quads for 4096 -
   8191 columns (one workgroup per SM by registers). */
#define H200_MODELS .large_min_tiles = 128, .fill_threads = 65536, .fma_per_byte = 5, .alone_rate = 0.94, \
                    .slice_overhead_k = 41, .krem_min_k = 1024
#define H200_MATMUL                                                                                            \
    .matmul = { H200_MODELS, .copy_max_bytes = 256ull << 20, .copy_b_min_m = 1024, .copy_a_min_m = 1024,           \
                .copy_a_min_n = 512, .pad_min_other = 512, .gemv_rows = 1, .gemv_rows_k1024 = 4, .gemv_rows_k512 = 8, \
                .gemv_rows_min_workgroups = 512, .gemv_wide_cols_min = 4096, .gemv_wide_cols_end = 8192,           \
                .gemv_wide_threads = 512, .gemv_wide_quads = 8 }

/* Known adapters: the vendor id and a substring of the name the adapter reports. */
static const struct { uint32_t vendor_id; const char *match; wgml__profile profile; } known[] = {
    /* NVIDIA's data sheet: 132 SMs */
    { 0x10de, "H200", { .name = "NVIDIA H200", .compute_units = 132, GPU_RECORDER, H200_MATMUL } },
};

/* Any other GPU: the H200's values as a starting point. The products' thresholds are ratios
   of memory bandwidth to FMA rate, which differ less between GPUs than either does; a GPU
   whose ratios differ gets rules that are still sound, only tuned less closely. Its number
   of compute units is not known (0): src/ops/matmul.c's models then assume the H200's, so
   they choose as they always did. */
static const wgml__profile generic_gpu = { .name = "GPU", GPU_RECORDER, H200_MATMUL };

/* CPU adapters: kernels are compiled inside the waits on first use (a cold shader cache
   on a 2-core machine was seen waiting over a minute), hence the long timeout. The matrix
   products make no copies (lavapipe gained nothing from them) and run gemv_rows 4 rows to a
   workgroup whatever K (one row made lavapipe's decode 2.5 times slower); the wide gemv
   workgroups are never chosen (an empty range; their shape is the H200's, for tests that
   force them), and the models keep the H200's values (no measurement on a CPU says
   otherwise; the products' plans there stay what they were). */
static const wgml__profile generic_cpu = {
    .name = "CPU", .cpu = true, .batch_first = 96, .batch_max = 96, .timeout_ms = 600000,
    .matmul = { H200_MODELS, .gemv_rows = 4, .gemv_rows_k1024 = 4, .gemv_rows_k512 = 4, .gemv_wide_threads = 512,
                .gemv_wide_quads = 8 },
};

const wgml__profile *wgml__profile_of(const char *name, uint32_t vendor_id, bool cpu)
{
    if (cpu) return &generic_cpu;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (vendor_id == known[i].vendor_id && name && strstr(name, known[i].match)) return &known[i].profile;
    return &generic_gpu;
}

uint32_t wgml__units_of(const wgml__profile *p) { return p->compute_units ? p->compute_units : 132; }
