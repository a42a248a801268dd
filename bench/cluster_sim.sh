#!/usr/bin/env bash
# A simulated cluster on one machine: H "hosts" as network namespaces on one bridge, each
# host's link shaped to a rate with tc (tbf, both directions), R ranks per host started by one
# `ringgrad-run --nnodes H` per namespace (c10d rendezvous on host 0, RINGGRAD_SOCKET_IFNAME=eth0).
# For each H it runs all_reduce_perf once per algorithm and prints, per size, the time, busbw
# and busbw as a fraction of the link rate; then a short DDP run; then, with --faults, a link
# that drops mid-collective, lost packets and one slow host. Root only; every run is bounded
# by `timeout`; the namespaces are removed on exit, also when interrupted.
#
# Usage: bench/cluster_sim.sh [--hosts "2 4 8"] [--ranks-per-host 2] [--rate 1gbit]
#          [--sizes "8 64M"] [--iters 5] [--algos "ring hierarchical recursive_doubling"]
#          [--ddp] [--faults] [--out DIR] [--build DIR]
# Without root or `ip netns` it prints "SKIPPED: <why>" and exits 77 (CTest's skip code).
# The kernel here has no sch_netem, so links get a rate but no added delay or loss; --faults
# drops packets with nftables instead (installed when missing).
set -euo pipefail
cd "$(dirname "$0")/.."

HOSTS="2 4 8" R=2 RATE=1gbit SIZES="8 64M" ITERS=5 ALGOS="ring hierarchical recursive_doubling"
DDP=0 FAULTS=0 OUT="" BUILD=build
while (($#)); do
  case $1 in
    --hosts) HOSTS=$2; shift ;;
    --ranks-per-host) R=$2; shift ;;
    --rate) RATE=$2; shift ;;
    --sizes) SIZES=$2; shift ;;
    --iters) ITERS=$2; shift ;;
    --algos) ALGOS=$2; shift ;;
    --ddp) DDP=1 ;;
    --faults) FAULTS=1 ;;
    --out) OUT=$2; shift ;;
    --build) BUILD=$2; shift ;;
    *) sed -n '10,14p' "$0" >&2; exit 2 ;;
  esac
  shift
done
OUT=${OUT:-$BUILD/cluster_sim}
BIN=$BUILD/bin
[[ $(id -u) -eq 0 ]] || { echo "SKIPPED: cluster_sim.sh needs root for network namespaces"; exit 77; }
command -v ip >/dev/null && command -v tc >/dev/null ||
  { echo "SKIPPED: cluster_sim.sh needs ip and tc (iproute2)"; exit 77; }
for b in ringgrad-run all_reduce_perf; do
  [[ -x $BIN/$b ]] || { echo "cluster_sim.sh: $BIN/$b is missing; build first (scripts/build.sh)" >&2; exit 1; }
done
mkdir -p "$OUT"

# ---- the cluster ----
source scripts/netns_host.sh
ID=$(($$ % 10000))
SW=rgsim${ID}sw
NAMESPACES=()
cleanup() {  # by name as well: a namespace made just before an interrupt is not yet listed
  pkill -f "rdzv-id rgsim$ID" 2>/dev/null || true
  local ns
  for ns in "${NAMESPACES[@]}" $(ip netns list 2>/dev/null |
    awk -v re="^rgsim${ID}(sw|h[0-9]+)\$" '$1 ~ re {print $1}'); do
    ip netns del "$ns" 2>/dev/null || true
  done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

host_ns() { echo "rgsim${ID}h$1"; }
host_addr() { echo "10.79.$(($1 / 250)).$(($1 % 250 + 1))"; }

# Hosts 0..n-1 on the bridge, each link limited to `rate` in both directions.
build_cluster() {  # N RATE
  ip netns add "$SW" || { echo "SKIPPED: 'ip netns add' failed"; exit 77; }
  NAMESPACES+=("$SW")
  ip -n "$SW" link add br0 type bridge
  ip -n "$SW" link set br0 up
  for ((h = 0; h < $1; h++)); do
    local ns; ns=$(host_ns $h)
    ip netns add "$ns"; NAMESPACES+=("$ns")
    add_netns_host "$ns" "$SW" "rs${ID}h$h" "rs${ID}s$h" "$(host_addr $h)/16"
    shape_host $h "$2"
  done
}

shape_host() {  # HOST RATE: replaces the limit on the host's link, both directions
  local ns; ns=$(host_ns $1)
  ip netns exec "$ns" tc qdisc replace dev eth0 root tbf rate "$2" burst 256kb latency 100ms
  ip netns exec "$SW" tc qdisc replace dev "rs${ID}s$1" root tbf rate "$2" burst 256kb latency 100ms
}

# Runs `ringgrad-run --nnodes H ... PROGRAM ARGS` in hosts 0..H-1 with ENV (space-separated
# VAR=value words), waits for all; stdout and stderr go to PREFIX.h<host>.log. Returns the
# first non-zero exit status.
PORT=$((30500 + RANDOM % 1000))
run_job() {  # H PREFIX ENV TIMEOUT PROGRAM ARGS...
  local hosts=$1 prefix=$2 env=$3 limit=$4; shift 4
  local pids=() status=0
  PORT=$((PORT + 1))
  for ((h = 0; h < hosts; h++)); do
    # shellcheck disable=SC2086
    ip netns exec "$(host_ns $h)" env RINGGRAD_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 $env \
      timeout "$limit" "$BIN/ringgrad-run" --nnodes "$hosts" --node-rank "$h" \
      --nproc-per-node "$R" --rdzv-backend c10d --rdzv-endpoint "$(host_addr 0):$PORT" \
      --rdzv-id "rgsim$ID-$PORT" --rdzv-conf timeout=60 "$@" >"$prefix.h$h.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || { local s=$?; ((status)) || status=$s; }; done
  return "$status"
}

link_gbs() {  # "1gbit" -> GB/s
  awk -v r="$1" 'BEGIN { n = r + 0; u = tolower(r); sub(/^[0-9.]+/, "", u)
    m = (u ~ /^g/) ? 1e9 : (u ~ /^m/) ? 1e6 : (u ~ /^k/) ? 1e3 : 1
    printf "%.4f", n * m / 8e9 }'
}

