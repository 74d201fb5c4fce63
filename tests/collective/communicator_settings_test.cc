// The native communicator's automatic piece and slot sizes and allreduce table (Note [Sizes when
// ranks outnumber cores] in paddle/collective/backends/native/communicator_settings.cc): the
// rule, and rank 0's choice reaching every rank through the store.
#include "paddle/collective/backends/native/communicator_settings.h"

#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "paddle/collective/store/hash_store.h"
#include "paddle/core/cpu_features.h"

namespace paddle {
namespace {

using ::testing::HasSubstr;

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * 1024;

TEST(AutomaticTuningTest, DefaultsWithACorePerRank) {
  for (int ranks : {1, 2, 4, 8}) {
    const HostTuning tuning = AutomaticTuning(ranks, /*cores=*/8);
    EXPECT_EQ(tuning.piece_bytes, kDefaultPieceBytes) << ranks;
    EXPECT_EQ(tuning.slot_bytes, kDefaultSlotBytes) << ranks;
    EXPECT_EQ(tuning.allreduce_table, AllreduceTable::kCorePerRank) << ranks;
  }
}

TEST(AutomaticTuningTest, LargerSlotsAndTheSharedCoresTableWhenRanksOutnumberCores) {
  // Slots of 8 MiB / ranks, between 512 KiB and 2 MiB, in whole pages.
  const struct {
    int ranks;
    size_t slot_bytes;
  } cases[] = {{3, 2 * kMiB}, {4, 2 * kMiB},    {5, 1636 * kKiB},
               {8, 1 * kMiB}, {16, 512 * kKiB}, {64, 512 * kKiB}};
  for (const auto& c : cases) {
    const HostTuning tuning = AutomaticTuning(c.ranks, /*cores=*/2);
    EXPECT_EQ(tuning.piece_bytes, kDefaultPieceBytes) << c.ranks;
    EXPECT_EQ(tuning.slot_bytes, c.slot_bytes) << c.ranks;
    EXPECT_EQ(tuning.slot_bytes % 4096, 0u) << c.ranks;
    EXPECT_EQ(tuning.allreduce_table, AllreduceTable::kSharedCores) << c.ranks;
  }
}

// Runs AgreeOnTuning on kWorld threads, rank 0 with `rank0_local_size` and the others with
// `others_local_size` ranks on their host.
std::vector<Settings> AgreeAcrossThreads(int rank0_local_size, int others_local_size) {
  auto store = std::make_shared<HashStore>();
  constexpr int kWorld = 3;
  std::vector<Settings> settings(kWorld);
  std::vector<absl::Status> statuses(kWorld);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kWorld; ++rank) {
    threads.emplace_back([&, rank] {
      statuses[rank] = AgreeOnTuning(store.get(), "g/sizes", rank, kWorld,
                                     rank == 0 ? rank0_local_size : others_local_size,
                                     absl::Seconds(30), &settings[rank]);
    });
  }
  for (std::thread& t : threads) t.join();
  for (int rank = 0; rank < kWorld; ++rank) {
    EXPECT_TRUE(statuses[rank].ok()) << rank << ": " << statuses[rank];
  }
  return settings;
}

TEST(AgreeOnTuningTest, EveryRankTakesRankZerosChoice) {
  // Only rank 0's local size counts: it decides for everyone, both ways round.
  for (const auto& [rank0_local, others_local] : {std::pair{64, 1}, std::pair{1, 64}}) {
    const HostTuning expected = AutomaticTuning(rank0_local, CoresAvailable());
    const std::vector<Settings> settings = AgreeAcrossThreads(rank0_local, others_local);
    for (size_t rank = 0; rank < settings.size(); ++rank) {
      EXPECT_EQ(settings[rank].piece_bytes, expected.piece_bytes) << rank;
      EXPECT_EQ(settings[rank].slot_bytes, expected.slot_bytes) << rank;
      EXPECT_EQ(settings[rank].selector.table(), expected.allreduce_table)
          << rank << " with " << rank0_local << " ranks on rank 0's host";
      EXPECT_FALSE(settings[rank].selector.forced().has_value()) << rank;
    }
  }
  // 64 ranks outnumber the cores of any machine this runs on; 1 rank does not.
  EXPECT_EQ(AgreeAcrossThreads(64, 1)[2].selector.table(), AllreduceTable::kSharedCores);
  EXPECT_EQ(AgreeAcrossThreads(1, 64)[2].selector.table(), AllreduceTable::kCorePerRank);
}

TEST(AgreeOnTuningTest, AForcedAlgorithmStaysForced) {
  auto store = std::make_shared<HashStore>();
  Settings rank0;
  rank0.selector = AlgorithmSelector(Algorithm::kRing);
  ASSERT_TRUE(AgreeOnTuning(store.get(), "k", 0, 2, 64, absl::Seconds(1), &rank0).ok());
  Settings rank1;
  rank1.selector = AlgorithmSelector(Algorithm::kRing);
  ASSERT_TRUE(AgreeOnTuning(store.get(), "k", 1, 2, 64, absl::Seconds(1), &rank1).ok());
  for (const Settings* s : {&rank0, &rank1}) {
    ASSERT_TRUE(s->selector.forced().has_value());
    EXPECT_EQ(*s->selector.forced(), Algorithm::kRing);
    EXPECT_EQ(s->selector.ForAllreduce(int64_t{64} << 20, 4), Algorithm::kRing);
  }
}

TEST(AgreeOnTuningTest, SizesSetByTheUserStay) {
  // With the sizes and the algorithm set there is nothing to read.
  Settings settings;
  settings.piece_bytes = 4096;
  settings.slot_bytes = 8192;
  settings.selector = AlgorithmSelector(Algorithm::kTree);
  ASSERT_TRUE(AgreeOnTuning(nullptr, "unused", 1, 4, 2, absl::Seconds(1), &settings).ok());
  EXPECT_EQ(settings.piece_bytes, 4096u);
  EXPECT_EQ(settings.slot_bytes, 8192u);

  auto store = std::make_shared<HashStore>();
  Settings rank0;
  rank0.piece_bytes = 4096;  // the slot stays automatic
  ASSERT_TRUE(AgreeOnTuning(store.get(), "k", 0, 2, 2, absl::Seconds(1), &rank0).ok());
  EXPECT_EQ(rank0.piece_bytes, 4096u);
  EXPECT_EQ(rank0.slot_bytes, AutomaticTuning(2, CoresAvailable()).slot_bytes);
}

// A rank left on "auto" while rank 0 has sizes from the user (a mismatched environment) still
// finds the key and takes rank 0's sizes; the settings check then names the difference.
TEST(AgreeOnTuningTest, RankZeroPublishesSizesTheUserSet) {
  auto store = std::make_shared<HashStore>();
  Settings rank0;
  rank0.piece_bytes = 8192;
  rank0.slot_bytes = 16384;
  ASSERT_TRUE(AgreeOnTuning(store.get(), "k", 0, 2, 2, absl::Seconds(1), &rank0).ok());
  Settings rank1;
  ASSERT_TRUE(AgreeOnTuning(store.get(), "k", 1, 2, 2, absl::Seconds(1), &rank1).ok());
  EXPECT_EQ(rank1.piece_bytes, 8192u);
  EXPECT_EQ(rank1.slot_bytes, 16384u);
}

TEST(AgreeOnTuningTest, ErrorsNameTheKey) {
  auto store = std::make_shared<HashStore>();
  Settings settings;
  absl::Status missing =
      AgreeOnTuning(store.get(), "g/sizes", 1, 2, 2, absl::Milliseconds(50), &settings);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.message(), HasSubstr("reading rank 0's piece and slot sizes"));

