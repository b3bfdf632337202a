/* Argument checks shared by every op. Each names the function and the argument, so a
   failing call reads like "wgml_add: b has 12 elements, a has 10". */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

wgml_status wgml__check_engine(wgml_engine *e, const char *fn)
{
    if (!e) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: engine is NULL", fn);
    return wgml__check_device(e->ctx);
}

wgml_status wgml__check_tensor(wgml_engine *e, const char *fn, const char *name, const wgml_tensor *t, int dtype)
{
    if (!t) return wgml__fail(e->ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", fn, name);
    if (t->ctx != e->ctx)
        return wgml__fail(e->ctx, WGML_ERROR_CONTEXT, "%s: %s belongs to another context than the engine", fn, name);
    if (dtype >= 0 && t->dtype != (wgml_dtype)dtype)
        return wgml__fail(e->ctx, WGML_ERROR_DTYPE, "%s: %s is %s; it must be %s", fn, name, wgml_dtype_name(t->dtype),
                          wgml_dtype_name((wgml_dtype)dtype));
    return WGML_OK;
}

wgml_status wgml__check_same_numel(wgml_engine *e, const char *fn, const char *name_a, const wgml_tensor *a,
                                   const char *name_b, const wgml_tensor *b)
{
    size_t na = wgml_tensor_numel(a), nb = wgml_tensor_numel(b);
    if (na != nb)
        return wgml__fail(e->ctx, WGML_ERROR_SHAPE, "%s: %s has %zu elements, %s has %zu; they must be equal", fn, name_b, nb,
                          name_a, na);
    return WGML_OK;
}

wgml_status wgml__check_no_alias(wgml_engine *e, const char *fn, const char *out_name, const wgml_tensor *out,
                                 const char *in_name, const wgml_tensor *in)
{
    if (out && in && out->buffer == in->buffer)
        return wgml__fail(e->ctx, WGML_ERROR_ALIAS, "%s: %s must not be the same tensor as %s", fn, out_name, in_name);
    return WGML_OK;
}

wgml_status wgml__check_u32_numel(wgml_engine *e, const char *fn, const char *name, const wgml_tensor *t)
{
    if (wgml_tensor_numel(t) > 0xFFFFFFFFull - 4096)
        return wgml__fail(e->ctx, WGML_ERROR_LIMIT, "%s: %s has %zu elements; kernels index with 32 bits", fn, name,
                          wgml_tensor_numel(t));
    return WGML_OK;
}
