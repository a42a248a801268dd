// Element types a Tensor can hold, their sizes and names (safetensors spells them F32, BF16, ...).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/half.h"

namespace ringgrad {

enum class DType : uint8_t { f32, f64, f16, bf16, i32, i64, u8 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);                             // "float32", "bfloat16", ...
const char* dtype_safetensors_name(DType t);                 // "F32", "BF16", ...
DType dtype_from_safetensors_name(const std::string& name);  // throws InvalidArgument
bool dtype_is_floating(DType t);

// Maps a C++ element type to its DType, for typed data access.
template <class T>
struct DTypeOf;
// One specialisation a line, as the table it is:
// clang-format off
template <> struct DTypeOf<float> { static constexpr DType value = DType::f32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::f64; };
template <> struct DTypeOf<Half> { static constexpr DType value = DType::f16; };
template <> struct DTypeOf<BFloat16> { static constexpr DType value = DType::bf16; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::i32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::i64; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::u8; };
// clang-format on

}  // namespace ringgrad
