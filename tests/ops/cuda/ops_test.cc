// GPU ops (paddle/ops/cuda) against the CPU ops (paddle/ops/cpu) on the same Philox inputs,
// element by element, forward and backward, over odd sizes (1, 3, 17, 1000+) and fp32/fp16/bf16
// storage; plus every argument error path and the no-GPU path.
//
// Tolerances (|gpu - cpu| <= atol + rtol |cpu|): fp32 elementwise and reductions rel 1e-5;
// GEMMs in fp32 rel 1e-5 plus atol 1e-5 * sqrt(K) (another summation order), TF32 rel 1e-2;
// 16-bit storage: the CPU computes on the same 16-bit-rounded inputs in fp32, the GPU result is
// rounded once more, so rel 2^-10 (fp16) / 2^-7 (bf16) plus the fp32 bound.
//
// Without a usable GPU the comparisons skip, naming the reason. The argument checks run first in
// every op and touch no memory, so the error-path tests use CUDA tensors over a fake address and
// run everywhere; so does NoGpuIsFailedPrecondition. Built without CUDA, the file holds one test
// that says so.
#include <cmath>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/gpu_test.h"

#if PADDLE_WITH_CUDA
#include "paddle/core/cuda/cuda_copy.h"
#include "paddle/core/half.h"
#include "paddle/core/philox.h"
#include "paddle/core/tensor.h"
#include "paddle/ops/cpu/activation.h"
#include "paddle/ops/cpu/elementwise.h"
#include "paddle/ops/cpu/linear.h"
#include "paddle/ops/cpu/softmax_cross_entropy.h"
#include "paddle/ops/cuda/activation.h"
#include "paddle/ops/cuda/elementwise.h"
#include "paddle/ops/cuda/handles.h"
#include "paddle/ops/cuda/kernels.h"
#include "paddle/ops/cuda/linear.h"
#include "paddle/ops/cuda/reduce.h"
#include "paddle/ops/cuda/sgd.h"
#include "paddle/ops/cuda/softmax_cross_entropy.h"
#endif

namespace paddle {
namespace {

#if PADDLE_WITH_CUDA

namespace gpu = ::paddle::ops::cuda;
namespace cpu = ::paddle::ops::cpu;
using ::testing::HasSubstr;

std::string Message(const absl::Status& s) { return std::string(s.message()); }

// ---- Host-side helpers ----

// Uniform in [lo, hi), contiguous fp32 on the CPU, from Philox(seed, 0).
Tensor Random(absl::Span<const int64_t> shape, uint64_t seed, float lo = -2.0f, float hi = 2.0f) {
  Tensor t = Tensor::Empty(shape, DType::kFloat32).value();
  Philox rng(seed, 0);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = lo + (hi - lo) * rng.NextFloat();
  return t;
}

// fp32 CPU tensor -> `dtype` CPU tensor (16-bit by the CPU conversions).
Tensor Narrow(const Tensor& t, DType dtype) {
  if (dtype == DType::kFloat32) return t;
  Tensor out = Tensor::Empty(t.shape(), dtype).value();
  auto* bits = static_cast<uint16_t*>(out.data());
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = t.data<float>()[i];
    bits[i] = dtype == DType::kFloat16 ? FloatToHalf(v) : FloatToBFloat16(v);
  }
  return out;
}

// Any float CPU or CUDA tensor -> fp32 CPU tensor.
Tensor Widen(const Tensor& t) {
  Tensor host = t.device().is_cpu() ? t : ToDevice(t, Device::Cpu()).value();
  if (host.dtype() == DType::kFloat32) return host;
  Tensor out = Tensor::Empty(host.shape(), DType::kFloat32).value();
  const auto* bits = static_cast<const uint16_t*>(host.data());
  for (int64_t i = 0; i < host.numel(); ++i) {
    out.data<float>()[i] =
        host.dtype() == DType::kFloat16 ? HalfToFloat(bits[i]) : BFloat16ToFloat(bits[i]);
  }
  return out;
}

// The fp32 values of t rounded to `dtype` and back (what the GPU sees as input).
Tensor RoundTrip(const Tensor& t, DType dtype) { return Widen(Narrow(t, dtype)); }

Tensor OnGpu(const Tensor& t) { return ToDevice(t, Device::Cuda(0)).value(); }

double StorageRel(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
      return 1.0 / 1024;
    case DType::kBFloat16:
      return 1.0 / 128;
    default:
      return 0.0;
  }
}

