// HostIdentity; see host_identity.h.
#include "paddle/collective/transport/shm/host_identity.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "paddle/core/settings.h"

namespace paddle {
namespace {

std::string NamespaceInode(const char* kind) {
  struct stat st;
  if (stat(absl::StrCat("/proc/self/ns/", kind).c_str(), &st) != 0) return "?";
  return absl::StrCat(st.st_ino);
}

}  // namespace

std::string HostIdentity() {
  if (std::optional<std::string> env = StringSetting(kHostIdEnvVar)) return *env;
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string boot;
  std::getline(in, boot);
  return absl::StrCat(host, "/", absl::StripAsciiWhitespace(boot), "/ipc:", NamespaceInode("ipc"),
                      "/mnt:", NamespaceInode("mnt"), "/net:", NamespaceInode("net"),
                      "/pid:", NamespaceInode("pid"));
}

}  // namespace paddle
