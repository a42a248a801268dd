// Every CUDA kernel (kernels/cuda) against its CPU oracle on the same random float32 inputs,
// forward and backward, within kTol (1e-4 relative, see gpu_fixtures.h) unless stated; the
// 16-bit paths against the CPU in float32 with a tolerance set by their precision.
#include <cstring>
#include <limits>
#include <utility>

#include "kernels/ops.h"
#include "ringgrad/config.h"
#include "tests/gpu/gpu_fixtures.h"

using namespace ringgrad;
using namespace ringgrad::testing;

namespace {

kernels::Conv2dParams conv(int stride, int pad) {
  kernels::Conv2dParams p;
  p.stride_h = p.stride_w = stride;
  p.pad_h = p.pad_w = pad;
  return p;
}

void compare_conv(const Shape& xs, const Shape& ws, const kernels::Conv2dParams& p, Generator& g) {
  Tensor x = random_f32(xs, g), w = random_f32(ws, g, 0.3), b = random_f32({ws[0]}, g);
  const Shape ys = kernels::conv2d_output_shape(xs, ws, p);
  Tensor y = Tensor::empty(ys), yg = empty_gpu(ys);
  kernels::conv2d_forward(y, x, w, b, p);
  kernels::conv2d_forward(yg, on_gpu(x), on_gpu(w), on_gpu(b), p);
  check_gpu_close(yg, y, kTol, "conv2d y");

  Tensor dy = random_f32(ys, g);
  Tensor dx = Tensor::empty(xs), dw = Tensor::empty(ws), db = Tensor::empty({ws[0]});
  Tensor dxg = empty_gpu(xs), dwg = empty_gpu(ws), dbg = empty_gpu({ws[0]});
  kernels::conv2d_backward(dx, dw, db, dy, x, w, p);
  kernels::conv2d_backward(dxg, dwg, dbg, on_gpu(dy), on_gpu(x), on_gpu(w), p);
  check_gpu_close(dxg, dx, kTol, "conv2d dx");
  // dw and dbias sum N*P*Q products: relative to their size, as float32 sums of that length.
  check_gpu_close(dwg, dw, kTol * 10, "conv2d dw");
  check_gpu_close(dbg, db, kTol * 10, "conv2d dbias");
}

}  // namespace

TEST_CASE("gpu conv2d: forward and backward match the CPU over strides, padding and kernels") {
  if (skip_without_cuda()) return;
  Generator g(1);
  SUBCASE("3x3 stride 1 pad 1") { compare_conv({4, 3, 9, 9}, {8, 3, 3, 3}, conv(1, 1), g); }
  SUBCASE("3x3 stride 2 pad 1") { compare_conv({3, 4, 10, 7}, {5, 4, 3, 3}, conv(2, 1), g); }
  SUBCASE("1x1 stride 1, the pointwise path") {
    compare_conv({2, 6, 5, 5}, {4, 6, 1, 1}, conv(1, 0), g);
  }
  SUBCASE("1x1 stride 2, a projection shortcut") {
    compare_conv({2, 6, 8, 8}, {4, 6, 1, 1}, conv(2, 0), g);
  }
  SUBCASE("7x7 stride 2 pad 3, the ResNet-18 stem") {
    compare_conv({2, 3, 20, 20}, {4, 3, 7, 7}, conv(2, 3), g);
  }
  SUBCASE("3x2 kernel on a 1x1 image, taps only see padding") {
    compare_conv({3, 2, 1, 1}, {3, 2, 3, 2}, conv(1, 1), g);
  }
  SUBCASE("one image larger than a chunk, so the batch runs image by image") {
    compare_conv({2, 64, 256, 256}, {4, 64, 3, 3}, conv(1, 1), g);
  }
  SUBCASE("a batch of several chunks") {
    compare_conv({20, 64, 56, 56}, {16, 64, 3, 3}, conv(1, 1), g);
  }
}

