// Flash attention on the GPU's matrix units (subgroup matrices), for wgml_precision F16:
// the forward's q k^T and P v, and the backward's four products, as f16 x f16 products
// with f32 sums. Host: forward_mma and backward_mma in src/ops/attention.c. The host
// compiles this file after the matrix header (enables and the adapter's shape SM x SN x SK,
// as for matmul_mma.wgsl) and attention_prelude.wgsl (layout, visibility, mask, dropout,
// log2 units, lse_public), so that masks, windows, dropout and GQA mean exactly what they
// mean in the f32 kernels.
//
// Entry points:
//   ma_convert   v into an f16 copy [batch * kv_heads][key blocks * MA_BC][MA_DP] (and
//                ma_convert_t k into one [batch * kv_heads][MA_DP][key blocks * MA_BC],
//                transposed), zeros past seq_k and head_dim (whole matrices: the products
//                need no bounds);
//   prefill_mma  one workgroup per MA_BR queries of one (batch, query head), one pass over
//                the visible keys, MA_BC at a time. q, rounded to f16, is staged in
//                workgroup memory once and each subgroup keeps its matrices in registers;
//                each block of k^T and then of v is staged in workgroup memory (ma_kv, rows
//                padded against bank conflicts) once per workgroup in 16-byte words, so that
//                the subgroups' matrix loads read workgroup memory and no subgroup reloads
//                what another loaded. With MA_PF each invocation loads its words a step
//                ahead into registers (v's during S's product, the next block's k^T during
//                the softmax and P v), so that the loads' latency overlaps the work. Per block:
//     S = (q * scale * log2 e) k^T on the matrix units, into workgroup memory;
//     each row's block maximum; the row's reference maximum m moves up to it only when it
//       passes m by MA_LAZY (2^8 in P), and then l and O are multiplied by exp2(m_old - m)
//       (O through workgroup memory: its layout inside a subgroup is the implementation's);
//     P = exp2(S - m) (0 where hidden, at most 2^MA_LAZY), l += P, P (kept or dropped)
//       rounded to f16 into workgroup memory, O += P v on the matrix units.
//   At the end out = O * (dropout scale) / l (0 for a row without a visible key), and with
//   LSE each row's log-sum-exp.
//   mb_dkdv, mb_dq  the backward (its own section below).
// With MA_LAZY, rows rescale O rarely (their first blocks usually hold a maximum within 2^8
// of the row's), so the rescale's round trips cost little.
//
// Every workgroup variable is a multiple of 16 bytes (ma_need is a vec4 for one flag): with
// a 4-byte one among them (an atomic<u32> flag, or a u32) the H100's driver gave wrong
// results from this kernel's matrix loads and stores, on lavapipe right ones.
//
// The steps that brought the forward to its present shape, each measured, are in
// bench/notes/attention.md ("The forward on the matrix units").
//
// Rounding (the F16 contract): q * scale * log2 e, k, v and P are rounded to f16 (beyond
// f16's range +-inf), every sum is f32.
//
// Shape: MA_NSG subgroups each own SM query rows (MA_BR = MA_NSG * SM), with every column
// of S (4 result matrices: MA_BC = 4 SN keys) and of O (MA_DP / SN result matrices, at
// most 16). A workgroup has MA_NSG subgroups of the adapter's largest subgroup size MA_SG;
// a device running smaller subgroups runs more of them (at most 64), and those past MA_NSG
// only stage q, k and v and work on the softmax. The softmax gives each row MA_TPR =
// MA_WG / MA_BR threads, which take its keys 4 at a time in turn, thread t on row t % MA_BR
// (the host checks MA_WG % MA_BR == 0 and (MA_BC / 4) % MA_TPR == 0). Workgroup memory: ma_kv (q
// [MA_BR][MA_DP], k^T's block [MA_DP][MA_BC], v's [MA_BC][MA_DP], in f16, sized for head_dim
// 128), S [MA_BR][MA_BC] f32, P the same in f16, rows padded, and the rows' and subgroups'
// small arrays: 46 KiB at SM = SN = 16 (the host checks the adapter's limit).

override MA_SG: u32 = 32u;            // the adapter's largest subgroup size
override MA_DP: u32 = 128u;           // head_dim rounded up to a multiple of SK, SN and 4
override LSE: bool = false;           // also write each row's log-sum-exp (lse_mma)
const MA_NSG: u32 = 4u;               // subgroups that multiply
const MA_BR: u32 = MA_NSG * SM;       // query rows per workgroup
const MA_BC: u32 = 4u * SN;           // keys per block
override MA_WG: u32 = MA_NSG * MA_SG;
override MA_TPR: u32 = MA_WG / MA_BR; // softmax threads per row
override MA_OC: u32 = MA_DP / SN;     // result matrices of O per subgroup (<= 16)
const MA_SC: u32 = MA_BC / SN;        // result matrices of S per subgroup
// Row strides of S and P in workgroup memory, padded so that the softmax's threads (one row
// per lane, consecutive lanes on consecutive rows) spread over the banks; multiples of 16
// bytes, which matrix loads and stores may need.
const MA_SS: u32 = MA_BC + 4u;
const MA_PS: u32 = MA_BC + 8u;

@group(0) @binding(6) var<storage, read_write> lse_mma: array<f32>;
@group(0) @binding(7) var<storage, read> k16: array<vec4<u32>>;      // prefill_mma: the copies,
@group(0) @binding(8) var<storage, read> v16: array<vec4<u32>>;      // 8 f16 per word

// The arrays the matrices are loaded from or stored to take constant sizes (the built-ins
// accept no array sized by an override expression): rows of MA_DMAX, of which each uses MA_DP.
const MA_DMAX: u32 = 128u;
// Rows in ma_kv padded by 16 bytes, so that a matrix load's 8 rows of 16 bytes fall into
// different banks (a row stride of 128 or 256 bytes puts them into the same ones): q's and
// v's rows of MA_DP (MA_QS), k^T's rows of MA_BC keys (MA_KS).
override MA_QS: u32 = MA_DP + 8u;
const MA_KS: u32 = MA_BC + 8u;
// ma_kv holds q (rounded to f16) until its matrices are in the subgroups' registers, then
// per block of keys k^T's block [MA_DP][MA_BC] and, once S is computed, v's [MA_BC][MA_DP].
const MA_KV: u32 = max(MA_DMAX * MA_KS, max(MA_BR, MA_BC) * (MA_DMAX + 8u));
var<workgroup> ma_kv: array<f16, MA_KV>;
var<workgroup> ma_s: array<f32, MA_BR * MA_SS>;   // S; at the end O, MA_BC columns at a time
var<workgroup> ma_p: array<f16, MA_BR * MA_PS>;
var<workgroup> ma_red: array<f32, MA_WG>;         // per-thread partial maxima and sums
var<workgroup> ma_row: array<f32, MA_BR>;         // each row's reference maximum, at the end its factor of out
var<workgroup> ma_alpha: array<f32, MA_BR>;       // each row's rescale of O at this block
var<workgroup> ma_sg_need: array<u32, 64>;        // per subgroup: one of its rows' O needs its rescale
var<workgroup> ma_need: vec4<u32>;                // x: some row's O needs it (a vec4: see above)
const MA_LAZY: f32 = 8.0;                         // log2 units (above)

alias MaL = subgroup_matrix_left<f16, SK, SM>;
alias MaR = subgroup_matrix_right<f16, SN, SK>;
alias MaC = subgroup_matrix_result<f32, SN, SM>;

const MA_F16_MAX: f32 = 65504.0;
const MA_F16_OVERFLOW: f32 = 65520.0;   // the smallest magnitude that rounds past MA_F16_MAX

