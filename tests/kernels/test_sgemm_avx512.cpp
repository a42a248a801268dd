// Tests for our AVX-512 sgemm (kernels/cpu/sgemm_avx512.cpp) against a plain f64 triple loop:
// every transpose combination, sizes on both sides of each tile edge (8 rows, 16 and 48
// columns) and depths of one to five depth blocks, split unevenly (384, 385 and 900 products:
// the block is taken from the L1's size), padded leading dimensions, the packed-B path (a row
// stride that is a multiple of 512 floats), alpha and beta (beta 0 must not read C), an empty
// product, and calls from several threads at once. Skipped, and said so, on a CPU without AVX-512F.
#include <doctest/doctest.h>
#include <omp.h>

#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/sgemm_avx512.h"
#include "tests/kernels/gemm_cases.h"
#include "tests/skip.h"

using namespace ringgrad;
using ringgrad::kernels::cpu::Op;

namespace {

using testing::GemmCase;
using testing::GemmOperand;

// Runs one case; returns "" when every entry of C is within tolerance, else what differed.
std::string run(const GemmCase& c, uint64_t seed, bool prepacked = false) {
  Generator gen(seed);
  auto exact = [](float v) { return v; };
  const GemmOperand<float> a(c.op_a, c.m, c.k, c.pad, 0, gen, exact);
  const GemmOperand<float> b(c.op_b, c.k, c.n, c.pad, c.ldb_override, gen, exact);
  std::vector<float> out = testing::initial_c(c, gen);
  const std::vector<float> before = out;
  if (prepacked) {  // alpha 1: the prepacked form does not scale
    const kernels::cpu::PackedSgemmA packed(c.op_a, a.data.data(), a.ld, c.m, c.k);
    kernels::cpu::sgemm_avx512(packed, c.op_b, c.n, b.data.data(), b.ld, c.beta, out.data(),
                               c.n + c.pad);
  } else {
    kernels::cpu::sgemm_avx512(c.op_a, c.op_b, c.m, c.n, c.k, c.alpha, a.data.data(), a.ld,
                               b.data.data(), b.ld, c.beta, out.data(), c.n + c.pad);
  }
  return testing::check_gemm(
      c, a, b, before, out, [](float v) { return double{v}; }, 1e-5);
}

bool skip_without_avx512() {
  if (kernels::cpu::cpu_has_avx512()) return false;
  ringgrad::testing::skip_test("this CPU has no AVX-512F, so the f32 GEMMs run OpenBLAS instead");
  return true;
}

}  // namespace

TEST_CASE("sgemm_avx512 matches an f64 reference across transposes and tile edges") {
  if (skip_without_avx512()) return;
  std::vector<GemmCase> cases;
  for (Op op_a : {Op::none, Op::transpose})
    for (Op op_b : {Op::none, Op::transpose})
      for (int64_t m : {1, 8, 13})
        for (int64_t n : {1, 16, 17, 48, 50, 100})
          for (int64_t k : {1, 16, 17, 384, 385, 900})
            cases.push_back(
                {op_a, op_b, m, n, k, (m + n + k) % 3, 0, 1.5f, (k % 2) ? 0.0f : -0.5f});
  // A B^T with enough rows of A transposes B into strips (16 x 16 blocks, ragged at the edges).
  for (int64_t m : {32, 37, 70})
    for (int64_t n : {96, 100, 131})
      for (int64_t k : {1, 16, 17, 385})
        cases.push_back(
            {Op::none, Op::transpose, m, n, k, (n + k) % 3, 0, 1.0f, k == 17 ? 1.0f : 0.0f});
  // Rows of B 512 floats apart take the packed-B path.
  cases.push_back({Op::none, Op::none, 9, 40, 20, 0, 512, 1.0f, 1.0f});
  cases.push_back({Op::none, Op::none, 9, 512, 400, 0, 512, -1.0f, 0.0f});
  // All at once from several threads: each thread has its own packing buffers.
  std::vector<std::string> errors(cases.size());
#pragma omp parallel for num_threads(3) schedule(dynamic)
  for (size_t i = 0; i < cases.size(); ++i) errors[i] = run(cases[i], 100 + i);
  for (size_t i = 0; i < cases.size(); ++i) {
    CAPTURE(testing::describe(cases[i]));
    CHECK(errors[i] == "");
  }
}

TEST_CASE("sgemm_avx512 with op(A) packed beforehand matches the f64 reference") {
  if (skip_without_avx512()) return;
  std::vector<GemmCase> cases;
  for (Op op_a : {Op::none, Op::transpose})
    for (int64_t m : {1, 8, 13})
      for (int64_t n : {1, 17, 50})
        for (int64_t k : {1, 384, 385, 900})
          cases.push_back(
              {op_a, Op::none, m, n, k, (m + n + k) % 3, 0, 1.0f, (k % 2) ? 0.0f : -0.5f});
  for (size_t i = 0; i < cases.size(); ++i) {
    CAPTURE(testing::describe(cases[i]));
    CHECK(run(cases[i], 500 + i, /*prepacked=*/true) == "");
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
