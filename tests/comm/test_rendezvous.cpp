// Tests of comm/rendezvous: node ranks given and assigned, MIN:MAX with last call, timeouts
// that name joined and missing nodes, stale generations and late joins. Nodes are threads on
// one HashStore.
#include <doctest/doctest.h>

#include <set>
#include <thread>

#include "comm/rendezvous/rendezvous.h"
#include "comm/store/hash_store.h"
#include "tests/comm/store_fixtures.h"

using namespace ringgrad;
using namespace ringgrad::comm;
using namespace ringgrad::comm::testing;

namespace {

RendezvousConfig node_config(int min_nodes, int max_nodes, int node_rank, int nproc,
                             const std::string& host) {
  RendezvousConfig c;
  c.run_id = "job";
  c.min_nodes = min_nodes;
  c.max_nodes = max_nodes;
  c.node_rank = node_rank;
  c.local_world_size = nproc;
  c.hostname = host;
  c.timeout = Milliseconds(10'000);
  c.last_call_timeout = Milliseconds(200);
  c.endpoint = "10.0.0.1:29400";
  return c;
}

// Joins `configs.size()` nodes concurrently; returns their results in the same order.
std::vector<RendezvousResult> join_all(const std::shared_ptr<Store>& store,
                                       const std::vector<RendezvousConfig>& configs,
                                       int64_t generation = 0) {
  std::vector<RendezvousResult> results(configs.size());
  std::vector<std::string> errors(configs.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < configs.size(); ++i)
    threads.emplace_back([&, i] {
      try {
        results[i] = Rendezvous(store, configs[i]).join(generation);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (const auto& e : errors) REQUIRE_MESSAGE(e.empty(), e);
  return results;
}

}  // namespace

TEST_CASE("rendezvous: assigned node ranks are distinct and ranks follow node order") {
  auto store = std::make_shared<HashStore>();
  const std::vector<int> nprocs = {2, 3, 1};
  std::vector<RendezvousConfig> configs;
  for (int i = 0; i < 3; ++i)
    configs.push_back(node_config(3, 3, -1, nprocs[i], "host" + std::to_string(i)));
  auto results = join_all(store, configs);
  std::set<int> node_ranks;
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    node_ranks.insert(r.node_rank);
    CHECK(r.num_nodes == 3);
    CHECK(r.world_size == 6);
    CHECK(r.nodes[r.node_rank].hostname == configs[i].hostname);
    int offset = 0;  // global ranks: the nodes below this one come first
    for (int n = 0; n < r.node_rank; ++n) offset += r.nodes[n].local_world_size;
    CHECK(r.rank_offset == offset);
  }
  CHECK(node_ranks == std::set<int>{0, 1, 2});
}

TEST_CASE("rendezvous: given node ranks are kept") {
  auto store = std::make_shared<HashStore>();
  auto results = join_all(store, {node_config(2, 2, 1, 2, "b"), node_config(2, 2, 0, 2, "a")});
  CHECK(results[0].node_rank == 1);
  CHECK(results[0].rank_offset == 2);
  CHECK(results[1].node_rank == 0);
  CHECK(results[1].rank_offset == 0);
}

TEST_CASE("rendezvous: a second launcher with the same node rank is named") {
  auto store = std::make_shared<HashStore>();
  std::thread first([&] {
    try {
      auto c = node_config(2, 2, 1, 1, "first-host");
      c.timeout = Milliseconds(500);
      Rendezvous(store, c).join(0);
    } catch (const TimeoutError&) {
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto msg = message_of<Error>([&] { Rendezvous(store, node_config(2, 2, 1, 1, "dup")).join(0); });
  first.join();
  CHECK(msg.find("node rank 1") != std::string::npos);
  CHECK(msg.find("first-host") != std::string::npos);
}

TEST_CASE("rendezvous: a store serves one run id, another is refused at once naming both") {
  auto store = std::make_shared<HashStore>();
  join_all(store, {node_config(1, 1, 0, 1, "a")});
  auto other = node_config(1, 1, 0, 1, "b");
  other.run_id = "job2";
  auto msg = message_of<InvalidArgument>([&] { Rendezvous(store, other).join(0); });
  CHECK(msg.find("serves job 'job', not --rdzv-id 'job2'") != std::string::npos);
  CHECK(msg.find("10.0.0.1:29400") != std::string::npos);
  join_all(store, {node_config(1, 1, 0, 1, "a")}, 1);  // the owner's next round still works
}

TEST_CASE("rendezvous: garbage in the store is named, not a bare 'stoi'") {
  // What a program other than ringgrad-run may leave on a store that has no token.
  auto store = std::make_shared<HashStore>();
  store->set("rdzv/job/generation", "x");
  auto msg = message_of<Error>([&] { Rendezvous(store, node_config(1, 1, 0, 1, "a")).join(0); });
  CHECK(msg.find("rendezvous key 'rdzv/job/generation' holds 'x', not a number") !=
        std::string::npos);
  CHECK(msg.find("token") != std::string::npos);
  store = std::make_shared<HashStore>();
  join_all(store, {node_config(1, 1, 0, 1, "a")});
  store->set("rdzv/job/g0/master", "10.0.0.1:http");
  msg = message_of<Error>([&] { Rendezvous(store, node_config(1, 1, 0, 1, "a")).wait_master(0); });
  CHECK(msg.find("'rdzv/job/g0/master' holds 'http', not a number from 1 to 65535") !=
        std::string::npos);
}

TEST_CASE("rendezvous: short of nodes times out naming joined, missing and the endpoint") {
  auto store = std::make_shared<HashStore>();
  auto c = node_config(2, 2, -1, 1, "lonely");
  c.timeout = Milliseconds(300);
  auto msg = message_of<TimeoutError>([&] { Rendezvous(store, c).join(0); });
  CHECK(msg.find("1/2 nodes joined") != std::string::npos);
  CHECK(msg.find("missing: 1") != std::string::npos);
  CHECK(msg.find("10.0.0.1:29400") != std::string::npos);
  CHECK(msg.find("300 ms") != std::string::npos);
}

TEST_CASE("rendezvous: MIN:MAX closes with the nodes present after the last call") {
  auto store = std::make_shared<HashStore>();
  auto results = join_all(store, {node_config(2, 4, -1, 1, "a"), node_config(2, 4, -1, 1, "b")});
  CHECK(results[0].num_nodes == 2);
  CHECK(results[1].world_size == 2);
  // A node arriving after the round closed is told so, not silently added.
  auto msg = message_of<Error>([&] { Rendezvous(store, node_config(2, 4, -1, 1, "c")).join(0); });
  CHECK(msg.find("closed before this node") != std::string::npos);
}

TEST_CASE("rendezvous: generations move forward, a stale node is refused") {
  auto store = std::make_shared<HashStore>();
  auto gen0 = join_all(store, {node_config(1, 1, -1, 2, "a")}, 0);
  CHECK(gen0[0].generation == 0);
  auto gen1 = join_all(store, {node_config(1, 1, -1, 2, "a")}, 1);
  CHECK(gen1[0].generation == 1);
  CHECK(gen1[0].node_rank == 0);  // every round assigns ranks afresh
  auto msg = message_of<Error>([&] { Rendezvous(store, node_config(1, 1, -1, 2, "old")).join(0); });
  CHECK(msg.find("stale") != std::string::npos);
  CHECK(msg.find("generation 1") != std::string::npos);
}

TEST_CASE("rendezvous: the master endpoint published by node rank 0 reaches the others") {
  auto store = std::make_shared<HashStore>();
  Rendezvous master(store, node_config(2, 2, 0, 1, "a"));
  Rendezvous other(store, node_config(2, 2, 1, 1, "b"));
  std::thread t([&] { master.publish_master(3, "10.1.2.3", 41000); });
  auto [addr, port] = other.wait_master(3);
  t.join();
  CHECK(addr == "10.1.2.3");
  CHECK(port == 41000);
}
