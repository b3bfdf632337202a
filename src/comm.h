/* Data parallelism's communicator (wgml_comm, wgml.h) and the small interface a transport
   implements: MPI in src/transport/mpi.c, built when CMake finds Open MPI; another (NCCL,
   say) would sit beside it. The trainer sums gradients through wgml__comm_allreduce_f32. */
#ifndef WGML_COMM_H
#define WGML_COMM_H

#include "wgml.h"

#include <stddef.h>

/* One non-blocking all-reduce in flight (transport-defined). */
typedef struct wgml__comm_req wgml__comm_req;

typedef struct wgml__transport {
    const char *name;
    /* starts summing n floats of buf over the processes, in place; *req is waited on with
       wait, which also frees it */
    wgml_status (*iallreduce_f32)(wgml_comm *c, float *buf, size_t n, wgml__comm_req **req);
    /* waits for req at most the communicator's timeout */
    wgml_status (*wait)(wgml_comm *c, wgml__comm_req *req);
    /* sums n doubles over the processes, in place, blocking (bounded by the timeout) */
    wgml_status (*allreduce_f64)(wgml_comm *c, double *buf, size_t n);
    /* leaves the job: an orderly finalize, or an abort of every process after an error */
    void (*finish)(wgml_comm *c, bool failed);
    /* ends every process of the job with exit status code */
    void (*abort)(wgml_comm *c, int code);
} wgml__transport;

struct wgml_comm {
    uint32_t rank, size, local_rank;
    uint32_t timeout_ms;
    bool failed;                    /* a collective failed: destroy aborts the job */
    const wgml__transport *tr;
    void *impl;
};

/* The MPI transport's constructor (src/transport/mpi.c): fills rank, size, local_rank and
   tr of c. Absent from builds without MPI (WGML_HAVE_MPI unset). */
wgml_status wgml__mpi_join(wgml_comm *c);

/* Starts / finishes a sum of n floats over the processes; with c NULL or one process,
   nothing to do (*req NULL). */
wgml_status wgml__comm_allreduce_start(wgml_comm *c, float *buf, size_t n, wgml__comm_req **req);
wgml_status wgml__comm_allreduce_wait(wgml_comm *c, wgml__comm_req *req);

/* Sums the n gradient tensors over c's processes in place (src/comm_grads.c), staged in
   *host (grown to *host_floats floats as needed; the caller frees it). */
wgml_status wgml__comm_sum_gradients(wgml_comm *c, wgml_tensor *const *grads, size_t n, float **host, size_t *host_floats);

#endif
