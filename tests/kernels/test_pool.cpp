// Tests for the pooling kernels (kernels/cpu/pool.cpp): output shapes, max pool worked by hand
// with padding and overlapping 3x3 s2 p1 windows, ties, padding as -inf, NaN, PyTorch reference
// indices, finite-difference gradients, global average pooling and argument errors; and the
// f32 / bf16 path by window tables (kernels/cpu/maxpool_windows.h) against the plain scan.
#include <algorithm>
#include <cmath>
#include <limits>

#include "core/rng.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/ops.h"
#include "tests/kernels/gradcheck.h"
#include "tests/skip.h"

using namespace ringgrad;
using namespace ringgrad::testing;

namespace {

kernels::Pool2dParams window(int kernel, int stride, int pad) {
  kernels::Pool2dParams p;
  p.kernel_h = p.kernel_w = kernel;
  p.stride_h = p.stride_w = stride;
  p.pad_h = p.pad_w = pad;
  return p;
}

struct MaxPoolResult {
  Tensor y, indices;
};

MaxPoolResult maxpool(const Tensor& x, const kernels::Pool2dParams& p) {
  const Shape out = kernels::pool2d_output_shape(x.shape(), p);
  MaxPoolResult r{Tensor::empty(out, x.dtype()), Tensor::empty(out, DType::i32)};
  kernels::maxpool2d_forward(r.y, r.indices, x, p);
  return r;
}

}  // namespace

TEST_CASE("pool2d output shape is floor((H + 2 pad - k) / s) + 1") {
  CHECK(kernels::pool2d_output_shape({2, 3, 7, 7}, window(3, 2, 1)) == Shape{2, 3, 4, 4});
  CHECK(kernels::pool2d_output_shape({2, 3, 8, 8}, window(3, 2, 1)) == Shape{2, 3, 4, 4});
  CHECK(kernels::pool2d_output_shape({1, 1, 5, 5}, window(2, 2, 0)) == Shape{1, 1, 2, 2});
  kernels::Pool2dParams tall = window(1, 1, 0);
  tall.kernel_h = 3;
  CHECK(kernels::pool2d_output_shape({1, 1, 5, 4}, tall) == Shape{1, 1, 3, 4});
  CHECK_THROWS_WITH_AS(kernels::pool2d_output_shape({1, 1, 5, 5}, window(3, 1, 2)),
                       doctest::Contains("half of kernel"), Error);
  CHECK_THROWS_AS(kernels::pool2d_output_shape({1, 1, 2, 2}, window(5, 1, 1)), Error);
  CHECK_THROWS_AS(kernels::pool2d_output_shape({1, 1, 4, 4}, window(2, 0, 0)), Error);
  CHECK_THROWS_AS(kernels::pool2d_output_shape({4, 4}, window(2, 2, 0)), Error);
}

TEST_CASE("maxpool 3x3 s2 p1 worked by hand, forward and backward") {
  // x (1, 1, 4, 4); output 2x2. Window rows/cols: output 0 covers input 0..1 (row -1 is
  // padding), output 1 covers input 1..3.
  //   1 5 2 0
  //   3 3 7 1      (0,0): {1,5,3,3} -> 5 at 1     (0,1): {5,2,0,3,7,1} -> 7 at 6
  //   4 6 2 8      (1,0): {3,3,4,6,0,9} -> 9 at 13
  //   0 9 1 2      (1,1): {3,7,1,6,2,8,9,1,2} -> 9 at 13 (shared with (1,0))
  Tensor x =
      Tensor::from_vector<float>({1, 5, 2, 0, 3, 3, 7, 1, 4, 6, 2, 8, 0, 9, 1, 2}, {1, 1, 4, 4});
  MaxPoolResult r = maxpool(x, window(3, 2, 1));
  CHECK(r.y.to_vector<float>() == std::vector<float>{5, 7, 9, 9});
  CHECK(r.indices.to_vector<int32_t>() == std::vector<int32_t>{1, 6, 13, 13});

  // dx[argmax] += dy: the two windows sharing input 13 add up (3 + 4); dx is overwritten.
  Tensor dy = Tensor::from_vector<float>({1, 2, 3, 4}, {1, 1, 2, 2});
  Tensor dx = Tensor::full({1, 1, 4, 4}, 123.0);
  kernels::maxpool2d_backward(dx, dy, r.indices);
  std::vector<float> expected(16, 0.0f);
  expected[1] = 1;
  expected[6] = 2;
  expected[13] = 7;
  CHECK(dx.to_vector<float>() == expected);
}

