// The f32 weight gradient of a conv with few input channels (a network's stem, reading the data)
// on AVX-512 (kernels/cpu/conv2d_paths.h).
//
// Note [Stem weight gradient]
// dw[k][c][r][s] = the sum over images and outputs (p, q) of
//   dy[k][p][q] x[c][p sh + r - ph][q sw + s - pw].
// With one input channel the column matrix of im2col + GEMM is only R*S rows deep, and neither
// side of the GEMM is long enough to run near peak; the direct weight gradient (see
// Note [Direct weight gradient]) takes channels 16 at a time and would multiply 15 zeros for each
// value. Here the output channels are the lanes instead: per image, dy is transposed to
// positions x output channels and x padded into a plane per channel; then per input channel c,
// kernel row r and pair of vectors of output channels, a register block of S taps x 2 vectors
// runs over every output position, one broadcast of x per tap and position (the sums of S taps
// at once, so each dy vector is loaded once for the row). Each thread sums its own images, and
// the threads' sums are added in thread order at the end, as the other weight gradients do.
// Kernels 5 or 7 wide only (stem_weight_grad_applies). Tested against the direct-loop reference
// by the conv2d tests (resnet18's stem and odd shapes).
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/avx512_bw.h"
#include "kernels/cpu/conv2d_paths.h"
#include "kernels/cpu/cpu_features.h"

namespace ringgrad::kernels::cpu {

namespace {

constexpr int64_t kLanes = 16;
constexpr int64_t kMostChannels = 4;  // input channels; more go by the other paths

struct StemLayout {
  int64_t Hp, Wp;  // x padded on every side
  int64_t Kp;      // output channels rounded up to whole vectors
};

StemLayout stem_layout(const ConvGeometry& g) {
  return {g.H + 2 * g.pad_h, g.W + 2 * g.pad_w, (g.K + kLanes - 1) / kLanes * kLanes};
}

// One image's dy (K x P*Q) into dyt (P*Q x Kp), 16 x 16 blocks at a time; lanes past K stay zero.
RG_AVX512_BW void transpose_dy(float* dyt, const float* dy, const ConvGeometry& g,
                               const StemLayout& d) {
  const int64_t positions = g.output_plane();
  for (int64_t k0 = 0; k0 < g.K; k0 += kLanes)
    for (int64_t p0 = 0; p0 < positions; p0 += kLanes) {
      const int64_t rows = std::min(kLanes, g.K - k0), cols = std::min(kLanes, positions - p0);
      __m512i block[kLanes];
      for (int64_t i = 0; i < kLanes; ++i)
        block[i] = i < rows ? _mm512_castps_si512(_mm512_maskz_loadu_ps(
                                  first_lanes16(cols), dy + (k0 + i) * positions + p0))
                            : _mm512_setzero_si512();
      transpose_16x16(block);
      for (int64_t i = 0; i < cols; ++i)
        _mm512_storeu_ps(dyt + (p0 + i) * d.Kp + k0, _mm512_castsi512_ps(block[i]));
    }
}

// sums[s][0..KV vectors) += the sum over positions (p, q) of x[p sh + r][q sw + s] (the padded
// plane of one channel, from its row r) times dyt[p, q][k0..]: one kernel row's S taps.
template <int S, int KV>
RG_AVX512_BW void row_taps(float* sums, int64_t sums_stride, const float* xr, const float* dyt,
                           int64_t k0, const ConvGeometry& g, const StemLayout& d) {
  __m512 acc[S][KV];
  for (int s = 0; s < S; ++s)
    for (int v = 0; v < KV; ++v) acc[s][v] = _mm512_setzero_ps();
  for (int64_t p = 0; p < g.P; ++p) {
    const float* x_row = xr + p * g.stride_h * d.Wp;
    const float* dy_row = dyt + p * g.Q * d.Kp + k0;
    for (int64_t q = 0; q < g.Q; ++q) {
      __m512 dy[KV];
      for (int v = 0; v < KV; ++v) dy[v] = _mm512_loadu_ps(dy_row + q * d.Kp + v * kLanes);
      const float* x_at = x_row + q * g.stride_w;
#pragma GCC unroll 7
      for (int s = 0; s < S; ++s) {
        const __m512 b = _mm512_set1_ps(x_at[s]);
        for (int v = 0; v < KV; ++v) acc[s][v] = _mm512_fmadd_ps(b, dy[v], acc[s][v]);
      }
    }
  }
  for (int s = 0; s < S; ++s)
    for (int v = 0; v < KV; ++v) {
      float* at = sums + s * sums_stride + k0 + v * kLanes;
      _mm512_storeu_ps(at, _mm512_add_ps(_mm512_loadu_ps(at), acc[s][v]));
    }
}

// One image into sums (C*R*S rows of Kp).
template <int S>
void image_taps(float* sums, const float* xp, const float* dyt, const ConvGeometry& g,
                const StemLayout& d) {
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t r = 0; r < g.R; ++r) {
      float* row_sums = sums + (c * g.R + r) * S * d.Kp;
      const float* xr = xp + (c * d.Hp + r) * d.Wp;
      int64_t k0 = 0;
      for (; k0 + 2 * kLanes <= d.Kp; k0 += 2 * kLanes)
        row_taps<S, 2>(row_sums, d.Kp, xr, dyt, k0, g, d);
      if (k0 < d.Kp) row_taps<S, 1>(row_sums, d.Kp, xr, dyt, k0, g, d);
    }
}

}  // namespace

bool stem_weight_grad_applies(const ConvGeometry& g) {
  // Kernels 5 or 7 wide: with 3 taps a row the block is too small to hide the multiply-adds'
  // latency and the loads, and im2col + GEMM was faster (measured).
  return cpu_has(Isa::avx512) && g.C <= kMostChannels && (g.S == 5 || g.S == 7) && g.P > 0 &&
         g.Q > 0;
}

void stem_weight_grad(float* dw, const float* dy, const float* x, int64_t N,
                      const ConvGeometry& g) {
  const StemLayout d = stem_layout(g);
  const int64_t taps = g.C * g.R * g.S, sums_size = taps * d.Kp;
  const int threads = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), N));
  std::vector<float> partials(threads * sums_size, 0.0f);
#pragma omp parallel num_threads(threads)
  {
    float* sums = partials.data() + omp_get_thread_num() * sums_size;
    std::vector<float> xp(g.C * d.Hp * d.Wp);  // zeroed once: the padding stays so
    std::vector<float> dyt(g.output_plane() * d.Kp);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const float* image = x + n * g.image_size();
      for (int64_t c = 0; c < g.C; ++c)
        for (int64_t h = 0; h < g.H; ++h)
          std::copy_n(image + (c * g.H + h) * g.W, g.W,
                      xp.data() + (c * d.Hp + h + g.pad_h) * d.Wp + g.pad_w);
      transpose_dy(dyt.data(), dy + n * g.output_image_size(), g, d);
      if (g.S == 5) image_taps<5>(sums, xp.data(), dyt.data(), g, d);
      if (g.S == 7) image_taps<7>(sums, xp.data(), dyt.data(), g, d);
    }
    // dw[k][c][r][s] = the sum over threads of row (c, r, s) at k.
#pragma omp for schedule(static)
    for (int64_t k = 0; k < g.K; ++k)
      for (int64_t tap = 0; tap < taps; ++tap) {
        float sum = 0;
        for (int t = 0; t < threads; ++t) sum += partials[t * sums_size + tap * d.Kp + k];
        dw[k * taps + tap] = sum;
      }
  }
}

}  // namespace ringgrad::kernels::cpu
