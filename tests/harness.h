/* The shared test harness: a context and engine per program, fresh random inputs,
   poisoned outputs, and comparison against double-precision references with
   |got - ref| <= atol + rtol * |ref| that reports the worst element.

   A test program is a table of cases; main() is TH_MAIN(cases). Every check counts as
   one passed or failed assertion; the program prints "N passed, N failed" and exits
   non-zero on any failure. WGML_TEST_SEED=<n> reproduces a run's random inputs. */
#ifndef WGML_TEST_HARNESS_H
#define WGML_TEST_HARNESS_H

#include "wgml.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct th_case {
    const char *name;
    void (*fn)(void);
} th_case;

extern wgml_context *th_ctx;
extern wgml_engine *th_eng;

/* ---- assertions --------------------------------------------------------------------- */
void th_check_impl(bool ok, const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
#define TH_CHECK(cond, ...) th_check_impl((cond), __FILE__, __LINE__, __VA_ARGS__)
/* Expects call to return status; on a mismatch prints the message of the context. */
#define TH_EXPECT(call, status) th_expect_impl((call), (status), #call, __FILE__, __LINE__)
void th_expect_impl(wgml_status got, wgml_status want, const char *expr, const char *file, int line);
/* Like TH_EXPECT for a failure: also checks that the message names `needle`. */
#define TH_EXPECT_ERR(call, status, needle) th_expect_err_impl((call), (status), (needle), #call, __FILE__, __LINE__)
void th_expect_err_impl(wgml_status got, wgml_status want, const char *needle, const char *expr, const char *file, int line);

/* Compares n values; returns true when every |got-ref| <= atol + rtol*|ref| (NaN never
   passes). On failure prints up to 10 mismatches and the worst one. */
bool th_compare(const char *what, const float *got, const double *ref, size_t n, double atol, double rtol);
bool th_compare_u32(const char *what, const uint32_t *got, const uint32_t *ref, size_t n);

/* ---- data --------------------------------------------------------------------------- */
uint64_t th_seed(void);
double th_uniform(double lo, double hi);
uint32_t th_rand_u32(void);
float *th_random(size_t n, double lo, double hi);   /* malloc'd, free() it */
double *th_alloc_d(size_t n);
float *th_alloc_f(size_t n);
void th_to_double(const float *src, double *dst, size_t n);

/* Tensors: th_tensor uploads data; th_poisoned fills with NaN bits (0xFFFFFFFF) so an
   element the kernel never writes fails every comparison. Shapes end with 0. */
wgml_tensor *th_tensor(wgml_dtype dtype, const void *data, const size_t *shape);
wgml_tensor *th_poisoned(wgml_dtype dtype, const size_t *shape);
#define TH_SHAPE(...) ((const size_t[]){ __VA_ARGS__, 0 })
float *th_read(wgml_tensor *t);                      /* whole tensor, malloc'd */
void th_read_into(wgml_tensor *t, void *dst);

/* Context counters, to prove a rejected call recorded nothing. */
uint64_t th_commands(void);

/* ---- op cases: one table row per op and shape (as ggml's test-backend-ops) ------------

   A case names an op with its parameters, its inputs (dtype, shape, range of random
   values), its outputs (shape), a call that runs the op, a reference that computes the
   expected outputs in double from the same inputs, and a tolerance. th_run_case makes
   fresh random inputs, uploads them, poisons the outputs (NaN bits: an element the kernel
   never writes fails), runs the call, reads the outputs back, compares each against the
   reference (|got - ref| <= atol + rtol |ref|, or the case's own tol function per
   element), checks that the inputs are unchanged (unless the case says an output aliases
   one), and frees everything. A table of such rows, generated in loops, is a test. */
#define TH_MAX_IO 8
typedef struct th_io {
    wgml_dtype dtype;            /* WGML_F32, or WGML_U32 (integers drawn in [lo, hi]) */
    size_t shape[5];             /* 0-terminated, at most 4 dimensions */
    double lo, hi;               /* range of an input's random values */
} th_io;

typedef struct th_op_case th_op_case;

/* What the call and the reference of a case see. */
typedef struct th_run {
    const th_op_case *c;
    size_t n_in[TH_MAX_IO], n_out[TH_MAX_IO];        /* element counts */
    const void *in[TH_MAX_IO];                        /* host inputs: float *, or uint32_t * */
    wgml_tensor *t_in[TH_MAX_IO], *t_out[TH_MAX_IO];  /* on the device */
    double *ref[TH_MAX_IO];                           /* the reference fills these */
} th_run;

struct th_op_case {
    char name[128];              /* the op and its parameters, printed on a failure */
    int nin, nout;
    th_io in[TH_MAX_IO], out[TH_MAX_IO];
    wgml_status (*call)(const th_run *r);
    void (*reference)(const th_run *r);
    double atol, rtol;
    /* optional: the tolerance of output o's element i (replaces atol/rtol), e.g. a bound
       derived from the inputs' magnitudes */
    double (*tol)(const th_run *r, int o, size_t i);
    const void *params;          /* the op's parameters, for call, reference and tol */
    int aliased;                 /* 1 + the input an output overwrites (0: none): skip its check */
};
#define TH_IN(r, i) ((const float *)(r)->in[i])
#define TH_IN_U32(r, i) ((const uint32_t *)(r)->in[i])

/* Runs one case as described above; returns whether every check passed. */
bool th_run_case(const th_op_case *c);
/* Runs n cases. */
void th_run_cases(const th_op_case *cases, size_t n);

/* ---- finite differences ------------------------------------------------------------- */

/* Central differences of the scalar function f at x[0 .. n): grad[i] = (f(x + h_i e_i) -
   f(x - h_i e_i)) / (2 h_i), h_i = h max(1, |x_i|). x is restored on return. Truncation
   error h_i^2 |f'''| / 6, rounding about eps |f| / h_i: h = 1e-4 to 1e-6 in double. */
void th_finite_diff(double (*f)(const double *x, const void *ctx), const void *ctx, double *x, size_t n, double h,
                    double *grad);

/* ---- running ------------------------------------------------------------------------ */
/* Runs the cases whose name contains argv[1] or one of its '|'-separated parts (all when
   absent); "!text" runs those whose name contains none of them. */
int th_main(const th_case *cases, size_t n, int argc, char **argv);
#define TH_MAIN(cases) \
    int main(int argc, char **argv) { return th_main(cases, sizeof(cases) / sizeof(cases[0]), argc, argv); }

/* Awkward lengths: 1, 3, 7, 63, 65, 1000, 4097 and a large one past 2^20. */
extern const size_t th_awkward_sizes[];
extern const size_t th_awkward_count;

#endif
