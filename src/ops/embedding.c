/* Embedding lookup and its deterministic gradient. Kernels: src/kernels/embedding.wgsl. */
#include "internal.h"

#define WG_LOOKUP 256
#define WG_BACK 64     /* columns per workgroup in the backward pass */
/* Vocabulary rows per workgroup: 63 * 64 accumulators plus the 128-byte id mask fit the
   16 KiB of workgroup memory every WebGPU device offers. */
#define R_BACK 63

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
    WGML_CHECK(wgml__check_tensor(e, fn, "table", table, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "ids", ids, WGML_U32));
    WGML_CHECK(wgml__check_tensor(e, fn, "out", out, WGML_F32));
    WGML_CHECK(check_table(e, fn, "table", table));
    size_t v = wgml_tensor_dim(table, 0), d = wgml_tensor_dim(table, 1), n = wgml_tensor_numel(ids);
    WGML_CHECK(check_rows(e, fn, "out", out, n, d, "table"));
    WGML_CHECK(wgml__check_no_alias(e, fn, "out", out, "table", table));

    bool vec4 = d % 4 == 0;
    uint32_t dd = (uint32_t)(vec4 ? d / 4 : d);
    emb_params p = { .n = (uint32_t)n, .v = (uint32_t)v, .d = dd };
    uint32_t gx, gy;
    WGML_CHECK(wgml__grid(e->ctx, ((uint64_t)n * dd + WG_LOOKUP - 1) / WG_LOOKUP, &gx, &gy));
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

    uint32_t chunks = wgml__ceil_div(d, WG_BACK);
    uint64_t blocks = (v + R_BACK - 1) / R_BACK;
    emb_params p = { .n = (uint32_t)n, .v = (uint32_t)v, .d = (uint32_t)d, .chunks = chunks };
    uint32_t gx, gy;
    WGML_CHECK(wgml__grid(e->ctx, blocks * chunks, &gx, &gy));
    wgml__kernel k = { .file = "embedding", .entry = "backward", .layout = "urrw", .nconst = 2,
                       .constants = { { "WG", WG_BACK }, { "R", R_BACK } } };
    return wgml__dispatch(e, &k, &p, sizeof p, (wgml__arg[]){ wgml__t(ids), wgml__t(grad_out), wgml__t(grad_table) }, 3, gx,
                          gy, 1);
}

const wgml__kernel wgml__embedding_kernels[] = {
    { .file = "embedding", .entry = "lookup4", .layout = "urrw", .nconst = 1, .constants = { { "WG", WG_LOOKUP } } },
    { .file = "embedding", .entry = "lookup1", .layout = "urrw", .nconst = 1, .constants = { { "WG", WG_LOOKUP } } },
    { .file = "embedding", .entry = "backward", .layout = "urrw", .nconst = 2, .constants = { { "WG", WG_BACK }, { "R", R_BACK } } },
};
const size_t wgml__embedding_kernel_count = sizeof wgml__embedding_kernels / sizeof wgml__embedding_kernels[0];