// x rounded to f16, +-inf beyond its range (a conversion out of range is undefined in WGSL)
fn ma_f16(x: f32) -> f16 {
    if (abs(x) >= MA_F16_OVERFLOW) { return f16(sign(x) * MA_F16_MAX) * 2.0h; }
    return f16(x);
}

// ma_convert: a copy [rows][MA_DP] (v, or q and dout in the backward): 8 values of a key row
// per invocation, consecutive invocations along the row, so that both the reads and the
// 16-byte stores of neighbours are neighbours; the row of key j of (b, kvh) is
// (b * kv_heads + kvh) * keys + j, keys = k_blocks * MA_BC. The source is binding 2 (k, or
// v bound there).
// MA_SCALE: the values times scale * log2 e (q of the backward, in log2 units as the
// forward's). The backward converts q and dout too, through a copy of the parameters whose
// seq_k and kv_heads are seq_q and heads (the rows' layout is then the same).
override MA_SCALE: bool = false;
@group(0) @binding(3) var<storage, read_write> kv_out: array<vec4<u32>>;   // 8 f16 per element

// x and y rounded to f16 (ma_f16), as 8 f16 in four words.
fn ma_pack8(x: vec4f, y: vec4f) -> vec4<u32> {
    return vec4<u32>(bitcast<u32>(vec2<f16>(ma_f16(x.x), ma_f16(x.y))), bitcast<u32>(vec2<f16>(ma_f16(x.z), ma_f16(x.w))),
                     bitcast<u32>(vec2<f16>(ma_f16(y.x), ma_f16(y.y))), bitcast<u32>(vec2<f16>(ma_f16(y.z), ma_f16(y.w))));
}

// The (batch, kv head) bk's key j, values 4 c .. 4 c + 3 (0 past seq_k and head_dim).
fn ma_src4(bk: u32, j: u32, c: u32) -> vec4f {
    if (j >= p.seq_k) { return vec4f(0.0); }
    let kvh = bk % p.kv_heads;
    let b = bk / p.kv_heads;
    return ld_k(((b * p.seq_k + j) * p.kv_heads + kvh) * p.dim, c);
}

@compute @workgroup_size(256)
fn ma_convert(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
    let t = gid.x + gid.y * nwg.x * 256u;
    let d8p = MA_DP / 8u;
    let keys = p.k_blocks * MA_BC;
    if (t >= p.batch * p.kv_heads * keys * d8p) { return; }
    let bk = t / d8p / keys;
    let j = (t / d8p) % keys;
    let c = 2u * (t % d8p);
    var s = 1.0;
    if (MA_SCALE) { s = p.scale_log2; }
    kv_out[t] = ma_pack8(ma_src4(bk, j, c) * s, ma_src4(bk, j, c + 1u) * s);   // row (bk * keys + j), values 8 (t % d8p) ..
}

// ma_convert_t: k transposed into [MA_DP][keys] per (batch, kv head) (so that k^T's
// matrices load row by row, as v's), one workgroup per MA_CT keys x MA_CT values through
// workgroup memory: read along the keys' rows (4 values per invocation), written along the
// copy's (8 keys per invocation, the first MA_CT * MA_CT / 8 invocations).
const MA_CT = 32u;
var<workgroup> ma_ct: array<f32, MA_CT * (MA_CT + 1u)>;   // [value][key], rows padded against bank conflicts

@compute @workgroup_size(256)
fn ma_convert_t(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
                @builtin(local_invocation_index) lid: u32) {
    let keys = p.k_blocks * MA_BC;
    let tk = (keys + MA_CT - 1u) / MA_CT;
    let td = (MA_DP + MA_CT - 1u) / MA_CT;
    let w = wid.x + wid.y * nwg.x;
    if (w >= p.batch * p.kv_heads * tk * td) { return; }
    let j0 = (w % tk) * MA_CT;
    let d0 = (w / tk) % td * MA_CT;
    let bk = w / tk / td;
    let x = ma_src4(bk, j0 + lid / 8u, d0 / 4u + lid % 8u);
    for (var e = 0u; e < 4u; e++) { ma_ct[(4u * (lid % 8u) + e) * (MA_CT + 1u) + lid / 8u] = x[e]; }
    workgroupBarrier();
    let r = lid / 4u;          // the value written
    let q = 8u * (lid % 4u);   // its first key
    let d = d0 + r;
    let j = j0 + q;
    if (lid < MA_CT * MA_CT / 8u && d < MA_DP && j < keys) {
        let b = r * (MA_CT + 1u) + q;
        let y0 = vec4f(ma_ct[b], ma_ct[b + 1u], ma_ct[b + 2u], ma_ct[b + 3u]);
        let y1 = vec4f(ma_ct[b + 4u], ma_ct[b + 5u], ma_ct[b + 6u], ma_ct[b + 7u]);
        kv_out[((bk * MA_DP + d) * keys + j) / 8u] = ma_pack8(y0, y1);
    }
}

// The 8 f16 of w into ma_kv from element at.
fn ma_put8(at: u32, w: vec4<u32>) {
    for (var j = 0u; j < 4u; j++) {
        let h = bitcast<vec2<f16>>(w[j]);
        ma_kv[at + 2u * j] = h.x;
        ma_kv[at + 2u * j + 1u] = h.y;
    }
}

// Word c of k^T's block of keys kb .. kb + MA_BC ([MA_DP][MA_KS] in ma_kv, in 16-byte
// words): its index in k16 and its first element in ma_kv; kh: the (batch, kv head)'s
// first element in the copies. The same of v's block ([MA_BC][MA_QS]).
fn ma_k_src(c: u32, kh: u32, kb: u32) -> u32 {
    return (kh + (c / (MA_BC / 8u)) * p.k_blocks * MA_BC + kb) / 8u + c % (MA_BC / 8u);
}
fn ma_k_dst(c: u32) -> u32 { return (c / (MA_BC / 8u)) * MA_KS + 8u * (c % (MA_BC / 8u)); }
fn ma_v_src(c: u32, kh: u32, kb: u32) -> u32 { return (kh + (kb + c / (MA_DP / 8u)) * MA_DP) / 8u + c % (MA_DP / 8u); }
fn ma_v_dst(c: u32) -> u32 { return (c / (MA_DP / 8u)) * MA_QS + 8u * (c % (MA_DP / 8u)); }

// A block into ma_kv straight from the copies (k^T's when is_k, else v's); every invocation
// calls it.
fn ma_stage(lid: u32, is_k: bool, kh: u32, kb: u32) {
    for (var c = lid; c < MA_DP * MA_BC / 8u; c += MA_WG) {
        if (is_k) { ma_put8(ma_k_dst(c), k16[ma_k_src(c, kh, kb)]); }
        else { ma_put8(ma_v_dst(c), v16[ma_v_src(c, kh, kb)]); }
    }
}

// MA_PF: a block's words are loaded into registers (8 per invocation cover it: the host
// checks) one step before they are stored into ma_kv, so that the loads' latency overlaps
// the products: v's during S's product, the next block's k^T during the softmax and P v.
override MA_PF: bool = false;
const MA_PFW: u32 = 8u;   // the registers of words per invocation (MaWords; MMA_PF_WORDS on the host)
alias MaWords = array<vec4<u32>, MA_PFW>;
fn ma_fetch(w: ptr<function, MaWords>, lid: u32, is_k: bool, kh: u32, kb: u32) {
    for (var j = 0u; j < MA_PFW; j++) {
        let c = lid + j * MA_WG;
        if (c < MA_DP * MA_BC / 8u) {
            if (is_k) { (*w)[j] = k16[ma_k_src(c, kh, kb)]; } else { (*w)[j] = v16[ma_v_src(c, kh, kb)]; }
        }
    }
}
fn ma_put(w: ptr<function, MaWords>, lid: u32, is_k: bool) {
    for (var j = 0u; j < MA_PFW; j++) {
        let c = lid + j * MA_WG;
        if (c < MA_DP * MA_BC / 8u) { ma_put8(select(ma_v_dst(c), ma_k_dst(c), is_k), (*w)[j]); }
    }
}

