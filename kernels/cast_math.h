// Element conversions between the floating dtypes and the inf/NaN test, shared by the CPU
// loops and the CUDA kernels (RG_HD). The 16-bit types convert through float with
// round-to-nearest-even (core/half.h); a double reaches half precision through float, as in
// PyTorch, where c10::Half and c10::BFloat16 are built from a float.
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/half.h"
#include "core/host_device.h"

namespace ringgrad::kernels {

template <class T>
RG_HD float as_float(T v) {
  if constexpr (std::is_same_v<T, Half>)
    return half_to_float(v);
  else if constexpr (std::is_same_v<T, BFloat16>)
    return bf16_to_float(v);
  else
    return static_cast<float>(v);
}

template <class D, class S>
RG_HD D convert_element(S v) {
  if constexpr (std::is_same_v<D, S>)
    return v;
  else if constexpr (std::is_same_v<D, Half>)
    return float_to_half(as_float(v));
  else if constexpr (std::is_same_v<D, BFloat16>)
    return float_to_bf16(as_float(v));
  else if constexpr (std::is_same_v<S, Half> || std::is_same_v<S, BFloat16>)
    return static_cast<D>(as_float(v));  // exact: every half value is a float
  else
    return static_cast<D>(v);
}

// The type arithmetic on a T value is done in: double for double, float otherwise. Half
// values are widened, computed on in float and rounded once per result, as in PyTorch.
template <class T>
using ComputeType = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class T>
RG_HD ComputeType<T> widen(T v) {
  return convert_element<ComputeType<T>>(v);
}
template <class T>
RG_HD T narrow(ComputeType<T> v) {
  return convert_element<T>(v);
}

// inf or NaN: the exponent field is all ones. Tested on the bits so that -ffast-math, which
// lets the compiler assume finite floats, cannot fold the test away.
template <class T>
RG_HD bool is_nonfinite(T v) {
  if constexpr (std::is_same_v<T, Half>)
    return (v.bits & 0x7c00u) == 0x7c00u;
  else if constexpr (std::is_same_v<T, BFloat16>)
    return (v.bits & 0x7f80u) == 0x7f80u;
  else if constexpr (std::is_same_v<T, float>)
    return (float_bits(v) & 0x7f800000u) == 0x7f800000u;
  else {
    static_assert(std::is_same_v<T, double>, "is_nonfinite is for floating types");
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    return (u & 0x7ff0000000000000ull) == 0x7ff0000000000000ull;
  }
}

}  // namespace ringgrad::kernels
