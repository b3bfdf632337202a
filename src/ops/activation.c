/* Activations (SiLU, ReLU, the fused SiLU and GELU gates), their gradients, and the gradients of add,
   sub and mul. Kernels: src/kernels/activation.wgsl.

   Every op here is element-wise: up to three inputs and one or two outputs of the same
   element count. One helper, run(), binds each distinct buffer once: outputs read_write,
   the inputs that are not also outputs read-only, and tells the kernel (SRC_P/Q/R) where
   each logical input lives. That is what lets any output alias any input (in place) without
   ever binding one buffer both read-only and read_write. The two outputs of a backward op
   must be different tensors (they would receive different values). */
#include "internal.h"

#define WG 256
#define EU 4   /* vec4 per thread: EU in the kernel */

enum {
    OP_SILU = 0,
    OP_RELU = 1,
    OP_SILU_BW = 2,
    OP_RELU_BW = 3,
    OP_SILU_GATE = 4,
    OP_ADD_BW = 5,
    OP_SUB_BW = 6,
    OP_MUL_BW = 7,
    OP_SILU_GATE_BW = 8,
    OP_GELU_GATE = 9,
    OP_GELU_GATE_BW = 10
};

typedef struct act_params { uint32_t n4, pad[3]; } act_params;

static const char *const entries[2][4] = {
    { "one_r0", "one_r1", "one_r2", NULL },
    { "two_r0", "two_r1", "two_r2", "two_r3" },
};
static const char *const layouts[2][4] = {
    { "uw", "uwr", "uwrr", NULL },
    { "uww", "uwwr", "uwwrr", "uwwrrr" },
};

/* Records op over nin inputs and nout outputs (all validated: f32, same numel, outputs
   distinct). */
static wgml_status run(wgml_engine *e, int op, uint32_t nin, const wgml_tensor *const *in, uint32_t nout,
                       wgml_tensor *const *out)
{
    wgml__arg args[5];
    uint32_t nargs = 0, nreads = 0;
    const wgml_tensor *reads[3];
    uint32_t src[3] = { 2, 2, 2 };
    for (uint32_t o = 0; o < nout; o++) args[nargs++] = wgml__t(out[o]);
    for (uint32_t i = 0; i < nin; i++) {
        uint32_t s = UINT32_MAX;
        for (uint32_t o = 0; o < nout && s == UINT32_MAX; o++)
            if (wgml__same(in[i], out[o])) s = o;
        for (uint32_t r = 0; r < nreads && s == UINT32_MAX; r++)
            if (wgml__same(in[i], reads[r])) s = 2 + r;
        if (s == UINT32_MAX) {
            reads[nreads] = in[i];
            args[nargs++] = wgml__t(in[i]);
            s = 2 + nreads++;
        }
        src[i] = s;
    }
    uint64_t n4 = (wgml_tensor_numel(out[0]) + 3) / 4;
    act_params p = { .n4 = (uint32_t)n4 };
    uint32_t gx, gy;
    WGML_CHECK(wgml__grid(e->ctx, (n4 + WG * EU - 1) / (WG * EU), &gx, &gy));
    wgml__kernel k = { .file = "activation", .entry = entries[nout - 1][nreads], .layout = layouts[nout - 1][nreads],
                       .nconst = 5,
                       .constants = { { "OP", op }, { "NIN", nin }, { "SRC_P", src[0] }, { "SRC_Q", src[1] },
                                      { "SRC_R", src[2] } } };
    return wgml__dispatch(e, &k, &p, sizeof p, args, nargs, gx, gy, 1);
}

/* Validation shared by every op: engine, f32 tensors, equal element counts (against the
   first input), and distinct outputs. names[] lists inputs then outputs. */
static wgml_status check(wgml_engine *e, const char *fn, uint32_t nin, const wgml_tensor *const *in, uint32_t nout,
                         wgml_tensor *const *out, const char *const *names)
{
    WGML_CHECK(wgml__check_engine(e, fn));
    for (uint32_t i = 0; i < nin; i++) WGML_CHECK(wgml__check_tensor(e, fn, names[i], in[i], WGML_F32));
    for (uint32_t o = 0; o < nout; o++) WGML_CHECK(wgml__check_tensor(e, fn, names[nin + o], out[o], WGML_F32));
    for (uint32_t i = 1; i < nin; i++) WGML_CHECK(wgml__check_same_numel(e, fn, names[0], in[0], names[i], in[i]));
    for (uint32_t o = 0; o < nout; o++)
        WGML_CHECK(wgml__check_same_numel(e, fn, names[0], in[0], names[nin + o], out[o]));
    if (nout == 2) WGML_CHECK(wgml__check_no_alias(e, fn, names[nin + 1], out[1], names[nin], out[0]));
    return WGML_OK;
}

static wgml_status op1(wgml_engine *e, const char *fn, int op, const char *const *names, uint32_t nin,
                       const wgml_tensor *a, const wgml_tensor *b, wgml_tensor *out)
{
    const wgml_tensor *in[2] = { a, b };
    WGML_CHECK(check(e, fn, nin, in, 1, &out, names));
    return run(e, op, nin, in, 1, &out);
}

static wgml_status op2(wgml_engine *e, const char *fn, int op, const char *const *names, uint32_t nin,
                       const wgml_tensor *a, const wgml_tensor *b, const wgml_tensor *c, wgml_tensor *out_a,
                       wgml_tensor *out_b)
{
    const wgml_tensor *in[3] = { a, b, c };
    wgml_tensor *out[2] = { out_a, out_b };
    WGML_CHECK(check(e, fn, nin, in, 2, out, names));
    return run(e, op, nin, in, 2, out);
}

