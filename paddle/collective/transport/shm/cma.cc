// CmaRead and CmaProbe; see cma.h.
#include "paddle/collective/transport/shm/cma.h"

#include <sys/uio.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "paddle/core/settings.h"
#include "paddle/core/status.h"

namespace paddle {

absl::StatusOr<bool> CmaEnabledByEnv() {
  ASSIGN_OR_RETURN(std::optional<bool> on, BoolSetting(kShmCmaEnvVar));
  return on.value_or(true);
}

absl::Status CmaRead(pid_t pid, uint64_t remote, void* local, size_t bytes) {
  size_t done = 0;
  while (done < bytes) {
    iovec to{static_cast<char*>(local) + done, bytes - done};
    iovec from{reinterpret_cast<void*>(remote + done), bytes - done};
    const ssize_t n = process_vm_readv(pid, &to, 1, &from, 1, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      return absl::UnavailableError(
          absl::StrCat("process_vm_readv of ", bytes - done, " bytes at offset ", done,
                       " from pid ", pid, " failed: ", std::strerror(err), " (errno ", err, ")"));
    }
    if (n == 0) {
      return absl::UnavailableError(
          absl::StrCat("process_vm_readv from pid ", pid, " made no progress at offset ", done));
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

bool CmaProbe(pid_t pid, uint64_t remote, uint64_t expected, std::string* why) {
  uint64_t word = 0;
  absl::Status read = CmaRead(pid, remote, &word, sizeof(word));
  if (!read.ok()) {
    *why = std::string(read.message());
    return false;
  }
  if (word != expected) {
    *why = absl::StrCat("read ", word, " instead of the probe value ", expected);
    return false;
  }
  return true;
}

}  // namespace paddle
