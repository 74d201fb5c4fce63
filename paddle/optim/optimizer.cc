// Parameter validation, the Step() driver, and checkpoint state shared by every optimizer.
#include "paddle/optim/optimizer.h"

#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "paddle/core/autograd/grad_mode.h"
#include "paddle/core/status.h"

#if PADDLE_WITH_CUDA
#include "paddle/core/cuda/cuda_allocator.h"
#include "paddle/core/cuda/cuda_copy.h"
#include "paddle/ops/cuda/elementwise.h"
#include "paddle/ops/cuda/handles.h"
#endif

namespace paddle::optim {
namespace {

std::string StepKey() { return "optim/step"; }
std::string ParamKey(const std::string& param, const std::string& what) {
  return absl::StrCat("optim/", param, "/", what);
}

bool SupportedDType(DType d) { return d == DType::kFloat32 || d == DType::kFloat64; }

// Zeroed state like `value` on its device.
absl::StatusOr<Tensor> ZerosLike(const Tensor& value) {
  if (value.device().is_cpu()) return Tensor::Zeros(value.shape(), value.dtype());
#if PADDLE_WITH_CUDA
  ASSIGN_OR_RETURN(Allocator * allocator, CudaAllocator(value.device().index));
  ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(value.shape(), value.dtype(), allocator));
  RETURN_IF_ERROR(ops::cuda::Fill(&t, 0.0f));
  return t;
#else
  return absl::FailedPreconditionError(
      absl::StrCat("optimizer state for ", value.ToString(), ": built without CUDA"));
#endif
}

// A host copy of `t` (deep for CPU tensors).
absl::StatusOr<Tensor> HostCopy(const Tensor& t) {
  if (t.device().is_cpu()) return t.Clone();
#if PADDLE_WITH_CUDA
  return ToDevice(t, Device::Cpu(), ops::cuda::CurrentStream());
#else
  return absl::FailedPreconditionError(
      absl::StrCat("copying ", t.ToString(), ": built without CUDA"));
#endif
}

// dst = src for dst on any device, src on the host.
absl::Status CopyInto(Tensor& dst, const Tensor& src) {
  if (dst.device().is_cpu()) return dst.CopyFrom(src);
#if PADDLE_WITH_CUDA
  return CopyTensor(src, dst, ops::cuda::CurrentStream());
#else
  return absl::FailedPreconditionError(
      absl::StrCat("copying into ", dst.ToString(), ": built without CUDA"));
#endif
}

}  // namespace

bool ExcludeBelow2D(const std::string& /*name*/, const autograd::Variable& param) {
  return param.data().dim() < 2;
}

ExcludePredicate ExcludeNone() {
  return [](const std::string&, const autograd::Variable&) { return false; };
}

Optimizer::Optimizer(std::vector<autograd::Variable> params, double lr, ExcludePredicate exclude,
                     std::vector<std::string> slot_names)
    : slot_names_(std::move(slot_names)),
      exclude_(exclude ? std::move(exclude) : ExcludePredicate(ExcludeBelow2D)),
      lr_(lr) {
  params_.reserve(params.size());
  for (autograd::Variable& v : params) {
    ParamState p;
    p.var = std::move(v);
    params_.push_back(std::move(p));
  }
}

