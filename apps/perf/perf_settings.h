// all_reduce_perf & co.'s flags, nccl-tests' names and meanings: parsed and checked into
// Settings before anything starts.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "apps/perf/perf_harness.h"

namespace ringgrad::perf {

struct Settings {
  size_t min_bytes = 32 << 20, max_bytes = 32 << 20, step_bytes = 1 << 20;
  double step_factor = 1;
  int iters = 20, warmup = 5, check = 1, root = 0;
  std::vector<DType> dtypes{DType::f32};
  std::vector<comm::ReduceOp> ops{comm::ReduceOp::sum};
  std::string backend = "ring", device = "cpu", json_path;
};

// Parses argv into `s`. Returns the exit code when the program stops here: 0 after --help, 2
// for a bad flag (one line on stderr); nullopt when the run goes on.
std::optional<int> parse_settings(int argc, char** argv, const PerfCollective& c, Settings& s);

const char* dtype_label(DType d);  // "float", "half", ... as -d spells them

}  // namespace ringgrad::perf
