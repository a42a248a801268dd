// GPU test cases skip themselves on a machine without a usable CUDA device: they print
// "skipped: no CUDA device: <reason>", which CTest's SKIP_REGULAR_EXPRESSION for these suites
// turns into a reported skip (tests/comm/CMakeLists.txt), never a silent pass.
#pragma once
#include <cstdio>

#include "core/cuda_memory.h"

namespace ringgrad::comm::testing {

inline bool skip_without_cuda() {
  if (cuda_device_count() > 0) return false;
  std::printf("skipped: no CUDA device: %s\n", cuda_unavailable_reason().c_str());
  std::fflush(stdout);
  return true;
}

}  // namespace ringgrad::comm::testing
