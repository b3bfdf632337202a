// Flash attention backward: dq, dk, dv from q, k, v, dout and the forward's row statistics.
// Compiled after attention_prelude.wgsl (layout, visibility, dropout, log2 units and the
// shared helpers are described there).
//
// The backward of softmax attention per (batch, query head): P = exp2(S - lse) from the
// forward's log-sum-exp, dP = dout v^T, D = rowsum(dout * out), dS = P (Z dP - D) with Z
// the dropout factors, then dv = (Z P)^T dout, dk = scale dS^T q, dq = scale dS k. Every
// kernel reads the statistics (lse, D per query row) that a statistics pass wrote to
// `stats`: bwd_prep here from a given log-sum-exp, else prefill_stats or fwd in MODE 1
// (attention_forward.wgsl).
//
// Entry points
//   bwd_prep        the statistics from the forward's log-sum-exp (options.lse).
//   bwd_dkdv64      dk, dv per 64-key block (256 threads), looping over the group's query
//                   heads and their visible 64-query blocks; with WRITE_DS it also stores
//                   dS (DS_DENSE: as one dense dS^T per head); with READ_S it reads the
//                   forward's kept scores instead of computing S.
//   bwd_dq_mm       dq = dS k from the dense dS^T, as a register-tiled matrix product
//                   (head_dim % 4 == 0).
//   bwd_dq_ds64     dq from dS stored in 64 x 64 blocks (head_dim % 4 == 2).
//   bwd_dq64        dq per 64-query block with S, dP and dS recomputed: where dS is not
//                   kept (its blocks exceed the memory cap, or dk, dv run tiled).
//   bwd_dq, bwd_dkdv  the tiled kernels (shape in the prelude) for adapters whose
//                   workgroup storage does not hold the 64 x 64 ones, and for head_dim
//                   above 128.
//
// Why so: without float atomics dq cannot be accumulated from key-block workgroups, and a
// dq workgroup that recomputes S and dP does three block products where reading dS does
// one; so bwd_dkdv64 stores dS (16 KiB per block pair, written once, read once) and dq is
// a separate product over it, in the layout the matrix products run fastest in. Results
// are deterministic: every sum runs in a fixed order.

@group(0) @binding(9) var<storage, read_write> ds_out: array<vec4f>;     // bwd_dkdv64 (WRITE_DS)
@group(0) @binding(10) var<storage, read> s_in: array<vec4f>;            // bwd_dkdv64 (READ_S; else q is bound)
@group(0) @binding(7) var<storage, read> ds_in: array<vec4f>;            // bwd_dq_ds64, bwd_dq_mm
@group(0) @binding(5) var<storage, read_write> dq4: array<vec4f>;        // bwd_dq_mm

// ---- bwd_prep -------------------------------------------------------------------------------

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

// ---- bwd_dq, bwd_dkdv: the tiled kernels --------------------------------------------------

// dq: one workgroup per block of BR queries, the visible key blocks streamed through.
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
// Accumulators acc[4r + j] of vec4 column j0 + j (j0: 0 lo, 4 hi; see Acc16 in the
// prelude): += w[r] times the staged k row at `row`; times scale into the q tile.
fn dq_mac(acc: ptr<function, Acc16>, j0: u32, w: vec4f, row: u32, c: u32) {
    for (var j = 0u; j < 4u; j++) {
        if (j0 + j < OCV) {
            let kv = dq_b[row + c + TC * (j0 + j)];
            (*acc)[j] += w.x * kv;
            (*acc)[4u + j] += w.y * kv;
            (*acc)[8u + j] += w.z * kv;
            (*acc)[12u + j] += w.w * kv;
        }
    }
}
fn dq_put(acc: ptr<function, Acc16>, j0: u32, g: u32, c: u32) {
    for (var j = 0u; j < 4u; j++) {
        if (j0 + j < OCV) {
            let col = c + TC * (j0 + j);
            dq_a[(4u * g) * RS + col] = (*acc)[j] * p.scale;
            dq_a[(4u * g + 1u) * RS + col] = (*acc)[4u + j] * p.scale;
            dq_a[(4u * g + 2u) * RS + col] = (*acc)[8u + j] * p.scale;
            dq_a[(4u * g + 3u) * RS + col] = (*acc)[12u + j] * p.scale;
        }
    }
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
    var acc = Acc16();               // acc[4 * r + j]: row 4g + r, vec4 c + TC * j of the head
    var acc_hi = Acc16();            // the same for vec4 c + TC * (4 + j) (OCV > 4)
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
            dq_mac(&acc, 0u, w, kk * RS, c);
            if (OCV > 4u) { dq_mac(&acc_hi, 4u, w, kk * RS, c); }
        }
    }

    workgroupBarrier();
    dq_put(&acc, 0u, g, c);
    if (OCV > 4u) { dq_put(&acc_hi, 4u, g, c); }
    workgroupBarrier();
    for (var r = g; r < BR; r += RG) {
        let i = i0 + r;
        if (i < p.seq_q) {
            for (var d4 = c; d4 < p.d4; d4 += TC) { st_dst(q_base + i * q_stride, d4, dq_a[r * RS + d4]); }
        }
    }
}

