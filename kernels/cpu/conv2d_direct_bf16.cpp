// The direct bf16 convolution on AMX or AVX512-BF16 (kernels/cpu/conv2d_paths.h), for stride-1
// convs with images large enough to fill tiles: no column matrix at all.
//
// Note [Direct bf16 convolution]
// The im2col path copies every input value R*S times into the column matrix and then packs that
// into tiles: for a conv with few channels (resnet20's 16-64) that copying, not the multiplying,
// is the cost. A stride-1 convolution needs no copy. Pad each image with zeros to Hp x Wp; the
// output at flat position e = oh * Wp + ow then reads, for tap (r, s), the padded input at
// e + r * Wp + s: the same image shifted. So with each image packed once as channel pairs,
// xp[pair][position] (two bf16 values in 32 bits, the layout a bf16 dot product takes), the
// B operand of tap (r, s) for 16 output positions is 16 rows (channel pairs) of 64 contiguous
// bytes, read in place at the pair stride, and
//   y tile (16 channels x 16 positions) += sum over taps and channel blocks of
//                                          w tile (16 channels x 32 input channels) x xp tile.
// On AMX a tile load reads those rows and one TDPBF16PS multiplies; on AVX512-BF16 each row is
// one vector load and each weight pair one broadcast into VDPBF16PS, as in the GEMM's kernel.
// Every flat position is computed and the ow >= Q ones (they read across a row edge) are
// thrown away: Wp / Q more multiplies (30/28 at 28x28, 9/7 at 7x7), far fewer bytes moved.
// Tested against the direct-loop reference (conv2d_reference.cpp) by the conv2d tests in bf16.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/amx_config.h"
#include "kernels/cpu/conv2d_paths.h"
#include "kernels/cpu/cpu_features.h"

#define RG_AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bf16,avx512vbmi2,avx512vl")))
// Every CPU with AMX has these (Sapphire Rapids and later); AVX512-BF16 ones are asked for VBMI2.
#define RG_STORE __attribute__((target("avx512f,avx512bf16,avx512vbmi2,avx512vl,avx512bw")))

