// Private helpers shared by the CPU kernels in kernels/cpu/*.cpp: argument checks with messages
// that name the op, and the dispatches that turn a runtime DType into a template type.
// Not part of the kernels API; nothing outside kernels/cpu includes it.
#pragma once
#include <initializer_list>

#include "core/error.h"
#include "core/tensor.h"

namespace ringgrad::kernels::cpu {

// a and b agree in element count, dtype and device (elementwise ops treat them as flat arrays).
inline void check_same(const Tensor& a, const Tensor& b, const char* op) {
  RG_CHECK(a.defined() && b.defined(), op, ": undefined tensor");
  RG_CHECK_EQ(a.numel(), b.numel(), op, ": element counts differ (", a.shape().str(), " vs ",
              b.shape().str(), ")");
  RG_CHECK(a.dtype() == b.dtype(), op, ": dtypes differ (", dtype_name(a.dtype()), " vs ",
           dtype_name(b.dtype()), ")");
  RG_CHECK(a.device() == b.device(), op, ": devices differ (", a.device().str(), " vs ",
           b.device().str(), ")");
}

// One operand of an op, named for error messages.
struct Operand {
  const char* name;
  const Tensor& tensor;
};

// Whether the op runs on CUDA: every defined operand must be on one device (a mixed call is an
// error naming both devices, never a silent copy), and that device is a CUDA device.
inline bool on_cuda(const char* op, std::initializer_list<Operand> operands) {
  const Operand* first = nullptr;
  for (const Operand& o : operands) {
    if (!o.tensor.defined()) continue;
    if (!first) {
      first = &o;
      continue;
    }
    RG_CHECK(o.tensor.device() == first->tensor.device(), op, ": ", first->name, " is on ",
             first->tensor.device().str(), " but ", o.name, " is on ", o.tensor.device().str(),
             "; move every operand to one device");
  }
  return first && first->tensor.is_cuda();
}

// The CPU loops' guard against reading device memory as host memory: every entry point sends
// CUDA operands to kernels/cuda first (on_cuda), so this fires only if one forgot to.
inline void check_cpu(const Tensor& t, const char* op) {
  RG_CHECK(!t.defined() || t.is_cpu(), op, ": the CPU kernel got a tensor on ", t.device().str(),
           " (this entry point does not forward it to the CUDA kernel)");
}

inline void check_shape(const Tensor& t, const Shape& expected, const char* op, const char* name) {
  RG_CHECK(t.defined(), op, ": ", name, " is undefined");
  RG_CHECK(t.shape() == expected, op, ": ", name, " has shape ", t.shape().str(), ", expected ",
           expected.str());
}

// Calls f(T{}) with T = float or double according to t.
template <class F>
void dispatch_float(DType t, const char* op, F&& f) {
  if (t == DType::f32) return f(float{});
  if (t == DType::f64) return f(double{});
  RG_THROW(InvalidArgument, op, ": CPU kernel supports float32 and float64, got ", dtype_name(t));
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
      RG_THROW(InvalidArgument, op, ": needs a floating dtype (float32, float64, float16, "
               "bfloat16), got ", dtype_name(t));
  }
}

inline bool is_half(DType t) { return t == DType::f16 || t == DType::bf16; }

}  // namespace ringgrad::kernels::cpu
