// Top-k selection: the indices of the k largest of n f32 values, largest first, ties to the
// lower index, NaN below every number (k <= 1024).
//
// Order. Each value becomes an order-preserving u32 key read straight from its bits (no
// float arithmetic, so NaN payloads and -0 are handled exactly): x >= +0 -> bits | 2^31,
// x < 0 -> ~bits, -0 -> the key of +0 (they compare equal), NaN -> 0, below the key of -inf
// (0x007FFFFF). Candidates are then ordered by (key descending, index ascending): a total
// order in which every element has a distinct rank, so the result is deterministic.
//
// Small rows (n <= 1024): `sort_input`, one workgroup, loads the n (key, index) pairs into
// workgroup memory, bitonic-sorts them and writes the first k indices. One dispatch.
//
// Larger rows: an exact radix select in five dispatches, none of them single-threaded over
// the data, every one spread over G workgroups that each own a contiguous chunk of the row.
// It stops refining as soon as the threshold's bucket is small: once the bucket b holding the
// k-th largest key is known, the elements above b (exactly k - r of them, r = how many of b
// are needed) plus all of b's elements are a superset of the answer; when they number at
// most SMAX = 2048 they all go to the candidate list and the final sort picks the k (the sort
// orders by the total order, so this is exact and deterministic however the list was filled).
//   hist PASS 1  histogram of key bits [21, 32) (2048 bins) of every element
//   hist PASS 2  find the bin d1 holding the k-th largest key (every workgroup scans the
//                2048 bins itself: no extra dispatch). One-pass finish when the elements
//                from bin d1 up fit SMAX (typical of real-valued rows: an 11-bit bucket is a
//                quarter of an octave): write them all to the candidate list and stop.
//                Otherwise histogram bits [10, 21) of the elements whose top bits are d1
//   hist PASS 3  clear the first histogram; unless finished, find bin d2; two-pass finish
//                when the elements from the 22-bit bucket up fit SMAX (only the flag is
//                set here; collect writes them). Otherwise (heavy ties) histogram bits
//                [0, 10) (1024 bins) of the elements whose top 22 bits match; besides the
//                global histogram each workgroup writes its own 1024-bin slice, the
//                per-chunk count of every possible final key
//   collect      two-pass finish: write every element of the 22-bit bucket and above.
//                Otherwise every workgroup finds the k-th largest key T exactly and r, how
//                many of the elements equal to T belong to the top k (the k - r elements
//                above T all do); it writes its elements above T to the candidate list at
//                positions from a global counter, and its elements equal to T at positions
//                given by their rank among all ties in index order (the ties in earlier
//                chunks come from the slices), keeping only ranks below r: the lowest-index
//                ties
//   sort_candidates  one workgroup bitonic-sorts the candidates (k, or the counter's count
//                after a fast finish) and writes the first k indices; three network stages
//                per barrier in registers (see `bitonic`)
// The dispatch count is fixed when the work is recorded (no read-back), so a finished call
// still issues the later dispatches; they only clear scratch and return. What a fast finish
// saves is their passes over the row, the ranking of the ties and the slices.
// Workgroup histograms take the atomics (a thread merges runs of equal digits before it adds
// them, so even a row of equal values costs few atomics), then add their nonzero bins to the
// global histogram. Each pass reads the row once (after the first, from L2).
//
// Scratch (one engine-owned u32 buffer, `scratch`): the three global histograms and the
// counter must be zero when a call starts; each dispatch clears what the previous ones no
// longer need (PASS 3 the first histogram, collect the second, sort_candidates the third and
// the counter), so they are zero again when the call ends and no clearing dispatch is needed.
// The finish flags (STATE + 5 after one pass, STATE + 4 after two) are rewritten every call;
// STATE + 4 is stale when STATE + 5 is set, so readers test STATE + 5 first.
// The host drops the buffer (a new one starts zeroed) if a call fails midway.

const WGH: u32 = 256u;            // threads of the histogram and collect workgroups
const ITEMS: u32 = 2u;            // vec4 per thread per block in the histogram passes
const BLOCK: u32 = WGH * ITEMS * 4u;   // elements per block: 2048; chunks are multiples
const NB12: u32 = 2048u;          // bins of passes 1 and 2
const NB3: u32 = 1024u;           // bins of pass 3
const KMAX: u32 = 1024u;          // largest k
const SMAX: u32 = 2048u;          // capacity of the sorts

