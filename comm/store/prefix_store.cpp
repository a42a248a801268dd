// PrefixStore implementation: every call forwards to the base store with prefixed keys.
#include "comm/store/prefix_store.h"

#include "core/error.h"

namespace ringgrad::comm {

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : prefix_(std::move(prefix)), base_(std::move(base)) {
  RG_CHECK(base_ != nullptr, "PrefixStore '", prefix_, "' needs a base store");
  set_timeout(base_->timeout());
}

std::vector<std::string> PrefixStore::full(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(full(k));
  return out;
}

void PrefixStore::set(const std::string& key, const std::string& value) {
  base_->set(full(key), value);
}
std::string PrefixStore::get(const std::string& key, Milliseconds timeout) {
  return base_->get(full(key), timeout);
}
int64_t PrefixStore::add(const std::string& key, int64_t delta) {
  return base_->add(full(key), delta);
}
std::string PrefixStore::compare_set(const std::string& key, const std::string& expected,
                                     const std::string& desired) {
  return base_->compare_set(full(key), expected, desired);
}
void PrefixStore::wait(const std::vector<std::string>& keys, Milliseconds timeout) {
  base_->wait(full(keys), timeout);
}
bool PrefixStore::check(const std::vector<std::string>& keys) { return base_->check(full(keys)); }
bool PrefixStore::delete_key(const std::string& key) { return base_->delete_key(full(key)); }
int64_t PrefixStore::num_keys() { return base_->num_keys(); }

}  // namespace ringgrad::comm
