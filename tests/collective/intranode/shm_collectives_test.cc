// Tests of the intra-node collectives over the node workspace (shm_collectives.h) and of the
// workspace itself, ranks as threads: every local size 1..8 x count (0, 1, n-1, n+1, a count that
// takes the one-phase small path, counts that take many rounds) x dtype x op, every element of
// every rank compared bit for bit (Note [Exact inputs] in rank_group.h); random floats give the
// same bits on every rank; reduce-scatter, allgather, broadcast from every root and alltoall; the
// hierarchical allreduce over "hosts" made of separate workspaces joined by the in-process
// transport; and the failure paths: a peer that never comes, a peer that aborts, a bad
// PADDLE_SHM_SLOT_BYTES, and no segment left in /dev/shm once the workspace is up.
#include "paddle/collective/intranode/shm_collectives.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "paddle/collective/intranode/node_workspace.h"
#include "paddle/collective/store/hash_store.h"
#include "tests/collective/algorithms/rank_group.h"

namespace paddle {
namespace {

using testing::HasSubstr;
using testutil::RankGroup;
using testutil::RankGroups;
using testutil::TransportKind;

constexpr DType kDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                             DType::kInt32,   DType::kInt64,   DType::kUInt8};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax,
                             ReduceOp::kProd};
// Small slots: many rounds from small buffers, so the double buffering is exercised cheaply.
constexpr size_t kTestSlotBytes = 4096;

// `hosts` x `local` ranks: the in-process transports of all of them and one workspace per host.
class Node {
 public:
  Node(RankGroup& group, int hosts, int local, size_t slot_bytes = kTestSlotBytes)
      : group_(group), hosts_(hosts), local_(local), workspaces_(hosts * local) {
    auto store = std::make_shared<HashStore>();
    static int generation = 0;
    const int gen = generation++;
    std::vector<absl::Status> created = group_.Run([&](int rank) -> absl::Status {
      NodeWorkspaceOptions o;
      o.local_rank = rank % local;
      o.local_size = local;
      for (int l = 0; l < local; ++l) o.global_ranks.push_back(rank / local * local + l);
      o.world_size = hosts * local;
      o.store = store;
      o.store_prefix = absl::StrCat("gen", gen, "/host", rank / local);
      o.slot_bytes = slot_bytes;
      ASSIGN_OR_RETURN(workspaces_[rank], NodeWorkspace::Create(o));
      return absl::OkStatus();
    });
    EXPECT_TRUE(testutil::AllOk(created)) << testutil::DescribeFailures(created);
  }
  NodeWorkspace& ws(int rank) { return *workspaces_[rank]; }
  // The global ranks with `rank`'s local rank, one per host.
  std::vector<int> Cross(int rank) const {
    std::vector<int> cross;
    for (int h = 0; h < hosts_; ++h) cross.push_back(h * local_ + rank % local_);
    return cross;
  }

 private:
  RankGroup& group_;
  int hosts_;
  int local_;
  std::vector<std::unique_ptr<NodeWorkspace>> workspaces_;
};

class ShmCollectivesTest : public testing::TestWithParam<int> {
 protected:
  static void SetUpTestSuite() { groups_ = new RankGroups; }
  static void TearDownTestSuite() {
    delete groups_;
    groups_ = nullptr;
  }
  int n() const { return GetParam(); }
  RankGroup& group(int size) { return groups_->Get(TransportKind::kInProcess, size); }
  static RankGroups* groups_;
};
RankGroups* ShmCollectivesTest::groups_ = nullptr;

std::vector<int64_t> Counts(int n) {
  // 0, 1, n-1, n+1, one-phase (<= one 4 KiB slot in float64 too), many rounds, uneven.
  return {0, 1, n - 1, n + 1, 500, 20011};
}

