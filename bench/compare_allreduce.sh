#!/usr/bin/env bash
# Side-by-side all-reduce on loopback, each with 2 and 4 ranks, 8 B to 128 MiB (float sum):
#   ours      all_reduce_perf (ring backend, CPU), as it runs by default: ranks on one host move
#             their bytes through shared memory (comm/transport/shm/); out of place, and in
#             place (ours-ip)
#   ours-unix the same with RINGGRAD_TRANSPORT=unix: a unix socket between every pair
#   ours-tcp  the same with RINGGRAD_TRANSPORT=tcp: TCP between every pair, as the others below
#   gloo      PyTorch's Gloo (/usr/bin/python3), TCP; torch.distributed.all_reduce is in place
#   mpi-tcp   Open MPI's MPI_Allreduce with --mca btl tcp,self, out of place
#   mpi-sm    Open MPI's MPI_Allreduce with its default same-host transport (shared memory)
# and prints busbw side by side, our/their ratios (each against our call of the same kind: in
# place against Gloo, out of place against MPI and iperf3), and iperf3's single-stream loopback
# throughput as the TCP link limit (also with both directions at once, --bidir), and one core's
# memcpy rate (numpy, 128 MiB) as the memory limit of a copy; then scripts/plot.sh draws busbw
# against size, one PNG per world size, into PLOT_DIR (BUILD_DIR/plots).
# Usage: bench/compare_allreduce.sh [BUILD_DIR=build] [MAX_BYTES=134217728]
# RT=10 runs every column's ranks under chrt -f 10 (ahead of other work on a shared machine)
# where they do not outnumber the cores; with more ranks than cores they stay at normal priority,
# since real-time ranks that spin (Gloo's, MPI's) would starve the ranks they wait for.
# Our large buffers are on transparent huge pages by default (core/cpu_allocator.cpp); the
# environment's GLIBC_TUNABLES=glibc.malloc.hugetlb=1 puts the other columns' there too.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
MAX=${2:-134217728}
MIN=8 FACTOR=16 ITERS=${ITERS:-10} WARMUP=${WARMUP:-3}
PLOT_DIR=${PLOT_DIR:-$BUILD/plots}
# What the other columns run on: iperf3, Open MPI, and Debian's PyTorch (Gloo) with numpy.
bash scripts/install_packages.sh iperf3 openmpi-bin libopenmpi-dev python3-torch python3-numpy
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
PORT=$((29700 + RANDOM % 200))

echo "# iperf3 single stream on loopback (the TCP link limit)"
iperf3 -s -1 -p $PORT >/dev/null 2>&1 & sleep 0.5
IPERF=$(iperf3 -c 127.0.0.1 -p $PORT -t 3 -J | /usr/bin/python3 -c \
  'import json,sys; print("%.3f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 8e9))')
