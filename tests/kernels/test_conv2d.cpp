// Tests for the CPU convolution (kernels/cpu/conv2d*.cpp, im2col.cpp): output shapes, forward
// and backward worked by hand (the direct-loop reference, conv2d_reference.cpp, too), a sweep
// of configurations against that reference in f64 (strides, padding, 1x1/3x2/7x7 kernels,
// batched small images, 1-3 threads: every path), finite-difference gradients (also where
// kernel taps see only padding and are cropped away), f32 vs f64 agreement, empty batches and
// argument errors.
#include <cmath>
#include <vector>

#include "core/rng.h"
#include "kernels/cpu/conv2d_paths.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/ops.h"
#include "ringgrad/config.h"
#include "tests/kernels/gradcheck.h"
#include "tests/skip.h"

using namespace ringgrad;
using namespace ringgrad::testing;

namespace {

kernels::Conv2dParams conv_params(int stride_h, int stride_w, int pad_h, int pad_w) {
  kernels::Conv2dParams p;
  p.stride_h = stride_h;
  p.stride_w = stride_w;
  p.pad_h = pad_h;
  p.pad_w = pad_w;
  return p;
}

struct ConvGrads {
  Tensor dx, dw, dbias;
};

Tensor conv(const Tensor& x, const Tensor& w, const Tensor& bias, const kernels::Conv2dParams& p) {
  Tensor y = Tensor::empty(kernels::conv2d_output_shape(x.shape(), w.shape(), p), x.dtype());
  kernels::conv2d_forward(y, x, w, bias, p);
  return y;
}

ConvGrads conv_grads(const Tensor& dy, const Tensor& x, const Tensor& w,
                     const kernels::Conv2dParams& p) {
  ConvGrads g{Tensor::empty(x.shape(), x.dtype()), Tensor::empty(w.shape(), x.dtype()),
              Tensor::empty({w.size(0)}, x.dtype())};
  kernels::conv2d_backward(g.dx, g.dw, g.dbias, dy, x, w, p);
  return g;
}

// The direct-loop reference (kernels/cpu/conv2d_reference.cpp), in f64.
Tensor reference_conv(const Tensor& x, const Tensor& w, const Tensor& bias,
                      const kernels::Conv2dParams& p) {
  Tensor y = Tensor::empty(kernels::conv2d_output_shape(x.shape(), w.shape(), p), DType::f64);
  kernels::cpu::conv2d_reference_forward(y, x, w, bias, p);
  return y;
}

ConvGrads reference_grads(const Tensor& dy, const Tensor& x, const Tensor& w,
                          const kernels::Conv2dParams& p) {
  ConvGrads g{Tensor::empty(x.shape(), DType::f64), Tensor::empty(w.shape(), DType::f64),
              Tensor::empty({w.size(0)}, DType::f64)};
  kernels::cpu::conv2d_reference_backward(g.dx, g.dw, g.dbias, dy, x, w, p);
  return g;
}

struct ConvCase {
  Shape x, w;
  int stride_h, stride_w, pad_h, pad_w;
  bool bias;
};

// A case's parameters, and random x, w and dy of its shapes in dtype.
struct RandomCase {
  kernels::Conv2dParams p;
  Tensor x, w, dy;
};

RandomCase random_case(const ConvCase& c, Generator& gen, DType dtype) {
  RandomCase r{conv_params(c.stride_h, c.stride_w, c.pad_h, c.pad_w),
               random_tensor(c.x, gen, dtype), random_tensor(c.w, gen, dtype), Tensor()};
  r.dy = random_tensor(kernels::conv2d_output_shape(c.x, c.w, r.p), gen, dtype);
  return r;
}

// Configurations that reach every path of the CPU convolution.
std::vector<ConvCase> sweep_cases() {
  return {
      {{2, 3, 7, 7}, {4, 3, 3, 3}, 1, 1, 1, 1, true},     // same-size 3x3
      {{3, 2, 8, 6}, {5, 2, 3, 3}, 2, 2, 1, 1, false},    // stride 2, rectangular input
      {{2, 2, 9, 10}, {3, 2, 3, 3}, 3, 3, 0, 0, true},    // stride 3, no padding
      {{2, 3, 6, 7}, {2, 3, 3, 2}, 1, 2, 3, 1, true},     // 3x2 kernel, pad 3 > kernel
      {{2, 1, 14, 14}, {4, 1, 7, 7}, 2, 2, 3, 3, false},  // resnet18 stem, smaller
      {{3, 4, 5, 5}, {6, 4, 1, 1}, 2, 2, 0, 0, false},    // 1x1 stride 2 (downsample)
      {{5, 4, 3, 3}, {3, 4, 1, 1}, 1, 1, 0, 0, true},     // 1x1 stride 1, images batched
      {{4, 3, 5, 5}, {2, 3, 3, 3}, 1, 1, 1, 1, false},    // fewer chunks than 3 threads
      {{2, 3, 17, 16}, {4, 3, 1, 1}, 1, 1, 0, 0, false},  // 1x1 stride 1, one image per GEMM
      {{9, 8, 2, 2}, {6, 8, 3, 3}, 2, 2, 1, 1, true},     // tiny images: many per GEMM
      {{7, 6, 1, 1}, {5, 6, 3, 3}, 1, 1, 1, 1, false},    // 1x1 image, resnet18 layer4
      {{2, 2, 4, 5}, {3, 2, 2, 3}, 1, 3, 2, 0, true},     // mixed strides and pads per axis
      {{1, 2, 20, 20}, {3, 2, 5, 5}, 1, 1, 2, 2, true},   // single image, large plane
      {{3, 2, 1, 2}, {4, 2, 3, 3}, 1, 1, 1, 1, true},     // kernel rows 0, 2 see only padding
      {{2, 1, 1, 1}, {2, 1, 3, 3}, 4, 4, 3, 3, true},     // every output is padding: y = bias
      // Fewer pixels than kernel taps, none cropped: bf16 takes the dense product (Note [Dense
      // small-image convolution]). Every pixel meets every output; pairs meeting no tap; stride 2.
      {{5, 6, 2, 2}, {7, 6, 3, 3}, 1, 1, 1, 1, true},
      {{3, 4, 2, 3}, {5, 4, 3, 3}, 1, 1, 1, 1, false},
      {{2, 3, 3, 3}, {4, 3, 5, 5}, 2, 2, 2, 2, true},
      {{2, 3, 4, 5}, {4, 3, 7, 7}, 1, 1, 3, 3, false},  // 49 taps: more than a vector holds
      // More (k, c) pairs than the crop's block of 256: the one-tap window, and a 2x2 window.
      {{2, 24, 1, 1}, {12, 24, 3, 3}, 1, 1, 1, 1, false},
      {{2, 20, 2, 2}, {15, 20, 3, 3}, 2, 2, 1, 1, false},
      // Stride 1: dx is the conv of dy with the flipped kernel, padded kernel - 1 - pad ...
      {{2, 3, 6, 5}, {4, 3, 3, 3}, 1, 1, 0, 0, false},  // ... by 2 (no padding here)
      {{2, 2, 5, 6}, {3, 2, 3, 2}, 1, 1, 2, 1, true},   // ... by 0, 3x2 kernel
      {{2, 2, 4, 4}, {3, 2, 2, 2}, 1, 1, 2, 0, false},  // pad_h > R - 1: dx by col2im
      {{11, 5, 3, 3}, {4, 5, 3, 3}, 1, 1, 1, 1, true},  // ... and dw from its column matrix,
                                                        // tiny images batched per GEMM
      // f32 with the AVX-512 SGEMM reads x as its columns (Note [Implicit columns]): 207
      // products split into depth blocks in the middle of a channel's taps, a partial tile of
      // output channels, planes of 90 positions in vectors of 96, three images per chunk.
      {{3, 23, 9, 10}, {10, 23, 3, 3}, 1, 1, 1, 1, true},
  };
}

// Cases for the direct path (Note [Direct convolution]), which f32 on AVX-512 or AVX2 and bf16 on
// AVX512-BF16 or AMX take. Stride 1 on wide enough images: on AMX from 7x7 images, whole and
// partial blocks of 16 channel pairs, an odd channel count, more than 32 output channels,
// resnet20's first stage, a 5x5 kernel without padding; as row pieces (AVX-512; bf16 from 8 input
// channels, f32 from 1; AVX2's pieces of 5 or 6 from 8 in and out, crossing rows, a last piece past
// the image's end) where rows split into pieces of 7, 14 or 28 with little left over: pieces
// of each length, 1, 2 and 4 vectors of output channels at once (32 and 64 outputs on 7x7, 64 -> 16
// and 32 -> 48 in dx), a partial vector (40 outputs), bias, stride 2 (3x3 and 1x1, 13 rows to 7).
// There the weight gradient comes straight from dy and x too (Note [Direct weight gradient]) for
// resnet20's first stage, for 32 -> 48 channels on 14x14, for 16 <-> 64 on 7x7, and for strided
// convs, one with 32 input channels whose dx then goes by the position classes (under
// --isa=avx2; on AVX-512 by the strided input gradient). And a strided
// conv whose weight gradient (40 x 189) is summed through whole and partial 32 x 32 tiles, and
// rows too wide for im2col's register permutes (more than 64 pixels), whose runs are long enough
// for the walk's vector copies: 35-36 entries at stride 2, 70 at stride 1.
std::vector<ConvCase> direct_path_cases() {
  return {{{3, 21, 6, 6}, {40, 21, 3, 3}, 2, 2, 1, 1, true},
          {{2, 3, 9, 72}, {4, 3, 3, 3}, 2, 2, 1, 1, false},
          {{2, 2, 6, 72}, {3, 2, 3, 3}, 2, 1, 1, 0, true},
          {{2, 33, 9, 9}, {40, 33, 3, 3}, 1, 1, 1, 1, true},
          {{2, 64, 7, 7}, {16, 64, 3, 3}, 1, 1, 1, 1, false},
          {{2, 16, 28, 28}, {16, 16, 3, 3}, 1, 1, 1, 1, false},
          {{2, 33, 21, 21}, {40, 33, 3, 3}, 1, 1, 1, 1, true},
          {{2, 32, 14, 14}, {48, 32, 3, 3}, 1, 1, 1, 1, false},
          {{2, 16, 7, 7}, {64, 16, 3, 3}, 1, 1, 1, 1, true},
          {{3, 16, 13, 13}, {32, 16, 3, 3}, 2, 2, 1, 1, true},
          {{2, 32, 14, 14}, {32, 32, 3, 3}, 2, 2, 1, 1, false},
          {{2, 16, 13, 14}, {16, 16, 1, 1}, 2, 2, 0, 0, false},
          {{1, 12, 7, 7}, {32, 12, 3, 3}, 1, 1, 1, 1, false},
          {{2, 10, 18, 18}, {7, 10, 5, 5}, 1, 1, 0, 0, true},
          {{2, 5, 28, 26}, {7, 5, 5, 5}, 1, 1, 0, 0, true},
          {{3, 6, 12, 11}, {5, 6, 5, 5}, 1, 1, 0, 0, true}};
}

// Cases for the strided input gradient (Note [Strided input gradient]), which f32 on AVX-512 and
// bf16 on AVX512-BF16 take: resnet20's downsampling conv (pieces of 28 dx positions) and its 1x1
// shortcut (bf16 only: two vectors of channels, pieces of 14, odd rows and columns all zero);
// 7x7 images (pieces of 8, two vectors of channels); rows of 30 (two pieces, the second mostly
// past the row), odd heights, a partial vector of input channels and an odd count of output
// channels (a bf16 pair half zero); no padding (the dy column left of a row, zero); a 2x2 kernel
// padded along the rows only; a 5-row kernel with padding 2 on rows of 8 (pieces of 8, one vector).
std::vector<ConvCase> strided_input_grad_cases() {
  return {{{2, 16, 28, 28}, {32, 16, 3, 3}, 2, 2, 1, 1, false},
          {{2, 32, 14, 14}, {64, 32, 1, 1}, 2, 2, 0, 0, false},
          {{2, 64, 7, 7}, {24, 64, 3, 3}, 2, 2, 1, 1, true},
          {{2, 24, 31, 30}, {21, 24, 3, 3}, 2, 2, 1, 1, true},
          {{3, 40, 9, 9}, {17, 40, 3, 3}, 2, 2, 0, 0, false},
          {{2, 8, 12, 16}, {5, 8, 2, 2}, 2, 2, 1, 0, true},
          {{2, 16, 11, 8}, {8, 16, 5, 3}, 2, 2, 2, 1, false}};
}

// Every case at every thread count: random inputs of `dtype`, forward and backward against the
// direct-loop reference run in f64 on the same values, within tol.
void check_against_reference(std::initializer_list<int> thread_counts,
                             const std::vector<ConvCase>& cases, DType dtype, double tol,
                             uint64_t seed) {
  Generator gen(seed);
  ThreadCountGuard guard;
  auto wide = [](const Tensor& t) { return t.defined() ? t.to(DType::f64) : Tensor(); };
  for (const int threads : thread_counts) {
    kernels::set_num_threads(threads);
    for (const ConvCase& c : cases) {
      CAPTURE(threads);
      CAPTURE(c.x);
      CAPTURE(c.w);
      CAPTURE(c.stride_h);
      CAPTURE(c.pad_h);
      const kernels::Conv2dParams p = conv_params(c.stride_h, c.stride_w, c.pad_h, c.pad_w);
      Tensor x = random_tensor(c.x, gen, dtype), w = random_tensor(c.w, gen, dtype);
      Tensor b = c.bias ? random_tensor({c.w[0]}, gen, dtype) : Tensor();
      Tensor y = conv(x, w, b, p);
      CHECK(y.dtype() == dtype);
      check_close(y, reference_conv(wide(x), wide(w), wide(b), p), tol, "y");
      Tensor dy = random_tensor(y.shape(), gen, dtype);
      ConvGrads got = conv_grads(dy, x, w, p);
      ConvGrads want = reference_grads(wide(dy), wide(x), wide(w), p);
      check_close(got.dx, want.dx, tol, "dx");
      check_close(got.dw, want.dw, tol, "dw");
      check_close(got.dbias, want.dbias, tol, "dbias");
    }
  }
}

}  // namespace

