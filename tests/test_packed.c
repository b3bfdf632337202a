/* Packed weights (src/packed.c, src/ops/packed.c): every dtype's unpacking bit for bit
   against tests/ref/ref_packed.c; wgml_matmul_bt (a @ W^T) and wgml_matmul (a @ W) with
   a packed b against a double-precision product of the unpacked W, on both kernels
   (M = 1..8 and beyond), awkward shapes (odd rows, a short last affine group, 16-bit rows
   of odd length), accumulation; the embedding lookup; and every bad input. Random bytes
   fill each layout, its f16 scales drawn finite. */
#include "harness.h"
#include "ref_packed.h"
#include "ref_quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct fmt_case {
    wgml_dtype dtype;
    uint32_t rows, cols;
    uint32_t bits, group;
    wgml_dtype scale_dtype;
} fmt_case;

static const fmt_case formats[] = {
    { WGML_F16, 37, 67, 0, 0, 0 },
    { WGML_BF16, 19, 130, 0, 0, 0 },
    { WGML_Q8_0, 37, 96, 0, 0, 0 },
    { WGML_Q4_0, 21, 160, 0, 0, 0 },
    { WGML_Q4_K, 13, 512, 0, 0, 0 },
    { WGML_Q6_K, 11, 256, 0, 0, 0 },
    { WGML_AFFINE, 23, 70, 4, 32, WGML_F16 },    /* the last group of a row has 6 values */
    { WGML_AFFINE, 17, 200, 8, 64, WGML_BF16 },
    { WGML_AFFINE, 9, 256, 4, 128, WGML_F32 },
    { WGML_AFFINE, 5, 96, 8, 32, WGML_F16 },
};
#define NFORMATS (sizeof formats / sizeof formats[0])

/* A random finite f16 of magnitude [lo, hi), either sign. */
static uint16_t rand_f16(double lo, double hi)
{
    double v = th_uniform(lo, hi) * (th_rand_u32() & 1 ? -1 : 1);
    return ref_f32_to_f16((float)v);
}
static void put16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }

/* A packed weight of case f with random contents: the tensor, its bytes and its ref. */
typedef struct packed_w {
    wgml_tensor *t;
    uint8_t *bytes;
    size_t nbytes;
    ref_packed ref;
    float *w;   /* unpacked by the reference */
    float *wf;  /* the same with a fused multiply-add (equal to w but for f32 affine scales) */
} packed_w;

static packed_w make_packed(const fmt_case *f)
{
    packed_w p = { 0 };
    ref_packed *r = &p.ref;
    r->rows = f->rows;
    r->cols = f->cols;
    if (f->dtype == WGML_F16 || f->dtype == WGML_BF16) {
        r->format = f->dtype == WGML_F16 ? REF_F16 : REF_BF16;
        p.nbytes = (size_t)f->rows * f->cols * 2;
        p.bytes = malloc(p.nbytes);
        for (size_t i = 0; i < (size_t)f->rows * f->cols; i++) {
            float v = (float)th_uniform(-1, 1);
            put16(p.bytes + 2 * i, f->dtype == WGML_F16 ? ref_f32_to_f16(v) : ref_f32_to_bf16(v));
        }
        p.t = th_tensor(f->dtype, p.bytes, TH_SHAPE(f->rows, f->cols));
    } else {
        wgml_packed_desc d = { .dtype = f->dtype, .rows = f->rows, .cols = f->cols, .bits = f->bits, .group_size = f->group,
                               .scale_dtype = f->scale_dtype };
        wgml_packed_layout lay;
        TH_EXPECT(wgml_packed_layout_of(&d, &lay), WGML_OK);
        p.nbytes = lay.bytes;
        p.bytes = malloc(p.nbytes);
        for (size_t i = 0; i < p.nbytes; i++) p.bytes[i] = (uint8_t)th_rand_u32();
        r->row_bytes = lay.row_bytes;
        r->scales_offset = lay.scales_offset;
        r->biases_offset = lay.biases_offset;
        size_t blocks = 0, bsize = 0;
        switch (f->dtype) {
        case WGML_Q8_0: r->format = REF_Q8_0; bsize = 34; break;
        case WGML_Q4_0: r->format = REF_Q4_0; bsize = 18; break;
        case WGML_Q4_K: r->format = REF_Q4_K; bsize = 144; break;
        case WGML_Q6_K: r->format = REF_Q6_K; bsize = 210; break;
        default: r->format = REF_AFFINE; break;
        }
        if (bsize) blocks = p.nbytes / bsize;
        for (size_t b = 0; b < blocks; b++) {   /* finite f16 scales (and minimums) */
            uint8_t *blk = p.bytes + b * bsize;
            if (f->dtype == WGML_Q6_K) put16(blk + 208, rand_f16(1e-3, 1e-2));
            else put16(blk, rand_f16(1e-3, 1e-1));
            if (f->dtype == WGML_Q4_K) put16(blk + 2, rand_f16(1e-3, 1e-1));
        }
        if (f->dtype == WGML_AFFINE) {
            r->bits = f->bits;
            r->group_size = f->group;
            r->scale_bytes = f->scale_dtype == WGML_F32 ? 4 : f->scale_dtype == WGML_F16 ? 2 : -2;
            size_t n = (size_t)f->rows * ((f->cols + f->group - 1) / f->group);
            for (int part = 0; part < 2; part++) {
                uint8_t *at = p.bytes + (part ? lay.biases_offset : lay.scales_offset);
                for (size_t g = 0; g < n; g++) {
                    float v = (float)(th_uniform(1e-3, 0.1) * (th_rand_u32() & 1 ? -1 : 1));
                    if (f->scale_dtype == WGML_F32) memcpy(at + 4 * g, &v, 4);
                    else put16(at + 2 * g, f->scale_dtype == WGML_F16 ? ref_f32_to_f16(v) : ref_f32_to_bf16(v));
                }
            }
        }
        TH_EXPECT(wgml_tensor_create_packed(th_ctx, &d, &p.t), WGML_OK);
        TH_EXPECT(wgml_tensor_write(p.t, 0, p.bytes, p.nbytes), WGML_OK);
    }
    p.w = th_alloc_f((size_t)f->rows * f->cols);
    ref_packed_unpack(r, p.bytes, p.w);
    p.wf = th_alloc_f((size_t)f->rows * f->cols);
    r->fused = 1;
    ref_packed_unpack(r, p.bytes, p.wf);
    return p;
}

