#!/usr/bin/env bash
# The wgml program against the inputs a new user or an attacker gives it: each case runs
# the real binary and checks its exit status, its message and what it left on disk.
#   bash tests/cli_test.sh <path to the wgml program> <path to tests/make_gguf>
# Prints "N passed, M failed" last and exits non-zero on any failure, as the C tests do.
set -u
wgml=$1
make_gguf=${2:-}
[ -x "$wgml" ] || { echo "cli_test.sh: $wgml is not a program"; exit 2; }
[ -x "$make_gguf" ] || { echo "cli_test.sh: make_gguf (the second argument) is not a program"; exit 2; }
work=$(mktemp -d /tmp/wgml_cli_test.XXXXXX)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/checks.sh"

tiny=(--dim 16 --heads 2 --kv-heads 1 --layers 1 --ffn 32 --context 16 --batch 2 --eval-every 0)

# ---- a small model to work on
case="setup"
run 0 "$wgml" train "${tiny[@]}" --steps 2 --out "$work/m"
model=$work/m

# ---- 1. no adapter is an error, never Dawn's Null backend
case="no driver"
nodrv=(env VK_DRIVER_FILES=/nonexistent/icd.json VK_ICD_FILENAMES=/nonexistent/icd.json VK_ADD_DRIVER_FILES=)
run 1 "${nodrv[@]}" "$wgml" info
said "no GPU driver"
said "deps/env.sh"
run 1 "${nodrv[@]}" "$wgml" logits --model "$model" --text "This" --out "$work/nodrv.bin"
absent "$work/nodrv.bin"
case="null backend by name"
run 1 "${nodrv[@]}" env WGML_BACKEND=null "$wgml" info   # taken when named; its self-check fails
said "Null backend"
said "self-check: FAILED"

# ---- 2. files that are not what they claim
case="FIFOs"
for f in config.json model.safetensors tokenizer.json; do
    mkdir -p "$work/fifo"
    cp "$model/config.json" "$model/model.safetensors" "$work/fifo/"
    rm -f "$work/fifo/$f"
    mkfifo "$work/fifo/$f"
    run 1 "$wgml" generate --model "$work/fifo" --tokens 1
    said "not a regular file"
    rm -rf "$work/fifo"
done
case="links outside the folder"
printf 'SECRETSECRET%s' '{"not": "a model"}' >"$work/secret"
for f in config.json model.safetensors tokenizer.json; do
    mkdir -p "$work/link"
    cp "$model/config.json" "$model/model.safetensors" "$work/link/"
    rm -f "$work/link/$f"
    ln -s "$work/secret" "$work/link/$f"
    run 1 "$wgml" generate --model "$work/link" --tokens 1
    said "outside"
    not_said "SECRET"
    rm -rf "$work/link"
done

# ---- 3. memory driven by input
case="--data that never ends"
run 1 "$wgml" train "${tiny[@]}" --steps 1 --data /dev/zero --out "$work/z"
said "not a regular file"
absent "$work/z"
case="--data over the cap"
truncate -s 1100M "$work/huge.txt"
run 1 "$wgml" train "${tiny[@]}" --steps 1 --data "$work/huge.txt" --out "$work/z"
said "more than the 1073741824"
rm -f "$work/huge.txt"
# A model too big for the address-space limit: an error, not a signal. (Not under
# AddressSanitizer, whose shadow memory alone takes terabytes of address space: the build
# with WGML_SANITIZE sets WGML_CLI_UNDER_ASAN.)
if [ -n "${WGML_CLI_UNDER_ASAN:-}" ]; then
echo "cli_test.sh: the ulimit -v cases are skipped under AddressSanitizer"
else
case="training under ulimit -v"
(ulimit -v 2500000 && exec "$wgml" train --dim 2048 --layers 8 --heads 16 --kv-heads 16 --ffn 8192 --context 16 --batch 1 \
    --steps 1 --out "$work/big") >"$work/out" 2>"$work/err"
rc=$?
check '[ "$rc" -eq 1 ]' "exit status $rc, expected 1: $(tail -c 300 "$work/err")"
said "address-space limit"
absent "$work/big"
case="loading under ulimit -v"
# a 1 GiB model whose file is sparse: 4 layers of dim 2048, ffn 8192, tied embedding
mkdir -p "$work/bigm"
cat >"$work/bigm/config.json" <<'JSON'
{"model_type": "llama", "vocab_size": 256, "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 4,
 "num_attention_heads": 16, "num_key_value_heads": 16, "tie_word_embeddings": true}
