// The input gradient of a stride-2 convolution straight from dy (kernels/cpu/conv2d_paths.h): bf16
// on AVX512-BF16, f32 on AVX-512, the output channels of the forward in the sums and the input
// channels in the lanes.
//
// Note [Strided input gradient]
// dx[c][h][w] = sum over k, r, s of w[k][c][r][s] dy[k][(h + pad_h - r) / 2][(w + pad_w - s) / 2],
// over the taps where both divisions are exact and land inside dy. Which taps those are depends
// only on the parities of h and w: with a 3x3 pad-1 kernel an even h takes kernel row 1 alone
// (dy row h / 2), an odd h rows 0 and 2 (dy rows (h + 1) / 2 and (h - 1) / 2), and the same
// along w. Every dx position is thus a small stride-1 product over dy with the taps of its
// parity class (1, 2 or 4 of a 3x3 kernel's). im2col + GEMM computes the same products into a
// column matrix of 9 f32 rows a dy position, and col2im then adds them into dx with stride-2
// scatters; here each product goes into its sum in a register instead (resnet20's strided convs
// in bf16, forward + dx + dw at 1 thread: 2.8-3.0 -> 1.9-2.0 ms).
// Per image dy is packed in words (direct_lanes.h: one f32 value, or a bf16 pair of
// neighbouring channels k, k + 1, the layout VDPBF16PS takes), a zero column on each side, and
// the weights as words of the same channel pairs with 16 input channels c in the lanes, tap
// after tap. A row piece is 2 * NJ consecutive dx positions of one row (NJ even and NJ odd ones,
// from an even w0) x KB vectors of input channels: for each kernel row of the row's parity, each
// kernel column and each word, one load of the weights and one broadcast of dy per position of
// the column's parity. The sums sit in position order, so that one 16 x 16 transpose turns 16 of
// them into 16 consecutive dx values per channel. Tested against the direct-loop reference by
// the conv2d tests.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/conv2d_paths.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/direct_lanes.h"

