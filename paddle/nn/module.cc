// Parameter registry, naming, state dicts and train/eval mode.
#include "paddle/nn/module.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "paddle/core/status.h"
#include "paddle/nn/device_dispatch.h"

namespace paddle::nn {

Variable Module::RegisterParameter(const std::string& name, Tensor value) {
  Variable v(std::move(value), /*requires_grad=*/true, prefix_ + name);
  parameters_.emplace_back(name, v);
  return v;
}

Variable Module::RegisterBuffer(const std::string& name, Tensor value) {
  Variable v(std::move(value), /*requires_grad=*/false, prefix_ + name);
  buffers_.emplace_back(name, v);
  return v;
}

namespace {

// Replaces the entry named `name` in `entries`, or appends it; true when it replaced one.
template <typename T>
bool Upsert(std::vector<std::pair<std::string, T>>& entries, const std::string& name, T value) {
  for (auto& [n, v] : entries) {
    if (n == name) {
      v = std::move(value);
      return true;
    }
  }
  entries.emplace_back(name, std::move(value));
  return false;
}

template <typename T>
bool Contains(const std::vector<std::pair<std::string, T>>& entries, const std::string& name) {
  for (const auto& [n, v] : entries) {
    if (n == name) return true;
  }
  return false;
}

}  // namespace

absl::Status Module::SetParameter(const std::string& name, Variable v) {
  if (!v.defined() || !v.is_leaf()) {
    return absl::InvalidArgumentError(absl::StrCat("parameter '", name, "' of the ", type_,
                                                   " must be a defined leaf tensor (detach() it)"));
  }
  if (Contains(buffers_, name) || Contains(children_, name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", type_, " already has a buffer or ", "submodule named '", name, "'"));
  }
  v.set_name(prefix_ + name);
  Upsert(parameters_, name, std::move(v));
  return absl::OkStatus();
}

absl::Status Module::SetBuffer(const std::string& name, Variable v) {
  if (!v.defined() || v.requires_grad()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "buffer '", name, "' of the ", type_, " must be a defined tensor without requires_grad"));
  }
  if (Contains(parameters_, name) || Contains(children_, name)) {
    return absl::InvalidArgumentError(absl::StrCat("the ", type_, " already has a parameter or ",
                                                   "submodule named '", name, "'"));
  }
  v.set_name(prefix_ + name);
  Upsert(buffers_, name, std::move(v));
  return absl::OkStatus();
}

void Module::SetModule(const std::string& name, std::shared_ptr<Module> child) {
  child->Prefix(prefix_ + name + ".");
  Upsert(children_, name, std::move(child));
}

void Module::AddChild(const std::string& name, std::shared_ptr<Module> child) {
  child->Prefix(prefix_ + name + ".");
  children_.emplace_back(name, std::move(child));
}

void Module::Prefix(const std::string& prefix) {
  prefix_ = prefix + prefix_;
  for (auto& [name, v] : parameters_) v.set_name(prefix + v.name());
  for (auto& [name, v] : buffers_) v.set_name(prefix + v.name());
  for (auto& [name, child] : children_) child->Prefix(prefix);
}

std::vector<std::pair<std::string, Variable>> Module::NamedParameters() const {
  std::vector<std::pair<std::string, Variable>> out;
  for (const auto& [name, v] : parameters_) out.emplace_back(v.name(), v);
  for (const auto& [name, child] : children_) {
    for (auto& entry : child->NamedParameters()) out.push_back(std::move(entry));
  }
  return out;
}

std::vector<Variable> Module::Parameters() const {
  std::vector<Variable> out;
  for (auto& [name, v] : NamedParameters()) out.push_back(v);
  return out;
}

std::vector<std::pair<std::string, Variable>> Module::NamedBuffers() const {
  std::vector<std::pair<std::string, Variable>> out;
  for (const auto& [name, v] : buffers_) out.emplace_back(v.name(), v);
  for (const auto& [name, child] : children_) {
    for (auto& entry : child->NamedBuffers()) out.push_back(std::move(entry));
  }
  return out;
}

std::map<std::string, Tensor> Module::StateDict() const {
  std::map<std::string, Tensor> out;
  for (const auto& [name, v] : NamedParameters()) out[name] = v.data();
  for (const auto& [name, v] : NamedBuffers()) out[name] = v.data();
  return out;
}

absl::Status Module::LoadStateDict(const std::map<std::string, Tensor>& state, bool strict) {
  std::vector<std::pair<std::string, Variable>> entries = NamedParameters();
  for (auto& entry : NamedBuffers()) entries.push_back(std::move(entry));
  // Check everything before changing anything.
  for (const auto& [name, v] : entries) {
    auto it = state.find(name);
    if (it == state.end()) {
      if (strict) return absl::NotFoundError(absl::StrCat("state dict has no entry '", name, "'"));
      continue;
    }
    if (it->second.shape() != v.shape() || it->second.dtype() != v.data().dtype()) {
      return absl::InvalidArgumentError(absl::StrCat("state dict entry '", name, "' is ",
                                                     it->second.ToString(), ", the model has ",
                                                     v.data().ToString()));
    }
  }
  if (strict && state.size() != entries.size()) {
    std::map<std::string, bool> known;
    for (const auto& [name, v] : entries) known[name] = true;
    for (const auto& [name, t] : state) {
      if (!known.count(name)) {
        return absl::InvalidArgumentError(
            absl::StrCat("state dict entry '", name, "' matches nothing in the ", type_));
      }
    }
  }
  for (auto& [name, v] : entries) {
    auto it = state.find(name);
    if (it == state.end()) continue;
    Tensor dst = v.data();
    RETURN_IF_ERROR(internal::CopyInto(it->second, dst));
  }
  return absl::OkStatus();
}

void Module::ZeroGrad() {
  for (auto& [name, v] : NamedParameters()) v.ZeroGrad();
}

absl::Status Module::To(Device device) {
  RETURN_IF_ERROR(internal::CheckDeviceUsable(device));
  std::vector<std::pair<std::string, Variable>> entries = NamedParameters();
  for (auto& entry : NamedBuffers()) entries.push_back(std::move(entry));
  // Copy everything first, so that a failure leaves the module where it was.
  std::vector<Tensor> moved;
  moved.reserve(entries.size());
  for (const auto& [name, v] : entries) {
    absl::StatusOr<Tensor> t = internal::MoveTensor(v.data(), device);
    if (!t.ok()) {
      return Annotate(t.status(), absl::StrCat("moving '", name, "' of the ", type_, " to ",
                                               device.ToString()));
    }
    moved.push_back(*std::move(t));
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    Variable& v = entries[i].second;
    if (v.data().device() == device) continue;
    v.ResetGrad();
    RETURN_IF_ERROR(v.set_data(moved[i]));  // same shape and dtype: cannot fail
  }
  return absl::OkStatus();
}

Device Module::device() const {
  for (const auto& [name, v] : NamedParameters()) return v.data().device();
  for (const auto& [name, v] : NamedBuffers()) return v.data().device();
  return Device::Cpu();
}

void Module::Train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->Train(on);
}

int64_t Module::NumParameters() const {
  int64_t n = 0;
  for (const auto& [name, v] : NamedParameters()) n += v.data().numel();
  return n;
}

}  // namespace paddle::nn
