/* The shared training loop (see train_loop.h). */
#include "train_loop.h"
#include "cli.h"
#include "plot.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* How long one training step may take before the run gives up on the device. */
#define STEP_WAIT_MS 3600000

double lr_at(const lr_schedule *s, int step)
{
    if (step < s->warmup) return s->lr * (step + 1) / s->warmup;
    double span = s->steps - s->warmup;
    double p = span > 1 ? (step - s->warmup) / (span - 1) : 1;
    double min = s->lr * s->min_lr_frac;
    return min + 0.5 * (s->lr - min) * (1 + cos(3.14159265358979323846 * p));
}

int train_loop_init(train_loop *L, int first, const float *losses0, const double *val0)
{
    size_t steps = (size_t)L->sched.steps;
    L->losses = calloc(steps + 1, sizeof *L->losses);
    L->val_loss = malloc((steps + 1) * sizeof *L->val_loss);
    if (!L->losses || !L->val_loss) {
        fprintf(stderr, "%s: out of host memory\n", L->who);
        return -1;
    }
    for (size_t i = 0; i <= steps; i++) L->val_loss[i] = NAN;
    if (first > 0 && losses0) memcpy(L->losses, losses0, (size_t)first * sizeof *L->losses);
    if (first >= 0 && val0) memcpy(L->val_loss, val0, ((size_t)first + 1) * sizeof *L->val_loss);
    L->step = first;
    L->last_val = NAN;
    for (int i = first; i >= 0 && isnan(L->last_val); i--) L->last_val = L->val_loss[i];
    return 0;
}

void train_loop_free(train_loop *L)
{
    free(L->losses);
    free(L->val_loss);
    L->losses = NULL;
    L->val_loss = NULL;
}

/* This process's share of the job: rank and size (0 of 1 alone). */
static uint32_t rank_of(const train_loop *L) { return L->dist ? L->dist->rank : 0; }
static uint32_t size_of(const train_loop *L) { return L->dist ? L->dist->size : 1; }

/* The message of the loop's last failure: the job's (a collective) or the device's. */
static const char *loop_error(const train_loop *L)
{
    return L->comm_failed ? wgml_last_error(NULL) : wgml_last_error(L->ctx);
}

wgml_status train_loop_evaluate(train_loop *L, double *out)
{
    size_t N = (size_t)L->batch * L->seq_len;
    uint32_t *ids = malloc(N * sizeof *ids), *tg = malloc(N * sizeof *tg);
    wgml_tensor *loss = NULL;
    wgml_status s = ids && tg ? wgml_tensor_create(L->ctx, WGML_F32, 1, (size_t[]){ 1 }, &loss) : WGML_ERROR_OUT_OF_MEMORY;
    wgml_batcher_state st = { 0 };
    if (s == WGML_OK) s = wgml_batcher_set_state(L->val, &st);   /* from the start of the part */
    double sum[2] = { 0, 0 };   /* the loss over counted targets, and their count */
    for (uint32_t b = 0; s == WGML_OK; b++) {
        s = wgml_batcher_get_state(L->val, &st);
        if (s != WGML_OK || st.epoch) break;
        s = wgml_batcher_next(L->val, ids, tg);
        if (b % size_of(L) != rank_of(L)) continue;   /* another process's batch */
        size_t counted = 0;
        for (size_t i = 0; i < N; i++) counted += tg[i] != UINT32_MAX;
        float l = 0;
        if (s == WGML_OK && counted) s = wgml_trainer_eval(L->tr, ids, tg, loss);
        if (s == WGML_OK && counted) s = wgml_tensor_read(loss, 0, &l, sizeof l);
        sum[0] += (double)l * counted;   /* the batch's mean over its counted targets */
        sum[1] += (double)counted;
    }
    if (s == WGML_OK && L->dist && (s = wgml_comm_allreduce_sum(L->dist->comm, sum, 2)) != WGML_OK) L->comm_failed = true;
    wgml_tensor_release(loss);
    free(ids);
    free(tg);
    *out = sum[1] > 0 ? sum[0] / sum[1] : NAN;
    return s;
}

static volatile sig_atomic_t stop_signal;
static void on_stop(int sig) { stop_signal = sig; }

/* The loss became v (not finite) at step: the message. */
static void say_not_finite(const train_loop *L, double v, int step)
{
    fprintf(stderr, "\n%s: the loss became %s at step %d (is the learning rate %g too high?); stopping, no checkpoint written\n",
            L->who, isnan(v) ? "NaN" : "infinite", step, L->sched.lr);
}

/* The losses of this process's micro-batches [from, upto) (local counts: `local` per
   step) read back into L->losses, each as 1/accum of its step's; -1 after a message when
   one is not finite (alone; in a job the caller decides with the others). */
static int read_losses(train_loop *L, wgml_tensor *hist, int local, int first_micro, int from, int upto, float *buf,
                       wgml_status *s)
{
    if (upto <= from) return 0;
    *s = wgml_tensor_read(hist, (size_t)(from - first_micro) * sizeof(float), buf, sizeof(float) * (size_t)(upto - from));
    if (*s != WGML_OK) return -1;
    for (int i = from; i < upto; i++) {
        float v = buf[i - from];
        if (!isfinite(v) && !L->dist) {
            say_not_finite(L, v, i / local + 1);
            return -1;
        }
        L->losses[i / local] += v / (float)L->accum;
    }
    return 0;
}

