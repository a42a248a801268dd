// Finite-difference gradient checking for kernels and autograd, in float64.
// numeric_gradient(f, x, dy) returns d<f(x), dy>/dx by central differences, where f reads x
// (mutated in place and restored) and returns its output; compare it with the analytic
// gradient from the backward kernel fed with the same dy. Also the helpers the kernel tests
// share: random tensors, closeness checks, and ThreadCountGuard.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <functional>

#include "core/rng.h"
#include "core/tensor.h"
#include "kernels/ops.h"

namespace ringgrad::testing {

// Restores the CPU kernels' thread count when a test that changes it ends.
struct ThreadCountGuard {
  int saved = kernels::num_threads();
  ~ThreadCountGuard() { kernels::set_num_threads(saved); }
};

inline Tensor random_tensor(const Shape& shape, Generator& g, DType dtype = DType::f64,
                            double scale = 1.0) {
  Tensor t = Tensor::empty(shape, DType::f64);
  double* p = t.data<double>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = scale * g.normal();
  return t.to(dtype);
}

inline double dot(const Tensor& a, const Tensor& b) {
  const double* x = a.data<double>();
  const double* y = b.data<double>();
  double s = 0;
  for (int64_t i = 0; i < a.numel(); ++i) s += x[i] * y[i];
  return s;
}

inline Tensor numeric_gradient(const std::function<Tensor()>& f, Tensor& x, const Tensor& dy,
                               double eps = 1e-6) {
  Tensor grad = Tensor::zeros(x.shape(), DType::f64);
  double* xp = x.data<double>();
  double* gp = grad.data<double>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double orig = xp[i];
    xp[i] = orig + eps;
    const double plus = dot(f(), dy);
    xp[i] = orig - eps;
    const double minus = dot(f(), dy);
    xp[i] = orig;
    gp[i] = (plus - minus) / (2 * eps);
  }
  return grad;
}

// Largest |a - b| / max(1, |b|) over all elements; reports the worst element.
inline void check_close(const Tensor& actual, const Tensor& expected, double tol,
                        const char* what) {
  REQUIRE(actual.numel() == expected.numel());
  Tensor a = actual.to(DType::f64), e = expected.to(DType::f64);
  const double* ap = a.data<double>();
  const double* ep = e.data<double>();
  double worst = 0;
  int64_t at = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double err = std::abs(ap[i] - ep[i]) / std::max(1.0, std::abs(ep[i]));
    if (!(err <= worst)) {  // also catches NaN
      worst = err;
      at = i;
    }
  }
  INFO(what, ": worst element ", at, " actual ", a.numel() ? ap[at] : 0.0, " expected ",
       e.numel() ? ep[at] : 0.0);
  CHECK(worst <= tol);
}

}  // namespace ringgrad::testing
