// Flash attention: forward, backward and single-query decode, with GQA/MQA, causal masks
// with a KV-cache offset, sliding windows, an additive broadcast mask and attention dropout.
//
// Layout (all f32, row-major): q, out, dout, dq [batch, seq_q, heads, head_dim];
// k, v, dk, dv [batch, seq_k, kv_heads, head_dim]; query head h reads kv head h / group.
// mask (optional) is read at b*m_sb + h*m_sh + i*m_sq + j*m_sk (stride 0 = broadcast).
// Query i sits at position i + offset; key j is visible when (!causal || j <= pos) and
// (window == 0 || |pos - j| < window). Scores live in log2 units: q (or k) is pre-multiplied
// by scale*log2(e), the mask by log2(e), and exp2 replaces exp.
// A row with no visible key has l = 0 and yields 0 (forward) and zero gradients.
//
// Entry points
//   fwd             MODE 0: out = softmax(q k^T * scale + mask) (dropped) v.
//                   MODE 1 (backward statistics): stats[bh*seq_q + i] = log2-sum-exp2 of
//                   row i (+inf for an empty row, so that exp2(s - lse) = 0) and
//                   stats[B*H*seq_q + bh*seq_q + i] = D_i = sum_d dout * out
//                   (binding 3 then holds the forward output, binding 6 dout).
//   bwd_dq          dq = scale * sum_j dS_ij k_j, one workgroup per block of BR queries.
//   bwd_dkdv        dk = scale * sum_i dS_ij q_i, dv = sum_i Pdrop_ij dout_i, one workgroup
//                   per block of BR keys; it loops over the `group` query heads sharing the
//                   kv head in a fixed order (deterministic, no atomics).
//   decode          seq_q == 1 (flash-decoding): keys split across workgroups; each writes
//                   a partial (max, sum, unnormalised acc) per head.
//   decode_combine  merges the partials of each (batch, head) into out
//                   (decode_combine_lse: and writes the row's log-sum-exp).
//   prefill         the default forward for seq_q > 1 (same output as fwd MODE 0): 256
//                   threads, 64 x 64 blocks, head_dim streamed in chunks (GEMM-style), so
//                   that head_dim 128 no longer forces tiny workgroups; see its section
//                   at the end of the file (prefill_lse: and writes each row's
//                   log-sum-exp; prefill_stats: the backward's statistics pass).
//   bwd_prep        the backward's statistics from a given log-sum-exp (options.lse).
//   bwd_dq_ds64     dq = scale * sum_j dS_ij k_j from the dS blocks that bwd_dkdv64 wrote
//                   (WRITE_DS): the dq half of the backward without recomputing S and dP.
//   lse_export      the public log-sum-exp from the statistics of fwd MODE 1.
//   fwd_s_mm        the forward that keeps its scores (options.scores), first half: S in
//                   128 x 128 tiles, stored, and each row's max per tile;
//   fwd_pv_mm       second half: out = P v / l from the stored scores, and the log-sum-exp.
//
// Tiling of fwd / bwd_dq / bwd_dkdv (why it is shaped so). A workgroup owns BR "rows"
// (queries; keys for bwd_dkdv) and streams blocks of BC = KPT*TC "columns" (keys; queries
// for bwd_dkdv) through workgroup memory. Its WG = (BR/4)*TC threads form BR/4 row groups
// of TC lanes. Phase 1 (S = rows . cols^T, contraction over head_dim) gives each lane a
// 4 x KPT register tile: rows 4g..4g+3, columns c, c+TC, ...; per vec4 of head_dim it loads
// 4 + KPT vec4 from workgroup memory for 16*KPT FMAs (the row vec4 is a broadcast within
// the row group; columns are spread over lanes, and rows are padded by one vec4 so that
// lanes reading different rows hit different banks). The row max is reduced through a
// small TC x BR array (one barrier per block); row sums stay per lane until the end.
// Phase 2 (acc += W . cols, contraction over the block) gives each lane the same 4 rows x
// OCV vec4 of head_dim (vec4 index c + TC*j): per column it loads 1 vec4 of W (stored
// transposed, 4 rows per vec4) and OCV vec4 of the column operand for 16*OCV FMAs.
// Accumulators stay in registers for the whole loop; at the end they go through the
// workgroup tile so that the stores are row-contiguous.
// Only blocks intersecting the visible band are visited (causal / window skip whole
// blocks; causal query blocks run longest first), and fully visible blocks without a mask
// skip the per-element visibility test. The forward stores nothing of size seq_q x seq_k
// unless the caller keeps the scores (options.scores: prefill_lse with WRITE_S, or
// fwd_s_mm): the backward recomputes P from the row statistics (2 floats per query row)
// and, without the scores, S too; the 64 x 64 backward may keep dS (WRITE_DS).
// What bounds the speed: f32 tiles must fit 48 KiB of workgroup storage (H200), which
// caps the register tile at 4 x 4 (4 x 2 in the backward at head_dim 128); phase 1 then
// issues one 16-byte workgroup load per 8 FMAs (phase 2 one per 13), so workgroup-memory
// bandwidth, not FMA throughput, is the first limit. SHARED_STAGE trades a barrier for
// memory: fwd/bwd_dq stage k and v one after the other in one region; bwd_dkdv stages q
// and dout one after the other (q twice). The host picks BR, TC, KPT and SHARED_STAGE
// from the device's workgroup storage (48 KiB on the H200: head_dim 128 gets BR 32 x BC 32
// forward and BR 16 x BC 32 backward with one staging region; head_dim 64 gets BR 64 x
// BC 32 forward; lavapipe has 32 KiB). head_dim is a run-time value: a pipeline serves
// every head_dim of one OCV class (OCV = ceil(ceil(head_dim / 4) / TC)).
//
// Dropout is a pure function of (seed, b*heads + h, i, j):
//   keep iff mix32(row_key(bh, i) ^ key_hash(j)) >= drop_threshold (= floor(p * 2^32)),
// row_key = mix32(mix32(seed_key ^ bh) + i), key_hash = mix32(seed_key2 ^ j), with the
// seed keys derived from the 64-bit seed on the host; the backward regenerates it exactly.
// Visibility, masking and dropout work on vec4 of 4 (row, column) pairs at a time.
//
// Every function variable has an explicit initializer: a `var x: T;` declared inside a
// loop was seen to keep its value from the previous iteration (lavapipe through Dawn).
//
// Rows of head_dim floats start at even offsets (head_dim is even); when head_dim % 4 == 2
// a vec4 of a row is assembled from two aligned vec4 loads. Outputs are stored as scalars
// (once per element), so any even head_dim works.

struct Params {
    batch: u32, seq_q: u32, seq_k: u32, heads: u32,
    kv_heads: u32, group: u32, q_blocks: u32, k_blocks: u32,
    causal: u32, offset: i32, window: i32, flags: u32,           // flags: 1 mask, 2 dropout
    scale_log2: f32, drop_threshold: u32, drop_scale: f32, seed_key: u32,
    m_sb: u32, m_sh: u32, m_sq: u32, m_sk: u32,
    total_wg: u32, key_lo: i32, key_hi: i32, splits: u32,         // decode: visible keys, splits
    keys_per_split: u32, head_chunks: u32, seed_key2: u32, neg_inf: f32,
    pos_inf: f32, scale: f32, dim: u32, d4: u32,           // head_dim, ceil(head_dim / 4)
    subs: u32, subs_rows: u32,    // G_SUB > 0: sub-chunks per chunk (head_dim, rows)
    bk0: u32,                     // bwd_dkdv64, bwd_dq_ds64: first (batch, kv head) of the dispatch
    order_heads: u32,             // heads per group of the block order (block_of)
}

const LOG2E: f32 = 1.4426950408889634;

override OCV: u32 = 2u;             // vec4 of head_dim per lane in phase 2 (1..4): ceil(d4 / TC)
override BR: u32 = 32u;             // rows per workgroup (multiple of 4)
override TC: u32 = 8u;              // lanes per row group
override KPT: u32 = 4u;             // columns per lane in phase 1 (1, 2 or 4)
override SHARED_STAGE: bool = false;
override MODE: u32 = 0u;            // fwd only: 0 output, 1 backward statistics

override DP4: u32 = OCV * TC;                // padded row length in vec4 (>= d4)
override RS: u32 = DP4 + 1u;                 // workgroup row stride in vec4
override BC: u32 = KPT * TC;                 // columns per block
override RG: u32 = BR / 4u;                  // row groups
override WG: u32 = RG * TC;                  // threads per workgroup

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<vec4f>;
@group(0) @binding(2) var<storage, read> k: array<vec4f>;
@group(0) @binding(3) var<storage, read> v: array<vec4f>;       // fwd MODE 1: forward output
@group(0) @binding(4) var<storage, read> mask: array<f32>;
@group(0) @binding(5) var<storage, read_write> dst: array<f32>; // out / stats / dq / dk
@group(0) @binding(6) var<storage, read> dout: array<vec4f>;
@group(0) @binding(7) var<storage, read> stats: array<f32>;
@group(0) @binding(8) var<storage, read_write> dst2: array<f32>; // dv
@group(0) @binding(5) var<storage, read_write> part: array<vec4f>;       // decode
@group(0) @binding(1) var<storage, read> part_in: array<vec4f>;          // decode_combine
@group(0) @binding(2) var<storage, read_write> comb_out: array<f32>;     // decode_combine
@group(0) @binding(3) var<storage, read_write> comb_lse: array<f32>;     // decode_combine_lse
@group(0) @binding(6) var<storage, read_write> lse_out: array<f32>;      // prefill_lse
@group(0) @binding(9) var<storage, read_write> ds_out: array<vec4f>;     // bwd_dkdv64 (WRITE_DS)
// The forward's scores kept for the backward (options.scores): the prefill entries write
// them (WRITE_S; unwritten, a small unused buffer is bound), bwd_dkdv64 reads them (READ_S;
// otherwise q is bound there). Layout: block (bh, query block qb, key block kb) at vec4
// ((bh * q_blocks + qb) * k_blocks + kb) * 1024; in it, the scores of key 4kg + c with
// queries 4qg .. 4qg + 3 (4 x 4 sub-block of key group kg, query group qg) at vec4 c * 256 +
// kg * 16 + qg, so that each of a thread's 4 stores (and loads) is one of 4 slices in which
// consecutive sub-blocks are consecutive vec4: a warp's store covers 64-byte runs (the
// forward's 4 query groups x 8 key groups) or 256-byte runs (bwd_dkdv64's 16 x 2) instead
// of 16 bytes every 64; and the 64 queries of a key are one 256-byte run (fwd_pv_mm's
// operand: P^T, a vec4 over 4 queries per key, as matmul_at reads its a).
@group(0) @binding(7) var<storage, read_write> s_out: array<vec4f>;      // prefill entries
@group(0) @binding(10) var<storage, read> s_in: array<vec4f>;            // bwd_dkdv64
@group(0) @binding(7) var<storage, read> ds_in: array<vec4f>;            // bwd_dq_ds64

// ---- helpers -------------------------------------------------------------------------

fn mix32(x0: u32) -> u32 {   // "lowbias32" (C. Wellons): a 32-bit bijection, full avalanche
    var x = x0;
    x ^= x >> 16u;
    x *= 0x7feb352du;
    x ^= x >> 15u;
    x *= 0x846ca68bu;
    x ^= x >> 16u;
    return x;
}
fn mix32v(x0: vec4u) -> vec4u {
    var x = x0;
    x ^= x >> vec4u(16u);
    x *= 0x7feb352du;
    x ^= x >> vec4u(15u);
    x *= 0x846ca68bu;
    x ^= x >> vec4u(16u);
    return x;
}
fn row_key(bh: u32, i: u32) -> u32 { return mix32(mix32(p.seed_key ^ bh) + i); }
fn row_keys(bh: u32, i: vec4u) -> vec4u { return mix32v(vec4u(mix32(p.seed_key ^ bh)) + i); }
fn key_hash(j: u32) -> u32 { return mix32(p.seed_key2 ^ j); }
fn key_hashes(j: vec4u) -> vec4u { return mix32v(vec4u(p.seed_key2) ^ j); }
fn kept(rk: u32, kh: u32) -> bool { return mix32(rk ^ kh) >= p.drop_threshold; }
// Dropout factor (0 or 1/(1-p)) of 4 (row key, key hash) pairs.
fn keep4(rk: vec4u, kh: vec4u) -> vec4f {
    return select(vec4f(0.0), vec4f(p.drop_scale), mix32v(rk ^ kh) >= vec4u(p.drop_threshold));
}

// The features a pipeline is built for (1 mask, 2 dropout); on GPUs the host sets FEAT to
// the call's flags for the 64 x 64 entries, so that the common call (neither) runs code
// without the mask loads and the dropout hashes, and without their registers (round 10 of
// bench/notes/attention.md). Other entries, and CPU adapters, keep both.
override FEAT: u32 = 3u;
fn has_mask() -> bool { return (FEAT & 1u) != 0u && (p.flags & 1u) != 0u; }
fn has_dropout() -> bool { return (FEAT & 2u) != 0u && (p.flags & 2u) != 0u; }

// Visibility of 4 (query i, key j) pairs (j < seq_k included).
fn visible4(i: vec4u, j: vec4u) -> vec4<bool> {
    let pos = vec4i(i) + vec4i(p.offset);
    let jj = vec4i(j);
    var ok = j < vec4u(p.seq_k);
    if (p.causal != 0u) { ok = ok & (jj <= pos); }
    if (p.window > 0) { ok = ok & (abs(pos - jj) < vec4i(p.window)); }
    return ok;
}

// Scores s (log2 units) of 4 (i, j) pairs with hidden pairs set to -inf and the mask added.
// Pairs out of range read a clamped, in-bounds mask element that is then discarded.
fn mask_scores(s: vec4f, b: u32, h: u32, i: vec4u, j: vec4u) -> vec4f {
    let ok = visible4(i, j) & (i < vec4u(p.seq_q));
    var x = s;
    if (has_mask()) {
        let base = b * p.m_sb + h * p.m_sh;
        let ic = min(i, vec4u(p.seq_q - 1u));
        let jc = min(j, vec4u(p.seq_k - 1u));
        let e = vec4u(base) + ic * p.m_sq + jc * p.m_sk;
        x += vec4f(mask[e.x], mask[e.y], mask[e.z], mask[e.w]) * LOG2E;
    }
    return select(vec4f(p.neg_inf), x, ok);
}

fn mask_at(b: u32, h: u32, i: u32, j: u32) -> f32 {
    return mask[b * p.m_sb + h * p.m_sh + i * p.m_sq + j * p.m_sk] * LOG2E;
}

// Visible keys [x, y) of the query rows [i0, i1) (i1 > i0); empty when y <= x.
fn key_range(i0: u32, i1: u32) -> vec2i {
    var lo = 0;
    var hi = i32(p.seq_k);
    let first = i32(i0) + p.offset;
    let last = i32(i1) - 1 + p.offset;
    if (p.causal != 0u) { hi = min(hi, last + 1); }
    if (p.window > 0) {
        lo = max(lo, first - p.window + 1);
        hi = min(hi, last + p.window);
    }
    return vec2i(lo, hi);
}

// Queries [x, y) that see at least one of the keys [j0, j1).
fn query_range(j0: u32, j1: u32) -> vec2i {
    var lo = 0;
    var hi = i32(p.seq_q);
    if (p.causal != 0u) { lo = max(lo, i32(j0) - p.offset); }
    if (p.window > 0) {
        lo = max(lo, i32(j0) - p.offset - p.window + 1);
        hi = min(hi, i32(j1) - 1 - p.offset + p.window);
    }
    return vec2i(lo, hi);
}

// True when every key of [j0, j0 + n) is visible to every query of [i0, i1): the block
// needs no per-element test (unless there is a mask).
fn block_visible(i0: u32, i1: u32, j0: u32, n: u32) -> bool {
    if (j0 + n > p.seq_k) { return false; }
    let first = i32(i0) + p.offset;
    let last = i32(i1) - 1 + p.offset;
    let jl = i32(j0 + n) - 1;
    if (p.causal != 0u && jl > first) { return false; }
    if (p.window > 0 && (last - i32(j0) >= p.window || jl - first >= p.window)) { return false; }
    return true;
}

// Which block of which head workgroup wg of a dispatch works on: x = the block counted from
// the longest end (causal: the last query block, the first key block), y = the head counted
// from the dispatch's first. The heads go in groups of p.order_heads; within a group the
// blocks of all its heads run longest first, so that a GPU starting workgroups in index
// order ends the dispatch on short blocks rather than on the longest blocks of its last
// head, while the workgroups running at once still share the k and v rows of a few heads
// in the L2 cache (round 18 of bench/notes/attention.md). order_heads 1: one head's blocks
// together.
fn block_of(wg: u32, blocks: u32) -> vec2u {
    let heads = p.total_wg / blocks;
    let gh = clamp(p.order_heads, 1u, heads);      // gh * blocks <= total_wg: no overflow
    let g = wg / (gh * blocks);
    let r = wg % (gh * blocks);
    let size = min(gh, heads - g * gh);           // the last group may be smaller
    return vec2u(r / size, g * gh + r % size);
}

// Zeroes the lanes of a row vec4 at or past DIM; x was loaded at element offset e.
fn unaligned(lo: vec4f, hi: vec4f, e: u32, d4: u32) -> vec4f {
    var x = lo;
    if ((e & 3u) != 0u) { x = vec4f(lo.zw, hi.xy); }
    let lane = vec4u(0u, 1u, 2u, 3u) + 4u * d4;
    return select(vec4f(0.0), x, lane < vec4u(p.dim));
}

// vec4 number d4 of the row starting at element `base` (0 past the row's end).
fn ld_q(base: u32, d4: u32) -> vec4f {
    if (d4 >= p.d4) { return vec4f(0.0); }
    let e = base + 4u * d4;
    if ((p.dim & 3u) == 0u) { return q[e >> 2u]; }
    var hi = vec4f(0.0);
    if ((e & 3u) != 0u && 4u * d4 + 2u < p.dim) { hi = q[(e >> 2u) + 1u]; }
    return unaligned(q[e >> 2u], hi, e, d4);
}
fn ld_k(base: u32, d4: u32) -> vec4f {
    if (d4 >= p.d4) { return vec4f(0.0); }
    let e = base + 4u * d4;
    if ((p.dim & 3u) == 0u) { return k[e >> 2u]; }
    var hi = vec4f(0.0);
    if ((e & 3u) != 0u && 4u * d4 + 2u < p.dim) { hi = k[(e >> 2u) + 1u]; }
    return unaligned(k[e >> 2u], hi, e, d4);
}
fn ld_v(base: u32, d4: u32) -> vec4f {
    if (d4 >= p.d4) { return vec4f(0.0); }
    let e = base + 4u * d4;
    if ((p.dim & 3u) == 0u) { return v[e >> 2u]; }
    var hi = vec4f(0.0);
    if ((e & 3u) != 0u && 4u * d4 + 2u < p.dim) { hi = v[(e >> 2u) + 1u]; }
    return unaligned(v[e >> 2u], hi, e, d4);
}
fn ld_do(base: u32, d4: u32) -> vec4f {
    if (d4 >= p.d4) { return vec4f(0.0); }
    let e = base + 4u * d4;
    if ((p.dim & 3u) == 0u) { return dout[e >> 2u]; }
    var hi = vec4f(0.0);
    if ((e & 3u) != 0u && 4u * d4 + 2u < p.dim) { hi = dout[(e >> 2u) + 1u]; }
    return unaligned(dout[e >> 2u], hi, e, d4);
}

