// Differentiable operations on Variables: each runs the forward kernel from kernels/ops.h and,
// when an input requires grad (and grad mode is on), records a Node whose backward calls the
// matching backward kernel. Optional inputs (bias) are passed as an undefined Variable.
// Under an amp::AutocastGuard, conv2d and linear run in half precision, sync_batch_norm and
// cross_entropy in f32, and batch_norm in bf16 on the CPU and f32 otherwise (nn/amp/autocast.h).
#pragma once
#include "kernels/ops.h"
#include "nn/autograd/variable.h"

namespace ringgrad::comm {
class ProcessGroup;
}

namespace ringgrad::nn {

// x: (N, C, H, W)  w: (K, C, R, S)  bias: (K) or undefined  ->  (N, K, P, Q)
Variable conv2d(const Variable& x, const Variable& w, const Variable& bias,
                const kernels::Conv2dParams& p);
// x: (N, IN)  w: (OUT, IN)  bias: (OUT) or undefined  ->  (N, OUT)
Variable linear(const Variable& x, const Variable& w, const Variable& bias);

// Batch normalisation over (N, H, W) per channel. In training, batch statistics normalise and
// running_mean / running_var (buffers, updated in place) move towards them; in eval the running
// statistics normalise (no graph: evaluation runs under NoGradGuard).
Variable batch_norm(const Variable& x, const Variable& gamma, const Variable& beta,
                    Tensor& running_mean, Tensor& running_var, bool training, double momentum,
                    double eps);

// relu(batch_norm(x) + residual), residual undefined or like x: what ends each half of a ResNet
// block, as one op whose CPU kernel makes one pass over the data (kernels/ops.h). Same values
// and gradients as the three ops it replaces, which stay the reference the tests hold it to.
Variable batch_norm_relu(const Variable& x, const Variable& residual, const Variable& gamma,
                         const Variable& beta, Tensor& running_mean, Tensor& running_var,
                         bool training, double momentum, double eps);

// SyncBatchNorm's training forward: the batch statistics are those of the global batch, over
// every rank of `group` (per-channel sums all-reduced), and so are the reductions of backward.
// Collective: every rank calls it for the same layers in the same order.
Variable sync_batch_norm(const Variable& x, const Variable& gamma, const Variable& beta,
                         Tensor& running_mean, Tensor& running_var, double momentum, double eps,
                         comm::ProcessGroup& group);

Variable relu(const Variable& x);
Variable add(const Variable& a, const Variable& b);
Variable add_relu(const Variable& a, const Variable& b);  // relu(a + b), the BasicBlock tail
Variable reshape(const Variable& x, const Shape& shape);
Variable mul(const Variable& x, double alpha);  // alpha * x (GradScaler scales the loss)
// x converted to dtype (x itself when it already is); the gradient converts back.
Variable to_dtype(const Variable& x, DType dtype);

Variable max_pool2d(const Variable& x, const kernels::Pool2dParams& p);
Variable global_avg_pool(const Variable& x);  // (N, C, H, W) -> (N, C)

// Mean cross-entropy of logits (N, C) against int64 labels (N): a scalar.
Variable cross_entropy(const Variable& logits, const Tensor& labels);

}  // namespace ringgrad::nn