  for (const char* bad : {"piece_bytes=lots", "piece_bytes=4096 slot_bytes=8192",
                          "piece_bytes=4096 slot_bytes=8192 allreduce_table=fastest"}) {
    ASSERT_TRUE(store->Set("g/sizes", bad).ok());
    absl::Status garbled =
        AgreeOnTuning(store.get(), "g/sizes", 1, 2, 2, absl::Milliseconds(50), &settings);
    ASSERT_FALSE(garbled.ok()) << bad;
    EXPECT_THAT(garbled.message(), HasSubstr(absl::StrCat("\"", bad, "\" under g/sizes")));
  }
}

// Note [Tuned allreduce]: rank 0 picks the tuning file's link for its transport and ranks per
// host; every rank ends with the same numbers, bit for bit, and so the same choices.
TEST(AgreeOnTuningTest, RankZerosCostModelReachesEveryRank) {
  absl::StatusOr<TuningParams> params = TuningParams::Parse(
      "paddle_tuning_params 1\nlink tcp 190 150 0.0001 0.0002\n"
      "link tcp@2 182.03906064284044 196.89812687211133 0 0.00031859027056541295 "
      "1.5000000000000001e-05 7.25 2.5e-05 8388608 65536 1.2799999999999999e-07 2097152\n",
      "t.tuning");
  ASSERT_TRUE(params.ok()) << params.status();
  auto store = std::make_shared<HashStore>();
  Settings rank0;
  rank0.transport = "tcp";
  rank0.tuning_params = std::make_shared<const TuningParams>(*params);
  ASSERT_TRUE(AgreeOnTuning(store.get(), "k", 0, 2, 2, absl::Seconds(1), &rank0).ok());
  Settings rank1;  // without the file: rank 0 decides
  rank1.transport = "tcp";
  ASSERT_TRUE(AgreeOnTuning(store.get(), "k", 1, 2, 2, absl::Seconds(1), &rank1).ok());
  for (const Settings* s : {&rank0, &rank1}) {
    ASSERT_TRUE(s->selector.tuned().has_value());
    EXPECT_EQ(s->selector.tuned()->entry, "tcp@2");
    EXPECT_EQ(s->selector.tuned()->link.alpha_us, 182.03906064284044);
    EXPECT_EQ(s->selector.tuned()->link.gamma_us_per_byte, 0.00031859027056541295);
    // The rendezvous, cache and small-page terms travel too (every field of LinkCost).
    EXPECT_EQ(s->selector.tuned()->link.memory_us_per_byte, 1.5000000000000001e-05);
    EXPECT_EQ(s->selector.tuned()->link.rendezvous_us, 7.25);
    EXPECT_EQ(s->selector.tuned()->link.rendezvous_beta_us_per_byte, 2.5e-05);
    EXPECT_EQ(s->selector.tuned()->link.cache_bytes, 8388608);
    EXPECT_EQ(s->selector.tuned()->link.eager_bytes, 65536);
    EXPECT_EQ(s->selector.tuned()->link.small_page_us_per_byte, 1.2799999999999999e-07);
    EXPECT_EQ(s->selector.tuned()->link.huge_page_bytes, 2097152);
    EXPECT_EQ(s->selector.tuned()->piece_bytes, static_cast<int64_t>(rank0.piece_bytes));
  }
  for (int64_t bytes = 4096; bytes <= (int64_t{256} << 20); bytes *= 2) {
    EXPECT_EQ(rank0.selector.ForAllreduce(bytes, 2), rank1.selector.ForAllreduce(bytes, 2))
        << bytes;
  }

  // No entry for the transport: the table, on every rank.
  auto store2 = std::make_shared<HashStore>();
  Settings shm0;
  shm0.transport = "shm";
  shm0.tuning_params = rank0.tuning_params;
  ASSERT_TRUE(AgreeOnTuning(store2.get(), "k", 0, 2, 2, absl::Seconds(1), &shm0).ok());
  Settings shm1;
  ASSERT_TRUE(AgreeOnTuning(store2.get(), "k", 1, 2, 2, absl::Seconds(1), &shm1).ok());
  EXPECT_FALSE(shm0.selector.tuned().has_value());
  EXPECT_FALSE(shm1.selector.tuned().has_value());
}

TEST(SettingsTest, DescribeSaysAutoUntilAgreed) {
  Settings settings;
  settings.transport = "auto";
  EXPECT_THAT(settings.Describe(), HasSubstr("piece_bytes=auto slot_bytes=auto"));
  settings.piece_bytes = 1 << 20;
  settings.slot_bytes = 2 << 20;
  EXPECT_THAT(settings.Describe(), HasSubstr("piece_bytes=1048576 slot_bytes=2097152"));
}

}  // namespace
}  // namespace paddle
