// Conv2d forward/backward as cuDNN legacy convolution calls on NCHW fp32 descriptors.
//
// Note [cuDNN convolution algorithms]
// For each call the algorithm comes from cuDNN's heuristics (cudnnGet*Algorithm_v7, cheap, no
// benchmarking). The convolution descriptor is set to CUDNN_FMA_MATH, and results that would use
// tensor-op math are skipped, so fp32 stays fp32 (no TF32) and agrees with the CPU op. Of the
// remaining results, the first deterministic one wins (the backward "algo 0"s accumulate with
// atomics, so their bits change from run to run), else the first that is supported at all. When the
// heuristics offer nothing usable, the implicit-GEMM algorithms, which support every fp32 NCHW
// geometry and are deterministic, are the fallback.
#include "paddle/ops/cuda/conv2d.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "paddle/core/status.h"
#include "paddle/ops/cuda/cudnn_descriptors.h"
#include "paddle/ops/cuda/handles.h"
#include "paddle/ops/cuda/op_checks.h"

namespace paddle {
namespace ops {
namespace cuda {
namespace {

using internal::CheckCudaTensor;
using internal::Describe;

struct ConvGeometry {
  int64_t n, c, h, w, k, r, s, oh, ow;
};

absl::StatusOr<ConvGeometry> CheckConv(const char* op, const Tensor& x, const Tensor& w,
                                       const Conv2dOptions& o) {
  RETURN_IF_ERROR(CheckCudaTensor(op, "x", x, {DType::kFloat32}, 4));
  RETURN_IF_ERROR(CheckCudaTensor(op, "w", w, {DType::kFloat32}, 4));
  RETURN_IF_ERROR(internal::CheckSameDeviceAndDType(op, "x", x, "w", w));
  if (o.stride_h < 1 || o.stride_w < 1 || o.pad_h < 0 || o.pad_w < 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": stride (", o.stride_h, ", ", o.stride_w,
                                                   ") must be >= 1 and padding (", o.pad_h, ", ",
                                                   o.pad_w, ") >= 0"));
  }
  ConvGeometry g{x.shape()[0],
                 x.shape()[1],
                 x.shape()[2],
                 x.shape()[3],
                 w.shape()[0],
                 w.shape()[2],
                 w.shape()[3],
                 0,
                 0};
  if (w.shape()[1] != g.c) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": x ", Describe(x), " has ", g.c,
                                                   " channels but w ", Describe(w), " expects ",
                                                   w.shape()[1]));
  }
  const int64_t hp = g.h + 2 * o.pad_h;
  const int64_t wp = g.w + 2 * o.pad_w;
  if (g.n < 1 || g.c < 1 || g.k < 1 || g.r < 1 || g.s < 1 || hp < g.r || wp < g.s) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": x ", Describe(x), " padded by (", o.pad_h, ", ", o.pad_w,
                     ") is empty or smaller than the kernel of w ", Describe(w)));
  }
  g.oh = (hp - g.r) / o.stride_h + 1;
  g.ow = (wp - g.s) / o.stride_w + 1;
  RETURN_IF_ERROR(internal::CheckIntRange(op, x));
  RETURN_IF_ERROR(internal::CheckIntRange(op, w));
  if (g.n * g.k * g.oh * g.ow > INT32_MAX || o.stride_h > INT32_MAX || o.stride_w > INT32_MAX ||
      o.pad_h > INT32_MAX || o.pad_w > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": x ", Describe(x), " with w ", Describe(w),
                                                   " gives an output [", g.n, ", ", g.k, ", ", g.oh,
                                                   ", ", g.ow, "] beyond cuDNN's int range"));
  }
  return g;
}

absl::Status CheckBias(const char* op, const Tensor& x, const Tensor& b, int64_t k) {
  RETURN_IF_ERROR(CheckCudaTensor(op, "b", b, {DType::kFloat32}, 1));
  RETURN_IF_ERROR(internal::CheckSameDeviceAndDType(op, "x", x, "b", b));
  if (b.shape()[0] != k) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": b ", Describe(b), " must have ", k, " elements, one per filter"));
  }
  return absl::OkStatus();
}

// The descriptors of one convolution: x/dx, w/dw, y/dy, the bias [1, K, 1, 1] and the conv.
struct ConvDescriptors {
  internal::TensorDescriptor x, y, bias;
  internal::FilterDescriptor w;
  internal::ConvolutionDescriptor conv;

