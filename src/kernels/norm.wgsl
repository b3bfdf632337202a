// RMSNorm over the last dimension, its residual-fused forms and its backward pass.
//
//   fwd              out = (x [+ res]) * rsqrt(mean((x [+ res])^2) + eps) * (w + woff)
//   fwd_sum          the same with res, and also sum = x + res
//   fwd_sum_inplace  the same where sum is x or res itself: io holds that input and receives
//                    the sum (f32 addition commutes, so which of the two it is does not matter)
//   bwd              gin = rs * (g*w) - x * rs^3 * sum(g*w*x) / d        (rs = the forward rsqrt,
//                    w read as w + woff throughout)
//   bwd_dw           bwd, plus this workgroup's partial sum over its rows of g * x * rs
//   dw_reduce        gw = the partial sums added up in a fixed order (no float atomics)
//
// Layout. A tensor is `rows` rows of `d` contiguous f32. Every buffer is bound as
// array<vec4f> (buffers are padded to 16 bytes). When d % 4 == 0 (VEC) a row is d/4 aligned
// vec4 "units"; otherwise a unit is one element, read as one lane of the vec4 that holds it
// and written as that lane alone, with the other lanes of the unit zero. Either way the math
// below runs on vec4 units, so both paths share it.
//
// Why it is shaped so (memory-bound: the goal is one read of the inputs and one write of
// the outputs at full bandwidth):
//   - A row belongs to one segment of `tpr` threads (a power of two, chosen by the host so
//     that each thread holds about `upt` units: 8 on the forward pass, so 4096 f32 are 128
//     threads x 8 vec4 and a workgroup holds two such rows; 4 on the backward pass, whose
//     weight-gradient sums need it). A workgroup of WG threads holds WG/tpr segments, so
//     short rows pack several to a workgroup and rows of more than upt * WG / 2 units get
//     a whole workgroup. More units per thread means more independent 16-byte loads in
//     flight per thread and one row reduction per more bytes. Thread j of a segment takes units j, j+tpr, ...: consecutive threads read
//     consecutive 16-byte units, so every warp access is coalesced.
//   - Cached path (NV = 1..8 units per thread, rows up to 8 * WG units): the row is loaded
//     once into registers, reduced, then scaled from the registers, so DRAM sees exactly one
//     read and one write. NV is an override so the unit loops unroll into registers.
//   - Long path (NV = 0, longer rows): a strided loop reads the row twice (the second read
//     mostly hits L2; 16 KB to 1 MB per row).
//   - Reductions are radix-16 folds in workgroup memory over each segment (one barrier for
//     segments of up to 16 threads, two for up to 256; a binary tree needed log2(tpr) + 2),
//     in a fixed order, so results are deterministic and need no subgroup support.
//   - The weight gradient is a column sum over all rows. bwd_dw gives each workgroup a fixed
//     block of `grows` consecutive row blocks (at most ~1024 workgroups in all, decided by the
//     shape alone): each thread accumulates its columns in registers over those rows, the
//     segments of a workgroup are added in workgroup memory in segment order, and one partial
//     row per workgroup goes to a scratch buffer; dw_reduce then adds the partial rows per
//     column, 16 columns by 16 lanes per workgroup, lanes combined by a fixed tree.
// The grid may be 2-D (more workgroups than one dimension holds): the linear workgroup index
// is wid.x + wid.y * nwg.x and workgroups past `groups` return at once.

