// Single-precision GEMM with AVX-512 intrinsics (see sgemm_avx512.h).
//
// Note [AVX-512 sgemm]
// Debian 12's OpenBLAS (0.3.21) runs its AVX2 kernels on the AMD EPYC CPUs these machines have,
// and it has to: the machines pin OPENBLAS_CORETYPE=Haswell because that release computes wrong
// results or crashes with its AVX-512 kernels on some processors. PyTorch's oneDNN, the
// comparison, runs AVX-512 there. On conv_bench's resnet20 shapes OpenBLAS's AVX-512 kernels
// measured clearly faster than its AVX2 ones (docs/measurements.md), so the f32 GEMMs behind
// our convolutions and linear layers run this kernel where the CPU has AVX-512F
// (RINGGRAD_SGEMM=openblas turns it off). Only the functions marked RG_AVX512 use AVX-512
// instructions; the rest of the file and of the tree is compiled for the baseline CPU, so nothing
// runs them on a CPU without AVX-512.
//
// The scheme is the classic one (Goto and van de Geijn), cut to the shapes our layers have:
// C is computed in tiles of kRows rows x up to kColumns columns. op(A) is packed per block of
// products (block_depth: as many as let one tile column of B stay in L1) into tiles of kRows
// rows, stored column by column, so the kernel reads kRows consecutive floats per step and
// broadcasts them. op(B) is read in place, one row of the tile per step (three 16-float vectors,
// the last masked at the right edge, prefetched a few rows ahead), when it is not transposed:
// for the convolutions that is the column matrix, which packing would copy once more. A transposed
// op(B) (16 x 16 blocks transposed in registers), or rows whose stride is a multiple of 2 KiB
// (every row of the tile would fall in the same L1 set), are packed into a strip first. Each tile
// keeps its kRows x 3 accumulators in registers (24 of the 32) over the whole block.
#include "kernels/cpu/sgemm_avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/avx2.h"       // transpose_8x8
#include "kernels/cpu/avx512_bw.h"  // lane_sum
#include "kernels/cpu/cpu_features.h"

#define RG_AVX512 __attribute__((target("avx512f")))

