// Thread count shared by OpenMP loops and OpenBLAS.
#include <omp.h>

#include "kernels/ops.h"

extern "C" void openblas_set_num_threads(int);

namespace ringgrad::kernels {

void set_num_threads(int n) {
  RG_CHECK_GE(n, 1, "thread count");
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int num_threads() { return omp_get_max_threads(); }

}  // namespace ringgrad::kernels
