// 2-D convolution on the CPU (f32, f64; f16 and bf16 through f32) as im2col + GEMM, forward
// and backward (for stride 1, dx is the forward conv of dy with the flipped kernel, and dw
// reuses that conv's column matrix; otherwise GEMM + col2im).
// Work split: each OpenMP thread owns whole images, taken in chunks that become one GEMM each,
// so forward outputs and dx never overlap between threads and need no locks; dw is summed from
// one partial per thread. BLAS runs single-threaded inside the region (Note [BLAS threads]).
#include <omp.h>

#include <algorithm>

#include "kernels/cpu/cpu_dispatch.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/half_via_f32.h"
#include "kernels/cpu/im2col.h"

namespace ringgrad::kernels::cpu {

namespace {

// How the batch is cut: chunks of `images` images (the last may be smaller), spread over
// `threads` threads in contiguous runs (OpenMP static schedule), every thread getting a chunk.
struct ChunkPlan {
  int64_t images;
  int64_t chunks;
  int threads;
};

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

// Kernel taps that only ever meet padding multiply zeros. They form borders of the kernel
// (rows r whose every output row reads outside the image, likewise columns s), so the conv
// equals one with the kernel cropped to the active taps [r0, r1) x [s0, s1) and the padding
// cut by r0, s0 (never below 0: tap r = pad_h reads row 0 at p = 0). ResNet-18's 3x3 pad-1
// convs on 1x1 images become 1x1 convs this way, 9x less work.
struct TapWindow {
  int64_t r0, r1, s0, s1;
  bool empty() const { return r0 >= r1 || s0 >= s1; }  // every output reads only padding
};

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

ConvGeometry cropped(ConvGeometry g, const TapWindow& t) {
  g.R = t.r1 - t.r0;
  g.S = t.s1 - t.s0;
  g.pad_h -= t.r0;
  g.pad_w -= t.s0;
  return g;
}

// Calls f(full, cropped) for every tap of w (K, C, R, S): `full` its index in w, `cropped` its
// index in the cropped kernel (K, C, r1 - r0, s1 - s0), or -1 outside the window. Parallel over
// (k, c), since ResNet-18's largest kernels (9 MB) are exactly the ones that get cropped.
template <class F>
void for_each_kernel_tap(const ConvGeometry& g, const TapWindow& t, F&& f) {
  const int64_t R = t.r1 - t.r0, S = t.s1 - t.s0;
#pragma omp parallel for schedule(static)
  for (int64_t kc = 0; kc < g.K * g.C; ++kc)
    for (int64_t r = 0; r < g.R; ++r)
      for (int64_t s = 0; s < g.S; ++s) {
        const bool inside = r >= t.r0 && r < t.r1 && s >= t.s0 && s < t.s1;
        f((kc * g.R + r) * g.S + s, inside ? (kc * R + r - t.r0) * S + s - t.s0 : -1);
      }
}

// w (K, C, R, S) cropped to the window: (K, C, r1 - r0, s1 - s0).
template <class T>
Tensor crop_kernel(const T* w, const ConvGeometry& g, const TapWindow& t) {
  Tensor crop = Tensor::empty({g.K, g.C, t.r1 - t.r0, t.s1 - t.s0}, DTypeOf<T>::value);
  T* c = crop.data<T>();
  for_each_kernel_tap(g, t, [&](int64_t full, int64_t at) {
    if (at >= 0) c[at] = w[full];
  });
  return crop;
}

// One chunk's GEMM result is (K, images*P*Q); y is (images, K, P*Q). With one image they are the
// same memory and only the bias is added; otherwise each (image, channel) plane is moved.
template <class T>
void store_output(T* y, const T* result, const T* bias, int64_t images, const ConvGeometry& g) {
  const int64_t plane = g.output_plane(), columns = images * plane;
  for (int64_t b = 0; b < images; ++b) {
    for (int64_t k = 0; k < g.K; ++k) {
      T* out = y + (b * g.K + k) * plane;
      const T* in = result + k * columns + b * plane;
      const T add = bias ? bias[k] : T(0);
      if (in == out && !bias) continue;
      for (int64_t i = 0; i < plane; ++i) out[i] = in[i] + add;
    }
  }
}

// The inverse move for the output gradient: dy (images, K, P*Q) -> batched (K, images*P*Q).
template <class T>
void batch_output_grad(T* batched, const T* dy, int64_t images, const ConvGeometry& g) {
  const int64_t plane = g.output_plane(), columns = images * plane;
  for (int64_t b = 0; b < images; ++b)
    for (int64_t k = 0; k < g.K; ++k)
      std::copy_n(dy + (b * g.K + k) * plane, plane, batched + k * columns + b * plane);
}

// y (N, K, P, Q) = w (K, CRS) * col(x) per chunk, + bias.
template <class T>
void forward(T* y, const T* x, const T* w, const T* bias, int64_t N, const ConvGeometry& g) {
  if (const TapWindow taps = active_taps(g); !covers_kernel(taps, g)) {
    if (taps.empty()) {
      for (int64_t i = 0; i < N * g.output_image_size(); ++i)
        y[i] = bias ? bias[i / g.output_plane() % g.K] : T(0);
      return;
    }
    const Tensor crop = crop_kernel(w, g, taps);
    return forward(y, x, crop.data<T>(), bias, N, cropped(g, taps));
  }
  const ChunkPlan plan = plan_chunks(N, g, sizeof(T));
  const bool x_is_col = g.is_pointwise() && plan.images == 1;
  const bool gemm_into_y = plan.images == 1;
  const int64_t columns = plan.images * g.output_plane();
  const int64_t col_size = x_is_col ? 0 : g.patch_size() * columns;
  const int64_t result_size = gemm_into_y ? 0 : g.K * columns;
  const int64_t per_thread = col_size + result_size;
  Tensor workspace = Tensor::empty({plan.threads * per_thread}, DTypeOf<T>::value);
#pragma omp parallel num_threads(plan.threads)
  {
    T* col = workspace.data<T>() + omp_get_thread_num() * per_thread;
    T* result = col + col_size;
#pragma omp for schedule(static)
    for (int64_t chunk = 0; chunk < plan.chunks; ++chunk) {
      const int64_t first = chunk * plan.images, images = std::min(plan.images, N - first);
      const int64_t cols = images * g.output_plane();
      const T* xc = x + first * g.image_size();
      T* yc = y + first * g.output_image_size();
      if (!x_is_col) im2col(col, xc, images, g);
      T* out = gemm_into_y ? yc : result;
      gemm(Op::none, Op::none, g.K, cols, g.patch_size(), T(1), w, g.patch_size(),
           x_is_col ? xc : col, cols, T(0), out, cols);
      store_output(yc, out, bias, images, g);
    }
  }
}

// dbias[k] = sum over n, p, q of dy[n][k][p][q], accumulated in double.
template <class T>
void bias_grad(T* dbias, const T* dy, int64_t N, const ConvGeometry& g) {
  const int64_t plane = g.output_plane();
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < g.K; ++k) {
    double sum = 0;
    for (int64_t n = 0; n < N; ++n) {
      const T* d = dy + (n * g.K + k) * plane;
      for (int64_t i = 0; i < plane; ++i) sum += d[i];
    }
    dbias[k] = static_cast<T>(sum);
  }
}

// With stride 1 the input gradient is itself a convolution. From
//   dx[c][i][j] = sum_{k,r,s} w[k][c][r][s] dy[k][i + pad_h - r][j + pad_w - s]
// and r' = R-1-r, s' = S-1-s: dx = conv(dy, w') with w'[c][k][r'][s'] = w[k][c][R-1-r'][S-1-s']
// and padding R-1-pad_h, S-1-pad_w (a real padding while pad <= kernel - 1). That runs the
// forward path (im2col + GEMM straight into dx) instead of GEMM into a column matrix nine
// times the size of dx, from a product with inner dimension K only, and col2im. A 1x1 kernel
// gains nothing (its column matrix is no larger than dx) and keeps the direct path.
bool input_grad_is_conv(const ConvGeometry& g) {
  return g.R * g.S > 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_h <= g.R - 1 &&
         g.pad_w <= g.S - 1;
}

ConvGeometry input_grad_geometry(const ConvGeometry& g) {
  return {g.K, g.P, g.Q, g.C, g.R, g.S, g.H, g.W, 1, 1, g.R - 1 - g.pad_h, g.S - 1 - g.pad_w};
}

// w' (C, K, R, S) from w (K, C, R, S), as above; parallel, since ResNet-18's kernels reach 9 MB.
template <class T>
Tensor flipped_transposed_kernel(const T* w, const ConvGeometry& g) {
  Tensor flipped = Tensor::empty({g.C, g.K, g.R, g.S}, DTypeOf<T>::value);
  T* f = flipped.data<T>();
  const int64_t RS = g.R * g.S;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t k = 0; k < g.K; ++k)
      for (int64_t rs = 0; rs < RS; ++rs)
        f[(c * g.K + k) * RS + RS - 1 - rs] = w[(k * g.C + c) * RS + rs];
  return flipped;
}

