// Half precision (f16, bf16) on the CPU for the GEMM-shaped ops: OpenBLAS has no half GEMM, so
// conv2d, linear and count_correct widen their operands to f32, run the f32 kernel and round
// the results back to half (RNE). That is the arithmetic of a half kernel that accumulates in
// f32 (cuBLAS with fp32 compute), paid for with conversions: correct, and slow. Private to
// kernels/cpu.
#pragma once
#include <initializer_list>

#include "kernels/cpu/cpu_dispatch.h"
#include "kernels/cpu/cpu_ops.h"

namespace ringgrad::kernels::cpu {

// Every defined operand has x's dtype; widening first would hide a mismatch.
inline void check_half_operands(const char* op, const Tensor& x,
                                std::initializer_list<const Tensor*> operands) {
  for (const Tensor* t : operands)
    RG_CHECK(!t->defined() || t->dtype() == x.dtype(), op, ": an operand is ",
             dtype_name(t->dtype()), " but the input is ", dtype_name(x.dtype()),
             "; every operand must have the same dtype");
}

// An f32 copy of t (undefined stays undefined).
inline Tensor widened(const Tensor& t) {
  if (!t.defined()) return Tensor();
  Tensor wide = Tensor::empty(t.shape(), DType::f32, t.device());
  cpu::cast(wide, t);
  return wide;
}

// f32 scratch for the output `out` (undefined stays undefined: that output is not wanted).
inline Tensor f32_output(const Tensor& out) {
  return out.defined() ? Tensor::empty(out.shape(), DType::f32, out.device()) : Tensor();
}

// Rounds an f32 result into the caller's half output.
inline void round_into(Tensor& out, const Tensor& result) {
  if (out.defined()) cpu::cast(out, result);
}

}  // namespace ringgrad::kernels::cpu
