// 2-D convolution through cuDNN (--conv-impl cudnn), forward and backward, float32, float16 and
// bfloat16 with float32 accumulation: the reference the hand-written im2col + GEMM kernels
// (conv2d.cu) are compared against. One cuDNN handle per device on the compute stream; the
// algorithm is cuDNN's heuristic first choice, with its workspace from the caching allocator.
// float32 convolutions are restricted to FMA kernels (no TF32), so they match the CPU.
#include <cudnn.h>

#include <array>
#include <mutex>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace ringgrad::kernels::cuda {

namespace {

constexpr int kMaxDevices = 64;

// Never destroyed, as the cuBLAS handles (cublas_gemm.cu).
cudnnHandle_t handle_for(int device) {
  static std::array<std::once_flag, kMaxDevices> once;
  static std::array<cudnnHandle_t, kMaxDevices> handles{};
  RG_CHECK(device >= 0 && device < kMaxDevices, "CUDA device ", device, " out of range");
  std::call_once(once[device], [device] {
    CudaDeviceGuard guard(device);
    CUDNN_CHECK(cudnnCreate(&handles[device]));
    CUDNN_CHECK(
        cudnnSetStream(handles[device], static_cast<cudaStream_t>(cuda_compute_stream(device))));
  });
  return handles[device];
}

cudnnDataType_t cudnn_type(DType t) {
  switch (t) {
    case DType::f32:
      return CUDNN_DATA_FLOAT;
    case DType::f16:
      return CUDNN_DATA_HALF;
    case DType::bf16:
      return CUDNN_DATA_BFLOAT16;
    default:
      break;
  }
  RG_THROW(InvalidArgument, "cuDNN conv2d: unsupported dtype ", dtype_name(t),
           " (float32, float16, bfloat16)");
}

int as_int(int64_t v) {
  RG_CHECK(v >= 0 && v <= INT32_MAX, "cuDNN conv2d: extent ", v, " does not fit in int");
  return static_cast<int>(v);
}

// The descriptors of one convolution, destroyed with it (RAII over cuDNN's create/destroy).
class ConvDescriptors {
 public:
  ConvDescriptors(const Tensor& x, const Tensor& w, const Conv2dParams& p) {
    const Shape y = conv2d_output_shape(x.shape(), w.shape(), p);
    const cudnnDataType_t t = cudnn_type(x.dtype());
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&x_));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&y_));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&bias_));
    CUDNN_CHECK(cudnnCreateFilterDescriptor(&w_));
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv_));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(x_, CUDNN_TENSOR_NCHW, t, as_int(x.size(0)),
                                           as_int(x.size(1)), as_int(x.size(2)),
                                           as_int(x.size(3))));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(y_, CUDNN_TENSOR_NCHW, t, as_int(y[0]), as_int(y[1]),
                                           as_int(y[2]), as_int(y[3])));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(bias_, CUDNN_TENSOR_NCHW, t, 1, as_int(y[1]), 1, 1));
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(w_, t, CUDNN_TENSOR_NCHW, as_int(w.size(0)),
                                           as_int(w.size(1)), as_int(w.size(2)),
                                           as_int(w.size(3))));
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv_, p.pad_h, p.pad_w, p.stride_h, p.stride_w, 1,
                                                1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionMathType(
        conv_, x.dtype() == DType::f32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));
  }
  ~ConvDescriptors() {
    cudnnDestroyConvolutionDescriptor(conv_);
    cudnnDestroyFilterDescriptor(w_);
    cudnnDestroyTensorDescriptor(bias_);
    cudnnDestroyTensorDescriptor(y_);
    cudnnDestroyTensorDescriptor(x_);
  }
  ConvDescriptors(const ConvDescriptors&) = delete;
  ConvDescriptors& operator=(const ConvDescriptors&) = delete;

  cudnnTensorDescriptor_t x_ = nullptr, y_ = nullptr, bias_ = nullptr;
  cudnnFilterDescriptor_t w_ = nullptr;
  cudnnConvolutionDescriptor_t conv_ = nullptr;
};

// cuDNN's heuristics rank every algorithm; the first one that reports success is used.
template <class Perf>
auto first_usable(const Perf* perf, int count, const char* what) -> decltype(perf->algo) {
  for (int i = 0; i < count; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS) return perf[i].algo;
  RG_THROW(Error, "cuDNN offers no ", what, " algorithm for this convolution");
}

constexpr int kAlgorithms = 16;  // more than cuDNN has of any kind

// A workspace of `bytes` on x's device (nullptr for zero), freed back to the cache after use.
Tensor workspace(const Tensor& x, size_t bytes) {
  return bytes ? Tensor::empty({static_cast<int64_t>(bytes)}, DType::u8, x.device()) : Tensor();
}

}  // namespace

