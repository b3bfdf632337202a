/* Rotary embeddings: both pairings, theta and inv_freq frequencies, every tensor layout,
   positions 0, 1, 7, 1e6 and the largest, inverse(rope(x)) == x, the backward pass against
   finite differences, and bad inputs. The shapes, parameters, round trips and the gradient
   check are rows of an op case table; the 2-D grid, the robust context and the bad inputs
   are written out by hand. */
#include "harness.h"
#include "ref_rope.h"

#include <float.h>
#include <stdlib.h>
#include <string.h>

/* Error bound of one rotated element, the same at every position: the kernel reduces the
   angle in integer turns (phase to 2^-32 turn = 1.5e-9 rad; frequencies to 2^-52 relative,
   2.2e-10 rad at position 1e6), then converts the remainder (|r| <= pi/4) to f32 radians
   with three roundings (<= 1.4e-7 rad) and evaluates fixed polynomials (truncation 2e-9,
   rounding <= 2u = 1.2e-7): cos and sin are within 2.6e-7. x cos - y sin then adds three
   roundings, 1.8e-7 (|x| + |y|). In all, 4.4e-7 (|x| + |y|); 5e-7 is used.
   An angle computed as an f32 product would be off by up to 0.03 rad at position 1e6. */
#define ROT_TOL 5e-7

static void compare_rot(const char *what, const float *got, const float *x, const double *ref, size_t n, size_t hd,
                        int interleaved, double k)
{
    size_t bad = 0, worst = 0;
    double worst_ratio = -1;
    for (size_t i = 0; i < n; i++) {
        size_t j = i % hd, partner = i - j + ref_rope_partner(j, hd, interleaved);
        double tol = k * ROT_TOL * (fabs((double)x[i]) + fabs((double)x[partner])) + 1e-30;
        double err = fabs((double)got[i] - ref[i]), ratio = isnan(err) ? INFINITY : err / tol;
        if (ratio > worst_ratio) { worst_ratio = ratio; worst = i; }
        if (!(err <= tol)) {
            if (bad < 10) fprintf(stderr, "  %s[%zu]: got %.9g, want %.9g (tol %.3g)\n", what, i, got[i], ref[i], tol);
            bad++;
        }
    }
    TH_CHECK(bad == 0, "%s: %zu of %zu elements out of tolerance; worst [%zu] got %.9g want %.9g (%.2f x tol)", what, bad, n,
             worst, n ? (double)got[worst] : 0.0, n ? ref[worst] : 0.0, worst_ratio);
}

/* Layouts: shape (0-terminated), tokens, seq, hidden. */
typedef struct layout { size_t shape[5]; size_t ntok, seq, hidden; } layout;

static layout make_layout(int kind, size_t hd)
{
    switch (kind) {
    case 0: return (layout){ { 3 * hd, 0 }, 1, 1, 3 * hd };                     /* one token [hidden] */
    case 1: return (layout){ { 5, 2 * hd, 0 }, 5, 5, 2 * hd };                   /* [seq, hidden] */
    case 2: return (layout){ { 3, 4, 2 * hd, 0 }, 12, 4, 2 * hd };              /* [batch, seq, hidden] */
    default: return (layout){ { 2, 3, 5, hd, 0 }, 6, 3, 5 * hd };               /* [batch, seq, heads, hd] */
    }
}

/* ---- the op case table -------------------------------------------------------------- */

/* A rope case. rope works in place: the call writes the input's values into the case's
   output tensor from the host and rotates that tensor. ROTATE: one call through `api`
   (0 wgml_rope, 1 wgml_rope_theta, 2 wgml_rope_backward, 3 wgml_rope_with) against the
   reference; ROUNDTRIP: rope_with, then its inverse, against the input (rotate-half
   rows also check that rope_backward equals rope_with(inverse) bit for bit); BACKWARD_FD:
   rope_backward of grad_out against central differences of sum(g * rope(x)). The
   tolerance of element i is k * ROT_TOL (|x_i| + |x_partner|) (compare_rot). */
