#!/usr/bin/env bash
# ringgrad-train --resume continues exactly: the per-step losses after resuming equal those of
# an uninterrupted run with the same seed, bit for bit (CPU, fixed thread count). Arguments
# after the binary are passed to every run (e.g. --amp fp16: the loss scale must resume too).
set -euo pipefail
bin=$1
shift
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
common=(--synthetic --model resnet8 --batch-size 16 --threads 2 --seed 7 --log-every 1 --no-eval "$@")
"$bin" "${common[@]}" --max-steps 8 --log-json "$dir/full.jsonl" >/dev/null
"$bin" "${common[@]}" --max-steps 4 --save "$dir/ckpt.safetensors" >/dev/null
"$bin" "${common[@]}" --max-steps 8 --resume "$dir/ckpt.safetensors" --log-json "$dir/resumed.jsonl" >/dev/null
# "step loss [loss_scale]": fp16 runs log the scale of every step as well.
losses() {
  grep '"type":"step"' "$1" |
    sed -E 's/.*"loss":([^,}]*)(.*"loss_scale":([^,}]*))?.*"step":([0-9]+).*/\4 \1 \3/'
}
full=$(losses "$dir/full.jsonl" | awk '$1 > 4')
resumed=$(losses "$dir/resumed.jsonl")
echo "uninterrupted steps 5-8:"; echo "$full"
echo "resumed steps 5-8:"; echo "$resumed"
[[ $(wc -l <<<"$resumed") -eq 4 ]] || { echo "FAIL: expected 4 resumed steps"; exit 1; }
[[ "$full" == "$resumed" ]] || { echo "FAIL: resumed losses differ from the uninterrupted run"; exit 1; }
echo "PASS"
