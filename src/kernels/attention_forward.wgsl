// Flash attention forward for seq_q > 1, and the backward's statistics pass where it reuses
// the forward's kernels. Compiled after attention_prelude.wgsl (layout, visibility, dropout,
// log2 units and the shared helpers are described there).
//
// Entry points
//   prefill         out = softmax(q k^T * scale + mask) (dropped) v, 64 queries x 64 keys per
//                   block, head_dim streamed in chunks like the K of a matrix product.
//   prefill_lse     prefill that also writes each row's log-sum-exp (options.lse); with
//                   WRITE_S it also stores the scores (options.scores with a mask or dropout).
//   prefill_stats   the backward's statistics from prefill's scores and softmax, no P v:
//                   stats[bh*seq_q + i] = log2-sum-exp2 of row i (+inf for an empty row, so
//                   that exp2(s - lse) = 0), stats[B*H*seq_q + bh*seq_q + i] = D_i =
//                   sum_d dout * out (binding 3 holds the forward output, binding 6 dout).
//   fwd             the tiled forward (shape in the prelude) for adapters without room for
//                   prefill and for head_dim above 128: MODE 0 the output, MODE 1 the
//                   statistics as prefill_stats.
//   lse_export      the public log-sum-exp from fwd MODE 1's statistics (tiled path, options.lse).
//   fwd_s_mm        the forward that keeps its scores without a mask or dropout, first
//                   product: S in 128 x 128 tiles, stored, and each row's max per tile;
//   fwd_pv_mm       second product: out = P v / l from the stored scores, and the log-sum-exp.
//
// Why two designs: a caller that keeps the scores for the backward stores them either way,
// so that forward needs no online softmax and runs as two register-tiled matrix products
// (8 x 8 per thread); without kept scores nothing of size seq_q x seq_k may be stored, and
// prefill fuses the scores, the online softmax and P v in workgroup memory (4 x 4 per
// thread, which a 24 KiB workgroup holds).

@group(0) @binding(6) var<storage, read_write> lse_out: array<f32>;      // prefill_lse, fwd_pv_mm
// The forward's scores kept for the backward (options.scores): the prefill entries write
// them (WRITE_S; unwritten, a small unused buffer is bound), fwd_s_mm writes them, fwd_pv_mm
// and bwd_dkdv64 (attention_backward.wgsl, READ_S) read them. Layout: block (bh, query
// block qb, key block kb) at vec4 ((bh * q_blocks + qb) * k_blocks + kb) * 1024; in it, the scores of key 4kg + c with
// queries 4qg .. 4qg + 3 (4 x 4 sub-block of key group kg, query group qg) at vec4 c * 256 +
// kg * 16 + qg, so that each of a thread's 4 stores (and loads) is one of 4 slices in which
// consecutive sub-blocks are consecutive vec4: a warp's store covers 64-byte runs (the
// forward's 4 query groups x 8 key groups) or 256-byte runs (bwd_dkdv64's 16 x 2) instead
// of 16 bytes every 64; and the 64 queries of a key are one 256-byte run (fwd_pv_mm's
// operand: P^T, a vec4 over 4 queries per key, as matmul_at reads its a).
@group(0) @binding(7) var<storage, read_write> s_out: array<vec4f>;      // prefill entries, fwd_s_mm

// ---- prefill, prefill_lse, prefill_stats --------------------------------------------------
//
// Why: `fwd` keeps whole [rows][head_dim] tiles of q, k and v in workgroup memory, so at
// head_dim 128 its blocks, workgroups and register tiles are small and few run per SM.
// prefill never holds a full row of head_dim: it streams head_dim like a matrix product
// streams K.
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
// row). The row max goes through a [16][17] vec4 array (tc, tr; the pad makes the 8 lanes
// of one store phase hit distinct banks); row sums stay per thread and are reduced once at
// the end. A row with no visible key keeps m = -inf, l = 0 and writes 0.
// Phase 2, O += P V: P (after dropout) is stored transposed [64 keys][16 row groups] vec4
// (4 rows per vec4; the row group index is XOR-swizzled with a function of key/4, pf_swz,
// so that the 8 lanes of a store phase hit 8 different 16-byte banks), then v is streamed
// in chunks of PF_BK keys x 16*PF_OCV vec4 into the region that held the q/k chunks. Per
// key a thread loads 1 vec4 of P (4 rows) and PF_OCV vec4 of v for 16*PF_OCV FMAs; lanes
// read consecutive vec4 of v (conflict-free).
// Workgroup memory: staging PF_BK*32 vec4 (q and k chunks; v chunk; the reductions) + P
// 1024 vec4 = 24 KiB. Longer chunks mean fewer barriers but more workgroup memory, which
// cost more than the barriers on the H200 (bench/notes/attention.md).
// Thread mapping: lane = tid % 32, warp = tid / 32; a warp covers 4 row groups x 8 key
// groups (pf_tr, pf_tc), so per dim its q loads are 4-address broadcasts and its k loads 8
// consecutive vec4, and the P/v loads of phase 2 likewise. Any other subgroup size is only
// slower, never wrong.
// Registers decide the speed: two workgroups per SM need at most 128 per thread.

