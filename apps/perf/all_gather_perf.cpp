// all_gather_perf: rank r's block lands at block r on every rank. The size column is the
// gathered buffer; busbw factor (n-1)/n: each rank receives the n-1 blocks it lacks.
#include "apps/perf/perf_harness.h"

namespace rp = ringgrad::perf;
using ringgrad::comm::ReduceOp;

int main(int argc, char** argv) {
  rp::PerfCollective c;
  c.name = "all_gather";
  c.has_op = false;
  c.has_root = false;
  c.count_in_rank_blocks = true;
  c.bus_factor = [](int n) { return (n - 1.0) / n; };
  c.bus_formula = "(n-1)/n";
  c.send_count = [](size_t count, int world) { return count / world; };
  c.recv_count = [](size_t count, int) { return count; };
  c.expected = [](ReduceOp op, ringgrad::DType d, int, int world, int, size_t count, size_t i) {
    const size_t per_rank = count / world;  // element i came from rank i / per_rank
    return rp::input_value(op, d, static_cast<int>(i / per_rank), i % per_rank);
  };
  c.in_place_send_offset = [](size_t count, int rank, int world) { return count / world * rank; };
  c.in_place_recv_offset = [](size_t, int, int) -> size_t { return 0; };
  c.start = [](ringgrad::comm::ProcessGroup& pg, const ringgrad::Tensor& send,
               const ringgrad::Tensor& recv, bool in_place, ReduceOp,
               int) { return in_place ? pg.allgather_inplace(recv) : pg.allgather(send, recv); };
  return rp::run_perf(argc, argv, c);
}
