// TorchStore: ringgrad's comm::Store over the c10d::Store PyTorch hands a backend (a
// PrefixStore over its TCPStore), so the ring rendezvouses through the job's one store and
// port. c10d's timeout errors become our TimeoutError, its other store errors our IoError,
// which is what the socket transport's setup expects.
#pragma once
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "comm/store/store.h"

namespace ringgrad::torch_backend {

class TorchStore : public comm::Store {
 public:
  explicit TorchStore(c10::intrusive_ptr<c10d::Store> store);

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, comm::Milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override;
  void wait(const std::vector<std::string>& keys, comm::Milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  int64_t num_keys() override;

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

}  // namespace ringgrad::torch_backend
