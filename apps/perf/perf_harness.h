// The shared harness of all_reduce_perf & co. (nccl-tests' common.cu, in our terms): flags,
// process group setup from the environment, data init, timing, checking and the output table.
// A collective is a PerfCollective (perf_collectives.cpp): its buffer layout, expected values,
// bus-bandwidth factor and the call itself; each binary's main passes one to run_perf.
#pragma once
#include <cstddef>

#include "comm/process_group/process_group.h"

namespace ringgrad::perf {

// What a rank puts in its input at element i (exact in every dtype, depends on rank and i).
double input_value(comm::ReduceOp op, DType dtype, int rank, size_t i);
// The reduction of input_value over all ranks at element i, as the dtype stores it.
double reduced_value(comm::ReduceOp op, DType dtype, int world, size_t i);

// Which buffer of a row holds one rank's block of it (count / world elements) while the other
// holds the whole row: none (all_reduce, broadcast), the send (all_gather) or the receive
// (reduce_scatter).
enum class RankBlock { none, send, recv };

struct PerfCollective {
  const char* name;  // "all_reduce": banner and --help
  bool has_op;       // prints the redop column and sweeps -o
  bool has_root;     // uses -r
  RankBlock rank_block;
  // Bus bandwidth = algbw * factor (nccl-tests' PERFORMANCE.md), stated in --help as formula.
  struct {
    const char* formula;
    double (*factor)(int world);
  } bus;
  // Element i of the receive buffer on `rank` for a row of `count` elements when the call is
  // correct; NaN = not checked (e.g. reduce's non-root ranks).
  double (*expected)(comm::ReduceOp op, DType dtype, int rank, int world, int root, size_t count,
                     size_t i);
  // Issues the call. In place, both tensors are the shared buffer.
  comm::WorkPtr (*start)(comm::ProcessGroup& pg, const Tensor& send, const Tensor& recv,
                         bool in_place, comm::ReduceOp op, int root);
};

extern const PerfCollective kAllReduce, kAllGather, kBroadcast, kReduceScatter;

// Elements in the send and receive buffers for a table row of `count` elements.
size_t send_count(const PerfCollective& c, size_t count, int world);
size_t recv_count(const PerfCollective& c, size_t count, int world);
// In place, send and recv share one buffer of max(send, recv) elements: where the send data
// and the received data start in it (the rank's block, or 0).
size_t in_place_send_offset(const PerfCollective& c, size_t count, int rank, int world);
size_t in_place_recv_offset(const PerfCollective& c, size_t count, int rank, int world);

// Parses the flags, runs the sweep and prints the table on rank 0. Returns the exit code:
// 0, 1 when any result was wrong, 2 for bad flags or setup errors (one line on stderr).
int run_perf(int argc, char** argv, const PerfCollective& collective);

}  // namespace ringgrad::perf
