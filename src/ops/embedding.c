/* Embedding lookup and its deterministic gradient. Kernels: src/kernels/embedding.wgsl. */
#include "internal.h"

#define WG_LOOKUP 256
#define U_LOOKUP 4     /* columns (vec4 or floats) per thread in a lookup: U in the kernel */
#define WG_SORT 256    /* the one workgroup of the counting sort of the ids */
#define WG_SUM 64      /* threads per workgroup of the backward row sums */
#define CU_SUM 4       /* columns per thread there: CU in the kernel */

typedef struct emb_params { uint32_t n, v, d, chunks; } emb_params;

/* table must be [V, D]; returns D through *d. */
static wgml_status check_table(wgml_engine *e, const char *fn, const char *name, const wgml_tensor *table)
{
    if (wgml_tensor_ndim(table) != 2)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: %s has %u dimensions; it must be [V, D]", fn, name,
                          wgml_tensor_ndim(table));
    return wgml__check_u32_numel(e, fn, name, table);
}

/* rows (out or grad_out) must hold N rows of D: numel N * D and last dimension D. */
static wgml_status check_rows(wgml_engine *e, const char *fn, const char *name, const wgml_tensor *rows, size_t n, size_t d,
                              const char *table_name)
{
    size_t last = wgml_tensor_dim(rows, wgml_tensor_ndim(rows) - 1);
    if (last != d || wgml_tensor_numel(rows) != n * d)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE,
                          "%s: %s has %zu elements with last dimension %zu; it must be %zu ids x %zu (the D of %s)", fn, name,
                          wgml_tensor_numel(rows), last, n, d, table_name);
    return wgml__check_u32_numel(e, fn, name, rows);
}

wgml_status wgml_embedding(wgml_engine *e, const wgml_tensor *table, const wgml_tensor *ids, wgml_tensor *out)
{
    const char *fn = "wgml_embedding";
    WGML_CHECK(wgml__check_engine(e, fn));
    bool packed = wgml__is_packed_operand(table);
    WGML_CHECK(wgml__check_tensor(e, fn, "table", table, packed ? -1 : WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "ids", ids, WGML_U32));
    WGML_CHECK(wgml__check_tensor(e, fn, "out", out, WGML_F32));
    if (!packed) WGML_CHECK(check_table(e, fn, "table", table));
    else if (wgml_tensor_ndim(table) != 2)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: table has %u dimensions; it must be [V, D]", fn, wgml_tensor_ndim(table));
    size_t v = wgml_tensor_dim(table, 0), d = wgml_tensor_dim(table, 1), n = wgml_tensor_numel(ids);
    WGML_CHECK(check_rows(e, fn, "out", out, n, d, "table"));
    WGML_CHECK(wgml__check_no_alias(e, fn, "out", out, "table", table));
    if (packed) return wgml__packed_embedding(e, fn, table, ids, out);

    bool vec4 = d % 4 == 0;
    uint32_t dd = (uint32_t)(vec4 ? d / 4 : d);
    uint32_t chunks = wgml__ceil_div(dd, WG_LOOKUP * U_LOOKUP);
    emb_params p = { .n = (uint32_t)n, .v = (uint32_t)v, .d = dd, .chunks = chunks };
    uint32_t gx, gy;
    WGML_CHECK(wgml__grid(e->ctx, (uint64_t)n * chunks, &gx, &gy));
    wgml__kernel k = { .file = "embedding", .entry = vec4 ? "lookup4" : "lookup1", .layout = "urrw", .nconst = 1,
                       .constants = { { "WG", WG_LOOKUP } } };
    return wgml__dispatch(e, &k, &p, sizeof p, (wgml__arg[]){ wgml__t(ids), wgml__t(table), wgml__t(out) }, 3, gx, gy, 1);
}