TEST_P(ShmCollectivesTest, AllreduceEveryCountDtypeAndOp) {
  RankGroup& g = group(n());
  Node node(g, 1, n());
  uint64_t seed = 1;
  for (int64_t count : Counts(n())) {
    for (DType dtype : kDTypes) {
      for (ReduceOp op : kOps) {
        if (!CheckReduction(dtype, op).ok()) continue;
        ++seed;
        const std::vector<uint8_t> want = testutil::ExpectedReduction(seed, n(), count, dtype, op);
        const uint64_t seq = g.NextSeq();
        std::vector<std::string> diffs(n());
        std::vector<absl::Status> s = g.Run([&](int rank) -> absl::Status {
          std::vector<uint8_t> data = testutil::MakeReductionInput(seed, rank, count, dtype, op);
          RETURN_IF_ERROR(ShmAllreduce(g.Context(rank, "allreduce", seq), node.ws(rank),
                                       data.data(), count, dtype, op));
          diffs[rank] = testutil::CompareElements(data, want, dtype);
          return absl::OkStatus();
        });
        ASSERT_TRUE(testutil::AllOk(s)) << testutil::DescribeFailures(s);
        for (int r = 0; r < n(); ++r) {
          ASSERT_EQ(diffs[r], "") << "rank " << r << " count " << count << " " << DTypeName(dtype)
                                  << " " << ReduceOpName(op);
        }
      }
    }
  }
}

TEST_P(ShmCollectivesTest, RandomFloatsGiveTheSameBitsOnEveryRank) {
  RankGroup& g = group(n());
  Node node(g, 1, n(), /*slot_bytes=*/size_t{512} << 10);
  for (int64_t count : {int64_t{1000}, int64_t{300007}}) {  // small path, large path
    std::vector<std::vector<uint8_t>> out(n());
    const uint64_t seq = g.NextSeq();
    std::vector<absl::Status> s = g.Run([&](int rank) -> absl::Status {
      std::vector<float> data(count);
      for (int64_t i = 0; i < count; ++i) {
        data[i] = static_cast<float>(testutil::Mix(7, rank, i) % 100000) / 7919.0f - 5.0f;
      }
      RETURN_IF_ERROR(ShmAllreduce(g.Context(rank, "allreduce", seq), node.ws(rank), data.data(),
                                   count, DType::kFloat32, ReduceOp::kSum));
      out[rank].resize(count * 4);
      std::memcpy(out[rank].data(), data.data(), count * 4);
      return absl::OkStatus();
    });
    ASSERT_TRUE(testutil::AllOk(s)) << testutil::DescribeFailures(s);
    for (int r = 1; r < n(); ++r) EXPECT_EQ(out[r], out[0]) << "rank " << r << " count " << count;
  }
}

TEST_P(ShmCollectivesTest, ReduceScatterAllgatherAndBroadcast) {
  RankGroup& g = group(n());
  Node node(g, 1, n());
  for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{3}, int64_t{2500}}) {
    for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kInt64, DType::kUInt8}) {
      const size_t es = DTypeSize(dtype);
      // Reduce-scatter: block r of the n-block sum, into a separate output and in place.
      for (bool in_place : {false, true}) {
        const uint64_t seed = 100 + count;
        const std::vector<uint8_t> want =
            testutil::ExpectedReduction(seed, n(), count * n(), dtype, ReduceOp::kSum);
        const uint64_t seq = g.NextSeq();
        std::vector<std::string> diffs(n());
        std::vector<absl::Status> s = g.Run([&](int rank) -> absl::Status {
          std::vector<uint8_t> in =
              testutil::MakeReductionInput(seed, rank, count * n(), dtype, ReduceOp::kSum);
          std::vector<uint8_t> separate(count * es);
          uint8_t* out = in_place ? in.data() + rank * count * es : separate.data();
          RETURN_IF_ERROR(ShmReduceScatter(g.Context(rank, "reduce_scatter", seq), node.ws(rank),
                                           in.data(), out, count, dtype, ReduceOp::kSum));
          std::vector<uint8_t> got(out, out + count * es);
          std::vector<uint8_t> expected(want.begin() + rank * count * es,
                                        want.begin() + (rank + 1) * count * es);
          diffs[rank] = testutil::CompareElements(got, expected, dtype);
          return absl::OkStatus();
        });
        ASSERT_TRUE(testutil::AllOk(s)) << testutil::DescribeFailures(s);
        for (int r = 0; r < n(); ++r) ASSERT_EQ(diffs[r], "") << "reduce_scatter rank " << r;
      }
      // Allgather.
      {
        const uint64_t seq = g.NextSeq();
        std::vector<std::string> diffs(n());
        std::vector<absl::Status> s = g.Run([&](int rank) -> absl::Status {
          const std::vector<uint8_t> in = testutil::MakeBytes(5, rank, count * es);
          std::vector<uint8_t> out(count * es * n(), 0xee);
          RETURN_IF_ERROR(ShmAllgather(g.Context(rank, "allgather", seq), node.ws(rank), in.data(),
                                       out.data(), count, dtype));
          for (int j = 0; j < n(); ++j) {
            const std::vector<uint8_t> want = testutil::MakeBytes(5, j, count * es);
            if (!std::equal(want.begin(), want.end(), out.begin() + j * count * es)) {
              diffs[rank] = absl::StrCat("block ", j, " differs");
            }
          }
          return absl::OkStatus();
        });
        ASSERT_TRUE(testutil::AllOk(s)) << testutil::DescribeFailures(s);
        for (int r = 0; r < n(); ++r) ASSERT_EQ(diffs[r], "") << "allgather rank " << r;
      }
      // Broadcast from every root.
      for (int root = 0; root < n(); ++root) {
        const uint64_t seq = g.NextSeq();
        std::vector<std::string> diffs(n());
        std::vector<absl::Status> s = g.Run([&](int rank) -> absl::Status {
          std::vector<uint8_t> data = testutil::MakeBytes(9, rank, count * es);
          RETURN_IF_ERROR(ShmBroadcast(g.Context(rank, "broadcast", seq), node.ws(rank),
                                       data.data(), count, dtype, root));
          if (data != testutil::MakeBytes(9, root, count * es)) diffs[rank] = "differs";
          return absl::OkStatus();
        });
        ASSERT_TRUE(testutil::AllOk(s)) << testutil::DescribeFailures(s);
        for (int r = 0; r < n(); ++r) ASSERT_EQ(diffs[r], "") << "broadcast root " << root;
      }
    }
  }
}

