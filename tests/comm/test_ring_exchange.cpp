// The ring process group's gather, scatter, all-to-all (equal and uneven splits), coalesced
// all-reduce and all-gather, monitored barrier and sequence numbers, against plain references
// (comm/collectives/direct_exchange.h, comm/process_group/monitored_barrier.h), with ranks as
// threads on one HashStore.
#include <doctest/doctest.h>

#include <atomic>
#include <cstring>

#include "tests/comm/ring_fixtures.h"
#include "tests/message_of.h"

namespace ringgrad::comm::testing {

namespace {

using ringgrad::testing::message_of;

constexpr DType kMoved[] = {DType::u8, DType::bf16, DType::f32, DType::f64, DType::i64};

// What `rank` sends in block `block` at index i: distinct for every (rank, block, i) and exact
// in every dtype of kMoved (u8 wraps, but a misplaced block still lands on other values).
double sent_value(int rank, int block, int64_t i) {
  return static_cast<double>((rank * 37 + block * 11 + i * 3) % 251);
}

}  // namespace

TEST_CASE("ring gather and scatter: every root, dtype and size, in and out of place") {
  for (int world = 1; world <= 5; ++world) {
    CAPTURE(world);
    run_group(world, "gather", "", [&](int rank, ProcessGroup& pg, auto& errors) {
      for (DType dtype : kMoved)
        for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1001}, int64_t{70000}})
          for (int root = 0; root < world; ++root) {
            const std::string what = str_cat(dtype_name(dtype), " count ", count, " root ", root);
            // Every rank's block at its rank: rank q's block holds sent_value(q, 0, i).
            const Tensor all = filled(count * world, dtype, [&](int64_t i) {
              return sent_value(static_cast<int>(i / std::max<int64_t>(count, 1)), 0,
                                i % std::max<int64_t>(count, 1));
            });
            const Tensor mine =
                filled(count, dtype, [&](int64_t i) { return sent_value(rank, 0, i); });
            GatherOptions o;
            o.root = root;
            Tensor out = rank == root ? Tensor::zeros({count * world}, dtype) : Tensor();
            pg.gather(mine, out, o)->wait();
            if (rank == root) compare(out, all, "gather " + what, errors);
            // In place on the root: its input is its own block of the output.
            Tensor whole = Tensor::zeros({count * world}, dtype);
            whole.narrow(rank * count, count).copy_from(mine);
            pg.gather(whole.narrow(rank * count, count), rank == root ? whole : Tensor(), o)
                ->wait();
            if (rank == root) compare(whole, all, "gather in place " + what, errors);

            Tensor got = Tensor::zeros({count}, dtype);
            pg.scatter(rank == root ? all : Tensor(), got, o)->wait();
            compare(got, mine, "scatter " + what, errors);
          }
    });
  }
}

TEST_CASE("ring alltoall: equal blocks and uneven splits with empty blocks") {
  for (int world = 1; world <= 5; ++world) {
    CAPTURE(world);
    run_group(world, "alltoall", "", [&](int rank, ProcessGroup& pg, auto& errors) {
      // Rank r sends rank p split(r, p) elements: uneven, some zero, some past a segment.
      auto split = [](int r, int p) -> int64_t {
        return (r * 3 + p * 5) % 4 == 0 ? 0 : (r + 2 * p) * 4001 % 9000;
      };
      for (DType dtype : kMoved)
        for (bool even : {true, false}) {
          AlltoallOptions o;
          std::vector<int64_t> send(world), recv(world);
          for (int p = 0; p < world; ++p) {
            send[p] = even ? 5 : split(rank, p);
            recv[p] = even ? 5 : split(p, rank);
          }
          if (!even) {
            o.send_splits = send;
            o.recv_splits = recv;
          }
          std::vector<double> in, want;
          for (int p = 0; p < world; ++p) {
            for (int64_t i = 0; i < send[p]; ++i) in.push_back(sent_value(rank, p, i));
            for (int64_t i = 0; i < recv[p]; ++i) want.push_back(sent_value(p, rank, i));
          }
          const auto n_in = static_cast<int64_t>(in.size()),
                     n_out = static_cast<int64_t>(want.size());
          Tensor input = Tensor::from_vector(in, {n_in}).to(dtype);
          Tensor output = Tensor::zeros({n_out}, dtype);
          pg.alltoall(input, output, o)->wait();
          compare(output, Tensor::from_vector(want, {n_out}).to(dtype),
                  str_cat("alltoall ", dtype_name(dtype), even ? " equal" : " uneven"), errors);
        }
    });
  }
}

