/* Attention at wgml_precision F16 (wgml_attention_options.precision, else the context's
   matmul_precision): the forward and the backward against the double reference
   (tests/ref/ref_attention.c), with tolerances derived at check_f16_attention and
   check_f16_backward; which path ran, and the refusal of an out-of-enum precision.

   Where the device has f16 subgroup matrices (wgml_adapter_info.matrix_m) these run on them
   (src/kernels/attention_mma.wgsl); elsewhere on the f32 kernels, and the same tolerances
   hold (they are looser than the f32 kernels' errors). An f16 overflow (v holding 70000)
   tells the paths apart: inf on the matrix units, finite on the f32 kernels. */
#include "harness.h"
#include "ref_attention.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define U (1.0 / 16777216.0)
#define R16 (1.0 / 1024.0)   /* an f16 rounding to either neighbour: 2^-10 relative */

static bool has_matrices(void)
{
    wgml_adapter_info in;
    wgml_context_info(th_ctx, &in);
    return in.matrix_m != 0;
}

/* ---- attention at F16 ------------------------------------------------------------------ */

/* One problem of test_attention_f16: shape, options (mask: a 2-D [seq_q, seq_k] mask with
   some entries -inf; lse: the log-sum-exp too). */
typedef struct f16_attn {
    size_t b, sq, sk, h, kvh, d;
    bool causal;
    uint32_t offset, window;
    float p;
    bool mask, lse;
    bool ramp;   /* k of key j scaled by 1 + j / 4: the scores grow along the keys, so that each
                    row's maximum lies in its last block and the earlier blocks' P are tiny */
} f16_attn;

/* k ramped (c->ramp) and the mask (c->mask: f32 and double, about a tenth -inf, row 0
   wholly) of a problem; *mask, *mask_d stay NULL without one. */
static void shape_inputs(const f16_attn *c, float *k, float **mask, double **mask_d)
{
    size_t nk = c->b * c->sk * c->kvh * c->d;
    if (c->ramp)
        for (size_t x = 0; x < nk; x++) k[x] *= 1.0f + (float)(x / (c->kvh * c->d) % c->sk) / 4.0f;
    if (!c->mask) return;
    *mask = th_random(c->sq * c->sk, -3, 3);
    *mask_d = th_alloc_d(c->sq * c->sk);
    for (size_t x = 0; x < c->sq * c->sk; x++) {
        if (th_uniform(0, 1) < 0.1) (*mask)[x] = -INFINITY;
        (*mask_d)[x] = (*mask)[x];
    }
    for (size_t j = 0; j < c->sk; j++) (*mask)[j] = (*mask_d)[j] = -INFINITY;   /* row 0 sees no key */
}

/* The bound of query row (bh, i) of attention at F16 (see test_attention_f16): E, the
   largest error of its visible scores in natural units (exp2's own included). */
static double score_bound(const f16_attn *c, const ref_attn *a, const float *q, const float *k, const double *mask, size_t bb,
                          size_t h, size_t i)
{
    double e = 0;
    size_t kvh = h / (c->h / c->kvh);
    for (size_t j = 0; j < c->sk; j++) {
        double s = 0;
        for (size_t d = 0; d < c->d; d++)
            s += fabs((double)q[((bb * c->sq + i) * c->h + h) * c->d + d] * k[((bb * c->sk + j) * c->kvh + kvh) * c->d + d]);
        double mk = mask ? fabs(mask[i * c->sk + j]) : 0;
        if (isinf(mk)) mk = 0;
        double x = (ldexp(1, -9) + ldexp(1, -19) + (double)(c->d + 4) * U) * a->scale * s + 2 * U * mk;
        if (x > e) e = x;
    }
    return e + ldexp(1, -16);
}

