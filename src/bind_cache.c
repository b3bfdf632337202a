/* The bind group cache: an open-addressing table from (engine, layout, buffers, sizes) to a
   bind group. A training step calls the same ops on the same tensors every time, so after
   the first step every dispatch finds its bind group here instead of creating one.
   Entries are removed eagerly when a tensor's buffer is released or an engine destroyed;
   the table is cleared when it fills (a workload with that many distinct bindings gains
   nothing from the cache). */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define CACHE_CAP 2048u   /* power of two */

struct wgml__bind_cache_entry {
    bool used;
    uint64_t hash;
    wgml__bind_key key;
    WGPUBindGroup group;
};

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    return h * 0xBF58476D1CE4E5B9ull;
}

static uint64_t hash_key(const wgml__bind_key *k)
{
    uint64_t h = mix((uint64_t)(uintptr_t)k->engine, (uint64_t)(uintptr_t)k->layout);
    for (uint32_t i = 0; i < k->nbuffers; i++) h = mix(mix(h, (uint64_t)(uintptr_t)k->buffers[i]), k->sizes[i]);
    return h | 1;
}

static bool same_key(const wgml__bind_key *a, const wgml__bind_key *b)
{
    if (a->engine != b->engine || a->layout != b->layout || a->nbuffers != b->nbuffers) return false;
    for (uint32_t i = 0; i < a->nbuffers; i++)
        if (a->buffers[i] != b->buffers[i] || a->sizes[i] != b->sizes[i]) return false;
    return true;
}

static void clear_all(wgml_context *ctx)
{
    for (uint32_t i = 0; i < ctx->bind_cache_cap; i++)
        if (ctx->bind_cache[i].used) {
            wgpuBindGroupRelease(ctx->bind_cache[i].group);
            ctx->bind_cache[i].used = false;
        }
}

/* Drops every entry that matches, then re-inserts the survivors, so no probe chain is
   left broken (simpler and safer than deleting from the middle of clusters). */
static void remove_matching(wgml_context *ctx, bool (*match)(const wgml__bind_key *, const void *), const void *what)
{
    uint32_t removed = 0;
    for (uint32_t i = 0; i < ctx->bind_cache_cap; i++)
        if (ctx->bind_cache[i].used && match(&ctx->bind_cache[i].key, what)) {
            wgpuBindGroupRelease(ctx->bind_cache[i].group);
            ctx->bind_cache[i].used = false;
            removed++;
        }
    if (!removed) return;
    struct wgml__bind_cache_entry *old = ctx->bind_cache;
    struct wgml__bind_cache_entry *fresh = calloc(ctx->bind_cache_cap, sizeof *fresh);
    if (!fresh) {   /* cannot rehash: drop everything, which is always correct */
        clear_all(ctx);
        return;
    }
    uint32_t mask = ctx->bind_cache_cap - 1;
    for (uint32_t i = 0; i < ctx->bind_cache_cap; i++)
        if (old[i].used) {
            uint32_t k = (uint32_t)old[i].hash & mask;
            while (fresh[k].used) k = (k + 1) & mask;
            fresh[k] = old[i];
        }
    ctx->bind_cache = fresh;
    free(old);
}

static bool names_buffer(const wgml__bind_key *k, const void *buffer)
{
    for (uint32_t j = 0; j < k->nbuffers; j++)
        if ((const void *)k->buffers[j] == buffer) return true;
    return false;
}

static bool of_engine(const wgml__bind_key *k, const void *engine) { return k->engine == engine; }

static uint32_t count_used(const wgml_context *ctx)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < ctx->bind_cache_cap; i++) n += ctx->bind_cache[i].used;
    return n;
}

WGPUBindGroup wgml__bind_cache_get(wgml_context *ctx, const wgml__bind_key *key, const WGPUBindGroupEntry *entries,
                                   uint32_t nentries)
{
    if (!ctx->bind_cache) {
        ctx->bind_cache = calloc(CACHE_CAP, sizeof *ctx->bind_cache);
        if (!ctx->bind_cache) return NULL;
        ctx->bind_cache_cap = CACHE_CAP;
    }
    uint32_t mask = ctx->bind_cache_cap - 1;
    uint64_t h = hash_key(key);
    uint32_t i = (uint32_t)h & mask, probes = 0;
    for (; ctx->bind_cache[i].used; i = (i + 1) & mask, probes++) {
        if (ctx->bind_cache[i].hash == h && same_key(&ctx->bind_cache[i].key, key)) return ctx->bind_cache[i].group;
        if (probes > 64) break;
    }
    WGPUBindGroup bg = wgpuDeviceCreateBindGroup(ctx->device, &(WGPUBindGroupDescriptor){
        .layout = key->layout, .entryCount = nentries, .entries = entries });
    if (!bg) return NULL;
    if (probes > 64 || count_used(ctx) * 4 > ctx->bind_cache_cap * 3) {
        clear_all(ctx);
        i = (uint32_t)h & mask;
    }
    while (ctx->bind_cache[i].used) i = (i + 1) & mask;
    ctx->bind_cache[i] = (struct wgml__bind_cache_entry){ .used = true, .hash = h, .key = *key, .group = bg };
    return bg;
}

void wgml__bind_cache_forget_buffer(wgml_context *ctx, WGPUBuffer buffer)
{
    if (ctx->bind_cache) remove_matching(ctx, names_buffer, (const void *)buffer);
}

void wgml__bind_cache_forget_engine(wgml_context *ctx, const void *engine)
{
    if (ctx->bind_cache) remove_matching(ctx, of_engine, engine);
}

void wgml__bind_cache_free(wgml_context *ctx)
{
    if (!ctx->bind_cache) return;
    clear_all(ctx);
    free(ctx->bind_cache);
    ctx->bind_cache = NULL;
    ctx->bind_cache_cap = 0;
}
