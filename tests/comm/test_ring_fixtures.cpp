// The ring suites' test inputs (ring_fixtures.h) keep the two promises the sweeps rely on: any
// order of reduction is exact in every dtype, so every rank's result can be compared bit for
// bit; and the values never repeat with a period, so a block landing at a wrong offset shows.
#include <doctest/doctest.h>

#include <cmath>

#include "tests/comm/ring_fixtures.h"

namespace ringgrad::comm::testing {
namespace {

constexpr DType kAllDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                                DType::i32, DType::i64, DType::u8};
constexpr ReduceOp kExactOps[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max};
constexpr int kMostRanks = 8;  // the widest world any suite sweeps is 5; 8 leaves room

// Whether `dtype` stores `value` exactly.
bool exact_in(DType dtype, double value) {
  Tensor t = Tensor::zeros({1}, dtype);
  t.set_element(0, value);
  return t.element(0) == value;
}

TEST_CASE(
    "ring fixtures: every partial reduction of up to 8 ranks' inputs is exact in every dtype") {
  for (DType dtype : kAllDTypes)
    for (ReduceOp op : kExactOps)
      for (int64_t i = 0; i < 4096; ++i) {
        // The largest magnitude any subset of the ranks, in any order, can reach: the sum or
        // product of the magnitudes. Exact there means exact for every partial result.
        double bound = op == ReduceOp::prod ? 1 : 0;
        for (int r = 0; r < kMostRanks; ++r) {
          const double v = input_value(op, dtype, r, i);
          if (!exact_in(dtype, v))
            FAIL(std::string(dtype_name(dtype)), " rank ", r, " element ", i, ": ", v);
          if (op == ReduceOp::prod)
            bound *= std::fabs(v);
          else
            bound += std::fabs(v);
        }
        if (op != ReduceOp::sum && op != ReduceOp::prod) continue;
        const bool signed_too = dtype != DType::u8;  // u8's inputs are never negative
        if (!exact_in(dtype, bound) || (signed_too && !exact_in(dtype, -bound)))
          FAIL(std::string(dtype_name(dtype)), " element ", i, ": a partial result of up to ",
               bound, " is not exact");
      }
}

TEST_CASE("ring fixtures: no shift of the inputs by up to 2^20 elements matches them") {
  // 2^20 elements is more than a pipeline segment (256 KiB, so 2^18 u8 elements) or a chunk
  // of any sweep's count. Over a window of 64 values, drawn from 11 (sum) or 4 (prod), a
  // match by chance has odds below 4^-64: a match means a period.
  constexpr int64_t kWindow = 64;
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::prod})
    for (int64_t shift = 1; shift <= int64_t{1} << 20; ++shift) {
      bool differs = false;
      for (int64_t i = 0; i < kWindow && !differs; ++i)
        differs = input_value(op, DType::f32, 0, i) != input_value(op, DType::f32, 0, i + shift);
      if (!differs)
        FAIL("the inputs for ", std::string(reduce_op_name(op)), " repeat after ", shift);
    }
}

}  // namespace
}  // namespace ringgrad::comm::testing
