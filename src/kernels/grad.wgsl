// Gradient utilities: element-wise squares, scaling, accumulation, and the global norm of
// many tensors with clipping by it, all on the GPU.
//
// Element-wise entry points work on vec4 (buffers are padded to 16 bytes; lanes past n
// are padding), one vec4 per thread, with in-place variants because WebGPU forbids one
// buffer bound read-only and read-write in a dispatch:
//   square / square_inplace         out = x * x
//   scale_inplace                   io *= s
//   accumulate / accumulate_self    io += other  (io += io when both are the same tensor)
// EU (4) vec4 per thread, loads before stores: see below.
//
// Global norm, deterministic and without float atomics:
//   sumsq_xK   K tensors per dispatch (K = 1, 4 or 8, as many as the device's storage
//              buffer limit allows beside the scratch buffer): the workgroups of a dispatch
//              are split between the slots by cumulative workgroup counts in the uniform.
//              Each workgroup sums the squares of one chunk of CHUNK4 vec4 of its tensor
//              (lanes past the tensor's numel masked: padding may hold anything), reduces
//              in workgroup memory in a fixed tree order and writes one partial to scratch
//              at a position fixed by the tensor order and chunk index.
//   sumsq_final one workgroup sums the partials in a fixed order (strided per thread, then
//              a tree), takes the square root and writes norm[0].
// Every tensor is read once with 16-byte loads; the partials are a few KB. Many small
// tensors (a model's parameter list) cost ceil(count / K) + 1 dispatches, not count + 1.
//
//   clip_xK    K = 1, 2, 4 or 8 gradients per dispatch (exactly K: a read-write binding
//              cannot repeat a buffer to fill a slot): grad *= pre * min(1, max_norm /
//              (norm[0] + 1e-6)) (grad *= pre for a negative max_norm), the factor computed
//              by every thread from norm[0] on the GPU, so clipping needs no read-back
//              between the norm and the update.
//
// The grid may be 2-D when there are more workgroups than one dimension allows; the
// linear workgroup index is wid.x + wid.y * nwg.x.

override WG: u32 = 256u;
override CHUNK4: u32 = 2048u;   // vec4 per workgroup in sumsq (8 per thread)

// ---- element-wise -------------------------------------------------------------------

