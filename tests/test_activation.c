/* Activations and element-wise gradients (src/ops/activation.c): every op against the
   double reference on awkward lengths (a table of op cases), every way its outputs can alias its inputs, the
   backward passes against central finite differences of their forwards, SiLU and GELU at
   large |x|, a grid of more than 65535 workgroups, and the bad inputs of every op. */
#include "harness.h"
#include "ref_activation.h"

#include <stdlib.h>
#include <string.h>

enum { SILU, RELU, SILU_BW, RELU_BW, SILU_GATE, ADD_BW, SUB_BW, MUL_BW, SILU_GATE_BW, GELU_GATE, GELU_GATE_BW, NOPS };

/* Tolerances, |got - ref| <= atol + rtol * |ref|:
   - relu, relu_backward, add_backward, sub_backward copy or negate values: exact.
   - mul_backward: one f32 rounding of a product, 2^-24 relative: rtol 1e-7.
   - silu and silu_gate: exp is allowed a few ulp per unit of |x| (WGSL/Vulkan bound
     3 + 2|x| ulp), here |x| <= 12: about 30 ulp plus three roundings: rtol 4e-6 (5e-6 with
     the extra product of silu_gate).
   - silu_backward and silu_gate_backward: as silu, plus an absolute term for the
     cancellation in 1 + x * (1 - s) near its root x ~ -1.28, where terms of size ~1 are
     rounded (a few 2^-24) and then scaled by |grad_out| (and |gate|) <= 6 (36).
   - gelu_tanh_gate: GELU(x) = x * s, s = sigmoid(y), y = 2u = K (x + 0.044715 x^3), with
     exp(-|y|) as in SiLU. The kernel rounds y up to 7 times (two constants, four products
     and a sum of terms of one sign): 7|y| 2^-24 absolute, which exp turns into as much
     relative error; exp's own bound adds (3 + 2|y|) ulp of 2^-23: (6 + 11|y|) 2^-24 in
     all, and five roundings more give s, x * s and the product by gate. Inputs in [-5, 5],
     |y| <= 16.9: 197 * 2^-24, rtol 1.2e-5. (Below x = -5 the reference's own relative
     error, 1e-9 at -5, grows as e^|y|, so the range stops there;
     test_gelu_large_magnitudes takes |x| >= 15.)
   - gelu_tanh_gate_backward: GELU'(x) = t1 + t2, t1 = s, t2 = x s (1 - s) K (1 + 3 *
     0.044715 x^2). t1 has the error of s; t2 those of s and of 1 - s (together the exp
     error and 6 roundings) and 9 roundings of its own; with the sum and the products by
     grad_out and gate that is at most (6 + 11|y| + 18) 2^-24 <= 210 * 2^-24 of |ref|
     where t1 and t2 do not cancel: rtol 1.3e-5 (grad_gate is bounded as gelu_tanh_gate).
     Where they cancel (GELU' = 0 near x = -0.75: t1 = -t2 = 0.23, |y| = 1.23) the error
     bound |t1| e1 + |t2| e2 (e1, e2 those relative bounds) exceeds rtol |ref| by at most
     11.9 * 2^-24, its maximum over [-5, 5], at that root; scaled by |grad_out * gate| <=
     25: atol 1.8e-5. */
