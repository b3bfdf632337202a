/* The Llama-style model of src/model.c against the double-precision CPU reference of
   tests/ref/ref_model.c: logits, loss and every gradient on tiny random models; the
   reference's own gradients against finite differences; training reduces the loss;
   gradient accumulation and the AdamW step; a checkpoint round trip; generation with a
   KV cache against the full forward; malformed checkpoints and configs. */
#include "harness.h"
#include "model_config.h"
#include "ref_model.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Two shapes: A has untied weights and two kv heads per four query heads; B is tied,
   multi-query (one kv head), with sizes that are multiples of nothing. */
typedef struct tiny { ref_model_shape s; int B, T; } tiny;
static const tiny tiny_a = { { .vocab = 64, .dim = 32, .layers = 2, .heads = 4, .kv_heads = 2, .head_dim = 8, .ffn = 48,
                               .rope_theta = 10000, .eps = 1e-5, .tied = false }, 2, 16 };
static const tiny tiny_b = { { .vocab = 67, .dim = 24, .layers = 1, .heads = 3, .kv_heads = 1, .head_dim = 8, .ffn = 37,
                               .rope_theta = 100000, .eps = 1e-6, .tied = true }, 1, 13 };
/* The families beside Llama: Mistral's sliding window (5 keys, over sequences of 16 and
   a prompt of 12, so that it cuts), Qwen2's q, k, v biases, Qwen3's per-head q and k
   norms (head_dim 6, not a power of two). */
static const tiny tiny_mistral = { { .vocab = 61, .dim = 32, .layers = 2, .heads = 4, .kv_heads = 2, .head_dim = 8, .ffn = 40,
                                     .rope_theta = 10000, .eps = 1e-5, .window = 5 }, 2, 16 };
static const tiny tiny_qwen2 = { { .vocab = 59, .dim = 28, .layers = 2, .heads = 4, .kv_heads = 2, .head_dim = 8, .ffn = 36,
                                   .rope_theta = 1000000, .eps = 1e-6, .tied = true, .qkv_bias = true }, 2, 11 };
static const tiny tiny_qwen3 = { { .vocab = 53, .dim = 24, .layers = 2, .heads = 4, .kv_heads = 2, .head_dim = 6, .ffn = 30,
                                   .rope_theta = 1000000, .eps = 1e-6, .tied = true, .qk_norm = true }, 2, 9 };
/* LFM2: convolution (width 3), attention with per-head q and k norms, convolution; a
   sequence of 10 (past several widths of the kernel). */
static const bool lfm2_conv[3] = { true, false, true };
static const tiny tiny_lfm2 = { { .vocab = 47, .dim = 20, .layers = 3, .heads = 4, .kv_heads = 2, .head_dim = 6, .ffn = 26,
                                  .rope_theta = 1000000, .eps = 1e-5, .tied = true, .qk_norm = true, .conv_kernel = 3,
                                  .conv = lfm2_conv }, 2, 10 };
/* Gemma 3: sliding (window 4 over sequences of 10), global, sliding layers with their two
   RoPE bases, head_dim 256 (Gemma's own), (1 + w) norms around each block, GeGLU, the
   embeddings scaled, scores scaled by 1/12 (query_pre_attn_scalar 144) rather than
   1/sqrt(head_dim) = 1/16. (A larger scale over 256-long q . k of normalised heads makes
   the attention nearly one-hot: its gradients then lose the f32 digits the tolerances
   assume.) */
static const bool gemma_full[3] = { false, true, false };
static const tiny tiny_gemma3 = { { .vocab = 43, .dim = 24, .layers = 3, .heads = 2, .kv_heads = 1, .head_dim = 256, .ffn = 28,
                                    .rope_theta = 1000000, .eps = 1e-6, .tied = true, .qk_norm = true, .window = 4,
                                    .gemma = true, .gelu = true, .full = gemma_full, .rope_local_theta = 10000,
                                    .attn_scale = 1.0 / 12 }, 2, 10 };
static const tiny *const families[] = { &tiny_mistral, &tiny_qwen2, &tiny_qwen3, &tiny_lfm2, &tiny_gemma3 };
#define FAMILIES (sizeof families / sizeof families[0])
static const char *family_name(const ref_model_shape *s) { return ref_family_name(s); }
static wgml_model_config config_of(const ref_model_shape *s) { return ref_config_of(s); }

/* Whether parameter i is a norm's weight (the layers', the final, Qwen3's q and k norms). */
static bool is_norm(const ref_model_shape *s, int i)
{
    for (int l = 0; l < s->layers; l++)
        if (i == ref_model_param(s, l, REF_ATTN_NORM) || i == ref_model_param(s, l, REF_FFN_NORM) ||
            i == ref_model_extra(s, l, REF_QNORM) || i == ref_model_extra(s, l, REF_KNORM) ||
            i == ref_model_extra(s, l, REF_POST_ATTN) || i == ref_model_extra(s, l, REF_POST_FFN))
            return true;
    return i == ref_model_final_norm(s);
}

/* Random parameters large enough that every layer matters: matrices uniform in +-0.35
   (pre-activations of order 1 at these widths), norm weights in [0.7, 1.3] (Gemma's
   stored w of 1 + w in [-0.3, 0.3], the same scales), biases in +-0.5. */
static float **random_params(const ref_model_shape *s)
{
    int np = ref_model_param_count(s);
    float **p = malloc(sizeof(float *) * (size_t)np);
    for (int i = 0; i < np; i++) {
        size_t n = ref_model_param_numel(s, i);
        bool bias = false;
        for (int l = 0; l < s->layers; l++)
            for (int k = REF_BQ; k <= REF_BV; k++) bias = bias || i == ref_model_extra(s, l, k);
        double off = s->gemma ? 1.0 : 0.0;
        p[i] = is_norm(s, i) ? th_random(n, 0.7 - off, 1.3 - off) : bias ? th_random(n, -0.5, 0.5)
                             : th_random(n, i == 0 ? -1.0 : -0.35, i == 0 ? 1.0 : 0.35);
    }
    return p;
}

static void free_params(const ref_model_shape *s, float **p)
{
    for (int i = 0; i < ref_model_param_count(s); i++) free(p[i]);
    free(p);
}

static wgml_model *make_model(const ref_model_shape *s, float **params)
{
    wgml_model_config c = config_of(s);
    wgml_model *m = NULL;
    TH_EXPECT(wgml_model_create(th_eng, &c, &m), WGML_OK);
    if (!m) return NULL;
    TH_CHECK(wgml_model_param_count(m) == (size_t)ref_model_param_count(s), "param count %zu, want %d",
             wgml_model_param_count(m), ref_model_param_count(s));
    for (int i = 0; i < ref_model_param_count(s); i++) {
        wgml_tensor *t = wgml_model_param(m, (size_t)i, NULL);
        TH_CHECK(wgml_tensor_numel(t) == ref_model_param_numel(s, i), "param %d size", i);
        TH_EXPECT(wgml_tensor_write(t, 0, params[i], ref_model_param_numel(s, i) * sizeof(float)), WGML_OK);
    }
    return m;
}

static uint32_t *random_ids(size_t n, int vocab)
{
    uint32_t *ids = malloc(sizeof(uint32_t) * n);
    for (size_t i = 0; i < n; i++) ids[i] = th_rand_u32() % (uint32_t)vocab;
    return ids;
}

static float read_scalar(wgml_tensor *t)
{
    float x = NAN;
    TH_EXPECT(wgml_tensor_read(t, 0, &x, sizeof x), WGML_OK);
    return x;
}

/* Logits tolerance. The GPU runs each stage in f32: a dot product of length K <= 48 has
   rounding error below K * 2^-24 relative to the sum of |terms| (about 3e-6), and about
   twenty such stages (norms, projections, attention, SwiGLU) feed the logits, whose
   magnitude here is below 10. Errors of 1e-4 absolute would already be 30x that bound;
   a wrong kernel (a missing RoPE rotation, a misplaced GQA head, an off-by-one in the
   causal mask) changes logits by 1e-2 or more. Measured on lavapipe: at most 3e-6. */
#define LOGIT_ATOL 1e-4
#define LOGIT_RTOL 1e-4

static void check_forward(const tiny *tc)
{
    const ref_model_shape *s = &tc->s;
    size_t N = (size_t)tc->B * tc->T;
    float **params = random_params(s);
    uint32_t *ids = random_ids(N, s->vocab), *targets = random_ids(N, s->vocab);
    double *ref = th_alloc_d(N * (size_t)s->vocab);
    double ref_loss = ref_model_run(s, (const float *const *)params, ids, targets, tc->B, tc->T, ref, NULL);

    wgml_model *m = make_model(s, params);
    wgml_trainer *t = NULL;
    TH_EXPECT(wgml_trainer_create(m, &(wgml_trainer_desc){ .batch = (uint32_t)tc->B, .seq_len = (uint32_t)tc->T }, &t), WGML_OK);
    wgml_tensor *loss = th_poisoned(WGML_F32, TH_SHAPE(1));
    TH_EXPECT(wgml_trainer_eval(t, ids, targets, loss), WGML_OK);
    float *logits = th_read(wgml_trainer_logits(t));
    char what[96];
    snprintf(what, sizeof what, "%s logits V=%d D=%d L=%d H=%d Hk=%d %s", family_name(s), s->vocab, s->dim, s->layers,
             s->heads, s->kv_heads, s->tied ? "tied" : "untied");
    th_compare(what, logits, ref, N * (size_t)s->vocab, LOGIT_ATOL, LOGIT_RTOL);
    float got_loss = read_scalar(loss);
    /* the mean of N losses, each within the logit tolerance (log-sum-exp is 1-Lipschitz) */
    TH_CHECK(fabs(got_loss - ref_loss) <= 2 * LOGIT_ATOL + 1e-5 * ref_loss, "loss %.7f, want %.7f", got_loss, ref_loss);

    free(logits);
    wgml_tensor_release(loss);
    wgml_trainer_destroy(t);
    wgml_model_destroy(m);
    free(ids); free(targets); free(ref);
    free_params(s, params);
}

static void test_forward_matches_reference(void)
{
    check_forward(&tiny_a);
    check_forward(&tiny_b);
    for (size_t f = 0; f < FAMILIES; f++) check_forward(families[f]);
}

/* The reference's analytic gradients against central differences of its own loss, in
   double, for a few elements of every parameter tensor: this makes the reference worth
   comparing the GPU with. A central difference D(h) errs by h^2 f''' / 6 + O(h^4), and f'''
   is not small everywhere (seed 4767779779064458040: 3.2e-6 at h = 2^-10, above the
   tolerance), so the estimate is Richardson's (4 D(h/2) - D(h)) / 3, whose error is O(h^4)
   ~ 1e-12 f^(5); the rounding error is ~ 1e-16 / h. Both far below the tolerance
   1e-6 + 1e-5 * |g|. */
static void test_reference_gradients_by_finite_differences(void)
{
    const tiny *cases[] = { &tiny_a, &tiny_b, &tiny_mistral, &tiny_qwen2, &tiny_qwen3, &tiny_lfm2, &tiny_gemma3 };
    for (int c = 0; c < 7; c++) {
        const ref_model_shape *s = &cases[c]->s;
        int B = cases[c]->B, T = cases[c]->T, np = ref_model_param_count(s);
        size_t N = (size_t)B * T;
        float **params = random_params(s);
        uint32_t *ids = random_ids(N, s->vocab), *targets = random_ids(N, s->vocab);
        double **grads = malloc(sizeof(double *) * (size_t)np);
        for (int i = 0; i < np; i++) grads[i] = th_alloc_d(ref_model_param_numel(s, i));
        ref_model_run(s, (const float *const *)params, ids, targets, B, T, NULL, grads);
        /* float parameters: steps that are powers of two (exact unless a sum crosses a
           binade, which the divisor accounts for) */
        const float h = 1.0f / 1024;
        for (int i = 0; i < np; i++)
            for (int trial = 0; trial < 3; trial++) {
                size_t n = ref_model_param_numel(s, i);
                /* for the embedding, pick rows of tokens that occur */
                size_t j = i == 0 ? (size_t)ids[th_rand_u32() % N] * s->dim + th_rand_u32() % (uint32_t)s->dim : th_rand_u32() % n;
                double d[2];   /* central differences with steps h and h / 2 */
                for (int r = 0; r < 2; r++) {
                    float keep = params[i][j], step = r ? h / 2 : h, up = keep + step, down = keep - step;
                    params[i][j] = up;
                    double lp = ref_model_run(s, (const float *const *)params, ids, targets, B, T, NULL, NULL);
                    params[i][j] = down;
                    double lm = ref_model_run(s, (const float *const *)params, ids, targets, B, T, NULL, NULL);
                    params[i][j] = keep;
                    d[r] = (lp - lm) / ((double)up - (double)down);   /* the step as rounded to float */
                }
                double fd = (4.0 * d[1] - d[0]) / 3.0, g = grads[i][j];
                TH_CHECK(fabs(fd - g) <= 1e-6 + 1e-5 * fabs(g), "model %c param %d[%zu]: analytic %.10g, finite difference %.10g",
                         'A' + c, i, j, g, fd);
            }
        for (int i = 0; i < np; i++) free(grads[i]);
        free(grads); free(ids); free(targets);
        free_params(s, params);
    }
}

