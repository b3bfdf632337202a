/* The MPI transport of data parallelism (src/comm.h): MPI_COMM_WORLD, sums through
   MPI_Iallreduce waited on by polling so that a process that died or hangs makes the
   others fail after the communicator's timeout instead of waiting forever. Built only
   when CMake finds MPI (WGML_HAVE_MPI). */
#include "comm.h"
#include "internal.h"

#include <mpi.h>
#include <stdlib.h>
#include <time.h>

struct wgml__comm_req { MPI_Request r; };

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Polls req until it completes or the timeout passes (what the collective was, for the
   message). */
static wgml_status wait_req(wgml_comm *c, MPI_Request *req, const char *what)
{
    double deadline = now_ms() + c->timeout_ms;
    const struct timespec nap = { 0, 50000 };   /* short enough to add nothing a bucket would notice */
    for (;;) {
        int done = 0;
        if (MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return wgml__fail(NULL, WGML_ERROR_DEVICE, "%s: MPI failed on rank %u", what, c->rank);
        if (done) return WGML_OK;
        if (now_ms() > deadline)
            return wgml__fail(NULL, WGML_ERROR_TIMEOUT, "%s: rank %u waited %u ms for the other processes (did one die or "
                              "stop?)", what, c->rank, c->timeout_ms);
        nanosleep(&nap, NULL);
    }
}

static wgml_status iallreduce_f32(wgml_comm *c, float *buf, size_t n, wgml__comm_req **out)
{
    if (n > (size_t)INT32_MAX)
        return wgml__fail(NULL, WGML_ERROR_LIMIT, "gradient all-reduce: a bucket of %zu floats is over MPI's count", n);
    wgml__comm_req *req = malloc(sizeof *req);
    if (!req) return wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "gradient all-reduce: out of host memory");
    if (MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req->r) != MPI_SUCCESS) {
        free(req);
        return wgml__fail(NULL, WGML_ERROR_DEVICE, "gradient all-reduce: MPI_Iallreduce failed on rank %u", c->rank);
    }
    *out = req;
    return WGML_OK;
}

static wgml_status test(wgml_comm *c, wgml__comm_req *req, bool *done)
{
    int flag = 0;   /* a finished request becomes MPI_REQUEST_NULL, which wait_req then sees done */
    if (MPI_Test(&req->r, &flag, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        return wgml__fail(NULL, WGML_ERROR_DEVICE, "gradient all-reduce: MPI failed on rank %u", c->rank);
    *done = flag != 0;
    return WGML_OK;
}

static wgml_status wait(wgml_comm *c, wgml__comm_req *req)
{
    wgml_status s = wait_req(c, &req->r, "gradient all-reduce");
    free(req);
    return s;
}

static wgml_status allreduce_f64(wgml_comm *c, double *buf, size_t n)
{
    if (n > (size_t)INT32_MAX)
        return wgml__fail(NULL, WGML_ERROR_LIMIT, "wgml_comm_allreduce_sum: %zu doubles are over MPI's count", n);
    MPI_Request r;
    if (MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &r) != MPI_SUCCESS)
        return wgml__fail(NULL, WGML_ERROR_DEVICE, "wgml_comm_allreduce_sum: MPI_Iallreduce failed on rank %u", c->rank);
    return wait_req(c, &r, "wgml_comm_allreduce_sum");
}

static void finish(wgml_comm *c, bool failed)
{
    (void)c;
    if (failed) MPI_Abort(MPI_COMM_WORLD, 1);   /* the others may be waiting in a collective */
    MPI_Finalize();
}

static void abort_job(wgml_comm *c, int code)
{
    (void)c;
    MPI_Abort(MPI_COMM_WORLD, code);
}

static const wgml__transport mpi_transport = { "mpi", iallreduce_f32, test, wait, allreduce_f64, finish, abort_job };

wgml_status wgml__mpi_join(wgml_comm *c)
{
    int provided = 0, rank = 0, size = 1, local = 0;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return wgml__fail(NULL, WGML_ERROR_DEVICE, "wgml_comm_create: MPI_Init_thread failed");
    /* errors come back as codes (and become wgml errors) rather than ending the process */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm node;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
        MPI_Comm_rank(node, &local);
        MPI_Comm_free(&node);
    }
    c->rank = (uint32_t)rank;
    c->size = (uint32_t)size;
    c->local_rank = (uint32_t)local;
    c->tr = &mpi_transport;
    return WGML_OK;
}