enum { ROTATE, ROUNDTRIP, BACKWARD_FD };
typedef struct rope_case {
    int what;
    layout L;
    uint32_t hd, pos;
    float theta;                 /* 0 means 10000 */
    int interleaved;
    bool inverse;
    const float *inv_freq;       /* hd / 2 frequencies, uploaded by the call, or NULL */
    int api;
    double k;
} rope_case;

/* Runs p's rotation(s) on t, in place. */
static wgml_status rope_apply(const th_run *r, const rope_case *p, wgml_tensor *t, wgml_rope_options *o)
{
    if (p->what == BACKWARD_FD || p->api == 2) return wgml_rope_backward(th_eng, t, p->hd, p->pos, p->theta);
    if (p->what == ROTATE) {
        if (p->api == 0) return wgml_rope(th_eng, t, p->hd, p->pos);
        if (p->api == 1) return wgml_rope_theta(th_eng, t, p->hd, p->pos, p->theta);
        return wgml_rope_with(th_eng, t, o);
    }
    wgml_status s = wgml_rope_with(th_eng, t, o);
    o->inverse = true;
    if (s != WGML_OK) return s;
    s = wgml_rope_with(th_eng, t, o);
    if (s == WGML_OK && !p->interleaved) {
        wgml_tensor *a = th_tensor(WGML_F32, r->in[0], p->L.shape), *b = th_tensor(WGML_F32, r->in[0], p->L.shape);
        TH_EXPECT(wgml_rope_backward(th_eng, a, p->hd, p->pos, p->theta), WGML_OK);
        TH_EXPECT(wgml_rope_with(th_eng, b, o), WGML_OK);
        float *ga = th_read(a), *gb = th_read(b);
        TH_CHECK(memcmp(ga, gb, r->n_in[0] * sizeof *ga) == 0, "rope_backward differs from rope_with(inverse), hd %u pos %u",
                 p->hd, p->pos);
        free(ga); free(gb);
        wgml_tensor_release(a); wgml_tensor_release(b);
    }
    return s;
}

static wgml_status rope_call(const th_run *r)
{
    const rope_case *p = r->c->params;
    wgml_tensor *t = r->t_out[0], *tf = p->inv_freq ? th_tensor(WGML_F32, p->inv_freq, TH_SHAPE(p->hd / 2)) : NULL;
    wgml_rope_options o = { .head_dim = p->hd, .pos = p->pos, .theta = p->theta, .pairing = p->interleaved, .inv_freq = tf,
                            .inverse = p->inverse };
    wgml_status s = wgml_tensor_write(t, 0, r->in[0], r->n_in[0] * sizeof(float));
    if (s == WGML_OK) s = rope_apply(r, p, t, &o);
    wgml_tensor_release(tf);
    return s;
}

/* sum(g * rope(x)) in double, for th_finite_diff. */
typedef struct rope_loss { const rope_case *p; const float *g; const long double *freqs; double *y; } rope_loss;

static double rope_loss_fn(const double *x, const void *ctx)
{
    const rope_loss *l = ctx;
    const layout *L = &l->p->L;
    ref_rope_d(x, L->ntok, L->seq, L->hidden, l->p->hd, l->p->pos, l->freqs, 0, 0, l->y);
    double s = 0;
    for (size_t k = 0; k < L->ntok * L->hidden; k++) s += l->g[k] * l->y[k];
    return s;
}

static void rope_reference(const th_run *r)
{
    const rope_case *p = r->c->params;
    const layout *L = &p->L;
    size_t n = r->n_in[0];
    if (p->what == ROUNDTRIP) {   /* the input itself */
        th_to_double(TH_IN(r, 0), r->ref[0], n);
        return;
    }
    long double *freqs = malloc(p->hd / 2 * sizeof *freqs);
    if (p->inv_freq) for (size_t i = 0; i < p->hd / 2; i++) freqs[i] = p->inv_freq[i];
    else ref_rope_freqs(p->theta == 0 ? 10000.0 : p->theta, p->hd, freqs);
    if (p->what == ROTATE) {
        ref_rope(TH_IN(r, 0), L->ntok, L->seq, L->hidden, p->hd, p->pos, freqs, p->interleaved, p->inverse, r->ref[0]);
    } else {
        /* L is linear in x: a step of 1e-3 (h max(1, |x|) with |x| <= 1) is exact but for
           rounding, at any x */
        double *x = th_alloc_d(n);
        for (size_t i = 0; i < n; i++) x[i] = th_uniform(-1, 1);
        rope_loss l = { p, TH_IN(r, 0), freqs, th_alloc_d(n) };
        th_finite_diff(rope_loss_fn, &l, x, n, 1e-3, r->ref[0]);
        free(x); free(l.y);
    }
    free(freqs);
}

