/* Model files: wgml_model_load reads a Hugging Face folder of a family wgml runs (config.json,
   safetensors weights in f32, f16 or bf16, or MLX affine-quantised weights) and
   wgml_model_save writes one (f32, f16 or bf16). Parsing is src/io/'s: this file maps tensors to the
   model's parameters, checks every shape against config.json, and converts: half and
   bfloat16 to f32 on the host while copying to the device, quantised weights on the GPU
   through wgml_affine_dequantize_with. */
#include "internal.h"
#include "io/io.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Converts n elements of a float tensor in the file (unaligned, little-endian) to f32. */
static bool to_f32(wgml_safetensors_dtype dt, const void *src, size_t n, float *dst)
{
    const uint8_t *p = src;
    switch (dt) {
    case WGML_ST_F32: memcpy(dst, src, n * sizeof(float)); return true;
    case WGML_ST_F16:
        for (size_t i = 0; i < n; i++) dst[i] = wgml__half_to_float((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        return true;
    case WGML_ST_BF16:
        for (size_t i = 0; i < n; i++) dst[i] = wgml__bf16_to_float((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
        return true;
    default: return false;
    }
}

static void shape_string(char *buf, size_t size, uint32_t ndim, const uint64_t *shape)
{
    size_t at = (size_t)snprintf(buf, size, "[");
    for (uint32_t i = 0; i < ndim && at < size; i++)
        at += (size_t)snprintf(buf + at, size - at, "%s%llu", i ? ", " : "", (unsigned long long)shape[i]);
    if (at < size) snprintf(buf + at, size - at, "]");
}

static wgml_status find_tensor(wgml_context *ctx, const wgml_checkpoint *ck, const char *name, wgml_file_tensor *info,
                               int64_t *index)
{
    *index = wgml_checkpoint_find(ck, name);
    if (*index < 0) return WGML_ERROR_FORMAT;
    wgml_status s = wgml_checkpoint_info(ck, (size_t)*index, info);
    if (s != WGML_OK) return wgml__fail(ctx, s, "wgml_model_load: %s", wgml_last_error(NULL));
    return WGML_OK;
}

static bool is_float_dtype(wgml_safetensors_dtype dt)
{
    return dt == WGML_ST_F32 || dt == WGML_ST_F16 || dt == WGML_ST_BF16;
}

/* The f32 scales or biases of a quantised weight: present, [rows, cols], a float dtype. */
static wgml_status check_f32(wgml_context *ctx, const wgml_checkpoint *ck, const char *name, uint64_t rows, uint64_t cols)
{
    wgml_file_tensor info;
    int64_t idx;
    if (find_tensor(ctx, ck, name, &info, &idx) != WGML_OK)
        return wgml__fail(ctx, WGML_ERROR_FORMAT, "wgml_model_load: quantised weight without its tensor '%s'", name);
    if (info.ndim != 2 || info.shape[0] != rows || info.shape[1] != cols) {
        char got[96];
        shape_string(got, sizeof got, info.ndim, info.shape);
        return wgml__fail(ctx, WGML_ERROR_FORMAT, "wgml_model_load: tensor '%s' has shape %s; config.json implies [%llu, %llu]",
                          name, got, (unsigned long long)rows, (unsigned long long)cols);
    }
    if (!is_float_dtype(info.dtype))
        return wgml__fail(ctx, WGML_ERROR_FORMAT, "wgml_model_load: tensor '%s' has dtype %s; expected F32, F16 or BF16", name,
                          wgml_safetensors_dtype_name(info.dtype));
    return WGML_OK;
}

/* An f32 tensor of the file's scales or biases (already checked by check_f32). */
static wgml_status load_f32(wgml_context *ctx, const wgml_checkpoint *ck, const char *name, uint64_t rows, uint64_t cols,
                            wgml_tensor **out)
{
    wgml_file_tensor info;
    int64_t idx;
    wgml_status s = find_tensor(ctx, ck, name, &info, &idx);
    if (s != WGML_OK) return s;
    float *buf = malloc(sizeof(float) * info.numel);
    if (!buf) return wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "wgml_model_load: out of host memory");
    to_f32(info.dtype, wgml_checkpoint_data(ck, (size_t)idx), info.numel, buf);
    s = wgml_tensor_from_data(ctx, WGML_F32, 2, (size_t[]){ rows, cols }, buf, out);
    free(buf);
    return s;
}

/* Names of the scales and biases that go with a quantised "<prefix>.weight". */
static void quant_names(const char *name, char *sname, char *bname, size_t size)
{
    size_t base = strlen(name) - strlen(".weight");
    snprintf(sname, size, "%.*s.scales", (int)base, name);
    snprintf(bname, size, "%.*s.biases", (int)base, name);
}

/* LFM2's convolution weights: [hidden, K] in the model, [hidden, 1, K] in Hugging Face's
   files (Conv1d's), always f32 on the GPU (no product reads them). */
static bool conv_weight(const char *name)
{
    const char *tail = ".conv.conv.weight";
    size_t n = strlen(name), t = strlen(tail);
    return n > t && strcmp(name + n - t, tail) == 0;
}

/* Everything that can be wrong with parameter `name` (shape want[0 .. nd)) in the file,
   checked before anything is allocated on the device, so that a bad file costs no GPU
   memory and records no work. */
static wgml_status check_param(wgml_context *ctx, const wgml_checkpoint *ck, const wgml_model_config *cfg, const char *name,
                               uint32_t nd, const uint64_t want[2])
{
    wgml_file_tensor info;
    int64_t idx;
    if (find_tensor(ctx, ck, name, &info, &idx) != WGML_OK)
        return wgml__fail(ctx, WGML_ERROR_FORMAT, "wgml_model_load: the checkpoint has no tensor '%s'", name);
    char got[96], exp[96];
    shape_string(got, sizeof got, info.ndim, info.shape);
    shape_string(exp, sizeof exp, nd, want);

    if (conv_weight(name)) {
        bool ok = info.shape[0] == want[0] && ((info.ndim == 3 && info.shape[1] == 1 && info.shape[2] == want[1]) ||
                                               (info.ndim == 2 && info.shape[1] == want[1]));
        if (!ok)
            return wgml__fail(ctx, WGML_ERROR_FORMAT, "wgml_model_load: tensor '%s' has shape %s; config.json implies [%llu, 1, "
                              "%llu]", name, got, (unsigned long long)want[0], (unsigned long long)want[1]);
        if (!is_float_dtype(info.dtype))
            return wgml__fail(ctx, WGML_ERROR_FORMAT, "wgml_model_load: tensor '%s' has dtype %s; expected F32, F16 or BF16",
                              name, wgml_safetensors_dtype_name(info.dtype));
        return WGML_OK;
    }
    if (info.dtype == WGML_ST_U32 && nd == 2) {
        /* MLX affine quantisation: bits-wide codes packed little-endian into u32 along the
           input dimension; one scale and bias per group_size codes. */
        uint32_t bits = cfg->quantization.bits, group = cfg->quantization.group_size;
        if (!bits)
            return wgml__fail(ctx, WGML_ERROR_FORMAT, "wgml_model_load: tensor '%s' is U32 (quantised) but config.json has no "
                              "\"quantization\"", name);
        if ((bits != 4 && bits != 8) || (group != 32 && group != 64 && group != 128))
            return wgml__fail(ctx, WGML_ERROR_UNSUPPORTED, "wgml_model_load: quantization with %u bits in groups of %u; wgml "
                              "dequantises 4 or 8 bits in groups of 32, 64 or 128", bits, group);
        if (info.ndim != 2 || info.shape[0] != want[0] || info.shape[1] * 32 / bits != want[1] || want[1] % group)
            return wgml__fail(ctx, WGML_ERROR_FORMAT, "wgml_model_load: quantised tensor '%s' has shape %s; %u-bit codes of %s "
                              "pack into [%llu, %llu]", name, got, bits, exp, (unsigned long long)want[0],
                              (unsigned long long)(want[1] * bits / 32));
        char sname[512], bname[512];
        quant_names(name, sname, bname, sizeof sname);
        wgml_status s = check_f32(ctx, ck, sname, want[0], want[1] / group);
        if (s == WGML_OK) s = check_f32(ctx, ck, bname, want[0], want[1] / group);
        return s;
    }
    bool same = info.ndim == nd && info.shape[0] == want[0] && (nd == 1 || info.shape[1] == want[1]);
    if (!same)
        return wgml__fail(ctx, WGML_ERROR_FORMAT, "wgml_model_load: tensor '%s' has shape %s; config.json implies %s", name, got, exp);
    if (!is_float_dtype(info.dtype))
        return wgml__fail(ctx, WGML_ERROR_FORMAT, "wgml_model_load: tensor '%s' has dtype %s; expected F32, F16, BF16 (or U32 "
                          "quantised)", name, wgml_safetensors_dtype_name(info.dtype));
    return WGML_OK;
}

/* Parameter i (`name`) from the checkpoint into the model (check_param accepted it):
   vectors f32; matrices as weights says (wgml_weights). */
static wgml_status load_param(wgml_engine *e, const wgml_checkpoint *ck, const wgml_model_config *cfg, wgml_model *m, size_t i,
                              wgml_weights weights)
{
    wgml_context *ctx = e->ctx;
    char name[WGML__PARAM_NAME_MAX];
    uint32_t nd;
    uint64_t shape[2];
    wgml__model_param_spec(cfg, i, name, &nd, shape);
    wgml_file_tensor info;
    int64_t idx;
    wgml_status s = find_tensor(ctx, ck, name, &info, &idx);
    if (s != WGML_OK) return s;
    const void *data = wgml_checkpoint_data(ck, (size_t)idx);
    uint32_t rows = nd == 2 ? (uint32_t)shape[0] : 1, cols = (uint32_t)(nd == 2 ? shape[1] : shape[0]);
    if (conv_weight(name)) weights = WGML_WEIGHTS_F32;
    bool quantised = info.dtype == WGML_ST_U32 && nd == 2;
    if (nd == 2 && weights != WGML_WEIGHTS_F32 && (quantised || (weights == WGML_WEIGHTS_KEEP && info.dtype != WGML_ST_F32))) {
        /* kept as the file has it: 16-bit, or MLX's codes, scales and biases */
        wgml_packed_desc d = { .dtype = info.dtype == WGML_ST_F16 ? WGML_F16 : WGML_BF16, .rows = rows, .cols = cols };
        const void *parts[3] = { data, NULL, NULL };
        size_t sizes[3] = { (size_t)info.numel * wgml_safetensors_dtype_bits(info.dtype) / 8, 0, 0 };
        if (quantised) {
            char sname[512], bname[512];
            quant_names(name, sname, bname, sizeof sname);
            wgml_file_tensor si, bi;
            int64_t sidx, bidx;
            s = find_tensor(ctx, ck, sname, &si, &sidx);
            if (s == WGML_OK) s = find_tensor(ctx, ck, bname, &bi, &bidx);
            if (s != WGML_OK) return s;
            wgml_dtype sd, bd;
            wgml_safetensors_dtype_to_wgml(si.dtype, &sd);
            wgml_safetensors_dtype_to_wgml(bi.dtype, &bd);
            if (sd != bd)   /* one scale dtype per packed tensor: expand mixed ones */
                goto expand;
            d = (wgml_packed_desc){ .dtype = WGML_AFFINE, .rows = rows, .cols = cols, .bits = cfg->quantization.bits,
                                    .group_size = cfg->quantization.group_size, .scale_dtype = sd };
            parts[1] = wgml_checkpoint_data(ck, (size_t)sidx);
            parts[2] = wgml_checkpoint_data(ck, (size_t)bidx);
            sizes[1] = (size_t)si.numel * wgml_safetensors_dtype_bits(si.dtype) / 8;
            sizes[2] = (size_t)bi.numel * wgml_safetensors_dtype_bits(bi.dtype) / 8;
        }
        return wgml__model_put_packed(m, i, &d, parts, sizes);
    }
expand:
    if (quantised) {
        /* MLX affine weights dequantised to f32 on the GPU */
        uint32_t bits = cfg->quantization.bits, group = cfg->quantization.group_size;
        char sname[512], bname[512];
        quant_names(name, sname, bname, sizeof sname);
        wgml_tensor *w = NULL, *sc = NULL, *bi = NULL, *p = NULL;
        s = wgml_tensor_from_data(ctx, WGML_U32, 1, (size_t[]){ info.numel }, data, &w);
        if (s == WGML_OK) s = load_f32(ctx, ck, sname, rows, cols / group, &sc);
        if (s == WGML_OK) s = load_f32(ctx, ck, bname, rows, cols / group, &bi);
        if (s == WGML_OK) s = wgml_tensor_create(ctx, WGML_F32, 2, (size_t[]){ rows, cols }, &p);
        if (s == WGML_OK) s = wgml_affine_dequantize_with(e, w, sc, bi, p, bits, group);
        wgml_tensor_release(w);
        wgml_tensor_release(sc);
        wgml_tensor_release(bi);
        if (s != WGML_OK) {
            wgml_tensor_release(p);
            return s;
        }
        wgml__model_set_param(m, i, p);
        return WGML_OK;
    }
    float *buf = malloc(sizeof(float) * (info.numel ? info.numel : 1));
    if (!buf) return wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "wgml_model_load: out of host memory");
    to_f32(info.dtype, data, info.numel, buf);
    if (nd == 2) s = wgml__model_put_f32(m, i, name, buf, rows, cols, weights);
    else s = wgml_tensor_write(wgml_model_param(m, i, NULL), 0, buf, info.numel * sizeof(float));
    free(buf);
    return s;
}

/* The families wgml runs, by config.json's model_type and architectures[0]: Llama's
   (SmolLM2, TinyLlama, Llama 2 and 3, and MLX conversions of them), Mistral's (Llama's
   with sliding-window attention), Qwen2's (biases on q, k and v) and Qwen3's (each head's
   q and k RMS-normalised), LFM2's (gated short convolutions among attention layers) and
   Gemma 3's text models (gemma3_text: (1 + w) norms around each block, GeGLU, local and
   global attention layers).
   model_type decides what the model computes, so an
   architecture other than Llama's must come with its own model_type. A folder of another
   family may hold Llama-shaped tensors plus more, so it is refused by name rather than
   run without what makes it that family. */
static const char *const families[][2] = {
    { "llama", "LlamaForCausalLM" },
    { "mistral", "MistralForCausalLM" },
    { "qwen2", "Qwen2ForCausalLM" },
    { "qwen3", "Qwen3ForCausalLM" },
    { "lfm2", "Lfm2ForCausalLM" },
    { "gemma3_text", "Gemma3ForCausalLM" },
};
enum { FAM_LLAMA, FAM_MISTRAL, FAM_QWEN2, FAM_QWEN3, FAM_LFM2, FAM_GEMMA3 };
#define FAMILIES (sizeof families / sizeof families[0])

/* The family of a model_type (empty: Llama's), or -1. */
static int family_of_type(const char *model_type)
{
    if (!model_type[0]) return 0;
    for (size_t f = 0; f < FAMILIES; f++)
        if (strcmp(model_type, families[f][0]) == 0) return (int)f;
    return -1;
}

static wgml_status check_architecture(wgml_context *ctx, const wgml_model_config *c)
{
    int f = family_of_type(c->model_type);
    if (f >= 0 && (!c->architecture[0] || strcmp(c->architecture, families[f][1]) == 0)) return WGML_OK;
    return wgml__fail(ctx, WGML_ERROR_UNSUPPORTED, "wgml_model_load: config.json describes model_type '%s'%s%s%s; wgml runs "
                      "model_type llama (LlamaForCausalLM), mistral (MistralForCausalLM), qwen2 (Qwen2ForCausalLM), qwen3 "
                      "(Qwen3ForCausalLM), lfm2 (Lfm2ForCausalLM) and gemma3_text (Gemma3ForCausalLM)", c->model_type, c->architecture[0] ? " (" : "", c->architecture,
                      c->architecture[0] ? ")" : "");
}

/* Tensors of a Llama checkpoint that the model does not need and may be skipped: RoPE
   frequencies saved by old transformers versions (wgml computes them), and lm_head.weight
   beside a tied embedding (transformers ties it over whatever was saved). */
static bool ignorable(const wgml_model_config *c, const char *name)
{
    size_t n = strlen(name);
    const char *inv = ".self_attn.rotary_emb.inv_freq";
    if (n > strlen(inv) && strcmp(name + n - strlen(inv), inv) == 0 && strncmp(name, "model.layers.", 13) == 0) return true;
    return c->tie_word_embeddings && strcmp(name, "lm_head.weight") == 0;
}

/* Every tensor of the file is a parameter, the scales or biases of a quantised one, or
   ignorable: anything else means a model wgml would run without part of it. */
static wgml_status check_no_extra(wgml_context *ctx, const wgml_checkpoint *ck, const wgml_model_config *cfg)
{
    size_t n = wgml__model_param_total(cfg), count = wgml_checkpoint_count(ck);
    /* the names the model uses: each parameter, and its scales and biases when quantised */
    char (*names)[WGML__PARAM_NAME_MAX] = calloc(3 * n, sizeof *names);
    wgml__strmap used;
    if (!names || !wgml__strmap_init(&used, 3 * n)) {
        free(names);
        return wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "wgml_model_load: out of host memory");
    }
    size_t k = 0;
    wgml_status s = WGML_OK;
    for (size_t p = 0; p < n; p++) {
        uint32_t nd;
        uint64_t shape[2];
        char w[WGML__PARAM_NAME_MAX];
        wgml__model_param_spec(cfg, p, w, &nd, shape);
        memcpy(names[k++], w, sizeof w);
        int base = (int)(strlen(w) - strlen(".weight"));
        if (cfg->quantization.bits && nd == 2) {
            snprintf(names[k], WGML__PARAM_NAME_MAX, "%.*s.scales", base, w);
            snprintf(names[k + 1], WGML__PARAM_NAME_MAX, "%.*s.biases", base, w);
            k += 2;
        }
    }
    for (size_t i = 0; i < k; i++)
        if (wgml__strmap_put(&used, names[i], strlen(names[i]), 0, NULL) < 0) {
            s = wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "wgml_model_load: out of host memory");
            break;
        }
    for (size_t i = 0; s == WGML_OK && i < count; i++) {
        wgml_file_tensor info;
        if (wgml_checkpoint_info(ck, i, &info) != WGML_OK) {
            s = wgml__fail(ctx, WGML_ERROR_FORMAT, "wgml_model_load: %s", wgml_last_error(NULL));
            break;
        }
        if (ignorable(cfg, info.name) || wgml__strmap_get(&used, info.name, strlen(info.name), NULL)) continue;
        char q[WGML__QUOTE_MAX];
        s = wgml__fail(ctx, WGML_ERROR_UNSUPPORTED, "wgml_model_load: the checkpoint has tensor '%s', which a Llama model of "
                       "this config.json does not have (another architecture, or a config.json that does not match the "
                       "weights)", wgml__quote(q, sizeof q, info.name, strlen(info.name)));
    }
    wgml__strmap_free(&used);
    free(names);
    return s;
}

