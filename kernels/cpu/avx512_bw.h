// What the AVX-512 kernels share (gemm_bf16.cpp, im2col.cpp, cast.cpp, sgemm_avx512.cpp,
// conv2d_dense_small_image.cpp, conv2d_direct*.cpp, batchnorm_planes.cpp, elementwise.cpp): the
// target attribute of a function that uses AVX-512BW, the masks of a vector's first n lanes, bf16
// values widened to f32 and f32 rounded to bf16 (by integer steps, or by AVX512-BF16's
// instruction), 32 bf16 values as two f32 vectors and back, the sum of a vector's lanes, two rows
// joined into bf16 pairs, a 16 x 16 transpose of 32-bit values, and bf16 data seen as its 16-bit
// patterns. Every CPU at Isa::avx512 or above has BW (cpu_features.cpp). Private to kernels/cpu.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "core/half.h"

#define RG_AVX512_BW __attribute__((target("avx512f,avx512bw,avx512vl")))

namespace ringgrad::kernels::cpu {

// bf16 values as the 16-bit patterns the integer instructions load and store.
inline const uint16_t* bits(const BFloat16* p) { return reinterpret_cast<const uint16_t*>(p); }
inline uint16_t* bits(BFloat16* p) { return reinterpret_cast<uint16_t*>(p); }

inline __mmask32 first_lanes32(int64_t n) {
  return n >= 32 ? ~__mmask32(0) : (__mmask32(1) << n) - 1;
}
inline __mmask16 first_lanes16(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : (__mmask16(1) << n) - 1;
}

// 16 bf16 values as f32: those of a register, or those at p (in mask; zero in the others).
RG_AVX512_BW inline __m512 widened(__m256i bf16) {
  const __m512i wide = _mm512_maskz_cvtepu16_epi32(0xFFFF, bf16);
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, wide, 16));
}
RG_AVX512_BW inline __m512 widened(const uint16_t* p, __mmask16 mask) {
  return widened(_mm256_maskz_loadu_epi16(mask, p));
}

// float_to_bf16's rounding (core/half.h) of 16 f32 values in integer lanes, the bf16 bits in the
// low half of each: to nearest even, NaN kept quiet, subnormals kept (the CPU's vcvtneps2bf16
// flushes them). AVX-512F only. (Masked forms of the shifts: GCC 12 warns that the plain ones'
// undefined source vector may be used uninitialised.)
__attribute__((target("avx512f"))) inline __m512i rounded_to_bf16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i high = _mm512_maskz_srli_epi32(0xFFFF, u, 16);
  const __m512i carry = _mm512_and_si512(high, _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_maskz_srli_epi32(
      0xFFFF, _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), carry), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_or_epi32(rounded, nan, high, _mm512_set1_epi32(0x40));
}

// Functions that also use AVX512-BF16's instructions (and DQ's, which every such CPU has).
#define RG_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

// The lanes of v that hold an f32 subnormal: those vcvtneps2bf16 would flush to zero.
RG_AVX512_BF16 inline __mmask16 subnormal_lanes(__m512 v) {
  constexpr int kSubnormal = 0x20;  // VFPCLASSPS's category bit
  return _mm512_fpclass_ps_mask(v, kSubnormal);
}

// rounded_to_bf16 of 16 values, narrowed to 16 bits each, by the CPU's vcvtneps2bf16 (one
// instruction for rounded_to_bf16's nine and the narrowing) unless one of them is an f32
// subnormal: the instruction rounds every other value the same way (to nearest even; a NaN kept
// quiet with its sign and top payload bits) but flushes subnormals to zero. For CPUs with
// AVX512-BF16 (store_halves, below, converts two vectors at once the same way).
RG_AVX512_BF16 inline __m256i narrowed_to_bf16(__m512 v) {
  if (subnormal_lanes(v) == 0) return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
  return _mm512_maskz_cvtepi32_epi16(0xFFFF, rounded_to_bf16(v));
}

// 32 bf16 values (one vector of 16-bit lanes) as two f32 vectors: the even-numbered values (the
// low halves, shifted up) and the odd-numbered ones (the high halves, kept), one instruction each,
// where widening 16 values in order takes two, one of them moving values across the register.
// For passes that sum, whose terms may come in any order, and for elementwise ones, whose results
// store_halves puts back in order.
struct Bf16Halves {
  __m512 even, odd;
};

RG_AVX512_BW inline Bf16Halves halves(__m512i bf16) {
  return {_mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, bf16, 16)),
          _mm512_castsi512_ps(_mm512_and_si512(bf16, _mm512_set1_epi32(0xFFFF0000u)))};
}

// The 32 values from p that are in mask (zero in the others), as halves.
RG_AVX512_BW inline Bf16Halves load_halves(const BFloat16* p, __mmask32 mask) {
  return halves(_mm512_maskz_loadu_epi16(mask, bits(p)));
}

// The values in mask of `values`, rounded as float_to_bf16 does and stored in order: by the CPU's
// conversion of both halves (as narrowed_to_bf16, when no value is subnormal) and a word permute,
// or else by the integer rounding, whose bf16 land in the low halves of the 32-bit lanes: the
// even values' place already.
RG_AVX512_BF16 inline void store_halves(BFloat16* p, __mmask32 mask, Bf16Halves values) {
  __m512i words;
  if ((subnormal_lanes(values.even) | subnormal_lanes(values.odd)) == 0) {
    // Word 2i of the result is the even value i (word i of the conversion), 2i + 1 the odd
    // value i (word 16 + i).
    alignas(64) static constexpr uint16_t kInterleave[32] = {
        0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
        8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    const __m512i even_then_odd = (__m512i)_mm512_cvtne2ps_pbh(values.odd, values.even);
    words = _mm512_permutexvar_epi16(_mm512_load_si512(kInterleave), even_then_odd);
  } else {
    words = _mm512_or_si512(rounded_to_bf16(values.even),
                            _mm512_maskz_slli_epi32(0xFFFF, rounded_to_bf16(values.odd), 16));
  }
  _mm512_mask_storeu_epi16(bits(p), mask, words);
}

// The sum of v's 16 lanes, by halving. AVX-512F only. (The all-lanes masked forms of the
// shuffles: GCC 12's plain ones, and _mm512_reduce_add_ps, start from an undefined vector.)
__attribute__((target("avx512f"))) inline float lane_sum(__m512 v) {
  constexpr __mmask16 all = 0xFFFF;
  v = _mm512_add_ps(v, _mm512_mask_shuffle_f32x4(v, all, v, v, _MM_SHUFFLE(1, 0, 3, 2)));
  v = _mm512_add_ps(v, _mm512_mask_shuffle_f32x4(v, all, v, v, _MM_SHUFFLE(2, 3, 0, 1)));
  v = _mm512_add_ps(v, _mm512_mask_permute_ps(v, all, v, _MM_SHUFFLE(1, 0, 3, 2)));
  v = _mm512_add_ps(v, _mm512_mask_permute_ps(v, all, v, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm512_cvtss_f32(v);
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
