// RingProcessGroup: argument checks, the issue-ordered queue and the worker thread.
#include "comm/process_group/ring_process_group.h"

#include <chrono>
#include <cstring>

#include "comm/collectives/cuda_staging_copier.h"
#include "comm/collectives/direct_exchange.h"
#include "comm/process_group/argument_checks.h"
#include "comm/transport/wait_policy.h"
#include "core/env.h"
#include "core/error.h"
#include "core/logging.h"

namespace ringgrad::comm {

namespace {

// RINGGRAD_TRANSPORT, or ProcessGroupOptions::transport: how ranks on this host are reached
// (SameHostLink): "auto" (the default: shared memory, else unix sockets), "shm", "unix" or "tcp"
// (as to compare with Gloo or Open MPI over TCP). Ranks on other hosts are reached over TCP
// whatever it says.
SameHostLink same_host_link(const std::string& option) {
  const std::string setting = option.empty() ? env_str("RINGGRAD_TRANSPORT", "auto") : option;
  if (setting == "auto") return SameHostLink::automatic;
  if (setting == "shm") return SameHostLink::shm;
  if (setting == "unix") return SameHostLink::unix_socket;
  if (setting == "tcp") return SameHostLink::tcp;
  RG_THROW(InvalidArgument, option.empty() ? "RINGGRAD_TRANSPORT" : "the transport option", "='",
           setting, "' is not one of: auto, shm, unix, tcp");
}

}  // namespace

// A collective's Work: described from its fingerprint only when someone asks, and run by the
// thread that waits for it if the group has not started it yet.
class RingProcessGroup::CollectiveWork : public Work {
 public:
  CollectiveWork(RingProcessGroup& group, const Fingerprint& fingerprint)
      : group_(group), fingerprint_(fingerprint) {}

 private:
  std::string describe() const override { return comm::describe(fingerprint_); }
  void run_if_not_started() override { group_.run_if_next(this); }
  RingProcessGroup& group_;  // outlives every wait: its destructor completes all its work
  Fingerprint fingerprint_;
};

RingProcessGroup::RingProcessGroup(std::shared_ptr<Store> store, int rank, int size,
                                   const ProcessGroupOptions& options)
    : ProcessGroup(rank, size),
      name_(options.group_name),
      timeout_(options.timeout.count() > 0 ? options.timeout : default_collective_timeout()),
      forced_algorithm_(options.allreduce_algorithm.empty() ? env_str("RINGGRAD_ALGO", "")
                                                            : options.allreduce_algorithm),
      transport_([&] {
        MeshTransportOptions t;
        t.run_id = options.run_id;
        t.generation = options.generation;
        t.setup_timeout = options.setup_timeout.count() > 0 ? options.setup_timeout : timeout_;
        t.ifname = env_get("RINGGRAD_SOCKET_IFNAME");
        t.store_host = options.store_host.empty() ? env_str("MASTER_ADDR", "") : options.store_host;
        t.same_host = same_host_link(options.transport);
        const std::string prefix =
            "ringpg/" + options.group_name + "/g" + std::to_string(options.generation) + "/";
        return std::make_unique<MeshTransport>(store, prefix, rank, size, t);
      }()),
      checked_(*transport_),
      p2p_(std::make_unique<PointToPoint>(
          store, "ringpg/" + options.group_name + "/g" + std::to_string(options.generation) + "/",
          rank, size, transport_->local_interface().address, options.run_id, options.generation)) {
  collectives::choose_allreduce_algorithm(0, size, 1,
                                          forced_algorithm_);  // rejects a bad RINGGRAD_ALGO now
  hosts_ = collectives::count_hosts(*transport_);
  for (int r = 0; r < size; ++r)
    if (r != rank) all_peers_.push_back(r);
  if (const Milliseconds after = watchdog_report_after(); size > 1 && after.count() > 0)
    watchdog_ = std::make_unique<ProgressWatchdog>(
        store, "progress/" + options.group_name + "/g" + std::to_string(options.generation) + "/",
        rank, size, after);
  monitored_barrier_ = std::make_unique<MonitoredBarrier>(
      store,
      "monitored_barrier/" + options.group_name + "/g" + std::to_string(options.generation) + "/",
      rank, size);
  worker_ = std::thread([this] { worker_loop(); });
}

RingProcessGroup::~RingProcessGroup() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  worker_.join();
}

