// Element-wise binary arithmetic: out = a OP b over n f32 values.
//
// Layout: a, b, out are flat f32 arrays viewed as vec4 (every tensor buffer is padded to
// 16 bytes, so the last, partial vec4 is in bounds; the lanes past n are padding).
// One thread per vec4: 16-byte loads and stores are what reach full bandwidth.
// The grid may be 2-D when n/4 needs more workgroups than one dimension allows; the
// linear workgroup index is wid.x + wid.y * nwg.x.
//
// Entry points differ only in which buffers alias, because WebGPU forbids binding one
// buffer both read-only and read-write in a dispatch:
//   binary          out = a OP b           (three distinct buffers, or a == b read twice)
//   binary_inplace  io = io OP other, or io = other OP io when SWAP (out aliases a or b)
//   binary_self     io = io OP io          (out, a and b all the same buffer)
//   fused           the ops of a pending group (src/ops/elementwise.c), in call order for
//                   each vec4 index, over four distinct read-write buffers s0..s3

struct Params {
    n4: u32,      // number of vec4 to process: ceil(n / 4)
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

override OP: u32 = 0u;        // 0 add, 1 sub, 2 mul
override SWAP: bool = false;  // binary_inplace: io is the right-hand operand
override WG: u32 = 256u;

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<vec4f>;
@group(0) @binding(2) var<storage, read> b: array<vec4f>;
@group(0) @binding(3) var<storage, read_write> out: array<vec4f>;

@group(0) @binding(1) var<storage, read_write> io: array<vec4f>;
@group(0) @binding(2) var<storage, read> other: array<vec4f>;

// fused: op k is ops[k / 4][k % 4] = OP | out << 2 | a << 4 | b << 6 (slot numbers 0..3)
struct Program {
    n4: u32,
    nops: u32,    // 2 .. 60
    _pad0: u32,
    _pad1: u32,
    ops: array<vec4u, 15>,
}
@group(0) @binding(0) var<uniform> prog: Program;
@group(0) @binding(1) var<storage, read_write> s0: array<vec4f>;
@group(0) @binding(2) var<storage, read_write> s1: array<vec4f>;
@group(0) @binding(3) var<storage, read_write> s2: array<vec4f>;
@group(0) @binding(4) var<storage, read_write> s3: array<vec4f>;

fn apply_op(op: u32, x: vec4f, y: vec4f) -> vec4f {
    switch op {
        case 0u: { return x + y; }
        case 1u: { return x - y; }
        default: { return x * y; }
    }
}

fn apply(x: vec4f, y: vec4f) -> vec4f {
    return apply_op(OP, x, y);
}

fn load_slot(s: u32, i: u32) -> vec4f {
    switch s {
        case 0u: { return s0[i]; }
        case 1u: { return s1[i]; }
        case 2u: { return s2[i]; }
        default: { return s3[i]; }
    }
}

fn store_slot(s: u32, i: u32, v: vec4f) {
    switch s {
        case 0u: { s0[i] = v; }
        case 1u: { s1[i] = v; }
        case 2u: { s2[i] = v; }
        default: { s3[i] = v; }
    }
}

fn linear_index(wid: vec3u, lid: vec3u, nwg: vec3u) -> u32 {
    return (wid.x + wid.y * nwg.x) * WG + lid.x;
}

@compute @workgroup_size(WG)
fn binary(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
          @builtin(num_workgroups) nwg: vec3u) {
    let i = linear_index(wid, lid, nwg);
    if (i >= p.n4) { return; }
    out[i] = apply(a[i], b[i]);
}

@compute @workgroup_size(WG)
fn binary_inplace(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
                  @builtin(num_workgroups) nwg: vec3u) {
    let i = linear_index(wid, lid, nwg);
    if (i >= p.n4) { return; }
    if (SWAP) {
        io[i] = apply(other[i], io[i]);
    } else {
        io[i] = apply(io[i], other[i]);
    }
}

@compute @workgroup_size(WG)
fn binary_self(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
               @builtin(num_workgroups) nwg: vec3u) {
    let i = linear_index(wid, lid, nwg);
    if (i >= p.n4) { return; }
    let x = io[i];
    io[i] = apply(x, x);
}

@compute @workgroup_size(WG)
fn fused(@builtin(workgroup_id) wid: vec3u, @builtin(local_invocation_id) lid: vec3u,
         @builtin(num_workgroups) nwg: vec3u) {
    let i = linear_index(wid, lid, nwg);
    if (i >= prog.n4) { return; }
    // The last result stays in registers: in a chain (x = x + y, again and again) the next
    // op reads the value just stored, and loading it back would wait on the store. It is
    // what slot last_slot holds at index i, which no other invocation touches.
    var last_slot = 4u;
    var last = vec4f(0.0);
    for (var k = 0u; k < prog.nops; k++) {
        let w = prog.ops[k / 4u][k % 4u];
        let so = (w >> 2u) & 3u;
        let sa = (w >> 4u) & 3u;
        let sb = (w >> 6u) & 3u;
        var x = last;
        if (sa != last_slot) { x = load_slot(sa, i); }
        var y = x;
        if (sb != sa) {
            y = last;
            if (sb != last_slot) { y = load_slot(sb, i); }
        }
        last = apply_op(w & 3u, x, y);
        last_slot = so;
        store_slot(so, i, last);
    }
}
