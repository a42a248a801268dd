// Element-wise reductions for the collectives (comm/collectives/) and the transports' reducing
// receive (Transport::recv_reduce): dst = a (op) b over `count` elements of any DType. f16 and
// bf16 are reduced in float and rounded back once per step.
// Plain loops over contiguous arrays so -O3 -march=x86-64-v3 vectorises them (AVX2).
#pragma once
#include <cstddef>
#include <cstdint>

#include "comm/reduce_ops/reduce_op.h"
#include "core/dtype.h"

namespace ringgrad::comm {

// dst[i] = a[i] op b[i]; dst may alias a or b. avg combines as sum (see divide_by).
// The operation is commutative bit for bit (a op b == b op a), which recursive doubling relies
// on (its two partners combine the same pair in opposite orders).
void reduce_into(void* dst, const void* a, const void* b, size_t count, DType dtype, ReduceOp op);

// data[i] /= divisor: the last step of avg (integer types divide with truncation).
void divide_by(void* data, size_t count, DType dtype, int divisor);

}  // namespace ringgrad::comm
