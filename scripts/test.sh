#!/usr/bin/env bash
# Quick-start command 2: install what is missing, build, and run the whole test suite (CTest).
# Tests that need a GPU, real MNIST or root skip themselves and say why. PyTorch (Debian's
# 1.13, for the drop-in-launcher and weights-interchange tests), Open MPI (mpirun), Slurm and
# munge (a 2-node Slurm in network namespaces) and clang-format (the layout check) are installed
# too, so those tests run rather than skip, and so
# is PyPI's torch 2.x, into a virtual environment in the build folder, for the ringgrad_torch
# backend's tests (scripts/install_torch.sh; SKIP_TORCH=1 leaves it out, and those tests skip).
#   SANITIZE=address,undefined or SANITIZE=thread: build into build-asan-ubsan/ or build-tsan/
#   (CUDA off) and run the tests under that sanitizer, workers included (scripts/sanitizer_env.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -n ${SANITIZE:-} ]]; then
  case $SANITIZE in
    address,undefined) export BUILD_DIR=build-asan-ubsan ;;
    thread) export BUILD_DIR=build-tsan ;;
    *) echo "test.sh: SANITIZE=$SANITIZE is not supported; use address,undefined or thread" >&2
       exit 2 ;;
  esac
  # The benchmarks are not tests: skip building them.
  export BUILD_TYPE=RelWithDebInfo CMAKE_ARGS="${CMAKE_ARGS:-} -DRINGGRAD_SANITIZE=$SANITIZE \
    -DRINGGRAD_ENABLE_CUDA=OFF -DRINGGRAD_BUILD_BENCH=OFF"
  source scripts/sanitizer_env.sh
fi
bash scripts/install_packages.sh python3-torch python3-torchvision python3-venv openmpi-bin \
  clang-format slurmctld slurmd slurm-client munge
# The PyTorch backend is not built under the sanitizers: the Python running it is not instrumented.
if [[ -z ${SANITIZE:-} && -z ${SKIP_TORCH:-} ]]; then
  torch_python=$(bash scripts/install_torch.sh "$(realpath -m "${BUILD_DIR:-build}")/torch-venv")
  [[ -z $torch_python ]] || export CMAKE_ARGS="${CMAKE_ARGS:-} -DRINGGRAD_PYTHON=$torch_python"
fi
bash scripts/build.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure --timeout 900 -j "${JOBS:-$(nproc)}" "$@"
