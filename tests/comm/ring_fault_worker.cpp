// A worker process for test_process_group_faults: joins a ring group through the TcpStore at
// 127.0.0.1:PORT, announces "started/<rank>", then all-reduces COUNT floats twenty times and
// checks one more all-reduce against the reference. Exits 0 on success, after printing
// "links: <how it reaches each peer>" on stderr; prints the error and exits 3 on a failure,
// 5 on a wrong result. A fifth argument first changes the worker's surroundings (exit 4, with
// the reason, where it cannot):
//   no-unix-sockets   socket(AF_UNIX, ...) fails, as in a sandbox (a seccomp filter)
//   tiny-dev-shm      a private mount namespace with a 64 KiB tmpfs on /dev/shm (Docker's
//                     classic trap, here even smaller)
//   file-size-limit   ulimit -f of 64 KiB, which also caps a memfd: no shared memory fits
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
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

// This process alone sees a 64 KiB tmpfs on /dev/shm.
bool mount_tiny_dev_shm() {
  return ::unshare(CLONE_NEWNS) == 0 &&
         ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
         ::mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=64k") == 0;
}

// SIGXFSZ keeps its default action (ending the process), as under a shell's `ulimit -f`.
bool limit_file_size() {
  rlimit limit{64 << 10, 64 << 10};
  return ::setrlimit(RLIMIT_FSIZE, &limit) == 0;
}

// Changes the surroundings as `mode` says; false (and a reason on stderr) where it cannot.
bool prepare(const std::string& mode) {
  const char* failed =
      mode == "no-unix-sockets" ? (forbid_unix_sockets() ? nullptr : "no seccomp")
      : mode == "tiny-dev-shm"
          ? (mount_tiny_dev_shm() ? nullptr : "no private mount namespace with a tmpfs")
      : mode == "file-size-limit" ? (limit_file_size() ? nullptr : "no setrlimit")
                                  : "unknown mode";
  if (failed) std::fprintf(stderr, "%s: %s\n", failed, std::strerror(errno));
  return failed == nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ringgrad;
  if (argc != 5 && argc != 6) {
    std::fprintf(stderr,
                 "usage: ring_fault_worker PORT RANK WORLD COUNT "
                 "[no-unix-sockets|tiny-dev-shm|file-size-limit]\n");
    return 2;
  }
  if (argc == 6 && !prepare(argv[5])) return 4;
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
    auto pg = comm::create_process_group(comm::Backend::ring, store, rank, world, o);
    Tensor t = Tensor::full({count}, rank + 1.0);
    store->set("started/" + std::to_string(rank), "1");
    for (int i = 0; i < 20; ++i) pg->allreduce(t)->wait();
    Tensor check = Tensor::full({count}, rank + 1.0);
    pg->allreduce(check)->wait();
    const float want = world * (world + 1) / 2.0f;
    for (int64_t i = 0; i < count; ++i)
      if (check.data<float>()[i] != want) {
        std::fprintf(stderr, "element %lld is %g, expected %g\n", static_cast<long long>(i),
                     check.data<float>()[i], want);
        return 5;
      }
    std::fprintf(stderr, "links: %s\n", pg->describe_links().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 3;
  }
}
