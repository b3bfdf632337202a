/* Output folders and resumable checkpoints of wgml train and wgml finetune.

   An output folder holds the run's final files at its top (the model or the adapter, the
   loss curve) and its checkpoints in checkpoint-<step>/ folders. A checkpoint is written
   whole into a temporary folder beside them, flushed to disk and renamed into place, so a
   save killed half-way leaves the previous checkpoint as it was; the older checkpoints are
   removed after the new one is in place. Each holds the weights (model or adapter), the
   optimizer's state (optimizer.safetensors) and trainer_state.json: the step, the options,
   the batcher's state, a fingerprint of the data and the losses so far. */
#ifndef WGML_TOOLS_CHECKPOINT_H
#define WGML_TOOLS_CHECKPOINT_H

#include "cli.h"
#include "wgml.h"

#include <stdbool.h>
#include <stddef.h>

/* The options of ckpt_prepare_out. */
typedef struct out_options {
    bool overwrite;        /* --overwrite was given */
    bool resuming;         /* a resumed run, writing into its own folder */
    bool resumable;        /* the command has --resume (its message says so) */
    const char *input;     /* a model folder (or file) the command reads, or NULL */
} out_options;

/* --out: a folder this process can write, made with its parents when missing (*made). One that already
   holds a run (checkpoint folders, weights, adapter or loss files) is refused unless
   overwrite, which removes those files first so none survives from the old run; a
   resumed run may write into its own folder. The folder of input is refused (writing
   there would replace what is being read). 0, or -1 after a message. */
int ckpt_prepare_out(const char *who, const char *out, const out_options *opt, bool *made);
/* Whether the folder out exists and is the folder of input (a folder, or a file in it). */
bool ckpt_same_folder(const char *out, const char *input);

/* Writes checkpoint-<step> into out through write(user, dir) on a temporary folder, then
   keeps the newest `keep` checkpoints. 0, or -1 after a message. */
int ckpt_write(const char *who, const char *out, int step, int keep, int (*write)(void *user, const char *dir), void *user);

/* The checkpoint folder to resume from: dir itself when it holds trainer_state.json, else
   its newest checkpoint-<step>. 0, or -1 after a message. */
int ckpt_find(const char *who, const char *dir, char *path, size_t size);

/* ---- trainer_state.json ---------------------------------------------------------------- */

typedef struct run_state {
    const char *command;              /* "train" or "finetune" */
    int step;                         /* optimizer steps done */
    wgml_batcher_state batcher;
    uint64_t data_bytes, data_hash;   /* the training file's size and FNV-1a hash */
    const float *losses;              /* steps values */
    const double *val_losses;         /* steps + 1 values, NaN where none */
    char *strings[32];                /* ckpt_state_read: the string options it set */
    int nstrings;
} run_state;

/* The FNV-1a hash and size of a file. 0, or -1 after a message. */
int ckpt_fingerprint(const char *who, const char *path, uint64_t *bytes, uint64_t *hash);

/* Writes dir/trainer_state.json: st and every flag's value in opts. 0, or -1. */
int ckpt_state_write(const char *who, const char *dir, const run_state *st, const cli_flag *flags, size_t n, const void *opts);

/* Reads dir/trainer_state.json of command into *st (losses and val_losses malloc'd, of
   st->step and st->step + 1 values: free them), and the stored options into opts,
   except those given on this command line (given[k]): each of those must be one of
   may_change (a NULL-terminated list of flag names) or equal the stored value. 0, or -1
   after a message. */
int ckpt_state_read(const char *who, const char *dir, const char *command, run_state *st, float **losses, double **val_losses,
                    const cli_flag *flags, size_t n, void *opts, const bool *given, const char *const *may_change);
/* Frees the strings ckpt_state_read set in the options (after the run). */
void ckpt_state_free(run_state *st);

#endif
