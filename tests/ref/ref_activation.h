/* Double-precision references of the activation family (src/ops/activation.c): the
   readable specification. Inputs are the f32 data the GPU saw; outputs are double. */
#ifndef WGML_REF_ACTIVATION_H
#define WGML_REF_ACTIVATION_H

#include <stddef.h>

/* Scalars. sigmoid(x) = 1 / (1 + exp(-x)); silu(x) = x * sigmoid(x);
   silu'(x) = s * (1 + x * (1 - s)) with s = sigmoid(x); relu(x) = max(x, 0).
   gelu_tanh(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3) (PyTorch's
   approximate="tanh"), and its derivative from the same tanh formula. For x < 0 their
   1 + tanh(u) = 2 exp(2u) / (1 + exp(2u)) carries the absolute rounding of tanh (1e-16):
   a relative error of about 6e-17 exp(2|u|), 1e-9 at x = -5 and 1e-6 at x = -5.8, and
   below about x = -7.3 it is 0. */
double ref_sigmoid(double x);
double ref_silu(double x);
double ref_silu_grad(double x);
double ref_relu(double x);
double ref_gelu_tanh(double x);
double ref_gelu_tanh_grad(double x);

void ref_silu_forward(const float *x, double *out, size_t n);
void ref_silu_backward(const float *grad_out, const float *x, double *grad_in, size_t n);
void ref_relu_forward(const float *x, double *out, size_t n);
void ref_relu_backward(const float *grad_out, const float *x, double *grad_in, size_t n);
void ref_silu_gate(const float *up, const float *gate, double *out, size_t n);
void ref_silu_gate_backward(const float *up, const float *gate, const float *grad_out, double *grad_up,
                            double *grad_gate, size_t n);
void ref_gelu_gate(const float *up, const float *gate, double *out, size_t n);
void ref_gelu_gate_backward(const float *up, const float *gate, const float *grad_out, double *grad_up,
                            double *grad_gate, size_t n);
void ref_add_backward(const float *grad_out, double *grad_a, double *grad_b, size_t n);
void ref_sub_backward(const float *grad_out, double *grad_a, double *grad_b, size_t n);
void ref_mul_backward(const float *grad_out, const float *a, const float *b, double *grad_a, double *grad_b,
                      size_t n);

#endif