// Stride-1 backward when dx is wanted: dx = conv(dy, w') as above, and dw from the same
// column matrix of dy. With h = p + r - pad_h (and likewise w),
//   dw[k][c][r][s] = sum_{n,p,q} dy[n][k][p][q] x[n][c][p + r - pad_h][q + s - pad_w]
//                  = sum_{n,h,w} col(dy)[(k, R-1-r, S-1-s)][(n, h, w)] x[n][c][h][w]
// (col(dy) is the flipped conv's column matrix, zero exactly where dy's index leaves the image),
// so per chunk dw^T (C, KRS) += X col(dy)^T with X the chunk's x as (C, columns), and one im2col
// serves both products instead of one of dy and another of x.
template <class T>
void backward_through_flipped_conv(T* dx, T* dw, const T* dy, const T* x, const T* w, int64_t N,
                                   const ConvGeometry& g) {
  const ConvGeometry f = input_grad_geometry(g);  // the conv over dy: f.K == g.C, f.C == g.K
  const Tensor flipped = flipped_transposed_kernel(w, g);
  const ChunkPlan plan = plan_chunks(N, f, sizeof(T));
  const bool batched = plan.images > 1;  // dx and x then need moving to and from (C, columns)
  const int64_t columns = plan.images * f.output_plane(), KRS = f.patch_size();
  const int64_t col_size = KRS * columns;
  const int64_t moved_size = batched ? 2 * g.C * columns : 0;  // dx's result, then x
  const int64_t per_thread = col_size + moved_size;
  const int64_t dw_size = dw ? g.C * KRS : 0;
  Tensor workspace = Tensor::empty({plan.threads * (per_thread + dw_size)}, DTypeOf<T>::value);
  T* partials = workspace.data<T>() + plan.threads * per_thread;  // dw^T of each thread
#pragma omp parallel num_threads(plan.threads)
  {
    const int thread = omp_get_thread_num();
    T* col = workspace.data<T>() + thread * per_thread;
    T* result = col + col_size;
    T* x_moved = result + g.C * columns;
    T* dw_sum = partials + thread * dw_size;
    T beta = 0;  // the first chunk of each thread overwrites its dw_sum
#pragma omp for schedule(static)
    for (int64_t chunk = 0; chunk < plan.chunks; ++chunk) {
      const int64_t first = chunk * plan.images, images = std::min(plan.images, N - first);
      const int64_t cols = images * f.output_plane();
      im2col(col, dy + first * g.output_image_size(), images, f);
      T* dxc = dx + first * g.image_size();
      T* out = batched ? result : dxc;
      gemm(Op::none, Op::none, g.C, cols, KRS, T(1), flipped.data<T>(), KRS, col, cols, T(0), out,
           cols);
      store_output(dxc, out, static_cast<const T*>(nullptr), images, f);
      if (!dw) continue;
      const T* xc = x + first * g.image_size();
      if (batched) {  // x (images, C, H*W) is laid out as the flipped conv's output
        batch_output_grad(x_moved, xc, images, f);
        xc = x_moved;
      }
      gemm(Op::none, Op::transpose, g.C, KRS, cols, T(1), xc, cols, col, cols, beta, dw_sum, KRS);
      beta = 1;
    }
    // dw[k][c][r][s] = sum over threads of dw^T[c][(k, R-1-r, S-1-s)].
    if (dw) {
      const int team = omp_get_num_threads();
      const int64_t RS = g.R * g.S;
#pragma omp for schedule(static)
      for (int64_t kc = 0; kc < g.K * g.C; ++kc) {
        const int64_t k = kc / g.C, c = kc % g.C;
        for (int64_t rs = 0; rs < RS; ++rs) {
          const int64_t from = c * KRS + k * RS + (RS - 1 - rs);
          T sum = 0;
          for (int t = 0; t < team; ++t) sum += partials[t * dw_size + from];
          dw[kc * RS + rs] = sum;
        }
      }
    }
  }
}

