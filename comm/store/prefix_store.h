// PrefixStore: a view of another Store in which every key is "<prefix>/<key>", so independent
// users (rendezvous rounds, process groups) share one server without colliding.
#pragma once
#include <memory>

#include "comm/store/store.h"

namespace ringgrad::comm {

class PrefixStore : public Store {
 public:
  using Store::get;
  using Store::wait;

  PrefixStore(std::string prefix, std::shared_ptr<Store> base);

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, Milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  void wait(const std::vector<std::string>& keys, Milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  // Counts every key of the underlying store (as c10d does): a prefix is not a namespace
  // the server knows about.
  int64_t num_keys() override;

  const std::shared_ptr<Store>& base() const { return base_; }

 private:
  std::string full(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> full(const std::vector<std::string>& keys) const;

  std::string prefix_;
  std::shared_ptr<Store> base_;
};

}  // namespace ringgrad::comm
