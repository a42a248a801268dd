#!/usr/bin/env bash
# Quick-start command 2: install what is missing, build, and run the whole test suite (CTest).
# Tests that need a GPU, real MNIST or root skip themselves and say why. PyTorch (Debian's
# 1.13, for the drop-in-launcher and weights-interchange tests) and Open MPI (mpirun) are
# installed too, so those tests run rather than skip.
set -euo pipefail
cd "$(dirname "$0")/.."
# SANITIZE=address,undefined or SANITIZE=thread builds into build-<sanitizers>/ (CUDA off) and
# runs the suite under that sanitizer, e.g. SANITIZE=thread bash scripts/test.sh -L multirank.
bash scripts/install_packages.sh python3-torch python3-torchvision openmpi-bin
if [[ -n ${SANITIZE:-} ]]; then
  export BUILD_DIR=build-${SANITIZE//,/-} BUILD_TYPE=RelWithDebInfo
  export CMAKE_ARGS="${CMAKE_ARGS:-} -DRINGGRAD_SANITIZE=$SANITIZE -DRINGGRAD_ENABLE_CUDA=OFF"
  source scripts/sanitizer_env.sh
fi
bash scripts/build.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure --timeout 900 -j "${JOBS:-$(nproc)}" "$@"
