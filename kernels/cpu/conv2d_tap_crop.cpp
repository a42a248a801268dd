// The tap-crop path of the CPU convolution (kernels/cpu/conv2d_paths.h): kernel taps that only
// ever meet padding multiply zeros, so a conv whose kernel has such border taps is run with the
// kernel cropped to the taps that meet the image, and its weight gradient is zero outside them.
// The crop and its way back are also ops of their own (kernels::conv2d_crop_kernel, ops.h), for
// a caller that crops once for forward and backward.
#include <algorithm>

#include "core/tensor.h"
#include "kernels/cast_math.h"
#include "kernels/cpu/conv2d_paths.h"
#include "kernels/cpu/cpu_dispatch.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/im2col.h"

namespace ringgrad::kernels::cpu {

TapWindow active_taps(const ConvGeometry& g) {
  TapWindow t{g.R, 0, g.S, 0};
  for (int64_t r = 0; r < g.R; ++r) {
    if (valid_outputs(r, g.pad_h, g.stride_h, g.H, g.P).empty()) continue;
    t.r0 = std::min(t.r0, r);
    t.r1 = r + 1;
  }
  for (int64_t s = 0; s < g.S; ++s) {
    if (valid_outputs(s, g.pad_w, g.stride_w, g.W, g.Q).empty()) continue;
    t.s0 = std::min(t.s0, s);
    t.s1 = s + 1;
  }
  return t;
}

bool covers_kernel(const TapWindow& t, const ConvGeometry& g) {
  return t.r0 == 0 && t.r1 == g.R && t.s0 == 0 && t.s1 == g.S;
}

namespace {

ConvGeometry cropped(ConvGeometry g, const TapWindow& t) {
  g.R = t.r1 - t.r0;
  g.S = t.s1 - t.s0;
  g.pad_h -= t.r0;
  g.pad_w -= t.s0;
  return g;
}

// c (K, C, r1 - r0, s1 - s0) = w (K, C, R, S) inside the window, converted from W to C: `pairs`
// = K * C kernels of `rows` x `cols` taps. Parallel over (k, c), since ResNet-18's largest
// kernels (9 MB) are exactly the ones that get cropped. A window of one tap (a 3x3 kernel on a
// 1x1 image) is one strided copy, written apart so that it runs as one: the nested loops over a
// window of runtime size cost more than the memory they read.
template <class C, class W>
void crop_taps(C* c, const W* w, int64_t pairs, int64_t rows, int64_t cols, const TapWindow& t) {
  const int64_t R = t.r1 - t.r0, S = t.s1 - t.s0, taps = rows * cols;
  if (R == 1 && S == 1) {
    const W* tap = w + t.r0 * cols + t.s0;
#pragma omp parallel for schedule(static)
    for (int64_t kc = 0; kc < pairs; ++kc) c[kc] = convert_element<C>(tap[kc * taps]);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t kc = 0; kc < pairs; ++kc)
    for (int64_t r = 0; r < R; ++r)
      for (int64_t s = 0; s < S; ++s)
        c[(kc * R + r) * S + s] = convert_element<C>(w[(kc * rows + t.r0 + r) * cols + t.s0 + s]);
}

template <class T>
Tensor crop_kernel(const T* w, const ConvGeometry& g, const TapWindow& t) {
  Tensor crop = Tensor::empty({g.K, g.C, t.r1 - t.r0, t.s1 - t.s0}, DTypeOf<T>::value);
  crop_taps(crop.data<T>(), w, g.K * g.C, g.R, g.S, t);
  return crop;
}

// dw (K, C, R, S) from the cropped kernel's gradient: zero outside the window. Zeroed a block of
// (k, c) pairs at a time (one memset of a few KiB, where one per kernel of 9 taps was a call per
// 36 bytes), and the window's taps written into it while the block is in L1; a window of one
// tap again apart.
template <class G>
void uncrop_taps(G* dw, const G* dcrop, int64_t pairs, int64_t rows, int64_t cols,
                 const TapWindow& t) {
  const int64_t R = t.r1 - t.r0, S = t.s1 - t.s0, taps = rows * cols;
  constexpr int64_t kBlock = 256;
#pragma omp parallel for schedule(static)
  for (int64_t first = 0; first < pairs; first += kBlock) {
    const int64_t last = std::min(pairs, first + kBlock);
    std::fill(dw + first * taps, dw + last * taps, G{});
    if (R == 1 && S == 1) {
      G* tap = dw + t.r0 * cols + t.s0;
      for (int64_t kc = first; kc < last; ++kc) tap[kc * taps] = dcrop[kc];
      continue;
    }
    for (int64_t kc = first; kc < last; ++kc)
      for (int64_t r = 0; r < R; ++r)
        for (int64_t s = 0; s < S; ++s)
          dw[kc * taps + (t.r0 + r) * cols + t.s0 + s] = dcrop[(kc * R + r) * S + s];
  }
}

}  // namespace

template <class T>
void tap_cropped_forward(T* y, const T* x, const T* w, const T* bias, int64_t N,
                         const ConvGeometry& g, const TapWindow& taps) {
  if (taps.empty()) {
    for (int64_t i = 0; i < N * g.output_image_size(); ++i)
      y[i] = bias ? bias[i / g.output_plane() % g.K] : T{};
    return;
  }
  const Tensor crop = crop_kernel(w, g, taps);
  const ConvGeometry cg = cropped(g, taps);
  if constexpr (std::is_same_v<T, BFloat16>)
    if (dense_small_image_applies(cg))
      return dense_small_image_forward(y, x, crop.data<T>(), bias, N, cg);
  im2col_conv_forward(y, x, crop.data<T>(), bias, N, cg);
}

template <class T>
void tap_cropped_backward(T* dx, GemmResult<T>* dw, const T* dy, const T* x, const T* w, int64_t N,
                          const ConvGeometry& g, const TapWindow& taps) {
  using R = GemmResult<T>;
  if (taps.empty()) {
    if (dx) std::fill_n(dx, N * g.image_size(), T{});
    if (dw) std::fill_n(dw, g.K * g.patch_size(), R{});
    return;
  }
  const Tensor crop = crop_kernel(w, g, taps);
  Tensor dcrop = dw ? Tensor::empty(crop.shape(), DTypeOf<R>::value) : Tensor();
  const ConvGeometry cg = cropped(g, taps);
  R* dcrop_sums = dw ? dcrop.data<R>() : nullptr;
  [&] {
    if constexpr (std::is_same_v<T, BFloat16>)
      if (dense_small_image_applies(cg))
        return dense_small_image_backward(dx, dcrop_sums, dy, x, crop.data<T>(), N, cg);
    uncropped_backward(dx, dcrop_sums, dy, x, crop.data<T>(), N, cg);
  }();
  if (dw) uncrop_taps(dw, dcrop.data<R>(), g.K * g.C, g.R, g.S, taps);
}

#define RG_INSTANTIATE(T)                                                                          \
  template void tap_cropped_forward<T>(T*, const T*, const T*, const T*, int64_t,                  \
                                       const ConvGeometry&, const TapWindow&);                     \
  template void tap_cropped_backward<T>(T*, GemmResult<T>*, const T*, const T*, const T*, int64_t, \
                                        const ConvGeometry&, const TapWindow&);
RG_INSTANTIATE(float)
RG_INSTANTIATE(double)
RG_INSTANTIATE(BFloat16)
#undef RG_INSTANTIATE

TapWindow conv2d_tap_window(const Shape& x, const Shape& w, const Conv2dParams& p) {
  return active_taps(conv_geometry(x, w, p));
}

namespace {

// What both ops check: `full` a (K, C, R, S) CPU tensor, t a window inside its kernel, and `crop`
// the CPU tensor of t's cropped shape.
void check_crop(const Tensor& full, const Tensor& crop, const TapWindow& t, const char* op,
                const char* full_name, const char* crop_name) {
  check_cpu(full, op);
  check_cpu(crop, op);
  RG_CHECK_EQ(full.dim(), 4, op, ": ", full_name, " must be (K, C, R, S), got ",
              full.shape().str());
  RG_CHECK(!t.empty() && t.r0 >= 0 && t.r1 <= full.size(2) && t.s0 >= 0 && t.s1 <= full.size(3), op,
           ": the window is empty or outside the ", full.size(2), "x", full.size(3), " kernel");
  check_shape(crop, t.cropped(full.shape()), op, crop_name);
}

}  // namespace

void conv2d_crop_kernel(Tensor& crop, const Tensor& w, const TapWindow& t) {
  constexpr const char* op = "conv2d_crop_kernel";
  check_crop(w, crop, t, op, "w", "crop");
  dispatch_floating(w.dtype(), op, [&](auto w_tag) {
    using W = decltype(w_tag);
    dispatch_floating(crop.dtype(), op, [&](auto crop_tag) {
      using C = decltype(crop_tag);
      crop_taps(crop.data<C>(), w.data<W>(), w.size(0) * w.size(1), w.size(2), w.size(3), t);
    });
  });
}

void conv2d_uncrop_kernel_grad(Tensor& dw, const Tensor& dcrop, const TapWindow& t) {
  constexpr const char* op = "conv2d_uncrop_kernel_grad";
  check_crop(dw, dcrop, t, op, "dw", "dcrop");
  RG_CHECK(dcrop.dtype() == dw.dtype(), op, ": dcrop and dw dtypes differ");
  dispatch_floating(dw.dtype(), op, [&](auto tag) {
    using G = decltype(tag);
    uncrop_taps(dw.data<G>(), dcrop.data<G>(), dw.size(0) * dw.size(1), dw.size(2), dw.size(3), t);
  });
}

}  // namespace ringgrad::kernels::cpu
