/* LoRA adapters (see wgml.h): their tensors, Kaiming-uniform initialisation, PEFT's files,
   and merging. src/model.c runs them: the forward adds scale * (x A^T) B^T to each target,
   the backward computes the adapter's gradients. */
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

/* The projections, in wgml_lora_target bit order: PEFT's module names in each family.
   LFM2's out_proj is both its attention's and its convolution's output projection (PEFT
   matches the name in either block); in_proj only its convolution layers have. */
static const char *const llama_modules[WGML__LORA_KINDS] = { "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                             "up_proj", "down_proj", NULL };
static const char *const lfm2_modules[WGML__LORA_KINDS] = { "q_proj", "k_proj", "v_proj", "out_proj", "w1", "w3", "w2",
                                                            "in_proj" };
static const char *module_of(const wgml_model *m, int k)
{
    return (wgml_model_get_config(m)->conv_kernel ? lfm2_modules : llama_modules)[k];
}

#define MAX_RANK 4096u

wgml_tensor *wgml__lora_base_weight(const wgml_lora *l, uint32_t layer, int k)
{
    return wgml_model_param(l->m, wgml__model_lora_weight(l->m, layer, k), NULL);
}

/* PEFT's key of A or B of target k of layer l: the weight's name with its ".weight" for
   ".lora_A.weight", under "base_model.model.". */
static void key_of(const wgml_model *m, char *buf, size_t size, uint32_t layer, int k, char ab)
{
    const char *name;
    wgml_model_param(m, wgml__model_lora_weight(m, layer, k), &name);
    snprintf(buf, size, "base_model.model.%.*s.lora_%c.weight", (int)(strlen(name) - strlen(".weight")), name, ab);
}

/* The targets the model has in some layer, as bits. */
static uint32_t available(const wgml_model *m)
{
    uint32_t bits = 0, L = wgml_model_get_config(m)->num_hidden_layers;
    for (uint32_t l = 0; l < L; l++)
        for (int k = 0; k < WGML__LORA_KINDS; k++)
            if (wgml__model_lora_weight(m, l, k) != SIZE_MAX) bits |= 1u << k;
    return bits;
}

void wgml_lora_destroy(wgml_lora *l)
{
    if (!l) return;
    if (l->m && wgml__model_lora(l->m) == l) wgml__model_set_lora(l->m, NULL);
    for (size_t i = 0; i < l->nparams; i++) {
        wgml_tensor_release(l->params[i]);
        free(l->names ? l->names[i] : NULL);
    }
    free(l->params);
    free(l->names);
    free(l->a);
    free(l->b);
    free(l);
}

/* Checks d (defaults filled in) against m and allocates the adapter's tensors (zeroed when
   zero), attached to nothing yet. */
static wgml_status make(wgml_model *m, const char *fn, wgml_lora_desc d, bool zero, wgml_lora **out)
{
    *out = NULL;
    wgml_context *ctx = wgml_tensor_context(wgml_model_param(m, 0, NULL));
    if (wgml__model_lora(m)) return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: the model already has an adapter", fn);
    if (!d.rank) d.rank = 8;
    if (d.alpha == 0) d.alpha = 16;
    uint32_t has = available(m);
    if (!d.targets) d.targets = has;   /* WGML_LORA_ALL's meaning: every projection the model has */
    if (d.rank > MAX_RANK) return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: rank %u is over %u", fn, d.rank, MAX_RANK);
    if (!(isfinite(d.alpha) && d.alpha > 0))
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: alpha (%g) must be finite and positive", fn, d.alpha);
    if (d.targets & ~(uint32_t)WGML_LORA_ALL)
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: targets 0x%x has bits outside WGML_LORA_ALL", fn, d.targets);
    if (d.targets == WGML_LORA_ALL) d.targets = has;
    for (int k = 0; k < WGML__LORA_KINDS; k++)
        if (d.targets >> k & 1 && !(has >> k & 1))
            return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: targets has bit %d, a projection (%s) this model does not "
                              "have", fn, k, k == 7 ? "LFM2's in_proj" : module_of(m, k));
    if (!(d.dropout >= 0 && d.dropout < 1))
        return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: dropout (%g) must be in [0, 1)", fn, d.dropout);
    uint32_t L = wgml_model_get_config(m)->num_hidden_layers;
    for (uint32_t layer = 0; layer < L; layer++)
        for (int k = 0; k < WGML__LORA_KINDS; k++) {
            size_t wi = wgml__model_lora_weight(m, layer, k);
            if (!(d.targets & (1u << k)) || wi == SIZE_MAX) continue;
            wgml_tensor *w = wgml_model_param(m, wi, NULL);
            size_t small = wgml_tensor_dim(w, 0) < wgml_tensor_dim(w, 1) ? wgml_tensor_dim(w, 0) : wgml_tensor_dim(w, 1);
            if (d.rank > small)
                return wgml__fail(ctx, WGML_ERROR_INVALID_ARGUMENT, "%s: rank %u is over %s's smaller side (%zu)", fn, d.rank,
                                  module_of(m, k), small);
        }
    wgml_lora *l = calloc(1, sizeof *l);
    if (!l) return wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    l->m = m;
    l->d = d;
    l->scale = d.rslora ? d.alpha / sqrtf((float)d.rank) : d.alpha / (float)d.rank;
    l->layers = L;
    size_t ntargets = 0;   /* target projections over all layers */
    for (uint32_t layer = 0; layer < L; layer++)
        for (int k = 0; k < WGML__LORA_KINDS; k++) ntargets += (d.targets >> k & 1) && wgml__model_lora_weight(m, layer, k) != SIZE_MAX;
    l->a = calloc((size_t)L * WGML__LORA_KINDS, sizeof *l->a);
    l->b = calloc((size_t)L * WGML__LORA_KINDS, sizeof *l->b);
    l->params = calloc(2 * ntargets + 1, sizeof *l->params);
    l->names = calloc(2 * ntargets + 1, sizeof *l->names);
    wgml_status s = l->a && l->b && l->params && l->names ? WGML_OK
                                                          : wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    for (uint32_t layer = 0; layer < L && !s; layer++)
        for (int k = 0; k < WGML__LORA_KINDS && !s; k++) {
            size_t wi = wgml__model_lora_weight(m, layer, k);
            if (!(d.targets & (1u << k)) || wi == SIZE_MAX) continue;
            wgml_tensor *w = wgml_model_param(m, wi, NULL);
            size_t out_dim = wgml_tensor_dim(w, 0), in_dim = wgml_tensor_dim(w, 1);
            size_t slot = (size_t)layer * WGML__LORA_KINDS + (size_t)k;
            for (int ab = 0; ab < 2 && !s; ab++) {
                size_t shape[2] = { ab ? out_dim : d.rank, ab ? d.rank : in_dim };
                wgml_tensor *t = NULL;
                s = wgml_tensor_create(ctx, WGML_F32, 2, shape, &t);
                if (!s && zero) s = wgml_tensor_zero(t);
                if (s) break;
                char name[160];
                key_of(m, name, sizeof name, layer, k, ab ? 'B' : 'A');
                l->params[l->nparams] = t;
                l->names[l->nparams] = strdup(name);
                l->nparams++;
                if (!l->names[l->nparams - 1]) s = wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", fn);
                if (ab) l->b[slot] = t;
                else l->a[slot] = t;
            }
        }
    if (s) {
        l->m = NULL;   /* not attached */
        wgml_lora_destroy(l);
        return s;
    }
    *out = l;
    return WGML_OK;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

wgml_status wgml_lora_create(wgml_model *m, const wgml_lora_desc *desc, uint64_t seed, wgml_lora **out)
{
    const char *fn = "wgml_lora_create";
    if (out) *out = NULL;
    if (!m || !out) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", fn, m ? "out" : "m");
    wgml_lora *l;
    WGML_CHECK(make(m, fn, desc ? *desc : (wgml_lora_desc){ 0 }, true, &l));
    /* A: kaiming_uniform_(a = sqrt(5)), gain sqrt(2 / (1 + 5)), bound gain * sqrt(3 / in)
       = 1 / sqrt(in); B stays zero */
    wgml_status s = WGML_OK;
    uint64_t state = seed;
    for (size_t i = 0; i < l->nparams && !s; i += 2) {
        wgml_tensor *a = l->params[i];
        size_t n = wgml_tensor_numel(a), in = wgml_tensor_dim(a, 1);
        float *buf = malloc(n * sizeof *buf);
        if (!buf) { s = wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", fn); break; }
        double bound = 1.0 / sqrt((double)in);
        for (size_t j = 0; j < n; j++) buf[j] = (float)(bound * (2.0 * ((splitmix(&state) >> 11) * 0x1p-53) - 1.0));
        s = wgml_tensor_write(a, 0, buf, n * sizeof *buf);
        free(buf);
    }
    if (s) {
        wgml_lora_destroy(l);
        return s;
    }
    wgml__model_set_lora(m, l);
    *out = l;
    return WGML_OK;
}

const wgml_lora_desc *wgml_lora_get_desc(const wgml_lora *l) { return l ? &l->d : NULL; }
float wgml_lora_scale(const wgml_lora *l) { return l ? l->scale : 0; }
size_t wgml_lora_param_count(const wgml_lora *l) { return l ? l->nparams : 0; }

wgml_tensor *wgml_lora_param(const wgml_lora *l, size_t i, const char **name)
{
    if (!l || i >= l->nparams) return NULL;
    if (name) *name = l->names[i];
    return l->params[i];
}

uint64_t wgml_lora_numel(const wgml_lora *l)
{
    uint64_t n = 0;
    for (size_t i = 0; l && i < l->nparams; i++) n += wgml_tensor_numel(l->params[i]);
    return n;
}

/* ---- PEFT's files ------------------------------------------------------------------- */

static wgml_status write_text_atomic(wgml_context *ctx, const char *fn, const char *path, const char *text)
{
    char tmp[PATH_MAX + 128];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return wgml__fail(ctx, WGML_ERROR_IO, "%s: %s: %s", fn, tmp, strerror(errno));
    bool ok = fputs(text, f) >= 0;
    ok = fflush(f) == 0 && ok;
    ok = fsync(fileno(f)) == 0 && ok;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        int err = errno;
        unlink(tmp);
        return wgml__fail(ctx, WGML_ERROR_IO, "%s: writing %s: %s", fn, path, strerror(err));
    }
    return WGML_OK;
}

/* The shortest decimal that reads back as f (0.1f is written 0.1, not 0.10000000149011612). */
static double float_decimal(float f)
{
    char buf[32];
    for (int digits = 1; digits < 9; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, (double)f);
        if (strtof(buf, NULL) == f) return strtod(buf, NULL);
    }
    return (double)f;
}