void ExpectClose(const Tensor& got_any, const Tensor& want, double atol, double rtol,
                 const std::string& what) {
  const Tensor got = Widen(got_any);
  ASSERT_EQ(got.shape(), want.shape()) << what;
  int bad = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double g = got.data<float>()[i];
    const double w = want.data<float>()[i];
    if (!(std::fabs(g - w) <= atol + rtol * std::fabs(w)) && bad++ < 5) {
      ADD_FAILURE() << what << "[" << i << "] = " << g << ", want " << w;
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

// Skips without a usable GPU; the GPU machine runs these (bazel test --test_tag_filters=gpu).
using GpuOpsTest = gpu_test::GpuTest;

const std::vector<int64_t> kSizes = {1, 3, 17, 1000, 4099};
const std::vector<DType> kDTypes = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};

std::string Case(const char* op, DType dtype, int64_t n) {
  return std::string(op) + " " + std::string(DTypeName(dtype)) + " n=" + std::to_string(n);
}

// ---- Elementwise ----

TEST_F(GpuOpsTest, BinaryScaleAxpyFillMatchCpu) {
  for (DType dtype : kDTypes) {
    for (int64_t n : kSizes) {
      const Tensor a = RoundTrip(Random({n}, 1), dtype);
      const Tensor b = RoundTrip(Random({n}, 2), dtype);
      const Tensor ga = OnGpu(Narrow(a, dtype));
      const Tensor gb = OnGpu(Narrow(b, dtype));
      const double rel = 1e-6 + StorageRel(dtype);
      ExpectClose(gpu::Add(ga, gb).value(), cpu::Add(a, b).value(), 0, rel, Case("Add", dtype, n));
      ExpectClose(gpu::Mul(ga, gb).value(), cpu::Mul(a, b).value(), 0, rel, Case("Mul", dtype, n));
      Tensor sub = cpu::Add(a, cpu::Scale(b, -1.0f).value()).value();
      ExpectClose(gpu::Sub(ga, gb).value(), sub, 0, rel, Case("Sub", dtype, n));
      ExpectClose(gpu::Scale(ga, 0.37f).value(), cpu::Scale(a, 0.37f).value(), 0, rel,
                  Case("Scale", dtype, n));
      Tensor acc = a.Clone().value();
      ASSERT_TRUE(cpu::AddInPlace(&acc, b, -1.5f).ok());
      Tensor gacc = OnGpu(Narrow(a, dtype));
      ASSERT_TRUE(gpu::AddInPlace(&gacc, gb, -1.5f).ok());
      ExpectClose(gacc, acc, 1e-6, rel, Case("AddInPlace", dtype, n));
      ASSERT_TRUE(gpu::Fill(&gacc, 0.75f).ok());
      Tensor fill = a.Clone().value();
      ASSERT_TRUE(cpu::Fill(&fill, 0.75f).ok());
      ExpectClose(gacc, fill, 0, 0, Case("Fill", dtype, n));
    }
  }
}

// A view starting one element in: not 16-byte aligned, so the element-by-element path runs.
TEST_F(GpuOpsTest, MisalignedViewsTakeTheScalarPathWithTheSameResult) {
  const Tensor a = Random({1001}, 3);
  const Tensor b = Random({1001}, 4);
  const Tensor ga = OnGpu(a).Slice(0, 1, 1001).value();
  const Tensor gb = OnGpu(b).Slice(0, 1, 1001).value();
  const Tensor want = cpu::Add(a.Slice(0, 1, 1001).value().Clone().value(),
                               b.Slice(0, 1, 1001).value().Clone().value())
                          .value();
  ExpectClose(gpu::Add(ga, gb).value(), want, 0, 0, "misaligned Add");
}

// ---- Activations ----

TEST_F(GpuOpsTest, ActivationsForwardBackwardMatchCpu) {
  for (DType dtype : kDTypes) {
    for (int64_t n : kSizes) {
      const Tensor x = RoundTrip(Random({n}, 5, -4.0f, 4.0f), dtype);
      const Tensor dy = RoundTrip(Random({n}, 6), dtype);
      const Tensor gx = OnGpu(Narrow(x, dtype));
      const Tensor gdy = OnGpu(Narrow(dy, dtype));
      const double rel = 1e-5 + StorageRel(dtype);
      const double atol = 1e-6 + StorageRel(dtype) * 1e-2;
      const Tensor relu = cpu::ReluForward(x).value();
      const Tensor grelu = gpu::ReluForward(gx).value();
      ExpectClose(grelu, relu, 0, rel, Case("ReluForward", dtype, n));
      ExpectClose(gpu::ReluBackward(grelu, gdy).value(), cpu::ReluBackward(relu, dy).value(), 0,
                  rel, Case("ReluBackward", dtype, n));
      ExpectClose(gpu::GeluForward(gx).value(), cpu::GeluForward(x).value(), atol, rel,
                  Case("GeluForward", dtype, n));
      ExpectClose(gpu::GeluBackward(gx, gdy).value(), cpu::GeluBackward(x, dy).value(), atol, rel,
                  Case("GeluBackward", dtype, n));
      // tanh and sigmoid have no CPU op: the reference is the formula in double.
      Tensor tanh_y = x.Clone().value(), sig_y = x.Clone().value();
      Tensor tanh_dx = x.Clone().value(), sig_dx = x.Clone().value();
      for (int64_t i = 0; i < n; ++i) {
        const double v = x.data<float>()[i];
        const double t = std::tanh(v);
        const double s = 1.0 / (1.0 + std::exp(-v));
        tanh_y.data<float>()[i] = static_cast<float>(t);
        sig_y.data<float>()[i] = static_cast<float>(s);
      }
      const Tensor gtanh = gpu::TanhForward(gx).value();
      const Tensor gsig = gpu::SigmoidForward(gx).value();
      ExpectClose(gtanh, tanh_y, atol, rel, Case("TanhForward", dtype, n));
      ExpectClose(gsig, sig_y, atol, rel, Case("SigmoidForward", dtype, n));
      // Backward from the GPU's own forward outputs (as stored), so only the backward is tested.
      const Tensor ty = Widen(gtanh), sy = Widen(gsig);
      for (int64_t i = 0; i < n; ++i) {
        const double g = dy.data<float>()[i];
        const double t = ty.data<float>()[i], s = sy.data<float>()[i];
        tanh_dx.data<float>()[i] = static_cast<float>(g * (1 - t * t));
        sig_dx.data<float>()[i] = static_cast<float>(g * s * (1 - s));
      }
      ExpectClose(gpu::TanhBackward(gtanh, gdy).value(), tanh_dx, atol, rel,
                  Case("TanhBackward", dtype, n));
      ExpectClose(gpu::SigmoidBackward(gsig, gdy).value(), sig_dx, atol, rel,
                  Case("SigmoidBackward", dtype, n));
    }
  }
}

// ---- Reductions and SGD ----

TEST_F(GpuOpsTest, SumMeanAndSumRowsMatchCpu) {
  for (DType dtype : kDTypes) {
    for (int64_t rows : {1, 3, 17, 1000}) {
      for (int64_t cols : {1, 3, 1031}) {
        const Tensor x = RoundTrip(Random({rows, cols}, 7), dtype);
        const Tensor gx = OnGpu(Narrow(x, dtype));
        double total = 0;
        for (int64_t i = 0; i < x.numel(); ++i) total += x.data<float>()[i];
        Tensor want_sum = Tensor::Empty({}, DType::kFloat32).value();
        Tensor want_mean = Tensor::Empty({}, DType::kFloat32).value();
        *want_sum.data<float>() = static_cast<float>(total);
        *want_mean.data<float>() = static_cast<float>(total / x.numel());
        const double atol = 1e-5 * std::sqrt(static_cast<double>(x.numel()));
        ExpectClose(gpu::Sum(gx).value(), want_sum, atol, 1e-5, Case("Sum", dtype, x.numel()));
        ExpectClose(gpu::Mean(gx).value(), want_mean, atol / x.numel(), 1e-5,
                    Case("Mean", dtype, x.numel()));
        Tensor want_rows = Tensor::Empty({cols}, DType::kFloat32).value();
        cpu::SumRows(x.data<float>(), rows, cols, want_rows.data<float>());
        // fp32: the same order as the CPU, so bit for bit; 16-bit: one rounding of the result.
        ExpectClose(gpu::SumRows(gx).value(), want_rows, 0, StorageRel(dtype),
                    Case("SumRows", dtype, x.numel()));
      }
    }
  }
}

TEST_F(GpuOpsTest, SgdUpdateMatchesOptimizerMath) {
  for (bool nesterov : {false, true}) {
    for (float momentum : {0.0f, 0.9f}) {
      if (nesterov && momentum == 0.0f) continue;
      ops::cuda::kernels::SgdParams p;
      p.lr = 0.1f;
      p.momentum = momentum;
      p.weight_decay = 0.01f;
      p.dampening = nesterov ? 0.0f : 0.1f;
      p.nesterov = nesterov;
      const int64_t n = 1003;
      Tensor w = Random({n}, 8), buf = Tensor::Zeros({n}, DType::kFloat32).value();
      Tensor gw = OnGpu(w), gbuf = OnGpu(buf);
      for (int step = 0; step < 3; ++step) {
        const Tensor g = Random({n}, 9 + step);
        p.first = step == 0;
        ASSERT_TRUE(gpu::SgdUpdate(&gw, OnGpu(g), &gbuf, p).ok());
        // paddle/optim/sgd.cc's kernel, element by element.
        for (int64_t i = 0; i < n; ++i) {
          float& wi = w.data<float>()[i];
          float& bi = buf.data<float>()[i];
          float d = g.data<float>()[i] + p.weight_decay * wi;
          if (momentum != 0.0f) {
            const float b = p.first ? d : p.momentum * bi + (1.0f - p.dampening) * d;
            bi = b;
            d = nesterov ? d + p.momentum * b : b;
          }
          wi -= p.lr * d;
        }
      }
      ExpectClose(gw, w, 1e-6, 1e-5, "SGD w");
      if (momentum != 0.0f) ExpectClose(gbuf, buf, 1e-6, 1e-5, "SGD momentum buffer");
    }
  }
}

// ---- Linear ----

struct LinearCase {
  int64_t n, in, out;
};

void CheckLinear(DType dtype, bool tf32, const LinearCase& c) {
  const Tensor x = RoundTrip(Random({c.n, c.in}, 10), dtype);
  const Tensor w = RoundTrip(Random({c.out, c.in}, 11), dtype);
  const Tensor b = RoundTrip(Random({c.out}, 12), dtype);
  const Tensor dy = RoundTrip(Random({c.n, c.out}, 13), dtype);
  const Tensor gx = OnGpu(Narrow(x, dtype)), gw = OnGpu(Narrow(w, dtype));
  const Tensor gb = OnGpu(Narrow(b, dtype)), gdy = OnGpu(Narrow(dy, dtype));
  gpu::GemmOptions o;
  o.allow_tf32 = tf32;
  const double rel = tf32 ? 1e-2 : 1e-5 + 2 * StorageRel(dtype);
  const std::string what = std::string(DTypeName(dtype)) + (tf32 ? " tf32" : "") +
                           " N=" + std::to_string(c.n) + " in=" + std::to_string(c.in) +
                           " out=" + std::to_string(c.out);
  // Inputs are in [-2, 2) (terms up to 4). The CPU sees the same 16-bit-rounded inputs, so what
  // differs is the fp32 summation order (atol ~ sqrt(K)), TF32's input rounding (2^-11 per term,
  // also ~ sqrt(K)) and the one rounding of a 16-bit output (rtol).
  auto atol = [&](int64_t k) {
    return (4e-6 + (tf32 ? 4e-3 : 0.0)) * 4.0 * std::sqrt(static_cast<double>(k));
  };
  ExpectClose(gpu::LinearForward(gx, gw, &gb, o).value(), cpu::LinearForward(x, w, &b).value(),
              atol(c.in), rel, "LinearForward " + what);
  ExpectClose(gpu::LinearForward(gx, gw, nullptr, o).value(),
              cpu::LinearForward(x, w, nullptr).value(), atol(c.in), rel,
              "LinearForward no bias " + what);
  const cpu::LinearGrads want = cpu::LinearBackward(x, w, dy, true, true).value();
  const gpu::LinearGrads got = gpu::LinearBackward(gx, gw, gdy, true, true, o).value();
  ExpectClose(got.dx, want.dx, atol(c.out), rel, "dx " + what);
  ExpectClose(got.dw, want.dw, atol(c.n), rel, "dw " + what);
  ExpectClose(got.db, want.db, atol(c.n), rel, "db " + what);
}

TEST_F(GpuOpsTest, LinearMatchesCpu) {
  const std::vector<LinearCase> cases = {{1, 1, 1}, {3, 17, 5}, {17, 3, 1000}, {64, 1031, 17}};
  for (const LinearCase& c : cases) {
    CheckLinear(DType::kFloat32, false, c);
    CheckLinear(DType::kFloat32, true, c);
    CheckLinear(DType::kBFloat16, false, c);
    CheckLinear(DType::kFloat16, false, c);
  }
}

TEST_F(GpuOpsTest, LinearBackwardSkipsUnrequestedGrads) {
  const Tensor gx = OnGpu(Random({3, 4}, 1)), gw = OnGpu(Random({5, 4}, 2));
  const gpu::LinearGrads g =
      gpu::LinearBackward(gx, gw, OnGpu(Random({3, 5}, 3)), false, false).value();
  EXPECT_FALSE(g.dx.defined());
  EXPECT_FALSE(g.db.defined());
  EXPECT_EQ(g.dw.shape(), Shape({5, 4}));
}

// ---- Softmax cross-entropy ----

Tensor Labels(int64_t n, int64_t k, uint64_t seed) {
  Tensor t = Tensor::Empty({n}, DType::kInt64).value();
  Philox rng(seed, 0);
  for (int64_t i = 0; i < n; ++i) t.data<int64_t>()[i] = rng.NextU32() % k;
  return t;
}

TEST_F(GpuOpsTest, SoftmaxCrossEntropyMatchesCpu) {
  for (int64_t n : {1, 3, 17, 1000}) {
    for (int64_t k : {1, 3, 17, 1031}) {
      const Tensor logits = Random({n, k}, 14, -20.0f, 20.0f);
      const Tensor labels = Labels(n, k, 15);
      const cpu::SoftmaxCrossEntropyResult want =
          cpu::SoftmaxCrossEntropyForward(logits, labels).value();
      const gpu::SoftmaxCrossEntropyResult got =
          gpu::SoftmaxCrossEntropyForward(OnGpu(logits), OnGpu(labels)).value();
      const std::string what = "n=" + std::to_string(n) + " k=" + std::to_string(k);
      ExpectClose(got.probs, want.probs, 1e-7, 1e-5, "probs " + what);
      ExpectClose(got.loss, want.loss, 1e-6, 1e-5, "loss " + what);
      ExpectClose(gpu::SoftmaxCrossEntropyBackward(got.probs, OnGpu(labels), 0.5f).value(),
                  cpu::SoftmaxCrossEntropyBackward(want.probs, labels, 0.5f).value(), 1e-8, 1e-5,
                  "dlogits " + what);
    }
  }
}

TEST_F(GpuOpsTest, SoftmaxCrossEntropyRejectsLabelOutOfRange) {
  Tensor labels = Labels(5, 4, 16);
  labels.data<int64_t>()[3] = 4;
  const absl::StatusOr<gpu::SoftmaxCrossEntropyResult> r =
      gpu::SoftmaxCrossEntropyForward(OnGpu(Random({5, 4}, 17)), OnGpu(labels));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(r.status()), HasSubstr("labels[3] = 4 is outside [0, 4)"));
}

