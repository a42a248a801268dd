// broadcast_perf: the root's buffer reaches every rank. busbw factor 1: along the pipelined
// chain every link carries the whole buffer once.
#include "apps/perf/perf_harness.h"

namespace rp = ringgrad::perf;
using ringgrad::comm::ReduceOp;

int main(int argc, char** argv) {
  rp::PerfCollective c;
  c.name = "broadcast";
  c.has_op = false;
  c.has_root = true;
  c.count_in_rank_blocks = false;
  c.bus_factor = [](int) { return 1.0; };
  c.bus_formula = "1";
  c.send_count = [](size_t count, int) { return count; };
  c.recv_count = [](size_t count, int) { return count; };
  c.expected = [](ReduceOp op, ringgrad::DType d, int, int, int root, size_t, size_t i) {
    return rp::input_value(op, d, root, i);
  };
  c.in_place_send_offset = [](size_t, int, int) -> size_t { return 0; };
  c.in_place_recv_offset = [](size_t, int, int) -> size_t { return 0; };
  c.start = [](ringgrad::comm::ProcessGroup& pg, const ringgrad::Tensor& send,
               const ringgrad::Tensor& recv, bool, ReduceOp, int root) {
    ringgrad::comm::BroadcastOptions o;
    o.root = root;
    return pg.broadcast(send, recv, o);
  };
  return rp::run_perf(argc, argv, c);
}
