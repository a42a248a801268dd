// How ringgrad waits: a tuning file, off the teaching path. What to read instead: a wait is
// "make progress passes until done, and sleep in poll() when nothing moves"
// (MeshTransport::progress_until); this file says how long to keep passing before the sleep,
// and why each rung of the ladder is there. The figures behind the constants are in
// docs/measurements.md.
#pragma once
#include <sched.h>

#include <chrono>
#include <cstdint>

namespace ringgrad::comm {

using WaitClock = std::chrono::steady_clock;

// The ladder a transport wait climbs while passes move nothing, back to the bottom whenever one
// moves bytes:
//   1. spin (cpu_relax between passes), kBusyPasses passes, only when a pass is cheap (every
//      link is shared memory): bytes from a peer spinning on another core arrive within a few
//      microseconds without a system call. A pass over sockets is itself system calls, so
//      with socket links the ladder starts at 2.
//   2. yield (sched_yield between passes) for kSpin: small messages on loopback arrive within
//      microseconds, and a wake-up from poll() costs more than that. With more ranks than
//      cores the yield also hands our core to the peer we wait for, so its message comes
//      sooner (docs/measurements.md).
//   3. the clock is read only every kPassesPerClockRead passes (it is not free either).
//   4. sleep in poll() on the links' fds (and the shared-memory doorbell) until something is
//      ready or the deadline; after a wake-up, straight back to rung 2.
class WaitLadder {
 public:
  static constexpr auto kSpin = std::chrono::microseconds(200);
  static constexpr uint32_t kBusyPasses = 64;
  static constexpr uint32_t kPassesPerClockRead = 16;

  explicit WaitLadder(bool passes_are_cheap) : busy_passes_(passes_are_cheap ? kBusyPasses : 1) {}

  void moved() { idle_ = 0; }  // a pass moved bytes: back to the bottom
  // A pass moved nothing: spins or yields and returns false, or returns true when it is time
  // to sleep; then call woke() after the sleep.
  bool idle() {
    if (++idle_ < busy_passes_) {
      cpu_relax();
    } else if (idle_ == busy_passes_) {
      yield_until_ = WaitClock::now() + kSpin;
    } else if (idle_ % kPassesPerClockRead == 0 && WaitClock::now() > yield_until_) {
      return true;
    } else {
      sched_yield();
    }
    return false;
  }
  void woke() {
    idle_ = busy_passes_;
    yield_until_ = WaitClock::now();
  }

  static void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }

 private:
  uint32_t busy_passes_;
  uint32_t idle_ = 0;
  WaitClock::time_point yield_until_;  // set when the busy passes are over
};

// How long the process group's idle worker spins for the next task before it sleeps on its
// condition variable: a wake-up costs several microseconds, so a task that follows at once
// is taken sooner.
constexpr auto kWorkerSpin = std::chrono::microseconds(5);

// Spins until `ready()` or `how_long` passed.
template <class Ready>
void spin_until(Ready ready, std::chrono::microseconds how_long) {
  const auto until = WaitClock::now() + how_long;
  while (!ready() && WaitClock::now() < until) {
  }
}

}  // namespace ringgrad::comm
