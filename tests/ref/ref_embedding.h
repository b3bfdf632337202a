/* References of the embedding lookup and its gradient (src/ops/embedding.c). */
#ifndef WGML_REF_EMBEDDING_H
#define WGML_REF_EMBEDDING_H

#include <stddef.h>
#include <stdint.h>

/* out[i, :] = table[ids[i], :] for ids[i] < v, else zeros; table [v, d], out [n, d]. */
void ref_embedding(const float *table, const uint32_t *ids, size_t n, size_t v, size_t d, float *out);

/* grad_table[k, :] = sum of grad_out[i, :] over i with ids[i] == k, in double. */
void ref_embedding_backward(const float *grad_out, const uint32_t *ids, size_t n, size_t v, size_t d, double *grad_table);

/* The same sums in f32, adding in increasing i: the exact bits the deterministic kernel
   must produce. */
void ref_embedding_backward_f32_sequential(const float *grad_out, const uint32_t *ids, size_t n, size_t v, size_t d,
                                           float *grad_table);

#endif
