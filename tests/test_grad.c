/* gradient_norm_squared, clip_grad_by_norm, gradient_scale, gradient_accumulate,
   global_norm and clip_grad_by_global_norm against the double reference
   (tests/ref/ref_grad.c), and their bad inputs. The element-wise ops on awkward lengths,
   in place and not, are a table of op cases; the norms over lists of tensors (with their
   dispatch counts) are written out by hand. */
#include "harness.h"
#include "ref_grad.h"

#include <stdlib.h>
#include <string.h>

/* One f32 operation per element (correctly rounded, 2^-24 relative); atol for results
   that underflow. */
#define ELEM_RTOL 1e-6
#define ELEM_ATOL 1e-37

/* The global norm: a sum of positive squares in f32 along a fixed tree (32 terms serially
   per thread, 8 tree levels per workgroup, then partials/256 serially and 8 levels more):
   under 60 roundings of 2^-24 relative on the sum, halved by the square root. rtol 1e-5
   leaves a factor of ten. */
#define NORM_RTOL 1e-5

static uint32_t slots_per_dispatch(void)
{
    wgml_adapter_info info;
    wgml_context_info(th_ctx, &info);
    uint32_t room = info.max_storage_buffers_per_stage - 1;
    return room >= 8 ? 8 : room >= 4 ? 4 : 1;
}

/* ---- element-wise: the op case table ------------------------------------------------- */

/* The in-place ops (and gradient_norm_squared in place) run on their case's output tensor,
   into which the input's values are first written from the host. */
enum { SQUARE, SQUARE_IN_PLACE, CLIP, SCALE, ACCUMULATE, ACCUMULATE_SELF };
typedef struct elem_case { int op; float scale; } elem_case;

static wgml_status load_output(const th_run *r)
{
    return wgml_tensor_write(r->t_out[0], 0, r->in[0], r->n_in[0] * sizeof(float));
}

static wgml_status elem_call(const th_run *r)
{
    const elem_case *p = r->c->params;
    wgml_tensor *out = r->t_out[0];
    if (p->op == SQUARE) return wgml_gradient_norm_squared(th_eng, r->t_in[0], out);
    wgml_status s = load_output(r);
    if (s != WGML_OK) return s;
    switch (p->op) {
    case SQUARE_IN_PLACE: return wgml_gradient_norm_squared(th_eng, out, out);
    case CLIP: return wgml_clip_grad_by_norm(th_eng, out, p->scale);
    case SCALE: return wgml_gradient_scale(th_eng, out, p->scale);
    case ACCUMULATE: return wgml_gradient_accumulate(th_eng, out, r->t_in[1]);
    default: return wgml_gradient_accumulate(th_eng, out, out);
    }
}

static void elem_reference(const th_run *r)
{
    const elem_case *p = r->c->params;
    size_t n = r->n_out[0];
    switch (p->op) {
    case SQUARE: case SQUARE_IN_PLACE: ref_square(TH_IN(r, 0), r->ref[0], n); break;
    case CLIP: case SCALE: ref_scale(TH_IN(r, 0), p->scale, r->ref[0], n); break;
    case ACCUMULATE: ref_accumulate(TH_IN(r, 0), TH_IN(r, 1), r->ref[0], n); break;
    default: ref_accumulate(TH_IN(r, 0), TH_IN(r, 0), r->ref[0], n); break;
    }
}

/* One case of op on n elements in [-3, 3]. */
static void run_elem(const elem_case *p, size_t n, const char *name, double atol, double rtol)
{
    th_op_case c = { .nin = p->op == ACCUMULATE ? 2 : 1, .nout = 1, .call = elem_call, .reference = elem_reference,
                     .atol = atol, .rtol = rtol, .params = p,
                     .in = { { .shape = { n }, .lo = -3, .hi = 3 }, { .shape = { n }, .lo = -3, .hi = 3 } },
                     .out = { { .shape = { n } } } };
    snprintf(c.name, sizeof c.name, "%s n=%zu", name, n);
    th_run_case(&c);
}

