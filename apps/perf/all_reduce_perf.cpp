// all_reduce_perf: nccl-tests' all_reduce_perf for ringgrad (the collective is kept in
// perf_collectives.cpp).
#include "apps/perf/perf_harness.h"

int main(int argc, char** argv) {
  return ringgrad::perf::run_perf(argc, argv, ringgrad::perf::kAllReduce);
}