wgml_status wgml_lora_save(const wgml_lora *l, const char *dir, const char *base_model)
{
    const char *fn = "wgml_lora_save";
    if (!l || !dir) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", fn, l ? "dir" : "l");
    wgml_context *ctx = wgml_tensor_context(l->params[0]);
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) return wgml__fail(ctx, WGML_ERROR_IO, "%s: cannot create %s: %s", fn, dir, strerror(errno));
    wgml_safetensors_entry *e = calloc(l->nparams, sizeof *e);
    if (!e) return wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    wgml_status s = WGML_OK;
    for (size_t i = 0; i < l->nparams && !s; i++) {
        wgml_tensor *t = l->params[i];
        void *buf = malloc(wgml_tensor_nbytes(t));
        if (!buf) { s = wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", fn); break; }
        e[i] = (wgml_safetensors_entry){ .name = l->names[i], .dtype = WGML_ST_F32, .ndim = 2,
                                         .shape = { wgml_tensor_dim(t, 0), wgml_tensor_dim(t, 1) }, .data = buf };
        s = wgml_tensor_read(t, 0, buf, wgml_tensor_nbytes(t));
    }
    char path[PATH_MAX + 64];
    if (!s) {
        snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
        s = wgml_safetensors_write(path, e, l->nparams, "{\"format\":\"pt\"}");
        if (s) s = wgml__fail(ctx, s, "%s: %s", fn, wgml_last_error(NULL));
    }
    for (size_t i = 0; i < l->nparams; i++) free((void *)e[i].data);
    free(e);
    if (s) return s;
    /* the config as PEFT writes it (its keys; the values wgml's adapters have) */
    cJSON *c = cJSON_CreateObject(), *mods = cJSON_CreateArray();
    bool ok = c && mods;
    for (int k = 0; k < WGML__LORA_KINDS && ok; k++)
        if (l->d.targets & (1u << k)) ok = cJSON_AddItemToArray(mods, cJSON_CreateString(module_of(l->m, k)));
    ok = ok && cJSON_AddItemToObject(c, "alpha_pattern", cJSON_CreateObject());
    ok = ok && cJSON_AddItemToObject(c, "auto_mapping", cJSON_CreateNull());
    ok = ok && cJSON_AddItemToObject(c, "base_model_name_or_path", base_model ? cJSON_CreateString(base_model) : cJSON_CreateNull());
    ok = ok && cJSON_AddItemToObject(c, "bias", cJSON_CreateString("none"));
    ok = ok && cJSON_AddItemToObject(c, "fan_in_fan_out", cJSON_CreateFalse());
    ok = ok && cJSON_AddItemToObject(c, "inference_mode", cJSON_CreateTrue());
    ok = ok && cJSON_AddItemToObject(c, "init_lora_weights", cJSON_CreateTrue());
    ok = ok && cJSON_AddItemToObject(c, "layers_pattern", cJSON_CreateNull());
    ok = ok && cJSON_AddItemToObject(c, "layers_to_transform", cJSON_CreateNull());
    ok = ok && cJSON_AddItemToObject(c, "lora_alpha", cJSON_CreateNumber(float_decimal(l->d.alpha)));
    ok = ok && cJSON_AddItemToObject(c, "lora_dropout", cJSON_CreateNumber(float_decimal(l->d.dropout)));
    ok = ok && cJSON_AddItemToObject(c, "modules_to_save", cJSON_CreateNull());
    ok = ok && cJSON_AddItemToObject(c, "peft_type", cJSON_CreateString("LORA"));
    ok = ok && cJSON_AddItemToObject(c, "r", cJSON_CreateNumber(l->d.rank));
    ok = ok && cJSON_AddItemToObject(c, "rank_pattern", cJSON_CreateObject());
    ok = ok && cJSON_AddItemToObject(c, "revision", cJSON_CreateNull());
    ok = ok && cJSON_AddItemToObject(c, "target_modules", mods);
    mods = NULL;
    ok = ok && cJSON_AddItemToObject(c, "task_type", cJSON_CreateString("CAUSAL_LM"));
    ok = ok && cJSON_AddItemToObject(c, "use_dora", cJSON_CreateFalse());
    ok = ok && cJSON_AddItemToObject(c, "use_rslora", l->d.rslora ? cJSON_CreateTrue() : cJSON_CreateFalse());
    char *text = ok ? cJSON_Print(c) : NULL;
    cJSON_Delete(c);
    cJSON_Delete(mods);
    if (!text) return wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    size_t n = strlen(text);
    char *with_nl = malloc(n + 2);
    if (!with_nl) {
        cJSON_free(text);
        return wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", fn);
    }
    memcpy(with_nl, text, n);
    with_nl[n] = '\n';
    with_nl[n + 1] = 0;
    cJSON_free(text);
    s = write_text_atomic(ctx, fn, path, with_nl);
    free(with_nl);
    return s;
}

