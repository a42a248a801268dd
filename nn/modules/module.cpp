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
  // Every mismatch is collected and named at once: one error for a file that does not fit,
  // and nothing is copied unless all of it fits.
  std::map<std::string, const Tensor*> by_name;
  for (auto& [name, t] : entries) by_name[name] = &t;
  std::vector<std::string> missing, misshapen, unexpected;
  const auto own = state_dict();
  std::map<std::string, bool> known;
  for (auto& [name, dst] : own) {
    known[name] = true;
    auto it = by_name.find(name);
    if (it == by_name.end())
      missing.push_back("'" + name + "'");
    else if (it->second->shape() != dst.shape())
      misshapen.push_back(str_cat("'", name, "' (", it->second->shape().str(), " in the file, ",
                                  dst.shape().str(), " in the model)"));
  }
  if (strict)
    for (auto& [name, t] : entries)
      if (!known.count(name)) unexpected.push_back("'" + name + "'");
  if (!missing.empty() || !misshapen.empty() || !unexpected.empty()) {
    // The first few names of each kind: a file of another model misses dozens, on one line.
    auto list = [](const char* what, const std::vector<std::string>& names) {
      constexpr size_t kShown = 4;
      std::string out;
      for (size_t i = 0; i < names.size() && i < kShown; ++i)
        out += (out.empty() ? "" : ", ") + names[i];
      if (names.size() > kShown) out += str_cat(" and ", names.size() - kShown, " more");
      return names.empty() ? std::string() : str_cat(what, " ", out, "; ");
    };
    std::string message =
        list("missing", missing) + list("misshapen", misshapen) + list("unexpected", unexpected);
    message.resize(message.size() - 2);
    RG_THROW(InvalidArgument, "state dict does not fit the model: ", message);
  }
  for (auto& [name, dst] : own) {
    Tensor target = dst;  // aliases the live parameter or buffer
    const Tensor& src = *by_name.at(name);
    target.copy_from(src.to(dst.dtype()).to(dst.device()));
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
