// ProgressWatchdog (comm/process_group/progress_watchdog.h): the report's wording, and
// watchdogs of several ranks on one store naming the rank one of them waits for, alive or
// silent. The whole path through ringgrad-run is in tests/integration/test_launcher.cpp.
#include <doctest/doctest.h>

#include <thread>

#include "comm/process_group/progress_watchdog.h"
#include "comm/store/hash_store.h"

namespace ringgrad::comm {

namespace {
// Polls every 50 ms, for at most 20 s, until `ready` holds.
template <class Ready>
bool within_20s(Ready ready) {
  for (int i = 0; i < 400 && !ready(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return ready();
}

Fingerprint allreduce(uint64_t seq) {
  return make_fingerprint(CollectiveKind::allreduce, seq, DType::f32, 12);
}
}  // namespace

TEST_CASE("watchdog report: names the ranks that have not entered, alive or silent") {
  const std::vector<PeerProgress> peers = {
      {1, 6, Milliseconds(0)}, {2, 5, Milliseconds(500)}, {3, 2, Milliseconds(12'000)}};
  CHECK(describe_late_ranks("allreduce #1", 1, Milliseconds(30'000), peers) == "");  // all in
  CHECK(describe_late_ranks("allreduce #5 (sum, float32, 12 elements)", 5, Milliseconds(30'000),
                            peers) ==
        "watchdog: allreduce #5 (sum, float32, 12 elements) has waited 30 s for rank 2 (its last "
        "collective #4; alive: busy or stuck outside the collectives), rank 3 (its last "
        "collective #1; silent for 12 s: frozen or gone); it fails at the collective timeout "
        "unless they arrive");
  CHECK(describe_late_ranks("barrier #0", 0, Milliseconds(2000), {{1, 0, Milliseconds(0)}})
            .find("rank 1 (no collective yet; alive") != std::string::npos);
}

TEST_CASE("watchdog: ranks waiting in a collective name the late ranks, alive and silent") {
  auto store = std::make_shared<HashStore>();
  // Silence needs a few beats (1 s each) seen unchanged before the report.
  const Milliseconds after(6000);
  ProgressWatchdog waiting(store, "p/", 0, 4, after), also_waiting(store, "p/", 1, 4, after),
      busy(store, "p/", 2, 4, after);
  auto frozen = std::make_unique<ProgressWatchdog>(store, "p/", 3, 4, after);
  frozen->entered(allreduce(2));
  frozen->left();
  REQUIRE(
      within_20s([&] { return store->check({"p/3"}) && store->get("p/3").rfind("3 ", 0) == 0; }));
  frozen.reset();              // it stops beating, as a stopped process would
  busy.entered(allreduce(3));  // still in its own code after #3
  busy.left();
  also_waiting.entered(allreduce(4));
  waiting.entered(allreduce(4));
  REQUIRE(within_20s([&] { return !waiting.reports().empty(); }));
  const std::string report = waiting.reports().front();
  CHECK(report.find("watchdog: allreduce #4 (sum, float32, 12 elements) has waited") == 0);
  CHECK(report.find("rank 1") == std::string::npos);  // it has entered #4
  CHECK(report.find("rank 2 (its last collective #3; alive") != std::string::npos);
  CHECK(report.find("rank 3 (its last collective #2; silent for") != std::string::npos);
  REQUIRE(within_20s([&] { return !also_waiting.reports().empty(); }));
  CHECK(also_waiting.reports().front().find("rank 2 (its last collective #3; alive") !=
        std::string::npos);
  CHECK(busy.reports().empty());         // not in a collective: nothing to say
  CHECK(waiting.reports().size() == 1);  // once per collective
}

}  // namespace ringgrad::comm
