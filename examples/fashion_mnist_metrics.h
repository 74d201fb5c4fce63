// What rank 0 reports: the progress line within an epoch, and the examples' final evaluation
// over every rank (paddle/parallel/metrics.h): rank r of n
// evaluates the contiguous share [r N / n, (r + 1) N / n) of the test set, and the ranks sum
// their accuracy, loss and histogram counts, so the figures cover all N samples whatever the
// world size. The AUC is of a binary view of the ten classes: "footwear" (sandal, sneaker, ankle
// boot) scored by the softmax mass of those three classes.
#ifndef EXAMPLES_FASHION_MNIST_METRICS_H_
#define EXAMPLES_FASHION_MNIST_METRICS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "paddle/collective/communicator.h"
#include "paddle/data/fashion_mnist.h"
#include "paddle/nn/module.h"

namespace paddle::examples {

// Collective over `comm` (nullptr: this process alone). Returns the line rank 0 prints:
// "global_eval  samples N  accuracy A  loss L  footwear_auc U (+-E)", U "n/a (one class)" when
// the test set holds only one side of the binary view.
// Rank 0's progress within an epoch: a rewritten line on a terminal, a line every 5 s otherwise;
// nothing when not enabled.
class ProgressLine {
 public:
  explicit ProgressLine(bool enabled);
  void Update(int64_t step, int64_t steps, int64_t samples, absl::Time start);
  void Finish();  // clears a terminal's line; the next Update starts a new epoch

 private:
  bool enabled_, tty_;
  absl::Time last_ = absl::InfinitePast();
};

absl::StatusOr<std::string> EvaluateOverRanks(nn::Module& model, const data::Dataset& test,
                                              Communicator* comm);

}  // namespace paddle::examples

#endif  // EXAMPLES_FASHION_MNIST_METRICS_H_