TEST_CASE("conv2d output shape is floor((H + 2 pad - R) / stride) + 1 per dimension") {
  CHECK(kernels::conv2d_output_shape({64, 16, 28, 28}, {32, 16, 3, 3}, conv_params(2, 2, 1, 1)) ==
        Shape{64, 32, 14, 14});
  CHECK(kernels::conv2d_output_shape({64, 1, 28, 28}, {64, 1, 7, 7}, conv_params(2, 2, 3, 3)) ==
        Shape{64, 64, 14, 14});
  CHECK(kernels::conv2d_output_shape({2, 3, 7, 5}, {4, 3, 3, 2}, conv_params(3, 1, 0, 2)) ==
        Shape{2, 4, 2, 8});
  CHECK(kernels::conv2d_output_shape({1, 512, 1, 1}, {512, 512, 3, 3}, conv_params(1, 1, 1, 1)) ==
        Shape{1, 512, 1, 1});
}

TEST_CASE("conv2d rejects bad shapes, dtypes and parameters with messages") {
  Tensor x = Tensor::zeros({2, 3, 5, 5}), w = Tensor::zeros({4, 3, 3, 3});
  const kernels::Conv2dParams p = conv_params(1, 1, 1, 1);
  CHECK_THROWS_WITH_AS(kernels::conv2d_output_shape({2, 2, 5, 5}, {4, 3, 3, 3}, p),
                       doctest::Contains("channels"), Error);
  CHECK_THROWS_WITH_AS(kernels::conv2d_output_shape({2, 3, 2, 2}, {4, 3, 5, 5}, p),
                       doctest::Contains("larger than the padded input"), Error);
  CHECK_THROWS_AS(kernels::conv2d_output_shape({2, 3, 5, 5}, {4, 3, 3, 3}, conv_params(0, 1, 0, 0)),
                  Error);
  CHECK_THROWS_AS(
      kernels::conv2d_output_shape({2, 3, 5, 5}, {4, 3, 3, 3}, conv_params(1, 1, -1, 0)), Error);
  CHECK_THROWS_AS(kernels::conv2d_output_shape({3, 5, 5}, {4, 3, 3, 3}, p), Error);

  Tensor wrong_y = Tensor::empty({2, 4, 3, 3});
  CHECK_THROWS_WITH_AS(kernels::conv2d_forward(wrong_y, x, w, Tensor(), p),
                       doctest::Contains("y has shape"), Error);
  Tensor y = Tensor::empty({2, 4, 5, 5});
  Tensor w64 = Tensor::zeros({4, 3, 3, 3}, DType::f64);
  CHECK_THROWS_WITH_AS(kernels::conv2d_forward(y, x, w64, Tensor(), p),
                       doctest::Contains("same dtype"), Error);
  Tensor bad_bias = Tensor::zeros({3});
  CHECK_THROWS_WITH_AS(kernels::conv2d_forward(y, x, w, bad_bias, p),
                       doctest::Contains("bias has shape"), Error);
  Tensor xi = Tensor::zeros({2, 3, 5, 5}, DType::i32), yi = Tensor::empty({2, 4, 5, 5}, DType::i32);
  Tensor wi = Tensor::zeros({4, 3, 3, 3}, DType::i32);
  CHECK_THROWS_WITH_AS(kernels::conv2d_forward(yi, xi, wi, Tensor(), p),
                       doctest::Contains("float32 and float64"), Error);

  Tensor dy = Tensor::zeros({2, 4, 5, 5}), dx = Tensor::empty({2, 3, 5, 4}), none;
  CHECK_THROWS_WITH_AS(kernels::conv2d_backward(dx, none, none, dy, x, w, p),
                       doctest::Contains("dx has shape"), Error);
  Tensor wrong_dy = Tensor::zeros({2, 4, 4, 4});
  CHECK_THROWS_WITH_AS(kernels::conv2d_backward(none, none, none, wrong_dy, x, w, p),
                       doctest::Contains("dy has shape"), Error);
}

