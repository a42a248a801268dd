// ReduceOp: how a reducing collective combines the ranks' elements (c10d's ReduceOp). avg is
// a sum divided by the world size once, at the end.
#pragma once
#include <cstdint>

namespace ringgrad::comm {

enum class ReduceOp : uint8_t { sum, avg, prod, min, max };

inline const char* reduce_op_name(ReduceOp op) {  // "sum", "avg", ...
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::prod: return "prod";
    case ReduceOp::min: return "min";
    case ReduceOp::max: return "max";
  }
  return "?";
}

}  // namespace ringgrad::comm
