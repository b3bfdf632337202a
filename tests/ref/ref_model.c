/* The CPU reference of the decoder (see ref_model.h): forward and backward in double. */
#include "ref_model.h"
#include "ref_dropout.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool is_conv(const ref_model_shape *s, int l) { return s->conv_kernel && s->conv[l]; }
static int layer_count(const ref_model_shape *s, int l) { return is_conv(s, l) ? 8 : REF_PER_LAYER; }
static const int conv_order[8] = { REF_ATTN_NORM, REF_CONV_IN, REF_CONV_W, REF_CONV_OUT, REF_FFN_NORM, REF_WG, REF_WU, REF_WD };
static int layer_start(const ref_model_shape *s, int layer)
{
    int at = 1;
    for (int l = 0; l < layer; l++) at += layer_count(s, l);
    return at;
}
static int llama_count(const ref_model_shape *s) { return layer_start(s, s->layers) + 1 + (s->tied ? 0 : 1); }
static int extras_of(const ref_model_shape *s, int l)
{
    return is_conv(s, l) ? 0 : (s->qkv_bias ? 3 : 0) + (s->qk_norm ? 2 : 0) + (s->gemma ? 2 : 0);
}
int ref_model_param_count(const ref_model_shape *s)
{
    int n = llama_count(s);
    for (int l = 0; l < s->layers; l++) n += extras_of(s, l);
    return n;
}
int ref_model_extra(const ref_model_shape *s, int layer, int kind)
{
    int at;
    if (is_conv(s, layer)) return -1;
    if (kind <= REF_BV) {
        if (!s->qkv_bias) return -1;
        at = kind;
    } else if (kind <= REF_KNORM) {
        if (!s->qk_norm) return -1;
        at = (s->qkv_bias ? 3 : 0) + kind - REF_QNORM;
    } else {
        if (!s->gemma) return -1;
        at = (s->qkv_bias ? 3 : 0) + (s->qk_norm ? 2 : 0) + kind - REF_POST_ATTN;
    }
    int base = llama_count(s);
    for (int l = 0; l < layer; l++) base += extras_of(s, l);
    return base + at;
}
int ref_model_param(const ref_model_shape *s, int layer, int kind)
{
    int at = layer_start(s, layer);
    if (!is_conv(s, layer)) return kind < REF_PER_LAYER ? at + kind : -1;
    for (int j = 0; j < 8; j++)
        if (conv_order[j] == kind) return at + j;
    return -1;
}
int ref_model_final_norm(const ref_model_shape *s) { return layer_start(s, s->layers); }
int ref_model_head(const ref_model_shape *s) { return s->tied ? -1 : layer_start(s, s->layers) + 1; }

size_t ref_model_param_numel(const ref_model_shape *s, int i)
{
    size_t V = (size_t)s->vocab, D = (size_t)s->dim, F = (size_t)s->ffn;
    size_t QD = (size_t)s->heads * s->head_dim, KD = (size_t)s->kv_heads * s->head_dim;
    if (i >= llama_count(s)) {
        int base = llama_count(s);
        for (int l = 0; l < s->layers; l++) {
            if (i < base + extras_of(s, l)) {
                for (int k = REF_BQ; k <= REF_POST_FFN; k++)
                    if (ref_model_extra(s, l, k) == i)
                        return k == REF_BQ ? QD : k <= REF_BV ? KD : k <= REF_KNORM ? (size_t)s->head_dim : D;
            }
            base += extras_of(s, l);
        }
        return 0;
    }
    if (i == 0 || i == ref_model_head(s)) return V * D;
    if (i == ref_model_final_norm(s)) return D;
    int l = 0;
    while (l + 1 < s->layers && layer_start(s, l + 1) <= i) l++;
    int j = i - layer_start(s, l), kind = is_conv(s, l) ? conv_order[j] : j;
    switch (kind) {
    case REF_ATTN_NORM: case REF_FFN_NORM: return D;
    case REF_WQ: case REF_WO: return QD * D;
    case REF_WK: case REF_WV: return KD * D;
    case REF_CONV_IN: return 3 * D * D;
    case REF_CONV_W: return D * (size_t)s->conv_kernel;
    case REF_CONV_OUT: return D * D;
    default: return F * D;   /* Wg, Wu, Wd */
    }
}

static double *zeros(size_t n) { return calloc(n ? n : 1, sizeof(double)); }

/* ---- linear: out[n, o] = sum_i in[n, i] * W[o, i] ------------------------------------ */

