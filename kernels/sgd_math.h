// Per-element SGD update (torch.optim.SGD) shared by the CPU loop in kernels/cpu/sgd.cpp and a
// future CUDA kernel (RG_HD: __host__ __device__ under nvcc).
#pragma once
#include "core/host_device.h"

namespace ringgrad::kernels {

// Scalars of one step, already in the parameter's element type.
template <class T>
struct SgdCoefficients {
  T lr, momentum, dampening, weight_decay;
  bool nesterov;
};

// Without momentum: param -= lr * (grad + weight_decay * param).
template <class T>
RG_HD void sgd_update_plain(T& param, T grad, const SgdCoefficients<T>& c) {
  const T g = grad + c.weight_decay * param;
  param -= c.lr * g;
}

// With momentum: g = grad + weight_decay * param;
// buf = first_step ? g : momentum * buf + (1 - dampening) * g;
// param -= lr * (nesterov ? g + momentum * buf : buf).
template <class T>
RG_HD void sgd_update_momentum(T& param, T& buf, T grad, const SgdCoefficients<T>& c,
                               bool first_step) {
  const T g = grad + c.weight_decay * param;
  buf = first_step ? g : c.momentum * buf + (T(1) - c.dampening) * g;
  param -= c.lr * (c.nesterov ? g + c.momentum * buf : buf);
}

}  // namespace ringgrad::kernels
