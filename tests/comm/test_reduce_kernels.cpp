// The element-wise reductions every collective and the reducing receive use (comm/reduce_ops/).
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>

#include "comm/reduce_ops/reduce_kernels.h"

namespace ringgrad::comm {

TEST_CASE("reduce kernels: signed integer sums and products wrap around, as PyTorch's and NCCL's") {
  const int32_t big32[] = {std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min(),
                           1 << 20};
  const int32_t one32[] = {1, -1, 1 << 12};
  int32_t out32[3];
  reduce_into(out32, big32, one32, 3, DType::i32, ReduceOp::sum);
  CHECK(out32[0] == std::numeric_limits<int32_t>::min());
  CHECK(out32[1] == std::numeric_limits<int32_t>::max());
  reduce_into(out32, big32, one32, 3, DType::i32, ReduceOp::prod);
  CHECK(out32[2] == 0);  // 2^32 wraps to 0

  const int64_t big64[] = {std::numeric_limits<int64_t>::max()};
  const int64_t two64[] = {2};
  int64_t out64[1];
  reduce_into(out64, big64, two64, 1, DType::i64, ReduceOp::prod);
  CHECK(out64[0] == -2);
  reduce_into(out64, big64, two64, 1, DType::i64, ReduceOp::sum);
  CHECK(out64[0] == std::numeric_limits<int64_t>::min() + 1);
}

}  // namespace ringgrad::comm
