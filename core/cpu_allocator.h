// Host memory: 64-byte aligned blocks, cached by exact size and reused on release. A training
// step asks for the same sizes every iteration, so after the first one it never calls malloc.
// Blocks of kHugePageBytes and more start on a huge-page boundary and are offered to the
// kernel's transparent huge pages (Note [Huge pages] in cpu_allocator.cpp).
// RINGGRAD_CPU_CACHE=0 turns the cache off (every release frees), for leak checkers.
// Thread-safe.
#pragma once
#include <cstddef>

namespace ringgrad {

constexpr size_t kCpuAlignment = 64;
constexpr size_t kHugePageBytes = size_t{2} << 20;  // x86-64's transparent huge page

void* cpu_allocate(size_t bytes);           // never null; throws Error on exhaustion
void cpu_release(void* ptr, size_t bytes);  // bytes must be what was asked for

struct CpuCacheStats {
  size_t system_allocations = 0;  // calls that reached the system allocator
  size_t cache_hits = 0;
  size_t bytes_cached = 0;  // held in free lists right now
  size_t bytes_in_use = 0;
};
CpuCacheStats cpu_cache_stats();

}  // namespace ringgrad