wgml_status wgml_embedding_backward(wgml_engine *e, const wgml_tensor *grad_out, const wgml_tensor *ids, wgml_tensor *grad_table)
{
    const char *fn = "wgml_embedding_backward";
    WGML_CHECK(wgml__check_engine(e, fn));
    WGML_CHECK(wgml__check_tensor(e, fn, "grad_out", grad_out, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "ids", ids, WGML_U32));
    WGML_CHECK(wgml__check_tensor(e, fn, "grad_table", grad_table, WGML_F32));
    WGML_CHECK(check_table(e, fn, "grad_table", grad_table));
    size_t v = wgml_tensor_dim(grad_table, 0), d = wgml_tensor_dim(grad_table, 1), n = wgml_tensor_numel(ids);
    WGML_CHECK(check_rows(e, fn, "grad_out", grad_out, n, d, "grad_table"));
    WGML_CHECK(wgml__check_no_alias(e, fn, "grad_table", grad_table, "grad_out", grad_out));

    /* 1. stable counting sort of the ids into scratch: V segment ends, then N positions */
    wgml__arg scratch;
    WGML_CHECK(wgml__scratch(e, WGML__SCRATCH_TRAIN, 4 * ((uint64_t)v + n), &scratch));
    emb_params sp = { .n = (uint32_t)n, .v = (uint32_t)v };
    wgml__arg sargs[] = { wgml__t(ids), scratch };
    uint32_t cx, cy, hx, hy;
    WGML_CHECK(wgml__grid(e->ctx, wgml__ceil_div(v, WG_SORT), &cx, &cy));
    WGML_CHECK(wgml__grid(e->ctx, wgml__ceil_div(n, WG_SORT), &hx, &hy));
    wgml__kernel ks = { .file = "embedding", .entry = "clear_counts", .layout = "urw", .nconst = 1,
                        .constants = { { "WG", WG_SORT } } };
    WGML_CHECK(wgml__dispatch(e, &ks, &sp, sizeof sp, sargs, 2, cx, cy, 1));
    ks.entry = "count_ids";
    WGML_CHECK(wgml__dispatch(e, &ks, &sp, sizeof sp, sargs, 2, hx, hy, 1));
    ks.entry = "sort_ids";
    WGML_CHECK(wgml__dispatch(e, &ks, &sp, sizeof sp, sargs, 2, 1, 1, 1));

    /* 2. one workgroup per (row, chunk of WG_SUM columns) sums the row's segment in order */
    bool vec4 = d % 4 == 0;
    uint32_t dd = (uint32_t)(vec4 ? d / 4 : d);
    uint32_t chunks = wgml__ceil_div(dd, WG_SUM * CU_SUM);
    emb_params p = { .n = (uint32_t)n, .v = (uint32_t)v, .d = dd, .chunks = chunks };
    uint32_t gx, gy;
    WGML_CHECK(wgml__grid(e->ctx, (uint64_t)v * chunks, &gx, &gy));
    wgml__kernel k = { .file = "embedding", .entry = vec4 ? "row_sum4" : "row_sum1", .layout = "urrw", .nconst = 1,
                       .constants = { { "WG", WG_SUM } } };
    return wgml__dispatch(e, &k, &p, sizeof p, (wgml__arg[]){ scratch, wgml__t(grad_out), wgml__t(grad_table) }, 3, gx, gy, 1);
}

const wgml__kernel wgml__embedding_kernels[] = {
    { .file = "embedding", .entry = "lookup4", .layout = "urrw", .nconst = 1, .constants = { { "WG", WG_LOOKUP } } },
    { .file = "embedding", .entry = "lookup1", .layout = "urrw", .nconst = 1, .constants = { { "WG", WG_LOOKUP } } },
    { .file = "embedding", .entry = "clear_counts", .layout = "urw", .nconst = 1, .constants = { { "WG", WG_SORT } } },
    { .file = "embedding", .entry = "count_ids", .layout = "urw", .nconst = 1, .constants = { { "WG", WG_SORT } } },
    { .file = "embedding", .entry = "sort_ids", .layout = "urw", .nconst = 1, .constants = { { "WG", WG_SORT } } },
    { .file = "embedding", .entry = "row_sum4", .layout = "urrw", .nconst = 1, .constants = { { "WG", WG_SUM } } },
    { .file = "embedding", .entry = "row_sum1", .layout = "urrw", .nconst = 1, .constants = { { "WG", WG_SUM } } },
};
const size_t wgml__embedding_kernel_count = sizeof wgml__embedding_kernels / sizeof wgml__embedding_kernels[0];
