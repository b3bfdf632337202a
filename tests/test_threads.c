/* What the header promises about threads: different contexts may be used by different
   threads at the same time, and wgml_last_error(NULL) is per thread. */
#include "harness.h"
#include "ref.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct worker {
    int id;
    int bad;          /* wrong elements seen */
    int failures;     /* calls that failed */
    char own_error[128];
} worker;

static void *run_worker(void *arg)
{
    worker *w = arg;
    wgml_context *ctx;
    wgml_engine *eng;
    if (wgml_context_create(NULL, &ctx) != WGML_OK || wgml_engine_create(ctx, &eng) != WGML_OK) {
        w->failures++;
        return NULL;
    }
    size_t n = 4099;
    float *a = malloc(n * 4), *b = malloc(n * 4), *c = malloc(n * 4);
    for (int round = 0; round < 20; round++) {
        for (size_t i = 0; i < n; i++) {
            a[i] = (float)(w->id * 1000 + round) + (float)i * 0.25f;
            b[i] = (float)i * 0.5f - (float)round;
        }
        wgml_tensor *ta, *tb, *tc;
        if (wgml_tensor_from_data(ctx, WGML_F32, 1, &n, a, &ta) || wgml_tensor_from_data(ctx, WGML_F32, 1, &n, b, &tb) ||
            wgml_tensor_create(ctx, WGML_F32, 1, &n, &tc)) {
            w->failures++;
            break;
        }
        for (int k = 0; k < 5; k++)
            if (wgml_mul(eng, ta, tb, tc) || wgml_add(eng, tc, ta, tc)) w->failures++;
        if (wgml_tensor_read(tc, 0, c, n * 4)) w->failures++;
        for (size_t i = 0; i < n; i++)
            if (c[i] != a[i] * b[i] + a[i]) w->bad++;
        wgml_tensor_release(ta);
        wgml_tensor_release(tb);
        wgml_tensor_release(tc);
    }
    /* this thread's context-less error stays this thread's */
    char name[64];
    snprintf(name, sizeof name, "thread-%d-backend", w->id);
    wgml_context *none;
    wgml_context_create(&(wgml_context_desc){ .backend = name }, &none);
    snprintf(w->own_error, sizeof w->own_error, "%s", wgml_last_error(NULL));
    free(a); free(b); free(c);
    wgml_engine_destroy(eng);
    wgml_context_destroy(ctx);
    return NULL;
}

static void test_two_contexts_two_threads(void)
{
    worker w[2] = { { .id = 1 }, { .id = 2 } };
    pthread_t th[2];
    for (int i = 0; i < 2; i++) TH_CHECK(pthread_create(&th[i], NULL, run_worker, &w[i]) == 0, "pthread_create");
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++) {
        TH_CHECK(w[i].failures == 0, "worker %d: %d calls failed", w[i].id, w[i].failures);
        TH_CHECK(w[i].bad == 0, "worker %d: %d wrong elements", w[i].id, w[i].bad);
        char want[64];
        snprintf(want, sizeof want, "thread-%d-backend", w[i].id);
        TH_CHECK(strstr(w[i].own_error, want) != NULL, "worker %d saw another thread's error: %s", w[i].id, w[i].own_error);
    }
}

static const th_case cases[] = {
    { "two_contexts_two_threads", test_two_contexts_two_threads },
};
TH_MAIN(cases)