// Every pair of blocks, for counts that fit one round, end mid-piece and take many rounds of the
// 4 KiB test slots (2500 x 8 bytes over up to 8 parts), into a separate output and in place.
TEST_P(ShmCollectivesTest, AlltoallEveryBlockReachesItsRank) {
  RankGroup& g = group(n());
  Node node(g, 1, n());
  for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{n() + 1}, int64_t{97}, int64_t{2500}}) {
    for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kInt64, DType::kUInt8}) {
      const size_t block = count * DTypeSize(dtype);
      for (bool in_place : {false, true}) {
        const uint64_t seq = g.NextSeq();
        std::vector<std::string> diffs(n());
        std::vector<absl::Status> s = g.Run([&](int rank) -> absl::Status {
          std::vector<uint8_t> in = testutil::MakeBytes(11, rank, block * n());
          std::vector<uint8_t> separate(block * n(), 0xee);
          uint8_t* out = in_place ? in.data() : separate.data();
          RETURN_IF_ERROR(ShmAlltoall(g.Context(rank, "alltoall", seq), node.ws(rank), in.data(),
                                      out, count, dtype));
          for (int j = 0; j < n(); ++j) {
            // Block `rank` of rank j's input.
            const std::vector<uint8_t> sent = testutil::MakeBytes(11, j, block * n());
            if (!std::equal(sent.begin() + rank * block, sent.begin() + (rank + 1) * block,
                            out + j * block)) {
              diffs[rank] = absl::StrCat("block from rank ", j, " differs");
            }
          }
          return absl::OkStatus();
        });
        ASSERT_TRUE(testutil::AllOk(s)) << testutil::DescribeFailures(s);
        for (int r = 0; r < n(); ++r) {
          ASSERT_EQ(diffs[r], "") << "alltoall rank " << r << " count " << count << " "
                                  << DTypeName(dtype) << (in_place ? " in place" : "");
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(LocalSizes, ShmCollectivesTest, testing::Range(1, 9));

// (hosts, ranks per host)
class HierarchicalTest : public testing::TestWithParam<std::pair<int, int>> {};

TEST_P(HierarchicalTest, AllreduceEveryCountDtypeAndOp) {
  const auto [hosts, local] = GetParam();
  const int world = hosts * local;
  absl::StatusOr<std::unique_ptr<RankGroup>> created =
      RankGroup::Create(world, TransportKind::kInProcess);
  ASSERT_TRUE(created.ok()) << created.status();
  RankGroup& g = **created;
  Node node(g, hosts, local);
  uint64_t seed = 50;
  for (int64_t count : {int64_t{0}, int64_t{1}, int64_t{world + 1}, int64_t{20011}}) {
    for (DType dtype : {DType::kFloat32, DType::kFloat16, DType::kInt32, DType::kUInt8}) {
      for (ReduceOp op : kOps) {
        if (!CheckReduction(dtype, op).ok()) continue;
        ++seed;
        const std::vector<uint8_t> want =
            testutil::ExpectedReduction(seed, world, count, dtype, op);
        const uint64_t seq = g.NextSeq();
        std::vector<std::string> diffs(world);
        std::vector<absl::Status> s = g.Run([&](int rank) -> absl::Status {
          std::vector<uint8_t> data = testutil::MakeReductionInput(seed, rank, count, dtype, op);
          RETURN_IF_ERROR(HierarchicalAllreduce(g.Context(rank, "allreduce", seq), node.ws(rank),
                                                node.Cross(rank), AlgorithmSelector(), data.data(),
                                                count, dtype, op));
          diffs[rank] = testutil::CompareElements(data, want, dtype);
          return absl::OkStatus();
        });
        ASSERT_TRUE(testutil::AllOk(s)) << testutil::DescribeFailures(s);
        for (int r = 0; r < world; ++r) {
          ASSERT_EQ(diffs[r], "") << "rank " << r << " count " << count << " " << DTypeName(dtype)
                                  << " " << ReduceOpName(op);
        }
      }
    }
  }
}

// Buffers of 2 x kHierarchicalChunkBytes and more run chunk by chunk, the cross-host step on a
// helper thread (Note [Pipelined hierarchical allreduce]).
TEST_P(HierarchicalTest, PipelinedLargeBuffers) {
  const auto [hosts, local] = GetParam();
  const int world = hosts * local;
  absl::StatusOr<std::unique_ptr<RankGroup>> created =
      RankGroup::Create(world, TransportKind::kInProcess);
  ASSERT_TRUE(created.ok()) << created.status();
  RankGroup& g = **created;
  Node node(g, hosts, local, /*slot_bytes=*/size_t{512} << 10);
  // Three and a bit chunks of float32; two and a bit of float16 (odd counts, uneven blocks).
  for (auto [count, dtype] : {std::make_pair(int64_t{3} * (1 << 20) + 7, DType::kFloat32),
                              std::make_pair(int64_t{5} * (1 << 20) + 1, DType::kFloat16)}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      const uint64_t seed = 900 + static_cast<int>(op);
      const std::vector<uint8_t> want = testutil::ExpectedReduction(seed, world, count, dtype, op);
      const uint64_t seq = g.NextSeq();
      std::vector<std::string> diffs(world);
      std::vector<absl::Status> s = g.Run([&](int rank) -> absl::Status {
        std::vector<uint8_t> data = testutil::MakeReductionInput(seed, rank, count, dtype, op);
        RETURN_IF_ERROR(HierarchicalAllreduce(g.Context(rank, "allreduce", seq), node.ws(rank),
                                              node.Cross(rank), AlgorithmSelector(), data.data(),
                                              count, dtype, op));
        diffs[rank] = testutil::CompareElements(data, want, dtype);
        return absl::OkStatus();
      });
      ASSERT_TRUE(testutil::AllOk(s)) << testutil::DescribeFailures(s);
      for (int r = 0; r < world; ++r) {
        ASSERT_EQ(diffs[r], "") << "rank " << r << " " << DTypeName(dtype) << " "
                                << ReduceOpName(op);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(HostsByRanks, HierarchicalTest,
                         testing::Values(std::make_pair(2, 2), std::make_pair(3, 2),
                                         std::make_pair(2, 3), std::make_pair(2, 1),
                                         std::make_pair(1, 3)));

// ---- Failures ----

TEST(ShmWorkspaceFailureTest, PeerThatNeverComesTimesOutNamingIt) {
  absl::StatusOr<std::unique_ptr<RankGroup>> created =
      RankGroup::Create(2, TransportKind::kInProcess);
  ASSERT_TRUE(created.ok()) << created.status();
  RankGroup& g = **created;
  Node node(g, 1, 2);
  std::vector<float> data(100000, 1.0f);
  AlgorithmContext ctx(g.transport(0), "allreduce", g.NextSeq(), Deadline::After(absl::Seconds(1)));
  const absl::Time start = absl::Now();
  const absl::Status s =
      ShmAllreduce(ctx, node.ws(0), data.data(), 100000, DType::kFloat32, ReduceOp::kSum);
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("rank 1 (pid ", getpid())));
  EXPECT_THAT(s.message(), HasSubstr("op allreduce"));
  EXPECT_THAT(s.message(), HasSubstr("rank 0/2"));
}

TEST(ShmWorkspaceFailureTest, AbortedPeerFailsTheOthersWithItsCause) {
  absl::StatusOr<std::unique_ptr<RankGroup>> created =
      RankGroup::Create(3, TransportKind::kInProcess);
  ASSERT_TRUE(created.ok()) << created.status();
  RankGroup& g = **created;
  Node node(g, 1, 3);
  node.ws(2).Abort(absl::InternalError("rank 2 ran out of patience"));
  const uint64_t seq = g.NextSeq();
  std::vector<absl::Status> s = g.Run([&](int rank) -> absl::Status {
    if (rank == 2) return absl::OkStatus();
    std::vector<float> data(1000, 1.0f);
    AlgorithmContext ctx(g.transport(rank), "allreduce", seq, Deadline::After(absl::Seconds(60)));
    return ShmAllreduce(ctx, node.ws(rank), data.data(), 1000, DType::kFloat32, ReduceOp::kSum);
  });
  for (int rank : {0, 1}) {
    EXPECT_TRUE(absl::IsUnavailable(s[rank])) << s[rank];
    EXPECT_THAT(s[rank].message(), HasSubstr("ran out of patience"));
  }
}

// The segments in /dev/shm whose names start with `prefix`.
std::set<std::string> ShmSegments(const std::string& prefix) {
  std::set<std::string> names;
  DIR* dir = opendir("/dev/shm");
  EXPECT_NE(dir, nullptr);
  if (dir == nullptr) return names;
  while (struct dirent* entry = readdir(dir)) {
    if (absl::StartsWith(entry->d_name, prefix)) names.insert(entry->d_name);
  }
  closedir(dir);
  return names;
}

TEST(ShmWorkspaceTest, SegmentIsUnlinkedOnceEveryRankHasIt) {
  struct stat st;
  ASSERT_EQ(stat("/proc/self/ns/pid", &st), 0);
  const std::string mine = absl::StrCat("paddle-", st.st_ino, "-", getpid(), "-");
  // Segments a killed process left behind may carry the same prefix (sandboxes recycle PID
  // namespaces and PIDs): only what this test creates counts.
  const std::set<std::string> before = ShmSegments(mine);
  absl::StatusOr<std::unique_ptr<RankGroup>> created =
      RankGroup::Create(4, TransportKind::kInProcess);
  ASSERT_TRUE(created.ok()) << created.status();
  Node node(**created, 1, 4);
  for (const std::string& name : ShmSegments(mine)) {
    EXPECT_TRUE(before.count(name) == 1) << name << " was left behind";
  }
}

TEST(ShmWorkspaceTest, BadSlotSizeNamesTheVariable) {
  setenv(kSlotBytesEnvVar, "5000", 1);
  absl::StatusOr<size_t> bytes = SlotBytesFromEnv();
  unsetenv(kSlotBytesEnvVar);
  ASSERT_FALSE(bytes.ok());
  EXPECT_THAT(bytes.status().message(),
              HasSubstr("PADDLE_SHM_SLOT_BYTES=\"5000\" is not a multiple of 4096"));
  EXPECT_EQ(*SlotBytesFromEnv(), 0u);  // unset: the communicator chooses
}

TEST(ShmWorkspaceTest, MismatchedSlotSizesFailClearly) {
  auto store = std::make_shared<HashStore>();
  std::unique_ptr<NodeWorkspace> first;
  absl::Status second;
  std::thread creator([&] {
    NodeWorkspaceOptions o;
    o.local_rank = 0;
    o.local_size = 2;
    o.global_ranks = {0, 1};
    o.world_size = 2;
    o.store = store;
    o.connect_timeout = absl::Seconds(2);
    absl::StatusOr<std::unique_ptr<NodeWorkspace>> ws = NodeWorkspace::Create(o);
    EXPECT_FALSE(ws.ok());  // the peer never attaches
    if (ws.ok()) first = *std::move(ws);
  });
  NodeWorkspaceOptions o;
  o.local_rank = 1;
  o.local_size = 2;
  o.global_ranks = {0, 1};
  o.world_size = 2;
  o.store = store;
  o.slot_bytes = 8192;
  o.connect_timeout = absl::Seconds(2);
  second = NodeWorkspace::Create(o).status();
  creator.join();
  EXPECT_TRUE(absl::IsFailedPrecondition(second)) << second;
  EXPECT_THAT(second.message(), HasSubstr("PADDLE_SHM_SLOT_BYTES"));
}

}  // namespace
}  // namespace paddle
