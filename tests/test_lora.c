/* LoRA adapters: the forward and the adapter's gradients against the reference model on
   merged weights (tests/ref/ref_lora.c), that reference against finite differences, the
   base frozen bit for bit while the adapter trains, decoding with the adapter, PEFT's
   files (key names, config, round trip, what is refused), and merging. */
#include "harness.h"
#include "model_config.h"
#include "ref_lora.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* untied, GQA; and tied, MQA, odd sizes */
typedef struct tiny { ref_model_shape s; int B, T; } tiny;
static const tiny tiny_a = { { .vocab = 64, .dim = 32, .layers = 2, .heads = 4, .kv_heads = 2, .head_dim = 8, .ffn = 48,
                               .rope_theta = 10000, .eps = 1e-5, .tied = false }, 2, 16 };
static const tiny tiny_b = { { .vocab = 67, .dim = 24, .layers = 1, .heads = 3, .kv_heads = 1, .head_dim = 8, .ffn = 37,
                               .rope_theta = 100000, .eps = 1e-6, .tied = true }, 1, 13 };
/* the families: Qwen2's biases with a sliding window of 4, Qwen3's per-head norms */
static const tiny tiny_qwen2 = { { .vocab = 59, .dim = 28, .layers = 2, .heads = 4, .kv_heads = 2, .head_dim = 8, .ffn = 36,
                                   .rope_theta = 1000000, .eps = 1e-6, .tied = true, .window = 4, .qkv_bias = true }, 2, 11 };
static const tiny tiny_qwen3 = { { .vocab = 53, .dim = 24, .layers = 1, .heads = 4, .kv_heads = 2, .head_dim = 6, .ffn = 30,
                                   .rope_theta = 1000000, .eps = 1e-6, .tied = false, .qk_norm = true }, 2, 9 };
/* LFM2: convolution, attention, convolution (its in_proj and out_proj are targets too) */
static const bool lfm2_conv[3] = { true, false, true };
static const tiny tiny_lfm2 = { { .vocab = 47, .dim = 20, .layers = 3, .heads = 4, .kv_heads = 2, .head_dim = 6, .ffn = 26,
                                  .rope_theta = 1000000, .eps = 1e-5, .tied = true, .qk_norm = true, .conv_kernel = 3,
                                  .conv = lfm2_conv }, 2, 10 };
/* Gemma 3: global and sliding layers, (1 + w) norms around each block, GeGLU */
static const bool gemma_full[2] = { true, false };
static const tiny tiny_gemma3 = { { .vocab = 41, .dim = 24, .layers = 2, .heads = 2, .kv_heads = 1, .head_dim = 16, .ffn = 28,
                                    .rope_theta = 1000000, .eps = 1e-6, .tied = true, .qk_norm = true, .window = 3,
                                    .gemma = true, .gelu = true, .full = gemma_full, .rope_local_theta = 10000,
                                    .attn_scale = 0.25 }, 2, 9 };

/* Tolerances as test_model.c derives them for the same model: f32 stages of dot products
   of at most 48 terms, errors of order 1e-6 against logits below 10. The adapter adds two
   short products (rank terms, then in) per target: the same order. */
#define LOGIT_ATOL 1e-4
#define LOGIT_RTOL 1e-4

static wgml_model_config config_of(const ref_model_shape *s) { return ref_config_of(s); }

/* A model with random parameters (as test_model.c makes them) and an adapter of the given
   rank and targets whose A and B are both random (a new adapter's B is zero, which would
   hide mistakes in its path), with their host copies in double. */
typedef struct fixture {
    const tiny *tc;
    wgml_model *m;
    wgml_lora *l;
    int np, rank;
    double scale;
    double **p;                   /* model parameters */
    double *a[64], *b[64];        /* per layer * REF_LORA_KINDS + target; NULL where none */
} fixture;

static void fixture_make_all(fixture *f, const tiny *tc, uint32_t rank, uint32_t targets, bool rslora, float dropout,
                             wgml_weights weights);
static void fixture_make(fixture *f, const tiny *tc, uint32_t rank, uint32_t targets, bool rslora)
{
    fixture_make_all(f, tc, rank, targets, rslora, 0.0f, WGML_WEIGHTS_F32);
}
static void fixture_make_drop(fixture *f, const tiny *tc, uint32_t rank, uint32_t targets, bool rslora, float dropout)
{
    fixture_make_all(f, tc, rank, targets, rslora, dropout, WGML_WEIGHTS_F32);
}

/* The fixture's model saved (as BF16 for WGML_WEIGHTS_KEEP, else F32) and loaded again
   with weights: its matrices become bf16 or quantised, and the reference's parameters
   become what the model holds (each matrix unpacked). */
static void reload_packed(fixture *f, wgml_weights weights)
{
    char dir[] = "/tmp/wgml_test_lora_packed_XXXXXX";
    TH_CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    wgml_model_save_options so = { .dtype = weights == WGML_WEIGHTS_KEEP ? WGML_BF16 : WGML_F32 };
    TH_EXPECT(wgml_model_save_with(f->m, dir, &so), WGML_OK);
    wgml_model_destroy(f->m);
    f->m = NULL;
    TH_EXPECT(wgml_model_load_with(th_eng, dir, &(wgml_model_load_options){ .weights = weights }, &f->m), WGML_OK);
    char path[64];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    rmdir(dir);
    if (!f->m) return;
    for (int i = 0; i < f->np; i++) {
        wgml_tensor *t = wgml_model_param(f->m, (size_t)i, NULL);
        size_t n = wgml_tensor_numel(t);
        wgml_tensor *u = th_poisoned(WGML_F32, TH_SHAPE(n));
        const char *name;
        wgml_model_param(f->m, (size_t)i, &name);
        if (wgml_tensor_ndim(t) == 2 && !strstr(name, ".conv.conv.")) {   /* LFM2's convolution weights stay f32 */
            TH_CHECK(wgml_tensor_dtype(t) == (weights == WGML_WEIGHTS_KEEP ? WGML_BF16 : WGML_AFFINE), "parameter %d is %s", i,
                     wgml_dtype_name(wgml_tensor_dtype(t)));
            TH_EXPECT(wgml_unpack(th_eng, t, u), WGML_OK);
        } else {
            TH_EXPECT(wgml_copy_tensor(th_eng, t, u, 0), WGML_OK);
        }
        float *x = th_read(u);
        th_to_double(x, f->p[i], n);
        free(x);
        wgml_tensor_release(u);
    }
}

