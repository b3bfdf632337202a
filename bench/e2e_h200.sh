#!/usr/bin/env bash
# End-to-end on the GPU machine, after bench/device_run.sh built build-device: train a
# 12-layer, 768-wide byte-level model with context 1024 for a few steps and generate from it,
# printing the tokens/s that train and generate report. Data: the library's own C sources.
set -uo pipefail
out=${OUT:-/tmp/wgml-out}
cat src/*.c src/ops/*.c src/io/*.c tools/*.c > /tmp/wgml-corpus.txt
build-device/wgml train --data /tmp/wgml-corpus.txt --out /tmp/wgml-e2e --dim 768 --layers 12 --heads 12 --kv-heads 12 \
    --ffn 2048 --context 1024 --batch 8 --steps "${E2E_STEPS:-12}" --warmup 2 --eval-every 0 2>&1 | tr '\r' '\n' | tail -8 | tee "$out/e2e.txt"
build-device/wgml generate --model /tmp/wgml-e2e --prompt "static wgml_status " --tokens 256 --temperature 0 2>&1 | tail -4 | tee -a "$out/e2e.txt"
