// 2-D convolution on the CPU (f32, f64, bf16 with f32 sums where the CPU has a bf16 GEMM; f16,
// and bf16 elsewhere, through f32): the entry points, which pick
// a path (kernels/cpu/conv2d_paths.h), and the textbook path, im2col + GEMM forward and backward:
//   y (K, columns) = w (K, CRS) col(x) (CRS, columns)  per chunk of images, + bias
//   dw (K, CRS) += dY col(x)^T;  dcol = w^T dY;  dx = col2im(dcol);  dbias = sums of dy
// Work split: each OpenMP thread owns whole images, taken in chunks that become one GEMM each,
// so forward outputs and dx never overlap between threads and need no locks; dw is summed from
// one partial per thread. BLAS runs single-threaded inside the region (Note [BLAS threads]).
#include <omp.h>

#include <algorithm>
#include <memory>

#include "kernels/cpu/conv2d_paths.h"
#include "kernels/cpu/cpu_dispatch.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/half_via_f32.h"
#include "kernels/cpu/im2col.h"

namespace ringgrad::kernels::cpu {

// One GEMM per image is enough for large images, but a 7x7 image gives only 49 columns and a
// 1x1 image one (a matrix-vector product), where GEMM runs far below peak. So chunks batch
// images up to kTargetColumns columns, capped so that the column buffer of each thread stays
// cache-sized, then evened out so that every thread gets the same number of chunks.
ChunkPlan plan_chunks(int64_t N, const ConvGeometry& g, size_t element_size) {
  constexpr int64_t kTargetColumns = 512;
  constexpr int64_t kColumnBufferBytes = 1 << 20;
  const int64_t threads = std::min<int64_t>(omp_get_max_threads(), N);
  const int64_t wanted = (kTargetColumns + g.output_plane() - 1) / g.output_plane();
  const int64_t fitting =
      kColumnBufferBytes / (static_cast<int64_t>(element_size) * g.patch_size() * g.output_plane());
  const int64_t images = std::max<int64_t>(1, std::min(wanted, fitting));
  const int64_t rounds = ((N + images - 1) / images + threads - 1) / threads;  // chunks per thread
  const int64_t balanced = (N + rounds * threads - 1) / (rounds * threads);
  const int64_t chunks = (N + balanced - 1) / balanced;
  return {balanced, chunks, static_cast<int>(std::min(threads, chunks))};
}

// y (N, K, P, Q) = w (K, CRS) * col(x) per chunk, + bias.
template <class T>
void im2col_conv_forward(T* y, const T* x, const T* w, const T* bias, int64_t N,
                         const ConvGeometry& g) {
  using R = GemmResult<T>;
  const ChunkPlan plan = plan_chunks(N, g, sizeof(T));
  const bool x_is_col = g.is_pointwise() && plan.images == 1;
  const bool gemm_into_y = plan.images == 1 && std::is_same_v<T, R>;
  const int64_t columns = plan.images * g.output_plane();
  const int64_t col_size = x_is_col ? 0 : g.patch_size() * columns;
  const int64_t result_size = gemm_into_y ? 0 : g.K * columns;
  Tensor col_space = Tensor::empty({plan.threads * col_size}, DTypeOf<T>::value);
  Tensor result_space = Tensor::empty({plan.threads * result_size}, DTypeOf<R>::value);
  const GemmA<T> weights(Op::none, w, g.patch_size(), g.K, g.patch_size());
#pragma omp parallel num_threads(plan.threads)
  {
    T* col = col_space.data<T>() + omp_get_thread_num() * col_size;
    R* result = result_space.data<R>() + omp_get_thread_num() * result_size;
#pragma omp for schedule(static)
    for (int64_t chunk = 0; chunk < plan.chunks; ++chunk) {
      const int64_t first = chunk * plan.images, images = std::min(plan.images, N - first);
      const int64_t cols = images * g.output_plane();
      const T* xc = x + first * g.image_size();
      T* yc = y + first * g.output_image_size();
      if (!x_is_col) im2col(col, xc, images, g);
      R* out = result;
      if constexpr (std::is_same_v<T, R>)
        if (gemm_into_y) out = yc;
      weights.multiply(Op::none, cols, x_is_col ? xc : col, cols, R(0), out, cols);
      store_output(yc, out, bias, images, g);
    }
  }
}

namespace {

// dbias[k] = sum over n, p, q of dy[n][k][p][q], accumulated in double.
template <class T>
void bias_grad(T* dbias, const T* dy, int64_t N, const ConvGeometry& g) {
  const int64_t plane = g.output_plane();
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < g.K; ++k) {
    double sum = 0;
    for (int64_t n = 0; n < N; ++n) {
      const T* d = dy + (n * g.K + k) * plane;
      for (int64_t i = 0; i < plane; ++i) sum += widen(d[i]);
    }
    dbias[k] = narrow<T>(static_cast<GemmResult<T>>(sum));
  }
}

// Per chunk, with dY the chunk's output gradient as (K, columns):
//   dw (K, CRS)        += dY col(x)^T       (one partial per thread, summed last;
//                                            accumulate_outer)
//   dcol (CRS, columns) = w^T dY,  dx = col2im(dcol)
// For bf16, dcol and the col2im sums are f32 (R), rounded once into dx.
template <class T>
void im2col_conv_backward(T* dx, GemmResult<T>* dw, const T* dy, const T* x, const T* w, int64_t N,
                          const ConvGeometry& g) {
  using R = GemmResult<T>;
  constexpr bool kRounded = !std::is_same_v<T, R>;
  const ChunkPlan plan = plan_chunks(N, g, sizeof(T));
  const bool x_is_col = g.is_pointwise() && plan.images == 1;  // and dx is dcol
  const bool dy_is_batched = plan.images == 1;
  const int64_t columns = plan.images * g.output_plane();
  const int64_t col_size = x_is_col ? 0 : g.patch_size() * columns;
  const int64_t dy_size = dy_is_batched ? 0 : g.K * columns;
  const int64_t dcol_size = dx && (kRounded || !x_is_col) ? g.patch_size() * columns : 0;
  const int64_t dx_size = dx && kRounded ? plan.images * g.image_size() : 0;
  const int64_t dw_size = dw ? g.K * g.patch_size() : 0;
  Tensor t_space = Tensor::empty({plan.threads * (col_size + dy_size)}, DTypeOf<T>::value);
  Tensor r_space =
      Tensor::empty({plan.threads * (dcol_size + dx_size + dw_size)}, DTypeOf<R>::value);
  std::unique_ptr<GemmA<T>> weights_t;  // w^T, for dcol
  if (dx)
    weights_t = std::make_unique<GemmA<T>>(Op::transpose, w, g.patch_size(), g.patch_size(), g.K);
#pragma omp parallel num_threads(plan.threads)
  {
    const int thread = omp_get_thread_num();
    T* col = t_space.data<T>() + thread * (col_size + dy_size);
    T* dy_batched = col + col_size;
    R* dcol_space = r_space.data<R>() + thread * (dcol_size + dx_size);
    R* dx_sums = dcol_space + dcol_size;
    R* dw_sum = r_space.data<R>() + plan.threads * (dcol_size + dx_size) + thread * dw_size;
    R beta = 0;  // the first chunk of each thread overwrites its dw_sum
#pragma omp for schedule(static)
    for (int64_t chunk = 0; chunk < plan.chunks; ++chunk) {
      const int64_t first = chunk * plan.images, images = std::min(plan.images, N - first);
      const int64_t cols = images * g.output_plane();
      const T* dyc = dy + first * g.output_image_size();
      if (!dy_is_batched) {
        planes_by_channel(dy_batched, dyc, images, g.K, g.output_plane());
        dyc = dy_batched;
      }
      const T* xc = x + first * g.image_size();
      if (dw) {
        if constexpr (kWeightSumTransposed<T>) {
          accumulate_outer_im2col(g.K, g.patch_size(), cols, dyc, xc, images, g, beta, dw_sum);
        } else {
          if (!x_is_col) im2col(col, xc, images, g);
          accumulate_outer(g.K, g.patch_size(), cols, dyc, x_is_col ? xc : col, beta, dw_sum);
        }
        beta = 1;
      }
      if (dx) {
        T* dxc = dx + first * g.image_size();
        R* dcol = dcol_space;
        if constexpr (!kRounded)
          if (x_is_col) dcol = dxc;
        weights_t->multiply(Op::none, cols, dyc, cols, R(0), dcol, cols);
        if constexpr (kRounded) {
          R* sums = dcol;  // a 1x1 stride-1 conv's dcol already is dx
          if (!x_is_col) {
            col2im(dx_sums, dcol, images, g);
            sums = dx_sums;
          }
          for (int64_t i = 0; i < images * g.image_size(); ++i) dxc[i] = narrow<T>(sums[i]);
        } else if (!x_is_col) {
          col2im(dxc, dcol, images, g);
        }
      }
    }
    // Every thread had at least one chunk (plan.threads <= plan.chunks), so every partial is set.
    if (dw)
      sum_weight_partials<T>(dw, r_space.data<R>() + plan.threads * (dcol_size + dx_size),
                             omp_get_num_threads(), g.K, g.patch_size());
  }
}

}  // namespace

