#!/usr/bin/env bash
# ringgrad-run --max-restarts 1 with ringgrad-train --auto-resume: rank 1 of the first attempt
# dies (SIGKILL) after step 6, the launcher restarts both ranks with the same command, they
# continue from the step-4 checkpoint in --save, and every step from there on has the loss of
# an uninterrupted run, bit for bit; --log-json keeps the first attempt's records too.
set -euo pipefail
run=$1 train=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(--synthetic --model resnet8 --batch-size 16 --threads 1 --seed 5 --log-every 1 --no-eval
        --max-steps 12)
export OMP_NUM_THREADS=1

"$run" --standalone --nproc-per-node 2 "$train" "${common[@]}" --log-json "$dir/full.jsonl" \
  >"$dir/full.out" 2>&1

# The worker: rank 1 of attempt 0 stops after 6 steps and then dies by SIGKILL.
cat >"$dir/worker.sh" <<'WORKER'
#!/usr/bin/env bash
train=$1; shift
if [[ $RANK == 1 && $TORCHELASTIC_RESTART_COUNT == 0 ]]; then
  args=()
  while (($#)); do
    if [[ $1 == --max-steps ]]; then args+=(--max-steps 6); shift 2; else args+=("$1"); shift; fi
  done
  "$train" "${args[@]}"
  kill -9 $$
fi
exec "$train" "$@"
WORKER
chmod +x "$dir/worker.sh"
rc=0
timeout 240 "$run" --standalone --nproc-per-node 2 --max-restarts 1 "$dir/worker.sh" "$train" \
  "${common[@]}" --checkpoint-every 4 --save "$dir/ckpt.safetensors" --auto-resume \
  --log-json "$dir/auto.jsonl" >"$dir/auto.out" 2>&1 || rc=$?
[[ $rc -eq 0 ]] || { echo "FAIL: the restarted job exited $rc"; cat "$dir/auto.out"; exit 1; }
grep -q "(--auto-resume)" "$dir/auto.out" \
  || { echo "FAIL: the restart did not resume from --save"; cat "$dir/auto.out"; exit 1; }
grep -q "restart" "$dir/auto.out" || { echo "FAIL: no restart reported"; cat "$dir/auto.out"; exit 1; }
# The restart adds to --log-json: the first attempt's steps (from step 1) are still there.
grep -q '"step":1[,}]' "$dir/auto.jsonl" \
  || { echo "FAIL: the restart truncated the first attempt's --log-json"; exit 1; }

# The last record of each step: the restarted attempt's where both attempts logged it.
losses() {
  grep '"type":"step"' "$1" | sed -E 's/.*"loss":([^,}]*).*"step":([0-9]+).*/\2 \1/' |
    awk '{ loss[$1] = $2 } END { for (s in loss) print s, loss[s] }' | sort -n
}
resumed_from=$(sed -nE 's/.*resumed from .* step ([0-9]+) \(--auto-resume\).*/\1/p' "$dir/auto.out" | head -1)
[[ -n $resumed_from ]] || { echo "FAIL: no resume step in the log"; cat "$dir/auto.out"; exit 1; }
full=$(losses "$dir/full.jsonl" | awk -v f="$resumed_from" '$1 > f')
auto=$(losses "$dir/auto.jsonl" | awk -v f="$resumed_from" '$1 > f')
echo "resumed after step $resumed_from; uninterrupted vs restarted:"
paste <(echo "$full") <(echo "$auto")
[[ -n $auto && "$full" == "$auto" ]] || { echo "FAIL: losses after the restart differ"; exit 1; }
echo "PASS"