fn st_dst(base: u32, d4: u32, x: vec4f) {
    for (var e = 0u; e < 4u; e++) {
        if (4u * d4 + e < p.dim) { dst[base + 4u * d4 + e] = x[e]; }
    }
}
fn st_dst2(base: u32, d4: u32, x: vec4f) {
    for (var e = 0u; e < 4u; e++) {
        if (4u * d4 + e < p.dim) { dst2[base + 4u * d4 + e] = x[e]; }
    }
}

// ---- staging and output helpers ----------------------------------------------------------
// Tiles move between memory and workgroup arrays with thread (g, c) taking rows g, g + RG,
// ... and vec4 c, c + TC, ... of each row: a row group reads TC consecutive vec4 (coalesced)
// and the inner loop runs over the real d4 vec4 only (padding is never read).

// ---- forward and backward statistics ---------------------------------------------------

override F_QN: u32 = BR * RS;
override F_KVN: u32 = select(2u, 1u, SHARED_STAGE || MODE == 1u) * BC * RS;
override F_PN: u32 = select(BC * RG, 1u, MODE == 1u);
override F_RN: u32 = TC * RG;
var<workgroup> f_q: array<vec4f, F_QN>;     // q tile [BR][RS], pre-scaled; at the end: out
var<workgroup> f_kv: array<vec4f, F_KVN>;   // k tile [BC][RS], then (or beside) the v tile
var<workgroup> f_p: array<vec4f, F_PN>;     // P transposed: [BC][RG] vec4 of 4 rows
var<workgroup> f_red: array<vec4f, F_RN>;   // per-lane partials [TC][RG]

fn f_stage_k(off: u32, kb: u32, base: u32, stride: u32, g: u32, c: u32) {
    for (var r = g; r < BC; r += RG) {
        let j = kb + r;
        for (var d4 = c; d4 < p.d4; d4 += TC) {
            var x = vec4f(0.0);
            if (j < p.seq_k) { x = ld_k(base + j * stride, d4); }
            f_kv[off + r * RS + d4] = x;
        }
    }
}
fn f_stage_v(off: u32, kb: u32, base: u32, stride: u32, g: u32, c: u32) {
    for (var r = g; r < BC; r += RG) {
        let j = kb + r;
        for (var d4 = c; d4 < p.d4; d4 += TC) {
            var x = vec4f(0.0);
            if (j < p.seq_k) { x = ld_v(base + j * stride, d4); }
            f_kv[off + r * RS + d4] = x;
        }
    }
}

@compute @workgroup_size(WG)
fn fwd(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
       @builtin(local_invocation_index) tid: u32) {
    let wg = wid.x + wid.y * nwg.x;
    if (wg >= p.total_wg) { return; }
    let bo = block_of(wg, p.q_blocks);
    let qb = p.q_blocks - 1u - bo.x;              // last (longest when causal) blocks first
    let bh = bo.y;
    let h = bh % p.heads;
    let b = bh / p.heads;
    let kvh = h / p.group;
    let g = tid / TC;
    let c = tid % TC;
    let i0 = qb * BR;
    let i1 = min(i0 + BR, p.seq_q);
    let q_stride = p.heads * p.dim;
    let q_base = (b * p.seq_q * p.heads + h) * p.dim;
    let k_stride = p.kv_heads * p.dim;
    let k_base = (b * p.seq_k * p.kv_heads + kvh) * p.dim;
    let dropout = has_dropout();
    let rows = vec4u(i0 + 4u * g) + vec4u(0u, 1u, 2u, 3u);   // this lane's 4 query rows

    for (var r = g; r < BR; r += RG) {
        let i = i0 + r;
        for (var d4 = c; d4 < p.d4; d4 += TC) {
            var x = vec4f(0.0);
            if (i < p.seq_q) { x = ld_q(q_base + i * q_stride, d4) * p.scale_log2; }
            f_q[r * RS + d4] = x;
        }
    }
    var rk = vec4u(0u);
    if (dropout) { rk = row_keys(bh, rows); }

    let range = key_range(i0, i1);
    let kb0 = (u32(max(range.x, 0)) / BC) * BC;
    let v_off = select(BC * RS, 0u, SHARED_STAGE);
    var m = vec4f(p.neg_inf);
    var l = vec4f(0.0);
    var o = array<vec4f, 16>();      // o[4 * r + j]: row 4g + r, vec4 c + TC * j of the head
    for (var kb = kb0; i32(kb) < range.y; kb += BC) {
        workgroupBarrier();
        f_stage_k(0u, kb, k_base, k_stride, g, c);
        if (MODE == 0u && !SHARED_STAGE) { f_stage_v(v_off, kb, k_base, k_stride, g, c); }
        workgroupBarrier();

        // phase 1: s[jj] = scores (log2 units) of rows 4g..4g+3 with key kb + c + TC*jj
        var s = array<vec4f, 4>();
        for (var d4 = 0u; d4 < p.d4; d4++) {
            let a0 = f_q[(4u * g) * RS + d4];
            let a1 = f_q[(4u * g + 1u) * RS + d4];
            let a2 = f_q[(4u * g + 2u) * RS + d4];
            let a3 = f_q[(4u * g + 3u) * RS + d4];
            for (var jj = 0u; jj < 4u; jj++) {
                if (jj < KPT) {
                    let kv = f_kv[(c + TC * jj) * RS + d4];
                    s[jj] += vec4f(dot(a0, kv), dot(a1, kv), dot(a2, kv), dot(a3, kv));
                }
            }
        }
        if (!block_visible(i0, i1, kb, BC) || has_mask()) {
            for (var jj = 0u; jj < 4u; jj++) {
                if (jj < KPT) { s[jj] = mask_scores(s[jj], b, h, rows, vec4u(kb + c + TC * jj)); }
            }
        }
        var pm = s[0];
        for (var jj = 1u; jj < 4u; jj++) {
            if (jj < KPT) { pm = max(pm, s[jj]); }
        }
        f_red[c * RG + g] = pm;
        workgroupBarrier();
        if (MODE == 0u && SHARED_STAGE) { f_stage_v(0u, kb, k_base, k_stride, g, c); }   // k is no longer read
        var mx = f_red[g];
        for (var cc = 1u; cc < TC; cc++) { mx = max(mx, f_red[cc * RG + g]); }
        let m_new = max(m, mx);
        let m_use = select(m_new, vec4f(0.0), m_new == vec4f(p.neg_inf));   // no finite score yet
        let alpha = exp2(m - m_use);
        m = m_new;
        var lsum = vec4f(0.0);
        for (var jj = 0u; jj < 4u; jj++) {
            if (jj < KPT) {
                s[jj] = exp2(s[jj] - m_use);
                lsum += s[jj];
            }
        }
        l = l * alpha + lsum;

        if (MODE == 0u) {
            for (var j = 0u; j < 4u; j++) {
                if (j < OCV) {
                    o[j] *= alpha.x;
                    o[4u + j] *= alpha.y;
                    o[8u + j] *= alpha.z;
                    o[12u + j] *= alpha.w;
                }
            }
            for (var jj = 0u; jj < 4u; jj++) {
                if (jj < KPT) {
                    var pd = s[jj];
                    if (dropout) { pd *= keep4(rk, vec4u(key_hash(kb + c + TC * jj))); }
                    f_p[(c + TC * jj) * RG + g] = pd;
                }
            }
            workgroupBarrier();
            // phase 2: o += P v over the block's keys
            for (var kk = 0u; kk < BC; kk++) {
                let pv = f_p[kk * RG + g];
                for (var j = 0u; j < 4u; j++) {
                    if (j < OCV) {
                        let vv = f_kv[v_off + kk * RS + c + TC * j];
                        o[j] += pv.x * vv;
                        o[4u + j] += pv.y * vv;
                        o[8u + j] += pv.z * vv;
                        o[12u + j] += pv.w * vv;
                    }
                }
            }
        }
    }

    // row sums: reduce the per-lane partials
    workgroupBarrier();
    f_red[c * RG + g] = l;
    workgroupBarrier();
    var lt = f_red[g];
    for (var cc = 1u; cc < TC; cc++) { lt += f_red[cc * RG + g]; }

    if (MODE == 0u) {
        // normalise into the q tile, then store it row by row
        let inv = select(vec4f(0.0), 1.0 / lt, lt > vec4f(0.0));
        for (var j = 0u; j < 4u; j++) {
            if (j < OCV) {
                f_q[(4u * g) * RS + c + TC * j] = o[j] * inv.x;
                f_q[(4u * g + 1u) * RS + c + TC * j] = o[4u + j] * inv.y;
                f_q[(4u * g + 2u) * RS + c + TC * j] = o[8u + j] * inv.z;
                f_q[(4u * g + 3u) * RS + c + TC * j] = o[12u + j] * inv.w;
            }
        }
        workgroupBarrier();
        for (var r = g; r < BR; r += RG) {
            let i = i0 + r;
            if (i < p.seq_q) {
                for (var d4 = c; d4 < p.d4; d4 += TC) { st_dst(q_base + i * q_stride, d4, f_q[r * RS + d4]); }
            }
        }
    } else {
        // lse (log2 units; +inf for an empty row) and D = rowsum(dout * out)
        let lse = select(vec4f(p.pos_inf), m + log2(lt), lt > vec4f(0.0));
        var dpart = vec4f(0.0);
        for (var r = 0u; r < 4u; r++) {
            let i = i0 + 4u * g + r;
            if (i < p.seq_q) {
                let row = q_base + i * q_stride;
                var acc = 0.0;
                for (var d4 = c; d4 < p.d4; d4 += TC) { acc += dot(ld_do(row, d4), ld_v(row, d4)); }
                dpart[r] = acc;
            }
        }
        workgroupBarrier();
        f_red[c * RG + g] = dpart;
        workgroupBarrier();
        if (c == 0u) {
            var dsum = f_red[g];
            for (var cc = 1u; cc < TC; cc++) { dsum += f_red[cc * RG + g]; }
            let n = p.batch * p.heads * p.seq_q;
            for (var r = 0u; r < 4u; r++) {
                let i = i0 + 4u * g + r;
                if (i < p.seq_q) {
                    dst[bh * p.seq_q + i] = lse[r];
                    dst[n + bh * p.seq_q + i] = dsum[r];
                }
            }
        }
    }
}

// ---- backward: dq ------------------------------------------------------------------------

override Q_AN: u32 = 2u * BR * RS;
override Q_BN: u32 = select(2u, 1u, SHARED_STAGE) * BC * RS;
override Q_WN: u32 = BC * RG;
var<workgroup> dq_a: array<vec4f, Q_AN>;   // q (pre-scaled) [BR][RS], dout [BR][RS]; at the end dq
var<workgroup> dq_b: array<vec4f, Q_BN>;   // k [BC][RS] and v (beside it, or in its place)
var<workgroup> dq_w: array<vec4f, Q_WN>;   // dS transposed [BC][RG]

fn dq_stage_k(off: u32, kb: u32, base: u32, stride: u32, g: u32, c: u32) {
    for (var r = g; r < BC; r += RG) {
        let j = kb + r;
        for (var d4 = c; d4 < p.d4; d4 += TC) {
            var x = vec4f(0.0);
            if (j < p.seq_k) { x = ld_k(base + j * stride, d4); }
            dq_b[off + r * RS + d4] = x;
        }
    }
}
fn dq_stage_v(off: u32, kb: u32, base: u32, stride: u32, g: u32, c: u32) {
    for (var r = g; r < BC; r += RG) {
        let j = kb + r;
        for (var d4 = c; d4 < p.d4; d4 += TC) {
            var x = vec4f(0.0);
            if (j < p.seq_k) { x = ld_v(base + j * stride, d4); }
            dq_b[off + r * RS + d4] = x;
        }
    }
}
// 4 x KPT tile of (rows at a_off) . (columns at b_off)^T
fn dq_phase1(a_off: u32, b_off: u32, g: u32, c: u32) -> array<vec4f, 4> {
    var s = array<vec4f, 4>();
    for (var d4 = 0u; d4 < p.d4; d4++) {
        let a0 = dq_a[a_off + (4u * g) * RS + d4];
        let a1 = dq_a[a_off + (4u * g + 1u) * RS + d4];
        let a2 = dq_a[a_off + (4u * g + 2u) * RS + d4];
        let a3 = dq_a[a_off + (4u * g + 3u) * RS + d4];
        for (var jj = 0u; jj < 4u; jj++) {
            if (jj < KPT) {
                let x = dq_b[b_off + (c + TC * jj) * RS + d4];
                s[jj] += vec4f(dot(a0, x), dot(a1, x), dot(a2, x), dot(a3, x));
            }
        }
    }
    return s;
}

@compute @workgroup_size(WG)
fn bwd_dq(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
          @builtin(local_invocation_index) tid: u32) {
    let wg = wid.x + wid.y * nwg.x;
    if (wg >= p.total_wg) { return; }
    let bo = block_of(wg, p.q_blocks);
    let qb = p.q_blocks - 1u - bo.x;              // last (longest when causal) blocks first
    let bh = bo.y;
    let h = bh % p.heads;
    let b = bh / p.heads;
    let kvh = h / p.group;
    let g = tid / TC;
    let c = tid % TC;
    let i0 = qb * BR;
    let i1 = min(i0 + BR, p.seq_q);
    let q_stride = p.heads * p.dim;
    let q_base = (b * p.seq_q * p.heads + h) * p.dim;
    let k_stride = p.kv_heads * p.dim;
    let k_base = (b * p.seq_k * p.kv_heads + kvh) * p.dim;
    let dropout = has_dropout();
    let n = p.batch * p.heads * p.seq_q;
    let rows = vec4u(i0 + 4u * g) + vec4u(0u, 1u, 2u, 3u);

    for (var r = g; r < BR; r += RG) {
        let i = i0 + r;
        for (var d4 = c; d4 < p.d4; d4 += TC) {
            var x = vec4f(0.0);
            var y = vec4f(0.0);
            if (i < p.seq_q) {
                x = ld_q(q_base + i * q_stride, d4) * p.scale_log2;
                y = ld_do(q_base + i * q_stride, d4);
            }
            dq_a[r * RS + d4] = x;
            dq_a[BR * RS + r * RS + d4] = y;
        }
    }
    var lse = vec4f(p.pos_inf);
    var di = vec4f(0.0);
    for (var r = 0u; r < 4u; r++) {
        let i = i0 + 4u * g + r;
        if (i < p.seq_q) {
            lse[r] = stats[bh * p.seq_q + i];
            di[r] = stats[n + bh * p.seq_q + i];
        }
    }
    var rk = vec4u(0u);
    if (dropout) { rk = row_keys(bh, rows); }

    let range = key_range(i0, i1);
    let kb0 = (u32(max(range.x, 0)) / BC) * BC;
    var acc = array<vec4f, 16>();
    for (var kb = kb0; i32(kb) < range.y; kb += BC) {
        workgroupBarrier();
        var s = array<vec4f, 4>();
        var dp = array<vec4f, 4>();
        if (SHARED_STAGE) {
            dq_stage_v(0u, kb, k_base, k_stride, g, c);
            workgroupBarrier();
            dp = dq_phase1(BR * RS, 0u, g, c);
            workgroupBarrier();
            dq_stage_k(0u, kb, k_base, k_stride, g, c);
            workgroupBarrier();
            s = dq_phase1(0u, 0u, g, c);
        } else {
            dq_stage_k(0u, kb, k_base, k_stride, g, c);
            dq_stage_v(BC * RS, kb, k_base, k_stride, g, c);
            workgroupBarrier();
            s = dq_phase1(0u, 0u, g, c);
            dp = dq_phase1(BR * RS, BC * RS, g, c);
        }
        let check = !block_visible(i0, i1, kb, BC) || has_mask();
        for (var jj = 0u; jj < 4u; jj++) {
            if (jj < KPT) {
                let j = kb + c + TC * jj;
                var sj = s[jj];
                if (check) { sj = mask_scores(sj, b, h, rows, vec4u(j)); }
                let pj = exp2(sj - lse);
                var dpj = dp[jj];
                if (dropout) { dpj *= keep4(rk, vec4u(key_hash(j))); }
                dq_w[(c + TC * jj) * RG + g] = pj * (dpj - di);
            }
        }
        workgroupBarrier();
        // phase 2: acc += dS k over the block's keys (k is at dq_b[0..])
        for (var kk = 0u; kk < BC; kk++) {
            let w = dq_w[kk * RG + g];
            for (var j = 0u; j < 4u; j++) {
                if (j < OCV) {
                    let kv = dq_b[kk * RS + c + TC * j];
                    acc[j] += w.x * kv;
                    acc[4u + j] += w.y * kv;
                    acc[8u + j] += w.z * kv;
                    acc[12u + j] += w.w * kv;
                }
            }
        }
    }

    workgroupBarrier();
    for (var j = 0u; j < 4u; j++) {
        if (j < OCV) {
            dq_a[(4u * g) * RS + c + TC * j] = acc[j] * p.scale;
            dq_a[(4u * g + 1u) * RS + c + TC * j] = acc[4u + j] * p.scale;
            dq_a[(4u * g + 2u) * RS + c + TC * j] = acc[8u + j] * p.scale;
            dq_a[(4u * g + 3u) * RS + c + TC * j] = acc[12u + j] * p.scale;
        }
    }
    workgroupBarrier();
    for (var r = g; r < BR; r += RG) {
        let i = i0 + r;
        if (i < p.seq_q) {
            for (var d4 = c; d4 < p.d4; d4 += TC) { st_dst(q_base + i * q_stride, d4, dq_a[r * RS + d4]); }
        }
    }
}

// ---- backward: dk, dv --------------------------------------------------------------------