template <class T>
void uncropped_backward(T* dx, GemmResult<T>* dw, const T* dy, const T* x, const T* w, int64_t N,
                        const ConvGeometry& g) {
  if constexpr (std::is_same_v<T, float>) {
    if (dw && winograd_weight_grad_applies(g)) {  // Note [Winograd convolution]
      winograd_weight_grad(dw, dy, x, N, g);
      if (!dx) return;
      dw = nullptr;
    }
    if (dw && stem_weight_grad_applies(g)) {  // Note [Stem weight gradient]
      stem_weight_grad(dw, dy, x, N, g);
      if (!dx) return;
      dw = nullptr;
    }
  }
  if constexpr (kHasDirectPath<T>) {
    if (dw && direct_weight_grad_applies<T>(g)) {  // Note [Direct weight gradient]
      direct_weight_grad(dw, dy, x, N, g);
      if (!dx) return;
      dw = nullptr;
    }
  }
  if (dx && input_grad_is_conv(g)) return flipped_conv_backward(dx, dw, dy, x, w, N, g);
  if constexpr (kHasDirectPath<T>) {
    if (dx && strided_input_grad_applies<T>(g)) {  // Note [Strided input gradient]
      strided_input_grad(dx, dy, w, N, g);
      if (!dw) return;
      dx = nullptr;
    }
  }
  // dx alone (dw went direct, or is not wanted), not a conv, and not the strided input gradient
  // (AVX2, or rows shorter than 7): where the position classes apply (strided convs with 32
  // channels or more, small images) they multiply no padding and col2im's strided adds become
  // runs; measured in docs/measurements.md.
  if constexpr (!std::is_same_v<T, BFloat16>)
    if (dx && !dw && position_classes_apply(g))
      return position_classes_backward<T>(dx, nullptr, dy, x, w, N, g);
  im2col_conv_backward(dx, dw, dy, x, w, N, g);
}

