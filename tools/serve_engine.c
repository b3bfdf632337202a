/* The thread that drives the model for wgml serve (see serve.h). Each step: jobs waiting
   in the queue take free sequences (their prompt run into it, their first token sampled),
   every running job's latest token is judged (end of text, a stop string, its token
   budget, the context), then one wgml_model_decode_batch advances all sequences and each
   running job samples its next token from its row. Idle sequences decode a placeholder
   token and are emptied again. Only this thread touches the GPU. */
#include "serve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct slot {
    serve_job *job;
    wgml_sampler *smp;
    printer pt;
    uint32_t *hist;
    size_t len;
    uint32_t next;
} slot;

typedef struct engine_state {
    bool started;               /* the thread runs */
    wgml_kv_batch *batch;
    wgml_tensor *logits, *last;
    uint32_t *step_ids;
    slot *slot;
    wgml_sampler **smp;         /* each sequence's sampler (NULL: idle) for one GPU call */
    const uint32_t **hist;
    size_t *len;
} engine_state;

serve_job *serve_job_new(void)
{
    serve_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    pthread_cond_init(&j->changed, NULL);
    j->refs = 1;
    return j;
}

static void job_free(serve_job *j)
{
    free(j->ids);
    free(j->text);
    for (int i = 0; i < j->nstop; i++) free(j->stop[i]);
    pthread_cond_destroy(&j->changed);
    free(j);
}

void serve_job_release(serve_engine *s, serve_job *job)
{
    pthread_mutex_lock(&s->mu);
    bool last = --job->refs == 0;
    pthread_mutex_unlock(&s->mu);
    if (last) job_free(job);
}

bool serve_submit(serve_engine *s, serve_job *job)
{
    pthread_mutex_lock(&s->mu);
    bool ok = !s->stop && s->queued < s->queue_max;
    if (ok) {
        job->refs++;
        job->next = NULL;
        if (s->tail) s->tail->next = job;
        else s->head = job;
        s->tail = job;
        s->queued++;
        pthread_cond_signal(&s->work);
    }
    pthread_mutex_unlock(&s->mu);
    return ok;
}

/* Appends reply text to the job (printer callback; runs on the engine thread). */
static void append_text(void *user, const char *text, size_t len)
{
    serve_job *j = user;
    if (j->len + len + 1 > j->cap) {
        size_t cap = 2 * (j->len + len) + 256;
        char *t = realloc(j->text, cap);
        if (!t) return;   /* out of memory: the text is cut short */
        j->text = t;
        j->cap = cap;
    }
    memcpy(j->text + j->len, text, len);
    j->len += len;
    j->text[j->len] = 0;
}

/* Ends slot i's job with finish (or an error), wakes its waiters, frees the sequence. */
static void finish_slot(serve_engine *s, engine_state *st, uint32_t i, const char *finish, const char *error)
{
    slot *sl = &st->slot[i];
    pthread_mutex_lock(&s->mu);
    if (!error) printer_finish(&sl->pt);
    serve_job *j = sl->job;
    j->finish = finish;
    if (error) snprintf(j->error, sizeof j->error, "%s", error);
    fprintf(stderr, "wgml serve: a request ended (%s): %zu prompt and %u generated tokens\n", error ? "error" : finish,
            j->n_ids, j->tokens);
    j->done = true;
    pthread_cond_broadcast(&j->changed);
    bool last = --j->refs == 0;
    pthread_mutex_unlock(&s->mu);
    if (last) job_free(j);
    wgml_sampler_free(sl->smp);
    free(sl->pt.pending);
    memset(&sl->pt, 0, sizeof sl->pt);
    sl->smp = NULL;
    sl->job = NULL;
    wgml_kv_batch_reset(st->batch, i);
}

/* Job j into free sequence i: its prompt run, its first token sampled. */
static void admit(serve_engine *s, engine_state *st, uint32_t i, serve_job *j)
{
    slot *sl = &st->slot[i];
    uint32_t V = wgml_model_get_config(s->model)->vocab_size;
    sl->job = j;
    sl->len = j->n_ids;
    memcpy(sl->hist, j->ids, j->n_ids * sizeof *j->ids);
    sl->pt = (printer){ .tok = s->tok, .stop = j->nstop ? j->stop[0] : NULL, .write = append_text, .user = j };
    wgml_kv_batch_reset(st->batch, i);
    wgml_status r = wgml_sampler_create(&j->sampling, V, j->seed, &sl->smp);
    if (r == WGML_OK) r = wgml_kv_batch_prefill(st->batch, i, j->ids, (uint32_t)j->n_ids, st->last);
    const uint32_t *h = sl->hist;
    if (r == WGML_OK) r = wgml_sampler_next_gpu(s->eng, &sl->smp, 1, st->last, &h, &sl->len, &sl->next);
    if (r != WGML_OK) finish_slot(s, st, i, NULL, wgml_last_error(s->ctx));
}

