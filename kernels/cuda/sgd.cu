// sgd_step on CUDA (float32): one torch.optim.SGD update of one parameter, one thread per
// element, with the CPU's element math (kernels/sgd_math.h).
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/sgd_math.h"

namespace ringgrad::kernels::cuda {

namespace {

__global__ void sgd_plain_kernel(float* param, const float* grad, SgdCoefficients<float> c,
                                 int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads())
    sgd_update_plain(param[i], grad[i], c);
}

__global__ void sgd_momentum_kernel(float* param, float* buf, const float* grad,
                                    SgdCoefficients<float> c, bool first_step, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += grid_threads())
    sgd_update_momentum(param[i], buf[i], grad[i], c, first_step);
}

}  // namespace

void sgd_step(Tensor& param, Tensor& momentum_buf, const Tensor& grad, const SgdParams& p,
              bool first_step) {
  constexpr const char* op = "sgd_step";
  check_f32(param, op, "param");
  const SgdCoefficients<float> c{static_cast<float>(p.lr), static_cast<float>(p.momentum),
                                 static_cast<float>(p.dampening),
                                 static_cast<float>(p.weight_decay), p.nesterov};
  Launch l(param);
  const int64_t n = param.numel();
  if (p.momentum == 0) {
    sgd_plain_kernel<<<blocks_for(n), kThreads, 0, l.stream>>>(param.data<float>(),
                                                               grad.data<float>(), c, n);
    CUDA_CHECK_LAUNCH("sgd_plain_kernel");
    return;
  }
  sgd_momentum_kernel<<<blocks_for(n), kThreads, 0, l.stream>>>(
      param.data<float>(), momentum_buf.data<float>(), grad.data<float>(), c, first_step, n);
  CUDA_CHECK_LAUNCH("sgd_momentum_kernel");
}

}  // namespace ringgrad::kernels::cuda
