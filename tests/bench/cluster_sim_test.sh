#!/usr/bin/env bash
# bench/cluster_sim.sh in its small form: 3 namespaces as hosts, 2 ranks each, links limited to
# 1 Gbit/s, the ring and the hierarchical all-reduce up to 256 KiB. Every run must finish with
# checked results and print a row per size; no namespace may be left behind, also when the
# script is interrupted mid-run. Skips (77) without root or `ip netns`, saying why.
set -uo pipefail
fail() { echo "FAIL: $*"; exit 1; }
leftovers() { ip netns list 2>/dev/null | grep -c "^rgsim" || true; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

log=$(timeout 300 bash bench/cluster_sim.sh --hosts 3 --ranks-per-host 2 --sizes "8 256K" \
  --iters 2 --algos "ring hierarchical" --out "$out" 2>&1)
rc=$?
if ((rc == 77)); then echo "$log" | grep SKIPPED; exit 77; fi
echo "$log"
((rc == 0)) || fail "cluster_sim.sh exited $rc"
for algo in ring hierarchical; do
  rows=$(grep -c "^3 2 $algo " <<<"$log")
  ((rows == 8)) || fail "$algo: $rows result rows, expected 8 (8 B to 128 KiB by 4x)"
done
grep -q "failed" <<<"$log" && fail "a run failed"
(($(leftovers) == 0)) || fail "namespaces left behind: $(ip netns list | grep ^rgsim)"

# Interrupted while the ranks run: the trap still removes every namespace.
timeout 300 bash bench/cluster_sim.sh --hosts 3 --sizes "64M 64M" --iters 50 --algos ring \
  --out "$out" >/dev/null 2>&1 &
pid=$!
sleep 8
kill -INT "$pid"
wait "$pid"
sleep 1
(($(leftovers) == 0)) || fail "an interrupted run left namespaces: $(ip netns list | grep ^rgsim)"
echo "ok: interrupted run cleaned up"
