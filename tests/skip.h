// How a test case that cannot run here says so: it prints "SKIPPED: <reason>" and returns.
// Every doctest suite has that text as its CTest SKIP_REGULAR_EXPRESSION (tests/CMakeLists.txt),
// so CTest reports the case as Skipped with the reason in its output, never as Passed. The
// reason is printed directly rather than with doctest's MESSAGE, which a passing case need not
// show. Shell tests say the same with "SKIPPED: <reason>" and exit 77 (SKIP_RETURN_CODE).
#pragma once
#include <cstdio>
#include <string>

namespace ringgrad::testing {

// Use as: if (cannot_run) return skip_test("why, and what would make it run");
inline void skip_test(const std::string& reason) {
  std::printf("SKIPPED: %s\n", reason.c_str());
  std::fflush(stdout);
}

}  // namespace ringgrad::testing
