#!/usr/bin/env bash
# ringgrad-train's bad input: flags (exit 2, one line), a corrupt checkpoint and a data
# directory without MNIST files (exit 1, a message naming the file), --device cuda without a
# GPU and --backend nccl without CUDA tensors (exit 1, the reason), and --help with defaults.
# --device cpu trains as before.
set -uo pipefail
bin=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
source "$(dirname "$0")/expect.sh"

expect 2 "batch-size" --batch-size 0
expect 2 "model" --model resnet50
# A named choice: the flag, the bad value and every choice (each flag parsed into its enum).
expect 2 "--lr-schedule: 'linear' is not one of constant, cosine or onecycle" --lr-schedule linear
expect 2 "--amp: 'fp8' is not one of none, fp16 or bf16" --amp fp8
expect 2 "--backend: 'mpi' is not one of ring, nccl or auto" --backend mpi
expect 2 "--grad-compression: 'int8' is not one of none, fp16 or bf16" --grad-compression int8
expect 2 "nonsense" --nonsense
expect 2 "epochs" --epochs abc
expect 1 "train-images-idx3-ubyte" --data "$dir"
head -c 1000 /dev/urandom >"$dir/bad.safetensors"
expect 1 "bad.safetensors" --synthetic --model resnet8 --resume "$dir/bad.safetensors"
expect 2 "--device: 'tpu' is not one of cpu or cuda" --device tpu
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
# Numbers: NaN, infinities and values out of range are one readable line and exit 2.
expect 2 "--lr: must be a finite number >= 0, got 'nan'" --lr nan
expect 2 "--momentum: must be a finite number from 0 to 1, got 'nan'" --momentum nan
expect 2 "--weight-decay: must be a finite number >= 0, got 'inf'" --weight-decay inf
expect 2 "--amp-init-scale: must be a finite number > 0, got 'nan'" --amp-init-scale nan
expect 2 "--bucket-cap-mb: must be a finite number > 0 and <= 1048576, got 'nan'" --bucket-cap-mb nan
expect 2 "--momentum: must be a finite number from 0 to 1, got '2'" --momentum 2
expect 2 "--threads: must be a whole number from 0 to [0-9]+ \(4 per core" --threads 100000
expect 2 "--threads: must be a whole number" --threads 2000
expect 2 "--timeout: must be a finite number from 0 to 10000000, got 'nan'" --timeout nan
expect 2 "--bucket-cap-mb: must be a finite number > 0 and <= 1048576, got '1e300'" --bucket-cap-mb 1e300
# Whole numbers: CLI11 alone said "At Most 1 required but received 2" past 2^63, "Could not
# convert" for 1.5, and took --seed -1 as 2^64 - 1.
expect 2 "--max-steps: must be a whole number from 0 to 9223372036854775807, got '99999999999999999999'" \
  --max-steps 99999999999999999999
expect 2 "--epochs: must be a whole number from 1 to 2147483647, got '1.5'" --epochs 1.5
expect 2 "--seed: must be a whole number from 0 to 18446744073709551615, got '-1'" --seed -1
# OMP_NUM_THREADS is capped as --threads is (100000 threads overflowed the OpenMP runtime).
OMP_NUM_THREADS=100000 expect 2 "OMP_NUM_THREADS=100000 is outside 1 to [0-9]+ \(4 per core" \
  --synthetic --model resnet8 --max-steps 1
OMP_NUM_THREADS=0 expect 2 "OMP_NUM_THREADS=0 is outside 1 to" --synthetic --model resnet8 --max-steps 1
# Output paths are checked before the first step (exit 2), not after the training.
expect 2 "--save $dir/missing/ck.safetensors: the folder $dir/missing does not exist" \
  --synthetic --model resnet8 --save "$dir/missing/ck.safetensors"
expect 2 "--save $dir is a folder" --synthetic --model resnet8 --save "$dir"
touch "$dir/plain"
expect 2 "--log-json $dir/plain/log.jsonl: $dir/plain is not a folder" \
  --synthetic --model resnet8 --log-json "$dir/plain/log.jsonl"
# A NaN in the weights: the resume refuses the checkpoint, naming the tensor, before any step,
# and the checkpoint (also its --save) is left as it was.
"$bin" --synthetic --model resnet8 --batch-size 8 --max-steps 1 --no-eval \
  --save "$dir/ck.safetensors" >/dev/null 2>&1 || fail "could not write a checkpoint"
python3 - "$dir/ck.safetensors" <<'PY' || fail "could not poison the checkpoint"
import json, struct, sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
name = next(k for k, v in header.items() if k != "__metadata__" and v["dtype"] == "F32"
            and not k.startswith("momentum"))
start = 8 + n + header[name]["data_offsets"][0]
data[start:start + 4] = struct.pack("<f", float("nan"))
open(path, "wb").write(bytes(data))
PY
cp "$dir/ck.safetensors" "$dir/before.safetensors"
expect 2 "ck.safetensors: '.*' holds 1 NaN or inf values" --synthetic --model resnet8 \
  --batch-size 8 --max-steps 3 --no-eval --resume "$dir/ck.safetensors" --save "$dir/ck.safetensors"
cmp -s "$dir/ck.safetensors" "$dir/before.safetensors" || fail "the checkpoint was overwritten"
echo "ok: a NaN checkpoint is refused before its first step and left as it was"
help=$("$bin" --help) || fail "--help exited non-zero"
for flag in --data --model --epochs --batch-size --lr --momentum --weight-decay --nesterov \
            --lr-schedule --seed --threads --max-steps --synthetic --save --resume --log-json --device \
            --timeout; do
  grep -q -- "$flag" <<<"$help" || fail "--help does not list $flag"
done
grep -q "resnet20" <<<"$help" || fail "--help does not show the default model"
echo "PASS"
