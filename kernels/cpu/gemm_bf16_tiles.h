// The micro-kernels of the bf16 GEMM (Note [bf16 GEMM] in gemm_bf16.h), private to
// gemm_bf16*.cpp: each multiplies packed tiles into one 32 x 32 f32 block of C.
#pragma once
#include <cstdint>

#include "kernels/cpu/gemm_bf16.h"

namespace ringgrad::kernels::cpu {

constexpr int64_t kTileRows = 16;                          // rows of an A tile, columns of a B tile
constexpr int64_t kTileDepth = 32;                         // products per tile
constexpr int64_t kTileElements = kTileRows * kTileDepth;  // 512 bf16: 1 KiB
constexpr int64_t kBlockEdge = 2 * kTileRows;              // a block of C is 2 x 2 tiles

// block (kBlockEdge x kBlockEdge, row-major) = the product over `blocks` k blocks of `rows` (1 or
// 2) A tile rows and `columns` (1 or 2) B tile columns; tile (r, kb) of a is at
// a + (r * blocks + kb) * kTileElements, likewise for b. Parts outside rows x columns are not
// written.
using TilesFn = void (*)(const uint16_t* a, const uint16_t* b, int64_t blocks, int rows,
                         int columns, float* block);

TilesFn tiles_function(Bf16Kernel kernel);

}  // namespace ringgrad::kernels::cpu