static void free_packed(packed_w *p)
{
    wgml_tensor_release(p->t);
    free(p->bytes);
    free(p->w);
    free(p->wf);
}

static const char *fmt_name(const fmt_case *f, char *buf, size_t size)
{
    snprintf(buf, size, "%s [%u, %u]%s", wgml_dtype_name(f->dtype), f->rows, f->cols, f->dtype == WGML_AFFINE ? " affine" : "");
    if (f->dtype == WGML_AFFINE)
        snprintf(buf, size, "affine %u-bit group %u %s scales [%u, %u]", f->bits, f->group, wgml_dtype_name(f->scale_dtype),
                 f->rows, f->cols);
    return buf;
}

/* wgml_unpack and the reference agree bit for bit (f32 affine scales: with one of the
   fused and unfused results, each value); the tensor reports its desc. */
static void test_unpack_exact(void)
{
    for (size_t i = 0; i < NFORMATS; i++) {
        const fmt_case *f = &formats[i];
        char name[96];
        fmt_name(f, name, sizeof name);
        packed_w p = make_packed(f);
        size_t n = (size_t)f->rows * f->cols;
        wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(n));
        TH_EXPECT(wgml_unpack(th_eng, p.t, out), WGML_OK);
        float *got = th_read(out);
        size_t bad = 0, first = n;
        for (size_t k = 0; k < n; k++)
            if (memcmp(&got[k], &p.w[k], 4) != 0 && memcmp(&got[k], &p.wf[k], 4) != 0 && bad++ == 0) first = k;
        TH_CHECK(bad == 0, "%s: %zu of %zu values differ from the reference; first at %zu: %.9g, want %.9g", name, bad, n, first,
                 bad ? (double)got[first] : 0.0, bad ? (double)p.w[first] : 0.0);
        wgml_packed_desc d = wgml_tensor_packed_desc(p.t);
        TH_CHECK(d.dtype == f->dtype && d.rows == f->rows && d.cols == f->cols, "%s: wgml_tensor_packed_desc", name);
        TH_CHECK(wgml_tensor_numel(p.t) == n && wgml_tensor_nbytes(p.t) == p.nbytes, "%s: numel %zu, nbytes %zu (want %zu)",
                 name, wgml_tensor_numel(p.t), wgml_tensor_nbytes(p.t), p.nbytes);
        free(got);
        wgml_tensor_release(out);
        free_packed(&p);
    }
}

/* out [M, N] against sum_k a[m, k] B(k, n) in double, within K 2^-23 sum |a B| (f32
   rounding of K products); B(k, n) = W[n, k] (trans false) or W[k, n]. */