// ---- Argument errors: run everywhere (checks come before any GPU work) ----

// A CUDA tensor over a fake address: only its metadata may be read.
Tensor FakeCuda(absl::Span<const int64_t> shape, DType dtype = DType::kFloat32) {
  static char fake[1];
  return Tensor::FromBlob(fake, shape, dtype, Device::Cuda(0)).value();
}

void ExpectInvalid(const absl::Status& s, const std::vector<std::string>& parts) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  for (const std::string& p : parts) EXPECT_THAT(Message(s), HasSubstr(p));
}

TEST(GpuOpsErrorTest, CpuTensorIsRejectedNamingOpAndTensor) {
  const Tensor host = Random({2, 3}, 1);
  ExpectInvalid(gpu::Add(host, FakeCuda({2, 3})).status(),
                {"cuda::Add", "a float32[2, 3] on cpu", "not on a CUDA device"});
  ExpectInvalid(gpu::ReluForward(host).status(), {"cuda::ReluForward", "x float32[2, 3] on cpu"});
  ExpectInvalid(gpu::LinearForward(FakeCuda({2, 3}), host, nullptr).status(),
                {"cuda::LinearForward", "w float32[2, 3] on cpu"});
  ExpectInvalid(gpu::SumRows(host).status(), {"cuda::SumRows", "on cpu"});
}

