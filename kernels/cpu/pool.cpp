// Max pooling (with argmax indices for backward) and global average pooling on the CPU, in f32,
// f64 and bf16 (f32 arithmetic, sums in f32 or wider, one rounding per result). Max pooling of
// f32 and bf16 on an AVX2 CPU runs eight outputs at a time (maxpool_windows.h); maxpool_plane,
// the plain scan, is its reference and the f64 path.
// x: (N, C, H, W); every (n, c) plane is independent, so each loop runs one plane per thread.
#include <algorithm>
#include <limits>
#include <vector>

#include "kernels/cast_math.h"
#include "kernels/cpu/cpu_dispatch.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/maxpool_windows.h"
#include "kernels/pool_math.h"

namespace ringgrad::kernels::cpu {

namespace {

void check_nchw(const Tensor& t, const char* op, const char* name) {
  RG_CHECK(t.defined(), op, ": ", name, " is undefined");
  RG_CHECK_EQ(t.dim(), 4, op, ": ", name, " must be (N, C, H, W), got shape ", t.shape().str());
  check_cpu(t, op);
}

// What both global-average-pool kernels check: `full` (named full_name) is (N, C, H, W), and
// `pooled` is (N, C, 1, 1) of its dtype on the CPU.
void check_global_pool(const Tensor& full, const char* full_name, const Tensor& pooled,
                       const char* pooled_name, const char* op) {
  check_nchw(full, op, full_name);
  check_shape(pooled, Shape{full.size(0), full.size(1), 1, 1}, op, pooled_name);
  RG_CHECK(pooled.dtype() == full.dtype(), op, ": ", pooled_name, " and ", full_name,
           " dtypes differ");
  check_cpu(pooled, op);
}

// One plane: each output takes the maximum of its window clipped to the input, starting from
// -inf at the window's first in-bounds position (padding never wins, as PyTorch).
template <class T>
void maxpool_plane(T* y, int32_t* index, const T* x, int64_t H, int64_t W, int64_t P, int64_t Q,
                   const Pool2dParams& p) {
  for (int64_t oh = 0; oh < P; ++oh) {
    const int64_t h0 = std::max<int64_t>(oh * p.stride_h - p.pad_h, 0);
    const int64_t h1 = std::min<int64_t>(oh * p.stride_h - p.pad_h + p.kernel_h, H);
    for (int64_t ow = 0; ow < Q; ++ow) {
      const int64_t w0 = std::max<int64_t>(ow * p.stride_w - p.pad_w, 0);
      const int64_t w1 = std::min<int64_t>(ow * p.stride_w - p.pad_w + p.kernel_w, W);
      ComputeType<T> best = -std::numeric_limits<ComputeType<T>>::infinity();
      int64_t best_at = h0 * W + w0;
      for (int64_t h = h0; h < h1; ++h) {
        for (int64_t w = w0; w < w1; ++w) {
          const ComputeType<T> v = widen(x[h * W + w]);
          if (max_pool_takes(v, best)) {
            best = v;
            best_at = h * W + w;
          }
        }
      }
      y[oh * Q + ow] = narrow<T>(best);
      index[oh * Q + ow] = static_cast<int32_t>(best_at);
    }
  }
}

// maxpool_plane over every plane, f32 or bf16, through MaxPoolWindows (Note [Max pooling by
// window tables]): each plane is widened into a per-thread copy that ends in the sentinel -inf,
// and a bf16 maximum narrows back exactly (it is one of the plane's values).
template <class T>
void maxpool_by_windows(T* y, int32_t* index, const T* x, int64_t planes, int64_t H, int64_t W,
                        int64_t P, int64_t Q, const Pool2dParams& p) {
  const MaxPoolWindows windows(H, W, P, Q, p);
#pragma omp parallel
  {
    std::vector<float> padded(windows.padded_size());
    padded.back() = -std::numeric_limits<float>::infinity();
    std::vector<float> pooled(std::is_same_v<T, float> ? 0 : P * Q);
#pragma omp for schedule(static)
    for (int64_t plane = 0; plane < planes; ++plane) {
      const T* in = x + plane * H * W;
      for (int64_t i = 0; i < H * W; ++i) padded[i] = widen(in[i]);
      T* out = y + plane * P * Q;
      float* result = pooled.data();
      if constexpr (std::is_same_v<T, float>) result = out;
      windows.pool(result, index + plane * P * Q, padded.data());
      if constexpr (!std::is_same_v<T, float>)
        for (int64_t i = 0; i < P * Q; ++i) out[i] = narrow<T>(result[i]);
    }
  }
}

}  // namespace

// x: (N, C, H, W) -> y, indices: (N, C, P, Q)
void maxpool2d_forward(Tensor& y, Tensor& indices, const Tensor& x, const Pool2dParams& p) {
  constexpr const char* op = "maxpool2d_forward";
  check_nchw(x, op, "x");
  const Shape out = pool2d_output_shape(x.shape(), p);
  check_shape(y, out, op, "y");
  check_shape(indices, out, op, "indices");
  RG_CHECK(y.dtype() == x.dtype(), op, ": y and x dtypes differ");
  RG_CHECK(indices.dtype() == DType::i32, op, ": indices must be int32, got ",
           dtype_name(indices.dtype()));
  check_cpu(y, op);
  check_cpu(indices, op);
  const int64_t H = x.size(2), W = x.size(3), P = out[2], Q = out[3];
  RG_CHECK_LE(H * W, std::numeric_limits<int32_t>::max(), op,
              ": input plane too large for int32 indices");
  const int64_t planes = x.size(0) * x.size(1);
  dispatch_float_or_bf16(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    int32_t* ip = indices.data<int32_t>();
    if constexpr (std::is_same_v<ComputeType<T>, float>) {
      if (cpu_has(Isa::avx2)) return maxpool_by_windows(yp, ip, xp, planes, H, W, P, Q, p);
    }
#pragma omp parallel for schedule(static)
    for (int64_t plane = 0; plane < planes; ++plane)
      maxpool_plane(yp + plane * P * Q, ip + plane * P * Q, xp + plane * H * W, H, W, P, Q, p);
  });
}

