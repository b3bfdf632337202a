#!/usr/bin/env bash
# Times the gemm tile variants of src/ops/matmul.c (WGML_MATMUL_VARIANT) on the GPU machine,
# in one device call: builds build-device if it is missing (as bench/device_run.sh does),
# checks every variant with test_matmul on the GPU, then times them.
# Writes ${OUT}/matmul_sweep.md (and build logs, test log, adapter info).
#   bash bench/matmul_sweep.sh          round 3 (bench/notes/matmul.md): the new variants
#   bash bench/matmul_sweep.sh round2   the round 1-2 sweep (tiles, gemv, row ops, top_k)
#   bash bench/matmul_sweep.sh round4   the training step's shapes: split-K, attention chunks
#   bash bench/matmul_sweep.sh round5   round 4's choices checked, options.lse
#   bash bench/matmul_sweep.sh round8   decode products' parameters, backward chunks apart
#   bash bench/matmul_sweep.sh round10  attention chunks consumed in sub-chunks, with registers
#                                       (ROUND10_PART=2: pipelines without mask/dropout code;
#                                       ROUND10_PART=3: the chunk sizes again after that)
#   bash bench/matmul_sweep.sh round12  matmul_bt through a transposed copy of b (default), against the direct kernel
#   bash bench/matmul_sweep.sh round14  t128k8r against its k loop written out (t128k8x) and with an unconditional
#                                       prefetch (t128k8xu), and the defaults, with each kernel's SASS (bench/sass_dump.py)
#   bash bench/matmul_sweep.sh round15  lanes paired for workgroup-memory reads: t128k8xp / t128k8xup against
#                                       t128k8x / t128k8xu, and the attention kernels with WGML_ATTN_PAIR=1
#   bash bench/matmul_sweep.sh round16b t64x128k8xp as the default (with the wave model): against the 128-tiles,
#                                       its K-slices on the training shapes, the training step (round 16's first
#                                       call also timed t128x64k8xp / xup and t64x128k8xup, since removed)
#                                       (round 17 timed t64k8xp the same way; removed)
#                                       (attention round 15 timed WGML_ATTN_DIRECT=0/1 the same way; removed)
#                                       (attention round 16 timed WGML_ATTN_PREFILL=r8 the same way; removed)
#                                       (attention round 17 timed WGML_ATTN_DB=1/2 the same way; removed)
#   bash bench/matmul_sweep.sh attn18   attention blocks of all heads longest first against WGML_ATTN_ORDER=head
#   bash bench/matmul_sweep.sh round18  t128k8xupi (the default) against t64x128k8xp, matmul_bt without its copy
#                                       (the round's first calls timed an ablation of t64x128k8xp, stores
#                                       before / between the products and t64x128k8xpi the same way; removed)
#   bash bench/matmul_sweep.sh round19  matmul and matmul_bt through a transposed copy of a (the default) against noatt
#   bash bench/matmul_sweep.sh round20  the launch group size (groupm=<n>) at 8192^3, 4096^3 and the LLM shapes (not yet run)
#   bash bench/matmul_sweep.sh round21  gemv_cols4's quads in flight (gemvq=<n>) on matmul 1x4096x4096, and the
#                                       K-slices and tiles of the training step's products
#   bash bench/matmul_sweep.sh round22  gemv_cols4's workgroup size (gemvwg=<n>) x columns x quads; the wave
#                                       model quantized per SM against forced slices; model_train_step
#   bash bench/matmul_sweep.sh round23  gemv_cols4's reduction in two levels (gemvred2, since removed) against the tree
#   bash bench/matmul_sweep.sh attn21   bwd_dq_ds64w again, its key loop in 8 trips of 8, with the driver's register
#                                       counts of both dq kernels (kernel and variable since removed)
#   bash bench/matmul_sweep.sh round24  the column matrix-vector kernel's workgroup size and columns on the decode
#                                       rows with K or N = 14336
#   bash bench/matmul_sweep.sh round25  16 and 32 vec4 columns per column-kernel workgroup at 1x4096x4096; the
#                                       training step with and without the reuse of a's transposed copy
#   bash bench/matmul_sweep.sh attn22   timing only: bwd_dkdv64 with S read from memory (WGML_ATTN_ABL=nos; the
#                                       variable and its code since removed, see round 22 of bench/notes/attention.md)
#   bash bench/matmul_sweep.sh robust   every kernel without the driver's bounds checks (VK_EXT_pipeline_robustness
#                                       through bench/vk_stats_layer.c): tests, SASS, the products, attention, the step
#   bash bench/matmul_sweep.sh attn25   the forward with scores as two products (fwd_s_mm + fwd_pv_mm, the default)
#                                       against prefill_lse (WGML_ATTN_FWDMM=0): tests, the rows with scores,
#                                       model_train_step
#   bash bench/matmul_sweep.sh attn24   dq from dense dS^T by bwd_dq_mm (the default) against the 64 x 64 blocks
#                                       (WGML_ATTN_DQMM=0): tests, the D64 attention rows, model_train_step
#                                       (round 24's ablations and step lengths were timed with code since removed)
#   bash bench/matmul_sweep.sh round28  the last round's slices in the main dispatch (tail1, since removed) against a
#                                       second one, forced slices at 4096^3 and two training shapes
#   bash bench/matmul_sweep.sh round28b the slot model's rule for the last round against notail and split-K
#   bash bench/matmul_sweep.sh round29  the column matrix-vector kernel in one-pass K-slices (gemv1p=<n>) against the
#                                       unsplit rule, at the three decode shapes of matmul (kernel and token since
#                                       removed, as in round29b and round29c)
#   bash bench/matmul_sweep.sh round29b the same after the last slice's gather in one round trip
#   bash bench/matmul_sweep.sh round29c more and shorter one-pass slices
#   bash bench/matmul_sweep.sh round30  operands with rows not whole vec4 through padded copies (the default) against
#                                       nopad, on the sizes not multiples of 4 and the GPT-2 head
#   bash bench/matmul_sweep.sh round31  the fast tiles' quads of scalar rows shifted out of two aligned vec4 (the
#                                       default of that call) against four scalar loads (squad), with and without
#                                       padded copies (the shifted quads since reverted and squad removed: the
#                                       section now times the scalar loads and prints squad's error)
#   bash bench/matmul_sweep.sh round33  copies with zero rows up to whole steps of K where both operands are copied
#                                       (the default) against nokpad, on the sizes not multiples of 4
#   bash bench/matmul_sweep.sh round34  the decode products with cold weights (b cycled through copies of 256 MiB
#                                       or more) beside the same rows repeating one b, wgml and PyTorch twice in
#                                       alternation, then the column kernel's shapes on the cold rows
#   bash bench/matmul_sweep.sh round36  gemv_cols4's sum over its k-groups by subgroup shuffles (the default) against
#                                       the tree (nogemvsg) on the decode rows, then the decode rows against PyTorch
#   bash bench/matmul_sweep.sh round37  gemv_cols4_sg's subgroups numbered lid / size (gemvsglin) and two diagnostic
#                                       numberings (gemvsgmode=2 / 3) against the workgroup atomic (the default);
#                                       probe, modes and tokens since removed
#   bash bench/matmul_sweep.sh round38  gemv_cols4's quads in flight consecutive per thread (gemvqmap=1) against G apart
#                                       (token since removed: the consecutive quads are the only mapping)
#   bash bench/matmul_sweep.sh round38b test_matmul on the GPU and the decode rows against PyTorch after round 38
#   bash bench/matmul_sweep.sh round39  gemv_cols4 with 8 quads in flight (gemvq=8) at 512 and 1024 threads, and 512 x 4,
#                                       against the rule, with what the driver compiled for each; the rule in the
#                                       round's source against the one before (ab/matmul_r38.wgsl, written first:
#                                       mkdir -p ab && git show df6e88b:src/kernels/matmul.wgsl > ab/matmul_r38.wgsl)
#   bash bench/matmul_sweep.sh round39b 512 x 8 as the rule for 4096 - 8191 columns: tests, the driver's statistics,
#                                       fewer threads with more quads each forced on every matmul decode row against
#                                       the rule and 1024 x 4, then the decode rows against PyTorch
#   bash bench/matmul_sweep.sh round39c fewer gemv_cols4 accumulators than quads in flight (gemvacc=<n>) on the rule and
#                                       on 1024 / 512 threads with more quads, then 1x4096x4096 against PyTorch (the
#                                       token lost and was removed: its rows now print its error)
#   bash bench/matmul_sweep.sh round39d 512 threads of 16 quads against the rule at 1x4096x4096, and against PyTorch
#   bash bench/matmul_sweep.sh round39e 512 threads of 10 and 12 quads against the rule at 1x4096x4096
#   bash bench/matmul_sweep.sh round40  gemv_cols4's last partial round of quads in one more round of loads
#                                       (gemvlast) against one quad at a time, and 256 / 512 threads of 4
#                                       quads, on the decode-fit rows with K = 1024 and 11008; the rule's
#                                       1x4096x4096 rows with and without it (run after device_run.sh;
#                                       gemvlast since removed: the section prints its error)
#   bash bench/matmul_sweep.sh round41  gemv_rows' rows per workgroup (gemvrows=2 / 4 / 8) against the rule (1) on
#                                       matmul_bt's decode-fit, decode and decode-ops rows
#   bash bench/matmul_sweep.sh round42  the cost of a dependent dispatch on the GPU clock against the recorder's
#                                       compute passes (WGML_PASS) and batches (WGML_BATCH): the chains, the
#                                       1x4096x4096 decode rows, model_decode (WGML_PASS since removed: its
#                                       settings now run as the default)
#   bash bench/matmul_sweep.sh round41b the rule after round 41 (4 or 8 rows for K <= 1024 / 512 where 512
#                                       workgroups remain) against one row (gemvrows=1): test_matmul, the rows
#   bash bench/matmul_sweep.sh attn20   dq from dS with 8 query rows per thread (bwd_dq_ds64w, then the default up to
#                                       head_dim 64) against 4 (WGML_ATTN_DQDS=4); kernel and variable since removed
# (Sections that name a tile configuration or token removed since print its "unknown token"
# error in its rows: rounds 2 - 18 name tiles that lost and were removed after round 34.)
set -uo pipefail
out=${OUT:-/tmp/wgml-out}
mkdir -p "$out"
round=${1:-round3}
. bench/gpu_env.sh
if [ ! -x build-device/wgml ] || [ ! -x build-device/tests/test_matmul ] || [ "${WGML_REBUILD:-0}" = 1 ]; then
    cmake -S . -B build-device -DCMAKE_BUILD_TYPE=Release ${WGML_CMAKE_FLAGS:-} >"$out/cmake.log" 2>&1 || { tail -30 "$out/cmake.log"; exit 1; }
