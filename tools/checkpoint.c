/* Output folders and checkpoints (see checkpoint.h). */
#define _XOPEN_SOURCE 700   /* realpath */
#include "checkpoint.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The files a run writes at the top of its folder. */
static const char *const run_files[] = {
    "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
    "adapter_config.json", "adapter_model.safetensors", "loss.csv", "loss.svg", "trainer_state.json",
    "optimizer.safetensors",
};

static bool is_checkpoint_name(const char *name, int *step)
{
    char *end;
    if (strncmp(name, "checkpoint-", 11) != 0) return false;
    long v = strtol(name + 11, &end, 10);
    if (end == name + 11 || *end || v < 0 || v > INT_MAX) return false;
    if (step) *step = (int)v;
    return true;
}

static bool is_temp_name(const char *name) { return strncmp(name, ".checkpoint-", 12) == 0 && strstr(name, ".tmp-"); }

/* Removes a folder of plain files (a checkpoint): 0, or -1 with errno. */
static int remove_flat(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    struct dirent *e;
    char p[PATH_MAX + 256];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    return rmdir(dir);
}

static int fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int r = fsync(fd);
    close(fd);
    return r;
}

/* Whether out names the folder of input (a folder, or a file in it). */
bool ckpt_same_folder(const char *out, const char *input)
{
    char a[PATH_MAX], b[PATH_MAX], dir[PATH_MAX];
    struct stat st;
    snprintf(dir, sizeof dir, "%s", input);
    if (stat(input, &st) == 0 && !S_ISDIR(st.st_mode)) {
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        else snprintf(dir, sizeof dir, ".");
    }
    return realpath(out, a) && realpath(dir, b) && strcmp(a, b) == 0;
}

/* mkdir -p: the folder and any missing parent. 0 when it was made, else -1 with errno
   (EEXIST when it was there). */
static int make_folders(const char *dir)
{
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *c = p + 1; *c; c++) {
        if (*c != '/') continue;
        *c = 0;
        if (mkdir(p, 0777) != 0 && errno != EEXIST) return -1;
        *c = '/';
    }
    return mkdir(p, 0777);
}

int ckpt_prepare_out(const char *who, const char *out, const out_options *opt, bool *made)
{
    struct stat st;
    bool overwrite = opt->overwrite, resuming = opt->resuming;
    *made = false;
    if (stat(out, &st) == 0 && !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "%s: --out %s exists and is not a folder\n", who, out);
        return -1;
    }
    if (opt->input && ckpt_same_folder(out, opt->input)) {
        fprintf(stderr, "%s: --out %s is the folder of the model it reads (%s): write elsewhere\n", who, out, opt->input);
        return -1;
    }
    if (make_folders(out) == 0) *made = true;
    else if (errno != EEXIST) {
        fprintf(stderr, "%s: cannot create --out %s: %s\n", who, out, strerror(errno));
        return -1;
    }
    if (access(out, W_OK | X_OK) != 0) {
        fprintf(stderr, "%s: cannot write into --out %s: %s\n", who, out, strerror(errno));
        return -1;
    }
    /* what an earlier run left */
    DIR *d = opendir(out);
    if (!d) {
        fprintf(stderr, "%s: cannot read --out %s: %s\n", who, out, strerror(errno));
        return -1;
    }
    char found[256] = "";
    struct dirent *e;
    char p[PATH_MAX + 256];
    int rc = 0;
    while ((e = readdir(d)) && rc == 0) {
        bool ours = is_checkpoint_name(e->d_name, NULL) || is_temp_name(e->d_name);
        for (size_t i = 0; i < sizeof run_files / sizeof run_files[0] && !ours; i++) ours = !strcmp(e->d_name, run_files[i]);
        if (!ours) continue;
        if (is_temp_name(e->d_name)) {   /* a save that was killed: never a checkpoint */
            snprintf(p, sizeof p, "%s/%s", out, e->d_name);
            remove_flat(p);
            continue;
        }
        if (resuming) continue;
        if (!overwrite) {
            snprintf(found, sizeof found, "%s", e->d_name);
            rc = -1;
            break;
        }
        snprintf(p, sizeof p, "%s/%s", out, e->d_name);
        if ((is_checkpoint_name(e->d_name, NULL) ? remove_flat(p) : unlink(p)) != 0) {
            fprintf(stderr, "%s: --overwrite: cannot remove %s: %s\n", who, p, strerror(errno));
            rc = -2;
        }
    }
    closedir(d);
    if (rc == -1 && opt->resumable)
        fprintf(stderr, "%s: --out %s already holds a run (%s); give --overwrite to replace it, or --resume %s to go on with "
                "it\n", who, out, found, out);
    else if (rc == -1)
        fprintf(stderr, "%s: --out %s already holds a model or a run (%s); give --overwrite to replace it\n", who, out, found);
    return rc == 0 ? 0 : -1;
}

