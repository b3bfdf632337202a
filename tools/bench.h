/* The benchmark suite behind `wgml bench`: one table of cases (tools/bench_cases.c), one
   runner (tools/cmd_bench.c). A case allocates its tensors in setup, calls one op in run,
   and states the bytes it must move and the FLOPs it must do (as functions of its dims, so
   --small shapes are counted right), so the runner can report bandwidth, arithmetic rate
   and the fraction of the measured peaks. */
#ifndef WGML_TOOLS_BENCH_H
#define WGML_TOOLS_BENCH_H

#include "wgml.h"

#include <stddef.h>
#include <stdint.h>

#define BENCH_MAX_TENSORS 12

typedef struct bench_state {
    wgml_context *ctx;
    wgml_engine *eng;
    wgml_tensor *t[BENCH_MAX_TENSORS];
    uint32_t u[8];               /* per-case integer parameters */
    float f[8];                  /* per-case float parameters */
    wgml_attention_options attn;
    wgml_model *model;           /* model-level cases: a random model and its KV cache */
    wgml_kv_cache *cache;
    wgml_trainer *trainer;
    uint32_t *ids;               /* host token ids of a training case */
} bench_state;

typedef struct bench_case {
    const char *op;              /* the wgml_ function measured, without the prefix */
    const char *shape;           /* the full-size shape, also the key shared with bench/torch_bench.py */
    uint64_t dims[8];            /* the case's dimensions at full size ... */
    uint64_t small[8];           /* ... and with --small (slow adapters) */
    double (*bytes)(const uint64_t *dims);   /* minimum bytes moved per call */
    double (*flops)(const uint64_t *dims);   /* floating-point operations per call; NULL: memory-bound */
    /* creates the tensors (random contents) and parameters; returns 0 on success */
    int (*setup)(bench_state *b, const uint64_t *dims);
    wgml_status (*run)(bench_state *b);
    const char *group;           /* "memory", "matmul", "attention", "decode", "latency", "overhead" */
} bench_case;

extern const bench_case bench_cases[];
extern const size_t bench_case_count;

/* Helpers for setup functions: a tensor of random values in [lo, hi) (f32) or of random
   integers below `below` (u32); NULL on failure (the message is in wgml_last_error). */
wgml_tensor *bench_random_f32(bench_state *b, double lo, double hi, uint32_t ndim, const size_t *shape);
wgml_tensor *bench_random_u32(bench_state *b, uint32_t below, uint32_t ndim, const size_t *shape);
wgml_tensor *bench_empty(bench_state *b, wgml_dtype dtype, uint32_t ndim, const size_t *shape);

#endif