override K_AN: u32 = 2u * BR * RS;
override K_BN: u32 = select(2u, 1u, SHARED_STAGE) * BC * RS;
override K_WN: u32 = 2u * BC * RG;
override K_LN: u32 = 2u * BC;
var<workgroup> kv_a: array<vec4f, K_AN>;   // k (pre-scaled) [BR][RS], v [BR][RS]; at the end dk, dv
var<workgroup> kv_b: array<vec4f, K_BN>;   // q [BC][RS] and dout (beside it, or in its place)
var<workgroup> kv_w: array<vec4f, K_WN>;   // Pdrop^T then dS^T: [BC][RG] vec4 of 4 keys
var<workgroup> kv_l: array<f32, K_LN>;     // lse, D of the block's queries

fn kv_stage_q(off: u32, qb: u32, base: u32, stride: u32, g: u32, c: u32) {
    for (var r = g; r < BC; r += RG) {
        let i = qb + r;
        for (var d4 = c; d4 < p.d4; d4 += TC) {
            var x = vec4f(0.0);
            if (i < p.seq_q) { x = ld_q(base + i * stride, d4); }
            kv_b[off + r * RS + d4] = x;
        }
    }
}
fn kv_stage_do(off: u32, qb: u32, base: u32, stride: u32, g: u32, c: u32) {
    for (var r = g; r < BC; r += RG) {
        let i = qb + r;
        for (var d4 = c; d4 < p.d4; d4 += TC) {
            var x = vec4f(0.0);
            if (i < p.seq_q) { x = ld_do(base + i * stride, d4); }
            kv_b[off + r * RS + d4] = x;
        }
    }
}
fn kv_phase1(a_off: u32, b_off: u32, g: u32, c: u32) -> array<vec4f, 4> {
    var s = array<vec4f, 4>();
    for (var d4 = 0u; d4 < p.d4; d4++) {
        let a0 = kv_a[a_off + (4u * g) * RS + d4];
        let a1 = kv_a[a_off + (4u * g + 1u) * RS + d4];
        let a2 = kv_a[a_off + (4u * g + 2u) * RS + d4];
        let a3 = kv_a[a_off + (4u * g + 3u) * RS + d4];
        for (var jj = 0u; jj < 4u; jj++) {
            if (jj < KPT) {
                let x = kv_b[b_off + (c + TC * jj) * RS + d4];
                s[jj] += vec4f(dot(a0, x), dot(a1, x), dot(a2, x), dot(a3, x));
            }
        }
    }
    return s;
}
// acc[4r + j] += sum over the block's columns of w[col][row 4g + r] * x[col][vec4 c + TC*j]
fn kv_phase2(acc: ptr<function, array<vec4f, 16>>, w_off: u32, x_off: u32, g: u32, c: u32) {
    for (var ci = 0u; ci < BC; ci++) {
        let w = kv_w[w_off + ci * RG + g];
        for (var j = 0u; j < 4u; j++) {
            if (j < OCV) {
                let x = kv_b[x_off + ci * RS + c + TC * j];
                (*acc)[j] += w.x * x;
                (*acc)[4u + j] += w.y * x;
                (*acc)[8u + j] += w.z * x;
                (*acc)[12u + j] += w.w * x;
            }
        }
    }
}

@compute @workgroup_size(WG)
fn bwd_dkdv(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
            @builtin(local_invocation_index) tid: u32) {
    let wg = wid.x + wid.y * nwg.x;
    if (wg >= p.total_wg) { return; }
    let bo = block_of(wg, p.k_blocks);
    let kbi = bo.x;
    let bk = bo.y;
    let kvh = bk % p.kv_heads;
    let b = bk / p.kv_heads;
    let g = tid / TC;
    let c = tid % TC;
    let j0 = kbi * BR;
    let j1 = min(j0 + BR, p.seq_k);
    let q_stride = p.heads * p.dim;
    let k_stride = p.kv_heads * p.dim;
    let k_base = (b * p.seq_k * p.kv_heads + kvh) * p.dim;
    let dropout = has_dropout();
    let n = p.batch * p.heads * p.seq_q;
    let keys = vec4u(j0 + 4u * g) + vec4u(0u, 1u, 2u, 3u);   // this lane's 4 keys

    for (var r = g; r < BR; r += RG) {
        let j = j0 + r;
        for (var d4 = c; d4 < p.d4; d4 += TC) {
            var x = vec4f(0.0);
            var y = vec4f(0.0);
            if (j < p.seq_k) {
                x = ld_k(k_base + j * k_stride, d4) * p.scale_log2;
                y = ld_v(k_base + j * k_stride, d4);
            }
            kv_a[r * RS + d4] = x;
            kv_a[BR * RS + r * RS + d4] = y;
        }
    }
    var kh = vec4u(0u);
    if (dropout) { kh = key_hashes(keys); }

    let range = query_range(j0, j1);
    let qb0 = (u32(max(range.x, 0)) / BC) * BC;
    let full_keys = j0 + BR <= p.seq_k;
    var dk = array<vec4f, 16>();
    var dv = array<vec4f, 16>();
    for (var hh = 0u; hh < p.group; hh++) {
        let h = kvh * p.group + hh;
        let bh = b * p.heads + h;
        let q_base = (b * p.seq_q * p.heads + h) * p.dim;
        for (var qb = qb0; i32(qb) < range.y; qb += BC) {
            workgroupBarrier();
            for (var idx = tid; idx < BC; idx += WG) {
                let i = qb + idx;
                var lse = p.pos_inf;
                var di = 0.0;
                if (i < p.seq_q) {
                    lse = stats[bh * p.seq_q + i];
                    di = stats[n + bh * p.seq_q + i];
                }
                kv_l[idx] = lse;
                kv_l[BC + idx] = di;
            }
            kv_stage_q(0u, qb, q_base, q_stride, g, c);
            if (!SHARED_STAGE) { kv_stage_do(BC * RS, qb, q_base, q_stride, g, c); }
            workgroupBarrier();

            // s[jj]: scores of keys 4g..4g+3 with query qb + c + TC*jj (log2 units)
            let s = kv_phase1(0u, 0u, g, c);
            var dp = array<vec4f, 4>();
            if (!SHARED_STAGE) { dp = kv_phase1(BR * RS, BC * RS, g, c); }
            let i_last = min(qb + BC, p.seq_q);
            let check = !(full_keys && block_visible(qb, i_last, j0, BR)) || has_mask();
            var pr = array<vec4f, 4>();    // P (not dropped)
            for (var jj = 0u; jj < 4u; jj++) {
                if (jj < KPT) {
                    let ci = c + TC * jj;
                    let i = qb + ci;
                    var sj = s[jj];
                    if (check || i >= p.seq_q) { sj = mask_scores(sj, b, h, vec4u(i), keys); }
                    let pj = exp2(sj - vec4f(kv_l[ci]));
                    pr[jj] = pj;
                    var pd = pj;
                    if (dropout) { pd *= keep4(vec4u(row_key(bh, i)), kh); }
                    kv_w[ci * RG + g] = pd;
                }
            }
            if (SHARED_STAGE) {
                workgroupBarrier();
                kv_stage_do(0u, qb, q_base, q_stride, g, c);
                workgroupBarrier();
                dp = kv_phase1(BR * RS, 0u, g, c);
            }
            for (var jj = 0u; jj < 4u; jj++) {
                if (jj < KPT) {
                    let ci = c + TC * jj;
                    var dpj = dp[jj];
                    if (dropout) { dpj *= keep4(vec4u(row_key(bh, qb + ci)), kh); }
                    kv_w[BC * RG + ci * RG + g] = pr[jj] * (dpj - vec4f(kv_l[BC + ci]));
                }
            }
            if (SHARED_STAGE) {
                // dv += Pdrop^T dout now (dout is staged; Pdrop was written before two barriers),
                // then q again for dk += dS^T q
                kv_phase2(&dv, 0u, 0u, g, c);
                workgroupBarrier();
                kv_stage_q(0u, qb, q_base, q_stride, g, c);
                workgroupBarrier();
                kv_phase2(&dk, BC * RG, 0u, g, c);
            } else {
                workgroupBarrier();
                kv_phase2(&dv, 0u, BC * RS, g, c);
                kv_phase2(&dk, BC * RG, 0u, g, c);
            }
        }
    }

    workgroupBarrier();
    for (var j = 0u; j < 4u; j++) {
        if (j < OCV) {
            for (var r = 0u; r < 4u; r++) {
                kv_a[(4u * g + r) * RS + c + TC * j] = dk[4u * r + j] * p.scale;
                kv_a[BR * RS + (4u * g + r) * RS + c + TC * j] = dv[4u * r + j];
            }
        }
    }
    workgroupBarrier();
    for (var r = g; r < BR; r += RG) {
        let j = j0 + r;
        if (j < p.seq_k) {
            for (var d4 = c; d4 < p.d4; d4 += TC) {
                st_dst(k_base + j * k_stride, d4, kv_a[r * RS + d4]);
                st_dst2(k_base + j * k_stride, d4, kv_a[BR * RS + r * RS + d4]);
            }
        }
    }
}

// ---- backward on 64 x 64 blocks, GEMM-style: bwd_dq64, bwd_dkdv64 -----------------------
//
// Why: the tiles of bwd_dq / bwd_dkdv keep whole [rows][head_dim] tiles in workgroup
// memory, which at head_dim 128 allows only 16 x 32 blocks, 32-64 threads and ~48 KiB per
// workgroup: one tiny workgroup per SM, so occupancy, not arithmetic, bounds them. These
// entries never hold a full head_dim row in workgroup memory.
//
// Shape: 256 threads, 64 "rows" x 64 "columns" per block (bwd_dq64: rows = queries, columns
// = keys; bwd_dkdv64: rows = keys, columns = queries), thread (tr, tc) = (tid / 16, tid % 16).
//  * Score-like products (contraction over head_dim): S = rows . cols^T and dP = (dout or v)
//    . (v or dout)^T are computed together by streaming head_dim in chunks of GBK elements:
//    all four operands are staged TRANSPOSED, g_st[op][kk][r / 4] = vec4 of rows r..r+3, so
//    per kk a thread reads its 4 rows and its 4 columns (4tc..4tc+3) as one vec4 each: 4
//    vec4 loads for 32 FMAs (the row vec4 is a broadcast within 16 lanes, the column vec4
//    are 16 consecutive vec4: conflict-free). s[c] / dp[c] = vec4 over the thread's 4 rows
//    for column 4tc + c. Staging: each task loads rows 4a..4a+3 at one vec4 of head_dim
//    (coalesced 32/64-byte runs) and transposes them in registers into 4 vec4 stores.
//  * P (dropped) and dS go to a 64 x 64 tile g_w[col][row group], a vec4 of the 4 rows a
//    thread needs; the row-group slot is XOR-swizzled with a function of col / 4 (g_swz)
//    so that the 8 lanes of each 16-byte store phase hit 8 different bank groups.
//  * Products contracted over the block (dq += dS k; dv += Pdrop^T dout; dk += dS^T q)
//    stream the other operand in chunks of G_KR rows x head_dim (row layout, vec4 index
//    tc and tc + 16 per thread: lanes read consecutive vec4): per column 1 broadcast vec4
//    of g_w + GOCV vec4 for 16 * GOCV FMAs. Each thread owns 4 rows x GOCV vec4 of
//    head_dim: 32 accumulators per output at head_dim > 64.
//  * bwd_dq64: one workgroup per (batch, head, 64-query block), visible key blocks only,
//    longest causal blocks first. bwd_dkdv64: one workgroup per (batch, kv head, 64-key
//    block) looping over the group's query heads and visible query blocks in a fixed order
//    (deterministic, no atomics); dk and dv accumulate in registers (64 floats per thread);
//    g_w holds Pdrop^T for dv, then dS^T for dk (one 16 KiB tile).
//  * WRITE_DS (bwd_dkdv64): dS of every visited (query block, key block) pair also goes to
//    ds_out, and bwd_dq_ds64 computes dq from it with one block product (dS k) per block
//    instead of bwd_dq64's three (S, dP, dS k). Layout: block (bh, qb, kb) at vec4
//    ((bh * q_blocks + qb) * k_blocks + kb) * 1024, then 4x4 sub-blocks (key group kg,
//    query group qg) at (kg * 16 + qg) * 4, vec4 c = dS[query 4qg + c][keys 4kg .. 4kg+3]:
//    a bwd_dkdv64 thread's 16 values, so consecutive lanes store consecutive 64 bytes;
//    bwd_dq_ds64 reads sub-block tid and transposes it into g_w. Costs 16 KiB of memory per
//    block pair, written once and read once. The host may run both over a range of
//    (batch, kv head) pairs at a time (from bk0, and their query heads), so that the
//    blocks of one range fit its scratch; the blocks are counted from the range's first.
//  * DS_DENSE (with WRITE_DS): dS goes out transposed and dense instead, for bwd_dq_mm:
//    per query head of the range, a [64 k_blocks keys][64 q_blocks queries] matrix at vec4
//    head * k_blocks * q_blocks * 1024 (the same bytes), key j's row at vec4 j * 16 *
//    q_blocks; blocks bwd_dkdv64 does not visit stay unwritten.
//  * Workgroup memory: g_w 16 KiB + g_st 64*GBK vec4 (8 KiB at GBK 8, 16 KiB at 16). The
//    same g_st region holds the chunks of the block products (G_KR x 16*GOCV vec4).
//  Everything else (scale in log2 units, P = exp2(s - lse) from the MODE-1 statistics, the
//  dropout hash, dS = P (Z dP - D), masks, windows, causal offset, empty rows -> 0) is
//  exactly as in bwd_dq / bwd_dkdv; q (dq) or k (dkdv) is pre-scaled while staged.
// Expected speed (H200, f32, head_dim 128): 4x4 register tiles keep the FMA pipes ahead of
// workgroup loads (6 wavefronts per 32 FMA-instructions per warp in the S/dP loop, 5 in the
// block products); with ~100-128 registers per thread two workgroups (16 warps) fit per SM.
// Backward of B4 H32 S4096 D128 causal is ~1.9 TFLOP (3.5x the forward's matmuls); at
// 15-20 TFLOP/s that is ~100-130 ms against several hundred ms for the old tiles.
// Measured (bench/notes/registers.md): 115 / 121 registers at head_dim 64 (GBK 8, two
// workgroups per SM), 136 / 159 at head_dim 128 (GBK 32, 48 KiB: one); the backward of
// that shape takes ~120 ms (bench/results/h200.md).

override GBK: u32 = 8u;                 // head_dim elements per staged chunk (8, 16 or 32)
override GOCV: u32 = 2u;                // vec4 of head_dim per thread in the block products (1 or 2)
override G_SUB: u32 = 0u;               // > 0: staged chunks consumed G_SUB steps at a time (g_scores)
override G_DP4: u32 = 16u * GOCV;       // row length in vec4 of a streamed chunk (>= d4)
override G_KR: u32 = min(64u, 4u * GBK / GOCV);   // rows per streamed chunk: G_KR * G_DP4 <= G_STN
override G_STN: u32 = 64u * GBK;        // 4 operands x GBK x 16 vec4
override WRITE_DS: bool = false;        // bwd_dkdv64: also store dS for bwd_dq_ds64 (or bwd_dq_mm, DS_DENSE)
override READ_S: bool = false;          // bwd_dkdv64: S from the forward's scores (s_in), dP alone computed
override DS_DENSE: bool = false;        // bwd_dkdv64 with WRITE_DS: dS^T dense, for bwd_dq_mm
var<workgroup> g_st: array<vec4f, G_STN>;
var<workgroup> g_w: array<vec4f, 1024>; // [64 columns][16 row groups, swizzled]

// Thread (tr, tc) of the 64 x 64 entries: tid / 16 and tid % 16, or with PAIR the bits
// shared so that lanes n and n^1 have the same tr (their row-operand reads, indexed by tr,
// hit one address) and lanes n and n^2 the same tc (column operand): tc from tid bits 0,
// 2, 3, 4 and tr from bits 1, 5, 6, 7. A 16-byte workgroup read returns 128 bytes per
// cycle, 4 cycles per warp, but 2 where such lane pairs share its addresses (NVIDIA);
// without PAIR only the reads indexed by tr qualify. Measured on the H200 (round 13 of
// bench/notes/attention.md): 2 - 3% faster forward and backward, so the default; the
// host passes PAIR = false for WGML_ATTN_PAIR=0.
override PAIR: bool = true;
fn g_tr(tid: u32) -> u32 {
    if (PAIR) { return ((tid >> 1u) & 1u) | ((tid >> 4u) & 14u); }
    return tid / 16u;
}
fn g_tc(tid: u32) -> u32 {
    if (PAIR) { return (tid & 1u) | ((tid >> 1u) & 14u); }
    return tid % 16u;
}
// The swizzle of g_w: column group cg's vec4 of row group r sits in slot r ^ g_swz(cg), so
// that the 8 lanes of a 16-byte store phase (4 column groups x 2 row groups with PAIR, 8
// column groups of one row group without) hit 8 different 16-byte bank groups.
fn g_swz(cg: u32) -> u32 { return select(cg, (2u * cg) & 15u, PAIR); }

// Per-thread values live in structs with named members, never in arrays indexed in loops:
// a driver that does not unroll such a loop keeps the array in local memory (the forward's
// first version ran 6x slower that way on the H200).
struct G4 { c0: vec4f, c1: vec4f, c2: vec4f, c3: vec4f }   // column 4tc + i: vec4 over the 4 rows
struct G8 { r0: vec4f, r1: vec4f, r2: vec4f, r3: vec4f,    // row 4tr + i, vec4 column tc
            r4: vec4f, r5: vec4f, r6: vec4f, r7: vec4f }   // row 4tr + i - 4, vec4 column tc + 16

fn ld_any(which: u32, base: u32, d4: u32) -> vec4f {
    switch which {
        case 0u: { return ld_q(base, d4); }
        case 1u: { return ld_k(base, d4); }
        case 2u: { return ld_v(base, d4); }
        default: { return ld_do(base, d4); }
    }
}
// rows of operand `which`: q and dout have seq_q, k and v seq_k
fn rows_of(which: u32) -> u32 { return select(p.seq_k, p.seq_q, which == 0u || which == 3u); }

// Row r of operand op = (which, base, stride, first row) at head_dim vec4 d4, times m; 0 past the end.
fn g_ld(op: vec4u, r: u32, d4: u32, m: f32) -> vec4f {
    if (r >= rows_of(op.x)) { return vec4f(0.0); }
    return ld_any(op.x, op.y + r * op.z, d4) * m;
}

