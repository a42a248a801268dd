// The launcher agent loop: store -> rendezvous -> workers -> monitor -> teardown/restart.
#include "comm/launcher/launcher.h"

#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <map>
#include <optional>
#include <thread>

#include "comm/launcher/job_status.h"
#include "comm/launcher/network_probe.h"
#include "comm/launcher/signal_watcher.h"
#include "comm/launcher/worker_group.h"
#include "comm/launcher/worker_specs.h"
#include "comm/rendezvous/rendezvous.h"
#include "comm/store/tcp_store.h"
#include "comm/store/tcp_store_server.h"
#include "core/env.h"
#include "core/hostname.h"
#include "core/logging.h"

extern char** environ;

namespace ringgrad::comm {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kHeartbeatPeriod{1'000};
constexpr milliseconds kLeaveTimeout{10'000};
constexpr milliseconds kJoinAttempt{2'000};  // joining a store on this host, before hosting again

// The launchers' store: hosted here (static node rank 0, or the c10d endpoint is this host
// and no other launcher here hosts it yet) or joined as a client.
struct LauncherStore {
  std::unique_ptr<TcpStoreServer> server;
  std::shared_ptr<TcpStore> client;
  std::string endpoint;
};

// The store's server for this launcher, listening where the nodes reach `host`.
std::unique_ptr<TcpStoreServer> host_store(const LaunchConfig& c, const std::string& host, int port,
                                           const std::string& token) {
  // Listening where nobody connects would show only as a connect timeout a minute later.
  if (!c.bind_addr.empty() && c.bind_addr != "0.0.0.0" && !resolves_to(host, c.bind_addr))
    RG_THROW(InvalidArgument, "--rdzv-conf bind_addr=", c.bind_addr,
             ": the store would listen on that address only, but the nodes (this one too) reach "
             "it at ",
             host, ", which is not that address; give bind_addr=<the address of ", host,
             ">, or 0.0.0.0");
  TcpStoreServerOptions so;
  so.host = !c.bind_addr.empty() ? c.bind_addr : is_loopback_host(host) ? "127.0.0.1" : "0.0.0.0";
  so.port = port;
  so.token = token;
  return std::make_unique<TcpStoreServer>(so);
}

// c10d with the endpoint on this host: every launcher here tries to host the store, and the
// others join it. Where the port is taken and yet nobody answers there (a CI run saw a launcher
// refused for its whole minute), the launcher tries to host again rather than wait on nobody,
// until the connect timeout. `co` is the client's options for the endpoint.
LauncherStore host_or_join(const LaunchConfig& c, const TcpStoreOptions& co) {
  const auto deadline = Clock::now() + c.connect_timeout;
  LauncherStore s;
  for (;;) {
    try {
      s.server = host_store(c, co.host, co.port, co.token);
      return s;
    } catch (const AddressInUseError&) {  // another launcher here listens: join it
    }
    TcpStoreOptions join = co;
    join.connect_timeout = std::min<milliseconds>(kJoinAttempt, c.connect_timeout);
    try {
      s.client = std::make_shared<TcpStore>(join);
      return s;
    } catch (const TimeoutError&) {
      if (Clock::now() >= deadline)
        RG_THROW(TimeoutError, "could neither host nor join the store at ", co.host, ":", co.port,
                 " within ", format_duration(c.connect_timeout),
                 ": the port is taken on this host, and no store answers there; is another "
                 "program holding it? Choose another port in --rdzv-endpoint");
    }
  }
}

LauncherStore open_launcher_store(const LaunchConfig& c, const std::string& token) {
  const bool is_static = c.rdzv_backend == "static";
  const std::string host = is_static ? c.master_addr : c.rdzv_host;
  const int port = is_static ? c.master_port : c.rdzv_port;
  TcpStoreOptions co;
  co.host = host;
  co.port = port;
  co.token = token;
  co.connect_timeout = c.connect_timeout;
  co.timeout = c.rdzv_timeout;
  LauncherStore s;
  if (is_static && c.node_rank == 0) s.server = host_store(c, host, port, token);
  if (!is_static && is_local_host(host)) s = host_or_join(c, co);
  if (s.server) {
    if (is_loopback_host(host)) co.host = "127.0.0.1";
    co.port = s.server->port();
    log_info("rendezvous store listening on ", s.server->address());
  }
  if (!s.client) s.client = std::make_shared<TcpStore>(co);
  s.endpoint = str_cat(host, ":", co.port);
  return s;
}

std::map<std::string, std::string> current_environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string entry = *e;
    auto eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return env;
}

struct Outcome {
  bool succeeded = false;
  JobEvent event;  // when !succeeded
};

// Runs one generation's workers until they all succeed on every node or something ends it.
Outcome supervise(const LaunchConfig& c, const Placement& p, JobStatus& status,
                  SignalWatcher& signals, const std::string& hostname,
                  std::vector<WorkerSpec> specs) {
  JobEvent mine;
  mine.node_rank = p.round.node_rank;
  mine.hostname = hostname;
  WorkerGroup group(std::move(specs), c.stopped_timeout);
  auto finish = [&](JobEvent e, int stop_signal) {
    group.stop(stop_signal, c.stop_grace);
    return Outcome{false, std::move(e)};
  };
  bool marked_succeeded = false;
  auto next_store_check = Clock::now();
  auto next_beat = Clock::now();
  try {
    for (;;) {
      const auto state = group.poll(c.monitor_interval, signals.wake_fd());
      signals.drain();
      if (const int sig = signals.stop_signal()) {
        mine.kind = JobEvent::Kind::stopped;
        mine.signal = sig;
        log_warn("received ", signal_name(sig), ": stopping the workers and the job");
        group.stop(sig, c.stop_grace);  // forwarded as received, then SIGKILL after the grace
        try {
          status.report(mine);      // the other nodes stop too
        } catch (const IoError&) {  // no store left to tell: this node stops all the same
        }
        return Outcome{false, mine};
      }
      if (state == WorkerGroup::State::failed) {
        mine.kind = JobEvent::Kind::worker_failed;
        mine.failure = *group.first_failure();
        return finish(status.report(mine), SIGTERM);
      }
      if (Clock::now() < next_store_check && state != WorkerGroup::State::succeeded) continue;
      next_store_check = Clock::now() + c.monitor_interval;
      if (auto event = status.event()) return finish(*event, SIGTERM);
      if (state == WorkerGroup::State::succeeded) {
        if (!marked_succeeded) status.mark_succeeded();
        marked_succeeded = true;
        if (status.all_succeeded()) return Outcome{true, {}};
      }
      if (Clock::now() >= next_beat) {
        next_beat = Clock::now() + std::min(kHeartbeatPeriod, c.keep_alive_timeout / 4);
        if (auto silent = status.beat_and_find_silent(c.keep_alive_timeout)) {
          JobEvent lost;
          lost.kind = JobEvent::Kind::node_lost;
          lost.node_rank = *silent;
          lost.hostname = p.round.nodes[*silent].hostname;
          lost.detail =
              str_cat("its launcher sent no heartbeat for ", format_duration(c.keep_alive_timeout));
          return finish(status.report(lost), SIGTERM);
        }
      }
    }
  } catch (const IoError& e) {  // the store host is gone: nobody can coordinate any more
    JobEvent lost;
    lost.kind = JobEvent::Kind::node_lost;
    lost.node_rank = -1;  // the store's host, whichever node that was
    lost.detail = user_message(e);
    return finish(lost, SIGTERM);
  }
}

// Under `--hostfile` this launcher runs at the end of an SSH session whose stdin nobody writes:
// end-of-file there means the session is gone (the front end stopped it, or died), and SSH
// without a terminal sends no SIGHUP, so we raise it ourselves. It takes the signal path:
// workers stopped, the other nodes told.
void raise_sighup_at_stdin_eof() {
  std::thread([] {
    char buf[256];
    for (;;) {
      const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
      if (n == 0 || (n < 0 && errno != EINTR)) break;
    }
    ::kill(::getpid(), SIGHUP);
  }).detach();
}

}  // namespace

int run_launcher(const LaunchConfig& c) {
  const WorkerCommand command = resolve_worker_command(
      c.invocation, c.convention, c.use_env, c.command,
      env_str("PATH", "/usr/local/bin:/usr/bin:/bin"), env_str("PYTHON_EXEC", ""));
  const std::vector<int> stop_signals = parse_signal_list(c.signals_to_handle);
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);  // orphaned grandchildren come to us to be reaped
  // A shell starts a background job with SIGINT ignored; until the workers run (the signal
  // watcher takes over then) SIGINT and SIGTERM must end the launcher, wherever it was started.
  // SIGHUP keeps what it inherited, so that nohup still works.
  ::signal(SIGINT, SIG_DFL);
  ::signal(SIGTERM, SIG_DFL);
  if (c.stop_on_stdin_eof) raise_sighup_at_stdin_eof();
  const std::string token = c.token.empty() ? env_str("RINGGRAD_STORE_TOKEN", "") : c.token;
  const std::string this_host = hostname();
  // Every worker of the job writes to this store (Note [One store per job]).
  check_store_keys_for(c.nproc_per_node * c.max_nodes);
  LauncherStore store = open_launcher_store(c, token);

