// sync_batch_norm: batch normalisation whose statistics span every rank (PyTorch's
// SyncBatchNorm). Forward all-reduces (sum, sum of squares, count) per channel, so mean and
// variance are the global batch's; backward all-reduces (sum dy, sum dy*xhat) for the input
// gradient. The weight and bias gradients stay local sums: DDP averages them like any other
// gradient, which gives exactly the gradient of the global-batch loss.
// On CUDA the reductions and the normalisation run on the device; the per-channel vectors
// (a few hundred doubles) are packed and finalised on the host, and all-reduced on the input's
// device, where the group's backend wants them (nccl takes CUDA tensors only).
#include <algorithm>
#include <cmath>

#include "comm/process_group/process_group.h"
#include "nn/amp/autocast.h"
#include "nn/autograd/ops.h"

namespace ringgrad::nn {

namespace {

Tensor on_host(const Tensor& t) { return t.to(Device::cpu()); }

// Packs per-channel f64 vectors (and optional scalars) on the host, all-reduces the sum on
// `device` and returns the host copy of the result.
Tensor allreduce_sum(comm::ProcessGroup& group, std::initializer_list<const Tensor*> parts,
                     double extra, bool with_extra, Device device) {
  int64_t n = with_extra ? 1 : 0;
  for (const Tensor* p : parts) n += p->numel();
  Tensor packed = Tensor::empty({n}, DType::f64);
  double* out = packed.data<double>();
  for (const Tensor* p : parts) {
    const Tensor host = on_host(*p);
    const double* src = host.data<double>();
    out = std::copy(src, src + host.numel(), out);
  }
  if (with_extra) *out = extra;
  Tensor reduced = packed.to(device);
  group.allreduce(reduced)->wait();
  return on_host(reduced);
}

// A per-channel f64 result as `dtype` on `device` (the cast runs on the host: CUDA has no
// f64 cast kernel, and C values are too few to matter).
Tensor per_channel(const Tensor& host_f64, DType dtype, Device device) {
  return host_f64.to(dtype).to(device);
}

struct SyncBatchNormNode : Node {
  Tensor x, gamma, mean, invstd;  // mean, invstd: (C) f64, of the global batch
  double count = 0;               // elements per channel over all ranks
  comm::ProcessGroup* group = nullptr;
  const char* name() const override { return "sync_batch_norm"; }
  void backward(const Tensor& dy, std::vector<Tensor>& grads) override {
    const int64_t c = x.size(1);
    const Device device = x.device();
    Tensor sum_dy = Tensor::empty({c}, DType::f64, device);
    Tensor sum_dy_xhat = Tensor::empty({c}, DType::f64, device);
    kernels::batchnorm_backward_reduce(sum_dy, sum_dy_xhat, dy, x, mean, invstd);
    // local sums: DDP averages these
    if (inputs[1]) grads[1] = per_channel(on_host(sum_dy_xhat), gamma.dtype(), device);
    if (inputs[2]) grads[2] = per_channel(on_host(sum_dy), gamma.dtype(), device);
    if (!inputs[0]) return;
    Tensor total = allreduce_sum(*group, {&sum_dy, &sum_dy_xhat}, 0, false, device);
    Tensor global_dy = total.narrow(0, c).to(device);
    Tensor global_dy_xhat = total.narrow(c, c).to(device);
    Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
    kernels::batchnorm_backward_apply(dx, dy, x, mean, invstd, gamma, global_dy, global_dy_xhat,
                                      count);
    grads[0] = dx;
  }
};

}  // namespace

Variable sync_batch_norm(const Variable& x_in, const Variable& gamma, const Variable& beta,
                         Tensor& running_mean, Tensor& running_var, double momentum, double eps,
                         comm::ProcessGroup& group) {
  const Variable x = amp::cast_for_fp32_op(x_in);  // autocast: statistics in f32
  const Tensor& xv = x.value();
  const int64_t c = xv.size(1);
  const Device device = xv.device();
  Tensor sum = Tensor::empty({c}, DType::f64, device),
         sum_sq = Tensor::empty({c}, DType::f64, device);
  kernels::batchnorm_channel_sums(sum, sum_sq, xv);
  const double local_count = static_cast<double>(xv.numel() / c);
  Tensor total = allreduce_sum(group, {&sum, &sum_sq}, local_count, true, device);
  const double* t = total.data<double>();
  const double count = t[2 * c];
  RG_CHECK(count > 1, "sync_batch_norm needs more than one value per channel over all ranks");

  Tensor mean = Tensor::empty({c}, DType::f64), invstd = Tensor::empty({c}, DType::f64);
  Tensor running_mean_host = on_host(running_mean), running_var_host = on_host(running_var);
  float* rm = running_mean_host.data<float>();
  float* rv = running_var_host.data<float>();
  for (int64_t i = 0; i < c; ++i) {
    const double m = t[i] / count;
    const double var = std::max(0.0, t[c + i] / count - m * m);  // biased: normalises
    mean.data<double>()[i] = m;
    invstd.data<double>()[i] = 1.0 / std::sqrt(var + eps);
    rm[i] = static_cast<float>((1 - momentum) * rm[i] + momentum * m);
    rv[i] = static_cast<float>((1 - momentum) * rv[i] + momentum * var * count / (count - 1));
  }
  if (device.is_cuda()) {  // on the CPU the host copies alias the buffers themselves
    running_mean.copy_from(running_mean_host);
    running_var.copy_from(running_var_host);
    mean = mean.to(device);
    invstd = invstd.to(device);
  }
  Tensor y = Tensor::empty(xv.shape(), xv.dtype(), device);
  kernels::batchnorm_apply(y, xv, mean, invstd, gamma.value(), beta.value());
  if (!any_requires_grad({&x, &gamma, &beta})) return Variable(y);
  auto node = std::make_shared<SyncBatchNormNode>();
  node->x = xv;
  node->gamma = gamma.value();
  node->mean = mean;
  node->invstd = invstd;
  node->count = count;
  node->group = &group;
  return make_result(y, node, {&x, &gamma, &beta});
}

}  // namespace ringgrad::nn