static const struct {
    const char *name;
    int nin, nout;
    double lo, hi;       /* range of the random inputs */
    double atol, rtol;
    const char *names[5];  /* inputs, then outputs */
} ops[NOPS] = {
    [SILU] = { "silu", 1, 1, -12, 12, 1e-30, 4e-6, { "input", "out" } },
    [RELU] = { "relu", 1, 1, -10, 10, 0, 0, { "input", "out" } },
    [SILU_BW] = { "silu_backward", 2, 1, -6, 6, 4e-6, 4e-6, { "grad_out", "input", "grad_in" } },
    [RELU_BW] = { "relu_backward", 2, 1, -10, 10, 0, 0, { "grad_out", "input", "grad_in" } },
    [SILU_GATE] = { "silu_gate_fused", 2, 1, -6, 6, 1e-30, 5e-6, { "up", "gate", "out" } },
    [ADD_BW] = { "add_backward", 1, 2, -10, 10, 0, 0, { "grad_out", "grad_a", "grad_b" } },
    [SUB_BW] = { "sub_backward", 1, 2, -10, 10, 0, 0, { "grad_out", "grad_a", "grad_b" } },
    [MUL_BW] = { "mul_backward", 3, 2, -10, 10, 1e-30, 1e-7, { "grad_out", "a", "b", "grad_a", "grad_b" } },
    [SILU_GATE_BW] = { "silu_gate_backward", 3, 2, -6, 6, 2e-5, 5e-6,
                       { "up", "gate", "grad_out", "grad_up", "grad_gate" } },
    [GELU_GATE] = { "gelu_tanh_gate_fused", 2, 1, -5, 5, 1e-30, 1.2e-5, { "up", "gate", "out" } },
    [GELU_GATE_BW] = { "gelu_tanh_gate_backward", 3, 2, -5, 5, 1.8e-5, 1.3e-5,
                       { "up", "gate", "grad_out", "grad_up", "grad_gate" } },
};

static wgml_status call(int op, wgml_engine *e, wgml_tensor *const *in, wgml_tensor *const *out)
{
    switch (op) {
    case SILU: return wgml_silu(e, in[0], out[0]);
    case RELU: return wgml_relu(e, in[0], out[0]);
    case SILU_BW: return wgml_silu_backward(e, in[0], in[1], out[0]);
    case RELU_BW: return wgml_relu_backward(e, in[0], in[1], out[0]);
    case SILU_GATE: return wgml_silu_gate_fused(e, in[0], in[1], out[0]);
    case ADD_BW: return wgml_add_backward(e, in[0], out[0], out[1]);
    case SUB_BW: return wgml_sub_backward(e, in[0], out[0], out[1]);
    case MUL_BW: return wgml_mul_backward(e, in[0], in[1], in[2], out[0], out[1]);
    case SILU_GATE_BW: return wgml_silu_gate_backward(e, in[0], in[1], in[2], out[0], out[1]);
    case GELU_GATE: return wgml_gelu_tanh_gate_fused(e, in[0], in[1], out[0]);
    default: return wgml_gelu_tanh_gate_backward(e, in[0], in[1], in[2], out[0], out[1]);
    }
}

static void reference(int op, const float *const *in, double *const *out, size_t n)
{
    switch (op) {
    case SILU: ref_silu_forward(in[0], out[0], n); break;
    case RELU: ref_relu_forward(in[0], out[0], n); break;
    case SILU_BW: ref_silu_backward(in[0], in[1], out[0], n); break;
    case RELU_BW: ref_relu_backward(in[0], in[1], out[0], n); break;
    case SILU_GATE: ref_silu_gate(in[0], in[1], out[0], n); break;
    case ADD_BW: ref_add_backward(in[0], out[0], out[1], n); break;
    case SUB_BW: ref_sub_backward(in[0], out[0], out[1], n); break;
    case MUL_BW: ref_mul_backward(in[0], in[1], in[2], out[0], out[1], n); break;
    case SILU_GATE_BW: ref_silu_gate_backward(in[0], in[1], in[2], out[0], out[1], n); break;
    case GELU_GATE: ref_gelu_gate(in[0], in[1], out[0], n); break;
    default: ref_gelu_gate_backward(in[0], in[1], in[2], out[0], out[1], n); break;
    }
}

/* ---- the op case table: every op on every awkward length ---------------------------- */

static const int op_ids[NOPS] = { SILU, RELU, SILU_BW, RELU_BW, SILU_GATE, ADD_BW, SUB_BW, MUL_BW, SILU_GATE_BW,
                                  GELU_GATE, GELU_GATE_BW };

static wgml_status case_call(const th_run *r) { return call(*(const int *)r->c->params, th_eng, r->t_in, r->t_out); }