// Stages head_dim vec4 [c4, c4 + GBK/4) of the 64 rows of the four operands transposed:
// g_st[(o * GBK + kk) * 16 + r / 4][r % 4] = mul[o] * op_o[row r][4 * c4 + kk].
// op<o> = (which, base, stride, first row); rows past the end are 0.
fn g_stage(op0: vec4u, op1: vec4u, op2: vec4u, op3: vec4u, mul: vec4f, c4: u32, tid: u32) {
    let nv = GBK / 4u;
    for (var t = tid; t < 16u * GBK; t += 256u) {
        let o = t / (4u * GBK);
        let rem = t % (4u * GBK);
        let a = rem / nv;
        let v = rem % nv;
        let op = select(select(op0, op1, o == 1u), select(op2, op3, o == 3u), o >= 2u);
        g_put4(op, op.w + 4u * a, c4 + v, mul[o], (o * GBK + 4u * v) * 16u + a);
    }
}

// Rows r .. r + 3 of operand op at head_dim vec4 d4, times m, transposed into g_st[d],
// g_st[d + 16], g_st[d + 32], g_st[d + 48] (one vec4 per dim: the 4 rows).
fn g_put4(op: vec4u, r: u32, d4: u32, m: f32, d: u32) {
    let x0 = g_ld(op, r, d4, m);
    let x1 = g_ld(op, r + 1u, d4, m);
    let x2 = g_ld(op, r + 2u, d4, m);
    let x3 = g_ld(op, r + 3u, d4, m);
    g_st[d] = vec4f(x0.x, x1.x, x2.x, x3.x);
    g_st[d + 16u] = vec4f(x0.y, x1.y, x2.y, x3.y);
    g_st[d + 32u] = vec4f(x0.z, x1.z, x2.z, x3.z);
    g_st[d + 48u] = vec4f(x0.w, x1.w, x2.w, x3.w);
}

// s.c<i> = op0 . op2^T and dp.c<i> = op1 . op3^T over all of head_dim (vec4 over the
// thread's 4 rows, column 4tc + i).
fn g_scores(op0: vec4u, op1: vec4u, op2: vec4u, op3: vec4u, mul: vec4f, tid: u32, tr: u32, tc: u32,
            s: ptr<function, G4>, dp: ptr<function, G4>) {
    for (var c4 = 0u; c4 < p.d4; c4 += GBK / 4u) {
        workgroupBarrier();
        g_stage(op0, op1, op2, op3, mul, c4, tid);
        workgroupBarrier();
        // all GBK elements, the zero padding of a last partial chunk included: a constant
        // trip count lets the driver unroll and schedule the loop (round 9 of
        // bench/notes/attention.md: the backward 6% faster than with the run-time length)
        // G_SUB > 0: G_SUB steps (a constant trip count, unrolled) inside a loop of p.subs =
        // GBK / G_SUB trips that the driver cannot count, so that it does not unroll the
        // whole chunk (round 10 of bench/notes/attention.md: -4% at head_dim 128, GBK 32)
        let nsub = select(1u, p.subs, G_SUB > 0u);
        let sub = select(GBK, G_SUB, G_SUB > 0u);
        for (var sb = 0u; sb < nsub; sb++) {
        for (var k1 = 0u; k1 < sub; k1++) {
            let kk = sb * sub + k1;
            let a0 = g_st[kk * 16u + tr];
            let a1 = g_st[(GBK + kk) * 16u + tr];
            let b0 = g_st[(2u * GBK + kk) * 16u + tc];
            let b1 = g_st[(3u * GBK + kk) * 16u + tc];
            (*s).c0 += a0 * b0.x;
            (*s).c1 += a0 * b0.y;
            (*s).c2 += a0 * b0.z;
            (*s).c3 += a0 * b0.w;
            (*dp).c0 += a1 * b1.x;
            (*dp).c1 += a1 * b1.y;
            (*dp).c2 += a1 * b1.z;
            (*dp).c3 += a1 * b1.w;
        }
        }
    }
}

// READ_S: head_dim vec4 [c4, c4 + GBK/2) of the rows of two operands transposed, as
// g_stage does for four in half the width: g_st[(o * 2GBK + kk) * 16 + r / 4][r % 4] =
// op_o[row r][4 c4 + kk].
fn g_stage2(op0: vec4u, op1: vec4u, c4: u32, tid: u32) {
    let bk = 2u * GBK;
    let nv = bk / 4u;
    for (var t = tid; t < 8u * bk; t += 256u) {
        let o = t / (4u * bk);
        let rem = t % (4u * bk);
        let a = rem / nv;
        let v = rem % nv;
        let op = select(op0, op1, o == 1u);
        g_put4(op, op.w + 4u * a, c4 + v, 1.0, (o * bk + 4u * v) * 16u + a);
    }
}

// READ_S: dp.c<i> = op1 . op3^T alone over all of head_dim, in chunks of 2 GBK (the same
// workgroup memory as g_scores' four operands in chunks of GBK: half the barriers).
fn g_dp_only(op1: vec4u, op3: vec4u, tid: u32, tr: u32, tc: u32, dp: ptr<function, G4>) {
    for (var c4 = 0u; c4 < p.d4; c4 += GBK / 2u) {
        workgroupBarrier();
        g_stage2(op1, op3, c4, tid);
        workgroupBarrier();
        for (var kk = 0u; kk < 2u * GBK; kk++) {   // constant trip count, as in g_scores
            let a1 = g_st[kk * 16u + tr];
            let b1 = g_st[(2u * GBK + kk) * 16u + tc];
            (*dp).c0 += a1 * b1.x;
            (*dp).c1 += a1 * b1.y;
            (*dp).c2 += a1 * b1.z;
            (*dp).c3 += a1 * b1.w;
        }
    }
}

// acc.r<4v + r> += sum over the 64 columns j of g_w[j][row 4tr + r] * X[row0 + j][vec4 tc + 16v]
// with X = operand `which` (rows past its end count as 0). Starts with a barrier, so the
// caller may write g_w right before; the caller must barrier before g_w or g_st change.
fn g_rowprod(acc: ptr<function, G8>, which: u32, base: u32, stride: u32, row0: u32, tid: u32, tr: u32, tc: u32) {
    let lim = rows_of(which);
    let n = min(64u, lim - row0);               // rows of the block inside the operand (>= 1)
    for (var kc = 0u; kc < n; kc += G_KR) {     // run-time bound: lavapipe must not unroll barriers
        workgroupBarrier();
        for (var t = tid; t < G_KR * G_DP4; t += 256u) {
            let r = row0 + kc + t / G_DP4;
            var x = vec4f(0.0);
            if (r < lim) { x = ld_any(which, base + r * stride, t % G_DP4); }   // 0 past d4
            g_st[t] = x;
        }
        workgroupBarrier();
        let nsub = select(1u, p.subs_rows, G_SUB > 0u);   // as in g_scores
        let sub = select(G_KR, G_SUB, G_SUB > 0u);
        for (var sb = 0u; sb < nsub; sb++) {
        for (var j1 = 0u; j1 < sub; j1++) {
            let jj = sb * sub + j1;
            let j = kc + jj;
            let w = g_w[j * 16u + (tr ^ g_swz(j >> 2u))];
            let x0 = g_st[jj * G_DP4 + tc];
            (*acc).r0 += w.x * x0;
            (*acc).r1 += w.y * x0;
            (*acc).r2 += w.z * x0;
            (*acc).r3 += w.w * x0;
            if (GOCV > 1u) {
                let x1 = g_st[jj * G_DP4 + tc + 16u];
                (*acc).r4 += w.x * x1;
                (*acc).r5 += w.y * x1;
                (*acc).r6 += w.z * x1;
                (*acc).r7 += w.w * x1;
            }
        }
        }
    }
}

// Row `row` (< limit) of the output at vec4 columns tc and tc + 16 (GOCV 2), times m:
// into dst (g_store) or dst2 (g_store2; only entries that bind dst2 may call it).
fn g_store(row: u32, limit: u32, base: u32, stride: u32, tc: u32, x0: vec4f, x1: vec4f, m: f32) {
    if (row >= limit) { return; }
    let at = base + row * stride;
    if (tc < p.d4) { st_dst(at, tc, x0 * m); }
    if (GOCV > 1u && tc + 16u < p.d4) { st_dst(at, tc + 16u, x1 * m); }
}
fn g_store2(row: u32, limit: u32, base: u32, stride: u32, tc: u32, x0: vec4f, x1: vec4f) {
    if (row >= limit) { return; }
    let at = base + row * stride;
    if (tc < p.d4) { st_dst2(at, tc, x0); }
    if (GOCV > 1u && tc + 16u < p.d4) { st_dst2(at, tc + 16u, x1); }
}

// First vec4 of the dS block of (query head bh of the dispatch, counted from its first,
// query block qbi, key block kbi) (WRITE_DS).
fn ds_block(bh: u32, qbi: u32, kbi: u32) -> u32 {
    return ((bh * p.q_blocks + qbi) * p.k_blocks + kbi) * 1024u;
}

// Whether bwd_dkdv64 visits the pair (query block from qb, key block from kb): its loop
// over the query blocks of key block kb, so that bwd_dq_ds64 reads only blocks written.
fn dkdv_visits(qb: u32, kb: u32) -> bool {
    let range = query_range(kb, min(kb + 64u, p.seq_k));
    return qb >= (u32(max(range.x, 0)) / 64u) * 64u && i32(qb) < range.y;
}

// What workgroup wg of bwd_dq64 / bwd_dq_ds64 works on: query block qbi (the last, longest
// when causal, first) of query head bh (counted from bh0), rows [i0, i1), and where the
// head's q rows and its kv head's k rows start.
struct QWork { qbi: u32, bh: u32, h: u32, b: u32, i0: u32, i1: u32, q_stride: u32, q_base: u32, k_stride: u32, k_base: u32 }
fn q_work(wg: u32, bh0: u32) -> QWork {
    let bo = block_of(wg, p.q_blocks);
    let qbi = p.q_blocks - 1u - bo.x;
    let bh = bo.y + bh0;
    let h = bh % p.heads;
    let b = bh / p.heads;
    let i0 = qbi * 64u;
    return QWork(qbi, bh, h, b, i0, min(i0 + 64u, p.seq_q), p.heads * p.dim, (b * p.seq_q * p.heads + h) * p.dim,
                 p.kv_heads * p.dim, (b * p.seq_k * p.kv_heads + h / p.group) * p.dim);
}

// dS of key j against the thread's 4 query rows (bwd_dq64): P (dP dropped - D).
fn dq_ds(s: vec4f, dp: vec4f, j: u32, check: bool, dropout: bool, b: u32, h: u32, rows: vec4u, lse: vec4f, di: vec4f,
         rk: vec4u) -> vec4f {
    var sj = s;
    if (check) { sj = mask_scores(sj, b, h, rows, vec4u(j)); }
    let pj = exp2(sj - lse);
    var dpj = dp;
    if (dropout) { dpj *= keep4(rk, vec4u(key_hash(j))); }
    return pj * (dpj - di);
}

@compute @workgroup_size(256)
fn bwd_dq64(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
            @builtin(local_invocation_index) tid: u32) {
    let wg = wid.x + wid.y * nwg.x;
    if (wg >= p.total_wg) { return; }
    let qw = q_work(wg, 0u);
    let bh = qw.bh;
    let h = qw.h;
    let b = qw.b;
    let tr = g_tr(tid);
    let tc = g_tc(tid);
    let i0 = qw.i0;
    let i1 = qw.i1;
    let q_stride = qw.q_stride;
    let q_base = qw.q_base;
    let k_stride = qw.k_stride;
    let k_base = qw.k_base;
    let dropout = has_dropout();
    let n = p.batch * p.heads * p.seq_q;
    let rows = vec4u(i0 + 4u * tr) + vec4u(0u, 1u, 2u, 3u);
    let at = vec4u(bh * p.seq_q) + min(rows, vec4u(p.seq_q - 1u));
    let live = rows < vec4u(p.seq_q);
    let lse = select(vec4f(p.pos_inf), vec4f(stats[at.x], stats[at.y], stats[at.z], stats[at.w]), live);
    let di = select(vec4f(0.0), vec4f(stats[n + at.x], stats[n + at.y], stats[n + at.z], stats[n + at.w]), live);
    var rk = vec4u(0u);
    if (dropout) { rk = row_keys(bh, rows); }

    let range = key_range(i0, i1);
    let kb0 = (u32(max(range.x, 0)) / 64u) * 64u;
    let mul = vec4f(p.scale_log2, 1.0, 1.0, 1.0);
    var acc = G8();
    let sw = tr ^ g_swz(tc);
    for (var kb = kb0; i32(kb) < range.y; kb += 64u) {
        var s = G4();
        var dp = G4();
        g_scores(vec4u(0u, q_base, q_stride, i0), vec4u(3u, q_base, q_stride, i0),
                 vec4u(1u, k_base, k_stride, kb), vec4u(2u, k_base, k_stride, kb), mul, tid, tr, tc, &s, &dp);
        let check = !block_visible(i0, i1, kb, 64u) || has_mask();
        let j = kb + 4u * tc;
        g_w[(4u * tc) * 16u + sw] = dq_ds(s.c0, dp.c0, j, check, dropout, b, h, rows, lse, di, rk);
        g_w[(4u * tc + 1u) * 16u + sw] = dq_ds(s.c1, dp.c1, j + 1u, check, dropout, b, h, rows, lse, di, rk);
        g_w[(4u * tc + 2u) * 16u + sw] = dq_ds(s.c2, dp.c2, j + 2u, check, dropout, b, h, rows, lse, di, rk);
        g_w[(4u * tc + 3u) * 16u + sw] = dq_ds(s.c3, dp.c3, j + 3u, check, dropout, b, h, rows, lse, di, rk);
        g_rowprod(&acc, 1u, k_base, k_stride, kb, tid, tr, tc);
    }

    g_store(rows.x, p.seq_q, q_base, q_stride, tc, acc.r0, acc.r4, p.scale);
    g_store(rows.y, p.seq_q, q_base, q_stride, tc, acc.r1, acc.r5, p.scale);
    g_store(rows.z, p.seq_q, q_base, q_stride, tc, acc.r2, acc.r6, p.scale);
    g_store(rows.w, p.seq_q, q_base, q_stride, tc, acc.r3, acc.r7, p.scale);
}

// dq from the dS blocks of bwd_dkdv64 (WRITE_DS): bwd_dq64's workgroups and loop, with the
// block's dS read instead of computed. Key blocks that bwd_dkdv64 did not visit hold no
// visible pair (dS = 0) and are skipped.
@compute @workgroup_size(256)
fn bwd_dq_ds64(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
               @builtin(local_invocation_index) tid: u32) {
    let wg = wid.x + wid.y * nwg.x;
    if (wg >= p.total_wg) { return; }
    let qw = q_work(wg, p.bk0 * p.group);
    let bhd = qw.bh - p.bk0 * p.group;            // query head of the dispatch
    let tr = g_tr(tid);
    let tc = g_tc(tid);
    let range = key_range(qw.i0, qw.i1);
    let kb0 = (u32(max(range.x, 0)) / 64u) * 64u;
    // this thread moves sub-block tid: key group kg, query group qg, into g_w's [key][row group]
    let kg = tid / 16u;
    let qg = tid % 16u;
    let sw = qg ^ g_swz(kg);
    var acc = G8();
    for (var kb = kb0; i32(kb) < range.y; kb += 64u) {
        if (!dkdv_visits(qw.i0, kb)) { continue; }
        workgroupBarrier();   // the previous block's readers of g_w are done
        let at = ds_block(bhd, qw.qbi, kb / 64u) + tid * 4u;
        let x0 = ds_in[at];
        let x1 = ds_in[at + 1u];
        let x2 = ds_in[at + 2u];
        let x3 = ds_in[at + 3u];
        g_w[(4u * kg) * 16u + sw] = vec4f(x0.x, x1.x, x2.x, x3.x);
        g_w[(4u * kg + 1u) * 16u + sw] = vec4f(x0.y, x1.y, x2.y, x3.y);
        g_w[(4u * kg + 2u) * 16u + sw] = vec4f(x0.z, x1.z, x2.z, x3.z);
        g_w[(4u * kg + 3u) * 16u + sw] = vec4f(x0.w, x1.w, x2.w, x3.w);
        g_rowprod(&acc, 1u, qw.k_base, qw.k_stride, kb, tid, tr, tc);
    }

    let row = qw.i0 + 4u * tr;
    g_store(row, p.seq_q, qw.q_base, qw.q_stride, tc, acc.r0, acc.r4, p.scale);
    g_store(row + 1u, p.seq_q, qw.q_base, qw.q_stride, tc, acc.r1, acc.r5, p.scale);
    g_store(row + 2u, p.seq_q, qw.q_base, qw.q_stride, tc, acc.r2, acc.r6, p.scale);
    g_store(row + 3u, p.seq_q, qw.q_base, qw.q_stride, tc, acc.r3, acc.r7, p.scale);
}

// ---- bwd_dq_mm: dq = scale * dS k from the dense dS^T of bwd_dkdv64 (DS_DENSE) ---------
// For each query head of the range, dq [seq_q, head_dim] is a matrix product with a
// reduction over the keys: dS^T [keys][queries] (contiguous along the queries) against k
// [keys][head_dim] (contiguous along head_dim), the layout in which matmul_at runs fastest
// (bench/notes/matmul.md, rounds 18 - 19). So it runs as that kernel does, not in 64 x 64
// blocks: a workgroup owns 128 queries x DQN head_dim columns, a thread 8 x 8 of them (rows
// 4ty.. and 64 + 4ty.., columns 4tx.. and DQN/2 + 4tx..; 2 + 2 vec4 reads from workgroup
// memory per 64 FMAs, where bwd_dq_ds64's 4 x 4 reads 2 per 16), the keys in steps of 8,
// two buffers and the next step prefetched into registers: one barrier per step.
// Workgroups go longest first (block_of over all heads of the range: the host passes
// order_heads = all). The keys of a tile are key_range of its rows; a step whose 8 keys are
// not all visible to all of its rows (the causal diagonal, a window, the end of the keys or
// of the queries) loads dS^T through visible4, so the blocks bwd_dkdv64 did not visit (left
// unwritten) read as 0; in the others every pair is visible, inside visited blocks.
// head_dim % 4 == 0 (the host's rule; vec4 rows of k and dq), DQN >= head_dim.
override DQN: u32 = 64u;                // bwd_dq_mm: head_dim columns per workgroup (64 or 128)
const DQ_BK: u32 = 8u;                  // keys per step (16 measured slower: round 24)
override DQ_NT: u32 = 2u * DQN;         // threads: 16 row groups x DQN / 8 column groups
override DQ_B4: u32 = DQN / 4u;         // vec4 per key row of the k tile
override DQ_SA: u32 = DQ_BK * 32u;      // vec4 of a step's dS^T tile (128 queries per key)
override DQ_SB: u32 = DQ_BK * DQ_B4;    // vec4 of a step's k tile
override DQ_AN: u32 = DQ_SA / DQ_NT;    // dS^T vec4 each thread moves per step (2 or 1; k: 1)
var<workgroup> mm_a: array<vec4f, 2u * DQ_SA>;   // dS^T: 2 buffers x DQ_BK keys x 32 vec4
var<workgroup> mm_b: array<vec4f, 2u * DQ_SB>;   // k: 2 buffers x DQ_BK keys x DQ_B4 vec4
@group(0) @binding(5) var<storage, read_write> dq4: array<vec4f>;   // bwd_dq_mm

