/* Data parallelism's communicator (wgml_comm, wgml.h) and the small interface a transport
   implements: MPI in src/transport/mpi.c, built when CMake finds Open MPI; another (NCCL,
   say) would sit beside it. The trainer sums its gradients through a wgml__exchange
   (src/comm_grads.c), which starts one wgml__comm_allreduce_start per bucket. */
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
    /* looks once whether req finished, without blocking (the call lets the transport move
       the data of every collective in flight); req is still waited on with wait, which
       then returns at once */
    wgml_status (*test)(wgml_comm *c, wgml__comm_req *req, bool *done);
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
    /* the gradients' sum goes in buckets of about this many bytes (src/comm_grads.c) */
    size_t bucket_bytes;
    bool failed;                    /* a collective failed, or one was left unfinished: destroy aborts the job */
    const wgml__transport *tr;
    void *impl;
};

/* The MPI transport's constructor (src/transport/mpi.c): fills rank, size, local_rank and
   tr of c. Absent from builds without MPI (WGML_HAVE_MPI unset). */
wgml_status wgml__mpi_join(wgml_comm *c);

/* Starts / looks at / finishes a sum of n floats over the processes; with c NULL or one
   process, nothing to do (*req NULL, done at once). */
wgml_status wgml__comm_allreduce_start(wgml_comm *c, float *buf, size_t n, wgml__comm_req **req);
wgml_status wgml__comm_allreduce_test(wgml_comm *c, wgml__comm_req *req, bool *done);
wgml_status wgml__comm_allreduce_wait(wgml_comm *c, wgml__comm_req *req);

/* The sum of a trainer's n gradients over c's processes (src/comm_grads.c). The host
   buffer holds them in a fixed order, order[] (a permutation of 0 .. n-1: the order in
   which the backward pass finishes them), cut into buckets of c->bucket_bytes; every
   process has the same buckets, whatever it stages when. A bucket's gradients are copied
   on the device into a mappable staging buffer; once mapped, they are copied to the host
   buffer and the bucket's all-reduce starts; the sums are written back at the end. */
typedef struct wgml__exchange wgml__exchange;

/* *out NULL (nothing to exchange) with c NULL, one process or no gradient. The exchange
   keeps grads and order (the caller's, alive as long as it).
   Errors: WGML_ERROR_OUT_OF_MEMORY (fn names the caller). */
wgml_status wgml__exchange_create(wgml_comm *c, wgml_tensor *const *grads, const size_t *order, size_t n, const char *fn,
                                  wgml__exchange **out);
/* Every gradient of order[0 .. upto) is final: copies those not yet staged, submits each
   bucket they complete and requests its mapping, then starts the all-reduce of every
   bucket mapped by now (in bucket order, the same on every process). Blocks only when
   every staging buffer is in use. x NULL: nothing to do. */
wgml_status wgml__exchange_stage(wgml__exchange *x, size_t upto, const char *fn);
/* Stages what is left, waits for every sum and writes the sums to the gradients; then the
   next exchange can begin. x NULL: nothing to do. */
wgml_status wgml__exchange_finish(wgml__exchange *x, const char *fn);
/* Gives up the exchange under way (after a failure): waits for the mappings requested and
   for the all-reduces started while the communicator works, and marks it failed when a
   bucket was never started (the other processes would wait for it). x NULL: nothing. */
void wgml__exchange_abandon(wgml__exchange *x);
/* Abandons what is under way and frees x (NULL: nothing). */
void wgml__exchange_destroy(wgml__exchange *x);

#endif
