#include "paddle/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/types/optional.h"
#include "paddle/core/logging.h"
#include "paddle/core/status.h"

namespace paddle {
namespace checkpoint {
namespace {

constexpr absl::string_view kPrefix = "ckpt-";
constexpr absl::string_view kSuffix = ".pdk";
// Save writes <final name>.tmp.<pid> and renames it; anything with this infix is a temporary.
constexpr absl::string_view kTempInfix = ".pdk.tmp.";

// The step of a checkpoint file name, or nullopt for any other name.
absl::optional<int64_t> StepOfName(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, kPrefix) || !absl::ConsumeSuffix(&name, kSuffix) ||
      name.empty() ||
      !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return absl::nullopt;
  }
  int64_t step = 0;
  if (!absl::SimpleAtoi(name, &step)) return absl::nullopt;
  return step;
}

bool IsTempName(absl::string_view name) {
  return absl::StartsWith(name, kPrefix) && absl::StrContains(name, kTempInfix);
}

absl::Status IoError(int err, absl::string_view what, const std::string& path) {
  return absl::ErrnoToStatus(err, absl::StrCat(what, " ", path));
}

// Makes a rename in `dir` durable: without it a power loss can forget the new name.
absl::Status SyncDirectory(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return IoError(errno, "opening checkpoint directory", dir);
  const int rc = fsync(fd);
  const int err = errno;
  close(fd);
  if (rc != 0) return IoError(err, "fsync of checkpoint directory", dir);
  return absl::OkStatus();
}

// Writes `state` to `tmp` and makes its bytes durable; removes `tmp` on failure.
absl::Status WriteDurably(const std::string& tmp, int64_t step, const CheckpointState& state) {
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return IoError(errno, "creating temporary checkpoint file", tmp);
  absl::Status status = WriteCheckpointFile(fd, tmp, step, state);
  if (status.ok() && fsync(fd) != 0) status = IoError(errno, "fsync of", tmp);
  // close() can report a failed delayed write (NFS), so its result counts too.
  if (close(fd) != 0 && status.ok()) status = IoError(errno, "closing", tmp);
  if (!status.ok()) unlink(tmp.c_str());
  return status;
}

}  // namespace

CheckpointManager::CheckpointManager(std::string dir, int keep_last)
    : dir_(std::move(dir)), keep_last_(keep_last) {}

std::string CheckpointManager::PathForStep(int64_t step) const {
  return absl::StrFormat("%s/%s%08d%s", dir_, kPrefix, step, kSuffix);
}

// Save, step by step:
//  1. write ckpt-<step>.pdk.tmp.<pid> in the checkpoint directory (same file system, so step 3 is
//     a rename, not a copy) and fsync it: its bytes are on disk;
//  2. a crash before step 3 leaves only the temporary, which List and LoadLatest ignore and the
//     next Save deletes;
//  3. rename it to ckpt-<step>.pdk: atomic, readers see the old state or the whole new file;
//  4. fsync the directory: the new name survives a power loss;
//  5. prune. A crash here leaves extra checkpoints, never too few.
absl::Status CheckpointManager::Save(int64_t step, const CheckpointState& state) {
  if (step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint step must be >= 0, got ", step, " (directory ", dir_, ")"));
  }
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) {
    return absl::ErrnoToStatus(ec.value(), absl::StrCat("creating checkpoint directory ", dir_));
  }
  const std::string path = PathForStep(step);
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  RETURN_IF_ERROR(WriteDurably(tmp, step, state));
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    absl::Status status = IoError(errno, absl::StrCat("renaming ", tmp, " to"), path);
    unlink(tmp.c_str());
    return status;
  }
  RETURN_IF_ERROR(SyncDirectory(dir_));
  Prune(path);
  return absl::OkStatus();
}

