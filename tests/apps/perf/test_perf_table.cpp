// Tests of the perf binaries' pieces that need no processes: the table in nccl-tests' exact
// layout (apps/perf/perf_table), nccl-tests' element counts per row, and -a's statistic over
// ranks (apps/perf/perf_measure) on ring groups of threads.
#include <doctest/doctest.h>

#include "apps/perf/perf_measure.h"
#include "apps/perf/perf_table.h"
#include "tests/comm/ring_fixtures.h"

using namespace ringgrad;
using namespace ringgrad::perf;

TEST_CASE("perf table: nccl-tests' columns, widths and number formats") {
  // Two-space separators; 12/12/8/6/6 columns, then time 7, algbw 6, busbw 6, #wrong 6 per half.
  CHECK(row_start(33554432, 8388608, "float", "sum", -1) ==
        "    33554432       8388608     float     sum      -1");
  CHECK(row_half(16195.83, 2.071, 2.0712, 0) == "  16195.8    2.07    2.07       0");
  CHECK(row_half(0.85, 0.0104, 0.01, -1) == "     0.85    0.01    0.01    N/A");
  CHECK(row_half(1.5, 123456.7, 1e9, 1234567) == "     1.50  123457   1e+09  1.23457e+06");
  CHECK(fixed_width(3.14159, 7) == "   3.14");
  CHECK(fixed_width(123456.7, 7) == " 123457");
  CHECK(fixed_width(1234567.8, 7) == "1234568");
  CHECK(fixed_width(123456789.0, 7) == "1.2e+08");
  const std::string header = table_header(false, false);
  CHECK(header.find("#       size         count      type   redop    root     time   algbw   "
                    "busbw  #wrong     time   algbw   busbw  #wrong \n") != std::string::npos);
  CHECK(header.find("#        (B)    (elements)                               (us)  (GB/s)  "
                    "(GB/s)             (us)  (GB/s)  (GB/s)         \n") != std::string::npos);
  const std::string stamped = table_header(true, true);
  CHECK(stamped.find("  cputime   algbw   busbw  #wrong           timestamp\n") !=
        std::string::npos);
  CHECK(stamped.find("%Y-%m-%d %H:%M:%S\n") != std::string::npos);
  CHECK(timestamp_column().size() == 21);
  CHECK(table_footer(0, 1.5, "all_reduce_perf") ==
        "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 1.5 \n#\n"
        "# Collective test concluded: all_reduce_perf\n");
  CHECK(table_footer(3, 0, "x").find(": 3 FAILED") != std::string::npos);
}

TEST_CASE("perf rows: nccl-tests' element counts, per-rank blocks are whole 16-byte units") {
  CHECK(row_count(kAllReduce, 1000, DType::f32, 3) == 250);
  CHECK(row_count(kAllReduce, 7, DType::f32, 3) == 1);
  // 1000 bytes over 3 ranks: 83 floats each, cut to 80 (16 bytes = 4 floats): 240 in all.
  CHECK(row_count(kAllGather, 1000, DType::f32, 3) == 240);
  CHECK(row_count(kAllGather, 1000, DType::u8, 3) == 3 * 320);
  CHECK(row_count(kAllGather, 1000, DType::f64, 3) == 3 * 40);
  CHECK(row_count(kReduceScatter, 8, DType::f32, 2) == 0);
}

TEST_CASE("perf buffers: a rank's block is all_gather's send and reduce_scatter's receive") {
  // A row of 12 elements over 3 ranks, seen from rank 2: its block is elements 8-11.
  for (const PerfCollective* c : {&kAllReduce, &kBroadcast}) {
    CAPTURE(c->name);
    CHECK(send_count(*c, 12, 3) == 12);
    CHECK(recv_count(*c, 12, 3) == 12);
    CHECK(in_place_send_offset(*c, 12, 2, 3) == 0);
    CHECK(in_place_recv_offset(*c, 12, 2, 3) == 0);
  }
  CHECK(send_count(kAllGather, 12, 3) == 4);
  CHECK(recv_count(kAllGather, 12, 3) == 12);
  CHECK(in_place_send_offset(kAllGather, 12, 2, 3) == 8);
  CHECK(in_place_recv_offset(kAllGather, 12, 2, 3) == 0);
  CHECK(send_count(kReduceScatter, 12, 3) == 12);
  CHECK(recv_count(kReduceScatter, 12, 3) == 4);
  CHECK(in_place_send_offset(kReduceScatter, 12, 2, 3) == 0);
  CHECK(in_place_recv_offset(kReduceScatter, 12, 2, 3) == 8);
}

TEST_CASE("perf -a: rank 0's time, or the average, minimum or maximum over ranks") {
  using comm::testing::make_ring_group;
  for (const auto& [statistic, want] :
       std::vector<std::pair<TimeStatistic, double>>{{TimeStatistic::rank0, 2},
                                                     {TimeStatistic::average, 4},
                                                     {TimeStatistic::minimum, 2},
                                                     {TimeStatistic::maximum, 7}}) {
    CAPTURE(static_cast<int>(statistic));
    auto store = std::make_shared<comm::HashStore>();
    const double times[] = {2, 3, 7};
    comm::testing::spawn(3, [&](int rank) {
      auto pg = make_ring_group(store, rank, 3, "perf");
      CHECK(over_ranks(*pg, Device::cpu(), times[rank], statistic) == want);
    });
  }
}
