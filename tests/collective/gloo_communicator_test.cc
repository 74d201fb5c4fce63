// Tests of the Gloo backend (paddle/collective/backends/gloo) through the Communicator interface.
//
// What only Gloo has; the contract every backend meets (every collective, dtype, op, world
// sizes 1..8, the shared error cases and debug checks) is communicator_conformance_test. Here,
// threads as ranks over one HashStore: allreduce with Gloo's bcube algorithm (world sizes 2..5 x
// counts x dtype x op, every element compared, Note [Exact communicator inputs]); Gloo's error
// paths: bad options, connect timeouts, bad arguments using no sequence number, a timeout naming
// Gloo's setting, Abort with the failure reports of other ranks, a rank that never connects. Then
// real processes (this binary re-executed, paddle/testing/rendezvous_worker.h) over a
// TcpStoreServer hosted here, including a process that dies: its peers must fail naming it, not
// hang.
#include "paddle/collective/backends/gloo/gloo_communicator.h"

#include <arpa/inet.h>
#include <gloo/transport/tcp/address.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "paddle/collective/backends/gloo/gloo_connection.h"
#include "paddle/collective/reduction.h"
#include "paddle/collective/store/hash_store.h"
#include "paddle/collective/store/tcp_store.h"
#include "paddle/collective/store/tcp_store_server.h"
#include "paddle/core/dtype.h"
#include "paddle/core/tensor.h"
#include "paddle/testing/rendezvous_worker.h"
#include "tests/collective/communicator_testing.h"

namespace paddle {
namespace {

using commtest::CheckBytes;
using commtest::CompareElements;
using commtest::ExpectedReduction;
using commtest::FillBytes;
using commtest::kGenerous;
using commtest::MakeReductionInput;
using commtest::NewTensor;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int64_t kLargeCount = 300007;  // every byte costs ten times more under a sanitizer
#else
constexpr int64_t kLargeCount = 1000003;
#endif

constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax,
                             ReduceOp::kProd};

// ---- Threads as ranks ----

// `n` threads, one per rank; returns when all have finished.
void RunRanks(int n, const std::function<void(int rank)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back(body, r);
  for (std::thread& t : threads) t.join();
}

CommunicatorOptions Options(std::shared_ptr<Store> store, int rank, int n,
                            const std::string& prefix) {
  CommunicatorOptions options;
  options.backend = Backend::kGloo;
  options.store = std::move(store);
  options.store_prefix = prefix;
  options.rank = rank;
  options.world_size = n;
  options.timeout = kGenerous;
  options.connect_timeout = kGenerous;
  return options;
}

// One communicator per rank over one HashStore; destroyed on one thread per rank (the
// destructor meets the other ranks at a barrier).
class Group {
 public:
  static std::unique_ptr<Group> Create(
      int n, const std::function<void(CommunicatorOptions&)>& adjust = {}) {
    static int groups = 0;
    auto group = std::unique_ptr<Group>(new Group);
    group->store_ = std::make_shared<HashStore>();
    group->comms_.resize(n);
    std::vector<absl::Status> statuses(n);
    const std::string prefix = absl::StrCat("group", groups++);
    RunRanks(n, [&](int rank) {
      CommunicatorOptions options = Options(group->store_, rank, n, prefix);
      if (adjust) adjust(options);
      absl::StatusOr<std::unique_ptr<Communicator>> comm = CreateGlooCommunicator(options);
      statuses[rank] = comm.status();
      if (comm.ok()) group->comms_[rank] = *std::move(comm);
    });
    for (int r = 0; r < n; ++r)
      EXPECT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
    for (int r = 0; r < n; ++r) {
      if (!statuses[r].ok()) return nullptr;
    }
    return group;
  }

  ~Group() {
    RunRanks(size(), [&](int rank) { comms_[rank].reset(); });
  }

  int size() const { return static_cast<int>(comms_.size()); }
  Communicator& comm(int rank) { return *comms_[rank]; }
  std::unique_ptr<Communicator>& slot(int rank) { return comms_[rank]; }
  const std::shared_ptr<HashStore>& store() const { return store_; }

  // Runs `body` on every rank and returns each rank's status.
  std::vector<absl::Status> Run(const std::function<absl::Status(int rank, Communicator&)>& body) {
    std::vector<absl::Status> statuses(size());
    RunRanks(size(), [&](int rank) { statuses[rank] = body(rank, comm(rank)); });
    return statuses;
  }

