// Tests of the global metrics (paddle/parallel/metrics.h): histogram AUC against the exact AUC by
// sorting every rank's predictions (with ties, uneven and empty shards, one-class groups), its
// error bound, bad inputs, and sample-weighted accuracy and loss, on 1-4 ranks as threads.
#include "paddle/parallel/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "paddle/core/status.h"
#include "paddle/core/tensor.h"
#include "tests/collective/communicator_testing.h"

namespace paddle {
namespace {

using commtest::CommGroup;

struct Samples {
  std::vector<float> scores;
  std::vector<int64_t> labels;
};

uint64_t Mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Rank `rank`'s samples: 37 + 101 * rank of them (rank 2 of 4 has none), labels from (seed, rank,
// i), scores a noisy function of the label; with `grid` > 0 scores are multiples of 1/grid, so
// many are exactly tied.
Samples MakeSamples(uint64_t seed, int rank, int world, int grid) {
  Samples s;
  const int64_t n = (world == 4 && rank == 2) ? 0 : 37 + 101 * rank;
  for (int64_t i = 0; i < n; ++i) {
    uint64_t h = Mix(seed * 1000003 + rank * 7919 + i);
    int64_t label = static_cast<int64_t>(h & 1);
    double u = static_cast<double>((h >> 11) & 0xfffff) / 0x100000;  // [0, 1)
    double score =
        0.35 * u + (label ? 0.4 : 0.25) + 0.25 * static_cast<double>((h >> 40) & 0xff) / 255;
    score = std::min(score, 1.0);
    if (grid > 0) score = std::floor(score * grid) / grid;
    s.scores.push_back(static_cast<float>(score));
    s.labels.push_back(label);
  }
  return s;
}

// AUC by sorting: the Mann-Whitney statistic with mid-ranks for ties.
double ExactAuc(const Samples& s) {
  const size_t n = s.scores.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return s.scores[a] < s.scores[b]; });
  double positive_rank_sum = 0;
  int64_t positives = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && s.scores[order[j]] == s.scores[order[i]]) ++j;
    double mid_rank = (i + 1 + j) / 2.0;  // ranks i+1..j share their mean
    for (size_t k = i; k < j; ++k) {
      if (s.labels[order[k]] == 1) positive_rank_sum += mid_rank, ++positives;
    }
    i = j;
  }
  const double negatives = static_cast<double>(n) - positives;
  return (positive_rank_sum - positives * (positives + 1) / 2.0) / (positives * negatives);
}

std::unique_ptr<CommGroup> MakeGroup(int world) {
  commtest::GroupOptions o;
  o.world_size = world;
  return CommGroup::Create(o).value();
}

class AucAcrossRanksTest : public ::testing::TestWithParam<int> {};

