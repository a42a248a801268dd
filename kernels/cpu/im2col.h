// im2col / col2im: the reshuffles that turn a convolution over a chunk of images into one GEMM.
// Private to kernels/cpu (used by conv2d.cpp); single-threaded, because conv2d gives each
// OpenMP thread its own chunk of images.
#pragma once
#include <algorithm>
#include <cstdint>

#include "core/half.h"
#include "kernels/conv_geometry.h"

namespace ringgrad::kernels::cpu {

// The outputs o in [begin, end) whose input index o*stride - pad + tap lies inside [0, extent),
// for one kernel tap along one axis; empty (begin == end) when the tap only ever sees padding.
struct ValidRange {
  int64_t begin, end;
  bool empty() const { return begin == end; }
};

inline ValidRange valid_outputs(int64_t tap, int64_t pad, int64_t stride, int64_t extent,
                                int64_t outputs) {
  const int64_t first = pad > tap ? (pad - tap + stride - 1) / stride : 0;
  const int64_t last_input = extent - 1 + pad - tap;  // o*stride <= last_input
  const int64_t end = last_input < 0 ? 0 : std::min(outputs, last_input / stride + 1);
  return {std::min(first, end), end};
}

// Column matrix of `images` consecutive images, (C*R*S) x (images*P*Q), row-major:
//   col[(c*R + r)*S + s][b*P*Q + p*Q + q] = x[b][c][p*stride_h - pad_h + r][q*stride_w - pad_w + s]
// and 0 where that index falls in the padding. y[b] = w (K x CRS) * col[:, b*PQ : (b+1)*PQ].
template <class T>
void im2col(T* col, const T* x, int64_t images, const ConvGeometry& g);

// Rows [first, last) of that column matrix only, into `rows` ((last - first) x columns): for
// the bf16 GEMM, which takes a few rows at a time into its tiles (bf16, and f32 for the tests).
template <class T>
void im2col_rows(T* rows, const T* x, int64_t first, int64_t last, int64_t images,
                 const ConvGeometry& g);

// The adjoint of im2col: dx (images, C, H, W) is overwritten with the sum, over every column
// entry, of dcol at the input pixel that entry was copied from.
template <class T>
void col2im(T* dx, const T* dcol, int64_t images, const ConvGeometry& g);

// The same by register permutes (im2col_permutes.cpp, Note [im2col by register permutes]), which
// im2col_rows and col2im take where they apply: planes of a few dozen pixels (bf16 im2col, f32
// col2im) and rows of a few dozen pixels (f32 and bf16 im2col).
bool small_plane_im2col_applies(const ConvGeometry& g);
void small_plane_im2col_rows(BFloat16* rows, const BFloat16* x, int64_t first, int64_t last,
                             int64_t images, const ConvGeometry& g);
bool small_plane_col2im_applies(const ConvGeometry& g);
void small_plane_col2im(float* dx, const float* dcol, int64_t images, const ConvGeometry& g);
template <class T>  // float or BFloat16
bool narrow_row_im2col_applies(const ConvGeometry& g);
void narrow_row_im2col_rows(float* rows, const float* x, int64_t first, int64_t last,
                            int64_t images, const ConvGeometry& g);
void narrow_row_im2col_rows(BFloat16* rows, const BFloat16* x, int64_t first, int64_t last,
                            int64_t images, const ConvGeometry& g);

}  // namespace ringgrad::kernels::cpu
