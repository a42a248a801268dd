// Process group factory and the default collective timeout.
#include "comm/process_group/process_group.h"

#include "comm/process_group/ring_process_group.h"
#include "core/cuda_memory.h"
#include "core/env.h"
#include "core/error.h"
#include "ringgrad/config.h"

#ifdef HAVE_NCCL
#include "comm/nccl/nccl_process_group.h"
#endif

namespace ringgrad::comm {

// The in-place forms are the out-of-place ones on views: this rank's block of the whole
// buffer is the input (all-gather) or the output (reduce-scatter).
namespace {
int64_t rank_block(const Tensor& t, int size, const char* operation) {
  RG_CHECK(t.defined(), operation, ": the tensor is undefined");
  RG_CHECK(t.numel() % size == 0, operation, ": tensor has ", t.numel(),
           " elements, not a multiple of the group size ", size);
  return t.numel() / size;
}
}  // namespace

WorkPtr ProcessGroup::allgather_inplace(const Tensor& output, const AllgatherOptions& opts) {
  const int64_t block = rank_block(output, size(), "allgather");
  return allgather(output.view({output.numel()}).narrow(rank() * block, block), output, opts);
}

WorkPtr ProcessGroup::reduce_scatter_inplace(const Tensor& tensor,
                                             const ReduceScatterOptions& opts) {
  const int64_t block = rank_block(tensor, size(), "reduce_scatter");
  return reduce_scatter(tensor, tensor.view({tensor.numel()}).narrow(rank() * block, block), opts);
}

namespace {
[[noreturn]] void unsupported(const ProcessGroup& pg, const char* operation) {
  RG_THROW(InvalidArgument, operation, " is not supported by the '", pg.backend_name(),
           "' process group; the 'ring' backend has it");
}
}  // namespace

WorkPtr ProcessGroup::gather(const Tensor&, const Tensor&, const GatherOptions&) {
  unsupported(*this, "gather");
}
WorkPtr ProcessGroup::scatter(const Tensor&, const Tensor&, const ScatterOptions&) {
  unsupported(*this, "scatter");
}
WorkPtr ProcessGroup::alltoall(const Tensor&, const Tensor&, const AlltoallOptions&) {
  unsupported(*this, "alltoall");
}
WorkPtr ProcessGroup::allreduce_coalesced(const std::vector<Tensor>&, const AllreduceOptions&) {
  unsupported(*this, "allreduce_coalesced");
}
WorkPtr ProcessGroup::allgather_coalesced(const std::vector<Tensor>&, const std::vector<Tensor>&,
                                          const AllgatherOptions&) {
  unsupported(*this, "allgather_coalesced");
}
void ProcessGroup::monitored_barrier(Milliseconds, bool) {
  unsupported(*this, "monitored_barrier");
}
uint64_t ProcessGroup::sequence_number() { unsupported(*this, "sequence_number"); }

Milliseconds default_collective_timeout() {
  const double seconds = env_double("RINGGRAD_TIMEOUT_S", 0.0);
  if (!(seconds >= 0) || seconds > 1e7)  // also NaN
    RG_THROW(InvalidArgument, "RINGGRAD_TIMEOUT_S=", env_str("RINGGRAD_TIMEOUT_S", ""),
             " must be a number of seconds from 0 (the default, 10 minutes) to 10000000");
  return seconds > 0 ? Milliseconds(static_cast<int64_t>(seconds * 1000))
                     : kDefaultCollectiveTimeout;
}

std::unique_ptr<ProcessGroup> create_process_group(Backend backend, std::shared_ptr<Store> store,
                                                   int rank, int size,
                                                   ProcessGroupOptions options) {
  RG_CHECK(store != nullptr, "create_process_group: no store");
  if (rank < 0 || size < 1 || rank >= size)
    RG_THROW(InvalidArgument, "create_process_group: rank ", rank, " outside world size ", size);
#ifdef HAVE_NCCL
  const bool nccl_usable = cuda_device_count() > 0;
#else
  const bool nccl_usable = false;
#endif
  const bool want_nccl =
      backend == Backend::nccl ||
      (backend == Backend::automatic && options.tensor_device == DeviceType::cuda && nccl_usable);
  if (!want_nccl) return std::make_unique<RingProcessGroup>(std::move(store), rank, size, options);
#ifdef HAVE_NCCL
  return std::make_unique<NcclProcessGroup>(std::move(store), rank, size, options);
#else
  RG_THROW(InvalidArgument,
           "backend 'nccl': this ringgrad build has no NCCL (configure with "
           "-DRINGGRAD_ENABLE_CUDA=ON -DRINGGRAD_ENABLE_NCCL=ON); use 'ring', which takes CPU "
           "and CUDA tensors");
#endif
}

}  // namespace ringgrad::comm
