// The device side of the Reducer and of DistributedDataParallel: bucket memory, gradient copies and
// 16-bit conversions on the device the parameters live on, and small host tensors moved to that
// device for collectives (NCCL accepts CUDA tensors only).
//
// CUDA work is enqueued on the calling thread's op stream (paddle/ops/cuda/handles.h; the legacy
// default stream unless changed), the stream the NCCL communicator orders its collectives after
// (Note [NCCL streams]). Copies between host and device synchronize that stream. Without CUDA in
// the build every CUDA request is kFailedPrecondition saying so; CPU requests do what the Reducer
// always did.
#ifndef PADDLE_PARALLEL_REDUCER_DEVICE_MEMORY_H_
#define PADDLE_PARALLEL_REDUCER_DEVICE_MEMORY_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "paddle/core/device.h"
#include "paddle/core/tensor.h"

namespace paddle::reducer_internal {

// A zero-filled contiguous [numel] tensor on `device` (CUDA memory from CudaAllocator).
absl::StatusOr<Tensor> ZerosOn(int64_t numel, DType dtype, Device device);
// An uninitialized one.
absl::StatusOr<Tensor> EmptyOn(int64_t numel, DType dtype, Device device);
// dst = src, same shape and dtype, any devices (dst contiguous when on CUDA).
absl::Status CopyValues(const Tensor& src, Tensor& dst);
// Contiguous float32 <-> float16/bfloat16 of one device and numel (dst preallocated).
absl::Status Convert(const Tensor& src, Tensor& dst);
// `host` on `device` (itself when that is the CPU).
absl::StatusOr<Tensor> ToCommDevice(const Tensor& host, Device device);
// `t` on the host (itself when there).
absl::StatusOr<Tensor> ToHost(const Tensor& t);

}  // namespace paddle::reducer_internal

#endif  // PADDLE_PARALLEL_REDUCER_DEVICE_MEMORY_H_
