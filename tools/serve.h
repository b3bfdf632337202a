/* wgml serve: requests (jobs) handed from the HTTP threads (tools/cmd_serve.c) to the one
   thread that drives the model (tools/serve_engine.c), which decodes every running job
   together in a wgml_kv_batch: a job joins a free sequence between steps and leaves it
   when done (continuous batching). The text each job produces is appended to it as it
   comes, under the server's lock; its waiters are woken through its condition variable. */
#ifndef WGML_TOOLS_SERVE_H
#define WGML_TOOLS_SERVE_H

#include "decode.h"
#include "wgml.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SERVE_MAX_STOPS 4

typedef struct serve_job {
    /* the request, read-only once queued */
    uint32_t *ids;
    size_t n_ids;
    wgml_sampling sampling;
    uint64_t seed;
    uint32_t max_tokens;
    char *stop[SERVE_MAX_STOPS];    /* matched on the text; the first one found ends it */
    int nstop;
    /* the result, under the server's lock */
    char *text;                     /* the reply so far (before any stop string) */
    size_t len, cap;
    uint32_t tokens;                /* generated tokens */
    const char *finish;             /* "stop" or "length" when done */
    bool done, cancelled;
    char error[256];                /* set when the engine failed it */
    pthread_cond_t changed;
    int refs;                       /* holders: the HTTP side and, while queued or running, the engine */
    struct serve_job *next;         /* in the queue */
} serve_job;

typedef struct serve_engine {
    wgml_context *ctx;
    wgml_engine *eng;
    wgml_model *model;
    const wgml_tokenizer *tok;
    uint32_t slots, context, queue_max;
    pthread_mutex_t mu;
    pthread_cond_t work;            /* a job was queued or cancelled, or stop was set */
    serve_job *head, *tail;         /* the queue */
    uint32_t queued;
    bool stop;
    pthread_t thread;
    char error[512];                /* why the engine stopped, when it failed */
    void *state;                    /* the engine thread's own (serve_engine.c) */
} serve_engine;

/* Starts the engine thread over model (slots sequences of context positions each). 0, or
   -1 after a message. */
int serve_engine_start(serve_engine *s);
/* Stops it and joins it: running and queued jobs end as cancelled (their waiters wake). */
void serve_engine_stop(serve_engine *s);
/* Stops it if running, then frees what it holds (the lock too: no HTTP thread may be
   left). */
void serve_engine_free(serve_engine *s);

/* Queues job (which holds one reference, the caller's; the engine takes another). false
   when the queue is full (nothing queued). */
bool serve_submit(serve_engine *s, serve_job *job);
/* Drops a reference; the last frees the job. Call with the lock not held. */
void serve_job_release(serve_engine *s, serve_job *job);
/* A new job with one reference (the caller's), or NULL when out of memory. */
serve_job *serve_job_new(void);

#endif
