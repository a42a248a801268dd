// Rendezvous over a Store. Keys: rdzv/run_id, the one job id this store serves (the first
// launcher sets it; a launcher of another job is refused at once), and under rdzv/<run_id>/:
//   generation          the job's current generation
//   g<G>/rank/<r>       claimed by one launcher's identity (compare_set: first wins)
//   g<G>/node/<r>       "<hostname>\n<local_world_size>"
//   g<G>/closed         the number of nodes N, set by node rank 0 when the round closes
//   g<G>/master         "addr:port" of worker rank 0's store
#include "comm/rendezvous/rendezvous.h"

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <random>

#include "core/error.h"
#include "core/logging.h"

namespace ringgrad::comm {

using Clock = std::chrono::steady_clock;

namespace {
// A number another launcher wrote to the store. Anything else means some other program wrote
// there (possible on a store without a token): say so rather than fail with "stoi".
int64_t stored_number(const std::string& text, const std::string& key, int64_t low, int64_t high) {
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || value < low || value > high)
    RG_THROW(Error, "rendezvous key '", key, "' holds '", text.substr(0, 32),
             "', not a number from ", low, " to ", high,
             ": is something other than ringgrad-run writing to this store? Give the job a token "
             "(--rdzv-conf token=...)");
  return value;
}
}  // namespace

Rendezvous::Rendezvous(std::shared_ptr<Store> store, RendezvousConfig config)
    : store_(std::move(store)), config_(std::move(config)) {
  RG_CHECK(config_.min_nodes >= 1 && config_.min_nodes <= config_.max_nodes,
           "rendezvous needs 1 <= min_nodes <= max_nodes, got ", config_.min_nodes, ":",
           config_.max_nodes);
  RG_CHECK(config_.node_rank < config_.max_nodes, "node rank ", config_.node_rank,
           " is not below the maximum of ", config_.max_nodes, " nodes");
  std::random_device rd;
  identity_ = str_cat(config_.hostname, ":", ::getpid(), ":", std::hex, rd());
  // A second job on the same endpoint would share the first one's store, and lose it (and
  // its workers) when the first job ends: refuse it now, while nothing has started.
  const std::string serving = store_->compare_set("rdzv/run_id", "", config_.run_id);
  if (serving != config_.run_id)
    RG_THROW(InvalidArgument, "the rendezvous store at ", config_.endpoint, " serves job '",
             serving, "', not --rdzv-id '", config_.run_id,
             "': two jobs cannot share an endpoint; give this one another --rdzv-endpoint port");
}

std::string Rendezvous::key(int64_t generation, const std::string& name) const {
  return str_cat("rdzv/", config_.run_id, "/g", generation, "/", name);
}

std::vector<std::string> Rendezvous::rank_keys(int64_t generation, int from, int to) const {
  std::vector<std::string> keys;
  for (int r = from; r < to; ++r) keys.push_back(key(generation, str_cat("rank/", r)));
  return keys;
}

Milliseconds Rendezvous::remaining() const {
  auto left = std::chrono::duration_cast<Milliseconds>(deadline_ - Clock::now());
  return left.count() > 0 ? left : Milliseconds(0);
}

int Rendezvous::claim_node_rank(int64_t generation) {
  auto claim = [&](int r) {
    return store_->compare_set(key(generation, str_cat("rank/", r)), "", identity_) == identity_;
  };
  if (config_.node_rank >= 0) {
    if (!claim(config_.node_rank)) {
      std::string holder = store_->get(key(generation, str_cat("rank/", config_.node_rank)));
      RG_THROW(Error, "node rank ", config_.node_rank, " of run '", config_.run_id,
               "' is already taken by ", holder.substr(0, holder.find(':')),
               "; give each launcher its own --node-rank");
    }
    return config_.node_rank;
  }
  for (int r = 0; r < config_.max_nodes; ++r)
    if (claim(r)) return r;
  RG_THROW(Error, "run '", config_.run_id, "' already has ", config_.max_nodes,
           " nodes (--nnodes max); this node (", config_.hostname, ") cannot join");
}

void Rendezvous::throw_timeout(int64_t generation, int expected, Milliseconds waited) {
  std::string joined, missing;
  int count = 0;
  for (int r = 0; r < expected; ++r) {
    const bool present = store_->check({key(generation, str_cat("rank/", r))});
    auto& list = present ? joined : missing;
    list += (list.empty() ? "" : ", ") + std::to_string(r);
    count += present ? 1 : 0;
  }
  RG_THROW(TimeoutError, "rendezvous of run '", config_.run_id, "' (generation ", generation,
           ") at ", config_.endpoint, " timed out after ", format_duration(waited), ": ", count,
           "/", expected, " nodes joined (node ranks joined: ", joined.empty() ? "none" : joined,
           "; missing: ", missing, ")");
}