namespace ringgrad::kernels::cpu {

namespace {

constexpr int64_t kLanes = 16;

// A kernel tap along one axis and the dy index it reads from output index i of its parity
// class: i + offset.
struct AxisTap {
  int64_t tap, offset;
};

// The taps along an axis (pad, `taps` wide) that output 2 i + parity reads: tap t with
// parity + pad - t even, at dy index i + (parity + pad - t) / 2.
std::vector<AxisTap> axis_taps(int64_t taps, int64_t pad, int64_t parity) {
  std::vector<AxisTap> list;
  for (int64_t t = 0; t < taps; ++t)
    if ((parity + pad - t) % 2 == 0) list.push_back({t, (parity + pad - t) / 2});
  return list;
}

// The packed sizes of one conv's strided input gradient.
struct StridedLayout {
  int64_t words;    // dy's channel words: K, or K / 2 rounded up for bf16 pairs
  int64_t Qp;       // a packed dy row: a zero column, Q values, a zero column
  int64_t plane;    // words per packed channel word: P rows and what a last piece reads past
  int64_t c_tiles;  // vectors of 16 input channels
  std::vector<AxisTap> rows[2], columns[2];  // taps by the parity of h, of w
};

template <class Lanes>
StridedLayout strided_layout(const ConvGeometry& g) {
  StridedLayout d;
  d.words = (g.K + Lanes::kValuesPerWord - 1) / Lanes::kValuesPerWord;
  d.Qp = g.Q + 2;
  // A last row piece computes up to 27 positions past the row, reading 14 dy columns past it.
  d.plane = g.P * d.Qp + 2 * 14;
  d.c_tiles = (g.C + kLanes - 1) / kLanes;
  for (int parity = 0; parity < 2; ++parity) {
    d.rows[parity] = axis_taps(g.R, g.pad_h, parity);
    d.columns[parity] = axis_taps(g.S, g.pad_w, parity);
  }
  return d;
}

// dyp (words planes) of one image's dy (K, P, Q): word k / kValuesPerWord of channel k at
// (p, q + 1). Only the values are written: dyp comes zeroed and its zero columns stay so.
void pack_dy(float* dyp, const float* dy, const ConvGeometry& g, const StridedLayout& d) {
  for (int64_t k = 0; k < g.K; ++k)
    for (int64_t p = 0; p < g.P; ++p)
      std::copy_n(dy + (k * g.P + p) * g.Q, g.Q, dyp + k * d.plane + p * d.Qp + 1);
}

RG_DIRECT void pack_dy(uint32_t* dyp, const BFloat16* dy, const ConvGeometry& g,
                       const StridedLayout& d) {
  const int64_t plane = g.output_plane();
  for (int64_t word = 0; word < d.words; ++word) {
    const BFloat16* first = dy + 2 * word * plane;
    const bool has_second = 2 * word + 1 < g.K;
    for (int64_t p = 0; p < g.P; ++p)
      for (int64_t q = 0; q < g.Q; q += kLanes) {
        const __mmask16 mask = first_lanes16(g.Q - q);
        const BFloat16* row = first + p * g.Q + q;
        _mm512_mask_storeu_epi32(dyp + word * d.plane + p * d.Qp + 1 + q, mask,
                                 Bf16Lanes::words(row, has_second ? row + plane : nullptr, mask));
      }
  }
}

// wp[tap][word][c]: input channel c's weights for tap (r, s) and the output channels of `word`,
// zero past C and K.
template <class Lanes>
std::vector<typename Lanes::Word> pack_weights(const typename Lanes::Value* w,
                                               const ConvGeometry& g, const StridedLayout& d) {
  constexpr int per = Lanes::kValuesPerWord;
  const int64_t taps = g.R * g.S, lanes = d.c_tiles * kLanes;
  std::vector<typename Lanes::Word> wp(taps * d.words * lanes, 0);
  for (int64_t k = 0; k < g.K; ++k)
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t tap = 0; tap < taps; ++tap)
        Lanes::place(wp[(tap * d.words + k / per) * lanes + c], w[(k * g.C + c) * taps + tap],
                     k % per);
  return wp;
}

// acc[2 j + Parity][v] += the products of kernel row r's taps of column parity Parity, which read
// dy row `x` (packed) at column j0 + j + offset, with input channel vectors cv0 + v.
template <class Lanes, int KB, int NJ, int Parity>
RG_DIRECT inline __attribute__((always_inline)) void add_columns(
    __m512 (&acc)[2 * NJ][KB], const typename Lanes::Word* x, const typename Lanes::Word* wp,
    int64_t r, int64_t cv0, const ConvGeometry& g, const StridedLayout& d) {
  const int64_t lanes = d.c_tiles * kLanes;
  for (const AxisTap& s : d.columns[Parity]) {
    const auto* w = wp + (r * g.S + s.tap) * d.words * lanes + cv0 * kLanes;
    multiply_words<Lanes, KB, NJ, 1, 2, Parity>(acc, x + s.offset, w, d.words, d.plane, lanes);
  }
}

// dx row h, positions w0 .. w0 + 2 NJ - 1 (those below W stored), input channels from vector cv0.
template <class Lanes, int KB, int NJ>
RG_DIRECT void row_piece(typename Lanes::Value* dx, const typename Lanes::Word* dyp,
                         const typename Lanes::Word* wp, int64_t cv0, int64_t h, int64_t w0,
                         const ConvGeometry& g, const StridedLayout& d) {
  __m512 acc[2 * NJ][KB];  // position w0 + i in acc[i]
#pragma GCC unroll 28
  for (int i = 0; i < 2 * NJ; ++i)
#pragma GCC unroll 2
    for (int v = 0; v < KB; ++v) acc[i][v] = _mm512_setzero_ps();
  for (const AxisTap& r : d.rows[h % 2]) {
    const int64_t p = h / 2 + r.offset;
    if (p < 0 || p >= g.P) continue;
    // Column j0 + j of dy is packed at j0 + j + 1.
    const auto* x = dyp + p * d.Qp + w0 / 2 + 1;
    add_columns<Lanes, KB, NJ, 0>(acc, x, wp, r.tap, cv0, g, d);
    add_columns<Lanes, KB, NJ, 1>(acc, x, wp, r.tap, cv0, g, d);
  }
  const int64_t stored = std::min<int64_t>(2 * NJ, g.W - w0);
#pragma GCC unroll 2
  for (int v = 0; v < KB; ++v) {
    const int64_t c0 = (cv0 + v) * kLanes;
#pragma GCC unroll 2
    for (int i0 = 0; i0 < 2 * NJ; i0 += kLanes) {  // 16 positions at a time, transposed
      if (i0 >= stored) break;
      __m512i rows[kLanes];
#pragma GCC unroll 16
      for (int i = 0; i < kLanes; ++i)
        rows[i] = i0 + i < 2 * NJ ? _mm512_castps_si512(acc[i0 + i][v]) : _mm512_setzero_si512();
      transpose_16x16(rows);
      const __mmask16 keep = first_lanes16(stored - i0);
      for (int64_t i = 0; i < kLanes && c0 + i < g.C; ++i)
        Lanes::store(dx + (c0 + i) * g.input_plane() + h * g.W + w0 + i0, keep,
                     _mm512_castsi512_ps(rows[i]));
    }
  }
}

template <class Lanes, int KB, int NJ>
void image_rows(typename Lanes::Value* dx, const typename Lanes::Word* dyp,
                const typename Lanes::Word* wp, const ConvGeometry& g, const StridedLayout& d) {
  for (int64_t cv0 = 0; cv0 < d.c_tiles; cv0 += KB)
    for (int64_t h = 0; h < g.H; ++h)
      for (int64_t w0 = 0; w0 < g.W; w0 += 2 * NJ)
        row_piece<Lanes, KB, NJ>(dx, dyp, wp, cv0, h, w0, g, d);
}

// Pieces of 28 positions (one vector of channels: 28 sums and the weights fill the 32 registers),
// or of 14 or 8 where a row is no wider (two vectors of channels where there are pairs of them).
template <class Lanes>
void image(typename Lanes::Value* dx, const typename Lanes::Word* dyp,
           const typename Lanes::Word* wp, const ConvGeometry& g, const StridedLayout& d) {
  if (g.W > 14) return image_rows<Lanes, 1, 14>(dx, dyp, wp, g, d);
  const bool pairs = d.c_tiles % 2 == 0;
  if (g.W > 8)
    return pairs ? image_rows<Lanes, 2, 7>(dx, dyp, wp, g, d)
                 : image_rows<Lanes, 1, 7>(dx, dyp, wp, g, d);
  return pairs ? image_rows<Lanes, 2, 4>(dx, dyp, wp, g, d)
               : image_rows<Lanes, 1, 4>(dx, dyp, wp, g, d);
}

}  // namespace

