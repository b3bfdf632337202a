"""Joins `wgml bench --json` and `bench/torch_bench.py --json` output into the markdown
table committed under bench/results/: op, shape, wgml time, PyTorch time, ratio
(PyTorch time / wgml time: above 1 means wgml is faster), % of peak.

    python3 bench/compare.py wgml.jsonl torch.jsonl --title "..." --command "..." > table.md
"""
import argparse
import json


def load(path):
    meta, cases = {}, {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            r = json.loads(line)
            if r["kind"] == "meta":
                meta = meta or r   # several runs may be concatenated: keep the first header
            else:
                cases[(r["op"], r["shape"])] = r
    return meta, cases


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("wgml")
    ap.add_argument("torch", nargs="?")
    ap.add_argument("--title", default="wgml vs PyTorch")
    ap.add_argument("--command", default="")
    ap.add_argument("--date", default="")
    a = ap.parse_args()
    wm, wc = load(a.wgml)
    tm, tc = load(a.torch) if a.torch else ({}, {})
    print(f"# {a.title}\n")
    if a.date:
        print(f"- date: {a.date}")
    print(f"- adapter: {wm.get('adapter', '?')} ({wm.get('driver', '?')})")
    if tm:
        print(f"- PyTorch: {tm.get('torch', '?')} on {tm.get('device', '?')}, f32, TF32 off")
    print(f"- peaks: copy {wm.get('copy_bw', 0) * 1e-9:.0f} GB/s measured in the same run; f32 FMA {wm.get('peak_tflops') or 'not given'} TFLOP/s")
    if a.command:
        print(f"- command: `{a.command}`")
    print("- ratio = PyTorch time / wgml time (above 1: wgml faster); overhead rows are host time per op of a 1000-op chain\n")
    hdr = "| op | shape | wgml (us) | PyTorch (us) | ratio | wgml GB/s | wgml TFLOP/s | % of peak |"
    print(hdr)
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    ratios = []
    for key, r in wc.items():
        s = r["seconds"]
        t = tc.get(key, {}).get("seconds")
        ratio = t / s if t else None
        if ratio:
            ratios.append(ratio)
        gbs = r["bytes"] / s * 1e-9
        tfl = r["flops"] / s * 1e-12
        if r["flops"] > 0:
            pct = 100 * tfl / wm["peak_tflops"] if wm.get("peak_tflops") else None
        else:
            pct = 100 * r["bytes"] / s / wm["copy_bw"] if wm.get("copy_bw") else None
        ts = f"{t * 1e6:.2f}" if t else "-"
        rs = f"{ratio:.2f}" if ratio else "-"
        ps = f"{pct:.0f}" if pct is not None else "-"
        print(f"| {key[0]} | {key[1]} | {s * 1e6:.2f} | {ts} | {rs} | {gbs:.0f} | {tfl:.2f} | {ps} |")
    if ratios:
        import math
        g = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        print(f"\nSummary: geometric mean ratio (PyTorch time / wgml time) over {len(ratios)} cases: {g:.2f}")


if __name__ == "__main__":
    main()
