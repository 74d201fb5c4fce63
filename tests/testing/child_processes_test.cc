// paddle/testing/child_processes: exit codes, captured output, environment, the time limit, a
// missing program, and process groups, with real /bin/sh children.
#include "paddle/testing/child_processes.h"

#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace paddle {
namespace {

ChildSpec Shell(const std::string& script) { return ChildSpec{{"/bin/sh", "-c", script}}; }

// Whether `pid` exists and is not a zombie (a killed grandchild may wait for init to reap it).
bool Alive(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] != 'Z';
}

TEST(ChildProcessesTest, ExitCodesAndOutputOfEachChild) {
  std::vector<ChildProcess> children = RunChildren(
      {Shell("echo out; echo err >&2; exit 3"), Shell("echo second"), Shell("kill -9 $$")},
      absl::Seconds(30));
  ASSERT_EQ(children.size(), 3u);
  EXPECT_EQ(children[0].exit_code, 3);
  EXPECT_EQ(children[0].Output(), "out\nerr\n");
  EXPECT_EQ(children[1].exit_code, 0);
  EXPECT_EQ(children[1].Output(), "second\n");
  EXPECT_EQ(children[2].exit_code, 128 + SIGKILL);
  for (const ChildProcess& c : children) EXPECT_FALSE(c.running());
}

TEST(ChildProcessesTest, EnvironmentIsSetOrReplacedAndTheRestInherited) {
  setenv("CHILD_PROCESSES_TEST_KEPT", "kept", 1);
  setenv("CHILD_PROCESSES_TEST_REPLACED", "old", 1);
  ChildSpec spec = Shell("echo $CHILD_PROCESSES_TEST_KEPT $CHILD_PROCESSES_TEST_REPLACED $NEW_ONE");
  spec.env = {{"CHILD_PROCESSES_TEST_REPLACED", "new"}, {"NEW_ONE", "1"}};
  std::vector<ChildProcess> children = RunChildren({spec}, absl::Seconds(30));
  EXPECT_EQ(children[0].exit_code, 0);
  EXPECT_EQ(children[0].Output(), "kept new 1\n");
}

TEST(ChildProcessesTest, StderrStaysTheParentsWhenNotCaptured) {
  ChildSpec spec = Shell("echo out; echo err >&2");
  spec.capture_stderr = false;
  std::vector<ChildProcess> children = RunChildren({spec}, absl::Seconds(30));
  EXPECT_EQ(children[0].Output(), "out\n");
}

TEST(ChildProcessesTest, ChildrenPastTheLimitAreKilledAndCounted) {
  std::vector<ChildProcess> children = StartChildren({Shell("exec sleep 60"), Shell("exit 0")});
  const pid_t sleeper = children[0].pid;
  EXPECT_TRUE(children[0].running());
  const absl::Time start = absl::Now();
  EXPECT_EQ(WaitForChildren(children, absl::Milliseconds(300)), 1);
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  EXPECT_EQ(children[0].exit_code, -1);
  EXPECT_EQ(children[1].exit_code, 0);
  EXPECT_FALSE(Alive(sleeper));  // killed and reaped
}

TEST(ChildProcessesTest, OutputCanBeReadWhileTheChildRuns) {
  std::vector<ChildProcess> children = StartChildren({Shell("echo early; exec sleep 60")});
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (children[0].Output().empty() && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(children[0].Output(), "early\n");
  EXPECT_TRUE(children[0].running());
}

TEST(ChildProcessesTest, DestroyingARunningChildKillsIt) {
  pid_t pid = -1;
  {
    std::vector<ChildProcess> children = StartChildren({Shell("exec sleep 60")});
    pid = children[0].pid;
    ASSERT_TRUE(Alive(pid));
  }
  EXPECT_FALSE(Alive(pid));
}

TEST(ChildProcessesTest, AMissingProgramExits127NamingIt) {
  std::vector<ChildProcess> children =
      RunChildren({ChildSpec{{"/nonexistent/child-processes-test"}}}, absl::Seconds(30));
  EXPECT_EQ(children[0].exit_code, 127);
  EXPECT_EQ(children[0].Output(),
            "child_processes: exec failed: /nonexistent/child-processes-test\n");
}

TEST(ChildProcessesTest, ProgramNamesAreLookedUpInPath) {
  std::vector<ChildProcess> children =
      RunChildren({ChildSpec{{"echo", "found"}}}, absl::Seconds(30));
  EXPECT_EQ(children[0].exit_code, 0);
  EXPECT_EQ(children[0].Output(), "found\n");
}

TEST(ChildProcessesTest, OwnProcessGroupTakesTheGrandchildrenWithIt) {
  // The child prints its background grandchild's pid and exits; the grandchild would sleep on.
  ChildSpec spec = Shell("sleep 60 & echo $!");
  spec.own_process_group = true;
  std::vector<ChildProcess> children = RunChildren({spec}, absl::Seconds(30));
  EXPECT_EQ(children[0].exit_code, 0);
  int grandchild = 0;
  ASSERT_TRUE(absl::SimpleAtoi(absl::StripSuffix(children[0].Output(), "\n"), &grandchild))
      << children[0].Output();
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (Alive(grandchild) && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_FALSE(Alive(grandchild));  // reparented to init and reaped there once killed
}

TEST(ChildProcessesTest, TerminateSendsSigtermThenSigkillAfterTheGrace) {
  // The second child ignores SIGTERM once its trap is set ("ready" says so).
  std::vector<ChildProcess> children =
      StartChildren({Shell("exec sleep 60"), Shell("trap '' TERM; echo ready; exec sleep 60")});
  EXPECT_FALSE(children[0].Exited());
  children[0].Terminate(absl::Seconds(20));
  EXPECT_EQ(children[0].exit_code, 128 + SIGTERM);
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (children[1].Output().empty() && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  const absl::Time start = absl::Now();
  children[1].Terminate(absl::Milliseconds(200));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(200));
  EXPECT_EQ(children[1].exit_code, -1);  // killed after the grace
  EXPECT_TRUE(children[1].Exited());
}

TEST(ChildProcessesTest, FreeLoopbackPortAndSelfPath) {
  const int port = FreeLoopbackPort();
  EXPECT_GT(port, 0);
  EXPECT_LT(port, 65536);
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof(self));
  ASSERT_GT(len, 0);
  EXPECT_EQ(SelfPath(), std::string(self, len));
}

}  // namespace
}  // namespace paddle
