// Encoding and bounds-checked decoding of TcpStore frames.
#include "comm/store/store_wire.h"

#include <algorithm>

namespace ringgrad::comm {

namespace {
void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t get_le(const std::string& in, size_t pos, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i)
    v |= static_cast<uint64_t>(static_cast<unsigned char>(in[pos + i])) << (8 * i);
  return v;
}
}  // namespace

FrameWriter& FrameWriter::u8(uint8_t v) {
  body_.push_back(static_cast<char>(v));
  return *this;
}
FrameWriter& FrameWriter::u32(uint32_t v) {
  put_le(body_, v, 4);
  return *this;
}
FrameWriter& FrameWriter::i64(int64_t v) {
  put_le(body_, static_cast<uint64_t>(v), 8);
  return *this;
}
FrameWriter& FrameWriter::str(const std::string& v) {
  RG_CHECK_LE(v.size(), size_t{UINT32_MAX}, "store frame string too long");
  u32(static_cast<uint32_t>(v.size()));
  body_ += v;
  return *this;
}
FrameWriter& FrameWriter::strs(const std::vector<std::string>& v) {
  u32(static_cast<uint32_t>(v.size()));
  for (const auto& s : v) str(s);
  return *this;
}
std::string FrameWriter::frame() const {
  std::string out;
  out.reserve(kFrameHeaderBytes + body_.size());
  put_le(out, body_.size(), 4);
  return out + body_;
}

void FrameReader::need(size_t n, const char* what) const {
  if (body_.size() - pos_ < n)
    RG_THROW(ProtocolError, "truncated frame: ", what, " needs ", n, " bytes at offset ", pos_,
             " of a ", body_.size(), "-byte body");
}
uint8_t FrameReader::u8() {
  need(1, "u8");
  return static_cast<uint8_t>(body_[pos_++]);
}
uint32_t FrameReader::u32() {
  need(4, "u32");
  auto v = static_cast<uint32_t>(get_le(body_, pos_, 4));
  pos_ += 4;
  return v;
}
int64_t FrameReader::i64() {
  need(8, "i64");
  auto v = static_cast<int64_t>(get_le(body_, pos_, 8));
  pos_ += 8;
  return v;
}
std::string FrameReader::str() {
  uint32_t n = u32();
  need(n, "string");
  std::string s = body_.substr(pos_, n);
  pos_ += n;
  return s;
}
std::vector<std::string> FrameReader::strs() {
  uint32_t count = u32();
  // Each string takes at least its 4-byte length: a larger count cannot be genuine, and
  // checking first keeps a hostile count from reserving gigabytes.
  need(size_t{count} * 4, "string list");
  std::vector<std::string> out;
  out.reserve(count);
  for (uint32_t i = 0; i < count; ++i) out.push_back(str());
  return out;
}
void FrameReader::expect_end() const {
  if (pos_ != body_.size())
    RG_THROW(ProtocolError, "frame has ", body_.size() - pos_, " unexpected trailing bytes");
}

ParsedRequest parse_store_frame(std::string_view bytes, uint32_t max_frame_bytes) {
  ParsedRequest parsed;
  parsed.declared = bytes.size();
  if (bytes.size() < kFrameHeaderBytes) return parsed;
  const uint32_t n = decode_frame_length(reinterpret_cast<const unsigned char*>(bytes.data()));
  if (n == 0 || n > max_frame_bytes)
    RG_THROW(ProtocolError, "frame length ", n, " outside 1..", max_frame_bytes);
  parsed.declared = kFrameHeaderBytes + size_t{n};
  if (bytes.size() < parsed.declared) return parsed;
  FrameReader in(std::string(bytes.substr(kFrameHeaderBytes, n)));
  StoreRequest& r = parsed.request;
  const auto op = static_cast<StoreOp>(in.u8());
  switch (op) {
    case StoreOp::hello: {
      r.verb = StoreVerb::hello;
      const uint32_t magic = in.u32();
      r.token = in.str();
      r.generation = in.i64();
      in.expect_end();
      if (magic != kStoreMagic) RG_THROW(ProtocolError, "hello with a wrong protocol magic");
      break;
    }
    case StoreOp::set:
      r.verb = StoreVerb::set;
      r.keys = {in.str()};
      r.values = {in.str()};
      break;
    case StoreOp::get:
      r.verb = StoreVerb::get;
      r.keys = {in.str()};
      r.timeout_ms = std::max<int64_t>(0, in.i64());
      break;
    case StoreOp::add:
      r.verb = StoreVerb::add;
      r.keys = {in.str()};
      r.number = in.i64();
      break;
    case StoreOp::compare_set:
      r.verb = StoreVerb::compare_set;
      r.keys = {in.str()};
      r.values = {in.str(), in.str()};
      break;
    case StoreOp::wait:
      r.verb = StoreVerb::wait;
      r.keys = in.strs();
      r.timeout_ms = std::max<int64_t>(0, in.i64());
      break;
    case StoreOp::check:
      r.verb = StoreVerb::check;
      r.keys = in.strs();
      break;
    case StoreOp::delete_key:
      r.verb = StoreVerb::delete_key;
      r.keys = {in.str()};
      break;
    case StoreOp::num_keys: r.verb = StoreVerb::num_keys; break;
    default: RG_THROW(ProtocolError, "unknown store op ", static_cast<int>(op));
  }
  in.expect_end();
  parsed.complete = true;
  parsed.consumed = parsed.declared;
  return parsed;
}

std::string encode_store_reply(StoreVerb verb, const StoreReply& reply) {
  FrameWriter w;
  w.u8(static_cast<uint8_t>(reply.status == StoreReply::Status::ok        ? StoreStatus::ok
                            : reply.status == StoreReply::Status::timeout ? StoreStatus::timeout
                                                                          : StoreStatus::error));
  if (reply.status == StoreReply::Status::error) return w.str(reply.error).frame();
  if (reply.status == StoreReply::Status::timeout) return w.strs(reply.values).frame();
  switch (verb) {
    case StoreVerb::get:
    case StoreVerb::compare_set: w.str(reply.values.at(0)); break;
    case StoreVerb::add:
    case StoreVerb::num_keys: w.i64(reply.number); break;
    case StoreVerb::check:
    case StoreVerb::delete_key: w.u8(reply.flag ? 1 : 0); break;
    default: break;  // hello, set, wait: the status alone
  }
  return w.frame();
}

std::string hello_refusal(const StoreRequest& hello, const std::string& token, int64_t generation) {
  if (!token.empty() && !constant_time_equal(hello.token, token))
    return "wrong or missing store token";
  if (generation >= 0 && hello.generation >= 0 && hello.generation != generation)
    return str_cat("stale generation ", hello.generation, " (this store serves generation ",
                   generation, ")");
  return "";
}

uint32_t decode_frame_length(const unsigned char header[kFrameHeaderBytes]) {
  return static_cast<uint32_t>(header[0]) | static_cast<uint32_t>(header[1]) << 8 |
         static_cast<uint32_t>(header[2]) << 16 | static_cast<uint32_t>(header[3]) << 24;
}

bool constant_time_equal(const std::string& a, const std::string& b) {
  const size_t n = a.size() > b.size() ? a.size() : b.size();
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

}  // namespace ringgrad::comm
