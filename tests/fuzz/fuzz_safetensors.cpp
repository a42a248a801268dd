// libFuzzer target: load_safetensors (nn/serialize/safetensors.h) on any bytes, as --resume and
// --init-from read a file someone handed over. It must load it or throw ringgrad's Error (a
// damaged file); a loaded file's every tensor must lie within the file, which reading each of
// its bytes checks under ASan. A crash, a sanitizer report, any other exception or a hang is a
// finding.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "nn/serialize/safetensors.h"
#include "tests/fuzz/memory_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  const ringgrad::fuzz::MemoryFile file(bytes, size);
  try {
    const ringgrad::nn::TensorFile loaded = ringgrad::nn::load_safetensors(file.path());
    volatile unsigned char sum = 0;
    for (const auto& [name, tensor] : loaded.tensors) {
      const auto* data = static_cast<const unsigned char*>(tensor.raw_data());
      for (size_t i = 0; i < tensor.nbytes(); ++i) sum = sum + data[i];
    }
  } catch (const ringgrad::Error&) {
  }
  return 0;
}
