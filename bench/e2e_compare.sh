#!/usr/bin/env bash
# End to end, wgml against the same model in PyTorch, in one run on the GPU machine:
#   1. wgml train (12 layers, dim 768, context 1024, batch 8, byte tokens, as e2e_h200.sh)
#      and wgml generate (256 greedy tokens) on the library's own C sources;
#   2. bench/torch_model.py --check: the trained checkpoint's logits, wgml logits vs the
#      PyTorch model in float64 (must be ~1e-6 relative);
#   3. bench/torch_model.py --bench: the same training (wgml's initial weights, batches and
#      lr schedule, so the per-step losses can be compared too) and the same decoding in
#      PyTorch eager, f32, TF32 off;
#   4. bench/e2e_report.py: $OUT/e2e_h200.md (tokens/s, ratios, checks).
# Usage on the GPU machine (repository root): bash bench/e2e_compare.sh
# Builds build-device first if needed (as bench/device_run.sh: Vulkan loader from .gl/).
# Sizes can be changed for a small local run: E2E_DIM E2E_LAYERS E2E_HEADS E2E_KV_HEADS
# E2E_FFN E2E_CONTEXT E2E_BATCH E2E_STEPS E2E_TOKENS; E2E_BUILD (build-device), PY (python3).
set -uo pipefail
out=${OUT:-/tmp/wgml-out}
mkdir -p "$out"
build=${E2E_BUILD:-build-device}
py=${PY:-python3}
dim=${E2E_DIM:-768} layers=${E2E_LAYERS:-12} heads=${E2E_HEADS:-12} kvh=${E2E_KV_HEADS:-12} ffn=${E2E_FFN:-2048}
ctxlen=${E2E_CONTEXT:-1024} batch=${E2E_BATCH:-8} steps=${E2E_STEPS:-12} tokens=${E2E_TOKENS:-256}
ckpt=/tmp/wgml-e2e
corpus=/tmp/wgml-corpus.txt
prompt="static wgml_status "

. bench/gpu_env.sh
if [ ! -x "$build/wgml" ]; then
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release ${WGML_CMAKE_FLAGS:-} >"$out/cmake.log" 2>&1 || { tail -30 "$out/cmake.log"; exit 1; }
    cmake --build "$build" -j "$(nproc)" >"$out/build.log" 2>&1 || { grep -E 'error|Error' "$out/build.log" | head -30; exit 1; }
fi
: > "$out/e2e_info.txt"
if command -v nvidia-smi >/dev/null; then
    echo "GPU: $(nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader | head -1) (name, driver, max SM clock, memory)" >> "$out/e2e_info.txt"
fi

cat src/*.c src/ops/*.c src/io/*.c tools/*.c > "$corpus"
common=(--dim "$dim" --layers "$layers" --heads "$heads" --kv-heads "$kvh" --ffn "$ffn" --context "$ctxlen" --batch "$batch")

echo "== wgml train"
"$build/wgml" train --data "$corpus" --out "$ckpt" "${common[@]}" --steps "$steps" --warmup 2 --eval-every 0 2>&1 \
    | tr '\r' '\n' > "$out/wgml_train.txt"
tail -5 "$out/wgml_train.txt"
cp "$ckpt/loss.csv" "$out/loss.csv" 2>/dev/null

echo "== wgml generate"
"$build/wgml" generate --model "$ckpt" --prompt "$prompt" --tokens "$tokens" --temperature 0 \
    > "$out/wgml_generate.out" 2> "$out/wgml_generate.err"
tail -2 "$out/wgml_generate.err"

echo "== torch check (logits of the trained checkpoint)"
PYTHONUNBUFFERED=1 "$py" bench/torch_model.py --check "$ckpt" --wgml "$build/wgml" --device cpu > "$out/torch_check.jsonl" 2>&1
cat "$out/torch_check.jsonl"

echo "== torch bench"
: > "$out/torch_bench.jsonl"
# the same training as wgml's (init, batches, lr schedule), then decoding from wgml's checkpoint
PYTHONUNBUFFERED=1 "$py" bench/torch_model.py --bench --model "$ckpt" --data "$corpus" --batch "$batch" \
    --train-steps "$steps" --warmup 2 --tokens "$tokens" --prompt "$prompt" >> "$out/torch_bench.jsonl" 2> "$out/torch_bench.err"
# the strongest eager optimizer too (one kernel for all of AdamW)
PYTHONUNBUFFERED=1 "$py" bench/torch_model.py --bench --model "$ckpt" --data "$corpus" --batch "$batch" \
    --train-steps "$steps" --warmup 2 --tokens 0 --fused >> "$out/torch_bench.jsonl" 2>> "$out/torch_bench.err"
cut -c1-300 "$out/torch_bench.jsonl"
tail -3 "$out/torch_bench.err"

"$py" bench/e2e_report.py "$out" --command "bash bench/e2e_compare.sh" > "$out/e2e_h200.md"
cat "$out/e2e_h200.md"
