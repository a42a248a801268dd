// Fully connected layer on the CPU (f32, f64; f16 and bf16 through f32): three GEMMs, each
// split over OpenMP threads.
//   forward   y (N, OUT) = x (N, IN) w^T + bias
//   backward  dx = dy w,  dw = dy^T x,  dbias = column sums of dy
#include <algorithm>
#include <vector>

#include "kernels/cpu/cpu_dispatch.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/half_via_f32.h"
#include "kernels/linear_sizes.h"

namespace ringgrad::kernels::cpu {

namespace {

// linear_sizes (kernels/linear_sizes.h), then x on the CPU and w of x's dtype.
LinearSizes checked_sizes(const Tensor& x, const Tensor& w, const char* op) {
  const LinearSizes s = linear_sizes(x, w, op);
  check_cpu(x, op);
  check_operand(w, w.shape(), x.dtype(), op, "w");
  return s;
}

}  // namespace

void linear_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias) {
  constexpr const char* op = "linear_forward";
  if (x.defined() && is_half(x.dtype())) {
    check_half_operands(op, x, {&w, &bias, &y});
    Tensor y32 = f32_output(y);
    cpu::linear_forward(y32, widened(x), widened(w), widened(bias));
    return round_into(y, y32);
  }
  const LinearSizes s = checked_sizes(x, w, op);
  check_operand(y, {s.N, s.OUT}, x.dtype(), op, "y");
  if (bias.defined()) check_operand(bias, {s.OUT}, x.dtype(), op, "bias");
  dispatch_float(x.dtype(), op, [&](auto tag) {
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
  if (x.defined() && is_half(x.dtype())) {
    check_half_operands(op, x, {&w, &dy, &dx, &dw, &dbias});
    Tensor dx32 = f32_output(dx), dw32 = f32_output(dw), db32 = f32_output(dbias);
    cpu::linear_backward(dx32, dw32, db32, widened(dy), widened(x), widened(w));
    round_into(dx, dx32);
    round_into(dw, dw32);
    return round_into(dbias, db32);
  }
  const LinearSizes s = checked_sizes(x, w, op);
  check_backward_operands(dx, dw, dbias, dy, x, w, s, op, check_operand);
  dispatch_float(x.dtype(), op, [&](auto tag) {
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

}  // namespace ringgrad::kernels::cpu