static void linear_forward(double *out, const double *in, const double *W, int N, int I, int O)
{
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++) {
            double s = 0;
            for (int i = 0; i < I; i++) s += in[(size_t)n * I + i] * W[(size_t)o * I + i];
            out[(size_t)n * O + o] = s;
        }
}

/* din += dout @ W; dW += dout^T @ in */
static void linear_backward(double *din, double *dW, const double *dout, const double *in, const double *W, int N, int I, int O)
{
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++) {
            double g = dout[(size_t)n * O + o];
            for (int i = 0; i < I; i++) {
                din[(size_t)n * I + i] += g * W[(size_t)o * I + i];
                dW[(size_t)o * I + i] += g * in[(size_t)n * I + i];
            }
        }
}

/* ---- RMSNorm: out = x * rstd * (w + off), rstd = 1 / sqrt(mean(x^2) + eps) --------------
   off: 1 for Gemma's (1 + w) norms, else 0 */

static void rmsnorm_forward(double *out, double *rstd, const double *x, const double *w, double off, int N, int D, double eps)
{
    for (int n = 0; n < N; n++) {
        const double *xr = x + (size_t)n * D;
        double ss = 0;
        for (int i = 0; i < D; i++) ss += xr[i] * xr[i];
        rstd[n] = 1.0 / sqrt(ss / D + eps);
        for (int i = 0; i < D; i++) out[(size_t)n * D + i] = xr[i] * rstd[n] * (w[i] + off);
    }
}

/* dx += rstd * (dxhat - xhat * mean(dxhat * xhat)), dxhat = dout * (w + off); dw += dout * xhat */
static void rmsnorm_backward(double *dx, double *dw, const double *dout, const double *x, const double *rstd,
                             const double *w, double off, int N, int D)
{
    for (int n = 0; n < N; n++) {
        const double *xr = x + (size_t)n * D, *gr = dout + (size_t)n * D;
        double dot = 0;
        for (int i = 0; i < D; i++) {
            double xhat = xr[i] * rstd[n];
            dot += gr[i] * (w[i] + off) * xhat;
            dw[i] += gr[i] * xhat;
        }
        dot /= D;
        for (int i = 0; i < D; i++) {
            double xhat = xr[i] * rstd[n];
            dx[(size_t)n * D + i] += rstd[n] * (gr[i] * (w[i] + off) - xhat * dot);
        }
    }
}

/* Gemma's norm of a block's output x (its extra parameter `which` of layer l, rstd its
   rows'): the gradient before it, given dy after it, into dpost (returned); the norm's
   weight gradient added to its grads. */
static const double *post_norm_grad(double *dpost, const ref_model_shape *s, int l, int which, double *const *grads,
                                    const double *const *P, const double *dy, const double *x, const double *rstd, double off,
                                    int N, int D)
{
    int i = ref_model_extra(s, l, which);
    memset(dpost, 0, sizeof(double) * (size_t)N * D);
    rmsnorm_backward(dpost, grads[i], dy, x, rstd, P[i], off, N, D);
    return dpost;
}

/* ---- RoPE, rotate-half; sign -1 rotates back (the gradient) ------------------------------ */

static void rope(double *x, int B, int T, int nh, int hd, double theta, double sign)
{
    int half = hd / 2;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < nh; h++) {
                double *v = x + (((size_t)b * T + t) * nh + h) * hd;
                for (int i = 0; i < half; i++) {
                    double angle = t * pow(theta, -2.0 * i / hd);
                    double c = cos(angle), s = sign * sin(angle);
                    double a0 = v[i], a1 = v[i + half];
                    v[i] = a0 * c - a1 * s;
                    v[i + half] = a0 * s + a1 * c;
                }
            }
}

/* ---- causal grouped-query attention --------------------------------------------------------
   q, att [B, T, H, hd]; k, v [B, T, Hk, hd]; probs [B, H, T, T] (row i: query, column j: key) */

typedef struct attn_dims { int B, T, H, Hk, hd, window; double scale; } attn_dims;

/* whether query i sees key j: causal, and within the window when there is one */
static int first_key(int i, int window) { return window > 0 && i - window + 1 > 0 ? i - window + 1 : 0; }

