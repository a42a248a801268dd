// Hierarchical all-reduce for a group that spans several hosts with several ranks on some of
// them (the design of NCCL's and Horovod's hierarchical all-reduce). With H hosts and the link
// between hosts as the bottleneck, a flat ring over all n ranks pushes 2(n-1)/n of the buffer
// through each host's link; this pushes 2(H-1)/H, because each byte crosses hosts in one
// all-reduce among one rank per host. When every host has the same number R of ranks, each
// slice of the buffer (below) goes through three phases:
//   1. inside each host, a reduce-scatter over R chunks: local rank i ends with chunk i summed
//      over its host (each rank sends chunk j to local rank j over the same-host transport);
//   2. local rank i of every host all-reduces chunk i with the others' local rank i: R
//      all-reduces run side by side, each over 1/R of the slice, so every rank of a host
//      shares the work between hosts (NCCL's rings, one per local rank);
//   3. inside each host, an all-gather of the R finished chunks.
// Phases 1 and 3 move bytes over memory, phase 2 over the slow link. To keep the link busy the
// whole time, the buffer is cut into slices (see kMaxCrossSteps) and the phases are pipelined: the
// reduce-scatter of slice k+1 and the all-gather of slice k-1 are posted before slice k's
// all-reduce across hosts, so the transport moves them while that all-reduce waits for the
// link; what is left between two cross-host all-reduces is folding the received chunks.
// When hosts have different numbers of ranks the whole buffer goes through one leader per host
// instead: reduce onto the leader (its lowest rank), all-reduce among the leaders, broadcast
// from the leader.
// Every element is finished by one all-reduce, whose result is identical on its ranks, and
// then copied, so the result is bitwise identical everywhere. avg sums throughout and divides
// once, by n.
#include <algorithm>
#include <cstring>
#include <map>

#include "comm/collectives/algorithms.h"
#include "comm/collectives/ring_step.h"
#include "comm/collectives/subset_transport.h"

namespace ringgrad::comm::collectives {

namespace {

// Pipelining depth. Each slice costs one more all-reduce across hosts, 2(H-1) latency-bound
// steps, and one fold outside the overlap; more slices hide more of the first reduce-scatter
// and the last all-gather. So: at most kMaxCrossSteps such steps in all (16 slices on 2 hosts,
// 2 on 8), and every step moves at least one ring segment per rank. The limit counts steps, not
// slices, because a step's cost grows with the hosts: where each step is a scheduling round of
// many processes (8 hosts on the simulated cluster, docs/scaling.md), 16 slices lost to one.
constexpr size_t kMaxCrossSteps = 32;

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

// The three phases of the uniform case for one rank, over one slice at a time.
class SlicedHierarchy {
 public:
  SlicedHierarchy(Transport& t, std::vector<int> host_mates, int local,
                  std::vector<int> across_hosts, const void* input, void* output, size_t count,
                  DType dtype, ReduceOp op, Scratch& scratch)
      : t_(t),
        mates_(std::move(host_mates)),
        local_(local),
        across_(std::move(across_hosts)),
        input_(static_cast<const char*>(input)),
        output_(static_cast<char*>(output)),
        count_(count),
        dtype_(dtype),
        elem_(dtype_size(dtype)),
        op_(op),
        combine_(op == ReduceOp::avg ? ReduceOp::sum : op),
        scratch_(scratch) {
    const size_t hosts = across_.size();
    const size_t most =
        hosts > 1 ? kMaxCrossSteps / (2 * (hosts - 1)) : 1;  // nothing to hide behind
    const size_t fit = count * elem_ / (kSegmentBytes * mates_.size() * hosts);
    const size_t slices = std::clamp<size_t>(fit, 1, std::max<size_t>(most, 1));
    slice_count_ = (count + slices - 1) / slices;
    slices_ = count == 0 ? 0 : (count + slice_count_ - 1) / slice_count_;
    // One landing place per other rank of the host, as large as this rank's biggest chunk.
    const size_t biggest = ChunkLayout{slice_count_, mates_.size()}.size(0) * elem_;
    if (scratch_.host_mate_chunks.size() < biggest * mates_.size())
      scratch_.host_mate_chunks.resize(biggest * mates_.size());
    landing_bytes_ = biggest;
  }

