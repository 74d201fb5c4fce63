// What every Transport must do, written once: TransportConformanceTest and
// TransportWorldConformanceTest, one parameterized suite that the tests of the TCP,
// shared-memory and UCX transports each instantiate with their factory (as every store
// instantiates tests/collective/store/store_contract.h), the size-mismatch check their extra
// cases share, and the worker-process side of their multi-process tests.
//
//   INSTANTIATE_TRANSPORT_CONFORMANCE(Tcp, TcpParam(), testing::Range(2, 9));
//
// The suite covers ping-pong and every pair exchanging every size at world sizes the caller
// picks, tag matching in and out of order, send pairs, spare unexpected-message buffers, Abort,
// a wait that times out, size mismatches, a world of one and a peer that never comes. What only
// one transport does (its protocol switch points, how it names a dead peer) stays in its file.
#ifndef TESTS_COLLECTIVE_TRANSPORT_TRANSPORT_CONFORMANCE_H_
#define TESTS_COLLECTIVE_TRANSPORT_TRANSPORT_CONFORMANCE_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "paddle/collective/store/tcp_store_server.h"
#include "tests/collective/transport/transport_test_harness.h"
#include "tests/testing/scoped_env.h"

namespace paddle {

// The largest message the data-path tests send: sanitizers slow every byte copied ten-fold.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr size_t kLargeBytes = (8 << 20) + 5;
#else
constexpr size_t kLargeBytes = 64 << 20;
#endif

// One transport as the suite sees it. The sizes are the transport's own: each picks them around
// the points where its protocol changes (eager to rendezvous, ring to CMA).
struct TransportConformanceParam {
  TransportConformanceParam(std::string transport_name, TransportFactory factory)
      : name(transport_name),
        transport_name(std::move(transport_name)),
        factory(std::move(factory)) {}

  std::string name;            // the test name's suffix (a variant's, e.g. "shm_without_cma")
  std::string transport_name;  // what Transport::name() must say
  TransportFactory factory;
  // Set (name, value) for every test, e.g. a variant with PADDLE_SHM_CMA=0.
  std::vector<std::pair<std::string, std::string>> env;
  // The interface of the missing-peer test; "" leaves the options' default.
  std::string interface_name;
  // Ping-pong: message bytes, and whether such a send completes inside Send() (eager).
  size_t ping_bytes = 8;
  bool ping_is_eager = false;
  // Every pair exchanges one message of each of these sizes, in a world of `world` ranks.
  std::function<std::vector<size_t>(int world)> exchange_sizes;
  int one_tag_messages = 300;  // ExpectOneTagArrivesInOrder
  size_t one_tag_size_modulus = 20000;
  size_t tag_size_step = 3001;  // ExpectDifferentTagsMatchOutOfOrder
  size_t pair_bytes = 20000;    // ExpectSendPairsMatchTheirTags
  // Note [Spare unexpected-message buffers] applies (UCX keeps unexpected messages itself).
  bool spares_unexpected_buffers = true;
  // How an aborted peer's error names rank 0, and whether it keeps kAborted there.
  std::string aborted_peer_named = "peer rank 0";
  bool peer_sees_aborted_code = false;
};

std::string TransportConformanceParamName(
    const testing::TestParamInfo<TransportConformanceParam>& info);

// Ranks as threads in worlds of two (and three) ranks.
class TransportConformanceTest : public testing::TestWithParam<TransportConformanceParam> {
 protected:
  void SetUp() override;
  void TearDown() override { env_.clear(); }
  // RunRankThreads with the parameter's factory.
  void Run(int world, const std::function<void(RankContext&)>& body);
  const TransportConformanceParam& param() const { return GetParam(); }

