/* The cases of `wgml bench`: representative LLM shapes for every op of the public API.
   Each case names the op and a shape string; bench/torch_bench.py times the same work in
   PyTorch under the same (op, shape) key. `wgml bench --small` runs every case on shapes
   divided down for slow adapters (lavapipe), keeping the same key so tables line up.

   bytes: the minimum traffic (each input read once, each output written once);
   flops: 2 per multiply-add of the textbook algorithm (attention: causal half counted). */
#include "bench.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define OK(x) ((x) ? 0 : -1)
#define SH(...) ((const size_t[]){ __VA_ARGS__ })
#define ND(...) ((uint32_t)(sizeof((const size_t[]){ __VA_ARGS__ }) / sizeof(size_t)))
#define RAND(i, lo, hi, ...) (b->t[i] = bench_random_f32(b, lo, hi, ND(__VA_ARGS__), SH(__VA_ARGS__)))
#define IDS(i, below, ...) (b->t[i] = bench_random_u32(b, below, ND(__VA_ARGS__), SH(__VA_ARGS__)))
#define EMPTY(i, dt, ...) (b->t[i] = bench_empty(b, dt, ND(__VA_ARGS__), SH(__VA_ARGS__)))

/* The dims of the case being set up, already scaled for --small (see cmd_bench.c). */
#define D0 ((size_t)d[0])
#define D1 ((size_t)d[1])
#define D2 ((size_t)d[2])
#define D3 ((size_t)d[3])
#define D4 ((size_t)d[4])

/* ---- element-wise: dims {n} ---------------------------------------------------------- */

static int su_two_in(bench_state *b, const uint64_t *d) { return OK(RAND(0, -4, 4, D0) && RAND(1, -4, 4, D0) && EMPTY(2, WGML_F32, D0) && EMPTY(3, WGML_F32, D0)); }
static int su_one_in(bench_state *b, const uint64_t *d) { return OK(RAND(0, -4, 4, D0) && EMPTY(1, WGML_F32, D0) && RAND(2, -1, 1, D0)); }
static wgml_status r_add(bench_state *b) { return wgml_add(b->eng, b->t[0], b->t[1], b->t[2]); }
static wgml_status r_mul(bench_state *b) { return wgml_mul(b->eng, b->t[0], b->t[1], b->t[2]); }
static wgml_status r_copy(bench_state *b) { return wgml_copy_tensor(b->eng, b->t[0], b->t[2], 0); }
static wgml_status r_silu(bench_state *b) { return wgml_silu(b->eng, b->t[0], b->t[1]); }
static wgml_status r_relu(bench_state *b) { return wgml_relu(b->eng, b->t[0], b->t[1]); }
static wgml_status r_silu_bw(bench_state *b) { return wgml_silu_backward(b->eng, b->t[2], b->t[0], b->t[1]); }
static wgml_status r_silu_gate(bench_state *b) { return wgml_silu_gate_fused(b->eng, b->t[0], b->t[1], b->t[2]); }
static int su_three_in(bench_state *b, const uint64_t *d) { return OK(su_two_in(b, d) == 0 && RAND(4, -1, 1, D0)); }
static wgml_status r_silu_gate_bw(bench_state *b) { return wgml_silu_gate_backward(b->eng, b->t[0], b->t[1], b->t[4], b->t[2], b->t[3]); }
static wgml_status r_mul_bw(bench_state *b) { return wgml_mul_backward(b->eng, b->t[4], b->t[0], b->t[1], b->t[2], b->t[3]); }
static wgml_status r_mse(bench_state *b) { return wgml_mse_loss(b->eng, b->t[0], b->t[1], b->t[2]); }
static wgml_status r_accum(bench_state *b) { return wgml_gradient_accumulate(b->eng, b->t[2], b->t[0]); }
static wgml_status r_scale(bench_state *b) { return wgml_gradient_scale(b->eng, b->t[0], 0.999f); }

static double by_n(const uint64_t *d, double k) { return k * 4.0 * (double)d[0]; }
static double b2(const uint64_t *d) { return by_n(d, 2); }
static double b3(const uint64_t *d) { return by_n(d, 3); }
static double b5(const uint64_t *d) { return by_n(d, 5); }

/* ---- rows: dims {rows, cols} ---------------------------------------------------------- */

static int su_rows(bench_state *b, const uint64_t *d)
{
    return OK(RAND(0, -3, 3, D0, D1) && RAND(1, 0.5, 1.5, D1) && EMPTY(2, WGML_F32, D0, D1) && RAND(3, -1, 1, D0, D1) &&
              EMPTY(4, WGML_F32, D0, D1) && EMPTY(5, WGML_F32, D1));
}
static wgml_status r_rms(bench_state *b) { return wgml_rms_norm(b->eng, b->t[0], b->t[1], b->t[2]); }
static wgml_status r_rms_res(bench_state *b) { return wgml_rms_norm_residual_with(b->eng, b->t[0], b->t[3], b->t[1], b->t[2], b->t[4], 1e-5f); }
static wgml_status r_rms_bw(bench_state *b) { return wgml_rms_norm_backward(b->eng, b->t[3], b->t[0], b->t[1], b->t[2], b->t[5], 1e-5f); }
static wgml_status r_rms_bw_acc(bench_state *b)
{
    wgml_rms_norm_backward_options o = { .accumulate = true };
    return wgml_rms_norm_backward_with(b->eng, b->t[3], b->t[0], b->t[1], b->t[2], b->t[5], 1e-5f, &o);
}
static wgml_status r_softmax(bench_state *b) { return wgml_softmax(b->eng, b->t[0], b->t[2]); }
static wgml_status r_softmax_bw(bench_state *b) { return wgml_softmax_backward(b->eng, b->t[3], b->t[0], b->t[2]); }
static double rows_b(const uint64_t *d, double k) { return k * 4.0 * (double)d[0] * (double)d[1]; }
static double rb2(const uint64_t *d) { return rows_b(d, 2); }
static double rb3(const uint64_t *d) { return rows_b(d, 3); }
static double rb4(const uint64_t *d) { return rows_b(d, 4); }

/* ---- rope: dims {batch, seq, heads, head_dim} ------------------------------------------ */

static int su_rope(bench_state *b, const uint64_t *d) { return OK(RAND(0, -1, 1, D0, D1, D2, D3)); }
static wgml_status r_rope(bench_state *b) { return wgml_rope_theta(b->eng, b->t[0], (uint32_t)wgml_tensor_dim(b->t[0], 3), 0, 10000.0f); }
static double rope_b(const uint64_t *d) { return 2.0 * 4.0 * (double)d[0] * (double)d[1] * (double)d[2] * (double)d[3]; }

/* ---- selection, conv, quantization ----------------------------------------------------- */

static int su_topk(bench_state *b, const uint64_t *d) { b->u[0] = (uint32_t)d[1]; return OK(RAND(0, -10, 10, D0) && EMPTY(1, WGML_U32, D1)); }
static wgml_status r_topk(bench_state *b) { return wgml_top_k(b->eng, b->t[0], b->t[1], b->u[0]); }
static double topk_b(const uint64_t *d) { return 4.0 * (double)d[0]; }

static int su_conv(bench_state *b, const uint64_t *d) { return OK(RAND(0, -1, 1, D0, D1) && RAND(1, -1, 1, D0, 3) && RAND(2, -1, 1, D0) && EMPTY(3, WGML_F32, D0, D1)); }
static wgml_status r_conv(bench_state *b) { return wgml_conv1d(b->eng, b->t[0], b->t[1], b->t[2], b->t[3]); }
static double conv_b(const uint64_t *d) { return 2.0 * 4.0 * (double)d[0] * (double)d[1]; }

