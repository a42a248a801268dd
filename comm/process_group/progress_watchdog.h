// ProgressWatchdog: names the rank a collective is waiting for, long before the collective
// timeout (as PyTorch's desync report does). Every rank of a group publishes its progress in the
// store once a second, "<collectives entered> <beat>", under "<prefix><rank>"; a rank that has
// waited in collective #N for `report_after` reads every other rank's and logs, once for that
// collective, which have not entered #N yet and whether each is still beating (it runs, but has
// not reached the collective: hung or busy in its own code) or has stopped (frozen, or gone).
// The collective itself still fails only at its timeout; under ringgrad-run a stopped worker
// ends the job sooner (--stopped-timeout).
// Thread: entered()/left() from whichever thread runs the group's collectives; the watchdog's
// own thread does the store traffic. The destructor stops that thread.
#pragma once
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/process_group/fingerprint.h"
#include "comm/store/store.h"

namespace ringgrad::comm {

// RINGGRAD_WATCHDOG_S: seconds a collective waits before the watchdog reports who it waits for
// (default 30; 0 turns the watchdog off). Throws InvalidArgument for anything else.
Milliseconds watchdog_report_after();

// What one rank's published progress says, as another rank saw it.
struct PeerProgress {
  int rank = 0;
  uint64_t entered = 0;        // collectives it has entered
  Milliseconds silent_for{0};  // since its beat last changed (seen here); a few s: silent
};

// The report for a rank waiting `waited` in `waiting_in` (its description, from describe()) of
// sequence number `seq`: one sentence naming every peer that has not entered it, or "" when all
// have (then the wait is for data, not for a late rank).
std::string describe_late_ranks(const std::string& waiting_in, uint64_t seq, Milliseconds waited,
                                const std::vector<PeerProgress>& peers);

class ProgressWatchdog {
 public:
  ProgressWatchdog(std::shared_ptr<Store> store, std::string prefix, int rank, int world,
                   Milliseconds report_after);
  ~ProgressWatchdog();
  ProgressWatchdog(const ProgressWatchdog&) = delete;
  ProgressWatchdog& operator=(const ProgressWatchdog&) = delete;

  void entered(const Fingerprint& collective);
  void left();

  // The reports logged so far (for tests).
  std::vector<std::string> reports() const;

 private:
  void loop();
  void beat();
  void report_if_late();
  std::vector<PeerProgress> read_peers();

  std::shared_ptr<Store> store_;
  std::string prefix_;
  int rank_, world_;
  Milliseconds report_after_;

  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  bool inside_ = false;  // in a collective now
  Fingerprint current_;  // the collective entered last
  uint64_t entered_ = 0;
  std::chrono::steady_clock::time_point since_;  // when it was entered
  uint64_t reported_seq_ = ~uint64_t{0};         // the collective reported on last
  std::vector<std::string> reports_;

  // Watchdog thread only: each peer's last beat seen and when it changed (here: clocks of
  // different hosts need not agree).
  struct Seen {
    std::string beat;
    std::chrono::steady_clock::time_point changed;
  };
  std::map<int, Seen> seen_;
  uint64_t beats_ = 0;
  std::thread thread_;
};

}  // namespace ringgrad::comm
