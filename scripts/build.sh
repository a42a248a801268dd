#!/usr/bin/env bash
# Installs the Debian packages ringgrad needs (when run as root and they are missing) and builds
# it with CMake into build/ (Release by default). Used by demo.sh and test.sh; safe to rerun.
#   BUILD_TYPE=Debug|Release   CMAKE_ARGS="..." extra configure flags   JOBS=N
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake libasio-dev doctest-dev libopenblas-dev zlib1g-dev libcli11-dev
          nlohmann-json3-dev libbenchmark-dev dataset-fashion-mnist iproute2 gnuplot-nox)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]]; then
    echo "ringgrad: installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q "${missing[@]}" >/dev/null
  else
    echo "ringgrad: missing Debian packages (run as root to install): ${missing[*]}" >&2
    exit 1
  fi
fi

build_type=${BUILD_TYPE:-Release}
jobs=${JOBS:-$(nproc)}
cmake -S . -B build -DCMAKE_BUILD_TYPE="$build_type" ${CMAKE_ARGS:-} >/dev/null
cmake --build build -j "$jobs"
