// Every collective of the native communicator, ranks as threads, checked element by element:
// world sizes 1..8, element counts 0, 1, size-1, size+1 and larger ones, every dtype x reduce op
// x algorithm for allreduce, and a representative set for the other collectives, plus a few
// 64 MiB allreduces. Inputs follow Note [Exact communicator inputs] (communicator_testing.h).
//
// Each case issues all its operations at once (many Works in flight per rank), then waits for
// them, for the collectives other than allreduce in reverse order, then checks every output.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "paddle/collective/communicator.h"
#include "paddle/core/status.h"
#include "paddle/core/tensor.h"
#include "tests/collective/communicator_testing.h"

namespace paddle {
namespace {

using commtest::AllOk;
using commtest::CommGroup;
using commtest::CompareElements;
using commtest::DescribeFailures;
using commtest::ExpectedReduction;
using commtest::GroupOptions;
using commtest::MakeReductionInput;
using commtest::NewTensor;

constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax,
                             ReduceOp::kProd};

std::unique_ptr<CommGroup> MakeGroup(int n, const std::string& algorithm) {
  GroupOptions options;
  options.world_size = n;
  options.algorithm = algorithm;
  absl::StatusOr<std::unique_ptr<CommGroup>> group = CommGroup::Create(options);
  EXPECT_TRUE(group.ok()) << group.status();
  return group.ok() ? std::move(*group) : nullptr;
}

// 0, 1, n-1, n+1 and a count that is not a multiple of small world sizes.
std::vector<int64_t> SmallCounts(int n) {
  std::vector<int64_t> counts = {0, 1, n - 1, n + 1, 4099};
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  return counts;
}

struct ReduceCase {
  DType dtype;
  ReduceOp op;
};

std::vector<ReduceCase> EveryDTypeAndOp() {
  std::vector<ReduceCase> cases;
  for (DType dtype : commtest::SweepDTypes()) {
    for (ReduceOp op : kOps) {
      if (commtest::OpApplies(dtype, op)) cases.push_back({dtype, op});
    }
  }
  return cases;
}

// Larger buffers (pipelined pieces, every row of the algorithm table) with a few combinations.
const std::vector<ReduceCase> kLargeCases = {{DType::kFloat32, ReduceOp::kSum},
                                             {DType::kBFloat16, ReduceOp::kAvg},
                                             {DType::kInt64, ReduceOp::kProd},
                                             {DType::kUInt8, ReduceOp::kMax},
                                             {DType::kFloat16, ReduceOp::kMin}};
constexpr int64_t kLargeCount = 300007;  // 1.2 MB of float32: several 256 KiB pieces at n = 2

// Runs `cases` x `count` as one batch on every rank of `group`: all allreduces issued, then
// waited and checked.
void RunAllreduceBatch(CommGroup& group, const std::vector<ReduceCase>& cases, int64_t count,
                       uint64_t seed, const std::string& label) {
  const int n = group.size();
  std::vector<Tensor> expected;
  for (size_t c = 0; c < cases.size(); ++c) {
    expected.push_back(ExpectedReduction(0, count, cases[c].dtype, n, seed + c, cases[c].op));
  }
  std::vector<absl::Status> statuses = group.Run([&](int rank, Communicator& comm) {
    std::vector<Tensor> tensors;
    std::vector<std::shared_ptr<Work>> works;
    for (size_t c = 0; c < cases.size(); ++c) {
      tensors.push_back(MakeReductionInput(count, cases[c].dtype, seed + c, rank, cases[c].op));
      works.push_back(comm.Allreduce(tensors.back(), cases[c].op));
    }
    for (size_t c = 0; c < cases.size(); ++c) {
      RETURN_IF_ERROR(works[c]->Wait());
      RETURN_IF_ERROR(CompareElements(tensors[c], expected[c], 0, works[c]->Describe()));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(AllOk(statuses)) << label << ": " << DescribeFailures(statuses);
}

class CommunicatorSweepTest : public testing::TestWithParam<int> {};

TEST_P(CommunicatorSweepTest, AllreduceEveryDTypeOpAlgorithmAndCount) {
  const int n = GetParam();
  const std::vector<ReduceCase> every = EveryDTypeAndOp();
  for (const std::string algorithm : {"", "ring", "tree", "hd"}) {
    std::unique_ptr<CommGroup> group = MakeGroup(n, algorithm);
    ASSERT_NE(group, nullptr);
    uint64_t seed = 1000;
    for (int64_t count : SmallCounts(n)) {
      RunAllreduceBatch(*group, every, count, seed,
                        absl::StrCat("algorithm '", algorithm, "', count ", count));
      seed += every.size();
    }
    RunAllreduceBatch(*group, kLargeCases, kLargeCount, seed,
                      absl::StrCat("algorithm '", algorithm, "', count ", kLargeCount));
  }
}

// ---- The other collectives ----

// Per-rank-pair counts of the alltoallv case: zeros included, and not symmetric.
int64_t PairCount(int from, int to, int64_t base) { return (from + 2 * to + base) % 5; }

// Per-rank counts of the allgatherv case: zeros included.
int64_t GatherCount(int rank, int64_t base) { return rank % 3 == 1 ? 0 : base + rank; }

// Everything but allreduce, issued at once on every rank and waited in reverse order.
absl::Status RunOtherCollectives(int rank, Communicator& comm, int64_t count, uint64_t seed,
                                 const std::vector<ReduceCase>& reduce_cases,
                                 const std::vector<Tensor>& reduce_expected,
                                 const std::vector<Tensor>& scatter_expected) {
  const int n = comm.world_size();
  std::vector<std::shared_ptr<Work>> works;
  std::vector<std::function<absl::Status()>> checks;
  const DType kByteTypes[] = {DType::kFloat32, DType::kFloat16, DType::kUInt8, DType::kInt64};

  // Broadcast from three roots, arbitrary bytes.
  for (int root : {0, n - 1, n / 2}) {
    for (DType dtype : kByteTypes) {
      Tensor t = NewTensor(count, dtype);
      commtest::FillBytes(t, seed + root, rank);  // the root's bytes are what everyone gets
      works.push_back(comm.Broadcast(t, root));
      checks.push_back([=, &works, index = works.size() - 1] {
        return commtest::CheckBytes(t, 0, t.nbytes(), seed + root, root, 0,
                                    works[index]->Describe());
      });
    }
  }
  // Reduce to two roots.
  for (size_t c = 0; c < reduce_cases.size(); ++c) {
    const int root = static_cast<int>(c) % 2 == 0 ? 0 : n - 1;
    Tensor t =
        MakeReductionInput(count, reduce_cases[c].dtype, seed + 10 + c, rank, reduce_cases[c].op);
    works.push_back(comm.Reduce(t, root, reduce_cases[c].op));
    if (rank == root) {
      checks.push_back([=, &works, &reduce_expected, index = works.size() - 1] {
        return CompareElements(t, reduce_expected[c], 0, works[index]->Describe());
      });
    }
  }
  // Allgather and allgatherv.
  for (DType dtype : {DType::kFloat64, DType::kBFloat16}) {
    Tensor in = NewTensor(count, dtype);
    Tensor out = NewTensor(n * count, dtype);
    commtest::FillBytes(in, seed + 20, rank);
    works.push_back(comm.Allgather(in, out));
    checks.push_back([=, &works, index = works.size() - 1] {
      for (int r = 0; r < n; ++r) {
        RETURN_IF_ERROR(commtest::CheckBytes(out, r * in.nbytes(), in.nbytes(), seed + 20, r, 0,
                                             absl::StrCat(works[index]->Describe(), " block ", r)));
      }
      return absl::OkStatus();
    });
  }
  {
    std::vector<int64_t> counts;
    int64_t total = 0;
    for (int r = 0; r < n; ++r) {
      counts.push_back(GatherCount(r, count));
      total += counts.back();
    }
    Tensor in = NewTensor(counts[rank], DType::kInt32);
    Tensor out = NewTensor(total, DType::kInt32);
    commtest::FillBytes(in, seed + 21, rank);
    works.push_back(comm.Allgatherv(in, out, counts));
    checks.push_back([=, &works, index = works.size() - 1] {
      int64_t offset = 0;
      for (int r = 0; r < n; ++r) {
        RETURN_IF_ERROR(commtest::CheckBytes(out, offset * 4, counts[r] * 4, seed + 21, r, 0,
                                             absl::StrCat(works[index]->Describe(), " block ", r)));
        offset += counts[r];
      }
      return absl::OkStatus();
    });
  }
  // Reduce-scatter: `count` elements per rank.
  for (size_t c = 0; c < reduce_cases.size(); ++c) {
    Tensor in = MakeReductionInput(n * count, reduce_cases[c].dtype, seed + 30 + c, rank,
                                   reduce_cases[c].op);
    Tensor out = NewTensor(count, reduce_cases[c].dtype);
    works.push_back(comm.ReduceScatter(in, out, reduce_cases[c].op));
    checks.push_back([=, &works, &scatter_expected, index = works.size() - 1] {
      // Block `rank` of the full reduction.
      absl::StatusOr<Tensor> block = scatter_expected[c].Slice(0, rank * count, (rank + 1) * count);
      RETURN_IF_ERROR(block.status());
      return CompareElements(out, *block, rank * count, works[index]->Describe());
    });
  }
  // Alltoall and alltoallv.
  {
    Tensor in = NewTensor(n * count, DType::kFloat32);
    Tensor out = NewTensor(n * count, DType::kFloat32);
    commtest::FillBytes(in, seed + 40, rank);
    works.push_back(comm.Alltoall(in, out));
    checks.push_back([=, &works, index = works.size() - 1] {
      const int64_t block = count * 4;
      for (int j = 0; j < n; ++j) {
        RETURN_IF_ERROR(commtest::CheckBytes(out, j * block, block, seed + 40, j, rank * block,
                                             absl::StrCat(works[index]->Describe(), " block ", j)));
      }
      return absl::OkStatus();
    });
  }
  {
    std::vector<int64_t> send_counts;
    std::vector<int64_t> recv_counts;
    int64_t send_total = 0;
    int64_t recv_total = 0;
    for (int j = 0; j < n; ++j) {
      send_counts.push_back(PairCount(rank, j, count));
      recv_counts.push_back(PairCount(j, rank, count));
      send_total += send_counts.back();
      recv_total += recv_counts.back();
    }
    Tensor in = NewTensor(send_total, DType::kInt64);
    Tensor out = NewTensor(recv_total, DType::kInt64);
    commtest::FillBytes(in, seed + 41, rank);
    works.push_back(comm.Alltoallv(in, out, send_counts, recv_counts));
    checks.push_back([=, &works, index = works.size() - 1] {
      int64_t offset = 0;
      for (int j = 0; j < n; ++j) {
        // Rank j's block for this rank starts after its blocks for ranks 0..rank-1.
        int64_t their_offset = 0;
        for (int k = 0; k < rank; ++k) their_offset += PairCount(j, k, count);
        RETURN_IF_ERROR(commtest::CheckBytes(out, offset * 8, recv_counts[j] * 8, seed + 41, j,
                                             their_offset * 8,
                                             absl::StrCat(works[index]->Describe(), " block ", j)));
        offset += recv_counts[j];
      }
      return absl::OkStatus();
    });
  }
  works.push_back(comm.Barrier());
  // Send and receive around the ring, both ways, with two tags.
  if (n > 1) {
    const int right = (rank + 1) % n;
    const int left = (rank + n - 1) % n;
    Tensor to_right = NewTensor(count, DType::kUInt8);
    Tensor to_left = NewTensor(count + 1, DType::kUInt8);
    Tensor from_left = NewTensor(count, DType::kUInt8);
    Tensor from_right = NewTensor(count + 1, DType::kUInt8);
    commtest::FillBytes(to_right, seed + 50, rank);
    commtest::FillBytes(to_left, seed + 51, rank);
    works.push_back(comm.Send(to_right, right, 3));
    works.push_back(comm.Send(to_left, left, 4));
    works.push_back(comm.Recv(from_right, right, 4));
    works.push_back(comm.Recv(from_left, left, 3));
    checks.push_back([=] {
      RETURN_IF_ERROR(commtest::CheckBytes(from_left, 0, count, seed + 50, left, 0, "recv tag 3"));
      return commtest::CheckBytes(from_right, 0, count + 1, seed + 51, right, 0, "recv tag 4");
    });
  }

  for (auto it = works.rbegin(); it != works.rend(); ++it) RETURN_IF_ERROR((*it)->Wait());
  for (auto& check : checks) RETURN_IF_ERROR(check());
  return absl::OkStatus();
}

TEST_P(CommunicatorSweepTest, OtherCollectives) {
  const int n = GetParam();
  const std::vector<ReduceCase> reduce_cases = {
      {DType::kFloat32, ReduceOp::kSum},  {DType::kFloat64, ReduceOp::kAvg},
      {DType::kFloat16, ReduceOp::kProd}, {DType::kBFloat16, ReduceOp::kSum},
      {DType::kInt32, ReduceOp::kMin},    {DType::kInt64, ReduceOp::kMax},
      {DType::kUInt8, ReduceOp::kProd}};
  // The broadcast table has two rows; forcing each algorithm covers both at every size.
  for (const std::string algorithm : {"", "ring", "tree"}) {
    std::unique_ptr<CommGroup> group = MakeGroup(n, algorithm);
    ASSERT_NE(group, nullptr);
    uint64_t seed = 5000;
    std::vector<int64_t> counts = SmallCounts(n);
    if (algorithm.empty()) counts.push_back(70001);
    for (int64_t count : counts) {
      std::vector<Tensor> reduce_expected;
      std::vector<Tensor> scatter_expected;
      for (size_t c = 0; c < reduce_cases.size(); ++c) {
        reduce_expected.push_back(ExpectedReduction(0, count, reduce_cases[c].dtype, n,
                                                    seed + 10 + c, reduce_cases[c].op));
        scatter_expected.push_back(ExpectedReduction(0, n * count, reduce_cases[c].dtype, n,
                                                     seed + 30 + c, reduce_cases[c].op));
      }
      std::vector<absl::Status> statuses = group->Run([&](int rank, Communicator& comm) {
        return RunOtherCollectives(rank, comm, count, seed, reduce_cases, reduce_expected,
                                   scatter_expected);
      });
      EXPECT_TRUE(AllOk(statuses)) << "algorithm '" << algorithm << "', count " << count << ": "
                                   << DescribeFailures(statuses);
      seed += 100;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, CommunicatorSweepTest, testing::Range(1, 9),
                         [](const testing::TestParamInfo<int>& info) {
                           return absl::StrCat("n", info.param);
                         });

// ---- 64 MiB ----

struct BigCase {
  int world_size;
  std::string algorithm;
  DType dtype;
  ReduceOp op;
};

TEST(CommunicatorBigTest, SixtyFourMebibyteAllreduces) {
  constexpr int64_t kBytes = int64_t{64} << 20;
  const BigCase cases[] = {{4, "", DType::kFloat32, ReduceOp::kSum},
                           {3, "", DType::kBFloat16, ReduceOp::kAvg},
                           {5, "hd", DType::kInt32, ReduceOp::kMax}};
  for (const BigCase& big : cases) {
    std::unique_ptr<CommGroup> group = MakeGroup(big.world_size, big.algorithm);
    ASSERT_NE(group, nullptr);
    const int64_t count = kBytes / static_cast<int64_t>(DTypeSize(big.dtype));
    RunAllreduceBatch(
        *group, {{big.dtype, big.op}}, count, 77,
        absl::StrCat("64 MiB on ", big.world_size, " ranks, algorithm '", big.algorithm, "'"));
  }
}

}  // namespace
}  // namespace paddle
