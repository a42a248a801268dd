// Parsing and encoding of PyTorch's TCPStore protocol (torch_store_wire.h).
#include "comm/store/torch_store_wire.h"

#include <algorithm>
#include <cstddef>
#include <iterator>

#include "comm/store/store_wire.h"

namespace ringgrad::comm {

namespace {

// The query numbers on the wire.
enum class TorchQuery : uint8_t {
  validate = 0,
  set = 1,
  compare_set = 2,
  get = 3,
  add = 4,
  check = 5,
  wait = 6,
  get_num_keys = 7,
  delete_key = 8,
  append = 9,
  multi_get = 10,
  multi_set = 11,
  cancel_wait = 12,
  ping = 13,
};

constexpr uint8_t kCheckReady = 0, kCheckNotReady = 1;
constexpr uint8_t kStopWaiting = 0, kWaitCanceled = 1;

// Reads fields from the front of the received bytes. Each read returns false when the bytes
// end first; `declared` grows to the request's end as far as the lengths read so far tell.
class Cursor {
 public:
  Cursor(std::string_view bytes, size_t max_bytes) : bytes_(bytes), max_(max_bytes) {}

  bool u8(uint8_t& v) { return fixed(&v, 1); }
  bool u32(uint32_t& v) { return fixed(&v, 4); }
  bool u64(uint64_t& v) { return fixed(&v, 8); }
  bool str(std::string& out) {
    uint64_t n = 0;
    if (!u64(n)) return false;
    if (!extend(n, "a string")) return false;
    out.assign(bytes_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool strs(std::vector<std::string>& out, bool pairs = false) {
    uint64_t count = 0;
    if (!u64(count)) return false;
    // Each string takes at least its 8-byte length: a larger count cannot be genuine.
    const uint64_t strings = pairs ? 2 * std::min<uint64_t>(count, max_) : count;
    claim(strings > max_ / 8 ? max_ + 1 : pos_ + 8 * strings, "a list");
    for (uint64_t i = 0; i < strings; ++i) {
      out.emplace_back();
      if (!str(out.back())) return false;
    }
    return true;
  }
  size_t pos() const { return pos_; }
  size_t declared() const { return std::max(declared_, bytes_.size()); }

 private:
  bool fixed(void* v, size_t n) {
    if (!extend(n, "a field")) return false;
    // Little-endian on the wire and in memory (see the header).
    std::copy_n(bytes_.data() + pos_, n, static_cast<char*>(v));
    pos_ += n;
    return true;
  }
  // The next n bytes are part of the request: true when they have arrived.
  bool extend(uint64_t n, const char* what) {
    claim(n > max_ ? max_ + 1 : pos_ + n, what);
    return bytes_.size() - pos_ >= n;
  }
  void claim(uint64_t end, const char* what) {
    if (end > max_)
      RG_THROW(ProtocolError, "PyTorch store request with ", what, " that takes it past ", max_,
               " bytes");
    declared_ = std::max<size_t>(declared_, end);
  }

  std::string_view bytes_;
  size_t max_;
  size_t pos_ = 0;
  size_t declared_ = 0;
};

// PyTorch 1.x's numbers for the queries it has; its WATCH_KEY (7) and anything else are mapped
// to a number no query has, which read_fields refuses.
TorchQuery legacy_query(uint8_t number) {
  constexpr TorchQuery kLegacy[] = {
      TorchQuery::set,   TorchQuery::compare_set, TorchQuery::get,         TorchQuery::add,
      TorchQuery::check, TorchQuery::wait,        TorchQuery::get_num_keys};
  if (number < std::size(kLegacy)) return kLegacy[number];
  return number == 8 ? TorchQuery::delete_key : static_cast<TorchQuery>(0xff);
}

// Reads the fields of `query` into `r`; false when the bytes end first.
bool read_fields(TorchQuery query, Cursor& in, StoreRequest& r) {
  switch (query) {
    case TorchQuery::validate: {
      r.verb = StoreVerb::hello;
      uint32_t magic = 0;
      if (!in.u32(magic)) return false;
      if (magic != kTorchStoreMagic)
        RG_THROW(ProtocolError, "PyTorch store VALIDATE with a wrong magic");
      return true;
    }
    case TorchQuery::ping: {
      r.verb = StoreVerb::ping;
      uint32_t nonce = 0;
      if (!in.u32(nonce)) return false;
      r.number = nonce;
      return true;
    }
    case TorchQuery::set:
    case TorchQuery::append:
      r.verb = query == TorchQuery::set ? StoreVerb::set : StoreVerb::append;
      r.keys.resize(1);
      r.values.resize(1);
      return in.str(r.keys[0]) && in.str(r.values[0]);
    case TorchQuery::compare_set:
      r.verb = StoreVerb::compare_set;
      r.keys.resize(1);
      r.values.resize(2);
      return in.str(r.keys[0]) && in.str(r.values[0]) && in.str(r.values[1]);
    case TorchQuery::get:
    case TorchQuery::delete_key:
      r.verb = query == TorchQuery::get ? StoreVerb::get : StoreVerb::delete_key;
      r.keys.resize(1);
      return in.str(r.keys[0]);
    case TorchQuery::add: {
      r.verb = StoreVerb::add;
      r.keys.resize(1);
      uint64_t delta = 0;
      if (!in.str(r.keys[0]) || !in.u64(delta)) return false;
      r.number = static_cast<int64_t>(delta);
      return true;
    }
    case TorchQuery::check: r.verb = StoreVerb::check; return in.strs(r.keys);
    case TorchQuery::wait: r.verb = StoreVerb::wait; return in.strs(r.keys);
    case TorchQuery::multi_get: r.verb = StoreVerb::multi_get; return in.strs(r.keys);
    case TorchQuery::multi_set: {
      r.verb = StoreVerb::multi_set;
      std::vector<std::string> pairs;  // key, value, key, value, ...
      if (!in.strs(pairs, /*pairs=*/true)) return false;
      for (size_t i = 0; i < pairs.size(); i += 2) {
        r.keys.push_back(std::move(pairs[i]));
        r.values.push_back(std::move(pairs[i + 1]));
      }
      return true;
    }
    case TorchQuery::get_num_keys: r.verb = StoreVerb::num_keys; return true;
    case TorchQuery::cancel_wait: r.verb = StoreVerb::cancel_wait; return true;
  }
  RG_THROW(ProtocolError, "PyTorch store query ", static_cast<int>(query),
           " is unknown or not served here (queues and key listing are not)");
}

void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void put_str(std::string& out, const std::string& s) {
  put_u64(out, s.size());
  out += s;
}

}  // namespace

bool matches_torch_validate(std::string_view bytes) {
  const unsigned char validate[kTorchValidateBytes] = {
      static_cast<unsigned char>(TorchQuery::validate), kTorchStoreMagic & 0xff,
      (kTorchStoreMagic >> 8) & 0xff, (kTorchStoreMagic >> 16) & 0xff,
      (kTorchStoreMagic >> 24) & 0xff};
  for (size_t i = 0; i < bytes.size() && i < kTorchValidateBytes; ++i)
    if (static_cast<unsigned char>(bytes[i]) != validate[i]) return false;
  return true;
}

bool matches_torch_legacy_start(std::string_view bytes) {
  // ADD, the 5-byte key "init/" (u64 length), delta 1.
  static const char start[kTorchLegacyStartBytes + 1] =
      "\x03\x05\0\0\0\0\0\0\0init/\x01\0\0\0\0\0\0\0";
  const size_t n = std::min(bytes.size(), kTorchLegacyStartBytes);
  return std::equal(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(n), start);
}

ParsedRequest parse_torch_request(std::string_view bytes, size_t max_request_bytes,
                                  TorchDialect dialect) {
  ParsedRequest parsed;
  Cursor in(bytes, max_request_bytes);
  uint8_t query = 0;
  parsed.complete =
      in.u8(query) && read_fields(dialect == TorchDialect::legacy ? legacy_query(query)
                                                                  : static_cast<TorchQuery>(query),
                                  in, parsed.request);
  parsed.declared = in.declared();
  if (parsed.complete) parsed.consumed = in.pos();
  return parsed;
}

std::string encode_torch_reply(StoreVerb verb, const StoreReply& reply) {
  RG_CHECK(reply.status == StoreReply::Status::ok, "PyTorch's store protocol has no error reply");
  std::string out;
  switch (verb) {
    case StoreVerb::get:
    case StoreVerb::compare_set:
    case StoreVerb::multi_get:
      for (const auto& v : reply.values) put_str(out, v);
      break;
    case StoreVerb::add:
    case StoreVerb::num_keys: put_u64(out, static_cast<uint64_t>(reply.number)); break;
    case StoreVerb::delete_key: put_u64(out, reply.flag ? 1 : 0); break;
    case StoreVerb::check:
      out.push_back(static_cast<char>(reply.flag ? kCheckReady : kCheckNotReady));
      break;
    case StoreVerb::wait: out.push_back(static_cast<char>(kStopWaiting)); break;
    case StoreVerb::cancel_wait: out.push_back(static_cast<char>(kWaitCanceled)); break;
    case StoreVerb::ping:
      for (int i = 0; i < 4; ++i)
        out.push_back(static_cast<char>((reply.number >> (8 * i)) & 0xff));
      break;
    case StoreVerb::hello:
    case StoreVerb::set:
    case StoreVerb::append:
    case StoreVerb::multi_set: break;  // no reply
  }
  return out;
}

}  // namespace ringgrad::comm