fi
# always rebuild (incremental): the variants live in the sources just carried over
cmake --build build-device -j "$(nproc)" >"$out/build.log" 2>&1 || { grep -E 'error|Error' "$out/build.log" | head -30; exit 1; }
build-device/wgml info > "$out/info.txt" 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >> "$out/info.txt" 2>&1
cat "$out/info.txt"

# One bench process per variant (a fresh process per measurement, as device_run.sh does).
# Errors (an unknown token, a variant the adapter refuses) show in the table as their line.
bench() {   # bench <variant> <group> <filter> <samples>
    WGML_MATMUL_VARIANT="$1" build-device/wgml bench --group "$2" --filter "$3" --samples "$4" 2>&1 | grep -E '^\| matmul|rror|fail'
}
# Each variant's rows (samples 15), twice, alternating: a drift of the machine shows as the
# repeats' spread instead of as a variant's gain.
alternate() {   # alternate <group> <filter> <variant>...
    local g=$1 f=$2 rep v
    shift 2
    for rep in 1 2; do
        for v in "$@"; do
            echo "## WGML_MATMUL_VARIANT=\"$v\""
            bench "$v" "$g" "$f" 15
        done
    done
}
# The decode rows (1x...) of the default against PyTorch, twice: wgml, PyTorch, their table.
decode_vs_torch() {   # decode_vs_torch <tag for the json files> <title> [filter, default 1x]
    local rep f=${3:-1x}
    for rep in 1 2; do
        build-device/wgml bench --group decode --filter "$f" --samples 15 --json "$out/w$1-$rep.jsonl" > /dev/null 2>&1
        PYTHONUNBUFFERED=1 python3 bench/torch_bench.py --json "$out/t$1-$rep.jsonl" --filter "$f" > /dev/null 2>&1
        python3 bench/compare.py "$out/w$1-$rep.jsonl" "$out/t$1-$rep.jsonl" --title "$2" | grep -E '^\| (matmul|op)'
    done
}
# matmul_bt's decode rows (gemv_rows) under each variant twice, alternating: the decode-fit
# rows, the decode rows and the end-to-end model's single decode ops.
bt_decode_rows() {   # bt_decode_rows <variant>...
    local g
    for g in decode-fit decode decode-ops; do
        alternate "$g" matmul_bt "$@"
    done
}
# test_matmul on the GPU with the rule, then its shape tests under each other variant.
tests_each() {   # tests_each <variant>...
    local v
    (cd build-device && timeout 200 ./tests/test_matmul 2>&1 | tail -1)
    for v in "$@"; do
        [ -z "$v" ] || (cd build-device && WGML_MATMUL_VARIANT=$v timeout 100 ./tests/test_matmul "shapes|random_shapes|long_k" 2>&1 | tail -1)
    done
}
# What the driver compiled for gemv_cols4_sg under each variant, on the decode rows of a filter
# (bench/vk_stats_layer.c, prebuilt under .gl on the GPU machine).
gemv_stats() {   # gemv_stats <filter> <variant>...
    local f=$1 v so=${WGML_VK_STATS_SO:-.gl/libwgml_vk_stats.so}
    shift
    so=$(cd "$(dirname "$so")" && pwd)/$(basename "$so")
    for v in "$@"; do
        echo "## what the driver compiled for gemv_cols4_sg, WGML_MATMUL_VARIANT=\"$v\" (decode rows matching $f)"
        WGML_MATMUL_VARIANT=$v WGML_LOG_KERNELS=1 WGML_VK_STATS_SO="$so" \
            bash bench/kernel_stats.sh build-device/wgml bench --group decode --filter "$f" --samples 1 2>&1 |
            grep -E '^vkstats: [0-9]+ matmul.wgsl:gemv_cols4' | sed -E 's/ \| Stack Size=0//'
    done
}
# A round of the column kernel's variants: the tests, what the driver compiled, every matmul
# decode row under each variant twice, alternating.
gemv_round() {   # gemv_round <title> <filter of gemv_stats> <variant>...
    local title=$1 f=$2
    shift 2
    echo "# $title: $(date -u +%Y-%m-%dT%H:%MZ), $(head -1 "$out/info.txt")"
    echo "## test_matmul on the GPU, then shapes|random_shapes|long_k with each variant"
    tests_each "$@"
    gemv_stats "$f" "$@"
    echo "columns: op, shape, time (us), GB/s, TFLOP/s, % of peak, calls per sample"
    alternate decode "matmul" "$@"
}

if [ "$round" = round2 ]; then
{
for v in "" t128f t128np t128npf t128k32 t128k8 t128x64 t64x128 m4x8 t128m4 t128sb t64; do
    echo "## WGML_MATMUL_VARIANT=\"$v\""
    bench "$v" matmul 4096x4096x4096 7
done
for v in "" gemvc4 "gemvc4,gemvcols=2" "gemvc4,gemvcols=8" gemvcols=2 gemvcols=8; do
    echo "## WGML_MATMUL_VARIANT=\"$v\" (decode)"
    bench "$v" decode matmul 15
done
for u in 4 8; do
    echo "## WGML_NORM_UPT=$u WGML_SOFTMAX_UPT=$u"
    WGML_NORM_UPT=$u WGML_SOFTMAX_UPT=$u build-device/wgml bench --filter 16384x4096 --samples 9 | grep '^| [rs]'
done
echo "## WGML_TOPK_VARIANT=nofinish"
WGML_TOPK_VARIANT=nofinish build-device/wgml bench --filter top_k --samples 15 | grep '^| top_k'
} | tee "$out/matmul_sweep.md"
exit 0
fi

if [ "$round" = round10 ]; then
# Round 10 (bench/notes/attention.md): larger staged chunks consumed a few steps at a time
# (PF_SUB / G_SUB), with the driver's register counts of every pipeline (kernel_stats.sh
# and the layer in .gl/, built elsewhere). Tests of the variants on the GPU first.
export WGML_VK_STATS_SO=${WGML_VK_STATS_SO:-.gl/libwgml_vk_stats.so}
{
echo "# Round 10 sweep: $(date -u +%Y-%m-%dT%H:%MZ), $(head -1 "$out/info.txt")"
for env in "" "WGML_ATTN_DQ=new,16,s8 WGML_ATTN_DKDV=new,16,s8"; do
    echo "## tests: $env"
    (cd build-device && env $env timeout 200 ./tests/test_attention 2>&1 | tail -1)
done
run10() {   # run10 <group> <filter> <samples> <env...>
    local g=$1 f=$2 n=$3; shift 3
    echo "## $* ($f)"
    env "$@" bash bench/kernel_stats.sh build-device/wgml bench --group "$g" --filter "$f" --samples "$n" 2>&1 |
        grep -E '^\| flash|rror|fail|Register' | sed -E 's/vkstats: ([0-9]+) dawn_entry_point \| /  pipeline \1: /; s/ \| Stack Size=0//'
}
if [ "${ROUND10_PART:-1}" = 2 ]; then
    # part 2: pipelines built for the call's features (FEAT) against all features
    for rep in 1 2; do
        for f in "" all; do
            run10 train-ops 'D64 causal' 9 WGML_ATTN_FEAT=$f
            run10 attention 'B4 H32 S4096 D128 causal' 3 WGML_ATTN_FEAT=$f
        done
    done
    for f in "" all; do
        echo "## model_train_step WGML_ATTN_FEAT=$f"
        env WGML_ATTN_FEAT=$f build-device/wgml bench --group train-ops --filter model_train_step --samples 5 2>&1 | grep -E '^\| model|rror|fail'
    done
    exit 0
fi
if [ "${ROUND10_PART:-1}" = 3 ]; then
    # part 3: the chunk sizes again, now that the pipelines leave out mask and dropout
    for pf in bk16 bk32 bk64; do
        run10 train-ops 'D64 causal' 9 WGML_ATTN_PREFILL=$pf
        run10 attention 'B4 H32 S4096 D128 causal' 3 WGML_ATTN_PREFILL=$pf
    done
    for b in new,8 new,16 new,16,s8 new,32,s8 new,32,s16 new,8; do
        run10 train-ops 'D64 causal lse' 9 WGML_ATTN_DQ=$b WGML_ATTN_DKDV=$b
    done
    exit 0
fi
# (the day's sweep also timed the forward with sub-chunks, bk16s8 ... bk64s16: none beat
# bk16, and that variant was removed; see the notes)
for b in new,8 new,16,s8 new,16,s4 new,32,s8 new,32,s16; do
    run10 train-ops 'D64 causal lse' 9 WGML_ATTN_DQ=$b WGML_ATTN_DKDV=$b
done
for b in new,32 new,32,s8 new,32,s16 new,16,s8; do
    run10 attention 'S4096 D128 causal lse' 3 WGML_ATTN_DQ=$b WGML_ATTN_DKDV=$b
done
run10 train-ops 'D64 causal lse' 9 WGML_ATTN_DQ=new,8 WGML_ATTN_DKDV=new,8
} | tee "$out/matmul_sweep.md"
exit 0
fi

if [ "$round" = round8 ]; then
# Round 8 (bench/notes/matmul.md, attention.md): the decode products below PyTorch
# (matmul 1x4096x4096 through gemv_cols4, matmul_bt 1x4096x14336 through gemv_rows)
# against their shape parameters and K-slices, and the backward's head_dim chunks of
# bwd_dq64 and bwd_dkdv64 chosen separately (round 4 moved them together).
{
echo "# Round 8 sweep: $(date -u +%Y-%m-%dT%H:%MZ), $(head -1 "$out/info.txt")"
echo "columns: op, shape, time (us), GB/s, TFLOP/s, % of peak, calls per sample"
for v in "" gemvcols=2 gemvcols=8 gemvcols=16 splitk=2 splitk=4 gemvcols=8,splitk=2 gemvc1 ""; do
    echo "## WGML_MATMUL_VARIANT=\"$v\" 1x4096x4096 (matmul: gemv_cols4, matmul_bt: gemv_rows)"
    bench "$v" decode 1x4096x4096 15
done
for v in "" gemvrows=1 gemvrows=2 gemvrows=8 splitk=2 splitk=4 gemvrows=2,splitk=2 ""; do
    echo "## WGML_MATMUL_VARIANT=\"$v\" matmul_bt 1x4096x14336 and 1x14336x4096"
    bench "$v" decode 'x14336' 15
done
for dq in new,8 new,16 new,32; do
    for kv in new,8 new,16 new,32; do
        echo "## WGML_ATTN_DQ=$dq WGML_ATTN_DKDV=$kv D64"
        WGML_ATTN_DQ=$dq WGML_ATTN_DKDV=$kv build-device/wgml bench --group train-ops --filter 'D64 causal lse' --samples 9 2>&1 | grep -E '^\| flash|rror|fail'
    done
done
for dq in new,16 new,32; do
    for kv in new,16 new,32; do
        echo "## WGML_ATTN_DQ=$dq WGML_ATTN_DKDV=$kv D128"
        WGML_ATTN_DQ=$dq WGML_ATTN_DKDV=$kv build-device/wgml bench --group attention --filter 'S4096 D128 causal lse' --samples 3 2>&1 | grep -E '^\| flash|rror|fail'
    done
done
} | tee "$out/matmul_sweep.md"
exit 0
fi