static void test_norm_squared(void)
{
    static const elem_case ops[2] = { { SQUARE, 0 }, { SQUARE_IN_PLACE, 0 } };
    for (size_t s = 0; s < th_awkward_count; s++) {
        run_elem(&ops[0], th_awkward_sizes[s], "gradient_norm_squared", ELEM_ATOL, ELEM_RTOL);
        run_elem(&ops[1], th_awkward_sizes[s], "gradient_norm_squared in place", ELEM_ATOL, ELEM_RTOL);
    }
}

static void test_scale(void)
{
    static const float scales[] = { 0.37f, 0.0f, -2.5f, 1.0f };
    static const char *const names[2] = { "clip_grad_by_norm", "gradient_scale" };
    for (int o = 0; o < 2; o++)
        for (size_t s = 0; s < th_awkward_count; s++) {
            elem_case p = { o ? SCALE : CLIP, scales[s % 4] };
            char name[64];
            snprintf(name, sizeof name, "%s scale %g", names[o], (double)p.scale);
            run_elem(&p, th_awkward_sizes[s], name, ELEM_ATOL, ELEM_RTOL);
        }
}

static void test_accumulate(void)
{
    static const elem_case ops[2] = { { ACCUMULATE, 0 }, { ACCUMULATE_SELF, 0 } };
    for (size_t s = 0; s < th_awkward_count; s++) {
        /* a + b can cancel: the error is one rounding of the result, plus nothing else */
        run_elem(&ops[0], th_awkward_sizes[s], "gradient_accumulate", ELEM_ATOL, ELEM_RTOL);
        /* accum += accum doubles it, exactly */
        run_elem(&ops[1], th_awkward_sizes[s], "gradient_accumulate(b, b)", 0, 0);
    }
}

/* ---- global norm ------------------------------------------------------------------- */

typedef struct tensor_set {
    size_t count;
    size_t *ns;
    float **host;
    wgml_tensor **t;
} tensor_set;

static tensor_set make_set(size_t count, const size_t *ns, double lo, double hi)
{
    tensor_set s = { .count = count, .ns = malloc(count * sizeof(size_t)), .host = malloc(count * sizeof(float *)),
                     .t = malloc(count * sizeof(wgml_tensor *)) };
    for (size_t i = 0; i < count; i++) {
        s.ns[i] = ns[i];
        s.host[i] = th_random(ns[i], lo, hi);
        s.t[i] = th_tensor(WGML_F32, s.host[i], TH_SHAPE(ns[i]));
    }
    return s;
}

static void free_set(tensor_set *s)
{
    for (size_t i = 0; i < s->count; i++) { free(s->host[i]); wgml_tensor_release(s->t[i]); }
    free(s->ns); free(s->host); free(s->t);
}

static float gpu_norm(tensor_set *s, uint64_t *dispatches)
{
    wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(1));
    uint64_t before = th_commands();
    TH_EXPECT(wgml_global_norm(th_eng, (const wgml_tensor *const *)s->t, s->count, out), WGML_OK);
    if (dispatches) *dispatches = th_commands() - before;
    float v;
    th_read_into(out, &v);
    wgml_tensor_release(out);
    return v;
}

static void check_norm(tensor_set *s, const char *label)
{
    uint64_t used;
    float got = gpu_norm(s, &used);
    double ref = ref_global_norm((const float *const *)s->host, s->ns, s->count);
    th_compare(label, &got, &ref, 1, 0, NORM_RTOL);
    uint32_t k = slots_per_dispatch();
    uint64_t want = (s->count + k - 1) / k + 1;
    TH_CHECK(used == want, "%s: %llu dispatches, expected %llu", label, (unsigned long long)used, (unsigned long long)want);
}

static void test_global_norm_awkward(void)
{
    tensor_set s = make_set(th_awkward_count, th_awkward_sizes, -1, 1);
    check_norm(&s, "global_norm over the awkward sizes");
    free_set(&s);
    for (size_t i = 0; i < th_awkward_count; i++) {   /* each alone */
        tensor_set one = make_set(1, &th_awkward_sizes[i], -5, 5);
        char label[64];
        snprintf(label, sizeof label, "global_norm of one tensor n=%zu", th_awkward_sizes[i]);
        check_norm(&one, label);
        free_set(&one);
    }
}

/* Many small tensors, as a model's parameter list: 37 of sizes 1..37 (every tail of the
   slot packing), and one tensor repeated in the list (it counts twice). */
