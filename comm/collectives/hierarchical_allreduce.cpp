// Hierarchical all-reduce for a group that spans several hosts with several ranks on some of
// them (the design of NCCL's and Horovod's hierarchical all-reduce). With H hosts and the link
// between hosts as the bottleneck, a flat ring over all n ranks pushes 2(n-1)/n of the buffer
// through each host's link; this pushes 2(H-1)/H, because only one rank per host talks across
// hosts:
//   1. inside each host, reduce onto the host's leader (its lowest rank), over the same-host
//      transport (a ring reduce among the host's ranks);
//   2. the leaders, one per host, all-reduce among themselves (by size, as a flat group would);
//   3. inside each host, the leader broadcasts the result to the others.
// Every rank ends with the leaders' bytes, which step 2 makes identical on every leader, so
// the result is bitwise identical everywhere. avg sums throughout and divides once, by n.
#include <algorithm>
#include <map>

#include "comm/collectives/algorithms.h"
#include "comm/collectives/subset_transport.h"

namespace ringgrad::comm::collectives {

void hierarchical_allreduce(Transport& t, const void* input, void* output, size_t count,
                            DType dtype, ReduceOp op, Scratch& scratch) {
  // Ranks by host, hosts in the order of their lowest rank; members ascend.
  std::map<std::string, std::vector<int>> by_host;
  for (int r = 0; r < t.size(); ++r) by_host[t.host_of(r)].push_back(r);
  std::vector<int> host_mates = by_host[t.host_of(t.rank())], leaders;
  for (const auto& [host, ranks] : by_host) leaders.push_back(ranks.front());
  std::sort(leaders.begin(), leaders.end());
  const ReduceOp combine = op == ReduceOp::avg ? ReduceOp::sum : op;

  SubsetTransport host(t, host_mates);
  ring_reduce(host, input, output, count, dtype, combine, 0);
  if (host.rank() == 0) {
    SubsetTransport across(t, leaders);
    const auto algorithm =
        choose_allreduce_algorithm(count * dtype_size(dtype), across.size(), 1, "");
    allreduce_function(algorithm)(across, output, output, count, dtype, combine, scratch);
    if (op == ReduceOp::avg) divide_by(output, count, dtype, t.size());
  }
  ring_broadcast(host, output, output, count * dtype_size(dtype), 0);
}

}  // namespace ringgrad::comm::collectives