// Per chunk, with dY the chunk's output gradient as (K, columns):
//   dw (K, CRS)        += dY col(x)^T       (one partial per thread, summed last)
//   dcol (CRS, columns) = w^T dY,  dx = col2im(dcol)
template <class T>
void backward(T* dx, T* dw, const T* dy, const T* x, const T* w, int64_t N, const ConvGeometry& g) {
  if (const TapWindow taps = active_taps(g); !covers_kernel(taps, g)) {
    if (taps.empty()) {
      if (dx) std::fill_n(dx, N * g.image_size(), T(0));
      if (dw) std::fill_n(dw, g.K * g.patch_size(), T(0));
      return;
    }
    const Tensor crop = crop_kernel(w, g, taps);
    Tensor dcrop = dw ? Tensor::empty(crop.shape(), crop.dtype()) : Tensor();
    backward(dx, dw ? dcrop.data<T>() : nullptr, dy, x, crop.data<T>(), N, cropped(g, taps));
    if (dw) {  // taps outside the window have zero gradient
      const T* dc = dcrop.data<T>();
      for_each_kernel_tap(g, taps,
                          [&](int64_t full, int64_t at) { dw[full] = at >= 0 ? dc[at] : T(0); });
    }
    return;
  }
  if (dx && input_grad_is_conv(g)) return backward_through_flipped_conv(dx, dw, dy, x, w, N, g);
  const ChunkPlan plan = plan_chunks(N, g, sizeof(T));
  const bool x_is_col = g.is_pointwise() && plan.images == 1;  // and dx is dcol
  const bool dy_is_batched = plan.images == 1;
  const int64_t columns = plan.images * g.output_plane();
  const int64_t col_size = x_is_col ? 0 : g.patch_size() * columns;
  const int64_t dy_size = dy_is_batched ? 0 : g.K * columns;
  const int64_t per_thread = col_size + dy_size;
  const int64_t dw_size = dw ? g.K * g.patch_size() : 0;
  Tensor workspace = Tensor::empty({plan.threads * (per_thread + dw_size)}, DTypeOf<T>::value);
  T* partials = workspace.data<T>() + plan.threads * per_thread;  // dw of each thread
#pragma omp parallel num_threads(plan.threads)
  {
    const int thread = omp_get_thread_num();
    T* col = workspace.data<T>() + thread * per_thread;
    T* dy_batched = col + col_size;
    T* dw_sum = partials + thread * dw_size;
    T beta = 0;  // the first chunk of each thread overwrites its dw_sum
#pragma omp for schedule(static)
    for (int64_t chunk = 0; chunk < plan.chunks; ++chunk) {
      const int64_t first = chunk * plan.images, images = std::min(plan.images, N - first);
      const int64_t cols = images * g.output_plane();
      const T* dyc = dy + first * g.output_image_size();
      if (!dy_is_batched) {
        batch_output_grad(dy_batched, dyc, images, g);
        dyc = dy_batched;
      }
      const T* xc = x + first * g.image_size();
      if (dw) {
        if (!x_is_col) im2col(col, xc, images, g);
        gemm(Op::none, Op::transpose, g.K, g.patch_size(), cols, T(1), dyc, cols,
             x_is_col ? xc : col, cols, beta, dw_sum, g.patch_size());
        beta = 1;
      }
      if (dx) {
        T* dxc = dx + first * g.image_size();
        T* dcol = x_is_col ? dxc : col;
        gemm(Op::transpose, Op::none, g.patch_size(), cols, g.K, T(1), w, g.patch_size(), dyc, cols,
             T(0), dcol, cols);
        if (!x_is_col) col2im(dxc, dcol, images, g);
      }
    }
    // Every thread had at least one chunk (plan.threads <= plan.chunks), so every partial is set.
    if (dw) {
      const int team = omp_get_num_threads();
#pragma omp for schedule(static)
      for (int64_t i = 0; i < dw_size; ++i) {
        T sum = 0;
        for (int t = 0; t < team; ++t) sum += partials[t * dw_size + i];
        dw[i] = sum;
      }
    }
  }
}

}  // namespace

