// FileStore: the log format, the locking and the cleanup protocol.
//
// File layout (all integers little-endian):
//   header  "PDLSTOR1" | u32 num_users | u32 0                                   (16 bytes)
//   record  u8 type | u32 key_len | u32 value_len | key | value, type one of
//           'S' set key=value, 'D' delete key, 'C' one user closed (key, value empty).
// Writers hold an exclusive flock while they replay to the end and append, so every record is
// written whole, in one order all readers agree on, after the writer has seen every earlier
// record (which is what makes Add and CompareSet atomic). Readers hold a shared flock while they
// replay. A writer that dies halfway through a record leaves a torn tail; readers stop before it
// and the next writer cuts it off.
//
// Cleanup: each client appends 'C' when destroyed; the one that appends the num_users-th 'C'
// unlinks the file while still holding the exclusive lock, after checking that `path` still
// names the file it has open (so it never removes a newer job's file).
#include "paddle/collective/store/file_store.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "paddle/collective/store/hash_store.h"
#include "paddle/core/logging.h"
#include "paddle/core/status.h"

namespace paddle {
namespace {

constexpr char kMagic[8] = {'P', 'D', 'L', 'S', 'T', 'O', 'R', '1'};
constexpr off_t kHeaderBytes = 16;
constexpr size_t kRecordHeaderBytes = 9;
constexpr char kSet = 'S';
constexpr char kDelete = 'D';
constexpr char kClosed = 'C';

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

std::string Errno(int err) { return absl::StrCat(std::strerror(err), " (errno ", err, ")"); }

std::string DirName(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Writes all of `data` at `offset`, retrying short writes.
absl::Status WriteAll(int fd, absl::string_view data, off_t offset, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = pwrite(fd, data.data(), data.size(), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      return absl::UnavailableError(absl::StrFormat(
          "FileStore %s: writing %d bytes at offset %d failed: %s%s", path, data.size(), offset,
          Errno(err), err == ENOSPC ? "; the filesystem is full" : ""));
    }
    data.remove_prefix(n);
    offset += n;
  }
  return absl::OkStatus();
}

// Reads exactly `n` bytes at `offset` (fewer only if the file is shorter).
absl::StatusOr<std::string> ReadAt(int fd, size_t n, off_t offset, const std::string& path) {
  std::string buf(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t r = pread(fd, &buf[got], n - got, offset + got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      return absl::UnavailableError(
          absl::StrFormat("FileStore %s: reading %d bytes at offset %d "
                          "failed: %s",
                          path, n, offset, Errno(errno)));
    }
    if (r == 0) break;
    got += r;
  }
  buf.resize(got);
  return buf;
}

absl::StatusOr<off_t> FileSize(int fd, const std::string& path) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    return absl::UnavailableError(
        absl::StrFormat("FileStore %s: fstat failed: %s", path, Errno(errno)));
  }
  return st.st_size;
}

// Whether `path` still names the file open as `fd` (false once it was unlinked or replaced).
bool PathNamesFile(const std::string& path, int fd) {
  struct stat by_path, by_fd;
  if (stat(path.c_str(), &by_path) != 0 || fstat(fd, &by_fd) != 0) return false;
  return by_path.st_dev == by_fd.st_dev && by_path.st_ino == by_fd.st_ino;
}

// The error for a failed open(2) of `path`, saying what to change.
absl::Status OpenError(const std::string& path, int err) {
  std::string what =
      absl::StrFormat("FileStore: cannot open %s for reading and writing: %s", path, Errno(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(
          absl::StrCat(what, "; the directory ", DirName(path),
                       " does not exist: create it (on a filesystem every "
                       "process of the job can see) or choose another path"));
    case EACCES:
    case EPERM:
    case EROFS:
      return absl::PermissionDeniedError(absl::StrFormat(
          "%s; running as uid %d: fix the permissions of %s and of its directory %s, or choose "
          "another path",
          what, geteuid(), path, DirName(path)));
    case EISDIR:
      return absl::InvalidArgumentError(
          absl::StrCat(what, "; it is a directory, FileStore needs the path of a file in one"));
    case ENOTDIR:
      return absl::InvalidArgumentError(
          absl::StrCat(what, "; a component of the path is not a directory"));
    default:
      return absl::UnavailableError(what);
  }
}

}  // namespace