TEST_CASE("conv2d worked by hand: 3x3 input, 2x2 kernel, bias, forward and backward") {
  // x = 1 2 3    w = 1 2     y[p][q] = sum_rs w[r][s] x[p+r][q+s] + 0.5:
  //     4 5 6        3 4     y00 = 1+4+12+20, y01 = 2+6+15+24, y10 = 4+10+21+32, y11 = 5+12+24+36
  //     7 8 9
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3});
  Tensor w = Tensor::from_vector<float>({1, 2, 3, 4}, {1, 1, 2, 2});
  Tensor b = Tensor::from_vector<float>({0.5f}, {1});
  const kernels::Conv2dParams p = conv_params(1, 1, 0, 0);
  CHECK(conv(x, w, b, p).to_vector<float>() == std::vector<float>{37.5f, 47.5f, 67.5f, 77.5f});

  // dy = ones: dw[r][s] sums the 2x2 block of x at offset (r, s); dx[i][j] sums the weights
  // whose window covers (i, j); dbias counts the outputs.
  ConvGrads g = conv_grads(Tensor::full({1, 1, 2, 2}, 1.0), x, w, p);
  CHECK(g.dw.to_vector<float>() == std::vector<float>{12, 16, 24, 28});
  CHECK(g.dx.to_vector<float>() == std::vector<float>{1, 3, 2, 4, 10, 6, 3, 7, 4});
  CHECK(g.dbias.to_vector<float>() == std::vector<float>{4});

  // The direct-loop reference, which the other tests trust, gives the same numbers.
  Tensor y = Tensor::empty({1, 1, 2, 2});
  kernels::cpu::conv2d_reference_forward(y, x, w, b, p);
  CHECK(y.to_vector<float>() == std::vector<float>{37.5f, 47.5f, 67.5f, 77.5f});
  ConvGrads r{Tensor::empty(x.shape()), Tensor::empty(w.shape()), Tensor::empty({1})};
  kernels::cpu::conv2d_reference_backward(r.dx, r.dw, r.dbias, Tensor::full({1, 1, 2, 2}, 1.0), x,
                                          w, p);
  CHECK(r.dw.to_vector<float>() == std::vector<float>{12, 16, 24, 28});
  CHECK(r.dx.to_vector<float>() == std::vector<float>{1, 3, 2, 4, 10, 6, 3, 7, 4});
  CHECK(r.dbias.to_vector<float>() == std::vector<float>{4});
}

