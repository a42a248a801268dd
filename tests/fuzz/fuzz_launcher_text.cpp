// libFuzzer target: the text ringgrad-run takes from its user, a --hostfile (parse_hostfile)
// and a --rdzv-conf value (parse_key_values, apply_rdzv_conf), chosen by the input's first byte.
// Each must give a result or throw InvalidArgument saying what is wrong; a crash, a sanitizer
// report, any other exception or a hang is a finding. (token_file= is left out: it reads a
// file the input would name.)
#include <cstddef>
#include <cstdint>
#include <string>

#include "comm/launcher/launch_config.h"
#include "comm/launcher/ssh/hostfile.h"
#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(bytes) + 1, size - 1);
  try {
    if (bytes[0] & 1) {
      ringgrad::comm::parse_hostfile(text, "fuzz");
    } else {
      auto conf = ringgrad::comm::parse_key_values(text, "--rdzv-conf");
      conf.erase("token_file");
      ringgrad::comm::LaunchConfig config;
      ringgrad::comm::apply_rdzv_conf(config, conf);
    }
  } catch (const ringgrad::InvalidArgument&) {
  }
  return 0;
}