static void check_product(const char *what, const float *got, const float *a, const float *w, const float *before, size_t M,
                          size_t N, size_t K, size_t cols, bool trans)
{
    size_t bad = 0;
    double worst = 0;
    for (size_t m = 0; m < M; m++)
        for (size_t n = 0; n < N; n++) {
            double s = before ? before[m * N + n] : 0, mag = before ? fabs(before[m * N + n]) : 0;
            for (size_t k = 0; k < K; k++) {
                double b = trans ? w[k * cols + n] : w[n * cols + k];
                s += (double)a[m * K + k] * b;
                mag += fabs((double)a[m * K + k] * b);
            }
            double err = fabs(got[m * N + n] - s), tol = (double)(K + 1) * ldexp(1, -23) * mag + 1e-30;
            if (!(err <= tol)) {
                if (bad++ < 3) th_check_impl(false, __FILE__, __LINE__, "%s: out[%zu, %zu] = %.9g, want %.9g (tol %.3g)", what, m, n,
                                             (double)got[m * N + n], s, tol);
            }
            if (err / (tol + 1e-300) > worst) worst = err / tol;
        }
    TH_CHECK(bad == 0, "%s: %zu elements beyond tolerance", what, bad);
}

/* One product of a random a [M, K] with W: a @ W^T (trans false, K = cols) or a @ W
   (trans, K = rows); accumulate adds into random contents of out. */
static void product_case(const fmt_case *f, packed_w *p, size_t M, bool trans, bool accumulate)
{
    size_t K = trans ? f->rows : f->cols, N = trans ? f->cols : f->rows;
    float *a = th_random(M * K, -1, 1);
    wgml_tensor *ta = th_tensor(WGML_F32, a, TH_SHAPE(M, K));
    float *before = accumulate ? th_random(M * N, -1, 1) : NULL;
    wgml_tensor *out = before ? th_tensor(WGML_F32, before, TH_SHAPE(M, N)) : th_poisoned(WGML_F32, TH_SHAPE(M, N));
    const wgml_matmul_options acc = { .accumulate = true };
    if (trans) TH_EXPECT(wgml_matmul_with(th_eng, ta, p->t, out, accumulate ? &acc : NULL), WGML_OK);
    else TH_EXPECT(wgml_matmul_bt_with(th_eng, ta, p->t, out, accumulate ? &acc : NULL), WGML_OK);
    float *got = th_read(out);
    char name[96], what[192];
    snprintf(what, sizeof what, "%s: %s M = %zu%s", fmt_name(f, name, sizeof name), trans ? "a @ W" : "a @ W^T", M,
             accumulate ? " accumulate" : "");
    check_product(what, got, a, p->w, before, M, N, K, f->cols, trans);
    free(got); free(a); free(before);
    wgml_tensor_release(ta);
    wgml_tensor_release(out);
}

static void test_products(void)
{
    static const size_t ms[] = { 1, 3, 8, 9, 70 };
    for (size_t i = 0; i < NFORMATS; i++) {
        packed_w p = make_packed(&formats[i]);
        for (size_t j = 0; j < sizeof ms / sizeof ms[0]; j++) {
            product_case(&formats[i], &p, ms[j], false, false);
            product_case(&formats[i], &p, ms[j], true, false);
        }
        product_case(&formats[i], &p, 2, false, true);
        product_case(&formats[i], &p, 33, false, true);
        product_case(&formats[i], &p, 33, true, true);
        free_packed(&p);
    }
}

/* Rows of W by id; an id past the table gives zeros. */
static void test_embedding(void)
{
    for (size_t i = 0; i < NFORMATS; i++) {
        const fmt_case *f = &formats[i];
        packed_w p = make_packed(f);
        uint32_t ids[7] = { 0, f->rows - 1, 3 % f->rows, f->rows, 1, 1u << 30, 2 % f->rows };
        wgml_tensor *tid = th_tensor(WGML_U32, ids, TH_SHAPE(7));
        wgml_tensor *out = th_poisoned(WGML_F32, TH_SHAPE(7, f->cols));
        TH_EXPECT(wgml_embedding(th_eng, p.t, tid, out), WGML_OK);
        float *got = th_read(out);
        size_t bad = 0;
        for (size_t r = 0; r < 7; r++)
            for (size_t c = 0; c < f->cols; c++) {
                float want = ids[r] < f->rows ? p.w[ids[r] * f->cols + c] : 0.0f;
                float fused = ids[r] < f->rows ? p.wf[ids[r] * f->cols + c] : 0.0f;
                bad += memcmp(&got[r * f->cols + c], &want, 4) != 0 && memcmp(&got[r * f->cols + c], &fused, 4) != 0;
            }
        char name[96];
        TH_CHECK(bad == 0, "%s: embedding: %zu values differ", fmt_name(f, name, sizeof name), bad);
        free(got);
        wgml_tensor_release(tid);
        wgml_tensor_release(out);
        free_packed(&p);
    }
}

