// Rendezvous URL parsing: every scheme, and an error naming the field for each thing that can be
// missing or garbled.
#include "paddle/collective/rendezvous/url.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace paddle {
namespace {

using ::testing::HasSubstr;

// Sets the torchrun variables for one test and clears them afterwards.
class EnvTest : public ::testing::Test {
 protected:
  void SetUp() override { Clear(); }
  void TearDown() override { Clear(); }
  static void Clear() {
    for (const char* name :
         {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK",
          "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK", "PMI_SIZE",
          "MPI_LOCALRANKID", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"}) {
      unsetenv(name);
    }
  }
  static void SetAll() {
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", "29500", 1);
    setenv("RANK", "3", 1);
    setenv("WORLD_SIZE", "8", 1);
  }
};

void ExpectInvalid(absl::string_view url, absl::string_view needle) {
  absl::StatusOr<RendezvousUrl> parsed = ParseRendezvousUrl(url);
  ASSERT_FALSE(parsed.ok()) << url;
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << parsed.status();
  EXPECT_THAT(std::string(parsed.status().message()), HasSubstr(std::string(needle))) << url;
}

TEST(RendezvousUrlTest, Tcp) {
  auto url = ParseRendezvousUrl("tcp://127.0.0.1:29500?rank=2&world_size=4");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_EQ(url->scheme, RendezvousScheme::kTcp);
  EXPECT_EQ(url->host, "127.0.0.1");
  EXPECT_EQ(url->port, 29500);
  EXPECT_EQ(url->rank, 2);
  EXPECT_EQ(url->world_size, 4);
}

TEST(RendezvousUrlTest, TcpIpv6AndFieldOrder) {
  auto url = ParseRendezvousUrl("tcp://[::1]:80/?world_size=1&rank=0");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_EQ(url->host, "::1");
  EXPECT_EQ(url->port, 80);
  EXPECT_EQ(url->rank, 0);
  EXPECT_EQ(url->world_size, 1);
}

TEST(RendezvousUrlTest, File) {
  auto url = ParseRendezvousUrl("file:///tmp/my%20job/store?rank=0&world_size=2");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_EQ(url->scheme, RendezvousScheme::kFile);
  EXPECT_EQ(url->path, "/tmp/my job/store");
  ExpectInvalid("file://tmp/store?rank=0&world_size=2", "three slashes");
  ExpectInvalid("file:///tmp/dir/?rank=0&world_size=2", "absolute path of a file");
}

TEST(RendezvousUrlTest, Etcd) {
  auto url = ParseRendezvousUrl("etcd://127.0.0.1:2379/job-42?rank=1&world_size=2");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_EQ(url->scheme, RendezvousScheme::kEtcd);
  EXPECT_EQ(url->host, "127.0.0.1");
  EXPECT_EQ(url->port, 2379);
  EXPECT_EQ(url->path, "job-42");
  ExpectInvalid("etcd://127.0.0.1:2379?rank=1&world_size=2", "needs a job id");
  ExpectInvalid("etcd://127.0.0.1:2379/a/b?rank=1&world_size=2", "without '/'");
}

TEST(RendezvousUrlTest, GarbledFieldsAreNamed) {
  ExpectInvalid("127.0.0.1:29500", "has no scheme");
  ExpectInvalid("udp://127.0.0.1:1?rank=0&world_size=1", "unknown scheme \"udp\"");
  ExpectInvalid("tcp://127.0.0.1?rank=0&world_size=1", "has no port");
  ExpectInvalid("tcp://127.0.0.1:http?rank=0&world_size=1", "port \"http\"");
  ExpectInvalid("tcp://127.0.0.1:70000?rank=0&world_size=1", "port \"70000\"");
  ExpectInvalid("tcp://:29500?rank=0&world_size=1", "has no host");
  ExpectInvalid("tcp://127.0.0.1:29500?world_size=2", "has no rank");
  ExpectInvalid("tcp://127.0.0.1:29500?rank=0", "has no world_size");
  ExpectInvalid("tcp://127.0.0.1:29500?rank=one&world_size=2", "rank= is \"one\"");
  ExpectInvalid("tcp://127.0.0.1:29500?rank=0&worldsize=2", "unknown field \"worldsize\"");
  ExpectInvalid("tcp://127.0.0.1:29500?rank=0&rank=1&world_size=2", "given twice");
  ExpectInvalid("tcp://127.0.0.1:29500?rank=0&world_size=0", "world_size is 0");
  ExpectInvalid("tcp://127.0.0.1:29500?rank=%zz&world_size=2", "bad percent escape");
}

// A typo'd world size must fail at parsing, before rank 0 keeps state for each rank.
TEST(RendezvousUrlTest, WorldSizeIsBounded) {
  ExpectInvalid("tcp://127.0.0.1:29500?rank=0&world_size=2000000000",
                absl::StrCat("world_size is 2000000000; it must be from 1 to ", kMaxWorldSize));
  ExpectInvalid(absl::StrCat("file:///tmp/s?rank=0&world_size=", kMaxWorldSize + 1),
                "it must be from 1");
  ExpectInvalid("tcp://127.0.0.1:29500?rank=0&world_size=99999999999", "not an integer");
  auto largest = ParseRendezvousUrl(absl::StrCat("tcp://127.0.0.1:29500?rank=", kMaxWorldSize - 1,
                                                 "&world_size=", kMaxWorldSize));
  ASSERT_TRUE(largest.ok()) << largest.status();
  EXPECT_EQ(largest->world_size, kMaxWorldSize);
}

TEST(RendezvousUrlTest, RankOutOfRange) {
  ExpectInvalid("tcp://127.0.0.1:29500?rank=4&world_size=4",
                "rank 4 is out of range for world_size 4 (ranks are 0..3)");
  ExpectInvalid("tcp://127.0.0.1:29500?rank=-1&world_size=4", "rank -1 is out of range");
}

TEST_F(EnvTest, ReadsTheTorchrunVariables) {
  SetAll();
  auto url = ParseRendezvousUrl("env://");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_EQ(url->scheme, RendezvousScheme::kEnv);
  EXPECT_EQ(url->host, "127.0.0.1");
  EXPECT_EQ(url->port, 29500);
  EXPECT_EQ(url->rank, 3);
  EXPECT_EQ(url->world_size, 8);
  EXPECT_THAT(url->source, HasSubstr("MASTER_PORT=29500"));
  EXPECT_EQ(url->rank_source, "RANK/WORLD_SIZE");
  EXPECT_EQ(url->local_rank, -1);
  // Query fields win over the environment.
  auto overridden = ParseRendezvousUrl("env://?rank=1&world_size=2");
  ASSERT_TRUE(overridden.ok()) << overridden.status();
  EXPECT_EQ(overridden->rank, 1);
  EXPECT_EQ(overridden->world_size, 2);
}

TEST_F(EnvTest, EachMissingVariableIsNamed) {
  for (const char* missing : {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"}) {
    SetAll();
    unsetenv(missing);
    ExpectInvalid("env://", absl::StrCat("environment variable ", missing, " is not set"));
  }
  SetAll();
  setenv("MASTER_ADDR", "", 1);
  ExpectInvalid("env://", "environment variable MASTER_ADDR is empty");
}

TEST_F(EnvTest, EachGarbledVariableIsNamed) {
  SetAll();
  setenv("RANK", "abc", 1);
  ExpectInvalid("env://", "environment variable RANK is \"abc\", which is not an integer");
  SetAll();
  setenv("WORLD_SIZE", "8x", 1);
  ExpectInvalid("env://", "environment variable WORLD_SIZE is \"8x\"");
  SetAll();
  setenv("MASTER_PORT", "0", 1);
  ExpectInvalid("env://", "MASTER_PORT is \"0\"");
  SetAll();
  setenv("RANK", "8", 1);
  ExpectInvalid("env://", "rank 8 is out of range for world_size 8");
  SetAll();
  setenv("WORLD_SIZE", "2000000000", 1);
  ExpectInvalid("env://",
                "world_size (environment variable WORLD_SIZE) is 2000000000; it must be "
                "from 1 to 1048576");
  SetAll();
  setenv("SLURM_PROCID", "0", 1);
  setenv("SLURM_NTASKS", "0", 1);
  unsetenv("RANK");
  ExpectInvalid("env://", "world_size (environment variable SLURM_NTASKS) is 0");
  SetAll();
  ExpectInvalid("env://somehost:1", "env:// takes no host");
}

// Each cluster engine's variables, alone: the rank, world size and local rank come from them.
TEST_F(EnvTest, ReadsTheClusterEngineVariables) {
  struct Engine {
    const char* rank;
    const char* size;
    const char* local;
  };
  for (Engine e :
       {Engine{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
        Engine{"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
        Engine{"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"}}) {
    Clear();
    setenv("MASTER_ADDR", "10.0.0.1", 1);
    setenv("MASTER_PORT", "29501", 1);
    setenv(e.rank, "5", 1);
    setenv(e.size, "6", 1);
    setenv(e.local, "1", 1);
    auto url = ParseRendezvousUrl("env://");
    ASSERT_TRUE(url.ok()) << e.rank << ": " << url.status();
    EXPECT_EQ(url->rank, 5) << e.rank;
    EXPECT_EQ(url->world_size, 6) << e.rank;
    EXPECT_EQ(url->local_rank, 1) << e.rank;
    EXPECT_EQ(url->rank_source, absl::StrCat(e.rank, "/", e.size));
  }
}

// RANK/WORLD_SIZE win over an engine's variables; LOCAL_RANK over the engine's local rank.
TEST_F(EnvTest, LauncherVariablesWinOverTheEngine) {
  SetAll();
  setenv("LOCAL_RANK", "2", 1);
  setenv("OMPI_COMM_WORLD_RANK", "0", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "1", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1);
  auto url = ParseRendezvousUrl("env://");
  ASSERT_TRUE(url.ok()) << url.status();
  EXPECT_EQ(url->rank, 3);
  EXPECT_EQ(url->world_size, 8);
  EXPECT_EQ(url->local_rank, 2);
  EXPECT_EQ(url->rank_source, "RANK/WORLD_SIZE");
}

TEST_F(EnvTest, ClusterEngineErrorsNameTheVariables) {
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", "29500", 1);
  // Nothing set: every variable looked at is named.
  absl::StatusOr<RendezvousUrl> none = ParseRendezvousUrl("env://");
  ASSERT_FALSE(none.ok());
  for (const char* name : {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    EXPECT_THAT(std::string(none.status().message()), HasSubstr(name));
  }
  setenv("SLURM_PROCID", "1", 1);
  ExpectInvalid("env://", "environment variable SLURM_NTASKS is not set");
  setenv("SLURM_NTASKS", "two", 1);
  ExpectInvalid("env://", "environment variable SLURM_NTASKS is \"two\", which is not an integer");
  setenv("SLURM_NTASKS", "1", 1);
  ExpectInvalid("env://", "rank 1 is out of range for world_size 1");
  setenv("SLURM_NTASKS", "2", 1);
  setenv("SLURM_LOCALID", "x", 1);
  ExpectInvalid("env://", "environment variable SLURM_LOCALID is \"x\"");
  setenv("SLURM_LOCALID", "-1", 1);
  ExpectInvalid("env://", "SLURM_LOCALID is -1; a local rank is at least 0");
  setenv("SLURM_LOCALID", "0", 1);
  EXPECT_TRUE(ParseRendezvousUrl("env://").ok());
  // The query still wins.
  auto q = ParseRendezvousUrl("env://?rank=0&world_size=1");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->world_size, 1);
}

}  // namespace
}  // namespace paddle
