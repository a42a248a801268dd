// Storage: one block of bytes on one device. Tensors share it through shared_ptr, so a
// Tensor copy is a refcount increment and views (reshapes, slices, bucket views) alias it.
// Usually it owns the block; a borrowed Storage views memory another framework owns (a
// PyTorch tensor's, for the torch plugin) so collectives run on it without a copy.
#pragma once
#include <cstddef>
#include <memory>

#include "core/device.h"

namespace ringgrad {

class Storage {
  // Only borrow() can name it: the constructor it guards is public so that make_shared (one
  // allocation for the Storage and its count, which a borrow per collective call pays) reaches it.
  struct BorrowKey {
    explicit BorrowKey() = default;
  };

 public:
  Storage(size_t bytes, Device device);  // allocates (CPU cache or CUDA allocator)
  // Views `bytes` at `data` without ever freeing them; `owner` (may be null) is held until this
  // Storage goes, keeping the memory alive while our tensors use it.
  static std::shared_ptr<Storage> borrow(void* data, size_t bytes, Device device,
                                         std::shared_ptr<void> owner);
  Storage(BorrowKey, void* data, size_t bytes, Device device, std::shared_ptr<void> owner);
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
  bool owned_ = true;
  std::shared_ptr<void> owner_;  // a borrowed block's keep-alive
};

}  // namespace ringgrad
