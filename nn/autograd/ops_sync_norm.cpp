// sync_batch_norm: batch normalisation whose statistics span every rank (PyTorch's
// SyncBatchNorm). Forward all-reduces (sum, sum of squares, count) per channel, so mean and
// variance are the global batch's; backward all-reduces (sum dy, sum dy*xhat) for the input
// gradient. The weight and bias gradients stay local sums: DDP averages them like any other
// gradient, which gives exactly the gradient of the global-batch loss.
#include <algorithm>
#include <cmath>

#include "comm/process_group/process_group.h"
#include "nn/amp/autocast.h"
#include "nn/autograd/ops.h"

namespace ringgrad::nn {

namespace {

// Packs per-channel f64 vectors (and optional scalars) into one tensor, all-reduces the sum.
Tensor allreduce_sum(comm::ProcessGroup& group, std::initializer_list<const Tensor*> parts,
                     double extra, bool with_extra) {
  int64_t n = with_extra ? 1 : 0;
  for (const Tensor* p : parts) n += p->numel();
  Tensor packed = Tensor::empty({n}, DType::f64);
  double* out = packed.data<double>();
  for (const Tensor* p : parts) {
    const double* src = p->data<double>();
    out = std::copy(src, src + p->numel(), out);
  }
  if (with_extra) *out = extra;
  group.allreduce(packed)->wait();
  return packed;
}

struct SyncBatchNormNode : Node {
  Tensor x, gamma, mean, invstd;  // mean, invstd: (C) f64, of the global batch
  double count = 0;               // elements per channel over all ranks
  comm::ProcessGroup* group = nullptr;
  const char* name() const override { return "sync_batch_norm"; }
  void backward(const Tensor& dy, std::vector<Tensor>& grads) override {
    const int64_t c = x.size(1);
    Tensor sum_dy = Tensor::empty({c}, DType::f64), sum_dy_xhat = Tensor::empty({c}, DType::f64);
    kernels::batchnorm_backward_reduce(sum_dy, sum_dy_xhat, dy, x, mean, invstd);
    if (inputs[1]) grads[1] = sum_dy_xhat.to(gamma.dtype());  // local: DDP averages these
    if (inputs[2]) grads[2] = sum_dy.to(gamma.dtype());
    if (!inputs[0]) return;
    Tensor total = allreduce_sum(*group, {&sum_dy, &sum_dy_xhat}, 0, false);
    Tensor global_dy = total.narrow(0, c), global_dy_xhat = total.narrow(c, c);
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
  Tensor sum = Tensor::empty({c}, DType::f64), sum_sq = Tensor::empty({c}, DType::f64);
  kernels::batchnorm_channel_sums(sum, sum_sq, xv);
  const double local_count = static_cast<double>(xv.numel() / c);
  Tensor total = allreduce_sum(group, {&sum, &sum_sq}, local_count, true);
  const double* t = total.data<double>();
  const double count = t[2 * c];
  RG_CHECK(count > 1, "sync_batch_norm needs more than one value per channel over all ranks");

  Tensor mean = Tensor::empty({c}, DType::f64), invstd = Tensor::empty({c}, DType::f64);
  float* rm = running_mean.data<float>();
  float* rv = running_var.data<float>();
  for (int64_t i = 0; i < c; ++i) {
    const double m = t[i] / count;
    const double var = std::max(0.0, t[c + i] / count - m * m);  // biased: normalises
    mean.data<double>()[i] = m;
    invstd.data<double>()[i] = 1.0 / std::sqrt(var + eps);
    rm[i] = static_cast<float>((1 - momentum) * rm[i] + momentum * m);
    rv[i] = static_cast<float>((1 - momentum) * rv[i] + momentum * var * count / (count - 1));
  }
  Tensor y = Tensor::empty(xv.shape(), xv.dtype(), xv.device());
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
