// CheckpointManager: naming, listing, pruning, crash leftovers, falling back past corrupt
// checkpoints (and only those), and the errors for missing or unusable directories and files.
#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "paddle/checkpoint/checkpoint.h"
#include "paddle/core/logging.h"
#include "tests/checkpoint/checkpoint_testing.h"

namespace paddle {
namespace checkpoint {
namespace {

using ::testing::ElementsAre;
using testing::FreshDir;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using testing::PatternTensor;
using testing::ReadBytes;
using testing::SameTensor;
using testing::WriteBytes;

// A state that differs per step, so loading the wrong checkpoint is visible.
CheckpointState StateForStep(int64_t step) {
  CheckpointState s;
  s.tensors["model/fc1.weight"] = PatternTensor({16, 8}, DType::kFloat32, 1000 + step);
  s.tensors["optimizer/fc1.weight.momentum"] = PatternTensor({16, 8}, DType::kFloat32, 2000 + step);
  s.ints["data/position"] = step * 256;
  s.strings["rng/philox"] = absl::StrCat("seed=7;offset=", step);
  return s;
}

void ExpectStateOfStep(const CheckpointState& got, int64_t step) {
  const CheckpointState want = StateForStep(step);
  for (const auto& [name, t] : want.tensors) {
    ASSERT_EQ(got.tensors.count(name), 1u) << name;
    EXPECT_TRUE(SameTensor(t, got.tensors.at(name))) << name << " of step " << step;
  }
  EXPECT_EQ(got.ints, want.ints);
  EXPECT_EQ(got.strings, want.strings);
}

std::vector<std::string> FilesIn(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

void PutU32(std::string* bytes, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) (*bytes)[at + i] = static_cast<char>(v >> (8 * i));
}

// Root reads files whatever their mode (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH). For its scope
// this clears those capabilities from the calling thread's effective set, so file modes apply to
// it as to any user; they stay permitted, so the destructor can raise them again.
class WithoutFileCapabilities {
 public:
  WithoutFileCapabilities() {
    if (syscall(SYS_capget, &header_, saved_) != 0) return;
    __user_cap_data_struct reduced[2] = {saved_[0], saved_[1]};
    reduced[0].effective &= ~((1u << CAP_DAC_OVERRIDE) | (1u << CAP_DAC_READ_SEARCH));
    ok_ = syscall(SYS_capset, &header_, reduced) == 0;
  }
  ~WithoutFileCapabilities() {
    if (ok_) {
      EXPECT_EQ(syscall(SYS_capset, &header_, saved_), 0);
    }
  }
  bool ok() const { return ok_; }

