#include "ref_rope.h"

#include <math.h>

void ref_rope_freqs(double theta, size_t head_dim, long double *freqs)
{
    for (size_t i = 0; i < head_dim / 2; i++) freqs[i] = powl((long double)theta, -2.0L * (long double)i / (long double)head_dim);
}

size_t ref_rope_partner(size_t j, size_t head_dim, int interleaved)
{
    size_t half = head_dim / 2;
    if (interleaved) return j ^ 1u;
    return j < half ? j + half : j - half;
}

void ref_rope_d(const double *x, size_t ntok, size_t seq, size_t hidden, size_t head_dim, uint64_t pos,
                const long double *freqs, int interleaved, int inverse, double *out)
{
    size_t half = head_dim / 2;
    for (size_t n = 0; n < ntok; n++) {
        long double position = (long double)(pos + n % seq);
        for (size_t h = 0; h < hidden / head_dim; h++) {
            const double *v = x + n * hidden + h * head_dim;
            double *o = out + n * hidden + h * head_dim;
            for (size_t i = 0; i < half; i++) {
                /* long double: exact for a 32-bit position times an f32 frequency */
                long double a = position * freqs[i];
                double c = (double)cosl(a), s = (double)(inverse ? -sinl(a) : sinl(a));
                size_t ix = interleaved ? 2 * i : i, iy = interleaved ? 2 * i + 1 : i + half;
                double xv = v[ix], yv = v[iy];
                o[ix] = xv * c - yv * s;
                o[iy] = yv * c + xv * s;
            }
        }
    }
}

void ref_rope(const float *x, size_t ntok, size_t seq, size_t hidden, size_t head_dim, uint64_t pos,
              const long double *freqs, int interleaved, int inverse, double *out)
{
    for (size_t i = 0; i < ntok * hidden; i++) out[i] = x[i];
    ref_rope_d(out, ntok, seq, hidden, head_dim, pos, freqs, interleaved, inverse, out);   /* pairwise in place */
}
