// copy_tensor: dst words [dst_word, dst_word + n) = src words [0, n), raw 32-bit words, so
// any dtype is copied bit for bit.
//
// A compute kernel rather than copyBufferToBuffer: through Dawn on the H200 the buffer copy
// command moved ~0.4 TB/s where 16-byte loads and stores in a kernel reach ~4 TB/s.
// copy_vec4 needs dst_word and n to be multiples of 4; copy_word takes any word range.
// The grid may be 2-D (linear workgroup index wid.x + wid.y * nwg.x).

struct Params {
    n: u32,          // words (copy_word) or vec4s (copy_vec4) to copy
    dst_offset: u32, // in the same unit
    _pad0: u32,
    _pad1: u32,
}

override WG: u32 = 256u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src4: array<vec4u>;
@group(0) @binding(2) var<storage, read_write> dst4: array<vec4u>;

@group(0) @binding(1) var<storage, read> src1: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst1: array<u32>;

@compute @workgroup_size(WG)
fn copy_vec4(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
             @builtin(num_workgroups) nwg: vec3u) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid.x;
    if (i >= p.n) { return; }
    dst4[p.dst_offset + i] = src4[i];
}

@compute @workgroup_size(WG)
fn copy_word(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
             @builtin(num_workgroups) nwg: vec3u) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid.x;
    if (i >= p.n) { return; }
    dst1[p.dst_offset + i] = src1[i];
}
