// Tests for core/tensor, storage and the CPU caching allocator.
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "core/cpu_allocator.h"
#include "core/tensor.h"
#include "tests/skip.h"

using namespace ringgrad;

TEST_CASE("tensor: shape, dtype, views share storage") {
  Tensor t = Tensor::zeros({2, 3, 4});
  CHECK(t.numel() == 24);
  CHECK(t.dim() == 3);
  CHECK(t.size(-1) == 4);
  CHECK(t.nbytes() == 96);
  CHECK(reinterpret_cast<uintptr_t>(t.raw_data()) % kCpuAlignment == 0);
  Tensor v = t.view({6, 4});
  v.data<float>()[5] = 7.0f;
  CHECK(t.data<float>()[5] == 7.0f);
  Tensor row = t.narrow(1, 1);
  CHECK(row.shape() == Shape{1, 3, 4});
  row.data<float>()[0] = 3.0f;
  CHECK(t.data<float>()[12] == 3.0f);
  CHECK_THROWS_AS(t.view({5, 5}), Error);
  CHECK_THROWS_AS(t.narrow(1, 2), Error);
  CHECK_THROWS_AS(t.data<double>(), Error);
}

TEST_CASE("tensor: clone is deep, copy_from checks counts and dtypes") {
  Tensor a = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
  Tensor b = a.clone();
  b.data<float>()[0] = 9;
  CHECK(a.data<float>()[0] == 1);
  Tensor c = Tensor::empty({3});
  CHECK_THROWS_AS(c.copy_from(a), Error);
  Tensor d = Tensor::empty({4}, DType::f64);
  CHECK_THROWS_AS(d.copy_from(a), Error);
}

TEST_CASE("tensor: casts round-trip through every dtype") {
  Tensor a = Tensor::from_vector<float>({-2, 0, 1.5f, 100}, {4});
  for (DType t : {DType::f64, DType::f16, DType::bf16}) {
    auto back = a.to(t).to(DType::f32).to_vector<float>();
    CHECK(back == std::vector<float>{-2, 0, 1.5f, 100});
  }
  auto ints = a.to(DType::i64).to_vector<int64_t>();
  CHECK(ints == std::vector<int64_t>{-2, 0, 1, 100});
  CHECK(Tensor::full({1}, 2.5, DType::f64).item() == 2.5);
}

TEST_CASE("tensor: element i is read and written as double, rounded as the dtype stores it") {
  Tensor h = Tensor::zeros({3}, DType::f16);
  h.set_element(1, 1.0 + 1.0 / 4096);  // below half's resolution at 1: rounds to 1
  h.set_element(2, -3.5);
  CHECK(h.element(0) == 0);
  CHECK(h.element(1) == 1.0);
  CHECK(h.element(2) == -3.5);
  CHECK(h.to(DType::f32).to_vector<float>() == std::vector<float>{0, 1, -3.5f});
  Tensor b = Tensor::zeros({2}, DType::u8);
  b.set_element(0, 200);
  CHECK(b.element(0) == 200);
  CHECK(b.data<uint8_t>()[0] == 200);
  Tensor i = Tensor::zeros({1}, DType::i64);
  i.set_element(0, 4e15);
  CHECK(i.data<int64_t>()[0] == 4000000000000000);
  CHECK_THROWS_AS(h.element(3), Error);
  CHECK_THROWS_AS(h.set_element(-1, 0), Error);
}

TEST_CASE("storage: a borrowed block is viewed in place, never freed, and keeps its owner alive") {
  std::vector<float> outside{1, 2, 3, 4, 5, 6};
  auto owner = std::make_shared<int>(7);
  std::weak_ptr<int> watch = owner;
  const auto before = cpu_cache_stats();
  {
    auto storage = Storage::borrow(outside.data(), outside.size() * sizeof(float), Device::cpu(),
                                   std::move(owner));
    Tensor t = Tensor::wrap(storage, sizeof(float), {2, 2}, DType::f32);
    CHECK(t.raw_data() == outside.data() + 1);
    t.data<float>()[3] = 40;  // writes land in the outside memory
    CHECK(outside[4] == 40);
    storage.reset();
    CHECK_FALSE(watch.expired());  // the tensor still holds the storage, which holds the owner
    CHECK_THROWS_AS(Tensor::wrap(t.storage(), 0, {7}, DType::f32), Error);
  }
  CHECK(watch.expired());
  CHECK(outside == std::vector<float>{1, 2, 3, 4, 40, 6});
  // The block never went to our allocator (releasing it would have cached its bytes).
  CHECK(cpu_cache_stats().bytes_cached == before.bytes_cached);
  CHECK(cpu_cache_stats().bytes_in_use == before.bytes_in_use);
}

TEST_CASE("cpu allocator: released blocks are reused, so steady state never mallocs") {
  { Tensor warm = Tensor::empty({1000, 37}); }
  auto before = cpu_cache_stats();
  for (int i = 0; i < 10; ++i) Tensor t = Tensor::empty({1000, 37});
  auto after = cpu_cache_stats();
  CHECK(after.system_allocations == before.system_allocations);
  CHECK(after.cache_hits == before.cache_hits + 10);
}

TEST_CASE("cpu allocator: a large block starts on a huge page and asks for huge pages") {
  std::ifstream mode_file("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode((std::istreambuf_iterator<char>(mode_file)), {});
  if (mode.empty() || mode.find("[never]") != std::string::npos)
    return testing::skip_test("transparent huge pages are off or absent on this kernel");
  const size_t bytes = 3 * kHugePageBytes + 4096;
  void* p = cpu_allocate(bytes);
  CHECK(reinterpret_cast<uintptr_t>(p) % kHugePageBytes == 0);
  // /proc/self/smaps: the mapping that holds the block says whether it may get huge pages.
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false, eligible = false;
  const auto addr = reinterpret_cast<uintptr_t>(p);
  while (std::getline(smaps, line)) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
      inside = lo <= addr && addr < hi;
    } else if (inside && line.rfind("THPeligible:", 0) == 0) {
      eligible = line.find('1') != std::string::npos;
    }
  }
  CHECK(eligible);
  cpu_release(p, bytes);
}

TEST_CASE("device: parse") {
  CHECK(parse_device("cpu").is_cpu());
  CHECK(parse_device("cuda:2").index == 2);
  CHECK_THROWS_AS(parse_device("gpu"), InvalidArgument);
  CHECK_THROWS_AS(parse_device("cuda:x"), InvalidArgument);
}

TEST_CASE("error: CHECK_EQ names both values and the place") {
  try {
    RG_CHECK_EQ(3, 4, "context ", 42);
    FAIL("no throw");
  } catch (const Error& e) {
    std::string m = e.what();
    CHECK(m.find("test_tensor.cpp:") != std::string::npos);
    CHECK(m.find("(3 vs 4)") != std::string::npos);
    CHECK(m.find("context 42") != std::string::npos);
  }
}
