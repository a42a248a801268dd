// Fully connected layer on the CPU (f32, f64; f16 and bf16 through f32): three GEMMs, each
// split over OpenMP threads.
//   forward   y (N, OUT) = x (N, IN) w^T + bias
//   backward  dx = dy w,  dw = dy^T x,  dbias = column sums of dy
#include <algorithm>
#include <vector>

#include "kernels/cpu/cpu_dispatch.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/half_via_f32.h"
#include "kernels/ops.h"
#include "ringgrad/config.h"
#ifdef HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#endif

namespace ringgrad::kernels {

namespace {

using cpu::Op;
using cpu::parallel_gemm;

struct LinearSizes {
  int64_t N, IN, OUT;
};

LinearSizes linear_sizes(const Tensor& x, const Tensor& w, const char* op) {
  RG_CHECK(x.defined() && w.defined(), op, ": x and w must be defined");
  cpu::check_cpu(x, op);
  RG_CHECK_EQ(x.dim(), 2, op, ": x must be (N, IN), got shape ", x.shape().str());
  RG_CHECK_EQ(w.dim(), 2, op, ": w must be (OUT, IN), got shape ", w.shape().str());
  RG_CHECK_EQ(x.size(1), w.size(1), op, ": x has ", x.size(1), " features but w expects ",
              w.size(1), " (x ", x.shape().str(), ", w ", w.shape().str(), ")");
  cpu::check_operand(w, w.shape(), x.dtype(), op, "w");
  return {x.size(0), x.size(1), w.size(0)};
}

}  // namespace

void linear_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias) {
  constexpr const char* op = "linear_forward";
#ifdef HAVE_CUDA
  if (cpu::on_cuda(op, {{"y", y}, {"x", x}, {"w", w}, {"bias", bias}}))
    return cuda::linear_forward(y, x, w, bias);
#endif
  if (x.defined() && cpu::is_half(x.dtype())) {
    cpu::check_half_operands(op, x, {&w, &bias, &y});
    Tensor y32 = cpu::f32_output(y);
    linear_forward(y32, cpu::widened(x), cpu::widened(w), cpu::widened(bias));
    return cpu::round_into(y, y32);
  }
  const LinearSizes s = linear_sizes(x, w, op);
  cpu::check_operand(y, {s.N, s.OUT}, x.dtype(), op, "y");
  if (bias.defined()) cpu::check_operand(bias, {s.OUT}, x.dtype(), op, "bias");
  cpu::dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    T* yp = y.data<T>();
    // With a bias, y starts as bias in every row and the GEMM adds x w^T to it (beta = 1).
    if (bias.defined()) {
      const T* b = bias.data<T>();
      for (int64_t n = 0; n < s.N; ++n) std::copy_n(b, s.OUT, yp + n * s.OUT);
    }
    parallel_gemm(Op::none, Op::transpose, s.N, s.OUT, s.IN, T(1), x.data<T>(), s.IN, w.data<T>(),
                  s.IN, T(bias.defined() ? 1 : 0), yp, s.OUT);
  });
}

void linear_backward(Tensor& dx, Tensor& dw, Tensor& dbias, const Tensor& dy, const Tensor& x,
                     const Tensor& w) {
  constexpr const char* op = "linear_backward";
#ifdef HAVE_CUDA
  if (cpu::on_cuda(op, {{"dx", dx}, {"dw", dw}, {"dbias", dbias}, {"dy", dy}, {"x", x}, {"w", w}}))
    return cuda::linear_backward(dx, dw, dbias, dy, x, w);
#endif
  if (x.defined() && cpu::is_half(x.dtype())) {
    cpu::check_half_operands(op, x, {&w, &dy, &dx, &dw, &dbias});
    Tensor dx32 = cpu::f32_output(dx), dw32 = cpu::f32_output(dw), db32 = cpu::f32_output(dbias);
    linear_backward(dx32, dw32, db32, cpu::widened(dy), cpu::widened(x), cpu::widened(w));
    cpu::round_into(dx, dx32);
    cpu::round_into(dw, dw32);
    return cpu::round_into(dbias, db32);
  }
  const LinearSizes s = linear_sizes(x, w, op);
  cpu::check_operand(dy, {s.N, s.OUT}, x.dtype(), op, "dy");
  if (dx.defined()) cpu::check_operand(dx, x.shape(), x.dtype(), op, "dx");
  if (dw.defined()) cpu::check_operand(dw, w.shape(), x.dtype(), op, "dw");
  if (dbias.defined()) cpu::check_operand(dbias, {s.OUT}, x.dtype(), op, "dbias");
  cpu::dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* g = dy.data<T>();
    if (dx.defined())
      parallel_gemm(Op::none, Op::none, s.N, s.IN, s.OUT, T(1), g, s.OUT, w.data<T>(), s.IN, T(0),
                    dx.data<T>(), s.IN);
    if (dw.defined())
      parallel_gemm(Op::transpose, Op::none, s.OUT, s.IN, s.N, T(1), g, s.OUT, x.data<T>(), s.IN,
                    T(0), dw.data<T>(), s.IN);
    if (dbias.defined()) {
      std::vector<double> sum(s.OUT, 0.0);  // accumulated in double, as conv2d's dbias
      for (int64_t n = 0; n < s.N; ++n)
        for (int64_t o = 0; o < s.OUT; ++o) sum[o] += g[n * s.OUT + o];
      T* db = dbias.data<T>();
      for (int64_t o = 0; o < s.OUT; ++o) db[o] = static_cast<T>(sum[o]);
    }
  });
}

}  // namespace ringgrad::kernels
