#!/usr/bin/env bash
# A/B of whole source files: the driver's compiler answers to code it should remove as dead
# (round 26 of bench/notes/attention.md: one kernel compiled to 128 or 137 registers with
# and without a folded branch), so a variant is only evidence in the exact source it ships
# in. This builds the library once per form of one source file, then times them side by
# side in one process tree, twice, alternating, with the driver's statistics of the
# file's kernels where the statistics layer is available.
#
#   bash bench/source_ab.sh <file> <form>... -- <wgml bench arguments>
#
# <file> is a path in the tree (e.g. src/kernels/attention.wgsl); each <form> is a file that
# replaces it whole, or "-" for the tree's own. Forms from history are written into the
# tree first, e.g. `mkdir -p ab && git show 28226b6:src/kernels/attention.wgsl > ab/A.wgsl`,
# then `bash bench/source_ab.sh src/kernels/attention.wgsl ab/A.wgsl - -- --group train-ops
# --filter "causal lse scores" --samples 9`.
# Writes ${OUT}/source_ab.md. WGML_AB_BUILD names the build directory (build-device);
# WGML_VK_STATS_SO the layer (.gl/libwgml_vk_stats.so, bench/vk_stats_layer.c built
# elsewhere); without it only the times are reported. The tree's file is restored at exit.
set -uo pipefail
out=${OUT:-/tmp/wgml-out}
mkdir -p "$out"
[ $# -ge 3 ] || { echo "usage: bash bench/source_ab.sh <file> <form>... -- <wgml bench arguments>" >&2; exit 2; }
file=$1
shift
forms=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do forms+=("$1"); shift; done
[ "${1:-}" = -- ] || { echo "source_ab.sh: no -- before the bench arguments" >&2; exit 2; }
shift
[ -f "$file" ] || { echo "source_ab.sh: $file is not a file of the tree" >&2; exit 2; }
for f in "${forms[@]}"; do
    [ "$f" = - ] || [ -f "$f" ] || { echo "source_ab.sh: form $f does not exist" >&2; exit 2; }
done

. bench/gpu_env.sh
build=${WGML_AB_BUILD:-build-device}
work=$(mktemp -d)
cp "$file" "$work/tree_form"
trap 'cp "$work/tree_form" "$file"; rm -rf "$work"' EXIT
if [ ! -f "$build/CMakeCache.txt" ]; then
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >"$out/cmake.log" 2>&1 || { tail -30 "$out/cmake.log"; exit 1; }
fi

# one library (and tool) per form, each in a directory of its own
for i in "${!forms[@]}"; do
    f=${forms[$i]}
    if [ "$f" = - ]; then cp "$work/tree_form" "$file"; else cp "$f" "$file"; fi
    cmake --build "$build" -j "$(nproc)" --target wgml_tool >"$out/build_$i.log" 2>&1 ||
        { grep -E 'error|Error' "$out/build_$i.log" | head -20; exit 1; }
    mkdir -p "$work/$i"
    cp -L "$build/libwgml.so.0" "$build/wgml" "$work/$i/"
done
cp "$work/tree_form" "$file"

so=${WGML_VK_STATS_SO:-.gl/libwgml_vk_stats.so}
[ -f "$so" ] && so=$(cd "$(dirname "$so")" && pwd)/$(basename "$so") || so=""
base=$(basename "$file" .wgsl)
run_form() {   # run_form <index> <repeat>
    local i=$1 rep=$2
    local cmd=("$work/$i/wgml" bench "${bench_args[@]}")
    if [ -n "$so" ]; then
        LD_LIBRARY_PATH="$work/$i${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" WGML_LOG_KERNELS=1 WGML_VK_STATS_SO="$so" \
            bash bench/kernel_stats.sh "${cmd[@]}" 2>&1
    else
        LD_LIBRARY_PATH="$work/$i${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "${cmd[@]}" 2>&1
    fi | grep -E "^vkstats: [0-9]+ $base\.wgsl:|^\| [a-z]|rror|fail" | grep -v '^| op |' |
        if [ "$rep" = 1 ]; then sed -E 's/ \| Stack Size=0//'; else grep -v '^vkstats:'; fi
}
bench_args=("$@")
{
echo "# source_ab: $(date -u +%Y-%m-%dT%H:%MZ), $file, forms: ${forms[*]}"
echo "bench arguments: ${bench_args[*]}"
echo "columns: op, shape, time (us), GB/s, TFLOP/s, % of peak, calls per sample"
for rep in 1 2; do
    for i in "${!forms[@]}"; do
        echo "## form $i: ${forms[$i]} (repeat $rep)"
        run_form "$i" "$rep"
    done
done
} > "$out/source_ab.md" 2>&1
cat "$out/source_ab.md"
