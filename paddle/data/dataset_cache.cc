#include "paddle/data/dataset_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "paddle/core/fnv1a.h"
#include "paddle/core/settings.h"
#include "paddle/core/status.h"

namespace paddle {
namespace data {
namespace {

namespace fs = std::filesystem;

absl::Status ErrnoStatus(int error, absl::string_view what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(error)));
}

// Removes `path` and everything under it; errors are ignored (what is left is only garbage).
void RemoveAll(const fs::path& path) {
  std::error_code ignored;
  fs::remove_all(path, ignored);
}

// An exclusive flock on `path`, released by the destructor (or by the process's death).
class FileLock {
 public:
  static absl::StatusOr<FileLock> Acquire(const std::string& path, absl::Duration wait) {
    const int fd = open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoStatus(errno, absl::StrCat("opening the lock file ", path));
    const absl::Time deadline = absl::Now() + wait;
    while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK && errno != EINTR) {
        const int error = errno;
        close(fd);
        return ErrnoStatus(error, absl::StrCat("locking ", path));
      }
      if (absl::Now() >= deadline) {
        close(fd);
        return absl::DeadlineExceededError(
            absl::StrCat("waited ", absl::FormatDuration(wait), " for ", path,
                         ", held by another process making the same data set; if none is running "
                         "(fuser ",
                         path, "), delete the file and try again"));
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
    return FileLock(fd);
  }
  FileLock(FileLock&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  FileLock& operator=(FileLock&&) = delete;
  ~FileLock() {
    if (fd_ >= 0) close(fd_);  // releases the lock
  }

 private:
  explicit FileLock(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace

absl::StatusOr<std::string> DatasetCacheRoot() {
  if (std::optional<std::string> dir = StringSetting("PADDLE_CACHE_DIR")) return *dir;
  const char* home = std::getenv("HOME");
  if (home == nullptr || *home == '\0') {
    return absl::FailedPreconditionError(
        "neither PADDLE_CACHE_DIR nor HOME is set: set PADDLE_CACHE_DIR to the folder where data "
        "sets made on first use should be kept");
  }
  return absl::StrCat(home, "/.cache/paddle");
}

absl::StatusOr<std::string> CachedFolder(const std::string& name, const std::string& key,
                                         const MakeFolderFn& make, absl::Duration wait) {
  ASSIGN_OR_RETURN(const std::string root, DatasetCacheRoot());
  const std::string folder = absl::StrFormat("%s/%s-%016x", root, name, Fnv1a(key));
  std::error_code error;
  if (fs::is_directory(folder, error)) return folder;
  fs::create_directories(root, error);
  if (error) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create the data set cache ", root, ": ", error.message(),
                     "; set PADDLE_CACHE_DIR to a folder you can write"));
  }
  ASSIGN_OR_RETURN(FileLock lock, FileLock::Acquire(absl::StrCat(root, "/", name, ".lock"), wait));
  if (fs::is_directory(folder, error)) return folder;  // made while this process waited
  const std::string partial = folder + ".partial";
  RemoveAll(partial);
  if (!fs::create_directory(partial, error)) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", partial, ": ", error.message()));
  }
  if (absl::Status st = make(partial); !st.ok()) {
    RemoveAll(partial);
    return Annotate(st, absl::StrCat("making the data set ", name, " in ", partial));
  }
  {
    std::ofstream out(partial + "/CACHE_KEY");
    out << key << "\n";
    if (!out) return absl::DataLossError(absl::StrCat("cannot write ", partial, "/CACHE_KEY"));
  }
  fs::rename(partial, folder, error);
  if (error) {
    RemoveAll(partial);
    return absl::InternalError(
        absl::StrCat("cannot rename ", partial, " to ", folder, ": ", error.message()));
  }
  // Older entries of this name (other keys) and the .partial of any killed maker.
  for (const fs::directory_entry& e : fs::directory_iterator(root, error)) {
    const std::string other = e.path().string();
    if (other != folder && e.is_directory() &&
        absl::StartsWith(e.path().filename().string(), name + "-")) {
      RemoveAll(e.path());
    }
  }
  return folder;
}

CacheProgress::CacheProgress(std::string what, std::string unit)
    : what_(std::move(what)), unit_(std::move(unit)), tty_(isatty(2) == 1), start_(absl::Now()) {
  std::fprintf(stderr, "%s (once; kept in the data set cache)%s", what_.c_str(), tty_ ? "" : "\n");
  std::fflush(stderr);
}

void CacheProgress::Update(int64_t done, int64_t total) {
  if (!tty_) return;
  const absl::Time now = absl::Now();
  if (now - last_ < absl::Milliseconds(200) && done < total) return;
  last_ = now;
  const int width = 30;
  const int filled = total > 0 ? static_cast<int>(width * done / total) : width;
  std::fprintf(stderr, "\r%s [%s%s] %lld/%lld %s, %.1f s\x1b[K", what_.c_str(),
               std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(),
               static_cast<long long>(done), static_cast<long long>(total), unit_.c_str(),
               absl::ToDoubleSeconds(now - start_));
  std::fflush(stderr);
}

void CacheProgress::Done(absl::string_view where) {
  absl::ConsumeSuffix(&where, ".partial");  // where it is kept once CachedFolder renames it
  std::fprintf(stderr, "%s%s: done in %.1f s: %.*s\n", tty_ ? "\r\x1b[K" : "", what_.c_str(),
               absl::ToDoubleSeconds(absl::Now() - start_), static_cast<int>(where.size()),
               where.data());
  std::fflush(stderr);
}

}  // namespace data
}  // namespace paddle