int ckpt_write(const char *who, const char *out, int step, int keep, int (*write)(void *user, const char *dir), void *user)
{
    char tmp[PATH_MAX], final[PATH_MAX];
    snprintf(tmp, sizeof tmp, "%s/.checkpoint-%d.tmp-%ld", out, step, (long)getpid());
    snprintf(final, sizeof final, "%s/checkpoint-%d", out, step);
    remove_flat(tmp);
    if (mkdir(tmp, 0777) != 0) {
        fprintf(stderr, "%s: cannot create %s: %s\n", who, tmp, strerror(errno));
        return -1;
    }
    if (write(user, tmp) != 0 || fsync_dir(tmp) != 0) {
        remove_flat(tmp);
        return -1;
    }
    /* a checkpoint of this step already there (a resumed run saving again) goes first */
    struct stat st;
    if (stat(final, &st) == 0) remove_flat(final);
    if (rename(tmp, final) != 0 || fsync_dir(out) != 0) {
        fprintf(stderr, "%s: cannot put %s in place: %s\n", who, final, strerror(errno));
        remove_flat(tmp);
        return -1;
    }
    /* the older ones, now that this one is whole */
    DIR *d = opendir(out);
    if (!d) return 0;
    int steps[4096], n = 0, s;
    struct dirent *e;
    while ((e = readdir(d)) && n < 4096)
        if (is_checkpoint_name(e->d_name, &s) && s != step) steps[n++] = s;
    closedir(d);
    int newer = 0;
    for (int i = 0; i < n; i++) {
        newer = 0;
        for (int j = 0; j < n; j++) newer += steps[j] > steps[i];
        if (steps[i] < step && newer + 1 >= keep) {
            char p[PATH_MAX + 32];
            snprintf(p, sizeof p, "%s/checkpoint-%d", out, steps[i]);
            remove_flat(p);
        }
    }
    return 0;
}

int ckpt_find(const char *who, const char *dir, char *path, size_t size)
{
    char p[PATH_MAX + 64];
    struct stat st;
    snprintf(p, sizeof p, "%s/trainer_state.json", dir);
    if (stat(p, &st) == 0) {
        snprintf(path, size, "%s", dir);
        return 0;
    }
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "%s: --resume %s: %s\n", who, dir, strerror(errno));
        return -1;
    }
    int best = -1, s;
    struct dirent *e;
    while ((e = readdir(d)))
        if (is_checkpoint_name(e->d_name, &s) && s > best) best = s;
    closedir(d);
    if (best < 0) {
        fprintf(stderr, "%s: --resume %s: no checkpoint there (no trainer_state.json, no checkpoint-<step> folder)\n", who, dir);
        return -1;
    }
    snprintf(path, size, "%s/checkpoint-%d", dir, best);
    return 0;
}