template <class T>
bool strided_input_grad_applies(const ConvGeometry& g) {
  // bf16 on AVX512-BF16 without AMX (whose tile GEMM takes the column matrix), f32 on AVX-512
  // for kernels larger than 1x1 (a 1x1 kernel's column matrix is only dy's size, and our SGEMM
  // and col2im were 5-9% faster there, measured); stride 2 both ways, a kernel at most 3 wide
  // with padding of at most 1 along the rows (a zero column each side of dy), 8 input channels or
  // more (fewer would leave the lanes mostly empty), and rows of at least 7 (shorter ones waste
  // most of a piece).
  if constexpr (std::is_same_v<T, BFloat16>) {
    if (!cpu_has(Isa::avx512_bf16) || cpu_has(Isa::amx)) return false;
  } else if (!cpu_has(Isa::avx512) || g.R * g.S == 1) {
    return false;
  }
  return g.stride_h == 2 && g.stride_w == 2 && g.S <= 3 && g.pad_w <= 1 && g.C >= 8 && g.W >= 7;
}

template <class T>
void strided_input_grad(T* dx, const T* dy, const T* w, int64_t N, const ConvGeometry& g) {
  using Lanes = LanesOf<T>;
  using Word = typename Lanes::Word;
  const StridedLayout d = strided_layout<Lanes>(g);
  const std::vector<Word> wp = pack_weights<Lanes>(w, g, d);
  const int threads = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), N));
#pragma omp parallel num_threads(threads)
  {
    std::vector<Word> dyp(d.words * d.plane);  // zeroed once
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      pack_dy(dyp.data(), dy + n * g.output_image_size(), g, d);
      image<Lanes>(dx + n * g.image_size(), dyp.data(), wp.data(), g, d);
    }
  }
}

#define RG_INSTANTIATE(T)                                           \
  template bool strided_input_grad_applies<T>(const ConvGeometry&); \
  template void strided_input_grad<T>(T*, const T*, const T*, int64_t, const ConvGeometry&);
RG_INSTANTIATE(float)
RG_INSTANTIATE(BFloat16)
#undef RG_INSTANTIATE

}  // namespace ringgrad::kernels::cpu
