// CudaCachingAllocator: the bookkeeping of the CUDA caching allocator, in plain C++ so the CPU
// tests drive it with a fake backing allocator. Freed blocks go back to a free list keyed by
// (stream, size class) instead of to cudaFree; a later request of the same class on the same
// stream reuses one. Thread-safe (one mutex). The CUDA side lives in core/cuda_memory.cpp.
#pragma once
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ringgrad {

// What the cache sits on: cudaMalloc/cudaFree in production, a counting fake in tests.
// allocate returns nullptr when the device is out of memory (the cache then frees its free
// blocks and retries once) and may throw for any other failure. release must not throw.
struct BackingAllocator {
  std::function<void*(size_t bytes)> allocate;
  std::function<void(void* ptr)> release;
};

// Size classes, as PyTorch's allocator: requests below 1 MiB round up to 512 B, larger ones to
// 2 MiB, so nearby sizes share blocks and the number of distinct lists stays small.
constexpr size_t kSmallRequest = size_t(1) << 20;
constexpr size_t kSmallRound = 512;
constexpr size_t kLargeRound = size_t(2) << 20;
size_t cuda_size_class(size_t bytes);

struct CachingAllocatorStats {
  size_t bytes_in_use = 0;  // handed out and not released (size classes; exact when disabled)
  size_t bytes_cached = 0;  // on free lists
  size_t hits = 0;          // requests served from a free list
  size_t backing_allocations = 0;
  size_t backing_releases = 0;
};

class CudaCachingAllocator {
 public:
  using Stream = const void*;  // a cudaStream_t, opaque here; nullptr is the default stream

  // enabled == false passes every call straight to the backing allocator with the exact size
  // asked for (RINGGRAD_CUDA_CACHE=0), so compute-sanitizer sees every overrun.
  CudaCachingAllocator(BackingAllocator backing, bool enabled);
  ~CudaCachingAllocator();  // returns every cached block to the backing allocator
  CudaCachingAllocator(const CudaCachingAllocator&) = delete;
  CudaCachingAllocator& operator=(const CudaCachingAllocator&) = delete;

  // A block of at least `bytes` (0 allowed) for use on `stream`; throws Error when even an
  // emptied cache cannot get one.
  void* allocate(size_t bytes, Stream stream);
  // Back to the free list of the stream it was allocated on. The block may be reused by the next
  // allocate on that stream without synchronisation: work queued on one stream runs in order.
  // A block used on another stream must be synchronised with its own stream before release.
  // Unknown pointers throw InvalidArgument; nullptr is ignored.
  void release(void* ptr);
  void empty_cache();  // every free block back to the backing allocator
  CachingAllocatorStats stats() const;
  bool enabled() const { return enabled_; }

 private:
  struct Block {
    size_t size;  // the size class (the exact request when disabled)
    Stream stream;
  };
  using FreeKey = std::pair<Stream, size_t>;
  void* allocate_backing_locked(size_t size);
  void release_free_blocks_locked();

  BackingAllocator backing_;
  const bool enabled_;
  mutable std::mutex mu_;
  std::unordered_map<void*, Block> live_;
  std::map<FreeKey, std::vector<void*>> free_;
  CachingAllocatorStats stats_;
};

}  // namespace ringgrad