/* Gradient tolerance per tensor: f32 backward errors grow like the forward's (see the
   logits) and are relative to the scale of the tensor's gradient, so the absolute part is
   1e-4 of the tensor's largest reference gradient, and elements near that size must agree
   to 1e-4 relative. Measured on lavapipe: errors up to about 2e-6 of the largest gradient,
   so the bound has a margin of 50. A wrong gradient (a transposed product, a missing
   residual path, an unscaled accumulation) is off by O(1) of that scale. */
static void compare_grads(const char *label, const ref_model_shape *s, wgml_model *m, wgml_trainer *t, double *const *grads)
{
    for (int i = 0; i < ref_model_param_count(s); i++) {
        size_t n = ref_model_param_numel(s, i);
        double mx = 0;
        for (size_t j = 0; j < n; j++) mx = fmax(mx, fabs(grads[i][j]));
        float *got = th_read(wgml_trainer_grad(t, (size_t)i));
        const char *name = "";
        wgml_model_param(m, (size_t)i, &name);
        char what[160];
        snprintf(what, sizeof what, "%s: gradient of %s", label, name);
        th_compare(what, got, grads[i], n, 1e-4 * mx + 1e-9, 1e-4);
        free(got);
    }
}

static void check_backward(const tiny *tc)
{
    const ref_model_shape *s = &tc->s;
    int np = ref_model_param_count(s);
    size_t N = (size_t)tc->B * tc->T;
    float **params = random_params(s);
    uint32_t *ids = random_ids(N, s->vocab), *targets = random_ids(N, s->vocab);
    double **grads = malloc(sizeof(double *) * (size_t)np);
    for (int i = 0; i < np; i++) grads[i] = th_alloc_d(ref_model_param_numel(s, i));
    ref_model_run(s, (const float *const *)params, ids, targets, tc->B, tc->T, NULL, grads);

    wgml_model *m = make_model(s, params);
    wgml_trainer *t = NULL;
    TH_EXPECT(wgml_trainer_create(m, &(wgml_trainer_desc){ .batch = (uint32_t)tc->B, .seq_len = (uint32_t)tc->T }, &t), WGML_OK);
    TH_EXPECT(wgml_trainer_accumulate(t, ids, targets, 1.0f, NULL), WGML_OK);
    char label[96];
    snprintf(label, sizeof label, "%s %s model", family_name(s), s->tied ? "tied" : "untied");
    compare_grads(label, s, m, t, grads);

    /* Accumulation: two micro-batches at scale 1/2 give the mean of their gradients. */
    uint32_t *ids2 = random_ids(N, s->vocab), *targets2 = random_ids(N, s->vocab);
    double **grads2 = malloc(sizeof(double *) * (size_t)np);
    for (int i = 0; i < np; i++) grads2[i] = th_alloc_d(ref_model_param_numel(s, i));
    ref_model_run(s, (const float *const *)params, ids2, targets2, tc->B, tc->T, NULL, grads2);
    for (int i = 0; i < np; i++)
        for (size_t j = 0; j < ref_model_param_numel(s, i); j++) grads2[i][j] = 0.5 * (grads[i][j] + grads2[i][j]);
    TH_EXPECT(wgml_trainer_step(t, 0.0f, NULL), WGML_OK);   /* lr 0: clears the gradients only */
    TH_EXPECT(wgml_trainer_accumulate(t, ids, targets, 0.5f, NULL), WGML_OK);
    TH_EXPECT(wgml_trainer_accumulate(t, ids2, targets2, 0.5f, NULL), WGML_OK);
    compare_grads("two accumulated micro-batches", s, m, t, grads2);

    /* the same gradients with attention's scores kept from the forward for the backward */
    wgml_trainer *tk = NULL;
    TH_EXPECT(wgml_trainer_create(m, &(wgml_trainer_desc){ .batch = (uint32_t)tc->B, .seq_len = (uint32_t)tc->T,
                                                           .keep_attention_scores = true }, &tk), WGML_OK);
    TH_EXPECT(wgml_trainer_accumulate(tk, ids, targets, 1.0f, NULL), WGML_OK);
    snprintf(label, sizeof label, "%s %s model, scores kept", family_name(s), s->tied ? "tied" : "untied");
    compare_grads(label, s, m, tk, grads);
    wgml_trainer_destroy(tk);

    for (int i = 0; i < np; i++) { free(grads[i]); free(grads2[i]); }
    free(grads); free(grads2); free(ids); free(targets); free(ids2); free(targets2);
    wgml_trainer_destroy(t);
    wgml_model_destroy(m);
    free_params(s, params);
}

static void test_backward_matches_reference(void)
{
    check_backward(&tiny_a);
    check_backward(&tiny_b);
    for (size_t f = 0; f < FAMILIES; f++) check_backward(families[f]);
}

/* One optimizer step against AdamW computed here from the reference gradients: global
   norm clipping, bias correction of step 1, weight decay on matrices and embeddings only. */
static void test_optimizer_step(void)
{
    const ref_model_shape *s = &tiny_b.s;
    int np = ref_model_param_count(s), B = tiny_b.B, T = tiny_b.T;
    size_t N = (size_t)B * T;
    float **params = random_params(s);
    uint32_t *ids = random_ids(N, s->vocab), *targets = random_ids(N, s->vocab);
    double **grads = malloc(sizeof(double *) * (size_t)np);
    for (int i = 0; i < np; i++) grads[i] = th_alloc_d(ref_model_param_numel(s, i));
    ref_model_run(s, (const float *const *)params, ids, targets, B, T, NULL, grads);
    double norm2 = 0;
    for (int i = 0; i < np; i++)
        for (size_t j = 0; j < ref_model_param_numel(s, i); j++) norm2 += grads[i][j] * grads[i][j];
    double norm = sqrt(norm2), clip = 0.5 * norm;   /* make sure clipping acts */

    wgml_model *m = make_model(s, params);
    wgml_trainer *t = NULL;
    wgml_trainer_desc d = { .batch = (uint32_t)B, .seq_len = (uint32_t)T, .clip_norm = (float)clip, .weight_decay = 0.25f };
    TH_EXPECT(wgml_trainer_create(m, &d, &t), WGML_OK);
    wgml_tensor *gn = th_poisoned(WGML_F32, TH_SHAPE(1));
    TH_EXPECT(wgml_trainer_accumulate(t, ids, targets, 1.0f, NULL), WGML_OK);
    /* The expected update is computed from the gradients the GPU accumulated (compared
       with the reference in "backward matches reference"), so that this checks the step
       alone: AdamW's g / (|g| + eps) is ill-conditioned where |g| is near eps. */
    float **gpu_grads = malloc(sizeof(float *) * (size_t)np);
    double gpu_norm2 = 0;
    for (int i = 0; i < np; i++) {
        gpu_grads[i] = th_read(wgml_trainer_grad(t, (size_t)i));
        for (size_t j = 0; j < ref_model_param_numel(s, i); j++) gpu_norm2 += (double)gpu_grads[i][j] * gpu_grads[i][j];
    }
    const double lr = 0.01;
    TH_EXPECT(wgml_trainer_step(t, (float)lr, gn), WGML_OK);
    TH_CHECK(wgml_trainer_steps(t) == 1, "steps %u", wgml_trainer_steps(t));
    float got_norm = read_scalar(gn);
    TH_CHECK(fabs(got_norm - norm) <= 1e-3 * norm, "grad norm %.7g, want %.7g (reference)", got_norm, norm);
    TH_CHECK(fabs(got_norm - sqrt(gpu_norm2)) <= 1e-5 * got_norm, "grad norm %.7g, want %.7g (of the GPU's gradients)", got_norm,
             sqrt(gpu_norm2));
    /* Step 1 of AdamW with clipping: g = grad * clip / (norm + 1e-6); m = (1-b1) g and
       v = (1-b2) g^2, bias-corrected to g and g^2; w = w (1 - lr wd) - lr g / (|g| + eps),
       wd = 0.25 on matrices and embeddings, 0 on norm weights. In f32 each of these is a
       few roundings, relative 1e-6 of lr plus the weight's own rounding. */
    double scale = fmin(1.0, clip / (got_norm + 1e-6));
    for (int i = 0; i < np; i++) {
        size_t n = ref_model_param_numel(s, i);
        bool norm_param = n == (size_t)s->dim && i != 0;
        double wd = norm_param ? 0 : 0.25;
        double *want = th_alloc_d(n);
        for (size_t j = 0; j < n; j++) {
            double g = gpu_grads[i][j] * scale;
            want[j] = params[i][j] * (1 - lr * wd) - lr * g / (fabs(g) + 1e-8);
        }
        float *got = th_read(wgml_model_param(m, (size_t)i, NULL));
        char what[64];
        snprintf(what, sizeof what, "param %d after one AdamW step", i);
        th_compare(what, got, want, n, 1e-5 * lr, 1e-6);
        free(got); free(want); free(gpu_grads[i]);
    }
    free(gpu_grads);
    wgml_tensor_release(gn);
    for (int i = 0; i < np; i++) free(grads[i]);
    free(grads); free(ids); free(targets);
    wgml_trainer_destroy(t);
    wgml_model_destroy(m);
    free_params(s, params);
}

/* Training on a short repeated text reduces the loss from about ln(vocab) to a fraction
   of it within a few dozen steps. */
static void test_training_reduces_loss(void)
{
    ref_model_shape s = tiny_a.s;
    wgml_model_config c = config_of(&s);
    wgml_model *m = NULL;
    TH_EXPECT(wgml_model_create(th_eng, &c, &m), WGML_OK);
    TH_EXPECT(wgml_model_init_random(m, 1234, 0.02f), WGML_OK);
    int B = 2, T = 16;
    wgml_trainer *t = NULL;
    TH_EXPECT(wgml_trainer_create(m, &(wgml_trainer_desc){ .batch = (uint32_t)B, .seq_len = (uint32_t)T }, &t), WGML_OK);
    const char *text = "the quick brown fox jumps over the lazy dog. ";
    size_t len = strlen(text);
    uint32_t ids[32], targets[32];
    wgml_tensor *loss = th_poisoned(WGML_F32, TH_SHAPE(1));
    float first = 0, last = 0;
    for (int step = 0; step < 40; step++) {
        for (int b = 0; b < B; b++) {
            size_t off = (size_t)(step * 7 + b * 13) % len;
            for (int i = 0; i < T; i++) {
                ids[b * T + i] = (uint32_t)(text[(off + i) % len] - ' ') % 64;
                targets[b * T + i] = (uint32_t)(text[(off + i + 1) % len] - ' ') % 64;
            }
        }
        TH_EXPECT(wgml_trainer_accumulate(t, ids, targets, 1.0f, loss), WGML_OK);
        TH_EXPECT(wgml_trainer_step(t, 1e-2f, NULL), WGML_OK);
        float l = read_scalar(loss);
        if (step == 0) first = l;
        last = l;
    }
    TH_CHECK(fabs(first - log(64.0)) < 0.1, "first loss %.4f, expected about ln 64 = %.4f", first, log(64.0));
    TH_CHECK(last < 0.5f * first, "loss went from %.4f to %.4f in 40 steps; expected below half", first, last);
    printf("  training: loss %.4f -> %.4f in 40 steps\n", first, last);
    wgml_tensor_release(loss);
    wgml_trainer_destroy(t);
    wgml_model_destroy(m);
}

/* wgml_trainer_mark_last without a communicator changes nothing: two copies of a model
   trained alike, one with each step's last micro-batch marked, end with the same weights
   bit for bit. */
