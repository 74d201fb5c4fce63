// Global metrics: AUC histograms and sample-weighted accuracy and loss (see metrics.h).
#include "paddle/parallel/metrics.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "paddle/core/status.h"

namespace paddle {
namespace {

// Runs an in-place allreduce of `values` (CPU) and waits for it; errors name the metric.
template <typename T>
absl::Status AllreduceInPlace(Communicator& comm, std::vector<T>* values, ReduceOp op,
                              CallOptions call, const char* what) {
  ASSIGN_OR_RETURN(Tensor t,
                   Tensor::FromBlob(values->data(), {static_cast<int64_t>(values->size())},
                                    DTypeOf<T>::value, Device::Cpu()));
  return Annotate(comm.Allreduce(t, op, call)->Wait(),
                  absl::StrCat("summing ", what, " over ranks"));
}

absl::Status EmptyClass(int64_t positives, int64_t negatives) {
  return absl::FailedPreconditionError(
      absl::StrCat("AUC needs samples of both classes; counted ", positives, " positive and ",
                   negatives, " negative (after SumOverRanks these are the whole group's)"));
}

}  // namespace

absl::StatusOr<AucHistogram> AucHistogram::Create(int64_t buckets) {
  if (buckets < 1 || buckets > kMaxBuckets) {
    return absl::InvalidArgumentError(
        absl::StrCat("AucHistogram: buckets must be in [1, ", kMaxBuckets, "], got ", buckets));
  }
  return AucHistogram(buckets);
}

absl::Status AucHistogram::Add(absl::Span<const float> scores, absl::Span<const int64_t> labels) {
  if (scores.size() != labels.size()) {
    return absl::InvalidArgumentError(absl::StrCat("AucHistogram::Add: ", scores.size(),
                                                   " scores but ", labels.size(), " labels"));
  }
  for (size_t i = 0; i < scores.size(); ++i) {
    if (!(scores[i] >= 0.0f && scores[i] <= 1.0f)) {  // NaN fails both
      return absl::InvalidArgumentError(
          absl::StrCat("AucHistogram::Add: score ", i, " is ", scores[i],
                       "; scores must be in [0, 1] (apply a sigmoid or softmax to logits first)"));
    }
    if (labels[i] != 0 && labels[i] != 1) {
      return absl::InvalidArgumentError(absl::StrCat("AucHistogram::Add: label ", i, " is ",
                                                     labels[i], "; labels must be 0 or 1"));
    }
  }
  const int64_t b = buckets();
  for (size_t i = 0; i < scores.size(); ++i) {
    // A score of exactly 1 joins the top bucket; buckets are [k/B, (k+1)/B).
    int64_t k = std::min<int64_t>(static_cast<int64_t>(static_cast<double>(scores[i]) * b), b - 1);
    if (labels[i] == 1) {
      ++positive_[k];
      ++positives_;
    } else {
      ++negative_[k];
      ++negatives_;
    }
  }
  return absl::OkStatus();
}

absl::Status AucHistogram::SumOverRanks(Communicator& comm, CallOptions call) {
  // First agree on the bucket count (max of b and of -b: equal everywhere iff min == max), so a
  // mismatch is an error on every rank rather than a reduction of unlike histograms.
  std::vector<int64_t> shape = {buckets(), -buckets()};
  RETURN_IF_ERROR(AllreduceInPlace(comm, &shape, ReduceOp::kMax, call, "AUC bucket counts"));
  if (shape[0] != -shape[1]) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AucHistogram::SumOverRanks on rank ", comm.rank(), "/", comm.world_size(),
        ": ranks built histograms with different bucket counts (from ", -shape[1], " to ", shape[0],
        "; this rank has ", buckets(), "); create every rank's with the same count"));
  }
  std::vector<int64_t> counts;
  counts.reserve(2 * positive_.size());
  counts.insert(counts.end(), positive_.begin(), positive_.end());
  counts.insert(counts.end(), negative_.begin(), negative_.end());
  RETURN_IF_ERROR(AllreduceInPlace(comm, &counts, ReduceOp::kSum, call, "AUC histograms"));
  const size_t b = positive_.size();
  std::copy(counts.begin(), counts.begin() + b, positive_.begin());
  std::copy(counts.begin() + b, counts.end(), negative_.begin());
  positives_ = negatives_ = 0;
  for (size_t k = 0; k < b; ++k) {
    positives_ += positive_[k];
    negatives_ += negative_[k];
  }
  return absl::OkStatus();
}

