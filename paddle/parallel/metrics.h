// Evaluation metrics over every sample of every rank: AUC from score histograms, and accuracy and
// loss averaged over samples (not over ranks).
//
// Each rank accumulates its own samples (Add...), then every rank of the group calls
// SumOverRanks, which allreduces the sums so that afterwards every rank holds the group's
// totals and reports the same figures. Averages are sums over samples divided by the global
// sample count, so a rank with 3 samples weighs 3/N, not 1/world (averaging per-rank means would
// be wrong whenever shards differ in size, as the last batch or an uneven split makes them).
//
// Note [Histogram AUC]
// AUC is the probability that a random positive scores above a random negative, ties counting
// one half. Exactly it needs every score sorted; across ranks that is an allgather of all
// predictions. Instead each rank counts its scores in B equal-width buckets of [0, 1], one
// histogram per label, and the histograms are summed by one allreduce of 2B int64 (16 B per
// bucket: 256 KiB at the default B = 16384, whatever the sample count). A positive in bucket i and
// a negative in bucket j are ordered correctly whenever i != j; only pairs in the same bucket are
// unresolved and are counted as ties (1/2). Each such pair's exact value is 0, 1/2 or 1, so
//     |AUC_histogram - AUC_exact| <= 1/2 * sum_b pos_b * neg_b / (P * N),
// a bound computed from the histogram itself (ErrorBound()). Scores spread over [0, 1] give a
// bound near 1/(2B) (3e-5 at the default); scores piled into one bucket give a loose one, which
// ErrorBound() then reports: raise the bucket count or map scores (e.g. by a sigmoid) to spread
// them. Exact ties land in the same bucket and count 1/2 in both computations.
//
// Thread-safety: none; one object per thread. SumOverRanks is a collective: every rank calls it,
// in the same order relative to the communicator's other operations.
#ifndef PADDLE_PARALLEL_METRICS_H_
#define PADDLE_PARALLEL_METRICS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "paddle/collective/communicator.h"
#include "paddle/core/tensor.h"

namespace paddle {

// Binary-classification AUC from per-label score histograms (Note [Histogram AUC]).
class AucHistogram {
 public:
  static constexpr int64_t kDefaultBuckets = int64_t{1} << 14;
  static constexpr int64_t kMaxBuckets = int64_t{1} << 26;

  // kInvalidArgument unless 1 <= buckets <= kMaxBuckets.
  static absl::StatusOr<AucHistogram> Create(int64_t buckets = kDefaultBuckets);

  // Counts sample i with score scores[i] (in [0, 1]) and label labels[i] (0 or 1). Checks every
  // sample first: a size mismatch, a score outside [0, 1] or NaN, or another label is
  // kInvalidArgument naming the index and value, and then nothing is counted.
  absl::Status Add(absl::Span<const float> scores, absl::Span<const int64_t> labels);

  // Collective: replaces this rank's counts by the sum over every rank of `comm`. Ranks that
  // built histograms with different bucket counts all get kInvalidArgument naming both counts.
  absl::Status SumOverRanks(Communicator& comm, CallOptions call = {});

  // The AUC of the counted samples; kFailedPrecondition naming the class counts when either class
  // has no sample (AUC is undefined for one class).
  absl::StatusOr<double> Auc() const;
  // The largest possible |Auc() - exact AUC| for these samples (Note [Histogram AUC]); 0 when a
  // class is empty.
  double ErrorBound() const;

  int64_t buckets() const { return static_cast<int64_t>(positive_.size()); }
  int64_t positives() const { return positives_; }
  int64_t negatives() const { return negatives_; }

 private:
  explicit AucHistogram(int64_t buckets) : positive_(buckets, 0), negative_(buckets, 0) {}

  std::vector<int64_t> positive_;  // samples with label 1 per score bucket
  std::vector<int64_t> negative_;
  int64_t positives_ = 0;
  int64_t negatives_ = 0;
};

// Sample counts, correct predictions and the loss summed over samples, for accuracy and mean
// loss over every sample of every rank. Sums are float64 (counts exact below 2^53).
class ClassificationTotals {
 public:
  // Adds `samples` samples of which `correct` were right, whose losses sum to `loss_sum`.
  // kInvalidArgument unless 0 <= correct <= samples and loss_sum is finite.
  absl::Status Add(int64_t samples, int64_t correct, double loss_sum);
  // Adds a batch from its logits [n, classes] (float32, CPU) and int64 labels [n] in
  // [0, classes): a sample is correct when its first largest logit is its label; its loss is the
  // softmax cross-entropy, computed in float64.
  absl::Status AddLogits(const Tensor& logits, const Tensor& labels);

  // Collective: replaces this rank's sums by the sums over every rank of `comm`.
  absl::Status SumOverRanks(Communicator& comm, CallOptions call = {});

  int64_t samples() const { return static_cast<int64_t>(samples_); }
  int64_t correct() const { return static_cast<int64_t>(correct_); }
  // kFailedPrecondition when no sample was counted.
  absl::StatusOr<double> Accuracy() const;
  absl::StatusOr<double> MeanLoss() const;

 private:
  double samples_ = 0;
  double correct_ = 0;
  double loss_sum_ = 0;
};

}  // namespace paddle

#endif  // PADDLE_PARALLEL_METRICS_H_