absl::Status Optimizer::Init() {
  if (!(lr_ >= 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat("learning rate must be >= 0, got ", lr_));
  }
  std::set<std::string> names;
  for (size_t i = 0; i < params_.size(); ++i) {
    ParamState& p = params_[i];
    if (!p.var.defined()) {
      return absl::InvalidArgumentError(absl::StrCat("parameter #", i, " is undefined"));
    }
    const std::string& name = p.var.name();
    if (name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter #", i, " (", p.var.data().ToString(),
                       ") has no name; optimizer state is keyed by name, set_name() it"));
    }
    if (!names.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrCat("parameter name '", name, "' (#", i,
                                                     ") is used by an earlier parameter too"));
    }
    const Tensor& value = p.var.data();
    if (value.device().is_cuda()) {
      if (!SupportsCuda()) {
        return absl::UnimplementedError(
            absl::StrCat("parameter '", name, "' is ", value.ToString(),
                         "; this optimizer updates CPU parameters only so far (SGD also updates "
                         "CUDA ones): use SGD or keep the model on the CPU"));
      }
      if (value.dtype() != DType::kFloat32 || !value.is_contiguous()) {
        return absl::InvalidArgumentError(
            absl::StrCat("parameter '", name, "' is ", value.ToString(),
                         (value.is_contiguous() ? "" : " (not contiguous)"),
                         "; CUDA parameters must be contiguous float32 (master weights)"));
      }
    } else if (!SupportedDType(value.dtype()) || !value.is_contiguous()) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter '", name, "' is ", value.ToString(),
                       (value.is_contiguous() ? "" : " (not contiguous)"),
                       "; optimizers need contiguous float32 or float64 CPU tensors"));
    }
    p.excluded = exclude_(name, p.var);
    p.device = value.device();
    p.slots.clear();
    for (size_t s = 0; s < slot_names_.size(); ++s) {
      ASSIGN_OR_RETURN(Tensor t, ZerosLike(value));
      p.slots.push_back(std::move(t));
    }
  }
  return absl::OkStatus();
}

absl::Status Optimizer::Step() {
  autograd::NoGradGuard no_grad;
  std::vector<ParamUpdate> updates;
  std::vector<ParamState*> updated;
  std::vector<RowUpdate> row_updates;
  for (ParamState& p : params_) {
    const Tensor& grad = p.var.grad();
    if (p.var.sparse_grad() != nullptr) {
      if (grad.defined()) {
        return absl::FailedPreconditionError(
            absl::StrCat("step ", step_count_ + 1, ": parameter '", p.var.name(),
                         "' has both a dense and a sparse gradient; give it one kind"));
      }
      ASSIGN_OR_RETURN(RowUpdate r, PrepareRows(p));
      row_updates.push_back(std::move(r));
      continue;
    }
    if (!grad.defined()) continue;
    const Tensor& value = p.var.data();
    // The state lives where the parameter was at Create (Note [CUDA parameters]).
    const Device home = p.device;
    if (!value.is_contiguous() || value.device() != home ||
        (value.device().is_cuda() && !SupportsCuda())) {
      return absl::FailedPreconditionError(absl::StrCat(
          "step ", step_count_ + 1, ": parameter '", p.var.name(), "' is now ", value.ToString(),
          ", not contiguous memory on ", home.ToString(),
          "; the optimizer updates it in place (move the model before creating the optimizer)"));
    }
    // set_grad and gradient accumulation keep gradients contiguous; only the device can be off.
    if (!grad.is_contiguous() || grad.device() != value.device()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "step ", step_count_ + 1, ": the gradient of '", p.var.name(), "' is ", grad.ToString(),
          "; optimizers read contiguous gradients on the device of "
          "the parameter (",
          value.device().ToString(), ")"));
    }
    updates.push_back(ParamUpdate{value, grad, &p.slots, p.step + 1, p.excluded});
    updated.push_back(&p);
  }
  // Note [Layer norms across ranks]: phase one for every parameter, the combiner, then phase two
  // below in place of Update().
  const int k = NumNormSums();
  const bool combine = norm_combiner_ && k > 0;
  std::vector<double> sums;
  if (combine) {
    sums.assign(params_.size() * k, 0.0);
    for (size_t i = 0; i < updates.size(); ++i) {
      if (!updates[i].value.device().is_cpu()) continue;  // only SGD runs on CUDA
      NormSums(updates[i], &sums[(updated[i] - params_.data()) * k]);
    }
    RETURN_IF_ERROR(Annotate(norm_combiner_(&sums),
                             absl::StrCat("step ", step_count_ + 1, ": combining layer norms")));
    if (sums.size() != params_.size() * k) {
      return absl::InternalError(absl::StrCat("step ", step_count_ + 1, ": the norm combiner left ",
                                              sums.size(), " sums, expected ", params_.size() * k));
    }
  }
  for (size_t i = 0; i < updates.size(); ++i) {
    const ParamUpdate& u = updates[i];
    if (u.value.device().is_cpu()) {
      if (combine) {
        ApplyNorms(u, &sums[(updated[i] - params_.data()) * k]);
      } else {
        Update(u);
      }
    } else {
      RETURN_IF_ERROR(Annotate(UpdateCuda(u), absl::StrCat("step ", step_count_ + 1, ": updating '",
                                                           updated[i]->var.name(), "' on ",
                                                           u.value.device().ToString())));
    }
    u.value.BumpVersion();  // Note [Version counters] in paddle/core/storage.h
    ++updated[i]->step;
  }
  for (RowUpdate& r : row_updates) {
    ParamState& p = *r.param;
    if (r.grad.size() > 0) {
      Update(ParamUpdate{r.value_rows, r.grad.rows, &r.slot_rows, p.step + 1, p.excluded});
      ScatterRows(r);
      p.var.data().BumpVersion();
    }
    ++p.step;
  }
  ++step_count_;
  return absl::OkStatus();
}

