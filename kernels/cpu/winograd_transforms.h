// Winograd's transforms for conv2d_winograd.cpp (Note [Winograd convolution] there): the
// one-axis maps of F(2x2, 3x3) and F(4x4, 3x3), and the two-sided transforms of a tile built from
// them. Plain arithmetic over floats or vectors, no ISA of its own: always inlined into the
// ISA's functions that call it. Private to kernels/cpu.
#pragma once
#include <cstdint>
#include <cstring>

namespace ringgrad::kernels::cpu::winograd {

// ---- the transforms -------------------------------------------------------------------------
// F(m x m, 3x3) applies its matrices along one axis of a tile and then the other. Each transform
// below is one such matrix applied to a column or row: B^T to a patch of the input, G to a
// kernel's three taps, A^T to a grid of products; the weight gradient applies A to a tile of dy and
// G^T to a grid of summed products. Templates over the value: floats for the kernels, vectors
// (GCC's vector arithmetic, a float multiplies every lane) for the rest, always inlined into
// the ISA's functions of conv2d_winograd.cpp.

// F(2x2, 3x3): the interpolation points 0, 1, -1 and infinity.
struct F2x2 {
  static constexpr int kTile = 2, kPatch = 4, kGrid = 16;  // tile m, patch m + 2, points
  template <class T>
  [[gnu::always_inline]] static void input(const T d[4], T out[4]) {  // B^T d
    out[0] = d[0] - d[2];
    out[1] = d[1] + d[2];
    out[2] = d[2] - d[1];
    out[3] = d[1] - d[3];
  }
  template <class T>
  [[gnu::always_inline]] static void output(const T p[4], T out[2]) {  // A^T p
    out[0] = p[0] + p[1] + p[2];
    out[1] = p[1] - p[2] - p[3];
  }
  template <class T>
  [[gnu::always_inline]] static void gradient(const T z[2], T out[4]) {  // A z
    out[0] = z[0];
    out[1] = z[0] + z[1];
    out[2] = z[0] - z[1];
    out[3] = -z[1];
  }
  template <class T>
  static void weights(const T f[3], T out[4]) {  // G f
    out[0] = f[0];
    out[1] = 0.5f * (f[0] + f[1] + f[2]);
    out[2] = 0.5f * (f[0] - f[1] + f[2]);
    out[3] = f[2];
  }
  template <class T>
  static void weight_grad(const T p[4], T out[3]) {  // G^T p
    out[0] = p[0] + 0.5f * (p[1] + p[2]);
    out[1] = 0.5f * (p[1] - p[2]);
    out[2] = 0.5f * (p[1] + p[2]) + p[3];
  }
};

// F(4x4, 3x3): the points 0, 1, -1, 1/2, -2 and infinity. The usual 2 in place of 1/2 makes
// every transform symmetric, but rounds worse in f32, in the conv2d tests and in a simulation of
// the forward alike (docs/measurements.md, "Winograd's F(4x4, 3x3)", has the figures).
struct F4x4 {
  static constexpr int kTile = 4, kPatch = 6, kGrid = 36;
  template <class T>
  [[gnu::always_inline]] static void input(const T d[6], T out[6]) {  // B^T d
    const T a = d[4] - d[2], e = d[3] - d[1];
    out[0] = d[0] - 1.5f * d[1] - 2.0f * d[2] + 1.5f * d[3] + d[4];
    out[1] = d[4] - d[1] + 0.5f * d[2] + 2.5f * d[3];
    out[2] = d[4] + d[1] - 2.5f * d[2] + 0.5f * d[3];
    out[3] = a + 2.0f * e;
    out[4] = a - 0.5f * e;
    out[5] = d[1] - 1.5f * d[2] - 2.0f * d[3] + 1.5f * d[4] + d[5];
  }
  template <class T>
  [[gnu::always_inline]] static void output(const T p[6], T out[4]) {  // A^T p
    const T s = p[1] + p[2], d = p[1] - p[2];
    out[0] = p[0] + s + p[3] + p[4];
    out[1] = d + 0.5f * p[3] - 2.0f * p[4];
    out[2] = s + 0.25f * p[3] + 4.0f * p[4];
    out[3] = d + 0.125f * p[3] - 8.0f * p[4] + p[5];
  }
  template <class T>
  [[gnu::always_inline]] static void gradient(const T z[4], T out[6]) {  // A z
    const T even = z[0] + z[2], odd = z[1] + z[3];
    out[0] = z[0];
    out[1] = even + odd;
    out[2] = even - odd;
    out[3] = z[0] + 0.5f * z[1] + 0.25f * z[2] + 0.125f * z[3];
    out[4] = z[0] - 2.0f * z[1] + 4.0f * z[2] - 8.0f * z[3];
    out[5] = z[3];
  }
  static constexpr float kThird = 1.0f / 3, kFifteenth = 1.0f / 15;
  template <class T>
  static void weights(const T f[3], T out[6]) {  // G f
    out[0] = f[0];
    out[1] = kThird * (f[0] + f[1] + f[2]);
    out[2] = kThird * (f[1] - f[0] - f[2]);
    out[3] = -kFifteenth * (16 * f[0] + 8 * f[1] + 4 * f[2]);
    out[4] = kFifteenth * (f[0] - 2 * f[1] + 4 * f[2]);
    out[5] = f[2];
  }
  template <class T>
  static void weight_grad(const T p[6], T out[3]) {  // G^T p
    out[0] = p[0] + kThird * (p[1] - p[2]) + kFifteenth * (p[4] - 16 * p[3]);
    out[1] = kThird * (p[1] + p[2]) - kFifteenth * (8 * p[3] + 2 * p[4]);
    out[2] = kThird * (p[1] - p[2]) + kFifteenth * (4 * p[4] - 4 * p[3]) + p[5];
  }
};

template <class V>
[[gnu::always_inline]] inline void load(V& v, const float* p) {
  std::memcpy(&v, p, sizeof v);
}
template <class V>
[[gnu::always_inline]] inline void store(float* p, const V& v) {
  std::memcpy(p, &v, sizeof v);
}

// A transform of one axis (Map: In values to Out values, the matrix M) applied along both axes
// of In x In values, M X M^T: down each column v of X (read(u, v, value) sets its values), then
// along each row u of the result, whose values go to write(u, v, value). Read and write are
// lambdas marked always_inline, so that they are inlined with their vector types into the ISA's
// functions (and take vectors by reference: a vector returned by value from a function without
// the ISA's target would change the ABI).
template <class V, int In, int Out, void (*Map)(const V*, V*), class Read, class Write>
[[gnu::always_inline]] inline void both_axes(Read read, Write write) {
  V cols[Out][In];  // M X: cols[u][v] is point u of column v
#pragma GCC unroll 6
  for (int v = 0; v < In; ++v) {
    V x[In], y[Out];
#pragma GCC unroll 6
    for (int u = 0; u < In; ++u) read(u, v, x[u]);
    Map(x, y);
#pragma GCC unroll 6
    for (int u = 0; u < Out; ++u) cols[u][v] = y[u];
  }
#pragma GCC unroll 6
  for (int u = 0; u < Out; ++u) {
    V y[Out];
    Map(cols[u], y);
#pragma GCC unroll 6
    for (int v = 0; v < Out; ++v) write(u, v, y[v]);
  }
}

// B^T d B of one patch of channel vectors (d at `at`, `row` floats a row, kLanes a column),
// point xi = kPatch u + v stored at out + xi * step.
template <class F, class V, int64_t kLanes>
[[gnu::always_inline]] inline void input_tile(float* out, int64_t step, const float* at,
                                              int64_t row) {
  constexpr int P = F::kPatch;
  both_axes<V, P, P, F::template input<V>>(
      [&](int u, int v, V& value)
          __attribute__((always_inline)) { load(value, at + u * row + v * kLanes); },
      [&](int u, int v, const V& value)
          __attribute__((always_inline)) { store(out + (P * u + v) * step, value); });
}

// A^T m A of one tile's grid (point xi at m + xi * step): its kTile x kTile outputs, row a at
// out + a * row, column b kLanes * b floats after the row's first.
template <class F, class V, int64_t kLanes>
[[gnu::always_inline]] inline void output_tile(float* out, int64_t row, const float* m,
                                               int64_t step) {
  constexpr int P = F::kPatch;
  both_axes<V, P, F::kTile, F::template output<V>>(
      [&](int u, int v, V& value)
          __attribute__((always_inline)) { load(value, m + (P * u + v) * step); },
      [&](int a, int b, const V& value)
          __attribute__((always_inline)) { store(out + a * row + b * kLanes, value); });
}

// A dy A^T of one kTile x kTile tile of output-gradient vectors (at `at`, `row` floats a row),
// point xi at out + xi * step: the weight gradient's transform of dy.
template <class F, class V, int64_t kLanes>
[[gnu::always_inline]] inline void gradient_tile(float* out, int64_t step, const float* at,
                                                 int64_t row) {
  constexpr int P = F::kPatch;
  both_axes<V, F::kTile, P, F::template gradient<V>>(
      [&](int a, int b, V& value)
          __attribute__((always_inline)) { load(value, at + a * row + b * kLanes); },
      [&](int u, int v, const V& value)
          __attribute__((always_inline)) { store(out + (P * u + v) * step, value); });
}

}  // namespace ringgrad::kernels::cpu::winograd