static void fixture_make_all(fixture *f, const tiny *tc, uint32_t rank, uint32_t targets, bool rslora, float dropout,
                             wgml_weights weights)
{
    const ref_model_shape *s = &tc->s;
    memset(f, 0, sizeof *f);
    f->tc = tc;
    f->np = ref_model_param_count(s);
    f->p = calloc((size_t)f->np, sizeof *f->p);
    wgml_model_config c = config_of(s);
    TH_EXPECT(wgml_model_create(th_eng, &c, &f->m), WGML_OK);
    for (int i = 0; i < f->np; i++) {
        size_t n = ref_model_param_numel(s, i);
        bool norm = n == (size_t)s->dim && i != 0;
        double off = s->gemma ? 1.0 : 0.0;   /* Gemma stores w of 1 + w */
        float *x = norm ? th_random(n, 0.7 - off, 1.3 - off) : th_random(n, i == 0 ? -1.0 : -0.35, i == 0 ? 1.0 : 0.35);
        f->p[i] = th_alloc_d(n);
        th_to_double(x, f->p[i], n);
        TH_EXPECT(wgml_tensor_write(wgml_model_param(f->m, (size_t)i, NULL), 0, x, n * sizeof *x), WGML_OK);
        free(x);
    }
    if (weights != WGML_WEIGHTS_F32) reload_packed(f, weights);
    wgml_lora_desc d = { .rank = rank, .alpha = 5, .targets = targets, .rslora = rslora, .dropout = dropout };
    TH_EXPECT(wgml_lora_create(f->m, &d, th_rand_u32(), &f->l), WGML_OK);
    f->rank = (int)rank;
    f->scale = rslora ? 5.0 / sqrt((double)rank) : 5.0 / rank;
    TH_CHECK(fabs(wgml_lora_scale(f->l) - f->scale) < 1e-6, "scale %g, want %g", wgml_lora_scale(f->l), f->scale);
    size_t i = 0;
    for (int l = 0; l < s->layers; l++)
        for (int k = 0; k < REF_LORA_KINDS; k++) {
            if (!(targets & (1u << k)) || ref_lora_param(s, l, k) < 0) continue;
            for (int ab = 0; ab < 2; ab++, i++) {
                wgml_tensor *t = wgml_lora_param(f->l, i, NULL);
                size_t n = wgml_tensor_numel(t);
                float *x = th_random(n, -0.3, 0.3);
                double *dst = th_alloc_d(n);
                th_to_double(x, dst, n);
                TH_EXPECT(wgml_tensor_write(t, 0, x, n * sizeof *x), WGML_OK);
                free(x);
                if (ab) f->b[l * REF_LORA_KINDS + k] = dst;
                else f->a[l * REF_LORA_KINDS + k] = dst;
            }
        }
    TH_CHECK(i == wgml_lora_param_count(f->l), "%zu adapter tensors, want %zu", wgml_lora_param_count(f->l), i);
}

static void fixture_free(fixture *f)
{
    wgml_lora_destroy(f->l);
    wgml_model_destroy(f->m);
    for (int i = 0; i < f->np; i++) free(f->p[i]);
    free(f->p);
    for (int i = 0; i < 64; i++) { free(f->a[i]); free(f->b[i]); }
}

/* The reference's loss, logits and merged-weight gradients for the fixture's adapter. */
static double reference(const fixture *f, const uint32_t *ids, const uint32_t *tg, double *logits, double **grads)
{
    const ref_model_shape *s = &f->tc->s;
    double **merged = calloc((size_t)f->np, sizeof *merged);
    for (int i = 0; i < f->np; i++) merged[i] = th_alloc_d(ref_model_param_numel(s, i));
    ref_lora_merge(s, (const double *const *)f->p, f->rank, f->scale, (const double *const *)f->a, (const double *const *)f->b,
                   merged);
    double loss = ref_model_run_d(s, (const double *const *)merged, ids, tg, f->tc->B, f->tc->T, logits, grads);
    for (int i = 0; i < f->np; i++) free(merged[i]);
    free(merged);
    return loss;
}

static uint32_t *random_ids(size_t n, int vocab)
{
    uint32_t *ids = malloc(sizeof(uint32_t) * n);
    for (size_t i = 0; i < n; i++) ids[i] = th_rand_u32() % (uint32_t)vocab;
    return ids;
}

/* Every parameter's bytes (packed ones as they are stored), one after another; *count is
   their total. */
static uint8_t *params_snapshot(wgml_model *m, size_t *count)
{
    size_t total = 0;
    for (size_t i = 0; i < wgml_model_param_count(m); i++) total += wgml_tensor_nbytes(wgml_model_param(m, i, NULL));
    uint8_t *all = malloc(total), *at = all;
    for (size_t i = 0; i < wgml_model_param_count(m); i++) {
        wgml_tensor *t = wgml_model_param(m, i, NULL);
        th_read_into(t, at);
        at += wgml_tensor_nbytes(t);
    }
    *count = total;
    return all;
}

/* Forward and the adapter's gradients against the reference, for each shape and a few
   target sets; the base stays bit for bit what it was through several steps. */