 private:
  Group() = default;
  std::shared_ptr<HashStore> store_;
  std::vector<std::unique_ptr<Communicator>> comms_;
};

// "" if every status is OK, else one line per failed rank.
std::string Failures(const std::vector<absl::Status>& statuses) {
  return commtest::AllOk(statuses) ? "" : commtest::DescribeFailures(statuses);
}

// ---- Allreduce: world size x algorithm x count x dtype x op ----

struct SweepParam {
  int world_size;
  const char* algorithm;
};

class GlooAllreduceTest : public ::testing::TestWithParam<SweepParam> {};

TEST_P(GlooAllreduceTest, EveryElementOfEveryDTypeAndOp) {
  const int n = GetParam().world_size;
  const std::string algorithm = GetParam().algorithm;
  std::unique_ptr<Group> group =
      Group::Create(n, [&](CommunicatorOptions& o) { o.algorithm = algorithm; });
  ASSERT_NE(group, nullptr);
  uint64_t seed = 17 + n;
  int rotation = 0;
  for (DType dtype : commtest::SweepDTypes()) {
    for (ReduceOp op : kOps) {
      if (!commtest::OpApplies(dtype, op)) continue;  // integer avg: kInvalidArgument
      std::vector<int64_t> counts = {0, 1, 2 * n + 1};
      // The large case for a rotating (dtype, op) subset, so it covers each over the world sizes.
      if (rotation++ % 5 == n % 5) counts.push_back(kLargeCount);
      for (int64_t count : counts) {
        ++seed;
        const std::string what = absl::StrCat(algorithm, " n=", n, " count=", count, " ",
                                              DTypeName(dtype), " ", ReduceOpName(op));
        std::vector<Tensor> data(n);
        std::vector<absl::Status> statuses = group->Run([&](int rank, Communicator& comm) {
          data[rank] = MakeReductionInput(count, dtype, seed, rank, op);
          return comm.Allreduce(data[rank], op)->Wait();
        });
        ASSERT_EQ(Failures(statuses), "") << what;
        const Tensor want = ExpectedReduction(0, count, dtype, n, seed, op);
        for (int rank = 0; rank < n; ++rank) {
          absl::Status same =
              CompareElements(data[rank], want, 0, absl::StrCat(what, ", rank ", rank));
          ASSERT_TRUE(same.ok()) << same;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooAllreduceTest,
                         // The ring (the default) runs in communicator_conformance_test.
                         ::testing::Values(SweepParam{2, "bcube"}, SweepParam{3, "bcube"},
                                           SweepParam{4, "bcube"}, SweepParam{5, "bcube"}),
                         [](const ::testing::TestParamInfo<SweepParam>& info) {
                           return absl::StrCat(info.param.algorithm, info.param.world_size);
                         });

// ---- Errors ----

// Note [Gloo peer addresses]: the listening addresses a peer published, read back from Gloo's
// own rendezvous value (its pair addresses for every other rank, in rank order).
TEST(GlooErrorsTest, ListeningAddressesAreReadFromGloosRendezvousValue) {
  auto address = [](uint16_t port) {
    sockaddr_in in = {};
    in.sin_family = AF_INET;
    in.sin_port = htons(port);
    in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return gloo::transport::tcp::Address(reinterpret_cast<const sockaddr*>(&in), sizeof(in));
  };
  // Rank 2 of 3 published its pairs with ranks 0 and 1.
  const gloo::transport::tcp::Address for0 = address(4711), for1 = address(4712);
  std::string value;
  for (const auto* a : {&for0, &for1}) {
    const std::vector<char> bytes = a->bytes();
    value.append(bytes.begin(), bytes.end());
  }
  absl::StatusOr<std::string> seen_by_0 = ListenAddressFromRendezvous(value, 0, 3, 2);
  absl::StatusOr<std::string> seen_by_1 = ListenAddressFromRendezvous(value, 1, 3, 2);
  ASSERT_TRUE(seen_by_0.ok()) << seen_by_0.status();
  ASSERT_TRUE(seen_by_1.ok()) << seen_by_1.status();
  EXPECT_EQ(*seen_by_0, for0.str());
  EXPECT_EQ(*seen_by_1, for1.str());
  EXPECT_NE(*seen_by_0, *seen_by_1);
  // A value laid out otherwise is an error naming the peer and the sizes, not a crash.
  absl::StatusOr<std::string> bad = ListenAddressFromRendezvous(value.substr(1), 0, 3, 2);
  EXPECT_TRUE(absl::IsInternal(bad.status())) << bad.status();
  EXPECT_TRUE(absl::StrContains(bad.status().message(),
                                absl::StrCat("rank 2 published ", value.size() - 1, " bytes")))
      << bad.status();
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "rank 0 of 3")) << bad.status();
  EXPECT_FALSE(ListenAddressFromRendezvous(value, 2, 3, 2).ok());  // a rank is not its own peer
}

TEST(GlooErrorsTest, CreateRejectsBadOptions) {
  auto store = std::make_shared<HashStore>();
  CommunicatorOptions options = Options(store, 0, 1, "bad");
  options.store = nullptr;
  EXPECT_TRUE(absl::IsInvalidArgument(CreateGlooCommunicator(options).status()));
  options = Options(store, 2, 2, "bad");
  absl::Status status = CreateGlooCommunicator(options).status();
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "rank 2 / world size 2")) << status;
  options = Options(store, 0, 1, "bad");
  options.algorithm = "hd";
  status = CreateGlooCommunicator(options).status();
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "bcube")) << status;
}

