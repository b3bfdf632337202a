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
} wgml__profile;

/* The profile for an adapter (name as it reports it, vendor id, CPU or not). Never NULL. */
const wgml__profile *wgml__profile_of(const char *name, uint32_t vendor_id, bool cpu);

/* An engine's choices; zero-initialised means every rule decides. */
typedef struct wgml__tuning {
    wgml__matmul_tuning matmul;         /* src/ops/matmul.c */
    wgml__attention_tuning attention;   /* src/ops/attention.c */
} wgml__tuning;

#endif