 private:
  __user_cap_header_struct header_ = {_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct saved_[2] = {};
  bool ok_ = false;
};

void FlipByte(const std::string& path, size_t from_end) {
  std::string bytes = ReadBytes(path);
  bytes[bytes.size() - from_end] = static_cast<char>(bytes[bytes.size() - from_end] ^ 0x20);
  WriteBytes(path, bytes);
}

// Captures warning lines, to check that skipped checkpoints are logged.
std::vector<std::string>* g_log_lines = nullptr;
void CaptureLine(absl::string_view line) { g_log_lines->emplace_back(line); }

TEST(CheckpointManagerTest, SavesAndLoadsLatest) {
  const std::string dir = FreshDir();
  CheckpointManager manager(dir);
  ASSERT_TRUE(manager.Save(12, StateForStep(12)).ok());
  absl::StatusOr<LoadedCheckpoint> loaded = manager.LoadLatest();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->step, 12);
  EXPECT_EQ(loaded->path, dir + "/ckpt-00000012.pdk");
  EXPECT_THAT(loaded->skipped, IsEmpty());
  ExpectStateOfStep(loaded->state, 12);
  absl::StatusOr<CheckpointState> direct = manager.Load(loaded->path);
  ASSERT_TRUE(direct.ok()) << direct.status();
  ExpectStateOfStep(*direct, 12);
  EXPECT_EQ(manager.PathForStep(123456789), dir + "/ckpt-123456789.pdk");
}

TEST(CheckpointManagerTest, ListIsNewestFirstAndOnlyCheckpoints) {
  const std::string dir = FreshDir();
  CheckpointManager manager(dir, /*keep_last=*/0);
  for (int64_t step : {3, 100000000, 20}) ASSERT_TRUE(manager.Save(step, StateForStep(step)).ok());
  WriteBytes(dir + "/notes.txt", "hello");
  WriteBytes(dir + "/ckpt-abc.pdk", "x");
  WriteBytes(dir + "/ckpt-.pdk", "x");
  EXPECT_THAT(manager.List(), ElementsAre(dir + "/ckpt-100000000.pdk", dir + "/ckpt-00000020.pdk",
                                          dir + "/ckpt-00000003.pdk"));
  EXPECT_THAT(CheckpointManager(dir + "/missing").List(), IsEmpty());
}

TEST(CheckpointManagerTest, KeepLastPrunesOldest) {
  const std::string dir = FreshDir();
  CheckpointManager manager(dir, /*keep_last=*/2);
  for (int64_t step = 1; step <= 5; ++step) {
    ASSERT_TRUE(manager.Save(step, StateForStep(step)).ok());
  }
  EXPECT_THAT(FilesIn(dir), ElementsAre("ckpt-00000004.pdk", "ckpt-00000005.pdk"));
  // Saving an existing step replaces it.
  ASSERT_TRUE(manager.Save(5, StateForStep(6)).ok());
  absl::StatusOr<CheckpointState> replaced = manager.Load(manager.PathForStep(5));
  ASSERT_TRUE(replaced.ok()) << replaced.status();
  ExpectStateOfStep(*replaced, 6);
  EXPECT_EQ(manager.List().size(), 2u);

  const std::string all_dir = FreshDir("_all");
  CheckpointManager keep_all(all_dir, /*keep_last=*/0);
  for (int64_t step = 1; step <= 5; ++step) ASSERT_TRUE(keep_all.Save(step, {}).ok());
  EXPECT_EQ(keep_all.List().size(), 5u);
}

TEST(CheckpointManagerTest, JustWrittenCheckpointIsNeverPruned) {
  // A job that resumed from an older step (the newer one was corrupt) saves below the newest.
  const std::string dir = FreshDir();
  CheckpointManager manager(dir, /*keep_last=*/1);
  ASSERT_TRUE(manager.Save(10, StateForStep(10)).ok());
  ASSERT_TRUE(manager.Save(3, StateForStep(3)).ok());
  EXPECT_THAT(FilesIn(dir), ElementsAre("ckpt-00000003.pdk", "ckpt-00000010.pdk"));
  ASSERT_TRUE(manager.Save(11, StateForStep(11)).ok());
  EXPECT_THAT(FilesIn(dir), ElementsAre("ckpt-00000011.pdk"));
}

TEST(CheckpointManagerTest, CrashLeftoverTempFileIsIgnoredThenCleaned) {
  const std::string dir = FreshDir();
  CheckpointManager manager(dir);
  ASSERT_TRUE(manager.Save(5, StateForStep(5)).ok());
  // A writer that died mid-write of step 9: a partial temporary file, never renamed.
  const std::string full = ReadBytes(manager.PathForStep(5));
  const std::string leftover = manager.PathForStep(9) + ".tmp.4242";
  WriteBytes(leftover, full.substr(0, full.size() / 2));
  EXPECT_THAT(manager.List(), ElementsAre(manager.PathForStep(5)));
  absl::StatusOr<LoadedCheckpoint> loaded = manager.LoadLatest();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->step, 5);
  EXPECT_THAT(loaded->skipped, IsEmpty());
  ASSERT_TRUE(std::filesystem::exists(leftover));
  ASSERT_TRUE(manager.Save(6, StateForStep(6)).ok());
  EXPECT_FALSE(std::filesystem::exists(leftover));
  EXPECT_THAT(FilesIn(dir), ElementsAre("ckpt-00000005.pdk", "ckpt-00000006.pdk"));
}

TEST(CheckpointManagerTest, FailedSaveLeavesNothingBehind) {
  const std::string dir = FreshDir();
  CheckpointManager manager(dir);
  ASSERT_TRUE(manager.Save(1, StateForStep(1)).ok());
  CheckpointState bad = StateForStep(2);
  bad.tensors["model/undefined"] = Tensor();
  absl::Status s = manager.Save(2, bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tensor 'model/undefined' is undefined"));
  EXPECT_THAT(FilesIn(dir), ElementsAre("ckpt-00000001.pdk"));

  s = manager.Save(-1, StateForStep(1));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "checkpoint step must be >= 0, got -1 (directory " + dir + ")");
}

TEST(CheckpointManagerTest, LoadLatestFallsBackPastCorruptCheckpoints) {
  const std::string dir = FreshDir();
  CheckpointManager manager(dir, /*keep_last=*/4);
  for (int64_t step = 1; step <= 4; ++step) {
    ASSERT_TRUE(manager.Save(step, StateForStep(step)).ok());
  }
  FlipByte(manager.PathForStep(4), 100);  // a data byte of the last tensor
  const std::string file3 = ReadBytes(manager.PathForStep(3));
  WriteBytes(manager.PathForStep(3), file3.substr(0, file3.size() - 1000));

  std::vector<std::string> lines;
  g_log_lines = &lines;
  SetLogSink(CaptureLine);
  SetLogConfig(LogConfig{LogLevel::kWarn, kLogAll});
  absl::StatusOr<LoadedCheckpoint> loaded = manager.LoadLatest();
  SetLogSink(nullptr);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->step, 2);
  EXPECT_EQ(loaded->path, manager.PathForStep(2));
  ExpectStateOfStep(loaded->state, 2);
  ASSERT_EQ(loaded->skipped.size(), 2u);
  EXPECT_THAT(loaded->skipped[0],
              HasSubstr(manager.PathForStep(4) +
                        ": tensor 'optimizer/fc1.weight.momentum' crc mismatch: stored 0x"));
  EXPECT_THAT(loaded->skipped[1], HasSubstr(manager.PathForStep(3) + ": file is "));
  EXPECT_THAT(loaded->skipped[1], HasSubstr("truncated"));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_THAT(lines[0], HasSubstr("skipping checkpoint " + manager.PathForStep(4) + ": tensor"));
  EXPECT_THAT(lines[1], HasSubstr("skipping checkpoint " + manager.PathForStep(3) + ": file is"));
}

TEST(CheckpointManagerTest, CorruptNewestFallsBackWithWarning) {
  const std::string dir = FreshDir();
  CheckpointManager manager(dir);
  ASSERT_TRUE(manager.Save(1, StateForStep(1)).ok());
  ASSERT_TRUE(manager.Save(2, StateForStep(2)).ok());
  const std::string newest = ReadBytes(manager.PathForStep(2));
  WriteBytes(manager.PathForStep(2), newest.substr(0, 100));

  std::vector<std::string> lines;
  g_log_lines = &lines;
  SetLogSink(CaptureLine);
  SetLogConfig(LogConfig{LogLevel::kWarn, kLogAll});
  absl::StatusOr<LoadedCheckpoint> loaded = manager.LoadLatest();
  SetLogSink(nullptr);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->step, 1);
  ExpectStateOfStep(loaded->state, 1);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0][0], 'W') << lines[0];  // a warning
  EXPECT_THAT(lines[0], HasSubstr("skipping checkpoint " + manager.PathForStep(2) + ": "));
  EXPECT_THAT(lines[0], HasSubstr("truncated"));
  EXPECT_THAT(lines[0], HasSubstr("trying the previous one"));
}

