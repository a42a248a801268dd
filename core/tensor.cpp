// Tensor construction, views, copies and casts.
#include "core/tensor.h"

#include "core/cuda_memory.h"

namespace ringgrad {

namespace {

template <class F>
void dispatch_dtype(DType t, F&& f) {
  switch (t) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    case DType::f16: return f(Half{});
    case DType::bf16: return f(BFloat16{});
    case DType::i32: return f(int32_t{});
    case DType::i64: return f(int64_t{});
    case DType::u8: return f(uint8_t{});
  }
}

template <class T>
double to_double(T v) {
  return static_cast<double>(v);
}
template <>
double to_double(Half v) {
  return half_to_float(v);
}
template <>
double to_double(BFloat16 v) {
  return bf16_to_float(v);
}
template <class T>
T from_double(double v) {
  return static_cast<T>(v);
}
template <>
Half from_double(double v) {
  return float_to_half(static_cast<float>(v));
}
template <>
BFloat16 from_double(double v) {
  return float_to_bf16(static_cast<float>(v));
}

}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  return wrap(std::make_shared<Storage>(bytes, device), 0, shape, dtype);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.zero_();
  return t;
}

Tensor Tensor::full(const Shape& shape, double value, DType dtype) {
  Tensor t = empty(shape, dtype);
  t.fill_(value);
  return t;
}

Tensor Tensor::wrap(std::shared_ptr<Storage> storage, size_t offset_bytes, const Shape& shape,
                    DType dtype) {
  RG_CHECK(storage != nullptr, "Tensor::wrap needs storage");
  RG_CHECK_LE(offset_bytes + static_cast<size_t>(shape.numel()) * dtype_size(dtype),
              storage->bytes(), "view ", shape.str(), " does not fit in its storage");
  Tensor t;
  t.storage_ = std::move(storage);
  t.offset_ = offset_bytes;
  t.shape_ = shape;
  t.dtype_ = dtype;
  return t;
}

double Tensor::item() const {
  RG_CHECK_EQ(numel(), 1, "item() needs a one-element tensor, got shape ", shape_.str());
  Tensor host = to(Device::cpu());
  double out = 0;
  dispatch_dtype(dtype_, [&](auto tag) {
    using T = decltype(tag);
    out = to_double(*static_cast<const T*>(host.raw_data()));
  });
  return out;
}

double Tensor::element(int64_t i) const {
  RG_CHECK(!is_cuda() && i >= 0 && i < numel(), "element(", i, ") of a ", device().str(),
           " tensor of ", numel(), " elements");
  double out = 0;
  dispatch_dtype(dtype_, [&](auto tag) {
    using T = decltype(tag);
    out = to_double(static_cast<const T*>(raw_data())[i]);
  });
  return out;
}

void Tensor::set_element(int64_t i, double value) {
  RG_CHECK(!is_cuda() && i >= 0 && i < numel(), "set_element(", i, ") of a ", device().str(),
           " tensor of ", numel(), " elements");
  dispatch_dtype(dtype_, [&](auto tag) {
    using T = decltype(tag);
    static_cast<T*>(raw_data())[i] = from_double<T>(value);
  });
}

Tensor Tensor::view(const Shape& shape) const {
  RG_CHECK_EQ(shape.numel(), numel(), "view ", shape_.str(), " as ", shape.str());
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::narrow(int64_t start, int64_t length) const {
  RG_CHECK_GE(dim(), 1, "narrow needs at least one dimension");
  RG_CHECK(start >= 0 && length >= 0 && start + length <= shape_[0], "narrow [", start, ", ",
           start + length, ") of dim 0 with extent ", shape_[0]);
  Shape s = shape_;
  s[0] = length;
  const size_t row_bytes = nbytes() / (shape_[0] ? shape_[0] : 1);
  return wrap(storage_, offset_ + static_cast<size_t>(start) * row_bytes, s, dtype_);
}

Tensor Tensor::to(Device device) const {
  if (device == this->device()) return *this;
  Tensor t = empty(shape_, dtype_, device);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return *this;
  RG_CHECK(is_cpu(), "dtype casts of CUDA tensors go through kernels::cast");
  Tensor t = empty(shape_, dtype);
  const int64_t n = numel();
  dispatch_dtype(dtype_, [&](auto src_tag) {
    using S = decltype(src_tag);
    dispatch_dtype(dtype, [&](auto dst_tag) {
      using D = decltype(dst_tag);
      const S* s = static_cast<const S*>(raw_data());
      D* d = static_cast<D*>(t.raw_data());
      for (int64_t i = 0; i < n; ++i) d[i] = from_double<D>(to_double(s[i]));
    });
  });
  return t;
}

Tensor Tensor::clone() const {
  Tensor t = empty(shape_, dtype_, device());
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  RG_CHECK_EQ(numel(), src.numel(), "copy_from: element counts differ (", shape_.str(), " vs ",
              src.shape().str(), ")");
  RG_CHECK(dtype_ == src.dtype_, "copy_from: dtypes differ (", dtype_name(dtype_), " vs ",
           dtype_name(src.dtype_), ")");
  const size_t bytes = nbytes();
  if (bytes == 0 || raw_data() == src.raw_data()) return;
  if (is_cpu() && src.is_cpu()) {
    std::memcpy(raw_data(), src.raw_data(), bytes);
    return;
  }
  CopyKind kind = src.is_cpu() ? CopyKind::host_to_device
                  : is_cpu()   ? CopyKind::device_to_host
                               : CopyKind::device_to_device;
  cuda_copy(raw_data(), src.raw_data(), bytes, kind,
            is_cuda() ? device().index : src.device().index);
}

void Tensor::fill_(double value) {
  if (is_cuda()) {
    // Filled on the host and copied: fill_ seeds backward and initialises buffers, both rare
    // and small next to the kernels, so a device fill kernel would not pay for itself.
    Tensor host = empty(shape_, dtype_);
    host.fill_(value);
    copy_from(host);
    return;
  }
  const int64_t n = numel();
  dispatch_dtype(dtype_, [&](auto tag) {
    using T = decltype(tag);
    T v = from_double<T>(value);
    T* p = static_cast<T*>(raw_data());
    for (int64_t i = 0; i < n; ++i) p[i] = v;
  });
}

void Tensor::zero_() {
  if (nbytes() == 0) return;
  if (is_cuda())
    cuda_memset_zero(raw_data(), nbytes(), device().index);
  else
    std::memset(raw_data(), 0, nbytes());
}

}  // namespace ringgrad
