#!/usr/bin/env bash
# ringgrad-train --resume continues only the run it saved: another --seed, global batch or data
# set (its images too) is refused naming both values (exit 2); so are a weights-only file,
# missing, stray or misshapen momentum buffers and a step past --epochs; a position that is not
# one of the run and metadata that are not numbers are a damaged file (exit 1). --init-from
# starts a fresh run from weights, names the tensors of a file that does not fit, and under
# --auto-resume gives way to the checkpoint a failed attempt left.
set -uo pipefail
bin=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
source "$(dirname "$0")/expect.sh"

"$bin" --synthetic --model resnet8 --batch-size 8 --max-steps 1 --no-eval --seed 1 \
  --save "$dir/s1.safetensors" >/dev/null 2>&1 || fail "could not write a checkpoint"
common=(--synthetic --model resnet8 --max-steps 2 --no-eval)
expect 2 "written with --seed 1, this run has 2" "${common[@]}" --batch-size 8 --seed 2 \
  --resume "$dir/s1.safetensors"
expect 2 "global batch .* of 8, this run has 16" "${common[@]}" --batch-size 16 --seed 1 \
  --resume "$dir/s1.safetensors"
edit "$dir/s1.safetensors" "$dir/weights.safetensors" \
  "h.pop('__metadata__'); [h.pop(k) for k in list(h) if k.startswith('optimizer.')]"
expect 2 "not a ringgrad-train checkpoint .* --init-from" "${common[@]}" --batch-size 8 \
  --resume "$dir/weights.safetensors"
edit "$dir/s1.safetensors" "$dir/nomomentum.safetensors" \
  "[h.pop(k) for k in list(h) if k.startswith('optimizer.')]"
expect 2 "holds 0 momentum buffers, its metadata says 29 \(29 parameters\)" "${common[@]}" \
  --batch-size 8 --seed 1 --resume "$dir/nomomentum.safetensors"
edit "$dir/s1.safetensors" "$dir/negative.safetensors" "h['__metadata__']['step'] = '-5'"
expect 1 "step -5 is impossible" "${common[@]}" --batch-size 8 --seed 1 \
  --resume "$dir/negative.safetensors"
edit "$dir/weights.safetensors" "$dir/partial.safetensors" "h.pop('fc.bias'); h['extra'] = dict(h['fc.weight'])"
expect 2 "missing 'fc.bias'; unexpected 'extra'" "${common[@]}" --init-from "$dir/partial.safetensors"
"$bin" "${common[@]}" --batch-size 8 --init-from "$dir/weights.safetensors" >"$dir/init.log" 2>&1 ||
  fail "--init-from a weights-only file: $(cat "$dir/init.log")"
grep -q "initialised the weights from" "$dir/init.log" || fail "--init-from said nothing"
echo "ok: resume mismatches are refused, --init-from starts from weights"
# The same on two tiny data sets of 64 training images with equal labels, one pixel apart.
python3 - "$dir" <<'PY' || fail "could not write the data sets"
import os, random, struct, sys
random.seed(1)
def write(path, dims, data):
    with open(path, "wb") as f:
        f.write(struct.pack(">BBBB", 0, 0, 8, len(dims)) + struct.pack(">" + "I" * len(dims), *dims))
        f.write(bytes(data))
for split, n in (("train", 64), ("t10k", 16)):
    images = [random.randrange(256) for _ in range(n * 28 * 28)]
    labels = [random.randrange(10) for _ in range(n)]
    for folder in ("a", "b"):
        os.makedirs(os.path.join(sys.argv[1], folder), exist_ok=True)
        if folder == "b" and split == "train":
            images[100] = (images[100] + 1) % 256
        write(os.path.join(sys.argv[1], folder, split + "-images-idx3-ubyte"), (n, 28, 28), images)
        write(os.path.join(sys.argv[1], folder, split + "-labels-idx1-ubyte"), (n,), labels)
PY
tiny=(--model resnet8 --batch-size 8 --no-eval)  # 8 steps per epoch
"$bin" "${tiny[@]}" --data "$dir/a" --seed 18446744073709551615 --max-steps 1 \
  --save "$dir/big.safetensors" >/dev/null 2>&1 || fail "could not save with seed 2^64-1"
"$bin" "${tiny[@]}" --data "$dir/a" --seed 18446744073709551615 --max-steps 2 \
  --resume "$dir/big.safetensors" >/dev/null 2>&1 || fail "a checkpoint of seed 2^64-1 does not resume"
tiny+=(--seed 5)
"$bin" "${tiny[@]}" --data "$dir/a" --max-steps 3 --save "$dir/t.safetensors" >/dev/null 2>&1 ||
  fail "could not write a checkpoint on the tiny data set"
tiny+=(--max-steps 4)
expect 2 "training set \(images and labels\) of CRC32 [0-9a-f]{8}, this run has [0-9a-f]{8}" \
  "${tiny[@]}" --data "$dir/b" --resume "$dir/t.safetensors"
tiny+=(--data "$dir/a")
edit "$dir/t.safetensors" "$dir/shape.safetensors" \
  "h['optimizer.momentum_buffer.fc.bias']['shape'] = [2, 5]"
expect 2 "momentum buffer 'optimizer.momentum_buffer.fc.bias' has shape \[2, 5\], its parameter \[10\]" \
  "${tiny[@]}" --resume "$dir/shape.safetensors"
edit "$dir/t.safetensors" "$dir/stray.safetensors" \
  "h['optimizer.momentum_buffer.fc2.bias'] = dict(h['optimizer.momentum_buffer.fc.bias'])"
expect 2 "unexpected optimizer entry 'optimizer.momentum_buffer.fc2.bias'" \
  "${tiny[@]}" --resume "$dir/stray.safetensors"
edit "$dir/t.safetensors" "$dir/moved.safetensors" "h['__metadata__']['step'] = '6'"  # epoch 0, batch 3
expect 1 "position epoch 0, batch 3, step 6 is impossible for a run of 8 steps per epoch" \
  "${tiny[@]}" --resume "$dir/moved.safetensors"
edit "$dir/t.safetensors" "$dir/text.safetensors" "h['__metadata__']['step'] = '3x'"
expect 1 "metadata 'step' = '3x' is not a valid number" "${tiny[@]}" --resume "$dir/text.safetensors"
edit "$dir/t.safetensors" "$dir/ahead.safetensors" \
  "h['__metadata__'].update(step='19', epoch='2', batch_in_epoch='3')"
expect 2 "is at step 19, past the 8 steps of this run: raise --epochs" \
  "${tiny[@]}" --resume "$dir/ahead.safetensors"
# --init-from under --auto-resume: a restart continues from --save, not from the weights again.
cp "$dir/t.safetensors" "$dir/restart.safetensors"
"$bin" "${tiny[@]}" --init-from "$dir/weights.safetensors" --auto-resume \
  --save "$dir/restart.safetensors" >"$dir/restart.log" 2>&1 ||
  fail "--init-from with --auto-resume and an existing --save: $(cat "$dir/restart.log")"
grep -q "resumed from $dir/restart.safetensors at epoch 1, step 3 (--auto-resume)" \
  "$dir/restart.log" || fail "the restart did not continue from --save: $(cat "$dir/restart.log")"
expect 2 "--init-from excludes --resume|--resume excludes --init-from" \
  "${tiny[@]}" --resume "$dir/t.safetensors" --init-from "$dir/weights.safetensors"
echo "ok: data, momentum buffers, positions and metadata numbers are checked on resume"
echo PASS
