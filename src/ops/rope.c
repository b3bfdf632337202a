/* Rotary position embeddings, in place, and their gradient (the inverse rotation).
   Kernels: src/kernels/rope.wgsl (its top comment explains the angle arithmetic and the
   thread layout). */
#include "internal.h"

#include <math.h>

#define WG 256u
#define DEFAULT_THETA 10000.0f
#define MAX_HEAD_DIM 256u

enum { MODE_HALF_VEC4 = 0, MODE_INTERLEAVED_VEC4 = 1, MODE_HALF_SCALAR = 2, MODE_INTERLEAVED_SCALAR = 3 };

typedef struct rope_params {
    uint32_t ntok, seq, pos, heads, hd, half, uh, hg, tpw, groups, hidden, inverse;
    uint32_t freq[48];   /* 16 A then 8 B, each (lo, hi) */
} rope_params;

/* The 64-bit fixed-point value of v (0 <= v < 2^int_bits) with 64 - int_bits fraction bits,
   as (lo, hi). Exact for v's significant bits: each step only scales by a power of two and
   subtracts an integer part. */
static void fixed64(long double v, int int_bits, uint32_t *lo, uint32_t *hi)
{
    long double a = ldexpl(v, 32 - int_bits), h = floorl(a);
    *hi = (uint32_t)h;
    *lo = (uint32_t)floorl(ldexpl(a - h, 32));
}

/* The frequency table of the theta path: f_i = theta^(-2i/hd) for i = 8a + b is
   (2pi A_a) * B_b with A_a = theta^(-16a/hd) / 2pi (0.64 fixed point, < 1 for theta >= 1)
   and B_b = theta^(-2b/hd) (1.63 fixed point, <= 1). Computed in long double (a 64-bit
   significand on x86-64): two powers, then at most 15 products, so the frequencies are good
   to about 2^-59 relative, and even at position 2^32 their rounding moves an angle by less
   than 1e-8 rad. Where long double is double, about 2^-49. */
static void theta_table(rope_params *p, double theta)
{
    const long double two_pi = 6.283185307179586476925286766559L;
    long double r16 = powl((long double)theta, -16.0L / p->hd), r2 = powl((long double)theta, -2.0L / p->hd);
    long double a = 1.0L / two_pi, b = 1.0L;
    for (int k = 0; k < 16; k++, a *= r16) fixed64(a, 0, &p->freq[2 * k], &p->freq[2 * k + 1]);
    for (int k = 0; k < 8; k++, b *= r2) fixed64(b, 1, &p->freq[32 + 2 * k], &p->freq[32 + 2 * k + 1]);
}

