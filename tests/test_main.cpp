// doctest's main for every suite. CTest runs one test case per process; a case that called
// skip_test (tests/skip.h) and had no failing check exits kSkipExitCode, which CTest reports as
// Skipped. A failure keeps doctest's own non-zero code.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "tests/skip.h"

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int result = context.run();
  if (context.shouldExit() || result != 0) return result;
  return ringgrad::testing::skip_requested() ? ringgrad::testing::kSkipExitCode : 0;
}
