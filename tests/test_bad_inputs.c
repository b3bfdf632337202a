/* Bad inputs to every public function: each must return the status its header documents,
   with a message that starts with the function's name and names the argument, and must
   record nothing (no GPU command, outputs untouched).

   Ops are described, not hand-tested: a row gives each tensor argument (its name as in
   wgml.h, the dtypes it accepts, a shape for a small valid call, whether it is written,
   whether NULL is allowed, whether its element count must match the others, and shapes
   that must be refused), the scalar rules (values that must be refused and the status),
   the aliasing the header refuses and the aliasing it allows, and a call function. From
   that, run_row() generates the bad inputs:
     - NULL engine; an engine of another context;
     - each tensor NULL (unless optional), of each dtype it does not accept, from another
       context, of another element count (where counts must match), of each listed bad
       shape;
     - each scalar rule;
     - each refused alias (one argument slot given another slot's tensor);
   and checks every rejection: the exact status; the message, "<fn>: ..." naming the
   argument as a word (a fresh sentinel message is set before each call, so a stale one
   cannot pass); and on both contexts no command recorded, nothing submitted, no tensor or
   engine created. Outputs are poisoned first and read back once per row, after all its bad
   calls, to prove nothing was written. Then the good call must succeed and record work (so
   a row that falls out of step with its header fails), and so must every variant the
   header allows: optional outputs NULL, allowed aliases, boundary values of the scalars.

   Functions that are not ops (context, tensor, engine) have hand-written cases checked the
   same way. The test also reads include/wgml.h and checks that every declared function
   the library exports has a row or a case here, so a new function cannot go uncovered;
   rows of functions the library does not have yet (declared, still being written) are
   skipped and listed.

   The program prints the number of bad inputs tried per function and the total. */
#define _GNU_SOURCE   /* RTLD_DEFAULT */
#include "harness.h"

#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAXA 16     /* tensor arguments of one op */
#define MAXBAD 6    /* listed bad replacements of one argument */
#define MAXSM 24    /* scalar rules of one row */
#define MAXAL 24    /* alias pairs of one row */

/* ---- description of an op ------------------------------------------------------------ */

enum { OUT = 1, OPT = 2, SAME_N = 4 };
#define DT(d) (1u << (d))
#define ANY_DT (DT(WGML_F32) | DT(WGML_F16) | DT(WGML_BF16) | DT(WGML_U32) | DT(WGML_U8))
#define DTY(d) ((d) + 1)   /* bad.dt: 0 keeps the argument's dtype */

/* A replacement tensor that must be refused: shape (0-terminated), dtype, status
   (default WGML_ERROR_SHAPE), and the word the message must contain (default the
   argument's name). */
typedef struct bad_tensor {
    size_t shape[WGML_MAX_DIMS + 1];
    int dt;
    wgml_status st;
    const char *needle;
} bad_tensor;

typedef struct targ {
    const char *name;            /* as in wgml.h */
    wgml_dtype dtype;            /* of the good tensor */
    unsigned dtypes;             /* accepted dtypes; 0: only dtype */
    size_t shape[WGML_MAX_DIMS + 1];
    unsigned flags;              /* OUT, OPT, SAME_N */
    bad_tensor bad[MAXBAD];
} targ;

/* The scalar parameters of a call; each call function maps them onto its signature. */
typedef struct scal {
    uint32_t u[4];
    float f[6];
    size_t z;                    /* a byte offset */
    size_t count;                /* length of the arrays of a multi-tensor op */
    unsigned nullp;              /* bit i: pass NULL for the call's i-th pointer (array, params, opts) */
} scal;

enum { SU = 1, SF, SZ, SCOUNT, SNULLP, SNULLS };
/* A scalar rule: set u[idx], f[idx], z, count, bit idx of nullp, or (SNULLS) make the
   tensors of bit mask idx NULL; the call must return st and name needle. */
typedef struct smut {
    int kind, idx;
    double v;
    wgml_status st;
    const char *needle;
} smut;

typedef struct apair { int dst, src; } apair;   /* slot dst receives slot src's tensor */

/* A whole set of shapes that must be refused (a rule no single argument breaks, e.g. an odd
   head_dim in q, k, v and out together): shapes[i] replaces argument i's shape where set. */
typedef struct bad_config {
    const char *what;
    size_t shapes[MAXA][WGML_MAX_DIMS + 1];
    wgml_status st;
    const char *needle;
} bad_config;

typedef wgml_status (*call_fn)(wgml_engine *e, wgml_tensor *const *t, const scal *s);

typedef struct oprow {
    const char *fn;
    call_fn call;
    targ a[MAXA];
    scal s;
    smut sm[MAXSM];
    apair refused[MAXAL];        /* WGML_ERROR_ALIAS */
    apair allowed[MAXAL];        /* must succeed */
    smut accept[MAXSM];          /* boundary values the header allows: must succeed (st, needle unused) */
    const bad_config *configs;   /* terminated by what == NULL */
    bool scalars_only;           /* a second row of a function: skip the per-tensor mutations */
} oprow;

/* ---- call functions ------------------------------------------------------------------ */

static const wgml_tensor *T(wgml_tensor *const *t, int i) { return t[i]; }

#define C3(name, fn) static wgml_status name(wgml_engine *e, wgml_tensor *const *t, const scal *s) \
    { (void)s; return fn(e, T(t, 0), T(t, 1), t[2]); }
#define C2(name, fn) static wgml_status name(wgml_engine *e, wgml_tensor *const *t, const scal *s) \
    { (void)s; return fn(e, T(t, 0), t[1]); }
C3(c_add, wgml_add)
C3(c_mul, wgml_mul)
C3(c_sub, wgml_sub)
C2(c_silu, wgml_silu)
C2(c_relu, wgml_relu)
C3(c_silu_backward, wgml_silu_backward)
C3(c_relu_backward, wgml_relu_backward)
C3(c_silu_gate_fused, wgml_silu_gate_fused)
C3(c_gelu_tanh_gate_fused, wgml_gelu_tanh_gate_fused)
C3(c_mse_loss, wgml_mse_loss)
C3(c_mse_loss_backward, wgml_mse_loss_backward)
C2(c_gradient_norm_squared, wgml_gradient_norm_squared)
C2(c_softmax, wgml_softmax)
C3(c_softmax_backward, wgml_softmax_backward)
C3(c_embedding, wgml_embedding)
C3(c_embedding_backward, wgml_embedding_backward)
C2(c_dequantize, wgml_dequantize)

C3(c_matmul, wgml_matmul)
C3(c_matmul_bt, wgml_matmul_bt)
C3(c_matmul_at, wgml_matmul_at)
/* the _with forms: u[0] accumulate, nullp bit 0 NULL options */
#define MMW(name, fn)                                                                               \
    static wgml_status name(wgml_engine *e, wgml_tensor *const *t, const scal *s)                   \
    {                                                                                               \
        wgml_matmul_options o = { .accumulate = s->u[0] != 0 };                                     \
        return fn(e, t[0], t[1], t[2], (s->nullp & 1) ? NULL : &o);                                 \
    }
MMW(c_matmul_with, wgml_matmul_with)
MMW(c_matmul_bt_with, wgml_matmul_bt_with)
MMW(c_matmul_at_with, wgml_matmul_at_with)

