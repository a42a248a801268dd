// RinggradBackend: argument checks, zero-copy tensor wrapping, and the forwarding of each
// collective to ringgrad's ring process group.
#include "comm/torch_backend/ringgrad_backend.h"

#include <Python.h>

#include "comm/torch_backend/torch_store.h"
#include "comm/torch_backend/torch_tensors.h"

namespace ringgrad::torch_backend {

namespace {

using c10d::OpType;

// Runs `f` with the GIL released when this thread holds it (a blocking teardown must not
// keep a comm thread that needs the GIL, to drop a Python tensor, from finishing).
template <class F>
void without_gil(F&& f) {
  PyThreadState* saved = Py_IsInitialized() && PyGILState_Check() ? PyEval_SaveThread() : nullptr;
  f();
  if (saved) PyEval_RestoreThread(saved);
}

}  // namespace

RinggradBackend::RinggradBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                 std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size),
      completer_(std::make_shared<FutureCompleter>()),
      hooks_(std::make_shared<WorkHooks>()) {
  comm::ProcessGroupOptions options;
  options.group_name = "torch";  // PyTorch hands each group its own prefixed store
  options.timeout = comm::Milliseconds(timeout.count());
  try {
    group_ = comm::create_process_group(comm::Backend::ring, std::make_shared<TorchStore>(store),
                                        rank, size, options);
    sparse_ = std::make_unique<SparseAllreduce>(*group_);
  } catch (const std::exception& e) {
    C10_THROW_ERROR(DistBackendError, "ringgrad: setting up the group failed: " + user_message(e));
  }
}

RinggradBackend::~RinggradBackend() { shutdown(); }

void RinggradBackend::shutdown() {
  without_gil([this] {
    sparse_.reset();     // finishes the sparse all-reduces started, then joins
    group_.reset();      // runs what is queued (each within its deadline), then joins
    completer_.reset();  // completes the futures asked for, then joins
  });
}

c10::intrusive_ptr<c10d::Work> RinggradBackend::wrap(Issued issued, OpType type,
                                                     std::vector<at::Tensor> outputs,
                                                     std::function<void()> copy_out) {
  return RinggradWork::create(std::move(issued.work), issued.at, getRank(), type,
                              std::move(outputs), completer_, hooks_, std::move(copy_out));
}

void RinggradBackend::registerCompletionHook(int64_t hook_id, c10d::CompletionHook hook) {
  hooks_->add_completion(hook_id, std::move(hook));
}

void RinggradBackend::unregisterCompletionHook(int64_t hook_id) {
  hooks_->remove_completion(hook_id);
}

void RinggradBackend::registerAbortHook(int64_t hook_id, c10d::AbortHook hook) {
  hooks_->add_abort(hook_id, std::move(hook));
}

void RinggradBackend::unregisterAbortHook(int64_t hook_id) { hooks_->remove_abort(hook_id); }

c10::intrusive_ptr<c10d::Work> RinggradBackend::allreduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::AllreduceOptions& opts) {
  const char* op = "all_reduce";
  if (single(tensors, op).is_sparse()) return allreduce_sparse(tensors, opts);
  Tensor t = borrow(single(tensors, op), op, true);
  comm::AllreduceOptions o{ringgrad_op(opts.reduceOp, op), timeout_of(opts.timeout)};
  return wrap(issue(op, [&](auto& g) { return g.allreduce(t, o); }), OpType::ALLREDUCE, tensors);
}

c10::intrusive_ptr<c10d::Work> RinggradBackend::allreduce_sparse(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  const char* op = "all_reduce of a sparse tensor";
  const at::Tensor& t = single(tensors, op);
  TORCH_CHECK(t.layout() == at::kSparse, "ringgrad: ", op, " takes sparse COO tensors, got ",
              t.layout(), " (a dense tensor goes to all_reduce)");
  TORCH_CHECK(t.device().is_cpu(), "ringgrad: ", op, " got a tensor on ", t.device(),
              "; the ringgrad backend takes CPU tensors (use a gloo group for others)");
  TORCH_CHECK(opts.reduceOp == c10d::ReduceOp::SUM, "ringgrad: ", op,
              " takes ReduceOp.SUM only, got ReduceOp ", static_cast<int>(opts.reduceOp.op_));
  TORCH_CHECK(sparse_, "ringgrad: ", op, " after the group was shut down");
  return wrap(issue(op, [&](auto&) { return sparse_->start(t, timeout_of(opts.timeout)); }),
              OpType::ALLREDUCE, tensors);
}

c10::intrusive_ptr<c10d::Work> RinggradBackend::broadcast(std::vector<at::Tensor>& tensors,
                                                          const c10d::BroadcastOptions& opts) {
  const char* op = "broadcast";
  Tensor t = borrow(single(tensors, op), op, false);
  comm::BroadcastOptions o{static_cast<int>(opts.rootRank), timeout_of(opts.timeout)};
  return wrap(issue(op, [&](auto& g) { return g.broadcast(t, o); }), OpType::BROADCAST, tensors);
}

