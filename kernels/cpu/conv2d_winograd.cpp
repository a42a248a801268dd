// f32 3x3 stride-1 convolutions by Winograd's minimal filtering, F(2x2, 3x3) and F(4x4, 3x3), on
// AVX-512 or AVX2 (kernels/cpu/conv2d_paths.h): the forward (and so dx, the forward of the
// flipped conv, conv2d_flipped_backward.cpp) and the weight gradient with fewer multiplies than
// any direct method, at the price of transforming the operands.
//
// Note [Winograd convolution]
// Cut the output into m x m tiles; tile (i, j) reads the (m + 2) x (m + 2) patch d of the padded
// input at rows m i.., columns m j... Per input channel c and output channel k, with matrices
// G ((m + 2) x 3), B^T ((m + 2) x (m + 2)) and A^T (m x (m + 2)) built from m + 2 interpolation
// points (F2x2 and F4x4 in winograd_transforms.h), the tile of the conv is
//   A^T [(G g G^T) . (B^T d B)] A,
// "." elementwise over the grid of (m + 2)^2 points: 16 multiplies for 4 outputs at m = 2, 36 for
// 16 at m = 4, where the direct conv makes 9 an output. Summed over c, the grid points are as many
// independent matrix products,
//   M[xi][tile][k] = sum_c V[xi][tile][c] U[xi][c][k]   (V = B^T d B, U = G g G^T),
// and each tile's outputs are A^T M A. U is made once a call; per image, x is packed with the
// input channels in the lanes (a plane of vectors, padding zero), then per piece of a few tiles:
// their V (adds and subtracts of vectors), the products of every point (a register block of the
// piece's tiles x two vectors of output channels, one broadcast of V per tile and channel, as in
// the GEMM's kernel), and their outputs into a staging plane that is transposed into y's rows at
// the end. The transforms cost per channel what the products cost per channel pair, so the
// method gains with many channels: faster than the direct path from two vectors of them (16 on
// AVX2, 32 on AVX-512, 16 at AVX2's width where AVX-512 runs as two halves; winograd_plan, and
// docs/measurements.md for the figures). F(4x4) makes fewer multiplies an image than F(2x2) on
// every image of 6x6 outputs or more (on 7x7, 4 tiles x 36 against 16 x 16), and the plan takes
// the tile with fewer. The rounding differs from a direct sum: the transforms add and subtract
// before multiplying, by coefficients up to 1/2 in F(2x2) and up to 8 in F(4x4), still at f32's
// level (F4x4 says how its points were chosen). The weight gradient uses the same transforms the
// other way round (winograd_weight_grad). Tested against the direct-loop reference by the conv2d
// tests.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/avx2.h"
#include "kernels/cpu/avx512_bw.h"
#include "kernels/cpu/conv2d_paths.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/winograd_transforms.h"