// Only corruption is a reason to fall back: a newest file that cannot be read for any other
// reason is an error naming it, since the steps it holds would otherwise be silently lost (and
// the next Save would prune it). The same for a directory that cannot be listed: "no checkpoint"
// would make the job start over.
TEST(CheckpointManagerTest, PermissionDeniedIsAnErrorNotAFallback) {
  const std::string dir = FreshDir();
  CheckpointManager manager(dir);
  ASSERT_TRUE(manager.Save(1, StateForStep(1)).ok());
  ASSERT_TRUE(manager.Save(2, StateForStep(2)).ok());
  ASSERT_EQ(chmod(manager.PathForStep(2).c_str(), 0), 0);
  absl::Status file_error, dir_error;
  {
    WithoutFileCapabilities unprivileged;
    ASSERT_TRUE(unprivileged.ok()) << "capset: " << std::strerror(errno);
    file_error = manager.LoadLatest().status();
    ASSERT_EQ(chmod(dir.c_str(), 0), 0);
    dir_error = manager.LoadLatest().status();
    ASSERT_EQ(chmod(dir.c_str(), 0755), 0);
  }
  EXPECT_EQ(file_error.code(), absl::StatusCode::kPermissionDenied) << file_error;
  EXPECT_THAT(file_error.message(),
              HasSubstr("opening checkpoint " + manager.PathForStep(2) + ": Permission denied"));
  EXPECT_THAT(file_error.message(),
              HasSubstr("not falling back to an older checkpoint past one that is not corrupt"));
  EXPECT_EQ(dir_error.code(), absl::StatusCode::kPermissionDenied) << dir_error;
  EXPECT_THAT(dir_error.message(),
              HasSubstr("listing checkpoint directory " + dir + ": Permission denied"));
}