static void test_global_norm_many(void)
{
    size_t ns[37];
    for (size_t i = 0; i < 37; i++) ns[i] = i + 1;
    tensor_set s = make_set(37, ns, -2, 2);
    check_norm(&s, "global_norm over 37 tensors");
    for (size_t c = 1; c <= 12; c++) {   /* every count up to past two full dispatches */
        tensor_set sub = { .count = c, .ns = s.ns, .host = s.host, .t = s.t };
        char label[64];
        snprintf(label, sizeof label, "global_norm over the first %zu tensors", c);
        check_norm(&sub, label);
    }
    wgml_tensor *rep[3] = { s.t[5], s.t[5], s.t[9] };
    const float *rep_host[3] = { s.host[5], s.host[5], s.host[9] };
    size_t rep_n[3] = { 6, 6, 10 };
    tensor_set r = { .count = 3, .ns = rep_n, .host = (float **)rep_host, .t = rep };
    check_norm(&r, "global_norm with a tensor listed twice");
    free_set(&s);
}

/* Padding lanes may hold anything: an AdamW step with eps = 0 writes 0/0 into the padding
   of a 5-element weight; the norm must still be that of the 5 elements. */
static void test_global_norm_ignores_padding(void)
{
    float w[5] = { 1, -2, 3, -4, 5 }, z[5] = { 0 }, g[5] = { 0.5f, 0.5f, 0.5f, 0.5f, 0.5f };
    wgml_tensor *tw = th_tensor(WGML_F32, w, TH_SHAPE(5)), *tg = th_tensor(WGML_F32, g, TH_SHAPE(5));
    wgml_tensor *tm = th_tensor(WGML_F32, z, TH_SHAPE(5)), *tv = th_tensor(WGML_F32, z, TH_SHAPE(5));
    wgml_adam_params p = { .lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 0, .t = 1 };
    TH_EXPECT(wgml_adamw_update(th_eng, tw, tg, tm, tv, &p), WGML_OK);
    float wh[5];
    th_read_into(tw, wh);
    size_t n5 = 5;
    const float *hp = wh;
    double ref = ref_global_norm(&hp, &n5, 1);
    wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(1));
    const wgml_tensor *list[1] = { tw };
    TH_EXPECT(wgml_global_norm(th_eng, list, 1, out), WGML_OK);
    float got;
    th_read_into(out, &got);
    th_compare("global_norm of a tensor with NaN padding", &got, &ref, 1, 0, NORM_RTOL);
    wgml_tensor_release(tw); wgml_tensor_release(tg); wgml_tensor_release(tm); wgml_tensor_release(tv);
    wgml_tensor_release(out);
}

/* Same inputs, same bits, run after run. */
static void test_global_norm_deterministic(void)
{
    size_t ns[5] = { 1u << 20, 4097, 77, 1, 300000 };
    tensor_set s = make_set(5, ns, -1, 1);
    float a = gpu_norm(&s, NULL), b = gpu_norm(&s, NULL);
    TH_CHECK(memcmp(&a, &b, 4) == 0, "two runs of global_norm differ: %.9g vs %.9g", (double)a, (double)b);
    free_set(&s);
}

/* ---- clipping by the global norm ------------------------------------------------------ */

/* The norm computed on the GPU feeds the clip on the GPU: the pair records without any
   submit or wait. Each gradient is scaled by min(1, max_norm / (norm + 1e-6)), checked
   with the norm the GPU computed (so this test isolates the clip). */
