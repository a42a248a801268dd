// Tests for our AVX-512 sgemm (kernels/cpu/sgemm_avx512.cpp) against a plain f64 triple loop:
// every transpose combination, sizes on both sides of each tile and block edge (8 rows, 16 and
// 48 columns, 384 products), padded leading dimensions, the packed-B path (a row stride that is
// a multiple of 512 floats), alpha and beta (beta 0 must not read C), an empty product, and
// calls from several threads at once. Skipped, and said so, on a CPU without AVX-512F.
#include <doctest/doctest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/rng.h"
#include "kernels/cpu/sgemm_avx512.h"
#include "tests/skip.h"

using namespace ringgrad;
using ringgrad::kernels::cpu::Op;

namespace {

struct Case {
  Op op_a, op_b;
  int64_t m, n, k;
  int64_t pad;  // added to every leading dimension
  int64_t ldb_override = 0;
  float alpha = 1.5f, beta = 0;
};

// Stored shape of an operand whose op() is rows x cols: transposed means stored cols x rows.
struct Matrix {
  std::vector<float> data;
  int64_t ld;
};

Matrix random_matrix(Op op, int64_t rows, int64_t cols, int64_t pad, int64_t ld_override,
                     Generator& gen) {
  const int64_t stored_rows = op == Op::none ? rows : cols;
  const int64_t stored_cols = op == Op::none ? cols : rows;
  Matrix x{{}, ld_override ? ld_override : stored_cols + pad};
  x.data.resize(stored_rows * x.ld + 1);
  for (float& v : x.data) v = static_cast<float>(gen.normal());
  return x;
}

double at(const Matrix& x, Op op, int64_t i, int64_t p) {
  return op == Op::none ? x.data[i * x.ld + p] : x.data[p * x.ld + i];
}

// Runs one case; returns "" when every entry of C is within tolerance, else what differed.
std::string run(const Case& c, uint64_t seed) {
  Generator gen(seed);
  const Matrix a = random_matrix(c.op_a, c.m, c.k, c.pad, 0, gen);
  const Matrix b = random_matrix(c.op_b, c.k, c.n, c.pad, c.ldb_override, gen);
  const int64_t ldc = c.n + c.pad;
  std::vector<float> out(c.m * ldc);
  for (float& v : out) v = c.beta == 0 ? std::numeric_limits<float>::quiet_NaN() : gen.normal();
  const std::vector<float> before = out;
  kernels::cpu::sgemm_avx512(c.op_a, c.op_b, c.m, c.n, c.k, c.alpha, a.data.data(), a.ld,
                             b.data.data(), b.ld, c.beta, out.data(), ldc);
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
        const double term = at(a, c.op_a, i, p) * at(b, c.op_b, p, j);
        want += term;
        scale += std::fabs(term);
      }
      want *= c.alpha;
      if (c.beta != 0) want += c.beta * static_cast<double>(before[i * ldc + j]);
      if (!(std::fabs(got - want) <= 1e-5 * (std::fabs(c.alpha) * scale + 1)))
        return "C(" + std::to_string(i) + ", " + std::to_string(j) + ") = " + std::to_string(got) +
               ", want " + std::to_string(want);
    }
  return "";
}

std::string describe(const Case& c) {
  return std::string(c.op_a == Op::none ? "N" : "T") + (c.op_b == Op::none ? "N" : "T") +
         " m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) +
         " pad=" + std::to_string(c.pad) + " ldb=" + std::to_string(c.ldb_override) +
         " beta=" + std::to_string(c.beta);
}

bool skip_without_avx512() {
  if (kernels::cpu::cpu_has_avx512()) return false;
  ringgrad::testing::skip_test("this CPU has no AVX-512F, so the f32 GEMMs run OpenBLAS instead");
  return true;
}

}  // namespace

TEST_CASE("sgemm_avx512 matches an f64 reference across transposes and tile edges") {
  if (skip_without_avx512()) return;
  std::vector<Case> cases;
  for (Op op_a : {Op::none, Op::transpose})
    for (Op op_b : {Op::none, Op::transpose})
      for (int64_t m : {1, 8, 13})
        for (int64_t n : {1, 16, 17, 48, 50, 100})
          for (int64_t k : {1, 16, 17, 384, 385, 900})
            cases.push_back(
                {op_a, op_b, m, n, k, (m + n + k) % 3, 0, 1.5f, (k % 2) ? 0.0f : -0.5f});
  // Rows of B 512 floats apart take the packed-B path.
  cases.push_back({Op::none, Op::none, 9, 40, 20, 0, 512, 1.0f, 1.0f});
  cases.push_back({Op::none, Op::none, 9, 512, 400, 0, 512, -1.0f, 0.0f});
  // All at once from several threads: each thread has its own packing buffers.
  std::vector<std::string> errors(cases.size());
#pragma omp parallel for num_threads(3) schedule(dynamic)
  for (size_t i = 0; i < cases.size(); ++i) errors[i] = run(cases[i], 100 + i);
  for (size_t i = 0; i < cases.size(); ++i) {
    CAPTURE(describe(cases[i]));
    CHECK(errors[i] == "");
  }
}

TEST_CASE("sgemm_avx512 with an empty product scales C by beta") {
  if (skip_without_avx512()) return;
  std::vector<float> c = {1, 2, 3, 4};
  kernels::cpu::sgemm_avx512(Op::none, Op::none, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 0.5f,
                             c.data(), 2);
  CHECK(c == std::vector<float>{0.5f, 1, 1.5f, 2});
  c.assign(4, std::numeric_limits<float>::quiet_NaN());  // beta 0: overwritten, not read
  kernels::cpu::sgemm_avx512(Op::none, Op::none, 2, 2, 0, 1.0f, nullptr, 1, nullptr, 2, 0.0f,
                             c.data(), 2);
  CHECK(c == std::vector<float>(4, 0.0f));
}
