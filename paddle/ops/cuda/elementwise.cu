// Elementwise and activation kernels: one grid-stride map kernel, instantiated per storage type
// and per fp32 functor. When every pointer is 16-byte aligned the bulk goes through 16-byte
// vector loads and stores (4 floats or 8 halves per thread step) and the tail element by element;
// otherwise everything goes element by element. Both paths compute each element with the same
// functor, so the results are identical.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
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

template <typename T>
struct alignas(16) Vec16 {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};

// out[i] = f(a[i], b[i]). `a`, `b` and `out` may be the same pointer.
template <typename T, typename F>
__global__ void MapKernel(F f, const T* a, const T* b, T* out, int64_t n, bool vectorized) {
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t start = 0;
  if (vectorized) {
    constexpr int kV = Vec16<T>::kSize;
    const int64_t nvec = n / kV;
    const auto* av = reinterpret_cast<const Vec16<T>*>(a);
    const auto* bv = reinterpret_cast<const Vec16<T>*>(b);
    auto* ov = reinterpret_cast<Vec16<T>*>(out);
    for (int64_t i = tid; i < nvec; i += stride) {
      const Vec16<T> x = av[i];
      const Vec16<T> y = bv[i];
      Vec16<T> r;
#pragma unroll
      for (int j = 0; j < kV; ++j) r.v[j] = StoreAs<T>(f(LoadFloat(x.v[j]), LoadFloat(y.v[j])));
      ov[i] = r;
    }
    start = nvec * kV;
  }
  for (int64_t i = start + tid; i < n; i += stride) {
    out[i] = StoreAs<T>(f(LoadFloat(a[i]), LoadFloat(b[i])));
  }
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename T, typename F>
absl::Status LaunchMapTyped(const char* what, F f, const void* a, const void* b, void* out,
                            int64_t n, cudaStream_t stream) {
  const bool vectorized = Aligned16(a) && Aligned16(b) && Aligned16(out);
  const int64_t per_thread = vectorized ? Vec16<T>::kSize : 1;
  MapKernel<T, F><<<GridFor(n, per_thread), kBlockThreads, 0, stream>>>(
      f, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out), n, vectorized);
  return CheckLaunch(what, n);
}

template <typename F>
absl::Status LaunchMap(const char* what, DType dtype, F f, const void* a, const void* b, void* out,
                       int64_t n, cudaStream_t stream) {
  RETURN_IF_ERROR(CheckStorageDType(what, dtype));
  if (n == 0) return absl::OkStatus();
  switch (dtype) {
    case DType::kFloat16:
      return LaunchMapTyped<__half>(what, f, a, b, out, n, stream);
    case DType::kBFloat16:
      return LaunchMapTyped<__nv_bfloat16>(what, f, a, b, out, n, stream);
    default:
      return LaunchMapTyped<float>(what, f, a, b, out, n, stream);
  }
}

struct AddF {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct SubF {
  __device__ float operator()(float a, float b) const { return a - b; }
};
struct MulF {
  __device__ float operator()(float a, float b) const { return a * b; }
};
struct ScaleF {
  float s;
  __device__ float operator()(float a, float) const { return a * s; }
};
// f(x, y) = y + alpha x, launched with out = y.
struct AxpyF {
  float alpha;
  __device__ float operator()(float x, float y) const { return fmaf(alpha, x, y); }
};
struct FillF {
  float value;
  __device__ float operator()(float, float) const { return value; }
};

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;

struct ReluF {
  __device__ float operator()(float x, float) const { return x > 0.0f ? x : 0.0f; }
};
struct GeluF {
  __device__ float operator()(float x, float) const {
    return 0.5f * x * (1.0f + erff(x * kInvSqrt2));
  }
};
struct TanhF {
  __device__ float operator()(float x, float) const { return tanhf(x); }
};
struct SigmoidF {
  __device__ float operator()(float x, float) const { return 1.0f / (1.0f + expf(-x)); }
};
// Backward functors: f(saved, dy).
struct ReluBackF {
  __device__ float operator()(float y, float dy) const { return y > 0.0f ? dy : 0.0f; }
};
struct GeluBackF {
  __device__ float operator()(float x, float dy) const {
    const float cdf = 0.5f * (1.0f + erff(x * kInvSqrt2));
    const float pdf = kInvSqrt2Pi * expf(-0.5f * x * x);
    return dy * (cdf + x * pdf);
  }
};
struct TanhBackF {
  __device__ float operator()(float y, float dy) const { return dy * (1.0f - y * y); }
};
struct SigmoidBackF {
  __device__ float operator()(float y, float dy) const { return dy * y * (1.0f - y); }
};

}  // namespace