// ---- validate: on the caller's thread ----

RingProcessGroup::Request RingProcessGroup::request(CollectiveKind kind, const Tensor& tensor,
                                                    uint64_t count, Milliseconds timeout) {
  Request r{kind};
  r.dtype = tensor.dtype();
  r.count = count;
  r.timeout = timeout;
  r.staged = tensor.is_cuda();
  return r;
}

// ---- enqueue ----

template <class Host, class Staged>
WorkPtr RingProcessGroup::enqueue(const Request& request, Device device, Host host, Staged staged) {
  std::unique_lock<std::mutex> lock(mu_);
  Task task = number(request);
  if (!request.staged)
    task.run = std::move(host);
  else
    task.run = [this, device, staged = std::move(staged)](Transport& t, collectives::Scratch& s) {
      collectives::Staging slots = staging(device, s);
      staged(t, slots);
    };
  WorkPtr work = task.work;
  queue_.push_back(std::move(task));
  queued_.fetch_add(1, std::memory_order_release);
  lock.unlock();
  wake_.notify_one();
  return work;
}

RingProcessGroup::Task RingProcessGroup::number(const Request& request) {
  Fingerprint fp = make_fingerprint(request.kind, next_seq_++, request.dtype, request.count,
                                    request.op, request.root);
  fp.staged = request.staged ? 1 : 0;
  return Task{std::make_shared<CollectiveWork>(*this, fp), fp,
              request.timeout.count() > 0 ? request.timeout : timeout_, Run()};
}

// Note [Running a collective where it is waited]
// Every collective is queued and the worker thread runs the queue in issue order, so a call
// returns at once and the collective progresses while the caller computes (DDP's overlap). But
// a caller that waits at once (a blocking call, or async_op=False in PyTorch) would sleep while
// the worker runs it, and the hand-over and completion cost two thread wake-ups, several times
// a small collective's transfer. So wait() on a collective that is next in the queue while the
// group is idle takes it out and runs it on the waiting thread: issue order is kept (nothing is
// ahead of it) and the worker stays off while it runs (busy_). A timed wait never does this,
// so it can give up at its timeout while the worker runs the collective.
void RingProcessGroup::run_if_next(const Work* work) {
  std::unique_lock<std::mutex> lock(mu_);
  if (busy_ || queue_.empty() || queue_.front().work.get() != work) return;
  Task task = std::move(queue_.front());
  queue_.pop_front();
  queued_.fetch_sub(1, std::memory_order_relaxed);
  busy_ = true;
  lock.unlock();
  execute(task);
  lock.lock();
  busy_ = false;
  const bool more = !queue_.empty();
  lock.unlock();
  if (more) wake_.notify_one();
}

collectives::Staging RingProcessGroup::staging(Device device, collectives::Scratch& scratch) {
  if (!copier_ || copier_device_ != device.index) {
    copier_.reset();  // frees the old pinned slots before making new ones
    copier_ = collectives::make_cuda_staging_copier(device.index);
    copier_device_ = device.index;
  }
  return collectives::Staging{*copier_, scratch, collectives::kStagingChunkBytes};
}

// ---- run: on the worker thread ----

// Waits until a task may run (true, lock held) or the group is stopping with nothing left
// (false). Spins briefly first (kWorkerSpin, wait_policy.h).
bool RingProcessGroup::wait_for_task(std::unique_lock<std::mutex>& lock) {
  spin_until([&] { return queued_.load(std::memory_order_acquire) > 0; }, kWorkerSpin);
  lock.lock();
  wake_.wait(lock, [&] { return (!queue_.empty() && !busy_) || (stopping_ && queue_.empty()); });
  return !queue_.empty();
}