/* Whether text (the reply so far) contains one of the job's other stop strings; cuts it
   there. (The first stop string is the printer's, which holds its text back.) */
static bool other_stop(serve_job *j)
{
    for (int k = 1; k < j->nstop; k++) {
        char *at = j->text ? strstr(j->text, j->stop[k]) : NULL;
        if (at) {
            j->len = (size_t)(at - j->text);
            j->text[j->len] = 0;
            return true;
        }
    }
    return false;
}

/* Judges slot i's latest token: false when its job ended. */
static bool take_token(serve_engine *s, engine_state *st, uint32_t i)
{
    slot *sl = &st->slot[i];
    serve_job *j = sl->job;
    const wgml_model_config *cfg = wgml_model_get_config(s->model);
    bool cancelled;
    pthread_mutex_lock(&s->mu);
    cancelled = j->cancelled || s->stop;
    pthread_mutex_unlock(&s->mu);
    if (cancelled) {
        finish_slot(s, st, i, "cancelled", NULL);
        return false;
    }
    for (uint32_t e = 0; e < cfg->num_eos_token_ids; e++)
        if (sl->next == cfg->eos_token_ids[e]) {
            finish_slot(s, st, i, "stop", NULL);
            return false;
        }
    pthread_mutex_lock(&s->mu);
    bool ok = printer_emit(&sl->pt, sl->next);
    j->tokens++;
    bool stopped = sl->pt.stopped || other_stop(j);
    pthread_cond_broadcast(&j->changed);
    pthread_mutex_unlock(&s->mu);
    if (!ok) {
        finish_slot(s, st, i, NULL, "out of host memory");
        return false;
    }
    if (stopped) {
        finish_slot(s, st, i, "stop", NULL);
        return false;
    }
    if (j->tokens >= j->max_tokens || sl->len + 1 >= s->context) {
        finish_slot(s, st, i, "length", NULL);
        return false;
    }
    sl->hist[sl->len++] = sl->next;
    return true;
}

