#!/usr/bin/env bash
# Trains one epoch with ringgrad-train's defaults (plus the given extra flags) on a dataset and
# requires a test accuracy of at least THRESHOLD. Skips (exit 77, CTest SKIP_RETURN_CODE)
# when the dataset's files are absent.
#   train_accuracy.sh "COMMAND" DATA_DIR THRESHOLD [FLAGS...]  (COMMAND: the trainer, maybe
#   behind a launcher; split on spaces)
set -euo pipefail
bin=$1 data=$2 threshold=$3
shift 3
if [[ ! -f $data/train-images-idx3-ubyte.gz && ! -f $data/train-images-idx3-ubyte ]]; then
  echo "SKIPPED: no MNIST-format files in $data"
  exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
$bin --data "$data" --epochs 1 --log-json "$dir/log.jsonl" --log-every 100 "$@"
acc=$(grep '"type":"epoch"' "$dir/log.jsonl" | tail -1 | sed -E 's/.*"test_accuracy":([0-9.e-]+).*/\1/')
echo "test accuracy after 1 epoch on $data: $acc (required: $threshold)"
awk -v a="$acc" -v t="$threshold" 'BEGIN { exit !(a >= t) }' || { echo "FAIL: below $threshold"; exit 1; }
echo "PASS"
