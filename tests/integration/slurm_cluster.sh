#!/usr/bin/env bash
# Slurm for real: Debian's slurm-wlm on this machine as a 2-node cluster. Each node is a network
# namespace on a bridge (its own address, as bench/cluster_sim.sh makes hosts) running a slurmd,
# in a mount namespace of its own where /etc/hosts names the nodes;
# node 0 also runs slurmctld, and is where jobs are submitted from; one munged, on a private
# socket and key, authenticates them all. Then, from node 0:
#   1. srun -N 2 --ntasks-per-node 2 ringgrad-train (workers from SLURM_PROCID/NTASKS/LOCALID);
#   2. srun -N 2 --ntasks-per-node 2 all_reduce_perf, checked, its ranks on both nodes over TCP;
#   3. the sbatch script of docs/launcher.md (the block marked `sh sbatch`), as written: one
#      ringgrad-run per node, started by srun.
# With --torch PYTHON (an environment with the ringgrad_torch package), instead: the PyTorch DDP
# tutorial on the "ringgrad" backend, one ringgrad-run per node under srun, 4 ranks in all.
# Everything runs under `timeout`; the daemons, the job processes, the namespaces and the files
# are removed on exit, also when interrupted. Skipped (77), saying why, without root, `ip netns`
# or the Debian packages (slurmctld slurmd slurm-client munge; scripts/test.sh installs them).
#   slurm_cluster.sh REPO BUILD_DIR [--torch PYTHON]
set -uo pipefail
repo=$(cd "$1" && pwd) build=$(cd "$2" && pwd)
torch_python=""
[[ ${3:-} == --torch ]] && torch_python=${4:?--torch needs a Python}
fail() {  # with the daemons' last words
  echo "FAIL: $*"
  [[ -d ${work:-} ]] && tail -n 15 "$work"/*.out 2>/dev/null
  exit 1
}
skip() { echo "SKIPPED: $*"; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "starting slurmctld, slurmd and network namespaces needs root"
for tool in ip nsenter unshare slurmctld slurmd srun sbatch scontrol sinfo munged; do
  command -v "$tool" >/dev/null ||
    skip "$tool not found (Debian: slurmctld slurmd slurm-client munge iproute2)"
done
if [[ -n $torch_python && ! -x $torch_python ]]; then
  skip "no $torch_python: the torch_plugin_pip_install test makes it"
fi

id=$(($$ % 10000))
prefix=rgslurm$id
nodes=("${prefix}n0" "${prefix}n1")
addr=(10.81.0.1 10.81.0.2)
sw=${prefix}sw
work=$(mktemp -d "/tmp/$prefix.XXXXXX")
namespaces=()
daemons=()  # munged, and the subshells that start slurmctld and slurmd in the nodes
cleanup() {
  # Everything started in a node (slurmctld, slurmd, job steps and their tasks) goes with it.
  for ns in "${namespaces[@]}"; do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
  done
  for pid in "${daemons[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${daemons[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  done
  for ns in "${namespaces[@]}"; do ip netns del "$ns" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# Runs a command on node I: in its network namespace, with $work/hosts as /etc/hosts (a private
# mount; nsenter rather than `ip netns exec`, which would also hide the cgroup mounts slurmd
# needs behind a fresh /sys).
on_node() {
  local ns=${nodes[$1]}; shift
  nsenter --net="/run/netns/$ns" unshare --mount --propagation private \
    sh -c 'mount --bind "$0" /etc/hosts && conf=$1 && shift && exec env SLURM_CONF="$conf" "$@"' \
    "$work/hosts" "$work/slurm.conf" "$@"
}
on_node0() { on_node 0 "$@"; }
# Runs a command in the background, its output into FILE, and waits for it: bash runs a trap
# only between foreground commands, so waiting is what lets an interrupt clean up at once.
run_into() {
  local file=$1; shift
  "$@" >"$file" 2>&1 &
  wait $!
}

# ---- the two nodes: network namespaces on a bridge ----
source "$repo/scripts/netns_host.sh"
ip netns add "$sw" || skip "'ip netns add' failed"
namespaces+=("$sw")
ip -n "$sw" link add br0 type bridge && ip -n "$sw" link set br0 up
for i in 0 1; do
  ns=${nodes[$i]}
  ip netns add "$ns" && namespaces+=("$ns")
  add_netns_host "$ns" "$sw" "${prefix}h$i" "${prefix}s$i" "${addr[$i]}/24"
done
# The machine's own name is node 0's, where slurmctld and srun run (srun tells the tasks where
# to reach it by that name).
printf '127.0.0.1 localhost\n%s %s %s\n%s %s\n' "${addr[0]}" "${nodes[0]}" "$(hostname)" \
  "${addr[1]}" "${nodes[1]}" >"$work/hosts"

# ---- munge and slurm, configured in $work ----
mkdir -p "$work/munge" "$work/state" "$work/spool" && chmod 755 "$work" "$work/munge"
head -c 1024 /dev/urandom >"$work/munge/munge.key" && chmod 400 "$work/munge/munge.key"
munged --foreground --force --socket="$work/munge/socket" --key-file="$work/munge/munge.key" \
  --pid-file="$work/munge/pid" --log-file="$work/munge/log" --seed-file="$work/munge/seed" \
  >"$work/munged.out" 2>&1 &
daemons+=($!)
port=$((20000 + RANDOM % 20000))
# Each node offers the scheduler 4 CPUs whatever this machine has (config_overrides; nothing is
# bound, TaskPlugin=task/none): enough for 2 tasks of 2 CPUs, as the docs' script asks.
cpus=4
cat >"$work/slurm.conf" <<EOF
ClusterName=$prefix
SlurmctldHost=$(hostname)(${addr[0]})
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
AuthInfo=socket=$work/munge/socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool/%n
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.%n.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SlurmdParameters=config_overrides
# A test machine may be busy: Slurm's 10 s for a message and 2 s for a connection are too short.
MessageTimeout=60
TCPTimeout=10
NodeName=${nodes[0]} NodeAddr=${addr[0]} CPUs=$cpus Sockets=1 CoresPerSocket=$cpus ThreadsPerCore=1 State=UNKNOWN
NodeName=${nodes[1]} NodeAddr=${addr[1]} CPUs=$cpus Sockets=1 CoresPerSocket=$cpus ThreadsPerCore=1 State=UNKNOWN
PartitionName=test Nodes=${nodes[0]},${nodes[1]} Default=YES MaxTime=30 State=UP
EOF
for _ in $(seq 50); do [[ -S $work/munge/socket ]] && break; sleep 0.1; done
[[ -S $work/munge/socket ]] || fail "munged did not start"
on_node0 slurmctld -D -i -f "$work/slurm.conf" >"$work/slurmctld.out" 2>&1 &
daemons+=($!)
for i in 0 1; do
  mkdir -p "$work/spool/${nodes[$i]}"
  on_node $i slurmd -D -N "${nodes[$i]}" -f "$work/slurm.conf" >"$work/slurmd.$i.out" 2>&1 &
  daemons+=($!)
done
idle=0
for _ in $(seq 120); do  # up to 30 s for both nodes to register and go idle
  idle=$(on_node0 timeout -k 2 5 sinfo -h -N -o '%N %T' 2>/dev/null | grep -c ' idle$')
  ((idle == 2)) && break
  sleep 0.25
done
if ((idle != 2)); then
  on_node0 timeout -k 2 5 sinfo -N 2>&1
  fail "the 2 nodes did not come up idle within 30 s"
fi
echo "ok: slurmctld and 2 slurmd up: ${nodes[*]}"

# Runs a job step or batch job from node 0, in a folder with build/ linked as the docs expect.
jobdir=$work/job
mkdir -p "$jobdir" && ln -s "$build" "$jobdir/build"
cd "$jobdir" || fail "cannot enter $jobdir"
export RINGGRAD_LOG=warn OMP_NUM_THREADS=1
if [[ -n $torch_python ]]; then
  # ---- the PyTorch backend: the DDP tutorial, one ringgrad-run per node under srun ----
  run_into tutorial.out on_node0 env PATH="$(dirname "$torch_python"):$PATH" timeout -k 10 180 \
    srun -N 2 --ntasks-per-node 1 --cpus-per-task 2 build/bin/ringgrad-run --nnodes 2 \
    --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint "${nodes[0]}:29401" \
    --rdzv-id tutorial "$repo/tests/torch_plugin/ddp_tutorial.py"
  rc=$?
  cat tutorial.out
  ((rc == 0)) || fail "the DDP tutorial under srun exited $rc"
  (($(grep -c "Finished running basic DDP example on rank" tutorial.out) == 4)) ||
    fail "not all 4 ranks finished the tutorial"
  echo "ok: PyTorch DDP on the ringgrad backend, 2 nodes x 2 ranks under srun"
  exit 0
fi

# ---- 1. srun starts the trainer's 4 ranks itself ----
run_into train.out on_node0 env MASTER_ADDR="${addr[0]}" MASTER_PORT=29500 timeout -k 10 120 \
  srun -N 2 --ntasks-per-node 2 build/bin/ringgrad-train --synthetic --model resnet8 \
  --batch-size 8 --max-steps 3 --no-eval --threads 1
rc=$?
cat train.out
((rc == 0)) || fail "srun ringgrad-train exited $rc"
grep -q "4 processes" train.out || fail "ringgrad-train did not run as 4 processes"
echo "ok: srun -N 2 --ntasks-per-node 2 ringgrad-train"

# ---- 2. all_reduce_perf over both nodes ----
run_into perf.out on_node0 env MASTER_ADDR="${addr[0]}" MASTER_PORT=29501 timeout -k 10 120 \
  srun -N 2 --ntasks-per-node 2 build/bin/all_reduce_perf -b 8 -e 1M -f 32 -n 2
rc=$?
cat perf.out
((rc == 0)) || fail "srun all_reduce_perf exited $rc"
grep -q "# Out of bounds values : 0 OK" perf.out || fail "all_reduce_perf's results were wrong"
grep -qE "#  Rank  0 .*tcp to 2,3" perf.out || fail "rank 0 did not reach node 1's ranks over TCP"
echo "ok: srun -N 2 --ntasks-per-node 2 all_reduce_perf"

# ---- 3. docs/launcher.md's sbatch script, as written ----
awk '/^```sh sbatch[[:space:]]*$/ { inblock = 1; next } /^```/ { inblock = 0 } inblock' \
  "$repo/docs/launcher.md" >job.sbatch
[[ -s job.sbatch ]] || fail "docs/launcher.md has no \`\`\`sh sbatch block"
run_into sbatch.out on_node0 timeout -k 10 180 sbatch --wait job.sbatch
rc=$?
cat sbatch.out
job=$(head -n 1 sbatch.out | grep -oE '[0-9]+$')
cat ringgrad-"$job".out 2>/dev/null
((rc == 0)) || fail "the sbatch script of docs/launcher.md exited $rc"
grep -q "4 processes x batch" ringgrad-"$job".out || fail "the batch job's trainer did not run as 4 processes"
echo "ok: sbatch docs/launcher.md's script: 2 nodes x 2 workers"
