// The backward engine. backward(root) first counts, for every variable reachable from root,
// how many recorded uses it has (its dependencies). It then runs nodes from a ready queue
// ordered by creation (latest first, so roughly forward order reversed): a node's output
// gradient is complete once every use has contributed. A leaf whose count reaches zero has its
// final gradient, and its grad-ready hooks fire right then; that is what lets DDP start a
// bucket's all-reduce while the rest of backward is still running. The graph is consumed:
// each node is released after it runs, freeing what it saved.
#include <atomic>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "kernels/ops.h"
#include "nn/autograd/variable.h"

namespace ringgrad::nn {

namespace {

thread_local bool t_grad_enabled = true;
thread_local std::vector<std::function<void()>>* t_backward_callbacks = nullptr;

// Makes queued callbacks available for the duration of one backward on this thread.
class CallbackScope {
 public:
  CallbackScope() : previous_(t_backward_callbacks) { t_backward_callbacks = &callbacks_; }
  ~CallbackScope() { t_backward_callbacks = previous_; }
  void run() {
    for (size_t i = 0; i < callbacks_.size(); ++i) callbacks_[i]();  // may queue more
  }

 private:
  std::vector<std::function<void()>> callbacks_;
  std::vector<std::function<void()>>* previous_;
};

// The first gradient of a backward is taken over without a copy when nothing else holds it
// and the leaf's gradient storage is not pinned (a DDP bucket view is, and gets copied into).
void accumulate_leaf(VariableImpl& leaf, const Tensor& g) {
  const bool fresh = !leaf.grad.defined() || leaf.grad_is_zero;
  const bool unshared = g.storage().use_count() == 1 && g.offset_bytes() == 0;
  if (fresh && !leaf.grad_pinned && unshared) {
    leaf.grad = g;
  } else if (!leaf.grad.defined()) {
    leaf.grad = g.clone();
  } else if (leaf.grad_is_zero) {
    leaf.grad.copy_from(g);
  } else {
    kernels::add_(leaf.grad, g);
  }
  leaf.grad_is_zero = false;
}

// Recorded uses of every variable reachable from `start` through the graph (start: 0).
std::unordered_map<VariableImpl*, int> count_uses(VariableImpl* start) {
  std::unordered_map<VariableImpl*, int> uses;
  std::vector<VariableImpl*> stack = {start};
  uses[start] = 0;
  while (!stack.empty()) {
    VariableImpl* v = stack.back();
    stack.pop_back();
    if (!v->grad_fn) continue;
    for (const VariablePtr& in : v->grad_fn->inputs) {
      if (!in) continue;
      auto [it, first_visit] = uses.try_emplace(in.get(), 0);
      it->second++;
      if (first_visit) stack.push_back(in.get());
    }
  }
  return uses;
}

// A variable used twice (a residual block's input) gets the second gradient added into the
// first when nothing else holds the first; a gradient passed through unchanged (add's, reshape's)
// is also another variable's or the node's own, and is summed out of place.
void accumulate_pending(VariableImpl& v, const Tensor& g) {
  if (!v.pending_grad.defined()) {
    v.pending_grad = g;
  } else if (v.pending_grad.storage().use_count() == 1) {
    kernels::add_(v.pending_grad, g);
  } else {
    Tensor sum = Tensor::empty(g.shape(), g.dtype(), g.device());
    kernels::add(sum, v.pending_grad, g);
    v.pending_grad = sum;
  }
}

struct LaterFirst {
  bool operator()(const VariablePtr& a, const VariablePtr& b) const {
    return a->grad_fn->sequence < b->grad_fn->sequence;
  }
};

}  // namespace

Variable::Variable(Tensor value, bool requires_grad) : impl_(std::make_shared<VariableImpl>()) {
  impl_->value = std::move(value);
  impl_->requires_grad = requires_grad;
}

Variable Variable::from_node(Tensor value, std::shared_ptr<Node> node) {
  Variable v(std::move(value), true);
  v.impl_->grad_fn = std::move(node);
  return v;
}

Tensor& Variable::grad() {
  if (impl_->grad_is_zero) {
    impl_->grad.zero_();
    impl_->grad_is_zero = false;
  }
  return impl_->grad;
}

void Variable::set_grad(Tensor grad) {
  RG_CHECK(grad.shape() == impl_->value.shape(), "set_grad: gradient shape ", grad.shape().str(),
           " differs from the value's ", impl_->value.shape().str());
  impl_->grad = std::move(grad);  // a lazily zeroed gradient stays zero (grad_is_zero kept)
  impl_->grad_pinned = true;
}

void Variable::zero_grad() {
  if (impl_->grad.defined()) impl_->grad_is_zero = true;
}

void Variable::add_grad_ready_hook(GradReadyHook hook) {
  RG_CHECK(is_leaf(), "grad-ready hooks are for leaves (parameters)");
  impl_->grad_ready_hooks.push_back(std::move(hook));
}

void backward(const Variable& root) {
  RG_CHECK(root.defined() && root.requires_grad(), "backward: the root does not require grad");
  RG_CHECK_EQ(root.value().numel(), 1, "backward needs a scalar root, got shape ",
              root.shape().str());
  VariableImpl* start = root.impl().get();

  // Pass 1: count the uses of every reachable variable.
  std::unordered_map<VariableImpl*, int> uses = count_uses(start);

  // Pass 2: run nodes whose output gradient is complete.
  CallbackScope callbacks;
  Tensor seed = Tensor::empty(root.shape(), root.value().dtype(), root.value().device());
  seed.fill_(1.0);
  if (!start->grad_fn) {
    accumulate_leaf(*start, seed);
    for (auto& hook : start->grad_ready_hooks) hook();
    callbacks.run();
    return;
  }
  start->pending_grad = seed;
  // The queue owns what it holds: a consumed node releases its inputs.
  std::priority_queue<VariablePtr, std::vector<VariablePtr>, LaterFirst> ready;
  ready.push(root.impl());
  std::vector<Tensor> grad_inputs;
  while (!ready.empty()) {
    VariablePtr v = ready.top();
    ready.pop();
    std::shared_ptr<Node> node = std::move(v->grad_fn);
    Tensor grad_output = std::move(v->pending_grad);
    v->pending_grad = Tensor();
    v->requires_grad = false;  // consumed: this variable is no longer part of a graph
    grad_inputs.assign(node->inputs.size(), Tensor());
    node->backward(grad_output, grad_inputs);
    for (size_t i = 0; i < node->inputs.size(); ++i) {
      const VariablePtr& in = node->inputs[i];
      if (!in) continue;
      const Tensor& g = grad_inputs[i];
      const bool leaf = !in->grad_fn;
      if (g.defined()) {
        RG_CHECK(g.shape() == in->value.shape(), node->name(), " backward produced gradient ",
                 g.shape().str(), " for input ", i, " of shape ", in->value.shape().str());
        RG_CHECK(g.dtype() == in->value.dtype(), node->name(), " backward produced a ",
                 dtype_name(g.dtype()), " gradient for input ", i, " of dtype ",
                 dtype_name(in->value.dtype()));
        leaf ? accumulate_leaf(*in, g) : accumulate_pending(*in, g);
      }
      if (--uses[in.get()] > 0) continue;
      if (leaf) {
        for (auto& hook : in->grad_ready_hooks) hook();
      } else if (in->pending_grad.defined()) {
        ready.push(in);
      }
    }
  }
  callbacks.run();
}

std::unordered_set<const VariableImpl*> reachable_leaves(const Variable& root) {
  std::unordered_set<const VariableImpl*> leaves;
  if (!root.defined()) return leaves;
  for (const auto& [v, n] : count_uses(root.impl().get()))
    if (!v->grad_fn) leaves.insert(v);
  return leaves;
}

void queue_backward_callback(std::function<void()> callback) {
  RG_CHECK(t_backward_callbacks != nullptr,
           "queue_backward_callback is for grad-ready hooks, during backward()");
  t_backward_callbacks->push_back(std::move(callback));
}

bool grad_enabled() { return t_grad_enabled; }

NoGradGuard::NoGradGuard() : previous_(t_grad_enabled) { t_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { t_grad_enabled = previous_; }

bool any_requires_grad(std::initializer_list<const Variable*> inputs) {
  if (!t_grad_enabled) return false;
  for (const Variable* v : inputs)
    if (v && v->requires_grad()) return true;
  return false;
}

Variable make_result(Tensor value, std::shared_ptr<Node> node,
                     std::initializer_list<const Variable*> inputs) {
  static std::atomic<uint64_t> next_sequence{0};
  if (!node || !any_requires_grad(inputs)) return Variable(std::move(value));
  for (const Variable* v : inputs)
    node->inputs.push_back(v && v->requires_grad() ? v->impl() : nullptr);
  node->sequence = next_sequence++;
  return Variable::from_node(std::move(value), std::move(node));
}

}  // namespace ringgrad::nn