// scratch layout, in u32 words
const H1: u32 = 0u;
const H2: u32 = 2048u;
const H3: u32 = 4096u;
const CNT: u32 = 5120u;           // right after H3: cleared with it
const STATE: u32 = 5124u;         // d1, r1, prefix22, r2, fast22, fast11 (8 words)
const CAND: u32 = 5132u;          // SMAX (key, index) pairs
const SLICES: u32 = 9228u;        // G * NB3

override PASS: u32 = 1u;
override WGS: u32 = 256u;         // threads of the sorting workgroup

struct Params {
    n: u32,       // elements in the row
    k: u32,
    chunk: u32,   // elements per workgroup, a multiple of BLOCK
    groups: u32,  // G
}

@group(0) @binding(0) var<uniform> params: Params;
// hist, collect, sort_input
@group(0) @binding(1) var<storage, read> input: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> scratch: array<atomic<u32>>;
@group(0) @binding(2) var<storage, read_write> small_out: array<u32>;
// sort_candidates
@group(0) @binding(1) var<storage, read_write> cand_scratch: array<atomic<u32>>;
@group(0) @binding(2) var<storage, read_write> cand_out: array<u32>;

var<workgroup> wh: array<atomic<u32>, NB12>;
var<workgroup> scan: array<u32, WGH>;
var<workgroup> picked: vec3<u32>;
var<workgroup> mode: u32;
var<workgroup> flag: atomic<u32>;
// sort slots, one padding word after every 32 (see `slot`)
var<workgroup> skey: array<u32, SMAX + SMAX / 32u>;
var<workgroup> sidx: array<u32, SMAX + SMAX / 32u>;

fn key_of(bits: u32) -> u32 {
    var b = bits;
    if (b == 0x80000000u) { b = 0u; }                          // -0 ranks as +0
    if ((b & 0x7FFFFFFFu) > 0x7F800000u) { return 0u; }        // NaN: below -inf
    return select(b | 0x80000000u, ~b, (b & 0x80000000u) != 0u);
}

// Suffix sums of scan[0..WGH) in place: scan[t] becomes the sum of scan[t..WGH).
fn suffix_scan(t: u32) {
    for (var off = 1u; off < WGH; off <<= 1u) {
        var v = scan[t];
        if (t + off < WGH) { v += scan[t + off]; }
        workgroupBarrier();
        scan[t] = v;
        workgroupBarrier();
    }
}

// Over the nb-bin histogram at scratch[base..), finds the bin d holding the r-th largest of
// the counted keys (1 <= r <= their count) and how many of bin d's keys are needed:
// r - (count in the bins above d), and bin d's count. Called by the whole workgroup; every
// thread gets it.
fn find_digit(base: u32, nb: u32, r: u32, t: u32) -> vec3<u32> {
    let per = nb / WGH;
    var bins: array<u32, 8>;
    var s = 0u;
    for (var b = 0u; b < per; b++) {
        bins[b] = atomicLoad(&scratch[base + t * per + b]);
        s += bins[b];
    }
    scan[t] = s;
    workgroupBarrier();
    suffix_scan(t);
    let above = select(0u, scan[t + 1u], t + 1u < WGH);   // keys in the bins of later threads
    if (scan[t] >= r && above < r) {
        var acc = above;
        for (var b = per; b > 0u; b--) {
            let c = bins[b - 1u];
            if (acc + c >= r) {
                picked = vec3<u32>(t * per + b - 1u, r - acc, c);
                break;
            }
            acc += c;
        }
    }
    return workgroupUniformLoad(&picked);
}

fn chunk_range(w: u32) -> vec2<u32> {   // [begin, end) elements of workgroup w
    let begin = w * params.chunk;
    return vec2<u32>(begin, min(begin + params.chunk, params.n));
}

// Appends every element of workgroup w's chunk whose key has (key >> shift) >= prefix to the
// candidate list (the fast finishes; the sort orders them and keeps k).
fn gather(w: u32, t: u32, shift: u32, prefix: u32) {
    let range = chunk_range(w);
    for (var v = range.x / 4u + t; 4u * v < range.y; v += WGH) {
        let q = input[v];
        let valid = min(4u, range.y - 4u * v);
        for (var l = 0u; l < valid; l++) {
            let key = key_of(q[l]);
            if ((key >> shift) >= prefix) {
                let pos = atomicAdd(&scratch[CNT], 1u);
                atomicStore(&scratch[CAND + 2u * pos], key);
                atomicStore(&scratch[CAND + 2u * pos + 1u], 4u * v + l);
            }
        }
    }
}