if [ "$round" = round5 ]; then
# Round 5: the round-4 choices checked. Tests on the GPU first (matmul, attention with
# options.lse, model), then split-K of the model against forced slices, attention with
# and without options.lse, and the training step.
(cd build-device && timeout 400 ctest --output-on-failure -R 'test_(matmul|attention|model)$' >"$out/ctest_round5.log" 2>&1; tail -3 "$out/ctest_round5.log" | head -1)
{
echo "# Round 5 sweep: $(date -u +%Y-%m-%dT%H:%MZ), $(head -1 "$out/info.txt")"
echo "columns: op, shape, time (us), GB/s, TFLOP/s, % of peak, calls per sample"
for v in "" splitk=1; do
    echo "## WGML_MATMUL_VARIANT=\"$v\" LLM shapes and 8192^3"
    bench "$v" matmul 11008 7
    bench "$v" matmul 8192x8192x8192 5
done
for v in "" splitk=6 splitk=7 splitk=16; do
    echo "## WGML_MATMUL_VARIANT=\"$v\" 768x768x8192"
    bench "$v" train-ops 768x768x8192 9
done
for v in "" splitk=8; do
    echo "## WGML_MATMUL_VARIANT=\"$v\" 768x2048x8192"
    bench "$v" train-ops x8192 9
done
echo "## defaults: train-ops"
bench "" train-ops x 9
echo "## attention (round 5 also timed a warp-shaped thread placement in the backward here:"
echo "## no change, not kept; see bench/notes/attention.md)"
build-device/wgml bench --group train-ops --filter D64 --samples 9 2>&1 | grep -E '^\| flash|rror|fail'
build-device/wgml bench --group attention --filter 'S4096 D128 causal' --samples 5 2>&1 | grep -E '^\| flash|rror|fail'
echo "## model_train_step"
build-device/wgml bench --group train-ops --filter model_train_step --samples 5 2>&1 | grep -E '^\| model|rror|fail'
} | tee "$out/matmul_sweep.md"
exit 0
fi

if [ "$round" = round12 ]; then
# Round 12 (bench/notes/matmul.md): matmul_bt through a transposed copy of b (the default
# for M >= 1024) against the direct kernel (nobtt), and the training step both ways. test_matmul on the GPU
# first.
(cd build-device && timeout 300 ./tests/test_matmul >"$out/test_matmul.log" 2>&1; tail -1 "$out/test_matmul.log")
{
echo "# Round 12 sweep: $(date -u +%Y-%m-%dT%H:%MZ), $(head -1 "$out/info.txt")"
echo "columns: op, shape, time (us), GB/s, TFLOP/s, % of peak, calls per sample"
for rep in 1 2; do
    for v in nobtt ""; do
        echo "## WGML_MATMUL_VARIANT=\"$v\" (repeat $rep)"
        bench "$v" matmul matmul_bt 7
        bench "$v" train-ops matmul_bt 9
        WGML_MATMUL_VARIANT="$v" build-device/wgml bench --group train-ops --filter model_train_step --samples 5 2>&1 | grep -E '^\| model|rror|fail'
    done
done
echo "## the same shapes as matmul (b [K, N]), for the cost of the copy"
bench "" matmul matmul 7 | grep -E '^\| matmul \|'
bench "" train-ops matmul 9 | grep -E '^\| matmul \|'
} | tee "$out/matmul_sweep.md"
exit 0
fi

if [ "$round" = round14 ]; then
# Round 14 (bench/notes/matmul.md): what the SASS of t128k8r showed around its products.
# test_matmul on the GPU first, then each variant's SASS (instruction counts; the files of
# the matmul pipelines come back), then the times, twice, alternating.
(cd build-device && timeout 300 ./tests/test_matmul >"$out/test_matmul.log" 2>&1; tail -1 "$out/test_matmul.log")
nvd=$(command -v nvdisasm || ls /usr/local/cuda*/bin/nvdisasm 2>/dev/null | head -1)
{
echo "# Round 14 sweep: $(date -u +%Y-%m-%dT%H:%MZ), $(head -1 "$out/info.txt")"
for v in t128k8r "" t128k8x t128k8xu; do
    d=/tmp/wgml-sass-${v:-default}; rm -rf "$d"; mkdir -p "$d"
    echo "## SASS: WGML_MATMUL_VARIANT=\"$v\" (matmul 4096^3; pipeline 2: matmul, 4: matmul_at)"
    WGML_MATMUL_VARIANT="$v" WGML_VK_STATS_DIR="$d" WGML_VK_STATS_SO=${WGML_VK_STATS_SO:-.gl/libwgml_vk_stats.so} bash bench/kernel_stats.sh \
        build-device/wgml bench --group matmul --filter 4096x4096x4096 --samples 1 2>&1 | grep -E 'Register|rror' | sed -E 's/ \| Stack Size=0//'
    [ -n "$nvd" ] && python3 bench/sass_dump.py "$d" "$nvd" SM90 && cp "$d/002_dawn_entry_point.sass" "$out/gemm_${v:-default}.sass"
done
echo "columns: op, shape, time (us), GB/s, TFLOP/s, % of peak, calls per sample"
for rep in 1 2; do
    for v in t128k8r "" t128k8x t128k8xu; do
        echo "## WGML_MATMUL_VARIANT=\"$v\" (repeat $rep)"
        bench "$v" matmul 4096x4096x4096 7
        bench "$v" matmul 11008 5
        bench "$v" train-ops matmul 7
    done
done
} | tee "$out/matmul_sweep.md"
exit 0
fi

if [ "$round" = round15 ]; then
# Round 15 (bench/notes/matmul.md, attention.md): the lanes placed so that every 16-byte
# workgroup read is shared by lane pairs (n, n^1) or (n, n^2). Tests of the paired
# variants on the GPU first, then the times, twice, alternating.
(cd build-device && timeout 300 ./tests/test_matmul variants >"$out/test_matmul.log" 2>&1; echo "test_matmul variants: $(tail -1 "$out/test_matmul.log")")
(cd build-device && WGML_ATTN_PAIR=1 timeout 300 ./tests/test_attention >"$out/test_attention.log" 2>&1; echo "test_attention (PAIR): $(tail -1 "$out/test_attention.log")")
{
echo "# Round 15 sweep: $(date -u +%Y-%m-%dT%H:%MZ), $(head -1 "$out/info.txt")"
echo "columns: op, shape, time (us), GB/s, TFLOP/s, % of peak, calls per sample"
for rep in 1 2; do
    for v in t128k8x t128k8xp t128k8xu t128k8xup; do
        echo "## WGML_MATMUL_VARIANT=\"$v\" (repeat $rep)"
        bench "$v" matmul 4096x4096x4096 7
        bench "$v" matmul 11008 5
        bench "$v" train-ops matmul 7
    done
    for pair in 0 1; do
        echo "## WGML_ATTN_PAIR=$pair (repeat $rep)"
        WGML_ATTN_PAIR=$pair build-device/wgml bench --group train-ops --filter D64 --samples 9 2>&1 | grep -E '^\| flash|rror|fail'
        WGML_ATTN_PAIR=$pair build-device/wgml bench --group attention --filter 'S4096 D128 causal' --samples 3 2>&1 | grep -E '^\| flash|rror|fail'
        WGML_ATTN_PAIR=$pair build-device/wgml bench --group train-ops --filter model_train_step --samples 3 2>&1 | grep -E '^\| model|rror|fail'
    done
done
} | tee "$out/matmul_sweep.md"
exit 0
fi

if [ "$round" = round16b ]; then
# Round 16, second call: t64x128k8xp is the default, with the split-K wave model of the
# 128-tiles generalised to it. The whole matmul test on the GPU first; then the default
# against the 128-tiles (t128k8xup was the default of matmul / matmul_bt, t128k8xp of
# matmul_at), forced K-slices of the new tile on the training shapes, and the training step.
(cd build-device && timeout 300 ./tests/test_matmul >"$out/test_matmul.log" 2>&1; echo "test_matmul: $(tail -1 "$out/test_matmul.log")")
{
echo "# Round 16b sweep: $(date -u +%Y-%m-%dT%H:%MZ), $(head -1 "$out/info.txt")"
echo "columns: op, shape, time (us), GB/s, TFLOP/s, % of peak, calls per sample"
for rep in 1 2; do
    for v in "" t128k8xup t128k8xp; do
        echo "## WGML_MATMUL_VARIANT=\"$v\" (repeat $rep)"
        bench "$v" matmul 4096x4096x4096 7
        bench "$v" matmul 8192x8192x8192 3
        bench "$v" matmul 11008 5
        bench "$v" train-ops matmul 7
    done
done
for sh in 8192x768x768 8192x768x2048 768x768x8192 768x2048x8192 2048x768x8192; do
    for v in t64x128k8xp,splitk=1 t64x128k8xp,splitk=2 t64x128k8xp,splitk=3 t64x128k8xp,splitk=4 t64x128k8xp,splitk=6 t64x128k8xp,splitk=8; do
        echo "## WGML_MATMUL_VARIANT=\"$v\" $sh"
        bench "$v" train-ops "$sh" 7
    done
done
for rep in 1 2; do
    for v in "" t128k8xup; do
        echo "## WGML_MATMUL_VARIANT=\"$v\" model_train_step (repeat $rep)"
        WGML_MATMUL_VARIANT="$v" build-device/wgml bench --group train-ops --filter model_train_step --samples 3 2>&1 | grep -E '^\| model|rror|fail'
    done
done
} | tee "$out/matmul_sweep.md"
exit 0
fi