/* Attention's forward at F16 against the double reference. Where the device has f16
   subgroup matrices it runs prefill_mma (src/kernels/attention_mma.wgsl): q * scale, k, v
   and the probabilities P rounded to f16 (each to either neighbour, 2^-10 relative),
   f32 sums. Tolerance per output row, with u = 2^-24, V = max|v| and ds the dropout scale:
   - a score's error is at most E = (2^-9 + 2^-19 + (d + 4) u) scale sum_d |q_d k_d| (the
     rounding of q * scale and k, the f32 dot product) + 2 u |mask| (its addition), plus
     2^-16 for exp2's relative error (3 + 2|x| ulp over the range where P is not 0);
   - scores off by at most E change each softmax weight by a factor within e^(+-2E), so the
     weighted sum of v moves by at most (e^(2E) - 1) V ds;
   - rounding P and v to f16 and the f32 sums of P v and of l (seq_k terms each) add
     ((1 + 2^-10)^2 (1 + (2 seq_k + 2) u) - 1) V ds, and P below f16's normal range an
     absolute 2^-25 per key (l >= 1: its largest P is 1);
   the log-sum-exp moves by at most E + (seq_k + 8) u (1 + |lse|). The same bounds hold on
   the f32 kernels (another device, or the npm runtime), which are far more accurate. */
static void check_f16_attention(const f16_attn *c)
{
    size_t nq = c->b * c->sq * c->h * c->d, nk = c->b * c->sk * c->kvh * c->d, nl = c->b * c->h * c->sq;
    float *q = th_random(nq, -2, 2), *k = th_random(nk, -2, 2), *v = th_random(nk, -1, 1);
    float *mask = NULL;
    double *mask_d = NULL;
    shape_inputs(c, k, &mask, &mask_d);
    wgml_tensor *tq = th_tensor(WGML_F32, q, TH_SHAPE(c->b, c->sq, c->h, c->d));
    wgml_tensor *tk = th_tensor(WGML_F32, k, TH_SHAPE(c->b, c->sk, c->kvh, c->d));
    wgml_tensor *tv = th_tensor(WGML_F32, v, TH_SHAPE(c->b, c->sk, c->kvh, c->d));
    wgml_tensor *tm = mask ? th_tensor(WGML_F32, mask, TH_SHAPE(c->sq, c->sk)) : NULL;
    wgml_tensor *to = th_poisoned(WGML_F32, TH_SHAPE(c->b, c->sq, c->h, c->d));
    wgml_tensor *tl = c->lse ? th_poisoned(WGML_F32, TH_SHAPE(c->b, c->h, c->sq)) : NULL;
    uint64_t seed = 0x5eed0001;
    wgml_attention_options o = { .causal = c->causal, .causal_offset = c->offset, .window = c->window, .dropout_prob = c->p,
                                 .seed = seed, .lse = tl, .precision = WGML_PRECISION_F16 };
    TH_EXPECT(wgml_flash_attention_v2_with(th_eng, tq, tk, tv, to, &o, tm), WGML_OK);
    float *got = th_read(to), *got_l = tl ? th_read(tl) : NULL;

    ref_attn a = { .batch = c->b, .seq_q = c->sq, .seq_k = c->sk, .heads = c->h, .kv_heads = c->kvh, .dim = c->d,
                   .causal = c->causal, .offset = c->offset, .window = c->window, .dropout = c->p, .seed = seed,
                   .scale = 1.0 / sqrt((double)c->d), .mask = mask_d, .mask_shape = { 1, 1, c->sq, c->sk } };
    double *qd = th_alloc_d(nq), *kd = th_alloc_d(nk), *vd = th_alloc_d(nk), *want = th_alloc_d(nq), *want_l = th_alloc_d(nl);
    double vmax = 0;
    for (size_t x = 0; x < nq; x++) qd[x] = q[x];
    for (size_t x = 0; x < nk; x++) kd[x] = k[x], vd[x] = v[x], vmax = fmax(vmax, fabs(v[x]));
    ref_attn_forward(&a, qd, kd, vd, want);
    ref_attn_lse(&a, qd, kd, want_l);
    double ds = 1.0 / (1.0 - (double)c->p), worst = 0;
    size_t bad = 0, bad_l = 0;
    for (size_t bb = 0; bb < c->b; bb++)
        for (size_t h = 0; h < c->h; h++)
            for (size_t i = 0; i < c->sq; i++) {
                double e = score_bound(c, &a, q, k, mask_d, bb, h, i);
                double tol = vmax * ds * (expm1(2 * e) + pow(1 + ldexp(1, -10), 2) * (1 + (2.0 * c->sk + 2) * U) - 1 +
                                          (double)c->sk * ldexp(1, -25));
                for (size_t d = 0; d < c->d; d++) {
                    size_t x = ((bb * c->sq + i) * c->h + h) * c->d + d;
                    double err = fabs((double)got[x] - want[x]);
                    if (!(err <= tol)) {
                        if (bad++ < 5) printf("out (%zu, %zu, %zu, %zu): %.9g, want %.9g, tol %.3g\n", bb, i, h, d, got[x], want[x], tol);
                    }
                    if (tol > 0 && err / tol > worst) worst = err / tol;
                }
                if (got_l) {
                    size_t x = (bb * c->h + h) * c->sq + i;
                    double w = want_l[x], g = got_l[x];
                    bool ok = isinf(w) ? g == w : fabs(g - w) <= e + (c->sk + 8.0) * U * (1 + fabs(w));
                    if (!ok && bad_l++ < 5) printf("lse (%zu, %zu, %zu): %.9g, want %.9g\n", bb, h, i, g, w);
                }
            }
    TH_CHECK(bad == 0 && bad_l == 0, "attention F16 b%zu sq%zu sk%zu h%zu/%zu d%zu: %zu outputs and %zu lse out of bounds", c->b,
             c->sq, c->sk, c->h, c->kvh, c->d, bad, bad_l);
    printf("attention F16 b%zu sq%zu sk%zu h%zu/%zu d%zu: worst error %.3f of its bound\n", c->b, c->sq, c->sk, c->h, c->kvh, c->d,
            worst);
    free(q), free(k), free(v), free(mask), free(mask_d), free(got), free(got_l);
    free(qd), free(kd), free(vd), free(want), free(want_l);
    wgml_tensor_release(tq), wgml_tensor_release(tk), wgml_tensor_release(tv), wgml_tensor_release(tm);
    wgml_tensor_release(to), wgml_tensor_release(tl);
}