RendezvousResult Rendezvous::join(int64_t generation) {
  deadline_ = Clock::now() + config_.timeout;
  // Move the job's generation forward to ours, or learn that we are behind it.
  const std::string gen_key = str_cat("rdzv/", config_.run_id, "/generation");
  for (std::string current = store_->compare_set(gen_key, "", std::to_string(generation));;) {
    const int64_t job_generation = stored_number(current, gen_key, 0, INT64_MAX);
    if (job_generation > generation)
      RG_THROW(Error, "stale rendezvous: this node (", config_.hostname, ") is at generation ",
               generation, " but run '", config_.run_id, "' is at generation ", job_generation,
               "; it cannot join");
    if (job_generation == generation) break;
    current = store_->compare_set(gen_key, current, std::to_string(generation));
  }
  if (store_->check({key(generation, "closed")}))
    RG_THROW(Error, "rendezvous round ", generation, " of run '", config_.run_id,
             "' closed before this node (", config_.hostname, ") joined");

  RendezvousResult result;
  result.generation = generation;
  result.node_rank = claim_node_rank(generation);
  store_->set(key(generation, str_cat("node/", result.node_rank)),
              str_cat(config_.hostname, "\n", config_.local_world_size));
  log_info("rendezvous '", config_.run_id, "' generation ", generation, ": joined as node rank ",
           result.node_rank, " at ", config_.endpoint);

  if (result.node_rank == 0) {
    try {
      store_->wait(rank_keys(generation, 0, config_.min_nodes), remaining());
    } catch (const TimeoutError&) {
      throw_timeout(generation, config_.min_nodes, config_.timeout);
    }
    int num_nodes = config_.min_nodes;
    if (config_.max_nodes > config_.min_nodes) {  // last call for late nodes
      try {
        store_->wait(rank_keys(generation, config_.min_nodes, config_.max_nodes),
                     std::min(remaining(), config_.last_call_timeout));
      } catch (const TimeoutError&) {
      }
      while (num_nodes < config_.max_nodes &&
             store_->check(rank_keys(generation, num_nodes, num_nodes + 1)))
        ++num_nodes;
    }
    store_->set(key(generation, "closed"), std::to_string(num_nodes));
  } else {
    try {
      store_->wait({key(generation, "closed")}, remaining());
    } catch (const TimeoutError&) {
      throw_timeout(generation, config_.min_nodes, config_.timeout);
    }
  }
  result.num_nodes =
      static_cast<int>(stored_number(store_->get(key(generation, "closed"), remaining()),
                                     key(generation, "closed"), 1, config_.max_nodes));
  if (result.node_rank >= result.num_nodes)
    RG_THROW(Error, "rendezvous round ", generation, " of run '", config_.run_id, "' closed with ",
             result.num_nodes, " nodes before node rank ", result.node_rank, " (", config_.hostname,
             ") was counted; it joined too late");
  for (int r = 0; r < result.num_nodes; ++r) {
    const std::string node_key = key(generation, str_cat("node/", r));
    // Written before the claim was counted, so present; the wait covers a slow writer.
    const std::string info = store_->get(node_key, remaining());
    const auto nl = info.find('\n');
    const std::string workers = nl == std::string::npos ? "" : info.substr(nl + 1);
    RendezvousNode node{info.substr(0, nl),
                        static_cast<int>(stored_number(workers, node_key, 1, 1 << 20))};
    if (r < result.node_rank) result.rank_offset += node.local_world_size;
    result.world_size += node.local_world_size;
    result.nodes.push_back(node);
  }
  return result;
}

void Rendezvous::publish_master(int64_t generation, const std::string& addr, int port) {
  store_->set(key(generation, "master"), str_cat(addr, ":", port));
}

std::pair<std::string, int> Rendezvous::wait_master(int64_t generation) {
  const std::string value = store_->get(key(generation, "master"), config_.timeout);
  const auto colon = value.rfind(':');
  const std::string port = colon == std::string::npos ? "" : value.substr(colon + 1);
  return {value.substr(0, colon),
          static_cast<int>(stored_number(port, key(generation, "master"), 1, 65535))};
}

}  // namespace ringgrad::comm
