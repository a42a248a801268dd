// Process group factory and the default collective timeout.
#include "comm/process_group/process_group.h"

#include "comm/process_group/ring_process_group.h"
#include "core/env.h"
#include "core/error.h"

namespace ringgrad::comm {

Milliseconds default_collective_timeout() {
  const double seconds = env_double("RINGGRAD_TIMEOUT_S", 0.0);
  if (seconds < 0) RG_THROW(InvalidArgument, "RINGGRAD_TIMEOUT_S=", seconds, " must be positive");
  return seconds > 0 ? Milliseconds(static_cast<int64_t>(seconds * 1000)) : kDefaultCollectiveTimeout;
}

std::unique_ptr<ProcessGroup> create_process_group(const std::string& backend,
                                                   std::shared_ptr<Store> store, int rank,
                                                   int size, ProcessGroupOptions options) {
  RG_CHECK(store != nullptr, "create_process_group: no store");
  if (rank < 0 || size < 1 || rank >= size)
    RG_THROW(InvalidArgument, "create_process_group: rank ", rank, " outside world size ", size);
  if (backend == "ring" || backend == "auto")
    return std::make_unique<RingProcessGroup>(std::move(store), rank, size, options);
  if (backend == "nccl")
    RG_THROW(InvalidArgument, "backend 'nccl' is not available in this build yet (it comes with "
             "the NCCL issue); use 'ring' or 'auto'");
  RG_THROW(InvalidArgument, "unknown process group backend '", backend,
           "'; available: ring, auto (nccl: not yet)");
}

}  // namespace ringgrad::comm