TEST_CASE("maxpool matches PyTorch 1.13 indices on a 5x5 plane") {
  // x[i] = i * (-1)^i; expected from PyTorch 1.13:
  // F.max_pool2d(x, 3, 2, 1, return_indices=True).
  std::vector<double> values(25);
  for (int i = 0; i < 25; ++i) values[i] = i % 2 ? -i : i;
  MaxPoolResult r = maxpool(Tensor::from_vector<double>(values, {1, 1, 5, 5}), window(3, 2, 1));
  CHECK(r.y.to_vector<double>() == std::vector<double>{6, 8, 8, 16, 18, 18, 20, 22, 24});
  CHECK(r.indices.to_vector<int32_t>() == std::vector<int32_t>{6, 8, 8, 16, 18, 18, 20, 22, 24});
}

TEST_CASE("maxpool ties pick the first position, padding never wins, NaN propagates") {
  const auto p = window(3, 2, 1);
  SUBCASE("ties") {
    // Every window starts at its first in-bounds element: (0,0)->0, (0,1)->1, (1,0)->4, (1,1)->5.
    MaxPoolResult r = maxpool(Tensor::full({1, 1, 4, 4}, 2.0), p);
    CHECK(r.indices.to_vector<int32_t>() == std::vector<int32_t>{0, 1, 4, 5});
  }
  SUBCASE("padding counts as -inf") {
    MaxPoolResult r = maxpool(Tensor::full({1, 1, 4, 4}, -3.0), p);
    CHECK(r.y.to_vector<float>() == std::vector<float>(4, -3.0f));
  }
  SUBCASE("NaN") {
    Tensor x = Tensor::full({1, 1, 4, 4}, 1.0);
    x.data<float>()[0] = std::numeric_limits<float>::quiet_NaN();
    MaxPoolResult r = maxpool(x, p);
    CHECK(std::isnan(r.y.data<float>()[0]));
    CHECK(r.y.data<float>()[3] == 1.0f);  // window (1,1) does not contain input 0
  }
}

