/* The Llama-style model of src/model.c against the double-precision CPU reference of
   tests/ref/ref_model.c: logits, loss and every gradient on tiny random models; the
   reference's own gradients against finite differences; training reduces the loss;
   gradient accumulation and the AdamW step; a checkpoint round trip; generation with a
   KV cache against the full forward; malformed checkpoints and configs. */
#include "harness.h"
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

static wgml_model_config config_of(const ref_model_shape *s)
{
    wgml_model_config c;
    memset(&c, 0, sizeof c);
    strcpy(c.model_type, "llama");
    c.vocab_size = (uint32_t)s->vocab;
    c.hidden_size = (uint32_t)s->dim;
    c.intermediate_size = (uint32_t)s->ffn;
    c.num_hidden_layers = (uint32_t)s->layers;
    c.num_attention_heads = (uint32_t)s->heads;
    c.num_key_value_heads = (uint32_t)s->kv_heads;
    c.head_dim = (uint32_t)s->head_dim;
    c.max_position_embeddings = 64;
    c.rms_norm_eps = s->eps;
    c.rope_theta = s->rope_theta;
    c.tie_word_embeddings = s->tied;
    c.bos_token_id = -1;
    return c;
}

/* Random parameters large enough that every layer matters: matrices uniform in +-0.35
   (pre-activations of order 1 at these widths), norm weights in [0.7, 1.3]. */
static float **random_params(const ref_model_shape *s)
{
    int np = ref_model_param_count(s);
    float **p = malloc(sizeof(float *) * (size_t)np);
    for (int i = 0; i < np; i++) {
        size_t n = ref_model_param_numel(s, i);
        bool norm = n == (size_t)s->dim && i != 0;
        p[i] = norm ? th_random(n, 0.7, 1.3) : th_random(n, i == 0 ? -1.0 : -0.35, i == 0 ? 1.0 : 0.35);
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
   causal mask) changes logits by 1e-2 or more. */
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
    snprintf(what, sizeof what, "logits V=%d D=%d L=%d H=%d Hk=%d %s", s->vocab, s->dim, s->layers, s->heads, s->kv_heads,
             s->tied ? "tied" : "untied");
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
}

/* The reference's analytic gradients against central differences of its own loss, in
   double, for a few elements of every parameter tensor: this makes the reference worth
   comparing the GPU with. h = 1e-3 on inputs of order 1: the truncation error is
   O(h^2 * f''') ~ 1e-7 relative and the rounding error ~ 1e-16 / h, both far below the
   tolerance 1e-6 + 1e-5 * |g|. */
static void test_reference_gradients_by_finite_differences(void)
{
    const tiny *cases[] = { &tiny_a, &tiny_b };
    for (int c = 0; c < 2; c++) {
        const ref_model_shape *s = &cases[c]->s;
        int B = cases[c]->B, T = cases[c]->T, np = ref_model_param_count(s);
        size_t N = (size_t)B * T;
        float **params = random_params(s);
        uint32_t *ids = random_ids(N, s->vocab), *targets = random_ids(N, s->vocab);
        double **grads = malloc(sizeof(double *) * (size_t)np);
        for (int i = 0; i < np; i++) grads[i] = th_alloc_d(ref_model_param_numel(s, i));
        ref_model_run(s, (const float *const *)params, ids, targets, B, T, NULL, grads);
        /* float parameters: perturb by an exactly representable h */
        const float h = 1.0f / 1024;
        for (int i = 0; i < np; i++)
            for (int trial = 0; trial < 3; trial++) {
                size_t n = ref_model_param_numel(s, i);
                /* for the embedding, pick rows of tokens that occur */
                size_t j = i == 0 ? (size_t)ids[th_rand_u32() % N] * s->dim + th_rand_u32() % (uint32_t)s->dim : th_rand_u32() % n;
                float keep = params[i][j];
                params[i][j] = keep + h;
                double lp = ref_model_run(s, (const float *const *)params, ids, targets, B, T, NULL, NULL);
                params[i][j] = keep - h;
                double lm = ref_model_run(s, (const float *const *)params, ids, targets, B, T, NULL, NULL);
                params[i][j] = keep;
                double fd = (lp - lm) / (2.0 * h), g = grads[i][j];
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
   1e-3 of the tensor's largest reference gradient; elements near that size must agree to
   1e-3 relative. A wrong gradient (a transposed product, a missing residual path, an
   unscaled accumulation) is off by O(1) of that scale. */
static void compare_grads(const char *label, const ref_model_shape *s, wgml_trainer *t, double *const *grads)
{
    for (int i = 0; i < ref_model_param_count(s); i++) {
        size_t n = ref_model_param_numel(s, i);
        double mx = 0;
        for (size_t j = 0; j < n; j++) mx = fmax(mx, fabs(grads[i][j]));
        float *got = th_read(wgml_trainer_grad(t, (size_t)i));
        char what[128];
        snprintf(what, sizeof what, "%s: gradient of param %d", label, i);
        th_compare(what, got, grads[i], n, 1e-3 * mx + 1e-9, 1e-3);
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
    compare_grads(s->tied ? "tied model" : "untied model", s, t, grads);

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
    compare_grads("two accumulated micro-batches", s, t, grads2);

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
    const double lr = 0.01;
    TH_EXPECT(wgml_trainer_step(t, (float)lr, gn), WGML_OK);
    TH_CHECK(wgml_trainer_steps(t) == 1, "steps %u", wgml_trainer_steps(t));
    float got_norm = read_scalar(gn);
    TH_CHECK(fabs(got_norm - norm) <= 1e-3 * norm, "grad norm %.7g, want %.7g", got_norm, norm);
    /* step 1 of AdamW: m = (1-b1) g, v = (1-b2) g^2, bias-corrected m/sqrt(v) = g/|g| (up to
       eps), so the update is lr * sign(g) where g != 0; the clip scale cancels except
       through eps, which is negligible unless |g| is tiny: elements with
       |g| * scale < 1e-6 are compared with a looser bound. */
    double scale = clip / (norm + 1e-6);
    for (int i = 0; i < np; i++) {
        size_t n = ref_model_param_numel(s, i);
        bool norm_param = n == (size_t)s->dim && i != 0;
        double wd = norm_param ? 0 : 0.25;
        double *want = th_alloc_d(n);
        for (size_t j = 0; j < n; j++) {
            double g = grads[i][j] * scale;
            double mhat = g, vhat = g * g;
            want[j] = params[i][j] * (1 - lr * wd) - lr * mhat / (sqrt(vhat) + 1e-8);
        }
        float *got = th_read(wgml_model_param(m, (size_t)i, NULL));
        char what[64];
        snprintf(what, sizeof what, "param %d after one AdamW step", i);
        /* lr * (1e-8 / (|g| + 1e-8)) of slack for tiny gradients, and f32 rounding */
        th_compare(what, got, want, n, 2e-4 * lr + 1e-6, 1e-5);
        free(got); free(want);
    }
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
    bad = c; bad.head_dim = 256; bad.hidden_size = 1024;
    TH_EXPECT_ERR(wgml_model_create(th_eng, &bad, &m), WGML_ERROR_UNSUPPORTED, "head_dim");
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
    { "kv cache matches full forward", test_kv_cache_matches_full_forward },
    { "bad arguments", test_bad_arguments },
};

TH_MAIN(cases)
