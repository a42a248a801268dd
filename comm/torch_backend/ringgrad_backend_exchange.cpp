// RinggradBackend's gather, scatter, all-to-all, coalesced collectives, monitored barrier and
// sequence numbers: PyTorch's tensor lists packed into (or unpacked from) one flat buffer each,
// around the ring group's collective of the same name.
#include <c10/util/Exception.h>

#include "comm/torch_backend/ringgrad_backend.h"
#include "comm/torch_backend/torch_tensors.h"

namespace ringgrad::torch_backend {

namespace {

using c10d::OpType;

// `list`'s tensors end to end, flattened (a copy).
at::Tensor concatenated(const std::vector<at::Tensor>& list) {
  std::vector<at::Tensor> flat;
  for (const auto& t : list) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

// Copies consecutive pieces of `flat` out to `list` (each piece as long as its tensor).
void copy_out(const at::Tensor& flat, const std::vector<at::Tensor>& list) {
  int64_t at = 0;
  for (const auto& t : list) {
    t.copy_(flat.narrow(0, at, t.numel()).view(t.sizes()));
    at += t.numel();
  }
}

void check_like(const std::vector<at::Tensor>& list, const at::Tensor& like, const char* operation,
                const char* role) {
  for (const auto& t : list)
    TORCH_CHECK(t.numel() == like.numel() && t.scalar_type() == like.scalar_type(),
                "ringgrad: ", operation, ": every ", role, " must have the size and dtype of ",
                like.sizes(), " ", like.scalar_type(), ", got ", t.sizes(), " ", t.scalar_type());
}

// PyTorch's split sizes count rows (dim 0); ringgrad's count elements.
std::vector<int64_t> element_splits(const std::vector<int64_t>& rows, const at::Tensor& t, int size,
                                    const char* role) {
  if (rows.empty()) {
    TORCH_CHECK(t.dim() > 0 && t.size(0) % size == 0, "ringgrad: all_to_all_single: the ", role,
                "'s first dimension (", t.dim() > 0 ? t.size(0) : 0,
                ") does not split evenly over ", size, " ranks; pass split sizes");
    return {};
  }
  const int64_t row = t.dim() > 0 && t.size(0) > 0 ? t.numel() / t.size(0) : 0;
  std::vector<int64_t> elements;
  for (int64_t r : rows) elements.push_back(r * row);
  return elements;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> RinggradBackend::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  const char* op = "gather";
  const at::Tensor input = single(inputs, op).contiguous();
  const bool root = opts.rootRank == getRank();
  std::vector<at::Tensor> list;
  at::Tensor flat;
  if (root) {
    TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == getSize(),
                "ringgrad: gather needs one output list of ", getSize(), " tensors on the root");
    list = outputs[0];
    check_like(list, input, op, "output");
    flat = at::empty({getSize() * input.numel()}, input.options());
  } else {
    TORCH_CHECK(outputs.empty(), "ringgrad: gather takes an output list on the root only");
  }
  Tensor in = borrow(input, op, false), out = root ? borrow(flat, op, false) : Tensor();
  comm::GatherOptions o{static_cast<int>(opts.rootRank), timeout_of(opts.timeout)};
  std::function<void()> copy_out_list;
  if (root) copy_out_list = [flat, list] { copy_out(flat, list); };
  return wrap(issue(op, [&](auto& g) { return g.gather(in, out, o); }), OpType::GATHER, list,
              copy_out_list);
}

c10::intrusive_ptr<c10d::Work> RinggradBackend::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  const char* op = "scatter";
  const at::Tensor& output = single(outputs, op);
  const bool root = opts.rootRank == getRank();
  Tensor in;
  if (root) {
    TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == getSize(),
                "ringgrad: scatter needs one input list of ", getSize(), " tensors on the root");
    check_like(inputs[0], output, op, "input");
    in = borrow(concatenated(inputs[0]), op, false);
  } else {
    TORCH_CHECK(inputs.empty(), "ringgrad: scatter takes an input list on the root only");
  }
  Tensor out = borrow(output, op, false);
  comm::ScatterOptions o{static_cast<int>(opts.rootRank), timeout_of(opts.timeout)};
  return wrap(issue(op, [&](auto& g) { return g.scatter(in, out, o); }), OpType::SCATTER, outputs);
}