static void test_mark_last_alone(void)
{
    wgml_model_config c = config_of(&tiny_a.s);
    wgml_model *m[2] = { NULL, NULL };
    wgml_trainer *t[2] = { NULL, NULL };
    enum { B = 2, T = 8, STEPS = 3, ACCUM = 2 };
    for (int k = 0; k < 2; k++) {
        TH_EXPECT(wgml_model_create(th_eng, &c, &m[k]), WGML_OK);
        if (!m[k]) return;
        TH_EXPECT(wgml_model_init_random(m[k], 99, 0.02f), WGML_OK);
        TH_EXPECT(wgml_trainer_create(m[k], &(wgml_trainer_desc){ .batch = B, .seq_len = T }, &t[k]), WGML_OK);
        if (!t[k]) return;
    }
    for (int step = 0; step < STEPS; step++)
        for (int a = 0; a < ACCUM; a++) {
            uint32_t *ids = random_ids(B * T, tiny_a.s.vocab), *targets = random_ids(B * T, tiny_a.s.vocab);
            for (int k = 0; k < 2; k++) {
                if (k == 1 && a == ACCUM - 1) TH_EXPECT(wgml_trainer_mark_last(t[k]), WGML_OK);
                TH_EXPECT(wgml_trainer_accumulate(t[k], ids, targets, 1.0f / ACCUM, NULL), WGML_OK);
                if (a == ACCUM - 1) TH_EXPECT(wgml_trainer_step(t[k], 1e-2f, NULL), WGML_OK);
            }
            free(ids);
            free(targets);
        }
    size_t differ = 0;
    for (size_t i = 0; i < wgml_model_param_count(m[0]); i++) {
        wgml_tensor *p0 = wgml_model_param(m[0], i, NULL), *p1 = wgml_model_param(m[1], i, NULL);
        float *w0 = th_read(p0), *w1 = th_read(p1);
        differ += memcmp(w0, w1, wgml_tensor_numel(p0) * sizeof(float)) != 0;
        free(w0);
        free(w1);
    }
    TH_CHECK(differ == 0, "%zu parameters differ after %d steps with and without the mark", differ, STEPS);
    for (int k = 0; k < 2; k++) {
        wgml_trainer_destroy(t[k]);
        wgml_model_destroy(m[k]);
    }
}

/* A model trained with loss scaling (scale 2^16, interval 2) beside one trained without, on
   the same batches, clipped to clip_norm (0: the default): with the f32 products of this
   context a power-of-two scale is exact, so they end with the same weights and gradient
   norms, bit for bit (the scaled run divides its gradients by the scale in the clipping
   pass, which runs for that alone without clipping). norm: the gradient norm's tensor. */
enum { LS_B = 2, LS_T = 8, LS_STEPS = 3 };
static bool scaled_pair(float clip_norm, wgml_tensor *norm, wgml_model *m[2], wgml_trainer *t[2])
{
    wgml_model_config c = config_of(&tiny_a.s);
    for (int k = 0; k < 2; k++) {
        TH_EXPECT(wgml_model_create(th_eng, &c, &m[k]), WGML_OK);
        if (!m[k]) return false;
        TH_EXPECT(wgml_model_init_random(m[k], 7, 0.02f), WGML_OK);
        wgml_trainer_desc d = { .batch = LS_B, .seq_len = LS_T, .loss_scale = k ? 65536.0f : 0, .loss_scale_interval = 2,
                                .clip_norm = clip_norm };
        TH_EXPECT(wgml_trainer_create(m[k], &d, &t[k]), WGML_OK);
        if (!t[k]) return false;
    }
    TH_CHECK(wgml_trainer_loss_scale(t[0]) == 0 && wgml_trainer_loss_scale(t[1]) == 65536.0f, "initial scales %g, %g",
             (double)wgml_trainer_loss_scale(t[0]), (double)wgml_trainer_loss_scale(t[1]));
    float norms[2][LS_STEPS];
    for (int step = 0; step < LS_STEPS; step++) {
        uint32_t *ids = random_ids(LS_B * LS_T, tiny_a.s.vocab), *targets = random_ids(LS_B * LS_T, tiny_a.s.vocab);
        for (int k = 0; k < 2; k++) {
            TH_EXPECT(wgml_trainer_accumulate(t[k], ids, targets, 1.0f, NULL), WGML_OK);
            TH_EXPECT(wgml_trainer_step(t[k], 1e-2f, norm), WGML_OK);
            TH_EXPECT(wgml_tensor_read(norm, 0, &norms[k][step], sizeof(float)), WGML_OK);
        }
        free(ids);
        free(targets);
        TH_CHECK(norms[0][step] == norms[1][step], "clip %g, step %d: gradient norm %.9g unscaled, %.9g scaled", (double)clip_norm,
                 step, (double)norms[0][step], (double)norms[1][step]);
    }
    size_t differ = 0;
    for (size_t i = 0; i < wgml_model_param_count(m[0]); i++) {
        float *w0 = th_read(wgml_model_param(m[0], i, NULL)), *w1 = th_read(wgml_model_param(m[1], i, NULL));
        differ += memcmp(w0, w1, wgml_tensor_numel(wgml_model_param(m[0], i, NULL)) * sizeof(float)) != 0;
        free(w0);
        free(w1);
    }
    TH_CHECK(differ == 0, "clip %g: %zu parameters differ between the scaled and the unscaled run", (double)clip_norm, differ);
    return true;
}

/* Dynamic loss scaling (desc.loss_scale): a scaled model matches an unscaled one bit for
   bit, clipped or not (scaled_pair). A micro-batch whose scaled gradient overflows
   (grad_scale 2^126 times the scale) makes its step a skip: weights unchanged, the step not
   counted, the non-finite norm reported, the scale halved; two good steps (interval 2)
   double it again. The scaler's state survives wgml_trainer_save_state / load_state; a
   trainer without scaling ignores it. */
static void test_loss_scaling(void)
{
    enum { B = LS_B, T = LS_T, STEPS = LS_STEPS };
    wgml_model *m[2] = { NULL, NULL };
    wgml_trainer *t[2] = { NULL, NULL };
    wgml_tensor *norm = th_poisoned(WGML_F32, TH_SHAPE(1));
    bool made = scaled_pair(-1.0f, norm, m, t);   /* no clipping */
    for (int k = 0; k < 2; k++) {
        wgml_trainer_destroy(t[k]);
        wgml_model_destroy(m[k]);
        t[k] = NULL, m[k] = NULL;
    }
    if (!made || !scaled_pair(0.0f, norm, m, t)) goto out;
    /* 3 good steps with interval 2: doubled once */
    TH_CHECK(wgml_trainer_loss_scale(t[1]) == 131072.0f && wgml_trainer_steps(t[1]) == STEPS &&
             wgml_trainer_skipped_steps(t[1]) == 0, "after %d good steps: scale %g, %u steps, %u skipped", STEPS,
             (double)wgml_trainer_loss_scale(t[1]), wgml_trainer_steps(t[1]), wgml_trainer_skipped_steps(t[1]));

    /* an overflowing micro-batch: the step is skipped */
    wgml_tensor *p0 = wgml_model_param(m[1], 0, NULL);
    float *before = th_read(p0);
    uint32_t *ids = random_ids(B * T, tiny_a.s.vocab), *targets = random_ids(B * T, tiny_a.s.vocab);
    TH_EXPECT(wgml_trainer_accumulate(t[1], ids, targets, ldexpf(1, 126), NULL), WGML_OK);
    TH_EXPECT(wgml_trainer_step(t[1], 1e-2f, norm), WGML_OK);
    float nrm = 0, *after = th_read(p0);
    TH_EXPECT(wgml_tensor_read(norm, 0, &nrm, sizeof nrm), WGML_OK);
    TH_CHECK(!isfinite(nrm), "the overflowing step reported the norm %g", (double)nrm);
    TH_CHECK(memcmp(before, after, wgml_tensor_numel(p0) * sizeof(float)) == 0, "a skipped step changed the weights");
    TH_CHECK(wgml_trainer_steps(t[1]) == STEPS && wgml_trainer_skipped_steps(t[1]) == 1 &&
             wgml_trainer_loss_scale(t[1]) == 65536.0f, "after the skip: %u steps, %u skipped, scale %g",
             wgml_trainer_steps(t[1]), wgml_trainer_skipped_steps(t[1]), (double)wgml_trainer_loss_scale(t[1]));
    free(after);
    /* then training goes on from fresh gradients: two good steps double the scale again */
    for (int step = 0; step < 2; step++) {
        TH_EXPECT(wgml_trainer_accumulate(t[1], ids, targets, 1.0f, NULL), WGML_OK);
        TH_EXPECT(wgml_trainer_step(t[1], 1e-2f, norm), WGML_OK);
        TH_EXPECT(wgml_tensor_read(norm, 0, &nrm, sizeof nrm), WGML_OK);
        TH_CHECK(isfinite(nrm) && nrm > 0, "step after the skip: norm %g", (double)nrm);
    }
    after = th_read(p0);
    TH_CHECK(memcmp(before, after, wgml_tensor_numel(p0) * sizeof(float)) != 0, "the steps after the skip changed nothing");
    TH_CHECK(wgml_trainer_steps(t[1]) == STEPS + 2 && wgml_trainer_loss_scale(t[1]) == 131072.0f,
             "after two more good steps: %u steps, scale %g", wgml_trainer_steps(t[1]), (double)wgml_trainer_loss_scale(t[1]));
    free(before);
    free(after);
    free(ids);
    free(targets);

    /* the scaler's state in a checkpoint */
    char path[] = "/tmp/wgml_test_scale_XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    TH_EXPECT(wgml_trainer_save_state(t[1], path), WGML_OK);
    wgml_trainer *r = NULL, *plain = NULL;
    TH_EXPECT(wgml_trainer_create(m[1], &(wgml_trainer_desc){ .batch = B, .seq_len = T, .loss_scale = 8.0f }, &r), WGML_OK);
    if (r) {
        TH_EXPECT(wgml_trainer_load_state(r, path), WGML_OK);
        TH_CHECK(wgml_trainer_loss_scale(r) == 131072.0f && wgml_trainer_skipped_steps(r) == 1 &&
                 wgml_trainer_steps(r) == STEPS + 2, "loaded: scale %g, %u skipped, %u steps", (double)wgml_trainer_loss_scale(r),
                 wgml_trainer_skipped_steps(r), wgml_trainer_steps(r));
    }
    TH_EXPECT(wgml_trainer_create(m[0], &(wgml_trainer_desc){ .batch = B, .seq_len = T }, &plain), WGML_OK);
    if (plain) {
        TH_EXPECT(wgml_trainer_load_state(plain, path), WGML_OK);
        TH_CHECK(wgml_trainer_loss_scale(plain) == 0, "a trainer without scaling took the saved scale");
    }
    unlink(path);
    wgml_trainer_destroy(r);
    wgml_trainer_destroy(plain);
out:
    wgml_tensor_release(norm);
    for (int k = 0; k < 2; k++) {
        wgml_trainer_destroy(t[k]);
        wgml_model_destroy(m[k]);
    }
}

/* Mixed precision: a context whose products are F16 (wgml_context_desc.matmul_precision)
   trains a model with loss scaling beside the same model in f32 on the same batches. Where
   the device has f16 subgroup matrices the products round their inputs to f16: each
   product errs by at most about 2^-9 of its terms' magnitudes (wgml_precision), a logit
   passes through at most 4 products per layer plus the head, and the loss moves by at most
   twice the largest logit error, so each step's loss must stay within
   2 (4 L + 1) 2^-9 max|logit| of the f32 run's (weights drift apart over the steps too,
   which this bound on 4 steps covers with the f32 run's largest logit). Elsewhere the f32
   kernels run both and the losses are equal. */
