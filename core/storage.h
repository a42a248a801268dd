// Storage: one owned block of bytes on one device. Tensors share it through shared_ptr, so a
// Tensor copy is a refcount increment and views (reshapes, slices, bucket views) alias it.
#pragma once
#include <cstddef>
#include <memory>

#include "core/device.h"

namespace ringgrad {

class Storage {
 public:
  Storage(size_t bytes, Device device);  // allocates (CPU cache or CUDA allocator)
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
};

}  // namespace ringgrad