namespace ringgrad::kernels::cpu {

namespace {

struct WinogradLayout {
  int64_t tile;                         // outputs along a tile's side, F::kTile
  int64_t tile_rows, tile_cols, tiles;  // tiles per image
  int64_t Hp, Wp;                       // the packed plane: every tile's 4x4 patch inside it
  int64_t Cp, Kp;  // channels rounded up to the lanes, output channels to two vectors
  int64_t piece;   // tiles per piece (register block)
};

// How an image's planes (channels x rows x cols) go into a plane of vectors, the channels in the
// lanes: out_rows x out_cols vectors a block of channels, the image at (top, left) in it.
struct Packing {
  int64_t channels, rows, cols, out_rows, out_cols, top, left;
};

using namespace winograd;  // the transforms (winograd_transforms.h)

// The tiles [first, first + count) of one image: V[xi][t][Cp] from the packed plane (point xi
// `step` floats after point xi - 1), and the outputs of M[xi][t][Kp] into the staging plane
// (Kp / lanes blocks of 2TH x 2TW vectors); for the weight gradient, Y[xi][t][Kp] from dy
// packed as that staging plane.
template <class F, class V, int64_t kLanes>
[[gnu::always_inline]] inline void input_tiles(float* v, int64_t step, const float* xp,
                                               int64_t first, int64_t count,
                                               const WinogradLayout& d) {
  const int64_t Cp = d.Cp, plane = d.Hp * d.Wp * kLanes;
  for (int64_t t = 0; t < count; ++t) {
    const int64_t i = (first + t) / d.tile_cols, j = (first + t) % d.tile_cols;
    const float* patch = xp + (F::kTile * (i * d.Wp + j)) * kLanes;
    for (int64_t cb = 0; cb < Cp / kLanes; ++cb)
      input_tile<F, V, kLanes>(v + t * Cp + cb * kLanes, step, patch + cb * plane, d.Wp * kLanes);
  }
}
template <class F, class V, int64_t kLanes>
[[gnu::always_inline]] inline void gradient_tiles(float* y, int64_t step, const float* dyp,
                                                  int64_t first, int64_t count,
                                                  const WinogradLayout& d) {
  constexpr int64_t T = F::kTile;
  const int64_t cols = T * d.tile_cols, plane = T * d.tile_rows * cols * kLanes, Kp = d.Kp;
  for (int64_t t = 0; t < count; ++t) {
    const int64_t i = (first + t) / d.tile_cols, j = (first + t) % d.tile_cols;
    const float* tile = dyp + T * (i * cols + j) * kLanes;
    for (int64_t kb = 0; kb < Kp / kLanes; ++kb)
      gradient_tile<F, V, kLanes>(y + t * Kp + kb * kLanes, step, tile + kb * plane, cols * kLanes);
  }
}
template <class F, class V, int64_t kLanes>
[[gnu::always_inline]] inline void output_tiles(float* ys, const float* m, int64_t first,
                                                int64_t count, const WinogradLayout& d) {
  constexpr int64_t T = F::kTile;
  const int64_t cols = T * d.tile_cols, plane = T * d.tile_rows * cols * kLanes;
  const int64_t Kp = d.Kp, step = d.piece * d.Kp;
  for (int64_t t = 0; t < count; ++t) {
    const int64_t i = (first + t) / d.tile_cols, j = (first + t) % d.tile_cols;
    float* tile = ys + T * (i * cols + j) * kLanes;
    for (int64_t kb = 0; kb < Kp / kLanes; ++kb)
      output_tile<F, V, kLanes>(tile + kb * plane, cols * kLanes, m + t * Kp + kb * kLanes, step);
  }
}

// The products of one grid point for a piece of NT tiles and two vectors of output channels
// from k0: M[t][k0..] = sum_c V[t][c] U[c][k0..], as the GEMM kernel's register block (one
// broadcast of V per tile and channel; the compiler fuses the multiply-adds).
template <class V, int64_t kLanes, int NT>
[[gnu::always_inline]] inline void grid_products(float* m, const float* v, const float* u,
                                                 int64_t k0, const ConvGeometry& g,
                                                 const WinogradLayout& d) {
  const int64_t Cp = d.Cp, Kp = d.Kp;
  V acc[NT][2] = {};
  for (int64_t c = 0; c < g.C; ++c) {
    V w0, w1;
    load(w0, u + c * Kp + k0);
    load(w1, u + c * Kp + k0 + kLanes);
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      acc[t][0] += v[t * Cp + c] * w0;
      acc[t][1] += v[t * Cp + c] * w1;
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    store(m + t * Kp + k0, acc[t][0]);
    store(m + t * Kp + k0 + kLanes, acc[t][1]);
  }
}

// The weight gradient's products of one grid point: M[c0 + c][k0..] (c < CB, two vectors of
// output channels) += the sum over `count` tiles of V[t][c0 + c] Y[t][k0..].
template <class V, int64_t kLanes, int CB>
[[gnu::always_inline]] inline void grid_weight_products(float* m, const float* v, const float* y,
                                                        int64_t c0, int64_t k0, int64_t count,
                                                        const WinogradLayout& d) {
  const int64_t Cp = d.Cp, Kp = d.Kp;
  V acc[CB][2] = {};
  v += c0;
  for (int64_t t = 0; t < count; ++t) {
    V y0, y1;
    load(y0, y + t * Kp + k0);
    load(y1, y + t * Kp + k0 + kLanes);
#pragma GCC unroll 8
    for (int c = 0; c < CB; ++c) {
      acc[c][0] += v[t * Cp + c] * y0;
      acc[c][1] += v[t * Cp + c] * y1;
    }
  }
#pragma GCC unroll 8
  for (int c = 0; c < CB; ++c)
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      V sum;
      load(sum, m + (c0 + c) * Kp + k0 + h * kLanes);
      store(m + (c0 + c) * Kp + k0 + h * kLanes, sum + acc[c][h]);
    }
}

// ---- per ISA: the products, the transforms and the transposes at its width ---------------------
// (Wrappers that carry the ISA's target: a template's target cannot depend on its arguments.)

struct Avx512 {
  static constexpr int64_t kLanes = 16;
  static constexpr int kWeightChannels = 8;  // input channels a weight_products call takes
  static constexpr int64_t kMostTiles = 8;   // 16 of the 32 registers accumulate