/* affine: dims {rows, cols}, 8-bit, groups of 64, f32 scales/biases */
static int su_affine(bench_state *b, const uint64_t *d)
{
    size_t n = D0 * D1;
    return OK(IDS(0, 0xFFFFFFFFu, n / 4) && RAND(1, -0.01, 0.01, n / 64) && RAND(2, -0.1, 0.1, n / 64) && EMPTY(3, WGML_F32, D0, D1));
}
static wgml_status r_affine(bench_state *b) { return wgml_affine_dequantize(b->eng, b->t[0], b->t[1], b->t[2], b->t[3]); }
static double affine_b(const uint64_t *d) { double n = (double)d[0] * (double)d[1]; return n + 2.0 * 4.0 * n / 64 + 4.0 * n; }

/* ---- packed weights: dims {M, N, K, dtype, bits}: out [M, N] = a [M, K] @ W^T with W [N, K]
   packed (affine: groups of 64, f16 scales) or bf16. Every byte of W is below 0x40, so each
   16-bit scale it holds is a finite f16 and bf16; the codes' values do not change the work. */

static wgml_packed_desc packed_desc(const uint64_t *d)
{
    return (wgml_packed_desc){ .dtype = (wgml_dtype)d[3], .rows = (uint32_t)d[1], .cols = (uint32_t)d[2], .bits = (uint32_t)d[4],
                               .group_size = 64, .scale_dtype = WGML_F16 };
}
static size_t packed_bytes(const uint64_t *d)
{
    wgml_packed_desc pd = packed_desc(d);
    wgml_packed_layout lay = { 0 };
    if (pd.dtype == WGML_BF16) return (size_t)d[1] * d[2] * 2;
    return wgml_packed_layout_of(&pd, &lay) == WGML_OK ? lay.bytes : 0;
}
static int su_packed(bench_state *b, const uint64_t *d)
{
    wgml_packed_desc pd = packed_desc(d);
    size_t nbytes = packed_bytes(d);
    wgml_tensor *w = NULL;
    wgml_status s = pd.dtype == WGML_BF16 ? wgml_tensor_create(b->ctx, WGML_BF16, 2, SH(D1, D2), &w)
                                          : wgml_tensor_create_packed(b->ctx, &pd, &w);
    uint8_t *bytes = s == WGML_OK ? malloc(nbytes) : NULL;
    for (size_t i = 0; bytes && i < nbytes; i++) bytes[i] = (uint8_t)((i * 2654435761u >> 13) & 0x3F);
    if (bytes) s = wgml_tensor_write(w, 0, bytes, nbytes);
    free(bytes);
    b->t[1] = w;
    return OK(s == WGML_OK && bytes && RAND(0, -1, 1, D0, D2) && EMPTY(2, WGML_F32, D0, D1));
}
static wgml_status r_packed(bench_state *b) { return wgml_matmul_bt(b->eng, b->t[0], b->t[1], b->t[2]); }
static double packed_b(const uint64_t *d) { return (double)packed_bytes(d) + 4.0 * (double)d[0] * ((double)d[2] + (double)d[1]); }
static double packed_f(const uint64_t *d) { return 2.0 * (double)d[0] * (double)d[1] * (double)d[2]; }
#define PACKED(name, dt, bits)                                                                                                 \
    { "matmul_bt", "1x4096x4096 " name, { 1, 4096, 4096, dt, bits }, { 1, 512, 512, dt, bits }, packed_b, packed_f, su_packed,   \
      r_packed, "packed" },                                                                                                    \
    { "matmul_bt", "1x14336x4096 " name, { 1, 14336, 4096, dt, bits }, { 1, 512, 512, dt, bits }, packed_b, packed_f, su_packed, \
      r_packed, "packed" },                                                                                                    \
    { "matmul_bt", "512x4096x4096 " name, { 512, 4096, 4096, dt, bits }, { 64, 512, 512, dt, bits }, packed_b, packed_f,       \
      su_packed, r_packed, "packed" }

/* ---- training: adamw over dims {n}; cross-entropy over {rows, vocab}; embedding {V, D, N} */

static int su_adam(bench_state *b, const uint64_t *d)
{
    return OK(RAND(0, -1, 1, D0) && RAND(1, -1e-3, 1e-3, D0) && RAND(2, -1e-3, 1e-3, D0) && RAND(3, 0, 1e-6, D0));
}
static wgml_status r_adam(bench_state *b)
{
    wgml_adam_params p = { .lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f, .t = 10 };
    return wgml_adamw_update(b->eng, b->t[0], b->t[1], b->t[2], b->t[3], &p);
}
static wgml_status r_sgd(bench_state *b) { return wgml_sgd_update(b->eng, b->t[0], b->t[1], 1e-4f); }
static double adam_b(const uint64_t *d) { return 7.0 * 4.0 * (double)d[0]; }

static int su_ce(bench_state *b, const uint64_t *d)
{
    return OK(RAND(0, -8, 8, D0, D1) && IDS(1, (uint32_t)D1, D0) && EMPTY(2, WGML_F32, D0) && EMPTY(3, WGML_F32, 1) &&
              EMPTY(4, WGML_F32, D0, D1));
}
static wgml_status r_ce(bench_state *b) { return wgml_cross_entropy_batched(b->eng, b->t[0], b->t[1], 0xFFFFFFFFu, b->t[2], b->t[3], b->t[4]); }
static double ce_b(const uint64_t *d) { return 2.0 * 4.0 * (double)d[0] * (double)d[1]; }

/* global norm over d[0] tensors of d[1] elements */
static int su_gnorm(bench_state *b, const uint64_t *d)
{
    if (D0 > 10) return -1;
    for (size_t i = 0; i < D0; i++)
        if (!RAND(i, -1, 1, D1)) return -1;
    return OK(EMPTY(11, WGML_F32, 1));
}
static wgml_status r_gnorm(bench_state *b)
{
    const wgml_tensor *ts[10];
    size_t n = 0;
    while (n < 10 && b->t[n]) { ts[n] = b->t[n]; n++; }
    return wgml_global_norm(b->eng, ts, n, b->t[11]);
}
static double gnorm_b(const uint64_t *d) { return 4.0 * (double)d[0] * (double)d[1]; }

static int su_emb(bench_state *b, const uint64_t *d)
{
    return OK(RAND(0, -1, 1, D0, D1) && IDS(1, (uint32_t)D0, D2) && EMPTY(2, WGML_F32, D2, D1) && RAND(3, -1, 1, D2, D1) &&
              EMPTY(4, WGML_F32, D0, D1));
}
static wgml_status r_emb(bench_state *b) { return wgml_embedding(b->eng, b->t[0], b->t[1], b->t[2]); }
static wgml_status r_emb_bw(bench_state *b) { return wgml_embedding_backward(b->eng, b->t[3], b->t[1], b->t[4]); }
static double emb_b(const uint64_t *d) { return 2.0 * 4.0 * (double)d[2] * (double)d[1]; }
static double emb_bw_b(const uint64_t *d) { return 4.0 * (double)d[2] * (double)d[1] + 4.0 * (double)d[0] * (double)d[1]; }

/* ---- matrix products: dims {M, N, K} --------------------------------------------------- */

