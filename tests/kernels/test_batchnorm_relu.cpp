// Tests for the fused batch norm + relu (+ residual add) kernels (kernels/cpu/batchnorm.cpp,
// batchnorm_passes.cpp) against the unfused ops they replace, which stay the reference:
// forward (training and eval), running statistics and backward, with and without a residual,
// over layouts that reach every block shape (hw 1, 4, 16, 49, 784; many and few channels per
// block; 1 to 3 threads), in f64, f32 and bf16 (planes of 16 values or more on AVX-512 by the
// plane kernels of batchnorm_planes.cpp, a last partial vector at 49); finite-difference
// gradients of the fused op (through the residual too); and batch norm on bf16 data against f64 on
// the same values.
#include <cmath>
#include <limits>
#include <vector>

#include "core/rng.h"
#include "kernels/ops.h"
#include "tests/kernels/gradcheck.h"

using namespace ringgrad;
using namespace ringgrad::testing;

namespace {

Tensor like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype()); }

struct Params {
  Tensor gamma, beta, running_mean, running_var;  // f32 per-channel tensors, f64 for f64 data
};

Params random_params(int64_t channels, DType dtype, Generator& g) {
  const DType per_channel = dtype == DType::f64 ? DType::f64 : DType::f32;
  return {random_tensor({channels}, g, per_channel), random_tensor({channels}, g, per_channel),
          random_tensor({channels}, g, per_channel, 0.1),
          random_tensor({channels}, g, DType::f64, 0.1).to(DType::f64).to(per_channel)};
}

struct Result {
  Tensor y, save_mean, save_invstd, running_mean, running_var;
  Tensor dx, dresidual, dgamma, dbeta;
};

// Training forward then backward, fused (one op each way) or as the separate ops.
Result run(bool fused, const Tensor& x, const Tensor& residual, const Params& p, const Tensor& dy) {
  Result r;
  const DType per_channel = p.gamma.dtype();
  r.y = like(x);
  r.save_mean = Tensor::empty({x.size(1)}, per_channel);
  r.save_invstd = like(r.save_mean);
  r.running_mean = p.running_mean.clone();
  r.running_var = p.running_var.clone();
  if (fused) {
    kernels::batchnorm_relu_forward_train(r.y, r.save_mean, r.save_invstd, r.running_mean,
                                          r.running_var, x, residual, p.gamma, p.beta, 0.1, 1e-5);
  } else {
    kernels::batchnorm_forward_train(r.y, r.save_mean, r.save_invstd, r.running_mean, r.running_var,
                                     x, p.gamma, p.beta, 0.1, 1e-5);
    if (residual.defined())
      kernels::add_relu_forward(r.y, r.y, residual);
    else
      kernels::relu_forward(r.y, r.y);
  }
  r.dx = like(x);
  r.dgamma = like(p.gamma);
  r.dbeta = like(p.gamma);
  if (residual.defined()) r.dresidual = like(x);
  if (fused) {
    kernels::batchnorm_relu_backward(r.dx, r.dresidual, r.dgamma, r.dbeta, dy, r.y, x, p.gamma,
                                     r.save_mean, r.save_invstd);
  } else {
    Tensor masked = like(x);
    kernels::relu_backward(masked, dy, r.y);
    kernels::batchnorm_backward(r.dx, r.dgamma, r.dbeta, masked, x, p.gamma, r.save_mean,
                                r.save_invstd);
    if (residual.defined()) r.dresidual = masked;
  }
  return r;
}

void check_results(const Result& got, const Result& want, double tol) {
  check_close(got.y, want.y, tol, "y");
  check_close(got.save_mean, want.save_mean, tol, "save_mean");
  check_close(got.save_invstd, want.save_invstd, tol, "save_invstd");
  check_close(got.running_mean, want.running_mean, tol, "running_mean");
  check_close(got.running_var, want.running_var, tol, "running_var");
  check_close(got.dx, want.dx, tol, "dx");
  check_close(got.dgamma, want.dgamma, tol, "dgamma");
  check_close(got.dbeta, want.dbeta, tol, "dbeta");
  if (want.dresidual.defined()) check_close(got.dresidual, want.dresidual, tol, "dresidual");
}

// (n, c, h, w): hw 16 with few channels; hw 1 and 4 with many channels per block; 7x7; 28x28.
const std::vector<Shape> kLayouts = {{3, 5, 4, 4}, {8, 70, 1, 1},  {4, 33, 2, 2},
                                     {3, 6, 7, 7}, {2, 3, 28, 28}, {1, 6, 3, 1}};

}  // namespace

