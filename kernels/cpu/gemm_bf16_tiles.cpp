// The two micro-kernels of the bf16 GEMM (gemm_bf16_tiles.h), on the same packed tiles:
//   AMX: the eight tile registers hold the 2 x 2 C tiles (tmm0-3), two A tiles (tmm4-5) and two
//     B tiles (tmm6-7); one TDPBF16PS multiplies a 16 x 32 A tile by a 32 x 16 B tile (8,192
//     multiply-adds) into a C tile;
//   AVX512-BF16: one 16 x 16 C tile at a time in 16 vectors, one per row; VDPBF16PS adds a
//     broadcast pair of A's row to the pairs of 16 columns of B.
// Both accumulate in f32, pairs of products added before the sum (TDPBF16PS and VDPBF16PS
// round the same way; products of bf16 values are exact in f32).
#include "kernels/cpu/gemm_bf16_tiles.h"

#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/amx_config.h"

#define RG_AMX __attribute__((target("amx-tile,amx-bf16")))
#define RG_AVX512_BF16 __attribute__((target("avx512f,avx512bf16")))

namespace ringgrad::kernels::cpu {

namespace {

// Every tile 16 rows of 64 bytes.
RG_AMX void configure_tiles() {
  TileShapes shapes;
  for (int t = 0; t < 8; ++t) {
    shapes.rows[t] = kTileRows;
    shapes.bytes_per_row[t] = kTileDepth * sizeof(uint16_t);
  }
  use_tile_shapes(shapes);
}

constexpr int kTileStride = kTileDepth * sizeof(uint16_t);  // bytes per packed tile row
constexpr int kBlockStride = kBlockEdge * sizeof(float);    // bytes per block row

// Tile numbers are immediates, so each shape of block is its own function.
template <int Rows, int Columns>
RG_AMX void amx_tiles(const uint16_t* a, const uint16_t* b, int64_t blocks, float* block) {
  configure_tiles();
  _tile_zero(0);
  if (Columns == 2) _tile_zero(1);
  if (Rows == 2) _tile_zero(2);
  if (Rows == 2 && Columns == 2) _tile_zero(3);
  for (int64_t kb = 0; kb < blocks; ++kb) {
    _tile_loadd(4, a + kb * kTileElements, kTileStride);
    if (Rows == 2) _tile_loadd(5, a + (blocks + kb) * kTileElements, kTileStride);
    _tile_loadd(6, b + kb * kTileElements, kTileStride);
    if (Columns == 2) _tile_loadd(7, b + (blocks + kb) * kTileElements, kTileStride);
    _tile_dpbf16ps(0, 4, 6);
    if (Columns == 2) _tile_dpbf16ps(1, 4, 7);
    if (Rows == 2) _tile_dpbf16ps(2, 5, 6);
    if (Rows == 2 && Columns == 2) _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, block, kBlockStride);
  if (Columns == 2) _tile_stored(1, block + kTileRows, kBlockStride);
  if (Rows == 2) _tile_stored(2, block + kTileRows * kBlockEdge, kBlockStride);
  if (Rows == 2 && Columns == 2)
    _tile_stored(3, block + kTileRows * kBlockEdge + kTileRows, kBlockStride);
}

void amx(const uint16_t* a, const uint16_t* b, int64_t blocks, int rows, int columns,
         float* block) {
  if (rows == 2 && columns == 2) return amx_tiles<2, 2>(a, b, blocks, block);
  if (rows == 2) return amx_tiles<2, 1>(a, b, blocks, block);
  if (columns == 2) return amx_tiles<1, 2>(a, b, blocks, block);
  amx_tiles<1, 1>(a, b, blocks, block);
}

// One 16 x 16 C tile (into block, row stride kBlockEdge) from a row of A tiles and a column of
// B tiles, each tile at tile_step elements after the last.
RG_AVX512_BF16 void dot_tile(const uint16_t* a, const uint16_t* b, int64_t blocks, float* block) {
  __m512 acc[kTileRows];
#pragma GCC unroll 16
  for (int i = 0; i < kTileRows; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t kb = 0; kb < blocks; ++kb, a += kTileElements, b += kTileElements) {
    for (int pair = 0; pair < kTileDepth / 2; ++pair) {
      const __m512bh columns = (__m512bh)_mm512_loadu_si512(b + pair * 2 * kTileRows);
#pragma GCC unroll 16
      for (int i = 0; i < kTileRows; ++i) {
        int32_t a_pair;
        std::memcpy(&a_pair, a + i * kTileDepth + 2 * pair, sizeof a_pair);
        acc[i] = _mm512_dpbf16_ps(acc[i], columns, (__m512bh)_mm512_set1_epi32(a_pair));
      }
    }
  }
#pragma GCC unroll 16
  for (int i = 0; i < kTileRows; ++i) _mm512_storeu_ps(block + i * kBlockEdge, acc[i]);
}

void avx512_bf16(const uint16_t* a, const uint16_t* b, int64_t blocks, int rows, int columns,
                 float* block) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < columns; ++c)
      dot_tile(a + r * blocks * kTileElements, b + c * blocks * kTileElements, blocks,
               block + r * kTileRows * kBlockEdge + c * kTileRows);
}

}  // namespace

TilesFn tiles_function(Bf16Kernel kernel) { return kernel == Bf16Kernel::amx ? amx : avx512_bf16; }

}  // namespace ringgrad::kernels::cpu