// The subgroup's rows of q (SK columns per matrix, MA_QC <= 16 of them), kept in registers
// for the whole pass.
struct MaQ { q0: MaL, q1: MaL, q2: MaL, q3: MaL, q4: MaL, q5: MaL, q6: MaL, q7: MaL,
             q8: MaL, q9: MaL, q10: MaL, q11: MaL, q12: MaL, q13: MaL, q14: MaL, q15: MaL }
override MA_QC: u32 = MA_DP / SK;

fn ma_q(sg: u32, n: u32) -> MaL {
    return subgroupMatrixLoad<MaL>(&ma_kv, sg * SM * MA_QS + min(n, MA_QC - 1u) * SK, false, MA_QS);
}

// S's 4 result matrices of a subgroup (MA_BC keys)
struct MaS { s0: MaC, s1: MaC, s2: MaC, s3: MaC }

// s += the left matrix a (q's columns n SK ..) times rows n SK .. of the staged k^T block.
fn ma_mac(s: ptr<function, MaS>, a: MaL, n: u32) {
    if (n >= MA_QC) { return; }
    let ka = n * SK * MA_KS;
    (*s).s0 = subgroupMatrixMultiplyAccumulate(a, subgroupMatrixLoad<MaR>(&ma_kv, ka, false, MA_KS), (*s).s0);
    (*s).s1 = subgroupMatrixMultiplyAccumulate(a, subgroupMatrixLoad<MaR>(&ma_kv, ka + SN, false, MA_KS), (*s).s1);
    (*s).s2 = subgroupMatrixMultiplyAccumulate(a, subgroupMatrixLoad<MaR>(&ma_kv, ka + 2u * SN, false, MA_KS), (*s).s2);
    (*s).s3 = subgroupMatrixMultiplyAccumulate(a, subgroupMatrixLoad<MaR>(&ma_kv, ka + 3u * SN, false, MA_KS), (*s).s3);
}

// S of the subgroup's SM rows with the staged block's keys into ma_s (every invocation of a
// busy subgroup calls it).
fn ma_scores(sg: u32, q: MaQ) {
    var s = MaS(MaC(), MaC(), MaC(), MaC());   // explicit zeros (see the prelude)
    ma_mac(&s, q.q0, 0u); ma_mac(&s, q.q1, 1u); ma_mac(&s, q.q2, 2u); ma_mac(&s, q.q3, 3u);
    ma_mac(&s, q.q4, 4u); ma_mac(&s, q.q5, 5u); ma_mac(&s, q.q6, 6u); ma_mac(&s, q.q7, 7u);
    ma_mac(&s, q.q8, 8u); ma_mac(&s, q.q9, 9u); ma_mac(&s, q.q10, 10u); ma_mac(&s, q.q11, 11u);
    ma_mac(&s, q.q12, 12u); ma_mac(&s, q.q13, 13u); ma_mac(&s, q.q14, 14u); ma_mac(&s, q.q15, 15u);
    let sa = sg * SM * MA_SS;
    subgroupMatrixStore(&ma_s, sa, s.s0, false, MA_SS);
    subgroupMatrixStore(&ma_s, sa + SN, s.s1, false, MA_SS);
    subgroupMatrixStore(&ma_s, sa + 2u * SN, s.s2, false, MA_SS);
    subgroupMatrixStore(&ma_s, sa + 3u * SN, s.s3, false, MA_SS);
}

// The 4 scores of row r at keys kb + 4 g .. (log2 units), hidden pairs -inf, the mask added;
// full: every pair of the block is visible and there is no mask.
fn ma_row4(r: u32, g: u32, i: u32, kb: u32, b: u32, h: u32, full: bool) -> vec4f {
    let a = r * MA_SS + 4u * g;
    let s = vec4f(ma_s[a], ma_s[a + 1u], ma_s[a + 2u], ma_s[a + 3u]);
    if (full) { return s; }
    return mask_scores(s, b, h, vec4u(i), vec4u(kb + 4u * g) + vec4u(0u, 1u, 2u, 3u));
}

struct MaPlace { bh: u32, b: u32, h: u32, i0: u32, i1: u32, q_base: u32, q_stride: u32, kh: u32 }

fn ma_place(wg: u32) -> MaPlace {
    let bo = block_of(wg, p.q_blocks);
    let qb = p.q_blocks - 1u - bo.x;   // last (longest when causal) blocks first
    let bh = bo.y;
    let h = bh % p.heads;
    let b = bh / p.heads;
    let i0 = qb * MA_BR;
    return MaPlace(bh, b, h, i0, min(i0 + MA_BR, p.seq_q), (b * p.seq_q * p.heads + h) * p.dim, p.heads * p.dim,
                   (b * p.kv_heads + h / p.group) * p.k_blocks * MA_BC * MA_DP);
}

// The out columns [c0, c0 + MA_BC) of the workgroup's rows from ma_s, times each row's factor.
fn ma_emit(lid: u32, c0: u32, at: MaPlace) {
    workgroupBarrier();
    for (var e = lid; e < MA_BR * MA_BC; e += MA_WG) {
        let r = e / MA_BC;
        let d = c0 + e % MA_BC;
        let i = at.i0 + r;
        if (i < p.seq_q && d < p.dim) { dst[at.q_base + i * at.q_stride + d] = ma_s[r * MA_SS + e % MA_BC] * ma_row[r]; }
    }
    workgroupBarrier();
}

// Result matrix n of the subgroup's O into ma_s at its column in a group of MA_SC, and the
// group out when it is complete.
fn ma_out(lid: u32, sg: u32, n: u32, o: MaC, at: MaPlace) {
    if (n >= MA_OC) { return; }
    if (sg < MA_NSG) { subgroupMatrixStore(&ma_s, sg * SM * MA_SS + (n % MA_SC) * SN, o, false, MA_SS); }
    if ((n + 1u) % MA_SC == 0u || n + 1u == MA_OC) { ma_emit(lid, (n / MA_SC) * MA_BC, at); }
}

// Result matrix n of the subgroup's O (x) times each row's ma_alpha, through its rows of
// ma_s (free: S is read by then).
fn ma_rescale(lid: u32, sg: u32, n: u32, x: MaC) -> MaC {
    if (n >= MA_OC) { return x; }
    let busy = sg < MA_NSG;
    let sa = min(sg, MA_NSG - 1u) * SM * MA_SS;
    if (busy) { subgroupMatrixStore(&ma_s, sa, x, false, MA_SS); }
    workgroupBarrier();
    for (var e = lid; e < MA_BR * SN; e += MA_WG) {
        let r = e / SN;
        ma_s[r * MA_SS + e % SN] *= ma_alpha[r];
    }
    workgroupBarrier();
    var y = x;
    if (busy) { y = subgroupMatrixLoad<MaC>(&ma_s, sa, false, MA_SS); }
    workgroupBarrier();
    return y;
}