TEST_CASE("conv2d worked by hand: stride 2 with padding, and a 1x1 conv mixing channels") {
  // 2x2 kernel of ones, pad 1, stride 2 on the same x: each window sums the in-image part of
  // rows {-1,0} or {1,2} and columns {-1,0} or {1,2}: {1}, {2,3}, {4,7}, {5,6,8,9}.
  Tensor x = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3});
  Tensor ones = Tensor::full({1, 1, 2, 2}, 1.0, DType::f64);
  CHECK(conv(x, ones, Tensor(), conv_params(2, 2, 1, 1)).to_vector<double>() ==
        std::vector<double>{1, 5, 11, 28});
  CHECK(reference_conv(x, ones, Tensor(), conv_params(2, 2, 1, 1)).to_vector<double>() ==
        std::vector<double>{1, 5, 11, 28});

  // 1x1: y[k] = sum_c w[k][c] x[c] pixelwise; channels (1, 2) and (10, 20), w = [[1, -1], [2, 3]].
  Tensor x2 = Tensor::from_vector<double>({1, 2, 10, 20}, {1, 2, 1, 2});
  Tensor w2 = Tensor::from_vector<double>({1, -1, 2, 3}, {2, 2, 1, 1});
  CHECK(conv(x2, w2, Tensor(), conv_params(1, 1, 0, 0)).to_vector<double>() ==
        std::vector<double>{-9, -18, 32, 64});
}

