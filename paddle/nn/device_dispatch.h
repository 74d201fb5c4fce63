// Which kernels an nn operation runs: paddle/ops/cpu for CPU tensors, paddle/ops/cuda for CUDA
// tensors of one device. Every differentiable operation (functional.h) and Module::To go through
// here first, so a tensor on the wrong device is an error naming the operation, the tensors and
// their devices before any kernel (or CUDA call) runs.
//
// The first CUDA tensor seen also registers the CUDA gradient arithmetic that autograd needs
// (Note [Gradient arithmetic on devices] in paddle/core/autograd/variable.h).
#ifndef PADDLE_NN_DEVICE_DISPATCH_H_
#define PADDLE_NN_DEVICE_DISPATCH_H_

#include <initializer_list>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "paddle/core/device.h"
#include "paddle/core/tensor.h"

namespace paddle::nn::internal {

struct NamedTensor {
  const char* name;
  const Tensor* tensor;  // null or undefined: absent (an optional bias)
};

// The one device every present tensor is on. Mixed devices: kInvalidArgument "linear: tensors on
// different devices: x float32[2, 3] on cpu, w float32[4, 3] on cuda:0; ...". A CUDA device in a
// build without CUDA: kFailedPrecondition.
absl::StatusOr<Device> OpDevice(const char* op, std::initializer_list<NamedTensor> tensors);

// `t` on `device`: itself when already there, else a contiguous copy (synchronous). CUDA without a
// usable GPU: kFailedPrecondition "no CUDA device/driver: ...".
absl::StatusOr<Tensor> MoveTensor(const Tensor& t, Device device);

// dst = src: same shape and dtype, any devices (a CUDA dst must be contiguous); synchronous.
absl::Status CopyInto(const Tensor& src, Tensor& dst);

// OK if `device` can be used: always for the CPU; for CUDA, the device exists (kFailedPrecondition
// "no CUDA device/driver: ..." without a GPU or driver, kInvalidArgument naming the device count
// for a bad ordinal, kFailedPrecondition when built without CUDA).
absl::Status CheckDeviceUsable(Device device);

// Registers the CUDA DeviceGradientOps once (no-op without CUDA).
void EnsureCudaGradientOps();

}  // namespace paddle::nn::internal

#endif  // PADDLE_NN_DEVICE_DISPATCH_H_
