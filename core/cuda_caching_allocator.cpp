// Bookkeeping of the CUDA caching allocator (see core/cuda_caching_allocator.h). No CUDA here:
// the backing allocator is injected, so this file is built and tested in every configuration.
#include "core/cuda_caching_allocator.h"

#include "core/error.h"

namespace ringgrad {

size_t cuda_size_class(size_t bytes) {
  if (bytes == 0) return kSmallRound;
  const size_t round = bytes < kSmallRequest ? kSmallRound : kLargeRound;
  return (bytes + round - 1) / round * round;
}

CudaCachingAllocator::CudaCachingAllocator(BackingAllocator backing, bool enabled)
    : backing_(std::move(backing)), enabled_(enabled) {}

CudaCachingAllocator::~CudaCachingAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  release_free_blocks_locked();
}

void* CudaCachingAllocator::allocate(size_t bytes, Stream stream) {
  // Disabled: the exact size (at least one byte, so every block has its own address).
  const size_t size = enabled_ ? cuda_size_class(bytes) : (bytes == 0 ? 1 : bytes);
  std::lock_guard<std::mutex> lock(mu_);
  void* ptr = nullptr;
  if (enabled_) {
    auto it = free_.find(FreeKey(stream, size));
    if (it != free_.end()) {
      ptr = it->second.back();
      it->second.pop_back();
      if (it->second.empty()) free_.erase(it);
      stats_.bytes_cached -= size;
      ++stats_.hits;
    }
  }
  if (!ptr) ptr = allocate_backing_locked(size);
  live_.emplace(ptr, Block{size, stream});
  stats_.bytes_in_use += size;
  return ptr;
}

void* CudaCachingAllocator::allocate_backing_locked(size_t size) {
  void* ptr = backing_.allocate(size);
  if (!ptr && stats_.bytes_cached > 0) {  // out of memory: give the cache back and retry once
    release_free_blocks_locked();
    ptr = backing_.allocate(size);
  }
  if (!ptr)
    RG_THROW(Error, "CUDA out of memory allocating ", size, " bytes (", stats_.bytes_in_use,
             " bytes in use by tensors, the cache already emptied)");
  ++stats_.backing_allocations;
  return ptr;
}

void CudaCachingAllocator::release(void* ptr) {
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(ptr);
  if (it == live_.end())
    RG_THROW(InvalidArgument, "CUDA caching allocator: release of ", ptr,
             ", a pointer it did not hand out or already released");
  const Block block = it->second;
  live_.erase(it);
  stats_.bytes_in_use -= block.size;
  if (enabled_) {
    free_[FreeKey(block.stream, block.size)].push_back(ptr);
    stats_.bytes_cached += block.size;
  } else {
    backing_.release(ptr);
    ++stats_.backing_releases;
  }
}

void CudaCachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  release_free_blocks_locked();
}

CachingAllocatorStats CudaCachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CudaCachingAllocator::release_free_blocks_locked() {
  for (auto& [key, ptrs] : free_) {
    for (void* p : ptrs) {
      backing_.release(p);
      ++stats_.backing_releases;
    }
    stats_.bytes_cached -= key.second * ptrs.size();
  }
  free_.clear();
}

}  // namespace ringgrad
