// HashStore: an in-process Store (a map, a mutex and a condition variable) for tests that run
// several ranks as threads. Thread-safe; waits honour their timeouts like TcpStore's.
#pragma once
#include <condition_variable>
#include <map>
#include <mutex>

#include "comm/store/store.h"

namespace ringgrad::comm {

class HashStore : public Store {
 public:
  using Store::get;
  using Store::wait;

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, Milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  void wait(const std::vector<std::string>& keys, Milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;

 private:
  bool has_all(const std::vector<std::string>& keys) const;  // caller holds mu_

  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::string> data_;
};

// The counter semantics shared by every store: the stored decimal plus delta.
int64_t add_to_counter(std::string& stored, int64_t delta, const std::string& key);

}  // namespace ringgrad::comm