@compute @workgroup_size(MA_WG)
fn prefill_mma(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
               @builtin(local_invocation_index) lid: u32, @builtin(subgroup_id) sg: u32,
               @builtin(num_subgroups) nsg: u32, @builtin(subgroup_invocation_id) lane: u32) {
    let wg = wid.x + wid.y * nwg.x;
    if (wg >= p.total_wg) { return; }
    let at = ma_place(wg);
    let busy = sg < MA_NSG;
    let d4p = MA_DP / 4u;
    for (var t = lid; t < MA_BR * d4p; t += MA_WG) {   // q, pre-scaled into log2 units
        let r = t / d4p;
        let c = t % d4p;
        var x = vec4f(0.0);
        if (at.i0 + r < p.seq_q) { x = ld_q(at.q_base + (at.i0 + r) * at.q_stride, c) * p.scale_log2; }
        let a = r * MA_QS + 4u * c;
        ma_kv[a] = ma_f16(x.x);
        ma_kv[a + 1u] = ma_f16(x.y);
        ma_kv[a + 2u] = ma_f16(x.z);
        ma_kv[a + 3u] = ma_f16(x.w);
    }
    workgroupBarrier();
    // q's matrices into registers (the subgroups past MA_NSG load a busy one's, unused)
    let qs = min(sg, MA_NSG - 1u);
    let q = MaQ(ma_q(qs, 0u), ma_q(qs, 1u), ma_q(qs, 2u), ma_q(qs, 3u), ma_q(qs, 4u), ma_q(qs, 5u), ma_q(qs, 6u),
                ma_q(qs, 7u), ma_q(qs, 8u), ma_q(qs, 9u), ma_q(qs, 10u), ma_q(qs, 11u), ma_q(qs, 12u), ma_q(qs, 13u),
                ma_q(qs, 14u), ma_q(qs, 15u));
    let r = lid % MA_BR;        // the softmax's row and the thread's turn in it
    let part = lid / MA_BR;
    let i = at.i0 + r;
    let range = key_range(at.i0, at.i1);
    let kb0 = (u32(max(range.x, 0)) / MA_BC) * MA_BC;
    var rk = 0u;
    if (has_dropout()) { rk = row_key(at.bh, i); }
    var m = p.neg_inf;   // the row's reference maximum (each of its threads keeps the same)
    var l = 0.0;         // the thread's part of sum_j exp2(s_j - m)
    var o0 = MaC(); var o1 = MaC(); var o2 = MaC(); var o3 = MaC(); var o4 = MaC(); var o5 = MaC(); var o6 = MaC(); var o7 = MaC();
    var o8 = MaC(); var o9 = MaC(); var o10 = MaC(); var o11 = MaC(); var o12 = MaC(); var o13 = MaC(); var o14 = MaC(); var o15 = MaC();
    var w: MaWords;
    if (MA_PF && i32(kb0) < range.y) { ma_fetch(&w, lid, true, at.kh, kb0); }
    for (var kb = kb0; i32(kb) < range.y; kb += MA_BC) {
        workgroupBarrier();   // q's matrices, or the block before's v, read
        if (MA_PF) { ma_put(&w, lid, true); } else { ma_stage(lid, true, at.kh, kb); }
        workgroupBarrier();
        if (MA_PF) { ma_fetch(&w, lid, false, at.kh, kb); }
        if (busy) { ma_scores(sg, q); }   // S and P of the block before are read by now
        workgroupBarrier();
        // k^T's block is read; P v reads v after the barriers below
        if (MA_PF) {
            ma_put(&w, lid, false);
            if (i32(kb + MA_BC) < range.y) { ma_fetch(&w, lid, true, at.kh, kb + MA_BC); }
        } else {
            ma_stage(lid, false, at.kh, kb);
        }
        let full = !has_mask() && block_visible(at.i0, at.i1, kb, MA_BC);
        var bm = p.neg_inf;
        for (var g = part; g < MA_BC / 4u; g += MA_TPR) {
            let x = ma_row4(r, g, i, kb, at.b, at.h, full);
            bm = max(bm, max(max(x.x, x.y), max(x.z, x.w)));
        }
        ma_red[lid] = bm;
        workgroupBarrier();
        // a new reference only when the block's maximum passes it by MA_LAZY: P stays below
        // 2^MA_LAZY, and O is rescaled (through workgroup memory) only then. One thread of
        // each row decides, the others read its decision.
        var need = false;
        if (part == 0u) {
            for (var t = 1u; t < MA_TPR; t++) { bm = max(bm, ma_red[r + t * MA_BR]); }
            var alpha = 1.0;
            if (bm > m + MA_LAZY) {
                alpha = exp2(m - bm);   // 0 for the first visible block
                need = m != p.neg_inf;
                m = bm;
            }
            ma_alpha[r] = alpha;
            ma_row[r] = m;
        }
        let sg_need = subgroupAny(need);
        if (lane == 0u) { ma_sg_need[sg] = select(0u, 1u, sg_need); }
        workgroupBarrier();
        m = ma_row[r];
        l *= ma_alpha[r];
        if (lid == 0u) {
            var any = 0u;
            for (var t = 0u; t < nsg; t++) { any |= ma_sg_need[t]; }
            ma_need = vec4<u32>(any);
        }
        let mu = select(m, 0.0, m == p.neg_inf);   // no visible key yet: every P is 0
        for (var g = part; g < MA_BC / 4u; g += MA_TPR) {
            var pe = exp2(ma_row4(r, g, i, kb, at.b, at.h, full) - vec4f(mu));   // hidden: exp2(-inf) = 0
            l += (pe.x + pe.y) + (pe.z + pe.w);
            if (has_dropout()) {   // kept or not; the scale 1 / (1 - p) is applied to out at the end
                pe = select(vec4f(0.0), pe, kept4(vec4u(rk), key_hashes(vec4u(kb + 4u * g) + vec4u(0u, 1u, 2u, 3u))));
            }
            let a = r * MA_PS + 4u * g;
            ma_p[a] = f16(pe.x);   // below 2^MA_LAZY: in range
            ma_p[a + 1u] = f16(pe.y);
            ma_p[a + 2u] = f16(pe.z);
            ma_p[a + 3u] = f16(pe.w);
        }
        if (workgroupUniformLoad(&ma_need).x != 0u) {   // (a barrier: P, alpha and the flag written)
            o0 = ma_rescale(lid, sg, 0u, o0); o1 = ma_rescale(lid, sg, 1u, o1); o2 = ma_rescale(lid, sg, 2u, o2);
            o3 = ma_rescale(lid, sg, 3u, o3); o4 = ma_rescale(lid, sg, 4u, o4); o5 = ma_rescale(lid, sg, 5u, o5);
            o6 = ma_rescale(lid, sg, 6u, o6); o7 = ma_rescale(lid, sg, 7u, o7); o8 = ma_rescale(lid, sg, 8u, o8);
            o9 = ma_rescale(lid, sg, 9u, o9); o10 = ma_rescale(lid, sg, 10u, o10); o11 = ma_rescale(lid, sg, 11u, o11);
            o12 = ma_rescale(lid, sg, 12u, o12); o13 = ma_rescale(lid, sg, 13u, o13); o14 = ma_rescale(lid, sg, 14u, o14);
            o15 = ma_rescale(lid, sg, 15u, o15);
        }
        if (busy) {
            for (var kk = 0u; kk < MA_BC; kk += SK) {
                let a = subgroupMatrixLoad<MaL>(&ma_p, sg * SM * MA_PS + kk, false, MA_PS);
                let vb = kk * MA_QS;
                o0 = subgroupMatrixMultiplyAccumulate(a, subgroupMatrixLoad<MaR>(&ma_kv, vb, false, MA_QS), o0);
                if (MA_OC > 1u) { o1 = subgroupMatrixMultiplyAccumulate(a, subgroupMatrixLoad<MaR>(&ma_kv, vb + SN, false, MA_QS), o1); }
                if (MA_OC > 2u) { o2 = subgroupMatrixMultiplyAccumulate(a, subgroupMatrixLoad<MaR>(&ma_kv, vb + 2u * SN, false, MA_QS), o2); }
                if (MA_OC > 3u) { o3 = subgroupMatrixMultiplyAccumulate(a, subgroupMatrixLoad<MaR>(&ma_kv, vb + 3u * SN, false, MA_QS), o3); }
                if (MA_OC > 4u) { o4 = subgroupMatrixMultiplyAccumulate(a, subgroupMatrixLoad<MaR>(&ma_kv, vb + 4u * SN, false, MA_QS), o4); }
                if (MA_OC > 5u) { o5 = subgroupMatrixMultiplyAccumulate(a, subgroupMatrixLoad<MaR>(&ma_kv, vb + 5u * SN, false, MA_QS), o5); }
                if (MA_OC > 6u) { o6 = subgroupMatrixMultiplyAccumulate(a, subgroupMatrixLoad<MaR>(&ma_kv, vb + 6u * SN, false, MA_QS), o6); }
                if (MA_OC > 7u) { o7 = subgroupMatrixMultiplyAccumulate(a, subgroupMatrixLoad<MaR>(&ma_kv, vb + 7u * SN, false, MA_QS), o7); }
                if (MA_OC > 8u) { o8 = subgroupMatrixMultiplyAccumulate(a, subgroupMatrixLoad<MaR>(&ma_kv, vb + 8u * SN, false, MA_QS), o8); }
                if (MA_OC > 9u) { o9 = subgroupMatrixMultiplyAccumulate(a, subgroupMatrixLoad<MaR>(&ma_kv, vb + 9u * SN, false, MA_QS), o9); }
                if (MA_OC > 10u) { o10 = subgroupMatrixMultiplyAccumulate(a, subgroupMatrixLoad<MaR>(&ma_kv, vb + 10u * SN, false, MA_QS), o10); }
                if (MA_OC > 11u) { o11 = subgroupMatrixMultiplyAccumulate(a, subgroupMatrixLoad<MaR>(&ma_kv, vb + 11u * SN, false, MA_QS), o11); }
                if (MA_OC > 12u) { o12 = subgroupMatrixMultiplyAccumulate(a, subgroupMatrixLoad<MaR>(&ma_kv, vb + 12u * SN, false, MA_QS), o12); }
                if (MA_OC > 13u) { o13 = subgroupMatrixMultiplyAccumulate(a, subgroupMatrixLoad<MaR>(&ma_kv, vb + 13u * SN, false, MA_QS), o13); }
                if (MA_OC > 14u) { o14 = subgroupMatrixMultiplyAccumulate(a, subgroupMatrixLoad<MaR>(&ma_kv, vb + 14u * SN, false, MA_QS), o14); }
                if (MA_OC > 15u) { o15 = subgroupMatrixMultiplyAccumulate(a, subgroupMatrixLoad<MaR>(&ma_kv, vb + 15u * SN, false, MA_QS), o15); }
            }
        }
    }

    // l, the factor of out (the dropout scale / l) and the log-sum-exp of each row; then out
    ma_red[lid] = l;
    workgroupBarrier();
    if (part == 0u) {
        var ls = 0.0;
        for (var t = 0u; t < MA_TPR; t++) { ls += ma_red[r + t * MA_BR]; }
        ma_row[r] = select(0.0, select(1.0, p.drop_scale, has_dropout()) / ls, ls > 0.0);
        if (LSE && i < p.seq_q) { lse_mma[at.bh * p.seq_q + i] = lse_public(m, ls); }
    }
    ma_out(lid, sg, 0u, o0, at); ma_out(lid, sg, 1u, o1, at); ma_out(lid, sg, 2u, o2, at); ma_out(lid, sg, 3u, o3, at);
    ma_out(lid, sg, 4u, o4, at); ma_out(lid, sg, 5u, o5, at); ma_out(lid, sg, 6u, o6, at); ma_out(lid, sg, 7u, o7, at);
    ma_out(lid, sg, 8u, o8, at); ma_out(lid, sg, 9u, o9, at); ma_out(lid, sg, 10u, o10, at); ma_out(lid, sg, 11u, o11, at);
    ma_out(lid, sg, 12u, o12, at); ma_out(lid, sg, 13u, o13, at); ma_out(lid, sg, 14u, o14, at); ma_out(lid, sg, 15u, o15, at);
}

