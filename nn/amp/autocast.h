// Autocast: a scoped, thread-local mixed-precision policy (PyTorch's torch.autocast). While an
// AutocastGuard(DType::bf16 or DType::f16) lives on a thread, the ops of nn/autograd/ops.h
// follow two lists:
//   half ops (conv2d, linear): f32 inputs, weights and bias are cast to the autocast dtype, so
//     the GEMMs run in half and save half activations for backward. The casts are recorded ops,
//     so the gradient of an f32 master weight comes back to it in f32 (what the optimiser and
//     the DDP buckets expect). A CPU conv2d takes its f32 weight itself and gives that gradient
//     as its GEMM's f32 sums, unrounded (nn/autograd/ops_linear.cpp).
//   fp32 ops (sync_batch_norm, cross_entropy): half inputs are cast up to f32; the softmax and
//     the all-reduced statistics are reductions that half precision would spoil.
//   batch_norm (and batch_norm_relu) keeps a bf16 input on the CPU, as PyTorch's CPU autocast
//     does: bf16 data with f32 parameters, statistics and arithmetic (kernels/ops.h). Elsewhere
//     (f16, or CUDA, whose kernels take f32 and f64 data) the input is cast up to f32.
// Every other op runs in its inputs' dtype: in a ResNet under bf16 on the CPU the relu, add and
// pooling after a batch norm see bf16, as in PyTorch; elsewhere they see f32.
// f64 is never cast, as in PyTorch: double precision is asked for on purpose.
// backward() needs no guard: the recorded casts carry the dtypes. Per thread, not shared.
#pragma once
#include <optional>
#include <string>

#include "core/choices.h"
#include "nn/autograd/variable.h"

namespace ringgrad::nn::amp {

class AutocastGuard {
 public:
  // dtype: f16 or bf16 (throws otherwise); nullopt turns autocast off inside this scope.
  explicit AutocastGuard(std::optional<DType> dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  std::optional<DType> previous_;
};

// This thread's autocast dtype; nullopt when autocast is off.
std::optional<DType> autocast_dtype();

// The policy, applied by the ops to each input (undefined inputs pass through):
Variable cast_for_half_op(const Variable& x);  // f32 -> autocast dtype, when autocast is on
Variable cast_for_fp32_op(const Variable& x);  // f16/bf16 -> f32, when autocast is on
Variable cast_for_norm_op(const Variable& x);  // as cast_for_fp32_op, but keeps bf16 on the CPU

// The --amp choices: "none" (autocast off), "fp16", "bf16".
inline const Choices<std::optional<DType>> kAmpModes{
    {"none", std::nullopt}, {"fp16", DType::f16}, {"bf16", DType::bf16}};

}  // namespace ringgrad::nn::amp