TEST(CheckpointManagerTest, IoErrorOnNewestIsAnError) {
  // A directory where the newest checkpoint should be: open succeeds, read fails with EISDIR.
  const std::string dir = FreshDir();
  CheckpointManager manager(dir);
  ASSERT_TRUE(manager.Save(1, StateForStep(1)).ok());
  std::filesystem::create_directory(manager.PathForStep(2));
  absl::Status s = manager.LoadLatest().status();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr(manager.PathForStep(2)));
  EXPECT_THAT(s.message(), HasSubstr("Is a directory"));
  EXPECT_THAT(s.message(), HasSubstr("move " + manager.PathForStep(2) + " out of the directory"));
}

TEST(CheckpointManagerTest, NewerFormatVersionIsAnErrorNotAFallback) {
  const std::string dir = FreshDir();
  CheckpointManager manager(dir);
  ASSERT_TRUE(manager.Save(1, StateForStep(1)).ok());
  ASSERT_TRUE(manager.Save(2, StateForStep(2)).ok());
  ASSERT_TRUE(manager.Save(3, StateForStep(3)).ok());
  FlipByte(manager.PathForStep(3), 100);  // corrupt: skipped
  std::string file = ReadBytes(manager.PathForStep(2));
  PutU32(&file, 8, kFormatVersion + 1);  // written by a newer build: not skipped
  WriteBytes(manager.PathForStep(2), file);
  absl::Status s = manager.LoadLatest().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("checkpoint " + manager.PathForStep(2) + ": format version " +
                                     std::to_string(kFormatVersion + 1) + " is newer"));
  EXPECT_THAT(s.message(), HasSubstr("after skipping 1 corrupt newer ones"));
}

TEST(CheckpointManagerTest, UnlistableDirectoryIsAnError) {
  const std::string base = FreshDir();
  WriteBytes(base + "/file", "x");
  absl::Status s = CheckpointManager(base + "/file").LoadLatest().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;  // ENOTDIR
  EXPECT_THAT(s.message(), HasSubstr("listing checkpoint directory " + base + "/file"));
  EXPECT_THAT(s.message(), HasSubstr("Not a directory"));
}

TEST(CheckpointManagerTest, NotFoundWhenNothingLoads) {
  const std::string dir = FreshDir();
  CheckpointManager manager(dir);
  absl::Status s = manager.LoadLatest().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "no checkpoint in " + dir);

  s = CheckpointManager(dir + "/missing").LoadLatest().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "no checkpoint in " + dir + "/missing (the directory does not exist)");

  ASSERT_TRUE(manager.Save(1, StateForStep(1)).ok());
  ASSERT_TRUE(manager.Save(2, StateForStep(2)).ok());
  FlipByte(manager.PathForStep(1), 1);
  WriteBytes(manager.PathForStep(2), "garbage");
  s = manager.LoadLatest().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("no loadable checkpoint in " + dir + "; 2 skipped: " +
                                     manager.PathForStep(2) + ": file is 7 bytes"));
  EXPECT_THAT(s.message(), HasSubstr(manager.PathForStep(1) + ": "));
}

TEST(CheckpointManagerTest, CreatesMissingDirectories) {
  const std::string dir = FreshDir() + "/a/b/c";
  CheckpointManager manager(dir);
  ASSERT_TRUE(manager.Save(0, StateForStep(0)).ok());
  absl::StatusOr<LoadedCheckpoint> loaded = manager.LoadLatest();
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->step, 0);
}

TEST(CheckpointManagerTest, UnusableDirectoryNamesPathAndErrno) {
  // A regular file where a directory should be: fails even for root, unlike a chmod.
  const std::string base = FreshDir();
  WriteBytes(base + "/file", "x");
  const std::string dir = base + "/file/checkpoints";
  absl::Status s = CheckpointManager(dir).Save(1, StateForStep(1));
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("creating checkpoint directory " + dir));
  EXPECT_THAT(s.message(), HasSubstr("Not a directory"));

  s = CheckpointManager(base + "/file").Save(1, StateForStep(1));
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(base + "/file"));
}

}  // namespace
}  // namespace checkpoint
}  // namespace paddle