static double rope_tol(const th_run *r, int o, size_t i)
{
    (void)o;
    const rope_case *p = r->c->params;
    const float *x = TH_IN(r, 0);
    size_t j = i % p->hd, partner = i - j + ref_rope_partner(j, p->hd, p->interleaved);
    return p->k * ROT_TOL * (fabs((double)x[i]) + fabs((double)x[partner])) + 1e-30;
}

/* Runs p on fresh data in [lo, hi]. */
static void run_rope(const rope_case *p, double lo, double hi)
{
    th_op_case c = { .nin = 1, .nout = 1, .call = rope_call, .reference = rope_reference, .tol = rope_tol, .params = p };
    c.in[0] = (th_io){ .lo = lo, .hi = hi };
    memcpy(c.in[0].shape, p->L.shape, sizeof c.in[0].shape);
    memcpy(c.out[0].shape, p->L.shape, sizeof c.out[0].shape);
    if (p->what == ROUNDTRIP)
        snprintf(c.name, sizeof c.name, "inverse(rope(x)) hd %u pos %u %s", p->hd, p->pos,
                 p->interleaved ? "interleaved" : "rotate-half");
    else if (p->what == BACKWARD_FD)
        snprintf(c.name, sizeof c.name, "rope_backward vs finite differences hd %u", p->hd);
    else
        snprintf(c.name, sizeof c.name, "rope api %d [%zu tokens of %zu] hd %u pos %u theta %g %s%s%s", p->api, p->L.ntok,
                 p->L.hidden, p->hd, p->pos, (double)p->theta, p->interleaved ? "interleaved" : "rotate-half",
                 p->inverse ? " inverse" : "", p->inv_freq ? " inv_freq" : "");
    th_run_case(&c);
}

static const uint32_t head_dims[] = { 2, 4, 6, 8, 10, 12, 64, 96, 128, 256 };
static const uint32_t positions[] = { 0, 1, 7, 1000000 };

/* One rope call on x in [-2, 2] of layout `kind`, checked against the reference. */
static void rope_case_run(int kind, uint32_t hd, uint32_t pos, float theta, int interleaved, bool inverse,
                          const float *inv_freq, int api)
{
    rope_case p = { .what = ROTATE, .L = make_layout(kind, hd), .hd = hd, .pos = pos, .theta = theta,
                    .interleaved = interleaved, .inverse = inverse, .inv_freq = inv_freq, .api = api, .k = 1 };
    run_rope(&p, -2, 2);
}

/* Every layout, head_dim 2..256 (scalar and vec4 units), both pairings, positions 0, 1, 7
   and 1e6 with the same tolerance, through every entry point. */
static void test_theta(void)
{
    for (size_t h = 0; h < sizeof head_dims / sizeof head_dims[0]; h++)
        for (size_t q = 0; q < sizeof positions / sizeof positions[0]; q++)
            for (int kind = 0; kind < 4; kind++) {
                uint32_t hd = head_dims[h], pos = positions[q];
                rope_case_run(kind, hd, pos, 10000.0f, 0, false, NULL, 0);
                rope_case_run(kind, hd, pos, 500000.0f, 0, false, NULL, 1);
                rope_case_run(kind, hd, pos, 100000.0f, 0, true, NULL, 2);
                rope_case_run(kind, hd, pos, 0.0f, 1, false, NULL, 3);           /* 0 means 10000 */
                rope_case_run(kind, hd, pos, 1e6f, 1, (q + kind) % 2, NULL, 3);
            }
#if LDBL_MANT_DIG >= 64
    /* The largest positions a [seq, hidden] tensor can take, pos + 4 = 2^32 - 1: the
       frequencies from theta are computed in long double, so the same tolerance holds. */
    for (size_t h = 0; h < sizeof head_dims / sizeof head_dims[0]; h++) {
        rope_case_run(1, head_dims[h], UINT32_MAX - 4, 10000.0f, 0, false, NULL, 1);
        rope_case_run(1, head_dims[h], UINT32_MAX - 4, 500000.0f, 1, true, NULL, 3);
    }
#endif
}