/* The problems of both directions: each runs on the matrix units where they have
   head_dim's result matrices (the backward holds at most 8 per output: head_dim 64 with
   8 x 8 matrices, 128 with 16 x 16), else on the f32 kernels. */
static const f16_attn f16_cases[] = {
    { 2, 37, 53, 4, 2, 24, true, 16, 0, 0, false, true },      /* GQA, causal with an offset, ragged blocks */
    { 1, 70, 70, 2, 1, 30, true, 0, 20, 0.2f, true, true },   /* head_dim % 4 == 2, window, mask, dropout */
    { 1, 5, 100, 3, 3, 64, false, 0, 0, 0, false, false },    /* few queries, many keys */
    { 1, 33, 41, 1, 1, 128, false, 0, 0, 0, true, false },    /* the widest head */
    { 3, 9, 9, 2, 2, 2, true, 0, 0, 0, false, true },         /* the narrowest head */
    { 1, 40, 200, 2, 1, 32, false, 0, 0, 0, false, true, true },    /* scores rising along the keys */
    { 1, 70, 150, 2, 2, 16, true, 80, 0, 0.3f, true, true, true },  /* the same, causal, masked, dropped */
};

static void test_attention_f16(void)
{
    for (size_t i = 0; i < sizeof f16_cases / sizeof *f16_cases; i++) check_f16_attention(&f16_cases[i]);
}

/* ---- the backward at F16 ------------------------------------------------------------- */

/* Whether key j is visible to query i (visibility only; the mask's -inf is in the score). */
static bool visible(const f16_attn *c, size_t i, size_t j)
{
    long pos = (long)i + (long)c->offset, jj = (long)j;
    if (c->causal && jj > pos) return false;
    if (c->window && labs(pos - jj) >= (long)c->window) return false;
    return true;
}

/* The error coefficient of one term x y of an f32 sum of n terms whose x is off by at most
   dx and whose y is rounded to f16 (either neighbour) on the way: the term errs by at most
   coef |y|, with the sum's own rounding (n u of its magnitudes) included. */
static double term_coef(double x, double dx, double n)
{
    double ax = fabs(x);
    return dx * (1 + R16) + ax * R16 + n * U * (ax + dx) * (1 + R16);
}

