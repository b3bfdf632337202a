// The per-vocabulary work of sampling (src/sample_gpu.c): for each of n rows of logits, one
// workgroup
//   1. copies its row to `z` and applies the row's penalties to the tokens of its history
//      (a list of (id, amount) pairs, ids unique within a row): z /= r where positive,
//      z *= r otherwise (repetition penalty r; 1 is off), then z -= amount (presence plus
//      frequency times count, computed on the host);
//   2. finds the largest live value M (live: a number above -inf) and the count of live
//      values, then S = sum over live values of exp((z - M) / t) in a fixed order: each
//      thread sums one contiguous segment of ids, the segment sums are added in order;
//   3. either (k = 0) draws: the first id, in id order, at which the running sum of
//      exp((z - M) / t) exceeds u * S (u in [0, 1) from the host; the last live id if
//      rounding leaves u * S at or past a segment's end, that segment's last live id), or (k >= 1) selects the min(k, live) largest
//      live values, ties to the lower id: a radix select over an order-preserving u32 key
//      (four 8-bit digits, one pass over the row each) finds the k-th largest key T and how
//      many values equal to T belong; then every thread writes its segment's values above T
//      and its share of the lowest-id ties, in id order (the host sorts them).
// A row's output: word 0 M's bits, 1 S's bits, 2 the live count, 3 the drawn id (k = 0) or
// the number of candidates written, then the candidates as (z bits, id) pairs from word 4.
// +inf values make M infinite and S meaningless; the host sees M and falls back to its own
// path. Every loop that holds a barrier runs on workgroup-uniform bounds (row values are
// read through workgroupUniformLoad).

struct Params {
    vocab: u32,     // entries per row
    stride: u32,    // output words per row: 4 + 2 * the largest k
}

// Per row, 8 u32 words: the logits row it reads, k (0: draw), first penalty pair, pairs,
// temperature (f32 bits, > 0), u (f32 bits), repetition penalty (f32 bits), unused.
struct Row {
    src: u32,
    k: u32,
    pen_first: u32,
    pen_count: u32,
    temperature: f32,
    u: f32,
    repetition: f32,
    pad: u32,
}

override WG: u32 = 256u;   // threads per row: 256 or 32 (src/sample_gpu.c), at most 256

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read> rows: array<Row>;
@group(0) @binding(3) var<storage, read> pens: array<vec2<u32>>;   // (id, amount bits)
@group(0) @binding(4) var<storage, read_write> z: array<f32>;
@group(0) @binding(5) var<storage, read_write> out: array<u32>;

var<workgroup> row_w: Row;
var<workgroup> red: array<f32, WG>;
var<workgroup> cnt: array<u32, WG>;
var<workgroup> cnt2: array<u32, WG>;
var<workgroup> hist: array<atomic<u32>, 256>;
var<workgroup> pick: vec2<u32>;
var<workgroup> bcast: f32;

const NEG_INF_BITS: u32 = 0xff800000u;

// Order-preserving key of a live value (-0 as +0); 0 for NaN and -inf, below every live key.
fn key_of(x: f32) -> u32 {
    var b = bitcast<u32>(x);
    if (b == 0x80000000u) { b = 0u; }
    if ((b & 0x7FFFFFFFu) > 0x7F800000u || b == NEG_INF_BITS) { return 0u; }
    return select(b | 0x80000000u, ~b, (b & 0x80000000u) != 0u);
}

fn live(x: f32) -> bool { return key_of(x) != 0u; }

// Exclusive prefix sums of cnt (and cnt2) in place, by thread 0 (WG additions).
fn exclusive_scan(t: u32) {
    workgroupBarrier();
    if (t == 0u) {
        var a = 0u;
        var b = 0u;
        for (var i = 0u; i < WG; i++) {
            let x = cnt[i];
            let y = cnt2[i];
            cnt[i] = a;
            cnt2[i] = b;
            a += x;
            b += y;
        }
    }
    workgroupBarrier();
}

