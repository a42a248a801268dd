// The operand check of the elementwise ops, shared by the router (kernels/ops.cpp, before it
// picks a device) and the CPU kernels that also take tensors laid out like their input.
// Not part of the kernels API; nothing outside kernels/ includes it.
#pragma once
#include "core/error.h"
#include "core/tensor.h"

namespace ringgrad::kernels {

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

}  // namespace ringgrad::kernels
