// TorchStore: each call forwards to c10d::Store and translates its errors.
#include "comm/torch_backend/torch_store.h"

#include "core/error.h"

namespace ringgrad::torch_backend {

namespace {

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }
std::string string_of(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

// Runs one store call, rethrowing c10d's errors as the ones comm code catches.
template <class F>
auto translated(const char* op, F&& call) -> decltype(call()) {
  try {
    return call();
  } catch (const c10::Error& e) {
    RG_THROW(IoError, "PyTorch store ", op, " failed: ", e.what_without_backtrace());
  }
}

}  // namespace

TorchStore::TorchStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {
  set_timeout(store_->getTimeout());
}

void TorchStore::set(const std::string& key, const std::string& value) {
  translated("set", [&] { store_->set(key, bytes_of(value)); });
}

std::string TorchStore::get(const std::string& key, comm::Milliseconds timeout) {
  wait({key}, timeout);  // c10d's get waits with the store's own timeout, not ours
  return translated("get", [&] { return string_of(store_->get(key)); });
}

int64_t TorchStore::add(const std::string& key, int64_t delta) {
  return translated("add", [&] { return store_->add(key, delta); });
}

std::string TorchStore::compare_set(const std::string& key, const std::string& expected,
                                    const std::string& desired) {
  return translated("compare_set", [&] {
    return string_of(store_->compareSet(key, bytes_of(expected), bytes_of(desired)));
  });
}

void TorchStore::wait(const std::vector<std::string>& keys, comm::Milliseconds timeout) {
  try {
    store_->wait(keys, timeout);
  } catch (const c10::DistNetworkError& e) {
    RG_THROW(IoError, "PyTorch store wait failed: ", e.what_without_backtrace());
  } catch (const c10::DistStoreError&) {  // what TCPStore throws when the deadline passes
    comm::throw_store_timeout("wait", keys, timeout, "PyTorch store");
  } catch (const c10::Error& e) {
    // FileStore (init_method="file://...") says "Wait timeout" in a plain c10::Error.
    if (std::string(e.what_without_backtrace()).find("Wait timeout") != std::string::npos)
      comm::throw_store_timeout("wait", keys, timeout, "PyTorch store");
    RG_THROW(IoError, "PyTorch store wait failed: ", e.what_without_backtrace());
  }
}

bool TorchStore::check(const std::vector<std::string>& keys) {
  return translated("check", [&] { return store_->check(keys); });
}

bool TorchStore::delete_key(const std::string& key) {
  return translated("delete_key", [&] { return store_->deleteKey(key); });
}

int64_t TorchStore::num_keys() {
  return translated("num_keys", [&] { return store_->getNumKeys(); });
}

}  // namespace ringgrad::torch_backend
