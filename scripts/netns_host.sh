# Sourced by bench/cluster_sim.sh and tests/integration/slurm_cluster.sh, which simulate hosts as
# network namespaces on one bridge.
# add_netns_host NS SWITCH_NS HOST_IF SWITCH_IF ADDRESS/LEN: connects the existing namespace NS
# to the bridge br0 of SWITCH_NS through a veth pair (HOST_IF, renamed eth0 inside NS, and
# SWITCH_IF on the bridge) and gives it ADDRESS; loopback up too.
add_netns_host() {
  local ns=$1 sw=$2 host_if=$3 switch_if=$4 address=$5
  ip link add "$host_if" type veth peer name "$switch_if"
  ip link set "$host_if" netns "$ns"
  ip link set "$switch_if" netns "$sw"
  ip -n "$ns" link set "$host_if" name eth0
  ip -n "$ns" addr add "$address" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  ip -n "$sw" link set "$switch_if" master br0 up
}
