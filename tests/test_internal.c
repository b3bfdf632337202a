/* Internals that the public API cannot reach on every adapter: the 2-D grid split used
   when an op needs more workgroups than one dimension allows, device loss, and the
   gradients' sum over processes in small buckets through a transport of one process.
   Linked against the static library. */
#include "comm.h"
#include "harness.h"
#include "internal.h"

#include <stdlib.h>
#include <string.h>

static void test_grid_split(void)
{
    uint32_t max = th_ctx->limits.maxComputeWorkgroupsPerDimension;
    const uint64_t counts[] = { 0, 1, 2, max - 1, max, (uint64_t)max + 1, 2ull * max, 2ull * max + 1, 1000ull * max + 7,
                                (uint64_t)max * max };
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        uint32_t gx, gy;
        TH_EXPECT(wgml__grid(th_ctx, counts[i], &gx, &gy), WGML_OK);
        uint64_t want = counts[i] ? counts[i] : 1;
        TH_CHECK(gx <= max && gy <= max && gx >= 1 && gy >= 1, "grid %ux%u for %llu beyond %u", gx, gy, (unsigned long long)counts[i], max);
        TH_CHECK((uint64_t)gx * gy >= want && (uint64_t)gx * (gy - 1) < want, "grid %ux%u does not cover %llu tightly", gx, gy,
                 (unsigned long long)want);
    }
    uint32_t gx, gy;
    TH_EXPECT(wgml__grid(th_ctx, (uint64_t)max * max + 1, &gx, &gy), WGML_ERROR_LIMIT);
}

/* Every workgroup of a 2-D grid runs exactly once: an element-wise op over more vec4s than
   one dimension's workgroups could cover if the kernel ran with WG 256, emulated by a grid
   forced through the kernel with a smaller WG. */
static void test_two_d_grid_dispatch(void)
{
    size_t n = 4u * 64u * 3000u + 5;   /* 3000+ workgroups of 64 */
    float *a = th_random(n, -1, 1), *b = th_random(n, -1, 1);
    wgml_tensor *ta = th_tensor(WGML_F32, a, TH_SHAPE(n)), *tb = th_tensor(WGML_F32, b, TH_SHAPE(n));
    wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(n));
    struct { uint32_t n4, pad[3]; } p = { (uint32_t)((n + 3) / 4), { 0 } };
    wgml__kernel k = { .file = "elementwise", .entry = "binary", .layout = "urrw", .nconst = 3,
                       .constants = { { "OP", 0 }, { "SWAP", 0 }, { "WG", 64 } } };
    wgml__arg args[3] = { wgml__t(ta), wgml__t(tb), wgml__t(out) };
    uint32_t groups = (p.n4 + 63) / 64;
    /* 2-D: 7 columns of rows, the last row partly past the end */
    TH_EXPECT(wgml__dispatch(th_eng, &k, &p, sizeof p, args, 3, 7, (groups + 6) / 7, 1), WGML_OK);
    float *got = th_read(out);
    double *ref = th_alloc_d(n);
    for (size_t i = 0; i < n; i++) ref[i] = (double)a[i] + b[i];
    th_compare("add over a 7-wide 2-D grid", got, ref, n, 0, 1e-6);
    free(a); free(b); free(got); free(ref);
    wgml_tensor_release(ta); wgml_tensor_release(tb); wgml_tensor_release(out);
}

/* A device destroyed under the library: calls report WGML_ERROR_DEVICE with the driver's
   message, and the context still destroys cleanly. */
static void test_device_loss(void)
{
    wgml_context *c;
    wgml_engine *e;
    TH_EXPECT(wgml_context_create(NULL, &c), WGML_OK);
    TH_EXPECT(wgml_engine_create(c, &e), WGML_OK);
    float x[4] = { 1, 2, 3, 4 };
    wgml_tensor *t;
    TH_EXPECT(wgml_tensor_from_data(c, WGML_F32, 1, (size_t[]){ 4 }, x, &t), WGML_OK);
    wgpuDeviceDestroy(c->device);
    wgpuInstanceProcessEvents(c->instance);
    wgml_status s = wgml_add(e, t, t, t);
    TH_CHECK(s == WGML_ERROR_DEVICE, "op after device loss returned %s", wgml_status_string(s));
    TH_CHECK(strstr(wgml_last_error(c), "lost") != NULL, "message: %s", wgml_last_error(c));
    s = wgml_tensor_read(t, 0, x, sizeof x);
    TH_CHECK(s == WGML_ERROR_DEVICE, "read after device loss returned %s", wgml_status_string(s));
    wgml_tensor *t2;
    s = wgml_tensor_create(c, WGML_F32, 1, (size_t[]){ 4 }, &t2);
    TH_CHECK(s == WGML_ERROR_DEVICE && t2 == NULL, "create after device loss returned %s", wgml_status_string(s));
    TH_EXPECT(wgml_context_sync(c), WGML_ERROR_DEVICE);
    wgml_tensor_release(t);
    wgml_engine_destroy(e);
    wgml_context_destroy(c);
}