void cudnn_conv2d_forward(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& bias,
                          const Conv2dParams& p) {
  constexpr const char* op = "conv2d_forward (cudnn)";
  RG_CHECK(x.defined() && w.defined(), op, ": x and w must be defined");
  const Shape ys = conv2d_output_shape(x.shape(), w.shape(), p);
  check_operand(w, w.shape(), x.dtype(), op, "w");
  check_operand(y, ys, x.dtype(), op, "y");
  if (bias.defined()) check_operand(bias, {ys[1]}, x.dtype(), op, "bias");
  if (x.size(0) == 0) return;
  Launch l(x);
  cudnnHandle_t h = handle_for(x.device().index);
  ConvDescriptors d(x, w, p);
  cudnnConvolutionFwdAlgoPerf_t perf[kAlgorithms];
  int found = 0;
  CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x_, d.w_, d.conv_, d.y_, kAlgorithms,
                                                     &found, perf));
  const cudnnConvolutionFwdAlgo_t algo = first_usable(perf, found, "forward");
  size_t bytes = 0;
  CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(h, d.x_, d.w_, d.conv_, d.y_, algo, &bytes));
  Tensor ws = workspace(x, bytes);
  const float one = 1, zero = 0;
  CUDNN_CHECK(cudnnConvolutionForward(h, &one, d.x_, x.raw_data(), d.w_, w.raw_data(), d.conv_,
                                      algo, ws.raw_data(), bytes, &zero, d.y_, y.raw_data()));
  if (bias.defined())
    CUDNN_CHECK(cudnnAddTensor(h, &one, d.bias_, bias.raw_data(), &one, d.y_, y.raw_data()));
}

void cudnn_conv2d_backward(Tensor& dx, Tensor& dw, Tensor& dbias, const Tensor& dy, const Tensor& x,
                           const Tensor& w, const Conv2dParams& p) {
  constexpr const char* op = "conv2d_backward (cudnn)";
  RG_CHECK(x.defined() && w.defined(), op, ": x and w must be defined");
  const Shape ys = conv2d_output_shape(x.shape(), w.shape(), p);
  check_operand(w, w.shape(), x.dtype(), op, "w");
  check_operand(dy, ys, x.dtype(), op, "dy");
  if (dx.defined()) check_operand(dx, x.shape(), x.dtype(), op, "dx");
  if (dw.defined()) check_operand(dw, w.shape(), x.dtype(), op, "dw");
  if (dbias.defined()) check_operand(dbias, {ys[1]}, x.dtype(), op, "dbias");
  if (x.size(0) == 0) {  // an empty batch contributes nothing
    if (dw.defined()) dw.zero_();
    if (dbias.defined()) dbias.zero_();
    return;
  }
  Launch l(x);
  cudnnHandle_t h = handle_for(x.device().index);
  ConvDescriptors d(x, w, p);
  const float one = 1, zero = 0;
  int found = 0;
  if (dbias.defined())
    CUDNN_CHECK(cudnnConvolutionBackwardBias(h, &one, d.y_, dy.raw_data(), &zero, d.bias_,
                                             dbias.raw_data()));
  if (dw.defined()) {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[kAlgorithms];
    CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x_, d.y_, d.conv_, d.w_,
                                                              kAlgorithms, &found, perf));
    const cudnnConvolutionBwdFilterAlgo_t algo = first_usable(perf, found, "filter gradient");
    size_t bytes = 0;
    CUDNN_CHECK(
        cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x_, d.y_, d.conv_, d.w_, algo, &bytes));
    Tensor ws = workspace(x, bytes);
    CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, &one, d.x_, x.raw_data(), d.y_, dy.raw_data(),
                                               d.conv_, algo, ws.raw_data(), bytes, &zero, d.w_,
                                               dw.raw_data()));
  }
  if (dx.defined()) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[kAlgorithms];
    CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w_, d.y_, d.conv_, d.x_,
                                                            kAlgorithms, &found, perf));
    const cudnnConvolutionBwdDataAlgo_t algo = first_usable(perf, found, "input gradient");
    size_t bytes = 0;
    CUDNN_CHECK(
        cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w_, d.y_, d.conv_, d.x_, algo, &bytes));
    Tensor ws = workspace(x, bytes);
    CUDNN_CHECK(cudnnConvolutionBackwardData(h, &one, d.w_, w.raw_data(), d.y_, dy.raw_data(),
                                             d.conv_, algo, ws.raw_data(), bytes, &zero, d.x_,
                                             dx.raw_data()));
  }
}

}  // namespace ringgrad::kernels::cuda
