// The shared harness of all_reduce_perf & co. (nccl-tests' common.cu, in our terms): flags,
// process group setup from the environment, data init, timing, checking and the output table.
// Each collective's file only fills in a PerfCollective: its buffer sizes, expected values,
// bus-bandwidth factor and the call itself.
#pragma once
#include <cstddef>

#include "comm/process_group/process_group.h"

namespace ringgrad::perf {

// What a rank puts in its input at element i (exact in every dtype, depends on rank and i).
double input_value(comm::ReduceOp op, DType dtype, int rank, size_t i);
// The reduction of input_value over all ranks at element i, as the dtype stores it.
double reduced_value(comm::ReduceOp op, DType dtype, int world, size_t i);

struct PerfCollective {
  const char* name;           // "all_reduce": banner and --help
  bool has_op;                // prints the redop column and sweeps -o
  bool has_root;              // uses -r
  bool count_in_rank_blocks;  // the count column is world * per-rank count (gather/scatter)
  // Bus bandwidth = algbw * factor (nccl-tests' PERFORMANCE.md), stated in --help.
  double (*bus_factor)(int world);
  const char* bus_formula;
  // Elements in the send and receive buffers for a table row of `count` elements.
  size_t (*send_count)(size_t count, int world);
  size_t (*recv_count)(size_t count, int world);
  // Element i of the receive buffer on `rank` for a row of `count` elements when the call is
  // correct; NaN = not checked (e.g. reduce's non-root ranks).
  double (*expected)(comm::ReduceOp op, DType dtype, int rank, int world, int root, size_t count,
                     size_t i);
  // In place, send and recv share one buffer of max(send, recv) elements; these give where
  // the send data and the received data start in it (a rank's block, or 0).
  size_t (*in_place_send_offset)(size_t count, int rank, int world);
  size_t (*in_place_recv_offset)(size_t count, int rank, int world);
  // Issues the call. In place, both tensors are the shared buffer.
  comm::WorkPtr (*start)(comm::ProcessGroup& pg, const Tensor& send, const Tensor& recv,
                         bool in_place, comm::ReduceOp op, int root);
};

// Parses the flags, runs the sweep and prints the table on rank 0. Returns the exit code:
// 0, 1 when any result was wrong, 2 for bad flags or setup errors (one line on stderr).
int run_perf(int argc, char** argv, const PerfCollective& collective);

}  // namespace ringgrad::perf