/* Attention's backward at F16 against the double reference. On the matrix units
   (mb_dkdv, mb_dq) q * scale log2 e, k, v, dout, Z P and dS are rounded to f16 and every
   sum is f32; P, dP and D stay f32, lse and D come from the statistics pass (f32). Per
   visible pair (i, j), with P, dP, D, dS = P (Z dP - D) the exact values, z the dropout
   factor (0 or ds), E the forward's score bound of row i (score_bound) and u = 2^-24:
   - the log-sum-exp the backward reads errs by at most L = E + (seq_k + 8) u (1 + |lse|)
     (the forward test's bound on it, which covers the f32 statistics pass and the given
     one), so P~ = exp2(S~ - lse~) is within a factor e^(+-(E + L)): |P~ - P| <= P a with
     a = e^(E + L) - 1;
   - dP~ errs by at most F = ((1 + 2^-10)^2 (1 + (d + 2) u) - 1) sum_d |dout v| (dout and v
     rounded to f16, an f32 sum), D by G = (d + 3) u sum_d |dout out| (out given in f32);
   - dS~ = P~ (z dP~ - D~) then errs by t = P a |z dP - D| + P (1 + a) (z F + G) before its
     own rounding, and by dS_err = t + (2^-10 + 3u) (|dS| + t) + 2^-24 after it (the last
     term: f16's subnormal step);
   - dq = scale sum_j dS~ k~ (f16 k, an f32 sum over at most seq_k + 2 MB_BC terms) errs by
     scale sum_j term_coef(dS, dS_err) |k|; dk = LN2 sum_i dS~ (q scale log2 e)~ likewise
     over the group's queries with the rounding of q's scaled copy (2^-10 + 3u); dv = ds
     sum_i (Z P)~ dout~ with (Z P)~ off by P a + 2^-10 P (1 + a) + 2^-24.
   Hidden pairs add nothing (their P~ is exactly 0). */
