// Reductions with fp32 accumulation (sum over all elements, sums over rows), the bias add that
// pairs with the row sums, and softmax cross-entropy (a reduction per row). Every reduction has a
// fixed shape and order that depends only on the sizes, so results are the same on every run.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "paddle/core/cuda/cuda_status.h"
#include "paddle/core/status.h"
#include "paddle/ops/cuda/kernel_util.cu.h"
#include "paddle/ops/cuda/kernels.h"

namespace paddle {
namespace ops {
namespace cuda {
namespace kernels {
namespace {

constexpr int kReduceThreads = 1024;
constexpr int kRowThreads = 256;

struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Tree reduction of one value per thread over the block; every thread gets the result. `shared`
// holds blockDim.x floats (a power of two).
template <typename Op>
__device__ float BlockReduce(float v, float* shared, Op op) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half)
      shared[threadIdx.x] = op(shared[threadIdx.x], shared[threadIdx.x + half]);
    __syncthreads();
  }
  const float r = shared[0];
  __syncthreads();  // shared may be reused right after
  return r;
}

// One block: each thread sums a strided subset in order, then a tree. Deliberately a single block
// (no scratch memory, no atomics): the sums it serves (losses, metrics) are small.
template <typename T>
__global__ void SumKernel(const T* x, int64_t n, float scale, float* out) {
  __shared__ float shared[kReduceThreads];
  float acc = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc += LoadFloat(x[i]);
  const float total = BlockReduce(acc, shared, SumOp());
  if (threadIdx.x == 0) *out = total * scale;
}

// One thread per column, rows in order: the CPU SumRows order.
template <typename T>
__global__ void SumRowsKernel(const T* x, int64_t rows, int64_t cols, T* out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < cols;
       j += stride) {
    float acc = 0.0f;
    for (int64_t i = 0; i < rows; ++i) acc += LoadFloat(x[i * cols + j]);
    out[j] = StoreAs<T>(acc);
  }
}

template <typename T>
__global__ void AddBiasRowsKernel(T* y, const T* b, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    y[i] = StoreAs<T>(LoadFloat(y[i]) + LoadFloat(b[i % cols]));
  }
}

// Rows handled by block b: b, b + gridDim.x, ...
__global__ void SoftmaxCrossEntropyForwardKernel(const float* logits, const int64_t* labels,
                                                 int64_t rows, int64_t k, float* probs,
                                                 float* row_loss, int* bad_labels,
                                                 int64_t* first_bad_row) {
  __shared__ float shared[kRowThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* row = logits + r * k;
    float* prow = probs + r * k;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < k; j += blockDim.x) m = fmaxf(m, row[j]);
    m = BlockReduce(m, shared, MaxOp());
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < k; j += blockDim.x) {
      const float e = expf(row[j] - m);
      prow[j] = e;
      s += e;
    }
    s = BlockReduce(s, shared, SumOp());
    const float inv = 1.0f / s;
    for (int64_t j = threadIdx.x; j < k; j += blockDim.x) prow[j] *= inv;
    if (threadIdx.x == 0) {
      const int64_t label = labels[r];
      if (label < 0 || label >= k) {
        row_loss[r] = NAN;
        atomicAdd(bad_labels, 1);
        atomicMin(reinterpret_cast<unsigned long long*>(first_bad_row),  // NOLINT(runtime/int)
                  static_cast<unsigned long long>(r));                   // NOLINT(runtime/int)
      } else {
        row_loss[r] = logf(s) - (row[label] - m);
      }
    }
  }
}

__global__ void SoftmaxCrossEntropyBackwardKernel(const float* probs, const int64_t* labels,
                                                  int64_t rows, int64_t k, float scale,
                                                  float* dlogits) {
  const int64_t n = rows * k;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const int64_t r = i / k;
    const int64_t j = i - r * k;
    const int64_t label = labels[r];
    if (label < 0 || label >= k) {
      dlogits[i] = NAN;
    } else {
      dlogits[i] = scale * (probs[i] - (j == label ? 1.0f : 0.0f));
    }
  }
}