const PF_BK: u32 = 16u;                    // head_dim floats per staged chunk = keys per v chunk
override WRITE_S: bool = false;            // prefill_lse: also write the scores to s_out (options.scores)
override PF_OCV: u32 = 2u;                 // vec4 of head_dim per thread in O: 1 (head_dim <= 64) or 2 (<= 128)
override PF_DV4: u32 = 16u * PF_OCV;       // vec4 per staged v row
const PF_SN: u32 = PF_BK * 32u;            // staging region in vec4 (>= 16 * 17 for the reductions)
const PF_RS: u32 = 17u;                    // reduction array row stride (vec4)
var<workgroup> pf_s: array<vec4f, PF_SN>;  // q chunk^T [PF_BK][16] | k chunk^T [PF_BK][16]; v chunk; reductions
var<workgroup> pf_p: array<vec4f, 1024>;   // P^T [64 keys][16 row groups], swizzled

fn pf_max4(x: vec4f) -> f32 { return max(max(x.x, x.y), max(x.z, x.w)); }

// Registers, not arrays: function-scope arrays indexed in loops may be placed in local
// memory by a driver that does not unroll the loop, many times slower, so every
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
// A warp covers 4 row groups x 8 key groups: the 8 key groups from lane bits 0, 2, 3 and
// the 4 row groups from bits 1, 4, so that lanes n and n^1 have the same tr (their reads
// of q, indexed by tr, hit one address) and lanes n and n^2 the same tc (k, P, v): a
// 16-byte workgroup read where lane pairs share addresses takes half the cycles (NVIDIA).
fn pf_tr(tid: u32) -> u32 {
    let lane = tid % 32u;
    let ly = ((lane >> 1u) & 1u) | ((lane >> 3u) & 2u);
    return 4u * ((tid / 32u) / 2u) + ly;
}
fn pf_tc(tid: u32) -> u32 {
    let lane = tid % 32u;
    let lx = (lane & 1u) | ((lane >> 1u) & 6u);
    return 8u * ((tid / 32u) % 2u) + lx;
}
// The swizzle of P^T: key group kg's vec4 of row group r sits in slot r ^ pf_swz(kg), so
// that the 8 lanes of a store phase (4 key groups x 2 row groups) hit 8 bank groups.
fn pf_swz(kg: u32) -> u32 { return (2u * kg) & 7u; }

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
            // the driver unroll and schedule the loop (and keeps its values in registers)
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

