// PyTorch's TCPStore wire protocol, the server's side, as torch 2.x clients speak it (what
// `TORCHELASTIC_USE_AGENT_STORE=True` workers send to the launcher's store: the launcher serves
// them as torchrun's agent does). Unframed: a request is a u8 query and its fields; a string is
// a u64 length and the bytes, a list a u64 count and its strings, integers are 64-bit, all
// little-endian (the byte order of every host PyTorch runs on). A connection starts with
// VALIDATE (magic 0x3C85F7CE) and usually a PING. SET, APPEND and MULTI_SET have no reply; a GET
// or MULTI_GET follows the client's own WAIT for its keys; a timed-out WAIT is withdrawn with
// CANCEL_WAIT. PyTorch's queue and key-listing queries are not served: they close the connection.
// PyTorch 1.x's older form is served too (TorchDialect::legacy).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "comm/store/store_request.h"

namespace ringgrad::comm {

constexpr uint32_t kTorchStoreMagic = 0x3C85F7CE;
// VALIDATE's length, and what the first bytes of a connection must be to be read as PyTorch's.
constexpr size_t kTorchValidateBytes = 5;

// True while `bytes` agree with the start of PyTorch's VALIDATE (all of it once there are
// kTorchValidateBytes). A ringgrad frame never does: its first bytes would announce a frame of
// gigabytes.
bool matches_torch_validate(std::string_view bytes);

// PyTorch 1.x clients (Debian's 1.13) speak an older form: no VALIDATE, no PING or CANCEL_WAIT,
// and other query numbers (SET 0, COMPARE_SET 1, GET 2, ADD 3, CHECK 4, WAIT 5, GETNUMKEYS 6,
// DELETE_KEY 8; WATCH_KEY 7 is not served). Each such client starts with ADD "init/" 1, which
// no ringgrad frame can look like.
enum class TorchDialect { current, legacy };
constexpr size_t kTorchLegacyStartBytes = 22;
// True while `bytes` agree with that first request (all of it once there are
// kTorchLegacyStartBytes).
bool matches_torch_legacy_start(std::string_view bytes);

// The request at the front of `bytes`; incomplete until all its bytes are there. Throws
// ProtocolError for an unknown or unserved query, a wrong magic, or a request that would be
// longer than `max_request_bytes` (known from its lengths before its bytes arrive).
ParsedRequest parse_torch_request(std::string_view bytes, size_t max_request_bytes,
                                  TorchDialect dialect = TorchDialect::current);

// The reply PyTorch's client reads for `verb` ("" where it reads none). PyTorch has no error
// reply: the server closes the connection instead, so `reply` must be ok here.
std::string encode_torch_reply(StoreVerb verb, const StoreReply& reply);

}  // namespace ringgrad::comm
