// torch_tensors.h: PyTorch's arguments in ringgrad's terms.
#include "comm/torch_backend/torch_tensors.h"

namespace ringgrad::torch_backend {

std::optional<DType> ringgrad_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return DType::f32;
    case at::kDouble: return DType::f64;
    case at::kHalf: return DType::f16;
    case at::kBFloat16: return DType::bf16;
    case at::kInt: return DType::i32;
    case at::kLong: return DType::i64;
    case at::kByte: return DType::u8;
    default: return std::nullopt;
  }
}

comm::ReduceOp ringgrad_op(const c10d::ReduceOp& op, const char* operation) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return comm::ReduceOp::sum;
    case c10d::ReduceOp::AVG: return comm::ReduceOp::avg;
    case c10d::ReduceOp::PRODUCT: return comm::ReduceOp::prod;
    case c10d::ReduceOp::MIN: return comm::ReduceOp::min;
    case c10d::ReduceOp::MAX: return comm::ReduceOp::max;
    default:
      TORCH_CHECK(false, "ringgrad: ", operation, " does not support this ReduceOp (",
                  static_cast<int>(op.op_), "); it takes SUM, AVG, PRODUCT, MIN and MAX");
  }
}

void check_cpu_contiguous(const at::Tensor& t, const char* operation) {
  TORCH_CHECK(t.device().is_cpu(), "ringgrad: ", operation, " got a tensor on ", t.device(),
              "; the ringgrad backend takes CPU tensors (use a gloo or nccl group for others)");
  TORCH_CHECK(t.layout() == at::kStrided, "ringgrad: ", operation, " takes dense tensors");
  TORCH_CHECK(t.is_contiguous(), "ringgrad: ", operation,
              " needs contiguous tensors (call .contiguous() first)");
}

Tensor borrow(const at::Tensor& t, const char* operation, bool reduces) {
  check_cpu_contiguous(t, operation);
  std::optional<DType> dtype = ringgrad_dtype(t.scalar_type());
  TORCH_CHECK(dtype || !reduces, "ringgrad: ", operation, " does not support dtype ",
              t.scalar_type(),
              "; it reduces float32, float64, float16, bfloat16, int32, int64 and uint8");
  auto owner = std::make_shared<at::Tensor>(t);
  auto storage = Storage::borrow(t.data_ptr(), t.nbytes(), Device::cpu(), std::move(owner));
  if (dtype) return Tensor::wrap(std::move(storage), 0, {t.numel()}, *dtype);
  return Tensor::wrap(std::move(storage), 0, {static_cast<int64_t>(t.nbytes())}, DType::u8);
}

const at::Tensor& single(const std::vector<at::Tensor>& tensors, const char* operation) {
  TORCH_CHECK(tensors.size() == 1, "ringgrad: ", operation, " takes one tensor per call, got ",
              tensors.size());
  return tensors[0];
}

comm::Milliseconds timeout_of(std::chrono::milliseconds t) {
  return comm::Milliseconds(t.count() > 0 ? t.count() : 0);
}

}  // namespace ringgrad::torch_backend
