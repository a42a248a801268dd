// reduce_scatter_perf: rank r ends with block r of the reduction. The size column is the
// input buffer; busbw factor (n-1)/n: each rank sends n-1 partial blocks along the ring.
#include "apps/perf/perf_harness.h"

namespace rp = ringgrad::perf;
using ringgrad::comm::ReduceOp;

int main(int argc, char** argv) {
  rp::PerfCollective c;
  c.name = "reduce_scatter";
  c.has_op = true;
  c.has_root = false;
  c.count_in_rank_blocks = true;
  c.bus_factor = [](int n) { return (n - 1.0) / n; };
  c.bus_formula = "(n-1)/n";
  c.send_count = [](size_t count, int) { return count; };
  c.recv_count = [](size_t count, int world) { return count / world; };
  c.expected = [](ReduceOp op, ringgrad::DType d, int rank, int world, int, size_t count,
                  size_t i) { return rp::reduced_value(op, d, world, rank * (count / world) + i); };
  c.in_place_send_offset = [](size_t, int, int) -> size_t { return 0; };
  c.in_place_recv_offset = [](size_t count, int rank, int world) { return count / world * rank; };
  c.start = [](ringgrad::comm::ProcessGroup& pg, const ringgrad::Tensor& send,
               const ringgrad::Tensor& recv, bool in_place, ReduceOp op, int) {
    ringgrad::comm::ReduceScatterOptions o;
    o.op = op;
    return in_place ? pg.reduce_scatter_inplace(send, o) : pg.reduce_scatter(send, recv, o);
  };
  return rp::run_perf(argc, argv, c);
}
