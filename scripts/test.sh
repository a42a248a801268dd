#!/usr/bin/env bash
# Quick-start command 2: install what is missing, build, and run the whole test suite (CTest).
# Tests that need a GPU, real MNIST or root skip themselves and say why. PyTorch (Debian's
# 1.13, for the drop-in-launcher and weights-interchange tests) and Open MPI (mpirun) are
# installed too, so those tests run rather than skip.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_packages.sh python3-torch python3-torchvision openmpi-bin
bash scripts/build.sh
cd build
ctest --output-on-failure --timeout 900 -j "${JOBS:-$(nproc)}" "$@"
