/* wgml bench: times every case of tools/bench_cases.c on the chosen adapter.
 *
 *   wgml bench [--filter SUBSTR] [--group NAME] [--json FILE] [--samples N] [--min-ms MS]
 *              [--peak-tflops X] [--small]       (--help lists them with their ranges)
 *
 * --small runs every case on its reduced dims (for lavapipe and other slow adapters); the
 * table then shows the dims actually used.
 *
 * For each case: setup, 0.3 s of warm-up calls, then N samples. A sample times a
 * batch of `inner` back-to-back calls on the GPU clock (wgml_context_timer_*, timestamp
 * queries where offered) and divides by inner; inner grows until a sample lasts at least
 * --min-ms, so tiny ops are not measured at the timer's resolution. The median sample is
 * reported with the bytes and FLOPs the case declares, as GB/s, TFLOP/s and percent of the
 * peaks: copy bandwidth measured in the same run (a 1 GiB copy_tensor, or the largest the
 * adapter allows) and the f32 FMA rate given by --peak-tflops (none by default: the
 * column then shows "-" for FLOP-bound cases; 67 is the H200's datasheet f32 rate). The
 * overhead groups time a chain of 1000 dependent tiny ops per sample: "overhead" by the
 * host clock from the first call to the end of a sync (what a
 * user waits), "overhead-record" by the host clock of the calls alone (the CPU cost of
 * recording), "overhead-gpu" by the GPU clock (the device's cost per op: per dependent
 * dispatch with WGML_FUSE=0, per op of a 60-op fused dispatch by default).
 * The "roundtrip" group times calls that each wait for the device (a sync with nothing
 * pending; one tiny op and a 4-byte read) by the host clock.
 */
