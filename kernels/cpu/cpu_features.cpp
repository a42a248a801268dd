// Run-time CPU detection (kernels/cpu/cpu_features.h).
//
// AMX needs more than the CPUID bit: its tile data (8 KiB per thread) is not part of the
// signal frame Linux sets up by default, so a process must ask for it once with
// arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) before any tile instruction, or the
// first one kills it with SIGILL. The permission covers every thread and is inherited by
// children. A kernel older than 5.16, or a hypervisor that hides the state, refuses: then the
// bf16 GEMM uses AVX512-BF16 instead, and `limited` says why.
#include "kernels/cpu/cpu_features.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>

#include "kernels/cpu/sgemm_avx512.h"
#include "kernels/ops.h"

namespace ringgrad::kernels::cpu {

namespace {

constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

Isa hardware_isa(std::string& limited) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return Isa::baseline;
  // Isa::avx512 is the set every AVX-512 CPU since Skylake-SP has, F with BW, DQ and VL (the
  // 8- and 16-bit lanes, and AVX-512's masks on 256-bit registers): its kernels may use all four.
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512dq") || !__builtin_cpu_supports("avx512vl"))
    return Isa::avx2;
  if (!__builtin_cpu_supports("avx512bf16")) return Isa::avx512;
  if (!__builtin_cpu_supports("amx-tile") || !__builtin_cpu_supports("amx-bf16"))
    return Isa::avx512_bf16;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
    limited = std::string("the CPU has AMX but Linux refused the tile state (arch_prctl: ") +
              std::strerror(errno) + "; needs kernel 5.16 or later)";
    return Isa::avx512_bf16;
  }
  return Isa::amx;
}

// RINGGRAD_CPU_ISA=name caps the level; unknown names are ignored with the reason kept.
Isa capped(Isa found, std::string& limited) {
  const char* cap = std::getenv("RINGGRAD_CPU_ISA");
  if (!cap || !*cap) return found;
  for (Isa level : {Isa::baseline, Isa::avx2, Isa::avx512, Isa::avx512_bf16, Isa::amx}) {
    if (std::strcmp(cap, isa_name(level)) != 0) continue;
    if (level < found) limited = std::string("RINGGRAD_CPU_ISA=") + cap;
    return std::min(found, level);
  }
  limited = std::string("RINGGRAD_CPU_ISA=") + cap +
            " is not one of baseline, avx2, avx512, avx512_bf16, amx; ignored";
  return found;
}

std::string cpu_model() {
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

// sysconf reads CPUID leaf 4 (Intel) or 0x8000001D (AMD); a VM may hide it (0 or -1).
int64_t cache_bytes(int name, int64_t fallback) {
  const long bytes = sysconf(name);
  return bytes > 0 ? bytes : fallback;
}

}  // namespace

const char* isa_name(Isa level) {
  switch (level) {
    case Isa::baseline: return "baseline";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
    case Isa::avx512_bf16: return "avx512_bf16";
    case Isa::amx: return "amx";
  }
  return "?";
}

const CpuFeatures& detect_cpu_features() {
  static const CpuFeatures features = [] {
    CpuFeatures f;
    f.isa = capped(hardware_isa(f.limited), f.limited);
    f.model = cpu_model();
    f.l1d_bytes = cache_bytes(_SC_LEVEL1_DCACHE_SIZE, 32 << 10);
    f.l2_bytes = cache_bytes(_SC_LEVEL2_CACHE_SIZE, 512 << 10);
    f.halves_512 = f.isa >= Isa::avx512 && __builtin_cpu_is("amdfam19h");
    return f;
  }();
  return features;
}

}  // namespace ringgrad::kernels::cpu

namespace ringgrad::kernels {

std::string cpu_conv_path(DType t) {
  const cpu::CpuFeatures& f = cpu::cpu_features();
  const std::string why = f.limited.empty() ? "" : " (" + f.limited + ")";
  if (t == DType::bf16 && cpu::cpu_has(cpu::Isa::amx)) return "AMX tiles" + why;
  if (t == DType::bf16 && cpu::cpu_has(cpu::Isa::avx512_bf16))
    return "AVX512-BF16 dot products" + why;
  if (t == DType::f16) return "f32 copies: no f16 kernel on the CPU";
  if (t == DType::bf16) return "f32 copies: this CPU has no bf16 dot products" + why;
  const std::string gemm = cpu::avx512_sgemm_enabled() ? "our AVX-512 SGEMM" : "OpenBLAS";
  if (cpu::cpu_has(cpu::Isa::avx512))
    return "Winograd (3x3, stride 1), AVX-512 direct rows, else " + gemm + why;
  if (cpu::cpu_has(cpu::Isa::avx2))
    return "Winograd (3x3, stride 1), AVX2 direct pieces, else " + gemm + why;
  return gemm + why;
}

}  // namespace ringgrad::kernels