TEST(GpuOpsErrorTest, ShapeMismatchesNameBothShapes) {
  ExpectInvalid(gpu::Mul(FakeCuda({2, 3}), FakeCuda({3, 2})).status(),
                {"cuda::Mul", "float32[2, 3] on cuda:0", "float32[3, 2] on cuda:0", "same shape"});
  ExpectInvalid(gpu::GeluBackward(FakeCuda({4}), FakeCuda({5})).status(),
                {"cuda::GeluBackward", "[4]", "[5]"});
  Tensor dst = FakeCuda({6});
  ExpectInvalid(gpu::AddInPlace(&dst, FakeCuda({5})), {"cuda::AddInPlace", "[6]", "[5]"});
  ExpectInvalid(gpu::LinearForward(FakeCuda({2, 3}), FakeCuda({4, 5}), nullptr).status(),
                {"cuda::LinearForward", "has 3 features", "[4, 5]"});
  const Tensor b = FakeCuda({5});
  ExpectInvalid(gpu::LinearForward(FakeCuda({2, 3}), FakeCuda({4, 3}), &b).status(),
                {"b float32[5]", "must have 4 elements"});
  ExpectInvalid(
      gpu::LinearBackward(FakeCuda({2, 3}), FakeCuda({4, 3}), FakeCuda({2, 5}), true, true)
          .status(),
      {"cuda::LinearBackward", "dy float32[2, 5]", "do not fit"});
  ExpectInvalid(
      gpu::SoftmaxCrossEntropyForward(FakeCuda({3, 4}), FakeCuda({2}, DType::kInt64)).status(),
      {"cuda::SoftmaxCrossEntropyForward", "int64[2]", "one entry per row, 3"});
  ExpectInvalid(
      gpu::SoftmaxCrossEntropyBackward(FakeCuda({0, 4}), FakeCuda({0}, DType::kInt64), 1.0f)
          .status(),
      {"at least one row and class"});
  Tensor w = FakeCuda({3});
  ExpectInvalid(gpu::SgdUpdate(&w, FakeCuda({4}), nullptr, {}), {"cuda::SgdUpdate", "[3]", "[4]"});
}