TEST(GlooErrorsTest, MissingPeerAtConnectTimesOutNamingItsKey) {
  auto store = std::make_shared<HashStore>();
  CommunicatorOptions options = Options(store, 0, 2, "lonely");
  options.connect_timeout = absl::Seconds(1);
  const absl::Time start = absl::Now();
  absl::Status status = CreateGlooCommunicator(options).status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_TRUE(absl::IsDeadlineExceeded(status)) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "lonely/gloo/")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "rank 0/2")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "PADDLE_CONNECT_TIMEOUT_S")) << status;
}

TEST(GlooErrorsTest, BadArgumentsFailAtOnceWithoutPoisoning) {
  std::unique_ptr<Group> group = Group::Create(2);
  ASSERT_NE(group, nullptr);
  auto statuses = group->Run([&](int rank, Communicator& comm) {
    std::vector<absl::Status> errors = {
        comm.Allreduce(NewTensor(10, DType::kInt32), ReduceOp::kAvg)->Wait(),
        comm.Broadcast(NewTensor(10, DType::kFloat32), 2)->Wait(),
        comm.Allgather(NewTensor(10, DType::kFloat32), NewTensor(10, DType::kFloat32))->Wait(),
        comm.Allgather(NewTensor(10, DType::kFloat32), NewTensor(20, DType::kInt32))->Wait(),
        comm.Alltoallv(NewTensor(1, DType::kUInt8), NewTensor(3, DType::kUInt8), {1}, {1, 2})
            ->Wait(),
        comm.Send(NewTensor(10, DType::kUInt8), rank)->Wait(),
        comm.Allreduce(Tensor(), ReduceOp::kSum)->Wait(),
    };
    for (const absl::Status& e : errors) {
      if (!absl::IsInvalidArgument(e))
        return absl::InternalError(absl::StrCat("got ", e.ToString()));
      if (!absl::StrContains(e.message(), absl::StrCat("rank ", rank, "/2"))) {
        return absl::InternalError(absl::StrCat("no rank in ", e.ToString()));
      }
    }
    // Still usable, and the failed calls used no sequence number.
    std::shared_ptr<Work> work = comm.Allreduce(
        MakeReductionInput(10, DType::kFloat32, 1, rank, ReduceOp::kSum), ReduceOp::kSum);
    if (work->seq() != 1) return absl::InternalError(absl::StrCat("seq ", work->seq()));
    return work->Wait();
  });
  EXPECT_EQ(Failures(statuses), "");
}

TEST(GlooErrorsTest, PeerThatNeverJoinsTimesOutAndPoisons) {
  std::unique_ptr<Group> group = Group::Create(2);
  ASSERT_NE(group, nullptr);
  CallOptions call;
  call.timeout = absl::Seconds(1);
  const absl::Time start = absl::Now();
  std::shared_ptr<Work> work =
      group->comm(0).Allreduce(NewTensor(1024, DType::kFloat32), ReduceOp::kSum, call);
  std::shared_ptr<Work> later = group->comm(0).Barrier();
  absl::Status status = work->Wait();
  EXPECT_LT(absl::Now() - start, absl::Seconds(60));
  EXPECT_TRUE(absl::IsDeadlineExceeded(status)) << status;
  for (const char* part :
       {"rank 0/2", "allreduce #1", "4096 bytes", "waited", "Gloo", "PADDLE_TIMEOUT_S"}) {
    EXPECT_TRUE(absl::StrContains(status.message(), part)) << part << " not in " << status;
  }
  // Queued and later operations fail with the cause; rank 1's destructor is not held up by the
  // poisoned rank 0.
  absl::Status queued = later->Wait();
  EXPECT_TRUE(absl::StrContains(queued.message(), "barrier #2")) << queued;
  EXPECT_TRUE(absl::StrContains(queued.message(), "poisoned")) << queued;
  EXPECT_TRUE(absl::StrContains(group->comm(0).Barrier()->Wait().message(), "poisoned"));
  const absl::Time teardown = absl::Now();
  group.reset();
  EXPECT_LT(absl::Now() - teardown, absl::Seconds(60));
}

