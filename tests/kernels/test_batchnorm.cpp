// Tests for the batch-norm kernels (kernels/cpu/batchnorm.cpp): hand-computed forward and
// running statistics, PyTorch reference values, finite-difference gradients through the batch
// statistics, split functions composed == whole, eval mode, f32 vs f64 and argument errors.
#include <cmath>
#include <limits>

#include "core/rng.h"
#include "kernels/batchnorm_math.h"
#include "kernels/ops.h"
#include "tests/kernels/gradcheck.h"

using namespace ringgrad;
using namespace ringgrad::testing;

namespace {

Tensor like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype()); }

Tensor channels(const std::vector<double>& v) {
  return Tensor::from_vector<double>(v, {static_cast<int64_t>(v.size())});
}

// y of a training forward that leaves no running statistics behind.
Tensor train_output(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps) {
  Tensor y = like(x), mean = Tensor::empty({x.size(1)}, x.dtype()), invstd = like(mean);
  Tensor no_running_mean, no_running_var;
  kernels::batchnorm_forward_train(y, mean, invstd, no_running_mean, no_running_var, x, gamma, beta,
                                   0.1, eps);
  return y;
}

// Two-pass mean and unbiased variance of channel c of x (N, C, H, W), the textbook way.
void channel_moments(const Tensor& x, int64_t c, double& mean, double& unbiased_var) {
  const int64_t n = x.size(0), ch = x.size(1), hw = x.size(2) * x.size(3);
  const double* p = x.data<double>();
  double sum = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < hw; ++j) sum += p[(i * ch + c) * hw + j];
  mean = sum / static_cast<double>(n * hw);
  double sq = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < hw; ++j) sq += std::pow(p[(i * ch + c) * hw + j] - mean, 2);
  unbiased_var = sq / static_cast<double>(n * hw - 1);
}

}  // namespace

TEST_CASE("batchnorm train forward: two-element channels worked by hand") {
  // x (2, 2, 1, 1): channel 0 holds {1, 3} (mean 2, biased var 1, unbiased 2),
  // channel 1 holds {-2, 2} (mean 0, biased var 4, unbiased 8). With eps = 0:
  // xhat0 = {-1, 1}, xhat1 = {-1, 1}; y = xhat * gamma + beta with gamma {2, 3}, beta {0.5, -1}.
  Tensor x = Tensor::from_vector<double>({1, -2, 3, 2}, {2, 2, 1, 1});
  Tensor gamma = channels({2, 3}), beta = channels({0.5, -1});
  Tensor running_mean = channels({0, 0}), running_var = channels({1, 1});
  Tensor y = like(x), save_mean = channels({0, 0}), save_invstd = channels({0, 0});
  kernels::batchnorm_forward_train(y, save_mean, save_invstd, running_mean, running_var, x, gamma,
                                   beta, /*momentum=*/0.1, /*eps=*/0.0);
  CHECK(y.to_vector<double>() == std::vector<double>{-1.5, -4, 2.5, 2});
  CHECK(save_mean.to_vector<double>() == std::vector<double>{2, 0});
  CHECK(save_invstd.to_vector<double>() == std::vector<double>{1, 0.5});
  // running_mean = 0.9 * 0 + 0.1 * {2, 0}; running_var = 0.9 * 1 + 0.1 * {2, 8}.
  check_close(running_mean, channels({0.2, 0}), 1e-15, "running_mean");
  check_close(running_var, channels({1.1, 1.7}), 1e-15, "running_var");
}

TEST_CASE("batchnorm train forward: matches PyTorch 1.13") {
  // Expected values from PyTorch 1.13: F.batch_norm(x, rm, rv, g, b, training=True,
  // momentum=0.1, eps=1e-5) in float64 with these x, g, b and rm = [0, 1], rv = [1, 2].
  Tensor x = Tensor::from_vector<double>(
      {0.5, -1.0, 2.0, 3.0, 1.5, -0.5, 1.0, 0.0, -2.0, 2.5, 4.0, 1.0}, {2, 2, 1, 3});
  Tensor gamma = channels({1.5, -0.5}), beta = channels({0.25, 1.0});
  Tensor running_mean = channels({0, 1}), running_var = channels({1, 2});
  Tensor y = like(x), save_mean = channels({0, 0}), save_invstd = channels({0, 0});
  kernels::batchnorm_forward_train(y, save_mean, save_invstd, running_mean, running_var, x, gamma,
                                   beta, 0.1, 1e-5);
  const std::vector<double> torch_y = {0.7291560156200596, -0.995805640612155,  2.4541176718522744,
                                       0.6278119613027777, 1.1431492456527779,  1.8302656247861113,
                                       1.3041432343641313, 0.15416879687598808, -2.145780078100298,
                                       0.799591056086111,  0.2842537717361109,  1.3149283404361112};
  check_close(y, Tensor::from_vector<double>(torch_y, {12}), 1e-12, "y");
  check_close(running_mean, channels({0.008333333333333333, 1.0916666666666668}), 1e-12, "rm");
  check_close(running_var, channels({1.1041666666666667, 2.0541666666666667}), 1e-12, "rv");
}