TEST_CASE("conv2d forward and backward match the direct f64 reference over many shapes") {
  check_against_reference({1, 2, 3}, sweep_cases(), DType::f64, 1e-12, 7);
}

TEST_CASE("conv2d in bf16 matches the f64 reference of the same bf16 values over every path") {
  // On a CPU with a bf16 GEMM (AMX or AVX512-BF16) every path runs in bf16 with f32 sums, the
  // direct one too; elsewhere the conv widens to f32. Either way each result is rounded to bf16
  // once: within half a bf16 ulp (2^-8 relative) of the exact value, plus f32 summation error.
  std::vector<ConvCase> cases = sweep_cases();
  for (const auto& more : {direct_path_cases(), strided_input_grad_cases()})
    cases.insert(cases.end(), more.begin(), more.end());
  check_against_reference({1, 3}, cases, DType::bf16, std::ldexp(1.0, -8) * 1.01, 17);
}

TEST_CASE("conv2d in half may give dw in f32: the f32 sums, never rounded to half") {
  // Autocast's f32 master weights take it so (nn/autograd/ops_linear.cpp). Within f32 summation
  // error of the f64 reference, where a gradient rounded to half would be ~2^-9 off.
  Generator gen(23);
  ThreadCountGuard guard;
  for (const DType half : {DType::bf16, DType::f16}) {
    for (const int threads : {1, 3}) {
      kernels::set_num_threads(threads);
      for (const ConvCase& c : sweep_cases()) {
        CAPTURE(std::string(dtype_name(half)));
        CAPTURE(threads);
        CAPTURE(c.x);
        CAPTURE(c.w);
        const RandomCase r = random_case(c, gen, half);
        Tensor dx = Tensor::empty(c.x, half), dw = Tensor::empty(c.w, DType::f32), none;
        kernels::conv2d_backward(dx, dw, none, r.dy, r.x, r.w, r.p);
        ConvGrads want =
            reference_grads(r.dy.to(DType::f64), r.x.to(DType::f64), r.w.to(DType::f64), r.p);
        check_close(dw, want.dw, 1e-5, "dw");
        check_close(dx, want.dx, std::ldexp(1.0, -8) * 1.01, "dx");
      }
    }
  }
}

TEST_CASE("the direct weight gradient matches the reference, partial channel blocks too") {
  // Note [Direct weight gradient], called directly, in f32 (AVX-512, or AVX2 under --isa=avx2)
  // and bf16 (AVX512-BF16):
  // conv2d takes it only where 5/6 of its products are real, which leaves out channel counts that
  // half fill a block of 16. Here: an odd number of images (in bf16 the last one paired with
  // zeros) and a single one, channel blocks partly filled on both sides, no padding, a 5x5 kernel
  // wider than its padding, strides of 2 (one axis, then both, 1x1), more image steps than
  // threads. Each f32 accumulator sums up to 1,682 products of unit normals one after another in
  // bf16 (two images in each product), which stays within 1e-4 of the f64 reference, and up to
  // 2,523 in f32 (one image a step), within 2e-4; an output, an image or a pair left out is off
  // by 0.1 or more.
  using kernels::cpu::Isa;
  Generator gen(41);
  ThreadCountGuard guard;
  const std::vector<ConvCase> cases = {{{3, 16, 31, 31}, {16, 16, 3, 3}, 1, 1, 0, 0, false},
                                       {{2, 21, 9, 12}, {35, 21, 3, 3}, 1, 1, 1, 1, false},
                                       {{1, 3, 11, 10}, {5, 3, 5, 5}, 1, 1, 1, 2, false},
                                       {{3, 16, 13, 11}, {16, 16, 3, 3}, 2, 1, 1, 0, false},
                                       {{2, 6, 9, 9}, {20, 6, 1, 1}, 2, 2, 0, 0, false}};
  auto run = [&](auto tag, DType dtype, double tol) {
    using T = decltype(tag);
    for (const int threads : {1, 3}) {
      kernels::set_num_threads(threads);
      for (const ConvCase& c : cases) {
        CAPTURE(std::string(dtype_name(dtype)));
        CAPTURE(threads);
        CAPTURE(c.x);
        CAPTURE(c.w);
        const RandomCase r = random_case(c, gen, dtype);
        Tensor dw = Tensor::empty(c.w, DType::f32);
        kernels::cpu::direct_weight_grad<T>(dw.data<float>(), r.dy.data<T>(), r.x.data<T>(), c.x[0],
                                            kernels::conv_geometry(c.x, c.w, r.p));
        ConvGrads want =
            reference_grads(r.dy.to(DType::f64), r.x.to(DType::f64), r.w.to(DType::f64), r.p);
        check_close(dw, want.dw, tol, "dw");
      }
    }
  };
  if (!kernels::cpu::cpu_has(Isa::avx2))
    return testing::skip_test(
        "this CPU has no AVX2 and FMA, which the direct weight gradient needs");
  run(float(), DType::f32, 2e-4);
  if (!kernels::cpu::cpu_has(Isa::avx512_bf16))
    return testing::skip_test(
        "this CPU has no AVX512-BF16, which the direct bf16 weight gradient needs (f32 passed)");
  run(BFloat16(), DType::bf16, 1e-4);
}

