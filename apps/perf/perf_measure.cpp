// One half of a row: the buffers, the timed loop, the statistic over ranks and the checks.
#include "apps/perf/perf_measure.h"

#include <chrono>
#include <cmath>

#include "core/env.h"

namespace ringgrad::perf {

using comm::ReduceOp;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The row's tensors on the device and their host mirrors (the same tensors on the CPU). Each
// is a view `unalign` elements into its allocation, for -u. In place, send and recv are one
// buffer, and the send data and the result start at the collective's offsets in it.
struct Buffers {
  Tensor send_host, recv_host, send, recv;
  size_t send_at = 0, recv_at = 0;
};

Tensor unaligned(Tensor full, size_t unalign, size_t n) {
  return full.narrow(static_cast<int64_t>(unalign), static_cast<int64_t>(n));
}

Buffers make_buffers(const PerfCollective& c, const Settings& s, Device device, const RowSpec& row,
                     int rank, int world) {
  const size_t send_n = send_count(c, row.count, world), recv_n = recv_count(c, row.count, world);
  const size_t u = static_cast<size_t>(s.unalign);
  auto allocate = [&](size_t n, bool zero) {
    const int64_t total = static_cast<int64_t>(u + n);
    Tensor host = zero ? Tensor::zeros({total}, row.dtype) : Tensor::empty({total}, row.dtype);
    Tensor on_device = device.is_cpu() ? host : host.to(device);
    return std::make_pair(unaligned(host, u, n), unaligned(on_device, u, n));
  };
  Buffers b;
  if (row.in_place) {
    std::tie(b.send_host, b.send) = allocate(std::max(send_n, recv_n), /*zero=*/true);
    b.recv_host = b.send_host;
    b.recv = b.send;
    b.send_at = in_place_send_offset(c, row.count, rank, world);
    b.recv_at = in_place_recv_offset(c, row.count, rank, world);
  } else {
    std::tie(b.send_host, b.send) = allocate(send_n, false);
    std::tie(b.recv_host, b.recv) = allocate(recv_n, true);
  }
  return b;
}

void fill_input(const PerfCollective& c, Buffers& b, Device device, const RowSpec& row, int rank,
                int world) {
  const size_t send_n = send_count(c, row.count, world);
  for (size_t i = 0; i < send_n; ++i)
    b.send_host.set_element(b.send_at + i, input_value(row.op, row.dtype, rank, i));
  if (device.is_cuda()) b.send.copy_from(b.send_host);
}

// Elements of the result that differ from what a correct collective gives, summed over ranks.
int64_t count_wrong(comm::ProcessGroup& pg, const PerfCollective& c, Device device,
                    const RowSpec& row, Buffers& b) {
  const int world = pg.size(), rank = pg.rank();
  const size_t recv_n = recv_count(c, row.count, world);
  if (device.is_cuda()) b.recv_host.copy_from(b.recv);
  if (rank == 0 && env_bool("RINGGRAD_PERF_INJECT_BITFLIP", false) && recv_n > 0)
    static_cast<uint8_t*>(b.recv_host.raw_data())[b.recv_at * dtype_size(row.dtype)] ^=
        0x40;  // test hook
  Tensor want = Tensor::empty({static_cast<int64_t>(recv_n)}, row.dtype);
  int64_t wrong = 0;
  for (size_t i = 0; i < recv_n; ++i) {
    const double e = c.expected(row.op, row.dtype, rank, world, row.root, row.count, i);
    if (std::isnan(e)) continue;
    want.set_element(i, e);  // rounded as the dtype would, like the result
    wrong += b.recv_host.element(b.recv_at + i) != want.element(i) ? 1 : 0;
  }
  Tensor w = Tensor::from_vector(std::vector<int64_t>{wrong}, {1});
  run_on(device, w, [&](const Tensor& d) { return pg.allreduce(d); });
  return w.data<int64_t>()[0];
}

}  // namespace

double over_ranks(comm::ProcessGroup& pg, Device device, double v, TimeStatistic statistic) {
  Tensor t = Tensor::from_vector(std::vector<double>{v}, {1});
  if (statistic == TimeStatistic::rank0) {
    comm::BroadcastOptions o;
    o.root = 0;
    run_on(device, t, [&](const Tensor& d) { return pg.broadcast(d, d, o); });
    return t.data<double>()[0];
  }
  comm::AllreduceOptions o;
  o.op = statistic == TimeStatistic::minimum   ? ReduceOp::min
         : statistic == TimeStatistic::maximum ? ReduceOp::max
                                               : ReduceOp::sum;
  run_on(device, t, [&](const Tensor& d) { return pg.allreduce(d, o); });
  const double combined = t.data<double>()[0];
  return statistic == TimeStatistic::average ? combined / pg.size() : combined;
}

