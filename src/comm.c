/* Data parallelism's communicator (wgml.h, DATA PARALLELISM): which processes there are
   and the sums over them, through the transport the build has (src/comm.h). */
#include "comm.h"
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define DEFAULT_TIMEOUT_MS 600000u
/* The gradients' buckets: large enough that a bucket's all-reduce is mostly transfer, small
   enough that the first starts early in the backward pass and few staging buffers hold
   the ones in flight. */
#define BUCKET_BYTES ((size_t)8 << 20)

bool wgml_comm_available(void)
{
#ifdef WGML_HAVE_MPI
    return true;
#else
    return false;
#endif
}

/* The number of processes the launcher's environment announces (1 outside a job). */
static long job_size(void)
{
    static const char *const vars[] = { "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE" };
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) return strtol(v, NULL, 10);
    }
    return 1;
}

wgml_status wgml_comm_create(uint32_t timeout_ms, wgml_comm **out)
{
    if (!out) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_comm_create: out is NULL");
    *out = NULL;
    long n = job_size();
    if (n <= 1) return WGML_OK;
#ifndef WGML_HAVE_MPI
    (void)timeout_ms;
    return wgml__fail(NULL, WGML_ERROR_UNSUPPORTED, "wgml_comm_create: this process is one of %ld of an MPI job, but wgml "
                      "was built without MPI (install libopenmpi-dev and build again); refusing to train %ld separate copies",
                      n, n);
#else
    wgml_comm *c = calloc(1, sizeof *c);
    if (!c) return wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "wgml_comm_create: out of host memory");
    c->timeout_ms = timeout_ms ? timeout_ms : DEFAULT_TIMEOUT_MS;
    c->bucket_bytes = BUCKET_BYTES;
    wgml_status s = wgml__mpi_join(c);
    if (s != WGML_OK) {
        free(c);
        return s;
    }
    *out = c;
    return WGML_OK;
#endif
}

uint32_t wgml_comm_rank(const wgml_comm *c) { return c ? c->rank : 0; }
uint32_t wgml_comm_size(const wgml_comm *c) { return c ? c->size : 1; }
uint32_t wgml_comm_local_rank(const wgml_comm *c) { return c ? c->local_rank : 0; }

wgml_status wgml_comm_allreduce_sum(wgml_comm *c, double *buf, size_t n)
{
    if (!buf && n) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_comm_allreduce_sum: buf is NULL");
    if (!c || c->size <= 1 || !n) return WGML_OK;
    wgml_status s = c->tr->allreduce_f64(c, buf, n);
    if (s != WGML_OK) c->failed = true;
    return s;
}

wgml_status wgml__comm_allreduce_start(wgml_comm *c, float *buf, size_t n, wgml__comm_req **req)
{
    *req = NULL;
    if (!c || c->size <= 1 || !n) return WGML_OK;
    wgml_status s = c->tr->iallreduce_f32(c, buf, n, req);
    if (s != WGML_OK) c->failed = true;
    return s;
}

wgml_status wgml__comm_allreduce_test(wgml_comm *c, wgml__comm_req *req, bool *done)
{
    *done = true;
    if (!req) return WGML_OK;
    wgml_status s = c->tr->test(c, req, done);
    if (s != WGML_OK) c->failed = true;
    return s;
}

wgml_status wgml__comm_allreduce_wait(wgml_comm *c, wgml__comm_req *req)
{
    if (!req) return WGML_OK;
    wgml_status s = c->tr->wait(c, req);
    if (s != WGML_OK) c->failed = true;
    return s;
}

void wgml_comm_abort(wgml_comm *c, int code)
{
    if (c && c->size > 1) c->tr->abort(c, code);
}

void wgml_comm_destroy(wgml_comm *c)
{
    if (!c) return;
    c->tr->finish(c, c->failed);
    free(c);
}