c10::intrusive_ptr<c10d::Work> RinggradBackend::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                              std::vector<int64_t>& output_splits,
                                                              std::vector<int64_t>& input_splits,
                                                              const c10d::AllToAllOptions& opts) {
  const char* op = "all_to_all_single";
  TORCH_CHECK(input.scalar_type() == output.scalar_type(), "ringgrad: ", op, ": input is ",
              input.scalar_type(), " but output is ", output.scalar_type());
  comm::AlltoallOptions o;
  o.send_splits = element_splits(input_splits, input, getSize(), "input");
  o.recv_splits = element_splits(output_splits, output, getSize(), "output");
  o.timeout = timeout_of(opts.timeout);
  Tensor in = borrow(input, op, false), out = borrow(output, op, false);
  return wrap(issue(op, [&](auto& g) { return g.alltoall(in, out, o); }), OpType::ALLTOALL_BASE,
              {output});
}

c10::intrusive_ptr<c10d::Work> RinggradBackend::alltoall(std::vector<at::Tensor>& outputs,
                                                         std::vector<at::Tensor>& inputs,
                                                         const c10d::AllToAllOptions& opts) {
  const char* op = "all_to_all";
  TORCH_CHECK(
      static_cast<int>(inputs.size()) == getSize() && static_cast<int>(outputs.size()) == getSize(),
      "ringgrad: all_to_all needs ", getSize(), " input and output tensors, got ", inputs.size(),
      " and ", outputs.size());
  comm::AlltoallOptions o;
  int64_t received = 0;
  for (int r = 0; r < getSize(); ++r) {
    TORCH_CHECK(inputs[r].scalar_type() == inputs[0].scalar_type() &&
                    outputs[r].scalar_type() == inputs[0].scalar_type(),
                "ringgrad: all_to_all: every tensor must have one dtype (", inputs[0].scalar_type(),
                ")");
    o.send_splits.push_back(inputs[r].numel());
    o.recv_splits.push_back(outputs[r].numel());
    received += outputs[r].numel();
  }
  o.timeout = timeout_of(opts.timeout);
  at::Tensor flat = at::empty({received}, inputs[0].options());
  Tensor in = borrow(concatenated(inputs), op, false), out = borrow(flat, op, false);
  std::vector<at::Tensor> list = outputs;
  return wrap(issue(op, [&](auto& g) { return g.alltoall(in, out, o); }), OpType::ALLTOALL, list,
              [flat, list] { copy_out(flat, list); });
}

c10::intrusive_ptr<c10d::Work> RinggradBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  const char* op = "all_reduce_coalesced";
  std::vector<Tensor> borrowed;
  for (const auto& t : tensors) borrowed.push_back(borrow(t, op, true));
  comm::AllreduceOptions o{ringgrad_op(opts.reduceOp, op), timeout_of(opts.timeout)};
  return wrap(issue(op, [&](auto& g) { return g.allreduce_coalesced(borrowed, o); }),
              OpType::ALLREDUCE_COALESCED, tensors);
}

c10::intrusive_ptr<c10d::Work> RinggradBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const char* op = "all_gather_coalesced";
  TORCH_CHECK(static_cast<int>(output_lists.size()) == getSize(), "ringgrad: ", op, " needs ",
              getSize(), " output lists, got ", output_lists.size());
  std::vector<Tensor> in, out;
  std::vector<at::Tensor> all_outputs;
  for (const auto& t : inputs) in.push_back(borrow(t, op, false));
  for (const auto& list : output_lists) {
    TORCH_CHECK(list.size() == inputs.size(), "ringgrad: ", op, ": each output list needs ",
                inputs.size(), " tensors, one per input, got ", list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      TORCH_CHECK(
          list[i].numel() == inputs[i].numel() && list[i].scalar_type() == inputs[i].scalar_type(),
          "ringgrad: ", op, ": output ", i, " must have input ", i, "'s size and dtype");
      out.push_back(borrow(list[i], op, false));
      all_outputs.push_back(list[i]);
    }
  }
  comm::AllgatherOptions o{timeout_of(opts.timeout)};
  return wrap(issue(op, [&](auto& g) { return g.allgather_coalesced(in, out, o); }),
              OpType::ALLGATHER_COALESCED, all_outputs);
}

void RinggradBackend::monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) {
  TORCH_CHECK(group_, "ringgrad: monitored_barrier after the group was shut down");
  const auto timeout = comm::Milliseconds(std::max<int64_t>(0, opts.timeout.count()));
  try {
    group_->monitored_barrier(timeout, wait_all_ranks);
  } catch (const std::exception& e) {
    C10_THROW_ERROR(DistBackendError, "ringgrad: " + user_message(e));
  }
}

uint64_t RinggradBackend::getSequenceNumberForGroup() {
  TORCH_CHECK(group_, "ringgrad: the group was shut down");
  return group_->sequence_number();
}

}  // namespace ringgrad::torch_backend
