"""PyTorch side of the benchmark suite: the same work as `wgml bench`, case for case.

Each case is keyed by (op, shape) exactly as in tools/bench_cases.c. Timing follows the
same rules: warm-up, then the median of N samples, each a batch of back-to-back calls
timed with CUDA events and divided by the batch size (batch grown to >= min_ms). f32
everywhere, TF32 off. Writes JSON lines like `wgml bench --json`.

    python3 bench/torch_bench.py --json out.jsonl [--filter SUBSTR]
"""
import argparse
import json
import math
import sys

import torch
import torch.nn.functional as F

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
dev = "cuda"


def timeit(fn, samples=15, min_ms=2.0):
    fn(); fn()
    torch.cuda.synchronize()
    inner, out = 1, []
    for _ in range(samples):
        while True:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(inner):
                fn()
            e.record()
            torch.cuda.synchronize()
            ms = s.elapsed_time(e)
            if ms >= min_ms or inner >= 4096:
                break
            inner = min(4096, int(inner * (min_ms / max(ms, 1e-3)) * 1.2) + 1)
        out.append(ms / inner * 1e-3)
    out.sort()
    return out[len(out) // 2]


def host_chain(fn, n=1000, samples=15):
    """Host clock around n dependent calls and a synchronize: per-op overhead as a user sees it."""
    import time
    fn(); torch.cuda.synchronize()
    out = []
    for _ in range(samples):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) / n)
    out.sort()
    return out[len(out) // 2]


def rnd(*shape, lo=-1.0, hi=1.0):
    return torch.empty(*shape, device=dev, dtype=torch.float32).uniform_(lo, hi)


CASES = {}


def case(op, shape):
    def reg(f):
        CASES[(op, shape)] = f
        return f
    return reg


N = 1 << 28


@case("add", "2^28")
def _():
    a, b, c = rnd(N), rnd(N), torch.empty(N, device=dev)
    return timeit(lambda: torch.add(a, b, out=c))


@case("mul", "2^28")
def _():
    a, b, c = rnd(N), rnd(N), torch.empty(N, device=dev)
    return timeit(lambda: torch.mul(a, b, out=c))


@case("copy_tensor", "2^28")
def _():
    a, c = rnd(N), torch.empty(N, device=dev)
    return timeit(lambda: c.copy_(a))


@case("add", "1024 x1000 chain")
def _():
    a, b = rnd(1024, lo=-1e-3, hi=1e-3), rnd(1024, lo=-1e-3, hi=1e-3)
    return host_chain(lambda: a.add_(b))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--filter", default=None)
    args = ap.parse_args()
    with open(args.json, "w") as f:
        f.write(json.dumps({"kind": "meta", "torch": torch.__version__, "device": torch.cuda.get_device_name(0)}) + "\n")
        for (op, shape), fn in CASES.items():
            if args.filter and args.filter not in op and args.filter not in shape:
                continue
            try:
                sec = fn()
                f.write(json.dumps({"kind": "case", "op": op, "shape": shape, "seconds": sec}) + "\n")
                print(f"torch {op:28s} {shape:28s} {sec * 1e6:10.2f} us", flush=True)
            except Exception as e:  # report and continue: one failing case must not hide the rest
                print(f"torch {op} {shape}: failed: {e}", file=sys.stderr, flush=True)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
