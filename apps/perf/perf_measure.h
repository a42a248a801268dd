// Timing and checking one half of a table row (out-of-place or in-place) as nccl-tests does:
// buffers in the collective's layout (offset by -u), -n iterations of -m collectives waited for
// as -z says, the time per collective combined over ranks as -a says (or the time to issue
// them, -C), then -c checked runs; and the warm-up before a sweep.
#pragma once
#include <functional>

#include "apps/perf/perf_settings.h"

namespace ringgrad::perf {

struct RowSpec {
  size_t count = 0;  // elements of the row: the whole buffer (per-rank blocks for gather/scatter)
  DType dtype = DType::f32;
  comm::ReduceOp op = comm::ReduceOp::sum;
  int root = 0;
  bool in_place = false;
};

struct Measure {
  double time_us = 0, algbw = 0, busbw = 0;
  int64_t wrong = -1;  // -1: not checked (-c 0)
};

// The row's element count for a size in bytes, as nccl-tests counts it: bytes / element size,
// and for per-rank blocks (all_gather, reduce_scatter) whole blocks of a multiple of 16 bytes.
size_t row_count(const PerfCollective& c, size_t bytes, DType dtype, int world);

Measure measure(comm::ProcessGroup& pg, const PerfCollective& c, const Settings& s, Device device,
                const RowSpec& row);
// -w out-of-place collectives at each size from -b to -e, doubling: once before each sweep.
void warm_up(comm::ProcessGroup& pg, const PerfCollective& c, const Settings& s, Device device,
             DType dtype, comm::ReduceOp op, int root);

// `value` of every rank combined as -a says: rank 0's, or the average, minimum or maximum.
double over_ranks(comm::ProcessGroup& pg, Device device, double value, TimeStatistic statistic);

// Runs a small collective of the harness's own on a host tensor, through the device when the
// buffers live there; `host` holds the result after.
void run_on(Device device, Tensor& host, const std::function<comm::WorkPtr(const Tensor&)>& call);

}  // namespace ringgrad::perf