/* Asking for more memory than the device has is WGML_ERROR_OUT_OF_MEMORY or LIMIT, never
   a crash. */
static void test_out_of_memory(void)
{
    wgml_adapter_info in;
    wgml_context_info(th_ctx, &in);
    wgml_tensor *t;
    size_t n = (size_t)(in.max_storage_buffer_binding_size / 4) + 16;
    wgml_status s = wgml_tensor_create(th_ctx, WGML_F32, 1, &n, &t);
    TH_CHECK(s == WGML_ERROR_LIMIT, "over the binding limit: %s", wgml_status_string(s));
    TH_CHECK(strstr(wgml_last_error(th_ctx), "maxStorageBufferBindingSize") != NULL, "message: %s", wgml_last_error(th_ctx));
}

/* The split-K model's choices with the H200's profile, on the products it was fitted on
   (bench/notes/matmul.md): the 384-tile outputs of the training step unsplit, the 768 x 768
   weight gradient in 7 slices, the larger ones in 4; the LLM shape 2048 x 11008 x 4096
   unsplit (its last round split instead, which the model gives more). A GPU whose profile
   does not know its compute units gets the same plans. */
static void check_split_model(const char *profile)
{
    uint64_t binding = th_ctx->limits.maxStorageBufferBindingSize;
    static const struct { uint32_t M, N, K, slices; } products[] = {
        { 8192, 768, 768, 1 }, { 8192, 768, 2048, 1 }, { 8192, 2048, 768, 1 }, { 768, 768, 8192, 7 },
        { 768, 2048, 8192, 4 }, { 2048, 768, 8192, 4 }, { 4096, 4096, 4096, 1 }, { 2048, 4096, 11008, 1 },
        { 4096, 11008, 2048, 1 }, { 2048, 11008, 4096, 1 },
    };
    for (size_t i = 0; i < sizeof products / sizeof products[0]; i++) {
        uint64_t ws = 4ull * products[i].slices * products[i].M * products[i].N;
        uint32_t want = ws <= binding ? products[i].slices : 1;
        uint32_t got = wgml__matmul_model_slices(th_ctx, products[i].M, products[i].N, products[i].K);
        TH_CHECK(got == want, "%s: %u x %u x %u: %u K-slices, want %u", profile, products[i].M, products[i].N, products[i].K,
                 got, want);
    }
    /* the last round: 8192^3's 4,096 tiles leave 4 for a 32nd round on 132 SMs, split in 32
       slices (slices of at least 256); 8192 x 8192 x 1024 the same tiles in 4; 4096^3's 100
       tiles of an 8th round in 5 (the slot model's best); 2048 x 11008 x 4096's 56 in 7,
       3072^3's 48 in 8, 2048 x 5632 x 4096's 44 in 6 (in 3 if a workgroup alone on an SM ran
       no faster); none where the model's gain is too small (4096 x 11008 x 2048: 112 tiles
       of a 21st round; 8192 x 2048 x 768: K too short for slices to pay), the last round is
       empty (7936 x 8448: 31 x 132) or there are fewer than 4 rounds */
    static const struct { uint32_t M, N, K, tail, slices; } tails[] = {
        { 8192, 8192, 8192, 4, 32 }, { 8192, 8192, 1024, 4, 4 }, { 4096, 4096, 4096, 100, 5 }, { 2048, 11008, 4096, 56, 7 },
        { 3072, 3072, 3072, 48, 8 }, { 2048, 5632, 4096, 44, 6 }, { 4096, 11008, 2048, 0, 0 }, { 8192, 2048, 768, 0, 0 }, { 7936, 8448, 8192, 0, 0 },
        { 2048, 2048, 8192, 0, 0 }, { 8192, 768, 768, 0, 0 },
    };
    for (size_t i = 0; i < sizeof tails / sizeof tails[0]; i++) {
        uint32_t slices, tail = wgml__matmul_model_tail(th_ctx, tails[i].M, tails[i].N, tails[i].K, &slices);
        TH_CHECK(tail == tails[i].tail && (!tail || slices == tails[i].slices), "%s: %u x %u x %u: last round of %u tiles in "
                 "%u slices, want %u in %u", profile, tails[i].M, tails[i].N, tails[i].K, tail, slices, tails[i].tail,
                 tails[i].slices);
    }
}