static void check_f16_backward(const f16_attn *c)
{
    size_t nq = c->b * c->sq * c->h * c->d, nk = c->b * c->sk * c->kvh * c->d, nl = c->b * c->h * c->sq;
    size_t group = c->h / c->kvh;
    float *q = th_random(nq, -2, 2), *k = th_random(nk, -2, 2), *v = th_random(nk, -1, 1), *dout = th_random(nq, -1, 1);
    float *mask = NULL;
    double *mask_d = NULL;
    shape_inputs(c, k, &mask, &mask_d);
    uint64_t seed = 0x5eed0002;
    ref_attn a = { .batch = c->b, .seq_q = c->sq, .seq_k = c->sk, .heads = c->h, .kv_heads = c->kvh, .dim = c->d,
                   .causal = c->causal, .offset = c->offset, .window = c->window, .dropout = c->p, .seed = seed,
                   .scale = 1.0 / sqrt((double)c->d), .mask = mask_d, .mask_shape = { 1, 1, c->sq, c->sk } };
    double *qd = th_alloc_d(nq), *kd = th_alloc_d(nk), *vd = th_alloc_d(nk), *dod = th_alloc_d(nq), *outd = th_alloc_d(nq);
    double *lsed = th_alloc_d(nl), *dqd = th_alloc_d(nq), *dkd = th_alloc_d(nk), *dvd = th_alloc_d(nk);
    for (size_t x = 0; x < nq; x++) qd[x] = q[x], dod[x] = dout[x];
    for (size_t x = 0; x < nk; x++) kd[x] = k[x], vd[x] = v[x];
    ref_attn_forward(&a, qd, kd, vd, outd);
    ref_attn_lse(&a, qd, kd, lsed);
    ref_attn_backward(&a, qd, kd, vd, dod, dqd, dkd, dvd);
    float *out = th_alloc_f(nq), *lse = th_alloc_f(nl);
    for (size_t x = 0; x < nq; x++) out[x] = (float)outd[x];
    for (size_t x = 0; x < nl; x++) lse[x] = (float)lsed[x];

    wgml_tensor *tq = th_tensor(WGML_F32, q, TH_SHAPE(c->b, c->sq, c->h, c->d));
    wgml_tensor *tk = th_tensor(WGML_F32, k, TH_SHAPE(c->b, c->sk, c->kvh, c->d));
    wgml_tensor *tv = th_tensor(WGML_F32, v, TH_SHAPE(c->b, c->sk, c->kvh, c->d));
    wgml_tensor *to = th_tensor(WGML_F32, out, TH_SHAPE(c->b, c->sq, c->h, c->d));
    wgml_tensor *tdo = th_tensor(WGML_F32, dout, TH_SHAPE(c->b, c->sq, c->h, c->d));
    wgml_tensor *tm = mask ? th_tensor(WGML_F32, mask, TH_SHAPE(c->sq, c->sk)) : NULL;
    wgml_tensor *tl = c->lse ? th_tensor(WGML_F32, lse, TH_SHAPE(c->b, c->h, c->sq)) : NULL;
    wgml_tensor *tdq = th_poisoned(WGML_F32, TH_SHAPE(c->b, c->sq, c->h, c->d));
    wgml_tensor *tdk = th_poisoned(WGML_F32, TH_SHAPE(c->b, c->sk, c->kvh, c->d));
    wgml_tensor *tdv = th_poisoned(WGML_F32, TH_SHAPE(c->b, c->sk, c->kvh, c->d));
    wgml_attention_options o = { .causal = c->causal, .causal_offset = c->offset, .window = c->window, .dropout_prob = c->p,
                                 .seed = seed, .lse = tl, .precision = WGML_PRECISION_F16 };
    TH_EXPECT(wgml_flash_attention_v2_backward_with(th_eng, tq, tk, tv, to, tdo, tdq, tdk, tdv, &o, tm), WGML_OK);
    float *got_q = th_read(tdq), *got_k = th_read(tdk), *got_v = th_read(tdv);

    /* the bounds, accumulated per output element over the visible pairs */
    double *tol_q = th_alloc_d(nq), *tol_k = th_alloc_d(nk), *tol_v = th_alloc_d(nk);
    double ds = 1.0 / (1.0 - (double)c->p), scale = a.scale, rq = R16 + 3 * U;
    double nsum_q = c->sk + 64.0, nsum_k = (double)group * c->sq + 64.0;
    for (size_t x = 0; x < nq; x++) tol_q[x] = 0;
    for (size_t x = 0; x < nk; x++) tol_k[x] = tol_v[x] = 0;
    for (size_t bb = 0; bb < c->b; bb++)
        for (size_t h = 0; h < c->h; h++)
            for (size_t i = 0; i < c->sq; i++) {
                size_t bh = bb * c->h + h, kvh = h / group, qo = ((bb * c->sq + i) * c->h + h) * c->d;
                double l = lsed[bh * c->sq + i];
                if (isinf(l)) continue;   /* no visible key: every P is 0 */
                double e = score_bound(c, &a, q, k, mask_d, bb, h, i);
                double al = expm1(2 * e + (c->sk + 8.0) * U * (1 + fabs(l)));
                double dsum = 0, dmag = 0;
                for (size_t d = 0; d < c->d; d++) dsum += dod[qo + d] * outd[qo + d], dmag += fabs(dod[qo + d] * out[qo + d]);
                double g = (c->d + 3.0) * U * dmag;
                for (size_t j = 0; j < c->sk; j++) {
                    if (!visible(c, i, j) || (mask_d && isinf(mask_d[i * c->sk + j]))) continue;
                    size_t ko = ((bb * c->sk + j) * c->kvh + kvh) * c->d;
                    double sc = 0, dp = 0, fmag = 0;
                    for (size_t d = 0; d < c->d; d++) {
                        sc += qd[qo + d] * kd[ko + d];
                        dp += dod[qo + d] * vd[ko + d];
                        fmag += fabs(dod[qo + d] * vd[ko + d]);
                    }
                    sc = sc * scale + (mask_d ? mask_d[i * c->sk + j] : 0);
                    double pr = exp(sc - l);
                    double z = c->p > 0 && !ref_attn_keep(seed, c->p, (uint32_t)bh, (uint32_t)i, (uint32_t)j) ? 0 : ds;
                    double f = (pow(1 + R16, 2) * (1 + (c->d + 2.0) * U) - 1) * fmag;
                    double dsx = pr * (z * dp - dsum);
                    double t = pr * al * fabs(z * dp - dsum) + pr * (1 + al) * (z * f + g);
                    double dse = t + (R16 + 3 * U) * (fabs(dsx) + t) + ldexp(1, -24);
                    double cq = scale * term_coef(dsx, dse, nsum_q);
                    double ck = scale * (term_coef(dsx, dse, nsum_k) + rq * (fabs(dsx) + dse));
                    double cv = z ? ds * term_coef(pr, pr * al + R16 * pr * (1 + al) + ldexp(1, -24), nsum_k) : 0;
                    for (size_t d = 0; d < c->d; d++) {
                        tol_q[qo + d] += cq * fabs(kd[ko + d]);
                        tol_k[ko + d] += ck * fabs(qd[qo + d]);
                        tol_v[ko + d] += cv * fabs(dod[qo + d]);
                    }
                }
            }
    struct { const char *name; const float *got; const double *want, *tol; size_t n; } outs[3] = {
        { "dq", got_q, dqd, tol_q, nq }, { "dk", got_k, dkd, tol_k, nk }, { "dv", got_v, dvd, tol_v, nk } };
    size_t bad = 0;
    double worst = 0;
    for (int w = 0; w < 3; w++)
        for (size_t x = 0; x < outs[w].n; x++) {
            double err = fabs((double)outs[w].got[x] - outs[w].want[x]), tol = outs[w].tol[x] + 1e-30;
            if (!(err <= tol) && bad++ < 5)
                printf("%s[%zu]: %.9g, want %.9g, tol %.3g\n", outs[w].name, x, outs[w].got[x], outs[w].want[x], tol);
            if (tol > 1e-30 && err / tol > worst) worst = err / tol;
        }
    TH_CHECK(bad == 0, "attention backward F16 b%zu sq%zu sk%zu h%zu/%zu d%zu: %zu gradients out of bounds", c->b, c->sq, c->sk,
             c->h, c->kvh, c->d, bad);
    printf("attention backward F16 b%zu sq%zu sk%zu h%zu/%zu d%zu: worst error %.3f of its bound\n", c->b, c->sq, c->sk, c->h,
           c->kvh, c->d, worst);
    free(q), free(k), free(v), free(dout), free(mask), free(mask_d), free(out), free(lse), free(got_q), free(got_k), free(got_v);
    free(qd), free(kd), free(vd), free(dod), free(outd), free(lsed), free(dqd), free(dkd), free(dvd), free(tol_q), free(tol_k),
        free(tol_v);
    wgml_tensor *all[] = { tq, tk, tv, to, tdo, tm, tl, tdq, tdk, tdv };
    for (size_t x = 0; x < sizeof all / sizeof *all; x++) wgml_tensor_release(all[x]);
}