namespace {

// dst[k] = src[ids[k]] (gather) or src[k] -> dst[ids[k]] (scatter), rows of `dim` elements.
void CopyRows(const Tensor& table, const Tensor& rows, const int64_t* ids, int64_t n, bool gather) {
  const size_t row_bytes = static_cast<size_t>(table.shape()[1]) * table.element_size();
  char* t = static_cast<char*>(table.data());
  char* r = static_cast<char*>(rows.data());
  for (int64_t k = 0; k < n; ++k) {
    char* tr = t + ids[k] * row_bytes;
    char* rr = r + k * row_bytes;
    if (gather) {
      std::memcpy(rr, tr, row_bytes);
    } else {
      std::memcpy(tr, rr, row_bytes);
    }
  }
}

}  // namespace

absl::StatusOr<Optimizer::RowUpdate> Optimizer::PrepareRows(ParamState& p) {
  const std::string what =
      absl::StrCat("step ", step_count_ + 1, ": sparse gradient of '", p.var.name(), "'");
  if (!SupportsSparse()) {
    return absl::UnimplementedError(
        absl::StrCat(what,
                     ": this optimizer's rule is not per element (Note [Lazy sparse "
                     "updates]); use SGD, Adam or Adagrad, or a dense embedding"));
  }
  const Tensor& value = p.var.data();
  if (!value.is_contiguous() || !value.device().is_cpu() || value.device() != p.device) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": the parameter is ", value.ToString(),
                     "; sparse updates need contiguous CPU memory where it was at Create"));
  }
  RETURN_IF_ERROR(autograd::CheckSparseRows(*p.var.sparse_grad(), value, what));
  RowUpdate r;
  r.param = &p;
  ASSIGN_OR_RETURN(r.grad, autograd::Coalesce(*p.var.sparse_grad()));
  const int64_t n = r.grad.size();
  const int64_t* ids = r.grad.ids.data<int64_t>();
  ASSIGN_OR_RETURN(r.value_rows, Tensor::Empty({n, value.shape()[1]}, value.dtype()));
  CopyRows(value, r.value_rows, ids, n, /*gather=*/true);
  for (const Tensor& slot : p.slots) {
    ASSIGN_OR_RETURN(Tensor rows, Tensor::Empty({n, value.shape()[1]}, value.dtype()));
    CopyRows(slot, rows, ids, n, /*gather=*/true);
    r.slot_rows.push_back(std::move(rows));
  }
  return r;
}

