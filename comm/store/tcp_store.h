// TcpStore: the Store client of a TcpStoreServer. The constructor connects, retrying with
// exponential backoff until connect_timeout, then says hello (token, generation); it throws
// TimeoutError naming host:port, or IoError when the server refuses it. Calls are serialized
// by a mutex, so one TcpStore may be shared by threads. get/wait time out on the server,
// which keeps the connection usable; a lost connection throws IoError "store connection lost
// (host:port)" and every later call fails the same way.
#pragma once
#include <memory>

#include "comm/store/store.h"
#include "comm/store/store_wire.h"

namespace ringgrad::comm {

struct TcpStoreOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string token;
  int64_t generation = -1;  // -1: accepted by a server of any generation
  Milliseconds connect_timeout{60'000};
  Milliseconds timeout = Store::kDefaultTimeout;  // default for get/wait
  uint32_t max_frame_bytes = kDefaultMaxFrameBytes;
};

class TcpStore : public Store {
 public:
  using Store::get;
  using Store::wait;

  explicit TcpStore(TcpStoreOptions options);
  ~TcpStore() override;

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, Milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  void wait(const std::vector<std::string>& keys, Milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;

  std::string address() const;   // "host:port" of the server
  std::string local_ip() const;  // this end's address: the interface that reaches the server

  class Impl;

 private:
  // One exchange under the client's mutex; returns the reply positioned after its status.
  // A timeout status sets *timed_out (only requests that may time out pass it).
  FrameReader request(const FrameWriter& frame, Milliseconds budget, const std::string& what,
                      bool* timed_out = nullptr);

  std::unique_ptr<Impl> impl_;
};

}  // namespace ringgrad::comm
