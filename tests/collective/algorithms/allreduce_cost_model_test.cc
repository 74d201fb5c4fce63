// The C++ cost model of the flat allreduces against closed forms, its tuning file's errors, and
// the selector following it (Note [Tuned allreduce]). Its agreement with the Python simulator is
// tests/tools/tuning_agreement_test.py.
#include "paddle/collective/algorithms/allreduce_cost_model.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "paddle/collective/algorithms/algorithm_selector.h"

namespace paddle {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int64_t kPiece = int64_t{256} << 10;
const LinkCost kLink{/*alpha_us=*/20, /*overhead_us=*/3, /*beta_us_per_byte=*/0.001,
                     /*gamma_us_per_byte=*/0.0005};

TEST(AllreduceCostModelTest, RingIsTwoTimesNMinusOneStepsOfABlock) {
  for (int n : {2, 3, 4, 7, 8}) {
    for (double bytes : {4096.0, 3.0 * (1 << 20), 64.0 * (1 << 20)}) {
      const double block = bytes / n;
      const double pieces = std::max(1.0, std::ceil(std::ceil(block) / kPiece));
      const double step =
          kLink.alpha_us + kLink.overhead_us * (pieces - 1) + kLink.beta_us_per_byte * block;
      const double expected = (n - 1) * (step + kLink.gamma_us_per_byte * block) + (n - 1) * step;
      EXPECT_NEAR(PredictAllreduceUs(ModelAlgorithm::kRing, kLink, n, bytes, kPiece), expected,
                  1e-9 * expected)
          << n << " ranks, " << bytes;
    }
  }
}

TEST(AllreduceCostModelTest, TreeAndHalvingDoublingFollowTheirRounds) {
  // One segment, 4 ranks: recursive doubling is 2 rounds on the whole buffer.
  const double n = 64 << 10;
  EXPECT_DOUBLE_EQ(PredictAllreduceUs(ModelAlgorithm::kTree, kLink, 4, n, kPiece),
                   2 * (kLink.alpha_us + (kLink.beta_us_per_byte + kLink.gamma_us_per_byte) * n));
  // 3 ranks fold one rank in and out around a 2-rank exchange: 3 steps on the whole buffer.
  EXPECT_DOUBLE_EQ(
      PredictAllreduceUs(ModelAlgorithm::kTree, kLink, 3, n, kPiece),
      3 * kLink.alpha_us + 3 * kLink.beta_us_per_byte * n + 2 * kLink.gamma_us_per_byte * n);
  // Two and a half segments: 2 full + 1 partial, each 1 round at 2 ranks.
  const double big = 2.5 * kPiece;
  EXPECT_DOUBLE_EQ(PredictAllreduceUs(ModelAlgorithm::kTree, kLink, 2, big, kPiece),
                   3 * kLink.alpha_us + (kLink.beta_us_per_byte + kLink.gamma_us_per_byte) * big);
  // Halving-doubling at 4 ranks, one segment (<= 4 pieces): N/2, N/4 halving, N/4, N/2 doubling.
  const double m = 1 << 20;
  EXPECT_DOUBLE_EQ(
      PredictAllreduceUs(ModelAlgorithm::kHalvingDoubling, kLink, 4, m, kPiece),
      4 * kLink.alpha_us + kLink.beta_us_per_byte * 1.5 * m + kLink.gamma_us_per_byte * 0.75 * m);
  EXPECT_EQ(PredictAllreduceUs(ModelAlgorithm::kRing, kLink, 1, m, kPiece), 0);
  EXPECT_EQ(PredictAllreduceUs(ModelAlgorithm::kTree, kLink, 4, 0, kPiece), 0);
}

TEST(AllreduceCostModelTest, RendezvousAndCacheKneeTerms) {
  // Messages over eager_bytes pay rendezvous_us each and rendezvous_beta per byte instead of
  // beta; a 2-rank tree step of one segment is one message of the whole buffer.
  LinkCost link = kLink;
  link.eager_bytes = 64 << 10;
  link.rendezvous_us = 7;
  link.rendezvous_beta_us_per_byte = 0.0002;
  const double small = 64 << 10, large = 128 << 10;
  EXPECT_DOUBLE_EQ(PredictAllreduceUs(ModelAlgorithm::kTree, link, 2, small, kPiece),
                   PredictAllreduceUs(ModelAlgorithm::kTree, kLink, 2, small, kPiece));
  EXPECT_DOUBLE_EQ(PredictAllreduceUs(ModelAlgorithm::kTree, link, 2, large, kPiece),
                   link.alpha_us + link.rendezvous_us +
                       (link.rendezvous_beta_us_per_byte + link.gamma_us_per_byte) * large);
  // The ring's pieces: each 256 KiB piece of a 1 MiB block is one rendezvous.
  const double ring_bytes = 2.0 * (1 << 20);
  const double block = ring_bytes / 2, pieces = 4;
  const double step = link.alpha_us + link.overhead_us * (pieces - 1) +
                      link.rendezvous_us * pieces + link.rendezvous_beta_us_per_byte * block;
  EXPECT_DOUBLE_EQ(PredictAllreduceUs(ModelAlgorithm::kRing, link, 2, ring_bytes, kPiece),
                   2 * step + link.gamma_us_per_byte * block);
  // Beyond cache_bytes the share 1 - K/N of the bytes moved and reduced costs memory_us more.
  LinkCost knee = kLink;
  knee.cache_bytes = 1 << 20;
  knee.memory_us_per_byte = 0.01;
  const double n = 4 << 20;
  EXPECT_DOUBLE_EQ(PredictAllreduceUs(ModelAlgorithm::kTree, knee, 4, 1 << 20, kPiece),
                   PredictAllreduceUs(ModelAlgorithm::kTree, kLink, 4, 1 << 20, kPiece));
  const double moved_and_reduced = 2 * 2 * n;  // 2 rounds, each sends and reduces N
  EXPECT_DOUBLE_EQ(PredictAllreduceUs(ModelAlgorithm::kTree, knee, 4, n, kPiece),
                   PredictAllreduceUs(ModelAlgorithm::kTree, kLink, 4, n, kPiece) +
                       knee.memory_us_per_byte * 0.75 * moved_and_reduced);
}

TEST(AllreduceCostModelTest, SmallPagesCostRendezvousBytesBelowTheHugePageSize) {
  // Note [Small pages]: in an allreduce under huge_page_bytes each rendezvous byte costs
  // small_page_us more; eager bytes and larger allreduces do not.
  LinkCost link = kLink;
  link.eager_bytes = 64 << 10;
  link.rendezvous_us = 7;
  link.rendezvous_beta_us_per_byte = 0.0002;
  LinkCost paged = link;
  paged.small_page_us_per_byte = 0.0001;
  paged.huge_page_bytes = 2 << 20;
  const double one_mib = 1 << 20;
  // 2-rank tree: 4 segments of 256 KiB, each one rendezvous message.
  EXPECT_DOUBLE_EQ(PredictAllreduceUs(ModelAlgorithm::kTree, paged, 2, one_mib, kPiece),
                   PredictAllreduceUs(ModelAlgorithm::kTree, link, 2, one_mib, kPiece) +
                       paged.small_page_us_per_byte * one_mib);
  for (double bytes : {double{32 << 10}, double{2 << 20}, double{8 << 20}}) {
    EXPECT_DOUBLE_EQ(PredictAllreduceUs(ModelAlgorithm::kRing, paged, 2, bytes, kPiece),
                     PredictAllreduceUs(ModelAlgorithm::kRing, link, 2, bytes, kPiece))
        << bytes;
  }
}

TEST(AllreduceCostModelTest, ChoiceIsTheFastestAndTiesGoToTheTree) {
  // All latency: the tree on one segment (fewest rounds), the ring on many (its 2(n-1) steps
  // carry any number of pieces); all bandwidth with a slow reduction: not the tree.
  const LinkCost latency{100, 0, 0, 0};
  EXPECT_EQ(ModelAllreduceChoice(latency, 8, 64 << 10, kPiece), ModelAlgorithm::kTree);
  EXPECT_EQ(ModelAllreduceChoice(latency, 8, 1 << 30, kPiece), ModelAlgorithm::kRing);
  const LinkCost bandwidth{0.001, 0, 0.001, 0.01};
  EXPECT_NE(ModelAllreduceChoice(bandwidth, 8, 64 << 20, kPiece), ModelAlgorithm::kTree);
  // At n=2 and one segment, hd and the ring are the same exchange: hd, earlier in the order.
  const LinkCost no_latency{0, 0, 0.001, 0.001};
  EXPECT_EQ(ModelAllreduceChoice(no_latency, 2, 512 << 10, kPiece),
            ModelAlgorithm::kHalvingDoubling);
  const LinkCost zero{0, 0, 0, 0};
  EXPECT_EQ(ModelAllreduceChoice(zero, 4, 1 << 20, kPiece), ModelAlgorithm::kTree);
}

TEST(TuningParamsTest, ParsesAndFindsAsTheSimulatorDoes) {
  absl::StatusOr<TuningParams> params = TuningParams::Parse(
      "# comment\npaddle_tuning_params 1\n\nlink tcp@2 1 2 0.5 0.25  # trailing\n"
      "link tcp@8 3 4 0 0\nlink shm 5 6 7 8\n",
      "x.tuning");
  ASSERT_TRUE(params.ok()) << params.status();
  std::string name;
  ASSERT_NE(params->Find("tcp", 2, &name), nullptr);
  EXPECT_EQ(name, "tcp@2");
  EXPECT_EQ(params->Find("tcp", 2, &name)->beta_us_per_byte, 0.5);
  EXPECT_EQ(params->Find("shm", 4, &name)->alpha_us, 5);  // the pooled entry
  EXPECT_EQ(name, "shm");
  params->Find("tcp", 5, &name);  // nearest R; 3 from both 2 and 8 ranks: the smaller
  EXPECT_EQ(name, "tcp@2");
  params->Find("tcp", 6, &name);
  EXPECT_EQ(name, "tcp@8");
  EXPECT_EQ(params->Find("ucx", 2, &name), nullptr);
  EXPECT_FALSE(params->buckets().has_value());
  EXPECT_EQ(params->Find("shm", 2, &name)->eager_bytes, 0);  // four values: no extra terms

  // Nine values: the rendezvous and cache terms too.
  params = TuningParams::Parse("paddle_tuning_params 1\nlink shm 1 2 3 4 5 6 7 8 65536\n", "n");
  ASSERT_TRUE(params.ok()) << params.status();
  const LinkCost* shm = params->Find("shm", 2, &name);
  EXPECT_EQ(shm->memory_us_per_byte, 5);
  EXPECT_EQ(shm->rendezvous_us, 6);
  EXPECT_EQ(shm->rendezvous_beta_us_per_byte, 7);
  EXPECT_EQ(shm->cache_bytes, 8);
  EXPECT_EQ(shm->eager_bytes, 65536);
  EXPECT_EQ(shm->huge_page_bytes, 0);  // nine values: no small-page term

  // Eleven: the small-page term of Note [Small pages] as well.
  params = TuningParams::Parse(
      "paddle_tuning_params 1\nlink shm 1 2 3 4 5 6 7 8 65536 0.5 2097152\n", "e");
  ASSERT_TRUE(params.ok()) << params.status();
  shm = params->Find("shm", 2, &name);
  EXPECT_EQ(shm->eager_bytes, 65536);
  EXPECT_EQ(shm->small_page_us_per_byte, 0.5);
  EXPECT_EQ(shm->huge_page_bytes, 2097152);

  // A bucket line alone is a whole file (tools/simulate step --emit writes one).
  params = TuningParams::Parse("paddle_tuning_params 1\nbucket 1048576 8388608 # best\n", "b");
  ASSERT_TRUE(params.ok()) << params.status();
  ASSERT_TRUE(params->buckets().has_value());
  EXPECT_EQ(params->buckets()->first_bytes, 1 << 20);
  EXPECT_EQ(params->buckets()->bytes, 8 << 20);
  EXPECT_TRUE(params->links().empty());
}

TEST(TuningParamsTest, MalformedFilesNameTheFileLineAndField) {
  struct Case {
    const char* text;
    const char* error;
  };
  const Case cases[] = {
      {"", "bad.tuning: empty"},
      {"paddle_tuning_params 2\n", "bad.tuning:1: expected \"paddle_tuning_params 1\""},
      {"paddle_tuning_params 1\n", "bad.tuning: no \"link\" or \"bucket\" lines"},
      {"paddle_tuning_params 1\nbucket 4096\n", "bad.tuning:2: \"bucket\" has 1 values"},
      {"paddle_tuning_params 1\nbucket 0 4096\n", "bucket FIRST_BYTES is \"0\""},
      {"paddle_tuning_params 1\nbucket 4096 2147483648\n", "bucket BUCKET_BYTES is"},
      {"paddle_tuning_params 1\nbucket 1 2\nbucket 1 2\n", "bad.tuning:3: a second"},
      {"paddle_tuning_params 1\nlinks tcp 1 2 3 4\n", "bad.tuning:2: unknown keyword \"links\""},
      {"paddle_tuning_params 1\nlink tcp@x 1 2 3 4\n", "bad.tuning:2: link name \"tcp@x\""},
      {"paddle_tuning_params 1\nlink tcp 1 2 3\n", "; gamma_us_per_byte is missing"},
      {"paddle_tuning_params 1\nlink tcp 1 2 3 4 5\n", "link tcp has 5 values; expected 4"},
      {"paddle_tuning_params 1\nlink shm 1 2 3 4 5 6 7 8 -9\n", "eager_bytes is \"-9\""},
      {"paddle_tuning_params 1\nlink shm 1 2 3 4 5 6 7 8 9 10\n",
       "has 10 values; expected 4 (alpha_us overhead_us beta_us_per_byte gamma_us_per_byte), 9"},
      {"paddle_tuning_params 1\nlink shm 1 2 3 4 5 6 7 8 9 10 -11\n", "huge_page_bytes is \"-11\""},
      {"paddle_tuning_params 1\n\nlink tcp 1 2 fast 4\n",
       "bad.tuning:3: link tcp: beta_us_per_byte is \"fast\""},
      {"paddle_tuning_params 1\nlink tcp -1 2 3 4\n", "alpha_us is \"-1\"; expected a finite"},
      {"paddle_tuning_params 1\nlink tcp 1 nan 3 4\n", "overhead_us is \"nan\""},
      {"paddle_tuning_params 1\nlink tcp 1 2 3 4\nlink tcp 1 2 3 4\n",
       "bad.tuning:3: link tcp appears twice"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<TuningParams> params = TuningParams::Parse(c.text, "bad.tuning");
    ASSERT_FALSE(params.ok()) << c.text;
    EXPECT_EQ(params.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(params.status().message(), HasSubstr(c.error)) << c.text;
  }
}

TEST(TuningParamsTest, LoadReadsTheFileAndNamesAMissingOne) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/load.tuning");
  {
    std::ofstream out(path);
    out << "paddle_tuning_params 1\nlink tcp 1 2 3 x\n";
  }
  absl::StatusOr<TuningParams> bad = TuningParams::Load(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(),
              AllOf(HasSubstr(path + ":2:"), HasSubstr("gamma_us_per_byte is \"x\"")));
  absl::StatusOr<TuningParams> missing = TuningParams::Load(path + ".absent");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(),
              AllOf(HasSubstr("cannot read the tuning file " + path + ".absent"),
                    HasSubstr("No such file")));
  std::remove(path.c_str());
}

TEST(TunedSelectorTest, FollowsTheModelUnlessForced) {
  // Costly pieces: the ring's 64 pieces a step lose to halving-doubling's segments.
  const LinkCost pieces{1, 100, 0, 0};
  AlgorithmSelector tuned(AllreduceTable::kCorePerRank, TunedAllreduce{"tcp", pieces, kPiece});
  EXPECT_EQ(tuned.ForAllreduce(int64_t{64} << 20, 4), Algorithm::kHalvingDoubling);  // table: ring
  EXPECT_EQ(AlgorithmSelector().ForAllreduce(int64_t{64} << 20, 4), Algorithm::kRing);
  const LinkCost bandwidth{0.001, 0, 0.001, 0.01};
  AlgorithmSelector other(AllreduceTable::kCorePerRank, TunedAllreduce{"tcp", bandwidth, kPiece});
  EXPECT_NE(other.ForAllreduce(4096, 4), Algorithm::kTree);  // the table: tree
  // A forced algorithm (PADDLE_ALGO) has no model.
  AlgorithmSelector forced(Algorithm::kRing);
  EXPECT_FALSE(forced.tuned().has_value());
  EXPECT_EQ(forced.ForAllreduce(4096, 4), Algorithm::kRing);
}

}  // namespace
}  // namespace paddle