int ckpt_fingerprint(const char *who, const char *path, uint64_t *bytes, uint64_t *hash)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot open %s: %s\n", who, path, strerror(errno));
        return -1;
    }
    uint64_t h = 0xcbf29ce484222325ull, n = 0;
    unsigned char buf[1 << 16];
    size_t r;
    while ((r = fread(buf, 1, sizeof buf, f)) > 0) {
        for (size_t i = 0; i < r; i++) h = (h ^ buf[i]) * 0x100000001b3ull;
        n += r;
    }
    bool err = ferror(f);
    fclose(f);
    if (err) {
        fprintf(stderr, "%s: cannot read %s\n", who, path);
        return -1;
    }
    *bytes = n;
    *hash = h;
    return 0;
}

/* ---- trainer_state.json ------------------------------------------------------------- */

static cJSON *hex64(uint64_t v)
{
    char s[24];
    snprintf(s, sizeof s, "%016llx", (unsigned long long)v);
    return cJSON_CreateString(s);
}

static bool read_hex64(const cJSON *it, uint64_t *v)
{
    if (!cJSON_IsString(it) || strlen(it->valuestring) != 16) return false;
    char *end;
    *v = strtoull(it->valuestring, &end, 16);
    return !*end;
}

/* a flag's value as JSON: numbers, strings (NULL: null), booleans; u64 as hex */
static cJSON *flag_value(const cli_flag *fl, const void *opts)
{
    const char *p = (const char *)opts + fl->offset;
    switch (fl->type) {
    case CLI_INT: return cJSON_CreateNumber(*(const int *)p);
    case CLI_U64: return hex64(*(const uint64_t *)p);
    case CLI_DOUBLE: return cJSON_CreateNumber(*(const double *)p);
    case CLI_STRING: return *(const char *const *)p ? cJSON_CreateString(*(const char *const *)p) : cJSON_CreateNull();
    case CLI_BOOL: return cJSON_CreateBool(*(const int *)p);
    }
    return cJSON_CreateNull();
}

int ckpt_state_write(const char *who, const char *dir, const run_state *st, const cli_flag *flags, size_t n, const void *opts)
{
    cJSON *root = cJSON_CreateObject(), *o = cJSON_CreateObject(), *b = cJSON_CreateObject(), *d = cJSON_CreateObject();
    cJSON *losses = cJSON_CreateArray(), *val = cJSON_CreateArray();
    bool ok = root && o && b && d && losses && val;
    for (size_t k = 0; k < n && ok; k++) ok = cJSON_AddItemToObject(o, flags[k].name + 2, flag_value(&flags[k], opts));
    ok = ok && cJSON_AddItemToObject(b, "rng", hex64(st->batcher.rng));
    ok = ok && cJSON_AddItemToObject(b, "epoch", hex64(st->batcher.epoch));
    ok = ok && cJSON_AddItemToObject(b, "position", hex64(st->batcher.position));
    ok = ok && cJSON_AddItemToObject(d, "bytes", hex64(st->data_bytes));
    ok = ok && cJSON_AddItemToObject(d, "fnv1a", hex64(st->data_hash));
    /* losses as the exact f32 bits: a resumed run's curve must be the same bit for bit */
    for (int i = 0; i < st->step && ok; i++) {
        uint32_t bits;
        memcpy(&bits, &st->losses[i], 4);
        ok = cJSON_AddItemToArray(losses, cJSON_CreateNumber(bits));
    }
    for (int i = 0; i <= st->step && ok; i++) {
        if (isnan(st->val_losses[i])) continue;
        cJSON *pair = cJSON_CreateArray();
        uint64_t bits;
        memcpy(&bits, &st->val_losses[i], 8);
        ok = pair && cJSON_AddItemToArray(pair, cJSON_CreateNumber(i)) && cJSON_AddItemToArray(pair, hex64(bits)) &&
             cJSON_AddItemToArray(val, pair);
    }
    ok = ok && cJSON_AddItemToObject(root, "format", cJSON_CreateString("wgml trainer state 1"));
    ok = ok && cJSON_AddItemToObject(root, "command", cJSON_CreateString(st->command));
    ok = ok && cJSON_AddItemToObject(root, "step", cJSON_CreateNumber(st->step));
    ok = ok && cJSON_AddItemToObject(root, "options", o);
    o = NULL;
    ok = ok && cJSON_AddItemToObject(root, "batcher", b);
    b = NULL;
    ok = ok && cJSON_AddItemToObject(root, "data", d);
    d = NULL;
    ok = ok && cJSON_AddItemToObject(root, "loss_bits", losses);
    losses = NULL;
    ok = ok && cJSON_AddItemToObject(root, "val_loss_bits", val);
    val = NULL;
    char *text = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root); cJSON_Delete(o); cJSON_Delete(b); cJSON_Delete(d); cJSON_Delete(losses); cJSON_Delete(val);
    if (!text) {
        fprintf(stderr, "%s: out of memory writing trainer_state.json\n", who);
        return -1;
    }
    char path[PATH_MAX + 64], tmp[PATH_MAX + 128];
    snprintf(path, sizeof path, "%s/trainer_state.json", dir);
    FILE *f = cli_atomic_open(who, path, tmp, sizeof tmp);
    int rc = -1;
    if (f) {
        fputs(text, f);
        fputc('\n', f);
        rc = cli_atomic_commit(who, f, tmp, path);
    }
    cJSON_free(text);
    return rc;
}

