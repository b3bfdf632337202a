/* The attention kernels' tuning fields (see src/tuning.h): 0 lets src/ops/attention.c's
   rules decide.

   Each field is an input of a rule or a choice a rule makes on some adapter, so that a
   test on one adapter (lavapipe) runs the kernels that other adapters get. None of them
   reaches a kernel or a variant that no rule picks. */
#ifndef WGML_ATTENTION_TUNING_H
#define WGML_ATTENTION_TUNING_H

#include <stdint.h>

/* Values of wgml__attention_tuning.features. */
enum {
    WGML__ATTN_FEATURES_CALL = 1,   /* GPUs' rule: a pipeline per call with only the mask and dropout code it uses */
    WGML__ATTN_FEATURES_ALL = 2,    /* CPU adapters' rule: one pipeline with both */
};

typedef struct wgml__attention_tuning {
    /* Plan as on an adapter with at most this many bytes of workgroup storage (0: this
       adapter's limit). Below 24 KiB the tiled forward and backward kernels replace the
       64 x 64 ones; the backward's head_dim chunk, the tiles and the decoding chunks
       follow the same limit. */
    uint32_t workgroup_storage;
    /* Plan as on an adapter with at most this many storage buffers per shader stage (0:
       this adapter's limit). Below 10 the backward's dk, dv run tiled and dq recomputes
       dS (bwd_dq64). */
    uint32_t storage_buffers;
    /* The most bytes of dS blocks the backward keeps at a time (0: 1 GiB, or one storage
       binding where that is smaller). Where one (batch, kv head) pair's blocks exceed it,
       dq recomputes dS; else the backward runs over ranges of pairs that fit it. */
    uint64_t ds_bytes;
    /* 8: the 64 x 64 backward kernels consume each staged head_dim chunk 8 steps at a
       time (G_SUB), the rule's choice for chunks of 32 floats, here for any chunk above 8
       (tests: chunks of 16, which a 32 KiB adapter holds). 0: the rule. */
    uint32_t backward_sub;
    /* WGML__ATTN_FEATURES_*; 0: the rule (CPU adapters all, GPUs per call). */
    uint32_t features;
    /* Heads whose blocks one dispatch orders together, longest first (block_of in
       src/kernels/attention_prelude.wgsl); 0: the rule (order_heads in attention.c). */
    uint32_t order_heads;
} wgml__attention_tuning;

#endif