#ifdef HAVE_CUDNN
TEST_CASE("gpu conv2d: the cuDNN path (--conv-impl cudnn) agrees with the hand-written one") {
  if (skip_without_cuda()) return;
  Generator g(10);
  for (const kernels::Conv2dParams& p : {conv(1, 1), conv(2, 1), conv(1, 0)}) {
    CAPTURE(p.stride_h);
    CAPTURE(p.pad_h);
    const Shape xs{4, 6, 12, 10}, ws{8, 6, 3, 3};
    const Shape ys = kernels::conv2d_output_shape(xs, ws, p);
    Tensor x = on_gpu(random_f32(xs, g)), w = on_gpu(random_f32(ws, g, 0.3));
    Tensor b = on_gpu(random_f32({8}, g)), dy = on_gpu(random_f32(ys, g));
    struct Result {
      Tensor y, dx, dw, db;
    };
    auto run = [&](kernels::ConvImpl impl) {
      kernels::set_conv_impl(impl);
      Result r{empty_gpu(ys), empty_gpu(xs), empty_gpu(ws), empty_gpu({8})};
      kernels::conv2d_forward(r.y, x, w, b, p);
      kernels::conv2d_backward(r.dx, r.dw, r.db, dy, x, w, p);
      kernels::set_conv_impl(kernels::ConvImpl::im2col);
      return r;
    };
    const Result ours = run(kernels::ConvImpl::im2col), cudnn = run(kernels::ConvImpl::cudnn);
    check_gpu_close(ours.y, cudnn.y.to(Device::cpu()), kTol, "y");
    check_gpu_close(ours.dx, cudnn.dx.to(Device::cpu()), kTol, "dx");
    check_gpu_close(ours.dw, cudnn.dw.to(Device::cpu()), kTol * 10, "dw");
    check_gpu_close(ours.db, cudnn.db.to(Device::cpu()), kTol * 10, "dbias");
  }
}
#endif

TEST_CASE("gpu conv2d and linear in float16 and bfloat16 accumulate in float32") {
  if (skip_without_cuda()) return;
  Generator g(2);
  Tensor x = random_f32({4, 8, 6, 6}, g), w = random_f32({6, 8, 3, 3}, g, 0.2);
  const kernels::Conv2dParams p = conv(1, 1);
  Tensor y = Tensor::empty({4, 6, 6, 6});
  kernels::conv2d_forward(y, x, w, Tensor(), p);
  Tensor lx = random_f32({16, 64}, g), lw = random_f32({10, 64}, g, 0.2), lb = random_f32({10}, g);
  Tensor ly = Tensor::empty({16, 10});
  kernels::linear_forward(ly, lx, lw, lb);
  // 72 (conv) or 64 (linear) products of unit-size values: the inputs' rounding dominates.
  for (auto [t, tol] : {std::pair{DType::f16, 2e-2}, std::pair{DType::bf16, 1e-1}}) {
    INFO("dtype: ", dtype_name(t));
    auto low = [&](const Tensor& a) { return on_gpu(a.to(t)); };
    Tensor yg = empty_gpu(y.shape(), t);
    kernels::conv2d_forward(yg, low(x), low(w), Tensor(), p);
    check_gpu_close(yg, y, tol, "conv2d y (16-bit)");
    Tensor lyg = empty_gpu(ly.shape(), t);
    kernels::linear_forward(lyg, low(lx), low(lw), low(lb));
    check_gpu_close(lyg, ly, tol, "linear y (16-bit)");
  }
}

TEST_CASE("gpu linear: forward and backward match the CPU, with and without bias") {
  if (skip_without_cuda()) return;
  Generator g(3);
  Tensor x = random_f32({33, 70}, g), w = random_f32({10, 70}, g, 0.2), b = random_f32({10}, g);
  for (bool with_bias : {true, false}) {
    CAPTURE(with_bias);
    Tensor bias = with_bias ? b : Tensor();
    Tensor y = Tensor::empty({33, 10}), yg = empty_gpu({33, 10});
    kernels::linear_forward(y, x, w, bias);
    kernels::linear_forward(yg, on_gpu(x), on_gpu(w), on_gpu(bias));
    check_gpu_close(yg, y, kTol, "linear y");
  }
  Tensor dy = random_f32({33, 10}, g);
  Tensor dx = Tensor::empty(x.shape()), dw = Tensor::empty(w.shape()), db = Tensor::empty({10});
  Tensor dxg = empty_gpu(x.shape()), dwg = empty_gpu(w.shape()), dbg = empty_gpu({10});
  kernels::linear_backward(dx, dw, db, dy, x, w);
  kernels::linear_backward(dxg, dwg, dbg, on_gpu(dy), on_gpu(x), on_gpu(w));
  check_gpu_close(dxg, dx, kTol, "linear dx");
  check_gpu_close(dwg, dw, kTol, "linear dw");
  check_gpu_close(dbg, db, kTol, "linear dbias");
}