void RingProcessGroup::worker_loop() {
  std::unique_lock<std::mutex> lock(mu_, std::defer_lock);
  while (wait_for_task(lock)) {
    Task task = std::move(queue_.front());
    queue_.pop_front();
    queued_.fetch_sub(1, std::memory_order_relaxed);
    busy_ = true;
    lock.unlock();
    execute(task);
    lock.lock();
    busy_ = false;
    lock.unlock();
  }
}

void RingProcessGroup::execute(Task& task) {
  if (!failure_.empty()) {
    task.work->complete(std::make_exception_ptr(
        Error(str_cat(task.work->description(), " refused: process group '", name_, "' (rank ",
                      rank(), ") is unusable after an earlier failure: ", failure_))));
    return;
  }
  ProgressWatchdog* watchdog = watchdog_.get();
  if (watchdog) watchdog->entered(task.fingerprint);
  try {
    const auto deadline = Clock::now() + task.timeout;
    checked_.start(task.fingerprint, all_peers_, deadline);
    task.run(checked_, scratch_);
    checked_.finish();
    task.work->complete();
  } catch (const std::exception& e) {
    // The sentence: it is quoted in later refusals and in the peers' errors, which reach users;
    // where it was thrown stays in this Work's own error.
    failure_ = user_message(e);
    transport_->abort(failure_);
    task.work->complete(std::current_exception());
  }
  if (watchdog) watchdog->left();
}

// ---- the collectives: validate, enqueue, and the algorithm in its host and staged forms ----

using collectives::Scratch;
using collectives::Staging;

WorkPtr RingProcessGroup::allreduce(const Tensor& tensor, const AllreduceOptions& opts) {
  return allreduce(tensor, tensor, opts);
}

WorkPtr RingProcessGroup::allreduce(const Tensor& input, const Tensor& output,
                                    const AllreduceOptions& opts) {
  check_pair(input, output, "allreduce", 1, 1);
  const auto count = static_cast<size_t>(input.numel());
  Request r = request(CollectiveKind::allreduce, input, count, opts.timeout);
  r.op = opts.op;
  return enqueue(
      r, input.device(),
      [this, input, output, count, op = r.op](Transport& t, Scratch& s) {
        const auto algorithm = collectives::choose_allreduce_algorithm(input.nbytes(), t.size(),
                                                                       hosts_, forced_algorithm_);
        collectives::allreduce_function(algorithm)(t, input.raw_data(), output.raw_data(), count,
                                                   input.dtype(), op, s);
      },
      [this, input, output, count, op = r.op](Transport& t, Staging& st) {
        collectives::staged_allreduce(t, st, input.raw_data(), output.raw_data(), count,
                                      input.dtype(), op, forced_algorithm_);
      });
}

WorkPtr RingProcessGroup::broadcast(const Tensor& tensor, const BroadcastOptions& opts) {
  return broadcast(tensor, tensor, opts);
}

WorkPtr RingProcessGroup::broadcast(const Tensor& input, const Tensor& output,
                                    const BroadcastOptions& opts) {
  check_pair(input, output, "broadcast", 1, 1);
  check_rank(opts.root, size(), "broadcast", "root");
  Request r = request(CollectiveKind::broadcast, input, input.numel(), opts.timeout);
  r.root = opts.root;
  return enqueue(
      r, input.device(),
      [input, output, root = r.root](Transport& t, Scratch&) {
        collectives::ring_broadcast(t, input.raw_data(), output.raw_data(), input.nbytes(), root);
      },
      [input, output, root = r.root](Transport& t, Staging& st) {
        collectives::staged_broadcast(t, st, input.raw_data(), output.raw_data(), input.nbytes(),
                                      root);
      });
}

WorkPtr RingProcessGroup::reduce(const Tensor& tensor, const ReduceOptions& opts) {
  return reduce(tensor, tensor, opts);
}

