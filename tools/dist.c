/* Data parallelism in the training commands (see dist.h). */
#include "dist.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_dist_join(const char *who, cli_dist *d)
{
    *d = (cli_dist){ .rank = 0, .size = 1 };
    /* WGML_COMM_TIMEOUT: seconds a process waits for the others in a collective */
    const char *tv = getenv("WGML_COMM_TIMEOUT");
    uint32_t timeout_ms = 0;
    if (tv) {
        char *end;
        long sec = strtol(tv, &end, 10);
        if (!*tv || *end || sec < 1 || sec > 86400) {
            fprintf(stderr, "%s: WGML_COMM_TIMEOUT=\"%s\" is not a number of seconds in [1, 86400]\n", who, tv);
            return -1;
        }
        timeout_ms = (uint32_t)sec * 1000;
    }
    if (wgml_comm_create(timeout_ms, &d->comm) != WGML_OK) {
        fprintf(stderr, "%s: %s\n", who, wgml_last_error(NULL));
        return -1;
    }
    d->rank = wgml_comm_rank(d->comm);
    d->size = wgml_comm_size(d->comm);
    if (d->rank != 0 && !freopen("/dev/null", "w", stdout)) {
        fprintf(stderr, "%s: rank %u: cannot silence its output\n", who, d->rank);
        return -1;
    }
    return 0;
}

void cli_dist_leave(cli_dist *d)
{
    wgml_comm_destroy(d->comm);
    d->comm = NULL;
}

void cli_dist_fail(cli_dist *d, int code)
{
    if (d->comm) {
        fflush(stderr);
        wgml_comm_abort(d->comm, code);
    }
}

/* --precision's value as a wgml_precision (NULL: f32); false for a name it does not know. */
static bool precision_of(const char *name, wgml_precision *out)
{
    static const char *const names[] = { "f32", "f16", "f16x3" };
    static const wgml_precision values[] = { WGML_PRECISION_F32, WGML_PRECISION_F16, WGML_PRECISION_F16X3 };
    for (int i = 0; i < 3; i++)
        if (!name || strcmp(name, names[i]) == 0) {
            *out = values[name ? i : 0];
            return true;
        }
    return false;
}

int cli_precision(const char *who, const char *precision, wgml_precision *out)
{
    if (cli_check_precision(who, precision, -1) != 0) return -1;
    precision_of(precision, out);
    return 0;
}

int cli_dist_context(const char *who, const cli_dist *d, const char *precision, wgml_context **ctx)
{
    wgml_context_desc desc = { 0 };
    if (cli_precision(who, precision, &desc.matmul_precision) != 0) return -1;
    if (d->comm && !getenv("WGML_DEVICE")) {
        uint32_t count = 0;
        if (wgml_adapter_list(NULL, NULL, 0, &count) != WGML_OK) {
            fprintf(stderr, "%s: %s\n", who, wgml_last_error(NULL));
            return -1;
        }
        desc.use_device_index = count > 0;
        desc.device_index = count ? wgml_comm_local_rank(d->comm) % count : 0;
    }
    if (wgml_context_create(&desc, ctx) != WGML_OK) {
        fprintf(stderr, "%s: %s\n", who, wgml_last_error(NULL));
        return -1;
    }
    return 0;
}

int cli_check_precision(const char *who, const char *precision, double loss_scale)
{
    wgml_precision p;
    if (!precision_of(precision, &p)) {
        fprintf(stderr, "%s: --precision is \"%s\": f32, f16 or f16x3\n", who, precision);
        return -1;
    }
    int e;
    if (loss_scale != -1 && loss_scale != 0 &&
        !(loss_scale >= 0x1p-24 && loss_scale <= 0x1p24 && frexp(loss_scale, &e) == 0.5)) {
        fprintf(stderr, "%s: --loss-scale %g is not a power of two in [2^-24, 2^24] (0: none; -1: the default)\n", who,
                loss_scale);
        return -1;
    }
    return 0;
}

float cli_loss_scale(const char *precision, double loss_scale)
{
    if (loss_scale >= 0) return (float)loss_scale;
    return precision && strcmp(precision, "f16") == 0 ? 65536.0f : 0.0f;
}

bool cli_keep_scores(int keep_scores, const char *precision, const wgml_adapter_info *info)
{
    if (keep_scores >= 0) return keep_scores != 0;
    bool gpu = !info->type || strcmp(info->type, "CPU") != 0;
    return gpu && !(precision && strcmp(precision, "f16") == 0 && info->matrix_m);
}

void cli_print_precision(const char *precision, const wgml_adapter_info *info, const wgml_trainer *tr)
{
    float scale = wgml_trainer_loss_scale(tr);
    bool f32 = !precision || strcmp(precision, "f32") == 0;
    if (f32 && !scale) return;
    printf("precision: %s matrix products", precision ? precision : "f32");
    if (!f32 && info->matrix_m)
        printf(" on %u x %u x %u subgroup matrices", info->matrix_m, info->matrix_n, info->matrix_k);
    else if (!f32)
        printf(" (this adapter and runtime have no f16 subgroup matrices: the f32 kernels run them)");
    if (scale) printf(", dynamic loss scale %g", scale);
    printf("\n");
}

void cli_print_skipped(const wgml_trainer *tr)
{
    uint32_t n = wgml_trainer_skipped_steps(tr);
    if (n) printf("loss scaling: %u step%s skipped for non-finite gradients; the scale is now %g\n", n, n > 1 ? "s" : "",
                  wgml_trainer_loss_scale(tr));
}

/* FNV-1a over bytes, continued from h */
static uint64_t fnv1a(uint64_t h, const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

int cli_dist_check_same(const char *who, cli_dist *d, wgml_tensor *const *t, size_t n)
{
    if (!d->comm) return 0;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        size_t bytes = wgml_tensor_nbytes(t[i]);
        unsigned char *buf = malloc(bytes ? bytes : 1);
        if (!buf || wgml_tensor_read(t[i], 0, buf, bytes) != WGML_OK) {
            free(buf);
            fprintf(stderr, "%s: rank %u could not read its weights back\n", who, d->rank);
            return -1;
        }
        h = fnv1a(h, buf, bytes);
        free(buf);
    }
    /* every process's hash halves summed: equal to size times one's own on each process
       only when all are equal (halves of 32 bits stay exact in a double) */
    double mine[2] = { (double)(h >> 32), (double)(h & 0xFFFFFFFFu) }, sum[2] = { mine[0], mine[1] };
    if (wgml_comm_allreduce_sum(d->comm, sum, 2) != WGML_OK) {
        fprintf(stderr, "%s: %s\n", who, wgml_last_error(NULL));
        return -1;
    }
    if (sum[0] != mine[0] * d->size || sum[1] != mine[1] * d->size) {
        fprintf(stderr, "%s: rank %u: the processes' weights differ after training (fnv1a %016llx here)\n", who, d->rank,
                (unsigned long long)h);
        return -1;
    }
    printf("the %u processes' weights agree bit for bit (fnv1a %016llx)\n", d->size, (unsigned long long)h);
    return 0;
}
