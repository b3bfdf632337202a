/* Tuning: what the library knows of an adapter beyond its WebGPU limits (the profile),
   and the choices ops make that change speed but not results (the tuning of an engine).

   Nothing below the public API reads the environment for these: a context takes the
   profile of its adapter when it is created, an engine starts with every tuning field 0
   ("the op's rule decides", using the profile), and tests set fields of an engine's
   tuning directly to reach every path on every adapter. Which choice wins where is
   measured in bench/ and written down in bench/notes; the code keeps the rule. */
#ifndef WGML_TUNING_H
#define WGML_TUNING_H

#include "ops/attention_tuning.h"
#include "ops/matmul_tuning.h"

#include <stdbool.h>
#include <stdint.h>

/* An adapter's constants (src/profile.c holds the table of known adapters; any other gets
   the generic profile of its type). */
typedef struct wgml__profile {
    const char *name;           /* the table entry: "NVIDIA H200", "GPU", "CPU" */
    bool cpu;                   /* a CPU adapter (lavapipe): fewer, larger workgroups pay there */
    /* Units that run workgroups at the same time (NVIDIA: SMs); 0 when not known. The
       products' split rules size their grids by it. */
    uint32_t compute_units;
    /* The recorder: a batch is submitted at batch_first dispatches after the device was
       waited for (it is idle: starting early pays), batch_max otherwise. */
    uint32_t batch_first, batch_max;
    /* How a sync waits (on the queue's "submitted work done", else by mapping a buffer),
       whether a read waits for work done before it maps, and how long a wait polls before
       it blocks (a blocked thread wakes some time after the device finished). */
    bool sync_by_work_done, read_after_work_done;
    uint32_t wait_spin_us;
    /* How long a wait may take before WGML_ERROR_TIMEOUT (a CPU adapter compiles kernels
       inside its waits). */
    uint32_t timeout_ms;
    /* The matrix products' rules (src/ops/matmul.c; bench/notes/matmul.md has the
       measurements behind each value). */
    struct wgml__matmul_profile {
        /* the 128-tile for outputs of at least large_min_tiles such tiles (about one per
           unit), else the 64-tile; the tiles without a split-K model split K until
           fill_threads threads run */
        uint32_t large_min_tiles, fill_threads;
        /* the models of split-K and of the last round (compute_units units of two workgroup
           slots each): what one byte of workspace traffic costs in multiply-adds (the FMA rate
           over the memory bandwidth), the rate of a workgroup alone on a unit over its rate
           beside another, and what a K-slice of a last-round tile costs beyond its length, in
           values of K */
        uint32_t fma_per_byte;
        double alone_rate;
        uint32_t slice_overhead_k;
        /* K not whole tile steps: the last K % BK values of k in a second pass from K of */
        uint32_t krem_min_k;
        /* copies of operands into an engine's scratch, each at most copy_max_bytes (0: no
           copies): matmul_bt's b transposed from M of copy_b_min_m; a transposed from M of
           copy_a_min_m and N of copy_a_min_n; rows padded to whole vec4 from the other side
           of out of pad_min_other */
        uint64_t copy_max_bytes;
        uint32_t copy_b_min_m, copy_a_min_m, copy_a_min_n, pad_min_other;
        /* gemv_rows: rows per workgroup for rows longer than 1024, of at most 1024 and of at
           most 512; the latter two only where they leave gemv_rows_min_workgroups workgroups */
        uint32_t gemv_rows, gemv_rows_k1024, gemv_rows_k512, gemv_rows_min_workgroups;
        /* gemv_cols4: from gemv_wide_cols_min up to (not including) gemv_wide_cols_end
           columns, workgroups of gemv_wide_threads threads with gemv_wide_quads k-quads in
           flight each (an empty range: never) */
        uint32_t gemv_wide_cols_min, gemv_wide_cols_end, gemv_wide_threads, gemv_wide_quads;
    } matmul;
} wgml__profile;

/* The profile for an adapter (name as it reports it, vendor id, CPU or not). Never NULL. */
const wgml__profile *wgml__profile_of(const char *name, uint32_t vendor_id, bool cpu);

/* The compute units the products' split rules assume: the profile's, else the H200's 132,
   on which the rules were fitted, so that an adapter of unknown size gets the plans it
   always got (a wrong count only tunes them less closely). */
uint32_t wgml__units_of(const wgml__profile *p);

/* An engine's choices; zero-initialised means every rule decides. */
typedef struct wgml__tuning {
    wgml__matmul_tuning matmul;         /* src/ops/matmul.c */
    wgml__attention_tuning attention;   /* src/ops/attention.c */
} wgml__tuning;

#endif