// ---- histogram passes ------------------------------------------------------------------------

@compute @workgroup_size(WGH)
fn hist(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u) {
    let t = lid.x;
    let w = wid.x;
    // which elements this pass counts: (key >> match_shift) == prefix, all in pass 1
    var prefix = 0u;
    var match_shift = 32u;
    var digit_shift = 21u;
    var digit_mask = 0x7FFu;
    var nb = NB12;
    var hbase = H1;
    if (PASS == 2u) {
        let d = find_digit(H1, NB12, params.k, t);
        // fast after one pass: the elements above the 11-bit bucket of the k-th largest key
        // (k - d.y of them) and the whole bucket (d.z) fit the final sort
        let fast11 = params.k - d.y + d.z <= SMAX;
        if (w == 0u && t == 0u) {
            atomicStore(&scratch[STATE], d.x);
            atomicStore(&scratch[STATE + 1u], d.y);
            atomicStore(&scratch[STATE + 5u], select(0u, 1u, fast11));
        }
        if (fast11) {
            gather(w, t, 21u, d.x);
            return;   // no second histogram: H2 stays zero
        }
        prefix = d.x;
        match_shift = 21u;
        digit_shift = 10u;
        hbase = H2;
    }
    if (PASS == 3u) {
        // the first histogram is no longer needed: leave it zero for the next call
        for (var i = w * WGH + t; i < NB12; i += params.groups * WGH) {
            atomicStore(&scratch[H1 + i], 0u);
        }
        if (t == 0u) { mode = atomicLoad(&scratch[STATE + 5u]); }
        if (workgroupUniformLoad(&mode) != 0u) { return; }   // finished after one pass
        let d1 = atomicLoad(&scratch[STATE]);
        let r1 = atomicLoad(&scratch[STATE + 1u]);
        let d = find_digit(H2, NB12, r1, t);
        prefix = (d1 << 11u) | d.x;
        // fast: the elements above the 22-bit bucket (k - d.y of them) and the whole bucket
        // (d.z) fit the final sort, which then picks the top k itself
        let fast = params.k - d.y + d.z <= SMAX;
        if (w == 0u && t == 0u) {
            atomicStore(&scratch[STATE + 2u], prefix);
            atomicStore(&scratch[STATE + 3u], d.y);
            atomicStore(&scratch[STATE + 4u], select(0u, 1u, fast));
        }
        match_shift = 10u;
        digit_shift = 0u;
        digit_mask = 0x3FFu;
        nb = NB3;
        hbase = H3;
        if (fast) { return; }   // no third histogram: H3 and the slices stay unused
    }
    for (var b = t; b < nb; b += WGH) { atomicStore(&wh[b], 0u); }
    workgroupBarrier();

    let range = chunk_range(w);
    var cur = 0xFFFFFFFFu;
    var run = 0u;
    for (var base = range.x; base < range.y; base += BLOCK) {
        for (var it = 0u; it < ITEMS; it++) {
            let v = base / 4u + it * WGH + t;
            if (4u * v >= range.y) { continue; }
            let q = input[v];
            for (var l = 0u; l < 4u; l++) {
                if (4u * v + l >= range.y) { break; }
                let key = key_of(q[l]);
                // shifting a u32 by 32 is not allowed: pass 1 matches everything
                if (match_shift < 32u && (key >> match_shift) != prefix) { continue; }
                let d = (key >> digit_shift) & digit_mask;
                if (d == cur) {
                    run++;
                } else {
                    if (run > 0u) { atomicAdd(&wh[cur], run); }
                    cur = d;
                    run = 1u;
                }
            }
        }
    }
    if (run > 0u) { atomicAdd(&wh[cur], run); }
    workgroupBarrier();
    for (var b = t; b < nb; b += WGH) {
        let c = atomicLoad(&wh[b]);
        if (c != 0u) { atomicAdd(&scratch[hbase + b], c); }
        if (PASS == 3u) { atomicStore(&scratch[SLICES + w * NB3 + b], c); }
    }
}

// ---- collect ----------------------------------------------------------------------------------

