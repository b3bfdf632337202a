/* See model_tokenizer.h. */
#include "model_tokenizer.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

int model_tokenizer(const char *who, const char *model, const wgml_model_config *cfg, wgml_tokenizer **tok)
{
    char dir[4096], path[4200];
    struct stat st;
    snprintf(dir, sizeof dir, "%s", model);
    if (stat(model, &st) == 0 && !S_ISDIR(st.st_mode)) {
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        else snprintf(dir, sizeof dir, ".");
    }
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    wgml_status s;
    if (lstat(path, &st) == 0) s = wgml_tokenizer_load(path, tok);
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