namespace ringgrad::kernels::cpu {

namespace {

constexpr int64_t kTile = 16;  // channels or positions per C tile; channel pairs per B tile

// The packed sizes of one direct conv.
struct DirectLayout {
  int64_t block_pairs;  // channel pairs per B tile: 16, or all of them when fewer
  int64_t pair_blocks;  // B tiles per tap, the pairs padded with zero channels to fill them
  int64_t Wp;           // padded image width
  int64_t positions;    // flat output positions computed: P * Wp
  int64_t position_tiles;
  int64_t plane;  // values per packed pair: the padded image and what the last tile reads past it
  int64_t k_tiles;
};

DirectLayout direct_layout(const ConvGeometry& g) {
  DirectLayout d;
  const int64_t pairs = (g.C + 1) / 2;
  d.block_pairs = std::min(kTile, pairs);
  d.pair_blocks = (pairs + d.block_pairs - 1) / d.block_pairs;
  d.Wp = g.W + 2 * g.pad_w;
  d.positions = g.P * d.Wp;
  d.position_tiles = (d.positions + kTile - 1) / kTile;
  const int64_t last_read = d.position_tiles * kTile - 1 + (g.R - 1) * d.Wp + g.S - 1;
  d.plane = std::max(last_read + 1, (g.H + 2 * g.pad_h) * d.Wp);
  d.k_tiles = (g.K + kTile - 1) / kTile;
  return d;
}

const uint16_t* bits(const BFloat16* p) { return reinterpret_cast<const uint16_t*>(p); }

// xp (pair blocks x block_pairs planes of `plane` values) of one image x (C, H, W): channels
// 2i and 2i+1 in the low and high half of each value, zero in the padding and past C.
void pack_image(uint32_t* xp, const BFloat16* x, const ConvGeometry& g, const DirectLayout& d) {
  std::fill_n(xp, d.pair_blocks * d.block_pairs * d.plane, 0u);
  for (int64_t pair = 0; 2 * pair < g.C; ++pair) {
    const uint16_t* low = bits(x) + 2 * pair * g.input_plane();
    const uint16_t* high = 2 * pair + 1 < g.C ? low + g.input_plane() : nullptr;
    uint32_t* out = xp + pair * d.plane + g.pad_h * d.Wp + g.pad_w;
    for (int64_t ih = 0; ih < g.H; ++ih) {
      const uint16_t* lo = low + ih * g.W;
      uint32_t* row = out + ih * d.Wp;
      if (high) {
        const uint16_t* hi = high + ih * g.W;
        for (int64_t iw = 0; iw < g.W; ++iw) row[iw] = lo[iw] | (uint32_t{hi[iw]} << 16);
      } else {
        for (int64_t iw = 0; iw < g.W; ++iw) row[iw] = lo[iw];
      }
    }
  }
}

// One A tile per (k tile, tap, pair block): 16 output channels x the block's input channels
// (2 * block_pairs bf16 a row) of that tap, zero past K and C.
std::vector<uint16_t> pack_weights(const BFloat16* w, const ConvGeometry& g,
                                   const DirectLayout& d) {
  const int64_t taps = g.R * g.S, row = 2 * d.block_pairs;
  std::vector<uint16_t> tiles(d.k_tiles * taps * d.pair_blocks * kTile * row, 0);
  for (int64_t k = 0; k < g.K; ++k)
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t tap = 0; tap < taps; ++tap) {
        const int64_t block = c / row, column = c % row;
        const int64_t tile = (k / kTile * taps + tap) * d.pair_blocks + block;
        tiles[(tile * kTile + k % kTile) * row + column] = bits(w)[(k * g.C + c) * taps + tap];
      }
  return tiles;
}

// C tile (output channels from k0, flat positions from e0) into y (K, P, Q) of one image,
// plus bias, rounded to bf16; rows past K and positions past P * Wp or in columns ow >= Q are
// not stored. The stored positions of a tile are consecutive outputs (a position thrown away
// ends an output row), so each row of the tile is one compress and one contiguous store.
RG_STORE void store_tile(BFloat16* y, const float* tile, int64_t k0, int64_t e0,
                         const BFloat16* bias, const ConvGeometry& g, const DirectLayout& d) {
  __mmask16 keep = 0;
  int64_t first = -1;  // the output index of the first position kept
  for (int64_t j = 0, oh = e0 / d.Wp, ow = e0 % d.Wp; j < kTile; ++j) {
    if (e0 + j < d.positions && ow < g.Q) {
      keep |= static_cast<__mmask16>(1u << j);
      if (first < 0) first = oh * g.Q + ow;
    }
    if (++ow == d.Wp) {
      ow = 0;
      ++oh;
    }
  }
  if (!keep) return;
  // Compressed in a register, then stored under a mask of the kept count: a compressing store
  // to memory is microcoded on AMD's Zen 4, many times slower.
  const __mmask16 stored = static_cast<__mmask16>((1u << __builtin_popcount(keep)) - 1);
  for (int64_t i = 0; i < kTile && k0 + i < g.K; ++i) {
    const __m512 sum = _mm512_add_ps(_mm512_loadu_ps(tile + i * kTile),
                                     _mm512_set1_ps(bias ? widen(bias[k0 + i]) : 0.0f));
    const __m256i rounded = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(sum));
    _mm256_mask_storeu_epi16(y + (k0 + i) * g.output_plane() + first, stored,
                             _mm256_maskz_compress_epi16(keep, rounded));
  }
}

