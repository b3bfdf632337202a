/* Element-wise arithmetic: add, sub, mul. Kernels: src/kernels/elementwise.wgsl.

   Fusion. A chain of dependent tiny ops is bound by the GPU's time per dependent dispatch
   (a barrier and a launch), not by its arithmetic (bench/notes/overhead.md). So a call on
   at most FUSE_MAX_N4 vec4 is not recorded at once: it joins the context's pending group
   (ops of one engine on tensors of one vec4 count over at most WGML__FUSE_SLOTS distinct
   buffers), held back through the recorder's deferred-work hook (wgml__deferred_ops), and
   recorded as one dispatch of `fused` when the group is full, when anything else is
   recorded, written, read, submitted or released, or when its engine is destroyed. `fused` runs the
   group's ops in call order for each vec4 index; since every op reads and writes index i
   of its tensors only, that gives each tensor the same values, bit for bit, as running the
   ops one dispatch after another. A group of one op is recorded by the op's own kernel,
   as without fusion. WGML_FUSE=0 records every op at once. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define WG 256
/* Larger ops stream enough bytes that a dispatch's launch is a small part of their time. */
#define FUSE_MAX_N4 (1u << 18)

enum { OP_ADD = 0, OP_SUB = 1, OP_MUL = 2 };

/* The ops waiting to be recorded as one dispatch: ops of one engine on tensors of n4 vec4
   each, over at most WGML__FUSE_SLOTS distinct buffers. Op k is ops[k] = OP | out << 2 |
   a << 4 | b << 6 (OP 0 add, 1 sub, 2 mul; the others are slot numbers). */
#define FUSE_MAX_OPS 60   /* a 256-byte uniform block: 16 bytes of header, 60 words */
typedef struct fuse_group {
    wgml_engine *engine;
    uint32_t n4, nops, nslots;
    wgml_tensor *slots[WGML__FUSE_SLOTS];
    uint32_t ops[FUSE_MAX_OPS];
} fuse_group;

typedef struct binary_params { uint32_t n4, pad[3]; } binary_params;
typedef struct fused_params { uint32_t n4, nops, pad[2], ops[FUSE_MAX_OPS]; } fused_params;
_Static_assert(sizeof(fused_params) == 256, "the fused program fills one 256-byte uniform block");

/* Records out = a OP b now, with the entry point that matches how out aliases a and b. */
static wgml_status record_binary(wgml_engine *e, int op, const wgml_tensor *a, const wgml_tensor *b, wgml_tensor *out)
{
    uint64_t n4 = (wgml_tensor_numel(a) + 3) / 4;
    binary_params p = { .n4 = (uint32_t)n4 };
    uint32_t gx, gy;
    WGML_CHECK(wgml__grid(e->ctx, (n4 + WG - 1) / WG, &gx, &gy));

    bool oa = wgml__same(out, a), ob = wgml__same(out, b);
    wgml__kernel k = { .file = "elementwise", .nconst = 2,
                       .constants = { { "OP", op }, { "SWAP", 0 } } };
    wgml__arg args[3];
    uint32_t nargs;
    if (oa && ob) {
        k.entry = "binary_self";
        k.layout = "uw";
        args[0] = wgml__t(out);
        nargs = 1;
    } else if (oa || ob) {
        k.entry = "binary_inplace";
        k.layout = "uwr";
        k.constants[1].value = ob;
        args[0] = wgml__t(out);
        args[1] = wgml__t(oa ? b : a);
        nargs = 2;
    } else {
        k.entry = "binary";
        k.layout = "urrw";
        args[0] = wgml__t(a);
        args[1] = wgml__t(b);
        args[2] = wgml__t(out);
        nargs = 3;
    }
    return wgml__dispatch(e, &k, &p, sizeof p, args, nargs, gx, gy, 1);
}

/* ---- the pending group -------------------------------------------------------------- */

static int slot_of(const fuse_group *g, const wgml_tensor *t)
{
    for (uint32_t i = 0; i < g->nslots; i++)
        if (wgml__same(g->slots[i], t)) return (int)i;
    return -1;
}