static void test_mixed_precision(void)
{
    wgml_context *ctx16 = NULL;
    wgml_engine *e16 = NULL;
    TH_EXPECT(wgml_context_create(&(wgml_context_desc){ .matmul_precision = WGML_PRECISION_F16 }, &ctx16), WGML_OK);
    if (!ctx16) return;
    TH_EXPECT(wgml_engine_create(ctx16, &e16), WGML_OK);
    wgml_adapter_info in;
    wgml_context_info(ctx16, &in);
    wgml_model_config c = config_of(&tiny_a.s);
    wgml_engine *engines[2] = { th_eng, e16 };
    wgml_model *m[2] = { NULL, NULL };
    wgml_trainer *t[2] = { NULL, NULL };
    enum { B = 2, T = 8, STEPS = 4 };
    for (int k = 0; k < 2; k++) {
        TH_EXPECT(wgml_model_create(engines[k], &c, &m[k]), WGML_OK);
        if (!m[k]) goto out;
        TH_EXPECT(wgml_model_init_random(m[k], 11, 0.02f), WGML_OK);
        TH_EXPECT(wgml_trainer_create(m[k], &(wgml_trainer_desc){ .batch = B, .seq_len = T, .loss_scale = k ? 65536.0f : 0 },
                                      &t[k]), WGML_OK);
        if (!t[k]) goto out;
    }
    wgml_tensor *loss[2];
    TH_EXPECT(wgml_tensor_create(th_ctx, WGML_F32, 1, TH_SHAPE(1), &loss[0]), WGML_OK);
    TH_EXPECT(wgml_tensor_create(ctx16, WGML_F32, 1, TH_SHAPE(1), &loss[1]), WGML_OK);
    double worst = 0, tol_used = 0;
    for (int step = 0; step < STEPS; step++) {
        uint32_t *ids = random_ids(B * T, tiny_a.s.vocab), *targets = random_ids(B * T, tiny_a.s.vocab);
        float l[2];
        double zmax = 0;
        for (int k = 0; k < 2; k++) {
            TH_EXPECT(wgml_trainer_eval(t[k], ids, targets, NULL), WGML_OK);
            if (k == 0) {
                float *z = th_read(wgml_trainer_logits(t[0]));
                for (size_t i = 0; i < wgml_tensor_numel(wgml_trainer_logits(t[0])); i++) zmax = fmax(zmax, fabs(z[i]));
                free(z);
            }
            TH_EXPECT(wgml_trainer_accumulate(t[k], ids, targets, 1.0f, loss[k]), WGML_OK);
            TH_EXPECT(wgml_trainer_step(t[k], 1e-2f, NULL), WGML_OK);
            TH_EXPECT(wgml_tensor_read(loss[k], 0, &l[k], sizeof(float)), WGML_OK);
        }
        double tol = in.matrix_m ? 2.0 * (4.0 * c.num_hidden_layers + 1) * ldexp(1, -9) * zmax : 0;
        double d = fabs((double)l[0] - l[1]);
        TH_CHECK(d <= tol, "step %d: loss %.7g in f16, %.7g in f32 (tolerance %.3g; matrices %s)", step, (double)l[1],
                 (double)l[0], tol, in.matrix_m ? "yes" : "no");
        if (d > worst) worst = d, tol_used = tol;
        free(ids);
        free(targets);
    }
    TH_CHECK(wgml_trainer_steps(t[1]) == STEPS && wgml_trainer_skipped_steps(t[1]) == 0, "f16 run: %u steps, %u skipped",
             wgml_trainer_steps(t[1]), wgml_trainer_skipped_steps(t[1]));
    if (in.matrix_m) printf("    mixed precision: largest loss difference %.3g (tolerance %.3g)\n", worst, tol_used);
    wgml_tensor_release(loss[0]);
    wgml_tensor_release(loss[1]);
out:
    for (int k = 0; k < 2; k++) {
        wgml_trainer_destroy(t[k]);
        wgml_model_destroy(m[k]);
    }
    wgml_engine_destroy(e16);
    wgml_context_destroy(ctx16);
}

/* Prefill a prompt in one pass, then decode one token at a time: every position's logits
   match the reference's full forward over the same tokens. */
static void check_kv_cache(const tiny *tc)
{
    const ref_model_shape *s = &tc->s;
    int total = 12, prompt = 5;
    float **params = random_params(s);
    uint32_t *ids = random_ids((size_t)total, s->vocab), *targets = random_ids((size_t)total, s->vocab);
    size_t V = (size_t)s->vocab;
    double *ref = th_alloc_d((size_t)total * V);
    ref_model_run(s, (const float *const *)params, ids, targets, 1, total, ref, NULL);

    wgml_model *m = make_model(s, params);
    wgml_kv_cache *c = NULL;
    TH_EXPECT(wgml_kv_cache_create(m, 16, &c), WGML_OK);
    wgml_tensor *all = th_poisoned(WGML_F32, TH_SHAPE((size_t)prompt, V)), *one = th_poisoned(WGML_F32, TH_SHAPE(V));
    TH_EXPECT(wgml_model_decode(c, ids, (uint32_t)prompt, all), WGML_OK);
    TH_CHECK(wgml_kv_cache_length(c) == (uint32_t)prompt, "cache length %u", wgml_kv_cache_length(c));
    float *got = th_read(all);
    th_compare("prefill logits, every prompt position", got, ref, (size_t)prompt * V, LOGIT_ATOL, LOGIT_RTOL);
    free(got);
    for (int i = prompt; i < total; i++) {
        TH_EXPECT(wgml_model_decode(c, &ids[i], 1, one), WGML_OK);
        got = th_read(one);
        char what[64];
        snprintf(what, sizeof what, "decode logits at position %d", i);
        th_compare(what, got, ref + (size_t)i * V, V, LOGIT_ATOL, LOGIT_RTOL);
        free(got);
    }
    /* a prompt's last-token logits only, after a reset */
    wgml_kv_cache_reset(c);
    TH_EXPECT(wgml_model_decode(c, ids, 7, one), WGML_OK);
    got = th_read(one);
    th_compare("prefill of 7 tokens, last logits only", got, ref + 6 * V, V, LOGIT_ATOL, LOGIT_RTOL);
    free(got);
    /* keep the first 3 positions; positions 3.. are written again over the old ones */
    TH_EXPECT(wgml_kv_cache_truncate(c, 3), WGML_OK);
    TH_CHECK(wgml_kv_cache_length(c) == 3, "cache length %u after truncating to 3", wgml_kv_cache_length(c));
    TH_EXPECT(wgml_model_decode(c, ids + 3, 3, one), WGML_OK);
    got = th_read(one);
    th_compare("3 tokens after truncating to 3, last logits", got, ref + 5 * V, V, LOGIT_ATOL, LOGIT_RTOL);
    free(got);
    TH_EXPECT_ERR(wgml_kv_cache_truncate(c, 7), WGML_ERROR_SHAPE, "holds 6");
    TH_EXPECT(wgml_model_decode(c, ids + 6, 1, one), WGML_OK);   /* 7 cached again */
    got = th_read(one);
    th_compare("the token after them", got, ref + 6 * V, V, LOGIT_ATOL, LOGIT_RTOL);
    free(got);

    /* bad calls change nothing */
    uint32_t len = wgml_kv_cache_length(c);
    uint32_t big[10] = { 0 }, bad = (uint32_t)s->vocab;
    TH_EXPECT_ERR(wgml_model_decode(c, big, 10, one), WGML_ERROR_SHAPE, "capacity");
    TH_EXPECT_ERR(wgml_model_decode(c, &bad, 1, one), WGML_ERROR_INVALID_ARGUMENT, "ids[0]");
    TH_EXPECT_ERR(wgml_model_decode(c, ids, 2, all), WGML_ERROR_SHAPE, "logits");
    TH_EXPECT_ERR(wgml_model_decode(c, ids, 0, one), WGML_ERROR_INVALID_ARGUMENT, "n");
    TH_EXPECT_ERR(wgml_model_decode(c, NULL, 1, one), WGML_ERROR_INVALID_ARGUMENT, "ids");
    TH_EXPECT_ERR(wgml_model_decode(c, ids, 1, NULL), WGML_ERROR_INVALID_ARGUMENT, "logits");
    TH_CHECK(wgml_kv_cache_length(c) == len, "failed calls changed the cache length");

    wgml_tensor_release(all);
    wgml_tensor_release(one);
    wgml_kv_cache_destroy(c);
    wgml_model_destroy(m);
    free(ids); free(targets); free(ref);
    free_params(s, params);
}

static void test_kv_cache_matches_full_forward(void)
{
    check_kv_cache(&tiny_a);
    check_kv_cache(&tiny_b);
    for (size_t f = 0; f < FAMILIES; f++) check_kv_cache(families[f]);
}

/* Sequences decoded together: three sequences of different prompt lengths (one started by
   the batch step itself), each step's row i against sequence i decoded alone in its own
   cache; a finished sequence reset and given a new prompt while the others go on; the
   refusals. */
static void check_batch(const tiny *tc)
{
    const ref_model_shape *s = &tc->s;
    float **params = random_params(s);
    wgml_model *m = make_model(s, params);
    const uint32_t nseq = 3, cap = 16, steps = 6, plen[3] = { 5, 0, 2 };
    size_t V = (size_t)s->vocab;
    uint32_t *toks[3];
    wgml_kv_cache *alone[3] = { 0 };
    wgml_kv_batch *b = NULL;
    TH_EXPECT(wgml_kv_batch_create(m, cap, nseq, &b), WGML_OK);
    wgml_tensor *lb = th_poisoned(WGML_F32, TH_SHAPE(nseq, V)), *one = th_poisoned(WGML_F32, TH_SHAPE(V));
    for (uint32_t i = 0; i < nseq; i++) {
        toks[i] = random_ids(cap + 1, s->vocab);   /* one past cap for the too-long prompt below */
        TH_EXPECT(wgml_kv_cache_create(m, cap, &alone[i]), WGML_OK);
        if (plen[i]) {
            TH_EXPECT(wgml_kv_batch_prefill(b, i, toks[i], plen[i], one), WGML_OK);
            TH_EXPECT(wgml_model_decode(alone[i], toks[i], plen[i], one), WGML_OK);
        }
    }
    char what[128];
    for (uint32_t t = 0; t < steps; t++) {
        uint32_t ids[3];
        for (uint32_t i = 0; i < nseq; i++) ids[i] = toks[i][wgml_kv_batch_length(b, i)];
        if (t == 3) {   /* sequence 0 finishes; a new prompt of 3 tokens takes its place */
            wgml_kv_batch_reset(b, 0);
            wgml_kv_cache_reset(alone[0]);
            TH_EXPECT(wgml_kv_batch_prefill(b, 0, toks[0] + 8, 3, one), WGML_OK);
            TH_EXPECT(wgml_model_decode(alone[0], toks[0] + 8, 3, one), WGML_OK);
            ids[0] = toks[0][11];
        }
        TH_EXPECT(wgml_model_decode_batch(b, ids, lb), WGML_OK);
        float *got = th_read(lb);
        for (uint32_t i = 0; i < nseq; i++) {
            TH_EXPECT(wgml_model_decode(alone[i], &ids[i], 1, one), WGML_OK);
            float *want = th_read(one);
            double *ref = th_alloc_d(V);
            th_to_double(want, ref, V);
            snprintf(what, sizeof what, "%s: step %u, sequence %u", family_name(s), t, i);
            th_compare(what, got + i * V, ref, V, LOGIT_ATOL, LOGIT_RTOL);
            TH_CHECK(wgml_kv_batch_length(b, i) == wgml_kv_cache_length(alone[i]), "%s: length %u, alone %u", what,
                     wgml_kv_batch_length(b, i), wgml_kv_cache_length(alone[i]));
            free(want);
            free(ref);
        }
        free(got);
    }
    /* refusals: a prompt into a sequence that holds one, a sequence out of range, a full
       sequence, logits of the wrong size; none changes a length */
    TH_EXPECT_ERR(wgml_kv_batch_prefill(b, 1, toks[1], 2, one), WGML_ERROR_INVALID_ARGUMENT, "empty");
    TH_EXPECT_ERR(wgml_kv_batch_prefill(b, 3, toks[1], 2, one), WGML_ERROR_INVALID_ARGUMENT, "seq");
    TH_EXPECT_ERR(wgml_model_decode_batch(b, toks[0], one), WGML_ERROR_SHAPE, "logits");
    wgml_kv_batch_reset(b, 2);
    TH_EXPECT_ERR(wgml_kv_batch_prefill(b, 2, toks[2], cap + 1, one), WGML_ERROR_SHAPE, "capacity");
    TH_EXPECT(wgml_kv_batch_prefill(b, 2, toks[2], cap, one), WGML_OK);
    uint32_t l0 = wgml_kv_batch_length(b, 0);
    TH_EXPECT_ERR(wgml_model_decode_batch(b, toks[0], lb), WGML_ERROR_SHAPE, "fills");
    TH_CHECK(wgml_kv_batch_length(b, 0) == l0, "a refused step changed a length");
    wgml_tensor_release(lb);
    wgml_tensor_release(one);
    for (uint32_t i = 0; i < nseq; i++) {
        wgml_kv_cache_destroy(alone[i]);
        free(toks[i]);
    }
    wgml_kv_batch_destroy(b);
    wgml_model_destroy(m);
    free_params(s, params);
}

static void test_batched_decoding(void)
{
    check_batch(&tiny_a);
    for (size_t f = 0; f < FAMILIES; f++) check_batch(families[f]);
}

/* ---- checkpoints ------------------------------------------------------------------------ */

static char tmpdir[64];

static const char *in_tmp(const char *name)
{
    static char buf[4][256];
    static int next;
    char *b = buf[next++ & 3];
    snprintf(b, 256, "%s/%s", tmpdir, name);
    return b;
}

