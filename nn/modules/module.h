// Module: a node of the model tree with named parameters (Variables that require grad),
// buffers (plain tensors such as BN running statistics) and child modules. Names compose with
// dots exactly as PyTorch's state_dict does ("layer1.0.conv1.weight"), and the order is
// PyTorch's too: a module's own parameters, then its own buffers, then each child in turn.
#pragma once
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nn/autograd/variable.h"

namespace ringgrad::nn {

class Module {
 public:
  virtual ~Module() = default;
  virtual Variable forward(const Variable& x) = 0;

  std::vector<std::pair<std::string, Variable>> named_parameters() const;
  std::vector<Variable> parameters() const;
  std::vector<std::pair<std::string, Tensor*>> named_buffers();
  // Parameters and buffers in PyTorch state_dict order (tensors alias the live values).
  std::vector<std::pair<std::string, Tensor>> state_dict();
  // Copies values in by name. Every entry of the model must be present with the same shape;
  // entries the model does not have are an error unless strict is false. On a mismatch it
  // throws InvalidArgument naming the missing, misshapen and unexpected entries, copying nothing.
  void load_state_dict(const std::vector<std::pair<std::string, Tensor>>& entries,
                       bool strict = true);
  int64_t num_parameters() const;

  void apply(const std::function<void(Module&)>& f);  // this module and every descendant
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void to(Device device);  // moves parameters and buffers

 protected:
  Variable& register_parameter(const std::string& name, Tensor value);
  Tensor& register_buffer(const std::string& name, Tensor value);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    children_.emplace_back(name, module);
    return module;
  }

 private:
  template <class F>
  void visit(const std::string& prefix, F&& f);
  // deques: references returned by register_* stay valid as more are registered.
  std::deque<std::pair<std::string, Variable>> params_;
  std::deque<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// Runs children in order (PyTorch's nn.Sequential; children are named "0", "1", ...).
class Sequential : public Module {
 public:
  void push_back(std::shared_ptr<Module> m);
  Variable forward(const Variable& x) override;
  size_t size() const { return layers_.size(); }

 private:
  std::vector<std::shared_ptr<Module>> layers_;
};

}  // namespace ringgrad::nn