// ---- fwd: the tiled forward (MODE 0) and statistics (MODE 1) --------------------------------

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
// Accumulators o[4r + j] of vec4 column j0 + j (j0: 0 lo, 4 hi; see Acc16 in the prelude):
// scaled by a[r]; += pv[r] times the staged v row at `row`; normalised by inv[r] into the
// q tile.
fn f_scale(o: ptr<function, Acc16>, j0: u32, a: vec4f) {
    for (var j = 0u; j < 4u; j++) {
        if (j0 + j < OCV) {
            (*o)[j] *= a.x;
            (*o)[4u + j] *= a.y;
            (*o)[8u + j] *= a.z;
            (*o)[12u + j] *= a.w;
        }
    }
}
fn f_mac(o: ptr<function, Acc16>, j0: u32, pv: vec4f, row: u32, c: u32) {
    for (var j = 0u; j < 4u; j++) {
        if (j0 + j < OCV) {
            let vv = f_kv[row + c + TC * (j0 + j)];
            (*o)[j] += pv.x * vv;
            (*o)[4u + j] += pv.y * vv;
            (*o)[8u + j] += pv.z * vv;
            (*o)[12u + j] += pv.w * vv;
        }
    }
}
fn f_put(o: ptr<function, Acc16>, j0: u32, g: u32, c: u32, inv: vec4f) {
    for (var j = 0u; j < 4u; j++) {
        if (j0 + j < OCV) {
            let col = c + TC * (j0 + j);
            f_q[(4u * g) * RS + col] = (*o)[j] * inv.x;
            f_q[(4u * g + 1u) * RS + col] = (*o)[4u + j] * inv.y;
            f_q[(4u * g + 2u) * RS + col] = (*o)[8u + j] * inv.z;
            f_q[(4u * g + 3u) * RS + col] = (*o)[12u + j] * inv.w;
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
    var o = Acc16();                 // o[4 * r + j]: row 4g + r, vec4 c + TC * j of the head
    var o_hi = Acc16();              // the same for vec4 c + TC * (4 + j) (OCV > 4)
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
            f_scale(&o, 0u, alpha);
            if (OCV > 4u) { f_scale(&o_hi, 4u, alpha); }
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
                f_mac(&o, 0u, pv, v_off + kk * RS, c);
                if (OCV > 4u) { f_mac(&o_hi, 4u, pv, v_off + kk * RS, c); }
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
        f_put(&o, 0u, g, c, inv);
        if (OCV > 4u) { f_put(&o_hi, 4u, g, c, inv); }
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

// The public log-sum-exp from the statistics of fwd in MODE 1 (the tiled forward with
// options.lse): dst[r] = ln-units of stats[r], -inf for an empty row.
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

// ---- fwd_s_mm, fwd_pv_mm: the forward that keeps its scores, as two products --------------
//
// fwd_s_mm computes S = (q scale log2(e)) k^T in tiles of 128 queries x 128 keys, 8 x 8 per thread (the product kernels' tiling, where
// prefill's 4 x 4 reads workgroup memory twice as often per FMA), stores them in the
// scores layout and each query's max over the tile's visible keys; fwd_pv_mm takes each
// query's max over its tiles and computes out = sum_j P_ij v_j / l_i with P = exp2(S - max)
// read back from the scores (hidden pairs 0) and l the sum of P, as bwd_dq_mm computes dq
// from dS^T, and writes the log-sum-exp. The scores' layout is [key][query] within each
// block (one 256-byte run per key and block), the layout the second product reads.
// For calls without a mask or dropout, head_dim % 4 == 0 and <= 128 (the host's rule).
const SM_BK: u32 = 16u;                     // head_dim elements per staged chunk of fwd_s_mm
var<workgroup> sm_st: array<vec4f, 1024>;  // q^T [16][32 query quads] | k^T [16][32 key quads], swizzled; then the maxima
@group(0) @binding(5) var<storage, read_write> row_max_out: array<vec4f>;   // fwd_s_mm
@group(0) @binding(1) var<storage, read> row_max_in: array<vec4f>;          // fwd_pv_mm
@group(0) @binding(4) var<storage, read> s_fwd: array<vec4f>;               // fwd_pv_mm: the scores
@group(0) @binding(5) var<storage, read_write> out4: array<vec4f>;          // fwd_pv_mm

// Staging unit u (0 - 255) of head_dim chunk ch: operand u / 128 (q, pre-scaled, or k),
// rows 4 rq .. + 3 of the tile (rq = (u % 128) / 4) at head_dim vec4 4 ch + u % 4 (zeros
// past the rows and head_dim): 4 lanes read 64 contiguous bytes of a row (full sectors,
// where one lane per row reads 16 bytes of each). sm_put4 stores it transposed, one vec4
// (the 4 rows) per head_dim element, at quad rq ^ sm_swz(u % 4), so that the 8 lanes of a
// store phase (2 quads x 4 vec4 of head_dim) hit 8 bank groups; the fragment reads apply
// the same.
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
// slice and the sub-block are fixed (computed once rather than per load).
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

// Each query quad's max over the tiles is kept in workgroup memory (pv_mu) and read at
// every fetch rather than held in registers through the loop: at DQN 128 that keeps the
// kernel within the registers of two workgroups per SM on the H200. PV_MU is always 1;
// the branches for 0 (maxima in registers) are never taken but stay in the source: with
// them deleted the H200's driver allocated more registers to this kernel (one workgroup
// per SM; bench/notes/attention.md), and only this form was measured at two.
const PV_MU: u32 = 1u;
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
        // driver's code for these kernels was timed in this form)
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
    if (lid < 32u) {   // the raw maxima for the log-sum-exp
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

