#!/usr/bin/env bash
# LoRA adapters between wgml and PEFT, both ways (bench/peft_compare.py does the PEFT side):
#   bash bench/peft_check.sh prepare DIR   here: a small model (wgml train, untied head), two
#                                          adapters (wgml finetune: all seven targets; rsLoRA on
#                                          q, v, down) and wgml's logits with each
#   bash bench/peft_check.sh peft DIR OUT  where PEFT is installed: PEFT loads both adapters and
#                                          must give the same logits; then writes an adapter of
#                                          its own (OUT/peft_made) with its logits
#   bash bench/peft_check.sh back DIR OUT  here: wgml loads PEFT's adapter, same logits
set -euo pipefail
cmd=$1 dir=$2
wgml=${WGML:-build/wgml}
text="The licenses for most software"
case "$cmd" in
prepare)
    mkdir -p "$dir"
    "$wgml" train --steps 30 --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128 --context 32 --tied 0 --eval-every 0 \
        --out "$dir/base" --overwrite
    for i in $(seq 1 60); do echo "{\"prompt\": \"$i+$i=\", \"completion\": \"$((2 * i))\"}"; done >"$dir/qa.jsonl"
    ft=(finetune --model "$dir/base" --data "$dir/qa.jsonl" --context 16 --steps 20 --lr 1e-2 --overwrite)
    "$wgml" "${ft[@]}" --out "$dir/a"
    "$wgml" "${ft[@]}" --lora-rank 4 --lora-alpha 6 --rslora --lora-targets q,v,down --out "$dir/b"
    for x in a b; do "$wgml" logits --model "$dir/base" --adapter "$dir/$x" --text "$text" --out "$dir/$x.bin"; done
    ;;
peft)
    out=$3
    for x in a b; do python3 bench/peft_compare.py check --model "$dir/base" --adapter "$dir/$x" --logits "$dir/$x.bin"; done
    python3 bench/peft_compare.py make --model "$dir/base" --ids "$dir/a.bin" --out "$out/peft_made"
    ;;
back)
    out=$3
    "$wgml" logits --model "$dir/base" --adapter "$out/peft_made" --text "$text" --out "$dir/wgml_on_peft.bin"
    python3 bench/peft_compare.py compare "$dir/wgml_on_peft.bin" "$out/peft_made.bin"
    ;;
*) echo "usage: bash bench/peft_check.sh prepare|peft|back DIR [OUT]" >&2; exit 2 ;;
esac
