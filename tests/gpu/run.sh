#!/usr/bin/env bash
# The one command for a lent GPU machine (an H200 with CUDA 13 and PyTorch 2.x + cuDNN): runs
# both GPU suites (test_gpu, test_comm_gpu: every case must pass, none may skip), a 50-step
# resnet20 --device cuda training run on Fashion-MNIST in fp32, bf16 and fp16 (test accuracy must
# beat chance), resnet18 batch 256 --amp bf16 training img/s for ours next to PyTorch's (cuDNN)
# with the ratio (target >= 0.8), and all_reduce_perf over nccl at world size 1.
# Where .gpu/bundle.tar.xz exists (made here by tests/gpu/bundle.sh, for a device image without
# our Debian dev packages) it runs the bundled binaries and data; else it builds with CUDA on.
# Every step is bounded by `timeout`. Writes the summary to $OUT/gpu_summary.txt (and every
# step's full output to $OUT/gpu_run.log) when OUT is set. Exits non-zero when the build, a GPU
# test or a training run fails.
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
bin=build/bin
data=${FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
if [[ -f .gpu/bundle.tar.xz ]]; then
  root=$(mktemp -d)
  tar -C "$root" -xJf .gpu/bundle.tar.xz
  bin=$root/bin data=$root/data
  # cuBLAS, cuDNN and NCCL come from the device's own toolkit and PyTorch's CUDA wheels.
  cuda_dirs=$(find /usr/local/cuda/ $("$python" -c 'import site; print(*site.getsitepackages())' 2>/dev/null) \
    \( -name libcublas.so.13 -o -name libcudnn.so.9 -o -name libnccl.so.2 \) -printf '%h\n' 2>/dev/null |
    sort -u | paste -sd:)
  export LD_LIBRARY_PATH=$root/lib${cuda_dirs:+:$cuda_dirs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  note "bundle .gpu/bundle.tar.xz; CUDA libraries from ${cuda_dirs:-nowhere}"
  missing=$(ldd "$bin"/* | grep 'not found' | sort -u)
  [[ -z $missing ]] || { note "FAIL libraries not found: $missing"; status=1; }
elif ! step "build (CUDA on)" 300 env CMAKE_ARGS="-DRINGGRAD_ENABLE_CUDA=ON ${CMAKE_ARGS:-}" bash scripts/build.sh; then
  status=1
fi

if ((status == 0)); then
  for suite in test_gpu test_comm_gpu; do
    step "$suite" 240 "$bin/$suite" || status=1
    note "     $(grep '^\[doctest\] test cases' "$summary.out")"
    if grep -q '^SKIPPED:' "$summary.out"; then
      note "FAIL $suite skipped cases: $(grep '^SKIPPED:' "$summary.out" | sort -u | head -3)"
      status=1
    fi
  done

  # One epoch of 50 steps (batch 240 of the bundle's 12,000 images) then the test-set evaluation,
  # whose accuracy must beat chance (10 classes) by a margin no untrained model reaches.
  for amp in none bf16 fp16; do
    name="ringgrad-train --device cuda resnet20 --amp $amp, 50 steps"
    if step "$name" 120 "$bin/ringgrad-train" --device cuda --model resnet20 --amp "$amp" \
      --data "$data" --batch-size 240 --epochs 1 --log-every 10; then
      accuracy=$(sed -n 's/.*test accuracy \([0-9.]*\)%.*/\1/p' "$summary.out" | tail -1)
      if awk -v a="${accuracy:-0}" 'BEGIN { exit !(a > 20) }'; then
        note "     test accuracy $accuracy% (chance 10%)"
      else
        note "FAIL $name: test accuracy '${accuracy}'% is not above 20%"
        status=1
      fi
    else
      status=1
    fi
  done

  # Throughput: informational (a slow result does not fail the run), ratio ours / PyTorch.
  args=(--model resnet18 --batch-size 256 --device cuda --amp bf16 --warmup 5 --steps 30)
  ours=""; theirs=""
  step "train_throughput ${args[*]}" 60 "$bin/train_throughput" "${args[@]}" &&
    ours=$(grep img/s "$summary.out")
  step "torch_train_throughput.py ${args[*]}" 90 "$python" bench/torch_train_throughput.py "${args[@]}" &&
    theirs=$(grep img/s "$summary.out")
  if [[ -n $ours && -n $theirs ]]; then
    awk -v o="$(field "$ours" img/s)" -v t="$(field "$theirs" img/s)" 'BEGIN {
      printf "resnet18 batch 256 bf16 img/s: ours %.1f  pytorch %.1f  ratio %.2f (target >= 0.80)\n", o, t, o / t }' |
      tee -a "$summary"
  fi
  step "all_reduce_perf nccl world 1" 60 "$bin/all_reduce_perf" --backend nccl --device cuda \
    -b 8 -e 256M -f 2 && grep -E "^#|^ *[0-9]" "$summary.out" >>"$summary"
fi
note "# result: $( ((status == 0)) && echo PASS || echo FAIL)"
if [[ -n ${OUT:-} ]]; then mkdir -p "$OUT" && cp "$summary" "$OUT/gpu_summary.txt"; fi
rm -f "$summary" "$summary.out"
exit $status
