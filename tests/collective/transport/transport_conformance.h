// What every Transport must do, written once: the checks the tests of the TCP, shared-memory and
// UCX transports share (each test binds its own factory), and the worker-process side of their
// multi-process tests.
#ifndef TESTS_COLLECTIVE_TRANSPORT_TRANSPORT_CONFORMANCE_H_
#define TESTS_COLLECTIVE_TRANSPORT_TRANSPORT_CONFORMANCE_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "paddle/collective/store/tcp_store_server.h"
#include "tests/collective/transport/transport_test_harness.h"

namespace paddle {

// Runs a body on every rank of a world the caller chose (RunRankThreads with its factory).
using RankRunner = std::function<void(const std::function<void(RankContext&)>& body)>;

// Every pair of the `world` ranks exchanges one message of every size in `sizes` each way,
// checked byte for byte. Round k sends to rank + k and receives from rank - k; odd rounds post the
// receives first (messages land in place), even rounds the sends first (messages arrive before
// their receive and are buffered or claimed mid-arrival). Everything of a round is posted before
// anything is waited for, so transports whose large sends wait for the receive pass too.
void ExpectEveryPairExchangesEverySize(int world, const std::vector<size_t>& sizes,
                                       const RankRunner& run);

// If argv is `flag PORT RANK WORLD MODE` (how StartExchangeWorkers starts this binary), runs
// `worker` with those values and returns its exit code (2 for malformed numbers); else -1, and
// the caller runs the tests.
using ExchangeWorkerMain =
    std::function<int(int port, int rank, int world, const std::string& mode)>;
int MaybeRunExchangeWorker(int argc, char** argv, const char* flag,
                           const ExchangeWorkerMain& worker);

// Rank 0 sends `messages` messages of one tag (sizes (i x 7919) mod `size_modulus`); rank 1
// posts half of its receives before they are sent and half after they arrived: all arrive in
// order, byte for byte. The sender waits for its sends only after both halves are posted, so
// transports whose large sends wait for the receive pass too.
void ExpectOneTagArrivesInOrder(const RankRunner& run, int messages, size_t size_modulus);

// Rank 0 sends 16 tags in order (sizes tag x `size_step` + 1); rank 1 posts the last tag's receive
// first and the others afterwards in reverse: each gets its own message.
void ExpectDifferentTagsMatchOutOfOrder(const RankRunner& run, size_t size_step);

// Rank 0 sends pairs with Channel::SendPair (a 48-byte first message, then sizes 0, 1, `size` and
// 3 x `size` under another tag); rank 1 posts each pair's second receive before its first, some
// pairs before they are sent and some after: every message matches its own tag, bytes intact.
void ExpectSendPairsMatchTheirTags(const RankRunner& run, size_t size);

// Note [Spare unexpected-message buffers]: rounds of large messages that all arrive before their
// receives (rank 0 waits for its sends, then rank 1 posts), in sizes that fit, and do not fit,
// the buffers kept from the round before; every byte checked. Transports whose large sends wait
// for the receive cannot pass it.
void ExpectUnexpectedLargeMessagesReuseBuffers(const RankRunner& run);

// Rank 0 of 2 posts a receive and waits 50 ms for it: kDeadlineExceeded naming the request
// ("recv #0 (tag 5, 100 bytes) from peer 1") and "rank 0/2", and the request stays pending; once
// rank 1 sends, it completes with the right bytes.
void ExpectWaitTimesOutAndTheRequestStaysPending(const RankRunner& run);

// `factory` makes a world of one without a store, named `name`; rank 1 of one, and rank 0 of two
// without a store, are kInvalidArgument (the latter saying "store is null").
void ExpectWorldOfOneNeedsNoStoreAndRejectsBadRanks(const TransportFactory& factory,
                                                    const std::string& name);

// Rank 0 of 2 whose peer never comes fails within a 300 ms connect timeout with
// kDeadlineExceeded naming "rank 1 to publish" and "rank 0/2". `interface_name`, if set, is the
// options' interface.
void ExpectMissingPeerTimesOutNamingIt(const TransportFactory& factory,
                                       const std::string& interface_name = "");

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
