// The drop-in promise: an unmodified PyTorch Gloo script (init_process_group from the
// environment) runs under ringgrad-run. Skips with a message when /usr/bin/python3 has no torch.
#include <doctest/doctest.h>

#include <string>

#include "tests/integration/launch_harness.h"
#include "tests/skip.h"

using namespace ringgrad::testing;
using std::chrono::seconds;

namespace {
constexpr const char* kPython = "/usr/bin/python3";

bool python_has_torch() {
  try {
    return run({kPython, "-c", "import torch.distributed"}, seconds(60)).status.ok();
  } catch (const std::exception&) {
    return false;
  }
}
}  // namespace

TEST_CASE("ringgrad-run launches a PyTorch Gloo all-reduce unchanged") {
  if (!python_has_torch()) {
    return skip_test(std::string(kPython) +
                     " cannot import torch.distributed (Debian: python3-torch)");
  }
  auto r = run(launcher({"--standalone", "--nproc-per-node", "2", kPython, GLOO_SCRIPT_PATH}),
               seconds(120));
  REQUIRE_MESSAGE(r.status.ok(), r.err);
  // sum over ranks r of (i + 1000 r) = 2 i + 1000 for two ranks
  const std::string expected = "allreduce 1000.0 1002.0 1004.0 1006.0 1008.0";
  CHECK(r.out.find("rank 0 of 2 " + expected) != std::string::npos);
  CHECK(r.out.find("rank 1 of 2 " + expected) != std::string::npos);
}
