#!/usr/bin/env bash
# The one command for a lent GPU machine (a fresh checkout, an H200 with PyTorch 2.x + CUDA):
# builds with CUDA, runs both GPU suites (ctest -L gpu), a resnet20 --device cuda smoke run,
# resnet18 batch 256 --amp bf16 training img/s for ours next to PyTorch's (cuDNN) with the
# ratio (target >= 0.8), and all_reduce_perf over nccl at world size 1. Every step is bounded
# by `timeout`, the limits adding up to 12 minutes at most (a 16-core build and the steps take
# about 6 normally). Writes the summary to $OUT/gpu_summary.txt (and every step's full output
# to $OUT/gpu_run.log) when OUT is set. Exits non-zero when the build, a GPU test or the smoke
# run fails.
#   bash tests/gpu/run.sh          PYTHON=python3 (the interpreter with torch)
set -uo pipefail
cd "$(dirname "$0")/../.."
python=${PYTHON:-python3}
summary=$(mktemp)
status=0
note() { echo "$*" | tee -a "$summary"; }
step() {  # step NAME SECONDS COMMAND...: runs it bounded, notes pass/fail, keeps its output
  local name=$1 limit=$2; shift 2
  local start=$SECONDS
  timeout "$limit" "$@" >"$summary.out" 2>&1
  local rc=$?
  tail -n 40 "$summary.out"
  if [[ -n ${OUT:-} ]]; then mkdir -p "$OUT" && { echo "## $name"; cat "$summary.out"; } >>"$OUT/gpu_run.log"; fi
  if ((rc == 0)); then note "ok   $name ($((SECONDS - start)) s)"; else
    note "FAIL $name: exit $rc$( ((rc == 124)) && echo " (over ${limit} s)") ($((SECONDS - start)) s)"
  fi
  return $rc
}
field() { awk -v k="$2" '{for (i = 1; i < NF; ++i) if ($i == k) print $(i + 1)}' <<<"$1"; }

note "# ringgrad GPU run $(date -u +%FT%TZ) on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)"
if ! step "build (CUDA on)" 300 env CMAKE_ARGS="-DRINGGRAD_ENABLE_CUDA=ON ${CMAKE_ARGS:-}" bash scripts/build.sh; then
  status=1
else
  step "ctest -L gpu" 150 ctest --test-dir build -L gpu --output-on-failure || status=1
  step "ringgrad-train --device cuda resnet20, 50 steps" 60 build/bin/ringgrad-train --device cuda \
    --model resnet20 --max-steps 50 --synthetic --no-eval --log-every 10 || status=1

  # Throughput: informational (a slow result does not fail the run), ratio ours / PyTorch.
  args=(--model resnet18 --batch-size 256 --device cuda --amp bf16 --warmup 5 --steps 30)
  ours=""; theirs=""
  step "train_throughput ${args[*]}" 60 build/bin/train_throughput "${args[@]}" &&
    ours=$(grep img/s "$summary.out")
  step "torch_train_throughput.py ${args[*]}" 90 "$python" bench/torch_train_throughput.py "${args[@]}" &&
    theirs=$(grep img/s "$summary.out")
  if [[ -n $ours && -n $theirs ]]; then
    awk -v o="$(field "$ours" img/s)" -v t="$(field "$theirs" img/s)" 'BEGIN {
      printf "resnet18 batch 256 bf16 img/s: ours %.1f  pytorch %.1f  ratio %.2f (target >= 0.80)\n", o, t, o / t }' |
      tee -a "$summary"
  fi
  step "all_reduce_perf nccl world 1" 60 build/bin/all_reduce_perf --backend nccl --device cuda \
    -b 8 -e 256M -f 2 && grep -E "^#|^ *[0-9]" "$summary.out" >>"$summary"
fi
note "# result: $( ((status == 0)) && echo PASS || echo FAIL)"
if [[ -n ${OUT:-} ]]; then mkdir -p "$OUT" && cp "$summary" "$OUT/gpu_summary.txt"; fi
rm -f "$summary" "$summary.out"
exit $status
