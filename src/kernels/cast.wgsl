// wgml_cast: element i of src converted into element i of dst, between f32, f16 and bf16.
// Host: src/ops/cast.c. Every conversion works on the bits with integer arithmetic, so
// the result is the same on every device (a WGSL float conversion may round either way
// and may flush subnormals): 16-bit -> f32 exactly, f32 -> 16-bit rounded to nearest even,
// f16 beyond its range +-inf, NaN stays NaN (quiet), the sign of zero kept.
// Invocation w writes dst's 32-bit word w: one f32 element, or two 16-bit elements (the
// upper half of the last word zero when the count is odd).

struct Params { n: u32, words: u32, pad0: u32, pad1: u32 }

@group(0) @binding(0) var<uniform> u: Params;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;

override SRC: u32 = 0u;   // 0 f32, 1 f16, 2 bf16
override DST: u32 = 0u;

// f16 bits (low 16 bits of h) -> f32 bits
fn f16_to_f32(h: u32) -> u32 {
    let sign = (h & 0x8000u) << 16u;
    let e = (h >> 10u) & 0x1Fu;
    var m = h & 0x3FFu;
    if (e == 0x1Fu) { return sign | 0x7F800000u | (m << 13u) | select(0u, 0x400000u, m != 0u); }
    if (e != 0u) { return sign | ((e + 112u) << 23u) | (m << 13u); }
    if (m == 0u) { return sign; }
    // a subnormal m * 2^-24: normalise
    var ex = 113u;
    while ((m & 0x400u) == 0u) { m <<= 1u; ex -= 1u; }
    return sign | (ex << 23u) | ((m & 0x3FFu) << 13u);
}

// f32 bits -> f16 bits, round to nearest even
fn f32_to_f16(f: u32) -> u32 {
    let sign = (f >> 16u) & 0x8000u;
    let a = f & 0x7FFFFFFFu;
    if (a > 0x7F800000u) { return sign | 0x7E00u | ((a >> 13u) & 0x3FFu); }   // NaN, quiet
    if (a >= 0x477FF000u) { return sign | 0x7C00u; }   // 65520 and above (and inf): inf
    if (a >= 0x38800000u) {   // normal in f16 (2^-14 and above)
        let r = a - 0x38000000u;   // rebias the exponent by 112 (in place, above the mantissa)
        let q = (r >> 13u) + select(0u, 1u, (r & 0x1FFFu) > 0x1000u || ((r & 0x1FFFu) == 0x1000u && ((r >> 13u) & 1u) == 1u));
        return sign | q;
    }
    if (a < 0x33000000u) { return sign; }   // below half the smallest subnormal (2^-25): zero
    // subnormal in f16: (1.m) * 2^(e - 127) in units of 2^-24
    let e = a >> 23u;
    let m = (a & 0x7FFFFFu) | 0x800000u;
    let shift = 126u - e;   // 14 .. 24: m >> shift is the value in units of 2^-24
    let q = m >> shift;
    let rest = m & ((1u << shift) - 1u);
    let half = 1u << (shift - 1u);
    return sign | (q + select(0u, 1u, rest > half || (rest == half && (q & 1u) == 1u)));
}

// f32 bits -> bf16 bits, round to nearest even
fn f32_to_bf16(f: u32) -> u32 {
    if ((f & 0x7FFFFFFFu) > 0x7F800000u) { return (f >> 16u) | 0x40u; }   // NaN, quiet
    return (f + 0x7FFFu + ((f >> 16u) & 1u)) >> 16u;
}

// element i of src as f32 bits
fn load(i: u32) -> u32 {
    if (SRC == 0u) { return src[i]; }
    let h = (src[i >> 1u] >> ((i & 1u) * 16u)) & 0xFFFFu;
    if (SRC == 1u) { return f16_to_f32(h); }
    return h << 16u;
}

fn to16(f: u32) -> u32 {
    if (DST == 1u) { return f32_to_f16(f); }
    return f32_to_bf16(f);
}

@compute @workgroup_size(256)
fn convert(@builtin(global_invocation_id) gid: vec3u, @builtin(num_workgroups) nwg: vec3u) {
    let w = gid.x + gid.y * nwg.x * 256u;
    if (w >= u.words) { return; }
    if (DST == 0u) {
        dst[w] = load(w);
        return;
    }
    let i = 2u * w;
    var v = to16(load(i));
    if (i + 1u < u.n) { v |= to16(load(i + 1u)) << 16u; }
    dst[w] = v;
}
