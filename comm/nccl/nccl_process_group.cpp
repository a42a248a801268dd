// NcclProcessGroup: unique-id exchange through the store, tensor checks, and each collective
// as one NCCL call on the group's stream.
#include "comm/nccl/nccl_process_group.h"

#include <nccl.h>

#include <cstring>

#include "comm/nccl/nccl_work.h"
#include "comm/process_group/argument_checks.h"
#include "core/cuda_check.h"
#include "core/cuda_memory.h"
#include "core/env.h"

namespace ringgrad::comm {

namespace {

ncclDataType_t nccl_dtype(DType d) {
  switch (d) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8: return ncclUint8;
  }
  RG_THROW(InvalidArgument, "nccl backend: no NCCL type for dtype ", static_cast<int>(d));
}

// The NCCL reduction for op in a group of world_size ranks. A one-rank average is a sum: NCCL
// runs ncclAvg on floats as a pre-multiplied sum, which with one rank goes to a separate kernel
// that splits the count into 32 equal runs rounded down and leaves the remainder unwritten (seen
// on an H200 with PyTorch 2.11's NCCL wheel: the last 3 of 2^20 + 3 elements out of place), while
// ncclSum with one rank is a plain copy.
ncclRedOp_t nccl_op(ReduceOp op, int world_size) {
  switch (op) {
    case ReduceOp::sum: return ncclSum;
    case ReduceOp::avg: return world_size == 1 ? ncclSum : ncclAvg;
    case ReduceOp::prod: return ncclProd;
    case ReduceOp::min: return ncclMin;
    case ReduceOp::max: return ncclMax;
  }
  RG_THROW(InvalidArgument, "nccl backend: no NCCL reduction for op ", static_cast<int>(op));
}

// The GPU of this rank: NCCL allows one rank per device, so LOCAL_RANK picks it (torchrun's rule).
int choose_device(const ProcessGroupOptions& options) {
  const int count = cuda_device_count();
  if (count == 0) RG_THROW(Error, "nccl backend: no CUDA device: ", cuda_unavailable_reason());
  const bool from_env = options.cuda_device < 0;
  const int device = from_env ? static_cast<int>(env_int("LOCAL_RANK", 0)) : options.cuda_device;
  if (device < 0 || device >= count)
    RG_THROW(InvalidArgument, "nccl backend: ", from_env ? "LOCAL_RANK" : "cuda_device", " = ",
             device, " but this host has ", count,
             " visible CUDA device(s); NCCL needs one GPU "
             "per rank, so start at most ",
             count, " ranks per host (or use the ring backend)");
  return device;
}

// Rank 0 makes the id; the others wait for it in the store, under the group's name and
// generation so a restarted job (new generation) never joins a stale communicator.
ncclUniqueId exchange_unique_id(Store& store, const ProcessGroupOptions& options, int rank,
                                Milliseconds timeout) {
  const std::string key =
      str_cat("ncclpg/", options.group_name, "/g", options.generation, "/unique_id");
  ncclUniqueId id;
  if (rank == 0) {
    NCCL_CHECK(ncclGetUniqueId(&id));
    store.set(key, std::string(id.internal, sizeof id.internal));
    return id;
  }
  const std::string bytes = store.get(key, timeout);
  if (bytes.size() != sizeof id.internal)
    RG_THROW(Error, "nccl backend: store key '", key, "' holds ", bytes.size(),
             " bytes, not an ncclUniqueId (", sizeof id.internal, " bytes)");
  std::memcpy(id.internal, bytes.data(), sizeof id.internal);
  return id;
}

}  // namespace