TEST_CASE("conv2d on small images (position classes) matches the reference in f64 and f32") {
  // Outputs grouped by the kernel taps they read (Note [Position classes]): three classes per
  // axis (4x4), two (2x2), stride 2 with a last class of two taps, mixed strides, a 5x5 kernel,
  // a strided conv with little padding;
  // 256 channels make chunks of fewer images than a thread's share (the dw sums carry over
  // chunks) and class depths of 1024 (the GEMM's operands get a gap after each row).
  const std::vector<ConvCase> cases = {
      {{3, 5, 4, 4}, {6, 5, 3, 3}, 1, 1, 1, 1, true},
      {{2, 4, 2, 2}, {3, 4, 3, 3}, 1, 1, 1, 1, false},
      {{3, 3, 7, 7}, {4, 3, 3, 3}, 2, 2, 1, 1, true},
      {{2, 3, 4, 6}, {5, 3, 3, 3}, 1, 2, 1, 1, false},
      {{2, 2, 4, 4}, {3, 2, 5, 5}, 1, 1, 2, 2, true},
      {{61, 256, 4, 4}, {3, 256, 3, 3}, 1, 1, 1, 1, false},
      {{5, 128, 2, 2}, {512, 128, 3, 3}, 1, 1, 1, 1, false},
      {{2, 32, 14, 14}, {4, 32, 3, 3}, 2, 2, 1, 1, true},  // strided, 32 channels, 91% useful
  };
  check_against_reference({1, 2}, cases, DType::f64, 1e-12, 23);
  // f32 runs our AVX-512 GEMM where the CPU has it: sums of up to 2304 products of normal
  // values, whose f32 rounding reaches a few 1e-5 (a misplaced tap costs O(1)).
  check_against_reference({2}, cases, DType::f32, 2e-4, 29);
}

TEST_CASE("conv2d in f32 matches the reference over every path") {
  // f32 has code of its own (our AVX-512 GEMM, B transposed into its strips for the weight
  // gradients, the direct path), and the sweep above runs in f64: here in f32, with stride-2
  // convs whose column matrix has long rows (20), the resnet18 stem's kernel, and the direct
  // path's cases.
  std::vector<ConvCase> cases = sweep_cases();
  for (const auto& more : {direct_path_cases(), strided_input_grad_cases()})
    cases.insert(cases.end(), more.begin(), more.end());
  cases.insert(cases.end(), {{{2, 3, 40, 36}, {4, 3, 3, 3}, 2, 2, 1, 1, true},
                             {{2, 1, 28, 28}, {8, 1, 7, 7}, 2, 2, 3, 3, false},
                             {{3, 16, 28, 28}, {8, 16, 3, 3}, 2, 2, 1, 1, true}});
  // Winograd's (Note [Winograd convolution]; the direct cases with 32 channels or more take it
  // too, from 16 under --isa=avx2 and on Zen 4): padding 0 and 2 (so the flipped conv of dx has 2
  // and 0), unequal along the axes, sizes whose last tiles stick out, 8x5 outputs (four 4x4
  // tiles), 4x4 images (four 2x2 tiles, one 4x4: F(2x2) takes them), and output channels that
  // fill half of the last pair of vectors.
  cases.insert(cases.end(), {{{2, 32, 9, 11}, {33, 32, 3, 3}, 1, 1, 0, 2, true},
                             {{2, 32, 6, 5}, {48, 32, 3, 3}, 1, 1, 2, 1, false},
                             {{3, 40, 4, 4}, {32, 40, 3, 3}, 1, 1, 1, 1, true}});
  // The stem weight gradient's (Note [Stem weight gradient]; the 7x7 stem above takes it too):
  // three and four input channels, output channels filling two vectors and a part of a third,
  // unequal strides and padding, a 5x5 kernel, and three images for two threads.
  cases.insert(cases.end(), {{{3, 3, 13, 11}, {40, 3, 5, 5}, 1, 2, 2, 1, true},
                             {{2, 4, 9, 12}, {20, 4, 7, 7}, 1, 1, 3, 3, false}});
  // Winograd's F(4x4, 3x3) rounds these sums to within ~1.3e-4 of the f64 reference (its
  // transforms' coefficients reach 8 and 16/15), the other paths to within ~1e-4; a misplaced
  // tap or a wrong coefficient costs O(1).
  check_against_reference({1, 2}, cases, DType::f32, 2e-4, 31);
}

