#!/usr/bin/env bash
# Data parallelism (DATA PARALLELISM in wgml.h) with two processes on this machine:
#   bash tests/mpi_test.sh <path to the wgml program>
# - two processes each running half of every step's micro-batches train the model a
#   single process trains on all of them (--accum 2): the loss curves agree within the
#   bound the order of the gradients' sums allows, and the two processes' weights agree
#   bit for bit (the program checks and says so); the program marks each process's last
#   micro-batch of a step (wgml_trainer_mark_last), so the sum overlaps its backward;
# - the same with two micro-batches per process (--accum 4): the first adds its gradients
#   unmarked, the second marked;
# - a run's checkpoint resumes with the other process count (2 -> 1 and 1 -> 2) onto the
#   uninterrupted run's curve;
# - bad process counts are refused, nothing written;
# - a process that stops answering makes the job end with an error (the collective's
#   timeout), not hang.
# Prints "N passed, M failed" last and exits non-zero on any failure.
set -u
wgml=$1
[ -x "$wgml" ] || { echo "mpi_test.sh: $wgml is not a program"; exit 2; }
command -v mpirun >/dev/null || { echo "mpi_test.sh: no mpirun"; exit 2; }
work=$(mktemp -d /tmp/wgml_mpi_test.XXXXXX)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/checks.sh"

# --bind-to none: Open MPI binds each process to one core by default, which leaves a CPU
# adapter's (lavapipe's) threads of both processes on one core each, many times slower
mpi=(mpirun --bind-to none --oversubscribe -np 2)
[ "$(id -u)" = 0 ] && mpi=(mpirun --allow-run-as-root --bind-to none --oversubscribe -np 2)
head -c 40000 /usr/share/common-licenses/GPL-3 >"$work/data.txt"
flags=(--data "$work/data.txt" --dim 32 --heads 2 --kv-heads 1 --layers 2 --ffn 64 --context 32 --batch 2 --accum 2
       --steps 6 --warmup 1 --eval-every 3)

# same_curve A B: the training and validation losses of two runs' loss.csv agree. Each
# step's gradient is one sum in another order (f32 rounding of 2^-24 relative per term,
# of gradients of order 1): the weights then differ by about lr * 1e-7 per step, and the
# losses of these six steps by well under 1e-5; a missing or doubled micro-batch, or a
# mean over one process's batches, moves them by 1e-2 or more.
same_curve() {
    python3 - "$1/loss.csv" "$2/loss.csv" <<'PY'
import csv, sys
a, b = (list(csv.DictReader(open(p))) for p in sys.argv[1:3])
assert len(a) == len(b) == 6, (len(a), len(b))
for ra, rb in zip(a, b):
    for k in ("train_loss", "val_loss"):
        if ra[k] or rb[k]:
            assert abs(float(ra[k]) - float(rb[k])) <= 1e-5, (ra["step"], k, ra[k], rb[k])
PY
}

case="two processes against one"
run 0 "${mpi[@]}" "$wgml" train "${flags[@]}" --save-every 3 --out "$work/two"
said "processes: 2 (mpirun), each 1 of a step's 2 micro-batches"
said "the 2 processes' weights agree bit for bit"
run 0 "$wgml" train "${flags[@]}" --save-every 3 --out "$work/one"
check 'same_curve "$work/two" "$work/one"' "the two-process curve is not the single process's"
check '[ -d "$work/two/checkpoint-3" ] && [ -f "$work/two/model.safetensors" ]' "rank 0 did not write the run"

case="two micro-batches per process"
run 0 "${mpi[@]}" "$wgml" train "${flags[@]}" --accum 4 --out "$work/two4"
said "processes: 2 (mpirun), each 2 of a step's 4 micro-batches"
said "the 2 processes' weights agree bit for bit"
run 0 "$wgml" train "${flags[@]}" --accum 4 --out "$work/one4"
check 'same_curve "$work/two4" "$work/one4"' "with --accum 4 the two-process curve is not the single process's"

case="resume 2 -> 1"
cp -r "$work/two" "$work/two1"
rm -r "$work/two1/checkpoint-6" "$work/two1/model.safetensors"
run 0 "$wgml" train --resume "$work/two1/checkpoint-3" --out "$work/two1"
check 'same_curve "$work/two" "$work/two1"' "resumed alone, the curve left the two-process run's"

case="resume 1 -> 2"
cp -r "$work/one" "$work/one2"
rm -r "$work/one2/checkpoint-6" "$work/one2/model.safetensors"
run 0 "${mpi[@]}" "$wgml" train --resume "$work/one2/checkpoint-3" --out "$work/one2"
check 'same_curve "$work/one" "$work/one2"' "resumed by two processes, the curve left the single run's"

case="LoRA fine-tuning, two processes against one"
for i in $(seq 1 24); do printf '{"text": "the quick brown fox %d jumps"}\n' $i; done >"$work/fox.jsonl"
ft=(finetune --model "$work/one" --data "$work/fox.jsonl" --context 16 --batch 2 --accum 2 --steps 6 --warmup 1
    --eval-every 3 --val-fraction 0.2)
run 0 "${mpi[@]}" "$wgml" "${ft[@]}" --out "$work/ft2"
said "the 2 processes' weights agree bit for bit"
run 0 "$wgml" "${ft[@]}" --out "$work/ft1"
check 'same_curve "$work/ft2" "$work/ft1"' "the two-process LoRA curve is not the single process's"

case="--accum not a multiple"
run 2 "${mpi[@]}" "$wgml" train "${flags[@]}" --accum 3 --out "$work/bad"
said "--accum 3 is not a multiple of the 2 processes"
check '[ ! -e "$work/bad" ]' "a refused run left $work/bad"

# rank 1 stops answering (SIGSTOP) once training runs; rank 0 gives up after
# WGML_COMM_TIMEOUT and ends the job: an error, well before the outer timeout
case="a process that stops answering"
cat >"$work/stall.sh" <<SH
#!/usr/bin/env bash
# rank 1 becomes the program (exec keeps its process id), stopped 8 s later
[ "\${OMPI_COMM_WORLD_RANK:-0}" = 1 ] && (sleep 8; kill -STOP \$\$) &
exec "\$@"
SH
chmod +x "$work/stall.sh"
start=$(date +%s)
timeout 300 env WGML_COMM_TIMEOUT=5 "${mpi[@]}" "$work/stall.sh" "$wgml" train "${flags[@]}" --steps 100000 \
    --out "$work/stall" >"$work/out" 2>"$work/err"
rc=$?
check '[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ]' "exit status $rc: the job did not end with an error of its own"
said "waited 5000 ms for the other processes"
check '[ $(( $(date +%s) - start )) -lt 200 ]' "the job took $(( $(date +%s) - start )) s to give up"

summary
