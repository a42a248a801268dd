#!/usr/bin/env bash
# Convolution forward+backward times, ours (conv_bench) against PyTorch's CPU convolutions
# (oneDNN, the faster of NCHW and channels_last) at batch 64 and 2 threads, for every distinct
# resnet20/resnet18 conv shape, interleaved shape by shape (see conv_compare_torch.py); prints
# ours/PyTorch per shape and summed per network, and both sides' GFLOP/s against the cores'
# measured f32 FMA peak.
#   [PYTHON=...] bash bench/compare_conv.sh [BUILD_DIR (default build)] [ROUNDS (default 3)] [THREADS (default 2)]
# PYTHON: as bench_env.sh says (default: PyTorch 2.x in BUILD_DIR/torch-venv, else Debian's 1.13).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-3}
threads=${3:-2}
source bench/bench_env.sh
python=${PYTHON:-$(BUILD_DIR=$build default_python)}
bench=$build/bin/conv_bench
if [[ ! -x $bench ]]; then
  echo "compare_conv: $bench not found; build it with: cmake --build $build --target conv_bench" >&2
  exit 1
fi
if ! "$python" -c "import torch" 2>/dev/null; then
  echo "compare_conv: $python has no PyTorch (bash scripts/install_torch.sh $build/torch-venv, or apt-get install python3-torch, or PYTHON=<a Python with torch>)" >&2
  exit 1
fi
cpu_header
echo "PyTorch $("$python" -c 'import torch; print(torch.__version__)') from $python"
OMP_NUM_THREADS=$threads "$python" bench/conv_compare_torch.py "$bench" --rounds "$rounds" \
  --threads "$threads"