TEST_CASE("batchnorm_relu forward and backward equal batch norm, add and relu run apart") {
  Generator g(21);
  ThreadCountGuard guard;
  for (const int threads : {1, 3})
    for (const DType dtype : {DType::f64, DType::f32})
      for (const Shape& shape : kLayouts)
        for (const bool with_residual : {false, true}) {
          kernels::set_num_threads(threads);
          CAPTURE(threads);
          CAPTURE(std::string(dtype_name(dtype)));
          CAPTURE(shape);
          CAPTURE(with_residual);
          const Tensor x = random_tensor(shape, g, dtype, 2.0);
          const Tensor residual = with_residual ? random_tensor(shape, g, dtype) : Tensor();
          const Tensor dy = random_tensor(shape, g, dtype);
          const Params p = random_params(shape[1], dtype, g);
          check_results(run(true, x, residual, p, dy), run(false, x, residual, p, dy),
                        dtype == DType::f64 ? 1e-12 : 2e-5);
        }
}

TEST_CASE("batchnorm_relu in eval mode equals the eval batch norm followed by add and relu") {
  Generator g(22);
  for (const Shape& shape : kLayouts) {
    CAPTURE(shape);
    const Tensor x = random_tensor(shape, g, DType::f32, 2.0);
    const Tensor residual = random_tensor(shape, g, DType::f32);
    const Params p = random_params(shape[1], DType::f32, g);
    Tensor fused = like(x), apart = like(x), none;
    const Tensor var = p.running_var.to(DType::f64);
    Tensor positive_var = like(p.running_var);
    for (int64_t c = 0; c < shape[1]; ++c)
      positive_var.set_element(c, std::fabs(var.element(c)) + 0.5);
    kernels::batchnorm_relu_forward_eval(fused, x, residual, p.gamma, p.beta, p.running_mean,
                                         positive_var, 1e-5);
    kernels::batchnorm_forward_eval(apart, x, p.gamma, p.beta, p.running_mean, positive_var, 1e-5);
    kernels::add_relu_forward(apart, apart, residual);
    check_close(fused, apart, 1e-6, "eval y with residual");
    kernels::batchnorm_relu_forward_eval(fused, x, none, p.gamma, p.beta, p.running_mean,
                                         positive_var, 1e-5);
    kernels::batchnorm_forward_eval(apart, x, p.gamma, p.beta, p.running_mean, positive_var, 1e-5);
    kernels::relu_forward(apart, apart);
    check_close(fused, apart, 1e-6, "eval y");
  }
}

TEST_CASE("batchnorm_relu backward matches central finite differences, residual included") {
  Generator g(23);
  const Shape shape{3, 2, 2, 3};
  Tensor x = random_tensor(shape, g, DType::f64, 2.0), residual = random_tensor(shape, g);
  Params p = random_params(2, DType::f64, g);
  const Tensor dy = random_tensor(shape, g);
  const Result r = run(true, x, residual, p, dy);
  auto f = [&] {
    Tensor y = like(x), mean = like(p.gamma), invstd = like(p.gamma), none_mean, none_var;
    kernels::batchnorm_relu_forward_train(y, mean, invstd, none_mean, none_var, x, residual,
                                          p.gamma, p.beta, 0.1, 1e-5);
    return y;
  };
  check_close(r.dx, numeric_gradient(f, x, dy), 1e-6, "dx");
  check_close(r.dresidual, numeric_gradient(f, residual, dy), 1e-6, "dresidual");
  check_close(r.dgamma, numeric_gradient(f, p.gamma, dy), 1e-6, "dgamma");
  check_close(r.dbeta, numeric_gradient(f, p.beta, dy), 1e-6, "dbeta");
}

