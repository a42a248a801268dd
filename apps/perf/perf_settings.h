// all_reduce_perf & co.'s flags: every flag of nccl-tests, with its name, meaning, default and
// range, parsed and checked into Settings before anything starts. Flags that only mean
// something to nccl-tests' threads or to NCCL itself (-t, -g, -G, -R, -x, -D, ...) take their
// default value; any other value is refused with one line saying why.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "apps/perf/perf_harness.h"

namespace ringgrad::perf {

// -a: which rank's time a row reports (nccl-tests' numbering).
enum class TimeStatistic { rank0 = 0, average = 1, minimum = 2, maximum = 3 };
// -z: how the timed loop waits (nccl-tests' numbering).
enum class Blocking {
  none = 0,              // issue every collective, wait for the last
  wait_and_barrier = 1,  // wait for each collective, then a barrier
  wait = 2,              // wait for each collective
  iteration_barrier = 3  // wait for each iteration's -m collectives, then a barrier (untimed)
};

struct Settings {
  size_t min_bytes = 32 << 20, max_bytes = 32 << 20, step_bytes = 1 << 20;
  uint64_t step_factor = 1;  // > 1: multiply instead of adding step_bytes
  int iters = 20, warmup = 1, agg_iters = 1, run_cycles = 1, check = 1;
  int root = 0;  // -1: every rank in turn
  int unalign = 0;
  int timeout_s = 0;  // 0: RINGGRAD_TIMEOUT_S, else 10 minutes
  Blocking blocking = Blocking::none;
  TimeStatistic statistic = TimeStatistic::average;
  bool report_cputime = false, report_timestamps = false;
  std::vector<DType> dtypes{DType::f32};
  std::vector<comm::ReduceOp> ops{comm::ReduceOp::sum};
  comm::Backend backend = comm::Backend::ring;
  DeviceType device = DeviceType::cpu;
  std::string json_path;
};

// Parses argv into `s`. Returns the exit code when the program stops here: 0 after --help, 2
// for a bad flag (one line on stderr); nullopt when the run goes on.
std::optional<int> parse_settings(int argc, char** argv, const PerfCollective& c, Settings& s);

const char* dtype_label(DType d);              // "float", "half", ... as -d spells them
const char* statistic_label(TimeStatistic a);  // "the average over ranks", ...

}  // namespace ringgrad::perf