#include "bench.h"
#include "cli.h"
#include "commands.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint64_t next_u64(void)
{
    uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static size_t numel(uint32_t ndim, const size_t *shape)
{
    size_t n = 1;
    for (uint32_t i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

wgml_tensor *bench_empty(bench_state *b, wgml_dtype dtype, uint32_t ndim, const size_t *shape)
{
    wgml_tensor *t;
    if (wgml_tensor_create(b->ctx, dtype, ndim, shape, &t) != WGML_OK) return NULL;
    return t;
}

/* Random contents without a multi-GiB host buffer or minutes of host RNG: one chunk of
   4 Mi random words, written repeatedly across the tensor (each write at a new offset). */
static wgml_tensor *random_tensor(bench_state *b, wgml_dtype dtype, double lo, double hi, uint32_t below, uint32_t ndim,
                                  const size_t *shape)
{
    wgml_tensor *t = bench_empty(b, dtype, ndim, shape);
    if (!t) return NULL;
    size_t n = numel(ndim, shape), chunk = (size_t)1 << 22;
    if (chunk > n) chunk = n;
    uint32_t *buf = malloc(chunk * 4);
    if (!buf) { wgml_tensor_release(t); return NULL; }
    for (size_t i = 0; i < chunk; i++) {
        uint64_t r = next_u64();
        if (dtype == WGML_F32) {
            float f = (float)(lo + (hi - lo) * ((r >> 11) * (1.0 / 9007199254740992.0)));
            memcpy(&buf[i], &f, 4);
        } else {
            buf[i] = (uint32_t)((r >> 32) % below);
        }
    }
    for (size_t off = 0; off < n; off += chunk) {
        size_t m = n - off < chunk ? n - off : chunk;
        if (wgml_tensor_write(t, off * 4, buf, m * 4) != WGML_OK) { free(buf); wgml_tensor_release(t); return NULL; }
    }
    free(buf);
    return t;
}

wgml_tensor *bench_random_f32(bench_state *b, double lo, double hi, uint32_t ndim, const size_t *shape)
{
    return random_tensor(b, WGML_F32, lo, hi, 0, ndim, shape);
}

wgml_tensor *bench_random_u32(bench_state *b, uint32_t below, uint32_t ndim, const size_t *shape)
{
    return random_tensor(b, WGML_U32, 0, 0, below ? below : 1, ndim, shape);
}

static double host_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void release_all(bench_state *b)
{
    for (int i = 0; i < BENCH_MAX_TENSORS; i++) {
        wgml_tensor_release(b->t[i]);
        b->t[i] = NULL;
    }
    wgml_kv_cache_destroy(b->cache);
    wgml_trainer_destroy(b->trainer);
    wgml_model_destroy(b->model);
    free(b->ids);
    b->cache = NULL;
    b->trainer = NULL;
    b->model = NULL;
    b->ids = NULL;
}

/* Median seconds per call of case c, or a negative value on failure. */
static double time_case(bench_state *b, const bench_case *c, int samples, double min_s, int *inner_out)
{
    /* Warm-up by time, not count: compiles the pipelines, touches every buffer once, and
       brings the GPU's clocks up from idle (seen: an H200 idles at 345 MHz). */
    /* ... and keeps the GPU busy meanwhile (flush, no wait, a sync every 8 calls): with idle
       gaps between short bursts the H200's clocks stayed low and streaming kernels measured
       up to 2x slower from one run to the next. */
    double w0 = host_now();
    int calls = 0;
    do {
        if (c->run(b) != WGML_OK) return -1;
        if (wgml_context_flush(b->ctx) != WGML_OK) return -1;
        if (++calls % 8 == 0 && wgml_context_sync(b->ctx) != WGML_OK) return -1;
    } while (calls < 3 || host_now() - w0 < 0.3);
    if (wgml_context_sync(b->ctx) != WGML_OK) return -1;
    double *t = malloc(sizeof(double) * (size_t)samples);
    if (!t) return -1;
    /* overhead groups: a chain of 1000 dependent calls, timed three ways */
    bool roundtrip = c->group && !strcmp(c->group, "roundtrip");          /* host clock; each call waits itself */
    bool host = roundtrip || (c->group && !strcmp(c->group, "overhead"));  /* host clock to the end of a sync */
    bool record = c->group && !strcmp(c->group, "overhead-record");        /* host clock of the calls alone */
    bool chain = (host && !roundtrip) || record || (c->group && !strcmp(c->group, "overhead-gpu"));   /* GPU clock */
    int inner = chain ? 1000 : 1;
    for (int s = 0; s < samples; s++) {
        double sec;
        for (;;) {
            double h0 = 0;
            if (host || record) {
                if (wgml_context_sync(b->ctx) != WGML_OK) { free(t); return -1; }
                h0 = host_now();
            } else if (wgml_context_timer_begin(b->ctx) != WGML_OK) { free(t); return -1; }
            for (int i = 0; i < inner; i++)
                if (c->run(b) != WGML_OK) { free(t); return -1; }
            if (record) {
                sec = host_now() - h0;
                if (wgml_context_sync(b->ctx) != WGML_OK) { free(t); return -1; }
            } else if (host) {
                if (wgml_context_sync(b->ctx) != WGML_OK) { free(t); return -1; }
                sec = host_now() - h0;
            } else if (wgml_context_timer_end(b->ctx, &sec) != WGML_OK) { free(t); return -1; }
            if (sec >= min_s || inner >= 4096 || chain) break;
            inner = sec > 0 ? (int)(inner * (min_s / sec) * 1.2) + 1 : inner * 8;
            if (inner > 4096) inner = 4096;
        }
        t[s] = sec / inner;
    }
    qsort(t, (size_t)samples, sizeof *t, cmp_double);
    double med = t[samples / 2];
    free(t);
    *inner_out = inner;
    return med;
}

static double measure_copy_bandwidth(bench_state *b, wgml_adapter_info *in)
{
    size_t bytes = (size_t)1 << 30;
    if (bytes > in->max_storage_buffer_binding_size) bytes = (size_t)(in->max_storage_buffer_binding_size / 2) & ~(size_t)15;
    size_t n = bytes / 4;
    wgml_tensor *src = bench_random_f32(b, -1, 1, 1, &n), *dst = bench_empty(b, WGML_F32, 1, &n);
    double best = 0;
    if (src && dst) {
        for (int i = 0; i < 7; i++) {
            double s;
            if (wgml_context_timer_begin(b->ctx) || wgml_copy_tensor(b->eng, src, dst, 0) || wgml_context_timer_end(b->ctx, &s)) break;
            double bw = 2.0 * (double)bytes / s;
            if (i > 0 && bw > best) best = bw;
        }
    }
    wgml_tensor_release(src);
    wgml_tensor_release(dst);
    return best;
}

typedef struct bench_opts {
    const char *filter, *group, *json;
    int small, samples;
    double min_ms, peak_tflops;
} bench_opts;

static const cli_flag bench_flags[] = {
    { "--filter", CLI_STRING, offsetof(bench_opts, filter), "only cases whose op, shape or group contains this" },
    { "--group", CLI_STRING, offsetof(bench_opts, group), "only the cases of this group" },
    { "--json", CLI_STRING, offsetof(bench_opts, json), "also write every result as a JSON line to this file" },
    { "--samples", CLI_INT, offsetof(bench_opts, samples), "timed samples per case (the median is reported)", 1, 1000 },
    { "--min-ms", CLI_DOUBLE, offsetof(bench_opts, min_ms), "shortest sample: calls per sample grow until one lasts this long",
      0.01, 10000 },
    { "--peak-tflops", CLI_DOUBLE, offsetof(bench_opts, peak_tflops), "the adapter's f32 FMA rate, for the % of peak of "
      "FLOP-bound cases (0: unknown, no percentage; e.g. 67 for an H200)", 0, 1e6 },
    { "--small", CLI_BOOL, offsetof(bench_opts, small), "every case on its reduced dims (lavapipe and other slow adapters)" },
};

int cmd_bench(int argc, char **argv)
{
    bench_opts o = { .samples = 15, .min_ms = 20.0 };
    int pr = cli_parse(argc, argv, bench_flags, sizeof bench_flags / sizeof bench_flags[0], &o, "wgml bench [options]",
                       "Times every op on representative shapes with GPU timestamps (see tools/bench_cases.c).");
    if (pr <= 0) return -pr;
    const char *filter = o.filter, *group = o.group, *json = o.json;
    bool small = o.small;
    int samples = o.samples;
    double min_ms = o.min_ms, peak_tflops = o.peak_tflops;
    bench_state b = { 0 };
    if (wgml_context_create(NULL, &b.ctx) != WGML_OK) {   /* the defaults: what a user gets (WGML_ROBUST=1: robust) */
        fprintf(stderr, "wgml bench: %s\n", wgml_last_error(NULL));
        return 1;
    }
    if (wgml_engine_create(b.ctx, &b.eng) != WGML_OK) {
        fprintf(stderr, "wgml bench: %s\n", wgml_last_error(b.ctx));
        return 1;
    }
    wgml_adapter_info in;
    wgml_context_info(b.ctx, &in);
    char jtmp[4200];
    FILE *jf = json ? cli_atomic_open("wgml bench", json, jtmp, sizeof jtmp) : NULL;
    if (json && !jf) {
        wgml_engine_destroy(b.eng);
        wgml_context_destroy(b.ctx);
        return 1;
    }
    double copy_bw = measure_copy_bandwidth(&b, &in);
    printf("# wgml bench on \"%s\" (%s, %s), timestamps %s, robust %s\n", in.name, in.backend, in.driver,
           in.timestamp_query ? "yes" : "no (host clock)", in.robust ? "on" : "off");
    printf("# peaks: copy %.0f GB/s (measured, read+write), f32 FMA %s\n\n", copy_bw * 1e-9,
           peak_tflops > 0 ? cli_fmt("%.1f TFLOP/s (given)", peak_tflops) : "not given (--peak-tflops)");
    printf("| op | shape | time (us) | GB/s | TFLOP/s | %% of peak | inner |\n|---|---|---:|---:|---:|---:|---:|\n");
    if (jf) fprintf(jf, "{\"kind\":\"meta\",\"adapter\":\"%s\",\"driver\":\"%s\",\"copy_bw\":%.6g,\"peak_tflops\":%g}\n", in.name,
                    in.driver, copy_bw, peak_tflops);
    int failures = 0;
    for (size_t i = 0; i < bench_case_count; i++) {
        const bench_case *c = &bench_cases[i];
        if (filter && !strstr(c->op, filter) && !strstr(c->shape, filter) && !strstr(c->group, filter)) continue;
        if (group && (!c->group || strcmp(c->group, group))) continue;
        memset(b.t, 0, sizeof b.t);
        memset(b.u, 0, sizeof b.u);
        memset(b.f, 0, sizeof b.f);
        memset(&b.attn, 0, sizeof b.attn);
        const uint64_t *dims = small ? c->small : c->dims;
        char shape[96];
        if (small) {
            int len = snprintf(shape, sizeof shape, "small:");
            for (int k = 0; k < 8 && dims[k] && len < (int)sizeof shape - 24; k++)
                len += snprintf(shape + len, sizeof shape - (size_t)len, "%s%llu", k ? "x" : "", (unsigned long long)dims[k]);
            /* words that set the case apart ("cold", "accumulate"), not those naming full-size dims */
            const char *words = strchr(c->shape, ' ');
            if (words && !strpbrk(words, "0123456789")) snprintf(shape + len, sizeof shape - (size_t)len, "%s", words);
        } else {
            snprintf(shape, sizeof shape, "%s", c->shape);
        }
        double bytes = c->bytes ? c->bytes(dims) : 0, flops = c->flops ? c->flops(dims) : 0;
        int inner = 0;
        double sec = -1;
        if (c->setup(&b, dims) == 0) sec = time_case(&b, c, samples, min_ms * 1e-3, &inner);
        if (sec < 0) {
            printf("| %s | %s | failed: %s | | | | |\n", c->op, shape, wgml_last_error(b.ctx));
            failures++;
        } else {
            double gbs = bytes / sec * 1e-9, tfl = flops / sec * 1e-12;
            double pct = flops > 0 ? (peak_tflops > 0 ? 100.0 * tfl / peak_tflops : -1)
                                   : (copy_bw > 0 ? 100.0 * bytes / sec / copy_bw : -1);
            printf("| %s | %s | %.2f | %.0f | %.2f | %s | %d |\n", c->op, shape, sec * 1e6, gbs, tfl,
                   pct >= 0 ? cli_fmt("%.0f", pct) : "-", inner);
            if (jf)
                fprintf(jf, "{\"kind\":\"case\",\"op\":\"%s\",\"shape\":\"%s\",\"group\":\"%s\",\"seconds\":%.9g,\"bytes\":%.6g,\"flops\":%.6g}\n",
                        c->op, shape, c->group ? c->group : "", sec, bytes, flops);
        }
        fflush(stdout);
        release_all(&b);
        wgml_context_sync(b.ctx);
    }
    int wrote = jf ? cli_atomic_commit("wgml bench", jf, jtmp, json) : 0;
    wgml_engine_destroy(b.eng);
    wgml_context_destroy(b.ctx);
    return failures || wrote != 0 ? 1 : 0;
}