namespace ringgrad::kernels::cpu {

namespace {

constexpr int64_t kLanes = 16;                   // floats per vector
constexpr int64_t kRows = 8;                     // rows of C per tile
constexpr int64_t kVectors = 3;                  // vectors per row of a tile
constexpr int64_t kColumns = kVectors * kLanes;  // columns of C per tile
constexpr int64_t kPrefetchRows = 4;             // how far ahead a tile prefetches B's rows

// Per-thread packing buffers, grown to the largest call seen and then reused, so a training
// step allocates nothing after its first iteration.
float* buffer(std::vector<float>& storage, int64_t size) {
  if (static_cast<int64_t>(storage.size()) < size) storage.resize(size);
  return storage.data();
}

// op(X)[i][p] for a row-major X with leading dimension ld.
inline float element(Op op, const float* x, int64_t ld, int64_t i, int64_t p) {
  return op == Op::none ? x[i * ld + p] : x[p * ld + i];
}

// tile[p * kRows + i] = a[i * lda + p] for the kRows (8) rows i and p < depth: 8 x 8 blocks
// transposed in registers (avx2.h), the products past the last whole block one by one.
RG_AVX512 void pack_whole_row_tile(float* tile, const float* a, int64_t lda, int64_t depth) {
  static_assert(kRows == 8, "one 8 x 8 transpose per block of products");
  int64_t p = 0;
  for (; p + 8 <= depth; p += 8) {
    __m256 r[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(a + i * lda + p);
    transpose_8x8(r);
    for (int e = 0; e < 8; ++e) _mm256_storeu_ps(tile + (p + e) * kRows, r[e]);
  }
  for (; p < depth; ++p)
    for (int64_t i = 0; i < kRows; ++i) tile[p * kRows + i] = a[i * lda + p];
}

// op(A) rows [0, m), products [k0, k0 + depth) -> tiles of kRows rows; tile t holds, for each
// product p, rows t*kRows .. t*kRows + kRows - 1 (rows past m are 0).
void pack_a(float* packed, Op op, const float* a, int64_t lda, int64_t m, int64_t k0,
            int64_t depth) {
  for (int64_t i0 = 0; i0 < m; i0 += kRows) {
    float* tile = packed + i0 * depth;
    if (op == Op::none && i0 + kRows <= m) {
      pack_whole_row_tile(tile, a + i0 * lda + k0, lda, depth);
      continue;
    }
    for (int64_t i = 0; i < kRows; ++i) {
      if (i0 + i >= m) {
        for (int64_t p = 0; p < depth; ++p) tile[p * kRows + i] = 0;
        continue;
      }
      for (int64_t p = 0; p < depth; ++p) tile[p * kRows + i] = element(op, a, lda, i0 + i, k0 + p);
    }
  }
}

// The all-lanes masked forms of the shuffles, as in lane_sum (GCC 12's plain ones warn).
constexpr __mmask16 kAll = 0xFFFF;

// Pairs of floats (64-bit units) interleaved, as unpacklo/hi_ps do single floats.
RG_AVX512 inline __m512 pairs_lo(__m512 x, __m512 y) {
  return _mm512_castpd_ps(
      _mm512_mask_unpacklo_pd(_mm512_castps_pd(x), 0xFF, _mm512_castps_pd(x), _mm512_castps_pd(y)));
}
RG_AVX512 inline __m512 pairs_hi(__m512 x, __m512 y) {
  return _mm512_castpd_ps(
      _mm512_mask_unpackhi_pd(_mm512_castps_pd(x), 0xFF, _mm512_castps_pd(x), _mm512_castps_pd(y)));
}

// out[p * kColumns + j] = b[j * ldb + p] for j < rows and p < depth (both at most 16), and 0 for
// rows j >= rows: a 16 x 16 transpose in registers, in three rounds of shuffles that interleave
// ever larger units (single floats, pairs of floats, 128-bit lanes).
RG_AVX512 void transpose_16x16(const float* b, int64_t ldb, int64_t rows, int64_t depth,
                               float* out) {
  const __mmask16 products = static_cast<__mmask16>((1u << depth) - 1);
  __m512 r[16], t[16];
  for (int j = 0; j < 16; ++j)
    r[j] = j < rows ? _mm512_maskz_loadu_ps(products, b + j * ldb) : _mm512_setzero_ps();
  for (int j = 0; j < 16; j += 2) {  // lane L: rows j, j+1 of products 4L..4L+1 | 4L+2..4L+3
    t[j] = _mm512_mask_unpacklo_ps(r[j], kAll, r[j], r[j + 1]);
    t[j + 1] = _mm512_mask_unpackhi_ps(r[j], kAll, r[j], r[j + 1]);
  }
  for (int j = 0; j < 16; j += 4) {  // r[j + e], lane L: rows j..j+3 of product 4L + e
    r[j] = pairs_lo(t[j], t[j + 2]);
    r[j + 1] = pairs_hi(t[j], t[j + 2]);
    r[j + 2] = pairs_lo(t[j + 1], t[j + 3]);
    r[j + 3] = pairs_hi(t[j + 1], t[j + 3]);
  }
  // Lanes: t[e] = rows 0-3 and 4-7 of products e and 8+e, t[4 + e] of 4+e and 12+e; t[8 + e]
  // and t[12 + e] the same for rows 8-15.
  for (int g = 0; g < 16; g += 8)
    for (int e = 0; e < 4; ++e) {
      t[g + e] = _mm512_mask_shuffle_f32x4(r[g + e], kAll, r[g + e], r[g + 4 + e],
                                           _MM_SHUFFLE(2, 0, 2, 0));
      t[g + 4 + e] = _mm512_mask_shuffle_f32x4(r[g + e], kAll, r[g + e], r[g + 4 + e],
                                               _MM_SHUFFLE(3, 1, 3, 1));
    }
  for (int h = 0; h < 8; h += 4)  // all 16 rows of product h + e, then of 8 + h + e
    for (int e = 0; e < 4; ++e) {
      const __m512 lo = t[h + e], hi = t[8 + h + e];
      if (h + e < depth)
        _mm512_storeu_ps(out + (h + e) * kColumns,
                         _mm512_mask_shuffle_f32x4(lo, kAll, lo, hi, _MM_SHUFFLE(2, 0, 2, 0)));
      if (8 + h + e < depth)
        _mm512_storeu_ps(out + (8 + h + e) * kColumns,
                         _mm512_mask_shuffle_f32x4(lo, kAll, lo, hi, _MM_SHUFFLE(3, 1, 3, 1)));
    }
}

// op(B) products [k0, k0 + depth), columns [j0, j0 + columns) -> a strip of kColumns floats per
// product. Columns past the edge are left as they are, or zero: the tile's masked load never
// reads them. A transposed B goes 16 x 16 at a time through registers.
void pack_b(float* strip, Op op, const float* b, int64_t ldb, int64_t k0, int64_t depth, int64_t j0,
            int64_t columns) {
  if (op == Op::transpose) {
    for (int64_t j = 0; j < columns; j += kLanes)
      for (int64_t p = 0; p < depth; p += kLanes)
        transpose_16x16(b + (j0 + j) * ldb + k0 + p, ldb, std::min(kLanes, columns - j),
                        std::min(kLanes, depth - p), strip + p * kColumns + j);
    return;
  }
  for (int64_t j = 0; j < columns; ++j)
    for (int64_t p = 0; p < depth; ++p)
      strip[p * kColumns + j] = element(op, b, ldb, k0 + p, j0 + j);
}

#define RG_AVX512_INLINE __attribute__((target("avx512f"), always_inline)) inline

// The kRows x V accumulators of a tile of C (24 of the 32 vector registers at V = 3), and what
// every tile kernel does with them: add one product (a[i] times a row of B, for each row i), and
// store alpha * sum + beta * C for the first `rows` rows, the last vector masked by `last`.
template <int V>
struct Accumulators {
  __m512 acc[kRows][V];

  RG_AVX512_INLINE Accumulators() {
#pragma GCC unroll 8
    for (int i = 0; i < kRows; ++i)
#pragma GCC unroll 3
      for (int v = 0; v < V; ++v) acc[i][v] = _mm512_setzero_ps();
  }
  RG_AVX512_INLINE void add(const float* a, const __m512 (&row)[V]) {
#pragma GCC unroll 8
    for (int i = 0; i < kRows; ++i) {
      const __m512 ai = _mm512_set1_ps(a[i]);
#pragma GCC unroll 3
      for (int v = 0; v < V; ++v) acc[i][v] = _mm512_fmadd_ps(ai, row[v], acc[i][v]);
    }
  }
  RG_AVX512_INLINE void store(int64_t rows, float alpha, float beta, __mmask16 last, float* c,
                              int64_t ldc) const {
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 8
    for (int i = 0; i < kRows; ++i) {
      if (i >= rows) continue;
      float* out = c + i * ldc;
#pragma GCC unroll 3
      for (int v = 0; v < V; ++v) {
        const __mmask16 mask = v + 1 < V ? __mmask16(0xFFFF) : last;
        __m512 r = _mm512_mul_ps(va, acc[i][v]);
        if (beta != 0.0f) r = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mask, out + v * kLanes), r);
        _mm512_mask_storeu_ps(out + v * kLanes, mask, r);
      }
    }
  }
};

// C tile (rows x the columns that `last` and V say) = alpha * sum_p a[p] b[p] + beta * C, with
// V vectors per row, the last one masked by `last`; b advances by ldb per product.
template <int V>
RG_AVX512 void tile(int64_t depth, const float* a, const float* b, int64_t ldb, __mmask16 last,
                    int64_t rows, float alpha, float beta, float* c, int64_t ldc) {
  Accumulators<V> sums;
  for (int64_t p = 0; p < depth; ++p, a += kRows, b += ldb) {
    // B read in place has its rows far apart, where the hardware prefetchers do not follow.
#pragma GCC unroll 3
    for (int v = 0; v < V; ++v)
      _mm_prefetch(reinterpret_cast<const char*>(b + kPrefetchRows * ldb + v * kLanes),
                   _MM_HINT_T0);
    __m512 row[V];
#pragma GCC unroll 3
    for (int v = 0; v < V; ++v)
      row[v] =
          v + 1 < V ? _mm512_loadu_ps(b + v * kLanes) : _mm512_maskz_loadu_ps(last, b + v * kLanes);
    sums.add(a, row);
  }
  sums.store(rows, alpha, beta, last, c, ldc);
}

// C = alpha A B^T + beta C where A's rows (m of them) and B's rows (n) both run along the
// product, so C[i][j] is the dot product of row i of A and row j of B: the shape of dw = dY
// col^T and of a linear layer's forward, taken here when A has too few rows to pay for
// transposing B into strips (tiles_pay_for_transposing). Such a tile reads both operands in
// place with the products in the vector lanes: kDotRows x kDotColumns accumulators, each summed
// across its lanes at the end.
// Rows and columns past the edge repeat the last real one and are not stored.
constexpr int kDotRows = 4, kDotColumns = 6;

RG_AVX512 void dot_tile(int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                        int64_t rows, int64_t columns, float alpha, float beta, float* c,
                        int64_t ldc) {
  const float* a_row[kDotRows];
  const float* b_row[kDotColumns];
  for (int i = 0; i < kDotRows; ++i) a_row[i] = a + std::min<int64_t>(i, rows - 1) * lda;
  for (int j = 0; j < kDotColumns; ++j) b_row[j] = b + std::min<int64_t>(j, columns - 1) * ldb;
  __m512 acc[kDotRows][kDotColumns];
#pragma GCC unroll 4
  for (int i = 0; i < kDotRows; ++i)
#pragma GCC unroll 6
    for (int j = 0; j < kDotColumns; ++j) acc[i][j] = _mm512_setzero_ps();
  const __mmask16 tail = static_cast<__mmask16>((1u << (k % kLanes)) - 1);
  for (int64_t p = 0; p < k; p += kLanes) {  // one vector of products: 16, or the tail's
    const __mmask16 mask = p + kLanes <= k ? __mmask16(0xFFFF) : tail;
    __m512 av[kDotRows];
#pragma GCC unroll 4
    for (int i = 0; i < kDotRows; ++i) av[i] = _mm512_maskz_loadu_ps(mask, a_row[i] + p);
#pragma GCC unroll 6
    for (int j = 0; j < kDotColumns; ++j) {
      const __m512 bv = _mm512_maskz_loadu_ps(mask, b_row[j] + p);
#pragma GCC unroll 4
      for (int i = 0; i < kDotRows; ++i) acc[i][j] = _mm512_fmadd_ps(av[i], bv, acc[i][j]);
    }
  }
  // Constant indices only (fully unrolled), or the compiler keeps acc in memory.
#pragma GCC unroll 4
  for (int i = 0; i < kDotRows; ++i)
#pragma GCC unroll 6
    for (int j = 0; j < kDotColumns; ++j) {
      if (i >= rows || j >= columns) continue;
      float* out = c + i * ldc + j;
      const float sum = alpha * lane_sum(acc[i][j]);
      *out = beta == 0.0f ? sum : sum + beta * *out;
    }
}

// The dot-product tiles over all of C, column tiles outermost so that the kDotColumns rows of
// B stay in L1 while every row tile of A passes them.
void dot_gemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
              const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  for (int64_t j0 = 0; j0 < n; j0 += kDotColumns)
    for (int64_t i0 = 0; i0 < m; i0 += kDotRows)
      dot_tile(k, a + i0 * lda, lda, b + j0 * ldb, ldb, std::min<int64_t>(kDotRows, m - i0),
               std::min<int64_t>(kDotColumns, n - j0), alpha, beta, c + i0 * ldc + j0, ldc);
}