TEST(GpuOpsErrorTest, WrongDTypeRankLayoutAndOptionsAreRejected) {
  ExpectInvalid(gpu::Add(FakeCuda({2}, DType::kInt32), FakeCuda({2}, DType::kInt32)).status(),
                {"int32[2]", "must be float32 or float16 or bfloat16"});
  ExpectInvalid(gpu::Add(FakeCuda({2}), FakeCuda({2}, DType::kFloat16)).status(),
                {"same device with the same dtype"});
  ExpectInvalid(gpu::SumRows(FakeCuda({2, 3, 4})).status(), {"must have 2 dimensions"});
  ExpectInvalid(gpu::ReluForward(FakeCuda({3, 4}).Transpose(0, 1).value()).status(),
                {"must be contiguous", "strides [1, 4]"});
  ExpectInvalid(gpu::SoftmaxCrossEntropyForward(FakeCuda({3, 4}), FakeCuda({3})).status(),
                {"labels float32[3]", "must be int64"});
  Tensor w = FakeCuda({3});
  ops::cuda::kernels::SgdParams p;
  p.momentum = 0.9f;
  ExpectInvalid(gpu::SgdUpdate(&w, FakeCuda({3}), nullptr, p), {"needs a momentum buffer"});
  p.nesterov = true;
  p.dampening = 0.5f;
  ExpectInvalid(gpu::SgdUpdate(&w, FakeCuda({3}), nullptr, p), {"Nesterov", "dampening 0.5"});
  p = {};
  p.lr = -1.0f;
  ExpectInvalid(gpu::SgdUpdate(&w, FakeCuda({3}), nullptr, p), {"lr -1"});
  EXPECT_EQ(gpu::Fill(nullptr, 1.0f).code(), absl::StatusCode::kInvalidArgument);
}

