/* See model_files.h. */
#include "model_files.h"

#include "dist.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

int model_device(const char *who, const char *precision, wgml_context **ctx, wgml_engine **eng)
{
    *ctx = NULL;
    *eng = NULL;
    wgml_context_desc desc = { 0 };
    if (cli_precision(who, precision, &desc.matmul_precision) != 0) return -1;
    if (wgml_context_create(&desc, ctx) != WGML_OK) {
        fprintf(stderr, "%s: %s\n", who, wgml_last_error(NULL));
        return -1;
    }
    if (wgml_engine_create(*ctx, eng) != WGML_OK) {
        fprintf(stderr, "%s: %s\n", who, wgml_last_error(*ctx));
        wgml_context_destroy(*ctx);
        *ctx = NULL;
        return -1;
    }
    return 0;
}

const char *model_folder(const char *model, char *dir, size_t size)
{
    struct stat st;
    snprintf(dir, size, "%s", model);
    if (stat(model, &st) == 0 && !S_ISDIR(st.st_mode)) {
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        else snprintf(dir, size, ".");
    }
    return dir;
}

int model_weights(const char *who, const char *dtype, const char *quantize, wgml_weights *out)
{
    bool f32 = dtype && !strcmp(dtype, "f32");
    if (dtype && !f32 && strcmp(dtype, "auto") != 0) {
        fprintf(stderr, "%s: --dtype %s: it must be auto or f32\n", who, dtype);
        return -1;
    }
    *out = f32 ? WGML_WEIGHTS_F32 : WGML_WEIGHTS_KEEP;
    if (!quantize || !quantize[0]) return 0;
    if (strcmp(quantize, "q8") != 0 && strcmp(quantize, "q4") != 0) {
        fprintf(stderr, "%s: --quantize %s: it must be q8 or q4\n", who, quantize);
        return -1;
    }
    if (f32) {
        fprintf(stderr, "%s: --quantize and --dtype f32 contradict each other\n", who);
        return -1;
    }
    *out = quantize[1] == '8' ? WGML_WEIGHTS_Q8 : WGML_WEIGHTS_Q4;
    return 0;
}

const char *model_weights_name(const wgml_model *m, char *buf, size_t size)
{
    char seen[8][24];
    size_t n = 0;
    for (size_t i = 0; i < wgml_model_param_count(m); i++) {
        wgml_tensor *t = wgml_model_param(m, i, NULL);
        if (wgml_tensor_ndim(t) != 2) continue;
        wgml_packed_desc d = wgml_tensor_packed_desc(t);
        char name[24];
        if (d.dtype == WGML_AFFINE) snprintf(name, sizeof name, "affine %u-bit", d.bits);
        else snprintf(name, sizeof name, "%s", wgml_dtype_name(d.dtype));
        bool known = false;
        for (size_t k = 0; k < n && !known; k++) known = !strcmp(seen[k], name);
        if (!known && n < 8) memcpy(seen[n++], name, sizeof name);
    }
    buf[0] = 0;
    for (size_t k = 0; k < n; k++) {
        size_t at = strlen(buf);
        snprintf(buf + at, size - at, "%s%s", k == 0 ? "" : k + 1 == n ? " and " : ", ", seen[k]);
    }
    return buf;
}

int model_open(const char *who, wgml_context *ctx, wgml_engine *eng, const char *model, wgml_weights weights,
               const char *adapter, bool merge, wgml_model **m, wgml_lora **lora)
{
    *m = NULL;
    if (lora) *lora = NULL;
    wgml_lora *l = NULL;
    if (wgml_model_load_with(eng, model, &(wgml_model_load_options){ .weights = weights }, m) != WGML_OK) {
        fprintf(stderr, "%s: %s\n", who, wgml_last_error(ctx));
        return -1;
    }
    if (!adapter) return 0;
    wgml_status s = wgml_lora_load(*m, adapter, &l);
    if (s == WGML_OK && merge) s = wgml_lora_merge(l);
    if (s != WGML_OK) {
        fprintf(stderr, "%s: --adapter %s: %s\n", who, adapter, wgml_last_error(ctx));
        wgml_lora_destroy(l);   /* a failed merge leaves it attached */
        wgml_model_destroy(*m);
        *m = NULL;
        return -1;
    }
    if (lora) *lora = merge ? NULL : l;
    return 0;
}

