// Device checks, tensor moves and the CUDA gradient arithmetic registered with autograd.
#include "paddle/nn/device_dispatch.h"

#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "paddle/core/autograd/variable.h"
#include "paddle/core/status.h"

#if PADDLE_WITH_CUDA
#include "paddle/core/cuda/cuda_copy.h"
#include "paddle/core/cuda/cuda_status.h"
#include "paddle/ops/cuda/elementwise.h"
#include "paddle/ops/cuda/handles.h"
#endif

namespace paddle::nn::internal {
namespace {

constexpr const char* kNoCudaBuild =
    "this binary was built without CUDA (--config=nocuda or no toolkit); build with CUDA to use "
    "a CUDA device";

#if PADDLE_WITH_CUDA
autograd::DeviceGradientOps CudaGradientOps() {
  autograd::DeviceGradientOps ops;
  ops.accumulate = [](Tensor* dst, const Tensor& src) -> absl::Status {
    return ops::cuda::AddInPlace(dst, src);
  };
  ops.clone = [](const Tensor& t) -> absl::StatusOr<Tensor> {
    // ToDevice on the same device is a device-to-device copy (it synchronizes; gradients are
    // cloned once per leaf and backward pass, so this is not on a per-element path).
    return ToDevice(t, t.device(), ops::cuda::CurrentStream());
  };
  ops.fill = [](Tensor* dst, float value) -> absl::Status { return ops::cuda::Fill(dst, value); };
  return ops;
}
#endif

}  // namespace

void EnsureCudaGradientOps() {
#if PADDLE_WITH_CUDA
  static std::once_flag once;
  std::call_once(once,
                 [] { autograd::SetDeviceGradientOps(DeviceType::kCuda, CudaGradientOps()); });
#endif
}

absl::StatusOr<Device> OpDevice(const char* op, std::initializer_list<NamedTensor> tensors) {
  bool found = false;
  bool mixed = false;
  Device device = Device::Cpu();
  for (const NamedTensor& t : tensors) {
    if (t.tensor == nullptr || !t.tensor->defined()) continue;
    if (!found) {
      device = t.tensor->device();
      found = true;
    } else if (t.tensor->device() != device) {
      mixed = true;
    }
  }
  if (mixed) {
    std::vector<std::string> parts;
    for (const NamedTensor& t : tensors) {
      if (t.tensor == nullptr || !t.tensor->defined()) continue;
      parts.push_back(absl::StrCat(t.name, " ", t.tensor->ToString()));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": tensors on different devices: ", absl::StrJoin(parts, ", "),
                     "; move the model (Module::To) and each batch (ToDevice) to one device"));
  }
  if (device.is_cuda()) {
#if PADDLE_WITH_CUDA
    EnsureCudaGradientOps();
#else
    return absl::FailedPreconditionError(
        absl::StrCat(op, " on ", device.ToString(), ": ", kNoCudaBuild));
#endif
  }
  return device;
}

absl::Status CheckDeviceUsable(Device device) {
  if (device.is_cpu()) return absl::OkStatus();
#if PADDLE_WITH_CUDA
  ASSIGN_OR_RETURN(int count, CudaDeviceCount());
  if (device.index < 0 || device.index >= count) {
    return absl::InvalidArgumentError(absl::StrCat("device ", device.ToString(),
                                                   " does not exist: this process sees ", count,
                                                   " CUDA device(s), cuda:0 to cuda:", count - 1));
  }
  EnsureCudaGradientOps();
  return absl::OkStatus();
#else
  return absl::FailedPreconditionError(absl::StrCat(device.ToString(), ": ", kNoCudaBuild));
#endif
}

absl::StatusOr<Tensor> MoveTensor(const Tensor& t, Device device) {
  if (t.device() == device) return t;
#if PADDLE_WITH_CUDA
  RETURN_IF_ERROR(CheckDeviceUsable(device));
  // The calling thread's op stream (Note [One stream per thread] in paddle/ops/cuda/handles.h);
  // ToDevice synchronizes it, so the copy is done when this returns.
  return ToDevice(t, device, ops::cuda::CurrentStream());
#else
  return absl::FailedPreconditionError(
      absl::StrCat("moving ", t.ToString(), " to ", device.ToString(), ": ", kNoCudaBuild));
#endif
}

absl::Status CopyInto(const Tensor& src, Tensor& dst) {
  if (src.device().is_cpu() && dst.device().is_cpu()) return dst.CopyFrom(src);
#if PADDLE_WITH_CUDA
  dst.BumpVersion();  // Note [Version counters] in paddle/core/storage.h (CopyFrom bumps on CPU)
  return CopyTensor(src, dst, ops::cuda::CurrentStream());
#else
  return absl::FailedPreconditionError(
      absl::StrCat("copying ", src.ToString(), " into ", dst.ToString(), ": ", kNoCudaBuild));
#endif
}

}  // namespace paddle::nn::internal
