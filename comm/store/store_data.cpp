// StoreData: byte and key accounting around a map.
#include "comm/store/store_data.h"

#include <algorithm>

#include "comm/store/hash_store.h"
#include "core/env.h"
#include "core/error.h"

namespace ringgrad::comm {

namespace {

size_t limit_from_env(const char* name, size_t fallback, size_t max) {
  const auto text = env_get(name);
  if (!text) return fallback;
  const bool digits =
      text->size() <= 12 && text->find_first_not_of("0123456789") == std::string::npos;
  const size_t value = digits ? std::stoull(*text) : 0;
  if (value < 1 || value > max)
    RG_THROW(InvalidArgument, name, "='", text->substr(0, 24),
             "' must be a whole number from 1 to ", max);
  return value;
}

// A cap in a message: "64 MiB", or bytes when it is not whole MiB.
std::string shown_bytes(size_t n) {
  return n % (1u << 20) == 0 ? str_cat(n >> 20, " MiB") : str_cat(n, " bytes");
}

// A key in a message: a hostile key can be megabytes long.
std::string shown_key(const std::string& key) {
  return key.size() <= 64 ? "'" + key + "'" : "'" + key.substr(0, 64) + "...'";
}

}  // namespace

size_t store_max_bytes_from_env(size_t fallback) {
  const size_t mib = limit_from_env("RINGGRAD_STORE_MAX_MB", 0, size_t{1} << 20);
  return mib ? mib << 20 : fallback;
}

size_t store_max_keys_from_env(size_t fallback) {
  return limit_from_env("RINGGRAD_STORE_MAX_KEYS", fallback, 1'000'000'000);
}

size_t store_max_connections_from_env(size_t fallback) {
  return limit_from_env("RINGGRAD_STORE_MAX_CONNECTIONS", fallback, 1'000'000);
}

void check_store_keys_for(int ranks) {
  const size_t needed = 256 + 64 * static_cast<size_t>(std::max(ranks, 1));
  const size_t cap = store_max_keys_from_env(kDefaultStoreMaxKeys);
  if (cap < needed)
    RG_THROW(InvalidArgument, "RINGGRAD_STORE_MAX_KEYS=", cap, " is below what a job of ", ranks,
             ranks == 1 ? " rank" : " ranks", " may write to its store (", needed,
             " keys: 256, and 64 per rank); raise it, or unset it for ", kDefaultStoreMaxKeys);
}

const std::string* StoreData::find(const std::string& key) const {
  auto it = values_.find(key);
  return it == values_.end() ? nullptr : &it->second;
}

void StoreData::put(const std::string& key, std::string value) {
  auto it = values_.find(key);
  const size_t old = it == values_.end() ? 0 : key.size() + it->second.size();
  const size_t bytes = bytes_ - old + key.size() + value.size();
  if (it == values_.end() && values_.size() >= max_keys_)
    RG_THROW(InvalidArgument, "store is full: it holds ", values_.size(),
             " keys, the most it takes (RINGGRAD_STORE_MAX_KEYS on the store's host raises it)");
  if (bytes > max_bytes_)
    RG_THROW(InvalidArgument, "store is full: writing ", shown_key(key), " (", value.size(),
             " bytes) would hold ", bytes, " bytes, over its cap of ", shown_bytes(max_bytes_),
             " (RINGGRAD_STORE_MAX_MB on the store's host raises it)");
  bytes_ = bytes;
  if (it == values_.end())
    values_.emplace(key, std::move(value));
  else
    it->second = std::move(value);
}

bool StoreData::has_all(const std::vector<std::string>& keys) const {
  for (const auto& k : keys)
    if (!contains(k)) return false;
  return true;
}

int64_t StoreData::add(const std::string& key, int64_t delta) {
  const std::string* old = find(key);
  std::string stored = old ? *old : std::string();
  const int64_t value = add_to_counter(stored, delta, key);
  put(key, std::move(stored));
  return value;
}

std::string StoreData::compare_set(const std::string& key, const std::string& expected,
                                   const std::string& desired) {
  const std::string* old = find(key);
  if (!old ? !expected.empty() : *old != expected) return old ? *old : expected;
  put(key, desired);
  return desired;
}

void StoreData::check_key_count(size_t count) const {
  if (count > max_keys_)
    RG_THROW(InvalidArgument, "a request naming ", count, " keys, more than the store may hold (",
             max_keys_, ", RINGGRAD_STORE_MAX_KEYS on the store's host)");
}

void StoreData::append(const std::string& key, const std::string& value) {
  const std::string* old = find(key);
  put(key, (old ? *old : std::string()) + value);
}

void StoreData::erase_prefix(const std::string& prefix) {
  auto it = values_.lower_bound(prefix);
  while (it != values_.end() && it->first.compare(0, prefix.size(), prefix) == 0) {
    bytes_ -= it->first.size() + it->second.size();
    it = values_.erase(it);
  }
}

size_t StoreData::count_prefix(const std::string& prefix) const {
  size_t n = 0;
  for (auto it = values_.lower_bound(prefix);
       it != values_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it)
    ++n;
  return n;
}

bool StoreData::erase(const std::string& key) {
  auto it = values_.find(key);
  if (it == values_.end()) return false;
  bytes_ -= key.size() + it->second.size();
  values_.erase(it);
  return true;
}

}  // namespace ringgrad::comm