static void check_clip(size_t count, float max_norm_factor, const char *label)
{
    size_t *ns = malloc(count * sizeof *ns);
    for (size_t i = 0; i < count; i++) ns[i] = th_awkward_sizes[i % (th_awkward_count - 1)] + i;
    tensor_set s = make_set(count, ns, -1, 1);
    double ref_norm = ref_global_norm((const float *const *)s.host, s.ns, count);
    float max_norm = (float)(ref_norm * max_norm_factor);
    wgml_tensor *norm = th_poisoned(WGML_F32, TH_SHAPE(1));
    wgml_context_stats st0, st1;
    wgml_context_stats_get(th_ctx, &st0);
    TH_EXPECT(wgml_global_norm(th_eng, (const wgml_tensor *const *)s.t, count, norm), WGML_OK);
    uint64_t before = th_commands();
    TH_EXPECT(wgml_clip_grad_by_global_norm(th_eng, s.t, count, norm, max_norm), WGML_OK);
    uint64_t used = th_commands() - before;
    wgml_context_stats_get(th_ctx, &st1);
    TH_CHECK(st1.submits == st0.submits, "%s: norm and clip submitted %llu times (a host round trip)", label,
             (unsigned long long)(st1.submits - st0.submits));
    uint32_t k = slots_per_dispatch(), want = 0;
    for (size_t left = count; left;) {   /* widest of 8, 4, 2, 1 that the rest fills */
        uint32_t w = left >= 8 && k >= 8 ? 8 : left >= 4 && k >= 4 ? 4 : left >= 2 && k >= 2 ? 2 : 1;
        left -= w;
        want++;
    }
    TH_CHECK(used == want, "%s: clip used %llu dispatches, expected %u", label, (unsigned long long)used, want);
    float gn;
    th_read_into(norm, &gn);
    th_compare("the norm before clipping", &gn, &ref_norm, 1, 0, NORM_RTOL);
    double f = ref_clip_factor(gn, max_norm);
    for (size_t i = 0; i < count; i++) {
        double *ref = th_alloc_d(ns[i]);
        ref_scale(s.host[i], f, ref, ns[i]);
        float *got = th_read(s.t[i]);
        char what[96];
        snprintf(what, sizeof what, "%s: grads[%zu] (n=%zu, factor %.6g)", label, i, ns[i], f);
        /* the factor is two f32 operations on the norm, the product one more */
        th_compare(what, got, ref, ns[i], ELEM_ATOL, 4e-7 * 3);
        if (f == 1) TH_CHECK(memcmp(got, s.host[i], ns[i] * 4) == 0, "%s: grads[%zu] changed with factor 1", label, i);
        free(ref); free(got);
    }
    wgml_tensor_release(norm);
    free_set(&s);
    free(ns);
}

static void test_clip_global(void)
{
    check_clip(1, 0.5f, "one tensor, clipped");
    check_clip(3, 0.25f, "3 tensors, clipped");
    check_clip(7, 2.0f, "7 tensors, under the limit");
    check_clip(15, 0.01f, "15 tensors, clipped hard");
    check_clip(9, 1e-3f, "9 tensors, clipped");
}

/* max_norm = 0 zeroes the gradients (as torch does). */
static void test_clip_max_norm_zero(void)
{
    size_t n = 65;
    float *x = th_random(n, -1, 1);
    wgml_tensor *g = th_tensor(WGML_F32, x, TH_SHAPE(n)), *norm = th_poisoned(WGML_F32, TH_SHAPE(1));
    TH_EXPECT(wgml_global_norm(th_eng, (const wgml_tensor *const[]){ g }, 1, norm), WGML_OK);
    TH_EXPECT(wgml_clip_grad_by_global_norm(th_eng, (wgml_tensor *const[]){ g }, 1, norm, 0.0f), WGML_OK);
    float *got = th_read(g);
    bool zero = true;
    for (size_t i = 0; i < n; i++) zero &= got[i] == 0.0f;
    TH_CHECK(zero, "max_norm 0 did not zero the gradient");
    free(x); free(got);
    wgml_tensor_release(g); wgml_tensor_release(norm);
}

/* ---- bad inputs --------------------------------------------------------------------- */