void conv2d_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias,
                    const Conv2dParams& p) {
  constexpr const char* op = "conv2d_forward";
  RG_CHECK(x.defined() && w.defined(), op, ": x and w must be defined");
  check_cpu(x, op);
  if (is_half(x.dtype())) {
    check_half_operands(op, x, {&w, &bias, &y});
    Tensor y32 = f32_output(y);
    cpu::conv2d_forward(y32, widened(x), widened(w), widened(bias), p);
    return round_into(y, y32);
  }
  const ConvGeometry g = conv_geometry(x.shape(), w.shape(), p);
  check_operand(w, w.shape(), x.dtype(), op, "w");
  check_operand(y, conv2d_output_shape(x.shape(), w.shape(), p), x.dtype(), op, "y");
  if (bias.defined()) check_operand(bias, {g.K}, x.dtype(), op, "bias");
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    if (x.size(0) == 0) return;
    use_single_threaded_blas();
    forward(y.data<T>(), x.data<T>(), w.data<T>(), bias.defined() ? bias.data<T>() : nullptr,
            x.size(0), g);
  });
}

void conv2d_backward(Tensor& dx, Tensor& dw, Tensor& dbias, const Tensor& dy, const Tensor& x,
                     const Tensor& w, const Conv2dParams& p) {
  constexpr const char* op = "conv2d_backward";
  RG_CHECK(x.defined() && w.defined(), op, ": x and w must be defined");
  check_cpu(x, op);
  if (is_half(x.dtype())) {
    check_half_operands(op, x, {&w, &dy, &dx, &dw, &dbias});
    Tensor dx32 = f32_output(dx), dw32 = f32_output(dw), db32 = f32_output(dbias);
    cpu::conv2d_backward(dx32, dw32, db32, widened(dy), widened(x), widened(w), p);
    round_into(dx, dx32);
    round_into(dw, dw32);
    return round_into(dbias, db32);
  }
  const ConvGeometry g = conv_geometry(x.shape(), w.shape(), p);
  check_operand(w, w.shape(), x.dtype(), op, "w");
  check_operand(dy, conv2d_output_shape(x.shape(), w.shape(), p), x.dtype(), op, "dy");
  if (dx.defined()) check_operand(dx, x.shape(), x.dtype(), op, "dx");
  if (dw.defined()) check_operand(dw, w.shape(), x.dtype(), op, "dw");
  if (dbias.defined()) check_operand(dbias, {g.K}, x.dtype(), op, "dbias");
  const int64_t N = x.size(0);
  dispatch_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    if (dbias.defined()) bias_grad(dbias.data<T>(), dy.data<T>(), N, g);
    if (N == 0) {
      if (dw.defined()) dw.zero_();  // an empty batch contributes nothing
      return;
    }
    if (!dx.defined() && !dw.defined()) return;
    use_single_threaded_blas();
    backward(dx.defined() ? dx.data<T>() : nullptr, dw.defined() ? dw.data<T>() : nullptr,
             dy.data<T>(), x.data<T>(), w.data<T>(), N, g);
  });
}

}  // namespace ringgrad::kernels::cpu