TEST_CASE("gpu batchnorm: every entry point matches the CPU, per-channel tensors f32 and f64") {
  if (skip_without_cuda()) return;
  Generator g(4);
  const Shape xs{6, 5, 7, 9};
  // An offset mean checks that the variance does not lose precision to E[x^2] - mean^2.
  Tensor x = random_f32(xs, g, 2.0);
  Tensor offset = Tensor::full(xs, 3.0);
  kernels::add_(x, offset);
  Tensor gamma = random_f32({5}, g), beta = random_f32({5}, g), dy = random_f32(xs, g);
  const double momentum = 0.1, eps = 1e-5;

  SUBCASE("training forward with running stats, then the whole backward") {
    Tensor rm = random_f32({5}, g), rv = Tensor::full({5}, 1.5, DType::f32);
    Tensor rmg = on_gpu(rm), rvg = on_gpu(rv);
    Tensor y = Tensor::empty(xs), sm = Tensor::empty({5}), si = Tensor::empty({5});
    Tensor yg = empty_gpu(xs), smg = empty_gpu({5}), sig = empty_gpu({5});
    kernels::batchnorm_forward_train(y, sm, si, rm, rv, x, gamma, beta, momentum, eps);
    kernels::batchnorm_forward_train(yg, smg, sig, rmg, rvg, on_gpu(x), on_gpu(gamma), on_gpu(beta),
                                     momentum, eps);
    check_gpu_close(yg, y, kTol, "bn y");
    check_gpu_close(smg, sm, kTol, "bn save_mean");
    check_gpu_close(sig, si, kTol, "bn save_invstd");
    check_gpu_close(rmg, rm, kTol, "bn running_mean");
    check_gpu_close(rvg, rv, kTol, "bn running_var");

    Tensor dx = Tensor::empty(xs), dgamma = Tensor::empty({5}), dbeta = Tensor::empty({5});
    Tensor dxg = empty_gpu(xs), dgammag = empty_gpu({5}), dbetag = empty_gpu({5});
    kernels::batchnorm_backward(dx, dgamma, dbeta, dy, x, gamma, sm, si);
    kernels::batchnorm_backward(dxg, dgammag, dbetag, on_gpu(dy), on_gpu(x), on_gpu(gamma), smg,
                                sig);
    check_gpu_close(dxg, dx, kTol, "bn dx");
    check_gpu_close(dgammag, dgamma, kTol * 10, "bn dgamma");
    check_gpu_close(dbetag, dbeta, kTol * 10, "bn dbeta");
  }
  SUBCASE("eval forward, and training without affine or running stats") {
    Tensor rm = random_f32({5}, g), rv = Tensor::full({5}, 0.7, DType::f32);
    Tensor y = Tensor::empty(xs), yg = empty_gpu(xs);
    kernels::batchnorm_forward_eval(y, x, gamma, beta, rm, rv, eps);
    kernels::batchnorm_forward_eval(yg, on_gpu(x), on_gpu(gamma), on_gpu(beta), on_gpu(rm),
                                    on_gpu(rv), eps);
    check_gpu_close(yg, y, kTol, "bn eval y");
    Tensor none, sm = Tensor::empty({5}), si = Tensor::empty({5});
    Tensor smg = empty_gpu({5}), sig = empty_gpu({5});
    kernels::batchnorm_forward_train(y, sm, si, none, none, x, none, none, momentum, eps);
    kernels::batchnorm_forward_train(yg, smg, sig, none, none, on_gpu(x), none, none, momentum,
                                     eps);
    check_gpu_close(yg, y, kTol, "bn y without affine");
  }
  SUBCASE("the split entry points SyncBatchNorm uses, with float64 channel tensors") {
    for (DType ct : {DType::f32, DType::f64}) {
      INFO("dtype: ", dtype_name(ct));
      Tensor sum = Tensor::empty({5}, ct), sq = Tensor::empty({5}, ct);
      Tensor sumg = empty_gpu({5}, ct), sqg = empty_gpu({5}, ct);
      kernels::batchnorm_channel_sums(sum, sq, x);
      kernels::batchnorm_channel_sums(sumg, sqg, on_gpu(x));
      check_gpu_close(sumg, sum, kTol, "bn sum");
      check_gpu_close(sqg, sq, kTol, "bn sum_sq");

      Tensor mean = random_f32({5}, g).to(ct), invstd = Tensor::full({5}, 0.8, ct);
      Tensor y = Tensor::empty(xs), yg = empty_gpu(xs);
      kernels::batchnorm_apply(y, x, mean, invstd, gamma.to(ct), beta.to(ct));
      kernels::batchnorm_apply(yg, on_gpu(x), on_gpu(mean), on_gpu(invstd), on_gpu(gamma.to(ct)),
                               on_gpu(beta.to(ct)));
      check_gpu_close(yg, y, kTol, "bn apply");

      Tensor sdy = Tensor::empty({5}, ct), sdx = Tensor::empty({5}, ct);
      Tensor sdyg = empty_gpu({5}, ct), sdxg = empty_gpu({5}, ct);
      kernels::batchnorm_backward_reduce(sdy, sdx, dy, x, mean, invstd);
      kernels::batchnorm_backward_reduce(sdyg, sdxg, on_gpu(dy), on_gpu(x), on_gpu(mean),
                                         on_gpu(invstd));
      check_gpu_close(sdyg, sdy, kTol * 10, "bn sum_dy");
      check_gpu_close(sdxg, sdx, kTol * 10, "bn sum_dy_xhat");

      const double count = 2.0 * 6 * 7 * 9;  // as if a second rank held as many values
      Tensor dx = Tensor::empty(xs), dxg = empty_gpu(xs);
      kernels::batchnorm_backward_apply(dx, dy, x, mean, invstd, gamma.to(ct), sdy, sdx, count);
      kernels::batchnorm_backward_apply(dxg, on_gpu(dy), on_gpu(x), on_gpu(mean), on_gpu(invstd),
                                        on_gpu(gamma.to(ct)), on_gpu(sdy), on_gpu(sdx), count);
      check_gpu_close(dxg, dx, kTol, "bn backward_apply dx");
    }
  }
}

