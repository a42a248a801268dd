// Shared by the GEMM-backed CPU kernels (conv2d, linear): row-major C = alpha op(A) op(B) +
// beta C through OpenBLAS for float/double (or, for float, our AVX-512 kernel where the CPU
// has it: Note [AVX-512 sgemm]), and for bf16 operands with an f32 C through our bf16 GEMM
// (Note [bf16 GEMM]); GemmA, an op(A) prepared once for many products; and parallel_gemm,
// which splits C into one block per OpenMP thread, each a single-threaded BLAS call (see
// Note [BLAS threads]). Private to kernels/cpu.
#pragma once
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "kernels/cast_math.h"
#include "kernels/cpu/cpu_dispatch.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/sgemm_avx512.h"

namespace ringgrad::kernels::cpu {

// Keeps OpenBLAS single-threaded (see Note [BLAS threads] in threads.cpp); cheap after the
// first call. Every GEMM-backed kernel calls it before it forks.
void use_single_threaded_blas();

inline CBLAS_TRANSPOSE cblas_op(Op op) { return op == Op::transpose ? CblasTrans : CblasNoTrans; }

// C (m x n) = alpha op(A) (m x k) op(B) (k x n) + beta C, row-major with leading dimensions.
inline void gemm(Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                 int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (avx512_sgemm_enabled())
    return sgemm_avx512(op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  cblas_sgemm(CblasRowMajor, cblas_op(op_a), cblas_op(op_b), m, n, k, alpha, a, lda, b, ldb, beta,
              c, ldc);
}
inline void gemm(Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
                 int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, cblas_op(op_a), cblas_op(op_b), m, n, k, alpha, a, lda, b, ldb, beta,
              c, ldc);
}

// The element type of C for operands of type T: f32 for bf16 (products accumulate in f32), else T.
template <class T>
using GemmResult = ComputeType<T>;

// bf16 operands, f32 C; alpha must be 1 (no caller scales a bf16 product).
inline void gemm(Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, float alpha, const BFloat16* a,
                 int64_t lda, const BFloat16* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  RG_CHECK(alpha == 1.0f, "the bf16 GEMM does not scale its product (alpha ", alpha, ")");
  gemm_bf16(op_a, op_b, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

// op(A) (m x k) prepared once and multiplied by many B: a convolution's weights, shared by all
// its chunks and threads. Our GEMMs (bf16, and f32 where AVX-512 runs it) pack it into their
// tiles here, once; OpenBLAS (f32 elsewhere, f64) reads it where it is.
template <class T>
class GemmA {
 public:
  GemmA(Op op, const T* a, int64_t lda, int64_t m, int64_t k)
      : op_(op), a_(a), lda_(lda), m_(m), k_(k) {}
  // C (m x n) = op(A) op(B) + beta C.
  void multiply(Op op_b, int64_t n, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) const {
    gemm(op_, op_b, m_, n, k_, T(1), a_, lda_, b, ldb, beta, c, ldc);
  }

 private:
  Op op_;
  const T* a_;
  int64_t lda_, m_, k_;
};

template <>
class GemmA<BFloat16> {
 public:
  GemmA(Op op, const BFloat16* a, int64_t lda, int64_t m, int64_t k) : packed_(op, a, lda, m, k) {}
  void multiply(Op op_b, int64_t n, const BFloat16* b, int64_t ldb, float beta, float* c,
                int64_t ldc) const {
    gemm_bf16(packed_, op_b, n, b, ldb, beta, c, ldc);
  }

 private:
  PackedBf16A packed_;
};

template <>
class GemmA<float> {
 public:
  GemmA(Op op, const float* a, int64_t lda, int64_t m, int64_t k)
      : op_(op), a_(a), lda_(lda), m_(m), k_(k) {
    if (avx512_sgemm_enabled()) packed_ = std::make_unique<PackedSgemmA>(op, a, lda, m, k);
  }
  void multiply(Op op_b, int64_t n, const float* b, int64_t ldb, float beta, float* c,
                int64_t ldc) const {
    if (packed_) return sgemm_avx512(*packed_, op_b, n, b, ldb, beta, c, ldc);
    gemm(op_, op_b, m_, n, k_, 1.0f, a_, lda_, b, ldb, beta, c, ldc);
  }

 private:
  Op op_;
  const float* a_;
  int64_t lda_, m_, k_;
  std::unique_ptr<PackedSgemmA> packed_;  // our AVX-512 SGEMM's tiles; OpenBLAS packs its own
};

// Same contract as gemm, with C split along its longer side into one block per OpenMP thread
// (rows of C are rows of op(A); columns of C are columns of op(B)). Small products stay on one
// thread, where a fork would cost more than it saves.
template <class T>
void parallel_gemm(Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, GemmResult<T> alpha,
                   const T* a, int64_t lda, const T* b, int64_t ldb, GemmResult<T> beta,
                   GemmResult<T>* c, int64_t ldc) {
  constexpr int64_t kMinMultiplyAddsPerThread = 1 << 18;
  const int64_t longer = std::max(m, n);
  const int threads = static_cast<int>(std::clamp<int64_t>(
      std::min(m * n * k / kMinMultiplyAddsPerThread, longer), 1, omp_get_max_threads()));
  if (threads == 1) return gemm(op_a, op_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  use_single_threaded_blas();
  const bool split_rows = m >= n;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int t = 0; t < threads; ++t) {
    const int64_t begin = longer * t / threads, end = longer * (t + 1) / threads;
    if (split_rows) {
      // Row i of op(A) starts at a + i*lda without transpose, at a + i with it.
      const T* a_block = a + begin * (op_a == Op::none ? lda : 1);
      gemm(op_a, op_b, end - begin, n, k, alpha, a_block, lda, b, ldb, beta, c + begin * ldc, ldc);
    } else {
      const T* b_block = b + begin * (op_b == Op::none ? 1 : ldb);
      gemm(op_a, op_b, m, end - begin, k, alpha, a, lda, b_block, ldb, beta, c + begin, ldc);
    }
  }
}

}  // namespace ringgrad::kernels::cpu
