#!/usr/bin/env bash
# One bounded libFuzzer run for CTest: FUZZER for SECONDS, starting from the inputs in SEEDS
# (tests/fuzz/corpus/<target>, read only) and writing what it finds new to WORK (in the build
# folder). A crash, a sanitizer report, a timeout of one input (10 s) or running out of memory
# (2 GiB) fails the test, and libFuzzer says which input (saved as WORK/../crash-*) did it.
# The random seed is fixed (RINGGRAD_FUZZ_SEED, default 1) so that a CI run explores the same
# inputs as the run that checked it; give another seed, or 0 for a fresh one, to explore.
#   run_fuzzer.sh FUZZER SECONDS SEEDS WORK
set -euo pipefail
fuzzer=$1 seconds=$2 seeds=$3 work=$4
mkdir -p "$work"
cd "$(dirname "$work")"
exec "$fuzzer" -max_total_time="$seconds" -seed="${RINGGRAD_FUZZ_SEED:-1}" -timeout=10 \
  -rss_limit_mb=2048 -print_final_stats=1 \
  "$work" "$seeds"