TEST_CASE(
    "gpu elementwise: relu, add, add_, add_relu, scale_ and increment_ match the CPU exactly") {
  if (skip_without_cuda()) return;
  Generator g(5);
  const Shape s{3, 7, 11};
  Tensor a = random_f32(s, g), b = random_f32(s, g), dy = random_f32(s, g);
  Tensor y = Tensor::empty(s), yg = empty_gpu(s);
  kernels::relu_forward(y, a);
  kernels::relu_forward(yg, on_gpu(a));
  check_gpu_close(yg, y, 0, "relu y");
  Tensor dx = Tensor::empty(s), dxg = empty_gpu(s);
  kernels::relu_backward(dx, dy, y);
  kernels::relu_backward(dxg, on_gpu(dy), yg);
  check_gpu_close(dxg, dx, 0, "relu dx");
  kernels::add(y, a, b);
  kernels::add(yg, on_gpu(a), on_gpu(b));
  check_gpu_close(yg, y, 0, "add");
  kernels::add_relu_forward(y, a, b);
  kernels::add_relu_forward(yg, on_gpu(a), on_gpu(b));
  check_gpu_close(yg, y, 0, "add_relu");
  Tensor ag = on_gpu(a);
  kernels::add_(a, b);
  kernels::add_(ag, on_gpu(b));
  kernels::scale_(a, -0.75);
  kernels::scale_(ag, -0.75);
  check_gpu_close(ag, a, 0, "add_ then scale_");
  Tensor counter = on_gpu(Tensor::zeros({}, DType::i64));
  for (int i = 0; i < 3; ++i) kernels::increment_(counter);
  CHECK(counter.item() == 3);
}

