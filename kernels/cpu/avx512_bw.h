// What the bf16 kernels' AVX-512 code shares (gemm_bf16.cpp, im2col.cpp,
// conv2d_dense_small_image.cpp, conv2d_direct_bf16*.cpp): the target attribute of a function
// that uses AVX-512BW, the masks of a vector's first n lanes, two rows joined into bf16 pairs, and
// a 16 x 16 transpose of 32-bit values. Only CPUs with a bf16 GEMM (AVX512-BF16, which all have
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

// The 16 bf16 values at low and at high (those in mask; high may be null: zeros) joined into
// 32-bit pairs, low's in the low halves: the pair layout bf16 dot products take. The all-lanes
// masked forms of the widening and the shift avoid GCC 12's plain ones, which start from an
// undefined vector and warn that it may be used uninitialised.
RG_AVX512_BW inline __m512i joined_pairs(const uint16_t* low, const uint16_t* high,
                                         __mmask16 mask) {
  const __m512i lows = _mm512_maskz_cvtepu16_epi32(0xFFFF, _mm256_maskz_loadu_epi16(mask, low));
  if (!high) return lows;
  const __m512i highs = _mm512_maskz_cvtepu16_epi32(0xFFFF, _mm256_maskz_loadu_epi16(mask, high));
  return _mm512_or_si512(lows, _mm512_maskz_slli_epi32(0xFFFF, highs, 16));
}

// rows (16 vectors of 16 32-bit values) becomes its transpose, in four rounds that each swap
// blocks twice the size of the last: single values within pairs of rows, pairs of values, then
// groups of four and of eight (128-bit lanes, whole 256-bit halves). All-lanes masked forms:
// GCC 12's plain ones start from an undefined vector and warn that it may be used uninitialised.
RG_AVX512_BW inline void transpose_16x16(__m512i rows[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {  // 32-bit values of rows i, i+1
    t[i] = _mm512_maskz_unpacklo_epi32(0xFFFF, rows[i], rows[i + 1]);
    t[i + 1] = _mm512_maskz_unpackhi_epi32(0xFFFF, rows[i], rows[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {  // 64-bit pairs of rows i..i+3
    rows[i] = _mm512_maskz_unpacklo_epi64(0xFF, t[i], t[i + 2]);
    rows[i + 1] = _mm512_maskz_unpackhi_epi64(0xFF, t[i], t[i + 2]);
    rows[i + 2] = _mm512_maskz_unpacklo_epi64(0xFF, t[i + 1], t[i + 3]);
    rows[i + 3] = _mm512_maskz_unpackhi_epi64(0xFF, t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 16; i += 8)  // 128-bit lanes of rows i..i+7
    for (int j = 0; j < 4; ++j) {
      t[i + j] = _mm512_maskz_shuffle_i32x4(0xFFFF, rows[i + j], rows[i + j + 4], 0x88);
      t[i + j + 4] = _mm512_maskz_shuffle_i32x4(0xFFFF, rows[i + j], rows[i + j + 4], 0xdd);
    }
  for (int j = 0; j < 8; ++j) {  // 256-bit halves
    rows[j] = _mm512_maskz_shuffle_i32x4(0xFFFF, t[j], t[j + 8], 0x88);
    rows[j + 8] = _mm512_maskz_shuffle_i32x4(0xFFFF, t[j], t[j + 8], 0xdd);
  }
}

}  // namespace ringgrad::kernels::cpu
