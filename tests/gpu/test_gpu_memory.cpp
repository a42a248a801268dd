// Device memory on a real GPU (core/cuda_memory.cpp): tensors come from the caching allocator
// and go back to it, the compute stream exists, pinned buffers round-trip data, copies and
// fills work, and LOCAL_RANK picks the device.
#include <cstdlib>
#include <cstring>

#include "tests/gpu/gpu_fixtures.h"

using namespace ringgrad;
using namespace ringgrad::testing;

TEST_CASE("gpu memory: a released tensor's block is reused by the next of its size class") {
  if (skip_without_cuda()) return;
  const CachingAllocatorStats before = cuda_allocator_stats(0);
  void* first = nullptr;
  {
    Tensor t = empty_gpu({1000});  // 4000 B -> the 4096 B class
    first = t.raw_data();
    CHECK(cuda_allocator_stats(0).bytes_in_use >= before.bytes_in_use + 4096);
  }
  CHECK(cuda_allocator_stats(0).bytes_cached >= 4096);
  Tensor again = empty_gpu({1020});  // same class, same stream
  CHECK(again.raw_data() == first);
  CHECK(cuda_allocator_stats(0).hits > before.hits);
  cuda_empty_cache(0);
  CHECK(cuda_allocator_stats(0).bytes_cached == 0);
}

TEST_CASE("gpu memory: copies, zero_ and fill_ on the compute stream") {
  if (skip_without_cuda()) return;
  CHECK(cuda_compute_stream(0) != nullptr);
  Tensor host = Tensor::from_vector<float>({1, 2, 3, 4, 5}, {5});
  Tensor dev = on_gpu(host);
  CHECK(dev.is_cuda());
  CHECK(dev.to_vector<float>() == host.to_vector<float>());
  Tensor copy = dev.clone();
  CHECK(copy.raw_data() != dev.raw_data());
  CHECK(copy.to_vector<float>() == host.to_vector<float>());
  copy.fill_(2.5);
  CHECK(copy.to_vector<float>() == std::vector<float>(5, 2.5f));
  copy.zero_();
  CHECK(copy.to_vector<float>() == std::vector<float>(5, 0.0f));
  CHECK(dev.narrow(1, 2).to_vector<float>() == std::vector<float>{2, 3});
}

TEST_CASE("gpu memory: a pinned buffer round-trips through the device") {
  if (skip_without_cuda()) return;
  PinnedBuffer pinned(64 * sizeof(float));
  REQUIRE(pinned.data() != nullptr);
  auto* p = static_cast<float*>(pinned.data());
  for (int i = 0; i < 64; ++i) p[i] = static_cast<float>(i) * 0.5f;
  Tensor dev = empty_gpu({64});
  cuda_copy(dev.raw_data(), pinned.data(), pinned.bytes(), CopyKind::host_to_device, 0);
  std::memset(pinned.data(), 0, pinned.bytes());
  cuda_copy(pinned.data(), dev.raw_data(), pinned.bytes(), CopyKind::device_to_host, 0);
  CHECK(p[63] == 31.5f);
  PinnedBuffer moved(std::move(pinned));
  CHECK(moved.data() == p);
  CHECK(pinned.data() == nullptr);
}

TEST_CASE("gpu memory: LOCAL_RANK selects the device, one past the last is an error") {
  if (skip_without_cuda()) return;
  const char* saved = std::getenv("LOCAL_RANK");
  const std::string saved_value = saved ? saved : "";
  ::setenv("LOCAL_RANK", "0", 1);
  CHECK(cuda_select_device_from_env() == 0);
  ::setenv("LOCAL_RANK", std::to_string(cuda_device_count()).c_str(), 1);
  CHECK_THROWS_WITH_AS(cuda_select_device_from_env(), doctest::Contains("CUDA device(s)"), Error);
  if (saved)
    ::setenv("LOCAL_RANK", saved_value.c_str(), 1);
  else
    ::unsetenv("LOCAL_RANK");
}