/* The dtype of the file's weights: the embedding's, or its scales' when quantised. */
static wgml_dtype file_dtype(const wgml_checkpoint *ck, const wgml_model *m)
{
    const char *name;
    wgml_model_param(m, 0, &name);
    char sname[512], bname[512];
    wgml_file_tensor info;
    int64_t idx = wgml_checkpoint_find(ck, name);
    if (idx < 0 || wgml_checkpoint_info(ck, (size_t)idx, &info) != WGML_OK) return WGML_F32;
    if (info.dtype == WGML_ST_U32) {
        quant_names(name, sname, bname, sizeof sname);
        idx = wgml_checkpoint_find(ck, sname);
        if (idx < 0 || wgml_checkpoint_info(ck, (size_t)idx, &info) != WGML_OK) return WGML_F32;
    }
    wgml_dtype d;
    return wgml_safetensors_dtype_to_wgml(info.dtype, &d) && (d == WGML_F16 || d == WGML_BF16) ? d : WGML_F32;
}

wgml_status wgml_model_load(wgml_engine *e, const char *path, wgml_model **out)
{
    return wgml_model_load_with(e, path, NULL, out);
}

wgml_status wgml_model_load_with(wgml_engine *e, const char *path, const wgml_model_load_options *opts, wgml_model **out)
{
    const char *fn = "wgml_model_load";
    if (out) *out = NULL;
    WGML_CHECK(wgml__check_engine(e, fn));
    wgml_context *ctx = e->ctx;
    if (!path || !out) return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", fn, path ? "out" : "path");
    wgml_weights weights = opts ? opts->weights : WGML_WEIGHTS_F32;
    if (weights < WGML_WEIGHTS_F32 || weights > WGML_WEIGHTS_Q4)
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: opts weights is %d; it must be a wgml_weights", fn, (int)weights);
    size_t plen = strlen(path);
    if (plen > 5 && strcmp(path + plen - 5, ".gguf") == 0) return wgml__model_load_gguf(e, path, weights, out);

    /* config.json sits in the folder, or beside the file given */
    char dir[PATH_MAX], cfg_path[PATH_MAX + 16];
    struct stat st;
    if (stat(path, &st) != 0) return wgml__fail(ctx, WGML_ERROR_IO, "%s: %s: %s", fn, path, strerror(errno));
    if (strlen(path) >= sizeof dir) return wgml__fail(ctx, WGML_ERROR_IO, "%s: path too long", fn);
    strcpy(dir, path);
    if (!S_ISDIR(st.st_mode)) {
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        else strcpy(dir, ".");
    }
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", dir);
    wgml_model_config cfg;
    wgml_status s = wgml_model_config_load(cfg_path, &cfg);
    if (s != WGML_OK) return wgml__fail(ctx, s, "%s: %s", fn, wgml_last_error(NULL));
    WGML_CHECK(check_architecture(ctx, &cfg));
    s = wgml__model_check_config(ctx, fn, &cfg);
    if (s != WGML_OK) return s;
    wgml_checkpoint *ck = NULL;
    s = wgml_checkpoint_open(path, &ck);
    if (s != WGML_OK) return wgml__fail(ctx, s, "%s: %s", fn, wgml_last_error(NULL));

    /* every tensor is checked against config.json before any device memory is taken: a
       config describing a model far larger than its file fails here, not in an allocator */
    size_t n = wgml__model_param_total(&cfg);
    for (size_t i = 0; s == WGML_OK && i < n; i++) {
        char name[WGML__PARAM_NAME_MAX];
        uint32_t nd;
        uint64_t shape[2];
        wgml__model_param_spec(&cfg, i, name, &nd, shape);
        s = check_param(ctx, ck, &cfg, name, nd, shape);
    }
    if (s == WGML_OK) s = check_no_extra(ctx, ck, &cfg);
    wgml_model *m = NULL;
    if (s == WGML_OK) {
        s = wgml__model_create(e, &cfg, WGML__PARAMS_NO_MATRICES, &m);   /* every parameter is written below */
        if (s != WGML_OK) {   /* the message names this function */
            char msg[512];
            snprintf(msg, sizeof msg, "%s", wgml_last_error(ctx));
            s = wgml__fail(ctx, s, "%s: %s", fn, msg);
        }
    }
    for (size_t i = 0; s == WGML_OK && i < wgml_model_param_count(m); i++) s = load_param(e, ck, &cfg, m, i, weights);
    if (s == WGML_OK) wgml__model_set_file_dtype(m, file_dtype(ck, m));
    if (s == WGML_OK) s = wgml_context_flush(ctx);
    wgml_checkpoint_close(ck);
    if (s != WGML_OK) {
        wgml_model_destroy(m);
        return s;
    }
    *out = m;
    return WGML_OK;
}

