// The weight gradient of a convolution straight from dy and x, no column matrix
// (kernels/cpu/conv2d_paths.h): the backward half of the direct convolution, bf16 on AVX512-BF16
// and f32 on AVX-512 or AVX2.
//
// Note [Direct weight gradient]
// With x padded, dw[k][c][r][s] = sum over images n and outputs (p, q) of
// dy[n][k][p][q] xpad[n][c][p * stride_h + r][q * stride_w + s]. Packed per step of images
// (direct_lanes.h's words: one image in f32; in bf16 two, n and n + 1, since VDPBF16PS multiplies
// pairs of the summed index, and two images at the same output and the same tap give every
// output and every shift its pair)
//   dyw[o][k] = dy[n][k][o] (and dy[n + 1][k][o])       (o = p * Q + q, 16 output channels a line)
//   xw[e][c]  = xpad[n][c][e] (and xpad[n + 1][c][e])   (e = h * Wp + w, 16 input channels a line)
// a block of dw^T, 16 input channels (one accumulator each) x 16 output channels (the lanes),
// for tap (r, s) is the sum over the outputs of one vector load of dyw[o] into 16 broadcasts of
// xw[(p * stride_h + r) * Wp + q * stride_w + s], all from one line, as in the GEMM's kernel.
// Each step's images are packed once (blocks transposed) and read for every tap; in bf16 an odd
// image out is paired with zeros. On AVX2 (f32) the lanes are 8 and the registers 16: a block is
// summed in three passes of a few input channels each (tap_block_avx2). Tested against the
// direct-loop reference by the conv2d tests.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/avx2.h"
#include "kernels/cpu/avx512_bw.h"
#include "kernels/cpu/conv2d_paths.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/direct_lanes.h"

namespace ringgrad::kernels::cpu {

namespace {

constexpr int64_t kBlock = 16;  // input channels per block (accumulators), output channels (lanes)

int64_t blocks_of(int64_t n) { return (n + kBlock - 1) / kBlock; }

// The packed sizes of one conv's weight gradient.
struct GradLayout {
  int64_t Wp;       // padded image width
  int64_t plane;    // padded image positions, rounded up to a block of 16
  int64_t outputs;  // P * Q, rounded up to a block of 16
  int64_t c_blocks, k_blocks;
};

GradLayout grad_layout(const ConvGeometry& g) {
  GradLayout d;
  d.Wp = g.W + 2 * g.pad_w;
  d.plane = blocks_of((g.H + 2 * g.pad_h) * d.Wp) * kBlock;
  d.outputs = blocks_of(g.output_plane()) * kBlock;
  d.c_blocks = blocks_of(g.C);
  d.k_blocks = blocks_of(g.K);
  return d;
}

// Where a plane's values go in a packed plane: `count` runs of `length` values each, contiguous
// in the source, `out_stride` positions apart in the packed plane from position `out_first`.
struct Runs {
  int64_t count, length, out_first, out_stride;
};

// out (blocks x `length` positions x 16 words): in each block of 16 rows (channels), row r of
// first (and of second: bf16 joins the two into pairs) in words, position by position, placed
// by `runs`; rows past `rows` zero. Positions outside the runs (a padded image's border) are not
// written: out comes zeroed and stays so. bf16: each piece of 16 positions of 16 rows is loaded,
// transposed and stored one position (a vector) at a time; f32 (AVX2, so on every CPU the f32
// kernels run on) the same in 8 x 8 pieces.
RG_DIRECT void pack_words(uint32_t* out, int64_t blocks, int64_t rows, int64_t length,
                          const BFloat16* first, const BFloat16* second, int64_t row_size,
                          Runs runs) {
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t run = 0; run < runs.count; ++run)
      for (int64_t e = 0; e < runs.length; e += kBlock) {
        const __mmask16 mask = first_lanes16(runs.length - e);
        __m512i words[kBlock];
        for (int i = 0; i < kBlock; ++i) {
          const int64_t r = b * kBlock + i, at = r * row_size + run * runs.length + e;
          words[i] = r < rows ? Bf16Lanes::words(first + at, second ? second + at : nullptr, mask)
                              : _mm512_setzero_si512();
        }
        transpose_16x16(words);
        uint32_t* to = out + (b * length + runs.out_first + run * runs.out_stride + e) * kBlock;
        // Unrolled with the bound as a test: as a plain loop GCC turns these stores of adjacent
        // lines into a copy from the stack (rep movsq; docs/measurements.md has what it cost).
#pragma GCC unroll 16
        for (int j = 0; j < kBlock; ++j) {
          if (j >= runs.length - e) break;
          _mm512_storeu_si512(to + j * kBlock, words[j]);
        }
      }
}

RG_AVX2_FMA void pack_words(float* out, int64_t blocks, int64_t rows, int64_t length,
                            const float* first, const float*, int64_t row_size, Runs runs) {
  constexpr int kPiece = 8;
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t half = 0; half < kBlock; half += kPiece)
      for (int64_t run = 0; run < runs.count; ++run)
        for (int64_t e = 0; e < runs.length; e += kPiece) {
          const __m256i mask = first_lanes8(runs.length - e);
          __m256 words[kPiece];
          for (int i = 0; i < kPiece; ++i) {
            const int64_t r = b * kBlock + half + i;
            words[i] = r < rows
                           ? _mm256_maskload_ps(first + r * row_size + run * runs.length + e, mask)
                           : _mm256_setzero_ps();
          }
          transpose_8x8(words);
          float* to =
              out + (b * length + runs.out_first + run * runs.out_stride + e) * kBlock + half;
          for (int64_t j = 0; j < std::min<int64_t>(kPiece, runs.length - e); ++j)
            _mm256_storeu_ps(to + j * kBlock, words[j]);
        }
}