// C = A B^T either way: the dot-product tiles read both in place; the tiles transpose B into
// strips first, which pays once each strip serves enough row tiles of A and B fills more than
// one strip (measured on the weight-gradient shapes of ResNet's convs: docs/measurements.md).
bool tiles_pay_for_transposing(int64_t m, int64_t n) { return m >= 32 && n >= 2 * kColumns; }

using TileFn = void (*)(int64_t, const float*, const float*, int64_t, __mmask16, int64_t, float,
                        float, float*, int64_t);
constexpr TileFn kTiles[kVectors] = {tile<1>, tile<2>, tile<3>};

// Products per depth block: k split evenly into blocks whose tile column of B (depth x kColumns
// floats) fills at most three quarters of the L1 data cache, so that B, read from L2 by the first
// row tile of A, is still in L1 for the others (the choice among depths: docs/measurements.md).
int64_t block_depth(int64_t k) {
  static const int64_t most = std::clamp<int64_t>(
      cpu_features().l1d_bytes * 3 / 4 / (kColumns * sizeof(float)) / kLanes * kLanes, 64, 512);
  const int64_t blocks = (k + most - 1) / most;
  return (k + blocks - 1) / blocks;
}

bool read_b_in_place(Op op_b, int64_t ldb) { return op_b == Op::none && ldb % kSetAliasing != 0; }

