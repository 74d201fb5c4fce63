// Max and average pooling as cuDNN legacy pooling calls on NCHW fp32 descriptors.
//
// Note [cuDNN legacy ops]
// cuDNN 9 still exports the legacy pooling and batch-norm calls but marks them deprecated in favour
// of its graph API; they are what this code needs (one call per op, no graph building), so the
// deprecation warning is silenced around their use only. If a later cuDNN drops them, pooling and
// batch norm are simple enough to become our own kernels.
#include "paddle/ops/cuda/pool2d.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "paddle/core/status.h"
#include "paddle/ops/cuda/cudnn_descriptors.h"
#include "paddle/ops/cuda/handles.h"
#include "paddle/ops/cuda/op_checks.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // Note [cuDNN legacy ops]

namespace paddle {
namespace ops {
namespace cuda {
namespace {

using internal::CheckCudaTensor;
using internal::Describe;

struct PoolGeometry {
  int64_t n, c, h, w, oh, ow;
};

absl::StatusOr<PoolGeometry> CheckPool(const char* op, const Tensor& x, const Pool2dOptions& o) {
  RETURN_IF_ERROR(CheckCudaTensor(op, "x", x, {DType::kFloat32}, 4));
  if (o.kernel_h < 1 || o.kernel_w < 1 || o.stride_h < 1 || o.stride_w < 1 || o.pad_h < 0 ||
      o.pad_w < 0 || 2 * o.pad_h > o.kernel_h || 2 * o.pad_w > o.kernel_w) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": kernel (", o.kernel_h, ", ", o.kernel_w,
                                                   ") and stride (", o.stride_h, ", ", o.stride_w,
                                                   ") must be >= 1 and padding (", o.pad_h, ", ",
                                                   o.pad_w, ") between 0 and half the kernel"));
  }
  PoolGeometry g{x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3], 0, 0};
  const int64_t hp = g.h + 2 * o.pad_h;
  const int64_t wp = g.w + 2 * o.pad_w;
  if (g.n < 1 || g.c < 1 || hp < o.kernel_h || wp < o.kernel_w) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": x ", Describe(x), " padded by (", o.pad_h, ", ", o.pad_w,
                     ") is empty or smaller than the kernel (", o.kernel_h, ", ", o.kernel_w, ")"));
  }
  RETURN_IF_ERROR(internal::CheckIntRange(op, x));
  for (int64_t v : {o.kernel_h, o.kernel_w, o.stride_h, o.stride_w}) {
    if (v > INT32_MAX) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": kernel (", o.kernel_h, ", ", o.kernel_w,
                                                     ") or stride (", o.stride_h, ", ", o.stride_w,
                                                     ") beyond cuDNN's int range"));
    }
  }
  g.oh = (hp - o.kernel_h) / o.stride_h + 1;
  g.ow = (wp - o.kernel_w) / o.stride_w + 1;
  return g;
}

// dy [N, C, OH, OW] for geometry g.
absl::Status CheckDy(const char* op, const Tensor& x, const Tensor& dy, const PoolGeometry& g) {
  RETURN_IF_ERROR(CheckCudaTensor(op, "dy", dy, {DType::kFloat32}, 4));
  RETURN_IF_ERROR(internal::CheckSameDeviceAndDType(op, "x", x, "dy", dy));
  if (dy.shape() != Shape{g.n, g.c, g.oh, g.ow}) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": dy ", Describe(dy), " must be ",
                                                   ShapeToString({g.n, g.c, g.oh, g.ow}), " for x ",
                                                   Describe(x)));
  }
  return absl::OkStatus();
}

struct PoolDescriptors {
  internal::TensorDescriptor x, y;
  internal::PoolingDescriptor pool;

  absl::Status Init(cudnnPoolingMode_t mode, const PoolGeometry& g, const Pool2dOptions& o) {
    RETURN_IF_ERROR(internal::MakeNchw(&x, g.n, g.c, g.h, g.w).status());
    RETURN_IF_ERROR(internal::MakeNchw(&y, g.n, g.c, g.oh, g.ow).status());
    RETURN_IF_ERROR(pool.Create());
    PADDLE_CUDNN_RETURN_IF_ERROR(cudnnSetPooling2dDescriptor(
        pool.get(), mode, CUDNN_PROPAGATE_NAN, static_cast<int>(o.kernel_h),
        static_cast<int>(o.kernel_w), static_cast<int>(o.pad_h), static_cast<int>(o.pad_w),
        static_cast<int>(o.stride_h), static_cast<int>(o.stride_w)));
    return absl::OkStatus();
  }
};

