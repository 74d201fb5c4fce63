// StoreBarrier over an in-process store, ranks as threads: nobody leaves early, a timeout names
// exactly the missing ranks, an abort reaches every waiting rank.
#include "paddle/collective/rendezvous/store_barrier.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "paddle/collective/store/hash_store.h"

namespace paddle {
namespace {

using ::testing::HasSubstr;

const absl::Duration kLong = absl::Seconds(60);

TEST(StoreBarrierTest, NoRankLeavesBeforeAllArrive) {
  for (int world_size : {1, 2, 7, 16}) {
    HashStore store;
    std::atomic<int> arrived{0};
    std::vector<int> seen(world_size, -1);
    std::vector<absl::Status> status(world_size);
    std::vector<std::thread> threads;
    for (int r = 0; r < world_size; ++r) {
      threads.emplace_back([&, r] {
        ++arrived;
        status[r] = StoreBarrier(store, "b", r, world_size, kLong);
        seen[r] = arrived.load();
      });
    }
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < world_size; ++r) {
      EXPECT_TRUE(status[r].ok()) << status[r];
      EXPECT_EQ(seen[r], world_size) << "rank " << r << " left before everyone arrived";
    }
  }
}

TEST(StoreBarrierTest, TimeoutNamesExactlyTheMissingRanks) {
  HashStore store;
  constexpr int kWorld = 5;
  std::vector<absl::Status> status(kWorld);
  std::vector<std::thread> threads;
  for (int r : {0, 2, 4}) {
    threads.emplace_back(
        [&, r] { status[r] = StoreBarrier(store, "b", r, kWorld, absl::Milliseconds(300)); });
  }
  for (std::thread& t : threads) t.join();
  for (int r : {0, 2, 4}) {
    ASSERT_EQ(status[r].code(), absl::StatusCode::kDeadlineExceeded) << status[r];
    std::string message(status[r].message());
    EXPECT_THAT(message, HasSubstr("2 of 5 rank(s) that never arrived: [1, 3]"));
    EXPECT_THAT(message, HasSubstr(absl::StrCat("rank ", r, " of 5")));
    EXPECT_THAT(message, HasSubstr("barrier 'b'"));
    EXPECT_THAT(message, HasSubstr("HashStore"));
  }
}

TEST(StoreBarrierTest, AbortReachesRankZeroWhileItWaitsForArrivals) {
  HashStore store;
  absl::Status rank0;
  std::thread waiter([&] { rank0 = StoreBarrier(store, "b", 0, 3, kLong); });
  ASSERT_TRUE(AbortStoreBarrier(store, "b", 1, "bad input").ok());
  waiter.join();
  EXPECT_EQ(rank0.code(), absl::StatusCode::kAborted) << rank0;
  EXPECT_THAT(std::string(rank0.message()), HasSubstr("aborted by rank 1: bad input"));
}

TEST(StoreBarrierTest, AbortReachesWaitingAndLateRanks) {
  HashStore store;
  absl::Status waiting;
  std::thread waiter([&] { waiting = StoreBarrier(store, "b", 1, 3, kLong); });
  ASSERT_TRUE(AbortStoreBarrier(store, "b", 2, "rank 2 has a bad config").ok());
  waiter.join();
  EXPECT_EQ(waiting.code(), absl::StatusCode::kAborted) << waiting;
  EXPECT_THAT(std::string(waiting.message()),
              HasSubstr("aborted by rank 2: rank 2 has a bad config"));
  absl::Status late = StoreBarrier(store, "b", 0, 3, kLong);
  EXPECT_EQ(late.code(), absl::StatusCode::kAborted) << late;
}

TEST(StoreBarrierTest, AbortAfterCompletionChangesNothing) {
  HashStore store;
  ASSERT_TRUE(StoreBarrier(store, "b", 0, 1, kLong).ok());
  ASSERT_TRUE(AbortStoreBarrier(store, "b", 0, "too late").ok());
  EXPECT_EQ(store.Get("b/done", kLong).value_or("?"), "ok");
}

TEST(StoreBarrierTest, ArrivingTwiceIsAnError) {
  HashStore store;
  ASSERT_TRUE(StoreBarrier(store, "b", 0, 1, kLong).ok());
  absl::Status again = StoreBarrier(store, "b", 0, 1, kLong);
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition) << again;
  EXPECT_THAT(std::string(again.message()), HasSubstr("rank 0 arrived twice"));
}

TEST(StoreBarrierTest, RankOutOfRangeIsInvalidArgument) {
  HashStore store;
  EXPECT_EQ(StoreBarrier(store, "b", 3, 3, kLong).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StoreBarrier(store, "b", 0, 0, kLong).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace paddle
