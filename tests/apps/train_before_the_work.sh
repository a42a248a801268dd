#!/usr/bin/env bash
# What ringgrad-train used to find only after the work, or never, it now finds before the first
# step (exit 2, one line), or says: a --save or --log-json that is a device or a FIFO (/dev/null
# was replaced by a file; a FIFO blocked), --checkpoint-every without --save, an empty training
# set (an internal assertion before), a checkpoint with inf, a negative BatchNorm running
# variance (trained on, then scored 0%) or an unknown format, a resume at --max-steps (trained
# a step past it), a warm-up longer than the run (a warning); with root, a --save whose disk is
# too full (trained, then failed with ENOSPC) and a --log-json that stops taking records
# (dropped them, exit 0). A resumed run adds to its --log-json instead of truncating it.
set -uo pipefail
bin=$1
dir=$(mktemp -d)
trap 'umount "$dir/small" 2>/dev/null; rm -rf "$dir"' EXIT
source "$(dirname "$0")/expect.sh"
tiny=(--synthetic --model resnet8 --batch-size 8 --no-eval)

expect 2 "--save /dev/null is a character device, not a regular file" "${tiny[@]}" --save /dev/null
[[ -c /dev/null ]] || fail "/dev/null is no longer a character device"
expect 2 "--log-json /dev/full is a character device" "${tiny[@]}" --log-json /dev/full
mkfifo "$dir/fifo"
expect 2 "--log-json $dir/fifo is a FIFO \(named pipe\), not a regular file" "${tiny[@]}" \
  --log-json "$dir/fifo"
expect 2 "--checkpoint-every 5 writes checkpoints to --save, and there is none" "${tiny[@]}" \
  --checkpoint-every 5
python3 - "$dir/empty" <<'PY' || fail "could not write an empty data set"
import os, struct, sys
os.makedirs(sys.argv[1])
for split in ("train", "t10k"):
    open(f"{sys.argv[1]}/{split}-images-idx3-ubyte", "wb").write(struct.pack(">IIII", 2051, 0, 28, 28))
    open(f"{sys.argv[1]}/{split}-labels-idx1-ubyte", "wb").write(struct.pack(">II", 2049, 0))
PY
expect 2 "the training set in $dir/empty holds no images" --data "$dir/empty" --model resnet8
out=$("$bin" "${tiny[@]}" --max-steps 2 --warmup-steps 10 --lr-schedule cosine 2>&1) ||
  fail "a long warm-up: $out"
grep -q "warmup-steps 10 is longer than the run (2 steps)" <<<"$out" || fail "no warning: $out"
echo "ok: a warm-up longer than the run is a warning"

# Checkpoints: values no run writes, an unknown format, a resume at --max-steps.
"$bin" "${tiny[@]}" --max-steps 2 --save "$dir/ck.safetensors" --log-json "$dir/log.jsonl" \
  --log-every 1 >/dev/null 2>&1 || fail "could not write a checkpoint"
edit "$dir/ck.safetensors" "$dir/inf.safetensors" \
  "t['fc.weight'][0:4] = struct.pack('<f', float('inf'))"
expect 2 "'fc.weight' holds 1 NaN or inf values" "${tiny[@]}" --resume "$dir/inf.safetensors"
edit "$dir/ck.safetensors" "$dir/var.safetensors" \
  "t['bn1.running_var'][0:4] = struct.pack('<f', -0.5)"
expect 2 "'bn1.running_var' holds 1 negative values \(the first -0.5\)" "${tiny[@]}" \
  --resume "$dir/var.safetensors"
expect 2 "'bn1.running_var' holds 1 negative values" "${tiny[@]}" --init-from "$dir/var.safetensors"
edit "$dir/ck.safetensors" "$dir/format.safetensors" "h['__metadata__']['format'] = 'future-9'"
expect 2 "has format 'future-9', not 'ringgrad-checkpoint-1'" "${tiny[@]}" \
  --resume "$dir/format.safetensors"
cp "$dir/ck.safetensors" "$dir/before.safetensors"
out=$("$bin" "${tiny[@]}" --max-steps 2 --resume "$dir/ck.safetensors" --save "$dir/ck.safetensors" 2>&1) ||
  fail "resume at --max-steps: $out"
grep -q "at or past --max-steps 2: nothing left to train" <<<"$out" || fail "no notice: $out"
cmp -s "$dir/ck.safetensors" "$dir/before.safetensors" || fail "a step was trained past --max-steps"
echo "ok: a resume at --max-steps trains nothing"
"$bin" "${tiny[@]}" --max-steps 4 --resume "$dir/ck.safetensors" --log-json "$dir/log.jsonl" \
  --log-every 1 >/dev/null 2>&1 || fail "could not resume"
steps=$(grep -o '"step":[0-9]*' "$dir/log.jsonl" | grep -c .)
grep -q '"step":1[,}]' "$dir/log.jsonl" && grep -q '"step":4[,}]' "$dir/log.jsonl" ||
  fail "the resumed run did not add to its --log-json: $(cat "$dir/log.jsonl")"
echo "ok: a resumed run adds to --log-json ($steps records)"

# A small file system: a checkpoint that cannot fit, and a log that stops taking records.
if ((EUID == 0)) && mkdir "$dir/small" && mount -t tmpfs -o size=256k tmpfs "$dir/small"; then
  expect 2 "--save $dir/small/ck.safetensors: the file system of $dir/small has [0-9.]+ KiB free, and the file needs about" \
    "${tiny[@]}" --save "$dir/small/ck.safetensors"
  head -c 250k /dev/zero >"$dir/small/filler" 2>/dev/null
  dd if=/dev/zero of="$dir/small/rest" bs=1k 2>/dev/null
  expect 1 "cannot write to --log-json file $dir/small/log.jsonl: No space left on device" \
    "${tiny[@]}" --max-steps 2 --log-every 1 --log-json "$dir/small/log.jsonl"
else
  echo "note: not root (or no tmpfs), so the full-disk cases are not tried"
fi
echo PASS
