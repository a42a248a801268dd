// Hierarchical all-reduce for a group that spans several hosts with several ranks on some of
// them (the design of NCCL's and Horovod's hierarchical all-reduce). With H hosts and the link
// between hosts as the bottleneck, a flat ring over all n ranks pushes 2(n-1)/n of the buffer
// through each host's link; this pushes 2(H-1)/H, because each byte crosses hosts in one
// all-reduce among one rank per host. When every host has the same number R of ranks:
//   1. inside each host, a ring reduce-scatter over R chunks: local rank i ends with chunk i
//      summed over its host (over the same-host transport);
//   2. local rank i of every host all-reduces chunk i with the others' local rank i: R
//      all-reduces run side by side, each over 1/R of the buffer, so every rank of a host
//      shares the work between hosts (NCCL's rings, one per local rank);
//   3. inside each host, a ring all-gather of the R finished chunks.
// The elements that do not split into R equal chunks (fewer than R), or the whole buffer when
// hosts have different numbers of ranks, go through one leader per host instead: reduce onto the
// leader (its lowest rank), all-reduce among the leaders, broadcast from the leader.
// Every element is finished by one all-reduce, whose result is identical on its ranks, and
// then copied, so the result is bitwise identical everywhere. avg sums throughout and divides
// once, by n.
#include <algorithm>
#include <map>

#include "comm/collectives/algorithms.h"
#include "comm/collectives/subset_transport.h"

namespace ringgrad::comm::collectives {

namespace {

// The all-reduce among one rank per host, by size as a flat group would choose it.
void allreduce_across_hosts(Transport& t, const std::vector<int>& one_per_host, void* data,
                            size_t count, DType dtype, ReduceOp combine, ReduceOp op,
                            Scratch& scratch) {
  SubsetTransport across(t, one_per_host);
  const auto algorithm =
      choose_allreduce_algorithm(count * dtype_size(dtype), across.size(), 1, "");
  allreduce_function(algorithm)(across, data, data, count, dtype, combine, scratch);
  if (op == ReduceOp::avg) divide_by(data, count, dtype, t.size());
}

}  // namespace

void hierarchical_allreduce(Transport& t, const void* input, void* output, size_t count,
                            DType dtype, ReduceOp op, Scratch& scratch) {
  // Ranks by host, hosts in the order of their lowest rank; members ascend.
  std::map<std::string, std::vector<int>> by_host;
  for (int r = 0; r < t.size(); ++r) by_host[t.host_of(r)].push_back(r);
  const std::vector<int> host_mates = by_host[t.host_of(t.rank())];
  const int per_host = static_cast<int>(host_mates.size());
  const int local = static_cast<int>(std::find(host_mates.begin(), host_mates.end(), t.rank()) -
                                     host_mates.begin());
  const bool uniform = std::all_of(by_host.begin(), by_host.end(), [&](const auto& host) {
    return static_cast<int>(host.second.size()) == per_host;
  });
  // Rank `index` of every host, ascending.
  auto one_per_host = [&](int index) {
    std::vector<int> ranks;
    for (const auto& [host, members] : by_host) ranks.push_back(members[index]);
    std::sort(ranks.begin(), ranks.end());
    return ranks;
  };
  const ReduceOp combine = op == ReduceOp::avg ? ReduceOp::sum : op;
  const size_t elem = dtype_size(dtype);
  SubsetTransport host(t, host_mates);

  const size_t chunk = uniform ? count / per_host : 0;
  if (chunk > 0) {
    void* mine = static_cast<char*>(output) + local * chunk * elem;
    ring_reduce_scatter(host, input, mine, chunk, dtype, combine, scratch);
    allreduce_across_hosts(t, one_per_host(local), mine, chunk, dtype, combine, op, scratch);
    ring_allgather(host, mine, output, chunk * elem);
  }

  const size_t done = chunk * per_host;
  if (done == count) return;
  const void* rest_in = static_cast<const char*>(input) + done * elem;
  void* rest_out = static_cast<char*>(output) + done * elem;
  ring_reduce(host, rest_in, rest_out, count - done, dtype, combine, 0);
  if (local == 0)
    allreduce_across_hosts(t, one_per_host(0), rest_out, count - done, dtype, combine, op, scratch);
  ring_broadcast(host, rest_out, rest_out, (count - done) * elem, 0);
}

}  // namespace ringgrad::comm::collectives