JSON
header="{" off=0 sep=""
add() {   # add <name> <dims...>
    local name=$1 n=4 shape="" d
    shift
    for d in "$@"; do n=$((n * d)); shape="$shape${shape:+,}$d"; done
    header="$header$sep\"$name\":{\"dtype\":\"F32\",\"shape\":[$shape],\"data_offsets\":[$off,$((off + n))]}"
    off=$((off + n)) sep=","
}
add model.embed_tokens.weight 256 2048
for l in 0 1 2 3; do
    p=model.layers.$l
    add $p.input_layernorm.weight 2048
    for w in q k v o; do add $p.self_attn.${w}_proj.weight 2048 2048; done
    add $p.post_attention_layernorm.weight 2048
    add $p.mlp.gate_proj.weight 8192 2048
    add $p.mlp.up_proj.weight 8192 2048
    add $p.mlp.down_proj.weight 2048 8192
done
add model.norm.weight 2048
header="$header}"
while [ $(((${#header} + 8) % 8)) -ne 0 ]; do header="$header "; done
len=${#header}
printf "$(printf '\\x%02x' $((len & 255)) $(((len >> 8) & 255)) $(((len >> 16) & 255)) 0 0 0 0 0)" >"$work/bigm/model.safetensors"
printf '%s' "$header" >>"$work/bigm/model.safetensors"
truncate -s $((8 + len + off)) "$work/bigm/model.safetensors"
(ulimit -v 2000000 && exec "$wgml" generate --model "$work/bigm" --tokens 1) >"$work/out" 2>"$work/err"
rc=$?
check '[ "$rc" -eq 1 ]' "exit status $rc, expected 1: $(tail -c 300 "$work/err")"
check 'grep -qE "address-space limit|cannot map" "$work/err"' "no memory message: $(tail -c 300 "$work/err")"
rm -rf "$work/bigm"
fi

# ---- 4. parameters that would pass and then break
case="flags out of range"
for bad_flag in "--min-lr -1" "--lr 1e30" "--context 1073741824" "--rope-theta 1e16" "--layers 1025" "--beta1 1" \
                "--eps 0" "--steps 0" "--warmup 250"; do
    # shellcheck disable=SC2086
    run 2 "$wgml" train $bad_flag --out "$work/r"
    said "${bad_flag%% *}"
    absent "$work/r"
done
for bad_flag in "--top-k -1" "--top-p 1.5" "--min-p -0.1" "--repetition-penalty 0" "--stop="; do
    # shellcheck disable=SC2086
    run 2 "$wgml" generate --model "$model" $bad_flag
    said "${bad_flag%%[ =]*}"
done
case="generation_config.json and stop strings"
cp -r "$model" "$work/gc"
printf '{"do_sample": false, "top_k": 3}\n' >"$work/gc/generation_config.json"
run 0 "$wgml" generate --model "$work/gc" --prompt "ab" --tokens 12
said "greedy"
cp "$work/out" "$work/greedy.txt"
run 0 "$wgml" generate --model "$model" --prompt "ab" --tokens 12 --temperature 0
check 'cmp -s "$work/out" "$work/greedy.txt"' "do_sample false is not greedy"
# a stop string made of the greedy text's 3rd to 5th generated bytes: the output ends before it
stop=$(head -c 7 "$work/greedy.txt" | tail -c 3)
run 0 "$wgml" generate --model "$model" --prompt "ab" --tokens 12 --temperature 0 --stop "$stop"
got=$(cat "$work/out")
full=$(cat "$work/greedy.txt")
rest=${full#"$got"}
# the output is the greedy text up to the stop string's first appearance after the prompt
check '[ "$rest" != "$full" ] && [ "${rest#"$stop"}" != "$rest" ]' "--stop \"$stop\": \"$got\" is not the greedy text cut before it"
case "${got#ab}" in *"$stop"*) bad "--stop \"$stop\": the output holds it: \"$got\"" ;; *) ok ;; esac
# the prompt from standard input or a file gives the same text
run 0 "$wgml" generate --model "$model" --prompt-file - --tokens 12 --temperature 0 < <(printf 'ab')
check 'cmp -s "$work/out" "$work/greedy.txt"' "--prompt-file - differs from --prompt"
printf 'ab' >"$work/prompt.txt"
run 0 "$wgml" generate --model "$model" --prompt-file "$work/prompt.txt" --tokens 12 --temperature 0
check 'cmp -s "$work/out" "$work/greedy.txt"' "--prompt-file FILE differs from --prompt"
run 2 "$wgml" generate --model "$model" --prompt-file "$work/prompt.txt" --prompt "x"
said "not both"
run 1 "$wgml" generate --model "$model" --prompt-file "$work/no-such-prompt.txt"
said "no-such-prompt.txt"
printf '{"temperature": "hot"}\n' >"$work/gc/generation_config.json"
run 1 "$wgml" generate --model "$work/gc" --prompt "ab" --tokens 2
said "temperature"
case="a loss that turns NaN"
run 1 "$wgml" train "${tiny[@]}" --lr 10 --clip 1e6 --beta1 0.999999 --beta2 1e-6 --warmup 0 --min-lr 1 --steps 60 \
    --out "$work/nan"
said "NaN"
absent "$work/nan"

# ---- 5. another architecture: one wgml does not run is refused by name; a family it runs
# over weights that lack the family's tensors names the missing one
case="gemma2"
mkdir -p "$work/qwen"
cp "$model/model.safetensors" "$work/qwen/"
sed 's/"llama"/"gemma2"/; s/LlamaForCausalLM/Gemma2ForCausalLM/' "$model/config.json" >"$work/qwen/config.json"
run 1 "$wgml" generate --model "$work/qwen" --tokens 1
said "gemma2"
case="gemma3_text over llama weights"
sed 's/"llama"/"gemma3_text"/; s/LlamaForCausalLM/Gemma3ForCausalLM/' "$model/config.json" >"$work/qwen/config.json"
run 1 "$wgml" generate --model "$work/qwen" --tokens 1
said "pre_feedforward_layernorm"
case="qwen3 over llama weights"
sed 's/"llama"/"qwen3"/; s/LlamaForCausalLM/Qwen3ForCausalLM/' "$model/config.json" >"$work/qwen/config.json"
run 1 "$wgml" generate --model "$work/qwen" --tokens 1
said "q_norm"

# ---- 5b. LFM2: trained from scratch with convolution layers (written as Hugging Face's
# Lfm2ForCausalLM), resumed, generated from; a LoRA adapter on all its projections
# (PEFT's names), run unmerged and merged. (eval, logits and full fine-tuning take the
# paths test_model checks for every family.)
case="lfm2"
lfm2=(--dim 16 --heads 2 --kv-heads 1 --layers 3 --layer-types cac --ffn 32 --context 16 --batch 2 --eval-every 0)
run 0 "$wgml" train "${lfm2[@]}" --steps 4 --save-every 2 --out "$work/lfm2"
check 'grep -q "\"model_type\": \"lfm2\"" "$work/lfm2/config.json"' "config.json does not say lfm2"
check 'grep -q "\"layer_types\": \[\"conv\", \"full_attention\", \"conv\"\]" "$work/lfm2/config.json"' "layer_types"
cp -r "$work/lfm2" "$work/lfm2b"
rm -r "$work/lfm2b/checkpoint-4" "$work/lfm2b/model.safetensors"
run 0 "$wgml" train --resume "$work/lfm2b" --out "$work/lfm2b"
check 'cmp -s "$work/lfm2/model.safetensors" "$work/lfm2b/model.safetensors"' "resumed LFM2 differs"
run 0 "$wgml" generate --model "$work/lfm2" --prompt "The" --tokens 6 --temperature 0
said "decode"
for i in $(seq 1 40); do printf '{"text": "the quick brown fox %d"}\n' $i; done >"$work/fox.jsonl"
run 0 "$wgml" finetune --model "$work/lfm2" --data "$work/fox.jsonl" --context 16 --batch 2 --steps 2 --lr 1e-2 \
    --out "$work/lfm2lora"
said "on q,k,v,o,gate,up,down,in"
check 'grep -q "in_proj" "$work/lfm2lora/adapter_config.json"' "the LFM2 adapter does not target in_proj"
run 0 "$wgml" generate --model "$work/lfm2" --adapter "$work/lfm2lora" --prompt "The" --tokens 6 --temperature 0
unmerged=$(head -c 200 "$work/out")
run 0 "$wgml" merge --model "$work/lfm2" --adapter "$work/lfm2lora" --out "$work/lfm2merged"
run 0 "$wgml" generate --model "$work/lfm2merged" --prompt "The" --tokens 6 --temperature 0
check '[ "$(head -c 200 "$work/out")" = "$unmerged" ]' "merged LFM2 generates other text than the adapter unmerged"
run 2 "$wgml" train "${lfm2[@]}" --layer-types cxa --steps 1 --out "$work/lfm2bad"
said "c or a (LFM2), or s or g (Gemma 3)"
absent "$work/lfm2bad"
run 2 "$wgml" train "${lfm2[@]}" --layer-types csa --steps 1 --out "$work/lfm2bad"
absent "$work/lfm2bad"

# ---- 5c. Gemma 3: sliding, global and sliding layers (written as Hugging Face's
# Gemma3ForCausalLM), resumed bit for bit, generated from; a LoRA adapter unmerged and
# merged. (The other paths: test_model, at Gemma's own head_dim.)
case="gemma3"
gemma=(--dim 16 --heads 2 --kv-heads 1 --layers 3 --layer-types sgs --window 5 --ffn 32 --context 16 --batch 2 --eval-every 0)
run 0 "$wgml" train "${gemma[@]}" --steps 4 --save-every 2 --out "$work/gemma"
check 'grep -q "\"model_type\": \"gemma3_text\"" "$work/gemma/config.json"' "config.json does not say gemma3_text"
check 'grep -q "\"layer_types\": \[\"sliding_attention\", \"full_attention\", \"sliding_attention\"\]" "$work/gemma/config.json"' \
    "layer_types"
check 'grep -q "\"sliding_window\": 5," "$work/gemma/config.json"' "sliding_window"
cp -r "$work/gemma" "$work/gemmab"
rm -r "$work/gemmab/checkpoint-4" "$work/gemmab/model.safetensors"
run 0 "$wgml" train --resume "$work/gemmab" --out "$work/gemmab"
check 'cmp -s "$work/gemma/model.safetensors" "$work/gemmab/model.safetensors"' "resumed Gemma 3 differs"
run 0 "$wgml" finetune --model "$work/gemma" --data "$work/fox.jsonl" --context 16 --batch 2 --steps 2 --lr 1e-2 \
    --out "$work/gemmalora"
said "on q,k,v,o,gate,up,down"
run 0 "$wgml" generate --model "$work/gemma" --adapter "$work/gemmalora" --prompt "The" --tokens 6 --temperature 0
unmerged=$(head -c 200 "$work/out")
run 0 "$wgml" merge --model "$work/gemma" --adapter "$work/gemmalora" --out "$work/gemmamerged"
run 0 "$wgml" generate --model "$work/gemmamerged" --prompt "The" --tokens 6 --temperature 0
check '[ "$(head -c 200 "$work/out")" = "$unmerged" ]' "merged Gemma 3 generates other text than the adapter unmerged"
run 2 "$wgml" train "${lfm2[@]}" --window 4 --steps 1 --out "$work/lfm2bad"
said "--window does not go with LFM2"
absent "$work/lfm2bad"

# ---- 5d. mixed precision: f16 products with dynamic loss scaling, resumed bit for bit;
# a precision or loss scale that does not exist refused before anything is written
case="precision"
run 0 "$wgml" train "${gemma[@]}" --steps 4 --save-every 2 --precision f16 --out "$work/f16"
said "precision: f16 matrix products"
said "dynamic loss scale 65536"
cp -r "$work/f16" "$work/f16b"
rm -r "$work/f16b/checkpoint-4" "$work/f16b/model.safetensors"
run 0 "$wgml" train --resume "$work/f16b" --out "$work/f16b"
said "precision: f16 matrix products"
check 'cmp -s "$work/f16/model.safetensors" "$work/f16b/model.safetensors"' "resumed f16 run differs"
run 0 "$wgml" finetune --model "$work/gemma" --data "$work/fox.jsonl" --context 16 --batch 2 --steps 2 --lr 1e-2 \
    --precision f16x3 --loss-scale 1024 --out "$work/f16lora"
said "precision: f16x3 matrix products"
said "dynamic loss scale 1024"
run 2 "$wgml" train "${gemma[@]}" --steps 1 --precision f64 --out "$work/f64"
said "f32, f16 or f16x3"
absent "$work/f64"
run 2 "$wgml" finetune --model "$work/gemma" --data "$work/fox.jsonl" --steps 1 --loss-scale 3 --out "$work/ls3"
said "not a power of two"
absent "$work/ls3"
# the model commands take --precision too (products and attention's forward); a wrong
# value is refused before anything is loaded or written
run 0 "$wgml" logits --model "$model" --text "This License" --precision f16 --out "$work/l16.bin"
check '[ "$(stat -c %s "$work/l16.bin")" -eq $((8 + 12 * 4 + 12 * 256 * 4)) ]' "f16 logits file of the wrong size"
run 0 "$wgml" generate --model "$model" --prompt "This" --tokens 4 --temperature 0 --precision f16x3
run 2 "$wgml" logits --model "$model" --text "This" --precision bf16 --out "$work/lbf.bin"
said "f32, f16 or f16x3"
absent "$work/lbf.bin"
run 2 "$wgml" generate --model "$model" --prompt "This" --tokens 4 --precision f64
said "f32, f16 or f16x3"

# ---- 6. output files that cannot be written
# on_full_disk <command...>: runs it with $work/full a 4 KiB file system of its own (a
# mount namespace: nothing outside sees it); $work/ls lists what was left there.
# (ulimit -f cannot stand in for a full disk: lavapipe's device memory is a file too.)
on_full_disk() {
    mkdir -p "$work/full"
    unshare -rm sh -c 'mount -t tmpfs -o size=4k tmpfs "$0" || exit 99; "$@"; rc=$?; ls -A "$0" >"$0.ls"; exit $rc' \
        "$work/full" "$@" >"$work/out" 2>"$work/err"
    rc=$?
    check '[ "$rc" -ne 99 ]' "cannot mount a small file system in a namespace of its own (unshare -rm): $(cat "$work/err")"
    mv "$work/full.ls" "$work/ls" 2>/dev/null || : >"$work/ls"
}
case="logits on a full disk"
on_full_disk "$wgml" logits --model "$model" --text "This License" --out "$work/full/l.bin"
check '[ "$rc" -eq 1 ]' "exit status $rc, expected 1"
said "No space left on device"
check '[ ! -s "$work/ls" ]' "files left behind: $(cat "$work/ls")"
run 0 "$wgml" logits --model "$model" --text "This License" --out "$work/l.bin"
check '[ "$(stat -c %s "$work/l.bin")" -eq $((8 + 12 * 4 + 12 * 256 * 4)) ]' "logits file of the wrong size"
case="train on a full disk"
on_full_disk "$wgml" train "${tiny[@]}" --steps 2 --out "$work/full/m"
check '[ "$rc" -eq 1 ]' "exit status $rc, expected 1"
said "No space left on device"
not_said "wrote "

# ---- 7. feedback
case="--help"
run 0 "$wgml" info --help
not_said "adapter:"
said "usage: wgml info"
case="info --all"
run 0 "$wgml" info --all
said "0: "
said "adapter:"
case="--help"
run 0 "$wgml" bench --help
said "--peak-tflops"
run 0 "$wgml" train --help
for f in --beta1 --beta2 --eps; do said "$f"; done
case="empty text"
run 2 "$wgml" logits --model "$model" --text '' --out "$work/e.bin"
said "empty"
absent "$work/e.bin"
case="--tokens 0 keeps the prompt"
run 0 "$wgml" generate --model "$model" --prompt "This License" --tokens 0
said "prefill: 12 tokens"
not_said "keeping"
case="--context beyond the model"
run 1 "$wgml" generate --model "$model" --context 17
said "max_position_embeddings"
case="bench states no peak it was not given"
run 0 "$wgml" bench --small --filter "add" --group memory --samples 1 --min-ms 1
said "not given"
not_said "67.0 TFLOP/s"
case="too few tokens"
printf 'abcde' >"$work/short.txt"
run 1 "$wgml" train "${tiny[@]}" --steps 1 --data "$work/short.txt" --out "$work/few"
absent "$work/few"
need=$(sed -n 's/.*needs at least \([0-9]*\).*/\1/p' "$work/err")
check '[ -n "$need" ]' "no minimum in: $(cat "$work/err")"
head -c $((need - 1)) /dev/zero | tr '\0' 'a' >"$work/short.txt"
run 1 "$wgml" train "${tiny[@]}" --steps 1 --data "$work/short.txt" --out "$work/few"
said "too few"
head -c "$need" /dev/zero | tr '\0' 'a' >"$work/short.txt"
run 0 "$wgml" train "${tiny[@]}" --steps 1 --data "$work/short.txt" --out "$work/few"
case="progress while steps complete"
start=$(date +%s)
run 0 "$wgml" train "${tiny[@]}" --steps 60 --out "$work/p"
secs=$(($(date +%s) - start))
lines=$(grep -o 'step *[0-9]*/60' "$work/out" | sort -u | wc -l)
# a line at least every second: at least one per four seconds of the run (a loaded machine
# prints late; a silent run prints none), one per eight under AddressSanitizer beside other
# tests on two cores, and more than the first and the last
per=4
[ -n "${WGML_CLI_UNDER_ASAN:-}" ] && per=8
want=$((secs / per > 2 ? secs / per : 3))
check '[ "$lines" -ge "$want" ]' "$lines distinct progress lines in a run of $secs s"

# ---- 8. fine-tuning, evaluation, merging
case="finetune a LoRA adapter"
for i in $(seq 1 40); do printf '{"prompt": "%d+%d=", "completion": "%d"}\n' $i $i $((2 * i)); done >"$work/qa.jsonl"
ft=(finetune --model "$model" --data "$work/qa.jsonl" --context 16 --batch 2 --lr 1e-2)
# with LoRA dropout, which the resumed runs below must repeat decision for decision
run 0 "$wgml" "${ft[@]}" --steps 6 --save-every 3 --lora-dropout 0.1 --out "$work/ft"
said "prompt and completion"
for f in adapter_config.json adapter_model.safetensors loss.csv loss.svg checkpoint-3 checkpoint-6; do
    check '[ -e "$work/ft/$f" ]' "no $f after finetune"
done
check 'grep -q "\"peft_type\":[[:space:]]*\"LORA\"" "$work/ft/adapter_config.json"' "adapter_config.json is not PEFT's"
check 'grep -q "\"lora_dropout\":[[:space:]]*0.1[,[:space:]]" "$work/ft/adapter_config.json"' "adapter_config.json lacks lora_dropout 0.1"
case="finetune resumed goes on bit for bit"
cp -r "$work/ft" "$work/ft2"
rm -r "$work/ft2/checkpoint-6" "$work/ft2/adapter_model.safetensors" "$work/ft2/loss.csv"
run 0 "$wgml" finetune --resume "$work/ft2" --out "$work/ft2"
said "resuming"
check 'cmp -s "$work/ft/adapter_model.safetensors" "$work/ft2/adapter_model.safetensors"' "resumed adapter differs"
check 'cmp -s "$work/ft/loss.csv" "$work/ft2/loss.csv"' "resumed loss.csv differs"
# a save killed half-way leaves a temporary folder: never taken for a checkpoint, removed
rm -r "$work/ft2"
cp -r "$work/ft" "$work/ft2"
mv "$work/ft2/checkpoint-6" "$work/ft2/.checkpoint-6.tmp-99999"
head -c 100 "$work/ft/checkpoint-6/adapter_model.safetensors" >"$work/ft2/.checkpoint-6.tmp-99999/adapter_model.safetensors"
rm "$work/ft2/adapter_model.safetensors" "$work/ft2/loss.csv"
run 0 "$wgml" finetune --resume "$work/ft2" --out "$work/ft2"
said "checkpoint-3"
check 'cmp -s "$work/ft/adapter_model.safetensors" "$work/ft2/adapter_model.safetensors"' "resumed past a killed save: differs"
absent "$work/ft2/.checkpoint-6.tmp-99999"
run 2 "$wgml" finetune --resume "$work/ft2" --out "$work/ft2" --lora-rank 4
said "--lora-rank"
case="finetune from an existing adapter"
run 0 "$wgml" "${ft[@]}" --steps 2 --init-adapter "$work/ft" --out "$work/ft3"
said "(from --init-adapter)"
run 2 "$wgml" "${ft[@]}" --steps 2 --init-adapter "$work/ft" --lora-rank 4 --out "$work/r"
said "--init-adapter"
case="finetune refuses what it cannot do well"
run 1 "$wgml" "${ft[@]}" --steps 2 --out "$work/ft"
said "--overwrite"
run 1 "$wgml" "${ft[@]}" --steps 2 --out "$model" --overwrite
said "folder of the model"
check '[ -e "$model/model.safetensors" ]' "the base model was removed"
run 2 "$wgml" "${ft[@]}" --steps 2 --lora-dropout 1 --out "$work/r"
said "--lora-dropout"
run 2 "$wgml" "${ft[@]}" --steps 2 --lora-targets q,x --out "$work/r"
said "'x'"
absent "$work/r"
printf '{"prompt": "a", "completion": "b"}\n[1, 2]\n' >"$work/bad.jsonl"
run 1 "$wgml" finetune --model "$model" --data "$work/bad.jsonl" --context 16 --steps 1 --out "$work/r"
said "bad.jsonl:2"
absent "$work/r"
printf '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\n' >"$work/chat.jsonl"
run 1 "$wgml" finetune --model "$model" --data "$work/chat.jsonl" --context 16 --steps 1 --out "$work/r"
said "--chat-template"
run 1 "$wgml" finetune --model "$model" --data "$work/chat.jsonl" --chat-template chatml --context 16 --steps 1 --out "$work/r"
said "no learned target"
absent "$work/r"
run 1 "$wgml" "${ft[@]}" --lr 10 --clip 1e6 --beta1 0.999999 --beta2 1e-6 --warmup 0 --min-lr 1 --steps 60 --out "$work/r"
said "NaN"
absent "$work/r"
case="finetune stopped by SIGINT"
"$wgml" "${ft[@]}" --steps 1000000 --out "$work/int" >"$work/out" 2>"$work/err" &
pid=$!
for _ in $(seq 1 600); do grep -q "step " "$work/out" && break; sleep 0.1; done
kill -INT "$pid"
wait "$pid"
rc=$?
check '[ "$rc" -eq 130 ]' "exit status $rc after SIGINT, expected 130: $(tail -c 300 "$work/err")"
ck=$(ls -d "$work"/int/checkpoint-* 2>/dev/null | head -1)
check '[ -n "$ck" ] && [ -e "$ck/adapter_model.safetensors" ] && [ -e "$ck/optimizer.safetensors" ]' "no whole checkpoint after SIGINT"
case="finetune on a full disk"
on_full_disk "$wgml" "${ft[@]}" --steps 2 --out "$work/full/o"
check '[ "$rc" -eq 1 ]' "exit status $rc, expected 1"
said "No space left on device"
not_said "wrote "
case="eval, merge, generate with the adapter"
run 0 "$wgml" eval --model "$model" --data "$work/qa.jsonl" --context 16
said "perplexity"
base_loss=$(sed -n 's/^eval: *loss \([0-9.]*\).*/\1/p' "$work/out")
run 0 "$wgml" eval --model "$model" --adapter "$work/ft" --data "$work/qa.jsonl" --context 16
ft_loss=$(sed -n 's/^eval: *loss \([0-9.]*\).*/\1/p' "$work/out")
check 'awk "BEGIN { exit !($ft_loss < $base_loss) }"' "the adapter did not lower the loss: $base_loss -> $ft_loss"
run 0 "$wgml" merge --model "$model" --adapter "$work/ft" --out "$work/merged"
run 0 "$wgml" eval --model "$work/merged" --data "$work/qa.jsonl" --context 16
merged_loss=$(sed -n 's/^eval: *loss \([0-9.]*\).*/\1/p' "$work/out")
check '[ "$merged_loss" = "$ft_loss" ]' "merged model's loss $merged_loss, the adapter's $ft_loss"
run 1 "$wgml" merge --model "$model" --adapter "$work/ft" --out "$work/merged"
said "--overwrite"
run 1 "$wgml" merge --model "$model" --adapter "$work/ft" --out "$work/ft" --overwrite
said "adapter's folder"
check '[ -e "$work/ft/adapter_model.safetensors" ]' "the adapter was removed"
run 1 "$wgml" merge --model "$model" --adapter "$model" --out "$work/r"
said "adapter_config.json"
absent "$work/r"
run 0 "$wgml" merge --model "$model" --adapter "$work/ft" --out "$work/merged" --overwrite --dtype bf16
check 'grep -q bfloat16 "$work/merged/config.json"' "merged config.json does not say bfloat16"
run 0 "$wgml" generate --model "$model" --adapter "$work/ft" --prompt "3+3=" --tokens 2 --temperature 0
said "with the adapter"

# ---- 9. GGUF files
case="generate and eval from a GGUF file"
check '"$make_gguf" "$model" "$work/m.gguf"' "make_gguf failed"
run 0 "$wgml" generate --model "$work/m.gguf" --prompt "This" --tokens 4 --temperature 0
said "MiB of weights"
run 0 "$wgml" eval --model "$work/m.gguf" --data "$work/qa.jsonl" --context 16
said "perplexity"
case="weights kept packed, expanded or quantised at load"
# one model for the cases below: rows of 64 (whole Q8_0 blocks), 128 positions (chat turns)
run 0 "$wgml" train --dim 64 --heads 2 --kv-heads 1 --layers 1 --ffn 64 --context 128 --batch 2 --eval-every 0 --steps 2 \
    --out "$work/m64"
check '"$make_gguf" "$work/m64" "$work/m64.gguf"' "make_gguf failed"
run 0 "$wgml" generate --model "$work/m64.gguf" --prompt "This" --tokens 4 --temperature 0 --dtype f32
said "(f32)"
cp "$work/out" "$work/text_f32"
run 0 "$wgml" generate --model "$work/m64.gguf" --prompt "This" --tokens 4 --temperature 0
said "(q8_0)"
check 'cmp -s "$work/out" "$work/text_f32"' "the GGUF's kept Q8_0 blocks and their f32 expansion generate different greedy text"
run 0 "$wgml" generate --model "$model" --prompt "This" --tokens 4 --temperature 0 --quantize q4
said "affine 4-bit"
run 0 "$wgml" eval --model "$model" --data "$work/qa.jsonl" --context 16 --quantize q8
said "affine 8-bit"
run 2 "$wgml" generate --model "$model" --dtype f16
said "auto or f32"
run 2 "$wgml" eval --model "$model" --data "$work/qa.jsonl" --quantize q3
said "q8 or q4"
run 2 "$wgml" logits --model "$model" --dtype f32 --quantize q8 --out "$work/r.bin"
said "contradict"
absent "$work/r.bin"
run 0 "$wgml" "${ft[@]}" --steps 2 --quantize q4 --out "$work/qlora"
said "over frozen affine 4-bit weights"
check '[ -e "$work/qlora/adapter_model.safetensors" ]' "QLoRA wrote no adapter"
run 2 "$wgml" "${ft[@]}" --steps 2 --full --quantize q8 --out "$work/r"
said "--full"
absent "$work/r"
case="chat"
printf 'hi\n/reset\nhi\nhow are you\n' >"$work/turns"
run 0 sh -c '"$1" chat --model "$2" --chat-template chatml --temperature 0 --max-tokens 6 <"$3"' sh "$wgml" "$work/m64" \
    "$work/turns"
said "(turn 3: "
said "the conversation is forgotten"
check 'grep -q "turn 3: [0-9]* prompt tokens, [1-9][0-9]* of them from the cache" "$work/err"' \
    "the third turn reused nothing of the cache"
run 0 sh -c 'printf "hi\n/reset\nhi\n" | "$1" chat --model "$2" --chat-template chatml --temperature 0 --max-tokens 6' sh \
    "$wgml" "$work/m64"
check 'size=$(wc -c <"$work/out"); [ $((size % 2)) -eq 0 ] && [ "$(head -c $((size / 2)) "$work/out")" = "$(tail -c $((size / 2)) "$work/out")" ]' \
    "the same turn after /reset gave another greedy reply"
case="generate --n: completions decoded together"
run 0 "$wgml" generate --model "$work/m64" --prompt "ab" --tokens 9 --temperature 0
cp "$work/out" "$work/one"
run 0 "$wgml" generate --model "$work/m64" --prompt "ab" --tokens 9 --temperature 0 --n 3
for i in 1 2 3; do printf -- '---- %d\n' "$i"; cat "$work/one"; done >"$work/three"
check 'cmp -s "$work/out" "$work/three"' "greedy completions decoded together differ from the one decoded alone"
said "3 completions decoded together"
run 0 "$wgml" generate --model "$work/m64" --prompt "ab" --tokens 9 --temperature 1 --n 2 --seed 5
said "seeds 5..6"
case="chat"
run 1 sh -c 'echo hi | "$1" chat --model "$2"' sh "$wgml" "$work/m64"
said "--chat-template"
run 1 sh -c 'echo hi | "$1" chat --model "$2" --chat-template nonesuch' sh "$wgml" "$work/m64"
said "nonesuch"
printf 'GGUF\3\0\0\0' >"$work/cut.gguf"
run 1 "$wgml" generate --model "$work/cut.gguf" --tokens 1
said "truncated"

summary
