// Our single-precision GEMM for CPUs with AVX-512, which the f32 gemm in gemm.h uses in place
// of OpenBLAS where the CPU has it (Note [AVX-512 sgemm] in sgemm_avx512.cpp). Private to
// kernels/cpu; the tests call it directly to compare it with a plain reference.
#pragma once
#include <cstdint>
#include <vector>

namespace ringgrad::kernels::cpu {

enum class Op : bool { none = false, transpose = true };

// Rows of B a multiple of kSetAliasing floats (2 KiB) apart map every row of a tile to the same
// L1 cache sets, so the kernel copies such a B into a strip instead of reading it in place.
constexpr int64_t kSetAliasing = 512;
// The row stride for a matrix of `columns` floats that the kernel will read in place as its B
// operand: `columns`, or one vector more where that is a multiple of kSetAliasing.
int64_t sgemm_in_place_stride(int64_t columns);

// True when this CPU runs AVX-512F and RINGGRAD_SGEMM is not "openblas" (read once).
bool avx512_sgemm_enabled();
// True when this CPU runs AVX-512F at all (the tests' skip condition), after RINGGRAD_CPU_ISA.
bool cpu_has_avx512();

// Row-major C (m x n) = alpha op(A) (m x k) op(B) (k x n) + beta C, BLAS semantics: C is not
// read when beta == 0. Single-threaded; callable from many threads at once. Only call it when
// cpu_has_avx512().
void sgemm_avx512(Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                  int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// op(A) (m x k) packed once into the kernel's row tiles, every depth block of it, for many
// products with different B: a convolution's weights, shared by all its chunks and threads.
class PackedSgemmA {
 public:
  PackedSgemmA(Op op, const float* a, int64_t lda, int64_t m, int64_t k);
  int64_t rows() const { return m_; }
  int64_t depth() const { return k_; }
  const float* tiles() const { return tiles_.data(); }

 private:
  int64_t m_, k_;
  std::vector<float> tiles_;
};

// C (m x n) = op(A) op(B) + beta C with op(A) packed beforehand (m and k are a's).
void sgemm_avx512(const PackedSgemmA& a, Op op_b, int64_t n, const float* b, int64_t ldb,
                  float beta, float* c, int64_t ldc);

}  // namespace ringgrad::kernels::cpu
