// all_reduce_perf: every rank ends with the reduction of all inputs. busbw factor 2(n-1)/n:
// a ring sends 2(n-1)/n of the buffer per rank (reduce-scatter + all-gather).
#include "apps/perf/perf_harness.h"

namespace rp = ringgrad::perf;
using ringgrad::comm::ReduceOp;

int main(int argc, char** argv) {
  rp::PerfCollective c;
  c.name = "all_reduce";
  c.has_op = true;
  c.has_root = false;
  c.count_in_rank_blocks = false;
  c.bus_factor = [](int n) { return 2.0 * (n - 1) / n; };
  c.bus_formula = "2(n-1)/n";
  c.send_count = [](size_t count, int) { return count; };
  c.recv_count = [](size_t count, int) { return count; };
  c.expected = [](ReduceOp op, ringgrad::DType d, int, int world, int, size_t, size_t i) {
    return rp::reduced_value(op, d, world, i);
  };
  c.in_place_send_offset = [](size_t, int, int) -> size_t { return 0; };
  c.in_place_recv_offset = [](size_t, int, int) -> size_t { return 0; };
  c.start = [](ringgrad::comm::ProcessGroup& pg, const ringgrad::Tensor& send,
               const ringgrad::Tensor& recv, bool, ReduceOp op, int) {
    ringgrad::comm::AllreduceOptions o;
    o.op = op;
    return pg.allreduce(send, recv, o);
  };
  return rp::run_perf(argc, argv, c);
}
