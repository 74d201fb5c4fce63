// Fashion-MNIST (Xiao, Rasul and Vollgraf, 2017): 70,000 28x28 grey-scale images of clothing in
// ten classes, the data set the training examples and end-to-end tests learn from.
//
// LoadFashionMnist reads the four gzip-compressed idx files that Debian's dataset-fashion-mnist
// package installs and returns the whole split as two tensors, images as float32 [N, 1, 28, 28]
// and labels as int64 [N]; the DataLoader (paddle/data/data_loader.h) then gathers shuffled
// batches from them. Every file is checked the way a corrupt download fails: the idx magic number,
// the dimensions, the payload length (a truncated file is an error, not a short data set), the
// label range and that the image and label files agree on the count. Each error names the file
// and the numbers that disagree.
#ifndef PADDLE_DATA_FASHION_MNIST_H_
#define PADDLE_DATA_FASHION_MNIST_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "paddle/core/tensor.h"

namespace paddle {
namespace data {

// Where Debian's dataset-fashion-mnist package puts the files.
inline constexpr char kDefaultFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

// Per-pixel mean and standard deviation of the training images scaled to [0, 1]; the test split
// is normalized with them too, as a trained model would see it.
inline constexpr float kFashionMnistMean = 0.2860f;
inline constexpr float kFashionMnistStd = 0.3530f;

inline constexpr int64_t kFashionMnistRows = 28;
inline constexpr int64_t kFashionMnistCols = 28;
inline constexpr int64_t kFashionMnistClasses = 10;

enum class Split { kTrain, kTest };

// A whole split in memory. Copies share the tensors' storage.
struct Dataset {
  Tensor images;  // float32 [N, 1, 28, 28]
  Tensor labels;  // int64 [N], values in [0, kFashionMnistClasses)
  int64_t size() const { return labels.defined() ? labels.shape()[0] : 0; }
};

// Reads `split` ("train-*" or "t10k-*" files) from `dir`. Pixels become x / 255, and with
// `normalize` then (x / 255 - kFashionMnistMean) / kFashionMnistStd (as one multiply and add,
// paddle/data/pixels.h). Errors: kNotFound for a missing directory or file (with the apt-get
// command that installs them), kDataLoss for a file whose magic number, dimensions, length or
// labels are wrong, or whose image and label counts differ.
absl::StatusOr<Dataset> LoadFashionMnist(Split split,
                                         const std::string& dir = kDefaultFashionMnistDir,
                                         bool normalize = true);

}  // namespace data
}  // namespace paddle

#endif  // PADDLE_DATA_FASHION_MNIST_H_