  RendezvousConfig rc;
  rc.run_id = c.rdzv_id;
  rc.min_nodes = c.min_nodes;
  rc.max_nodes = c.max_nodes;
  rc.node_rank = c.node_rank;
  rc.local_world_size = c.nproc_per_node;
  rc.hostname = this_host;
  rc.timeout = c.rdzv_timeout;
  rc.last_call_timeout = c.last_call_timeout;
  rc.endpoint = store.endpoint;
  Rendezvous rdzv(store.client, rc);

  const auto base_env = current_environment();
  if (c.virtual_local_rank)  // a GPU list too short is an error now, not after the rendezvous
    for (int local = 0; local < c.nproc_per_node; ++local) visible_device(local, base_env);
  const RunFolder run_folder(c.log_run_folder);
  if (!base_env.count("OMP_NUM_THREADS") && c.nproc_per_node > 1)
    log_warn("OMP_NUM_THREADS is not set: setting it to 1 for every worker so ", c.nproc_per_node,
             " workers do not oversubscribe the CPUs; set it yourself to tune");

  for (int64_t generation = 0;; ++generation) {
    Placement p;
    p.round = rdzv.join(generation);
    if (store.server) {  // the workers' port of this generation, closed when they are done
      p.master_addr = c.local_addr.empty() ? store.client->local_ip() : c.local_addr;
      p.master_port = store.server->open_worker_listener(generation);
      rdzv.publish_master(generation, p.master_addr, p.master_port);
    } else {
      std::tie(p.master_addr, p.master_port) = rdzv.wait_master(generation);
    }
    log_info("node rank ", p.round.node_rank, "/", p.round.num_nodes, " (generation ", generation,
             "): starting ranks ", p.round.rank_offset, "..",
             p.round.rank_offset + c.nproc_per_node - 1, " of ", p.round.world_size,
             ", MASTER_ADDR=", p.master_addr, " MASTER_PORT=", p.master_port);
    JobStatus status(store.client, c.rdzv_id, generation, p.round.num_nodes, p.round.node_rank);
    // Watched only while workers run: before that a SIGINT/SIGTERM simply ends the launcher,
    // even inside a rendezvous wait, as there is nothing to forward it to.
    SignalWatcher signals(stop_signals);
    Outcome outcome = supervise(c, p, status, signals, this_host,
                                worker_specs(c, command, run_folder.path(), p, base_env));
    if (store.server) store.server->close_worker_listener(generation);
    // After a lost node nobody would answer: the store's host need not wait for the others.
    const bool hosts_store = store.server != nullptr &&
                             (outcome.succeeded || outcome.event.kind != JobEvent::Kind::node_lost);
    auto leave = [&] {
      try {
        status.leave_and_wait(kLeaveTimeout, hosts_store);
      } catch (const IoError&) {  // the store is already gone: nothing left to tell anyone
      }
    };
    if (outcome.succeeded) {
      leave();
      log_info("all ", p.round.world_size, " workers succeeded");
      return 0;
    }
    const JobEvent& e = outcome.event;
    if (e.restartable(c.min_nodes < c.max_nodes) && generation < c.max_restarts) {
      const std::string what =
          e.kind == JobEvent::Kind::node_lost
              ? str_cat("node ", e.node_rank, " was lost (", e.detail, ")")
              : str_cat("rank ", e.failure.global_rank, " on node ", e.node_rank, " failed with ",
                        e.failure.status.describe());
      log_warn(what, "; restarting all workers (restart ", generation + 1, " of ", c.max_restarts,
               ")");
      continue;
    }
    std::fputs(format_summary(e, generation, static_cast<int>(generation)).c_str(), stderr);
    leave();
    return e.kind == JobEvent::Kind::stopped ? 128 + e.signal : 1;
  }
}

}  // namespace ringgrad::comm