/* tname: the tensor's name in fn's declaration ("tensor", or "grad" for wgml_rope_backward). */
static wgml_status rope_impl(wgml_engine *e, const char *fn, const char *tname, wgml_tensor *tensor, const wgml_rope_options *o)
{
    WGML_CHECK(wgml__check_engine(e, fn));
    if (!o) return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: opts is NULL", fn);
    WGML_CHECK(wgml__check_tensor(e, fn, tname, tensor, WGML_F32));
    if (o->inv_freq) WGML_CHECK(wgml__check_tensor(e, fn, "inv_freq", o->inv_freq, WGML_F32));
    WGML_CHECK(wgml__check_u32_numel(e, fn, tname, tensor));
    uint32_t hd = o->head_dim;
    if (hd < 2 || hd > MAX_HEAD_DIM || hd % 2)
        return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: head_dim (%u) must be even and within 2..%u", fn, hd,
                          MAX_HEAD_DIM);
    if (o->pairing != WGML_ROPE_ROTATE_HALF && o->pairing != WGML_ROPE_INTERLEAVED)
        return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: pairing (%d) is not a wgml_rope_pairing", fn,
                          (int)o->pairing);
    double theta = o->theta == 0.0f ? DEFAULT_THETA : o->theta;
    if (!o->inv_freq && !(theta >= 1.0 && isfinite(theta)))
        return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: theta (%g) must be finite and >= 1", fn, theta);

    /* [hidden], [seq, hidden] or [batch, seq, rest...] */
    size_t batch = 1, seq = 1, hidden;
    if (tensor->ndim == 1) {
        hidden = tensor->shape[0];
    } else if (tensor->ndim == 2) {
        seq = tensor->shape[0];
        hidden = tensor->shape[1];
    } else {
        batch = tensor->shape[0];
        seq = tensor->shape[1];
        hidden = wgml_tensor_numel(tensor) / (batch * seq);
    }
    if (hidden % hd)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: the hidden size of %s (%zu) is not a multiple of head_dim (%u)", fn,
                          tname, hidden, hd);
    if ((uint64_t)o->pos + seq - 1 > UINT32_MAX)
        return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: pos (%u) + seq (%zu) - 1 exceeds 2^32 - 1", fn, o->pos, seq);
    if (o->positions) {
        WGML_CHECK(wgml__check_tensor(e, fn, "positions", o->positions, WGML_U32));
        if (wgml_tensor_numel(o->positions) != batch)
            return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: positions has %zu elements; it must have one per sequence (%zu)", fn,
                              wgml_tensor_numel(o->positions), batch);
        if (o->pos)
            return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: pos (%u) and positions are exclusive", fn, o->pos);
    }
    if (o->inv_freq) {
        if (wgml_tensor_numel(o->inv_freq) != hd / 2)
            return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: inv_freq has %zu elements; it must have head_dim / 2 = %u", fn,
                              wgml_tensor_numel(o->inv_freq), hd / 2);
    }

    rope_params p = { .ntok = (uint32_t)(batch * seq), .seq = (uint32_t)seq, .pos = o->pos, .hd = hd, .half = hd / 2,
                      .heads = (uint32_t)(hidden / hd), .hidden = (uint32_t)hidden, .inverse = o->inverse };
    uint32_t mode;
    if (o->pairing == WGML_ROPE_ROTATE_HALF) {
        mode = hd % 8 == 0 ? MODE_HALF_VEC4 : MODE_HALF_SCALAR;
        p.uh = mode == MODE_HALF_VEC4 ? p.half / 4 : p.half;
    } else {
        mode = hd % 4 == 0 ? MODE_INTERLEAVED_VEC4 : MODE_INTERLEAVED_SCALAR;
        p.uh = mode == MODE_INTERLEAVED_VEC4 ? p.half / 2 : p.half;
    }
    p.hg = WG / p.uh < p.heads ? WG / p.uh : p.heads;
    p.tpw = WG / (p.uh * p.hg);
    p.groups = (p.ntok + p.tpw - 1) / p.tpw;
    uint32_t gx, gy;
    WGML_CHECK(wgml__grid(e->ctx, p.groups, &gx, &gy));

    wgml__kernel k = { .file = "rope", .nconst = 2, .constants = { { "WG", WG }, { "MODE", mode } } };
    wgml__arg args[3] = { wgml__t(tensor) };
    uint32_t nargs = 1;
    if (o->inv_freq) args[nargs++] = wgml__t(o->inv_freq);
    else theta_table(&p, theta);
    if (o->positions) args[nargs++] = wgml__t(o->positions);
    static const char *const entries[2][2] = { { "rope", "rope_at" }, { "rope_freqs", "rope_freqs_at" } };
    static const char *const layouts[3] = { "uw", "uwr", "uwrr" };
    k.entry = entries[o->inv_freq != NULL][o->positions != NULL];
    k.layout = layouts[nargs - 1];
    return wgml__dispatch(e, &k, &p, sizeof p, args, nargs, gx, gy, 1);
}

wgml_status wgml_rope(wgml_engine *e, wgml_tensor *tensor, uint32_t head_dim, uint32_t pos)
{
    wgml_rope_options o = { .head_dim = head_dim, .pos = pos, .theta = DEFAULT_THETA };
    return rope_impl(e, "wgml_rope", "tensor", tensor, &o);
}

static wgml_status rope_theta(wgml_engine *e, const char *fn, wgml_tensor *tensor, uint32_t head_dim, uint32_t pos,
                              float theta, bool inverse)
{
    /* an explicit theta of 0 is an error here, not the options' default */
    if (e && !(theta >= 1.0f && isfinite(theta)))
        return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: theta (%g) must be finite and >= 1", fn, (double)theta);
    wgml_rope_options o = { .head_dim = head_dim, .pos = pos, .theta = theta, .inverse = inverse };
    return rope_impl(e, fn, inverse ? "grad" : "tensor", tensor, &o);
}

wgml_status wgml_rope_theta(wgml_engine *e, wgml_tensor *tensor, uint32_t head_dim, uint32_t pos, float theta)
{
    return rope_theta(e, "wgml_rope_theta", tensor, head_dim, pos, theta, false);
}

wgml_status wgml_rope_with(wgml_engine *e, wgml_tensor *tensor, const wgml_rope_options *opts)
{
    return rope_impl(e, "wgml_rope_with", "tensor", tensor, opts);
}

wgml_status wgml_rope_backward(wgml_engine *e, wgml_tensor *grad, uint32_t head_dim, uint32_t pos, float theta)
{
    return rope_theta(e, "wgml_rope_backward", grad, head_dim, pos, theta, true);
}

/* Default variants for wgml_engine_warmup: both pairings with vec4 units, both sources of
   frequencies. */
#define KV(ENTRY, LAYOUT, MODE_) \
    { .file = "rope", .entry = ENTRY, .layout = LAYOUT, .nconst = 2, .constants = { { "WG", WG }, { "MODE", MODE_ } } }
const wgml__kernel wgml__rope_kernels[] = {
    KV("rope", "uw", MODE_HALF_VEC4),
    KV("rope", "uw", MODE_INTERLEAVED_VEC4),
    KV("rope_freqs", "uwr", MODE_HALF_VEC4),
};
#undef KV
const size_t wgml__rope_kernel_count = sizeof wgml__rope_kernels / sizeof wgml__rope_kernels[0];
