// The weight gradient of a stride-1 bf16 convolution on AVX512-BF16 straight from dy and x, no
// column matrix (kernels/cpu/conv2d_paths.h): the backward half of the direct convolution.
//
// Note [Direct bf16 weight gradient]
// With x padded, dw[k][c][r][s] = sum over images and outputs (p, q) of
// dy[k][p][q] xpad[c][p + r][q + s]. In the flat positions of the padded image
// (Note [Direct bf16 convolution]) the output at e = p * Wp + q reads tap (r, s) at
// e + r * Wp + s, so with dy spread over the same positions (dyf, zero in the columns q >= Q)
//   dw[k][c][tap] = sum over e of dyf[k][e] xf[c][e + shift(tap)],
// a product whose depth is the positions and needs no copy of x per tap. VDPBF16PS multiplies
// pairs of depth: the pairs (e, e + 1), e even. Packed as dyp[e / 2][k][2], the pairs of 16
// output channels at one e are one vector. Packed as xp[e][c][2] = (xf[c][e], xf[c][e + 1]) for
// every e, odd ones too (twice the image, so that any shift finds its pairs), the pairs of 16
// input channels at e + shift are one 64-byte line, each a 32-bit broadcast. So a block of
// dw^T, 16 input channels (one accumulator each) x 16 output channels (the lanes), for one tap
// is a sum over e of 16 broadcasts into one vector load each, as in the GEMM's kernel; each
// image is packed once (rows joined into pairs, 16 x 16 blocks transposed) and read for every
// tap. The positions q >= Q add zeros: Wp / Q more multiplies, as in the forward. Tested
// against the direct-loop reference by the conv2d tests.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/avx512_bw.h"
#include "kernels/cpu/conv2d_paths.h"
#include "kernels/cpu/cpu_features.h"

#define RG_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace ringgrad::kernels::cpu {

namespace {

constexpr int64_t kBlock = 16;  // input channels per block (accumulators), output channels (lanes)

int64_t blocks_of(int64_t n) { return (n + kBlock - 1) / kBlock; }

// The packed sizes of one conv's weight gradient.
struct GradLayout {
  int64_t Wp;           // padded image width
  int64_t pairs;        // position pairs summed: P * Wp positions, rounded up to even
  int64_t pair_stride;  // pairs rounded up to whole blocks of 16, the packed dy's stride
  int64_t plane;  // positions per padded channel, what the last pair reads and on to a block of 16
  int64_t c_blocks, k_blocks;
};

GradLayout grad_layout(const ConvGeometry& g) {
  GradLayout d;
  d.Wp = g.W + 2 * g.pad_w;
  d.pairs = (g.P * d.Wp + 1) / 2;
  d.pair_stride = blocks_of(d.pairs) * kBlock;
  const int64_t last_read = 2 * d.pairs - 1 + (g.R - 1) * d.Wp + g.S - 1;
  d.plane = blocks_of(std::max(last_read + 1, (g.H + 2 * g.pad_h) * d.Wp)) * kBlock;
  d.c_blocks = blocks_of(g.C);
  d.k_blocks = blocks_of(g.K);
  return d;
}

const uint16_t* bits(const BFloat16* p) { return reinterpret_cast<const uint16_t*>(p); }

// out[16 j + i] = rows[i][j] for i, j < 16: 16 vectors stored transposed, so that each vector
// of out holds one value of every row.
RG_AVX512_BF16 void store_transposed(uint32_t* out, __m512i rows[kBlock]) {
  transpose_16x16(rows);
  for (int j = 0; j < kBlock; ++j) _mm512_storeu_si512(out + j * kBlock, rows[j]);
}

// xp (c_blocks x plane x 16 values of 32 bits): for input channel c and position e of the padded
// image, x there and at e + 1 in the low and high half; zero in the padding and past C. First
// xf (c_blocks * 16 rows, the image padded), then per 16 positions of 16 channels each row's
// values joined with their right neighbours into pairs, the 16 x 16 pairs transposed.
RG_AVX512_BF16 void pack_image_pairs(uint32_t* xp, uint16_t* xf, const BFloat16* x,
                                     const ConvGeometry& g, const GradLayout& d) {
  const int64_t row = d.plane + 1;  // the last pair reads one value past the plane
  std::fill_n(xf, d.c_blocks * kBlock * row, uint16_t{0});
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t ih = 0; ih < g.H; ++ih)
      std::copy_n(bits(x) + (c * g.H + ih) * g.W, g.W,
                  xf + c * row + (ih + g.pad_h) * d.Wp + g.pad_w);
  for (int64_t cb = 0; cb < d.c_blocks; ++cb)
    for (int64_t e = 0; e < d.plane; e += kBlock) {
      __m512i pairs[kBlock];
      for (int i = 0; i < kBlock; ++i) {
        const uint16_t* at = xf + (cb * kBlock + i) * row + e;
        const __m512i low =
            _mm512_maskz_cvtepu16_epi32(0xFFFF, _mm256_loadu_si256((const __m256i*)at));
        const __m512i high =
            _mm512_maskz_cvtepu16_epi32(0xFFFF, _mm256_loadu_si256((const __m256i*)(at + 1)));
        pairs[i] = _mm512_or_si512(low, _mm512_maskz_slli_epi32(0xFFFF, high, 16));
      }
      store_transposed(xp + (cb * d.plane + e) * kBlock, pairs);
    }
}