@compute @workgroup_size(WG)
fn sample_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let r = wid.x;
    if (t == 0u) { row_w = rows[r]; }
    let row = workgroupUniformLoad(&row_w);
    let V = p.vocab;
    let base = r * V;
    let src = row.src * V;
    let ob = r * p.stride;

    // 1. the row, then its penalties
    for (var i = t; i < V; i += WG) { z[base + i] = logits[src + i]; }
    storageBarrier();
    for (var j = t; j < row.pen_count; j += WG) {
        let e = pens[row.pen_first + j];
        var v = z[base + e.x];
        if (row.repetition != 1.0) { v = select(v * row.repetition, v / row.repetition, v > 0.0); }
        z[base + e.x] = v - bitcast<f32>(e.y);
    }
    storageBarrier();

    // 2. M and the live count (strided), then S over contiguous segments
    var m = -0x1.fffffep+127f;
    var c = 0u;
    for (var i = t; i < V; i += WG) {
        let v = z[base + i];
        if (live(v)) { m = max(m, v); c += 1u; }
    }
    red[t] = m;
    cnt[t] = c;
    for (var off = WG / 2u; off > 0u; off >>= 1u) {
        workgroupBarrier();
        if (t < off) {
            red[t] = max(red[t], red[t + off]);
            cnt[t] += cnt[t + off];
        }
    }
    let nlive = workgroupUniformLoad(&cnt[0]);   // with a barrier before and after
    let M = red[0];
    workgroupBarrier();
    let seg = (V + WG - 1u) / WG;
    let lo = min(t * seg, V);
    let hi = min(lo + seg, V);
    var s = 0.0;
    for (var i = lo; i < hi; i++) {
        let v = z[base + i];
        if (live(v)) { s += exp((v - M) / row.temperature); }
    }
    red[t] = s;
    workgroupBarrier();
    if (t == 0u) {
        var total = 0.0;
        for (var i = 0u; i < WG; i++) {
            let x = red[i];
            red[i] = total;   // exclusive prefix: the mass before segment i
            total += x;
        }
        bcast = total;
        out[ob] = bitcast<u32>(M);
        out[ob + 1u] = bitcast<u32>(total);
        out[ob + 2u] = nlive;
    }
    let S = workgroupUniformLoad(&bcast);

    if (row.k == 0u) {
        // 3a. the draw: the segment holding u * S, then the id within it
        let goal = row.u * S;
        if (t == 0u) { pick = vec2<u32>(0xFFFFFFFFu, 0u); }
        workgroupBarrier();
        // exactly one thread holds the last segment starting at or before the target; it walks
        // its segment in the order its sum was taken (rounding may leave the target past the
        // segment's end: then its last live id)
        if (red[t] <= goal && (t + 1u == WG || goal < red[t + 1u])) {
            let local_goal = goal - red[t];
            var acc = 0.0;
            var found = 0xFFFFFFFFu;
            for (var i = lo; i < hi; i++) {
                let v = z[base + i];
                if (!live(v)) { continue; }
                found = i;
                acc += exp((v - M) / row.temperature);
                if (local_goal < acc) { break; }
            }
            pick.x = found;
        }
        workgroupBarrier();
        if (t == 0u) {
            var tok = pick.x;
            if (tok == 0xFFFFFFFFu) {
                // the last segment was dead: the last live id
                for (var i = V; i > 0u; i--) {
                    if (live(z[base + i - 1u])) { tok = i - 1u; break; }
                }
            }
            out[ob + 3u] = tok;
        }
        return;
    }

    // 3b. the k largest: T's digits from the top
    let k = min(row.k, nlive);
    var prefix = 0u;
    var mask = 0u;
    var need = k;   // how many keys still to place within the prefix's bucket
    for (var d = 0u; d < 4u && k > 0u; d++) {
        let shift = 24u - 8u * d;
        for (var b = t; b < 256u; b += WG) { atomicStore(&hist[b], 0u); }
        workgroupBarrier();
        for (var i = t; i < V; i += WG) {
            let key = key_of(z[base + i]);
            if (key != 0u && (key & mask) == prefix) { atomicAdd(&hist[(key >> shift) & 255u], 1u); }
        }
        workgroupBarrier();
        if (t == 0u) {
            var above = 0u;
            for (var b = 256u; b > 0u; b--) {
                let h = atomicLoad(&hist[b - 1u]);
                if (above + h >= need) {
                    pick = vec2<u32>(b - 1u, need - above);
                    break;
                }
                above += h;
            }
        }
        let pk = workgroupUniformLoad(&pick);
        prefix |= pk.x << shift;
        mask |= 255u << shift;
        need = pk.y;
    }
    // prefix is T; need of the values equal to T belong, the k - need above T all do
    var gt = 0u;
    var eq = 0u;
    for (var i = lo; i < hi && k > 0u; i++) {
        let key = key_of(z[base + i]);
        if (key > prefix) { gt += 1u; } else if (key == prefix && key != 0u) { eq += 1u; }
    }
    cnt[t] = gt;
    cnt2[t] = eq;
    exclusive_scan(t);
    var og = cnt[t];
    var oe = cnt2[t];
    for (var i = lo; i < hi && k > 0u; i++) {
        let v = z[base + i];
        let key = key_of(v);
        var slot = 0xFFFFFFFFu;
        if (key > prefix) { slot = og; og += 1u; }
        else if (key == prefix && key != 0u) {
            if (oe < need) { slot = k - need + oe; }
            oe += 1u;
        }
        if (slot != 0xFFFFFFFFu) {
            out[ob + 4u + 2u * slot] = bitcast<u32>(v);
            out[ob + 5u + 2u * slot] = i;
        }
    }
    if (t == 0u) { out[ob + 3u] = k; }
}