TEST(GpuOpsErrorTest, KernelsRejectUnsupportedDTypeAndLaunchNothingForEmptyInput) {
  using ops::cuda::kernels::Fill;
  EXPECT_THAT(Message(Fill(DType::kInt64, nullptr, 1.0f, 4, nullptr)),
              HasSubstr("Fill: dtype int64 is not supported"));
  EXPECT_TRUE(Fill(DType::kFloat16, nullptr, 1.0f, 0, nullptr).ok());
  EXPECT_TRUE(ops::cuda::kernels::SumRows(DType::kFloat32, nullptr, 0, 0, nullptr, nullptr).ok());
  EXPECT_STREQ(ops::cuda::kernels::ActivationName(ops::cuda::kernels::Activation::kGelu), "gelu");
}

// The one test meant for this (GPU-less) machine: a well-formed call reaches UseDevice and says
// why CUDA cannot be used. On a GPU machine it skips (the GPU tests cover that case).
TEST(GpuOpsErrorTest, NoGpuIsFailedPrecondition) {
  PADDLE_SKIP_WITH_GPU();
  const absl::StatusOr<Tensor> y = gpu::Add(FakeCuda({2, 3}), FakeCuda({2, 3}));
  ASSERT_FALSE(y.ok());
  EXPECT_EQ(y.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(y.status()), HasSubstr("no CUDA device/driver"));
  const absl::StatusOr<cublasHandle_t> h = gpu::CublasHandle(0);
  EXPECT_EQ(h.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(gpu::LinearForward(FakeCuda({2, 3}), FakeCuda({4, 3}), nullptr).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

// ---- Handles and error macros (no GPU needed) ----

absl::Status FailingCublas() {
  PADDLE_CUBLAS_RETURN_IF_ERROR(CUBLAS_STATUS_INVALID_VALUE);
  return absl::OkStatus();
}

absl::Status FailingCudnn() {
  PADDLE_CUDNN_RETURN_IF_ERROR(CUDNN_STATUS_NOT_SUPPORTED);
  return absl::OkStatus();
}

TEST(CudaHandlesTest, MacrosNameCallPlaceAndLibraryText) {
  const absl::Status b = FailingCublas();
  EXPECT_EQ(b.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(b), HasSubstr("cuBLAS call `CUBLAS_STATUS_INVALID_VALUE` failed at "));
  EXPECT_THAT(Message(b), HasSubstr("ops_test.cc:"));
  EXPECT_THAT(Message(b), HasSubstr("(7)"));
  const absl::Status d = FailingCudnn();
  EXPECT_EQ(d.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Message(d), HasSubstr("cuDNN call `CUDNN_STATUS_NOT_SUPPORTED` failed at "));
  EXPECT_THAT(Message(d), HasSubstr("(3000)"));
  EXPECT_EQ(gpu::CublasErrorToStatus(CUBLAS_STATUS_ALLOC_FAILED, "x", "f", 1).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(gpu::CudnnErrorToStatus(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH, "x", "f", 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(gpu::CudnnErrorToStatus(CUDNN_STATUS_SUCCESS, "x", "f", 1).ok());
}

TEST(CudaHandlesTest, CurrentStreamIsPerThreadAndSettable) {
  EXPECT_EQ(gpu::CurrentStream(), nullptr);
  cudaStream_t fake = reinterpret_cast<cudaStream_t>(0x10);
  gpu::SetCurrentStream(fake);
  EXPECT_EQ(gpu::CurrentStream(), fake);
  cudaStream_t other = fake;
  std::thread([&] { other = gpu::CurrentStream(); }).join();
  EXPECT_EQ(other, nullptr);
  gpu::SetCurrentStream(nullptr);
}

#else  // !PADDLE_WITH_CUDA

TEST(GpuOpsTest, Skipped) { PADDLE_SKIP_WITHOUT_GPU(); }

#endif  // PADDLE_WITH_CUDA

}  // namespace
}  // namespace paddle
