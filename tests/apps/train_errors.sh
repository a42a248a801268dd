#!/usr/bin/env bash
# ringgrad-train's bad input: flags (exit 2, one line), a corrupt checkpoint and a data
# directory without MNIST files (exit 1, a message naming the file), --device cuda without a
# GPU and --backend nccl without CUDA tensors (exit 1, the reason), and --help with defaults.
# --device cpu trains as before.
set -uo pipefail
bin=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

expect() {  # expect CODE PATTERN ARGS...: exit code and a stderr line matching PATTERN
  local code=$1 pattern=$2; shift 2
  local err rc
  err=$("$bin" "$@" 2>&1 >/dev/null); rc=$?
  [[ $rc -eq $code ]] || fail "'$*' exited $rc, expected $code: $err"
  grep -qE "$pattern" <<<"$err" || fail "'$*' said '$err', expected /$pattern/"
  echo "ok: $* -> $rc: $err"
}

expect 2 "batch-size" --batch-size 0
expect 2 "model" --model resnet50
expect 2 "lr-schedule" --lr-schedule linear
expect 2 "nonsense" --nonsense
expect 2 "epochs" --epochs abc
expect 1 "train-images-idx3-ubyte" --data "$dir"
head -c 1000 /dev/urandom >"$dir/bad.safetensors"
expect 1 "bad.safetensors" --synthetic --model resnet8 --resume "$dir/bad.safetensors"
expect 2 "device" --device tpu
expect 1 "backend nccl reduces CUDA tensors only" --synthetic --backend nccl
if nvidia-smi -L >/dev/null 2>&1; then
  echo "skip: a GPU is visible, so --device cuda is not refused here"
else
  expect 1 "no usable CUDA device \\(.+\\)" --synthetic --device cuda
fi
"$bin" --synthetic --device cpu --model resnet8 --batch-size 8 --max-steps 2 --no-eval \
  >"$dir/cpu.log" 2>&1 || fail "--device cpu: $(cat "$dir/cpu.log")"
grep -q "training throughput" "$dir/cpu.log" || fail "--device cpu did not train: $(cat "$dir/cpu.log")"
grep -q "cuda" "$dir/cpu.log" && fail "--device cpu mentions cuda: $(cat "$dir/cpu.log")"
echo "ok: --device cpu trains"
help=$("$bin" --help) || fail "--help exited non-zero"
for flag in --data --model --epochs --batch-size --lr --momentum --weight-decay --nesterov \
            --lr-schedule --seed --threads --max-steps --synthetic --save --resume --log-json --device; do
  grep -q -- "$flag" <<<"$help" || fail "--help does not list $flag"
done
grep -q "resnet20" <<<"$help" || fail "--help does not show the default model"
echo "PASS"
