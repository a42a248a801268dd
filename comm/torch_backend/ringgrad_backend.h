// RinggradBackend: the "ringgrad" c10d::Backend. Each call checks PyTorch's arguments, wraps
// the tensors' memory as ringgrad Tensors (no copy: a borrowed Storage holding the at::Tensor)
// and hands them to ringgrad's ring ProcessGroup, which runs them in issue order on its comm
// thread. CPU tensors only (registered for devices=["cpu"]). Reductions take the dtypes ringgrad
// reduces (float32/64, float16, bfloat16, int32/64, uint8) and SUM, AVG, PRODUCT, MIN, MAX;
// broadcast, all_gather and send/recv move any dtype as bytes. all_reduce of a sparse COO
// tensor takes SUM (SparseAllreduce). Anything else raises a RuntimeError naming the operation.
#pragma once
#include <memory>
#include <optional>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "comm/process_group/process_group.h"
#include "comm/torch_backend/ringgrad_work.h"
#include "comm/torch_backend/sparse_allreduce.h"
#include "core/error.h"

namespace ringgrad::torch_backend {

// A collective handed to the group, and when (timed only while hooks are registered).
struct Issued {
  comm::WorkPtr work;
  std::optional<RinggradWork::Clock::time_point> at;
};

class RinggradBackend : public c10d::Backend {
 public:
  // Blocks until every rank has connected (or `timeout` passed); call without the GIL.
  RinggradBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                  std::chrono::milliseconds timeout);
  ~RinggradBackend() override;  // shutdown()

  const std::string getBackendName() const override { return "ringgrad"; }
  // Finishes the queued collectives and closes the connections; releases the GIL meanwhile.
  void shutdown() override;

  // A sparse tensor goes to allreduce_sparse.
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  // SUM of sparse COO CPU tensors, in place; the tensor comes out coalesced (SparseAllreduce).
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;

  // ringgrad_backend_exchange.cpp: what the ring group adds to the basic collectives.
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  // Blocking, on the caller's thread (released GIL); errors in c10d's words
  // (comm/process_group/monitored_barrier.h).
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override;
  // Collectives issued on this group; what TORCH_DISTRIBUTED_DEBUG=DETAIL's checks compare.
  uint64_t getSequenceNumberForGroup() override;

  // PyTorch's flight recorder registers these (see WorkHooks), so its trace shows ringgrad's
  // collectives completed, with durations, and it writes the trace when one fails.
  bool supportsCompletionHooks() const override { return true; }
  void registerCompletionHook(int64_t hook_id, c10d::CompletionHook hook) override;
  void unregisterCompletionHook(int64_t hook_id) override;
  bool supportsAbortHooks() const override { return true; }
  void registerAbortHook(int64_t hook_id, c10d::AbortHook hook) override;
  void unregisterAbortHook(int64_t hook_id) override;

 private:
  // Issues one call on the group; ringgrad's argument errors become RuntimeErrors carrying
  // their sentence (user_message: no source location for PyTorch's users). The time is
  // read only for the hooks (getDuration), which are registered before any collective.
  template <class F>
  Issued issue(const char* operation, F&& call) {
    TORCH_CHECK(group_, "ringgrad: ", operation, " after the group was shut down");
    std::optional<RinggradWork::Clock::time_point> at;
    if (hooks_->any()) at = RinggradWork::Clock::now();
    try {
      return Issued{call(*group_), at};
    } catch (const c10::Error&) {
      throw;
    } catch (const std::exception& e) {
      TORCH_CHECK(false, "ringgrad: ", user_message(e));
    }
  }

  c10::intrusive_ptr<c10d::Work> wrap(Issued issued, c10d::OpType type,
                                      std::vector<at::Tensor> outputs,
                                      std::function<void()> copy_out = {});

  std::unique_ptr<comm::ProcessGroup> group_;
  std::unique_ptr<SparseAllreduce> sparse_;  // uses group_
  std::shared_ptr<FutureCompleter> completer_;
  std::shared_ptr<WorkHooks> hooks_;
};

}  // namespace ringgrad::torch_backend
