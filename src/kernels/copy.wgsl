// copy_tensor: dst bytes [dst_offset, dst_offset + n) = src bytes [0, n), raw, so any dtype
// is copied bit for bit.
//
// A compute kernel rather than copyBufferToBuffer: through Dawn on NVIDIA the buffer copy
// command moved a tenth of what 16-byte loads and stores in a kernel reach
// (bench/notes/memory.md). copy_vec4 copies whole vec4 (offset and size multiples of 16
// bytes), copy_word whole words; copy_bytes any byte range: one thread per destination
// word the range touches keeps that word's other bytes, so no two threads write one word.
// copy_rows_at (internal: batched decoding's cache writes): row b of src (n words) goes to
// row positions[b] of block b of dst (blocks of dst_offset rows of n words), for b below
// first_word; one thread per word (words = first_word * n of them).
// The grid may be 2-D (linear workgroup index wid.x + wid.y * nwg.x).

struct Params {
    n: u32,          // vec4s (copy_vec4), words (copy_word) or bytes (copy_bytes) to copy
    dst_offset: u32, // in the same unit
    first_word: u32, // copy_bytes: the first destination word the range touches
    words: u32,      // copy_bytes: how many it touches
}

override WG: u32 = 256u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src4: array<vec4u>;
@group(0) @binding(2) var<storage, read_write> dst4: array<vec4u>;

@group(0) @binding(1) var<storage, read> src1: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst1: array<u32>;
@group(0) @binding(3) var<storage, read> positions: array<u32>;

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

@compute @workgroup_size(WG)
fn copy_bytes(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
              @builtin(num_workgroups) nwg: vec3u) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid.x;
    if (i >= p.words) { return; }
    let w = p.first_word + i;
    var word = dst1[w];
    for (var b = 0u; b < 4u; b++) {
        let d = w * 4u + b;   // the destination byte
        if (d >= p.dst_offset && d - p.dst_offset < p.n) {
            let s = d - p.dst_offset;
            let byte = (src1[s >> 2u] >> ((s & 3u) * 8u)) & 0xFFu;
            word = (word & ~(0xFFu << (b * 8u))) | (byte << (b * 8u));
        }
    }
    dst1[w] = word;
}

@compute @workgroup_size(WG)
fn copy_rows_at(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
                @builtin(num_workgroups) nwg: vec3u) {
    let i = (wid.x + wid.y * nwg.x) * WG + lid.x;
    if (i >= p.words) { return; }
    let b = i / p.n;
    let row = positions[b];
    if (row >= p.dst_offset) { return; }   // past the block: the host never asks for it
    dst1[(b * p.dst_offset + row) * p.n + i % p.n] = src1[i];
}
