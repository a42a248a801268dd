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

// The column matrix of a stride-1 convolution whose output keeps the image's size (P == H,
// Q == W) over a chunk of up to `images` images, as sgemm_avx512_implicit's B operand: never
// stored, read from the chunk's images laid out channel by channel, (C, images*H*W), through one
// shift per tap and one lane mask per (vector of columns, tap) (Note [Implicit columns] in
// conv2d_implicit_columns.cpp). Built once per convolution.
class ImplicitColumns {
 public:
  ImplicitColumns(int64_t C, int64_t H, int64_t W, int64_t R, int64_t S, int64_t pad_h,
                  int64_t pad_w, int64_t images);
  int64_t channels() const { return channels_; }
  int64_t taps() const { return static_cast<int64_t>(shifts_.size()); }
  int64_t products() const { return channels_ * taps(); }  // rows of B: R*S*C
  int64_t shift(int64_t tap) const { return shifts_[tap]; }
  // Which lanes of the 16 columns from 16u on tap `tap` reads (bit l: column 16u + l).
  const uint16_t* masks(int64_t u) const { return masks_.data() + u * taps(); }

 private:
  int64_t channels_;
  std::vector<int64_t> shifts_;  // per tap (r, s): (r - pad_h) * W + s - pad_w
  std::vector<uint16_t> masks_;  // per vector of a full chunk's columns, per tap
};

// C (m x n) = op(A) col(x), n = images * H * W of a chunk of at most the ImplicitColumns'
// images, with op(A) packed beforehand, its k = b.products() columns in (tap, channel) order
// (not the weights' (channel, tap)), and x the chunk as (C, n).
void sgemm_avx512_implicit(const PackedSgemmA& a, const ImplicitColumns& b, const float* x,
                           int64_t n, float* c, int64_t ldc);

}  // namespace ringgrad::kernels::cpu