/* Stores JSON value it into flag fl of opts; false when it has the wrong type. A string
   is copied and kept in st until ckpt_state_free. */
static bool set_flag(run_state *st, const cli_flag *fl, void *opts, const cJSON *it)
{
    char *p = (char *)opts + fl->offset;
    switch (fl->type) {
    case CLI_INT:
        if (!cJSON_IsNumber(it)) return false;
        *(int *)p = (int)it->valuedouble;
        return true;
    case CLI_U64: return read_hex64(it, (uint64_t *)p);
    case CLI_DOUBLE:
        if (!cJSON_IsNumber(it)) return false;
        *(double *)p = it->valuedouble;
        return true;
    case CLI_STRING:
        if (cJSON_IsNull(it)) { *(const char **)p = NULL; return true; }
        if (!cJSON_IsString(it) || st->nstrings == (int)(sizeof st->strings / sizeof st->strings[0])) return false;
        st->strings[st->nstrings] = strdup(it->valuestring);
        *(const char **)p = st->strings[st->nstrings];
        return st->strings[st->nstrings++] != NULL;
    case CLI_BOOL:
        if (!cJSON_IsBool(it)) return false;
        *(int *)p = cJSON_IsTrue(it);
        return true;
    }
    return false;
}

static bool same_value(const cli_flag *fl, const void *opts, const cJSON *stored)
{
    cJSON *now = flag_value(fl, opts);
    bool same = now && cJSON_Compare(now, stored, true);
    cJSON_Delete(now);
    return same;
}

