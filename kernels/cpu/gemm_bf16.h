// bf16 GEMM with f32 accumulation, for CPUs with bf16 dot products: AMX tiles (Intel Sapphire
// Rapids and later) or AVX512-BF16 (Zen 4/5, Cooper Lake). It is what the bf16 convolutions run
// on (Note [bf16 GEMM]); on other CPUs they widen to f32 instead (half_via_f32.h). Private to
// kernels/cpu; the tests call it directly to compare it with a plain f64 reference.
#pragma once
#include <cstdint>
#include <functional>

#include "core/half.h"
#include "core/tensor.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/sgemm_avx512.h"

namespace ringgrad::kernels::cpu {

// Note [bf16 GEMM]
// Both kernels read the same packed operands, 16 x 32 bf16 blocks of 1 KiB (an AMX tile each):
//   A tile (row tile t, k block b): rows 16t..16t+15 of op(A), products 32b..32b+31, row-major;
//   B tile (column tile t, k block b): products 32b..32b+31 of columns 16t..16t+15 in pairs,
//     element (p, j) at [(p % 32) / 2][j % 16][p % 2] ("VNNI" layout: what one AMX TDPBF16PS
//     or one AVX512-BF16 VDPBF16PS lane multiplies, two products at a time).
// Padding past m, n or k is zero, so edge tiles compute with whole tiles and only the valid
// part of C is stored. C is built 32 x 32 at a time (2 x 2 tiles, each A and B tile used twice)
// over all of k, then stored: with beta, through one f32 buffer.

// Which micro-kernel runs the tiles; the tests run each one this CPU has.
enum class Bf16Kernel { amx, avx512_bf16 };

// The kernel gemm_bf16 uses here: AMX where cpu_has(Isa::amx), else AVX512-BF16.
Bf16Kernel default_bf16_kernel();

// True when this CPU (after RINGGRAD_CPU_ISA) has a bf16 GEMM: cpu_has(Isa::avx512_bf16).
inline bool cpu_has_bf16_gemm() { return cpu_has(Isa::avx512_bf16); }

// op(A) packed once into the tile layout of Note [bf16 GEMM], for reuse by many products (a
// conv's weights, shared by every chunk and thread). Owns its memory.
class PackedBf16A {
 public:
  PackedBf16A(Op op, const BFloat16* a, int64_t lda, int64_t m, int64_t k);
  // A (m x k) written by rows(first, last, out) into out ((last - first) x k), 16 rows at a
  // time: a matrix that is never stored whole (a convolution's column matrix).
  using RowSource = std::function<void(int64_t first, int64_t last, BFloat16* out)>;
  PackedBf16A(int64_t m, int64_t k, const RowSource& rows);
  int64_t rows() const { return m_; }
  int64_t depth() const { return k_; }
  const uint16_t* data() const;  // the tiles, in (row tile, k block) order

 private:
  int64_t m_, k_;
  Tensor tiles_;  // bf16, (row tiles, k blocks, 16, 32)
};

// Row-major C (m x n, f32) = op(A) (m x k) op(B) (k x n) + beta C, products accumulated in f32
// (each bf16 x bf16 product is exact in f32). beta is 0 (C is not read) or any other value.
// Single-threaded; callable from many threads at once. Only call it when cpu_has_bf16_gemm().
void gemm_bf16(Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, const BFloat16* a, int64_t lda,
               const BFloat16* b, int64_t ldb, float beta, float* c, int64_t ldc,
               Bf16Kernel kernel = default_bf16_kernel());
// The same with op(A) packed beforehand (m and k are a's).
void gemm_bf16(const PackedBf16A& a, Op op_b, int64_t n, const BFloat16* b, int64_t ldb, float beta,
               float* c, int64_t ldc, Bf16Kernel kernel = default_bf16_kernel());

}  // namespace ringgrad::kernels::cpu
