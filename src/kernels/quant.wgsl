// Dequantization: raw bytes to floats, and MLX-style affine groups to floats.
//
//   dequantize_bytes  out[i] = f32(byte i of input), bytes little-endian within each u32
//   affine            out[i] = q(i) * scale[i / GS] + bias[i / GS]
//                     q(i): BITS = 8: byte i of weight (bits [8j, 8j + 8) of word i / 4, j = i % 4)
//                           BITS = 4: nibble i (bits [4j, 4j + 4) of word i / 8, j = i % 8)
//
// Layout: the packed input is read as u32 words whatever its tensor dtype (u32 or u8: the
// same bytes, and every buffer is padded to 16 bytes, so whole words are in bounds). One
// thread per weight word: a coalesced 4-byte load and one (8-bit) or two (4-bit) coalesced
// 16-byte stores; output dominates the traffic, so the kernel runs at the write bandwidth.
// A word never straddles two groups (GS >= 32 is a multiple of the 8 nibbles in a word), so a
// thread needs one scale and one bias, loaded from cache: threads of one group share them.
//
// Scales and biases may each be f32, f16 or bf16 (SDT, BDT: 0, 1, 2) and are read as u32
// words, so no shader-f16 feature is needed: f16 through unpack2x16float, bf16 by shifting its
// 16 bits into the top of an f32, f32 by bitcast. Element g of a 16-bit array is the low half
// of word g / 2 when g is even, the high half when odd (little-endian).
//
// The grid is 2-D past 65535 workgroups (linear index wid.x + wid.y * nwg.x).

struct Params {
    nwords: u32,   // weight words to expand: ceil(n / 4) bytes-words, or n * BITS / 32
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

override WG: u32 = 64u;
override BITS: u32 = 8u;
override GS: u32 = 64u;
override SDT: u32 = 0u;   // scales: 0 f32, 1 f16, 2 bf16
override BDT: u32 = 0u;   // biases: same codes

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> packed: array<u32>;
// dequantize_bytes
@group(0) @binding(2) var<storage, read_write> out_bytes: array<vec4f>;
// affine
@group(0) @binding(2) var<storage, read> scales: array<u32>;
@group(0) @binding(3) var<storage, read> biases: array<u32>;
@group(0) @binding(4) var<storage, read_write> out: array<vec4f>;

fn linear_index(wid: vec3u, lid: vec3u, nwg: vec3u) -> u32 {
    return (wid.x + wid.y * nwg.x) * WG + lid.x;
}

fn bytes4(w: u32) -> vec4f {
    return vec4f(vec4u(w & 0xFFu, (w >> 8u) & 0xFFu, (w >> 16u) & 0xFFu, w >> 24u));
}

@compute @workgroup_size(WG)
fn dequantize_bytes(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
                    @builtin(num_workgroups) nwg: vec3u) {
    let j = linear_index(wid, lid, nwg);
    if (j >= params.nwords) { return; }
    out_bytes[j] = bytes4(packed[j]);
}

fn load_scale(g: u32) -> f32 {
    switch SDT {
        case 0u: { return bitcast<f32>(scales[g]); }
        case 1u: { return unpack2x16float(scales[g >> 1u])[g & 1u]; }
        default: { return bitcast<f32>(((scales[g >> 1u] >> ((g & 1u) * 16u)) & 0xFFFFu) << 16u); }
    }
}

fn load_bias(g: u32) -> f32 {
    switch BDT {
        case 0u: { return bitcast<f32>(biases[g]); }
        case 1u: { return unpack2x16float(biases[g >> 1u])[g & 1u]; }
        default: { return bitcast<f32>(((biases[g >> 1u] >> ((g & 1u) * 16u)) & 0xFFFFu) << 16u); }
    }
}

@compute @workgroup_size(WG)
fn affine(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
          @builtin(num_workgroups) nwg: vec3u) {
    let j = linear_index(wid, lid, nwg);
    if (j >= params.nwords) { return; }
    let w = packed[j];
    let per_word = 32u / BITS;
    let g = (j * per_word) / GS;
    let s = load_scale(g);
    let b = load_bias(g);
    if (BITS == 8u) {
        out[j] = bytes4(w) * s + b;
    } else {
        let lo = vec4f(vec4u(w & 0xFu, (w >> 4u) & 0xFu, (w >> 8u) & 0xFu, (w >> 12u) & 0xFu));
        let hi = vec4f(vec4u((w >> 16u) & 0xFu, (w >> 20u) & 0xFu, (w >> 24u) & 0xFu, w >> 28u));
        out[2u * j] = lo * s + b;
        out[2u * j + 1u] = hi * s + b;
    }
}
