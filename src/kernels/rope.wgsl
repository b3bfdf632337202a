// Rotary position embeddings, in place.
//
//   rope        frequencies theta^(-2i/head_dim), given by the host as exact turn fractions
//   rope_freqs  frequencies read from an f32 inv_freq tensor [head_dim / 2]
//   rope_at, rope_freqs_at  the same with each sequence's own first position:
//               positions[b] for the tokens of sequence b (batched decoding, where every
//               sequence is at its own length)
//
// Every head vector of token n (position P = pos + n % seq) has its pairs rotated by the
// angle P * f_i, or by -P * f_i when `inverse` (the gradient). Pairs are (i, i + head_dim/2)
// for rotate-half (Llama, NeoX) and (2i, 2i + 1) for interleaved (GPT-J):
//     x' = x cos - y sin,   y' = y cos + x sin.
//
// Angles are exact to about 1e-7 rad for any position. A float angle P * f loses
// everything for large P (at P = 1e6 an f32 angle is off by up to 0.03 rad), and WGSL's
// sin/cos only promise 2^-11 absolute error. So the angle is carried in turns as a 64-bit
// binary fraction: T_i = frac(f_i / 2pi) to 2^-64, P * T_i mod 2^64 by 32-bit integer
// products (its top 32 bits are the angle to 2^-32 turn), reduced to the nearest quarter
// turn in integers, and the remainder (|r| <= pi/4) goes through fixed polynomials.
//   - rope: the host passes 16 + 8 fixed-point numbers A_a = theta^(-16a/hd) / 2pi (0.64)
//     and B_b = theta^(-2b/hd) (1.63), computed in double; T_{8a+b} = A_a * B_b.
//   - rope_freqs: T_i = frac(f / 2pi) from the f32 bits of f, through a 128-bit 1/2pi.
// Each workgroup first builds the T table of all head_dim/2 frequencies in workgroup
// memory, then rotates.
//
// Layout and why it is shaped so (memory-bound: one read and one write of the tensor, in
// place, so a single read_write binding):
//   - A token is `heads` head vectors of head_dim contiguous f32. A unit is the part of a
//     head one thread rotates: 4 pairs as two aligned vec4 (rotate-half, head_dim % 8 == 0),
//     2 pairs as one vec4 (interleaved, head_dim % 4 == 0), else 1 pair of scalars.
//   - Thread layout: `uh` threads cover the units of one head; `hg` head groups of them
//     cover a token's heads (a thread takes heads hg_i, hg_i + hg, ...); `tpw` tokens share a
//     workgroup when a token has few heads. A thread computes the cos/sin of its unit's
//     frequencies once per token and reuses them for every head it rotates, so the integer
//     and polynomial work is paid once per (token, frequency), not per element.
//   - Consecutive threads take consecutive units of a head: coalesced 16-byte accesses.
//   - On the vec4 paths a thread loads its first head's units before the frequency table
//     is built and each next head's before storing the current one, so DRAM latency
//     overlaps the table, the barrier and the trigonometry rather than following them
//     (a workgroup of one 128-dim, 32-head token is only 16 KB: latency, not bandwidth,
//     bounded it).
// The grid may be 2-D: the linear workgroup index is wid.x + wid.y * nwg.x.

struct Params {
    ntok: u32,     // tokens: batch * seq
    seq: u32,      // tokens per sequence; the position of token n is pos + n % seq
    pos: u32,
    heads: u32,    // head vectors per token
    hd: u32,       // head_dim
    half: u32,     // head_dim / 2: the frequencies
    uh: u32,       // units (threads) per head
    hg: u32,       // head groups per token
    tpw: u32,      // tokens per workgroup
    groups: u32,   // workgroups dispatched
    hidden: u32,   // elements per token: heads * hd
    inverse: u32,  // 1: rotate by -angle
    // rope: 16 A then 8 B, each as (lo, hi) u32 halves of its 64-bit fixed-point value
    freq: array<vec4u, 12>,
}

override WG: u32 = 256u;
override MODE: u32 = 0u;   // 0 rotate-half vec4, 1 interleaved vec4, 2 rotate-half scalar, 3 interleaved scalar

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> io: array<vec4f>;
@group(0) @binding(2) var<storage, read> inv_freq: array<f32>;
@group(0) @binding(2) var<storage, read> positions2: array<u32>;   // rope_at
@group(0) @binding(3) var<storage, read> positions3: array<u32>;   // rope_freqs_at