TEST_CASE("maxpool in f32 and bf16 by window tables gives the plain scan's values and indices") {
  if (!kernels::cpu::cpu_has(kernels::cpu::Isa::avx2)) {
    testing::skip_test("this CPU has no AVX2, so f32 and bf16 max pooling run the plain scan");
    return;
  }
  // f64 runs the plain scan (pool.cpp's maxpool_plane). The values are bf16-exact, so all three
  // dtypes pool the same numbers; ReLU-like zeros make ties in most windows, and the NaN and
  // -infs check the replacement rule, the sentinel and the index a window of -inf reports. The
  // shapes put outputs on both sides of a vector (8) and windows clipped on every edge.
  Generator g(5);
  struct Case {
    Shape x;
    kernels::Pool2dParams p;
  };
  kernels::Pool2dParams tall = window(3, 2, 1);
  tall.kernel_h = 2;
  tall.pad_h = 0;
  tall.stride_w = 1;
  for (const auto& [shape, p] :
       {Case{{2, 3, 14, 14}, window(3, 2, 1)}, Case{{1, 4, 7, 6}, window(3, 2, 1)},
        Case{{2, 2, 9, 11}, window(3, 1, 1)}, Case{{1, 3, 6, 6}, window(2, 2, 0)},
        Case{{1, 2, 13, 5}, window(5, 3, 2)}, Case{{3, 1, 1, 1}, window(3, 2, 1)},
        Case{{1, 2, 8, 9}, tall}}) {
    CAPTURE(shape.str());
    Tensor x = random_tensor(shape, g, DType::f64);
    double* v = x.data<double>();
    for (int64_t i = 0; i < x.numel(); ++i)
      v[i] = v[i] < 0 ? 0.0 : std::round(v[i] * 16) / 16;  // under 256 / 16: exact in bf16
    const int64_t plane = shape[2] * shape[3];
    if (x.numel() > plane)  // a plane of -inf: every window reports its first in-bounds index
      std::fill_n(v + plane, plane, -std::numeric_limits<double>::infinity());
    v[x.numel() / 3] = std::numeric_limits<double>::quiet_NaN();
    v[x.numel() / 2] = -std::numeric_limits<double>::infinity();
    const MaxPoolResult plain = maxpool(x, p);
    for (DType dtype : {DType::f32, DType::bf16}) {
      CAPTURE(dtype_name(dtype));
      const MaxPoolResult tabled = maxpool(x.to(dtype), p);
      CHECK(tabled.indices.to_vector<int32_t>() == plain.indices.to_vector<int32_t>());
      const std::vector<double> want = plain.y.to_vector<double>();
      const std::vector<double> got = tabled.y.to(DType::f64).to_vector<double>();
      for (size_t i = 0; i < want.size(); ++i)
        CHECK(((std::isnan(want[i]) && std::isnan(got[i])) || want[i] == got[i]));
    }
  }
}

TEST_CASE("maxpool backward matches finite differences (overlapping windows, padding)") {
  Generator g(21);
  for (const auto& p : {window(3, 2, 1), window(2, 2, 0), window(3, 1, 1)}) {
    Tensor x = random_tensor({2, 3, 7, 6}, g);
    Tensor dy = random_tensor(kernels::pool2d_output_shape(x.shape(), p), g);
    MaxPoolResult r = maxpool(x, p);
    Tensor dx = Tensor::empty(x.shape(), DType::f64);
    kernels::maxpool2d_backward(dx, dy, r.indices);
    check_close(dx, numeric_gradient([&] { return maxpool(x, p).y; }, x, dy), 1e-7, "maxpool dx");
  }
}

TEST_CASE("maxpool backward rejects indices outside the plane") {
  Tensor dx = Tensor::empty({1, 1, 2, 2}), dy = Tensor::full({1, 1, 1, 1}, 1.0);
  Tensor indices = Tensor::from_vector<int32_t>({4}, {1, 1, 1, 1});
  CHECK_THROWS_WITH_AS(kernels::maxpool2d_backward(dx, dy, indices),
                       doctest::Contains("outside the 2x2 input plane"), Error);
}

TEST_CASE("global average pool: hand case and finite-difference backward") {
  // Two 2x2 planes: means (1 + 2 + 3 + 6) / 4 = 3 and (-1 - 1 + 0 + 4) / 4 = 0.5.
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 6, -1, -1, 0, 4}, {1, 2, 2, 2});
  Tensor y = Tensor::empty({1, 2, 1, 1});
  kernels::global_avgpool_forward(y, x);
  CHECK(y.to_vector<float>() == std::vector<float>{3.0f, 0.5f});

  Generator g(4);
  Tensor xd = random_tensor({3, 2, 5, 3}, g), dy = random_tensor({3, 2, 1, 1}, g);
  Tensor dx = Tensor::empty(xd.shape(), DType::f64);
  kernels::global_avgpool_backward(dx, dy);
  auto f = [&] {
    Tensor out = Tensor::empty({3, 2, 1, 1}, DType::f64);
    kernels::global_avgpool_forward(out, xd);
    return out;
  };
  check_close(dx, numeric_gradient(f, xd, dy), 1e-8, "avgpool dx");
  Tensor wrong = Tensor::empty({3, 2}, DType::f64);
  CHECK_THROWS_AS(kernels::global_avgpool_forward(wrong, xd), Error);
}
