// RingProcessGroup: argument checks, the issue-ordered queue and the worker thread.
#include "comm/process_group/ring_process_group.h"

#include <chrono>

#include "comm/ring/cuda_staging_copier.h"
#include "comm/store/prefix_store.h"
#include "comm/store/tcp_store.h"
#include "core/env.h"
#include "core/error.h"
#include "core/logging.h"

namespace ringgrad::comm {

namespace {

constexpr auto kWorkerSpin = std::chrono::microseconds(5);

void check_tensor(const Tensor& t, const char* operation, const char* role) {
  if (!t.defined()) RG_THROW(InvalidArgument, operation, ": the ", role, " tensor is undefined");
}

void check_pair(const Tensor& in, const Tensor& out, const char* operation, int64_t out_per_in_num,
                int64_t out_per_in_den) {
  check_tensor(in, operation, "input");
  check_tensor(out, operation, "output");
  if (in.dtype() != out.dtype())
    RG_THROW(InvalidArgument, operation, ": input is ", dtype_name(in.dtype()), " but output is ",
             dtype_name(out.dtype()));
  if (in.device() != out.device())
    RG_THROW(InvalidArgument, operation, ": input is on ", in.device().str(), " but output is on ",
             out.device().str());
  if (out.numel() * out_per_in_den != in.numel() * out_per_in_num)
    RG_THROW(InvalidArgument, operation, ": output has ", out.numel(), " elements, expected ",
             in.numel() * out_per_in_num / out_per_in_den, " (input has ", in.numel(), ")");
}

void check_rank(int r, int size, const char* operation, const char* role) {
  if (r < 0 || r >= size)
    RG_THROW(InvalidArgument, operation, ": ", role, " ", r, " is outside the group of size ", size);
}

// The host the store lives on, which the transport routes towards to pick its interface: a
// TcpStore's server (under any PrefixStores), else MASTER_ADDR, else "" (an in-process store,
// so all ranks share this host).
std::string store_host_of(const Store* store) {
  while (auto* prefixed = dynamic_cast<const PrefixStore*>(store)) store = prefixed->base().get();
  if (auto* tcp = dynamic_cast<const TcpStore*>(store)) {
    const std::string address = tcp->address();
    return address.substr(0, address.rfind(':'));
  }
  return env_str("MASTER_ADDR", "");
}

// RINGGRAD_TRANSPORT: "auto" (the default: unix sockets to ranks on this host, TCP to the
// others) or "tcp" (TCP to every rank, as to compare with Gloo or Open MPI over TCP).
bool unix_sockets_on_same_host() {
  const std::string setting = env_str("RINGGRAD_TRANSPORT", "auto");
  if (setting != "auto" && setting != "tcp")
    RG_THROW(InvalidArgument, "RINGGRAD_TRANSPORT='", setting, "' is not one of: auto, tcp");
  return setting == "auto";
}

}  // namespace

RingProcessGroup::RingProcessGroup(std::shared_ptr<Store> store, int rank, int size,
                                   const ProcessGroupOptions& options)
    : ProcessGroup(rank, size), name_(options.group_name),
      timeout_(options.timeout.count() > 0 ? options.timeout : default_collective_timeout()),
      forced_algorithm_(options.allreduce_algorithm.empty() ? env_str("RINGGRAD_ALGO", "")
                                                           : options.allreduce_algorithm),
      transport_([&] {
        tcp::TcpTransportOptions t;
        t.run_id = options.run_id;
        t.generation = options.generation;
        t.setup_timeout = options.setup_timeout.count() > 0 ? options.setup_timeout : timeout_;
        t.ifname = env_get("RINGGRAD_SOCKET_IFNAME");
        t.store_host = store_host_of(store.get());
        t.unix_sockets_on_same_host = unix_sockets_on_same_host();
        const std::string prefix =
            "ringpg/" + options.group_name + "/g" + std::to_string(options.generation) + "/";
        return std::make_unique<tcp::TcpTransport>(std::move(store), prefix, rank, size, t);
      }()),
      checked_(*transport_), partner_(1, 0), sent_to_(static_cast<size_t>(size), 0),
      received_from_(static_cast<size_t>(size), 0) {
  ring::choose_allreduce_algorithm(0, size, forced_algorithm_);  // rejects a bad RINGGRAD_ALGO now
  for (int r = 0; r < size; ++r)
    if (r != rank) all_peers_.push_back(r);
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

WorkPtr RingProcessGroup::enqueue(CollectiveKind kind, DType dtype, uint64_t count, ReduceOp op,
                                  int32_t root, Direction direction, int peer, Milliseconds timeout,
                                  bool staged, Run run) {
  std::unique_lock<std::mutex> lock(mu_);
  // Collectives count per group; a send and its recv count per ordered pair of ranks.
  uint64_t& counter = direction == Direction::send   ? sent_to_[peer]
                      : direction == Direction::recv ? received_from_[peer]
                                                     : next_seq_;
  Fingerprint fp = make_fingerprint(kind, counter++, dtype, count, op, root);
  fp.staged = staged ? 1 : 0;
  auto work = std::make_shared<Work>(describe(fp));
  Task task{work, fp, peer, timeout.count() > 0 ? timeout : timeout_, std::move(run)};
  // A small host collective with nothing ahead of it runs right here: handing it to the worker
  // and its completion back costs two thread wake-ups, several times the transfer itself. Order
  // is kept (the queue is empty and the worker idle), and the worker waits while we run.
  const bool small = count * dtype_size(dtype) <= ring::kTreeMaxBytes;
  if (direction == Direction::all && !staged && small && queue_.empty() && !busy_) {
    busy_ = true;
    lock.unlock();
    execute(task);
    lock.lock();
    busy_ = false;
    const bool more = !queue_.empty();
    lock.unlock();
    if (more) wake_.notify_one();
    return work;
  }
  queue_.push_back(std::move(task));
  queued_.fetch_add(1, std::memory_order_release);
  lock.unlock();
  wake_.notify_one();
  return work;
}

ring::Staging RingProcessGroup::staging(Device device, ring::Scratch& scratch) {
  if (!copier_ || copier_device_ != device.index) {
    copier_.reset();  // frees the old pinned slots before making new ones
    copier_ = ring::make_cuda_staging_copier(device.index);
    copier_device_ = device.index;
  }
  return ring::Staging{*copier_, scratch, ring::kStagingChunkBytes};
}

void RingProcessGroup::worker_loop() {
  for (;;) {
    const auto spin_until = std::chrono::steady_clock::now() + kWorkerSpin;
    while (queued_.load(std::memory_order_acquire) == 0 &&
           std::chrono::steady_clock::now() < spin_until) {
    }
    std::unique_lock<std::mutex> lock(mu_);
    wake_.wait(lock, [&] { return (!queue_.empty() && !busy_) || (stopping_ && queue_.empty()); });
    if (queue_.empty()) return;
    Task task = std::move(queue_.front());
    queue_.pop_front();
    queued_.fetch_sub(1, std::memory_order_relaxed);
    busy_ = true;
    lock.unlock();
    execute(task);
    lock.lock();
    busy_ = false;
  }
}

void RingProcessGroup::execute(Task& task) {
  const std::string operation = task.work->description();
  if (!failure_.empty()) {
    task.work->complete(std::make_exception_ptr(Error(str_cat(
        operation, " refused: process group '", name_, "' (rank ", rank(),
        ") is unusable after an earlier failure: ", failure_))));
    return;
  }
  try {
    const auto deadline = Clock::now() + task.timeout;
    if (task.peer >= 0) partner_[0] = task.peer;
    checked_.start(task.fingerprint, task.peer >= 0 ? partner_ : all_peers_, operation, deadline);
    task.run(checked_, scratch_);
    checked_.finish();
    task.work->complete();
  } catch (const std::exception& e) {
    failure_ = e.what();
    transport_->abort(failure_);
    task.work->complete(std::current_exception());
  }
}

// ---- collectives: check on the caller's thread, run on the worker ----

WorkPtr RingProcessGroup::allreduce(const Tensor& tensor, const AllreduceOptions& opts) {
  return allreduce(tensor, tensor, opts);
}

WorkPtr RingProcessGroup::allreduce(const Tensor& input, const Tensor& output,
                                    const AllreduceOptions& opts) {
  check_pair(input, output, "allreduce", 1, 1);
  const auto count = static_cast<size_t>(input.numel());
  const ReduceOp op = opts.op;
  return enqueue(CollectiveKind::allreduce, input.dtype(), count, op, -1, Direction::all, -1, opts.timeout,
                 input.is_cuda(), [this, input, output, count, op](Transport& t, ring::Scratch& s) {
                   if (input.is_cuda()) {
                     ring::Staging st = staging(input.device(), s);
                     ring::staged_allreduce(t, st, input.raw_data(), output.raw_data(), count,
                                            input.dtype(), op, forced_algorithm_);
                     return;
                   }
                   const auto algo = ring::choose_allreduce_algorithm(
                       input.nbytes(), t.size(), forced_algorithm_);
                   ring::allreduce_function(algo)(t, input.raw_data(), output.raw_data(), count,
                                                  input.dtype(), op, s);
                 });
}

WorkPtr RingProcessGroup::broadcast(const Tensor& tensor, const BroadcastOptions& opts) {
  return broadcast(tensor, tensor, opts);
}

WorkPtr RingProcessGroup::broadcast(const Tensor& input, const Tensor& output,
                                    const BroadcastOptions& opts) {
  check_pair(input, output, "broadcast", 1, 1);
  check_rank(opts.root, size(), "broadcast", "root");
  const int root = opts.root;
  return enqueue(CollectiveKind::broadcast, input.dtype(), static_cast<uint64_t>(input.numel()),
                 ReduceOp::sum, root, Direction::all, -1, opts.timeout, input.is_cuda(),
                 [this, input, output, root](Transport& t, ring::Scratch& s) {
                   if (input.is_cuda()) {
                     ring::Staging st = staging(input.device(), s);
                     ring::staged_broadcast(t, st, input.raw_data(), output.raw_data(), input.nbytes(), root);
                     return;
                   }
                   ring::ring_broadcast(t, input.raw_data(), output.raw_data(), input.nbytes(), root);
                 });
}

WorkPtr RingProcessGroup::reduce(const Tensor& tensor, const ReduceOptions& opts) {
  return reduce(tensor, tensor, opts);
}

WorkPtr RingProcessGroup::reduce(const Tensor& input, const Tensor& output, const ReduceOptions& opts) {
  check_pair(input, output, "reduce", 1, 1);
  check_rank(opts.root, size(), "reduce", "root");
  const auto count = static_cast<size_t>(input.numel());
  const ReduceOp op = opts.op;
  const int root = opts.root;
  return enqueue(CollectiveKind::reduce, input.dtype(), count, op, root, Direction::all, -1, opts.timeout,
                 input.is_cuda(), [this, input, output, count, op, root](Transport& t, ring::Scratch& s) {
                   if (input.is_cuda()) {
                     ring::Staging st = staging(input.device(), s);
                     ring::staged_reduce(t, st, input.raw_data(), output.raw_data(), count,
                                         input.dtype(), op, root);
                     return;
                   }
                   ring::ring_reduce(t, input.raw_data(), output.raw_data(), count, input.dtype(),
                                     op, root, s);
                 });
}

WorkPtr RingProcessGroup::allgather(const Tensor& input, const Tensor& output,
                                    const AllgatherOptions& opts) {
  check_pair(input, output, "allgather", size(), 1);
  return enqueue(CollectiveKind::allgather, input.dtype(), static_cast<uint64_t>(input.numel()),
                 ReduceOp::sum, -1, Direction::all, -1, opts.timeout, input.is_cuda(),
                 [this, input, output](Transport& t, ring::Scratch& s) {
                   if (input.is_cuda()) {
                     ring::Staging st = staging(input.device(), s);
                     ring::staged_allgather(t, st, input.raw_data(), output.raw_data(), input.nbytes());
                     return;
                   }
                   ring::ring_allgather(t, input.raw_data(), output.raw_data(), input.nbytes(), s);
                 });
}

WorkPtr RingProcessGroup::reduce_scatter(const Tensor& input, const Tensor& output,
                                         const ReduceScatterOptions& opts) {
  check_pair(input, output, "reduce_scatter", 1, size());
  const auto count = static_cast<size_t>(output.numel());
  const ReduceOp op = opts.op;
  return enqueue(CollectiveKind::reduce_scatter, input.dtype(), count, op, -1, Direction::all, -1, opts.timeout,
                 input.is_cuda(), [this, input, output, count, op](Transport& t, ring::Scratch& s) {
                   if (input.is_cuda()) {
                     ring::Staging st = staging(input.device(), s);
                     ring::staged_reduce_scatter(t, st, input.raw_data(), output.raw_data(), count,
                                                 input.dtype(), op);
                     return;
                   }
                   ring::ring_reduce_scatter(t, input.raw_data(), output.raw_data(), count,
                                             input.dtype(), op, s);
                 });
}

WorkPtr RingProcessGroup::barrier(const BarrierOptions& opts) {
  return enqueue(CollectiveKind::barrier, DType::u8, 0, ReduceOp::sum, -1, Direction::all, -1, opts.timeout,
                 false, [](Transport&, ring::Scratch&) {});
}

WorkPtr RingProcessGroup::send(const Tensor& tensor, int dst, const SendRecvOptions& opts) {
  check_tensor(tensor, "send", "input");
  check_rank(dst, size(), "send", "destination");
  RG_CHECK(dst != rank(), "send: rank ", rank(), " cannot send to itself");
  return enqueue(CollectiveKind::send_recv, tensor.dtype(), static_cast<uint64_t>(tensor.numel()),
                 ReduceOp::sum, opts.tag, Direction::send, dst, opts.timeout, tensor.is_cuda(),
                 [this, tensor, dst](Transport& t, ring::Scratch& s) {
                   if (tensor.is_cuda()) {
                     ring::Staging st = staging(tensor.device(), s);
                     ring::staged_send(t, st, tensor.raw_data(), tensor.nbytes(), dst);
                     return;
                   }
                   t.post_send(dst, tensor.raw_data(), tensor.nbytes());
                   t.wait_all();
                 });
}

WorkPtr RingProcessGroup::recv(const Tensor& tensor, int src, const SendRecvOptions& opts) {
  check_tensor(tensor, "recv", "output");
  check_rank(src, size(), "recv", "source");
  RG_CHECK(src != rank(), "recv: rank ", rank(), " cannot receive from itself");
  return enqueue(CollectiveKind::send_recv, tensor.dtype(), static_cast<uint64_t>(tensor.numel()),
                 ReduceOp::sum, opts.tag, Direction::recv, src, opts.timeout, tensor.is_cuda(),
                 [this, tensor, src](Transport& t, ring::Scratch& s) {
                   if (tensor.is_cuda()) {
                     ring::Staging st = staging(tensor.device(), s);
                     ring::staged_recv(t, st, tensor.raw_data(), tensor.nbytes(), src);
                     return;
                   }
                   t.post_recv(src, tensor.raw_data(), tensor.nbytes());
                   t.wait_recv(src);
                 });
}

}  // namespace ringgrad::comm