// Pruning failures only cost disk space and the checkpoint is already safe, so they are warnings
// rather than a failed Save that a caller would retry.
void CheckpointManager::Prune(const std::string& keep) const {
  if (keep_last_ > 0) {
    const std::vector<std::string> paths = List();
    for (size_t i = static_cast<size_t>(keep_last_); i < paths.size(); ++i) {
      if (paths[i] != keep && unlink(paths[i].c_str()) != 0) {
        PADDLE_LOG(WARN, TRAIN) << "cannot delete old checkpoint " << paths[i] << ": "
                                << std::generic_category().message(errno);
      }
    }
  }
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    if (IsTempName(name) && unlink(entry.path().c_str()) != 0) {
      PADDLE_LOG(WARN, TRAIN) << "cannot delete stale temporary checkpoint " << entry.path() << ": "
                              << std::generic_category().message(errno);
    }
  }
}

std::vector<std::string> CheckpointManager::List() const {
  absl::StatusOr<std::vector<std::string>> paths = Scan();
  return paths.ok() ? *std::move(paths) : std::vector<std::string>();
}

absl::StatusOr<std::vector<std::string>> CheckpointManager::Scan() const {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  std::filesystem::directory_iterator it(dir_, ec);
  for (; !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    absl::optional<int64_t> step = StepOfName(name);
    if (step.has_value()) found.emplace_back(*step, absl::StrCat(dir_, "/", name));
  }
  if (ec && ec != std::errc::no_such_file_or_directory) {
    return absl::ErrnoToStatus(ec.value(), absl::StrCat("listing checkpoint directory ", dir_));
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a > b; });
  std::vector<std::string> paths;
  paths.reserve(found.size());
  for (auto& [step, path] : found) paths.push_back(std::move(path));
  return paths;
}

absl::StatusOr<CheckpointState> CheckpointManager::Load(const std::string& path) const {
  ASSIGN_OR_RETURN(CheckpointFileContents contents, ReadCheckpointFile(path));
  return std::move(contents.state);
}

absl::StatusOr<LoadedCheckpoint> CheckpointManager::LoadLatest() {
  ASSIGN_OR_RETURN(const std::vector<std::string> paths, Scan());
  LoadedCheckpoint out;
  for (const std::string& path : paths) {
    absl::StatusOr<CheckpointFileContents> contents = ReadCheckpointFile(path);
    if (contents.ok()) {
      out.state = std::move(contents->state);
      out.step = contents->step;
      out.path = path;
      return out;
    }
    if (!absl::IsDataLoss(contents.status())) {
      // Not corrupt: the file may well be good once the cause is fixed (see checkpoint.h).
      const std::string after =
          out.skipped.empty()
              ? ""
              : absl::StrCat(" (after skipping ", out.skipped.size(), " corrupt newer ones)");
      if (absl::IsNotFound(contents.status())) {
        // kNotFound would read as "no checkpoint, start fresh" to callers.
        return absl::AbortedError(absl::StrCat(
            contents.status().message(), after, "; it was listed a moment before: is another ",
            "process removing or pruning checkpoints in ", dir_, "?"));
      }
      return absl::Status(
          contents.status().code(),
          absl::StrCat(contents.status().message(), after,
                       "; not falling back to an older checkpoint past one that is not corrupt: "
                       "fix the cause, or move ",
                       path, " out of the directory to resume from the previous checkpoint"));
    }
    absl::string_view reason = contents.status().message();
    absl::ConsumePrefix(&reason, absl::StrCat("checkpoint ", path, ": "));
    PADDLE_LOG(WARN, TRAIN) << "skipping checkpoint " << path << ": " << reason
                            << "; trying the previous one";
    out.skipped.push_back(absl::StrCat(path, ": ", reason));
  }
  if (out.skipped.empty()) {
    std::error_code ec;
    const bool exists = std::filesystem::is_directory(dir_, ec);
    return absl::NotFoundError(
        absl::StrCat("no checkpoint in ", dir_, exists ? "" : " (the directory does not exist)"));
  }
  return absl::NotFoundError(absl::StrCat("no loadable checkpoint in ", dir_, "; ",
                                          out.skipped.size(),
                                          " skipped: ", absl::StrJoin(out.skipped, "; ")));
}

}  // namespace checkpoint
}  // namespace paddle
