// Which all-reduce algorithm runs: by size, or as RINGGRAD_ALGO forces.
#include "comm/collectives/algorithms.h"

#include "core/error.h"

namespace ringgrad::comm::collectives {

AllreduceAlgorithm choose_allreduce_algorithm(size_t bytes, int world, const std::string& forced) {
  if (forced == "ring") return AllreduceAlgorithm::ring;
  if (forced == "recursive_doubling" || forced == "tree") return AllreduceAlgorithm::recursive_doubling;
  if (forced == "direct") return AllreduceAlgorithm::direct;
  RG_CHECK(forced.empty(), "RINGGRAD_ALGO='", forced,
           "' is not one of: ring, recursive_doubling (or its old name tree), direct");
  if (bytes <= kDirectMaxBytes || world <= 1) return AllreduceAlgorithm::direct;
  return bytes <= kRecursiveDoublingMaxBytes ? AllreduceAlgorithm::recursive_doubling
                                             : AllreduceAlgorithm::ring;
}

AllreduceFn allreduce_function(AllreduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllreduceAlgorithm::recursive_doubling: return &recursive_doubling_allreduce;
    case AllreduceAlgorithm::direct: return &direct_allreduce;
    case AllreduceAlgorithm::ring: break;
  }
  return &ring_allreduce;
}

}  // namespace ringgrad::comm::collectives