/* Llama-3 scaled frequencies (factor 8, low/high frequency factors 1 and 4, original
   context 8192), and arbitrary ones: negative, tiny, and beyond one turn per token. */
static void llama3_freqs(uint32_t hd, float *f)
{
    const double pi = 3.14159265358979323846;
    double factor = 8, lo = 1, hi = 4, ctx = 8192, lo_wl = ctx / lo, hi_wl = ctx / hi;
    for (uint32_t i = 0; i < hd / 2; i++) {
        double fr = pow(500000.0, -2.0 * i / hd), wl = 2 * pi / fr, v;
        if (wl < hi_wl) v = fr;
        else if (wl > lo_wl) v = fr / factor;
        else {
            double smooth = (ctx / wl - lo) / (hi - lo);
            v = (1 - smooth) * fr / factor + smooth * fr;
        }
        f[i] = (float)v;
    }
}

static void test_inv_freq(void)
{
    static const uint32_t hds[] = { 2, 6, 8, 64, 128, 256 };
    for (size_t h = 0; h < sizeof hds / sizeof hds[0]; h++) {
        uint32_t hd = hds[h];
        float *f = th_alloc_f(hd / 2);
        for (int which = 0; which < 2; which++) {
            if (which == 0) llama3_freqs(hd, f);
            else
                for (uint32_t i = 0; i < hd / 2; i++) {
                    int k = (int)(th_rand_u32() % 4);
                    f[i] = (float)(k == 0 ? -th_uniform(0, 1) : k == 1 ? th_uniform(0, 1e-7) : k == 2 ? th_uniform(6.3, 1000)
                                                                                            : th_uniform(0, 1));
                }
            for (size_t q = 0; q < sizeof positions / sizeof positions[0]; q++)
                for (int kind = 0; kind < 4; kind++)
                    for (int il = 0; il < 2; il++) rope_case_run(kind, hd, positions[q], 0, il, (kind + il) % 2, f, 3);
            /* the largest positions a [seq, hidden] tensor can take (pos + 4 = 2^32 - 1) */
            rope_case_run(1, hd, UINT32_MAX - 4, 0, which, false, f, 3);
        }
        free(f);
    }
}

/* Each sequence at its own position (opts.positions): bit for bit what rotating each
   sequence alone at that position gives (the single-position path is checked against the
   reference above), for both pairings, the vec4 and scalar layouts, theta and inv_freq. */
