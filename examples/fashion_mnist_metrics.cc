// Rank 0's progress line, and the evaluation over every rank's share of the test set (see
// fashion_mnist_metrics.h).
#include "examples/fashion_mnist_metrics.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "paddle/core/autograd/grad_mode.h"
#include "paddle/core/status.h"
#include "paddle/nn/device_dispatch.h"
#include "paddle/parallel/metrics.h"

namespace paddle::examples {

ProgressLine::ProgressLine(bool enabled) : enabled_(enabled), tty_(isatty(fileno(stdout)) != 0) {}

void ProgressLine::Update(int64_t step, int64_t steps, int64_t samples, absl::Time start) {
  if (!enabled_) return;
  absl::Time now = absl::Now();
  if (last_ == absl::InfinitePast()) last_ = start;
  if (now - last_ < (tty_ ? absl::Milliseconds(200) : absl::Seconds(5))) return;
  last_ = now;
  double seconds = absl::ToDoubleSeconds(now - start);
  double rate = seconds > 0 ? samples / seconds : 0;
  double eta = step > 0 ? seconds * (steps - step) / step : 0;
  std::printf("%s  step %lld/%lld  samples/s %.0f  ETA %.0fs%s", tty_ ? "\r" : "",
              static_cast<long long>(step), static_cast<long long>(steps), rate, eta,
              tty_ ? "   " : "\n");
  std::fflush(stdout);
}

void ProgressLine::Finish() {
  if (enabled_ && tty_ && last_ != absl::InfinitePast()) std::printf("\r%60s\r", "");
  last_ = absl::InfinitePast();
}

absl::StatusOr<std::string> EvaluateOverRanks(nn::Module& model, const data::Dataset& test,
                                              Communicator* comm) {
  const int rank = comm ? comm->rank() : 0, world = comm ? comm->world_size() : 1;
  const int64_t begin = test.size() * rank / world, end = test.size() * (rank + 1) / world;
  ClassificationTotals totals;
  ASSIGN_OR_RETURN(AucHistogram footwear, AucHistogram::Create());
  autograd::NoGradGuard no_grad;
  model.Eval();
  constexpr int64_t kBatch = 1000;
  for (int64_t start = begin; start < end; start += kBatch) {
    const int64_t stop = std::min(end, start + kBatch);
    ASSIGN_OR_RETURN(Tensor images, test.images.Slice(0, start, stop));
    ASSIGN_OR_RETURN(images, images.Contiguous());
    ASSIGN_OR_RETURN(images, nn::internal::MoveTensor(images, model.device()));
    ASSIGN_OR_RETURN(nn::Variable logits, model.Forward(nn::Variable(images)));
    ASSIGN_OR_RETURN(Tensor host, nn::internal::MoveTensor(logits.data(), Device::Cpu()));
    ASSIGN_OR_RETURN(Tensor labels, test.labels.Slice(0, start, stop));
    RETURN_IF_ERROR(totals.AddLogits(host, labels));
    const int64_t classes = host.shape()[1];
    const float* l = host.data<float>();
    std::vector<float> scores;
    std::vector<int64_t> is_footwear;
    for (int64_t i = 0; i < stop - start; ++i) {
      const float* row = l + i * classes;
      const float top = *std::max_element(row, row + classes);
      double all = 0, feet = 0;
      for (int64_t k = 0; k < classes; ++k) {
        double e = std::exp(static_cast<double>(row[k]) - top);
        all += e;
        if (k == 5 || k == 7 || k == 9) feet += e;
      }
      const int64_t y = labels.data<int64_t>()[i];
      scores.push_back(static_cast<float>(feet / all));
      is_footwear.push_back(y == 5 || y == 7 || y == 9);
    }
    RETURN_IF_ERROR(footwear.Add(scores, is_footwear));
  }
  model.Train();
  if (comm) {
    RETURN_IF_ERROR(totals.SumOverRanks(*comm));
    RETURN_IF_ERROR(footwear.SumOverRanks(*comm));
  }
  ASSIGN_OR_RETURN(double accuracy, totals.Accuracy());
  ASSIGN_OR_RETURN(double loss, totals.MeanLoss());
  // A small --test-samples may hold one class only: then the AUC is undefined, not an error.
  absl::StatusOr<double> auc = footwear.Auc();
  return absl::StrFormat("global_eval  samples %d  accuracy %.4f  loss %.4f  footwear_auc %s",
                         totals.samples(), accuracy, loss,
                         auc.ok() ? absl::StrFormat("%.5f (+-%.1g)", *auc, footwear.ErrorBound())
                                  : std::string("n/a (one class)"));
}

}  // namespace paddle::examples
