// CPU paths inline, CUDA paths through paddle/core/cuda and paddle/ops/cuda.
#include "paddle/parallel/reducer/device_memory.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "paddle/core/half.h"
#include "paddle/core/status.h"

#if PADDLE_WITH_CUDA
#include "paddle/core/cuda/cuda_allocator.h"
#include "paddle/core/cuda/cuda_copy.h"
#include "paddle/core/cuda/cuda_status.h"
#include "paddle/ops/cuda/convert.h"
#include "paddle/ops/cuda/elementwise.h"
#include "paddle/ops/cuda/handles.h"
#endif

namespace paddle::reducer_internal {
namespace {

#if !PADDLE_WITH_CUDA
absl::Status NoCuda(const char* what, Device device) {
  return absl::FailedPreconditionError(absl::StrCat(
      what, " on ", device.ToString(), ": this binary was built without CUDA (--config=nocuda)"));
}
#endif

bool IsHalf(DType d) { return d == DType::kFloat16 || d == DType::kBFloat16; }

}  // namespace

absl::StatusOr<Tensor> EmptyOn(int64_t numel, DType dtype, Device device) {
  if (device.is_cpu()) return Tensor::Empty({numel}, dtype);
#if PADDLE_WITH_CUDA
  ASSIGN_OR_RETURN(Allocator * allocator, CudaAllocator(device.index));
  return Tensor::Empty({numel}, dtype, allocator);
#else
  return NoCuda("bucket memory", device);
#endif
}

absl::StatusOr<Tensor> ZerosOn(int64_t numel, DType dtype, Device device) {
  if (device.is_cpu()) return Tensor::Zeros({numel}, dtype);
#if PADDLE_WITH_CUDA
  ASSIGN_OR_RETURN(Tensor t, EmptyOn(numel, dtype, device));
  if (numel > 0) {
    RETURN_IF_ERROR(ops::cuda::UseDevice(device));
    PADDLE_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(t.data(), 0, t.nbytes(), ops::cuda::CurrentStream()));
  }
  return t;
#else
  return NoCuda("bucket memory", device);
#endif
}

absl::Status CopyValues(const Tensor& src, Tensor& dst) {
  if (src.device().is_cpu() && dst.device().is_cpu()) return dst.CopyFrom(src);
#if PADDLE_WITH_CUDA
  return CopyTensor(src, dst, ops::cuda::CurrentStream());
#else
  return NoCuda("copying gradients", src.device().is_cpu() ? dst.device() : src.device());
#endif
}

absl::Status Convert(const Tensor& src, Tensor& dst) {
  const bool narrow = src.dtype() == DType::kFloat32 && IsHalf(dst.dtype());
  const bool widen = IsHalf(src.dtype()) && dst.dtype() == DType::kFloat32;
  if ((!narrow && !widen) || src.numel() != dst.numel() || src.device() != dst.device() ||
      !src.is_contiguous() || !dst.is_contiguous()) {
    return absl::InvalidArgumentError(absl::StrCat("gradient compression: cannot convert ",
                                                   src.ToString(), " into ", dst.ToString()));
  }
  const auto n = static_cast<size_t>(src.numel());
  const DType half = narrow ? dst.dtype() : src.dtype();
  if (src.device().is_cpu()) {
    if (narrow) {
      const auto* in = static_cast<const float*>(src.data());
      auto* out = static_cast<uint16_t*>(dst.data());
      if (half == DType::kFloat16) {
        FloatToHalf(in, out, n);
      } else {
        FloatToBFloat16(in, out, n);
      }
    } else {
      const auto* in = static_cast<const uint16_t*>(src.data());
      auto* out = static_cast<float*>(dst.data());
      if (half == DType::kFloat16) {
        HalfToFloat(in, out, n);
      } else {
        BFloat16ToFloat(in, out, n);
      }
    }
    return absl::OkStatus();
  }
#if PADDLE_WITH_CUDA
  RETURN_IF_ERROR(ops::cuda::UseDevice(src.device()));
  const cudaStream_t stream = ops::cuda::CurrentStream();
  if (narrow) {
    const auto* in = static_cast<const float*>(src.data());
    auto* out = static_cast<uint16_t*>(dst.data());
    return half == DType::kFloat16 ? CudaFloatToHalf(in, out, n, stream)
                                   : CudaFloatToBFloat16(in, out, n, stream);
  }
  const auto* in = static_cast<const uint16_t*>(src.data());
  auto* out = static_cast<float*>(dst.data());
  return half == DType::kFloat16 ? CudaHalfToFloat(in, out, n, stream)
                                 : CudaBFloat16ToFloat(in, out, n, stream);
#else
  return NoCuda("gradient compression", src.device());
#endif
}

absl::StatusOr<Tensor> ToCommDevice(const Tensor& host, Device device) {
  if (device.is_cpu()) return host;
#if PADDLE_WITH_CUDA
  return ToDevice(host, device, ops::cuda::CurrentStream());
#else
  return NoCuda("staging a collective", device);
#endif
}

absl::StatusOr<Tensor> ToHost(const Tensor& t) {
  if (t.device().is_cpu()) return t;
#if PADDLE_WITH_CUDA
  return ToDevice(t, Device::Cpu(), ops::cuda::CurrentStream());
#else
  return NoCuda("reading back", t.device());
#endif
}

}  // namespace paddle::reducer_internal