absl::StatusOr<size_t> ParseFileStoreLog(
    absl::string_view log, uint64_t log_offset,
    absl::FunctionRef<void(const FileStoreRecord&)> on_record) {
  size_t pos = 0;
  while (log.size() - pos >= kRecordHeaderBytes) {
    const char type = log[pos];
    const uint64_t key_len = GetU32(&log[pos + 1]);
    const uint64_t value_len = GetU32(&log[pos + 5]);
    // 64-bit sums of 32-bit lengths cannot overflow.
    if (kRecordHeaderBytes + key_len + value_len > log.size() - pos) break;  // torn tail
    if (type != kSet && type != kDelete && type != kClosed) {
      return absl::DataLossError(absl::StrFormat(
          "unknown record type 0x%02x at offset %d; the file is corrupt or was written by "
          "something else",
          static_cast<unsigned char>(type), log_offset + pos));
    }
    on_record(FileStoreRecord{type, log.substr(pos + kRecordHeaderBytes, key_len),
                              log.substr(pos + kRecordHeaderBytes + key_len, value_len)});
    pos += kRecordHeaderBytes + key_len + value_len;
  }
  return pos;
}

// An flock(2) on the store file, taken with a deadline and released on destruction. flock is
// polled with LOCK_NB because a blocking flock cannot be bounded; holders keep it for
// microseconds, so the backoff stays short.
class FileStore::FileLock {
 public:
  FileLock(int fd, const std::string& path) : fd_(fd), path_(path) {}
  ~FileLock() {
    if (held_) flock(fd_, LOCK_UN);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

  absl::Status Acquire(bool exclusive, const Deadline& deadline) {
    absl::Duration backoff = absl::Microseconds(20);
    while (true) {
      if (flock(fd_, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) == 0) {
        held_ = true;
        return absl::OkStatus();
      }
      int err = errno;
      if (err == EINTR) continue;
      if (err != EWOULDBLOCK) {
        return absl::UnavailableError(absl::StrFormat(
            "FileStore %s: flock failed: %s%s", path_, Errno(err),
            err == ENOLCK ? "; the filesystem does not support file locks: put the store on a "
                            "local filesystem or an NFS mount with locking enabled"
                          : ""));
      }
      if (deadline.Expired()) {
        return deadline.TimeoutError(absl::StrFormat(
            "FileStore %s: taking the %s file lock (another process holds it: a stopped or hung "
            "member of the job?)",
            path_, exclusive ? "exclusive" : "shared"));
      }
      absl::SleepFor(std::min(backoff, deadline.Remaining()));
      backoff = std::min(backoff * 2, absl::Milliseconds(2));
    }
  }

 private:
  const int fd_;
  const std::string& path_;
  bool held_ = false;
};

absl::StatusOr<std::unique_ptr<FileStore>> FileStore::Open(const std::string& path, int num_users) {
  if (path.empty()) return absl::InvalidArgumentError("FileStore: the path is empty");
  if (num_users < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("FileStore %s: num_users is %d, it must be at least 1", path, num_users));
  }
  Deadline deadline = Deadline::After(DefaultTimeout(TimeoutKind::kStore));
  // Retried when the file is unlinked (by the last user of an earlier job) between our open and
  // our lock: we must not join a file nobody else will find.
  for (int attempt = 0;; ++attempt) {
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) return OpenError(path, errno);
    auto fail = [fd](absl::Status s) {
      close(fd);
      return s;
    };
    absl::Status checked;
    {
      FileLock lock(fd, path);
      absl::Status locked = lock.Acquire(/*exclusive=*/true, deadline);
      if (!locked.ok()) return fail(locked);
      if (!PathNamesFile(path, fd)) {
        if (attempt < 100) {
          close(fd);
          continue;
        }
        return fail(absl::UnavailableError(
            absl::StrFormat("FileStore %s: the file keeps being removed while opening it", path)));
      }
      absl::StatusOr<std::string> header = ReadAt(fd, kHeaderBytes, 0, path);
      if (!header.ok()) return fail(header.status());
      std::string magic(kMagic, sizeof(kMagic));
      if (header->size() < static_cast<size_t>(kHeaderBytes) &&
          magic.compare(0, header->size(), *header) == 0) {
        // New (or a header torn by a creator that died): write it.
        std::string fresh = magic;
        PutU32(&fresh, static_cast<uint32_t>(num_users));
        PutU32(&fresh, 0);
        if (ftruncate(fd, 0) != 0) {
          return fail(absl::UnavailableError(
              absl::StrFormat("FileStore %s: ftruncate failed: %s", path, Errno(errno))));
        }
        checked = WriteAll(fd, fresh, 0, path);
      } else if (header->size() < static_cast<size_t>(kHeaderBytes) ||
                 header->compare(0, sizeof(kMagic), magic) != 0) {
        checked = absl::FailedPreconditionError(absl::StrFormat(
            "FileStore %s: the file exists and is not a FileStore file; remove it or choose "
            "another path",
            path));
      } else if (uint32_t made_for = GetU32(header->data() + 8);
                 made_for != static_cast<uint32_t>(num_users)) {
        checked = absl::InvalidArgumentError(absl::StrFormat(
            "FileStore %s was created for %d users but this Open says %d: every user of one "
            "store must pass the same num_users (the world size, for file:// rendezvous); if the "
            "file is left over from an earlier job, remove it or use a fresh path per job",
            path, made_for, num_users));
      }
    }
    if (!checked.ok()) return fail(checked);
    return std::unique_ptr<FileStore>(new FileStore(path, fd, num_users));
  }
}