static wgml_attention_options attn_of(const scal *s)
{
    return (wgml_attention_options){ .causal = s->u[0] != 0, .causal_offset = s->u[1], .window = s->u[2], .seed = s->u[3],
                                     .dropout_prob = s->f[0], .scale = s->f[1] };
}
static wgml_status c_flash_attention(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{ return wgml_flash_attention(e, t[0], t[1], t[2], t[3], s->u[0] != 0); }
static wgml_status c_flash_attention_v2(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{ return wgml_flash_attention_v2(e, t[0], t[1], t[2], t[3], s->u[0] != 0, s->f[0], s->u[3], t[4]); }
static wgml_status c_flash_attention_v2_with(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{
    wgml_attention_options o = attn_of(s);
    return wgml_flash_attention_v2_with(e, t[0], t[1], t[2], t[3], (s->nullp & 1) ? NULL : &o, t[4]);
}
static wgml_status c_flash_attention_backward(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{ return wgml_flash_attention_backward(e, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], s->u[0] != 0); }
static wgml_status c_flash_attention_v2_backward(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{ return wgml_flash_attention_v2_backward(e, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], s->u[0] != 0); }
static wgml_status c_flash_attention_v2_backward_with(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{
    wgml_attention_options o = attn_of(s);
    return wgml_flash_attention_v2_backward_with(e, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7],
                                                      (s->nullp & 1) ? NULL : &o, t[8]);
}

static wgml_status c_copy_tensor(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{ return wgml_copy_tensor(e, t[0], t[1], s->z); }
static wgml_status c_cast(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{ (void)s; return wgml_cast(e, t[0], t[1]); }
static wgml_status c_add_backward(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{ (void)s; return wgml_add_backward(e, t[0], t[1], t[2]); }
static wgml_status c_sub_backward(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{ (void)s; return wgml_sub_backward(e, t[0], t[1], t[2]); }
static wgml_status c_mul_backward(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{ (void)s; return wgml_mul_backward(e, t[0], t[1], t[2], t[3], t[4]); }
static wgml_status c_silu_gate_backward(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{ (void)s; return wgml_silu_gate_backward(e, t[0], t[1], t[2], t[3], t[4]); }
static wgml_status c_gelu_tanh_gate_backward(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{ (void)s; return wgml_gelu_tanh_gate_backward(e, t[0], t[1], t[2], t[3], t[4]); }
static wgml_status c_top_k(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{ return wgml_top_k(e, t[0], t[1], s->u[0]); }
static wgml_status c_bias_add(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{ (void)s; return wgml_bias_add(e, t[0], t[1], t[2]); }
static wgml_status c_bias_grad(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{ return wgml_bias_grad(e, t[0], t[1], s->u[0] != 0); }
static wgml_status c_dropout(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{ return wgml_dropout(e, t[0], t[1], s->f[0], 7); }
static wgml_status c_conv1d(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{ (void)s; return wgml_conv1d(e, t[0], t[1], t[2], t[3]); }
static wgml_status c_conv1d_causal(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{ (void)s; return wgml_conv1d_causal(e, t[0], t[1], t[2], t[3]); }
static wgml_status c_conv1d_causal_backward(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{ return wgml_conv1d_causal_backward(e, t[0], t[1], t[2], t[3], t[4], t[5], s->u[0] != 0); }
static wgml_status c_unpack(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{ (void)s; return wgml_unpack(e, t[0], t[1]); }
static wgml_status c_affine_dequantize(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{ (void)s; return wgml_affine_dequantize(e, t[0], t[1], t[2], t[3]); }
static wgml_status c_affine_dequantize_with(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{ return wgml_affine_dequantize_with(e, t[0], t[1], t[2], t[3], s->u[0], s->u[1]); }
static wgml_status c_rms_norm(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{ (void)s; return wgml_rms_norm(e, t[0], t[1], t[2]); }
static wgml_status c_rms_norm_eps(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{ return wgml_rms_norm_eps(e, t[0], t[1], t[2], s->f[0]); }
static wgml_status c_rms_norm_residual(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{ (void)s; return wgml_rms_norm_residual(e, t[0], t[1], t[2], t[3]); }
static wgml_status c_rms_norm_residual_with(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{ return wgml_rms_norm_residual_with(e, t[0], t[1], t[2], t[3], t[4], s->f[0]); }
static wgml_status c_rms_norm_backward(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{ return wgml_rms_norm_backward(e, t[0], t[1], t[2], t[3], t[4], s->f[0]); }
/* wgml_rms_norm_with: f[0] eps, f[1] weight_offset, nullp bit 0 NULL options; the plain
   form passes no residual and no sum_out */
static wgml_status c_rms_norm_with(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{
    wgml_rms_norm_options o = { .eps = s->f[0], .weight_offset = s->f[1] };
    return wgml_rms_norm_with(e, t[0], t[1], t[2], t[3], t[4], (s->nullp & 1) ? NULL : &o);
}
static wgml_status c_rms_norm_with_plain(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{
    wgml_rms_norm_options o = { .eps = s->f[0], .weight_offset = s->f[1] };
    return wgml_rms_norm_with(e, t[0], NULL, t[1], t[2], NULL, (s->nullp & 1) ? NULL : &o);
}
/* u[0] accumulate, f[1] weight_offset, nullp bit 0 NULL options */
static wgml_status c_rms_norm_backward_with(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{
    wgml_rms_norm_backward_options o = { .accumulate = s->u[0] != 0, .weight_offset = s->f[1] };
    return wgml_rms_norm_backward_with(e, t[0], t[1], t[2], t[3], t[4], s->f[0], (s->nullp & 1) ? NULL : &o);
}
static wgml_status c_rope(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{ return wgml_rope(e, t[0], s->u[0], s->u[1]); }
static wgml_status c_rope_theta(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{ return wgml_rope_theta(e, t[0], s->u[0], s->u[1], s->f[0]); }
static wgml_status c_rope_backward(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{ return wgml_rope_backward(e, t[0], s->u[0], s->u[1], s->f[0]); }
static wgml_status c_rope_with(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{
    wgml_rope_options o = { .head_dim = s->u[0], .pos = s->u[1], .pairing = (wgml_rope_pairing)s->u[2],
                            .inverse = s->u[3] != 0, .theta = s->f[0], .inv_freq = t[1] };
    return wgml_rope_with(e, t[0], (s->nullp & 1) ? NULL : &o);
}
static wgml_status c_sgd_update(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{ return wgml_sgd_update(e, t[0], t[1], s->f[0]); }
static wgml_adam_params adam_of(const scal *s)
{ return (wgml_adam_params){ .lr = s->f[0], .beta1 = s->f[1], .beta2 = s->f[2], .eps = s->f[3], .weight_decay = s->f[4], .t = s->u[0] }; }
static wgml_status c_adamw_update(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{
    wgml_adam_params p = adam_of(s);
    return wgml_adamw_update(e, t[0], t[1], t[2], t[3], (s->nullp & 1) ? NULL : &p);
}
/* three parameters (more than one dispatch takes on small devices): slots 4i .. 4i+3 are
   weights[i], grads[i], m[i], v[i] */
static wgml_status c_adamw_update_multi(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{
    wgml_adam_params p = adam_of(s);
    wgml_tensor *w[3] = { t[0], t[4], t[8] }, *m[3] = { t[2], t[6], t[10] }, *v[3] = { t[3], t[7], t[11] };
    const wgml_tensor *g[3] = { t[1], t[5], t[9] };
    return wgml_adamw_update_multi(e, (s->nullp & 1) ? NULL : w, (s->nullp & 2) ? NULL : g, (s->nullp & 4) ? NULL : m,
                                   (s->nullp & 8) ? NULL : v, s->count, (s->nullp & 16) ? NULL : &p);
}
static wgml_status c_cross_entropy_loss(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{ return wgml_cross_entropy_loss(e, t[0], s->u[0], t[1]); }
static wgml_status c_cross_entropy_backward(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{ return wgml_cross_entropy_backward(e, t[0], s->u[0], t[1]); }
static wgml_status c_cross_entropy_batched(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{ return wgml_cross_entropy_batched(e, t[0], t[1], s->u[0], t[2], t[3], t[4]); }
static wgml_status c_clip_grad_by_norm(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{ return wgml_clip_grad_by_norm(e, t[0], s->f[0]); }
static wgml_status c_gradient_accumulate(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{ (void)s; return wgml_gradient_accumulate(e, t[0], t[1]); }
static wgml_status c_gradient_scale(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{ return wgml_gradient_scale(e, t[0], s->f[0]); }
/* slots 0-8: tensors[0..9) (more than one dispatch takes), slot 9: norm_out */
static wgml_status c_global_norm(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{
    const wgml_tensor *list[9] = { t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8] };
    return wgml_global_norm(e, (s->nullp & 1) ? NULL : list, s->count, t[9]);
}
/* slots 0-8: grads[0..9), slot 9: norm */
static wgml_status c_clip_grad_by_global_norm(wgml_engine *e, wgml_tensor *const *t, const scal *s)
{
    wgml_tensor *list[9] = { t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8] };
    return wgml_clip_grad_by_global_norm(e, (s->nullp & 1) ? NULL : list, s->count, t[9], s->f[0]);
}

/* ---- the table ------------------------------------------------------------------------ */

#define SH(...) { __VA_ARGS__, 0 }
#define F32A(nm, fl, ...) { .name = nm, .shape = SH(__VA_ARGS__), .flags = (fl) }
/* element-wise rows: every argument f32 of one element count (shapes may differ) */
#define EW(nm, fl, ...) F32A(nm, (fl) | SAME_N, __VA_ARGS__)
#define RULE(kind_, idx_, v_, st_, needle_) { .kind = kind_, .idx = idx_, .v = v_, .st = st_, .needle = needle_ }
#define OKV(kind_, idx_, v_) { .kind = kind_, .idx = idx_, .v = v_ }
#define INVAL WGML_ERROR_INVALID_ARGUMENT
#define U32MAX 4294967295.0

#define EPS_RULES(i) RULE(SF, i, -1, INVAL, "eps"), RULE(SF, i, NAN, INVAL, "eps"), RULE(SF, i, INFINITY, INVAL, "eps"), \
                     RULE(SF, i, -INFINITY, INVAL, "eps")
#define HEAD_DIM_RULES RULE(SU, 0, 0, INVAL, "head_dim"), RULE(SU, 0, 1, INVAL, "head_dim"), RULE(SU, 0, 3, INVAL, "head_dim"), \
    RULE(SU, 0, 258, INVAL, "head_dim"), RULE(SU, 0, 512, INVAL, "head_dim"), RULE(SU, 0, U32MAX, INVAL, "head_dim"), \
    RULE(SU, 0, 6, WGML_ERROR_SHAPE, "head_dim"), RULE(SU, 0, 16, WGML_ERROR_SHAPE, "head_dim"), \
    RULE(SU, 1, U32MAX, INVAL, "pos")
/* head_dim 2 and 8 (the hidden size), the last position a 2-token sequence can start at */
#define HEAD_DIM_OK OKV(SU, 0, 2), OKV(SU, 0, 8), OKV(SU, 1, U32MAX - 1)
#define THETA_RULES(i) RULE(SF, i, 0, INVAL, "theta"), RULE(SF, i, 0.5, INVAL, "theta"), RULE(SF, i, -1, INVAL, "theta"), \
    RULE(SF, i, NAN, INVAL, "theta"), RULE(SF, i, INFINITY, INVAL, "theta")
#define FINITE_RULES(i, nm) RULE(SF, i, NAN, INVAL, nm), RULE(SF, i, INFINITY, INVAL, nm), RULE(SF, i, -INFINITY, INVAL, nm)
#define ADAM_GOOD { .f = { 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f }, .u = { 1 }, .count = 3 }
#define ADAM_OK OKV(SF, 0, 0), OKV(SF, 1, 0), OKV(SF, 2, 0), OKV(SF, 3, 0), OKV(SF, 4, 0), OKV(SF, 1, 0.99999994), \
    OKV(SU, 0, U32MAX)
#define ADAM_RULES(nullbit) RULE(SNULLP, nullbit, 0, INVAL, "params"), RULE(SU, 0, 0, INVAL, "t"), \
    RULE(SF, 0, -1, INVAL, "lr"), RULE(SF, 0, NAN, INVAL, "lr"), RULE(SF, 0, INFINITY, INVAL, "lr"), \
    RULE(SF, 1, -0.1, INVAL, "beta1"), RULE(SF, 1, 1, INVAL, "beta1"), RULE(SF, 1, NAN, INVAL, "beta1"), \
    RULE(SF, 2, -0.1, INVAL, "beta2"), RULE(SF, 2, 1, INVAL, "beta2"), RULE(SF, 2, NAN, INVAL, "beta2"), \
    RULE(SF, 3, -1, INVAL, "eps"), RULE(SF, 3, INFINITY, INVAL, "eps"), RULE(SF, 3, NAN, INVAL, "eps"), \
    RULE(SF, 4, -1, INVAL, "weight_decay"), RULE(SF, 4, INFINITY, INVAL, "weight_decay"), RULE(SF, 4, NAN, INVAL, "weight_decay")

#define ACT2(fname, call_, in0, in1, o) { .fn = fname, .call = call_, \
    .a = { EW(in0, 0, 3, 4), EW(in1, 0, 12), EW(o, OUT, 2, 6) }, .allowed = { { 2, 0 }, { 2, 1 } } }

static const oprow rows[] = {
    /* ---- element-wise, activations ---- */
    ACT2("wgml_add", c_add, "a", "b", "out"),
    ACT2("wgml_mul", c_mul, "a", "b", "out"),
    ACT2("wgml_sub", c_sub, "a", "b", "out"),
    { .fn = "wgml_copy_tensor", .call = c_copy_tensor,
      .a = { { .name = "src", .dtypes = ANY_DT, .shape = SH(4),
               .bad = { { SH(5) } } },
             { .name = "dst", .dtypes = ANY_DT, .shape = SH(8), .flags = OUT, .bad = { { SH(3) }, { SH(6) } } } },
      .s = { .z = 16 },
      .sm = { RULE(SZ, 0, 20, WGML_ERROR_SHAPE, "dst_offset"), RULE(SZ, 0, 33, WGML_ERROR_SHAPE, "dst_offset"),
              RULE(SZ, 0, (double)SIZE_MAX, WGML_ERROR_SHAPE, "dst_offset") },
      .refused = { { 1, 0 } }, .accept = { OKV(SZ, 0, 0), OKV(SZ, 0, 4), OKV(SZ, 0, 2) } },
    { .fn = "wgml_add_backward", .call = c_add_backward,
      .a = { EW("grad_out", 0, 10), EW("grad_a", OUT, 2, 5), EW("grad_b", OUT, 10) },
      .refused = { { 2, 1 } }, .allowed = { { 1, 0 }, { 2, 0 } } },
    { .fn = "wgml_sub_backward", .call = c_sub_backward,
      .a = { EW("grad_out", 0, 10), EW("grad_a", OUT, 2, 5), EW("grad_b", OUT, 10) },
      .refused = { { 2, 1 } }, .allowed = { { 1, 0 }, { 2, 0 } } },
    { .fn = "wgml_mul_backward", .call = c_mul_backward,
      .a = { EW("grad_out", 0, 7), EW("a", 0, 7), EW("b", 0, 1, 7), EW("grad_a", OUT, 7), EW("grad_b", OUT, 7) },
      .refused = { { 4, 3 } }, .allowed = { { 3, 1 }, { 4, 2 }, { 3, 0 } } },
    { .fn = "wgml_silu", .call = c_silu, .a = { EW("input", 0, 9), EW("out", OUT, 3, 3) }, .allowed = { { 1, 0 } } },
    { .fn = "wgml_silu_backward", .call = c_silu_backward,
      .a = { EW("grad_out", 0, 9), EW("input", 0, 9), EW("grad_in", OUT, 9) }, .allowed = { { 2, 0 }, { 2, 1 } } },
    { .fn = "wgml_relu", .call = c_relu, .a = { EW("input", 0, 9), EW("out", OUT, 9) }, .allowed = { { 1, 0 } } },
    { .fn = "wgml_relu_backward", .call = c_relu_backward,
      .a = { EW("grad_out", 0, 9), EW("input", 0, 9), EW("grad_in", OUT, 9) }, .allowed = { { 2, 0 }, { 2, 1 } } },
    { .fn = "wgml_silu_gate_fused", .call = c_silu_gate_fused,
      .a = { EW("up", 0, 6), EW("gate", 0, 6), EW("out", OUT, 6) }, .allowed = { { 2, 0 }, { 2, 1 } } },
    { .fn = "wgml_silu_gate_backward", .call = c_silu_gate_backward,
      .a = { EW("up", 0, 6), EW("gate", 0, 6), EW("grad_out", 0, 6), EW("grad_up", OUT, 6), EW("grad_gate", OUT, 6) },
      .refused = { { 4, 3 } }, .allowed = { { 3, 0 }, { 4, 1 } } },
    { .fn = "wgml_gelu_tanh_gate_fused", .call = c_gelu_tanh_gate_fused,
      .a = { EW("up", 0, 6), EW("gate", 0, 2, 3), EW("out", OUT, 6) }, .allowed = { { 2, 0 }, { 2, 1 } } },
    { .fn = "wgml_gelu_tanh_gate_backward", .call = c_gelu_tanh_gate_backward,
      .a = { EW("up", 0, 6), EW("gate", 0, 6), EW("grad_out", 0, 6), EW("grad_up", OUT, 6), EW("grad_gate", OUT, 6) },
      .refused = { { 4, 3 } }, .allowed = { { 3, 0 }, { 4, 1 }, { 3, 2 } } },

    /* ---- selection, convolution, quantization ---- */
    { .fn = "wgml_top_k", .call = c_top_k,
      .a = { F32A("input", 0, 2, 4),
             { .name = "out_idx", .dtype = WGML_U32, .shape = SH(8), .flags = OUT, .bad = { { SH(2) } } } },
      .s = { .u = { 3 } },
      .sm = { RULE(SU, 0, 0, INVAL, "k"), RULE(SU, 0, 9, INVAL, "k"), RULE(SU, 0, 2000, INVAL, "k"),
              RULE(SU, 0, U32MAX, INVAL, "k") },
      .accept = { OKV(SU, 0, 1), OKV(SU, 0, 8) } },
    { .fn = "wgml_top_k", .call = c_top_k, .scalars_only = true,   /* k over the kernel's limit */
      .a = { F32A("input", 0, 1100), { .name = "out_idx", .dtype = WGML_U32, .shape = SH(1100), .flags = OUT } },
      .s = { .u = { 1024 } }, .sm = { RULE(SU, 0, 1025, WGML_ERROR_LIMIT, "k") } },
    { .fn = "wgml_bias_add", .call = c_bias_add,
      .a = { { .name = "x", .shape = SH(4, 3), .bad = { { SH(4, 4) }, { SH(13) } } },
             { .name = "bias", .shape = SH(3), .bad = { { SH(4) }, { SH(2) } } },
             { .name = "out", .shape = SH(4, 3), .flags = OUT, .bad = { { SH(11) }, { SH(13) } } } },
      .refused = { { 2, 1 } }, .allowed = { { 2, 0 } } },
    { .fn = "wgml_bias_grad", .call = c_bias_grad,
      .a = { { .name = "grad_out", .shape = SH(4, 3), .bad = { { SH(4, 4) }, { SH(13) } } },
             { .name = "grad_bias", .shape = SH(3), .flags = OUT, .bad = { { SH(4) }, { SH(2) } } } },
      .refused = { { 1, 0 } }, .s = { .u = { 1 } } },
    { .fn = "wgml_dropout", .call = c_dropout, .a = { EW("x", 0, 2, 5), EW("out", OUT, 2, 5) }, .allowed = { { 1, 0 } },
      .s = { .f = { 0.25f } }, .sm = { RULE(SF, 0, -0.1, INVAL, "p"), RULE(SF, 0, 1, INVAL, "p"), RULE(SF, 0, NAN, INVAL, "p"),
                                       RULE(SF, 0, INFINITY, INVAL, "p") },
      .accept = { OKV(SF, 0, 0), OKV(SF, 0, 0.999f) } },
    { .fn = "wgml_conv1d", .call = c_conv1d,
      .a = { { .name = "input", .shape = SH(2, 3), .bad = { { SH(6) }, { SH(3, 3) }, { SH(1, 2, 3) } } },
             { .name = "weight", .shape = SH(2, 3), .bad = { { SH(7) }, { SH(3, 3) } } },
             { .name = "bias", .shape = SH(2), .bad = { { SH(3) }, { SH(1) } } },
             { .name = "out", .shape = SH(2, 3), .flags = OUT, .bad = { { SH(3, 2) }, { SH(6) }, { SH(2, 4) } } } },
      .refused = { { 3, 0 }, { 3, 1 }, { 3, 2 } } },
    { .fn = "wgml_conv1d_causal", .call = c_conv1d_causal,
      .a = { { .name = "input", .shape = SH(2, 3, 4), .bad = { { SH(24) }, { SH(1, 2, 3, 4) } } },
             { .name = "weight", .shape = SH(4, 3), .bad = { { SH(7) }, { SH(4, 17) } } },
             { .name = "bias", .shape = SH(4), .flags = OPT, .bad = { { SH(3) }, { SH(5) } } },
             { .name = "out", .shape = SH(2, 3, 4), .flags = OUT, .bad = { { SH(3, 2, 4) }, { SH(24) } } } },
      .refused = { { 3, 0 }, { 3, 1 }, { 3, 2 } } },
    { .fn = "wgml_conv1d_causal_backward", .call = c_conv1d_causal_backward,
      .a = { { .name = "input", .shape = SH(2, 3, 4), .bad = { { SH(24) } } },
             { .name = "weight", .shape = SH(4, 3), .bad = { { SH(7) }, { SH(4, 17) } } },
             { .name = "grad_out", .shape = SH(2, 3, 4), .bad = { { SH(3, 2, 4) } } },
             { .name = "grad_input", .shape = SH(2, 3, 4), .flags = OUT | OPT, .bad = { { SH(3, 2, 4) } } },
             { .name = "grad_weight", .shape = SH(4, 3), .flags = OUT, .bad = { { SH(4, 2) } } },
             { .name = "grad_bias", .shape = SH(4), .flags = OUT | OPT, .bad = { { SH(3) } } } },
      .refused = { { 3, 0 }, { 3, 2 }, { 4, 1 }, { 5, 2 }, { 4, 3 }, { 5, 4 } }, .s = { .u = { 1 } } },
    { .fn = "wgml_dequantize", .call = c_dequantize,
      .a = { { .name = "input", .dtype = WGML_U32, .dtypes = DT(WGML_U32) | DT(WGML_U8), .shape = SH(2),
               .bad = { { SH(7), DTY(WGML_U8) }, { SH(1) } } },
             { .name = "out", .shape = SH(8), .flags = OUT, .bad = { { SH(9) }, { SH(3, 3) } } } } },
    { .fn = "wgml_dequantize", .call = c_dequantize, .scalars_only = true,
      .a = { { .name = "input", .dtype = WGML_U8, .shape = SH(7) }, { .name = "out", .shape = SH(5), .flags = OUT } } },
#define FLOAT_DT (DT(WGML_F32) | DT(WGML_F16) | DT(WGML_BF16))
#define PACKED_DT (DT(WGML_U32) | DT(WGML_U8))
    { .fn = "wgml_affine_dequantize", .call = c_affine_dequantize,
      .a = { { .name = "weight", .dtype = WGML_U32, .dtypes = PACKED_DT, .shape = SH(32),
               .bad = { { SH(31) }, { SH(127), DTY(WGML_U8) }, { SH(64) } } },
             { .name = "scales", .dtypes = FLOAT_DT, .shape = SH(2), .bad = { { SH(3) }, { SH(1) } } },
             { .name = "biases", .dtypes = FLOAT_DT, .shape = SH(2), .bad = { { SH(3) }, { SH(1) } } },
             { .name = "out", .shape = SH(128), .flags = OUT, .bad = { { SH(129) }, { SH(192) }, { SH(64) } } } },
      .refused = { { 3, 1 }, { 3, 2 } } },
    { .fn = "wgml_affine_dequantize_with", .call = c_affine_dequantize_with,
      .a = { { .name = "weight", .dtype = WGML_U8, .dtypes = PACKED_DT, .shape = SH(32), .bad = { { SH(31) }, { SH(16) } } },
             { .name = "scales", .dtype = WGML_F16, .dtypes = FLOAT_DT, .shape = SH(2), .bad = { { SH(3) } } },
             { .name = "biases", .dtype = WGML_BF16, .dtypes = FLOAT_DT, .shape = SH(2), .bad = { { SH(1) } } },
             { .name = "out", .shape = SH(64), .flags = OUT, .bad = { { SH(65) }, { SH(96) }, { SH(32) } } } },
      .s = { .u = { 4, 32 } },
      .sm = { RULE(SU, 0, 0, INVAL, "bits"), RULE(SU, 0, 2, INVAL, "bits"), RULE(SU, 0, 3, INVAL, "bits"),
              RULE(SU, 0, 16, INVAL, "bits"), RULE(SU, 0, U32MAX, INVAL, "bits"),
              RULE(SU, 1, 0, INVAL, "group_size"), RULE(SU, 1, 16, INVAL, "group_size"),
              RULE(SU, 1, 48, INVAL, "group_size"), RULE(SU, 1, 96, INVAL, "group_size"),
              RULE(SU, 1, 256, INVAL, "group_size"), RULE(SU, 1, U32MAX, INVAL, "group_size"),
              RULE(SU, 1, 64, WGML_ERROR_SHAPE, "scales") } },
    { .fn = "wgml_affine_dequantize_with", .call = c_affine_dequantize_with, .scalars_only = true,
      .a = { { .name = "weight", .dtype = WGML_U32, .shape = SH(32) }, { .name = "scales", .shape = SH(1) },
             { .name = "biases", .dtype = WGML_F16, .shape = SH(1) }, { .name = "out", .shape = SH(128), .flags = OUT } },
      .s = { .u = { 8, 128 } },
      .sm = { RULE(SU, 0, 4, WGML_ERROR_SHAPE, "weight"), RULE(SU, 1, 64, WGML_ERROR_SHAPE, "scales") },
      .refused = { { 3, 1 } } },

    { .fn = "wgml_cast", .call = c_cast,
      .a = { { .name = "src", .dtypes = FLOAT_DT, .shape = SH(2, 3), .bad = { { SH(5) }, { SH(7) } } },
             { .name = "dst", .dtype = WGML_F16, .dtypes = FLOAT_DT, .shape = SH(6), .flags = OUT,
               .bad = { { SH(5) }, { SH(2, 4) } } } },
      .refused = { { 1, 0 } } },

    /* ---- packed weights (16-bit ones here: the packed dtypes are test_packed.c's) ---- */
    { .fn = "wgml_unpack", .call = c_unpack,
      .a = { { .name = "w", .dtype = WGML_F16, .dtypes = DT(WGML_F16) | DT(WGML_BF16), .shape = SH(2, 3),
               .bad = { { SH(6) }, { SH(1, 2, 3) } } },
             { .name = "out", .shape = SH(6), .flags = OUT, .bad = { { SH(5) }, { SH(7) } } } } },

    /* ---- matrix products: a [M 2, K 3] ---- */
    { .fn = "wgml_matmul", .call = c_matmul,
      .a = { { .name = "a", .shape = SH(2, 3), .bad = { { SH(2, 4) }, { SH(6) } } },
             { .name = "b", .dtypes = FLOAT_DT, .shape = SH(3, 4), .bad = { { SH(12) }, { SH(4, 4) }, { SH(1, 3, 4) } } },
             { .name = "out", .shape = SH(2, 4), .flags = OUT, .bad = { { SH(4, 2) }, { SH(8) }, { SH(2, 5) }, { SH(3, 4) } } } },
      .refused = { { 2, 0 }, { 2, 1 } } },
    { .fn = "wgml_matmul_bt", .call = c_matmul_bt,
      .a = { { .name = "a", .shape = SH(2, 3), .bad = { { SH(2, 4) }, { SH(6) } } },
             { .name = "b", .dtypes = FLOAT_DT, .shape = SH(4, 3), .bad = { { SH(12) }, { SH(3, 4) }, { SH(1, 4, 3) } } },
             { .name = "out", .shape = SH(2, 4), .flags = OUT, .bad = { { SH(4, 2) }, { SH(8) }, { SH(2, 3) } } } },
      .refused = { { 2, 0 }, { 2, 1 } } },
    { .fn = "wgml_matmul_at", .call = c_matmul_at,
      .a = { { .name = "a", .shape = SH(3, 2), .bad = { { SH(2, 2) }, { SH(4, 2) } } },
             { .name = "b", .shape = SH(3, 4), .bad = { { SH(2, 4) }, { SH(4, 4) } } },
             { .name = "out", .shape = SH(2, 4), .flags = OUT, .bad = { { SH(4, 2) }, { SH(8) }, { SH(3, 4) } } } },
      .refused = { { 2, 0 }, { 2, 1 } } },

    /* the _with forms, accumulating (NULL and zeroed options accepted) */
    { .fn = "wgml_matmul_with", .call = c_matmul_with,
      .a = { { .name = "a", .shape = SH(2, 3), .bad = { { SH(2, 4) }, { SH(6) } } },
             { .name = "b", .dtypes = FLOAT_DT, .shape = SH(3, 4), .bad = { { SH(12) }, { SH(4, 4) }, { SH(1, 3, 4) } } },
             { .name = "out", .shape = SH(2, 4), .flags = OUT, .bad = { { SH(4, 2) }, { SH(8) }, { SH(2, 5) }, { SH(3, 4) } } } },
      .s = { .u = { 1 } }, .refused = { { 2, 0 }, { 2, 1 } }, .accept = { OKV(SNULLP, 0, 0), OKV(SU, 0, 0) } },
    { .fn = "wgml_matmul_bt_with", .call = c_matmul_bt_with,
      .a = { { .name = "a", .shape = SH(2, 3), .bad = { { SH(2, 4) }, { SH(6) } } },
             { .name = "b", .dtypes = FLOAT_DT, .shape = SH(4, 3), .bad = { { SH(12) }, { SH(3, 4) }, { SH(1, 4, 3) } } },
             { .name = "out", .shape = SH(2, 4), .flags = OUT, .bad = { { SH(4, 2) }, { SH(8) }, { SH(2, 3) } } } },
      .s = { .u = { 1 } }, .refused = { { 2, 0 }, { 2, 1 } }, .accept = { OKV(SNULLP, 0, 0), OKV(SU, 0, 0) } },
    { .fn = "wgml_matmul_at_with", .call = c_matmul_at_with,
      .a = { { .name = "a", .shape = SH(3, 2), .bad = { { SH(2, 2) }, { SH(4, 2) } } },
             { .name = "b", .shape = SH(3, 4), .bad = { { SH(2, 4) }, { SH(4, 4) } } },
             { .name = "out", .shape = SH(2, 4), .flags = OUT, .bad = { { SH(4, 2) }, { SH(8) }, { SH(3, 4) } } } },
      .s = { .u = { 1 } }, .refused = { { 2, 0 }, { 2, 1 } }, .accept = { OKV(SNULLP, 0, 0), OKV(SU, 0, 0) } },

    /* the layouts the header allows besides [M, K]: a vector (M = 1) and leading dimensions */
    { .fn = "wgml_matmul", .call = c_matmul, .scalars_only = true,
      .a = { F32A("a", 0, 3), F32A("b", 0, 3, 4), F32A("out", OUT, 4) }, .refused = { { 2, 0 } } },
    { .fn = "wgml_matmul_bt", .call = c_matmul_bt, .scalars_only = true,
      .a = { F32A("a", 0, 2, 1, 3), F32A("b", 0, 3, 3), F32A("out", OUT, 2, 3) }, .refused = { { 2, 1 } } },
    { .fn = "wgml_matmul_bt", .call = c_matmul_bt, .scalars_only = true,   /* a and b the same tensor: a Gram matrix */
      .a = { F32A("a", 0, 2, 3), F32A("b", 0, 2, 3), F32A("out", OUT, 2, 2) }, .allowed = { { 1, 0 } } },
    { .fn = "wgml_matmul_at", .call = c_matmul_at, .scalars_only = true,
      .a = { F32A("a", 0, 2, 2, 3), F32A("b", 0, 4, 4), F32A("out", OUT, 3, 4) }, .refused = { { 2, 0 } } },

    /* ---- attention: every tensor [batch 1, seq 2, heads 2, head_dim 2] (the mask too), so
       that any two are alias candidates; GQA and masks broadcast in the rows after ---- */
#define Q4 1, 2, 2, 2
#define ATT_IN(nm) { .name = nm, .shape = SH(Q4) }
#define ATT_QK_BAD(nm) { .name = nm, .shape = SH(Q4), .bad = { { SH(2, 2, 2) }, { SH(2, 2, 2, 2) }, { SH(1, 2, 3, 2) }, { SH(1, 2, 2, 4) } } }
#define ATT_LIKE(nm, fl) { .name = nm, .shape = SH(Q4), .flags = (fl), .bad = { { SH(1, 3, 2, 2) }, { SH(8) }, { SH(1, 2, 2, 4) } } }
#define ATT_MASK { .name = "mask", .shape = SH(Q4), .flags = OPT, \
                   .bad = { { SH(1, 2, 2, 3) }, { SH(2, 2, 2) }, { SH(3, 2) }, { SH(2, 1, 1, 2) }, { SH(1, 3, 1, 2) } } }
/* n: the number of q, k, v-shaped arguments; the q-shaped ones are q, out (forward) and
   out, grad_out, grad_q (backward) */
#define Q3 SH(1, 2, 3, 2)
#define ATT_CONFIGS(n, ...) (const bad_config[]){ \
    { "head_dim 3", { [0 ... (n) - 1] = SH(1, 2, 2, 3) }, WGML_ERROR_SHAPE, "head_dim" }, \
    { "head_dim 258", { [0 ... (n) - 1] = SH(1, 2, 2, 258) }, WGML_ERROR_SHAPE, "head_dim" }, \
    { "3 heads over 2 kv heads", { __VA_ARGS__ }, WGML_ERROR_SHAPE, "num_heads" }, \
    { 0 } }
#define ATT_DROPOUT_RULES RULE(SF, 0, -0.1, INVAL, "dropout_prob"), RULE(SF, 0, 1, INVAL, "dropout_prob"), \
    RULE(SF, 0, 2, INVAL, "dropout_prob"), RULE(SF, 0, NAN, INVAL, "dropout_prob"), RULE(SF, 0, INFINITY, INVAL, "dropout_prob")
#define ATT_OPTS_RULES ATT_DROPOUT_RULES, RULE(SF, 1, NAN, INVAL, "scale"), RULE(SF, 1, INFINITY, INVAL, "scale"), \
    RULE(SU, 1, 268435457, INVAL, "causal_offset"), RULE(SU, 1, U32MAX, INVAL, "causal_offset")
#define ATT_OPTS_OK OKV(SNULLP, 0, 0) /* NULL options: the defaults */, OKV(SF, 0, 0.5), OKV(SF, 0, 0.99999994), OKV(SF, 1, -0.5), OKV(SU, 1, 268435456), OKV(SU, 2, 1), \
    OKV(SU, 2, U32MAX), OKV(SU, 0, 0)
#define ATT_FWD_REFUSED { { 3, 0 }, { 3, 1 }, { 3, 2 }, { 3, 4 } }
#define ATT_BWD_REFUSED { { 5, 0 }, { 5, 1 }, { 5, 2 }, { 5, 3 }, { 5, 4 }, { 6, 0 }, { 6, 1 }, { 6, 2 }, { 6, 3 }, { 6, 4 }, \
    { 7, 0 }, { 7, 1 }, { 7, 2 }, { 7, 3 }, { 7, 4 }, { 6, 5 }, { 7, 5 }, { 7, 6 }, { 5, 8 }, { 6, 8 }, { 7, 8 } }
    { .fn = "wgml_flash_attention", .call = c_flash_attention,
      .a = { { .name = "q", .shape = SH(2, 2), .bad = { { SH(4) }, { SH(1, 2, 2) }, { SH(2, 4) } } },
             { .name = "k", .shape = SH(2, 2), .bad = { { SH(4) }, { SH(2, 4) } } },
             { .name = "v", .shape = SH(2, 2), .bad = { { SH(3, 2) }, { SH(2, 4) } } },
             { .name = "out", .shape = SH(2, 2), .flags = OUT, .bad = { { SH(3, 2) }, { SH(4) } } } },
      .configs = (const bad_config[]){ { "head_dim 3", { [0 ... 3] = SH(2, 3) }, WGML_ERROR_SHAPE, "head_dim" },
                                       { "head_dim 258", { [0 ... 3] = SH(2, 258) }, WGML_ERROR_SHAPE, "head_dim" }, { 0 } },
      .s = { .u = { 1 } }, .refused = { { 3, 0 }, { 3, 1 }, { 3, 2 } }, .accept = { OKV(SU, 0, 0) } },
    { .fn = "wgml_flash_attention_v2", .call = c_flash_attention_v2,
      .a = { ATT_QK_BAD("q"), ATT_QK_BAD("k"), ATT_LIKE("v", 0), ATT_LIKE("out", OUT), ATT_MASK },
      .configs = ATT_CONFIGS(4, [0] = Q3, [3] = Q3), .s = { .u = { 1 } }, .sm = { ATT_DROPOUT_RULES }, .refused = ATT_FWD_REFUSED,
      .accept = { OKV(SF, 0, 0.5), OKV(SU, 0, 0) } },
    { .fn = "wgml_flash_attention_v2_with", .call = c_flash_attention_v2_with,
      .a = { ATT_QK_BAD("q"), ATT_QK_BAD("k"), ATT_LIKE("v", 0), ATT_LIKE("out", OUT), ATT_MASK },
      .configs = ATT_CONFIGS(4, [0] = Q3, [3] = Q3), .s = { .u = { 1, 0, 0, 7 } }, .sm = { ATT_OPTS_RULES }, .refused = ATT_FWD_REFUSED,
      .accept = { ATT_OPTS_OK } },
    { .fn = "wgml_flash_attention_backward", .call = c_flash_attention_backward,
      .a = { { .name = "q", .shape = SH(2, 2), .bad = { { SH(4) }, { SH(2, 4) } } },
             { .name = "k", .shape = SH(2, 2), .bad = { { SH(2, 4) } } },
             { .name = "v", .shape = SH(2, 2), .bad = { { SH(3, 2) } } },
             { .name = "out", .shape = SH(2, 2), .bad = { { SH(3, 2) } } },
             { .name = "grad_out", .shape = SH(2, 2), .bad = { { SH(3, 2) } } },
             { .name = "grad_q", .shape = SH(2, 2), .flags = OUT, .bad = { { SH(3, 2) } } },
             { .name = "grad_k", .shape = SH(2, 2), .flags = OUT, .bad = { { SH(3, 2) } } },
             { .name = "grad_v", .shape = SH(2, 2), .flags = OUT, .bad = { { SH(3, 2) } } } },
      .configs = (const bad_config[]){ { "head_dim 3", { [0 ... 7] = SH(2, 3) }, WGML_ERROR_SHAPE, "head_dim" }, { 0 } },
      .s = { .u = { 1 } },
      .refused = { { 5, 0 }, { 5, 1 }, { 5, 2 }, { 5, 3 }, { 5, 4 }, { 6, 0 }, { 6, 1 }, { 6, 2 }, { 6, 3 }, { 6, 4 },
                   { 7, 0 }, { 7, 1 }, { 7, 2 }, { 7, 3 }, { 7, 4 }, { 6, 5 }, { 7, 5 }, { 7, 6 } } },
    { .fn = "wgml_flash_attention_v2_backward", .call = c_flash_attention_v2_backward,
      .a = { ATT_QK_BAD("q"), ATT_QK_BAD("k"), ATT_LIKE("v", 0), ATT_LIKE("out", 0), ATT_LIKE("grad_out", 0),
             ATT_LIKE("grad_q", OUT), ATT_LIKE("grad_k", OUT), ATT_LIKE("grad_v", OUT) },
      .configs = ATT_CONFIGS(8, [0] = Q3, [3] = Q3, [4] = Q3, [5] = Q3), .s = { .u = { 1 } },
      .refused = { { 5, 0 }, { 5, 1 }, { 5, 2 }, { 5, 3 }, { 5, 4 }, { 6, 0 }, { 6, 1 }, { 6, 2 }, { 6, 3 }, { 6, 4 },
                   { 7, 0 }, { 7, 1 }, { 7, 2 }, { 7, 3 }, { 7, 4 }, { 6, 5 }, { 7, 5 }, { 7, 6 } } },
    { .fn = "wgml_flash_attention_v2_backward_with", .call = c_flash_attention_v2_backward_with,
      .a = { ATT_QK_BAD("q"), ATT_QK_BAD("k"), ATT_LIKE("v", 0), ATT_LIKE("out", 0), ATT_LIKE("grad_out", 0),
             ATT_LIKE("grad_q", OUT), ATT_LIKE("grad_k", OUT), ATT_LIKE("grad_v", OUT), ATT_MASK },
      .configs = ATT_CONFIGS(8, [0] = Q3, [3] = Q3, [4] = Q3, [5] = Q3), .s = { .u = { 1, 0, 0, 7 } }, .sm = { ATT_OPTS_RULES }, .refused = ATT_BWD_REFUSED,
      .accept = { ATT_OPTS_OK } },
    /* grouped-query attention and broadcast masks must be accepted */
    { .fn = "wgml_flash_attention_v2_with", .call = c_flash_attention_v2_with, .scalars_only = true,
      .a = { F32A("q", 0, 2, 3, 4, 4), F32A("k", 0, 2, 5, 2, 4), F32A("v", 0, 2, 5, 2, 4), F32A("out", OUT, 2, 3, 4, 4),
             F32A("mask", OPT, 1, 4, 1, 5) },
      .s = { .u = { 1, 2, 3, 9 }, .f = { 0.25f, 0.5f } }, .refused = { { 3, 0 } } },
    { .fn = "wgml_flash_attention_v2_backward_with", .call = c_flash_attention_v2_backward_with, .scalars_only = true,
      .a = { F32A("q", 0, 1, 3, 4, 4), F32A("k", 0, 1, 5, 1, 4), F32A("v", 0, 1, 5, 1, 4), F32A("out", 0, 1, 3, 4, 4),
             F32A("grad_out", 0, 1, 3, 4, 4), F32A("grad_q", OUT, 1, 3, 4, 4), F32A("grad_k", OUT, 1, 5, 1, 4),
             F32A("grad_v", OUT, 1, 5, 1, 4), F32A("mask", OPT, 3, 5) },
      .s = { .u = { 1, 2, 0, 9 } }, .refused = { { 6, 2 } } },

    /* ---- normalisation, softmax ---- */
    { .fn = "wgml_rms_norm", .call = c_rms_norm,
      .a = { { .name = "input", .shape = SH(1, 8), .flags = SAME_N, .bad = { { SH(2, 4) } } },
             { .name = "weight", .shape = SH(8), .bad = { { SH(7) }, { SH(9) }, { SH(2, 8) } } },
             EW("out", OUT, 1, 8) },
      .refused = { { 2, 0 }, { 2, 1 } } },
    { .fn = "wgml_rms_norm_eps", .call = c_rms_norm_eps,
      .a = { { .name = "input", .shape = SH(1, 8), .flags = SAME_N, .bad = { { SH(2, 4) } } },
             { .name = "weight", .shape = SH(8), .bad = { { SH(7) } } }, EW("out", OUT, 1, 8) },
      .s = { .f = { 1e-5f } }, .sm = { EPS_RULES(0) },
      .refused = { { 2, 0 }, { 2, 1 } }, .accept = { OKV(SF, 0, 0), OKV(SF, 0, 1e30) } },
    { .fn = "wgml_rms_norm_residual", .call = c_rms_norm_residual,
      .a = { EW("x", 0, 1, 8), EW("residual", 0, 8), { .name = "weight", .shape = SH(8), .bad = { { SH(7) }, { SH(16) } } },
             EW("out", OUT, 1, 8) },
      .refused = { { 3, 0 }, { 3, 1 }, { 3, 2 } }, .allowed = { { 1, 0 } } },
    { .fn = "wgml_rms_norm_residual_with", .call = c_rms_norm_residual_with,
      .a = { EW("x", 0, 1, 8), EW("residual", 0, 8), { .name = "weight", .shape = SH(8), .bad = { { SH(7) } } },
             EW("out", OUT, 1, 8), EW("sum_out", OUT | OPT, 1, 8) },
      .s = { .f = { 1e-5f } }, .sm = { EPS_RULES(0) },
      .refused = { { 3, 0 }, { 3, 1 }, { 3, 2 }, { 3, 4 }, { 4, 2 } },
      .allowed = { { 1, 0 }, { 4, 0 }, { 4, 1 } }, .accept = { OKV(SF, 0, 0) } },
    { .fn = "wgml_rms_norm_backward", .call = c_rms_norm_backward,
      .a = { EW("grad_out", 0, 1, 8), EW("input", 0, 8), { .name = "weight", .shape = SH(8), .bad = { { SH(7) } } },
             EW("grad_in", OUT, 1, 8), { .name = "grad_weight", .shape = SH(8), .flags = OUT | OPT, .bad = { { SH(7) }, { SH(9) } } } },
      .s = { .f = { 1e-5f } }, .sm = { EPS_RULES(0) },
      .refused = { { 3, 0 }, { 3, 1 }, { 3, 2 }, { 4, 0 }, { 4, 1 }, { 4, 2 }, { 4, 3 } }, .accept = { OKV(SF, 0, 0) } },
    { .fn = "wgml_rms_norm_backward_with", .call = c_rms_norm_backward_with,
      .a = { EW("grad_out", 0, 1, 8), EW("input", 0, 8), { .name = "weight", .shape = SH(8), .bad = { { SH(7) } } },
             EW("grad_in", OUT, 1, 8), { .name = "grad_weight", .shape = SH(8), .flags = OUT | OPT, .bad = { { SH(7) }, { SH(9) } } } },
      .s = { .u = { 1 }, .f = { 1e-5f } }, .sm = { EPS_RULES(0), FINITE_RULES(1, "weight_offset") },
      .refused = { { 3, 0 }, { 3, 1 }, { 3, 2 }, { 4, 0 }, { 4, 1 }, { 4, 2 }, { 4, 3 } },
      .accept = { OKV(SF, 0, 0), OKV(SNULLP, 0, 0), OKV(SU, 0, 0), OKV(SF, 1, 1), OKV(SF, 1, -0.5) } },
    /* residual NULL (with sum_out NULL: bits 1 and 4) is the plain norm of the next row;
       residual NULL with a sum_out is refused */
    { .fn = "wgml_rms_norm_with", .call = c_rms_norm_with,
      .a = { EW("x", 0, 1, 8), EW("residual", 0, 8), { .name = "weight", .shape = SH(8), .bad = { { SH(7) } } },
             EW("out", OUT, 1, 8), EW("sum_out", OUT | OPT, 1, 8) },
      .s = { .f = { 1e-5f, 1 } }, .sm = { EPS_RULES(0), FINITE_RULES(1, "weight_offset") },
      .refused = { { 3, 0 }, { 3, 1 }, { 3, 2 }, { 3, 4 }, { 4, 2 } },
      .allowed = { { 1, 0 }, { 4, 0 }, { 4, 1 } },
      .accept = { OKV(SF, 0, 0), OKV(SF, 1, 0), OKV(SF, 1, -0.5), OKV(SNULLP, 0, 0), OKV(SNULLS, 0x12, 0) } },
    { .fn = "wgml_rms_norm_with", .call = c_rms_norm_with_plain,
      .a = { { .name = "x", .shape = SH(1, 8), .flags = SAME_N, .bad = { { SH(2, 4) } } },
             { .name = "weight", .shape = SH(8), .bad = { { SH(7) } } }, EW("out", OUT, 1, 8) },
      .s = { .f = { 1e-5f, 1 } }, .sm = { EPS_RULES(0), FINITE_RULES(1, "weight_offset") },
      .refused = { { 2, 0 }, { 2, 1 } }, .accept = { OKV(SF, 0, 0), OKV(SF, 1, 0), OKV(SNULLP, 0, 0) } },
    { .fn = "wgml_softmax", .call = c_softmax, .a = { EW("input", 0, 2, 5), EW("out", OUT, 2, 5) }, .refused = { { 1, 0 } } },
    { .fn = "wgml_softmax_backward", .call = c_softmax_backward,
      .a = { EW("grad_out", 0, 10), EW("final_out", 0, 2, 5), EW("grad_in", OUT, 2, 5) },
      .refused = { { 2, 0 }, { 2, 1 } } },

    /* ---- rotary embeddings: tensor [seq 2, hidden 8], head_dim 4 ---- */
    { .fn = "wgml_rope", .call = c_rope,
      .a = { { .name = "tensor", .shape = SH(2, 8), .flags = OUT, .bad = { { SH(2, 6) }, { SH(1, 2, 6) }, { SH(10) } } } },
      .s = { .u = { 4, 0 } }, .sm = { HEAD_DIM_RULES }, .accept = { HEAD_DIM_OK } },
    { .fn = "wgml_rope_theta", .call = c_rope_theta,
      .a = { { .name = "tensor", .shape = SH(2, 8), .flags = OUT, .bad = { { SH(2, 6) } } } },
      .s = { .u = { 4, 0 }, .f = { 10000 } }, .sm = { HEAD_DIM_RULES, THETA_RULES(0) }, .accept = { HEAD_DIM_OK, OKV(SF, 0, 1) } },
    { .fn = "wgml_rope_backward", .call = c_rope_backward,
      .a = { { .name = "grad", .shape = SH(2, 8), .flags = OUT, .bad = { { SH(2, 6) } } } },
      .s = { .u = { 4, 0 }, .f = { 10000 } }, .sm = { HEAD_DIM_RULES, THETA_RULES(0) }, .accept = { HEAD_DIM_OK, OKV(SF, 0, 1) } },
    { .fn = "wgml_rope_with", .call = c_rope_with,
      .a = { { .name = "tensor", .shape = SH(2, 8), .flags = OUT, .bad = { { SH(2, 6) } } },
             { .name = "inv_freq", .shape = SH(2), .flags = OPT, .bad = { { SH(3) }, { SH(4) }, { SH(1) } } } },
      .s = { .u = { 4, 0, WGML_ROPE_ROTATE_HALF, 0 } },
      .sm = { HEAD_DIM_RULES, RULE(SNULLP, 0, 0, INVAL, "opts"), RULE(SU, 2, 2, INVAL, "pairing"),
              RULE(SU, 2, U32MAX, INVAL, "pairing") },
      .accept = { OKV(SU, 2, WGML_ROPE_INTERLEAVED), OKV(SU, 3, 1), OKV(SF, 0, 0.5) /* theta unused with inv_freq */ } },
    { .fn = "wgml_rope_with", .call = c_rope_with, .scalars_only = true,   /* frequencies from theta */
      .a = { { .name = "tensor", .shape = SH(2, 2, 8), .flags = OUT } },
      .s = { .u = { 4, 5, WGML_ROPE_INTERLEAVED, 1 }, .f = { 500000 } },
      .sm = { RULE(SF, 0, 0.5, INVAL, "theta"), RULE(SF, 0, -1, INVAL, "theta"), RULE(SF, 0, NAN, INVAL, "theta"),
              RULE(SF, 0, INFINITY, INVAL, "theta"), RULE(SU, 1, U32MAX, INVAL, "pos") },
      .accept = { OKV(SF, 0, 0) /* the default */, OKV(SF, 0, 1), OKV(SU, 1, U32MAX - 1) } },

    /* ---- optimizers, losses, gradient utilities ---- */
    { .fn = "wgml_sgd_update", .call = c_sgd_update, .a = { EW("weight", OUT, 6), EW("grad", 0, 2, 3) },
      .s = { .f = { 0.1f } }, .sm = { FINITE_RULES(0, "lr") }, .refused = { { 0, 1 }, { 1, 0 } },
      .accept = { OKV(SF, 0, 0), OKV(SF, 0, -1) /* only finiteness is required */ } },
    { .fn = "wgml_adamw_update", .call = c_adamw_update,
      .a = { EW("weight", OUT, 5), EW("grad", 0, 5), EW("m", OUT, 5), EW("v", OUT, 5) },
      .s = ADAM_GOOD, .sm = { ADAM_RULES(0) }, .accept = { ADAM_OK },
      .refused = { { 0, 1 }, { 0, 2 }, { 0, 3 }, { 1, 0 }, { 1, 2 }, { 1, 3 }, { 2, 0 }, { 2, 1 }, { 2, 3 }, { 3, 0 }, { 3, 1 }, { 3, 2 } } },
    { .fn = "wgml_adamw_update_multi", .call = c_adamw_update_multi,
      .a = { EW("weights[0]", OUT, 5), EW("grads[0]", 0, 5), EW("m[0]", OUT, 5), EW("v[0]", OUT, 5),
             EW("weights[1]", OUT, 5), EW("grads[1]", 0, 5), EW("m[1]", OUT, 5), EW("v[1]", OUT, 5),
             EW("weights[2]", OUT, 3), EW("grads[2]", 0, 3), EW("m[2]", OUT, 3), EW("v[2]", OUT, 3) },
      .s = ADAM_GOOD,
      .sm = { ADAM_RULES(4), RULE(SNULLP, 0, 0, INVAL, "weights"), RULE(SNULLP, 1, 0, INVAL, "grads"),
              RULE(SNULLP, 2, 0, INVAL, "m"), RULE(SNULLP, 3, 0, INVAL, "v"), RULE(SCOUNT, 0, 0, INVAL, "count") },
      .refused = { { 4, 0 }, { 2, 4 }, { 7, 2 }, { 1, 4 }, { 5, 6 }, { 6, 3 }, { 3, 7 }, { 0, 5 } },
      .allowed = { { 5, 1 } }, .accept = { ADAM_OK, OKV(SCOUNT, 0, 1), OKV(SCOUNT, 0, 2) } },
    { .fn = "wgml_mse_loss", .call = c_mse_loss, .a = { EW("pred", 0, 4, 2), EW("target", 0, 8), EW("out", OUT, 8) },
      .allowed = { { 2, 0 }, { 2, 1 } } },
    { .fn = "wgml_mse_loss_backward", .call = c_mse_loss_backward,
      .a = { EW("pred", 0, 4, 2), EW("target", 0, 8), EW("grad_in", OUT, 8) }, .allowed = { { 2, 0 }, { 2, 1 } } },
    { .fn = "wgml_cross_entropy_loss", .call = c_cross_entropy_loss,
      .a = { F32A("logits", 0, 6), F32A("loss_out", OUT, 1) },
      .s = { .u = { 2 } },
      .sm = { RULE(SU, 0, 6, INVAL, "target"), RULE(SU, 0, 7, INVAL, "target"), RULE(SU, 0, U32MAX, INVAL, "target") },
      .refused = { { 1, 0 } }, .accept = { OKV(SU, 0, 0), OKV(SU, 0, 5) } },
    { .fn = "wgml_cross_entropy_backward", .call = c_cross_entropy_backward,
      .a = { EW("logits", 0, 2, 3), EW("grad_out", OUT, 6) },
      .s = { .u = { 5 } }, .sm = { RULE(SU, 0, 6, INVAL, "target"), RULE(SU, 0, U32MAX, INVAL, "target") },
      .allowed = { { 1, 0 } }, .accept = { OKV(SU, 0, 0) } },
    { .fn = "wgml_cross_entropy_batched", .call = c_cross_entropy_batched,
      .a = { { .name = "logits", .shape = SH(3, 5), .flags = SAME_N, .bad = { { SH(5, 3) } } },
             { .name = "targets", .dtype = WGML_U32, .shape = SH(3), .bad = { { SH(4) }, { SH(2) } } },
             { .name = "losses", .shape = SH(3), .flags = OUT | OPT, .bad = { { SH(4) }, { SH(2) } } },
             { .name = "mean_loss", .shape = SH(1), .flags = OUT | OPT },
             EW("grad_logits", OUT | OPT, 15) },
      .s = { .u = { 7 } },
      .sm = { RULE(SNULLS, 0x1C, 0, INVAL, "grad_logits") },
      .refused = { { 3, 2 } }, .allowed = { { 4, 0 } } },
    { .fn = "wgml_cross_entropy_batched", .call = c_cross_entropy_batched, .scalars_only = true,   /* one row of one */
      .a = { F32A("logits", 0, 1, 1), { .name = "targets", .dtype = WGML_U32, .shape = SH(1) }, F32A("losses", OUT | OPT, 1),
             F32A("mean_loss", OUT | OPT, 1), F32A("grad_logits", OUT | OPT, 1, 1) },
      .refused = { { 2, 0 }, { 2, 4 }, { 3, 0 }, { 3, 4 }, { 3, 2 }, { 2, 3 } }, .allowed = { { 4, 0 } } },
    { .fn = "wgml_gradient_norm_squared", .call = c_gradient_norm_squared,
      .a = { EW("input", 0, 5), EW("out", OUT, 5) }, .allowed = { { 1, 0 } } },
    { .fn = "wgml_clip_grad_by_norm", .call = c_clip_grad_by_norm, .a = { F32A("grad", OUT, 7) },
      .s = { .f = { 0.5f } }, .sm = { FINITE_RULES(0, "scale") }, .accept = { OKV(SF, 0, 0), OKV(SF, 0, -2) } },
    { .fn = "wgml_gradient_accumulate", .call = c_gradient_accumulate,
      .a = { EW("accum_grad", OUT, 7), EW("new_grad", 0, 7) }, .allowed = { { 1, 0 } } },
    { .fn = "wgml_gradient_scale", .call = c_gradient_scale, .a = { F32A("grad", OUT, 7) },
      .s = { .f = { 0.5f } }, .sm = { FINITE_RULES(0, "scale") }, .accept = { OKV(SF, 0, 0), OKV(SF, 0, -2) } },
    { .fn = "wgml_global_norm", .call = c_global_norm,
      .a = { F32A("tensors[0]", 0, 3), F32A("tensors[1]", 0, 2, 2), F32A("tensors[2]", 0, 5), F32A("tensors[3]", 0, 1),
             F32A("tensors[4]", 0, 2), F32A("tensors[5]", 0, 6), F32A("tensors[6]", 0, 7), F32A("tensors[7]", 0, 1, 9),
             F32A("tensors[8]", 0, 4), F32A("norm_out", OUT, 1) },
      .s = { .count = 9 },
      .sm = { RULE(SNULLP, 0, 0, INVAL, "tensors"), RULE(SCOUNT, 0, 0, INVAL, "count") },
      .refused = { { 9, 0 }, { 9, 1 }, { 9, 8 } }, .allowed = { { 2, 0 }, { 8, 0 } }, .accept = { OKV(SCOUNT, 0, 1) } },
    { .fn = "wgml_clip_grad_by_global_norm", .call = c_clip_grad_by_global_norm,
      .a = { F32A("grads[0]", OUT, 3), F32A("grads[1]", OUT, 2, 2), F32A("grads[2]", OUT, 5), F32A("grads[3]", OUT, 1),
             F32A("grads[4]", OUT, 2), F32A("grads[5]", OUT, 6), F32A("grads[6]", OUT, 7), F32A("grads[7]", OUT, 1, 9),
             F32A("grads[8]", OUT, 4), F32A("norm", 0, 1) },
      .s = { .count = 9, .f = { 1.0f } },
      .sm = { RULE(SNULLP, 0, 0, INVAL, "grads"), RULE(SCOUNT, 0, 0, INVAL, "count"), FINITE_RULES(0, "max_norm"),
              RULE(SF, 0, -1, INVAL, "max_norm") },
      .refused = { { 1, 0 }, { 2, 0 }, { 2, 1 }, { 8, 0 }, { 8, 7 }, { 9, 2 }, { 9, 8 }, { 0, 9 }, { 8, 9 } },
      .accept = { OKV(SF, 0, 0) /* zeroes the gradients */, OKV(SCOUNT, 0, 1) } },

    /* ---- embeddings: table [V 2, D 3], ids [2] ---- */
    { .fn = "wgml_embedding", .call = c_embedding,
      .a = { { .name = "table", .dtypes = FLOAT_DT, .shape = SH(2, 3), .bad = { { SH(6) }, { SH(1, 2, 3) }, { SH(2, 4) } } },
             { .name = "ids", .dtype = WGML_U32, .shape = SH(2), .bad = { { SH(3) }, { SH(1) } } },
             { .name = "out", .shape = SH(2, 3), .flags = OUT, .bad = { { SH(2, 4) }, { SH(3, 2) }, { SH(7) }, { SH(1, 1, 6) } } } },
      .refused = { { 2, 0 } } },
    { .fn = "wgml_embedding_backward", .call = c_embedding_backward,
      .a = { { .name = "grad_out", .shape = SH(2, 3), .bad = { { SH(3, 2) }, { SH(7) }, { SH(2, 4) } } },
             { .name = "ids", .dtype = WGML_U32, .shape = SH(2), .bad = { { SH(3) } } },
             { .name = "grad_table", .shape = SH(2, 3), .flags = OUT, .bad = { { SH(6) }, { SH(2, 4) }, { SH(2, 1, 3) } } } },
      .refused = { { 2, 0 } } },
};
#define NROWS (sizeof rows / sizeof rows[0])

/* ---- counting ------------------------------------------------------------------------ */

static struct { const char *fn; int bad, accepted; } counts[256];
static int ncounts;

static int *count_of(const char *fn, bool accepted)
{
    for (int i = 0; i < ncounts; i++)
        if (!strcmp(counts[i].fn, fn)) return accepted ? &counts[i].accepted : &counts[i].bad;
    if (ncounts == (int)(sizeof counts / sizeof counts[0])) { fprintf(stderr, "too many functions\n"); exit(2); }
    counts[ncounts].fn = fn;
    return accepted ? &counts[ncounts++].accepted : &counts[ncounts++].bad;
}

/* ---- helpers -------------------------------------------------------------------------- */

static wgml_context *ctx2;    /* the other context, for foreign tensors and engines */
static wgml_engine *eng2;

static void need_other(void)
{
    if (ctx2) return;
    if (wgml_context_create(NULL, &ctx2) != WGML_OK || wgml_engine_create(ctx2, &eng2) != WGML_OK) {
        fprintf(stderr, "FATAL: a second context: %s\n", wgml_last_error(ctx2));
        exit(2);
    }
}

static uint64_t commands_of(const wgml_context *c)
{
    wgml_context_stats s;
    wgml_context_stats_get(c, &s);
    return s.commands;
}

/* Everything a rejected call must leave as it was, on both contexts. */
typedef struct snap { wgml_context_stats a, b; } snap;
static snap snap_take(void)
{
    snap s;
    wgml_context_stats_get(th_ctx, &s.a);
    wgml_context_stats_get(ctx2, &s.b);
    return s;
}
static bool snap_same(const snap *x, const snap *y, char *why, size_t cap)
{
    const wgml_context_stats *p[2][2] = { { &x->a, &y->a }, { &x->b, &y->b } };
    for (int c = 0; c < 2; c++) {
        const wgml_context_stats *u = p[c][0], *v = p[c][1];
        if (u->commands != v->commands || u->submits != v->submits || u->live_tensors != v->live_tensors ||
            u->live_engines != v->live_engines) {
            snprintf(why, cap, "%s context: %+lld commands, %+lld submits, %+ld tensors, %+ld engines", c ? "the other" : "the engine's",
                     (long long)(v->commands - u->commands), (long long)(v->submits - u->submits), v->live_tensors - u->live_tensors,
                     v->live_engines - u->live_engines);
            return false;
        }
    }
    return true;
}

static uint32_t shape_ndim(const size_t *shape)
{
    uint32_t n = 0;
    while (n < WGML_MAX_DIMS && shape[n]) n++;
    return n;
}

static size_t shape_numel(const size_t *shape)
{
    size_t n = 1;
    for (uint32_t i = 0; i < shape_ndim(shape); i++) n *= shape[i];
    return n;
}

static void shape_str(const size_t *shape, char *buf, size_t cap)
{
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (uint32_t i = 0; i < shape_ndim(shape) && k < cap; i++) k += (size_t)snprintf(buf + k, cap - k, i ? ", %zu" : "%zu", shape[i]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
}

/* A tensor of ctx filled with 0xFF bytes (poison) or with small valid values. */
static wgml_tensor *make(wgml_context *c, wgml_dtype dt, const size_t *shape, bool poison)
{
    wgml_tensor *t;
    if (wgml_tensor_create(c, dt, shape_ndim(shape), shape, &t) != WGML_OK) {
        fprintf(stderr, "FATAL: wgml_tensor_create: %s\n", wgml_last_error(c));
        exit(2);
    }
    size_t nb = wgml_tensor_nbytes(t), n = wgml_tensor_numel(t);
    unsigned char *p = malloc(nb);
    if (!p) exit(2);
    if (poison) {
        memset(p, 0xFF, nb);
    } else {
        for (size_t i = 0; i < n; i++) {
            switch (dt) {
            case WGML_F32: { float v = (float)th_uniform(-1, 1); memcpy(p + 4 * i, &v, 4); break; }
            case WGML_U32: { uint32_t v = th_rand_u32() % 4; memcpy(p + 4 * i, &v, 4); break; }
            case WGML_F16: { uint16_t v = 0x3C00; memcpy(p + 2 * i, &v, 2); break; }    /* 1.0 */
            case WGML_BF16: { uint16_t v = 0x3F80; memcpy(p + 2 * i, &v, 2); break; }   /* 1.0 */
            default: p[i] = (unsigned char)(th_rand_u32() & 0xFF); break;
            }
        }
    }
    if (wgml_tensor_write(t, 0, p, nb) != WGML_OK) { fprintf(stderr, "FATAL: write: %s\n", wgml_last_error(c)); exit(2); }
    free(p);
    return t;
}

/* needle occurs in msg as a whole word: not preceded or followed by an identifier
   character (so "a" is not found in "wgml_add" or "has"). */
static bool names_word(const char *msg, const char *needle)
{
    size_t n = strlen(needle);
    for (const char *p = strstr(msg, needle); p; p = strstr(p + 1, needle)) {
        char before = p == msg ? ' ' : p[-1], after = p[n];
        bool ib = (before >= 'a' && before <= 'z') || (before >= 'A' && before <= 'Z') || (before >= '0' && before <= '9') || before == '_';
        bool ia = (after >= 'a' && after <= 'z') || (after >= 'A' && after <= 'Z') || (after >= '0' && after <= '9') || after == '_';
        if (!ib && !ia) return true;
    }
    return false;
}

/* Known messages, set before each bad call, so a stale message of an earlier call can
   never satisfy a check: one on th_ctx, one on the thread (no context). */
static void set_sentinels(const char *fn)
{
    if (strcmp(fn, "wgml_context_info") != 0) wgml_context_info(th_ctx, NULL);
    else wgml_context_stats_get(th_ctx, NULL);
    if (strcmp(fn, "wgml_tensor_zero") != 0) wgml_tensor_zero(NULL);
    else wgml_engine_warmup(NULL);
}

/* The checks of one rejected call. msg_ctx: where the message is (NULL: the thread's).
   needle2, when not NULL, must be named too. */
static void check_rejected_p(const char *fn, const char *pfx, const char *what, wgml_status got, wgml_status want,
                             const wgml_context *msg_ctx, const char *needle, const char *needle2, const snap *before)
{
    const char *msg = wgml_last_error(msg_ctx);
    size_t fl = strlen(pfx);
    bool prefix = strncmp(msg, pfx, fl) == 0 && msg[fl] == ':';
    bool named = names_word(msg + (prefix ? fl + 1 : 0), needle) &&
                 (!needle2 || names_word(msg + (prefix ? fl + 1 : 0), needle2));
    TH_CHECK(got == want && prefix && named, "%s, %s: returned %s with \"%s\"; expected %s, a message \"%s: ...\" naming \"%s\"%s%s",
             fn, what, wgml_status_string(got), msg, wgml_status_string(want), pfx, needle, needle2 ? " and " : "",
             needle2 ? needle2 : "");
    snap after = snap_take();
    char why[200];
    TH_CHECK(snap_same(before, &after, why, sizeof why), "%s, %s: the rejected call changed the counters of %s", fn, what, why);
    (*count_of(fn, false))++;
}

/* Messages of ops and of most functions start with the function's name. */
static void check_rejected(const char *fn, const char *what, wgml_status got, wgml_status want, const wgml_context *msg_ctx,
                           const char *needle, const char *needle2, const snap *before)
{
    check_rejected_p(fn, fn, what, got, want, msg_ctx, needle, needle2, before);
}

/* ---- running a row --------------------------------------------------------------------- */

typedef struct run_state {
    const oprow *r;
    int na;
    wgml_tensor *t[MAXA];
} run_state;

static void try_bad(run_state *st, wgml_engine *e, wgml_tensor *const *t, const scal *s, const char *what, wgml_status want,
                    const char *needle, const char *needle2)
{
    const oprow *r = st->r;
    set_sentinels(r->fn);
    snap before = snap_take();
    wgml_status got = r->call(e, t, s);
    check_rejected(r->fn, what, got, want, e ? th_ctx : NULL, needle, needle2, &before);
}

/* A copy of the row's tensors with slot i replaced by x. */
static void with_slot(const run_state *st, wgml_tensor **dst, int i, wgml_tensor *x)
{
    memcpy(dst, st->t, sizeof st->t);
    dst[i] = x;
}

static void tensor_mutations(run_state *st)
{
    const oprow *r = st->r;
    wgml_tensor *t2[MAXA];
    char what[160], sh[64];
    /* the engine */
    try_bad(st, NULL, st->t, &r->s, "engine NULL", WGML_ERROR_INVALID_ARGUMENT, "engine", NULL);
    {
        set_sentinels(r->fn);
        snap before = snap_take();
        wgml_status got = r->call(eng2, st->t, &r->s);
        /* the message goes to the engine's context and names the first tensor it checks */
        const char *msg = wgml_last_error(ctx2);
        bool ok = got == WGML_ERROR_CONTEXT && strncmp(msg, r->fn, strlen(r->fn)) == 0 && strstr(msg, "context");
        TH_CHECK(ok, "%s, engine of another context: returned %s with \"%s\"; expected WGML_ERROR_CONTEXT", r->fn,
                 wgml_status_string(got), msg);
        snap after = snap_take();
        char why[200];
        TH_CHECK(snap_same(&before, &after, why, sizeof why), "%s, engine of another context: %s", r->fn, why);
        (*count_of(r->fn, false))++;
    }
    for (int i = 0; i < st->na; i++) {
        const targ *a = &r->a[i];
        if (!(a->flags & OPT)) {
            with_slot(st, t2, i, NULL);
            snprintf(what, sizeof what, "%s NULL", a->name);
            try_bad(st, th_eng, t2, &r->s, what, WGML_ERROR_INVALID_ARGUMENT, a->name, NULL);
        }
        unsigned ok = a->dtypes ? a->dtypes : DT(a->dtype);
        for (int d = WGML_F32; d <= WGML_U8; d++) {
            if (ok & DT(d)) continue;
            wgml_tensor *x = make(th_ctx, (wgml_dtype)d, a->shape, false);
            with_slot(st, t2, i, x);
            snprintf(what, sizeof what, "%s of dtype %s", a->name, wgml_dtype_name((wgml_dtype)d));
            try_bad(st, th_eng, t2, &r->s, what, WGML_ERROR_DTYPE, a->name, NULL);
            wgml_tensor_release(x);
        }
        {
            wgml_tensor *x = make(ctx2, a->dtype, a->shape, false);
            with_slot(st, t2, i, x);
            snprintf(what, sizeof what, "%s from another context", a->name);
            try_bad(st, th_eng, t2, &r->s, what, WGML_ERROR_CONTEXT, a->name, NULL);
            wgml_tensor_release(x);
        }
        if (a->flags & SAME_N) {
            size_t n = shape_numel(a->shape);
            size_t counts_[2] = { n + 1, n - 1 };
            for (int k = 0; k < (n > 1 ? 2 : 1); k++) {
                wgml_tensor *x = make(th_ctx, a->dtype, (size_t[]){ counts_[k], 0 }, false);
                with_slot(st, t2, i, x);
                snprintf(what, sizeof what, "%s of %zu elements (the others have %zu)", a->name, counts_[k], n);
                try_bad(st, th_eng, t2, &r->s, what, WGML_ERROR_SHAPE, a->name, NULL);
                wgml_tensor_release(x);
            }
        }
        for (int b = 0; b < MAXBAD && a->bad[b].shape[0]; b++) {
            const bad_tensor *bt = &a->bad[b];
            wgml_dtype dt = bt->dt ? (wgml_dtype)(bt->dt - 1) : a->dtype;
            wgml_tensor *x = make(th_ctx, dt, bt->shape, false);
            with_slot(st, t2, i, x);
            shape_str(bt->shape, sh, sizeof sh);
            snprintf(what, sizeof what, "%s of shape %s %s", a->name, sh, wgml_dtype_name(dt));
            try_bad(st, th_eng, t2, &r->s, what, bt->st ? bt->st : WGML_ERROR_SHAPE, bt->needle ? bt->needle : a->name, NULL);
            wgml_tensor_release(x);
        }
    }
}

static void apply_rule(const smut *m, scal *s, wgml_tensor **t)
{
    switch (m->kind) {
    case SU: s->u[m->idx] = (uint32_t)m->v; break;
    case SF: s->f[m->idx] = (float)m->v; break;
    case SZ: s->z = m->v >= (double)SIZE_MAX ? SIZE_MAX : (size_t)m->v; break;
    case SCOUNT: s->count = (size_t)m->v; break;
    case SNULLP: s->nullp |= 1u << m->idx; break;
    case SNULLS: for (int i = 0; i < MAXA; i++) if (m->idx & (1 << i)) t[i] = NULL; break;
    }
}

static void rule_str(const smut *m, char *buf, size_t cap)
{
    static const char *const kinds[] = { "", "u", "f", "z", "count", "NULL pointer", "NULL tensors" };
    if (m->kind == SNULLP || m->kind == SNULLS) snprintf(buf, cap, "%s #%d", kinds[m->kind], m->idx);
    else if (m->kind == SU || m->kind == SF) snprintf(buf, cap, "%s[%d] = %g", kinds[m->kind], m->idx, m->v);
    else snprintf(buf, cap, "%s = %g", kinds[m->kind], m->v);
}

static char pending[2048];   /* rows skipped: the library lacks the function */

/* Whether the library has fn. The dynamic linker must see the library (a shared build):
   wgml_add is always there, so a lookup that fails for it fails the test instead of
   quietly skipping every row. */
static bool library_has(const char *fn)
{
    static int linker_ok = -1;
    if (linker_ok < 0) {
        linker_ok = dlsym(RTLD_DEFAULT, "wgml_add") != NULL;
        TH_CHECK(linker_ok, "the dynamic linker does not see the library's symbols (dlsym of wgml_add failed)");
    }
    return !linker_ok || dlsym(RTLD_DEFAULT, fn) != NULL;
}

static void run_row(const oprow *r)
{
    if (!library_has(r->fn)) {
        if (!strstr(pending, r->fn) && strlen(pending) + strlen(r->fn) + 2 < sizeof pending) {
            strcat(pending, " ");
            strcat(pending, r->fn);
        }
        return;
    }
    run_state st = { .r = r };
    while (st.na < MAXA && r->a[st.na].name) st.na++;
    for (int i = 0; i < st.na; i++) st.t[i] = make(th_ctx, r->a[i].dtype, r->a[i].shape, (r->a[i].flags & OUT) != 0);
    uint64_t c0 = commands_of(th_ctx);
    char what[160];

    if (!r->scalars_only) tensor_mutations(&st);
    for (int k = 0; k < MAXSM && r->sm[k].kind; k++) {
        scal s = r->s;
        wgml_tensor *t2[MAXA];
        memcpy(t2, st.t, sizeof t2);
        apply_rule(&r->sm[k], &s, t2);
        rule_str(&r->sm[k], what, sizeof what);
        try_bad(&st, th_eng, t2, &s, what, r->sm[k].st, r->sm[k].needle, NULL);
    }
    for (int k = 0; k < MAXAL && (r->refused[k].dst || r->refused[k].src); k++) {
        apair p = r->refused[k];
        wgml_tensor *t2[MAXA];
        with_slot(&st, t2, p.dst, st.t[p.src]);
        snprintf(what, sizeof what, "%s is the tensor of %s", r->a[p.dst].name, r->a[p.src].name);
        try_bad(&st, th_eng, t2, &r->s, what, WGML_ERROR_ALIAS, r->a[p.dst].name, r->a[p.src].name);
    }

    for (const bad_config *c = r->configs; c && c->what; c++) {
        wgml_tensor *t2[MAXA] = { 0 };
        for (int i = 0; i < st.na; i++)
            t2[i] = make(th_ctx, r->a[i].dtype, c->shapes[i][0] ? c->shapes[i] : r->a[i].shape, false);
        try_bad(&st, th_eng, t2, &r->s, c->what, c->st, c->needle, NULL);
        for (int i = 0; i < st.na; i++) wgml_tensor_release(t2[i]);
    }

    /* nothing recorded, and every output still holds its poison */
    TH_CHECK(commands_of(th_ctx) == c0, "%s: the rejected calls recorded commands", r->fn);
    for (int i = 0; i < st.na; i++) {
        if (!(r->a[i].flags & OUT)) continue;
        size_t nb = wgml_tensor_nbytes(st.t[i]);
        unsigned char *p = malloc(nb);
        if (!p) exit(2);
        TH_EXPECT(wgml_tensor_read(st.t[i], 0, p, nb), WGML_OK);
        size_t changed = 0;
        for (size_t b = 0; b < nb; b++) changed += p[b] != 0xFF;
        TH_CHECK(changed == 0, "%s: %zu bytes of %s were written by rejected calls", r->fn, changed, r->a[i].name);
        free(p);
    }

    /* the good call, and the variants the header allows */
    uint64_t g0 = commands_of(th_ctx);
    wgml_status s = r->call(th_eng, st.t, &r->s);
    TH_CHECK(s == WGML_OK, "%s: the valid call returned %s: %s", r->fn, wgml_status_string(s), wgml_last_error(th_ctx));
    TH_CHECK(commands_of(th_ctx) > g0, "%s: the valid call recorded nothing", r->fn);
    for (int i = 0; i < st.na; i++) {
        if (!(r->a[i].flags & OPT)) continue;
        wgml_tensor *t2[MAXA];
        with_slot(&st, t2, i, NULL);
        s = r->call(th_eng, t2, &r->s);
        TH_CHECK(s == WGML_OK, "%s with %s NULL (allowed) returned %s: %s", r->fn, r->a[i].name, wgml_status_string(s),
                 wgml_last_error(th_ctx));
        (*count_of(r->fn, true))++;
    }
    for (int k = 0; k < MAXAL && (r->allowed[k].dst || r->allowed[k].src); k++) {
        apair p = r->allowed[k];
        wgml_tensor *t2[MAXA];
        with_slot(&st, t2, p.dst, st.t[p.src]);
        s = r->call(th_eng, t2, &r->s);
        TH_CHECK(s == WGML_OK, "%s with %s the tensor of %s (allowed) returned %s: %s", r->fn, r->a[p.dst].name,
                 r->a[p.src].name, wgml_status_string(s), wgml_last_error(th_ctx));
        (*count_of(r->fn, true))++;
    }
    for (int k = 0; k < MAXSM && r->accept[k].kind; k++) {
        scal sc = r->s;
        wgml_tensor *t2[MAXA];
        memcpy(t2, st.t, sizeof t2);
        apply_rule(&r->accept[k], &sc, t2);
        rule_str(&r->accept[k], what, sizeof what);
        s = r->call(th_eng, t2, &sc);
        TH_CHECK(s == WGML_OK, "%s with %s (allowed) returned %s: %s", r->fn, what, wgml_status_string(s), wgml_last_error(th_ctx));
        (*count_of(r->fn, true))++;
    }
    TH_EXPECT(wgml_context_sync(th_ctx), WGML_OK);
    for (int i = 0; i < st.na; i++) wgml_tensor_release(st.t[i]);
}

/* ---- cases ---------------------------------------------------------------------------- */

static void test_ops(void)
{
    need_other();
    for (size_t i = 0; i < NROWS; i++) run_row(&rows[i]);
}

/* A bad call of a function that is not an op: checked like an op's. */
#define BAD(fn, call, want, msg_ctx, needle) do { \
        set_sentinels(fn); \
        snap before_ = snap_take(); \
        wgml_status got_ = (call); \
        check_rejected(fn, #call, got_, want, msg_ctx, needle, NULL, &before_); \
    } while (0)
/* A bad call whose message starts with pfx rather than the function's name (file errors
   start with the file's name). */
#define BADP(fn, pfx, call, want, needle) do { \
        set_sentinels(fn); \
        snap before_ = snap_take(); \
        wgml_status got_ = (call); \
        check_rejected_p(fn, pfx, #call, got_, want, NULL, needle, NULL, &before_); \
    } while (0)
/* A documented no-op or fallback value for a bad input (counted too). */
#define NOOP(fn, cond) do { TH_CHECK((cond), "%s: %s", fn, #cond); (*count_of(fn, false))++; } while (0)

static void test_status_and_dtype_names(void)
{
    const int bad_status[] = { -1, WGML_ERROR_IO + 1, 1000 };
    for (int i = 0; i < 3; i++) {
        const char *s = wgml_status_string((wgml_status)bad_status[i]);
        NOOP("wgml_status_string", s != NULL && s[0] != 0);
    }
    const int bad_dtype[] = { -1, WGML_AFFINE + 1, 99 };
    for (int i = 0; i < 3; i++) {
        NOOP("wgml_dtype_size", wgml_dtype_size((wgml_dtype)bad_dtype[i]) == 0);
        NOOP("wgml_dtype_name", !strcmp(wgml_dtype_name((wgml_dtype)bad_dtype[i]), "?"));
    }
}

static void test_context_functions(void)
{
    need_other();
    wgml_context *c = (wgml_context *)&c;
    BAD("wgml_context_create", wgml_context_create(NULL, NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "out");
    BAD("wgml_context_create", wgml_context_create(&(wgml_context_desc){ .backend = "glide" }, &c), WGML_ERROR_INVALID_ARGUMENT,
        NULL, "backend");
    TH_CHECK(c == NULL, "wgml_context_create: *out not NULL after a failure");
    c = (wgml_context *)&c;
    BAD("wgml_context_create", wgml_context_create(&(wgml_context_desc){ .adapter = "no such adapter 3dfx" }, &c),
        WGML_ERROR_NO_ADAPTER, NULL, "adapter");
    TH_CHECK(c == NULL, "wgml_context_create: *out not NULL after a failure");
    wgml_context_destroy(NULL);
    NOOP("wgml_context_destroy", true);   /* NULL: a no-op (reaching here is the check) */
    c = (wgml_context *)&c;
    BAD("wgml_context_create", wgml_context_create(&(wgml_context_desc){ .use_device_index = true, .device_index = 4096 }, &c),
        WGML_ERROR_NO_ADAPTER, NULL, "device index 4096");
    TH_CHECK(c == NULL, "wgml_context_create: *out not NULL after a failure");
    uint32_t nad = 7;
    BAD("wgml_adapter_list", wgml_adapter_list(NULL, NULL, 0, NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "count");
    BAD("wgml_adapter_list", wgml_adapter_list(NULL, NULL, 2, &nad), WGML_ERROR_INVALID_ARGUMENT, NULL, "out");
    BAD("wgml_adapter_list", wgml_adapter_list("glide", NULL, 0, &nad), WGML_ERROR_INVALID_ARGUMENT, NULL, "backend");
    TH_CHECK(nad == 0, "wgml_adapter_list: count %u after a failure", nad);

    /* data parallelism, outside a job: NULL is the one process's communicator */
    wgml_comm *cm = (wgml_comm *)&cm;
    BAD("wgml_comm_create", wgml_comm_create(0, NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "out");
    BAD("wgml_comm_allreduce_sum", wgml_comm_allreduce_sum(NULL, NULL, 3), WGML_ERROR_INVALID_ARGUMENT, NULL, "buf");
    NOOP("wgml_comm_available", wgml_comm_available() == true || wgml_comm_available() == false);
    NOOP("wgml_comm_rank", wgml_comm_rank(NULL) == 0);
    NOOP("wgml_comm_size", wgml_comm_size(NULL) == 1);
    NOOP("wgml_comm_local_rank", wgml_comm_local_rank(NULL) == 0);
    wgml_comm_destroy(NULL);
    NOOP("wgml_comm_destroy", true);
    wgml_comm_abort(NULL, 1);
    NOOP("wgml_comm_abort", true);   /* NULL returns */
    (void)cm;

    BAD("wgml_context_flush", wgml_context_flush(NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "ctx");
    BAD("wgml_context_sync", wgml_context_sync(NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "ctx");
    wgml_adapter_info info;
    BAD("wgml_context_info", wgml_context_info(NULL, &info), WGML_ERROR_INVALID_ARGUMENT, NULL, "ctx");
    BAD("wgml_context_info", wgml_context_info(th_ctx, NULL), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "info");
    wgml_context_stats stats;
    BAD("wgml_context_stats_get", wgml_context_stats_get(NULL, &stats), WGML_ERROR_INVALID_ARGUMENT, NULL, "ctx");
    BAD("wgml_context_stats_get", wgml_context_stats_get(th_ctx, NULL), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "stats");

    double sec = -1;
    BAD("wgml_context_timer_begin", wgml_context_timer_begin(NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "ctx");
    BAD("wgml_context_timer_end", wgml_context_timer_end(NULL, &sec), WGML_ERROR_INVALID_ARGUMENT, NULL, "ctx");
    BAD("wgml_context_timer_end", wgml_context_timer_end(th_ctx, &sec), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "timer");
    TH_CHECK(sec == -1, "wgml_context_timer_end wrote *seconds on a failure");
    TH_EXPECT(wgml_context_timer_begin(th_ctx), WGML_OK);
    BAD("wgml_context_timer_begin", wgml_context_timer_begin(th_ctx), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "timer");
    BAD("wgml_context_timer_end", wgml_context_timer_end(th_ctx, NULL), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "seconds");
    TH_EXPECT(wgml_context_timer_end(th_ctx, &sec), WGML_OK);   /* the timer survived the bad calls */
    TH_CHECK(sec >= 0, "timer: %g s", sec);

    uint64_t fence = 0;
    bool done = true;
    BAD("wgml_context_fence", wgml_context_fence(NULL, &fence), WGML_ERROR_INVALID_ARGUMENT, NULL, "ctx");
    BAD("wgml_context_fence", wgml_context_fence(th_ctx, NULL), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "fence");
    BAD("wgml_context_fence_wait", wgml_context_fence_wait(NULL, 1, 0, &done), WGML_ERROR_INVALID_ARGUMENT, NULL, "ctx");
    BAD("wgml_context_fence_wait", wgml_context_fence_wait(th_ctx, 1, 0, NULL), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "done");
    BAD("wgml_context_fence_wait", wgml_context_fence_wait(th_ctx, 0, 0, &done), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "fence");
    TH_CHECK(!done, "wgml_context_fence_wait: *done left true after a failure");
    TH_EXPECT(wgml_context_fence(th_ctx, &fence), WGML_OK);
    BAD("wgml_context_fence_wait", wgml_context_fence_wait(th_ctx, fence + 1, 0, &done), WGML_ERROR_INVALID_ARGUMENT, th_ctx,
        "fence");
    TH_EXPECT(wgml_context_fence_wait(th_ctx, fence, 60000, &done), WGML_OK);   /* the fence survived the bad calls */
    TH_CHECK(done, "a fence with nothing behind it did not finish within a minute");
}

static void test_tensor_functions(void)
{
    need_other();
    wgml_adapter_info info;
    wgml_context_info(th_ctx, &info);
    wgml_context_stats s0, s1;
    wgml_context_stats_get(th_ctx, &s0);
    const size_t shape[] = { 2, 3 };
    const float data[6] = { 1, 2, 3, 4, 5, 6 };
    /* one element past each byte limit of the device, and a count that overflows size_t */
    const size_t over_binding[] = { (size_t)(info.max_storage_buffer_binding_size / 4 + 1) };
    const size_t over_buffer[] = { (size_t)(info.max_buffer_size / 4 + 1) };
    const size_t overflow[] = { SIZE_MAX / 2, 4 };
    wgml_tensor *t = (wgml_tensor *)&t;
#define CREATE_BAD(call, want, msg_ctx, needle) do { \
        t = (wgml_tensor *)&t; \
        BAD("wgml_tensor_create", call, want, msg_ctx, needle); \
        TH_CHECK(t == NULL, "wgml_tensor_create: *out not NULL after a failure"); \
    } while (0)
    CREATE_BAD(wgml_tensor_create(NULL, WGML_F32, 2, shape, &t), WGML_ERROR_INVALID_ARGUMENT, NULL, "ctx");
    BAD("wgml_tensor_create", wgml_tensor_create(th_ctx, WGML_F32, 2, shape, NULL), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "out");
    CREATE_BAD(wgml_tensor_create(th_ctx, (wgml_dtype)99, 2, shape, &t), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "dtype");
    CREATE_BAD(wgml_tensor_create(th_ctx, (wgml_dtype)-1, 2, shape, &t), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "dtype");
    CREATE_BAD(wgml_tensor_create(th_ctx, WGML_F32, 0, shape, &t), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "ndim");
    CREATE_BAD(wgml_tensor_create(th_ctx, WGML_F32, 5, (size_t[]){ 1, 1, 1, 1, 1 }, &t), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "ndim");
    CREATE_BAD(wgml_tensor_create(th_ctx, WGML_F32, 2, NULL, &t), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "shape");
    CREATE_BAD(wgml_tensor_create(th_ctx, WGML_F32, 2, (size_t[]){ 3, 0 }, &t), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "shape");
    CREATE_BAD(wgml_tensor_create(th_ctx, WGML_F32, 1, over_binding, &t), WGML_ERROR_LIMIT, th_ctx,
               "maxStorageBufferBindingSize");
    CREATE_BAD(wgml_tensor_create(th_ctx, WGML_F32, 1, over_buffer, &t), WGML_ERROR_LIMIT, th_ctx,
               info.max_buffer_size < info.max_storage_buffer_binding_size ? "maxBufferSize" : "maxStorageBufferBindingSize");
    CREATE_BAD(wgml_tensor_create(th_ctx, WGML_F32, 2, overflow, &t), WGML_ERROR_LIMIT, th_ctx, "size_t");
#undef CREATE_BAD
    /* packed tensors: every field of the desc */
    const char *pfn = "wgml_tensor_create_packed";
    wgml_packed_layout lay;
    const wgml_packed_desc q8 = { .dtype = WGML_Q8_0, .rows = 2, .cols = 64 };
    const wgml_packed_desc bad_descs[] = {
        { .dtype = WGML_F32, .rows = 2, .cols = 64 }, { .dtype = (wgml_dtype)99, .rows = 2, .cols = 64 },
        { .dtype = WGML_Q8_0, .rows = 0, .cols = 64 }, { .dtype = WGML_Q4_K, .rows = 2, .cols = 0 },
        { .dtype = WGML_AFFINE, .rows = 2, .cols = 64, .bits = 2, .group_size = 64 },
        { .dtype = WGML_AFFINE, .rows = 2, .cols = 64, .bits = 4, .group_size = 48 },
        { .dtype = WGML_AFFINE, .rows = 2, .cols = 64, .bits = 4, .group_size = 64, .scale_dtype = WGML_U8 },
    };
    for (size_t i = 0; i < sizeof bad_descs / sizeof bad_descs[0]; i++) {
        t = (wgml_tensor *)&t;
        BAD(pfn, wgml_tensor_create_packed(th_ctx, &bad_descs[i], &t), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "desc");
        TH_CHECK(t == NULL, "%s: *out not NULL after a failure", pfn);
        BAD("wgml_packed_layout_of", wgml_packed_layout_of(&bad_descs[i], &lay), WGML_ERROR_INVALID_ARGUMENT, NULL, "desc");
    }
    BAD(pfn, wgml_tensor_create_packed(th_ctx, &(wgml_packed_desc){ .dtype = WGML_Q6_K, .rows = 2, .cols = 300 }, &t),
        WGML_ERROR_SHAPE, th_ctx, "256");
    BAD(pfn, wgml_tensor_create_packed(NULL, &q8, &t), WGML_ERROR_INVALID_ARGUMENT, NULL, "ctx");
    BAD(pfn, wgml_tensor_create_packed(th_ctx, NULL, &t), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "desc");
    BAD(pfn, wgml_tensor_create_packed(th_ctx, &q8, NULL), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "out");
    BAD(pfn, wgml_tensor_create_packed(th_ctx, &(wgml_packed_desc){ .dtype = WGML_Q8_0, .rows = UINT32_MAX, .cols = UINT32_MAX - 31 },
                                       &t), WGML_ERROR_LIMIT, th_ctx, "size_t");
    BAD(pfn, wgml_tensor_create_packed(th_ctx, &(wgml_packed_desc){ .dtype = WGML_Q8_0, .rows = 1u << 20, .cols = 1u << 20 }, &t),
        WGML_ERROR_LIMIT, th_ctx, "maxStorageBufferBindingSize");
    BAD("wgml_packed_layout_of", wgml_packed_layout_of(&q8, NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "out");
    NOOP("wgml_tensor_packed_desc", wgml_tensor_packed_desc(NULL).dtype == WGML_F32 && wgml_tensor_packed_desc(NULL).rows == 0);
#define FROM_BAD(call, want, msg_ctx, needle) do { \
        t = (wgml_tensor *)&t; \
        BAD("wgml_tensor_from_data", call, want, msg_ctx, needle); \
        TH_CHECK(t == NULL, "wgml_tensor_from_data: *out not NULL after a failure"); \
    } while (0)
    FROM_BAD(wgml_tensor_from_data(th_ctx, WGML_F32, 2, shape, NULL, &t), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "data");
    FROM_BAD(wgml_tensor_from_data(NULL, WGML_F32, 2, shape, data, &t), WGML_ERROR_INVALID_ARGUMENT, NULL, "ctx");
    BAD("wgml_tensor_from_data", wgml_tensor_from_data(th_ctx, WGML_F32, 2, shape, data, NULL), WGML_ERROR_INVALID_ARGUMENT,
        th_ctx, "out");
    FROM_BAD(wgml_tensor_from_data(th_ctx, (wgml_dtype)7, 2, shape, data, &t), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "dtype");
    FROM_BAD(wgml_tensor_from_data(th_ctx, WGML_F32, 0, shape, data, &t), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "ndim");
    FROM_BAD(wgml_tensor_from_data(th_ctx, WGML_F32, 2, NULL, data, &t), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "shape");
    FROM_BAD(wgml_tensor_from_data(th_ctx, WGML_F32, 2, (size_t[]){ 0, 3 }, data, &t), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "shape");
    FROM_BAD(wgml_tensor_from_data(th_ctx, WGML_F32, 1, over_binding, data, &t), WGML_ERROR_LIMIT, th_ctx,
             "maxStorageBufferBindingSize");
#undef FROM_BAD
    wgml_context_stats_get(th_ctx, &s1);
    TH_CHECK(s1.live_tensors == s0.live_tensors && s1.device_bytes == s0.device_bytes, "failed creations left %ld tensors, "
             "%lld bytes", s1.live_tensors - s0.live_tensors, (long long)(s1.device_bytes - s0.device_bytes));
    /* device_bytes follows what is allocated: at least the tensor's bytes, and back after */
    wgml_tensor *big_t = NULL;
    TH_EXPECT(wgml_tensor_create(th_ctx, WGML_F32, 2, (size_t[]){ 1000, 3 }, &big_t), WGML_OK);
    wgml_context_stats s2;
    wgml_context_stats_get(th_ctx, &s2);
    TH_CHECK(s2.device_bytes >= s1.device_bytes + 12000 && s2.device_bytes < s1.device_bytes + 12000 + 4096,
             "a 12000-byte tensor added %lld device bytes", (long long)(s2.device_bytes - s1.device_bytes));
    wgml_tensor_release(big_t);
    wgml_context_stats_get(th_ctx, &s2);
    TH_CHECK(s2.device_bytes == s1.device_bytes, "releasing it left %lld device bytes", (long long)(s2.device_bytes - s1.device_bytes));

    /* write, read, zero, reshape on a 2 x 3 f32 tensor; it must come through unchanged */
    wgml_tensor *x = NULL;
    TH_EXPECT(wgml_tensor_from_data(th_ctx, WGML_F32, 2, shape, data, &x), WGML_OK);
    if (!x) return;
    float buf[8];
    BAD("wgml_tensor_write", wgml_tensor_write(NULL, 0, buf, 4), WGML_ERROR_INVALID_ARGUMENT, NULL, "tensor");
    BAD("wgml_tensor_write", wgml_tensor_write(x, 0, NULL, 4), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "data");
    BAD("wgml_tensor_write", wgml_tensor_write(x, 4, buf, 24), WGML_ERROR_SHAPE, th_ctx, "tensor");
    BAD("wgml_tensor_write", wgml_tensor_write(x, 28, buf, 0), WGML_ERROR_SHAPE, th_ctx, "tensor");
    BAD("wgml_tensor_write", wgml_tensor_write(x, SIZE_MAX - 2, buf, 8), WGML_ERROR_SHAPE, th_ctx, "tensor");
    BAD("wgml_tensor_write", wgml_tensor_write(x, 0, buf, SIZE_MAX), WGML_ERROR_SHAPE, th_ctx, "tensor");
    for (int i = 0; i < 8; i++) buf[i] = -7;
    BAD("wgml_tensor_read", wgml_tensor_read(NULL, 0, buf, 4), WGML_ERROR_INVALID_ARGUMENT, NULL, "tensor");
    BAD("wgml_tensor_read", wgml_tensor_read(x, 0, NULL, 4), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "data");
    BAD("wgml_tensor_read", wgml_tensor_read(x, 8, buf, 20), WGML_ERROR_SHAPE, th_ctx, "tensor");
    BAD("wgml_tensor_read", wgml_tensor_read(x, 25, buf, 0), WGML_ERROR_SHAPE, th_ctx, "tensor");
    BAD("wgml_tensor_read", wgml_tensor_read(x, SIZE_MAX, buf, 2), WGML_ERROR_SHAPE, th_ctx, "tensor");
    bool untouched = true;
    for (int i = 0; i < 8; i++) untouched = untouched && buf[i] == -7;
    TH_CHECK(untouched, "wgml_tensor_read wrote host memory on a failure");
    BAD("wgml_tensor_zero", wgml_tensor_zero(NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "tensor");
    BAD("wgml_tensor_reshape", wgml_tensor_reshape(NULL, 1, (size_t[]){ 6 }), WGML_ERROR_INVALID_ARGUMENT, NULL, "tensor");
    BAD("wgml_tensor_reshape", wgml_tensor_reshape(x, 0, (size_t[]){ 6 }), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "ndim");
    BAD("wgml_tensor_reshape", wgml_tensor_reshape(x, 5, (size_t[]){ 6, 1, 1, 1, 1 }), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "ndim");
    BAD("wgml_tensor_reshape", wgml_tensor_reshape(x, 1, NULL), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "shape");
    BAD("wgml_tensor_reshape", wgml_tensor_reshape(x, 2, (size_t[]){ 6, 0 }), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "shape");
    BAD("wgml_tensor_reshape", wgml_tensor_reshape(x, 1, (size_t[]){ 7 }), WGML_ERROR_SHAPE, th_ctx, "shape");
    BAD("wgml_tensor_reshape", wgml_tensor_reshape(x, 2, (size_t[]){ 3, 3 }), WGML_ERROR_SHAPE, th_ctx, "shape");
    BAD("wgml_tensor_reshape", wgml_tensor_reshape(x, 2, (size_t[]){ SIZE_MAX / 2 + 1, 2 }), WGML_ERROR_SHAPE, th_ctx, "shape");
    TH_CHECK(wgml_tensor_ndim(x) == 2 && wgml_tensor_dim(x, 0) == 2 && wgml_tensor_dim(x, 1) == 3,
             "a failed reshape changed the shape");
    NOOP("wgml_tensor_dim", wgml_tensor_dim(x, 2) == 0);
    NOOP("wgml_tensor_dim", wgml_tensor_dim(x, 4) == 0);
    NOOP("wgml_tensor_dim", wgml_tensor_dim(x, UINT32_MAX) == 0);
    float back[6];
    TH_EXPECT(wgml_tensor_read(x, 0, back, sizeof back), WGML_OK);
    TH_CHECK(memcmp(back, data, sizeof back) == 0, "failed writes changed the tensor");
    wgml_tensor_release(x);
    wgml_tensor_release(NULL);
    NOOP("wgml_tensor_release", true);
}

static void test_engine_functions(void)
{
    need_other();
    wgml_engine *e = (wgml_engine *)&e;
    BAD("wgml_engine_create", wgml_engine_create(NULL, &e), WGML_ERROR_INVALID_ARGUMENT, NULL, "ctx");
    TH_CHECK(e == NULL, "wgml_engine_create: *out not NULL after a failure");
    BAD("wgml_engine_create", wgml_engine_create(th_ctx, NULL), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "out");
    BAD("wgml_engine_warmup", wgml_engine_warmup(NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "engine");
    wgml_engine_destroy(NULL);
    NOOP("wgml_engine_destroy", true);
}

/* ---- files: safetensors, checkpoints, configs, tokenizers ------------------------------ */

/* A safetensors file in buf: the 8-byte little-endian header length, the header padded
   with spaces to a multiple of 8, then nbytes of data. Returns the file's size. */
static size_t st_blob(unsigned char *buf, const char *header, uint64_t claimed_len, const void *data, size_t nbytes)
{
    size_t hl = strlen(header), padded = (hl + 7) & ~(size_t)7;
    uint64_t n = claimed_len ? claimed_len : padded;
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(n >> (8 * i));
    memcpy(buf + 8, header, hl);
    memset(buf + 8 + hl, ' ', padded - hl);
    if (nbytes) memcpy(buf + 8 + padded, data, nbytes);
    return 8 + padded + nbytes;
}

static bool write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    bool ok = fwrite(data, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

static int dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

/* GGUF: NULL arguments, out-of-range indices (the hostile files are tests/test_gguf.c's). */
static void test_gguf_functions(void)
{
    /* "GGUF", version 3, 1 tensor, 1 pair {"k": u8 7}, tensor "w" f32 [2] at 0: 71 bytes of
       header, padding to 32, the data at 96 */
    static uint8_t g_bytes[104];
    size_t n = 0;
#define P(bytes, len) (memcpy(g_bytes + n, bytes, len), n += (len))
    P("GGUF\3\0\0\0\1\0\0\0\0\0\0\0\1\0\0\0\0\0\0\0", 24);
    P("\1\0\0\0\0\0\0\0k\0\0\0\0\7", 14);
    P("\1\0\0\0\0\0\0\0w\1\0\0\0\2\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0", 33);
#undef P
    const char *fn = "wgml_gguf_open_memory";
    wgml_gguf *g = (wgml_gguf *)&g;
    BAD(fn, wgml_gguf_open_memory(NULL, 4, "x.gguf", &g), WGML_ERROR_INVALID_ARGUMENT, NULL, "data");
    BAD(fn, wgml_gguf_open_memory(g_bytes, sizeof g_bytes, "x.gguf", NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "out");
    BADP(fn, "x.gguf", wgml_gguf_open_memory(g_bytes, 71, "x.gguf", &g), WGML_ERROR_FORMAT, "data section");
    TH_CHECK(g == NULL, "%s: *out not NULL after a failure", fn);
    BAD("wgml_gguf_open", wgml_gguf_open(NULL, &g), WGML_ERROR_INVALID_ARGUMENT, NULL, "path");
    BADP("wgml_gguf_open", "/", wgml_gguf_open("/", &g), WGML_ERROR_IO, "file");   /* a folder */
    TH_EXPECT(wgml_gguf_open_memory(g_bytes, sizeof g_bytes, "x.gguf", &g), WGML_OK);
    if (!g) return;
    wgml_gguf_value v;
    wgml_gguf_tensor t;
    BAD("wgml_gguf_kv", wgml_gguf_kv(NULL, 0, NULL, &v), WGML_ERROR_INVALID_ARGUMENT, NULL, "g");
    BAD("wgml_gguf_kv", wgml_gguf_kv(g, 0, NULL, NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "v");
    BAD("wgml_gguf_kv", wgml_gguf_kv(g, 1, NULL, &v), WGML_ERROR_INVALID_ARGUMENT, NULL, "i");
    BAD("wgml_gguf_array_item", wgml_gguf_array_item(g, 0, 0, &v), WGML_ERROR_INVALID_ARGUMENT, NULL, "not an array");
    BAD("wgml_gguf_array_item", wgml_gguf_array_item(NULL, 0, 0, &v), WGML_ERROR_INVALID_ARGUMENT, NULL, "NULL");
    BAD("wgml_gguf_array_item", wgml_gguf_array_item(g, 5, 0, &v), WGML_ERROR_INVALID_ARGUMENT, NULL, "i");
    BAD("wgml_gguf_tensor_info", wgml_gguf_tensor_info(g, 1, &t), WGML_ERROR_INVALID_ARGUMENT, NULL, "i");
    BAD("wgml_gguf_tensor_info", wgml_gguf_tensor_info(g, 0, NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "info");
    BAD("wgml_gguf_tensor_info", wgml_gguf_tensor_info(NULL, 0, &t), WGML_ERROR_INVALID_ARGUMENT, NULL, "g");
    TH_CHECK(wgml_gguf_kv(g, 0, NULL, &v) == WGML_OK && v.u == 7 && wgml_gguf_tensor_info(g, 0, &t) == WGML_OK &&
             t.offset == 96 && t.nbytes == 8, "the valid file reads back wrong");
    NOOP("wgml_gguf_kv_find", wgml_gguf_kv_find(g, NULL) == -1 && wgml_gguf_kv_find(NULL, "k") == -1);
    NOOP("wgml_gguf_tensor_find", wgml_gguf_tensor_find(g, NULL) == -1 && wgml_gguf_tensor_find(NULL, "w") == -1);
    NOOP("wgml_gguf_tensor_data", wgml_gguf_tensor_data(g, 1) == NULL && wgml_gguf_tensor_data(NULL, 0) == NULL);
    NOOP("wgml_gguf_version", wgml_gguf_version(NULL) == 0 && wgml_gguf_version(g) == 3);
    NOOP("wgml_gguf_alignment", wgml_gguf_alignment(NULL) == 0 && wgml_gguf_alignment(g) == 32);
    NOOP("wgml_gguf_kv_count", wgml_gguf_kv_count(NULL) == 0);
    NOOP("wgml_gguf_tensor_count", wgml_gguf_tensor_count(NULL) == 0);
    NOOP("wgml_ggml_type_name", !strcmp(wgml_ggml_type_name((wgml_ggml_type)16), "?") &&
                                !strcmp(wgml_ggml_type_name((wgml_ggml_type)-1), "?"));
    uint32_t el = 99, by = 99;
    NOOP("wgml_ggml_type_block", !wgml_ggml_type_block((wgml_ggml_type)31, &el, &by) && el == 99 && by == 99);
    wgml_model_config mc;
    wgml_tokenizer *tk = (wgml_tokenizer *)&tk;
    wgml_tokenizer_config tc;
    BAD("wgml_model_config_from_gguf", wgml_model_config_from_gguf(NULL, "x", &mc), WGML_ERROR_INVALID_ARGUMENT, NULL, "g");
    BAD("wgml_model_config_from_gguf", wgml_model_config_from_gguf(g, "x", NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "out");
    BADP("wgml_model_config_from_gguf", "x.gguf", wgml_model_config_from_gguf(g, "x.gguf", &mc), WGML_ERROR_FORMAT,
         "general.architecture");
    BAD("wgml_tokenizer_from_gguf", wgml_tokenizer_from_gguf(NULL, "x", &tk), WGML_ERROR_INVALID_ARGUMENT, NULL, "g");
    BADP("wgml_tokenizer_from_gguf", "x.gguf", wgml_tokenizer_from_gguf(g, "x.gguf", &tk), WGML_ERROR_FORMAT,
         "tokenizer.ggml.model");
    TH_CHECK(tk == NULL, "wgml_tokenizer_from_gguf: *out not NULL after a failure");
    BAD("wgml_tokenizer_config_from_gguf", wgml_tokenizer_config_from_gguf(NULL, "x", &tc), WGML_ERROR_INVALID_ARGUMENT, NULL,
        "g");
    BAD("wgml_tokenizer_config_from_gguf", wgml_tokenizer_config_from_gguf(g, "x", NULL), WGML_ERROR_INVALID_ARGUMENT, NULL,
        "out");
    wgml_gguf_close(g);
    wgml_gguf_close(NULL);
    NOOP("wgml_gguf_close", true);
}

static void test_safetensors_functions(void)
{
    need_other();
    NOOP("wgml_safetensors_dtype_name", !strcmp(wgml_safetensors_dtype_name(WGML_ST_DTYPE_COUNT), "?"));
    NOOP("wgml_safetensors_dtype_name", !strcmp(wgml_safetensors_dtype_name((wgml_safetensors_dtype)-1), "?"));
    NOOP("wgml_safetensors_dtype_bits", wgml_safetensors_dtype_bits(WGML_ST_DTYPE_COUNT) == 0);
    NOOP("wgml_safetensors_dtype_bits", wgml_safetensors_dtype_bits((wgml_safetensors_dtype)-1) == 0);
    wgml_dtype d;
    NOOP("wgml_safetensors_dtype_to_wgml", !wgml_safetensors_dtype_to_wgml(WGML_ST_F64, &d));
    NOOP("wgml_safetensors_dtype_to_wgml", !wgml_safetensors_dtype_to_wgml(WGML_ST_DTYPE_COUNT, &d));
    NOOP("wgml_safetensors_dtype_from_wgml", wgml_safetensors_dtype_from_wgml((wgml_dtype)99) == WGML_ST_DTYPE_COUNT);

    /* malformed files in memory: WGML_ERROR_FORMAT, a message starting with the given name,
       *out NULL */
    static unsigned char buf[4096];
    const float w[2] = { 1, 2 };
    const char *good = "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    const char *fn = "wgml_safetensors_open_memory", *nm = "bad.safetensors";
    wgml_safetensors *st = (wgml_safetensors *)&st;
#define ST_FORMAT(size_, needle) do { \
        st = (wgml_safetensors *)&st; \
        BADP(fn, nm, wgml_safetensors_open_memory(buf, (size_), nm, &st), WGML_ERROR_FORMAT, needle); \
        TH_CHECK(st == NULL, "%s: *out not NULL after a failure", fn); \
    } while (0)
    size_t n = st_blob(buf, good, 0, w, 8);
    ST_FORMAT(7, "bytes");                                                       /* no room for the length */
    n = st_blob(buf, good, 4000, w, 8);
    ST_FORMAT(n, "header");                                                      /* length past the end */
    n = st_blob(buf, good, (uint64_t)WGML_SAFETENSORS_MAX_HEADER + 8, w, 8);
    ST_FORMAT(n, "header");                                                      /* over wgml's limit */
    n = st_blob(buf, "[1, 2, 3]", 0, NULL, 0);
    ST_FORMAT(n, "header");                                                      /* not an object */
    n = st_blob(buf, "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 0, w, 8);
    ST_FORMAT(n, "data_offsets");                                                /* reversed */
    n = st_blob(buf, "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 0, w, 8);
    ST_FORMAT(n, "w");                                                           /* 3 floats in 8 bytes */
    n = st_blob(buf, good, 0, w, 8);
    buf[n] = 0;
    ST_FORMAT(n + 1, "bytes");                                                   /* a trailing byte */
    n = st_blob(buf, "{\"w\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 0, w, 8);
    ST_FORMAT(n, "dtype");
    n = st_blob(buf, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,2],\"data_offsets\":[0,8]}}", 0, w, 8);
    ST_FORMAT(n, "dimensions");
    n = st_blob(buf, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                     "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 0, w, 8);
    ST_FORMAT(n, "w");                                                           /* a key twice */
#undef ST_FORMAT
    n = st_blob(buf, good, 0, w, 8);
    st = (wgml_safetensors *)&st;
    BAD(fn, wgml_safetensors_open_memory(NULL, n, nm, &st), WGML_ERROR_INVALID_ARGUMENT, NULL, "data");
    TH_CHECK(st == NULL, "%s: *out not NULL after a failure", fn);
    BAD(fn, wgml_safetensors_open_memory(buf, n, nm, NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "out");
    fn = "wgml_safetensors_open";
    BAD(fn, wgml_safetensors_open(NULL, &st), WGML_ERROR_INVALID_ARGUMENT, NULL, "path");
    BAD(fn, wgml_safetensors_open("x.safetensors", NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "out");
    st = (wgml_safetensors *)&st;
    BADP(fn, "/nonexistent/wgml/x.safetensors", wgml_safetensors_open("/nonexistent/wgml/x.safetensors", &st), WGML_ERROR_IO,
         "open");
    TH_CHECK(st == NULL, "%s: *out not NULL after a failure", fn);
    BADP(fn, "/", wgml_safetensors_open("/", &st), WGML_ERROR_IO, "file");   /* a folder */

    /* accessors of a valid file */
    TH_EXPECT(wgml_safetensors_open_memory(buf, n, "good.safetensors", &st), WGML_OK);
    if (!st) return;
    wgml_file_tensor info;
    const char *key = NULL, *value = NULL;
    BAD("wgml_safetensors_info", wgml_safetensors_info(NULL, 0, &info), WGML_ERROR_INVALID_ARGUMENT, NULL, "st");
    BAD("wgml_safetensors_info", wgml_safetensors_info(st, 0, NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "info");
    BAD("wgml_safetensors_info", wgml_safetensors_info(st, 1, &info), WGML_ERROR_INVALID_ARGUMENT, NULL, "i");
    BAD("wgml_safetensors_info", wgml_safetensors_info(st, SIZE_MAX, &info), WGML_ERROR_INVALID_ARGUMENT, NULL, "i");
    BAD("wgml_safetensors_metadata_item", wgml_safetensors_metadata_item(st, 0, &key, &value), WGML_ERROR_INVALID_ARGUMENT,
        NULL, "i");
    BAD("wgml_safetensors_metadata_item", wgml_safetensors_metadata_item(NULL, 0, &key, &value), WGML_ERROR_INVALID_ARGUMENT,
        NULL, "st");
    BAD("wgml_safetensors_metadata_item", wgml_safetensors_metadata_item(st, 0, NULL, &value), WGML_ERROR_INVALID_ARGUMENT,
        NULL, "key");
    BAD("wgml_safetensors_metadata_item", wgml_safetensors_metadata_item(st, 0, &key, NULL), WGML_ERROR_INVALID_ARGUMENT,
        NULL, "value");
    NOOP("wgml_safetensors_find", wgml_safetensors_find(st, "v") == -1);
    NOOP("wgml_safetensors_find", wgml_safetensors_find(st, "") == -1);
    NOOP("wgml_safetensors_data", wgml_safetensors_data(st, 1) == NULL);
    NOOP("wgml_safetensors_data", wgml_safetensors_data(st, SIZE_MAX) == NULL);
    NOOP("wgml_safetensors_metadata", wgml_safetensors_metadata(st, "format") == NULL);
    TH_CHECK(wgml_safetensors_count(st) == 1 && wgml_safetensors_find(st, "w") == 0, "the valid file reads back wrong");
    wgml_safetensors_close(st);
    wgml_safetensors_close(NULL);
    NOOP("wgml_safetensors_close", true);

    /* the writer: refused entries leave no file behind, not even a temporary one */
    char dir[] = "/tmp/wgml_bad_inputs_XXXXXX";
    TH_CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char path[256];
    snprintf(path, sizeof path, "%s/out.safetensors", dir);
    fn = "wgml_safetensors_write";
    wgml_safetensors_entry e[2] = { { .name = "w", .dtype = WGML_ST_F32, .ndim = 1, .shape = { 2 }, .data = w },
                                    { .name = "v", .dtype = WGML_ST_F32, .ndim = 1, .shape = { 2 }, .data = w } };
    wgml_safetensors_entry b[2];
#define WRITE_BAD(mutate, count, meta, needle) do { \
        memcpy(b, e, sizeof b); \
        mutate; \
        BAD(fn, wgml_safetensors_write(path, b, count, meta), WGML_ERROR_INVALID_ARGUMENT, NULL, needle); \
    } while (0)
    BAD(fn, wgml_safetensors_write(NULL, e, 1, NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "path");
    BAD(fn, wgml_safetensors_write(path, NULL, 1, NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "entries");
    WRITE_BAD(b[0].name = NULL, 2, NULL, "entries[0].name");
    WRITE_BAD(b[1].name = "__metadata__", 2, NULL, "entries[1].name");
    WRITE_BAD(b[1].name = "w", 2, NULL, "entries[1].name");
    WRITE_BAD(b[0].name = "\xff\xfe", 1, NULL, "entries[0].name");
    WRITE_BAD(b[0].dtype = WGML_ST_DTYPE_COUNT, 1, NULL, "entries[0].dtype");
    WRITE_BAD(b[0].ndim = WGML_SAFETENSORS_MAX_DIMS + 1, 1, NULL, "entries[0].ndim");
    WRITE_BAD(b[1].data = NULL, 2, NULL, "entries[1].data");
    WRITE_BAD((b[0].dtype = WGML_ST_F4, b[0].shape[0] = 3), 1, NULL, "entries[0]");
    WRITE_BAD((void)0, 1, "[1]", "metadata_json");
    WRITE_BAD((void)0, 1, "{\"format\": 1}", "metadata_json");
#undef WRITE_BAD
    TH_CHECK(access(path, F_OK) != 0 && dir_entries(dir) == 0, "refused writes left %d files in %s", dir_entries(dir), dir);
    BADP(fn, "/nonexistent/wgml/out.safetensors", wgml_safetensors_write("/nonexistent/wgml/out.safetensors", e, 1, NULL),
         WGML_ERROR_IO, "write");
    TH_EXPECT(wgml_safetensors_write(path, e, 2, "{\"format\": \"pt\"}"), WGML_OK);

    /* checkpoints over that folder */
    wgml_checkpoint *ck = (wgml_checkpoint *)&ck;
    fn = "wgml_checkpoint_open";
    BAD(fn, wgml_checkpoint_open(NULL, &ck), WGML_ERROR_INVALID_ARGUMENT, NULL, "path");
    TH_CHECK(ck == NULL, "%s: *out not NULL after a failure", fn);
    BAD(fn, wgml_checkpoint_open(dir, NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "out");
    char p2[300], index[300];
    snprintf(p2, sizeof p2, "%s/none", dir);
    BADP(fn, p2, wgml_checkpoint_open(p2, &ck), WGML_ERROR_IO, "open");
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir);
    const char *escape = "{\"weight_map\": {\"w\": \"../out.safetensors\"}}";
    TH_CHECK(write_file(index, escape, strlen(escape)), "writing %s", index);
    BADP(fn, index, wgml_checkpoint_open(dir, &ck), WGML_ERROR_FORMAT, "w");           /* a shard outside the folder */
    const char *missing = "{\"weight_map\": {\"w\": \"out.safetensors\", \"u\": \"out.safetensors\"}}";
    TH_CHECK(write_file(index, missing, strlen(missing)), "writing %s", index);
    BADP(fn, index, wgml_checkpoint_open(dir, &ck), WGML_ERROR_FORMAT, "u");           /* a tensor its shard lacks */
    const char *good_index = "{\"weight_map\": {\"w\": \"out.safetensors\", \"v\": \"out.safetensors\"}}";
    TH_CHECK(write_file(index, good_index, strlen(good_index)), "writing %s", index);
    TH_EXPECT(wgml_checkpoint_open(dir, &ck), WGML_OK);
    if (ck) {
        size_t cnt = wgml_checkpoint_count(ck);
        BAD("wgml_checkpoint_info", wgml_checkpoint_info(NULL, 0, &info), WGML_ERROR_INVALID_ARGUMENT, NULL, "ck");
        BAD("wgml_checkpoint_info", wgml_checkpoint_info(ck, 0, NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "info");
        BAD("wgml_checkpoint_info", wgml_checkpoint_info(ck, cnt, &info), WGML_ERROR_INVALID_ARGUMENT, NULL, "i");
        NOOP("wgml_checkpoint_find", wgml_checkpoint_find(ck, "u") == -1);
        NOOP("wgml_checkpoint_data", wgml_checkpoint_data(ck, cnt) == NULL);
        NOOP("wgml_checkpoint_shard", wgml_checkpoint_shard(ck, wgml_checkpoint_shard_count(ck)) == NULL);
        TH_CHECK(cnt == 2 && wgml_checkpoint_find(ck, "v") >= 0, "the checkpoint reads back wrong");
        wgml_checkpoint_close(ck);
    }
    wgml_checkpoint_close(NULL);
    NOOP("wgml_checkpoint_close", true);
    unlink(index);
    unlink(path);
    rmdir(dir);
}

static void test_config_functions(void)
{
    need_other();
    const char *fn = "wgml_model_config_parse", *nm = "cfg.json";
    wgml_model_config cfg;
    const char *good = "{\"vocab_size\": 64, \"hidden_size\": 32, \"intermediate_size\": 64, \"num_hidden_layers\": 2,"
                       " \"num_attention_heads\": 4, \"num_key_value_heads\": 2}";
    static const struct { const char *json, *needle; } bad[] = {
        { "{\"vocab_size\": 64", "JSON" },
        { "[]", "object" },
        { "{\"vocab_size\": \"64\", \"hidden_size\": 32, \"intermediate_size\": 64, \"num_hidden_layers\": 2,"
          " \"num_attention_heads\": 4}", "vocab_size" },
        { "{\"vocab_size\": 64, \"intermediate_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 4}",
          "hidden_size" },
        { "{\"vocab_size\": 64, \"hidden_size\": 32, \"intermediate_size\": 64, \"num_hidden_layers\": 2,"
          " \"num_attention_heads\": 4, \"num_key_value_heads\": 3}", "num_key_value_heads" },   /* heads % kv_heads */
        { "{\"vocab_size\": 64, \"hidden_size\": 30, \"intermediate_size\": 64, \"num_hidden_layers\": 2,"
          " \"num_attention_heads\": 4}", "hidden_size" },                                    /* not heads x head_dim */
        { "{\"vocab_size\": 64, \"hidden_size\": 32, \"intermediate_size\": 64, \"num_hidden_layers\": 2,"
          " \"num_attention_heads\": 4, \"head_dim\": 7}", "head_dim" },                      /* odd */
        { "{\"vocab_size\": 64, \"hidden_size\": 32, \"intermediate_size\": 64, \"num_hidden_layers\": 2,"
          " \"num_attention_heads\": 4, \"head_dim\": 2048}", "head_dim" },                   /* over 1024 */
        { "{\"vocab_size\": 64, \"hidden_size\": 32, \"intermediate_size\": 64, \"num_hidden_layers\": 2,"
          " \"num_attention_heads\": 4, \"hidden_act\": \"gelu\"}", "hidden_act" },
        { "{\"vocab_size\": 64, \"hidden_size\": 32, \"intermediate_size\": 64, \"num_hidden_layers\": 2,"
          " \"num_attention_heads\": 4, \"rms_norm_eps\": 0}", "rms_norm_eps" },
        { "{\"vocab_size\": 64, \"hidden_size\": 32, \"intermediate_size\": 64, \"num_hidden_layers\": 2,"
          " \"num_attention_heads\": 4, \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 2}}", "rope_scaling" },
        { "{\"vocab_size\": 64, \"hidden_size\": 32, \"intermediate_size\": 64, \"num_hidden_layers\": 2,"
          " \"num_attention_heads\": 4, \"eos_token_id\": 64}", "eos_token_id" },
        { "{\"vocab_size\": 0, \"hidden_size\": 32, \"intermediate_size\": 64, \"num_hidden_layers\": 2,"
          " \"num_attention_heads\": 4}", "vocab_size" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&cfg, 0xAB, sizeof cfg);
        BADP(fn, nm, wgml_model_config_parse(bad[i].json, strlen(bad[i].json), nm, &cfg), WGML_ERROR_FORMAT, bad[i].needle);
        static const wgml_model_config zero;
        TH_CHECK(memcmp(&cfg, &zero, sizeof cfg) == 0, "%s: *out not zeroed after a failure (%s)", fn, bad[i].needle);
    }
    BAD(fn, wgml_model_config_parse(NULL, 4, nm, &cfg), WGML_ERROR_INVALID_ARGUMENT, NULL, "json");
    BAD(fn, wgml_model_config_parse(good, strlen(good), nm, NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "out");
    TH_EXPECT(wgml_model_config_parse(good, strlen(good), nm, &cfg), WGML_OK);
    TH_CHECK(cfg.num_key_value_heads == 2 && cfg.head_dim == 8, "the valid config reads back wrong");
    fn = "wgml_model_config_load";
    BAD(fn, wgml_model_config_load(NULL, &cfg), WGML_ERROR_INVALID_ARGUMENT, NULL, "path");
    BAD(fn, wgml_model_config_load("config.json", NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "out");
    BADP(fn, "/nonexistent/wgml/config.json", wgml_model_config_load("/nonexistent/wgml/config.json", &cfg), WGML_ERROR_IO,
         "open");

    /* the same rules on a struct: each field out of its range, alone */
    fn = "wgml_model_config_check";
    wgml_model_config ok;
    TH_EXPECT(wgml_model_config_parse(good, strlen(good), nm, &ok), WGML_OK);
    TH_EXPECT(wgml_model_config_check(&ok), WGML_OK);
    BAD(fn, wgml_model_config_check(NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "cfg");
    static const struct { int field; double value; const char *needle; } rules[] = {
        { 0, 0, "vocab_size" }, { 1, 65537, "hidden_size" }, { 2, 0, "intermediate_size" }, { 3, 1025, "num_hidden_layers" },
        { 4, 1025, "num_attention_heads" }, { 5, 3, "num_key_value_heads" }, { 6, 7, "head_dim" }, { 6, 2048, "head_dim" },
        { 7, 16777217, "max_position_embeddings" }, { 8, 0, "rms_norm_eps" }, { 8, NAN, "rms_norm_eps" },
        { 9, INFINITY, "rope_theta" }, { 9, 1e16, "rope_theta" }, { 9, -1, "rope_theta" }, { 10, 64, "bos_token_id" },
        { 11, 64, "eos_token_ids" }, { 12, 7, "quantization" }, { 13, 0.5, "factor" }, { 14, 0, "model_type" },
    };
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        cfg = ok;
        double v = rules[i].value;
        switch (rules[i].field) {
        case 0: cfg.vocab_size = (uint32_t)v; break;
        case 1: cfg.hidden_size = (uint32_t)v; break;
        case 2: cfg.intermediate_size = (uint32_t)v; break;
        case 3: cfg.num_hidden_layers = (uint32_t)v; break;
        case 4: cfg.num_attention_heads = (uint32_t)v; break;
        case 5: cfg.num_key_value_heads = (uint32_t)v; break;
        case 6: cfg.head_dim = (uint32_t)v; break;
        case 7: cfg.max_position_embeddings = (uint32_t)v; break;
        case 8: cfg.rms_norm_eps = v; break;
        case 9: cfg.rope_theta = v; break;
        case 10: cfg.bos_token_id = (int64_t)v; break;
        case 11: cfg.num_eos_token_ids = 1; cfg.eos_token_ids[0] = (uint32_t)v; break;
        case 12: cfg.quantization.bits = (uint32_t)v; cfg.quantization.group_size = 64; break;
        case 13: cfg.rope_scaling.type = WGML_ROPE_SCALING_LINEAR; cfg.rope_scaling.factor = v; break;
        default: memset(cfg.model_type, 'x', sizeof cfg.model_type); break;   /* no NUL */
        }
        BAD(fn, wgml_model_config_check(&cfg), WGML_ERROR_INVALID_ARGUMENT, NULL, rules[i].needle);
    }
}

static void test_tokenizer_functions(void)
{
    need_other();
    wgml_tokenizer *tok = (wgml_tokenizer *)&tok;
    const char *fn = "wgml_tokenizer_load";
    BAD(fn, wgml_tokenizer_load(NULL, &tok), WGML_ERROR_INVALID_ARGUMENT, NULL, "path");
    TH_CHECK(tok == NULL, "%s: *out not NULL after a failure", fn);
    BAD(fn, wgml_tokenizer_load("tokenizer.json", NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "out");
    BADP(fn, "/nonexistent/wgml/tokenizer.json", wgml_tokenizer_load("/nonexistent/wgml/tokenizer.json", &tok), WGML_ERROR_IO,
         "open");
    fn = "wgml_tokenizer_parse";
    const char *nm = "tok.json";
    BAD(fn, wgml_tokenizer_parse(NULL, 3, nm, &tok), WGML_ERROR_INVALID_ARGUMENT, NULL, "json");
    BAD(fn, wgml_tokenizer_parse("{}", 2, nm, NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "out");
    tok = (wgml_tokenizer *)&tok;
    BADP(fn, nm, wgml_tokenizer_parse("{\"model\": ", 10, nm, &tok), WGML_ERROR_FORMAT, "JSON");
    TH_CHECK(tok == NULL, "%s: *out not NULL after a failure", fn);
    const char *wordpiece = "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}, \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}";
    BADP(fn, nm, wgml_tokenizer_parse(wordpiece, strlen(wordpiece), nm, &tok), WGML_ERROR_FORMAT, "model.type");
    BAD("wgml_tokenizer_bytes", wgml_tokenizer_bytes(NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "out");

    TH_EXPECT(wgml_tokenizer_bytes(&tok), WGML_OK);
    if (!tok) return;
    uint32_t ids[8] = { 0 };
    size_t n = 99;
    const char *encs[2] = { "wgml_tokenizer_encode", "wgml_tokenizer_encode_ordinary" };
    wgml_status (*enc[2])(const wgml_tokenizer *, const char *, size_t, uint32_t *, size_t, size_t *) = {
        wgml_tokenizer_encode, wgml_tokenizer_encode_ordinary };
    for (int k = 0; k < 2; k++) {
        BAD(encs[k], enc[k](NULL, "abc", 3, ids, 8, &n), WGML_ERROR_INVALID_ARGUMENT, NULL, "tok");
        BAD(encs[k], enc[k](tok, NULL, 3, ids, 8, &n), WGML_ERROR_INVALID_ARGUMENT, NULL, "text");
        BAD(encs[k], enc[k](tok, "abc", 3, NULL, 8, &n), WGML_ERROR_INVALID_ARGUMENT, NULL, "ids");
        BAD(encs[k], enc[k](tok, "abc", 3, ids, 8, NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "n");
        BAD(encs[k], enc[k](tok, "abc", (size_t)1 << 31, ids, 8, &n), WGML_ERROR_INVALID_ARGUMENT, NULL, "len");
        BAD(encs[k], enc[k](tok, "abc", 3, ids, 2, &n), WGML_ERROR_SHAPE, NULL, "cap");
        TH_CHECK(n == 3 && ids[0] == 'a' && ids[1] == 'b', "%s: over cap: *n = %zu (want 3), ids %u %u", encs[k], n, ids[0], ids[1]);
    }
    char out[8];
    size_t len = 99;
    const uint32_t good_ids[3] = { 'x', 'y', 'z' }, bad_ids[3] = { 'x', 256, 'z' };
    typedef wgml_status (*dec_fn)(const wgml_tokenizer *, const uint32_t *, size_t, char *, size_t, size_t *);
    const dec_fn dec[2] = { wgml_tokenizer_decode, wgml_tokenizer_decode_continuation };
    const char *decs[2] = { "wgml_tokenizer_decode", "wgml_tokenizer_decode_continuation" };
    for (int k = 0; k < 2; k++) {
        fn = decs[k];
        BAD(fn, dec[k](NULL, good_ids, 3, out, 8, &len), WGML_ERROR_INVALID_ARGUMENT, NULL, "tok");
        BAD(fn, dec[k](tok, NULL, 3, out, 8, &len), WGML_ERROR_INVALID_ARGUMENT, NULL, "ids");
        BAD(fn, dec[k](tok, good_ids, 3, NULL, 8, &len), WGML_ERROR_INVALID_ARGUMENT, NULL, "out");
        BAD(fn, dec[k](tok, good_ids, 3, out, 8, NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "len");
        BAD(fn, dec[k](tok, bad_ids, 3, out, 8, &len), WGML_ERROR_INVALID_ARGUMENT, NULL, "ids[1]");
        BAD(fn, dec[k](tok, good_ids, 3, out, 2, &len), WGML_ERROR_SHAPE, NULL, "cap");
        TH_CHECK(len == 3 && out[0] == 'x' && out[1] == 'y', "%s: over cap: *len = %zu (want 3)", fn, len);
    }
    NOOP("wgml_tokenizer_vocab_size", wgml_tokenizer_vocab_size(NULL) == 0);
    size_t npre = 9, nsuf = 9;
    wgml_tokenizer_specials(NULL, NULL, &npre, NULL, &nsuf);
    NOOP("wgml_tokenizer_specials", npre == 0 && nsuf == 0);
    /* the sampler */
    wgml_sampler *smp = (wgml_sampler *)&smp;
    fn = "wgml_sampler_create";
    BAD(fn, wgml_sampler_create(NULL, 4, 1, NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "out");
    BAD(fn, wgml_sampler_create(NULL, 0, 1, &smp), WGML_ERROR_INVALID_ARGUMENT, NULL, "vocab");
    BAD(fn, wgml_sampler_create(&(wgml_sampling){ .top_p = 2 }, 4, 1, &smp), WGML_ERROR_INVALID_ARGUMENT, NULL, "top_p");
    TH_CHECK(smp == NULL, "%s: *out not NULL after a failure", fn);
    TH_EXPECT(wgml_sampler_create(NULL, 4, 1, &smp), WGML_OK);
    fn = "wgml_sampler_next";
    const float four[4] = { 0, 1, 2, 3 };
    const uint32_t bad_hist[1] = { 4 };
    uint32_t tok_id = 0;
    BAD(fn, wgml_sampler_next(NULL, four, NULL, 0, &tok_id), WGML_ERROR_INVALID_ARGUMENT, NULL, "s");
    BAD(fn, wgml_sampler_next(smp, NULL, NULL, 0, &tok_id), WGML_ERROR_INVALID_ARGUMENT, NULL, "logits");
    BAD(fn, wgml_sampler_next(smp, four, NULL, 0, NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "token");
    BAD(fn, wgml_sampler_next(smp, four, bad_hist, 1, &tok_id), WGML_ERROR_INVALID_ARGUMENT, NULL, "history[0]");
    fn = "wgml_sampler_next_gpu";
    {
        wgml_tensor *lg = th_tensor(WGML_F32, four, TH_SHAPE(1, 4)), *lu = th_tensor(WGML_U32, four, TH_SHAPE(1, 4));
        wgml_tensor *l3 = th_tensor(WGML_F32, four, TH_SHAPE(3));
        const uint32_t *hp[1] = { bad_hist };
        size_t one = 1;
        BAD(fn, wgml_sampler_next_gpu(NULL, &smp, 1, lg, NULL, NULL, &tok_id), WGML_ERROR_INVALID_ARGUMENT, NULL, "engine");
        BAD(fn, wgml_sampler_next_gpu(th_eng, NULL, 1, lg, NULL, NULL, &tok_id), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "samplers");
        BAD(fn, wgml_sampler_next_gpu(th_eng, &smp, 1, lg, NULL, NULL, NULL), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "tokens");
        BAD(fn, wgml_sampler_next_gpu(th_eng, &smp, 0, lg, NULL, NULL, &tok_id), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "n");
        BAD(fn, wgml_sampler_next_gpu(th_eng, &smp, 1, NULL, NULL, NULL, &tok_id), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "logits");
        BAD(fn, wgml_sampler_next_gpu(th_eng, &smp, 1, lu, NULL, NULL, &tok_id), WGML_ERROR_DTYPE, th_ctx, "logits");
        BAD(fn, wgml_sampler_next_gpu(th_eng, &smp, 1, l3, NULL, NULL, &tok_id), WGML_ERROR_SHAPE, th_ctx, "n * vocab");
        BAD(fn, wgml_sampler_next_gpu(th_eng, &smp, 1, lg, hp, &one, &tok_id), WGML_ERROR_INVALID_ARGUMENT, th_ctx,
            "histories[0][0]");
        wgml_tensor_release(lg);
        wgml_tensor_release(lu);
        wgml_tensor_release(l3);
    }
    wgml_sampler_free(smp);
    wgml_sampler_free(NULL);
    NOOP("wgml_sampler_free", true);
    NOOP("wgml_tokenizer_token_id", wgml_tokenizer_token_id(tok, "<|no such token|>") == -1);
    wgml_tokenizer_free(tok);
    wgml_tokenizer_free(NULL);
    NOOP("wgml_tokenizer_free", true);
}

static void test_chat_functions(void)
{
    need_other();
    const char *fn = "wgml_chat_render";
    wgml_chat *c = (wgml_chat *)&c;
    const wgml_chat_message m[] = { { "user", "hi" } }, tool[] = { { "tool", "x" } };
    BAD(fn, wgml_chat_render(WGML_CHAT_CHATML, m, 1, NULL, NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "out");
    BAD(fn, wgml_chat_render(WGML_CHAT_CHATML, NULL, 1, NULL, &c), WGML_ERROR_INVALID_ARGUMENT, NULL, "messages");
    TH_CHECK(c == NULL, "%s: *out not NULL after a failure", fn);
    BAD(fn, wgml_chat_render(WGML_CHAT_CHATML, tool, 1, NULL, &c), WGML_ERROR_INVALID_ARGUMENT, NULL, "role");
    BAD(fn, wgml_chat_render(WGML_CHAT_UNKNOWN, m, 1, NULL, &c), WGML_ERROR_INVALID_ARGUMENT, NULL, "wgml_chat_format");
    BAD(fn, wgml_chat_render(WGML_CHAT_LLAMA3, m, 1, NULL, &c), WGML_ERROR_INVALID_ARGUMENT, NULL, "bos_token");
    TH_EXPECT(wgml_chat_render(WGML_CHAT_CHATML, m, 1, NULL, &c), WGML_OK);
    size_t len = 99;
    bool a = true;
    NOOP("wgml_chat_text", strcmp(wgml_chat_text(NULL, &len), "") == 0 && len == 0);
    NOOP("wgml_chat_segment_count", wgml_chat_segment_count(NULL) == 0);
    NOOP("wgml_chat_segment", wgml_chat_segment(c, 99, &len, &a) == NULL && len == 0 && !a);
    wgml_chat_free(c);
    wgml_chat_free(NULL);
    NOOP("wgml_chat_free", true);
    wgml_chat_format f;
    fn = "wgml_chat_format_detect";
    BAD(fn, wgml_chat_format_detect(NULL, &f), WGML_ERROR_INVALID_ARGUMENT, NULL, "template_text");
    BAD(fn, wgml_chat_format_detect("{{ x }}", NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "out");
    BAD(fn, wgml_chat_format_detect("{{ x }}", &f), WGML_ERROR_UNSUPPORTED, NULL, "template");
    fn = "wgml_chat_format_from_name";
    BAD(fn, wgml_chat_format_from_name(NULL, &f), WGML_ERROR_INVALID_ARGUMENT, NULL, "name");
    BAD(fn, wgml_chat_format_from_name("alpaca", &f), WGML_ERROR_UNSUPPORTED, NULL, "alpaca");
    NOOP("wgml_chat_format_name", strcmp(wgml_chat_format_name((wgml_chat_format)99), "unknown") == 0);
    fn = "wgml_tokenizer_config_load";
    wgml_tokenizer_config cfg;
    BAD(fn, wgml_tokenizer_config_load(NULL, &cfg), WGML_ERROR_INVALID_ARGUMENT, NULL, "folder");
    BAD(fn, wgml_tokenizer_config_load("/tmp", NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "out");
    wgml_tokenizer_config_clear(NULL);
    NOOP("wgml_tokenizer_config_clear", true);
}

static wgml_model_config tiny_config(void);

static void test_lora_functions(void)
{
    need_other();
    wgml_model_config good = tiny_config();
    wgml_model *m = NULL;
    TH_EXPECT(wgml_model_create(th_eng, &good, &m), WGML_OK);
    const char *fn = "wgml_lora_create";
    wgml_lora *l = (wgml_lora *)&l;
    BAD(fn, wgml_lora_create(NULL, NULL, 0, &l), WGML_ERROR_INVALID_ARGUMENT, NULL, "m");
    TH_CHECK(l == NULL, "%s: *out not NULL after a failure", fn);
    BAD(fn, wgml_lora_create(m, NULL, 0, NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "out");
    BAD(fn, wgml_lora_create(m, &(wgml_lora_desc){ .rank = 5000 }, 0, &l), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "rank");
    BAD(fn, wgml_lora_create(m, &(wgml_lora_desc){ .alpha = NAN }, 0, &l), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "alpha");
    BAD(fn, wgml_lora_create(m, &(wgml_lora_desc){ .targets = 0x100 }, 0, &l), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "targets");
    BAD(fn, wgml_lora_create(m, &(wgml_lora_desc){ .dropout = 2 }, 0, &l), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "dropout");
    BAD(fn, wgml_lora_create(m, &(wgml_lora_desc){ .dropout = 1.0f }, 0, &l), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "dropout");
    TH_EXPECT(wgml_lora_create(m, &(wgml_lora_desc){ .rank = 2 }, 0, &l), WGML_OK);
    NOOP("wgml_lora_get_desc", wgml_lora_get_desc(NULL) == NULL);
    NOOP("wgml_lora_scale", wgml_lora_scale(NULL) == 0);
    NOOP("wgml_lora_param_count", wgml_lora_param_count(NULL) == 0);
    NOOP("wgml_lora_param", wgml_lora_param(l, 1u << 20, NULL) == NULL);
    NOOP("wgml_lora_numel", wgml_lora_numel(NULL) == 0);
    BAD("wgml_lora_save", wgml_lora_save(NULL, "/tmp", NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "l");
    BAD("wgml_lora_save", wgml_lora_save(l, NULL, NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "dir");
    wgml_lora *l2 = (wgml_lora *)&l2;
    BAD("wgml_lora_load", wgml_lora_load(NULL, "/tmp", &l2), WGML_ERROR_INVALID_ARGUMENT, NULL, "m");
    BAD("wgml_lora_load", wgml_lora_load(m, "/nonexistent/wgml", &l2), WGML_ERROR_IO, th_ctx, "adapter_config.json");
    BAD("wgml_lora_merge", wgml_lora_merge(NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "l");
    NOOP("wgml_trainer_lora_grad", wgml_trainer_lora_grad(NULL, 0) == NULL);
    wgml_lora_destroy(NULL);
    NOOP("wgml_lora_destroy", true);
    TH_EXPECT(wgml_lora_merge(l), WGML_OK);   /* frees it */
    wgml_model_destroy(m);
}

static void test_data_functions(void)
{
    need_other();
    wgml_tokenizer *tok = NULL;
    TH_EXPECT(wgml_tokenizer_bytes(&tok), WGML_OK);
    char path[] = "/tmp/wgml_bad_data_XXXXXX";
    int fd = mkstemp(path);
    TH_CHECK(fd >= 0, "mkstemp");
    if (fd >= 0) {
        TH_CHECK(write(fd, "some text to learn from", 23) == 23, "write");
        close(fd);
    }
    const char *fn = "wgml_dataset_load";
    wgml_dataset *d = (wgml_dataset *)&d;
    BAD(fn, wgml_dataset_load(NULL, tok, NULL, &d), WGML_ERROR_INVALID_ARGUMENT, NULL, "path");
    TH_CHECK(d == NULL, "%s: *out not NULL after a failure", fn);
    BAD(fn, wgml_dataset_load(path, NULL, NULL, &d), WGML_ERROR_INVALID_ARGUMENT, NULL, "tok");
    BAD(fn, wgml_dataset_load(path, tok, NULL, NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "out");
    BAD(fn, wgml_dataset_load(path, tok, &(wgml_dataset_options){ .append_eos = true, .eos_id = 300 }, &d),
        WGML_ERROR_INVALID_ARGUMENT, NULL, "eos_id");
    BADP(fn, "/nonexistent/wgml/data.txt", wgml_dataset_load("/nonexistent/wgml/data.txt", tok, NULL, &d), WGML_ERROR_IO, "open");
    TH_EXPECT(wgml_dataset_load(path, tok, NULL, &d), WGML_OK);
    NOOP("wgml_dataset_kind", wgml_dataset_kind(NULL) == 0);
    NOOP("wgml_dataset_examples", wgml_dataset_examples(NULL) == 0);
    NOOP("wgml_dataset_tokens", wgml_dataset_tokens(NULL) == 0);
    NOOP("wgml_dataset_trained_tokens", wgml_dataset_trained_tokens(NULL) == 0);
    size_t len = 9;
    const uint8_t *tr = (const uint8_t *)"x";
    NOOP("wgml_dataset_example", wgml_dataset_example(d, 1, &tr, &len) == NULL && len == 0 && tr == NULL);
    fn = "wgml_batcher_create";
    wgml_batcher *b = (wgml_batcher *)&b;
    wgml_batcher_options o = { .batch = 2, .seq_len = 4, .packed = true };
    BAD(fn, wgml_batcher_create(NULL, &o, &b), WGML_ERROR_INVALID_ARGUMENT, NULL, "d");
    TH_CHECK(b == NULL, "%s: *out not NULL after a failure", fn);
    BAD(fn, wgml_batcher_create(d, NULL, &b), WGML_ERROR_INVALID_ARGUMENT, NULL, "opts");
    BAD(fn, wgml_batcher_create(d, &o, NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "out");
    BAD(fn, wgml_batcher_create(d, &(wgml_batcher_options){ .batch = 2 }, &b), WGML_ERROR_INVALID_ARGUMENT, NULL, "seq_len");
    BAD(fn, wgml_batcher_create(d, &(wgml_batcher_options){ .batch = 2, .seq_len = 4, .part_begin = 0.5, .part_end = 0.2 }, &b),
        WGML_ERROR_INVALID_ARGUMENT, NULL, "part");
    BAD(fn, wgml_batcher_create(d, &(wgml_batcher_options){ .batch = 2, .seq_len = 40, .packed = true }, &b), WGML_ERROR_SHAPE, NULL,
        "seq_len");
    TH_EXPECT(wgml_batcher_create(d, &o, &b), WGML_OK);
    uint32_t ids[8], tg[8];
    wgml_batcher_state st;
    BAD("wgml_batcher_next", wgml_batcher_next(NULL, ids, tg), WGML_ERROR_INVALID_ARGUMENT, NULL, "b");
    BAD("wgml_batcher_next", wgml_batcher_next(b, NULL, tg), WGML_ERROR_INVALID_ARGUMENT, NULL, "ids");
    BAD("wgml_batcher_get_state", wgml_batcher_get_state(b, NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "st");
    BAD("wgml_batcher_set_state", wgml_batcher_set_state(NULL, &st), WGML_ERROR_INVALID_ARGUMENT, NULL, "b");
    wgml_batcher_stats bst;
    BAD("wgml_batcher_get_stats", wgml_batcher_get_stats(NULL, &bst), WGML_ERROR_INVALID_ARGUMENT, NULL, "b");
    BAD("wgml_batcher_get_stats", wgml_batcher_get_stats(b, NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "st");
    wgml_batcher_free(b);
    wgml_batcher_free(NULL);
    NOOP("wgml_batcher_free", true);
    wgml_dataset_free(d);
    wgml_dataset_free(NULL);
    NOOP("wgml_dataset_free", true);
    wgml_tokenizer_free(tok);
    unlink(path);
}

/* ---- models, trainers, KV caches -------------------------------------------------------- */

/* A tiny Llama: vocab 16, hidden 8, 2 heads over 1 kv head of head_dim 4, one layer. */
static wgml_model_config tiny_config(void)
{
    return (wgml_model_config){ .vocab_size = 16, .hidden_size = 8, .intermediate_size = 16, .num_hidden_layers = 1,
                                .num_attention_heads = 2, .num_key_value_heads = 1, .max_position_embeddings = 64,
                                .rms_norm_eps = 1e-5, .rope_theta = 10000, .bos_token_id = -1 };
}

static void test_model_functions(void)
{
    need_other();
    const char *fn = "wgml_model_create";
    wgml_model_config good = tiny_config(), c;
    wgml_model *m = (wgml_model *)&m;
    BAD(fn, wgml_model_create(NULL, &good, &m), WGML_ERROR_INVALID_ARGUMENT, NULL, "engine");
    TH_CHECK(m == NULL, "%s: *out not NULL after a failure", fn);
    BAD(fn, wgml_model_create(th_eng, NULL, &m), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "cfg");
    BAD(fn, wgml_model_create(th_eng, &good, NULL), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "out");
#define CFG_BAD(mutate, want, needle) do { c = good; mutate; m = (wgml_model *)&m; \
        BAD(fn, wgml_model_create(th_eng, &c, &m), want, th_ctx, needle); \
        TH_CHECK(m == NULL, "%s: *out not NULL after a failure", fn); } while (0)
    CFG_BAD(c.vocab_size = 0, WGML_ERROR_INVALID_ARGUMENT, "vocab_size");
    CFG_BAD(c.hidden_size = 0, WGML_ERROR_INVALID_ARGUMENT, "hidden_size");
    CFG_BAD(c.intermediate_size = 0, WGML_ERROR_INVALID_ARGUMENT, "intermediate_size");
    CFG_BAD(c.num_hidden_layers = 0, WGML_ERROR_INVALID_ARGUMENT, "num_hidden_layers");
    CFG_BAD(c.num_attention_heads = 0, WGML_ERROR_INVALID_ARGUMENT, "num_attention_heads");
    CFG_BAD((c.num_attention_heads = 3, c.num_key_value_heads = 2, c.head_dim = 4), WGML_ERROR_INVALID_ARGUMENT,
            "num_key_value_heads");                                                      /* heads % kv_heads */
    CFG_BAD((c.hidden_size = 9, c.num_key_value_heads = 2), WGML_ERROR_INVALID_ARGUMENT, "hidden_size");  /* 9 / 2 heads */
    CFG_BAD(c.head_dim = 5, WGML_ERROR_INVALID_ARGUMENT, "head_dim");
    CFG_BAD(c.head_dim = 258, WGML_ERROR_UNSUPPORTED, "head_dim");
    CFG_BAD(c.attention_bias = true, WGML_ERROR_UNSUPPORTED, "biases");
    CFG_BAD(c.mlp_bias = true, WGML_ERROR_UNSUPPORTED, "biases");
    CFG_BAD(c.rms_norm_eps = 0, WGML_ERROR_INVALID_ARGUMENT, "rms_norm_eps");
    CFG_BAD(c.rms_norm_eps = NAN, WGML_ERROR_INVALID_ARGUMENT, "rms_norm_eps");
    CFG_BAD((c.rope_scaling.type = WGML_ROPE_SCALING_LINEAR, c.rope_scaling.factor = 0.5), WGML_ERROR_INVALID_ARGUMENT,
            "factor");
#undef CFG_BAD
    c = good;
    c.head_dim = 6;   /* hidden_size != heads * head_dim is allowed */
    TH_EXPECT(wgml_model_create(th_eng, &c, &m), WGML_OK);
    wgml_model_destroy(m);
    TH_EXPECT(wgml_model_create(th_eng, &good, &m), WGML_OK);
    if (!m) return;

    BAD("wgml_model_init_random", wgml_model_init_random(NULL, 1, 0.02f), WGML_ERROR_INVALID_ARGUMENT, NULL, "m");
    BAD("wgml_model_init_random", wgml_model_init_random(m, 1, -1), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "std");
    BAD("wgml_model_init_random", wgml_model_init_random(m, 1, NAN), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "std");
    BAD("wgml_model_init_random", wgml_model_init_random(m, 1, INFINITY), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "std");
    TH_EXPECT(wgml_model_init_random(m, 1, 0), WGML_OK);
    const char *name = "unchanged";
    NOOP("wgml_model_param", wgml_model_param(m, wgml_model_param_count(m), &name) == NULL);
    NOOP("wgml_model_param", wgml_model_param(m, SIZE_MAX, NULL) == NULL);

    /* trainer */
    fn = "wgml_trainer_create";
    wgml_trainer *t = (wgml_trainer *)&t;
    wgml_trainer_desc desc = { .batch = 2, .seq_len = 3 };
    BAD(fn, wgml_trainer_create(NULL, &desc, &t), WGML_ERROR_INVALID_ARGUMENT, NULL, "m");
    TH_CHECK(t == NULL, "%s: *out not NULL after a failure", fn);
    BAD(fn, wgml_trainer_create(m, NULL, &t), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "desc");
    BAD(fn, wgml_trainer_create(m, &desc, NULL), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "out");
    BAD(fn, wgml_trainer_create(m, &(wgml_trainer_desc){ .batch = 0, .seq_len = 3 }, &t), WGML_ERROR_INVALID_ARGUMENT, th_ctx,
        "batch");
    BAD(fn, wgml_trainer_create(m, &(wgml_trainer_desc){ .batch = 2, .seq_len = 0 }, &t), WGML_ERROR_INVALID_ARGUMENT, th_ctx,
        "seq_len");
    BAD(fn, wgml_trainer_create(m, &(wgml_trainer_desc){ .batch = 65536, .seq_len = 65536 }, &t), WGML_ERROR_LIMIT, th_ctx,
        "batch");
    /* a loss scale neither 0 nor a power of two in [2^-24, 2^24] */
    const float bad_scales[] = { 3.0f, -1.0f, 33554432.0f, 2.9802322e-08f, NAN, INFINITY, 65535.0f };
    for (size_t i = 0; i < sizeof bad_scales / sizeof bad_scales[0]; i++)
        BAD(fn, wgml_trainer_create(m, &(wgml_trainer_desc){ .batch = 2, .seq_len = 3, .loss_scale = bad_scales[i] }, &t),
            WGML_ERROR_INVALID_ARGUMENT, th_ctx, "loss_scale");
    TH_EXPECT(wgml_trainer_create(m, &desc, &t), WGML_OK);
    wgml_tensor *loss = make(th_ctx, WGML_F32, (size_t[]){ 1, 0 }, true);
    wgml_tensor *loss_u32 = make(th_ctx, WGML_U32, (size_t[]){ 1, 0 }, true);
    wgml_tensor *loss_other = make(ctx2, WGML_F32, (size_t[]){ 1, 0 }, true);
    const uint32_t ids[6] = { 1, 2, 3, 4, 5, 6 }, targets[6] = { 2, 3, 4, 5, 6, UINT32_MAX };
    const uint32_t bad_ids[6] = { 1, 2, 3, 16, 5, 6 }, bad_targets[6] = { 2, 3, 4, 5, 6, 100 };
    if (t) {
        for (int k = 0; k < 2; k++) {
            const char *f = k ? "wgml_trainer_accumulate" : "wgml_trainer_eval";
#define TRAIN(tr, i, tg, l) (k ? wgml_trainer_accumulate(tr, i, tg, 1.0f, l) : wgml_trainer_eval(tr, i, tg, l))
            BAD(f, TRAIN(NULL, ids, targets, loss), WGML_ERROR_INVALID_ARGUMENT, NULL, "t");
            BAD(f, TRAIN(t, NULL, targets, loss), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "ids");
            BAD(f, TRAIN(t, ids, NULL, loss), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "targets");
            BAD(f, TRAIN(t, bad_ids, targets, loss), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "ids[3]");
            BAD(f, TRAIN(t, ids, bad_targets, loss), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "targets[5]");
            BAD(f, TRAIN(t, ids, targets, loss_u32), WGML_ERROR_DTYPE, th_ctx, "mean_loss");
            BAD(f, TRAIN(t, ids, targets, loss_other), WGML_ERROR_CONTEXT, th_ctx, "mean_loss");
#undef TRAIN
        }
        BAD("wgml_trainer_accumulate", wgml_trainer_accumulate(t, ids, targets, NAN, loss), WGML_ERROR_INVALID_ARGUMENT, th_ctx,
            "grad_scale");
        BAD("wgml_trainer_accumulate", wgml_trainer_accumulate(t, ids, targets, INFINITY, loss), WGML_ERROR_INVALID_ARGUMENT,
            th_ctx, "grad_scale");
        fn = "wgml_trainer_step";
        BAD(fn, wgml_trainer_step(t, 1e-3f, NULL), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "gradient");   /* nothing accumulated */
        TH_EXPECT(wgml_trainer_accumulate(t, ids, targets, 1.0f, loss), WGML_OK);
        /* a second micro-batch with bad input, after a good one: still nothing recorded */
        BAD("wgml_trainer_accumulate", wgml_trainer_accumulate(t, bad_ids, targets, 1.0f, loss), WGML_ERROR_INVALID_ARGUMENT,
            th_ctx, "ids[3]");
        BAD(fn, wgml_trainer_step(NULL, 1e-3f, NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "t");
        BAD(fn, wgml_trainer_step(t, -1e-3f, NULL), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "lr");
        BAD(fn, wgml_trainer_step(t, NAN, NULL), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "lr");
        BAD(fn, wgml_trainer_step(t, INFINITY, NULL), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "lr");
        BAD(fn, wgml_trainer_step(t, 1e-3f, loss_u32), WGML_ERROR_DTYPE, th_ctx, "grad_norm");
        BAD(fn, wgml_trainer_step(t, 1e-3f, loss_other), WGML_ERROR_CONTEXT, th_ctx, "grad_norm");
        TH_EXPECT(wgml_trainer_step(t, 1e-3f, loss), WGML_OK);
        TH_CHECK(wgml_trainer_steps(t) == 1, "the bad steps counted: %u steps", wgml_trainer_steps(t));
        /* the step's last micro-batch marked (alone: only the calls allowed change) */
        fn = "wgml_trainer_mark_last";
        BAD(fn, wgml_trainer_mark_last(NULL), WGML_ERROR_INVALID_ARGUMENT, NULL, "t");
        TH_EXPECT(wgml_trainer_mark_last(t), WGML_OK);
        BAD(fn, wgml_trainer_mark_last(t), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "already marked");
        /* an accumulate that refuses its arguments leaves the mark in place */
        BAD("wgml_trainer_accumulate", wgml_trainer_accumulate(t, bad_ids, targets, 1.0f, loss), WGML_ERROR_INVALID_ARGUMENT,
            th_ctx, "ids[3]");
        BAD(fn, wgml_trainer_mark_last(t), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "already marked");
        TH_EXPECT(wgml_trainer_accumulate(t, ids, targets, 1.0f, loss), WGML_OK);
        BAD("wgml_trainer_accumulate", wgml_trainer_accumulate(t, ids, targets, 1.0f, loss), WGML_ERROR_INVALID_ARGUMENT,
            th_ctx, "wgml_trainer_step");
        BAD(fn, wgml_trainer_mark_last(t), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "wgml_trainer_step");
        TH_EXPECT(wgml_trainer_step(t, 1e-3f, loss), WGML_OK);
        TH_CHECK(wgml_trainer_steps(t) == 2, "the refused calls counted: %u steps", wgml_trainer_steps(t));
        NOOP("wgml_trainer_grad", wgml_trainer_grad(t, wgml_model_param_count(m)) == NULL);
        NOOP("wgml_trainer_grad", wgml_trainer_grad(NULL, 0) == NULL);
        NOOP("wgml_trainer_logits", wgml_trainer_logits(NULL) == NULL);
        NOOP("wgml_trainer_steps", wgml_trainer_steps(NULL) == 0);
        NOOP("wgml_trainer_loss_scale", wgml_trainer_loss_scale(NULL) == 0 && wgml_trainer_loss_scale(t) == 0);
        NOOP("wgml_trainer_skipped_steps", wgml_trainer_skipped_steps(NULL) == 0 && wgml_trainer_skipped_steps(t) == 0);
        /* eval_only: the same loss as the training trainer's, and every training call refused */
        wgml_trainer *ev = NULL;
        wgml_trainer_desc edesc = desc;
        edesc.eval_only = true;
        TH_EXPECT(wgml_trainer_create(m, &edesc, &ev), WGML_OK);
        if (ev) {
            float l_train = NAN, l_eval = NAN;
            TH_EXPECT(wgml_trainer_eval(t, ids, targets, loss), WGML_OK);
            TH_EXPECT(wgml_tensor_read(loss, 0, &l_train, sizeof l_train), WGML_OK);
            TH_EXPECT(wgml_trainer_eval(ev, ids, targets, loss), WGML_OK);
            TH_EXPECT(wgml_tensor_read(loss, 0, &l_eval, sizeof l_eval), WGML_OK);
            TH_CHECK(l_eval == l_train && isfinite(l_eval), "eval_only loss %.9g, the training trainer's %.9g", l_eval, l_train);
            BAD("wgml_trainer_accumulate", wgml_trainer_accumulate(ev, ids, targets, 1.0f, loss), WGML_ERROR_INVALID_ARGUMENT,
                th_ctx, "eval_only");
            BAD("wgml_trainer_step", wgml_trainer_step(ev, 1e-3f, NULL), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "eval_only");
            BAD("wgml_trainer_mark_last", wgml_trainer_mark_last(ev), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "eval_only");
            BAD("wgml_trainer_save_state", wgml_trainer_save_state(ev, "unused.safetensors"), WGML_ERROR_INVALID_ARGUMENT, th_ctx,
                "eval_only");
            BAD("wgml_trainer_load_state", wgml_trainer_load_state(ev, "unused.safetensors"), WGML_ERROR_INVALID_ARGUMENT, th_ctx,
                "eval_only");
            NOOP("wgml_trainer_grad", wgml_trainer_grad(ev, 0) == NULL);
            wgml_trainer_destroy(ev);
        }
        wgml_trainer_destroy(t);
    }
    wgml_trainer_destroy(NULL);
    NOOP("wgml_trainer_destroy", true);

    /* KV cache and decoding */
    fn = "wgml_kv_cache_create";
    wgml_kv_cache *kv = (wgml_kv_cache *)&kv;
    BAD(fn, wgml_kv_cache_create(NULL, 4, &kv), WGML_ERROR_INVALID_ARGUMENT, NULL, "m");
    TH_CHECK(kv == NULL, "%s: *out not NULL after a failure", fn);
    BAD(fn, wgml_kv_cache_create(m, 4, NULL), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "out");
    BAD(fn, wgml_kv_cache_create(m, 0, &kv), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "max_tokens");
    BAD(fn, wgml_kv_cache_create(m, UINT32_MAX, &kv), WGML_ERROR_LIMIT, th_ctx, "max_tokens");
    TH_EXPECT(wgml_kv_cache_create(m, 4, &kv), WGML_OK);
    if (kv) {
        fn = "wgml_model_decode";
        wgml_tensor *lg = make(th_ctx, WGML_F32, (size_t[]){ 16, 0 }, true);
        wgml_tensor *lg_all = make(th_ctx, WGML_F32, (size_t[]){ 3, 16, 0 }, true);
        wgml_tensor *lg_bad = make(th_ctx, WGML_F32, (size_t[]){ 17, 0 }, true);
        wgml_tensor *lg_u32 = make(th_ctx, WGML_U32, (size_t[]){ 16, 0 }, true);
        wgml_tensor *lg_other = make(ctx2, WGML_F32, (size_t[]){ 16, 0 }, true);
        BAD(fn, wgml_model_decode(NULL, ids, 1, lg), WGML_ERROR_INVALID_ARGUMENT, NULL, "c");
        BAD(fn, wgml_model_decode(kv, NULL, 1, lg), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "ids");
        BAD(fn, wgml_model_decode(kv, ids, 0, lg), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "n");
        BAD(fn, wgml_model_decode(kv, bad_ids, 4, lg), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "ids[3]");
        BAD(fn, wgml_model_decode(kv, ids, 1, NULL), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "logits");
        BAD(fn, wgml_model_decode(kv, ids, 1, lg_u32), WGML_ERROR_DTYPE, th_ctx, "logits");
        BAD(fn, wgml_model_decode(kv, ids, 1, lg_other), WGML_ERROR_CONTEXT, th_ctx, "logits");
        BAD(fn, wgml_model_decode(kv, ids, 1, lg_bad), WGML_ERROR_SHAPE, th_ctx, "logits");
        BAD(fn, wgml_model_decode(kv, ids, 2, lg_all), WGML_ERROR_SHAPE, th_ctx, "logits");   /* 3 x V for 2 tokens */
        BAD(fn, wgml_model_decode(kv, ids, 5, lg), WGML_ERROR_SHAPE, th_ctx, "capacity");
        TH_CHECK(wgml_kv_cache_length(kv) == 0, "rejected decodes filled the cache: length %u", wgml_kv_cache_length(kv));
        TH_EXPECT(wgml_model_decode(kv, ids, 3, lg_all), WGML_OK);
        BAD(fn, wgml_model_decode(kv, ids, 2, lg), WGML_ERROR_SHAPE, th_ctx, "capacity");   /* 3 cached + 2 > 4 */
        TH_EXPECT(wgml_model_decode(kv, ids, 1, lg), WGML_OK);
        TH_CHECK(wgml_kv_cache_length(kv) == 4, "cache length %u after 4 tokens", wgml_kv_cache_length(kv));
        BAD(fn, wgml_model_decode(kv, ids, 1, lg), WGML_ERROR_SHAPE, th_ctx, "capacity");   /* full */
        BAD("wgml_kv_cache_truncate", wgml_kv_cache_truncate(kv, 5), WGML_ERROR_SHAPE, th_ctx, "holds 4");
        BAD("wgml_kv_cache_truncate", wgml_kv_cache_truncate(NULL, 0), WGML_ERROR_INVALID_ARGUMENT, NULL, "NULL");
        TH_CHECK(wgml_kv_cache_length(kv) == 4, "a refused truncation changed the length");
        wgml_tensor_release(lg);
        wgml_tensor_release(lg_all);
        wgml_tensor_release(lg_bad);
        wgml_tensor_release(lg_u32);
        wgml_tensor_release(lg_other);
        wgml_kv_cache_destroy(kv);
    }
    NOOP("wgml_kv_cache_length", wgml_kv_cache_length(NULL) == 0);
    NOOP("wgml_kv_cache_capacity", wgml_kv_cache_capacity(NULL) == 0);
    wgml_kv_cache_reset(NULL);
    NOOP("wgml_kv_cache_reset", true);
    wgml_kv_cache_destroy(NULL);
    NOOP("wgml_kv_cache_destroy", true);

    /* sequences decoded together */
    {
        const char *bfn = "wgml_kv_batch_create";
        wgml_kv_batch *kb = (wgml_kv_batch *)&kb;
        BAD(bfn, wgml_kv_batch_create(NULL, 4, 2, &kb), WGML_ERROR_INVALID_ARGUMENT, NULL, "m");
        TH_CHECK(kb == NULL, "%s: *out not NULL after a failure", bfn);
        BAD(bfn, wgml_kv_batch_create(m, 4, 2, NULL), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "out");
        BAD(bfn, wgml_kv_batch_create(m, 0, 2, &kb), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "max_tokens");
        BAD(bfn, wgml_kv_batch_create(m, 4, 0, &kb), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "n_seq");
        BAD(bfn, wgml_kv_batch_create(m, 1u << 30, 1u << 12, &kb), WGML_ERROR_LIMIT, th_ctx, "buffer");
        TH_EXPECT(wgml_kv_batch_create(m, 4, 2, &kb), WGML_OK);
        uint32_t two[2] = { 1, 2 }, bad_id[2] = { 1, 1u << 30 };
        wgml_tensor *lg2 = th_poisoned(WGML_F32, TH_SHAPE(2, wgml_model_get_config(m)->vocab_size));
        wgml_tensor *lg1 = th_poisoned(WGML_F32, TH_SHAPE(wgml_model_get_config(m)->vocab_size));
        bfn = "wgml_kv_batch_prefill";
        BAD(bfn, wgml_kv_batch_prefill(NULL, 0, two, 2, lg1), WGML_ERROR_INVALID_ARGUMENT, NULL, "b");
        BAD(bfn, wgml_kv_batch_prefill(kb, 2, two, 2, lg1), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "seq");
        BAD(bfn, wgml_kv_batch_prefill(kb, 0, bad_id, 2, lg1), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "ids[1]");
        BAD(bfn, wgml_kv_batch_prefill(kb, 0, two, 0, lg1), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "n");
        BAD(bfn, wgml_kv_batch_prefill(kb, 0, two, 2, NULL), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "logits");
        bfn = "wgml_model_decode_batch";
        BAD(bfn, wgml_model_decode_batch(NULL, two, lg2), WGML_ERROR_INVALID_ARGUMENT, NULL, "b");
        BAD(bfn, wgml_model_decode_batch(kb, NULL, lg2), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "ids");
        BAD(bfn, wgml_model_decode_batch(kb, bad_id, lg2), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "ids[1]");
        BAD(bfn, wgml_model_decode_batch(kb, two, lg1), WGML_ERROR_SHAPE, th_ctx, "logits");
        BAD(bfn, wgml_model_decode_batch(kb, two, NULL), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "logits");
        NOOP("wgml_kv_batch_length", wgml_kv_batch_length(NULL, 0) == 0 && wgml_kv_batch_length(kb, 0) == 0 &&
                                     wgml_kv_batch_length(kb, 7) == 0);
        wgml_kv_batch_reset(NULL, 0);
        wgml_kv_batch_reset(kb, 7);
        NOOP("wgml_kv_batch_reset", true);
        wgml_kv_batch_destroy(kb);
        wgml_kv_batch_destroy(NULL);
        NOOP("wgml_kv_batch_destroy", true);
        wgml_tensor_release(lg1);
        wgml_tensor_release(lg2);
    }

    /* files */
    char dir[] = "/tmp/wgml_bad_model_XXXXXX";
    TH_CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char sub[300], path[400];
    snprintf(sub, sizeof sub, "%s/model", dir);
    fn = "wgml_model_save";
    BAD(fn, wgml_model_save(NULL, sub), WGML_ERROR_INVALID_ARGUMENT, NULL, "m");
    BAD(fn, wgml_model_save(m, NULL), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "dir");
    BAD(fn, wgml_model_save(m, "/nonexistent/wgml/model"), WGML_ERROR_IO, th_ctx, "create");
    fn = "wgml_model_save_with";
    const wgml_model_save_options as_bf16 = { .dtype = WGML_BF16 }, as_u32 = { .dtype = WGML_U32 };
    BAD(fn, wgml_model_save_with(NULL, sub, &as_bf16), WGML_ERROR_INVALID_ARGUMENT, NULL, "m");
    BAD(fn, wgml_model_save_with(m, NULL, &as_bf16), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "dir");
    BAD(fn, wgml_model_save_with(m, sub, &as_u32), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "dtype");
    BAD(fn, wgml_model_save_with(m, "/nonexistent/wgml/model", &as_bf16), WGML_ERROR_IO, th_ctx, "create");
    TH_CHECK(access(sub, F_OK) != 0, "%s: a refused save made %s", fn, sub);
    TH_EXPECT(wgml_model_save(m, sub), WGML_OK);
    NOOP("wgml_model_file_dtype", wgml_model_file_dtype(NULL) == WGML_F32 && wgml_model_file_dtype(m) == WGML_F32);
    NOOP("wgml_model_weight_bytes", wgml_model_weight_bytes(NULL) == 0 && wgml_model_weight_bytes(m) > 0);
    {
        wgml_model *m3 = (wgml_model *)&m3;
        /* its messages name wgml_model_load, whose work it does */
        set_sentinels("wgml_model_load_with");
        snap before = snap_take();
        wgml_status got = wgml_model_load_with(th_eng, sub, &(wgml_model_load_options){ .weights = (wgml_weights)7 }, &m3);
        check_rejected_p("wgml_model_load_with", "wgml_model_load", "weights 7", got, WGML_ERROR_INVALID_ARGUMENT, th_ctx,
                         "weights", NULL, &before);
        TH_CHECK(m3 == NULL, "wgml_model_load_with: *out not NULL after a failure");
        BADP("wgml_model_load_with", "wgml_model_load", wgml_model_load_with(NULL, sub, NULL, &m3), WGML_ERROR_INVALID_ARGUMENT,
             "engine");
    }
    fn = "wgml_model_load";
    wgml_model *m2 = (wgml_model *)&m2;
    BAD(fn, wgml_model_load(NULL, sub, &m2), WGML_ERROR_INVALID_ARGUMENT, NULL, "engine");
    TH_CHECK(m2 == NULL, "%s: *out not NULL after a failure", fn);
    BAD(fn, wgml_model_load(th_eng, NULL, &m2), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "path");
    BAD(fn, wgml_model_load(th_eng, sub, NULL), WGML_ERROR_INVALID_ARGUMENT, th_ctx, "out");
    BAD(fn, wgml_model_load(th_eng, dir, &m2), WGML_ERROR_IO, th_ctx, "config.json");   /* a folder without a model */
    /* a config the model refuses, next to valid weights */
    snprintf(path, sizeof path, "%s/config.json", sub);
    const char *odd = "{\"vocab_size\": 16, \"hidden_size\": 8, \"intermediate_size\": 16, \"num_hidden_layers\": 1,"
                      " \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"attention_bias\": true}";
    TH_CHECK(write_file(path, odd, strlen(odd)), "writing %s", path);
    BAD(fn, wgml_model_load(th_eng, sub, &m2), WGML_ERROR_UNSUPPORTED, th_ctx, "biases");
    /* weights that do not match the config */
    const char *wide = "{\"vocab_size\": 16, \"hidden_size\": 16, \"intermediate_size\": 16, \"num_hidden_layers\": 1,"
                       " \"num_attention_heads\": 2, \"num_key_value_heads\": 1}";
    TH_CHECK(write_file(path, wide, strlen(wide)), "writing %s", path);
    /* The mismatch is found while loading, after the model is created and its parameters
       zeroed: those commands stay recorded (the tensors are released), so only the status
       and the message are checked here. */
    {
        set_sentinels(fn);
        wgml_status got = wgml_model_load(th_eng, sub, &m2);
        TH_CHECK(got == WGML_ERROR_FORMAT && strstr(wgml_last_error(th_ctx), "wgml_model_load: ") == wgml_last_error(th_ctx) &&
                 names_word(wgml_last_error(th_ctx), "model.embed_tokens.weight"),
                 "%s of mismatched weights: %s, \"%s\"", fn, wgml_status_string(got), wgml_last_error(th_ctx));
        (*count_of(fn, false))++;
    }
    TH_CHECK(m2 == NULL, "%s: *out not NULL after a failure", fn);
    wgml_context_stats st;
    wgml_context_stats_get(th_ctx, &st);
    long live = st.live_tensors;
    wgml_model_destroy(m);
    wgml_model_destroy(NULL);
    NOOP("wgml_model_destroy", true);
    wgml_context_stats_get(th_ctx, &st);
    TH_CHECK(st.live_tensors < live, "destroying the model released no tensors");
    char rm[512];
    snprintf(rm, sizeof rm, "%s/model.safetensors", sub);
    unlink(rm);
    unlink(path);
    rmdir(sub);
    rmdir(dir);
    wgml_tensor_release(loss);
    wgml_tensor_release(loss_u32);
    wgml_tensor_release(loss_other);
}

/* Functions without bad inputs of their own: no arguments, or any argument is valid. */
static const char *const no_bad_inputs[] = {
    "wgml_version", "wgml_last_error", "wgml_tensor_dtype", "wgml_tensor_ndim", "wgml_tensor_numel", "wgml_tensor_nbytes",
    "wgml_tensor_context",
    /* counts of an open file; NULL is not documented */
    "wgml_safetensors_count", "wgml_safetensors_metadata_count", "wgml_checkpoint_count", "wgml_checkpoint_shard_count",
    /* accessors of a model; NULL is not documented */
    "wgml_model_get_config", "wgml_model_param_count", "wgml_model_numel",
};

/* Every function declared in wgml.h that the library exports has a row or a case here. */
static void test_header_coverage(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s", __FILE__);
    char *slash = strrchr(path, '/');
    if (slash) *slash = 0;
    else snprintf(path, sizeof path, ".");
    strncat(path, "/../include/wgml.h", sizeof path - strlen(path) - 1);
    FILE *f = fopen(path, "r");
    TH_CHECK(f != NULL, "cannot open %s", path);
    if (!f) return;
    /* the whole header, however long it grows */
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc(size > 0 ? (size_t)size + 1 : 1);
    size_t n = text && size > 0 ? fread(text, 1, (size_t)size, f) : 0;
    fclose(f);
    TH_CHECK(text && (long)n == size, "cannot read %s", path);
    if (!text) return;
    text[n] = 0;
    int declared = 0, covered = 0;
    char missing[4096] = "";
    for (char *p = strstr(text, "WGML_API "); p; p = strstr(p + 1, "WGML_API ")) {
        char *paren = strchr(p, '(');
        if (!paren) break;
        char *q = paren;
        while (q > p && (q[-1] == '_' || (q[-1] >= 'a' && q[-1] <= 'z') || (q[-1] >= '0' && q[-1] <= '9'))) q--;
        char name[96];
        size_t len = (size_t)(paren - q);
        if (len == 0 || len >= sizeof name || strncmp(q, "wgml_", 5) != 0) continue;   /* the #define WGML_API line */
        memcpy(name, q, len);
        name[len] = 0;
        declared++;
        bool known = false;
        for (int i = 0; i < ncounts && !known; i++) known = !strcmp(counts[i].fn, name) && counts[i].bad > 0;
        for (size_t i = 0; i < sizeof no_bad_inputs / sizeof no_bad_inputs[0] && !known; i++) known = !strcmp(no_bad_inputs[i], name);
        if (known) { covered++; continue; }
        if (!library_has(name)) {   /* declared, not implemented yet on this branch */
            if (strlen(missing) + len + 3 < sizeof missing) { strcat(missing, " "); strcat(missing, name); }
            continue;
        }
        TH_CHECK(false, "%s is exported but has no bad-input row or case", name);
    }
    TH_CHECK(declared > 60, "only %d declarations found in %s", declared, path);
    free(text);
    printf("header: %d functions declared, %d covered; not implemented yet:%s\n", declared, covered, missing[0] ? missing : " none");
}

static void summary(void)
{
    int total = 0, accepted = 0;
    printf("bad inputs:");
    for (int i = 0; i < ncounts; i++) {
        printf("%s %s %d", i ? "," : "", counts[i].fn, counts[i].bad);
        total += counts[i].bad;
        accepted += counts[i].accepted;
    }
    printf(", total %d\n", total);
    if (pending[0]) printf("rows waiting for their function:%s\n", pending);
    printf("valid variants the headers allow (optional outputs NULL, allowed aliases, boundary values): %d\n", accepted);
    TH_CHECK(total > 0, "no bad inputs tried");
}

static void close_other_context(void)
{
    if (!ctx2) return;
    wgml_context_stats s;
    wgml_context_stats_get(ctx2, &s);
    TH_CHECK(s.live_tensors == 0, "%ld foreign tensors were not released", s.live_tensors);
    wgml_engine_destroy(eng2);
    wgml_context_destroy(ctx2);
}

static const th_case cases[] = {
    { "status and dtype names", test_status_and_dtype_names },
    { "context functions", test_context_functions },
    { "tensor functions", test_tensor_functions },
    { "engine functions", test_engine_functions },
    { "ops", test_ops },
    { "model functions", test_model_functions },
    { "safetensors and checkpoint functions", test_safetensors_functions },
    { "gguf functions", test_gguf_functions },
    { "config functions", test_config_functions },
    { "tokenizer functions", test_tokenizer_functions },
    { "chat functions", test_chat_functions },
    { "data functions", test_data_functions },
    { "lora functions", test_lora_functions },
    { "header coverage", test_header_coverage },
    { "summary", summary },
    { "close other context", close_other_context },
};

TH_MAIN(cases)