static void case_reference(const th_run *r)
{
    const float *in[3] = { TH_IN(r, 0), TH_IN(r, 1), TH_IN(r, 2) };
    reference(*(const int *)r->c->params, in, r->ref, r->n_in[0]);
}

static void test_awkward_sizes(void)
{
    for (int op = 0; op < NOPS; op++)
        for (size_t s = 0; s < th_awkward_count; s++) {
            size_t n = th_awkward_sizes[s];
            th_op_case c = { .nin = ops[op].nin, .nout = ops[op].nout, .call = case_call, .reference = case_reference,
                             .atol = ops[op].atol, .rtol = ops[op].rtol, .params = &op_ids[op] };
            for (int i = 0; i < c.nin; i++) c.in[i] = (th_io){ .shape = { n }, .lo = ops[op].lo, .hi = ops[op].hi };
            for (int o = 0; o < c.nout; o++) c.out[o] = (th_io){ .shape = { n } };
            snprintf(c.name, sizeof c.name, "%s n=%zu", ops[op].name, n);
            th_run_case(&c);
        }
}

/* Every way the arguments can share tensors: the inputs partitioned into distinct tensors
   (a restricted-growth labelling), and each output either a fresh tensor or one of those
   (the two outputs of a backward op never the same). The results must be those of distinct
   tensors, and inputs that are not outputs must be left unchanged. Each case copies what it
   checks into one gather tensor, read once per op (a read waits for the device). */
#define ALIAS_N 37
#define MAX_SLOTS 512
typedef struct pending {
    char what[200];
    double ref[ALIAS_N];
    float exact[ALIAS_N];
    bool is_exact;   /* an input that must be unchanged */
} pending;

static void run_alias_case(int op, const int *in_buf, int m, const int *out_buf, wgml_tensor *gather, pending *pend,
                           size_t *npend)
{
    const size_t n = ALIAS_N;
    int nin = ops[op].nin, nout = ops[op].nout;
    float *data[3];
    wgml_tensor *bufs[3], *tin[3] = { 0 }, *tout[2] = { 0 };
    for (int j = 0; j < m; j++) {
        data[j] = th_random(n, ops[op].lo, ops[op].hi);
        bufs[j] = th_tensor(WGML_F32, data[j], TH_SHAPE(n));
    }
    const float *in[3] = { 0 };
    for (int i = 0; i < nin; i++) {
        in[i] = data[in_buf[i]];
        tin[i] = bufs[in_buf[i]];
    }
    double ref[2][ALIAS_N];
    for (int o = 0; o < nout; o++) tout[o] = out_buf[o] < 0 ? th_poisoned(WGML_F32, TH_SHAPE(n)) : bufs[out_buf[o]];
    reference(op, in, (double *const[]){ ref[0], ref[1] }, n);
    TH_EXPECT(call(op, th_eng, tin, tout), WGML_OK);
    char what[160];
    int len = snprintf(what, sizeof what, "%s(", ops[op].name);
    for (int i = 0; i < nin; i++) len += snprintf(what + len, sizeof what - (size_t)len, "t%d,", in_buf[i]);
    for (int o = 0; o < nout; o++)
        len += snprintf(what + len, sizeof what - (size_t)len, "%s%d%s", out_buf[o] < 0 ? "new" : "t",
                        out_buf[o] < 0 ? o : out_buf[o], o + 1 < nout ? "," : ")");
    for (int o = 0; o < nout; o++) {
        pending *p = &pend[*npend];
        snprintf(p->what, sizeof p->what, "%s %s", what, ops[op].names[nin + o]);
        memcpy(p->ref, ref[o], sizeof p->ref);
        p->is_exact = false;
        TH_EXPECT(wgml_copy_tensor(th_eng, tout[o], gather, *npend * n * sizeof(float)), WGML_OK);
        (*npend)++;
    }
    for (int j = 0; j < m; j++) {
        bool written = false;
        for (int o = 0; o < nout; o++) written |= out_buf[o] == j;
        if (written) continue;
        pending *p = &pend[*npend];
        snprintf(p->what, sizeof p->what, "%s left input t%d unchanged", what, j);
        memcpy(p->exact, data[j], sizeof p->exact);
        p->is_exact = true;
        TH_EXPECT(wgml_copy_tensor(th_eng, bufs[j], gather, *npend * n * sizeof(float)), WGML_OK);
        (*npend)++;
    }
    for (int o = 0; o < nout; o++)
        if (out_buf[o] < 0) wgml_tensor_release(tout[o]);
    for (int j = 0; j < m; j++) {
        free(data[j]);
        wgml_tensor_release(bufs[j]);
    }
}