/* ---- saving ------------------------------------------------------------------------------ */

static wgml_status write_config(wgml_context *ctx, const wgml_model_config *c, wgml_dtype dtype, const char *path)
{
    size_t tmp_size = strlen(path) + 32;
    char *tmp = malloc(tmp_size);
    if (!tmp) return wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "wgml_model_save: out of host memory");
    snprintf(tmp, tmp_size, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) {
        wgml_status s = wgml__fail(ctx, WGML_ERROR_IO, "wgml_model_save: %s: %s", tmp, strerror(errno));
        free(tmp);
        return s;
    }
    /* the family that computes what the model does: its flags first (a model made through
       the API may leave model_type empty), then its model_type */
    int fam = c->gemma ? FAM_GEMMA3 : c->conv_kernel ? FAM_LFM2 : c->qk_norm ? FAM_QWEN3 : c->qkv_bias ? FAM_QWEN2
                                                                        : family_of_type(c->model_type);
    if (fam <= 0) fam = c->sliding_window ? FAM_MISTRAL : FAM_LLAMA;
    fprintf(f, "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n", families[fam][1], families[fam][0]);
    fprintf(f, "  \"vocab_size\": %u,\n  \"hidden_size\": %u,\n  \"intermediate_size\": %u,\n", c->vocab_size, c->hidden_size,
            c->intermediate_size);
    fprintf(f, "  \"num_hidden_layers\": %u,\n  \"num_attention_heads\": %u,\n  \"num_key_value_heads\": %u,\n",
            c->num_hidden_layers, c->num_attention_heads, c->num_key_value_heads);
    fprintf(f, "  \"head_dim\": %u,\n  \"max_position_embeddings\": %u,\n", c->head_dim, c->max_position_embeddings);
    fprintf(f, "  \"rms_norm_eps\": %.9g,\n  \"rope_theta\": %.9g,\n", c->rms_norm_eps, c->rope_theta > 0 ? c->rope_theta : 10000.0);
    if (c->rope_scaling.type == WGML_ROPE_SCALING_LINEAR)
        fprintf(f, "  \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": %.9g},\n", c->rope_scaling.factor);
    else if (c->rope_scaling.type == WGML_ROPE_SCALING_LLAMA3)
        fprintf(f, "  \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": %.9g, \"low_freq_factor\": %.9g, "
                "\"high_freq_factor\": %.9g, \"original_max_position_embeddings\": %u},\n", c->rope_scaling.factor,
                c->rope_scaling.low_freq_factor, c->rope_scaling.high_freq_factor,
                c->rope_scaling.original_max_position_embeddings);
    if (c->bos_token_id >= 0) fprintf(f, "  \"bos_token_id\": %lld,\n", (long long)c->bos_token_id);
    if (c->num_eos_token_ids == 1) fprintf(f, "  \"eos_token_id\": %u,\n", c->eos_token_ids[0]);
    else if (c->num_eos_token_ids > 1) {
        fprintf(f, "  \"eos_token_id\": [");
        for (uint32_t i = 0; i < c->num_eos_token_ids; i++) fprintf(f, "%s%u", i ? ", " : "", c->eos_token_ids[i]);
        fprintf(f, "],\n");
    }
    const char *act = c->hidden_act == WGML_HIDDEN_ACT_GELU_TANH ? "gelu_pytorch_tanh" : "silu";
    fprintf(f, "  \"%s\": \"%s\",\n  \"attention_bias\": false,\n  \"mlp_bias\": false,\n",
            fam == FAM_GEMMA3 ? "hidden_activation" : "hidden_act", act);
    if (fam == FAM_GEMMA3) {   /* its local / global layers, their RoPE bases, the attention's scale */
        fprintf(f, "  \"sliding_window\": %u,\n  \"layer_types\": [", c->sliding_window);
        for (uint32_t l = 0; l < c->num_hidden_layers; l++)
            fprintf(f, "%s\"%s\"", l ? ", " : "",
                    c->full_attention_layers[l / 32] >> (l % 32) & 1 ? "full_attention" : "sliding_attention");
        fprintf(f, "],\n  \"rope_local_base_freq\": %.17g,\n  \"query_pre_attn_scalar\": %.17g,\n",
                c->rope_local_theta > 0 ? c->rope_local_theta : c->rope_theta > 0 ? c->rope_theta : 10000.0,
                c->query_pre_attn_scalar > 0 ? c->query_pre_attn_scalar : (double)c->head_dim);
        fprintf(f, "  \"attn_logit_softcapping\": null,\n  \"final_logit_softcapping\": null,\n");
    } else if (fam == FAM_LFM2) {   /* LFM2: its own names for the norm's epsilon and the MLP's size, which is the size itself */
        fprintf(f, "  \"norm_eps\": %.9g,\n  \"conv_L_cache\": %u,\n  \"conv_bias\": false,\n", c->rms_norm_eps,
                c->conv_kernel);
        fprintf(f, "  \"block_auto_adjust_ff_dim\": false,\n  \"layer_types\": [");
        for (uint32_t l = 0; l < c->num_hidden_layers; l++)
            fprintf(f, "%s\"%s\"", l ? ", " : "", c->conv_layers[l / 32] >> (l % 32) & 1 ? "conv" : "full_attention");
        fprintf(f, "],\n");
    } else if (fam == FAM_MISTRAL) {
        if (c->sliding_window) fprintf(f, "  \"sliding_window\": %u,\n", c->sliding_window);
        else fprintf(f, "  \"sliding_window\": null,\n");
    } else if (fam == FAM_QWEN2 || fam == FAM_QWEN3) {
        fprintf(f, "  \"use_sliding_window\": %s,\n  \"sliding_window\": %u,\n  \"max_window_layers\": 0,\n",
                c->sliding_window ? "true" : "false", c->sliding_window ? c->sliding_window : 4096);
    }
    fprintf(f, "  \"tie_word_embeddings\": %s,\n  \"torch_dtype\": \"%s\"\n}\n", c->tie_word_embeddings ? "true" : "false",
            dtype == WGML_F16 ? "float16" : dtype == WGML_BF16 ? "bfloat16" : "float32");
    bool ok = !ferror(f);
    ok = (fflush(f) == 0) && ok;
    ok = (fsync(fileno(f)) == 0) && ok;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        int err = errno;
        unlink(tmp);
        free(tmp);
        return wgml__fail(ctx, WGML_ERROR_IO, "wgml_model_save: writing %s: %s", path, strerror(err));
    }
    free(tmp);
    return WGML_OK;
}