 private:
  std::vector<std::unique_ptr<ScopedEnv>> env_;
};

// The data path at every world size the instantiation lists: (transport, world size).
class TransportWorldConformanceTest
    : public testing::TestWithParam<std::tuple<TransportConformanceParam, int>> {
 protected:
  void SetUp() override;
  void TearDown() override { env_.clear(); }
  void Run(const std::function<void(RankContext&)>& body);
  const TransportConformanceParam& param() const { return std::get<0>(GetParam()); }
  int world() const { return std::get<1>(GetParam()); }

 private:
  std::vector<std::unique_ptr<ScopedEnv>> env_;
};

std::string TransportWorldConformanceParamName(
    const testing::TestParamInfo<std::tuple<TransportConformanceParam, int>>& info);

// Instantiates both suites for `param` (a TransportConformanceParam), the world suite at every
// world size `worlds` (a gtest generator of ints) yields.
#define INSTANTIATE_TRANSPORT_CONFORMANCE(prefix, param, worlds)                     \
  INSTANTIATE_TEST_SUITE_P(prefix, TransportConformanceTest, testing::Values(param), \
                           TransportConformanceParamName);                           \
  INSTANTIATE_TEST_SUITE_P(prefix, TransportWorldConformanceTest,                    \
                           testing::Combine(testing::Values(param), worlds),         \
                           TransportWorldConformanceParamName)

// Rank 0 of 2 sends `send_bytes` under tag 3; rank 1 receives `recv_bytes`, posted before the
// message (`receive_first`) or after it arrived: kInvalidArgument at rank 1 naming the tag, both
// sizes, the peer and "rank 1/2", and rank 0's next request carries the mismatch too.
void ExpectSizeMismatch(const TransportFactory& factory, size_t send_bytes, size_t recv_bytes,
                        bool receive_first);

// If argv is `flag PORT RANK WORLD MODE` (how StartExchangeWorkers starts this binary), runs
// `worker` with those values and returns its exit code (2 for malformed numbers); else -1, and
// the caller runs the tests.
using ExchangeWorkerMain =
    std::function<int(int port, int rank, int world, const std::string& mode)>;
int MaybeRunExchangeWorker(int argc, char** argv, const char* flag,
                           const ExchangeWorkerMain& worker);

// A TcpStoreServer on 127.0.0.1 (a free port) for worker processes; null (and a test failure) if
// it cannot start.
std::unique_ptr<TcpStoreServer> StartLoopbackStoreServer();

// Starts this binary `world` times as `flag PORT RANK WORLD MODE`.
std::vector<WorkerProcess> StartExchangeWorkers(const char* flag, int world, int port,
                                                const std::string& mode);

// The body of one worker process (`mode` "exchange", "until_failure" or "flood"): joins the store
// at 127.0.0.1:`port`, makes its transport with `factory` (keys under `store_prefix`), then
// exchanges a message of `bytes` with every peer per round, checking every byte. "exchange": three
// rounds, then a store barrier ("done") and exit 0 with "WORKER_OK". "until_failure": rounds until
// a request fails, publishing round2/<rank> after round 2; prints "WORKER_FAILED rank=R round=K:
// <status>" and exits 3. "flood": as "until_failure" with four messages each way per peer and
// round in flight at once. Other exits: 2 set-up, 4 a wrong byte, 5 the store, 6 the barrier.
int RunExchangeWorker(int port, int rank, int world, const std::string& mode,
                      const TransportFactory& factory, size_t bytes,
                      const std::string& store_prefix);

// Four workers (StartExchangeWorkers) in `mode` exchange for three rounds: each must exit 0 with
// WORKER_OK. Returns them for further checks.
std::vector<WorkerProcess> ExpectProcessesExchange(const char* flag, const std::string& mode);

// Four workers in `mode` ("until_failure...") exchange until rank 3 is killed with SIGKILL in the
// middle of a round (after every rank passed round 2): the others must exit 3 within `limit`
// printing WORKER_FAILED and `culprit(rank 3's process)`. Returns the workers.
std::vector<WorkerProcess> ExpectKilledProcessNamed(
    const char* flag, const std::string& mode, absl::Duration limit,
    const std::function<std::string(const WorkerProcess& victim)>& culprit);

}  // namespace paddle

#endif  // TESTS_COLLECTIVE_TRANSPORT_TRANSPORT_CONFORMANCE_H_
