// The cuDNN-backed GPU ops (conv2d, pool2d, batch_norm) and GPU dropout of paddle/ops/cuda against
// the CPU ops of paddle/ops/cpu on the same Philox inputs, element by element, forward and
// backward, over odd shapes (N = 1, 3; C = 1, 3, 17; H, W = 1, 5, 28; stride 2, padding 1); plus
// every argument error path and the no-GPU path.
//
// Tolerances (|gpu - cpu| <= atol + rtol |cpu|), inputs uniform in [-2, 2):
// - conv2d: rtol 1e-4 plus atol 4e-5 sqrt(L), L the length of each output's sum (C R S forward,
//   K R S for dx, N OH OW for dw and db): fp32 FMA sums in another order.
// - max pooling: forward exact (it selects); backward rtol 1e-6 (overlapping windows add).
// - average pooling: rtol 1e-5, atol 1e-6.
// - batch norm: rtol 1e-4 plus atol 1e-5 sqrt(M) for the per-channel sums over M = N H W values
//   (cuDNN sums in fp32, the CPU in double); 1e-5 for y and dx.
// - dropout: exact (same Philox words, same fp32 products), mask and values.
// Without a usable GPU the comparisons skip, naming the reason. The argument checks come before
// any GPU work, so the error-path tests use CUDA tensors over a fake address and run everywhere.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/gpu_test.h"

#if PADDLE_WITH_CUDA
#include "paddle/core/cuda/cuda_copy.h"
#include "paddle/core/philox.h"
#include "paddle/core/tensor.h"
#include "paddle/ops/cpu/batch_norm.h"
#include "paddle/ops/cpu/conv2d.h"
#include "paddle/ops/cpu/dropout.h"
#include "paddle/ops/cpu/pool2d.h"
#include "paddle/ops/cuda/batch_norm.h"
#include "paddle/ops/cuda/conv2d.h"
#include "paddle/ops/cuda/dropout.h"
#include "paddle/ops/cuda/pool2d.h"
#endif

