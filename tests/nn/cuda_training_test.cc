// Training on CUDA against training on the CPU: the same model, batches and SGD steps on both
// devices, parameters compared element by element; Module::To; gradient accumulation on the GPU;
// bf16 autocast; and the device errors, which run everywhere.
//
// Tolerances (|gpu - cpu| <= atol + rtol |cpu|): fp32 with TF32 off (GemmOptions default), after
// kSteps steps of SGD with momentum: atol 1e-4, rtol 1e-3 (another summation order in every GEMM
// and convolution, compounded over the steps; the ops tests bound one op at 1e-5). bf16 autocast
// against fp32 CPU: atol 5e-3, rtol 5e-2 (8-bit mantissas in the GEMM inputs).
//
// Without a usable GPU the GPU comparisons skip, naming CUDA's reason. The error tests use CUDA
// tensors over a fake address (only metadata is read before the device check fails) and run here.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "paddle/core/autograd/variable.h"
#include "paddle/core/philox.h"
#include "paddle/core/status.h"
#include "paddle/core/tensor.h"
#include "paddle/nn/device_dispatch.h"
#include "paddle/nn/functional.h"
#include "paddle/nn/layers.h"
#include "paddle/nn/models.h"
#include "paddle/optim/adam.h"
#include "paddle/optim/sgd.h"
#include "tests/testing/gpu_test.h"

namespace paddle {
namespace {

using nn::Variable;
using ::testing::HasSubstr;

constexpr int kSteps = 3;
constexpr int64_t kBatch = 16;

std::string Message(const absl::Status& s) { return std::string(s.message()); }

// A CUDA tensor over a fake address: only its metadata may be read.
Tensor FakeCuda(absl::Span<const int64_t> shape, DType dtype = DType::kFloat32) {
  static char fake[1];
  return Tensor::FromBlob(fake, shape, dtype, Device::Cuda(0)).value();
}

Tensor RandomImages(uint64_t seed, int64_t n) {
  Tensor t = Tensor::Empty({n, 1, 28, 28}, DType::kFloat32).value();
  Philox rng(seed, 0);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = rng.NextFloat();
  return t;
}

Tensor RandomLabels(uint64_t seed, int64_t n) {
  Tensor t = Tensor::Empty({n}, DType::kInt64).value();
  Philox rng(seed, 1);
  for (int64_t i = 0; i < n; ++i) t.data<int64_t>()[i] = static_cast<int64_t>(rng.NextU32() % 10);
  return t;
}

Tensor ToHost(const Tensor& t) { return nn::internal::MoveTensor(t, Device::Cpu()).value(); }

// kSteps steps of SGD (momentum 0.9, weight decay 1e-4) of `model_name` on `device`; returns the
// parameters (on the host) and the losses.
struct Trained {
  std::map<std::string, Tensor> params;
  std::vector<float> losses;
};
absl::StatusOr<Trained> Train(const std::string& model_name, Device device, bool autocast) {
  // Dropout masks come from the same Philox words on both devices (the dropout ops' contract).
  auto dropout = std::make_shared<nn::Generator>(7, 1);
  ASSIGN_OR_RETURN(std::shared_ptr<nn::Module> model, nn::MakeModel(model_name, 5, dropout));
  RETURN_IF_ERROR(model->To(device));
  optim::SgdOptions o;
  o.lr = 0.05;
  o.momentum = 0.9;
  o.weight_decay = 1e-4;
  ASSIGN_OR_RETURN(std::unique_ptr<optim::Sgd> sgd, optim::Sgd::Create(model->Parameters(), o));
  nn::functional::AutocastBf16Guard guard(autocast);
  Trained out;
  for (int step = 0; step < kSteps; ++step) {
    ASSIGN_OR_RETURN(Tensor images, nn::internal::MoveTensor(RandomImages(step, kBatch), device));
    ASSIGN_OR_RETURN(Tensor labels, nn::internal::MoveTensor(RandomLabels(step, kBatch), device));
    sgd->ZeroGrad();
    ASSIGN_OR_RETURN(Variable logits, model->Forward(Variable(images)));
    ASSIGN_OR_RETURN(Variable loss, nn::functional::SoftmaxCrossEntropy(logits, labels));
    RETURN_IF_ERROR(loss.Backward());
    RETURN_IF_ERROR(sgd->Step());
    ASSIGN_OR_RETURN(Tensor host_loss, nn::internal::MoveTensor(loss.data(), Device::Cpu()));
    out.losses.push_back(*host_loss.data<float>());
  }
  for (const auto& [name, v] : model->NamedParameters()) {
    if (v.data().device() != device) {
      return absl::InternalError(absl::StrCat(name, " left ", device.ToString()));
    }
    if (v.grad().defined() && v.grad().device() != device) {
      return absl::InternalError(absl::StrCat("gradient of ", name, " is not on the device"));
    }
    ASSIGN_OR_RETURN(out.params[name], nn::internal::MoveTensor(v.data(), Device::Cpu()));
  }
  return out;
}

void ExpectClose(const Trained& gpu, const Trained& cpu, double atol, double rtol) {
  ASSERT_EQ(gpu.losses.size(), cpu.losses.size());
  for (size_t i = 0; i < cpu.losses.size(); ++i) {
    EXPECT_NEAR(gpu.losses[i], cpu.losses[i], atol + rtol * std::fabs(cpu.losses[i]))
        << "loss of step " << i;
  }
  ASSERT_EQ(gpu.params.size(), cpu.params.size());
  for (const auto& [name, want] : cpu.params) {
    const Tensor& got = gpu.params.at(name);
    ASSERT_EQ(got.shape(), want.shape()) << name;
    int bad = 0;
    for (int64_t i = 0; i < want.numel() && bad < 5; ++i) {
      const float w = want.data<float>()[i];
      const float g = got.data<float>()[i];
      if (!(std::fabs(g - w) <= atol + rtol * std::fabs(w))) {
        ADD_FAILURE() << name << "[" << i << "]: gpu " << g << ", cpu " << w;
        ++bad;
      }
    }
  }
}

// ---- Everywhere: device errors ----

TEST(CudaTrainingErrors, MixedDevicesIsInvalidArgumentNamingTensorsAndDevices) {
  Variable x(Tensor::Zeros({2, 3}, DType::kFloat32).value());
  Variable w(FakeCuda({4, 3}), /*requires_grad=*/true, "w");
  absl::StatusOr<Variable> y = nn::functional::Linear(x, w, Variable());
  ASSERT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument) << y.status();
  EXPECT_THAT(Message(y.status()), HasSubstr("linear: tensors on different devices"));
  EXPECT_THAT(Message(y.status()), HasSubstr("x float32[2, 3] on cpu"));
  EXPECT_THAT(Message(y.status()), HasSubstr("w float32[4, 3] on cuda:0"));