// ---- the backward: mb_dkdv and mb_dq ------------------------------------------------------
//
// The backward as attention_backward.wgsl computes it (dS = P (Z dP - D), dv = (Z P)^T
// dout, dk = scale dS^T q, dq = scale dS k, P = exp2(S - lse) from the statistics pass's
// lse and D), its products on the matrix units. ma_convert first copies q (times scale
// log2 e), dout, k and v into f16 [rows of a (batch, head)][MA_DP], their rows padded to
// whole workgroups (q_blocks or k_blocks times MA_BR: zeros past seq_q, seq_k).
//   mb_dkdv  one workgroup per MA_BR keys of a (batch, kv head): over the visible queries
//            of the group's query heads, MB_BC at a time, S^T = k q^T and dP^T = v dout^T
//            into workgroup memory; P, Z P (f16) and dS^T (f16) from them; then dv +=
//            (Z P)^T dout and dk += dS^T q, the subgroup owning SM keys.
//   mb_dq    one workgroup per MA_BR queries of a (batch, query head): over the visible
//            keys, MB_BC at a time, S = q k^T and dP = dout v^T, then dS (f16), dq += dS k.
// Each subgroup loads the left operands of S and dP (its own rows of k and v, or q and
// dout) from the copies once, into registers. The block's rows of the other two (q and dout, or k and v), which
// every subgroup multiplies, are staged in workgroup memory once per workgroup (ma_kv, rows
// padded), their 16-byte words loaded into registers a block ahead: S's and dP's right
// operands load from them column by column (q^T, dout^T, k^T, v^T), those of dv, dk and dq
// row by row.
// At the end dk = LN2 * its sum (q carries scale log2 e; dk wants scale), dv = the dropout
// scale * its sum, dq = scale * its sum.
//
// Rounding (the F16 contract): q * scale * log2 e, k, v, dout, Z P and dS are rounded to
// f16 (dS beyond f16's range +-inf, below it to f16's subnormals), every sum is f32; P, D,
// lse and dP stay f32.
//
// Workgroup memory: the staged blocks (in ma_kv), S and dP [MA_BR][MB_SS] f32, Z P and dS
// [MA_BR][MB_PS] f16 (mb_dq keeps dS in mb_p), the block's lse, D and dropout row keys
// (mb_dkdv: of its queries; mb_dq: of its rows): 47 KiB at SM = SN = 16. Result matrices
// per subgroup: MB_OC of dk and of dv (mb_dq: of dq), at most 8 each, and 2 of S and of dP.

const MB_BC: u32 = 2u * SN;            // columns (queries of mb_dkdv, keys of mb_dq) per block
const MB_SS: u32 = MB_BC + 4u;         // row strides, padded as MA_SS and MA_PS
const MB_PS: u32 = MB_BC + 8u;
override MB_OC: u32 = MA_DP / SN;      // result matrices of dk, dv or dq per subgroup (<= 8)

@group(0) @binding(1) var<storage, read> bq16: array<f16>;    // the copies of the backward
@group(0) @binding(2) var<storage, read> bk16: array<f16>;
@group(0) @binding(3) var<storage, read> bv16: array<f16>;
@group(0) @binding(6) var<storage, read> bdo16: array<f16>;
// the same copies in 16-byte words, staged: q's and dout's by mb_dkdv, k's and v's by mb_dq
@group(0) @binding(1) var<storage, read> bq_w: array<vec4<u32>>;
@group(0) @binding(6) var<storage, read> bdo_w: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> bk_w: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> bv_w: array<vec4<u32>>;

