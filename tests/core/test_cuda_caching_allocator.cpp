// Tests for the caching allocator's bookkeeping (core/cuda_caching_allocator.cpp) with a fake
// backing allocator that hands out host blocks, counts calls and can be made to run out of
// memory. The real device is exercised by tests/gpu.
#include <doctest/doctest.h>

#include <cstdlib>
#include <map>
#include <set>

#include "core/cuda_caching_allocator.h"
#include "core/error.h"

using namespace ringgrad;

namespace {

// Host memory standing in for the device: at most `capacity` bytes live at once, then
// allocate returns nullptr (out of memory).
struct FakeDevice {
  size_t capacity = size_t(1) << 30;
  size_t used = 0;
  std::set<void*> live;
  std::map<void*, size_t> sizes;
  int allocations = 0, releases = 0;

  BackingAllocator backing() {
    BackingAllocator b;
    b.allocate = [this](size_t bytes) -> void* {
      if (used + bytes > capacity) return nullptr;
      void* p = std::malloc(bytes);
      live.insert(p);
      sizes[p] = bytes;
      used += bytes;
      ++allocations;
      return p;
    };
    b.release = [this](void* p) {
      REQUIRE(live.count(p) == 1);
      live.erase(p);
      used -= sizes[p];
      sizes.erase(p);
      ++releases;
      std::free(p);
    };
    return b;
  }
};

// Two distinct stream handles; the allocator never dereferences them.
int stream_a_tag, stream_b_tag;
const void* const kStreamA = &stream_a_tag;
const void* const kStreamB = &stream_b_tag;

}  // namespace

TEST_CASE("cuda caching allocator: size classes round to 512 B below 1 MiB, to 2 MiB above") {
  CHECK(cuda_size_class(0) == 512);
  CHECK(cuda_size_class(1) == 512);
  CHECK(cuda_size_class(512) == 512);
  CHECK(cuda_size_class(513) == 1024);
  CHECK(cuda_size_class(kSmallRequest - 1) == kSmallRequest);
  CHECK(cuda_size_class(kSmallRequest) == kLargeRound);
  CHECK(cuda_size_class(kLargeRound + 1) == 2 * kLargeRound);
}

TEST_CASE("cuda caching allocator: a released block is reused on the same stream and class") {
  FakeDevice dev;
  CudaCachingAllocator cache(dev.backing(), /*enabled=*/true);
  void* a = cache.allocate(1000, kStreamA);
  cache.release(a);
  CHECK(dev.releases == 0);                  // kept, not freed
  void* b = cache.allocate(1024, kStreamA);  // 1000 and 1024 share the 1024 B class
  CHECK(b == a);
  CHECK(dev.allocations == 1);
  const CachingAllocatorStats s = cache.stats();
  CHECK(s.hits == 1);
  CHECK(s.bytes_in_use == 1024);
  CHECK(s.bytes_cached == 0);
  void* c = cache.allocate(2000, kStreamA);  // another class: a new block
  CHECK(c != a);
  CHECK(dev.allocations == 2);
  cache.release(b);
  cache.release(c);
}

TEST_CASE("cuda caching allocator: no reuse across streams") {
  FakeDevice dev;
  CudaCachingAllocator cache(dev.backing(), true);
  void* a = cache.allocate(4096, kStreamA);
  cache.release(a);
  void* b = cache.allocate(4096, kStreamB);
  CHECK(b != a);
  CHECK(dev.allocations == 2);
  CHECK(cache.stats().hits == 0);
  void* c = cache.allocate(4096, kStreamA);  // stream A's block is still there for A
  CHECK(c == a);
  cache.release(b);
  cache.release(c);
}

TEST_CASE("cuda caching allocator: out of memory empties the cache and retries once") {
  FakeDevice dev;
  dev.capacity = 3 * kLargeRound;
  CudaCachingAllocator cache(dev.backing(), true);
  void* a = cache.allocate(kLargeRound, kStreamA);
  void* b = cache.allocate(kLargeRound, kStreamA);
  cache.release(a);
  cache.release(b);
  CHECK(cache.stats().bytes_cached == 2 * kLargeRound);
  // 3 x 2 MiB does not fit next to the 4 MiB cached: the cache gives them back, then it fits.
  void* big = cache.allocate(3 * kLargeRound, kStreamA);
  CHECK(big != nullptr);
  CHECK(dev.releases == 2);
  CHECK(cache.stats().bytes_cached == 0);
  CHECK(cache.stats().bytes_in_use == 3 * kLargeRound);
  // Still too much with nothing cached: an Error that says out of memory.
  CHECK_THROWS_WITH_AS(cache.allocate(kLargeRound, kStreamA),
                       doctest::Contains("CUDA out of memory"), Error);
  cache.release(big);
}

TEST_CASE("cuda caching allocator: disabled, every call reaches the backing allocator") {
  FakeDevice dev;
  CudaCachingAllocator cache(dev.backing(), /*enabled=*/false);
  CHECK_FALSE(cache.enabled());
  void* a = cache.allocate(1000, kStreamA);
  CHECK(dev.sizes[a] == 1000);  // the exact size, so a sanitizer sees overruns
  cache.release(a);
  CHECK(dev.releases == 1);
  void* b = cache.allocate(1000, kStreamA);
  CHECK(dev.allocations == 2);
  const CachingAllocatorStats s = cache.stats();
  CHECK(s.hits == 0);
  CHECK(s.bytes_cached == 0);
  CHECK(s.bytes_in_use == 1000);
  cache.release(b);
  CHECK(dev.live.empty());
}

TEST_CASE("cuda caching allocator: stats, empty_cache and destruction return every block") {
  FakeDevice dev;
  {
    CudaCachingAllocator cache(dev.backing(), true);
    void* a = cache.allocate(100, kStreamA);
    void* b = cache.allocate(kSmallRequest + 1, kStreamB);
    void* c = cache.allocate(0, kStreamA);
    CHECK(c != a);
    CachingAllocatorStats s = cache.stats();
    CHECK(s.bytes_in_use == 512 + kLargeRound + 512);
    CHECK(s.backing_allocations == 3);
    cache.release(a);
    cache.release(b);
    s = cache.stats();
    CHECK(s.bytes_in_use == 512);
    CHECK(s.bytes_cached == 512 + kLargeRound);
    cache.empty_cache();
    s = cache.stats();
    CHECK(s.bytes_cached == 0);
    CHECK(s.backing_releases == 2);
    cache.release(c);  // cached again; the destructor frees it
  }
  CHECK(dev.live.empty());
  CHECK(dev.releases == 3);
}

TEST_CASE("cuda caching allocator: an unknown or twice-released pointer throws") {
  FakeDevice dev;
  CudaCachingAllocator cache(dev.backing(), true);
  int not_from_cache = 0;
  CHECK_THROWS_WITH_AS(cache.release(&not_from_cache), doctest::Contains("did not hand out"),
                       InvalidArgument);
  void* a = cache.allocate(64, kStreamA);
  cache.release(a);
  CHECK_THROWS_AS(cache.release(a), InvalidArgument);
  cache.release(nullptr);  // ignored, as free(nullptr)
}
