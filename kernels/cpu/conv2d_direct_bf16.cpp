// The direct bf16 convolution (kernels/cpu/conv2d_paths.h), no column matrix at all: on AMX for
// stride-1 convs with images large enough to fill tiles, on AVX512-BF16 for strides 1 and 2.
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
// On AMX a tile load reads those rows and one TDPBF16PS multiplies; every flat position is
// computed and the ow >= Q ones (they read across a row edge) are thrown away: Wp / Q more
// multiplies (30/28 at 28x28, 9/7 at 7x7), far fewer bytes moved. On AVX512-BF16 the same
// shifted reads of xp feed VDPBF16PS the other way round, output channels in the lanes and
// one position per broadcast, so that only outputs are computed (the row pieces below).
// Tested against the direct-loop reference (conv2d_reference.cpp) by the conv2d tests in bf16.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/amx_config.h"
#include "kernels/cpu/avx512_bw.h"
#include "kernels/cpu/conv2d_paths.h"
#include "kernels/cpu/cpu_features.h"

#define RG_AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bf16,avx512vbmi2,avx512vl")))
// Every CPU with AMX has these (Sapphire Rapids and later).
#define RG_STORE __attribute__((target("avx512f,avx512bf16,avx512vbmi2,avx512vl,avx512bw")))
// And every CPU with AVX512-BF16 these.
#define RG_AVX512_BF16 __attribute__((target("avx512f,avx512bf16,avx512vl,avx512bw")))

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
  // A last row piece on AVX512-BF16 reads up to 27 outputs, at stride 2 54 positions, past
  // the padded image.
  d.plane = std::max(last_read + 1, (g.H + 2 * g.pad_h) * d.Wp + 2 * 28);
  d.k_tiles = (g.K + kTile - 1) / kTile;
  return d;
}

