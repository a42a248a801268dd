// What the bf16 kernels' AVX-512 code shares (gemm_bf16.cpp, im2col.cpp,
// conv2d_dense_small_image.cpp): the target attribute of a function that uses AVX-512BW, and the
// masks of a vector's first n lanes. Only CPUs with a bf16 GEMM (AVX512-BF16, which all have
// AVX-512BW) reach such functions. Private to kernels/cpu.
#pragma once
#include <immintrin.h>

#include <cstdint>

#define RG_AVX512_BW __attribute__((target("avx512f,avx512bw,avx512vl")))

namespace ringgrad::kernels::cpu {

inline __mmask32 first_lanes32(int64_t n) {
  return n >= 32 ? ~__mmask32(0) : (__mmask32(1) << n) - 1;
}
inline __mmask16 first_lanes16(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : (__mmask16(1) << n) - 1;
}

}  // namespace ringgrad::kernels::cpu