static void test_in_place_every_aliasing(void)
{
    const size_t n = ALIAS_N;
    pending *pend = malloc(MAX_SLOTS * sizeof *pend);
    for (int op = 0; op < NOPS; op++) {
        int nin = ops[op].nin, nout = ops[op].nout;
        int in_buf[3] = { 0, 0, 0 };
        size_t npend = 0;
        wgml_tensor *gather = th_poisoned(WGML_F32, TH_SHAPE(MAX_SLOTS * n));
        /* restricted-growth strings of length nin: every partition of the input slots */
        for (int code = 0; code < 27; code++) {
            int c = code, m = 0;
            bool valid = true;
            for (int i = 0; i < 3; i++) {
                in_buf[i] = c % 3;
                c /= 3;
                if (i >= nin) { valid &= in_buf[i] == 0; continue; }
                if (in_buf[i] > m) valid = false;
                if (in_buf[i] == m) m++;
            }
            if (!valid) continue;
            for (int o0 = -1; o0 < m; o0++)
                for (int o1 = -1; o1 < (nout == 2 ? m : 0); o1++) {
                    if (nout == 2 && o0 >= 0 && o0 == o1) continue;
                    int out_buf[2] = { o0, o1 };
                    run_alias_case(op, in_buf, m, out_buf, gather, pend, &npend);
                }
        }
        float *got = th_read(gather);
        for (size_t c = 0; c < npend; c++) {
            if (pend[c].is_exact)
                TH_CHECK(memcmp(got + c * n, pend[c].exact, n * sizeof(float)) == 0, "%s", pend[c].what);
            else
                th_compare(pend[c].what, got + c * n, pend[c].ref, n, ops[op].atol, ops[op].rtol);
        }
        free(got);
        wgml_tensor_release(gather);
    }
    free(pend);
}

/* The forwards as functions of their two inputs (x, y), for th_finite_diff. */
static double f_silu(const double *v, const void *ctx) { (void)ctx; return ref_silu(v[0]); }
static double f_relu(const double *v, const void *ctx) { (void)ctx; return ref_relu(v[0]); }
static double f_silu_gate(const double *v, const void *ctx) { (void)ctx; return ref_silu(v[0]) * v[1]; }
static double f_gelu_gate(const double *v, const void *ctx) { (void)ctx; return ref_gelu_tanh(v[0]) * v[1]; }
static double f_add(const double *v, const void *ctx) { (void)ctx; return v[0] + v[1]; }
static double f_sub(const double *v, const void *ctx) { (void)ctx; return v[0] - v[1]; }
static double f_mul(const double *v, const void *ctx) { (void)ctx; return v[0] * v[1]; }

/* The gradients of sum_i g_i f(x_i, y_i) by central differences of the forward in double,
   element by element. Steps of 1e-5 max(1, |x|) <= 1e-4 add at most h^2 |f'''| / 6 ~ 1e-9
   of truncation and ~1e-16 |f| / 1e-5 ~ 1e-9 of rounding to the tolerances of each op, so
   the op's tolerance plus 1e-6 absolute holds. */
