#!/usr/bin/env bash
# Side-by-side all-reduce on loopback: our all_reduce_perf (ring backend, CPU), PyTorch's Gloo
# (/usr/bin/python3) and Open MPI's MPI_Allreduce over TCP (--mca btl tcp,self), each with 2
# and 4 ranks, 8 B to 128 MiB (float sum); prints busbw side by side with our/their ratios and
# iperf3's single-stream loopback throughput as the link limit; then scripts/plot.sh draws
# busbw against size for the three, one PNG per world size, into PLOT_DIR (BUILD_DIR/plots).
# Usage: bench/compare_allreduce.sh [BUILD_DIR=build] [MAX_BYTES=134217728]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
MAX=${2:-134217728}
MIN=8 FACTOR=16 ITERS=${ITERS:-10} WARMUP=${WARMUP:-3}
PLOT_DIR=${PLOT_DIR:-$BUILD/plots}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
PORT=$((29700 + RANDOM % 200))

echo "# iperf3 single stream on loopback (the link limit)"
iperf3 -s -1 -p $PORT >/dev/null 2>&1 & sleep 0.5
IPERF=$(iperf3 -c 127.0.0.1 -p $PORT -t 3 -J | /usr/bin/python3 -c \
  'import json,sys; print("%.3f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 8e9))')
echo "iperf3: $IPERF GB/s"; PORT=$((PORT + 1))

HAVE_MPI=1
if ! mpicc -O2 -o "$TMP/mpi_allreduce" bench/mpi_allreduce.c 2>"$TMP/mpicc.err"; then
  HAVE_MPI=0; echo "# Open MPI: mpicc failed ($(head -1 "$TMP/mpicc.err")); install libopenmpi-dev"
fi

ours() {  # world -> "size time busbw" lines
  local n=$1 pids=()
  for ((r = 0; r < n; ++r)); do
    RANK=$r WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT RINGGRAD_LOG=warn \
      timeout 600 "$BUILD/bin/all_reduce_perf" -b $MIN -e "$MAX" -f $FACTOR -n $ITERS -w $WARMUP -c 1 \
      --json "$TMP/ours$r.json" >/dev/null & pids+=($!)
  done
  wait "${pids[@]}"; PORT=$((PORT + 1)); cp "$TMP/ours0.json" "$TMP/ours_world$n.json"
  /usr/bin/python3 -c 'import json,sys
for row in json.load(open(sys.argv[1]))["rows"]:
    print(row["size"], "%.2f" % row["out_of_place"]["time_us"], "%.3f" % row["out_of_place"]["busbw"])' "$TMP/ours0.json"
}
gloo() {
  local n=$1 pids=()
  for ((r = 0; r < n; ++r)); do
    RANK=$r WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT GLOO_SOCKET_IFNAME=lo \
      timeout 600 /usr/bin/python3 bench/gloo_allreduce.py $MIN "$MAX" $FACTOR $ITERS $WARMUP \
      >"$TMP/gloo$r.txt" & pids+=($!)
  done
  wait "${pids[@]}"; PORT=$((PORT + 1)); cat "$TMP/gloo0.txt"
}
mpi() {
  [ $HAVE_MPI = 1 ] || return 0
  timeout 600 mpirun --allow-run-as-root --oversubscribe -np "$1" --mca btl tcp,self \
    --mca btl_tcp_if_include lo "$TMP/mpi_allreduce" $MIN "$MAX" $FACTOR $ITERS $WARMUP
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
  ours $n >"$TMP/o" ; gloo $n >"$TMP/g"; mpi $n >"$TMP/m" || true
  echo
  echo "# world $n: busbw (GB/s) and 8-byte latency; ratio = ours / theirs; link limit iperf3 $IPERF GB/s"
  /usr/bin/python3 - "$TMP/o" "$TMP/g" "$TMP/m" "$IPERF" <<'PY'
import sys
def load(p):
    return {int(l.split()[0]): (float(l.split()[1]), float(l.split()[2])) for l in open(p) if l.strip()}
ours, gloo, mpi, link = load(sys.argv[1]), load(sys.argv[2]), load(sys.argv[3]), float(sys.argv[4])
ratio = lambda a, b: "%7.2f" % (a / b) if b else "    n/a"
print("%12s %10s %10s %10s %8s %8s %8s %10s %10s %10s" % ("size(B)", "ours", "gloo", "mpi", "o/gloo", "o/mpi", "o/iperf", "ours(us)", "gloo(us)", "mpi(us)"))
for size in sorted(ours):
    o, g, m = ours[size], gloo.get(size, (0, 0)), mpi.get(size, (0, 0))
    print("%12d %10.3f %10.3f %10.3f %8s %8s %8s %10.1f %10.1f %10.1f" % (size, o[1], g[1], m[1], ratio(o[1], g[1]),
          ratio(o[1], m[1]), ratio(o[1], link), o[0], g[0], m[0]))
PY
  runs=("$TMP/ours_world$n.json=ours (ring)")
  as_perf_json "$TMP/g" gloo $n >"$TMP/gloo.json" && [ -s "$TMP/g" ] && runs+=("$TMP/gloo.json=Gloo")
  [ -s "$TMP/m" ] && as_perf_json "$TMP/m" mpi $n >"$TMP/mpi.json" && runs+=("$TMP/mpi.json=Open MPI")
  bash scripts/plot.sh busbw "$PLOT_DIR/allreduce_world$n.png" "${runs[@]}" ||
    echo "# no figure for world $n (plot.sh exited $?)"
done
