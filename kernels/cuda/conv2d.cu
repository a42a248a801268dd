// 2-D convolution on CUDA as im2col + cuBLAS GEMM, forward and backward, for float32, float16
// and bfloat16 (GEMMs accumulate in float32). The batch is cut into chunks of images whose
// column matrix fits a fixed budget; with small images one chunk holds the whole batch, so each
// product is one large GEMM.
//   x: (N, C, H, W)  w: (K, C, R, S)  y, dy: (N, K, P, Q)
//   col (CRS, images*PQ): col[(c*R + r)*S + s][b*PQ + p*Q + q] = x[b][c][p*sh-ph+r][q*sw-pw+s]
//   forward   Y (K, images*PQ) = w (K, CRS) col, then y[b][k] = Y[k][b*PQ : (b+1)*PQ] + bias[k]
//   backward  dw (K, CRS) += dY col^T;  dcol = w^T dY;  dx = col2im(dcol);  dbias = sums of dy
#include "kernels/conv_geometry.h"
#include "kernels/cuda/channel_reduce.cuh"
#include "kernels/cuda/cublas_gemm.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace ringgrad::kernels::cuda {

namespace {

// conv_geometry after the checks of x and w.
ConvGeometry checked_geometry(const Tensor& x, const Tensor& w, const Conv2dParams& p,
                              const char* op) {
  RG_CHECK(x.defined() && w.defined(), op, ": x and w must be defined");
  const ConvGeometry g = conv_geometry(x.shape(), w.shape(), p);
  check_operand(w, w.shape(), x.dtype(), op, "w");
  return g;
}

// Images per chunk: as many as keep col within kColumnBudget elements (at least one).
int64_t chunk_images(int64_t N, const ConvGeometry& g) {
  constexpr int64_t kColumnBudget = int64_t(1) << 25;  // 128 MiB of float32
  const int64_t per_image = g.patch_size() * g.output_plane();
  const int64_t fit = per_image > 0 ? kColumnBudget / per_image : N;
  return fit < 1 ? 1 : (fit < N ? fit : N);
}

// One thread per col element; padding reads as zero.
template <class T>
__global__ void im2col_kernel(T* col, const T* x, int64_t images, ConvGeometry g) {
  const int64_t cols = images * g.output_plane(), total = g.patch_size() * cols;
  for (int64_t i = global_thread(); i < total; i += grid_threads()) {
    const int64_t row = i / cols, j = i - row * cols;
    const int64_t c = row / (g.R * g.S), r = row / g.S % g.R, s = row % g.S;
    const int64_t b = j / g.output_plane(), pq = j - b * g.output_plane();
    const int64_t h = pq / g.Q * g.stride_h - g.pad_h + r;
    const int64_t w = pq % g.Q * g.stride_w - g.pad_w + s;
    const bool inside = h >= 0 && h < g.H && w >= 0 && w < g.W;
    col[i] = inside ? x[((b * g.C + c) * g.H + h) * g.W + w] : convert_element<T>(0.0f);
  }
}

// The adjoint of im2col, one thread per dx element (b, c, h, w): the sum of every col entry
// copied from it, i.e. over the taps (r, s) for which h = p*sh - ph + r and w = q*sw - pw + s
// have an integer solution (p, q) inside the output. A gather, so no atomics are needed.
template <class T>
__global__ void col2im_kernel(T* dx, const T* dcol, int64_t images, ConvGeometry g) {
  const int64_t cols = images * g.output_plane(), total = images * g.C * g.H * g.W;
  for (int64_t i = global_thread(); i < total; i += grid_threads()) {
    const int64_t w = i % g.W, h = i / g.W % g.H, c = i / (g.W * g.H) % g.C;
    const int64_t b = i / (g.W * g.H * g.C);
    float sum = 0;
    for (int64_t r = 0; r < g.R; ++r) {
      const int64_t ph = h + g.pad_h - r;
      if (ph < 0 || ph % g.stride_h != 0 || ph / g.stride_h >= g.P) continue;
      for (int64_t s = 0; s < g.S; ++s) {
        const int64_t qw = w + g.pad_w - s;
        if (qw < 0 || qw % g.stride_w != 0 || qw / g.stride_w >= g.Q) continue;
        const int64_t row = (c * g.R + r) * g.S + s;
        sum += as_float(
            dcol[row * cols + b * g.output_plane() + ph / g.stride_h * g.Q + qw / g.stride_w]);
      }
    }
    dx[i] = convert_element<T>(sum);
  }
}

// y[b][k][pq] = result[k][b*PQ + pq] + bias[k]; result may be y itself when images == 1 (each
// thread reads and writes the same element).
template <class T>
__global__ void store_output_kernel(T* y, const T* result, const T* bias, int64_t images,
                                    ConvGeometry g) {
  const int64_t total = images * g.K * g.output_plane();
  for (int64_t i = global_thread(); i < total; i += grid_threads()) {
    const int64_t pq = i % g.output_plane(), k = i / g.output_plane() % g.K,
                  b = i / (g.output_plane() * g.K);
    const float v = as_float(result[(k * images + b) * g.output_plane() + pq]);
    y[i] = convert_element<T>(bias ? v + as_float(bias[k]) : v);
  }
}

// The inverse move for the output gradient: dy (images, K, PQ) -> batched (K, images*PQ).
template <class T>
__global__ void batch_output_grad_kernel(T* batched, const T* dy, int64_t images, ConvGeometry g) {
  const int64_t total = images * g.K * g.output_plane();
  for (int64_t i = global_thread(); i < total; i += grid_threads()) {
    const int64_t pq = i % g.output_plane(), k = i / g.output_plane() % g.K,
                  b = i / (g.output_plane() * g.K);
    batched[(k * images + b) * g.output_plane() + pq] = dy[i];
  }
}

// dbias[k] = sum of dy[n][k][:, :]
template <class T>
struct BiasGradTerms {
  const T* dy;
  __device__ void operator()(int64_t at, int64_t, double& a, double&) const {
    a += as_float(dy[at]);
  }
};

template <class T>
__global__ void write_bias_grad_kernel(T* dbias, const double* sums, int64_t K) {
  for (int64_t k = global_thread(); k < K; k += grid_threads())
    dbias[k] = convert_element<T>(static_cast<float>(sums[k]));
}

// Device buffers for one chunk of `images` images: col, the column matrix (CRS, images*PQ),
// undefined when x is its own column matrix; and batched, a (K, images*PQ) matrix (the GEMM
// result forward, dy moved into GEMM layout backward), undefined for one image, whose (K, PQ)
// is already y's and dy's layout.
struct ChunkScratch {
  ChunkScratch(const Tensor& x, int64_t images, bool x_is_col, const ConvGeometry& g)
      : col(x_is_col ? Tensor() : on_device(x, g.patch_size() * images * g.output_plane())),
        batched(images == 1 ? Tensor() : on_device(x, g.K * images * g.output_plane())) {}
  static Tensor on_device(const Tensor& x, int64_t numel) {
    return Tensor::empty({numel}, x.dtype(), x.device());
  }
  Tensor col, batched;
};

// The GEMM's column operand for images starting at xc: col(x) written into `col`, or x itself
// where a 1x1 stride-1 conv needs no im2col (`col` is then undefined).
template <class T>
const T* columns_for(Tensor& col, const T* xc, int64_t images, bool x_is_col, const ConvGeometry& g,
                     cudaStream_t stream) {
  if (x_is_col) return xc;
  im2col_kernel<<<blocks_for(g.patch_size() * images * g.output_plane()), kThreads, 0, stream>>>(
      col.data<T>(), xc, images, g);
  CUDA_CHECK_LAUNCH("im2col_kernel");
  return col.data<T>();
}

template <class T>
void forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias,
             const ConvGeometry& g) {
  const int64_t N = x.size(0);
  if (N == 0) return;
  Launch l(x);
  const int device = x.device().index;
  const int64_t images = chunk_images(N, g);
  const bool x_is_col = g.is_pointwise() && images == 1;
  ChunkScratch scratch(x, images, x_is_col, g);
  Tensor& col = scratch.col;
  Tensor& result = scratch.batched;
  const T* bias_p = bias.defined() ? bias.data<T>() : nullptr;
  for (int64_t first = 0; first < N; first += images) {
    const int64_t n = first + images <= N ? images : N - first;
    const int64_t cols = n * g.output_plane();
    const T* xc = x.data<T>() + first * g.C * g.H * g.W;
    T* yc = y.data<T>() + first * g.K * g.output_plane();
    const T* colp = columns_for(col, xc, n, x_is_col, g, l.stream);
    T* out = images == 1 ? yc : result.data<T>();
    gemm(device, x.dtype(), Op::none, Op::none, g.K, cols, g.patch_size(), 1.0f, w.data<T>(),
         g.patch_size(), colp, cols, 0.0f, out, cols);
    if (images == 1 && !bias_p) continue;  // the GEMM wrote y in place
    store_output_kernel<<<blocks_for(n * g.K * g.output_plane()), kThreads, 0, l.stream>>>(
        yc, out, bias_p, n, g);
    CUDA_CHECK_LAUNCH("store_output_kernel");
  }
}