// xp (pair blocks x block_pairs planes of `plane` values) of one image x (C, H, W): channels
// 2i and 2i+1 in the low and high half of each value, zero in the padding and past C. Only the
// image's own values are written: xp comes zeroed, and its zeros stay for every image the
// buffer then serves. Rows are joined 16 values at a time, the last piece masked (rows of 7 or
// 14 are mostly such pieces).
RG_AVX512_BF16 void pack_image(uint32_t* xp, const BFloat16* x, const ConvGeometry& g,
                               const DirectLayout& d) {
  for (int64_t pair = 0; 2 * pair < g.C; ++pair) {
    const uint16_t* low = bits(x) + 2 * pair * g.input_plane();
    const bool has_high = 2 * pair + 1 < g.C;
    uint32_t* out = xp + pair * d.plane + g.pad_h * d.Wp + g.pad_w;
    for (int64_t ih = 0; ih < g.H; ++ih)
      for (int64_t iw = 0; iw < g.W; iw += kTile) {
        const __mmask16 mask = first_lanes16(g.W - iw);
        const uint16_t* lo = low + ih * g.W + iw;
        _mm512_mask_storeu_epi32(out + ih * d.Wp + iw, mask,
                                 joined_pairs(lo, has_high ? lo + g.input_plane() : nullptr, mask));
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
// ends an output row), so each row of the tile is one compressing store.
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
  for (int64_t i = 0; i < kTile && k0 + i < g.K; ++i) {
    const __m512 sum = _mm512_add_ps(_mm512_loadu_ps(tile + i * kTile),
                                     _mm512_set1_ps(bias ? widen(bias[k0 + i]) : 0.0f));
    const __m256i rounded = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(sum));
    _mm256_mask_compressstoreu_epi16(y + (k0 + i) * g.output_plane() + first, keep, rounded);
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

// ---- AVX512-BF16: output rows, the output channels in the lanes -------------------------------
// A vector of 16 positions of xp would read every flat position, the columns thrown away too,
// and store its rows by compressing. Here the lanes are 16 output channels instead: wp[tap][pair]
// holds each output channel's weight pair for that tap and input channel pair, so that
//   acc[q] (16 output channels at position q) += broadcast xp[pair][shifted q] . wp[tap][pair]
// for NQ consecutive outputs q of one output row, KB vectors of output channels at once
// (NQ x KB accumulators of the 32 registers, NQ broadcasts and KB loads for NQ x KB dot
// products), and nothing is computed past the row but a last block's tail. The block is
// transposed to output-channel rows to be stored, the bias added as a vector first.

// (KB, NQ) blocks, the positions along a row times the vectors of 16 output channels at most 28.
struct RowBlock {
  int kb, nq;
};

// The block for this conv: the widest row piece that wastes the least of the row, then as many
// channel vectors as the registers and K allow.
RowBlock row_block(const ConvGeometry& g) {
  const int64_t k_vectors = (g.K + kTile - 1) / kTile;
  int nq = 28;
  for (const int candidate : {14, 7})
    if ((g.Q + candidate - 1) / candidate * candidate < (g.Q + nq - 1) / nq * nq) nq = candidate;
  int kb = 1;
  while (kb * 2 * nq <= 28 && k_vectors % (kb * 2) == 0) kb *= 2;
  return {kb, nq};
}

// wp (taps x pairs x k_vectors * 16 values of 32 bits): output channel k's weights for input
// channels 2i and 2i + 1 at each tap, low and high half; zero past K and C.
std::vector<uint32_t> pack_weight_pairs(const BFloat16* w, const ConvGeometry& g,
                                        const DirectLayout& d) {
  const int64_t taps = g.R * g.S, pairs = d.pair_blocks * d.block_pairs;
  const int64_t lanes = d.k_tiles * kTile;
  std::vector<uint32_t> wp(taps * pairs * lanes, 0u);
  for (int64_t k = 0; k < g.K; ++k)
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t tap = 0; tap < taps; ++tap)
        wp[(tap * pairs + c / 2) * lanes + k] |= uint32_t{bits(w)[(k * g.C + c) * taps + tap]}
                                                 << (16 * (c % 2));
  return wp;
}

// The outputs q0 .. q0 + NQ - 1 (those below Q stored) of output row p, channels from vector kv0.
template <int KB, int NQ, int SW>
RG_AVX512_BF16 void row_piece(BFloat16* y, const uint32_t* xp, const uint32_t* wp,
                              const BFloat16* bias, int64_t kv0, int64_t p, int64_t q0,
                              const ConvGeometry& g, const DirectLayout& d) {
  const int64_t taps = g.R * g.S, pairs = d.pair_blocks * d.block_pairs;
  const int64_t lanes = d.k_tiles * kTile;
  __m512 acc[NQ][KB];
#pragma GCC unroll 28
  for (int q = 0; q < NQ; ++q)
#pragma GCC unroll 4
    for (int v = 0; v < KB; ++v) acc[q][v] = _mm512_setzero_ps();
  for (int64_t tap = 0; tap < taps; ++tap) {
    const uint32_t* x = xp + (p * g.stride_h + tap / g.S) * d.Wp + q0 * SW + tap % g.S;
    const uint32_t* w = wp + tap * pairs * lanes + kv0 * kTile;
    for (int64_t pair = 0; pair < pairs; ++pair, x += d.plane, w += lanes) {
      __m512bh weights[KB];
#pragma GCC unroll 4
      for (int v = 0; v < KB; ++v) weights[v] = (__m512bh)_mm512_loadu_si512(w + v * kTile);
#pragma GCC unroll 28
      for (int q = 0; q < NQ; ++q) {
        const __m512bh inputs = (__m512bh)_mm512_set1_epi32(static_cast<int32_t>(x[q * SW]));
#pragma GCC unroll 4
        for (int v = 0; v < KB; ++v) acc[q][v] = _mm512_dpbf16_ps(acc[q][v], inputs, weights[v]);
      }
    }
  }
  const int64_t stored = std::min<int64_t>(NQ, g.Q - q0);
#pragma GCC unroll 4
  for (int v = 0; v < KB; ++v) {
    const int64_t k0 = (kv0 + v) * kTile;
    __m512 add = _mm512_setzero_ps();
    if (bias) {
      alignas(64) float b[kTile] = {};
      for (int64_t i = 0; i < kTile && k0 + i < g.K; ++i) b[i] = widen(bias[k0 + i]);
      add = _mm512_load_ps(b);
    }
#pragma GCC unroll 2
    for (int c0 = 0; c0 < NQ; c0 += kTile) {  // 16 positions at a time, transposed
      if (c0 >= stored) break;
      __m512i rows[kTile];
#pragma GCC unroll 16
      for (int j = 0; j < kTile; ++j)
        rows[j] = c0 + j < NQ ? _mm512_castps_si512(_mm512_add_ps(acc[c0 + j][v], add))
                              : _mm512_setzero_si512();
      transpose_16x16(rows);
      const __mmask16 keep = first_lanes16(stored - c0);
      for (int64_t i = 0; i < kTile && k0 + i < g.K; ++i)
        _mm256_mask_storeu_epi16(y + (k0 + i) * g.output_plane() + p * g.Q + q0 + c0, keep,
                                 (__m256i)_mm512_cvtneps_pbh(_mm512_castsi512_ps(rows[i])));
    }
  }
}

template <int KB, int NQ, int SW>
void rows_image(BFloat16* y, const uint32_t* xp, const uint32_t* wp, const BFloat16* bias,
                const ConvGeometry& g, const DirectLayout& d) {
  for (int64_t kv0 = 0; kv0 < d.k_tiles; kv0 += KB)
    for (int64_t p = 0; p < g.P; ++p)
      for (int64_t q0 = 0; q0 < g.Q; q0 += NQ)
        row_piece<KB, NQ, SW>(y, xp, wp, bias, kv0, p, q0, g, d);
}

template <int SW>
void rows_direct_image(BFloat16* y, const uint32_t* xp, const uint32_t* wp, const BFloat16* bias,
                       const ConvGeometry& g, const DirectLayout& d) {
  const RowBlock b = row_block(g);
  if (b.nq == 28) return rows_image<1, 28, SW>(y, xp, wp, bias, g, d);
  if (b.nq == 14)
    return b.kb == 2 ? rows_image<2, 14, SW>(y, xp, wp, bias, g, d)
                     : rows_image<1, 14, SW>(y, xp, wp, bias, g, d);
  if (b.kb == 4) return rows_image<4, 7, SW>(y, xp, wp, bias, g, d);
  if (b.kb == 2) return rows_image<2, 7, SW>(y, xp, wp, bias, g, d);
  rows_image<1, 7, SW>(y, xp, wp, bias, g, d);
}

void direct_image(BFloat16* y, const uint32_t* xp, const uint16_t* a_tiles, const BFloat16* bias,
                  const ConvGeometry& g, const DirectLayout& d) {
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
  // On AMX stride 1, a kernel larger than 1x1, and at least 3/5 of the positions computed
  // outputs (7x7 images and larger with 3x3 kernels).
  if (cpu_has(Isa::amx)) {
    if (g.stride_h != 1 || g.stride_w != 1 || g.R * g.S == 1) return false;
    const DirectLayout d = direct_layout(g);
    return 5 * g.output_plane() >= 3 * d.position_tiles * kTile;
  }
  // On AVX512-BF16 a stride of 1 or 2 along the rows (not a stride-1 1x1 conv: x is its column
  // matrix), at least 5/6 of a row's pieces outputs (so not 4x4 images), and 8 input channels
  // or more: with fewer (the stem) storing the rows costs more than multiplying.
  if (!cpu_has(Isa::avx512_bf16) || g.stride_w > 2 || g.is_pointwise()) return false;
  const RowBlock b = row_block(g);
  return g.C >= 8 && 6 * g.Q >= 5 * ((g.Q + b.nq - 1) / b.nq * b.nq);
}

void direct_conv_forward(BFloat16* y, const BFloat16* x, const BFloat16* w, const BFloat16* bias,
                         int64_t N, const ConvGeometry& g) {
  const DirectLayout d = direct_layout(g);
  const bool amx = cpu_has(Isa::amx);
  const std::vector<uint16_t> a_tiles = amx ? pack_weights(w, g, d) : std::vector<uint16_t>();
  const std::vector<uint32_t> wp = amx ? std::vector<uint32_t>() : pack_weight_pairs(w, g, d);
  const int threads = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), N));
#pragma omp parallel num_threads(threads)
  {
    std::vector<uint32_t> xp(d.pair_blocks * d.block_pairs * d.plane);  // zeroed once
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      pack_image(xp.data(), x + n * g.image_size(), g, d);
      BFloat16* out = y + n * g.output_image_size();
      if (amx)
        direct_image(out, xp.data(), a_tiles.data(), bias, g, d);
      else if (g.stride_w == 1)
        rows_direct_image<1>(out, xp.data(), wp.data(), bias, g, d);
      else
        rows_direct_image<2>(out, xp.data(), wp.data(), bias, g, d);
    }
  }
}

}  // namespace ringgrad::kernels::cpu