// k == 0: C = beta * C (the product is empty), with C not read when beta == 0.
void scale(float* c, int64_t ldc, int64_t m, int64_t n, float beta) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
}

}  // namespace

bool cpu_has_avx512() { return cpu_has(Isa::avx512); }

int64_t sgemm_in_place_stride(int64_t columns) {
  return columns % kSetAliasing == 0 ? columns + kLanes : columns;
}

bool avx512_sgemm_enabled() {
  static const bool enabled = [] {
    const char* choice = std::getenv("RINGGRAD_SGEMM");
    return cpu_has_avx512() && !(choice && std::strcmp(choice, "openblas") == 0);
  }();
  return enabled;
}

namespace {

// C (+)= the product of one depth block [k0, k0 + depth) of op(A), packed, with op(B).
void multiply_block(const float* packed_a, int64_t m, int64_t n, int64_t k0, int64_t depth, Op op_b,
                    float alpha, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  thread_local std::vector<float> b_storage;
  const int64_t row_tiles = (m + kRows - 1) / kRows;
  const bool in_place = read_b_in_place(op_b, ldb);
  float* strip = in_place ? nullptr : buffer(b_storage, kColumns * depth);
  for (int64_t j0 = 0; j0 < n; j0 += kColumns) {
    const int64_t columns = std::min(kColumns, n - j0);
    const int64_t vectors = (columns + kLanes - 1) / kLanes;
    const int64_t lanes = columns - (vectors - 1) * kLanes;  // in the last vector, 1..16
    const __mmask16 last = static_cast<__mmask16>((1u << lanes) - 1);
    const float* b_tile = b + k0 * ldb + j0;
    int64_t b_stride = ldb;
    if (!in_place) {
      pack_b(strip, op_b, b, ldb, k0, depth, j0, columns);
      b_tile = strip;
      b_stride = kColumns;
    }
    for (int64_t t = 0; t < row_tiles; ++t) {
      const int64_t i0 = t * kRows;
      kTiles[vectors - 1](depth, packed_a + i0 * depth, b_tile, b_stride, last,
                          std::min(kRows, m - i0), alpha, beta, c + i0 * ldc + j0, ldc);
    }
  }
}

// A tile of C = op(A) col(x) (sgemm_avx512_implicit): as tile(), but row p = (tap, channel) of
// B is read at `base[v] + shift(tap) + channel * stride` under the tap's mask for vector v (and
// `last` for the last vector). `first`: B's first product. Products run tap by tap, so each
// tap's masks are loaded once for its run of channels.
template <int V>
RG_AVX512 void implicit_tile(int64_t depth, const float* a, const ImplicitColumns& b,
                             int64_t stride, const float* const* base, const uint16_t* const* masks,
                             __mmask16 last, int64_t first, int64_t rows, float beta, float* c,
                             int64_t ldc) {
  Accumulators<V> sums;
  const int64_t channels = b.channels();
  int64_t tap = first / channels, channel = first % channels;
  for (int64_t p = 0; p < depth; ++tap, channel = 0) {
    const int64_t run = std::min(channels - channel, depth - p);
    __mmask16 mask[V];
    const float* from[V];
#pragma GCC unroll 3
    for (int v = 0; v < V; ++v) {
      mask[v] = v + 1 < V ? masks[v][tap] : masks[v][tap] & last;
      from[v] = base[v] + b.shift(tap) + channel * stride;
    }
    for (int64_t i = 0; i < run; ++i, a += kRows) {
      __m512 row[V];
#pragma GCC unroll 3
      for (int v = 0; v < V; ++v) row[v] = _mm512_maskz_loadu_ps(mask[v], from[v] + i * stride);
      sums.add(a, row);
    }
    p += run;
  }
  sums.store(rows, 1.0f, beta, last, c, ldc);
}

using ImplicitTileFn = void (*)(int64_t, const float*, const ImplicitColumns&, int64_t,
                                const float* const*, const uint16_t* const*, __mmask16, int64_t,
                                int64_t, float, float*, int64_t);
constexpr ImplicitTileFn kImplicitTiles[kVectors] = {implicit_tile<1>, implicit_tile<2>,
                                                     implicit_tile<3>};

// Floats of a packed op(A) block of `depth` products: row tiles of kRows rows each.
int64_t packed_block_size(int64_t m, int64_t depth) {
  return (m + kRows - 1) / kRows * kRows * depth;
}

}  // namespace

