// libFuzzer target: read_idx (nn/data/idx.h) on any bytes, plain or gzip, as --data reads the
// files in a folder someone named. It must return a tensor holding exactly the elements its
// header promised, or throw ringgrad's Error; a crash, a sanitizer report (an out-of-bounds read,
// a huge allocation from a lying header), any other exception or a hang is a finding.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "nn/data/idx.h"
#include "tests/fuzz/memory_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  const ringgrad::fuzz::MemoryFile file(bytes, size);
  try {
    const ringgrad::Tensor t = ringgrad::nn::read_idx(file.path());
    volatile unsigned char sum = 0;
    const auto* data = static_cast<const unsigned char*>(t.raw_data());
    for (size_t i = 0; i < t.nbytes(); ++i) sum = sum + data[i];
  } catch (const ringgrad::Error&) {
  }
  return 0;
}
