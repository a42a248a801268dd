// The collectives of the perf binaries, nccl-tests' per-collective files in one table, and the
// buffer layout that their RankBlock implies.
#include "apps/perf/perf_harness.h"

namespace ringgrad::perf {

using comm::ProcessGroup;
using comm::ReduceOp;

// Every rank ends with the reduction of all inputs. busbw factor 2(n-1)/n: a ring sends
// 2(n-1)/n of the buffer per rank (reduce-scatter + all-gather).
const PerfCollective kAllReduce{
    "all_reduce",
    /*has_op=*/true,
    /*has_root=*/false,
    RankBlock::none,
    {"2(n-1)/n", [](int n) { return 2.0 * (n - 1) / n; }},
    [](ReduceOp op, DType d, int, int world, int, size_t, size_t i) {
      return reduced_value(op, d, world, i);
    },
    [](ProcessGroup& pg, const Tensor& send, const Tensor& recv, bool, ReduceOp op, int) {
      return pg.allreduce(send, recv, comm::AllreduceOptions{op});
    }};

// Rank r's block lands at block r on every rank. The size column is the gathered buffer; busbw
// factor (n-1)/n: each rank receives the n-1 blocks it lacks.
const PerfCollective kAllGather{
    "all_gather",
    /*has_op=*/false,
    /*has_root=*/false,
    RankBlock::send,
    {"(n-1)/n", [](int n) { return (n - 1.0) / n; }},
    [](ReduceOp op, DType d, int, int world, int, size_t count, size_t i) {
      const size_t per_rank = count / world;  // element i came from rank i / per_rank
      return input_value(op, d, static_cast<int>(i / per_rank), i % per_rank);
    },
    [](ProcessGroup& pg, const Tensor& send, const Tensor& recv, bool in_place, ReduceOp, int) {
      return in_place ? pg.allgather_inplace(recv) : pg.allgather(send, recv);
    }};

// The root's buffer reaches every rank. busbw factor 1: along the pipelined chain every link
// carries the whole buffer once.
const PerfCollective kBroadcast{
    "broadcast",
    /*has_op=*/false,
    /*has_root=*/true,
    RankBlock::none,
    {"1", [](int) { return 1.0; }},
    [](ReduceOp op, DType d, int, int, int root, size_t, size_t i) {
      return input_value(op, d, root, i);
    },
    [](ProcessGroup& pg, const Tensor& send, const Tensor& recv, bool, ReduceOp, int root) {
      return pg.broadcast(send, recv, comm::BroadcastOptions{root});
    }};

// Rank r ends with block r of the reduction. The size column is the input buffer; busbw factor
// (n-1)/n: each rank sends n-1 partial blocks along the ring.
const PerfCollective kReduceScatter{
    "reduce_scatter",
    /*has_op=*/true,
    /*has_root=*/false,
    RankBlock::recv,
    {"(n-1)/n", [](int n) { return (n - 1.0) / n; }},
    [](ReduceOp op, DType d, int rank, int world, int, size_t count, size_t i) {
      return reduced_value(op, d, world, rank * (count / world) + i);
    },
    [](ProcessGroup& pg, const Tensor& send, const Tensor& recv, bool in_place, ReduceOp op, int) {
      const comm::ReduceScatterOptions o{op};
      return in_place ? pg.reduce_scatter_inplace(send, o) : pg.reduce_scatter(send, recv, o);
    }};

size_t send_count(const PerfCollective& c, size_t count, int world) {
  return c.rank_block == RankBlock::send ? count / world : count;
}

size_t recv_count(const PerfCollective& c, size_t count, int world) {
  return c.rank_block == RankBlock::recv ? count / world : count;
}

size_t in_place_send_offset(const PerfCollective& c, size_t count, int rank, int world) {
  return c.rank_block == RankBlock::send ? count / world * rank : 0;
}

size_t in_place_recv_offset(const PerfCollective& c, size_t count, int rank, int world) {
  return c.rank_block == RankBlock::recv ? count / world * rank : 0;
}

}  // namespace ringgrad::perf
