/* tokenizer_config.json (and chat_template.jinja): the chat template and the BOS and EOS
   texts of a model folder, for wgml_chat_render. Everything else in the file is ignored. */
#include "io.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CONFIG_MAX_BYTES ((size_t)16 << 20)   /* templates with tool use run to tens of KiB */
#define TEMPLATE_MAX_BYTES ((size_t)1 << 20)

/* A string, or an object {"content": string} (a serialised AddedToken); absent or null:
   *out stays NULL. */
static wgml_status token_text(const char *what, const cJSON *root, const char *key, char **out)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!it || cJSON_IsNull(it)) return WGML_OK;
    if (cJSON_IsObject(it)) it = cJSON_GetObjectItemCaseSensitive(it, "content");
    if (!cJSON_IsString(it))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: %s must be a string or an object with a string \"content\"", what, key);
    *out = strdup(it->valuestring);
    return *out ? WGML_OK : wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", what);
}

/* chat_template: a string, or a list of {"name", "template"} from which "default" is taken */
static wgml_status template_text(const char *what, const cJSON *root, char **out)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, "chat_template");
    if (!it || cJSON_IsNull(it)) return WGML_OK;
    if (cJSON_IsArray(it)) {
        const cJSON *found = NULL;
        for (const cJSON *e = it->child; e; e = e->next) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
            if (cJSON_IsString(name) && strcmp(name->valuestring, "default") == 0)
                found = cJSON_GetObjectItemCaseSensitive(e, "template");
        }
        if (!found)
            return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: chat_template is a list without a \"default\" template", what);
        it = found;
    }
    if (!cJSON_IsString(it))
        return wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: chat_template must be a string or a list of named templates, not %s",
                          what, wgml__json_type(it));
    *out = strdup(it->valuestring);
    return *out ? WGML_OK : wgml__fail(NULL, WGML_ERROR_OUT_OF_MEMORY, "%s: out of host memory", what);
}

void wgml_tokenizer_config_clear(wgml_tokenizer_config *c)
{
    if (!c) return;
    free(c->chat_template);
    free(c->bos_token);
    free(c->eos_token);
    memset(c, 0, sizeof *c);
}

wgml_status wgml_tokenizer_config_load(const char *folder, wgml_tokenizer_config *out)
{
    if (!folder || !out)
        return wgml__fail(NULL, WGML_ERROR_INVALID_ARGUMENT, "wgml_tokenizer_config_load: folder and out must not be NULL");
    memset(out, 0, sizeof *out);
    char path[PATH_MAX];
    struct stat st;
    wgml_status s = WGML_OK;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", folder);
    if (lstat(path, &st) == 0) {
        char *json = NULL;
        size_t len = 0;
        cJSON *root = NULL;
        s = wgml__read_file(path, true, CONFIG_MAX_BYTES, &json, &len);
        /* a template is one string value; the rest of the file is a few hundred values */
        if (!s) s = wgml__json_parse(path, json, len, 2, &root);
        free(json);
        if (!s && !cJSON_IsObject(root))
            s = wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: must be a JSON object, not %s", path, wgml__json_type(root));
        if (!s) s = template_text(path, root, &out->chat_template);
        if (!s) s = token_text(path, root, "bos_token", &out->bos_token);
        if (!s) s = token_text(path, root, "eos_token", &out->eos_token);
        cJSON_Delete(root);
    }
    snprintf(path, sizeof path, "%s/chat_template.jinja", folder);
    if (!s && lstat(path, &st) == 0) {
        char *text = NULL;
        size_t len = 0;
        s = wgml__read_file(path, true, TEMPLATE_MAX_BYTES, &text, &len);
        if (!s && wgml__utf8_check((const uint8_t *)text, len) != len)
            s = wgml__fail(NULL, WGML_ERROR_FORMAT, "%s: not valid UTF-8", path);
        if (!s) {
            free(out->chat_template);
            out->chat_template = text;
        } else {
            free(text);
        }
    }
    if (s) wgml_tokenizer_config_clear(out);
    return s;
}
