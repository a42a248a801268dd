#!/usr/bin/env bash
# Convolution forward+backward times, ours (conv_bench) against PyTorch 1.13 CPU (oneDNN) at
# batch 64 and 2 threads, for every distinct resnet20/resnet18 conv shape. Both run in
# interleaved rounds (the machine is shared, so each side keeps its fastest round); prints the
# ours/PyTorch ratio per shape and the summed time per network.
#   bash bench/compare_conv.sh [BUILD_DIR (default build)] [ROUNDS (default 3)]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-3}
bench=$build/bin/conv_bench
if [[ ! -x $bench ]]; then
  echo "compare_conv: $bench not found; build it with: cmake --build $build --target conv_bench" >&2
  exit 1
fi
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "compare_conv: /usr/bin/python3 has no PyTorch (apt-get install python3-torch)" >&2
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bench" --list-shapes >"$tmp/shapes.tsv"
for round in $(seq "$rounds"); do
  "$bench" --benchmark_format=json --benchmark_repetitions=3 --benchmark_min_time=0.2 \
    >"$tmp/ours$round.json"
  OMP_NUM_THREADS=2 /usr/bin/python3 bench/conv_compare_torch.py time "$tmp/shapes.tsv" \
    "$tmp/torch$round.json"
done
/usr/bin/python3 bench/conv_compare_torch.py report "$tmp/shapes.tsv" "$tmp"/ours*.json "$tmp"/torch*.json