template <class T>
void backward(Tensor& dx, Tensor& dw, Tensor& dbias, const Tensor& dy, const Tensor& x,
              const Tensor& w, const ConvGeometry& g) {
  const int64_t N = x.size(0);
  Launch l(x);
  const int device = x.device().index;
  if (dbias.defined()) {
    Tensor sums = Tensor::empty({2 * g.K}, DType::f64, x.device());
    channel_reduce(sums.data<double>(), BiasGradTerms<T>{dy.data<T>()}, N, g.K, g.output_plane(),
                   l.stream, "conv2d_backward dbias");
    write_bias_grad_kernel<<<blocks_for(g.K), kThreads, 0, l.stream>>>(dbias.data<T>(),
                                                                       sums.data<double>(), g.K);
    CUDA_CHECK_LAUNCH("write_bias_grad_kernel");
  }
  if (N == 0) {
    if (dw.defined()) dw.zero_();  // an empty batch contributes nothing
    return;
  }
  if (!dx.defined() && !dw.defined()) return;
  const int64_t images = chunk_images(N, g);
  const bool x_is_col = g.is_pointwise() && images == 1;  // and dx is dcol
  ChunkScratch scratch(x, images, x_is_col, g);
  Tensor& col = scratch.col;
  Tensor& dy_batched = scratch.batched;
  for (int64_t first = 0; first < N; first += images) {
    const int64_t n = first + images <= N ? images : N - first;
    const int64_t cols = n * g.output_plane();
    const T* dyc = dy.data<T>() + first * g.K * g.output_plane();
    if (images > 1) {
      batch_output_grad_kernel<<<blocks_for(n * g.K * g.output_plane()), kThreads, 0, l.stream>>>(
          dy_batched.data<T>(), dyc, n, g);
      CUDA_CHECK_LAUNCH("batch_output_grad_kernel");
      dyc = dy_batched.data<T>();
    }
    const T* xc = x.data<T>() + first * g.C * g.H * g.W;
    if (dw.defined()) {
      const T* colp = columns_for(col, xc, n, x_is_col, g, l.stream);
      gemm(device, x.dtype(), Op::none, Op::transpose, g.K, g.patch_size(), cols, 1.0f, dyc, cols,
           colp, cols, first == 0 ? 0.0f : 1.0f, dw.data<T>(), g.patch_size());
    }
    if (dx.defined()) {
      T* dxc = dx.data<T>() + first * g.C * g.H * g.W;
      T* dcol = x_is_col ? dxc : col.data<T>();  // col is free again: dw's GEMM was queued first
      gemm(device, x.dtype(), Op::transpose, Op::none, g.patch_size(), cols, g.K, 1.0f, w.data<T>(),
           g.patch_size(), dyc, cols, 0.0f, dcol, cols);
      if (!x_is_col) {
        col2im_kernel<<<blocks_for(n * g.C * g.H * g.W), kThreads, 0, l.stream>>>(dxc, dcol, n, g);
        CUDA_CHECK_LAUNCH("col2im_kernel");
      }
    }
  }
}

}  // namespace