static void test_matmul_split_model(void)
{
    const wgml__profile *own = th_ctx->profile;
    th_ctx->profile = wgml__profile_of("NVIDIA H200", 0x10de, false);
    TH_CHECK(th_ctx->profile->compute_units == 132, "the H200's profile has %u compute units", th_ctx->profile->compute_units);
    check_split_model("H200");
    th_ctx->profile = wgml__profile_of("a GPU of unknown size", 0x1234, false);
    TH_CHECK(th_ctx->profile->compute_units == 0, "the generic GPU profile has %u compute units", th_ctx->profile->compute_units);
    check_split_model("generic GPU");
    th_ctx->profile = own;
}

/* Which calls join the pending element-wise group and when it becomes a dispatch: up to
   60 ops over 4 distinct buffers of one vec4 count and one engine; 2^18 vec4 at most;
   never with WGML_FUSE=0 or submit_every_op. The values are checked by test_elementwise. */
static void test_fusion_groups(void)
{
    wgml_context *c = th_ctx;
    wgml_tensor *t[6], *odd[2], *big;
    for (int k = 0; k < 6; k++) t[k] = th_poisoned(WGML_F32, TH_SHAPE(1024));
    for (int k = 0; k < 2; k++) odd[k] = th_poisoned(WGML_F32, TH_SHAPE(1021));   /* 256 vec4 as 1024: the same group */
    big = th_poisoned(WGML_F32, TH_SHAPE((1u << 20) + 1));
    wgml_tensor *small = th_poisoned(WGML_F32, TH_SHAPE(1025));   /* 257 vec4 */
    for (int k = 0; k < 6; k++) TH_EXPECT(wgml_tensor_zero(t[k]), WGML_OK);
    TH_EXPECT(wgml_context_sync(c), WGML_OK);
    uint32_t d0 = c->batch_dispatches;
    for (int i = 0; i < 60; i++) TH_EXPECT(wgml_add(th_eng, t[0], t[1], t[0]), WGML_OK);
    TH_CHECK(wgml__fusion_pending(c).nops == 60 && wgml__fusion_pending(c).nslots == 2 && c->batch_dispatches == d0, "60 adds: %u ops pending over %u slots, "
             "%u dispatches", wgml__fusion_pending(c).nops, wgml__fusion_pending(c).nslots, c->batch_dispatches - d0);
    TH_EXPECT(wgml_add(th_eng, t[0], t[1], t[0]), WGML_OK);   /* the 61st starts a group */
    TH_CHECK(wgml__fusion_pending(c).nops == 1 && c->batch_dispatches == d0 + 1, "the 61st add: %u pending, %u dispatches", wgml__fusion_pending(c).nops,
             c->batch_dispatches - d0);
    TH_EXPECT(wgml_mul(th_eng, odd[0], odd[1], odd[0]), WGML_OK);
    TH_CHECK(wgml__fusion_pending(c).nops == 2 && wgml__fusion_pending(c).nslots == 4, "a fourth buffer: %u pending over %u slots", wgml__fusion_pending(c).nops, wgml__fusion_pending(c).nslots);
    TH_EXPECT(wgml_sub(th_eng, t[4], t[0], t[0]), WGML_OK);   /* a fifth */
    TH_CHECK(wgml__fusion_pending(c).nops == 1 && wgml__fusion_pending(c).nslots == 2 && c->batch_dispatches == d0 + 2, "a fifth buffer: %u pending over %u "
             "slots, %u dispatches", wgml__fusion_pending(c).nops, wgml__fusion_pending(c).nslots, c->batch_dispatches - d0);
    TH_EXPECT(wgml_add(th_eng, big, big, big), WGML_OK);   /* too large: recorded at once, after the group */
    TH_CHECK(wgml__fusion_pending(c).nops == 0 && c->batch_dispatches == d0 + 4, "2^20 + 1 elements: %u pending, %u dispatches", wgml__fusion_pending(c).nops,
             c->batch_dispatches - d0);
    TH_EXPECT(wgml_add(th_eng, t[0], t[1], t[0]), WGML_OK);
    TH_EXPECT(wgml_add(th_eng, small, small, small), WGML_OK);
    TH_CHECK(wgml__fusion_pending(c).nops == 1 && wgml__fusion_pending(c).n4 == 257 && c->batch_dispatches == d0 + 5, "another vec4 count: %u pending (n4 %u), "
             "%u dispatches", wgml__fusion_pending(c).nops, wgml__fusion_pending(c).n4, c->batch_dispatches - d0);
    wgml_engine *e2;
    TH_EXPECT(wgml_engine_create(c, &e2), WGML_OK);
    TH_EXPECT(wgml_add(e2, small, small, small), WGML_OK);
    TH_CHECK(wgml__fusion_pending(c).nops == 1 && wgml__fusion_pending(c).engine == e2 && c->batch_dispatches == d0 + 6, "another engine: %u pending, %u "
             "dispatches", wgml__fusion_pending(c).nops, c->batch_dispatches - d0);
    wgml_engine_destroy(e2);
    TH_CHECK(wgml__fusion_pending(c).nops == 0, "the engine's group outlived it");
    TH_EXPECT(wgml_context_sync(c), WGML_OK);
    float got[4];
    TH_EXPECT(wgml_tensor_read(t[0], 0, got, sizeof got), WGML_OK);   /* 61 adds of a zero, then t[4] - t[0] */
    TH_CHECK(got[0] == 0 && got[3] == 0, "t[0] = %g %g", got[0], got[3]);
    wgml_tensor_release(small);

    /* WGML_FUSE=0 and submit_every_op: every call is its own dispatch */
    for (int mode = 0; mode < 2; mode++) {
        if (mode == 0) setenv("WGML_FUSE", "0", 1);
        wgml_context *p = NULL;
        wgml_engine *pe = NULL;
        TH_EXPECT(wgml_context_create(&(wgml_context_desc){ .submit_every_op = mode == 1 }, &p), WGML_OK);
        unsetenv("WGML_FUSE");
        if (p) TH_EXPECT(wgml_engine_create(p, &pe), WGML_OK);
        if (pe) {
            wgml_tensor *x = NULL;
            TH_EXPECT(wgml_tensor_create(p, WGML_F32, 1, (size_t[]){ 64 }, &x), WGML_OK);
            uint64_t s0 = p->submits;
            uint32_t b0 = p->batch_dispatches;
            for (int i = 0; i < 3; i++) TH_EXPECT(wgml_add(pe, x, x, x), WGML_OK);
            TH_CHECK(wgml__fusion_pending(p).nops == 0 && (mode == 0 ? p->batch_dispatches == b0 + 3 : p->submits == s0 + 3),
                     "%s: %u pending, %u dispatches, %llu submits", mode == 0 ? "WGML_FUSE=0" : "submit_every_op", wgml__fusion_pending(p).nops,
                     p->batch_dispatches - b0, (unsigned long long)(p->submits - s0));
            wgml_tensor_release(x);
        }
        wgml_engine_destroy(pe);
        wgml_context_destroy(p);
    }
    for (int k = 0; k < 6; k++) wgml_tensor_release(t[k]);
    wgml_tensor_release(odd[0]);
    wgml_tensor_release(odd[1]);
    wgml_tensor_release(big);
}

