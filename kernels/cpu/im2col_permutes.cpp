// im2col and col2im by register permutes, where a plane or a row of the image fits in two
// AVX-512 registers (Note [im2col by register permutes]); im2col.cpp's run walk is the reference
// they are tested against (tests/kernels/test_im2col.cpp) and the path for everything else.
//
// Note [im2col by register permutes]
// On MNIST-sized images the run walk of im2col.cpp makes a call per run of 1 to 14 entries (one
// output row of one tap), and costs far more in loop and call overhead than the bytes it moves:
// in bf16, where the GEMMs run on AMX tiles, it took 43% of resnet18's stride-2 convs, and in f32
// a quarter of the 7x7 stride-2 stem, which builds its column matrix twice (forward, and for dw).
// But each tap reads its input through a fixed list of offsets, the same for every channel and
// image, and a small piece of input fits in two registers:
//   small planes (bf16, at most 63 pixels: 7x7, 4x4, 2x2): the offsets of every output, per tap,
//     tabulated once a call, padding pointing at lane 63, which the masked load leaves zero. Each
//     (channel, image) plane is loaded once, and each of its R*S rows of the column matrix is one
//     two-register permute (vpermt2w) and one masked store per 32 outputs;
//   narrow rows (rows of at most 32 f32 or 64 bf16 pixels: 28 wide and less): per tap column s,
//     the offsets within an input row of one output row, padding masked to zero. Each input row
//     is loaded once per (channel, tap row, image, output row) and gives the S taps' output
//     rows, one vpermt2ps (vpermt2w) each.
// col2im of small planes (f32) is the plane table read the other way: per tap, input pixel i
// takes the output that read it, if any, so each plane of dx is a sum of R*S permutes (vpermt2ps
// over the tap's output row of at most 32 entries) under a mask of the pixels the tap reached.
// The sum runs tap by tap in row order from zero, as the walk adds, so it is the walk's result
// bit for bit.
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/avx512_bw.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/im2col.h"