// dyp (k_blocks x pair_stride x 16 values of 32 bits): for output channel k and position pair
// i, dy at positions 2i and 2i + 1 in the low and high half; zero in the columns q >= Q and past
// K. First dyf (k_blocks * 16 rows of 2 * pair_stride positions: already pairs), then each
// 16 x 16 block of pairs transposed.
RG_AVX512_BF16 void pack_output_grad(uint32_t* dyp, uint16_t* dyf, const BFloat16* dy,
                                     const ConvGeometry& g, const GradLayout& d) {
  const int64_t row = 2 * d.pair_stride;
  std::fill_n(dyf, d.k_blocks * kBlock * row, uint16_t{0});
  for (int64_t k = 0; k < g.K; ++k)
    for (int64_t p = 0; p < g.P; ++p)
      std::copy_n(bits(dy) + (k * g.P + p) * g.Q, g.Q, dyf + k * row + p * d.Wp);
  for (int64_t kb = 0; kb < d.k_blocks; ++kb)
    for (int64_t i = 0; i < d.pair_stride; i += kBlock) {
      __m512i pairs[kBlock];
      for (int k = 0; k < kBlock; ++k)
        pairs[k] = _mm512_loadu_si512(dyf + (kb * kBlock + k) * row + 2 * i);
      store_transposed(dyp + (kb * d.pair_stride + i) * kBlock, pairs);
    }
}

// sums[c][k] (16 x 16, row stride 16) += the block of dw^T of one tap for the input channels
// of x_pairs (xp's block, already shifted by the tap) and the output channels of dy_lanes.
RG_AVX512_BF16 void tap_block(float* sums, const uint32_t* x_pairs, const uint32_t* dy_lanes,
                              const GradLayout& d) {
  __m512 acc[kBlock];
#pragma GCC unroll 16
  for (int i = 0; i < kBlock; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t pair = 0; pair < d.pairs; ++pair) {
    const __m512bh dy_pairs = (__m512bh)_mm512_loadu_si512(dy_lanes + pair * kBlock);
#pragma GCC unroll 16
    for (int i = 0; i < kBlock; ++i) {
      const int32_t x_pair = static_cast<int32_t>(x_pairs[2 * pair * kBlock + i]);
      acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh)_mm512_set1_epi32(x_pair), dy_pairs);
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < kBlock; ++i)
    _mm512_storeu_ps(sums + i * kBlock, _mm512_add_ps(_mm512_loadu_ps(sums + i * kBlock), acc[i]));
}

}  // namespace

bool direct_weight_grad_applies(const ConvGeometry& g) {
  if (!cpu_has(Isa::avx512_bf16) || cpu_has(Isa::amx)) return false;
  if (g.stride_h != 1 || g.stride_w != 1 || g.R * g.S == 1) return false;
  // At least 5/6 of the products are real: not many columns thrown away, nor channel blocks
  // filled with zeros (resnet20's 28x28 and 14x14 layers, not its 7x7 ones nor the stem).
  const GradLayout d = grad_layout(g);
  return 6 * g.Q * g.C * g.K >= 5 * d.Wp * d.c_blocks * kBlock * d.k_blocks * kBlock;
}

void direct_weight_grad(float* dw, const BFloat16* dy, const BFloat16* x, int64_t N,
                        const ConvGeometry& g) {
  const GradLayout d = grad_layout(g);
  const int64_t taps = g.R * g.S;
  const int64_t block_sums = kBlock * kBlock, tap_sums = d.c_blocks * d.k_blocks * block_sums;
  const int threads = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), N));
  // Per thread, per (tap, c block, k block): a 16 x 16 block of dw^T.
  std::vector<float> partials(threads * taps * tap_sums, 0.0f);
#pragma omp parallel num_threads(threads)
  {
    float* sums = partials.data() + omp_get_thread_num() * taps * tap_sums;
    std::vector<uint16_t> xf(d.c_blocks * kBlock * (d.plane + 1));
    std::vector<uint32_t> xp(d.c_blocks * d.plane * kBlock);
    std::vector<uint32_t> dyp(d.k_blocks * d.pair_stride * kBlock);
    std::vector<uint16_t> dyf(d.k_blocks * kBlock * 2 * d.pair_stride);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      pack_image_pairs(xp.data(), xf.data(), x + n * g.image_size(), g, d);
      pack_output_grad(dyp.data(), dyf.data(), dy + n * g.output_image_size(), g, d);
      for (int64_t tap = 0; tap < taps; ++tap) {
        const int64_t shift = tap / g.S * d.Wp + tap % g.S;
        for (int64_t cb = 0; cb < d.c_blocks; ++cb)
          for (int64_t kb = 0; kb < d.k_blocks; ++kb)
            tap_block(sums + tap * tap_sums + (cb * d.k_blocks + kb) * block_sums,
                      xp.data() + (cb * d.plane + shift) * kBlock,
                      dyp.data() + kb * d.pair_stride * kBlock, d);
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

}  // namespace ringgrad::kernels::cpu
