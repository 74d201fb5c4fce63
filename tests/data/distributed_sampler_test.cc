#include "paddle/data/distributed_sampler.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "paddle/core/logging.h"

namespace paddle {
namespace data {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

DistributedSampler Make(int64_t size, int rank, int world, uint64_t seed = 7, bool shuffle = true,
                        bool drop_last = false) {
  absl::StatusOr<DistributedSampler> s =
      DistributedSampler::Create(size, rank, world, seed, shuffle, drop_last);
  PADDLE_CHECK(s.ok()) << s.status();
  return *s;
}

// The whole epoch as the ranks see it: position p of the global list is rank p % world's
// element p / world.
std::vector<int64_t> Interleave(int64_t size, int world, int64_t epoch, bool drop_last) {
  std::vector<std::vector<int64_t>> per_rank;
  for (int r = 0; r < world; ++r) {
    DistributedSampler s = Make(size, r, world, 7, true, drop_last);
    s.SetEpoch(epoch);
    per_rank.push_back(s.Indices());
    EXPECT_EQ(static_cast<int64_t>(per_rank.back().size()), s.NumSamples());
  }
  std::vector<int64_t> global;
  for (size_t i = 0; i < per_rank[0].size(); ++i) {
    for (int r = 0; r < world; ++r) global.push_back(per_rank[r][i]);
  }
  return global;
}

std::vector<int64_t> SingleProcessOrder(int64_t size, int64_t epoch) {
  DistributedSampler s = Make(size, 0, 1);
  s.SetEpoch(epoch);
  return s.Indices();
}

TEST(DistributedSamplerTest, RejectsBadArgumentsNamingThem) {
  absl::StatusOr<DistributedSampler> s = DistributedSampler::Create(10, 0, 0, 1);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("world_size 0"));
  s = DistributedSampler::Create(10, 4, 4, 1);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), AllOf(HasSubstr("rank 4"), HasSubstr("4)")));
  s = DistributedSampler::Create(10, -1, 4, 1);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("rank -1"));
  s = DistributedSampler::Create(-3, 0, 1, 1);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("dataset_size -3"));
}

TEST(DistributedSamplerDeathTest, NegativeEpochAborts) {
  DistributedSampler s = Make(10, 0, 1);
  EXPECT_DEATH(s.SetEpoch(-1), "negative epoch");
}

class SamplerCoverageTest : public ::testing::TestWithParam<std::tuple<int64_t, int>> {};

// Without drop_last every index appears across the ranks, exactly once except the padding, which
// repeats the head of the permutation; the ranks' interleaved lists are that permutation.
TEST_P(SamplerCoverageTest, EveryIndexOnceAcrossRanksPlusPadding) {
  const auto [size, world] = GetParam();
  for (int64_t epoch : {0, 1, 5}) {
    const std::vector<int64_t> global = Interleave(size, world, epoch, false);
    const int64_t per_rank = (size + world - 1) / world;
    ASSERT_EQ(static_cast<int64_t>(global.size()), per_rank * world);
    const std::vector<int64_t> perm = SingleProcessOrder(size, epoch);
    for (size_t p = 0; p < global.size(); ++p) {
      ASSERT_EQ(global[p], perm[p % size]) << "position " << p << " epoch " << epoch;
    }
    std::vector<int64_t> sorted(perm);
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < size; ++i) ASSERT_EQ(sorted[i], i);
    std::map<int64_t, int> seen;
    for (int64_t i : global) ++seen[i];
    int64_t repeats = 0;
    for (const auto& [index, count] : seen) repeats += count - 1;
    EXPECT_EQ(static_cast<int64_t>(seen.size()), size);
    EXPECT_EQ(repeats, per_rank * world - size) << "padding";
  }
}

// With drop_last the tail of the permutation is cut: no repeats, floor(size / world) per rank.
TEST_P(SamplerCoverageTest, DropLastCutsTheTail) {
  const auto [size, world] = GetParam();
  const std::vector<int64_t> global = Interleave(size, world, 3, true);
  const std::vector<int64_t> perm = SingleProcessOrder(size, 3);
  ASSERT_EQ(static_cast<int64_t>(global.size()), size / world * world);
  EXPECT_TRUE(std::equal(global.begin(), global.end(), perm.begin()));
}

INSTANTIATE_TEST_SUITE_P(
    SizesAndWorlds, SamplerCoverageTest,
    ::testing::Values(std::make_tuple(int64_t{0}, 1), std::make_tuple(int64_t{0}, 3),
                      std::make_tuple(int64_t{1}, 1), std::make_tuple(int64_t{1}, 4),
                      std::make_tuple(int64_t{5}, 8), std::make_tuple(int64_t{10}, 3),
                      std::make_tuple(int64_t{17}, 5), std::make_tuple(int64_t{64}, 8),
                      std::make_tuple(int64_t{1001}, 7), std::make_tuple(int64_t{60000}, 6)));