WorkPtr RingProcessGroup::reduce(const Tensor& input, const Tensor& output,
                                 const ReduceOptions& opts) {
  check_pair(input, output, "reduce", 1, 1);
  check_rank(opts.root, size(), "reduce", "root");
  const auto count = static_cast<size_t>(input.numel());
  Request r = request(CollectiveKind::reduce, input, count, opts.timeout);
  r.op = opts.op;
  r.root = opts.root;
  return enqueue(
      r, input.device(),
      [input, output, count, op = r.op, root = r.root](Transport& t, Scratch&) {
        collectives::ring_reduce(t, input.raw_data(), output.raw_data(), count, input.dtype(), op,
                                 root);
      },
      [input, output, count, op = r.op, root = r.root](Transport& t, Staging& st) {
        collectives::staged_reduce(t, st, input.raw_data(), output.raw_data(), count, input.dtype(),
                                   op, root);
      });
}

WorkPtr RingProcessGroup::allgather(const Tensor& input, const Tensor& output,
                                    const AllgatherOptions& opts) {
  check_pair(input, output, "allgather", size(), 1);
  return enqueue(
      request(CollectiveKind::allgather, input, input.numel(), opts.timeout), input.device(),
      [input, output](Transport& t, Scratch&) {
        collectives::ring_allgather(t, input.raw_data(), output.raw_data(), input.nbytes());
      },
      [input, output](Transport& t, Staging& st) {
        collectives::staged_allgather(t, st, input.raw_data(), output.raw_data(), input.nbytes());
      });
}

WorkPtr RingProcessGroup::reduce_scatter(const Tensor& input, const Tensor& output,
                                         const ReduceScatterOptions& opts) {
  check_pair(input, output, "reduce_scatter", 1, size());
  const auto count = static_cast<size_t>(output.numel());
  Request r = request(CollectiveKind::reduce_scatter, input, count, opts.timeout);
  r.op = opts.op;
  return enqueue(
      r, input.device(),
      [input, output, count, op = r.op](Transport& t, Scratch& s) {
        collectives::ring_reduce_scatter(t, input.raw_data(), output.raw_data(), count,
                                         input.dtype(), op, s);
      },
      [input, output, count, op = r.op](Transport& t, Staging& st) {
        collectives::staged_reduce_scatter(t, st, input.raw_data(), output.raw_data(), count,
                                           input.dtype(), op);
      });
}

WorkPtr RingProcessGroup::barrier(const BarrierOptions& opts) {
  // The fingerprint exchange every task starts with is the barrier; nothing else moves.
  Request r{CollectiveKind::barrier};
  r.timeout = opts.timeout;
  return enqueue(
      r, Device::cpu(), [](Transport&, Scratch&) {}, [](Transport&, Staging&) {});
}

// Not queued: PointToPoint matches them per (peer, direction, tag) on its own thread. CUDA
// tensors go through host memory: a send's is copied now, a receive's once its bytes are in.
WorkPtr RingProcessGroup::send(const Tensor& tensor, int dst, const SendRecvOptions& opts) {
  check_tensor(tensor, "send", "input");
  check_peer(dst, rank(), size(), true);
  auto host = std::make_shared<Tensor>(tensor.to(Device::cpu()));
  return p2p_->send(dst, opts.tag, host->raw_data(), host->nbytes(),
                    opts.timeout.count() > 0 ? opts.timeout : timeout_, host);
}

WorkPtr RingProcessGroup::recv(const Tensor& tensor, int src, const SendRecvOptions& opts) {
  check_tensor(tensor, "recv", "output");
  if (src != kAnySource) check_peer(src, rank(), size(), false);
  auto host = std::make_shared<Tensor>(
      tensor.is_cuda() ? Tensor::empty(tensor.shape(), tensor.dtype()) : tensor);
  std::function<void()> finish;
  if (tensor.is_cuda()) finish = [tensor, host] { Tensor(tensor).copy_from(*host); };
  return p2p_->recv(src, opts.tag, host->raw_data(), host->nbytes(),
                    opts.timeout.count() > 0 ? opts.timeout : timeout_, host, std::move(finish));
}

// ---- gather, scatter, all-to-all, the coalesced forms (host tensors only) ----

