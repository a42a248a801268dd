#!/usr/bin/env bash
# Convolution forward+backward times, ours (conv_bench) against PyTorch 1.13 CPU (oneDNN) at
# batch 64 and 2 threads, for every distinct resnet20/resnet18 conv shape, interleaved shape by
# shape (see conv_compare_torch.py); prints ours/PyTorch per shape and summed per network.
#   bash bench/compare_conv.sh [BUILD_DIR (default build)] [ROUNDS (default 3)] [THREADS (default 2)]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-3}
threads=${3:-2}
bench=$build/bin/conv_bench
if [[ ! -x $bench ]]; then
  echo "compare_conv: $bench not found; build it with: cmake --build $build --target conv_bench" >&2
  exit 1
fi
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "compare_conv: /usr/bin/python3 has no PyTorch (apt-get install python3-torch)" >&2
  exit 1
fi
OMP_NUM_THREADS=$threads /usr/bin/python3 bench/conv_compare_torch.py "$bench" --rounds "$rounds" \
  --threads "$threads"