FileStore::FileStore(std::string path, int fd, int num_users)
    : path_(std::move(path)), fd_(fd), num_users_(num_users) {
  absl::MutexLock lock(&mu_);
  offset_ = kHeaderBytes;
}

FileStore::~FileStore() {
  {
    absl::MutexLock lock(&mu_);
    FileLock file_lock(fd_, path_);
    absl::Status s = file_lock.Acquire(/*exclusive=*/true, Deadline::After(timeout()));
    if (s.ok()) s = Replay(/*exclusive=*/true);
    if (s.ok()) s = Append(kClosed, "", "");
    if (!s.ok()) {
      PADDLE_LOG(WARN, STORE) << "closing " << Describe() << ": " << s
                              << "; the file will not be removed";
    } else if (closed_users_ >= num_users_ && PathNamesFile(path_, fd_)) {
      if (unlink(path_.c_str()) != 0) {
        PADDLE_LOG(WARN, STORE) << Describe() << ": removing the file after its last user failed: "
                                << Errno(errno);
      } else {
        PADDLE_LOG(INFO, STORE) << Describe() << ": removed after the last of " << num_users_
                                << " users closed it";
      }
    }
  }
  close(fd_);
}

absl::Status FileStore::Replay(bool exclusive) {
  ASSIGN_OR_RETURN(off_t size, FileSize(fd_, path_));
  if (size < offset_) {
    return absl::DataLossError(absl::StrFormat(
        "FileStore %s: the file shrank from %d to %d bytes while in use; something other than "
        "FileStore rewrote or truncated it",
        path_, offset_, size));
  }
  if (size == offset_) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::string buf, ReadAt(fd_, size - offset_, offset_, path_));
  absl::StatusOr<size_t> parsed =
      ParseFileStoreLog(buf, static_cast<uint64_t>(offset_), [this](const FileStoreRecord& r) {
        mu_.AssertHeld();
        switch (r.type) {
          case kSet:
            map_[r.key] = std::string(r.value);
            break;
          case kDelete:
            map_.erase(r.key);
            break;
          case kClosed:
            ++closed_users_;
            break;
        }
      });
  if (!parsed.ok()) return Annotate(parsed.status(), Describe());
  offset_ += *parsed;
  if (offset_ < size && exclusive) {
    // Only a writer that died mid-record leaves bytes here, since writers hold the exclusive lock.
    PADDLE_LOG(WARN, STORE) << Describe() << ": cutting off a torn record of " << size - offset_
                            << " bytes at offset " << offset_ << " (a writer died mid-write)";
    if (ftruncate(fd_, offset_) != 0) {
      return absl::UnavailableError(
          absl::StrFormat("FileStore %s: ftruncate failed: %s", path_, Errno(errno)));
    }
  }
  return absl::OkStatus();
}

