// Worker environment parsing and the worker store.
#include "comm/store/worker_store.h"

#include <cerrno>
#include <climits>
#include <cstdlib>

#include "core/env.h"

namespace ringgrad::comm {

namespace {

std::optional<long long> parse_int(const EnvLookup& lookup, const char* name) {
  auto v = lookup(name);
  if (!v) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v->c_str(), &end, 10);
  // Out of int's range it would wrap: RANK=4294967296 read as rank 0.
  if (end == v->c_str() || *end != '\0' || errno == ERANGE || x < INT_MIN || x > INT_MAX)
    RG_THROW(InvalidArgument, name, "='", v->substr(0, 24), "' is not an integer from ", INT_MIN,
             " to ", INT_MAX);
  return x;
}

int require_int(const EnvLookup& lookup, const char* name, const char* why) {
  auto v = parse_int(lookup, name);
  if (!v) RG_THROW(InvalidArgument, name, " is not set; ", why);
  return static_cast<int>(*v);
}

// The rank a non-torchrun launcher (mpirun, srun) gave this process, if any.
struct ForeignRank {
  const char* rank_var;
  const char* size_var;
  const char* local_rank_var;
  const char* local_size_var;
  const char* source;
};
constexpr ForeignRank kForeign[] = {
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI"},
    {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "SLURM"},
};

}  // namespace

WorkerEnv read_worker_env(const EnvLookup& lookup) {
  WorkerEnv env;
  const bool under_elastic_launcher = lookup("TORCHELASTIC_RUN_ID").has_value();
  if (auto rank = parse_int(lookup, "RANK")) {
    env.source = "RANK";
    env.rank = static_cast<int>(*rank);
    env.world_size = require_int(lookup, "WORLD_SIZE", "it must be set together with RANK");
    env.local_rank = static_cast<int>(parse_int(lookup, "LOCAL_RANK").value_or(env.rank));
    env.local_world_size =
        static_cast<int>(parse_int(lookup, "LOCAL_WORLD_SIZE").value_or(env.world_size));
    if (!under_elastic_launcher)
      for (const auto& f : kForeign)
        if (auto other = parse_int(lookup, f.rank_var); other && *other != env.rank)
          RG_THROW(InvalidArgument, "RANK=", env.rank, " disagrees with ", f.rank_var, "=", *other,
                   "; unset RANK, or start the job through one launcher only");
  } else {
    for (const auto& f : kForeign) {
      auto rank = parse_int(lookup, f.rank_var);
      if (!rank) continue;
      env.source = f.source;
      env.rank = static_cast<int>(*rank);
      env.world_size = require_int(lookup, f.size_var, "it must be set together with the rank");
      env.local_rank = static_cast<int>(parse_int(lookup, f.local_rank_var).value_or(0));
      // SLURM_NTASKS_PER_NODE may read "2(x3)"; only a plain number is used.
      auto local_size = lookup(f.local_size_var);
      char* end = nullptr;
      long long n = local_size ? std::strtoll(local_size->c_str(), &end, 10) : 0;
      env.local_world_size = local_size && *end == '\0' && n > 0 ? static_cast<int>(n) : 1;
      break;
    }
    if (env.source.empty())
      RG_THROW(InvalidArgument,
               "no rank in the environment: set RANK and WORLD_SIZE, or start under ringgrad-run, "
               "mpirun (OMPI_COMM_WORLD_RANK) or srun (SLURM_PROCID)");
  }
  if (env.world_size < 1 || env.rank < 0 || env.rank >= env.world_size)
    RG_THROW(InvalidArgument, "rank ", env.rank, " is outside world size ", env.world_size,
             " (from ", env.source, ")");
  if (env.local_rank < 0 || env.local_rank >= env.local_world_size)
    RG_THROW(InvalidArgument, "local rank ", env.local_rank, " is outside local world size ",
             env.local_world_size, " (from ", env.source, ")");
  auto addr = lookup("MASTER_ADDR");
  if (!addr) RG_THROW(InvalidArgument, "MASTER_ADDR is not set; set it to the host of rank 0");
  env.master_addr = *addr;
  env.master_port =
      require_int(lookup, "MASTER_PORT", "set it to a free port on the host of rank 0");
  if (env.master_port < 1 || env.master_port > 65535)
    RG_THROW(InvalidArgument, "MASTER_PORT=", env.master_port, " is not a TCP port (1..65535)");
  env.generation = parse_int(lookup, "TORCHELASTIC_RESTART_COUNT").value_or(-1);
  env.agent_store = lookup("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True";
  return env;
}

WorkerEnv read_worker_env() {
  return read_worker_env([](const char* name) { return env_get(name); });
}

WorkerStore create_worker_store(const WorkerEnv& env, Milliseconds timeout) {
  WorkerStore ws;
  ws.env = env;
  const std::string token = env_str("RINGGRAD_STORE_TOKEN", "");
  if (env.rank == 0 && !env.agent_store) {
    check_store_keys_for(env.world_size);
    TcpStoreServerOptions so;
    so.host = env_str("RINGGRAD_STORE_BIND_ADDR", "0.0.0.0");
    so.port = env.master_port;
    so.token = token;
    so.generation = env.generation;
    ws.server = std::make_unique<TcpStoreServer>(so);
  }
  TcpStoreOptions co;
  co.host = env.master_addr;
  co.port = env.master_port;
  co.token = token;
  co.generation = env.generation;
  co.connect_timeout = timeout;
  co.timeout = timeout;
  ws.store = std::make_shared<TcpStore>(co);
  store_barrier(*ws.store, "store_init", env.rank, env.world_size, timeout);
  return ws;
}

void WorkerStore::finish(Milliseconds timeout) {
  if (env.agent_store) return;  // the launcher hosts the store and outlives its workers
  if (env.rank != 0) {
    store->set("worker_store/finished/" + std::to_string(env.rank), "1");
    return;
  }
  std::vector<std::string> keys;
  for (int r = 1; r < env.world_size; ++r)
    keys.push_back("worker_store/finished/" + std::to_string(r));
  store->wait(keys, timeout);
}

}  // namespace ringgrad::comm