struct Params {
    rows: u32,    // rows of the tensor (dw_reduce: partial rows)
    d: u32,       // row length in elements
    units: u32,   // units per row: d / 4 (VEC) or d
    tpr: u32,     // threads per row segment, a power of two <= WG
    segs: u32,    // segments (rows) per workgroup: WG / tpr
    groups: u32,  // workgroups dispatched (linear count)
    grows: u32,   // bwd: row blocks per workgroup
    eps: f32,
    woff: f32,    // added to every weight as it is read: (1 + w) norms (Gemma) take 1
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

override WG: u32 = 256u;
override NV: u32 = 4u;          // units per thread held in registers; 0: long-row path
override VEC: bool = true;      // d % 4 == 0: a unit is an aligned vec4
override HAS_RES: bool = false; // fwd: add res to x
override SELF: bool = false;    // fwd_sum_inplace: x, res and sum are all io
override ACC: bool = false;     // bwd, bwd_dw: gin += the gradient (read first) instead of gin = it

const NVMAX: u32 = 8u;

@group(0) @binding(0) var<uniform> p: Params;

// fwd, fwd_sum (and x in bwd, bwd_dw)
@group(0) @binding(1) var<storage, read> x: array<vec4f>;
@group(0) @binding(2) var<storage, read> res: array<vec4f>;
@group(0) @binding(3) var<storage, read> w: array<vec4f>;
@group(0) @binding(4) var<storage, read_write> out: array<vec4f>;
@group(0) @binding(5) var<storage, read_write> sum: array<vec4f>;
// fwd_sum_inplace (w and out as above)
@group(0) @binding(1) var<storage, read_write> io: array<vec4f>;
@group(0) @binding(2) var<storage, read> other: array<vec4f>;
// bwd, bwd_dw (x and w as above)
@group(0) @binding(2) var<storage, read> gout: array<vec4f>;
@group(0) @binding(4) var<storage, read_write> gin: array<vec4f>;
@group(0) @binding(5) var<storage, read_write> part: array<vec4f>;
// dw_reduce
@group(0) @binding(1) var<storage, read> part_in: array<vec4f>;
@group(0) @binding(2) var<storage, read_write> gw: array<vec4f>;

const RAD: u32 = 16u;            // seg_sum radix; WG <= RAD * RAD (the host uses 256)

var<workgroup> red: array<vec2f, WG>;
var<workgroup> red2: array<vec2f, WG / RAD>;
var<workgroup> accs: array<vec4f, WG * 4u>;

// ---- units ------------------------------------------------------------------------------

fn ld_x(r: u32, j: u32) -> vec4f {
    if (VEC) { return x[r * p.units + j]; }
    let e = r * p.d + j;
    return vec4f(x[e >> 2u][e & 3u], 0.0, 0.0, 0.0);
}
fn ld_res(r: u32, j: u32) -> vec4f {
    if (VEC) { return res[r * p.units + j]; }
    let e = r * p.d + j;
    return vec4f(res[e >> 2u][e & 3u], 0.0, 0.0, 0.0);
}
fn ld_io(r: u32, j: u32) -> vec4f {
    if (VEC) { return io[r * p.units + j]; }
    let e = r * p.d + j;
    return vec4f(io[e >> 2u][e & 3u], 0.0, 0.0, 0.0);
}
fn ld_other(r: u32, j: u32) -> vec4f {
    if (VEC) { return other[r * p.units + j]; }
    let e = r * p.d + j;
    return vec4f(other[e >> 2u][e & 3u], 0.0, 0.0, 0.0);
}
fn ld_g(r: u32, j: u32) -> vec4f {
    if (VEC) { return gout[r * p.units + j]; }
    let e = r * p.d + j;
    return vec4f(gout[e >> 2u][e & 3u], 0.0, 0.0, 0.0);
}
fn ld_w(j: u32) -> vec4f {
    if (VEC) { return w[j] + vec4f(p.woff); }
    return vec4f(w[j >> 2u][j & 3u] + p.woff, 0.0, 0.0, 0.0);
}
fn st_out(r: u32, j: u32, v: vec4f) {
    if (VEC) { out[r * p.units + j] = v; return; }
    let e = r * p.d + j;
    out[e >> 2u][e & 3u] = v.x;
}
fn st_sum(r: u32, j: u32, v: vec4f) {
    if (VEC) { sum[r * p.units + j] = v; return; }
    let e = r * p.d + j;
    sum[e >> 2u][e & 3u] = v.x;
}
fn st_io(r: u32, j: u32, v: vec4f) {
    if (VEC) { io[r * p.units + j] = v; return; }
    let e = r * p.d + j;
    io[e >> 2u][e & 3u] = v.x;
}
fn st_gin(r: u32, j: u32, v: vec4f) {
    if (VEC) {
        let i = r * p.units + j;
        if (ACC) { gin[i] += v; } else { gin[i] = v; }
        return;
    }
    let e = r * p.d + j;
    if (ACC) { gin[e >> 2u][e & 3u] += v.x; } else { gin[e >> 2u][e & 3u] = v.x; }
}

// ---- reduction --------------------------------------------------------------------------

// Sum of v over the segment of p.tpr threads that lid belongs to, returned to all of them.
// Must be reached by the whole workgroup (uniform control flow).
//
// Radix-RAD in workgroup memory rather than a binary tree: a binary tree over 256 threads
// is 8 dependent steps of load, add, store and barrier per row, during which the
// workgroup has no loads in flight. Here segments of up to RAD threads take one barrier
// and every thread adds the RAD slots of its segment itself; longer segments take two:
// thread j < tpr / RAD of a segment adds the RAD slots j*RAD .. j*RAD+RAD-1 into red2,
// then every thread adds its segment's (at most RAD) red2 slots. The order of the adds
// depends only on tpr, so every thread of a row gets the same bits, run after run.
fn seg_sum(lid: u32, v: vec2f) -> vec2f {
    red[lid] = v;
    workgroupBarrier();
    let j = lid & (p.tpr - 1u);
    let base = lid - j;
    if (p.tpr <= RAD) {
        var t = red[base];
        for (var i = 1u; i < p.tpr; i++) { t += red[base + i]; }
        // The next call writes red: wait until every thread has read it.
        workgroupBarrier();
        return t;
    }
    let n2 = p.tpr / RAD;   // <= RAD while WG <= RAD * RAD
    if (j < n2) {
        let b = base + j * RAD;
        var t = red[b];
        for (var i = 1u; i < RAD; i++) { t += red[b + i]; }
        red2[base / RAD + j] = t;
    }
    workgroupBarrier();
    // No barrier after: the next call writes red (everyone is past reading it) and only
    // writes red2 after its own first barrier (everyone is past reading red2 by then).
    let b2 = base / RAD;
    var t = red2[b2];
    for (var i = 1u; i < n2; i++) { t += red2[b2 + i]; }
    return t;
}

fn group_index(wid: vec3u, nwg: vec3u) -> u32 {
    return wid.x + wid.y * nwg.x;
}

fn rstd(sumsq: f32) -> f32 {
    return inverseSqrt(sumsq / f32(p.d) + p.eps);
}

// ---- forward ----------------------------------------------------------------------------

// x (+ res) of unit j of row r, for fwd.
fn fwd_in(r: u32, j: u32) -> vec4f {
    var a = ld_x(r, j);
    if (HAS_RES) { a += ld_res(r, j); }
    return a;
}

@compute @workgroup_size(WG)
fn fwd(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
       @builtin(local_invocation_index) lid: u32) {
    let g = group_index(wid, nwg);
    if (g >= p.groups) { return; }
    let j0 = lid & (p.tpr - 1u);
    let r = g * p.segs + lid / p.tpr;
    let ok = r < p.rows;
    if (NV == 0u) {
        var ss = 0.0;
        if (ok) {
            for (var j = j0; j < p.units; j += p.tpr) { let a = fwd_in(r, j); ss += dot(a, a); }
        }
        let rs = rstd(seg_sum(lid, vec2f(ss, 0.0)).x);
        if (ok) {
            for (var j = j0; j < p.units; j += p.tpr) { st_out(r, j, fwd_in(r, j) * rs * ld_w(j)); }
        }
        return;
    }
    var v: array<vec4f, NVMAX>;
    var ss = 0.0;
    for (var k = 0u; k < NV; k++) {
        let j = j0 + k * p.tpr;
        var a = vec4f(0.0);
        if (ok && j < p.units) { a = fwd_in(r, j); }
        v[k] = a;
        ss += dot(a, a);
    }
    let rs = rstd(seg_sum(lid, vec2f(ss, 0.0)).x);
    for (var k = 0u; k < NV; k++) {
        let j = j0 + k * p.tpr;
        if (ok && j < p.units) { st_out(r, j, v[k] * rs * ld_w(j)); }
    }
}

@compute @workgroup_size(WG)
fn fwd_sum(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
           @builtin(local_invocation_index) lid: u32) {
    let g = group_index(wid, nwg);
    if (g >= p.groups) { return; }
    let j0 = lid & (p.tpr - 1u);
    let r = g * p.segs + lid / p.tpr;
    let ok = r < p.rows;
    if (NV == 0u) {
        // Pass 1 writes the sum; pass 2 reads it back (the same thread wrote each unit).
        var ss = 0.0;
        if (ok) {
            for (var j = j0; j < p.units; j += p.tpr) {
                let a = ld_x(r, j) + ld_res(r, j);
                st_sum(r, j, a);
                ss += dot(a, a);
            }
        }
        let rs = rstd(seg_sum(lid, vec2f(ss, 0.0)).x);
        if (ok) {
            for (var j = j0; j < p.units; j += p.tpr) {
                var a: vec4f;
                if (VEC) { a = sum[r * p.units + j]; } else { let e = r * p.d + j; a = vec4f(sum[e >> 2u][e & 3u]); }
                st_out(r, j, a * rs * ld_w(j));
            }
        }
        return;
    }
    var v: array<vec4f, NVMAX>;
    var ss = 0.0;
    for (var k = 0u; k < NV; k++) {
        let j = j0 + k * p.tpr;
        var a = vec4f(0.0);
        if (ok && j < p.units) {
            a = ld_x(r, j) + ld_res(r, j);
            st_sum(r, j, a);
        }
        v[k] = a;
        ss += dot(a, a);
    }
    let rs = rstd(seg_sum(lid, vec2f(ss, 0.0)).x);
    for (var k = 0u; k < NV; k++) {
        let j = j0 + k * p.tpr;
        if (ok && j < p.units) { st_out(r, j, v[k] * rs * ld_w(j)); }
    }
}

// io + other (SELF: io + io), read before io is overwritten with it.
fn inplace_in(r: u32, j: u32) -> vec4f {
    let a = ld_io(r, j);
    if (SELF) { return a + a; }
    return a + ld_other(r, j);
}

@compute @workgroup_size(WG)
fn fwd_sum_inplace(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
                   @builtin(local_invocation_index) lid: u32) {
    let g = group_index(wid, nwg);
    if (g >= p.groups) { return; }
    let j0 = lid & (p.tpr - 1u);
    let r = g * p.segs + lid / p.tpr;
    let ok = r < p.rows;
    if (NV == 0u) {
        var ss = 0.0;
        if (ok) {
            for (var j = j0; j < p.units; j += p.tpr) {
                let a = inplace_in(r, j);
                st_io(r, j, a);
                ss += dot(a, a);
            }
        }
        let rs = rstd(seg_sum(lid, vec2f(ss, 0.0)).x);
        if (ok) {
            for (var j = j0; j < p.units; j += p.tpr) { st_out(r, j, ld_io(r, j) * rs * ld_w(j)); }
        }
        return;
    }
    var v: array<vec4f, NVMAX>;
    var ss = 0.0;
    for (var k = 0u; k < NV; k++) {
        let j = j0 + k * p.tpr;
        var a = vec4f(0.0);
        if (ok && j < p.units) {
            a = inplace_in(r, j);
            st_io(r, j, a);
        }
        v[k] = a;
        ss += dot(a, a);
    }
    let rs = rstd(seg_sum(lid, vec2f(ss, 0.0)).x);
    for (var k = 0u; k < NV; k++) {
        let j = j0 + k * p.tpr;
        if (ok && j < p.units) { st_out(r, j, v[k] * rs * ld_w(j)); }
    }
}

// ---- backward ---------------------------------------------------------------------------

// The rows of workgroup g on the cached path: writes gin and, when acc is used, adds
// g * x * rs of this thread's units into acc (registers) over the workgroup's rows.
fn bwd_rows(g: u32, lid: u32, acc: ptr<function, array<vec4f, NVMAX>>) {
    let j0 = lid & (p.tpr - 1u);
    let seg = lid / p.tpr;
    for (var k = 0u; k < NV; k++) { (*acc)[k] = vec4f(0.0); }
    for (var it = 0u; it < p.grows; it++) {
        let r = (g * p.grows + it) * p.segs + seg;
        let ok = r < p.rows;
        var xv: array<vec4f, NVMAX>;
        var gv: array<vec4f, NVMAX>;
        var sums = vec2f(0.0);
        for (var k = 0u; k < NV; k++) {
            let j = j0 + k * p.tpr;
            var a = vec4f(0.0);
            var b = vec4f(0.0);
            if (ok && j < p.units) { a = ld_x(r, j); b = ld_g(r, j); }
            xv[k] = a;
            gv[k] = b;
            sums += vec2f(dot(a, a), dot(b * ld_w_or_zero(j), a));
        }
        let t = seg_sum(lid, sums);
        let rs = rstd(t.x);
        let c = rs * rs * rs * t.y / f32(p.d);
        for (var k = 0u; k < NV; k++) {
            let j = j0 + k * p.tpr;
            if (ok && j < p.units) {
                st_gin(r, j, gv[k] * ld_w(j) * rs - xv[k] * c);
                (*acc)[k] += gv[k] * xv[k] * rs;
            }
        }
    }
}

fn ld_w_or_zero(j: u32) -> vec4f {
    if (j < p.units) { return ld_w(j); }
    return vec4f(0.0);
}

// One row on the long path: gin, and (when dw) g * x * rs added into partial row `slot`,
// written rather than added for the workgroup's first row (first).
fn bwd_long_sums(r: u32, lid: u32, ok: bool) -> vec2f {
    var sums = vec2f(0.0);
    if (ok) {
        for (var j = lid & (p.tpr - 1u); j < p.units; j += p.tpr) {
            let a = ld_x(r, j);
            sums += vec2f(dot(a, a), dot(ld_g(r, j) * ld_w(j), a));
        }
    }
    return seg_sum(lid, sums);
}

@compute @workgroup_size(WG)
fn bwd(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
       @builtin(local_invocation_index) lid: u32) {
    let g = group_index(wid, nwg);
    if (g >= p.groups) { return; }
    if (NV == 0u) {
        for (var it = 0u; it < p.grows; it++) {
            let r = (g * p.grows + it) * p.segs + lid / p.tpr;
            let ok = r < p.rows;
            let t = bwd_long_sums(r, lid, ok);
            let rs = rstd(t.x);
            let c = rs * rs * rs * t.y / f32(p.d);
            if (ok) {
                for (var j = lid & (p.tpr - 1u); j < p.units; j += p.tpr) {
                    st_gin(r, j, ld_g(r, j) * ld_w(j) * rs - ld_x(r, j) * c);
                }
            }
        }
        return;
    }
    var acc: array<vec4f, NVMAX>;
    bwd_rows(g, lid, &acc);
}

@compute @workgroup_size(WG)
fn bwd_dw(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
          @builtin(local_invocation_index) lid: u32) {
    let g = group_index(wid, nwg);
    if (g >= p.groups) { return; }
    if (NV == 0u) {
        // Long rows: one segment per workgroup; the partial row lives in the scratch buffer
        // and each thread updates only its own units of it.
        for (var it = 0u; it < p.grows; it++) {
            let r = (g * p.grows + it) * p.segs + lid / p.tpr;
            let ok = r < p.rows;
            let t = bwd_long_sums(r, lid, ok);
            let rs = rstd(t.x);
            let c = rs * rs * rs * t.y / f32(p.d);
            for (var j = lid & (p.tpr - 1u); j < p.units; j += p.tpr) {
                var contrib = vec4f(0.0);
                if (ok) {
                    let a = ld_x(r, j);
                    let b = ld_g(r, j);
                    st_gin(r, j, b * ld_w(j) * rs - a * c);
                    contrib = b * a * rs;
                }
                if (it == 0u) { part[g * p.units + j] = contrib; }
                else { part[g * p.units + j] += contrib; }
            }
        }
        return;
    }
    var acc: array<vec4f, NVMAX>;
    bwd_rows(g, lid, &acc);
    let j0 = lid & (p.tpr - 1u);
    if (p.segs == 1u) {
        for (var k = 0u; k < NV; k++) {
            let j = j0 + k * p.tpr;
            if (j < p.units) { part[g * p.units + j] = acc[k]; }
        }
        return;
    }
    // Several segments: add them up in segment order through workgroup memory. The planner
    // keeps NV <= 4 whenever segs > 1.
    let nv = min(NV, 4u);
    for (var k = 0u; k < nv; k++) { accs[k * WG + lid] = acc[k]; }
    workgroupBarrier();
    for (var u = lid; u < p.units; u += WG) {
        let k = u / p.tpr;
        let j = u & (p.tpr - 1u);
        var total = vec4f(0.0);
        for (var s = 0u; s < p.segs; s++) { total += accs[k * WG + s * p.tpr + j]; }
        part[g * p.units + u] = total;
    }
}

// gw[u] = sum over partial rows of part_in[row, u]. A workgroup takes 16 units; lane l of a
// unit adds rows l, l + 16, ...; the 16 lanes are then combined by a fixed tree.
@compute @workgroup_size(256)
fn dw_reduce(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
             @builtin(local_invocation_index) lid: u32) {
    let g = group_index(wid, nwg);
    if (g >= p.groups) { return; }
    let c = lid & 15u;
    let l = lid >> 4u;
    let u = g * 16u + c;
    var total = vec4f(0.0);
    if (u < p.units) {
        for (var r = l; r < p.rows; r += 16u) { total += part_in[r * p.units + u]; }
    }
    accs[lid] = total;
    workgroupBarrier();
    for (var s = 8u; s > 0u; s >>= 1u) {
        if (l < s) { accs[lid] = accs[lid] + accs[lid + s * 16u]; }
        workgroupBarrier();
    }
    if (l == 0u && u < p.units) {
        if (VEC) { gw[u] = accs[c]; } else { gw[u >> 2u][u & 3u] = accs[c].x; }
    }
}