var<workgroup> mb_s: array<f32, MA_BR * MB_SS>;   // S (S^T); at the end the outputs, MB_BC columns at a time
var<workgroup> mb_t: array<f32, MA_BR * MB_SS>;   // dP (dP^T)
var<workgroup> mb_p: array<f16, MA_BR * MB_PS>;   // mb_dkdv: (Z P)^T; mb_dq: dS
var<workgroup> mb_g: array<f16, MA_BR * MB_PS>;   // mb_dkdv: dS^T
var<workgroup> mb_lse: array<f32, MA_BR>;         // lse, D and row keys of the block's queries
var<workgroup> mb_d: array<f32, MA_BR>;
var<workgroup> mb_rk: array<u32, MA_BR>;
// ma_kv holds the block's MB_BC rows of two copies (mb_dkdv: q and dout; mb_dq: k and v),
// [MB_BC][MA_QS] each, the second from MB_SECOND on (2 MB_BC = MA_BC rows fit): their
// matrices load row by row (the right operands of dv, dk and dq) and column by column (those
// of S and dP: q^T, dout^T, k^T, v^T).
override MB_SECOND: u32 = MB_BC * MA_QS;

// S's (S^T's) 2 result matrices of a subgroup and dP's (dP^T's)
struct MbST { s0: MaC, s1: MaC, t0: MaC, t1: MaC }

// One step of SK values of d: st += a (the subgroup's rows of k or q at d) times the staged
// first block's columns d .. (q^T or k^T, loaded column by column), and b (of v or dout)
// times the second's (dout^T or v^T).
fn mb_step(st: ptr<function, MbST>, a: MaL, b: MaL, d: u32) {
    (*st).s0 = subgroupMatrixMultiplyAccumulate(a, subgroupMatrixLoad<MaR>(&ma_kv, d, true, MA_QS), (*st).s0);
    (*st).s1 = subgroupMatrixMultiplyAccumulate(a, subgroupMatrixLoad<MaR>(&ma_kv, SN * MA_QS + d, true, MA_QS), (*st).s1);
    let y = MB_SECOND + d;
    (*st).t0 = subgroupMatrixMultiplyAccumulate(b, subgroupMatrixLoad<MaR>(&ma_kv, y, true, MA_QS), (*st).t0);
    (*st).t1 = subgroupMatrixMultiplyAccumulate(b, subgroupMatrixLoad<MaR>(&ma_kv, SN * MA_QS + y, true, MA_QS), (*st).t1);
}

// S (S^T) into the subgroup's rows of mb_s and dP (dP^T) into mb_t.
fn mb_store(sg: u32, st: MbST) {
    let sa = sg * SM * MB_SS;
    subgroupMatrixStore(&mb_s, sa, st.s0, false, MB_SS);
    subgroupMatrixStore(&mb_s, sa + SN, st.s1, false, MB_SS);
    subgroupMatrixStore(&mb_t, sa, st.t0, false, MB_SS);
    subgroupMatrixStore(&mb_t, sa + SN, st.t1, false, MB_SS);
}

// The subgroup's left operands of S and dP, held in registers across the blocks: its rows
// of k and v (mb_dkdv), or q and dout (mb_dq), at element row of their copies, MA_QC <= 8
// matrices each (the host checks).
// (one loader per copy: an entry point may not use two variables of one binding, see
// mb_fetch_qd)
struct MbL8 { l0: MaL, l1: MaL, l2: MaL, l3: MaL, l4: MaL, l5: MaL, l6: MaL, l7: MaL }
fn mb_lk(row: u32, n: u32) -> MaL { return subgroupMatrixLoad<MaL>(&bk16, row + min(n, MA_QC - 1u) * SK, false, MA_DP); }
fn mb_lv(row: u32, n: u32) -> MaL { return subgroupMatrixLoad<MaL>(&bv16, row + min(n, MA_QC - 1u) * SK, false, MA_DP); }
fn mb_lq(row: u32, n: u32) -> MaL { return subgroupMatrixLoad<MaL>(&bq16, row + min(n, MA_QC - 1u) * SK, false, MA_DP); }
fn mb_ld(row: u32, n: u32) -> MaL { return subgroupMatrixLoad<MaL>(&bdo16, row + min(n, MA_QC - 1u) * SK, false, MA_DP); }
fn mb_k8(r: u32) -> MbL8 {
    return MbL8(mb_lk(r, 0u), mb_lk(r, 1u), mb_lk(r, 2u), mb_lk(r, 3u),
                mb_lk(r, 4u), mb_lk(r, 5u), mb_lk(r, 6u), mb_lk(r, 7u));
}
fn mb_v8(r: u32) -> MbL8 {
    return MbL8(mb_lv(r, 0u), mb_lv(r, 1u), mb_lv(r, 2u), mb_lv(r, 3u),
                mb_lv(r, 4u), mb_lv(r, 5u), mb_lv(r, 6u), mb_lv(r, 7u));
}
fn mb_q8(r: u32) -> MbL8 {
    return MbL8(mb_lq(r, 0u), mb_lq(r, 1u), mb_lq(r, 2u), mb_lq(r, 3u),
                mb_lq(r, 4u), mb_lq(r, 5u), mb_lq(r, 6u), mb_lq(r, 7u));
}
fn mb_d8(r: u32) -> MbL8 {
    return MbL8(mb_ld(r, 0u), mb_ld(r, 1u), mb_ld(r, 2u), mb_ld(r, 3u),
                mb_ld(r, 4u), mb_ld(r, 5u), mb_ld(r, 6u), mb_ld(r, 7u));
}
fn mb_steps(st: ptr<function, MbST>, a: MbL8, b: MbL8) {
    mb_step(st, a.l0, b.l0, 0u);
    if (MA_QC > 1u) { mb_step(st, a.l1, b.l1, SK); }
    if (MA_QC > 2u) { mb_step(st, a.l2, b.l2, 2u * SK); }
    if (MA_QC > 3u) { mb_step(st, a.l3, b.l3, 3u * SK); }
    if (MA_QC > 4u) { mb_step(st, a.l4, b.l4, 4u * SK); }
    if (MA_QC > 5u) { mb_step(st, a.l5, b.l5, 5u * SK); }
    if (MA_QC > 6u) { mb_step(st, a.l6, b.l6, 6u * SK); }
    if (MA_QC > 7u) { mb_step(st, a.l7, b.l7, 7u * SK); }
}

// Staging: the block's 2 MB_BC MA_DP / 8 words (the host checks that 8 per invocation cover
// them), loaded into registers during the block before (its products and softmax) and
// stored into ma_kv at the start of the block. Word c: row c / (MA_DP / 8) of the first
// copy's block, or past MB_BC rows of the second's.
fn mb_words() -> u32 { return 2u * MB_BC * (MA_DP / 8u); }
fn mb_src(c: u32, row0: u32) -> u32 {
    return (row0 + (c % (MB_BC * MA_DP / 8u)) / (MA_DP / 8u)) * (MA_DP / 8u) + c % (MA_DP / 8u);
}
fn mb_second(c: u32) -> bool { return c >= MB_BC * MA_DP / 8u; }
fn mb_put(w: ptr<function, MaWords>, lid: u32) {
    for (var j = 0u; j < MA_PFW; j++) {
        let c = lid + j * MA_WG;
        if (c < mb_words()) {
            let r = (c % (MB_BC * MA_DP / 8u)) / (MA_DP / 8u);
            ma_put8(select(0u, MB_SECOND, mb_second(c)) + r * MA_QS + 8u * (c % (MA_DP / 8u)), (*w)[j]);
        }
    }
}
// mb_dkdv's block: q's and dout's rows row0 .. row0 + MB_BC of their copies. (mb_dkdv and
// mb_dq each have their own fetch and left operands: an entry point may not use two
// variables of one binding, and bq16 and bq_w, say, share theirs.)
fn mb_fetch_qd(w: ptr<function, MaWords>, lid: u32, row0: u32) {
    for (var j = 0u; j < MA_PFW; j++) {
        let c = lid + j * MA_WG;
        if (c < mb_words()) {
            if (mb_second(c)) { (*w)[j] = bdo_w[mb_src(c, row0)]; } else { (*w)[j] = bq_w[mb_src(c, row0)]; }
        }
    }
}
// mb_dq's block: k's and v's rows
fn mb_fetch_kv(w: ptr<function, MaWords>, lid: u32, row0: u32) {
    for (var j = 0u; j < MA_PFW; j++) {
        let c = lid + j * MA_WG;
        if (c < mb_words()) {
            if (mb_second(c)) { (*w)[j] = bv_w[mb_src(c, row0)]; } else { (*w)[j] = bk_w[mb_src(c, row0)]; }
        }
    }
}

