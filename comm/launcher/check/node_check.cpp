// The node checker (see node_check.h). Steps, each ended by a store barrier so every node
// sees the same picture: publish facts and the listening address; probe every node's worker
// port (a TCP connect plus a 4-byte exchange each way, bounded by connect_timeout); publish
// each probe's outcome; then every node turns all records into the same rows.
#include "comm/launcher/check/node_check.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <thread>

#include "comm/store/worker_store.h"
#include "comm/transport/socket/socket.h"
#include "core/env.h"

namespace ringgrad::comm {

namespace {

using net::Socket;
using Clock = std::chrono::steady_clock;

std::string key(const char* what, int a, int b = -1) {
  return b < 0 ? str_cat("check/", what, "/", a) : str_cat("check/", what, "/", a, "/", b);
}

// Without SO_REUSEADDR on purpose: a port some other program holds must fail here, as it
// would for a worker.
Socket listen_at(int port, std::string& error) {
  Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_ANY);
  sa.sin_port = htons(static_cast<uint16_t>(port));
  if (!s.valid() || ::bind(s.fd(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
      ::listen(s.fd(), 64) != 0) {
    error = str_cat("cannot listen on port ", port == 0 ? "(any)" : std::to_string(port), ": ",
                    std::strerror(errno));
    return Socket();
  }
  return s;
}

int bound_port(const Socket& s) {
  sockaddr_in sa{};
  socklen_t len = sizeof sa;
  ::getsockname(s.fd(), reinterpret_cast<sockaddr*>(&sa), &len);
  return ntohs(sa.sin_port);
}

// Answers every probe of `listener` with this node's rank, on its own thread, until destroyed
// (RAII: a store error that unwinds run_node_check must not leave a joinable thread).
class ProbeServer {
 public:
  ProbeServer(const Socket& listener, int32_t rank)
      : thread_([this, &listener, rank] { serve(listener, rank); }) {}
  ~ProbeServer() {
    stop_ = true;
    thread_.join();
  }
  ProbeServer(const ProbeServer&) = delete;
  ProbeServer& operator=(const ProbeServer&) = delete;

 private:
  void serve(const Socket& listener, int32_t rank) {
    while (!stop_) {
      pollfd p{listener.fd(), POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      Socket peer(::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (!peer.valid()) continue;
      try {
        const auto deadline = Clock::now() + std::chrono::seconds(5);
        int32_t from = 0;
        net::read_fully(peer, &from, sizeof from, deadline, "worker port probe");
        net::write_fully(peer, &rank, sizeof rank, deadline, "worker port probe");
      } catch (const Error&) {  // that prober reports its own failure
      }
    }
  }
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// "" when `to` answered as node `expect`, else what went wrong.
std::string probe(const std::string& host, int port, int32_t self, int expect,
                  std::chrono::milliseconds timeout) {
  const std::string where = str_cat(host, ":", port);
  Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1) return "bad address " + where;
  const auto deadline = Clock::now() + timeout;
  if (::connect(s.fd(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    if (errno != EINPROGRESS) return str_cat("connect to ", where, ": ", std::strerror(errno));
    pollfd p{s.fd(), POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0)
      return str_cat("connect to ", where, ": no answer within ", format_duration(timeout),
                     " (a firewall dropping the port?)");
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return str_cat("connect to ", where, ": ", std::strerror(err));
  }
  try {
    int32_t answer = -1;
    net::write_fully(s, &self, sizeof self, deadline, "probe of " + where);
    net::read_fully(s, &answer, sizeof answer, deadline, "probe of " + where);
    if (answer != expect)
      return str_cat(where, " answered as node ", answer, ", not node ", expect);
  } catch (const Error& e) {
    return user_message(e);
  }
  return "";
}

std::string join_nodes(const std::vector<int>& nodes) {
  std::string s;
  for (int n : nodes) s += str_cat(s.empty() ? "" : ",", n);
  return s;
}

}  // namespace

std::vector<CheckRow> node_check_rows(const std::vector<NodeRecord>& nodes) {
  std::vector<CheckRow> rows;
  const int world = static_cast<int>(nodes.size());
  for (int n = 0; n < world; ++n) {
    const NodeRecord& r = nodes[n];
    const std::string node = std::to_string(n);
    rows.push_back({node, "rendezvous", CheckStatus::pass,
                    str_cat("joined from ", r.facts.hostname, " (", r.address, ")")});
    if (r.listen.empty()) {
      rows.push_back({node, "worker port", CheckStatus::fail, r.listen_error});
    } else {
      std::vector<int> reached;
      std::string failures;
      for (int from = 0; from < world; ++from) {
        if (r.reached[from].empty()) {
          reached.push_back(from);
        } else {
          failures +=
              str_cat(failures.empty() ? "" : "; ", "from node ", from, ": ", r.reached[from]);
        }
      }
      if (failures.empty())
        rows.push_back({node, "worker port", CheckStatus::pass,
                        str_cat(r.listen, " reached from node(s) ", join_nodes(reached))});
      else
        rows.push_back({node, "worker port", CheckStatus::fail, str_cat(r.listen, " ", failures)});
    }
    const std::string& reference = nodes[0].facts.build;
    if (r.facts.build == reference)
      rows.push_back(
          {node, "version", CheckStatus::pass, n == 0 ? reference : std::string("same as node 0")});
    else
      rows.push_back({node, "version", CheckStatus::fail,
                      str_cat("'", r.facts.build, "' differs from node 0's '", reference, "'")});
    rows.push_back({node, "cpus", CheckStatus::pass,
                    str_cat(r.facts.cpus, " usable of ", r.facts.cpus_online, " online")});
    rows.push_back({node, "cuda", r.facts.cuda_devices > 0 ? CheckStatus::pass : CheckStatus::info,
                    r.facts.cuda});
  }
  return rows;
}

int run_node_check(const NodeCheckOptions& o) {
  const WorkerEnv env = read_worker_env();
  WorkerStore ws = create_worker_store(env, o.timeout);
  Store& store = *ws.store;
  const int rank = env.rank, world = env.world_size;

  NodeRecord mine;
  mine.facts = local_node_facts();
  mine.address = net::select_interface(env_get("RINGGRAD_SOCKET_IFNAME"), env.master_addr).address;
  const int port = o.port_base == 0 ? 0 : o.port_base + rank;
  Socket listener = listen_at(port, mine.listen_error);
  std::optional<ProbeServer> server;
  if (listener.valid()) {
    mine.listen = str_cat(mine.address, ":", bound_port(listener));
    server.emplace(listener, rank);
  }
  store.set(key("facts", rank), serialize_node_facts(mine.facts));
  store.set(key("address", rank), mine.address);
  store.set(key("listen", rank), listener.valid() ? "ok " + mine.listen : mine.listen_error);
  // The benchmark jobs that follow (ring, NCCL) need store ports nothing holds: node 0, where
  // their stores will listen, asks the kernel for two now, and every node's report carries them.
  if (rank == 0) {
    std::string error;
    const Socket first = listen_at(0, error), second = listen_at(0, error);
    for (int i : {0, 1}) {
      const Socket& s = i == 0 ? first : second;
      store.set(key("perf_port", i), std::to_string(s.valid() ? bound_port(s) : 0));
    }
  }
  store_barrier(store, "check_listening", rank, world, o.timeout);
  std::vector<int> perf_ports;
  for (int i : {0, 1}) perf_ports.push_back(std::stoi(store.get(key("perf_port", i), o.timeout)));

  for (int to = 0; to < world; ++to) {
    const std::string listen = store.get(key("listen", to), o.timeout);
    std::string outcome = str_cat("not tried: node ", to, " has no worker port");
    if (listen.rfind("ok ", 0) == 0) {
      const std::string where = listen.substr(3);
      const auto colon = where.rfind(':');
      outcome = probe(where.substr(0, colon), std::stoi(where.substr(colon + 1)), rank, to,
                      o.connect_timeout);
    }
    store.set(key("reach", to, rank), "=" + outcome);  // '=' keeps an empty outcome non-empty
  }
  store_barrier(store, "check_probed", rank, world, o.timeout);
  server.reset();

  std::vector<NodeRecord> nodes(world);
  for (int n = 0; n < world; ++n) {
    NodeRecord& r = nodes[n];
    r.facts = parse_node_facts(store.get(key("facts", n), o.timeout));
    r.address = store.get(key("address", n), o.timeout);
    const std::string listen = store.get(key("listen", n), o.timeout);
    if (listen.rfind("ok ", 0) == 0)
      r.listen = listen.substr(3);
    else
      r.listen_error = listen;
    for (int from = 0; from < world; ++from)
      r.reached.push_back(store.get(key("reach", n, from), o.timeout).substr(1));
  }
  std::ofstream(o.report_path) << serialize_check_report(rank, perf_ports, node_check_rows(nodes));
  ws.finish(o.timeout);
  return 0;
}

}  // namespace ringgrad::comm