  template <int NT>
  RG_AVX512_BW static void products(float* m, const float* v, const float* u, int64_t k0,
                                    const ConvGeometry& g, const WinogradLayout& d) {
    grid_products<__m512, kLanes, NT>(m, v, u, k0, g, d);
  }
  template <int CB>
  RG_AVX512_BW static void weight_products(float* m, const float* v, const float* y, int64_t c0,
                                           int64_t k0, int64_t count, const WinogradLayout& d) {
    grid_weight_products<__m512, kLanes, CB>(m, v, y, c0, k0, count, d);
  }

  // Rows [0, from_rows) of `from` (from_len floats each, from_stride apart; the rest zero) as a
  // kLanes x kLanes block, transposed into to_rows rows of `to` (to_len floats each, to_stride
  // apart), plus add[i] on row i where add is not null.
  RG_AVX512_BW static void transpose_block(float* to, int64_t to_stride, int64_t to_rows,
                                           int64_t to_len, const float* from, int64_t from_stride,
                                           int64_t from_rows, int64_t from_len, const float* add) {
    __m512i rows[kLanes];
    for (int i = 0; i < kLanes; ++i)
      rows[i] = i < from_rows ? _mm512_castps_si512(_mm512_maskz_loadu_ps(first_lanes16(from_len),
                                                                          from + i * from_stride))
                              : _mm512_setzero_si512();
    transpose_16x16(rows);
    for (int i = 0; i < to_rows; ++i) {
      __m512 row = _mm512_castsi512_ps(rows[i]);
      if (add) row = _mm512_add_ps(row, _mm512_set1_ps(add[i]));
      _mm512_mask_storeu_ps(to + i * to_stride, first_lanes16(to_len), row);
    }
  }

  template <class F>
  RG_AVX512_BW static void input(float* v, int64_t step, const float* xp, int64_t first,
                                 int64_t count, const WinogradLayout& d) {
    input_tiles<F, __m512, kLanes>(v, step, xp, first, count, d);
  }
  template <class F>
  RG_AVX512_BW static void gradient(float* y, int64_t step, const float* dyp, int64_t first,
                                    int64_t count, const WinogradLayout& d) {
    gradient_tiles<F, __m512, kLanes>(y, step, dyp, first, count, d);
  }
  template <class F>
  RG_AVX512_BW static void output(float* ys, const float* m, int64_t first, int64_t count,
                                  const WinogradLayout& d) {
    output_tiles<F, __m512, kLanes>(ys, m, first, count, d);
  }
};

struct Avx2 {
  static constexpr int64_t kLanes = 8;
  static constexpr int kWeightChannels = 6;  // input channels a weight_products call takes
  static constexpr int64_t kMostTiles = 6;   // 12 of the 16 registers accumulate

  template <int NT>
  RG_AVX2_FMA static void products(float* m, const float* v, const float* u, int64_t k0,
                                   const ConvGeometry& g, const WinogradLayout& d) {
    grid_products<__m256, kLanes, NT>(m, v, u, k0, g, d);
  }
  template <int CB>
  RG_AVX2_FMA static void weight_products(float* m, const float* v, const float* y, int64_t c0,
                                          int64_t k0, int64_t count, const WinogradLayout& d) {
    grid_weight_products<__m256, kLanes, CB>(m, v, y, c0, k0, count, d);
  }

  RG_AVX2_FMA static void transpose_block(float* to, int64_t to_stride, int64_t to_rows,
                                          int64_t to_len, const float* from, int64_t from_stride,
                                          int64_t from_rows, int64_t from_len, const float* add) {
    // Masked only where a row is short: AVX2's masked store is microcoded on AMD's cores.
    __m256 rows[kLanes];
    for (int i = 0; i < kLanes; ++i) {
      const float* at = from + i * from_stride;
      rows[i] = i >= from_rows       ? _mm256_setzero_ps()
                : from_len >= kLanes ? _mm256_loadu_ps(at)
                                     : _mm256_maskload_ps(at, first_lanes8(from_len));
    }
    transpose_8x8(rows);
    // Unrolled with the bound as a test: as a plain loop GCC turns the stores of whole rows into
    // a call to memcpy from the stack.
#pragma GCC unroll 8
    for (int i = 0; i < kLanes; ++i) {
      if (i >= to_rows) break;
      __m256 row = rows[i];
      if (add) row = _mm256_add_ps(row, _mm256_set1_ps(add[i]));
      if (to_len >= kLanes)
        _mm256_storeu_ps(to + i * to_stride, row);
      else
        _mm256_maskstore_ps(to + i * to_stride, first_lanes8(to_len), row);
    }
  }

