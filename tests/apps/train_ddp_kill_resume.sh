#!/usr/bin/env bash
# Data-parallel ringgrad-train under ringgrad-run: a rank killed mid-epoch fails the whole job
# (the launcher's summary names the rank and the signal), and resuming from the checkpoint the
# dead job left behind continues exactly: every later step's loss equals that of an
# uninterrupted run, bit for bit.
set -euo pipefail
run=$1 train=$2
dir=$(mktemp -d)
launcher_pid=
cleanup() { [[ -n $launcher_pid ]] && kill -9 "$launcher_pid" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
common=(--synthetic --model resnet8 --batch-size 16 --threads 1 --seed 3 --log-every 1 --no-eval)
launch() { OMP_NUM_THREADS=1 "$run" --standalone --nproc-per-node 2 "$train" "${common[@]}" "$@"; }

launch --max-steps 12 --log-json "$dir/full.jsonl" >"$dir/full.out" 2>&1

# A long run, checkpointing every 4 steps; rank 1 is killed once a checkpoint exists.
launch --max-steps 100000 --checkpoint-every 4 --save "$dir/ckpt.safetensors" >"$dir/killed.out" 2>&1 &
launcher_pid=$!
for _ in $(seq 600); do [[ -f $dir/ckpt.safetensors ]] && break; sleep 0.1; done
[[ -f $dir/ckpt.safetensors ]] || { echo "FAIL: no checkpoint appeared"; cat "$dir/killed.out"; exit 1; }
victim=
for pid in $(pgrep -f -- "--save $dir/ckpt.safetensors"); do
  if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "RANK=1"; then victim=$pid; fi
done
[[ -n $victim ]] || { echo "FAIL: rank 1 not found"; exit 1; }
kill -9 "$victim"
rc=0
wait "$launcher_pid" || rc=$?
launcher_pid=
echo "killed job: launcher exit code $rc"
[[ $rc -ne 0 ]] || { echo "FAIL: the launcher reported success after a rank was killed"; exit 1; }
grep -E "rank 1" "$dir/killed.out" | grep -q "SIGKILL" \
  || { echo "FAIL: summary does not name rank 1 and SIGKILL"; cat "$dir/killed.out"; exit 1; }

launch --max-steps 12 --resume "$dir/ckpt.safetensors" --log-json "$dir/resumed.jsonl" >"$dir/resumed.out" 2>&1
losses() { grep '"type":"step"' "$1" | sed -E 's/.*"loss":([^,}]*).*"step":([0-9]+).*/\2 \1/'; }
resumed=$(losses "$dir/resumed.jsonl")
first=$(head -1 <<<"$resumed" | cut -d' ' -f1)
full=$(losses "$dir/full.jsonl" | awk -v f="$first" '$1 >= f')
echo "resumed from step $((first - 1)); steps $first-12, uninterrupted vs resumed:"
paste <(echo "$full") <(echo "$resumed")
[[ -n $resumed && "$full" == "$resumed" ]] || { echo "FAIL: resumed losses differ"; exit 1; }
echo "PASS"
