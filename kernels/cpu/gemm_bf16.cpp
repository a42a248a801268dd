// The bf16 GEMM (kernels/cpu/gemm_bf16.h): packing into the tiles of Note [bf16 GEMM], the
// loop over 32 x 32 blocks of C, and the store of each block. The micro-kernels that multiply
// the tiles are in gemm_bf16_tiles.cpp. Only functions marked RG_AVX512_BW use AVX-512
// instructions, and only CPUs with AVX512-BF16 (which all have AVX-512BW) reach them.
#include "kernels/cpu/gemm_bf16.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/avx512_bw.h"
#include "kernels/cpu/gemm_bf16_tiles.h"

namespace ringgrad::kernels::cpu {

namespace {

int64_t tiles_of(int64_t rows) { return (rows + kTileRows - 1) / kTileRows; }
int64_t blocks_of(int64_t depth) { return (depth + kTileDepth - 1) / kTileDepth; }

constexpr int64_t kParallelPacking = 1 << 16;  // elements of A: below this, forking costs more

// A buffer per thread, grown to the largest call and then reused (no allocation per step).
uint16_t* buffer(std::vector<uint16_t>& storage, int64_t size) {
  if (static_cast<int64_t>(storage.size()) < size) storage.resize(size);
  return storage.data();
}

// Rows p and p+1 (16 columns each, zero past depth or mask) joined: the low half of each 32-bit
// lane is row p, the high half row p+1, the pair layout of Note [bf16 GEMM].
RG_AVX512_BW inline __attribute__((always_inline)) __m512i joined_rows(const uint16_t* b,
                                                                       int64_t ldb, int64_t p,
                                                                       int64_t depth,
                                                                       __mmask16 mask) {
  if (p >= depth) return _mm512_setzero_si512();
  return joined_pairs(b + p * ldb, p + 1 < depth ? b + (p + 1) * ldb : nullptr, mask);
}

// B tile (products from p0, columns from j0) of op(B) (k x n), pairs of products interleaved.
RG_AVX512_BW void pack_b_tile(uint16_t* tile, Op op, const uint16_t* b, int64_t ldb, int64_t k,
                              int64_t n, int64_t p0, int64_t j0) {
  const int64_t depth = std::min(kTileDepth, k - p0), columns = std::min(kTileRows, n - j0);
  if (op == Op::none) {
    // Pairs of rows, joined: already the pair layout.
    const __mmask16 mask = first_lanes16(columns);
    const uint16_t* corner = b + p0 * ldb + j0;
    for (int64_t pair = 0; pair < kTileDepth / 2; ++pair)
      _mm512_storeu_si512(tile + pair * 2 * kTileRows,
                          joined_rows(corner, ldb, 2 * pair, depth, mask));
    return;
  }
  // op(B)[p][j] = B[j][p]: column j's 32 products are one row of B, 16 pairs of 32 bits, which
  // go to the 16 pair rows of the tile: a 16 x 16 transpose of 32-bit values.
  const __mmask32 mask = first_lanes32(depth);
  __m512i rows[16];
  for (int64_t j = 0; j < kTileRows; ++j)
    rows[j] = j < columns ? _mm512_maskz_loadu_epi16(mask, b + (j0 + j) * ldb + p0)
                          : _mm512_setzero_si512();
  transpose_16x16(rows);
  for (int64_t pair = 0; pair < kTileDepth / 2; ++pair)
    _mm512_storeu_si512(tile + pair * 2 * kTileRows, rows[pair]);
}

// A tile (row tile starting at row i0, k block starting at p0) of op(A) (m x k). A transposed
// A is read as B is (pack_b_tile): pairs of its rows joined into 32-bit values, then a 16 x 16
// transpose, since op(A)[i][p] = A[p][i] puts A's rows p, p+1 into 32-bit value p/2 of row i.
RG_AVX512_BW void pack_a_tile(uint16_t* tile, Op op, const uint16_t* a, int64_t lda, int64_t m,
                              int64_t k, int64_t i0, int64_t p0) {
  const int64_t rows = std::min(kTileRows, m - i0), depth = std::min(kTileDepth, k - p0);
  if (op == Op::none) {
    const __mmask32 mask = first_lanes32(depth);
    for (int64_t i = 0; i < kTileRows; ++i) {
      const __m512i row = i < rows ? _mm512_maskz_loadu_epi16(mask, a + (i0 + i) * lda + p0)
                                   : _mm512_setzero_si512();
      _mm512_storeu_si512(tile + i * kTileDepth, row);
    }
    return;
  }
  const __mmask16 mask = first_lanes16(rows);
  const uint16_t* corner = a + p0 * lda + i0;
  __m512i pairs[16];
  for (int64_t pair = 0; pair < kTileDepth / 2; ++pair)
    pairs[pair] = joined_rows(corner, lda, 2 * pair, depth, mask);
  transpose_16x16(pairs);
  for (int64_t i = 0; i < kTileRows; ++i) _mm512_storeu_si512(tile + i * kTileDepth, pairs[i]);
}

// Every tile of op(A) (m x k) into `tiles`, in (row tile, k block) order. A large A (a conv's
// weights, up to 4.7 MB, packed once by PackedBf16A) is mostly packed before the caller's
// threads fork, so the packing forks itself; inside a parallel region it runs on the calling
// thread.
void pack_a(uint16_t* tiles, Op op, const uint16_t* a, int64_t lda, int64_t m, int64_t k) {
  const int64_t blocks = blocks_of(k);
#pragma omp parallel for schedule(static) if (!omp_in_parallel() && m * k >= kParallelPacking)
  for (int64_t t = 0; t < tiles_of(m); ++t)
    for (int64_t kb = 0; kb < blocks; ++kb)
      pack_a_tile(tiles + (t * blocks + kb) * kTileElements, op, a, lda, m, k, t * kTileRows,
                  kb * kTileDepth);
}

void pack_b(uint16_t* tiles, Op op, const uint16_t* b, int64_t ldb, int64_t k, int64_t n) {
  const int64_t blocks = blocks_of(k);
  for (int64_t t = 0; t < tiles_of(n); ++t)
    for (int64_t kb = 0; kb < blocks; ++kb)
      pack_b_tile(tiles + (t * blocks + kb) * kTileElements, op, b, ldb, k, n, kb * kTileDepth,
                  t * kTileRows);
}

// C[rows x columns] (= or +=) a 32 x 32 block (row stride kBlockEdge), with beta as in gemm_bf16.
RG_AVX512_BW void store_block(float* c, int64_t ldc, const float* block, int64_t rows,
                              int64_t columns, float beta) {
  const __m512 vb = _mm512_set1_ps(beta);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < columns; j += 16) {
      const __mmask16 mask = first_lanes16(columns - j);
      __m512 v = _mm512_loadu_ps(block + i * kBlockEdge + j);
      if (beta != 0.0f) v = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mask, c + i * ldc + j), v);
      _mm512_mask_storeu_ps(c + i * ldc + j, mask, v);
    }
}