TEST_P(AucAcrossRanksTest, MatchesExactAucWithinItsBound) {
  const int world = GetParam();
  std::unique_ptr<CommGroup> group = MakeGroup(world);
  for (int grid : {0, 64, 1000}) {
    for (int64_t buckets :
         {int64_t{1}, int64_t{10}, int64_t{1000}, AucHistogram::kDefaultBuckets}) {
      Samples all;
      for (int r = 0; r < world; ++r) {
        Samples s = MakeSamples(grid + 5, r, world, grid);
        all.scores.insert(all.scores.end(), s.scores.begin(), s.scores.end());
        all.labels.insert(all.labels.end(), s.labels.begin(), s.labels.end());
      }
      const double exact = ExactAuc(all);
      std::vector<double> auc(world), bound(world);
      std::vector<absl::Status> st = group->Run([&](int rank, Communicator& comm) -> absl::Status {
        ASSIGN_OR_RETURN(AucHistogram h, AucHistogram::Create(buckets));
        Samples s = MakeSamples(grid + 5, rank, world, grid);
        RETURN_IF_ERROR(h.Add(s.scores, s.labels));
        RETURN_IF_ERROR(h.SumOverRanks(comm));
        ASSIGN_OR_RETURN(auc[rank], h.Auc());
        bound[rank] = h.ErrorBound();
        if (h.positives() + h.negatives() != static_cast<int64_t>(all.scores.size())) {
          return absl::InternalError("global sample count differs");
        }
        return absl::OkStatus();
      });
      ASSERT_TRUE(commtest::AllOk(st)) << commtest::DescribeFailures(st);
      SCOPED_TRACE(testing::Message() << "world " << world << " grid " << grid << " buckets "
                                      << buckets << " exact " << exact);
      for (int r = 0; r < world; ++r) {
        EXPECT_EQ(auc[r], auc[0]);  // every rank reports the same figure
        EXPECT_EQ(bound[r], bound[0]);
      }
      EXPECT_LE(std::abs(auc[0] - exact), bound[0] + 1e-12);
      if (buckets == 1) {
        EXPECT_EQ(auc[0], 0.5);
        EXPECT_EQ(bound[0], 0.5);
      }
      // Scores on a 1/64 grid fall in distinct buckets of a fine histogram: only exact ties
      // share one, so the histogram is exact although its bound is not zero.
      if (grid == 64 && buckets == AucHistogram::kDefaultBuckets) {
        EXPECT_NEAR(auc[0], exact, 1e-12);
        EXPECT_GT(bound[0], 0);
      }
      if (grid == 0 && buckets == AucHistogram::kDefaultBuckets) EXPECT_LT(bound[0], 1e-3);
      EXPECT_GT(exact, 0.6);  // the data separate the classes: the comparison means something
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, AucAcrossRanksTest, ::testing::Values(1, 2, 3, 4));

TEST(AucHistogramTest, ScoresOfOneAndZeroAndKnownSmallCases) {
  AucHistogram h = AucHistogram::Create(4).value();
  // Positives at 1.0 and 0.5, negatives at 0.0 and 0.5: pairs (1,0)=1 (1,.5)=1 (.5,0)=1
  // (.5,.5)=1/2, so AUC = 3.5/4, and the bound is 1/2 * 1 / 4.
  ASSERT_TRUE(h.Add({1.0f, 0.5f, 0.0f, 0.5f}, {1, 1, 0, 0}).ok());
  EXPECT_EQ(h.Auc().value(), 0.875);
  EXPECT_EQ(h.ErrorBound(), 0.125);
  AucHistogram reversed = AucHistogram::Create(4).value();
  ASSERT_TRUE(reversed.Add({0.0f, 0.99f}, {1, 0}).ok());
  EXPECT_EQ(reversed.Auc().value(), 0.0);
  EXPECT_EQ(reversed.ErrorBound(), 0.0);
}

TEST(AucHistogramTest, OneClassIsAClearErrorEvenAfterSumming) {
  std::unique_ptr<CommGroup> group = MakeGroup(2);
  std::vector<absl::Status> st = group->Run([&](int rank, Communicator& comm) -> absl::Status {
    AucHistogram only_positive = AucHistogram::Create().value();
    RETURN_IF_ERROR(only_positive.Add({0.2f, 0.9f}, {1, 1}));
    RETURN_IF_ERROR(only_positive.SumOverRanks(comm));
    absl::StatusOr<double> auc = only_positive.Auc();
    if (auc.status().code() != absl::StatusCode::kFailedPrecondition ||
        auc.status().message().find("4 positive and 0 negative") == std::string::npos) {
      return absl::InternalError(absl::StrCat("one class: got ", auc.status().ToString()));
    }
    if (only_positive.ErrorBound() != 0) return absl::InternalError("bound of one class");
    // Each rank alone has one class, the group has both: the global AUC is defined.
    AucHistogram split = AucHistogram::Create().value();
    if (split.Auc().ok()) return absl::InternalError("AUC of nothing");
    RETURN_IF_ERROR(split.Add({rank == 0 ? 0.8f : 0.3f}, {rank == 0 ? 1 : 0}));
    if (split.Auc().ok()) return absl::InternalError("AUC of one local class");
    RETURN_IF_ERROR(split.SumOverRanks(comm));
    ASSIGN_OR_RETURN(double value, split.Auc());
    return value == 1.0 ? absl::OkStatus() : absl::InternalError(absl::StrCat("AUC ", value));
  });
  EXPECT_TRUE(commtest::AllOk(st)) << commtest::DescribeFailures(st);
}

TEST(AucHistogramTest, BadInputsNameIndexAndValueAndCountNothing) {
  EXPECT_EQ(AucHistogram::Create(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AucHistogram::Create(AucHistogram::kMaxBuckets + 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  AucHistogram h = AucHistogram::Create(8).value();
  struct Case {
    std::vector<float> scores;
    std::vector<int64_t> labels;
    std::string want;
  };
  const std::vector<Case> cases = {
      {{0.5f, 1.5f}, {0, 1}, "score 1 is 1.5"},  {{0.5f, -0.1f}, {0, 1}, "score 1 is -0.1"},
      {{std::nanf("")}, {1}, "score 0 is nan"},  {{0.1f, 0.2f, 0.3f}, {0, 1, 2}, "label 2 is 2"},
      {{0.1f}, {0, 1}, "1 scores but 2 labels"},
  };
  for (const Case& c : cases) {
    absl::Status st = h.Add(c.scores, c.labels);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(st.message().find(c.want), std::string::npos) << st;
  }
  EXPECT_EQ(h.positives() + h.negatives(), 0);
}

TEST(AucHistogramTest, DifferentBucketCountsFailOnEveryRank) {
  std::unique_ptr<CommGroup> group = MakeGroup(3);
  std::vector<absl::Status> st = group->Run([&](int rank, Communicator& comm) -> absl::Status {
    AucHistogram h = AucHistogram::Create(rank == 1 ? 100 : 200).value();
    absl::Status sum = h.SumOverRanks(comm);
    if (sum.code() == absl::StatusCode::kInvalidArgument &&
        sum.message().find("from 100 to 200") != std::string::npos) {
      return absl::OkStatus();
    }
    return absl::InternalError(absl::StrCat("rank ", rank, ": ", sum.ToString()));
  });
  EXPECT_TRUE(commtest::AllOk(st)) << commtest::DescribeFailures(st);
}

TEST(ClassificationTotalsTest, AveragesWeighSamplesNotRanks) {
  std::unique_ptr<CommGroup> group = MakeGroup(3);
  // Rank r has 10^r samples, all right on rank 0, none on the others; loss r + 1 per sample.
  // Per-rank means would give accuracy 1/3; over samples it is 1/111.
  std::vector<double> accuracy(3), loss(3);
  std::vector<absl::Status> st = group->Run([&](int rank, Communicator& comm) -> absl::Status {
    ClassificationTotals t;
    const int64_t n = rank == 0 ? 1 : rank == 1 ? 10 : 100;
    RETURN_IF_ERROR(t.Add(n, rank == 0 ? n : 0, static_cast<double>(n * (rank + 1))));
    RETURN_IF_ERROR(t.SumOverRanks(comm));
    if (t.samples() != 111 || t.correct() != 1) return absl::InternalError("totals");
    ASSIGN_OR_RETURN(accuracy[rank], t.Accuracy());
    ASSIGN_OR_RETURN(loss[rank], t.MeanLoss());
    return absl::OkStatus();
  });
  ASSERT_TRUE(commtest::AllOk(st)) << commtest::DescribeFailures(st);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(accuracy[r], 1.0 / 111);
    EXPECT_EQ(loss[r], (1.0 + 20 + 300) / 111);
  }
}

TEST(ClassificationTotalsTest, LogitsGiveArgmaxAndCrossEntropy) {
  Tensor logits = Tensor::Empty({3, 3}, DType::kFloat32).value();
  Tensor labels = Tensor::Empty({3}, DType::kInt64).value();
  const float l[9] = {0, 0, 0,      // a three-way tie: class 0 wins, loss ln 3
                      2, 1, 0,      // right (label 0): loss ln(1 + e^-1 + e^-2)
                      0, 5, 1000};  // wrong (label 1), large logits stay finite: loss 995
  std::copy(l, l + 9, logits.data<float>());
  const int64_t y[3] = {0, 0, 1};
  std::copy(y, y + 3, labels.data<int64_t>());
  ClassificationTotals t;
  ASSERT_TRUE(t.AddLogits(logits, labels).ok());
  EXPECT_EQ(t.samples(), 3);
  EXPECT_EQ(t.correct(), 2);
  const double want = (std::log(3.0) + std::log(1 + std::exp(-1.0) + std::exp(-2.0)) + 995) / 3;
  EXPECT_NEAR(t.MeanLoss().value(), want, 1e-9);

  labels.data<int64_t>()[2] = 3;
  absl::Status st = t.AddLogits(logits, labels);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("label 2 is 3, outside [0, 3)"), std::string::npos) << st;
  EXPECT_EQ(t.samples(), 3);  // nothing added
  EXPECT_EQ(t.Add(2, 3, 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.Add(1, 0, NAN).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ClassificationTotals().Accuracy().status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace paddle