  void run() {
    if (slices_ == 0) return;
    post_reduce_scatter(0);
    t_.wait_all();
    for (size_t k = 0; k < slices_; ++k) {
      fold(k);
      if (k + 1 < slices_) post_reduce_scatter(k + 1);
      const Block mine = chunk(output_, k, local_);
      allreduce_across_hosts(t_, across_, mine.data, mine.bytes / elem_, dtype_, combine_, op_,
                             scratch_);
      t_.wait_all();  // slice k+1's chunks have landed (the all-reduce's waits moved them)
      post_allgather(k);
    }
    t_.wait_all();
  }

 private:
  // Chunk j (local rank j's) of slice k of `base`.
  Block chunk(const char* base, size_t k, int j) const {
    const size_t first = k * slice_count_;
    const ChunkLayout layout{std::min(slice_count_, count_ - first), mates_.size()};
    return Block{const_cast<char*>(base) + (first + layout.offset(j)) * elem_,
                 layout.size(j) * elem_};
  }
  char* landing(int j) {
    return reinterpret_cast<char*>(scratch_.host_mate_chunks.data()) + j * landing_bytes_;
  }

  void post_reduce_scatter(size_t k) {
    const Block mine = chunk(input_, k, local_);
    for (int j = 0; j < static_cast<int>(mates_.size()); ++j) {
      if (j == local_) continue;
      const Block theirs = chunk(input_, k, j);
      t_.post_recv(mates_[j], landing(j), mine.bytes);
      t_.post_send(mates_[j], theirs.data, theirs.bytes);
    }
  }

  // This rank's chunk of slice k = its own values combined with every host mate's, in local
  // rank order.
  void fold(size_t k) {
    const Block own = chunk(input_, k, local_);
    const Block out = chunk(output_, k, local_);
    const size_t n = own.bytes / elem_;
    const char* so_far = own.data;  // out = own (op) the first mate's, then (op) each next one
    for (int j = 0; j < static_cast<int>(mates_.size()); ++j) {
      if (j == local_) continue;
      reduce_into(out.data, so_far, landing(j), n, dtype_, combine_);
      so_far = out.data;
    }
    if (so_far != out.data && own.bytes > 0) std::memcpy(out.data, own.data, own.bytes);
  }

  void post_allgather(size_t k) {
    const Block mine = chunk(output_, k, local_);
    for (int j = 0; j < static_cast<int>(mates_.size()); ++j) {
      if (j == local_) continue;
      const Block theirs = chunk(output_, k, j);
      t_.post_recv(mates_[j], theirs.data, theirs.bytes);
      t_.post_send(mates_[j], mine.data, mine.bytes);
    }
  }

  Transport& t_;
  const std::vector<int> mates_;  // the ranks of this host, ascending; this rank is mates_[local_]
  const int local_;
  const std::vector<int> across_;  // local rank local_ of every host, ascending
  const char* input_;
  char* output_;
  const size_t count_;
  const DType dtype_;
  const size_t elem_;
  const ReduceOp op_, combine_;
  Scratch& scratch_;
  size_t slice_count_ = 0, slices_ = 0, landing_bytes_ = 0;
};

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
  if (uniform) {
    SlicedHierarchy(t, host_mates, local, one_per_host(local), input, output, count, dtype, op,
                    scratch)
        .run();
    return;
  }
  SubsetTransport host(t, host_mates);
  ring_reduce(host, input, output, count, dtype, combine, 0);
  if (local == 0)
    allreduce_across_hosts(t, one_per_host(0), output, count, dtype, combine, op, scratch);
  ring_broadcast(host, output, output, count * dtype_size(dtype), 0);
}

}  // namespace ringgrad::comm::collectives