#define RG_INSTANTIATE(T)                                                                        \
  template void im2col_conv_forward<T>(T*, const T*, const T*, const T*, int64_t,                \
                                       const ConvGeometry&);                                     \
  template void uncropped_backward<T>(T*, GemmResult<T>*, const T*, const T*, const T*, int64_t, \
                                      const ConvGeometry&);
RG_INSTANTIATE(float)
RG_INSTANTIATE(double)
RG_INSTANTIATE(BFloat16)
#undef RG_INSTANTIATE

namespace {

// Whether a conv in dtype t runs its own paths: f32, f64, and bf16 on a CPU with a bf16 GEMM
// (AMX or AVX512-BF16). Elsewhere bf16, like f16, goes through f32 (half_via_f32.h).
bool runs_in_own_dtype(DType t) { return !is_half(t) || (t == DType::bf16 && cpu_has_bf16_gemm()); }

// The dtype dw must have: x's, or f32 for a half x (the f32 sums as they are, for autocast's
// f32 master weights).
DType weight_grad_dtype(const Tensor& x, const Tensor& dw) {
  return is_half(x.dtype()) && dw.dtype() == DType::f32 ? DType::f32 : x.dtype();
}

// Whether the forward takes the direct path; then the backward takes it where it can too (not the
// position classes, which the direct path beats where both apply; a strided conv's dx can still
// go by them, uncropped_backward).
template <class T>
bool takes_direct_path(const ConvGeometry& g) {
  if constexpr (kHasDirectPath<T>)
    return direct_conv_applies<T>(g);
  else
    return false;
}

// x and w defined, 4-D with matching channels (conv_geometry), x on the CPU and w of x's dtype.
ConvGeometry checked_geometry(const Tensor& x, const Tensor& w, const Conv2dParams& p,
                              const char* op) {
  RG_CHECK(x.defined() && w.defined(), op, ": x and w must be defined");
  check_cpu(x, op);
  const ConvGeometry g = conv_geometry(x.shape(), w.shape(), p);
  check_operand(w, w.shape(), x.dtype(), op, "w");
  return g;
}

}  // namespace

