// comm::Store: the small key-value interface every rendezvous and process group talks to
// (PyTorch c10d's vocabulary). Values are byte strings; add() keeps a decimal counter.
// Implementations: HashStore (in-process), TcpStore (client of TcpStoreServer), PrefixStore.
// Every blocking call takes a timeout (default: the store's timeout()) and throws TimeoutError
// naming the keys it waited for; a lost connection throws IoError naming the address.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace ringgrad::comm {

using Milliseconds = std::chrono::milliseconds;

class Store {
 public:
  static constexpr Milliseconds kDefaultTimeout{300'000};

  virtual ~Store() = default;

  virtual void set(const std::string& key, const std::string& value) = 0;
  // Waits until `key` exists, up to `timeout`.
  virtual std::string get(const std::string& key, Milliseconds timeout) = 0;
  std::string get(const std::string& key) { return get(key, timeout_); }
  // Atomically adds `delta` to the integer stored at `key` (missing = 0); returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Sets `desired` if the key holds `expected` (or is missing and `expected` is empty);
  // returns the value held afterwards, so the caller learns whether it won.
  virtual std::string compare_set(const std::string& key, const std::string& expected,
                                  const std::string& desired) = 0;
  // Waits until every key exists, up to `timeout`.
  virtual void wait(const std::vector<std::string>& keys, Milliseconds timeout) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }
  // True when every key exists; never blocks.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  virtual bool delete_key(const std::string& key) = 0;  // true if it existed
  virtual int64_t num_keys() = 0;

  Milliseconds timeout() const { return timeout_; }
  void set_timeout(Milliseconds timeout) { timeout_ = timeout; }

 private:
  Milliseconds timeout_ = kDefaultTimeout;
};

// "200 ms", "5 s", "2 min": durations in error messages.
std::string format_duration(Milliseconds d);

// Throws TimeoutError "store get timed out after 200 ms waiting for key 'k' (store host:port)";
// `where` (the store's address) may be empty.
[[noreturn]] void throw_store_timeout(const std::string& op,
                                      const std::vector<std::string>& missing, Milliseconds timeout,
                                      const std::string& where);

// Every one of `world` ranks calls this once with the same `name`; returns when all have arrived
// or throws TimeoutError "barrier 'name': 1/2 ranks arrived after 5 s; missing ranks: 1".
// Keys live under "barrier/<name>/", so each name is one-shot.
void store_barrier(Store& store, const std::string& name, int rank, int world,
                   Milliseconds timeout);

}  // namespace ringgrad::comm