// C (m x n) from packed op(A) and op(B) tiles: 32 x 32 blocks, column blocks outermost so the
// two B tile columns of a block stay in cache while every A row pair passes them.
void multiply(const uint16_t* a_tiles, int64_t m, const uint16_t* b_tiles, int64_t n, int64_t k,
              float beta, float* c, int64_t ldc, Bf16Kernel kernel) {
  const int64_t blocks = blocks_of(k), row_tiles = tiles_of(m), column_tiles = tiles_of(n);
  const TilesFn tiles = tiles_function(kernel);
  alignas(64) float block[kBlockEdge * kBlockEdge];
  for (int64_t jt = 0; jt < column_tiles; jt += 2) {
    const int columns = static_cast<int>(std::min<int64_t>(2, column_tiles - jt));
    for (int64_t it = 0; it < row_tiles; it += 2) {
      const int rows = static_cast<int>(std::min<int64_t>(2, row_tiles - it));
      tiles(a_tiles + it * blocks * kTileElements, b_tiles + jt * blocks * kTileElements, blocks,
            rows, columns, block);
      const int64_t i0 = it * kTileRows, j0 = jt * kTileRows;
      store_block(c + i0 * ldc + j0, ldc, block, std::min(kBlockEdge, m - i0),
                  std::min(kBlockEdge, n - j0), beta);
    }
  }
}

