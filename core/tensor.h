// Tensor: shared Storage + byte offset + Shape + DType, contiguous row-major (NCHW). Copying a
// Tensor is cheap (a refcount); view() and narrow() alias the same bytes. Typed access with
// data<T>() checks the dtype; on a CUDA tensor it returns the device pointer.
#pragma once
#include <cstring>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"
#include "core/storage.h"

namespace ringgrad {

class Tensor {
 public:
  Tensor() = default;

  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::f32);
  // A tensor over existing storage (a view): used for gradient views into flat buckets.
  static Tensor wrap(std::shared_ptr<Storage> storage, size_t offset_bytes, const Shape& shape,
                     DType dtype);
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape) {
    RG_CHECK_EQ(static_cast<int64_t>(values.size()), shape.numel(), "from_vector: size vs shape");
    Tensor t = empty(shape, DTypeOf<T>::value);
    if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
    return t;
  }

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int dim() const { return shape_.size(); }
  int64_t size(int d) const { return shape_[d < 0 ? d + dim() : d]; }
  int64_t numel() const { return shape_.numel(); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }
  bool is_cpu() const { return device().is_cpu(); }
  bool is_cuda() const { return device().is_cuda(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  size_t offset_bytes() const { return offset_; }
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  void* raw_data() const {
    return storage_ ? static_cast<char*>(storage_->data()) + offset_ : nullptr;
  }
  template <class T>
  T* data() const {
    RG_CHECK(dtype_ == DTypeOf<T>::value, "tensor holds ", dtype_name(dtype_), ", asked for ",
             dtype_name(DTypeOf<T>::value));
    return static_cast<T*>(raw_data());
  }
  template <class T>
  std::vector<T> to_vector() const {
    Tensor host = to(Device::cpu());
    const T* p = host.data<T>();
    return std::vector<T>(p, p + numel());
  }
  double item() const;  // value of a one-element tensor, as double
  // Element i (flat index) of a CPU tensor read as double, and written from one with the
  // dtype's rounding: for checks that treat every dtype alike, not for kernels.
  double element(int64_t i) const;
  void set_element(int64_t i, double value);

  Tensor view(const Shape& shape) const;               // same numel, shares storage
  Tensor narrow(int64_t start, int64_t length) const;  // rows [start, start+length) of dim 0
  Tensor to(Device device) const;                      // copy when the device differs, else *this
  Tensor to(DType dtype) const;                        // cast (CPU), or *this when equal
  Tensor clone() const;
  void copy_from(const Tensor& src);  // same numel and dtype; any devices
  void fill_(double value);           // CPU or CUDA
  void zero_();

 private:
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;
  Shape shape_;
  DType dtype_ = DType::f32;
};

}  // namespace ringgrad