namespace ringgrad::kernels::cpu {

namespace {

constexpr int64_t kPixelLanes = 64;  // bf16 lanes of the two registers a plane is loaded into
constexpr int64_t kZeroLane = kPixelLanes - 1;
constexpr int64_t kOutputLanes = 32;  // bf16 outputs per permute; f32 outputs col2im permutes
constexpr int64_t kF32Lanes = 16;

// Input pixel of output (p, q) under tap (r, s), or -1 where that falls in the padding.
int64_t pixel_read(const ConvGeometry& g, int64_t r, int64_t s, int64_t p, int64_t q) {
  const int64_t h = p * g.stride_h - g.pad_h + r, w = q * g.stride_w - g.pad_w + s;
  return h < 0 || h >= g.H || w < 0 || w >= g.W ? -1 : h * g.W + w;
}

int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

}  // namespace

// The permutes of 16-bit lanes need AVX-512BW, which every CPU with AVX512-BF16 has (and only
// those convolve in bf16).
bool small_plane_im2col_applies(const ConvGeometry& g) {
  return g.input_plane() <= kZeroLane && cpu_has(Isa::avx512_bf16);
}

bool small_plane_col2im_applies(const ConvGeometry& g) {
  return g.input_plane() <= kPixelLanes && g.output_plane() <= kOutputLanes && cpu_has(Isa::avx512);
}

RG_AVX512_BW void small_plane_im2col_rows(BFloat16* rows, const BFloat16* x, int64_t first,
                                          int64_t last, int64_t images, const ConvGeometry& g) {
  const int64_t taps = g.R * g.S, outputs = g.output_plane(), columns = images * outputs;
  const int64_t stride = round_up(outputs, kOutputLanes), pixels = g.input_plane();
  std::vector<uint16_t> lane(taps * stride, kZeroLane);  // [tap][output]: which pixel lane
  for (int64_t t = 0; t < taps; ++t)
    for (int64_t p = 0; p < g.P; ++p)
      for (int64_t q = 0; q < g.Q; ++q) {
        const int64_t at = pixel_read(g, t / g.S, t % g.S, p, q);
        if (at >= 0) lane[t * stride + p * g.Q + q] = static_cast<uint16_t>(at);
      }
  const __mmask32 low = first_lanes32(pixels),
                  high = first_lanes32(std::max<int64_t>(pixels - 32, 0));
  for (int64_t c = first / taps; c * taps < last; ++c) {
    const int64_t t0 = std::max(first - c * taps, int64_t{0}), t1 = std::min(last - c * taps, taps);
    for (int64_t b = 0; b < images; ++b) {
      const BFloat16* plane = x + (b * g.C + c) * pixels;
      const __m512i lo = _mm512_maskz_loadu_epi16(low, plane);
      const __m512i hi = _mm512_maskz_loadu_epi16(high, plane + 32);
      for (int64_t t = t0; t < t1; ++t) {
        BFloat16* out = rows + (c * taps + t - first) * columns + b * outputs;
        for (int64_t o = 0; o < outputs; o += kOutputLanes) {
          const __m512i index = _mm512_loadu_si512(&lane[t * stride + o]);
          _mm512_mask_storeu_epi16(out + o, first_lanes32(outputs - o),
                                   _mm512_permutex2var_epi16(lo, index, hi));
        }
      }
    }
  }
}

namespace {

#define RG_ROW_LANES __attribute__((target("avx512f,avx512bw,avx512vl"), always_inline)) static

// The vector operations of the narrow-row im2col per element type: an input row in two registers
// of kLanes lanes, lanes picked by Index-wide offsets.
template <class T>
struct RowLanes;

template <>
struct RowLanes<float> {
  static constexpr int64_t kLanes = 16;
  using Mask = __mmask16;
  using Index = int32_t;
  using Vector = __m512;
  RG_ROW_LANES Mask first(int64_t n) { return first_lanes16(n); }
  RG_ROW_LANES Vector zero() { return _mm512_setzero_ps(); }
  RG_ROW_LANES Vector load(Mask m, const float* p) { return _mm512_maskz_loadu_ps(m, p); }
  RG_ROW_LANES Vector pick(Mask m, Vector lo, __m512i index, Vector hi) {
    return _mm512_maskz_permutex2var_ps(m, lo, index, hi);
  }
  RG_ROW_LANES void store(float* p, Mask m, Vector v) { _mm512_mask_storeu_ps(p, m, v); }
};

template <>
struct RowLanes<BFloat16> {
  static constexpr int64_t kLanes = 32;
  using Mask = __mmask32;
  using Index = uint16_t;
  using Vector = __m512i;
  RG_ROW_LANES Mask first(int64_t n) { return first_lanes32(n); }
  RG_ROW_LANES Vector zero() { return _mm512_setzero_si512(); }
  RG_ROW_LANES Vector load(Mask m, const BFloat16* p) { return _mm512_maskz_loadu_epi16(m, p); }
  RG_ROW_LANES Vector pick(Mask m, Vector lo, __m512i index, Vector hi) {
    return _mm512_maskz_permutex2var_epi16(m, lo, index, hi);
  }
  RG_ROW_LANES void store(BFloat16* p, Mask m, Vector v) { _mm512_mask_storeu_epi16(p, m, v); }
};

#undef RG_ROW_LANES

}  // namespace

template <class T>
bool narrow_row_im2col_applies(const ConvGeometry& g) {
  return g.W <= 2 * RowLanes<T>::kLanes && cpu_has(Isa::avx512);
}

namespace {

template <class T>
RG_AVX512_BW void narrow_rows(T* rows, const T* x, int64_t first, int64_t last, int64_t images,
                              const ConvGeometry& g) {
  using V = RowLanes<T>;
  constexpr int64_t kLanes = V::kLanes;
  const int64_t outputs = g.output_plane(), columns = images * outputs;
  const int64_t chunks = round_up(g.Q, kLanes) / kLanes;
  // [s][chunk]: where in the input row output q of tap column s reads, and whether it is inside.
  std::vector<typename V::Index> offset(g.S * chunks * kLanes, 0);
  std::vector<typename V::Mask> inside(g.S * chunks, 0);
  for (int64_t s = 0; s < g.S; ++s)
    for (int64_t q = 0; q < g.Q; ++q) {
      const int64_t w = q * g.stride_w - g.pad_w + s;
      if (w < 0 || w >= g.W) continue;
      offset[s * chunks * kLanes + q] = static_cast<typename V::Index>(w);
      inside[s * chunks + q / kLanes] |= typename V::Mask{1} << (q % kLanes);
    }
  const typename V::Mask low = V::first(g.W), high = V::first(std::max<int64_t>(g.W - kLanes, 0));
  // Rows index = (c * R + r) * S + s: one (c, r) at a time, its taps s in [s0, s1).
  for (int64_t cr = first / g.S; cr * g.S < last; ++cr) {
    const int64_t c = cr / g.R, r = cr % g.R;
    const int64_t s0 = std::max(first - cr * g.S, int64_t{0}), s1 = std::min(last - cr * g.S, g.S);
    for (int64_t b = 0; b < images; ++b) {
      const T* plane = x + (b * g.C + c) * g.input_plane();
      for (int64_t p = 0; p < g.P; ++p) {
        const int64_t h = p * g.stride_h - g.pad_h + r;
        const bool in_image = h >= 0 && h < g.H;
        const typename V::Vector lo = in_image ? V::load(low, plane + h * g.W) : V::zero();
        const typename V::Vector hi =
            in_image ? V::load(high, plane + h * g.W + kLanes) : V::zero();
        for (int64_t s = s0; s < s1; ++s) {
          T* out = rows + (cr * g.S + s - first) * columns + b * outputs + p * g.Q;
          for (int64_t k = 0; k < chunks; ++k) {
            const __m512i from = _mm512_loadu_si512(&offset[(s * chunks + k) * kLanes]);
            V::store(out + k * kLanes, V::first(g.Q - k * kLanes),
                     V::pick(inside[s * chunks + k], lo, from, hi));
          }
        }
      }
    }
  }
}

}  // namespace

template bool narrow_row_im2col_applies<float>(const ConvGeometry&);
template bool narrow_row_im2col_applies<BFloat16>(const ConvGeometry&);

void narrow_row_im2col_rows(float* rows, const float* x, int64_t first, int64_t last,
                            int64_t images, const ConvGeometry& g) {
  narrow_rows(rows, x, first, last, images, g);
}

void narrow_row_im2col_rows(BFloat16* rows, const BFloat16* x, int64_t first, int64_t last,
                            int64_t images, const ConvGeometry& g) {
  narrow_rows(rows, x, first, last, images, g);
}

__attribute__((target("avx512f"))) void small_plane_col2im(float* dx, const float* dcol,
                                                           int64_t images, const ConvGeometry& g) {
  const int64_t taps = g.R * g.S, outputs = g.output_plane(), columns = images * outputs;
  const int64_t pixels = g.input_plane(), chunks = round_up(pixels, kF32Lanes) / kF32Lanes;
  // [tap][pixel]: the output that read the pixel through the tap, and whether one did.
  std::vector<int32_t> source(taps * chunks * kF32Lanes, 0);
  std::vector<__mmask16> reached(taps * chunks, 0);
  for (int64_t t = 0; t < taps; ++t)
    for (int64_t p = 0; p < g.P; ++p)
      for (int64_t q = 0; q < g.Q; ++q) {
        const int64_t at = pixel_read(g, t / g.S, t % g.S, p, q);
        if (at < 0) continue;
        source[t * chunks * kF32Lanes + at] = static_cast<int32_t>(p * g.Q + q);
        reached[t * chunks + at / kF32Lanes] |= static_cast<__mmask16>(1u << (at % kF32Lanes));
      }
  const __mmask16 low = first_lanes16(outputs),
                  high = first_lanes16(std::max<int64_t>(outputs - 16, 0));
  for (int64_t b = 0; b < images; ++b) {
    for (int64_t c = 0; c < g.C; ++c) {
      __m512 sum[kPixelLanes / kF32Lanes];
      for (int64_t k = 0; k < chunks; ++k) sum[k] = _mm512_setzero_ps();
      for (int64_t t = 0; t < taps; ++t) {
        const float* row = dcol + (c * taps + t) * columns + b * outputs;
        const __m512 lo = _mm512_maskz_loadu_ps(low, row);
        const __m512 hi = _mm512_maskz_loadu_ps(high, row + 16);
        for (int64_t k = 0; k < chunks; ++k) {
          const __m512i from = _mm512_loadu_si512(&source[(t * chunks + k) * kF32Lanes]);
          sum[k] = _mm512_mask_add_ps(sum[k], reached[t * chunks + k], sum[k],
                                      _mm512_permutex2var_ps(lo, from, hi));
        }
      }
      float* plane = dx + (b * g.C + c) * pixels;
      for (int64_t k = 0; k < chunks; ++k)
        _mm512_mask_storeu_ps(plane + k * kF32Lanes, first_lanes16(pixels - k * kF32Lanes), sum[k]);
    }
  }
}

}  // namespace ringgrad::kernels::cpu
