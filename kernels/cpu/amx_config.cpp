// Loading the AMX tile configuration (kernels/cpu/amx_config.h).
#include "kernels/cpu/amx_config.h"

#include <cstring>

namespace ringgrad::kernels::cpu {

namespace {

// LDTILECFG's 64-byte operand.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

}  // namespace

void use_tile_shapes(const TileShapes& shapes) {
  thread_local TileShapes loaded{};
  thread_local bool any = false;
  if (any && std::memcmp(&loaded, &shapes, sizeof shapes) == 0) return;
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.rows[t] = shapes.rows[t];
    config.bytes_per_row[t] = shapes.bytes_per_row[t];
  }
  // Not _tile_loadconfig: GCC 12's names only the first 8 bytes of the operand as read, so the
  // stores of the shapes may be dropped as dead (and LDTILECFG then faults on a bad shape).
  asm volatile("ldtilecfg %0" : : "m"(config));
  loaded = shapes;
  any = true;
}

}  // namespace ringgrad::kernels::cpu
