// ShmSegment; see shm_segment.h.
//
// Note [Nameless segments]
// The creator makes the memory with memfd_create: a file of the kernel's internal tmpfs with no
// name in any file system. Other processes open it through the creator's descriptor table,
// /proc/<pid>/fd/<fd>, which the kernel allows a process of the same user (the access rule of
// ptrace's read mode; process_vm_readv needs more) and which means something only within one PID
// namespace, which is why HostIdentity includes it. The creator closes its descriptor once every
// rank has mapped the segment (StopSharing); the kernel frees the memory with the last mapping or
// descriptor. So a process killed at any moment, even before its peers mapped its segment, leaves
// nothing behind. (Named /dev/shm segments, used before, leaked when every process of a job was
// killed between creation and unlink, and a reaper can judge pids of its own PID namespace only.)
// The memory counts against the memory cgroup, not against the size of /dev/shm, so a
// container's small --shm-size does not limit it.
//
// The reference carries the memfd's own name, "paddle-<tag>-<random>"; after opening, Open reads
// /proc/self/fd/<its descriptor> back and compares, so it maps that very segment and never
// another file the creator holds (a reused descriptor number, or a forged store entry).
#include "paddle/collective/transport/shm/shm_segment.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace paddle {
namespace {

constexpr char kPrefix[] = "/paddle-";

std::string ErrnoText(int err) { return absl::StrCat(std::strerror(err), " (errno ", err, ")"); }

// Letters, digits, '-' and '_'.
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

// The inode of this process's PID namespace, 0 if unknown.
uint64_t PidNamespace() {
  struct stat st;
  if (stat("/proc/self/ns/pid", &st) != 0) return 0;
  return st.st_ino;
}

// What /proc/<pid>/fd/<fd> reads back as for a memfd named `memfd_name`.
std::string MemfdLink(absl::string_view memfd_name) {
  return absl::StrCat("/memfd:", memfd_name, " (deleted)");
}

struct Reference {
  uint64_t pid_namespace = 0;
  int pid = 0;
  int fd = -1;
  std::string memfd_name;  // "paddle-<tag>-<random>"
};

// "/paddle-<ns>-<pid>-<fd>-<tag>-<random>", as Create writes it.
bool ParseReference(const std::string& text, Reference* ref) {
  absl::string_view rest = text;
  if (text.size() > NAME_MAX || !absl::ConsumePrefix(&rest, kPrefix) || !ValidNameChars(rest)) {
    return false;
  }
  std::vector<absl::string_view> fields = absl::StrSplit(rest, absl::MaxSplits('-', 3));
  if (fields.size() != 4 || !absl::SimpleAtoi(fields[0], &ref->pid_namespace) ||
      !absl::SimpleAtoi(fields[1], &ref->pid) || ref->pid <= 0 ||
      !absl::SimpleAtoi(fields[2], &ref->fd) || ref->fd < 0 || fields[3].empty()) {
    return false;
  }
  ref->memfd_name = absl::StrCat("paddle-", fields[3]);
  return true;
}

absl::StatusOr<void*> Map(int fd, size_t bytes, const std::string& name) {
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat("mapping shared-memory segment ", name, " (",
                                                     bytes, " bytes): ", ErrnoText(errno)));
  }
  return data;
}

