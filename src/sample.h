/* What the host sampler (src/sample.c) shares with its GPU front end (src/sample_gpu.c):
   the sampler's state, candidates and the steps after the temperature. */
#ifndef WGML_SAMPLE_H
#define WGML_SAMPLE_H

#include "internal.h"

/* A candidate: its adjusted logit (then its weight, exp(z - max)) and id. */
typedef struct cand { double z; uint32_t v; } cand;

struct wgml_sampler {
    wgml_sampling set;
    uint32_t vocab;
    uint64_t rng;
    double *z;          /* the adjusted logits */
    cand *c;            /* the candidates still in */
    uint32_t *count;    /* history counts (zero between calls) */
};

/* Candidates by decreasing adjusted logit, ties to the lower id (a strict order: ids are
   unique). */
static inline bool wgml__cand_before(const cand *a, const cand *b) { return a->z > b->z || (a->z == b->z && a->v < b->v); }

/* qsort's comparison in that order. */
int wgml__cand_compare(const void *a, const void *b);

/* splitmix64: the next 64 bits of the generator at *s. */
uint64_t wgml__sample_rng(uint64_t *s);
/* The next uniform draw in [0, 1) from s's generator (53 bits). */
double wgml__sample_uniform(wgml_sampler *s);
/* Puts the k best of c[0..n) first, in order. */
void wgml__sample_best_first(cand *c, size_t n, size_t k);
/* Steps 4 to 6 of wgml.h's list and the draw, over the live candidates cd[0..m) (m >= 1)
   in id order with z = the adjusted logit / temperature; writes *token. */
void wgml__sample_filter_draw(wgml_sampler *s, cand *cd, size_t m, uint32_t *token);
/* One draw from cd[0..m) whose z are weights summing to sum, walked in their order. */
uint32_t wgml__sample_draw(wgml_sampler *s, const cand *cd, size_t m, double sum);

#endif
