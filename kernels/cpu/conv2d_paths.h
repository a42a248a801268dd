// The paths of the CPU convolution, private to kernels/cpu/conv2d*.cpp: raw pointers, N images,
// the sizes in a ConvGeometry, T float, double or (on CPUs with a bf16 GEMM) BFloat16, whose
// GEMMs accumulate into f32 buffers (GemmResult<T>) that are rounded once into the bf16 output.
// Weight gradients stay in GemmResult<T> (f32 for bf16): autocast's f32 master weights take them
// as they are, and conv2d_backward rounds them only for a caller who asks for a bf16 dw.
// conv2d.cpp's entry points pick one:
//   conv2d.cpp                   im2col + GEMM forward and backward, the textbook path, and the
//                                chunking and output moves the other paths reuse;
//   conv2d_tap_crop.cpp          kernels whose border taps only ever meet padding: cropped away
//                                first, the rest of the conv then runs uncropped;
//   conv2d_position_classes.cpp  f32/f64 on small images: outputs grouped by the taps they read,
//                                each group a conv without padding (Note [Position classes]);
//   conv2d_flipped_backward.cpp  stride 1: dx as the forward conv of dy with the flipped kernel;
//   conv2d_implicit_columns.cpp  f32 with our AVX-512 SGEMM, stride 1 keeping the image's size:
//                                the forward product reads x in place of the column matrix
//                                (Note [Implicit columns]);
//   conv2d_dense_small_image.cpp bf16 on images of no more pixels than kernel taps: the conv as
//                                one product with a dense weight matrix (Note [Dense small-image
//                                convolution]);
//   conv2d_direct.cpp            bf16 on AMX (stride 1) or AVX512-BF16, f32 on AVX-512 or AVX2:
//                                products straight from the padded image, no column matrix
//                                (Note [Direct convolution]);
//   conv2d_direct_weight_grad.cpp  its weight gradient on AVX512-BF16 (bf16) and AVX-512 or AVX2
//                                (f32) (Note [Direct weight gradient]);
//   conv2d_strided_input_grad.cpp  bf16 on AVX512-BF16 and f32 on AVX-512: dx of stride-2 convs
//                                straight from dy, each parity class of dx with its own taps
//                                (Note [Strided input gradient]);
//   conv2d_stem_weight_grad.cpp  the f32 weight gradient of convs with at most 4 input channels on
//                                AVX-512, output channels in the lanes (Note [Stem weight
//                                gradient]);
//   conv2d_winograd.cpp          f32 3x3 stride-1 convs with two vectors of channels or more
//                                (32 on AVX-512, 16 on AVX2, and on Zen 4 for the forward), forward
//                                and weight gradient: F(2x2, 3x3), 16 multiplies for 4 outputs
//                                instead of 36, or F(4x4, 3x3), 36 for 16 instead of 144 (Note
//                                [Winograd convolution]).
// Read conv2d_reference.cpp (the definition, plain loops) before any of them.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "core/tensor.h"
#include "kernels/cast_math.h"
#include "kernels/conv_geometry.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/im2col.h"

