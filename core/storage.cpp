// Storage allocation by device.
#include "core/storage.h"

#include "core/cpu_allocator.h"
#include "core/cuda_memory.h"
#include "core/error.h"

namespace ringgrad {

Storage::Storage(size_t bytes, Device device) : bytes_(bytes), device_(device) {
  data_ = device.is_cpu() ? cpu_allocate(bytes) : cuda_allocate(bytes, device.index);
}

Storage::Storage(BorrowKey, void* data, size_t bytes, Device device, std::shared_ptr<void> owner)
    : data_(data), bytes_(bytes), device_(device), owned_(false), owner_(std::move(owner)) {}

std::shared_ptr<Storage> Storage::borrow(void* data, size_t bytes, Device device,
                                         std::shared_ptr<void> owner) {
  RG_CHECK(data != nullptr || bytes == 0, "Storage::borrow: null data for ", bytes, " bytes");
  return std::make_shared<Storage>(BorrowKey(), data, bytes, device, std::move(owner));
}

Storage::~Storage() {
  if (!owned_) return;
  if (device_.is_cpu())
    cpu_release(data_, bytes_);
  else
    cuda_release(data_, bytes_, device_.index);
}

Device parse_device(const std::string& s) {
  if (s == "cpu") return Device::cpu();
  if (s == "cuda") return Device::cuda(0);
  if (s.rfind("cuda:", 0) == 0) {
    try {
      size_t used = 0;
      int idx = std::stoi(s.substr(5), &used);
      if (used == s.size() - 5 && idx >= 0) return Device::cuda(idx);
    } catch (const std::exception&) {
    }
  }
  RG_THROW(InvalidArgument, "unknown device '", s, "' (use cpu, cuda or cuda:N)");
}

}  // namespace ringgrad