static void check_train(const tiny *tc, uint32_t rank, uint32_t targets, bool rslora, wgml_weights weights)
{
    const ref_model_shape *s = &tc->s;
    fixture f;
    fixture_make_all(&f, tc, rank, targets, rslora, 0.0f, weights);
    size_t N = (size_t)tc->B * tc->T, V = (size_t)s->vocab;
    uint32_t *ids = random_ids(N, s->vocab), *tg = random_ids(N, s->vocab);
    double *ref_logits = th_alloc_d(N * V);
    double **g = calloc((size_t)f.np, sizeof *g);
    for (int i = 0; i < f.np; i++) g[i] = th_alloc_d(ref_model_param_numel(s, i));
    reference(&f, ids, tg, ref_logits, g);

    wgml_trainer *t = NULL;
    TH_EXPECT(wgml_trainer_create(f.m, &(wgml_trainer_desc){ .batch = (uint32_t)tc->B, .seq_len = (uint32_t)tc->T, .lora = f.l },
                                  &t), WGML_OK);
    if (!t) { fixture_free(&f); return; }
    TH_EXPECT(wgml_trainer_accumulate(t, ids, tg, 1.0f, NULL), WGML_OK);
    TH_CHECK(wgml_trainer_grad(t, 1) == NULL, "a frozen base weight has a gradient");
    char what[160];
    size_t i = 0;
    for (int l = 0; l < s->layers; l++)
        for (int k = 0; k < REF_LORA_KINDS; k++) {
            if (!f.a[l * REF_LORA_KINDS + k]) continue;
            int out, in;
            ref_lora_dims(s, l, k, &out, &in);
            double *da = th_alloc_d((size_t)f.rank * in), *db = th_alloc_d((size_t)out * f.rank);
            ref_lora_grads(out, in, f.rank, f.scale, f.a[l * REF_LORA_KINDS + k], f.b[l * REF_LORA_KINDS + k], g[ref_lora_param(s, l, k)], da, db);
            for (int ab = 0; ab < 2; ab++, i++) {
                const double *want = ab ? db : da;
                size_t n = ab ? (size_t)out * f.rank : (size_t)f.rank * in;
                double mx = 0;
                for (size_t j = 0; j < n; j++) mx = fmax(mx, fabs(want[j]));
                float *got = th_read(wgml_trainer_lora_grad(t, i));
                const char *name;
                wgml_lora_param(f.l, i, &name);
                snprintf(what, sizeof what, "%s%s%s rank %u: gradient of %s", s->tied ? "tied" : "untied",
                         s->qkv_bias ? " qkv_bias" : "", s->qk_norm ? " qk_norm" : "", rank, name);
                /* as test_model.c's gradients: 1e-4 of the tensor's largest, and 1e-4 relative */
                th_compare(what, got, want, n, 1e-4 * mx + 1e-9, 1e-4);
                free(got);
            }
            free(da);
            free(db);
        }
    /* the forward through the trainer (eval) */
    TH_EXPECT(wgml_trainer_eval(t, ids, tg, NULL), WGML_OK);
    float *logits = th_read(wgml_trainer_logits(t));
    snprintf(what, sizeof what, "%s rank %u targets 0x%x: logits", s->tied ? "tied" : "untied", rank, targets);
    th_compare(what, logits, ref_logits, N * V, LOGIT_ATOL, LOGIT_RTOL);
    free(logits);

    /* steps move the adapter, never the base */
    size_t nb, na;
    uint8_t *before = params_snapshot(f.m, &nb);
    float *a0 = th_read(wgml_lora_param(f.l, 0, NULL));
    TH_EXPECT(wgml_trainer_step(t, 1e-2f, NULL), WGML_OK);
    for (int k = 0; k < 2; k++) {
        TH_EXPECT(wgml_trainer_accumulate(t, ids, tg, 1.0f, NULL), WGML_OK);
        TH_EXPECT(wgml_trainer_step(t, 1e-2f, NULL), WGML_OK);
    }
    uint8_t *after = params_snapshot(f.m, &na);
    TH_CHECK(nb == na && memcmp(before, after, nb) == 0, "the frozen base changed while the adapter trained");
    float *a1 = th_read(wgml_lora_param(f.l, 0, NULL));
    TH_CHECK(memcmp(a0, a1, wgml_tensor_nbytes(wgml_lora_param(f.l, 0, NULL))) != 0, "three steps left the adapter unchanged");
    free(before); free(after); free(a0); free(a1);

    wgml_trainer_destroy(t);
    for (int k = 0; k < f.np; k++) free(g[k]);
    free(g); free(ids); free(tg); free(ref_logits);
    fixture_free(&f);
}

static void test_train_against_reference(void)
{
    check_train(&tiny_a, 4, WGML_LORA_ALL, false, WGML_WEIGHTS_F32);
    check_train(&tiny_b, 3, WGML_LORA_Q | WGML_LORA_V | WGML_LORA_DOWN, true, WGML_WEIGHTS_F32);
    check_train(&tiny_a, 1, WGML_LORA_O | WGML_LORA_GATE | WGML_LORA_UP | WGML_LORA_K, false, WGML_WEIGHTS_F32);
    check_train(&tiny_qwen2, 2, WGML_LORA_ALL, false, WGML_WEIGHTS_F32);
    check_train(&tiny_qwen3, 3, WGML_LORA_Q | WGML_LORA_K | WGML_LORA_V | WGML_LORA_O, false, WGML_WEIGHTS_F32);
    check_train(&tiny_lfm2, 2, WGML_LORA_ALL, false, WGML_WEIGHTS_F32);
    check_train(&tiny_lfm2, 3, WGML_LORA_IN | WGML_LORA_O | WGML_LORA_Q, false, WGML_WEIGHTS_F32);
    check_train(&tiny_gemma3, 2, WGML_LORA_ALL, false, WGML_WEIGHTS_F32);
}

/* LoRA over a frozen base kept packed (QLoRA's setting): 4-bit and 8-bit affine
   quantised at load, and bf16, against the reference run on the weights the model holds;
   the base's input gradients go through the packed products (a @ W). */
