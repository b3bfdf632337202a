/* The sum of a trainer's gradients over the processes of a job (wgml_trainer_step with
   desc.comm; DATA PARALLELISM in wgml.h): the gradients are read back into one host
   buffer in order, an all-reduce started for each bucket of about BUCKET_BYTES as soon as
   its tensors are in (the next tensors' read-back runs while it travels), then every sum
   is awaited and written back. */
#include "comm.h"
#include "internal.h"

#include <stdlib.h>

#define BUCKET_BYTES (8u << 20)

/* The transport's failure (its message is the thread's) recorded on the trainer's context. */
static wgml_status on_context(wgml_context *ctx, wgml_status s)
{
    return wgml__fail(ctx, s, "wgml_trainer_step: %s", wgml_last_error(NULL));
}

wgml_status wgml__comm_sum_gradients(wgml_comm *c, wgml_tensor *const *grads, size_t n, float **host, size_t *host_floats)
{
    if (!c || c->size <= 1 || !n) return WGML_OK;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) total += wgml_tensor_numel(grads[i]);
    if (*host_floats < total) {
        float *p = realloc(*host, total * sizeof(float));
        if (!p) return wgml__fail(grads[0]->ctx, WGML_ERROR_OUT_OF_MEMORY, "wgml_trainer_step: out of host memory for the "
                                  "gradients' sum (%zu floats)", total);
        *host = p;
        *host_floats = total;
    }
    float *buf = *host;
    size_t nreq = 0, cap = total / (BUCKET_BYTES / sizeof(float)) + 2;
    wgml__comm_req **reqs = calloc(cap, sizeof *reqs);
    if (!reqs) return wgml__fail(grads[0]->ctx, WGML_ERROR_OUT_OF_MEMORY, "wgml_trainer_step: out of host memory");
    wgml_status s = WGML_OK;
    size_t at = 0, start = 0;
    for (size_t i = 0; i < n && s == WGML_OK; i++) {
        size_t k = wgml_tensor_numel(grads[i]);
        s = wgml_tensor_read(grads[i], 0, buf + at, k * sizeof(float));
        at += k;
        bool last = i + 1 == n;
        if (s == WGML_OK && ((at - start) * sizeof(float) >= BUCKET_BYTES || last)) {
            s = wgml__comm_allreduce_start(c, buf + start, at - start, &reqs[nreq]);
            if (s == WGML_OK) nreq++;
            else s = on_context(grads[0]->ctx, s);
            start = at;
        }
    }
    /* after a failure the job is beyond repair: the communicator aborts it when destroyed,
       so the requests still in flight are not waited for again */
    for (size_t r = 0; r < nreq && s == WGML_OK; r++)
        if ((s = wgml__comm_allreduce_wait(c, reqs[r])) != WGML_OK) s = on_context(grads[0]->ctx, s);
    free(reqs);
    at = 0;
    for (size_t i = 0; i < n && s == WGML_OK; i++) {
        size_t k = wgml_tensor_numel(grads[i]);
        s = wgml_tensor_write(grads[i], 0, buf + at, k * sizeof(float));
        at += k;
    }
    return s;
}