TEST_CASE("batchnorm_relu backward masks by relu_grad's y <= 0 at zeros, infinities and NaNs") {
  // The bf16 planes test y on its bits (kernels/cpu/batchnorm_planes.cpp); relu_grad
  // (elementwise_math.h) is the definition: the gradient stops where y <= 0 (+0, -0, -inf, any
  // negative) and passes elsewhere, NaN of either sign and +inf included. Against relu_backward
  // then batchnorm_backward on the same y, with and without the residual's gradient written.
  Generator g(27);
  ThreadCountGuard guard;
  kernels::set_num_threads(1);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> special = {0.0f, -0.0f,  inf,     -inf, nan,
                                      -nan, 1e-40f, -1e-40f, 2.0f, -2.0f};
  for (const DType dtype : {DType::f32, DType::bf16})
    for (const Shape& shape : {Shape{2, 3, 7, 7}, Shape{1, 2, 28, 28}})
      for (const bool with_residual : {false, true}) {
        CAPTURE(std::string(dtype_name(dtype)));
        CAPTURE(shape);
        CAPTURE(with_residual);
        const Tensor x = random_tensor(shape, g, dtype, 2.0);
        const Tensor dy = random_tensor(shape, g, dtype);
        Tensor y = random_tensor(shape, g, DType::f32);
        for (int64_t i = 0; i < y.numel(); i += 3)
          y.set_element(i, special[static_cast<size_t>(i / 3) % special.size()]);
        y = y.to(dtype);
        const Params p = random_params(shape[1], DType::f32, g);
        Tensor mean = Tensor::empty({shape[1]}, DType::f32), invstd = like(mean), none;
        Tensor bn = like(x);  // only the statistics are used
        kernels::batchnorm_forward_train(bn, mean, invstd, none, none, x, p.gamma, p.beta, 0.1,
                                         1e-5);
        Result fused, apart;
        for (Result* r : {&fused, &apart}) {
          r->dx = like(x);
          r->dgamma = like(p.gamma);
          r->dbeta = like(p.gamma);
        }
        if (with_residual) fused.dresidual = like(x);
        kernels::batchnorm_relu_backward(fused.dx, fused.dresidual, fused.dgamma, fused.dbeta, dy,
                                         y, x, p.gamma, mean, invstd);
        Tensor masked = like(x);
        kernels::relu_backward(masked, dy, y);
        kernels::batchnorm_backward(apart.dx, apart.dgamma, apart.dbeta, masked, x, p.gamma, mean,
                                    invstd);
        if (with_residual) check_close(fused.dresidual, masked, 0, "dresidual");
        check_close(fused.dx, apart.dx, 2e-5, "dx");
        check_close(fused.dgamma, apart.dgamma, 2e-5, "dgamma");
        check_close(fused.dbeta, apart.dbeta, 2e-5, "dbeta");
      }
}

TEST_CASE("batch norm on bf16 data is f64 batch norm on the same values, rounded once") {
  // bf16 data, f32 parameters and statistics, f32 arithmetic (PyTorch's CPU batch norm under
  // autocast). Each data result is rounded to bf16 once: within half a bf16 ulp (2^-8
  // relative) of the f64 result, plus f32 arithmetic error. dgamma and dbeta stay f32. With
  // several threads the bf16 planes go by runs of images (2 threads: runs of 1 and 2 images).
  Generator g(24);
  ThreadCountGuard guard;
  const double tol = std::ldexp(1.0, -8) * 1.05;
  for (const int threads : {1, 2})
    for (const Shape& shape : kLayouts)
      for (const bool with_residual : {false, true}) {
        kernels::set_num_threads(threads);
        CAPTURE(threads);
        CAPTURE(shape);
        CAPTURE(with_residual);
        const Tensor x = random_tensor(shape, g, DType::bf16, 2.0);
        const Tensor residual = with_residual ? random_tensor(shape, g, DType::bf16) : Tensor();
        const Tensor dy = random_tensor(shape, g, DType::bf16);
        const Params p = random_params(shape[1], DType::f32, g);
        const Result got = run(true, x, residual, p, dy);
        CHECK(got.y.dtype() == DType::bf16);
        CHECK(got.dx.dtype() == DType::bf16);
        auto wide = [](const Tensor& t) { return t.defined() ? t.to(DType::f64) : Tensor(); };
        const Params p64{wide(p.gamma), wide(p.beta), wide(p.running_mean), wide(p.running_var)};
        const Result want = run(true, wide(x), wide(residual), p64, wide(dy));
        check_close(got.y, want.y, tol, "y");
        check_close(got.save_mean, want.save_mean, 1e-6, "save_mean");
        check_close(got.save_invstd, want.save_invstd, 1e-6, "save_invstd");
        // The relu masks agree (y is rounded where it is computed), so the gradients follow.
        check_close(got.dx, want.dx, tol, "dx");
        check_close(got.dgamma, want.dgamma, 1e-5, "dgamma");
        check_close(got.dbeta, want.dbeta, 1e-5, "dbeta");
        if (with_residual) check_close(got.dresidual, want.dresidual, tol, "dresidual");
      }
}