// What one thread moves per step: vec4 lid (a0) and lid + DQ_NT (a1, DQN 64) of dS^T's, lid of k's (b).
struct MmStep { a0: vec4f, a1: vec4f, b: vec4f }

// dS^T vec4 v of a step at keys k0.., queries m0..: key k0 + v / 32, queries m0 + 4 (v % 32)..
// Branch-free (plain or not, the same load and select): a value merged from two branches
// made the driver wait for the load at the merge, before the step's products (round 24).
fn mm_load_a(v: u32, k0: u32, m0: u32, plain: bool, a_base: u32, a_row: u32) -> vec4f {
    let j = k0 + v / 32u;
    let e = a_base + j * a_row + m0 / 4u + v % 32u;
    let i = vec4u(m0 + 4u * (v % 32u)) + vec4u(0u, 1u, 2u, 3u);
    let ok = vec4<bool>(plain) | (visible4(i, vec4u(j)) & (i < vec4u(p.seq_q)));
    return select(vec4f(0.0), ds_in[select(0u, e, any(ok))], ok);
}

// k vec4 v of a step at keys k0..: key k0 + v / DQ_B4, columns 4 (v % DQ_B4)..
fn mm_load_b(v: u32, k0: u32, k4: u32, ks4: u32) -> vec4f {
    let j = k0 + v / DQ_B4;
    let c = v % DQ_B4;
    let ok = j < p.seq_k && c < p.d4;
    return select(vec4f(0.0), k[select(0u, k4 + j * ks4 + c, ok)], ok);
}

fn mm_fetch(lid: u32, k0: u32, m0: u32, m1: u32, room: bool, a_base: u32, a_row: u32, k4: u32, ks4: u32) -> MmStep {
    let plain = room && block_visible(m0, m1, k0, DQ_BK);   // every pair visible: no test needed
    var r = MmStep(vec4f(0.0), vec4f(0.0), vec4f(0.0));
    r.a0 = mm_load_a(lid, k0, m0, plain, a_base, a_row);
    if (DQ_AN > 1u) { r.a1 = mm_load_a(lid + DQ_NT, k0, m0, plain, a_base, a_row); }
    r.b = mm_load_b(lid, k0, k4, ks4);
    return r;
}

fn mm_stash(buf: u32, lid: u32, r: MmStep) {
    let a = buf * DQ_SA + lid;
    mm_a[a] = r.a0;
    if (DQ_AN > 1u) { mm_a[a + DQ_NT] = r.a1; }
    mm_b[buf * DQ_SB + lid] = r.b;
}

// The thread's fragments of key row kk of a buffer: ra, rb its vec4 of key row 0.
struct MmFrag { a0: vec4f, a1: vec4f, b0: vec4f, b1: vec4f }
fn mm_frag(ra: u32, rb: u32) -> MmFrag {
    return MmFrag(mm_a[ra], mm_a[ra + 16u], mm_b[rb], mm_b[rb + DQN / 8u]);
}

// c[2 r + h] += row r of the thread's 8 (a0: rows 0 - 3, a1: 4 - 7) times column quad h.
fn mm_mac(c: ptr<function, array<vec4f, 16>>, f: MmFrag) {
    (*c)[0] = fma(vec4f(f.a0.x), f.b0, (*c)[0]); (*c)[1] = fma(vec4f(f.a0.x), f.b1, (*c)[1]);
    (*c)[2] = fma(vec4f(f.a0.y), f.b0, (*c)[2]); (*c)[3] = fma(vec4f(f.a0.y), f.b1, (*c)[3]);
    (*c)[4] = fma(vec4f(f.a0.z), f.b0, (*c)[4]); (*c)[5] = fma(vec4f(f.a0.z), f.b1, (*c)[5]);
    (*c)[6] = fma(vec4f(f.a0.w), f.b0, (*c)[6]); (*c)[7] = fma(vec4f(f.a0.w), f.b1, (*c)[7]);
    (*c)[8] = fma(vec4f(f.a1.x), f.b0, (*c)[8]); (*c)[9] = fma(vec4f(f.a1.x), f.b1, (*c)[9]);
    (*c)[10] = fma(vec4f(f.a1.y), f.b0, (*c)[10]); (*c)[11] = fma(vec4f(f.a1.y), f.b1, (*c)[11]);
    (*c)[12] = fma(vec4f(f.a1.z), f.b0, (*c)[12]); (*c)[13] = fma(vec4f(f.a1.z), f.b1, (*c)[13]);
    (*c)[14] = fma(vec4f(f.a1.w), f.b0, (*c)[14]); (*c)[15] = fma(vec4f(f.a1.w), f.b1, (*c)[15]);
}

// Row i's 4 columns from d (head_dim % 4 == 0: all 4 or none in range), times the scale.
fn mm_put(q4: u32, qs4: u32, i: u32, d: u32, x: vec4f) {
    if (i < p.seq_q && d < p.dim) { dq4[q4 + i * qs4 + d / 4u] = x * p.scale; }
}

@compute @workgroup_size(DQ_NT)
fn bwd_dq_mm(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
             @builtin(local_invocation_index) lid: u32) {
    let wg = wid.x + wid.y * nwg.x;
    if (wg >= p.total_wg) { return; }
    let tiles = (p.seq_q + 127u) / 128u;
    let bo = block_of(wg, tiles);
    let m0 = (tiles - 1u - bo.x) * 128u;
    let m1 = min(m0 + 128u, p.seq_q);
    let bh = bo.y + p.bk0 * p.group;
    let h = bh % p.heads;
    let b = bh / p.heads;
    let a_base = ds_block(bo.y, 0u, 0u);
    let a_row = p.q_blocks * 16u;
    let k4 = (b * p.seq_k * p.kv_heads + h / p.group) * p.d4;
    let ks4 = p.kv_heads * p.d4;
    let range = key_range(m0, m1);
    let kbeg = (u32(max(range.x, 0)) / DQ_BK) * DQ_BK;
    let kend = u32(max(range.y, 0));
    let nsteps = select(0u, (kend - kbeg + DQ_BK - 1u) / DQ_BK, kend > kbeg);
    let room = m0 + 128u <= 64u * p.q_blocks;   // the tile's queries inside the head's rows

    // the thread's place: 8 x 4 lanes per warp, lanes n and n^1 on one row group, n and
    // n^2 on one column group (matmul.wgsl's lane_xy with PAIR)
    let lane = lid % 32u;
    let w = lid / 32u;
    let tx = (w % (DQN / 64u)) * 8u + ((lane & 1u) | ((lane >> 1u) & 6u));
    let ty = (w / (DQN / 64u)) * 4u + (((lane >> 1u) & 1u) | ((lane >> 3u) & 2u));

    var c: array<vec4f, 16>;   // zeros; constant indices only, so it stays in registers
    var r = MmStep(vec4f(0.0), vec4f(0.0), vec4f(0.0));
    if (nsteps > 0u) {
        r = mm_fetch(lid, kbeg, m0, m1, room, a_base, a_row, k4, ks4);
        mm_stash(0u, lid, r);
    }
    workgroupBarrier();
    for (var t = 0u; t < nsteps; t++) {
        if (t + 1u < nsteps) {   // (unconditional, fetching the last step twice: 0.5% slower)
            r = mm_fetch(lid, kbeg + (t + 1u) * DQ_BK, m0, m1, room, a_base, a_row, k4, ks4);
        }
        let ra = (t & 1u) * DQ_SA + ty;
        let rb = (t & 1u) * DQ_SB + tx;
        // each key row's fragments read one row ahead of its products; a constant trip
        // count, so the driver unrolls it and every read is at a constant offset
        var f = mm_frag(ra, rb);
        for (var kk = 1u; kk < DQ_BK; kk++) {
            let g = mm_frag(ra + kk * 32u, rb + kk * DQ_B4);
            mm_mac(&c, f);
            f = g;
        }
        mm_mac(&c, f);
        if (t + 1u < nsteps) { mm_stash((t + 1u) & 1u, lid, r); }
        workgroupBarrier();
    }

    let q4 = (b * p.seq_q * p.heads + h) * p.d4;
    let qs4 = p.heads * p.d4;
    let i0 = m0 + 4u * ty;
    let i1 = i0 + 64u;
    let d0 = 4u * tx;
    let d1 = d0 + DQN / 2u;
    mm_put(q4, qs4, i0, d0, c[0]); mm_put(q4, qs4, i0, d1, c[1]);
    mm_put(q4, qs4, i0 + 1u, d0, c[2]); mm_put(q4, qs4, i0 + 1u, d1, c[3]);
    mm_put(q4, qs4, i0 + 2u, d0, c[4]); mm_put(q4, qs4, i0 + 2u, d1, c[5]);
    mm_put(q4, qs4, i0 + 3u, d0, c[6]); mm_put(q4, qs4, i0 + 3u, d1, c[7]);
    mm_put(q4, qs4, i1, d0, c[8]); mm_put(q4, qs4, i1, d1, c[9]);
    mm_put(q4, qs4, i1 + 1u, d0, c[10]); mm_put(q4, qs4, i1 + 1u, d1, c[11]);
    mm_put(q4, qs4, i1 + 2u, d0, c[12]); mm_put(q4, qs4, i1 + 2u, d1, c[13]);
    mm_put(q4, qs4, i1 + 3u, d0, c[14]); mm_put(q4, qs4, i1 + 3u, d1, c[15]);
}

// ---- the forward that keeps its scores, as two products (fwd_s_mm, fwd_pv_mm) -------------
//
// A caller that keeps the scores for the backward (options.scores) stores them either way,
// so the forward needs no online softmax: fwd_s_mm computes S = (q scale log2(e)) k^T in
// tiles of 128 queries x 128 keys, 8 x 8 per thread (the product kernels' tiling, where
// prefill's 4 x 4 reads workgroup memory twice as often per FMA), stores them in the
// scores layout and each query's max over the tile's visible keys; fwd_pv_mm takes each
// query's max over its tiles and computes out = sum_j P_ij v_j / l_i with P = exp2(S - max)
// read back from the scores (hidden pairs 0) and l the sum of P, as bwd_dq_mm computes dq
// from dS^T, and writes the log-sum-exp. The scores' layout is [key][query] within each
// block (one 256-byte run per key and block), the layout the second product reads.
// For calls without a mask or dropout, head_dim % 4 == 0 and <= 128 (the host's rule).
const SM_BK: u32 = 16u;                     // head_dim elements per staged chunk of fwd_s_mm (32: slower, round 25)
var<workgroup> sm_st: array<vec4f, 1024>;  // q^T [16][32 query quads] | k^T [16][32 key quads], swizzled; then the maxima
@group(0) @binding(5) var<storage, read_write> row_max_out: array<vec4f>;   // fwd_s_mm
@group(0) @binding(1) var<storage, read> row_max_in: array<vec4f>;          // fwd_pv_mm
@group(0) @binding(4) var<storage, read> s_fwd: array<vec4f>;               // fwd_pv_mm: the scores
@group(0) @binding(5) var<storage, read_write> out4: array<vec4f>;          // fwd_pv_mm

// Staging unit u (0 - 255) of head_dim chunk ch: operand u / 128 (q, pre-scaled, or k),
// rows 4 rq .. + 3 of the tile (rq = (u % 128) / 4) at head_dim vec4 4 ch + u % 4 (zeros
// past the rows and head_dim): 4 lanes read 64 contiguous bytes of a row (one lane per row,
// 16 bytes each, was 3.5% slower: round 25). sm_put4 stores it transposed, one vec4 (the 4
// rows) per head_dim element, at quad rq ^ sm_swz(u % 4), so that the 8 lanes of a store
// phase (2 quads x 4 vec4 of head_dim) hit 8 bank groups; the fragment reads apply the same.
struct SmUnit { x0: vec4f, x1: vec4f, x2: vec4f, x3: vec4f }
fn sm_swz(dv: u32) -> u32 { return 2u * dv; }
fn sm_load(u: u32, ch: u32, m0: u32, k0: u32, q_base: u32, q_stride: u32, k_base: u32, k_stride: u32) -> SmUnit {
    let rq = (u % 128u) / 4u;
    let d4 = 4u * ch + u % 4u;
    var r = SmUnit(vec4f(0.0), vec4f(0.0), vec4f(0.0), vec4f(0.0));
    if (u >= 128u) {
        let j = k0 + 4u * rq;
        r.x0 = pf_ld_k(j, k_base, k_stride, d4);
        r.x1 = pf_ld_k(j + 1u, k_base, k_stride, d4);
        r.x2 = pf_ld_k(j + 2u, k_base, k_stride, d4);
        r.x3 = pf_ld_k(j + 3u, k_base, k_stride, d4);
    } else {
        let i = m0 + 4u * rq;
        r.x0 = pf_ld_q(i, q_base, q_stride, d4);
        r.x1 = pf_ld_q(i + 1u, q_base, q_stride, d4);
        r.x2 = pf_ld_q(i + 2u, q_base, q_stride, d4);
        r.x3 = pf_ld_q(i + 3u, q_base, q_stride, d4);
    }
    return r;
}
fn sm_put4(u: u32, x: SmUnit) {
    let dv = u % 4u;
    let off = select(0u, SM_BK * 32u, u >= 128u) + 128u * dv + (((u % 128u) / 4u) ^ sm_swz(dv));
    sm_st[off] = vec4f(x.x0.x, x.x1.x, x.x2.x, x.x3.x);
    sm_st[off + 32u] = vec4f(x.x0.y, x.x1.y, x.x2.y, x.x3.y);
    sm_st[off + 64u] = vec4f(x.x0.z, x.x1.z, x.x2.z, x.x3.z);
    sm_st[off + 96u] = vec4f(x.x0.w, x.x1.w, x.x2.w, x.x3.w);
}

// Scores x of queries i against key j into block (qb, kb) of head bh (blocks past the
// tensor's grid are not stored): key quad kq, query quad qq of the block.
fn sm_put(bh: u32, qb: u32, kb: u32, j: u32, kq: u32, qq: u32, x: vec4f) {
    if (qb < p.q_blocks && kb < p.k_blocks) {
        s_out[((bh * p.q_blocks + qb) * p.k_blocks + kb) * 1024u + (j % 4u) * 256u + kq * 16u + qq] = x;
    }
}

// x with the pairs (queries i, key j) that are hidden or past the queries at -inf.
fn sm_vis(x: vec4f, full: bool, i: vec4u, j: u32) -> vec4f {
    if (full) { return x; }
    return select(vec4f(p.neg_inf), x, visible4(i, vec4u(j)) & (i < vec4u(p.seq_q)));
}

// The thread's part of one 128 x 128 tile of fwd_s_mm: the scores stored, and the max of its
// two query quads (tx, 16 + tx) over its 8 keys that are visible.
struct SmMax { x0: vec4f, x1: vec4f }
fn sm_tile(lid: u32, tx: u32, ty: u32, bh: u32, mt: u32, kt: u32, m0: u32, m1: u32,
           q_base: u32, q_stride: u32, k_base: u32, k_stride: u32) -> SmMax {
    let k0 = kt * 128u;
    // c[2r + hq]: the scores of query quad hq (4tx.., 64 + 4tx..) with the thread's key r
    // (4ty + r, then 64 + 4ty + r - 4): a vec4 over 4 queries, the layout of the scores
    var c: array<vec4f, 16>;
    for (var ch = 0u; 4u * ch < p.d4; ch++) {
        // (the next chunk prefetched into registers during the products: no faster, round 25)
        let x = sm_load(lid, ch, m0, k0, q_base, q_stride, k_base, k_stride);
        workgroupBarrier();
        sm_put4(lid, x);
        workgroupBarrier();
        for (var kk = 0u; kk < SM_BK; kk++) {   // constant trip count (zeros past head_dim)
            let ka = (SM_BK + kk) * 32u + (ty ^ sm_swz(kk / 4u));   // (16 + ty) ^ s = 16 + (ty ^ s)
            let qa = kk * 32u + (tx ^ sm_swz(kk / 4u));
            mm_mac(&c, MmFrag(sm_st[ka], sm_st[ka + 16u], sm_st[qa], sm_st[qa + 16u]));
        }
    }

    let qb = 2u * mt;
    let kb = 2u * kt;
    let j0 = k0 + 4u * ty;
    let j1 = j0 + 64u;
    sm_put(bh, qb, kb, j0, ty, tx, c[0]); sm_put(bh, qb + 1u, kb, j0, ty, tx, c[1]);
    sm_put(bh, qb, kb, j0 + 1u, ty, tx, c[2]); sm_put(bh, qb + 1u, kb, j0 + 1u, ty, tx, c[3]);
    sm_put(bh, qb, kb, j0 + 2u, ty, tx, c[4]); sm_put(bh, qb + 1u, kb, j0 + 2u, ty, tx, c[5]);
    sm_put(bh, qb, kb, j0 + 3u, ty, tx, c[6]); sm_put(bh, qb + 1u, kb, j0 + 3u, ty, tx, c[7]);
    sm_put(bh, qb, kb + 1u, j1, ty, tx, c[8]); sm_put(bh, qb + 1u, kb + 1u, j1, ty, tx, c[9]);
    sm_put(bh, qb, kb + 1u, j1 + 1u, ty, tx, c[10]); sm_put(bh, qb + 1u, kb + 1u, j1 + 1u, ty, tx, c[11]);
    sm_put(bh, qb, kb + 1u, j1 + 2u, ty, tx, c[12]); sm_put(bh, qb + 1u, kb + 1u, j1 + 2u, ty, tx, c[13]);
    sm_put(bh, qb, kb + 1u, j1 + 3u, ty, tx, c[14]); sm_put(bh, qb + 1u, kb + 1u, j1 + 3u, ty, tx, c[15]);

    let full = block_visible(m0, m1, k0, 128u);
    let i0 = vec4u(m0 + 4u * tx) + vec4u(0u, 1u, 2u, 3u);
    let i1 = i0 + vec4u(64u);
    var x0 = max(max(sm_vis(c[0], full, i0, j0), sm_vis(c[2], full, i0, j0 + 1u)),
                 max(sm_vis(c[4], full, i0, j0 + 2u), sm_vis(c[6], full, i0, j0 + 3u)));
    x0 = max(x0, max(max(sm_vis(c[8], full, i0, j1), sm_vis(c[10], full, i0, j1 + 1u)),
                     max(sm_vis(c[12], full, i0, j1 + 2u), sm_vis(c[14], full, i0, j1 + 3u))));
    var x1 = max(max(sm_vis(c[1], full, i1, j0), sm_vis(c[3], full, i1, j0 + 1u)),
                 max(sm_vis(c[5], full, i1, j0 + 2u), sm_vis(c[7], full, i1, j0 + 3u)));
    x1 = max(x1, max(max(sm_vis(c[9], full, i1, j1), sm_vis(c[11], full, i1, j1 + 1u)),
                     max(sm_vis(c[13], full, i1, j1 + 2u), sm_vis(c[15], full, i1, j1 + 3u))));
    return SmMax(x0, x1);
}

