// The TcpStore wire format, shared by TcpStoreServer and TcpStore.
// A frame is a u32 little-endian body length followed by the body. A request body is a u8 Op
// and its fields; a reply body is a u8 Status and its fields. Integers are little-endian,
// strings are a u32 length and the bytes. The first request on a connection must be hello
// (magic, token, generation); anything malformed closes that one connection.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "comm/store/store_request.h"
#include "core/error.h"

namespace ringgrad::comm {

class ProtocolError : public IoError {
 public:
  using IoError::IoError;
};

enum class StoreOp : uint8_t {
  hello = 1,        // u32 magic, str token, i64 generation (-1: any)
  set = 2,          // str key, str value
  get = 3,          // str key, i64 timeout_ms          -> ok str value | timeout
  add = 4,          // str key, i64 delta               -> ok i64
  compare_set = 5,  // str key, str expected, str desired -> ok str current
  wait = 6,         // strs keys, i64 timeout_ms        -> ok | timeout strs missing
  check = 7,        // strs keys                        -> ok u8
  delete_key = 8,   // str key                          -> ok u8
  num_keys = 9,     //                                  -> ok i64
};
enum class StoreStatus : uint8_t { ok = 0, timeout = 1, error = 2 };  // error: str message

constexpr uint32_t kStoreMagic = 0x31534752;  // "RGS1"
constexpr uint32_t kDefaultMaxFrameBytes = 16u << 20;
// The most a client may send before its hello is accepted (a hello with a long token fits).
constexpr uint32_t kMaxHelloBytes = 4u << 10;
constexpr size_t kFrameHeaderBytes = 4;

class FrameWriter {
 public:
  FrameWriter& u8(uint8_t v);
  FrameWriter& u32(uint32_t v);
  FrameWriter& i64(int64_t v);
  FrameWriter& str(const std::string& v);
  FrameWriter& strs(const std::vector<std::string>& v);
  std::string frame() const;  // header + body
 private:
  std::string body_;
};

// Bounds-checked reader over one frame body; every overrun throws ProtocolError.
class FrameReader {
 public:
  explicit FrameReader(std::string body) : body_(std::move(body)) {}
  uint8_t u8();
  uint32_t u32();
  int64_t i64();
  std::string str();
  std::vector<std::string> strs();
  void expect_end() const;  // trailing bytes are malformed too
 private:
  void need(size_t n, const char* what) const;
  std::string body_;
  size_t pos_ = 0;
};

// The server's side: the request framed at the front of `bytes` (a connection's received and
// not yet served bytes). Throws ProtocolError when the frame is malformed, names an unknown op,
// or announces a body outside 1..max_frame_bytes; a hello with another protocol's magic too.
ParsedRequest parse_store_frame(std::string_view bytes, uint32_t max_frame_bytes);
// The reply frame to a request of `verb` (never called for a request without a reply).
std::string encode_store_reply(StoreVerb verb, const StoreReply& reply);

// A hello checked against the server's token and generation: "" to accept, else why the
// client is refused.
std::string hello_refusal(const StoreRequest& hello, const std::string& token, int64_t generation);

uint32_t decode_frame_length(const unsigned char header[kFrameHeaderBytes]);

// Equal contents without an early exit, so the time taken does not reveal how many leading
// bytes of a guessed token were right.
bool constant_time_equal(const std::string& a, const std::string& b);

}  // namespace ringgrad::comm
