// 2-D convolution through cuDNN (--conv-impl cudnn), forward and backward, float32, float16 and
// bfloat16 with float32 accumulation: the reference the hand-written im2col + GEMM kernels
// (conv2d.cu) are compared against. One cuDNN handle per device on the compute stream; the
// algorithm is cuDNN's heuristic first choice, with its workspace from the caching allocator.
// float32 convolutions are restricted to FMA kernels (no TF32), so they match the CPU.
#include <cudnn.h>

#include <array>
#include <memory>
#include <mutex>
#include <type_traits>

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
    case DType::f32: return CUDNN_DATA_FLOAT;
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    default: break;
  }
  RG_THROW(InvalidArgument, "cuDNN conv2d: unsupported dtype ", dtype_name(t),
           " (float32, float16, bfloat16)");
}

int as_int(int64_t v) {
  RG_CHECK(v >= 0 && v <= INT32_MAX, "cuDNN conv2d: extent ", v, " does not fit in int");
  return static_cast<int>(v);
}

// Owned cuDNN descriptors: destroyed on scope exit, also when a later cuDNN call throws.
template <class Descriptor>
using Owned = std::unique_ptr<std::remove_pointer_t<Descriptor>, cudnnStatus_t (*)(Descriptor)>;

Owned<cudnnTensorDescriptor_t> tensor_descriptor(cudnnDataType_t t, int64_t n, int64_t c, int64_t h,
                                                 int64_t w) {
  cudnnTensorDescriptor_t d = nullptr;
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&d));
  Owned<cudnnTensorDescriptor_t> owned(d, cudnnDestroyTensorDescriptor);
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, t, as_int(n), as_int(c), as_int(h),
                                         as_int(w)));
  return owned;
}

// The descriptors of one convolution: x, y, bias (1, K, 1, 1), w and the convolution itself.
struct ConvDescriptors {
  ConvDescriptors(const Tensor& x, const Tensor& w, const Conv2dParams& p)
      : type_(cudnn_type(x.dtype())),
        y_shape_(conv2d_output_shape(x.shape(), w.shape(), p)),
        x_(tensor_descriptor(type_, x.size(0), x.size(1), x.size(2), x.size(3))),
        y_(tensor_descriptor(type_, y_shape_[0], y_shape_[1], y_shape_[2], y_shape_[3])),
        bias_(tensor_descriptor(type_, 1, y_shape_[1], 1, 1)),
        w_(nullptr, cudnnDestroyFilterDescriptor),
        conv_(nullptr, cudnnDestroyConvolutionDescriptor) {
    cudnnFilterDescriptor_t wd = nullptr;
    CUDNN_CHECK(cudnnCreateFilterDescriptor(&wd));
    w_.reset(wd);
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(wd, type_, CUDNN_TENSOR_NCHW, as_int(w.size(0)),
                                           as_int(w.size(1)), as_int(w.size(2)),
                                           as_int(w.size(3))));
    cudnnConvolutionDescriptor_t cd = nullptr;
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&cd));
    conv_.reset(cd);
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(cd, p.pad_h, p.pad_w, p.stride_h, p.stride_w, 1, 1,
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionMathType(
        cd, x.dtype() == DType::f32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH));
  }

  cudnnTensorDescriptor_t x() const { return x_.get(); }
  cudnnTensorDescriptor_t y() const { return y_.get(); }
  cudnnTensorDescriptor_t bias() const { return bias_.get(); }
  cudnnFilterDescriptor_t w() const { return w_.get(); }
  cudnnConvolutionDescriptor_t conv() const { return conv_.get(); }

 private:
  cudnnDataType_t type_;
  Shape y_shape_;
  Owned<cudnnTensorDescriptor_t> x_, y_, bias_;
  Owned<cudnnFilterDescriptor_t> w_;
  Owned<cudnnConvolutionDescriptor_t> conv_;
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
  CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x(), d.w(), d.conv(), d.y(), kAlgorithms,
                                                     &found, perf));
  const cudnnConvolutionFwdAlgo_t algo = first_usable(perf, found, "forward");
  size_t bytes = 0;
  CUDNN_CHECK(
      cudnnGetConvolutionForwardWorkspaceSize(h, d.x(), d.w(), d.conv(), d.y(), algo, &bytes));
  Tensor ws = workspace(x, bytes);
  const float one = 1, zero = 0;
  CUDNN_CHECK(cudnnConvolutionForward(h, &one, d.x(), x.raw_data(), d.w(), w.raw_data(), d.conv(),
                                      algo, ws.raw_data(), bytes, &zero, d.y(), y.raw_data()));
  if (bias.defined())
    CUDNN_CHECK(cudnnAddTensor(h, &one, d.bias(), bias.raw_data(), &one, d.y(), y.raw_data()));
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
    CUDNN_CHECK(cudnnConvolutionBackwardBias(h, &one, d.y(), dy.raw_data(), &zero, d.bias(),
                                             dbias.raw_data()));
  if (dw.defined()) {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[kAlgorithms];
    CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x(), d.y(), d.conv(), d.w(),
                                                              kAlgorithms, &found, perf));
    const cudnnConvolutionBwdFilterAlgo_t algo = first_usable(perf, found, "filter gradient");
    size_t bytes = 0;
    CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x(), d.y(), d.conv(), d.w(),
                                                               algo, &bytes));
    Tensor ws = workspace(x, bytes);
    CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, &one, d.x(), x.raw_data(), d.y(), dy.raw_data(),
                                               d.conv(), algo, ws.raw_data(), bytes, &zero, d.w(),
                                               dw.raw_data()));
  }
  if (dx.defined()) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[kAlgorithms];
    CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w(), d.y(), d.conv(), d.x(),
                                                            kAlgorithms, &found, perf));
    const cudnnConvolutionBwdDataAlgo_t algo = first_usable(perf, found, "input gradient");
    size_t bytes = 0;
    CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w(), d.y(), d.conv(), d.x(), algo,
                                                             &bytes));
    Tensor ws = workspace(x, bytes);
    CUDNN_CHECK(cudnnConvolutionBackwardData(h, &one, d.w(), w.raw_data(), d.y(), dy.raw_data(),
                                             d.conv(), algo, ws.raw_data(), bytes, &zero, d.x(),
                                             dx.raw_data()));
  }
}

}  // namespace ringgrad::kernels::cuda
