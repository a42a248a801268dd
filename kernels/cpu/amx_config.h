// The AMX tile configuration of the calling thread, shared by every AMX kernel (the bf16 GEMM,
// the direct bf16 convolution): each says the shape of its eight tiles, and the configuration
// is loaded only when it differs from the one the thread has (it is per thread and survives
// context switches). Private to kernels/cpu; only call it where cpu_has(Isa::amx).
#pragma once
#include <cstdint>

namespace ringgrad::kernels::cpu {

// Rows and bytes per row of tiles 0-7 (palette 1: at most 16 rows of 64 bytes).
struct TileShapes {
  uint8_t rows[8];
  uint16_t bytes_per_row[8];
};

void use_tile_shapes(const TileShapes& shapes);

}  // namespace ringgrad::kernels::cpu