echo "iperf3: $IPERF GB/s"; PORT=$((PORT + 1))
# Each rank of a ring sends and receives at once; this is TCP's rate when both directions run.
iperf3 -s -1 -p $PORT >/dev/null 2>&1 & sleep 0.5
IPERF_BIDIR=$(iperf3 -c 127.0.0.1 -p $PORT -t 3 --bidir -J | /usr/bin/python3 -c \
  'import json,sys; e = json.load(sys.stdin)["end"]
print("%.3f" % ((e["sum_received"]["bits_per_second"] + e["sum_received_bidir_reverse"]["bits_per_second"]) / 16e9))')
echo "iperf3 --bidir: $IPERF_BIDIR GB/s each way, on average"; PORT=$((PORT + 1))

# Every byte through shared memory is copied twice (into the ring, out of it), by two cores.
MEMCPY=$(/usr/bin/python3 -c 'import numpy as np, time
a = np.ones(32 << 20, np.float32); b = np.empty_like(a); np.copyto(b, a); best = 1e9
for _ in range(5):
    t = time.perf_counter(); np.copyto(b, a); best = min(best, time.perf_counter() - t)
print("%.3f" % (a.nbytes / best / 1e9))')
echo "memcpy: $MEMCPY GB/s (one core, 128 MiB)"

CPU="$(nproc) cores of $(lscpu | sed -n 's/^Model name: *//p' | head -1)"
HAVE_MPI=1
if ! mpicc -O2 -o "$TMP/mpi_allreduce" bench/mpi_allreduce.c 2>"$TMP/mpicc.err"; then
  HAVE_MPI=0; echo "# Open MPI: mpicc failed ($(head -1 "$TMP/mpicc.err")); install libopenmpi-dev"
fi

priority() {  # WORLD -> the command prefix that sets the ranks' scheduling (see RT above)
  if [ -n "${RT:-}" ] && [ "$1" -le "$(nproc)" ]; then echo "chrt -f $RT"; fi
}

# -a 3: the slowest rank's time, which is what the Gloo and Open MPI columns report.
ours() {  # WORLD TRANSPORT -> "size time busbw" lines
  local n=$1 pids=()
  for ((r = 0; r < n; ++r)); do
    RANK=$r WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT RINGGRAD_LOG=warn RINGGRAD_TRANSPORT=$2 \
      $(priority $n) timeout 600 "$BUILD/bin/all_reduce_perf" -b $MIN -e "$MAX" -f $FACTOR -n $ITERS -w $WARMUP -c 1 -a 3 \
      --json "$TMP/ours$r.json" >/dev/null & pids+=($!)
  done
  wait "${pids[@]}"; PORT=$((PORT + 1)); cp "$TMP/ours0.json" "$TMP/ours_$2_world$n.json"
  /usr/bin/python3 -c 'import json,sys
for row in json.load(open(sys.argv[1]))["rows"]:
    print(row["size"], "%.2f %.3f" % (row["out_of_place"]["time_us"], row["out_of_place"]["busbw"]),
          "%.2f %.3f" % (row["in_place"]["time_us"], row["in_place"]["busbw"]))' "$TMP/ours0.json"
}
gloo() {
  local n=$1 pids=()
  for ((r = 0; r < n; ++r)); do
    RANK=$r WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT GLOO_SOCKET_IFNAME=lo \
      $(priority $n) timeout 600 /usr/bin/python3 bench/gloo_allreduce.py $MIN "$MAX" $FACTOR $ITERS $WARMUP \
      >"$TMP/gloo$r.txt" & pids+=($!)
  done
  wait "${pids[@]}"; PORT=$((PORT + 1)); cat "$TMP/gloo0.txt"
}
mpi() {  # WORLD tcp|sm
  [ $HAVE_MPI = 1 ] || return 0
  local btl=(--mca btl tcp,self --mca btl_tcp_if_include lo)
  [ "$2" = sm ] && btl=()
  $(priority $1) timeout 600 mpirun --allow-run-as-root --oversubscribe -np "$1" "${btl[@]}" \
    "$TMP/mpi_allreduce" $MIN "$MAX" $FACTOR $ITERS $WARMUP
}

# "size time_us busbw" lines (Gloo's and MPI's programs) as all_reduce_perf --json, for plot.sh.
as_perf_json() {  # TEXT BACKEND WORLD
  /usr/bin/python3 - "$@" <<'PY'
import json, sys
rows = [{"size": int(l.split()[0]), "out_of_place": {"time_us": float(l.split()[1]), "busbw": float(l.split()[2])}}
        for l in open(sys.argv[1]) if l.strip()]
print(json.dumps({"collective": "all_reduce", "backend": sys.argv[2], "world_size": int(sys.argv[3]), "rows": rows}))
PY
}

mkdir -p "$PLOT_DIR"
for n in 2 4; do
  ours $n auto >"$TMP/o"; ours $n unix >"$TMP/ou"; ours $n tcp >"$TMP/ot"; gloo $n >"$TMP/g"
  mpi $n tcp >"$TMP/m" || true; mpi $n sm >"$TMP/ms" || true
  echo
  echo "# world $n: busbw (GB/s), then time per call (us); ratios: ours / theirs (o = ours,"
  echo "# u = ours-unix, t = ours-tcp; in place against Gloo); TCP link limit: iperf3 $IPERF GB/s one way,"
  echo "# $IPERF_BIDIR GB/s each way with both directions at once; o/memcpy against $MEMCPY GB/s"
  /usr/bin/python3 - "$TMP/o" "$TMP/ot" "$TMP/g" "$TMP/m" "$TMP/ms" "$IPERF" "$TMP/ou" "$MEMCPY" <<'PY'
import sys
def load(p, column=1):  # {size: (time_us, busbw)} from "size time busbw [time busbw]" lines
    return {int(l.split()[0]): tuple(float(x) for x in l.split()[column:column + 2]) for l in open(p) if l.strip()}
o, t, g, m, ms = sys.argv[1:6]
names = ["ours", "ours-ip", "ours-tcp", "tcp-ip", "gloo", "mpi-tcp", "mpi-sm", "ours-unix"]
runs = [load(o), load(o, 3), load(t), load(t, 3), load(g), load(m), load(ms), load(sys.argv[7])]
link, memcpy = float(sys.argv[6]), float(sys.argv[8])
ratio = lambda a, b: "%.2f" % (a / b) if b else "n/a"
ratios = [("o/unix", 0, 7), ("o/gloo", 1, 4), ("t/gloo", 3, 4), ("t/mpi-tcp", 2, 5), ("o/mpi-sm", 0, 6)]
print("%10s" % "size(B)" + "".join("%10s" % n for n in names) + "".join("%10s" % r[0] for r in ratios) +
      "%9s %9s %9s" % ("o/memcpy", "o/iperf", "t/iperf") +
      "".join("%10s" % (n[:7] + "us") for i, n in enumerate(names) if i not in (1, 3)))
for size in sorted(runs[0]):
    row = [r.get(size, (0, 0)) for r in runs]
    print("%10d" % size + "".join("%10.3f" % b for _, b in row) +
          "".join("%10s" % ratio(row[a][1], row[b][1]) for _, a, b in ratios) +
          "%9s %9s %9s" % (ratio(row[0][1], memcpy), ratio(row[0][1], link), ratio(row[2][1], link)) +
          "".join("%10.2f" % t for i, (t, _) in enumerate(row) if i not in (1, 3)))
PY
  runs=("$TMP/ours_auto_world$n.json=ours (shared memory)" "$TMP/ours_unix_world$n.json=ours over unix sockets"
        "$TMP/ours_tcp_world$n.json=ours over TCP")
  as_perf_json "$TMP/g" gloo $n >"$TMP/gloo.json" && [ -s "$TMP/g" ] && runs+=("$TMP/gloo.json=Gloo")
  [ -s "$TMP/m" ] && as_perf_json "$TMP/m" mpi $n >"$TMP/mpi.json" && runs+=("$TMP/mpi.json=Open MPI TCP")
  [ -s "$TMP/ms" ] && as_perf_json "$TMP/ms" mpi $n >"$TMP/mpi_sm.json" && runs+=("$TMP/mpi_sm.json=Open MPI shm")
  PLOT_NOTE="$n ranks on one host, $(date +%F), $CPU" \
    bash scripts/plot.sh busbw "$PLOT_DIR/allreduce_world$n.png" "${runs[@]}" ||
    echo "# no figure for world $n (plot.sh exited $?)"
done
