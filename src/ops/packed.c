/* Ops that read a packed (or 16-bit) weight W [rows, cols] and unpack it in the kernel:
   the products wgml_matmul_bt and wgml_matmul route here when b is one, the embedding
   lookup when its table is one, and wgml_unpack. Kernels: src/kernels/packed.wgsl. */
#include "internal.h"

#define GEMV_MAX_M 8   /* rows of a the matrix-vector kernel takes: MAXM in the kernel */
#define WG_GEMV 64
#define WG_ROWS 64
#define TILE 64

typedef struct packed_params {
    uint32_t m, n, k, acc, rows, cols, row_bytes, groups, scales, biases, tiles_n, fmt, bits, gs, sdt, pad[3];
} packed_params;

bool wgml__is_packed_operand(const wgml_tensor *t)
{
    return t && (wgml__dtype_packed(t->dtype) || t->dtype == WGML_F16 || t->dtype == WGML_BF16);
}

/* The kernels' format code (fmt) of W's dtype. */
static uint32_t format_of(wgml_dtype d)
{
    switch (d) {
    case WGML_F16: return 0;
    case WGML_BF16: return 1;
    case WGML_Q8_0: return 2;
    case WGML_Q4_0: return 3;
    case WGML_Q4_K: return 4;
    case WGML_Q6_K: return 5;
    default: return 6;
    }
}

/* W must be 2-D and addressable with 32-bit byte offsets (the kernels' arithmetic). */
static wgml_status check_w(wgml_engine *e, const char *fn, const char *name, const wgml_tensor *w)
{
    if (w->ndim != 2)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: %s is %s and must be 2-D [rows, cols]; it has %u dimensions", fn, name,
                          wgml_dtype_name(w->dtype), w->ndim);
    if (wgml__nbytes(w) > UINT32_MAX - 16 || wgml_tensor_numel(w) > UINT32_MAX)
        return wgml__fail(e->ctx, WGML_ERROR_LIMIT, "%s: %s (%s, %zu bytes) is beyond the 4 GiB a packed operand may span", fn,
                          name, wgml_dtype_name(w->dtype), wgml__nbytes(w));
    return WGML_OK;
}

/* The kernel of entry, and W's part of the parameters. */
static wgml__kernel kernel_for(const wgml_tensor *w, const char *entry, packed_params *p)
{
    wgml__kernel k = { .file = "packed", .entry = entry, .layout = "urrw" };
    p->fmt = format_of(w->dtype);
    const wgml_packed_desc *d = &w->packed.desc;
    if (w->dtype == WGML_AFFINE) {
        p->bits = d->bits;
        p->gs = d->group_size;
        p->sdt = d->scale_dtype == WGML_F32 ? 0 : d->scale_dtype == WGML_F16 ? 1 : 2;
        p->groups = (d->cols + d->group_size - 1) / d->group_size;
        p->scales = (uint32_t)w->packed.scales_offset;
        p->biases = (uint32_t)w->packed.biases_offset;
    }
    p->rows = (uint32_t)w->shape[0];
    p->cols = (uint32_t)w->shape[1];
    p->row_bytes = (uint32_t)w->packed.row_bytes;
    return k;
}

wgml_status wgml__packed_matmul(wgml_engine *e, const char *fn, const wgml_tensor *a, const wgml_tensor *w, wgml_tensor *out,
                                uint32_t M, uint32_t N, uint32_t K, bool trans, bool acc)
{
    WGML_CHECK(check_w(e, fn, "b", w));
    packed_params p = { .m = M, .n = N, .k = K, .acc = acc };
    bool gemv = !trans && M <= GEMV_MAX_M;
    wgml__kernel k = kernel_for(w, gemv ? "gemv" : "gemm", &p);
    uint32_t gx, gy;
    if (gemv) {
        wgml__add_constant(&k, "WG", WG_GEMV);
        WGML_CHECK(wgml__grid(e->ctx, N, &gx, &gy));
    } else {
        wgml__add_constant(&k, "TRANS", trans);
        p.tiles_n = wgml__ceil_div(N, TILE);
        WGML_CHECK(wgml__grid(e->ctx, (uint64_t)wgml__ceil_div(M, TILE) * p.tiles_n, &gx, &gy));
    }
    wgml__arg args[3] = { wgml__t(a), wgml__t(w), wgml__t(out) };
    return wgml__dispatch(e, &k, &p, sizeof p, args, 3, gx, gy, 1);
}

/* out[i, :] = W[ids[i], :] (ids NULL: W[i, :] for every row). */
static wgml_status rows_of(wgml_engine *e, const wgml_tensor *w, const wgml_tensor *ids, uint32_t n, wgml_tensor *out)
{
    packed_params p = { .m = n };
    wgml__kernel k = kernel_for(w, "rows", &p);
    wgml__add_constant(&k, "WG", WG_ROWS);
    wgml__add_constant(&k, "USE_IDS", ids != NULL);
    uint32_t gx, gy;
    WGML_CHECK(wgml__grid(e->ctx, wgml__ceil_div((uint64_t)n * wgml__ceil_div(p.cols, 4), WG_ROWS), &gx, &gy));
    wgml__arg args[3] = { wgml__t(ids ? ids : w), wgml__t(w), wgml__t(out) };
    return wgml__dispatch(e, &k, &p, sizeof p, args, 3, gx, gy, 1);
}

wgml_status wgml__packed_embedding(wgml_engine *e, const char *fn, const wgml_tensor *table, const wgml_tensor *ids,
                                   wgml_tensor *out)
{
    WGML_CHECK(check_w(e, fn, "table", table));
    return rows_of(e, table, ids, (uint32_t)wgml_tensor_numel(ids), out);
}

wgml_status wgml_unpack(wgml_engine *e, const wgml_tensor *w, wgml_tensor *out)
{
    const char *fn = "wgml_unpack";
    WGML_CHECK(wgml__check_engine(e, fn));
    WGML_CHECK(wgml__check_tensor(e, fn, "w", w, -1));
    WGML_CHECK(wgml__check_tensor(e, fn, "out", out, WGML_F32));
    if (!wgml__is_packed_operand(w))
        return wgml__fail(e->ctx, WGML_ERROR_DTYPE, "%s: w is %s; it must be packed, f16 or bf16", fn, wgml_dtype_name(w->dtype));
    WGML_CHECK(check_w(e, fn, "w", w));
    if (wgml_tensor_numel(out) != wgml_tensor_numel(w))
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: out has %zu elements; w [%zu, %zu] has %zu", fn, wgml_tensor_numel(out),
                          w->shape[0], w->shape[1], wgml_tensor_numel(w));
    WGML_CHECK(wgml__check_u32_numel(e, fn, "out", out));
    return rows_of(e, w, NULL, (uint32_t)w->shape[0], out);
}
