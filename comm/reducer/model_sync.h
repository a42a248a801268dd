// Making replicas start identical, as DDP does at construction: every rank checks that all
// ranks hold the same parameters and buffers (names, dtypes, shapes), then rank 0's values are
// broadcast. Collective: every rank of the group must call these in the same order.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "comm/process_group/process_group.h"

namespace ringgrad::comm {

using NamedTensorRefs = std::vector<std::pair<std::string, Tensor>>;

// Throws InvalidArgument, with the same message on every rank, naming the first entry that
// differs: "... 'fc.weight' has shape [10, 64] on rank 0 but [10, 32] on rank 1", or the
// counts when ranks hold different numbers of entries.
void check_same_across_ranks(ProcessGroup& group, const NamedTensorRefs& entries,
                             const std::string& what);

// Overwrites every tensor with rank `root`'s values.
void broadcast_tensors(ProcessGroup& group, const std::vector<Tensor>& tensors, int root = 0);

}  // namespace ringgrad::comm