TEST_CASE("conv2d tap windows, and the kernel cropped to one (cast as it goes) and back") {
  kernels::Conv2dParams p = conv_params(1, 1, 1, 1);
  // 3x3 pad 1: on a 1x1 image only the centre meets a pixel; on 5x5 every tap does.
  const kernels::TapWindow centre = kernels::conv2d_tap_window({2, 3, 1, 1}, {4, 3, 3, 3}, p);
  CHECK((centre.r0 == 1 && centre.r1 == 2 && centre.s0 == 1 && centre.s1 == 2));
  const kernels::TapWindow all = kernels::conv2d_tap_window({2, 3, 5, 5}, {4, 3, 3, 3}, p);
  CHECK((all.r0 == 0 && all.r1 == 3 && all.s0 == 0 && all.s1 == 3));
  // Stride 2 on 2x2: output 0 reads rows -1..1, so taps 1 and 2 along each axis.
  const kernels::TapWindow corner =
      kernels::conv2d_tap_window({1, 3, 2, 2}, {4, 3, 3, 3}, conv_params(2, 2, 1, 1));
  CHECK((corner.r0 == 1 && corner.r1 == 3 && corner.s0 == 1 && corner.s1 == 3));
  const kernels::Conv2dParams q = kernels::conv2d_cropped_params(p, centre);
  CHECK((q.pad_h == 0 && q.pad_w == 0 && q.stride_h == 1));

  Generator gen(41);
  const Tensor w = random_tensor({4, 3, 3, 3}, gen, DType::f32);
  for (const kernels::TapWindow& t : {centre, corner}) {
    const int64_t R = t.r1 - t.r0, S = t.s1 - t.s0;
    Tensor crop = Tensor::empty({4, 3, R, S}, DType::bf16);
    kernels::conv2d_crop_kernel(crop, w, t);
    Tensor dw = Tensor::full({4, 3, 3, 3}, 7.0);  // overwritten everywhere
    Tensor dcrop = crop.to(DType::f32);
    kernels::conv2d_uncrop_kernel_grad(dw, dcrop, t);
    const std::vector<float> ws = w.to_vector<float>(), back = dw.to_vector<float>();
    const std::vector<float> cropped = crop.to(DType::f32).to_vector<float>();
    int64_t wrong = 0;
    for (int64_t kc = 0; kc < 12; ++kc)
      for (int64_t r = 0; r < 3; ++r)
        for (int64_t s = 0; s < 3; ++s) {
          const int64_t at = (kc * 3 + r) * 3 + s;
          const bool inside = r >= t.r0 && r < t.r1 && s >= t.s0 && s < t.s1;
          if (!inside) {
            wrong += back[at] != 0.0f;
            continue;
          }
          const float want = bf16_to_float(float_to_bf16(ws[at]));
          const int64_t c = (kc * R + r - t.r0) * S + s - t.s0;
          wrong += cropped[c] != want || back[at] != want;
        }
    CHECK(wrong == 0);
  }
  Tensor wrong_shape = Tensor::empty({4, 3, 2, 2});
  CHECK_THROWS_WITH_AS(kernels::conv2d_crop_kernel(wrong_shape, w, centre),
                       doctest::Contains("crop"), Error);
  CHECK_THROWS_WITH_AS(kernels::conv2d_crop_kernel(wrong_shape, w, kernels::TapWindow{1, 4, 0, 2}),
                       doctest::Contains("outside the 3x3 kernel"), Error);
}

TEST_CASE("conv2d backward matches central finite differences") {
  const std::vector<ConvCase> cases = {
      {{2, 2, 5, 4}, {3, 2, 3, 3}, 1, 1, 1, 1, true},
      {{2, 3, 5, 5}, {2, 3, 3, 2}, 2, 2, 1, 0, true},
      {{3, 2, 5, 5}, {2, 2, 1, 1}, 2, 2, 0, 0, false},
      {{1, 1, 7, 7}, {2, 1, 7, 7}, 2, 2, 3, 3, true},
      {{2, 2, 1, 2}, {2, 2, 3, 3}, 1, 1, 1, 1, true},  // cropped to the kernel's middle row
  };
  Generator gen(11);
  for (const ConvCase& c : cases) {
    CAPTURE(c.x);
    CAPTURE(c.w);
    const kernels::Conv2dParams p = conv_params(c.stride_h, c.stride_w, c.pad_h, c.pad_w);
    Tensor x = random_tensor(c.x, gen), w = random_tensor(c.w, gen);
    Tensor b = c.bias ? random_tensor({c.w[0]}, gen) : Tensor();
    Tensor dy = random_tensor(kernels::conv2d_output_shape(c.x, c.w, p), gen);
    ConvGrads got = conv_grads(dy, x, w, p);
    auto f = [&] { return conv(x, w, b, p); };
    check_close(got.dx, numeric_gradient(f, x, dy), 1e-6, "dx");
    check_close(got.dw, numeric_gradient(f, w, dy), 1e-6, "dw");
    if (c.bias) check_close(got.dbias, numeric_gradient(f, b, dy), 1e-6, "dbias");
  }
}