static uint32_t slot_add(fuse_group *g, const wgml_tensor *t)
{
    int s = slot_of(g, t);
    if (s >= 0) return (uint32_t)s;
    g->slots[g->nslots] = (wgml_tensor *)t;
    return g->nslots++;
}

/* Slots the op would add to g: its distinct buffers not bound yet. */
static uint32_t new_slots(const fuse_group *g, const wgml_tensor *a, const wgml_tensor *b, const wgml_tensor *out)
{
    uint32_t n = slot_of(g, a) < 0;
    n += slot_of(g, b) < 0 && !wgml__same(b, a);
    n += slot_of(g, out) < 0 && !wgml__same(out, a) && !wgml__same(out, b);
    return n;
}

static wgml_status flush_group(wgml_context *ctx);
static bool group_uses(const wgml_context *ctx, const wgml_tensor *t, const wgml_engine *e);
static void release_group(wgml_context *ctx);
static const wgml__deferred_ops fusion = { .flush = flush_group, .uses = group_uses, .release = release_group };

/* The context's group, made and registered with the recorder on first use; NULL when out
   of host memory. */
static fuse_group *group_of(wgml_context *ctx)
{
    if (ctx->deferred_ops != &fusion) {
        fuse_group *g = calloc(1, sizeof *g);
        if (!g) return NULL;
        ctx->deferred_state = g;
        ctx->deferred_ops = &fusion;
    }
    return ctx->deferred_state;
}

static wgml_status join_group(wgml_engine *e, int op, const wgml_tensor *a, const wgml_tensor *b, wgml_tensor *out,
                              uint32_t n4)
{
    wgml_context *ctx = e->ctx;
    fuse_group *g = group_of(ctx);
    if (!g) return wgml__fail(ctx, WGML_ERROR_OUT_OF_MEMORY, "out of host memory for the element-wise group");
    if (g->nops && (g->engine != e || g->n4 != n4 || g->nops == FUSE_MAX_OPS ||
                    g->nslots + new_slots(g, a, b, out) > WGML__FUSE_SLOTS))
        WGML_CHECK(flush_group(ctx));
    if (!g->nops) *g = (fuse_group){ .engine = e, .n4 = n4 };
    uint32_t sa = slot_add(g, a), sb = slot_add(g, b), so = slot_add(g, out);
    g->ops[g->nops++] = (uint32_t)op | so << 2 | sa << 4 | sb << 6;
    wgml__wrote(out);
    ctx->commands++;   /* recorded, as far as the caller can tell */
    return WGML_OK;
}

static wgml_status record_fused(const fuse_group *g)
{
    wgml_engine *e = g->engine;
    fused_params p = { .n4 = g->n4, .nops = g->nops };
    memcpy(p.ops, g->ops, g->nops * sizeof g->ops[0]);
    wgml__arg args[WGML__FUSE_SLOTS];
    for (uint32_t i = 0; i < WGML__FUSE_SLOTS; i++) {
        if (i < g->nslots) {
            /* no write record here: join_group made it for each op's out */
            args[i] = (wgml__arg){ g->slots[i]->buffer, g->slots[i]->capacity, NULL };
        } else {
            WGML_CHECK(wgml__scratch(e, WGML__SCRATCH_FUSE_SPARE + i - g->nslots, 16, &args[i]));
            args[i].tensor = NULL;
        }
    }
    uint32_t gx, gy;
    WGML_CHECK(wgml__grid(e->ctx, (g->n4 + WG - 1) / WG, &gx, &gy));
    wgml__kernel k = { .file = "elementwise", .entry = "fused", .layout = "uwwww" };
    _Static_assert(WGML__FUSE_SLOTS == 4, "the layout and the kernel have four slots");
    return wgml__dispatch(e, &k, &p, sizeof p, args, WGML__FUSE_SLOTS, gx, gy, 1);
}