absl::StatusOr<double> AucHistogram::Auc() const {
  if (positives_ == 0 || negatives_ == 0) return EmptyClass(positives_, negatives_);
  // Pairs won by positives: every negative in a lower bucket, half of those in the same bucket.
  // Sums of products reach (P N) ~ 1e18 and more: long double keeps them exact to 2^64.
  long double won = 0;
  long double negatives_below = 0;
  for (size_t k = 0; k < positive_.size(); ++k) {
    won += positive_[k] * (negatives_below + 0.5L * negative_[k]);
    negatives_below += negative_[k];
  }
  return static_cast<double>(won / (static_cast<long double>(positives_) * negatives_));
}

double AucHistogram::ErrorBound() const {
  if (positives_ == 0 || negatives_ == 0) return 0;
  long double same_bucket = 0;
  for (size_t k = 0; k < positive_.size(); ++k) {
    same_bucket += static_cast<long double>(positive_[k]) * negative_[k];
  }
  return static_cast<double>(0.5L * same_bucket /
                             (static_cast<long double>(positives_) * negatives_));
}

absl::Status ClassificationTotals::Add(int64_t samples, int64_t correct, double loss_sum) {
  if (correct < 0 || correct > samples || !std::isfinite(loss_sum)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ClassificationTotals::Add: need 0 <= correct <= samples and a finite loss "
                     "sum, got samples=",
                     samples, " correct=", correct, " loss_sum=", loss_sum));
  }
  samples_ += samples;
  correct_ += correct;
  loss_sum_ += loss_sum;
  return absl::OkStatus();
}

absl::Status ClassificationTotals::AddLogits(const Tensor& logits, const Tensor& labels) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("ClassificationTotals::AddLogits: ", why,
                                                   " (logits ", logits.ToString(), ", labels ",
                                                   labels.ToString(), ")"));
  };
  if (logits.dim() != 2 || logits.dtype() != DType::kFloat32 || !logits.device().is_cpu()) {
    return bad("logits must be a float32 CPU tensor [n, classes]");
  }
  if (labels.dim() != 1 || labels.dtype() != DType::kInt64 || !labels.device().is_cpu() ||
      labels.shape()[0] != logits.shape()[0]) {
    return bad("labels must be an int64 CPU tensor [n] matching the logits' rows");
  }
  const int64_t n = logits.shape()[0], classes = logits.shape()[1];
  if (n > 0 && classes < 1) return bad("logits have no classes");
  ASSIGN_OR_RETURN(Tensor l, logits.Contiguous());
  ASSIGN_OR_RETURN(Tensor y, labels.Contiguous());
  const float* x = l.data<float>();
  const int64_t* t = y.data<int64_t>();
  int64_t correct = 0;
  double loss = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (t[i] < 0 || t[i] >= classes) {
      return bad(absl::StrCat("label ", i, " is ", t[i], ", outside [0, ", classes, ")"));
    }
    const float* row = x + i * classes;
    int64_t best = 0;
    for (int64_t k = 1; k < classes; ++k) {
      if (row[k] > row[best]) best = k;
    }
    double sum = 0;
    for (int64_t k = 0; k < classes; ++k) sum += std::exp(static_cast<double>(row[k]) - row[best]);
    loss += std::log(sum) + row[best] - row[t[i]];
    correct += best == t[i];
  }
  return Add(n, correct, loss);
}

absl::Status ClassificationTotals::SumOverRanks(Communicator& comm, CallOptions call) {
  std::vector<double> sums = {samples_, correct_, loss_sum_};
  RETURN_IF_ERROR(AllreduceInPlace(comm, &sums, ReduceOp::kSum, call, "sample totals"));
  samples_ = sums[0];
  correct_ = sums[1];
  loss_sum_ = sums[2];
  return absl::OkStatus();
}

absl::StatusOr<double> ClassificationTotals::Accuracy() const {
  if (samples_ == 0) return absl::FailedPreconditionError("accuracy of no samples");
  return correct_ / samples_;
}

absl::StatusOr<double> ClassificationTotals::MeanLoss() const {
  if (samples_ == 0) return absl::FailedPreconditionError("mean loss of no samples");
  return loss_sum_ / samples_;
}

}  // namespace paddle