TEST_CASE("gpu pooling: max-pool values and indices equal the CPU's, gradients and average pool") {
  if (skip_without_cuda()) return;
  Generator g(6);
  kernels::Pool2dParams p;
  p.kernel_h = p.kernel_w = 3;
  p.stride_h = p.stride_w = 2;
  p.pad_h = p.pad_w = 1;  // overlapping windows: backward adds into shared inputs
  Tensor x = random_f32({2, 3, 11, 8}, g);
  const Shape ys = kernels::pool2d_output_shape(x.shape(), p);
  Tensor y = Tensor::empty(ys), idx = Tensor::empty(ys, DType::i32);
  Tensor yg = empty_gpu(ys), idxg = empty_gpu(ys, DType::i32);
  kernels::maxpool2d_forward(y, idx, x, p);
  kernels::maxpool2d_forward(yg, idxg, on_gpu(x), p);
  check_gpu_close(yg, y, 0, "maxpool y");
  CHECK(idxg.to_vector<int32_t>() == idx.to_vector<int32_t>());
  Tensor dy = random_f32(ys, g), dx = Tensor::empty(x.shape()), dxg = empty_gpu(x.shape());
  kernels::maxpool2d_backward(dx, dy, idx);
  kernels::maxpool2d_backward(dxg, on_gpu(dy), idxg);
  check_gpu_close(dxg, dx, kTol, "maxpool dx");

  Tensor a = Tensor::empty({2, 3, 1, 1}), ag = empty_gpu({2, 3, 1, 1});
  kernels::global_avgpool_forward(a, x);
  kernels::global_avgpool_forward(ag, on_gpu(x));
  check_gpu_close(ag, a, kTol, "avgpool y");
  Tensor da = random_f32({2, 3, 1, 1}, g);
  kernels::global_avgpool_backward(dx, da);
  kernels::global_avgpool_backward(dxg, on_gpu(da));
  check_gpu_close(dxg, dx, kTol, "avgpool dx");
}

TEST_CASE("gpu loss: cross-entropy forward, backward and count_correct match the CPU") {
  if (skip_without_cuda()) return;
  Generator g(7);
  Tensor logits = random_f32({37, 10}, g, 3.0);
  std::vector<int64_t> label_values(37);
  for (int64_t i = 0; i < 37; ++i) label_values[i] = (i * 7) % 10;
  Tensor labels = Tensor::from_vector<int64_t>(label_values, {37});
  Tensor loss = Tensor::empty({}), lp = Tensor::empty({37, 10});
  Tensor lossg = empty_gpu({}), lpg = empty_gpu({37, 10});
  kernels::cross_entropy_forward(loss, lp, logits, labels);
  kernels::cross_entropy_forward(lossg, lpg, on_gpu(logits), on_gpu(labels));
  check_gpu_close(lossg, loss, kTol, "loss");
  check_gpu_close(lpg, lp, kTol, "log_probs");
  Tensor dl = Tensor::empty({37, 10}), dlg = empty_gpu({37, 10});
  kernels::cross_entropy_backward(dl, lp, labels, 0.5);
  kernels::cross_entropy_backward(dlg, lpg, on_gpu(labels), 0.5);
  check_gpu_close(dlg, dl, kTol, "dlogits");
  CHECK(kernels::count_correct(on_gpu(logits), on_gpu(labels)) ==
        kernels::count_correct(logits, labels));
  for (DType half : {DType::f16, DType::bf16}) {  // the logits of a mixed-precision model
    INFO("dtype: ", dtype_name(half));
    Tensor h = Tensor::empty({37, 10}, half);
    kernels::cast(h, logits);
    CHECK(kernels::count_correct(on_gpu(h), on_gpu(labels)) == kernels::count_correct(h, labels));
  }

  label_values[5] = 10;
  Tensor bad = on_gpu(Tensor::from_vector<int64_t>(label_values, {37}));
  CHECK_THROWS_WITH_AS(kernels::cross_entropy_forward(lossg, lpg, on_gpu(logits), bad),
                       doctest::Contains("label 10 in row 5"), InvalidArgument);
}