#define FD_H 1e-5
static void test_backward_vs_finite_differences(void)
{
    const size_t n = 1000;
    for (int op = SILU_BW; op < NOPS; op++) {
        if (op == SILU_GATE || op == GELU_GATE) continue;
        float *g = th_random(n, -2, 2), *x = th_random(n, ops[op].lo, ops[op].hi), *y = th_random(n, ops[op].lo, ops[op].hi);
        if (op == RELU_BW)   /* keep x +- h on one side of the kink at 0 */
            for (size_t i = 0; i < n; i++)
                if (fabsf(x[i]) < 1e-2f) x[i] = x[i] < 0 ? -0.5f : 0.5f;
        double (*f)(const double *, const void *) = op == SILU_BW ? f_silu : op == RELU_BW ? f_relu
                                                  : op == SILU_GATE_BW ? f_silu_gate : op == GELU_GATE_BW ? f_gelu_gate
                                                  : op == ADD_BW ? f_add : op == SUB_BW ? f_sub : f_mul;
        double *want[2] = { th_alloc_d(n), th_alloc_d(n) };
        for (size_t i = 0; i < n; i++) {
            double v[2] = { x[i], y[i] }, d[2];
            th_finite_diff(f, NULL, v, 2, FD_H, d);
            for (int w = 0; w < 2; w++) want[w][i] = g[i] * d[w];
        }
        wgml_tensor *tg = th_tensor(WGML_F32, g, TH_SHAPE(n)), *tx = th_tensor(WGML_F32, x, TH_SHAPE(n));
        wgml_tensor *ty = th_tensor(WGML_F32, y, TH_SHAPE(n));
        wgml_tensor *o[2] = { th_poisoned(WGML_F32, TH_SHAPE(n)), th_poisoned(WGML_F32, TH_SHAPE(n)) };
        wgml_tensor *in[3];
        if (op == SILU_BW || op == RELU_BW) { in[0] = tg; in[1] = tx; }
        else if (op == SILU_GATE_BW || op == GELU_GATE_BW) { in[0] = tx; in[1] = ty; in[2] = tg; }
        else { in[0] = tg; in[1] = tx; in[2] = ty; }   /* a = x, b = y */
        TH_EXPECT(call(op, th_eng, in, o), WGML_OK);
        for (int w = 0; w < ops[op].nout; w++) {
            float *got = th_read(o[w]);
            char what[96];
            snprintf(what, sizeof what, "%s %s vs finite differences", ops[op].name, ops[op].names[ops[op].nin + w]);
            th_compare(what, got, want[w], n, ops[op].atol + 1e-6, ops[op].rtol);
            free(got);
        }
        free(g); free(x); free(y); free(want[0]); free(want[1]);
        wgml_tensor_release(tg); wgml_tensor_release(tx); wgml_tensor_release(ty);
        wgml_tensor_release(o[0]); wgml_tensor_release(o[1]);
    }
}

/* SiLU and its gradient where exp(-x) overflows f32 (x < -88.7) or underflows: finite and
   right. Tolerance: rtol 1e-5 for the exp bound at |x| <= 20 (the values beyond are 0, x or 1
   up to rounding); atol 1e-35 because exp(-|x|) below 2^-126 may be flushed to 0, so where
   the true result is |x| * (something below 2^-126) an implementation may return 0. */
