/* Reference of wgml_dropout (include/wgml.h spells the decision rule). */
#ifndef WGML_REF_DROPOUT_H
#define WGML_REF_DROPOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Whether element i is kept for dropout probability p and seed. */
bool ref_dropout_kept(size_t i, float p, uint64_t seed);
/* out[i] = x[i] / (1 - p) where kept, else 0, in double. */
void ref_dropout(const float *x, double *out, size_t n, float p, uint64_t seed);

#endif