TEST_CASE("gpu sgd: plain, momentum, Nesterov and weight decay over several steps match the CPU") {
  if (skip_without_cuda()) return;
  Generator g(8);
  for (int variant = 0; variant < 4; ++variant) {
    CAPTURE(variant);
    kernels::SgdParams p;
    p.lr = 0.1;
    p.momentum = variant == 0 ? 0.0 : 0.9;
    p.dampening = variant == 2 ? 0.3 : 0.0;
    p.nesterov = variant == 3;
    p.weight_decay = variant >= 1 ? 5e-4 : 0.0;
    Tensor w = random_f32({1000}, g), wg = on_gpu(w);
    Tensor buf = Tensor::empty({1000}), bufg = empty_gpu({1000});
    for (int step = 0; step < 3; ++step) {
      Tensor grad = random_f32({1000}, g);
      kernels::sgd_step(w, buf, grad, p, step == 0);
      kernels::sgd_step(wg, bufg, on_gpu(grad), p, step == 0);
    }
    check_gpu_close(wg, w, kTol, "sgd param");
    if (p.momentum != 0) check_gpu_close(bufg, buf, kTol, "sgd momentum buffer");
  }
}

TEST_CASE("gpu cast: the same bits as the CPU between f32, f16 and bf16, and the inf/NaN check") {
  if (skip_without_cuda()) return;
  Generator g(9);
  Tensor x = random_f32({4097}, g, 100.0);
  for (DType t : {DType::f16, DType::bf16}) {
    INFO("dtype: ", dtype_name(t));
    Tensor low = Tensor::empty({4097}, t), lowg = empty_gpu({4097}, t);
    kernels::cast(low, x);
    kernels::cast(lowg, on_gpu(x));
    Tensor low_back = lowg.to(Device::cpu());
    CHECK(std::memcmp(low_back.raw_data(), low.raw_data(), low.nbytes()) == 0);
    Tensor up = Tensor::empty({4097}), upg = empty_gpu({4097});
    kernels::cast(up, low);
    kernels::cast(upg, lowg);
    check_gpu_close(upg, up, 0, "back to f32");
    CHECK(kernels::count_nonfinite(lowg) == 0);
  }
  Tensor xg = on_gpu(x);
  CHECK(kernels::count_nonfinite(xg) == 0);
  Tensor with_nan = x.clone();
  with_nan.data<float>()[4000] = std::numeric_limits<float>::quiet_NaN();
  CHECK(kernels::count_nonfinite(on_gpu(with_nan)) == 1);
  Tensor with_inf = x.clone();
  with_inf.data<float>()[0] = -std::numeric_limits<float>::infinity();
  Tensor inf_half = empty_gpu({4097}, DType::f16);
  kernels::cast(inf_half, on_gpu(with_inf));
  CHECK(kernels::count_nonfinite(inf_half) == 1);
}

TEST_CASE("gpu ops: operands on different devices are an error naming both") {
  if (skip_without_cuda()) return;
  Tensor x = empty_gpu({1, 1, 3, 3}), w = Tensor::zeros({1, 1, 2, 2}), y = empty_gpu({1, 1, 2, 2});
  CHECK_THROWS_WITH_AS(kernels::conv2d_forward(y, x, w, Tensor(), conv(1, 0)),
                       doctest::Contains("is on cuda:0 but w is on cpu"), Error);
  Tensor a = empty_gpu({4}), b = Tensor::zeros({4});
  CHECK_THROWS_WITH_AS(kernels::add(a, a, b), doctest::Contains("devices differ"), Error);
  Tensor logits = empty_gpu({2, 3});
  Tensor labels = Tensor::zeros({2}, DType::i64);
  CHECK_THROWS_WITH_AS(kernels::count_correct(logits, labels),
                       doctest::Contains("labels is on cpu"), Error);
}
