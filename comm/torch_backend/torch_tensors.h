// How the ringgrad backend sees PyTorch's arguments: torch dtypes and ReduceOps in ringgrad's
// terms, at::Tensors borrowed as ringgrad Tensors (no copy), PyTorch's unset timeout. Each
// refusal is a c10::Error (Python RuntimeError) naming the operation.
#pragma once
#include <ATen/ATen.h>

#include <optional>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <vector>

#include "comm/process_group/process_group.h"

namespace ringgrad::torch_backend {

// The element type ringgrad reduces for a torch dtype, if it has one.
std::optional<DType> ringgrad_dtype(at::ScalarType t);
comm::ReduceOp ringgrad_op(const c10d::ReduceOp& op, const char* operation);
void check_cpu_contiguous(const at::Tensor& t, const char* operation);
// `t`'s memory as a flat ringgrad Tensor, sharing it: the Storage holds a reference to the
// at::Tensor until our comm thread is done with it. A reduction needs a dtype ringgrad
// reduces; anything that only moves data goes as bytes when ringgrad lacks the dtype.
Tensor borrow(const at::Tensor& t, const char* operation, bool reduces);
const at::Tensor& single(const std::vector<at::Tensor>& tensors, const char* operation);
// PyTorch's unset timeout is -1 ms; ringgrad's 0 means "the group's timeout".
comm::Milliseconds timeout_of(std::chrono::milliseconds t);

}  // namespace ringgrad::torch_backend