  template <class F>
  RG_AVX2_FMA static void input(float* v, int64_t step, const float* xp, int64_t first,
                                int64_t count, const WinogradLayout& d) {
    input_tiles<F, __m256, kLanes>(v, step, xp, first, count, d);
  }
  template <class F>
  RG_AVX2_FMA static void gradient(float* y, int64_t step, const float* dyp, int64_t first,
                                   int64_t count, const WinogradLayout& d) {
    gradient_tiles<F, __m256, kLanes>(y, step, dyp, first, count, d);
  }
  template <class F>
  RG_AVX2_FMA static void output(float* ys, const float* m, int64_t first, int64_t count,
                                 const WinogradLayout& d) {
    output_tiles<F, __m256, kLanes>(ys, m, first, count, d);
  }
};

int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

// The piece size that leaves the fewest tiles computed for nothing at the end of an image, the
// largest on a tie, from 4 up to the ISA's register block.
int64_t piece_size(int64_t tiles, int64_t most) {
  int64_t best = most;
  for (int64_t nt = most; nt >= 4; --nt)
    if (round_up(tiles, nt) - tiles < round_up(tiles, best) - tiles) best = nt;
  return best;
}

template <class Isa, class F>
WinogradLayout winograd_layout(const ConvGeometry& g) {
  WinogradLayout d;
  d.tile = F::kTile;
  d.tile_rows = (g.P + F::kTile - 1) / F::kTile;
  d.tile_cols = (g.Q + F::kTile - 1) / F::kTile;
  d.tiles = d.tile_rows * d.tile_cols;
  d.Hp = F::kTile * d.tile_rows + 2;
  d.Wp = F::kTile * d.tile_cols + 2;
  d.Cp = round_up(g.C, Isa::kLanes);
  d.Kp = round_up(g.K, 2 * Isa::kLanes);
  d.piece = piece_size(d.tiles, Isa::kMostTiles);
  return d;
}

// Output channels a pass of the weights' transforms takes: each grid point's values for them
// fill one cache line. U's rows for one grid point lie C Kp floats apart, a multiple of 4 KiB
// on the wide layers, so the points' lines share one set of L1; written a float at a time
// (k innermost), they pushed each other out at every store.
constexpr int64_t kChannelBlock = 16;

// U[xi][c][Kp] = G w[k][c] G^T, zero for k >= K. In parallel: every call makes it before any of
// its images can start. Kp is a multiple of kChannelBlock (two vectors of output channels).
template <class F>
std::vector<float> transformed_weights(const float* w, const ConvGeometry& g,
                                       const WinogradLayout& d) {
  constexpr int P = F::kPatch;
  std::vector<float> u(F::kGrid * g.C * d.Kp);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t k0 = 0; k0 < d.Kp; k0 += kChannelBlock) {
      float block[F::kGrid][kChannelBlock] = {};
      for (int64_t k = k0; k < std::min(k0 + kChannelBlock, g.K); ++k) {
        const float* f = w + (k * g.C + c) * 9;
        both_axes<float, 3, P, F::template weights<float>>(
            [&](int r, int s, float& value) { value = f[3 * r + s]; },
            [&](int i, int j, float value) { block[P * i + j][k - k0] = value; });
      }
      for (int xi = 0; xi < F::kGrid; ++xi)
        std::memcpy(&u[(xi * g.C + c) * d.Kp + k0], block[xi], sizeof block[xi]);
    }
  return u;
}