static void make_tmpdir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/wgml_test_model_XXXXXX");
    TH_CHECK(mkdtemp(tmpdir) != NULL, "mkdtemp: %s", strerror(errno));
}

static void remove_tmpdir(void)
{
    const char *files[] = { "config.json", "model.safetensors", "other.safetensors" };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) unlink(in_tmp(files[i]));
    TH_CHECK(rmdir(tmpdir) == 0, "rmdir %s: %s", tmpdir, strerror(errno));
}

/* The file's text (malloc'd), or NULL. */
static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf = f ? calloc(1, 1 << 16) : NULL;
    if (buf) fread(buf, 1, (1 << 16) - 1, f);
    if (f) fclose(f);
    return buf;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    TH_CHECK(f != NULL, "cannot write %s", path);
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

/* The logits of a model on fixed tokens (B = 1, T = 8), malloc'd. */
static float *logits_of(wgml_model *m, const uint32_t *ids)
{
    wgml_trainer *t = NULL;
    TH_EXPECT(wgml_trainer_create(m, &(wgml_trainer_desc){ .batch = 1, .seq_len = 8, .eval_only = true }, &t), WGML_OK);
    if (!t) return calloc(1, sizeof(float));
    TH_EXPECT(wgml_trainer_eval(t, ids, ids, NULL), WGML_OK);
    float *l = th_read(wgml_trainer_logits(t));
    wgml_trainer_destroy(t);
    return l;
}

/* Saving and loading gives the same parameters bit for bit, and so the same logits. */
static void test_checkpoint_round_trip(void)
{
    const tiny *cases[] = { &tiny_a, &tiny_b, &tiny_mistral, &tiny_qwen2, &tiny_qwen3, &tiny_lfm2, &tiny_gemma3 };
    make_tmpdir();
    for (int c = 0; c < 7; c++) {
        const ref_model_shape *s = &cases[c]->s;
        float **params = random_params(s);
        wgml_model *m = make_model(s, params), *back = NULL;
        TH_EXPECT(wgml_model_save(m, tmpdir), WGML_OK);
        TH_EXPECT(wgml_model_load(th_eng, tmpdir, &back), WGML_OK);
        if (!back) { wgml_model_destroy(m); free_params(s, params); continue; }
        const wgml_model_config *a = wgml_model_get_config(m), *b = wgml_model_get_config(back);
        TH_CHECK(a->vocab_size == b->vocab_size && a->hidden_size == b->hidden_size && a->num_hidden_layers == b->num_hidden_layers &&
                 a->num_attention_heads == b->num_attention_heads && a->num_key_value_heads == b->num_key_value_heads &&
                 a->intermediate_size == b->intermediate_size && a->head_dim == b->head_dim &&
                 a->tie_word_embeddings == b->tie_word_embeddings && a->rope_theta == b->rope_theta &&
                 a->rms_norm_eps == b->rms_norm_eps && a->max_position_embeddings == b->max_position_embeddings &&
                 a->sliding_window == b->sliding_window && a->qkv_bias == b->qkv_bias && a->qk_norm == b->qk_norm &&
                 a->conv_kernel == b->conv_kernel && !memcmp(a->conv_layers, b->conv_layers, sizeof a->conv_layers) &&
                 a->gemma == b->gemma && a->hidden_act == b->hidden_act && a->rope_local_theta == b->rope_local_theta &&
                 a->query_pre_attn_scalar == b->query_pre_attn_scalar &&
                 !memcmp(a->full_attention_layers, b->full_attention_layers, sizeof a->full_attention_layers) &&
                 !strcmp(a->model_type, b->model_type),
                 "config.json does not round-trip (%s)", family_name(s));
        TH_CHECK(wgml_model_param_count(back) == wgml_model_param_count(m), "parameter count changed");
        for (size_t i = 0; i < wgml_model_param_count(m); i++) {
            const char *na, *nb;
            wgml_tensor *ta = wgml_model_param(m, i, &na), *tb = wgml_model_param(back, i, &nb);
            TH_CHECK(!strcmp(na, nb), "names %s and %s", na, nb);
            float *x = th_read(ta), *y = th_read(tb);
            TH_CHECK(!memcmp(x, y, wgml_tensor_nbytes(ta)), "parameter %s differs after a round trip", na);
            free(x); free(y);
        }
        uint32_t ids[8];
        for (int i = 0; i < 8; i++) ids[i] = th_rand_u32() % (uint32_t)s->vocab;
        float *la = logits_of(m, ids), *lb = logits_of(back, ids);
        TH_CHECK(!memcmp(la, lb, 8 * (size_t)s->vocab * sizeof(float)), "logits of the reloaded model differ");
        /* the same file loads by its own path too */
        wgml_model *again = NULL;
        TH_EXPECT(wgml_model_load(th_eng, in_tmp("model.safetensors"), &again), WGML_OK);
        wgml_model_destroy(again);
        free(la); free(lb);
        wgml_model_destroy(back);
        wgml_model_destroy(m);
        free_params(s, params);
    }
    remove_tmpdir();
}

static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);   /* round to nearest even */
}
static float from_bf16(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
/* f32 -> f16 for normal values of moderate size (what the test uses), nearest even */
static uint16_t to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000, e = (u >> 23) & 255, m = u & 0x7FFFFF;
    if (e < 102) return (uint16_t)sign;   /* below 2^-25, half the smallest subnormal: zero */
    if (e < 113) {                        /* subnormal half */
        m |= 0x800000;
        uint32_t shift = 126 - e, hm = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (hm & 1))) hm++;
        return (uint16_t)(sign | hm);
    }
    uint32_t h = ((e - 112) << 10) | (m >> 13), rem = m & 0x1FFF;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}
static float from_f16(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 31, m = h & 1023;
    float f;
    if (e == 0) f = ldexpf((float)m, -24);
    else f = ldexpf((float)(m | 1024), (int)e - 25);
    uint32_t u;
    memcpy(&u, &f, 4);
    u |= sign;
    memcpy(&f, &u, 4);
    return f;
}

/* The tensors of a model as safetensors entries (data pointing into params). */
static wgml_safetensors_entry *entries_of(wgml_model *m, float **params)
{
    size_t n = wgml_model_param_count(m);
    wgml_safetensors_entry *e = calloc(n, sizeof *e);
    for (size_t i = 0; i < n; i++) {
        wgml_tensor *t = wgml_model_param(m, i, &e[i].name);
        e[i].dtype = WGML_ST_F32;
        e[i].ndim = wgml_tensor_ndim(t);
        for (uint32_t d = 0; d < e[i].ndim; d++) e[i].shape[d] = wgml_tensor_dim(t, d);
        e[i].data = params[i];
    }
    return e;
}

/* f16 and bf16 checkpoints (the usual Hugging Face dtypes) load as their exact f32 values. */
static void test_checkpoint_half_precision(void)
{
    const ref_model_shape *s = &tiny_a.s;
    make_tmpdir();
    float **params = random_params(s);
    wgml_model *m = make_model(s, params);
    TH_EXPECT(wgml_model_save(m, tmpdir), WGML_OK);   /* for config.json */
    size_t n = wgml_model_param_count(m);
    for (int kind = 0; kind < 2; kind++) {
        wgml_safetensors_entry *e = entries_of(m, params);
        uint16_t **half = calloc(n, sizeof *half);
        for (size_t i = 0; i < n; i++) {
            size_t numel = ref_model_param_numel(s, (int)i);
            half[i] = malloc(numel * 2);
            for (size_t j = 0; j < numel; j++) half[i][j] = kind ? to_bf16(params[i][j]) : to_f16(params[i][j]);
            e[i].dtype = kind ? WGML_ST_BF16 : WGML_ST_F16;
            e[i].data = half[i];
        }
        TH_EXPECT(wgml_safetensors_write(in_tmp("model.safetensors"), e, n, NULL), WGML_OK);
        wgml_model *back = NULL;
        TH_EXPECT(wgml_model_load(th_eng, tmpdir, &back), WGML_OK);
        for (size_t i = 0; back && i < n; i++) {
            size_t numel = ref_model_param_numel(s, (int)i);
            double *want = th_alloc_d(numel);
            for (size_t j = 0; j < numel; j++) want[j] = kind ? from_bf16(half[i][j]) : from_f16(half[i][j]);
            float *got = th_read(wgml_model_param(back, i, NULL));
            char what[64];
            snprintf(what, sizeof what, "%s parameter %zu", kind ? "bf16" : "f16", i);
            th_compare(what, got, want, numel, 0, 0);   /* exact: the conversion is lossless */
            free(got); free(want);
        }
        /* saved again in its own dtype: the file it came from, bit for bit */
        wgml_dtype dt = kind ? WGML_BF16 : WGML_F16;
        TH_CHECK(!back || wgml_model_file_dtype(back) == dt, "file dtype %s, want %s",
                 wgml_dtype_name(wgml_model_file_dtype(back)), wgml_dtype_name(dt));
        if (back) TH_EXPECT(wgml_model_save_with(back, tmpdir, &(wgml_model_save_options){ .dtype = dt }), WGML_OK);
        wgml_safetensors *st = NULL;
        TH_EXPECT(wgml_safetensors_open(in_tmp("model.safetensors"), &st), WGML_OK);
        for (size_t i = 0; st && i < n; i++) {
            wgml_file_tensor info;
            const char *name;
            wgml_model_param(m, i, &name);
            int64_t k = wgml_safetensors_find(st, name);
            TH_CHECK(k >= 0 && wgml_safetensors_info(st, (size_t)k, &info) == WGML_OK && info.dtype == e[i].dtype &&
                     memcmp(wgml_safetensors_data(st, (size_t)k), half[i], info.nbytes) == 0,
                     "%s saved as %s differs from the file it was loaded from", name, wgml_dtype_name(dt));
        }
        wgml_safetensors_close(st);
        char *cfg = read_text(in_tmp("config.json"));
        TH_CHECK(cfg && strstr(cfg, kind ? "\"torch_dtype\": \"bfloat16\"" : "\"torch_dtype\": \"float16\""),
                 "config.json's torch_dtype: %s", cfg ? cfg : "(none)");
        free(cfg);
        wgml_model_destroy(back);
        for (size_t i = 0; i < n; i++) free(half[i]);
        free(half);
        free(e);
    }
    /* f32 weights rounded to bf16 and f16 on the way out, to the nearest even */
    for (int kind = 0; kind < 2; kind++) {
        wgml_dtype dt = kind ? WGML_BF16 : WGML_F16;
        TH_EXPECT(wgml_model_save_with(m, tmpdir, &(wgml_model_save_options){ .dtype = dt }), WGML_OK);
        wgml_safetensors *st = NULL;
        TH_EXPECT(wgml_safetensors_open(in_tmp("model.safetensors"), &st), WGML_OK);
        size_t wrong = 0;
        for (size_t i = 0; st && i < n; i++) {
            const char *name;
            wgml_model_param(m, i, &name);
            int64_t k = wgml_safetensors_find(st, name);
            const uint8_t *d = k >= 0 ? wgml_safetensors_data(st, (size_t)k) : NULL;
            for (size_t j = 0; d && j < ref_model_param_numel(s, (int)i); j++) {
                uint16_t want = kind ? to_bf16(params[i][j]) : to_f16(params[i][j]);
                wrong += (uint16_t)(d[2 * j] | d[2 * j + 1] << 8) != want;
            }
            wrong += !d;
        }
        TH_CHECK(wrong == 0, "%zu weights saved as %s are not their f32 values rounded to the nearest", wrong, wgml_dtype_name(dt));
        wgml_safetensors_close(st);
    }
    /* a weight beyond f16's range: refused, naming it; no folder made */
    const char *embed;
    wgml_tensor *w0 = wgml_model_param(m, 0, &embed);
    TH_EXPECT(wgml_tensor_write(w0, 3 * sizeof(float), &(float){ 1e5f }, sizeof(float)), WGML_OK);
    char sub[128];
    snprintf(sub, sizeof sub, "%s/f16", tmpdir);
    TH_EXPECT_ERR(wgml_model_save_with(m, sub, &(wgml_model_save_options){ .dtype = WGML_F16 }), WGML_ERROR_INVALID_ARGUMENT,
                  "[3]");
    TH_CHECK(access(sub, F_OK) != 0, "a refused save made %s", sub);
    TH_EXPECT_ERR(wgml_model_save_with(m, sub, &(wgml_model_save_options){ .dtype = WGML_U32 }), WGML_ERROR_INVALID_ARGUMENT,
                  "dtype");
    TH_CHECK(wgml_model_file_dtype(m) == WGML_F32 && wgml_model_file_dtype(NULL) == WGML_F32, "a created model's file dtype");
    wgml_model_destroy(m);
    free_params(s, params);
    remove_tmpdir();
}

