// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11).
#include "core/rng.h"

#include <cmath>

namespace ringgrad {

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(kMul0) * c[0];
    uint64_t p1 = static_cast<uint64_t>(kMul1) * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
    k[0] += kWeyl0;
    k[1] += kWeyl1;
  }
  return c;
}

Generator::Generator(uint64_t seed, uint64_t stream) {
  state_.seed = seed;
  state_.stream = stream;
}

void Generator::set_state(const GeneratorState& s) {
  state_ = s;
  if (state_.counter > 0 && state_.buffered < 4) {
    // Recompute the partially used block so the next word is the one the saved state expects.
    state_.counter--;
    uint32_t used = state_.buffered;
    refill();
    state_.buffered = used;
  }
}

void Generator::refill() {
  // Counter words: block index (64 bits) and stream (64 bits); key: the seed.
  std::array<uint32_t, 4> ctr = {
      static_cast<uint32_t>(state_.counter), static_cast<uint32_t>(state_.counter >> 32),
      static_cast<uint32_t>(state_.stream), static_cast<uint32_t>(state_.stream >> 32)};
  block_ = philox4x32(
      ctr, {static_cast<uint32_t>(state_.seed), static_cast<uint32_t>(state_.seed >> 32)});
  state_.counter++;
  state_.buffered = 0;
}

uint32_t Generator::next_u32() {
  if (state_.counter == 0 || state_.buffered == 4) refill();
  return block_[state_.buffered++];
}

float Generator::uniform() { return static_cast<float>(next_u32() >> 8) * (1.0f / 16777216.0f); }

double Generator::uniform_double() {
  uint64_t hi = next_u32() >> 5, lo = next_u32() >> 6;  // 27 + 26 = 53 bits
  return static_cast<double>(hi * 67108864ull + lo) * (1.0 / 9007199254740992.0);
}

float Generator::normal() {
  // Box-Muller; 1 - u keeps the log argument in (0, 1].
  double u1 = 1.0 - uniform_double();
  double u2 = uniform_double();
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

uint64_t Generator::below(uint64_t n) {
  if (n <= 1) return 0;
  // Rejection sampling on 64-bit draws removes modulo bias.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  for (;;) {
    uint64_t x = (static_cast<uint64_t>(next_u32()) << 32) | next_u32();
    if (x < limit) return x % n;
  }
}

}  // namespace ringgrad