void conv2d_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias,
                    const Conv2dParams& p) {
  constexpr const char* op = "conv2d_forward";
  const ConvGeometry g = checked_geometry(x, w, p, op);
  check_operand(y, conv2d_output_shape(x.shape(), w.shape(), p), x.dtype(), op, "y");
  if (bias.defined()) check_operand(bias, {g.K}, x.dtype(), op, "bias");
  dispatch_cuda_float(x.dtype(), op, [&](auto tag) { forward<decltype(tag)>(y, x, w, bias, g); });
}

void conv2d_backward(Tensor& dx, Tensor& dw, Tensor& dbias, const Tensor& dy, const Tensor& x,
                     const Tensor& w, const Conv2dParams& p) {
  constexpr const char* op = "conv2d_backward";
  const ConvGeometry g = checked_geometry(x, w, p, op);
  check_operand(dy, conv2d_output_shape(x.shape(), w.shape(), p), x.dtype(), op, "dy");
  if (dx.defined()) check_operand(dx, x.shape(), x.dtype(), op, "dx");
  if (dw.defined()) check_operand(dw, w.shape(), x.dtype(), op, "dw");
  if (dbias.defined()) check_operand(dbias, {g.K}, x.dtype(), op, "dbias");
  dispatch_cuda_float(x.dtype(), op,
                      [&](auto tag) { backward<decltype(tag)>(dx, dw, dbias, dy, x, w, g); });
}

}  // namespace ringgrad::kernels::cuda
