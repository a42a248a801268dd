#!/usr/bin/env bash
# bench/bench_env.sh's rounds and median: the compare scripts print the median of ROUNDS runs.
set -euo pipefail
source bench/bench_env.sh
fail() { echo "FAIL: $*" >&2; exit 1; }
expect() {  # WHAT GOT WANT
  [[ $2 == "$3" ]] || fail "$1: got '$2', want '$3'"
}
expect "median of one" "$(median "612.4 ")" 612.4
expect "median of three, unsorted" "$(median "900.5 512.0 1100 ")" 900.5
expect "median of two: their mean" "$(median "500 600 ")" 550.0
expect "median of four, sorted as numbers not text" "$(median "1000 90 800 95 ")" 447.5
expect "rounds by default" "$(ROUNDS= rounds)" 1
expect "rounds from ROUNDS" "$(ROUNDS=3 rounds)" 3
for bad in 0 -1 x 2.5; do
  if err=$(ROUNDS=$bad rounds 2>&1); then fail "ROUNDS=$bad accepted"; fi
  [[ $err == *"ROUNDS must be a positive integer"* ]] || fail "ROUNDS=$bad: message '$err'"
done
echo "bench_env: median and rounds as expected"