/* The products (M > 1) alternate between two copies of their inputs (t[3], t[4]):
   consecutive products of one unchanged tensor reuse its transposed or padded copy (wgml.h,
   matrix products), so one call repeated would time the product without the copies a fresh
   input costs. */
static int su_mm(bench_state *b, const uint64_t *d)
{
    return OK(RAND(0, -1, 1, D0, D2) && RAND(1, -1, 1, D2, D1) && EMPTY(2, WGML_F32, D0, D1) &&
              (d[0] == 1 || (RAND(3, -1, 1, D0, D2) && RAND(4, -1, 1, D2, D1))));
}
static int su_mm_bt(bench_state *b, const uint64_t *d)
{
    return OK(RAND(0, -1, 1, D0, D2) && RAND(1, -1, 1, D1, D2) && EMPTY(2, WGML_F32, D0, D1) &&
              (d[0] == 1 || (RAND(3, -1, 1, D0, D2) && RAND(4, -1, 1, D1, D2))));
}
static int su_mm_at(bench_state *b, const uint64_t *d)
{
    return OK(RAND(0, -1, 1, D2, D0) && RAND(1, -1, 1, D2, D1) && EMPTY(2, WGML_F32, D0, D1) &&
              (d[0] == 1 || (RAND(3, -1, 1, D2, D0) && RAND(4, -1, 1, D2, D1))));
}
static int mm_pair(bench_state *b) { return b->t[3] && (b->u[7]++ & 1) ? 3 : 0; }
static wgml_status r_mm(bench_state *b) { int i = mm_pair(b); return wgml_matmul(b->eng, b->t[i], b->t[i + 1], b->t[2]); }
static wgml_status r_mm_bt(bench_state *b) { int i = mm_pair(b); return wgml_matmul_bt(b->eng, b->t[i], b->t[i + 1], b->t[2]); }
static wgml_status r_mm_acc(bench_state *b)   /* out += a @ b */
{
    int i = mm_pair(b);
    return wgml_matmul_with(b->eng, b->t[i], b->t[i + 1], b->t[2], &(wgml_matmul_options){ .accumulate = true });
}
static wgml_status r_mm_at(bench_state *b) { int i = mm_pair(b); return wgml_matmul_at(b->eng, b->t[i], b->t[i + 1], b->t[2]); }
/* the f16 precisions (wgml_precision): on the matrix units where the adapter has them */
typedef wgml_status (*mm_with_fn)(wgml_engine *, const wgml_tensor *, const wgml_tensor *, wgml_tensor *,
                                  const wgml_matmul_options *);
static wgml_status r_mm_prec(bench_state *b, mm_with_fn fn, wgml_precision p)
{
    int i = mm_pair(b);
    return fn(b->eng, b->t[i], b->t[i + 1], b->t[2], &(wgml_matmul_options){ .precision = p });
}
static wgml_status r_mm_f16(bench_state *b) { return r_mm_prec(b, wgml_matmul_with, WGML_PRECISION_F16); }
static wgml_status r_mm_bt_f16(bench_state *b) { return r_mm_prec(b, wgml_matmul_bt_with, WGML_PRECISION_F16); }
static wgml_status r_mm_at_f16(bench_state *b) { return r_mm_prec(b, wgml_matmul_at_with, WGML_PRECISION_F16); }
static wgml_status r_mm_bt_f16x3(bench_state *b) { return r_mm_prec(b, wgml_matmul_bt_with, WGML_PRECISION_F16X3); }
/* Decode with cold weights: a decoding model reads each weight matrix once per token, so
   none of it is in the L2 when its product starts. The repeated rows above read one b over
   and over, and a b near the L2's size (64 MiB against the H200's 50 MB) may be partly
   cached from the previous call. These rows cycle through copies of b (t[4] .. t[4 + n - 1])
   totalling at least 256 MiB, so each product reads a b that 192 MiB or more of other
   weights have passed through the cache since. */
#define COLD_MIN_BYTES ((double)(256u << 20))
#define COLD_MAX_COPIES 8u
static int su_mm_cold(bench_state *b, const uint64_t *d, int bt)
{
    double bytes = 4.0 * (double)d[1] * (double)d[2];
    uint32_t n = (uint32_t)(COLD_MIN_BYTES / bytes + 0.999);
    if (n < 2) n = 2;
    if (n > COLD_MAX_COPIES) n = COLD_MAX_COPIES;
    if (!RAND(0, -1, 1, D0, D2) || !EMPTY(2, WGML_F32, D0, D1)) return -1;
    for (uint32_t i = 0; i < n; i++)
        if (!(bt ? RAND(4 + i, -1, 1, D1, D2) : RAND(4 + i, -1, 1, D2, D1))) return -1;
    b->u[6] = n;
    return 0;
}
static int su_mm_cold_mm(bench_state *b, const uint64_t *d) { return su_mm_cold(b, d, 0); }
static int su_mm_cold_bt(bench_state *b, const uint64_t *d) { return su_mm_cold(b, d, 1); }
static wgml_tensor *cold_b(bench_state *b) { return b->t[4 + b->u[7]++ % b->u[6]]; }
static wgml_status r_mm_cold(bench_state *b) { return wgml_matmul(b->eng, b->t[0], cold_b(b), b->t[2]); }
static wgml_status r_mm_bt_cold(bench_state *b) { return wgml_matmul_bt(b->eng, b->t[0], cold_b(b), b->t[2]); }
static double mm_f(const uint64_t *d) { return 2.0 * (double)d[0] * (double)d[1] * (double)d[2]; }
static double mm_b(const uint64_t *d)
{
    double m = (double)d[0], n = (double)d[1], k = (double)d[2];
    return 4.0 * (m * k + k * n + m * n);
}
static double mm_acc_b(const uint64_t *d) { return mm_b(d) + 4.0 * (double)d[0] * (double)d[1]; }   /* out read too */

/* ---- attention: dims {batch, seq_q, heads, kv_heads, head_dim}, seq_k = dims[5] ---------- */

