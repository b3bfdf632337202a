/* The matrix products' tuning fields (see src/tuning.h): 0 lets src/ops/matmul.c's rules
   decide. Each field forces one choice that a rule makes on some adapter or shape (a GPU's
   transposed copies, a fallback tile, the last-round split, ...), so that a test reaches it
   on any adapter. A field applies where its choice is made (tile and tail: the gemm; copy_b:
   matmul_bt's gemm; gemv_*: the matrix-vector kernels) and is ignored elsewhere.

   A value out of range, or a combination a product cannot take (copy_a on with copy_b off
   for matmul_bt, a last round of more tiles than the product has, a forced last round with
   a forced split-K), is a mistake of the test that set it: the call returns
   WGML_ERROR_INVALID_ARGUMENT and records nothing. A forced choice the adapter cannot hold
   (the wide gemv workgroups, subgroup sums its subgroups do not allow, a copy larger than
   one storage binding) returns WGML_ERROR_LIMIT, also recording nothing. */
#ifndef WGML_MATMUL_TUNING_H
#define WGML_MATMUL_TUNING_H

#include <stdint.h>

/* A yes-or-no choice: the rule's, forced on, forced off. */
enum { WGML__MM_RULE = 0, WGML__MM_ON = 1, WGML__MM_OFF = 2 };

/* The gemm's tile configurations (src/ops/matmul.c's TILES, which says what each is for). */
enum { WGML__MM_TILE_128 = 1, WGML__MM_TILE_64X128, WGML__MM_TILE_64, WGML__MM_TILE_64K8 };

typedef struct wgml__matmul_tuning {
    uint32_t tile;              /* WGML__MM_TILE_* */
    uint32_t splitk;            /* K-slices, 1 - 64 (1: unsplit); fewer where the slices'
                                   workspace would not fit one binding */
    uint32_t tail_tiles;        /* the last round: the last tail_tiles tiles (launch order) ... */
    uint32_t tail_slices;       /* ... in tail_slices K-slices, 2 - 64 (both set, or neither) */
    uint32_t copy_b;            /* WGML__MM_ON / _OFF: matmul_bt through b's transposed copy */
    uint32_t copy_a;            /* matmul and matmul_bt (with b's copy) as matmul_at through a's
                                   transposed copy */
    uint32_t pad;               /* the operands read along M or N whose rows are not whole vec4
                                   through copies with padded rows */
    uint32_t krem;              /* K not whole tile steps (and longer than one): the last K % BK
                                   values of k in a second pass that adds into out */
    uint32_t gemv_rows;         /* rows per gemv_rows workgroup: 1, 4 or 8 */
    uint32_t gemv_wide;         /* WGML__MM_ON / _OFF: gemv_cols4 in the wide workgroups of the
                                   profile (a GPU's choice for 4096 - 8191 columns) */
    uint32_t gemv_subgroups;    /* WGML__MM_ON / _OFF: gemv_cols4's sum over its k-groups by
                                   subgroup shuffles (the rule: wherever the subgroups allow) */
} wgml__matmul_tuning;

#endif