  absl::Status Init(const char* op, const ConvGeometry& g, const Conv2dOptions& o) {
    RETURN_IF_ERROR(internal::MakeNchw(&x, g.n, g.c, g.h, g.w).status());
    RETURN_IF_ERROR(internal::MakeNchw(&y, g.n, g.k, g.oh, g.ow).status());
    RETURN_IF_ERROR(internal::MakeNchw(&bias, 1, g.k, 1, 1).status());
    RETURN_IF_ERROR(w.Create());
    PADDLE_CUDNN_RETURN_IF_ERROR(cudnnSetFilter4dDescriptor(
        w.get(), CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, static_cast<int>(g.k), static_cast<int>(g.c),
        static_cast<int>(g.r), static_cast<int>(g.s)));
    RETURN_IF_ERROR(conv.Create());
    PADDLE_CUDNN_RETURN_IF_ERROR(cudnnSetConvolution2dDescriptor(
        conv.get(), static_cast<int>(o.pad_h), static_cast<int>(o.pad_w),
        static_cast<int>(o.stride_h), static_cast<int>(o.stride_w), 1, 1, CUDNN_CROSS_CORRELATION,
        CUDNN_DATA_FLOAT));
    PADDLE_CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionMathType(conv.get(), CUDNN_FMA_MATH));
    // cuDNN's own output size must be ours (both floor); a mismatch is a bug, not bad input.
    int dims[4];
    PADDLE_CUDNN_RETURN_IF_ERROR(cudnnGetConvolution2dForwardOutputDim(
        conv.get(), x.get(), w.get(), &dims[0], &dims[1], &dims[2], &dims[3]));
    if (dims[0] != g.n || dims[1] != g.k || dims[2] != g.oh || dims[3] != g.ow) {
      return absl::InternalError(absl::StrCat(op, ": cuDNN's output [", dims[0], ", ", dims[1],
                                              ", ", dims[2], ", ", dims[3], "] differs from [", g.n,
                                              ", ", g.k, ", ", g.oh, ", ", g.ow, "]"));
    }
    return absl::OkStatus();
  }
};

// Note [cuDNN convolution algorithms].
template <typename Perf, typename Algo>
Algo PickAlgo(const Perf* perf, int count, Algo fallback) {
  const Perf* supported = nullptr;
  for (int i = 0; i < count; ++i) {
    const Perf& p = perf[i];
    if (p.status != CUDNN_STATUS_SUCCESS || p.mathType == CUDNN_TENSOR_OP_MATH ||
        p.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) {
      continue;
    }
    if (p.determinism == CUDNN_DETERMINISTIC) return p.algo;
    if (supported == nullptr) supported = &p;
  }
  return supported != nullptr ? supported->algo : fallback;
}

// An uninitialized byte buffer for cuDNN on x's device.
absl::StatusOr<Tensor> Workspace(const Tensor& x, size_t bytes) {
  return internal::EmptyCuda({static_cast<int64_t>(bytes)}, DType::kUInt8, x.device());
}

}  // namespace

absl::StatusOr<Tensor> Conv2dForward(const Tensor& x, const Tensor& w, const Tensor* b,
                                     const Conv2dOptions& o) {
  constexpr const char* kOp = "cuda::Conv2dForward";
  ASSIGN_OR_RETURN(const ConvGeometry g, CheckConv(kOp, x, w, o));
  if (b != nullptr) RETURN_IF_ERROR(CheckBias(kOp, x, *b, g.k));
  RETURN_IF_ERROR(UseDevice(x.device()));
  ASSIGN_OR_RETURN(cudnnHandle_t handle, CudnnHandle(x.device().index));
  ConvDescriptors d;
  RETURN_IF_ERROR(d.Init(kOp, g, o));

  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int count = 0;
  PADDLE_CUDNN_RETURN_IF_ERROR(
      cudnnGetConvolutionForwardAlgorithm_v7(handle, d.x.get(), d.w.get(), d.conv.get(), d.y.get(),
                                             CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &count, perf));
  const cudnnConvolutionFwdAlgo_t algo =
      PickAlgo(perf, count, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM);
  size_t bytes = 0;
  PADDLE_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionForwardWorkspaceSize(
      handle, d.x.get(), d.w.get(), d.conv.get(), d.y.get(), algo, &bytes));
  ASSIGN_OR_RETURN(Tensor workspace, Workspace(x, bytes));
  ASSIGN_OR_RETURN(Tensor y, internal::EmptyCuda({g.n, g.k, g.oh, g.ow}, x.dtype(), x.device()));
  const float one = 1.0f, zero = 0.0f;
  PADDLE_CUDNN_RETURN_IF_ERROR(
      cudnnConvolutionForward(handle, &one, d.x.get(), x.data(), d.w.get(), w.data(), d.conv.get(),
                              algo, workspace.data(), bytes, &zero, d.y.get(), y.data()));
  if (b != nullptr) {
    PADDLE_CUDNN_RETURN_IF_ERROR(
        cudnnAddTensor(handle, &one, d.bias.get(), b->data(), &one, d.y.get(), y.data()));
  }
  return y;
}