if [ "$round" = attn18 ]; then
# Attention round 18 (bench/notes/attention.md): the blocks of all heads longest first
# (default) against the blocks of one head together (WGML_ATTN_ORDER=head).
{
echo "# Attention round 18: $(date -u +%Y-%m-%dT%H:%MZ), $(head -1 "$out/info.txt")"
ords=${ATTN18_VARIANTS:-head}
for o in "" $ords; do
    echo "## tests: WGML_ATTN_ORDER=\"$o\""
    (cd build-device && WGML_ATTN_ORDER=$o timeout 300 ./tests/test_attention 2>&1 | tail -1)
done
echo "columns: op, shape, time (us), GB/s, TFLOP/s, % of peak, calls per sample"
for rep in 1 2; do
    for o in $ords ""; do
        echo "## WGML_ATTN_ORDER=\"$o\" (repeat $rep)"
        WGML_ATTN_ORDER=$o build-device/wgml bench --group train-ops --filter D64 --samples 9 2>&1 | grep -E '^\| flash|rror|fail'
        WGML_ATTN_ORDER=$o build-device/wgml bench --group attention --samples 3 2>&1 | grep -E '^\| flash|rror|fail' | grep -v decode
    done
done
for o in $ords ""; do
    echo "## WGML_ATTN_ORDER=\"$o\" model_train_step"
    WGML_ATTN_ORDER=$o build-device/wgml bench --filter model_train_step --samples 5 2>&1 | grep -E '^\| model|rror|fail'
done
} | tee "$out/matmul_sweep.md"
exit 0
fi

sweep_header() {   # sweep_header <title>: the first lines of a round's table
    echo "# $1: $(date -u +%Y-%m-%dT%H:%MZ), $(head -1 "$out/info.txt")"
    echo "columns: op, shape, time (us), GB/s, TFLOP/s, % of peak, calls per sample"
}

# twice_each <label> <calls> <WGML_MATMUL_VARIANT>...: every variant twice, alternating (the
# first repeat of all, then the second), each running the bench calls of <calls> ("group
# filter samples", ';' between calls); a non-empty <label> follows the variant in headings.
twice_each() {
    local label=$1 rep v c calls
    IFS=';' read -ra calls <<< "$2"
    shift 2
    for rep in 1 2; do
        for v in "$@"; do
            echo "## WGML_MATMUL_VARIANT=\"$v\"${label:+ $label} (repeat $rep)"
            for c in "${calls[@]}"; do bench "$v" $c; done
        done
    done
}

# tested_ab <title> <calls> <WGML_MATMUL_VARIANT>...: test_matmul on the GPU, then the
# variants twice each (twice_each) into matmul_sweep.md, and its rows printed (rounds 30 - 33).
tested_ab() {
    local title=$1 calls=$2
    shift 2
    {
        (cd build-device && timeout 300 ./tests/test_matmul >"$out/test_matmul.log" 2>&1; echo "test_matmul: $(tail -1 "$out/test_matmul.log")")
        sweep_header "$title"
        twice_each "" "$calls" "$@"
    } > "$out/matmul_sweep.md" 2>&1
    awk -F'|' '/^## /{v=$0; sub(/^## WGML_MATMUL_VARIANT=/, "", v)} /^test_matmul/{print} /^\| matmul/{print v, $2, $3, $4}' "$out/matmul_sweep.md"
}

# An A/B of gemm choices in one call (matmul rounds 18 - 19): test_matmul on the GPU, the
# square, LLM and training-step products twice, alternating, then the training step.
ab_sweep() {   # ab_sweep <title> <WGML_MATMUL_VARIANT>... ("" is the default)
    local title=$1 v
    shift
    (cd build-device && timeout 300 ./tests/test_matmul >"$out/test_matmul.log" 2>&1; echo "test_matmul: $(tail -1 "$out/test_matmul.log")")
    sweep_header "$title"
    twice_each "" "matmul 4096x4096x4096 5;matmul 8192x8192x8192 2;matmul 11008 3;train-ops matmul 5" "$@"
    for v in "$@"; do
        echo "## WGML_MATMUL_VARIANT=\"$v\" model_train_step"
        WGML_MATMUL_VARIANT="$v" build-device/wgml bench --filter model_train_step --samples 3 2>&1 | grep -E '^\| model|rror|fail'
    done
}

if [ "$round" = round18 ]; then
# Matmul round 18 (bench/notes/matmul.md): t128k8xupi (the default since) against round 16's
# default t64x128k8xp, and matmul_bt without its transposed copy. (The round's first two
# calls timed t64x128k8xp with parts of its step left out, its next blocks stored before or
# between the products, and t64x128k8xpi: variants since removed.)
{
ab_sweep "Matmul round 18" t64x128k8xp ""
echo "## WGML_MATMUL_VARIANT=nobtt"
WGML_MATMUL_VARIANT=nobtt build-device/wgml bench --filter matmul_bt --group train-ops --samples 5 2>&1 | grep -E '^\| matmul|rror|fail'
WGML_MATMUL_VARIANT=nobtt build-device/wgml bench --filter matmul_bt --group matmul --samples 3 2>&1 | grep -E '^\| matmul_bt \| 2048|rror|fail'
} > "$out/matmul_sweep.md" 2>&1
exit 0
fi

if [ "$round" = round19 ]; then
# Matmul round 19 (bench/notes/matmul.md): matmul and matmul_bt through a transposed copy of a,
# run as matmul_at (the default for M >= 1024, N >= 512 on a GPU) against without (noatt).
ab_sweep "Matmul round 19" noatt "" > "$out/matmul_sweep.md" 2>&1
exit 0
fi

if [ "$round" = round20 ]; then
# Matmul round 20 (bench/notes/matmul.md, "Next (after round 19)"): the launch group size
# (tile rows per group, GROUP_M 8 by default) on the shapes whose matrices exceed the L2.
{
sweep_header "Matmul round 20"
twice_each "" "matmul 8192x8192x8192 2;matmul 4096x4096x4096 5;matmul 11008 3" groupm=2 groupm=4 "" groupm=16 groupm=32
} > "$out/matmul_sweep.md" 2>&1
exit 0
fi

if [ "$round" = round21 ]; then
# Matmul round 21 (bench/notes/matmul.md): k-quads in flight per gemv_cols4 thread (GQ 2 by
# default) crossed with its columns per workgroup and K-slices, on the column matrix-vector
# product (matmul_bt 1x4096x4096 in the same rows runs gemv_rows: a control); then the
# training step's 768-wide products against forced K-slices and the 64 x 128 tile.
{
sweep_header "Matmul round 21"
twice_each "" "decode 1x4096x4096 15" "" gemvq=1 gemvq=4 gemvq=4,gemvcols=2 gemvq=4,gemvcols=8 gemvq=4,gemvcols=8,splitk=2 \
    gemvq=4,gemvcols=8,splitk=4 gemvcols=8,splitk=4
for v in "" splitk=1 splitk=3 splitk=4 t64x128k8xp t64x128k8xp,splitk=1 noatt ""; do
    echo "## WGML_MATMUL_VARIANT=\"$v\" training step products"
    bench "$v" train-ops matmul 5
done
} > "$out/matmul_sweep.md" 2>&1
exit 0
fi

if [ "$round" = round22 ]; then
# Matmul round 22 (bench/notes/matmul.md): threads per gemv_cols4 workgroup crossed with its
# columns and k-quads on matmul 1x4096x4096; the split-K model quantized per SM (the default
# now) against forced slices on the LLM and training shapes it changes; the training step.
(cd build-device && timeout 300 ./tests/test_matmul >"$out/test_matmul.log" 2>&1; echo "test_matmul: $(tail -1 "$out/test_matmul.log")")
{
sweep_header "Matmul round 22"
variants=()
for wg in 256 512 1024; do
    variants+=("gemvwg=$wg,gemvq=4" "gemvwg=$wg,gemvq=1" "gemvwg=$wg,gemvq=4,gemvcols=8" "gemvwg=$wg,gemvq=1,gemvcols=8")
done
twice_each "" "decode 1x4096x4096 15" "${variants[@]}"
twice_each "LLM shapes" "matmul 11008 3" "" splitk=1 splitk=2
for v in "" splitk=2 splitk=8; do
    echo "## WGML_MATMUL_VARIANT=\"$v\" training step products"
    bench "$v" train-ops matmul 5
done
echo "## model_train_step (the defaults)"
build-device/wgml bench --filter model_train_step --samples 3 2>&1 | grep -E '^\| model|rror|fail'
} > "$out/matmul_sweep.md" 2>&1
exit 0
fi

if [ "$round" = round23 ]; then
# Matmul round 23 (bench/notes/matmul.md): gemv_cols4's reduction over its k-groups in two
# levels (two barriers) against the tree (7 barriers in the 1024-thread default at N = 4096).
{
sweep_header "Matmul round 23"
twice_each "" "decode 1x4096x4096 15" "" gemvred2 gemvwg=256,gemvcols=4 gemvred2,gemvwg=256,gemvcols=4
} > "$out/matmul_sweep.md" 2>&1
exit 0
fi


if [ "$round" = round24 ]; then
# Matmul round 24 (bench/notes/matmul.md): gemv_cols4's 1024-thread rule (4096 - 8191 columns)
# on matmul 1x4096x14336 (K long) and 1x14336x4096 (256 threads by the rule) against the
# other workgroup sizes; the matmul_bt rows of the group are controls.
{
sweep_header "Matmul round 24"
twice_each "" "decode x14336 15" "" gemvwg=256,gemvcols=4 gemvwg=256,gemvcols=8 gemvwg=1024,gemvcols=8
} > "$out/matmul_sweep.md" 2>&1
exit 0
fi

if [ "$round" = round25 ]; then
# Matmul round 25 (bench/notes/matmul.md): the column matrix-vector kernel with 16 and 32 vec4
# columns per workgroup (a warp reads 256 / 512 contiguous bytes of a row, 64 / 32
# workgroups at N = 4096) against the rule (1024 threads x 8 columns); then the training
# step with and without the reuse of a's transposed copy (fresh).
{
sweep_header "Matmul round 25"
twice_each "" "decode 1x4096x4096 15" "" gemvwg=1024,gemvcols=16 gemvwg=1024,gemvcols=16,gemvq=2 gemvwg=512,gemvcols=16 \
    gemvwg=1024,gemvcols=32
for v in "" fresh "" fresh; do
    echo "## WGML_MATMUL_VARIANT=\"$v\" model_train_step"
    WGML_MATMUL_VARIANT="$v" build-device/wgml bench --filter model_train_step --samples 5 2>&1 | grep -E '^\| model|rror|fail'
done
} > "$out/matmul_sweep.md" 2>&1
exit 0
fi

