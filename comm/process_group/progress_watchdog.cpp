// ProgressWatchdog: the beat, the peers' progress as this rank sees it, and the report.
#include "comm/process_group/progress_watchdog.h"

#include <cstdlib>

#include "core/env.h"
#include "core/error.h"
#include "core/logging.h"

namespace ringgrad::comm {

namespace {
using Clock = std::chrono::steady_clock;
constexpr Milliseconds kBeatPeriod{1'000};
// A peer whose beat has not changed for this long is silent: frozen, or gone.
constexpr Milliseconds kSilentAfter{3 * kBeatPeriod};
// A peer's progress is read for at most this long (the store is local or near).
constexpr Milliseconds kReadTimeout{2'000};
constexpr Milliseconds kDefaultReportAfter{30'000};

std::string last_collective(uint64_t entered) {
  return entered == 0 ? "no collective yet" : str_cat("its last collective #", entered - 1);
}
}  // namespace

Milliseconds watchdog_report_after() {
  const double seconds = env_double("RINGGRAD_WATCHDOG_S", -1);
  if (seconds < 0 && !env_get("RINGGRAD_WATCHDOG_S")) return kDefaultReportAfter;
  if (!(seconds >= 0) || seconds > 1e7)
    RG_THROW(InvalidArgument, "RINGGRAD_WATCHDOG_S=", env_str("RINGGRAD_WATCHDOG_S", ""),
             " must be a number of seconds from 0 (no watchdog) to 10000000 (default 30)");
  return Milliseconds(static_cast<int64_t>(seconds * 1000));
}

std::string describe_late_ranks(const std::string& waiting_in, uint64_t seq, Milliseconds waited,
                                const std::vector<PeerProgress>& peers) {
  std::string late;
  for (const auto& p : peers) {
    if (p.entered > seq) continue;  // it has entered this collective
    const std::string state =
        p.silent_for < kSilentAfter
            ? std::string("alive: busy or stuck outside the collectives")
            : str_cat("silent for ", format_duration(p.silent_for), ": frozen or gone");
    late += str_cat(late.empty() ? "" : ", ", "rank ", p.rank, " (", last_collective(p.entered),
                    "; ", state, ")");
  }
  if (late.empty()) return "";
  const auto whole_seconds = std::chrono::duration_cast<std::chrono::seconds>(waited);
  return str_cat("watchdog: ", waiting_in, " has waited ", format_duration(whole_seconds), " for ",
                 late, "; it fails at the collective timeout unless they arrive");
}

ProgressWatchdog::ProgressWatchdog(std::shared_ptr<Store> store, std::string prefix, int rank,
                                   int world, Milliseconds report_after)
    : store_(std::move(store)),
      prefix_(std::move(prefix)),
      rank_(rank),
      world_(world),
      report_after_(report_after) {
  thread_ = std::thread([this] { loop(); });
}

ProgressWatchdog::~ProgressWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void ProgressWatchdog::entered(const Fingerprint& collective) {
  std::lock_guard<std::mutex> lock(mu_);
  inside_ = true;
  current_ = collective;
  entered_ = collective.seq + 1;
  since_ = Clock::now();
}

void ProgressWatchdog::left() {
  std::lock_guard<std::mutex> lock(mu_);
  inside_ = false;
}

std::vector<std::string> ProgressWatchdog::reports() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reports_;
}

void ProgressWatchdog::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    lock.unlock();
    try {
      beat();
      report_if_late();
    } catch (const std::exception& e) {
      // The store is gone or slow: the collective's own error will say what happened.
      log_debug("watchdog: ", e.what());
    }
    lock.lock();
    wake_.wait_for(lock, kBeatPeriod, [&] { return stopping_; });
  }
}

void ProgressWatchdog::beat() {
  uint64_t entered;
  {
    std::lock_guard<std::mutex> lock(mu_);
    entered = entered_;
  }
  store_->set(prefix_ + std::to_string(rank_), str_cat(entered, " ", ++beats_));
}

// From 6 s before the report on, the peers are read every beat, so that by the report each
// peer's beat has been seen to change, or not, for twice the time that makes it silent.
void ProgressWatchdog::report_if_late() {
  Fingerprint waiting_in;
  Milliseconds waited;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!inside_ || current_.seq == reported_seq_) return;
    waiting_in = current_;
    waited = std::chrono::duration_cast<Milliseconds>(Clock::now() - since_);
  }
  if (waited < report_after_ - 2 * kSilentAfter) return;
  const auto peers = read_peers();
  if (waited < report_after_) return;
  const std::string report =
      describe_late_ranks(describe(waiting_in), waiting_in.seq, waited, peers);
  {
    std::lock_guard<std::mutex> lock(mu_);
    reported_seq_ = waiting_in.seq;
    if (!report.empty()) reports_.push_back(report);
  }
  if (!report.empty()) log_warn(report);
}

std::vector<PeerProgress> ProgressWatchdog::read_peers() {
  std::vector<PeerProgress> peers;
  const auto now = Clock::now();
  for (int r = 0; r < world_; ++r) {
    if (r == rank_) continue;
    PeerProgress p;
    p.rank = r;
    const std::string key = prefix_ + std::to_string(r);
    const std::string value = store_->check({key}) ? store_->get(key, kReadTimeout) : "";
    const auto space = value.find(' ');
    p.entered = std::strtoull(value.c_str(), nullptr, 10);
    const std::string beat = space == std::string::npos ? "" : value.substr(space + 1);
    auto [seen, first] = seen_.try_emplace(r, Seen{beat, now});
    if (!first && seen->second.beat != beat) seen->second = Seen{beat, now};
    p.silent_for = std::chrono::duration_cast<Milliseconds>(now - seen->second.changed);
    peers.push_back(p);
  }
  return peers;
}

}  // namespace ringgrad::comm