absl::StatusOr<Conv2dGrads> Conv2dBackward(const Tensor& x, const Tensor& w, const Tensor& dy,
                                           const Conv2dOptions& o, bool need_dx, bool need_db) {
  constexpr const char* kOp = "cuda::Conv2dBackward";
  ASSIGN_OR_RETURN(const ConvGeometry g, CheckConv(kOp, x, w, o));
  RETURN_IF_ERROR(CheckCudaTensor(kOp, "dy", dy, {DType::kFloat32}, 4));
  RETURN_IF_ERROR(internal::CheckSameDeviceAndDType(kOp, "x", x, "dy", dy));
  if (dy.shape() != Shape{g.n, g.k, g.oh, g.ow}) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": dy ", Describe(dy), " must be ", ShapeToString({g.n, g.k, g.oh, g.ow}),
                     " for x ", Describe(x), " and w ", Describe(w), " (stride ", o.stride_h, ", ",
                     o.stride_w, ", padding ", o.pad_h, ", ", o.pad_w, ")"));
  }
  RETURN_IF_ERROR(UseDevice(x.device()));
  ASSIGN_OR_RETURN(cudnnHandle_t handle, CudnnHandle(x.device().index));
  ConvDescriptors d;
  RETURN_IF_ERROR(d.Init(kOp, g, o));
  const float one = 1.0f, zero = 0.0f;
  Conv2dGrads grads;

  {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int count = 0;
    PADDLE_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        handle, d.x.get(), d.y.get(), d.conv.get(), d.w.get(),
        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &count, perf));
    const cudnnConvolutionBwdFilterAlgo_t algo =
        PickAlgo(perf, count, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1);
    size_t bytes = 0;
    PADDLE_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardFilterWorkspaceSize(
        handle, d.x.get(), d.y.get(), d.conv.get(), d.w.get(), algo, &bytes));
    ASSIGN_OR_RETURN(Tensor workspace, Workspace(x, bytes));
    ASSIGN_OR_RETURN(grads.dw, internal::EmptyCuda({g.k, g.c, g.r, g.s}, x.dtype(), x.device()));
    PADDLE_CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardFilter(
        handle, &one, d.x.get(), x.data(), d.y.get(), dy.data(), d.conv.get(), algo,
        workspace.data(), bytes, &zero, d.w.get(), grads.dw.data()));
  }
  if (need_dx) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int count = 0;
    PADDLE_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardDataAlgorithm_v7(
        handle, d.w.get(), d.y.get(), d.conv.get(), d.x.get(),
        CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &count, perf));
    const cudnnConvolutionBwdDataAlgo_t algo =
        PickAlgo(perf, count, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1);
    size_t bytes = 0;
    PADDLE_CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardDataWorkspaceSize(
        handle, d.w.get(), d.y.get(), d.conv.get(), d.x.get(), algo, &bytes));
    ASSIGN_OR_RETURN(Tensor workspace, Workspace(x, bytes));
    ASSIGN_OR_RETURN(grads.dx, internal::EmptyCuda({g.n, g.c, g.h, g.w}, x.dtype(), x.device()));
    PADDLE_CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardData(
        handle, &one, d.w.get(), w.data(), d.y.get(), dy.data(), d.conv.get(), algo,
        workspace.data(), bytes, &zero, d.x.get(), grads.dx.data()));
  }
  if (need_db) {
    ASSIGN_OR_RETURN(grads.db, internal::EmptyCuda({g.k}, x.dtype(), x.device()));
    PADDLE_CUDNN_RETURN_IF_ERROR(cudnnConvolutionBackwardBias(
        handle, &one, d.y.get(), dy.data(), &zero, d.bias.get(), grads.db.data()));
  }
  return grads;
}

}  // namespace cuda
}  // namespace ops
}  // namespace paddle
