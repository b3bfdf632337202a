/* Reference of the selection family (src/ops/select.c): a full sort. */
#ifndef WGML_REF_SELECT_H
#define WGML_REF_SELECT_H

#include <stddef.h>
#include <stdint.h>

/* Writes into idx[0..k) the indices of the k largest of x[0..n), largest first, by a full
   sort (qsort) in this order: a larger value first; equal values (-0 equals +0) by lower
   index; NaN after every number (including -inf), NaNs among themselves by index. */
void ref_top_k(const float *x, size_t n, uint32_t *idx, size_t k);

#endif
