// Argument checks and output allocation shared by the CPU kernels in paddle/ops/cpu.
//
// Every kernel validates its inputs before touching memory and returns InvalidArgument naming the
// op, the argument and the offending shape, dtype or value, so that a bad call from the autograd
// layer is an error message and never a crash. Kernels accept "dense" tensors: strides that are a
// permutation of a contiguous layout (NCHW, or the channels-last NHWC that the oneDNN convolutions
// produce, see Note [Activation layout] in conv2d.h). Elementwise kernels run over the raw storage
// of a dense tensor and give their output the same strides, so a layout survives a ReLU.
#ifndef PADDLE_OPS_CPU_OP_CHECKS_H_
#define PADDLE_OPS_CPU_OP_CHECKS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "paddle/core/tensor.h"

namespace paddle {
namespace ops {
namespace cpu {
namespace internal {

// "float32[2, 3]", or "undefined" for a default-constructed tensor.
std::string Describe(const Tensor& t);

// `t` is defined, on the CPU and of dtype `dtype`.
absl::Status CheckTensor(const char* op, const char* name, const Tensor& t, DType dtype);
// CheckTensor plus t.dim() == rank.
absl::Status CheckTensor(const char* op, const char* name, const Tensor& t, DType dtype, int rank);
// a and b have the same shape.
absl::Status CheckSameShape(const char* op, const char* a_name, const Tensor& a, const char* b_name,
                            const Tensor& b);

// True when the strides of `t` are a permutation of a contiguous layout (every element of a block
// of numel() elements is reached exactly once). Size-1 dimensions may have any stride.
bool IsDense(const Tensor& t);
// `t` if dense, else a contiguous copy.
absl::StatusOr<Tensor> Dense(const Tensor& t);
// True when `t` is a 4-D tensor laid out channels-last (NHWC strides for logical NCHW).
bool IsChannelsLast(const Tensor& t);

// Uninitialized tensor with the given shape and strides (strides must describe a dense layout).
absl::StatusOr<Tensor> EmptyStrided(absl::Span<const int64_t> shape,
                                    absl::Span<const int64_t> strides, DType dtype);
// Uninitialized tensor with the same shape and layout as the dense tensor `like`.
absl::StatusOr<Tensor> EmptyLike(const Tensor& like, DType dtype);
// Uninitialized logical-NCHW tensor with channels-last strides.
absl::StatusOr<Tensor> EmptyChannelsLast(int64_t n, int64_t c, int64_t h, int64_t w);
// `t` with the layout (strides) of the dense tensor `like`, which has t's shape: `t` itself when
// the strides already agree, else a copy.
absl::StatusOr<Tensor> MatchLayout(const Tensor& t, const Tensor& like);

// Below this many elements a loop runs on one thread: an OpenMP fork costs microseconds.
constexpr int64_t kParallelGrain = 1 << 15;

// out = f(a, b) elementwise for fp32 tensors of one shape, out in a's layout (b is brought to
// it); the shared loop of the binary elementwise ops and the activations' backward passes.
template <typename F>
absl::StatusOr<Tensor> MapBinary(const char* op, const char* a_name, const Tensor& a,
                                 const char* b_name, const Tensor& b, F f) {
  absl::Status s = CheckTensor(op, a_name, a, DType::kFloat32);
  if (s.ok()) s = CheckTensor(op, b_name, b, DType::kFloat32);
  if (s.ok()) s = CheckSameShape(op, a_name, a, b_name, b);
  if (!s.ok()) return s;
  absl::StatusOr<Tensor> ad = Dense(a);
  if (!ad.ok()) return ad.status();
  absl::StatusOr<Tensor> bd = MatchLayout(b, *ad);
  if (!bd.ok()) return bd.status();
  absl::StatusOr<Tensor> out = EmptyLike(*ad, DType::kFloat32);
  if (!out.ok()) return out.status();
  const float* ap = ad->data<float>();
  const float* bp = bd->data<float>();
  float* outp = out->data<float>();
  const int64_t n = ad->numel();
#pragma omp parallel for simd schedule(static) if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) outp[i] = f(ap[i], bp[i]);
  return out;
}

}  // namespace internal
}  // namespace cpu
}  // namespace ops
}  // namespace paddle

#endif  // PADDLE_OPS_CPU_OP_CHECKS_H_