TEST_CASE("batch norm on bf16 data rounds each result as float_to_bf16 does, subnormals too") {
  // The bf16 planes convert two vectors at once with the CPU's instruction and put the values
  // back in order, or, where a value is an f32 subnormal (which that instruction flushes), take
  // the integer rounding (kernels/cpu/batchnorm_planes.cpp, store_halves). gamma = 1e-39 makes
  // the eval forward's results subnormal in most vectors, gamma = 1 in none; each must be
  // float_to_bf16 of the f32 value (x - mean) * scale + beta, one fma, bit for bit, in order.
  Generator g(28);
  for (const Shape& shape : {Shape{2, 3, 7, 7}, Shape{1, 2, 28, 28}, Shape{3, 2, 4, 4}})
    for (const double gamma_value : {1e-39, 1.0}) {
      CAPTURE(shape);
      CAPTURE(gamma_value);
      const Tensor x = random_tensor(shape, g, DType::bf16, 2.0);
      const Tensor gamma = Tensor::full({shape[1]}, gamma_value, DType::f32);
      const Tensor beta = Tensor::full({shape[1]}, 0, DType::f32);
      const Tensor mean = random_tensor({shape[1]}, g, DType::f32, 0.1);
      const Tensor var = Tensor::full({shape[1]}, 0.5, DType::f32);
      Tensor y = like(x);
      kernels::batchnorm_forward_eval(y, x, gamma, beta, mean, var, 1e-5);
      const int64_t hw = shape[2] * shape[3];
      int64_t wrong = 0;
      for (int64_t i = 0; i < x.numel(); ++i) {
        const int64_t c = i / hw % shape[1];
        const double invstd = 1 / std::sqrt(var.element(c) + 1e-5);
        const float scale = static_cast<float>(invstd * gamma.element(c));
        const float v = std::fma(
            static_cast<float>(x.element(i)) - static_cast<float>(mean.element(c)), scale, 0.0f);
        wrong += static_cast<const BFloat16*>(y.raw_data())[i].bits != float_to_bf16(v).bits;
      }
      CHECK(wrong == 0);
    }
}

// mean + spread * N(0, 1), in dtype.
Tensor offset_normal(const Shape& shape, Generator& g, double mean, double spread, DType dtype) {
  Tensor t = random_tensor(shape, g, DType::f64, spread);
  for (int64_t i = 0; i < t.numel(); ++i) t.set_element(i, mean + t.element(i));
  return t.to(dtype);
}

TEST_CASE("batch norm statistics stay accurate when the mean dwarfs the spread") {
  // f32 sums of x and x^2 would cancel in E[x^2] - mean^2 here (mean 1000, spread 1: every
  // digit f32 keeps of x^2 is taken by the mean); the kernels sum in double. bf16 planes are
  // summed in f32 after shifting by the plane's first value: with 28x28 planes of values 250
  // +- a few, the unshifted sum of squares outgrows f32's 24 bits. With dy = 1, beta large
  // enough that the relu passes everything and the mean in f64 (per-channel tensors in f64, as
  // SyncBatchNorm keeps them), dgamma = invstd * sum (x - mean) is 0: f32 sums of x - mean
  // rounded to f32 would leave count * (the rounding) without its correction.
  struct Case {
    DType dtype, per_channel;
    Shape shape;
    double mean, spread;
    bool dy_ones;  // dy = 1 and beta = 10, else both normal
  };
  for (const Case& c : {Case{DType::f32, DType::f32, {64, 3, 7, 7}, 1000, 1, false},
                        Case{DType::bf16, DType::f64, {8, 2, 28, 28}, 250, 1.5, true}}) {
    CAPTURE(c.dtype);
    Generator g(25);
    const Tensor x = offset_normal(c.shape, g, c.mean, c.spread, c.dtype);
    const Tensor dy =
        c.dy_ones ? Tensor::full(c.shape, 1, c.dtype) : random_tensor(c.shape, g, c.dtype);
    Params p = random_params(c.shape[1], c.per_channel, g);
    if (c.dy_ones) p.beta = Tensor::full({c.shape[1]}, 10, c.per_channel);
    const Result got = run(true, x, Tensor(), p, dy);
    auto wide = [](const Tensor& t) { return t.to(DType::f64); };
    const Params p64{wide(p.gamma), wide(p.beta), wide(p.running_mean), wide(p.running_var)};
    const Result want = run(true, wide(x), Tensor(), p64, wide(dy));
    check_close(got.save_invstd, want.save_invstd, 1e-4, "invstd");
    check_close(got.running_var, want.running_var, 1e-4, "running_var");
    // y rounded to bf16: half an ulp of 2^-8 relative.
    check_close(got.y, want.y, c.dtype == DType::bf16 ? std::ldexp(1.0, -8) * 1.05 : 1e-3, "y");
    check_close(got.dgamma, want.dgamma, 1e-4, "dgamma");
  }
}