/* ---- reading PEFT's files ------------------------------------------------------------ */

static wgml_status unsupported_if(wgml_context *ctx, const char *what, const cJSON *root, const char *key, bool (*fine)(const cJSON *))
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!it || fine(it)) return WGML_OK;
    return wgml__fail(ctx, WGML_ERROR_UNSUPPORTED, "wgml_lora_load: %s: %s is set; wgml runs plain LoRA adapters only", what, key);
}

static bool null_or_false(const cJSON *it) { return cJSON_IsNull(it) || cJSON_IsFalse(it); }
static bool null_or_empty(const cJSON *it) { return cJSON_IsNull(it) || ((cJSON_IsObject(it) || cJSON_IsArray(it)) && !it->child); }

/* The config's targets as wgml_lora_target bits. */
static wgml_status read_targets(wgml_context *ctx, const wgml_model *m, const char *what, const cJSON *mods, uint32_t *bits)
{
    *bits = 0;
    if (!cJSON_IsArray(mods))
        return wgml__fail(ctx, WGML_ERROR_UNSUPPORTED, "wgml_lora_load: %s: target_modules must be a list of module names (a "
                          "regular expression is not supported)", what);
    for (const cJSON *e = mods->child; e; e = e->next) {
        int found = -1;
        for (int k = 0; k < WGML__LORA_KINDS && cJSON_IsString(e); k++)
            if (module_of(m, k) && strcmp(e->valuestring, module_of(m, k)) == 0) found = k;
        if (found < 0) {
            char q[WGML__QUOTE_MAX], list[160] = "";
            for (int k = 0; k < WGML__LORA_KINDS; k++)
                if (available(m) >> k & 1)
                    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", list[0] ? ", " : "", module_of(m, k));
            const char *name = cJSON_IsString(e) ? e->valuestring : "(not a string)";
            return wgml__fail(ctx, WGML_ERROR_UNSUPPORTED, "wgml_lora_load: %s: target module '%s' is not one of %s", what,
                              wgml__quote(q, sizeof q, name, strlen(name)), list);
        }
        *bits |= 1u << found;
    }
    if (!*bits) return wgml__fail(ctx, WGML_ERROR_FORMAT, "wgml_lora_load: %s: target_modules is empty", what);
    return WGML_OK;
}