// The max over the 16 key quads of the workgroup (ty) of each query quad, for threads lid < 32.
fn sm_reduce(lid: u32, tx: u32, ty: u32, x: SmMax) -> vec4f {
    workgroupBarrier();                           // the last chunk is no longer read
    sm_st[ty * 32u + tx] = x.x0;
    sm_st[ty * 32u + 16u + tx] = x.x1;
    workgroupBarrier();
    var mx = vec4f(p.neg_inf);
    if (lid < 32u) {
        mx = sm_st[lid];
        for (var t = 1u; t < 16u; t++) { mx = max(mx, sm_st[t * 32u + lid]); }
    }
    return mx;
}

struct SmPlace { bh: u32, h: u32, b: u32, tx: u32, ty: u32 }
fn sm_place(bh: u32, lid: u32) -> SmPlace {
    // as bwd_dq_mm with DQN 128: query quads tx and tx + 16, key quads ty and ty + 16
    let lane = lid % 32u;
    let w = lid / 32u;
    return SmPlace(bh, bh % p.heads, bh / p.heads, (w % 2u) * 8u + ((lane & 1u) | ((lane >> 1u) & 6u)),
                   (w / 2u) * 4u + (((lane >> 1u) & 1u) | ((lane >> 3u) & 2u)));
}

@compute @workgroup_size(256)
fn fwd_s_mm(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
            @builtin(local_invocation_index) lid: u32) {
    let wg = wid.x + wid.y * nwg.x;
    if (wg >= p.total_wg) { return; }
    let m_tiles = (p.seq_q + 127u) / 128u;
    let k_tiles = (p.seq_k + 127u) / 128u;
    let kt = wg % k_tiles;
    let mt = (wg / k_tiles) % m_tiles;
    let bh = wg / (k_tiles * m_tiles);
    let m0 = mt * 128u;
    let m1 = min(m0 + 128u, p.seq_q);
    let k0 = kt * 128u;
    let range = key_range(m0, m1);
    if (i32(k0) >= range.y || i32(k0) + 128 <= range.x) { return; }   // no visible pair (fwd_pv_mm skips it too)
    let pl = sm_place(bh, lid);
    let q_base = (pl.b * p.seq_q * p.heads + pl.h) * p.dim;
    let k_base = (pl.b * p.seq_k * p.kv_heads + pl.h / p.group) * p.dim;
    let x = sm_tile(lid, pl.tx, pl.ty, bh, mt, kt, m0, m1, q_base, p.heads * p.dim, k_base, p.kv_heads * p.dim);
    let mx = sm_reduce(lid, pl.tx, pl.ty, x);
    if (lid < 32u) { row_max_out[((bh * k_tiles + kt) * m_tiles + mt) * 32u + lid] = mx; }
}

// P^T vec4 v of a step of fwd_pv_mm at keys k0.., queries m0..: key k0 + v / 32, queries
// m0 + 4 (v % 32).. at e in the scores (see pv_base), exp2(s - mu) with mu the queries' max;
// hidden pairs 0, branch-free as mm_load_a.
fn pv_load_a(v: u32, e: u32, k0: u32, m0: u32, plain: bool, mu: vec4f) -> vec4f {
    let j = k0 + v / 32u;
    let i = vec4u(m0 + 4u * (v % 32u)) + vec4u(0u, 1u, 2u, 3u);
    let ok = vec4<bool>(plain) | (visible4(i, vec4u(j)) & (i < vec4u(p.seq_q)));
    return select(vec4f(0.0), exp2(s_fwd[select(0u, e, any(ok))] - mu), ok);
}

// Where vec4 v of every step sits in the scores, less the step's offset (pv_fetch): a thread
// loads the same key of every step (k0 % 8 == 0) and the same queries, so the block row, the
// slice and the sub-block are fixed (computed once: 1.3 - 3% faster than per load, round 25).
fn pv_base(v: u32, m0: u32, bh: u32) -> u32 {
    let kk = v / 32u;
    let qq = v % 32u;
    return (bh * p.q_blocks + m0 / 64u + qq / 16u) * p.k_blocks * 1024u + (kk % 4u) * 256u + (kk / 4u) * 16u + qq % 16u;
}

// v vec4 u of a step at keys k0..: key k0 + u / DQ_B4, columns 4 (u % DQ_B4)..
fn pv_load_b(u: u32, k0: u32, k4: u32, ks4: u32) -> vec4f {
    let j = k0 + u / DQ_B4;
    let c = u % DQ_B4;
    let ok = j < p.seq_k && c < p.d4;
    return select(vec4f(0.0), v[select(0u, k4 + j * ks4 + c, ok)], ok);
}

fn pv_fetch(lid: u32, base: u32, k0: u32, m0: u32, m1: u32, room: bool, mu: vec4f, k4: u32, ks4: u32) -> MmStep {
    let plain = room && block_visible(m0, m1, k0, DQ_BK);   // every pair visible: no test needed
    let e = base + (k0 >> 6u) * 1024u + ((k0 >> 2u) & 15u) * 16u;   // key block, key group
    var r = MmStep(vec4f(0.0), vec4f(0.0), vec4f(0.0));
    r.a0 = pv_load_a(lid, e, k0, m0, plain, mu);
    if (DQ_AN > 1u) { r.a1 = pv_load_a(lid + DQ_NT, e + 16u, k0, m0, plain, mu); }   // key + 4: the next group
    r.b = pv_load_b(lid, k0, k4, ks4);
    return r;
}

// Query i's 4 columns from d of out (head_dim % 4 == 0: all 4 or none in range).
fn pv_put(o4: u32, os4: u32, i: u32, d: u32, x: vec4f) {
    if (i < p.seq_q && d < p.dim) { out4[o4 + i * os4 + d / 4u] = x; }
}

// The max of query quad lq over the key tiles fwd_s_mm did (row_max_in).
fn pv_max(bh: u32, mt: u32, k_tiles: u32, tiles: u32, range: vec2i, lq: u32) -> vec4f {
    var mx = vec4f(p.neg_inf);
    for (var kt = u32(max(range.x, 0)) / 128u; range.y > range.x && i32(kt * 128u) < range.y; kt++) {
        mx = max(mx, row_max_in[((bh * k_tiles + kt) * tiles + mt) * 32u + lq]);
    }
    return mx;
}

// PV_MU 1 (the default): each query quad's max over the tiles kept in workgroup memory and
// read at every fetch rather than held in registers through the loop; at DQN 128 that took
// fwd_pv_mm from 138 - 143 registers (one workgroup per SM) to 128 (two), 18% off the
// forward (round 26). PV_MU 0 (WGML_ATTN_PVMU=0) holds them in registers. The source keeps
// both branches on purpose: the same kernel with the 0 branch deleted compiled to 137
// registers at DQN 128 on the H200's driver, and only this form was measured at 128.
override PV_MU: u32 = 1u;
var<workgroup> pv_mu: array<vec4f, 32>;
fn pv_shift(mx: vec4f) -> vec4f { return select(mx, vec4f(0.0), mx == vec4f(p.neg_inf)); }   // no visible key: every P is 0

@compute @workgroup_size(DQ_NT)
fn fwd_pv_mm(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
             @builtin(local_invocation_index) lid: u32) {
    let wg = wid.x + wid.y * nwg.x;
    if (wg >= p.total_wg) { return; }
    let tiles = (p.seq_q + 127u) / 128u;
    let k_tiles = (p.seq_k + 127u) / 128u;
    let bo = block_of(wg, tiles);
    let mt = tiles - 1u - bo.x;
    let m0 = mt * 128u;
    let m1 = min(m0 + 128u, p.seq_q);
    let bh = bo.y;
    let h = bh % p.heads;
    let b = bh / p.heads;
    let k4 = (b * p.seq_k * p.kv_heads + h / p.group) * p.d4;
    let ks4 = p.kv_heads * p.d4;
    let range = key_range(m0, m1);
    let kbeg = (u32(max(range.x, 0)) / DQ_BK) * DQ_BK;
    let kend = u32(max(range.y, 0));
    let nsteps = select(0u, (kend - kbeg + DQ_BK - 1u) / DQ_BK, kend > kbeg);
    let room = m0 + 128u <= 64u * p.q_blocks;   // the tile's queries inside the scores' blocks

    // the max of the queries this thread loads (quad lid % 32) over the tiles fwd_s_mm did
    var mu = vec4f(0.0);
    if (PV_MU == 1u) {
        if (lid < 32u) { pv_mu[lid] = pv_max(bh, mt, k_tiles, tiles, range, lid); }
        workgroupBarrier();
    } else {
        mu = pv_shift(pv_max(bh, mt, k_tiles, tiles, range, lid % 32u));
    }

    let lane = lid % 32u;
    let w = lid / 32u;
    let tx = (w % (DQN / 64u)) * 8u + ((lane & 1u) | ((lane >> 1u) & 6u));
    let ty = (w / (DQN / 64u)) * 4u + (((lane >> 1u) & 1u) | ((lane >> 3u) & 2u));

    var c: array<vec4f, 16>;
    var lsum = vec4f(0.0);      // the sum of the P this thread loaded (its quad's queries)
    var r = MmStep(vec4f(0.0), vec4f(0.0), vec4f(0.0));
    let base = pv_base(lid, m0, bh);
    if (nsteps > 0u) {
        r = pv_fetch(lid, base, kbeg, m0, m1, room, select(mu, pv_shift(pv_mu[lid % 32u]), PV_MU == 1u), k4, ks4);
        lsum += r.a0 + r.a1;
        mm_stash(0u, lid, r);
    }
    workgroupBarrier();
    for (var t = 0u; t < nsteps; t++) {
        if (t + 1u < nsteps) {
            r = pv_fetch(lid, base, kbeg + (t + 1u) * DQ_BK, m0, m1, room, select(mu, pv_shift(pv_mu[lid % 32u]), PV_MU == 1u),
                         k4, ks4);
            lsum += r.a0 + r.a1;
        }
        // (bwd_dq_mm's step, written out again rather than shared through a function: the
        // driver's code for these kernels was timed in this form, round 25)
        let ra = (t & 1u) * DQ_SA + ty;
        let rb = (t & 1u) * DQ_SB + tx;
        var f = mm_frag(ra, rb);
        for (var kk = 1u; kk < DQ_BK; kk++) {
            let g = mm_frag(ra + kk * 32u, rb + kk * DQ_B4);
            mm_mac(&c, f);
            f = g;
        }
        mm_mac(&c, f);
        if (t + 1u < nsteps) { mm_stash((t + 1u) & 1u, lid, r); }
        workgroupBarrier();
    }

    // l of the thread's output quads ty and ty + 16: the sums of the DQ_NT / 32 threads that
    // loaded them (mm_a is free: the loop ended with a barrier)
    mm_a[lid] = lsum;
    if (lid < 32u) {   // the raw maxima for the log-sum-exp (PV_MU 0: read again rather than kept in registers)
        if (PV_MU == 1u) { mm_a[DQ_NT + lid] = pv_mu[lid]; } else { mm_a[DQ_NT + lid] = pv_max(bh, mt, k_tiles, tiles, range, lid); }
    }
    workgroupBarrier();
    var l0 = vec4f(0.0);
    var l1 = vec4f(0.0);
    for (var g = 0u; g < DQ_NT / 32u; g++) {
        l0 += mm_a[g * 32u + ty];
        l1 += mm_a[g * 32u + 16u + ty];
    }
    let inv0 = select(vec4f(0.0), 1.0 / l0, l0 > vec4f(0.0));
    let inv1 = select(vec4f(0.0), 1.0 / l1, l1 > vec4f(0.0));
    let o4 = (b * p.seq_q * p.heads + h) * p.d4;
    let os4 = p.heads * p.d4;
    let i0 = m0 + 4u * ty;
    let i1 = i0 + 64u;
    let d0 = 4u * tx;
    let d1 = d0 + DQN / 2u;
    pv_put(o4, os4, i0, d0, c[0] * inv0.x); pv_put(o4, os4, i0, d1, c[1] * inv0.x);
    pv_put(o4, os4, i0 + 1u, d0, c[2] * inv0.y); pv_put(o4, os4, i0 + 1u, d1, c[3] * inv0.y);
    pv_put(o4, os4, i0 + 2u, d0, c[4] * inv0.z); pv_put(o4, os4, i0 + 2u, d1, c[5] * inv0.z);
    pv_put(o4, os4, i0 + 3u, d0, c[6] * inv0.w); pv_put(o4, os4, i0 + 3u, d1, c[7] * inv0.w);
    pv_put(o4, os4, i1, d0, c[8] * inv1.x); pv_put(o4, os4, i1, d1, c[9] * inv1.x);
    pv_put(o4, os4, i1 + 1u, d0, c[10] * inv1.y); pv_put(o4, os4, i1 + 1u, d1, c[11] * inv1.y);
    pv_put(o4, os4, i1 + 2u, d0, c[12] * inv1.z); pv_put(o4, os4, i1 + 2u, d1, c[13] * inv1.z);
    pv_put(o4, os4, i1 + 3u, d0, c[14] * inv1.w); pv_put(o4, os4, i1 + 3u, d1, c[15] * inv1.w);
    if (tx == 0u) {   // the log-sum-exp of the thread's 8 queries
        let mx0 = mm_a[DQ_NT + ty];
        let mx1 = mm_a[DQ_NT + 16u + ty];
        for (var e = 0u; e < 4u; e++) {
            if (i0 + e < p.seq_q) { lse_out[bh * p.seq_q + i0 + e] = lse_public(mx0[e], l0[e]); }
            if (i1 + e < p.seq_q) { lse_out[bh * p.seq_q + i1 + e] = lse_public(mx1[e], l1[e]); }
        }
    }
}

// P (dropped: pz) and dS of query i against the thread's 4 keys (bwd_dkdv64).
struct KvP { pz: vec4f, ds: vec4f }
fn kv_p(s: vec4f, dp: vec4f, i: u32, check: bool, dropout: bool, b: u32, h: u32, bh: u32, n: u32, keys: vec4u,
        kh: vec4u) -> KvP {
    var lse = p.pos_inf;
    var di = 0.0;
    if (i < p.seq_q) {
        lse = stats[bh * p.seq_q + i];
        di = stats[n + bh * p.seq_q + i];
    }
    var sj = s;
    if (check || i >= p.seq_q) { sj = mask_scores(sj, b, h, vec4u(i), keys); }
    let pj = exp2(sj - vec4f(lse));
    var z = vec4f(1.0);
    if (dropout) { z = keep4(vec4u(row_key(bh, i)), kh); }
    return KvP(pj * z, pj * (dp * z - vec4f(di)));
}

@compute @workgroup_size(256)
fn bwd_dkdv64(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
              @builtin(local_invocation_index) tid: u32) {
    let wg = wid.x + wid.y * nwg.x;
    if (wg >= p.total_wg) { return; }
    let bo = block_of(wg, p.k_blocks);
    let kbi = bo.x;
    let bk = bo.y + p.bk0;
    let kvh = bk % p.kv_heads;
    let b = bk / p.kv_heads;
    let tr = g_tr(tid);
    let tc = g_tc(tid);
    let j0 = kbi * 64u;
    let j1 = min(j0 + 64u, p.seq_k);
    let q_stride = p.heads * p.dim;
    let k_stride = p.kv_heads * p.dim;
    let k_base = (b * p.seq_k * p.kv_heads + kvh) * p.dim;
    let dropout = has_dropout();
    let n = p.batch * p.heads * p.seq_q;
    let keys = vec4u(j0 + 4u * tr) + vec4u(0u, 1u, 2u, 3u);   // this thread's 4 keys
    var kh = vec4u(0u);
    if (dropout) { kh = key_hashes(keys); }

    let range = query_range(j0, j1);
    let qb0 = (u32(max(range.x, 0)) / 64u) * 64u;
    let full_keys = j0 + 64u <= p.seq_k;
    let mul = vec4f(p.scale_log2, 1.0, 1.0, 1.0);
    let sw = tr ^ g_swz(tc);
    var dk = G8();
    var dv = G8();
    for (var hh = 0u; hh < p.group; hh++) {
        let h = kvh * p.group + hh;
        let bh = b * p.heads + h;
        let q_base = (b * p.seq_q * p.heads + h) * p.dim;
        for (var qb = qb0; i32(qb) < range.y; qb += 64u) {
            var s = G4();    // s.c<i>: keys 4tr.. x query qb + 4tc + i
            var dp = G4();
            if (READ_S) {    // the forward's scores of this block, in the same units
                g_dp_only(vec4u(2u, k_base, k_stride, j0), vec4u(3u, q_base, q_stride, qb), tid, tr, tc, &dp);
                let at = ((bh * p.q_blocks + qb / 64u) * p.k_blocks + kbi) * 1024u + tr * 16u + tc;
                let l0 = s_in[at];          // key 4tr + e (l<e>), a vec4 over queries 4tc..
                let l1 = s_in[at + 256u];
                let l2 = s_in[at + 512u];
                let l3 = s_in[at + 768u];
                s = G4(vec4f(l0.x, l1.x, l2.x, l3.x), vec4f(l0.y, l1.y, l2.y, l3.y),
                       vec4f(l0.z, l1.z, l2.z, l3.z), vec4f(l0.w, l1.w, l2.w, l3.w));
            } else {
                g_scores(vec4u(1u, k_base, k_stride, j0), vec4u(2u, k_base, k_stride, j0),
                         vec4u(0u, q_base, q_stride, qb), vec4u(3u, q_base, q_stride, qb), mul, tid, tr, tc, &s, &dp);
            }
            let i_last = min(qb + 64u, p.seq_q);
            let check = !(full_keys && block_visible(qb, i_last, j0, 64u)) || has_mask();
            let i = qb + 4u * tc;
            let w0 = kv_p(s.c0, dp.c0, i, check, dropout, b, h, bh, n, keys, kh);
            let w1 = kv_p(s.c1, dp.c1, i + 1u, check, dropout, b, h, bh, n, keys, kh);
            let w2 = kv_p(s.c2, dp.c2, i + 2u, check, dropout, b, h, bh, n, keys, kh);
            let w3 = kv_p(s.c3, dp.c3, i + 3u, check, dropout, b, h, bh, n, keys, kh);
            if (WRITE_DS && DS_DENSE) {   // keys 4tr + c, queries qb + 4tc ..: 2 x 256 bytes per warp store
                let row = p.q_blocks * 16u;
                let at = ds_block(bh - p.bk0 * p.group, 0u, 0u) + (j0 + 4u * tr) * row + qb / 4u + tc;
                ds_out[at] = vec4f(w0.ds.x, w1.ds.x, w2.ds.x, w3.ds.x);
                ds_out[at + row] = vec4f(w0.ds.y, w1.ds.y, w2.ds.y, w3.ds.y);
                ds_out[at + 2u * row] = vec4f(w0.ds.z, w1.ds.z, w2.ds.z, w3.ds.z);
                ds_out[at + 3u * row] = vec4f(w0.ds.w, w1.ds.w, w2.ds.w, w3.ds.w);
            } else if (WRITE_DS) {   // sub-block (key group tr, query group tc)
                let at = ds_block(bh - p.bk0 * p.group, qb / 64u, kbi) + (tr * 16u + tc) * 4u;
                ds_out[at] = w0.ds;
                ds_out[at + 1u] = w1.ds;
                ds_out[at + 2u] = w2.ds;
                ds_out[at + 3u] = w3.ds;
            }
            // g_st's last readers passed a barrier
            g_w[(4u * tc) * 16u + sw] = w0.pz;
            g_w[(4u * tc + 1u) * 16u + sw] = w1.pz;
            g_w[(4u * tc + 2u) * 16u + sw] = w2.pz;
            g_w[(4u * tc + 3u) * 16u + sw] = w3.pz;
            g_rowprod(&dv, 3u, q_base, q_stride, qb, tid, tr, tc);
            workgroupBarrier();
            g_w[(4u * tc) * 16u + sw] = w0.ds;
            g_w[(4u * tc + 1u) * 16u + sw] = w1.ds;
            g_w[(4u * tc + 2u) * 16u + sw] = w2.ds;
            g_w[(4u * tc + 3u) * 16u + sw] = w3.ds;
            g_rowprod(&dk, 0u, q_base, q_stride, qb, tid, tr, tc);
        }
    }

    g_store(keys.x, p.seq_k, k_base, k_stride, tc, dk.r0, dk.r4, p.scale);
    g_store(keys.y, p.seq_k, k_base, k_stride, tc, dk.r1, dk.r5, p.scale);
    g_store(keys.z, p.seq_k, k_base, k_stride, tc, dk.r2, dk.r6, p.scale);
    g_store(keys.w, p.seq_k, k_base, k_stride, tc, dk.r3, dk.r7, p.scale);
    g_store2(keys.x, p.seq_k, k_base, k_stride, tc, dv.r0, dv.r4);
    g_store2(keys.y, p.seq_k, k_base, k_stride, tc, dv.r1, dv.r5);
    g_store2(keys.z, p.seq_k, k_base, k_stride, tc, dv.r2, dv.r6);
    g_store2(keys.w, p.seq_k, k_base, k_stride, tc, dv.r3, dv.r7);
}

