// ProcessIdentity; see peer_process.h.
#include "paddle/collective/transport/shm/peer_process.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"

namespace paddle {
namespace {

// Fields 3 (state) and 22 (starttime) of /proc/<pid>/stat; false if it cannot be read. The
// command name (field 2) may contain spaces and parentheses: parse after the last ')'.
bool ReadStat(int32_t pid, char* state, uint64_t* start_ticks) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
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
