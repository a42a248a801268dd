// The direct convolution (kernels/cpu/conv2d_paths.h), no column matrix at all: bf16 on AMX for
// stride-1 convs with images large enough to fill tiles; bf16 on AVX512-BF16 and f32 on AVX-512
// for strides 1 and 2, as output rows; f32 on AVX2 for the same convs, as pieces of 5 or 6 outputs.
//
// Note [Direct convolution]
// The im2col path copies every input value R*S times into the column matrix and then packs that
// for the GEMM: for a conv with few channels (resnet20's 16-64) that copying, not the
// multiplying, is the cost. A stride-1 convolution needs no copy. Pad each image with zeros to
// Hp x Wp; the output at flat position e = oh * Wp + ow then reads, for tap (r, s), the padded
// input at e + r * Wp + s: the same image shifted. Each image is packed once, channel by channel
// in 32-bit words (direct_lanes.h: one f32 value, or a bf16 pair of neighbouring channels, the
// layout a bf16 dot product takes), and every tap reads it in place.
//
// On AMX the B operand of tap (r, s) for 16 output positions is 16 rows (channel pairs) of 64
// contiguous bytes, read at the pair stride, and
//   y tile (16 channels x 16 positions) += sum over taps and channel blocks of
//                                          w tile (16 channels x 32 input channels) x xp tile.
// A tile load reads those rows and one TDPBF16PS multiplies; every flat position is computed and
// the ow >= Q ones (they read across a row edge) are thrown away: Wp / Q more multiplies (30/28
// at 28x28, 9/7 at 7x7), far fewer bytes moved.
//
// On AVX-512 the same shifted reads feed the multiplies the other way round, output channels in
// the lanes and one input word per broadcast, so that only outputs are computed (the row pieces
// below); f32 and bf16 differ only in the multiply-add and the store. Against im2col + a GEMM
// in f32 this saves the column matrix and the moves between (images, K, P*Q) and (K, columns),
// with an inner loop of the same shape as the GEMM's micro-kernel (loads of weights, broadcasts
// of inputs, a block of accumulators). AVX2 has half the lanes and half the registers, and its
// own piece shape (below the AVX-512 pieces).
// Tested against the direct-loop reference (conv2d_reference.cpp) by the conv2d tests in f32 and
// bf16.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/amx_config.h"
#include "kernels/cpu/avx2.h"
#include "kernels/cpu/avx512_bw.h"
#include "kernels/cpu/conv2d_paths.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/direct_lanes.h"

#define RG_AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bf16,avx512vbmi2,avx512vl")))
// Every CPU with AMX has these (Sapphire Rapids and later).
#define RG_STORE __attribute__((target("avx512f,avx512bf16,avx512vbmi2,avx512vl,avx512bw")))