static void attention_forward(double *att, double *probs, const double *q, const double *k, const double *v, attn_dims d)
{
    double scale = d.scale;
    int group = d.H / d.Hk;
    for (int b = 0; b < d.B; b++)
        for (int h = 0; h < d.H; h++)
            for (int i = 0; i < d.T; i++) {
                const double *qi = q + (((size_t)b * d.T + i) * d.H + h) * d.hd;
                double *p = probs + (((size_t)b * d.H + h) * d.T + i) * d.T;
                double mx = -INFINITY;
                int j0 = first_key(i, d.window);
                for (int j = j0; j <= i; j++) {
                    const double *kj = k + (((size_t)b * d.T + j) * d.Hk + h / group) * d.hd;
                    double s = 0;
                    for (int c = 0; c < d.hd; c++) s += qi[c] * kj[c];
                    p[j] = s * scale;
                    if (p[j] > mx) mx = p[j];
                }
                double sum = 0;
                for (int j = j0; j <= i; j++) { p[j] = exp(p[j] - mx); sum += p[j]; }
                for (int j = 0; j < d.T; j++) p[j] = j >= j0 && j <= i ? p[j] / sum : 0;
                double *o = att + (((size_t)b * d.T + i) * d.H + h) * d.hd;
                for (int c = 0; c < d.hd; c++) {
                    double s = 0;
                    for (int j = j0; j <= i; j++) s += p[j] * v[(((size_t)b * d.T + j) * d.Hk + h / group) * d.hd + c];
                    o[c] = s;
                }
            }
}

/* dq, dk, dv += the gradients of att given datt */
static void attention_backward(double *dq, double *dk, double *dv, const double *datt, const double *probs,
                               const double *q, const double *k, const double *v, attn_dims d)
{
    double scale = d.scale;
    int group = d.H / d.Hk;
    double *dp = malloc(sizeof(double) * (size_t)d.T);
    for (int b = 0; b < d.B; b++)
        for (int h = 0; h < d.H; h++)
            for (int i = 0; i < d.T; i++) {
                size_t qo = (((size_t)b * d.T + i) * d.H + h) * d.hd;
                const double *p = probs + (((size_t)b * d.H + h) * d.T + i) * d.T;
                /* att_i = sum_j p_j v_j: dp_j = datt_i . v_j, dv_j += p_j datt_i */
                double dot = 0;
                for (int j = 0; j <= i; j++) {
                    size_t ko = (((size_t)b * d.T + j) * d.Hk + h / group) * d.hd;
                    double s = 0;
                    for (int c = 0; c < d.hd; c++) {
                        s += datt[qo + c] * v[ko + c];
                        dv[ko + c] += p[j] * datt[qo + c];
                    }
                    dp[j] = s;
                    dot += p[j] * s;
                }
                /* softmax: ds_j = p_j (dp_j - sum_k p_k dp_k); s_j = scale q_i . k_j */
                for (int j = 0; j <= i; j++) {
                    size_t ko = (((size_t)b * d.T + j) * d.Hk + h / group) * d.hd;
                    double ds = p[j] * (dp[j] - dot) * scale;
                    for (int c = 0; c < d.hd; c++) {
                        dq[qo + c] += ds * k[ko + c];
                        dk[ko + c] += ds * q[qo + c];
                    }
                }
            }
    free(dp);
}

static double silu(double x) { return x / (1 + exp(-x)); }

/* GELU's tanh form and its derivative, from the tanh formula */
static const double GELU_C = 0.79788456080286535588;   /* sqrt(2 / pi) */
static double gelu(double x) { return 0.5 * x * (1 + tanh(GELU_C * (x + 0.044715 * x * x * x))); }
static double gelu_grad(double x)
{
    double t = tanh(GELU_C * (x + 0.044715 * x * x * x));
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * GELU_C * (1 + 3 * 0.044715 * x * x);
}

/* ---- a projection with its LoRA term: out += scale * dropout(in) A^T B^T ---------------- */

/* The LoRA run's state of one target: u = dropout(in) A^T [N, rank], kept for the backward. */
typedef struct lora_run { const ref_model_lora *lo; double **u; } lora_run;

/* in with target slot's dropout applied (into xd [N, I]) */
static void lora_drop(const ref_model_lora *lo, int slot, const double *in, double *xd, int N, int I)
{
    double keep = 1.0 / (1.0 - lo->p);
    for (size_t j = 0; j < (size_t)N * I; j++)
        xd[j] = lo->p > 0 ? (ref_dropout_kept(j, (float)lo->p, lo->seeds[slot]) ? in[j] * keep : 0.0) : in[j];
}

static void proj_forward(lora_run *lr, int layer, int k, double *out, const double *in, const double *W, int N, int I, int O)
{
    linear_forward(out, in, W, N, I, O);
    int slot = layer * 8 + k, r = lr && lr->lo ? lr->lo->rank : 0;
    if (!r || !lr->lo->a[slot]) return;
    const double *A = lr->lo->a[slot], *Bm = lr->lo->b[slot];
    double *xd = zeros((size_t)N * I), *u = lr->u[slot] = zeros((size_t)N * r);
    lora_drop(lr->lo, slot, in, xd, N, I);
    linear_forward(u, xd, A, N, I, r);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++) {
            double acc = 0;
            for (int q = 0; q < r; q++) acc += u[(size_t)n * r + q] * Bm[(size_t)o * r + q];
            out[(size_t)n * O + o] += lr->lo->scale * acc;
        }
    free(xd);
}

