// LocalSgd: periodic parameter averaging with a synchronous warm-up and optional outer momentum
// (Note [Local SGD schedule] in local_sgd.h).
#include "paddle/parallel/local_sgd.h"

#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "paddle/core/status.h"

namespace paddle {

absl::StatusOr<std::unique_ptr<LocalSgd>> LocalSgd::Create(std::shared_ptr<nn::Module> module,
                                                           Communicator* comm,
                                                           const LocalSgdOptions& options,
                                                           DistributedDataParallel* ddp) {
  auto bad = [](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("LocalSgd: ", what));
  };
  if (module == nullptr || comm == nullptr) return bad("module and communicator are required");
  if (options.period < 1) return bad(absl::StrCat("period must be >= 1, got ", options.period));
  if (options.warmup_steps < 0) {
    return bad(absl::StrCat("warmup_steps must be >= 0, got ", options.warmup_steps));
  }
  if (!(options.outer_lr > 0 && std::isfinite(options.outer_lr))) {
    return bad(absl::StrCat("outer_lr must be positive and finite, got ", options.outer_lr));
  }
  if (!(options.outer_momentum >= 0 && options.outer_momentum < 1)) {
    return bad(absl::StrCat("outer_momentum must be in [0, 1), got ", options.outer_momentum));
  }
  if (ddp != nullptr && &ddp->module() != module.get()) {
    return bad("the DistributedDataParallel given wraps another module");
  }
  std::vector<Tensor> tensors;
  int64_t elements = 0;
  for (const auto& [name, p] : module->NamedParameters()) {
    const Tensor& t = p.data();
    if (t.dtype() != DType::kFloat32 || !t.device().is_cpu() || !t.is_contiguous()) {
      return absl::UnimplementedError(
          absl::StrCat("LocalSgd averages contiguous float32 CPU parameters; parameter '", name,
                       "' is ", t.ToString()));
    }
    tensors.push_back(t);
    elements += t.numel();
  }
  const int64_t param_elements = elements;
  if (options.average_buffers) {
    for (const auto& [name, b] : module->NamedBuffers()) {
      const Tensor& t = b.data();
      // Integer buffers (counters) are the same on every rank; only statistics drift.
      if (t.dtype() != DType::kFloat32 || !t.device().is_cpu() || !t.is_contiguous()) continue;
      tensors.push_back(t);
      elements += t.numel();
    }
  }
  for (const Tensor& t : tensors) {
    RETURN_IF_ERROR(Annotate(comm->Broadcast(t, 0)->Wait(),
                             "LocalSgd: broadcasting rank 0's parameters and buffers"));
  }
  std::unique_ptr<LocalSgd> local(new LocalSgd(std::move(module), comm, options, ddp,
                                               std::move(tensors), elements, param_elements));
  return local;
}

LocalSgd::LocalSgd(std::shared_ptr<nn::Module> module, Communicator* comm,
                   const LocalSgdOptions& options, DistributedDataParallel* ddp,
                   std::vector<Tensor> tensors, int64_t elements, int64_t param_elements)
    : module_(std::move(module)),
      comm_(comm),
      options_(options),
      ddp_(ddp),
      tensors_(std::move(tensors)),
      param_elements_(param_elements),
      flat_(elements) {
  if (options_.outer_momentum > 0 || options_.outer_lr != 1.0) {
    last_.resize(elements);
    momentum_.assign(param_elements, 0.0f);
    int64_t offset = 0;
    for (const Tensor& t : tensors_) {
      std::memcpy(last_.data() + offset, t.data(), t.nbytes());
      offset += t.numel();
    }
  }
  if (ddp_ != nullptr) ddp_->set_sync(in_warmup());
}

absl::StatusOr<bool> LocalSgd::AfterStep() {
  ++steps_;
  bool average;
  if (steps_ <= options_.warmup_steps) {
    average = ddp_ == nullptr;  // with DDP the gradients were averaged already
  } else {
    average = (steps_ - options_.warmup_steps) % options_.period == 0;
  }
  if (ddp_ != nullptr) ddp_->set_sync(in_warmup());
  // A warm-up step under DDP leaves the replicas identical without an average.
  const bool synchronous_step = steps_ <= options_.warmup_steps && ddp_ != nullptr;
  if (!synchronous_step) in_sync_ = false;
  if (average) RETURN_IF_ERROR(Average());
  return average;
}

absl::Status LocalSgd::Synchronize() {
  // Every rank took the same number of steps, so every rank takes the same branch.
  return in_sync_ ? absl::OkStatus() : Average();
}

absl::Status LocalSgd::Average() {
  int64_t offset = 0;
  for (const Tensor& t : tensors_) {
    std::memcpy(flat_.data() + offset, t.data(), t.nbytes());
    offset += t.numel();
  }
  ASSIGN_OR_RETURN(Tensor flat, Tensor::FromBlob(flat_.data(), {static_cast<int64_t>(flat_.size())},
                                                 DType::kFloat32, Device::Cpu()));
  RETURN_IF_ERROR(Annotate(comm_->Allreduce(flat, ReduceOp::kAvg)->Wait(),
                           absl::StrCat("LocalSgd: averaging parameters after step ", steps_)));
  averaged_bytes_ += static_cast<int64_t>(flat_.size() * sizeof(float));
  ++averages_;
  in_sync_ = true;
  if (!last_.empty()) {
    // Outer momentum (SlowMo): d = x_last - x_avg; u = b u + d; x = x_last - a u.
    const float a = static_cast<float>(options_.outer_lr);
    const float b = static_cast<float>(options_.outer_momentum);
    // Buffers (statistics, not trained) take the plain average.
    for (int64_t i = 0; i < param_elements_; ++i) {
      momentum_[i] = b * momentum_[i] + (last_[i] - flat_[i]);
      flat_[i] = last_[i] - a * momentum_[i];
      last_[i] = flat_[i];
    }
  }
  offset = 0;
  for (const Tensor& t : tensors_) {
    std::memcpy(t.data(), flat_.data() + offset, t.nbytes());
    offset += t.numel();
  }
  return absl::OkStatus();
}

}  // namespace paddle
