// sgd_step (CPU): one torch.optim.SGD update of one parameter, element math in
// kernels/sgd_math.h. A single pass over param, grad and (with momentum) the momentum buffer.
#include "kernels/cpu/cpu_dispatch.h"
#include "kernels/ops.h"
#include "kernels/sgd_math.h"
#include "ringgrad/config.h"
#ifdef HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#endif

namespace ringgrad::kernels {

void sgd_step(Tensor& param, Tensor& momentum_buf, const Tensor& grad, const SgdParams& p,
              bool first_step) {
  constexpr const char* op = "sgd_step";
  RG_CHECK(param.defined() && grad.defined(), op, ": param and grad must be defined");
  RG_CHECK(param.shape() == grad.shape(), op, ": grad shape ", grad.shape().str(),
           " does not match param shape ", param.shape().str());
  cpu::check_same(param, grad, op);
  const bool use_momentum = p.momentum != 0;
  if (use_momentum) {
    RG_CHECK(momentum_buf.defined(), op,
             ": momentum is ", p.momentum, " but momentum_buf is undefined; allocate it (shape ",
             param.shape().str(), ") before the first step");
    RG_CHECK(momentum_buf.shape() == param.shape(), op, ": momentum_buf shape ",
             momentum_buf.shape().str(), " does not match param shape ", param.shape().str());
    cpu::check_same(param, momentum_buf, op);
  }
#ifdef HAVE_CUDA
  if (param.is_cuda()) return cuda::sgd_step(param, momentum_buf, grad, p, first_step);
#endif
  cpu::dispatch_float(param.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const SgdCoefficients<T> c{static_cast<T>(p.lr), static_cast<T>(p.momentum),
                               static_cast<T>(p.dampening), static_cast<T>(p.weight_decay),
                               p.nesterov};
    T* w = param.data<T>();
    const T* g = grad.data<T>();
    const int64_t n = param.numel();
    if (!use_momentum) {
#pragma omp parallel for simd schedule(static)
      for (int64_t i = 0; i < n; ++i) sgd_update_plain(w[i], g[i], c);
      return;
    }
    T* buf = momentum_buf.data<T>();
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; ++i) sgd_update_momentum(w[i], buf[i], g[i], c, first_step);
  });
}

}  // namespace ringgrad::kernels