// The columns [c0, c0 + MB_BC) of the workgroup's MA_BR output rows from mb_s, times f:
// rows row0 + r below limit, at base + (row0 + r) * stride, into dst (or dst2).
fn mb_emit(lid: u32, c0: u32, row0: u32, limit: u32, base: u32, stride: u32, f: f32, second: bool) {
    workgroupBarrier();
    for (var e = lid; e < MA_BR * MB_BC; e += MA_WG) {
        let r = e / MB_BC;
        let d = c0 + e % MB_BC;
        if (row0 + r < limit && d < p.dim) {
            let x = mb_s[r * MB_SS + e % MB_BC] * f;
            let at = base + (row0 + r) * stride + d;
            if (second) { dst2[at] = x; } else { dst[at] = x; }
        }
    }
    workgroupBarrier();
}

// Result matrix n of the subgroup's output into mb_s, and the group of MB_BC / SN out when
// it is complete (mb_emit's arguments after n and x).
fn mb_out(lid: u32, sg: u32, n: u32, x: MaC, row0: u32, limit: u32, base: u32, stride: u32, f: f32, second: bool) {
    if (n >= MB_OC) { return; }
    if (sg < MA_NSG) { subgroupMatrixStore(&mb_s, sg * SM * MB_SS + (n % 2u) * SN, x, false, MB_SS); }
    if (n % 2u == 1u || n + 1u == MB_OC) { mb_emit(lid, (n / 2u) * MB_BC, row0, limit, base, stride, f, second); }
}

// acc_n += (the subgroup's rows of mb_p or mb_g) times the staged rows kk .. kk + SK of the
// first block (at = kk MA_QS) or the second (at = MB_SECOND + kk MA_QS), n < MB_OC: one step
// of SK columns (kk) per call.
fn mb_left(g: bool, sg: u32, kk: u32) -> MaL {
    if (g) { return subgroupMatrixLoad<MaL>(&mb_g, sg * SM * MB_PS + kk, false, MB_PS); }
    return subgroupMatrixLoad<MaL>(&mb_p, sg * SM * MB_PS + kk, false, MB_PS);
}
fn mb_right(at: u32, n: u32) -> MaR { return subgroupMatrixLoad<MaR>(&ma_kv, at + n * SN, false, MA_QS); }

struct Mb8 { a0: MaC, a1: MaC, a2: MaC, a3: MaC, a4: MaC, a5: MaC, a6: MaC, a7: MaC }

fn mb_mac(x: ptr<function, Mb8>, a: MaL, at: u32) {
    (*x).a0 = subgroupMatrixMultiplyAccumulate(a, mb_right(at, 0u), (*x).a0);
    if (MB_OC > 1u) { (*x).a1 = subgroupMatrixMultiplyAccumulate(a, mb_right(at, 1u), (*x).a1); }
    if (MB_OC > 2u) { (*x).a2 = subgroupMatrixMultiplyAccumulate(a, mb_right(at, 2u), (*x).a2); }
    if (MB_OC > 3u) { (*x).a3 = subgroupMatrixMultiplyAccumulate(a, mb_right(at, 3u), (*x).a3); }
    if (MB_OC > 4u) { (*x).a4 = subgroupMatrixMultiplyAccumulate(a, mb_right(at, 4u), (*x).a4); }
    if (MB_OC > 5u) { (*x).a5 = subgroupMatrixMultiplyAccumulate(a, mb_right(at, 5u), (*x).a5); }
    if (MB_OC > 6u) { (*x).a6 = subgroupMatrixMultiplyAccumulate(a, mb_right(at, 6u), (*x).a6); }
    if (MB_OC > 7u) { (*x).a7 = subgroupMatrixMultiplyAccumulate(a, mb_right(at, 7u), (*x).a7); }
}

// The 8 (at most) result matrices of x out (mb_out's arguments after x).
fn mb_out8(lid: u32, sg: u32, x: Mb8, row0: u32, limit: u32, base: u32, stride: u32, f: f32, second: bool) {
    mb_out(lid, sg, 0u, x.a0, row0, limit, base, stride, f, second);
    mb_out(lid, sg, 1u, x.a1, row0, limit, base, stride, f, second);
    mb_out(lid, sg, 2u, x.a2, row0, limit, base, stride, f, second);
    mb_out(lid, sg, 3u, x.a3, row0, limit, base, stride, f, second);
    mb_out(lid, sg, 4u, x.a4, row0, limit, base, stride, f, second);
    mb_out(lid, sg, 5u, x.a5, row0, limit, base, stride, f, second);
    mb_out(lid, sg, 6u, x.a6, row0, limit, base, stride, f, second);
    mb_out(lid, sg, 7u, x.a7, row0, limit, base, stride, f, second);
}

// The statistics pass's lse and D, and the dropout row keys, of the queries i0 .. i0 + n of
// query head bh (counted over batch and heads) into mb_lse, mb_d, mb_rk (+inf and 0 past
// seq_q, so that their P is 0).
fn mb_stats(lid: u32, n: u32, bh: u32, i0: u32) {
    let rows = p.batch * p.heads * p.seq_q;
    for (var r = lid; r < n; r += MA_WG) {
        let i = i0 + r;
        let live = i < p.seq_q;
        let x = bh * p.seq_q + min(i, p.seq_q - 1u);
        mb_lse[r] = select(p.pos_inf, stats[x], live);
        mb_d[r] = select(0.0, stats[rows + x], live);
        if (has_dropout()) { mb_rk[r] = row_key(bh, i); }
    }
}

// Rows of the copies of a (batch, head): q_blocks (k_blocks) times MA_BR.
fn mb_q_rows() -> u32 { return p.q_blocks * MA_BR; }
fn mb_k_rows() -> u32 { return p.k_blocks * MA_BR; }