namespace {

void check_host(const Tensor& t, const char* operation, const char* role) {
  check_tensor(t, operation, role);
  if (t.is_cuda())
    RG_THROW(InvalidArgument, operation, ": the ", role, " is on ", t.device().str(),
             "; the ring backend runs ", operation,
             " on host tensors only (copy to the CPU first)");
}

// The staged form of a host-only collective: never run (check_host refused CUDA tensors).
void no_staged_form(Transport&, Staging&) {}

char* bytes_of(const Tensor& t) { return static_cast<char*>(t.raw_data()); }

}  // namespace

WorkPtr RingProcessGroup::gather(const Tensor& input, const Tensor& output,
                                 const GatherOptions& opts) {
  check_host(input, "gather", "input");
  check_rank(opts.root, size(), "gather", "root");
  if (rank() == opts.root) {
    check_host(output, "gather", "output");
    check_pair(input, output, "gather", size(), 1);
  }
  Request r = request(CollectiveKind::gather, input, input.numel(), opts.timeout);
  r.root = opts.root;
  return enqueue(
      r, Device::cpu(),
      [input, output, root = r.root](Transport& t, Scratch&) {
        collectives::linear_gather(t, input.raw_data(),
                                   output.defined() ? output.raw_data() : nullptr, input.nbytes(),
                                   root);
      },
      no_staged_form);
}

WorkPtr RingProcessGroup::scatter(const Tensor& input, const Tensor& output,
                                  const ScatterOptions& opts) {
  check_host(output, "scatter", "output");
  check_rank(opts.root, size(), "scatter", "root");
  if (rank() == opts.root) {
    check_host(input, "scatter", "input");
    if (input.dtype() != output.dtype())
      RG_THROW(InvalidArgument, "scatter: input is ", dtype_name(input.dtype()), " but output is ",
               dtype_name(output.dtype()));
    if (input.numel() != output.numel() * size())
      RG_THROW(InvalidArgument, "scatter: the root's input has ", input.numel(),
               " elements, expected ", output.numel() * size(), " (", size(), " blocks of ",
               output.numel(), ")");
  }
  Request r = request(CollectiveKind::scatter, output, output.numel(), opts.timeout);
  r.root = opts.root;
  return enqueue(
      r, Device::cpu(),
      [input, output, root = r.root](Transport& t, Scratch&) {
        collectives::linear_scatter(t, input.defined() ? input.raw_data() : nullptr,
                                    output.raw_data(), output.nbytes(), root);
      },
      no_staged_form);
}

WorkPtr RingProcessGroup::alltoall(const Tensor& input, const Tensor& output,
                                   const AlltoallOptions& opts) {
  check_host(input, "alltoall", "input");
  check_host(output, "alltoall", "output");
  if (input.dtype() != output.dtype())
    RG_THROW(InvalidArgument, "alltoall: input is ", dtype_name(input.dtype()), " but output is ",
             dtype_name(output.dtype()));
  if (input.numel() > 0 && input.raw_data() == output.raw_data())
    RG_THROW(InvalidArgument,
             "alltoall: input and output are the same buffer (it runs out of place)");
  const size_t elem = dtype_size(input.dtype());
  collectives::AlltoallLayout layout;
  layout.send =
      collectives::split_bytes(opts.send_splits, input.numel(), elem, size(), "alltoall", "input");
  layout.recv = collectives::split_bytes(opts.recv_splits, output.numel(), elem, size(), "alltoall",
                                         "output");
  layout.send_at = collectives::offsets_of(layout.send);
  layout.recv_at = collectives::offsets_of(layout.recv);
  return enqueue(
      request(CollectiveKind::alltoall, input, 0, opts.timeout), Device::cpu(),
      [input, output, layout = std::move(layout)](Transport& t, Scratch&) {
        collectives::pairwise_alltoall(t, input.raw_data(), output.raw_data(), layout);
      },
      no_staged_form);
}