// k == 0: C = beta * C (the product is empty), with C not read when beta == 0.
void scale(float* c, int64_t ldc, int64_t m, int64_t n, float beta) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
}

thread_local std::vector<uint16_t> t_a_tiles, t_b_tiles;

}  // namespace

Bf16Kernel default_bf16_kernel() {
  return cpu_has(Isa::amx) ? Bf16Kernel::amx : Bf16Kernel::avx512_bf16;
}

PackedBf16A::PackedBf16A(Op op, const BFloat16* a, int64_t lda, int64_t m, int64_t k)
    : m_(m),
      k_(k),
      tiles_(Tensor::empty({std::max<int64_t>(1, tiles_of(m) * blocks_of(k) * kTileElements)},
                           DType::bf16)) {
  pack_a(reinterpret_cast<uint16_t*>(tiles_.raw_data()), op, bits(a), lda, m, k);
}

PackedBf16A::PackedBf16A(int64_t m, int64_t k, const RowSource& rows)
    : m_(m),
      k_(k),
      tiles_(Tensor::empty({std::max<int64_t>(1, tiles_of(m) * blocks_of(k) * kTileElements)},
                           DType::bf16)) {
  thread_local std::vector<BFloat16> t_rows;
  if (static_cast<int64_t>(t_rows.size()) < kTileRows * k) t_rows.resize(kTileRows * k);
  uint16_t* tiles = reinterpret_cast<uint16_t*>(tiles_.raw_data());
  const int64_t blocks = blocks_of(k);
  for (int64_t t = 0; t < tiles_of(m); ++t) {
    const int64_t first = t * kTileRows, last = std::min(m, first + kTileRows);
    rows(first, last, t_rows.data());
    for (int64_t kb = 0; kb < blocks; ++kb)
      pack_a_tile(tiles + (t * blocks + kb) * kTileElements, Op::none, bits(t_rows.data()), k,
                  last - first, k, 0, kb * kTileDepth);
  }
}

const uint16_t* PackedBf16A::data() const {
  return reinterpret_cast<const uint16_t*>(tiles_.raw_data());
}

void gemm_bf16(const PackedBf16A& a, Op op_b, int64_t n, const BFloat16* b, int64_t ldb, float beta,
               float* c, int64_t ldc, Bf16Kernel kernel) {
  const int64_t m = a.rows(), k = a.depth();
  if (m <= 0 || n <= 0) return;
  if (k <= 0) return scale(c, ldc, m, n, beta);
  uint16_t* b_tiles = buffer(t_b_tiles, tiles_of(n) * blocks_of(k) * kTileElements);
  pack_b(b_tiles, op_b, bits(b), ldb, k, n);
  multiply(a.data(), m, b_tiles, n, k, beta, c, ldc, kernel);
}

void gemm_bf16(Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, const BFloat16* a, int64_t lda,
               const BFloat16* b, int64_t ldb, float beta, float* c, int64_t ldc,
               Bf16Kernel kernel) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) return scale(c, ldc, m, n, beta);
  uint16_t* a_tiles = buffer(t_a_tiles, tiles_of(m) * blocks_of(k) * kTileElements);
  uint16_t* b_tiles = buffer(t_b_tiles, tiles_of(n) * blocks_of(k) * kTileElements);
  pack_a(a_tiles, op_a, bits(a), lda, m, k);
  pack_b(b_tiles, op_b, bits(b), ldb, k, n);
  multiply(a_tiles, m, b_tiles, n, k, beta, c, ldc, kernel);
}

}  // namespace ringgrad::kernels::cpu
