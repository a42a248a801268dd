// Tests of comm/store/worker_store: the worker environment from torchrun-style, Open MPI and
// Slurm variables (with conflicts rejected), and the worker store hosted by rank 0.
#include <doctest/doctest.h>

#include <cstdlib>
#include <map>
#include <sstream>
#include <thread>

#include "comm/store/worker_store.h"
#include "tests/comm/store_fixtures.h"
#include "tests/reserved_port.h"

using namespace ringgrad;
using namespace ringgrad::comm;
using namespace ringgrad::comm::testing;

namespace {
// A worker's environment as a shell would set it: "RANK=3 WORLD_SIZE=4" (values without spaces).
EnvLookup env_of(const std::string& assignments) {
  std::map<std::string, std::string> vars;
  std::istringstream words(assignments);
  for (std::string word; words >> word;) {
    const size_t eq = word.find('=');
    REQUIRE(eq != std::string::npos);
    vars[word.substr(0, eq)] = word.substr(eq + 1);
  }
  return [vars](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

// Where a worker found its ranks (the variable family), and the rank, world size, local rank
// and local world size it read there.
void check_ranks(const WorkerEnv& env, const std::string& source, int rank, int world_size,
                 int local_rank, int local_world_size) {
  CHECK(env.source == source);
  CHECK(env.rank == rank);
  CHECK(env.world_size == world_size);
  CHECK(env.local_rank == local_rank);
  CHECK(env.local_world_size == local_world_size);
}
}  // namespace

TEST_CASE("worker env: torchrun variables") {
  auto env = read_worker_env(
      env_of("RANK=3 WORLD_SIZE=4 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 MASTER_ADDR=10.0.0.1 "
             "MASTER_PORT=29500 TORCHELASTIC_RESTART_COUNT=2"));
  check_ranks(env, "RANK", 3, 4, 1, 2);
  CHECK(env.master_addr == "10.0.0.1");
  CHECK(env.master_port == 29500);
  CHECK(env.generation == 2);
}

TEST_CASE("worker env: Open MPI and Slurm variables when RANK is absent") {
  auto mpi = read_worker_env(
      env_of("OMPI_COMM_WORLD_RANK=5 OMPI_COMM_WORLD_SIZE=8 OMPI_COMM_WORLD_LOCAL_RANK=1 "
             "OMPI_COMM_WORLD_LOCAL_SIZE=4 MASTER_ADDR=h MASTER_PORT=1234"));
  check_ranks(mpi, "OMPI", 5, 8, 1, 4);
  auto slurm =
      read_worker_env(env_of("SLURM_PROCID=2 SLURM_NTASKS=3 SLURM_LOCALID=0 "
                             "SLURM_NTASKS_PER_NODE=2(x3) MASTER_ADDR=h MASTER_PORT=1234"));
  check_ranks(slurm, "SLURM", 2, 3, 0, 1);  // local world size 1: "2(x3)" is not a plain count
}

TEST_CASE("worker env: clear errors for conflicting or missing variables") {
  auto conflict = message_of<InvalidArgument>([&] {
    read_worker_env(env_of("RANK=1 WORLD_SIZE=2 SLURM_PROCID=0 MASTER_ADDR=h MASTER_PORT=1"));
  });
  CHECK(conflict.find("RANK=1 disagrees with SLURM_PROCID=0") != std::string::npos);
  // Under ringgrad-run inside an srun allocation the launcher's RANK is the one that counts.
  CHECK(read_worker_env(env_of("RANK=1 WORLD_SIZE=2 SLURM_PROCID=0 TORCHELASTIC_RUN_ID=x "
                               "MASTER_ADDR=h MASTER_PORT=1"))
            .rank == 1);
  CHECK(message_of<InvalidArgument>([&] { read_worker_env(env_of("")); }).find("no rank") !=
        std::string::npos);
  CHECK(message_of<InvalidArgument>([&] {
          read_worker_env(env_of("RANK=0 WORLD_SIZE=1 MASTER_PORT=1"));
        }).find("MASTER_ADDR") != std::string::npos);
  CHECK(message_of<InvalidArgument>([&] {
          read_worker_env(env_of("RANK=2 WORLD_SIZE=2 MASTER_ADDR=h MASTER_PORT=1"));
        }).find("outside world size") != std::string::npos);
  CHECK(message_of<InvalidArgument>([&] {
          read_worker_env(env_of("RANK=x WORLD_SIZE=2"));
        }).find("RANK='x'") != std::string::npos);
  // Numbers past int's range are refused, not wrapped (4294967296 would become rank 0).
  for (const char* huge : {"4294967296", "99999999999999999999"}) {
    CAPTURE(huge);
    CHECK(message_of<InvalidArgument>([&] {
            read_worker_env(
                env_of("RANK=" + std::string(huge) + " WORLD_SIZE=2 MASTER_ADDR=h MASTER_PORT=1"));
          }).find("RANK='") != std::string::npos);
  }
  CHECK(message_of<InvalidArgument>([&] {
          read_worker_env(env_of("RANK=0 WORLD_SIZE=2 MASTER_ADDR=h MASTER_PORT=4294967297"));
        }).find("MASTER_PORT='4294967297' is not an integer") != std::string::npos);
}

TEST_CASE("worker store: rank 0 hosts, everyone meets, a missing rank is named") {
  int port;
  {
    TcpStoreServer probe(TcpStoreServerOptions{});
    port = probe.port();
  }
  auto env_for = [&](int rank, int world) {
    WorkerEnv e;
    e.rank = rank;
    e.world_size = world;
    e.master_addr = "127.0.0.1";
    e.master_port = port;
    return e;
  };
  {
    std::vector<WorkerStore> stores(3);
    std::vector<std::thread> threads;
    for (int r = 0; r < 3; ++r)
      threads.emplace_back(
          [&, r] { stores[r] = create_worker_store(env_for(r, 3), Milliseconds(10'000)); });
    for (auto& t : threads) t.join();
    stores[2].store->set("from2", "x");
    CHECK(stores[0].store->get("from2") == "x");
    CHECK(stores[0].server != nullptr);
    CHECK(stores[1].server == nullptr);
    for (int r = 1; r < 3; ++r) stores[r].finish(Milliseconds(1000));
    stores[0].finish(Milliseconds(1000));  // returns: everyone said they are finished
  }
  auto msg =
      message_of<TimeoutError>([&] { create_worker_store(env_for(0, 2), Milliseconds(300)); });
  CHECK(msg.find("1/2 ranks arrived") != std::string::npos);
  CHECK(msg.find("missing ranks: 1") != std::string::npos);
}

TEST_CASE("worker store: the launcher's bind address and token guard it") {
  const int port = ringgrad::testing::reserved_port();
  ::setenv("RINGGRAD_STORE_BIND_ADDR", "127.0.0.1", 1);
  ::setenv("RINGGRAD_STORE_TOKEN", "job-secret", 1);
  WorkerEnv e;
  e.rank = 0;
  e.world_size = 1;
  e.master_addr = "127.0.0.1";
  e.master_port = port;
  WorkerStore ws = create_worker_store(e, Milliseconds(5000));
  ::unsetenv("RINGGRAD_STORE_BIND_ADDR");
  ::unsetenv("RINGGRAD_STORE_TOKEN");
  REQUIRE(ws.server != nullptr);
  CHECK(ws.server->address() == "127.0.0.1:" + std::to_string(port));  // not 0.0.0.0
  auto refused = message_of<IoError>([&] {
    TcpStoreOptions o;
    o.port = port;
    o.connect_timeout = Milliseconds(2000);
    TcpStore stranger(o);  // no token
  });
  CHECK(refused.find("token") != std::string::npos);
  ws.store->set("k", "v");  // the workers' own client is unaffected
}
