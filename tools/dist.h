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
   node-local rank modulo the adapters listed. 0, or -1 after a message. */
int cli_dist_context(const char *who, const cli_dist *d, wgml_context **ctx);

/* Checks that the n tensors hold the same bits on every process; rank 0 says so. 0, or -1
   after a message. */
int cli_dist_check_same(const char *who, cli_dist *d, wgml_tensor *const *t, size_t n);

#endif