const char* ActivationName(Activation act) {
  switch (act) {
    case Activation::kRelu:
      return "relu";
    case Activation::kGelu:
      return "gelu";
    case Activation::kTanh:
      return "tanh";
    case Activation::kSigmoid:
      return "sigmoid";
  }
  return "unknown activation";
}

absl::Status Binary(BinaryOp op, DType dtype, const void* a, const void* b, void* out, int64_t n,
                    cudaStream_t stream) {
  switch (op) {
    case BinaryOp::kAdd:
      return LaunchMap("Add", dtype, AddF{}, a, b, out, n, stream);
    case BinaryOp::kSub:
      return LaunchMap("Sub", dtype, SubF{}, a, b, out, n, stream);
    case BinaryOp::kMul:
      return LaunchMap("Mul", dtype, MulF{}, a, b, out, n, stream);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("Binary: unknown BinaryOp ", static_cast<int>(op)));
}

absl::Status Scale(DType dtype, const void* x, float s, void* out, int64_t n, cudaStream_t stream) {
  return LaunchMap("Scale", dtype, ScaleF{s}, x, x, out, n, stream);
}

absl::Status Axpy(DType dtype, float alpha, const void* x, void* y, int64_t n,
                  cudaStream_t stream) {
  return LaunchMap("Axpy", dtype, AxpyF{alpha}, x, y, y, n, stream);
}

absl::Status Fill(DType dtype, void* out, float value, int64_t n, cudaStream_t stream) {
  return LaunchMap("Fill", dtype, FillF{value}, out, out, out, n, stream);
}

absl::Status ActivationForward(Activation act, DType dtype, const void* x, void* y, int64_t n,
                               cudaStream_t stream) {
  switch (act) {
    case Activation::kRelu:
      return LaunchMap("ReluForward", dtype, ReluF{}, x, x, y, n, stream);
    case Activation::kGelu:
      return LaunchMap("GeluForward", dtype, GeluF{}, x, x, y, n, stream);
    case Activation::kTanh:
      return LaunchMap("TanhForward", dtype, TanhF{}, x, x, y, n, stream);
    case Activation::kSigmoid:
      return LaunchMap("SigmoidForward", dtype, SigmoidF{}, x, x, y, n, stream);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("ActivationForward: unknown Activation ", static_cast<int>(act)));
}

absl::Status ActivationBackward(Activation act, DType dtype, const void* saved, const void* dy,
                                void* dx, int64_t n, cudaStream_t stream) {
  switch (act) {
    case Activation::kRelu:
      return LaunchMap("ReluBackward", dtype, ReluBackF{}, saved, dy, dx, n, stream);
    case Activation::kGelu:
      return LaunchMap("GeluBackward", dtype, GeluBackF{}, saved, dy, dx, n, stream);
    case Activation::kTanh:
      return LaunchMap("TanhBackward", dtype, TanhBackF{}, saved, dy, dx, n, stream);
    case Activation::kSigmoid:
      return LaunchMap("SigmoidBackward", dtype, SigmoidBackF{}, saved, dy, dx, n, stream);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("ActivationBackward: unknown Activation ", static_cast<int>(act)));
}

namespace {

template <bool kMomentum>
__global__ void SgdKernel(SgdParams p, float* w, const float* g, float* buf, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    float d = g[i] + p.weight_decay * w[i];
    if (kMomentum) {
      const float b = p.first ? d : p.momentum * buf[i] + (1.0f - p.dampening) * d;
      buf[i] = b;
      d = p.nesterov ? d + p.momentum * b : b;
    }
    w[i] -= p.lr * d;
  }
}

}  // namespace

absl::Status SgdUpdate(const SgdParams& p, float* w, const float* g, float* buf, int64_t n,
                       cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  if (p.momentum != 0.0f) {
    if (buf == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("SgdUpdate: momentum ", p.momentum,
                                                     " needs a momentum buffer of ", n,
                                                     " floats; got null"));
    }
    SgdKernel<true><<<GridFor(n, 1), kBlockThreads, 0, stream>>>(p, w, g, buf, n);
  } else {
    SgdKernel<false><<<GridFor(n, 1), kBlockThreads, 0, stream>>>(p, w, g, buf, n);
  }
  return CheckLaunch("SgdUpdate", n);
}

}  // namespace kernels
}  // namespace cuda
}  // namespace ops
}  // namespace paddle
