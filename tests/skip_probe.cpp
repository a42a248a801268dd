// Test cases for tests/skip_exit_codes.sh, which runs them one at a time and checks the exit
// codes the suites' main gives CTest: a skip is 77 only when no check failed.
#include <doctest/doctest.h>

#include "tests/skip.h"

TEST_CASE("probe: passes") { CHECK(1 + 1 == 2); }

TEST_CASE("probe: skips") { ringgrad::testing::skip_test("the probe always skips"); }

TEST_CASE("probe: fails then skips") {
  CHECK(1 + 1 == 3);
  ringgrad::testing::skip_test("a failed check before this must still fail the case");
}

TEST_CASE("probe: skips then fails") {
  ringgrad::testing::skip_test("a failed check after this must still fail the case");
  CHECK(1 + 1 == 3);
}