static void test_bad_inputs(void)
{
    float x[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    wgml_tensor *a = th_tensor(WGML_F32, x, TH_SHAPE(8)), *b = th_tensor(WGML_F32, x, TH_SHAPE(8));
    wgml_tensor *b7 = th_tensor(WGML_F32, x, TH_SHAPE(7)), *u = th_tensor(WGML_U32, x, TH_SHAPE(8));
    wgml_tensor *norm = th_poisoned(WGML_F32, TH_SHAPE(1)), *out = th_poisoned(WGML_F32, TH_SHAPE(8));
    wgml_context *other;
    TH_EXPECT(wgml_context_create(NULL, &other), WGML_OK);
    wgml_tensor *foreign;
    TH_EXPECT(wgml_tensor_from_data(other, WGML_F32, 1, (size_t[]){ 8 }, x, &foreign), WGML_OK);
    uint64_t before = th_commands();

    TH_EXPECT_ERR(wgml_gradient_norm_squared(NULL, a, out), WGML_ERROR_INVALID_ARGUMENT, "engine is NULL");
    TH_EXPECT_ERR(wgml_gradient_norm_squared(th_eng, NULL, out), WGML_ERROR_INVALID_ARGUMENT, "input is NULL");
    TH_EXPECT_ERR(wgml_gradient_norm_squared(th_eng, a, NULL), WGML_ERROR_INVALID_ARGUMENT, "out is NULL");
    TH_EXPECT_ERR(wgml_gradient_norm_squared(th_eng, a, b7), WGML_ERROR_SHAPE, "out has 7 elements");
    TH_EXPECT_ERR(wgml_gradient_norm_squared(th_eng, u, out), WGML_ERROR_DTYPE, "input is u32");
    TH_EXPECT_ERR(wgml_gradient_norm_squared(th_eng, foreign, out), WGML_ERROR_CONTEXT, "input belongs to another context");
    TH_EXPECT_ERR(wgml_clip_grad_by_norm(th_eng, NULL, 0.5f), WGML_ERROR_INVALID_ARGUMENT, "grad is NULL");
    TH_EXPECT_ERR(wgml_clip_grad_by_norm(th_eng, u, 0.5f), WGML_ERROR_DTYPE, "grad is u32");
    TH_EXPECT_ERR(wgml_clip_grad_by_norm(th_eng, a, NAN), WGML_ERROR_INVALID_ARGUMENT, "scale is nan");
    TH_EXPECT_ERR(wgml_gradient_scale(NULL, a, 0.5f), WGML_ERROR_INVALID_ARGUMENT, "engine is NULL");
    TH_EXPECT_ERR(wgml_gradient_scale(th_eng, a, -INFINITY), WGML_ERROR_INVALID_ARGUMENT, "scale is -inf");
    TH_EXPECT_ERR(wgml_gradient_scale(th_eng, foreign, 2), WGML_ERROR_CONTEXT, "grad belongs to another context");
    TH_EXPECT_ERR(wgml_gradient_accumulate(th_eng, NULL, b), WGML_ERROR_INVALID_ARGUMENT, "accum_grad is NULL");
    TH_EXPECT_ERR(wgml_gradient_accumulate(th_eng, a, NULL), WGML_ERROR_INVALID_ARGUMENT, "new_grad is NULL");
    TH_EXPECT_ERR(wgml_gradient_accumulate(th_eng, a, b7), WGML_ERROR_SHAPE, "new_grad has 7 elements");
    TH_EXPECT_ERR(wgml_gradient_accumulate(th_eng, a, u), WGML_ERROR_DTYPE, "new_grad is u32");

    const wgml_tensor *list2[2] = { a, b }, *list_null[2] = { a, NULL }, *list_u[2] = { a, u }, *list_f[1] = { foreign };
    const wgml_tensor *list_norm[2] = { a, norm };
    TH_EXPECT_ERR(wgml_global_norm(NULL, list2, 2, norm), WGML_ERROR_INVALID_ARGUMENT, "engine is NULL");
    TH_EXPECT_ERR(wgml_global_norm(th_eng, NULL, 2, norm), WGML_ERROR_INVALID_ARGUMENT, "tensors is NULL");
    TH_EXPECT_ERR(wgml_global_norm(th_eng, list2, 0, norm), WGML_ERROR_INVALID_ARGUMENT, "count is 0");
    TH_EXPECT_ERR(wgml_global_norm(th_eng, list_null, 2, norm), WGML_ERROR_INVALID_ARGUMENT, "tensors[1] is NULL");
    TH_EXPECT_ERR(wgml_global_norm(th_eng, list_u, 2, norm), WGML_ERROR_DTYPE, "tensors[1] is u32");
    TH_EXPECT_ERR(wgml_global_norm(th_eng, list_f, 1, norm), WGML_ERROR_CONTEXT, "tensors[0] belongs to another context");
    TH_EXPECT_ERR(wgml_global_norm(th_eng, list2, 2, NULL), WGML_ERROR_INVALID_ARGUMENT, "norm_out is NULL");
    TH_EXPECT_ERR(wgml_global_norm(th_eng, list2, 2, u), WGML_ERROR_DTYPE, "norm_out is u32");
    TH_EXPECT_ERR(wgml_global_norm(th_eng, list_norm, 2, norm), WGML_ERROR_ALIAS,
                  "norm_out must not be the same tensor as tensors[1]");

    wgml_tensor *g2[2] = { a, b }, *g_dup[3] = { a, b, a }, *g_null[2] = { NULL, b }, *g_norm[2] = { a, norm };
    TH_EXPECT_ERR(wgml_clip_grad_by_global_norm(NULL, g2, 2, norm, 1), WGML_ERROR_INVALID_ARGUMENT, "engine is NULL");
    TH_EXPECT_ERR(wgml_clip_grad_by_global_norm(th_eng, NULL, 2, norm, 1), WGML_ERROR_INVALID_ARGUMENT, "grads is NULL");
    TH_EXPECT_ERR(wgml_clip_grad_by_global_norm(th_eng, g2, 0, norm, 1), WGML_ERROR_INVALID_ARGUMENT, "count is 0");
    TH_EXPECT_ERR(wgml_clip_grad_by_global_norm(th_eng, g_null, 2, norm, 1), WGML_ERROR_INVALID_ARGUMENT, "grads[0] is NULL");
    TH_EXPECT_ERR(wgml_clip_grad_by_global_norm(th_eng, g2, 2, NULL, 1), WGML_ERROR_INVALID_ARGUMENT, "norm is NULL");
    TH_EXPECT_ERR(wgml_clip_grad_by_global_norm(th_eng, g2, 2, u, 1), WGML_ERROR_DTYPE, "norm is u32");
    TH_EXPECT_ERR(wgml_clip_grad_by_global_norm(th_eng, g2, 2, norm, NAN), WGML_ERROR_INVALID_ARGUMENT, "max_norm is nan");
    TH_EXPECT_ERR(wgml_clip_grad_by_global_norm(th_eng, g2, 2, norm, -1), WGML_ERROR_INVALID_ARGUMENT, "max_norm is -1");
    TH_EXPECT_ERR(wgml_clip_grad_by_global_norm(th_eng, g_dup, 3, norm, 1), WGML_ERROR_ALIAS,
                  "grads[2] must not be the same tensor as grads[0]");
    TH_EXPECT_ERR(wgml_clip_grad_by_global_norm(th_eng, g_norm, 2, norm, 1), WGML_ERROR_ALIAS,
                  "norm must not be the same tensor as grads[1]");
    TH_CHECK(th_commands() == before, "rejected calls recorded %llu commands", (unsigned long long)(th_commands() - before));
    float got[8];
    th_read_into(a, got);
    TH_CHECK(memcmp(got, x, sizeof x) == 0, "a rejected call changed a");
    uint32_t bits[8];
    th_read_into(out, bits);
    bool poisoned = true;
    for (int i = 0; i < 8; i++) poisoned &= bits[i] == 0xFFFFFFFFu;
    th_read_into(norm, bits);
    poisoned &= bits[0] == 0xFFFFFFFFu;
    TH_CHECK(poisoned, "a rejected call wrote an output");
    wgml_tensor_release(foreign);
    wgml_context_destroy(other);
    wgml_tensor_release(a); wgml_tensor_release(b); wgml_tensor_release(b7); wgml_tensor_release(u);
    wgml_tensor_release(norm); wgml_tensor_release(out);
}

static const th_case cases[] = {
    { "norm_squared", test_norm_squared },
    { "scale", test_scale },
    { "accumulate", test_accumulate },
    { "global_norm_awkward", test_global_norm_awkward },
    { "global_norm_many", test_global_norm_many },
    { "global_norm_ignores_padding", test_global_norm_ignores_padding },
    { "global_norm_deterministic", test_global_norm_deterministic },
    { "clip_global", test_clip_global },
    { "clip_max_norm_zero", test_clip_max_norm_zero },
    { "bad_inputs", test_bad_inputs },
};
TH_MAIN(cases)
