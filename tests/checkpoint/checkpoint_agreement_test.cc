// AgreeOnCheckpoint with ranks as threads (native communicators over one HashStore): every rank
// resumes from the step rank 0 chose, or every rank fails naming the ranks that could not load it,
// whatever each rank's own directory holds.
#include "paddle/checkpoint/checkpoint_agreement.h"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "paddle/checkpoint/checkpoint.h"
#include "paddle/collective/communicator.h"
#include "paddle/collective/store/hash_store.h"
#include "tests/checkpoint/checkpoint_testing.h"

namespace paddle {
namespace checkpoint {
namespace {

using testing::FreshDir;
using ::testing::HasSubstr;
using testing::PatternTensor;
using testing::ReadBytes;
using testing::SameTensor;
using testing::WriteBytes;

CheckpointState StateForStep(int64_t step) {
  CheckpointState s;
  s.tensors["model/w"] = PatternTensor({5, 3}, DType::kFloat32, 100 + step);
  s.ints["train/step"] = step;
  return s;
}

void Save(const std::string& dir, std::vector<int64_t> steps) {
  CheckpointManager manager(dir, /*keep_last=*/0);
  for (int64_t step : steps) ASSERT_TRUE(manager.Save(step, StateForStep(step)).ok());
}

void Truncate(const std::string& path) { WriteBytes(path, ReadBytes(path).substr(0, 50)); }

// AgreeOnCheckpoint on one thread per rank, rank r with a manager of dirs[r].
std::vector<absl::StatusOr<LoadedCheckpoint>> AgreeOnThreads(const std::vector<std::string>& dirs) {
  const int world = static_cast<int>(dirs.size());
  auto store = std::make_shared<HashStore>();
  std::vector<absl::StatusOr<LoadedCheckpoint>> results(world, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      CommunicatorOptions options;
      options.backend = Backend::kNative;
      options.store = store;
      options.rank = rank;
      options.world_size = world;
      options.timeout = absl::Seconds(60);
      absl::StatusOr<std::unique_ptr<Communicator>> comm = Communicator::Create(options);
      if (!comm.ok()) {
        results[rank] = comm.status();
        return;
      }
      CheckpointManager manager(dirs[rank]);
      results[rank] = AgreeOnCheckpoint(**comm, manager);
    });
  }
  for (std::thread& t : threads) t.join();
  return results;
}

void ExpectLoadedStep(const absl::StatusOr<LoadedCheckpoint>& got, int64_t step, int rank) {
  ASSERT_TRUE(got.ok()) << "rank " << rank << ": " << got.status();
  EXPECT_EQ(got->step, step) << "rank " << rank;
  EXPECT_EQ(got->state.ints.at("train/step"), step) << "rank " << rank;
  EXPECT_TRUE(SameTensor(got->state.tensors.at("model/w"), StateForStep(step).tensors["model/w"]))
      << "rank " << rank;
}

TEST(AgreeOnCheckpointTest, SharedDirectoryEveryRankLoadsTheNewest) {
  for (int world : {1, 2, 3}) {
    const std::string dir = FreshDir(absl::StrCat("_", world));
    Save(dir, {4, 8, 12});
    std::vector<absl::StatusOr<LoadedCheckpoint>> got =
        AgreeOnThreads(std::vector<std::string>(world, dir));
    for (int r = 0; r < world; ++r) {
      ExpectLoadedStep(got[r], 12, r);
      EXPECT_EQ(got[r]->path, CheckpointManager(dir).PathForStep(12));
    }
  }
}

TEST(AgreeOnCheckpointTest, RankZerosFallbackIsEveryRanksStep) {
  // Rank 0's newest is corrupt, rank 1's is fine: rank 1 must not resume from a newer step.
  const std::string dir0 = FreshDir("_0"), dir1 = FreshDir("_1");
  Save(dir0, {1, 2, 3});
  Save(dir1, {1, 2, 3});
  Truncate(CheckpointManager(dir0).PathForStep(3));
  std::vector<absl::StatusOr<LoadedCheckpoint>> got = AgreeOnThreads({dir0, dir1});
  ExpectLoadedStep(got[0], 2, 0);
  ExpectLoadedStep(got[1], 2, 1);
  ASSERT_EQ(got[0]->skipped.size(), 1u);
  EXPECT_THAT(got[0]->skipped[0], HasSubstr(CheckpointManager(dir0).PathForStep(3)));
}

TEST(AgreeOnCheckpointTest, RankMissingTheChosenStepFailsEveryRank) {
  // Rank 1's newest file is missing: loading its older step 1 would silently desynchronize.
  const std::string dir0 = FreshDir("_0"), dir1 = FreshDir("_1");
  Save(dir0, {1, 2});
  Save(dir1, {1});
  std::vector<absl::StatusOr<LoadedCheckpoint>> got = AgreeOnThreads({dir0, dir1});
  ASSERT_FALSE(got[0].ok());
  ASSERT_FALSE(got[1].ok());
  EXPECT_EQ(got[0].status().code(), absl::StatusCode::kAborted) << got[0].status();
  EXPECT_THAT(got[0].status().message(),
              HasSubstr("rank 0/2: rank(s) 1 of 2 could not load checkpoint step 2 (chosen by "
                        "rank 0), so no rank resumes"));
  // Not kNotFound, which callers take for "no checkpoint: start fresh".
  EXPECT_EQ(got[1].status().code(), absl::StatusCode::kFailedPrecondition) << got[1].status();
  const std::string path1 = CheckpointManager(dir1).PathForStep(2);
  EXPECT_THAT(got[1].status().message(),
              HasSubstr("rank 1/2: opening checkpoint " + path1 + ": No such file or directory"));
  EXPECT_THAT(got[1].status().message(), HasSubstr("rank(s) 1 of 2 could not load"));
}

TEST(AgreeOnCheckpointTest, RankWithCorruptChosenStepFailsEveryRank) {
  const std::string dir0 = FreshDir("_0"), dir1 = FreshDir("_1"), dir2 = FreshDir("_2");
  for (const std::string& dir : {dir0, dir1, dir2}) Save(dir, {5, 6});
  Truncate(CheckpointManager(dir2).PathForStep(6));
  std::vector<absl::StatusOr<LoadedCheckpoint>> got = AgreeOnThreads({dir0, dir1, dir2});
  for (int r = 0; r < 3; ++r) {
    ASSERT_FALSE(got[r].ok()) << "rank " << r << " resumed alone at step " << got[r]->step;
    EXPECT_THAT(got[r].status().message(),
                HasSubstr("rank(s) 2 of 3 could not load checkpoint step 6"));
  }
  EXPECT_EQ(got[2].status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(got[2].status().message(), HasSubstr("truncated"));
}

TEST(AgreeOnCheckpointTest, NoCheckpointOnRankZeroMeansEveryRankStartsFresh) {
  const std::string dir0 = FreshDir("_0"), dir1 = FreshDir("_1");
  Save(dir1, {7});
  std::vector<absl::StatusOr<LoadedCheckpoint>> got = AgreeOnThreads({dir0, dir1});
  EXPECT_EQ(got[0].status().code(), absl::StatusCode::kNotFound) << got[0].status();
  EXPECT_EQ(got[0].status().message(), "no checkpoint in " + dir0);
  EXPECT_EQ(got[1].status().code(), absl::StatusCode::kNotFound) << got[1].status();
  EXPECT_THAT(got[1].status().message(), HasSubstr("rank 0 found no checkpoint"));
}

TEST(AgreeOnCheckpointTest, RankZeroErrorFailsEveryRank) {
  // A directory where rank 0's newest checkpoint should be: not corrupt, so no fallback.
  const std::string dir = FreshDir();
  Save(dir, {1});
  std::filesystem::create_directory(CheckpointManager(dir).PathForStep(2));
  std::vector<absl::StatusOr<LoadedCheckpoint>> got = AgreeOnThreads({dir, dir});
  ASSERT_FALSE(got[0].ok());
  EXPECT_THAT(got[0].status().message(), HasSubstr("rank 0/2: "));
  EXPECT_THAT(got[0].status().message(), HasSubstr(CheckpointManager(dir).PathForStep(2)));
  ASSERT_FALSE(got[1].ok());
  EXPECT_EQ(got[1].status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(got[1].status().message(),
              HasSubstr("rank 1/2: rank 0 could not choose a checkpoint to resume from"));
}

}  // namespace
}  // namespace checkpoint
}  // namespace paddle