static void test_train_over_packed_base(void)
{
    check_train(&tiny_a, 4, WGML_LORA_ALL, false, WGML_WEIGHTS_Q4);
    check_train(&tiny_b, 3, WGML_LORA_Q | WGML_LORA_V | WGML_LORA_DOWN, false, WGML_WEIGHTS_Q8);
    check_train(&tiny_qwen3, 2, WGML_LORA_ALL, false, WGML_WEIGHTS_KEEP);
    check_train(&tiny_lfm2, 2, WGML_LORA_ALL, false, WGML_WEIGHTS_Q8);
    /* what needs f32 matrices says so, and changes nothing */
    fixture f;
    fixture_make_all(&f, &tiny_a, 2, WGML_LORA_ALL, false, 0.0f, WGML_WEIGHTS_Q4);
    wgml_trainer *t = NULL;
    TH_EXPECT_ERR(wgml_trainer_create(f.m, &(wgml_trainer_desc){ .batch = 1, .seq_len = 4 }, &t), WGML_ERROR_UNSUPPORTED,
                  "needs f32 weights");
    TH_CHECK(t == NULL, "a refused trainer is NULL");
    TH_EXPECT_ERR(wgml_model_init_random(f.m, 1, 0.02f), WGML_ERROR_UNSUPPORTED, "affine");
    TH_EXPECT_ERR(wgml_lora_merge(f.l), WGML_ERROR_UNSUPPORTED, "merging");
    TH_CHECK(wgml_lora_param_count(f.l) > 0, "the adapter survives a refused merge");
    fixture_free(&f);
}

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* LoRA dropout: the adapter's gradients of a step's micro-batches against the reference
   with the same dropout decisions (the seed formula of wgml_trainer_desc.seed, step 0,
   micro-batches 0 and 1), and evaluation without dropout (the plain reference's logits). */
static void check_dropout(const tiny *tc, uint32_t targets, float p)
{
    const ref_model_shape *s = &tc->s;
    fixture f;
    fixture_make_drop(&f, tc, 3, targets, false, p);
    TH_CHECK(wgml_lora_get_desc(f.l)->dropout == p, "the adapter's dropout is %g, want %g", wgml_lora_get_desc(f.l)->dropout, p);
    size_t N = (size_t)tc->B * tc->T, V = (size_t)s->vocab;
    uint32_t *ids[2] = { random_ids(N, s->vocab), random_ids(N, s->vocab) }, *tg[2] = { random_ids(N, s->vocab), random_ids(N, s->vocab) };
    const uint64_t seed = 0x5eed;
    wgml_trainer *t = NULL;
    TH_EXPECT(wgml_trainer_create(f.m, &(wgml_trainer_desc){ .batch = (uint32_t)tc->B, .seq_len = (uint32_t)tc->T, .lora = f.l,
                                                             .seed = seed }, &t), WGML_OK);
    if (!t) { fixture_free(&f); return; }
    /* the reference: the mean of the two micro-batches' gradients at scale 1/2 each */
    int slots = s->layers * REF_LORA_KINDS;
    double *da[64] = { 0 }, *db[64] = { 0 };
    uint64_t seeds[64];
    for (int i = 0; i < slots; i++)
        if (f.a[i]) {
            int out, in;
            ref_lora_dims(s, i / REF_LORA_KINDS, i % REF_LORA_KINDS, &out, &in);
            da[i] = calloc((size_t)f.rank * in, sizeof(double));   /* the reference adds into them */
            db[i] = calloc((size_t)out * f.rank, sizeof(double));
        }
    double **g = calloc((size_t)f.np, sizeof *g);
    for (int i = 0; i < f.np; i++) g[i] = th_alloc_d(ref_model_param_numel(s, i));
    for (uint32_t micro = 0; micro < 2; micro++) {
        for (int i = 0; i < slots; i++)
            seeds[i] = mix64(mix64(mix64(seed ^ 0x6a09e667f3bcc908ull) ^ (uint64_t)micro) ^ ((uint64_t)(i / REF_LORA_KINDS) << 8 | (uint64_t)(i % REF_LORA_KINDS)));
        ref_model_lora lo = { .rank = f.rank, .scale = f.scale, .p = p, .a = (const double *const *)f.a,
                              .b = (const double *const *)f.b, .seeds = seeds, .da = da, .db = db };
        ref_model_run_lora(s, (const double *const *)f.p, &lo, ids[micro], tg[micro], tc->B, tc->T, NULL, g);
        TH_EXPECT(wgml_trainer_accumulate(t, ids[micro], tg[micro], 0.5f, NULL), WGML_OK);
    }
    char what[160];
    size_t i = 0;
    for (int slot = 0; slot < slots; slot++) {
        if (!f.a[slot]) continue;
        int out, in;
        ref_lora_dims(s, slot / REF_LORA_KINDS, slot % REF_LORA_KINDS, &out, &in);
        for (int ab = 0; ab < 2; ab++, i++) {
            size_t n = ab ? (size_t)out * f.rank : (size_t)f.rank * in;
            double *want = ab ? db[slot] : da[slot], mx = 0;
            for (size_t j = 0; j < n; j++) { want[j] *= 0.5; mx = fmax(mx, fabs(want[j])); }
            float *got = th_read(wgml_trainer_lora_grad(t, i));
            const char *name;
            wgml_lora_param(f.l, i, &name);
            snprintf(what, sizeof what, "dropout %g: gradient of %s", p, name);
            th_compare(what, got, want, n, 1e-4 * mx + 1e-9, 1e-4);
            free(got);
        }
    }
    /* evaluation drops nothing */
    double *ref_logits = th_alloc_d(N * V);
    ref_model_lora none = { .rank = f.rank, .scale = f.scale, .p = 0, .a = (const double *const *)f.a,
                            .b = (const double *const *)f.b, .seeds = seeds };
    ref_model_run_lora(s, (const double *const *)f.p, &none, ids[0], tg[0], tc->B, tc->T, ref_logits, NULL);
    TH_EXPECT(wgml_trainer_eval(t, ids[0], tg[0], NULL), WGML_OK);
    float *logits = th_read(wgml_trainer_logits(t));
    snprintf(what, sizeof what, "dropout %g: logits of eval", p);
    th_compare(what, logits, ref_logits, N * V, LOGIT_ATOL, LOGIT_RTOL);
    free(logits);
    free(ref_logits);
    for (int k = 0; k < slots; k++) { free(da[k]); free(db[k]); }
    for (int k = 0; k < f.np; k++) free(g[k]);
    free(g);
    for (int k = 0; k < 2; k++) { free(ids[k]); free(tg[k]); }
    wgml_trainer_destroy(t);
    fixture_free(&f);
}

static void test_dropout_against_reference(void)
{
    check_dropout(&tiny_a, WGML_LORA_ALL, 0.3f);
    check_dropout(&tiny_qwen3, WGML_LORA_O | WGML_LORA_DOWN | WGML_LORA_K, 0.6f);
}

/* The reference's adapter gradients (chain rule through the merged weight) against central
   differences of its loss in the adapter's own elements. */
typedef struct fd_ctx { fixture *f; const uint32_t *ids, *tg; double *x; int slot, ab; } fd_ctx;

static double fd_loss(const double *x, const void *vctx)
{
    const fd_ctx *c = vctx;
    (void)x;   /* th_finite_diff perturbs the adapter array itself, which the fixture holds */
    return reference(c->f, c->ids, c->tg, NULL, NULL);
}

static void test_reference_by_finite_differences(void)
{
    const tiny *tc = &tiny_b;
    const ref_model_shape *s = &tc->s;
    fixture f;
    fixture_make(&f, tc, 2, WGML_LORA_ALL, false);
    size_t N = (size_t)tc->B * tc->T;
    uint32_t *ids = random_ids(N, s->vocab), *tg = random_ids(N, s->vocab);
    double **g = calloc((size_t)f.np, sizeof *g);
    for (int i = 0; i < f.np; i++) g[i] = th_alloc_d(ref_model_param_numel(s, i));
    reference(&f, ids, tg, NULL, g);
    const int slots[3] = { 0, 3, 6 };   /* q, o, down of layer 0 */
    for (int si = 0; si < 3; si++) {
        int k = slots[si], out, in;
        ref_lora_dims(s, 0, k, &out, &in);
        double *da = th_alloc_d((size_t)f.rank * in), *db = th_alloc_d((size_t)out * f.rank);
        ref_lora_grads(out, in, f.rank, f.scale, f.a[k], f.b[k], g[ref_lora_param(s, 0, k)], da, db);
        for (int ab = 0; ab < 2; ab++) {
            double *x = ab ? f.b[k] : f.a[k];
            size_t n = ab ? (size_t)out * f.rank : (size_t)f.rank * in;
            double *fd = th_alloc_d(n);
            fd_ctx c = { &f, ids, tg, x, k, ab };
            th_finite_diff(fd_loss, &c, x, n, 1e-5, fd);
            char what[96];
            snprintf(what, sizeof what, "reference d%c of target %d vs finite differences", ab ? 'B' : 'A', k);
            /* central differences with h = 1e-5 in double: truncation about h^2 |f'''| ~ 1e-10,
               rounding about 1e-16 |loss| / h ~ 1e-11 */
            size_t bad = 0;
            for (size_t j = 0; j < n; j++)
                if (!(fabs(fd[j] - (ab ? db : da)[j]) <= 1e-8 + 1e-6 * fabs(fd[j]))) bad++;
            TH_CHECK(bad == 0, "%s: %zu of %zu elements differ", what, bad, n);
            free(fd);
        }
        free(da);
        free(db);
    }
    for (int i = 0; i < f.np; i++) free(g[i]);
    free(g); free(ids); free(tg);
    fixture_free(&f);
}

/* A whole-model trainer with an adapter attached: the base's gradients are those of the
   merged weights (the input gradient runs through the adapter too). */
static void test_full_training_through_adapter(void)
{
    const tiny *tc = &tiny_a;
    const ref_model_shape *s = &tc->s;
    fixture f;
    fixture_make(&f, tc, 3, WGML_LORA_ALL, false);
    size_t N = (size_t)tc->B * tc->T;
    uint32_t *ids = random_ids(N, s->vocab), *tg = random_ids(N, s->vocab);
    double **g = calloc((size_t)f.np, sizeof *g);
    for (int i = 0; i < f.np; i++) g[i] = th_alloc_d(ref_model_param_numel(s, i));
    reference(&f, ids, tg, NULL, g);
    wgml_trainer *t = NULL;
    TH_EXPECT(wgml_trainer_create(f.m, &(wgml_trainer_desc){ .batch = (uint32_t)tc->B, .seq_len = (uint32_t)tc->T }, &t), WGML_OK);
    if (t) {
        TH_EXPECT(wgml_trainer_accumulate(t, ids, tg, 1.0f, NULL), WGML_OK);
        TH_CHECK(wgml_trainer_lora_grad(t, 0) == NULL, "a whole-model trainer has adapter gradients");
        for (int i = 0; i < f.np; i++) {
            size_t n = ref_model_param_numel(s, i);
            double mx = 0;
            for (size_t j = 0; j < n; j++) mx = fmax(mx, fabs(g[i][j]));
            float *got = th_read(wgml_trainer_grad(t, (size_t)i));
            char what[96];
            snprintf(what, sizeof what, "base gradient %d with an adapter attached", i);
            th_compare(what, got, g[i], n, 1e-4 * mx + 1e-9, 1e-4);
            free(got);
        }
        wgml_trainer_destroy(t);
    }
    for (int i = 0; i < f.np; i++) free(g[i]);
    free(g); free(ids); free(tg);
    fixture_free(&f);
}

/* Decoding with the adapter unmerged gives the reference's logits; merged, the same within
   f32 rounding; a merged model has no adapter left. */
static void test_decode_and_merge(void)
{
    const tiny *tc = &tiny_a;
    const ref_model_shape *s = &tc->s;
    fixture f;
    fixture_make(&f, tc, 4, WGML_LORA_ALL, false);
    size_t T = (size_t)tc->T, V = (size_t)s->vocab;
    uint32_t *ids = random_ids(T, s->vocab);
    double *ref = th_alloc_d(T * V);
    const tiny one = { s[0], 1, tc->T };
    fixture g = f;
    g.tc = &one;
    reference(&g, ids, ids, ref, NULL);
    wgml_kv_cache *kv = NULL;
    TH_EXPECT(wgml_kv_cache_create(f.m, (uint32_t)T, &kv), WGML_OK);
    wgml_tensor *lg = th_poisoned(WGML_F32, TH_SHAPE(T, V)), *last = th_poisoned(WGML_F32, TH_SHAPE(V));
    /* a prompt of T - 1 tokens in one pass, then one more */
    TH_EXPECT(wgml_model_decode(kv, ids, (uint32_t)T - 1, lg), WGML_ERROR_SHAPE);   /* [T, V] is for T tokens */
    TH_EXPECT(wgml_model_decode(kv, ids, (uint32_t)T, lg), WGML_OK);
    float *got = th_read(lg);
    th_compare("decode with the adapter: every position", got, ref, T * V, LOGIT_ATOL, LOGIT_RTOL);
    free(got);
    wgml_kv_cache_reset(kv);
    TH_EXPECT(wgml_model_decode(kv, ids, (uint32_t)T - 1, last), WGML_OK);
    TH_EXPECT(wgml_model_decode(kv, ids + T - 1, 1, last), WGML_OK);
    got = th_read(last);
    th_compare("decode with the adapter: one token after a prompt", got, ref + (T - 1) * V, V, LOGIT_ATOL, LOGIT_RTOL);
    free(got);
    TH_EXPECT(wgml_lora_merge(f.l), WGML_OK);
    f.l = NULL;   /* merged: freed */
    wgml_kv_cache_reset(kv);
    TH_EXPECT(wgml_model_decode(kv, ids, (uint32_t)T, lg), WGML_OK);
    got = th_read(lg);
    th_compare("decode after merging", got, ref, T * V, LOGIT_ATOL, LOGIT_RTOL);
    free(got);
    wgml_kv_cache_destroy(kv);
    wgml_tensor_release(lg);
    wgml_tensor_release(last);
    free(ids);
    free(ref);
    fixture_free(&f);
}

static char dir[64];

static const char *in_dir(const char *name)
{
    static char buf[4][160];
    static int next;
    char *b = buf[next++ & 3];
    snprintf(b, 160, "%s/%s", dir, name);
    return b;
}

static char *read_all(const char *path)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    char *buf = calloc(1, 1 << 16);
    size_t n = fread(buf, 1, (1 << 16) - 1, fp);
    buf[n] = 0;
    fclose(fp);
    return buf;
}