static int su_attn(bench_state *b, const uint64_t *d)
{
    size_t sk = (size_t)d[5];
    b->attn.causal = d[6] & 1;
    b->attn.window = (uint32_t)(d[6] >> 1);
    b->attn.causal_offset = (uint32_t)(sk - D1);
    return OK(RAND(0, -1, 1, D0, D1, D2, D4) && RAND(1, -1, 1, D0, sk, D3, D4) && RAND(2, -1, 1, D0, sk, D3, D4) &&
              EMPTY(3, WGML_F32, D0, D1, D2, D4) && RAND(4, -1, 1, D0, D1, D2, D4) && EMPTY(5, WGML_F32, D0, D1, D2, D4) &&
              EMPTY(6, WGML_F32, D0, sk, D3, D4) && EMPTY(7, WGML_F32, D0, sk, D3, D4));
}
static wgml_status r_attn(bench_state *b) { return wgml_flash_attention_v2_with(b->eng, b->t[0], b->t[1], b->t[2], b->t[3], &b->attn, NULL); }
static wgml_status r_attn_fb(bench_state *b)
{
    wgml_status s = wgml_flash_attention_v2_with(b->eng, b->t[0], b->t[1], b->t[2], b->t[3], &b->attn, NULL);
    if (s != WGML_OK) return s;
    return wgml_flash_attention_v2_backward_with(b->eng, b->t[0], b->t[1], b->t[2], b->t[3], b->t[4], b->t[5], b->t[6], b->t[7],
                                                 &b->attn, NULL);
}
/* the forward at wgml_precision F16 (on the matrix units where the adapter has them) */
static int su_attn_f16(bench_state *b, const uint64_t *d)
{
    int r = su_attn(b, d);
    b->attn.precision = WGML_PRECISION_F16;
    return r;
}
/* forward + backward with the forward's log-sum-exp kept (options.lse, t[8]) */
static int su_attn_lse(bench_state *b, const uint64_t *d)
{
    if (su_attn(b, d) != 0) return -1;
    int r = OK(EMPTY(8, WGML_F32, D0, D2, D1));
    b->attn.lse = b->t[8];
    return r;
}
/* ... at F16 (the matrix units in both directions where the adapter has them) */
static int su_attn_lse_f16(bench_state *b, const uint64_t *d)
{
    int r = su_attn_lse(b, d);
    b->attn.precision = WGML_PRECISION_F16;
    return r;
}
/* ... and the forward's scores (options.scores, t[9]) */
static int su_attn_scores(bench_state *b, const uint64_t *d)
{
    if (su_attn_lse(b, d) != 0) return -1;
    size_t qb = (D1 + 63) / 64, kb = ((size_t)d[5] + 63) / 64;
    int r = OK(EMPTY(9, WGML_F32, D0 * D2 * qb * kb * 4096));
    b->attn.scores = b->t[9];
    return r;
}
/* visible (query, key) pairs: causal counts the lower triangle, a window the band */
static double attn_pairs(const uint64_t *d)
{
    double sq = (double)d[1], sk = (double)d[5];
    bool causal = d[6] & 1;
    double w = (double)(d[6] >> 1);
    if (!causal && w == 0) return sq * sk;
    double pairs = 0;
    for (double i = 0; i < sq; i++) {
        double pos = i + (sk - sq);
        double hi = causal ? pos + 1 : sk, lo = 0;
        if (w > 0) {
            lo = fmax(0, pos - w + 1);
            if (!causal) hi = fmin(sk, pos + w);
        }
        pairs += hi - lo;
    }
    return pairs;
}
static double attn_f(const uint64_t *d) { return 4.0 * (double)d[0] * (double)d[2] * (double)d[4] * attn_pairs(d); }
static double attn_fb_f(const uint64_t *d) { return 3.5 * attn_f(d); }
static double attn_b(const uint64_t *d)
{
    double q = (double)d[0] * (double)d[1] * (double)d[2] * (double)d[4], kv = (double)d[0] * (double)d[5] * (double)d[3] * (double)d[4];
    return 4.0 * (2 * q + 2 * kv);
}

/* ---- per-op overhead ------------------------------------------------------------------ */

static int su_tiny(bench_state *b, const uint64_t *d) { return OK(RAND(0, -1e-3, 1e-3, D0) && RAND(1, -1e-3, 1e-3, D0)); }
static wgml_status r_tiny(bench_state *b) { return wgml_add(b->eng, b->t[0], b->t[1], b->t[0]); }
static wgml_status r_sync(bench_state *b) { return wgml_context_sync(b->ctx); }
static wgml_status r_add_read(bench_state *b)
{
    float x;
    wgml_status s = wgml_add(b->eng, b->t[0], b->t[1], b->t[0]);
    return s == WGML_OK ? wgml_tensor_read(b->t[0], 0, &x, sizeof x) : s;
}

/* ---- one decode step of a whole model: dims {dim, layers, ffn, vocab, prompt} ---------- */

/* A random Llama-style model (heads of 64) of dims {dim, layers, ffn, vocab}. */
static int make_model(bench_state *b, const uint64_t *d)
{
    wgml_model_config c = { .vocab_size = (uint32_t)D3, .hidden_size = (uint32_t)D0, .intermediate_size = (uint32_t)D2,
                            .num_hidden_layers = (uint32_t)D1, .num_attention_heads = (uint32_t)(D0 / 64),
                            .num_key_value_heads = (uint32_t)(D0 / 64), .max_position_embeddings = 4096,
                            .rms_norm_eps = 1e-5, .rope_theta = 10000, .tie_word_embeddings = true, .bos_token_id = -1 };
    return wgml_model_create(b->eng, &c, &b->model) == WGML_OK && wgml_model_init_random(b->model, 7, 0.02f) == WGML_OK ? 0 : -1;
}
/* The model and a KV cache of 4096 positions holding a prompt of D4 tokens; each run
   decodes one more token and picks the argmax on the GPU. When the cache is full it starts
   again from the prompt. */
static int su_model(bench_state *b, const uint64_t *d)
{
    if (make_model(b, d) != 0 || wgml_kv_cache_create(b->model, 4096, &b->cache) != WGML_OK || !EMPTY(0, WGML_F32, D3) ||
        !EMPTY(1, WGML_U32, 1))
        return -1;
    b->u[0] = (uint32_t)D4;
    b->u[1] = (uint32_t)D3;
    return 0;
}
static wgml_status decode_one(bench_state *b)
{
    if (wgml_kv_cache_length(b->cache) + 1 >= wgml_kv_cache_capacity(b->cache) || wgml_kv_cache_length(b->cache) == 0) {
        uint32_t *ids = malloc(sizeof *ids * b->u[0]);
        if (!ids) return WGML_ERROR_OUT_OF_MEMORY;
        for (uint32_t i = 0; i < b->u[0]; i++) ids[i] = (i * 2654435761u) % b->u[1];
        wgml_kv_cache_reset(b->cache);
        wgml_status s = wgml_model_decode(b->cache, ids, b->u[0], b->t[0]);
        free(ids);
        if (s != WGML_OK) return s;
    }
    uint32_t id = wgml_kv_cache_length(b->cache) % b->u[1];
    wgml_status s = wgml_model_decode(b->cache, &id, 1, b->t[0]);
    return s == WGML_OK ? wgml_top_k(b->eng, b->t[0], b->t[1], 1) : s;
}
static wgml_status r_decode(bench_state *b) { return decode_one(b); }
static wgml_status r_decode_read(bench_state *b)
{
    uint32_t id;
    wgml_status s = decode_one(b);
    return s == WGML_OK ? wgml_tensor_read(b->t[1], 0, &id, sizeof id) : s;
}
static double model_b(const uint64_t *d)   /* the weights, read once per token */
{
    return 4.0 * (double)d[0] * ((double)d[3] + (double)d[1] * (4.0 * (double)d[0] + 3.0 * (double)d[2]));
}

/* ---- one training step of a whole model: dims {dim, layers, ffn, vocab, batch, seq} ------ */

static int su_train(bench_state *b, const uint64_t *d)
{
    if (make_model(b, d) != 0) return -1;
    size_t n = (size_t)d[4] * (size_t)d[5];
    b->ids = malloc(sizeof *b->ids * (n + 1));
    if (!b->ids) return -1;
    for (size_t i = 0; i <= n; i++) b->ids[i] = (uint32_t)((i * 2654435761u) % D3);
    /* attention's scores kept on a GPU, as `wgml train` does by default */
    wgml_adapter_info info;
    wgml_context_info(b->ctx, &info);
    bool gpu = !info.type || strcmp(info.type, "CPU") != 0;
    wgml_trainer_desc td = { .batch = (uint32_t)d[4], .seq_len = (uint32_t)d[5], .keep_attention_scores = gpu };
    return wgml_trainer_create(b->model, &td, &b->trainer) == WGML_OK ? 0 : -1;
}
static wgml_status r_train(bench_state *b)
{
    wgml_status s = wgml_trainer_accumulate(b->trainer, b->ids, b->ids + 1, 1.0f, NULL);
    return s == WGML_OK ? wgml_trainer_step(b->trainer, 1e-4f, NULL) : s;
}
static double train_f(const uint64_t *d)   /* 6 x matrix parameters x tokens (attention not counted) */
{
    double per_layer = 4.0 * (double)d[0] * (double)d[0] + 3.0 * (double)d[0] * (double)d[2];
    return 6.0 * ((double)d[1] * per_layer + (double)d[0] * (double)d[3]) * (double)d[4] * (double)d[5];
}