void Optimizer::ScatterRows(const RowUpdate& r) {
  const int64_t n = r.grad.size();
  const int64_t* ids = r.grad.ids.data<int64_t>();
  CopyRows(r.param->var.data(), r.value_rows, ids, n, /*gather=*/false);
  for (size_t s = 0; s < r.slot_rows.size(); ++s) {
    CopyRows(r.param->slots[s], r.slot_rows[s], ids, n, /*gather=*/false);
  }
}

absl::Status Optimizer::UpdateCuda(const ParamUpdate& p) {
  return absl::UnimplementedError(
      absl::StrCat("no CUDA update for ", p.value.ToString(), " in this optimizer"));
}

int64_t Optimizer::StateBytes() const {
  int64_t bytes = 0;
  for (const ParamState& p : params_) {
    for (const Tensor& slot : p.slots) bytes += static_cast<int64_t>(slot.nbytes());
  }
  return bytes;
}

void Optimizer::ZeroGrad() {
  for (ParamState& p : params_) p.var.ZeroGrad();
}

absl::Status Optimizer::SaveState(std::map<std::string, Tensor>* tensors,
                                  std::map<std::string, int64_t>* ints) const {
  if (tensors == nullptr || ints == nullptr) {
    return absl::InvalidArgumentError("SaveState: tensors and ints must not be null");
  }
  (*ints)[StepKey()] = step_count_;
  for (const ParamState& p : params_) {
    (*ints)[ParamKey(p.var.name(), "step")] = p.step;
    for (size_t s = 0; s < slot_names_.size(); ++s) {
      ASSIGN_OR_RETURN(Tensor copy, HostCopy(p.slots[s]));
      (*tensors)[ParamKey(p.var.name(), slot_names_[s])] = std::move(copy);
    }
  }
  return absl::OkStatus();
}

absl::Status Optimizer::LoadState(const std::map<std::string, Tensor>& tensors,
                                  const std::map<std::string, int64_t>& ints) {
  auto find_int = [&ints](const std::string& key) -> absl::StatusOr<int64_t> {
    auto it = ints.find(key);
    if (it == ints.end()) {
      return absl::NotFoundError(absl::StrCat("optimizer state: missing integer '", key, "'"));
    }
    if (it->second < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("optimizer state: '", key, "' is ", it->second, ", must be >= 0"));
    }
    return it->second;
  };
  // Check everything before changing anything, so a bad checkpoint leaves the optimizer as it was.
  ASSIGN_OR_RETURN(int64_t step_count, find_int(StepKey()));
  std::vector<int64_t> steps;
  std::vector<const Tensor*> sources;
  for (const ParamState& p : params_) {
    ASSIGN_OR_RETURN(int64_t step, find_int(ParamKey(p.var.name(), "step")));
    steps.push_back(step);
    for (size_t s = 0; s < slot_names_.size(); ++s) {
      const std::string key = ParamKey(p.var.name(), slot_names_[s]);
      auto it = tensors.find(key);
      if (it == tensors.end()) {
        return absl::NotFoundError(absl::StrCat("optimizer state: missing tensor '", key,
                                                "' (expected ", p.slots[s].ToString(), ")"));
      }
      const Tensor& src = it->second;
      if (!src.defined() || src.shape() != p.slots[s].shape() ||
          src.dtype() != p.slots[s].dtype() || !src.device().is_cpu()) {  // host state only
        return absl::InvalidArgumentError(absl::StrCat("optimizer state: tensor '", key, "' is ",
                                                       src.defined() ? src.ToString() : "undefined",
                                                       ", expected ", p.slots[s].ToString()));
      }
      sources.push_back(&src);
    }
  }
  size_t k = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    params_[i].step = steps[i];
    for (Tensor& slot : params_[i].slots) RETURN_IF_ERROR(CopyInto(slot, *sources[k++]));
  }
  step_count_ = step_count;
  return absl::OkStatus();
}

}  // namespace paddle::optim