// Isa::products for a piece of nt tiles, 4 to Isa::kMostTiles (piece_size).
template <class Isa>
void piece_products(int64_t nt, float* m, const float* v, const float* u, int64_t k0,
                    const ConvGeometry& g, const WinogradLayout& d) {
  if (nt == 4) return Isa::template products<4>(m, v, u, k0, g, d);
  if (nt == 5) return Isa::template products<5>(m, v, u, k0, g, d);
  if (nt == 6) return Isa::template products<6>(m, v, u, k0, g, d);
  if constexpr (Isa::kMostTiles == 8) {
    if (nt == 7) return Isa::template products<7>(m, v, u, k0, g, d);
    if (nt == 8) return Isa::template products<8>(m, v, u, k0, g, d);
  }
}

// Isa::weight_products for the input channels from c0, `left` of them: Isa::kWeightChannels,
// or the 2 or 4 that remain of an even count.
template <class Isa>
void weight_products(int64_t left, float* m, const float* v, const float* y, int64_t c0, int64_t k0,
                     int64_t count, const WinogradLayout& d) {
  if (left >= Isa::kWeightChannels)
    return Isa::template weight_products<Isa::kWeightChannels>(m, v, y, c0, k0, count, d);
  if (left == 4) return Isa::template weight_products<4>(m, v, y, c0, k0, count, d);
  Isa::template weight_products<2>(m, v, y, c0, k0, count, d);
}

// An image's planes into a plane of vectors (Packing), a block of lanes x lanes at a time.
template <class Isa>
void pack(float* out, const float* in, const Packing& k) {
  constexpr int64_t L = Isa::kLanes;
  for (int64_t c0 = 0; c0 < k.channels; c0 += L)
    for (int64_t h = 0; h < k.rows; ++h)
      for (int64_t w0 = 0; w0 < k.cols; w0 += L) {
        const int64_t n = std::min(L, k.cols - w0);
        float* to = out + ((c0 / L * k.out_rows + h + k.top) * k.out_cols + w0 + k.left) * L;
        Isa::transpose_block(to, L, n, L, in + (c0 * k.rows + h) * k.cols + w0, k.rows * k.cols,
                             std::min(L, k.channels - c0), n, nullptr);
      }
}

// The staging plane's first P x Q outputs into y's image (K, P, Q), plus the bias.
template <class Isa>
void unpack(float* y, const float* ys, const float* bias, const ConvGeometry& g,
            const WinogradLayout& d) {
  constexpr int64_t L = Isa::kLanes;
  const int64_t rows = d.tile * d.tile_rows, cols = d.tile * d.tile_cols;
  for (int64_t k0 = 0; k0 < g.K; k0 += L)
    for (int64_t p = 0; p < g.P; ++p)
      for (int64_t q0 = 0; q0 < g.Q; q0 += L) {
        const int64_t n = std::min(L, g.Q - q0);
        Isa::transpose_block(y + (k0 * g.P + p) * g.Q + q0, g.P * g.Q, std::min(L, g.K - k0), n,
                             ys + ((k0 / L * rows + p) * cols + q0) * L, L, n, L,
                             bias ? bias + k0 : nullptr);
      }
}

// x's image into the plane every tile's 4x4 patch lies in.
Packing image_packing(const ConvGeometry& g, const WinogradLayout& d) {
  return {g.C, g.H, g.W, d.Hp, d.Wp, g.pad_h, g.pad_w};
}

template <class Isa, class F>
void winograd_forward(float* y, const float* x, const float* w, const float* bias, int64_t N,
                      const ConvGeometry& g) {
  constexpr int kGrid = F::kGrid;
  const WinogradLayout d = winograd_layout<Isa, F>(g);
  const std::vector<float> u = transformed_weights<F>(w, g, d);
  const int threads = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), N));
#pragma omp parallel num_threads(threads)
  {
    std::vector<float> xp(d.Cp * d.Hp * d.Wp);  // zeroed once: the padding stays so
    std::vector<float> v(kGrid * d.piece * d.Cp), m(kGrid * d.piece * d.Kp);
    std::vector<float> ys(d.Kp * d.tile * d.tile * d.tiles);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      pack<Isa>(xp.data(), x + n * g.image_size(), image_packing(g, d));
      for (int64_t first = 0; first < d.tiles; first += d.piece) {
        // The last piece may run past the image: its extra tiles' V are stale and their M unread.
        const int64_t count = std::min(d.piece, d.tiles - first);
        Isa::template input<F>(v.data(), d.piece * d.Cp, xp.data(), first, count, d);
        for (int xi = 0; xi < kGrid; ++xi)
          for (int64_t k0 = 0; k0 < d.Kp; k0 += 2 * Isa::kLanes)
            piece_products<Isa>(d.piece, m.data() + xi * d.piece * d.Kp,
                                v.data() + xi * d.piece * d.Cp, u.data() + xi * g.C * d.Kp, k0, g,
                                d);
        Isa::template output<F>(ys.data(), m.data(), first, count, d);
      }
      unpack<Isa>(y + n * g.output_image_size(), ys.data(), bias, g, d);
    }
  }
}

