// StoreRequest and StoreReply: one store operation and its answer as TcpStoreServer executes
// them, whichever wire protocol carried them: ringgrad's framed protocol (store_wire.h) or
// PyTorch's TCPStore protocol (torch_store_wire.h). Each protocol parses into a request and
// encodes a reply; the server's semantics exist once.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ringgrad::comm {

enum class StoreVerb {
  hello,        // ringgrad: token, generation; PyTorch: the validation magic (no fields kept)
  set,          // keys[0] = values[0]
  get,          // keys[0], after waiting for it
  add,          // keys[0] += number
  compare_set,  // keys[0]: values[0] expected, values[1] desired
  wait,         // every key in keys
  check,        // every key in keys, without waiting
  delete_key,   // keys[0]
  num_keys,     //
  append,       // keys[0] += values[0] (PyTorch)
  multi_get,    // the values of keys, after waiting for them (PyTorch)
  multi_set,    // keys[i] = values[i] (PyTorch)
  cancel_wait,  // drop this connection's pending wait (PyTorch)
  ping,         // echo number (PyTorch)
};

struct StoreRequest {
  StoreVerb verb = StoreVerb::num_keys;
  std::vector<std::string> keys;
  std::vector<std::string> values;
  int64_t number = 0;       // add: delta; ping: nonce
  int64_t timeout_ms = -1;  // get/wait: how long the server waits (-1: until cancelled)
  std::string token;        // hello
  int64_t generation = -1;  // hello: -1 accepts any
};

struct StoreReply {
  enum class Status { ok, timeout, error };
  Status status = Status::ok;
  std::vector<std::string> values;  // get, compare_set, multi_get; timeout: the missing keys
  int64_t number = 0;               // add, num_keys, ping
  bool flag = false;                // check, delete_key
  std::string error;                // error: the sentence for the client
};

// What a protocol's parser found at the front of a connection's received bytes.
struct ParsedRequest {
  bool complete = false;  // false: more bytes are needed
  size_t consumed = 0;    // complete: the request's length in bytes
  // The request's length as far as its headers tell (at least what was received): what
  // holding it will cost, known before its bytes arrive, and charged against the store's
  // memory cap from then on.
  size_t declared = 0;
  StoreRequest request;
};

}  // namespace ringgrad::comm
