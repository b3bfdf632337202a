/* Double-precision reference of rotary embeddings (src/ops/rope.c): the readable
   specification. */
#ifndef WGML_REF_ROPE_H
#define WGML_REF_ROPE_H

#include <stddef.h>
#include <stdint.h>

/* freqs[i] = theta^(-2i / head_dim), i < head_dim / 2, in long double (so that positions up
   to 2^32 times a frequency stay exact to well under 1e-7 rad where long double has a
   64-bit significand). */
void ref_rope_freqs(double theta, size_t head_dim, long double *freqs);

/* x holds ntok tokens of `hidden` values (hidden a multiple of head_dim); token n sits at
   position pos + n % seq. Each head vector's pairs, (i, i + head_dim/2) or, when
   interleaved, (2i, 2i + 1), are rotated by the angle a = position * freqs[i] (-a when
   inverse): x' = x cos a - y sin a, y' = y cos a + x sin a. */
void ref_rope(const float *x, size_t ntok, size_t seq, size_t hidden, size_t head_dim, uint64_t pos,
              const long double *freqs, int interleaved, int inverse, double *out);

/* The same on double input (for finite differences). */
void ref_rope_d(const double *x, size_t ntok, size_t seq, size_t hidden, size_t head_dim, uint64_t pos,
                const long double *freqs, int interleaved, int inverse, double *out);

/* The element paired with element j of a head vector. */
size_t ref_rope_partner(size_t j, size_t head_dim, int interleaved);

#endif
