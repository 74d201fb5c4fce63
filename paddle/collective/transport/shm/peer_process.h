// Which process a peer on this host is, and whether it still runs.
//
// A rank that waits on shared memory cannot learn from a socket that its peer died: it asks the
// kernel. A `ProcessIdentity` is (pid, start time in clock ticks since boot, from
// /proc/<pid>/stat), so a pid recycled by a new process does not pass for the old one.
#ifndef PADDLE_COLLECTIVE_TRANSPORT_SHM_PEER_PROCESS_H_
#define PADDLE_COLLECTIVE_TRANSPORT_SHM_PEER_PROCESS_H_

#include <cstdint>
#include <string>

namespace paddle {

struct ProcessIdentity {
  int32_t pid = 0;
  uint64_t start_ticks = 0;

  // This process.
  static ProcessIdentity Self();
  // True while that process exists and has not exited (a zombie counts as exited).
  bool IsAlive() const;
  // "pid 1234"
  std::string ToString() const;
};

}  // namespace paddle

#endif  // PADDLE_COLLECTIVE_TRANSPORT_SHM_PEER_PROCESS_H_
