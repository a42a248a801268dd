// NcclProcessGroup: the "nccl" backend. Rank 0 makes the ncclUniqueId and publishes it in the
// store under the group's name and generation; every rank then joins one communicator on its
// GPU (options.cuda_device, else LOCAL_RANK) with one CUDA stream. Calls check their tensors
// on the caller's thread (CUDA tensors on this group's device; InvalidArgument otherwise),
// queue the operation on the stream and return an NcclWork at once; operations run in issue
// order. Issuing makes the group's GPU the calling thread's current device. send/recv ignore
// the tag (NCCL matches by order) and, like every collective here, have no cross-rank
// fingerprint check: a mismatch shows up as a timeout that aborts.
#pragma once
#include <memory>
#include <mutex>
#include <vector>

#include "comm/nccl/nccl_comm.h"
#include "comm/process_group/fingerprint.h"
#include "comm/process_group/process_group.h"

namespace ringgrad::comm {

class NcclProcessGroup : public ProcessGroup {
 public:
  // Blocks until every rank joined (options.setup_timeout, else the group's timeout).
  NcclProcessGroup(std::shared_ptr<Store> store, int rank, int size,
                   const ProcessGroupOptions& options);
  ~NcclProcessGroup() override;  // flushes issued work (up to the timeout), then tears down

  std::string backend_name() const override { return "nccl"; }
  int cuda_device() const { return comm_->device(); }

  WorkPtr allreduce(const Tensor& tensor, const AllreduceOptions& opts) override;
  WorkPtr allreduce(const Tensor& input, const Tensor& output,
                    const AllreduceOptions& opts) override;
  WorkPtr broadcast(const Tensor& tensor, const BroadcastOptions& opts) override;
  WorkPtr broadcast(const Tensor& input, const Tensor& output,
                    const BroadcastOptions& opts) override;
  WorkPtr reduce(const Tensor& tensor, const ReduceOptions& opts) override;
  WorkPtr reduce(const Tensor& input, const Tensor& output, const ReduceOptions& opts) override;
  WorkPtr allgather(const Tensor& input, const Tensor& output,
                    const AllgatherOptions& opts) override;
  WorkPtr reduce_scatter(const Tensor& input, const Tensor& output,
                         const ReduceScatterOptions& opts) override;
  WorkPtr barrier(const BarrierOptions& opts) override;
  WorkPtr send(const Tensor& tensor, int dst, const SendRecvOptions& opts) override;
  WorkPtr recv(const Tensor& tensor, int src, const SendRecvOptions& opts) override;

 private:
  // Names the operation (its fingerprint), queues `call(comm, stream)` and records the
  // Work's event after it; `tensors` are kept alive by the Work. `root_or_tag` as in
  // make_fingerprint: a rooted kind's root, a send's or recv's tag.
  template <class Call>
  WorkPtr issue(CollectiveKind kind, DType dtype, uint64_t count, ReduceOp op, int32_t root_or_tag,
                Milliseconds timeout, std::vector<Tensor> tensors, Call&& call);
  void check_tensor(const Tensor& t, const char* operation, const char* role) const;
  void check_pair(const Tensor& in, const Tensor& out, const char* operation,
                  int64_t out_per_in_num, int64_t out_per_in_den) const;

  std::string name_;
  Milliseconds timeout_;
  std::shared_ptr<NcclComm> comm_;
  Tensor barrier_value_;  // one float on the device: a barrier is an all-reduce of it
  std::mutex mu_;         // orders sequence numbers with issuing
  uint64_t seq_ = 0;
};

}  // namespace ringgrad::comm
