#!/usr/bin/env bash
# Generation and serving speed on the GPU machine: a 1B-shaped model (dim 2048, 16 layers,
# 32 heads, 8 KV heads, ffn 8192, untied head, a 32,256-token vocabulary: GPT-2's 256 byte
# symbols and filler tokens), random weights after one training step. Single-stream decode
# (greedy, and sampled with top-p, the sampler's work on the GPU), `generate --n` at 8 and 32
# sequences, and `wgml serve` with 1 and 32 concurrent clients (bench/serve_load.py).
# WGML names the program (default build-device/wgml, which bench/device_run.sh builds).
set -uo pipefail
out=${OUT:-/tmp/wgml-out}
mkdir -p "$out"
W=${WGML:-build-device/wgml}
d=/tmp/wgml-1b
rm -rf "$d" && mkdir -p "$d"
python3 - "$d/tok.json" <<'PY'
import json, sys
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
vocab = {chr(c): i for i, c in enumerate(cs)}
vocab.update({"<x%d>" % i: 256 + i for i in range(32000)})
bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
json.dump({"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": bl, "post_processor": None,
           "decoder": bl, "model": {"type": "BPE", "vocab": vocab, "merges": []}}, open(sys.argv[1], "w"))
PY
cat src/*.c > "$d/data.txt"
"$W" train --data "$d/data.txt" --tokenizer "$d/tok.json" --dim 2048 --layers 16 --heads 32 --kv-heads 8 --ffn 8192 \
    --tied 0 --context 512 --batch 1 --steps 1 --warmup 0 --eval-every 0 --out "$d/m" 2>&1 | tail -2
P="The quick brown fox jumps over the lazy dog, then runs on"
run() { echo "## $*"; "$W" generate --model "$d/m" --prompt "$P" --tokens 256 --ignore-eos "$@" 2>&1 | tail -1; }
run --temperature 0
run --temperature 0
run --temperature 0.8 --top-k 0 --top-p 0.95
run --temperature 0.8 --top-k 40
for n in 8 32; do
    run --n "$n" --temperature 0
    run --n "$n" --temperature 0.8 --top-k 0 --top-p 0.95
done
"$W" serve --model "$d/m" --port 8093 --slots 32 >"$out/serve.log" 2>&1 &
pid=$!
for _ in $(seq 120); do grep -q listening "$out/serve.log" && break; sleep 0.5; done
grep -q listening "$out/serve.log" || { tail -3 "$out/serve.log"; exit 1; }
for c in 1 1 8 32; do python3 bench/serve_load.py 127.0.0.1:8093 "$c" 256 0.8 || break; done
kill "$pid"; wait "$pid" 2>/dev/null