// Checks that `fd`, opened for `ref`, is that segment, ours and `bytes` long.
absl::Status CheckOpened(int fd, const std::string& name, const Reference& ref, size_t bytes) {
  char link[PATH_MAX];
  const ssize_t n = readlink(absl::StrCat("/proc/self/fd/", fd).c_str(), link, sizeof(link) - 1);
  const std::string found = n < 0 ? std::string("?") : std::string(link, n);
  if (found != MemfdLink(ref.memfd_name)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "refusing to map shared-memory segment ", name, ": descriptor ", ref.fd, " of pid ",
        ref.pid, " is \"", absl::CHexEscape(found.substr(0, 200)),
        "\", not that segment (the creator stopped sharing it and reused the number, or the "
        "store entry is forged)"));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    return absl::UnavailableError(
        absl::StrCat("fstat of shared-memory segment ", name, ": ", ErrnoText(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "refusing to map shared-memory segment %s: it is not a regular file (mode 0%o)", name,
        st.st_mode));
  }
  if (st.st_uid != geteuid()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "refusing to map shared-memory segment ", name, ": it belongs to uid ", st.st_uid,
        ", but this process runs as uid ", geteuid(),
        " and maps only segments of its own uid (every rank of a job must run as one user)"));
  }
  if (static_cast<size_t>(st.st_size) != bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat("shared-memory segment ", name, " has ", static_cast<int64_t>(st.st_size),
                     " bytes, expected ", bytes, " (ranks with different settings?)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Create(absl::string_view tag,
                                                               size_t bytes) {
  if (!ValidTag(tag)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared-memory segment tag \"", tag, "\" must be 1 to 64 letters, digits, '-' or '_'"));
  }
  if (bytes == 0) return absl::InvalidArgumentError("a shared-memory segment needs bytes > 0");
  std::random_device random;
  const std::string memfd_name =
      absl::StrCat("paddle-", tag, "-", absl::Hex(random(), absl::kZeroPad8));
  const int fd = memfd_create(memfd_name.c_str(), MFD_CLOEXEC);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("creating shared-memory segment ", memfd_name, " (",
                                               bytes, " bytes): ", ErrnoText(errno)));
  }
  const std::string name =
      absl::StrCat(kPrefix, PidNamespace(), "-", getpid(), "-", fd, "-", memfd_name.substr(7));
  // posix_fallocate reserves the pages now, so a lack of memory is an error here rather than a
  // SIGBUS at the first write into the mapping.
  const int err = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (err != 0) {
    close(fd);
    return absl::ResourceExhaustedError(absl::StrCat(
        "reserving ", bytes, " bytes for shared-memory segment ", name, ": ", ErrnoText(err),
        " (a memory cgroup limit of the job, or too little free memory)"));
  }
  absl::StatusOr<void*> data = Map(fd, bytes, name);
  if (!data.ok()) {
    close(fd);
    return data.status();
  }
  return std::unique_ptr<ShmSegment>(new ShmSegment(name, *data, bytes, fd));
}

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Open(const std::string& reference,
                                                             size_t bytes) {
  // The reference comes from the store: open only what Create could have made, so a wrong entry
  // can reach neither another program's file nor a path of its choosing.
  Reference ref;
  if (!ParseReference(reference, &ref)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "refusing to open shared-memory segment \"", absl::CHexEscape(reference.substr(0, 300)),
        "\": not a reference of this transport (\"", kPrefix,
        "<pid namespace>-<pid>-<fd>-<name>\", letters, digits, '-' or '_', at most ", NAME_MAX,
        " characters); another program uses this store prefix, or the store entry is corrupt"));
  }
  if (ref.pid_namespace != PidNamespace()) {
    return absl::FailedPreconditionError(
        absl::StrCat("shared-memory segment ", reference, " was made in PID namespace ",
                     ref.pid_namespace, ", this process runs in ", PidNamespace(),
                     ": ranks that share memory must see each other's processes (one container, or "
                     "PADDLE_HOST_ID set apart so they use TCP)"));
  }
  const int fd = open(absl::StrCat("/proc/", ref.pid, "/fd/", ref.fd).c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    return absl::UnavailableError(absl::StrCat(
        "opening shared-memory segment ", reference, " through /proc/", ref.pid, "/fd/", ref.fd,
        ": ", ErrnoText(e),
        e == ENOENT ? " (its creator exited, or stopped sharing it before this rank came)"
        : e == EACCES || e == EPERM
            ? " (the kernel lets only a process of the same user, allowed to trace the creator, "
              "open it: run every rank as one user, or PADDLE_TRANSPORT=tcp)"
            : ""));
  }
  absl::Status checked = CheckOpened(fd, reference, ref, bytes);
  if (!checked.ok()) {
    close(fd);
    return checked;
  }
  absl::StatusOr<void*> data = Map(fd, bytes, reference);
  close(fd);
  if (!data.ok()) return data.status();
  return std::unique_ptr<ShmSegment>(new ShmSegment(reference, *data, bytes, /*fd=*/-1));
}

ShmSegment::~ShmSegment() {
  StopSharing();
  munmap(data_, size_);
}

void ShmSegment::StopSharing() {
  if (fd_ < 0) return;
  close(fd_);
  fd_ = -1;
}

}  // namespace paddle