if [ "$round" = round28 ]; then
# Matmul round 28 (bench/notes/matmul.md): the last round's K-slices in the main dispatch
# (tail1, gemm2_tail) against a second dispatch, at 8192^3 (the rule's 4 tiles x 32
# slices) and forced at 4096^3 (100 tiles in 3 - 16 slices whose length is a whole number
# of the tile's 8-steps), 8192 x 2048 x 768 (100 tiles, K 768) and 4096 x 11008 x 2048
# (112 tiles); test_matmul on the GPU first.
(cd build-device && timeout 300 ./tests/test_matmul >"$out/test_matmul.log" 2>&1; echo "test_matmul: $(tail -1 "$out/test_matmul.log")")
{
sweep_header "Matmul round 28"
v4096=(notail)
for k in 3 4 5 6 8 9 12 16; do v4096+=("tail=100,tailk=$k" "tail1,tail=100,tailk=$k"); done
twice_each "" "matmul 4096x4096x4096 9" "${v4096[@]}"
twice_each "" "matmul 8192x8192x8192 3" "" tail1 notail
twice_each "" "train-ops 8192x2048x768 9" notail "tail=100,tailk=2" "tail1,tail=100,tailk=2" "tail=100,tailk=3" \
    "tail1,tail=100,tailk=3"
twice_each "" "matmul 4096x11008x2048 7" notail "tail1,tail=112,tailk=2" "tail1,tail=112,tailk=4" \
    "tail1,tail=112,tailk=7" "tail1,tail=112,tailk=8"
} > "$out/matmul_sweep.md" 2>&1
exit 0
fi

if [ "$round" = round28b ]; then
# Matmul round 28, second call: the slot model's rule for the last round (plan_tail,
# tail_gain) against notail, at 4096^3 (the rule's 5 slices, and 9) and on the LLM shapes
# (2048 x 11008 x 4096: 56 tiles in 7 slices instead of split-K's 2 slices, also forced);
# test_matmul on the GPU first.
(cd build-device && timeout 300 ./tests/test_matmul >"$out/test_matmul.log" 2>&1; echo "test_matmul: $(tail -1 "$out/test_matmul.log")")
{
sweep_header "Matmul round 28b"
twice_each "" "matmul 4096x4096x4096 9" "" notail "tail=100,tailk=9"
twice_each "" "matmul 11008 7" "" notail splitk=2
} > "$out/matmul_sweep.md" 2>&1
exit 0
fi

if [ "$round" = round29 ]; then
# Matmul round 29 (bench/notes/matmul.md): the column matrix-vector kernel in one-pass
# K-slices (gemv1p=<n>, gemv_cols4_1pass: the last slice of each column block adds them up in
# the same dispatch) against the unsplit rule, across workgroup sizes and column widths, at
# matmul 1x4096x4096 (matmul_bt's gemv_rows in the same rows as the reference reader), then at
# the two 14336 decode shapes; test_matmul on the GPU first.
(cd build-device && timeout 300 ./tests/test_matmul >"$out/test_matmul.log" 2>&1; echo "test_matmul: $(tail -1 "$out/test_matmul.log")")
{
sweep_header "Matmul round 29"
twice_each "" "decode 1x4096x4096 15" "" gemv1p=2 gemv1p=3 gemv1p=4 \
    gemvwg=512,gemvcols=8,gemv1p=2 gemvwg=512,gemvcols=8,gemv1p=4 \
    gemvwg=256,gemvcols=8,gemv1p=2 gemvwg=256,gemvcols=8,gemv1p=4 \
    gemvwg=256,gemvcols=4,gemv1p=2 gemvwg=256,gemvcols=4,gemv1p=4 \
    gemvwg=1024,gemvcols=16,gemv1p=2 gemvwg=1024,gemvcols=16,gemv1p=4 gemvwg=512,gemvcols=16,gemv1p=4 \
    gemvwg=256,gemvcols=16,gemv1p=8 gemvwg=1024,gemvcols=32,gemv1p=4 gemvwg=1024,gemvcols=32,gemv1p=8 \
    gemvwg=256,gemvcols=32,gemv1p=16 gemvwg=1024,gemvcols=64,gemv1p=8 gemvwg=256,gemvcols=64,gemv1p=16
twice_each "" "decode 1x4096x14336 9;decode 1x14336x4096 9" "" gemv1p=2 gemv1p=4 \
    gemvwg=1024,gemvcols=16,gemv1p=4 gemvwg=1024,gemvcols=32,gemv1p=8
} > "$out/matmul_sweep.md" 2>&1
# one line per variant and row: the variant, the op and shape, the time (us)
awk -F'|' '/^## /{v=$0; sub(/^## WGML_MATMUL_VARIANT=/, "", v)} /^\| matmul/{print v, $2, $3, $4}' "$out/matmul_sweep.md"
exit 0
fi

if [ "$round" = round29b ]; then
# Matmul round 29, second call: the last slice gathers every slot of its block at once (one
# round trip to memory instead of a chain of S x 4 atomic loads), the same configurations.
(cd build-device && timeout 300 ./tests/test_matmul >"$out/test_matmul.log" 2>&1; echo "test_matmul: $(tail -1 "$out/test_matmul.log")")
{
sweep_header "Matmul round 29b"
twice_each "" "decode 1x4096x4096 15" "" gemv1p=2 \
    gemvwg=512,gemvcols=8,gemv1p=2 gemvwg=256,gemvcols=8,gemv1p=2 gemvwg=256,gemvcols=8,gemv1p=4 \
    gemvwg=256,gemvcols=4,gemv1p=2 gemvwg=1024,gemvcols=16,gemv1p=2 gemvwg=512,gemvcols=16,gemv1p=2 \
    gemvwg=1024,gemvcols=32,gemv1p=4 gemvwg=1024,gemvcols=64,gemv1p=8
twice_each "" "decode 1x4096x14336 9;decode 1x14336x4096 9" "" gemv1p=2 gemvwg=512,gemvcols=8,gemv1p=2
} > "$out/matmul_sweep.md" 2>&1
awk -F'|' '/^## /{v=$0; sub(/^## WGML_MATMUL_VARIANT=/, "", v)} /^\| matmul /{print v, $2, $3, $4}' "$out/matmul_sweep.md"
exit 0
fi

if [ "$round" = round29c ]; then
# Matmul round 29, third call: more and shorter one-pass slices (256 threads x 8 vec4 columns
# in 4 - 32 slices: 512 - 4096 workgroups), and 128- and 512-thread workgroups.
{
sweep_header "Matmul round 29c"
twice_each "" "decode 1x4096x4096 15" "" gemvwg=256,gemvcols=8,gemv1p=4 gemvwg=256,gemvcols=8,gemv1p=8 \
    gemvwg=256,gemvcols=8,gemv1p=16 gemvwg=256,gemvcols=8,gemv1p=32 gemvwg=512,gemvcols=8,gemv1p=4 \
    gemvwg=512,gemvcols=8,gemv1p=8 gemvwg=128,gemvcols=8,gemv1p=8 gemvwg=128,gemvcols=8,gemv1p=16 \
    gemvwg=256,gemvcols=16,gemv1p=8 gemvwg=256,gemvcols=16,gemv1p=16 gemvwg=256,gemvcols=4,gemv1p=8
} > "$out/matmul_sweep.md" 2>&1
awk -F'|' '/^## /{v=$0; sub(/^## WGML_MATMUL_VARIANT=/, "", v)} /^\| matmul/{print v, $2, $3, $4}' "$out/matmul_sweep.md"
exit 0
fi

if [ "$round" = round30 ]; then
# Matmul round 30: operands read along M or N with rows not whole vec4 through copies with
# padded rows (the default on a GPU) against without (nopad), on the sizes that are not
# multiples of 4 and the GPT-2 head; test_matmul on the GPU first.
tested_ab "Matmul round 30" "matmul 4095 3;matmul 50257 2" "" nopad
exit 0
fi

if [ "$round" = round31 ]; then
# Matmul round 31: the fast tiles' quads of an operand whose rows are not whole vec4, two
# aligned vec4 shifted (the default) against four scalar loads (squad), with the padded
# copies (the default on a GPU) and without (nopad: every odd operand read in quads);
# test_matmul on the GPU first.
tested_ab "Matmul round 31" "matmul 4095 3;matmul 50257 2" "" squad nopad nopad,squad
exit 0
fi

if [ "$round" = round33 ]; then
# Matmul round 33: where both operands are copies, the copies with zero rows up to whole
# steps of K (the default) against K rows and the partial step (nokpad); test_matmul on the
# GPU first.
tested_ab "Matmul round 33" "matmul 409 3" "" nokpad
exit 0
fi

if [ "$round" = round34 ]; then
# Matmul round 34: a decoding model reads each weight once per token, so no product finds
# its b in the L2; the decode rows repeat one b (64 MiB at 1 x 4096 x 4096, near the H200's
# 50 MB L2). The "cold" rows cycle through copies (tools/bench_cases.c, su_mm_cold). Both
# libraries twice, alternating, each pair joined by compare.py; then gemv_cols shapes cold.
{
echo "# Round 34: $(date -u +%Y-%m-%dT%H:%MZ), $(head -1 "$out/info.txt")"
for rep in 1 2; do
    build-device/wgml bench --group decode --filter 1x --samples 15 --json "$out/w34-$rep.jsonl" > /dev/null 2>&1
    PYTHONUNBUFFERED=1 python3 bench/torch_bench.py --json "$out/t34-$rep.jsonl" --filter 1x > /dev/null 2>&1
    python3 bench/compare.py "$out/w34-$rep.jsonl" "$out/t34-$rep.jsonl" --title "Round 34, repeat $rep" | grep -E '^\| (matmul|op)'
done
for v in "" "gemvwg=256,gemvcols=4" "gemvwg=512,gemvcols=8" "gemvwg=1024,gemvcols=16" "gemvq=1"; do
    echo "## WGML_MATMUL_VARIANT=\"$v\""
    bench "$v" decode cold 15
done
} | tee "$out/matmul_sweep.md"
exit 0
fi

