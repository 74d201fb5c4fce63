// Modules: parameter names and counts of the example models, state dicts, train/eval mode, and
// seeded initialisation.
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "paddle/nn/models.h"

namespace paddle::nn {
namespace {

std::vector<std::string> Names(const Module& m) {
  std::vector<std::string> names;
  for (const auto& [name, v] : m.NamedParameters()) {
    names.push_back(name);
    EXPECT_EQ(v.name(), name);  // the Variable carries its full name
  }
  return names;
}

TEST(ModuleTest, ModelShapesAndNames) {
  auto gen = std::make_shared<Generator>(1, 1);
  std::shared_ptr<Module> mlp = *MakeModel("mlp", 1, gen);
  EXPECT_EQ(mlp->NumParameters(), 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
  EXPECT_THAT(Names(*mlp), ::testing::ElementsAre("1.weight", "1.bias", "3.weight", "3.bias",
                                                  "5.weight", "5.bias"));
  std::shared_ptr<Module> cnn = *MakeModel("cnn", 1, gen);
  EXPECT_EQ(cnn->NumParameters(), 1199882);  // as PyTorch's MNIST example network
  std::shared_ptr<Module> resnet = *MakeModel("resnet", 1, gen);
  std::vector<std::string> names = Names(*resnet);
  EXPECT_THAT(names, ::testing::Contains("5.shortcut.0.weight"));
  EXPECT_THAT(names, ::testing::Contains("3.bn1.weight"));
  std::vector<std::string> buffers;
  for (const auto& [name, v] : resnet->NamedBuffers()) buffers.push_back(name);
  EXPECT_THAT(buffers, ::testing::Contains("1.running_var"));
  absl::StatusOr<std::shared_ptr<Module>> bad = MakeModel("vgg", 1, gen);
  EXPECT_THAT(std::string(bad.status().message()), ::testing::HasSubstr("unknown model 'vgg'"));
}

// A module whose entries are set from outside, as a Python-defined module's are.
class OpenModule : public Module {
 public:
  OpenModule() : Module("Open") {}
  absl::StatusOr<Variable> Forward(const Variable& x) override { return x; }
  using Module::SetBuffer;
  using Module::SetModule;
  using Module::SetParameter;
};

TEST(ModuleTest, SetEntriesKeepIdentityOrderAndFullNames) {
  auto root = std::make_shared<OpenModule>();
  auto child = std::make_shared<OpenModule>();
  Variable w(*Tensor::Empty({2}, DType::kFloat32), /*requires_grad=*/true);
  ASSERT_TRUE(child->SetParameter("w", w).ok());
  root->SetModule("block", child);
  // Registered after the child joined its parent: still named by its full path.
  Variable b(*Tensor::Empty({3}, DType::kFloat32), /*requires_grad=*/true);
  ASSERT_TRUE(child->SetParameter("b", b).ok());
  ASSERT_TRUE(root->SetBuffer("count", Variable(*Tensor::Empty({1}, DType::kInt64))).ok());
  EXPECT_THAT(Names(*root), ::testing::ElementsAre("block.w", "block.b"));
  EXPECT_EQ(root->Parameters()[0].id(), w.id());  // the caller's handle is the parameter
  EXPECT_EQ(root->NamedBuffers()[0].first, "count");
  // Replacing keeps the position; a name used by another kind of entry is an error.
  Variable w2(*Tensor::Empty({5}, DType::kFloat32), /*requires_grad=*/true);
  ASSERT_TRUE(child->SetParameter("w", w2).ok());
  EXPECT_EQ(root->Parameters()[0].id(), w2.id());
  EXPECT_EQ(root->NumParameters(), 8);
  EXPECT_EQ(root->SetParameter("count", w).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(root->SetBuffer("count", w).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(root->SetParameter("x", Variable()).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ModuleTest, SeedFixesInitialisation) {
  auto gen = std::make_shared<Generator>(1, 1);
  auto a = (*MakeModel("mlp", 7, gen))->StateDict();
  auto b = (*MakeModel("mlp", 7, gen))->StateDict();
  auto c = (*MakeModel("mlp", 8, gen))->StateDict();
  const Tensor& wa = a.at("1.weight");
  const Tensor& wb = b.at("1.weight");
  const Tensor& wc = c.at("1.weight");
  EXPECT_EQ(0, std::memcmp(wa.data(), wb.data(), wa.nbytes()));
  EXPECT_NE(0, std::memcmp(wa.data(), wc.data(), wa.nbytes()));
  // Uniform in +-1/sqrt(784).
  float bound = 1.0f / 28.0f;
  for (int64_t i = 0; i < wa.numel(); ++i) {
    ASSERT_LE(std::fabs(wa.data<float>()[i]), bound);
  }
}

TEST(ModuleTest, StateDictRoundTripAndErrors) {
  auto gen = std::make_shared<Generator>(1, 1);
  std::shared_ptr<Module> src = *MakeModel("resnet", 1, gen);
  std::shared_ptr<Module> dst = *MakeModel("resnet", 2, gen);
  std::map<std::string, Tensor> state = src->StateDict();
  ASSERT_TRUE(dst->LoadStateDict(state).ok());
  for (const auto& [name, t] : dst->StateDict()) {
    ASSERT_EQ(0, std::memcmp(t.data(), state.at(name).data(), t.nbytes())) << name;
  }
  std::map<std::string, Tensor> missing = state;
  missing.erase("0.weight");
  absl::Status s = dst->LoadStateDict(missing);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("no entry '0.weight'"));
  EXPECT_TRUE(dst->LoadStateDict(missing, /*strict=*/false).ok());
  std::map<std::string, Tensor> extra = state;
  extra["fc.weight"] = state.at("0.weight");
  s = dst->LoadStateDict(extra);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("'fc.weight' matches nothing"));
  std::map<std::string, Tensor> wrong = state;
  wrong["0.weight"] = *Tensor::Zeros({3}, DType::kFloat32);
  s = dst->LoadStateDict(wrong);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("'0.weight' is float32[3]"));
}

TEST(ModuleTest, BatchNormStatisticsMoveOnlyInTraining) {
  auto gen = std::make_shared<Generator>(1, 1);
  std::shared_ptr<Module> resnet = *MakeModel("resnet", 1, gen);
  Tensor x = *Tensor::Zeros({2, 1, 28, 28}, DType::kFloat32);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i % 7);
  Tensor running_var = resnet->StateDict().at("1.running_var");
  float before = running_var.data<float>()[0];
  resnet->Eval();
  EXPECT_FALSE(resnet->training());
  ASSERT_TRUE(resnet->Forward(Variable(x)).ok());
  EXPECT_EQ(running_var.data<float>()[0], before);
  resnet->Train();
  absl::StatusOr<Variable> y = resnet->Forward(Variable(x));
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_NE(running_var.data<float>()[0], before);
  EXPECT_THAT(y->shape(), ::testing::ElementsAre(2, 10));
}

TEST(ModuleTest, DropoutIsOffInEvalAndAdvancesItsGenerator) {
  auto gen = std::make_shared<Generator>(1, 1);
  std::shared_ptr<Module> cnn = *MakeModel("cnn", 1, gen);
  Tensor x = *Tensor::Zeros({1, 1, 28, 28}, DType::kFloat32);
  cnn->Eval();
  ASSERT_TRUE(cnn->Forward(Variable(x)).ok());
  EXPECT_EQ(gen->offset(), 0u);
  cnn->Train();
  ASSERT_TRUE(cnn->Forward(Variable(x)).ok());
  EXPECT_EQ(gen->offset(), 64u * 12 * 12 + 128);  // one word per element of both dropouts
}

}  // namespace
}  // namespace paddle::nn