TEST(GlooErrorsTest, AbortFailsQueuedWorkAtOnceAndReleasesPeers) {
  std::unique_ptr<Group> group = Group::Create(3);
  ASSERT_NE(group, nullptr);
  std::vector<Tensor> data = {NewTensor(1 << 14, DType::kFloat32),
                              NewTensor(1 << 14, DType::kFloat32),
                              NewTensor(1 << 14, DType::kFloat32)};
  // Rank 2 queues three allreduces nobody else joins, then aborts: the two queued ones fail at
  // once; the one inside Gloo ends at its own (short) timeout, failing with the abort's cause.
  CallOptions call;
  call.timeout = absl::Seconds(2);
  std::vector<std::shared_ptr<Work>> queued;
  for (int i = 0; i < 3; ++i) {
    queued.push_back(group->comm(2).Allreduce(data[2], ReduceOp::kSum, call));
  }
  absl::SleepFor(absl::Milliseconds(100));  // let the first one enter Gloo
  group->comm(2).Abort(absl::CancelledError("test aborts rank 2"));
  EXPECT_TRUE(queued[2]->IsCompleted());
  for (const auto& work : queued) {
    absl::Status status = work->Wait(absl::Seconds(60));
    EXPECT_TRUE(absl::IsCancelled(status)) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "test aborts rank 2")) << status;
  }
  // Ranks 0 and 1 then run an allreduce with a long timeout: it fails at once, because rank 2
  // closed its connections, naming the peer that closed and what rank 2 reported.
  const absl::Time start = absl::Now();
  std::vector<absl::Status> statuses(2);
  RunRanks(2, [&](int rank) {
    CallOptions long_call;
    long_call.timeout = absl::Seconds(100);
    statuses[rank] = group->comm(rank).Allreduce(data[rank], ReduceOp::kSum, long_call)->Wait();
  });
  EXPECT_LT(absl::Now() - start, absl::Seconds(60));
  for (int rank = 0; rank < 2; ++rank) {
    const std::string message(statuses[rank].message());
    EXPECT_TRUE(absl::IsUnavailable(statuses[rank])) << message;
    // Rank 2 closed first, but a rank may see its other neighbour close first (it failed too).
    EXPECT_TRUE(absl::StrContains(message, "peer 2 ([") ||
                absl::StrContains(message, absl::StrCat("peer ", 1 - rank, " ([")))
        << message;
    EXPECT_TRUE(absl::StrContains(message, "closed its connection")) << message;
    EXPECT_TRUE(absl::StrContains(message, "rank 2: CANCELLED: aborted: test aborts rank 2"))
        << message;
  }
}

// ---- Real processes over a TcpStoreServer ----

// "sweep", "die", or "mismatch_count" / "_dtype" / "_op" / "_root" (the last rank differs).
constexpr char kScenarioEnv[] = "PADDLE_GLOO_TEST_SCENARIO";