/* A transport of two processes that are the same one: the other's gradients are this
   one's, so each sum doubles what it is given (exact in floating point). It counts the
   all-reduces started and waited for, and fails the fail_at-th start (0: none). */
typedef struct fake_state { int started, waited, fail_at; } fake_state;
static fake_state fake;
static int fake_token;
static wgml_status fake_iallreduce(wgml_comm *c, float *buf, size_t n, wgml__comm_req **req)
{
    (void)c;
    if (++fake.started == fake.fail_at) return wgml__fail(NULL, WGML_ERROR_TIMEOUT, "gradient all-reduce: a fake timeout");
    for (size_t i = 0; i < n; i++) buf[i] *= 2;
    *req = (wgml__comm_req *)&fake_token;
    return WGML_OK;
}
static wgml_status fake_test(wgml_comm *c, wgml__comm_req *req, bool *done)
{
    (void)c; (void)req;
    *done = true;
    return WGML_OK;
}
static wgml_status fake_wait(wgml_comm *c, wgml__comm_req *req)
{
    (void)c; (void)req;
    fake.waited++;
    return WGML_OK;
}
static wgml_status fake_allreduce_f64(wgml_comm *c, double *buf, size_t n)
{
    (void)c;
    for (size_t i = 0; i < n; i++) buf[i] *= 2;
    return WGML_OK;
}
static void fake_finish(wgml_comm *c, bool failed) { (void)c; (void)failed; }
static void fake_abort(wgml_comm *c, int code) { (void)c; (void)code; }
static const wgml__transport fake_transport = { "fake", fake_iallreduce, fake_test, fake_wait, fake_allreduce_f64,
                                                fake_finish, fake_abort };

