// Helpers for testing any Transport: payloads made from (seed, rank, index) and checked byte for
// byte, ranks as threads over one store, and ranks as real processes (this test binary run
// again as workers). Shared by the tests of every transport implementation.
#ifndef TESTS_COLLECTIVE_TRANSPORT_TRANSPORT_TEST_HARNESS_H_
#define TESTS_COLLECTIVE_TRANSPORT_TRANSPORT_TEST_HARNESS_H_

#include <sys/types.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "paddle/collective/store/store.h"
#include "paddle/collective/transport/transport.h"
#include "paddle/testing/child_processes.h"

namespace paddle {

// Success paths wait this long: far beyond what they need, so a loaded machine never flakes.
constexpr absl::Duration kLongWait = absl::Seconds(120);

inline absl::Status WaitLong(TransportRequest& request) {
  return request.Wait(Deadline::After(kLongWait));
}

// ASSERT_TRUE(status.ok()) that prints the status when it fails.
#define ASSERT_OK(expr)                                       \
  do {                                                        \
    const absl::Status assert_ok_status_ = (expr);            \
    ASSERT_TRUE(assert_ok_status_.ok()) << assert_ok_status_; \
  } while (0)

// The bytes of message `index` from `rank` (Philox keys a SplitMix64 stream by (seed, rank,
// index)), made once per process and kept: senders send from it, receivers compare against it.
const std::vector<char>& Payload(int rank, uint64_t index, size_t bytes);
// "" if `got` is message `index` from `rank`, else where it first differs.
std::string Mismatch(const std::vector<char>& got, int rank, uint64_t index);

// A reusable barrier for the rank threads of one test. A rank whose body failed breaks it, so
// the others are not left waiting for a rank that will never arrive; a wait longer than
// kLongWait fails the test instead of hanging it. (std::mutex rather than absl::Mutex: see Note
// [Locks and ThreadSanitizer] in paddle/collective/transport/tcp/tcp_request.h.)
class ThreadBarrier {
 public:
  explicit ThreadBarrier(int n) : n_(n) {}
  void Wait();
  void Break();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  const int n_;
  int arrived_ = 0;
  int generation_ = 0;
  bool broken_ = false;
};

struct RankContext {
  int rank;
  int world_size;
  std::unique_ptr<Transport> transport;  // a body may destroy it early
  ThreadBarrier* barrier;
  Transport& t() { return *transport; }
};

using TransportFactory =
    std::function<absl::StatusOr<std::unique_ptr<Transport>>(const TransportOptions&)>;

struct RankThreadsOptions {
  std::string interface_name = "127.0.0.1";
  std::shared_ptr<Store> store;  // a fresh HashStore when null
};

// Creates `world` transports at once (one thread per rank), runs `body` on each, waits for every
// rank to finish (so no rank tears down links another still uses), then destroys them.
void RunRankThreads(int world, const TransportFactory& factory,
                    const std::function<void(RankContext&)>& body,
                    const RankThreadsOptions& options = {});

// One worker process (paddle/testing/child_processes.h): pid, exit_code, exited, Output().
using WorkerProcess = ChildProcess;

// Starts one process per entry of `args`, each running `program` (default: this binary) with
// those arguments, stdout and stderr captured; they die with the test if it crashes.
std::vector<WorkerProcess> StartWorkerProcesses(const std::vector<std::vector<std::string>>& args,
                                                const std::string& program = "/proc/self/exe");
// Waits for every worker to exit, up to `limit`; then kills the rest and fails the test.
void WaitForWorkerProcesses(std::vector<WorkerProcess>& workers, absl::Duration limit);

}  // namespace paddle

#endif  // TESTS_COLLECTIVE_TRANSPORT_TRANSPORT_TEST_HARNESS_H_
