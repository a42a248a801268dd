// What the AVX2 kernels share (conv2d_direct*.cpp, batchnorm_planes.cpp, sgemm_avx512.cpp's
// packing): the target attribute of a function that uses AVX2 and FMA, the mask of a vector's
// first n lanes, and an 8 x 8 transpose. Every CPU at Isa::avx2 or above has both
// (cpu_features.cpp). Release builds compile the whole tree for them anyway (RINGGRAD_ARCH_FLAGS);
// the attribute keeps the other builds, compiled for plain x86-64, able to hold these kernels.
// Private to kernels/cpu.
#pragma once
#include <immintrin.h>

#include <cstdint>

#define RG_AVX2_FMA __attribute__((target("avx2,fma")))

namespace ringgrad::kernels::cpu {

// -1 in the first n (0..8) 32-bit lanes, 0 in the rest: the mask of _mm256_maskload/maskstore.
RG_AVX2_FMA inline __m256i first_lanes8(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// rows (8 vectors of 8 floats) becomes its transpose, in three rounds of shuffles that
// interleave ever larger units: single floats of row pairs, pairs of floats, 128-bit halves.
RG_AVX2_FMA inline void transpose_8x8(__m256 rows[8]) {
  __m256 t[8];
  for (int i = 0; i < 8; i += 2) {  // half h: rows i, i+1 of columns 4h, 4h+1 | 4h+2, 4h+3
    t[i] = _mm256_unpacklo_ps(rows[i], rows[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(rows[i], rows[i + 1]);
  }
  __m256 u[8];
  for (int i = 0; i < 8; i += 4) {  // u[i + e], half h: rows i..i+3 of column 4h + e
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int e = 0; e < 4; ++e) {  // column e from the low halves, 4 + e from the high
    rows[e] = _mm256_permute2f128_ps(u[e], u[4 + e], 0x20);
    rows[4 + e] = _mm256_permute2f128_ps(u[e], u[4 + e], 0x31);
  }
}

}  // namespace ringgrad::kernels::cpu