var<workgroup> tab: array<vec2u, 128>;   // T_i as (lo, hi)

// ---- 64-bit integer helpers on u32 pairs ------------------------------------------------

// The high 32 bits of the 64-bit product a * b.
fn mulhi(a: u32, b: u32) -> u32 {
    let a0 = a & 0xffffu;
    let a1 = a >> 16u;
    let b0 = b & 0xffffu;
    let b1 = b >> 16u;
    let p00 = a0 * b0;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
    return a1 * b1 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
}

fn carry(sum: u32, addend: u32) -> u32 {
    return select(0u, 1u, sum < addend);
}

fn freq_word(k: u32) -> u32 {
    return p.freq[k >> 2u][k & 3u];
}

// T of frequency i = 8a + b from the host's table: (A_a * B_b) >> 63, 64 bits.
fn theta_turns(i: u32) -> vec2u {
    let a = i >> 3u;
    let b = i & 7u;
    let a0 = freq_word(2u * a);
    let a1 = freq_word(2u * a + 1u);
    let b0 = freq_word(32u + 2u * b);
    let b1 = freq_word(32u + 2u * b + 1u);
    // 128-bit product in words w0..w3 (w0 = a0 * b0 is below the bits kept)
    let p00h = mulhi(a0, b0);
    let p01l = a0 * b1;
    let p01h = mulhi(a0, b1);
    let p10l = a1 * b0;
    let p10h = mulhi(a1, b0);
    let p11l = a1 * b1;
    let p11h = mulhi(a1, b1);
    var w1 = p00h + p01l;
    var c = carry(w1, p01l);
    w1 += p10l;
    c += carry(w1, p10l);
    var w2 = p01h + p10h;
    var c2 = carry(w2, p10h);
    w2 += p11l;
    c2 += carry(w2, p11l);
    w2 += c;
    c2 += carry(w2, c);
    let w3 = p11h + c2;
    return vec2u((w1 >> 31u) | (w2 << 1u), (w2 >> 31u) | (w3 << 1u));
}

// floor(2^128 / 2pi), most significant word first.
const C0: u32 = 0x28be60dbu;
const C1: u32 = 0x9391054au;
const C2: u32 = 0x7f09d5f4u;
const C3: u32 = 0x7d4d3770u;

// T = frac(f / 2pi) as a 64-bit fraction (lo, hi), from the bits of f: f = m * 2^k with an
// integer m < 2^24, so f / 2pi = m * C * 2^(k - 128) with the 128-bit C above, and the
// fraction's 64 bits are bits [64 - k, 128 - k) of the 152-bit m * C. Exact to 2^-64 for
// |f| < 2^63; needs |f| < 2^87 (beyond, and for inf/NaN, the angle is unspecified).
fn f32_turns(f: f32) -> vec2u {
    let bits = bitcast<u32>(f);
    let ex = (bits >> 23u) & 0xffu;
    var m = bits & 0x7fffffu;
    var e = i32(ex) - 150;               // f = m * 2^e
    if (ex == 0u) { e = -149; } else { m |= 0x800000u; }
    // x = m * C, words x0 (least) .. x4
    var x: array<u32, 8>;
    let l3 = m * C3; let h3 = mulhi(m, C3);
    let l2 = m * C2; let h2 = mulhi(m, C2);
    let l1 = m * C1; let h1 = mulhi(m, C1);
    let l0 = m * C0; let h0 = mulhi(m, C0);
    x[0] = l3;
    x[1] = h3 + l2;
    var c = carry(x[1], l2);
    x[2] = h2 + l1;
    var c2 = carry(x[2], l1);
    x[2] += c;
    c2 += carry(x[2], c);
    x[3] = h1 + l0;
    var c3 = carry(x[3], l0);
    x[3] += c2;
    c3 += carry(x[3], c2);
    x[4] = h0 + c3;
    x[5] = 0u;
    x[6] = 0u;
    x[7] = 0u;
    let sh = u32(clamp(64 - e, 0, 160));
    var t = vec2u(0u);
    if (sh < 160u) {
        let ws = sh >> 5u;
        let bs = sh & 31u;
        if (bs == 0u) {
            t = vec2u(x[ws], x[ws + 1u]);
        } else {
            t = vec2u((x[ws] >> bs) | (x[ws + 1u] << (32u - bs)), (x[ws + 1u] >> bs) | (x[ws + 2u] << (32u - bs)));
        }
    }
    if ((bits >> 31u) != 0u) {   // negative f: -T mod 2^64
        let lo = ~t.x + 1u;
        t = vec2u(lo, ~t.y + select(0u, 1u, lo == 0u));
    }
    return t;
}

