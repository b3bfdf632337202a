// Flash attention, the declarations its kernel files share: src/kernels/attention_forward.wgsl
// (seq_q > 1, and the backward's statistics from the forward's kernels),
// attention_backward.wgsl (dq, dk, dv) and attention_decode.wgsl (seq_q == 1). The engine
// compiles each of them after this file, as one module (src/engine.c, get_module).
//
// What is computed: out = softmax(q k^T * scale + mask) v per (batch, query head), with
// GQA/MQA (query head h reads kv head h / group), causal masks with a KV-cache offset,
// sliding windows, an additive broadcast mask and attention dropout; its gradients; and
// each query row's log-sum-exp where the caller keeps it.
//
// Layout (all f32, row-major): q, out, dout, dq [batch, seq_q, heads, head_dim];
// k, v, dk, dv [batch, seq_k, kv_heads, head_dim]. mask (optional) is read at
// b*m_sb + h*m_sh + i*m_sq + j*m_sk (stride 0 = broadcast). Query i sits at position
// i + offset; key j is visible when (!causal || j <= pos) and (window == 0 ||
// |pos - j| < window). Scores live in log2 units: q (or k) is pre-multiplied by
// scale*log2(e), the mask by log2(e), and exp2 replaces exp. A row with no visible key has
// l = 0 and yields 0 (forward) and zero gradients.
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
//
// Every kernel visits only the blocks that intersect the visible band (causal and window
// skip whole blocks), runs the longest blocks first (block_of), and pays the per-element
// visibility test only in blocks that are not wholly visible or where there is a mask.

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
const LN2: f32 = 0.6931471805599453;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<vec4f>;
@group(0) @binding(2) var<storage, read> k: array<vec4f>;
@group(0) @binding(3) var<storage, read> v: array<vec4f>;       // statistics passes: the forward output
@group(0) @binding(4) var<storage, read> mask: array<f32>;
@group(0) @binding(5) var<storage, read_write> dst: array<f32>; // out / stats / dq / dk
@group(0) @binding(6) var<storage, read> dout: array<vec4f>;
@group(0) @binding(7) var<storage, read> stats: array<f32>;
@group(0) @binding(8) var<storage, read_write> dst2: array<f32>; // dv

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
// Whether 4 (row key, key hash) pairs are kept, and their dropout factor (0 or 1/(1-p)).
fn kept4(rk: vec4u, kh: vec4u) -> vec4<bool> { return mix32v(rk ^ kh) >= vec4u(p.drop_threshold); }
fn keep4(rk: vec4u, kh: vec4u) -> vec4f { return select(vec4f(0.0), vec4f(p.drop_scale), kept4(rk, kh)); }

// The features a pipeline is built for (1 mask, 2 dropout). On GPUs the host sets FEAT to
// the call's flags for the prefill and 64 x 64 entries, so that the common call (neither)
// runs code without the mask loads and the dropout hashes, and without their registers;
// the other entries, and every entry on CPU adapters (where each extra pipeline costs
// compilation time and registers do not matter), keep both.
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
// in the L2 cache. order_heads 1: one head's blocks together.
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

// ---- log-sum-exp in and out (wgml_attention_options.lse) ---------------------------------
//
// The public value of query row r = bh * seq_q + i is ln(sum_j exp(score_ij)) over its
// visible keys (scaled and masked scores, before dropout), -inf for a row with no visible
// key. The kernels keep log2 units of the log2(e)-scaled scores and +inf for an empty row
// (so that exp2(s - lse) = 0): lse_public and lse_internal convert.
fn lse_public(m: f32, l: f32) -> f32 { return select(p.neg_inf, (m + log2(l)) * LN2, l > 0.0); }
fn lse_internal(x: f32) -> f32 { return select(x * LOG2E, p.pos_inf, x == p.neg_inf); }

