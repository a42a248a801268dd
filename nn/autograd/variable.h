// Variable: a Tensor that autograd tracks. A leaf (a parameter, or an input) accumulates its
// gradient in grad(); a non-leaf remembers the Node that made it. Nodes hold the inputs that
// need gradients and whatever they saved for backward; backward() (engine.cpp) walks them.
// The idea is micrograd's, with tensors: value, grad, and a closure that pushes grad back.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/tensor.h"

namespace ringgrad::nn {

struct VariableImpl;
using VariablePtr = std::shared_ptr<VariableImpl>;

// One recorded operation. inputs[i] is the i-th input that needs a gradient (or null when that
// input does not); backward fills grad_inputs[i] for each non-null input.
struct Node {
  std::vector<VariablePtr> inputs;
  uint64_t sequence = 0;  // creation order: later nodes run first in backward
  virtual ~Node() = default;
  virtual const char* name() const = 0;
  virtual void backward(const Tensor& grad_output, std::vector<Tensor>& grad_inputs) = 0;
};

using GradReadyHook = std::function<void()>;

struct VariableImpl {
  Tensor value;
  Tensor grad;                // leaves: the accumulated gradient
  bool grad_is_zero = false;  // zero_grad() is lazy: the next gradient overwrites
  bool grad_pinned = false;   // set_grad() storage: accumulate into it, never replace
  bool requires_grad = false;
  std::shared_ptr<Node> grad_fn;                // null for leaves
  std::vector<GradReadyHook> grad_ready_hooks;  // leaves: fired once per backward, when final
  Tensor pending_grad;                          // non-leaves: gradient being summed during backward
};

class Variable {
 public:
  Variable() = default;
  explicit Variable(Tensor value, bool requires_grad = false);
  static Variable from_node(Tensor value, std::shared_ptr<Node> node);

  bool defined() const { return impl_ != nullptr; }
  const Tensor& value() const { return impl_->value; }
  Tensor& value() { return impl_->value; }
  const Shape& shape() const { return impl_->value.shape(); }
  bool requires_grad() const { return impl_ && impl_->requires_grad; }
  bool is_leaf() const { return impl_->grad_fn == nullptr; }
  const VariablePtr& impl() const { return impl_; }

  // The accumulated gradient of a leaf (undefined before the first backward). A gradient
  // zeroed lazily by zero_grad() is materialised as zeros here.
  Tensor& grad();
  // Sets the gradient storage, e.g. to a view into a DDP bucket; later gradients accumulate
  // into it in place. A gradient zeroed by zero_grad() stays zero whatever `grad` holds.
  void set_grad(Tensor grad);
  void zero_grad();  // lazy: marks the gradient as zero without touching memory
  // Called once per backward when this leaf's gradient is final (the DDP bucket hook).
  void add_grad_ready_hook(GradReadyHook hook);

 private:
  VariablePtr impl_;
};

// Runs backward from a scalar (one-element) variable: d(root)/d(root) = 1. Callbacks queued
// during it (queue_backward_callback) run, in order, after the last node.
void backward(const Variable& root);
// The leaves (parameters, inputs) a backward from `root` would reach: what DDP's
// find_unused_parameters uses to find, after forward, the parameters that get no gradient.
std::unordered_set<const VariableImpl*> reachable_leaves(const Variable& root);
// For grad-ready hooks: run `callback` once this backward has finished (DDP waits for its
// buckets there). Throws outside a backward.
void queue_backward_callback(std::function<void()> callback);

// Grad mode: while a NoGradGuard lives, operations record no graph (evaluation, updates).
bool grad_enabled();
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// For ops: whether the result of an op on these inputs needs a node.
bool any_requires_grad(std::initializer_list<const Variable*> inputs);
// Builds the output of an op: records node (inputs filled from those that require grad).
Variable make_result(Tensor value, std::shared_ptr<Node> node,
                     std::initializer_list<const Variable*> inputs);

}  // namespace ringgrad::nn