wgml_status wgml_add_backward(wgml_engine *e, const wgml_tensor *grad_out, wgml_tensor *grad_a, wgml_tensor *grad_b)
{
    static const char *const names[] = { "grad_out", "grad_a", "grad_b" };
    return op2(e, "wgml_add_backward", OP_ADD_BW, names, 1, grad_out, NULL, NULL, grad_a, grad_b);
}

wgml_status wgml_sub_backward(wgml_engine *e, const wgml_tensor *grad_out, wgml_tensor *grad_a, wgml_tensor *grad_b)
{
    static const char *const names[] = { "grad_out", "grad_a", "grad_b" };
    return op2(e, "wgml_sub_backward", OP_SUB_BW, names, 1, grad_out, NULL, NULL, grad_a, grad_b);
}

wgml_status wgml_mul_backward(wgml_engine *e, const wgml_tensor *grad_out, const wgml_tensor *a, const wgml_tensor *b,
                              wgml_tensor *grad_a, wgml_tensor *grad_b)
{
    static const char *const names[] = { "grad_out", "a", "b", "grad_a", "grad_b" };
    return op2(e, "wgml_mul_backward", OP_MUL_BW, names, 3, grad_out, a, b, grad_a, grad_b);
}

wgml_status wgml_silu(wgml_engine *e, const wgml_tensor *input, wgml_tensor *out)
{
    static const char *const names[] = { "input", "out" };
    return op1(e, "wgml_silu", OP_SILU, names, 1, input, NULL, out);
}

wgml_status wgml_silu_backward(wgml_engine *e, const wgml_tensor *grad_out, const wgml_tensor *input,
                               wgml_tensor *grad_in)
{
    static const char *const names[] = { "grad_out", "input", "grad_in" };
    return op1(e, "wgml_silu_backward", OP_SILU_BW, names, 2, grad_out, input, grad_in);
}

wgml_status wgml_relu(wgml_engine *e, const wgml_tensor *input, wgml_tensor *out)
{
    static const char *const names[] = { "input", "out" };
    return op1(e, "wgml_relu", OP_RELU, names, 1, input, NULL, out);
}

wgml_status wgml_relu_backward(wgml_engine *e, const wgml_tensor *grad_out, const wgml_tensor *input,
                               wgml_tensor *grad_in)
{
    static const char *const names[] = { "grad_out", "input", "grad_in" };
    return op1(e, "wgml_relu_backward", OP_RELU_BW, names, 2, grad_out, input, grad_in);
}

wgml_status wgml_silu_gate_fused(wgml_engine *e, const wgml_tensor *up, const wgml_tensor *gate, wgml_tensor *out)
{
    static const char *const names[] = { "up", "gate", "out" };
    return op1(e, "wgml_silu_gate_fused", OP_SILU_GATE, names, 2, up, gate, out);
}

wgml_status wgml_silu_gate_backward(wgml_engine *e, const wgml_tensor *up, const wgml_tensor *gate,
                                    const wgml_tensor *grad_out, wgml_tensor *grad_up, wgml_tensor *grad_gate)
{
    static const char *const names[] = { "up", "gate", "grad_out", "grad_up", "grad_gate" };
    return op2(e, "wgml_silu_gate_backward", OP_SILU_GATE_BW, names, 3, up, gate, grad_out, grad_up, grad_gate);
}

wgml_status wgml_gelu_tanh_gate_fused(wgml_engine *e, const wgml_tensor *up, const wgml_tensor *gate, wgml_tensor *out)
{
    static const char *const names[] = { "up", "gate", "out" };
    return op1(e, "wgml_gelu_tanh_gate_fused", OP_GELU_GATE, names, 2, up, gate, out);
}

wgml_status wgml_gelu_tanh_gate_backward(wgml_engine *e, const wgml_tensor *up, const wgml_tensor *gate,
                                         const wgml_tensor *grad_out, wgml_tensor *grad_up, wgml_tensor *grad_gate)
{
    static const char *const names[] = { "up", "gate", "grad_out", "grad_up", "grad_gate" };
    return op2(e, "wgml_gelu_tanh_gate_backward", OP_GELU_GATE_BW, names, 3, up, gate, grad_out, grad_up, grad_gate);
}

/* The variants of the common, non-aliased calls. */
#define K1(op, nin, nr) { .file = "activation", .entry = "one_r" #nr, .layout = nr == 1 ? "uwr" : "uwrr", .nconst = 5, \
    .constants = { { "OP", op }, { "NIN", nin }, { "SRC_P", 2 }, { "SRC_Q", nin > 1 ? 3 : 2 }, { "SRC_R", 2 } } }
#define K2(op, nin, nr) { .file = "activation", .entry = "two_r" #nr, .layout = nr == 1 ? "uwwr" : "uwwrrr", .nconst = 5, \
    .constants = { { "OP", op }, { "NIN", nin }, { "SRC_P", 2 }, { "SRC_Q", nin > 1 ? 3 : 2 }, { "SRC_R", nin > 2 ? 4 : 2 } } }
const wgml__kernel wgml__activation_kernels[] = {
    K1(OP_SILU, 1, 1), K1(OP_RELU, 1, 1), K1(OP_SILU_BW, 2, 2), K1(OP_RELU_BW, 2, 2), K1(OP_SILU_GATE, 2, 2),
    K2(OP_ADD_BW, 1, 1), K2(OP_SUB_BW, 1, 1), K2(OP_MUL_BW, 3, 3), K2(OP_SILU_GATE_BW, 3, 3),
};
const size_t wgml__activation_kernel_count = sizeof wgml__activation_kernels / sizeof wgml__activation_kernels[0];
