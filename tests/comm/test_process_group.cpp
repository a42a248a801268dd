// Ring process group behaviour around the data: mismatched collectives fail on every rank with
// both fingerprints, a rank that never arrives is named at the timeout, bad settings fail fast.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "comm/process_group/fingerprint.h"
#include "core/cuda_memory.h"
#include "ringgrad/config.h"
#include "tests/comm/ring_fixtures.h"

namespace ringgrad::comm::testing {

namespace {

// Runs `call` on every rank of a fresh group and returns each rank's error message ("" if none).
std::vector<std::string> errors_of(int world, Milliseconds timeout,
                                   const std::function<void(int, ProcessGroup&)>& call) {
  auto store = std::make_shared<HashStore>();
  std::vector<std::string> messages(static_cast<size_t>(world));
  spawn(world, [&](int rank) {
    auto pg = make_ring_group(store, rank, world, "faults", timeout);
    try {
      call(rank, *pg);
    } catch (const std::exception& e) {
      messages[rank] = e.what();
    }
  });
  return messages;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("mismatch: one rank all-reduces 10 floats while the others do 12") {
  for (int world : {2, 4}) {
    CAPTURE(world);
    auto messages = errors_of(world, Milliseconds(20000), [](int rank, ProcessGroup& pg) {
      pg.allreduce(Tensor::zeros({rank == 1 ? 10 : 12}))->wait();
    });
    for (const auto& m : messages) {
      CAPTURE(m);
      CHECK(contains(m, "collective mismatch"));
      CHECK(contains(m, "allreduce #0 (sum, float32, 10 elements)"));
      CHECK(contains(m, "allreduce #0 (sum, float32, 12 elements)"));
    }
  }
}

TEST_CASE("mismatch: barrier on one rank while the others broadcast, and op or dtype differ") {
  auto messages = errors_of(3, Milliseconds(20000), [](int rank, ProcessGroup& pg) {
    if (rank == 0)
      pg.barrier()->wait();
    else
      pg.broadcast(Tensor::zeros({4}))->wait();
  });
  for (const auto& m : messages) {
    CAPTURE(m);
    CHECK(contains(m, "barrier #0"));
    CHECK(contains(m, "broadcast #0 (float32, 4 elements, root 0)"));
  }
  messages = errors_of(3, Milliseconds(20000), [](int rank, ProcessGroup& pg) {
    pg.allreduce(Tensor::zeros({4}))->wait();  // #0 agrees
    AllreduceOptions o;
    o.op = rank == 2 ? ReduceOp::max : ReduceOp::sum;
    pg.allreduce(Tensor::zeros({4}, rank == 2 ? DType::f64 : DType::f32), o)->wait();
  });
  for (const auto& m : messages) {
    CAPTURE(m);
    CHECK(contains(m, "allreduce #1 (max, float64, 4 elements)"));
    CHECK(contains(m, "allreduce #1 (sum, float32, 4 elements)"));
  }
}

TEST_CASE("fingerprint: a send/recv's tag and a rooted collective's root each have their field") {
  const Fingerprint send = make_fingerprint(CollectiveKind::send_recv, 3, DType::f32, 4,
                                            ReduceOp::sum, /*root_or_tag=*/7);
  CHECK(send.tag == 7);
  CHECK(send.root == -1);
  CHECK(describe(send) == "send/recv #3 (float32, 4 elements, tag 7)");
  const Fingerprint broadcast = make_fingerprint(CollectiveKind::broadcast, 3, DType::f32, 4,
                                                 ReduceOp::sum, /*root_or_tag=*/2);
  CHECK(broadcast.root == 2);
  CHECK(broadcast.tag == 0);
  CHECK(describe(broadcast) == "broadcast #3 (float32, 4 elements, root 2)");
  CHECK_FALSE(same_collective(
      send, make_fingerprint(CollectiveKind::send_recv, 3, DType::f32, 4, ReduceOp::sum, 8)));
}

TEST_CASE("a failed group refuses later work with the first error") {
  auto messages = errors_of(2, Milliseconds(20000), [](int rank, ProcessGroup& pg) {
    WorkPtr bad = pg.allreduce(Tensor::zeros({rank + 1}));
    WorkPtr next = pg.barrier();
    CHECK_THROWS(bad->wait());
    next->wait();
  });
  for (const auto& m : messages) {
    CAPTURE(m);
    CHECK(contains(m, "unusable after an earlier failure"));
    CHECK(contains(m, "collective mismatch"));
    CHECK_FALSE(contains(m, ".cpp:"));  // the first error's sentence, not where it was thrown
  }
}

TEST_CASE("timeout: a rank that never starts allreduce #1 is named on the others") {
  auto messages = errors_of(3, Milliseconds(600), [](int rank, ProcessGroup& pg) {
    pg.allreduce(Tensor::zeros({8}))->wait();
    if (rank == 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      return;
    }
    pg.allreduce(Tensor::zeros({8}))->wait();
  });
  CHECK(messages[2].empty());
  for (int r : {0, 1}) {
    CAPTURE(messages[r]);
    CHECK(contains(messages[r], "allreduce #1 (sum, float32, 8 elements)"));
    CHECK(contains(messages[r], "ranks that never started it: 2"));
  }
}

TEST_CASE("one verdict: a rank that arrives after the others timed out fails too, naming why") {
  // The others time out allreduce #1 and abort; what they left in the shared-memory rings or
  // socket buffers before that belongs to a failed collective, so the late rank must not
  // complete with it (it did, over shared memory: the sum of the data left in the ring).
  for (const std::string transport : {"auto", "tcp"})
    for (int world : {2, 3}) {
      CAPTURE(transport);
      CAPTURE(world);
      ::setenv("RINGGRAD_TRANSPORT", transport.c_str(), 1);
      const int late = world - 1;
      auto messages = errors_of(world, Milliseconds(20000), [&](int rank, ProcessGroup& pg) {
        pg.allreduce(Tensor::zeros({8}))->wait();
        AllreduceOptions o;
        if (rank == late)
          std::this_thread::sleep_for(std::chrono::milliseconds(1200));
        else
          o.timeout = Milliseconds(300);
        pg.allreduce(Tensor::zeros({8}), o)->wait();
      });
      ::unsetenv("RINGGRAD_TRANSPORT");
      for (int r = 0; r < world; ++r) {
        CAPTURE(r);
        CAPTURE(messages[r]);
        CHECK(contains(messages[r], "allreduce #1"));
        if (r == late) {
          const auto note = messages[r].find("first failure in the group: rank ");
          REQUIRE(note != std::string::npos);
          CHECK(messages[r].find(".cpp:", note) == std::string::npos);  // the sentence alone
        }
        CHECK(contains(messages[r], "timed out"));
      }
    }
}

TEST_CASE("setup: a rank that never joins is named after the setup timeout") {
  auto store = std::make_shared<HashStore>();
  std::vector<std::string> messages(2);
  spawn(2, [&](int rank) {
    set_log_level(LogLevel::warn);
    ProcessGroupOptions o;
    o.group_name = "never";
    o.setup_timeout = Milliseconds(300);
    try {
      create_process_group(Backend::ring, store, rank, 3, o);
    } catch (const TimeoutError& e) {
      messages[rank] = e.what();
    }
  });
  for (const auto& m : messages) {
    CAPTURE(m);
    CHECK(contains(m, "missing ranks: 2"));
  }
}

TEST_CASE(
    "settings: bad interface name, unknown backend, nccl, RINGGRAD_ALGO and _TRANSPORT, bad "
    "arguments") {
  auto store = std::make_shared<HashStore>();
  ::setenv("RINGGRAD_SOCKET_IFNAME", "nope0", 1);
  std::string m;
  try {
    make_ring_group(store, 0, 1, "ifname");
  } catch (const InvalidArgument& e) {
    m = e.what();
  }
  ::unsetenv("RINGGRAD_SOCKET_IFNAME");
  CHECK(contains(m, "RINGGRAD_SOCKET_IFNAME='nope0'"));
  CHECK(contains(m, "lo (127.0.0.1)"));

#ifdef HAVE_NCCL
  if (cuda_device_count() == 0)
    CHECK_THROWS_WITH(create_process_group(Backend::nccl, store, 0, 1),
                      doctest::Contains("nccl backend: no CUDA device: "));
#else
  CHECK_THROWS_WITH_AS(create_process_group(Backend::nccl, store, 0, 1),
                       doctest::Contains("this ringgrad build has no NCCL"), InvalidArgument);
#endif
  ProcessGroupOptions cpu_auto;
  cpu_auto.group_name = "auto";
  CHECK(create_process_group(Backend::automatic, store, 0, 1, cpu_auto)->backend_name() == "ring");
  if (cuda_device_count() == 0) {  // CUDA tensors without a visible GPU: still the ring
    ProcessGroupOptions cuda_auto;
    cuda_auto.group_name = "auto-cuda";
    cuda_auto.tensor_device = DeviceType::cuda;
    CHECK(create_process_group(Backend::automatic, store, 0, 1, cuda_auto)->backend_name() ==
          "ring");
  }
  CHECK_THROWS_WITH(make_ring_group(store, 0, 1, "algo", Milliseconds(1000), "fast"),
                    doctest::Contains("not one of: ring, recursive_doubling"));
  ::setenv("RINGGRAD_TRANSPORT", "ipc", 1);
  CHECK_THROWS_WITH_AS(
      make_ring_group(store, 0, 1, "transport"),
      doctest::Contains("RINGGRAD_TRANSPORT='ipc' is not one of: auto, shm, unix, tcp"),
      InvalidArgument);
  ::unsetenv("RINGGRAD_TRANSPORT");

  auto pg = make_ring_group(store, 0, 1, "args");
  CHECK_THROWS_WITH_AS(pg->allreduce(Tensor::zeros({3}), Tensor::zeros({4})),
                       doctest::Contains("expected 3"), InvalidArgument);
  CHECK_THROWS_WITH_AS(pg->allreduce(Tensor::zeros({3}), Tensor::zeros({3}, DType::f64)),
                       doctest::Contains("input is float32 but output is float64"),
                       InvalidArgument);
  BroadcastOptions bo;
  bo.root = 1;
  CHECK_THROWS_WITH_AS(pg->broadcast(Tensor::zeros({3}), bo),
                       doctest::Contains("root 1 is outside the group of size 1"), InvalidArgument);
  CHECK_THROWS_WITH_AS(pg->send(Tensor::zeros({3}), 0),
                       doctest::Contains("send: rank 0 cannot send to itself"), InvalidArgument);
  CHECK_THROWS_WITH_AS(pg->recv(Tensor::zeros({3}), 0),
                       doctest::Contains("recv: rank 0 cannot receive from itself"),
                       InvalidArgument);
  CHECK_THROWS_WITH_AS(pg->send(Tensor::zeros({3}), 2),
                       doctest::Contains("send: destination 2 is outside the group of size 1"),
                       InvalidArgument);
  CHECK_THROWS_WITH_AS(pg->recv(Tensor(), 0),
                       doctest::Contains("recv: the output tensor is undefined"), InvalidArgument);
}

TEST_CASE("work: completed_at is stamped by the thread that completes it") {
  Work work("allreduce#0");
  CHECK_FALSE(work.completed_at().has_value());
  const auto before = std::chrono::steady_clock::now();
  std::thread completer([&] { work.complete(); });
  completer.join();
  const auto after = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  work.wait();
  REQUIRE(work.completed_at().has_value());
  CHECK(*work.completed_at() >= before);
  CHECK(*work.completed_at() <= after);  // not when wait() ran, 50 ms later
}

TEST_CASE("RINGGRAD_TIMEOUT_S sets the default collective timeout") {
  ::setenv("RINGGRAD_TIMEOUT_S", "2.5", 1);
  CHECK(default_collective_timeout() == Milliseconds(2500));
  ::unsetenv("RINGGRAD_TIMEOUT_S");
  CHECK(default_collective_timeout() == kDefaultCollectiveTimeout);
}

}  // namespace ringgrad::comm::testing