// sums[c][k] (16 x 16, row stride 16) += the block of dw^T of tap (r, s) for the input channels
// of x_words (a block of xw) and the output channels of dy_words (a block of dyw).
template <class Lanes>
RG_DIRECT void tap_block(float* sums, const typename Lanes::Word* x_words,
                         const typename Lanes::Word* dy_words, int64_t r, int64_t s,
                         const ConvGeometry& g, const GradLayout& d) {
  __m512 acc[kBlock];
#pragma GCC unroll 16
  for (int i = 0; i < kBlock; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t p = 0; p < g.P; ++p) {
    const auto* x_at = x_words + ((p * g.stride_h + r) * d.Wp + s) * kBlock;
    const auto* dy_row = dy_words + p * g.Q * kBlock;
    for (int64_t q = 0; q < g.Q; ++q, x_at += g.stride_w * kBlock) {
      const __m512i dy_vector = _mm512_loadu_si512(dy_row + q * kBlock);
#pragma GCC unroll 16
      for (int i = 0; i < kBlock; ++i) acc[i] = Lanes::multiply_add(acc[i], x_at[i], dy_vector);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < kBlock; ++i)
    _mm512_storeu_ps(sums + i * kBlock, _mm512_add_ps(_mm512_loadu_ps(sums + i * kBlock), acc[i]));
}

// The same on AVX2, 16 registers of 8 lanes: `CI` (at most 6) of the block's input channels from
// c0, for all 16 output channels in two halves: 2 * CI accumulators, the two halves of dy and the
// broadcast input. A block of 16 input channels is three such passes (6, 6, 4).
template <int CI>
RG_AVX2_FMA void tap_block_avx2(float* sums, const float* x_words, const float* dy_words,
                                int64_t c0, int64_t r, int64_t s, const ConvGeometry& g,
                                const GradLayout& d) {
  constexpr int kHalf = kBlock / 2;
  __m256 acc[CI][2];
#pragma GCC unroll 6
  for (int i = 0; i < CI; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (int64_t p = 0; p < g.P; ++p) {
    const float* x_at = x_words + ((p * g.stride_h + r) * d.Wp + s) * kBlock + c0;
    const float* dy_row = dy_words + p * g.Q * kBlock;
    for (int64_t q = 0; q < g.Q; ++q, x_at += g.stride_w * kBlock) {
      const __m256 low = _mm256_loadu_ps(dy_row + q * kBlock);
      const __m256 high = _mm256_loadu_ps(dy_row + q * kBlock + kHalf);
#pragma GCC unroll 6
      for (int i = 0; i < CI; ++i) {
        const __m256 input = _mm256_broadcast_ss(x_at + i);
        acc[i][0] = _mm256_fmadd_ps(input, low, acc[i][0]);
        acc[i][1] = _mm256_fmadd_ps(input, high, acc[i][1]);
      }
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < CI; ++i)
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      float* at = sums + (c0 + i) * kBlock + h * kHalf;
      _mm256_storeu_ps(at, _mm256_add_ps(_mm256_loadu_ps(at), acc[i][h]));
    }
}

}  // namespace

template <class T>
bool direct_weight_grad_applies(const ConvGeometry& g) {
  // A 1x1 kernel's column matrix is x itself or a sample of it, cheaper than packing all of x.
  if (g.R * g.S == 1) return false;
  // bf16 on AVX512-BF16 without AMX (whose tile GEMM is the faster there). f32 (AVX2 or AVX-512)
  // where the forward is direct too (rows of 7 outputs or more): on smaller images loading and
  // storing a block's sums for every image and tap costs more than the position classes' GEMMs.
  if constexpr (std::is_same_v<T, BFloat16>) {
    if (!cpu_has(Isa::avx512_bf16) || cpu_has(Isa::amx)) return false;
  } else if (!direct_conv_applies<T>(g)) {
    return false;
  }
  // At least 5/6 of the products are real: channel blocks not much filled with zeros.
  return 6 * g.C * g.K >= 5 * blocks_of(g.C) * kBlock * blocks_of(g.K) * kBlock;
}

template <class T>
void direct_weight_grad(float* dw, const T* dy, const T* x, int64_t N, const ConvGeometry& g) {
  using Lanes = LanesOf<T>;
  using Word = typename Lanes::Word;
  constexpr int64_t per = Lanes::kValuesPerWord;  // images a step
  const GradLayout d = grad_layout(g);
  const int64_t taps = g.R * g.S, steps = (N + per - 1) / per;
  const int64_t block_sums = kBlock * kBlock, tap_sums = d.c_blocks * d.k_blocks * block_sums;
  const bool avx512 = cpu_has(Isa::avx512);  // else f32 on AVX2
  const int threads = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), steps));
  // Per thread, per (tap, c block, k block): a 16 x 16 block of dw^T.
  std::vector<float> partials(threads * taps * tap_sums, 0.0f);
