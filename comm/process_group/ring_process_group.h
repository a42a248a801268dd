// RingProcessGroup: the "ring" backend. A TcpTransport full mesh, the algorithms of comm/ring/,
// and one worker thread that runs the group's collectives in issue order. CUDA tensors go
// through pinned host slots chunk by chunk (comm/ring/staged_collectives.h); every rank of a
// collective must then pass CUDA tensors (the fingerprint says so), reductions on the host. Calls validate their
// tensors on the caller's thread (throwing InvalidArgument) and return a Work at once. After a
// failure the group resets its connections, so every peer fails at once too, and refuses
// further work with the first error.
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/process_group/checked_transport.h"
#include "comm/process_group/process_group.h"
#include "comm/ring/ring_algorithms.h"
#include "comm/ring/staged_collectives.h"
#include "comm/transport/tcp/tcp_transport.h"

namespace ringgrad::comm {

class RingProcessGroup : public ProcessGroup {
 public:
  // Blocks until all ranks are connected (options.setup_timeout).
  RingProcessGroup(std::shared_ptr<Store> store, int rank, int size,
                   const ProcessGroupOptions& options);
  ~RingProcessGroup() override;  // runs the queued work to completion, then joins the worker

  std::string backend_name() const override { return "ring"; }
  WorkPtr allreduce(const Tensor& tensor, const AllreduceOptions& opts) override;
  WorkPtr allreduce(const Tensor& input, const Tensor& output, const AllreduceOptions& opts) override;
  WorkPtr broadcast(const Tensor& tensor, const BroadcastOptions& opts) override;
  WorkPtr broadcast(const Tensor& input, const Tensor& output, const BroadcastOptions& opts) override;
  WorkPtr reduce(const Tensor& tensor, const ReduceOptions& opts) override;
  WorkPtr reduce(const Tensor& input, const Tensor& output, const ReduceOptions& opts) override;
  WorkPtr allgather(const Tensor& input, const Tensor& output, const AllgatherOptions& opts) override;
  WorkPtr reduce_scatter(const Tensor& input, const Tensor& output,
                         const ReduceScatterOptions& opts) override;
  WorkPtr barrier(const BarrierOptions& opts) override;
  WorkPtr send(const Tensor& tensor, int dst, const SendRecvOptions& opts) override;
  WorkPtr recv(const Tensor& tensor, int src, const SendRecvOptions& opts) override;

 private:
  using Run = std::function<void(Transport&, ring::Scratch&)>;
  struct Task {
    WorkPtr work;
    Fingerprint fingerprint;
    int peer;  // -1: every rank takes part; else the one partner of a send/recv
    Milliseconds timeout;
    Run run;  // holds copies of the tensors, keeping their storage alive
  };

  enum class Direction { all, send, recv };  // a collective, or which end of a send/recv
  WorkPtr enqueue(CollectiveKind kind, DType dtype, uint64_t count, ReduceOp op, int32_t root,
                  Direction direction, int peer, Milliseconds timeout, bool staged, Run run);
  // Worker thread only: the staging slots for tensors on `device` (made on first use).
  ring::Staging staging(Device device, ring::Scratch& scratch);
  void worker_loop();
  void execute(Task& task);

  std::string name_;
  Milliseconds timeout_;
  std::string forced_algorithm_;  // RINGGRAD_ALGO
  std::unique_ptr<tcp::TcpTransport> transport_;
  CheckedTransport checked_;
  ring::Scratch scratch_;
  std::unique_ptr<ring::StagingCopier> copier_;  // for CUDA tensors, on copier_device_
  int copier_device_ = -1;
  std::vector<int> all_peers_;
  std::vector<int> partner_;  // {peer}, reused for send/recv

  std::mutex mu_;  // guards the queue, the sequence numbers, busy_ and stopping_
  std::condition_variable wake_;
  std::deque<Task> queue_;
  std::atomic<size_t> queued_{0};
  uint64_t next_seq_ = 0;
  std::vector<uint64_t> sent_to_, received_from_;  // send/recv sequence per peer
  bool stopping_ = false;
  bool busy_ = false;    // a task is executing (on the worker, or inline on a caller)
  std::string failure_;  // whichever thread executes (busy_ makes that one at a time)
  std::thread worker_;
};

}  // namespace ringgrad::comm