template <typename T>
absl::Status LaunchSum(const void* x, int64_t n, float scale, float* out, cudaStream_t stream) {
  SumKernel<T><<<1, kReduceThreads, 0, stream>>>(static_cast<const T*>(x), n, scale, out);
  return CheckLaunch("Sum", n);
}

template <typename T>
absl::Status LaunchSumRows(const void* x, int64_t rows, int64_t cols, void* out,
                           cudaStream_t stream) {
  SumRowsKernel<T><<<GridFor(cols, 1), kBlockThreads, 0, stream>>>(static_cast<const T*>(x), rows,
                                                                   cols, static_cast<T*>(out));
  return CheckLaunch("SumRows", rows * cols);
}

template <typename T>
absl::Status LaunchAddBiasRows(void* y, const void* b, int64_t rows, int64_t cols,
                               cudaStream_t stream) {
  AddBiasRowsKernel<T><<<GridFor(rows * cols, 1), kBlockThreads, 0, stream>>>(
      static_cast<T*>(y), static_cast<const T*>(b), rows, cols);
  return CheckLaunch("AddBiasRows", rows * cols);
}

}  // namespace

absl::Status Sum(DType dtype, const void* x, int64_t n, float scale, float* out,
                 cudaStream_t stream) {
  RETURN_IF_ERROR(CheckStorageDType("Sum", dtype));
  // n == 0 still launches: the kernel writes the empty sum, 0.
  switch (dtype) {
    case DType::kFloat16:
      return LaunchSum<__half>(x, n, scale, out, stream);
    case DType::kBFloat16:
      return LaunchSum<__nv_bfloat16>(x, n, scale, out, stream);
    default:
      return LaunchSum<float>(x, n, scale, out, stream);
  }
}

absl::Status SumRows(DType dtype, const void* x, int64_t rows, int64_t cols, void* out,
                     cudaStream_t stream) {
  RETURN_IF_ERROR(CheckStorageDType("SumRows", dtype));
  if (cols == 0) return absl::OkStatus();
  switch (dtype) {
    case DType::kFloat16:
      return LaunchSumRows<__half>(x, rows, cols, out, stream);
    case DType::kBFloat16:
      return LaunchSumRows<__nv_bfloat16>(x, rows, cols, out, stream);
    default:
      return LaunchSumRows<float>(x, rows, cols, out, stream);
  }
}

absl::Status AddBiasRows(DType dtype, void* y, const void* b, int64_t rows, int64_t cols,
                         cudaStream_t stream) {
  RETURN_IF_ERROR(CheckStorageDType("AddBiasRows", dtype));
  if (rows == 0 || cols == 0) return absl::OkStatus();
  switch (dtype) {
    case DType::kFloat16:
      return LaunchAddBiasRows<__half>(y, b, rows, cols, stream);
    case DType::kBFloat16:
      return LaunchAddBiasRows<__nv_bfloat16>(y, b, rows, cols, stream);
    default:
      return LaunchAddBiasRows<float>(y, b, rows, cols, stream);
  }
}

absl::Status SoftmaxCrossEntropyForward(const float* logits, const int64_t* labels, int64_t rows,
                                        int64_t k, float* probs, float* row_loss, int* bad_labels,
                                        int64_t* first_bad_row, cudaStream_t stream) {
  if (rows == 0) return absl::OkStatus();
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(rows, kMaxBlocks));
  SoftmaxCrossEntropyForwardKernel<<<blocks, kRowThreads, 0, stream>>>(
      logits, labels, rows, k, probs, row_loss, bad_labels, first_bad_row);
  return CheckLaunch("SoftmaxCrossEntropyForward", rows * k);
}

absl::Status SoftmaxCrossEntropyBackward(const float* probs, const int64_t* labels, int64_t rows,
                                         int64_t k, float scale, float* dlogits,
                                         cudaStream_t stream) {
  if (rows == 0 || k == 0) return absl::OkStatus();
  SoftmaxCrossEntropyBackwardKernel<<<GridFor(rows * k, 1), kBlockThreads, 0, stream>>>(
      probs, labels, rows, k, scale, dlogits);
  return CheckLaunch("SoftmaxCrossEntropyBackward", rows * k);
}

}  // namespace kernels
}  // namespace cuda
}  // namespace ops
}  // namespace paddle
