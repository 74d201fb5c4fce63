// The native communicator's automatic piece and slot sizes (Note [Sizes when ranks outnumber
// cores] in paddle/collective/backends/native/communicator_settings.cc): the rule, and rank 0's
// choice reaching every rank through the store.
#include "paddle/collective/backends/native/communicator_settings.h"

#include <memory>
#include <thread>
#include <vector>

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

TEST(AutomaticSizesTest, DefaultsWithACorePerRank) {
  for (int ranks : {1, 2, 4, 8}) {
    const BlockSizes sizes = AutomaticSizes(ranks, /*cores=*/8);
    EXPECT_EQ(sizes.piece_bytes, kDefaultPieceBytes) << ranks;
    EXPECT_EQ(sizes.slot_bytes, kDefaultSlotBytes) << ranks;
  }
}

TEST(AutomaticSizesTest, FewerLargerRoundsWhenRanksOutnumberCores) {
  // Slots of 8 MiB / ranks, between 512 KiB and 2 MiB, in whole pages.
  const struct {
    int ranks;
    size_t slot_bytes;
  } cases[] = {{3, 2 * kMiB}, {4, 2 * kMiB},    {5, 1636 * kKiB},
               {8, 1 * kMiB}, {16, 512 * kKiB}, {64, 512 * kKiB}};
  for (const auto& c : cases) {
    const BlockSizes sizes = AutomaticSizes(c.ranks, /*cores=*/2);
    EXPECT_EQ(sizes.piece_bytes, kOversubscribedPieceBytes) << c.ranks;
    EXPECT_EQ(sizes.slot_bytes, c.slot_bytes) << c.ranks;
    EXPECT_EQ(sizes.slot_bytes % 4096, 0u) << c.ranks;
  }
}

TEST(AgreeOnSizesTest, EveryRankTakesRankZerosChoice) {
  auto store = std::make_shared<HashStore>();
  constexpr int kWorld = 3;
  std::vector<Settings> settings(kWorld);
  std::vector<absl::Status> statuses(kWorld);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < kWorld; ++rank) {
    threads.emplace_back([&, rank] {
      // Only rank 0's local size counts: it decides for everyone.
      statuses[rank] =
          AgreeOnSizes(store.get(), "g/sizes", rank, kWorld,
                       /*local_size=*/rank == 0 ? 64 : 1, absl::Seconds(30), &settings[rank]);
    });
  }
  for (std::thread& t : threads) t.join();
  const BlockSizes expected = AutomaticSizes(64, CoresAvailable());
  for (int rank = 0; rank < kWorld; ++rank) {
    ASSERT_TRUE(statuses[rank].ok()) << rank << ": " << statuses[rank];
    EXPECT_EQ(settings[rank].piece_bytes, expected.piece_bytes) << rank;
    EXPECT_EQ(settings[rank].slot_bytes, expected.slot_bytes) << rank;
  }
}

TEST(AgreeOnSizesTest, SizesSetByTheUserStay) {
  Settings settings;
  settings.piece_bytes = 4096;
  settings.slot_bytes = 8192;
  ASSERT_TRUE(AgreeOnSizes(nullptr, "unused", 1, 4, 2, absl::Seconds(1), &settings).ok());
  EXPECT_EQ(settings.piece_bytes, 4096u);
  EXPECT_EQ(settings.slot_bytes, 8192u);

  auto store = std::make_shared<HashStore>();
  Settings rank0;
  rank0.piece_bytes = 4096;  // the slot stays automatic
  ASSERT_TRUE(AgreeOnSizes(store.get(), "k", 0, 2, 2, absl::Seconds(1), &rank0).ok());
  EXPECT_EQ(rank0.piece_bytes, 4096u);
  EXPECT_EQ(rank0.slot_bytes, AutomaticSizes(2, CoresAvailable()).slot_bytes);
}

// A rank left on "auto" while rank 0 has sizes from the user (a mismatched environment) still
// finds the key and takes rank 0's sizes; the settings check then names the difference.
TEST(AgreeOnSizesTest, RankZeroPublishesSizesTheUserSet) {
  auto store = std::make_shared<HashStore>();
  Settings rank0;
  rank0.piece_bytes = 8192;
  rank0.slot_bytes = 16384;
  ASSERT_TRUE(AgreeOnSizes(store.get(), "k", 0, 2, 2, absl::Seconds(1), &rank0).ok());
  Settings rank1;
  ASSERT_TRUE(AgreeOnSizes(store.get(), "k", 1, 2, 2, absl::Seconds(1), &rank1).ok());
  EXPECT_EQ(rank1.piece_bytes, 8192u);
  EXPECT_EQ(rank1.slot_bytes, 16384u);
}

TEST(AgreeOnSizesTest, ErrorsNameTheKey) {
  auto store = std::make_shared<HashStore>();
  Settings settings;
  absl::Status missing =
      AgreeOnSizes(store.get(), "g/sizes", 1, 2, 2, absl::Milliseconds(50), &settings);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.message(), HasSubstr("reading rank 0's piece and slot sizes"));

  ASSERT_TRUE(store->Set("g/sizes", "piece_bytes=lots").ok());
  absl::Status garbled =
      AgreeOnSizes(store.get(), "g/sizes", 1, 2, 2, absl::Milliseconds(50), &settings);
  ASSERT_FALSE(garbled.ok());
  EXPECT_THAT(garbled.message(), HasSubstr("\"piece_bytes=lots\" under g/sizes"));
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
