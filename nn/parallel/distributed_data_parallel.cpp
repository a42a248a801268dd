// DistributedDataParallel wiring: replica checks, gradient views from the Reducer, hooks, and
// the per-forward buffer broadcast (two coalesced broadcasts: float buffers, integer buffers).
#include "nn/parallel/distributed_data_parallel.h"

#include <cstring>

#include "comm/reducer/model_sync.h"

namespace ringgrad::nn {

namespace {

// Concatenates tensors into flat (allocated on first use) or copies flat back into them.
void pack(Tensor& flat, const std::vector<Tensor>& parts, DType dtype) {
  int64_t n = 0;
  for (const Tensor& t : parts) n += t.numel();
  if (!flat.defined()) flat = Tensor::empty({n}, dtype);
  size_t offset = 0;
  for (const Tensor& t : parts) {
    std::memcpy(static_cast<char*>(flat.raw_data()) + offset, t.raw_data(), t.nbytes());
    offset += t.nbytes();
  }
}
void unpack(const Tensor& flat, std::vector<Tensor>& parts) {
  size_t offset = 0;
  for (Tensor& t : parts) {
    std::memcpy(t.raw_data(), static_cast<const char*>(flat.raw_data()) + offset, t.nbytes());
    offset += t.nbytes();
  }
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<Module> module,
                                                 comm::ProcessGroup& group, DdpOptions options)
    : module_(std::move(module)), group_(group), options_(options) {
  comm::NamedTensorRefs entries, buffer_entries;
  std::vector<std::string> names;
  std::vector<Tensor> values;
  for (auto& [name, p] : module_->named_parameters()) {
    entries.emplace_back(name, p.value());
    names.push_back(name);
    values.push_back(p.value());
    params_.push_back(p);
  }
  for (auto& [name, b] : module_->named_buffers()) {
    buffer_entries.emplace_back(name, *b);
    (b->dtype() == DType::f32 ? float_buffers_ : int_buffers_).push_back(*b);
  }
  comm::check_same_across_ranks(group_, entries, "model parameters");
  comm::check_same_across_ranks(group_, buffer_entries, "model buffers");
  std::vector<Tensor> everything = values;
  for (auto& [name, t] : buffer_entries) everything.push_back(t);
  comm::broadcast_tensors(group_, everything, 0);

  reducer_ = std::make_unique<comm::Reducer>(values, names, group_, options_.reducer,
                                             [this](const std::vector<Tensor>& views) {
                                               for (size_t i = 0; i < views.size(); ++i)
                                                 params_[i].set_grad(views[i]);
                                             });
  for (size_t i = 0; i < params_.size(); ++i)
    params_[i].add_grad_ready_hook([this, i] { on_grad_ready(i); });
}

void DistributedDataParallel::broadcast_buffers() {
  if (!options_.broadcast_buffers || group_.size() == 1) return;
  comm::BroadcastOptions opts;
  std::vector<comm::WorkPtr> works;
  if (!float_buffers_.empty()) {
    pack(float_flat_, float_buffers_, DType::f32);
    works.push_back(group_.broadcast(float_flat_, opts));
  }
  if (!int_buffers_.empty()) {
    pack(int_flat_, int_buffers_, DType::i64);
    works.push_back(group_.broadcast(int_flat_, opts));
  }
  for (auto& w : works) w->wait();
  if (!float_buffers_.empty()) unpack(float_flat_, float_buffers_);
  if (!int_buffers_.empty()) unpack(int_flat_, int_buffers_);
}

Variable DistributedDataParallel::forward(const Variable& x) {
  broadcast_buffers();
  Variable out = module_->forward(x);
  if (grad_enabled() && sync_ && module_->is_training()) {
    RG_CHECK(!backward_pending_,
             "DDP: forward called twice without a backward in between; "
             "use no_sync() for forwards whose gradients are accumulated locally");
    reducer_->prepare_for_backward();
    backward_pending_ = true;
    if (options_.find_unused_parameters) mark_unused_ready(out);
  }
  return out;
}

void DistributedDataParallel::mark_unused_ready(const Variable& out) {
  const auto reached = reachable_leaves(out);
  for (size_t i = 0; i < params_.size(); ++i) {
    if (reached.count(params_[i].impl().get())) continue;
    params_[i].grad();  // materialises a lazily zeroed gradient, so its slot holds zeros
    reducer_->mark_ready(i);
  }
}

void DistributedDataParallel::on_grad_ready(size_t param) {
  if (!backward_pending_) return;  // no_sync, or a backward without a DDP forward
  if (!finalize_queued_) {
    finalize_queued_ = true;
    queue_backward_callback([this] {
      finalize_queued_ = false;
      backward_pending_ = false;
      reducer_->finalize_backward();
    });
  }
  reducer_->mark_ready(param);
}

}  // namespace ringgrad::nn
