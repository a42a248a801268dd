// im2col (see im2col.h) for float, double and bf16, col2im for float and double. Both walk the
// column matrix in memory order and split every output row into runs: runs that read the image
// (contiguous when stride_w == 1) and runs that fall in the padding.
#include "kernels/cpu/im2col.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "core/half.h"
#include "kernels/cpu/avx512_bw.h"

namespace ringgrad::kernels::cpu {

namespace {

// Calls image_run(col_offset, x_offset, count) for each run of `count` column entries that read
// x[x_offset + i*stride_w], and padding_run(col_offset, count) for each run of padding entries,
// over rows [first, last) of the column matrix. Offsets are into those rows (row `first` at 0)
// and into the chunk of `images` images.
template <class ImageRun, class PaddingRun>
void walk_columns(const ConvGeometry& g, int64_t images, int64_t first, int64_t last,
                  ImageRun&& image_run, PaddingRun&& padding_run) {
  const int64_t columns = images * g.output_plane();
  for (int64_t index = first; index < last; ++index) {
    const int64_t c = index / (g.R * g.S), r = index / g.S % g.R, s = index % g.S;
    const ValidRange ps = valid_outputs(r, g.pad_h, g.stride_h, g.H, g.P);
    const ValidRange qs = valid_outputs(s, g.pad_w, g.stride_w, g.W, g.Q);
    const int64_t row = (index - first) * columns;
    for (int64_t b = 0; b < images; ++b) {
      const int64_t out = row + b * g.output_plane();
      const int64_t plane = (b * g.C + c) * g.input_plane();
      padding_run(out, ps.begin * g.Q);
      for (int64_t p = ps.begin; p < ps.end; ++p) {
        const int64_t o = out + p * g.Q;
        const int64_t ih = p * g.stride_h - g.pad_h + r;
        const int64_t iw = qs.begin * g.stride_w - g.pad_w + s;
        padding_run(o, qs.begin);
        if (qs.end > qs.begin) image_run(o + qs.begin, plane + ih * g.W + iw, qs.end - qs.begin);
        padding_run(o + qs.end, g.Q - qs.end);
      }
      padding_run(out + ps.end * g.Q, (g.P - ps.end) * g.Q);
    }
  }
}

// Stride-1 convs that keep the width (Q == W: 3x3 pad 1 and the like, most of a ResNet) have a
// shortcut. Output (p, q) of tap (r, s) reads flat input index p*W + q + shift with the constant
// shift = (r - pad_h)*W + (s - pad_w), so each (tap, image) block of a column matrix row is one
// shifted copy of the plane, after which the entries that wrapped across a row edge (q outside
// the tap's valid range) are cleared, column by column: a 3x3 tap wraps at most one column, so
// clearing it row by row would cost a call per row. Small images then cost one copy per block.
template <class T>
void shifted_row(T* out_row, const T* x, int64_t index, int64_t images, const ConvGeometry& g) {
  const int64_t c = index / (g.R * g.S), r = index / g.S % g.R, s = index % g.S, Q = g.Q;
  const ValidRange ps = valid_outputs(r, g.pad_h, 1, g.H, g.P);
  const ValidRange qs = valid_outputs(s, g.pad_w, 1, g.W, Q);
  const int64_t shift = (r - g.pad_h) * g.W + s - g.pad_w;
  for (int64_t b = 0; b < images; ++b) {
    T* out = out_row + b * g.output_plane();
    const T* plane = x + (b * g.C + c) * g.input_plane();
    if (qs.empty() || ps.empty()) {
      std::fill_n(out, g.output_plane(), T{});
      continue;
    }
    std::fill_n(out, ps.begin * Q, T{});
    const int64_t begin = ps.begin * Q + qs.begin, end = (ps.end - 1) * Q + qs.end;
    std::memcpy(out + begin, plane + begin + shift, (end - begin) * sizeof(T));
    auto clear_column = [&](int64_t q) {
      for (int64_t p = ps.begin; p < ps.end; ++p) out[p * Q + q] = T{};
    };
    for (int64_t q = 0; q < qs.begin; ++q) clear_column(q);
    for (int64_t q = qs.end; q < Q; ++q) clear_column(q);
    std::fill_n(out + ps.end * Q, (g.P - ps.end) * Q, T{});
  }
}

// bf16 rows reach the walk only when too wide for the register permutes (im2col_permutes.cpp:
// more than 64 pixels, or an AVX-512 CPU without the 16-bit lanes): from kVectorRun entries on, a
// masked AVX-512 load and store per 32 entries (16 at stride 2, whose even lanes a permute
// gathers) instead of an element loop or a memcpy / memset call per run; shorter runs are faster
// element by element (measured with conv_bench --bf16 on 4x4 and 2x2 images, before the permutes).
// Only CPUs with a bf16 GEMM convolve in bf16, and every one of them has AVX-512BW.
constexpr int64_t kVectorRun = 8;

// out[i] = in[i * stride] for i < count, stride 1 or 2.
RG_AVX512_BW void copy_bf16_run(BFloat16* out, const BFloat16* in, int64_t count, int64_t stride) {
  alignas(64) static constexpr uint16_t kEvens[32] = {0,  2,  4,  6,  8,  10, 12, 14, 16, 18, 20,
                                                      22, 24, 26, 28, 30, 0,  0,  0,  0,  0,  0,
                                                      0,  0,  0,  0,  0,  0,  0,  0,  0,  0};
  const __m512i evens = _mm512_load_si512(kEvens);
  const int64_t step = stride == 1 ? 32 : 16;
  for (int64_t done = 0; done < count; done += step) {
    const int64_t n = std::min(step, count - done);
    const void* from = in + done * stride;
    const __m512i v = stride == 1
                          ? _mm512_maskz_loadu_epi16(first_lanes32(n), from)
                          : _mm512_permutexvar_epi16(
                                evens, _mm512_maskz_loadu_epi16(first_lanes32(2 * n - 1), from));
    _mm512_mask_storeu_epi16(out + done, first_lanes32(n), v);
  }
}

RG_AVX512_BW void zero_bf16_run(BFloat16* out, int64_t count) {
  for (int64_t done = 0; done < count; done += 32)
    _mm512_mask_storeu_epi16(out + done, first_lanes32(count - done), _mm512_setzero_si512());
}

}  // namespace

template <class T>
void im2col_rows(T* rows, const T* x, int64_t first, int64_t last, int64_t images,
                 const ConvGeometry& g) {
  if constexpr (std::is_same_v<T, BFloat16>)
    if (small_plane_im2col_applies(g))
      return small_plane_im2col_rows(rows, x, first, last, images, g);
  if (g.stride_h == 1 && g.stride_w == 1 && g.Q == g.W) {
    const int64_t columns = images * g.output_plane();
    for (int64_t index = first; index < last; ++index)
      shifted_row(rows + (index - first) * columns, x, index, images, g);
    return;
  }
  if constexpr (!std::is_same_v<T, double>)
    if (narrow_row_im2col_applies<T>(g))
      return narrow_row_im2col_rows(rows, x, first, last, images, g);
  const int64_t stride = g.stride_w;
  if constexpr (std::is_same_v<T, BFloat16>) {
    if (stride <= 2)
      return walk_columns(
          g, images, first, last,
          [&](int64_t dst, int64_t src, int64_t count) {
            if (count >= kVectorRun) return copy_bf16_run(rows + dst, x + src, count, stride);
            for (int64_t i = 0; i < count; ++i) rows[dst + i] = x[src + i * stride];
          },
          [&](int64_t dst, int64_t count) {
            if (count >= kVectorRun) return zero_bf16_run(rows + dst, count);
            for (int64_t i = 0; i < count; ++i) rows[dst + i] = BFloat16{};
          });
  }
  walk_columns(
      g, images, first, last,
      [&](int64_t dst, int64_t src, int64_t count) {
        if (stride == 1) {
          std::memcpy(rows + dst, x + src, count * sizeof(T));
        } else if (stride == 2) {  // a constant stride the compiler vectorises (ResNet's only)
          for (int64_t i = 0; i < count; ++i) rows[dst + i] = x[src + 2 * i];
        } else {
          for (int64_t i = 0; i < count; ++i) rows[dst + i] = x[src + i * stride];
        }
      },
      [&](int64_t dst, int64_t count) { std::fill_n(rows + dst, count, T{}); });
}

template <class T>
void im2col(T* col, const T* x, int64_t images, const ConvGeometry& g) {
  im2col_rows(col, x, 0, g.patch_size(), images, g);
}

template <class T>
void col2im(T* dx, const T* dcol, int64_t images, const ConvGeometry& g) {
  if constexpr (std::is_same_v<T, float>)
    if (small_plane_col2im_applies(g)) return small_plane_col2im(dx, dcol, images, g);
  std::fill_n(dx, images * g.image_size(), T{});
  const int64_t stride = g.stride_w;
  walk_columns(
      g, images, 0, g.patch_size(),
      [&](int64_t src, int64_t dst, int64_t count) {
        T* out = dx + dst;
        const T* in = dcol + src;
        if (stride == 1) {
          for (int64_t i = 0; i < count; ++i) out[i] += in[i];
        } else if (stride == 2) {
          for (int64_t i = 0; i < count; ++i) out[2 * i] += in[i];
        } else {
          for (int64_t i = 0; i < count; ++i) out[i * stride] += in[i];
        }
      },
      [](int64_t, int64_t) {});
}

template void im2col<float>(float*, const float*, int64_t, const ConvGeometry&);
template void im2col<double>(double*, const double*, int64_t, const ConvGeometry&);
template void im2col<BFloat16>(BFloat16*, const BFloat16*, int64_t, const ConvGeometry&);
template void im2col_rows<BFloat16>(BFloat16*, const BFloat16*, int64_t, int64_t, int64_t,
                                    const ConvGeometry&);
template void im2col_rows<float>(float*, const float*, int64_t, int64_t, int64_t,
                                 const ConvGeometry&);
template void col2im<float>(float*, const float*, int64_t, const ConvGeometry&);
template void col2im<double>(double*, const double*, int64_t, const ConvGeometry&);

}  // namespace ringgrad::kernels::cpu
