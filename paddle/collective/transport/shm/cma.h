// Cross-memory attach (process_vm_readv): a receiver copies a large message straight out of the
// sender's buffer into its own, one copy instead of two through a ring.
//
// It needs the kernel's permission to read the peer (same user, and ptrace allowed: Yama's
// ptrace_scope or a container's seccomp profile may forbid it with EPERM or ENOSYS), so the
// transport probes it at setup towards each peer and falls back to the ring where it fails.
// PADDLE_SHM_CMA=0 turns it off.
#ifndef PADDLE_COLLECTIVE_TRANSPORT_SHM_CMA_H_
#define PADDLE_COLLECTIVE_TRANSPORT_SHM_CMA_H_

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace paddle {

inline constexpr char kShmCmaEnvVar[] = "PADDLE_SHM_CMA";

// PADDLE_SHM_CMA as a boolean, on when unset; kInvalidArgument naming it when malformed.
absl::StatusOr<bool> CmaEnabledByEnv();

// Reads `bytes` at `remote` in process `pid` into `local`. Errors carry the errno text.
absl::Status CmaRead(pid_t pid, uint64_t remote, void* local, size_t bytes);

// Whether this process can read the 8-byte word at `remote` in `pid` and finds `expected` there;
// `why` says why not.
bool CmaProbe(pid_t pid, uint64_t remote, uint64_t expected, std::string* why);

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_TRANSPORT_SHM_CMA_H_
