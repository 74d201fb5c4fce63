// Communicator::Shutdown (communicator.h) on every backend this build runs on the CPU: a clean
// job's Shutdown is OK on every rank, after the operations submitted before it completed; a
// second one returns the same; later calls, a Split too, fail with kFailedPrecondition naming
// the rank. The mismatch of a job's last call that only Shutdown reports is in
// ring_stamp_test.cc. Ranks are threads.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
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

struct ShutdownCase {
  const char* name;
  Backend backend;
  bool debug_checks;
};

class ShutdownTest : public testing::TestWithParam<ShutdownCase> {};
INSTANTIATE_TEST_SUITE_P(
    Backends, ShutdownTest,
    testing::Values(ShutdownCase{"native", Backend::kNative, false},
                    ShutdownCase{"gloo", Backend::kGloo, false},
                    ShutdownCase{"native_debug_checks", Backend::kNative, true}),
    [](const testing::TestParamInfo<ShutdownCase>& info) { return std::string(info.param.name); });

TEST_P(ShutdownTest, CleanJobIsOkAndLaterCallsFail) {
  GroupOptions options;
  options.backend = GetParam().backend;
  options.debug_checks = GetParam().debug_checks;
  options.world_size = 3;
  absl::StatusOr<std::unique_ptr<CommGroup>> group = CommGroup::Create(options);
  ASSERT_TRUE(group.ok()) << group.status();
  std::vector<absl::Status> statuses = (*group)->Run([&](int rank, Communicator& comm) {
    constexpr int64_t kCount = 100;
    for (uint64_t seed = 0; seed < 3; ++seed) {
      Tensor t = MakeReductionInput(kCount, DType::kFloat32, seed, rank, ReduceOp::kSum);
      std::shared_ptr<Work> work = comm.Allreduce(t, ReduceOp::kSum);
      RETURN_IF_ERROR(work->Wait());
      RETURN_IF_ERROR(CompareElements(
          t, ExpectedReduction(0, kCount, DType::kFloat32, comm.world_size(), seed, ReduceOp::kSum),
          0, work->Describe()));
    }
    // The last call is not waited for: Shutdown waits for it.
    Tensor t = MakeReductionInput(kCount, DType::kFloat32, 9, rank, ReduceOp::kSum);
    std::shared_ptr<Work> last = comm.Allreduce(t, ReduceOp::kSum);
    RETURN_IF_ERROR(comm.Shutdown());
    if (!last->IsCompleted()) return absl::InternalError("Shutdown left the last call running");
    RETURN_IF_ERROR(last->status());
    RETURN_IF_ERROR(comm.Shutdown());
    const absl::Status after = comm.Allreduce(t, ReduceOp::kSum)->Wait();
    if (!absl::IsFailedPrecondition(after) ||
        !absl::StrContains(after.message(), "communicator was shut down") ||
        !absl::StrContains(after.message(), absl::StrCat("rank ", rank, "/3"))) {
      return absl::InternalError(absl::StrCat("a call after Shutdown: ", after.ToString()));
    }
    absl::StatusOr<std::unique_ptr<Communicator>> split = comm.Split({0, 1, 2});
    if (!absl::IsFailedPrecondition(split.status())) {
      return absl::InternalError(
          absl::StrCat("a Split after Shutdown: ", split.status().ToString()));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(AllOk(statuses)) << DescribeFailures(statuses);
}

}  // namespace
}  // namespace paddle