TEST(DistributedSamplerTest, PaddingLargerThanTheDataSetRepeatsItCyclically) {
  // 2 samples on 5 ranks: the permutation repeated, [a, b, a, b, a].
  const std::vector<int64_t> global = Interleave(2, 5, 0, false);
  const std::vector<int64_t> perm = SingleProcessOrder(2, 0);
  EXPECT_EQ(global, (std::vector<int64_t>{perm[0], perm[1], perm[0], perm[1], perm[0]}));
}

TEST(DistributedSamplerTest, NumSamplesMatchesPyTorch) {
  EXPECT_EQ(Make(10, 0, 3).NumSamples(), 4);
  EXPECT_EQ(Make(10, 0, 3).TotalSize(), 12);
  EXPECT_EQ(Make(10, 0, 3, 7, true, true).NumSamples(), 3);
  EXPECT_EQ(Make(9, 0, 3, 7, true, true).NumSamples(), 3);
  EXPECT_EQ(Make(2, 0, 5, 7, true, true).NumSamples(), 0);
  EXPECT_TRUE(Make(2, 3, 5, 7, true, true).Indices().empty());
}

TEST(DistributedSamplerTest, EpochsAndSeedsGiveNewOrdersEpochsRepeatExactly) {
  const std::vector<int64_t> e0 = SingleProcessOrder(1000, 0);
  EXPECT_EQ(SingleProcessOrder(1000, 0), e0);
  EXPECT_NE(SingleProcessOrder(1000, 1), e0);
  EXPECT_NE(SingleProcessOrder(1000, 2), SingleProcessOrder(1000, 1));
  DistributedSampler other_seed = Make(1000, 0, 1, /*seed=*/8);
  EXPECT_NE(other_seed.Indices(), e0);
  // Going back to an epoch reproduces it.
  DistributedSampler s = Make(1000, 0, 1);
  s.SetEpoch(4);
  const std::vector<int64_t> e4 = s.Indices();
  s.SetEpoch(0);
  s.SetEpoch(4);
  EXPECT_EQ(s.Indices(), e4);
}

TEST(DistributedSamplerTest, NoShuffleKeepsNaturalOrderStridedByRank) {
  DistributedSampler s = Make(10, 1, 3, 7, /*shuffle=*/false);
  s.SetEpoch(9);
  EXPECT_EQ(s.Indices(), (std::vector<int64_t>{1, 4, 7, 0}));  // 0 is padding (head repeated)
}

// All 24 orders of 4 elements, each about 1/24 of the time: the shuffle is not biased.
TEST(DistributedSamplerTest, ShuffleIsUniformOverPermutations) {
  std::map<std::vector<int64_t>, int> counts;
  const int kEpochs = 24000;
  for (int64_t e = 0; e < kEpochs; ++e) ++counts[SingleProcessOrder(4, e)];
  EXPECT_EQ(counts.size(), 24u);
  for (const auto& [order, count] : counts) {
    EXPECT_GT(count, 850);
    EXPECT_LT(count, 1150);
  }
}

TEST(DistributedSamplerTest, RestoreSkipsConsumedSamplesAndSetEpochResets) {
  for (int rank = 0; rank < 3; ++rank) {
    DistributedSampler s = Make(100, rank, 3);
    s.SetEpoch(2);
    const std::vector<int64_t> full = s.Indices();
    ASSERT_EQ(full.size(), 34u);
    for (int64_t offset : {0, 1, 13, 33, 34}) {
      ASSERT_TRUE(s.Restore({2, offset}).ok());
      EXPECT_EQ(s.state(), (DistributedSampler::State{2, offset}));
      EXPECT_EQ(s.Indices(), std::vector<int64_t>(full.begin() + offset, full.end()));
    }
    s.SetEpoch(2);
    EXPECT_EQ(s.state(), (DistributedSampler::State{2, 0}));
    EXPECT_EQ(s.Indices(), full);
  }
}

TEST(DistributedSamplerTest, RestoreRejectsStatesOutsideTheEpoch) {
  DistributedSampler s = Make(100, 0, 3);
  for (DistributedSampler::State bad :
       {DistributedSampler::State{0, 35}, DistributedSampler::State{0, -1},
        DistributedSampler::State{-2, 0}}) {
    absl::Status status = s.Restore(bad);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(status.message()),
                AllOf(HasSubstr(absl::StrCat("epoch ", bad.epoch, ", offset ", bad.offset)),
                      HasSubstr("[0, 34]"), HasSubstr("world_size 3")));
  }
  EXPECT_EQ(s.state(), (DistributedSampler::State{0, 0}));
}