// KR (1 or 2) k tiles x PR (1 or 2) position tiles of one image, from k tile kt and position
// tile pt: tiles 0-3 accumulate, 4-5 hold weights, 6-7 the shifted image.
template <int KR, int PR>
RG_AMX void direct_block(BFloat16* y, const uint32_t* xp, const uint16_t* a_tiles,
                         const BFloat16* bias, int64_t kt, int64_t pt, const ConvGeometry& g,
                         const DirectLayout& d) {
  const int64_t taps = g.R * g.S, a_size = kTile * 2 * d.block_pairs;
  const int a_stride = static_cast<int>(4 * d.block_pairs);  // bytes per weight tile row
  const int64_t b_stride = d.plane * 4;                      // bytes between channel pairs
  _tile_zero(0);
  if (PR == 2) _tile_zero(1);
  if (KR == 2) _tile_zero(2);
  if (KR == 2 && PR == 2) _tile_zero(3);
  for (int64_t tap = 0; tap < taps; ++tap) {
    const int64_t shift = tap / g.S * d.Wp + tap % g.S;
    for (int64_t block = 0; block < d.pair_blocks; ++block) {
      const uint16_t* a = a_tiles + ((kt * taps + tap) * d.pair_blocks + block) * a_size;
      const uint32_t* b = xp + block * d.block_pairs * d.plane + pt * kTile + shift;
      _tile_loadd(4, a, a_stride);
      if (KR == 2) _tile_loadd(5, a + taps * d.pair_blocks * a_size, a_stride);
      _tile_loadd(6, b, b_stride);
      if (PR == 2) _tile_loadd(7, b + kTile, b_stride);
      _tile_dpbf16ps(0, 4, 6);
      if (PR == 2) _tile_dpbf16ps(1, 4, 7);
      if (KR == 2) _tile_dpbf16ps(2, 5, 6);
      if (KR == 2 && PR == 2) _tile_dpbf16ps(3, 5, 7);
    }
  }
  alignas(64) float tile[kTile * kTile];
  constexpr int kStride = kTile * sizeof(float);
  const int64_t k0 = kt * kTile, e0 = pt * kTile;
  _tile_stored(0, tile, kStride);
  store_tile(y, tile, k0, e0, bias, g, d);
  if (PR == 2) {
    _tile_stored(1, tile, kStride);
    store_tile(y, tile, k0, e0 + kTile, bias, g, d);
  }
  if (KR == 2) {
    _tile_stored(2, tile, kStride);
    store_tile(y, tile, k0 + kTile, e0, bias, g, d);
  }
  if (KR == 2 && PR == 2) {
    _tile_stored(3, tile, kStride);
    store_tile(y, tile, k0 + kTile, e0 + kTile, bias, g, d);
  }
}

void configure(const DirectLayout& d) {
  TileShapes shapes;
  for (int t = 0; t < 4; ++t) {  // C: 16 channels x 16 f32 positions
    shapes.rows[t] = kTile;
    shapes.bytes_per_row[t] = kTile * sizeof(float);
  }
  for (int t = 4; t < 6; ++t) {  // A: 16 channels x the block's input channels
    shapes.rows[t] = kTile;
    shapes.bytes_per_row[t] = static_cast<uint16_t>(4 * d.block_pairs);
  }
  for (int t = 6; t < 8; ++t) {  // B: the block's channel pairs x 16 positions of 2 bf16
    shapes.rows[t] = static_cast<uint8_t>(d.block_pairs);
    shapes.bytes_per_row[t] = kTile * sizeof(uint32_t);
  }
  use_tile_shapes(shapes);
}