ConvGeometry checked_forward_geometry(const Tensor& y, const Tensor& x, const Tensor& w,
                                      const Tensor& bias, const Conv2dParams& p, const char* op) {
  const ConvGeometry g = checked_geometry(x, w, p, op);
  check_operand(y, conv2d_output_shape(x.shape(), w.shape(), p), x.dtype(), op, "y");
  if (bias.defined()) check_operand(bias, {g.K}, x.dtype(), op, "bias");
  return g;
}

ConvGeometry checked_backward_geometry(const Tensor& dx, const Tensor& dw, const Tensor& dbias,
                                       const Tensor& dy, const Tensor& x, const Tensor& w,
                                       const Conv2dParams& p, const char* op) {
  const ConvGeometry g = checked_geometry(x, w, p, op);
  check_operand(dy, conv2d_output_shape(x.shape(), w.shape(), p), x.dtype(), op, "dy");
  if (dx.defined()) check_operand(dx, x.shape(), x.dtype(), op, "dx");
  if (dw.defined()) check_operand(dw, w.shape(), weight_grad_dtype(x, dw), op, "dw");
  if (dbias.defined()) check_operand(dbias, {g.K}, x.dtype(), op, "dbias");
  return g;
}

void conv2d_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias,
                    const Conv2dParams& p) {
  constexpr const char* op = "conv2d_forward";
  if (x.defined() && !runs_in_own_dtype(x.dtype())) {
    check_half_operands(op, x, {&w, &bias, &y});
    Tensor y32 = f32_output(y);
    cpu::conv2d_forward(y32, widened(x), widened(w), widened(bias), p);
    return round_into(y, y32);
  }
  const ConvGeometry g = checked_forward_geometry(y, x, w, bias, p, op);
  dispatch_float_or_bf16(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    if (x.size(0) == 0) return;
    use_single_threaded_blas();
    const TapWindow taps = active_taps(g);
    const T* b = bias.defined() ? bias.data<T>() : nullptr;
    if (!covers_kernel(taps, g))
      return tap_cropped_forward(y.data<T>(), x.data<T>(), w.data<T>(), b, x.size(0), g, taps);
    if constexpr (std::is_same_v<T, BFloat16>)
      if (dense_small_image_applies(g))
        return dense_small_image_forward(y.data<T>(), x.data<T>(), w.data<T>(), b, x.size(0), g);
    if constexpr (std::is_same_v<T, float>)
      if (winograd_applies(g))
        return winograd_forward(y.data<T>(), x.data<T>(), w.data<T>(), b, x.size(0), g);
    if constexpr (kHasDirectPath<T>)
      if (takes_direct_path<T>(g))
        return direct_conv_forward(y.data<T>(), x.data<T>(), w.data<T>(), b, x.size(0), g);
    if constexpr (!std::is_same_v<T, BFloat16>)
      if (position_classes_apply(g))
        return position_classes_forward(y.data<T>(), x.data<T>(), w.data<T>(), b, x.size(0), g);
    if constexpr (std::is_same_v<T, float>)
      if (implicit_columns_apply(g))
        return implicit_columns_forward(y.data<T>(), x.data<T>(), w.data<T>(), b, x.size(0), g);
    im2col_conv_forward(y.data<T>(), x.data<T>(), w.data<T>(), b, x.size(0), g);
  });
}

