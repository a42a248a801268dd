// The dense path of the bf16 CPU convolution (kernels/cpu/conv2d_paths.h): on an image with no
// more pixels than the kernel has taps, the conv is one matrix product with the image as it is.
//
// Note [Dense small-image convolution]
// A conv is linear in x: y[n][k][o] = sum over (c, i) of x[n][c][i] E[(k, o)][(c, i)], over
// input pixels i and output positions o, where E holds w[k][c][r][s] for the tap (r, s) that
// carries pixel i to output o (i = o * stride - pad + (r, s)) and zero where no tap does.
// Images of a batch are rows of x (N, C*H*W) and of y and dy (N, K*P*Q) as they are, so
//   y  (N x KPQ)   = x E^T                       forward
//   dx (N x CHW)   = dy E                        input gradient
//   G  (KPQ x CHW) = dy^T x,   dw[k][c][t] = the sum of G over the (o, i) that tap t joins
// with no column matrix and no copy of x or dy. E has K*P*Q x C*H*W entries, against im2col's
// C*R*S per output, so it multiplies no more numbers when H*W <= R*S: ResNet-18's 3x3 convs on
// 2x2 images, where every pixel meets every output (no zero in E) and im2col's column matrix is
// 56% padding, and its tap-cropped ones (a 3x3 kernel on a 1x1 image is a 1x1 kernel; stride 2
// on a 2x2 image a 2x2 kernel), where the column matrix would be a copy of x. Row (k, o) of E
// is built from, and folded back into, row k of the kernel alone, so both run along rows with
// one thread per k. Held to conv2d_reference.cpp by the tests' bf16 sweep.
#include <omp.h>

#include <algorithm>
#include <vector>

#include "core/tensor.h"
#include "kernels/cpu/avx512_bw.h"
#include "kernels/cpu/conv2d_paths.h"
#include "kernels/cpu/gemm.h"

namespace ringgrad::kernels::cpu {

namespace {

// The largest E built (entries): 16 MiB of bf16. Larger ones go to im2col.
constexpr int64_t kMaxDenseEntries = int64_t{8} << 20;

// tap[o * HW + i]: the kernel tap (r * S + s) that carries input pixel i to output position o,
// or -1.
std::vector<int64_t> tap_map(const ConvGeometry& g) {
  std::vector<int64_t> taps(g.output_plane() * g.input_plane(), -1);
  for (int64_t p = 0; p < g.P; ++p)
    for (int64_t q = 0; q < g.Q; ++q)
      for (int64_t h = 0; h < g.H; ++h)
        for (int64_t wi = 0; wi < g.W; ++wi) {
          const int64_t r = h - p * g.stride_h + g.pad_h, s = wi - q * g.stride_w + g.pad_w;
          if (r >= 0 && r < g.R && s >= 0 && s < g.S)
            taps[(p * g.Q + q) * g.input_plane() + h * g.W + wi] = r * g.S + s;
        }
  return taps;
}

// Row (k, o) of E, channel by channel, is a fixed choice among each channel's taps: lane
// c * HW + i of the row takes tap taps[o][i] of channel c. A block of channels is one vector
// permute (AVX-512BW): `channels` channels of R*S taps in, of H*W pixels out, lanes without a
// tap zeroed. The fold back runs the other way, from pixels to taps, adding over o.
struct BlockPermute {
  int64_t channels;             // per block: 0 when one does not fit a vector
  std::vector<uint16_t> index;  // per o, per output lane: the input lane
  std::vector<uint32_t> mask;   // per o: the output lanes that have one
};

// lanes: 32 bf16 or 16 f32. `from` and `to` lanes per channel (taps, pixels or the reverse),
// `source(o, j)` the input lane of output lane j < to within one channel, or -1.
template <class Source>
BlockPermute block_permute(int64_t lanes, int64_t from, int64_t to, int64_t outputs,
                           Source source) {
  BlockPermute b{std::min(lanes / from, lanes / to), {}, {}};
  if (b.channels == 0) return b;
  b.index.assign(outputs * lanes, 0);
  b.mask.assign(outputs, 0);
  for (int64_t o = 0; o < outputs; ++o)
    for (int64_t c = 0; c < b.channels; ++c)
      for (int64_t j = 0; j < to; ++j)
        if (const int64_t in = source(o, j); in >= 0) {
          b.index[o * lanes + c * to + j] = static_cast<uint16_t>(c * from + in);
          b.mask[o] |= uint32_t{1} << (c * to + j);
        }
  return b;
}

RG_AVX512_BW void dense_row(BFloat16* row, const BFloat16* wk, const BlockPermute& b, int64_t o,
                            int64_t C, int64_t kernel, int64_t HW) {
  const __m512i index = _mm512_loadu_si512(b.index.data() + o * 32);
  const __mmask32 keep = b.mask[o];
  for (int64_t c = 0; c < C; c += b.channels) {
    const int64_t n = std::min(b.channels, C - c);
    const __m512i taps = _mm512_maskz_loadu_epi16(first_lanes32(n * kernel), wk + c * kernel);
    _mm512_mask_storeu_epi16(row + c * HW, first_lanes32(n * HW),
                             _mm512_maskz_permutexvar_epi16(keep, index, taps));
  }
}

// dwk (C x R*S) = the fold of rows (P*Q rows of C*H*W, `stride` apart), a block of channels at
// a time summed over o in a register: one store per block, no read of what was stored.
RG_AVX512_BW void fold_rows(float* dwk, const float* rows, int64_t stride, const BlockPermute& b,
                            int64_t PQ, int64_t C, int64_t kernel, int64_t HW) {
  for (int64_t c = 0; c < C; c += b.channels) {
    const int64_t n = std::min(b.channels, C - c);
    const __mmask16 pixels = first_lanes16(n * HW);
    __m512 sums = _mm512_setzero_ps();
    for (int64_t o = 0; o < PQ; ++o) {
      const __m512i index = _mm512_maskz_cvtepu16_epi32(
          0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.index.data() + o * 16)));
      const __m512 row = _mm512_maskz_loadu_ps(pixels, rows + o * stride + c * HW);
      sums = _mm512_add_ps(
          sums, _mm512_maskz_permutexvar_ps(static_cast<__mmask16>(b.mask[o]), index, row));
    }
    _mm512_mask_storeu_ps(dwk + c * kernel, first_lanes16(n * kernel), sums);
  }
}

