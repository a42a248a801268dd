// How a test case that cannot run here says so: it calls skip_test("why"), which prints
// "SKIPPED: <why>", and returns. The suites' main (tests/test_main.cpp) then exits with
// kSkipExitCode, CTest's SKIP_RETURN_CODE for every suite (tests/CMakeLists.txt), but only when
// no check failed: a case that fails is reported as Failed whatever it printed, and output
// (ours or a child process's) cannot turn a failure into a skip. Shell and Python tests exit
// with the same code after printing the same line.
#pragma once
#include <cstdio>
#include <string>

namespace ringgrad::testing {

constexpr int kSkipExitCode = 77;

// Set by skip_test; read by the suites' main once every selected case has run.
inline bool& skip_requested() {
  static bool requested = false;
  return requested;
}

// Use as: if (cannot_run) return skip_test("why, and what would make it run");
inline void skip_test(const std::string& reason) {
  skip_requested() = true;
  std::printf("SKIPPED: %s\n", reason.c_str());
  std::fflush(stdout);
}

}  // namespace ringgrad::testing
