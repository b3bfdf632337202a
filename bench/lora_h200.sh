#!/usr/bin/env bash
# LoRA fine-tuning on the GPU machine, wgml against PEFT + transformers (eager, f32, TF32 off)
# in the same run (bench/lora_torch.py is the PyTorch side), for the shapes named:
#   bash bench/lora_h200.sh smollm2 1b
# For each shape: a random-weight model built with transformers' config class (and a BPE
# tokenizer trained on the library's sources); PEFT's initial adapter; the loss curves of
# `wgml finetune --init-adapter` and of PEFT from it on the same batch of 8 texts at every
# step; the tokens/s and GPU memory of LoRA steps (rank 8, the seven projections) on each
# side. Writes $OUT/lora_h200.md. Expects build-device (bench/device_run.sh builds it, or
# this script does when it is missing).
set -uo pipefail
out=${OUT:-/tmp/wgml-out}
mkdir -p "$out"
. bench/gpu_env.sh
if [ ! -x build-device/wgml ]; then
    cmake -S . -B build-device -DCMAKE_BUILD_TYPE=Release >"$out/cmake.log" 2>&1 || { tail -20 "$out/cmake.log"; exit 1; }
    cmake --build build-device -j "$(nproc)" --target wgml_tool >"$out/build.log" 2>&1 || { grep -E 'error' "$out/build.log" | head; exit 1; }
fi
wgml=build-device/wgml
cat src/*.c src/ops/*.c src/io/*.c tools/*.c > /tmp/wgml-corpus.txt
report="$out/lora_h200.md"
{
    echo "# LoRA fine-tuning: wgml against PEFT + transformers (H200, $(date -u +%Y-%m-%d))"
    echo
    echo "- command: \`bash bench/lora_h200.sh $*\` on the GPU machine ($(python3 -c 'import peft, transformers, torch; print("peft", peft.__version__, "transformers", transformers.__version__, "torch", torch.__version__)'))"
    echo "- both sides f32 (PyTorch eager, TF32 off); LoRA rank 8, alpha 16, on q, k, v, o, gate, up, down; AdamW; gradient norm clipped to 1"
    echo "- speed: LoRA steps on one micro-batch; wgml's rate is its steady rate (the first step, which compiles, left out), PEFT's after 3 warm-up steps; memory: PyTorch's peak allocation, wgml's tensors"
    echo
    echo "| shape | batch x context | wgml tokens/s | PEFT tokens/s | ratio (wgml / PEFT) | wgml GPU MiB | PEFT peak MiB |"
    echo "|---|---|---|---|---|---|---|"
} >"$report"
curves=""
for shape in "$@"; do
    m=/tmp/lora-$shape
    python3 bench/lora_torch.py build --shape "$shape" --out "$m" || exit 1
    python3 bench/lora_torch.py init --model "$m" --out "$m/init" || exit 1
    case $shape in smollm2) batch=8 ;; *) batch=4 ;; esac
    # the loss curves from the same adapter on the same 8 texts (one batch of all of them)
    if [ "$shape" = smollm2 ]; then
        args=(--steps 20 --lr 1e-3 --warmup 2 --min-lr 0.1 --context 256)
        python3 bench/lora_torch.py curve --model "$m" --adapter "$m/init" --data "$m/curve.jsonl" --out "$out/peft_curve.csv" \
            "${args[@]}" || exit 1
        $wgml finetune --model "$m" --data "$m/curve.jsonl" --init-adapter "$m/init" --batch 8 --val-fraction 0 --weight-decay 0 \
            --beta2 0.999 "${args[@]}" --out "$m/wgml-curve" --overwrite > "$out/wgml_curve.log" 2>&1 || { tail -5 "$out/wgml_curve.log"; exit 1; }
        cp "$m/wgml-curve/loss.csv" "$out/wgml_curve.csv"
        curves=$(python3 - "$out/wgml_curve.csv" "$out/peft_curve.csv" <<'EOF'
import csv, sys
w = [float(r["train_loss"]) for r in csv.DictReader(open(sys.argv[1]))]
p = [float(r["loss"]) for r in csv.DictReader(open(sys.argv[2]))]
rel = max(abs(a - b) / abs(b) for a, b in zip(w, p))
print("| step | wgml loss | PEFT loss |\n|---|---|---|")
for i in (0, 1, 4, 9, 14, 19):
    print("| %d | %.5f | %.5f |" % (i + 1, w[i], p[i]))
print("\nlargest relative difference over the %d steps: %.2e" % (len(p), rel))
EOF
)
    fi
    # speed
    python3 bench/lora_torch.py speed --model "$m" --batch "$batch" --context 512 --steps 10 --json "$out/peft_speed.jsonl" || exit 1
    head -c 2000000 /tmp/wgml-corpus.txt > /tmp/wgml-speed.txt
    $wgml finetune --model "$m" --data /tmp/wgml-speed.txt --batch "$batch" --context 512 --steps 12 --val-fraction 0 \
        --eval-every 0 --out "$m/wgml-speed" --overwrite > "$out/wgml_speed_$shape.log" 2>&1 || { tail -5 "$out/wgml_speed_$shape.log"; exit 1; }
    python3 - "$shape" "$batch" "$out/wgml_speed_$shape.log" "$out/peft_speed.jsonl" >>"$report" <<'EOF'
import json, re, sys
shape, batch, log, peft = sys.argv[1], int(sys.argv[2]), open(sys.argv[3]).read().replace("\r", "\n"), sys.argv[4]
rates = [float(x) for x in re.findall(r"(\d+) tok/s", log)]
mib = float(re.search(r"([\d.]+) MiB of GPU memory", log).group(1))
p = [json.loads(l) for l in open(peft)][-1]
w = rates[-1]
print("| %s | %d x 512 | %.0f | %.0f | %.2f | %.0f | %.0f |" % (shape, batch, w, p["tokens_per_s"], w / p["tokens_per_s"], mib,
                                                              p["peak_gib"] * 1024))
EOF
done
if [ -n "$curves" ]; then
    {
        echo
        echo "Loss curves (smollm2 shape): both sides start from PEFT's initial adapter and take the same batch of the"
        echo "same 8 texts (256 tokens) at every step; lr 1e-3, warm-up 2, cosine to 1e-4, AdamW (0.9, 0.999, 1e-8)."
        echo
        echo "$curves"
    } >>"$report"
fi
cat "$report"