absl::Status FileStore::Append(char type, absl::string_view key, absl::string_view value) {
  if (key.size() > UINT32_MAX || value.size() > UINT32_MAX) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: a key of %d bytes with a value of %d bytes is too large (4 GiB each at most)",
        Describe(), key.size(), value.size()));
  }
  std::string record(1, type);
  PutU32(&record, static_cast<uint32_t>(key.size()));
  PutU32(&record, static_cast<uint32_t>(value.size()));
  absl::StrAppend(&record, key, value);
  absl::Status written = WriteAll(fd_, record, offset_, path_);
  if (!written.ok()) {
    // Leave no torn record behind if we can help it (else the next writer cuts it off).
    if (ftruncate(fd_, offset_) != 0) {
      PADDLE_LOG(WARN, STORE) << Describe() << ": ftruncate after a failed write: " << Errno(errno);
    }
    return written;
  }
  offset_ += record.size();
  switch (type) {
    case kSet:
      map_[key] = std::string(value);
      break;
    case kDelete:
      map_.erase(key);
      break;
    case kClosed:
      ++closed_users_;
      break;
  }
  return absl::OkStatus();
}

absl::Status FileStore::Refresh(const Deadline& deadline, bool force) {
  if (!force) {
    ASSIGN_OR_RETURN(off_t size, FileSize(fd_, path_));
    if (size == offset_) return absl::OkStatus();
  }
  FileLock lock(fd_, path_);
  RETURN_IF_ERROR(lock.Acquire(/*exclusive=*/false, deadline));
  return Replay(/*exclusive=*/false);
}

std::vector<std::string> FileStore::Missing(absl::Span<const std::string> keys) const {
  std::vector<std::string> missing;
  for (const std::string& key : keys) {
    if (!map_.contains(key)) missing.push_back(key);
  }
  return missing;
}

absl::StatusOr<std::vector<std::string>> FileStore::AwaitKeys(absl::Span<const std::string> keys,
                                                              const Deadline& deadline) {
  absl::Duration backoff = absl::Microseconds(200);
  for (int poll = 0;; ++poll) {
    {
      absl::MutexLock lock(&mu_);
      // The size check spares a lock per poll; every 8th poll replays anyway, because on a
      // shared filesystem the cached file size may lag behind other hosts' appends.
      absl::Status refreshed = Refresh(deadline, /*force=*/poll % 8 == 0);
      // A lock wait that ran into the deadline reports the keys, like any other timeout.
      if (!refreshed.ok() && !(deadline.Expired() && absl::IsDeadlineExceeded(refreshed))) {
        return refreshed;
      }
      std::vector<std::string> missing = Missing(keys);
      if (missing.empty() || deadline.Expired()) return missing;
    }
    absl::SleepFor(std::min(backoff, deadline.Remaining()));
    backoff = std::min(backoff * 2, absl::Milliseconds(10));
  }
}