/* din += dout W (+ the LoRA path's, through the same dropout); dW += dout^T in; the
   adapter's dA, dB added into lo->da, lo->db */
static void proj_backward(lora_run *lr, int layer, int k, double *din, double *dW, const double *dout, const double *in,
                          const double *W, int N, int I, int O)
{
    linear_backward(din, dW, dout, in, W, N, I, O);
    int slot = layer * 8 + k, r = lr && lr->lo ? lr->lo->rank : 0;
    if (!r || !lr->lo->a[slot]) return;
    const ref_model_lora *lo = lr->lo;
    const double *A = lo->a[slot], *Bm = lo->b[slot], *u = lr->u[slot];
    double *du = zeros((size_t)N * r), *xd = zeros((size_t)N * I), *dxd = zeros((size_t)N * I);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++) {
            double g = lo->scale * dout[(size_t)n * O + o];
            for (int q = 0; q < r; q++) {
                if (lo->db) lo->db[slot][(size_t)o * r + q] += g * u[(size_t)n * r + q];
                du[(size_t)n * r + q] += g * Bm[(size_t)o * r + q];
            }
        }
    lora_drop(lo, slot, in, xd, N, I);
    double *dA = lo->da ? lo->da[slot] : zeros((size_t)r * I);
    linear_backward(dxd, dA, du, xd, A, N, I, r);
    if (!lo->da) free(dA);
    /* through the dropout: the same decisions, the same scale */
    double keep = 1.0 / (1.0 - lo->p);
    for (size_t j = 0; j < (size_t)N * I; j++)
        din[j] += lo->p > 0 ? (ref_dropout_kept(j, (float)lo->p, lo->seeds[slot]) ? dxd[j] * keep : 0.0) : dxd[j];
    free(du); free(xd); free(dxd);
}

/* ---- the whole model ----------------------------------------------------------------------- */

typedef struct layer_acts {
    double *hin, *xn, *rstd1, *q, *k, *v, *probs, *att, *h2, *xn2, *rstd2, *g, *u, *a;
    double *qr, *kr, *rstdq, *rstdk;   /* q and k before their heads' norms, and those norms' rstd (qk_norm) */
    double *bcx, *bx, *cv, *y;         /* a convolution layer's (LFM2) */
    double *ao, *fo, *rstdpa, *rstdpf; /* the attention's and MLP's outputs before their norms, and their rstd (gemma) */
} layer_acts;

#define KINDS (REF_CONV_OUT + 1)
/* Layer l's parameters (and gradients) by kind: NULL where it has none. */
static void layer_params(const ref_model_shape *s, int l, const double *const *P, double *const *grads, const double **W,
                         double **G)
{
    for (int k = 0; k < KINDS; k++) {
        int i = ref_model_param(s, l, k);
        W[k] = i < 0 ? NULL : P[i];
        if (G) G[k] = i < 0 || !grads ? NULL : grads[i];
    }
}

/* LFM2's convolution step: from xn [N, D] to the block's output added into out [N, D]. */
static void conv_forward(layer_acts *A, const double *const *W, double *out, int B, int T, int D, int K)
{
    int N = B * T;
    A->bcx = zeros((size_t)N * 3 * D); A->bx = zeros((size_t)N * D); A->cv = zeros((size_t)N * D); A->y = zeros((size_t)N * D);
    linear_forward(A->bcx, A->xn, W[REF_CONV_IN], N, D, 3 * D);
    for (int n = 0; n < N; n++)
        for (int d = 0; d < D; d++)
            A->bx[(size_t)n * D + d] = A->bcx[(size_t)n * 3 * D + d] * A->bcx[(size_t)n * 3 * D + 2 * D + d];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int d = 0; d < D; d++) {
                double acc = 0;
                for (int j = 0; j < K; j++) {
                    int src = t - (K - 1) + j;
                    if (src >= 0) acc += W[REF_CONV_W][(size_t)d * K + j] * A->bx[((size_t)b * T + src) * D + d];
                }
                A->cv[((size_t)b * T + t) * D + d] = acc;
            }
    for (int n = 0; n < N; n++)
        for (int d = 0; d < D; d++)
            A->y[(size_t)n * D + d] = A->bcx[(size_t)n * 3 * D + D + d] * A->cv[(size_t)n * D + d];
    linear_forward(out, A->y, W[REF_CONV_OUT], N, D, D);
}

