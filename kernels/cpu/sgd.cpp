// sgd_step on the CPU (kernels/ops.cpp has checked every operand): one torch.optim.SGD update of
// one parameter, element math in kernels/sgd_math.h. A single pass over param, grad and (with
// momentum) the momentum buffer.
#include "kernels/cpu/cpu_dispatch.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/sgd_math.h"

namespace ringgrad::kernels::cpu {

void sgd_step(Tensor& param, Tensor& momentum_buf, const Tensor& grad, const SgdParams& p,
              bool first_step) {
  dispatch_float(param.dtype(), "sgd_step", [&](auto tag) {
    using T = decltype(tag);
    const SgdCoefficients<T> c{static_cast<T>(p.lr), static_cast<T>(p.momentum),
                               static_cast<T>(p.dampening), static_cast<T>(p.weight_decay),
                               p.nesterov};
    T* w = param.data<T>();
    const T* g = grad.data<T>();
    const int64_t n = param.numel();
    if (p.momentum == 0) {
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) sgd_update_plain(w[i], g[i], c);
      return;
    }
    T* buf = momentum_buf.data<T>();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) sgd_update_momentum(w[i], buf[i], g[i], c, first_step);
  });
}

}  // namespace ringgrad::kernels::cpu
