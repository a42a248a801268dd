// MonitoredBarrier: a barrier that says which ranks did not come (PyTorch's monitored_barrier,
// which c10d offers on Gloo only). It goes through the group's store, not its connections, so
// it runs on the caller's thread beside whatever the group's worker is doing, and a missing
// rank costs no broken connection. Every rank except 0 sets "<prefix><n>/arrived/<rank>" and
// waits for "<prefix><n>/passed"; rank 0 waits for each arrival in rank order, within one
// deadline, then sets "passed" (n counts this object's barriers, so every rank of the group
// must call each one; a failed one leaves the counts out of step, as it does in c10d).
// Blocking; one caller at a time; errors in c10d's words, which PyTorch's tests match:
//   rank 0:  "Rank 2 failed to pass monitoredBarrier in 100 ms"
//            "Ranks 1, 2 failed to pass monitoredBarrier in 100 ms" (wait_all_ranks)
//            "Rank 0 timed out in monitoredBarrier after 0 ms" (no time left before a rank)
//   others:  "Rank 1 successfully reached monitoredBarrier, but received errors while waiting
//            for send/recv from rank 0 ..."
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "comm/store/store.h"

namespace ringgrad::comm {

class MonitoredBarrier {
 public:
  MonitoredBarrier(std::shared_ptr<Store> store, std::string prefix, int rank, int size);
  // Throws TimeoutError as above. With wait_all_ranks, rank 0 names every rank that had not
  // arrived by the deadline; without, the first in rank order.
  void run(Milliseconds timeout, bool wait_all_ranks);

 private:
  std::string key(uint64_t n, const std::string& what) const;

  std::shared_ptr<Store> store_;
  std::string prefix_;
  int rank_;
  int size_;
  uint64_t count_ = 0;  // barriers this rank has entered
};

}  // namespace ringgrad::comm