/* dims: full, then --small. Attention dims: {B, Sq, H, KVH, D, Sk, causal | window << 1}. */
#define N26 (1ull << 26)
#define N28 (1ull << 28)
/* a decode-fit row: 1 x 4096 x k with cold weights (its small form 1 x 512 x k / 16) */
#define MM_FIT(op, k, su, r) { op, "1x4096x" #k " cold, fit", { 1, 4096, k }, { 1, 512, k / 16 }, mm_b, mm_f, su, r, "decode-fit" }

const bench_case bench_cases[] = {
    /* element-wise, memory-bound */
    { "add", "2^28", { N28 }, { 1 << 22 }, b3, NULL, su_two_in, r_add, "memory" },
    { "mul", "2^28", { N28 }, { 1 << 22 }, b3, NULL, su_two_in, r_mul, "memory" },
    { "copy_tensor", "2^28", { N28 }, { 1 << 22 }, b2, NULL, su_two_in, r_copy, "memory" },
    { "add", "2^26", { N26 }, { 1 << 22 }, b3, NULL, su_two_in, r_add, "memory" },
    { "silu", "2^26", { N26 }, { 1 << 22 }, b2, NULL, su_one_in, r_silu, "memory" },
    { "relu", "2^26", { N26 }, { 1 << 22 }, b2, NULL, su_one_in, r_relu, "memory" },
    { "silu_backward", "2^26", { N26 }, { 1 << 22 }, b3, NULL, su_one_in, r_silu_bw, "memory" },
    { "silu_gate_fused", "2^26", { N26 }, { 1 << 22 }, b3, NULL, su_two_in, r_silu_gate, "memory" },
    { "silu_gate_backward", "2^26", { N26 }, { 1 << 22 }, b5, NULL, su_three_in, r_silu_gate_bw, "memory" },
    { "mul_backward", "2^26", { N26 }, { 1 << 22 }, b5, NULL, su_three_in, r_mul_bw, "memory" },
    { "mse_loss", "2^26", { N26 }, { 1 << 22 }, b3, NULL, su_two_in, r_mse, "memory" },
    { "gradient_accumulate", "2^26", { N26 }, { 1 << 22 }, b3, NULL, su_two_in, r_accum, "memory" },
    { "gradient_scale", "2^26", { N26 }, { 1 << 22 }, b2, NULL, su_two_in, r_scale, "memory" },
    /* rows */
    { "rms_norm", "16384x4096", { 16384, 4096 }, { 512, 4096 }, rb2, NULL, su_rows, r_rms, "memory" },
    { "rms_norm_residual_with", "16384x4096", { 16384, 4096 }, { 512, 4096 }, rb4, NULL, su_rows, r_rms_res, "memory" },
    { "rms_norm_backward", "16384x4096", { 16384, 4096 }, { 512, 4096 }, rb3, NULL, su_rows, r_rms_bw, "memory" },
    { "rms_norm_backward_with", "16384x4096 accumulate", { 16384, 4096 }, { 512, 4096 }, rb4, NULL, su_rows, r_rms_bw_acc, "memory" },
    { "softmax", "16384x4096", { 16384, 4096 }, { 512, 4096 }, rb2, NULL, su_rows, r_softmax, "memory" },
    { "softmax_backward", "16384x4096", { 16384, 4096 }, { 512, 4096 }, rb3, NULL, su_rows, r_softmax_bw, "memory" },
    { "softmax", "8x262144", { 8, 262144 }, { 8, 262144 }, rb2, NULL, su_rows, r_softmax, "memory" },
    { "rope_theta", "1x4096x32x128", { 1, 4096, 32, 128 }, { 1, 256, 32, 128 }, rope_b, NULL, su_rope, r_rope, "memory" },
    /* selection, convolution, quantization */
    { "top_k", "151936 k50", { 151936, 50 }, { 151936, 50 }, topk_b, NULL, su_topk, r_topk, "latency" },
    { "top_k", "262144 k1024", { 262144, 1024 }, { 262144, 1024 }, topk_b, NULL, su_topk, r_topk, "latency" },
    { "conv1d", "2048x8192", { 2048, 8192 }, { 256, 1024 }, conv_b, NULL, su_conv, r_conv, "memory" },
    { "affine_dequantize", "4096x14336 q8 g64", { 4096, 14336 }, { 256, 1024 }, affine_b, NULL, su_affine, r_affine, "memory" },
    /* packed weights read by the products (decode: bytes of W against the copy bandwidth) */
    PACKED("bf16", WGML_BF16, 0),
    PACKED("q8_0", WGML_Q8_0, 0),
    PACKED("q4_0", WGML_Q4_0, 0),
    PACKED("q4_k", WGML_Q4_K, 0),
    PACKED("q6_k", WGML_Q6_K, 0),
    PACKED("affine4", WGML_AFFINE, 4),
    PACKED("affine8", WGML_AFFINE, 8),
    /* training */
    { "adamw_update", "1e8", { 100000000 }, { 1 << 20 }, adam_b, NULL, su_adam, r_adam, "memory" },
    { "sgd_update", "1e8", { 100000000 }, { 1 << 20 }, b3, NULL, su_adam, r_sgd, "memory" },
    { "cross_entropy_batched", "4096x131072", { 4096, 131072 }, { 64, 32768 }, ce_b, NULL, su_ce, r_ce, "memory" },
    { "global_norm", "10x2^24", { 10, 1 << 24 }, { 10, 1 << 18 }, gnorm_b, NULL, su_gnorm, r_gnorm, "memory" },
    { "embedding", "32000x4096 n16384", { 32000, 4096, 16384 }, { 2000, 256, 1024 }, emb_b, NULL, su_emb, r_emb, "memory" },
    { "embedding_backward", "32000x4096 n16384", { 32000, 4096, 16384 }, { 2000, 256, 1024 }, emb_bw_b, NULL, su_emb, r_emb_bw, "memory" },
    /* matrix products: {M, N, K} */
    { "matmul", "4096x4096x4096", { 4096, 4096, 4096 }, { 512, 512, 512 }, mm_b, mm_f, su_mm, r_mm, "matmul" },
    { "matmul_bt", "4096x4096x4096", { 4096, 4096, 4096 }, { 512, 512, 512 }, mm_b, mm_f, su_mm_bt, r_mm_bt, "matmul" },
    { "matmul_at", "4096x4096x4096", { 4096, 4096, 4096 }, { 512, 512, 512 }, mm_b, mm_f, su_mm_at, r_mm_at, "matmul" },
    { "matmul", "8192x8192x8192", { 8192, 8192, 8192 }, { 768, 768, 768 }, mm_b, mm_f, su_mm, r_mm, "matmul" },
    { "matmul_bt", "8192x8192x8192", { 8192, 8192, 8192 }, { 768, 768, 768 }, mm_b, mm_f, su_mm_bt, r_mm_bt, "matmul" },
    { "matmul_at", "8192x8192x8192", { 8192, 8192, 8192 }, { 768, 768, 768 }, mm_b, mm_f, su_mm_at, r_mm_at, "matmul" },
    /* the same work but for 0.1% in 4,092 tiles of 128 x 128, 31 per SM of the H200, where 8192^3's
       4,096 leave 4 SMs a 32nd: what the last, nearly empty round costs (bench/notes/matmul.md) */
    { "matmul_at", "7936x8448x8192", { 7936, 8448, 8192 }, { 640, 896, 768 }, mm_b, mm_f, su_mm_at, r_mm_at, "matmul" },
    /* the f16 precisions: inputs rounded to f16 (PyTorch's f16 product beside them), and
       f32 accuracy from three f16 products (PyTorch's f32 product beside it) */
    { "matmul", "4096x4096x4096 f16", { 4096, 4096, 4096 }, { 512, 512, 512 }, mm_b, mm_f, su_mm, r_mm_f16, "matmul-f16" },
    { "matmul_bt", "4096x4096x4096 f16", { 4096, 4096, 4096 }, { 512, 512, 512 }, mm_b, mm_f, su_mm_bt, r_mm_bt_f16, "matmul-f16" },
    { "matmul_at", "4096x4096x4096 f16", { 4096, 4096, 4096 }, { 512, 512, 512 }, mm_b, mm_f, su_mm_at, r_mm_at_f16, "matmul-f16" },
    { "matmul_bt", "4096x4096x4096 f16x3", { 4096, 4096, 4096 }, { 512, 512, 512 }, mm_b, mm_f, su_mm_bt, r_mm_bt_f16x3,
      "matmul-f16" },
    /* the linear layers of a 12 x 768 model (FFN 2048) trained on 8 x 1024 tokens: forward,
       input gradient, weight gradient, f32 and f16 (what training at --precision f16 gains) */
    { "matmul_bt", "8192x2048x768", { 8192, 2048, 768 }, { 512, 256, 96 }, mm_b, mm_f, su_mm_bt, r_mm_bt, "matmul" },
    { "matmul", "8192x768x2048", { 8192, 768, 2048 }, { 512, 96, 256 }, mm_b, mm_f, su_mm, r_mm, "matmul" },
    { "matmul_at", "2048x768x8192", { 2048, 768, 8192 }, { 256, 96, 512 }, mm_b, mm_f, su_mm_at, r_mm_at, "matmul" },
    { "matmul_bt", "8192x2048x768 f16", { 8192, 2048, 768 }, { 512, 256, 96 }, mm_b, mm_f, su_mm_bt, r_mm_bt_f16, "matmul-f16" },
    { "matmul", "8192x768x2048 f16", { 8192, 768, 2048 }, { 512, 96, 256 }, mm_b, mm_f, su_mm, r_mm_f16, "matmul-f16" },
    { "matmul_at", "2048x768x8192 f16", { 2048, 768, 8192 }, { 256, 96, 512 }, mm_b, mm_f, su_mm_at, r_mm_at_f16, "matmul-f16" },
    { "matmul_bt", "2048x11008x4096", { 2048, 11008, 4096 }, { 256, 1376, 512 }, mm_b, mm_f, su_mm_bt, r_mm_bt, "matmul" },
    { "matmul_bt", "2048x4096x11008", { 2048, 4096, 11008 }, { 256, 512, 1376 }, mm_b, mm_f, su_mm_bt, r_mm_bt, "matmul" },
    { "matmul", "2048x11008x4096", { 2048, 11008, 4096 }, { 256, 1376, 512 }, mm_b, mm_f, su_mm, r_mm, "matmul" },
    { "matmul_at", "4096x11008x2048", { 4096, 11008, 2048 }, { 512, 1376, 256 }, mm_b, mm_f, su_mm_at, r_mm_at, "matmul" },
    /* sizes that are not multiples of 4 (the scalar loads of every operand), and a GPT-2 head of
       50,257 words over 8,192 tokens: its forward, input gradient and weight gradient */
    { "matmul", "4095x4095x4095", { 4095, 4095, 4095 }, { 511, 511, 511 }, mm_b, mm_f, su_mm, r_mm, "matmul" },
    { "matmul_bt", "4095x4095x4095", { 4095, 4095, 4095 }, { 511, 511, 511 }, mm_b, mm_f, su_mm_bt, r_mm_bt, "matmul" },
    { "matmul_at", "4095x4095x4095", { 4095, 4095, 4095 }, { 511, 511, 511 }, mm_b, mm_f, su_mm_at, r_mm_at, "matmul" },
    /* the same apart: only K odd (a partial last step), only M and N odd (padded copies, edge tiles) */
    { "matmul_at", "4096x4096x4095", { 4096, 4096, 4095 }, { 512, 512, 511 }, mm_b, mm_f, su_mm_at, r_mm_at, "matmul" },
    { "matmul_at", "4095x4095x4096", { 4095, 4095, 4096 }, { 511, 511, 512 }, mm_b, mm_f, su_mm_at, r_mm_at, "matmul" },
    { "matmul_bt", "8192x50257x768", { 8192, 50257, 768 }, { 256, 1571, 64 }, mm_b, mm_f, su_mm_bt, r_mm_bt, "matmul" },
    { "matmul", "8192x768x50257", { 8192, 768, 50257 }, { 256, 64, 1571 }, mm_b, mm_f, su_mm, r_mm, "matmul" },
    { "matmul_at", "50257x768x8192", { 50257, 768, 8192 }, { 1571, 64, 256 }, mm_b, mm_f, su_mm_at, r_mm_at, "matmul" },
    { "matmul_bt", "1x4096x4096", { 1, 4096, 4096 }, { 1, 4096, 4096 }, mm_b, mm_f, su_mm_bt, r_mm_bt, "decode" },
    { "matmul_bt", "1x14336x4096", { 1, 14336, 4096 }, { 1, 4096, 4096 }, mm_b, mm_f, su_mm_bt, r_mm_bt, "decode" },
    { "matmul_bt", "1x4096x14336", { 1, 4096, 14336 }, { 1, 4096, 4096 }, mm_b, mm_f, su_mm_bt, r_mm_bt, "decode" },
    { "matmul", "1x4096x4096", { 1, 4096, 4096 }, { 1, 4096, 4096 }, mm_b, mm_f, su_mm, r_mm, "decode" },
    { "matmul", "1x4096x14336", { 1, 4096, 14336 }, { 1, 4096, 4096 }, mm_b, mm_f, su_mm, r_mm, "decode" },
    { "matmul", "1x14336x4096", { 1, 14336, 4096 }, { 1, 4096, 4096 }, mm_b, mm_f, su_mm, r_mm, "decode" },
    /* 8 MiB of b, held in the L2 between calls: what each kernel costs beside its reads */
    { "matmul_bt", "1x4096x512", { 1, 4096, 512 }, { 1, 512, 64 }, mm_b, mm_f, su_mm_bt, r_mm_bt, "decode" },
    { "matmul", "1x4096x512", { 1, 4096, 512 }, { 1, 512, 64 }, mm_b, mm_f, su_mm, r_mm, "decode" },
    { "matmul_bt", "1x4096x4096 cold", { 1, 4096, 4096 }, { 1, 512, 512 }, mm_b, mm_f, su_mm_cold_bt, r_mm_bt_cold, "decode" },
    { "matmul", "1x4096x4096 cold", { 1, 4096, 4096 }, { 1, 512, 512 }, mm_b, mm_f, su_mm_cold_mm, r_mm_cold, "decode" },
    { "matmul", "1x4096x14336 cold", { 1, 4096, 14336 }, { 1, 512, 512 }, mm_b, mm_f, su_mm_cold_mm, r_mm_cold, "decode" },
    { "matmul", "1x14336x4096 cold", { 1, 14336, 4096 }, { 1, 512, 512 }, mm_b, mm_f, su_mm_cold_mm, r_mm_cold, "decode" },
    /* decode-fit: both decode kernels on cold weights of 16 - 256 MiB (N = 4096), for a fit of
       time = fixed cost per call + bytes / streaming rate over K = 2048 .. 16384 in whole rounds
       of gemv_cols4's 512 x 8 form (bench/decode_fit.py); K = 1024 (no whole round) and 11008
       (5 rounds and 3 quads per thread) run its last partial round. PyTorch's side of these
       rows runs in a CUDA graph, without its host's cost per call */
    MM_FIT("matmul", 1024, su_mm_cold_mm, r_mm_cold),
    MM_FIT("matmul", 2048, su_mm_cold_mm, r_mm_cold),
    MM_FIT("matmul", 4096, su_mm_cold_mm, r_mm_cold),
    MM_FIT("matmul", 8192, su_mm_cold_mm, r_mm_cold),
    MM_FIT("matmul", 11008, su_mm_cold_mm, r_mm_cold),
    MM_FIT("matmul", 12288, su_mm_cold_mm, r_mm_cold),
    MM_FIT("matmul", 16384, su_mm_cold_mm, r_mm_cold),
    MM_FIT("matmul_bt", 1024, su_mm_cold_bt, r_mm_bt_cold),
    MM_FIT("matmul_bt", 2048, su_mm_cold_bt, r_mm_bt_cold),
    MM_FIT("matmul_bt", 4096, su_mm_cold_bt, r_mm_bt_cold),
    MM_FIT("matmul_bt", 8192, su_mm_cold_bt, r_mm_bt_cold),
    MM_FIT("matmul_bt", 11008, su_mm_cold_bt, r_mm_bt_cold),
    MM_FIT("matmul_bt", 12288, su_mm_cold_bt, r_mm_bt_cold),
    MM_FIT("matmul_bt", 16384, su_mm_cold_bt, r_mm_bt_cold),
    /* attention */
    { "flash_attention_v2", "B4 H32 S4096 D128 causal", { 4, 4096, 32, 32, 128, 4096, 1 }, { 1, 256, 4, 4, 64, 256, 1 },
      attn_b, attn_f, su_attn, r_attn, "attention" },
    { "flash_attention_v2", "B4 H32 S4096 D128", { 4, 4096, 32, 32, 128, 4096, 0 }, { 1, 256, 4, 4, 64, 256, 0 },
      attn_b, attn_f, su_attn, r_attn, "attention" },
    { "flash_attention_v2", "B4 H32 S4096 D128 causal f16", { 4, 4096, 32, 32, 128, 4096, 1 }, { 1, 256, 4, 4, 64, 256, 1 },
      attn_b, attn_f, su_attn_f16, r_attn, "attention-f16" },
    { "flash_attention_v2", "B4 H32 S4096 D128 f16", { 4, 4096, 32, 32, 128, 4096, 0 }, { 1, 256, 4, 4, 64, 256, 0 },
      attn_b, attn_f, su_attn_f16, r_attn, "attention-f16" },
    { "flash_attention_v2", "B8 H12 S1024 D64 causal f16", { 8, 1024, 12, 12, 64, 1024, 1 }, { 1, 64, 2, 2, 64, 64, 1 },
      attn_b, attn_f, su_attn_f16, r_attn, "attention-f16" },
    { "flash_attention_v2 fwd+bwd", "B4 H32 S4096 D128 causal", { 4, 4096, 32, 32, 128, 4096, 1 }, { 1, 256, 4, 4, 64, 256, 1 },
      attn_b, attn_fb_f, su_attn, r_attn_fb, "attention" },
    { "flash_attention_v2 fwd+bwd", "B4 H32 S4096 D128 causal lse f16", { 4, 4096, 32, 32, 128, 4096, 1 },
      { 1, 256, 4, 4, 64, 256, 1 }, attn_b, attn_fb_f, su_attn_lse_f16, r_attn_fb, "attention-f16" },
    { "flash_attention_v2 fwd+bwd", "B8 H12 S1024 D64 causal lse f16", { 8, 1024, 12, 12, 64, 1024, 1 },
      { 1, 64, 2, 2, 64, 64, 1 }, attn_b, attn_fb_f, su_attn_lse_f16, r_attn_fb, "attention-f16" },
    { "flash_attention_v2 fwd+bwd", "B4 H32 S4096 D128 causal lse", { 4, 4096, 32, 32, 128, 4096, 1 }, { 1, 256, 4, 4, 64, 256, 1 },
      attn_b, attn_fb_f, su_attn_lse, r_attn_fb, "attention" },
    { "flash_attention_v2", "B1 H32 KV8 S4096 D128 causal", { 1, 4096, 32, 8, 128, 4096, 1 }, { 1, 256, 8, 2, 64, 256, 1 },
      attn_b, attn_f, su_attn, r_attn, "attention" },
    { "flash_attention_v2", "B1 H32 S4096 D128 causal w1024", { 1, 4096, 32, 32, 128, 4096, 1 | (1024 << 1) },
      { 1, 256, 4, 4, 64, 256, 1 | (64 << 1) }, attn_b, attn_f, su_attn, r_attn, "attention" },
    { "flash_attention_v2", "decode H32 KV8 D128 ctx4096", { 1, 1, 32, 8, 128, 4096, 1 }, { 1, 1, 32, 8, 128, 1024, 1 },
      attn_b, attn_f, su_attn, r_attn, "decode" },
    { "flash_attention_v2", "decode H32 KV8 D128 ctx32768", { 1, 1, 32, 8, 128, 32768, 1 }, { 1, 1, 32, 8, 128, 4096, 1 },
      attn_b, attn_f, su_attn, r_attn, "decode" },
    /* overhead: a chain of 1000 dependent tiny ops, host clock */
    { "add", "1024 x1000 chain", { 1024 }, { 1024 }, b3, NULL, su_tiny, r_tiny, "overhead" },
    { "add", "1024 x1000 chain, recording", { 1024 }, { 1024 }, b3, NULL, su_tiny, r_tiny, "overhead-record" },
    { "add", "1024 x1000 chain, GPU clock", { 1024 }, { 1024 }, b3, NULL, su_tiny, r_tiny, "overhead-gpu" },
    /* the largest count fused (2^20 elements): the fused chain against one dispatch per op (WGML_FUSE=0) */
    { "add", "2^20 x1000 chain, GPU clock", { 1u << 20 }, { 1u << 14 }, b3, NULL, su_tiny, r_tiny, "overhead-gpu" },
    /* a chain of 1000 dependent products too small to matter (1 x 256 x 256): the GPU's cost of one
       dependent matrix-product dispatch beside its reads */
    { "matmul", "1x256x256 x1000 chain, GPU clock", { 1, 256, 256 }, { 1, 256, 256 }, mm_b, mm_f, su_mm, r_mm, "overhead-gpu" },
    /* one decoded token of the end-to-end model (12 x 768, ffn 2048, bytes), GPU clock and with its read */
    { "model_decode", "12x768 ffn2048 vocab256 ctx256+", { 768, 12, 2048, 256, 256 }, { 64, 2, 128, 256, 16 }, model_b, NULL,
      su_model, r_decode, "decode" },
    { "model_decode", "12x768 ffn2048 vocab256 ctx256+, read", { 768, 12, 2048, 256, 256 }, { 64, 2, 128, 256, 16 }, model_b,
      NULL, su_model, r_decode_read, "roundtrip" },
    /* the ops of that decode step, one by one (where a token's time goes) */
    { "matmul_bt", "1x768x768", { 1, 768, 768 }, { 1, 64, 64 }, mm_b, mm_f, su_mm_bt, r_mm_bt, "decode-ops" },
    { "matmul_bt", "1x2048x768", { 1, 2048, 768 }, { 1, 128, 64 }, mm_b, mm_f, su_mm_bt, r_mm_bt, "decode-ops" },
    { "matmul_bt", "1x768x2048", { 1, 768, 2048 }, { 1, 64, 128 }, mm_b, mm_f, su_mm_bt, r_mm_bt, "decode-ops" },
    { "matmul_bt", "1x256x768", { 1, 256, 768 }, { 1, 256, 64 }, mm_b, mm_f, su_mm_bt, r_mm_bt, "decode-ops" },
    { "rms_norm_residual_with", "1x768", { 1, 768 }, { 1, 64 }, rb4, NULL, su_rows, r_rms_res, "decode-ops" },
    { "rope_theta", "1x1x12x64", { 1, 1, 12, 64 }, { 1, 1, 1, 64 }, rope_b, NULL, su_rope, r_rope, "decode-ops" },
    { "copy_tensor", "768", { 768 }, { 64 }, b2, NULL, su_two_in, r_copy, "decode-ops" },
    { "silu_gate_fused", "2048", { 2048 }, { 128 }, b3, NULL, su_two_in, r_silu_gate, "decode-ops" },
    { "embedding", "256x768 n1", { 256, 768, 1 }, { 256, 64, 1 }, emb_b, NULL, su_emb, r_emb, "decode-ops" },
    { "flash_attention_v2", "decode H12 D64 ctx512", { 1, 1, 12, 12, 64, 512, 1 }, { 1, 1, 1, 1, 64, 16, 1 }, attn_b, attn_f,
      su_attn, r_attn, "decode-ops" },
    { "top_k", "256 k1", { 256, 1 }, { 256, 1 }, topk_b, NULL, su_topk, r_topk, "decode-ops" },
    /* one training step of the end-to-end model (batch 8 x 1024 tokens) and its ops one by one */
    { "model_train_step", "12x768 ffn2048 vocab256 B8 T1024", { 768, 12, 2048, 256, 8, 1024 }, { 64, 2, 128, 256, 2, 32 },
      model_b, train_f, su_train, r_train, "train-ops" },
    { "matmul_bt", "8192x768x768", { 8192, 768, 768 }, { 256, 64, 64 }, mm_b, mm_f, su_mm_bt, r_mm_bt, "train-ops" },
    { "matmul_bt", "8192x2048x768", { 8192, 2048, 768 }, { 256, 128, 64 }, mm_b, mm_f, su_mm_bt, r_mm_bt, "train-ops" },
    { "matmul_bt", "8192x768x2048", { 8192, 768, 2048 }, { 256, 64, 128 }, mm_b, mm_f, su_mm_bt, r_mm_bt, "train-ops" },
    { "matmul", "8192x768x768", { 8192, 768, 768 }, { 256, 64, 64 }, mm_b, mm_f, su_mm, r_mm, "train-ops" },
    { "matmul", "8192x768x2048", { 8192, 768, 2048 }, { 256, 64, 128 }, mm_b, mm_f, su_mm, r_mm, "train-ops" },
    { "matmul", "8192x2048x768", { 8192, 2048, 768 }, { 256, 128, 64 }, mm_b, mm_f, su_mm, r_mm, "train-ops" },
    { "matmul_with", "8192x768x768 accumulate", { 8192, 768, 768 }, { 256, 64, 64 }, mm_acc_b, mm_f, su_mm, r_mm_acc, "train-ops" },
    { "matmul_with", "8192x768x2048 accumulate", { 8192, 768, 2048 }, { 256, 64, 128 }, mm_acc_b, mm_f, su_mm, r_mm_acc, "train-ops" },
    { "matmul_at", "768x768x8192", { 768, 768, 8192 }, { 64, 64, 256 }, mm_b, mm_f, su_mm_at, r_mm_at, "train-ops" },
    { "matmul_at", "768x2048x8192", { 768, 2048, 8192 }, { 64, 128, 256 }, mm_b, mm_f, su_mm_at, r_mm_at, "train-ops" },
    { "matmul_at", "2048x768x8192", { 2048, 768, 8192 }, { 128, 64, 256 }, mm_b, mm_f, su_mm_at, r_mm_at, "train-ops" },
    { "flash_attention_v2", "B8 H12 S1024 D64 causal", { 8, 1024, 12, 12, 64, 1024, 1 }, { 1, 64, 2, 2, 64, 64, 1 },
      attn_b, attn_f, su_attn, r_attn, "train-ops" },
    { "flash_attention_v2 fwd+bwd", "B8 H12 S1024 D64 causal", { 8, 1024, 12, 12, 64, 1024, 1 }, { 1, 64, 2, 2, 64, 64, 1 },
      attn_b, attn_fb_f, su_attn, r_attn_fb, "train-ops" },
    { "flash_attention_v2 fwd+bwd", "B8 H12 S1024 D64 causal lse", { 8, 1024, 12, 12, 64, 1024, 1 }, { 1, 64, 2, 2, 64, 64, 1 },
      attn_b, attn_fb_f, su_attn_lse, r_attn_fb, "train-ops" },
    { "flash_attention_v2 fwd+bwd", "B8 H12 S1024 D64 causal lse scores", { 8, 1024, 12, 12, 64, 1024, 1 }, { 1, 64, 2, 2, 64, 64, 1 },
      attn_b, attn_fb_f, su_attn_scores, r_attn_fb, "train-ops" },
    { "flash_attention_v2", "B8 H12 S1024 D64 causal lse scores", { 8, 1024, 12, 12, 64, 1024, 1 }, { 1, 64, 2, 2, 64, 64, 1 },
      attn_b, attn_f, su_attn_scores, r_attn, "train-ops" },
    { "flash_attention_v2 fwd+bwd", "B4 H16 S1024 D128 causal lse scores", { 4, 1024, 16, 16, 128, 1024, 1 }, { 1, 64, 2, 2, 128, 64, 1 },
      attn_b, attn_fb_f, su_attn_scores, r_attn_fb, "train-ops" },
    { "flash_attention_v2", "B4 H16 S1024 D128 causal lse scores", { 4, 1024, 16, 16, 128, 1024, 1 }, { 1, 64, 2, 2, 128, 64, 1 },
      attn_b, attn_f, su_attn_scores, r_attn, "train-ops" },
    /* round trips: what a host waits for the device when nothing is pending, and for one tiny op and a read */
    { "context_sync", "nothing pending", { 1024 }, { 1024 }, b3, NULL, su_tiny, r_sync, "roundtrip" },
    { "tensor_read", "add 1024, read 4 bytes", { 1024 }, { 1024 }, b3, NULL, su_tiny, r_add_read, "roundtrip" },
};
const size_t bench_case_count = sizeof bench_cases / sizeof bench_cases[0];
