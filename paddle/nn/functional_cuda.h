// The CUDA halves of the differentiable operations of functional.h: the same forward/backward
// recording, with the kernels of paddle/ops/cuda. functional.cc calls these once OpDevice
// (device_dispatch.h) has found every input on one CUDA device. Compiled only with CUDA.
//
// Note [bf16 autocast]: with AutocastBf16 on (functional.h), Linear casts x, w and b to bf16 for
// the GEMM (cuBLAS accumulates in fp32) and casts y back to fp32, so the rest of the graph stays
// fp32. Its backward casts dy to bf16, runs the bf16 GEMMs and returns fp32 dx, dw, db: the fp32
// parameters are master weights whose gradients and updates never round to bf16 beyond the one
// rounding of each GEMM output. CPU tensors ignore the switch.
#ifndef PADDLE_NN_FUNCTIONAL_CUDA_H_
#define PADDLE_NN_FUNCTIONAL_CUDA_H_

#include "absl/status/statusor.h"
#include "paddle/core/autograd/variable.h"
#include "paddle/ops/cpu/conv2d.h"
#include "paddle/ops/cpu/pool2d.h"

namespace paddle::nn::functional::cuda_impl {

using autograd::Variable;

absl::StatusOr<Variable> Linear(const Variable& x, const Variable& w, const Variable& b,
                                bool autocast_bf16);
absl::StatusOr<Variable> Conv2d(const Variable& x, const Variable& w, const Variable& b,
                                const ops::cpu::Conv2dOptions& options);
absl::StatusOr<Variable> MaxPool2d(const Variable& x, const ops::cpu::Pool2dOptions& options);
absl::StatusOr<Variable> AvgPool2d(const Variable& x, const ops::cpu::Pool2dOptions& options);
// Evaluation mode records a backward that fails (kUnimplemented): fine-tuning through frozen
// batch statistics is CPU-only so far.
absl::StatusOr<Variable> BatchNorm(const Variable& x, const Variable& gamma, const Variable& beta,
                                   Tensor* running_mean, Tensor* running_var, bool training,
                                   double momentum, double eps);
absl::StatusOr<Variable> Dropout(const Variable& x, double p, uint64_t seed, uint64_t stream,
                                 uint64_t offset);
absl::StatusOr<Variable> Relu(const Variable& x);
absl::StatusOr<Variable> Gelu(const Variable& x);
absl::StatusOr<Variable> SoftmaxCrossEntropy(const Variable& logits, const Tensor& labels);
absl::StatusOr<Variable> Add(const Variable& a, const Variable& b);
absl::StatusOr<Variable> Mul(const Variable& a, const Variable& b);

// fp32 <-> bf16/fp16 copy of a contiguous CUDA tensor (another dtype: kInvalidArgument).
absl::StatusOr<Tensor> Cast(const Tensor& t, DType to);

}  // namespace paddle::nn::functional::cuda_impl

#endif  // PADDLE_NN_FUNCTIONAL_CUDA_H_
