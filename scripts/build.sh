#!/usr/bin/env bash
# Installs the Debian packages ringgrad needs (when run as root and they are missing) and builds
# it with CMake into build/ (Release by default). Used by demo.sh and test.sh; safe to rerun.
#   BUILD_TYPE=Debug|Release   CMAKE_ARGS="..." extra configure flags   JOBS=N   BUILD_DIR=build
#   BUILD_TARGETS="a b": build only these targets (and what they need)
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install_packages.sh build-essential cmake libasio-dev doctest-dev libopenblas-dev \
  zlib1g-dev libcli11-dev nlohmann-json3-dev libbenchmark-dev dataset-fashion-mnist iproute2 gnuplot-nox

build_type=${BUILD_TYPE:-Release}
jobs=${JOBS:-$(nproc)}
build_dir=${BUILD_DIR:-build}
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE="$build_type" ${CMAKE_ARGS:-} >/dev/null
cmake --build "$build_dir" -j "$jobs" ${BUILD_TARGETS:+--target $BUILD_TARGETS}
