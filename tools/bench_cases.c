/* The cases of `wgml bench`: representative LLM shapes for every op. The shape strings are
   the keys bench/torch_bench.py uses for the same work in PyTorch. */
#include "bench.h"

#define SHAPE(...) ((const size_t[]){ __VA_ARGS__ })
#define NDIM(...) ((uint32_t)(sizeof((const size_t[]){ __VA_ARGS__ }) / sizeof(size_t)))
#define RAND(i, lo, hi, ...) (b->t[i] = bench_random_f32(b, lo, hi, NDIM(__VA_ARGS__), SHAPE(__VA_ARGS__)))
#define EMPTY(i, dt, ...) (b->t[i] = bench_empty(b, dt, NDIM(__VA_ARGS__), SHAPE(__VA_ARGS__)))
#define OK(x) ((x) ? 0 : -1)

static const double F = 4.0;   /* bytes per f32 */

/* ---- element-wise ------------------------------------------------------------------- */

#define N_ELEM ((size_t)1 << 28)

static int setup_binary(bench_state *b, const bench_case *c)
{
    (void)c;
    return OK(RAND(0, -1, 1, N_ELEM) && RAND(1, -1, 1, N_ELEM) && EMPTY(2, WGML_F32, N_ELEM));
}
static wgml_status run_add(bench_state *b) { return wgml_add(b->eng, b->t[0], b->t[1], b->t[2]); }
static wgml_status run_mul(bench_state *b) { return wgml_mul(b->eng, b->t[0], b->t[1], b->t[2]); }
static wgml_status run_copy(bench_state *b) { return wgml_copy_tensor(b->eng, b->t[0], b->t[2], 0); }

/* ---- per-op overhead ---------------------------------------------------------------- */

static int setup_tiny(bench_state *b, const bench_case *c)
{
    (void)c;
    return OK(RAND(0, -1e-3, 1e-3, 1024) && RAND(1, -1e-3, 1e-3, 1024));
}
static wgml_status run_tiny_add(bench_state *b) { return wgml_add(b->eng, b->t[0], b->t[1], b->t[0]); }

const bench_case bench_cases[] = {
    { "add", "2^28", 3 * F * N_ELEM, 0, setup_binary, run_add, "memory" },
    { "mul", "2^28", 3 * F * N_ELEM, 0, setup_binary, run_mul, "memory" },
    { "copy_tensor", "2^28", 2 * F * N_ELEM, 0, setup_binary, run_copy, "memory" },
    { "add", "1024 x1000 chain", 3 * F * 1024, 0, setup_tiny, run_tiny_add, "overhead" },
};
const size_t bench_case_count = sizeof bench_cases / sizeof bench_cases[0];
