// doctest's main for every suite. CTest runs one test case per process; a case that called
// skip_test (tests/skip.h) and had no failing check exits kSkipExitCode, which CTest reports as
// Skipped. A failure keeps doctest's own non-zero code. --isa=LEVEL runs the suite with the CPU
// kernels capped at LEVEL (RINGGRAD_CPU_ISA, kernels/cpu/cpu_features.h); doctest ignores the
// argument.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>

#include "tests/skip.h"

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--isa=", 6) == 0) setenv("RINGGRAD_CPU_ISA", argv[i] + 6, 1);
  doctest::Context context(argc, argv);
  const int result = context.run();
  if (context.shouldExit() || result != 0) return result;
  return ringgrad::testing::skip_requested() ? ringgrad::testing::kSkipExitCode : 0;
}
