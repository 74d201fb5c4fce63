// Model definitions.
#include "paddle/nn/models.h"

#include "absl/strings/str_cat.h"
#include "paddle/core/status.h"

namespace paddle::nn {

BasicBlock::BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride, Generator* init)
    : Module("BasicBlock") {
  conv1_ = RegisterModule("conv1", std::make_shared<Conv2d>(in_channels, out_channels, 3, init,
                                                            stride, 1, /*bias=*/false));
  bn1_ = RegisterModule("bn1", std::make_shared<BatchNorm2d>(out_channels));
  conv2_ = RegisterModule(
      "conv2", std::make_shared<Conv2d>(out_channels, out_channels, 3, init, 1, 1, /*bias=*/false));
  bn2_ = RegisterModule("bn2", std::make_shared<BatchNorm2d>(out_channels));
  if (stride != 1 || in_channels != out_channels) {
    shortcut_conv_ = RegisterModule(
        "shortcut.0",
        std::make_shared<Conv2d>(in_channels, out_channels, 1, init, stride, 0, false));
    shortcut_bn_ = RegisterModule("shortcut.1", std::make_shared<BatchNorm2d>(out_channels));
  }
}

absl::StatusOr<Variable> BasicBlock::Forward(const Variable& x) {
  ASSIGN_OR_RETURN(Variable h, conv1_->Forward(x));
  ASSIGN_OR_RETURN(h, bn1_->Forward(h));
  ASSIGN_OR_RETURN(h, functional::Relu(h));
  ASSIGN_OR_RETURN(h, conv2_->Forward(h));
  ASSIGN_OR_RETURN(h, bn2_->Forward(h));
  Variable shortcut = x;
  if (shortcut_conv_) {
    ASSIGN_OR_RETURN(shortcut, shortcut_conv_->Forward(x));
    ASSIGN_OR_RETURN(shortcut, shortcut_bn_->Forward(shortcut));
  }
  ASSIGN_OR_RETURN(h, functional::Add(h, shortcut));
  return functional::Relu(h);
}

absl::StatusOr<std::shared_ptr<Module>> MakeModel(const std::string& name, uint64_t seed,
                                                  const std::shared_ptr<Generator>& dropout) {
  Generator init(seed, 0);
  auto model = std::make_shared<Sequential>();
  if (name == "mlp") {
    model->Add(std::make_shared<Flatten>());
    model->Add(std::make_shared<Linear>(784, 256, &init));
    model->Add(std::make_shared<Relu>());
    model->Add(std::make_shared<Linear>(256, 128, &init));
    model->Add(std::make_shared<Relu>());
    model->Add(std::make_shared<Linear>(128, 10, &init));
  } else if (name == "cnn") {
    model->Add(std::make_shared<Conv2d>(1, 32, 3, &init));
    model->Add(std::make_shared<Relu>());
    model->Add(std::make_shared<Conv2d>(32, 64, 3, &init));
    model->Add(std::make_shared<Relu>());
    model->Add(std::make_shared<MaxPool2d>(2));
    model->Add(std::make_shared<Dropout>(0.25, dropout));
    model->Add(std::make_shared<Flatten>());
    model->Add(std::make_shared<Linear>(9216, 128, &init));
    model->Add(std::make_shared<Relu>());
    model->Add(std::make_shared<Dropout>(0.5, dropout));
    model->Add(std::make_shared<Linear>(128, 10, &init));
  } else if (name == "resnet") {
    model->Add(std::make_shared<Conv2d>(1, 16, 3, &init, 1, 1, /*bias=*/false));
    model->Add(std::make_shared<BatchNorm2d>(16));
    model->Add(std::make_shared<Relu>());
    int64_t channels = 16;
    for (int64_t stage_channels : {16, 32, 64}) {
      int64_t stride = stage_channels == 16 ? 1 : 2;
      model->Add(std::make_shared<BasicBlock>(channels, stage_channels, stride, &init));
      model->Add(std::make_shared<BasicBlock>(stage_channels, stage_channels, 1, &init));
      channels = stage_channels;
    }
    model->Add(std::make_shared<GlobalAvgPool>());
    model->Add(std::make_shared<Linear>(64, 10, &init));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown model '", name, "'; choose mlp, cnn or resnet"));
  }
  return std::static_pointer_cast<Module>(model);
}

}  // namespace paddle::nn