NcclProcessGroup::NcclProcessGroup(std::shared_ptr<Store> store, int rank, int size,
                                   const ProcessGroupOptions& options)
    : ProcessGroup(rank, size),
      name_(options.group_name),
      timeout_(options.timeout.count() > 0 ? options.timeout : default_collective_timeout()) {
  RG_CHECK(store != nullptr, "nccl backend: no store");
  const int device = choose_device(options);
  const Milliseconds setup = options.setup_timeout.count() > 0 ? options.setup_timeout : timeout_;
  const auto deadline = Clock::now() + setup;
  const ncclUniqueId id = exchange_unique_id(*store, options, rank, setup);
  comm_ = std::make_shared<NcclComm>(
      id, rank, size, device, deadline,
      str_cat("rank ", rank, " of ", size, " (group '", name_, "', cuda:", device, ")"));
  comm_->set_teardown_timeout(timeout_);
  barrier_value_ = Tensor::zeros({1}, DType::f32, Device::cuda(device));
}

NcclProcessGroup::~NcclProcessGroup() = default;

template <class Call>
WorkPtr NcclProcessGroup::issue(CollectiveKind kind, DType dtype, uint64_t count, ReduceOp op,
                                int32_t root_or_tag, Milliseconds timeout,
                                std::vector<Tensor> tensors, Call&& call) {
  std::lock_guard<std::mutex> lock(mu_);
  const Fingerprint fp = make_fingerprint(kind, seq_++, dtype, count, op, root_or_tag);
  const auto deadline = Clock::now() + (timeout.count() > 0 ? timeout : timeout_);
  auto work = std::make_shared<NcclWork>(describe(fp), comm_, deadline, std::move(tensors));
  comm_->enqueue(work->description(), deadline, std::forward<Call>(call),
                 [&](cudaStream_t stream) { CUDA_CHECK(cudaEventRecord(work->event(), stream)); });
  return work;
}

void NcclProcessGroup::check_tensor(const Tensor& t, const char* operation,
                                    const char* role) const {
  comm::check_tensor(t, operation, role);
  if (!t.is_cuda())
    RG_THROW(InvalidArgument, operation, ": the ", role,
             " tensor is on the CPU, but the nccl "
             "backend takes CUDA tensors only; move it with .to(Device::cuda(",
             cuda_device(), ")), or use the ring backend, which takes CPU tensors");
  if (t.device().index != cuda_device())
    RG_THROW(InvalidArgument, operation, ": the ", role, " tensor is on ", t.device().str(),
             " but this rank's NCCL communicator is on cuda:", cuda_device());
}

void NcclProcessGroup::check_pair(const Tensor& in, const Tensor& out, const char* operation,
                                  int64_t out_per_in_num, int64_t out_per_in_den) const {
  check_tensor(in, operation, "input");  // CUDA, on this communicator's device, first
  check_tensor(out, operation, "output");
  comm::check_pair(in, out, operation, out_per_in_num, out_per_in_den);
}

WorkPtr NcclProcessGroup::allreduce(const Tensor& tensor, const AllreduceOptions& opts) {
  return allreduce(tensor, tensor, opts);
}

WorkPtr NcclProcessGroup::allreduce(const Tensor& input, const Tensor& output,
                                    const AllreduceOptions& opts) {
  check_pair(input, output, "allreduce", 1, 1);
  const auto count = static_cast<size_t>(input.numel());
  return issue(CollectiveKind::allreduce, input.dtype(), count, opts.op, -1, opts.timeout,
               {input, output}, [&](ncclComm_t comm, cudaStream_t stream) {
                 return ncclAllReduce(input.raw_data(), output.raw_data(), count,
                                      nccl_dtype(input.dtype()), nccl_op(opts.op, size()), comm,
                                      stream);
               });
}

WorkPtr NcclProcessGroup::broadcast(const Tensor& tensor, const BroadcastOptions& opts) {
  return broadcast(tensor, tensor, opts);
}

WorkPtr NcclProcessGroup::broadcast(const Tensor& input, const Tensor& output,
                                    const BroadcastOptions& opts) {
  check_pair(input, output, "broadcast", 1, 1);
  check_rank(opts.root, size(), "broadcast", "root");
  const auto count = static_cast<size_t>(input.numel());
  return issue(CollectiveKind::broadcast, input.dtype(), count, ReduceOp::sum, opts.root,
               opts.timeout, {input, output}, [&](ncclComm_t comm, cudaStream_t stream) {
                 return ncclBroadcast(input.raw_data(), output.raw_data(), count,
                                      nccl_dtype(input.dtype()), opts.root, comm, stream);
               });
}