TEST_CASE("conv2d backward computes only the requested gradients") {
  Generator gen(3);
  const kernels::Conv2dParams p = conv_params(2, 2, 1, 1);
  Tensor x = random_tensor({3, 2, 6, 6}, gen), w = random_tensor({4, 2, 3, 3}, gen);
  Tensor dy = random_tensor({3, 4, 3, 3}, gen);
  ConvGrads want = reference_grads(dy, x, w, p);
  Tensor dw = Tensor::empty(w.shape(), DType::f64), dx = Tensor::empty(x.shape(), DType::f64);
  Tensor none;
  kernels::conv2d_backward(none, dw, none, dy, x, w, p);  // the stem: no dx, no bias
  check_close(dw, want.dw, 1e-12, "dw alone");
  kernels::conv2d_backward(dx, none, none, dy, x, w, p);
  check_close(dx, want.dx, 1e-12, "dx alone");
  // Stride 1, where dx and dw share the column matrix of dy when both are wanted.
  const kernels::Conv2dParams same = conv_params(1, 1, 1, 1);
  Tensor dy1 = random_tensor({3, 4, 6, 6}, gen);
  ConvGrads want1 = reference_grads(dy1, x, w, same);
  kernels::conv2d_backward(none, dw, none, dy1, x, w, same);
  check_close(dw, want1.dw, 1e-12, "stride 1 dw alone");
  kernels::conv2d_backward(dx, none, none, dy1, x, w, same);
  check_close(dx, want1.dx, 1e-12, "stride 1 dx alone");
}

TEST_CASE("conv2d in float32 agrees with float64") {
  Generator gen(5);
  const kernels::Conv2dParams p = conv_params(1, 1, 1, 1);
  Tensor x = random_tensor({4, 16, 14, 14}, gen),
         w = random_tensor({16, 16, 3, 3}, gen, DType::f64, 0.1);
  Tensor b = random_tensor({16}, gen);
  Tensor y = conv(x, w, b, p);
  Tensor dy = random_tensor(y.shape(), gen);
  ConvGrads g = conv_grads(dy, x, w, p);
  Tensor x32 = x.to(DType::f32), w32 = w.to(DType::f32), dy32 = dy.to(DType::f32);
  check_close(conv(x32, w32, b.to(DType::f32), p), y, 1e-5, "y f32");
  ConvGrads g32 = conv_grads(dy32, x32, w32, p);
  check_close(g32.dx, g.dx, 1e-5, "dx f32");
  // dw and dbias each sum 4*14*14 products: larger values, larger f32 rounding error.
  check_close(g32.dw, g.dw, 1e-4, "dw f32");
  check_close(g32.dbias, g.dbias, 1e-4, "dbias f32");
}

TEST_CASE("conv2d on an empty batch gives empty outputs and zero weight gradients") {
  const kernels::Conv2dParams p = conv_params(1, 1, 1, 1);
  Tensor x = Tensor::zeros({0, 2, 4, 4}), w = Tensor::full({3, 2, 3, 3}, 1.0);
  Tensor y = conv(x, w, Tensor(), p);
  CHECK(y.shape() == Shape{0, 3, 4, 4});
  ConvGrads g{Tensor::empty(x.shape()), Tensor::full(w.shape(), 7.0), Tensor::full({3}, 7.0)};
  kernels::conv2d_backward(g.dx, g.dw, g.dbias, Tensor::zeros(y.shape()), x, w, p);
  CHECK(g.dw.to_vector<float>() == std::vector<float>(w.numel(), 0.0f));
  CHECK(g.dbias.to_vector<float>() == std::vector<float>{0, 0, 0});
}

TEST_CASE("conv2d implementation switch: names parse, cudnn needs a cuDNN build") {
  CHECK(choice_value(kernels::kConvImpls, "im2col", "--conv-impl") == kernels::ConvImpl::im2col);
  CHECK(choice_value(kernels::kConvImpls, "cudnn", "--conv-impl") == kernels::ConvImpl::cudnn);
  CHECK_THROWS_WITH_AS(choice_value(kernels::kConvImpls, "winograd", "--conv-impl"),
                       doctest::Contains("im2col or cudnn"), InvalidArgument);
  CHECK(kernels::conv_impl() == kernels::ConvImpl::im2col);  // the default
#ifdef HAVE_CUDNN
  kernels::set_conv_impl(kernels::ConvImpl::cudnn);
  CHECK(kernels::conv_impl() == kernels::ConvImpl::cudnn);
  kernels::set_conv_impl(kernels::ConvImpl::im2col);
#else
  CHECK_THROWS_WITH_AS(kernels::set_conv_impl(kernels::ConvImpl::cudnn),
                       doctest::Contains("no cuDNN"), InvalidArgument);
#endif
}