/* PEFT's files: the keys and config as PEFT writes them, a bit-exact round trip, and an
   adapter in PEFT's layout written here (f16, a subset of targets) read back. */
static void test_peft_files(void)
{
    snprintf(dir, sizeof dir, "/tmp/wgml_test_lora_XXXXXX");
    TH_CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    const tiny *tc = &tiny_a;
    fixture f;
    fixture_make(&f, tc, 4, WGML_LORA_Q | WGML_LORA_V, false);
    TH_EXPECT(wgml_lora_save(f.l, dir, "HuggingFaceTB/SmolLM2-135M"), WGML_OK);
    wgml_safetensors *st = NULL;
    TH_EXPECT(wgml_safetensors_open(in_dir("adapter_model.safetensors"), &st), WGML_OK);
    static const char *keys[] = {
        "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight",
        "base_model.model.model.layers.1.self_attn.v_proj.lora_A.weight", "base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight",
    };
    TH_CHECK(wgml_safetensors_count(st) == 8, "%zu tensors in the adapter file, want 8", wgml_safetensors_count(st));
    for (size_t i = 0; i < 4; i++) TH_CHECK(wgml_safetensors_find(st, keys[i]) >= 0, "no tensor %s", keys[i]);
    wgml_file_tensor info;
    wgml_safetensors_info(st, (size_t)wgml_safetensors_find(st, keys[1]), &info);
    TH_CHECK(info.ndim == 2 && info.shape[0] == 32 && info.shape[1] == 4, "q_proj.lora_B is [%llu, %llu], want [32, 4]",
             (unsigned long long)info.shape[0], (unsigned long long)info.shape[1]);
    wgml_safetensors_close(st);
    /* the config's keys and values, as PEFT reads them */
    char *cfg = read_all(in_dir("adapter_config.json"));
    cJSON *root = cfg ? cJSON_Parse(cfg) : NULL;
    TH_CHECK(root != NULL, "adapter_config.json is not JSON:\n%s", cfg ? cfg : "(unreadable)");
    static const struct { const char *key, *str; double num; int boolean; } must[] = {
        { "peft_type", "LORA", 0, -1 }, { "task_type", "CAUSAL_LM", 0, -1 }, { "bias", "none", 0, -1 },
        { "base_model_name_or_path", "HuggingFaceTB/SmolLM2-135M", 0, -1 }, { "r", NULL, 4, -1 }, { "lora_alpha", NULL, 5, -1 },
        { "lora_dropout", NULL, 0, -1 }, { "use_rslora", NULL, 0, 0 }, { "use_dora", NULL, 0, 0 }, { "fan_in_fan_out", NULL, 0, 0 },
        { "inference_mode", NULL, 0, 1 },
    };
    for (size_t i = 0; root && i < sizeof must / sizeof must[0]; i++) {
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, must[i].key);
        bool ok = must[i].str ? cJSON_IsString(it) && strcmp(it->valuestring, must[i].str) == 0
                : must[i].boolean >= 0 ? cJSON_IsBool(it) && cJSON_IsTrue(it) == must[i].boolean
                                       : cJSON_IsNumber(it) && it->valuedouble == must[i].num;
        TH_CHECK(ok, "adapter_config.json: %s is wrong:\n%s", must[i].key, cfg);
    }
    const cJSON *mods = root ? cJSON_GetObjectItemCaseSensitive(root, "target_modules") : NULL;
    TH_CHECK(cJSON_GetArraySize(mods) == 2 && strcmp(cJSON_GetArrayItem(mods, 0)->valuestring, "q_proj") == 0 &&
             strcmp(cJSON_GetArrayItem(mods, 1)->valuestring, "v_proj") == 0, "target_modules is not [q_proj, v_proj]");
    cJSON_Delete(root);
    free(cfg);

    /* round trip: the same tensors bit for bit */
    size_t n = wgml_lora_param_count(f.l);
    float **was = calloc(n, sizeof *was);
    for (size_t i = 0; i < n; i++) was[i] = th_read(wgml_lora_param(f.l, i, NULL));
    wgml_lora_destroy(f.l);
    f.l = NULL;
    wgml_lora *back = NULL;
    TH_EXPECT(wgml_lora_load(f.m, dir, &back), WGML_OK);
    TH_CHECK(back && wgml_lora_param_count(back) == n && wgml_lora_get_desc(back)->rank == 4 &&
             wgml_lora_get_desc(back)->targets == (WGML_LORA_Q | WGML_LORA_V), "the adapter read back differs in its description");
    for (size_t i = 0; back && i < n; i++) {
        float *now = th_read(wgml_lora_param(back, i, NULL));
        TH_CHECK(memcmp(now, was[i], wgml_tensor_nbytes(wgml_lora_param(back, i, NULL))) == 0, "tensor %zu changed in the round trip", i);
        free(now);
    }
    for (size_t i = 0; i < n; i++) free(was[i]);
    free(was);
    wgml_lora *second = NULL;
    TH_EXPECT_ERR(wgml_lora_load(f.m, dir, &second), WGML_ERROR_INVALID_ARGUMENT, "already has an adapter");
    f.l = back;

    /* what PEFT can write and wgml cannot run is refused by name; broken files too (a
       config in the layout PEFT writes, json.dumps with indent 2 and sorted keys) */
    char *good = strdup("{\n  \"alpha_pattern\": {},\n  \"base_model_name_or_path\": null,\n  \"bias\": \"none\",\n"
                        "  \"fan_in_fan_out\": false,\n  \"inference_mode\": true,\n  \"layers_to_transform\": null,\n"
                        "  \"lora_alpha\": 5,\n  \"lora_dropout\": 0.0,\n  \"modules_to_save\": null,\n  \"peft_type\": \"LORA\",\n"
                        "  \"r\": 4,\n  \"rank_pattern\": {},\n  \"target_modules\": [\"q_proj\", \"v_proj\"],\n"
                        "  \"task_type\": \"CAUSAL_LM\",\n  \"use_dora\": false,\n  \"use_rslora\": false\n}\n");
    {
        /* that layout itself loads */
        FILE *fp = fopen(in_dir("adapter_config.json"), "w");
        if (fp) { fputs(good, fp); fclose(fp); }
        wgml_lora *l = NULL;
        wgml_lora_destroy(f.l);
        f.l = NULL;
        TH_EXPECT(wgml_lora_load(f.m, dir, &l), WGML_OK);
        f.l = l;
    }
    static const struct { const char *from, *to, *needle; wgml_status s; } bad[] = {
        { "\"use_dora\": false", "\"use_dora\": true", "use_dora", WGML_ERROR_UNSUPPORTED },
        { "\"bias\": \"none\"", "\"bias\": \"all\"", "bias", WGML_ERROR_UNSUPPORTED },
        { "\"v_proj\"", "\"lm_head\"", "lm_head", WGML_ERROR_UNSUPPORTED },
        { "\"rank_pattern\": {}", "\"rank_pattern\": {\"q_proj\": 2}", "rank_pattern", WGML_ERROR_UNSUPPORTED },
        { "\"peft_type\": \"LORA\"", "\"peft_type\": \"IA3\"", "peft_type", WGML_ERROR_UNSUPPORTED },
        { "\"r\": 4", "\"r\": 2", "[2, ", WGML_ERROR_FORMAT },
        { "\"lora_dropout\": 0.0", "\"lora_dropout\": 1.5", "lora_dropout", WGML_ERROR_FORMAT },
        { "\"lora_dropout\": 0.0", "\"lora_dropout\": \"0.1\"", "lora_dropout", WGML_ERROR_FORMAT },
        { "\"modules_to_save\": null", "\"modules_to_save\": [\"lm_head\"]", "modules_to_save", WGML_ERROR_UNSUPPORTED },
        { "\"target_modules\": [\"q_proj\", \"v_proj\"]", "\"target_modules\": [\"q_proj\", \"v_proj\", \"k_proj\"]", "k_proj",
          WGML_ERROR_FORMAT },
        { "\"target_modules\": [\"q_proj\", \"v_proj\"]", "\"target_modules\": [\"q_proj\"]", "tensors", WGML_ERROR_FORMAT },
    };
    wgml_lora_destroy(f.l);
    f.l = NULL;
    for (size_t i = 0; good && i < sizeof bad / sizeof bad[0]; i++) {
        char *text = calloc(1, strlen(good) + 64), *at = strstr(good, bad[i].from);
        TH_CHECK(at != NULL, "the config has no %s", bad[i].from);
        if (!at) { free(text); continue; }
        memcpy(text, good, (size_t)(at - good));
        strcat(text, bad[i].to);
        strcat(text, at + strlen(bad[i].from));
        FILE *fp = fopen(in_dir("adapter_config.json"), "w");
        if (fp) { fputs(text, fp); fclose(fp); }
        free(text);
        wgml_lora *l = (wgml_lora *)&l;
        TH_EXPECT_ERR(wgml_lora_load(f.m, dir, &l), bad[i].s, bad[i].needle);
        TH_CHECK(l == NULL, "a refused adapter came back");
    }
    /* an adapter in PEFT's layout written here: f16 tensors, k_proj alone */
    FILE *fp = fopen(in_dir("adapter_config.json"), "w");
    if (fp) {
        fputs("{\"peft_type\": \"LORA\", \"r\": 2, \"lora_alpha\": 4, \"target_modules\": [\"k_proj\"], \"lora_dropout\": 0.05, "
              "\"bias\": \"none\", \"task_type\": \"CAUSAL_LM\", \"use_rslora\": true}", fp);
        fclose(fp);
    }
    uint16_t half[2][2 * 32];
    wgml_safetensors_entry e[4];
    for (int k = 0; k < 2 * 32; k++) half[0][k] = 0x3C00;   /* 1.0 */
    for (int k = 0; k < 2 * 16; k++) half[1][k] = 0xB800;   /* -0.5 */
    for (int l = 0; l < 2; l++) {
        static char names[4][96];
        snprintf(names[2 * l], 96, "base_model.model.model.layers.%d.self_attn.k_proj.lora_A.weight", l);
        snprintf(names[2 * l + 1], 96, "base_model.model.model.layers.%d.self_attn.k_proj.lora_B.weight", l);
        e[2 * l] = (wgml_safetensors_entry){ .name = names[2 * l], .dtype = WGML_ST_F16, .ndim = 2, .shape = { 2, 32 }, .data = half[0] };
        e[2 * l + 1] = (wgml_safetensors_entry){ .name = names[2 * l + 1], .dtype = WGML_ST_F16, .ndim = 2, .shape = { 16, 2 },
                                                 .data = half[1] };
    }
    TH_EXPECT(wgml_safetensors_write(in_dir("adapter_model.safetensors"), e, 4, NULL), WGML_OK);
    wgml_lora *k = NULL;
    TH_EXPECT(wgml_lora_load(f.m, dir, &k), WGML_OK);
    if (k) {
        TH_CHECK(fabs(wgml_lora_scale(k) - 4 / sqrt(2.0)) < 1e-6 && wgml_lora_get_desc(k)->targets == WGML_LORA_K &&
                     wgml_lora_get_desc(k)->dropout == 0.05f,
                 "an rslora k_proj adapter with dropout 0.05 read as scale %g targets 0x%x dropout %g", wgml_lora_scale(k),
                 wgml_lora_get_desc(k)->targets, wgml_lora_get_desc(k)->dropout);
        float *b = th_read(wgml_lora_param(k, 1, NULL));
        TH_CHECK(b[0] == -0.5f && b[31] == -0.5f, "f16 read as %g", b[0]);
        free(b);
    }
    f.l = k;
    free(good);
    unlink(in_dir("adapter_config.json"));
    unlink(in_dir("adapter_model.safetensors"));
    TH_CHECK(rmdir(dir) == 0, "rmdir: %s", strerror(errno));
    fixture_free(&f);
}