// dx[argmax] += dy for every output; dx: (N, C, H, W), dy and indices: (N, C, P, Q). Overlapping
// windows add into one input, so a bf16 plane is summed in f32 first and rounded once.
void maxpool2d_backward(Tensor& dx, const Tensor& dy, const Tensor& indices) {
  constexpr const char* op = "maxpool2d_backward";
  check_nchw(dx, op, "dx");
  check_nchw(dy, op, "dy");
  check_shape(indices, dy.shape(), op, "indices");
  RG_CHECK(indices.dtype() == DType::i32, op, ": indices must be int32, got ",
           dtype_name(indices.dtype()));
  RG_CHECK(dx.dtype() == dy.dtype(), op, ": dx and dy dtypes differ");
  RG_CHECK(dx.size(0) == dy.size(0) && dx.size(1) == dy.size(1), op, ": dx ", dx.shape().str(),
           " and dy ", dy.shape().str(), " differ in N or C");
  check_cpu(indices, op);
  const int64_t HW = dx.size(2) * dx.size(3), PQ = dy.size(2) * dy.size(3);
  const int64_t planes = dx.size(0) * dx.size(1);
  bool index_out_of_range = false;
  dispatch_float_or_bf16(dx.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using S = ComputeType<T>;
    T* dxp = dx.data<T>();
    const T* dyp = dy.data<T>();
    const int32_t* ip = indices.data<int32_t>();
#pragma omp parallel reduction(|| : index_out_of_range)
    {
      std::vector<S> sums(std::is_same_v<T, S> ? 0 : HW);
#pragma omp for schedule(static)
      for (int64_t plane = 0; plane < planes; ++plane) {
        T* dx_plane = dxp + plane * HW;
        S* sum = sums.data();
        if constexpr (std::is_same_v<T, S>) sum = dx_plane;
        const T* dy_plane = dyp + plane * PQ;
        const int32_t* index = ip + plane * PQ;
        std::fill_n(sum, HW, S(0));
        for (int64_t o = 0; o < PQ; ++o) {
          if (index[o] < 0 || index[o] >= HW) {
            index_out_of_range = true;
            continue;
          }
          sum[index[o]] += widen(dy_plane[o]);
        }
        if constexpr (!std::is_same_v<T, S>)
          for (int64_t i = 0; i < HW; ++i) dx_plane[i] = narrow<T>(sum[i]);
      }
    }
  });
  RG_CHECK(!index_out_of_range, op, ": an index lies outside the ", dx.size(2), "x", dx.size(3),
           " input plane; pass the indices maxpool2d_forward produced for this input");
}

// y[n, c] = mean of x[n, c, :, :]; x: (N, C, H, W) -> y: (N, C, 1, 1)
void global_avgpool_forward(Tensor& y, const Tensor& x) {
  constexpr const char* op = "global_avgpool_forward";
  check_global_pool(x, "x", y, "y", op);
  const int64_t HW = x.size(2) * x.size(3), planes = x.size(0) * x.size(1);
  RG_CHECK_GT(HW, 0, op, ": empty input plane in ", x.shape().str());
  dispatch_float_or_bf16(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t plane = 0; plane < planes; ++plane) {
      const T* src = xp + plane * HW;
      double sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t i = 0; i < HW; ++i) sum += widen(src[i]);
      yp[plane] = narrow<T>(static_cast<ComputeType<T>>(sum / static_cast<double>(HW)));
    }
  });
}

// dx[n, c, h, w] = dy[n, c] / (H W); dy: (N, C, 1, 1) -> dx: (N, C, H, W)
void global_avgpool_backward(Tensor& dx, const Tensor& dy) {
  constexpr const char* op = "global_avgpool_backward";
  check_global_pool(dx, "dx", dy, "dy", op);
  const int64_t HW = dx.size(2) * dx.size(3), planes = dx.size(0) * dx.size(1);
  dispatch_float_or_bf16(dx.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    T* dxp = dx.data<T>();
    const T* dyp = dy.data<T>();
#pragma omp parallel for schedule(static)
    for (int64_t plane = 0; plane < planes; ++plane) {
      const T g = narrow<T>(widen(dyp[plane]) / static_cast<ComputeType<T>>(HW));
      T* dst = dxp + plane * HW;
#pragma omp simd
      for (int64_t i = 0; i < HW; ++i) dst[i] = g;
    }
  });
}

}  // namespace ringgrad::kernels::cpu