// The weight gradient. The conv's outputs summed against dy are a trilinear form in (dy, w, x),
//   sum_xi (A dy A^T)[xi] (G w G^T)[xi] (B^T d B)[xi]   (per tile, channel pair; A^T above),
// so its derivative in w is dw = G^T [(A dy A^T) . (B^T d B)] G summed over tiles: F(3x3, 2x2),
// 16 multiplies per tile for the 36 of a direct sum. Per grid point that sum is one product over
// all tiles of all images, M[xi][c][k] = sum_t V[xi][t][c] Y[xi][t][k] with Y = A dy A^T (dy's
// tiles past the output are zero), and G^T M G comes once at the end.
template <class Isa, class F>
void winograd_weight_grad(float* dw, const float* dy, const float* x, int64_t N,
                          const ConvGeometry& g) {
  constexpr int kGrid = F::kGrid, P = F::kPatch;
  constexpr int64_t kBlockTiles = 32;  // tiles transformed at a time: V and Y of a point in L1
  const WinogradLayout d = winograd_layout<Isa, F>(g);
  const int64_t block = std::min(d.tiles, kBlockTiles), sums = kGrid * d.Cp * d.Kp;
  const int threads = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), N));
  std::vector<float> partials(threads * sums, 0.0f);  // M of each thread
#pragma omp parallel num_threads(threads)
  {
    float* m = partials.data() + omp_get_thread_num() * sums;
    // Zeroed once: the padding, and dy's places past the output.
    std::vector<float> xp(d.Cp * d.Hp * d.Wp), dyp(d.Kp * d.tile * d.tile * d.tiles);
    std::vector<float> v(kGrid * block * d.Cp), y(kGrid * block * d.Kp);
    const Packing image = image_packing(g, d);
    const Packing gradient{g.K, g.P, g.Q, d.tile * d.tile_rows, d.tile * d.tile_cols, 0, 0};
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      pack<Isa>(xp.data(), x + n * g.image_size(), image);
      pack<Isa>(dyp.data(), dy + n * g.output_image_size(), gradient);
      for (int64_t first = 0; first < d.tiles; first += block) {
        const int64_t count = std::min(block, d.tiles - first);
        Isa::template input<F>(v.data(), block * d.Cp, xp.data(), first, count, d);
        Isa::template gradient<F>(y.data(), block * d.Kp, dyp.data(), first, count, d);
        for (int xi = 0; xi < kGrid; ++xi)
          for (int64_t c0 = 0; c0 < d.Cp; c0 += Isa::kWeightChannels)
            for (int64_t k0 = 0; k0 < d.Kp; k0 += 2 * Isa::kLanes)
              weight_products<Isa>(d.Cp - c0, m + xi * d.Cp * d.Kp, v.data() + xi * block * d.Cp,
                                   y.data() + xi * block * d.Kp, c0, k0, count, d);
      }
    }
    // dw[k][c] = G^T M G, M summed over the threads, a block of output channels at a time (as
    // transformed_weights, the grid points' rows of M lie C Kp floats apart).
#pragma omp for schedule(static) collapse(2)
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t k0 = 0; k0 < d.Kp; k0 += kChannelBlock) {
        float point[kGrid][kChannelBlock] = {};
        for (int t = 0; t < threads; ++t)
          for (int xi = 0; xi < kGrid; ++xi) {
            const float* sum = &partials[t * sums + (xi * d.Cp + c) * d.Kp + k0];
            for (int64_t k = 0; k < kChannelBlock; ++k) point[xi][k] += sum[k];
          }
        for (int64_t k = k0; k < std::min(k0 + kChannelBlock, g.K); ++k)
          both_axes<float, P, 3, F::template weight_grad<float>>(
              [&](int i, int j, float& value) { value = point[P * i + j][k - k0]; },
              [&](int r, int s, float value) { dw[(k * g.C + c) * 9 + r * 3 + s] = value; });
      }
  }
}