# ---- the sweep ----
read -r MIN MAX <<<"$SIZES"
MAXH=$(tr ' ' '\n' <<<"$HOSTS" | sort -n | tail -1)
build_cluster "$MAXH" "$RATE"
LINK=$(link_gbs "$RATE")
echo "# cluster_sim $(date -u +%FT%TZ): hosts {$HOSTS}, $R ranks per host, links $RATE ($LINK GB/s) each way, $(nproc) CPUs"
echo "# H R algorithm size time_us busbw_GBs busbw/link"
for H in $HOSTS; do
  for algo in $ALGOS; do
    json=$OUT/allreduce_h${H}_r${R}_$algo.json
    if ! run_job "$H" "$OUT/allreduce_h${H}_$algo" "RINGGRAD_ALGO=$algo" 600 \
        "$BIN/all_reduce_perf" -b "$MIN" -e "$MAX" -f 4 -n "$ITERS" -w 1 -c 1 --json "$json"; then
      echo "# H=$H $algo failed: $(grep -h "error" "$OUT/allreduce_h${H}_$algo".h*.log | head -2)"
      continue
    fi
    /usr/bin/python3 - "$json" "$H" "$R" "$algo" "$LINK" <<'PY'
import json, sys
path, hosts, ranks, algo, link = sys.argv[1:]
for row in json.load(open(path))["rows"]:
    o = row["out_of_place"]
    print(f'{hosts} {ranks} {algo} {row["size"]} {o["time_us"]:.1f} {o["busbw"]:.3f} {o["busbw"] / float(link):.2f}')
PY
  done
  if ((DDP)) && [[ -x $BIN/ddp_throughput ]]; then
    run_job "$H" "$OUT/ddp_h$H" "" 600 "$BIN/ddp_throughput" --model resnet8 --batch-size 32 \
      --steps 5 --warmup 1 || true
    echo "# DDP H=$H: $(grep -h "img/s" "$OUT/ddp_h$H".h0.log | tail -1)"
  fi
done

# ---- faults ----
if ((FAULTS)); then
  H=$(tr ' ' '\n' <<<"$HOSTS" | sort -n | head -1)
  echo "# faults on H=$H, $R ranks per host, 16 MiB all-reduces, collective timeout 20 s"
  fault_run() {  # NAME: runs in the background; sets FAULT_PID
    run_job "$H" "$OUT/fault_$1" "RINGGRAD_TIMEOUT_S=20" 180 "$BIN/all_reduce_perf" -b 16M -e 16M \
      -n 40 -w 1 -c 1 &
    FAULT_PID=$!
  }
  report() {  # NAME STATUS SECONDS
    echo "# $1: exit $2 after $3 s; $(grep -h "error" "$OUT/fault_$1".h*.log | head -1 | cut -c1-200)"
  }
  # A link that drops mid-collective: every rank must fail within the timeout, naming a peer.
  start=$SECONDS; fault_run link_down; sleep 8
  ip -n "$(host_ns $((H - 1)))" link set eth0 down
  wait "$FAULT_PID" && s=0 || s=$?; report link_down $s $((SECONDS - start))
  ip -n "$(host_ns $((H - 1)))" link set eth0 up
  # One host whose link is 10x slower: the job must finish, slower.
  shape_host 0 "$(awk -v r="$RATE" 'BEGIN { n = r + 0; u = r; sub(/^[0-9.]+/, "", u); print n / 10 u }')"
  start=$SECONDS; fault_run slow_host; wait "$FAULT_PID" && s=0 || s=$?
  report slow_host $s $((SECONDS - start))
  shape_host 0 "$RATE"
  # 5% of the packets into host 0 dropped (TCP retransmits): the job must finish, correct.
  if command -v nft >/dev/null || apt-get install -y -q nftables >/dev/null 2>&1; then
    ip netns exec "$(host_ns 0)" nft add table inet rgsim
    ip netns exec "$(host_ns 0)" nft add chain inet rgsim in '{ type filter hook input priority 0; }'
    ip netns exec "$(host_ns 0)" nft add rule inet rgsim in iifname eth0 numgen random mod 100 '<' 5 drop
    start=$SECONDS; fault_run loss; wait "$FAULT_PID" && s=0 || s=$?
    report loss $s $((SECONDS - start))
  else
    echo "# 5% loss: skipped (no nftables and it could not be installed)"
  fi
fi