// A worker: connects to the store at `address`, creates its communicator and runs the scenario.
// Prints GLOO_WORKER_OK or GLOO_WORKER_ERROR <status>.
int RunWorker(const std::string& address, absl::Duration timeout) {
  const int rank = std::atoi(std::getenv("PADDLE_GLOO_TEST_RANK"));
  const int n = std::atoi(std::getenv("PADDLE_GLOO_TEST_WORLD"));
  const std::string scenario = std::getenv(kScenarioEnv);
  auto fail = [](const absl::Status& status) {
    std::printf("GLOO_WORKER_ERROR %s\n", status.ToString().c_str());
    std::fflush(stdout);
    return 1;
  };
  TcpStoreOptions store_options;
  store_options.host = "127.0.0.1";
  absl::SimpleAtoi(address.substr(address.find(':') + 1), &store_options.port);
  absl::StatusOr<std::unique_ptr<TcpStore>> store = TcpStore::Connect(store_options);
  if (!store.ok()) return fail(store.status());
  CommunicatorOptions options = Options(std::shared_ptr<Store>(*std::move(store)), rank, n, "job");
  options.timeout = scenario == "die" ? absl::Seconds(30) : timeout;
  absl::StatusOr<std::unique_ptr<Communicator>> comm = CreateGlooCommunicator(options);
  if (!comm.ok()) return fail(comm.status());
  if (scenario == "die") {
    if (rank == n - 1) _exit(3);  // connected, then gone without a word
    absl::Status status =
        (*comm)->Allreduce(NewTensor(1 << 20, DType::kFloat32), ReduceOp::kSum)->Wait();
    if (status.ok()) return fail(absl::InternalError("allreduce with a dead peer succeeded"));
    return fail(status);
  }
  if (absl::StartsWith(scenario, "mismatch_")) {
    // Note [Agreement check]: formerly a SIGABRT from inside Gloo (count) or a wrong result.
    const bool odd = rank == n - 1;
    Tensor t = NewTensor(odd && scenario == "mismatch_count" ? 101 : 100,
                         odd && scenario == "mismatch_dtype" ? DType::kInt32 : DType::kFloat32);
    absl::Status status;
    if (scenario == "mismatch_op") {
      status = (odd ? (*comm)->Broadcast(t, 0) : (*comm)->Allreduce(t, ReduceOp::kSum))->Wait();
    } else if (scenario == "mismatch_root") {
      status = (*comm)->Broadcast(t, odd ? 1 : 0)->Wait();
    } else {
      status = (*comm)->Allreduce(t, ReduceOp::kSum)->Wait();
    }
    if (!absl::IsInvalidArgument(status)) {
      return fail(absl::InternalError(absl::StrCat("want kInvalidArgument: ", status.ToString())));
    }
    std::printf("GLOO_WORKER_MISMATCH %s\n", status.ToString().c_str());
    Tensor data = MakeReductionInput(10, DType::kFloat32, 9, rank, ReduceOp::kSum);
    absl::Status after = (*comm)->Allreduce(data, ReduceOp::kSum)->Wait();
    if (after.ok()) {
      after = CompareElements(data, ExpectedReduction(0, 10, DType::kFloat32, n, 9, ReduceOp::kSum),
                              0, "after the mismatch");
    }
    if (!after.ok()) return fail(after);
    comm->reset();
    std::printf("GLOO_WORKER_OK rank=%d\n", rank);
    std::fflush(stdout);
    return 0;
  }
  uint64_t seed = 1;
  for (DType dtype : commtest::SweepDTypes()) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{1001}, int64_t{1} << 20}) {
        // The large case for two dtypes only: each element costs all ranks' inputs to check.
        if (count > 1001 && dtype != DType::kFloat32 && dtype != DType::kBFloat16) continue;
        ++seed;
        Tensor data = MakeReductionInput(count, dtype, seed, rank, op);
        absl::Status status = (*comm)->Allreduce(data, op)->Wait();
        if (status.ok()) {
          status = CompareElements(
              data, ExpectedReduction(0, count, dtype, n, seed, op), 0,
              absl::StrCat(DTypeName(dtype), " ", ReduceOpName(op), " count ", count));
        }
        if (!status.ok()) return fail(status);
      }
    }
  }
  Tensor in = NewTensor(999, DType::kUInt8), out = NewTensor(999 * n, DType::kUInt8);
  FillBytes(in, 77, rank);
  absl::Status status = (*comm)->Allgather(in, out)->Wait();
  for (int r = 0; r < n && status.ok(); ++r) {
    status = CheckBytes(out, r * 999, 999, 77, r, 0, absl::StrCat("allgather block ", r));
  }
  if (!status.ok()) return fail(status);
  comm->reset();  // the final barrier, then the connections close
  std::printf("GLOO_WORKER_OK rank=%d\n", rank);
  std::fflush(stdout);
  return 0;
}

std::vector<WorkerOutcome> RunJob(int n, const std::string& scenario, int port) {
  std::vector<WorkerSpec> specs(n);
  for (int r = 0; r < n; ++r) {
    specs[r].url = absl::StrCat("127.0.0.1:", port);
    specs[r].timeout = kGenerous;
    specs[r].env = {{"PADDLE_GLOO_TEST_RANK", absl::StrCat(r)},
                    {"PADDLE_GLOO_TEST_WORLD", absl::StrCat(n)},
                    {kScenarioEnv, scenario}};
  }
  return RunWorkerProcesses(specs, absl::Seconds(240));
}