void sgemm_avx512(Op op_a, Op op_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                  int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) return scale(c, ldc, m, n, beta);
  if (op_a == Op::none && op_b == Op::transpose && !tiles_pay_for_transposing(m, n))
    return dot_gemm(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  thread_local std::vector<float> a_storage;
  const int64_t block = block_depth(k);
  for (int64_t k0 = 0; k0 < k; k0 += block) {
    const int64_t depth = std::min(block, k - k0);
    float* packed_a = buffer(a_storage, packed_block_size(m, depth));
    pack_a(packed_a, op_a, a, lda, m, k0, depth);
    // Later blocks add to the first.
    multiply_block(packed_a, m, n, k0, depth, op_b, alpha, b, ldb, k0 == 0 ? beta : 1.0f, c, ldc);
  }
}

PackedSgemmA::PackedSgemmA(Op op, const float* a, int64_t lda, int64_t m, int64_t k)
    : m_(m), k_(k), tiles_(packed_block_size(m, k)) {
  const int64_t block = block_depth(k);
  for (int64_t k0 = 0; k0 < k; k0 += block)  // block k0 starts after k0 products of every row
    pack_a(tiles_.data() + packed_block_size(m, k0), op, a, lda, m, k0, std::min(block, k - k0));
}

void sgemm_avx512(const PackedSgemmA& a, Op op_b, int64_t n, const float* b, int64_t ldb,
                  float beta, float* c, int64_t ldc) {
  const int64_t m = a.rows(), k = a.depth();
  if (m <= 0 || n <= 0) return;
  if (k <= 0) return scale(c, ldc, m, n, beta);
  const int64_t block = block_depth(k);
  for (int64_t k0 = 0; k0 < k; k0 += block)
    multiply_block(a.tiles() + packed_block_size(m, k0), m, n, k0, std::min(block, k - k0), op_b,
                   1.0f, b, ldb, k0 == 0 ? beta : 1.0f, c, ldc);
}