@compute @workgroup_size(WGH)
fn collect(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u) {
    let t = lid.x;
    let w = wid.x;
    let prefix22 = atomicLoad(&scratch[STATE + 2u]);
    let r2 = atomicLoad(&scratch[STATE + 3u]);
    // 2: finished after one pass (the candidates are written), 1: after two, 0: ties to rank
    if (t == 0u) {
        mode = select(atomicLoad(&scratch[STATE + 4u]), 2u, atomicLoad(&scratch[STATE + 5u]) != 0u);
    }
    let m = workgroupUniformLoad(&mode);
    // the second histogram is no longer needed: leave it zero for the next call
    for (var i = w * WGH + t; i < NB12; i += params.groups * WGH) {
        atomicStore(&scratch[H2 + i], 0u);
    }
    if (m == 2u) { return; }
    if (m == 1u) {
        // every element at or above the 22-bit bucket is a candidate; the sort picks the k
        gather(w, t, 10u, prefix22);
        return;
    }
    let range = chunk_range(w);
    let d = find_digit(H3, NB3, r2, t);
    let T = (prefix22 << 10u) | d.x;        // the k-th largest key
    let r = d.y;                            // how many elements equal to T are taken
    let k = params.k;

    // ties (elements equal to T) in the chunks before this one
    var s = 0u;
    for (var v = t; v < w; v += WGH) { s += atomicLoad(&scratch[SLICES + v * NB3 + d.x]); }
    scan[t] = s;
    workgroupBarrier();
    suffix_scan(t);
    var ties_before = workgroupUniformLoad(&scan[0]);

    for (var base = range.x; base < range.y; base += WGH * 4u) {
        let v = base / 4u + t;
        var q = vec4<u32>(0u);
        var valid = 0u;
        if (4u * v < range.y) {
            q = input[v];
            valid = min(4u, range.y - 4u * v);
        }
        var eq = 0u;
        for (var l = 0u; l < valid; l++) {
            let key = key_of(q[l]);
            if (key > T) {
                let pos = atomicAdd(&scratch[CNT], 1u);
                atomicStore(&scratch[CAND + 2u * pos], key);
                atomicStore(&scratch[CAND + 2u * pos + 1u], 4u * v + l);
            } else if (key == T) {
                eq++;
            }
        }
        // ties in index order: an exclusive scan of the per-thread counts, only when this
        // block has ties and some of the r are still to be taken
        if (t == 0u) { atomicStore(&flag, 0u); }
        workgroupBarrier();
        if (eq != 0u) { atomicOr(&flag, 1u); }
        let any_eq = workgroupUniformLoad(&flag);
        if (any_eq != 0u && ties_before < r) {
            scan[t] = eq;
            workgroupBarrier();
            suffix_scan(t);
            let total = workgroupUniformLoad(&scan[0]);
            var rank = ties_before + total - scan[t];   // ties before this thread's
            for (var l = 0u; l < valid; l++) {
                if (key_of(q[l]) == T) {
                    if (rank < r) {
                        let pos = k - r + rank;
                        atomicStore(&scratch[CAND + 2u * pos], T);
                        atomicStore(&scratch[CAND + 2u * pos + 1u], 4u * v + l);
                    }
                    rank++;
                }
            }
            ties_before += total;
            workgroupBarrier();   // scan is reused by the next block
        }
    }
}

// ---- sorting ----------------------------------------------------------------------------------

// a comes before b: larger key, or the same key and a lower index
fn before(ka: u32, ia: u32, kb: u32, ib: u32) -> bool {
    return ka > kb || (ka == kb && ia < ib);
}

fn pow2_at_least(m: u32) -> u32 {   // and at least 8, the group size of `bitonic`
    if (m <= 8u) { return 8u; }
    return 1u << (32u - countLeadingZeros(m - 1u));
}

// Where sort position i lives in skey/sidx: one padding word after every 32, so the groups of
// 8 consecutive positions that the lanes of a subgroup load in the low-stride rounds (lane g at
// 8g + j) spread over all 32 banks instead of 4.
fn slot(i: u32) -> u32 { return i + (i >> 5u); }

