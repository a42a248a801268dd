// relu forward/backward, add, fused add+relu, scale and the counter increment on the CPU
// (kernels/ops.cpp has checked the operands: check_same), in f32, f64 and bf16 (f32
// arithmetic, one rounding per result). One OpenMP-parallel pass each, with the element math of
// kernels/elementwise_math.h.
#include "kernels/cast_math.h"
#include "kernels/cpu/avx512_bw.h"
#include "kernels/cpu/cpu_dispatch.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/elementwise_math.h"

namespace ringgrad::kernels::cpu {

namespace {

// out[i] = f(in[i]...) over n values of T, computed in ComputeType<T>.
template <class T, class F, class... In>
void map_loop(int64_t n, T* out, F f, const In*... in) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = narrow<T>(f(widen(in[i])...));
}

// The same loop compiled for AVX-512 with BW, for bf16: sixteen lanes a step, and the rounded
// values narrowed to 16 bits by one instruction where AVX2 packs and permutes across lanes.
template <class T, class F, class... In>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) void map_loop_avx512(
    int64_t n, T* out, F f, const In*... in) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = narrow<T>(f(widen(in[i])...));
}

// bf16 a + b on CPUs with AVX512-BF16, 32 values a step as f32 halves (avx512_bw.h), each sum
// rounded once by store_halves: the element loop's bits in fewer instructions. The backward
// engine sums a residual block's two gradients with it.
RG_AVX512_BF16 void add_avx512_bf16(int64_t n, BFloat16* out, const BFloat16* a,
                                    const BFloat16* b) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i += 32) {
    const __mmask32 mask = first_lanes32(n - i);
    const Bf16Halves u = load_halves(a + i, mask), v = load_halves(b + i, mask);
    store_halves(out + i, mask, {_mm512_add_ps(u.even, v.even), _mm512_add_ps(u.odd, v.odd)});
  }
}

template <class T, class F, class... In>
void map(int64_t n, T* out, F f, const In*... in) {
  if constexpr (std::is_same_v<T, BFloat16>)
    if (cpu_has(Isa::avx512_bf16)) return map_loop_avx512(n, out, f, in...);
  map_loop(n, out, f, in...);
}

}  // namespace

void relu_forward(Tensor& y, const Tensor& x) {
  dispatch_float_or_bf16(x.dtype(), "relu_forward", [&](auto tag) {
    using T = decltype(tag);
    map(
        x.numel(), y.data<T>(), [](auto v) { return relu(v); }, x.data<T>());
  });
}

void relu_backward(Tensor& dx, const Tensor& dy, const Tensor& y) {
  dispatch_float_or_bf16(y.dtype(), "relu_backward", [&](auto tag) {
    using T = decltype(tag);
    map(
        y.numel(), dx.data<T>(), [](auto g, auto v) { return relu_grad(g, v); }, dy.data<T>(),
        y.data<T>());
  });
}

void add(Tensor& y, const Tensor& a, const Tensor& b) {
  dispatch_float_or_bf16(a.dtype(), "add", [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, BFloat16>)
      if (cpu_has(Isa::avx512_bf16))
        return add_avx512_bf16(a.numel(), y.data<T>(), a.data<T>(), b.data<T>());
    map(
        a.numel(), y.data<T>(), [](auto u, auto v) { return u + v; }, a.data<T>(), b.data<T>());
  });
}

void add_relu_forward(Tensor& y, const Tensor& a, const Tensor& b) {
  dispatch_float_or_bf16(a.dtype(), "add_relu_forward", [&](auto tag) {
    using T = decltype(tag);
    map(
        a.numel(), y.data<T>(), [](auto u, auto v) { return relu(u + v); }, a.data<T>(),
        b.data<T>());
  });
}

void scale_(Tensor& a, double alpha) {
  dispatch_float_or_bf16(a.dtype(), "scale_", [&](auto tag) {
    using T = decltype(tag);
    const auto factor = static_cast<ComputeType<T>>(alpha);
    T* ap = a.data<T>();
    map(
        a.numel(), ap, [factor](auto v) { return v * factor; }, static_cast<const T*>(ap));
  });
}

void increment_(Tensor& counter) { ++*counter.data<int64_t>(); }

}  // namespace ringgrad::kernels::cpu
