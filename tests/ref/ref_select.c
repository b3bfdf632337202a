#include "ref_select.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

typedef struct item { float v; uint32_t i; } item;

static int cmp(const void *pa, const void *pb)
{
    const item *a = pa, *b = pb;
    bool na = isnan(a->v), nb = isnan(b->v);
    if (na != nb) return na ? 1 : -1;                 /* NaN after numbers */
    if (!na && a->v != b->v) return a->v > b->v ? -1 : 1;
    return a->i < b->i ? -1 : a->i > b->i;            /* equal (or both NaN): lower index first */
}

void ref_top_k(const float *x, size_t n, uint32_t *idx, size_t k)
{
    item *it = malloc((n ? n : 1) * sizeof *it);
    if (!it) abort();
    for (size_t i = 0; i < n; i++) it[i] = (item){ x[i], (uint32_t)i };
    qsort(it, n, sizeof *it, cmp);
    for (size_t i = 0; i < k; i++) idx[i] = it[i].i;
    free(it);
}