WorkPtr RingProcessGroup::allreduce_coalesced(const std::vector<Tensor>& tensors,
                                              const AllreduceOptions& opts) {
  if (tensors.empty()) RG_THROW(InvalidArgument, "allreduce_coalesced: no tensors");
  size_t count = 0;
  for (const Tensor& t : tensors) {
    check_host(t, "allreduce_coalesced", "tensor");
    if (t.dtype() != tensors[0].dtype())
      RG_THROW(InvalidArgument, "allreduce_coalesced: the tensors mix ",
               dtype_name(tensors[0].dtype()), " and ", dtype_name(t.dtype()),
               " (one all-reduce takes one dtype)");
    count += static_cast<size_t>(t.numel());
  }
  Request r = request(CollectiveKind::allreduce_coalesced, tensors[0], count, opts.timeout);
  r.op = opts.op;
  return enqueue(
      r, Device::cpu(),
      [this, tensors, count, op = r.op](Transport& t, Scratch& s) {
        // The tensors, end to end, in one buffer: one all-reduce instead of one per tensor.
        const DType dtype = tensors[0].dtype();
        std::vector<char> flat(count * dtype_size(dtype));
        size_t at = 0;
        for (const Tensor& x : tensors) {
          std::memcpy(flat.data() + at, x.raw_data(), x.nbytes());
          at += x.nbytes();
        }
        const auto algorithm = collectives::choose_allreduce_algorithm(flat.size(), t.size(),
                                                                       hosts_, forced_algorithm_);
        collectives::allreduce_function(algorithm)(t, flat.data(), flat.data(), count, dtype, op,
                                                   s);
        at = 0;
        for (const Tensor& x : tensors) {
          std::memcpy(x.raw_data(), flat.data() + at, x.nbytes());
          at += x.nbytes();
        }
      },
      no_staged_form);
}

WorkPtr RingProcessGroup::allgather_coalesced(const std::vector<Tensor>& inputs,
                                              const std::vector<Tensor>& outputs,
                                              const AllgatherOptions& opts) {
  const size_t k = inputs.size();
  if (k == 0) RG_THROW(InvalidArgument, "allgather_coalesced: no input tensors");
  if (outputs.size() != k * size())
    RG_THROW(InvalidArgument, "allgather_coalesced: ", outputs.size(), " output tensors for ", k,
             " inputs on ", size(), " ranks (expected ", k * size(), ")");
  size_t bytes = 0;
  for (size_t i = 0; i < k; ++i) {
    check_host(inputs[i], "allgather_coalesced", "input");
    for (int q = 0; q < size(); ++q) {
      check_host(outputs[q * k + i], "allgather_coalesced", "output");
      check_pair(inputs[i], outputs[q * k + i], "allgather_coalesced", 1, 1);
    }
    bytes += inputs[i].nbytes();
  }
  Tensor first = inputs[0];
  Request r = request(CollectiveKind::allgather_coalesced, first, bytes, opts.timeout);
  r.dtype = DType::u8;  // the inputs may mix dtypes: the fingerprint counts bytes
  return enqueue(
      r, Device::cpu(),
      [inputs, outputs, bytes](Transport& t, Scratch&) {
        // This rank's inputs end to end (`bytes`), gathered into n such blocks, then copied out.
        const size_t k = inputs.size();
        std::vector<char> gathered(bytes * t.size());
        char* mine = gathered.data() + t.rank() * bytes;
        for (const Tensor& x : inputs) {
          std::memcpy(mine, x.raw_data(), x.nbytes());
          mine += x.nbytes();
        }
        collectives::ring_allgather(t, gathered.data() + t.rank() * bytes, gathered.data(), bytes);
        for (int q = 0; q < t.size(); ++q) {
          const char* block = gathered.data() + q * bytes;
          for (size_t i = 0; i < k; ++i) {
            std::memcpy(bytes_of(outputs[q * k + i]), block, inputs[i].nbytes());
            block += inputs[i].nbytes();
          }
        }
      },
      no_staged_form);
}

void RingProcessGroup::monitored_barrier(Milliseconds timeout, bool wait_all_ranks) {
  std::lock_guard<std::mutex> lock(monitored_barrier_mu_);
  monitored_barrier_->run(timeout, wait_all_ranks);
}

uint64_t RingProcessGroup::sequence_number() {
  std::lock_guard<std::mutex> lock(mu_);
  return next_seq_;
}

}  // namespace ringgrad::comm