TEST_CASE("batchnorm running statistics over several steps follow PyTorch's update rule") {
  Generator g(11);
  const int64_t C = 3;
  const double momentum = 0.3, eps = 1e-5;
  Tensor running_mean = channels({0, 0, 0}), running_var = channels({1, 1, 1});
  std::vector<double> expect_mean(C, 0.0), expect_var(C, 1.0);
  for (int step = 0; step < 4; ++step) {
    Tensor x = random_tensor({4, C, 3, 2}, g, DType::f64, 1.0 + step);
    Tensor y = like(x), save_mean = channels({0, 0, 0}), save_invstd = channels({0, 0, 0});
    kernels::batchnorm_forward_train(y, save_mean, save_invstd, running_mean, running_var, x,
                                     Tensor(), Tensor(), momentum, eps);
    for (int64_t c = 0; c < C; ++c) {
      double mean, unbiased_var;
      channel_moments(x, c, mean, unbiased_var);
      expect_mean[c] = (1 - momentum) * expect_mean[c] + momentum * mean;
      expect_var[c] = (1 - momentum) * expect_var[c] + momentum * unbiased_var;
    }
  }
  check_close(running_mean, channels(expect_mean), 1e-12, "running_mean");
  check_close(running_var, channels(expect_var), 1e-12, "running_var");
}

TEST_CASE("batchnorm eval forward uses the running statistics") {
  Generator g(5);
  Tensor x = random_tensor({2, 3, 2, 2}, g);
  Tensor gamma = channels({1.5, -1, 0.5}), beta = channels({0, 2, -0.5});
  Tensor running_mean = channels({0.5, -0.25, 1}), running_var = channels({4, 0.25, 1});
  const double eps = 1e-3;
  Tensor y = like(x);
  kernels::batchnorm_forward_eval(y, x, gamma, beta, running_mean, running_var, eps);
  Tensor expected = like(x);
  const double* xp = x.data<double>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t c = (i / 4) % 3;
    const double m = running_mean.data<double>()[c], v = running_var.data<double>()[c];
    expected.data<double>()[i] =
        (xp[i] - m) / std::sqrt(v + eps) * gamma.data<double>()[c] + beta.data<double>()[c];
  }
  check_close(y, expected, 1e-14, "eval y");
}

TEST_CASE("batchnorm training backward matches finite differences through the batch statistics") {
  Generator g(7);
  const double eps = 1e-5;
  Tensor x = random_tensor({3, 2, 2, 3}, g, DType::f64, 2.0);
  Tensor gamma = random_tensor({2}, g), beta = random_tensor({2}, g);
  Tensor dy = random_tensor(x.shape(), g);
  Tensor y = like(x), save_mean = like(gamma), save_invstd = like(gamma), none_mean, none_var;
  kernels::batchnorm_forward_train(y, save_mean, save_invstd, none_mean, none_var, x, gamma, beta,
                                   0.1, eps);
  Tensor dx = like(x), dgamma = like(gamma), dbeta = like(beta);
  kernels::batchnorm_backward(dx, dgamma, dbeta, dy, x, gamma, save_mean, save_invstd);

  auto f = [&] { return train_output(x, gamma, beta, eps); };
  check_close(dx, numeric_gradient(f, x, dy), 1e-6, "dx");
  check_close(dgamma, numeric_gradient(f, gamma, dy), 1e-6, "dgamma");
  check_close(dbeta, numeric_gradient(f, beta, dy), 1e-6, "dbeta");

  SUBCASE("undefined outputs are skipped") {
    Tensor only_dx = like(x), no_dgamma, no_dbeta;
    kernels::batchnorm_backward(only_dx, no_dgamma, no_dbeta, dy, x, gamma, save_mean, save_invstd);
    check_close(only_dx, dx, 0, "dx alone");
  }
}

