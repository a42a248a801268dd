// The host caching allocator: a free list per rounded size, behind one mutex (allocations are
// per tensor, not per element, so contention is negligible).
#include "core/cpu_allocator.h"

#include <sys/mman.h>

#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/env.h"
#include "core/error.h"

// Note [Huge pages]
// A large tensor on 4 KiB pages costs one TLB entry per 4 KiB, and every copy the kernel makes
// of it for another process (process_vm_readv in the shared-memory transport, which pins the
// source page by page) walks 512 page entries per 2 MiB. Debian's kernels hand out transparent
// huge pages only to memory that asks (/sys/kernel/mm/transparent_hugepage/enabled is
// "madvise"), so large blocks start on a 2 MiB boundary and ask with MADV_HUGEPAGE; where huge
// pages are off the advice is ignored. Measured in docs/measurements.md (shared memory section).
// Small blocks stay on ordinary pages: rounding them up would waste memory for no gain.

namespace ringgrad {

namespace {

size_t round_up(size_t bytes) {
  size_t b = bytes == 0 ? kCpuAlignment : bytes;
  return (b + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
}

struct Cache {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free_lists;
  CpuCacheStats stats;
  bool enabled = env_bool("RINGGRAD_CPU_CACHE", true);
};

Cache& cache() {
  static Cache* c = new Cache;  // leaked on purpose: tensors may be released during exit
  return *c;
}

}  // namespace

void* cpu_allocate(size_t bytes) {
  const size_t size = round_up(bytes);
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    c.stats.bytes_in_use += size;
    auto it = c.free_lists.find(size);
    if (it != c.free_lists.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      c.stats.cache_hits++;
      c.stats.bytes_cached -= size;
      return p;
    }
    c.stats.system_allocations++;
  }
  const bool huge = size >= kHugePageBytes;
  // posix_memalign, not aligned_alloc: the latter wants the size a multiple of the alignment,
  // which a 2 MiB alignment would round up (ASan reports it), while the start is all we need.
  void* p = nullptr;
  if (::posix_memalign(&p, huge ? kHugePageBytes : kCpuAlignment, size) != 0) p = nullptr;
  if (!p) RG_THROW(Error, "out of host memory allocating ", size, " bytes");
  if (huge) ::madvise(p, size, MADV_HUGEPAGE);  // advice only: no huge pages is not an error
  return p;
}

void cpu_release(void* ptr, size_t bytes) {
  if (!ptr) return;
  const size_t size = round_up(bytes);
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.stats.bytes_in_use -= size;
  if (!c.enabled) {
    std::free(ptr);
    return;
  }
  c.free_lists[size].push_back(ptr);
  c.stats.bytes_cached += size;
}

CpuCacheStats cpu_cache_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.stats;
}

}  // namespace ringgrad
