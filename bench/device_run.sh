#!/usr/bin/env bash
# Builds wgml on the GPU machine and runs, in one go: `wgml info`, the test suite on the
# GPU, `wgml bench` and the PyTorch suite, and joins them into $OUT/h200.md.
# Expects the fetched runtime in deps/dawn + deps/webgpu and the Vulkan loader packages in
# .gl/ (see README: running on a GPU machine without packages). Usage:
#   bash bench/device_run.sh [bench filter] [--no-tests]
set -uo pipefail
out=${OUT:-/tmp/wgml-out}
mkdir -p "$out"
. bench/gpu_env.sh
filter=${1:-}
cmake -S . -B build-device -DCMAKE_BUILD_TYPE=Release ${WGML_CMAKE_FLAGS:-} >"$out/cmake.log" 2>&1 || { tail -30 "$out/cmake.log"; exit 1; }
cmake --build build-device -j "$(nproc)" >"$out/build.log" 2>&1 || { grep -E 'error|Error' "$out/build.log" | head -30; exit 1; }
build-device/wgml info | tee "$out/info.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee -a "$out/info.txt"
if [ "${2:-}" != "--no-tests" ]; then
    (cd build-device && timeout "${WGML_TEST_TIMEOUT:-240}" ctest --output-on-failure -j 8 >"$out/ctest.log" 2>&1; tail -25 "$out/ctest.log")
fi
# the H200's datasheet f32 FMA rate, for the "% of peak" column of FLOP-bound rows
args=(--peak-tflops 67); [ -n "$filter" ] && args+=(--filter "$filter")
# One process per group: in a single process timing every case, the row ops were seen up to
# 2.6x slower than in a fresh one (cause not yet found), so each group starts fresh.
: > "$out/wgml.jsonl"
for g in memory latency matmul decode decode-fit decode-ops train-ops attention packed overhead overhead-record overhead-gpu roundtrip; do
    build-device/wgml bench --group "$g" --json "$out/wgml-$g.jsonl" "${args[@]}" | tee -a "$out/wgml_bench.md"
    cat "$out/wgml-$g.jsonl" >> "$out/wgml.jsonl"; rm -f "$out/wgml-$g.jsonl"
done
# The dependent-dispatch chains again with one dispatch per op, for bench/decode_fit.py.
WGML_FUSE=0 build-device/wgml bench --group overhead-gpu --json "$out/wgml-nofuse.jsonl" "${args[@]}" | tee -a "$out/wgml_bench.md"
PYTHONUNBUFFERED=1 python3 bench/torch_bench.py --json "$out/torch.jsonl" "${args[@]}"
python3 bench/compare.py "$out/wgml.jsonl" "$out/torch.jsonl" --title "wgml vs PyTorch on the H200" \
    --date "$(date -u +%Y-%m-%d)" --command "bash bench/device_run.sh ${filter}" > "$out/h200.md"
cat "$out/h200.md"
python3 bench/decode_fit.py "$out/wgml.jsonl" "$out/torch.jsonl" "$out/wgml-nofuse.jsonl" | tee "$out/decode_fit.md"
