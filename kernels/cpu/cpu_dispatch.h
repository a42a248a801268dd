// Private helpers shared by the CPU kernels in kernels/cpu/*.cpp: argument checks with messages
// that name the op, and the dispatches that turn a runtime DType into a template type.
// Not part of the kernels API; nothing outside kernels/cpu includes it.
#pragma once
#include "core/error.h"
#include "core/tensor.h"
#include "kernels/operand_checks.h"

namespace ringgrad::kernels::cpu {

// The CPU loops' guard against reading device memory as host memory: kernels/ops.cpp sends
// CUDA operands to kernels/cuda, so this fires only if a route forgot to.
inline void check_cpu(const Tensor& t, const char* op) {
  RG_CHECK(!t.defined() || t.is_cpu(), op, ": the CPU kernel got a tensor on ", t.device().str(),
           " (kernels/ops.cpp does not route this op's CUDA tensors to kernels/cuda)");
}

inline void check_shape(const Tensor& t, const Shape& expected, const char* op, const char* name) {
  RG_CHECK(t.defined(), op, ": ", name, " is undefined");
  RG_CHECK(t.shape() == expected, op, ": ", name, " has shape ", t.shape().str(), ", expected ",
           expected.str());
}

// t is defined, on the CPU, with the expected shape and dtype; messages name op and operand.
inline void check_operand(const Tensor& t, const Shape& expected, DType dtype, const char* op,
                          const char* name) {
  check_cpu(t, op);
  check_shape(t, expected, op, name);
  RG_CHECK(t.dtype() == dtype, op, ": ", name, " is ", dtype_name(t.dtype()), " but the input is ",
           dtype_name(dtype), "; every operand must have the same dtype");
}

// Calls f(T{}) with T = float or double according to t.
template <class F>
void dispatch_float(DType t, const char* op, F&& f) {
  if (t == DType::f32) return f(float{});
  if (t == DType::f64) return f(double{});
  RG_THROW(InvalidArgument, op, ": CPU kernel supports float32 and float64, got ", dtype_name(t));
}

// Calls f(T{}) with T = float, double or BFloat16 according to t: the ops that run in bf16
// themselves (f32 arithmetic, one rounding per result) rather than through f32 copies.
template <class F>
void dispatch_float_or_bf16(DType t, const char* op, F&& f) {
  if (t == DType::bf16) return f(BFloat16{});
  dispatch_float(t, op, f);
}

// Calls f(T{}) with T = float, double, Half or BFloat16 according to t (casts and the inf/NaN
// check, which every floating dtype goes through).
template <class F>
void dispatch_floating(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    case DType::f16: return f(Half{});
    case DType::bf16: return f(BFloat16{});
    default:
      RG_THROW(InvalidArgument, op,
               ": needs a floating dtype (float32, float64, float16, "
               "bfloat16), got ",
               dtype_name(t));
  }
}

inline bool is_half(DType t) { return t == DType::f16 || t == DType::bf16; }

}  // namespace ringgrad::kernels::cpu