// How Winograd runs a conv, if at all: its width and tile. 3x3 at stride 1 with padding of at
// most 2 (so every tile's patch fits the packed plane); at least two vectors of channels on each
// side, the products' register block. With 16 to 31 channels AVX-512 leaves half of each product
// zero and its direct rows win, except where it runs as two halves (Zen 4): there AVX2's width,
// two vectors of 8, beats them (measured, forward and dx; its weight gradient is no faster than
// the direct one, which it keeps). Of the two tiles, the one whose products make fewer multiplies
// an image, F(2x2) on a tie (its rounding is the smaller); either needs at least 4 tiles an image,
// a piece's fewest (a 2x2 image, one tile, would compute three tiles for nothing), and its
// transformed weights within 3/4 of L2, since every image reads all of them again (F(4x4)'s
// 590 KB for 64 -> 64 channels ran fast on a 1 MiB L2; F(2x2)'s 1 MB for 128 -> 128 channels on
// 4x4 images, against a 1 MB L2, ran slower than the direct path on AVX2).
enum class Width { none, avx2, avx512 };

struct WinogradPlan {
  Width width = Width::none;
  int tile = 0;  // F::kTile
};

WinogradPlan winograd_plan(const ConvGeometry& g) {
  if (!cpu_has(Isa::avx2) || g.R != 3 || g.S != 3 || g.stride_h != 1 || g.stride_w != 1 ||
      g.pad_h > 2 || g.pad_w > 2 || g.P <= 0 || g.Q <= 0)
    return {};
  const int64_t channels = std::min(g.C, g.K);
  Width width = Width::none;
  if (cpu_has(Isa::avx512) && channels >= 2 * Avx512::kLanes)
    width = Width::avx512;
  else if (channels >= 2 * Avx2::kLanes && (!cpu_has(Isa::avx512) || cpu_features().halves_512))
    width = Width::avx2;
  else
    return {};
  const int64_t lanes = width == Width::avx512 ? Avx512::kLanes : Avx2::kLanes;
  // An image's multiplies by tile F, or 0 where F does not apply.
  auto multiplies = [&](auto f) -> int64_t {
    using F = decltype(f);
    const int64_t tiles = (g.P + F::kTile - 1) / F::kTile * ((g.Q + F::kTile - 1) / F::kTile);
    const int64_t weight_bytes = F::kGrid * g.C * round_up(g.K, 2 * lanes) * int64_t{sizeof(float)};
    const bool fits = 4 * weight_bytes <= 3 * cpu_features().l2_bytes;
    return tiles >= 4 && fits ? tiles * F::kGrid : 0;
  };
  const int64_t small = multiplies(F2x2{}), big = multiplies(F4x4{});
  if (big && (!small || big < small)) return {width, F4x4::kTile};
  if (small) return {width, F2x2::kTile};
  return {};
}

}  // namespace

bool winograd_applies(const ConvGeometry& g) { return winograd_plan(g).width != Width::none; }

bool winograd_weight_grad_applies(const ConvGeometry& g) {
  const Width width = winograd_plan(g).width;
  return width == Width::avx512 || (width == Width::avx2 && !cpu_has(Isa::avx512));
}

void winograd_forward(float* y, const float* x, const float* w, const float* bias, int64_t N,
                      const ConvGeometry& g) {
  const WinogradPlan plan = winograd_plan(g);
  const bool wide = plan.width == Width::avx512, big = plan.tile == F4x4::kTile;
  if (wide && big) return winograd_forward<Avx512, F4x4>(y, x, w, bias, N, g);
  if (wide) return winograd_forward<Avx512, F2x2>(y, x, w, bias, N, g);
  if (big) return winograd_forward<Avx2, F4x4>(y, x, w, bias, N, g);
  winograd_forward<Avx2, F2x2>(y, x, w, bias, N, g);
}

void winograd_weight_grad(float* dw, const float* dy, const float* x, int64_t N,
                          const ConvGeometry& g) {
  const WinogradPlan plan = winograd_plan(g);
  const bool wide = plan.width == Width::avx512, big = plan.tile == F4x4::kTile;
  if (wide && big) return winograd_weight_grad<Avx512, F4x4>(dw, dy, x, N, g);
  if (wide) return winograd_weight_grad<Avx512, F2x2>(dw, dy, x, N, g);
  if (big) return winograd_weight_grad<Avx2, F4x4>(dw, dy, x, N, g);
  winograd_weight_grad<Avx2, F2x2>(dw, dy, x, N, g);
}

}  // namespace ringgrad::kernels::cpu