static void test_silu_large_magnitudes(void)
{
    static const float xs[] = { -1e30f, -1000, -100, -88.8f, -88.7f, -50, -20, -1, -1e-20f, -0.0f, 0,
                                1e-20f, 1, 20, 50, 88.7f, 88.8f, 100, 1000, 1e30f };
    const size_t n = sizeof xs / sizeof xs[0];
    float ones[sizeof xs / sizeof xs[0]], gate[sizeof xs / sizeof xs[0]];
    for (size_t i = 0; i < n; i++) { ones[i] = 1; gate[i] = 1.5f; }
    wgml_tensor *tx = th_tensor(WGML_F32, xs, TH_SHAPE(n)), *t1 = th_tensor(WGML_F32, ones, TH_SHAPE(n));
    wgml_tensor *tgate = th_tensor(WGML_F32, gate, TH_SHAPE(n));
    wgml_tensor *o[2] = { th_poisoned(WGML_F32, TH_SHAPE(n)), th_poisoned(WGML_F32, TH_SHAPE(n)) };
    double ref[2][sizeof xs / sizeof xs[0]];
    const float *in[3] = { xs, gate, ones };
    int list[] = { SILU, SILU_BW, SILU_GATE, SILU_GATE_BW };
    for (int l = 0; l < 4; l++) {
        int op = list[l];
        wgml_tensor *tin[3];
        const float *rin[3];
        if (op == SILU_BW) { tin[0] = t1; tin[1] = tx; rin[0] = ones; rin[1] = in[0]; }
        else { tin[0] = tx; tin[1] = tgate; tin[2] = t1; memcpy(rin, in, sizeof rin); }
        reference(op, rin, (double *const[]){ ref[0], ref[1] }, n);
        TH_EXPECT(call(op, th_eng, tin, o), WGML_OK);
        for (int w = 0; w < ops[op].nout; w++) {
            float *got = th_read(o[w]);
            char what[96];
            snprintf(what, sizeof what, "%s %s at large |x|", ops[op].name, ops[op].names[ops[op].nin + w]);
            th_compare(what, got, ref[w], n, 1e-35, 1e-5);
            for (size_t i = 0; i < n; i++)
                TH_CHECK(isfinite(got[i]), "%s [%zu] x=%g is not finite: %g", what, i, (double)xs[i], (double)got[i]);
            free(got);
        }
    }
    wgml_tensor_release(tx); wgml_tensor_release(t1); wgml_tensor_release(tgate);
    wgml_tensor_release(o[0]); wgml_tensor_release(o[1]);
}

/* GELU and its gradient at |x| >= 15, where the kernel clamps x inside u and sigmoid(2u)
   is 0 or 1 in f32 (|2u| > 260, exp(-|2u|) underflows): every result is exact, GELU(x) = x
   or 0 and GELU'(x) = 1 or 0, as the tanh-form reference gives them in double, so out =
   gelu(x) * 1.5, grad_up = 1.5 GELU'(x) and grad_gate = gelu(x) are the reference rounded
   once to f32; and finite up to |x| = 1e30 (x^3 would overflow f32 from 7e12). */
static void test_gelu_large_magnitudes(void)
{
    static const float xs[] = { -1e30f, -1e4f, -100, -20, -15.5f, -15, 15, 15.5f, 20, 100, 1e4f, 1e30f };
    const size_t n = sizeof xs / sizeof xs[0];
    float ones[sizeof xs / sizeof xs[0]], gate[sizeof xs / sizeof xs[0]];
    for (size_t i = 0; i < n; i++) { ones[i] = 1; gate[i] = 1.5f; }
    wgml_tensor *tin[3] = { th_tensor(WGML_F32, xs, TH_SHAPE(n)), th_tensor(WGML_F32, gate, TH_SHAPE(n)),
                            th_tensor(WGML_F32, ones, TH_SHAPE(n)) };
    wgml_tensor *o[2] = { th_poisoned(WGML_F32, TH_SHAPE(n)), th_poisoned(WGML_F32, TH_SHAPE(n)) };
    double ref[2][sizeof xs / sizeof xs[0]];
    const float *in[3] = { xs, gate, ones };
    for (int op = GELU_GATE; op <= GELU_GATE_BW; op++) {
        reference(op, in, (double *const[]){ ref[0], ref[1] }, n);
        TH_EXPECT(call(op, th_eng, tin, o), WGML_OK);
        for (int w = 0; w < ops[op].nout; w++) {
            float *got = th_read(o[w]);
            for (size_t i = 0; i < n; i++)
                TH_CHECK(isfinite(got[i]) && got[i] == (float)ref[w][i], "%s %s at x=%g: got %g, want %g", ops[op].name,
                         ops[op].names[ops[op].nin + w], (double)xs[i], (double)got[i], (double)(float)ref[w][i]);
            free(got);
        }
    }
    for (int i = 0; i < 3; i++) wgml_tensor_release(tin[i]);
    wgml_tensor_release(o[0]); wgml_tensor_release(o[1]);
}