absl::Status FileStore::Set(absl::string_view key, absl::string_view value) {
  absl::MutexLock lock(&mu_);
  FileLock file_lock(fd_, path_);
  RETURN_IF_ERROR(file_lock.Acquire(/*exclusive=*/true, Deadline::After(timeout())));
  RETURN_IF_ERROR(Replay(/*exclusive=*/true));
  return Append(kSet, key, value);
}

absl::StatusOr<std::string> FileStore::Get(absl::string_view key, absl::Duration timeout) {
  Deadline deadline = Deadline::After(timeout);
  std::vector<std::string> keys = {std::string(key)};
  while (true) {
    ASSIGN_OR_RETURN(std::vector<std::string> missing, AwaitKeys(keys, deadline));
    if (!missing.empty()) return StoreTimeoutError(*this, "Get", missing, 1, deadline);
    absl::MutexLock lock(&mu_);
    auto it = map_.find(keys[0]);
    if (it != map_.end()) return it->second;
    // Deleted by another thread of this client between the two locks: wait again.
  }
}

absl::StatusOr<int64_t> FileStore::Add(absl::string_view key, int64_t delta) {
  absl::MutexLock lock(&mu_);
  FileLock file_lock(fd_, path_);
  RETURN_IF_ERROR(file_lock.Acquire(/*exclusive=*/true, Deadline::After(timeout())));
  RETURN_IF_ERROR(Replay(/*exclusive=*/true));
  auto it = map_.find(key);
  ASSIGN_OR_RETURN(int64_t sum,
                   AddToStoredInteger(*this, key, it == map_.end() ? "" : it->second, delta));
  RETURN_IF_ERROR(Append(kSet, key, absl::StrCat(sum)));
  return sum;
}

absl::StatusOr<std::string> FileStore::CompareSet(absl::string_view key, absl::string_view expected,
                                                  absl::string_view desired) {
  absl::MutexLock lock(&mu_);
  FileLock file_lock(fd_, path_);
  RETURN_IF_ERROR(file_lock.Acquire(/*exclusive=*/true, Deadline::After(timeout())));
  RETURN_IF_ERROR(Replay(/*exclusive=*/true));
  auto it = map_.find(key);
  if (it == map_.end() ? expected.empty() : it->second == expected) {
    RETURN_IF_ERROR(Append(kSet, key, desired));
    return std::string(desired);
  }
  return it == map_.end() ? std::string() : it->second;
}

absl::Status FileStore::Wait(absl::Span<const std::string> keys, absl::Duration timeout) {
  Deadline deadline = Deadline::After(timeout);
  ASSIGN_OR_RETURN(std::vector<std::string> missing, AwaitKeys(keys, deadline));
  if (!missing.empty()) return StoreTimeoutError(*this, "Wait", missing, keys.size(), deadline);
  return absl::OkStatus();
}

absl::StatusOr<bool> FileStore::Check(absl::Span<const std::string> keys) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(Refresh(Deadline::After(timeout()), /*force=*/true));
  return Missing(keys).empty();
}

absl::StatusOr<bool> FileStore::DeleteKey(absl::string_view key) {
  absl::MutexLock lock(&mu_);
  FileLock file_lock(fd_, path_);
  RETURN_IF_ERROR(file_lock.Acquire(/*exclusive=*/true, Deadline::After(timeout())));
  RETURN_IF_ERROR(Replay(/*exclusive=*/true));
  if (!map_.contains(key)) return false;
  RETURN_IF_ERROR(Append(kDelete, key, ""));
  return true;
}

absl::StatusOr<int64_t> FileStore::NumKeys() {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(Refresh(Deadline::After(timeout()), /*force=*/true));
  return static_cast<int64_t>(map_.size());
}

std::string FileStore::Describe() const { return absl::StrCat("FileStore ", path_); }

}  // namespace paddle