// Note [Uneven shares]: with a global batch B, each step covers the next B positions of the
// permutation, rank r taking those j with j % world == r, and every rank runs the same number of
// steps of its LocalBatch() (the last one shorter).
class GlobalBatchTest : public ::testing::TestWithParam<std::tuple<int64_t, int, int64_t, bool>> {};

TEST_P(GlobalBatchTest, StepsCoverConsecutivePositionsSharedByRank) {
  const auto [size, world, batch, drop_last] = GetParam();
  std::vector<DistributedSampler> ranks;
  std::vector<std::vector<int64_t>> lists;
  for (int r = 0; r < world; ++r) {
    absl::StatusOr<DistributedSampler> s =
        DistributedSampler::Create(size, r, world, 7, true, drop_last, batch);
    ASSERT_TRUE(s.ok()) << s.status();
    s->SetEpoch(2);
    lists.push_back(s->Indices());
    ASSERT_EQ(static_cast<int64_t>(lists.back().size()), s->NumSamples());
    EXPECT_EQ(s->LocalBatch(), batch / world + (r < batch % world ? 1 : 0));
    ranks.push_back(*std::move(s));
  }
  const int64_t total = ranks[0].TotalSize();
  int64_t sum = 0;
  for (const DistributedSampler& s : ranks) sum += s.NumSamples();
  ASSERT_EQ(sum, total);
  // The steps, rebuilt from the ranks' lists cut into LocalBatch()-sized batches.
  std::vector<int64_t> steps_per_rank;
  for (int r = 0; r < world; ++r) {
    const int64_t b = ranks[r].LocalBatch();
    steps_per_rank.push_back((ranks[r].NumSamples() + b - 1) / b);
  }
  for (int r = 1; r < world; ++r) EXPECT_EQ(steps_per_rank[r], steps_per_rank[0]) << "rank " << r;
  const std::vector<int64_t> perm = SingleProcessOrder(size, 2);
  std::vector<size_t> next(world, 0);
  for (int64_t base = 0; base < total; base += batch) {
    for (int64_t p = base; p < std::min(base + batch, total); ++p) {
      const int r = static_cast<int>((p - base) % world);
      ASSERT_LT(next[r], lists[r].size());
      ASSERT_EQ(lists[r][next[r]++], perm[p % size]) << "position " << p;
    }
  }
  // Without drop_last every sample is read; with it none twice.
  std::map<int64_t, int> seen;
  for (const auto& l : lists)
    for (int64_t i : l) ++seen[i];
  EXPECT_EQ(static_cast<int64_t>(seen.size()), drop_last ? total : size);
}

INSTANTIATE_TEST_SUITE_P(Shapes, GlobalBatchTest,
                         ::testing::Values(std::make_tuple(int64_t{60000}, 3, int64_t{128}, false),
                                           std::make_tuple(int64_t{60000}, 5, int64_t{128}, false),
                                           std::make_tuple(int64_t{1000}, 7, int64_t{64}, false),
                                           std::make_tuple(int64_t{1000}, 7, int64_t{64}, true),
                                           std::make_tuple(int64_t{130}, 5, int64_t{128},
                                                           false),  // tail 2 < 5
                                           std::make_tuple(int64_t{130}, 5, int64_t{128}, true),
                                           std::make_tuple(int64_t{10}, 4, int64_t{4}, false),
                                           std::make_tuple(int64_t{100}, 1, int64_t{32}, false)));

TEST(DistributedSamplerTest, GlobalBatchAWorldDividesKeepsTheStridedOrder) {
  for (int world : {1, 2, 4}) {
    for (int r = 0; r < world; ++r) {
      absl::StatusOr<DistributedSampler> with =
          DistributedSampler::Create(1001, r, world, 3, true, false, 128);
      ASSERT_TRUE(with.ok());
      DistributedSampler without = Make(1001, r, world, 3);
      with->SetEpoch(1);
      without.SetEpoch(1);
      EXPECT_EQ(with->Indices(), without.Indices()) << "rank " << r << " of " << world;
      ASSERT_TRUE(with->Restore({1, 64}).ok());
      ASSERT_TRUE(without.Restore({1, 64}).ok());
      EXPECT_EQ(with->Indices(), without.Indices());
    }
  }
  absl::StatusOr<DistributedSampler> bad = DistributedSampler::Create(10, 0, 1, 1, true, false, -2);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("global_batch -2"));
  bad = DistributedSampler::Create(10, 0, 4, 1, true, false, 3);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()),
              AllOf(HasSubstr("global_batch 3"), HasSubstr("world_size 4")));
}

}  // namespace
}  // namespace data
}  // namespace paddle