static void test_relu_special_values(void)
{
    const float x[] = { NAN, -0.0f, 0.0f, -INFINITY, INFINITY, 1e-45f, -1e-45f };
    const size_t n = sizeof x / sizeof x[0];
    wgml_tensor *tx = th_tensor(WGML_F32, x, TH_SHAPE(n)), *out = th_poisoned(WGML_F32, TH_SHAPE(n));
    TH_EXPECT(wgml_relu(th_eng, tx, out), WGML_OK);
    float got[8];
    th_read_into(out, got);
    TH_CHECK(isnan(got[0]), "relu(NaN) = %g, want NaN", (double)got[0]);
    TH_CHECK(got[1] == 0 && !signbit(got[1]), "relu(-0) = %g, want +0", (double)got[1]);
    TH_CHECK(got[2] == 0 && !signbit(got[2]), "relu(+0) = %g", (double)got[2]);
    TH_CHECK(got[3] == 0, "relu(-inf) = %g", (double)got[3]);
    TH_CHECK(isinf(got[4]) && got[4] > 0, "relu(inf) = %g", (double)got[4]);
    TH_CHECK(got[5] == 1e-45f || got[5] == 0, "relu(smallest subnormal) = %g", (double)got[5]);
    TH_CHECK(got[6] == 0, "relu(-smallest subnormal) = %g", (double)got[6]);
    wgml_tensor_release(tx); wgml_tensor_release(out);
}

/* A large tensor in place: 17M floats, 16.6k workgroups of 256 threads x 4 vec4. (This
   size made a 2-D grid with the former 64 threads x 1 vec4 per workgroup; the 2-D split
   now needs more than a gigabyte per tensor, too much for a CPU test: the kernels' linear
   index wid.x + wid.y * nwg.x is the one test_elementwise checks across the split.) */
static void test_large_grid(void)
{
    wgml_adapter_info info;
    wgml_context_info(th_ctx, &info);
    size_t n = ((size_t)info.max_workgroups_per_dimension + 1000) * 64 * 4 + 3;
    TH_CHECK(n * 4 <= info.max_storage_buffer_binding_size, "the 2-D grid test needs %zu bytes per tensor", n * 4);
    if (n * 4 > info.max_storage_buffer_binding_size) return;
    float *x = th_random(n, -12, 12);
    double *ref = th_alloc_d(n);
    ref_silu_forward(x, ref, n);
    wgml_tensor *t = th_tensor(WGML_F32, x, TH_SHAPE(n));
    TH_EXPECT(wgml_silu(th_eng, t, t), WGML_OK);   /* in place: one buffer */
    float *got = th_read(t);
    th_compare("silu in place over a 2-D grid", got, ref, n, ops[SILU].atol, ops[SILU].rtol);
    /* a two-output entry point as well: grad_a in place, grad_b new (its last element too) */
    wgml_tensor *gb = th_poisoned(WGML_F32, TH_SHAPE(n));
    TH_EXPECT(wgml_sub_backward(th_eng, t, t, gb), WGML_OK);
    float *got_b = th_read(gb);
    for (size_t i = 0; i < n; i++) ref[i] = -(double)got[i];
    th_compare("sub_backward grad_b over a 2-D grid", got_b, ref, n, 0, 0);
    free(x); free(ref); free(got); free(got_b);
    wgml_tensor_release(t); wgml_tensor_release(gb);
}

