#!/usr/bin/env bash
# A/B of two builds of wgml with `wgml bench`: the one way to measure a change.
#
#   bash bench/ab.sh [-n REPEATS] [--env-a 'VAR=VALUE ...'] [--env-b 'VAR=VALUE ...'] [--stats]
#                    A B [-- <wgml bench arguments>]
#
# A and B are git revisions (anything `git rev-parse` takes: a commit, a branch, HEAD~1) or
# "." for the working tree as it is, untracked files included. Each side is built into a
# directory of its own (the library and the wgml tool, Release), then `wgml bench` runs with
# the same arguments for both, alternating A B A B ... REPEATS times (default 2), and
# ${OUT:-/tmp/wgml-out}/ab.md gets one row per bench case: each side's time (the median over
# its repeats of the bench's median sample), A / B (above 1: B is faster) and the spread (the
# largest (max - min) / min over one side's repeats: differences below it are noise).
#
# Why whole builds: the GPU driver's compiler answers to code it should remove as dead (one
# attention kernel compiled to 128 registers in one source and to 137 - 145 in forms that
# differed only in such code), so a variant is evidence only in the exact source it ships
# in. A variant to try is a commit (or the working tree) against the one without it.
# Why alternation: the same H200 ran every product about 6% slower in one call than in the
# day's other calls, so the two sides share one call and interleave.
#
# Examples:
#   bash bench/ab.sh HEAD . -- --group matmul --filter 4096x4096x4096 --samples 9
#   bash bench/ab.sh --env-b WGML_FUSE=0 HEAD HEAD -- --group overhead-gpu
#   bash bench/ab.sh -n 3 main my-branch -- --group train-ops --filter "D64 causal"
#   bash bench/ab.sh HEAD . -- --small --filter add        (a quick check on a CPU adapter)
#
# --env-a / --env-b: variables set for that side's runs only (the runtime switches the
#   library reads, e.g. WGML_FUSE, WGML_BATCH, WGML_ROBUST); one build serves both sides
#   when A and B name the same commit.
# --stats: each side runs once more under bench/kernel_stats.sh (WGML_LOG_KERNELS=1,
#   --samples 1), and the driver's statistics of every pipeline it builds (registers,
#   shared memory, local memory beyond the baseline = spills) go into the report. Needs the
#   Vulkan headers, or WGML_VK_STATS_SO naming a layer built from bench/vk_stats_layer.c.
#
# Builds: build-ab-a and build-ab-b at the repository root (WGML_AB_BUILD=<prefix> changes
# the prefix), a revision's source exported into <build>/src with git archive; a build is
# reused while its revision is the same, and the working tree's is rebuilt incrementally.
# WGML_CMAKE_FLAGS is passed to cmake; WGML_DEPS (default: deps/ of this tree) names the
# fetched WebGPU runtime, which an exported revision does not carry.
# Output: ab.md, and under ab/ the bench's tables, JSON lines and stderr of every run and the
# build logs. On the GPU machine bench/gpu_env.sh is sourced first, as device_run.sh does.
set -euo pipefail

usage() {
    echo "usage: bash bench/ab.sh [-n REPEATS] [--env-a 'VAR=VALUE ...'] [--env-b 'VAR=VALUE ...'] [--stats] A B [-- <wgml bench arguments>]" >&2
    echo "       A, B: git revisions, or . for the working tree" >&2
    exit 2
}

repeats=2
env_a=""
env_b=""
stats=0
while [ $# -gt 0 ]; do
    case $1 in
        -n) [ $# -ge 2 ] || usage; repeats=$2; shift 2 ;;
        --env-a) [ $# -ge 2 ] || usage; env_a=$2; shift 2 ;;
        --env-b) [ $# -ge 2 ] || usage; env_b=$2; shift 2 ;;
        --stats) stats=1; shift ;;
        -h | --help) usage ;;
        -*) usage ;;
        *) break ;;
    esac
