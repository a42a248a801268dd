// DType tables.
#include "core/dtype.h"

#include "core/error.h"

namespace ringgrad {

namespace {
struct DTypeInfo {
  DType type;
  size_t size;
  const char* name;
  const char* st_name;
  bool floating;
};
constexpr DTypeInfo kInfo[] = {
    {DType::f32, 4, "float32", "F32", true}, {DType::f64, 8, "float64", "F64", true},
    {DType::f16, 2, "float16", "F16", true}, {DType::bf16, 2, "bfloat16", "BF16", true},
    {DType::i32, 4, "int32", "I32", false},  {DType::i64, 8, "int64", "I64", false},
    {DType::u8, 1, "uint8", "U8", false},
};
const DTypeInfo& info(DType t) { return kInfo[static_cast<int>(t)]; }
}  // namespace

size_t dtype_size(DType t) { return info(t).size; }
const char* dtype_name(DType t) { return info(t).name; }
const char* dtype_safetensors_name(DType t) { return info(t).st_name; }
bool dtype_is_floating(DType t) { return info(t).floating; }

DType dtype_from_safetensors_name(const std::string& name) {
  for (const auto& i : kInfo)
    if (name == i.st_name) return i.type;
  RG_THROW(InvalidArgument, "unsupported dtype '", name,
           "' (supported: F32, F64, F16, BF16, I32, I64, U8)");
}

}  // namespace ringgrad
