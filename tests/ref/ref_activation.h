/* Double-precision references of the activation family (src/ops/activation.c): the
   readable specification. Inputs are the f32 data the GPU saw; outputs are double. */
#ifndef WGML_REF_ACTIVATION_H
#define WGML_REF_ACTIVATION_H

#include <stddef.h>

/* Scalars. sigmoid(x) = 1 / (1 + exp(-x)); silu(x) = x * sigmoid(x);
   silu'(x) = s * (1 + x * (1 - s)) with s = sigmoid(x); relu(x) = max(x, 0). */
double ref_sigmoid(double x);
double ref_silu(double x);
double ref_silu_grad(double x);
double ref_relu(double x);

void ref_silu_forward(const float *x, double *out, size_t n);
void ref_silu_backward(const float *grad_out, const float *x, double *grad_in, size_t n);
void ref_relu_forward(const float *x, double *out, size_t n);
void ref_relu_backward(const float *grad_out, const float *x, double *grad_in, size_t n);
void ref_silu_gate(const float *up, const float *gate, double *out, size_t n);
void ref_silu_gate_backward(const float *up, const float *gate, const float *grad_out, double *grad_up,
                            double *grad_gate, size_t n);
void ref_add_backward(const float *grad_out, double *grad_a, double *grad_b, size_t n);
void ref_sub_backward(const float *grad_out, double *grad_a, double *grad_b, size_t n);
void ref_mul_backward(const float *grad_out, const float *a, const float *b, double *grad_a, double *grad_b,
                      size_t n);

#endif