static bool to_f32(wgml_safetensors_dtype dt, const uint8_t *p, size_t n, float *dst)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        if (dt == WGML_ST_F32) {
            memcpy(&dst[i], p + 4 * i, 4);
            continue;
        }
        uint16_t h = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
        if (dt == WGML_ST_BF16) bits = (uint32_t)h << 16;
        else if (dt == WGML_ST_F16) {
            uint32_t sign = (uint32_t)(h >> 15) << 31, ex = (h >> 10) & 31, man = h & 1023;
            if (ex == 31) bits = sign | 0x7F800000u | (man << 13);
            else if (ex) bits = sign | ((ex + 112) << 23) | (man << 13);
            else if (!man) bits = sign;
            else {
                int e = -1;
                do { man <<= 1; e++; } while (!(man & 1024));
                bits = sign | ((uint32_t)(112 - e) << 23) | ((man & 1023) << 13);
            }
        } else return false;
        memcpy(&dst[i], &bits, 4);
    }
    return true;
}

wgml_status wgml_lora_load(wgml_model *m, const char *dir, wgml_lora **out)
{
    const char *fn = "wgml_lora_load";
    if (out) *out = NULL;
    if (!m || !dir || !out) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: m, dir and out must not be NULL", fn);
    wgml_context *ctx = wgml_tensor_context(wgml_model_param(m, 0, NULL));
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    char *json = NULL;
    size_t len = 0;
    cJSON *root = NULL;
    wgml_status s = wgml__read_file(path, true, (size_t)1 << 20, &json, &len);
    if (!s) s = wgml__json_parse(path, json, len, 0, &root);
    free(json);
    if (s) return wgml__fail(ctx, s, "%s: %s", fn, wgml_last_error(NULL));
    wgml_lora_desc d = { 0 };
    uint64_t v;
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(root, "peft_type");
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(root, "r"), *alpha = cJSON_GetObjectItemCaseSensitive(root, "lora_alpha");
    const cJSON *drop = cJSON_GetObjectItemCaseSensitive(root, "lora_dropout"), *rs = cJSON_GetObjectItemCaseSensitive(root, "use_rslora");
    const cJSON *bias = cJSON_GetObjectItemCaseSensitive(root, "bias");
    if (!cJSON_IsObject(root)) s = wgml__fail(ctx, WGML_ERROR_FORMAT, "%s: %s: must be a JSON object", fn, path);
    else if (!cJSON_IsString(pt) || strcmp(pt->valuestring, "LORA") != 0)
        s = wgml__fail(ctx, WGML_ERROR_UNSUPPORTED, "%s: %s: peft_type must be \"LORA\"", fn, path);
    else if (!wgml__json_uint_ok(r, MAX_RANK, &v) || v == 0)
        s = wgml__fail(ctx, WGML_ERROR_FORMAT, "%s: %s: r must be an integer in [1, %u]", fn, path, MAX_RANK);
    else if (!cJSON_IsNumber(alpha) || !(alpha->valuedouble > 0) || !isfinite(alpha->valuedouble))
        s = wgml__fail(ctx, WGML_ERROR_FORMAT, "%s: %s: lora_alpha must be a positive number", fn, path);
    else if (bias && !(cJSON_IsString(bias) && strcmp(bias->valuestring, "none") == 0))
        s = wgml__fail(ctx, WGML_ERROR_UNSUPPORTED, "%s: %s: bias must be \"none\" (adapters with biases are not supported)", fn, path);
    if (!s) {
        d.rank = (uint32_t)v;
        d.alpha = (float)alpha->valuedouble;
        d.rslora = cJSON_IsTrue(rs);
    }
    /* dropout only matters in training (a trainer of this adapter drops its inputs; running
       it never does); a value outside [0, 1) is refused, an absent one is 0 */
    if (!s && drop && !cJSON_IsNull(drop)) {
        if (!cJSON_IsNumber(drop) || !(drop->valuedouble >= 0 && drop->valuedouble < 1))
            s = wgml__fail(ctx, WGML_ERROR_FORMAT, "%s: %s: lora_dropout must be a number in [0, 1)", fn, path);
        else d.dropout = (float)drop->valuedouble;
    }
    if (!s) s = unsupported_if(ctx, path, root, "use_dora", null_or_false);
    if (!s) s = unsupported_if(ctx, path, root, "fan_in_fan_out", null_or_false);
    if (!s) s = unsupported_if(ctx, path, root, "modules_to_save", null_or_empty);
    if (!s) s = unsupported_if(ctx, path, root, "rank_pattern", null_or_empty);
    if (!s) s = unsupported_if(ctx, path, root, "alpha_pattern", null_or_empty);
    if (!s) s = unsupported_if(ctx, path, root, "layers_to_transform", null_or_empty);
    if (!s) s = read_targets(ctx, m, path, cJSON_GetObjectItemCaseSensitive(root, "target_modules"), &d.targets);
    cJSON_Delete(root);
    if (s) return s;

    /* the tensors: every key PEFT would write for this config, of the right shape, and no
       other, checked before anything is allocated */
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    wgml_checkpoint *ck = NULL;
    s = wgml_checkpoint_open(path, &ck);
    if (s) return wgml__fail(ctx, s, "%s: %s", fn, wgml_last_error(NULL));
    uint32_t L = wgml_model_get_config(m)->num_hidden_layers;
    size_t expected = 0;
    for (uint32_t layer = 0; layer < L && !s; layer++)
        for (int k = 0; k < WGML__LORA_KINDS && !s; k++) {
            size_t wi = wgml__model_lora_weight(m, layer, k);
            if (!(d.targets & (1u << k)) || wi == SIZE_MAX) continue;
            wgml_tensor *w = wgml_model_param(m, wi, NULL);
            for (int ab = 0; ab < 2 && !s; ab++) {
                char key[160];
                key_of(m, key, sizeof key, layer, k, ab ? 'B' : 'A');
                uint64_t want0 = ab ? wgml_tensor_dim(w, 0) : d.rank, want1 = ab ? d.rank : wgml_tensor_dim(w, 1);
                int64_t idx = wgml_checkpoint_find(ck, key);
                wgml_file_tensor info;
                if (idx < 0) s = wgml__fail(ctx, WGML_ERROR_FORMAT, "%s: %s has no tensor '%s'", fn, path, key);
                else if (wgml_checkpoint_info(ck, (size_t)idx, &info) != WGML_OK || info.ndim != 2 || info.shape[0] != want0 ||
                         info.shape[1] != want1)
                    s = wgml__fail(ctx, WGML_ERROR_FORMAT, "%s: tensor '%s' must be [%llu, %llu] for this model and rank", fn,
                                   key, (unsigned long long)want0, (unsigned long long)want1);
                else if (info.dtype != WGML_ST_F32 && info.dtype != WGML_ST_F16 && info.dtype != WGML_ST_BF16)
                    s = wgml__fail(ctx, WGML_ERROR_FORMAT, "%s: tensor '%s' has dtype %s; expected F32, F16 or BF16", fn, key,
                                   wgml_safetensors_dtype_name(info.dtype));
                expected++;
            }
        }
    if (!s && wgml_checkpoint_count(ck) != expected)
        s = wgml__fail(ctx, WGML_ERROR_FORMAT, "%s: %s has %zu tensors where this config gives %zu (tensors of other modules "
                       "or layers?)", fn, path, wgml_checkpoint_count(ck), expected);
    wgml_lora *l = NULL;
    if (!s) s = make(m, fn, d, false, &l);
    for (size_t i = 0; !s && i < l->nparams; i++) {
        int64_t idx = wgml_checkpoint_find(ck, l->names[i]);
        wgml_file_tensor info;
        wgml_checkpoint_info(ck, (size_t)idx, &info);
        float *buf = malloc(info.numel * sizeof *buf);
        if (!buf) { s = wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", fn); break; }
        to_f32(info.dtype, wgml_checkpoint_data(ck, (size_t)idx), info.numel, buf);
        s = wgml_tensor_write(l->params[i], 0, buf, info.numel * sizeof *buf);
        free(buf);
    }
    wgml_checkpoint_close(ck);
    if (s) {
        wgml_lora_destroy(l);
        return s;
    }
    wgml__model_set_lora(m, l);
    *out = l;
    return WGML_OK;
}

/* ---- merging ------------------------------------------------------------------------ */

wgml_status wgml_lora_merge(wgml_lora *l)
{
    const char *fn = "wgml_lora_merge";
    if (!l) return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "%s: l is NULL", fn);
    wgml_context *ctx = wgml_tensor_context(l->params[0]);
    wgml_engine *e = wgml__model_engine(l->m);
    WGML_CHECK(wgml__model_refuse_packed(l->m, fn, "merging an adapter into the weights"));
    wgml_status s = WGML_OK;
    /* W += (scale B) A: B scaled in a copy, then added through the product's accumulate */
    wgml_tensor *bs = NULL;
    const wgml_matmul_options acc = { .accumulate = true };
    for (uint32_t layer = 0; layer < l->layers && !s; layer++)
        for (int k = 0; k < WGML__LORA_KINDS && !s; k++) {
            size_t slot = (size_t)layer * WGML__LORA_KINDS + (size_t)k;
            if (!l->a[slot]) continue;
            wgml_tensor *b = l->b[slot];
            size_t shape[2] = { wgml_tensor_dim(b, 0), wgml_tensor_dim(b, 1) };
            s = wgml_tensor_create(ctx, WGML_F32, 2, shape, &bs);
            if (!s) s = wgml_copy_tensor(e, b, bs, 0);
            if (!s) s = wgml_gradient_scale(e, bs, l->scale);
            if (!s) s = wgml_matmul_with(e, bs, l->a[slot], wgml__lora_base_weight(l, layer, k), &acc);
            wgml_tensor_release(bs);
            bs = NULL;
        }
    if (s) return s;
    wgml_lora_destroy(l);
    return WGML_OK;
}