static void test_positions(void)
{
    static const uint32_t hds[] = { 6, 8, 64, 128 };
    const size_t B = 5, T = 3, H = 3;
    uint32_t pos[5] = { 0, 17, 4096, 1u << 20, UINT32_MAX - 8 };
    wgml_tensor *tp = th_tensor(WGML_U32, pos, TH_SHAPE(B));
    for (size_t h = 0; h < sizeof hds / sizeof hds[0]; h++)
        for (int il = 0; il < 2; il++)
            for (int freqs = 0; freqs < 2; freqs++) {
                uint32_t hd = hds[h];
                size_t per = T * H * hd, n = B * per;
                float *x = th_random(n, -1, 1), *f = th_random(hd / 2, 0, 1);
                wgml_tensor *tf = th_tensor(WGML_F32, f, TH_SHAPE(hd / 2));
                wgml_tensor *all = th_tensor(WGML_F32, x, TH_SHAPE(B, T, H, hd));
                wgml_rope_options o = { .head_dim = hd, .theta = 500000, .pairing = il ? WGML_ROPE_INTERLEAVED : WGML_ROPE_ROTATE_HALF,
                                        .inv_freq = freqs ? tf : NULL, .positions = tp };
                TH_EXPECT(wgml_rope_with(th_eng, all, &o), WGML_OK);
                float *got = th_read(all);
                size_t bad = 0;
                for (size_t b = 0; b < B; b++) {
                    wgml_tensor *one = th_tensor(WGML_F32, x + b * per, TH_SHAPE(1, T, H, hd));
                    wgml_rope_options ob = o;
                    ob.positions = NULL;
                    ob.pos = pos[b];
                    TH_EXPECT(wgml_rope_with(th_eng, one, &ob), WGML_OK);
                    float *want = th_read(one);
                    bad += memcmp(want, got + b * per, per * sizeof(float)) != 0;
                    free(want);
                    wgml_tensor_release(one);
                }
                TH_CHECK(bad == 0, "head_dim %u %s%s: %zu of %zu sequences differ from their own rotation", hd,
                         il ? "interleaved" : "rotate-half", freqs ? " inv_freq" : "", bad, B);
                free(got); free(x); free(f);
                wgml_tensor_release(all);
                wgml_tensor_release(tf);
            }
    /* bad positions */
    wgml_tensor *t = th_poisoned(WGML_F32, TH_SHAPE(4, 2, 8));
    wgml_tensor *p3 = th_tensor(WGML_U32, pos, TH_SHAPE(3)), *pf = th_poisoned(WGML_F32, TH_SHAPE(4));
    wgml_tensor *p4 = th_tensor(WGML_U32, pos, TH_SHAPE(4));
    TH_EXPECT_ERR(wgml_rope_with(th_eng, t, &(wgml_rope_options){ .head_dim = 8, .positions = p3 }), WGML_ERROR_SHAPE, "one per sequence");
    TH_EXPECT_ERR(wgml_rope_with(th_eng, t, &(wgml_rope_options){ .head_dim = 8, .positions = pf }), WGML_ERROR_DTYPE, "positions");
    TH_EXPECT_ERR(wgml_rope_with(th_eng, t, &(wgml_rope_options){ .head_dim = 8, .pos = 1, .positions = p4 }),
                  WGML_ERROR_INVALID_ARGUMENT, "exclusive");
    wgml_tensor_release(t); wgml_tensor_release(p3); wgml_tensor_release(pf); wgml_tensor_release(p4);
    wgml_tensor_release(tp);
}

/* inverse(rope(x)) == x, and rope_backward == rope_with(inverse), for both pairings: two
   rotations, the second of a vector at most sqrt(2) times larger, so k = 2.5. */
static void test_inverse_roundtrip(void)
{
    static const uint32_t hds[] = { 2, 10, 64, 128 };
    for (size_t h = 0; h < sizeof hds / sizeof hds[0]; h++)
        for (int il = 0; il < 2; il++)
            for (size_t q = 0; q < sizeof positions / sizeof positions[0]; q++) {
                rope_case p = { .what = ROUNDTRIP, .L = make_layout(2, hds[h]), .hd = hds[h], .pos = positions[q],
                                .theta = 10000.0f, .interleaved = il, .k = 2.5 };
                run_rope(&p, -3, 3);
            }
}

/* rope_backward against central differences of L = sum(g * rope(x)) in double; g in
   [-1, 1]. */
static void test_backward_finite_differences(void)
{
    static const uint32_t hds[] = { 2, 8, 6 };
    for (size_t h = 0; h < sizeof hds / sizeof hds[0]; h++) {
        rope_case p = { .what = BACKWARD_FD, .L = make_layout(1, hds[h]), .hd = hds[h], .pos = 999983, .theta = 10000.0f,
                        .k = 1.1 };
        run_rope(&p, -1, 1);
    }
}

/* More workgroups than one grid dimension holds: head_dim 2 and one head per token puts
   256 tokens in a workgroup, so 65535 * 256 + 200 tokens need a 2-D grid (and just fit
   lavapipe's 128 MiB binding limit). Written out by hand: rotated in place in its one
   tensor, where a table case would write and read 128 MiB three more times. */