/* The n trained gradients of t (adapter's with lora) read back, one malloc'd array each. */
static float **read_grads(const wgml_trainer *t, size_t n, bool lora)
{
    float **g = malloc(n * sizeof *g);
    for (size_t i = 0; i < n; i++) g[i] = th_read(lora ? wgml_trainer_lora_grad(t, i) : wgml_trainer_grad(t, i));
    return g;
}

/* got == 2 * want for every element of the n gradients, bit for bit */
static void check_doubled(const char *what, wgml_trainer *t, float **want, size_t n, bool lora)
{
    size_t bad = 0, total = 0;
    for (size_t i = 0; i < n; i++) {
        wgml_tensor *g = lora ? wgml_trainer_lora_grad(t, i) : wgml_trainer_grad(t, i);
        float *got = th_read(g);
        for (size_t j = 0; j < wgml_tensor_numel(g); j++, total++) bad += memcmp(&got[j], &(float){ 2 * want[i][j] }, 4) != 0;
        free(got);
    }
    TH_CHECK(bad == 0, "%s: %zu of %zu summed gradient elements are not twice this process's", what, bad, total);
}

/* The gradients' sum (src/comm_grads.c) in buckets far smaller than the tensors and not a
   multiple of any (one tensor spans many buckets, one bucket holds parts of several), so
   more buckets than staging buffers: summed with the step's last micro-batch marked, its
   all-reduces start during that micro-batch's backward (all but the last few are forced
   by the staging buffers' reuse) and every element is summed once; unmarked, they start
   in the step; the same for a LoRA adapter's gradients; a failed all-reduce, in the
   marked backward or in the step, makes the step fail, apply nothing and mark the
   communicator failed. */
