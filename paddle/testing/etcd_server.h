// EtcdServer: a throwaway single-node etcd for tests, started from /usr/bin/etcd on free loopback
// ports with its data in a fresh temporary folder, so EtcdStore is tested against the real thing.
//
//   ASSERT_OK_AND_ASSIGN(auto etcd, EtcdServer::Start());
//   EtcdStoreOptions options{etcd->endpoint(), "job"};
//
// Start returns only once etcd answers requests. Free ports are found by binding port 0 and
// releasing it, which another process may grab before etcd binds it; Start then retries with new
// ports. The destructor stops etcd (SIGTERM, then SIGKILL), reaps it and removes its folder.
// etcd is also started with PR_SET_PDEATHSIG, so a test killed outright does not leave it running;
// that signal follows the thread that started it, so call Start from a thread that outlives the
// server (the test's main thread, or a fixture's).
#ifndef PADDLE_TESTING_ETCD_SERVER_H_
#define PADDLE_TESTING_ETCD_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "paddle/testing/child_processes.h"

namespace paddle {

class EtcdServer {
 public:
  // Starts etcd and waits (up to `startup_timeout`) until it answers; the error carries the tail
  // of etcd's output when it does not.
  static absl::StatusOr<std::unique_ptr<EtcdServer>> Start(
      absl::Duration startup_timeout = absl::Seconds(60));
  ~EtcdServer();
  EtcdServer(const EtcdServer&) = delete;
  EtcdServer& operator=(const EtcdServer&) = delete;

  // "127.0.0.1:<client port>", for EtcdStoreOptions::endpoint.
  std::string endpoint() const;
  // Stops etcd now (for tests of a server lost mid-run); the destructor still removes the folder.
  void Stop();
  // The last `max_bytes` of etcd's stdout and stderr.
  std::string LogTail(size_t max_bytes = 4000) const;

 private:
  EtcdServer(std::string dir, int client_port, ChildProcess etcd)
      : dir_(std::move(dir)), client_port_(client_port), etcd_(std::move(etcd)) {}

  std::string dir_;  // holds the data folders
  int client_port_;
  ChildProcess etcd_;  // its output is the log
};

}  // namespace paddle

#endif  // PADDLE_TESTING_ETCD_SERVER_H_
