// ShmSignal waits and the adaptive spin (Note [Adaptive spin] in shm_signal.cc), with threads
// standing in for processes: the signal lives in ordinary memory here.
#include "paddle/collective/transport/shm/shm_signal.h"

#include <sched.h>

#include <thread>

#include "absl/status/status.h"
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

// The spin is bounded by the deadline as well as by its length: a wait never runs past its
// deadline by more than one sleep, however long the spin it was given.
TEST(WaitSignalTest, ASpinLongerThanTheDeadlineEndsAtTheDeadline) {
  ShmSignal signal{};
  ShmWaitOptions options;
  options.spin = absl::Seconds(20);
  const absl::Time start = absl::Now();
  const absl::Status s = WaitSignal(signal, 1, Deadline::After(absl::Milliseconds(30)), options);
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

// A peer that dies while a rank spins is still found by `check` once the spin runs out.
TEST(WaitSignalTest, AFailingCheckEndsAWaitThatSpunFirst) {
  ShmSignal signal{};
  ShmSpinHistory history;
  ShmWaitOptions options;
  options.spin = absl::Milliseconds(2);
  options.history = &history;
  int checks = 0;
  options.check = [&checks] {
    ++checks;
    return absl::UnavailableError("peer 1 exited");
  };
  const absl::Time start = absl::Now();
  const absl::Status s = WaitSignal(signal, 1, Deadline::After(absl::Seconds(30)), options);
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_EQ(s.message(), "peer 1 exited");
  EXPECT_EQ(checks, 1);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

// Note [Ranks glued to one CPU]: a thread moves to another CPU it may run on, and keeps the
// affinity it had. Run on fresh threads, so the test's own thread is never moved or narrowed.
TEST(MoveOffCpuTest, MovesToAnotherAllowedCpuAndRestoresTheAffinity) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  ASSERT_EQ(sched_getaffinity(0, sizeof(allowed), &allowed), 0);
  if (CPU_COUNT(&allowed) < 2)
    GTEST_SKIP() << "needs two CPUs it may run on; runs on any host with two or more, CI included";
  std::thread([&allowed] {
    for (int i = 0; i < 20; ++i) {
      const int cpu = sched_getcpu();
      const int moved = MoveOffCpu(cpu);
      EXPECT_NE(moved, cpu);
      EXPECT_TRUE(CPU_ISSET(moved, &allowed)) << moved;
      cpu_set_t after;
      CPU_ZERO(&after);
      ASSERT_EQ(sched_getaffinity(0, sizeof(after), &after), 0);
      EXPECT_TRUE(CPU_EQUAL(&after, &allowed));
    }
  }).join();
}

TEST(MoveOffCpuTest, StaysWhereItCannotMove) {
  EXPECT_EQ(MoveOffCpu(-1), -1);
  std::thread([] {
    const int cpu = sched_getcpu();
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
    EXPECT_EQ(MoveOffCpu(cpu), cpu);  // its only CPU
    cpu_set_t after;
    CPU_ZERO(&after);
    ASSERT_EQ(sched_getaffinity(0, sizeof(after), &after), 0);
    EXPECT_TRUE(CPU_EQUAL(&after, &one));
  }).join();
}

}  // namespace
}  // namespace paddle
