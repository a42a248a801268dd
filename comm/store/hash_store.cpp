// HashStore implementation.
#include "comm/store/hash_store.h"

#include <cerrno>
#include <cstdlib>

#include "core/error.h"

namespace ringgrad::comm {

int64_t add_to_counter(std::string& stored, int64_t delta, const std::string& key) {
  int64_t value = 0;
  if (!stored.empty()) {
    char* end = nullptr;
    errno = 0;
    value = std::strtoll(stored.c_str(), &end, 10);
    if (*end != '\0' || errno != 0)
      RG_THROW(InvalidArgument, "store add: key '", key, "' holds '", stored.substr(0, 32),
               "', which is not an integer counter");
  }
  if (__builtin_add_overflow(value, delta, &value))  // found by tests/fuzz: it was UB
    RG_THROW(InvalidArgument, "store add: key '", key.substr(0, 64), "' holds ",
             stored.substr(0, 32), ", and adding ", delta, " would overflow a 64-bit counter");
  stored = std::to_string(value);
  return value;
}

void HashStore::set(const std::string& key, const std::string& value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    data_[key] = value;
  }
  changed_.notify_all();
}

std::string HashStore::get(const std::string& key, Milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!changed_.wait_for(lock, timeout, [&] { return data_.count(key) > 0; }))
    throw_store_timeout("get", {key}, timeout, "");
  return data_.at(key);
}

int64_t HashStore::add(const std::string& key, int64_t delta) {
  int64_t value;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = data_.find(key);
    std::string stored = it == data_.end() ? std::string() : it->second;
    value = add_to_counter(stored, delta, key);
    data_[key] = stored;
  }
  changed_.notify_all();
  return value;
}

std::string HashStore::compare_set(const std::string& key, const std::string& expected,
                                   const std::string& desired) {
  std::string current;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = data_.find(key);
    if (it == data_.end()) {
      if (!expected.empty()) return expected;  // c10d: a missing key answers with `expected`
      data_[key] = desired;
      current = desired;
    } else {
      if (it->second == expected) it->second = desired;
      current = it->second;
    }
  }
  changed_.notify_all();
  return current;
}

bool HashStore::has_all(const std::vector<std::string>& keys) const {
  for (const auto& k : keys)
    if (!data_.count(k)) return false;
  return true;
}

void HashStore::wait(const std::vector<std::string>& keys, Milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (changed_.wait_for(lock, timeout, [&] { return has_all(keys); })) return;
  std::vector<std::string> missing;
  for (const auto& k : keys)
    if (!data_.count(k)) missing.push_back(k);
  throw_store_timeout("wait", missing, timeout, "");
}

bool HashStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mu_);
  return has_all(keys);
}

bool HashStore::delete_key(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return data_.erase(key) > 0;
}

int64_t HashStore::num_keys() {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(data_.size());
}

}  // namespace ringgrad::comm