if [ "$round" = round36 ]; then
# Matmul round 36: gemv_cols4's sum over its k-groups by subgroup shuffles and one barrier
# (gemv_cols4_sg, the default where the subgroups allow) against the tree (nogemvsg), twice,
# alternating, after test_matmul on the GPU; then the decode rows against PyTorch.
# (Round 35 timed the tree's cost with an ablation token, gemvnored, since removed.)
{
echo "# Round 36: $(date -u +%Y-%m-%dT%H:%MZ), $(head -1 "$out/info.txt")"
echo "## test_matmul on the GPU"
(cd build-device && timeout 200 ./tests/test_matmul 2>&1 | tail -2)
alternate decode 1x "" nogemvsg "gemvwg=256,gemvcols=4" "gemvwg=256,gemvcols=4,nogemvsg"
decode_vs_torch 36 "Round 36"
} | tee "$out/matmul_sweep.md"
exit 0
fi

if [ "$round" = round38 ]; then
# Matmul round 38: gemv_cols4's quads in flight consecutive per thread (gemvqmap=1: a round's
# reads sweep the rows in the order the subgroups were numbered) against G apart (the
# default), twice, alternating, after the column kernel's tests on the GPU with it. (The
# consecutive quads became the only mapping after the round and the token was removed: the
# section now prints its error.)
{
echo "# Round 38: $(date -u +%Y-%m-%dT%H:%MZ), $(head -1 "$out/info.txt")"
echo "## test_matmul on the GPU (shapes, random_shapes, long_k) with gemvqmap=1 at 1024 x 8 and 64 x 4"
for v in gemvqmap=1 "gemvqmap=1,gemvwg=64,gemvcols=4"; do
    (cd build-device && WGML_MATMUL_VARIANT=$v timeout 100 ./tests/test_matmul "shapes|random_shapes|long_k" 2>&1 | tail -1)
done
alternate decode 1x "" gemvqmap=1 nogemvsg "nogemvsg,gemvqmap=1"
} | tee "$out/matmul_sweep.md"
exit 0
fi

if [ "$round" = round38b ]; then
# Matmul round 38, confirmed: the consecutive quads as gemv_cols4's only mapping, test_matmul
# on the GPU, then the decode rows against PyTorch, twice.
{
echo "# Round 38b: $(date -u +%Y-%m-%dT%H:%MZ), $(head -1 "$out/info.txt")"
echo "## test_matmul on the GPU"
(cd build-device && timeout 200 ./tests/test_matmul 2>&1 | tail -1)
decode_vs_torch 38 "Round 38b"
} | tee "$out/matmul_sweep.md"
exit 0
fi

if [ "$round" = round39 ]; then
# Matmul round 39: gemv_cols4 with GQ 8 quads in flight (gemvq=8) at 512 threads (the bytes in
# flight per SM of 1024 x GQ 4, at 128 registers a thread) and at 1024 (capped at 64 registers
# a thread), 512 x GQ 4 and 1024 x GQ 1, against the rule (1024 x GQ 4): test_matmul on the GPU with each,
# what the driver compiled for each (registers, local memory, loads issued before the first
# multiply-add, from the SASS), the decode rows twice, alternating; then the rule in the
# round's source (arrays for 8 quads) against the source before it (ab/matmul_r38.wgsl).
so=${WGML_VK_STATS_SO:-.gl/libwgml_vk_stats.so}
so=$(cd "$(dirname "$so")" && pwd)/$(basename "$so")
nvd=$(command -v nvdisasm || ls /usr/local/cuda*/bin/nvdisasm 2>/dev/null | head -1)
vs=("" "gemvq=8,gemvwg=512" "gemvq=8" "gemvwg=512" "gemvq=1")
{
echo "# Round 39: $(date -u +%Y-%m-%dT%H:%MZ), $(head -1 "$out/info.txt")"
echo "## test_matmul on the GPU, then shapes|random_shapes|long_k with each variant"
(cd build-device && timeout 200 ./tests/test_matmul 2>&1 | tail -1)
for v in "${vs[@]:1}"; do
    (cd build-device && WGML_MATMUL_VARIANT=$v timeout 100 ./tests/test_matmul "shapes|random_shapes|long_k" 2>&1 | tail -1)
done
for i in "${!vs[@]}"; do
    v=${vs[$i]}
    d=/tmp/wgml-sass-39-$i; rm -rf "$d"; mkdir -p "$d"
    echo "## what the driver compiled for gemv_cols4_sg, WGML_MATMUL_VARIANT=\"$v\""
    WGML_MATMUL_VARIANT=$v WGML_LOG_KERNELS=1 WGML_VK_STATS_SO="$so" WGML_VK_STATS_DIR="$d" \
        bash bench/kernel_stats.sh build-device/wgml bench --group decode --filter 1x4096x4096 --samples 1 2>&1 |
        grep -E '^vkstats: [0-9]+ matmul.wgsl:gemv_cols4' | sed -E 's/ \| Stack Size=0//' | tee "$d/lines"
    n=$(awk '{ print $2; exit }' "$d/lines")
    if [ -n "$n" ] && [ -n "$nvd" ] && python3 bench/sass_dump.py "$d" "$nvd" SM90 >/dev/null 2>&1; then
        f=$(ls "$d"/$(printf %03u "$n")_*.sass 2>/dev/null | head -1)
        if [ -n "$f" ]; then
            echo "SASS: $(grep -c 'LDG' "$f") LDG, $(grep -c 'LDL' "$f") LDL, $(grep -c 'STL' "$f") STL, $(grep -c 'FFMA' "$f") FFMA," \
                 "$(awk '/FFMA/ { exit } /LDG/ { n++ } END { print n + 0 }' "$f") LDG before the first FFMA," \
                 "$(grep -cE '^ +/\*[0-9a-f]{4}\*/' "$f") instructions"
            cp "$f" "$out/gemv_cols4_sg_39_$i.sass"
        fi
    fi
done
echo "columns: op, shape, time (us), GB/s, TFLOP/s, % of peak, calls per sample"
alternate decode 1x4096x4096 "${vs[@]}"
} | tee "$out/matmul_sweep.md"
echo "## the rule in the round's source against the source before it"
[ -f ab/matmul_r38.wgsl ] && bash bench/source_ab.sh src/kernels/matmul.wgsl ab/matmul_r38.wgsl - -- --group decode --filter 1x4096x4096 --samples 15 |
    grep -E '^#|^\| matmul|gemv_cols4|rror|fail'
exit 0
fi

if [ "$round" = round39b ]; then
# Matmul round 39b: 512 threads of 8 quads as the rule for 4096 - 8191 columns (round 39: 0.4 us
# faster than 1024 x 4 at 1 x 4096 x 4096). test_matmul on the GPU; what the driver compiled;
# fewer threads with more quads each, forced on every matmul decode row, against the rule and
# the rule before (1024 x 4), twice, alternating; then the decode rows against PyTorch, twice.
vs=("" "gemvwg=1024,gemvq=4" "gemvq=8,gemvwg=512" "gemvq=8,gemvwg=256" "gemvq=16,gemvwg=256" "gemvq=16,gemvwg=128")
{
gemv_round "Round 39b" 1x4096x "${vs[@]}"
decode_vs_torch 39 "Round 39b"
} | tee "$out/matmul_sweep.md"
exit 0
fi

if [ "$round" = round39c ]; then
# Matmul round 39c: fewer accumulators than quads in flight (gemvacc=<n>: the registers of the
# other accumulators free for loads in flight), on the rule (512 x 8 for 4096 - 8191 columns,
# 256 x 4 above) and on 1024 and 512 threads with more quads: test_matmul on the GPU with
# each, what the driver compiled, every matmul decode row twice, alternating; then the
# 1 x 4096 x 4096 rows against PyTorch with the rule and with gemvacc=1.
vs=("" "gemvacc=1" "gemvacc=2" "gemvacc=1,gemvq=8,gemvwg=1024" "gemvacc=1,gemvq=4,gemvwg=1024" "gemvacc=1,gemvq=16")
{
gemv_round "Round 39c" x4096 "${vs[@]}"
echo "## 1x4096x4096 against PyTorch: the rule"
decode_vs_torch 39c "Round 39c, the rule" 1x4096x4096
echo "## 1x4096x4096 against PyTorch: gemvacc=1"
WGML_MATMUL_VARIANT=gemvacc=1 decode_vs_torch 39a "Round 39c, gemvacc=1" 1x4096x4096
} | tee "$out/matmul_sweep.md"
exit 0
fi

if [ "$round" = round39d ]; then
# Matmul round 39d: 512 threads of 16 quads (one round over K = 4096; round 39c: the driver
# keeps loads in flight only as far as independent accumulators allow, so registers measure
# them) against the rule (512 x 8) at 1 x 4096 x 4096: test_matmul's shape tests with it,
# what the driver compiled, the rows twice, alternating, then both against PyTorch.
vs=("" "gemvq=16,gemvwg=512")
{
echo "# Round 39d: $(date -u +%Y-%m-%dT%H:%MZ), $(head -1 "$out/info.txt")"
(cd build-device && WGML_MATMUL_VARIANT=gemvq=16,gemvwg=512 timeout 100 ./tests/test_matmul "shapes|random_shapes|long_k" 2>&1 | tail -1)
gemv_stats 1x4096x4096 "${vs[@]}"
echo "columns: op, shape, time (us), GB/s, TFLOP/s, % of peak, calls per sample"
alternate decode 1x4096x4096 "${vs[@]}"
echo "## against PyTorch: the rule"
decode_vs_torch 39r "Round 39d, the rule" 1x4096x4096
echo "## against PyTorch: gemvq=16,gemvwg=512"
WGML_MATMUL_VARIANT=gemvq=16,gemvwg=512 decode_vs_torch 39d "Round 39d, 512 x 16" 1x4096x4096
} | tee "$out/matmul_sweep.md"
exit 0
fi

if [ "$round" = round39e ]; then
# Matmul round 39e: 512 threads of 10 and 12 quads (between the rule's 8 and 39d's 16, which
# lost) at 1 x 4096 x 4096: test_matmul's shape tests with each, what the driver compiled,
# the rows twice, alternating.
vs=("" "gemvq=10,gemvwg=512" "gemvq=12,gemvwg=512")
{
echo "# Round 39e: $(date -u +%Y-%m-%dT%H:%MZ), $(head -1 "$out/info.txt")"
for v in "${vs[@]:1}"; do
    (cd build-device && WGML_MATMUL_VARIANT=$v timeout 60 ./tests/test_matmul "shapes|random_shapes|long_k" 2>&1 | tail -1)
done
gemv_stats 1x4096x4096 "${vs[@]}"
echo "columns: op, shape, time (us), GB/s, TFLOP/s, % of peak, calls per sample"
alternate decode 1x4096x4096 "${vs[@]}"
} | tee "$out/matmul_sweep.md"
exit 0
fi