// Bitonic sort of positions [0, p) of skey/sidx into "before" order; p a power of two,
// 8 <= p <= SMAX.
// The network has log2(p) * (log2(p) + 1) / 2 compare-exchange stages (55 for p = 1024). A
// thread does up to three consecutive stages of one merge in registers: stages of strides
// 2^h, 2^(h-1), 2^(h-2) only pair elements whose positions differ in bits b..b+2
// (b = max(h - 2, 0)), so the p positions fall into p / 8 closed groups of 8; a thread loads
// a group, runs the (up to) three stages on it and stores it back. One barrier per round of
// three stages instead of one per stage: 22 rounds for p = 1024 (55 stages), 9 for p = 64.
fn bitonic(p: u32, t: u32) {
    let lp = 31u - countLeadingZeros(p);
    for (var s = 1u; s <= lp; s++) {
        let size = 1u << s;
        var hi = i32(s) - 1;              // log2 of the largest stride of this round
        while (hi >= 0) {
            let lo = max(hi - 2, 0);      // log2 of its smallest stride
            let b = u32(max(hi - 2, 0));  // the group's lowest varying bit; b + 3 <= lp
            for (var g = t; g < p / 8u; g += WGS) {
                let base = ((g >> b) << (b + 3u)) | (g & ((1u << b) - 1u));
                var kk: array<u32, 8>;
                var ii: array<u32, 8>;
                for (var j = 0u; j < 8u; j++) {
                    kk[j] = skey[slot(base + (j << b))];
                    ii[j] = sidx[slot(base + (j << b))];
                }
                for (var c = 3u; c > 0u; c--) {   // stride 2^(b + c - 1), largest first
                    let m = i32(b + c - 1u);
                    if (m > hi || m < lo) { continue; }
                    let d = 1u << (c - 1u);
                    for (var j = 0u; j < 8u; j++) {
                        if ((j & d) != 0u) { continue; }
                        let ka = kk[j];
                        let ia = ii[j];
                        let kb = kk[j | d];
                        let ib = ii[j | d];
                        // ascending runs (in "before" order) where bit `size` of the position is clear
                        let forward = ((base + (j << b)) & size) == 0u;
                        if (select(before(ka, ia, kb, ib), before(kb, ib, ka, ia), forward)) {
                            kk[j] = kb;
                            ii[j] = ib;
                            kk[j | d] = ka;
                            ii[j | d] = ia;
                        }
                    }
                }
                for (var j = 0u; j < 8u; j++) {
                    skey[slot(base + (j << b))] = kk[j];
                    sidx[slot(base + (j << b))] = ii[j];
                }
            }
            workgroupBarrier();
            hi -= 3;
        }
    }
}

@compute @workgroup_size(WGS)
fn sort_input(@builtin(local_invocation_id) lid: vec3u) {
    let t = lid.x;
    let n = params.n;
    let p = pow2_at_least(n);
    for (var i = t; i < p; i += WGS) {
        if (i < n) {
            skey[slot(i)] = key_of(input[i / 4u][i % 4u]);
            sidx[slot(i)] = i;
        } else {
            skey[slot(i)] = 0u;
            sidx[slot(i)] = 0xFFFFFFFFu;
        }
    }
    workgroupBarrier();
    bitonic(p, t);
    for (var i = t; i < params.k; i += WGS) { small_out[i] = sidx[slot(i)]; }
}

@compute @workgroup_size(WGS)
fn sort_candidates(@builtin(local_invocation_id) lid: vec3u) {
    let t = lid.x;
    let k = params.k;
    // candidates: k, or after a fast finish all CNT elements at or above the threshold bucket
    // (the 22-bit flag is stale when the 11-bit one is set, which then decides anyway)
    if (t == 0u) {
        let fast = atomicLoad(&cand_scratch[STATE + 4u]) != 0u || atomicLoad(&cand_scratch[STATE + 5u]) != 0u;
        mode = select(k, atomicLoad(&cand_scratch[CNT]), fast);
    }
    let count = workgroupUniformLoad(&mode);
    let p = pow2_at_least(count);
    for (var i = t; i < p; i += WGS) {
        if (i < count) {
            skey[slot(i)] = atomicLoad(&cand_scratch[CAND + 2u * i]);
            sidx[slot(i)] = atomicLoad(&cand_scratch[CAND + 2u * i + 1u]);
        } else {
            skey[slot(i)] = 0u;
            sidx[slot(i)] = 0xFFFFFFFFu;
        }
    }
    // the third histogram and the counter are no longer needed: zero for the next call
    for (var i = t; i <= NB3; i += WGS) { atomicStore(&cand_scratch[H3 + i], 0u); }
    workgroupBarrier();
    bitonic(p, t);
    for (var i = t; i < k; i += WGS) { cand_out[i] = sidx[slot(i)]; }
}