TEST_CASE("ring alltoall: ranks whose split sizes disagree both fail, naming both sizes") {
  // The first rank to see the difference fails with InvalidArgument and aborts the group; the
  // other fails with it, or with the abort, which names that first failure.
  auto store = std::make_shared<HashStore>();
  std::vector<std::string> messages(2);
  spawn(2, [&](int rank) {
    auto pg = make_ring_group(store, rank, 2, "alltoall_mismatch");
    AlltoallOptions o;
    o.send_splits = {2, 2};
    o.recv_splits = rank == 0 ? std::vector<int64_t>{2, 3} : std::vector<int64_t>{2, 2};
    Tensor in = Tensor::zeros({4}), out = Tensor::zeros({rank == 0 ? 5 : 4});
    messages[rank] = message_of<Error>([&] { pg->alltoall(in, out, o)->wait(); });
  });
  for (const auto& m : messages) {
    CHECK_MESSAGE(m.find("split sizes of the two ranks disagree") != std::string::npos, m);
    CHECK_MESSAGE(m.find("expects 12") != std::string::npos, m);  // rank 0 expects 3 floats
  }
}

TEST_CASE("ring gather, scatter and alltoall: bad arguments fail on the caller, saying what") {
  run_group(2, "exchange_args", "", [&](int rank, ProcessGroup& pg, auto& errors) {
    auto expect = [&](const char* text, const std::function<void()>& call) {
      const std::string m = message_of<InvalidArgument>(call);
      if (m.find(text) == std::string::npos)
        errors.push_back(str_cat("'", m, "' lacks '", text, "'"));
    };
    Tensor four = Tensor::zeros({4}), three = Tensor::zeros({3});
    GatherOptions o;
    o.root = 2;
    expect("root", [&] { pg.gather(four, four, o); });
    o.root = rank;  // every rank is the root of its own call: only argument checks run
    expect("output has 3 elements, expected 8", [&] { pg.gather(four, three, o); });
    expect("the root's input has 3 elements, expected 8", [&] { pg.scatter(three, four, o); });
    AlltoallOptions a;
    expect("do not split evenly over 2 ranks", [&] { pg.alltoall(three, Tensor::zeros({3}), a); });
    a.send_splits = {1, 2};
    expect("split sizes add up to 3 elements but the input has 4",
           [&] { pg.alltoall(four, four.clone(), a); });
    a.send_splits = {4};
    expect("1 input split sizes for 2 ranks", [&] { pg.alltoall(four, four.clone(), a); });
    a.send_splits = {5, -1};
    expect("is negative", [&] { pg.alltoall(four, four.clone(), a); });
    a.send_splits = {};
    expect("same buffer", [&] { pg.alltoall(four, four, a); });
    expect("mix float32 and int64", [&] {
      pg.allreduce_coalesced({four, Tensor::zeros({2}, DType::i64)});
    });
    expect("3 output tensors for 1 inputs on 2 ranks", [&] {
      pg.allgather_coalesced({four}, {four, four, four});
    });
  });
}

TEST_CASE("ring allreduce_coalesced: tensors of several sizes, every op, as one allreduce each") {
  const std::vector<int64_t> sizes = {0, 1, 7, 1001, 20000};
  for (int world = 1; world <= 4; ++world) {
    CAPTURE(world);
    run_group(world, "coalesced", "", [&](int rank, ProcessGroup& pg, auto& errors) {
      for (DType dtype : {DType::f32, DType::i64, DType::u8, DType::bf16})
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::prod, ReduceOp::max}) {
          std::vector<Tensor> tensors, want;
          int64_t offset = 0;  // values continue across the tensors, so a shift shows
          for (int64_t n : sizes) {
            tensors.push_back(filled(
                n, dtype, [&](int64_t i) { return input_value(op, dtype, rank, offset + i); }));
            want.push_back(filled(
                n, dtype, [&](int64_t i) { return expected_value(op, dtype, world, offset + i); }));
            offset += n;
          }
          AllreduceOptions o;
          o.op = op;
          pg.allreduce_coalesced(tensors, o)->wait();
          for (size_t t = 0; t < tensors.size(); ++t)
            compare(tensors[t], want[t],
                    str_cat("allreduce_coalesced ", reduce_op_name(op), " ", dtype_name(dtype),
                            " tensor ", t),
                    errors);
        }
    });
  }
}

