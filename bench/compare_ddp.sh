#!/usr/bin/env bash
# DDP throughput, ours against PyTorch DDP over Gloo, in one run: 2 ranks x 1 thread, resnet20,
# batch 64 per rank, each with gradient sync and with no_sync (no communication). The
# overhead is 1 - sync/no_sync: the communication backward does not hide.
#   bash bench/compare_ddp.sh [--steps N] [--model resnet20|resnet18]
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${BIN:-build/bin}
[[ -x $bin/ddp_throughput ]] || bash scripts/build.sh >/dev/null
args=(--batch-size 64 --threads 1 --steps 20 "$@")
world=2
field() { awk -v k="$2" '{for (i = 1; i < NF; ++i) if ($i == k) print $(i + 1)}' <<<"$1"; }
ours() {
  OMP_NUM_THREADS=1 "$bin"/ringgrad-run --standalone --nproc-per-node $world \
    "$bin"/ddp_throughput "${args[@]}" "$@" 2>/dev/null | grep img/s
}
theirs() {
  local port=$((20000 + RANDOM % 20000)) pids=() out
  out=$(mktemp)
  for ((r = 0; r < world; r++)); do
    RANK=$r WORLD_SIZE=$world MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=1 \
      /usr/bin/python3 bench/torch_ddp_throughput.py "${args[@]}" "$@" >>"$out" 2>/dev/null &
    pids+=($!)
  done
  wait "${pids[@]}"
  grep img/s "$out"
  rm -f "$out"
}
os=$(field "$(ours)" img/s); on=$(field "$(ours --no-sync)" img/s)
ts=$(field "$(theirs)" img/s); tn=$(field "$(theirs --no-sync)" img/s)
printf '%-8s %10s %10s %9s\n' "" sync no_sync overhead
awk -v os="$os" -v on="$on" -v ts="$ts" -v tn="$tn" 'BEGIN {
  printf "%-8s %10.1f %10.1f %8.1f%%\n", "ringgrad", os, on, 100 * (1 - os / on)
  printf "%-8s %10.1f %10.1f %8.1f%%\n", "pytorch", ts, tn, 100 * (1 - ts / tn)
  printf "global img/s with sync, ours/PyTorch: %.2f\n", os / ts
}'