done
[ $# -ge 2 ] || usage
rev_a=$1
rev_b=$2
shift 2
if [ $# -gt 0 ]; then
    [ "$1" = -- ] || usage
    shift
fi
bench_args=("$@")
case $repeats in '' | *[!0-9]* | 0) echo "ab.sh: -n takes a positive count" >&2; exit 2 ;; esac

# the environment words of a side, checked: NAME=VALUE each
read -r -a words_a <<<"$env_a"
read -r -a words_b <<<"$env_b"
for w in ${words_a[@]+"${words_a[@]}"} ${words_b[@]+"${words_b[@]}"}; do
    [[ $w =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || { echo "ab.sh: '$w' is not VAR=VALUE" >&2; exit 2; }
done

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
out=${OUT:-/tmp/wgml-out}
logs=$out/ab
rm -rf "$logs"
mkdir -p "$logs"
deps=${WGML_DEPS:-$root/deps}
prefix=${WGML_AB_BUILD:-build-ab}
read -r -a cmake_flags <<<"${WGML_CMAKE_FLAGS:-}"
jobs=$(nproc 2>/dev/null || echo 2)

# The GPU machine's Vulkan loader (carried in .gl/) and, where scripts/bootstrap.sh fetched
# it, the CPU driver lavapipe (a GPU, when there is one, stays the adapter wgml picks).
# Neither script is written for set -e, hence the || true.
# shellcheck source=bench/gpu_env.sh
. bench/gpu_env.sh || true
# shellcheck source=/dev/null
if [ -f "$deps/env.sh" ]; then . "$deps/env.sh" || true; fi

# resolve <side>: the commit a revision names, or "worktree" for "."
resolve() {
    if [ "$1" = . ]; then
        echo worktree
    elif ! git rev-parse --verify --quiet "$1^{commit}"; then
        echo "ab.sh: $1 is not a revision of this repository" >&2
        return 1
    fi
}
commit_a=$(resolve "$rev_a") || exit 2
commit_b=$(resolve "$rev_b") || exit 2

# build <commit or worktree> <dir> <log name>: the wgml tool of that source at <dir>/build/wgml
build() {
    local commit=$1 dir=$2 name=$3 src
    mkdir -p "$dir"
    if [ "$(cat "$dir/revision" 2>/dev/null || true)" != "$commit" ]; then
        rm -rf "$dir/src" "$dir/build" "$dir/revision"
        if [ "$commit" != worktree ]; then
            mkdir -p "$dir/src"
            git archive --format=tar "$commit" | tar -x -C "$dir/src"
        fi
        echo "$commit" >"$dir/revision"
    fi
    if [ "$commit" = worktree ]; then src=$root; else src=$dir/src; fi
    echo "ab.sh: building $name ($commit) in $dir/build" >&2
    cmake -S "$src" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release -DWGML_DEPS="$deps" \
        ${cmake_flags[@]+"${cmake_flags[@]}"} >"$logs/cmake-$name.log" 2>&1 ||
        { tail -30 "$logs/cmake-$name.log" >&2; return 1; }
    cmake --build "$dir/build" -j "$jobs" --target wgml_tool >"$logs/build-$name.log" 2>&1 ||
        { grep -E 'error|Error' "$logs/build-$name.log" | head -30 >&2; return 1; }
}

dir_a=$root/$prefix-a
dir_b=$root/$prefix-b
build "$commit_a" "$dir_a" a
if [ "$commit_b" = "$commit_a" ]; then
    dir_b=$dir_a   # the same source: one build, the sides differ by their environment only
else
    build "$commit_b" "$dir_b" b
fi

# bench <a|b> <repeat>: one `wgml bench` run of that side
bench() {
    local side=$1 rep=$2 bin
    local -a words
    if [ "$side" = a ]; then bin=$dir_a/build/wgml; words=(${words_a[@]+"${words_a[@]}"})
    else bin=$dir_b/build/wgml; words=(${words_b[@]+"${words_b[@]}"}); fi
    echo "ab.sh: run $rep of $side" >&2
    env ${words[@]+"${words[@]}"} "$bin" bench ${bench_args[@]+"${bench_args[@]}"} --json "$logs/$side-$rep.jsonl" \
        >"$logs/$side-$rep.md" 2>"$logs/$side-$rep.err" ||
        echo "ab.sh: run $rep of $side: wgml bench exited with $? (failed rows: $logs/$side-$rep.md)" >&2
}

for ((rep = 1; rep <= repeats; rep++)); do
    bench a "$rep"
    bench b "$rep"
done

if [ "$stats" = 1 ]; then
    for side in a b; do
        if [ "$side" = a ]; then bin=$dir_a/build/wgml; words=(${words_a[@]+"${words_a[@]}"})
        else bin=$dir_b/build/wgml; words=(${words_b[@]+"${words_b[@]}"}); fi
        echo "ab.sh: driver statistics of $side" >&2
        env ${words[@]+"${words[@]}"} WGML_LOG_KERNELS=1 bash bench/kernel_stats.sh "$bin" bench \
            ${bench_args[@]+"${bench_args[@]}"} --samples 1 2>&1 >/dev/null |
            grep '^vkstats:' >"$logs/stats-$side.txt" || true
    done
fi

python3 - "$logs" "$repeats" "$rev_a (${commit_a:0:12})" "$rev_b (${commit_b:0:12})" "$env_a" "$env_b" \
    "${bench_args[*]:-}" "$stats" >"$out/ab.md" <<'PY'
# Joins the runs' JSON lines (one {"kind":"case",...} line per bench case, in the bench's
# order) into one table. Rows are matched by (op, shape, how many such rows came before):
# --small gives several cases the same shape (their group tells them apart).
import json, os, statistics, sys, time

logs, repeats, label_a, label_b, env_a, env_b, args, stats = sys.argv[1:]
repeats = int(repeats)

def load(path):
    meta, rows, seen = {}, {}, {}
    if not os.path.exists(path):
        return meta, [], rows
    order = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            r = json.loads(line)
            if r.get("kind") == "meta":
                meta = r
            elif r.get("kind") == "case":
                k = (r["op"], r["shape"])
                n = seen.get(k, 0)
                seen[k] = n + 1
                key = (r["op"], r["shape"], n)
                order.append(key)
                rows[key] = r["seconds"] * 1e6
                groups[key] = r.get("group", "")
    return meta, order, rows

groups = {}
runs = {s: [load(os.path.join(logs, f"{s}-{i}.jsonl")) for i in range(1, repeats + 1)] for s in "ab"}
order = []
for s in "ab":
    for _, o, _ in runs[s]:
        order += [k for k in o if k not in order]
meta = next((m for s in "ab" for m, _, _ in runs[s] if m), {})

def side(s, key):
    v = [r[key] for _, _, r in runs[s] if key in r]
    if not v:
        return None, None
    return statistics.median(v), (max(v) - min(v)) / min(v) if min(v) > 0 else 0.0

print(f"# A/B with wgml bench, {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC")
print()
print(f"- A: {label_a}" + (f", environment `{env_a}`" if env_a else ""))
print(f"- B: {label_b}" + (f", environment `{env_b}`" if env_b else ""))
if meta:
    print(f"- adapter: {meta.get('adapter', '?')} ({meta.get('driver', '?')})")
print(f"- bench arguments: `{args}`" if args else "- bench arguments: none (every case)")
print(f"- runs: A B alternating, {repeats} of each; time = the median over a side's runs of the"
      " bench's median sample; A / B above 1: B is faster; spread = the largest (max - min) / min"
      " over one side's runs")
print()
print("| op | shape | group | A (us) | B (us) | A / B | spread |")
print("|---|---|---|---:|---:|---:|---:|")
for key in order:
    ta, sa = side("a", key)
    tb, sb = side("b", key)
    fa = f"{ta:.2f}" if ta is not None else "failed"
    fb = f"{tb:.2f}" if tb is not None else "failed"
    ratio = f"{ta / tb:.3f}" if ta and tb else "-"
    spread = max(x for x in (sa, sb, 0.0) if x is not None)
    print(f"| {key[0]} | {key[1]} | {groups.get(key, '')} | {fa} | {fb} | {ratio} | {100 * spread:.1f}% |")
if stats == "1":
    for s, label in (("a", "A"), ("b", "B")):
        print()
        print(f"## Driver statistics, {label} (one line per pipeline, in creation order)")
        print()
        print("```")
        p = os.path.join(logs, f"stats-{s}.txt")
        text = open(p).read().rstrip() if os.path.exists(p) else ""
        print(text or "(none: no statistics layer, or the driver offers no statistics)")
        print("```")
PY
cat "$out/ab.md"