// ---- decode: one query row per (batch, head), keys split across workgroups ---------------
//
// A workgroup owns HG query heads that share one kv head (GQA: k and v are read once for
// all of them) and a contiguous range of keys_per_split visible keys, streamed in chunks of
// CK keys. Per chunk: stage k and v (coalesced vec4), scores of (head, key) pairs spread
// over threads, one thread per head updates its running max / sum and turns scores into
// probabilities, then each thread updates its (head, vec4 of DIM) accumulators. The
// partial (max, sum, acc) goes to `part`; decode_combine rescales and sums the splits.
// Enough splits are used to fill the device even for one batch of a few kv heads.

override DC: u32 = 8u;          // vec4 per row held in workgroup memory (>= d4)
override DWG: u32 = 128u;       // threads
override CK: u32 = 32u;         // keys per chunk
override HG: u32 = 4u;          // query heads per workgroup
override KRS: u32 = DC + 1u;
override NSLOT: u32 = (HG * DC + DWG - 1u) / DWG;   // accumulators per thread (<= 8)
override DC_QN: u32 = HG * DC;
override DC_KN: u32 = CK * KRS;
override DC_VN: u32 = CK * DC;
override DC_SN: u32 = HG * CK;
var<workgroup> dc_q: array<vec4f, DC_QN>;
var<workgroup> dc_k: array<vec4f, DC_KN>;
var<workgroup> dc_v: array<vec4f, DC_VN>;
var<workgroup> dc_s: array<f32, DC_SN>;
var<workgroup> dc_h: array<vec4f, HG>;    // per head: running max, running sum, rescale

@compute @workgroup_size(DWG)
fn decode(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
          @builtin(local_invocation_index) tid: u32) {
    let wg = wid.x + wid.y * nwg.x;
    if (wg >= p.total_wg) { return; }
    let split = wg % p.splits;
    let rest = wg / p.splits;
    let hc = rest % p.head_chunks;
    let bk = rest / p.head_chunks;
    let kvh = bk % p.kv_heads;
    let b = bk / p.kv_heads;
    let h0 = kvh * p.group + hc * HG;
    let nh = min(HG, p.group - hc * HG);
    let k_stride = p.kv_heads * p.dim;
    let k_base = (b * p.seq_k * p.kv_heads + kvh) * p.dim;

    for (var idx = tid; idx < HG * DC; idx += DWG) {
        let hh = idx / DC;
        let d4 = idx % DC;
        var x = vec4f(0.0);
        if (hh < nh) { x = ld_q((b * p.heads + h0 + hh) * p.dim, d4) * p.scale_log2; }   // 0 past d4
        dc_q[idx] = x;
    }
    if (tid < HG) { dc_h[tid] = vec4f(p.neg_inf, 0.0, 0.0, 0.0); }

    let ks = p.key_lo + i32(split * p.keys_per_split);
    let ke = min(p.key_hi, ks + i32(p.keys_per_split));
    var acc = array<vec4f, 8>();
    for (var kc = ks; kc < ke; kc += i32(CK)) {
        workgroupBarrier();
        for (var idx = tid; idx < CK * DC; idx += DWG) {
            let r = idx / DC;
            let d4 = idx % DC;
            let j = kc + i32(r);
            var x = vec4f(0.0);
            var y = vec4f(0.0);
            if (j < ke) {
                x = ld_k(k_base + u32(j) * k_stride, d4);
                y = ld_v(k_base + u32(j) * k_stride, d4);
            }
            dc_k[r * KRS + d4] = x;
            dc_v[r * DC + d4] = y;
        }
        workgroupBarrier();
        for (var pair = tid; pair < HG * CK; pair += DWG) {
            let hh = pair / CK;
            let kk = pair % CK;
            let j = kc + i32(kk);
            var sc = p.neg_inf;
            if (hh < nh && j < ke) {
                var acc_s = 0.0;
                for (var d4 = 0u; d4 < p.d4; d4++) { acc_s += dot(dc_q[hh * DC + d4], dc_k[kk * KRS + d4]); }
                sc = acc_s;
                if (has_mask()) { sc += mask_at(b, h0 + hh, 0u, u32(j)); }
            }
            dc_s[pair] = sc;
        }
        workgroupBarrier();
        if (tid < nh) {
            let st = dc_h[tid];
            var mx = p.neg_inf;
            for (var kk = 0u; kk < CK; kk++) { mx = max(mx, dc_s[tid * CK + kk]); }
            let m_new = max(st.x, mx);
            let m_use = select(m_new, 0.0, m_new == p.neg_inf);
            let alpha = exp2(st.x - m_use);
            var sum = 0.0;
            let rk = row_key(b * p.heads + h0 + tid, 0u);
            for (var kk = 0u; kk < CK; kk++) {
                var e = exp2(dc_s[tid * CK + kk] - m_use);
                sum += e;
                if (has_dropout()) {
                    e = select(0.0, e * p.drop_scale, kept(rk, key_hash(u32(kc) + kk)));
                }
                dc_s[tid * CK + kk] = e;
            }
            dc_h[tid] = vec4f(m_new, st.y * alpha + sum, alpha, 0.0);
        }
        workgroupBarrier();
        for (var n = 0u; n < 8u; n++) {
            let idx = tid + n * DWG;
            if (n < NSLOT && idx < HG * DC && idx % DC < p.d4) {
                let hh = idx / DC;
                let d4 = idx % DC;
                var a = acc[n] * dc_h[hh].z;
                for (var kk = 0u; kk < CK; kk++) { a += dc_s[hh * CK + kk] * dc_v[kk * DC + d4]; }
                acc[n] = a;
            }
        }
    }

    let stride = p.d4 + 1u;
    for (var n = 0u; n < 8u; n++) {
        let idx = tid + n * DWG;
        if (n < NSLOT && idx < nh * DC && idx % DC < p.d4) {
            let hh = idx / DC;
            let d4 = idx % DC;
            part[((b * p.heads + h0 + hh) * p.splits + split) * stride + 1u + d4] = acc[n];
        }
    }
    if (tid < nh) {
        let st = dc_h[tid];
        part[((b * p.heads + h0 + tid) * p.splits + split) * stride] = vec4f(st.x, st.y, 0.0, 0.0);
    }
}

// One workgroup per (batch, head): out = sum_s acc_s 2^(m_s - M) / sum_s l_s 2^(m_s - M).
// Returns the row's log-sum-exp in public units (see lse_public).
fn combine(row: u32, tid: u32) -> f32 {
    let stride = p.d4 + 1u;
    let base = row * p.splits * stride;
    var mx = p.neg_inf;
    for (var s = 0u; s < p.splits; s++) { mx = max(mx, part_in[base + s * stride].x); }
    let m_use = select(mx, 0.0, mx == p.neg_inf);
    var l = 0.0;
    for (var s = 0u; s < p.splits; s++) {
        let st = part_in[base + s * stride];
        l += st.y * exp2(st.x - m_use);
    }
    let inv = select(0.0, 1.0 / l, l > 0.0);
    for (var d4 = tid; d4 < p.d4; d4 += 32u) {
        var a = vec4f(0.0);
        for (var s = 0u; s < p.splits; s++) {
            a += part_in[base + s * stride + 1u + d4] * exp2(part_in[base + s * stride].x - m_use);
        }
        a *= inv;
        for (var e = 0u; e < 4u; e++) {
            if (4u * d4 + e < p.dim) { comb_out[row * p.dim + 4u * d4 + e] = a[e]; }
        }
    }
    return lse_public(m_use, l);
}

@compute @workgroup_size(32)
fn decode_combine(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
                  @builtin(local_invocation_index) tid: u32) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= p.total_wg) { return; }
    combine(row, tid);
}

// decode_combine that also writes the row's log-sum-exp (seq_q is 1: row = b * heads + h).
@compute @workgroup_size(32)
fn decode_combine_lse(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
                      @builtin(local_invocation_index) tid: u32) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= p.total_wg) { return; }
    let lse = combine(row, tid);
    if (tid == 0u) { comb_lse[row] = lse; }
}

// ---- log-sum-exp in and out (wgml_attention_options.lse) ---------------------------------
//
// The public value of query row r = bh * seq_q + i is ln(sum_j exp(score_ij)) over its
// visible keys (scaled and masked scores, before dropout), -inf for a row with no visible
// key. The kernels keep log2 units of the log2(e)-scaled scores and +inf for an empty row
// (so that exp2(s - lse) = 0): lse_public and lse_internal convert.
const LN2: f32 = 0.6931471805599453;
fn lse_public(m: f32, l: f32) -> f32 { return select(p.neg_inf, (m + log2(l)) * LN2, l > 0.0); }
fn lse_internal(x: f32) -> f32 { return select(x * LOG2E, p.pos_inf, x == p.neg_inf); }

// Backward statistics from a given log-sum-exp (replaces the statistics pass): binding 7
// holds the public lse, binding 3 the forward output, binding 6 dout; writes
// dst[r] = lse_internal(lse[r]) and dst[B*H*seq_q + r] = D_r = sum_d dout * out.
@compute @workgroup_size(256)
fn bwd_prep(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
            @builtin(local_invocation_index) tid: u32) {
    let wg = wid.x + wid.y * nwg.x;
    if (wg >= p.total_wg) { return; }
    let n = p.batch * p.heads * p.seq_q;
    let r = wg * 256u + tid;
    if (r >= n) { return; }
    let i = r % p.seq_q;
    let bh = r / p.seq_q;
    let h = bh % p.heads;
    let b = bh / p.heads;
    let base = ((b * p.seq_q + i) * p.heads + h) * p.dim;
    var d = 0.0;
    for (var c = 0u; c < p.d4; c++) { d += dot(ld_do(base, c), ld_v(base, c)); }
    dst[r] = lse_internal(stats[r]);
    dst[n + r] = d;
}

// The public log-sum-exp from backward statistics (the forward's fallback path, after fwd
// in MODE 1): dst[r] = ln-units of stats[r], -inf for an empty row.
@compute @workgroup_size(256)
fn lse_export(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
              @builtin(local_invocation_index) tid: u32) {
    let wg = wid.x + wid.y * nwg.x;
    if (wg >= p.total_wg) { return; }
    let r = wg * 256u + tid;
    if (r >= p.batch * p.heads * p.seq_q) { return; }
    let x = stats[r];
    dst[r] = select(x * LN2, p.neg_inf, x == p.pos_inf);
}

// ---- prefill: the forward (seq_q > 1) for wide heads -------------------------------------
//
// Why a second forward kernel: `fwd` above keeps the whole q tile [BR][head_dim] and k/v
// tiles in workgroup memory, so at head_dim 128 it is held to BR 32 x BC 32 with 64
// threads in ~48 KiB: one small workgroup per SM (2 warps on the H200), latency bound.
// `prefill` never holds a full row of head_dim: it streams head_dim like a GEMM streams K.
//
// Shape: 256 threads, BR = 64 queries x BC = 64 keys per block. Thread (tr, tc), tr, tc in
// 0..15, owns query rows 4tr..4tr+3 and, in S, keys 4tc..4tc+3 of the block (4 x 4
// scores in registers); in O it owns the same 4 rows x PF_OCV vec4 of head_dim (vec4
// columns tc and tc + 16), 4*4*PF_OCV accumulators.
// Phase 1, S = Q K^T: head_dim is streamed in chunks of PF_BK floats; per chunk, q rows
// (pre-scaled by scale*log2 e) and k rows are staged transposed, [PF_BK][16] vec4 each
// (a vec4 = 4 consecutive rows / keys at one dim), so that per dim a thread makes 2
// workgroup loads (its 4 rows, its 4 keys) for 16 FMAs. q is re-read from L1/L2 for every
// key block (64 x 128 floats per block, the same traffic as k). The staging tasks are
// (4 rows, 4 dims) each: 4 global vec4 loads (each row's 16 bytes next to its neighbour
// dim group's: full 32-byte sectors) and 4 transposed vec4 stores.
// Softmax: visibility/mask/dropout exactly as `fwd` (mask_scores, keep4 on 4 keys of one
// row); only blocks that are not entirely visible (or when there is a mask) pay the
// per-element test; blocks outside the visible band are never visited and causal query
// blocks run longest first. The row max goes through a [16][17] vec4 array (tc, tr; the
// pad makes the 8 lanes of one store phase hit distinct banks); row sums stay per thread
// and are reduced once at the end. A row with no visible key keeps m = -inf, l = 0 and
// writes 0.
// Phase 2, O += P V: P (after dropout) is stored transposed [64 keys][16 row groups] vec4
// (4 rows per vec4; the row group index is XOR-swizzled with a function of key/4, pf_swz,
// so that the 8 lanes of a store phase hit 8 different 16-byte banks), then
// v is streamed in chunks of PF_BK keys x 16*PF_OCV vec4 into the region that held the
// q/k chunks. Per key a thread loads 1 vec4 of P (4 rows) and PF_OCV vec4 of v for
// 16*PF_OCV FMAs; lanes read consecutive vec4 of v (conflict-free).
// Workgroup memory: staging PF_BK*32 vec4 (q and k chunks; v chunk; the reductions) +
// P 1024 vec4 = 32 KiB at PF_BK 32, 24 KiB at PF_BK 16 (the host picks the largest that
// fits the device: lavapipe 32 KiB, H200 48 KiB).
// Thread mapping: lane = tid % 32, warp = tid / 32: tr = 4*(warp/2) + lane/8, tc =
// 8*(warp%2) + lane%8, so a 32-lane warp covers 4 row groups x 8 key groups: per dim its
// q loads are 4-address broadcasts and its k loads 8 consecutive vec4 (one 128-byte
// wavefront each), and the P/v loads of phase 2 likewise. Any other subgroup size is
// only slower, never wrong.
// H200 estimate (f32, head_dim 128, 228 KiB smem and 64K registers per SM): about 90
// registers per thread (32 O + 16 S accumulators, m, l, row keys, addresses) -> 2
// workgroups = 16 warps per SM (8x the old kernel), smem allows 7. Per thread per block:
// 2048 FMAs in S (256 workgroup loads of 16 bytes) and 2048 in PV (192 loads), 14
// barriers; workgroup-memory wavefronts per warp take about half the FMA issue time, so the
// kernel should be FMA/latency bound, expected 15-25 TFLOP/s (20-35 ms for B4 H32 S4096
// D128 causal, vs 150 ms for `fwd`). Next steps if it falls short: prefetch the next
// chunk's global loads into registers before the compute of the current one (hides L2
// latency at 16 extra registers), or 8 rows per thread at head_dim 64.
// Measured (bench/notes/registers.md, attention.md): the driver gives it 128 registers
// (two workgroups per SM, as estimated, but the estimate of 90 was low) and 17 TFLOP/s
// (32 ms) at head_dim 128; prefetching lost at head_dim 64 (round 3).

override PF_BK: u32 = 32u;                 // head_dim floats per staged chunk = keys per v chunk (16 or 32)
override WRITE_S: bool = false;            // prefill_lse: also write the scores to s_out (options.scores)
override PF_OCV: u32 = 2u;                 // vec4 of head_dim per thread in O: 1 (head_dim <= 64) or 2 (<= 128)
override PF_DV4: u32 = 16u * PF_OCV;       // vec4 per staged v row
override PF_SN: u32 = PF_BK * 32u;         // staging region in vec4 (>= 16 * 17 for the reductions)
const PF_RS: u32 = 17u;                    // reduction array row stride (vec4)
var<workgroup> pf_s: array<vec4f, PF_SN>;  // q chunk^T [PF_BK][16] | k chunk^T [PF_BK][16]; v chunk; reductions
var<workgroup> pf_p: array<vec4f, 1024>;   // P^T [64 keys][16 row groups], swizzled

