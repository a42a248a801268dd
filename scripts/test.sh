#!/usr/bin/env bash
# Quick-start command 2: install what is missing, build, and run the whole test suite (CTest).
# Tests that need a GPU, real MNIST or root skip themselves and say why.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
cd build
ctest --output-on-failure --timeout 900 -j "${JOBS:-$(nproc)}" "$@"