// The same 16 x 16 C tile on AVX512-BF16, in 16 vectors (one per output channel, its lanes the
// positions): per tap and channel pair, the shifted image's 16 positions are one load straight
// from xp and each channel's weight pair one broadcast, as in the GEMM's dot_tile.
RG_STORE void dot_direct_block(BFloat16* y, const uint32_t* xp, const uint16_t* a_tiles,
                               const BFloat16* bias, int64_t kt, int64_t pt, const ConvGeometry& g,
                               const DirectLayout& d) {
  const int64_t taps = g.R * g.S, row = 2 * d.block_pairs, a_size = kTile * row;
  __m512 acc[kTile];
#pragma GCC unroll 16
  for (int i = 0; i < kTile; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t tap = 0; tap < taps; ++tap) {
    const int64_t shift = tap / g.S * d.Wp + tap % g.S;
    for (int64_t block = 0; block < d.pair_blocks; ++block) {
      const uint16_t* a = a_tiles + ((kt * taps + tap) * d.pair_blocks + block) * a_size;
      const uint32_t* b = xp + block * d.block_pairs * d.plane + pt * kTile + shift;
      for (int64_t pair = 0; pair < d.block_pairs; ++pair, b += d.plane) {
        const __m512bh positions = (__m512bh)_mm512_loadu_si512(b);
#pragma GCC unroll 16
        for (int i = 0; i < kTile; ++i) {
          int32_t w_pair;
          std::memcpy(&w_pair, a + i * row + 2 * pair, sizeof w_pair);
          acc[i] = _mm512_dpbf16_ps(acc[i], (__m512bh)_mm512_set1_epi32(w_pair), positions);
        }
      }
    }
  }
  alignas(64) float tile[kTile * kTile];
#pragma GCC unroll 16
  for (int i = 0; i < kTile; ++i) _mm512_store_ps(tile + i * kTile, acc[i]);
  store_tile(y, tile, kt * kTile, pt * kTile, bias, g, d);
}

void direct_image(BFloat16* y, const uint32_t* xp, const uint16_t* a_tiles, const BFloat16* bias,
                  const ConvGeometry& g, const DirectLayout& d) {
  if (!cpu_has(Isa::amx)) {
    for (int64_t kt = 0; kt < d.k_tiles; ++kt)
      for (int64_t pt = 0; pt < d.position_tiles; ++pt)
        dot_direct_block(y, xp, a_tiles, bias, kt, pt, g, d);
    return;
  }
  configure(d);
  for (int64_t kt = 0; kt < d.k_tiles; kt += 2)
    for (int64_t pt = 0; pt < d.position_tiles; pt += 2) {
      const bool two_k = kt + 1 < d.k_tiles, two_p = pt + 1 < d.position_tiles;
      if (two_k && two_p)
        direct_block<2, 2>(y, xp, a_tiles, bias, kt, pt, g, d);
      else if (two_k)
        direct_block<2, 1>(y, xp, a_tiles, bias, kt, pt, g, d);
      else if (two_p)
        direct_block<1, 2>(y, xp, a_tiles, bias, kt, pt, g, d);
      else
        direct_block<1, 1>(y, xp, a_tiles, bias, kt, pt, g, d);
    }
}

}  // namespace

bool direct_conv_applies(const ConvGeometry& g) {
  if (g.stride_h != 1 || g.stride_w != 1 || g.R * g.S == 1) return false;
  // Of the positions computed, at least 3/5 outputs on AMX (7x7 images and larger with 3x3
  // kernels), 5/6 on AVX512-BF16 (14x14 and larger), where the GEMM's own kernel is closer to
  // the direct one (docs/measurements.md).
  const DirectLayout d = direct_layout(g);
  const int64_t computed = d.position_tiles * kTile;
  if (cpu_has(Isa::amx)) return 5 * g.output_plane() >= 3 * computed;
  return cpu_has(Isa::avx512_bf16) && __builtin_cpu_supports("avx512vbmi2") &&
         6 * g.output_plane() >= 5 * computed;
}

void direct_conv_forward(BFloat16* y, const BFloat16* x, const BFloat16* w, const BFloat16* bias,
                         int64_t N, const ConvGeometry& g) {
  const DirectLayout d = direct_layout(g);
  const std::vector<uint16_t> a_tiles = pack_weights(w, g, d);
  const int threads = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), N));
#pragma omp parallel num_threads(threads)
  {
    std::vector<uint32_t> xp(d.pair_blocks * d.block_pairs * d.plane);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      pack_image(xp.data(), x + n * g.image_size(), g, d);
      direct_image(y + n * g.output_image_size(), xp.data(), a_tiles.data(), bias, g, d);
    }
  }
}

}  // namespace ringgrad::kernels::cpu
