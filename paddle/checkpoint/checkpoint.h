// CheckpointManager: a directory of checkpoints that a training job saves into and resumes from,
// built so that a crash at any moment leaves a resumable state behind.
//
//   CheckpointManager manager("/ckpt/run7", /*keep_last=*/3);
//   absl::StatusOr<LoadedCheckpoint> resumed = manager.LoadLatest();   // NotFound: fresh start
//   ...
//   RETURN_IF_ERROR(manager.Save(step, state));
//
// Files are named ckpt-<step, 8+ digits>.pdk (format in checkpoint_file.h). Save writes a
// temporary file in the same directory, fsyncs it, renames it over the final name and fsyncs the
// directory, so a reader sees either the whole new checkpoint or none of it; then it deletes all
// but the newest `keep_last` checkpoints and any temporary files that crashed writers left behind.
// LoadLatest tries checkpoints newest first and skips (with a warning) any that are corrupt or
// truncated, so a checkpoint damaged after it was written (a bad disk, a partial copy) costs the
// steps since the previous one instead of the job. Any other failure (permission denied, an I/O
// error, a newer format version) is returned: falling back past a good checkpoint that merely
// cannot be read now would silently throw away training and later prune the newer file.
//
// One writer per directory: a second process saving into the same directory could delete the
// first one's temporary file. Ranks that each save their own shard use one directory each.
// Ranks that resume together use AgreeOnCheckpoint (checkpoint_agreement.h) so that all of them
// load the same step.
#ifndef PADDLE_CHECKPOINT_CHECKPOINT_H_
#define PADDLE_CHECKPOINT_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "paddle/checkpoint/checkpoint_file.h"

namespace paddle {
namespace checkpoint {

struct LoadedCheckpoint {
  CheckpointState state;
  int64_t step = 0;
  std::string path;
  // "path: reason" for each newer checkpoint that was skipped because it failed to load.
  std::vector<std::string> skipped;
};

class CheckpointManager {
 public:
  // `keep_last` <= 0 keeps every checkpoint.
  explicit CheckpointManager(std::string dir, int keep_last = 3);

  // Atomically writes the checkpoint of `step` (>= 0; an existing one of the same step is
  // replaced), creating the directory if missing, then prunes old checkpoints. The checkpoint just
  // written is never pruned, even if newer ones exist.
  absl::Status Save(int64_t step, const CheckpointState& state);

  // The newest checkpoint that loads, with the newer, corrupt ones (kDataLoss from
  // ReadCheckpointFile) in `skipped`. kNotFound, naming the directory and every skipped file, when
  // none loads or there are none. Any other error of a file (or of listing the directory) is
  // returned with its own code, naming the file and the cause, without looking at older files.
  absl::StatusOr<LoadedCheckpoint> LoadLatest();

  // One checkpoint file, fully checked (checkpoint_file.h lists the checks).
  absl::StatusOr<CheckpointState> Load(const std::string& path) const;

  // Paths of the checkpoints in the directory, good or not, newest (highest step) first; empty
  // when the directory does not exist or cannot be read. Temporary files are not listed.
  std::vector<std::string> List() const;

  const std::string& dir() const { return dir_; }
  // The path Save(step, ...) writes.
  std::string PathForStep(int64_t step) const;

 private:
  // Deletes checkpoints past the newest keep_last_ (sparing `keep`) and stale temporary files;
  // failures are logged.
  void Prune(const std::string& keep) const;
  // List(), or the error that made the directory unreadable (a missing directory is empty).
  absl::StatusOr<std::vector<std::string>> Scan() const;

  std::string dir_;
  int keep_last_;
};

}  // namespace checkpoint
}  // namespace paddle

#endif  // PADDLE_CHECKPOINT_CHECKPOINT_H_