class GlooProcessTest : public ::testing::TestWithParam<int> {};

TEST_P(GlooProcessTest, AllreduceSweepAcrossProcesses) {
  const int n = GetParam();
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> server = TcpStoreServer::Start({});
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<WorkerOutcome> out = RunJob(n, "sweep", (*server)->port());
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(out[r].exit_code, 0) << "rank " << r << ":\n" << out[r].output;
    EXPECT_TRUE(absl::StrContains(out[r].output, absl::StrCat("GLOO_WORKER_OK rank=", r)))
        << out[r].output;
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, GlooProcessTest, ::testing::Values(2, 3, 4));

// Note [Agreement check]: ranks whose calls differ all fail alike with kInvalidArgument naming
// the odd rank's call, and the communicator keeps working; no process aborts.
TEST(GlooProcessAgreementTest, MismatchedCallsFailEveryRankWithoutAborting) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"mismatch_count", "allreduce #1 (float32 x 101, sum)"},
      {"mismatch_dtype", "allreduce #1 (int32 x 100, sum)"},
      {"mismatch_op", "broadcast #1 (float32 x 100, root 0)"},
      {"mismatch_root", "broadcast #1 (float32 x 100, root 1)"},
  };
  for (const auto& [scenario, odd_call] : cases) {
    absl::StatusOr<std::unique_ptr<TcpStoreServer>> server = TcpStoreServer::Start({});
    ASSERT_TRUE(server.ok()) << server.status();
    std::vector<WorkerOutcome> out = RunJob(3, scenario, (*server)->port());
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(out[r].exit_code, 0) << scenario << " rank " << r << ":\n" << out[r].output;
      EXPECT_TRUE(absl::StrContains(out[r].output, "GLOO_WORKER_MISMATCH INVALID_ARGUMENT"))
          << out[r].output;
      EXPECT_TRUE(absl::StrContains(out[r].output, odd_call)) << out[r].output;
    }
  }
}

TEST(GlooProcessDeathTest, DeadPeerFailsTheOthersNamingIt) {
  const int n = 3;
  absl::StatusOr<std::unique_ptr<TcpStoreServer>> server = TcpStoreServer::Start({});
  ASSERT_TRUE(server.ok()) << server.status();
  const absl::Time start = absl::Now();
  std::vector<WorkerOutcome> out = RunJob(n, "die", (*server)->port());
  EXPECT_LT(absl::Now() - start, absl::Seconds(120));  // the op timeout is 30 s; no hang
  EXPECT_EQ(out[n - 1].exit_code, 3) << out[n - 1].output;
  for (int r = 0; r < n - 1; ++r) {
    EXPECT_EQ(out[r].exit_code, 1) << out[r].output;
    EXPECT_TRUE(absl::StrContains(out[r].output, "GLOO_WORKER_ERROR UNAVAILABLE")) << out[r].output;
    EXPECT_TRUE(absl::StrContains(out[r].output, absl::StrCat("rank ", r, "/3"))) << out[r].output;
    // Gloo's messages name a peer only by an address, which we map back to its rank (Note [Gloo
    // peer addresses]). Rank 2 died first, but a rank may see its other neighbour close first.
    EXPECT_TRUE(absl::StrContains(out[r].output, "peer 2 ([127.0.0.1]:") ||
                absl::StrContains(out[r].output, absl::StrCat("peer ", 1 - r, " ([127.0.0.1]:")))
        << out[r].output;
    EXPECT_FALSE(absl::StrContains(out[r].output, "peers by the address Gloo names them"))
        << out[r].output;
    EXPECT_TRUE(absl::StrContains(out[r].output, "allreduce #1")) << out[r].output;
  }
}

}  // namespace
}  // namespace paddle

int main(int argc, char** argv) {
  if (argc >= 4 && std::strcmp(argv[1], paddle::kWorkerFlag) == 0) {
    double seconds = 0;
    if (!absl::SimpleAtod(argv[3], &seconds)) return 2;
    return paddle::RunWorker(argv[2], absl::Seconds(seconds));
  }
  // Ranks listen on loopback only (tests never leave the host).
  setenv("PADDLE_SOCKET_IFNAME", "127.0.0.1", 1);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
