// The tap-crop path of the CPU convolution (kernels/cpu/conv2d_paths.h): kernel taps that only
// ever meet padding multiply zeros, so a conv whose kernel has such border taps is run with the
// kernel cropped to the taps that meet the image, and its weight gradient is zero outside them.
#include <algorithm>

#include "core/tensor.h"
#include "kernels/cpu/conv2d_paths.h"
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

// w (K, C, R, S) cropped to the window: (K, C, r1 - r0, s1 - s0). Parallel over (k, c), since
// ResNet-18's largest kernels (9 MB) are exactly the ones that get cropped. A window of one tap
// (a 3x3 kernel on a 1x1 image) is one strided copy, written apart so that it runs as one: the
// nested loops over a window of runtime size cost more than the memory they read.
template <class T>
Tensor crop_kernel(const T* w, const ConvGeometry& g, const TapWindow& t) {
  const int64_t R = t.r1 - t.r0, S = t.s1 - t.s0, taps = g.R * g.S, pairs = g.K * g.C;
  Tensor crop = Tensor::empty({g.K, g.C, R, S}, DTypeOf<T>::value);
  T* c = crop.data<T>();
  if (R == 1 && S == 1) {
    const T* tap = w + t.r0 * g.S + t.s0;
#pragma omp parallel for schedule(static)
    for (int64_t kc = 0; kc < pairs; ++kc) c[kc] = tap[kc * taps];
    return crop;
  }
#pragma omp parallel for schedule(static)
  for (int64_t kc = 0; kc < pairs; ++kc)
    for (int64_t r = 0; r < R; ++r)
      for (int64_t s = 0; s < S; ++s)
        c[(kc * R + r) * S + s] = w[(kc * g.R + t.r0 + r) * g.S + t.s0 + s];
  return crop;
}

// dw (K, C, R, S) from the cropped kernel's gradient (both G: GemmResult): zero outside the
// window. Zeroed a block of (k, c) pairs at a time (one memset of a few KiB, where one per
// kernel of 9 taps was a call per 36 bytes), and the window's taps written into it while the
// block is in L1; a window of one tap again apart.
template <class G>
void uncrop_kernel_grad(G* dw, const G* dcrop, const ConvGeometry& g, const TapWindow& t) {
  const int64_t R = t.r1 - t.r0, S = t.s1 - t.s0, taps = g.R * g.S, pairs = g.K * g.C;
  constexpr int64_t kBlock = 256;
#pragma omp parallel for schedule(static)
  for (int64_t first = 0; first < pairs; first += kBlock) {
    const int64_t last = std::min(pairs, first + kBlock);
    std::fill(dw + first * taps, dw + last * taps, G{});
    if (R == 1 && S == 1) {
      G* tap = dw + t.r0 * g.S + t.s0;
      for (int64_t kc = first; kc < last; ++kc) tap[kc * taps] = dcrop[kc];
      continue;
    }
    for (int64_t kc = first; kc < last; ++kc)
      for (int64_t r = 0; r < R; ++r)
        for (int64_t s = 0; s < S; ++s)
          dw[kc * taps + (t.r0 + r) * g.S + t.s0 + s] = dcrop[(kc * R + r) * S + s];
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
  if (dw) uncrop_kernel_grad(dw, dcrop.data<R>(), g, taps);
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

}  // namespace ringgrad::kernels::cpu
