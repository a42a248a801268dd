// Tests for core/rng: Philox known-answer vectors, determinism, streams and state restore.
#include <doctest/doctest.h>

#include <cmath>
#include <set>
#include <vector>

#include "core/rng.h"

using namespace ringgrad;

TEST_CASE("philox4x32-10 matches the Random123 known-answer vectors") {
  auto z = philox4x32({0, 0, 0, 0}, {0, 0});
  CHECK(z == std::array<uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  auto f =
      philox4x32({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu});
  CHECK(f == std::array<uint32_t, 4>{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
}

TEST_CASE("generator: same seed same numbers, different streams differ") {
  Generator a(42, 0), b(42, 0), c(42, 1);
  int same_ab = 0, same_ac = 0;
  for (int i = 0; i < 100; ++i) {
    uint32_t x = a.next_u32(), y = b.next_u32(), z = c.next_u32();
    same_ab += x == y;
    same_ac += x == z;
  }
  CHECK(same_ab == 100);
  CHECK(same_ac < 3);
}

TEST_CASE("generator: restoring a state mid-block continues the same sequence") {
  Generator g(7, 3);
  for (int i = 0; i < 5; ++i) g.next_u32();  // leaves a partly used block
  GeneratorState s = g.state();
  std::vector<uint32_t> expect;
  for (int i = 0; i < 9; ++i) expect.push_back(g.next_u32());
  Generator h(0, 0);
  h.set_state(s);
  for (int i = 0; i < 9; ++i) CHECK(h.next_u32() == expect[i]);
}

TEST_CASE("generator: normal and below have the right moments and range") {
  Generator g(1);
  double sum = 0, sum_sq = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    double x = g.normal();
    sum += x;
    sum_sq += x * x;
  }
  CHECK(std::abs(sum / n) < 0.01);
  CHECK(std::abs(sum_sq / n - 1.0) < 0.02);
  std::set<uint64_t> seen;
  for (int i = 0; i < 1000; ++i) {
    uint64_t v = g.below(10);
    CHECK(v < 10);
    seen.insert(v);
  }
  CHECK(seen.size() == 10);
}