// (cos, sin) of 2pi * q / 2^32.
fn cos_sin_turns(q: u32) -> vec2f {
    let quad = (q + 0x20000000u) >> 30u;                    // nearest quarter turn
    let rem = bitcast<i32>(q - (quad << 30u));               // [-2^29, 2^29)
    let r = f32(rem) * 1.4629180792671596e-9;                 // 2pi / 2^32: |r| <= pi/4
    let r2 = r * r;
    // Taylor polynomials, truncation below 2e-9 on [-pi/4, pi/4]
    let s = r + r * r2 * (-1.6666666666666666e-1 + r2 * (8.3333333333333333e-3
            + r2 * (-1.9841269841269841e-4 + r2 * 2.7557319223985891e-6)));
    let c = 1.0 + r2 * (-0.5 + r2 * (4.1666666666666667e-2 + r2 * (-1.3888888888888889e-3
            + r2 * (2.4801587301587302e-5 - r2 * 2.7557319223985891e-7))));
    switch quad {
        case 0u: { return vec2f(c, s); }
        case 1u: { return vec2f(-s, c); }
        case 2u: { return vec2f(-c, -s); }
        default: { return vec2f(s, -c); }
    }
}

// (cos, sin) of the angle of frequency i at position P (sin negated when inverse).
fn rotation(P: u32, i: u32) -> vec2f {
    let t = tab[i];
    let q = P * t.y + mulhi(P, t.x);   // top 32 bits of P * T mod 2^64
    let cs = cos_sin_turns(q);
    return vec2f(cs.x, select(cs.y, -cs.y, p.inverse != 0u));
}

// ---- rotation ---------------------------------------------------------------------------

fn ld(e: u32) -> f32 { return io[e >> 2u][e & 3u]; }
fn st(e: u32, v: f32) { io[e >> 2u][e & 3u] = v; }

// What thread lid of workgroup g rotates: unit u of heads hgi, hgi + hg, ... of token n
// (ok false: a thread past the last token of the workgroup or of the tensor).
struct Slot {
    ok: bool,
    u: u32,
    hgi: u32,
    P: u32,     // position of the token
    tok: u32,   // element offset of the token
    n: u32,     // the token
}

fn slot_of(g: u32, lid: u32) -> Slot {
    var sl: Slot;
    sl.u = lid % p.uh;
    let rest = lid / p.uh;
    sl.hgi = rest % p.hg;   // < hg <= heads: every thread has at least one head
    let tk = rest / p.hg;
    let n = g * p.tpw + tk;
    sl.ok = tk < p.tpw && n < p.ntok;
    sl.P = p.pos + n % p.seq;
    sl.tok = n * p.hidden;
    sl.n = n;
    return sl;
}

// vec4 index of the first unit that slot sl rotates in head h (MODE 0: the x half; the y
// half is p.half / 4 further on; MODE 1: the interleaved pairs).
fn unit_index(sl: Slot, h: u32) -> u32 {
    return (sl.tok + h * p.hd) / 4u + sl.u;
}