// ---- the tiled kernels' shape: fwd (forward file), bwd_dq, bwd_dkdv (backward file) -------
//
// The kernels of adapters whose workgroup storage or storage bindings do not hold the 64 x
// 64 ones, and of head_dim above 128 (the 64 x 64 ones stop there). A workgroup owns BR
// "rows" (queries; keys for bwd_dkdv) and streams blocks of BC = KPT*TC "columns" (keys;
// queries for bwd_dkdv) through workgroup memory. Its WG = (BR/4)*TC threads form BR/4 row
// groups of TC lanes. Phase 1 (S = rows . cols^T, contraction over head_dim) gives each
// lane a 4 x KPT register tile: rows 4g..4g+3, columns c, c+TC, ...; per vec4 of head_dim
// it loads 4 + KPT vec4 from workgroup memory for 16*KPT FMAs (the row vec4 is a broadcast
// within the row group; columns are spread over lanes, and rows are padded by one vec4 so
// that lanes reading different rows hit different banks). The row max is reduced through a
// small TC x BR array (one barrier per block); row sums stay per lane until the end. Phase
// 2 (acc += W . cols, contraction over the block) gives each lane the same 4 rows x OCV
// vec4 of head_dim (vec4 index c + TC*j): per column it loads 1 vec4 of W (stored
// transposed, 4 rows per vec4) and OCV vec4 of the column operand for 16*OCV FMAs.
// Accumulators stay in registers for the whole loop; at the end they go through the
// workgroup tile so that the stores are row-contiguous.
// The accumulators are two arrays of 16 (Acc16): vec4 columns j < 4 in one, 4 <= j < 8 in
// the other (OCV > 4: head_dim above 128 only), touched only under `if (OCV > 4u)`, so that
// a pipeline of OCV <= 4 holds and runs the first alone.
// Whole [rows][head_dim] tiles must fit the workgroup storage, which bounds the register
// tile and the block; SHARED_STAGE trades a barrier for memory: fwd / bwd_dq stage k and v
// one after the other in one region, bwd_dkdv stages q and dout one after the other (q
// twice). The host picks BR, KPT and SHARED_STAGE from the adapter's workgroup storage
// (tile_candidates in src/ops/attention.c). head_dim is a run-time value: a pipeline
// serves every head_dim of one OCV class (OCV = ceil(ceil(head_dim / 4) / TC)).
// Tiles move between memory and workgroup arrays with thread (g, c) taking rows g, g + RG,
// ... and vec4 c, c + TC, ... of each row: a row group reads TC consecutive vec4 (coalesced)
// and the inner loop runs over the real d4 vec4 only (padding is never read).
override OCV: u32 = 2u;             // vec4 of head_dim per lane in phase 2 (1..8): ceil(d4 / TC)
override BR: u32 = 32u;             // rows per workgroup (multiple of 4)
const TC: u32 = 8u;                 // lanes per row group
override KPT: u32 = 4u;             // columns per lane in phase 1 (1, 2 or 4)
override SHARED_STAGE: bool = false;
override MODE: u32 = 0u;            // fwd only: 0 output, 1 backward statistics

override DP4: u32 = OCV * TC;                // padded row length in vec4 (>= d4)
override RS: u32 = DP4 + 1u;                 // workgroup row stride in vec4
override BC: u32 = KPT * TC;                 // columns per block
override RG: u32 = BR / 4u;                  // row groups
override WG: u32 = RG * TC;                  // threads per workgroup
alias Acc16 = array<vec4f, 16>;              // 4 rows x 4 vec4 columns of a lane: [4 * row + column]

// ---- the register-tiled product step: bwd_dq_mm (backward), fwd_s_mm and fwd_pv_mm (forward)
//
// A product with a reduction over keys, C [128 rows][DQN columns] += A^T B, where A^T is
// [keys][rows] (contiguous along the rows) and B [keys][columns]: the layout in which the
// library's matrix products run fastest, so these kernels run as those do. A workgroup
// owns 128 rows x DQN columns, a thread 8 x 8 of them (rows 4ty.. and 64 + 4ty.., columns
// 4tx.. and DQN/2 + 4tx..: 2 + 2 vec4 reads from workgroup memory per 64 FMAs, where a
// 4 x 4 tile reads 2 per 16), the keys in steps of DQ_BK, two buffers, the next step
// fetched into registers during the current one's products: one barrier per step.
override DQN: u32 = 64u;                // head_dim columns per workgroup (64 or 128)
const DQ_BK: u32 = 8u;                  // keys per step
override DQ_NT: u32 = 2u * DQN;         // threads: 16 row groups x DQN / 8 column groups
override DQ_B4: u32 = DQN / 4u;         // vec4 per key row of the B tile
override DQ_SA: u32 = DQ_BK * 32u;      // vec4 of a step's A^T tile (128 rows per key)
override DQ_SB: u32 = DQ_BK * DQ_B4;    // vec4 of a step's B tile
override DQ_AN: u32 = DQ_SA / DQ_NT;    // A^T vec4 each thread moves per step (2 or 1; B: 1)
var<workgroup> mm_a: array<vec4f, 2u * DQ_SA>;   // A^T: 2 buffers x DQ_BK keys x 32 vec4
var<workgroup> mm_b: array<vec4f, 2u * DQ_SB>;   // B: 2 buffers x DQ_BK keys x DQ_B4 vec4

// What one thread moves per step: vec4 lid (a0) and lid + DQ_NT (a1, DQN 64) of A^T's, lid of B's (b).
struct MmStep { a0: vec4f, a1: vec4f, b: vec4f }

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