/* LFM2's adapter files: PEFT's keys for its module names (out_proj in both kinds of layer,
   in_proj in the convolution layers only, w1 / w3 / w2), its target_modules, and a round
   trip bit for bit. */
static void test_lfm2_peft_files(void)
{
    snprintf(dir, sizeof dir, "/tmp/wgml_test_lora_XXXXXX");
    TH_CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    fixture f;
    fixture_make(&f, &tiny_lfm2, 2, WGML_LORA_ALL, false);
    TH_CHECK(wgml_lora_get_desc(f.l)->targets == WGML_LORA_ALL, "an LFM2 adapter's targets 0x%x, want all eight",
             wgml_lora_get_desc(f.l)->targets);
    /* layers 0 and 2 convolve: in, o, gate, up, down; layer 1 attends: q, k, v, o, gate, up, down */
    TH_CHECK(wgml_lora_param_count(f.l) == 2 * (5 + 7 + 5), "%zu adapter tensors, want 34", wgml_lora_param_count(f.l));
    TH_EXPECT(wgml_lora_save(f.l, dir, NULL), WGML_OK);
    wgml_safetensors *st = NULL;
    TH_EXPECT(wgml_safetensors_open(in_dir("adapter_model.safetensors"), &st), WGML_OK);
    static const char *keys[] = {
        "base_model.model.model.layers.0.conv.in_proj.lora_A.weight", "base_model.model.model.layers.0.conv.out_proj.lora_B.weight",
        "base_model.model.model.layers.1.self_attn.out_proj.lora_A.weight",
        "base_model.model.model.layers.1.self_attn.q_proj.lora_B.weight",
        "base_model.model.model.layers.2.feed_forward.w1.lora_A.weight", "base_model.model.model.layers.2.feed_forward.w2.lora_B.weight",
    };
    for (size_t i = 0; st && i < sizeof keys / sizeof keys[0]; i++)
        TH_CHECK(wgml_safetensors_find(st, keys[i]) >= 0, "no tensor %s", keys[i]);
    TH_CHECK(st && wgml_safetensors_find(st, "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight") < 0,
             "a convolution layer has a q_proj adapter");
    wgml_file_tensor info;
    if (st) wgml_safetensors_info(st, (size_t)wgml_safetensors_find(st, keys[0]), &info);
    TH_CHECK(st && info.ndim == 2 && info.shape[0] == 2 && info.shape[1] == 20, "conv.in_proj.lora_A is not [2, 20]");
    wgml_safetensors_close(st);
    char *cfg = read_all(in_dir("adapter_config.json"));
    cJSON *root = cfg ? cJSON_Parse(cfg) : NULL;
    const cJSON *mods = root ? cJSON_GetObjectItemCaseSensitive(root, "target_modules") : NULL;
    static const char *want[] = { "q_proj", "k_proj", "v_proj", "out_proj", "w1", "w3", "w2", "in_proj" };
    bool ok = cJSON_GetArraySize(mods) == 8;
    for (int i = 0; ok && i < 8; i++) ok = !strcmp(cJSON_GetArrayItem(mods, i)->valuestring, want[i]);
    TH_CHECK(ok, "target_modules of an LFM2 adapter:\n%s", cfg ? cfg : "(unreadable)");
    cJSON_Delete(root);
    free(cfg);
    /* round trip */
    size_t n = wgml_lora_param_count(f.l);
    float **before = malloc(n * sizeof *before);
    for (size_t i = 0; i < n; i++) before[i] = th_read(wgml_lora_param(f.l, i, NULL));
    wgml_lora_destroy(f.l);
    f.l = NULL;
    TH_EXPECT(wgml_lora_load(f.m, dir, &f.l), WGML_OK);
    TH_CHECK(f.l && wgml_lora_param_count(f.l) == n, "reloaded adapter has %zu tensors", f.l ? wgml_lora_param_count(f.l) : 0);
    for (size_t i = 0; f.l && i < n; i++) {
        wgml_tensor *t = wgml_lora_param(f.l, i, NULL);
        float *after = th_read(t);
        TH_CHECK(!memcmp(after, before[i], wgml_tensor_nbytes(t)), "adapter tensor %zu differs after a round trip", i);
        free(after);
    }
    for (size_t i = 0; i < n; i++) free(before[i]);
    free(before);
    fixture_free(&f);
    unlink(in_dir("adapter_model.safetensors"));
    unlink(in_dir("adapter_config.json"));
    rmdir(dir);
}