if [ "$round" = round40 ]; then
# Matmul round 40: the decode-fit rows where gemv_cols4's 512 x 8 form runs a last partial
# round (K = 1024: no whole round, each thread 4 quads one at a time; K = 11008: 5 rounds,
# then 3 quads one at a time) with that round's loads all in flight (gemvlast), and with
# 256 or 512 threads of 4 quads (rounds of 512 or 1024 rows); the 1x4096x4096 rows (whole
# rounds: gemvlast changes nothing there but the pipeline's code) with and without it.
vs=("" "gemvlast" "gemvwg=256,gemvq=4" "gemvwg=512,gemvq=4")
{
echo "# Round 40: $(date -u +%Y-%m-%dT%H:%MZ), $(head -1 "$out/info.txt")"
gemv_stats 1x4096x4096 "" gemvlast
echo "columns: op, shape, time (us), GB/s, TFLOP/s, % of peak, calls per sample"
for f in "x1024 cold" "x11008 cold"; do
    alternate decode-fit "$f" "${vs[@]}"
done
alternate decode 1x4096x4096 "" gemvlast
} | tee "$out/matmul_sweep.md"
exit 0
fi

if [ "$round" = round41 ]; then
# Matmul round 41: gemv_rows (matmul_bt with M = 1) with 2, 4 and 8 rows per workgroup
# against the rule's 1, on the rows of K = 1024 and 11008 that ran 1.5 us above the fit's
# line in round 40, the other decode-fit rows, the decode rows and the single decode ops of
# the end-to-end model (K = 768, 2048), each variant twice, alternating.
vs=("" "gemvrows=2" "gemvrows=4" "gemvrows=8")
{
echo "# Round 41: $(date -u +%Y-%m-%dT%H:%MZ), $(head -1 "$out/info.txt")"
(cd build-device && timeout 200 ./tests/test_matmul 2>&1 | tail -1)
for v in "${vs[@]:1}"; do
    (cd build-device && WGML_MATMUL_VARIANT=$v timeout 100 ./tests/test_matmul "shapes|random_shapes|long_k" 2>&1 | tail -1)
done
echo "columns: op, shape, time (us), GB/s, TFLOP/s, % of peak, calls per sample"
bt_decode_rows "${vs[@]}"
} | tee "$out/matmul_sweep.md"
exit 0
fi

if [ "$round" = round42 ]; then
# Round 42: what a dependent dispatch costs on the GPU clock (3.1 us for a tiny add in round
# 40, 1.1 for a CUDA kernel in a graph) against how the recorder cuts its work: one compute
# pass per batch of 96 dispatches (the default), a pass per dispatch or per 8, batches of
# 16, and batches of 1024 after the first 96. Each setting twice, alternating; the chains
# with one dispatch per add (WGML_FUSE=0).
cfgs=("" "WGML_PASS=1" "WGML_PASS=8" "WGML_BATCH=16,16" "WGML_BATCH=96,1024")
{
echo "# Round 42: $(date -u +%Y-%m-%dT%H:%MZ), $(head -1 "$out/info.txt")"
(cd build-device && WGML_PASS=1 timeout 100 ./tests/test_context 2>&1 | tail -1)
(cd build-device && WGML_PASS=1 timeout 200 ./tests/test_model 2>&1 | tail -1)
echo "columns: op, shape, time (us), GB/s, TFLOP/s, % of peak, calls per sample"
for rep in 1 2; do
    for c in "${cfgs[@]}"; do
        echo "## setting: \"$c\" (repeat $rep)"
        env $c WGML_FUSE=0 build-device/wgml bench --group overhead-gpu --samples 15 2>&1 | grep -E '^\| (add|matmul)|rror'
        env $c build-device/wgml bench --group decode --filter "1x4096x4096" --samples 15 2>&1 | grep -E '^\| matmul|rror'
        env $c build-device/wgml bench --group decode --filter "model_decode" --samples 15 2>&1 | grep -E '^\| model|rror'
    done
done
} | tee "$out/matmul_sweep.md"
exit 0
fi

if [ "$round" = round41b ]; then
# Matmul round 41b: gemv_rows' rule after round 41 against one row per workgroup, on the GPU:
# test_matmul (its default-rule cases with short rows take 8 and 4 rows there), then the
# matmul_bt rows of decode-fit, decode and decode-ops, each way twice, alternating.
vs=("" "gemvrows=1")
{
echo "# Round 41b: $(date -u +%Y-%m-%dT%H:%MZ), $(head -1 "$out/info.txt")"
(cd build-device && timeout 200 ./tests/test_matmul 2>&1 | tail -1)
echo "columns: op, shape, time (us), GB/s, TFLOP/s, % of peak, calls per sample"
bt_decode_rows "${vs[@]}"
} | tee "$out/matmul_sweep.md"
exit 0
fi

if [ "$round" = round37 ]; then
# Matmul round 37: gemv_cols4_sg's subgroups numbered lid / size (gemvsglin, where the layout
# probe at context creation allows) against the workgroup atomic (the default); then, as
# diagnostics, lid / size after the atomic (gemvsgmode=2: its delay without its order) and
# the atomic's order rotated by the workgroup (gemvsgmode=3), twice, alternating, after the
# column kernel's tests on the GPU in each mode. (The round's first call also timed the tree,
# 512 x 8 and gemvq=2, and PyTorch: h200-sweep-round37-2026-12-03.md. The probe, the modes and
# their tokens were removed after the round: the section now prints their errors.)
{
echo "# Round 37b: $(date -u +%Y-%m-%dT%H:%MZ), $(head -1 "$out/info.txt")"
grep subgroups "$out/info.txt"
echo "## test_matmul on the GPU (shapes, random_shapes, long_k, forced_choices) in each mode"
for v in "" gemvsglin gemvsgmode=2 gemvsgmode=3; do
    (cd build-device && WGML_MATMUL_VARIANT=$v timeout 100 ./tests/test_matmul "shapes|random_shapes|long_k" 2>&1 | tail -1)
done
(cd build-device && timeout 100 ./tests/test_matmul forced_choices 2>&1 | tail -1)
alternate decode 1x4096x "" gemvsglin gemvsgmode=2 gemvsgmode=3
} | tee "$out/matmul_sweep.md"
exit 0
fi

if [ "$round" = robust ]; then
# Matmul round 26 (bench/notes/matmul.md): the bounds check the driver puts on every global
# load (round 14's SASS) against the same kernels built with VK_EXT_pipeline_robustness's
# storage and uniform buffers DISABLED (bench/vk_stats_layer.c, WGML_VK_PIPELINE_ROBUSTNESS):
# the device's robustness as Dawn created it, test_matmul and test_attention with it
# disabled, the SASS of the 4096^3 products both ways (ISETP / LDG counts), then the times:
# no layer, the layer alone, the layer with robustness disabled, twice, alternating.
so=${WGML_VK_STATS_SO:-.gl/libwgml_vk_stats.so}
so=$(cd "$(dirname "$so")" && pwd)/$(basename "$so")
root=$PWD
nvd=$(command -v nvdisasm || ls /usr/local/cuda*/bin/nvdisasm 2>/dev/null | head -1)
layer() {   # layer <robustness: "" or disabled> <command...>
    local r=$1
    shift
    WGML_VK_PIPELINE_ROBUSTNESS=$r WGML_VK_STATS_SO=$so bash "$root/bench/kernel_stats.sh" "$@"
}
rows() {   # rows <mode: none | layer | disabled>
    local m=$1 c
    for c in "matmul 4096x4096x4096 7" "matmul 8192x8192x8192 3" "matmul 11008 5" "decode 1x4096x4096 15" \
             "train-ops matmul 7" "train-ops scores 7" "all model_train_step 5"; do
        set -- $c
        local g=(--group "$1")
        [ "$1" = all ] && g=()
        case $m in
            none) build-device/wgml bench "${g[@]}" --filter "$2" --samples "$3" 2>&1 ;;
            layer) layer "" build-device/wgml bench "${g[@]}" --filter "$2" --samples "$3" 2>&1 ;;
            disabled) layer disabled build-device/wgml bench "${g[@]}" --filter "$2" --samples "$3" 2>&1 ;;
        esac | grep -E '^\| (matmul|flash|model)|rror|fail'
    done
}
stats_once() {   # stats_once <repeat>: the driver's statistics in the first repeat only
    if [ "$1" = 1 ]; then sed -E 's/ \| Stack Size=0//'; else grep -v '^vkstats:'; fi
}
if [ "${ROBUST_PART:-1}" = 2 ]; then
# part 2: what the driver compiled for the attention kernels both ways (WGML_LOG_KERNELS
# names each pipeline on the line before the layer's), with their times and the step's.
# (The round's third call timed fwd_pv_mm's maxima in workgroup memory against registers
# the same way, with a variable since removed: attention round 26.)
{
sweep_header "Matmul round 26, part 2 (attention kernels with and without the bounds checks)"
for rep in 1 2; do
    for m in ${ROBUST_MODES:-default disabled}; do
        [ "$m" = default ] && m=""
        for f in "D128 causal lse scores" "D64 causal lse scores"; do
            echo "## ${m:-default}, $f (repeat $rep)"
            WGML_LOG_KERNELS=1 layer "$m" build-device/wgml bench --group train-ops --filter "$f" --samples 7 2>&1 |
                grep -E "^vkstats: [0-9]+ attention|^\| flash|rror|fail" | stats_once "$rep"
        done
    done
done
for m in ${ROBUST_MODES:-default disabled}; do
    [ "$m" = default ] && m=""
    echo "## ${m:-default}, model_train_step"
    layer "$m" build-device/wgml bench --filter model_train_step --samples 5 2>&1 | grep -E '^\| model|rror|fail'
done
} > "$out/matmul_sweep.md" 2>&1
exit 0
fi
{
sweep_header "Matmul round 26 (driver bounds checks)"
for t in test_matmul test_attention; do
    echo "## $t with pipeline robustness disabled"
    (cd build-device && layer disabled timeout 300 ./tests/$t 2>&1 | grep -E 'vkstats: (device|pipeline rob)|pass|fail|FAIL' | tail -4)
done
for r in "" disabled; do
    d=/tmp/wgml-sass-rob${r:-default}; rm -rf "$d"; mkdir -p "$d"
    echo "## SASS, robustness \"${r:-as created}\" (matmul 4096^3: pipelines 2 and 4 are the products)"
    WGML_VK_STATS_DIR="$d" layer "$r" build-device/wgml bench --group matmul --filter 4096x4096x4096 --samples 1 2>&1 |
        grep -E 'vkstats: (device|pipeline rob)|Register|rror' | sed -E 's/ \| Stack Size=0//'
    if [ -n "$nvd" ] && python3 bench/sass_dump.py "$d" "$nvd" SM90 >/dev/null 2>&1; then
        for f in "$d"/*.sass; do
            echo "$(basename "$f"): $(grep -c 'ISETP' "$f") ISETP, $(grep -c 'LDG' "$f") LDG, $(grep -c 'FFMA' "$f") FFMA, $(grep -cE '^ +/\*[0-9a-f]{4}\*/' "$f") instructions"
        done
        cp "$d/002_dawn_entry_point.sass" "$out/gemm_rob_${r:-default}.sass" 2>/dev/null
    fi
done
echo "columns: op, shape, time (us), GB/s, TFLOP/s, % of peak, calls per sample"
for rep in 1 2; do
    for m in none layer disabled; do
        echo "## $m (repeat $rep)"
        rows "$m"
    done
done
} > "$out/matmul_sweep.md" 2>&1
exit 0
fi