namespace ringgrad::kernels::cpu {

namespace {

constexpr int64_t kTile = 16;  // channels or positions per C tile; channel pairs per B tile

// The packed sizes of one direct conv.
struct DirectLayout {
  int64_t words;        // channel words: C, or C / 2 rounded up for bf16 pairs
  int64_t block_pairs;  // channel pairs per B tile (AMX): 16, or all of them when fewer
  int64_t pair_blocks;  // B tiles per tap, the pairs padded with zero channels to fill them
  int64_t Wp;           // padded image width
  int64_t positions;    // flat output positions computed: P * Wp
  int64_t position_tiles;
  int64_t plane;  // words per packed channel word: the padded image and what is read past it
  int64_t k_tiles;
};

template <class Lanes>
DirectLayout direct_layout(const ConvGeometry& g) {
  DirectLayout d;
  d.words = (g.C + Lanes::kValuesPerWord - 1) / Lanes::kValuesPerWord;
  d.block_pairs = std::min(kTile, d.words);
  d.pair_blocks = (d.words + d.block_pairs - 1) / d.block_pairs;
  d.Wp = g.W + 2 * g.pad_w;
  d.positions = g.P * d.Wp;
  d.position_tiles = (d.positions + kTile - 1) / kTile;
  const int64_t last_read = d.position_tiles * kTile - 1 + (g.R - 1) * d.Wp + g.S - 1;
  // A last row piece reads up to 27 outputs, at stride 2 54 positions, past the padded image.
  d.plane = std::max(last_read + 1, (g.H + 2 * g.pad_h) * d.Wp + 2 * 28);
  d.k_tiles = (g.K + kTile - 1) / kTile;
  return d;
}

// xp (pair_blocks * block_pairs planes of `plane` words) of one image x (C, H, W): channel c
// in word c / kValuesPerWord, zero in the padding and past C. Only the image's own values are
// written: xp comes zeroed, and its zeros stay for every image the buffer then serves. In f32
// (any ISA) each row is copied as it is; bf16 rows are joined 16 values at a time, the last piece
// masked (rows of 7 or 14 are mostly such pieces).
void pack_image(float* xp, const float* x, const ConvGeometry& g, const DirectLayout& d) {
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t ih = 0; ih < g.H; ++ih)
      std::copy_n(x + c * g.input_plane() + ih * g.W, g.W,
                  xp + c * d.plane + (g.pad_h + ih) * d.Wp + g.pad_w);
}

RG_DIRECT void pack_image(uint32_t* xp, const BFloat16* x, const ConvGeometry& g,
                          const DirectLayout& d) {
  for (int64_t word = 0; word < d.words; ++word) {
    const BFloat16* first = x + 2 * word * g.input_plane();
    const bool has_second = 2 * word + 1 < g.C;
    uint32_t* out = xp + word * d.plane + g.pad_h * d.Wp + g.pad_w;
    for (int64_t ih = 0; ih < g.H; ++ih)
      for (int64_t iw = 0; iw < g.W; iw += kTile) {
        const __mmask16 mask = first_lanes16(g.W - iw);
        const BFloat16* row = first + ih * g.W + iw;
        _mm512_mask_storeu_epi32(
            out + ih * d.Wp + iw, mask,
            Bf16Lanes::words(row, has_second ? row + g.input_plane() : nullptr, mask));
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

// ---- AVX-512: output rows, the output channels in the lanes ------------------------------------
// A vector of 16 positions of xp would read every flat position, the columns thrown away too,
// and store its rows by compressing. Here the lanes are 16 output channels instead: wp[tap][word]
// holds each output channel's weights for that tap and input channel word, so that
//   acc[q] (16 output channels at position q) += broadcast xp[word][shifted q] * wp[tap][word]
// for NQ consecutive outputs q of one output row, KB vectors of output channels at once
// (NQ x KB accumulators of the 32 registers, NQ broadcasts and KB loads for NQ x KB
// multiply-adds), and nothing is computed past the row but a last block's tail. The block is
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

// wp: output channel k's weights for the input channels of each word at each tap, in groups of
// `group` output channels (16, or all k_vectors * 16 of them), each group's taps x words x group
// words together; zero past K and C. The AVX-512 pieces read up to 4 vectors of 16 at a tap and
// word together (group: all of them); AVX2's pieces read one group of 16, all its taps and words,
// as one contiguous run.
template <class Lanes>
std::vector<typename Lanes::Word> pack_weight_words(const typename Lanes::Value* w, int64_t group,
                                                    const ConvGeometry& g, const DirectLayout& d) {
  constexpr int per = Lanes::kValuesPerWord;
  const int64_t taps = g.R * g.S, groups = d.k_tiles * kTile / group;
  std::vector<typename Lanes::Word> wp(taps * d.words * groups * group);
  // In parallel: every call packs before any of its images can start. Each word is built whole
  // and stored in order (the weights are read at a stride instead).
#pragma omp parallel for schedule(static) collapse(2)
  for (int64_t kg = 0; kg < groups; ++kg)
    for (int64_t tap = 0; tap < taps; ++tap)
      for (int64_t word = 0; word < d.words; ++word) {
        auto* out = wp.data() + ((kg * taps + tap) * d.words + word) * group;
        for (int64_t lane = 0, k = kg * group; lane < group; ++lane, ++k) {
          typename Lanes::Word packed{};
          for (int64_t place = 0, c = word * per; place < per && c < g.C; ++place, ++c)
            if (k < g.K) Lanes::place(packed, w[(k * g.C + c) * taps + tap], place);
          out[lane] = packed;
        }
      }
  return wp;
}

// The outputs q0 .. q0 + NQ - 1 (those below Q stored) of output row p, channels from vector kv0.
template <class Lanes, int KB, int NQ, int SW>
RG_DIRECT void row_piece(typename Lanes::Value* y, const typename Lanes::Word* xp,
                         const typename Lanes::Word* wp, const typename Lanes::Value* bias,
                         int64_t kv0, int64_t p, int64_t q0, const ConvGeometry& g,
                         const DirectLayout& d) {
  const int64_t lanes = d.k_tiles * kTile;
  __m512 acc[NQ][KB];
#pragma GCC unroll 28
  for (int q = 0; q < NQ; ++q)
#pragma GCC unroll 4
    for (int v = 0; v < KB; ++v) acc[q][v] = _mm512_setzero_ps();
  const auto* w = wp + kv0 * kTile;  // tap after tap, word after word
  for (int64_t r = 0; r < g.R; ++r)
    for (int64_t s = 0; s < g.S; ++s, w += d.words * lanes) {
      const auto* x = xp + (p * g.stride_h + r) * d.Wp + q0 * SW + s;
      multiply_words<Lanes, KB, NQ, SW, 1, 0>(acc, x, w, d.words, d.plane, lanes);
    }
  // Read once: the stores below might alias g for the compiler, which then reloaded K and
  // recomputed the plane's size at every one of them.
  const int64_t plane = g.output_plane(), stored = std::min<int64_t>(NQ, g.Q - q0);
  typename Lanes::Value* const out = y + p * g.Q + q0;
#pragma GCC unroll 4
  for (int v = 0; v < KB; ++v) {
    const int64_t k0 = (kv0 + v) * kTile, channels = std::min<int64_t>(kTile, g.K - k0);
    __m512 add = _mm512_setzero_ps();
    if (bias) {
      alignas(64) float b[kTile] = {};
      for (int64_t i = 0; i < channels; ++i) b[i] = widen(bias[k0 + i]);
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
      typename Lanes::Value* at = out + k0 * plane + c0;
      for (int64_t i = 0; i < channels; ++i, at += plane)
        Lanes::store(at, keep, _mm512_castsi512_ps(rows[i]));
    }
  }
}

template <class Lanes, int KB, int NQ, int SW>
void rows_image(typename Lanes::Value* y, const typename Lanes::Word* xp,
                const typename Lanes::Word* wp, const typename Lanes::Value* bias,
                const ConvGeometry& g, const DirectLayout& d) {
  for (int64_t kv0 = 0; kv0 < d.k_tiles; kv0 += KB)
    for (int64_t p = 0; p < g.P; ++p)
      for (int64_t q0 = 0; q0 < g.Q; q0 += NQ)
        row_piece<Lanes, KB, NQ, SW>(y, xp, wp, bias, kv0, p, q0, g, d);
}

template <class Lanes, int SW>
void rows_direct_image(typename Lanes::Value* y, const typename Lanes::Word* xp,
                       const typename Lanes::Word* wp, const typename Lanes::Value* bias,
                       const ConvGeometry& g, const DirectLayout& d) {
  const RowBlock b = row_block(g);
  if (b.nq == 28) return rows_image<Lanes, 1, 28, SW>(y, xp, wp, bias, g, d);
  if (b.nq == 14)
    return b.kb == 2 ? rows_image<Lanes, 2, 14, SW>(y, xp, wp, bias, g, d)
                     : rows_image<Lanes, 1, 14, SW>(y, xp, wp, bias, g, d);
  if (b.kb == 4) return rows_image<Lanes, 4, 7, SW>(y, xp, wp, bias, g, d);
  if (b.kb == 2) return rows_image<Lanes, 2, 7, SW>(y, xp, wp, bias, g, d);
  rows_image<Lanes, 1, 7, SW>(y, xp, wp, bias, g, d);
}

// ---- AVX2: f32 pieces of 6 (or 5) outputs x 16 output channels ---------------------------------
// The same broadcast-and-multiply with 16 registers of 8 lanes: 6 outputs x 16 output channels
// (two halves of a packed weight vector) are 12 accumulators, and the two weight halves and the
// broadcast input fill 15 registers. 6 does not divide rows of 7 or 14, so the outputs are taken in
// their flat order (e = p * Q + q), a piece crossing from one row to the next where it must:
// each output's place in the packed plane is worked out once per piece, and every tap and
// channel reads at those places shifted. Only the last piece of an image has outputs past the
// end; they repeat the last output and are not stored. (Pieces of 7 outputs of one row, the
// AVX-512 shape cut in two, need 17 registers, and the compiler keeps a sum in memory; 14 outputs
// x 8 channels fit but broadcast one input per multiply-add, and measured slower.) Each half of
// the block is transposed to 8 output-channel rows of the piece's outputs to be stored, the bias
// added first. Weights are packed in groups of 16 output channels, each group's taps and channels
// together, so that one piece reads one contiguous run of them.
template <int kOutputs>
RG_AVX2_FMA void piece_avx2(float* y, const float* xp, const float* wp, const float* bias,
                            int64_t k0, int64_t e0, const ConvGeometry& g, const DirectLayout& d) {
  static_assert(kOutputs <= 6, "2 * kOutputs accumulators and 3 more registers: 16 at most");
  constexpr int kLanes = 8;
  const int64_t outputs = g.output_plane();
  int64_t at[kOutputs];  // where output e0 + i reads tap (0, 0) in a packed plane
  for (int64_t i = 0, p = e0 / g.Q, q = e0 % g.Q; i < kOutputs; ++i) {
    at[i] = p * g.stride_h * d.Wp + q * g.stride_w;  // past the outputs: the last one again
    if (e0 + i + 1 < outputs && ++q == g.Q) {
      q = 0;
      ++p;
    }
  }
  __m256 acc[kOutputs][2];
#pragma GCC unroll 6
  for (int i = 0; i < kOutputs; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  const float* w = wp + k0 * g.R * g.S * d.words;  // group k0 / 16
  for (int64_t r = 0; r < g.R; ++r)
    for (int64_t s = 0; s < g.S; ++s) {
      const float* x = xp + r * d.Wp + s;
      for (int64_t c = 0; c < d.words; ++c, x += d.plane, w += 2 * kLanes) {
        const __m256 low = _mm256_loadu_ps(w), high = _mm256_loadu_ps(w + kLanes);
#pragma GCC unroll 6
        for (int i = 0; i < kOutputs; ++i) {
          const __m256 input = _mm256_broadcast_ss(x + at[i]);
          acc[i][0] = _mm256_fmadd_ps(input, low, acc[i][0]);
          acc[i][1] = _mm256_fmadd_ps(input, high, acc[i][1]);
        }
      }
    }
  // A piece stores 8 outputs a channel, the last 2 of them wrong, which the next piece then
  // overwrites (pieces run in order, one thread an image); only the image's last piece (where 8
  // would run into the next channel) stores through a mask. Masked stores are slow on some CPUs.
  const bool whole = e0 + kLanes <= outputs;
  const __m256i keep = first_lanes8(std::min<int64_t>(kOutputs, outputs - e0));
  const int64_t K = g.K;  // read once: the stores below might alias g for the compiler
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const int64_t first = k0 + h * kLanes;
    if (first >= K) break;
    const __m256 add =
        bias ? _mm256_maskload_ps(bias + first, first_lanes8(K - first)) : _mm256_setzero_ps();
    __m256 rows[kLanes];
#pragma GCC unroll 8
    for (int i = 0; i < kLanes; ++i)
      rows[i] = i < kOutputs ? _mm256_add_ps(acc[i][h], add) : _mm256_setzero_ps();
    transpose_8x8(rows);
    float* out = y + first * outputs + e0;
#pragma GCC unroll 8
    for (int i = 0; i < kLanes; ++i)
      if (first + i < K) {
        if (whole)
          _mm256_storeu_ps(out + i * outputs, rows[i]);
        else
          _mm256_maskstore_ps(out + i * outputs, keep, rows[i]);
      }
  }
}

template <int kOutputs>
void pieces_image_avx2(float* y, const float* xp, const float* wp, const float* bias,
                       const ConvGeometry& g, const DirectLayout& d) {
  for (int64_t k0 = 0; k0 < g.K; k0 += 16)
    for (int64_t e0 = 0; e0 < g.output_plane(); e0 += kOutputs)
      piece_avx2<kOutputs>(y, xp, wp, bias, k0, e0, g, d);
}

// Pieces of 6, or of 5 where those compute clearly fewer outputs past the image's end (7x7
// images: 50 against 54).
void direct_image_avx2(float* y, const float* xp, const float* wp, const float* bias,
                       const ConvGeometry& g, const DirectLayout& d) {
  const int64_t outputs = g.output_plane();
  const int64_t by_5 = (outputs + 4) / 5 * 5, by_6 = (outputs + 5) / 6 * 6;
  if (25 * by_5 <= 24 * by_6) return pieces_image_avx2<5>(y, xp, wp, bias, g, d);
  pieces_image_avx2<6>(y, xp, wp, bias, g, d);
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

template <class T>
bool direct_conv_applies(const ConvGeometry& g) {
  // bf16 on AMX: stride 1, a kernel larger than 1x1, and at least 3/5 of the positions computed
  // outputs (7x7 images and larger with 3x3 kernels).
  if (std::is_same_v<T, BFloat16> && cpu_has(Isa::amx)) {
    if (g.stride_h != 1 || g.stride_w != 1 || g.R * g.S == 1) return false;
    const DirectLayout d = direct_layout<Bf16Lanes>(g);
    return 5 * g.output_plane() >= 3 * d.position_tiles * kTile;
  }
  // The row pieces, bf16 on AVX512-BF16 and f32 on AVX-512 (on AVX2 f32's pieces of 5 or 6 take the
  // same convs): a stride of 1 or 2 along the rows (not a stride-1 1x1 conv: x is its column
  // matrix), at least 5/6 of a row's pieces outputs (so not 4x4 images), and in bf16 or on AVX2
  // 8 input channels or more: with fewer (the stems) storing the outputs, rounded to bf16 or
  // transposed by halves, costs more than multiplying (measured; f32 on AVX-512 gains). On AVX2
  // also 8 output channels or more (a stem's dx: the lanes of its one channel would be empty).
  if (!cpu_has(std::is_same_v<T, BFloat16> ? Isa::avx512_bf16 : Isa::avx2)) return false;
  if (g.stride_w > 2 || g.is_pointwise()) return false;
  if (!cpu_has(Isa::avx512) && (g.C < 8 || g.K < 8)) return false;
  if (std::is_same_v<T, BFloat16> && g.C < 8) return false;
  const RowBlock b = row_block(g);
  return 6 * g.Q >= 5 * ((g.Q + b.nq - 1) / b.nq * b.nq);
}

template <class T>
void direct_conv_forward(T* y, const T* x, const T* w, const T* bias, int64_t N,
                         const ConvGeometry& g) {
  using Lanes = LanesOf<T>;
  using Word = typename Lanes::Word;
  const DirectLayout d = direct_layout<Lanes>(g);
  bool amx = false;
  std::vector<uint16_t> a_tiles;
  if constexpr (std::is_same_v<T, BFloat16>) {
    amx = cpu_has(Isa::amx);
    if (amx) a_tiles = pack_weights(w, g, d);
  }
  const bool avx512 = cpu_has(Isa::avx512);  // else f32 on AVX2
  const std::vector<Word> wp =
      amx ? std::vector<Word>()
          : pack_weight_words<Lanes>(w, avx512 ? d.k_tiles * kTile : 16, g, d);
  const int threads = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), N));
#pragma omp parallel num_threads(threads)
  {
    std::vector<Word> xp(d.pair_blocks * d.block_pairs * d.plane);  // zeroed once
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      pack_image(xp.data(), x + n * g.image_size(), g, d);
      T* out = y + n * g.output_image_size();
      if constexpr (std::is_same_v<T, BFloat16>)
        if (amx) {
          direct_image(out, xp.data(), a_tiles.data(), bias, g, d);
          continue;
        }
      if constexpr (std::is_same_v<T, float>)
        if (!avx512) {
          direct_image_avx2(out, xp.data(), wp.data(), bias, g, d);
          continue;
        }
      if (g.stride_w == 1)
        rows_direct_image<Lanes, 1>(out, xp.data(), wp.data(), bias, g, d);
      else
        rows_direct_image<Lanes, 2>(out, xp.data(), wp.data(), bias, g, d);
    }
  }
}

#define RG_INSTANTIATE(T)                                                         \
  template bool direct_conv_applies<T>(const ConvGeometry&);                      \
  template void direct_conv_forward<T>(T*, const T*, const T*, const T*, int64_t, \
                                       const ConvGeometry&);
RG_INSTANTIATE(float)
RG_INSTANTIATE(BFloat16)
#undef RG_INSTANTIATE

}  // namespace ringgrad::kernels::cpu