#pragma omp parallel num_threads(threads)
  {
    float* sums = partials.data() + omp_get_thread_num() * taps * tap_sums;
    // Zeroed once: the padding, positions past the image or the outputs, channels past C or K.
    std::vector<Word> xw(d.c_blocks * d.plane * kBlock);
    std::vector<Word> dyw(d.k_blocks * d.outputs * kBlock);
    const Runs image_rows{g.H, g.W, g.pad_h * d.Wp + g.pad_w, d.Wp};
    const Runs outputs{1, g.output_plane(), 0, 0};
#pragma omp for schedule(static)
    for (int64_t step = 0; step < steps; ++step) {
      const int64_t n = per * step;
      const bool second = per == 2 && n + 1 < N;
      const T* x_first = x + n * g.image_size();
      pack_words(xw.data(), d.c_blocks, g.C, d.plane, x_first,
                 second ? x_first + g.image_size() : nullptr, g.input_plane(), image_rows);
      const T* dy_first = dy + n * g.output_image_size();
      pack_words(dyw.data(), d.k_blocks, g.K, d.outputs, dy_first,
                 second ? dy_first + g.output_image_size() : nullptr, g.output_plane(), outputs);
      for (int64_t tap = 0; tap < taps; ++tap)
        for (int64_t cb = 0; cb < d.c_blocks; ++cb)
          for (int64_t kb = 0; kb < d.k_blocks; ++kb) {
            float* block = sums + tap * tap_sums + (cb * d.k_blocks + kb) * block_sums;
            const Word* x_words = xw.data() + cb * d.plane * kBlock;
            const Word* dy_words = dyw.data() + kb * d.outputs * kBlock;
            const int64_t r = tap / g.S, s = tap % g.S;
            if constexpr (std::is_same_v<T, float>)
              if (!avx512) {
                tap_block_avx2<6>(block, x_words, dy_words, 0, r, s, g, d);
                tap_block_avx2<6>(block, x_words, dy_words, 6, r, s, g, d);
                tap_block_avx2<4>(block, x_words, dy_words, 12, r, s, g, d);
                continue;
              }
            tap_block<Lanes>(block, x_words, dy_words, r, s, g, d);
          }
    }
    // dw[k][c][tap] = the sum over threads of block (tap, c / 16, k / 16) at (c % 16, k % 16).
#pragma omp for schedule(static)
    for (int64_t k = 0; k < g.K; ++k)
      for (int64_t c = 0; c < g.C; ++c)
        for (int64_t tap = 0; tap < taps; ++tap) {
          const int64_t at = tap * tap_sums + (c / kBlock * d.k_blocks + k / kBlock) * block_sums +
                             c % kBlock * kBlock + k % kBlock;
          float sum = 0;
          for (int t = 0; t < threads; ++t) sum += partials[t * taps * tap_sums + at];
          dw[(k * g.C + c) * taps + tap] = sum;
        }
  }
}

#define RG_INSTANTIATE(T)                                           \
  template bool direct_weight_grad_applies<T>(const ConvGeometry&); \
  template void direct_weight_grad<T>(float*, const T*, const T*, int64_t, const ConvGeometry&);
RG_INSTANTIATE(float)
RG_INSTANTIATE(BFloat16)
#undef RG_INSTANTIATE

}  // namespace ringgrad::kernels::cpu