namespace ringgrad::kernels::cpu {

// ---- conv2d.cpp ----------------------------------------------------------------------------

// The operand checks of conv2d_forward and conv2d_backward for f32 and f64 (the reference's
// too): x and w defined, 4-D with matching channels, on the CPU, every operand of x's dtype and
// of the shape x and w imply (an undefined optional one is skipped). Return the geometry.
ConvGeometry checked_forward_geometry(const Tensor& y, const Tensor& x, const Tensor& w,
                                      const Tensor& bias, const Conv2dParams& p, const char* op);
ConvGeometry checked_backward_geometry(const Tensor& dx, const Tensor& dw, const Tensor& dbias,
                                       const Tensor& dy, const Tensor& x, const Tensor& w,
                                       const Conv2dParams& p, const char* op);

// How the batch is cut: chunks of `images` images (the last may be smaller), spread over
// `threads` threads in contiguous runs (OpenMP static schedule), every thread getting a chunk.
struct ChunkPlan {
  int64_t images;
  int64_t chunks;
  int threads;
};

ChunkPlan plan_chunks(int64_t N, const ConvGeometry& g, size_t element_size);

// One chunk's GEMM result is (K, images*P*Q); y is (images, K, P*Q). With one image they may
// be the same memory, and then only the bias is added; otherwise each (image, channel) plane
// is moved (and rounded, for bf16).
template <class T>
void store_output(T* y, const GemmResult<T>* result, const T* bias, int64_t images,
                  const ConvGeometry& g) {
  const int64_t plane = g.output_plane(), columns = images * plane;
  for (int64_t b = 0; b < images; ++b) {
    for (int64_t k = 0; k < g.K; ++k) {
      T* out = y + (b * g.K + k) * plane;
      const GemmResult<T>* in = result + k * columns + b * plane;
      const GemmResult<T> add = bias ? widen(bias[k]) : GemmResult<T>(0);
      if (static_cast<const void*>(in) == out && !bias) continue;
      for (int64_t i = 0; i < plane; ++i) out[i] = narrow<T>(in[i] + add);
    }
  }
}

// The inverse move, for the output gradient or for x: (images, channels, plane) ->
// (channels, images*plane), each channel's planes side by side as in a column matrix's rows.
template <class T>
void planes_by_channel(T* out, const T* in, int64_t images, int64_t channels, int64_t plane) {
  const int64_t columns = images * plane;
  for (int64_t b = 0; b < images; ++b)
    for (int64_t c = 0; c < channels; ++c)
      std::copy_n(in + (b * channels + c) * plane, plane, out + c * columns + b * plane);
}

// Weight gradients are sums of outer products, sum (m x n) += A (m x depth) B (n x depth)^T,
// with B the column matrix (the larger operand). The f32 and f64 GEMMs read both in place; the
// bf16 GEMM packs its B operand, where a transposed one costs a 16 x 16 transpose per tile, so
// in bf16 the sum is kept transposed, (n x m) += B A^T, and the column matrix becomes the A
// operand, which packs by plain copies.
template <class T>
constexpr bool kWeightSumTransposed = std::is_same_v<T, BFloat16>;

template <class T>
void accumulate_outer(int64_t m, int64_t n, int64_t depth, const T* a, const T* b,
                      GemmResult<T> beta, GemmResult<T>* sum) {
  if constexpr (kWeightSumTransposed<T>)
    gemm(Op::none, Op::transpose, n, m, depth, GemmResult<T>(1), b, depth, a, depth, beta, sum, m);
  else
    gemm(Op::none, Op::transpose, m, n, depth, GemmResult<T>(1), a, depth, b, depth, beta, sum, n);
}

// The same for bf16 with B the column matrix of `images` images of `source` under geometry
// `cg`, built 16 rows at a time straight into the GEMM's tiles: never stored whole.
inline void accumulate_outer_im2col(int64_t m, int64_t n, int64_t depth, const BFloat16* a,
                                    const BFloat16* source, int64_t images, const ConvGeometry& cg,
                                    float beta, float* sum) {
  const PackedBf16A col(n, depth, [&](int64_t first, int64_t last, BFloat16* out) {
    im2col_rows(out, source, first, last, images, cg);
  });
  gemm_bf16(col, Op::transpose, m, a, depth, beta, sum, m);
}

// Element (i, j) of such a sum.
template <class T>
int64_t outer_at(int64_t i, int64_t j, int64_t m, int64_t n) {
  return kWeightSumTransposed<T> ? j * m + i : i * n + j;
}

// dw (m x n) = the sum of `team` such sums, each m * n apart. An orphaned
// omp for: every thread of the caller's parallel region calls it. Transposed sums go through a
// tile that fits L1, so that reading the sums and writing dw both run along rows (a strided
// read per element cost a cache miss each: the largest dw is 2.4 M elements).
template <class T>
void sum_weight_partials(GemmResult<T>* dw, const GemmResult<T>* partials, int team, int64_t m,
                         int64_t n) {
  using R = GemmResult<T>;
  const int64_t size = m * n;
  if constexpr (!kWeightSumTransposed<T>) {
#pragma omp for schedule(static)
    for (int64_t i = 0; i < size; ++i) {
      R sum = 0;
      for (int t = 0; t < team; ++t) sum += partials[t * size + i];
      dw[i] = sum;
    }
  } else {
    constexpr int64_t kTile = 32;
#pragma omp for schedule(static)
    for (int64_t j0 = 0; j0 < n; j0 += kTile) {
      const int64_t rows = std::min(kTile, n - j0);
      for (int64_t i0 = 0; i0 < m; i0 += kTile) {
        const int64_t cols = std::min(kTile, m - i0);
        R tile[kTile][kTile];  // tile[j][i]: sums (j0 + j, i0 + i)
        for (int64_t j = 0; j < rows; ++j) {
          for (int64_t i = 0; i < cols; ++i) tile[j][i] = 0;
          for (int t = 0; t < team; ++t) {
            const R* row = partials + t * size + (j0 + j) * m + i0;
            for (int64_t i = 0; i < cols; ++i) tile[j][i] += row[i];
          }
        }
        for (int64_t i = 0; i < cols; ++i)
          for (int64_t j = 0; j < rows; ++j) dw[(i0 + i) * n + j0 + j] = tile[j][i];
      }
    }
  }
}

// y (N, K, P, Q) = conv(x, w) + bias (bias may be null), by im2col + GEMM.
template <class T>
void im2col_conv_forward(T* y, const T* x, const T* w, const T* bias, int64_t N,
                         const ConvGeometry& g);

// dx and dw (either may be null) of a conv every tap of which meets the image: dw by Winograd
// where winograd_weight_grad_applies (f32), by the stem weight gradient where
// stem_weight_grad_applies (f32), else directly where direct_weight_grad_applies; dx
// through the flipped conv where input_grad_is_conv, straight from dy where
// strided_input_grad_applies, alone by the position classes where they apply; else by im2col +
// GEMM + col2im.
template <class T>
void uncropped_backward(T* dx, GemmResult<T>* dw, const T* dy, const T* x, const T* w, int64_t N,
                        const ConvGeometry& g);

// ---- conv2d_tap_crop.cpp -------------------------------------------------------------------

// Kernel taps that only ever meet padding multiply zeros (kernels::TapWindow, ops.h): rows r
// whose every output row reads outside the image, likewise columns s. The padding cut by r0, s0
// never goes below 0 (tap r = pad_h reads row 0 at p = 0). ResNet-18's 3x3 pad-1 convs on 1x1
// images become 1x1 convs this way, 9x less work.
TapWindow active_taps(const ConvGeometry& g);
bool covers_kernel(const TapWindow& t, const ConvGeometry& g);

// The forward and backward of a conv with taps outside the window (!covers_kernel).
template <class T>
void tap_cropped_forward(T* y, const T* x, const T* w, const T* bias, int64_t N,
                         const ConvGeometry& g, const TapWindow& taps);
template <class T>
void tap_cropped_backward(T* dx, GemmResult<T>* dw, const T* dy, const T* x, const T* w, int64_t N,
                          const ConvGeometry& g, const TapWindow& taps);

// ---- conv2d_position_classes.cpp -----------------------------------------------------------

// Whether the position classes gain here (measured): the padding is a large share of im2col's
// products (small images), or the conv is strided, padded and has 32 channels or more. Never
// when some output reads only padding.
bool position_classes_apply(const ConvGeometry& g);

// y = conv(x, w) + bias (bias may be null); dx and dw (either may be null). T float or double.
template <class T>
void position_classes_forward(T* y, const T* x, const T* w, const T* bias, int64_t N,
                              const ConvGeometry& g);
template <class T>
void position_classes_backward(T* dx, T* dw, const T* dy, const T* x, const T* w, int64_t N,
                               const ConvGeometry& g);

// ---- conv2d_flipped_backward.cpp -----------------------------------------------------------

// Whether dx is the conv of dy with the flipped kernel and gains from it (stride 1, a kernel
// larger than 1x1, padding at most kernel - 1).
bool input_grad_is_conv(const ConvGeometry& g);

// dx (not null) and dw (may be null) when input_grad_is_conv.
template <class T>
void flipped_conv_backward(T* dx, GemmResult<T>* dw, const T* dy, const T* x, const T* w, int64_t N,
                           const ConvGeometry& g);

// ---- conv2d_implicit_columns.cpp ----------------------------------------------------------

// f32 with our AVX-512 SGEMM (avx512_sgemm_enabled), stride 1, P == H and Q == W, a kernel
// larger than 1x1.
bool implicit_columns_apply(const ConvGeometry& g);

void implicit_columns_forward(float* y, const float* x, const float* w, const float* bias,
                              int64_t N, const ConvGeometry& g);

// ---- conv2d_dense_small_image.cpp ---------------------------------------------------------

// Whether the dense path takes this conv: an image with no more pixels than the kernel has
// taps (so its one matrix product multiplies no more numbers than im2col's, and needs no column
// matrix), and a dense weight matrix of bounded size (Note [Dense small-image convolution]).
// A tap-cropped conv asks with its cropped geometry.
bool dense_small_image_applies(const ConvGeometry& g);

// y = conv(x, w) + bias (bias may be null); dx and dw (either may be null), dw as f32 sums.
void dense_small_image_forward(BFloat16* y, const BFloat16* x, const BFloat16* w,
                               const BFloat16* bias, int64_t N, const ConvGeometry& g);
void dense_small_image_backward(BFloat16* dx, float* dw, const BFloat16* dy, const BFloat16* x,
                                const BFloat16* w, int64_t N, const ConvGeometry& g);

// ---- conv2d_direct.cpp ---------------------------------------------------------------------

// The dtypes the direct paths take: f32 and bf16 (not f64).
template <class T>
constexpr bool kHasDirectPath = std::is_same_v<T, float> || std::is_same_v<T, BFloat16>;

// Whether the direct path takes this conv (T float or BFloat16): bf16 on a CPU with AMX, stride
// 1, a kernel larger than 1x1 and images wide enough that most tile positions are outputs; or
// bf16 on AVX512-BF16, f32 on AVX-512 or AVX2, for strides 1 and 2 on rows that split into
// pieces of 7, 14 or 28 with little left over.
template <class T>
bool direct_conv_applies(const ConvGeometry& g);

// y (N, K, P, Q) = conv(x, w) + bias (bias may be null) when direct_conv_applies<T>(g).
template <class T>
void direct_conv_forward(T* y, const T* x, const T* w, const T* bias, int64_t N,
                         const ConvGeometry& g);

// ---- conv2d_direct_weight_grad.cpp ---------------------------------------------------------

// Whether dw comes straight from dy and x (Note [Direct weight gradient]; T float or BFloat16):
// bf16 on AVX512-BF16 without AMX (whose tile GEMM is the faster there), f32 where its forward
// is direct, a kernel larger than 1x1, and at least 5/6 of its products real.
template <class T>
bool direct_weight_grad_applies(const ConvGeometry& g);

// dw (K, C, R, S) as f32 sums, when direct_weight_grad_applies<T>(g).
template <class T>
void direct_weight_grad(float* dw, const T* dy, const T* x, int64_t N, const ConvGeometry& g);

// ---- conv2d_strided_input_grad.cpp ---------------------------------------------------------

// Whether dx of this conv comes straight from dy (Note [Strided input gradient]; T float or
// BFloat16): bf16 on AVX512-BF16 without AMX, f32 on AVX-512 for kernels larger than 1x1; stride
// 2, a kernel at most 3 wide with padding of at most 1 along the rows, 8 input channels or more,
// images at least 7 wide.
template <class T>
bool strided_input_grad_applies(const ConvGeometry& g);

// dx (N, C, H, W) of such a conv.
template <class T>
void strided_input_grad(T* dx, const T* dy, const T* w, int64_t N, const ConvGeometry& g);

// ---- conv2d_stem_weight_grad.cpp -----------------------------------------------------------

// Whether the stem weight gradient takes this f32 conv: AVX-512, at most 4 input channels, a
// kernel 5 or 7 wide.
bool stem_weight_grad_applies(const ConvGeometry& g);

// dw (K, C, R, S) of such a conv.
void stem_weight_grad(float* dw, const float* dy, const float* x, int64_t N, const ConvGeometry& g);

// ---- conv2d_winograd.cpp -------------------------------------------------------------------

// Whether Winograd's F(2x2, 3x3) or F(4x4, 3x3) takes this f32 conv's forward (and so dx's): AVX2
// or better, 3x3, stride 1, padding of at most 2, two vectors of input and output channels or more
// (32 on AVX-512, 16 on AVX2 and where AVX-512 runs as two 256-bit halves), and for one of the
// tiles at least 4 of them an image and its transformed weights within 3/4 of L2.
bool winograd_applies(const ConvGeometry& g);
// Whether it takes the weight gradient: where it takes the forward, except at AVX2's width on an
// AVX-512 CPU (no faster there than the direct weight gradient).
bool winograd_weight_grad_applies(const ConvGeometry& g);

// y = conv(x, w) + bias (bias may be null), where winograd_applies.
void winograd_forward(float* y, const float* x, const float* w, const float* bias, int64_t N,
                      const ConvGeometry& g);
// dw (not null), where winograd_weight_grad_applies.
void winograd_weight_grad(float* dw, const float* dy, const float* x, int64_t N,
                          const ConvGeometry& g);

}  // namespace ringgrad::kernels::cpu
