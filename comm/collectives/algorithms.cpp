// Which all-reduce algorithm runs: by size, or as RINGGRAD_ALGO forces.
#include "comm/collectives/algorithms.h"

#include <set>

#include "core/error.h"

namespace ringgrad::comm::collectives {

namespace {

AllreduceAlgorithm forced_allreduce_algorithm(const std::string& forced) {
  if (forced == "ring") return AllreduceAlgorithm::ring;
  if (forced == "recursive_doubling" || forced == "tree")
    return AllreduceAlgorithm::recursive_doubling;
  if (forced == "direct") return AllreduceAlgorithm::direct;
  if (forced == "hierarchical") return AllreduceAlgorithm::hierarchical;
  RG_THROW(
      Error, "RINGGRAD_ALGO='", forced,
      "' is not one of: ring, recursive_doubling (or its old name tree), direct, hierarchical");
}

}  // namespace

// Runs for every small all-reduce, so the usual unforced case compares no strings.
AllreduceAlgorithm choose_allreduce_algorithm(size_t bytes, int world, int hosts,
                                              const std::string& forced) {
  if (!forced.empty()) return forced_allreduce_algorithm(forced);
  if (bytes <= kDirectMaxBytes || world <= 1) return AllreduceAlgorithm::direct;
  if (bytes <= kRecursiveDoublingMaxBytes) return AllreduceAlgorithm::recursive_doubling;
  return hosts > 1 && hosts < world ? AllreduceAlgorithm::hierarchical : AllreduceAlgorithm::ring;
}

int count_hosts(const Transport& t) {
  std::set<std::string> hosts;
  for (int r = 0; r < t.size(); ++r) hosts.insert(t.host_of(r));
  return static_cast<int>(hosts.size());
}

AllreduceFn allreduce_function(AllreduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllreduceAlgorithm::recursive_doubling: return &recursive_doubling_allreduce;
    case AllreduceAlgorithm::direct: return &direct_allreduce;
    case AllreduceAlgorithm::hierarchical: return &hierarchical_allreduce;
    case AllreduceAlgorithm::ring: break;
  }
  return &ring_allreduce;
}

}  // namespace ringgrad::comm::collectives
