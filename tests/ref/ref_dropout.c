/* Reference of wgml_dropout, from the rule in include/wgml.h. */
#include "ref_dropout.h"
#include "ref_attention.h"   /* ref_attn_mix32: the finaliser both dropout rules use */

#include <math.h>

bool ref_dropout_kept(size_t i, float p, uint64_t seed)
{
    uint32_t k0 = ref_attn_mix32((uint32_t)seed ^ 0x3c6ef372u);
    uint32_t k1 = ref_attn_mix32((uint32_t)(seed >> 32) ^ ref_attn_mix32(k0 ^ 0x9e3779b9u));
    double t = floor((double)p * 4294967296.0);
    uint32_t threshold = t >= 4294967295.0 ? 4294967295u : (uint32_t)t;
    return ref_attn_mix32(ref_attn_mix32((uint32_t)i ^ k0) + k1) >= threshold;
}

void ref_dropout(const float *x, double *out, size_t n, float p, uint64_t seed)
{
    double scale = 1.0 / (1.0 - (double)p);
    for (size_t i = 0; i < n; i++) out[i] = ref_dropout_kept(i, p, seed) ? (double)x[i] * scale : 0.0;
}
