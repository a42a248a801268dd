// RingProcessGroup: the "ring" backend. A MeshTransport full mesh, the algorithms of
// comm/collectives/, and one worker thread that runs the group's collectives in issue order.
// Every call does three things: validate its tensors on the caller's thread (throwing
// InvalidArgument), enqueue a task (returning its Work at once), and, on the worker, run an
// algorithm; or on the caller's thread, when it waits for the task before the worker took it
// (Note [Running a collective where it is waited]). CUDA tensors run the staged form of the
// algorithm through pinned host slots (comm/collectives/staged_collectives.h); every rank of a
// collective must then pass CUDA tensors (the fingerprint says so). After a failure the group
// resets its connections, so every peer fails at once too, and refuses further work with the first
// error. Send and recv do not queue: they are matched per (peer, direction, tag) by PointToPoint,
// on its own thread and connections.
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/collectives/algorithms.h"
#include "comm/collectives/staged_collectives.h"
#include "comm/process_group/checked_transport.h"
#include "comm/process_group/monitored_barrier.h"
#include "comm/process_group/point_to_point.h"
#include "comm/process_group/process_group.h"
#include "comm/process_group/progress_watchdog.h"
#include "comm/transport/mesh_transport.h"

namespace ringgrad::comm {

class RingProcessGroup : public ProcessGroup {
 public:
  // Blocks until all ranks are connected (options.setup_timeout).
  RingProcessGroup(std::shared_ptr<Store> store, int rank, int size,
                   const ProcessGroupOptions& options);
  ~RingProcessGroup() override;  // runs the queued work to completion, then joins the worker

  std::string backend_name() const override { return "ring"; }
  std::string describe_links() const override { return transport_->describe_links(); }
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
  // Host tensors only (CUDA ones are refused with InvalidArgument), run by the linear
  // algorithms of comm/collectives/direct_exchange.h; the coalesced forms pack the tensors
  // into one buffer on the worker and run the all-reduce / ring all-gather on it.
  WorkPtr gather(const Tensor& input, const Tensor& output, const GatherOptions& opts) override;
  WorkPtr scatter(const Tensor& input, const Tensor& output, const ScatterOptions& opts) override;
  WorkPtr alltoall(const Tensor& input, const Tensor& output, const AlltoallOptions& opts) override;
  WorkPtr allreduce_coalesced(const std::vector<Tensor>& tensors,
                              const AllreduceOptions& opts) override;
  WorkPtr allgather_coalesced(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                              const AllgatherOptions& opts) override;
  // Through the store (MonitoredBarrier).
  void monitored_barrier(Milliseconds timeout, bool wait_all_ranks) override;
  uint64_t sequence_number() override;

 private:
  // What a call asks of the group: the fields of its fingerprint.
  struct Request {
    CollectiveKind kind;
    DType dtype = DType::u8;
    uint64_t count = 0;
    ReduceOp op = ReduceOp::sum;
    int32_t root = -1;  // broadcast, reduce, gather and scatter root
    Milliseconds timeout{0};
    bool staged = false;  // CUDA tensors, moved through pinned host slots
  };
  Request request(CollectiveKind kind, const Tensor& tensor, uint64_t count, Milliseconds timeout);

  // How a task runs on the host (its CUDA form runs through the staging slots, taking a
  // collectives::Staging& instead of the Scratch&).
  using Run = std::function<void(Transport&, collectives::Scratch&)>;
  struct Task {
    WorkPtr work;
    Fingerprint fingerprint;
    Milliseconds timeout;
    Run run;  // holds copies of the tensors, keeping their storage alive
  };
  class CollectiveWork;
  // Numbers the request, then runs `host` (or, for a staged request, `staged` through the
  // slots of `device`) on the worker, in issue order.
  template <class Host, class Staged>
  WorkPtr enqueue(const Request& request, Device device, Host host, Staged staged);
  Task number(const Request& request);  // under mu_: the sequence number, fingerprint and Work
  // Worker thread only: the staging slots for tensors on `device` (made on first use).
  collectives::Staging staging(Device device, collectives::Scratch& scratch);
  void run_if_next(const Work* work);  // on a waiting thread: runs it if next and idle
  bool wait_for_task(std::unique_lock<std::mutex>& lock);
  void worker_loop();
  void execute(Task& task);  // runs task.run and completes task.work

  std::string name_;
  Milliseconds timeout_;
  std::string forced_algorithm_;  // RINGGRAD_ALGO
  int hosts_ = 1;                 // how many hosts the group spans
  std::unique_ptr<MeshTransport> transport_;
  CheckedTransport checked_;
  collectives::Scratch scratch_;
  std::unique_ptr<collectives::StagingCopier> copier_;  // for CUDA tensors, on copier_device_
  int copier_device_ = -1;
  std::vector<int> all_peers_;
  std::unique_ptr<PointToPoint> p2p_;  // send and recv, beside the queue

  std::mutex mu_;  // guards the queue, the sequence numbers, busy_ and stopping_
  std::condition_variable wake_;
  std::deque<Task> queue_;
  std::atomic<size_t> queued_{0};
  uint64_t next_seq_ = 0;
  bool stopping_ = false;
  bool busy_ = false;    // a task is executing (on the worker, or on a thread waiting for it)
  std::string failure_;  // whichever thread executes (busy_ makes that one at a time)
  std::thread worker_;
  std::unique_ptr<ProgressWatchdog> watchdog_;  // null for one rank or RINGGRAD_WATCHDOG_S=0
  std::unique_ptr<MonitoredBarrier> monitored_barrier_;
  std::mutex monitored_barrier_mu_;  // one monitored barrier at a time
};

}  // namespace ringgrad::comm
