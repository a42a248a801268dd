// libFuzzer target: the store's two wire protocols as a server's connection parses them from a
// stranger's bytes. The input's first byte picks the protocol (bit 0 set: PyTorch's TCPStore
// protocol, in PyTorch 1.x's form if bit 1 is set too; else ringgrad's frames); the rest is one
// client's byte stream, parsed request after
// request (with the hello's limit until a hello has come). Each parse must end in a request
// within what arrived, a wait for more (having claimed at least what arrived, within the
// limit) or a ProtocolError; a crash, a sanitizer report, any other exception or a broken rule
// is a finding. fuzz_store_server.cpp sends the same inputs to a live server.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "comm/store/store_wire.h"
#include "comm/store/torch_store_wire.h"

namespace {

using namespace ringgrad::comm;

constexpr uint32_t kMaxFrame = 1 << 16;

void require(bool rule) {
  if (!rule) std::abort();  // libFuzzer reports the input
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  if (size == 0) return 0;
  const bool torch = bytes[0] & 1, legacy = bytes[0] & 2;
  std::string_view stream(reinterpret_cast<const char*>(bytes) + 1, size - 1);
  bool said_hello = false;
  while (!stream.empty()) {
    const size_t limit = said_hello ? kMaxFrame : kMaxHelloBytes;
    ParsedRequest p;
    try {
      p = torch ? parse_torch_request(stream, limit,
                                      legacy ? TorchDialect::legacy : TorchDialect::current)
                : parse_store_frame(stream, static_cast<uint32_t>(limit));
    } catch (const ProtocolError&) {
      return 0;
    }
    // A ringgrad frame's limit is on its body: its 4-byte header comes on top.
    if (!p.complete) {
      require(p.declared >= stream.size() && p.declared <= limit + kFrameHeaderBytes);
      return 0;
    }
    require(p.consumed > 0 && p.consumed <= stream.size() &&
            p.consumed <= limit + kFrameHeaderBytes);
    said_hello = said_hello || p.request.verb == StoreVerb::hello;
    stream.remove_prefix(p.consumed);
  }
  return 0;
}
