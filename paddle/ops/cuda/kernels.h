// Pointer-level CUDA kernels behind the tensor ops of paddle/ops/cuda: elementwise arithmetic,
// activations, reductions, the SGD update and softmax cross-entropy.
//
// Storage may be fp32, fp16 or bf16 (`dtype` says which; other dtypes are kInvalidArgument); the
// arithmetic is always fp32, and a 16-bit result is rounded once, to nearest even, when stored.
// Pointers are device pointers to `n` elements; outputs may alias inputs element for element (in
// place) but must not overlap them otherwise. Work is enqueued on `stream`: an OK return means the
// launch succeeded, not that the kernel finished. n == 0 launches nothing. Reductions are
// deterministic: a fixed grid and a fixed combination order, whatever the GPU.
#ifndef PADDLE_OPS_CUDA_KERNELS_H_
#define PADDLE_OPS_CUDA_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "paddle/core/dtype.h"

namespace paddle {
namespace ops {
namespace cuda {
namespace kernels {

enum class BinaryOp { kAdd, kSub, kMul };
enum class Activation { kRelu, kGelu, kTanh, kSigmoid };

// "relu", "gelu", "tanh", "sigmoid".
const char* ActivationName(Activation act);

// out = a op b.
absl::Status Binary(BinaryOp op, DType dtype, const void* a, const void* b, void* out, int64_t n,
                    cudaStream_t stream);
// out = x * s.
absl::Status Scale(DType dtype, const void* x, float s, void* out, int64_t n, cudaStream_t stream);
// y += alpha * x.
absl::Status Axpy(DType dtype, float alpha, const void* x, void* y, int64_t n, cudaStream_t stream);
// out[i] = value (rounded to the storage type).
absl::Status Fill(DType dtype, void* out, float value, int64_t n, cudaStream_t stream);

// y = act(x). relu: max(x, 0); gelu: x Phi(x) (exact, erf); tanh; sigmoid: 1 / (1 + e^-x).
absl::Status ActivationForward(Activation act, DType dtype, const void* x, void* y, int64_t n,
                               cudaStream_t stream);
// dx = dy * act'(.). `saved` is the forward output y for relu (dy where y > 0), tanh
// (dy (1 - y^2)) and sigmoid (dy y (1 - y)), and the forward input x for gelu
// (dy (Phi(x) + x phi(x))): the same inputs as the CPU ops take.
absl::Status ActivationBackward(Activation act, DType dtype, const void* saved, const void* dy,
                                void* dx, int64_t n, cudaStream_t stream);

// *out (one fp32 value on the device) = scale * sum of x's n elements, accumulated in fp32 by a
// fixed tree (so the same result on every run). scale = 1/n gives the mean. n == 0 writes 0.
absl::Status Sum(DType dtype, const void* x, int64_t n, float scale, float* out,
                 cudaStream_t stream);
// out[j] = sum_i x[i, j] for a row-major [rows, cols] x, accumulated in fp32 in row order (the
// CPU's SumRows order, so fp32 results match it bit for bit); out has x's dtype. rows == 0 writes
// zeros.
absl::Status SumRows(DType dtype, const void* x, int64_t rows, int64_t cols, void* out,
                     cudaStream_t stream);
// y[i, j] += b[j] for a row-major [rows, cols] y.
absl::Status AddBiasRows(DType dtype, void* y, const void* b, int64_t rows, int64_t cols,
                         cudaStream_t stream);

// One SGD step over fp32 parameters, paddle/optim/sgd.h's math (PyTorch's torch.optim.SGD):
//   g' = g + wd w; buf = first ? g' : momentum buf + (1 - dampening) g';
//   d = momentum == 0 ? g' : (nesterov ? g' + momentum buf : buf); w -= lr d.
// `buf` is unused (may be null) when momentum == 0.
struct SgdParams {
  float lr = 0.01f, momentum = 0.0f, dampening = 0.0f, weight_decay = 0.0f;
  bool nesterov = false;
  bool first = false;  // the parameter's first update: buf = g'
};
absl::Status SgdUpdate(const SgdParams& p, float* w, const float* g, float* buf, int64_t n,
                       cudaStream_t stream);

// Softmax cross-entropy over fp32 logits [rows, k] and int64 labels [rows], one block per row,
// max-subtracted: probs[i, :] = softmax(logits[i, :]); row_loss[i] = log(sum exp(l - max)) -
// (l[label] - max). A label outside [0, k) gives a NaN row loss and increments *bad_labels (an int
// on the device, which the caller zeroes) and records the first such row in *first_bad_row
// (initialized by the caller to any value >= rows, e.g. memset 0x7f; atomicMin).
absl::Status SoftmaxCrossEntropyForward(const float* logits, const int64_t* labels, int64_t rows,
                                        int64_t k, float* probs, float* row_loss, int* bad_labels,
                                        int64_t* first_bad_row, cudaStream_t stream);
// dlogits = scale * (probs - onehot(labels)), scale = dloss / rows as the CPU op uses. A label
// outside [0, k) gives a NaN row.
absl::Status SoftmaxCrossEntropyBackward(const float* probs, const int64_t* labels, int64_t rows,
                                         int64_t k, float scale, float* dlogits,
                                         cudaStream_t stream);

}  // namespace kernels
}  // namespace cuda
}  // namespace ops
}  // namespace paddle

#endif  // PADDLE_OPS_CUDA_KERNELS_H_