namespace paddle {
namespace {

#if PADDLE_WITH_CUDA

namespace gpu = ::paddle::ops::cuda;
namespace cpu = ::paddle::ops::cpu;
using ::testing::HasSubstr;

std::string Message(const absl::Status& s) { return std::string(s.message()); }

// Uniform in [lo, hi), contiguous fp32 on the CPU, from Philox(seed, 0).
Tensor Random(absl::Span<const int64_t> shape, uint64_t seed, float lo = -2.0f, float hi = 2.0f) {
  Tensor t = Tensor::Empty(shape, DType::kFloat32).value();
  Philox rng(seed, 0);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = lo + (hi - lo) * rng.NextFloat();
  return t;
}

Tensor OnGpu(const Tensor& t) { return ToDevice(t.Contiguous().value(), Device::Cuda(0)).value(); }
// Any CPU or CUDA tensor -> contiguous CPU tensor.
Tensor OnHost(const Tensor& t) {
  const Tensor host = t.device().is_cpu() ? t : ToDevice(t, Device::Cpu()).value();
  return host.Contiguous().value();
}

void ExpectClose(const Tensor& got_any, const Tensor& want_any, double atol, double rtol,
                 const std::string& what) {
  const Tensor got = OnHost(got_any);
  const Tensor want = OnHost(want_any);
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
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

// Same dtype, shape and bytes.
void ExpectIdentical(const Tensor& got_any, const Tensor& want_any, const std::string& what) {
  const Tensor got = OnHost(got_any);
  const Tensor want = OnHost(want_any);
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  const auto* g = static_cast<const uint8_t*>(got.data());
  const auto* w = static_cast<const uint8_t*>(want.data());
  const int64_t bytes = want.numel() * static_cast<int64_t>(DTypeSize(want.dtype()));
  int64_t first = -1;
  for (int64_t i = 0; i < bytes && first < 0; ++i) {
    if (g[i] != w[i]) first = i;
  }
  EXPECT_EQ(first, -1) << what << ": first differing byte";
}

// Skips without a usable GPU; the GPU machine runs these (bazel test --test_tag_filters=gpu).
using CudnnOpsTest = gpu_test::GpuTest;

// ---- Conv2d ----

struct ConvCase {
  int64_t n, c, h, w, k, r, s, stride, pad;
};

std::string Name(const ConvCase& t) {
  return "conv x[" + std::to_string(t.n) + "," + std::to_string(t.c) + "," + std::to_string(t.h) +
         "," + std::to_string(t.w) + "] w[" + std::to_string(t.k) + "," + std::to_string(t.c) +
         "," + std::to_string(t.r) + "," + std::to_string(t.s) + "] stride " +
         std::to_string(t.stride) + " pad " + std::to_string(t.pad);
}

TEST_F(CudnnOpsTest, Conv2dForwardBackwardMatchCpu) {
  const std::vector<ConvCase> cases = {
      {1, 1, 1, 1, 1, 1, 1, 1, 0},   {3, 3, 5, 5, 4, 3, 3, 1, 1},   {1, 17, 28, 28, 5, 3, 3, 2, 1},
      {3, 3, 28, 5, 17, 5, 3, 2, 1}, {3, 1, 5, 28, 3, 1, 3, 1, 0},  {1, 17, 5, 5, 3, 5, 5, 1, 0},
      {3, 17, 1, 5, 3, 1, 1, 2, 0},  {1, 3, 28, 28, 1, 3, 3, 1, 1},
  };
  uint64_t seed = 100;
  for (const ConvCase& t : cases) {
    const std::string name = Name(t);
    const Tensor x = Random({t.n, t.c, t.h, t.w}, ++seed);
    const Tensor w = Random({t.k, t.c, t.r, t.s}, ++seed);
    const Tensor b = Random({t.k}, ++seed);
    const cpu::Conv2dOptions o{t.stride, t.stride, t.pad, t.pad};
    const Tensor gx = OnGpu(x), gw = OnGpu(w), gb = OnGpu(b);
    for (bool bias : {false, true}) {
      const Tensor want = cpu::Conv2dForward(x, w, bias ? &b : nullptr, o).value();
      const absl::StatusOr<Tensor> got = gpu::Conv2dForward(gx, gw, bias ? &gb : nullptr, o);
      ASSERT_TRUE(got.ok()) << name << ": " << got.status();
      EXPECT_TRUE(got->is_contiguous()) << name;
      ExpectClose(*got, want, 4e-5 * std::sqrt(double(t.c * t.r * t.s)), 1e-4,
                  name + (bias ? " y (bias)" : " y"));
    }
    const int64_t oh = (t.h + 2 * t.pad - t.r) / t.stride + 1;
    const int64_t ow = (t.w + 2 * t.pad - t.s) / t.stride + 1;
    const Tensor dy = Random({t.n, t.k, oh, ow}, ++seed);
    const cpu::Conv2dGrads want = cpu::Conv2dBackward(x, w, dy, o, true, true).value();
    const absl::StatusOr<gpu::Conv2dGrads> got =
        gpu::Conv2dBackward(gx, gw, OnGpu(dy), o, true, true);
    ASSERT_TRUE(got.ok()) << name << ": " << got.status();
    const double batch_len = std::sqrt(double(t.n * oh * ow));
    ExpectClose(got->dx, want.dx, 4e-5 * std::sqrt(double(t.k * t.r * t.s)), 1e-4, name + " dx");
    ExpectClose(got->dw, want.dw, 4e-5 * batch_len, 1e-4, name + " dw");
    ExpectClose(got->db, want.db, 4e-5 * batch_len, 1e-4, name + " db");
    // The deterministic algorithms give the same bits again.
    const gpu::Conv2dGrads again = gpu::Conv2dBackward(gx, gw, OnGpu(dy), o, true, true).value();
    ExpectIdentical(again.dw, got->dw, name + " dw rerun");
    ExpectIdentical(again.dx, got->dx, name + " dx rerun");
  }
}

TEST_F(CudnnOpsTest, Conv2dBackwardLeavesUnrequestedGradsUndefined) {
  const Tensor x = OnGpu(Random({2, 3, 5, 5}, 1));
  const Tensor w = OnGpu(Random({4, 3, 3, 3}, 2));
  const Tensor dy = OnGpu(Random({2, 4, 3, 3}, 3));
  const gpu::Conv2dGrads g = gpu::Conv2dBackward(x, w, dy, {}, false, false).value();
  EXPECT_FALSE(g.dx.defined());
  EXPECT_FALSE(g.db.defined());
  EXPECT_EQ(g.dw.shape(), Shape({4, 3, 3, 3}));
}

// ---- Pooling ----

struct PoolCase {
  int64_t n, c, h, w, kernel, stride, pad;
};

TEST_F(CudnnOpsTest, MaxAndAvgPool2dMatchCpu) {
  const std::vector<PoolCase> cases = {
      {1, 1, 1, 1, 1, 1, 0},   {3, 3, 5, 5, 3, 2, 1},  {1, 17, 28, 28, 2, 2, 0},
      {3, 17, 5, 28, 3, 1, 1}, {3, 1, 28, 5, 2, 2, 1}, {1, 3, 5, 5, 5, 1, 0},
  };
  uint64_t seed = 200;
  for (const PoolCase& t : cases) {
    const std::string name = "pool x[" + std::to_string(t.n) + "," + std::to_string(t.c) + "," +
                             std::to_string(t.h) + "," + std::to_string(t.w) + "] kernel " +
                             std::to_string(t.kernel) + " stride " + std::to_string(t.stride) +
                             " pad " + std::to_string(t.pad);
    const cpu::Pool2dOptions o{t.kernel, t.kernel, t.stride, t.stride, t.pad, t.pad};
    const Tensor x = Random({t.n, t.c, t.h, t.w}, ++seed);
    const Tensor gx = OnGpu(x);
    const cpu::MaxPool2dResult want = cpu::MaxPool2dForward(x, o).value();
    const absl::StatusOr<gpu::MaxPool2dResult> got = gpu::MaxPool2dForward(gx, o);
    ASSERT_TRUE(got.ok()) << name << ": " << got.status();
    ExpectClose(got->y, want.y, 0, 0, name + " max y");
    const Tensor dy = Random(want.y.shape(), ++seed);
    const absl::StatusOr<Tensor> dx = gpu::MaxPool2dBackward(gx, *got, OnGpu(dy), o);
    ASSERT_TRUE(dx.ok()) << name << ": " << dx.status();
    ExpectClose(*dx, cpu::MaxPool2dBackward(x, want, dy, o).value(), 1e-6, 1e-6, name + " max dx");

    const Tensor avg = cpu::AvgPool2dForward(x, o).value();
    const absl::StatusOr<Tensor> gavg = gpu::AvgPool2dForward(gx, o);
    ASSERT_TRUE(gavg.ok()) << name << ": " << gavg.status();
    ExpectClose(*gavg, avg, 1e-6, 1e-5, name + " avg y");
    const absl::StatusOr<Tensor> gdx = gpu::AvgPool2dBackward(gx, OnGpu(dy), o);
    ASSERT_TRUE(gdx.ok()) << name << ": " << gdx.status();
    ExpectClose(*gdx, cpu::AvgPool2dBackward(x, dy, o).value(), 1e-6, 1e-5, name + " avg dx");
  }
}

// ---- Batch norm ----

TEST_F(CudnnOpsTest, BatchNormTrainEvalBackwardMatchCpu) {
  const std::vector<std::vector<int64_t>> shapes = {{3, 17},      {2, 1},          {1, 3, 5, 5},
                                                    {3, 1, 1, 1}, {3, 17, 28, 28}, {2, 3, 1, 5}};
  uint64_t seed = 300;
  for (const std::vector<int64_t>& shape : shapes) {
    const std::string name = "batch norm x" + ShapeToString(shape);
    const int64_t c = shape[1];
    int64_t m = 1;
    for (size_t i = 0; i < shape.size(); ++i) m *= i == 1 ? 1 : shape[i];
    const double sum_atol = 1e-5 * std::sqrt(double(m));
    const Tensor x = Random(shape, ++seed, -1.0f, 3.0f);
    const Tensor gamma = Random({c}, ++seed, 0.5f, 1.5f);
    const Tensor beta = Random({c}, ++seed);
    Tensor mean = Random({c}, ++seed), var = Random({c}, ++seed, 0.5f, 2.0f);
    Tensor gmean = OnGpu(mean), gvar = OnGpu(var);
    const Tensor gx = OnGpu(x), ggamma = OnGpu(gamma), gbeta = OnGpu(beta);
    const cpu::BatchNormForwardResult want =
        cpu::BatchNormForwardTrain(x, gamma, beta, &mean, &var, 0.1, 1e-5).value();
    const absl::StatusOr<gpu::BatchNormForwardResult> got =
        gpu::BatchNormForwardTrain(gx, ggamma, gbeta, &gmean, &gvar, 0.1, 1e-5);
    ASSERT_TRUE(got.ok()) << name << ": " << got.status();
    ExpectClose(got->y, want.y, 1e-5, 1e-4, name + " y");
    ExpectClose(got->save_mean, want.save_mean, sum_atol * 1e-1, 1e-4, name + " save_mean");
    ExpectClose(got->save_invstd, want.save_invstd, 0, 1e-4, name + " save_invstd");
    ExpectClose(gmean, mean, 1e-5, 1e-4, name + " running_mean");
    ExpectClose(gvar, var, 1e-5, 1e-4, name + " running_var");

    // One running statistic alone is tracked the same way.
    Tensor mean_only = OnGpu(Random({c}, 7));
    Tensor cpu_mean_only = Random({c}, 7);
    ASSERT_TRUE(
        cpu::BatchNormForwardTrain(x, gamma, beta, &cpu_mean_only, nullptr, 0.3, 1e-3).ok());
    ASSERT_TRUE(gpu::BatchNormForwardTrain(gx, ggamma, gbeta, &mean_only, nullptr, 0.3, 1e-3).ok());
    ExpectClose(mean_only, cpu_mean_only, 1e-5, 1e-4, name + " running_mean alone");

    const absl::StatusOr<Tensor> eval =
        gpu::BatchNormForwardEval(gx, ggamma, gbeta, gmean, gvar, 1e-5);
    ASSERT_TRUE(eval.ok()) << name << ": " << eval.status();
    ExpectClose(*eval, cpu::BatchNormForwardEval(x, gamma, beta, mean, var, 1e-5).value(), 1e-5,
                1e-4, name + " eval y");

    const Tensor dy = Random(shape, ++seed);
    const cpu::BatchNormGrads want_g =
        cpu::BatchNormBackward(x, gamma, want.save_mean, want.save_invstd, dy).value();
    const absl::StatusOr<gpu::BatchNormGrads> got_g =
        gpu::BatchNormBackward(gx, ggamma, got->save_mean, got->save_invstd, OnGpu(dy));
    ASSERT_TRUE(got_g.ok()) << name << ": " << got_g.status();
    ExpectClose(got_g->dx, want_g.dx, 1e-4, 1e-4, name + " dx");
    ExpectClose(got_g->dgamma, want_g.dgamma, sum_atol, 1e-4, name + " dgamma");
    ExpectClose(got_g->dbeta, want_g.dbeta, sum_atol, 1e-4, name + " dbeta");
  }
}

// ---- Dropout ----

TEST_F(CudnnOpsTest, DropoutMaskAndValuesAreTheCpuOnesBitForBit) {
  const std::vector<uint64_t> offsets = {0, 1, 2, 3, 5, 1000003, ~uint64_t{0} - 5};
  uint64_t seed = 400;
  for (int64_t n : {1, 3, 17, 1000, 4099}) {
    for (uint64_t offset : offsets) {
      for (double p : {0.0, 0.5, 0.9}) {
        const std::string name = "dropout n=" + std::to_string(n) + " offset " +
                                 std::to_string(offset) + " p " + std::to_string(p);
        const Tensor x = Random({n}, ++seed);
        const cpu::DropoutResult want = cpu::DropoutForward(x, p, 77, 3, offset).value();
        const absl::StatusOr<gpu::DropoutResult> got =
            gpu::DropoutForward(OnGpu(x), p, 77, 3, offset);
        ASSERT_TRUE(got.ok()) << name << ": " << got.status();
        ExpectIdentical(got->mask, want.mask, name + " mask");
        ExpectIdentical(got->y, want.y, name + " y");
        const Tensor dy = Random({n}, ++seed);
        const absl::StatusOr<Tensor> dx = gpu::DropoutBackward(got->mask, OnGpu(dy), p);
        ASSERT_TRUE(dx.ok()) << name << ": " << dx.status();
        ExpectIdentical(*dx, cpu::DropoutBackward(want.mask, dy, p).value(), name + " dx");
      }
    }
  }
  // 4-D shapes keep their shape; another stream gives another mask.
  const Tensor x = Random({3, 17, 5, 5}, 9);
  const gpu::DropoutResult a = gpu::DropoutForward(OnGpu(x), 0.5, 1, 0, 0).value();
  const gpu::DropoutResult b = gpu::DropoutForward(OnGpu(x), 0.5, 1, 1, 0).value();
  EXPECT_EQ(a.mask.shape(), x.shape());
  ExpectIdentical(a.mask, cpu::DropoutForward(x, 0.5, 1, 0, 0).value().mask, "4-D mask");
  const Tensor ma = OnHost(a.mask), mb = OnHost(b.mask);
  int64_t differ = 0;
  for (int64_t i = 0; i < x.numel(); ++i) differ += ma.data<uint8_t>()[i] != mb.data<uint8_t>()[i];
  EXPECT_GT(differ, x.numel() / 4);
}

// ---- Argument errors: run everywhere (checks come before any GPU work) ----

// A CUDA tensor over a fake address: only its metadata may be read.
Tensor FakeCuda(absl::Span<const int64_t> shape, DType dtype = DType::kFloat32) {
  static char fake[1];
  return Tensor::FromBlob(fake, shape, dtype, Device::Cuda(0)).value();
}

void ExpectInvalid(const absl::Status& s, const std::vector<std::string>& parts) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  for (const std::string& p : parts) EXPECT_THAT(Message(s), HasSubstr(p)) << s;
}

TEST(CudnnOpsErrorTest, Conv2dArgumentErrorsNameOpAndShapes) {
  const Tensor host = Random({2, 3, 5, 5}, 1);
  ExpectInvalid(gpu::Conv2dForward(host, FakeCuda({4, 3, 3, 3}), nullptr, {}).status(),
                {"cuda::Conv2dForward", "x float32[2, 3, 5, 5] on cpu", "not on a CUDA device"});
  ExpectInvalid(
      gpu::Conv2dForward(FakeCuda({2, 3, 5, 5}), FakeCuda({4, 2, 3, 3}), nullptr, {}).status(),
      {"cuda::Conv2dForward", "[2, 3, 5, 5]", "has 3 channels", "[4, 2, 3, 3]"});
  const Tensor b = FakeCuda({5});
  ExpectInvalid(gpu::Conv2dForward(FakeCuda({2, 3, 5, 5}), FakeCuda({4, 3, 3, 3}), &b, {}).status(),
                {"b float32[5] on cuda:0", "must have 4 elements"});
  ExpectInvalid(
      gpu::Conv2dForward(FakeCuda({2, 3, 5, 5}), FakeCuda({4, 3, 3, 3}), nullptr, {0, 1, 0, 0})
          .status(),
      {"stride (0, 1)"});
  ExpectInvalid(
      gpu::Conv2dForward(FakeCuda({2, 3, 2, 2}), FakeCuda({4, 3, 3, 3}), nullptr, {}).status(),
      {"smaller than the kernel"});
  ExpectInvalid(
      gpu::Conv2dForward(FakeCuda({2, 3, 5}), FakeCuda({4, 3, 3, 3}), nullptr, {}).status(),
      {"must have 4 dimensions"});
  ExpectInvalid(gpu::Conv2dBackward(FakeCuda({2, 3, 5, 5}), FakeCuda({4, 3, 3, 3}),
                                    FakeCuda({2, 4, 5, 5}), {}, true, true)
                    .status(),
                {"cuda::Conv2dBackward", "dy float32[2, 4, 5, 5]", "must be [2, 4, 3, 3]"});
  ExpectInvalid(gpu::Conv2dForward(FakeCuda({2, 3, 5, 5}, DType::kFloat16),
                                   FakeCuda({4, 3, 3, 3}, DType::kFloat16), nullptr, {})
                    .status(),
                {"float16", "must be float32"});
}

TEST(CudnnOpsErrorTest, PoolArgumentErrorsNameOpAndShapes) {
  const cpu::Pool2dOptions o{3, 3, 2, 2, 1, 1};
  ExpectInvalid(gpu::MaxPool2dForward(Random({1, 1, 5, 5}, 1), o).status(),
                {"cuda::MaxPool2dForward", "on cpu"});
  ExpectInvalid(gpu::AvgPool2dForward(FakeCuda({1, 1, 5, 5}), {3, 3, 2, 2, 2, 1}).status(),
                {"cuda::AvgPool2dForward", "padding (2, 1)"});
  ExpectInvalid(gpu::AvgPool2dForward(FakeCuda({1, 1, 1, 5}), {3, 3, 1, 1}).status(),
                {"smaller than the kernel (3, 3)"});
  ExpectInvalid(gpu::AvgPool2dBackward(FakeCuda({1, 2, 5, 5}), FakeCuda({1, 2, 2, 2}), o).status(),
                {"cuda::AvgPool2dBackward", "dy float32[1, 2, 2, 2]", "must be [1, 2, 3, 3]"});
  gpu::MaxPool2dResult fwd;
  ExpectInvalid(
      gpu::MaxPool2dBackward(FakeCuda({1, 2, 5, 5}), fwd, FakeCuda({1, 2, 3, 3}), o).status(),
      {"cuda::MaxPool2dBackward", "fwd.y is undefined"});
  fwd.y = FakeCuda({1, 2, 3, 4});
  ExpectInvalid(
      gpu::MaxPool2dBackward(FakeCuda({1, 2, 5, 5}), fwd, FakeCuda({1, 2, 3, 3}), o).status(),
      {"fwd.y float32[1, 2, 3, 4]", "same shape"});
}

TEST(CudnnOpsErrorTest, BatchNormArgumentErrorsNameOpAndShapes) {
  const Tensor g3 = FakeCuda({3});
  ExpectInvalid(
      gpu::BatchNormForwardTrain(FakeCuda({2, 3, 4}), g3, g3, nullptr, nullptr, 0.1, 1e-5).status(),
      {"cuda::BatchNormForwardTrain", "[2, 3, 4]", "must be [N, C] or [N, C, H, W]"});
  ExpectInvalid(
      gpu::BatchNormForwardTrain(FakeCuda({2, 3}), FakeCuda({4}), g3, nullptr, nullptr, 0.1, 1e-5)
          .status(),
      {"gamma float32[4]", "one entry per channel, 3"});
  Tensor host_mean = Random({3}, 1);
  ExpectInvalid(
      gpu::BatchNormForwardTrain(FakeCuda({2, 3}), g3, g3, &host_mean, nullptr, 0.1, 1e-5).status(),
      {"running_mean float32[3] on cpu", "not on a CUDA device"});
  ExpectInvalid(
      gpu::BatchNormForwardTrain(FakeCuda({1, 3, 1, 1}), g3, g3, nullptr, nullptr, 0.1, 1e-5)
          .status(),
      {"1 value(s) per channel"});
  ExpectInvalid(
      gpu::BatchNormForwardTrain(FakeCuda({2, 3}), g3, g3, nullptr, nullptr, 1.5, 1e-5).status(),
      {"momentum = 1.5"});
  ExpectInvalid(
      gpu::BatchNormForwardTrain(FakeCuda({2, 3}), g3, g3, nullptr, nullptr, 0.1, 0).status(),
      {"eps = 0"});
  ExpectInvalid(gpu::BatchNormForwardEval(FakeCuda({2, 3}), g3, g3, g3, g3, -1).status(),
                {"cuda::BatchNormForwardEval", "eps = -1"});
  ExpectInvalid(
      gpu::BatchNormForwardEval(FakeCuda({2, 3}), g3, g3, g3, FakeCuda({2}), 1e-5).status(),
      {"running_var float32[2]"});
  ExpectInvalid(gpu::BatchNormBackward(FakeCuda({2, 3}), g3, g3, g3, FakeCuda({3, 2})).status(),
                {"cuda::BatchNormBackward", "x float32[2, 3]", "dy float32[3, 2]", "same shape"});
}

TEST(CudnnOpsErrorTest, DropoutArgumentErrors) {
  ExpectInvalid(gpu::DropoutForward(FakeCuda({4}), 1.0, 0, 0, 0).status(),
                {"cuda::DropoutForward", "p = 1 must be in [0, 1)"});
  ExpectInvalid(gpu::DropoutForward(Random({4}, 1), 0.5, 0, 0, 0).status(),
                {"cuda::DropoutForward", "x float32[4] on cpu"});
  ExpectInvalid(gpu::DropoutBackward(FakeCuda({4}), FakeCuda({4}), 0.5).status(),
                {"cuda::DropoutBackward", "mask float32[4]", "must be uint8"});
  ExpectInvalid(gpu::DropoutBackward(FakeCuda({4}, DType::kUInt8), FakeCuda({5}), 0.5).status(),
                {"mask uint8[4] on cuda:0", "dy float32[5]", "same shape"});
  ExpectInvalid(gpu::DropoutBackward(FakeCuda({4}, DType::kUInt8), FakeCuda({4}), -0.1).status(),
                {"p = -0.1"});
}

// On this (GPU-less) machine: well-formed calls reach UseDevice and say why CUDA cannot be used.
TEST(CudnnOpsErrorTest, NoGpuIsFailedPrecondition) {
  PADDLE_SKIP_WITH_GPU();
  const auto expect_no_gpu = [](const absl::Status& s, const char* op) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << op << ": " << s;
    EXPECT_THAT(Message(s), HasSubstr("no CUDA device/driver")) << op;
  };
  const Tensor x = FakeCuda({2, 3, 5, 5}), w = FakeCuda({4, 3, 3, 3}), c3 = FakeCuda({3});
  expect_no_gpu(gpu::Conv2dForward(x, w, nullptr, {}).status(), "conv forward");
  expect_no_gpu(gpu::Conv2dBackward(x, w, FakeCuda({2, 4, 3, 3}), {}, true, true).status(),
                "conv backward");
  const cpu::Pool2dOptions o{2, 2, 2, 2};
  expect_no_gpu(gpu::MaxPool2dForward(x, o).status(), "max pool");
  expect_no_gpu(gpu::AvgPool2dBackward(x, FakeCuda({2, 3, 2, 2}), o).status(), "avg pool");
  expect_no_gpu(gpu::BatchNormForwardTrain(x, c3, c3, nullptr, nullptr, 0.1, 1e-5).status(),
                "batch norm");
  expect_no_gpu(gpu::BatchNormBackward(x, c3, c3, c3, x).status(), "batch norm backward");
  expect_no_gpu(gpu::DropoutForward(x, 0.5, 1, 2, 3).status(), "dropout");
}

#else  // !PADDLE_WITH_CUDA

TEST(CudnnOpsTest, Skipped) { PADDLE_SKIP_WITHOUT_GPU(); }

#endif  // PADDLE_WITH_CUDA

}  // namespace
}  // namespace paddle
