// FileStore: a Store kept in one file, for the processes of one host or of hosts sharing a
// filesystem (the `file://` rendezvous).
//
// The file is an append-only log of set/delete records behind a small header; each client
// replays the records it has not seen yet into an in-memory map, so a read costs only the new
// bytes. Writers take an exclusive flock(2) and readers a shared one, which makes Add and
// CompareSet atomic across processes. Get and Wait poll with backoff until their deadline; lock
// waits are bounded too. The header records `num_users`; every client appends a "closed" record
// when destroyed, and the one that brings the count to `num_users` removes the file, so a
// finished job leaves nothing behind. A job that crashes does leave the file: use a fresh path
// per job (Open refuses a file made for a different number of users).
#ifndef PADDLE_COLLECTIVE_STORE_FILE_STORE_H_
#define PADDLE_COLLECTIVE_STORE_FILE_STORE_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "paddle/collective/store/store.h"

namespace paddle {

// One record of a FileStore log (file_store.cc describes the format).
struct FileStoreRecord {
  char type;  // 'S' set key=value, 'D' delete key, 'C' one user closed
  absl::string_view key;
  absl::string_view value;
};

// Parses the whole records at the start of `log`, bytes of the file that begin at a record
// boundary `log_offset` bytes into it, calling `on_record` for each in file order. Stops before a
// torn tail (a record cut short by a writer that died). Returns the bytes of the records
// delivered, or kDataLoss naming the file offset of a record of unknown type (the records before
// it were delivered). Pure: no I/O, any input.
absl::StatusOr<size_t> ParseFileStoreLog(absl::string_view log, uint64_t log_offset,
                                         absl::FunctionRef<void(const FileStoreRecord&)> on_record);

class FileStore : public Store {
 public:
  // Opens (creating if needed) the store file `path`, shared by `num_users` clients in all. Errors
  // name the path: kNotFound for a missing directory, kPermissionDenied, kInvalidArgument for a
  // directory or a different num_users, kFailedPrecondition for a file that is not a FileStore.
  static absl::StatusOr<std::unique_ptr<FileStore>> Open(const std::string& path, int num_users);
  // Records this client's close; the last of `num_users` removes the file.
  ~FileStore() override;

  absl::Status Set(absl::string_view key, absl::string_view value) override;
  absl::StatusOr<std::string> Get(absl::string_view key, absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  absl::StatusOr<std::string> CompareSet(absl::string_view key, absl::string_view expected,
                                         absl::string_view desired) override;
  absl::Status Wait(absl::Span<const std::string> keys, absl::Duration timeout) override;
  absl::StatusOr<bool> Check(absl::Span<const std::string> keys) override;
  absl::StatusOr<bool> DeleteKey(absl::string_view key) override;
  absl::StatusOr<int64_t> NumKeys() override;
  std::string Describe() const override;

  using Store::Get;
  using Store::Wait;

  const std::string& path() const { return path_; }

 private:
  class FileLock;

  FileStore(std::string path, int fd, int num_users);

  // Reads the records appended since the last call into map_. With `exclusive` (the caller holds
  // the exclusive lock) a torn record left by a crashed writer is cut off.
  absl::Status Replay(bool exclusive) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends one record at the end of the log (caller holds the exclusive lock, map_ is current).
  absl::Status Append(char type, absl::string_view key, absl::string_view value)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Brings map_ up to date under a shared lock if the file may have changed.
  absl::Status Refresh(const Deadline& deadline, bool force) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The keys of `keys` not in map_.
  std::vector<std::string> Missing(absl::Span<const std::string> keys) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Polls until every key in `keys` exists; the missing ones when `deadline` passes.
  absl::StatusOr<std::vector<std::string>> AwaitKeys(absl::Span<const std::string> keys,
                                                     const Deadline& deadline);

  const std::string path_;
  const int fd_;
  const int num_users_;

  // Serializes this object's threads: flock locks belong to the open file, which they share.
  mutable absl::Mutex mu_;
  off_t offset_ ABSL_GUARDED_BY(mu_) = 0;  // end of the last record replayed
  absl::flat_hash_map<std::string, std::string> map_ ABSL_GUARDED_BY(mu_);
  int64_t closed_users_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_STORE_FILE_STORE_H_
