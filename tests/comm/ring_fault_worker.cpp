// A worker process for test_process_group_faults: joins a ring group through the TcpStore at
// 127.0.0.1:PORT, announces "started/<rank>", then all-reduces COUNT floats. Exits 0 on
// success, or prints the error on stderr and exits 3.
#include <cstdio>
#include <cstdlib>

#include "comm/process_group/process_group.h"
#include "comm/store/tcp_store.h"
#include "core/logging.h"

int main(int argc, char** argv) {
  using namespace ringgrad;
  if (argc != 5) {
    std::fprintf(stderr, "usage: ring_fault_worker PORT RANK WORLD COUNT\n");
    return 2;
  }
  const int port = std::atoi(argv[1]), rank = std::atoi(argv[2]), world = std::atoi(argv[3]);
  const int64_t count = std::atoll(argv[4]);
  try {
    set_log_level(LogLevel::warn);
    comm::TcpStoreOptions so;
    so.port = port;
    so.connect_timeout = comm::Milliseconds(10000);
    auto store = std::make_shared<comm::TcpStore>(so);
    comm::ProcessGroupOptions o;
    o.timeout = comm::Milliseconds(60000);  // far above the test's wait: a timeout is a failure
    auto pg = comm::create_process_group("ring", store, rank, world, o);
    Tensor t = Tensor::full({count}, rank + 1.0);
    store->set("started/" + std::to_string(rank), "1");
    for (int i = 0; i < 20; ++i) pg->allreduce(t)->wait();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 3;
  }
}
