// Tests for the bf16 GEMM (kernels/cpu/gemm_bf16.cpp), each micro-kernel this CPU has (AMX,
// AVX512-BF16), against an f64 triple loop over the same bf16 values: every transpose
// combination, sizes on both sides of the tile edges (16 rows or columns, 32 products, 2 x 2
// tile blocks), padded leading dimensions, beta (beta 0 must not read C), an empty product,
// A packed beforehand, and calls from several threads at once. Skipped, and said so, on a CPU
// without bf16 dot products.
#include <doctest/doctest.h>
#include <omp.h>

#include <string>
#include <vector>

#include "kernels/cpu/gemm_bf16.h"
#include "tests/kernels/gemm_cases.h"
#include "tests/skip.h"

using namespace ringgrad;
using kernels::cpu::Bf16Kernel;
using kernels::cpu::Op;
using testing::GemmCase;
using testing::GemmOperand;

namespace {

double widen(BFloat16 v) { return bf16_to_float(v); }

std::string run(const GemmCase& c, uint64_t seed, Bf16Kernel kernel, bool prepacked) {
  Generator gen(seed);
  const GemmOperand<BFloat16> a(c.op_a, c.m, c.k, c.pad, 0, gen, float_to_bf16);
  const GemmOperand<BFloat16> b(c.op_b, c.k, c.n, c.pad, c.ldb_override, gen, float_to_bf16);
  std::vector<float> out = testing::initial_c(c, gen);
  const std::vector<float> before = out;
  const int64_t ldc = c.n + c.pad;
  if (prepacked) {
    const kernels::cpu::PackedBf16A packed(c.op_a, a.data.data(), a.ld, c.m, c.k);
    kernels::cpu::gemm_bf16(packed, c.op_b, c.n, b.data.data(), b.ld, c.beta, out.data(), ldc,
                            kernel);
  } else {
    kernels::cpu::gemm_bf16(c.op_a, c.op_b, c.m, c.n, c.k, a.data.data(), a.ld, b.data.data(), b.ld,
                            c.beta, out.data(), ldc, kernel);
  }
  return testing::check_gemm(c, a, b, before, out, widen, 1e-5);
}

// The kernels to test here; none (and a skip message) without bf16 dot products.
std::vector<Bf16Kernel> kernels_here() {
  if (!kernels::cpu::cpu_has_bf16_gemm()) {
    testing::skip_test("this CPU has no AVX512-BF16 or AMX, so bf16 convolutions widen to f32");
    return {};
  }
  std::vector<Bf16Kernel> here{Bf16Kernel::avx512_bf16};
  if (kernels::cpu::cpu_has(kernels::cpu::Isa::amx))
    here.push_back(Bf16Kernel::amx);
  else
    std::printf("note: no AMX here (%s); only the AVX512-BF16 kernel is tested\n",
                kernels::cpu::cpu_features().limited.c_str());
  return here;
}

}  // namespace

TEST_CASE("gemm_bf16 matches an f64 reference across transposes and tile edges") {
  for (Bf16Kernel kernel : kernels_here()) {
    std::vector<GemmCase> cases;
    for (Op op_a : {Op::none, Op::transpose})
      for (Op op_b : {Op::none, Op::transpose})
        for (int64_t m : {1, 16, 17, 40})
          for (int64_t n : {1, 16, 31, 33, 70})
            for (int64_t k : {1, 31, 32, 33, 100})
              cases.push_back(
                  {op_a, op_b, m, n, k, (m + n + k) % 3, 0, 1.0f, (k % 2) ? 0.0f : -0.5f});
    cases.push_back({Op::none, Op::none, 64, 100, 600, 1, 0, 1.0f, 1.0f});  // long products
    // All at once from several threads: each thread has its own packing buffers (and, for
    // AMX, its own tile configuration).
    std::vector<std::string> errors(cases.size());
#pragma omp parallel for num_threads(3) schedule(dynamic)
    for (size_t i = 0; i < cases.size(); ++i)
      errors[i] = run(cases[i], 200 + i, kernel, /*prepacked=*/i % 2 == 1);
    for (size_t i = 0; i < cases.size(); ++i) {
      CAPTURE(kernel == Bf16Kernel::amx ? "amx" : "avx512_bf16");
      CAPTURE(testing::describe(cases[i]));
      CHECK(errors[i] == "");
    }
    // Large enough that packing A forks threads of its own (outside a parallel region).
    for (Op op_a : {Op::none, Op::transpose}) {
      const GemmCase large{op_a, Op::none, 300, 50, 261, 2, 0, 1.0f, 0.0f};
      CAPTURE(testing::describe(large));
      CHECK(run(large, 7, kernel, /*prepacked=*/true) == "");
      CHECK(run(large, 8, kernel, /*prepacked=*/false) == "");
    }
  }
}

TEST_CASE("gemm_bf16 with an empty product scales C by beta") {
  for (Bf16Kernel kernel : kernels_here()) {
    std::vector<float> c = {1, 2, 3, 4};
    kernels::cpu::gemm_bf16(Op::none, Op::none, 2, 2, 0, nullptr, 1, nullptr, 2, 0.5f, c.data(), 2,
                            kernel);
    CHECK(c == std::vector<float>{0.5f, 1, 1.5f, 2});
  }
}
