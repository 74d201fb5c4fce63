// ProcessIdentity; see peer_process.h.
#include "paddle/collective/transport/shm/peer_process.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"

namespace paddle {
namespace {

// Fields 3 (state) and 22 (starttime) of /proc/<pid>/stat; false if it cannot be read. The
// command name (field 2) may contain spaces and parentheses: parse after the last ')'.
// Plain read(2): the process may exit between open and read, which fails the read with ESRCH,
// and libstdc++'s filebuf throws on that (std::terminate in a worker, seen under TSan).
bool ReadStat(int32_t pid, char* state, uint64_t* start_ticks) {
  const std::string path = absl::StrCat("/proc/", pid, "/stat");
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  std::string text;
  char buffer[512];
  while (true) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // end, or the process is gone (ESRCH): parse what arrived, if anything
    text.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  const size_t paren = text.rfind(')');
  if (paren == std::string::npos) return false;
  std::istringstream rest(text.substr(paren + 1));
  std::string field;
  rest >> *state;
  // Fields 4..21, then 22.
  for (int i = 4; i <= 21; ++i) rest >> field;
  rest >> *start_ticks;
  return static_cast<bool>(rest);
}

}  // namespace

ProcessIdentity ProcessIdentity::Self() {
  ProcessIdentity id;
  id.pid = static_cast<int32_t>(getpid());
  char state = 0;
  ReadStat(id.pid, &state, &id.start_ticks);
  return id;
}

bool ProcessIdentity::IsAlive() const {
  char state = 0;
  uint64_t start = 0;
  if (!ReadStat(pid, &state, &start)) return false;
  if (start != start_ticks) return false;  // the pid belongs to another process now
  return state != 'Z' && state != 'X' && state != 'x';
}

std::string ProcessIdentity::ToString() const { return absl::StrCat("pid ", pid); }

}  // namespace paddle