static wgml_status flush_group(wgml_context *ctx)
{
    fuse_group *held = ctx->deferred_state;
    if (!held->nops) return WGML_OK;
    fuse_group g = *held;
    held->nops = 0;   /* first: recording it flushes again */
    held->engine = NULL;
    uint64_t commands = ctx->commands;
    wgml_status s;
    if (g.nops == 1) {
        uint32_t w = g.ops[0];
        s = record_binary(g.engine, (int)(w & 3), g.slots[w >> 4 & 3], g.slots[w >> 6 & 3], g.slots[w >> 2 & 3]);
    } else {
        s = record_fused(&g);
    }
    ctx->commands = commands;   /* the ops were counted when called */
    return s;
}

static bool group_uses(const wgml_context *ctx, const wgml_tensor *t, const wgml_engine *e)
{
    const fuse_group *g = ctx->deferred_state;
    if (!g->nops) return false;
    if (e) return g->engine == e;
    return slot_of(g, t) >= 0;
}

wgml__fusion_view wgml__fusion_pending(const wgml_context *ctx)
{
    const fuse_group *g = ctx->deferred_ops == &fusion ? ctx->deferred_state : NULL;
    if (!g || !g->nops) return (wgml__fusion_view){ 0 };
    return (wgml__fusion_view){ .nops = g->nops, .nslots = g->nslots, .n4 = g->n4, .engine = g->engine };
}

static void release_group(wgml_context *ctx)
{
    free(ctx->deferred_state);
    ctx->deferred_state = NULL;
    ctx->deferred_ops = NULL;
}

/* ---- the ops ------------------------------------------------------------------------ */

static wgml_status binary(wgml_engine *e, const char *fn, int op, const wgml_tensor *a, const wgml_tensor *b, wgml_tensor *out)
{
    WGML_CHECK(wgml__check_engine(e, fn));
    WGML_CHECK(wgml__check_tensor(e, fn, "a", a, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "b", b, WGML_F32));
    WGML_CHECK(wgml__check_tensor(e, fn, "out", out, WGML_F32));
    WGML_CHECK(wgml__check_same_numel(e, fn, "a", a, "b", b));
    WGML_CHECK(wgml__check_same_numel(e, fn, "a", a, "out", out));

    wgml_context *ctx = e->ctx;
    uint64_t n4 = (wgml_tensor_numel(a) + 3) / 4;
    if (!ctx->fuse_off && !ctx->submit_every_op && n4 <= FUSE_MAX_N4) return join_group(e, op, a, b, out, (uint32_t)n4);
    return record_binary(e, op, a, b, out);
}

wgml_status wgml_add(wgml_engine *e, const wgml_tensor *a, const wgml_tensor *b, wgml_tensor *out)
{
    return binary(e, "wgml_add", OP_ADD, a, b, out);
}

wgml_status wgml_sub(wgml_engine *e, const wgml_tensor *a, const wgml_tensor *b, wgml_tensor *out)
{
    return binary(e, "wgml_sub", OP_SUB, a, b, out);
}

wgml_status wgml_mul(wgml_engine *e, const wgml_tensor *a, const wgml_tensor *b, wgml_tensor *out)
{
    return binary(e, "wgml_mul", OP_MUL, a, b, out);
}

const wgml__kernel wgml__elementwise_kernels[] = {
    { .file = "elementwise", .entry = "binary", .layout = "urrw", .nconst = 2, .constants = { { "OP", OP_ADD }, { "SWAP", 0 } } },
    { .file = "elementwise", .entry = "binary", .layout = "urrw", .nconst = 2, .constants = { { "OP", OP_SUB }, { "SWAP", 0 } } },
    { .file = "elementwise", .entry = "binary", .layout = "urrw", .nconst = 2, .constants = { { "OP", OP_MUL }, { "SWAP", 0 } } },
    { .file = "elementwise", .entry = "fused", .layout = "uwwww" },
};
const size_t wgml__elementwise_kernel_count = sizeof wgml__elementwise_kernels / sizeof wgml__elementwise_kernels[0];
