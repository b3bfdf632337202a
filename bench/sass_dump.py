#!/usr/bin/env python3
"""Disassembles what NVIDIA's Vulkan driver compiled for each compute pipeline.

bench/vk_stats_layer.c (through bench/kernel_stats.sh, with WGML_VK_STATS_DIR=<dir>) writes
each pipeline's own pipeline-cache data to <dir>/<n>_<entry>_cache.bin. In the driver
580 format that data is the standard 32-byte header, a 64-byte NVIDIA header, then one
zstd frame; the frame holds an "NVDANVVM" object whose words at 0x4c and 0x50 give the size
and offset of the raw instruction stream (the size equals the driver's "Binary Size"
statistic; the stream starts at that offset or 8 bytes after it). nvdisasm disassembles raw streams (--binary SM90), but refuses the few
instructions CUDA never emits (the bindless constant loads of Vulkan descriptors): those
are replaced by NOPs and listed as "patched" at the top, so the rest can be read.

Usage: python3 bench/sass_dump.py <dir> [nvdisasm] [arch]   (needs the zstd program or Python's zstandard)
Writes <dir>/<n>_<entry>.sass next to each cache file."""
import glob, os, re, struct, subprocess, sys

NOP = bytes.fromhex("1879000000000000" "0000000000c00f00")   # NOP with a neutral control word


def code_of(cache):
    z = cache.find(bytes.fromhex("28b52ffd"))
    if z < 0:
        raise ValueError("no zstd frame")
    try:
        raw = subprocess.run(["zstd", "-d", "-c"], input=cache[z:], capture_output=True, check=True).stdout
    except FileNotFoundError:
        import zstandard   # the zstd program is missing: the Python module then
        raw = zstandard.ZstdDecompressor().decompressobj().decompress(cache[z:])
    if not raw.startswith(b"NVDANVVM"):
        raise ValueError("unknown object " + raw[:8].hex())
    size, off = struct.unpack_from("<II", raw, 0x4C)
    # the stream starts at off or 8 bytes after it (seen both ways): both are returned, the
    # caller keeps the one nvdisasm reads
    return [raw[o:o + size] for o in (off, off + 8)]


def disassemble(code, nvdisasm, arch, tmp):
    code = bytearray(code)
    patched = []
    for _ in range(len(code) // 16 + 1):
        open(tmp, "wb").write(code)
        r = subprocess.run([nvdisasm, "-b", arch, "-hex", tmp], capture_output=True, text=True)
        bad = [int(a, 16) for a in re.findall(r"at address (0x[0-9a-fA-F]+)", r.stderr)]
        if not bad:
            return r.stdout, patched
        for a in bad:
            patched.append((a, bytes(code[a:a + 16]).hex()))
            code[a:a + 16] = NOP
    raise RuntimeError("nvdisasm kept failing")


def main():
    d = sys.argv[1]
    nvdisasm = sys.argv[2] if len(sys.argv) > 2 else "nvdisasm"
    arch = sys.argv[3] if len(sys.argv) > 3 else "SM90"
    for path in sorted(glob.glob(os.path.join(d, "*_cache.bin"))):
        best = None
        for code in code_of(open(path, "rb").read()):
            text, patched = disassemble(code, nvdisasm, arch, path[:-4] + ".code")
            if best is None or len(patched) < len(best[2]):
                best = (code, text, patched)
        code, text, patched = best
        out = path[: -len("_cache.bin")] + ".sass"
        with open(out, "w") as f:
            f.write(f"// {len(code)} bytes of code; {len(patched)} instructions nvdisasm refused, patched to NOP:\n")
            for a, h in patched:
                f.write(f"//   {a:#06x}: {h}\n")
            f.write(text)
        counts = {}
        for m in re.finditer(r"^\s+/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)", text, re.M):
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
        top = ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])[:12])
        print(f"{os.path.basename(out)}: {len(code)} bytes, {len(patched)} patched; {top}")


if __name__ == "__main__":
    main()