// Max: deterministic backward (Note [GPU max-pool workspace] in pool2d.h). Average: padding is
// not counted, as on the CPU.
constexpr cudnnPoolingMode_t kMax = CUDNN_POOLING_MAX_DETERMINISTIC;
constexpr cudnnPoolingMode_t kAvg = CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;

absl::StatusOr<Tensor> Forward(const char* op, cudnnPoolingMode_t mode, const Tensor& x,
                               const Pool2dOptions& o) {
  ASSIGN_OR_RETURN(const PoolGeometry g, CheckPool(op, x, o));
  RETURN_IF_ERROR(UseDevice(x.device()));
  ASSIGN_OR_RETURN(cudnnHandle_t handle, CudnnHandle(x.device().index));
  PoolDescriptors d;
  RETURN_IF_ERROR(d.Init(mode, g, o));
  ASSIGN_OR_RETURN(Tensor y, internal::EmptyCuda({g.n, g.c, g.oh, g.ow}, x.dtype(), x.device()));
  const float one = 1.0f, zero = 0.0f;
  PADDLE_CUDNN_RETURN_IF_ERROR(cudnnPoolingForward(handle, d.pool.get(), &one, d.x.get(), x.data(),
                                                   &zero, d.y.get(), y.data()));
  return y;
}

// y: the forward output (max) or any tensor of its shape (average: cuDNN does not read it).
absl::StatusOr<Tensor> Backward(const char* op, cudnnPoolingMode_t mode, const Tensor& x,
                                const Tensor& y, const Tensor& dy, const Pool2dOptions& o) {
  ASSIGN_OR_RETURN(const PoolGeometry g, CheckPool(op, x, o));
  RETURN_IF_ERROR(CheckDy(op, x, dy, g));
  if (mode == kMax) {
    RETURN_IF_ERROR(CheckCudaTensor(op, "fwd.y", y, {DType::kFloat32}, 4));
    RETURN_IF_ERROR(internal::CheckSameDeviceAndDType(op, "x", x, "fwd.y", y));
    RETURN_IF_ERROR(internal::CheckSameShape(op, "fwd.y", y, "dy", dy));
  }
  RETURN_IF_ERROR(UseDevice(x.device()));
  ASSIGN_OR_RETURN(cudnnHandle_t handle, CudnnHandle(x.device().index));
  PoolDescriptors d;
  RETURN_IF_ERROR(d.Init(mode, g, o));
  ASSIGN_OR_RETURN(Tensor dx, internal::EmptyCuda({g.n, g.c, g.h, g.w}, x.dtype(), x.device()));
  const float one = 1.0f, zero = 0.0f;
  PADDLE_CUDNN_RETURN_IF_ERROR(cudnnPoolingBackward(handle, d.pool.get(), &one, d.y.get(), y.data(),
                                                    d.y.get(), dy.data(), d.x.get(), x.data(),
                                                    &zero, d.x.get(), dx.data()));
  return dx;
}

}  // namespace

absl::StatusOr<MaxPool2dResult> MaxPool2dForward(const Tensor& x, const Pool2dOptions& o) {
  MaxPool2dResult r;
  ASSIGN_OR_RETURN(r.y, Forward("cuda::MaxPool2dForward", kMax, x, o));
  return r;
}

absl::StatusOr<Tensor> MaxPool2dBackward(const Tensor& x, const MaxPool2dResult& fwd,
                                         const Tensor& dy, const Pool2dOptions& o) {
  return Backward("cuda::MaxPool2dBackward", kMax, x, fwd.y, dy, o);
}

absl::StatusOr<Tensor> AvgPool2dForward(const Tensor& x, const Pool2dOptions& o) {
  return Forward("cuda::AvgPool2dForward", kAvg, x, o);
}

absl::StatusOr<Tensor> AvgPool2dBackward(const Tensor& x, const Tensor& dy,
                                         const Pool2dOptions& o) {
  // cuDNN's average backward reads neither y nor x's values; dy stands in for y.
  return Backward("cuda::AvgPool2dBackward", kAvg, x, dy, dy, o);
}

}  // namespace cuda
}  // namespace ops
}  // namespace paddle

#pragma GCC diagnostic pop