static void test_bad_inputs(void)
{
    wgml_packed_desc d = { .dtype = WGML_Q8_0, .rows = 4, .cols = 33 };
    wgml_packed_layout lay;
    wgml_tensor *t = NULL;
    TH_EXPECT_ERR(wgml_packed_layout_of(&d, &lay), WGML_ERROR_SHAPE, "whole blocks of 32");
    TH_EXPECT_ERR(wgml_tensor_create_packed(th_ctx, &d, &t), WGML_ERROR_SHAPE, "cols");
    TH_CHECK(t == NULL, "a refused create leaves *out NULL");
    d = (wgml_packed_desc){ .dtype = WGML_AFFINE, .rows = 4, .cols = 64, .bits = 3, .group_size = 64 };
    TH_EXPECT_ERR(wgml_packed_layout_of(&d, &lay), WGML_ERROR_INVALID_ARGUMENT, "bits");
    d.bits = 4;
    d.group_size = 16;
    TH_EXPECT_ERR(wgml_packed_layout_of(&d, &lay), WGML_ERROR_INVALID_ARGUMENT, "group_size");
    d.group_size = 64;
    d.scale_dtype = WGML_U32;
    TH_EXPECT_ERR(wgml_packed_layout_of(&d, &lay), WGML_ERROR_INVALID_ARGUMENT, "scale_dtype");
    d = (wgml_packed_desc){ .dtype = WGML_F16, .rows = 4, .cols = 64 };
    TH_EXPECT_ERR(wgml_packed_layout_of(&d, &lay), WGML_ERROR_INVALID_ARGUMENT, "dtype");
    d = (wgml_packed_desc){ .dtype = WGML_Q4_K, .rows = 0, .cols = 256 };
    TH_EXPECT_ERR(wgml_packed_layout_of(&d, &lay), WGML_ERROR_INVALID_ARGUMENT, "rows");
    TH_EXPECT_ERR(wgml_packed_layout_of(NULL, &lay), WGML_ERROR_INVALID_ARGUMENT, "NULL");
    TH_EXPECT_ERR(wgml_tensor_create(th_ctx, WGML_Q4_0, 2, (size_t[]){ 2, 32 }, &t), WGML_ERROR_INVALID_ARGUMENT,
                  "wgml_tensor_create_packed");

    packed_w p = make_packed(&formats[2]);   /* q8_0 [37, 96] */
    wgml_tensor *a = th_poisoned(WGML_F32, TH_SHAPE(2, 96)), *a2 = th_poisoned(WGML_F32, TH_SHAPE(2, 95));
    wgml_tensor *o = th_poisoned(WGML_F32, TH_SHAPE(2, 37)), *o2 = th_poisoned(WGML_F32, TH_SHAPE(2, 36));
    wgml_tensor *big = th_poisoned(WGML_F32, TH_SHAPE(96, 37));
    TH_EXPECT_ERR(wgml_matmul_bt(th_eng, a2, p.t, o), WGML_ERROR_SHAPE, "K");
    TH_EXPECT_ERR(wgml_matmul_bt(th_eng, a, p.t, o2), WGML_ERROR_SHAPE, "out");
    TH_EXPECT_ERR(wgml_matmul_at(th_eng, a, p.t, big), WGML_ERROR_DTYPE, "b");
    TH_EXPECT_ERR(wgml_matmul_bt(th_eng, p.t, p.t, o), WGML_ERROR_DTYPE, "a");
    TH_EXPECT_ERR(wgml_add(th_eng, p.t, p.t, o), WGML_ERROR_DTYPE, "q8_0");
    TH_EXPECT_ERR(wgml_tensor_reshape(p.t, 1, (size_t[]){ 37 * 96 }), WGML_ERROR_DTYPE, "packed");
    TH_EXPECT_ERR(wgml_unpack(th_eng, a, o), WGML_ERROR_DTYPE, "f32");
    TH_EXPECT_ERR(wgml_unpack(th_eng, p.t, o), WGML_ERROR_SHAPE, "elements");
    TH_EXPECT_ERR(wgml_unpack(NULL, p.t, o), WGML_ERROR_INVALID_ARGUMENT, "NULL");
    wgml_tensor *v16 = th_poisoned(WGML_F16, TH_SHAPE(96));
    TH_EXPECT_ERR(wgml_matmul_bt(th_eng, a, v16, o), WGML_ERROR_SHAPE, "2-D");
    TH_EXPECT_ERR(wgml_unpack(th_eng, v16, big), WGML_ERROR_SHAPE, "2-D");
    wgml_tensor_release(v16);
    wgml_tensor_release(a); wgml_tensor_release(a2); wgml_tensor_release(o); wgml_tensor_release(o2);
    wgml_tensor_release(big);
    free_packed(&p);
}

static const th_case cases[] = {
    { "unpack exact", test_unpack_exact },
    { "products", test_products },
    { "embedding", test_embedding },
    { "bad inputs", test_bad_inputs },
};

TH_MAIN(cases)
