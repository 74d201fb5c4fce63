// EtcdServer: starts /usr/bin/etcd (a ChildProcess) for a test and waits until its /health says
// true.
#include "paddle/testing/etcd_server.h"

#include <curl/curl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "paddle/core/deadline.h"

namespace paddle {
namespace {

constexpr char kEtcdBinary[] = "/usr/bin/etcd";
constexpr int kStartAttempts = 5;

// Two distinct free loopback ports. Both sockets stay bound until both are known, so the two
// differ; another process may still take one before etcd binds it (Start retries then).
absl::Status PickPorts(int ports[2]) {
  int fds[2] = {-1, -1};
  absl::Status status;
  for (int i = 0; i < 2 && status.ok(); ++i) {
    fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fds[i] < 0 || bind(fds[i], reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        getsockname(fds[i], reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      status = absl::UnavailableError(
          absl::StrCat("picking a free port on 127.0.0.1 failed: ", strerror(errno)));
    } else {
      ports[i] = ntohs(addr.sin_port);
    }
  }
  for (int fd : fds) {
    if (fd >= 0) close(fd);
  }
  return status;
}

// The body of an HTTP request to `url` (a POST when `post_body` is set), or "" on failure.
std::string Fetch(const std::string& url, const char* post_body) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  CURL* curl = curl_easy_init();
  if (curl == nullptr) return "";
  std::string body;
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  if (post_body != nullptr) curl_easy_setopt(curl, CURLOPT_POSTFIELDS, post_body);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 2000L);
  curl_easy_setopt(
      curl, CURLOPT_WRITEFUNCTION, +[](char* data, size_t size, size_t n, void* out) {
        static_cast<std::string*>(out)->append(data, size * n);
        return size * n;
      });
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
  const bool ok = curl_easy_perform(curl) == CURLE_OK;
  curl_easy_cleanup(curl);
  return ok ? body : "";
}

// Whether the etcd named `name` serves `port` and reports itself healthy (it has a leader). The
// name check matters: if another process took the port first, whatever answers there is not ours.
bool Ready(int port, const std::string& name) {
  const std::string base = absl::StrCat("http://127.0.0.1:", port);
  return absl::StrContains(Fetch(base + "/v3/cluster/member/list", "{}"),
                           absl::StrCat("\"name\":\"", name, "\"")) &&
         absl::StrContains(Fetch(base + "/health", nullptr), "\"health\":\"true\"");
}

std::string Tail(const std::string& text, size_t max_bytes) {
  return text.size() > max_bytes ? "..." + text.substr(text.size() - max_bytes) : text;
}

std::string DescribeExit(int exit_code) {
  if (exit_code > 128) return absl::StrCat("was killed by signal ", exit_code - 128);
  return absl::StrCat("exited with status ", exit_code);
}

}  // namespace

absl::StatusOr<std::unique_ptr<EtcdServer>> EtcdServer::Start(absl::Duration startup_timeout) {
  if (access(kEtcdBinary, X_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(kEtcdBinary, " is missing (", strerror(errno),
                                                      "); install Debian's etcd-server"));
  }
  const char* tmp = getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/etcd-XXXXXX");
  if (mkdtemp(dir.data()) == nullptr) {
    return absl::UnavailableError(absl::StrCat("mkdtemp ", dir, ": ", strerror(errno)));
  }
  std::string last_tail;
  for (int attempt = 1; attempt <= kStartAttempts; ++attempt) {
    int ports[2];
    absl::Status picked = PickPorts(ports);
    if (!picked.ok()) {
      std::filesystem::remove_all(dir);
      return picked;
    }
    const std::string client = absl::StrCat("http://127.0.0.1:", ports[0]);
    const std::string peer = absl::StrCat("http://127.0.0.1:", ports[1]);
    const std::string data_dir = absl::StrCat(dir, "/data-", attempt);  // fresh per attempt
    const std::string name = absl::StrCat("test-", getpid(), "-", ports[0]);
    // clang-format off
    std::vector<ChildProcess> etcd = StartChildren({ChildSpec{{
        kEtcdBinary, "--name", name, "--data-dir", data_dir,
        "--listen-client-urls", client, "--advertise-client-urls", client,
        "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
        "--initial-cluster", absl::StrCat(name, "=", peer), "--initial-cluster-state", "new",
        "--logger", "zap", "--log-outputs", "stderr"}}});
    // clang-format on
    // From here the server owns `dir` and the process: any return below cleans both up.
    std::unique_ptr<EtcdServer> server(new EtcdServer(dir, ports[0], std::move(etcd[0])));
    const Deadline deadline = Deadline::After(startup_timeout);
    while (!deadline.Expired()) {
      if (server->etcd_.Exited()) {
        last_tail = server->LogTail();
        if (absl::StrContains(last_tail, "address already in use")) {
          std::filesystem::remove_all(data_dir);
          server->dir_.clear();  // keep `dir` for the next attempt
          break;
        }
        return absl::UnavailableError(
            absl::StrCat("etcd ", DescribeExit(server->etcd_.exit_code), " after ",
                         absl::FormatDuration(deadline.Elapsed()), " (client ", client, ", peer ",
                         peer, "); its output ends:\n", last_tail));
      }
      if (Ready(ports[0], name)) return server;
      absl::SleepFor(absl::Milliseconds(50));
    }
    if (!server->etcd_.running()) continue;  // lost a port race: retry with new ports
    return absl::DeadlineExceededError(
        absl::StrCat("etcd at ", client, " did not report healthy within ",
                     absl::FormatDuration(startup_timeout),
                     " (pass a longer startup_timeout if the machine is merely slow); its "
                     "output ends:\n",
                     server->LogTail()));
  }
  std::filesystem::remove_all(dir);
  return absl::UnavailableError(absl::StrCat("etcd lost the race for a free port ", kStartAttempts,
                                             " times in a row; its last output ends:\n",
                                             last_tail));
}

EtcdServer::~EtcdServer() {
  Stop();
  if (!dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
}

std::string EtcdServer::endpoint() const { return absl::StrCat("127.0.0.1:", client_port_); }

void EtcdServer::Stop() { etcd_.Terminate(absl::Seconds(10)); }

std::string EtcdServer::LogTail(size_t max_bytes) const { return Tail(etcd_.Output(), max_bytes); }

}  // namespace paddle
