// Deterministic random numbers: Philox4x32-10, a counter-based generator. A Generator is
// (seed, stream, counter): the same triple gives the same numbers on every machine, streams
// are independent (one per rank, or per purpose), and the whole state is three integers, so a
// checkpoint can save and restore it exactly.
#pragma once
#include <array>
#include <cstdint>

namespace ringgrad {

struct GeneratorState {
  uint64_t seed = 0;
  uint64_t stream = 0;
  uint64_t counter = 0;   // 128-bit blocks consumed
  uint32_t buffered = 0;  // words already used of block (counter - 1), 0..4
};

class Generator {
 public:
  explicit Generator(uint64_t seed = 0, uint64_t stream = 0);

  uint32_t next_u32();
  float uniform();             // [0, 1)
  double uniform_double();     // [0, 1), 53 bits
  float normal();              // standard normal (Box-Muller on two uniforms)
  uint64_t below(uint64_t n);  // uniform integer in [0, n), unbiased

  GeneratorState state() const { return state_; }
  void set_state(const GeneratorState& s);

 private:
  void refill();
  GeneratorState state_;
  std::array<uint32_t, 4> block_{};
};

// Philox4x32-10 block function: exposed for tests against published vectors.
std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

}  // namespace ringgrad