/* f32 values to 16-bit ones in place (element i of the output lies within element i / 2
   of the input, read before it is overwritten); false when F16 cannot hold a finite one
   (*bad its index). */
static bool to_16_bits(float *v, size_t n, wgml_dtype dtype, size_t *bad)
{
    uint16_t *out = (uint16_t *)(void *)v;
    for (size_t i = 0; i < n; i++) {
        float x = v[i];
        uint16_t h = dtype == WGML_F16 ? wgml__float_to_half(x) : wgml__float_to_bf16(x);
        if (dtype == WGML_F16 && isfinite(x) && (h & 0x7FFFu) == 0x7C00u) {
            *bad = i;
            return false;
        }
        out[i] = h;
    }
    return true;
}

wgml_status wgml_model_save(wgml_model *m, const char *dir)
{
    if (!m) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_model_save: m is NULL");
    return wgml_model_save_with(m, dir, NULL);
}

wgml_status wgml_model_save_with(wgml_model *m, const char *dir, const wgml_model_save_options *opts)
{
    const char *fn = opts ? "wgml_model_save_with" : "wgml_model_save";
    if (!m) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: m is NULL", fn);
    wgml_tensor *p0 = wgml_model_param(m, 0, NULL);
    wgml_context *ctx = wgml_tensor_context(p0);
    if (!dir) return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: dir is NULL", fn);
    wgml_dtype dtype = opts ? opts->dtype : WGML_F32;
    if (dtype != WGML_F32 && dtype != WGML_F16 && dtype != WGML_BF16)
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: opts dtype %s; a model is saved as F32, F16 or BF16", fn,
                          wgml_dtype_name(dtype));
    /* the folder first: a save that cannot write reads nothing back */
    bool made = mkdir(dir, 0777) == 0;
    if (!made && errno != EEXIST) return wgml__fail(ctx, WGML_ERROR_IO, "%s: cannot create %s: %s", fn, dir, strerror(errno));
    size_t n = wgml_model_param_count(m);
    wgml_safetensors_entry *entries = calloc(n, sizeof *entries);
    if (!entries) {
        if (made) rmdir(dir);
        return wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    }
    wgml_status s = WGML_OK;
    for (size_t i = 0; i < n && s == WGML_OK; i++) {
        const char *name;
        wgml_tensor *t = wgml_model_param(m, i, &name);
        entries[i].name = name;
        entries[i].dtype = wgml_safetensors_dtype_from_wgml(dtype);
        entries[i].ndim = wgml_tensor_ndim(t);
        for (uint32_t d = 0; d < entries[i].ndim; d++) entries[i].shape[d] = wgml_tensor_dim(t, d);
        if (conv_weight(name)) {   /* [hidden, 1, K], as Conv1d keeps it */
            entries[i].ndim = 3;
            entries[i].shape[2] = entries[i].shape[1];
            entries[i].shape[1] = 1;
        }
        void *buf = malloc(wgml_tensor_numel(t) * sizeof(float));
        if (!buf) { s = wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", fn); break; }
        entries[i].data = buf;
        if (wgml_tensor_dtype(t) == WGML_F32) s = wgml_tensor_read(t, 0, buf, wgml_tensor_nbytes(t));
        else {   /* a packed or 16-bit matrix: unpacked to f32 on the device */
            wgml_tensor *f = NULL;
            s = wgml_tensor_create(ctx, WGML_F32, 1, (size_t[]){ wgml_tensor_numel(t) }, &f);
            if (s == WGML_OK) s = wgml_unpack(wgml__model_engine(m), t, f);
            if (s == WGML_OK) s = wgml_tensor_read(f, 0, buf, wgml_tensor_numel(t) * sizeof(float));
            wgml_tensor_release(f);
        }
        size_t bad;
        if (s == WGML_OK && dtype != WGML_F32 && !to_16_bits(buf, wgml_tensor_numel(t), dtype, &bad))
            s = wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: %s[%zu] = %g is beyond F16's range (+-65504): save as BF16 or "
                           "F32", fn, name, bad, ((float *)buf)[bad]);
    }
    char path[PATH_MAX + 32];
    if (s == WGML_OK) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        s = wgml_safetensors_write(path, entries, n, "{\"format\":\"pt\"}");
        if (s != WGML_OK) s = wgml__fail(ctx, s, "%s: %s", fn, wgml_last_error(NULL));
    }
    if (s == WGML_OK) {
        snprintf(path, sizeof path, "%s/config.json", dir);
        s = write_config(ctx, wgml_model_get_config(m), dtype, path);
    }
    for (size_t i = 0; i < n; i++) free((void *)entries[i].data);
    free(entries);
    if (s != WGML_OK && made) rmdir(dir);   /* removed when nothing was written into it */
    return s;
}
