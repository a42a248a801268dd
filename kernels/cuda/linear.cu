// Fully connected layer on CUDA (float32, float16, bfloat16): cuBLAS GEMMs accumulating in
// float32, plus the bias kernels.
//   forward   y (N, OUT) = x (N, IN) w^T + bias
//   backward  dx = dy w,  dw = dy^T x,  dbias = column sums of dy
#include "kernels/cuda/cublas_gemm.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/linear_sizes.h"

namespace ringgrad::kernels::cuda {

namespace {

// linear_sizes (kernels/linear_sizes.h), then w of x's dtype.
LinearSizes checked_sizes(const Tensor& x, const Tensor& w, const char* op) {
  const LinearSizes s = linear_sizes(x, w, op);
  check_operand(w, w.shape(), x.dtype(), op, "w");
  return s;
}

// Every row of y starts as bias; the GEMM then adds x w^T (beta = 1).
template <class T>
__global__ void broadcast_bias_kernel(T* y, const T* bias, int64_t N, int64_t OUT) {
  for (int64_t i = global_thread(); i < N * OUT; i += grid_threads()) y[i] = bias[i % OUT];
}

// One thread per column: dbias[o] = sum over n of dy[n][o], in double as the CPU; consecutive
// threads read consecutive addresses of each row.
template <class T>
__global__ void column_sums_kernel(T* dbias, const T* dy, int64_t N, int64_t OUT) {
  for (int64_t o = global_thread(); o < OUT; o += grid_threads()) {
    double sum = 0;
    for (int64_t n = 0; n < N; ++n) sum += as_float(dy[n * OUT + o]);
    dbias[o] = convert_element<T>(static_cast<float>(sum));
  }
}

}  // namespace

void linear_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias) {
  constexpr const char* op = "linear_forward";
  const LinearSizes s = checked_sizes(x, w, op);
  check_operand(y, {s.N, s.OUT}, x.dtype(), op, "y");
  if (bias.defined()) check_operand(bias, {s.OUT}, x.dtype(), op, "bias");
  dispatch_cuda_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    Launch l(x);
    if (bias.defined()) {
      broadcast_bias_kernel<<<blocks_for(s.N * s.OUT), kThreads, 0, l.stream>>>(
          y.data<T>(), bias.data<T>(), s.N, s.OUT);
      CUDA_CHECK_LAUNCH("broadcast_bias_kernel");
    }
    gemm(x.device().index, x.dtype(), Op::none, Op::transpose, s.N, s.OUT, s.IN, 1.0f, x.data<T>(),
         s.IN, w.data<T>(), s.IN, bias.defined() ? 1.0f : 0.0f, y.data<T>(), s.OUT);
  });
}

void linear_backward(Tensor& dx, Tensor& dw, Tensor& dbias, const Tensor& dy, const Tensor& x,
                     const Tensor& w) {
  constexpr const char* op = "linear_backward";
  const LinearSizes s = checked_sizes(x, w, op);
  check_backward_operands(dx, dw, dbias, dy, x, w, s, op, check_operand);
  dispatch_cuda_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    Launch l(x);
    const int device = x.device().index;
    if (dx.defined())
      gemm(device, x.dtype(), Op::none, Op::none, s.N, s.IN, s.OUT, 1.0f, dy.data<T>(), s.OUT,
           w.data<T>(), s.IN, 0.0f, dx.data<T>(), s.IN);
    if (dw.defined())
      gemm(device, x.dtype(), Op::transpose, Op::none, s.OUT, s.IN, s.N, 1.0f, dy.data<T>(), s.OUT,
           x.data<T>(), s.IN, 0.0f, dw.data<T>(), s.IN);
    if (dbias.defined()) {
      column_sums_kernel<<<blocks_for(s.OUT), kThreads, 0, l.stream>>>(dbias.data<T>(),
                                                                       dy.data<T>(), s.N, s.OUT);
      CUDA_CHECK_LAUNCH("column_sums_kernel");
    }
  });
}

}  // namespace ringgrad::kernels::cuda