int model_data_options(const char *who, const char *model, const wgml_model_config *cfg, const wgml_tokenizer *tok,
                       const char *chat_template, bool loss_on_prompt, wgml_tokenizer_config *tcfg, wgml_dataset_options *dopt)
{
    char dir[4096];
    *dopt = (wgml_dataset_options){ .loss_on_prompt = loss_on_prompt, .allow_bytes = wgml_tokenizer_vocab_size(tok) == 256 };
    size_t n = strlen(model);
    wgml_status s;
    if (n > 5 && !strcmp(model + n - 5, ".gguf")) {   /* the file's own chat template and special tokens */
        wgml_gguf *g = NULL;
        s = wgml_gguf_open(model, &g);
        if (s == WGML_OK) s = wgml_tokenizer_config_from_gguf(g, model, tcfg);
        wgml_gguf_close(g);
    } else {
        s = wgml_tokenizer_config_load(model_folder(model, dir, sizeof dir), tcfg);
    }
    if (s != WGML_OK) {
        fprintf(stderr, "%s: %s\n", who, wgml_last_error(NULL));
        return -1;
    }
    if (chat_template) {
        if (wgml_chat_format_from_name(chat_template, &dopt->chat_format) != WGML_OK) {
            fprintf(stderr, "%s: --chat-template: %s\n", who, wgml_last_error(NULL));
            return -1;
        }
    } else if (tcfg->chat_template && wgml_chat_format_detect(tcfg->chat_template, &dopt->chat_format) != WGML_OK) {
        dopt->chat_format = WGML_CHAT_UNKNOWN;   /* an error only if the data has messages: the dataset says so */
    }
    dopt->chat.bos_token = tcfg->bos_token;
    dopt->chat.eos_token = tcfg->eos_token;
    int64_t eos = cfg->num_eos_token_ids ? (int64_t)cfg->eos_token_ids[0]
                                         : tcfg->eos_token ? wgml_tokenizer_token_id(tok, tcfg->eos_token) : -1;
    if (eos >= 0) {
        dopt->append_eos = true;
        dopt->eos_id = (uint32_t)eos;
    }
    return 0;
}

int model_tokenizer(const char *who, const char *model, const wgml_model_config *cfg, wgml_tokenizer **tok)
{
    char dir[4096], path[4200];
    struct stat st;
    snprintf(path, sizeof path, "%s/tokenizer.json", model_folder(model, dir, sizeof dir));
    wgml_status s;
    size_t n = strlen(model);
    if (n > 5 && !strcmp(model + n - 5, ".gguf")) {   /* the file holds its tokenizer */
        wgml_gguf *g = NULL;
        s = wgml_gguf_open(model, &g);
        if (s == WGML_OK) s = wgml_tokenizer_from_gguf(g, model, tok);
        wgml_gguf_close(g);
    } else if (lstat(path, &st) == 0) s = wgml_tokenizer_load(path, tok);
    else if (errno == ENOENT && cfg->vocab_size == 256) s = wgml_tokenizer_bytes(tok);
    else {
        fprintf(stderr, "%s: %s has no tokenizer.json and its vocabulary (%u) is not bytes\n", who, dir, cfg->vocab_size);
        return -1;
    }
    if (s != WGML_OK) {
        fprintf(stderr, "%s: %s\n", who, wgml_last_error(NULL));
        return -1;
    }
    return 0;
}

int model_chat_open(const char *who, const char *model, const char *precision, wgml_weights weights, const char *adapter,
                    const char *chat_template, model_chat *mc)
{
    *mc = (model_chat){ 0 };
    if (model_device(who, precision, &mc->ctx, &mc->eng) != 0) return -1;
    wgml_dataset_options dopt;
    if (model_open(who, mc->ctx, mc->eng, model, weights, adapter, false, &mc->m, NULL) != 0 ||
        model_tokenizer(who, model, wgml_model_get_config(mc->m), &mc->tok) != 0 ||
        model_data_options(who, model, wgml_model_get_config(mc->m), mc->tok, chat_template, false, &mc->tcfg, &dopt) != 0) {
        model_chat_close(mc);
        return -1;
    }
    mc->chat = dopt.chat_format;
    mc->chat_opts = dopt.chat;
    return 0;
}

void model_chat_close(model_chat *mc)
{
    wgml_tokenizer_config_clear(&mc->tcfg);
    wgml_tokenizer_free(mc->tok);
    wgml_model_destroy(mc->m);
    wgml_engine_destroy(mc->eng);
    wgml_context_destroy(mc->ctx);
    *mc = (model_chat){ 0 };
}

int model_context(const char *who, const wgml_model_config *cfg, int requested, uint32_t *out)
{
    uint32_t cap = (uint32_t)requested;
    if (cap > cfg->max_position_embeddings) {
        fprintf(stderr, "%s: --context %u is beyond the model's %u positions (max_position_embeddings)\n", who, cap,
                cfg->max_position_embeddings);
        return -1;
    }
    *out = cap ? cap : cfg->max_position_embeddings < 4096 ? cfg->max_position_embeddings : 4096;
    return 0;
}