static void test_grid_2d(void)
{
    size_t ntok = 65535u * 256u + 200u, n = 2 * ntok;
    wgml_adapter_info info;
    wgml_context_info(th_ctx, &info);
    TH_CHECK(n * 4 <= info.max_storage_buffer_binding_size, "the 2-D grid case does not fit this adapter");
    if (n * 4 > info.max_storage_buffer_binding_size) return;
    float *x = th_random(n, -1, 1);
    long double freqs[1];
    ref_rope_freqs(10000.0, 2, freqs);
    double *ref = th_alloc_d(n);
    ref_rope(x, ntok, ntok, 2, 2, 5, freqs, 0, 0, ref);
    wgml_tensor *t = th_tensor(WGML_F32, x, TH_SHAPE(ntok, 2));
    TH_EXPECT(wgml_rope(th_eng, t, 2, 5), WGML_OK);
    float *got = th_read(t);
    compare_rot("rope over a 2-D grid", got, x, ref, n, 2, 0, 1);
    free(x); free(ref); free(got);
    wgml_tensor_release(t);
}

/* A prefill-sized tensor: [1, 300, 32, 128] at a large position. */
static void test_prefill(void)
{
    rope_case p = { .what = ROTATE, .L = { { 1, 300, 32, 128 }, 300, 300, 4096 }, .hd = 128, .pos = 123457,
                    .theta = 500000.0f, .api = 1, .k = 1 };
    run_rope(&p, -1, 1);
}

/* Tokens of 20 heads: for head_dim 64..256 a token has more heads than head groups, and
   20 is not a multiple of the group count, so threads rotate 1, 2 or 3 heads (the vec4
   paths load each next head before storing the current one). Both pairings, forward and
   inverse, frequencies from theta and from an inv_freq tensor. */
static void test_many_heads(void)
{
    static const uint32_t hds[] = { 8, 64, 128, 256 };
    for (size_t h = 0; h < sizeof hds / sizeof hds[0]; h++)
        for (int pairing = 0; pairing < 2; pairing++)
            for (int use_freqs = 0; use_freqs < 2; use_freqs++) {
                uint32_t hd = hds[h];
                size_t hidden = 20 * (size_t)hd;
                float *f = th_alloc_f(hd / 2);
                llama3_freqs(hd, f);
                rope_case p = { .what = ROTATE, .L = { { 2, 3, hidden }, 6, 3, hidden }, .hd = hd, .pos = 4099,
                                .theta = 500000.0f, .interleaved = pairing, .inverse = (h + (size_t)pairing) % 2 == 1,
                                .inv_freq = use_freqs ? f : NULL, .api = 3, .k = 1 };
                run_rope(&p, -2, 2);
                free(f);
            }
}

