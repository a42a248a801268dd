// Thread count shared by every CPU kernel, and the rule that OpenBLAS runs single-threaded.
#include <omp.h>

#include <algorithm>
#include <mutex>
#include <thread>

#include "kernels/cpu/gemm.h"
#include "kernels/ops.h"

// Note [BLAS threads]
// Our CPU kernels parallelise with OpenMP and call BLAS from inside parallel regions, one
// single-threaded GEMM per thread on disjoint data (conv2d: one per chunk of images). OpenBLAS
// is the pthread build: allowed n threads, it hands every such call to its own thread pool,
// which then fights the OpenMP team for the cores (the cost on the resnet conv shapes is in
// docs/measurements.md). So OpenBLAS is held at one thread and the n threads all belong to
// OpenMP.

namespace ringgrad::kernels {

void set_num_threads(int n) {
  if (n < 1 || n > max_num_threads())
    RG_THROW(InvalidArgument, "thread count ", n, " is outside 1 to ", max_num_threads(),
             " (4 per core of this machine)");
  omp_set_num_threads(n);
  cpu::use_single_threaded_blas();
}

int num_threads() { return omp_get_max_threads(); }

int max_num_threads() {
  return 4 * static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

namespace cpu {
void use_single_threaded_blas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}
}  // namespace cpu

}  // namespace ringgrad::kernels
