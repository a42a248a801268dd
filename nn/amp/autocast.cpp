// The autocast policy: one thread-local dtype, set and restored by AutocastGuard.
#include "nn/amp/autocast.h"

#include "nn/autograd/ops.h"

namespace ringgrad::nn::amp {

namespace {
thread_local std::optional<DType> t_autocast_dtype;

bool is_half(DType t) { return t == DType::f16 || t == DType::bf16; }
}  // namespace

AutocastGuard::AutocastGuard(std::optional<DType> dtype) : previous_(t_autocast_dtype) {
  RG_CHECK(!dtype || is_half(*dtype), "autocast runs in float16 or bfloat16, not ",
           dtype_name(*dtype));
  t_autocast_dtype = dtype;
}

AutocastGuard::~AutocastGuard() { t_autocast_dtype = previous_; }

std::optional<DType> autocast_dtype() { return t_autocast_dtype; }

Variable cast_for_half_op(const Variable& x) {
  if (!t_autocast_dtype || !x.defined() || x.value().dtype() != DType::f32) return x;
  return to_dtype(x, *t_autocast_dtype);
}

Variable cast_for_fp32_op(const Variable& x) {
  if (!t_autocast_dtype || !x.defined() || !is_half(x.value().dtype())) return x;
  return to_dtype(x, DType::f32);
}

Variable cast_for_norm_op(const Variable& x) {
  if (x.defined() && x.value().dtype() == DType::bf16 && x.value().is_cpu()) return x;
  return cast_for_fp32_op(x);
}

}  // namespace ringgrad::nn::amp
