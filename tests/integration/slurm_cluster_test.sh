#!/usr/bin/env bash
# CTest's run of slurm_cluster.sh: the whole check, then a run stopped by SIGTERM while its first
# job step runs, after which no namespace, daemon or job process of it may be left. (SIGTERM: a
# background job of a script ignores SIGINT, and that cannot be trapped; SIGINT from a
# terminal takes the same path.) Skipped (77)
# where slurm_cluster.sh is, with its reason.
#   slurm_cluster_test.sh REPO BUILD_DIR
set -uo pipefail
here=$(dirname "$0")
fail() { echo "FAIL: $*"; exit 1; }
bash "$here/slurm_cluster.sh" "$1" "$2"
rc=$?
((rc == 0)) || exit "$rc"

log=$(mktemp)
trap 'rm -f "$log"' EXIT
bash "$here/slurm_cluster.sh" "$1" "$2" >"$log" 2>&1 &
pid=$!
for _ in $(seq 120); do grep -q "^ok: slurmctld" "$log" && break; sleep 0.5; done
grep -q "^ok: slurmctld" "$log" || { cat "$log"; fail "the stopped run's cluster did not come up"; }
sleep 2
kill -TERM "$pid"
for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
kill -0 "$pid" 2>/dev/null && fail "slurm_cluster.sh still running 20 s after SIGTERM"
prefix=rgslurm$((pid % 10000))
left=$(ip netns list | grep -c "^$prefix")
((left == 0)) || fail "a stopped run left namespaces: $(ip netns list | grep "^$prefix")"
ls -d /tmp/"$prefix".* 2>/dev/null && fail "a stopped run left its folder"
pgrep -f "SLURM_CONF=/tmp/$prefix|/tmp/$prefix" >/dev/null && fail "a stopped run left processes"
echo "ok: a stopped run cleaned up"
