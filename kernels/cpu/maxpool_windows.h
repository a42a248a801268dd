// Max pooling of f32 planes eight outputs at a time with AVX2 gathers, for kernels/cpu/pool.cpp's
// f32 and bf16 planes on CPUs with AVX2; pool.cpp's maxpool_plane, the plain scan, is the
// reference it is tested against (tests/kernels/test_pool.cpp). Private to kernels/cpu.
//
// Note [Max pooling by window tables]
// Each output's window is the same list of input offsets in every (image, channel) plane, so the
// offsets are tabulated once a call, slot by slot (the window's positions in row-major order, the
// plain scan's order). A slot that falls on padding points at a sentinel -inf stored just past
// the plane: -inf never replaces the running maximum (it is not larger, and not NaN), so every
// output scans all its slots with no bounds tests, and one gather fetches a slot for eight
// outputs. Lane by lane it is the plain scan: the same order, the same replacement rule
// (max_pool_takes), the same starting index, so values and indices match it, ties and NaN
// included. The scalar scan took a mispredicted branch per comparison on ReLU outputs, where
// ties and near-ties are everywhere (docs/measurements.md has the figures).
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/ops.h"

namespace ringgrad::kernels::cpu {

class MaxPoolWindows {
 public:
  // The windows of pooling (H, W) planes into (P, Q) ones under p.
  MaxPoolWindows(int64_t H, int64_t W, int64_t P, int64_t Q, const Pool2dParams& p);

  // Floats a plane needs in `padded`: its H * W values, then the sentinel.
  int64_t padded_size() const { return plane_ + 1; }

  // One plane: `padded` holds the plane's values and then -inf (padded_size() floats);
  // y and index get P * Q outputs. Needs AVX2 (cpu_has(Isa::avx2)).
  void pool(float* y, int32_t* index, const float* padded) const;

 private:
  int64_t plane_;                // H * W, also the sentinel's offset
  int64_t outputs_;              // P * Q
  int64_t stride_;               // outputs_ rounded up to whole vectors: one slot's row
  int64_t slots_;                // positions per window
  std::vector<int32_t> offset_;  // [slot][output]: where in the padded plane
  std::vector<int32_t> first_;   // [output]: the index an all -inf window reports
};

}  // namespace ringgrad::kernels::cpu
