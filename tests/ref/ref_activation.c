#include "ref_activation.h"

#include <math.h>

double ref_sigmoid(double x)
{
    /* exp(-x) overflows double only below x = -709; the test inputs stay far above that */
    return 1.0 / (1.0 + exp(-x));
}

double ref_silu(double x) { return x * ref_sigmoid(x); }

double ref_silu_grad(double x)
{
    double s = ref_sigmoid(x);
    return s * (1.0 + x * (1.0 - s));
}

double ref_relu(double x) { return x > 0 ? x : (isnan(x) ? x : 0.0); }

/* u = sqrt(2/pi) (x + 0.044715 x^3); x^3 stays finite in double for every finite f32 x */
static const double sqrt_2_over_pi = 0.79788456080286535588;
static double gelu_u(double x) { return sqrt_2_over_pi * (x + 0.044715 * x * x * x); }

double ref_gelu_tanh(double x) { return 0.5 * x * (1.0 + tanh(gelu_u(x))); }

double ref_gelu_tanh_grad(double x)
{
    /* d/dx 0.5 x (1 + tanh(u)) = 0.5 (1 + tanh(u)) + 0.5 x (1 - tanh(u)^2) u'(x) */
    double t = tanh(gelu_u(x)), du = sqrt_2_over_pi * (1.0 + 3.0 * 0.044715 * x * x);
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du;
}

void ref_silu_forward(const float *x, double *out, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = ref_silu(x[i]);
}

void ref_silu_backward(const float *grad_out, const float *x, double *grad_in, size_t n)
{
    for (size_t i = 0; i < n; i++) grad_in[i] = (double)grad_out[i] * ref_silu_grad(x[i]);
}

void ref_relu_forward(const float *x, double *out, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = ref_relu(x[i]);
}

void ref_relu_backward(const float *grad_out, const float *x, double *grad_in, size_t n)
{
    for (size_t i = 0; i < n; i++) grad_in[i] = x[i] > 0 ? (double)grad_out[i] : 0.0;
}

void ref_silu_gate(const float *up, const float *gate, double *out, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = ref_silu(up[i]) * gate[i];
}

void ref_silu_gate_backward(const float *up, const float *gate, const float *grad_out, double *grad_up,
                            double *grad_gate, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        grad_up[i] = (double)grad_out[i] * gate[i] * ref_silu_grad(up[i]);
        grad_gate[i] = (double)grad_out[i] * ref_silu(up[i]);
    }
}

void ref_gelu_gate(const float *up, const float *gate, double *out, size_t n)
{
    for (size_t i = 0; i < n; i++) out[i] = ref_gelu_tanh(up[i]) * gate[i];
}

void ref_gelu_gate_backward(const float *up, const float *gate, const float *grad_out, double *grad_up,
                            double *grad_gate, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        grad_up[i] = (double)grad_out[i] * gate[i] * ref_gelu_tanh_grad(up[i]);
        grad_gate[i] = (double)grad_out[i] * ref_gelu_tanh(up[i]);
    }
}

void ref_add_backward(const float *grad_out, double *grad_a, double *grad_b, size_t n)
{
    for (size_t i = 0; i < n; i++) grad_a[i] = grad_b[i] = grad_out[i];
}

void ref_sub_backward(const float *grad_out, double *grad_a, double *grad_b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        grad_a[i] = grad_out[i];
        grad_b[i] = -(double)grad_out[i];
    }
}

void ref_mul_backward(const float *grad_out, const float *a, const float *b, double *grad_a, double *grad_b,
                      size_t n)
{
    for (size_t i = 0; i < n; i++) {
        grad_a[i] = (double)grad_out[i] * b[i];
        grad_b[i] = (double)grad_out[i] * a[i];
    }
}