/* A checkpoint sharded as Hugging Face shards big models: two safetensors files and
   model.safetensors.index.json mapping every tensor to its file. */
static void test_checkpoint_sharded(void)
{
    const ref_model_shape *s = &tiny_a.s;
    make_tmpdir();
    float **params = random_params(s);
    wgml_model *m = make_model(s, params);
    TH_EXPECT(wgml_model_save(m, tmpdir), WGML_OK);   /* for config.json */
    unlink(in_tmp("model.safetensors"));
    size_t n = wgml_model_param_count(m), half = n / 2;
    wgml_safetensors_entry *e = entries_of(m, params);
    TH_EXPECT(wgml_safetensors_write(in_tmp("model-00001-of-00002.safetensors"), e, half, NULL), WGML_OK);
    TH_EXPECT(wgml_safetensors_write(in_tmp("model-00002-of-00002.safetensors"), e + half, n - half, NULL), WGML_OK);
    FILE *f = fopen(in_tmp("model.safetensors.index.json"), "w");
    TH_CHECK(f != NULL, "cannot write the index");
    if (f) {
        fprintf(f, "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {");
        for (size_t i = 0; i < n; i++)
            fprintf(f, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"", i ? ", " : "", e[i].name, i < half ? 1 : 2);
        fprintf(f, "}}\n");
        fclose(f);
    }
    wgml_model *back = NULL;
    TH_EXPECT(wgml_model_load(th_eng, tmpdir, &back), WGML_OK);
    for (size_t i = 0; back && i < n; i++) {
        float *got = th_read(wgml_model_param(back, i, NULL));
        TH_CHECK(!memcmp(got, params[i], ref_model_param_numel(s, (int)i) * sizeof(float)), "sharded: parameter %s differs", e[i].name);
        free(got);
    }
    wgml_model_destroy(back);
    /* the index naming a shard that is not there */
    unlink(in_tmp("model-00002-of-00002.safetensors"));
    TH_CHECK(wgml_model_load(th_eng, tmpdir, &back) != WGML_OK && back == NULL, "a missing shard must fail");
    TH_CHECK(strstr(wgml_last_error(th_ctx), "model-00002-of-00002.safetensors") != NULL, "message names the missing shard: %s",
             wgml_last_error(th_ctx));
    unlink(in_tmp("model-00001-of-00002.safetensors"));
    unlink(in_tmp("model.safetensors.index.json"));
    free(e);
    wgml_model_destroy(m);
    free_params(s, params);
    remove_tmpdir();
}

static void expect_load_fails(const char *what, const char *needle);

/* MLX affine quantisation: codes of `bits` bits packed little-endian in u32 along each row,
   a scale and a bias per group of `group` codes; the loader dequantises on the GPU. */
static void test_checkpoint_quantized(void)
{
    ref_model_shape s = { .vocab = 64, .dim = 64, .layers = 1, .heads = 4, .kv_heads = 2, .head_dim = 16, .ffn = 128,
                          .rope_theta = 10000, .eps = 1e-5, .tied = true };
    const int bits_list[2] = { 4, 8 }, groups[2] = { 32, 64 };
    for (int q = 0; q < 2; q++) {
        int bits = bits_list[q], group = groups[q];
        make_tmpdir();
        float **params = random_params(&s);
        wgml_model *m = make_model(&s, params);
        TH_EXPECT(wgml_model_save(m, tmpdir), WGML_OK);
        char cfg[1024];
        snprintf(cfg, sizeof cfg, "{\"model_type\": \"llama\", \"vocab_size\": 64, \"hidden_size\": 64, \"intermediate_size\": 128, "
                 "\"num_hidden_layers\": 1, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"rms_norm_eps\": 1e-5, "
                 "\"tie_word_embeddings\": true, \"quantization\": {\"group_size\": %d, \"bits\": %d}}", group, bits);
        write_text(in_tmp("config.json"), cfg);
        size_t n = wgml_model_param_count(m);
        /* every matrix quantised: 3 tensors each; vectors stay f32 */
        wgml_safetensors_entry *e = calloc(3 * n, sizeof *e);
        char (*names)[2][128] = calloc(n, sizeof *names);
        void **bufs = calloc(3 * n, sizeof *bufs);
        double **want = calloc(n, sizeof *want);
        size_t ne = 0;
        for (size_t i = 0; i < n; i++) {
            const char *name;
            wgml_tensor *t = wgml_model_param(m, i, &name);
            size_t numel = wgml_tensor_numel(t);
            want[i] = th_alloc_d(numel);
            if (wgml_tensor_ndim(t) == 1) {
                e[ne++] = (wgml_safetensors_entry){ .name = name, .dtype = WGML_ST_F32, .ndim = 1, .shape = { numel }, .data = params[i] };
                for (size_t j = 0; j < numel; j++) want[i][j] = params[i][j];
                continue;
            }
            size_t rows = wgml_tensor_dim(t, 0), cols = wgml_tensor_dim(t, 1), ng = cols / (size_t)group, per = 32 / (size_t)bits;
            uint32_t *codes = calloc(rows * cols / per, 4);
            float *sc = malloc(rows * ng * 4), *bi = malloc(rows * ng * 4);
            for (size_t r = 0; r < rows; r++)
                for (size_t g = 0; g < ng; g++) {
                    /* weights within about +-0.4, as random_params makes them, so that the
                       logits' tolerance (derived for such weights) holds for the kept model */
                    sc[r * ng + g] = (float)(th_uniform(0.5, 1.0) * 0.7 / ((1u << bits) - 1));
                    bi[r * ng + g] = (float)th_uniform(-0.4, -0.3);
                    for (size_t c = 0; c < (size_t)group; c++) {
                        size_t at = r * cols + g * (size_t)group + c;
                        uint32_t code = th_rand_u32() & ((1u << bits) - 1);
                        codes[at / per] |= code << ((at % per) * (size_t)bits);
                        want[i][at] = (double)code * sc[r * ng + g] + bi[r * ng + g];
                    }
                }
            size_t base = strlen(name) - strlen(".weight");
            snprintf(names[i][0], 128, "%.*s.scales", (int)base, name);
            snprintf(names[i][1], 128, "%.*s.biases", (int)base, name);
            e[ne++] = (wgml_safetensors_entry){ .name = name, .dtype = WGML_ST_U32, .ndim = 2, .shape = { rows, cols / per }, .data = codes };
            e[ne++] = (wgml_safetensors_entry){ .name = names[i][0], .dtype = WGML_ST_F32, .ndim = 2, .shape = { rows, ng }, .data = sc };
            e[ne++] = (wgml_safetensors_entry){ .name = names[i][1], .dtype = WGML_ST_F32, .ndim = 2, .shape = { rows, ng }, .data = bi };
            bufs[3 * i] = codes; bufs[3 * i + 1] = sc; bufs[3 * i + 2] = bi;
        }
        TH_EXPECT(wgml_safetensors_write(in_tmp("model.safetensors"), e, ne, NULL), WGML_OK);
        wgml_model *back = NULL;
        TH_EXPECT(wgml_model_load(th_eng, tmpdir, &back), WGML_OK);
        for (size_t i = 0; back && i < n; i++) {
            wgml_tensor *t = wgml_model_param(back, i, NULL);
            float *got = th_read(t);
            char what[64];
            snprintf(what, sizeof what, "%d-bit group %d: parameter %zu", bits, group, i);
            /* code * scale + bias in f32: one rounding of each operation */
            th_compare(what, got, want[i], wgml_tensor_numel(t), 1e-6, 1e-6);
            free(got);
        }
        /* kept packed: each matrix an affine tensor unpacking to the same values, the same
           logits as the expanded model within f32 rounding (LOGIT_ATOL), under a third of
           the memory (f32 scales and biases: 6 or 9 bits a value instead of 32) */
        wgml_model *kept = NULL;
        TH_EXPECT(wgml_model_load_with(th_eng, tmpdir, &(wgml_model_load_options){ .weights = WGML_WEIGHTS_KEEP }, &kept), WGML_OK);
        for (size_t i = 0; back && kept && i < n; i++) {
            wgml_tensor *t = wgml_model_param(kept, i, NULL);
            if (wgml_tensor_ndim(t) != 2) continue;
            wgml_packed_desc d = wgml_tensor_packed_desc(t);
            TH_CHECK(d.dtype == WGML_AFFINE && d.bits == (uint32_t)bits && d.group_size == (uint32_t)group &&
                     d.scale_dtype == WGML_F32, "parameter %zu kept as %s", i, wgml_dtype_name(d.dtype));
            wgml_tensor *u = th_poisoned(WGML_F32, TH_SHAPE(wgml_tensor_numel(t)));
            TH_EXPECT(wgml_unpack(th_eng, t, u), WGML_OK);
            float *got = th_read(u);
            char what[64];
            snprintf(what, sizeof what, "%d-bit group %d kept: parameter %zu", bits, group, i);
            th_compare(what, got, want[i], wgml_tensor_numel(t), 1e-6, 1e-6);
            free(got);
            wgml_tensor_release(u);
        }
        if (back && kept) {
            TH_CHECK(wgml_model_weight_bytes(kept) * 3 < wgml_model_weight_bytes(back), "kept: %llu bytes, expanded %llu",
                     (unsigned long long)wgml_model_weight_bytes(kept), (unsigned long long)wgml_model_weight_bytes(back));
            uint32_t ids[8];
            for (int j = 0; j < 8; j++) ids[j] = th_rand_u32() % 64;
            float *la = logits_of(back, ids), *lb = logits_of(kept, ids);
            double *ref = th_alloc_d(8 * 64);
            th_to_double(la, ref, 8 * 64);
            th_compare("logits kept vs expanded", lb, ref, 8 * 64, LOGIT_ATOL, LOGIT_RTOL);
            free(la); free(lb); free(ref);
        }
        wgml_model_destroy(kept);
        wgml_model_destroy(back);
        /* the last matrix without its biases: found before any earlier matrix is dequantised */
        size_t last = ne;
        for (size_t i = 0; i < ne; i++)
            if (strstr(e[i].name, ".biases")) last = i;
        TH_CHECK(last < ne, "no quantised matrix");
        if (last < ne) {
            const char *missing = e[last].name;
            e[last] = e[ne - 1];
            TH_EXPECT(wgml_safetensors_write(in_tmp("model.safetensors"), e, ne - 1, NULL), WGML_OK);
            expect_load_fails("a quantised weight without its biases", missing);
        }
        for (size_t i = 0; i < 3 * n; i++) free(bufs[i]);
        for (size_t i = 0; i < n; i++) free(want[i]);
        free(bufs); free(want); free(names); free(e);
        wgml_model_destroy(m);
        free_params(&s, params);
        remove_tmpdir();
    }
}

/* Matrices quantised at load (WGML_WEIGHTS_Q8, Q4) from an f32 checkpoint: each value
   within the scheme's bound of the original (half a step of its group, plus the f16
   rounding of the group's scale and bias: 2^-11 of the group's range and minimum); the
   vectors untouched; the forward and a save (unpacked to f32) give the quantised values;
   WGML_WEIGHTS_KEEP of an f32 checkpoint keeps f32. */