static void test_backward_f16(void)
{
    for (size_t i = 0; i < sizeof f16_cases / sizeof *f16_cases; i++) check_f16_backward(&f16_cases[i]);
}

/* The path of attention at F16 and its precision's sources: v holding 70000 (beyond f16's
   range) is inf on the matrix units, so every output row that weighs that key is inf or
   NaN in that column, and finite on the f32 kernels; the context's default (F16 here)
   applies to options left at DEFAULT, a call's F32 overrides it; an out-of-enum precision
   is refused with nothing written. */
static void test_attention_path(void)
{
    size_t S = 11, D = 8;
    float *q = th_random(S * D, -1, 1), *k = th_random(S * D, -1, 1), *v = th_random(S * D, -1, 1);
    v[0] = 70000.0f;   /* key 0, column 0 */
    wgml_context *ctx;
    wgml_engine *e;
    TH_EXPECT(wgml_context_create(&(wgml_context_desc){ .matmul_precision = WGML_PRECISION_F16 }, &ctx), WGML_OK);
    TH_EXPECT(wgml_engine_create(ctx, &e), WGML_OK);
    wgml_tensor *tq, *tk, *tv, *to;
    TH_EXPECT(wgml_tensor_from_data(ctx, WGML_F32, 4, TH_SHAPE(1, S, 1, D), q, &tq), WGML_OK);
    TH_EXPECT(wgml_tensor_from_data(ctx, WGML_F32, 4, TH_SHAPE(1, S, 1, D), k, &tk), WGML_OK);
    TH_EXPECT(wgml_tensor_from_data(ctx, WGML_F32, 4, TH_SHAPE(1, S, 1, D), v, &tv), WGML_OK);
    TH_EXPECT(wgml_tensor_create(ctx, WGML_F32, 4, TH_SHAPE(1, S, 1, D), &to), WGML_OK);
    bool mma = has_matrices();
    float *got = th_alloc_f(S * D);
    const wgml_precision ps[3] = { WGML_PRECISION_DEFAULT, WGML_PRECISION_F32, WGML_PRECISION_F16X3 };
    for (int x = 0; x < 3; x++) {
        wgml_attention_options o = { .precision = ps[x] };
        TH_EXPECT(wgml_flash_attention_v2_with(e, tq, tk, tv, to, &o, NULL), WGML_OK);
        TH_EXPECT(wgml_tensor_read(to, 0, got, S * D * sizeof *got), WGML_OK);
        size_t bad = 0;
        for (size_t i = 0; i < S; i++)
            for (size_t d = 0; d < D; d++) {
                float g = got[i * D + d];
                bool ok = x == 0 && mma && d == 0 ? !isfinite(g) : isfinite(g);
                bad += !ok;
            }
        TH_CHECK(bad == 0, "precision %d (matrices %s): %zu outputs on the wrong path", (int)ps[x], mma ? "yes" : "no", bad);
    }
    /* the backward: dS of key 0 overflows on the matrix units, so every dq is inf or NaN */
    wgml_tensor *tdq, *tdk, *tdv;
    TH_EXPECT(wgml_tensor_create(ctx, WGML_F32, 4, TH_SHAPE(1, S, 1, D), &tdq), WGML_OK);
    TH_EXPECT(wgml_tensor_create(ctx, WGML_F32, 4, TH_SHAPE(1, S, 1, D), &tdk), WGML_OK);
    TH_EXPECT(wgml_tensor_create(ctx, WGML_F32, 4, TH_SHAPE(1, S, 1, D), &tdv), WGML_OK);
    for (int x = 0; x < 3; x++) {
        wgml_attention_options o = { .precision = ps[x] };
        TH_EXPECT(wgml_flash_attention_v2_backward_with(e, tq, tk, tv, to, to, tdq, tdk, tdv, &o, NULL), WGML_OK);
        TH_EXPECT(wgml_tensor_read(tdq, 0, got, S * D * sizeof *got), WGML_OK);
        size_t bad = 0;
        for (size_t i = 0; i < S * D; i++) bad += (x == 0 && mma) == isfinite(got[i]);
        TH_CHECK(bad == 0, "backward, precision %d (matrices %s): %zu gradients on the wrong path", (int)ps[x], mma ? "yes" : "no",
                 bad);
    }
    wgml_tensor_release(tdq), wgml_tensor_release(tdk), wgml_tensor_release(tdv);
    wgml_tensor_release(tq), wgml_tensor_release(tk), wgml_tensor_release(tv), wgml_tensor_release(to);
    wgml_engine_destroy(e);
    wgml_context_destroy(ctx);

    tq = th_tensor(WGML_F32, q, TH_SHAPE(1, S, 1, D));
    tk = th_tensor(WGML_F32, k, TH_SHAPE(1, S, 1, D));
    tv = th_tensor(WGML_F32, v, TH_SHAPE(1, S, 1, D));
    to = th_poisoned(WGML_F32, TH_SHAPE(1, S, 1, D));
    uint64_t before = th_commands();
    TH_EXPECT_ERR(wgml_flash_attention_v2_with(th_eng, tq, tk, tv, to, &(wgml_attention_options){ .precision = (wgml_precision)7 },
                                               NULL),
                  WGML_ERROR_INVALID_ARGUMENT, "precision");
    TH_CHECK(th_commands() == before, "a refused call recorded commands");
    free(q), free(k), free(v), free(got);
    wgml_tensor_release(tq), wgml_tensor_release(tk), wgml_tensor_release(tv), wgml_tensor_release(to);
}

static const th_case cases[] = {
    { "attention_f16", test_attention_f16 },
    { "backward_f16", test_backward_f16 },
    { "attention_path", test_attention_path },
};
TH_MAIN(cases)