struct Elem {
    n4: u32,
    scale: f32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> ep: Elem;
@group(0) @binding(1) var<storage, read> e_in: array<vec4f>;
@group(0) @binding(2) var<storage, read_write> e_out: array<vec4f>;
@group(0) @binding(1) var<storage, read_write> e_io: array<vec4f>;
@group(0) @binding(2) var<storage, read> e_other: array<vec4f>;

fn linear_wg(wid: vec3u, nwg: vec3u) -> u32 {
    return wid.x + wid.y * nwg.x;
}

// Each thread handles EU vec4 at stride WG (every access of a workgroup coalesced): it
// issues all its loads before any store, so EU independent 16-byte loads per thread are in
// flight. With one vec4 per thread a single-stream in-place op (io *= s) has only one load
// per thread outstanding, which on the H200 is too little to cover DRAM latency.
const EU: u32 = 4u;

@compute @workgroup_size(WG)
fn square(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
          @builtin(num_workgroups) nwg: vec3u) {
    let base = linear_wg(wid, nwg) * (WG * EU) + lid.x;
    var x: array<vec4f, EU>;
    
    for (var u = 0u; u < EU; u++) {
        let i = base + u * WG;
        if (i < ep.n4) { x[u] = e_in[i]; }
    }
    for (var u = 0u; u < EU; u++) {
        let i = base + u * WG;
        if (i < ep.n4) { e_out[i] = x[u] * x[u]; }
    }
}

@compute @workgroup_size(WG)
fn square_inplace(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
          @builtin(num_workgroups) nwg: vec3u) {
    let base = linear_wg(wid, nwg) * (WG * EU) + lid.x;
    var x: array<vec4f, EU>;
    
    for (var u = 0u; u < EU; u++) {
        let i = base + u * WG;
        if (i < ep.n4) { x[u] = e_io[i]; }
    }
    for (var u = 0u; u < EU; u++) {
        let i = base + u * WG;
        if (i < ep.n4) { e_io[i] = x[u] * x[u]; }
    }
}

@compute @workgroup_size(WG)
fn scale_inplace(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
          @builtin(num_workgroups) nwg: vec3u) {
    let base = linear_wg(wid, nwg) * (WG * EU) + lid.x;
    var x: array<vec4f, EU>;
    
    for (var u = 0u; u < EU; u++) {
        let i = base + u * WG;
        if (i < ep.n4) { x[u] = e_io[i]; }
    }
    for (var u = 0u; u < EU; u++) {
        let i = base + u * WG;
        if (i < ep.n4) { e_io[i] = x[u] * ep.scale; }
    }
}

@compute @workgroup_size(WG)
fn accumulate(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
          @builtin(num_workgroups) nwg: vec3u) {
    let base = linear_wg(wid, nwg) * (WG * EU) + lid.x;
    var x: array<vec4f, EU>;
    var y: array<vec4f, EU>;
    for (var u = 0u; u < EU; u++) {
        let i = base + u * WG;
        if (i < ep.n4) { x[u] = e_io[i]; y[u] = e_other[i]; }
    }
    for (var u = 0u; u < EU; u++) {
        let i = base + u * WG;
        if (i < ep.n4) { e_io[i] = x[u] + y[u]; }
    }
}

@compute @workgroup_size(WG)
fn accumulate_self(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
          @builtin(num_workgroups) nwg: vec3u) {
    let base = linear_wg(wid, nwg) * (WG * EU) + lid.x;
    var x: array<vec4f, EU>;
    
    for (var u = 0u; u < EU; u++) {
        let i = base + u * WG;
        if (i < ep.n4) { x[u] = e_io[i]; }
    }
    for (var u = 0u; u < EU; u++) {
        let i = base + u * WG;
        if (i < ep.n4) { e_io[i] = x[u] + x[u]; }
    }
}

// ---- global norm and clipping -----------------------------------------------------------

struct Multi {
    base: u32,       // sumsq: scratch index of this dispatch's first partial
    nparts: u32,     // sumsq_final: partials to sum
    max_norm: f32,   // clip: negative for none (then only pre)
    pre: f32,        // clip: every gradient also times this (a trainer's loss unscaling)
    slots: array<vec4u, 8>,   // x: cumulative workgroup end, y: numel (sumsq) or vec4 count (clip)
}

@group(0) @binding(0) var<uniform> mp: Multi;
@group(0) @binding(1) var<storage, read_write> partials: array<f32>;
@group(0) @binding(1) var<storage, read> partials_r: array<f32>;
@group(0) @binding(2) var<storage, read_write> norm_out: array<f32>;
@group(0) @binding(1) var<storage, read> norm_in: array<f32>;

@group(0) @binding(2) var<storage, read> t0: array<vec4f>;
@group(0) @binding(3) var<storage, read> t1: array<vec4f>;
@group(0) @binding(4) var<storage, read> t2: array<vec4f>;
@group(0) @binding(5) var<storage, read> t3: array<vec4f>;
@group(0) @binding(6) var<storage, read> t4: array<vec4f>;
@group(0) @binding(7) var<storage, read> t5: array<vec4f>;
@group(0) @binding(8) var<storage, read> t6: array<vec4f>;
@group(0) @binding(9) var<storage, read> t7: array<vec4f>;

@group(0) @binding(2) var<storage, read_write> g0: array<vec4f>;
@group(0) @binding(3) var<storage, read_write> g1: array<vec4f>;
@group(0) @binding(4) var<storage, read_write> g2: array<vec4f>;
@group(0) @binding(5) var<storage, read_write> g3: array<vec4f>;
@group(0) @binding(6) var<storage, read_write> g4: array<vec4f>;
@group(0) @binding(7) var<storage, read_write> g5: array<vec4f>;
@group(0) @binding(8) var<storage, read_write> g6: array<vec4f>;
@group(0) @binding(9) var<storage, read_write> g7: array<vec4f>;

var<workgroup> red: array<f32, WG>;

// (slot, workgroup index inside the slot) of workgroup wg; slot == nslots past the end.
fn locate(wg: u32, nslots: u32) -> vec2u {
    var start = 0u;
    for (var k = 0u; k < nslots; k++) {
        let end = mp.slots[k].x;
        if (wg < end) {
            return vec2u(k, wg - start);
        }
        start = end;
    }
    return vec2u(nslots, 0u);
}

// Sum of squares of chunk c of a tensor of numel n, per thread (lanes past n masked).
fn chunk_bounds(c: u32, n: u32) -> vec2u {
    let n4 = (n + 3u) / 4u;
    let begin = c * CHUNK4;
    return vec2u(begin, min(begin + CHUNK4, n4));
}

fn square_masked(x: vec4f, i: u32, n: u32) -> f32 {
    let lanes = vec4u(4u * i) + vec4u(0u, 1u, 2u, 3u);
    let y = select(vec4f(0.0), x, lanes < vec4u(n));
    return dot(y, y);
}

fn reduce_and_store(lid: u32, wg: u32, acc: f32) {
    red[lid] = acc;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        if (lid < stride) {
            red[lid] = red[lid] + red[lid + stride];
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        partials[mp.base + wg] = red[0];
    }
}

// Per-slot chunk sums: the slot is chosen once per workgroup (a switch outside the loop),
// and each thread issues 8 independent 16-byte loads (stride WG) before it adds their
// squares, so 8 loads per thread are in flight instead of one load, one add. The adds run
// in the same order as a plain strided loop (i = begin + lid, + WG, ...); masked slots
// add nothing, so the partials are bitwise those of that loop.
const UNROLL: u32 = 8u;
fn chunk_sum0(r: vec2u, lid: u32, n: u32) -> f32 {
    var acc = 0.0;
    for (var b = r.x + lid; b < r.y; b += UNROLL * WG) {
        var x: array<vec4f, UNROLL>;
        for (var u = 0u; u < UNROLL; u++) {
            let i = b + u * WG;
            x[u] = vec4f(0.0);
            if (i < r.y) { x[u] = t0[i]; }
        }
        for (var u = 0u; u < UNROLL; u++) {
            let i = b + u * WG;
            if (i < r.y) { acc += square_masked(x[u], i, n); }
        }
    }
    return acc;
}
fn chunk_sum1(r: vec2u, lid: u32, n: u32) -> f32 {
    var acc = 0.0;
    for (var b = r.x + lid; b < r.y; b += UNROLL * WG) {
        var x: array<vec4f, UNROLL>;
        for (var u = 0u; u < UNROLL; u++) {
            let i = b + u * WG;
            x[u] = vec4f(0.0);
            if (i < r.y) { x[u] = t1[i]; }
        }
        for (var u = 0u; u < UNROLL; u++) {
            let i = b + u * WG;
            if (i < r.y) { acc += square_masked(x[u], i, n); }
        }
    }
    return acc;
}
fn chunk_sum2(r: vec2u, lid: u32, n: u32) -> f32 {
    var acc = 0.0;
    for (var b = r.x + lid; b < r.y; b += UNROLL * WG) {
        var x: array<vec4f, UNROLL>;
        for (var u = 0u; u < UNROLL; u++) {
            let i = b + u * WG;
            x[u] = vec4f(0.0);
            if (i < r.y) { x[u] = t2[i]; }
        }
        for (var u = 0u; u < UNROLL; u++) {
            let i = b + u * WG;
            if (i < r.y) { acc += square_masked(x[u], i, n); }
        }
    }
    return acc;
}
fn chunk_sum3(r: vec2u, lid: u32, n: u32) -> f32 {
    var acc = 0.0;
    for (var b = r.x + lid; b < r.y; b += UNROLL * WG) {
        var x: array<vec4f, UNROLL>;
        for (var u = 0u; u < UNROLL; u++) {
            let i = b + u * WG;
            x[u] = vec4f(0.0);
            if (i < r.y) { x[u] = t3[i]; }
        }
        for (var u = 0u; u < UNROLL; u++) {
            let i = b + u * WG;
            if (i < r.y) { acc += square_masked(x[u], i, n); }
        }
    }
    return acc;
}
fn chunk_sum4(r: vec2u, lid: u32, n: u32) -> f32 {
    var acc = 0.0;
    for (var b = r.x + lid; b < r.y; b += UNROLL * WG) {
        var x: array<vec4f, UNROLL>;
        for (var u = 0u; u < UNROLL; u++) {
            let i = b + u * WG;
            x[u] = vec4f(0.0);
            if (i < r.y) { x[u] = t4[i]; }
        }
        for (var u = 0u; u < UNROLL; u++) {
            let i = b + u * WG;
            if (i < r.y) { acc += square_masked(x[u], i, n); }
        }
    }
    return acc;
}
fn chunk_sum5(r: vec2u, lid: u32, n: u32) -> f32 {
    var acc = 0.0;
    for (var b = r.x + lid; b < r.y; b += UNROLL * WG) {
        var x: array<vec4f, UNROLL>;
        for (var u = 0u; u < UNROLL; u++) {
            let i = b + u * WG;
            x[u] = vec4f(0.0);
            if (i < r.y) { x[u] = t5[i]; }
        }
        for (var u = 0u; u < UNROLL; u++) {
            let i = b + u * WG;
            if (i < r.y) { acc += square_masked(x[u], i, n); }
        }
    }
    return acc;
}
fn chunk_sum6(r: vec2u, lid: u32, n: u32) -> f32 {
    var acc = 0.0;
    for (var b = r.x + lid; b < r.y; b += UNROLL * WG) {
        var x: array<vec4f, UNROLL>;
        for (var u = 0u; u < UNROLL; u++) {
            let i = b + u * WG;
            x[u] = vec4f(0.0);
            if (i < r.y) { x[u] = t6[i]; }
        }
        for (var u = 0u; u < UNROLL; u++) {
            let i = b + u * WG;
            if (i < r.y) { acc += square_masked(x[u], i, n); }
        }
    }
    return acc;
}
fn chunk_sum7(r: vec2u, lid: u32, n: u32) -> f32 {
    var acc = 0.0;
    for (var b = r.x + lid; b < r.y; b += UNROLL * WG) {
        var x: array<vec4f, UNROLL>;
        for (var u = 0u; u < UNROLL; u++) {
            let i = b + u * WG;
            x[u] = vec4f(0.0);
            if (i < r.y) { x[u] = t7[i]; }
        }
        for (var u = 0u; u < UNROLL; u++) {
            let i = b + u * WG;
            if (i < r.y) { acc += square_masked(x[u], i, n); }
        }
    }
    return acc;
}

@compute @workgroup_size(WG)
fn sumsq_x1(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
            @builtin(num_workgroups) nwg: vec3u) {
    let wg = linear_wg(wid, nwg);
    let at = locate(wg, 1u);
    if (at.x >= 1u) { return; }
    let n = mp.slots[at.x].y;
    reduce_and_store(lid.x, wg, chunk_sum0(chunk_bounds(at.y, n), lid.x, n));
}

@compute @workgroup_size(WG)
fn sumsq_x4(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
            @builtin(num_workgroups) nwg: vec3u) {
    let wg = linear_wg(wid, nwg);
    let at = locate(wg, 4u);
    if (at.x >= 4u) { return; }
    let n = mp.slots[at.x].y;
    let r = chunk_bounds(at.y, n);
    var acc = 0.0;
    switch at.x {
        case 0u: { acc = chunk_sum0(r, lid.x, n); }
        case 1u: { acc = chunk_sum1(r, lid.x, n); }
        case 2u: { acc = chunk_sum2(r, lid.x, n); }
        default: { acc = chunk_sum3(r, lid.x, n); }
    }
    reduce_and_store(lid.x, wg, acc);
}

@compute @workgroup_size(WG)
fn sumsq_x8(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
            @builtin(num_workgroups) nwg: vec3u) {
    let wg = linear_wg(wid, nwg);
    let at = locate(wg, 8u);
    if (at.x >= 8u) { return; }
    let n = mp.slots[at.x].y;
    let r = chunk_bounds(at.y, n);
    var acc = 0.0;
    switch at.x {
        case 0u: { acc = chunk_sum0(r, lid.x, n); }
        case 1u: { acc = chunk_sum1(r, lid.x, n); }
        case 2u: { acc = chunk_sum2(r, lid.x, n); }
        case 3u: { acc = chunk_sum3(r, lid.x, n); }
        case 4u: { acc = chunk_sum4(r, lid.x, n); }
        case 5u: { acc = chunk_sum5(r, lid.x, n); }
        case 6u: { acc = chunk_sum6(r, lid.x, n); }
        default: { acc = chunk_sum7(r, lid.x, n); }
    }
    reduce_and_store(lid.x, wg, acc);
}

@compute @workgroup_size(WG)
fn sumsq_final(@builtin(local_invocation_id) lid3: vec3u) {
    let lid = lid3.x;
    var acc = 0.0;
    for (var i = lid; i < mp.nparts; i += WG) {
        acc += partials_r[i];
    }
    red[lid] = acc;
    workgroupBarrier();
    for (var stride = WG / 2u; stride > 0u; stride = stride / 2u) {
        if (lid < stride) {
            red[lid] = red[lid] + red[lid + stride];
        }
        workgroupBarrier();
    }
    if (lid == 0u) {
        norm_out[0] = sqrt(red[0]);
    }
}

fn clip_factor() -> f32 {
    if (mp.max_norm < 0.0) { return mp.pre; }
    return mp.pre * min(1.0, mp.max_norm / (norm_in[0] + 1e-6));
}

fn clip_index(wid: vec3u, nwg: vec3u, lid: u32, nslots: u32) -> vec2u {
    let at = locate(linear_wg(wid, nwg), nslots);
    if (at.x >= nslots) { return at; }
    let i = at.y * WG + lid;
    if (i >= mp.slots[at.x].y) { return vec2u(nslots, 0u); }
    return vec2u(at.x, i);
}

@compute @workgroup_size(WG)
fn clip_x1(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
           @builtin(num_workgroups) nwg: vec3u) {
    let at = clip_index(wid, nwg, lid.x, 1u);
    if (at.x >= 1u) { return; }
    let i = at.y;
    g0[i] = g0[i] * clip_factor();
}

@compute @workgroup_size(WG)
fn clip_x2(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
           @builtin(num_workgroups) nwg: vec3u) {
    let at = clip_index(wid, nwg, lid.x, 2u);
    let i = at.y;
    let s = clip_factor();
    switch at.x {
        case 0u: { g0[i] = g0[i] * s; }
        case 1u: { g1[i] = g1[i] * s; }
        default: {}
    }
}

@compute @workgroup_size(WG)
fn clip_x4(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
           @builtin(num_workgroups) nwg: vec3u) {
    let at = clip_index(wid, nwg, lid.x, 4u);
    let i = at.y;
    let s = clip_factor();
    switch at.x {
        case 0u: { g0[i] = g0[i] * s; }
        case 1u: { g1[i] = g1[i] * s; }
        case 2u: { g2[i] = g2[i] * s; }
        case 3u: { g3[i] = g3[i] * s; }
        default: {}
    }
}

@compute @workgroup_size(WG)
fn clip_x8(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
           @builtin(num_workgroups) nwg: vec3u) {
    let at = clip_index(wid, nwg, lid.x, 8u);
    let i = at.y;
    let s = clip_factor();
    switch at.x {
        case 0u: { g0[i] = g0[i] * s; }
        case 1u: { g1[i] = g1[i] * s; }
        case 2u: { g2[i] = g2[i] * s; }
        case 3u: { g3[i] = g3[i] * s; }
        case 4u: { g4[i] = g4[i] * s; }
        case 5u: { g5[i] = g5[i] * s; }
        case 6u: { g6[i] = g6[i] * s; }
        case 7u: { g7[i] = g7[i] * s; }
        default: {}
    }
}