static void test_bad_inputs(void)
{
    float z[64];
    for (int i = 0; i < 64; i++) z[i] = (float)i;
    wgml_tensor *t = th_tensor(WGML_F32, z, TH_SHAPE(4, 16)), *u = th_tensor(WGML_U32, z, TH_SHAPE(64));
    wgml_tensor *f4 = th_tensor(WGML_F32, z, TH_SHAPE(4)), *f8 = th_tensor(WGML_F32, z, TH_SHAPE(8));
    wgml_tensor *fu = th_tensor(WGML_U32, z, TH_SHAPE(4));
    wgml_context *other;
    TH_EXPECT(wgml_context_create(NULL, &other), WGML_OK);
    wgml_tensor *foreign, *foreign_f;
    TH_EXPECT(wgml_tensor_from_data(other, WGML_F32, 1, (size_t[]){ 64 }, z, &foreign), WGML_OK);
    TH_EXPECT(wgml_tensor_from_data(other, WGML_F32, 1, (size_t[]){ 4 }, z, &foreign_f), WGML_OK);
    uint64_t before = th_commands();
    wgml_rope_options o = { .head_dim = 8 };
    TH_EXPECT_ERR(wgml_rope(NULL, t, 8, 0), WGML_ERROR_INVALID_ARGUMENT, "engine");
    TH_EXPECT_ERR(wgml_rope(th_eng, NULL, 8, 0), WGML_ERROR_INVALID_ARGUMENT, "tensor is NULL");
    TH_EXPECT_ERR(wgml_rope(th_eng, u, 8, 0), WGML_ERROR_DTYPE, "tensor is u32");
    TH_EXPECT_ERR(wgml_rope(th_eng, foreign, 8, 0), WGML_ERROR_CONTEXT, "tensor belongs to another context");
    TH_EXPECT_ERR(wgml_rope(th_eng, t, 7, 0), WGML_ERROR_INVALID_ARGUMENT, "head_dim (7) must be even");
    TH_EXPECT_ERR(wgml_rope(th_eng, t, 0, 0), WGML_ERROR_INVALID_ARGUMENT, "head_dim (0)");
    TH_EXPECT_ERR(wgml_rope(th_eng, t, 258, 0), WGML_ERROR_INVALID_ARGUMENT, "head_dim (258)");
    TH_EXPECT_ERR(wgml_rope(th_eng, t, 12, 0), WGML_ERROR_SHAPE, "not a multiple of head_dim (12)");
    TH_EXPECT_ERR(wgml_rope(th_eng, t, 32, 0), WGML_ERROR_SHAPE, "not a multiple of head_dim (32)");
    TH_EXPECT_ERR(wgml_rope(th_eng, t, 8, UINT32_MAX - 2), WGML_ERROR_INVALID_ARGUMENT, "pos");
    TH_EXPECT_ERR(wgml_rope_theta(th_eng, t, 8, 0, 0.0f), WGML_ERROR_INVALID_ARGUMENT, "theta (0)");
    TH_EXPECT_ERR(wgml_rope_theta(th_eng, t, 8, 0, 0.5f), WGML_ERROR_INVALID_ARGUMENT, "theta (0.5)");
    TH_EXPECT_ERR(wgml_rope_theta(th_eng, t, 8, 0, -10000.0f), WGML_ERROR_INVALID_ARGUMENT, "theta");
    TH_EXPECT_ERR(wgml_rope_theta(th_eng, t, 8, 0, NAN), WGML_ERROR_INVALID_ARGUMENT, "theta");
    TH_EXPECT_ERR(wgml_rope_theta(th_eng, t, 8, 0, INFINITY), WGML_ERROR_INVALID_ARGUMENT, "theta");
    TH_EXPECT_ERR(wgml_rope_backward(th_eng, t, 8, 0, 0.0f), WGML_ERROR_INVALID_ARGUMENT, "theta (0)");
    TH_EXPECT_ERR(wgml_rope_backward(th_eng, t, 9, 0, 10000.0f), WGML_ERROR_INVALID_ARGUMENT, "head_dim (9)");
    TH_EXPECT_ERR(wgml_rope_with(th_eng, t, NULL), WGML_ERROR_INVALID_ARGUMENT, "opts is NULL");
    o.pairing = (wgml_rope_pairing)2;
    TH_EXPECT_ERR(wgml_rope_with(th_eng, t, &o), WGML_ERROR_INVALID_ARGUMENT, "pairing (2)");
    o.pairing = WGML_ROPE_INTERLEAVED;
    o.theta = -1;
    TH_EXPECT_ERR(wgml_rope_with(th_eng, t, &o), WGML_ERROR_INVALID_ARGUMENT, "theta (-1)");
    o.theta = 0;
    o.inv_freq = f8;
    TH_EXPECT_ERR(wgml_rope_with(th_eng, t, &o), WGML_ERROR_SHAPE, "inv_freq has 8 elements");
    o.inv_freq = fu;
    TH_EXPECT_ERR(wgml_rope_with(th_eng, t, &o), WGML_ERROR_DTYPE, "inv_freq is u32");
    o.inv_freq = foreign_f;
    TH_EXPECT_ERR(wgml_rope_with(th_eng, t, &o), WGML_ERROR_CONTEXT, "inv_freq belongs to another context");
    o.inv_freq = f4;
    o.head_dim = 3;
    TH_EXPECT_ERR(wgml_rope_with(th_eng, t, &o), WGML_ERROR_INVALID_ARGUMENT, "head_dim (3)");
    o.head_dim = 8;
    wgml_tensor *t4 = th_tensor(WGML_F32, z, TH_SHAPE(4));   /* [hidden 4] with head_dim 8 */
    TH_EXPECT_ERR(wgml_rope_with(th_eng, t4, &o), WGML_ERROR_SHAPE, "hidden size of tensor (4)");
    o.head_dim = 2;
    o.inv_freq = NULL;
    wgml_tensor *one = th_tensor(WGML_F32, z, TH_SHAPE(1));
    TH_EXPECT_ERR(wgml_rope_with(th_eng, one, &o), WGML_ERROR_SHAPE, "hidden size of tensor (1)");
    TH_CHECK(th_commands() == before, "rejected calls recorded %llu commands", (unsigned long long)(th_commands() - before));
    float got[64];
    th_read_into(t, got);
    TH_CHECK(memcmp(got, z, sizeof z) == 0, "a rejected call changed tensor");
    wgml_tensor_release(foreign); wgml_tensor_release(foreign_f);
    wgml_context_destroy(other);
    wgml_tensor_release(t); wgml_tensor_release(u); wgml_tensor_release(f4); wgml_tensor_release(f8);
    wgml_tensor_release(fu); wgml_tensor_release(t4); wgml_tensor_release(one);
}

