// ShmSegment; see shm_segment.h.
//
// Note [Segment cleanup]
// The creator unlinks a segment's name as soon as every rank has mapped it (the users of this
// class call Unlink then), so from that moment a crash of any process leaks nothing. Between
// creation and that moment a killed creator would leave /dev/shm/paddle-<ns>-<pid>-... behind.
// The name carries the creator's pid for that case: Create first scans /dev/shm for names of
// this scheme whose pid no longer runs and removes them, the way a reaper would, without
// needing one. A pid means something only within its PID namespace, and /dev/shm is often
// shared across them (Bazel's sandbox runs each test in its own; containers may share an IPC
// namespace), so the name also carries the PID namespace's inode and only segments of this
// process's namespace are judged. (A recycled pid keeps its stale segment until that process
// exits too; the cost is only memory.)
#include "paddle/collective/transport/shm/shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace paddle {
namespace {

constexpr char kPrefix[] = "paddle-";

std::string ErrnoText(int err) { return absl::StrCat(std::strerror(err), " (errno ", err, ")"); }

// Letters, digits, '-' and '_': what the names Create makes consist of after their '/'.
bool ValidNameChars(absl::string_view text) {
  for (char c : text) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_';
    if (!ok) return false;
  }
  return true;
}

bool ValidTag(absl::string_view tag) {
  return !tag.empty() && tag.size() <= 64 && ValidNameChars(tag);
}

// The inode of this process's PID namespace, "0" if unknown.
std::string PidNamespace() {
  struct stat st;
  if (stat("/proc/self/ns/pid", &st) != 0) return "0";
  return absl::StrCat(st.st_ino);
}

// Note [Segment cleanup]: removes /dev/shm/paddle-<ns>-<pid>-* of processes of this PID
// namespace that no longer exist.
void RemoveSegmentsOfDeadProcesses() {
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return;
  const std::string own_prefix = absl::StrCat(kPrefix, PidNamespace(), "-");
  while (struct dirent* entry = readdir(dir)) {
    absl::string_view name(entry->d_name);
    if (!absl::ConsumePrefix(&name, own_prefix)) continue;
    const size_t dash = name.find('-');
    int pid = 0;
    if (dash == absl::string_view::npos || !absl::SimpleAtoi(name.substr(0, dash), &pid) ||
        pid <= 0) {
      continue;
    }
    if (kill(pid, 0) == 0 || errno == EPERM) continue;  // still running (or not ours to judge)
    shm_unlink(absl::StrCat("/", entry->d_name).c_str());
  }
  closedir(dir);
}

std::string FreeSpaceHint() {
  struct statvfs vfs;
  if (statvfs("/dev/shm", &vfs) != 0) return "";
  const double free_mib = static_cast<double>(vfs.f_bavail) * vfs.f_frsize / (1 << 20);
  return absl::StrCat("; /dev/shm has ", static_cast<int64_t>(free_mib),
                      " MiB free (a container may need a larger --shm-size)");
}

absl::StatusOr<void*> Map(int fd, size_t bytes, const std::string& name) {
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat("mapping shared-memory segment ", name, " (",
                                                     bytes, " bytes): ", ErrnoText(errno)));
  }
  return data;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Create(absl::string_view tag,
                                                               size_t bytes) {
  if (!ValidTag(tag)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared-memory segment tag \"", tag, "\" must be 1 to 64 letters, digits, '-' or '_'"));
  }
  if (bytes == 0) return absl::InvalidArgumentError("a shared-memory segment needs bytes > 0");
  RemoveSegmentsOfDeadProcesses();
  std::random_device random;
  const std::string name = absl::StrCat("/", kPrefix, PidNamespace(), "-", getpid(), "-", tag, "-",
                                        absl::Hex(random(), absl::kZeroPad8));
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("creating shared-memory segment ", name, ": ", ErrnoText(errno)));
  }
  // posix_fallocate reserves the pages now, so a full /dev/shm is an error here rather than a
  // SIGBUS at the first write into the mapping.
  const int err = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (err != 0) {
    close(fd);
    shm_unlink(name.c_str());
    return absl::ResourceExhaustedError(absl::StrCat("reserving ", bytes,
                                                     " bytes for shared-memory segment ", name,
                                                     ": ", ErrnoText(err), FreeSpaceHint()));
  }
  absl::StatusOr<void*> data = Map(fd, bytes, name);
  close(fd);
  if (!data.ok()) {
    shm_unlink(name.c_str());
    return data.status();
  }
  return std::unique_ptr<ShmSegment>(new ShmSegment(name, *data, bytes, /*owner=*/true));
}

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Open(const std::string& name,
                                                             size_t bytes) {
  // The name comes from the store: open only names Create could have made, so a wrong entry can
  // neither reach another program's segment nor a path outside /dev/shm.
  absl::string_view rest = name;
  const bool ours = absl::ConsumePrefix(&rest, absl::StrCat("/", kPrefix)) && !rest.empty() &&
                    name.size() <= NAME_MAX && ValidNameChars(rest);
  if (!ours) {
    return absl::InvalidArgumentError(absl::StrCat(
        "refusing to open shared-memory segment \"", absl::CHexEscape(name.substr(0, 300)),
        "\": not a name of this transport (\"/", kPrefix,
        "\" then letters, digits, '-' or '_', at most ", NAME_MAX,
        " characters); another program uses this store prefix, or the store entry is corrupt"));
  }
  const int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int e = errno;
    return absl::UnavailableError(absl::StrCat(
        "opening shared-memory segment ", name, ": ", ErrnoText(e),
        e == ENOENT ? " (its creator unlinked it already or runs on another host or in another "
                      "container: ranks that share memory need one /dev/shm)"
                    : ""));
  }
  // Checked on the open file, so the name cannot be swapped between the check and the mapping.
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("fstat of shared-memory segment ", name, ": ", ErrnoText(e)));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return absl::PermissionDeniedError(
        absl::StrFormat("refusing to map shared-memory segment %s: it is not a regular file "
                        "(mode 0%o)",
                        name, st.st_mode));
  }
  if (st.st_uid != geteuid()) {
    close(fd);
    return absl::PermissionDeniedError(absl::StrCat(
        "refusing to map shared-memory segment ", name, ": it belongs to uid ", st.st_uid,
        ", but this process runs as uid ", geteuid(),
        " and maps only segments of its own uid (every rank of a job must run as one user)"));
  }
  if (static_cast<size_t>(st.st_size) != bytes) {
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("shared-memory segment ", name, " has ", static_cast<int64_t>(st.st_size),
                     " bytes, expected ", bytes, " (ranks with different settings?)"));
  }
  absl::StatusOr<void*> data = Map(fd, bytes, name);
  close(fd);
  if (!data.ok()) return data.status();
  return std::unique_ptr<ShmSegment>(new ShmSegment(name, *data, bytes, /*owner=*/false));
}

ShmSegment::~ShmSegment() {
  Unlink();
  munmap(data_, size_);
}

void ShmSegment::Unlink() {
  if (!linked_) return;
  shm_unlink(name_.c_str());
  linked_ = false;
}

}  // namespace paddle