int ckpt_state_read(const char *who, const char *dir, const char *command, run_state *st, float **losses, double **val_losses,
                    const cli_flag *flags, size_t n, void *opts, const bool *given, const char *const *may_change)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/trainer_state.json", dir);
    size_t len = 0;
    uint8_t *text = cli_read_file(who, path, (size_t)64 << 20, &len);
    if (!text) return -1;
    cJSON *root = cJSON_ParseWithLength((const char *)text, len);
    free(text);
    int rc = -1;
    const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(root, "command"), *step = cJSON_GetObjectItemCaseSensitive(root, "step");
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "options"), *b = cJSON_GetObjectItemCaseSensitive(root, "batcher");
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(root, "data");
    const cJSON *lb = cJSON_GetObjectItemCaseSensitive(root, "loss_bits"), *vb = cJSON_GetObjectItemCaseSensitive(root, "val_loss_bits");
    *losses = NULL;
    *val_losses = NULL;
    if (!cJSON_IsObject(root) || !cJSON_IsString(cmd) || !cJSON_IsNumber(step) || !cJSON_IsObject(o) || !cJSON_IsObject(b) ||
        !cJSON_IsObject(d) || !cJSON_IsArray(lb) || !cJSON_IsArray(vb) || step->valuedouble < 0 || step->valuedouble > 1e9) {
        fprintf(stderr, "%s: %s is not a trainer state wgml wrote\n", who, path);
        goto done;
    }
    if (strcmp(cmd->valuestring, command) != 0) {
        fprintf(stderr, "%s: %s is a checkpoint of wgml %s, not of wgml %s\n", who, dir, cmd->valuestring, command);
        goto done;
    }
    st->step = (int)step->valuedouble;
    if (!read_hex64(cJSON_GetObjectItemCaseSensitive(b, "rng"), &st->batcher.rng) ||
        !read_hex64(cJSON_GetObjectItemCaseSensitive(b, "epoch"), &st->batcher.epoch) ||
        !read_hex64(cJSON_GetObjectItemCaseSensitive(b, "position"), &st->batcher.position) ||
        !read_hex64(cJSON_GetObjectItemCaseSensitive(d, "bytes"), &st->data_bytes) ||
        !read_hex64(cJSON_GetObjectItemCaseSensitive(d, "fnv1a"), &st->data_hash) || cJSON_GetArraySize(lb) != st->step) {
        fprintf(stderr, "%s: %s is not a trainer state wgml wrote (its batcher, data or losses)\n", who, path);
        goto done;
    }
    *losses = calloc((size_t)st->step + 1, sizeof **losses);
    *val_losses = malloc(((size_t)st->step + 1) * sizeof **val_losses);
    if (!*losses || !*val_losses) {
        fprintf(stderr, "%s: out of memory\n", who);
        goto done;
    }
    int i = 0;
    for (const cJSON *e = lb->child; e; e = e->next, i++) {
        uint32_t bits = (uint32_t)e->valuedouble;
        memcpy(&(*losses)[i], &bits, 4);
    }
    for (i = 0; i <= st->step; i++) (*val_losses)[i] = NAN;
    for (const cJSON *e = vb->child; e; e = e->next) {
        const cJSON *at = cJSON_GetArrayItem(e, 0);
        uint64_t bits;
        if (!cJSON_IsNumber(at) || at->valuedouble < 0 || at->valuedouble > st->step || !read_hex64(cJSON_GetArrayItem(e, 1), &bits))
            continue;
        memcpy(&(*val_losses)[(int)at->valuedouble], &bits, 8);
    }
    for (size_t k = 0; k < n; k++) {
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, flags[k].name + 2);
        bool changeable = false;
        for (const char *const *c = may_change; c && *c; c++) changeable |= !strcmp(*c, flags[k].name);
        if (given && given[k]) {
            if (changeable || (it && same_value(&flags[k], opts, it))) continue;
            char *was = it ? cJSON_PrintUnformatted(it) : NULL;
            fprintf(stderr, "%s: %s cannot change when a run is resumed (the checkpoint has %s)\n", who, flags[k].name,
                    was ? was : "none");
            cJSON_free(was);
            goto done;
        }
        if (!it || !set_flag(st, &flags[k], opts, it)) {
            fprintf(stderr, "%s: %s has no valid %s\n", who, path, flags[k].name);
            goto done;
        }
    }
    st->command = command;
    rc = 0;
done:
    if (rc) {
        free(*losses);
        free(*val_losses);
        *losses = NULL;
        *val_losses = NULL;
        ckpt_state_free(st);
    }
    cJSON_Delete(root);
    return rc;
}

void ckpt_state_free(run_state *st)
{
    for (int i = 0; i < st->nstrings; i++) free(st->strings[i]);
    st->nstrings = 0;
}
