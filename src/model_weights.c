/* How a loader stores a model's matrices (embedding, projections, lm_head) on the device:
   f32, kept in the file's packed or 16-bit dtype, or quantised at load into MLX's affine
   scheme (wgml_model_load_options). Norms and biases are always f32. */
#include "internal.h"
#include "io/io.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define QUANT_GROUP 64   /* MLX's default group size */

/* Min-max affine quantisation of one group of n values (n <= QUANT_GROUP) to bits-bit
   codes, its scale and bias rounded to f16 first so that the codes are chosen against the
   values the kernels will use: scale (max - min) / (2^bits - 1), bias min. */
static bool quantise_group(const float *x, size_t n, uint32_t bits, uint8_t *codes, uint16_t *scale, uint16_t *bias)
{
    float lo = x[0], hi = x[0];
    for (size_t i = 1; i < n; i++) {
        lo = fminf(lo, x[i]);
        hi = fmaxf(hi, x[i]);
    }
    if (!(fabsf(lo) <= 65504 && fabsf(hi) <= 65504)) return false;   /* beyond f16 (or NaN) */
    float levels = (float)((1u << bits) - 1);
    *scale = wgml__float_to_half((hi - lo) / levels);
    *bias = wgml__float_to_half(lo);
    float s = wgml__half_to_float(*scale), b = wgml__half_to_float(*bias);
    for (size_t i = 0; i < n; i++) {
        float q = s > 0 ? nearbyintf((x[i] - b) / s) : 0;
        codes[i] = (uint8_t)fminf(fmaxf(q, 0), levels);
    }
    return true;
}

/* Parameter i as an affine tensor of bits-bit codes quantised from w [rows, cols]. */
static wgml_status put_quantised(wgml_model *m, size_t i, const char *name, const float *w, uint32_t rows, uint32_t cols,
                                 uint32_t bits)
{
    wgml_engine *e = wgml__model_engine(m);
    wgml_context *ctx = e->ctx;
    wgml_packed_desc d = { .dtype = WGML_AFFINE, .rows = rows, .cols = cols, .bits = bits, .group_size = QUANT_GROUP,
                           .scale_dtype = WGML_F16 };
    wgml__packed lay;
    WGML_CHECK(wgml__packed_layout(ctx, "wgml_model_load", &d, &lay));
    uint8_t *bytes = calloc(1, lay.bytes);
    if (!bytes) return wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "wgml_model_load: out of host memory");
    size_t groups = (cols + QUANT_GROUP - 1) / QUANT_GROUP;
    uint8_t codes[QUANT_GROUP];
    wgml_status s = WGML_OK;
    for (uint32_t r = 0; r < rows && s == WGML_OK; r++)
        for (size_t g = 0; g < groups; g++) {
            size_t c0 = g * QUANT_GROUP, n = cols - c0 < QUANT_GROUP ? cols - c0 : QUANT_GROUP;
            uint16_t sc, bi;
            if (!quantise_group(w + (size_t)r * cols + c0, n, bits, codes, &sc, &bi)) {
                s = wgml__fail(ctx, WGML_ERROR_UNSUPPORTED, "wgml_model_load: %s has a value beyond f16's range (or NaN) in row "
                               "%u; it cannot be quantised with f16 scales", name, r);
                break;
            }
            uint8_t *row = bytes + (size_t)r * lay.row_bytes;
            for (size_t k = 0; k < n; k++) {
                size_t c = c0 + k;
                if (bits == 8) row[c] = codes[k];
                else row[c / 2] |= (uint8_t)(codes[k] << (4 * (c % 2)));
            }
            size_t at = (size_t)r * groups + g;
            memcpy(bytes + lay.scales_offset + 2 * at, &sc, 2);
            memcpy(bytes + lay.biases_offset + 2 * at, &bi, 2);
        }
    wgml_tensor *t = NULL;
    if (s == WGML_OK) s = wgml__tensor_create_packed("wgml_model_load", ctx, &lay, &t);
    if (s == WGML_OK) s = wgml_tensor_write(t, 0, bytes, lay.bytes);
    free(bytes);
    if (s != WGML_OK) {
        wgml_tensor_release(t);
        return s;
    }
    wgml__model_set_param(m, i, t);
    return WGML_OK;
}

wgml_status wgml__model_put_f32(wgml_model *m, size_t i, const char *name, const float *w, uint32_t rows, uint32_t cols,
                                wgml_weights weights)
{
    if (weights == WGML_WEIGHTS_Q8 || weights == WGML_WEIGHTS_Q4)
        return put_quantised(m, i, name, w, rows, cols, weights == WGML_WEIGHTS_Q8 ? 8 : 4);
    wgml_tensor *t = NULL;
    WGML_CHECK(wgml_tensor_create(wgml__model_engine(m)->ctx, WGML_F32, 2, (size_t[]){ rows, cols }, &t));
    wgml_status s = wgml_tensor_write(t, 0, w, (size_t)rows * cols * sizeof(float));
    if (s != WGML_OK) {
        wgml_tensor_release(t);
        return s;
    }
    wgml__model_set_param(m, i, t);
    return WGML_OK;
}

wgml_status wgml__model_put_packed(wgml_model *m, size_t i, const wgml_packed_desc *d, const void *const parts[3],
                                   const size_t sizes[3])
{
    wgml_context *ctx = wgml__model_engine(m)->ctx;
    wgml_tensor *t = NULL;
    wgml_status s;
    if (d->dtype == WGML_F16 || d->dtype == WGML_BF16) {
        s = wgml_tensor_create(ctx, d->dtype, 2, (size_t[]){ d->rows, d->cols }, &t);
        if (s == WGML_OK) s = wgml_tensor_write(t, 0, parts[0], sizes[0]);
    } else {
        wgml__packed lay;
        s = wgml__packed_layout(ctx, "wgml_model_load", d, &lay);
        if (s == WGML_OK) s = wgml__tensor_create_packed("wgml_model_load", ctx, &lay, &t);
        size_t at[3] = { 0, lay.scales_offset, lay.biases_offset };
        for (int k = 0; k < 3 && s == WGML_OK; k++)
            if (parts[k] && sizes[k]) s = wgml_tensor_write(t, at[k], parts[k], sizes[k]);
    }
    if (s != WGML_OK) {
        wgml_tensor_release(t);
        return s;
    }
    wgml__model_set_param(m, i, t);
    return WGML_OK;
}