TEST_CASE("ring allgather_coalesced: inputs of several sizes and dtypes") {
  for (int world = 1; world <= 4; ++world) {
    CAPTURE(world);
    run_group(world, "gather_coalesced", "", [&](int rank, ProcessGroup& pg, auto& errors) {
      const std::vector<std::pair<DType, int64_t>> shapes = {
          {DType::f32, 3}, {DType::u8, 0}, {DType::i64, 1001}, {DType::bf16, 5}};
      std::vector<Tensor> inputs, outputs;
      for (size_t i = 0; i < shapes.size(); ++i)
        inputs.push_back(filled(shapes[i].second, shapes[i].first, [&](int64_t j) {
          return sent_value(rank, static_cast<int>(i), j);
        }));
      for (int q = 0; q < world; ++q)
        for (const auto& [dtype, n] : shapes) outputs.push_back(Tensor::zeros({n}, dtype));
      pg.allgather_coalesced(inputs, outputs)->wait();
      for (int q = 0; q < world; ++q)
        for (size_t i = 0; i < shapes.size(); ++i)
          compare(outputs[q * shapes.size() + i],
                  filled(shapes[i].second, shapes[i].first,
                         [&](int64_t j) { return sent_value(q, static_cast<int>(i), j); }),
                  str_cat("allgather_coalesced rank ", q, " input ", i), errors);
    });
  }
}

TEST_CASE("ring monitored_barrier: passes when all come, names the ranks that did not") {
  // Long enough for the ranks that come to arrive before rank 0 gives up on the others.
  const Milliseconds shortly(2000);
  SUBCASE("every rank, twice") {
    run_group(3, "mb_all", "", [&](int, ProcessGroup& pg, auto&) {
      pg.monitored_barrier(Milliseconds(20000));
      pg.monitored_barrier(Milliseconds(20000), true);
    });
  }
  SUBCASE("rank 2 missing: rank 0 names it, rank 1 blames rank 0") {
    std::vector<std::string> messages(3);
    run_group(3, "mb_missing", "", [&](int rank, ProcessGroup& pg, auto&) {
      if (rank == 2) return;
      messages[rank] = message_of<TimeoutError>([&] { pg.monitored_barrier(shortly); });
    });
    CHECK_MESSAGE(
        messages[0].find("Rank 2 failed to pass monitoredBarrier in 2000 ms") != std::string::npos,
        messages[0]);
    CHECK_MESSAGE(
        messages[1].find("Rank 1 successfully reached monitoredBarrier, but received "
                         "errors while waiting for send/recv from rank 0") != std::string::npos,
        messages[1]);
  }
  SUBCASE("wait_all_ranks: every missing rank, in order") {
    std::string message;
    run_group(4, "mb_wait_all", "", [&](int rank, ProcessGroup& pg, auto&) {
      if (rank == 0)
        message = message_of<TimeoutError>([&] { pg.monitored_barrier(shortly, true); });
      if (rank == 2)  // arrives, then is never released: rank 0 failed
        message_of<TimeoutError>([&] { pg.monitored_barrier(shortly); });
    });
    CHECK_MESSAGE(message.find("Ranks 1, 3 failed to pass monitoredBarrier") != std::string::npos,
                  message);
  }
  SUBCASE("no time at all: rank 0 says it timed out") {
    std::string message;
    run_group(2, "mb_zero", "", [&](int rank, ProcessGroup& pg, auto&) {
      if (rank == 0)
        message = message_of<TimeoutError>([&] { pg.monitored_barrier(Milliseconds(0)); });
    });
    CHECK_MESSAGE(message.find("Rank 0 timed out in monitoredBarrier") != std::string::npos,
                  message);
  }
}

TEST_CASE("ring sequence_number: counts the collectives issued, equal on every rank") {
  std::vector<uint64_t> before(3), after(3);
  run_group(3, "seq", "", [&](int rank, ProcessGroup& pg, auto&) {
    before[rank] = pg.sequence_number();
    // Each call on tensors of its own: the first three may still run while the next is issued.
    std::vector<WorkPtr> works{
        pg.allreduce(Tensor::zeros({4})), pg.barrier(),
        pg.gather(Tensor::zeros({4}), rank == 0 ? Tensor::zeros({12}) : Tensor(), GatherOptions{}),
        pg.allreduce_coalesced({Tensor::zeros({4}), Tensor::zeros({2})})};
    after[rank] = pg.sequence_number();
    for (const WorkPtr& w : works) w->wait();
  });
  for (int r = 0; r < 3; ++r) {
    CHECK(before[r] == 0);
    CHECK(after[r] == 4);
  }
}

}  // namespace ringgrad::comm::testing