static void test_checkpoint_quantised_at_load(void)
{
    const ref_model_shape *s = &tiny_b.s;
    make_tmpdir();
    float **params = random_params(s);
    wgml_model *m = make_model(s, params);
    TH_EXPECT(wgml_model_save(m, tmpdir), WGML_OK);
    for (int bits = 4; bits <= 8; bits += 4) {
        wgml_model *q = NULL;
        wgml_weights w = bits == 4 ? WGML_WEIGHTS_Q4 : WGML_WEIGHTS_Q8;
        TH_EXPECT(wgml_model_load_with(th_eng, tmpdir, &(wgml_model_load_options){ .weights = w }, &q), WGML_OK);
        if (!q) continue;
        double levels = (1 << bits) - 1;
        for (size_t i = 0; i < wgml_model_param_count(q); i++) {
            wgml_tensor *t = wgml_model_param(q, i, NULL);
            size_t n = wgml_tensor_numel(t);
            float *got;
            if (wgml_tensor_ndim(t) == 1) {
                got = th_read(t);
                TH_CHECK(!memcmp(got, params[i], n * sizeof(float)), "%d-bit: vector %zu changed", bits, i);
                free(got);
                continue;
            }
            wgml_packed_desc d = wgml_tensor_packed_desc(t);
            TH_CHECK(d.dtype == WGML_AFFINE && d.bits == (uint32_t)bits && d.group_size == 64 && d.scale_dtype == WGML_F16,
                     "%d-bit: matrix %zu is %s", bits, i, wgml_dtype_name(d.dtype));
            wgml_tensor *u = th_poisoned(WGML_F32, TH_SHAPE(n));
            TH_EXPECT(wgml_unpack(th_eng, t, u), WGML_OK);
            got = th_read(u);
            size_t cols = wgml_tensor_dim(t, 1), bad = 0;
            for (size_t r = 0; r < n / cols; r++)
                for (size_t g0 = 0; g0 < cols; g0 += 64) {
                    size_t end = g0 + 64 < cols ? g0 + 64 : cols;
                    double lo = INFINITY, hi = -INFINITY;
                    for (size_t c = g0; c < end; c++) {
                        lo = fmin(lo, params[i][r * cols + c]);
                        hi = fmax(hi, params[i][r * cols + c]);
                    }
                    double step = (hi - lo) / levels, bound = step / 2 + ldexp(hi - lo + fabs(lo), -11) + 1e-7;
                    for (size_t c = g0; c < end; c++) bad += !(fabs(got[r * cols + c] - params[i][r * cols + c]) <= bound);
                }
            TH_CHECK(bad == 0, "%d-bit: matrix %zu: %zu values beyond the quantisation bound", bits, i, bad);
            free(got);
            wgml_tensor_release(u);
        }
        /* saving unpacks: the saved f32 weights are the quantised values, and reload to
           the same logits */
        char sub[128];
        snprintf(sub, sizeof sub, "%s/q", tmpdir);
        TH_EXPECT(wgml_model_save(q, sub), WGML_OK);
        wgml_model *back = NULL;
        TH_EXPECT(wgml_model_load(th_eng, sub, &back), WGML_OK);
        if (back) {
            uint32_t ids[8];
            for (int j = 0; j < 8; j++) ids[j] = th_rand_u32() % (uint32_t)s->vocab;
            float *la = logits_of(q, ids), *lb = logits_of(back, ids);
            double *ref = th_alloc_d(8 * (size_t)s->vocab);
            th_to_double(lb, ref, 8 * (size_t)s->vocab);
            th_compare("logits of the quantised model and of its saved f32 copy", la, ref, 8 * (size_t)s->vocab, LOGIT_ATOL,
                       LOGIT_RTOL);
            free(la); free(lb); free(ref);
        }
        wgml_model_destroy(back);
        char path[160];
        snprintf(path, sizeof path, "%s/model.safetensors", sub);
        unlink(path);
        snprintf(path, sizeof path, "%s/config.json", sub);
        unlink(path);
        rmdir(sub);
        wgml_model_destroy(q);
    }
    wgml_model *k = NULL;
    TH_EXPECT(wgml_model_load_with(th_eng, tmpdir, &(wgml_model_load_options){ .weights = WGML_WEIGHTS_KEEP }, &k), WGML_OK);
    for (size_t i = 0; k && i < wgml_model_param_count(k); i++)
        TH_CHECK(wgml_tensor_dtype(wgml_model_param(k, i, NULL)) == WGML_F32, "an f32 checkpoint kept: parameter %zu is %s", i,
                 wgml_dtype_name(wgml_tensor_dtype(wgml_model_param(k, i, NULL))));
    wgml_model_destroy(k);
    TH_EXPECT_ERR(wgml_model_load_with(th_eng, tmpdir, &(wgml_model_load_options){ .weights = (wgml_weights)9 }, &k),
                  WGML_ERROR_INVALID_ARGUMENT, "weights");
    wgml_model_destroy(m);
    free_params(s, params);
    remove_tmpdir();
}

static void expect_load_fails_with(const char *what, const char *path, wgml_status want, const char *needle);

/* Broken folders, configs and weight files fail with a message, never a crash, and leave
   no model behind. */
static void expect_load_fails(const char *what, const char *needle)
{
    expect_load_fails_with(what, tmpdir, WGML_OK, needle);
}

/* As expect_load_fails for the folder or file path, with status want (WGML_OK: FORMAT or
   IO). */
static void expect_load_fails_with(const char *what, const char *path, wgml_status want, const char *needle)
{
    wgml_model *m = (wgml_model *)&m;   /* must be set to NULL */
    wgml_context_stats before, after;
    wgml_context_stats_get(th_ctx, &before);
    wgml_status s = wgml_model_load(th_eng, path, &m);
    wgml_context_stats_get(th_ctx, &after);
    const char *msg = wgml_last_error(th_ctx);
    TH_CHECK(after.commands == before.commands, "%s: %llu GPU commands recorded before the failure", what,
             (unsigned long long)(after.commands - before.commands));
    TH_CHECK(after.live_tensors == before.live_tensors, "%s: %ld tensors left behind", what,
             after.live_tensors - before.live_tensors);
    TH_CHECK(want ? s == want : (s == WGML_ERROR_FORMAT || s == WGML_ERROR_IO), "%s: status %s (%s)", what,
             wgml_status_string(s), msg);
    TH_CHECK(m == NULL, "%s: *out not NULL after a failure", what);
    TH_CHECK(!needle || strstr(msg, needle) != NULL, "%s: the message \"%s\" does not name \"%s\"", what, msg, needle);
}

static void test_malformed_checkpoints(void)
{
    const ref_model_shape *s = &tiny_a.s;
    make_tmpdir();
    float **params = random_params(s);
    wgml_model *m = make_model(s, params);
    size_t n = wgml_model_param_count(m);
    wgml_model *out = NULL;
    TH_EXPECT_ERR(wgml_model_load(th_eng, "/nonexistent/wgml/model", &out), WGML_ERROR_IO, "/nonexistent/wgml/model");
    TH_EXPECT_ERR(wgml_model_load(NULL, tmpdir, &out), WGML_ERROR_INVALID_ARGUMENT, "engine");
    TH_EXPECT_ERR(wgml_model_load(th_eng, NULL, &out), WGML_ERROR_INVALID_ARGUMENT, "path");
    expect_load_fails("an empty folder", "config.json");
    TH_EXPECT(wgml_model_save(m, tmpdir), WGML_OK);
    FILE *f = fopen(in_tmp("config.json"), "r");
    char cfg[4096] = { 0 };
    if (f) { size_t r = fread(cfg, 1, sizeof cfg - 1, f); cfg[r] = 0; fclose(f); }

    /* config.json */
    write_text(in_tmp("config.json"), "{\"vocab_size\": 64, \"hidden_size\": ");
    expect_load_fails("truncated config.json", "config.json");
    write_text(in_tmp("config.json"), "{\"vocab_size\": 64}");
    expect_load_fails("config.json without hidden_size", "hidden_size");
    write_text(in_tmp("config.json"), "[1, 2, 3]");
    expect_load_fails("config.json that is an array", "config.json");
    write_text(in_tmp("config.json"), "");
    expect_load_fails("empty config.json", "config.json");
    /* a config that disagrees with the weights: every tensor has the wrong shape */
    write_text(in_tmp("config.json"), "{\"model_type\": \"llama\", \"vocab_size\": 64, \"hidden_size\": 48, \"intermediate_size\": 48, "
               "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2}");
    expect_load_fails("config.json with another hidden_size", "model.embed_tokens.weight");
    write_text(in_tmp("config.json"), "{\"model_type\": \"llama\", \"vocab_size\": 64, \"hidden_size\": 32, \"intermediate_size\": 48, "
               "\"num_hidden_layers\": 3, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 8}");
    expect_load_fails("config.json with more layers than the weights", "model.layers.2.");
    write_text(in_tmp("config.json"), cfg);

    /* model.safetensors */
    wgml_safetensors_entry *e = entries_of(m, params);
    TH_EXPECT(wgml_safetensors_write(in_tmp("model.safetensors"), e + 1, n - 1, NULL), WGML_OK);
    expect_load_fails("no embedding", "model.embed_tokens.weight");
    wgml_safetensors_entry keep = e[3];
    e[3].shape[0] = 8;   /* q_proj with a wrong shape (and a consistent byte count) */
    TH_EXPECT(wgml_safetensors_write(in_tmp("model.safetensors"), e, n, NULL), WGML_OK);
    expect_load_fails("a tensor of the wrong shape", e[3].name);
    e[3] = keep;
    e[2].dtype = WGML_ST_I32;
    TH_EXPECT(wgml_safetensors_write(in_tmp("model.safetensors"), e, n, NULL), WGML_OK);
    expect_load_fails("an I32 tensor", "I32");
    e[2].dtype = WGML_ST_U32;
    TH_EXPECT(wgml_safetensors_write(in_tmp("model.safetensors"), e, n, NULL), WGML_OK);
    expect_load_fails("a U32 tensor without quantization", "quantization");
    e[2].dtype = WGML_ST_F32;
    TH_EXPECT(wgml_safetensors_write(in_tmp("model.safetensors"), e, n, NULL), WGML_OK);
    /* the same file, truncated, then with a header length past its end, then garbage */
    f = fopen(in_tmp("model.safetensors"), "r+b");
    TH_CHECK(f != NULL, "reopen");
    if (f) {
        TH_CHECK(ftruncate(fileno(f), 1000) == 0, "truncate");
        fclose(f);
    }
    expect_load_fails("a truncated safetensors file", "model.safetensors");
    uint8_t bad[64] = { 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0, '{', '}' };
    f = fopen(in_tmp("model.safetensors"), "wb");
    if (f) { fwrite(bad, 1, sizeof bad, f); fclose(f); }
    expect_load_fails("a header length past the end", "model.safetensors");
    memset(bad, 0, sizeof bad);
    bad[0] = 20;
    memcpy(bad + 8, "{\"a\": [1, 2, 3]}    ", 20);
    f = fopen(in_tmp("model.safetensors"), "wb");
    if (f) { fwrite(bad, 1, 28, f); fclose(f); }
    expect_load_fails("a header that is not a tensor table", "model.safetensors");
    write_text(in_tmp("model.safetensors"), "");
    expect_load_fails("an empty safetensors file", "model.safetensors");
    free(e);
    wgml_model_destroy(m);
    free_params(s, params);
    remove_tmpdir();
}

/* Folders that are not what they claim: FIFOs (refused without blocking), links to files
   outside the folder (refused, the target's bytes never quoted), another architecture,
   tensors the model would not use, a config far larger than its weights (refused before
   any device memory is taken); and the two legitimate oddities, a Hugging Face cache
   snapshot and the rotary inv_freq buffers of old checkpoints, which load. */
/* cfg with model_type and architectures[0] replaced by type and arch, into out. */
static void rename_family(const char *cfg, const char *type, const char *arch, char *out, size_t size)
{
    char t[64], a[64];
    snprintf(t, sizeof t, "\"%s\"", type);
    snprintf(a, sizeof a, "%s", arch);
    const char *words[][2] = { { "\"llama\"", t }, { "LlamaForCausalLM", a } };
    size_t o = 0;
    for (const char *c = cfg; *c && o + 64 < size;) {
        bool hit = false;
        for (size_t w = 0; w < 2 && !hit; w++)
            if (strncmp(c, words[w][0], strlen(words[w][0])) == 0) {
                memcpy(out + o, words[w][1], strlen(words[w][1]));
                o += strlen(words[w][1]);
                c += strlen(words[w][0]);
                hit = true;
            }
        if (!hit) out[o++] = *c++;
    }
    out[o] = 0;
}