@compute @workgroup_size(MA_WG)
fn mb_dkdv(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
           @builtin(local_invocation_index) lid: u32, @builtin(subgroup_id) sg: u32) {
    let wg = wid.x + wid.y * nwg.x;
    if (wg >= p.total_wg) { return; }
    let bo = block_of(wg, p.k_blocks);   // key blocks from the first (longest when causal)
    let pair = bo.y;                      // b * kv_heads + kv head
    let b = pair / p.kv_heads;
    let j0 = bo.x * MA_BR;
    let j1 = min(j0 + MA_BR, p.seq_k);
    let busy = sg < MA_NSG;
    let krow = (pair * mb_k_rows() + j0 + min(sg, MA_NSG - 1u) * SM) * MA_DP;   // the subgroup's keys in bk16, bv16
    let range = query_range(j0, j1);
    let qb0 = (u32(max(range.x, 0)) / MB_BC) * MB_BC;
    // blocks of MB_BC queries of each of the group's heads in turn: block n is head
    // (pair % kv_heads) group + n / per_head, queries qb0 + (n % per_head) MB_BC ..
    let per_head = select(0u, (u32(range.y) - qb0 + MB_BC - 1u) / MB_BC, range.y > i32(qb0));
    let blocks = p.group * per_head;
    let h0 = (pair % p.kv_heads) * p.group;
    var dk = Mb8(MaC(), MaC(), MaC(), MaC(), MaC(), MaC(), MaC(), MaC());
    var dv = Mb8(MaC(), MaC(), MaC(), MaC(), MaC(), MaC(), MaC(), MaC());
    let km = mb_k8(krow);
    let vm = mb_v8(krow);
    var w: MaWords;
    if (blocks > 0u) { mb_fetch_qd(&w, lid, (b * p.heads + h0) * mb_q_rows() + qb0); }
    for (var n = 0u; n < blocks; n++) {
        let h = h0 + n / per_head;
        let bh = b * p.heads + h;
        let qb = qb0 + (n % per_head) * MB_BC;
        workgroupBarrier();   // the block before's staged rows and statistics are read
        mb_put(&w, lid);
        mb_stats(lid, MB_BC, bh, qb);   // the block's queries
        workgroupBarrier();
        if (n + 1u < blocks) {
            let hn = h0 + (n + 1u) / per_head;
            mb_fetch_qd(&w, lid, (b * p.heads + hn) * mb_q_rows() + qb0 + ((n + 1u) % per_head) * MB_BC);
        }
        if (busy) {   // S^T = k q^T and dP^T = v dout^T
            var st = MbST(MaC(), MaC(), MaC(), MaC());
            mb_steps(&st, km, vm);
            mb_store(sg, st);
        }
        workgroupBarrier();
        let full = !has_mask() && block_visible(qb, min(qb + MB_BC, p.seq_q), j0, MA_BR);
        for (var t = lid; t < MA_BR * MB_BC / 4u; t += MA_WG) {
            let r = t / (MB_BC / 4u);   // key j0 + r
            let c = 4u * (t % (MB_BC / 4u));
            let j = j0 + r;
            let i4 = vec4u(qb + c) + vec4u(0u, 1u, 2u, 3u);
            let a = r * MB_SS + c;
            var s = vec4f(mb_s[a], mb_s[a + 1u], mb_s[a + 2u], mb_s[a + 3u]);
            if (!full) { s = mask_scores(s, b, h, i4, vec4u(j)); }
            let pe = exp2(s - vec4f(mb_lse[c], mb_lse[c + 1u], mb_lse[c + 2u], mb_lse[c + 3u]));
            var z = vec4f(1.0);
            if (has_dropout()) { z = keep4(vec4u(mb_rk[c], mb_rk[c + 1u], mb_rk[c + 2u], mb_rk[c + 3u]), vec4u(key_hash(j))); }
            let dp = vec4f(mb_t[a], mb_t[a + 1u], mb_t[a + 2u], mb_t[a + 3u]);
            let ds = pe * (dp * z - vec4f(mb_d[c], mb_d[c + 1u], mb_d[c + 2u], mb_d[c + 3u]));
            let zp = select(vec4f(0.0), pe, z != vec4f(0.0));   // the dropout scale comes at the end
            let o = r * MB_PS + c;
            mb_p[o] = f16(zp.x); mb_p[o + 1u] = f16(zp.y); mb_p[o + 2u] = f16(zp.z); mb_p[o + 3u] = f16(zp.w);
            mb_g[o] = ma_f16(ds.x); mb_g[o + 1u] = ma_f16(ds.y); mb_g[o + 2u] = ma_f16(ds.z); mb_g[o + 3u] = ma_f16(ds.w);
        }
        workgroupBarrier();
        if (busy) {   // dv += (Z P)^T dout, dk += dS^T q
            for (var kk = 0u; kk < MB_BC; kk += SK) {
                mb_mac(&dv, mb_left(false, sg, kk), MB_SECOND + kk * MA_QS);
                mb_mac(&dk, mb_left(true, sg, kk), kk * MA_QS);
            }
        }
    }
    let base = (b * p.seq_k * p.kv_heads + pair % p.kv_heads) * p.dim;
    let stride = p.kv_heads * p.dim;
    mb_out8(lid, sg, dk, j0, p.seq_k, base, stride, LN2, false);
    mb_out8(lid, sg, dv, j0, p.seq_k, base, stride, select(1.0, p.drop_scale, has_dropout()), true);
}

@compute @workgroup_size(MA_WG)
fn mb_dq(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
         @builtin(local_invocation_index) lid: u32, @builtin(subgroup_id) sg: u32) {
    let wg = wid.x + wid.y * nwg.x;
    if (wg >= p.total_wg) { return; }
    let bo = block_of(wg, p.q_blocks);
    let i0 = (p.q_blocks - 1u - bo.x) * MA_BR;   // last (longest when causal) blocks first
    let i1 = min(i0 + MA_BR, p.seq_q);
    let bh = bo.y;
    let h = bh % p.heads;
    let b = bh / p.heads;
    let busy = sg < MA_NSG;
    mb_stats(lid, MA_BR, bh, i0);
    let qrow = (bh * mb_q_rows() + i0 + min(sg, MA_NSG - 1u) * SM) * MA_DP;   // the subgroup's rows in bq16, bdo16
    let krow0 = (b * p.kv_heads + h / p.group) * mb_k_rows();   // the (batch, kv head)'s first row in the copies
    let range = key_range(i0, i1);
    let kb0 = (u32(max(range.x, 0)) / MB_BC) * MB_BC;
    var dq = Mb8(MaC(), MaC(), MaC(), MaC(), MaC(), MaC(), MaC(), MaC());
    let qm = mb_q8(qrow);
    let dm = mb_d8(qrow);
    var w: MaWords;
    if (i32(kb0) < range.y) { mb_fetch_kv(&w, lid, krow0 + kb0); }
    for (var kb = kb0; i32(kb) < range.y; kb += MB_BC) {
        workgroupBarrier();   // the block before's staged rows are read
        mb_put(&w, lid);
        workgroupBarrier();   // (also: the rows' statistics, the first time)
        if (i32(kb + MB_BC) < range.y) { mb_fetch_kv(&w, lid, krow0 + kb + MB_BC); }
        if (busy) {   // S = q k^T and dP = dout v^T
            var st = MbST(MaC(), MaC(), MaC(), MaC());
            mb_steps(&st, qm, dm);
            mb_store(sg, st);
        }
        workgroupBarrier();
        let full = !has_mask() && block_visible(i0, i1, kb, MB_BC);
        for (var t = lid; t < MA_BR * MB_BC / 4u; t += MA_WG) {
            let r = t / (MB_BC / 4u);
            let c = 4u * (t % (MB_BC / 4u));
            let j4 = vec4u(kb + c) + vec4u(0u, 1u, 2u, 3u);
            let a = r * MB_SS + c;
            var s = vec4f(mb_s[a], mb_s[a + 1u], mb_s[a + 2u], mb_s[a + 3u]);
            if (!full) { s = mask_scores(s, b, h, vec4u(i0 + r), j4); }
            let pe = exp2(s - vec4f(mb_lse[r]));
            var dp = vec4f(mb_t[a], mb_t[a + 1u], mb_t[a + 2u], mb_t[a + 3u]);
            if (has_dropout()) { dp *= keep4(vec4u(mb_rk[r]), key_hashes(j4)); }
            let ds = pe * (dp - vec4f(mb_d[r]));
            let o = r * MB_PS + c;
            mb_p[o] = ma_f16(ds.x); mb_p[o + 1u] = ma_f16(ds.y); mb_p[o + 2u] = ma_f16(ds.z); mb_p[o + 3u] = ma_f16(ds.w);
        }
        workgroupBarrier();
        if (busy) {   // dq += dS k
            for (var kk = 0u; kk < MB_BC; kk += SK) { mb_mac(&dq, mb_left(false, sg, kk), kk * MA_QS); }
        }
    }
    mb_out8(lid, sg, dq, i0, p.seq_q, (b * p.seq_q * p.heads + h) * p.dim, p.heads * p.dim, p.scale, false);
}