// dk, dv: one workgroup per block of BR keys, looping over the group's query heads and
// their visible query blocks in a fixed order.
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
// acc[4r + j] += w[r] * x[vec4 c + TC * (j0 + j)] of the staged row at `row` (j0: 0 lo, 4 hi)
fn kv_mac(acc: ptr<function, Acc16>, j0: u32, w: vec4f, row: u32, c: u32) {
    for (var j = 0u; j < 4u; j++) {
        if (j0 + j < OCV) {
            let x = kv_b[row + c + TC * (j0 + j)];
            (*acc)[j] += w.x * x;
            (*acc)[4u + j] += w.y * x;
            (*acc)[8u + j] += w.z * x;
            (*acc)[12u + j] += w.w * x;
        }
    }
}
// acc[4r + j] += sum over the block's columns of w[col][row 4g + r] * x[col][vec4 c + TC*j],
// lo holding j < 4 and hi 4 <= j < 8 (see Acc16 in the prelude)
fn kv_phase2(lo: ptr<function, Acc16>, hi: ptr<function, Acc16>, w_off: u32, x_off: u32, g: u32, c: u32) {
    for (var ci = 0u; ci < BC; ci++) {
        let w = kv_w[w_off + ci * RG + g];
        kv_mac(lo, 0u, w, x_off + ci * RS, c);
        if (OCV > 4u) { kv_mac(hi, 4u, w, x_off + ci * RS, c); }
    }
}
// dk (times scale) and dv of vec4 columns j0 + j into the k, v tiles
fn kv_put(dk: ptr<function, Acc16>, dv: ptr<function, Acc16>, j0: u32, g: u32, c: u32) {
    for (var j = 0u; j < 4u; j++) {
        if (j0 + j < OCV) {
            for (var r = 0u; r < 4u; r++) {
                let at = (4u * g + r) * RS + c + TC * (j0 + j);
                kv_a[at] = (*dk)[4u * r + j] * p.scale;
                kv_a[BR * RS + at] = (*dv)[4u * r + j];
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
    var dk = Acc16();                // dk[4 * r + j]: key 4g + r, vec4 c + TC * j of the head
    var dv = Acc16();
    var dk_hi = Acc16();             // the same for vec4 c + TC * (4 + j) (OCV > 4)
    var dv_hi = Acc16();
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
                kv_phase2(&dv, &dv_hi, 0u, 0u, g, c);
                workgroupBarrier();
                kv_stage_q(0u, qb, q_base, q_stride, g, c);
                workgroupBarrier();
                kv_phase2(&dk, &dk_hi, BC * RG, 0u, g, c);
            } else {
                workgroupBarrier();
                kv_phase2(&dv, &dv_hi, 0u, BC * RS, g, c);
                kv_phase2(&dk, &dk_hi, BC * RG, 0u, g, c);
            }
        }
    }

    workgroupBarrier();
    kv_put(&dk, &dv, 0u, g, c);
    if (OCV > 4u) { kv_put(&dk_hi, &dv_hi, 4u, g, c); }
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

// ---- the 64 x 64 kernels: bwd_dq64, bwd_dq_ds64, bwd_dkdv64 -------------------------------
//
// Why: bwd_dq / bwd_dkdv keep whole [rows][head_dim] tiles in workgroup memory, which at
// head_dim 128 allows only small blocks of few threads per workgroup, so occupancy, not
// arithmetic, bounds them. These entries never hold a full head_dim row in workgroup
// memory: they stream head_dim like a matrix product streams K.
//
// Shape: 256 threads, 64 "rows" x 64 "columns" per block (bwd_dq64: rows = queries, columns
// = keys; bwd_dkdv64: rows = keys, columns = queries), thread (tr, tc) (g_tr, g_tc).
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
//  * Workgroup memory: g_w 16 KiB + g_st 64*GBK vec4 (8, 16 or 32 KiB at GBK 8, 16, 32). The
//    same g_st region holds the chunks of the block products (G_KR x 16*GOCV vec4).
//  Everything else (scale in log2 units, P = exp2(s - lse) from the MODE-1 statistics, the
//  dropout hash, dS = P (Z dP - D), masks, windows, causal offset, empty rows -> 0) is
//  exactly as in bwd_dq / bwd_dkdv; q (dq) or k (dkdv) is pre-scaled while staged.
// Registers decide the speed: 256 threads run two workgroups per SM up to 128 registers
// per thread and one above (bench/notes/registers.md has the counts).
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

// Thread (tr, tc) of the 64 x 64 entries: tc from tid bits 0, 2, 3, 4 and tr from bits 1,
// 5, 6, 7, so that lanes n and n^1 have the same tr (their row-operand reads, indexed by
// tr, hit one address) and lanes n and n^2 the same tc (column operand). A 16-byte
// workgroup read returns 128 bytes per cycle, 4 cycles per warp, but 2 where such lane
// pairs share its addresses (NVIDIA).
fn g_tr(tid: u32) -> u32 {
    return ((tid >> 1u) & 1u) | ((tid >> 4u) & 14u);
}
fn g_tc(tid: u32) -> u32 {
    return (tid & 1u) | ((tid >> 1u) & 14u);
}
// The swizzle of g_w: column group cg's vec4 of row group r sits in slot r ^ g_swz(cg), so
// that the 8 lanes of a 16-byte store phase (4 column groups x 2 row groups) hit 8
// different 16-byte bank groups.
fn g_swz(cg: u32) -> u32 { return (2u * cg) & 15u; }

// Per-thread values live in structs with named members, never in arrays indexed in loops:
// a driver that does not unroll such a loop keeps the array in local memory, many times
// slower.
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
        // trip count lets the driver unroll and schedule the loop.
        // G_SUB > 0: G_SUB steps (a constant trip count, unrolled) inside a loop of p.subs =
        // GBK / G_SUB trips that the driver cannot count, so that it does not unroll the
        // whole chunk (the host's rule at GBK 32, where the whole chunk costs registers)
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

// ---- bwd_dq_mm: dq = scale * dS k from the dense dS^T of bwd_dkdv64 (DS_DENSE) ---------
//
// For each query head of the range, dq [seq_q, head_dim] is a matrix product with a
// reduction over the keys: dS^T [keys][queries] (contiguous along the queries) against k
// [keys][head_dim] (contiguous along head_dim), the layout in which matmul_at runs fastest
// (bench/notes/matmul.md). So it runs as the product step of the prelude, not in 64 x 64
// blocks: 128 queries x DQN head_dim columns per workgroup, 8 x 8 per thread (2 + 2 vec4
// reads from workgroup memory per 64 FMAs, where bwd_dq_ds64's 4 x 4 reads 2 per 16).
// Workgroups go longest first (block_of over all heads of the range: the host passes
// order_heads = all). The keys of a tile are key_range of its rows; a step whose 8 keys are
// not all visible to all of its rows (the causal diagonal, a window, the end of the keys or
// of the queries) loads dS^T through visible4, so the blocks bwd_dkdv64 did not visit (left
// unwritten) read as 0; in the others every pair is visible, inside visited blocks.
// head_dim % 4 == 0 (the host's rule; vec4 rows of k and dq), DQN >= head_dim.

// dS^T vec4 v of a step at keys k0.., queries m0..: key k0 + v / 32, queries m0 + 4 (v % 32)..
// Branch-free (plain or not, the same load and select): a value merged from two branches
// made the driver wait for the load at the merge, before the step's products.
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
    // n^2 on one column group (matmul.wgsl's lane_xy)
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
        if (t + 1u < nsteps) {
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
