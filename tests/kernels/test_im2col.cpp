// Tests for the column-matrix moves (kernels/cpu/im2col.h) where the register permutes of
// im2col_permutes.cpp take over from the run walk of im2col.cpp: im2col_rows in bf16 (small
// planes, narrow rows) and f32 (narrow rows), col2im in f32 (small planes), against the definitions
// in im2col.h written as plain loops, over strides, uneven padding, row ranges that start and end
// inside a channel's taps, and the first planes and rows too large for the permutes. The capped
// runs of this suite (RINGGRAD_CPU_ISA=avx2) check the run walk on the same cases.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/rng.h"
#include "kernels/conv_geometry.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/im2col.h"
#include "tests/kernels/gradcheck.h"
#include "tests/skip.h"

using namespace ringgrad;
using kernels::ConvGeometry;

namespace {

struct Case {
  Shape x;  // (images, C, H, W)
  int64_t R, S, stride_h, stride_w, pad_h, pad_w;
};

const std::vector<Case> kCases = {
    {{3, 3, 7, 7}, 3, 3, 2, 2, 1, 1},  // resnet18's 64x7x7-128 s2: 16 outputs
    {{2, 4, 4, 4}, 3, 3, 1, 1, 1, 1},  // 128x4x4-128
    {{2, 3, 2, 2}, 3, 3, 1, 1, 1, 1},  // 2x2: taps that meet only padding
    {{3, 2, 7, 7}, 1, 1, 2, 2, 0, 0},  // the 1x1 stride-2 shortcut
    {{2, 2, 6, 9}, 3, 5, 1, 2, 1, 2},  // uneven strides and padding
    {{2, 2, 7, 9}, 3, 3, 1, 1, 1, 1},  // 63 pixels, the most; 63 outputs: two permutes a row
    {{2, 2, 8, 8}, 3, 3, 2, 2, 1, 1},  // 64 pixels: im2col by the walk, col2im by permutes
    {{2, 2, 9, 9}, 3, 3, 1, 1, 1, 1},  // neither
};

// Rows for the narrow-row permutes: at most 32 pixels wide in f32, 64 in bf16.
const std::vector<Case> kRowCases = {
    {{3, 1, 28, 28}, 7, 7, 2, 2, 3, 3},  // resnet18's stem
    {{2, 3, 14, 14}, 3, 3, 2, 2, 1, 1},  // resnet20's 32x14x14-64 s2
    {{2, 2, 28, 28}, 1, 1, 2, 2, 0, 0},  // the 1x1 stride-2 shortcut
    {{2, 2, 5, 32}, 3, 3, 1, 1, 1, 2},   // 32 wide, 34 outputs a row: three vectors
    {{2, 2, 6, 9}, 3, 5, 1, 2, 1, 2},    // uneven strides and padding
    {{2, 2, 5, 33}, 3, 3, 2, 2, 1, 1},   // 33 wide: the walk in f32, rows in bf16
    {{1, 2, 3, 65}, 3, 3, 2, 2, 1, 1},   // 65 wide: the walk (its bf16 vector copies at stride 2)
    {{1, 2, 3, 70}, 3, 3, 1, 1, 0, 0},   // and at stride 1: 68 outputs a row
};

ConvGeometry geometry(const Case& c) {
  kernels::Conv2dParams p;
  p.stride_h = c.stride_h;
  p.stride_w = c.stride_w;
  p.pad_h = c.pad_h;
  p.pad_w = c.pad_w;
  return kernels::conv_geometry(c.x, {1, c.x[1], c.R, c.S}, p);
}

// im2col.h's definition: the x index column entry (row, column) copies, or -1 for padding.
int64_t source_of(const ConvGeometry& g, int64_t row, int64_t column) {
  const int64_t c = row / (g.R * g.S), r = row / g.S % g.R, s = row % g.S;
  const int64_t b = column / g.output_plane(), p = column % g.output_plane() / g.Q,
                q = column % g.Q;
  const int64_t h = p * g.stride_h - g.pad_h + r, w = q * g.stride_w - g.pad_w + s;
  if (h < 0 || h >= g.H || w < 0 || w >= g.W) return -1;
  return ((b * g.C + c) * g.H + h) * g.W + w;
}

// All rows; rows from inside the first tap row's taps to inside the last's; one row.
std::vector<std::pair<int64_t, int64_t>> row_ranges(const ConvGeometry& g) {
  const int64_t rows = g.patch_size();
  return {{0, rows}, {g.S / 2 + g.S, rows - 1}, {rows - 1, rows}};
}

// im2col_rows over every case and row range, each entry the bits of the x value it copies (T{}
// for padding); the buffer starts as NaN, so an entry never written shows.
template <class T>
void check_im2col_rows(const std::vector<Case>& cases, uint64_t seed) {
  Generator gen(seed);
  for (const Case& c : cases) {
    const ConvGeometry g = geometry(c);
    const int64_t images = c.x[0], columns = images * g.output_plane();
    const Tensor x = testing::random_tensor(c.x, gen, DTypeOf<T>::value);
    const T* xs = x.data<T>();
    for (const auto& [first, last] : row_ranges(g)) {
      CAPTURE(c.x.str());
      CAPTURE(first);
      CAPTURE(last);
      std::vector<T> got((last - first) * columns);
      std::fill(reinterpret_cast<unsigned char*>(got.data()),
                reinterpret_cast<unsigned char*>(got.data() + got.size()), 0xff);  // NaN
      kernels::cpu::im2col_rows(got.data(), xs, first, last, images, g);
      int64_t wrong = 0;
      for (int64_t row = first; row < last; ++row)
        for (int64_t column = 0; column < columns; ++column) {
          const int64_t from = source_of(g, row, column);
          const T want = from < 0 ? T{} : xs[from];
          wrong += std::memcmp(&got[(row - first) * columns + column], &want, sizeof(T)) != 0;
        }
      CHECK(wrong == 0);
    }
  }
}

}  // namespace

TEST_CASE("im2col_rows in bf16 on small planes and narrow rows copies what im2col.h defines") {
  if (!kernels::cpu::cpu_has_bf16_gemm()) {
    testing::skip_test("this CPU has no AVX512-BF16 or AMX, so no conv builds bf16 columns");
    return;
  }
  check_im2col_rows<BFloat16>(kCases, 3);
  check_im2col_rows<BFloat16>(kRowCases, 4);
}

TEST_CASE("col2im in f32 on small planes sums what im2col.h defines, in the walk's order") {
  // Per pixel the sum runs over the rows in order, from zero, as a plain scatter-add does: equal
  // bit for bit, which a sum in another order would not be (these are random floats).
  Generator gen(4);
  for (const Case& c : kCases) {
    CAPTURE(c.x.str());
    const ConvGeometry g = geometry(c);
    const int64_t images = c.x[0], columns = images * g.output_plane();
    const Tensor dcol = testing::random_tensor({g.patch_size(), columns}, gen, DType::f32);
    const float* d = dcol.data<float>();
    std::vector<float> want(images * g.image_size(), 0.0f), got(want.size(), -1.0f);
    for (int64_t row = 0; row < g.patch_size(); ++row)
      for (int64_t column = 0; column < columns; ++column) {
        const int64_t to = source_of(g, row, column);
        if (to >= 0) want[to] += d[row * columns + column];
      }
    kernels::cpu::col2im(got.data(), d, images, g);
    CHECK(got == want);
  }
}

TEST_CASE("im2col_rows in f32 on narrow rows copies what im2col.h defines") {
  check_im2col_rows<float>(kRowCases, 5);
}