static void test_gradient_exchange(void)
{
    wgml_model_config cfg = { .vocab_size = 64, .hidden_size = 32, .intermediate_size = 64, .num_hidden_layers = 2,
                              .num_attention_heads = 4, .num_key_value_heads = 2, .max_position_embeddings = 64,
                              .rms_norm_eps = 1e-5, .rope_theta = 10000, .bos_token_id = -1 };
    wgml_model *m = NULL;
    TH_EXPECT(wgml_model_create(th_eng, &cfg, &m), WGML_OK);
    if (!m) return;
    TH_EXPECT(wgml_model_init_random(m, 7, 0.02f), WGML_OK);
    enum { B = 2, T = 8 };
    uint32_t ids[2][B * T], tg[2][B * T];
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < B * T; i++) {
            ids[k][i] = th_rand_u32() % 64;
            tg[k][i] = th_rand_u32() % 64;
        }
    wgml_comm *c = calloc(1, sizeof *c);
    *c = (wgml_comm){ .rank = 0, .size = 2, .timeout_ms = 1000, .bucket_bytes = 1000, .tr = &fake_transport };
    for (int lora = 0; lora < 2; lora++) {
        wgml_lora *ad = NULL;
        if (lora) TH_EXPECT(wgml_lora_create(m, &(wgml_lora_desc){ .rank = 4 }, 3, &ad), WGML_OK);
        size_t n = lora ? wgml_lora_param_count(ad) : wgml_model_param_count(m), total = 0;
        for (size_t i = 0; i < n; i++) total += wgml_tensor_numel(lora ? wgml_lora_param(ad, i, NULL) : wgml_model_param(m, i, NULL));
        int nbuckets = (int)((total * 4 + 999) / 1000);
        wgml_trainer_desc d = { .batch = B, .seq_len = T, .clip_norm = -1, .lora = ad };
        wgml_trainer *alone = NULL, *t = NULL;
        TH_EXPECT(wgml_trainer_create(m, &d, &alone), WGML_OK);
        d.comm = c;
        TH_EXPECT(wgml_trainer_create(m, &d, &t), WGML_OK);
        if (!alone || !t) return;
        TH_EXPECT(wgml_trainer_accumulate(alone, ids[0], tg[0], 0.5f, NULL), WGML_OK);
        TH_EXPECT(wgml_trainer_accumulate(alone, ids[1], tg[1], 0.5f, NULL), WGML_OK);
        float **want = read_grads(alone, n, lora);
        for (int marked = 1; marked >= 0; marked--) {
            const char *what = lora ? (marked ? "LoRA, marked" : "LoRA, unmarked") : marked ? "marked" : "unmarked";
            fake = (fake_state){ 0 };
            TH_EXPECT(wgml_trainer_accumulate(t, ids[0], tg[0], 0.5f, NULL), WGML_OK);
            TH_CHECK(fake.started == 0, "%s: %d all-reduces started before the last micro-batch", what, fake.started);
            if (marked) TH_EXPECT(wgml_trainer_mark_last(t), WGML_OK);
            TH_EXPECT(wgml_trainer_accumulate(t, ids[1], tg[1], 0.5f, NULL), WGML_OK);
            int early = fake.started;
            TH_CHECK(marked ? early >= nbuckets - 4 && early <= nbuckets : early == 0,
                     "%s: %d of %d all-reduces started in the last micro-batch's backward", what, early, nbuckets);
            TH_EXPECT(wgml_trainer_step(t, 0.0f, NULL), WGML_OK);   /* lr 0: the weights stay */
            TH_CHECK(fake.started == nbuckets && fake.waited == nbuckets, "%s: %d all-reduces started, %d waited for, of %d",
                     what, fake.started, fake.waited, nbuckets);
            check_doubled(what, t, want, n, lora);
        }
        /* failures: the 3rd all-reduce in the marked backward, the 2nd in an unmarked step */
        wgml_tensor *p0 = lora ? wgml_lora_param(ad, 1, NULL) : wgml_model_param(m, 1, NULL);
        float *before = th_read(p0);
        for (int marked = 1; marked >= 0; marked--) {
            fake = (fake_state){ .fail_at = marked ? 3 : 2 };
            uint32_t steps = wgml_trainer_steps(t);
            if (marked) TH_EXPECT(wgml_trainer_mark_last(t), WGML_OK);
            TH_EXPECT(wgml_trainer_accumulate(t, ids[0], tg[0], 1.0f, NULL), marked ? WGML_ERROR_TIMEOUT : WGML_OK);
            if (marked)   /* the step comes next */
                TH_EXPECT_ERR(wgml_trainer_accumulate(t, ids[0], tg[0], 1.0f, NULL), WGML_ERROR_INVALID_ARGUMENT,
                              "wgml_trainer_step");
            TH_EXPECT_ERR(wgml_trainer_step(t, 1e-2f, NULL), WGML_ERROR_TIMEOUT, "fake timeout");
            TH_CHECK(c->failed, "%s failure: the communicator is not marked failed", marked ? "marked" : "unmarked");
            TH_CHECK(wgml_trainer_steps(t) == steps, "a failed step counted");
            float *after = th_read(p0);
            TH_CHECK(memcmp(before, after, wgml_tensor_numel(p0) * sizeof(float)) == 0, "a failed step changed the weights");
            free(after);
            TH_EXPECT_ERR(wgml_trainer_step(t, 1e-2f, NULL), WGML_ERROR_INVALID_ARGUMENT, "no gradient");   /* dropped */
            c->failed = false;
        }
        free(before);
        fake = (fake_state){ 0 };
        TH_EXPECT(wgml_trainer_mark_last(t), WGML_OK);
        TH_EXPECT(wgml_trainer_accumulate(t, ids[0], tg[0], 1.0f, NULL), WGML_OK);
        TH_EXPECT(wgml_trainer_step(t, 1e-2f, NULL), WGML_OK);   /* after a failure, steps go on */
        for (size_t i = 0; i < n; i++) free(want[i]);
        free(want);
        wgml_trainer_destroy(alone);
        wgml_trainer_destroy(t);
        TH_CHECK(!c->failed, "a trainer destroyed after its step marked the communicator failed");
        wgml_lora_destroy(ad);
    }
    free(c);
    wgml_model_destroy(m);
}

static const th_case cases[] = {
    { "fusion_groups", test_fusion_groups },
    { "grid_split", test_grid_split },
    { "matmul_split_model", test_matmul_split_model },
    { "two_d_grid_dispatch", test_two_d_grid_dispatch },
    { "device_loss", test_device_loss },
    { "out_of_memory", test_out_of_memory },
    { "gradient_exchange", test_gradient_exchange },
};
TH_MAIN(cases)
