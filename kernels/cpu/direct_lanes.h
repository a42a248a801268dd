// The two element types of the direct convolution's AVX-512 kernels (conv2d_direct.cpp,
// conv2d_direct_weight_grad.cpp, conv2d_strided_input_grad.cpp, which are templates over these):
// what a 32-bit word of their packed operands holds, how 16 f32 sums take the product of one
// word, broadcast, with a vector of 16 words, and the register block of the row kernels.
//   F32Lanes:  one f32 value a word; a fused multiply-add.
//   Bf16Lanes: two bf16 values a word (neighbouring channels, or the same position of two
//              images), low one first; a VDPBF16PS pair dot product, also into f32 sums.
// Private to kernels/cpu.
#pragma once
#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "core/half.h"
#include "kernels/cpu/avx512_bw.h"

// The kernels' target: AVX-512 F, BW, DQ and VL, and AVX512-BF16 for Bf16Lanes. A template's
// attribute cannot depend on its arguments, so the f32 instances are compiled with it too; they
// hold no bf16 instruction (GCC emits those only for bf16 intrinsics), so they run on every CPU
// at Isa::avx512, with or without AVX512-BF16.
#define RG_DIRECT RG_AVX512_BF16  // the same target, avx512_bw.h

namespace ringgrad::kernels::cpu {

struct F32Lanes {
  using Value = float;
  using Word = float;
  static constexpr int kValuesPerWord = 1;

  // acc + x * w in each lane.
  RG_DIRECT static __m512 multiply_add(__m512 acc, Word x, __m512i w) {
    return _mm512_fmadd_ps(_mm512_set1_ps(x), _mm512_castsi512_ps(w), acc);
  }
  // Value v in its word, whose place (0) is the only one.
  static void place(Word& word, Value v, int64_t) { word = v; }
  RG_DIRECT static void store(Value* out, __mmask16 mask, __m512 sums) {
    _mm512_mask_storeu_ps(out, mask, sums);
  }
};

struct Bf16Lanes {
  using Value = BFloat16;
  using Word = uint32_t;
  static constexpr int kValuesPerWord = 2;

  // acc + x.low * w.low + x.high * w.high in each lane (w's pairs, x's pair broadcast).
  RG_DIRECT static __m512 multiply_add(__m512 acc, Word x, __m512i w) {
    return _mm512_dpbf16_ps(acc, (__m512bh)_mm512_set1_epi32(static_cast<int32_t>(x)), (__m512bh)w);
  }
  // The values at first and second (in mask; zero in the others, and all of second when null)
  // joined into pairs, first's in the low halves.
  RG_DIRECT static __m512i words(const Value* first, const Value* second, __mmask16 mask) {
    return joined_pairs(bits(first), second ? bits(second) : nullptr, mask);
  }
  // Value v into half `place` (0 low, 1 high) of its word.
  static void place(Word& word, Value v, int64_t place) {
    word |= uint32_t{v.bits} << (16 * place);
  }
  // The sums rounded to bf16 by the CPU's conversion (to nearest even).
  RG_DIRECT static void store(Value* out, __mmask16 mask, __m512 sums) {
    _mm256_mask_storeu_epi16(bits(out), mask, (__m256i)_mm512_cvtneps_pbh(sums));
  }
};

// The lanes of a dtype: F32Lanes for float, Bf16Lanes for BFloat16.
template <class T>
using LanesOf = std::conditional_t<std::is_same_v<T, float>, F32Lanes, Bf16Lanes>;

// The register block of the row kernels (conv2d_direct.cpp, conv2d_strided_input_grad.cpp): for
// each of `words` words, KB vectors of 16 weights (w, then `lanes` words on) times NQ inputs
// broadcast one at a time (x[q * SX], then `plane` words on), into acc[STEP * q + FIRST][v].
template <class Lanes, int KB, int NQ, int SX, int STEP, int FIRST, int ROWS>
RG_DIRECT inline __attribute__((always_inline)) void multiply_words(__m512 (&acc)[ROWS][KB],
                                                                    const typename Lanes::Word* x,
                                                                    const typename Lanes::Word* w,
                                                                    int64_t words, int64_t plane,
                                                                    int64_t lanes) {
  static_assert(STEP * (NQ - 1) + FIRST < ROWS, "the block's sums");
  for (int64_t word = 0; word < words; ++word, x += plane, w += lanes) {
    __m512i weights[KB];
#pragma GCC unroll 4
    for (int v = 0; v < KB; ++v) weights[v] = _mm512_loadu_si512(w + v * 16);
#pragma GCC unroll 28
    for (int q = 0; q < NQ; ++q)
#pragma GCC unroll 4
      for (int v = 0; v < KB; ++v)
        acc[STEP * q + FIRST][v] =
            Lanes::multiply_add(acc[STEP * q + FIRST][v], x[q * SX], weights[v]);
  }
}

}  // namespace ringgrad::kernels::cpu