fn pf_max4(x: vec4f) -> f32 { return max(max(x.x, x.y), max(x.z, x.w)); }

// Registers, not arrays: function-scope arrays indexed in loops may be placed in local
// memory by a driver that does not unroll the loop (a first version of this kernel held
// its scores and accumulators in arrays and ran at 2 TFLOP/s on the H200), so every
// per-thread value here is a named variable and every loop over them is written out.

// Row i (q) or key j (k) of the staging: a vec4 of dims at vec4 index d4, zero past the end.
fn pf_ld_q(i: u32, q_base: u32, q_stride: u32, d4: u32) -> vec4f {
    if (i >= p.seq_q) { return vec4f(0.0); }
    return ld_q(q_base + i * q_stride, d4) * p.scale_log2;
}
fn pf_ld_k(j: u32, k_base: u32, k_stride: u32, d4: u32) -> vec4f {
    if (j >= p.seq_k) { return vec4f(0.0); }
    return ld_k(k_base + j * k_stride, d4);
}

// Stages dims [kc*PF_BK, (kc + 1)*PF_BK) of the q rows [i0, i0 + 64) and the k rows
// [kb, kb + 64), zeros past head_dim.
fn pf_stage_qk(tid: u32, kc: u32, i0: u32, kb: u32, q_base: u32, q_stride: u32, k_base: u32, k_stride: u32) {
    let nq = 4u * PF_BK;
    for (var t = tid; t < 2u * nq; t += 256u) {
        let is_k = t >= nq;
        let u = select(t, t - nq, is_k);
        let g = u % 16u;                         // group of 4 rows (keys)
        let dv = u / 16u;                        // group of 4 dims within the chunk
        let d4 = kc * (PF_BK / 4u) + dv;
        var x0 = vec4f(0.0);
        var x1 = vec4f(0.0);
        var x2 = vec4f(0.0);
        var x3 = vec4f(0.0);
        if (is_k) {
            let j = kb + 4u * g;
            x0 = pf_ld_k(j, k_base, k_stride, d4);
            x1 = pf_ld_k(j + 1u, k_base, k_stride, d4);
            x2 = pf_ld_k(j + 2u, k_base, k_stride, d4);
            x3 = pf_ld_k(j + 3u, k_base, k_stride, d4);
        } else {
            let i = i0 + 4u * g;
            x0 = pf_ld_q(i, q_base, q_stride, d4);
            x1 = pf_ld_q(i + 1u, q_base, q_stride, d4);
            x2 = pf_ld_q(i + 2u, q_base, q_stride, d4);
            x3 = pf_ld_q(i + 3u, q_base, q_stride, d4);
        }
        let off = select(0u, PF_BK * 16u, is_k) + 64u * dv + g;
        pf_s[off] = vec4f(x0.x, x1.x, x2.x, x3.x);
        pf_s[off + 16u] = vec4f(x0.y, x1.y, x2.y, x3.y);
        pf_s[off + 32u] = vec4f(x0.z, x1.z, x2.z, x3.z);
        pf_s[off + 48u] = vec4f(x0.w, x1.w, x2.w, x3.w);
    }
}

// Stages v rows [j0, j0 + PF_BK) as [PF_BK][PF_DV4] vec4 (zeros past seq_k and head_dim).
fn pf_stage_v(tid: u32, j0: u32, k_base: u32, k_stride: u32) {
    for (var t = tid; t < PF_BK * PF_DV4; t += 256u) {
        let j = j0 + t / PF_DV4;
        var x = vec4f(0.0);
        if (j < p.seq_k) { x = ld_v(k_base + j * k_stride, t % PF_DV4); }
        pf_s[t] = x;
    }
}

// Probabilities of one row's 4 scores against the row's running max (log2 units).
fn pf_exp(s: vec4f, m: f32) -> vec4f { return exp2(s - vec4f(m)); }
fn pf_sum4(x: vec4f) -> f32 { return (x.x + x.y) + (x.z + x.w); }

// Stores row i's 2 vec4 of the output (scaled by inv), scalar stores: any even head_dim.
fn pf_store(i: u32, q_base: u32, q_stride: u32, tc: u32, o0: vec4f, o1: vec4f, inv: f32) {
    if (i >= p.seq_q) { return; }
    let base = q_base + i * q_stride;
    if (tc < p.d4) { st_dst(base, tc, o0 * inv); }
    if (PF_OCV > 1u && tc + 16u < p.d4) { st_dst(base, tc + 16u, o1 * inv); }
}

// The thread's 4 rows after all key blocks: running max m (log2 units) and total sum l.
struct PfRows { m: vec4f, l: vec4f }

// Thread placement shared by the prefill entries: tr = row group, tc = key/column group.
// A warp covers 4 row groups x 8 key groups; PAIR as for g_tr / g_tc: the 8 key groups
// from lane bits 0, 2, 3 and the 4 row groups from bits 1, 4.
fn pf_tr(tid: u32) -> u32 {
    let lane = tid % 32u;
    let ly = select(lane / 8u, ((lane >> 1u) & 1u) | ((lane >> 3u) & 2u), PAIR);
    return 4u * ((tid / 32u) / 2u) + ly;
}
fn pf_tc(tid: u32) -> u32 {
    let lane = tid % 32u;
    let lx = select(lane % 8u, (lane & 1u) | ((lane >> 1u) & 6u), PAIR);
    return 8u * ((tid / 32u) % 2u) + lx;
}
// The swizzle of P^T: key group kg's vec4 of row group r sits in slot r ^ pf_swz(kg), as
// g_swz for g_w (8 distinct bank groups per store phase with either placement).
fn pf_swz(kg: u32) -> u32 { return select(kg & 7u, (2u * kg) & 7u, PAIR); }

@compute @workgroup_size(256)
fn prefill(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
           @builtin(local_invocation_index) tid: u32) {
    let wg = wid.x + wid.y * nwg.x;
    if (wg >= p.total_wg) { return; }
    pf_run(wg, tid, false);
}

// prefill that also writes each row's log-sum-exp (public units, see lse_public) to lse_out.
@compute @workgroup_size(256)
fn prefill_lse(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
               @builtin(local_invocation_index) tid: u32) {
    let wg = wid.x + wid.y * nwg.x;
    if (wg >= p.total_wg) { return; }
    let r = pf_run(wg, tid, false);
    if (pf_tc(tid) != 0u) { return; }
    let bo = block_of(wg, p.q_blocks);
    let qb = p.q_blocks - 1u - bo.x;
    let bh = bo.y;
    let i = qb * 64u + 4u * pf_tr(tid);
    // m of a row that saw no finite score is -inf and its l is 0: lse_public gives -inf
    if (i < p.seq_q) { lse_out[bh * p.seq_q + i] = lse_public(r.m.x, r.l.x); }
    if (i + 1u < p.seq_q) { lse_out[bh * p.seq_q + i + 1u] = lse_public(r.m.y, r.l.y); }
    if (i + 2u < p.seq_q) { lse_out[bh * p.seq_q + i + 2u] = lse_public(r.m.z, r.l.z); }
    if (i + 3u < p.seq_q) { lse_out[bh * p.seq_q + i + 3u] = lse_public(r.m.w, r.l.w); }
}

// Backward statistics (replaces fwd MODE 1 where prefill fits): the scores and softmax of
// prefill without the P v product, then per query row i
//   stats[bh * seq_q + i] = log2-sum-exp2 (+inf for a row with no visible key) and
//   stats[B * H * seq_q + bh * seq_q + i] = D_i = sum_d dout * out;
// binding 3 (v) holds the forward output, binding 6 dout.
@compute @workgroup_size(256)
fn prefill_stats(@builtin(workgroup_id) wid: vec3u, @builtin(num_workgroups) nwg: vec3u,
                 @builtin(local_invocation_index) tid: u32) {
    let wg = wid.x + wid.y * nwg.x;
    if (wg >= p.total_wg) { return; }
    let r = pf_run(wg, tid, true);
    let bo = block_of(wg, p.q_blocks);
    let qb = p.q_blocks - 1u - bo.x;
    let bh = bo.y;
    let h = bh % p.heads;
    let b = bh / p.heads;
    let tr = pf_tr(tid);
    let tc = pf_tc(tid);
    let rows = vec4u(qb * 64u + 4u * tr) + vec4u(0u, 1u, 2u, 3u);
    let q_stride = p.heads * p.dim;
    let q_base = (b * p.seq_q * p.heads + h) * p.dim;
    // D: this thread's vec4 columns tc and tc + 16 of its 4 rows, then a sum over the 16 tc
    var dpart = vec4f(0.0);
    for (var c = tc; c < p.d4; c += 16u) {
        let at = min(rows, vec4u(p.seq_q - 1u)) * q_stride + vec4u(q_base);
        dpart += vec4f(dot(ld_do(at.x, c), ld_v(at.x, c)), dot(ld_do(at.y, c), ld_v(at.y, c)),
                       dot(ld_do(at.z, c), ld_v(at.z, c)), dot(ld_do(at.w, c), ld_v(at.w, c)));
    }
    workgroupBarrier();
    pf_s[tc * PF_RS + tr] = dpart;
    workgroupBarrier();
    if (tc != 0u) { return; }
    var dt = pf_s[tr];
    for (var cc = 1u; cc < 16u; cc++) { dt += pf_s[cc * PF_RS + tr]; }
    let lse = select(vec4f(p.pos_inf), r.m + log2(r.l), r.l > vec4f(0.0));
    let n = p.batch * p.heads * p.seq_q;
    if (rows.x < p.seq_q) { dst[bh * p.seq_q + rows.x] = lse.x; dst[n + bh * p.seq_q + rows.x] = dt.x; }
    if (rows.y < p.seq_q) { dst[bh * p.seq_q + rows.y] = lse.y; dst[n + bh * p.seq_q + rows.y] = dt.y; }
    if (rows.z < p.seq_q) { dst[bh * p.seq_q + rows.z] = lse.z; dst[n + bh * p.seq_q + rows.z] = dt.z; }
    if (rows.w < p.seq_q) { dst[bh * p.seq_q + rows.w] = lse.w; dst[n + bh * p.seq_q + rows.w] = dt.w; }
}

// The body of prefill for workgroup wg; stats: stop after the softmax statistics (no P v,
// nothing stored) and return them.
fn pf_run(wg: u32, tid: u32, stats: bool) -> PfRows {
    let bo = block_of(wg, p.q_blocks);
    let qb = p.q_blocks - 1u - bo.x;              // last (longest when causal) blocks first
    let bh = bo.y;
    let h = bh % p.heads;
    let b = bh / p.heads;
    let kvh = h / p.group;
    let tr = pf_tr(tid);
    let tc = pf_tc(tid);
    let i0 = qb * 64u;
    let i1 = min(i0 + 64u, p.seq_q);
    let q_stride = p.heads * p.dim;
    let q_base = (b * p.seq_q * p.heads + h) * p.dim;
    let k_stride = p.kv_heads * p.dim;
    let k_base = (b * p.seq_k * p.kv_heads + kvh) * p.dim;
    let dropout = has_dropout() && !stats;
    let rows = vec4u(i0 + 4u * tr) + vec4u(0u, 1u, 2u, 3u);   // this thread's 4 query rows
    var rk = vec4u(0u);
    if (dropout) { rk = row_keys(bh, rows); }
    let swz = pf_swz(tc);                                     // P^T swizzle of this thread's keys
    let nkc = (p.dim + PF_BK - 1u) / PF_BK;                   // head_dim chunks

    let range = key_range(i0, i1);
    let kb0 = (u32(max(range.x, 0)) / 64u) * 64u;
    var m = vec4f(p.neg_inf);
    var l = vec4f(0.0);
    // o<r><c>: row 4tr + r, vec4 column tc + 16c of the head (c = 1 only when PF_OCV == 2)
    var o00 = vec4f(0.0); var o01 = vec4f(0.0);
    var o10 = vec4f(0.0); var o11 = vec4f(0.0);
    var o20 = vec4f(0.0); var o21 = vec4f(0.0);
    var o30 = vec4f(0.0); var o31 = vec4f(0.0);
    for (var kb = kb0; i32(kb) < range.y; kb += 64u) {
        // phase 1: s<r> = scores (log2 units) of row 4tr + r with keys kb + 4tc .. + 3
        var s0 = vec4f(0.0);
        var s1 = vec4f(0.0);
        var s2 = vec4f(0.0);
        var s3 = vec4f(0.0);
        for (var kc = 0u; kc < nkc; kc++) {
            workgroupBarrier();
            pf_stage_qk(tid, kc, i0, kb, q_base, q_stride, k_base, k_stride);
            workgroupBarrier();
            // all PF_BK dims, the zeros past head_dim included: a constant trip count lets
            // the driver unroll and schedule the loop (round 9 of bench/notes/attention.md:
            // the forward 9 - 14% faster, and its register spills gone)
            for (var k = 0u; k < PF_BK; k++) {
                let a = pf_s[16u * k + tr];
                let kv = pf_s[PF_BK * 16u + 16u * k + tc];
                s0 += a.x * kv;
                s1 += a.y * kv;
                s2 += a.z * kv;
                s3 += a.w * kv;
            }
        }
        if (WRITE_S) {   // before the mask: the backward applies it as for recomputed scores
            let at = ((bh * p.q_blocks + qb) * p.k_blocks + kb / 64u) * 1024u + tc * 16u + tr;
            s_out[at] = vec4f(s0.x, s1.x, s2.x, s3.x);          // key 4tc + e: a vec4 over the rows
            s_out[at + 256u] = vec4f(s0.y, s1.y, s2.y, s3.y);
            s_out[at + 512u] = vec4f(s0.z, s1.z, s2.z, s3.z);
            s_out[at + 768u] = vec4f(s0.w, s1.w, s2.w, s3.w);
        }
        let keys = vec4u(kb + 4u * tc) + vec4u(0u, 1u, 2u, 3u);
        if (!block_visible(i0, i1, kb, 64u) || has_mask()) {
            s0 = mask_scores(s0, b, h, vec4u(rows.x), keys);
            s1 = mask_scores(s1, b, h, vec4u(rows.y), keys);
            s2 = mask_scores(s2, b, h, vec4u(rows.z), keys);
            s3 = mask_scores(s3, b, h, vec4u(rows.w), keys);
        }
        // row max over the 16 threads of a row group
        let pm = vec4f(pf_max4(s0), pf_max4(s1), pf_max4(s2), pf_max4(s3));
        workgroupBarrier();                       // the q/k chunks are no longer read
        pf_s[tc * PF_RS + tr] = pm;
        workgroupBarrier();
        var mx = pf_s[tr];
        for (var cc = 1u; cc < 16u; cc++) { mx = max(mx, pf_s[cc * PF_RS + tr]); }
        let m_new = max(m, mx);
        let m_use = select(m_new, vec4f(0.0), m_new == vec4f(p.neg_inf));   // no finite score yet
        let alpha = exp2(m - m_use);
        m = m_new;
        var p0 = pf_exp(s0, m_use.x);
        var p1 = pf_exp(s1, m_use.y);
        var p2 = pf_exp(s2, m_use.z);
        var p3 = pf_exp(s3, m_use.w);
        l = l * alpha + vec4f(pf_sum4(p0), pf_sum4(p1), pf_sum4(p2), pf_sum4(p3));
        if (dropout) {
            let kh = key_hashes(keys);
            p0 *= keep4(vec4u(rk.x), kh);
            p1 *= keep4(vec4u(rk.y), kh);
            p2 *= keep4(vec4u(rk.z), kh);
            p3 *= keep4(vec4u(rk.w), kh);
        }
        o00 *= alpha.x; o10 *= alpha.y; o20 *= alpha.z; o30 *= alpha.w;
        if (PF_OCV > 1u) { o01 *= alpha.x; o11 *= alpha.y; o21 *= alpha.z; o31 *= alpha.w; }
        if (stats) { continue; }
        // P^T: key 4tc + e, row group tr (pf_p was last read before the barriers above)
        let pbase = 4u * tc * 16u + (tr ^ swz);
        pf_p[pbase] = vec4f(p0.x, p1.x, p2.x, p3.x);
        pf_p[pbase + 16u] = vec4f(p0.y, p1.y, p2.y, p3.y);
        pf_p[pbase + 32u] = vec4f(p0.z, p1.z, p2.z, p3.z);
        pf_p[pbase + 48u] = vec4f(p0.w, p1.w, p2.w, p3.w);

        // phase 2: o += P v, v streamed in chunks of PF_BK keys; chunks wholly at or past
        // range.y (causal diagonal, end of the keys: P = 0 there) are skipped
        let vend = min(64u, u32(range.y) - kb);
        for (var vc = 0u; vc < vend; vc += PF_BK) {
            // all PF_BK keys of the chunk, as in phase 1: v is zero past seq_k and P is
            // zero past range.y (the masking wrote it so)
            workgroupBarrier();                   // reductions read / previous chunk consumed
            pf_stage_v(tid, kb + vc, k_base, k_stride);
            workgroupBarrier();
            for (var jj = 0u; jj < PF_BK; jj++) {
                let j = vc + jj;
                let pv = pf_p[j * 16u + (tr ^ pf_swz(j >> 2u))];
                let v0 = pf_s[jj * PF_DV4 + tc];
                o00 += pv.x * v0;
                o10 += pv.y * v0;
                o20 += pv.z * v0;
                o30 += pv.w * v0;
                if (PF_OCV > 1u) {
                    let v1 = pf_s[jj * PF_DV4 + tc + 16u];
                    o01 += pv.x * v1;
                    o11 += pv.y * v1;
                    o21 += pv.z * v1;
                    o31 += pv.w * v1;
                }
            }
        }
    }

    // row sums: reduce the per-thread partials, normalise, store (the output is written
    // once per workgroup, a negligible cost)
    workgroupBarrier();
    pf_s[tc * PF_RS + tr] = l;
    workgroupBarrier();
    var lt = pf_s[tr];
    for (var cc = 1u; cc < 16u; cc++) { lt += pf_s[cc * PF_RS + tr]; }
    if (stats) { return PfRows(m, lt); }
    let inv = select(vec4f(0.0), 1.0 / lt, lt > vec4f(0.0));
    pf_store(rows.x, q_base, q_stride, tc, o00, o01, inv.x);
    pf_store(rows.y, q_base, q_stride, tc, o10, o11, inv.y);
    pf_store(rows.z, q_base, q_stride, tc, o20, o21, inv.z);
    pf_store(rows.w, q_base, q_stride, tc, o30, o31, inv.w);
    return PfRows(m, lt);
}