// Rotates the heads of slot sl. On the vec4 paths (a, b) are the first head's units,
// loaded by the caller before the frequency table was built, and each head's loads are
// issued before the previous head's stores: the loads' latency overlaps the table, the
// barrier and the trigonometry instead of following them.
fn rotate_heads(sl: Slot, a0: vec4f, b0: vec4f) {
    let u = sl.u;
    let P = sl.P;
    let tok = sl.tok;
    let hgi = sl.hgi;
    switch MODE {
        case 0u: {
            let c0 = rotation(P, 4u * u);
            let c1 = rotation(P, 4u * u + 1u);
            let c2 = rotation(P, 4u * u + 2u);
            let c3 = rotation(P, 4u * u + 3u);
            let c = vec4f(c0.x, c1.x, c2.x, c3.x);
            let s = vec4f(c0.y, c1.y, c2.y, c3.y);
            let off = p.half / 4u;
            var ia = unit_index(sl, hgi);
            var a = a0;
            var b = b0;
            for (var h = hgi; h < p.heads; h += p.hg) {
                let hn = h + p.hg;
                let ian = unit_index(sl, hn);
                var an = vec4f(0.0);
                var bn = vec4f(0.0);
                if (hn < p.heads) { an = io[ian]; bn = io[ian + off]; }   // another head: no overlap
                io[ia] = a * c - b * s;
                io[ia + off] = b * c + a * s;
                ia = ian;
                a = an;
                b = bn;
            }
        }
        case 1u: {
            let c0 = rotation(P, 2u * u);
            let c1 = rotation(P, 2u * u + 1u);
            let c = vec4f(c0.x, c0.x, c1.x, c1.x);
            let s = vec4f(c0.y, c0.y, c1.y, c1.y);
            var i = unit_index(sl, hgi);
            var v = a0;
            for (var h = hgi; h < p.heads; h += p.hg) {
                let hn = h + p.hg;
                let inext = unit_index(sl, hn);
                var vn = vec4f(0.0);
                if (hn < p.heads) { vn = io[inext]; }
                io[i] = v * c + vec4f(-v.y, v.x, -v.w, v.z) * s;
                i = inext;
                v = vn;
            }
        }
        case 2u: {
            let cs = rotation(P, u);
            for (var h = hgi; h < p.heads; h += p.hg) {
                let ea = tok + h * p.hd + u;
                let eb = ea + p.half;
                let a = ld(ea);
                let b = ld(eb);
                st(ea, a * cs.x - b * cs.y);
                st(eb, b * cs.x + a * cs.y);
            }
        }
        default: {
            let cs = rotation(P, u);
            for (var h = hgi; h < p.heads; h += p.hg) {
                let ea = tok + h * p.hd + 2u * u;
                let a = ld(ea);
                let b = ld(ea + 1u);
                st(ea, a * cs.x - b * cs.y);
                st(ea + 1u, b * cs.x + a * cs.y);
            }
        }
    }
}

// The first head's units of a vec4 path, as (a, b) for rotate_heads.
fn first_units(sl: Slot) -> array<vec4f, 2> {
    var r = array<vec4f, 2>(vec4f(0.0), vec4f(0.0));
    if (sl.ok && MODE <= 1u) {
        let i = unit_index(sl, sl.hgi);
        r[0] = io[i];
        if (MODE == 0u) { r[1] = io[i + p.half / 4u]; }
    }
    return r;
}

@compute @workgroup_size(WG)
fn rope(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
        @builtin(local_invocation_index) lid: u32) {
    let g = wid.x + wid.y * nwg.x;
    if (g >= p.groups) { return; }
    let sl = slot_of(g, lid);
    let ab = first_units(sl);   // in flight while the table is built
    for (var i = lid; i < p.half; i += WG) { tab[i] = theta_turns(i); }
    workgroupBarrier();
    if (sl.ok) { rotate_heads(sl, ab[0], ab[1]); }
}

@compute @workgroup_size(WG)
fn rope_freqs(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
              @builtin(local_invocation_index) lid: u32) {
    let g = wid.x + wid.y * nwg.x;
    if (g >= p.groups) { return; }
    let sl = slot_of(g, lid);
    let ab = first_units(sl);   // in flight while the table is built
    for (var i = lid; i < p.half; i += WG) { tab[i] = f32_turns(inv_freq[i]); }
    workgroupBarrier();
    if (sl.ok) { rotate_heads(sl, ab[0], ab[1]); }
}

@compute @workgroup_size(WG)
fn rope_at(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
           @builtin(local_invocation_index) lid: u32) {
    let g = wid.x + wid.y * nwg.x;
    if (g >= p.groups) { return; }
    var sl = slot_of(g, lid);
    if (sl.ok) { sl.P = positions2[sl.n / p.seq] + sl.n % p.seq; }
    let ab = first_units(sl);
    for (var i = lid; i < p.half; i += WG) { tab[i] = theta_turns(i); }
    workgroupBarrier();
    if (sl.ok) { rotate_heads(sl, ab[0], ab[1]); }
}

@compute @workgroup_size(WG)
fn rope_freqs_at(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
                 @builtin(local_invocation_index) lid: u32) {
    let g = wid.x + wid.y * nwg.x;
    if (g >= p.groups) { return; }
    var sl = slot_of(g, lid);
    if (sl.ok) { sl.P = positions3[sl.n / p.seq] + sl.n % p.seq; }
    let ab = first_units(sl);
    for (var i = lid; i < p.half; i += WG) { tab[i] = f32_turns(inv_freq[i]); }
    workgroupBarrier();
    if (sl.ok) { rotate_heads(sl, ab[0], ab[1]); }
}
