// A worker process for test_process_group_faults: joins a ring group through the TcpStore at
// 127.0.0.1:PORT, announces "started/<rank>", then all-reduces COUNT floats. Exits 0 on
// success, or prints the error on stderr and exits 3. With a fifth argument
// `no-unix-sockets` it first makes socket(AF_UNIX, ...) fail, as a sandbox may (exit 4 where
// seccomp itself is not available).
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "comm/process_group/process_group.h"
#include "comm/store/tcp_store.h"
#include "core/logging.h"

namespace {

// A seccomp filter: socket() with domain AF_UNIX returns EPERM, every other call is allowed.
bool forbid_unix_sockets() {
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socket, 0, 3),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args[0])),  // the low word
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_UNIX, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog program{static_cast<unsigned short>(sizeof filter / sizeof filter[0]), filter};
  return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ringgrad;
  const bool no_unix = argc == 6 && std::string(argv[5]) == "no-unix-sockets";
  if (argc != 5 && !no_unix) {
    std::fprintf(stderr, "usage: ring_fault_worker PORT RANK WORLD COUNT [no-unix-sockets]\n");
    return 2;
  }
  if (no_unix && !forbid_unix_sockets()) {
    std::fprintf(stderr, "no seccomp: %s\n", std::strerror(errno));
    return 4;
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
