// Helpers for the ring process group suites: ranks as threads on one HashStore (the harness
// joins every thread and rethrows the first error), groups with short test timeouts, and
// rank- and index-dependent test values that are exact in every dtype.
#pragma once
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/process_group/process_group.h"
#include "comm/store/hash_store.h"
#include "core/logging.h"

namespace ringgrad::comm::testing {

// Runs fn(rank) on `world` threads; joins all, then rethrows the first exception.
inline void spawn(int world, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  std::mutex mu;
  std::exception_ptr first;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!first) first = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

// Which links the ranks of a test group talk over (they share a host): as RINGGRAD_TRANSPORT
// says (by default shared memory), every pair on shared memory, every pair on a unix socket
// (SocketLink: TCP moves bytes with the same code, test_transport.cpp covers its connect), or a
// mixed mesh: rank 0 offers no shared memory, so its pairs use unix sockets, while the others
// share memory among themselves.
enum class Links { automatic, shm, socket, mixed };
inline const char* links_name(Links links) {
  const char* names[] = {"automatic", "shm", "socket", "mixed"};
  return names[static_cast<int>(links)];
}
// The ProcessGroupOptions::transport that gives `rank` its part of `links`.
inline std::string transport_for(Links links, int rank) {
  if (links == Links::automatic) return "";
  if (links == Links::shm) return "shm";
  if (links == Links::socket) return "unix";  // SocketLink, as TCP, with a cheaper connect
  return rank == 0 ? "unix" : "auto";
}

inline std::unique_ptr<ProcessGroup> make_ring_group(std::shared_ptr<Store> store, int rank,
                                                     int world, const std::string& name,
                                                     Milliseconds timeout = Milliseconds(20000),
                                                     const std::string& algorithm = "",
                                                     Links links = Links::automatic) {
  set_log_level(LogLevel::warn);
  ProcessGroupOptions o;
  o.group_name = name;
  o.timeout = timeout;
  o.allreduce_algorithm = algorithm;
  o.transport = transport_for(links, rank);
  return create_process_group(Backend::ring, std::move(store), rank, world, o);
}

// A well-mixed hash of the index (splitmix64's finaliser): the values below follow it, so they
// repeat with no period, and a block moved by any offset lands on different values.
inline uint64_t index_hash(int64_t i) {
  uint64_t z = static_cast<uint64_t>(i) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Input value of `rank` at index i: depends on both, and every sum, product, min or max over
// up to 8 ranks is exact in every dtype (u8 included), so any order of reduction agrees. A
// product's factors alternate 1 and 2 over the ranks (at most 2^4 over 8 ranks).
inline double input_value(ReduceOp op, DType dtype, int rank, int64_t i) {
  const bool is_unsigned = dtype == DType::u8;
  const uint64_t h = index_hash(i);
  if (op == ReduceOp::prod) {
    const double v = static_cast<double>(1 + (h % 2 + static_cast<uint64_t>(rank)) % 2);
    return !is_unsigned && (h >> 32) % 3 == 0 ? -v : v;
  }
  return static_cast<double>((h % 11 + static_cast<uint64_t>(rank) * 7) % 11) -
         (is_unsigned ? 0 : 5);
}

// The reduction of input_value over `world` ranks, rounded as the dtype stores it.
inline double expected_value(ReduceOp op, DType dtype, int world, int64_t i) {
  double acc = input_value(op, dtype, 0, i);
  for (int r = 1; r < world; ++r) {
    const double v = input_value(op, dtype, r, i);
    if (op == ReduceOp::sum || op == ReduceOp::avg) acc += v;
    if (op == ReduceOp::prod) acc *= v;
    if (op == ReduceOp::max) acc = std::max(acc, v);
    if (op == ReduceOp::min) acc = std::min(acc, v);
  }
  if (op != ReduceOp::avg) return acc;
  if (!dtype_is_floating(dtype)) return static_cast<double>(static_cast<int64_t>(acc) / world);
  if (dtype == DType::f64) return acc / world;
  return static_cast<float>(acc) / static_cast<float>(world);
}

// The values in doubles, cast to `dtype` in one pass (as set_element would round each).
inline Tensor filled(int64_t count, DType dtype, const std::function<double(int64_t)>& value) {
  std::vector<double> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[i] = value(i);
  return Tensor::from_vector(v, {count}).to(dtype);
}

// Records a size difference or the first mismatching element of `got` against `want`,
// compared as stored bytes.
inline void compare(const Tensor& got, const Tensor& want, const std::string& what,
                    std::vector<std::string>& errors) {
  if (got.numel() != want.numel()) {
    errors.push_back(str_cat(what, ": ", got.numel(), " elements, expected ", want.numel()));
    return;
  }
  const size_t elem = dtype_size(got.dtype());
  const auto* g = static_cast<const unsigned char*>(got.raw_data());
  const auto* w = static_cast<const unsigned char*>(want.raw_data());
  for (int64_t i = 0; i < want.numel(); ++i)
    if (std::memcmp(g + i * elem, w + i * elem, elem) != 0) {
      errors.push_back(
          str_cat(what, ": element ", i, " is ", got.element(i), ", expected ", want.element(i)));
      return;
    }
}

// Runs `body(rank, pg, errors)` on every rank of a fresh ring group (`algorithm`: "" or a
// forced all-reduce algorithm; `links`: what the ranks talk over) and fails with any errors.
inline void run_group(
    int world, const std::string& name, const std::string& algorithm,
    const std::function<void(int, ProcessGroup&, std::vector<std::string>&)>& body,
    Milliseconds timeout = Milliseconds(20000), Links links = Links::automatic) {
  auto store = std::make_shared<HashStore>();
  std::vector<std::vector<std::string>> errors(static_cast<size_t>(world));
  spawn(world, [&](int rank) {
    auto pg = make_ring_group(store, rank, world, name, timeout, algorithm, links);
    body(rank, *pg, errors[rank]);
  });
  for (const auto& per_rank : errors)
    for (const auto& e : per_rank) FAIL_CHECK(e);
}

}  // namespace ringgrad::comm::testing