ImplicitColumns::ImplicitColumns(int64_t C, int64_t H, int64_t W, int64_t R, int64_t S,
                                 int64_t pad_h, int64_t pad_w, int64_t images)
    : channels_(C) {
  for (int64_t r = 0; r < R; ++r)
    for (int64_t s = 0; s < S; ++s) shifts_.push_back((r - pad_h) * W + s - pad_w);
  const int64_t plane = H * W, columns = images * plane;
  const int64_t vectors = (columns + kLanes - 1) / kLanes;
  masks_.assign(vectors * R * S, 0);
  for (int64_t j = 0; j < columns; ++j) {
    const int64_t p = j % plane / W, q = j % W;
    for (int64_t r = 0; r < R; ++r)
      for (int64_t s = 0; s < S; ++s) {
        const int64_t h = p + r - pad_h, w = q + s - pad_w;
        if (h >= 0 && h < H && w >= 0 && w < W)
          masks_[j / kLanes * R * S + r * S + s] |= static_cast<uint16_t>(1u << (j % kLanes));
      }
  }
}

void sgemm_avx512_implicit(const PackedSgemmA& a, const ImplicitColumns& b, const float* x,
                           int64_t n, float* c, int64_t ldc) {
  const int64_t m = a.rows(), k = a.depth();
  RG_CHECK(k == b.products(), "the packed weights have ", k, " products per row, the columns ",
           b.products());
  const int64_t row_tiles = (m + kRows - 1) / kRows, block = block_depth(k);
  for (int64_t j0 = 0; j0 < n; j0 += kColumns) {
    const int64_t columns = std::min(kColumns, n - j0);
    const int64_t vectors = (columns + kLanes - 1) / kLanes;
    const __mmask16 last = static_cast<__mmask16>((1u << (columns - (vectors - 1) * kLanes)) - 1);
    const float* base[kVectors];
    const uint16_t* masks[kVectors];
    for (int64_t v = 0; v < vectors; ++v) {
      base[v] = x + j0 + v * kLanes;
      masks[v] = b.masks(j0 / kLanes + v);
    }
    for (int64_t k0 = 0; k0 < k; k0 += block) {
      const int64_t depth = std::min(block, k - k0);
      const float* packed = a.tiles() + packed_block_size(m, k0);
      for (int64_t t = 0; t < row_tiles; ++t)
        kImplicitTiles[vectors - 1](depth, packed + t * kRows * depth, b, n, base, masks, last, k0,
                                    std::min(kRows, m - t * kRows), k0 == 0 ? 0.0f : 1.0f,
                                    c + t * kRows * ldc + j0, ldc);
    }
  }
}

}  // namespace ringgrad::kernels::cpu
