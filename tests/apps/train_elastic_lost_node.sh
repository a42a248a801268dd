#!/usr/bin/env bash
# Elastic training survives a lost node. Two launchers (--nnodes 1:2, one process each, c10d on
# loopback) train resnet8 on Fashion-MNIST with --save --auto-resume --checkpoint-every 10; the
# second launcher is killed (kill -9) once step 75 is logged. The first re-forms the job alone
# (restart 1, generation 1), and its worker continues from the last checkpoint keeping the
# global batch (16 x 2 = 32, now on one process) to step 200: the steps go on from the
# checkpoint's, with the loss where the checkpoint left it (well below the start's), not from
# step 0. Before, the restarted worker refused its own checkpoint (another global batch) and the
# job failed. The 125 steps after step 75 leave a wide margin for the kill to land inside the
# first run, even on a fast CPU.
set -euo pipefail
run=$1 train=$2 data=${3:-/usr/share/datasets/fashion-mnist}
if [[ ! -e $data/train-images-idx3-ubyte && ! -e $data/train-images-idx3-ubyte.gz ]]; then
  echo "SKIPPED: no MNIST-format files in $data"
  exit 77
fi
dir=$(mktemp -d)
pids=()
trap 'kill -9 "${pids[@]}" 2>/dev/null || true; rm -rf "$dir"' EXIT
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export OMP_NUM_THREADS=1
node() {
  exec "$run" --nnodes 1:2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" \
    --rdzv-id elastic --max-restarts 1 --rdzv-conf last_call_timeout=10 \
    "$train" --data "$data" --model resnet8 --batch-size 16 --threads 1 --seed 7 --log-every 5 \
    --no-eval --max-steps 200 --checkpoint-every 10 --save "$dir/ck.safetensors" --auto-resume \
    --log-json "$dir/log.jsonl"
}
node >"$dir/first.out" 2>&1 & pids+=($!)  # joins first: hosts the store, node rank 0
first=$!
sleep 1
node >"$dir/second.out" 2>&1 & pids+=($!)
second=$!
for _ in $(seq 1 6000); do  # at most 10 minutes (the CTest timeout ends it sooner)
  grep -q '"step":75' "$dir/log.jsonl" 2>/dev/null && break
  kill -0 "$first" 2>/dev/null || break
  sleep 0.1
done
grep -q '"step":75' "$dir/log.jsonl" || { echo "FAIL: step 75 never came"; cat "$dir"/*.out; exit 1; }
grep -q "node rank 0/2" "$dir/first.out" || { echo "FAIL: the job did not start on 2 nodes"; cat "$dir"/*.out; exit 1; }
kill -9 "$second"
rc=0
wait "$first" || rc=$?
cat "$dir/first.out"
[[ $rc -eq 0 ]] || { echo "FAIL: the surviving launcher exited $rc"; exit 1; }
grep -q "restarting all workers (restart 1 of 1)" "$dir/first.out" \
  || { echo "FAIL: no restart after the lost node"; exit 1; }
grep -q "node rank 0/1 (generation 1)" "$dir/first.out" \
  || { echo "FAIL: generation 1 did not re-form on one node"; exit 1; }
grep -q "keeping the checkpoint's global batch of 32 on 1 process: 32 images per process" \
  "$dir/first.out" || { echo "FAIL: the global batch was not kept"; exit 1; }
resumed=$(sed -nE 's/.*resumed from .* step ([0-9]+) \(--auto-resume\).*/\1/p' "$dir/first.out" | head -1)
[[ -n $resumed && $resumed -ge 70 ]] || { echo "FAIL: resumed at step '$resumed', not from the last checkpoint"; exit 1; }
# Step records: the first of attempt 0 (step 5) and the first after the resume.
first_loss=$(grep -m1 '"type":"step"' "$dir/log.jsonl" | sed -E 's/.*"loss":([^,}]*).*/\1/')
after=$(grep '"type":"step"' "$dir/log.jsonl" | grep -E "\"step\":$((resumed + 5))[,}]" | tail -1)
after_loss=$(sed -E 's/.*"loss":([^,}]*).*/\1/' <<<"$after")
last_step=$(grep '"type":"step"' "$dir/log.jsonl" | tail -1 | sed -E 's/.*"step":([0-9]+).*/\1/')
echo "resumed at step $resumed; loss at step 5: $first_loss, at step $((resumed + 5)): $after_loss; last step $last_step"
[[ $last_step -eq 200 ]] || { echo "FAIL: the run did not reach step 200"; exit 1; }
awk -v a="$after_loss" -v f="$first_loss" 'BEGIN { exit !(a < 0.8 * f) }' \
  || { echo "FAIL: the loss after the resume is not below the start's: it started over?"; exit 1; }
echo "PASS"
