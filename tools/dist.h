/* Data parallelism in wgml train and finetune (DATA PARALLELISM in wgml.h): the job this
   process belongs to when started by mpirun, its device, who writes, and the check that
   every process ends with the same weights. Outside a job everything here is the single
   process's (comm NULL, rank 0 of 1). */
#ifndef WGML_TOOLS_DIST_H
#define WGML_TOOLS_DIST_H

#include "wgml.h"

#include <stdbool.h>

typedef struct cli_dist {
    wgml_comm *comm;     /* NULL: one process */
    uint32_t rank, size;
} cli_dist;

/* Joins the job, its collectives bounded by $WGML_COMM_TIMEOUT seconds (default 600); a
   process other than rank 0 then prints nothing on stdout (rank 0 reports for the job).
   0, or -1 after a message. */
int cli_dist_join(const char *who, cli_dist *d);
/* Leaves it (d may hold no job). */
void cli_dist_leave(cli_dist *d);
/* After a failure that leaves the others waiting: ends the whole job with status code
   (returns only outside a job). */
void cli_dist_fail(cli_dist *d, int code);
/* Whether this process writes files and reports: rank 0. */
static inline bool cli_dist_writes(const cli_dist *d) { return d->rank == 0; }

/* The context of this process: in a job, unless WGML_DEVICE chooses, the adapter at the
   node-local rank modulo the adapters listed; its matrix products at precision ("f32",
   "f16" or "f16x3": wgml_precision; NULL: f32). 0, or -1 after a message. */
int cli_dist_context(const char *who, const cli_dist *d, const char *precision, wgml_context **ctx);
/* The help of train's and finetune's --precision and --loss-scale */
#define PRECISION_HELP "matrix products: f32, f16 (mixed precision: f16 inputs, f32 sums, weights and optimizer; on " \
    "the GPU's matrix units where the runtime offers them, README) or f16x3 (f32 accuracy from three f16 products)"
#define LOSS_SCALE_HELP "initial dynamic loss scale, a power of two (halved on a step with non-finite gradients, " \
    "which is skipped; doubled after 2000 good steps); -1: 65536 with --precision f16, else none; 0: none"
/* The help of the model commands' --precision (generate, chat, serve, eval, logits) */
#define INFER_PRECISION_HELP "matrix products and attention's forward: f32, f16 (f16 inputs, f32 sums; on the GPU's " \
    "matrix units where the runtime offers them, README) or f16x3 (f32 accuracy from three f16 products)"
/* --precision's value (NULL: f32) as a wgml_precision: 0, or -1 after a message naming the
   values there are. */
int cli_precision(const char *who, const char *precision, wgml_precision *out);
/* Checks --precision (f32, f16 or f16x3) and --loss-scale (-1, 0 or a power of two in
   [2^-24, 2^24]) before anything is written: 0, or -1 after a message. */
int cli_check_precision(const char *who, const char *precision, double loss_scale);
/* desc.loss_scale for --precision and --loss-scale (-1: PyTorch's 65536 with f16, else 0). */
float cli_loss_scale(const char *precision, double loss_scale);
/* desc.keep_attention_scores for --keep-scores (-1: on a GPU, unless --precision f16 runs
   attention on the adapter's matrix units, whose backward recomputes the scores as fast as
   the f32 kernels use kept ones, without their memory). */
bool cli_keep_scores(int keep_scores, const char *precision, const wgml_adapter_info *info);
/* A line saying how the products run and the loss scale, unless both are the defaults. */
void cli_print_precision(const char *precision, const wgml_adapter_info *info, const wgml_trainer *tr);
/* A line with the steps loss scaling skipped, if any, and the scale reached. */
void cli_print_skipped(const wgml_trainer *tr);

/* Checks that the n tensors hold the same bits on every process; rank 0 says so. 0, or -1
   after a message. */
int cli_dist_check_same(const char *who, cli_dist *d, wgml_tensor *const *t, size_t n);

#endif