  Variable logits(Tensor::Zeros({2, 10}, DType::kFloat32).value());
  absl::StatusOr<Variable> loss =
      nn::functional::SoftmaxCrossEntropy(logits, FakeCuda({2}, DType::kInt64));
  ASSERT_EQ(loss.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(loss.status()), HasSubstr("labels int64[2] on cuda:0"));

  absl::StatusOr<Variable> sum = nn::functional::Add(x, Variable(FakeCuda({2, 3})));
  EXPECT_EQ(sum.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CudaTrainingErrors, CudaOpWithoutGpuIsFailedPrecondition) {
  PADDLE_SKIP_WITH_GPU();
  absl::StatusOr<Variable> y = nn::functional::Relu(Variable(FakeCuda({3})));
  ASSERT_EQ(y.status().code(), absl::StatusCode::kFailedPrecondition) << y.status();
#if PADDLE_WITH_CUDA
  EXPECT_THAT(Message(y.status()), HasSubstr("no CUDA device/driver"));
#else
  EXPECT_THAT(Message(y.status()), HasSubstr("built without CUDA"));
#endif
}

TEST(CudaTrainingErrors, ModuleToCudaWithoutGpuIsFailedPreconditionAndMovesNothing) {
  PADDLE_SKIP_WITH_GPU();
  nn::Generator init(1, 0);
  nn::Linear layer(3, 2, &init);
  absl::Status s = layer.To(Device::Cuda(0));
  ASSERT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
#if PADDLE_WITH_CUDA
  EXPECT_THAT(Message(s), HasSubstr("no CUDA device/driver"));
#endif
  EXPECT_TRUE(layer.device().is_cpu());
  for (const auto& [name, v] : layer.NamedParameters()) EXPECT_TRUE(v.data().device().is_cpu());
  EXPECT_TRUE(layer.To(Device::Cpu()).ok());  // a no-op
}

TEST(CudaTrainingErrors, AdamRejectsCudaParametersAsUnimplemented) {
  Variable w(FakeCuda({4, 3}), /*requires_grad=*/true, "w");
  absl::StatusOr<std::unique_ptr<optim::Adam>> adam = optim::Adam::Create({w}, {});
  ASSERT_EQ(adam.status().code(), absl::StatusCode::kUnimplemented) << adam.status();
  EXPECT_THAT(Message(adam.status()), HasSubstr("'w' is float32[4, 3] on cuda:0"));
  EXPECT_THAT(Message(adam.status()), HasSubstr("use SGD"));
}

TEST(CudaTrainingErrors, SgdRejectsNonFloat32CudaParameters) {
  Variable w(FakeCuda({4}, DType::kBFloat16), /*requires_grad=*/true, "w");
  absl::StatusOr<std::unique_ptr<optim::Sgd>> sgd = optim::Sgd::Create({w}, {});
  ASSERT_EQ(sgd.status().code(), absl::StatusCode::kInvalidArgument) << sgd.status();
  EXPECT_THAT(Message(sgd.status()), HasSubstr("contiguous float32"));
}

TEST(CudaTrainingErrors, AccumulatingAGradientFromAnotherDeviceFails) {
  Variable w(Tensor::Zeros({3}, DType::kFloat32).value(), /*requires_grad=*/true, "w");
  autograd::Edge edge = w.GradientEdge();
  absl::StatusOr<std::vector<Tensor>> r = edge.node->Apply({FakeCuda({3})});
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(r.status()), HasSubstr("on cuda:0"));
}

// ---- On a GPU: the same training on both devices ----

TEST(CudaTraining, MlpStepsMatchTheCpu) {
  PADDLE_SKIP_WITHOUT_GPU();
  absl::StatusOr<Trained> cpu = Train("mlp", Device::Cpu(), false);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  absl::StatusOr<Trained> gpu = Train("mlp", Device::Cuda(0), false);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ExpectClose(*gpu, *cpu, 1e-4, 1e-3);
}

TEST(CudaTraining, CnnStepsMatchTheCpu) {
  PADDLE_SKIP_WITHOUT_GPU();
  absl::StatusOr<Trained> cpu = Train("cnn", Device::Cpu(), false);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  absl::StatusOr<Trained> gpu = Train("cnn", Device::Cuda(0), false);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ExpectClose(*gpu, *cpu, 1e-4, 1e-3);
}

TEST(CudaTraining, MlpWithBf16AutocastStaysCloseToFp32) {
  PADDLE_SKIP_WITHOUT_GPU();
  absl::StatusOr<Trained> cpu = Train("mlp", Device::Cpu(), false);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  absl::StatusOr<Trained> gpu = Train("mlp", Device::Cuda(0), true);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  for (const auto& [name, t] : gpu->params) EXPECT_EQ(t.dtype(), DType::kFloat32) << name;
  ExpectClose(*gpu, *cpu, 5e-3, 5e-2);
}

TEST(CudaTraining, ModuleToRoundTripKeepsValuesAndDropsGradients) {
  PADDLE_SKIP_WITHOUT_GPU();
  auto dropout = std::make_shared<nn::Generator>(7, 1);
  std::shared_ptr<nn::Module> model = nn::MakeModel("mlp", 3, dropout).value();
  std::map<std::string, Tensor> before;
  for (const auto& [name, t] : model->StateDict()) before[name] = t.Clone().value();
  for (auto& v : model->Parameters()) ASSERT_TRUE(v.set_grad(v.data().Clone().value()).ok());
  ASSERT_TRUE(model->To(Device::Cuda(0)).ok());
  EXPECT_EQ(model->device(), Device::Cuda(0));
  for (const auto& [name, v] : model->NamedParameters()) {
    EXPECT_EQ(v.data().device(), Device::Cuda(0)) << name;
    EXPECT_FALSE(v.grad().defined()) << name;
  }
  ASSERT_TRUE(model->To(Device::Cpu()).ok());
  for (const auto& [name, t] : model->StateDict()) {
    ASSERT_TRUE(t.device().is_cpu()) << name;
    ASSERT_EQ(t.nbytes(), before[name].nbytes());
    EXPECT_EQ(std::memcmp(t.data(), before[name].data(), t.nbytes()), 0) << name;
  }
}

TEST(CudaTraining, GradientsAccumulateOnTheGpuAsOnTheCpu) {
  PADDLE_SKIP_WITHOUT_GPU();
  // y = sum-free: loss = CE(a * a + a); a used three times -> engine sums (AddTensors), two
  // backward passes -> leaf accumulation (AddInPlace).
  Tensor host = Tensor::Empty({4, 10}, DType::kFloat32).value();
  Philox rng(11, 0);
  for (int64_t i = 0; i < host.numel(); ++i) host.data<float>()[i] = rng.NextFloat() - 0.5f;
  Tensor labels = RandomLabels(3, 4);
  std::vector<Tensor> grads;
  for (Device device : {Device::Cpu(), Device::Cuda(0)}) {
    Variable a(nn::internal::MoveTensor(host, device).value(), true, "a");
    Tensor l = nn::internal::MoveTensor(labels, device).value();
    for (int pass = 0; pass < 2; ++pass) {
      Variable sq = nn::functional::Mul(a, a).value();
      Variable y = nn::functional::Add(sq, a).value();
      Variable loss = nn::functional::SoftmaxCrossEntropy(y, l).value();
      ASSERT_TRUE(loss.Backward().ok());
    }
    ASSERT_EQ(a.grad().device(), device);
    grads.push_back(ToHost(a.grad()));
    a.ZeroGrad();
    Tensor zero = ToHost(a.grad());
    for (int64_t i = 0; i < zero.numel(); ++i) ASSERT_EQ(zero.data<float>()[i], 0.0f);
  }
  for (int64_t i = 0; i < grads[0].numel(); ++i) {
    const float want = grads[0].data<float>()[i];
    EXPECT_NEAR(grads[1].data<float>()[i], want, 1e-6 + 1e-5 * std::fabs(want)) << i;
  }
}

}  // namespace
}  // namespace paddle
