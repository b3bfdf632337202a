"""Splits the decode products' time into a fixed cost per call and a streaming rate.

Reads the `decode-fit` rows (1 x 4096 x K with cold weights, K = 1024 .. 16384) of
`wgml bench --json` and of `bench/torch_bench.py --json` (PyTorch's in a CUDA graph), fits
time = fixed + bytes / rate by least squares over K >= 2048 for each kernel, and prints the
fits beside the chains of 1000 dependent tiny dispatches on the GPU clock (the cost of a
dependent dispatch itself). An optional third file holds the overhead-gpu rows of a run with
WGML_FUSE=0 (one dispatch per add).

    python3 bench/decode_fit.py wgml.jsonl torch.jsonl [wgml-nofuse.jsonl] > decode_fit.md
"""
import json
import sys

KS = (1024, 2048, 4096, 8192, 11008, 12288, 16384)
FIT_KS = (2048, 4096, 8192, 12288, 16384)   # whole rounds of gemv_cols4's 512 x 8 form
N = 4096


def load(path):
    rows = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                r = json.loads(line)
                if r.get("kind") == "case":
                    rows[(r["op"], r["shape"])] = r["seconds"]
    return rows


def fit(points):
    """Least squares of t = a + x / rate over (bytes, seconds): (a, rate, largest residual)."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sxx
    a = my - slope * mx
    res = max(abs(y - (a + slope * x)) for x, y in points)
    return a, 1.0 / slope, res


def us(s):
    return f"{s * 1e6:.2f}" if s is not None else "-"


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    w, t = load(sys.argv[1]), load(sys.argv[2])
    nf = load(sys.argv[3]) if len(sys.argv) > 3 else {}
    series = [("wgml matmul (gemv_cols4)", w, "matmul"), ("wgml matmul_bt (gemv_rows)", w, "matmul_bt"),
              ("PyTorch matmul, CUDA graph", t, "matmul"), ("PyTorch matmul_bt, CUDA graph", t, "matmul_bt")]
    print("## Decode products: fixed cost per call and streaming rate\n")
    print("1 x 4096 x K, cold weights (b cycled through copies of 256 MiB or more), us per call:\n")
    print("| K | MiB of b | " + " | ".join(name for name, _, _ in series) + " |")
    print("|---:|---:|" + "---:|" * len(series))
    for k in KS:
        shape = f"1x{N}x{k} cold, fit"
        cells = [us(src.get((op, shape))) for _, src, op in series]
        print(f"| {k} | {4 * N * k / 2**20:.0f} | " + " | ".join(cells) + " |")
    print("\nFit over K = " + ", ".join(map(str, FIT_KS)) + ": time = fixed + bytes / rate\n")
    print("| kernel | fixed cost (us) | streaming rate (TB/s) | largest residual (us) | K = 1024: measured / fit (us) | K = 11008: measured / fit (us) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, src, op in series:
        pts = [(4.0 * N * k, src[(op, f"1x{N}x{k} cold, fit")]) for k in FIT_KS if (op, f"1x{N}x{k} cold, fit") in src]
        if len(pts) < 3:
            print(f"| {name} | - | - | - | - | - |")
            continue
        a, rate, res = fit(pts)
        off = [f"{us(src.get((op, f'1x{N}x{k} cold, fit')))} / {(a + 4.0 * N * k / rate) * 1e6:.2f}" for k in (1024, 11008)]
        print(f"| {name} | {a * 1e6:.2f} | {rate * 1e-12:.2f} | {res * 1e6:.2f} | " + " | ".join(off) + " |")
    print("\nA dependent dispatch on the GPU clock (a chain of 1000, us per op):\n")
    print("| chain | wgml | wgml, WGML_FUSE=0 | PyTorch, CUDA graph |")
    print("|---|---:|---:|---:|")
    for op, shape in (("add", "1024 x1000 chain, GPU clock"), ("matmul", "1x256x256 x1000 chain, GPU clock")):
        print(f"| {op} {shape} | {us(w.get((op, shape)))} | {us(nf.get((op, shape)))} | {us(t.get((op, shape)))} |")


if __name__ == "__main__":
    main()
