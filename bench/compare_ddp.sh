#!/usr/bin/env bash
# DDP throughput in one run: ours (ringgrad-train's DDP), PyTorch DDP over Gloo and, when
# PYTHON can import the ringgrad_torch module (build/lib), PyTorch DDP over ringgrad. 2 ranks
# x 1 thread, batch 64 per rank, each with gradient sync and with no_sync (no communication);
# the overhead is 1 - sync/no_sync: the communication backward does not hide. Then ours and
# PyTorch+Gloo with sync under bf16 autocast, PyTorch+Gloo also in channels_last (NHWC) in both
# precisions, and the ratio of each side's fastest (ours are NCHW). Then the case
# where Gloo is weakest: 1,000 all-reduces of 8 bytes, Gloo against ringgrad, from PyTorch
# (three rounds; with PyTorch's defaults, then with its flight recorder off). A rank that
# cannot start (its port taken) ends the others within 15 minutes.
#   [PYTHON=/path/to/python] [ROUNDS=N] bash bench/compare_ddp.sh [--steps N]
#     [--model resnet20|resnet18]
# PYTHON: as bench_env.sh says (default: PyTorch 2.x in build/torch-venv, else Debian's 1.13,
# which has no ringgrad column: the module needs torch 2.x). ROUNDS: as bench_env.sh says.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${BIN:-build/bin}
source bench/bench_env.sh
python=${PYTHON:-$(default_python)}
[[ -x $bin/ddp_throughput ]] || bash scripts/build.sh >/dev/null
args=(--batch-size 64 --threads 1 --steps 20 "$@")
world=2
export PYTHONPATH="$PWD/${bin%/bin}/lib${PYTHONPATH:+:$PYTHONPATH}"
with_plugin=0
"$python" -c "import ringgrad_torch" 2>/dev/null && with_plugin=1
field() { awk -v k="$2" '{for (i = 1; i < NF; ++i) if ($i == k) print $(i + 1)}' <<<"$1"; }
ours() {
  OMP_NUM_THREADS=1 "$bin"/ringgrad-run --standalone --nproc-per-node $world \
    "$bin"/ddp_throughput "${args[@]}" "$@" 2>/dev/null | grep img/s
}
# torch SCRIPT ARGS...: SCRIPT on `world` ranks of PYTHON; prints rank 0's output.
torch_ranks() {
  local port=$((20000 + RANDOM % 20000)) pids=() out
  out=$(mktemp)
  for ((r = 0; r < world; r++)); do
    RANK=$r WORLD_SIZE=$world MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=1 \
      timeout 900 "$python" "$@" >>"$out" 2>/dev/null &
    pids+=($!)
  done
  wait "${pids[@]}"
  cat "$out"
  rm -f "$out"
}
theirs() { torch_ranks bench/torch_ddp_throughput.py "${args[@]}" "$@" | grep img/s; }
cpu_header
echo "PyTorch $("$python" -c 'import torch; print(torch.__version__)') from $python"
rounds=$(rounds)
((rounds > 1)) && echo "each figure: the median of $rounds interleaved rounds"
declare -A runs=()
measure() {  # CELL COMMAND...: one more img/s for CELL
  local cell=$1
  shift
  runs[$cell]+="$(field "$("$@")" img/s) "
}
for ((round = 0; round < rounds; round++)); do
  measure os ours; measure on ours --no-sync
  measure ts theirs; measure tn theirs --no-sync
  measure ob ours --amp bf16; measure tb theirs --amp bf16
  measure cf theirs --channels-last; measure cb theirs --channels-last --amp bf16
  if ((with_plugin)); then
    measure rs theirs --backend ringgrad; measure rn theirs --backend ringgrad --no-sync
  fi
done
os=$(median "${runs[os]}") on=$(median "${runs[on]}") ts=$(median "${runs[ts]}")
tn=$(median "${runs[tn]}") ob=$(median "${runs[ob]}") tb=$(median "${runs[tb]}")
cf=$(median "${runs[cf]}") cb=$(median "${runs[cb]}") rs=0 rn=0
if ((with_plugin)); then rs=$(median "${runs[rs]}") rn=$(median "${runs[rn]}"); fi
printf '%-17s %10s %10s %9s\n' "" sync no_sync overhead
awk -v os="$os" -v on="$on" -v ts="$ts" -v tn="$tn" -v rs="$rs" -v rn="$rn" -v ob="$ob" \
  -v tb="$tb" -v cf="$cf" -v cb="$cb" 'BEGIN {
  printf "%-17s %10.1f %10.1f %8.1f%%\n", "ringgrad", os, on, 100 * (1 - os / on)
  printf "%-17s %10.1f %10.1f %8.1f%%\n", "pytorch+gloo", ts, tn, 100 * (1 - ts / tn)
  if (rs > 0) printf "%-17s %10.1f %10.1f %8.1f%%\n", "pytorch+ringgrad", rs, rn, 100 * (1 - rs / rn)
  printf "%-17s %10.1f\n%-17s %10.1f\n", "ringgrad bf16", ob, "pytorch+gloo bf16", tb
  printf "%-17s %10.1f\n%-17s %10.1f\n", "pytorch+gloo NHWC", cf, "  NHWC bf16", cb
  printf "global img/s with sync, ours/PyTorch+Gloo: %.2f\n", os / ts
  theirs = ts
  if (tb > theirs) theirs = tb
  if (cf > theirs) theirs = cf
  if (cb > theirs) theirs = cb
  printf "each side at its fastest (f32 or bf16 autocast; PyTorch also NHWC), ours/PyTorch+Gloo: %.2f\n",
    (os > ob ? os : ob) / theirs
  if (rs > 0) printf "global img/s with sync, PyTorch+ringgrad/PyTorch+Gloo: %.2f\n", rs / ts
}'
# 1,000 timed calls after 1,000 untimed ones, so first-use costs stay out of both columns (at
# ringgrad's few microseconds a call, 20 warm-up calls left them weighing on the figure). Three
# interleaved rounds; the median ratio. Once with PyTorch's defaults, once with its flight
# recorder off for both backends (TORCH_FR_BUFFER_SIZE=0): it records every collective of a
# third-party backend's group, at several microseconds a call (docs/pytorch.md).
eight_byte_rounds() {  # LABEL
  local ratios=() g r round
  for round in 1 2 3; do
    g=$(torch_ranks bench/gloo_allreduce.py 8 8 2 1000 1000 gloo | awk '{print $2}')
    r=$(torch_ranks bench/gloo_allreduce.py 8 8 2 1000 1000 ringgrad | awk '{print $2}')
    ratios+=("$(awk -v g="$g" -v r="$r" 'BEGIN { printf "%.1f", g / r }')")
    awk -v g="$g" -v r="$r" -v n="$round" -v l="$1" 'BEGIN {
      printf "8-byte all_reduce x 1000 from PyTorch (%s), round %d: gloo %.1f us, ringgrad %.1f us each: %.1fx\n", l, n, g, r, g / r }'
  done
  printf '%s\n' "${ratios[@]}" | sort -n | awk -v l="$1" 'NR == 2 {
    printf "8-byte all_reduce (%s), median ratio gloo/ringgrad: %.1fx\n", l, $1 }'
}
if ((with_plugin)); then
  eight_byte_rounds "PyTorch's defaults"
  TORCH_FR_BUFFER_SIZE=0 eight_byte_rounds "flight recorder off"
fi