c10::intrusive_ptr<c10d::Work> RinggradBackend::reduce(std::vector<at::Tensor>& tensors,
                                                       const c10d::ReduceOptions& opts) {
  const char* op = "reduce";
  Tensor t = borrow(single(tensors, op), op, true);
  comm::ReduceOptions o{ringgrad_op(opts.reduceOp, op), static_cast<int>(opts.rootRank),
                        timeout_of(opts.timeout)};
  return wrap(issue(op, [&](auto& g) { return g.reduce(t, o); }), OpType::REDUCE, tensors);
}

// A list of outputs gathers into one flat buffer, copied out to the list once it is done.
c10::intrusive_ptr<c10d::Work> RinggradBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const char* op = "all_gather";
  const at::Tensor& input = single(inputs, op);
  TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(),
              "ringgrad: all_gather needs one output list of ", getSize(), " tensors");
  for (const auto& out : outputs[0])
    TORCH_CHECK(out.numel() == input.numel() && out.scalar_type() == input.scalar_type(),
                "ringgrad: all_gather outputs must match the input's size and dtype");
  at::Tensor flat = at::empty({getSize() * input.numel()}, input.options());
  at::Tensor flat_input = input.contiguous();
  Tensor in = borrow(flat_input, op, false), out = borrow(flat, op, false);
  comm::AllgatherOptions o{timeout_of(opts.timeout)};
  std::vector<at::Tensor> list = outputs[0];
  auto copy_out = [flat, list, n = input.numel()] {
    for (size_t r = 0; r < list.size(); ++r)
      list[r].copy_(flat.narrow(0, static_cast<int64_t>(r) * n, n).view(list[r].sizes()));
  };
  return wrap(issue(op, [&](auto& g) { return g.allgather(in, out, o); }), OpType::ALLGATHER, list,
              copy_out);
}

c10::intrusive_ptr<c10d::Work> RinggradBackend::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  const char* op = "all_gather_into_tensor";
  Tensor in = borrow(input, op, false), out = borrow(output, op, false);
  comm::AllgatherOptions o{timeout_of(opts.timeout)};
  return wrap(issue(op, [&](auto& g) { return g.allgather(in, out, o); }), OpType::_ALLGATHER_BASE,
              {output});
}

// A list of inputs is packed into one flat buffer first.
c10::intrusive_ptr<c10d::Work> RinggradBackend::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter";
  const at::Tensor& output = single(outputs, op);
  TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
              "ringgrad: reduce_scatter needs one input list of ", getSize(), " tensors");
  std::vector<at::Tensor> flat_inputs;
  for (const auto& in : inputs[0]) {
    TORCH_CHECK(in.numel() == output.numel() && in.scalar_type() == output.scalar_type(),
                "ringgrad: reduce_scatter inputs must match the output's size and dtype");
    flat_inputs.push_back(in.reshape({-1}));
  }
  Tensor in = borrow(at::cat(flat_inputs), op, true), out = borrow(output, op, true);
  comm::ReduceScatterOptions o{ringgrad_op(opts.reduceOp, op), timeout_of(opts.timeout)};
  return wrap(issue(op, [&](auto& g) { return g.reduce_scatter(in, out, o); }),
              OpType::REDUCE_SCATTER, outputs);
}

c10::intrusive_ptr<c10d::Work> RinggradBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter_tensor";
  Tensor in = borrow(input, op, true), out = borrow(output, op, true);
  comm::ReduceScatterOptions o{ringgrad_op(opts.reduceOp, op), timeout_of(opts.timeout)};
  return wrap(issue(op, [&](auto& g) { return g.reduce_scatter(in, out, o); }),
              OpType::_REDUCE_SCATTER_BASE, {output});
}

c10::intrusive_ptr<c10d::Work> RinggradBackend::barrier(const c10d::BarrierOptions& opts) {
  comm::BarrierOptions o{timeout_of(opts.timeout)};
  return wrap(issue("barrier", [&](auto& g) { return g.barrier(o); }), OpType::BARRIER, {});
}

c10::intrusive_ptr<c10d::Work> RinggradBackend::send(std::vector<at::Tensor>& tensors, int dst,
                                                     int tag) {
  Tensor t = borrow(single(tensors, "send"), "send", false);
  comm::SendRecvOptions o{tag, {}};
  return wrap(issue("send", [&](auto& g) { return g.send(t, dst, o); }), OpType::SEND, tensors);
}

c10::intrusive_ptr<c10d::Work> RinggradBackend::recv(std::vector<at::Tensor>& tensors, int src,
                                                     int tag) {
  Tensor t = borrow(single(tensors, "recv"), "recv", false);
  comm::SendRecvOptions o{tag, {}};
  return wrap(issue("recv", [&](auto& g) { return g.recv(t, src, o); }), OpType::RECV, tensors);
}

c10::intrusive_ptr<c10d::Work> RinggradBackend::recvAnysource(std::vector<at::Tensor>& tensors,
                                                              int tag) {
  Tensor t = borrow(single(tensors, "recv"), "recv", false);
  comm::SendRecvOptions o{tag, {}};
  return wrap(issue("recv", [&](auto& g) { return g.recv(t, comm::kAnySource, o); }),
              OpType::RECVANYSOURCE, tensors);
}

}  // namespace ringgrad::torch_backend