/* Its backward: dh (the output's gradient) to dxn (added into), the weights' gradients
   added into G. */
static void conv_backward(const layer_acts *A, const double *const *W, double *const *G, const double *dh, double *dxn, int B,
                          int T, int D, int K)
{
    int N = B * T;
    double *dy = zeros((size_t)N * D), *dcv = zeros((size_t)N * D), *dbx = zeros((size_t)N * D);
    double *dbcx = zeros((size_t)N * 3 * D);
    linear_backward(dy, G[REF_CONV_OUT], dh, A->y, W[REF_CONV_OUT], N, D, D);
    for (int n = 0; n < N; n++)
        for (int d = 0; d < D; d++) {
            size_t i = (size_t)n * D + d, c = (size_t)n * 3 * D + D + d;
            dcv[i] = dy[i] * A->bcx[c];
            dbcx[c] = dy[i] * A->cv[i];
        }
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int d = 0; d < D; d++)
                for (int j = 0; j < K; j++) {
                    int src = t - (K - 1) + j;
                    if (src < 0) continue;
                    size_t at = ((size_t)b * T + src) * D + d, here = ((size_t)b * T + t) * D + d;
                    dbx[at] += W[REF_CONV_W][(size_t)d * K + j] * dcv[here];
                    G[REF_CONV_W][(size_t)d * K + j] += dcv[here] * A->bx[at];
                }
    for (int n = 0; n < N; n++)
        for (int d = 0; d < D; d++) {
            size_t i = (size_t)n * D + d, base = (size_t)n * 3 * D + d;
            dbcx[base] = dbx[i] * A->bcx[base + 2 * D];
            dbcx[base + 2 * D] = dbx[i] * A->bcx[base];
        }
    linear_backward(dxn, G[REF_CONV_IN], dbcx, A->xn, W[REF_CONV_IN], N, D, 3 * D);
    free(dy); free(dcv); free(dbx); free(dbcx);
}

double ref_model_run(const ref_model_shape *s, const float *const *params, const uint32_t *ids,
                     const uint32_t *targets, int B, int T, double *logits_out, double *const *grads)
{
    /* parameters in double */
    int np = ref_model_param_count(s);
    double **P = calloc((size_t)np, sizeof(double *));
    for (int i = 0; i < np; i++) {
        size_t n = ref_model_param_numel(s, i);
        P[i] = malloc(sizeof(double) * n);
        for (size_t j = 0; j < n; j++) P[i][j] = params[i][j];
    }
    double loss = ref_model_run_d(s, (const double *const *)P, ids, targets, B, T, logits_out, grads);
    for (int i = 0; i < np; i++) free(P[i]);
    free(P);
    return loss;
}

static double run(const ref_model_shape *s, const double *const *P, const ref_model_lora *lo, const uint32_t *ids,
                  const uint32_t *targets, int B, int T, double *logits_out, double *const *grads);

/* Layer l's attention: its window (none for a full[l] layer) and scale; its RoPE base. */
static bool slides(const ref_model_shape *s, int l) { return s->window > 0 && !(s->full && s->full[l]); }
static attn_dims layer_dims(const ref_model_shape *s, int l, int B, int T)
{
    return (attn_dims){ B, T, s->heads, s->kv_heads, s->head_dim, slides(s, l) ? s->window : 0,
                        s->attn_scale > 0 ? s->attn_scale : 1.0 / sqrt(s->head_dim) };
}
static double layer_theta(const ref_model_shape *s, int l)
{
    return s->rope_local_theta > 0 && slides(s, l) ? s->rope_local_theta : s->rope_theta;
}

double ref_model_run_d(const ref_model_shape *s, const double *const *P, const uint32_t *ids,
                       const uint32_t *targets, int B, int T, double *logits_out, double *const *grads)
{
    return run(s, P, NULL, ids, targets, B, T, logits_out, grads);
}

double ref_model_run_lora(const ref_model_shape *s, const double *const *P, const ref_model_lora *lo, const uint32_t *ids,
                          const uint32_t *targets, int B, int T, double *logits, double *const *grads)
{
    return run(s, P, lo, ids, targets, B, T, logits, grads);
}