// E (KPQ x CHW) from w (K, C, R, S).
Tensor dense_weights(const BFloat16* w, const ConvGeometry& g, const std::vector<int64_t>& taps) {
  const int64_t HW = g.input_plane(), PQ = g.output_plane(), kernel = g.R * g.S;
  const BlockPermute b =
      block_permute(32, kernel, HW, PQ, [&](int64_t o, int64_t i) { return taps[o * HW + i]; });
  Tensor dense = Tensor::empty({g.output_image_size(), g.image_size()}, DType::bf16);
  BFloat16* e = dense.data<BFloat16>();
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < g.K; ++k)
    for (int64_t o = 0; o < PQ; ++o) {
      BFloat16* row = e + (k * PQ + o) * g.image_size();
      const BFloat16* wk = w + k * g.patch_size();
      if (b.channels > 0) {
        dense_row(row, wk, b, o, g.C, kernel, HW);
        continue;
      }
      const int64_t* tap = taps.data() + o * HW;
      for (int64_t c = 0; c < g.C; ++c)
        for (int64_t i = 0; i < HW; ++i)
          row[c * HW + i] = tap[i] >= 0 ? wk[c * kernel + tap[i]] : BFloat16{};
    }
  return dense;
}

}  // namespace

bool dense_small_image_applies(const ConvGeometry& g) {
  return g.input_plane() <= g.R * g.S && g.image_size() * g.output_image_size() <= kMaxDenseEntries;
}

void dense_small_image_forward(BFloat16* y, const BFloat16* x, const BFloat16* w,
                               const BFloat16* bias, int64_t N, const ConvGeometry& g) {
  const int64_t CHW = g.image_size(), KPQ = g.output_image_size(), PQ = g.output_plane();
  const Tensor dense = dense_weights(w, g, tap_map(g));
  Tensor sums = Tensor::empty({N, KPQ}, DType::f32);
  const float* s = sums.data<float>();
  parallel_gemm(Op::none, Op::transpose, N, KPQ, CHW, 1.0f, x, CHW, dense.data<BFloat16>(), CHW,
                0.0f, sums.data<float>(), KPQ);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < g.K; ++k) {
      const float add = bias ? widen(bias[k]) : 0.0f;
      for (int64_t j = k * PQ; j < (k + 1) * PQ; ++j)
        y[n * KPQ + j] = narrow<BFloat16>(s[n * KPQ + j] + add);
    }
}

void dense_small_image_backward(BFloat16* dx, float* dw, const BFloat16* dy, const BFloat16* x,
                                const BFloat16* w, int64_t N, const ConvGeometry& g) {
  const int64_t CHW = g.image_size(), KPQ = g.output_image_size();
  const int64_t HW = g.input_plane(), PQ = g.output_plane(), kernel = g.R * g.S;
  const std::vector<int64_t> taps = tap_map(g);
  if (dx) {
    const Tensor dense = dense_weights(w, g, taps);
    Tensor sums = Tensor::empty({N, CHW}, DType::f32);
    const float* s = sums.data<float>();
    parallel_gemm(Op::none, Op::none, N, CHW, KPQ, 1.0f, dy, KPQ, dense.data<BFloat16>(), CHW, 0.0f,
                  sums.data<float>(), CHW);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N * CHW; ++i) dx[i] = narrow<BFloat16>(s[i]);
  }
  if (!dw) return;
  Tensor grads = Tensor::empty({KPQ, CHW}, DType::f32);  // G = dy^T x
  const float* G = grads.data<float>();
  parallel_gemm(Op::transpose, Op::none, KPQ, CHW, N, 1.0f, dy, KPQ, x, CHW, 0.0f,
                grads.data<float>(), CHW);
  // The pixel each (o, tap) pair reads, for the fold: pixel[o][t], or -1.
  std::vector<int64_t> pixel(PQ * kernel, -1);
  for (int64_t o = 0; o < PQ; ++o)
    for (int64_t i = 0; i < HW; ++i)
      if (taps[o * HW + i] >= 0) pixel[o * kernel + taps[o * HW + i]] = i;
  const BlockPermute b = block_permute(16, HW, kernel, PQ,
                                       [&](int64_t o, int64_t t) { return pixel[o * kernel + t]; });
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < g.K; ++k) {
    float* dwk = dw + k * g.patch_size();
    const float* rows = G + k * PQ * CHW;
    if (b.channels > 0) {
      fold_rows(dwk, rows, CHW, b, PQ, g.C, kernel, HW);
      continue;
    }
    std::fill_n(dwk, g.patch_size(), 0.0f);
    for (int64_t o = 0; o < PQ; ++o) {
      const int64_t* tap = taps.data() + o * HW;
      for (int64_t c = 0; c < g.C; ++c)
        for (int64_t i = 0; i < HW; ++i)
          if (tap[i] >= 0) dwk[c * kernel + tap[i]] += rows[o * CHW + c * HW + i];
    }
  }
}

}  // namespace ringgrad::kernels::cpu
