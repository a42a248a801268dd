// conv_bench: Google Benchmark timing of one training step's convolution work (forward, then
// backward for dw and, except for the stem, dx) for every distinct conv shape of resnet20 and
// resnet18 at batch 64. `conv_bench --list-shapes` prints the shape table that
// conv_compare_torch.py times in PyTorch; compare_conv.sh runs both and prints the ratios.
// `--threads N` (default 2) sets the thread count; 1 gives steadier numbers on a busy machine.
// `--bf16` after it times the same work in bf16 (the kernels `--amp bf16` trains with, the
// weight gradient in f32).
// `conv_bench --threads N --peak` prints the f32 multiply-add peak of N cores, measured with a
// loop of independent vector FMAs at the widest width the CPU has (the roofline each shape's
// GFLOP/s is set against).
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/rng.h"
#include "kernels/ops.h"

using namespace ringgrad;

namespace {

constexpr int64_t kBatch = 64;
int threads = 2;
DType dtype = DType::f32;

// One distinct conv of a network; `count` says how often it occurs there. The stem reads the
// data batch, which needs no gradient (input_grad false).
struct ConvShape {
  const char* network;
  int64_t C, K, H, W, R, S;
  int stride, pad, count;
  bool input_grad;
};

const std::vector<ConvShape>& shapes() {
  static const std::vector<ConvShape> table = {
      {"resnet20", 1, 16, 28, 28, 3, 3, 1, 1, 1, false},
      {"resnet20", 16, 16, 28, 28, 3, 3, 1, 1, 6, true},
      {"resnet20", 16, 32, 28, 28, 3, 3, 2, 1, 1, true},
      {"resnet20", 32, 32, 14, 14, 3, 3, 1, 1, 5, true},
      {"resnet20", 16, 32, 28, 28, 1, 1, 2, 0, 1, true},
      {"resnet20", 32, 64, 14, 14, 3, 3, 2, 1, 1, true},
      {"resnet20", 64, 64, 7, 7, 3, 3, 1, 1, 5, true},
      {"resnet20", 32, 64, 14, 14, 1, 1, 2, 0, 1, true},
      {"resnet18", 1, 64, 28, 28, 7, 7, 2, 3, 1, false},
      {"resnet18", 64, 64, 7, 7, 3, 3, 1, 1, 4, true},
      {"resnet18", 64, 128, 7, 7, 3, 3, 2, 1, 1, true},
      {"resnet18", 128, 128, 4, 4, 3, 3, 1, 1, 3, true},
      {"resnet18", 64, 128, 7, 7, 1, 1, 2, 0, 1, true},
      {"resnet18", 128, 256, 4, 4, 3, 3, 2, 1, 1, true},
      {"resnet18", 256, 256, 2, 2, 3, 3, 1, 1, 3, true},
      {"resnet18", 128, 256, 4, 4, 1, 1, 2, 0, 1, true},
      {"resnet18", 256, 512, 2, 2, 3, 3, 2, 1, 1, true},
      {"resnet18", 512, 512, 1, 1, 3, 3, 1, 1, 3, true},
      {"resnet18", 256, 512, 2, 2, 1, 1, 2, 0, 1, true},
  };
  return table;
}

// "resnet20/16x28x28-32-3x3s2p1": network, input C x H x W, output channels, kernel, stride, pad.
std::string shape_name(const ConvShape& s) {
  char name[96];
  std::snprintf(name, sizeof name, "%s/%lldx%lldx%lld-%lld-%lldx%llds%dp%d", s.network,
                static_cast<long long>(s.C), static_cast<long long>(s.H),
                static_cast<long long>(s.W), static_cast<long long>(s.K),
                static_cast<long long>(s.R), static_cast<long long>(s.S), s.stride, s.pad);
  return name;
}

Tensor random_tensor(const Shape& shape, Generator& gen) {
  Tensor t = Tensor::empty(shape);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = gen.normal();
  return t.to(dtype);
}

void conv_step(benchmark::State& state, const ConvShape& s) {
  kernels::set_num_threads(threads);
  kernels::Conv2dParams p;
  p.stride_h = p.stride_w = s.stride;
  p.pad_h = p.pad_w = s.pad;
  Generator gen(1);
  Tensor x = random_tensor({kBatch, s.C, s.H, s.W}, gen),
         w = random_tensor({s.K, s.C, s.R, s.S}, gen);
  const Shape out = kernels::conv2d_output_shape(x.shape(), w.shape(), p);
  Tensor y = Tensor::empty(out, dtype), dy = random_tensor(out, gen);
  Tensor dx = s.input_grad ? Tensor::empty(x.shape(), dtype) : Tensor();
  Tensor dw = Tensor::empty(w.shape());  // f32, as autocast's master weights take it
  Tensor no_bias;
  for (auto _ : state) {
    kernels::conv2d_forward(y, x, w, no_bias, p);
    kernels::conv2d_backward(dx, dw, no_bias, dy, x, w, p);
    benchmark::DoNotOptimize(dw.raw_data());
  }
  // Multiply-adds of forward, dw and dx, each N*K*P*Q*C*R*S.
  const double macs = static_cast<double>(kBatch) * s.K * out[2] * out[3] * s.C * s.R * s.S;
  state.counters["GFLOP/s"] = benchmark::Counter(2 * macs * (s.input_grad ? 3 : 2),
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

// Tab-separated table for conv_compare_torch.py: name network C K H W R S stride pad count
// input_grad.
void print_shapes() {
  for (const ConvShape& s : shapes())
    std::printf("%s\t%s\t%lld\t%lld\t%lld\t%lld\t%lld\t%lld\t%d\t%d\t%d\t%d\n",
                shape_name(s).c_str(), s.network, static_cast<long long>(s.C),
                static_cast<long long>(s.K), static_cast<long long>(s.H),
                static_cast<long long>(s.W), static_cast<long long>(s.R),
                static_cast<long long>(s.S), s.stride, s.pad, s.count, s.input_grad ? 1 : 0);
}

// Independent FMA chains, enough to cover the latency of two FMA ports (4 cycles x 2), in
// vectors of 16 (AVX-512) or 8 (AVX2) floats; each returns the flops it did.
constexpr int kChains = 12;

__attribute__((target("avx512f"))) double fma_chains_avx512(int64_t iterations) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(1.0f + i * 1e-3f);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iterations; ++it)
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  for (int i = 1; i < kChains; ++i) acc[0] = _mm512_add_ps(acc[0], acc[i]);
  benchmark::DoNotOptimize(acc[0]);
  return 2.0 * kChains * iterations * 16;
}

double fma_chains_avx2(int64_t iterations) {
  __m256 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_ps(1.0f + i * 1e-3f);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iterations; ++it)
    for (int i = 0; i < kChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  for (int i = 1; i < kChains; ++i) acc[0] = _mm256_add_ps(acc[0], acc[i]);
  benchmark::DoNotOptimize(acc[0]);
  return 2.0 * kChains * iterations * 8;
}

// GFLOP/s of `threads` threads running FMA chains at once for about half a second.
double peak_gflops() {
  const bool avx512 = __builtin_cpu_supports("avx512f");
  constexpr int64_t kIterations = 20'000'000;
  double flops = 0;
  const auto start = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : flops)
  flops += avx512 ? fma_chains_avx512(kIterations) : fma_chains_avx2(kIterations);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return flops / seconds / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--list-shapes") == 0) {
    print_shapes();
    return 0;
  }
  if (argc >= 3 && std::strcmp(argv[1], "--threads") == 0) {
    threads = std::max(1, std::atoi(argv[2]));
    argv[2] = argv[0];  // drop the two arguments before Google Benchmark parses the rest
    argc -= 2;
    argv += 2;
  }
  if (argc >= 2 && std::strcmp(argv[1], "--bf16") == 0) {
    dtype = DType::bf16;
    argv[1] = argv[0];
    argc -= 1;
    argv += 1;
  }
  if (argc == 2 && std::strcmp(argv[1], "--peak") == 0) {
    std::printf("%.1f\n", peak_gflops());
    return 0;
  }
  for (const ConvShape& s : shapes())
    benchmark::RegisterBenchmark(shape_name(s).c_str(), conv_step, s)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