static void *engine_main(void *arg)
{
    serve_engine *s = arg;
    engine_state *st = s->state;
    for (;;) {
        /* wait for work; take queued jobs into free sequences */
        pthread_mutex_lock(&s->mu);
        bool running = false;
        for (uint32_t i = 0; i < s->slots; i++) running |= st->slot[i].job != NULL;
        while (!running && !s->head && !s->stop) pthread_cond_wait(&s->work, &s->mu);
        if (s->stop && !running) {
            pthread_mutex_unlock(&s->mu);
            break;
        }
        serve_job *take[64];
        uint32_t where[64], ntake = 0;
        for (uint32_t i = 0; i < s->slots && s->head && !s->stop && ntake < 64; i++) {
            if (st->slot[i].job) continue;
            serve_job *j = s->head;
            s->head = j->next;
            if (!s->head) s->tail = NULL;
            s->queued--;
            if (j->cancelled) {   /* gone before it started */
                j->done = true;
                j->finish = "cancelled";
                bool last = --j->refs == 0;
                if (last) { pthread_mutex_unlock(&s->mu); job_free(j); pthread_mutex_lock(&s->mu); }
                i--;
                continue;
            }
            take[ntake] = j;
            where[ntake++] = i;
            st->slot[i].job = j;   /* reserved */
        }
        pthread_mutex_unlock(&s->mu);
        for (uint32_t k = 0; k < ntake; k++) admit(s, st, where[k], take[k]);

        /* judge each running job's latest token; advance every sequence one step */
        bool any = false;
        for (uint32_t i = 0; i < s->slots; i++) {
            slot *sl = &st->slot[i];
            if (sl->job && take_token(s, st, i)) {
                st->step_ids[i] = sl->next;
                any = true;
            } else {
                wgml_kv_batch_reset(st->batch, i);   /* idle: a placeholder at position 0 */
                st->step_ids[i] = 0;
            }
        }
        if (!any) continue;
        wgml_status r = wgml_model_decode_batch(st->batch, st->step_ids, st->logits);
        uint32_t *next = st->step_ids;   /* reused: the tokens just decoded are in the histories */
        for (uint32_t i = 0; i < s->slots; i++) {
            slot *sl = &st->slot[i];
            st->smp[i] = sl->job ? sl->smp : NULL;
            st->hist[i] = sl->hist;
            st->len[i] = sl->len;
        }
        if (r == WGML_OK) r = wgml_sampler_next_gpu(s->eng, st->smp, s->slots, st->logits, st->hist, st->len, next);
        for (uint32_t i = 0; i < s->slots && r == WGML_OK; i++)
            if (st->slot[i].job) st->slot[i].next = next[i];
        if (r != WGML_OK) {   /* a device error: every running job fails, and the server stops taking work */
            snprintf(s->error, sizeof s->error, "%s", wgml_last_error(s->ctx));
            for (uint32_t i = 0; i < s->slots; i++)
                if (st->slot[i].job) finish_slot(s, st, i, NULL, s->error);
            pthread_mutex_lock(&s->mu);
            s->stop = true;
            pthread_mutex_unlock(&s->mu);
        }
    }
    /* the queue's jobs end as cancelled */
    pthread_mutex_lock(&s->mu);
    while (s->head) {
        serve_job *j = s->head;
        s->head = j->next;
        j->done = true;
        j->finish = "cancelled";
        pthread_cond_broadcast(&j->changed);
        if (--j->refs == 0) { pthread_mutex_unlock(&s->mu); job_free(j); pthread_mutex_lock(&s->mu); }
    }
    s->tail = NULL;
    s->queued = 0;
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

int serve_engine_start(serve_engine *s)
{
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work, NULL);
    engine_state *st = calloc(1, sizeof *st);
    uint32_t V = wgml_model_get_config(s->model)->vocab_size;
    if (!st) return -1;
    s->state = st;
    st->slot = calloc(s->slots, sizeof *st->slot);
    st->step_ids = calloc(s->slots, sizeof *st->step_ids);
    st->smp = calloc(s->slots, sizeof *st->smp);
    st->hist = calloc(s->slots, sizeof *st->hist);
    st->len = calloc(s->slots, sizeof *st->len);
    bool ok = st->slot && st->step_ids && st->smp && st->hist && st->len;
    for (uint32_t i = 0; ok && i < s->slots; i++) ok = (st->slot[i].hist = malloc(sizeof(uint32_t) * s->context)) != NULL;
    if (!ok) {
        fprintf(stderr, "wgml serve: out of host memory\n");
        return -1;
    }
    wgml_status r = wgml_kv_batch_create(s->model, s->context, s->slots, &st->batch);
    if (r == WGML_OK) r = wgml_tensor_create(s->ctx, WGML_F32, 2, (size_t[]){ s->slots, V }, &st->logits);
    if (r == WGML_OK) r = wgml_tensor_create(s->ctx, WGML_F32, 1, (size_t[]){ V }, &st->last);
    if (r != WGML_OK) {
        fprintf(stderr, "wgml serve: %s\n", wgml_last_error(s->ctx));
        return -1;
    }
    if (pthread_create(&s->thread, NULL, engine_main, s) != 0) {
        fprintf(stderr, "wgml serve: cannot start the engine thread\n");
        return -1;
    }
    st->started = true;
    return 0;
}

void serve_engine_stop(serve_engine *s)
{
    engine_state *st = s->state;
    if (!st || !st->started) return;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    st->started = false;
}

void serve_engine_free(serve_engine *s)
{
    serve_engine_stop(s);
    engine_state *st = s->state;
    if (!st) return;
    for (uint32_t i = 0; st->slot && i < s->slots; i++) free(st->slot[i].hist);
    free(st->slot);
    free(st->step_ids);
    free(st->smp);
    free(st->hist);
    free(st->len);
    wgml_tensor_release(st->logits);
    wgml_tensor_release(st->last);
    wgml_kv_batch_destroy(st->batch);
    free(st);
    s->state = NULL;
    pthread_cond_destroy(&s->work);
    pthread_mutex_destroy(&s->mu);
}
