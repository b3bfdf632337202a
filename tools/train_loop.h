/* The training loop shared by wgml train and wgml finetune: micro-batches from a batcher,
   gradient accumulation, the learning-rate schedule, validation, a progress line, a stop
   on a non-finite loss, checkpoints every N steps and on SIGINT / SIGTERM. In a job of
   several processes (dist), each runs every size-th micro-batch of a step (all read the
   batcher alike, so its state is the job's) and marks its last (wgml_trainer_mark_last,
   so the gradients' sum overlaps that backward), the step's loss, the validation loss and
   a stop are the job's (summed over the processes each step), and rank 0 alone saves. */
#ifndef WGML_TOOLS_TRAIN_LOOP_H
#define WGML_TOOLS_TRAIN_LOOP_H

#include "dist.h"
#include "wgml.h"

#include <stdbool.h>
#include <stdint.h>

/* warm-up from 0 to lr over warmup steps, then cosine decay to min_lr_frac * lr at the
   last step */
typedef struct lr_schedule { int steps, warmup; double lr, min_lr_frac; } lr_schedule;
double lr_at(const lr_schedule *s, int step);

typedef struct train_loop {
    const char *who;                 /* "wgml train" */
    wgml_context *ctx;
    wgml_engine *eng;
    wgml_trainer *tr;
    wgml_batcher *train;             /* the training micro-batches */
    wgml_batcher *val;               /* sequential over the validation part, or NULL */
    uint32_t batch, seq_len;
    lr_schedule sched;
    int accum, eval_every, save_every;   /* accum: micro-batches per step over all processes */
    cli_dist *dist;                  /* the job (NULL: one process) */
    bool comm_failed;                /* a collective of the loop's own failed (its message is the thread's) */
    /* writes a checkpoint after `step` steps (the loop has the losses up to it); 0 or -1 */
    int (*save)(struct train_loop *L, int step);
    void *user;
    const char *out;                 /* for messages */
    /* the run: losses[steps], val_loss[steps + 1] (NaN where not measured); the first
       `step` of each hold a resumed run's history */
    int step;
    float *losses;
    double *val_loss;
    /* results */
    double elapsed, last_val;
} train_loop;

/* Allocates losses and val_loss for sched.steps (keeping `first` steps of history given
   in losses0 / val0, which may be NULL when first is 0). 0, or -1 after a message. */
int train_loop_init(train_loop *L, int first, const float *losses0, const double *val0);
void train_loop_free(train_loop *L);

/* The mean loss over the validation part (every learned target once). */
wgml_status train_loop_evaluate(train_loop *L, double *mean);

/* Runs steps L->step .. sched.steps - 1. Returns 0 when done, 1 after an error (the
   message printed), 130 when interrupted by SIGINT or SIGTERM after writing a checkpoint
   (or 1 when that failed). */
int train_loop_run(train_loop *L);

/* L->out/loss.csv (step, training loss, validation loss where measured, learning rate)
   and L->out/loss.svg (the curves titled title, with a dashed reference line at unigram
   unless NaN), each written atomically. 0, or -1 after a message. */
int train_loop_write_curves(const train_loop *L, double unigram, const char *title);

#endif
