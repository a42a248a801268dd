// Max pooling (with argmax indices) and global average pooling on CUDA, float32, the same
// contracts as kernels/cpu/pool.cpp. x: (N, C, H, W); every (n, c) plane is independent.
#include <cfloat>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/pool_math.h"

namespace ringgrad::kernels::cuda {

namespace {

struct PoolGeometry {  // x (N, C, H, W) -> y (N, C, P, Q)
  int64_t H, W, P, Q;
  int kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w;
};

void check_nchw(const Tensor& t, const char* op, const char* name) {
  RG_CHECK(t.defined(), op, ": ", name, " is undefined");
  RG_CHECK_EQ(t.dim(), 4, op, ": ", name, " must be (N, C, H, W), got shape ", t.shape().str());
  check_f32(t, op, name);
}

// One thread per output: the maximum of its window clipped to the plane, scanned in the CPU's
// order from -inf at the window's first in-bounds position (max_pool_takes: ties keep the
// first, NaN wins), so values and indices match the CPU exactly.
__global__ void maxpool_forward_kernel(float* y, int32_t* indices, const float* x, PoolGeometry g,
                                       int64_t total) {
  for (int64_t i = global_thread(); i < total; i += grid_threads()) {
    const int64_t ow = i % g.Q, oh = i / g.Q % g.P, plane = i / (g.P * g.Q);
    const float* xp = x + plane * g.H * g.W;
    const int64_t h_start = oh * g.stride_h - g.pad_h, w_start = ow * g.stride_w - g.pad_w;
    const int64_t h0 = h_start > 0 ? h_start : 0, w0 = w_start > 0 ? w_start : 0;
    const int64_t h1 = h_start + g.kernel_h < g.H ? h_start + g.kernel_h : g.H;
    const int64_t w1 = w_start + g.kernel_w < g.W ? w_start + g.kernel_w : g.W;
    float best = -INFINITY;
    int64_t best_at = h0 * g.W + w0;
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t w = w0; w < w1; ++w) {
        const float v = xp[h * g.W + w];
        if (max_pool_takes(v, best)) {
          best = v;
          best_at = h * g.W + w;
        }
      }
    y[i] = best;
    indices[i] = static_cast<int32_t>(best_at);
  }
}

// One thread per output: dx[argmax] += dy. Windows overlap when stride < kernel, so the adds
// are atomic (their order, and so the last bit of a sum, varies). dx is zeroed first. Indices
// outside the plane are skipped (the CPU entry point reports them; here that would cost a
// device-to-host round trip per call).
__global__ void maxpool_backward_kernel(float* dx, const float* dy, const int32_t* indices,
                                        int64_t HW, int64_t PQ, int64_t total) {
  for (int64_t o = global_thread(); o < total; o += grid_threads()) {
    const int32_t at = indices[o];
    if (at >= 0 && at < HW) atomicAdd(&dx[o / PQ * HW + at], dy[o]);
  }
}

// One warp per plane: y = mean of the plane's HW values (summed in double, as the CPU).
__global__ void avgpool_forward_kernel(float* y, const float* x, int64_t planes, int64_t HW) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = grid_threads() / 32;
  for (int64_t plane = global_thread() / 32; plane < planes; plane += warps) {
    double sum = 0;
    for (int64_t i = lane; i < HW; i += 32) sum += x[plane * HW + i];
    for (int offset = 16; offset > 0; offset >>= 1)
      sum += __shfl_down_sync(0xffffffffu, sum, offset);
    if (lane == 0) y[plane] = static_cast<float>(sum / static_cast<double>(HW));
  }
}

__global__ void avgpool_backward_kernel(float* dx, const float* dy, int64_t HW, int64_t total) {
  for (int64_t i = global_thread(); i < total; i += grid_threads())
    dx[i] = dy[i / HW] / static_cast<float>(HW);
}

}  // namespace

void maxpool2d_forward(Tensor& y, Tensor& indices, const Tensor& x, const Pool2dParams& p) {
  constexpr const char* op = "maxpool2d_forward";
  check_nchw(x, op, "x");
  const Shape out = pool2d_output_shape(x.shape(), p);
  check_operand(y, out, DType::f32, op, "y");
  check_operand(indices, out, DType::i32, op, "indices");
  RG_CHECK_LE(x.size(2) * x.size(3), INT32_MAX, op, ": input plane too large for int32 indices");
  const PoolGeometry g{x.size(2),  x.size(3),  out[2],     out[3],  p.kernel_h,
                       p.kernel_w, p.stride_h, p.stride_w, p.pad_h, p.pad_w};
  Launch l(x);
  maxpool_forward_kernel<<<blocks_for(y.numel()), kThreads, 0, l.stream>>>(
      y.data<float>(), indices.data<int32_t>(), x.data<float>(), g, y.numel());
  CUDA_CHECK_LAUNCH("maxpool_forward_kernel");
}

void maxpool2d_backward(Tensor& dx, const Tensor& dy, const Tensor& indices) {
  constexpr const char* op = "maxpool2d_backward";
  check_nchw(dx, op, "dx");
  check_nchw(dy, op, "dy");
  check_operand(indices, dy.shape(), DType::i32, op, "indices");
  RG_CHECK(dx.size(0) == dy.size(0) && dx.size(1) == dy.size(1), op, ": dx ", dx.shape().str(),
           " and dy ", dy.shape().str(), " differ in N or C");
  Launch l(dx);
  dx.zero_();
  maxpool_backward_kernel<<<blocks_for(dy.numel()), kThreads, 0, l.stream>>>(
      dx.data<float>(), dy.data<float>(), indices.data<int32_t>(), dx.size(2) * dx.size(3),
      dy.size(2) * dy.size(3), dy.numel());
  CUDA_CHECK_LAUNCH("maxpool_backward_kernel");
}

void global_avgpool_forward(Tensor& y, const Tensor& x) {
  constexpr const char* op = "global_avgpool_forward";
  check_nchw(x, op, "x");
  check_operand(y, Shape{x.size(0), x.size(1), 1, 1}, DType::f32, op, "y");
  const int64_t HW = x.size(2) * x.size(3), planes = x.size(0) * x.size(1);
  RG_CHECK_GT(HW, 0, op, ": empty input plane in ", x.shape().str());
  Launch l(x);
  avgpool_forward_kernel<<<blocks_for(planes * 32), kThreads, 0, l.stream>>>(
      y.data<float>(), x.data<float>(), planes, HW);
  CUDA_CHECK_LAUNCH("avgpool_forward_kernel");
}

void global_avgpool_backward(Tensor& dx, const Tensor& dy) {
  constexpr const char* op = "global_avgpool_backward";
  check_nchw(dx, op, "dx");
  check_operand(dy, Shape{dx.size(0), dx.size(1), 1, 1}, DType::f32, op, "dy");
  Launch l(dx);
  avgpool_backward_kernel<<<blocks_for(dx.numel()), kThreads, 0, l.stream>>>(
      dx.data<float>(), dy.data<float>(), dx.size(2) * dx.size(3), dx.numel());
  CUDA_CHECK_LAUNCH("avgpool_backward_kernel");
}

}  // namespace ringgrad::kernels::cuda