/* The same kernels on a context with Dawn's robustness (bounds clamping, workgroup
   zeroing: wgml_context_desc.robust), the opt-in debugging mode; the rest of this file
   runs without it, the default. */
static void test_robust(void)
{
    wgml_context *ctx;
    wgml_engine *eng;
    TH_EXPECT(wgml_context_create(&(wgml_context_desc){ .robust = true }, &ctx), WGML_OK);
    TH_EXPECT(wgml_engine_create(ctx, &eng), WGML_OK);
    for (int variant = 0; variant < 3; variant++) {
        uint32_t hd = variant == 2 ? 6 : 128, pos = 1000003;
        layout L = make_layout(3, hd);
        size_t n = L.ntok * L.hidden;
        float *x = th_random(n, -2, 2), f[64];
        llama3_freqs(hd, f);
        long double freqs[64];
        if (variant == 1) for (uint32_t i = 0; i < hd / 2; i++) freqs[i] = f[i];
        else ref_rope_freqs(10000.0, hd, freqs);
        double *ref = th_alloc_d(n);
        ref_rope(x, L.ntok, L.seq, L.hidden, hd, pos, freqs, variant == 2, 0, ref);
        wgml_tensor *t, *tf = NULL;
        uint32_t nd = 0;
        while (L.shape[nd]) nd++;
        TH_EXPECT(wgml_tensor_from_data(ctx, WGML_F32, nd, L.shape, x, &t), WGML_OK);
        size_t half = hd / 2;
        if (variant == 1) TH_EXPECT(wgml_tensor_from_data(ctx, WGML_F32, 1, &half, f, &tf), WGML_OK);
        wgml_rope_options o = { .head_dim = hd, .pos = pos, .pairing = variant == 2, .inv_freq = tf };
        TH_EXPECT(wgml_rope_with(eng, t, &o), WGML_OK);
        float *got = th_alloc_f(n);
        TH_EXPECT(wgml_tensor_read(t, 0, got, n * 4), WGML_OK);
        char what[64];
        snprintf(what, sizeof what, "robust rope variant %d", variant);
        compare_rot(what, got, x, ref, n, hd, variant == 2, 1);
        free(x); free(ref); free(got);
        wgml_tensor_release(t);
        wgml_tensor_release(tf);
    }
    wgml_engine_destroy(eng);
    wgml_context_destroy(ctx);
}

static const th_case cases[] = {
    { "theta", test_theta },
    { "positions", test_positions },
    { "inv_freq", test_inv_freq },
    { "inverse_roundtrip", test_inverse_roundtrip },
    { "backward_finite_differences", test_backward_finite_differences },
    { "prefill", test_prefill },
    { "grid_2d", test_grid_2d },
    { "robust", test_robust },
    { "many_heads", test_many_heads },
    { "bad_inputs", test_bad_inputs },
};
TH_MAIN(cases)
