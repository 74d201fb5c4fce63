// The models of the Fashion-MNIST examples, for [N, 1, 28, 28] inputs and 10 classes:
//   mlp:    flatten, Linear 784-256, ReLU, Linear 256-128, ReLU, Linear 128-10
//   cnn:    Conv 1-32 3x3, ReLU, Conv 32-64 3x3, ReLU, MaxPool 2, Dropout 0.25, flatten,
//           Linear 9216-128, ReLU, Dropout 0.5, Linear 128-10 (PyTorch's MNIST example network)
//   resnet: a small ResNet (He et al. 2016) for 28x28: Conv 3x3 16 + BN + ReLU, three stages of
//           two basic blocks (16, 32, 64 channels; the last two halve the resolution to 14 and
//           7), global average pool, Linear 64-10.
#ifndef PADDLE_NN_MODELS_H_
#define PADDLE_NN_MODELS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "paddle/nn/generator.h"
#include "paddle/nn/layers.h"

namespace paddle::nn {

// Weights from Generator(seed, stream 0), identical on every process given the seed; dropout
// masks from `dropout` (which the caller keeps to save and restore its offset).
absl::StatusOr<std::shared_ptr<Module>> MakeModel(const std::string& name, uint64_t seed,
                                                  const std::shared_ptr<Generator>& dropout);

// conv-bn-relu-conv-bn plus the input (through a 1x1 conv + bn when the shape changes), relu.
class BasicBlock : public Module {
 public:
  BasicBlock(int64_t in_channels, int64_t out_channels, int64_t stride, Generator* init);
  absl::StatusOr<Variable> Forward(const Variable& x) override;

 private:
  std::shared_ptr<Conv2d> conv1_, conv2_, shortcut_conv_;
  std::shared_ptr<BatchNorm2d> bn1_, bn2_, shortcut_bn_;
};

}  // namespace paddle::nn

#endif  // PADDLE_NN_MODELS_H_
