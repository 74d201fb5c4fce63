// ShmSignal waits and the adaptive spin (Note [Adaptive spin] in shm_signal.cc), with threads
// standing in for processes: the signal lives in ordinary memory here.
#include "paddle/collective/transport/shm/shm_signal.h"

#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace paddle {
namespace {

TEST(ShmSpinHistoryTest, SpinsUntilSpinsStopPayingThenOnlyProbes) {
  ShmSpinHistory history;
  EXPECT_TRUE(history.ShouldSpin());
  for (int i = 0; i < 8; ++i) history.Record(false);  // 16 - 2 x 8 = 0
  int spins = 0;
  for (int i = 0; i < 4 * ShmSpinHistory::kProbeEvery; ++i) spins += history.ShouldSpin();
  EXPECT_EQ(spins, 4);  // one probe in kProbeEvery
  for (int i = 0; i < 8; ++i) history.Record(true);
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(history.ShouldSpin());
}

TEST(ShmSpinHistoryTest, MostlySuccessfulSpinsKeepSpinning) {
  ShmSpinHistory history;
  for (int i = 0; i < 100; ++i) {
    history.Record(i % 4 != 0);  // +3 -2 per four waits
    EXPECT_TRUE(history.ShouldSpin()) << i;
  }
}

TEST(WaitSignalTest, WaitsForAPostFromAnotherThreadWithOrWithoutHistory) {
  for (bool with_history : {false, true}) {
    ShmSignal signal{};
    ShmSpinHistory history;
    ShmWaitOptions options;
    options.spin = absl::Microseconds(20);
    if (with_history) options.history = &history;
    std::thread poster([&] {
      for (uint32_t v = 1; v <= 200; ++v) signal.Post(v);
    });
    for (uint32_t target = 1; target <= 200; target += 7) {
      ASSERT_TRUE(WaitSignal(signal, target, Deadline::After(absl::Seconds(30)), options).ok());
      EXPECT_TRUE(SignalReached(signal.Load(), target));
    }
    poster.join();
  }
}

TEST(WaitSignalTest, ADeadlineThatPassesIsReported) {
  ShmSignal signal{};
  ShmWaitOptions options;
  options.spin = absl::Microseconds(5);
  const absl::Status s = WaitSignal(signal, 1, Deadline::After(absl::Milliseconds(20)), options);
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
}

}  // namespace
}  // namespace paddle
