// StoreData: byte and key accounting around a map.
#include "comm/store/store_data.h"

#include "core/error.h"

namespace ringgrad::comm {

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
    RG_THROW(InvalidArgument, "store is full: writing '", key, "' (", value.size(),
             " bytes) would hold ", bytes, " bytes, over its cap of ", max_bytes_,
             " (RINGGRAD_STORE_MAX_MB on the store's host raises it)");
  bytes_ = bytes;
  if (it == values_.end())
    values_.emplace(key, std::move(value));
  else
    it->second = std::move(value);
}

bool StoreData::erase(const std::string& key) {
  auto it = values_.find(key);
  if (it == values_.end()) return false;
  bytes_ -= key.size() + it->second.size();
  values_.erase(it);
  return true;
}

}  // namespace ringgrad::comm
