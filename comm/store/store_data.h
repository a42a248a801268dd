// StoreData: the TCP store server's keys and values, with a cap on their total size and count,
// so that one client (buggy or hostile) cannot grow the memory of the process hosting the
// store (rank 0 or a launcher) without bound. A write past a cap throws InvalidArgument, which
// the server returns to that client as an error; everyone else is served as before.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ringgrad::comm {

// Defaults; RINGGRAD_STORE_MAX_MB, RINGGRAD_STORE_MAX_KEYS and RINGGRAD_STORE_MAX_CONNECTIONS
// override them (read by the server).
constexpr size_t kDefaultStoreMaxBytes = 64u << 20;
constexpr size_t kDefaultStoreMaxKeys = 100'000;
constexpr size_t kDefaultStoreMaxConnections = 4096;

// The caps a server uses: RINGGRAD_STORE_MAX_MB (in MiB) and RINGGRAD_STORE_MAX_KEYS when set,
// else `fallback`. Throws InvalidArgument naming the variable unless it is a whole number in
// range (1 to 1048576 MiB, 1 to 1e9 keys, 1 to 1e6 connections).
size_t store_max_bytes_from_env(size_t fallback);
size_t store_max_keys_from_env(size_t fallback);
size_t store_max_connections_from_env(size_t fallback);

// Throws InvalidArgument, before a job starts, when RINGGRAD_STORE_MAX_KEYS is set below what a
// job of `ranks` processes may write (256 keys, and 64 per rank: rendezvous, barriers, addresses,
// progress), which it would otherwise find out when a late key is refused, say at the end.
void check_store_keys_for(int ranks);

class StoreData {
 public:
  StoreData(size_t max_bytes, size_t max_keys) : max_bytes_(max_bytes), max_keys_(max_keys) {}

  const std::string* find(const std::string& key) const;
  bool contains(const std::string& key) const { return values_.count(key) != 0; }
  bool has_all(const std::vector<std::string>& keys) const;
  void put(const std::string& key, std::string value);  // throws when a cap would be passed
  // Store::add and Store::compare_set (store.h), under the same caps.
  int64_t add(const std::string& key, int64_t delta);
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired);
  // PyTorch's APPEND: `value` added to the end of what `key` holds (missing: empty).
  void append(const std::string& key, const std::string& value);
  bool erase(const std::string& key);
  // Forgets every key that starts with `prefix` (a finished generation's worker keys).
  void erase_prefix(const std::string& prefix);
  size_t size() const { return values_.size(); }
  size_t count_prefix(const std::string& prefix) const;
  size_t bytes() const { return bytes_; }
  size_t max_bytes() const { return max_bytes_; }
  // Throws InvalidArgument for a get/wait/check naming more keys than the store may ever hold:
  // such a wait could never be answered, and its watchers would be memory without a cap.
  void check_key_count(size_t count) const;

 private:
  size_t max_bytes_, max_keys_;
  size_t bytes_ = 0;  // keys and values
  std::map<std::string, std::string> values_;
};

}  // namespace ringgrad::comm