static void test_bad_inputs(void)
{
    float z[8] = { 0 };
    wgml_context *other;
    TH_EXPECT(wgml_context_create(NULL, &other), WGML_OK);
    wgml_tensor *foreign;
    TH_EXPECT(wgml_tensor_from_data(other, WGML_F32, 1, (size_t[]){ 8 }, z, &foreign), WGML_OK);
    wgml_tensor *u = th_tensor(WGML_U32, z, TH_SHAPE(8)), *short7 = th_tensor(WGML_F32, z, TH_SHAPE(7));
    wgml_tensor *in[3], *out[2];
    for (int i = 0; i < 3; i++) in[i] = th_tensor(WGML_F32, z, TH_SHAPE(2, 4));
    for (int o = 0; o < 2; o++) out[o] = th_poisoned(WGML_F32, TH_SHAPE(8));
    uint64_t before = th_commands();
    for (int op = 0; op < NOPS; op++) {
        int nin = ops[op].nin, nout = ops[op].nout;
        TH_EXPECT_ERR(call(op, NULL, in, out), WGML_ERROR_INVALID_ARGUMENT, "engine is NULL");
        for (int a = 0; a < nin + nout; a++) {
            wgml_tensor *ti[3] = { in[0], in[1], in[2] }, *to[2] = { out[0], out[1] };
            wgml_tensor **slot = a < nin ? &ti[a] : &to[a - nin];
            char needle[96];
            const char *name = ops[op].names[a];
            *slot = NULL;
            snprintf(needle, sizeof needle, "%s is NULL", name);
            TH_EXPECT_ERR(call(op, th_eng, ti, to), WGML_ERROR_INVALID_ARGUMENT, needle);
            *slot = u;
            snprintf(needle, sizeof needle, "%s is u32", name);
            TH_EXPECT_ERR(call(op, th_eng, ti, to), WGML_ERROR_DTYPE, needle);
            *slot = foreign;
            snprintf(needle, sizeof needle, "%s belongs to another context", name);
            TH_EXPECT_ERR(call(op, th_eng, ti, to), WGML_ERROR_CONTEXT, needle);
            *slot = short7;
            if (a == 0) snprintf(needle, sizeof needle, "%s has 7", name);
            else snprintf(needle, sizeof needle, "%s has 7 elements", name);
            TH_EXPECT_ERR(call(op, th_eng, ti, to), WGML_ERROR_SHAPE, needle);
        }
        if (nout == 2) {
            wgml_tensor *to[2] = { out[0], out[0] };
            char needle[96];
            snprintf(needle, sizeof needle, "%s must not be the same tensor as %s", ops[op].names[nin + 1], ops[op].names[nin]);
            TH_EXPECT_ERR(call(op, th_eng, in, to), WGML_ERROR_ALIAS, needle);
            to[0] = in[0]; to[1] = in[0];   /* both outputs in place on one input */
            TH_EXPECT_ERR(call(op, th_eng, in, to), WGML_ERROR_ALIAS, needle);
        }
    }
    TH_CHECK(th_commands() == before, "rejected calls recorded %llu commands", (unsigned long long)(th_commands() - before));
    for (int o = 0; o < 2; o++) {
        uint32_t got[8];
        th_read_into(out[o], got);
        for (int i = 0; i < 8; i++) TH_CHECK(got[i] == 0xFFFFFFFFu, "out%d[%d] was written by a rejected call", o, i);
    }
    for (int i = 0; i < 3; i++) wgml_tensor_release(in[i]);
    for (int o = 0; o < 2; o++) wgml_tensor_release(out[o]);
    wgml_tensor_release(u); wgml_tensor_release(short7); wgml_tensor_release(foreign);
    wgml_context_destroy(other);
}

static const th_case cases[] = {
    { "awkward_sizes", test_awkward_sizes },
    { "in_place_every_aliasing", test_in_place_every_aliasing },
    { "backward_vs_finite_differences", test_backward_vs_finite_differences },
    { "silu_large_magnitudes", test_silu_large_magnitudes },
    { "gelu_large_magnitudes", test_gelu_large_magnitudes },
    { "relu_special_values", test_relu_special_values },
    { "large_grid", test_large_grid },
    { "bad_inputs", test_bad_inputs },
};
TH_MAIN(cases)
