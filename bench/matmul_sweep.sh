#!/usr/bin/env bash
# Times every matmul variant (and the row-op and top_k switches) of src/ops/matmul.c (WGML_MATMUL_VARIANT) on the shapes that
# decide the defaults, on the GPU machine, after bench/device_run.sh has built build-device.
# Writes a table per variant to ${OUT}/matmul_sweep.md.
#   bash bench/matmul_sweep.sh [filter]
set -uo pipefail
out=${OUT:-/tmp/wgml-out}
mkdir -p "$out"
filter=${1:-4096x4096x4096}
{
for v in "" t128f t128np t128npf t128k32 t128k8 t128x64 t64x128 m4x8 t128m4 t128sb t64; do
    echo "## WGML_MATMUL_VARIANT=\"$v\""
    WGML_MATMUL_VARIANT="$v" build-device/wgml bench --group matmul --filter "$filter" --samples 7 | grep '^| matmul'
done
for v in "" gemvc4 "gemvc4,gemvcols=2" "gemvc4,gemvcols=8" gemvcols=2 gemvcols=8; do
    echo "## WGML_MATMUL_VARIANT=\"$v\" (decode)"
    WGML_MATMUL_VARIANT="$v" build-device/wgml bench --group decode --filter "matmul" --samples 15 | grep '^| matmul'
done
for u in 4 8; do
    echo "## WGML_NORM_UPT=$u WGML_SOFTMAX_UPT=$u"
    WGML_NORM_UPT=$u WGML_SOFTMAX_UPT=$u build-device/wgml bench --filter 16384x4096 --samples 9 | grep '^| [rs]'
done
echo "## WGML_TOPK_VARIANT=nofinish"
WGML_TOPK_VARIANT=nofinish build-device/wgml bench --filter top_k --samples 15 | grep '^| top_k'
} | tee "$out/matmul_sweep.md"
