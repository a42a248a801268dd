// Reduction loops, one template per storage type, dispatched once per call (never per element).
#include "comm/reduce_ops/reduce_kernels.h"

#include <type_traits>

#include "core/error.h"
#include "core/half.h"

namespace ringgrad::comm {

namespace {

// How a storage type is loaded to its arithmetic type and stored back.
template <class T>
struct Arith {
  using type = T;
  static T load(T v) { return v; }
  static T store(T v) { return v; }
};
template <>
struct Arith<Half> {
  using type = float;
  static float load(Half v) { return half_to_float(v); }
  static Half store(float v) { return float_to_half(v); }
};
template <>
struct Arith<BFloat16> {
  using type = float;
  static float load(BFloat16 v) { return bf16_to_float(v); }
  static BFloat16 store(float v) { return float_to_bf16(v); }
};

// Sums and products of signed integers wrap around on overflow, as they do in PyTorch and NCCL
// on every machine they run on, without C++'s undefined behaviour for signed overflow.
template <class V>
V wrapping_add(V p, V q) {
  if constexpr (std::is_integral_v<V> && std::is_signed_v<V>) {
    using U = std::make_unsigned_t<V>;
    return static_cast<V>(static_cast<U>(p) + static_cast<U>(q));
  } else {
    return static_cast<V>(p + q);
  }
}
template <class V>
V wrapping_mul(V p, V q) {
  if constexpr (std::is_integral_v<V> && std::is_signed_v<V>) {
    using U = std::make_unsigned_t<V>;
    return static_cast<V>(static_cast<U>(p) * static_cast<U>(q));
  } else {
    return static_cast<V>(p * q);
  }
}

// max/min propagate NaN from either side, so the result does not depend on argument order.
template <class A>
A max_of(A x, A y) {
  return (x > y || x != x) ? x : y;
}
template <class A>
A min_of(A x, A y) {
  return (x < y || x != x) ? x : y;
}

template <class T, class F>
void combine(T* dst, const T* a, const T* b, size_t count, F f) {
  using A = Arith<T>;
  for (size_t i = 0; i < count; ++i) dst[i] = A::store(f(A::load(a[i]), A::load(b[i])));
}

template <class T>
void reduce_typed(void* dst, const void* a, const void* b, size_t count, ReduceOp op) {
  using V = typename Arith<T>::type;
  auto* d = static_cast<T*>(dst);
  auto* x = static_cast<const T*>(a);
  auto* y = static_cast<const T*>(b);
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return combine(d, x, y, count, [](V p, V q) { return wrapping_add(p, q); });
    case ReduceOp::prod:
      return combine(d, x, y, count, [](V p, V q) { return wrapping_mul(p, q); });
    case ReduceOp::max: return combine(d, x, y, count, [](V p, V q) { return max_of(p, q); });
    case ReduceOp::min: return combine(d, x, y, count, [](V p, V q) { return min_of(p, q); });
  }
}

template <class T>
void divide_typed(void* data, size_t count, int divisor) {
  using A = Arith<T>;
  using V = typename A::type;
  auto* d = static_cast<T*>(data);
  const V n = static_cast<V>(divisor);
  for (size_t i = 0; i < count; ++i) d[i] = A::store(static_cast<V>(A::load(d[i]) / n));
}

}  // namespace

void reduce_into(void* dst, const void* a, const void* b, size_t count, DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::f32: return reduce_typed<float>(dst, a, b, count, op);
    case DType::f64: return reduce_typed<double>(dst, a, b, count, op);
    case DType::f16: return reduce_typed<Half>(dst, a, b, count, op);
    case DType::bf16: return reduce_typed<BFloat16>(dst, a, b, count, op);
    case DType::i32: return reduce_typed<int32_t>(dst, a, b, count, op);
    case DType::i64: return reduce_typed<int64_t>(dst, a, b, count, op);
    case DType::u8: return reduce_typed<uint8_t>(dst, a, b, count, op);
  }
  RG_THROW(InvalidArgument, "reduce_into: unsupported dtype");
}

void divide_by(void* data, size_t count, DType dtype, int divisor) {
  switch (dtype) {
    case DType::f32: return divide_typed<float>(data, count, divisor);
    case DType::f64: return divide_typed<double>(data, count, divisor);
    case DType::f16: return divide_typed<Half>(data, count, divisor);
    case DType::bf16: return divide_typed<BFloat16>(data, count, divisor);
    case DType::i32: return divide_typed<int32_t>(data, count, divisor);
    case DType::i64: return divide_typed<int64_t>(data, count, divisor);
    case DType::u8: return divide_typed<uint8_t>(data, count, divisor);
  }
  RG_THROW(InvalidArgument, "divide_by: unsupported dtype");
}

}  // namespace ringgrad::comm