/* In a job: step's loss (this process's part in L->losses[step]) and the stop request
   summed over the processes, so that every process stops, or not, after the same step.
   -1 after a message when the job's loss is not finite. */
static int join_step(train_loop *L, int step, bool *stop, wgml_status *s)
{
    double v[2] = { L->losses[step], *stop ? 1 : 0 };
    *s = wgml_comm_allreduce_sum(L->dist->comm, v, 2);
    if (*s != WGML_OK) {
        L->comm_failed = true;
        return -1;
    }
    L->losses[step] = (float)v[0];
    *stop = v[1] > 0;
    if (!isfinite(v[0])) {
        say_not_finite(L, v[0], step + 1);
        return -1;
    }
    return 0;
}

int train_loop_run(train_loop *L)
{
    const lr_schedule *sc = &L->sched;
    size_t N = (size_t)L->batch * L->seq_len;
    int local = L->accum / (int)size_of(L);   /* this process's micro-batches per step */
    int first = L->step, nmicro = (sc->steps - first) * local;
    uint32_t *ids = malloc(N * sizeof *ids), *tg = malloc(N * sizeof *tg);
    float *buf = malloc(sizeof(float) * (size_t)(nmicro > 0 ? nmicro : 1));
    uint64_t *fences = calloc((size_t)sc->steps + 1, sizeof *fences);
    wgml_tensor *loss = NULL, *hist = NULL;
    wgml_status s = ids && tg && buf && fences ? WGML_OK : WGML_ERROR_OUT_OF_MEMORY;
    if (s == WGML_OK) s = wgml_tensor_create(L->ctx, WGML_F32, 1, (size_t[]){ 1 }, &loss);
    if (s == WGML_OK && nmicro > 0) s = wgml_tensor_create(L->ctx, WGML_F32, 1, (size_t[]){ (size_t)nmicro }, &hist);
    int rc = 1;
    struct sigaction sa = { .sa_handler = on_stop }, old_int, old_term;
    sigemptyset(&sa.sa_mask);
    stop_signal = 0;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    if (s != WGML_OK) {
        fprintf(stderr, "%s: %s\n", L->who, s == WGML_ERROR_OUT_OF_MEMORY && !loss ? "out of host memory" : loop_error(L));
        goto done;
    }

    /* The host records steps ahead of the device, at most two: each step ends with a
       fence, and step s waits for step s - 2's. The progress line shows the steps the
       device has finished, at least once a second; losses are read back (a wait for
       everything recorded) at most once a second and at each evaluation and save, and a
       non-finite one stops the run. */
    double t0 = cli_now(), t_first = 0, t_eval = 0, last_print = -1, last_read = t0;
    int read_upto = first * local;   /* this process's micro-batches whose losses are in L->losses */
    int done_steps = first;
    bool tty = isatty(STDOUT_FILENO);
    if (first == 0 && L->val) {
        s = train_loop_evaluate(L, &L->val_loss[0]);   /* the initial model, for the curve */
        if (s != WGML_OK) {
            fprintf(stderr, "%s: %s\n", L->who, loop_error(L));
            goto done;
        }
    }
    for (int step = first; step < sc->steps; step++) {
        for (int a = 0, j = 0; a < L->accum && s == WGML_OK; a++) {
            s = wgml_batcher_next(L->train, ids, tg);
            if (s != WGML_OK || (uint32_t)a % size_of(L) != rank_of(L)) continue;   /* another process's */
            /* this process's last of the step: in a job, the gradients' sum overlaps its backward */
            if (j == local - 1) s = wgml_trainer_mark_last(L->tr);
            if (s == WGML_OK) s = wgml_trainer_accumulate(L->tr, ids, tg, 1.0f / (float)L->accum, loss);
            if (s == WGML_OK) s = wgml_copy_tensor(L->eng, loss, hist, ((size_t)(step - first) * local + (size_t)j++) * sizeof(float));
        }
        if (s == WGML_OK) s = wgml_trainer_step(L->tr, (float)lr_at(sc, step), NULL);
        if (s == WGML_OK) s = wgml_context_fence(L->ctx, &fences[step]);
        bool done = false;
        if (s == WGML_OK && step >= first + 2) {
            s = wgml_context_fence_wait(L->ctx, fences[step - 2], STEP_WAIT_MS, &done);
            if (s == WGML_OK && !done) {
                fprintf(stderr, "\n%s: step %d did not finish within %d minutes\n", L->who, step - 1, STEP_WAIT_MS / 60000);
                goto done;
            }
            if (s == WGML_OK) done_steps = step - 1;
        }
        if (s == WGML_OK && step >= first + 1 && wgml_context_fence_wait(L->ctx, fences[step - 1], 0, &done) == WGML_OK && done)
            done_steps = step;
        if (s != WGML_OK) break;
        if (step == first) t_first = cli_now();
        bool last = step == sc->steps - 1;
        bool eval_now = L->val && (last || (L->eval_every > 0 && (step + 1) % L->eval_every == 0));
        bool save_now = L->save && L->save_every > 0 && (step + 1) % L->save_every == 0;
        bool stop = stop_signal != 0;
        double now = cli_now();
        /* in a job, every step: its loss and any stop are the job's */
        if (L->dist || step == first || eval_now || save_now || stop || last || now - last_read >= 1.0) {
            int upto = (step + 1) * local;
            if (read_losses(L, hist, local, first * local, read_upto, upto, buf, &s) != 0 ||
                (L->dist && join_step(L, step, &stop, &s) != 0)) {
                if (s != WGML_OK) fprintf(stderr, "\n%s: %s\n", L->who, loop_error(L));
                goto done;
            }
            read_upto = upto;
            done_steps = step + 1;
            last_read = now = cli_now();
            if (eval_now) {
                s = train_loop_evaluate(L, &L->last_val);
                if (s != WGML_OK) break;
                if (!isfinite(L->last_val)) {
                    fprintf(stderr, "\n%s: the validation loss became %s after step %d; stopping, no checkpoint written\n",
                            L->who, isnan(L->last_val) ? "NaN" : "infinite", step + 1);
                    goto done;
                }
                L->val_loss[step + 1] = L->last_val;
                t_eval += cli_now() - now;
                now = cli_now();
            }
            L->step = step + 1;
            if ((save_now || (stop && L->save)) && rank_of(L) == 0) {
                double ts = cli_now();
                if (L->save(L, step + 1) != 0) goto done;
                t_eval += cli_now() - ts;   /* saving is not training time either */
                now = cli_now();
            }
        }
        if (eval_now || now - last_print >= 0.25 || stop) {
            /* throughput after the first step (which compiles the kernels), evaluation
               and saving excluded */
            int k = done_steps > first ? done_steps - first : 1;
            double train_time = now - t_first - t_eval;
            double rate = k > 1 ? (double)(k - 1) * L->accum * N / train_time : 0;
            double left = k > 1 ? train_time / (k - 1) * (sc->steps - first - k) : 0;
            char bar[24];
            int shown_step = first + k;
            int fill = (int)(20.0 * shown_step / sc->steps);
            for (int i = 0; i < 20; i++) bar[i] = i < fill ? '#' : '.';
            bar[20] = 0;
            int shown = read_upto / local;   /* the last step whose loss was read */
            printf("\rstep %*d/%d [%s] loss %.4f  val %s  lr %.2e  %7.0f tok/s  %s left   ", cli_digits(sc->steps), shown_step,
                   sc->steps, bar, shown ? L->losses[shown - 1] : NAN, isnan(L->last_val) ? "  -   " : cli_fmt("%.4f", L->last_val),
                   lr_at(sc, shown_step - 1), rate, cli_duration(left));
            if (eval_now || !tty || stop) putchar('\n');
            fflush(stdout);
            last_print = now;
        }
        if (stop) {
            if (rank_of(L) == 0)
                fprintf(stderr, "%s: stopped by %s after step %d%s%s\n", L->who, stop_signal == SIGINT ? "SIGINT"
                    : stop_signal == SIGTERM ? "SIGTERM" : "another process's signal", step + 1,
                    L->save ? "; a checkpoint was written to " : "", L->save ? L->out : "");
            rc = L->save ? 130 : 1;
            goto done;
        }
    }
    if (s != WGML_OK) {
        fprintf(stderr, "\n%s: %s\n", L->who, loop_error(L));
        goto done;
    }
    L->step = sc->steps;
    L->elapsed = cli_now() - t0;
    rc = 0;
done:
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    wgml_tensor_release(loss);
    wgml_tensor_release(hist);
    free(ids);
    free(tg);
    free(buf);
    free(fences);
    return rc;
}

int train_loop_write_curves(const train_loop *L, double unigram, const char *title)
{
    char path[4096], tmp[4200];
    cli_fmt_path(path, sizeof path, L->out, "loss.csv");
    FILE *f = cli_atomic_open(L->who, path, tmp, sizeof tmp);
    if (!f) return -1;
    fprintf(f, "step,train_loss,val_loss,lr\n");
    for (int i = 0; i < L->sched.steps; i++) {
        fprintf(f, "%d,%.6f,", i + 1, L->losses[i]);
        if (!isnan(L->val_loss[i + 1])) fprintf(f, "%.6f", L->val_loss[i + 1]);
        fprintf(f, ",%.6g\n", lr_at(&L->sched, i));
    }
    if (cli_atomic_commit(L->who, f, tmp, path) != 0) return -1;
    cli_fmt_path(path, sizeof path, L->out, "loss.svg");
    f = cli_atomic_open(L->who, path, tmp, sizeof tmp);
    if (!f) return -1;
    plot_loss_svg(f, title, L->losses, L->val_loss, L->sched.steps, unigram);
    return cli_atomic_commit(L->who, f, tmp, path);
}