void run_on(Device device, Tensor& host, const std::function<comm::WorkPtr(const Tensor&)>& call) {
  if (device.is_cpu()) {
    call(host)->wait();
    return;
  }
  Tensor on_device = host.to(device);
  call(on_device)->wait();
  host.copy_from(on_device);
}

size_t row_count(const PerfCollective& c, size_t bytes, DType dtype, int world) {
  const size_t elem = dtype_size(dtype);
  if (c.rank_block == RankBlock::none) return bytes / elem;
  const size_t block_align = std::max<size_t>(1, 16 / elem);  // a block is whole 16-byte units
  const size_t per_rank = bytes / elem / world / block_align * block_align;
  return per_rank * world;
}

Measure measure(comm::ProcessGroup& pg, const PerfCollective& c, const Settings& s, Device device,
                const RowSpec& row) {
  const int world = pg.size(), rank = pg.rank();
  Buffers b = make_buffers(c, s, device, row, rank, world);
  fill_input(c, b, device, row, rank, world);
  auto start = [&] { return c.start(pg, b.send, b.recv, row.in_place, row.op, row.root); };
  pg.barrier()->wait();
  // The timed loop (nccl-tests' -z modes); collective_s counts only the collectives' time for
  // -z 3, whose barriers are not timed.
  double collective_s = 0;
  comm::WorkPtr last;
  const auto t0 = Clock::now();
  for (int iter = 0; iter < s.iters; ++iter) {
    const auto iter_start = Clock::now();
    std::vector<comm::WorkPtr> works;
    for (int a = 0; a < s.agg_iters; ++a) {
      works.push_back(last = start());
      if (s.blocking == Blocking::wait || s.blocking == Blocking::wait_and_barrier) last->wait();
      if (s.blocking == Blocking::wait_and_barrier) pg.barrier()->wait();
    }
    if (s.blocking == Blocking::iteration_barrier) {
      for (auto& w : works) w->wait();
      collective_s += seconds_since(iter_start);
      pg.barrier()->wait();
    }
  }
  const double issue_s =
      s.blocking == Blocking::iteration_barrier ? collective_s : seconds_since(t0);
  last->wait();  // a group completes its collectives in issue order
  const double done_s =
      s.blocking == Blocking::iteration_barrier ? collective_s : seconds_since(t0);
  const double per_collective = (s.report_cputime ? issue_s : done_s) / (s.iters * s.agg_iters);
  Measure m;
  m.time_us = over_ranks(pg, device, per_collective * 1e6, s.statistic);
  // nccl-tests' algbw: the bytes of the row (the whole buffer for gather/scatter) per second.
  const double bytes = static_cast<double>(row.count * dtype_size(row.dtype));
  m.algbw = bytes / m.time_us / 1e3;  // GB/s = bytes / (us * 1e3)
  m.busbw = m.algbw * c.bus.factor(world);
  if (s.check > 0) m.wrong = 0;
  for (int k = 0; k < s.check && m.wrong == 0; ++k) {  // stops at the first wrong result
    fill_input(c, b, device, row, rank, world);
    start()->wait();
    m.wrong = count_wrong(pg, c, device, row, b);
  }
  return m;
}

void warm_up(comm::ProcessGroup& pg, const PerfCollective& c, const Settings& s, Device device,
             DType dtype, ReduceOp op, int root) {
  if (s.warmup == 0) return;
  for (size_t bytes = s.min_bytes; bytes <= s.max_bytes; bytes = bytes ? bytes * 2 : 1) {
    RowSpec row;
    row.count = row_count(c, bytes, dtype, pg.size());
    row.dtype = dtype;
    row.op = op;
    row.root = root;
    Buffers b = make_buffers(c, s, device, row, pg.rank(), pg.size());
    fill_input(c, b, device, row, pg.rank(), pg.size());
    comm::WorkPtr last;
    for (int i = 0; i < s.warmup; ++i) last = c.start(pg, b.send, b.recv, false, op, root);
    last->wait();
  }
}

}  // namespace ringgrad::perf