static void test_bad_arguments(void)
{
    const tiny *tc = &tiny_b;
    wgml_model_config c = config_of(&tc->s);
    wgml_model *m = NULL;
    TH_EXPECT(wgml_model_create(th_eng, &c, &m), WGML_OK);
    wgml_lora *l = (wgml_lora *)&l;
    TH_EXPECT_ERR(wgml_lora_create(NULL, NULL, 0, &l), WGML_ERROR_INVALID_ARGUMENT, "m is NULL");
    TH_EXPECT_ERR(wgml_lora_create(m, &(wgml_lora_desc){ .rank = 25 }, 0, &l), WGML_ERROR_INVALID_ARGUMENT, "smaller side");
    TH_EXPECT_ERR(wgml_lora_create(m, &(wgml_lora_desc){ .alpha = -1 }, 0, &l), WGML_ERROR_INVALID_ARGUMENT, "alpha");
    TH_EXPECT_ERR(wgml_lora_create(m, &(wgml_lora_desc){ .targets = 0x100 }, 0, &l), WGML_ERROR_INVALID_ARGUMENT, "targets");
    TH_EXPECT_ERR(wgml_lora_create(m, &(wgml_lora_desc){ .targets = WGML_LORA_IN }, 0, &l), WGML_ERROR_INVALID_ARGUMENT,
                  "in_proj");   /* LFM2's only */
    TH_EXPECT_ERR(wgml_lora_create(m, &(wgml_lora_desc){ .dropout = 1.0f }, 0, &l), WGML_ERROR_INVALID_ARGUMENT, "dropout");
    TH_EXPECT_ERR(wgml_lora_create(m, &(wgml_lora_desc){ .dropout = -0.1f }, 0, &l), WGML_ERROR_INVALID_ARGUMENT, "dropout");
    TH_EXPECT_ERR(wgml_lora_create(m, &(wgml_lora_desc){ .dropout = NAN }, 0, &l), WGML_ERROR_INVALID_ARGUMENT, "dropout");
    TH_CHECK(l == NULL, "*out not NULL after a failure");
    /* a new adapter leaves the model's outputs unchanged (B is zero) */
    TH_EXPECT(wgml_lora_create(m, NULL, 1, &l), WGML_OK);
    TH_CHECK(l && wgml_lora_get_desc(l)->rank == 8 && wgml_lora_get_desc(l)->alpha == 16 &&
             wgml_lora_get_desc(l)->targets == (WGML_LORA_ALL & ~(uint32_t)WGML_LORA_IN),
             "the defaults are not rank 8, alpha 16, every target a Llama model has");
    float *b = th_read(wgml_lora_param(l, 1, NULL)), *a = th_read(wgml_lora_param(l, 0, NULL));
    size_t na = wgml_tensor_numel(wgml_lora_param(l, 0, NULL));
    bool zero = true, bounded = true;
    for (size_t i = 0; i < wgml_tensor_numel(wgml_lora_param(l, 1, NULL)); i++) zero &= b[i] == 0;
    double bound = 1 / sqrt(24.0), mx = 0;
    for (size_t i = 0; i < na; i++) { bounded &= fabsf(a[i]) <= bound; mx = fmax(mx, fabs(a[i])); }
    TH_CHECK(zero && bounded && mx > 0.8 * bound, "a new adapter: B zero %d, A within 1/sqrt(in) %d (largest %g of %g)", zero,
             bounded, mx, bound);
    free(a);
    free(b);
    wgml_lora *l2 = NULL;
    TH_EXPECT_ERR(wgml_lora_create(m, NULL, 1, &l2), WGML_ERROR_INVALID_ARGUMENT, "already has an adapter");
    wgml_model *other = NULL;
    TH_EXPECT(wgml_model_create(th_eng, &c, &other), WGML_OK);
    wgml_trainer *t = NULL;
    TH_EXPECT_ERR(wgml_trainer_create(other, &(wgml_trainer_desc){ .batch = 1, .seq_len = 4, .lora = l }, &t),
                  WGML_ERROR_INVALID_ARGUMENT, "not the model's adapter");
    wgml_model_destroy(other);
    TH_EXPECT_ERR(wgml_lora_save(NULL, "/tmp", NULL), WGML_ERROR_INVALID_ARGUMENT, "l is NULL");
    TH_EXPECT_ERR(wgml_lora_load(m, "/nonexistent/wgml/adapter", &l2), WGML_ERROR_IO, "adapter_config.json");
    TH_EXPECT_ERR(wgml_lora_merge(NULL), WGML_ERROR_INVALID_ARGUMENT, "NULL");
    wgml_lora_destroy(NULL);
    wgml_model_destroy(m);   /* takes its adapter with it */
}

static const th_case cases[] = {
    { "train against the reference", test_train_against_reference },
    { "train over a packed base", test_train_over_packed_base },
    { "dropout against the reference", test_dropout_against_reference },
    { "reference by finite differences", test_reference_by_finite_differences },
    { "full training through an adapter", test_full_training_through_adapter },
    { "decode and merge", test_decode_and_merge },
    { "peft files", test_peft_files },
    { "lfm2 peft files", test_lfm2_peft_files },
    { "bad arguments", test_bad_arguments },
};
TH_MAIN(cases)