WorkPtr NcclProcessGroup::reduce(const Tensor& tensor, const ReduceOptions& opts) {
  return reduce(tensor, tensor, opts);
}

WorkPtr NcclProcessGroup::reduce(const Tensor& input, const Tensor& output,
                                 const ReduceOptions& opts) {
  check_pair(input, output, "reduce", 1, 1);
  check_rank(opts.root, size(), "reduce", "root");
  const auto count = static_cast<size_t>(input.numel());
  return issue(CollectiveKind::reduce, input.dtype(), count, opts.op, opts.root, opts.timeout,
               {input, output}, [&](ncclComm_t comm, cudaStream_t stream) {
                 return ncclReduce(input.raw_data(), output.raw_data(), count,
                                   nccl_dtype(input.dtype()), nccl_op(opts.op, size()), opts.root,
                                   comm, stream);
               });
}

WorkPtr NcclProcessGroup::allgather(const Tensor& input, const Tensor& output,
                                    const AllgatherOptions& opts) {
  check_pair(input, output, "allgather", size(), 1);
  const auto count = static_cast<size_t>(input.numel());
  return issue(CollectiveKind::allgather, input.dtype(), count, ReduceOp::sum, -1, opts.timeout,
               {input, output}, [&](ncclComm_t comm, cudaStream_t stream) {
                 return ncclAllGather(input.raw_data(), output.raw_data(), count,
                                      nccl_dtype(input.dtype()), comm, stream);
               });
}

WorkPtr NcclProcessGroup::reduce_scatter(const Tensor& input, const Tensor& output,
                                         const ReduceScatterOptions& opts) {
  check_pair(input, output, "reduce_scatter", 1, size());
  const auto count = static_cast<size_t>(output.numel());
  return issue(CollectiveKind::reduce_scatter, input.dtype(), count, opts.op, -1, opts.timeout,
               {input, output}, [&](ncclComm_t comm, cudaStream_t stream) {
                 return ncclReduceScatter(input.raw_data(), output.raw_data(), count,
                                          nccl_dtype(input.dtype()), nccl_op(opts.op, size()), comm,
                                          stream);
               });
}

// A one-float all-reduce: it completes on a rank only after every rank has entered it.
WorkPtr NcclProcessGroup::barrier(const BarrierOptions& opts) {
  const Tensor value = barrier_value_;
  return issue(CollectiveKind::barrier, DType::u8, 0, ReduceOp::sum, -1, opts.timeout, {value},
               [&](ncclComm_t comm, cudaStream_t stream) {
                 return ncclAllReduce(value.raw_data(), value.raw_data(), 1, ncclFloat32, ncclSum,
                                      comm, stream);
               });
}

WorkPtr NcclProcessGroup::send(const Tensor& tensor, int dst, const SendRecvOptions& opts) {
  check_tensor(tensor, "send", "input");
  check_peer(dst, rank(), size(), true);
  const auto count = static_cast<size_t>(tensor.numel());
  return issue(CollectiveKind::send_recv, tensor.dtype(), count, ReduceOp::sum, opts.tag,
               opts.timeout, {tensor}, [&](ncclComm_t comm, cudaStream_t stream) {
                 return ncclSend(tensor.raw_data(), count, nccl_dtype(tensor.dtype()), dst, comm,
                                 stream);
               });
}

WorkPtr NcclProcessGroup::recv(const Tensor& tensor, int src, const SendRecvOptions& opts) {
  check_tensor(tensor, "recv", "output");
  check_peer(src, rank(), size(), false);
  const auto count = static_cast<size_t>(tensor.numel());
  return issue(CollectiveKind::send_recv, tensor.dtype(), count, ReduceOp::sum, opts.tag,
               opts.timeout, {tensor}, [&](ncclComm_t comm, cudaStream_t stream) {
                 return ncclRecv(tensor.raw_data(), count, nccl_dtype(tensor.dtype()), src, comm,
                                 stream);
               });
}

}  // namespace ringgrad::comm
