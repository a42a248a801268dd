// Module tree traversal, state dicts and device moves.
#include "nn/modules/module.h"

#include <map>

namespace ringgrad::nn {

// Calls f(full_name, module) for this module and all descendants, parents first.
template <class F>
void Module::visit(const std::string& prefix, F&& f) {
  f(prefix, *this);
  for (auto& [name, child] : children_) child->visit(prefix + name + ".", f);
}

std::vector<std::pair<std::string, Variable>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Variable>> out;
  const_cast<Module*>(this)->visit("", [&](const std::string& prefix, Module& m) {
    for (auto& [name, p] : m.params_) out.emplace_back(prefix + name, p);
  });
  return out;
}

std::vector<Variable> Module::parameters() const {
  std::vector<Variable> out;
  for (auto& [name, p] : named_parameters()) out.push_back(p);
  return out;
}

std::vector<std::pair<std::string, Tensor*>> Module::named_buffers() {
  std::vector<std::pair<std::string, Tensor*>> out;
  visit("", [&](const std::string& prefix, Module& m) {
    for (auto& [name, b] : m.buffers_) out.emplace_back(prefix + name, &b);
  });
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::state_dict() {
  std::vector<std::pair<std::string, Tensor>> out;
  visit("", [&](const std::string& prefix, Module& m) {
    for (auto& [name, p] : m.params_) out.emplace_back(prefix + name, p.value());
    for (auto& [name, b] : m.buffers_) out.emplace_back(prefix + name, b);
  });
  return out;
}

void Module::load_state_dict(const std::vector<std::pair<std::string, Tensor>>& entries,
                             bool strict) {
  std::map<std::string, const Tensor*> by_name;
  for (auto& [name, t] : entries) by_name[name] = &t;
  size_t used = 0;
  for (auto& [name, dst] : state_dict()) {
    auto it = by_name.find(name);
    if (it == by_name.end()) RG_THROW(InvalidArgument, "state dict has no entry '", name, "'");
    const Tensor& src = *it->second;
    if (src.shape() != dst.shape())
      RG_THROW(InvalidArgument, "state dict entry '", name, "' has shape ", src.shape().str(),
               ", the model expects ", dst.shape().str());
    Tensor target = dst;  // aliases the live parameter or buffer
    target.copy_from(src.to(dst.dtype()).to(dst.device()));
    ++used;
  }
  if (strict && used != entries.size()) {
    for (auto& [name, t] : entries) {
      bool known = false;
      for (auto& [n, d] : state_dict()) known |= n == name;
      if (!known) RG_THROW(InvalidArgument, "state dict entry '", name, "' is not in the model");
    }
  }
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (auto& [name, p] : named_parameters()) n += p.value().numel();
  return n;
}

void Module::apply(const std::function<void(Module&)>& f) {
  visit("", [&](const std::string&, Module& m) { f(m); });
}

void Module::train(bool on) {
  visit("", [&](const std::string&, Module& m) { m.training_ = on; });
}

void Module::to(Device device) {
  visit("", [&](const std::string&, Module& m) {
    for (auto& [name, p] : m.params_) p.value() = p.value().to(device);
    for (auto& [name, b] : m.buffers_) b = b.to(device);
  });
}

Variable& Module::register_parameter(const std::string& name, Tensor value) {
  params_.emplace_back(name, Variable(std::move(value), /*requires_grad=*/true));
  return params_.back().second;
}

Tensor& Module::register_buffer(const std::string& name, Tensor value) {
  buffers_.emplace_back(name, std::move(value));
  return buffers_.back().second;
}

void Sequential::push_back(std::shared_ptr<Module> m) {
  register_module(std::to_string(layers_.size()), m);
  layers_.push_back(std::move(m));
}

Variable Sequential::forward(const Variable& x) {
  Variable h = x;
  for (auto& layer : layers_) h = layer->forward(h);
  return h;
}

}  // namespace ringgrad::nn
