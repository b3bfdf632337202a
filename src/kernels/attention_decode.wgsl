// Flash attention for one query row per (batch, head) (seq_q == 1, decoding with a KV
// cache): out = softmax(q k^T * scale + mask) (dropped) v. Compiled after
// attention_prelude.wgsl (layout, visibility, dropout, log2 units there).
//
// Entry points
//   decode              keys split across workgroups (flash-decoding); each writes a
//                       partial (max, sum, unnormalised acc) per head to `part`.
//   decode_combine      merges the partials of each (batch, head) into out.
//   decode_combine_lse  the same, and writes the row's log-sum-exp (options.lse).
//
// Why split the keys: one query row per head gives a decoding step few (batch, head)
// pairs, too few workgroups to fill a GPU; the keys of a row are split until the
// dispatch has enough (the host's rule), and the merge is a second, small pass.
// part layout: per (batch, head) row and split, 1 + d4 vec4: (max, sum, 0, 0), then acc.

@group(0) @binding(5) var<storage, read_write> part: array<vec4f>;       // decode
@group(0) @binding(1) var<storage, read> part_in: array<vec4f>;          // decode_combine*
@group(0) @binding(2) var<storage, read_write> comb_out: array<f32>;     // decode_combine*
@group(0) @binding(3) var<storage, read_write> comb_lse: array<f32>;     // decode_combine_lse

// ---- decode --------------------------------------------------------------------------------
//
// A workgroup owns HG query heads that share one kv head (GQA: k and v are read once for
// all of them) and a contiguous range of keys_per_split visible keys, streamed in chunks of
// CK keys. Per chunk: stage k and v (coalesced vec4), scores of (head, key) pairs spread
// over threads, one thread per head updates its running max / sum and turns scores into
// probabilities, then each thread updates its (head, vec4 of head_dim) accumulators. The
// partial (max, sum, acc) goes to `part`; decode_combine rescales and sums the splits.

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