# env_ab <variable> <bench filter>: an A/B of an attention variable ("" the default, 0 the
# old path): test_attention both ways and test_model, the rows of the filter twice
# alternating, model_train_step twice each way.
env_ab() {
    local var=$1 filter=$2 d rep
    for d in "" 0; do
        echo "## tests: $var=\"$d\""
        (cd build-device && env "$var=$d" timeout 200 ./tests/test_attention 2>&1 | tail -1)
    done
    (cd build-device && timeout 100 ./tests/test_model 2>&1 | tail -1)
    for rep in 1 2; do
        for d in 0 ""; do
            echo "## $var=\"$d\" (repeat $rep)"
            env "$var=$d" build-device/wgml bench --group train-ops --filter "$filter" --samples 9 2>&1 | grep -E '^\| flash|rror|fail'
        done
    done
    for d in 0 "" 0 ""; do
        echo "## $var=\"$d\" model_train_step"
        env "$var=$d" build-device/wgml bench --filter model_train_step --samples 5 2>&1 | grep -E '^\| model|rror|fail'
    done
}

if [ "$round" = attn25 ]; then
# Attention round 25 (bench/notes/attention.md): the forward that keeps its scores as two
# products (fwd_s_mm + fwd_pv_mm, the default) against prefill_lse with WRITE_S
# (WGML_ATTN_FWDMM=0). (The round's ablation calls used variables since removed.)
{ sweep_header "Attention round 25"; env_ab WGML_ATTN_FWDMM "scores"; } > "$out/matmul_sweep.md" 2>&1
exit 0
fi

if [ "$round" = attn24 ]; then
# Attention round 24 (bench/notes/attention.md): dq from dS^T stored dense by a register-tiled
# product (bwd_dq_mm, the default) against the 64 x 64 blocks (WGML_ATTN_DQMM=0).
{ sweep_header "Attention round 24"; env_ab WGML_ATTN_DQMM "D64 causal"; } > "$out/matmul_sweep.md" 2>&1
exit 0
fi

if [ "$round" = attn22 ]; then
# Attention round 22 (bench/notes/attention.md): an ablation, timing only: bwd_dkdv64 with S
# taken from memory instead of computed (WGML_ATTN_ABL=nos) against the default, alternating.
{
sweep_header "Attention round 22"
for rep in 1 2; do
    for v in "" nos; do
        echo "## WGML_ATTN_ABL=\"$v\" (repeat $rep)"
        WGML_ATTN_ABL="$v" build-device/wgml bench --group train-ops --filter "D64 causal" --samples 7 2>&1 | grep -E '^\| flash|rror|fail'
    done
done
} > "$out/matmul_sweep.md" 2>&1
exit 0
fi

if [ "$round" = attn20 ] || [ "$round" = attn21 ]; then
# Attention rounds 20 - 21 (bench/notes/attention.md): bwd_dq_ds64w (round 21: its 64-key loop
# in 8 trips of 8 keys) against bwd_dq_ds64 (WGML_ATTN_DQDS=4): the tests both ways (round 21
# also the driver's statistics of both), the training step's D64 attention twice
# alternating, the whole step. The kernel and the variable have since been removed.
{
echo "# Attention round ${round#attn}: $(date -u +%Y-%m-%dT%H:%MZ), $(head -1 "$out/info.txt")"
for d in "" 4; do
    echo "## tests: WGML_ATTN_DQDS=\"$d\""
    (cd build-device && WGML_ATTN_DQDS=$d timeout 200 ./tests/test_attention 2>&1 | tail -1)
    [ "$round" = attn21 ] || continue
    echo "## driver statistics of the dq kernels, WGML_ATTN_DQDS=\"$d\""
    WGML_ATTN_DQDS=$d WGML_VK_STATS_SO=${WGML_VK_STATS_SO:-.gl/libwgml_vk_stats.so} bash bench/kernel_stats.sh \
        build-device/wgml bench --group train-ops --filter 'D64 causal lse' --samples 1 2>&1 | grep -E 'vkstats.*(dq|dkdv)' | head -4
done
echo "columns: op, shape, time (us), GB/s, TFLOP/s, % of peak, calls per sample"
for rep in 1 2; do
    for d in 4 ""; do
        echo "## WGML_ATTN_DQDS=\"$d\" (repeat $rep)"
        WGML_ATTN_DQDS=$d build-device/wgml bench --group train-ops --filter D64 --samples 9 2>&1 | grep -E '^\| flash|rror|fail'
    done
done
for d in 4 ""; do
    echo "## WGML_ATTN_DQDS=\"$d\" model_train_step"
    WGML_ATTN_DQDS=$d build-device/wgml bench --filter model_train_step --samples 5 2>&1 | grep -E '^\| model|rror|fail'
done
} > "$out/matmul_sweep.md" 2>&1
exit 0
fi

if [ "$round" = round4 ]; then
# Round 4 (bench/notes/matmul.md, bench/notes/attention.md): the training step's shapes.
# Matrix products with a 768-wide output or a 768 x 768 weight gradient against the number
# of K-slices (wave quantization), and the attention kernels' chunk sizes at head_dim 64.
# Correctness of the attention chunks first (they only fit 48 KiB devices).
for pf in bk64 bk32; do
    (cd build-device && WGML_ATTN_PREFILL=$pf WGML_ATTN_DQ=new,32 WGML_ATTN_DKDV=new,32 timeout 300 \
        ctest --output-on-failure -R 'test_attention$' >"$out/ctest_attn_$pf.log" 2>&1; echo "attention $pf/new,32: $(tail -3 "$out/ctest_attn_$pf.log" | head -1)")
done
{
echo "# Round 4 sweep: $(date -u +%Y-%m-%dT%H:%MZ), $(head -1 "$out/info.txt")"
echo "columns: op, shape, time (us), GB/s, TFLOP/s, % of peak, calls per sample"
for sh in 8192x768x768 8192x768x2048 768x768x8192 768x2048x8192 2048x768x8192; do
    for v in "" splitk=1 splitk=2 splitk=3 splitk=4 splitk=5 splitk=6 splitk=8 splitk=12 splitk=16 t64 t64,splitk=2; do
        echo "## WGML_MATMUL_VARIANT=\"$v\" $sh"
        bench "$v" train-ops "$sh" 9
    done
done
for pf in "" bk32 bk64; do
    for bw in "" new,8 new,32; do
        echo "## WGML_ATTN_PREFILL=\"$pf\" WGML_ATTN_DQ=WGML_ATTN_DKDV=\"$bw\""
        WGML_ATTN_PREFILL=$pf WGML_ATTN_DQ=$bw WGML_ATTN_DKDV=$bw build-device/wgml bench --group train-ops --filter D64 --samples 9 2>&1 | grep -E '^\| flash|rror|fail'
    done
done
for pf in "" bk32 bk64; do
    echo "## WGML_ATTN_PREFILL=\"$pf\" WGML_ATTN_DQ=WGML_ATTN_DKDV=\"$pf\" D128"
    bw=""; [ "$pf" = bk64 ] && bw=new,32
    WGML_ATTN_PREFILL=$pf WGML_ATTN_DQ=$bw WGML_ATTN_DKDV=$bw build-device/wgml bench --group attention --filter 'S4096 D128 causal' --samples 5 2>&1 | grep -E '^\| flash|rror|fail'
done
} | tee "$out/matmul_sweep.md"
exit 0
fi

# Round 3. Correctness first: every variant in every layout on NVIDIA's compiler.
(cd build-device && timeout 300 ctest --output-on-failure -R 'test_matmul$' >"$out/ctest_matmul.log" 2>&1; tail -4 "$out/ctest_matmul.log")
{
echo "# Round 3 sweep: $(date -u +%Y-%m-%dT%H:%MZ), $(head -1 "$out/info.txt")"
echo "columns: op, shape, time (us), GB/s, TFLOP/s, % of peak, calls per sample"
# 4096^3 in all three layouts: the new variants against the defaults and the two round-2 winners
for v in "" t128sb t128k8 t128sbk8 t128sbf t128sbv t128sbu t128bestn t128best t128k8pf t128k8r; do
    echo "## WGML_MATMUL_VARIANT=\"$v\" 4096^3"
    bench "$v" matmul 4096x4096x4096 9
done
# The LLM shapes (2048x11008x4096, 2048x4096x11008, 4096x11008x2048 in their layouts) and
# 8192^3 for the default and the candidates for the next default
for v in "" t128sbk8 t128bestn t128best t128k8pf t128k8r; do
    echo "## WGML_MATMUL_VARIANT=\"$v\" LLM shapes"
    bench "$v" matmul 11008 7
    bench "$v" matmul 8192x8192x8192 5
done
# Repeat of the first rows: run-to-run spread, to read the differences above against
echo "## repeat: WGML_MATMUL_VARIANT=\"\" and t128best 4096^3"
bench "" matmul 4096x4096x4096 9
bench t128best matmul 4096x4096x4096 9
} | tee "$out/matmul_sweep.md"
