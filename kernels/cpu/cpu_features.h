// What this CPU can run, read once at run time, so that one binary picks the right tuned kernel
// on every machine: the vector instruction sets (AVX2 + FMA, AVX-512 F/BW/DQ/VL, AVX512-BF16 dot
// products, AMX bf16 tiles with Linux's permission to use their state) and the per-core cache
// sizes the GEMMs block for. RINGGRAD_CPU_ISA caps what is used (avx2, avx512, avx512_bf16, amx),
// so one machine can time or test each kernel. Private to kernels/cpu.
#pragma once
#include <cstdint>
#include <string>

namespace ringgrad::kernels::cpu {

// Ordered: each level needs the ones below it.
enum class Isa { baseline, avx2, avx512, avx512_bf16, amx };

struct CpuFeatures {
  Isa isa;              // the best level this CPU and kernel allow, after RINGGRAD_CPU_ISA
  std::string model;    // the CPU's brand string, for benchmark headers
  std::string limited;  // why isa is below what the CPU has ("" when it is not)
  int64_t l1d_bytes;    // data cache per core
  int64_t l2_bytes;     // second-level cache per core
  // AVX-512 executed as two 256-bit halves, so that 256-bit code multiplies as fast (AMD's Zen 4,
  // family 19h, whose earlier Zen 3 parts have no AVX-512; Intel's cores and Zen 5 have
  // full-width units).
  bool halves_512;
};

// The CPU's features, detected on the first call (cpu_features.cpp).
const CpuFeatures& detect_cpu_features();

// The same, inline: the kernels ask per plane or per row, and a call into another file for each
// was 0.4% of an f32 training step.
inline const CpuFeatures& cpu_features() {
  static const CpuFeatures& features = detect_cpu_features();
  return features;
}

inline bool cpu_has(Isa level) { return cpu_features().isa >= level; }

const char* isa_name(Isa level);

}  // namespace ringgrad::kernels::cpu
