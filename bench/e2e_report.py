"""Joins the outputs of bench/e2e_compare.sh into a Markdown table: wgml train/generate
against the same model in PyTorch (bench/torch_model.py), tokens/s and ratios, plus the
equality checks. No torch needed.

    python3 bench/e2e_report.py OUTDIR --command "..." > OUTDIR/e2e_h200.md
"""
import argparse
import datetime
import json
import os
import re
import sys


def read(path):
    return open(path, errors="replace").read() if os.path.exists(path) else ""


def jsonl(path):
    out = []
    for line in read(path).splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


def last_float(pattern, text):
    m = re.findall(pattern, text)
    return float(m[-1]) if m else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--command", default="bash bench/e2e_compare.sh")
    ap.add_argument("--ckpt", default="/tmp/wgml-e2e")
    a = ap.parse_args()
    d = a.dir
    train = read(os.path.join(d, "wgml_train.txt"))
    gen_err = read(os.path.join(d, "wgml_generate.err"))
    gen_out = read(os.path.join(d, "wgml_generate.out"))
    info = read(os.path.join(d, "e2e_info.txt"))
    torch_rows = jsonl(os.path.join(d, "torch_bench.jsonl"))
    check = next((r for r in jsonl(os.path.join(d, "torch_check.jsonl")) if r.get("check") == "logits"), None)

    wgml_train = last_float(r"([0-9.]+) tok/s", train)
    # wgml generate leaves its first single-token step (which compiles kernels) out of the rate
    wgml_decode = last_float(r"then \d+ tokens in [0-9.]+ s \(([0-9.]+) tokens/s\)", gen_err)
    wgml_prefill = last_float(r"prefill: \d+ tokens in [0-9.]+ s \(([0-9.]+) tokens/s\)", gen_err)
    adapter = re.search(r"^adapter:\s*(.*)$", train, re.M)
    model_line = re.search(r"^model:\s*(.*)$", train, re.M)
    training_line = re.search(r"^training:\s*(.*)$", train, re.M)

    def trow(measure, fused=None):
        for r in torch_rows:
            if r.get("measure") == measure and (fused is None or r.get("fused_adamw") == fused):
                return r
        return None

    t_train, t_train_fused = trow("train", False), trow("train", True)
    t_dec, t_dec_cold = trow("decode"), trow("decode_cold")
    any_t = t_train or t_dec or t_dec_cold or {}

    print("# wgml vs the same model in PyTorch, end to end on the H200\n")
    print(f"- date: {datetime.datetime.utcnow().strftime('%Y-%m-%d')}")
    print(f"- adapter: {adapter.group(1) if adapter else '?'}")
    for line in info.splitlines():
        if line.strip():
            print(f"- {line.strip()}")
    print(f"- PyTorch: {any_t.get('torch', '?')} on {any_t.get('device', '?')}, eager, f32, TF32 "
          f"{'on' if any_t.get('tf32') else 'off'}, attention {any_t.get('attn', '?')}")
    print(f"- command: `{a.command}`")
    if model_line:
        print(f"- model: {model_line.group(1)}")
    if training_line:
        print(f"- training: {training_line.group(1)}")
    print("- counting: training tokens/s = tokens per optimizer step x steps after the first / their time (both);"
          " decode tokens/s = greedy tokens after the first / their time, prefill excluded, each token's id read back"
          " to the host (both; wgml also leaves out its first single-token step, which compiles kernels, and PyTorch's"
          " main row is a second generation in the process); ratio = wgml / PyTorch (above 1: wgml faster)\n")

    def ratio(w, t):
        return f"{w / t:.2f}" if w and t else "-"

    def fmt(x):
        return f"{x:,.0f}" if x else "-"

    print("| measure | wgml (tokens/s) | PyTorch (tokens/s) | ratio | goal |")
    print("|---|---:|---:|---:|---|")
    if t_train or wgml_train:
        tt = t_train.get("tokens_per_s") if t_train else None
        print(f"| training, AdamW (torch default, foreach) | {fmt(wgml_train)} | {fmt(tt)} | {ratio(wgml_train, tt)} | >= 1.0 "
              f"{'met' if wgml_train and tt and wgml_train >= tt else 'NOT met'} |")
    if t_train_fused:
        tt = t_train_fused["tokens_per_s"]
        print(f"| training, AdamW(fused=True) | {fmt(wgml_train)} | {fmt(tt)} | {ratio(wgml_train, tt)} | |")
    if t_dec or wgml_decode:
        tt = t_dec.get("tokens_per_s") if t_dec else None
        print(f"| decode, {t_dec['decoded'] + 1 if t_dec else '?'} greedy tokens (PyTorch after one warm-up generation) | {fmt(wgml_decode)} | {fmt(tt)} | "
              f"{ratio(wgml_decode, tt)} | >= 1.5 {'met' if wgml_decode and tt and wgml_decode >= 1.5 * tt else 'NOT met'} |")
    if t_dec_cold:
        tt = t_dec_cold["tokens_per_s"]
        print(f"| decode, PyTorch cold (its first generation in the process) | {fmt(wgml_decode)} | {fmt(tt)} | "
              f"{ratio(wgml_decode, tt)} | |")
    if t_dec and wgml_prefill:
        print(f"| prefill ({t_dec['prefill_tokens']} tokens, with the first token's readback; wgml's is its first call, compiling its kernels, PyTorch's is warm: not comparable) | {fmt(wgml_prefill)} | "
              f"{fmt(t_dec['prefill_tokens_per_s'])} | {ratio(wgml_prefill, t_dec['prefill_tokens_per_s'])} | |")
    print()

    print("## Same model\n")
    if check:
        print(f"- logits of a {check['tokens']}-token text through the trained checkpoint, max |x - ref| / max |ref| against"
              f" the PyTorch model in float64 (max |ref| {check['max_abs_ref']:.3f}): wgml (`wgml logits`, GPU) "
              f"{check.get('wgml_vs_f64', float('nan')):.3e}, PyTorch f32 (CPU) {check['torch_f32_vs_f64']:.3e}, PyTorch f32"
              f" through its KV cache {check['torch_f32_kv_cache_vs_f64']:.3e}; wgml vs PyTorch f32 "
              f"{check.get('wgml_vs_torch_f32', float('nan')):.3e}; argmax agrees at {check.get('argmax_agree')} of"
              f" {check['tokens']} positions: {'PASS' if check.get('ok') else 'FAIL'}")
    else:
        print("- logits check: no result (see torch_check.txt)")
    loss_csv = read(os.path.join(d, "loss.csv"))
    if t_train and loss_csv and t_train.get("losses"):
        wl = [float(line.split(",")[1]) for line in loss_csv.splitlines()[1:] if line]
        tl = t_train["losses"]
        n = min(len(wl), len(tl))
        diffs = [abs(wl[i] - tl[i]) for i in range(n)]
        print(f"- training: PyTorch started from wgml's initial weights (same seed, same generator) on wgml's batches "
              f"(same order) with the same lr schedule; per-step training loss, |wgml - PyTorch|: step 1 {diffs[0]:.2e},"
              f" max over {n} steps {max(diffs):.2e} (wgml's loss.csv has 6 decimals)")
        print(f"  - wgml:    {' '.join(f'{x:.4f}' for x in wl[:n])}")
        print(f"  - PyTorch: {' '.join(f'{x:.4f}' for x in tl[:n])}")
    if t_dec and gen_out:
        wtext = gen_out.rstrip("\n")
        prompt = "static wgml_status "
        wtext = wtext[len(prompt):] if wtext.startswith(prompt) else wtext
        ttext = t_dec.get("text") or ""
        same = 0
        while same < min(len(wtext), len(ttext)) and wtext[same] == ttext[same]:
            same += 1
        print(f"- greedy text: the first {same} of {len(ttext)} generated characters are identical"
              f"{' (all)' if same == len(ttext) == len(wtext) else ''}")
    print()
    print("wgml train (last lines):\n```")
    print("\n".join(train.strip().splitlines()[-4:]))
    print("```\nwgml generate:\n```")
    print(gen_err.strip())
    print("```")
    return 0


if __name__ == "__main__":
    sys.exit(main())