static double run(const ref_model_shape *s, const double *const *P, const ref_model_lora *lo, const uint32_t *ids,
                  const uint32_t *targets, int B, int T, double *logits_out, double *const *grads)
{
    int V = s->vocab, D = s->dim, L = s->layers, H = s->heads, Hk = s->kv_heads, hd = s->head_dim, F = s->ffn;
    int N = B * T, QD = H * hd, KD = Hk * hd;
    double off = s->gemma ? 1 : 0, escale = s->gemma ? sqrt((double)D) : 1;
    const double *emb = P[0], *wout = s->tied ? P[0] : P[ref_model_head(s)];

    lora_run lrun = { lo, calloc((size_t)L * 8, sizeof(double *)) }, *lr = &lrun;

    /* ---- forward ---- */
    layer_acts *la = calloc((size_t)L, sizeof *la);
    double *h = zeros((size_t)N * D);
    for (int n = 0; n < N; n++)
        for (int i = 0; i < D; i++) h[(size_t)n * D + i] = emb[(size_t)ids[n] * D + i] * escale;
    for (int l = 0; l < L; l++) {
        layer_acts *A = &la[l];
        const double *W[KINDS];
        layer_params(s, l, P, NULL, W, NULL);
        attn_dims ad = layer_dims(s, l, B, T);
        A->hin = h;
        A->xn = zeros((size_t)N * D); A->rstd1 = zeros(N);
        rmsnorm_forward(A->xn, A->rstd1, h, W[REF_ATTN_NORM], off, N, D, s->eps);
        A->h2 = zeros((size_t)N * D);
        if (is_conv(s, l)) {
            conv_forward(A, W, A->h2, B, T, D, s->conv_kernel);
            goto mlp;
        }
        A->q = zeros((size_t)N * QD); A->k = zeros((size_t)N * KD); A->v = zeros((size_t)N * KD);
        proj_forward(lr, l, 0, A->q, A->xn, W[REF_WQ], N, D, QD);
        proj_forward(lr, l, 1, A->k, A->xn, W[REF_WK], N, D, KD);
        proj_forward(lr, l, 2, A->v, A->xn, W[REF_WV], N, D, KD);
        if (s->qkv_bias)
            for (int n = 0; n < N; n++) {
                for (int i = 0; i < QD; i++) A->q[(size_t)n * QD + i] += P[ref_model_extra(s, l, REF_BQ)][i];
                for (int i = 0; i < KD; i++) A->k[(size_t)n * KD + i] += P[ref_model_extra(s, l, REF_BK)][i];
                for (int i = 0; i < KD; i++) A->v[(size_t)n * KD + i] += P[ref_model_extra(s, l, REF_BV)][i];
            }
        if (s->qk_norm) {   /* q, k = each head's RMSNorm of the projections */
            A->qr = A->q; A->kr = A->k;
            A->q = zeros((size_t)N * QD); A->k = zeros((size_t)N * KD);
            A->rstdq = zeros((size_t)N * H); A->rstdk = zeros((size_t)N * Hk);
            rmsnorm_forward(A->q, A->rstdq, A->qr, P[ref_model_extra(s, l, REF_QNORM)], off, N * H, hd, s->eps);
            rmsnorm_forward(A->k, A->rstdk, A->kr, P[ref_model_extra(s, l, REF_KNORM)], off, N * Hk, hd, s->eps);
        }
        rope(A->q, B, T, H, hd, layer_theta(s, l), 1);
        rope(A->k, B, T, Hk, hd, layer_theta(s, l), 1);
        A->probs = zeros((size_t)B * H * T * T); A->att = zeros((size_t)N * QD);
        attention_forward(A->att, A->probs, A->q, A->k, A->v, ad);
        if (s->gemma) {   /* h2 = hin + RMSNorm(att @ Wo^T) */
            A->ao = zeros((size_t)N * D); A->rstdpa = zeros(N);
            proj_forward(lr, l, 3, A->ao, A->att, W[REF_WO], N, QD, D);
            rmsnorm_forward(A->h2, A->rstdpa, A->ao, P[ref_model_extra(s, l, REF_POST_ATTN)], off, N, D, s->eps);
        } else {
            proj_forward(lr, l, 3, A->h2, A->att, W[REF_WO], N, QD, D);
        }
    mlp:
        for (size_t i = 0; i < (size_t)N * D; i++) A->h2[i] += h[i];
        A->xn2 = zeros((size_t)N * D); A->rstd2 = zeros(N);
        rmsnorm_forward(A->xn2, A->rstd2, A->h2, W[REF_FFN_NORM], off, N, D, s->eps);
        A->g = zeros((size_t)N * F); A->u = zeros((size_t)N * F); A->a = zeros((size_t)N * F);
        proj_forward(lr, l, 4, A->g, A->xn2, W[REF_WG], N, D, F);
        proj_forward(lr, l, 5, A->u, A->xn2, W[REF_WU], N, D, F);
        for (size_t i = 0; i < (size_t)N * F; i++) A->a[i] = (s->gelu ? gelu(A->g[i]) : silu(A->g[i])) * A->u[i];
        h = zeros((size_t)N * D);
        if (s->gemma) {   /* h = h2 + RMSNorm(a @ Wd^T) */
            A->fo = zeros((size_t)N * D); A->rstdpf = zeros(N);
            proj_forward(lr, l, 6, A->fo, A->a, W[REF_WD], N, F, D);
            rmsnorm_forward(h, A->rstdpf, A->fo, P[ref_model_extra(s, l, REF_POST_FFN)], off, N, D, s->eps);
        } else {
            proj_forward(lr, l, 6, h, A->a, W[REF_WD], N, F, D);
        }
        for (size_t i = 0; i < (size_t)N * D; i++) h[i] += A->h2[i];
    }
    double *xf = zeros((size_t)N * D), *rstdf = zeros(N);
    rmsnorm_forward(xf, rstdf, h, P[ref_model_final_norm(s)], off, N, D, s->eps);
    double *logits = zeros((size_t)N * V);
    linear_forward(logits, xf, wout, N, D, V);

    /* mean cross-entropy; dlogits = (softmax - onehot) / N */
    double loss = 0;
    double *dlogits = zeros((size_t)N * V);
    for (int n = 0; n < N; n++) {
        const double *z = logits + (size_t)n * V;
        double mx = z[0], sum = 0;
        for (int j = 1; j < V; j++) if (z[j] > mx) mx = z[j];
        for (int j = 0; j < V; j++) sum += exp(z[j] - mx);
        loss += (mx + log(sum)) - z[targets[n]];
        for (int j = 0; j < V; j++) dlogits[(size_t)n * V + j] = (exp(z[j] - mx) / sum - (j == (int)targets[n])) / N;
    }
    loss /= N;
    if (logits_out) memcpy(logits_out, logits, sizeof(double) * (size_t)N * V);

    /* ---- backward ---- */
    if (grads) {
        for (int i = 0; i < ref_model_param_count(s); i++) memset(grads[i], 0, sizeof(double) * ref_model_param_numel(s, i));
        double *dwout = s->tied ? grads[0] : grads[ref_model_head(s)];
        double *dxf = zeros((size_t)N * D), *dh = zeros((size_t)N * D);
        linear_backward(dxf, dwout, dlogits, xf, wout, N, D, V);
        rmsnorm_backward(dh, grads[ref_model_final_norm(s)], dxf, h, rstdf, P[ref_model_final_norm(s)], off, N, D);
        double *dpost = zeros((size_t)N * D);
        double *da = zeros((size_t)N * F), *dg = zeros((size_t)N * F), *du = zeros((size_t)N * F);
        double *dxn = zeros((size_t)N * D), *datt = zeros((size_t)N * QD);
        double *dq = zeros((size_t)N * QD), *dk = zeros((size_t)N * KD), *dv = zeros((size_t)N * KD);
        for (int l = L - 1; l >= 0; l--) {
            layer_acts *A = &la[l];
            const double *W[KINDS];
            double *G[KINDS];
            layer_params(s, l, P, grads, W, G);
            attn_dims ad = layer_dims(s, l, B, T);
            /* h_out = h2 + a @ Wd^T (gemma: + RMSNorm of it): dh flows to h2 unchanged */
            const double *df = s->gemma ? post_norm_grad(dpost, s, l, REF_POST_FFN, grads, P, dh, A->fo, A->rstdpf, off, N, D)
                                        : dh;
            memset(da, 0, sizeof(double) * (size_t)N * F);
            proj_backward(lr, l, 6, da, G[REF_WD], df, A->a, W[REF_WD], N, F, D);
            for (size_t i = 0; i < (size_t)N * F; i++) {
                double g = A->g[i], sg = 1 / (1 + exp(-g));
                dg[i] = da[i] * A->u[i] * (s->gelu ? gelu_grad(g) : sg * (1 + g * (1 - sg)));
                du[i] = da[i] * (s->gelu ? gelu(g) : silu(g));
            }
            memset(dxn, 0, sizeof(double) * (size_t)N * D);
            proj_backward(lr, l, 4, dxn, G[REF_WG], dg, A->xn2, W[REF_WG], N, D, F);
            proj_backward(lr, l, 5, dxn, G[REF_WU], du, A->xn2, W[REF_WU], N, D, F);
            rmsnorm_backward(dh, G[REF_FFN_NORM], dxn, A->h2, A->rstd2, W[REF_FFN_NORM], off, N, D);
            if (is_conv(s, l)) {
                memset(dxn, 0, sizeof(double) * (size_t)N * D);
                conv_backward(A, W, G, dh, dxn, B, T, D, s->conv_kernel);
                rmsnorm_backward(dh, G[REF_ATTN_NORM], dxn, A->hin, A->rstd1, W[REF_ATTN_NORM], off, N, D);
                continue;
            }
            /* h2 = hin + att @ Wo^T (gemma: + RMSNorm of it) */
            const double *dao = s->gemma ? post_norm_grad(dpost, s, l, REF_POST_ATTN, grads, P, dh, A->ao, A->rstdpa, off, N, D)
                                         : dh;
            memset(datt, 0, sizeof(double) * (size_t)N * QD);
            proj_backward(lr, l, 3, datt, G[REF_WO], dao, A->att, W[REF_WO], N, QD, D);
            memset(dq, 0, sizeof(double) * (size_t)N * QD);
            memset(dk, 0, sizeof(double) * (size_t)N * KD);
            memset(dv, 0, sizeof(double) * (size_t)N * KD);
            attention_backward(dq, dk, dv, datt, A->probs, A->q, A->k, A->v, ad);
            rope(dq, B, T, H, hd, layer_theta(s, l), -1);
            rope(dk, B, T, Hk, hd, layer_theta(s, l), -1);
            if (s->qk_norm) {   /* back through the heads' norms: dq, dk become the projections' */
                double *dqr = zeros((size_t)N * QD), *dkr = zeros((size_t)N * KD);
                rmsnorm_backward(dqr, grads[ref_model_extra(s, l, REF_QNORM)], dq, A->qr, A->rstdq,
                                 P[ref_model_extra(s, l, REF_QNORM)], off, N * H, hd);
                rmsnorm_backward(dkr, grads[ref_model_extra(s, l, REF_KNORM)], dk, A->kr, A->rstdk,
                                 P[ref_model_extra(s, l, REF_KNORM)], off, N * Hk, hd);
                memcpy(dq, dqr, sizeof(double) * (size_t)N * QD);
                memcpy(dk, dkr, sizeof(double) * (size_t)N * KD);
                free(dqr); free(dkr);
            }
            if (s->qkv_bias)
                for (int n = 0; n < N; n++) {
                    for (int i = 0; i < QD; i++) grads[ref_model_extra(s, l, REF_BQ)][i] += dq[(size_t)n * QD + i];
                    for (int i = 0; i < KD; i++) grads[ref_model_extra(s, l, REF_BK)][i] += dk[(size_t)n * KD + i];
                    for (int i = 0; i < KD; i++) grads[ref_model_extra(s, l, REF_BV)][i] += dv[(size_t)n * KD + i];
                }
            memset(dxn, 0, sizeof(double) * (size_t)N * D);
            proj_backward(lr, l, 0, dxn, G[REF_WQ], dq, A->xn, W[REF_WQ], N, D, QD);
            proj_backward(lr, l, 1, dxn, G[REF_WK], dk, A->xn, W[REF_WK], N, D, KD);
            proj_backward(lr, l, 2, dxn, G[REF_WV], dv, A->xn, W[REF_WV], N, D, KD);
            rmsnorm_backward(dh, G[REF_ATTN_NORM], dxn, A->hin, A->rstd1, W[REF_ATTN_NORM], off, N, D);
        }
        /* h0 = emb[ids] * escale */
        for (int n = 0; n < N; n++)
            for (int i = 0; i < D; i++) grads[0][(size_t)ids[n] * D + i] += dh[(size_t)n * D + i] * escale;
        free(dpost); free(dxf); free(dh); free(da); free(dg); free(du); free(dxn); free(datt); free(dq); free(dk); free(dv);
    }

    for (int l = 0; l < L; l++) {
        layer_acts *A = &la[l];
        free(A->hin); free(A->xn); free(A->rstd1); free(A->q); free(A->k); free(A->v); free(A->probs);
        free(A->att); free(A->h2); free(A->xn2); free(A->rstd2); free(A->g); free(A->u); free(A->a);
        free(A->qr); free(A->kr); free(A->rstdq); free(A->rstdk);
        free(A->bcx); free(A->bx); free(A->cv); free(A->y);
        free(A->ao); free(A->fo); free(A->rstdpa); free(A->rstdpf);
    }
    for (int i = 0; i < L * 8; i++) free(lrun.u[i]);
    free(lrun.u);
    free(la); free(h); free(xf); free(rstdf); free(logits); free(dlogits);
    return loss;
}
