// The GEMM test cases shared by the tests of our GEMM kernels (f32 AVX-512, bf16): random
// operands stored as op() says, padded leading dimensions, and the check of every entry of C
// against an f64 triple loop over the same (already rounded) values. T is the stored element
// type; to_double reads one.
#pragma once
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/rng.h"
#include "kernels/cpu/sgemm_avx512.h"

namespace ringgrad::testing {

using kernels::cpu::Op;

struct GemmCase {
  Op op_a, op_b;
  int64_t m, n, k;
  int64_t pad;  // added to every leading dimension
  int64_t ldb_override = 0;
  float alpha = 1.5f, beta = 0;
};

inline std::string describe(const GemmCase& c) {
  return std::string(c.op_a == Op::none ? "N" : "T") + (c.op_b == Op::none ? "N" : "T") +
         " m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) +
         " pad=" + std::to_string(c.pad) + " ldb=" + std::to_string(c.ldb_override) +
         " beta=" + std::to_string(c.beta);
}

// An operand whose op() is rows x cols, stored (cols x rows when transposed) with leading
// dimension ld, from normal values made representable by `round`.
template <class T>
struct GemmOperand {
  std::vector<T> data;
  int64_t ld;
  Op op;

  GemmOperand(Op o, int64_t rows, int64_t cols, int64_t pad, int64_t ld_override, Generator& gen,
              const std::function<T(float)>& round)
      : op(o) {
    const int64_t stored_rows = op == Op::none ? rows : cols;
    const int64_t stored_cols = op == Op::none ? cols : rows;
    ld = ld_override ? ld_override : stored_cols + pad;
    data.resize(stored_rows * ld + 1);
    for (T& v : data) v = round(static_cast<float>(gen.normal()));
  }
};

// Every entry of C (m x ldc after the call) against the f64 product of op(a) and op(b) read
// through to_double; padding columns must be untouched. "" when all agree within
// tolerance * (sum of |terms| + 1), else what differed.
template <class T, class ToDouble>
std::string check_gemm(const GemmCase& c, const GemmOperand<T>& a, const GemmOperand<T>& b,
                       const std::vector<float>& before, const std::vector<float>& out,
                       ToDouble to_double, double tolerance) {
  auto at = [&](const GemmOperand<T>& x, int64_t i, int64_t p) {
    return to_double(x.op == Op::none ? x.data[i * x.ld + p] : x.data[p * x.ld + i]);
  };
  const int64_t ldc = c.n + c.pad;
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      const float got = out[i * ldc + j];
      if (j >= c.n) {  // padding between rows of C is never written
        if (!(std::isnan(got) && std::isnan(before[i * ldc + j])) && got != before[i * ldc + j])
          return "wrote past column n at (" + std::to_string(i) + ", " + std::to_string(j) + ")";
        continue;
      }
      double want = 0, scale = 0;
      for (int64_t p = 0; p < c.k; ++p) {
        const double term = at(a, i, p) * at(b, p, j);
        want += term;
        scale += std::fabs(term);
      }
      want *= c.alpha;
      if (c.beta != 0) want += c.beta * static_cast<double>(before[i * ldc + j]);
      if (!(std::fabs(got - want) <= tolerance * (std::fabs(c.alpha) * scale + 1)))
        return "C(" + std::to_string(i) + ", " + std::to_string(j) + ") = " + std::to_string(got) +
               ", want " + std::to_string(want);
    }
  return "";
}

// C before the call: NaN where beta == 0 (so a read of C shows), else normal values.
inline std::vector<float> initial_c(const GemmCase& c, Generator& gen) {
  std::vector<float> out(c.m * (c.n + c.pad));
  for (float& v : out)
    v = c.beta == 0 ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(gen.normal());
  return out;
}

}  // namespace ringgrad::testing
