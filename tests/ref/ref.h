/* Double-precision CPU references: the readable specification of every kernel.
   Inputs are the f32 data the GPU saw; outputs are double. */
#ifndef WGML_REF_H
#define WGML_REF_H

#include <stddef.h>
#include <stdint.h>

/* elementwise: out[i] = a[i] OP b[i] */
void ref_add(const float *a, const float *b, double *out, size_t n);
void ref_sub(const float *a, const float *b, double *out, size_t n);
void ref_mul(const float *a, const float *b, double *out, size_t n);

#endif