TEST_CASE("batchnorm split functions composed equal the whole forward and backward") {
  // f32 data with f64 sums, as SyncBatchNorm keeps them. The split functions go by channel
  // blocks; with 3 threads the whole forward and backward go by runs of images.
  ThreadCountGuard guard;
  for (const int threads : {1, 3}) {
    kernels::set_num_threads(threads);
    CAPTURE(threads);
    Generator g(9);
    const double eps = 1e-5;
    const int64_t C = 3;
    Tensor x = random_tensor({4, C, 3, 5}, g, DType::f32, 3.0);
    Tensor gamma = random_tensor({C}, g, DType::f32), beta = random_tensor({C}, g, DType::f32);
    Tensor dy = random_tensor(x.shape(), g, DType::f32);
    const double count = 4 * 3 * 5;

    Tensor sum = Tensor::empty({C}, DType::f64), sum_sq = like(sum);
    kernels::batchnorm_channel_sums(sum, sum_sq, x);
    Tensor x64 = x.to(DType::f64);
    for (int64_t c = 0; c < C; ++c) {
      double mean, unbiased_var;
      channel_moments(x64, c, mean, unbiased_var);
      CHECK(sum.data<double>()[c] == doctest::Approx(mean * count).epsilon(1e-12));
      const double sq = unbiased_var * (count - 1) + mean * mean * count;
      CHECK(sum_sq.data<double>()[c] == doctest::Approx(sq).epsilon(1e-12));
    }

    Tensor mean = like(sum), invstd = like(sum);
    for (int64_t c = 0; c < C; ++c) {
      const double m = sum.data<double>()[c] / count;
      mean.data<double>()[c] = m;
      invstd.data<double>()[c] = 1 / std::sqrt(sum_sq.data<double>()[c] / count - m * m + eps);
    }
    Tensor y_split = like(x);
    kernels::batchnorm_apply(y_split, x, mean, invstd, gamma, beta);

    Tensor y = like(x), save_mean = like(gamma), save_invstd = like(gamma), none_mean, none_var;
    kernels::batchnorm_forward_train(y, save_mean, save_invstd, none_mean, none_var, x, gamma, beta,
                                     0.1, eps);
    check_close(y_split, y, 1e-6, "apply vs forward_train");
    check_close(save_mean, mean, 1e-6, "save_mean");
    check_close(save_invstd, invstd, 1e-6, "save_invstd");

    Tensor sum_dy = like(sum), sum_dy_xhat = like(sum);
    kernels::batchnorm_backward_reduce(sum_dy, sum_dy_xhat, dy, x, mean, invstd);
    Tensor dx_split = like(x);
    kernels::batchnorm_backward_apply(dx_split, dy, x, mean, invstd, gamma, sum_dy, sum_dy_xhat,
                                      count);
    Tensor dx = like(x), dgamma = like(gamma), dbeta = like(gamma);
    kernels::batchnorm_backward(dx, dgamma, dbeta, dy, x, gamma, save_mean, save_invstd);
    check_close(dx_split, dx, 1e-5, "backward_apply vs backward");
    check_close(dgamma, sum_dy_xhat, 1e-5, "dgamma == sum_dy_xhat");
    check_close(dbeta, sum_dy, 1e-5, "dbeta == sum_dy");
  }
}

TEST_CASE("batchnorm float32 agrees with float64") {
  Generator g(13);
  Tensor x = random_tensor({2, 4, 3, 3}, g, DType::f64, 2.0);
  Tensor gamma = random_tensor({4}, g), beta = random_tensor({4}, g),
         dy = random_tensor(x.shape(), g);
  auto run = [&](DType t, Tensor& dx) {
    Tensor xt = x.to(t), gt = gamma.to(t), y = like(xt), mean = like(gt), invstd = like(gt);
    Tensor none_mean, none_var, no_dgamma, no_dbeta;
    kernels::batchnorm_forward_train(y, mean, invstd, none_mean, none_var, xt, gt, beta.to(t), 0.1,
                                     1e-5);
    dx = like(xt);
    kernels::batchnorm_backward(dx, no_dgamma, no_dbeta, dy.to(t), xt, gt, mean, invstd);
    return y;
  };
  Tensor dx32, dx64;
  check_close(run(DType::f32, dx32), run(DType::f64, dx64), 1e-5, "y f32 vs f64");
  check_close(dx32, dx64, 1e-5, "dx f32 vs f64");
}

TEST_CASE("batchnorm rejects bad arguments with a message") {
  Tensor x = Tensor::zeros({2, 3, 2, 2}, DType::f64), y = like(x);
  Tensor mean = Tensor::zeros({3}, DType::f64), invstd = Tensor::full({3}, 1.0, DType::f64);
  Tensor none;
  SUBCASE("per-channel tensor of the wrong length") {
    Tensor short_gamma = Tensor::zeros({2}, DType::f64);
    CHECK_THROWS_WITH_AS(kernels::batchnorm_apply(y, x, mean, invstd, short_gamma, none),
                         doctest::Contains("gamma"), Error);
  }
  SUBCASE("output shaped unlike x") {
    Tensor flat = Tensor::empty({24}, DType::f64);
    CHECK_THROWS_AS(kernels::batchnorm_apply(flat, x, mean, invstd, none, none), Error);
  }
  SUBCASE("one value per channel cannot be normalised in training") {
    Tensor x1 = Tensor::zeros({1, 3, 1, 1}, DType::f64), y1 = like(x1);
    Tensor m = like(mean), s = like(mean);
    CHECK_THROWS_WITH_AS(
        kernels::batchnorm_forward_train(y1, m, s, none, none, x1, none, none, 0.1, 1e-5),
        doctest::Contains("more than one value per channel"), Error);
  }
  SUBCASE("integer data") {
    Tensor xi = Tensor::zeros({2, 3, 2, 2}, DType::i32), yi = like(xi);
    CHECK_THROWS_AS(kernels::batchnorm_apply(yi, xi, mean, invstd, none, none), InvalidArgument);
  }
}

TEST_CASE("batchnorm variance keeps NaN instead of clamping it to 0") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(std::isnan(kernels::bn_biased_var(nan, 1.0, 2.0)));
  CHECK(kernels::bn_biased_var(2.0, 2.0 - 1e-12, 2.0) == 0.0);  // rounding below 0 still clamps
}