static void test_hostile_folders(void)
{
    const ref_model_shape *s = &tiny_a.s;
    make_tmpdir();
    float **params = random_params(s);
    wgml_model *m = make_model(s, params);
    size_t n = wgml_model_param_count(m);
    TH_EXPECT(wgml_model_save(m, tmpdir), WGML_OK);
    char cfg[4096] = { 0 };
    FILE *f = fopen(in_tmp("config.json"), "r");
    if (f) { size_t r = fread(cfg, 1, sizeof cfg - 1, f); cfg[r] = 0; fclose(f); }
    char moved[320];
    snprintf(moved, sizeof moved, "%s.weights", tmpdir);   /* beside the folder, not in it */
    TH_CHECK(rename(in_tmp("model.safetensors"), moved) == 0, "move the weights out: %s", strerror(errno));

    /* FIFOs: each file in turn (a blocking open would hang here until the test's timeout) */
    TH_CHECK(symlink(moved, in_tmp("model.safetensors")) == 0, "symlink: %s", strerror(errno));
    unlink(in_tmp("config.json"));
    TH_CHECK(mkfifo(in_tmp("config.json"), 0600) == 0, "mkfifo: %s", strerror(errno));
    expect_load_fails_with("config.json is a FIFO", tmpdir, WGML_ERROR_IO, "not a regular file");
    unlink(in_tmp("config.json"));
    write_text(in_tmp("config.json"), cfg);
    unlink(in_tmp("model.safetensors"));
    TH_CHECK(mkfifo(in_tmp("model.safetensors"), 0600) == 0, "mkfifo: %s", strerror(errno));
    expect_load_fails_with("model.safetensors is a FIFO", tmpdir, WGML_ERROR_IO, "not a regular file");
    unlink(in_tmp("model.safetensors"));

    /* a link to a file outside the folder, whose first bytes spell a marker */
    write_text(moved, "SECRETSECRET{\"not\": \"weights\"}");
    TH_CHECK(symlink(moved, in_tmp("model.safetensors")) == 0, "symlink: %s", strerror(errno));
    expect_load_fails_with("model.safetensors links outside the folder", tmpdir, WGML_ERROR_IO, "outside");
    TH_CHECK(!strstr(wgml_last_error(th_ctx), "SECRET"), "the target's bytes are quoted: %s", wgml_last_error(th_ctx));
    unlink(in_tmp("model.safetensors"));
    unlink(moved);

    /* real weights again, plus what another architecture adds or a Llama file may carry */
    wgml_safetensors_entry *e = entries_of(m, params), *more = calloc(n + 1, sizeof *more);
    memcpy(more, e, n * sizeof *e);
    float norm[8] = { 1, 1, 1, 1, 1, 1, 1, 1 };
    more[n] = (wgml_safetensors_entry){ .name = "model.layers.0.self_attn.q_norm.weight", .dtype = WGML_ST_F32, .ndim = 1,
                                        .shape = { 8 }, .data = norm };
    TH_EXPECT(wgml_safetensors_write(in_tmp("model.safetensors"), more, n + 1, NULL), WGML_OK);
    expect_load_fails_with("a Qwen3-style q_norm tensor", tmpdir, WGML_ERROR_UNSUPPORTED, "q_norm");
    more[n].name = "model.layers.1.self_attn.rotary_emb.inv_freq";
    more[n].shape[0] = 4;
    TH_EXPECT(wgml_safetensors_write(in_tmp("model.safetensors"), more, n + 1, NULL), WGML_OK);
    wgml_model *ok = NULL;
    TH_EXPECT(wgml_model_load(th_eng, tmpdir, &ok), WGML_OK);   /* the inv_freq buffer is skipped */
    wgml_model_destroy(ok);
    /* the same config under other families' names: Qwen3's needs its q and k norms, which
       these weights lack; a family wgml does not run is refused by name; an architecture
       that is not its model_type's is refused */
    char other[4200];
    rename_family(cfg, "qwen3", "Qwen3ForCausalLM", other, sizeof other);
    write_text(in_tmp("config.json"), other);
    expect_load_fails_with("model_type qwen3 over Llama weights", tmpdir, WGML_ERROR_FORMAT, "q_norm");
    rename_family(cfg, "gemma3_text", "Gemma3ForCausalLM", other, sizeof other);
    write_text(in_tmp("config.json"), other);
    expect_load_fails_with("model_type gemma3_text over Llama weights", tmpdir, WGML_ERROR_FORMAT, "layernorm");
    rename_family(cfg, "phi3", "Phi3ForCausalLM", other, sizeof other);
    write_text(in_tmp("config.json"), other);
    expect_load_fails_with("model_type phi3", tmpdir, WGML_ERROR_UNSUPPORTED, "phi3");
    rename_family(cfg, "llama", "Qwen2ForCausalLM", other, sizeof other);
    write_text(in_tmp("config.json"), other);
    expect_load_fails_with("model_type llama with Qwen2ForCausalLM", tmpdir, WGML_ERROR_UNSUPPORTED, "Qwen2ForCausalLM");
    /* a config of a model of hundreds of GB beside these small weights: refused by the
       tensor check, before a byte of device memory */
    write_text(in_tmp("config.json"), "{\"model_type\": \"llama\", \"vocab_size\": 16777216, \"hidden_size\": 65536, "
               "\"intermediate_size\": 1048576, \"num_hidden_layers\": 1024, \"num_attention_heads\": 512}");
    expect_load_fails_with("a config of a huge model", tmpdir, WGML_ERROR_FORMAT, "model.embed_tokens.weight");
    write_text(in_tmp("config.json"), cfg);

    /* a Hugging Face cache snapshot: <repo>/snapshots/<rev>/<file> -> ../../blobs/<hash> */
    char repo[320], path[400], target[400];
    snprintf(repo, sizeof repo, "%s/models--wgml--tiny", tmpdir);
    const char *dirs[] = { "", "/blobs", "/snapshots", "/snapshots/abc123" };
    for (size_t i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s%s", repo, dirs[i]);
        TH_CHECK(mkdir(path, 0700) == 0, "mkdir %s: %s", path, strerror(errno));
    }
    const char *files[] = { "config.json", "model.safetensors" };
    for (size_t i = 0; i < 2; i++) {
        snprintf(target, sizeof target, "%s/blobs/%zu", repo, i);
        TH_CHECK(rename(in_tmp(files[i]), target) == 0, "rename: %s", strerror(errno));
        snprintf(path, sizeof path, "%s/snapshots/abc123/%s", repo, files[i]);
        snprintf(target, sizeof target, "../../blobs/%zu", i);
        TH_CHECK(symlink(target, path) == 0, "symlink: %s", strerror(errno));
    }
    snprintf(path, sizeof path, "%s/snapshots/abc123", repo);
    ok = NULL;
    TH_EXPECT(wgml_model_load(th_eng, path, &ok), WGML_OK);
    wgml_model_destroy(ok);
    /* ... but only into its own repository's blobs */
    snprintf(path, sizeof path, "%s/snapshots/abc123/config.json", repo);
    unlink(path);
    snprintf(target, sizeof target, "%s/config.elsewhere", tmpdir);
    write_text(target, cfg);
    TH_CHECK(symlink(target, path) == 0, "symlink: %s", strerror(errno));
    snprintf(path, sizeof path, "%s/snapshots/abc123", repo);
    expect_load_fails_with("a snapshot linking outside its repository", path, WGML_ERROR_IO, "outside");
    unlink(target);
    for (size_t i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/snapshots/abc123/%s", repo, files[i]);
        unlink(path);
        snprintf(path, sizeof path, "%s/blobs/%zu", repo, i);
        unlink(path);
    }
    for (size_t i = 4; i-- > 0;) {
        snprintf(path, sizeof path, "%s%s", repo, dirs[i]);
        rmdir(path);
    }
    free(more);
    free(e);
    wgml_model_destroy(m);
    free_params(s, params);
    remove_tmpdir();
}

/* Misuse of the model, trainer and cache API: clear errors, no crash. */
static void test_bad_arguments(void)
{
    wgml_model_config c = config_of(&tiny_a.s);
    wgml_model *m = NULL;
    TH_EXPECT_ERR(wgml_model_create(NULL, &c, &m), WGML_ERROR_INVALID_ARGUMENT, "engine");
    TH_EXPECT_ERR(wgml_model_create(th_eng, NULL, &m), WGML_ERROR_INVALID_ARGUMENT, "cfg");
    wgml_model_config bad = c;
    bad.num_key_value_heads = 3;
    TH_EXPECT_ERR(wgml_model_create(th_eng, &bad, &m), WGML_ERROR_INVALID_ARGUMENT, "num_key_value_heads");
    bad = c; bad.head_dim = 7;
    TH_EXPECT_ERR(wgml_model_create(th_eng, &bad, &m), WGML_ERROR_INVALID_ARGUMENT, "even");
    bad = c; bad.head_dim = 258; bad.hidden_size = 1032;
    TH_EXPECT_ERR(wgml_model_create(th_eng, &bad, &m), WGML_ERROR_UNSUPPORTED, "head_dim");
    bad = c; bad.full_attention_layers[0] = 1;   /* global layers without gemma and a window */
    TH_EXPECT_ERR(wgml_model_create(th_eng, &bad, &m), WGML_ERROR_INVALID_ARGUMENT, "full_attention_layers");
    bad = c; bad.gemma = true; bad.sliding_window = 4; bad.full_attention_layers[0] = 4;   /* layer 2 of 2 */
    TH_EXPECT_ERR(wgml_model_create(th_eng, &bad, &m), WGML_ERROR_INVALID_ARGUMENT, "full_attention_layers");
    bad = c; bad.rope_local_theta = 10000;
    TH_EXPECT_ERR(wgml_model_create(th_eng, &bad, &m), WGML_ERROR_INVALID_ARGUMENT, "rope_local_theta");
    bad = c; bad.query_pre_attn_scalar = NAN;
    TH_EXPECT_ERR(wgml_model_create(th_eng, &bad, &m), WGML_ERROR_INVALID_ARGUMENT, "query_pre_attn_scalar");
    bad = c; bad.hidden_act = (wgml_hidden_act)2;
    TH_EXPECT_ERR(wgml_model_create(th_eng, &bad, &m), WGML_ERROR_INVALID_ARGUMENT, "hidden_act");
    bad = c; bad.vocab_size = 0;
    TH_EXPECT_ERR(wgml_model_create(th_eng, &bad, &m), WGML_ERROR_INVALID_ARGUMENT, "vocab_size");
    bad = c; bad.attention_bias = true;
    TH_EXPECT_ERR(wgml_model_create(th_eng, &bad, &m), WGML_ERROR_UNSUPPORTED, "bias");
    TH_CHECK(m == NULL, "failed create left a model");

    TH_EXPECT(wgml_model_create(th_eng, &c, &m), WGML_OK);
    wgml_trainer *t = NULL;
    TH_EXPECT_ERR(wgml_trainer_create(m, &(wgml_trainer_desc){ .batch = 0, .seq_len = 4 }, &t), WGML_ERROR_INVALID_ARGUMENT, "batch");
    TH_EXPECT(wgml_trainer_create(m, &(wgml_trainer_desc){ .batch = 1, .seq_len = 4 }, &t), WGML_OK);
    uint32_t ids[4] = { 1, 2, 3, 64 }, tg[4] = { 1, 2, 3, UINT32_MAX };
    TH_EXPECT_ERR(wgml_trainer_eval(t, ids, tg, NULL), WGML_ERROR_INVALID_ARGUMENT, "ids[3]");
    ids[3] = 4;
    tg[1] = 99;
    TH_EXPECT_ERR(wgml_trainer_accumulate(t, ids, tg, 1.0f, NULL), WGML_ERROR_INVALID_ARGUMENT, "targets[1]");
    TH_EXPECT_ERR(wgml_trainer_step(t, 1e-3f, NULL), WGML_ERROR_INVALID_ARGUMENT, "no gradient");
    tg[1] = 2;
    TH_EXPECT(wgml_trainer_accumulate(t, ids, tg, 1.0f, NULL), WGML_OK);   /* an ignored target is fine */
    TH_EXPECT_ERR(wgml_trainer_step(t, NAN, NULL), WGML_ERROR_INVALID_ARGUMENT, "lr");
    wgml_kv_cache *kc = NULL;
    TH_EXPECT_ERR(wgml_kv_cache_create(m, 0, &kc), WGML_ERROR_INVALID_ARGUMENT, "max_tokens");
    TH_EXPECT_ERR(wgml_model_init_random(m, 1, -1.0f), WGML_ERROR_INVALID_ARGUMENT, "std");
    TH_CHECK(wgml_model_param(m, wgml_model_param_count(m), NULL) == NULL, "param out of range");
    wgml_trainer_destroy(t);
    wgml_model_destroy(m);
}

static const th_case cases[] = {
    { "forward matches reference", test_forward_matches_reference },
    { "reference gradients by finite differences", test_reference_gradients_by_finite_differences },
    { "backward matches reference", test_backward_matches_reference },
    { "optimizer step", test_optimizer_step },
    { "training reduces loss", test_training_reduces_loss },
    { "the step's last micro-batch marked, alone", test_mark_last_alone },
    { "loss scaling", test_loss_scaling },
    { "mixed precision", test_mixed_precision },
    { "kv cache matches full forward", test_kv_cache_matches_full_forward },
    { "batched decoding", test_batched_decoding },
    { "checkpoint round trip", test_checkpoint_round_trip },
    { "checkpoint in f16 and bf16", test_checkpoint_half_precision },
    { "checkpoint in shards", test_checkpoint_sharded },
    { "checkpoint quantized (MLX affine)", test_checkpoint_quantized },
    { "checkpoint quantised at load", test_checkpoint_quantised_at_load },
    { "malformed checkpoints", test_malformed_checkpoints },
    { "hostile folders", test_hostile_folders },
    { "bad arguments", test_bad_arguments },
};

TH_MAIN(cases)