void conv2d_backward(Tensor& dx, Tensor& dw, Tensor& dbias, const Tensor& dy, const Tensor& x,
                     const Tensor& w, const Conv2dParams& p) {
  constexpr const char* op = "conv2d_backward";
  const bool dw_in_f32 = x.defined() && dw.defined() && weight_grad_dtype(x, dw) != x.dtype();
  if (x.defined() && !runs_in_own_dtype(x.dtype())) {
    check_half_operands(op, x, {&w, &dy, &dx, &dbias});
    if (!dw_in_f32) check_half_operands(op, x, {&dw});
    Tensor dx32 = f32_output(dx), dw32 = dw_in_f32 ? dw : f32_output(dw), db32 = f32_output(dbias);
    cpu::conv2d_backward(dx32, dw32, db32, widened(dy), widened(x), widened(w), p);
    round_into(dx, dx32);
    if (!dw_in_f32) round_into(dw, dw32);
    return round_into(dbias, db32);
  }
  const ConvGeometry g = checked_backward_geometry(dx, dw, dbias, dy, x, w, p, op);
  const int64_t N = x.size(0);
  dispatch_float_or_bf16(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using R = GemmResult<T>;
    if (dbias.defined()) bias_grad(dbias.data<T>(), dy.data<T>(), N, g);
    if (N == 0) {
      if (dw.defined()) dw.zero_();  // an empty batch contributes nothing
      return;
    }
    if (!dx.defined() && !dw.defined()) return;
    use_single_threaded_blas();
    // The paths give dw in R; a bf16 dw is rounded from scratch at the end.
    const bool rounds_dw = dw.defined() && dw.dtype() != DTypeOf<R>::value;
    Tensor dw_sums = rounds_dw ? Tensor::empty(dw.shape(), DTypeOf<R>::value) : dw;
    T* dxp = dx.defined() ? dx.data<T>() : nullptr;
    R* dwp = dw.defined() ? dw_sums.data<R>() : nullptr;
    auto run_path = [&] {
      const TapWindow taps = active_taps(g);
      if (!covers_kernel(taps, g))
        return tap_cropped_backward(dxp, dwp, dy.data<T>(), x.data<T>(), w.data<T>(), N, g, taps);
      if constexpr (std::is_same_v<T, BFloat16>) {
        if (dense_small_image_applies(g))
          return dense_small_image_backward(dxp, dwp, dy.data<T>(), x.data<T>(), w.data<T>(), N, g);
      } else if (!takes_direct_path<T>(g) && position_classes_apply(g)) {
        return position_classes_backward(dxp, dwp, dy.data<T>(), x.data<T>(), w.data<T>(), N, g);
      }
      uncropped_backward(dxp, dwp, dy.data<T>(), x.data<T>(), w.data<T>(), N, g);
    };
    run_path();
    if (rounds_dw) cast(dw, dw_sums);
  });
}

}  // namespace ringgrad::kernels::cpu
